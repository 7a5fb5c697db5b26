// Engine: creation (model, tokenizer, KV pool sizing), sessions, and the step loop that
// turns a scheduler plan into one batched forward pass and events.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "common/error.h"
#include "backend/factory.h"
#include "common/log.h"
#include "common/thread_priority.h"
#include "engine/chat_template.h"

namespace llmkv {

namespace {

// Per layer: the sliding window it attends over, 0 for full attention.
std::vector<uint32_t> model_layer_windows(const LlamaModel &model) {
    const LlamaConfig &c = model.config();
    std::vector<uint32_t> w(c.n_layers, 0);
    for (uint32_t l = 0; l < c.n_layers; ++l) w[l] = c.window(l);
    return w;
}

}  // namespace


namespace {

constexpr uint32_t kDefaultBlockTokens = 16;
constexpr uint32_t kDefaultMaxBatchTokens = 512;
constexpr uint32_t kDefaultMaxSessions = 256;
constexpr uint64_t kMaxAutomaticKvBytes = 1ull << 30;

void copy_string(char *dst, size_t cap, const std::string &src) {
    size_t n = std::min(cap - 1, src.size());
    std::memcpy(dst, src.data(), n);
    dst[n] = '\0';
}

bool known_dtype(uint32_t d) { return d <= LLMKV_KV_INT4_COMPACT; }

// A C host may store any int in an enum field; reading it as the C++ enum type would be
// undefined for values outside the enumerators, so the raw bits are read instead.
template <typename Enum>
uint32_t raw_enum(const Enum &field) {
    static_assert(sizeof(Enum) == sizeof(uint32_t), "enums are 32-bit in the C ABI");
    uint32_t v;
    std::memcpy(&v, &field, sizeof(v));
    return v;
}

}  // namespace

std::unique_ptr<Engine> Engine::create(const llmkv_engine_params &p) {
    bool ranks_told = false;
    try {
        return create_impl(p, ranks_told);
    } catch (const std::exception &e) {
        if (p.tp_transport && !ranks_told && p.tp_transport->rank == 0) {
            // Ranks waiting in llmkv_tp_serve for a setup that will not come.
            try {
                TransportCommunicator comm(*p.tp_transport);
                abort_ranks(comm, e.what());
            } catch (const std::exception &) {
            }
        }
        throw;
    }
}

void Engine::serve_rank(const llmkv_engine_params &p) {
    if (!p.tp_transport) fail(LLMKV_ERR_INVALID_ARGUMENT, "llmkv_tp_serve: engine_params.tp_transport is NULL");
    TransportCommunicator comm(*p.tp_transport);
    if (comm.rank() == 0) fail(LLMKV_ERR_INVALID_ARGUMENT, "llmkv_tp_serve: rank 0 runs the engine (llmkv_engine_create)");
    if (p.n_threads > 1024) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_threads = %u exceeds 1024", p.n_threads);
    // A rank whose model does not load still takes part in the setup, to tell rank 0.
    std::string load_error;
    std::shared_ptr<GgufFile> file;
    std::unique_ptr<LlamaModel> model;
    try {
        if (!p.model_path || !*p.model_path) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.model_path is NULL or empty");
        file = std::shared_ptr<GgufFile>(GgufFile::open(p.model_path));
        model = LlamaModel::load(file);
    } catch (const std::exception &e) {
        load_error = e.what();
    }
    RankThreads threads;
    threads.n_threads = p.n_threads ? p.n_threads : ThreadPool::hardware_threads();
    threads.spin_us = p.spin_us;
    threads.priority = p.thread_priority;
    SpawnPriority spawn_priority(p.thread_priority);
    llmkv::serve_rank(model.get(), load_error, comm, threads);
}

std::unique_ptr<Engine> Engine::create_impl(const llmkv_engine_params &p, bool &ranks_told) {
    if (!p.model_path || !*p.model_path) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.model_path is NULL or empty");
    const uint32_t backend = raw_enum(p.backend), dtype_k = raw_enum(p.kv_dtype_k), dtype_v = raw_enum(p.kv_dtype_v);
    if (backend > LLMKV_BACKEND_CUDA) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.backend = %u is unknown", backend);
    if (p.n_devices > 0 && !p.devices) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.devices is NULL with n_devices = %u", p.n_devices);
    if (p.n_devices > kMaxTpRanks) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_devices = %u exceeds %u", p.n_devices, kMaxTpRanks);
    for (uint32_t i = 0; i < p.n_devices; ++i) {
        if (p.devices[i] < 0) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.devices[%u] = %d is negative", i, p.devices[i]);
    }
    if (p.n_devices > 1) {
        // Several devices: one tensor-parallel rank on each (the CUDA backend).
        if (backend == LLMKV_BACKEND_CPU) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_devices = %u names GPU ranks, but the backend is the CPU "
                 "(CPU ranks: engine_params.tp_size)", p.n_devices);
        }
        if (p.tp_size > 1 && p.tp_size != p.n_devices) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.tp_size = %u differs from n_devices = %u", p.tp_size, p.n_devices);
        }
        if (p.tp_transport && uint32_t(p.tp_transport->size) != p.n_devices) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_devices = %u differs from tp_transport's %d ranks",
                 p.n_devices, p.tp_transport->size);
        }
    }
    if (p.tp_size > kMaxTpRanks) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.tp_size = %u exceeds %u", p.tp_size, kMaxTpRanks);
    if (p.tp_transport) {
        const llmkv_tp_transport &t = *p.tp_transport;
        if (t.size < 1 || t.size > 256 || t.rank < 0 || t.rank >= t.size) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.tp_transport: rank %d of size %d", t.rank, t.size);
        }
        if (t.rank != 0) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.tp_transport: rank %d calls llmkv_tp_serve, not "
                 "llmkv_engine_create (rank 0 runs the engine)", t.rank);
        }
        if (p.tp_size > 1 && p.tp_size != uint32_t(t.size)) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.tp_size = %u differs from tp_transport's %d ranks", p.tp_size, t.size);
        }
    }
    if (!known_dtype(dtype_k)) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_dtype_k = %u is unknown", dtype_k);
    if (!known_dtype(dtype_v)) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_dtype_v = %u is unknown", dtype_v);
    if (p.kv_block_tokens > 1024) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_block_tokens = %u exceeds 1024", p.kv_block_tokens);
    if (p.n_threads > 1024) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_threads = %u exceeds 1024", p.n_threads);
    if (p.max_sessions > (1u << 20)) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.max_sessions = %u is too large", p.max_sessions);
    if (p.max_batch_tokens > (1u << 16)) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.max_batch_tokens = %u exceeds 65536", p.max_batch_tokens);
    if (p.kv_residual_tokens > 4096) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_residual_tokens = %u exceeds 4096", p.kv_residual_tokens);
    if (p.flags & ~(LLMKV_ENGINE_PREFIX_CACHE | LLMKV_ENGINE_KEEP_WINDOW_BLOCKS | LLMKV_ENGINE_KV_SINK |
                    LLMKV_ENGINE_NO_KV_SINK)) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.flags has unknown bits 0x%x", p.flags);
    }
    if ((p.flags & LLMKV_ENGINE_KV_SINK) && (p.flags & LLMKV_ENGINE_NO_KV_SINK)) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.flags has both LLMKV_ENGINE_KV_SINK and LLMKV_ENGINE_NO_KV_SINK");
    }
    if (p.spin_us < -1 || p.spin_us > ThreadPool::kMaxSpinUs) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.spin_us = %d is outside -1..%ld", p.spin_us, ThreadPool::kMaxSpinUs);
    }
    if (p.thread_priority < 0 || p.thread_priority > 19) {
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "engine_params.thread_priority = %d is outside 0..19 (llmkv's threads can only run below their creator)",
             p.thread_priority);
    }
    // Threads started while the engine is set up (compute workers, copy and heap threads)
    // run at its priority.
    SpawnPriority spawn_priority(p.thread_priority);

    std::unique_ptr<Engine> e(new Engine());
    e->params_ = p;
    e->params_.tp_transport = nullptr;  // borrowed; not kept
    e->tp_size_ = p.tp_transport ? uint32_t(p.tp_transport->size)
                                 : p.n_devices > 1 ? p.n_devices : std::max<uint32_t>(1, p.tp_size);
    // GPU ranks: the CUDA backend asked for, several devices named, or AUTO with a device
    // named and CUDA there; otherwise CPU ranks.
    e->tp_backend_ = (backend == LLMKV_BACKEND_CUDA || p.n_devices > 1 ||
                      (backend == LLMKV_BACKEND_AUTO && p.n_devices == 1 && e->tp_size_ > 1 &&
                       gpu_device_count(nullptr) > 0))
                         ? LLMKV_BACKEND_CUDA
                         : LLMKV_BACKEND_CPU;
    e->params_.model_path = nullptr;  // borrowed; not kept
    e->file_ = std::shared_ptr<GgufFile>(GgufFile::open(p.model_path));
    e->model_ = LlamaModel::load(e->file_);
    e->tokenizer_ = Tokenizer::from_gguf(*e->file_);
    for (size_t i = 0; i < e->tokenizer_->n_vocab(); ++i) {
        if (e->tokenizer_->is_end_of_generation(int32_t(i))) e->eog_ids_.push_back(int32_t(i));
    }
    const LlamaConfig &c = e->model_->config();
    if (e->tokenizer_->n_vocab() != c.n_vocab) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tokenizer has %zu tokens but token_embd.weight has %u rows",
             e->tokenizer_->n_vocab(), c.n_vocab);
    }

    KvGeometry g;
    g.n_layers = c.n_layers;
    g.n_kv_heads = c.n_kv_heads;
    g.head_dim = c.head_dim;
    g.block_tokens = p.kv_block_tokens ? p.kv_block_tokens : kDefaultBlockTokens;
    g.dtype_k = p.kv_dtype_k;
    g.dtype_v = p.kv_dtype_v;
    g.residual_tokens = p.kv_residual_tokens;
    const uint32_t rotation = raw_enum(p.kv_rotation);
    if (rotation > LLMKV_KV_ROTATION_KV) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_rotation = %u is unknown", rotation);
    if (rotation == LLMKV_KV_ROTATION_AUTO) {
        g.rotate_k = is_int4(g.dtype_k);
        g.rotate_v = is_int4(g.dtype_v);
    } else {
        g.rotate_k = rotation == LLMKV_KV_ROTATION_K || rotation == LLMKV_KV_ROTATION_KV;
        g.rotate_v = rotation == LLMKV_KV_ROTATION_V || rotation == LLMKV_KV_ROTATION_KV;
    }

    // KV sink: asked for, or by default with an int4 codec (where the first position's
    // quantization error costs the most); CPU backends only (dropped for another backend
    // unless asked for, see create_kv_and_backend).
    g.sink = (p.flags & LLMKV_ENGINE_KV_SINK) ||
             (!(p.flags & LLMKV_ENGINE_NO_KV_SINK) && (is_int4(g.dtype_k) || is_int4(g.dtype_v)));

    if (!codec_supported(codec_spec_k(g), KvRole::K, g.block_tokens, g.head_dim)) {
        fail(LLMKV_ERR_UNSUPPORTED, "KV dtype %s%s for K is not supported (head_dim %u, %u-token blocks)",
             codec_name(g.dtype_k), g.rotate_k ? " with rotation" : "", g.head_dim, g.block_tokens);
    }
    if (!codec_supported(codec_spec_v(g), KvRole::V, g.block_tokens, g.head_dim)) {
        fail(LLMKV_ERR_UNSUPPORTED, "KV dtype %s%s for V is not supported (head_dim %u, %u-token blocks)",
             codec_name(g.dtype_v), g.rotate_v ? " with rotation" : "", g.head_dim, g.block_tokens);
    }
    e->max_context_ = p.max_context ? std::min(p.max_context, c.n_ctx_train) : c.n_ctx_train;
    if (p.max_context > c.n_ctx_train) {
        LLMKV_LOG_WARN_F("max_context %u exceeds the model's trained context %u; using %u", p.max_context,
                         c.n_ctx_train, c.n_ctx_train);
    }
    // Sliding-window layers: their blocks are released once outside the window (layer
    // groups), unless asked to keep them.
    const std::vector<uint32_t> windows = model_layer_windows(*e->model_);
    for (uint32_t w : windows) e->window_ = std::max(e->window_, w);
    if (!(p.flags & LLMKV_ENGINE_KEEP_WINDOW_BLOCKS)) set_layer_groups(g, windows);
    const uint32_t max_sessions = p.max_sessions ? p.max_sessions : kDefaultMaxSessions;
    if (e->tp_size_ > 1) {
        const std::string why = shard_unsupported_reason(*e->model_, e->tp_size_);
        if (!why.empty()) fail(LLMKV_ERR_UNSUPPORTED, "tensor parallelism over %u ranks: %s", e->tp_size_, why.c_str());
        e->create_tp(g, max_sessions, p.tp_transport, ranks_told);
    } else {
        e->create_kv_and_backend(g, backend, max_sessions);
    }
    e->forward_ = Forward::create(*e->model_, *e->backend_, e->max_batch_tokens_, e->tp_ ? &e->tp_->shard() : nullptr);

    e->scheduler_ = std::make_unique<Scheduler>(*e->kv_, e->max_batch_tokens_);
    // Compute threads of this process (with in-process ranks: all ranks' together).
    e->params_.n_threads = e->tp_ ? e->rank_threads_ * (p.tp_transport ? 1 : e->tp_size_) : e->pool_->size();
    e->params_.kv_block_tokens = g.block_tokens;
    e->params_.max_sessions = max_sessions;
    e->params_.max_batch_tokens = e->max_batch_tokens_;
    const KvGeometry &kg = e->kv_->geometry();
    Backend *be = e->backend_.get();
    LLMKV_LOG_INFO_F("engine: model '%s' (%u layers, %u heads / %u kv heads, head_dim %u), backend %s "
                     "(%s), %u threads, KV %s/%s%s, %u blocks of %u tokens (%zu bytes, %u layer group%s)",
                     c.name.c_str(), c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, be->name(),
                     be->device_name().c_str(), unsigned(e->params_.n_threads), codec_name(kg.dtype_k),
                     codec_name(kg.dtype_v), kg.sink ? " with the KV sink" : "", e->kv_->total_blocks(),
                     kg.block_tokens, kg.sealed_block_bytes(),
                     kg.n_groups, kg.n_groups == 1 ? "" : "s");
    return e;
}

