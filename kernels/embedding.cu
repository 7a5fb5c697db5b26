// Token embedding lookup. Layouts: table fp16 [n_vocab][n_embd] row-major (the token
// embedding dequantized to fp16 by libllmkv), tokens int32 [T], x f32 [T][n_embd].
// One CTA per token row; threads stride over the row. Exact (fp16 -> f32 is exact).
#include "device_math.cuh"
#include "embedding.cuh"
#include "launch.cuh"

namespace llmkv::cuda {

namespace {

__global__ void embedding_kernel(const uint16_t *__restrict__ table, uint32_t n_embd,
                                 const int32_t *__restrict__ tokens, float *__restrict__ x) {
    const size_t t = blockIdx.x;
    const uint16_t *src = table + size_t(tokens[t]) * n_embd;  // fp16 [n_embd]
    float *dst = x + t * n_embd;                               // f32 [n_embd]
    for (uint32_t e = threadIdx.x; e < n_embd; e += blockDim.x) dst[e] = fp16_bits_to_f32(src[e]);
}

}  // namespace

cudaError_t launch_embedding(const uint16_t *table, uint32_t n_embd, const int32_t *tokens,
                             uint32_t n_tokens, float *x, cudaStream_t stream) {
    if (n_tokens == 0) return cudaSuccess;
    LLMKV_LAUNCH(embedding_kernel, n_tokens, 256, 0, stream)(table, n_embd, tokens, x);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
