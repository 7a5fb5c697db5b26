// Request: a session as the scheduler sees it: its context, what it asked for, its rank,
// and its KV (a KvSeq, asked through its questions: only kv/ reads its fields). The engine's
// Session adds what only the engine needs (sampler, stop tokens, streamed text, the C handle).
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_manager.h"
#include "llmkv.h"

namespace llmkv {

struct Request {
    KvSeq seq;                    // its KV, as the KV manager keeps it
    std::vector<int32_t> tokens;  // the context: prompt and generated tokens
    int32_t priority = 0;
    llmkv_session_state state = LLMKV_SESSION_IDLE;
    llmkv_finish_reason finish_reason = LLMKV_FINISH_NONE;
    bool generate_requested = false;
    bool started = false;  // has run in a step since its work was queued
    bool kv_dropped =
        false;  // idle, and its KV was taken by preemption: recomputed on the next append/generate
    uint32_t n_committed =
        0;  // most tokens ever computed: input up to here is never dropped on error
    uint64_t last_active =
        0;  // step counter when it last ran or got input (LRU among idle sessions)
    uint32_t generate_limit = 0;  // 0 = until stop or context end
    uint32_t n_generated = 0;
    uint64_t admit_seq = 0;

    // Tokens that may run in a step: without a generate request the last token waits (its
    // logits are computed by the pass that starts generation).
    uint32_t pending_runnable() const {
        if (kv_dropped && !generate_requested) return 0;
        uint32_t pending = uint32_t(tokens.size()) - seq.n_tokens();
        if (generate_requested) return pending;
        return pending > 0 ? pending - 1 : 0;
    }
    bool has_pending_work() const { return generate_requested || pending_runnable() > 0; }
    // Recomputes `state` from the fields above.
    void refresh_state() {
        if (!seq.on_device()) {
            state = LLMKV_SESSION_PARKED;
            return;
        }
        if (generate_requested) {
            bool prompt_done = uint32_t(tokens.size()) - seq.n_tokens() <= 1;
            state = !started                           ? LLMKV_SESSION_QUEUED
                    : (prompt_done && n_generated > 0) ? LLMKV_SESSION_GENERATING
                                                       : LLMKV_SESSION_PREFILLING;
            if (started && prompt_done) state = LLMKV_SESSION_GENERATING;
        } else if (pending_runnable() > 0) {
            state = started ? LLMKV_SESSION_PREFILLING : LLMKV_SESSION_QUEUED;
        } else {
            state =
                finish_reason != LLMKV_FINISH_NONE ? LLMKV_SESSION_FINISHED : LLMKV_SESSION_IDLE;
            started = false;
        }
    }
};

// True when a gives up its blocks before b: lower priority, then more recently admitted.
inline bool ranks_below(const Request &a, const Request &b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.admit_seq > b.admit_seq;
}

}  // namespace llmkv
