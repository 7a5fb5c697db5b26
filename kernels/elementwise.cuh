// Small elementwise kernels of the op-level ABI: residual add, bias add, scale, f32 -> fp16
// conversion of a GEMM input, the gather of the rows whose logits a batch wants, and the
// rank-ordered sum of an all-gather (tensor parallelism).
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace llmkv::cuda {

// x[i] += y[i] for i < n (f32, device).
cudaError_t launch_add(float *x, const float *y, size_t n, cudaStream_t stream);

// x[r][c] += bias[c] for r < rows, c < cols (x f32 [rows][cols], bias f32 [cols], device).
cudaError_t launch_add_bias(float *x, uint32_t cols, uint32_t rows, const float *bias,
                            cudaStream_t stream);

// x[i] *= s for i < n (f32, device).
cudaError_t launch_scale(float *x, size_t n, float s, cudaStream_t stream);

// out[i] = fp16(x[i]) for i < n, round to nearest even exactly as fp32_to_fp16 of
// src/common/half.h (x f32, out fp16 bit patterns, device).
cudaError_t launch_f32_to_f16(const float *x, size_t n, uint16_t *out, cudaStream_t stream);

// out row i = x row rows[i] for i < n_rows (f32 rows of `cols`; rows int32, device).
cudaError_t launch_gather_rows(const float *x, uint32_t cols, const int32_t *rows, uint32_t n_rows,
                               float *out, cudaStream_t stream);

// out[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ... for i < n: the n_parts copies
// of an n-float buffer laid end to end in `parts` (an all-gather's result), added in their
// order, one rounding per add (the CPU's Communicator::all_reduce_sum does the same adds).
cudaError_t launch_sum_parts(const float *parts, size_t n, uint32_t n_parts, float *out,
                             cudaStream_t stream);

}  // namespace llmkv::cuda
