// Sealing kernels. One CTA encodes one head of one block: B rows x D dims of fp16
// (row stride D) into the codec layout of src/kv/codec.h:
//   f16 / bf16: 16-bit [B][D];
//   fp8 e4m3 / int8: bytes [B][D], fp16 scale [B] (amax / qmax rounded up);
//   int4 K: nibbles [B][D/2], fp16 scale [D], fp16 min [D] (per channel over the block);
//   int4 V: nibbles [B][D/2], fp16 scale [B][D/G], fp16 min [B][D/G] (per token, G = 32
//   channels, 16 when D % 32 != 0).
// The arithmetic is the CPU encoder's, operation for operation (IEEE division, no FMA,
// std::min / std::max tie semantics, round-to-nearest-even conversions, the same
// butterfly order for the Hadamard rotation), so the bytes are identical to the CPU's for
// every codec. The head is staged as f32 [B][D] in shared memory (B * D <= 12288).
#include <math.h>

#include "device_math.cuh"
#include "kv_seal.cuh"
#include "launch.cuh"

namespace llmkv::cuda {

namespace {

constexpr uint32_t kThreads = 256;

__device__ __forceinline__ void store_fp16_bits(uint8_t *p, uint16_t h) {  // p: even address
    *reinterpret_cast<uint16_t *>(p) = h;
}

__device__ __forceinline__ uint8_t int4_quantize(float x, float min, float scale) {
    if (scale == 0.0f) return 0;
    const int q = __float2int_rn(__fdiv_rn(__fsub_rn(x, min), scale));
    return uint8_t(q < 0 ? 0 : (q > 15 ? 15 : q));
}

// All threads of the CTA call this. src: fp16 [B][D]; dst: one head in the codec;
// x: shared f32 [B * D].
__device__ void encode_head(uint32_t codec, bool rotate, bool is_v,
                            const uint16_t *__restrict__ src, uint32_t B, uint32_t D,
                            uint8_t *__restrict__ dst, float *x) {
    const uint32_t n = B * D;
    const uint32_t tid = threadIdx.x, nt = blockDim.x;
    if (codec == kF16) {
        uint16_t *out = reinterpret_cast<uint16_t *>(dst);
        for (uint32_t i = tid; i < n; i += nt) out[i] = src[i];
        return;
    }
    if (codec == kBF16) {
        uint16_t *out = reinterpret_cast<uint16_t *>(dst);
        for (uint32_t i = tid; i < n; i += nt)
            out[i] = f32_to_bf16_bits(fp16_bits_to_f32_exact(src[i]));
        return;
    }
    for (uint32_t i = tid; i < n; i += nt) x[i] = sanitize(fp16_bits_to_f32_exact(src[i]));
    if (rotate) {
        const uint32_t half = D / 2;
        for (uint32_t len = 1; len < D; len <<= 1) {
            __syncthreads();
            for (uint32_t k = tid; k < B * half; k += nt) {
                const uint32_t row = k / half, m = k % half;
                const uint32_t j = (m / len) * 2 * len + m % len;
                float *r = x + size_t(row) * D;
                const float a = r[j], b = r[j + len];
                r[j] = __fadd_rn(a, b);
                r[j + len] = __fsub_rn(a, b);
            }
        }
        __syncthreads();
        const float scale = float(1.0 / sqrt(double(D)));
        for (uint32_t i = tid; i < n; i += nt) x[i] = sanitize(__fmul_rn(x[i], scale));
    }
    __syncthreads();

    if (codec == kFP8 || codec == kINT8) {
        // One warp per token row: amax, scale, then the row's bytes.
        const float qmax = codec == kFP8 ? 448.0f : 127.0f;
        const uint32_t lane = tid % 32, warp = tid / 32, n_warps = nt / 32;
        uint8_t *scales = dst + size_t(B) * D;
        for (uint32_t t = warp; t < B; t += n_warps) {
            const float *r = x + size_t(t) * D;
            float amax = 0.0f;
            for (uint32_t d = lane; d < D; d += 32) amax = fmaxf(amax, fabsf(r[d]));
            for (uint32_t o = 16; o > 0; o /= 2)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const uint16_t sh = amax > 0.0f ? fp16_round_up(__fdiv_rn(amax, qmax)) : uint16_t(0);
            if (lane == 0) store_fp16_bits(scales + size_t(t) * 2, sh);
            const float s = fp16_bits_to_f32(sh);
            uint8_t *v = dst + size_t(t) * D;
            for (uint32_t d = lane; d < D; d += 32) {
                uint8_t b = 0;
                if (s != 0.0f) {
                    const float y = __fdiv_rn(r[d], s);
                    if (codec == kFP8) {
                        b = f32_to_fp8_e4m3(y);
                    } else {
                        int q = __float2int_rn(y);
                        q = q < -127 ? -127 : (q > 127 ? 127 : q);
                        b = uint8_t(int8_t(q));
                    }
                }
                v[d] = b;
            }
        }
        return;
    }

    // int4: each thread owns a channel (K) or a (token, group) (V): it computes the group's
    // range and parameters and overwrites its values in x with their nibbles; the nibbles
    // are packed into bytes after a barrier.
    uint8_t *scales = dst + size_t(B) * D / 2;
    if (!is_v) {
        uint8_t *mins = scales + size_t(2) * D;
        for (uint32_t d = tid; d < D; d += nt) {
            float lo = x[d], hi = x[d];
            for (uint32_t t = 1; t < B; ++t) {
                const float v = x[size_t(t) * D + d];
                lo = v < lo ? v : lo;  // std::min(lo, v)
                hi = hi < v ? v : hi;  // std::max(hi, v)
            }
            const uint16_t min_h = fp16_round_down(lo);
            const float min = fp16_bits_to_f32(min_h);
            const float range = __fsub_rn(hi, min);
            const uint16_t scale_h =
                range > 0.0f ? fp16_round_up(__fdiv_rn(range, 15.0f)) : uint16_t(0);
            const float scale = fp16_bits_to_f32(scale_h);
            store_fp16_bits(scales + size_t(d) * 2, scale_h);
            store_fp16_bits(mins + size_t(d) * 2, min_h);
            for (uint32_t t = 0; t < B; ++t) {
                float &v = x[size_t(t) * D + d];
                v = float(int4_quantize(v, min, scale));
            }
        }
    } else {
        const uint32_t G = int4_v_group(D), ng = D / G;
        uint8_t *mins = scales + size_t(2) * B * ng;
        for (uint32_t k = tid; k < B * ng; k += nt) {
            float *r = x + size_t(k) * G;  // token k / ng, group k % ng: G consecutive values
            float lo = r[0], hi = r[0];
            for (uint32_t i = 1; i < G; ++i) {
                lo = r[i] < lo ? r[i] : lo;
                hi = hi < r[i] ? r[i] : hi;
            }
            const uint16_t min_h = fp16_round_down(lo);
            const float min = fp16_bits_to_f32(min_h);
            const float range = __fsub_rn(hi, min);
            const uint16_t scale_h =
                range > 0.0f ? fp16_round_up(__fdiv_rn(range, 15.0f)) : uint16_t(0);
            const float scale = fp16_bits_to_f32(scale_h);
            store_fp16_bits(scales + size_t(k) * 2, scale_h);
            store_fp16_bits(mins + size_t(k) * 2, min_h);
            for (uint32_t i = 0; i < G; ++i) r[i] = float(int4_quantize(r[i], min, scale));
        }
    }
    __syncthreads();
    for (uint32_t i = tid; i < n / 2; i += nt) {
        dst[i] = uint8_t(uint32_t(x[2 * i]) | (uint32_t(x[2 * i + 1]) << 4));
    }
}

__global__ void __launch_bounds__(kThreads)
    seal_kernel(KvGeometry g, uint32_t layer, const uint16_t *__restrict__ window,
                const StepSpan *__restrict__ spans, const SealJob *__restrict__ jobs,
                uint8_t *__restrict__ pool) {
    LLMKV_DYNAMIC_SHARED(float, x);  // f32 [B][D]
    const SealJob job = jobs[size_t(blockIdx.x) * g.n_groups + g.layer_group(layer)];
    const StepSpan sp = spans[job.span];
    const uint32_t h = blockIdx.y;
    const bool is_v = blockIdx.z != 0;
    const uint16_t *src =
        window + sp.win_offset +
        ((size_t(is_v) * g.n_kv_heads + h) * sp.win_cap + job.win_row) * g.head_dim;
    uint8_t *dst = pool + size_t(job.block_id) * g.sealed_block_bytes() +
                   (is_v ? g.sealed_v_offset(layer, h) : g.sealed_k_offset(layer, h));
    encode_head(is_v ? g.dtype_v : g.dtype_k, is_v ? g.rotate_v : g.rotate_k, is_v, src,
                g.block_tokens, g.head_dim, dst, x);
}

__global__ void __launch_bounds__(kThreads)
    encode_heads_kernel(uint32_t codec, bool rotate, bool is_v, const uint16_t *__restrict__ src,
                        uint32_t B, uint32_t D, size_t head_bytes, uint8_t *__restrict__ dst) {
    LLMKV_DYNAMIC_SHARED(float, x);  // f32 [B][D]
    const size_t h = blockIdx.x;
    encode_head(codec, rotate, is_v, src + h * B * D, B, D, dst + h * head_bytes, x);
}

}  // namespace

cudaError_t launch_kv_seal(const KvGeometry &g, uint32_t layer, const uint16_t *window,
                           const StepSpan *spans, const SealJob *jobs, uint32_t n_jobs,
                           uint8_t *pool, cudaStream_t stream) {
    if (n_jobs == 0) return cudaSuccess;
    if (kv_layout_unsupported(g)) return cudaErrorInvalidValue;
    const size_t smem = size_t(g.block_tokens) * g.head_dim * sizeof(float);
    LLMKV_LAUNCH(seal_kernel, dim3(n_jobs, g.n_kv_heads, 2), kThreads, smem, stream)
    (g, layer, window, spans, jobs, pool);
    return cudaGetLastError();
}

cudaError_t launch_codec_encode_heads(uint32_t codec, bool rotate, bool is_v, const uint16_t *src,
                                      uint32_t n_heads, uint32_t B, uint32_t D, uint8_t *dst,
                                      cudaStream_t stream) {
    if (n_heads == 0) return cudaSuccess;
    KvGeometry g;
    g.n_layers = 1;
    g.n_kv_heads = 1;
    g.block_tokens = B;
    g.head_dim = D;
    g.dtype_k = g.dtype_v = llmkv_kv_dtype(codec);
    g.rotate_k = g.rotate_v = rotate;
    if (kv_layout_unsupported(g)) return cudaErrorInvalidValue;
    const size_t smem = size_t(B) * D * sizeof(float);
    LLMKV_LAUNCH(encode_heads_kernel, n_heads, kThreads, smem, stream)
    (codec, rotate, is_v, src, B, D, kv_head_bytes(codec, is_v, B, D), dst);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
