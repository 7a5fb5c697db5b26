// RoPE. Layouts: x f32 [n_rows][ld] with n_heads heads of head_dim at the start of each
// row; pos int32 [n_rows]; inv_freq f32 [rope_dim / 2]. One CTA per row, one thread per
// (head, pair). Same operation order as the CPU with no FMA contraction; cosf / sinf are
// CUDA's accurate versions (<= 2 ulp vs glibc), so results agree with the CPU to a few ulp,
// not bitwise.
#include "launch.cuh"
#include "rope.cuh"

namespace llmkv::cuda {

namespace {

__global__ void rope_kernel(float *__restrict__ x, uint32_t ld, const int32_t *__restrict__ pos,
                            uint32_t n_heads, uint32_t head_dim, uint32_t half_rope,
                            uint32_t second_stride, uint32_t first_stride, float freq_scale,
                            const float *__restrict__ inv_freq) {
    const uint32_t t = blockIdx.x;
    const float p = __fmul_rn(float(pos[t]), freq_scale);
    float *row = x + size_t(t) * ld;  // f32 [ld]
    const uint32_t n_pairs = n_heads * half_rope;
    for (uint32_t k = threadIdx.x; k < n_pairs; k += blockDim.x) {
        const uint32_t h = k / half_rope, i = k % half_rope;
        const float angle = __fmul_rn(p, inv_freq[i]);
        float s, c;
        sincosf(angle, &s, &c);
        // adjacent: v[2i], v[2i+1] (first_stride 2, second 1); halves: v[i], v[i + half].
        float *v0 = row + size_t(h) * head_dim + size_t(i) * first_stride;
        float *v1 = v0 + second_stride;
        const float x0 = *v0, x1 = *v1;
        *v0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        *v1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

}  // namespace

cudaError_t launch_rope(float *x, uint32_t ld, uint32_t n_rows, const int32_t *pos,
                        uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim, bool halves,
                        float freq_scale, const float *inv_freq, cudaStream_t stream) {
    if (n_rows == 0 || n_heads == 0 || rope_dim < 2) return cudaSuccess;
    if (rope_dim > head_dim || rope_dim % 2 != 0 || size_t(n_heads) * head_dim > ld)
        return cudaErrorInvalidValue;
    const uint32_t half = rope_dim / 2;
    LLMKV_LAUNCH(rope_kernel, n_rows, 256, 0, stream)
    (x, ld, pos, n_heads, head_dim, half, halves ? half : 1u, halves ? 1u : 2u, freq_scale,
     inv_freq);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
