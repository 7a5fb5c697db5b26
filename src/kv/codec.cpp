// KV codecs: encode (seal) and reference decode of sealed block heads.
#include "kv/codec.h"

#include <cstring>

#include "common/error.h"
#include "common/half.h"

namespace llmkv {

bool codec_supported(llmkv_kv_dtype dtype, uint32_t head_dim) {
    switch (dtype) {
        case LLMKV_KV_F16:
        case LLMKV_KV_BF16: return head_dim > 0;
        default: return false;
    }
}

const char *codec_name(llmkv_kv_dtype dtype) {
    switch (dtype) {
        case LLMKV_KV_F16: return "f16";
        case LLMKV_KV_BF16: return "bf16";
        case LLMKV_KV_FP8_E4M3: return "fp8_e4m3";
        case LLMKV_KV_INT8: return "int8";
        case LLMKV_KV_INT4: return "int4";
    }
    return "unknown";
}

size_t codec_head_bytes(llmkv_kv_dtype dtype, uint32_t block_tokens, uint32_t head_dim) {
    switch (dtype) {
        case LLMKV_KV_F16:
        case LLMKV_KV_BF16: return size_t(block_tokens) * head_dim * 2;
        default: fail(LLMKV_ERR_UNSUPPORTED, "KV dtype %s is not supported", codec_name(dtype));
    }
}

void codec_encode_head(llmkv_kv_dtype dtype, const uint16_t *src, uint32_t n_tokens,
                       uint32_t head_dim, uint8_t *dst) {
    size_t n = size_t(n_tokens) * head_dim;
    if (dtype == LLMKV_KV_F16) {
        std::memcpy(dst, src, n * 2);
        return;
    }
    if (dtype == LLMKV_KV_BF16) {
        uint16_t *out = reinterpret_cast<uint16_t *>(dst);
        for (size_t i = 0; i < n; ++i) out[i] = fp32_to_bf16(fp16_to_fp32(src[i]));
        return;
    }
    fail(LLMKV_ERR_UNSUPPORTED, "KV dtype %s is not supported", codec_name(dtype));
}

void codec_decode_head(llmkv_kv_dtype dtype, const uint8_t *src, uint32_t n_tokens,
                       uint32_t head_dim, float *dst) {
    size_t n = size_t(n_tokens) * head_dim;
    const uint16_t *in = reinterpret_cast<const uint16_t *>(src);
    if (dtype == LLMKV_KV_F16) {
        for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(in[i]);
        return;
    }
    if (dtype == LLMKV_KV_BF16) {
        for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(in[i]);
        return;
    }
    fail(LLMKV_ERR_UNSUPPORTED, "KV dtype %s is not supported", codec_name(dtype));
}

}  // namespace llmkv
