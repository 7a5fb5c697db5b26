// KV codecs: how one head of one sealed block (block_tokens x head_dim values) is stored.
// The tail block is always fp16; sealing encodes it into the session's K or V codec.
//
// Layouts of one head ([B tokens][D dims] in the logical view):
//   LLMKV_KV_F16:  uint16 fp16 [B][D]
//   LLMKV_KV_BF16: uint16 bf16 [B][D]
// (fp8 / int8 / int4 layouts arrive with the quantized-KV work.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "llmkv.h"

namespace llmkv {

// True when the codec is implemented for this head_dim.
bool codec_supported(llmkv_kv_dtype dtype, uint32_t head_dim);
const char *codec_name(llmkv_kv_dtype dtype);
// Bytes of one head of one sealed block, scales included.
size_t codec_head_bytes(llmkv_kv_dtype dtype, uint32_t block_tokens, uint32_t head_dim);
// Encodes n_tokens fp16 rows (src: [n_tokens][head_dim], row stride head_dim) into dst,
// which holds one head in the codec's layout.
void codec_encode_head(llmkv_kv_dtype dtype, const uint16_t *src, uint32_t n_tokens,
                       uint32_t head_dim, uint8_t *dst);
// Decodes one head back to f32 ([n_tokens][head_dim]); for tests and references.
void codec_decode_head(llmkv_kv_dtype dtype, const uint8_t *src, uint32_t n_tokens,
                       uint32_t head_dim, float *dst);

}  // namespace llmkv
