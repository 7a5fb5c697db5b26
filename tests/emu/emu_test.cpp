// The device emulator's own tests (-DLLMKV_CUDA=EMU): that it runs kernels as CUDA defines
// them (every thread of every block, barriers, shuffles, shared memory, streams and events),
// and that it stops, with the kernel, thread and source line, on the defects it exists to
// catch: a barrier some threads never reach, a shuffle naming an exited lane, dynamic shared
// memory past its end, a misaligned load, an impossible launch configuration, a missing
// barrier (LLMKV_EMU=reverse) and a missing stream dependency (LLMKV_EMU=hold).
// This file is compiled as the kernel files are (the emulator's cuda_runtime.h force-included).
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <vector>

#include "launch.cuh"

namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

template <class T>
struct Buf {
    T *p = nullptr;
    size_t n = 0;
    explicit Buf(size_t count) : n(count) {
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&p), n * sizeof(T)), cudaSuccess);
        EXPECT_EQ(cudaMemset(p, 0, n * sizeof(T)), cudaSuccess);
    }
    ~Buf() { cudaFree(p); }
    std::vector<T> get() const {
        std::vector<T> h(n);
        EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
    }
};

// ---- kernels ----------------------------------------------------------------------------

__global__ void write_ids(int *out) {
    const unsigned block = blockIdx.x + gridDim.x * blockIdx.y;
    const unsigned t = threadIdx.x + blockDim.x * threadIdx.y;
    out[block * blockDim.x * blockDim.y + t] = int(block * 1000 + t);
}

// A block-wide sum through static shared memory, warp shuffles and one barrier; the first
// thread writes the block's total.
__global__ void block_sum(const float *x, float *out) {
    __shared__ float warp_sums[32];
    const unsigned t = threadIdx.x, lane = t % 32, warp = t / 32;
    float v = x[blockIdx.x * blockDim.x + t];
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (t == 0) {
        float s = 0;
        for (unsigned w = 0; w < blockDim.x / 32; ++w) s += warp_sums[w];
        out[blockIdx.x] = s;
    }
}

// Reverses a block's values through dynamic shared memory.
__global__ void reverse_in_shared(const int *x, int *out) {
    LLMKV_DYNAMIC_SHARED(int, s);
    const unsigned t = threadIdx.x, n = blockDim.x;
    s[t] = x[t];
    __syncthreads();
    out[t] = s[n - 1 - t];
}

// Each thread takes its left neighbour's value through dynamic shared memory; `with_barrier`
// false leaves out the barrier between the writes and the reads. In thread order the missing
// barrier goes unseen (thread t - 1 has run to its end before thread t starts).
__global__ void shift_in_shared(const int *x, int *out, bool with_barrier) {
    LLMKV_DYNAMIC_SHARED(int, s);
    const unsigned t = threadIdx.x;
    s[t] = x[t];
    if (with_barrier) __syncthreads();
    out[t] = t ? s[t - 1] : -1;
}

__global__ void divergent_barrier(int *out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}

__global__ void shuffle_after_exit(int *out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

__global__ void shared_overrun(int *out, unsigned n) {
    LLMKV_DYNAMIC_SHARED(int, s);
    if (threadIdx.x == 0) {
        for (unsigned i = 0; i < n; ++i) s[i] = int(i);
        out[0] = s[n - 1];
    }
}

__global__ void misaligned_load(const char *bytes, float *out) {
    out[0] = __ldg(reinterpret_cast<const float *>(bytes + 2));
}

__global__ void store_value(int *p, int v) {
    *p = v;
}

// ---- what runs as CUDA defines it ---------------------------------------------------------

TEST(Emulator, EveryThreadOfEveryBlockRunsWithItsIndices) {
    const dim3 grid(3, 2), block(8, 4);
    Buf<int> out(6 * 32);
    LLMKV_LAUNCH(write_ids, grid, block, 0, nullptr)(out.p);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int> h = out.get();
    for (unsigned b = 0; b < 6; ++b)
        for (unsigned t = 0; t < 32; ++t) ASSERT_EQ(h[b * 32 + t], int(b * 1000 + t)) << b << t;
}

TEST(Emulator, ShufflesStaticSharedMemoryAndBarriersGiveExactSums) {
    const unsigned blocks = 5, threads = 256;
    std::vector<float> x(blocks * threads);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97);  // sums exact in f32
    Buf<float> dx(x.size()), dout(blocks);
    CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    LLMKV_LAUNCH(block_sum, blocks, threads, 0, nullptr)(dx.p, dout.p);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> h = dout.get();
    for (unsigned b = 0; b < blocks; ++b) {
        const float want =
            std::accumulate(x.begin() + b * threads, x.begin() + (b + 1) * threads, 0.0f);
        EXPECT_EQ(h[b], want) << b;
    }
}

