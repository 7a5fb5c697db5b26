// The set-up stage, step 3: KV geometry from the configuration and the backend's
// capabilities, and the pool sizes (see kv_plan.h).
#include "setup/kv_plan.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "kv/codec.h"

namespace llmkv {

namespace {

constexpr uint64_t kMaxAutomaticKvBytes = 1ull << 30;

const char *backend_label(llmkv_backend kind) {
    return kind == LLMKV_BACKEND_CUDA ? "cuda" : "cpu";
}

}  // namespace

KvGeometry plan_kv_geometry(const EngineConfig &config, BackendCapabilities &caps,
                            bool auto_backend) {
    KvGeometry g = config.kv_geometry;
    if (g.sink && !caps.kv_sink) {
        if (config.sink_required) {
            if (!auto_backend) {
                fail(LLMKV_ERR_UNSUPPORTED,
                     "LLMKV_ENGINE_KV_SINK: the %s backend does not read the KV sink",
                     caps.kind == LLMKV_BACKEND_CUDA ? "CUDA" : backend_label(caps.kind));
            }
            caps = backend_capabilities(LLMKV_BACKEND_CPU, 0);  // AUTO: the backend that reads it
        } else {
            LLMKV_LOG_INFO_F("%s backend: no KV sink (it does not read one)",
                             backend_label(caps.kind));
            g.sink = false;
        }
    }
    if (g.sink && g.block_tokens == 1) {
        // Position 0 would be sealed as soon as it is computed: the one-token pass that fills a
        // matched sequence's sink rows needs an unsealed position 0.
        if (config.sink_required)
            fail(LLMKV_ERR_UNSUPPORTED, "LLMKV_ENGINE_KV_SINK needs kv_block_tokens >= 2 (got 1)");
        g.sink = false;
    }
    // Sliding-window layers: their blocks are released once outside the window (layer
    // groups), unless asked to keep them or the backend reads no layer-group tables (then the
    // window is masked and every block kept).
    if (!config.keep_window_blocks) {
        KvGeometry grouped = g;
        set_layer_groups(grouped, config.layer_windows);
        if (grouped.grouped() && !caps.layer_groups) {
            LLMKV_LOG_INFO_F("%s backend: sliding-window blocks are kept (no layer groups)",
                             backend_label(caps.kind));
        } else {
            g = grouped;
        }
    }
    return g;
}

KvManagerConfig plan_kv_pools(const EngineConfig &config, const KvGeometry &g,
                              const std::string &model_fingerprint, uint64_t *device_bytes) {
    const size_t block_bytes = g.sealed_block_bytes();
    uint64_t budget = config.kv_device_bytes;
    if (budget == 0) {
        // Room for four full-length sessions, capped; untouched blocks cost no memory.
        // With layer groups a session holds its window's local blocks besides its own.
        const uint64_t per_session = config.max_context / g.block_tokens + 1 +
                                     uint64_t(g.n_groups - 1) * (g.window / g.block_tokens + 2);
        uint64_t want = uint64_t(4) * per_session * block_bytes;
        budget = std::min(want, std::max<uint64_t>(kMaxAutomaticKvBytes, block_bytes * 64));
    }
    uint64_t n_blocks = budget / block_bytes;
    if (n_blocks == 0) {
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "kv_device_bytes = %llu is smaller than one block (%zu bytes)",
             (unsigned long long)budget, block_bytes);
    }
    if (n_blocks > (1u << 30)) n_blocks = 1u << 30;
    if (device_bytes) *device_bytes = n_blocks * block_bytes;
    KvManagerConfig kc;
    kc.geometry = g;
    kc.n_sealed_blocks = uint32_t(n_blocks);
    kc.n_tail_slots = config.max_sessions;
    kc.host_bytes = config.kv_host_bytes;
    if (config.prefix_cache) {
        // The salt makes blocks of another model, codec, rotation or block size unmatchable.
        kc.prefix_cache = true;
        kc.prefix_salt = strprintf(
            "llmkv-prefix-v1|%s|k=%s%s|v=%s%s|B=%u|R=%u%s", model_fingerprint.c_str(),
            codec_name(g.dtype_k), g.rotate_k ? "+rot" : "", codec_name(g.dtype_v),
            g.rotate_v ? "+rot" : "", g.block_tokens, g.residual_tokens, g.sink ? "|sink" : "");
    }
    return kc;
}

}  // namespace llmkv
