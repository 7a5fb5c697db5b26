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

// Conversions as cvt.rni.sat: out of range saturates, NaN gives 0.
__global__ void conversions(const float *x, int *i, unsigned *u, int n) {
    for (int k = 0; k < n; ++k) {
        i[k] = __float2int_rn(x[k]);
        u[k] = __float2uint_rn(x[k]);
    }
}

// Shuffles within 16-lane segments: xor by 16 reads the lower segment from the upper one only,
// down by 8 stays inside the caller's segment.
__global__ void segment_shuffles(int *xor16, int *down8) {
    const int lane = int(threadIdx.x);
    xor16[lane] = __shfl_xor_sync(0xffffffffu, lane, 16, 16);
    down8[lane] = __shfl_down_sync(0xffffffffu, lane, 8, 16);
}

__global__ void float_atomics(float *sum, float *last) {
    atomicAdd(sum, 0.5f);
    atomicExch(last, float(threadIdx.x));
}

// Declares dynamic shared memory it never touches (legal with a launch of 0 bytes).
__global__ void declares_shared_only(int *out) {
    LLMKV_DYNAMIC_SHARED(float, s);
    out[threadIdx.x] = s != nullptr ? 1 : 0;
}

__global__ void writes_one_past(unsigned n) {
    LLMKV_DYNAMIC_SHARED(unsigned char, s);
    if (threadIdx.x == 0) s[n] = 1;  // inside the 16-byte alignment slack, before the guard
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

TEST(Emulator, FloatToIntegerConversionsSaturateAsTheGpuDoes) {
    const std::vector<float> x = {2.5f, -2.5f, 3e9f, -3e9f, INFINITY, -INFINITY, NAN, -1.0f};
    Buf<float> dx(x.size());
    Buf<int> di(x.size());
    Buf<unsigned> du(x.size());
    CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    LLMKV_LAUNCH(conversions, 1, 1, 0, nullptr)(dx.p, di.p, du.p, int(x.size()));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(di.get(), (std::vector<int>{2, -2, 2147483647, -2147483647 - 1, 2147483647,
                                          -2147483647 - 1, 0, -1}));
    EXPECT_EQ(du.get(), (std::vector<unsigned>{2u, 0u, 3000000000u, 0u, 4294967295u, 0u, 0u, 0u}));
}

TEST(Emulator, ShufflesKeepCudasSegmentRules) {
    Buf<int> x(32), d(32);
    LLMKV_LAUNCH(segment_shuffles, 1, 32, 0, nullptr)(x.p, d.p);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<int> hx = x.get(), hd = d.get();
    for (int lane = 0; lane < 32; ++lane) {
        EXPECT_EQ(hx[lane], lane < 16 ? lane : lane - 16) << lane;
        EXPECT_EQ(hd[lane], (lane % 16) + 8 < 16 ? lane + 8 : lane) << lane;
    }
}

TEST(Emulator, FloatAtomicsAddAndExchange) {
    Buf<float> sum(1), last(1);
    LLMKV_LAUNCH(float_atomics, 4, 64, 0, nullptr)(sum.p, last.p);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(sum.get()[0], 128.0f);
    const float l = last.get()[0];
    EXPECT_TRUE(l >= 0.0f && l < 64.0f && l == float(int(l))) << l;
}

TEST(Emulator, DynamicSharedMemoryMayBeDeclaredByALaunchOfZeroBytes) {
    Buf<int> out(8);
    LLMKV_LAUNCH(declares_shared_only, 1, 8, 0, nullptr)(out.p);
    CUDA_OK(cudaDeviceSynchronize());
    for (int v : out.get()) EXPECT_EQ(v, 1);
}

// ---- the defects it stops on ------------------------------------------------------------------

TEST(EmulatorDeathTest, AWriteIntoTheAlignmentSlackStops) {
    EXPECT_DEATH(
        {
            // 20 bytes launched: bytes 20..31 are slack before the guard page.
            LLMKV_LAUNCH(writes_one_past, 1, 1, 20, nullptr)(20u);
            cudaDeviceSynchronize();
        },
        "writes_one_past.*past the launch's 20 bytes");
}

TEST(EmulatorDeathTest, AccessToDynamicSharedMemoryOfAZeroByteLaunchStops) {
    EXPECT_DEATH(
        {
            Buf<int> out(1);
            LLMKV_LAUNCH(shared_overrun, 1, 1, 0, nullptr)(out.p, 4u);
            cudaDeviceSynchronize();
        },
        "dynamic shared memory.*shared_overrun");
}

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
