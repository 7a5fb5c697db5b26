// Engine: owns the model, tokenizer, KV cache, scheduler and CPU backend, and the
// sessions created from it. One mutex serializes every call on an engine.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "kv/snapshot.h"
#include "llmkv.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "model/tokenizer.h"
#include "sched/scheduler.h"

namespace llmkv {

class Engine;

struct Session {
    Engine *engine = nullptr;
    llmkv_session *handle = nullptr;  // the C handle handed to the host
    void *user_data = nullptr;
    int32_t priority = 0;
    uint32_t default_max_new_tokens = 0;
    std::vector<int32_t> stop_tokens;
    std::unique_ptr<Sampler> sampler;

    std::vector<int32_t> tokens;  // the context: prompt and generated tokens
    SessionKv kv;                 // kv.n_tokens = tokens whose KV is computed
    std::vector<BlockHashKey> block_keys;  // prefix-cache key of each sealed block offered so far
    llmkv_session_state state = LLMKV_SESSION_IDLE;
    llmkv_finish_reason finish_reason = LLMKV_FINISH_NONE;
    bool generate_requested = false;
    bool started = false;         // has run in a step since its work was queued
    bool kv_dropped = false;      // idle, and its KV was taken by preemption: recomputed on the next append/generate
    uint32_t n_committed = 0;     // most tokens ever computed: input up to here is never dropped on error
    uint64_t last_active = 0;     // step counter when it last ran or got input (LRU among idle sessions)
    uint32_t generate_limit = 0;  // 0 = until stop or context end
    uint32_t n_generated = 0;
    uint64_t admit_seq = 0;
    Utf8Stream text;              // generated text not yet read
};

// A prefix handle: an immutable run of tokens whose KV was computed once; sessions created
// from it share its sealed blocks and copy its tail. Its `state` is a session that never
// runs (not in the engine's session list).
struct Prefix {
    Engine *engine = nullptr;
    Session state;
};

class Engine {
public:
    static std::unique_ptr<Engine> create(const llmkv_engine_params &params);
    ~Engine();

    std::mutex &mutex() { return mutex_; }

    void get_info(llmkv_engine_info &out) const;
    void get_stats(llmkv_stats &out) const;
    const Tokenizer &tokenizer() const { return *tokenizer_; }
    const LlamaModel &model() const { return *model_; }
    uint32_t max_context() const { return max_context_; }

    std::string chat_format(const llmkv_chat_message *msgs, size_t n, bool add_generation_prompt) const;

    Session *create_session(const llmkv_session_params &params);
    void destroy_session(Session *s);
    void append(Session *s, const int32_t *tokens, size_t n);
    void append_text(Session *s, const char *text, size_t len);
    void generate(Session *s, uint32_t max_new_tokens);
    void cancel(Session *s);
    Session *fork(Session *s);

    // Prefix handles.
    Prefix *create_prefix(const int32_t *tokens, size_t n);
    Prefix *session_to_prefix(Session *s);
    void release_prefix(Prefix *p);
    void save_prefix(const Prefix *p, const std::string &path) const;
    Prefix *load_prefix(const std::string &path);

    // One scheduling iteration; events go to the queue.
    void step();
    bool has_work() const;
    // Moves up to capacity queued events into out; returns how many.
    size_t take_events(llmkv_event *out, size_t capacity);
    size_t pending_events() const { return events_.size(); }

    // For tests: throws LLMKV_ERR_INTERNAL if a pool invariant does not hold.
    void check_invariants() const;

private:
    Engine() = default;
    uint32_t pending_runnable(const Session &s) const;
    void push_event(Session *s, llmkv_event_kind kind, int32_t token, llmkv_finish_reason reason,
                    llmkv_status status);
    void finish(Session *s, llmkv_finish_reason reason);
    void update_state(Session *s);
    void match_prefix(Session *s);
    void check_tokens(const int32_t *tokens, size_t n) const;
    void require_handle_room() const;
    SnapshotMeta snapshot_meta() const;
    // Copies tokens, shared KV and block keys of `from` into `to` (KV_CAPACITY when no tail slot is free).
    void share_state(const Session &from, Session &to);
    void publish_sealed(Session *s);
    // Runs the context of a session that never steps (a prefix state) to n_tokens - 1 now.
    void prefill_now(Session &s);

    // Preemption (recompute): a session that cannot get blocks takes them from idle
    // sessions (least recently active first), then from sessions ranked below it (lowest
    // priority, most recently admitted first).
    bool has_pending_work(const Session &s) const { return s.generate_requested || pending_runnable(s) > 0; }
    uint32_t freeable_blocks(const Session &s) const;
    bool can_fit_alone(const Session &s, uint32_t n_tokens) const;
    // Preempts victims until `need` blocks are available; all or nothing. Victims that
    // already hold a span in the current step are removed from it.
    bool make_room(Session *s, uint32_t need, bool fresh);
    void preempt(Session *victim);
    // Ends a session's request with ERROR / KV_CAPACITY; its computed tokens stay.
    void fail_capacity(Session *s);

    mutable std::mutex mutex_;
    llmkv_engine_params params_{};
    std::shared_ptr<GgufFile> file_;
    std::unique_ptr<LlamaModel> model_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::unique_ptr<KvCache> cache_;
    std::unique_ptr<PrefixCache> prefix_;  // after cache_: destroyed first; null when disabled
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<Forward> forward_;
    std::unique_ptr<Scheduler> scheduler_;
    uint32_t max_context_ = 0;
    uint32_t max_batch_tokens_ = 0;
    uint64_t kv_device_bytes_ = 0;
    std::vector<Session *> sessions_;
    std::vector<Prefix *> prefixes_;
    std::deque<llmkv_event> events_;
    std::vector<float> logits_;
    uint64_t next_admit_seq_ = 1;
    uint64_t activity_clock_ = 0;
    uint32_t admission_watermark_ = 1;  // blocks kept free when admitting new work beside running sessions

    // Per-step scratch (kept to avoid allocating every step).
    std::vector<SchedCandidate> candidates_;
    std::vector<ForwardSpan> spans_;
    std::vector<Session *> span_sessions_;
    std::vector<Session *> preempted_;  // victims of this step

    // Counters for llmkv_stats.
    uint64_t steps_ = 0;
    uint64_t tokens_prefilled_ = 0;
    uint64_t tokens_generated_ = 0;
    uint64_t preemptions_ = 0;
};

}  // namespace llmkv