TEST(Emulator, DynamicSharedMemoryWithABarrierIsCorrectInEitherThreadOrder) {
    const unsigned n = 128;
    std::vector<int> x(n);
    std::iota(x.begin(), x.end(), 0);
    Buf<int> dx(n), dout(n);
    CUDA_OK(cudaMemcpy(dx.p, x.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    LLMKV_LAUNCH(reverse_in_shared, 1, n, n * sizeof(int), nullptr)(dx.p, dout.p);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int> h = dout.get();
    for (unsigned t = 0; t < n; ++t) ASSERT_EQ(h[t], int(n - 1 - t));
}

TEST(Emulator, ImpossibleLaunchesFailAsCudaFailsThem) {
    Buf<int> out(4096);
    LLMKV_LAUNCH(write_ids, 1, 2048, 0, nullptr)(out.p);  // > 1024 threads per block
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the error is cleared once read";
    LLMKV_LAUNCH(write_ids, dim3(1, 70000), 32, 0, nullptr)(out.p);  // grid.y > 65535
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    LLMKV_LAUNCH(reverse_in_shared, 1, 32, 64u << 10, nullptr)(out.p, out.p);  // > 48 KiB
    EXPECT_NE(cudaGetLastError(), cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int> h = out.get();
    for (int v : h) ASSERT_EQ(v, 0) << "a refused launch ran";
}

TEST(Emulator, MemoryIsBoundedAndCopiesOutsideAllocationsAreRefused) {
    size_t free_b = 0, total_b = 0;
    CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
    EXPECT_GT(total_b, 0u);
    void *p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, total_b + 1), cudaErrorMemoryAllocation);
    EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    Buf<int> small(4);
    std::vector<int> h(8);
    EXPECT_NE(cudaMemcpy(h.data(), small.p, 8 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess)
        << "a copy past the allocation's end";
    cudaGetLastError();
}

TEST(Emulator, AnEventOrdersWorkAcrossStreams) {
    cudaStream_t a = nullptr, b = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    cudaEvent_t e = nullptr;
    CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    Buf<int> v(1);
    int host = 0;
    LLMKV_LAUNCH(store_value, 1, 1, 0, a)(v.p, 7);
    CUDA_OK(cudaEventRecord(e, a));
    CUDA_OK(cudaStreamWaitEvent(b, e, 0));
    CUDA_OK(cudaMemcpyAsync(&host, v.p, sizeof(int), cudaMemcpyDeviceToHost, b));
    CUDA_OK(cudaStreamSynchronize(b));
    EXPECT_EQ(host, 7);
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
}

// ---- the defects it stops on ------------------------------------------------------------------

TEST(EmulatorDeathTest, ABarrierSomeThreadsNeverReachStops) {
    EXPECT_DEATH(
        {
            Buf<int> out(64);
            LLMKV_LAUNCH(divergent_barrier, 1, 64, 0, nullptr)(out.p);
            cudaDeviceSynchronize();
        },
        "divergent_barrier.*divergent __syncthreads.*emu_test.cpp");
}

TEST(EmulatorDeathTest, AShuffleNamingAnExitedLaneStops) {
    EXPECT_DEATH(
        {
            Buf<int> out(32);
            LLMKV_LAUNCH(shuffle_after_exit, 1, 32, 0, nullptr)(out.p);
            cudaDeviceSynchronize();
        },
        "shuffle_after_exit.*after lane 5 exited");
}

TEST(EmulatorDeathTest, DynamicSharedMemoryPastItsEndStops) {
    EXPECT_DEATH(
        {
            Buf<int> out(1);
            // 64 ints launched, 64 Ki written: past the launch's bytes into the guard page.
            LLMKV_LAUNCH(shared_overrun, 1, 32, 64 * sizeof(int), nullptr)(out.p, 64u << 10);
            cudaDeviceSynchronize();
        },
        "dynamic shared memory.*shared_overrun.*thread \\(0,0,0\\)");
}

TEST(EmulatorDeathTest, AMisalignedLoadStops) {
    EXPECT_DEATH(
        {
            Buf<char> bytes(16);
            Buf<float> out(1);
            LLMKV_LAUNCH(misaligned_load, 1, 1, 0, nullptr)(bytes.p, out.p);
            cudaDeviceSynchronize();
        },
        "misaligned_load.*misaligned __ldg");
}

// The modes are read once per process: each runs in a child of its own (the threadsafe death
// test style starts the test binary again), which sets LLMKV_EMU before its first CUDA call
// and exits 0 when the defect showed, 1 when it did not.
int missing_barrier_shows() {
    const unsigned n = 64;
    std::vector<int> x(n);
    std::iota(x.begin(), x.end(), 0);
    Buf<int> dx(n), dout(n);
    cudaMemcpy(dx.p, x.data(), n * sizeof(int), cudaMemcpyHostToDevice);
    LLMKV_LAUNCH(shift_in_shared, 1, n, n * sizeof(int), nullptr)(dx.p, dout.p, false);
    cudaDeviceSynchronize();
    const std::vector<int> h = dout.get();
    for (unsigned t = 1; t < n; ++t)
        if (h[t] != int(t - 1)) return 0;
    return 1;
}

int missing_stream_wait_shows(bool with_wait) {
    cudaStream_t a = nullptr, b = nullptr;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEvent_t e = nullptr;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    Buf<int> v(1);
    int host = 0;
    LLMKV_LAUNCH(store_value, 1, 1, 0, a)(v.p, 7);
    cudaEventRecord(e, a);
    if (with_wait) cudaStreamWaitEvent(b, e, 0);
    cudaMemcpyAsync(&host, v.p, sizeof(int), cudaMemcpyDeviceToHost, b);
    cudaStreamSynchronize(b);
    cudaDeviceSynchronize();
    return host == 7 ? 1 : 0;
}

TEST(EmulatorModes, ReverseOrderShowsAMissingBarrier) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    // In thread order the missing barrier goes unseen; in reverse order thread t reads its
    // neighbour's slot before the neighbour has written it (poisoned: the defect shows).
    EXPECT_EXIT(std::exit(missing_barrier_shows()), ::testing::ExitedWithCode(1), "");
    EXPECT_EXIT(
        {
            setenv("LLMKV_EMU", "reverse,quiet", 1);
            std::exit(missing_barrier_shows());
        },
        ::testing::ExitedWithCode(0), "");
}

TEST(EmulatorModes, HoldShowsAMissingStreamWaitAndKeepsAPresentOne) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            setenv("LLMKV_EMU", "hold,quiet", 1);
            std::exit(missing_stream_wait_shows(false));
        },
        ::testing::ExitedWithCode(0), "");
    EXPECT_EXIT(
        {
            setenv("LLMKV_EMU", "hold,quiet", 1);
            std::exit(missing_stream_wait_shows(true) ? 1 : 0);
        },
        ::testing::ExitedWithCode(1), "");
}

}  // namespace