Engine::~Engine() {
    worker_stop();
    if (kv_) {
        kv_->drain();
        for (Request *r : sessions_) {
            kv_->drop(*r);
            delete static_cast<Session *>(r);
        }
        for (Prefix *p : prefixes_) {
            kv_->unpin_handle(&p->state);
            kv_->drop(p->state);
            delete p;
        }
    }
    // The KV manager goes first: its host tier may be the backend's memory.
    forward_.reset();
    kv_.reset();
}

namespace {

// LLMKV_TP_COLLECTIVES: how the all-reduces of GPU ranks travel. "" / "auto": NCCL when every
// in-process rank has a device of its own (ranks in other processes: always) and NCCL loads,
// else through host memory; "nccl": NCCL or fail; "host": host memory.
enum class Collectives { kAuto, kNccl, kHost };
Collectives collectives_from_env() {
    const char *v = std::getenv("LLMKV_TP_COLLECTIVES");
    if (!v || !*v || std::strcmp(v, "auto") == 0) return Collectives::kAuto;
    if (std::strcmp(v, "nccl") == 0) return Collectives::kNccl;
    if (std::strcmp(v, "host") == 0) return Collectives::kHost;
    fail(LLMKV_ERR_INVALID_ARGUMENT, "LLMKV_TP_COLLECTIVES=\"%s\": expected auto, nccl or host", v);
}

}  // namespace

