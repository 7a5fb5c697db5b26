// The reference decoding of GGUF weight rows.
#include "tensor/weights.h"

#include <cstring>

#include "common/error.h"
#include "common/half.h"

// Hides a float from the optimizer so that `a * b + c` is not contracted into one fma.
#if defined(__x86_64__) || defined(__i386__)
#define LLMKV_OPAQUE_FLOAT(v) asm("" : "+x"(v))
#elif defined(__aarch64__)
#define LLMKV_OPAQUE_FLOAT(v) asm("" : "+w"(v))
#else
#define LLMKV_OPAQUE_FLOAT(v) asm("" : "+m"(v))
#endif

namespace llmkv {

namespace {

constexpr int64_t kBlock = 32;

uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

float load_f16(const uint8_t *p) {
    return fp16_to_fp32(load_u16(p));
}

// (scale * q) - min with two roundings, never fused: the k-quant definition in f32.
inline float scaled_minus(float scale, int q, float min) {
    float v = scale * float(q);
    LLMKV_OPAQUE_FLOAT(v);
    return v - min;
}

// One k-quant super-block of 256 elements (layouts and formulas in tensor/tensor_type.h).
void dequantize_super_block(TensorType type, const uint8_t *blk, float *o) {
    switch (type) {
        case TensorType::Q2_K: {
            const uint8_t *scales = blk, *qs = blk + 16;
            const float d = load_f16(blk + 80), dmin = load_f16(blk + 82);
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, j = (e / 32) % 4, l = e % 32;
                const int sc = scales[e / 16];
                const int q = (qs[32 * h + l] >> (2 * j)) & 3;
                o[e] = scaled_minus(d * float(sc & 15), q, dmin * float(sc >> 4));
            }
            return;
        }
        case TensorType::Q3_K: {
            const uint8_t *hmask = blk, *qs = blk + 32, *scales = blk + 96;
            const float d = load_f16(blk + 108);
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, j = (e / 32) % 4, l = e % 32, s = e / 16;
                const int sc = ((scales[s % 8] >> (4 * (s / 8))) & 15) |
                               (((scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
                const int q =
                    ((qs[32 * h + l] >> (2 * j)) & 3) | (((hmask[l] >> (4 * h + j)) & 1) << 2);
                o[e] = (d * float(sc - 32)) * float(q - 4);
            }
            return;
        }
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool q5 = type == TensorType::Q5_K;
            const float d = load_f16(blk), dmin = load_f16(blk + 2);
            const uint8_t *scales = blk + 4, *qh = blk + 16, *qs = blk + (q5 ? 48 : 16);
            for (int e = 0; e < 256; ++e) {
                const int s = e / 32, l = e % 32;
                int sc, m;
                k4_scale_min(scales, s, &sc, &m);
                int q = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
                if (q5) q |= ((qh[l] >> s) & 1) << 4;
                o[e] = scaled_minus(d * float(sc), q, dmin * float(m));
            }
            return;
        }
        case TensorType::Q6_K: {
            const uint8_t *ql = blk, *qh = blk + 128;
            const int8_t *scales = reinterpret_cast<const int8_t *>(blk + 192);
            const float d = load_f16(blk + 208);
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, j = (e / 32) % 4, l = e % 32;
                const int q = ((ql[64 * h + 32 * (j & 1) + l] >> (4 * (j / 2))) & 15) |
                              (((qh[32 * h + l] >> (2 * j)) & 3) << 4);
                o[e] = (d * float(scales[e / 16])) * float(q - 32);
            }
            return;
        }
        case TensorType::Q8_K: {
            float d;
            std::memcpy(&d, blk, 4);
            const int8_t *qs = reinterpret_cast<const int8_t *>(blk + 4);
            for (int e = 0; e < 256; ++e) o[e] = float(qs[e]) * d;
            return;
        }
        default:
            return;
    }
}

}  // namespace

