// GEMMs of the forward pass through cuBLAS: fp16 weights and activations, f32 output,
// f32 accumulation (CUBLAS_COMPUTE_32F; tensor cores on sm_80+).
#pragma once

#include <cublas_v2.h>
#include <stdint.h>

namespace llmkv::cuda {

// Y (n_tokens, rows) = X (n_tokens, cols) * W^T + beta * Y, all row-major:
// w: fp16 [rows][cols] (ld cols); x: fp16 [n_tokens][ldx]; y: f32 [n_tokens][ldy].
// beta = 1 adds into Y (the residual connections). The handle's stream is used.
cublasStatus_t gemm_f16_f32(cublasHandle_t handle, const uint16_t *w, int64_t rows, int64_t cols,
                            const uint16_t *x, int64_t ldx, int64_t n_tokens, float *y, int64_t ldy,
                            float beta);

}  // namespace llmkv::cuda