// GPU ranks: each rank's device, and whether their all-reduces go over NCCL.
void Engine::plan_gpu_ranks(TpSetup &setup, bool in_process) const {
    const llmkv_engine_params &p = params_;
    setup.backend = LLMKV_BACKEND_CUDA;
    std::string why;
    const int n_visible = gpu_device_count(&why);
    if (n_visible <= 0) fail(LLMKV_ERR_UNSUPPORTED, "GPU tensor-parallel ranks: the CUDA backend is not available: %s", why.c_str());
    // n_devices == tp_size: one each; 1: every rank on that device; 0: rank r on device r
    // (modulo the devices the rank's process sees).
    for (uint32_t r = 0; r < tp_size_; ++r) {
        setup.devices[r] = p.n_devices == tp_size_ ? p.devices[r] : p.n_devices == 1 ? p.devices[0] : -1;
    }
    if (in_process) {
        for (uint32_t r = 0; r < tp_size_; ++r) {
            if (setup.devices[r] < 0) setup.devices[r] = int32_t(r % uint32_t(n_visible));
            if (setup.devices[r] >= n_visible) {
                fail(LLMKV_ERR_INVALID_ARGUMENT, "GPU tensor-parallel rank %u: device %d does not exist (%d devices)", r,
                     setup.devices[r], n_visible);
            }
        }
    }
    bool distinct = true;
    for (uint32_t r = 0; in_process && r < tp_size_; ++r) {
        for (uint32_t q = 0; q < r; ++q) distinct = distinct && setup.devices[q] != setup.devices[r];
    }
    const Collectives want = collectives_from_env();
    if (want == Collectives::kHost) return;
    std::string no_nccl;
    if (!distinct) {
        no_nccl = "ranks share a device";
    } else if (make_device_comm_id(setup.comm_id, &no_nccl)) {
        setup.device_collectives = 1;
        return;
    }
    if (want == Collectives::kNccl) fail(LLMKV_ERR_UNSUPPORTED, "LLMKV_TP_COLLECTIVES=nccl: %s", no_nccl.c_str());
    LLMKV_LOG_INFO_F("GPU tensor-parallel ranks: all-reduces through host memory (%s)", no_nccl.c_str());
}

void Engine::create_tp(KvGeometry g, uint32_t max_sessions, const llmkv_tp_transport *transport,
                       bool &ranks_told) {
    const llmkv_engine_params &p = params_;
    if (tp_backend_ == LLMKV_BACKEND_CUDA) {
        // What the CUDA kernels read: no KV sink, no layer groups (as with one GPU).
        if (g.sink && (p.flags & LLMKV_ENGINE_KV_SINK)) {
            fail(LLMKV_ERR_UNSUPPORTED, "LLMKV_ENGINE_KV_SINK: the CUDA backend does not read the KV sink yet (CPU only)");
        }
        g.sink = false;
        if (g.grouped()) {
            LLMKV_LOG_INFO_F("cuda backend: sliding-window blocks are kept (no layer groups)");
            set_layer_groups(g, {});
        }
    }
    create_kv(g, max_sessions);
    const unsigned threads = p.n_threads ? p.n_threads : ThreadPool::hardware_threads();
    pool_ = std::make_unique<ThreadPool>(1);  // the ranks have their own
    max_batch_tokens_ = p.max_batch_tokens ? p.max_batch_tokens : kDefaultMaxBatchTokens;
    TpSetup setup;
    setup.geometry = g;
    setup.n_sealed_blocks = kv_->total_blocks();
    setup.n_tail_slots = max_sessions;
    setup.max_tokens = max_batch_tokens_;
    if (tp_backend_ == LLMKV_BACKEND_CUDA) plan_gpu_ranks(setup, transport == nullptr);
    RankThreads rank_threads;
    rank_threads.spin_us = p.spin_us;
    rank_threads.priority = p.thread_priority;
    std::unique_ptr<TpBackend> tp;
    if (transport) {
        tp_comm_ = std::make_unique<TransportCommunicator>(*transport);
        rank_threads.n_threads = threads;
        ranks_told = true;  // from here on the TpBackend tells the ranks how the setup went
        tp = std::make_unique<TpBackend>(*model_, setup, *tp_comm_, rank_threads);
    } else {
        std::vector<std::unique_ptr<Communicator>> comms = InProcessGroup::make(tp_size_, p.spin_us);
        tp_comm_ = std::move(comms[0]);
        comms.erase(comms.begin());
        rank_threads.n_threads = std::max(1u, threads / tp_size_);
        tp = std::make_unique<TpBackend>(*model_, setup, *tp_comm_, rank_threads, std::move(comms), rank_threads);
    }
    tp_ = tp.get();
    rank_threads_ = rank_threads.n_threads;
    backend_ = std::move(tp);
    Backend *be = backend_.get();
    kv_->attach(be->make_transfer_queue(p.kv_host_bytes != 0), be->host_allocator(),
                [be](int64_t from, int64_t to) { be->copy_tail(from, to); });
    kv_->set_offload_allowed(false);
}

void Engine::create_kv(const KvGeometry &g, uint32_t max_sessions) {
    const llmkv_engine_params &p = params_;
    const size_t block_bytes = g.sealed_block_bytes();
    uint64_t budget = p.kv_device_bytes;
    if (budget == 0) {
        // Room for four full-length sessions, capped; untouched blocks cost no memory.
        // With layer groups a session holds its window's local blocks besides its own.
        const uint64_t per_session = max_context_ / g.block_tokens + 1 +
                                     uint64_t(g.n_groups - 1) * (g.window / g.block_tokens + 2);
        uint64_t want = uint64_t(4) * per_session * block_bytes;
        budget = std::min(want, std::max<uint64_t>(kMaxAutomaticKvBytes, block_bytes * 64));
    }
    uint64_t n_blocks = budget / block_bytes;
    if (n_blocks == 0) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "kv_device_bytes = %llu is smaller than one block (%zu bytes)",
             (unsigned long long)budget, block_bytes);
    }
    if (n_blocks > (1u << 30)) n_blocks = 1u << 30;
    kv_device_bytes_ = n_blocks * block_bytes;
    KvManagerConfig kc;
    kc.geometry = g;
    kc.n_sealed_blocks = uint32_t(n_blocks);
    kc.n_tail_slots = max_sessions;
    kc.host_bytes = p.kv_host_bytes;
    if (p.flags & LLMKV_ENGINE_PREFIX_CACHE) {
        if (g.residual_tokens == 0) {
            // The salt makes blocks of another model, codec, rotation or block size unmatchable.
            kc.prefix_cache = true;
            kc.prefix_salt = strprintf("llmkv-prefix-v1|%s|k=%s%s|v=%s%s|B=%u|R=%u%s", model_->fingerprint().c_str(),
                                       codec_name(g.dtype_k), g.rotate_k ? "+rot" : "", codec_name(g.dtype_v),
                                       g.rotate_v ? "+rot" : "", g.block_tokens, g.residual_tokens,
                                       g.sink ? "|sink" : "");
        } else {
            // A matched block would be read sealed where a recomputation reads fp16 rows,
            // breaking bitwise equality with the uncached run.
            LLMKV_LOG_INFO_F("prefix cache off: it needs kv_residual_tokens = 0 (got %u)", g.residual_tokens);
        }
    }
    kv_ = std::make_unique<KvManager>(kc);
}

