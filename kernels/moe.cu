// Mixture-of-experts kernels: one CTA per row (scatter, combine, expert biases) or a grid-stride
// loop (the sigmoid gate). Rounded f32 arithmetic in the CPU's order: combine is bitwise the CPU's.
#include "device_math.cuh"
#include "launch.cuh"
#include "moe.cuh"

namespace llmkv::cuda {

namespace {

constexpr uint32_t kThreads = 256;

__global__ void scatter_rows_kernel(const float *__restrict__ x, uint32_t cols,
                                    const int32_t *__restrict__ rows, float *__restrict__ out) {
    const float *src = x + size_t(blockIdx.x) * cols;
    float *dst = out + size_t(rows[blockIdx.x]) * cols;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

__global__ void combine_kernel(const float *__restrict__ y, const float *__restrict__ routes,
                               uint32_t n_used, uint32_t cols, float *__restrict__ out) {
    const uint32_t t = blockIdx.x;
    const float *w = routes + size_t(t) * 2 * n_used + n_used;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float s = 0.0f;
        for (uint32_t i = 0; i < n_used; ++i)
            s = __fadd_rn(s, __fmul_rn(w[i], y[(size_t(t) * n_used + i) * cols + c]));
        out[size_t(t) * cols + c] = s;
    }
}

__global__ void mul_sigmoid_kernel(float *__restrict__ x, uint32_t cols,
                                   const float *__restrict__ g) {
    const float s = 1.0f / (1.0f + expf(-g[blockIdx.x]));
    float *row = x + size_t(blockIdx.x) * cols;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) row[c] = __fmul_rn(row[c], s);
}

__global__ void add_row_biases_kernel(float *__restrict__ y, uint32_t cols,
                                      const float *const *__restrict__ bias) {
    const float *b = bias[blockIdx.x];
    if (!b) return;
    float *row = y + size_t(blockIdx.x) * cols;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) row[c] = __fadd_rn(row[c], b[c]);
}

}  // namespace

cudaError_t launch_add_row_biases(float *y, uint32_t cols, const float *const *bias,
                                  uint32_t n_rows, cudaStream_t stream) {
    if (n_rows == 0) return cudaSuccess;
    LLMKV_LAUNCH(add_row_biases_kernel, n_rows, kThreads, 0, stream)(y, cols, bias);
    return cudaGetLastError();
}

cudaError_t launch_scatter_rows(const float *x, uint32_t cols, const int32_t *rows, uint32_t n_rows,
                                float *out, cudaStream_t stream) {
    if (n_rows == 0) return cudaSuccess;
    LLMKV_LAUNCH(scatter_rows_kernel, n_rows, kThreads, 0, stream)(x, cols, rows, out);
    return cudaGetLastError();
}

cudaError_t launch_combine_experts(const float *y, const float *routes, uint32_t n_used,
                                   uint32_t n_tokens, uint32_t cols, float *out,
                                   cudaStream_t stream) {
    if (n_tokens == 0) return cudaSuccess;
    LLMKV_LAUNCH(combine_kernel, n_tokens, kThreads, 0, stream)(y, routes, n_used, cols, out);
    return cudaGetLastError();
}

cudaError_t launch_mul_sigmoid(float *x, uint32_t cols, uint32_t rows, const float *g,
                               cudaStream_t stream) {
    if (rows == 0) return cudaSuccess;
    LLMKV_LAUNCH(mul_sigmoid_kernel, rows, kThreads, 0, stream)(x, cols, g);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
