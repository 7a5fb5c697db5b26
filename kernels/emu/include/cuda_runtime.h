// llmkv's CUDA emulator: what nvcc gives a .cu file (it force-includes cuda_runtime.h), for
// the host compiler. The build force-includes this header into every kernel file
// (-include cuda_runtime.h) and defines __CUDA_ARCH__=900, so the device branches are the ones
// compiled. Each CUDA thread runs as a fiber; a block's threads run on one host thread, one
// block at a time per host thread (kernels/emu/README.md says what that shows and what not).
//
// The subset (the kernels' own, counted in kernels/): __global__/__device__/__host__,
// __forceinline__, __launch_bounds__, static and dynamic shared memory, threadIdx/blockIdx/
// blockDim/gridDim/warpSize, __syncthreads, __shfl_xor_sync/__shfl_sync/__shfl_down_sync/
// __shfl_up_sync, __syncwarp, atomicMin/Max/Add/Exch/CAS, __ldg, the _rn arithmetic and
// conversions, __float_as_uint and friends, min/max, and the host math library. Launches go
// through LLMKV_LAUNCH (kernels/launch.cuh).
#pragma once

#include <math.h>
#include <string.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __constant__ static
#define __forceinline__ inline __attribute__((always_inline))
// __noinline__ is not defined: library headers spell __attribute__((__noinline__)) (no kernel uses
// it)
#define __launch_bounds__(...)
// Static shared memory: one copy per host thread, which runs one block at a time, so every
// thread (fiber) of a block sees the same variable.
#define __shared__ static thread_local

namespace cudaemu {

// The running thread and block (the fiber scheduler's, kernels/emu/runtime.cpp).
CUDAEMU_API const uint3 &thread_idx();
CUDAEMU_API const uint3 &block_idx();
CUDAEMU_API const dim3 &block_dim();
CUDAEMU_API const dim3 &grid_dim();
// The block's dynamic shared memory (the launch's bytes, poisoned, a guard page past its end).
CUDAEMU_API void *dynamic_shared();

// Barriers: every live thread of the block (warp: every lane in mask) must reach the same call
// site; the emulator stops the process with a report when they do not.
CUDAEMU_API void sync_block(const char *file, int line);
CUDAEMU_API void sync_warp(unsigned mask, const char *file, int line);
// One shuffle: publishes bytes of *in for the lanes of mask, waits for them, copies src_lane's
// into *out. A lane in mask that has exited is reported (a full mask after an exit).
CUDAEMU_API void shuffle(unsigned mask, const void *in, void *out, unsigned bytes, int src_lane,
                         const char *file, int line);
// Reports an access the emulator caught (a misaligned __ldg) and stops the process.
CUDAEMU_API void fault(const char *what, const void *address);

// Queues (or runs) a launch of `body` per thread on `stream`: cudaErrorInvalidConfiguration
// and friends as cudaLaunchKernel would return them (also left for cudaGetLastError).
CUDAEMU_API cudaError_t launch(const char *kernel, dim3 grid, dim3 block, size_t shared_bytes,
                               cudaStream_t stream, std::function<void()> body);

template <class... P>
struct Launcher {
    void (*kernel)(P...);
    const char *name;
    dim3 grid, block;
    size_t shared_bytes;
    cudaStream_t stream;
    template <class... A>
    void operator()(A &&...args) const {
        // The arguments by value, as a launch copies them; every thread gets its own copy.
        auto k = kernel;
        std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
        launch(name, grid, block, shared_bytes, stream, [k, params]() {
            auto copy = params;
            std::apply(k, std::move(copy));
        });
    }
};
template <class... P>
Launcher<P...> launcher(void (*kernel)(P...), const char *name, dim3 grid, dim3 block,
                        size_t shared_bytes, cudaStream_t stream) {
    return Launcher<P...>{kernel, name, grid, block, shared_bytes, stream};
}

template <class T>
inline T shfl_any(unsigned mask, T v, int src, const char *file, int line) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 16, "shuffle of T");
    T out;
    shuffle(mask, &v, &out, sizeof(T), src, file, line);
    return out;
}
inline unsigned lane_id() {
    const dim3 &b = block_dim();
    const uint3 &t = thread_idx();
    return (t.x + b.x * (t.y + b.y * t.z)) & 31u;
}

}  // namespace cudaemu

