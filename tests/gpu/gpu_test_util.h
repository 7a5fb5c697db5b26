// Helpers of the GPU tests: skipping without a device, device buffers, random fp16 data.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"

namespace llmkv::gputest {

// Sets an environment variable for the lifetime of the object (the CUDA backend reads some
// when an engine is created).
class ScopedEnv {
public:
    ScopedEnv(const char *name, const char *value) : name_(name) {
        if (const char *old = std::getenv(name)) old_ = old, had_ = true;
        setenv(name, value, 1);
    }
    ~ScopedEnv() {
        if (had_)
            setenv(name_, old_.c_str(), 1);
        else
            unsetenv(name_);
    }
    ScopedEnv(const ScopedEnv &) = delete;
    ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
    const char *name_;
    std::string old_;
    bool had_ = false;
};

// Under the device emulator (-DLLMKV_CUDA=EMU) a kernel runs at about a microsecond per
// thread switch, so the engine-level tests run shorter prompts and generations there (the
// same paths: shared batches, preemption, the host tier beyond the device pool); on a GPU
// the full sizes. kernels/emu/README.md.
#if defined(LLMKV_CUDA_EMU)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif
template <class T>
constexpr T on_gpu_or_emulated(T gpu, T emulated) {
    return kEmulated ? emulated : gpu;
}

// True when the CUDA runtime sees a device; otherwise *why says why not.
inline bool device_present(std::string *why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
        return false;
    }
    if (n == 0) {
        *why = "no CUDA device";
        return false;
    }
    return true;
}

// Every GPU test starts with this: skipped (reported as skipped by ctest) without a device.
#define LLMKV_REQUIRE_DEVICE()                                 \
    do {                                                       \
        std::string why_;                                      \
        if (!::llmkv::gputest::device_present(&why_)) {        \
            std::printf("[ SKIP REASON ] %s\n", why_.c_str()); \
            GTEST_SKIP() << "no CUDA device: " << why_;        \
        }                                                      \
    } while (0)

#define CUDA_OK(expr) \
    ASSERT_EQ(cudaSuccess, (expr)) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// A device buffer of n elements of T (freed on scope exit).
template <class T>
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t n = 0) { resize(n); }
    ~DeviceBuffer() { cudaFree(p_); }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    void resize(size_t n) {
        cudaFree(p_);
        p_ = nullptr;
        n_ = n;
        if (n && cudaMalloc(reinterpret_cast<void **>(&p_), n * sizeof(T)) != cudaSuccess) {
            p_ = nullptr;
            n_ = 0;
        }
        if (p_) cudaMemset(p_, 0, n * sizeof(T));
    }
    T *get() const { return p_; }
    size_t size() const { return n_; }
    bool upload(const T *src, size_t n) {
        return n <= n_ && cudaMemcpy(p_, src, n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess;
    }
    bool upload(const std::vector<T> &v) { return upload(v.data(), v.size()); }
    std::vector<T> download(size_t n) const {
        std::vector<T> v(n);
        if (n && cudaMemcpy(v.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
            v.clear();
        return v;
    }

private:
    T *p_ = nullptr;
    size_t n_ = 0;
};

inline std::vector<uint16_t> random_fp16(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<uint16_t> v(n);
    for (auto &x : v) x = fp32_to_fp16(dist(rng));
    return v;
}

inline std::vector<float> random_f32(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto &x : v) x = dist(rng);
    return v;
}

}  // namespace llmkv::gputest
