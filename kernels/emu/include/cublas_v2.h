// llmkv's CUDA emulator: the cuBLAS calls the module makes (a handle on a stream and
// cublasGemmEx, column-major, fp16 or f32 in, f32 or fp16 out, f32 accumulation), computed by a
// reference loop in libllmkv-cudaemu.so in stream order. cuBLAS's own algorithms (their
// summation order, tensor cores) are not emulated.
#pragma once

#include "cuda_runtime_api.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef cudaDataType cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_16F = 74 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;
typedef struct cublasContext *cublasHandle_t;

#ifdef __cplusplus
extern "C" {
#endif
CUDAEMU_API cublasStatus_t cublasCreate(cublasHandle_t *handle);
CUDAEMU_API cublasStatus_t cublasDestroy(cublasHandle_t handle);
CUDAEMU_API cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
CUDAEMU_API cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes);
CUDAEMU_API cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                        cublasOperation_t transb, int m, int n, int k,
                                        const void *alpha, const void *A, cudaDataType Atype,
                                        int lda, const void *B, cudaDataType Btype, int ldb,
                                        const void *beta, void *C, cudaDataType Ctype, int ldc,
                                        cublasComputeType_t compute, cublasGemmAlgo_t algo);
CUDAEMU_API const char *cublasGetStatusString(cublasStatus_t status);
CUDAEMU_API const char *cublasGetStatusName(cublasStatus_t status);
#ifdef __cplusplus
}
#endif
