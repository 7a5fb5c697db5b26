// The CUDA backend as libllmkv sees it: CudaModule finds and dlopens libllmkv-cuda.so (the
// only way libllmkv touches CUDA: no CUDA header or library is needed to build or run it),
// and make_cuda_backend() returns a Backend (backend/backend.h) that executes the forward
// pass's ops and holds the KV pools on a device through the module's C ABI
// (backend/cuda/cuda_module.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_module.h"
#include "kv/kv_layout.h"

namespace llmkv {

class CudaModule {
public:
    // The process-wide module, loaded on first use (thread-safe) and never unloaded.
    // Search order: $LLMKV_CUDA_MODULE (a file path), then libllmkv-cuda.so next to the
    // binary holding libllmkv (dladdr: libllmkv.so, or the executable for static links),
    // then the dynamic loader's default search path.
    static const CudaModule &get();

    bool loaded() const { return api_ != nullptr; }
    const llmkv_cuda_api *api() const { return api_; }  // nullptr unless loaded
    const std::string &path() const { return path_; }   // the file that was loaded
    // Why the module is not usable (every place tried, with dlerror / ABI mismatch); "" when
    // loaded.
    const std::string &error() const { return error_; }
    // Number of CUDA devices; 0 with the reason in *why (module missing, no driver, no
    // device).
    int device_count(std::string *why = nullptr) const;

    CudaModule(const CudaModule &) = delete;
    CudaModule &operator=(const CudaModule &) = delete;

private:
    CudaModule();
    bool try_load(const std::string &path);

    void *handle_ = nullptr;
    const llmkv_cuda_api *api_ = nullptr;
    std::string path_;
    std::string error_;
};

struct CudaBackendOptions {
    int device = 0;
    uint32_t max_batch_tokens = 512;  // most tokens of one batch
    uint32_t max_spans = 0;           // most spans of one batch; 0 = max_batch_tokens
    uint32_t n_sealed_blocks = 0;     // device sealed pool (ids as in the KvCache's sealed pool)
    uint32_t n_tail_slots = 0;        // device tail slots (ids as in the KvCache's tail pool)
    uint64_t attention_workspace_bytes = 0;  // 0 = the module's default (128 MiB)
    // Quantized weight matrices (Q4_0 ... Q6_K) stay in their GGUF encoding on the device
    // (upload_matrix_quantized: decode steps read the packed rows, prefill decodes row chunks
    // to fp16 for cuBLAS); true keeps an fp16 copy of every matrix instead (2 bytes per
    // parameter, prefill GEMMs read it directly). F32 / F16 / BF16 matrices are fp16 either
    // way. The set-up stage reads LLMKV_CUDA_WEIGHTS=fp16 (src/setup/engine_config.cpp).
    bool fp16_weights = false;
    // Every matrix product through the packed matvec kernel (llmkv_cuda_context_params::
    // batch_invariant): a session's results are bitwise independent of batching and
    // chunking; prefill reads the weights once per 8 rows. LLMKV_CUDA_BATCH_INVARIANT=1 (set-up).
    bool batch_invariant = false;
};

// Number of CUDA devices; 0 with the reason in *why (module missing, no driver, no device).
int cuda_device_count(std::string *why);

// A new NCCL communicator id for Backend::connect_device_ranks (rank 0 makes it, the host
// communicator carries it to the others). false, with the reason in *why, when the module or
// NCCL (libnccl.so.2) cannot be loaded.
bool cuda_comm_unique_id(DeviceCommId &id, std::string *why);

// The one conversion of a KvGeometry (and the pool sizes) into the module ABI's plain C
// KV description; the module converts it back in one place too (kernels/module.cpp:
// geometry_of). Both sit beside the ABI rather than in kv/kv_layout.h, which knows no backend.
llmkv_cuda_kv_desc cuda_kv_desc(const KvGeometry &geometry, uint32_t n_sealed_blocks,
                                uint32_t n_tail_slots);

// The CUDA backend on options.device: KV pools of the geometry's layout, batch tables for
// options.max_batch_tokens, workspaces. Weights come later (load_weights: each matrix's
// packed GGUF rows go up as they are; kept so, or decoded to fp16 on the device, per
// options.fp16_weights). Throws llmkv::Error:
// LLMKV_ERR_BACKEND (module or device missing, CUDA failure), LLMKV_ERR_OUT_OF_MEMORY,
// LLMKV_ERR_UNSUPPORTED (a geometry the kernels do not handle), with a clear message.
std::unique_ptr<Backend> make_cuda_backend(const KvGeometry &geometry,
                                           const CudaBackendOptions &options);

}  // namespace llmkv