void Engine::create_kv_and_backend(KvGeometry g, uint32_t backend, uint32_t max_sessions) {
    const llmkv_engine_params &p = params_;
    // The KV sink is read by the CPU attention only. Asked for: AUTO means the CPU, CUDA is
    // refused. By default (int4): another backend is tried without it, and the CPU, if that
    // is what AUTO gives, is made again with it.
    if (g.sink && backend != LLMKV_BACKEND_CPU) {
        if (p.flags & LLMKV_ENGINE_KV_SINK) {
            if (backend == LLMKV_BACKEND_CUDA) {
                fail(LLMKV_ERR_UNSUPPORTED, "LLMKV_ENGINE_KV_SINK: the CUDA backend does not read the KV sink yet (CPU only)");
            }
            create_kv_and_backend(g, LLMKV_BACKEND_CPU, max_sessions);
            return;
        }
        KvGeometry without = g;
        without.sink = false;
        create_kv_and_backend(without, backend, max_sessions);
        if (backend_->kind() != LLMKV_BACKEND_CPU) {
            LLMKV_LOG_INFO_F("%s backend: no KV sink (CPU only so far)", backend_->name());
            return;
        }
        kv_.reset();  // first: its host tier may be the backend's memory
        backend_.reset();
        create_kv_and_backend(g, LLMKV_BACKEND_CPU, max_sessions);
        return;
    }
    if (g.sink && g.block_tokens == 1) {
        // Position 0 would be sealed as soon as it is computed: the one-token pass that fills a
        // matched sequence's sink rows needs an unsealed position 0.
        if (p.flags & LLMKV_ENGINE_KV_SINK) {
            fail(LLMKV_ERR_UNSUPPORTED, "LLMKV_ENGINE_KV_SINK needs kv_block_tokens >= 2 (got 1)");
        }
        g.sink = false;
    }
    create_kv(g, max_sessions);

    if (!pool_) {
        unsigned threads = p.n_threads ? p.n_threads : ThreadPool::hardware_threads();
        pool_ = std::make_unique<ThreadPool>(threads, params_.spin_us, params_.thread_priority);
    }
    max_batch_tokens_ = p.max_batch_tokens ? p.max_batch_tokens : kDefaultMaxBatchTokens;

    // Backend: CUDA when asked for (or AUTO) and the module loads and sees a device.
    BackendRequest br;
    br.kind = llmkv_backend(backend);
    br.device = p.n_devices > 0 ? p.devices[0] : 0;
    br.max_batch_tokens = max_batch_tokens_;
    br.max_spans = std::min(max_sessions, max_batch_tokens_);
    br.cache = &kv_->cache();
    br.pool = pool_.get();
    backend_ = create_backend(br);
    Backend *be = backend_.get();
    if (g.grouped() && be->kind() != LLMKV_BACKEND_CPU) {
        // Only the CPU backend reads layer-group block tables so far: the window is masked,
        // and every block kept.
        LLMKV_LOG_INFO_F("%s backend: sliding-window blocks are kept (no layer groups)", be->name());
        backend_.reset();
        kv_.reset();
        set_layer_groups(g, {});
        create_kv_and_backend(g, backend, max_sessions);
        return;
    }
    kv_->attach(be->make_transfer_queue(p.kv_host_bytes != 0), be->host_allocator(),
                   [be](int64_t from, int64_t to) { be->copy_tail(from, to); });
    kv_->set_offload_allowed(be->reads_host_blocks());
}

void Engine::get_info(llmkv_engine_info &out) const {
    const LlamaConfig &c = model_->config();
    const KvGeometry &g = kv_->geometry();
    uint32_t size = out.struct_size;
    std::memset(&out, 0, sizeof(out));
    out.struct_size = size;
    copy_string(out.model_name, sizeof(out.model_name), c.name);
    copy_string(out.architecture, sizeof(out.architecture), c.architecture);
    copy_string(out.backend_name, sizeof(out.backend_name), backend_->name());
    out.backend = backend_->kind();
    out.n_vocab = c.n_vocab;
    out.n_ctx_train = c.n_ctx_train;
    out.max_context = max_context_;
    out.n_layers = c.n_layers;
    out.n_embd = c.n_embd;
    out.n_heads = c.n_heads;
    out.n_kv_heads = c.n_kv_heads;
    out.head_dim = c.head_dim;
    out.n_threads = params_.n_threads;
    out.kv_block_tokens = g.block_tokens;
    out.kv_dtype_k = g.dtype_k;
    out.kv_dtype_v = g.dtype_v;
    out.tp_size = tp_size_;
    out.n_params = model_->n_params();
    out.weight_bytes = model_->weight_bytes();
    out.kv_bytes_per_token_device = g.sealed_block_bytes() * g.n_groups / g.block_tokens;
    out.kv_window = window_;
    out.kv_layer_groups = g.n_groups;
    out.kv_bytes_per_token_global = g.sealed_block_bytes() / g.block_tokens;
    out.kv_bytes_per_token_tail = g.tail_block_bytes() / (g.tail_capacity() + (g.sink ? 1 : 0));  // a row
    const KvGeometry &rg = tp_ ? tp_->rank_kv_geometry() : g;
    out.kv_bytes_per_token_rank = rg.sealed_block_bytes() * rg.n_groups / rg.block_tokens;
    out.weight_bytes_rank = tp_ ? tp_->shard().weight_bytes() : out.weight_bytes;
    out.kv_device_bytes = kv_device_bytes_;
    out.kv_blocks_total = kv_->cache().sealed_pool().n_total();
    out.kv_tail_blocks_total = kv_->cache().tail_pool().n_total();
    out.kv_residual_tokens = g.residual_tokens;
    out.kv_rotate_k = g.rotate_k;
    out.kv_rotate_v = g.rotate_v;
    out.bos_token = tokenizer_->bos();
    out.eos_token = tokenizer_->eos();
    out.eot_token = tokenizer_->eot();
}

