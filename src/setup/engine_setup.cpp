// The set-up stage: llmkv_engine_create's one path from parameters to the engine's parts
// (see engine_setup.h), and the rank side of a transport's set-up.
#include "setup/engine_setup.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backend/factory.h"
#include "common/error.h"
#include "common/log.h"
#include "common/thread_priority.h"
#include "kv/codec.h"
#include "parallel/communicator.h"
#include "parallel/rank_plan.h"
#include "setup/kv_plan.h"

namespace llmkv {

namespace {

// The KV manager of geometry g, and the backend of kind `kind` over its pools, connected.
// AUTO may come back as the CPU (the CUDA module refused the configuration); the caller
// compares backend->kind().
void build_kv_and_backend(EngineParts &e, const KvGeometry &g, llmkv_backend kind) {
    const EngineConfig &cfg = e.config;
    e.backend.reset();
    e.kv_manager.reset();  // before a new backend: its host tier may be the old backend's memory
    e.kv_manager = std::make_unique<KvManager>(
        plan_kv_pools(cfg, g, e.model->fingerprint(), &e.kv_device_bytes));
    BackendRequest br;
    br.kind = kind;
    br.device = cfg.device;
    br.max_batch_tokens = cfg.max_batch_tokens;
    br.max_spans = std::min(cfg.max_sessions, cfg.max_batch_tokens);
    br.cache = &e.kv_manager->cache();
    br.pool = e.pool.get();
    br.cuda_fp16_weights = cfg.cuda_fp16_weights;
    br.cuda_batch_invariant = cfg.cuda_batch_invariant;
    e.backend = create_backend(br);
}

void attach_kv(EngineParts &e, bool reads_host_blocks) {
    Backend *be = e.backend.get();
    e.kv_manager->attach(be->make_transfer_queue(e.config.kv_host_bytes != 0), be->host_allocator(),
                         [be](int64_t from, int64_t to) { be->copy_tail(from, to); });
    e.kv_manager->set_offload_allowed(reads_host_blocks);
}

// One backend (CPU or one device): capabilities -> geometry -> KV manager -> backend.
void set_up_single(EngineParts &e) {
    const EngineConfig &cfg = e.config;
    BackendCapabilities caps = backend_capabilities(cfg.backend, cfg.device);
    if (!caps.available)
        fail(LLMKV_ERR_UNSUPPORTED, "the CUDA backend is not available: %s", caps.why.c_str());
    const bool auto_backend = cfg.backend == LLMKV_BACKEND_AUTO;
    KvGeometry g = plan_kv_geometry(cfg, caps, auto_backend);
    e.pool =
        std::make_unique<ThreadPool>(cfg.n_threads, cfg.params.spin_us, cfg.params.thread_priority);
    build_kv_and_backend(e, g, auto_backend ? caps.kind : cfg.backend);
    if (e.backend->kind() != caps.kind) {
        // AUTO, and the CUDA module refused this configuration: the CPU runs it, with the
        // geometry the CPU reads (the KV sink and layer groups back).
        caps = backend_capabilities(LLMKV_BACKEND_CPU, 0);
        g = plan_kv_geometry(cfg, caps, true);
        build_kv_and_backend(e, g, LLMKV_BACKEND_CPU);
    }
    attach_kv(e, caps.reads_host_blocks && e.backend->reads_host_blocks());
}

// Tensor parallelism: the ranks' capabilities -> geometry -> KV manager -> rank plan ->
// a TpBackend over threads of this process or the transport's processes.
void set_up_ranks(EngineParts &e, bool &ranks_told) {
    const EngineConfig &cfg = e.config;
    const std::string why = shard_unsupported_reason(*e.model, cfg.tp_size, cfg.expert_split);
    if (!why.empty())
        fail(LLMKV_ERR_UNSUPPORTED, "tensor parallelism over %u ranks: %s", cfg.tp_size,
             why.c_str());
    BackendCapabilities caps = rank_capabilities(cfg.rank_backend);
    const KvGeometry g = plan_kv_geometry(cfg, caps, false);
    e.kv_manager = std::make_unique<KvManager>(
        plan_kv_pools(cfg, g, e.model->fingerprint(), &e.kv_device_bytes));
    e.pool = std::make_unique<ThreadPool>(1);  // the ranks have their own
    TpSetup setup;
    setup.geometry = g;
    setup.n_sealed_blocks = e.kv_manager->total_blocks();
    setup.n_tail_slots = cfg.max_sessions;
    setup.max_tokens = cfg.max_batch_tokens;
    setup.cuda_fp16_weights = cfg.cuda_fp16_weights;
    setup.cuda_batch_invariant = cfg.cuda_batch_invariant;
    setup.expert_split = uint8_t(cfg.expert_split);
    if (cfg.rank_backend == LLMKV_BACKEND_CUDA) {
        plan_gpu_ranks(setup, cfg.tp_size, cfg.devices, cfg.transport == nullptr, cfg.collectives);
    }
    RankThreads rank_threads;
    rank_threads.spin_us = cfg.params.spin_us;
    rank_threads.priority = cfg.params.thread_priority;
    std::unique_ptr<TpBackend> tp;
    if (cfg.transport) {
        e.tp_comm = std::make_unique<TransportCommunicator>(*cfg.transport);
        rank_threads.n_threads = cfg.n_threads;
        ranks_told = true;  // from here on the TpBackend tells the ranks how the setup went
        tp = std::make_unique<TpBackend>(*e.model, setup, *e.tp_comm, rank_threads);
    } else {
        std::vector<std::unique_ptr<Communicator>> comms =
            InProcessGroup::make(cfg.tp_size, cfg.params.spin_us);
        e.tp_comm = std::move(comms[0]);
        comms.erase(comms.begin());
        rank_threads.n_threads = std::max(1u, cfg.n_threads / cfg.tp_size);
        tp = std::make_unique<TpBackend>(*e.model, setup, *e.tp_comm, rank_threads,
                                         std::move(comms), rank_threads);
    }
    e.tp = tp.get();
    e.rank_threads = rank_threads.n_threads;
    e.backend = std::move(tp);
    attach_kv(e, false);
}

EngineParts set_up(const llmkv_engine_params &p, bool &ranks_told) {
    check_engine_params(p);
    // Threads started while the engine is set up (compute workers, copy and heap threads)
    // run at its priority.
    SpawnPriority spawn_priority(p.thread_priority);
    EngineParts e;
    e.file = std::shared_ptr<GgufFile>(GgufFile::open(p.model_path));
    e.model = LlamaModel::load(e.file);
    e.tokenizer = Tokenizer::from_gguf(*e.file);
    const LlamaConfig &c = e.model->config();
    if (e.tokenizer->n_vocab() != c.n_vocab) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tokenizer has %zu tokens but token_embd.weight has %u rows",
             e.tokenizer->n_vocab(), c.n_vocab);
    }
    e.config = resolve_engine_config(p, c);
    if (e.config.tp_size > 1) {
        set_up_ranks(e, ranks_told);
    } else {
        set_up_single(e);
    }
    EngineConfig &cfg = e.config;
    e.forward = Forward::create(*e.model, *e.backend, cfg.max_batch_tokens,
                                e.tp ? &e.tp->shard() : nullptr);
    // Compute threads of this process (with in-process ranks: all ranks' together).
    cfg.params.n_threads =
        e.tp ? e.rank_threads * (cfg.transport ? 1 : cfg.tp_size) : e.pool->size();
    cfg.transport = nullptr;  // borrowed for set-up only
    const KvGeometry &kg = e.kv_manager->geometry();
    Backend *be = e.backend.get();
    LLMKV_LOG_INFO_F(
        "engine: model '%s' (%u layers, %u heads / %u kv heads, head_dim %u), backend %s "
        "(%s), %u threads, KV %s/%s%s, %u blocks of %u tokens (%zu bytes, %u layer group%s)",
        c.name.c_str(), c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, be->name(),
        be->device_name().c_str(), unsigned(cfg.params.n_threads), codec_name(kg.dtype_k),
        codec_name(kg.dtype_v), kg.sink ? " with the KV sink" : "", e.kv_manager->total_blocks(),
        kg.block_tokens, kg.sealed_block_bytes(), kg.n_groups, kg.n_groups == 1 ? "" : "s");
    return e;
}

}  // namespace

EngineParts set_up_engine(const llmkv_engine_params &p) {
    bool ranks_told = false;
    try {
        return set_up(p, ranks_told);
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

void serve_engine_rank(const llmkv_engine_params &p) {
    if (!p.tp_transport)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "llmkv_tp_serve: engine_params.tp_transport is NULL");
    TransportCommunicator comm(*p.tp_transport);
    if (comm.rank() == 0)
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "llmkv_tp_serve: rank 0 runs the engine (llmkv_engine_create)");
    if (p.n_threads > 1024)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_threads = %u exceeds 1024", p.n_threads);
    // A rank whose model does not load still takes part in the setup, to tell rank 0.
    std::string load_error;
    std::shared_ptr<GgufFile> file;
    std::unique_ptr<LlamaModel> model;
    try {
        if (!p.model_path || !*p.model_path)
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.model_path is NULL or empty");
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
    serve_rank(model.get(), load_error, comm, threads);
}

}  // namespace llmkv