#define threadIdx (::cudaemu::thread_idx())
#define blockIdx (::cudaemu::block_idx())
#define blockDim (::cudaemu::block_dim())
#define gridDim (::cudaemu::grid_dim())
constexpr int warpSize = 32;

#define __syncthreads() ::cudaemu::sync_block(__FILE__, __LINE__)
#define __syncwarp(...) ::cudaemu::sync_warp(cudaemu_mask_or_full(__VA_ARGS__), __FILE__, __LINE__)
inline unsigned cudaemu_mask_or_full(unsigned m = 0xffffffffu) {
    return m;
}

// A lane's source lane for each shuffle, within segments of `width` lanes (CUDA's rules).
#define __shfl_sync(mask, v, src, ...) \
    ::cudaemu::shfl_any((mask), (v), cudaemu_src_idx((src), ##__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, lm, ...) \
    ::cudaemu::shfl_any((mask), (v), cudaemu_src_xor((lm), ##__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, d, ...) \
    ::cudaemu::shfl_any((mask), (v), cudaemu_src_down((d), ##__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, d, ...) \
    ::cudaemu::shfl_any((mask), (v), cudaemu_src_up((d), ##__VA_ARGS__), __FILE__, __LINE__)
inline int cudaemu_src_idx(int src, int width = 32) {
    const int lane = int(::cudaemu::lane_id());
    return (lane & ~(width - 1)) + (src & (width - 1));
}
// As PTX shfl.bfly / down / up with CUDA's width segments: the source lane is valid up to the
// end of the caller's segment (bfly may read an earlier segment), deltas use their low 5 bits.
inline int cudaemu_src_xor(int lm, int width = 32) {
    const int lane = int(::cudaemu::lane_id()), s = lane ^ (lm & 31);
    return s <= (lane | (width - 1)) ? s : lane;
}
inline int cudaemu_src_down(unsigned d, int width = 32) {
    const int lane = int(::cudaemu::lane_id()), s = lane + int(d & 31u);
    return s <= (lane | (width - 1)) ? s : lane;
}
inline int cudaemu_src_up(unsigned d, int width = 32) {
    const int lane = int(::cudaemu::lane_id()), s = lane - int(d & 31u);
    return s >= (lane & ~(width - 1)) ? s : lane;
}

template <class T>
inline T __ldg(const T *p) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) ::cudaemu::fault("misaligned __ldg", p);
    return *p;
}

// Atomics: a block's threads are fibers of one host thread, but blocks run on several.
template <class T>
inline T atomicMin(T *p, T v) {
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < old &&
           !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
template <class T>
inline T atomicMax(T *p, T v) {
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > old &&
           !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
template <class T>
inline T atomicAdd(T *p, T v) {
    if constexpr (std::is_floating_point<T>::value) {
        // The generic builtins (the _n forms take integers and pointers only).
        T old;
        __atomic_load(p, &old, __ATOMIC_RELAXED);
        T next = T(old + v);
        while (
            !__atomic_compare_exchange(p, &old, &next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            next = T(old + v);
        }
        return old;
    } else {
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
    }
}
template <class T>
inline T atomicExch(T *p, T v) {
    T old;
    __atomic_exchange(p, &v, &old, __ATOMIC_RELAXED);
    return old;
}
template <class T>
inline T atomicCAS(T *p, T cmp, T v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
inline void __threadfence() {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

// Arithmetic with round-to-nearest and no contraction (the kernel files are compiled with
// -ffp-contract=off, so these are single IEEE operations as on the GPU).
inline float __fadd_rn(float a, float b) {
    return a + b;
}
inline float __fsub_rn(float a, float b) {
    return a - b;
}
inline float __fmul_rn(float a, float b) {
    return a * b;
}
inline float __fdiv_rn(float a, float b) {
    return a / b;
}
inline float __fmaf_rn(float a, float b, float c) {
    return std::fma(a, b, c);
}
inline float __frcp_rn(float a) {
    return 1.0f / a;
}
inline float __fsqrt_rn(float a) {
    return std::sqrt(a);
}
// Float to integer as the GPU's cvt.sat: out-of-range values saturate, NaN gives 0 (a plain
// C++ cast is undefined there, and on x86 gives INT_MIN).
inline int cudaemu_sat_int(float r) {
    if (r != r) return 0;
    if (r >= 2147483648.0f) return 2147483647;
    if (r <= -2147483648.0f) return int(-2147483647 - 1);
    return int(r);
}
inline unsigned cudaemu_sat_uint(float r) {
    if (r != r || r <= 0.0f) return 0u;
    if (r >= 4294967296.0f) return 4294967295u;
    return unsigned(r);
}
inline int __float2int_rn(float f) {
    return cudaemu_sat_int(std::nearbyint(f));
}
inline int __float2int_rz(float f) {
    return cudaemu_sat_int(std::trunc(f));
}
inline unsigned __float2uint_rn(float f) {
    return cudaemu_sat_uint(std::nearbyint(f));
}
inline float __int2float_rn(int i) {
    return float(i);
}
inline float __uint2float_rn(unsigned u) {
    return float(u);
}
inline unsigned __float_as_uint(float f) {
    return std::bit_cast<unsigned>(f);
}
inline int __float_as_int(float f) {
    return std::bit_cast<int>(f);
}
inline float __uint_as_float(unsigned u) {
    return std::bit_cast<float>(u);
}
inline float __int_as_float(int i) {
    return std::bit_cast<float>(i);
}
inline float __expf(float x) {
    return expf(x);
}
inline float __logf(float x) {
    return logf(x);
}
inline float __fdividef(float a, float b) {
    return a / b;
}
inline float rsqrtf(float x) {
    return 1.0f / sqrtf(x);
}
inline float __saturatef(float x) {
    return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
inline int __popc(unsigned x) {
    return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
    return __builtin_popcountll(x);
}
inline int __clzll(long long x) {
    return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
inline int __ffsll(long long x) {
    return __builtin_ffsll(x);
}
inline int __clz(int x) {
    return x == 0 ? 32 : __builtin_clz(unsigned(x));
}
inline int __ffs(int x) {
    return __builtin_ffs(x);
}

// CUDA's integer and float min/max overloads (mixed signed/unsigned as CUDA resolves them).
// One min/max pair per type CUDA overloads them for.
#define CUDAEMU_MINMAX(T)     \
    inline T min(T a, T b) {  \
        return a < b ? a : b; \
    }                         \
    inline T max(T a, T b) {  \
        return a > b ? a : b; \
    }
CUDAEMU_MINMAX(int)
CUDAEMU_MINMAX(unsigned)
CUDAEMU_MINMAX(long)
CUDAEMU_MINMAX(unsigned long)
CUDAEMU_MINMAX(long long)
CUDAEMU_MINMAX(unsigned long long)
#undef CUDAEMU_MINMAX
inline unsigned min(int a, unsigned b) {
    return min(unsigned(a), b);
}
inline unsigned min(unsigned a, int b) {
    return min(a, unsigned(b));
}
inline unsigned max(int a, unsigned b) {
    return max(unsigned(a), b);
}
inline unsigned max(unsigned a, int b) {
    return max(a, unsigned(b));
}
inline float min(float a, float b) {
    return fminf(a, b);
}
inline float max(float a, float b) {
    return fmaxf(a, b);
}
inline double min(double a, double b) {
    return fmin(a, b);
}
inline double max(double a, double b) {
    return fmax(a, b);
}
