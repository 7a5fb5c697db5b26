// Helpers of the GPU tests that go through the CUDA module (libllmkv-cuda.so, loaded by
// CudaModule): the skip when no device is usable, and a context with its destroyer.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.h"

// Skips the test (reported as skipped, with the reason printed) unless the module loads and
// sees a device.
#define LLMKV_REQUIRE_MODULE_DEVICE()                             \
    do {                                                          \
        std::string why_;                                         \
        if (llmkv::cuda_device_count(&why_) == 0) {               \
            std::printf("[ SKIP REASON ] %s\n", why_.c_str());    \
            GTEST_SKIP() << "CUDA backend unavailable: " << why_; \
        }                                                         \
    } while (0)

// A real model (SmolLM2, 135M weights) under the device emulator takes minutes per test (a
// fiber switch per shuffle of every row of every matvec; SmolLM2 on three ranks: 149 s). The tiny
// random-weight models cover the same path in CI; LLMKV_EMU_MODELS=1 runs these too
// (scripts/test_emu_models.sh). On a GPU they always run.
#if defined(LLMKV_CUDA_EMU)
#define LLMKV_SKIP_REAL_MODEL_UNDER_EMULATION()                                         \
    do {                                                                                \
        const char *all_ = std::getenv("LLMKV_EMU_MODELS");                             \
        if (!all_ || std::string(all_) != "1") {                                        \
            std::printf(                                                                \
                "[ SKIP REASON ] a real model under the device emulator takes minutes " \
                "(LLMKV_EMU_MODELS=1 runs it)\n");                                      \
            GTEST_SKIP() << "real model under emulation: LLMKV_EMU_MODELS=1 runs it";   \
        }                                                                               \
    } while (0)
#else
#define LLMKV_SKIP_REAL_MODEL_UNDER_EMULATION() \
    do {                                        \
    } while (0)
#endif

namespace llmkv::gputest {

using ContextPtr = std::unique_ptr<llmkv_cuda_context, void (*)(llmkv_cuda_context *)>;

// api->create for geometry g with the pool sizes and max_tokens per batch on `device`; *status and
// *err (may be null) receive create's answer; the pointer is null when it failed.
inline ContextPtr create_context(const llmkv_cuda_api *api, const KvGeometry &g, uint32_t n_sealed,
                                 uint32_t n_tail, uint32_t max_tokens,
                                 llmkv_cuda_status *status = nullptr, std::string *err = nullptr,
                                 int device = 0) {
    const llmkv_cuda_kv_desc kd = cuda_kv_desc(g, n_sealed, n_tail);
    llmkv_cuda_context_params cp{};
    cp.struct_size = sizeof cp;
    cp.device = device;
    cp.max_batch_tokens = max_tokens;
    llmkv_cuda_context *ctx = nullptr;
    char buf[512] = {0};
    const llmkv_cuda_status s = api->create(&kd, &cp, &ctx, buf, sizeof buf);
    if (status) *status = s;
    if (err) *err = buf;
    return ContextPtr(s == LLMKV_CUDA_OK ? ctx : nullptr, api->destroy);
}

// Free and total bytes of device 0 (0, 0 when the query fails).
inline void device_memory(const llmkv_cuda_api *api, uint64_t *free_bytes, uint64_t *total) {
    char name[256] = {0}, err[256] = {0};
    *free_bytes = *total = 0;
    if (api->device_info(0, name, sizeof name, free_bytes, total, err, sizeof err) != LLMKV_CUDA_OK)
        *free_bytes = *total = 0;
}

}  // namespace llmkv::gputest
