// The set-up stage, step 1: every check, default and environment variable of engine
// creation (see engine_config.h).
#include "setup/engine_config.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/factory.h"
#include "common/error.h"
#include "common/log.h"
#include "common/thread_pool.h"
#include "kv/codec.h"

namespace llmkv {

namespace {

bool known_dtype(uint32_t d) {
    return d <= LLMKV_KV_INT4_COMPACT;
}

// A C host may store any int in an enum field; reading it as the C++ enum type would be
// undefined for values outside the enumerators, so the raw bits are read instead.
template <typename Enum>
uint32_t raw_enum(const Enum &field) {
    static_assert(sizeof(Enum) == sizeof(uint32_t), "enums are 32-bit in the C ABI");
    uint32_t v;
    std::memcpy(&v, &field, sizeof(v));
    return v;
}

Collectives collectives_from_env() {
    const char *v = std::getenv("LLMKV_TP_COLLECTIVES");
    if (!v || !*v || std::strcmp(v, "auto") == 0) return Collectives::kAuto;
    if (std::strcmp(v, "nccl") == 0) return Collectives::kNccl;
    if (std::strcmp(v, "host") == 0) return Collectives::kHost;
    fail(LLMKV_ERR_INVALID_ARGUMENT, "LLMKV_TP_COLLECTIVES=\"%s\": expected auto, nccl or host", v);
}

// LLMKV_TP_EXPERTS: how tensor-parallel ranks divide a mixture of experts' experts.
ExpertSplit expert_split_from_env() {
    const char *v = std::getenv("LLMKV_TP_EXPERTS");
    if (!v || !*v || std::strcmp(v, "columns") == 0) return ExpertSplit::kColumns;
    if (std::strcmp(v, "whole") == 0) return ExpertSplit::kWhole;
    fail(LLMKV_ERR_INVALID_ARGUMENT, "LLMKV_TP_EXPERTS=\"%s\": expected columns or whole", v);
}

}  // namespace

bool cuda_fp16_weights_from_env() {
    const char *v = std::getenv("LLMKV_CUDA_WEIGHTS");
    if (!v || !*v || std::strcmp(v, "quantized") == 0) return false;
    if (std::strcmp(v, "fp16") == 0) return true;
    fail(LLMKV_ERR_INVALID_ARGUMENT,
         "LLMKV_CUDA_WEIGHTS=\"%s\": expected \"quantized\" or \"fp16\"", v);
}

bool cuda_batch_invariant_from_env() {
    const char *v = std::getenv("LLMKV_CUDA_BATCH_INVARIANT");
    if (!v || !*v || std::strcmp(v, "0") == 0) return false;
    if (std::strcmp(v, "1") == 0) return true;
    fail(LLMKV_ERR_INVALID_ARGUMENT, "LLMKV_CUDA_BATCH_INVARIANT=\"%s\": expected 0 or 1", v);
}

void check_engine_params(const llmkv_engine_params &p) {
    if (!p.model_path || !*p.model_path)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.model_path is NULL or empty");
    const uint32_t backend = raw_enum(p.backend), dtype_k = raw_enum(p.kv_dtype_k),
                   dtype_v = raw_enum(p.kv_dtype_v);
    if (backend > LLMKV_BACKEND_CUDA)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.backend = %u is unknown", backend);
    if (p.n_devices > 0 && !p.devices)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.devices is NULL with n_devices = %u",
             p.n_devices);
    if (p.n_devices > kMaxTpRanks)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_devices = %u exceeds %u", p.n_devices,
             kMaxTpRanks);
    for (uint32_t i = 0; i < p.n_devices; ++i) {
        if (p.devices[i] < 0)
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.devices[%u] = %d is negative", i,
                 p.devices[i]);
    }
    if (p.n_devices > 1) {
        // Several devices: one tensor-parallel rank on each (the CUDA backend).
        if (backend == LLMKV_BACKEND_CPU) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "engine_params.n_devices = %u names GPU ranks, but the backend is the CPU "
                 "(CPU ranks: engine_params.tp_size)",
                 p.n_devices);
        }
        if (p.tp_size > 1 && p.tp_size != p.n_devices) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "engine_params.tp_size = %u differs from n_devices = %u", p.tp_size, p.n_devices);
        }
        if (p.tp_transport && uint32_t(p.tp_transport->size) != p.n_devices) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "engine_params.n_devices = %u differs from tp_transport's %d ranks", p.n_devices,
                 p.tp_transport->size);
        }
    }
    if (p.tp_size > kMaxTpRanks)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.tp_size = %u exceeds %u", p.tp_size,
             kMaxTpRanks);
    if (p.tp_transport) {
        const llmkv_tp_transport &t = *p.tp_transport;
        if (t.size < 1 || t.size > 256 || t.rank < 0 || t.rank >= t.size) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.tp_transport: rank %d of size %d",
                 t.rank, t.size);
        }
        if (t.rank != 0) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "engine_params.tp_transport: rank %d calls llmkv_tp_serve, not "
                 "llmkv_engine_create (rank 0 runs the engine)",
                 t.rank);
        }
        if (p.tp_size > 1 && p.tp_size != uint32_t(t.size)) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "engine_params.tp_size = %u differs from tp_transport's %d ranks", p.tp_size,
                 t.size);
        }
    }
    if (!known_dtype(dtype_k))
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_dtype_k = %u is unknown", dtype_k);
    if (!known_dtype(dtype_v))
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_dtype_v = %u is unknown", dtype_v);
    if (p.kv_block_tokens > 1024)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_block_tokens = %u exceeds 1024",
             p.kv_block_tokens);
    if (p.n_threads > 1024)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.n_threads = %u exceeds 1024", p.n_threads);
    if (p.max_sessions > (1u << 20))
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.max_sessions = %u is too large",
             p.max_sessions);
    if (p.max_batch_tokens > (1u << 16))
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.max_batch_tokens = %u exceeds 65536",
             p.max_batch_tokens);
    if (p.kv_residual_tokens > 4096)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_residual_tokens = %u exceeds 4096",
             p.kv_residual_tokens);
    if (p.flags & ~(LLMKV_ENGINE_PREFIX_CACHE | LLMKV_ENGINE_KEEP_WINDOW_BLOCKS |
                    LLMKV_ENGINE_KV_SINK | LLMKV_ENGINE_NO_KV_SINK)) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.flags has unknown bits 0x%x", p.flags);
    }
    if ((p.flags & LLMKV_ENGINE_KV_SINK) && (p.flags & LLMKV_ENGINE_NO_KV_SINK)) {
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "engine_params.flags has both LLMKV_ENGINE_KV_SINK and LLMKV_ENGINE_NO_KV_SINK");
    }
    if (p.spin_us < -1 || p.spin_us > ThreadPool::kMaxSpinUs) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.spin_us = %d is outside -1..%ld", p.spin_us,
             ThreadPool::kMaxSpinUs);
    }
    if (p.thread_priority < 0 || p.thread_priority > 19) {
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "engine_params.thread_priority = %d is outside 0..19 (llmkv's threads can only run "
             "below their creator)",
             p.thread_priority);
    }
    const uint32_t rotation = raw_enum(p.kv_rotation);
    if (rotation > LLMKV_KV_ROTATION_KV)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "engine_params.kv_rotation = %u is unknown", rotation);
}

