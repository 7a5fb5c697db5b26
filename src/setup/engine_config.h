// The set-up stage, step 1: llmkv_engine_params and the model's config resolved into one
// EngineConfig. Every check, default and environment variable of engine creation is read
// here, once; the later steps (kv_plan.h, engine_setup.h) and the engine only read the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_layout.h"
#include "llmkv.h"
#include "model/llama_model.h"
#include "model/shard.h"
#include "parallel/rank_plan.h"

namespace llmkv {

constexpr uint32_t kDefaultBlockTokens = 16;
constexpr uint32_t kDefaultMaxBatchTokens = 512;
constexpr uint32_t kDefaultMaxSessions = 256;

struct EngineConfig {
    // The parameters as given, borrowed pointers cleared (model_path, devices, tp_transport)
    // and defaults filled in (n_threads: this process's compute threads once set up;
    // kv_block_tokens, max_sessions, max_batch_tokens).
    llmkv_engine_params params{};
    llmkv_backend backend = LLMKV_BACKEND_AUTO;  // as asked (AUTO resolved by the capabilities)
    int device = 0;                              // a single-device backend's device
    std::vector<int32_t> devices;                // engine_params.devices
    // Tensor parallelism: ranks, their backend (CUDA ranks: asked for, several devices, or
    // AUTO with one device named and CUDA there), over a transport (rank 0 of its processes).
    uint32_t tp_size = 1;
    llmkv_backend rank_backend = LLMKV_BACKEND_CPU;
    const llmkv_tp_transport *transport = nullptr;     // borrowed for set-up only
    Collectives collectives = Collectives::kAuto;      // LLMKV_TP_COLLECTIVES
    ExpertSplit expert_split = ExpertSplit::kColumns;  // LLMKV_TP_EXPERTS (columns, whole)
    unsigned n_threads = 1;                            // compute threads asked for (0 resolved)
    uint32_t max_sessions = kDefaultMaxSessions;
    uint32_t max_batch_tokens = kDefaultMaxBatchTokens;
    uint32_t max_context = 0;             // the model's trained context at most
    std::vector<uint32_t> layer_windows;  // per layer: its sliding window, 0 = full
    uint32_t window = 0;                  // the widest of them
    // The KV geometry as asked, before a backend's capabilities: shape, codecs, rotation,
    // block size, residual window, the sink wished for (kv_geometry.sink) and no layer groups yet.
    KvGeometry kv_geometry;
    bool sink_required = false;         // LLMKV_ENGINE_KV_SINK (refused where it cannot be read)
    bool keep_window_blocks = false;    // LLMKV_ENGINE_KEEP_WINDOW_BLOCKS
    bool prefix_cache = false;          // LLMKV_ENGINE_PREFIX_CACHE (and residual_tokens = 0)
    uint64_t kv_device_bytes = 0;       // 0: sized automatically (kv_plan.h)
    uint64_t kv_host_bytes = 0;         // 0: no host tier
    bool cuda_fp16_weights = false;     // LLMKV_CUDA_WEIGHTS=fp16
    bool cuda_batch_invariant = false;  // LLMKV_CUDA_BATCH_INVARIANT=1
};

// The checks that need no model (LLMKV_ERR_INVALID_ARGUMENT naming the field and value),
// made before the model file is opened.
void check_engine_params(const llmkv_engine_params &params);

// The resolved configuration for a model (checks the parameters again; KV codecs the shape
// cannot use are LLMKV_ERR_UNSUPPORTED).
EngineConfig resolve_engine_config(const llmkv_engine_params &params, const LlamaConfig &model);

// LLMKV_CUDA_WEIGHTS: unset, "" or "quantized" -> false, "fp16" -> true; anything else is
// LLMKV_ERR_INVALID_ARGUMENT naming the value.
bool cuda_fp16_weights_from_env();
// LLMKV_CUDA_BATCH_INVARIANT: unset, "" or "0" -> false, "1" -> true; anything else is
// LLMKV_ERR_INVALID_ARGUMENT naming the value.
bool cuda_batch_invariant_from_env();

}  // namespace llmkv
