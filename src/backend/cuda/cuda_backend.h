// The CUDA backend as libllmkv sees it: CudaModule finds and dlopens libllmkv-cuda.so (the
// only way libllmkv touches CUDA: no CUDA header or library is needed to build or run it),
// and CudaBackend runs the Llama forward pass and holds the KV pools on a device through the
// module's C ABI (backend/cuda_module.h), with Forward::run's contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda_module.h"
#include "engine/forward.h"
#include "kv/kv_cache.h"
#include "model/llama_model.h"

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
    uint32_t max_batch_tokens = 512;  // most tokens of one run()
    uint32_t max_spans = 0;           // most spans of one run(); 0 = max_batch_tokens
    uint32_t n_sealed_blocks = 0;     // device sealed pool (ids as in the KvCache's sealed pool)
    uint32_t n_tail_slots = 0;        // device tail slots (ids as in the KvCache's tail pool)
    uint64_t attention_workspace_bytes = 0;  // 0 = the module's default (128 MiB)
};

class CudaBackend {
public:
    // Dequantizes the model's weights to fp16 (host temporaries, one layer at a time) and
    // creates the device context: weights, KV pools, activation buffers. Throws
    // llmkv::Error: LLMKV_ERR_BACKEND (module or device missing, CUDA failure),
    // LLMKV_ERR_OUT_OF_MEMORY, LLMKV_ERR_UNSUPPORTED (geometry the kernels do not handle, a
    // weight beyond the fp16 range).
    CudaBackend(const LlamaModel &model, const KvGeometry &geometry,
                const CudaBackendOptions &options);
    ~CudaBackend();
    CudaBackend(const CudaBackend &) = delete;
    CudaBackend &operator=(const CudaBackend &) = delete;

    // Forward::run's contract on the device KV: validates the batch first (throws before
    // touching any KV), runs it, advances each span's kv->n_tokens by n, and fills logits
    // with one n_vocab row per span with want_logits (n rows with all_logits), in span
    // order. The spans' block ids and tail slots index the device pools.
    void run(const std::vector<ForwardSpan> &spans, std::vector<float> &logits);

    // Block and tail contents in the CPU byte layouts (kv/kv_cache.h), synchronous.
    size_t sealed_block_bytes() const { return geometry_.sealed_block_bytes(); }
    size_t tail_block_bytes() const { return geometry_.tail_block_bytes(); }
    void read_block(uint32_t id, void *host);
    void write_block(uint32_t id, const void *host);
    void read_tail(int64_t slot, void *host);
    void write_tail(int64_t slot, const void *host);
    void copy_tail(int64_t from, int64_t to);

    // Asynchronous block copies on the copy stream (see cuda_module.h for ordering); the
    // host buffers should come from host_alloc. Return a ticket for copy_done / copy_wait.
    uint64_t read_blocks_async(const uint32_t *ids, size_t n, void *const *host);
    uint64_t write_blocks_async(const uint32_t *ids, size_t n, const void *const *host);
    bool copy_done(uint64_t ticket);
    void copy_wait(uint64_t ticket);

    // Pinned host memory (cudaHostAlloc) for the host tier; free it before the backend.
    void *host_alloc(size_t bytes);
    void host_free(void *p);

    struct MemoryUsage {
        uint64_t weights = 0, kv = 0, other = 0;
    };
    MemoryUsage memory_usage() const;
    const std::string &device_name() const { return device_name_; }
    const KvGeometry &geometry() const { return geometry_; }
    uint32_t max_batch_tokens() const { return options_.max_batch_tokens; }

private:
    [[noreturn]] void raise(llmkv_cuda_status status, const char *what) const;
    void check(llmkv_cuda_status status, const char *what) const {
        if (status != LLMKV_CUDA_OK) raise(status, what);
    }

    const llmkv_cuda_api *api_ = nullptr;
    llmkv_cuda_context *ctx_ = nullptr;
    LlamaConfig cfg_;
    KvGeometry geometry_;
    CudaBackendOptions options_;
    std::string device_name_;
    std::vector<llmkv_cuda_span> spans_;  // scratch of run()
};

}  // namespace llmkv
