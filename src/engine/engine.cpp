// Engine: creation (model, tokenizer, KV pool sizing), sessions, and the step loop that
// turns a scheduler plan into one batched forward pass and events.
#include "engine/engine.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "common/error.h"
#include "common/log.h"
#include "engine/chat_template.h"

namespace llmkv {

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

bool known_dtype(uint32_t d) { return d <= LLMKV_KV_INT4; }

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

// The host tier's region from the CUDA module's pinned allocator. HostTier wants its
// region aligned to HostTier::kArenaAlignment; cudaHostAlloc promises less, so the region is
// carved from a larger allocation and the original pointer kept for the free.
static HostAllocator cuda_host_allocator(CudaBackend *cuda) {
    auto bases = std::make_shared<std::unordered_map<void *, void *>>();
    HostAllocator a;
    a.name = "cudaHostAlloc";
    a.alloc = [cuda, bases](uint64_t bytes, uint64_t alignment, bool &locked) -> void * {
        void *base = nullptr;
        try {
            base = cuda->host_alloc(size_t(bytes + alignment));
        } catch (const Error &) {
            return nullptr;
        }
        if (!base) return nullptr;
        uintptr_t aligned = (reinterpret_cast<uintptr_t>(base) + alignment - 1) & ~uintptr_t(alignment - 1);
        (*bases)[reinterpret_cast<void *>(aligned)] = base;
        locked = true;
        return reinterpret_cast<void *>(aligned);
    };
    a.free = [cuda, bases](void *p, uint64_t) {
        auto it = bases->find(p);
        if (it == bases->end()) return;
        cuda->host_free(it->second);
        bases->erase(it);
    };
    return a;
}

std::unique_ptr<Engine> Engine::create(const llmkv_engine_params &p) {
    if (!p.model_path || !*p.model_path) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.model_path is NULL or empty");
    const uint32_t backend = raw_enum(p.backend), dtype_k = raw_enum(p.kv_dtype_k), dtype_v = raw_enum(p.kv_dtype_v);
    if (backend > LLMKV_BACKEND_CUDA) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.backend = %u is unknown", backend);
    if (p.n_devices > 1) fail(LLMKV_ERR_UNSUPPORTED, "tensor parallelism (n_devices = %u) is not available yet", p.n_devices);
    if (p.n_devices > 0 && !p.devices) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.devices is NULL with n_devices = %u", p.n_devices);
    if (!known_dtype(dtype_k)) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_dtype_k = %u is unknown", dtype_k);
    if (!known_dtype(dtype_v)) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_dtype_v = %u is unknown", dtype_v);
    if (p.kv_block_tokens > 1024) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_block_tokens = %u exceeds 1024", p.kv_block_tokens);
    if (p.n_threads > 1024) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_threads = %u exceeds 1024", p.n_threads);
    if (p.max_sessions > (1u << 20)) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.max_sessions = %u is too large", p.max_sessions);
    if (p.max_batch_tokens > (1u << 16)) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.max_batch_tokens = %u exceeds 65536", p.max_batch_tokens);
    if (p.kv_residual_tokens > 4096) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_residual_tokens = %u exceeds 4096", p.kv_residual_tokens);
    if (p.flags & ~LLMKV_ENGINE_PREFIX_CACHE) fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.flags has unknown bits 0x%x", p.flags);

    std::unique_ptr<Engine> e(new Engine());
    e->params_ = p;
    e->params_.model_path = nullptr;  // borrowed; not kept
    e->file_ = std::shared_ptr<GgufFile>(GgufFile::open(p.model_path));
    e->model_ = LlamaModel::load(e->file_);
    e->tokenizer_ = Tokenizer::from_gguf(*e->file_);
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
        g.rotate_k = g.dtype_k == LLMKV_KV_INT4;
        g.rotate_v = g.dtype_v == LLMKV_KV_INT4;
    } else {
        g.rotate_k = rotation == LLMKV_KV_ROTATION_K || rotation == LLMKV_KV_ROTATION_KV;
        g.rotate_v = rotation == LLMKV_KV_ROTATION_V || rotation == LLMKV_KV_ROTATION_KV;
    }

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
    const uint32_t max_sessions = p.max_sessions ? p.max_sessions : kDefaultMaxSessions;
    const size_t block_bytes = g.sealed_block_bytes();
    uint64_t budget = p.kv_device_bytes;
    if (budget == 0) {
        // Room for four full-length sessions, capped; untouched blocks cost no memory.
        uint64_t want = uint64_t(4) * (e->max_context_ / g.block_tokens + 1) * block_bytes;
        budget = std::min(want, std::max<uint64_t>(kMaxAutomaticKvBytes, block_bytes * 64));
    }
    uint64_t n_blocks = budget / block_bytes;
    if (n_blocks == 0) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "kv_device_bytes = %llu is smaller than one block (%zu bytes)",
             (unsigned long long)budget, block_bytes);
    }
    if (n_blocks > (1u << 30)) n_blocks = 1u << 30;
    e->kv_device_bytes_ = n_blocks * block_bytes;
    e->cache_ = std::make_unique<KvCache>(g, uint32_t(n_blocks), max_sessions);
    if (p.flags & LLMKV_ENGINE_PREFIX_CACHE) {
        if (g.residual_tokens == 0) {
            // The salt makes blocks of another model, codec, rotation or block size unmatchable.
            std::string salt = strprintf("llmkv-prefix-v1|%s|k=%s%s|v=%s%s|B=%u|R=%u", e->model_->fingerprint().c_str(),
                                         codec_name(g.dtype_k), g.rotate_k ? "+rot" : "", codec_name(g.dtype_v),
                                         g.rotate_v ? "+rot" : "", g.block_tokens, g.residual_tokens);
            e->prefix_ = std::make_unique<PrefixCache>(e->cache_->sealed_pool(), g.block_tokens, block_salt(salt));
            e->cache_->set_prefix_cache(e->prefix_.get());
        } else {
            // A matched block would be read sealed where a recomputation reads fp16 rows,
            // breaking bitwise equality with the uncached run.
            LLMKV_LOG_INFO_F("prefix cache off: it needs kv_residual_tokens = 0 (got %u)", g.residual_tokens);
        }
    }

    unsigned threads = p.n_threads ? p.n_threads : ThreadPool::hardware_threads();
    e->pool_ = std::make_unique<ThreadPool>(threads);
    e->max_batch_tokens_ = p.max_batch_tokens ? p.max_batch_tokens : kDefaultMaxBatchTokens;

    // Backend: CUDA when asked for (or AUTO) and the module loads and sees a device.
    bool use_cuda = false;
    if (backend != LLMKV_BACKEND_CPU) {
        std::string why;
        const int n_devices = CudaModule::get().device_count(&why);
        const int device = p.n_devices > 0 ? p.devices[0] : 0;
        if (n_devices > 0 && device >= 0 && device < n_devices) {
            use_cuda = true;
        } else if (backend == LLMKV_BACKEND_CUDA) {
            if (n_devices > 0) why = strprintf("device %d does not exist (%d devices)", device, n_devices);
            fail(LLMKV_ERR_UNSUPPORTED, "the CUDA backend is not available: %s", why.c_str());
        } else {
            LLMKV_LOG_INFO_F("backend AUTO: using the CPU (CUDA: %s)", why.c_str());
        }
        if (use_cuda) {
            CudaBackendOptions o;
            o.device = device;
            o.max_batch_tokens = e->max_batch_tokens_;
            o.max_spans = std::min(max_sessions, e->max_batch_tokens_);
            o.n_sealed_blocks = uint32_t(n_blocks);
            o.n_tail_slots = max_sessions;
            e->cuda_ = std::make_unique<CudaBackend>(*e->model_, g, o);
            CudaBackend *cuda = e->cuda_.get();
            e->cache_->set_tail_copier([cuda](int64_t from, int64_t to) { cuda->copy_tail(from, to); });
        }
    }
    if (!use_cuda) e->forward_ = std::make_unique<Forward>(*e->model_, *e->cache_, *e->pool_, e->max_batch_tokens_);
    if (p.kv_host_bytes != 0) {
        // CUDA: page-locked memory from cudaHostAlloc (so copies to and from the device run
        // at full speed), over-allocated to place the region on the arena alignment.
        e->host_ = e->cuda_ ? std::make_unique<HostTier>(p.kv_host_bytes, cuda_host_allocator(e->cuda_.get()))
                            : std::make_unique<HostTier>(p.kv_host_bytes);
        e->copier_ = std::make_unique<CopyEngine>();
        LLMKV_LOG_INFO_F("host tier: %.1f MiB (%s)", e->host_->bytes_total() / 1048576.0,
                         e->host_->locked() ? "locked" : "not locked");
        if (e->prefix_) {
            e->host_prefix_ = std::make_unique<HostPrefixStore>();
            Engine *self = e.get();
            e->prefix_->set_evict_hook([self](uint32_t block, const BlockHashKey &key, const int32_t *tokens) {
                self->demote(block, key, tokens);
            });
        }
    }

    e->scheduler_ = std::make_unique<Scheduler>(e->max_batch_tokens_);
    e->params_.n_threads = threads;
    e->params_.kv_block_tokens = g.block_tokens;
    e->params_.max_sessions = max_sessions;
    e->params_.max_batch_tokens = e->max_batch_tokens_;
    LLMKV_LOG_INFO_F("engine: model '%s' (%u layers, %u heads / %u kv heads, head_dim %u), backend %s "
                     "(%s), %u threads, KV %s/%s, %llu blocks of %u tokens (%zu bytes)",
                     c.name.c_str(), c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, use_cuda ? "cuda" : "cpu",
                     use_cuda ? e->cuda_->device_name().c_str() : cpu::matmul_kernel_name(), threads, codec_name(g.dtype_k), codec_name(g.dtype_v),
                     (unsigned long long)n_blocks, g.block_tokens, block_bytes);
    return e;
}

