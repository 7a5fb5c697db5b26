// The mixture-of-experts kernels of the op-level ABI (module_moe.cpp): the scatter of an
// expert's result rows back to their tokens' slots, the weighted sum of each token's experts,
// and the sigmoid gate of a shared expert.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace llmkv::cuda {

// out row rows[i] = x row i for i < n_rows (f32 rows of `cols`; rows int32, device).
cudaError_t launch_scatter_rows(const float *x, uint32_t cols, const int32_t *rows, uint32_t n_rows,
                                float *out, cudaStream_t stream);

// out[t][c] = sum over i < n_used, in that order, of routes[t][n_used + i] * y[t n_used + i][c]
// for t < n_tokens, c < cols: one rounded multiply and one rounded add per term, as the CPU's
// combine_experts computes it (y f32 [n_tokens n_used][cols], routes f32 [n_tokens][2 n_used]).
cudaError_t launch_combine_experts(const float *y, const float *routes, uint32_t n_used,
                                   uint32_t n_tokens, uint32_t cols, float *out,
                                   cudaStream_t stream);

// y row r += bias[r] (a device pointer to cols f32, or null: nothing added) for r < n_rows
// (bias: a device array of n_rows pointers; gpt-oss's per-expert biases, one per routed row).
cudaError_t launch_add_row_biases(float *y, uint32_t cols, const float *const *bias,
                                  uint32_t n_rows, cudaStream_t stream);

// x[t][c] *= 1 / (1 + e^-g[t]) for t < rows, c < cols (g: one value per row).
cudaError_t launch_mul_sigmoid(float *x, uint32_t cols, uint32_t rows, const float *g,
                               cudaStream_t stream);

}  // namespace llmkv::cuda
