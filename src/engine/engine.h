// Engine: the conductor. It owns the model, tokenizer, backend, KV manager, forward pass and
// scheduler, and the sessions created from it; a step asks the scheduler for a plan,
// runs it through the forward pass on the backend, samples, and queues events. One mutex
// serializes every call on an engine.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/thread_pool.h"
#include "engine/sampler.h"
#include "kv/kv_manager.h"
#include "llmkv.h"
#include "model/arch/forward.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "model/tokenizer.h"
#include "sched/request.h"
#include "sched/scheduler.h"

namespace llmkv {

class Engine;

struct Session : Request {
    Engine *engine = nullptr;
    llmkv_session *handle = nullptr;  // the C handle handed to the host
    void *user_data = nullptr;
    uint32_t default_max_new_tokens = 0;
    std::vector<int32_t> stop_tokens;
    std::unique_ptr<Sampler> sampler;
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
    void park(Session *s);
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
    void push_event(Session *s, llmkv_event_kind kind, int32_t token, llmkv_finish_reason reason,
                    llmkv_status status);
    void finish(Session *s, llmkv_finish_reason reason);
    void check_tokens(const int32_t *tokens, size_t n) const;
    void require_handle_room() const;
    SnapshotMeta snapshot_meta() const;
    // Copies tokens, shared KV and block keys of `from` into `to` (KV_CAPACITY when no tail slot is free).
    void share_state(const Session &from, Session &to);
    // Runs the context of a session that never steps (a prefix state) to n_tokens - 1 now.
    void prefill_now(Session &s);
    // Runs spans on the backend (the spans' KV reserved); logits in logits_.
    void run_forward(const std::vector<ForwardSpan> &spans);
    // Makes a handle's KV state permanent: pinned blocks, listed among the handles.
    Prefix *adopt_prefix(std::unique_ptr<Prefix> p);

    // A step that fails after its forward pass (an allocation while publishing or sampling)
    // is undone for every session that was to sample: its tokens, text, events and
    // generation state are as before the step, and its KV is dropped to be recomputed (the
    // logits of the pass are gone), which gives identical tokens. Marks taken before the pass.
    struct StepMark {
        size_t n_tokens = 0;
        uint32_t n_generated = 0;
        uint32_t n_committed = 0;
        bool generate_requested = false;
        llmkv_finish_reason finish_reason = LLMKV_FINISH_NONE;
        Utf8Stream::Mark text;
    };
    void mark_step();
    // Gives up the request's KV (it is recomputed when it next runs).
    void recompute_later(Request &r);
    void undo_step(size_t events_mark) noexcept;
    std::vector<StepMark> step_marks_;
    uint64_t marked_prefilled_ = 0, marked_generated_ = 0;

    mutable std::mutex mutex_;
    llmkv_engine_params params_{};
    std::shared_ptr<GgufFile> file_;
    std::unique_ptr<LlamaModel> model_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<Backend> backend_;    // declared before kv_: destroyed after it (the host tier may be its memory)
    std::unique_ptr<KvManager> kv_;
    std::unique_ptr<Forward> forward_;
    std::unique_ptr<Scheduler> scheduler_;
    uint32_t max_context_ = 0;
    uint32_t max_batch_tokens_ = 0;
    uint64_t kv_device_bytes_ = 0;
    std::vector<Request *> sessions_;      // every live Session, in creation order
    std::vector<Prefix *> prefixes_;
    std::deque<llmkv_event> events_;
    std::vector<float> logits_;
    uint64_t next_admit_seq_ = 1;
    uint64_t activity_clock_ = 0;

    // Per-step scratch (kept to avoid allocating every step).
    StepPlan plan_;
    std::vector<ForwardSpan> spans_;

    // Counters for llmkv_stats (the scheduler and the KV manager keep theirs).
    uint64_t steps_ = 0;
    uint64_t tokens_prefilled_ = 0;
    uint64_t tokens_generated_ = 0;
    uint64_t parks_ = 0;  // llmkv_session_park
};

}  // namespace llmkv