Engine::~Engine() {
    for (const Session *s : sessions_) transfer_wait(s->host.ticket);
    if (copier_) copier_->wait_all();
    if (prefix_) prefix_->set_evict_hook(nullptr);
    if (host_prefix_) {
        while (void *p = host_prefix_->take_oldest()) host_->free_block(p);
    }
    for (Session *s : sessions_) {
        drop_kv(*s);
        delete s;
    }
    for (Prefix *p : prefixes_) {
        cache_->release(p->state.kv);
        delete p;
    }
    if (prefix_) prefix_->clear();
    // The host tier's memory may come from the CUDA module: give it back while that exists.
    copier_.reset();
    host_.reset();
}

void Engine::get_info(llmkv_engine_info &out) const {
    const LlamaConfig &c = model_->config();
    const KvGeometry &g = cache_->geometry();
    uint32_t size = out.struct_size;
    std::memset(&out, 0, sizeof(out));
    out.struct_size = size;
    copy_string(out.model_name, sizeof(out.model_name), c.name);
    copy_string(out.architecture, sizeof(out.architecture), c.architecture);
    copy_string(out.backend_name, sizeof(out.backend_name), cuda_ ? "cuda" : "cpu");
    out.backend = cuda_ ? LLMKV_BACKEND_CUDA : LLMKV_BACKEND_CPU;
    out.n_vocab = c.n_vocab;
    out.n_ctx_train = c.n_ctx_train;
    out.max_context = max_context_;
    out.n_layers = c.n_layers;
    out.n_embd = c.n_embd;
    out.n_heads = c.n_heads;
    out.n_kv_heads = c.n_kv_heads;
    out.head_dim = c.head_dim;
    out.n_threads = pool_->size();
    out.kv_block_tokens = g.block_tokens;
    out.kv_dtype_k = g.dtype_k;
    out.kv_dtype_v = g.dtype_v;
    out.tp_size = 1;
    out.n_params = model_->n_params();
    out.weight_bytes = model_->weight_bytes();
    out.kv_bytes_per_token_device = g.sealed_block_bytes() / g.block_tokens;
    out.kv_bytes_per_token_tail = g.tail_block_bytes() / g.tail_capacity();
    out.kv_device_bytes = kv_device_bytes_;
    out.kv_blocks_total = cache_->sealed_pool().n_total();
    out.kv_tail_blocks_total = cache_->tail_pool().n_total();
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
    const BlockPool &sealed = cache_->sealed_pool();
    const BlockPool &tails = cache_->tail_pool();
    out.blocks_total = sealed.n_total();
    out.blocks_free = sealed.n_free();
    out.blocks_cached = prefix_ ? prefix_->n_evictable() : 0;
    out.blocks_used = sealed.n_used() - out.blocks_cached;
    out.tail_blocks_total = tails.n_total();
    out.tail_blocks_used = tails.n_used();
    out.sessions_total = uint32_t(sessions_.size());
    for (const Session *s : sessions_) {
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
    out.prefix_hit_tokens = prefix_ ? prefix_->hit_tokens() : 0;
    out.prefix_miss_tokens = prefix_ ? prefix_->miss_tokens() : 0;
    out.tokens_prefilled = tokens_prefilled_;
    out.tokens_generated = tokens_generated_;
    out.steps = steps_;
    out.preemptions = preemptions_;
    out.bytes_to_host = bytes_to_host_;
    out.bytes_to_device = bytes_to_device_;
    out.parks = parks_;
    out.swaps = swaps_;
    out.resumes = resumes_;
    out.demotions = demotions_;
    out.promotions = promotions_;
    if (host_) {
        out.host_bytes_total = host_->bytes_total();
        out.host_bytes_used = host_bytes_held_;
        out.host_blocks = host_->blocks_used();
        out.copy_ns = copier_->stats().copy_ns;
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
    if (from.n_offloaded > 0) {
        fail(LLMKV_ERR_UNSUPPORTED, "the session's context exceeds the device pool (%u blocks in the host tier); "
             "it cannot be forked or made a prefix", from.n_offloaded);
    }
    if (!cache_->share(from.kv, to.kv)) {
        fail(LLMKV_ERR_KV_CAPACITY, "no free tail slot (max_sessions = %u counts sessions and prefixes)",
             params_.max_sessions);
    }
    to.tokens = from.tokens;
    to.block_keys = from.block_keys;
    to.kv_dropped = from.kv_dropped;
    to.n_committed = from.n_committed;
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
        cache_->release(s.kv);
        throw;
    }
    prefixes_.push_back(p.get());
    return p.release();
}

// Like a session's prompt: every token but the last gets its KV now; the last one is
// computed with the logits by the first generate of a session made from the handle.
void Engine::prefill_now(Session &s) {
    match_prefix(&s);
    const uint32_t target = uint32_t(s.tokens.size()) - 1;
    while (s.kv.n_tokens < target) {
        uint32_t chunk = std::min(max_batch_tokens_, target - s.kv.n_tokens);
        if (!cache_->reserve(s.kv, s.kv.n_tokens + chunk)) {
            fail(LLMKV_ERR_KV_CAPACITY, "KV pool cannot hold a %zu-token prefix (%u blocks available)", s.tokens.size(),
                 cache_->sealed_available());
        }
        std::vector<ForwardSpan> spans = {{&s.kv, s.tokens.data() + s.kv.n_tokens, chunk, false}};
        run_forward(spans);
        tokens_prefilled_ += chunk;
        publish_sealed(&s);
    }
}

Prefix *Engine::session_to_prefix(Session *s) {
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; a prefix needs a settled context");
    if (s->tokens.empty()) fail(LLMKV_ERR_STATE, "session has no tokens");
    require_handle_room();
    bring_back(s);
    auto p = std::make_unique<Prefix>();
    p->engine = this;
    p->state.engine = this;
    share_state(*s, p->state);
    if (p->state.kv.n_tokens + 1 < p->state.tokens.size()) {
        // The session's KV was taken by preemption (or never computed): a handle holds it.
        try {
            prefill_now(p->state);
        } catch (...) {
            cache_->release(p->state.kv);
            throw;
        }
    }
    prefixes_.push_back(p.get());
    return p.release();
}

void Engine::release_prefix(Prefix *p) {
    auto it = std::find(prefixes_.begin(), prefixes_.end(), p);
    if (it == prefixes_.end()) return;
    prefixes_.erase(it);
    cache_->release(p->state.kv);
    delete p;
}

// What a snapshot of this engine must agree on. The CPU kernel variant is part of the codec
// string: AVX2 and portable kernels round differently, and a loaded prefix must be bitwise
// what this engine would compute.
SnapshotMeta Engine::snapshot_meta() const {
    const KvGeometry &g = cache_->geometry();
    SnapshotMeta m;
    m.model_fingerprint = model_->fingerprint();
    m.codec = snapshot_codec_string(g.dtype_k, g.dtype_v, g.rotate_k, g.rotate_v) + " kernels=" +
              (cuda_ ? "cuda" : cpu::matmul_kernel_name());
    m.block_tokens = g.block_tokens;
    m.n_layers = g.n_layers;
    m.n_kv_heads = g.n_kv_heads;
    m.head_dim = g.head_dim;
    m.dtype_k = g.dtype_k;
    m.dtype_v = g.dtype_v;
    m.rotate_k = g.rotate_k;
    m.rotate_v = g.rotate_v;
    m.residual_tokens = g.residual_tokens;
    m.block_bytes = g.sealed_block_bytes();
    m.tail_bytes = g.tail_block_bytes();
    return m;
}

void Engine::save_prefix(const Prefix *p, const std::string &path) const {
    const Session &s = p->state;
    SnapshotMeta m = snapshot_meta();
    m.n_cached = s.kv.n_tokens;
    m.tokens = s.tokens;
    std::vector<const uint8_t *> blocks;
    std::vector<uint8_t> staged;  // device pools: the bytes come to host memory first
    std::vector<uint8_t> tail_bytes(m.tail_bytes, 0);
    if (cuda_) {
        staged.resize(s.kv.blocks.size() * m.block_bytes);
        std::vector<Transfer> t;
        for (size_t i = 0; i < s.kv.blocks.size(); ++i) {
            t.push_back({Transfer::kBlockOut, s.kv.blocks[i], staged.data() + i * m.block_bytes});
            blocks.push_back(staged.data() + i * m.block_bytes);
        }
        if (s.kv.tail >= 0) t.push_back({Transfer::kTailOut, s.kv.tail, tail_bytes.data()});
        submit_transfers(t, true);
        write_snapshot(path, m, blocks, tail_bytes.data());
        return;
    }
    for (uint32_t id : s.kv.blocks) blocks.push_back(cache_->sealed_pool().data(id));
    const uint8_t *tail = s.kv.tail >= 0 ? cache_->tail_pool().data(uint32_t(s.kv.tail)) : tail_bytes.data();
    write_snapshot(path, m, blocks, tail);
}

Prefix *Engine::load_prefix(const std::string &path) {
    LoadedSnapshot snap = read_snapshot(path, snapshot_meta());
    const SnapshotMeta &m = snap.meta();
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
    if (!cache_->reserve(s.kv, m.n_cached)) {
        fail(LLMKV_ERR_KV_CAPACITY, "KV pool cannot hold the %u cached tokens of snapshot %s", m.n_cached, path.c_str());
    }
    std::vector<Transfer> t;
    for (size_t i = 0; i < s.kv.blocks.size(); ++i) {
        t.push_back({Transfer::kBlockIn, s.kv.blocks[i], const_cast<uint8_t *>(snap.block(i))});
    }
    t.push_back({Transfer::kTailIn, s.kv.tail, const_cast<uint8_t *>(snap.tail())});
    submit_transfers(t, true);
    s.kv.n_tokens = m.n_cached;
    publish_sealed(&s);
    prefixes_.push_back(p.get());
    return p.release();
}

Session *Engine::fork(Session *src) {
    if (src->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; fork it before generate or after DONE");
    require_handle_room();
    bring_back(src);
    auto s = std::make_unique<Session>();
    s->engine = this;
    s->user_data = src->user_data;
    s->priority = src->priority;
    s->default_max_new_tokens = src->default_max_new_tokens;
    s->stop_tokens = src->stop_tokens;
    s->sampler = std::make_unique<Sampler>(*src->sampler);  // same RNG state: same continuation
    s->finish_reason = src->finish_reason;
    share_state(*src, *s);
    update_state(s.get());
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
    require_handle_room();
    auto s = std::make_unique<Session>();
    s->engine = this;
    s->user_data = p.user_data;
    s->priority = p.priority;
    s->default_max_new_tokens = p.max_new_tokens;
    s->stop_tokens.assign(p.stop_tokens, p.stop_tokens + p.n_stop_tokens);
    s->sampler = std::make_unique<Sampler>(p.sampling, n_vocab);
    if (from) {
        share_state(from->state, *s);
        update_state(s.get());
    }
    sessions_.push_back(s.get());
    return s.release();
}

void Engine::destroy_session(Session *s) {
    auto it = std::find(sessions_.begin(), sessions_.end(), s);
    if (it == sessions_.end()) return;
    sessions_.erase(it);
    drop_kv(*s);
    s->block_keys.clear();
    events_.erase(std::remove_if(events_.begin(), events_.end(),
                                 [&](const llmkv_event &ev) { return ev.session == s->handle; }),
                  events_.end());
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
    s->kv_dropped = false;
    s->last_active = ++activity_clock_;
    if (!s->started) s->admit_seq = next_admit_seq_++;
    update_state(s);
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
    s->generate_requested = true;
    s->generate_limit = max_new_tokens ? max_new_tokens : s->default_max_new_tokens;
    s->n_generated = 0;
    s->finish_reason = LLMKV_FINISH_NONE;
    s->admit_seq = next_admit_seq_++;
    s->started = false;
    s->kv_dropped = false;
    s->last_active = ++activity_clock_;
    update_state(s);
}

void Engine::cancel(Session *s) {
    if (!s->generate_requested) fail(LLMKV_ERR_STATE, "session is not generating");
    finish(s, LLMKV_FINISH_CANCELLED);
}

uint32_t Engine::pending_runnable(const Session &s) const {
    if (s.kv_dropped && !s.generate_requested) return 0;
    uint32_t pending = uint32_t(s.tokens.size()) - s.kv.n_tokens;
    if (s.generate_requested) return pending;
    // Without a generate request the last token waits: its logits are computed by the
    // pass that starts generation.
    return pending > 0 ? pending - 1 : 0;
}

bool Engine::has_work() const {
    for (const Session *s : sessions_) {
        if (pending_runnable(*s) > 0) return true;
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
    push_event(s, LLMKV_EVENT_DONE, -1, reason, LLMKV_OK);
    update_state(s);
}

void Engine::update_state(Session *s) {
    if (s->host.phase != HostKv::Phase::kNone) {
        s->state = LLMKV_SESSION_PARKED;
        return;
    }
    if (s->generate_requested) {
        bool prompt_done = uint32_t(s->tokens.size()) - s->kv.n_tokens <= 1;
        s->state = !s->started ? LLMKV_SESSION_QUEUED
                   : (prompt_done && s->n_generated > 0) ? LLMKV_SESSION_GENERATING
                                                         : LLMKV_SESSION_PREFILLING;
        if (s->started && prompt_done) s->state = LLMKV_SESSION_GENERATING;
    } else if (pending_runnable(*s) > 0) {
        s->state = s->started ? LLMKV_SESSION_PREFILLING : LLMKV_SESSION_QUEUED;
    } else {
        s->state = s->finish_reason != LLMKV_FINISH_NONE ? LLMKV_SESSION_FINISHED : LLMKV_SESSION_IDLE;
        s->started = false;
    }
}

// A session about to start from nothing takes the longest cached chain of full blocks of
// its context (all but the last token, whose logits must be computed).
void Engine::match_prefix(Session *s) {
    if (!prefix_ || s->kv.n_tokens != 0 || !s->kv.blocks.empty() || s->tokens.size() < 2) return;
    const size_t limit = s->tokens.size() - 1;
    size_t m = prefix_->match(s->tokens.data(), limit, s->kv.blocks);
    s->block_keys.clear();
    for (uint32_t id : s->kv.blocks) s->block_keys.push_back(prefix_->key_of(id));
    const uint32_t B = cache_->geometry().block_tokens;
    // Tiered cache: the chain may continue in the host tier; promote those blocks back.
    if (host_prefix_) {
        const size_t block_bytes = cache_->sealed_pool().block_bytes();
        while ((m + 1) * B <= limit) {
            const int32_t *t = s->tokens.data() + m * B;
            const BlockHashKey parent = m ? s->block_keys.back() : kRootBlockKey;
            const BlockHashKey key = prefix_->key_for(parent, t);
            if (!host_prefix_->find(key, t, B)) break;
            // Out of the store first: the allocation below may evict (and so demote) another
            // block, which may drop the oldest demoted entries to make room.
            void *data = host_prefix_->take(key);
            std::vector<uint32_t> id;
            if (!cache_->allocate_sealed(1, id)) {
                host_prefix_->insert(key, data, t, B);
                break;
            }
            submit_transfers({{Transfer::kBlockIn, id[0], data}}, true);
            host_->free_block(data);
            host_bytes_held_ -= block_bytes;
            bytes_to_device_ += block_bytes;
            s->kv.blocks.push_back(id[0]);
            PrefixCache::PublishResult r =
                prefix_->publish(parent, t, id[0], m ? s->kv.blocks[m - 1] : PrefixCache::kNoBlock);
            s->block_keys.push_back(r.key);
            ++promotions_;
            ++m;
        }
    }
    s->kv.n_tokens = uint32_t(m) * B;
}

bool Engine::host_reserve(uint64_t bytes) {
    const uint64_t budget = params_.kv_host_bytes;
    if (bytes > budget) return false;
    if (host_prefix_) {
        const size_t block_bytes = cache_->sealed_pool().block_bytes();
        while (host_bytes_held_ + bytes > budget && !host_prefix_->empty()) {
            host_->free_block(host_prefix_->take_oldest());
            host_bytes_held_ -= block_bytes;
        }
    }
    return host_bytes_held_ + bytes <= budget;
}

void Engine::demote(uint32_t block, const BlockHashKey &key, const int32_t *tokens) {
    const size_t block_bytes = cache_->sealed_pool().block_bytes();
    if (!host_reserve(block_bytes)) return;
    void *p = host_->allocate_block(block_bytes);
    if (!p) return;
    submit_transfers({{Transfer::kBlockOut, block, p}}, true);
    if (!host_prefix_->insert(key, p, tokens, cache_->geometry().block_tokens)) {
        host_->free_block(p);
        return;
    }
    host_bytes_held_ += block_bytes;
    bytes_to_host_ += block_bytes;
    ++demotions_;
}

// Offers the session's newly sealed blocks to the prefix cache. When an equal block is
// already cached (bitwise identical: same tokens at the same positions), the session
// switches to it and its own copy returns to the pool.
void Engine::publish_sealed(Session *s) {
    if (!prefix_) return;
    const uint32_t B = cache_->geometry().block_tokens;
    for (size_t i = s->block_keys.size(); i < s->kv.blocks.size(); ++i) {
        const BlockHashKey &parent = i ? s->block_keys[i - 1] : kRootBlockKey;
        uint32_t parent_block =
            i && s->kv.blocks[i - 1] != SessionKv::kHostBlock ? s->kv.blocks[i - 1] : PrefixCache::kNoBlock;
        PrefixCache::PublishResult r = prefix_->publish(parent, s->tokens.data() + i * B, s->kv.blocks[i], parent_block);
        s->block_keys.push_back(r.key);
        if (r.status == PrefixCache::PublishStatus::kDuplicate && r.block_id != s->kv.blocks[i]) {
            prefix_->acquire(r.block_id);
            prefix_->release(s->kv.blocks[i]);
            s->kv.blocks[i] = r.block_id;
        }
    }
}

namespace {

// True when a gives up its blocks before b: lower priority, then more recently admitted.
bool ranks_below(const Session &a, const Session &b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.admit_seq > b.admit_seq;
}

}  // namespace

// Blocks that return to the pool (or become evictable) when the session lets go: those
// no other session or prefix holds.
uint32_t Engine::holders(uint32_t block) const {
    return cache_->sealed_pool().refcount(block) - (prefix_ && prefix_->contains(block) ? 1 : 0);
}

uint32_t Engine::freeable_blocks(const Session &s) const {
    uint32_t n = 0;
    for (uint32_t id : s.kv.blocks) {
        if (id != SessionKv::kHostBlock && holders(id) == 1) ++n;
    }
    return n;
}

// Whether n_tokens of the session could be held if every other session gave up its blocks:
// only prefix handles pin blocks for good.
bool Engine::can_fit_alone(const Session &s, uint32_t n_tokens) const {
    const uint32_t total = cache_->sealed_pool().n_total();
    std::vector<bool> pinned(total, false);
    for (const Prefix *p : prefixes_) {
        for (uint32_t id : p->state.kv.blocks) pinned[id] = true;
    }
    for (uint32_t id : s.kv.blocks) {
        if (id != SessionKv::kHostBlock) pinned[id] = false;  // already the session's own
    }
    uint32_t n_pinned = uint32_t(std::count(pinned.begin(), pinned.end(), true));
    return cache_->geometry().sealed_blocks(n_tokens) <= total - n_pinned;
}

void Engine::preempt(Session *v) {
    const bool had_work = has_pending_work(*v);
    ++preemptions_;
    if (park_out(v, /*wait=*/true)) {
        // Swapped (or parked, when idle): its KV comes back by copy, not recomputation.
        ++(had_work ? swaps_ : parks_);
    } else {
        drop_kv(*v);
        v->block_keys.clear();
        if (!had_work) v->kv_dropped = true;
    }
    if (had_work) v->started = false;  // back to the queue, keeping its place (admit_seq)
    update_state(v);
    preempted_.push_back(v);
    auto it = std::find(span_sessions_.begin(), span_sessions_.end(), v);
    if (it != span_sessions_.end()) {
        spans_.erase(spans_.begin() + (it - span_sessions_.begin()));
        span_sessions_.erase(it);
    }
}

bool Engine::make_room(Session *s, uint32_t need, bool fresh) {
    uint32_t available = cache_->sealed_available();
    if (need <= available) return true;
    if (copier_) {
        // Blocks of sessions being parked come back to the pool when their copies end.
        bool parking = false;
        for (const Session *v : sessions_) parking |= v->host.phase == HostKv::Phase::kOut;
        if (parking) {
            for (const Session *v : sessions_) {
                if (v->host.phase == HostKv::Phase::kOut) transfer_wait(v->host.ticket);
            }
            reap_copies();
            available = cache_->sealed_available();
            if (need <= available) return true;
        }
    }
    // Victims in order: idle sessions, least recently active first; then sessions ranked
    // below s, lowest first. A session not yet running (fresh) only displaces idle
    // sessions and sessions of strictly lower priority, so admission never thrashes.
    std::vector<Session *> idle, active;
    for (Session *v : sessions_) {
        if (v == s || v->kv.blocks.empty() || v->host.phase != HostKv::Phase::kNone) continue;
        if (!has_pending_work(*v)) {
            idle.push_back(v);
        } else if (ranks_below(*v, *s) && (!fresh || v->priority < s->priority)) {
            active.push_back(v);
        }
    }
    std::sort(idle.begin(), idle.end(), [](const Session *a, const Session *b) { return a->last_active < b->last_active; });
    std::sort(active.begin(), active.end(), [](const Session *a, const Session *b) { return ranks_below(*a, *b); });
    idle.insert(idle.end(), active.begin(), active.end());
    // Count first, so that nobody is preempted for nothing.
    size_t n_victims = 0;
    uint32_t gain = 0;
    while (n_victims < idle.size() && available + gain < need) gain += freeable_blocks(*idle[n_victims++]);
    if (available + gain < need) return false;
    for (size_t i = 0; i < n_victims; ++i) preempt(idle[i]);
    return true;
}

void Engine::fail_capacity(Session *s) {
    LLMKV_LOG_WARN_F("KV pool exhausted: a session of %zu tokens cannot get the blocks it needs (%u of %u available)",
                     s->tokens.size(), cache_->sealed_available(), cache_->sealed_pool().n_total());
    // Drop its unprocessed input (nothing computed is lost) and report the error.
    if (!(s->generate_requested && s->n_generated > 0)) {
        s->tokens.resize(std::max<size_t>(std::min(s->tokens.size(), size_t(s->n_committed)), s->kv.n_tokens));
    }
    s->generate_requested = false;
    s->finish_reason = LLMKV_FINISH_NONE;
    if (s->kv.n_tokens + 1 < s->tokens.size()) s->kv_dropped = true;  // recomputed on the next request
    push_event(s, LLMKV_EVENT_ERROR, -1, LLMKV_FINISH_NONE, LLMKV_ERR_KV_CAPACITY);
    update_state(s);
}

void Engine::step() {
    if (copier_) {
        reap_copies();
        // Parked sessions with work come back first, highest ranked first; their copies
        // overlap this step's compute, and they run from the next step.
        std::vector<Session *> &waiting = waiting_;
        waiting.clear();
        for (Session *s : sessions_) {
            if (pending_runnable(*s) == 0) continue;
            if (s->host.phase == HostKv::Phase::kOut) {  // parked, then given work at once
                transfer_wait(s->host.ticket);
                finish_park_out(s);
            }
            if (s->host.phase == HostKv::Phase::kParked) waiting.push_back(s);
        }
        std::sort(waiting.begin(), waiting.end(), [](const Session *a, const Session *b) { return ranks_below(*b, *a); });
        for (Session *s : waiting) start_resume(s);
        bool ready = false, incoming = false;
        for (const Session *s : sessions_) {
            ready |= s->host.phase == HostKv::Phase::kNone && pending_runnable(*s) > 0;
            incoming |= s->host.phase == HostKv::Phase::kIn;
        }
        if (!ready && incoming) {  // nothing else to do meanwhile
            for (const Session *s : sessions_) {
                if (s->host.phase == HostKv::Phase::kIn) transfer_wait(s->host.ticket);
            }
            reap_copies();
        }
    }
    for (Session *s : sessions_) {
        if (s->host.phase == HostKv::Phase::kNone && pending_runnable(*s) > 0) match_prefix(s);
    }
    candidates_.clear();
    uint32_t n_running = 0;
    Session *top_parked = nullptr;  // highest-ranked parked session with work
    for (uint32_t i = 0; i < sessions_.size(); ++i) {
        Session &s = *sessions_[i];
        uint32_t n = pending_runnable(s);
        if (n == 0) continue;
        if (s.host.phase != HostKv::Phase::kNone) {
            if (s.host.phase == HostKv::Phase::kParked && (!top_parked || ranks_below(*top_parked, s))) top_parked = &s;
            continue;
        }
        candidates_.push_back({i, s.priority, s.admit_seq, n, s.generate_requested && n == 1});
        n_running += s.started ? 1 : 0;
    }
    if (candidates_.empty()) {
        // Only parked sessions have work and none could come back: the pool cannot hold
        // the first of them even alone.
        bool incoming = false;
        for (const Session *s : sessions_) incoming |= s->host.phase == HostKv::Phase::kIn;
        if (top_parked && !incoming) fail_capacity(top_parked);
        return;
    }
    scheduler_->plan_step(candidates_, plan_);

    // Reserve KV for every planned span, preempting lower-ranked sessions when the pool
    // runs dry. New work is admitted only with a watermark of free blocks left while
    // others run, and in order: once a new session must wait, later ones of no higher
    // priority wait too, so a large request is not starved by small ones.
    spans_.clear();
    span_sessions_.clear();
    preempted_.clear();
    std::vector<Session *> &refused = refused_;
    refused.clear();
    bool admission_closed = false;
    int32_t closed_priority = 0;
    for (const SchedItem &item : plan_) {
        Session *s = sessions_[item.index];
        if (std::find(preempted_.begin(), preempted_.end(), s) != preempted_.end()) continue;
        const bool fresh = !s->started;
        if (fresh && admission_closed && s->priority <= closed_priority) continue;
        const uint32_t target = s->kv.n_tokens + item.n_tokens;
        const uint32_t need = cache_->blocks_needed(s->kv, target);
        // A request whose input could not be held even alone fails before more is computed.
        const uint32_t full = std::max<uint32_t>(target, uint32_t(s->tokens.size()) - (s->generate_requested ? 0 : 1));
        if (cache_->blocks_needed(s->kv, full) > cache_->sealed_available() && !can_fit_alone(*s, full) &&
            !can_fit_with_host(*s, full)) {
            fail_capacity(s);
            continue;
        }
        const uint32_t watermark = fresh && n_running > 0 ? admission_watermark_ : 0;
        bool room = make_room(s, need + watermark, fresh);
        if (!room && host_ && (!fresh || n_running == 0)) {
            // Longer than the device pool can hold: its oldest blocks move to the host tier.
            const uint32_t available = cache_->sealed_available();
            if (need + watermark > available) offload_blocks(s, need + watermark - available);
            room = make_room(s, need + watermark, fresh);
        }
        if (!room || !cache_->reserve(s->kv, target)) {
            if (fresh && !admission_closed) {
                admission_closed = true;
                closed_priority = s->priority;
            }
            refused.push_back(s);
            continue;
        }
        bool want_logits = s->generate_requested && target == s->tokens.size();
        spans_.push_back({&s->kv, s->tokens.data() + s->kv.n_tokens, item.n_tokens, want_logits});
        span_sessions_.push_back(s);
    }
    // Sessions with blocks in the host tier read them in place.
    for (size_t i = 0; i < spans_.size(); ++i) {
        Session *s = span_sessions_[i];
        if (s->n_offloaded == 0) continue;
        s->block_ptrs.resize(s->kv.blocks.size());
        for (size_t j = 0; j < s->kv.blocks.size(); ++j) {
            s->block_ptrs[j] = s->kv.blocks[j] == SessionKv::kHostBlock ? static_cast<const uint8_t *>(s->offloaded[j])
                                                                        : cache_->sealed_data(s->kv.blocks[j]);
        }
        spans_[i].block_data = s->block_ptrs.data();
    }
    if (spans_.empty()) {
        // Nothing could run: the highest-ranked waiting session fails instead of hanging.
        if (!refused.empty()) {
            Session *top = refused.front();
            for (Session *r : refused) {
                if (ranks_below(*top, *r)) top = r;
            }
            fail_capacity(top);
        }
        return;
    }

    try {
        run_forward(spans_);
    } catch (...) {
        for (Session *s : span_sessions_) {
            cache_->trim(s->kv);
            if (s->block_keys.size() > s->kv.blocks.size()) s->block_keys.resize(s->kv.blocks.size());
        }
        throw;
    }
    ++steps_;
    ++activity_clock_;
    for (Session *s : span_sessions_) {
        publish_sealed(s);
        s->n_committed = std::max(s->n_committed, s->kv.n_tokens);
        s->last_active = activity_clock_;
    }

    const uint32_t n_vocab = model_->config().n_vocab;
    size_t logit_row = 0;
    for (size_t i = 0; i < spans_.size(); ++i) {
        Session *s = span_sessions_[i];
        s->started = true;
        if (!spans_[i].want_logits) {
            tokens_prefilled_ += spans_[i].n;
            update_state(s);
            continue;
        }
        tokens_prefilled_ += s->n_generated == 0 ? spans_[i].n : 0;
        float *row = logits_.data() + logit_row * n_vocab;
        ++logit_row;
        int32_t token = s->sampler->sample(row, s->tokens);
        s->tokens.push_back(token);
        s->n_committed = std::max<uint32_t>(s->n_committed, uint32_t(s->tokens.size()));
        bool is_stop = tokenizer_->is_end_of_generation(token) ||
                       std::find(s->stop_tokens.begin(), s->stop_tokens.end(), token) != s->stop_tokens.end();
        if (is_stop) {
            finish(s, LLMKV_FINISH_STOP);
            continue;
        }
        ++s->n_generated;
        ++tokens_generated_;
        s->text.push(tokenizer_->token_bytes(token));
        push_event(s, LLMKV_EVENT_TOKEN, token, LLMKV_FINISH_NONE, LLMKV_OK);
        if (s->generate_limit && s->n_generated >= s->generate_limit) {
            finish(s, LLMKV_FINISH_LENGTH);
        } else if (s->tokens.size() >= max_context_) {
            finish(s, LLMKV_FINISH_CONTEXT);
        } else {
            update_state(s);
        }
    }
}

// ---- host tier -----------------------------------------------------------------------

void Engine::park(Session *s) {
    if (!host_) fail(LLMKV_ERR_UNSUPPORTED, "no host tier: engine_params.kv_host_bytes is 0");
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is generating; park it after DONE or cancel");
    if (s->host.phase == HostKv::Phase::kIn) {
        transfer_wait(s->host.ticket);
        finish_resume(s);
    }
    if (s->host.phase != HostKv::Phase::kNone || (s->kv.tail < 0 && s->kv.blocks.empty())) return;
    if (!park_out(s, /*wait=*/false)) {
        fail(LLMKV_ERR_KV_CAPACITY, "host tier full: %.1f of %.1f MiB used", host_->bytes_used() / 1048576.0,
             host_->bytes_total() / 1048576.0);
    }
    ++parks_;
}

bool Engine::park_out(Session *s, bool wait) {
    if (!host_ || s->host.phase != HostKv::Phase::kNone || (s->kv.tail < 0 && s->kv.blocks.empty())) return false;
    const size_t block_bytes = cache_->sealed_pool().block_bytes(), tail_bytes = cache_->tail_pool().block_bytes();
    std::vector<size_t> moved;  // block-table entries only this session holds
    for (size_t i = 0; i < s->kv.blocks.size(); ++i) {
        if (s->kv.blocks[i] != SessionKv::kHostBlock && holders(s->kv.blocks[i]) == 1) moved.push_back(i);
    }
    // The budget is kv_host_bytes; the region itself is rounded up to the arena granularity.
    const uint64_t bytes = moved.size() * block_bytes + (s->kv.tail >= 0 ? tail_bytes : 0);
    if (!host_reserve(bytes)) return false;
    std::vector<void *> copies;
    if (!moved.empty() && !host_->allocate_blocks(block_bytes, moved.size(), copies)) return false;
    void *tail = s->kv.tail >= 0 ? host_->allocate_block(tail_bytes) : nullptr;
    if (s->kv.tail >= 0 && !tail) {
        for (void *p : copies) host_->free_block(p);
        return false;
    }
    std::vector<Transfer> ops;
    s->host.blocks.assign(s->kv.blocks.size(), nullptr);
    for (size_t k = 0; k < moved.size(); ++k) {
        s->host.blocks[moved[k]] = copies[k];
        ops.push_back({Transfer::kBlockOut, s->kv.blocks[moved[k]], copies[k]});
    }
    if (tail) ops.push_back({Transfer::kTailOut, s->kv.tail, tail});
    s->host.tail = tail;
    s->host.bytes = bytes;
    host_bytes_held_ += bytes;
    bytes_to_host_ += bytes;
    s->host.ticket = submit_transfers(ops, false);
    s->host.phase = HostKv::Phase::kOut;
    if (wait) {
        transfer_wait(s->host.ticket);
        finish_park_out(s);
    }
    update_state(s);
    return true;
}

void Engine::finish_park_out(Session *s) {
    for (size_t i = 0; i < s->host.blocks.size(); ++i) {
        if (!s->host.blocks[i]) continue;
        cache_->release_sealed(s->kv.blocks[i]);
        s->kv.blocks[i] = SessionKv::kHostBlock;
    }
    if (s->host.tail) {
        cache_->tail_pool().release(uint32_t(s->kv.tail));
        s->kv.tail = -1;
    }
    s->host.ticket = 0;
    s->host.phase = HostKv::Phase::kParked;
}

bool Engine::start_resume(Session *s) {
    uint32_t need = 0;
    for (void *p : s->host.blocks) need += p ? 1 : 0;
    if (!make_room(s, need, /*fresh=*/true)) return false;
    std::vector<uint32_t> ids;
    if (!cache_->allocate_sealed(need, ids)) return false;
    int64_t tail = -1;
    if (s->host.tail && (tail = cache_->allocate_tail()) < 0) {
        for (uint32_t id : ids) cache_->release_sealed(id);
        return false;
    }
    const size_t block_bytes = cache_->sealed_pool().block_bytes(), tail_bytes = cache_->tail_pool().block_bytes();
    std::vector<Transfer> ops;
    size_t k = 0;
    for (size_t i = 0; i < s->kv.blocks.size(); ++i) {
        if (!s->host.blocks[i]) continue;
        s->kv.blocks[i] = ids[k++];
        ops.push_back({Transfer::kBlockIn, s->kv.blocks[i], s->host.blocks[i]});
    }
    if (tail >= 0) {
        s->kv.tail = tail;
        ops.push_back({Transfer::kTailIn, tail, s->host.tail});
    }
    bytes_to_device_ += need * block_bytes + (tail >= 0 ? tail_bytes : 0);
    s->host.ticket = submit_transfers(ops, false);
    s->host.phase = HostKv::Phase::kIn;
    return true;
}

void Engine::finish_resume(Session *s) {
    for (void *p : s->host.blocks) host_->free_block(p);
    if (s->host.tail) host_->free_block(s->host.tail);
    host_bytes_held_ -= s->host.bytes;
    s->host = HostKv{};
    ++resumes_;
    update_state(s);
}

void Engine::reap_copies() {
    if (!copier_) return;
    for (Session *s : sessions_) {
        if ((s->host.phase == HostKv::Phase::kOut || s->host.phase == HostKv::Phase::kIn) && transfer_done(s->host.ticket)) {
            if (s->host.phase == HostKv::Phase::kOut) {
                finish_park_out(s);
            } else {
                finish_resume(s);
            }
        }
    }
}

void Engine::bring_back(Session *s) {
    if (s->host.phase == HostKv::Phase::kNone) return;
    if (s->host.phase == HostKv::Phase::kOut) {
        transfer_wait(s->host.ticket);
        finish_park_out(s);
    }
    if (s->host.phase == HostKv::Phase::kParked && !start_resume(s)) {
        fail(LLMKV_ERR_KV_CAPACITY, "the device pool cannot take back the parked session's KV now");
    }
    transfer_wait(s->host.ticket);
    finish_resume(s);
}

void Engine::drop_kv(Session &s) {
    if (s.host.phase == HostKv::Phase::kOut || s.host.phase == HostKv::Phase::kIn) transfer_wait(s.host.ticket);
    if (host_) {
        for (void *p : s.host.blocks) host_->free_block(p);
        if (s.host.tail) host_->free_block(s.host.tail);
    }
    host_bytes_held_ -= s.host.bytes;
    s.host = HostKv{};
    for (void *p : s.offloaded) {
        if (p) host_->free_block(p);
    }
    host_bytes_held_ -= uint64_t(s.n_offloaded) * cache_->sealed_pool().block_bytes();
    s.offloaded.clear();
    s.n_offloaded = 0;
    cache_->release(s.kv);
}

uint32_t Engine::offload_blocks(Session *s, uint32_t n) {
    // The CUDA module's attention reads device blocks only: no long context beyond the
    // device pool there yet.
    if (!host_ || n == 0 || cuda_) return 0;
    const size_t block_bytes = cache_->sealed_pool().block_bytes();
    std::vector<size_t> picked;
    // Newest first: with the prefix cache on, the blocks released here are then a chain of
    // idle cached blocks ending in a leaf, which eviction reclaims (an idle cached block with
    // a cached child still held would not be). The choice does not change any result.
    for (size_t i = s->kv.blocks.size(); i-- > 0 && picked.size() < n;) {
        if (s->kv.blocks[i] != SessionKv::kHostBlock && holders(s->kv.blocks[i]) == 1) picked.push_back(i);
    }
    while (!picked.empty() && !host_reserve(picked.size() * block_bytes)) picked.pop_back();
    std::vector<void *> copies;
    if (picked.empty() || !host_->allocate_blocks(block_bytes, picked.size(), copies)) return 0;
    std::vector<Transfer> ops;
    for (size_t k = 0; k < picked.size(); ++k) ops.push_back({Transfer::kBlockOut, s->kv.blocks[picked[k]], copies[k]});
    submit_transfers(ops, true);
    s->offloaded.resize(s->kv.blocks.size(), nullptr);
    for (size_t k = 0; k < picked.size(); ++k) {
        cache_->release_sealed(s->kv.blocks[picked[k]]);
        s->kv.blocks[picked[k]] = SessionKv::kHostBlock;
        s->offloaded[picked[k]] = copies[k];
    }
    s->n_offloaded += uint32_t(picked.size());
    host_bytes_held_ += picked.size() * block_bytes;
    bytes_to_host_ += picked.size() * block_bytes;
    return uint32_t(picked.size());
}

bool Engine::can_fit_with_host(const Session &s, uint32_t n_tokens) const {
    if (!host_) return false;
    const uint64_t block_bytes = cache_->sealed_pool().block_bytes();
    const uint64_t host_room = (params_.kv_host_bytes - host_bytes_held_) / block_bytes;
    // The device keeps at least one step's worth of new blocks; the rest may go to the host.
    const uint32_t on_device = std::min(cache_->geometry().sealed_blocks(n_tokens),
                                        max_batch_tokens_ / cache_->geometry().block_tokens + 2);
    const uint32_t total = cache_->geometry().sealed_blocks(n_tokens);
    return can_fit_alone(s, on_device * cache_->geometry().block_tokens) &&
           total - on_device <= host_room + s.n_offloaded;
}

void Engine::run_forward(const std::vector<ForwardSpan> &spans) {
    if (cuda_) {
        cuda_->run(spans, logits_);
    } else {
        forward_->run(spans, logits_);
    }
}

bool Engine::transfer_done(Ticket t) const {
    if (t == 0) return true;
    if (t & kDeviceTicket) return cuda_->copy_done(t & ~kDeviceTicket);
    return copier_->done(t);
}

void Engine::transfer_wait(Ticket t) const {
    if (t == 0) return;
    if (t & kDeviceTicket) {
        cuda_->copy_wait(t & ~kDeviceTicket);
    } else {
        copier_->wait(t);
    }
}

Ticket Engine::submit_transfers(const std::vector<Transfer> &transfers, bool wait) const {
    const size_t block_bytes = cache_->sealed_pool().block_bytes(), tail_bytes = cache_->tail_pool().block_bytes();
    if (cuda_) {
        // Tails one by one, synchronously (small); blocks in one asynchronous call per
        // direction on the module's copy stream.
        std::vector<uint32_t> out_ids, in_ids;
        std::vector<void *> out_host;
        std::vector<const void *> in_host;
        for (const Transfer &t : transfers) {
            switch (t.kind) {
                case Transfer::kBlockOut: out_ids.push_back(uint32_t(t.id)); out_host.push_back(t.host); break;
                case Transfer::kBlockIn: in_ids.push_back(uint32_t(t.id)); in_host.push_back(t.host); break;
                case Transfer::kTailOut: cuda_->read_tail(t.id, t.host); break;
                case Transfer::kTailIn: cuda_->write_tail(t.id, t.host); break;
            }
        }
        Ticket ticket = 0;
        if (!out_ids.empty()) ticket = kDeviceTicket | cuda_->read_blocks_async(out_ids.data(), out_ids.size(), out_host.data());
        if (!in_ids.empty()) {
            transfer_wait(ticket);  // one ticket per call: finish the other direction first
            ticket = kDeviceTicket | cuda_->write_blocks_async(in_ids.data(), in_ids.size(), in_host.data());
        }
        if (wait) {
            transfer_wait(ticket);
            return 0;
        }
        return ticket;
    }
    std::vector<CopyOp> ops;
    ops.reserve(transfers.size());
    for (const Transfer &t : transfers) {
        switch (t.kind) {
            case Transfer::kBlockOut: ops.push_back({cache_->sealed_data(uint32_t(t.id)), t.host, block_bytes}); break;
            case Transfer::kBlockIn: ops.push_back({t.host, cache_->sealed_data(uint32_t(t.id)), block_bytes}); break;
            case Transfer::kTailOut: ops.push_back({cache_->tail_data(t.id), t.host, tail_bytes}); break;
            case Transfer::kTailIn: ops.push_back({t.host, cache_->tail_data(t.id), tail_bytes}); break;
        }
    }
    if (!copier_ || (wait && ops.size() <= 1)) {  // small or no copy thread: at once
        for (const CopyOp &op : ops) std::memcpy(op.dst, op.src, op.bytes);
        return 0;
    }
    Ticket ticket = copier_->submit(std::move(ops));
    if (wait) {
        copier_->wait(ticket);
        return 0;
    }
    return ticket;
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
    cache_->sealed_pool().check_invariants();
    cache_->tail_pool().check_invariants();
    // Every referenced block belongs to exactly the sessions that hold it.
    std::vector<uint32_t> refs(cache_->sealed_pool().n_total(), 0);
    std::vector<uint32_t> tail_refs(cache_->tail_pool().n_total(), 0);
    std::vector<const Session *> holders(sessions_.begin(), sessions_.end());
    for (const Prefix *p : prefixes_) holders.push_back(&p->state);
    for (const Session *s : holders) {
        if (s->kv.blocks.size() != cache_->geometry().sealed_blocks(s->kv.n_tokens)) {
            fail(LLMKV_ERR_INTERNAL, "session holds %zu blocks for %u tokens", s->kv.blocks.size(), s->kv.n_tokens);
        }
        const bool parked = s->host.phase == HostKv::Phase::kParked;
        for (size_t i = 0; i < s->kv.blocks.size(); ++i) {
            uint32_t id = s->kv.blocks[i];
            const bool on_host = (parked && i < s->host.blocks.size() && s->host.blocks[i] != nullptr) ||
                                 (i < s->offloaded.size() && s->offloaded[i] != nullptr);
            if ((id == SessionKv::kHostBlock) != on_host) {
                fail(LLMKV_ERR_INTERNAL, "block-table entry %zu: host marker does not match the parked copies", i);
            }
            if (id != SessionKv::kHostBlock) ++refs[id];
        }
        if (s->kv.tail >= 0) ++tail_refs[size_t(s->kv.tail)];
    }
    if (prefix_) {
        prefix_->check_invariants();
        for (uint32_t id = 0; id < refs.size(); ++id) refs[id] += prefix_->contains(id) ? 1 : 0;
    }
    for (uint32_t id = 0; id < refs.size(); ++id) {
        if (refs[id] != cache_->sealed_pool().refcount(id)) {
            fail(LLMKV_ERR_INTERNAL, "block %u: refcount %u but %u holders", id, cache_->sealed_pool().refcount(id), refs[id]);
        }
    }
    if (host_) {
        size_t host_blocks = 0;
        for (const Session *s : sessions_) {
            for (void *p : s->host.blocks) host_blocks += p ? 1 : 0;
            host_blocks += s->host.tail ? 1 : 0;
            for (void *p : s->offloaded) host_blocks += p ? 1 : 0;
        }
        if (host_prefix_) host_blocks += host_prefix_->size();
        if (host_blocks != host_->blocks_used()) {
            fail(LLMKV_ERR_INTERNAL, "host tier holds %zu blocks but sessions own %zu", host_->blocks_used(), host_blocks);
        }
    }
    for (uint32_t id = 0; id < tail_refs.size(); ++id) {
        if (tail_refs[id] != cache_->tail_pool().refcount(id)) {
            fail(LLMKV_ERR_INTERNAL, "tail slot %u: refcount %u but %u holders", id, cache_->tail_pool().refcount(id), tail_refs[id]);
        }
    }
}

}  // namespace llmkv