void Engine::get_stats(llmkv_stats &out) const {
    uint32_t size = out.struct_size;
    std::memset(&out, 0, sizeof(out));
    out.struct_size = size;
    const BlockPool &sealed = kv_->cache().sealed_pool();
    const BlockPool &tails = kv_->cache().tail_pool();
    out.blocks_total = sealed.n_total();
    out.blocks_free = sealed.n_free();
    out.blocks_cached = kv_->cached_blocks();
    out.blocks_used = sealed.n_used() - out.blocks_cached;
    out.tail_blocks_total = tails.n_total();
    out.tail_blocks_used = tails.n_used();
    out.sessions_total = uint32_t(sessions_.size());
    for (const Request *s : sessions_) {
        switch (s->state) {
            case LLMKV_SESSION_IDLE: ++out.sessions_idle; break;
            case LLMKV_SESSION_QUEUED: ++out.sessions_queued; break;
            case LLMKV_SESSION_PREFILLING: ++out.sessions_prefilling; break;
            case LLMKV_SESSION_GENERATING: ++out.sessions_generating; break;
            case LLMKV_SESSION_PARKED: ++out.sessions_parked; break;
            case LLMKV_SESSION_FINISHED: ++out.sessions_finished; break;
        }
        out.tokens_stored += s->kv.n_tokens;
    }
    out.kv_bytes_used = uint64_t(out.blocks_used) * sealed.block_bytes() + uint64_t(tails.n_used()) * tails.block_bytes();
    if (tp_) {
        const KvGeometry &rg = tp_->rank_kv_geometry();
        out.kv_bytes_used_rank = uint64_t(out.blocks_used) * rg.sealed_block_bytes() + uint64_t(tails.n_used()) * rg.tail_block_bytes();
        out.tp_reduce_ns = tp_comm_->reduce_ns();
        out.tp_reduces = tp_comm_->reduces();
    } else {
        out.kv_bytes_used_rank = out.kv_bytes_used;
    }
    out.prefix_hit_tokens = kv_->prefix_hit_tokens();
    out.prefix_miss_tokens = kv_->prefix_miss_tokens();
    out.tokens_prefilled = tokens_prefilled_;
    out.tokens_generated = tokens_generated_;
    out.steps = steps_;
    const SchedCounters &sc = scheduler_->counters();
    const KvCounters &kc = kv_->counters();
    out.preemptions = sc.preemptions;
    out.bytes_to_host = kc.bytes_to_host;
    out.bytes_to_device = kc.bytes_to_device;
    out.parks = parks_ + sc.parks;
    out.swaps = sc.swaps;
    out.resumes = kc.resumes;
    out.demotions = kc.demotions;
    out.promotions = kc.promotions;
    out.sample_ns = sample_ns_;
    out.grammar_mask_ns = constraint_counters_.mask_ns;
    out.grammar_masks = constraint_counters_.masks;
    out.grammar_mask_cache_hits = constraint_counters_.mask_cache_hits;
    if (kv_->has_host_tier()) {
        out.host_bytes_total = kv_->host_bytes_total();
        out.host_bytes_used = kv_->host_bytes_used();
        out.host_blocks = kv_->host_blocks();
        out.copy_ns = kv_->copy_ns();
    }
}

std::string Engine::chat_format(const llmkv_chat_message *msgs, size_t n, bool add_generation_prompt) const {
    return format_chat(*file_, *tokenizer_, msgs, n, add_generation_prompt);
}

// Sessions and prefix handles each own one tail slot; max_sessions bounds them together.
void Engine::require_handle_room() const {
    if (sessions_.size() + prefixes_.size() >= params_.max_sessions) {
        fail(LLMKV_ERR_KV_CAPACITY, "max_sessions (%u) sessions and prefixes are already live", params_.max_sessions);
    }
}

void Engine::check_tokens(const int32_t *tokens, size_t n) const {
    if (n > 0 && !tokens) fail(LLMKV_ERR_INVALID_ARGUMENT, "tokens is NULL with n = %zu", n);
    const uint32_t n_vocab = model_->config().n_vocab;
    for (size_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || uint32_t(tokens[i]) >= n_vocab) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "tokens[%zu] = %d is outside the vocabulary (%u)", i, tokens[i], n_vocab);
        }
    }
}

void Engine::share_state(const Session &from, Session &to) {
    to.tokens = from.tokens;  // first: a throwing copy must not leave `to` holding KV
    kv_->share(from, to, params_.max_sessions);
    to.kv_dropped = from.kv_dropped;
    to.n_committed = from.n_committed;
}

Prefix *Engine::adopt_prefix(std::unique_ptr<Prefix> p) {
    // A throwing push must not leave the handle's KV held (or a dangling entry listed).
    try {
        prefixes_.push_back(p.get());
    } catch (...) {
        kv_->drop(p->state);
        throw;
    }
    try {
        kv_->pin_handle(&p->state);
    } catch (...) {
        prefixes_.pop_back();
        kv_->drop(p->state);
        throw;
    }
    return p.release();
}

Prefix *Engine::create_prefix(const int32_t *tokens, size_t n) {
    if (n == 0) fail(LLMKV_ERR_INVALID_ARGUMENT, "a prefix needs at least one token");
    check_tokens(tokens, n);
    if (n > max_context_) fail(LLMKV_ERR_KV_CAPACITY, "prefix of %zu tokens exceeds max_context %u", n, max_context_);
    require_handle_room();
    auto p = std::make_unique<Prefix>();
    p->engine = this;
    Session &s = p->state;
    s.engine = this;
    s.tokens.assign(tokens, tokens + n);
    try {
        prefill_now(s);
    } catch (...) {
        kv_->drop(s);
        throw;
    }
    return adopt_prefix(std::move(p));
}

// Like a session's prompt: every token but the last gets its KV now; the last one is
// computed with the logits by the first generate of a session made from the handle.
void Engine::prefill_now(Session &s) {
    kv_->match_prefix(s, s.tokens);
    ensure_sink(s);
    const uint32_t target = uint32_t(s.tokens.size()) - 1;
    while (s.kv.n_tokens < target) {
        uint32_t chunk = std::min(max_batch_tokens_, target - s.kv.n_tokens);
        if (!kv_->reserve(s, s.kv.n_tokens + chunk)) {
            fail(LLMKV_ERR_KV_CAPACITY, "KV pool cannot hold a %zu-token prefix (%u blocks available)", s.tokens.size(),
                 kv_->available());
        }
        spans_.assign(1, ForwardSpan{&s.kv, s.tokens.data() + s.kv.n_tokens, chunk, false});
        run_forward(spans_);
        tokens_prefilled_ += chunk;
        kv_->publish_sealed(s, s.tokens);
    }
}

Prefix *Engine::session_to_prefix(Session *s) {
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; a prefix needs a settled context");
    if (s->tokens.empty()) fail(LLMKV_ERR_STATE, "session has no tokens");
    require_handle_room();
    scheduler_->bring_back(sessions_, s);
    auto p = std::make_unique<Prefix>();
    p->engine = this;
    p->state.engine = this;
    share_state(*s, p->state);
    try {
        ensure_sink(p->state);  // a handle's KV is complete (it may be saved)
        // The session's KV was taken by preemption (or never computed): a handle holds it.
        if (p->state.kv.n_tokens + 1 < p->state.tokens.size()) prefill_now(p->state);
    } catch (...) {
        kv_->drop(p->state);
        throw;
    }
    return adopt_prefix(std::move(p));
}

void Engine::release_prefix(Prefix *p) {
    auto it = std::find(prefixes_.begin(), prefixes_.end(), p);
    if (it == prefixes_.end()) return;
    prefixes_.erase(it);
    kv_->unpin_handle(&p->state);
    kv_->drop(p->state);
    delete p;
}

