// RoPE, GGUF/Llama adjacent-pair convention. Layouts: qk f32 [n_rows][ld] with
// (n_heads + n_kv_heads) heads of head_dim at the start of each row; pos int32 [n_rows];
// inv_freq f32 [rope_dim / 2]. One CTA per row, one thread per (head, pair).
// Same operation order as the CPU with no FMA contraction; cosf / sinf are CUDA's accurate
// versions (<= 2 ulp vs glibc), so results agree with the CPU to a few ulp, not bitwise.
#include "rope.cuh"

namespace llmkv::cuda {

namespace {

__global__ void rope_kernel(float *__restrict__ qk, uint32_t ld, const int32_t *__restrict__ pos,
                            uint32_t n_heads_total, uint32_t head_dim, uint32_t half_rope,
                            float freq_scale, const float *__restrict__ inv_freq) {
    const uint32_t t = blockIdx.x;
    const float p = __fmul_rn(float(pos[t]), freq_scale);
    float *row = qk + size_t(t) * ld;  // f32 [ld]
    const uint32_t n_pairs = n_heads_total * half_rope;
    for (uint32_t k = threadIdx.x; k < n_pairs; k += blockDim.x) {
        const uint32_t h = k / half_rope, i = k % half_rope;
        const float angle = __fmul_rn(p, inv_freq[i]);
        float s, c;
        sincosf(angle, &s, &c);
        float *x = row + size_t(h) * head_dim + 2 * i;
        const float x0 = x[0], x1 = x[1];
        x[0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        x[1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

}  // namespace

cudaError_t launch_rope(float *qk, uint32_t ld, uint32_t n_rows, const int32_t *pos,
                        uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim, uint32_t rope_dim,
                        float freq_scale, const float *inv_freq, cudaStream_t stream) {
    if (n_rows == 0 || rope_dim < 2) return cudaSuccess;
    if (rope_dim > head_dim || rope_dim % 2 != 0) return cudaErrorInvalidValue;
    rope_kernel<<<n_rows, 256, 0, stream>>>(qk, ld, pos, n_heads + n_kv_heads, head_dim,
                                            rope_dim / 2, freq_scale, inv_freq);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
