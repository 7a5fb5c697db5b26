// Choosing and creating the backend for an engine: the one place that knows every backend.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/thread_pool.h"

namespace llmkv {

struct BackendRequest {
    llmkv_backend kind = LLMKV_BACKEND_AUTO;  // AUTO: CUDA when the module loads and sees the device, else CPU
    int device = 0;
    uint32_t max_batch_tokens = 512;
    uint32_t max_spans = 0;
    // The pools: ids index these (the CPU backend uses the cache's host slabs; a device
    // backend mirrors the sizes).
    KvCache *cache = nullptr;
    ThreadPool *pool = nullptr;
};

// Creates the backend. CUDA asked for but unavailable: LLMKV_ERR_UNSUPPORTED with the reason;
// AUTO without CUDA logs the reason and returns the CPU backend.
std::unique_ptr<Backend> create_backend(const BackendRequest &request);

// GPUs the CUDA backend can use; 0 with the reason in *why (may be null).
int gpu_device_count(std::string *why);
// A new id for Backend::connect_device_ranks (NCCL); false with the reason in *why when the
// CUDA module or NCCL cannot be loaded.
bool make_device_comm_id(DeviceCommId &id, std::string *why);

}  // namespace llmkv