// What a snapshot of this engine must agree on. The kernel variant is part of the codec
// string: kernels that round differently (AVX2 and portable, CPU and CUDA) seal different
// bytes, and a loaded prefix must be bitwise what this engine would compute.
SnapshotMeta Engine::snapshot_meta() const { return kv_->snapshot_meta(model_->fingerprint(), backend_->kernel_id()); }

void Engine::save_prefix(const Prefix *p, const std::string &path) const {
    SnapshotMeta m = snapshot_meta();
    m.tokens = p->state.tokens;
    kv_->save_snapshot(p->state, std::move(m), path);
}

Prefix *Engine::load_prefix(const std::string &path, bool share, bool any_kernel) {
    SnapshotMeta expected = snapshot_meta();
    expected.any_kernel = any_kernel;
    LoadedSnapshot snap = read_snapshot(path, expected);
    const SnapshotMeta &m = snap.meta();
    if (m.codec != expected.codec) {
        // Another kernel variant computed these bytes: never offered to the prefix cache,
        // which must hold only what this engine computes.
        LLMKV_LOG_INFO_F("snapshot %s: written by another kernel variant (\"%s\", this engine \"%s\"); loaded, "
                         "not bitwise, not shared", path.c_str(), m.codec.c_str(), expected.codec.c_str());
        share = false;
    }
    if (m.tokens.empty()) fail(LLMKV_ERR_SNAPSHOT_FORMAT, "snapshot %s: no tokens", path.c_str());
    if (m.n_cached >= m.tokens.size()) {
        fail(LLMKV_ERR_SNAPSHOT_FORMAT, "snapshot %s: %u cached tokens of %zu: the last token must not be cached",
             path.c_str(), m.n_cached, m.tokens.size());
    }
    try {
        check_tokens(m.tokens.data(), m.tokens.size());
    } catch (const Error &e) {
        fail(LLMKV_ERR_SNAPSHOT_FORMAT, "snapshot %s: %s", path.c_str(), e.what());
    }
    if (m.tokens.size() > max_context_) {
        fail(LLMKV_ERR_KV_CAPACITY, "snapshot %s: %zu tokens exceed max_context %u", path.c_str(), m.tokens.size(),
             max_context_);
    }
    require_handle_room();
    auto p = std::make_unique<Prefix>();
    p->engine = this;
    Session &s = p->state;
    s.engine = this;
    s.tokens = m.tokens;
    // Checksums catch accidents, not intent: a snapshot is trusted by the host that loads it,
    // not by every session of the engine, so its KV reaches the shared cache only on request.
    s.unshared = !share;
    try {
        kv_->load_snapshot(s, snap, path);
        kv_->publish_sealed(s, s.tokens);
    } catch (...) {
        kv_->drop(s);
        throw;
    }
    return adopt_prefix(std::move(p));
}

Session *Engine::fork(Session *src) {
    if (src->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; fork it before generate or after DONE");
    require_handle_room();
    scheduler_->bring_back(sessions_, src);
    auto s = std::make_unique<Session>();
    s->engine = this;
    s->user_data = src->user_data;
    s->priority = src->priority;
    s->default_max_new_tokens = src->default_max_new_tokens;
    s->sampler = std::make_unique<Sampler>(*src->sampler);  // same RNG state: same continuation
    s->constraints = src->constraints;                      // grammar state included
    s->stops = src->stops;
    s->finish_reason = src->finish_reason;
    sessions_.reserve(sessions_.size() + 1);  // the push below cannot throw once KV is shared
    share_state(*src, *s);
    s->refresh_state();
    sessions_.push_back(s.get());
    return s.release();
}

Session *Engine::create_session(const llmkv_session_params &p) {
    const Prefix *from = reinterpret_cast<const Prefix *>(p.prefix);
    if (from && std::find(prefixes_.begin(), prefixes_.end(), from) == prefixes_.end()) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "session_params.prefix is not a live prefix of this engine");
    }
    if (const char *why = validate_sampling(p.sampling)) fail(LLMKV_ERR_INVALID_ARGUMENT, "%s", why);
    if (p.n_stop_tokens > 0 && !p.stop_tokens) fail(LLMKV_ERR_INVALID_ARGUMENT, "session_params.stop_tokens is NULL with n_stop_tokens = %u", p.n_stop_tokens);
    if (p.n_stop_tokens > 1024) fail(LLMKV_ERR_INVALID_ARGUMENT, "session_params.n_stop_tokens = %u exceeds 1024", p.n_stop_tokens);
    const uint32_t n_vocab = model_->config().n_vocab;
    for (uint32_t i = 0; i < p.n_stop_tokens; ++i) {
        if (p.stop_tokens[i] < 0 || uint32_t(p.stop_tokens[i]) >= n_vocab) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "session_params.stop_tokens[%u] = %d is outside the vocabulary (%u)", i,
                 p.stop_tokens[i], n_vocab);
        }
    }
    std::vector<std::string> stop_strings = copy_stop_strings(p);
    std::vector<std::pair<int32_t, float>> bias = copy_logit_bias(p, n_vocab);
    std::shared_ptr<TokenMasker> masker = grammar_masker(p.grammar_kind, p.grammar, p.grammar_len, p.grammar_root);
    require_handle_room();
    auto s = std::make_unique<Session>();
    s->engine = this;
    s->user_data = p.user_data;
    s->priority = p.priority;
    s->default_max_new_tokens = p.max_new_tokens;
    s->sampler = std::make_unique<Sampler>(p.sampling, n_vocab);
    s->constraints.set_stop_tokens(std::vector<int32_t>(p.stop_tokens, p.stop_tokens + p.n_stop_tokens), eog_ids_);
    s->constraints.bias = std::move(bias);
    s->constraints.min_new_tokens = p.min_new_tokens;
    s->constraints.grammar.masker = std::move(masker);
    s->constraints.grammar.restart();
    s->stops = StopStrings(std::move(stop_strings));
    sessions_.reserve(sessions_.size() + 1);  // the push below cannot throw once KV is shared
    if (from) {
        share_state(from->state, *s);
        s->refresh_state();
    }
    sessions_.push_back(s.get());
    return s.release();
}

void Engine::destroy_session(Session *s) {
    auto it = std::find(sessions_.begin(), sessions_.end(), static_cast<Request *>(s));
    if (it == sessions_.end()) return;
    sessions_.erase(it);
    kv_->drop(*s);
    s->block_keys.clear();
    auto of_s = [&](const llmkv_event &ev) { return ev.session == s->handle; };
    events_.erase(std::remove_if(events_.begin(), events_.end(), of_s), events_.end());
    {
        std::lock_guard<std::mutex> io(io_mutex_);
        worker_events_.erase(std::remove_if(worker_events_.begin(), worker_events_.end(), of_s), worker_events_.end());
        submissions_.erase(std::remove_if(submissions_.begin(), submissions_.end(),
                                          [&](const Submission &r) { return r.session == s; }),
                           submissions_.end());
        n_submissions_.store(submissions_.size(), std::memory_order_release);
    }
    delete s;
}

void Engine::append(Session *s, const int32_t *tokens, size_t n) {
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; cancel it or wait for DONE before appending");
    check_tokens(tokens, n);
    if (s->tokens.size() + n > max_context_) {
        fail(LLMKV_ERR_KV_CAPACITY, "appending %zu tokens to %zu would exceed max_context %u", n, s->tokens.size(),
             max_context_);
    }
    if (n == 0) return;
    s->tokens.insert(s->tokens.end(), tokens, tokens + n);
    s->constraints.grammar.restart();  // new input: the next output is a new sentence
    s->kv_dropped = false;
    s->last_active = ++activity_clock_;
    if (!s->started) s->admit_seq = next_admit_seq_++;
    s->refresh_state();
}