EngineConfig resolve_engine_config(const llmkv_engine_params &p, const LlamaConfig &c) {
    check_engine_params(p);
    EngineConfig cfg;
    cfg.params = p;
    cfg.params.model_path = nullptr;  // borrowed; not kept
    cfg.params.tp_transport = nullptr;
    cfg.params.devices = nullptr;
    cfg.backend = llmkv_backend(raw_enum(p.backend));
    cfg.devices.assign(p.devices, p.devices + p.n_devices);
    cfg.device = p.n_devices > 0 ? p.devices[0] : 0;
    cfg.transport = p.tp_transport;
    cfg.tp_size = p.tp_transport    ? uint32_t(p.tp_transport->size)
                  : p.n_devices > 1 ? p.n_devices
                                    : std::max<uint32_t>(1, p.tp_size);
    // GPU ranks: the CUDA backend asked for, several devices named, or AUTO with a device
    // named and CUDA there; otherwise CPU ranks.
    if (cfg.tp_size > 1) {
        const bool cuda = cfg.backend == LLMKV_BACKEND_CUDA || p.n_devices > 1 ||
                          (cfg.backend == LLMKV_BACKEND_AUTO && p.n_devices == 1 &&
                           gpu_device_count(nullptr) > 0);
        cfg.rank_backend = cuda ? LLMKV_BACKEND_CUDA : LLMKV_BACKEND_CPU;
        cfg.collectives = collectives_from_env();
        cfg.expert_split = expert_split_from_env();
    }
    cfg.cuda_fp16_weights = cuda_fp16_weights_from_env();
    cfg.cuda_batch_invariant = cuda_batch_invariant_from_env();
    cfg.n_threads = p.n_threads ? p.n_threads : ThreadPool::hardware_threads();
    cfg.max_sessions = p.max_sessions ? p.max_sessions : kDefaultMaxSessions;
    cfg.max_batch_tokens = p.max_batch_tokens ? p.max_batch_tokens : kDefaultMaxBatchTokens;
    cfg.kv_device_bytes = p.kv_device_bytes;
    cfg.kv_host_bytes = p.kv_host_bytes;
    cfg.sink_required = p.flags & LLMKV_ENGINE_KV_SINK;
    cfg.keep_window_blocks = p.flags & LLMKV_ENGINE_KEEP_WINDOW_BLOCKS;

    KvGeometry &g = cfg.kv_geometry;
    g.n_layers = c.n_layers;
    g.n_kv_heads = c.n_kv_heads;
    g.head_dim = c.head_dim;
    g.block_tokens = p.kv_block_tokens ? p.kv_block_tokens : kDefaultBlockTokens;
    g.dtype_k = p.kv_dtype_k;
    g.dtype_v = p.kv_dtype_v;
    g.residual_tokens = p.kv_residual_tokens;
    const uint32_t rotation = raw_enum(p.kv_rotation);
    if (rotation == LLMKV_KV_ROTATION_AUTO) {
        g.rotate_k = is_int4(g.dtype_k);
        g.rotate_v = is_int4(g.dtype_v);
    } else {
        g.rotate_k = rotation == LLMKV_KV_ROTATION_K || rotation == LLMKV_KV_ROTATION_KV;
        g.rotate_v = rotation == LLMKV_KV_ROTATION_V || rotation == LLMKV_KV_ROTATION_KV;
    }
    // KV sink: asked for, or by default with an int4 codec (where the first position's
    // quantization error costs the most); kept only where the backend reads it (kv_plan).
    g.sink = cfg.sink_required ||
             (!(p.flags & LLMKV_ENGINE_NO_KV_SINK) && (is_int4(g.dtype_k) || is_int4(g.dtype_v)));
    if (!codec_supported(codec_spec_k(g), KvRole::K, g.block_tokens, g.head_dim)) {
        fail(LLMKV_ERR_UNSUPPORTED,
             "KV dtype %s%s for K is not supported (head_dim %u, %u-token blocks)",
             codec_name(g.dtype_k), g.rotate_k ? " with rotation" : "", g.head_dim, g.block_tokens);
    }
    if (!codec_supported(codec_spec_v(g), KvRole::V, g.block_tokens, g.head_dim)) {
        fail(LLMKV_ERR_UNSUPPORTED,
             "KV dtype %s%s for V is not supported (head_dim %u, %u-token blocks)",
             codec_name(g.dtype_v), g.rotate_v ? " with rotation" : "", g.head_dim, g.block_tokens);
    }
    cfg.max_context = p.max_context ? std::min(p.max_context, c.n_ctx_train) : c.n_ctx_train;
    if (p.max_context > c.n_ctx_train) {
        LLMKV_LOG_WARN_F("max_context %u exceeds the model's trained context %u; using %u",
                         p.max_context, c.n_ctx_train, c.n_ctx_train);
    }
    cfg.layer_windows.assign(c.n_layers, 0);
    for (uint32_t l = 0; l < c.n_layers; ++l) {
        cfg.layer_windows[l] = c.window(l);
        cfg.window = std::max(cfg.window, cfg.layer_windows[l]);
    }
    if (p.flags & LLMKV_ENGINE_PREFIX_CACHE) {
        if (g.residual_tokens == 0) {
            cfg.prefix_cache = true;
        } else {
            // A matched block would be read sealed where a recomputation reads fp16 rows,
            // breaking bitwise equality with the uncached run.
            LLMKV_LOG_INFO_F("prefix cache off: it needs kv_residual_tokens = 0 (got %u)",
                             g.residual_tokens);
        }
    }
    cfg.params.kv_block_tokens = g.block_tokens;
    cfg.params.max_sessions = cfg.max_sessions;
    cfg.params.max_batch_tokens = cfg.max_batch_tokens;
    return cfg;
}

}  // namespace llmkv
