// Scheduler: decides what one step runs. Generating sessions get their next token first
// (decode), then queued input is prefilled in chunks until the step's token budget is
// spent. Higher priority first; equal priority in admission order, so nobody starves.
#pragma once

#include <cstdint>
#include <vector>

namespace llmkv {

// What the scheduler needs to know about a session.
struct SchedCandidate {
    uint32_t index;         // caller's index of the session
    int32_t priority;
    uint64_t admit_seq;     // order in which the session asked for work
    uint32_t n_pending;     // tokens that may be run this step (after the budget check)
    bool decoding;          // generating, with exactly its last token pending
};

struct SchedItem {
    uint32_t index;
    uint32_t n_tokens;      // tokens of the session to run this step
};

class Scheduler {
public:
    explicit Scheduler(uint32_t max_batch_tokens) : max_batch_tokens_(max_batch_tokens) {}

    // Plans one step into plan (cleared first; sorts candidates in place: both are the
    // caller's reusable buffers, so a step allocates nothing once warm). The items never
    // exceed the token budget in total, except that at least one token is always scheduled
    // when any candidate has work.
    void plan_step(std::vector<SchedCandidate> &candidates, std::vector<SchedItem> &plan) const;

    uint32_t max_batch_tokens() const { return max_batch_tokens_; }

private:
    uint32_t max_batch_tokens_;
};

}  // namespace llmkv
