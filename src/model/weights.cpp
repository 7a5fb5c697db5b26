// The reference decoding of GGUF weight rows.
#include "model/weights.h"

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

float load_f16(const uint8_t *p) { return fp16_to_fp32(load_u16(p)); }

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
        default:
            break;
    }
    fail(LLMKV_ERR_UNSUPPORTED, "dequantize_row: type %s is not supported", tensor_type_name(type));
}


}  // namespace llmkv
