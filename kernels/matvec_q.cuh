// Decode-path matrix-vector products that read the weights in their packed GGUF form (every
// type with a device decoder): y = x * W^T for a few activation rows, with no fp16 copy of W.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace llmkv::cuda {

// Most activation rows one launch takes (the decode path: one token per session).
constexpr uint32_t kMatvecMaxTokens = 8;

// True for the GGML type ids launch_matvec_q reads: every type with a device decoder (F32,
// F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K).
bool matvec_q_type_supported(uint32_t type);
// True when launch_matvec_q reads rows of `cols` elements of this type: a supported type, cols
// a whole number of its blocks and a multiple of 8.
bool matvec_q_row_supported(uint32_t type, uint64_t cols);

// y[t][r] = sum over c < cols of W[r][c] * x[t][c], for t < n_tokens (1..kMatvecMaxTokens),
// r < rows. W: `rows` packed rows of `type` (device, row r at w + r * row_bytes, row_bytes =
// dequant_row_bytes(type, cols)), each weight decoded in registers to exactly the value
// dequantize_row_reference gives (dequant_formats.cuh); the arithmetic of one result is
// matvec_q_math.cuh's, whose host twin mv::row_dot_host gives the same bits; x: f32 [n_tokens][ldx]
// (device, 16-byte aligned, ldx a multiple of 4); y: f32 [n_tokens][ldy] (device). f32 products and
// sums (FMA) in a fixed order: y[t][r] depends only on row r of W and row t of x (not on
// n_tokens or the other rows), but differs from the CPU's q8 integer dot products by
// rounding. cudaErrorInvalidValue when !matvec_q_row_supported(type, cols), for n_tokens
// outside 1..kMatvecMaxTokens, or a misaligned x.
cudaError_t launch_matvec_q(uint32_t type, const void *w, size_t row_bytes, uint32_t rows,
                            uint32_t cols, const float *x, size_t ldx, uint32_t n_tokens, float *y,
                            size_t ldy, cudaStream_t stream);

}  // namespace llmkv::cuda
