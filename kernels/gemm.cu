// cuBLAS GEMM wrapper. Row-major Y = X W^T maps to the column-major product
// Y^T (rows x n_tokens, ld ldy) = op_T(W) (W stored column-major as cols x rows, ld cols)
// * X^T (cols x n_tokens, ld ldx), i.e. cublasGemmEx(OP_T, OP_N, m = rows, n = n_tokens,
// k = cols). Inputs fp16 (CUDA_R_16F), output f32 (CUDA_R_32F), CUBLAS_COMPUTE_32F.
// Results are deterministic for a given shape, but cuBLAS may pick a different algorithm
// (and summation order) for a different n_tokens: batch composition changes low bits.
#include <limits.h>

#include "gemm.cuh"

namespace llmkv::cuda {

cublasStatus_t gemm_f16_f32(cublasHandle_t handle, const uint16_t *w, int64_t rows, int64_t cols,
                            const uint16_t *x, int64_t ldx, int64_t n_tokens, float *y, int64_t ldy,
                            float beta) {
    if (n_tokens == 0 || rows == 0) return CUBLAS_STATUS_SUCCESS;
    if (rows > INT_MAX || cols > INT_MAX || n_tokens > INT_MAX || ldx > INT_MAX || ldy > INT_MAX) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const float alpha = 1.0f;
    return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(n_tokens), int(cols),
                        &alpha, w, CUDA_R_16F, int(cols), x, CUDA_R_16F, int(ldx), &beta, y,
                        CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

}  // namespace llmkv::cuda