void dequantize_row_reference(TensorType type, const void *src, float *dst, int64_t n) {
    const uint8_t *p = static_cast<const uint8_t *>(src);
    switch (type) {
        case TensorType::F32:
            std::memcpy(dst, p, size_t(n) * 4);
            return;
        case TensorType::F16:
            for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(p + i * 2));
            return;
        case TensorType::BF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(p + i * 2));
            return;
        case TensorType::Q8_0:
            for (int64_t b = 0; b < n / kBlock; ++b) {
                const uint8_t *blk = p + b * 34;
                const float d = load_f16(blk);
                const int8_t *q = reinterpret_cast<const int8_t *>(blk + 2);
                for (int i = 0; i < 32; ++i) dst[b * kBlock + i] = float(q[i]) * d;
            }
            return;
        case TensorType::Q4_0:
            for (int64_t b = 0; b < n / kBlock; ++b) {
                const uint8_t *blk = p + b * 18;
                const float d = load_f16(blk);
                float *o = dst + b * kBlock;
                for (int i = 0; i < 16; ++i) {
                    o[i] = float(int(blk[2 + i] & 15) - 8) * d;
                    o[i + 16] = float(int(blk[2 + i] >> 4) - 8) * d;
                }
            }
            return;
        case TensorType::Q4_1:
            for (int64_t b = 0; b < n / kBlock; ++b) {
                const uint8_t *blk = p + b * 20;
                const float d = load_f16(blk);
                const float m = load_f16(blk + 2);
                float *o = dst + b * kBlock;
                for (int i = 0; i < 16; ++i) {
                    // Two roundings (product, then sum), as GGUF defines it; never fused.
                    float lo = float(blk[4 + i] & 15) * d;
                    float hi = float(blk[4 + i] >> 4) * d;
                    LLMKV_OPAQUE_FLOAT(lo);
                    LLMKV_OPAQUE_FLOAT(hi);
                    o[i] = lo + m;
                    o[i + 16] = hi + m;
                }
            }
            return;
        case TensorType::Q5_0:
        case TensorType::Q5_1: {
            const bool q51 = type == TensorType::Q5_1;
            const size_t bb = q51 ? 24 : 22;
            for (int64_t b = 0; b < n / kBlock; ++b) {
                const uint8_t *blk = p + size_t(b) * bb;
                const float d = load_f16(blk);
                const float m = q51 ? load_f16(blk + 2) : 0.0f;
                uint32_t qh;
                std::memcpy(&qh, blk + (q51 ? 4 : 2), 4);
                const uint8_t *qs = blk + (q51 ? 8 : 6);
                float *o = dst + b * kBlock;
                for (int i = 0; i < 32; ++i) {
                    const int nib = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
                    const int q = nib | int((qh >> i) & 1) << 4;
                    if (q51) {
                        float v = float(q) * d;
                        LLMKV_OPAQUE_FLOAT(v);
                        o[i] = v + m;
                    } else {
                        o[i] = float(q - 16) * d;
                    }
                }
            }
            return;
        }
        case TensorType::IQ4_NL:
            for (int64_t b = 0; b < n / kBlock; ++b) {
                const uint8_t *blk = p + b * 18;
                const float d = load_f16(blk);
                float *o = dst + b * kBlock;
                for (int i = 0; i < 16; ++i) {
                    o[i] = float(kIq4nlValues[blk[2 + i] & 15]) * d;
                    o[i + 16] = float(kIq4nlValues[blk[2 + i] >> 4]) * d;
                }
            }
            return;
        case TensorType::MXFP4:
            for (int64_t b = 0; b < n / kBlock; ++b) {
                const uint8_t *blk = p + b * 17;
                const uint32_t bits = mxfp4_scale_bits(blk[0]);
                float d;
                std::memcpy(&d, &bits, 4);
                float *o = dst + b * kBlock;
                for (int i = 0; i < 16; ++i) {
                    o[i] = float(kMxfp4Values[blk[1 + i] & 15]) * d;
                    o[i + 16] = float(kMxfp4Values[blk[1 + i] >> 4]) * d;
                }
            }
            return;
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::Q8_K:
            for (int64_t b = 0; b < n / kSuperBlock; ++b) {
                dequantize_super_block(type, p + size_t(b) * tensor_type_block_bytes(type),
                                       dst + b * kSuperBlock);
            }
            return;
        default:
            break;
    }
    fail(LLMKV_ERR_UNSUPPORTED, "dequantize_row: type %s is not supported", tensor_type_name(type));
}

}  // namespace llmkv
