// Decode-path matrix-vector products that read the weights in their packed GGUF form
// (Q4_K, Q6_K, Q5_0, Q8_0): y = x * W^T for a few activation rows, with no fp16 copy of W.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace llmkv::cuda {

// Most activation rows one launch takes (the decode path: one token per session).
constexpr uint32_t kMatvecMaxTokens = 8;

// True for the GGML type ids launch_matvec_q reads: Q4_K, Q6_K, Q5_0, Q8_0.
bool matvec_q_type_supported(uint32_t type);

// y[t][r] = sum over c < cols of W[r][c] * x[t][c], for t < n_tokens (1..kMatvecMaxTokens),
// r < rows. W: `rows` packed rows of `type` (device, row r at w + r * row_bytes, row_bytes =
// dequant_row_bytes(type, cols)), each weight decoded in registers to exactly the value
// dequantize_row_reference gives (dequant_formats.cuh); x: f32 [n_tokens][ldx] (device,
// 16-byte aligned, ldx a multiple of 4); y: f32 [n_tokens][ldy] (device). f32 products and
// sums (FMA) in a fixed order: y[t][r] depends only on row r of W and row t of x (not on
// n_tokens or the other rows), but differs from the CPU's q8 integer dot products by
// rounding. cudaErrorInvalidValue for another type, cols not a multiple of the type's block,
// n_tokens outside 1..kMatvecMaxTokens, or a misaligned x.
cudaError_t launch_matvec_q(uint32_t type, const void *w, size_t row_bytes, uint32_t rows,
                            uint32_t cols, const float *x, size_t ldx, uint32_t n_tokens,
                            float *y, size_t ldy, cudaStream_t stream);

}  // namespace llmkv::cuda