void Engine::append_text(Session *s, const char *text, size_t len) {
    if (len > 0 && !text) fail(LLMKV_ERR_INVALID_ARGUMENT, "text is NULL with len = %zu", len);
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; cancel it or wait for DONE before appending");
    bool add_bos = s->tokens.empty() && tokenizer_->add_bos_default();
    std::vector<int32_t> ids = tokenizer_->encode(std::string_view(text ? text : "", len), add_bos, true);
    append(s, ids.data(), ids.size());
}

void Engine::generate(Session *s, uint32_t max_new_tokens) {
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is already generating");
    if (s->tokens.empty()) fail(LLMKV_ERR_STATE, "session has no tokens to continue from; append a prompt first");
    if (s->tokens.size() >= max_context_) {
        fail(LLMKV_ERR_KV_CAPACITY, "session holds %zu tokens, the max_context (%u): no room to generate",
             s->tokens.size(), max_context_);
    }
    s->stops.flush(s->text);  // bytes an earlier generation ended holding (after an error)
    s->stops.reset();
    s->generate_requested = true;
    s->generate_limit = max_new_tokens ? max_new_tokens : s->default_max_new_tokens;
    s->n_generated = 0;
    s->finish_reason = LLMKV_FINISH_NONE;
    s->admit_seq = next_admit_seq_++;
    s->started = false;
    s->kv_dropped = false;
    s->last_active = ++activity_clock_;
    s->refresh_state();
}

std::shared_ptr<TokenMasker> Engine::grammar_masker(uint32_t kind, const char *text, size_t len, const char *root) {
    if (kind == LLMKV_GRAMMAR_NONE) return nullptr;
    if (kind != LLMKV_GRAMMAR_GBNF && kind != LLMKV_GRAMMAR_JSON_SCHEMA) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "grammar kind %u is not a llmkv_grammar_kind", kind);
    }
    if (!text && len > 0) fail(LLMKV_ERR_INVALID_ARGUMENT, "grammar text is NULL with length %zu", len);
    std::string_view body(text ? text : "", len);
    std::string_view start = root ? std::string_view(root) : std::string_view("root");
    std::string key = std::to_string(kind) + ':' + std::string(start) + '\n' + std::string(body);
    auto it = maskers_.find(key);
    if (it != maskers_.end()) {
        if (std::shared_ptr<TokenMasker> m = it->second.lock()) return m;
    }
    std::shared_ptr<const Grammar> g =
        kind == LLMKV_GRAMMAR_GBNF ? Grammar::from_gbnf(body, start) : Grammar::from_json_schema(body);
    if (!grammar_vocab_) {
        const size_t n = tokenizer_->n_vocab();
        std::vector<std::string> bytes(n);
        std::vector<uint8_t> eligible(n);
        for (size_t i = 0; i < n; ++i) {
            bytes[i] = tokenizer_->token_bytes(int32_t(i));
            // Markup (control, unknown) and byteless tokens are never grammar text.
            eligible[i] = !tokenizer_->is_special(int32_t(i)) && !bytes[i].empty();
        }
        grammar_vocab_ = std::make_shared<const GrammarVocab>(std::move(bytes), std::move(eligible));
    }
    auto m = std::make_shared<TokenMasker>(std::move(g), grammar_vocab_);
    for (auto e = maskers_.begin(); e != maskers_.end();) {  // forget grammars no session uses
        e = e->second.expired() ? maskers_.erase(e) : std::next(e);
    }
    maskers_[key] = m;
    return m;
}

void Engine::set_grammar(Session *s, uint32_t kind, const char *text, size_t len, const char *root) {
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; set its grammar before generate or after DONE");
    std::shared_ptr<TokenMasker> m = grammar_masker(kind, text, len, root);
    s->constraints.grammar.masker = std::move(m);
    s->constraints.grammar.restart();
}

void Engine::cancel(Session *s) {
    if (!s->generate_requested) fail(LLMKV_ERR_STATE, "session is not generating");
    finish(s, LLMKV_FINISH_CANCELLED);
}

bool Engine::has_work() const {
    if (n_submissions_.load(std::memory_order_acquire) > 0) return true;
    for (const Request *s : sessions_) {
        if (s->pending_runnable() > 0) return true;
    }
    return false;
}

void Engine::push_event(Session *s, llmkv_event_kind kind, int32_t token, llmkv_finish_reason reason,
                        llmkv_status status) {
    llmkv_event ev{};
    ev.session = s->handle;
    ev.user_data = s->user_data;
    ev.kind = kind;
    ev.token = token;
    ev.finish_reason = reason;
    ev.status = status;
    events_.push_back(ev);
}

void Engine::finish(Session *s, llmkv_finish_reason reason) {
    s->generate_requested = false;
    s->finish_reason = reason;
    s->stops.flush(s->text);  // nothing when a stop string matched
    // A complete sentence (or one no token can continue) ends the grammar's turn.
    if (reason == LLMKV_FINISH_STOP || reason == LLMKV_FINISH_CONSTRAINT) s->constraints.grammar.restart();
    push_event(s, LLMKV_EVENT_DONE, -1, reason, LLMKV_OK);
    s->refresh_state();
}

void Engine::run_forward(const std::vector<ForwardSpan> &spans) { forward_->run(spans, logits_); }

void Engine::ensure_sink(Request &r) {
    if (!r.sink_missing) return;
    if (r.kv.tail < 0 && !kv_->reserve(r, r.kv.n_tokens)) {
        fail(LLMKV_ERR_KV_CAPACITY, "no free tail slot for the KV sink (max_sessions = %u counts sessions and prefixes)",
             params_.max_sessions);
    }
    sink_requests_.assign(1, &r);
    compute_sinks(sink_requests_);
}

void Engine::compute_sinks(const std::vector<Request *> &requests) {
    // Position 0 alone: a sequence with nothing computed over the request's tail slot. Its tail
    // rows hold no position of the request yet (they start after the matched blocks, at
    // n_tokens), so the pass writes only what is free: row 0 and the sink rows.
    sink_kv_.clear();
    sink_kv_.reserve(requests.size());  // the spans point into it
    sink_spans_.clear();
    for (Request *r : requests) {
        if (!r->sink_missing) continue;
        if (r->kv.tail < 0 || r->tokens.empty()) fail(LLMKV_ERR_INTERNAL, "KV sink: a request without a tail slot or tokens");
        sink_kv_.emplace_back().tail = r->kv.tail;
        sink_spans_.push_back(ForwardSpan{&sink_kv_.back(), r->tokens.data(), 1, false});
    }
    if (sink_spans_.empty()) return;
    forward_->run(sink_spans_, logits_);
    for (Request *r : requests) r->sink_missing = false;
}

