// Scheduler: the policy of the engine. Each step it decides which requests run and how many
// tokens each (decode first, then queued input prefilled in chunks under the token budget;
// higher priority first, equal priority in admission order), and it makes that plan fit the
// KV pool: admission only with a watermark of free blocks while others run, in order (a
// large request is not starved by small ones); victim choice when the pool runs dry (idle
// requests least recently active first, then running ones ranked below: lowest priority,
// most recently admitted first); swap to the host tier or drop-and-recompute; parked
// requests with work brought back first; long contexts offloaded to the host tier; a
// request that could never fit gets an error instead of hanging. It acts through the KV
// manager; the engine applies the resulting plan (runs the batch, samples, emits events).
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_manager.h"
#include "sched/request.h"

namespace llmkv {

// What the scheduler needs to know about a request to order a step.
struct SchedCandidate {
    uint32_t index;  // caller's index of the request
    int32_t priority;
    uint64_t admit_seq;  // order in which the request asked for work
    uint32_t n_pending;  // tokens that may be run this step (after the budget check)
    bool decoding;       // generating, with exactly its last token pending
};

struct SchedItem {
    uint32_t index;
    uint32_t n_tokens;  // tokens of the request to run this step
};

// One step's plan: the spans to run (their KV reserved) and the requests that failed with
// LLMKV_ERR_KV_CAPACITY (already updated; the engine reports them, in this order, before
// running the spans).
struct StepPlan {
    struct Span {
        Request *request;
        uint32_t n_tokens;  // run tokens [n_tokens(), n_tokens() + n_tokens) of the request's KV
        bool want_logits;
        const uint8_t *const *block_data;  // host-tier blocks read in place, or nullptr
    };
    std::vector<Span> spans;
    std::vector<Request *> failed;
    void clear() {
        spans.clear();
        failed.clear();
    }
};

struct SchedCounters {
    uint64_t preemptions = 0;
    uint64_t swaps = 0;  // running requests preempted to the host tier
    uint64_t parks = 0;  // idle requests parked under pressure
};

class Scheduler {
public:
    Scheduler(KvManager &kv, uint32_t max_batch_tokens, uint32_t admission_watermark = 1)
        : kv_(kv), max_batch_tokens_(max_batch_tokens), admission_watermark_(admission_watermark) {
        kv_.set_max_step_tokens(max_batch_tokens);
    }

    // Plans one step over the live requests (in creation order) into plan (cleared first).
    // Preempts, parks, resumes and reserves KV as it goes. When it throws (an allocation),
    // no request keeps blocks reserved beyond its computed tokens and the plan is empty.
    void schedule(const std::vector<Request *> &requests, StepPlan &plan);
    // Brings a parked request's KV back to the device now, preempting others if needed
    // (KV_CAPACITY when it cannot).
    void bring_back(const std::vector<Request *> &requests, Request *r);
    // Finishes every completed copy (parks and resumes).
    void reap_copies(const std::vector<Request *> &requests);

    // Orders one step's candidates into items (cleared first; sorts candidates in place:
    // both are the caller's reusable buffers, so a step allocates nothing once warm). The
    // items never exceed the token budget in total, except that at least one token is
    // always scheduled when any candidate has work.
    void plan_step(std::vector<SchedCandidate> &candidates, std::vector<SchedItem> &plan) const;

    const SchedCounters &counters() const { return counters_; }

private:
    // Preempts victims until `need` blocks are available; all or nothing. Victims that
    // already hold a span in the current plan are removed from it.
    void schedule_impl(const std::vector<Request *> &requests, StepPlan &plan);
    bool make_room(const std::vector<Request *> &requests, Request *r, uint32_t need, bool fresh);
    void preempt(Request *victim);
    bool start_resume(const std::vector<Request *> &requests, Request *r);
    // Ends a request with ERROR / KV_CAPACITY; its computed tokens stay.
    void fail_capacity(Request *r);

    KvManager &kv_;
    uint32_t max_batch_tokens_;
    uint32_t
        admission_watermark_;  // blocks kept free when admitting new work beside running requests
    SchedCounters counters_;
    // Per-step state and scratch (kept to avoid allocating every step).
    StepPlan *plan_ = nullptr;
    std::vector<SchedCandidate> candidates_;
    std::vector<SchedItem> items_;
    std::vector<Request *> preempted_;  // victims of this step
    std::vector<Request *> waiting_;    // parked requests with work
    std::vector<Request *> refused_;    // requests whose blocks could not be had
    std::vector<Request *> idle_, active_;
};

}  // namespace llmkv
