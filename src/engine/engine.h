// Engine: owns the model, tokenizer, KV cache, scheduler and CPU backend, and the
// sessions created from it. One mutex serializes every call on an engine.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda_backend.h"
#include "common/thread_pool.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "kv/copy_engine.h"
#include "kv/host_prefix_store.h"
#include "kv/host_tier.h"
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

// The host-tier part of a session's KV. Parking copies the blocks only this session holds
// (and its tail) to host blocks; when that copy is done their device blocks are released
// and their block-table entries become SessionKv::kHostBlock. Resuming allocates device
// blocks for those entries and copies back. A block under a copy is never freed: device
// blocks stay referenced until the copy out completes, host blocks are freed only after
// the copy in completes, and destroying a session waits for its copy first.
struct HostKv {
    enum class Phase : uint8_t { kNone, kOut, kParked, kIn };
    Phase phase = Phase::kNone;
    std::vector<void *> blocks;  // per block-table entry: its host copy, or nullptr (kept on the device)
    void *tail = nullptr;        // host copy of the tail slot
    Ticket ticket = 0;           // the copy in flight (kOut, kIn)
    uint64_t bytes = 0;          // host bytes held (block and tail sizes)
};

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
    HostKv host;
    // Long context: a session whose KV exceeds the device pool keeps its older blocks in the
    // host tier; per block-table entry, the host copy (entry = SessionKv::kHostBlock) or
    // nullptr. Attention reads them in place through block_ptrs.
    std::vector<void *> offloaded;
    uint32_t n_offloaded = 0;
    std::vector<const uint8_t *> block_ptrs;
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

    // Host tier. park_out starts copying the session's exclusive blocks and tail to host
    // blocks (false, nothing changed, when the host tier is absent or full); with wait
    // it completes at once. start_resume reserves device blocks (preempting as needed)
    // and starts the copy back. reap_copies finishes every completed copy.
    bool park_out(Session *s, bool wait);
    void finish_park_out(Session *s);
    bool start_resume(Session *s);
    void finish_resume(Session *s);
    void reap_copies();
    // Brings a parked session's KV back to the device now (KV_CAPACITY when it cannot).
    void bring_back(Session *s);
    // Releases every block of a session, device and host, after its copy in flight.
    void drop_kv(Session &s);
    uint32_t holders(uint32_t block) const;

    // The forward pass on whichever backend holds the KV pools.
    void run_forward(const std::vector<ForwardSpan> &spans);
    // KV bytes between the pools and host memory. On the CPU backend the pools are host
    // memory: copies go to the copy thread (with a host tier) or are done at once; on CUDA
    // blocks go through the module's copy stream (tails synchronously). Returns a ticket
    // (0 = done); with wait, always 0.
    struct Transfer {
        enum Kind : uint8_t { kBlockOut, kBlockIn, kTailOut, kTailIn } kind;
        int64_t id;  // sealed block id or tail slot
        void *host;
    };
    Ticket submit_transfers(const std::vector<Transfer> &transfers, bool wait) const;
    // Tickets of the CUDA module's copy stream carry this bit; the others are the copy
    // thread's. 0 is always done.
    static constexpr Ticket kDeviceTicket = Ticket(1) << 63;
    bool transfer_done(Ticket t) const;
    void transfer_wait(Ticket t) const;
    // Makes room for bytes in the host budget, dropping the oldest demoted prefix blocks
    // if needed; false when even that is not enough (nothing dropped then).
    bool host_reserve(uint64_t bytes);
    // Prefix-cache eviction hook: copies the block to the host tier (tiered prefix cache).
    void demote(uint32_t block, const BlockHashKey &key, const int32_t *tokens);
    // Moves up to n of the session's exclusive sealed blocks to the host tier
    // (synchronously); returns how many moved.
    uint32_t offload_blocks(Session *s, uint32_t n);
    // Whether the session's input of n_tokens could be held by the device pool (alone) and
    // the host tier's free room together.
    bool can_fit_with_host(const Session &s, uint32_t n_tokens) const;

    mutable std::mutex mutex_;
    llmkv_engine_params params_{};
    std::shared_ptr<GgufFile> file_;
    std::unique_ptr<LlamaModel> model_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::unique_ptr<KvCache> cache_;
    std::unique_ptr<PrefixCache> prefix_;  // after cache_: destroyed first; null when disabled
    std::unique_ptr<HostTier> host_;       // null without a host tier
    std::unique_ptr<CopyEngine> copier_;   // after host_: drained and destroyed first
    std::unique_ptr<HostPrefixStore> host_prefix_;  // demoted prefix-cache blocks (host tier + prefix cache)
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<Forward> forward_;      // CPU backend
    std::unique_ptr<CudaBackend> cuda_;     // CUDA backend (then forward_ is null)
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
    std::vector<SchedItem> plan_;
    std::vector<Session *> waiting_;    // parked sessions with work
    std::vector<Session *> refused_;    // sessions whose blocks could not be had

    // Counters for llmkv_stats.
    uint64_t steps_ = 0;
    uint64_t tokens_prefilled_ = 0;
    uint64_t tokens_generated_ = 0;
    uint64_t preemptions_ = 0;
    uint64_t parks_ = 0;
    uint64_t swaps_ = 0;
    uint64_t resumes_ = 0;
    uint64_t bytes_to_host_ = 0;
    uint64_t bytes_to_device_ = 0;
    uint64_t host_bytes_held_ = 0;  // host-tier bytes held by sessions and demoted blocks, within kv_host_bytes
    uint64_t demotions_ = 0;
    uint64_t promotions_ = 0;
};

}  // namespace llmkv
