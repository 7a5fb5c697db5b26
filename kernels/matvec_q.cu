// Matrix-vector products over packed GGUF weights for the decode path. One warp per output
// row, 4 warps (rows) per CTA. Lane k of the warp takes the 8-element groups g = k, k + 32,
// ... of the row (elements [8g, 8g + 8), always inside one quantization block since blocks
// are 32 or 256 elements): it decodes the 8 weights in registers with the decoders of the
// device dequantization (dequant_formats.cuh: the CPU reference's values), loads the 8
// matching activations of every token row (two float4 loads each) and accumulates one f32
// sum per token (FMA). The warp then sums its lanes with a fixed butterfly, so a result
// depends only on its weight row and its activation row. Consecutive lanes read consecutive
// groups: a warp reads 256 consecutive weights (one k-quant super-block, or 8 of the small
// blocks) per step, and the activation rows from L1/L2, shared by the CTA's 4 rows.
#include "dequant.cuh"
#include "dequant_formats.cuh"
#include "matvec_q.cuh"

namespace llmkv::cuda {

namespace {

using llmkv::TensorType;

constexpr uint32_t kWarps = 4;
constexpr uint32_t kThreads = 32 * kWarps;

// The 8 weights of group g (elements 8g .. 8g + 7) of a packed row.
template <TensorType T>
__device__ __forceinline__ void decode_group8(const uint8_t *row, uint32_t g, float (&w)[8]) {
    using F = dq::Format<T>;
    const uint32_t e0 = 8 * g;
    const uint8_t *blk = row + size_t(e0 / F::kElems) * F::kBytes;
    const uint32_t j0 = e0 % F::kElems;
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = F::decode(blk, j0 + uint32_t(i));
}

template <TensorType T>
__global__ void __launch_bounds__(kThreads)
    matvec_q_kernel(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t rows,
                    uint32_t cols, const float *__restrict__ x, size_t ldx, uint32_t n_tokens,
                    float *__restrict__ y, size_t ldy) {
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t r = blockIdx.x * kWarps + threadIdx.x / 32;
    if (r >= rows) return;  // a whole warp leaves together
    const uint8_t *row = w + size_t(r) * row_bytes;
    float acc[kMatvecMaxTokens];
#pragma unroll
    for (uint32_t t = 0; t < kMatvecMaxTokens; ++t) acc[t] = 0.0f;
    const uint32_t n_groups = cols / 8;
    for (uint32_t g = lane; g < n_groups; g += 32) {
        float wv[8];
        decode_group8<T>(row, g, wv);
#pragma unroll
        for (uint32_t t = 0; t < kMatvecMaxTokens; ++t) {
            if (t < n_tokens) {
                const float4 *xp = reinterpret_cast<const float4 *>(x + t * ldx + size_t(g) * 8);
                const float4 a = xp[0], b = xp[1];
                float s = acc[t];
                s = fmaf(wv[0], a.x, s);
                s = fmaf(wv[1], a.y, s);
                s = fmaf(wv[2], a.z, s);
                s = fmaf(wv[3], a.w, s);
                s = fmaf(wv[4], b.x, s);
                s = fmaf(wv[5], b.y, s);
                s = fmaf(wv[6], b.z, s);
                s = fmaf(wv[7], b.w, s);
                acc[t] = s;
            }
        }
    }
#pragma unroll
    for (uint32_t t = 0; t < kMatvecMaxTokens; ++t) {
        if (t < n_tokens) {  // uniform over the warp: every lane shuffles
            float s = acc[t];
            for (uint32_t o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) y[t * ldy + r] = s;
        }
    }
}

template <TensorType T>
cudaError_t launch(const void *w, size_t row_bytes, uint32_t rows, uint32_t cols, const float *x,
                   size_t ldx, uint32_t n_tokens, float *y, size_t ldy, cudaStream_t stream) {
    const uint32_t grid = (rows + kWarps - 1) / kWarps;
    matvec_q_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t *>(w), row_bytes,
                                                      rows, cols, x, ldx, n_tokens, y, ldy);
    return cudaGetLastError();
}

}  // namespace

bool matvec_q_type_supported(uint32_t type) {
    switch (type) {
        case uint32_t(TensorType::Q4_K):
        case uint32_t(TensorType::Q6_K):
        case uint32_t(TensorType::Q5_0):
        case uint32_t(TensorType::Q8_0):
            return true;
        default:
            return false;
    }
}

cudaError_t launch_matvec_q(uint32_t type, const void *w, size_t row_bytes, uint32_t rows,
                            uint32_t cols, const float *x, size_t ldx, uint32_t n_tokens,
                            float *y, size_t ldy, cudaStream_t stream) {
    if (!matvec_q_type_supported(type) || n_tokens == 0 || n_tokens > kMatvecMaxTokens ||
        dequant_row_bytes(type, cols) == 0 || row_bytes != dequant_row_bytes(type, cols) ||
        ldx % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
        return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    switch (type) {
        case uint32_t(TensorType::Q4_K):
            return launch<TensorType::Q4_K>(w, row_bytes, rows, cols, x, ldx, n_tokens, y, ldy,
                                            stream);
        case uint32_t(TensorType::Q6_K):
            return launch<TensorType::Q6_K>(w, row_bytes, rows, cols, x, ldx, n_tokens, y, ldy,
                                            stream);
        case uint32_t(TensorType::Q5_0):
            return launch<TensorType::Q5_0>(w, row_bytes, rows, cols, x, ldx, n_tokens, y, ldy,
                                            stream);
        default:
            return launch<TensorType::Q8_0>(w, row_bytes, rows, cols, x, ldx, n_tokens, y, ldy,
                                            stream);
    }
}

}  // namespace llmkv::cuda
