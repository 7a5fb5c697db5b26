// Choosing and creating the backend for an engine: the one place that knows every backend.
// Callers ask a backend kind what it can do (backend_capabilities) before anything is built;
// they never build a backend to find out.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/thread_pool.h"

namespace llmkv {

struct BackendRequest {
    llmkv_backend kind =
        LLMKV_BACKEND_AUTO;  // AUTO: CUDA when the module loads and sees the device, else CPU
    int device = 0;
    uint32_t max_batch_tokens = 512;
    uint32_t max_spans = 0;
    // The pools: ids index these (the CPU backend uses the cache's host slabs; a device
    // backend mirrors the sizes).
    KvCache *cache = nullptr;
    ThreadPool *pool = nullptr;
    // CUDA: weights decoded to fp16 at load (LLMKV_CUDA_WEIGHTS=fp16), batch-invariant
    // arithmetic (LLMKV_CUDA_BATCH_INVARIANT=1); the set-up stage reads the variables.
    bool cuda_fp16_weights = false;
    bool cuda_batch_invariant = false;
};

// Kinds of layer memory a backend's forward pass can hold (BackendCapabilities::layer_kinds).
enum LayerKindBits : uint32_t {
    kLayerPagedAttention = 1u << 0,  // paged KV blocks, full or sliding-window attention
};

// What a backend kind on a device can do, known without building it. The set-up stage
// decides the KV geometry from it (src/setup/kv_plan.h); a new capability is one field here
// and one branch there.
struct BackendCapabilities {
    llmkv_backend kind = LLMKV_BACKEND_CPU;  // what was asked resolved (AUTO: CUDA or the CPU)
    bool available = true;                   // false: `why` says why (only CUDA asked for)
    std::string why;
    bool kv_sink = true;              // attention reads the KV sink's tail rows (KvGeometry::sink)
    bool layer_groups = true;         // attention reads layer-group block tables (window release)
    bool reads_host_blocks = true;    // attention reads host-tier blocks in place (long contexts)
    bool device_collectives = false;  // ranks of this kind can all-reduce on their devices (NCCL)
    uint32_t layer_kinds = kLayerPagedAttention;
};

// The capabilities of `kind` on `device` (asks the CUDA module for its devices; allocates
// nothing). AUTO resolves to CUDA when the module loads and sees the device, else to the CPU
// (the reason logged).
BackendCapabilities backend_capabilities(llmkv_backend kind, int device);

// Creates the backend. CUDA asked for but unavailable: LLMKV_ERR_UNSUPPORTED with the reason;
// AUTO without CUDA logs the reason and returns the CPU backend, and so does AUTO when the
// CUDA module refuses the configuration (UNSUPPORTED: a shape its kernels lack) — the
// caller sees kind() differ from the capabilities it planned with.
std::unique_ptr<Backend> create_backend(const BackendRequest &request);

// GPUs the CUDA backend can use; 0 with the reason in *why (may be null).
int gpu_device_count(std::string *why);
// A new id for Backend::connect_device_ranks (NCCL); false with the reason in *why when the
// CUDA module or NCCL cannot be loaded.
bool make_device_comm_id(DeviceCommId &id, std::string *why);

}  // namespace llmkv
