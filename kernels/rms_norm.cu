// RMSNorm. Layouts: x f32 [rows][ld_x]; weight f32 [n]; out fp16 or f32 [n_rows][n].
// One CTA (256 threads) per row. The sum of squares is accumulated in double like the CPU
// (rms_norm of src/backend/cpu/cpu_backend.h); only the summation order differs, so the scale
// matches the CPU's except in rare last-bit cases, and x * scale * weight is evaluated in
// the same order without FMA contraction. fp16 outputs are rounded to nearest even.
#include "device_math.cuh"
#include "launch.cuh"
#include "rms_norm.cuh"

namespace llmkv::cuda {

namespace {

constexpr uint32_t kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float *x, uint32_t ld_x, const int32_t *__restrict__ rows,
                    const float *__restrict__ weight, uint32_t n, float eps, uint16_t *out_f16,
                    float *out_f32) {  // x and out_f32 may be one buffer (in place)
    __shared__ double partial[kThreads / 32];
    __shared__ float scale_shared;
    const uint32_t i = blockIdx.x;
    const size_t src_row = rows ? size_t(rows[i]) : size_t(i);
    const float *xr = x + src_row * ld_x;  // f32 [n]
    double ss = 0.0;
    for (uint32_t e = threadIdx.x; e < n; e += kThreads) ss += double(xr[e]) * double(xr[e]);
    for (uint32_t o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (uint32_t w = 0; w < kThreads / 32; ++w) total += partial[w];
        scale_shared = float(1.0 / sqrt(total / double(n) + double(eps)));
    }
    __syncthreads();
    const float scale = scale_shared;
    for (uint32_t e = threadIdx.x; e < n; e += kThreads) {
        const float v = __fmul_rn(__fmul_rn(xr[e], scale), weight[e]);
        if (out_f16) {
            out_f16[size_t(i) * n + e] = f32_to_fp16_bits(v);
        } else {
            out_f32[size_t(i) * n + e] = v;
        }
    }
}

}  // namespace

cudaError_t launch_rms_norm(const float *x, uint32_t ld_x, const int32_t *rows, uint32_t n_rows,
                            const float *weight, uint32_t n, float eps, uint16_t *out_f16,
                            float *out_f32, cudaStream_t stream) {
    if (n_rows == 0) return cudaSuccess;
    if ((out_f16 == nullptr) == (out_f32 == nullptr)) return cudaErrorInvalidValue;
    LLMKV_LAUNCH(rms_norm_kernel, n_rows, kThreads, 0, stream)
    (x, ld_x, rows, weight, n, eps, out_f16, out_f32);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