// One step: the scheduler's plan, one batched forward pass, sampling, events.
void Engine::step() {
    run_submissions();
    // Requests the scheduler failed are already ended: their ERROR events go out even if
    // planning throws afterwards.
    auto report_failed = [this] {
        for (Request *r : plan_.failed) {
            push_event(static_cast<Session *>(r), LLMKV_EVENT_ERROR, -1, LLMKV_FINISH_NONE, LLMKV_ERR_KV_CAPACITY);
        }
        plan_.failed.clear();
    };
    try {
        scheduler_->schedule(sessions_, plan_);
    } catch (...) {
        report_failed();
        throw;
    }
    report_failed();
    if (plan_.spans.empty()) return;

    try {
        if (kv_->geometry().sink) {
            sink_requests_.clear();
            for (const StepPlan::Span &p : plan_.spans) {
                if (p.request->sink_missing) sink_requests_.push_back(p.request);
            }
            if (!sink_requests_.empty()) compute_sinks(sink_requests_);
        }
        spans_.clear();
        for (const StepPlan::Span &p : plan_.spans) {
            Request *r = p.request;
            spans_.push_back({&r->kv, r->tokens.data() + r->kv.n_tokens, p.n_tokens, p.want_logits, false, p.block_data});
        }
        mark_step();
        run_forward(spans_);
    } catch (...) {
        // A pass that fails part-way may have written (and sealed) some layers of the new
        // KV: every span's KV is recomputed from scratch instead, with identical tokens.
        for (const StepPlan::Span &p : plan_.spans) recompute_later(*p.request);
        throw;
    }
    ++steps_;
    ++activity_clock_;
    struct UndoOnThrow {  // the rest of the step is all or nothing (see StepMark)
        Engine *e;
        size_t events_mark;
        bool done = false;
        ~UndoOnThrow() {
            if (!done) e->undo_step(events_mark);
        }
    } undo_on_throw{this, events_.size()};
    for (const StepPlan::Span &p : plan_.spans) {
        Request *r = p.request;
        kv_->publish_sealed(*r, r->tokens);
        r->n_committed = std::max(r->n_committed, r->kv.n_tokens);
        r->last_active = activity_clock_;
    }

    const uint32_t n_vocab = model_->config().n_vocab;
    size_t logit_row = 0;
    for (size_t i = 0; i < plan_.spans.size(); ++i) {
        Session *s = static_cast<Session *>(plan_.spans[i].request);
        s->started = true;
        if (!spans_[i].want_logits) {
            tokens_prefilled_ += spans_[i].n;
            s->refresh_state();
            continue;
        }
        tokens_prefilled_ += s->n_generated == 0 ? spans_[i].n : 0;
        float *row = logits_.data() + logit_row * n_vocab;
        ++logit_row;
        auto t0 = std::chrono::steady_clock::now();
        bool any = s->constraints.apply(row, n_vocab, s->n_generated, constraint_counters_);
        int32_t token = any ? s->sampler->sample(row, s->tokens) : -1;
        sample_ns_ += uint64_t(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
        bool is_stop = any && s->constraints.is_stop_token(token);
        if (any && !is_stop && !s->constraints.advance(*tokenizer_, token)) {  // a mask never allows this
            LLMKV_LOG_ERROR_F("sampled token %d is outside the session's grammar; generation ends", token);
            any = false;
        }
        if (!any) {
            // The grammar, bias and bans leave nothing: the context is unchanged, but its last
            // token's KV is now computed, and an idle session holds all but its last token.
            // Its KV is recomputed when it next has work (its sealed blocks from the prefix cache).
            recompute_later(*s);
            s->kv_dropped = true;
            finish(s, LLMKV_FINISH_CONSTRAINT);
            continue;
        }
        s->tokens.push_back(token);
        s->n_committed = std::max<uint32_t>(s->n_committed, uint32_t(s->tokens.size()));
        if (is_stop) {
            finish(s, LLMKV_FINISH_STOP);
            continue;
        }
        ++s->n_generated;
        ++tokens_generated_;
        s->stops.feed(tokenizer_->token_bytes(token), s->text);
        push_event(s, LLMKV_EVENT_TOKEN, token, LLMKV_FINISH_NONE, LLMKV_OK);
        if (s->stops.matched() >= 0) {
            finish(s, LLMKV_FINISH_STOP);
        } else if (s->generate_limit && s->n_generated >= s->generate_limit) {
            finish(s, LLMKV_FINISH_LENGTH);
        } else if (s->tokens.size() >= max_context_) {
            finish(s, LLMKV_FINISH_CONTEXT);
        } else {
            s->refresh_state();
        }
    }
    undo_on_throw.done = true;
}

void Engine::mark_step() {
    step_marks_.resize(plan_.spans.size());
    for (size_t i = 0; i < plan_.spans.size(); ++i) {
        const Session *s = static_cast<const Session *>(plan_.spans[i].request);
        step_marks_[i] = StepMark{s->tokens.size(), s->n_generated, s->n_committed, s->generate_requested,
                                  s->finish_reason, s->text.mark(), s->stops.mark(),
                                  s->constraints.grammar.state, s->sampler->rng()};
    }
    marked_prefilled_ = tokens_prefilled_;
    marked_generated_ = tokens_generated_;
}

void Engine::recompute_later(Request &r) {
    kv_->drop(r);
    r.block_keys.clear();
    r.started = false;
    r.refresh_state();
}

void Engine::undo_step(size_t events_mark) noexcept {
    try {
        for (size_t i = 0; i < plan_.spans.size() && i < step_marks_.size(); ++i) {
            if (!plan_.spans[i].want_logits) continue;  // its KV advanced; nothing to undo
            Session *s = static_cast<Session *>(plan_.spans[i].request);
            const StepMark &m = step_marks_[i];
            s->tokens.resize(m.n_tokens);
            s->n_generated = m.n_generated;
            s->n_committed = m.n_committed;
            s->generate_requested = m.generate_requested;
            s->finish_reason = m.finish_reason;
            s->text.rollback(m.text);
            s->stops.rollback(m.stops);
            s->constraints.grammar.state = m.grammar_state;
            s->sampler->set_rng(m.rng);
            recompute_later(*s);
        }
        if (events_.size() > events_mark) events_.resize(events_mark);
        tokens_prefilled_ = marked_prefilled_;
        tokens_generated_ = marked_generated_;
    } catch (...) {
        LLMKV_LOG_ERROR_F("step: undoing a failed step failed; llmkv_engine_validate will tell%s", "");
    }
}

void Engine::park(Session *s) {
    if (!kv_->has_host_tier()) fail(LLMKV_ERR_UNSUPPORTED, "no host tier: engine_params.kv_host_bytes is 0");
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; park it after DONE or cancel");
    if (s->host.phase == HostKv::Phase::kIn) {
        kv_->reap(*s, /*wait=*/true);
        s->refresh_state();
    }
    if (s->host.phase != HostKv::Phase::kNone || (s->kv.tail < 0 && s->kv.blocks.empty())) return;
    if (!kv_->park_out(*s, /*wait=*/false)) {
        fail(LLMKV_ERR_KV_CAPACITY, "host tier full: %.1f of %.1f MiB used", kv_->host_region_used() / 1048576.0,
             kv_->host_bytes_total() / 1048576.0);
    }
    s->refresh_state();
    ++parks_;
}

size_t Engine::take_events(llmkv_event *out, size_t capacity) {
    size_t n = std::min(capacity, events_.size());
    for (size_t i = 0; i < n; ++i) {
        out[i] = events_.front();
        events_.pop_front();
    }
    return n;
}

void Engine::check_invariants() const {
    std::vector<const KvSeq *> seqs(sessions_.begin(), sessions_.end());
    for (const Prefix *p : prefixes_) seqs.push_back(&p->state);
    kv_->check_invariants(seqs);
}

}  // namespace llmkv
