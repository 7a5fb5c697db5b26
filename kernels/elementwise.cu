// Elementwise kernels: grid-stride loops over all elements (add, bias add, scale,
// conversion) or one CTA per gathered row. Pure f32 arithmetic / copies: bitwise what the CPU
// computes.
#include "device_math.cuh"
#include "elementwise.cuh"
#include "launch.cuh"

namespace llmkv::cuda {

namespace {

constexpr uint32_t kThreads = 256;

unsigned grid_for(size_t n) {
    const size_t blocks = (n + kThreads - 1) / kThreads;
    return unsigned(blocks < 65536 ? blocks : 65536);
}

__global__ void add_kernel(float *__restrict__ x, const float *__restrict__ y, size_t n) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += size_t(gridDim.x) * blockDim.x)
        x[k] = __fadd_rn(x[k], y[k]);
}

__global__ void add_bias_kernel(float *__restrict__ x, uint32_t cols,
                                const float *__restrict__ bias, size_t n) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += size_t(gridDim.x) * blockDim.x)
        x[k] = __fadd_rn(x[k], bias[k % cols]);
}

__global__ void scale_kernel(float *__restrict__ x, float s, size_t n) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += size_t(gridDim.x) * blockDim.x)
        x[k] = __fmul_rn(x[k], s);
}

__global__ void to_f16_kernel(const float *__restrict__ x, size_t n, uint16_t *__restrict__ out) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += size_t(gridDim.x) * blockDim.x)
        out[k] = f32_to_fp16_bits(x[k]);
}

__global__ void gather_rows_kernel(const float *__restrict__ x, uint32_t cols,
                                   const int32_t *__restrict__ rows, float *__restrict__ out) {
    const float *src = x + size_t(rows[blockIdx.x]) * cols;
    float *dst = out + size_t(blockIdx.x) * cols;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

__global__ void sum_parts_kernel(const float *__restrict__ parts, size_t n, uint32_t n_parts,
                                 float *__restrict__ out) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += size_t(gridDim.x) * blockDim.x) {
        float s = parts[k];
        for (uint32_t r = 1; r < n_parts; ++r) s = __fadd_rn(s, parts[size_t(r) * n + k]);
        out[k] = s;
    }
}

}  // namespace

cudaError_t launch_add(float *x, const float *y, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LLMKV_LAUNCH(add_kernel, grid_for(n), kThreads, 0, stream)(x, y, n);
    return cudaGetLastError();
}

cudaError_t launch_add_bias(float *x, uint32_t cols, uint32_t rows, const float *bias,
                            cudaStream_t stream) {
    const size_t n = size_t(rows) * cols;
    if (n == 0) return cudaSuccess;
    LLMKV_LAUNCH(add_bias_kernel, grid_for(n), kThreads, 0, stream)(x, cols, bias, n);
    return cudaGetLastError();
}

cudaError_t launch_scale(float *x, size_t n, float s, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LLMKV_LAUNCH(scale_kernel, grid_for(n), kThreads, 0, stream)(x, s, n);
    return cudaGetLastError();
}

cudaError_t launch_f32_to_f16(const float *x, size_t n, uint16_t *out, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    LLMKV_LAUNCH(to_f16_kernel, grid_for(n), kThreads, 0, stream)(x, n, out);
    return cudaGetLastError();
}

cudaError_t launch_gather_rows(const float *x, uint32_t cols, const int32_t *rows, uint32_t n_rows,
                               float *out, cudaStream_t stream) {
    if (n_rows == 0 || cols == 0) return cudaSuccess;
    LLMKV_LAUNCH(gather_rows_kernel, n_rows, kThreads, 0, stream)(x, cols, rows, out);
    return cudaGetLastError();
}

cudaError_t launch_sum_parts(const float *parts, size_t n, uint32_t n_parts, float *out,
                             cudaStream_t stream) {
    if (n == 0 || n_parts == 0) return cudaSuccess;
    LLMKV_LAUNCH(sum_parts_kernel, grid_for(n), kThreads, 0, stream)(parts, n, n_parts, out);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
