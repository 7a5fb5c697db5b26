// Matrix-vector products over packed GGUF weights for the decode path. One warp per output
// row, 4 warps (rows) per CTA. The arithmetic of one output is matvec_q_math.cuh's (shared
// with the host twin): lane k of the warp takes the 8-element groups g = k, k + 32, ... of the
// row, decodes the 8 weights in registers with the decoders of the device dequantization
// (dequant_formats.cuh: the CPU reference's values), loads the 8 matching activations of every
// token row (two float4 loads each) and accumulates one f32 sum per token (FMA, in order). The
// warp then sums its lanes with a fixed butterfly, so a result depends only on its weight row
// and its activation row. Consecutive lanes read consecutive groups: a warp reads 256
// consecutive weights (one k-quant super-block, or 8 of the small blocks) per step, and the
// activation rows from L1/L2, shared by the CTA's 4 rows.
#include "dequant.cuh"
#include "launch.cuh"
#include "matvec_q.cuh"
#include "matvec_q_math.cuh"

namespace llmkv::cuda {

namespace {

using llmkv::TensorType;

constexpr uint32_t kWarps = 4;
constexpr uint32_t kThreads = 32 * kWarps;

template <TensorType T>
__global__ void __launch_bounds__(kThreads)
    matvec_q_kernel(const uint8_t *__restrict__ w, size_t row_bytes, uint32_t rows, uint32_t cols,
                    const float *__restrict__ x, size_t ldx, uint32_t n_tokens,
                    float *__restrict__ y, size_t ldy) {
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t r = blockIdx.x * kWarps + threadIdx.x / 32;
    if (r >= rows) return;  // a whole warp leaves together
    const uint8_t *row = w + size_t(r) * row_bytes;
    float acc[kMatvecMaxTokens];
#pragma unroll
    for (uint32_t t = 0; t < kMatvecMaxTokens; ++t) acc[t] = 0.0f;
    const uint32_t n_groups = cols / mv::kGroupElems;
    for (uint32_t g = lane; g < n_groups; g += mv::kLanes) {
        float wv[mv::kGroupElems];
        mv::decode_group8<T>(row, g, wv);
#pragma unroll
        for (uint32_t t = 0; t < kMatvecMaxTokens; ++t) {
            if (t < n_tokens) {
                const float4 *xp =
                    reinterpret_cast<const float4 *>(x + t * ldx + size_t(g) * mv::kGroupElems);
                const float4 a = xp[0], b = xp[1];
                const float xv[mv::kGroupElems] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                acc[t] = mv::fma8(wv, xv, acc[t]);
            }
        }
    }
#pragma unroll
    for (uint32_t t = 0; t < kMatvecMaxTokens; ++t) {
        if (t < n_tokens) {  // uniform over the warp: every lane shuffles
            float s = acc[t];
            for (uint32_t o = mv::kLanes / 2; o > 0; o /= 2)
                s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
            if (lane == 0) y[t * ldy + r] = s;
        }
    }
}

template <TensorType T>
cudaError_t launch(const void *w, size_t row_bytes, uint32_t rows, uint32_t cols, const float *x,
                   size_t ldx, uint32_t n_tokens, float *y, size_t ldy, cudaStream_t stream) {
    const uint32_t grid = (rows + kWarps - 1) / kWarps;
    LLMKV_LAUNCH(matvec_q_kernel<T>, grid, kThreads, 0, stream)
    (static_cast<const uint8_t *>(w), row_bytes, rows, cols, x, ldx, n_tokens, y, ldy);
    return cudaGetLastError();
}

}  // namespace

bool matvec_q_type_supported(uint32_t type) {
    return dequant_type_supported(type);
}

bool matvec_q_row_supported(uint32_t type, uint64_t cols) {
    return dequant_type_supported(type) && mv::row_supported(TensorType(type), cols);
}

cudaError_t launch_matvec_q(uint32_t type, const void *w, size_t row_bytes, uint32_t rows,
                            uint32_t cols, const float *x, size_t ldx, uint32_t n_tokens, float *y,
                            size_t ldy, cudaStream_t stream) {
    if (!matvec_q_row_supported(type, cols) || n_tokens == 0 || n_tokens > kMatvecMaxTokens ||
        row_bytes != dequant_row_bytes(type, cols) || ldx % 4 != 0 ||
        reinterpret_cast<uintptr_t>(x) % 16 != 0)
        return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    switch (type) {
#define LLMKV_MV_CASE(name)          \
    case uint32_t(TensorType::name): \
        return launch<TensorType::name>(w, row_bytes, rows, cols, x, ldx, n_tokens, y, ldy, stream);
        LLMKV_DQ_TYPES(LLMKV_MV_CASE)
#undef LLMKV_MV_CASE
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace llmkv::cuda
