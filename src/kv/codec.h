// KV codecs: how one head of one sealed block (block_tokens x head_dim values) is stored,
// with an optional orthonormal Hadamard rotation along head_dim (kv/hadamard.h).
// The tail block is always fp16; sealing encodes it into the session's K or V codec.
//
// Layouts of one head ([B tokens][D dims] in the logical view; offsets in bytes from the
// start of the head; every fp16 scale / min is IEEE binary16 stored little-endian):
//
//   LLMKV_KV_F16:  uint16 fp16 [B][D]                              bytes 2*B*D
//   LLMKV_KV_BF16: uint16 bf16 [B][D]                              bytes 2*B*D
//
//   LLMKV_KV_FP8_E4M3 (K and V alike), per (token, head) dynamic scale:
//     [0, B*D)        uint8 e4m3fn [B][D]   sign | 4-bit exponent (bias 7) | 3-bit mantissa,
//                                          no infinities; 0x7F/0xFF (NaN) are never written
//     [B*D, +2*B)     fp16 scale [B]        s_t = amax_t / 448 rounded UP to fp16
//                                          (so |x / s_t| <= 448 never saturates)
//     value = s_t * e4m3(byte)                                     bytes B*D + 2*B
//
//   LLMKV_KV_INT8 (K and V alike), symmetric, per (token, head) scale:
//     [0, B*D)        int8 [B][D]           in [-127, 127]
//     [B*D, +2*B)     fp16 scale [B]        s_t = amax_t / 127 rounded UP to fp16
//     value = s_t * int8                                           bytes B*D + 2*B
//
//   LLMKV_KV_INT4, role K (KIVI: per CHANNEL, the block's B tokens are the group):
//     [0, B*D/2)      uint8 [B][D/2]        byte i of row t: channel 2i in bits 0-3,
//                                          channel 2i+1 in bits 4-7 (unsigned nibbles)
//     [B*D/2, +2*D)   fp16 scale [D]        s_d = (max_d - min_d) / 15, rounded up
//     [.. , +2*D)     fp16 min [D]          z_d = min_d rounded down
//     value = z_d + s_d * nibble                                   bytes B*D/2 + 4*D
//
//   LLMKV_KV_INT4, role V (per TOKEN, groups of G = 32 channels along head_dim, G = 16
//   when D % 32 != 0):
//     [0, B*D/2)      uint8 [B][D/2]        nibbles packed as for K
//     [B*D/2, +2*B*D/G)  fp16 scale [B][D/G]  s_tg = (max_tg - min_tg) / 15, rounded up
//     [.. , +2*B*D/G)    fp16 min [B][D/G]    z_tg = min_tg rounded down
//     value = z_tg + s_tg * nibble                                 bytes B*D/2 + 4*B*D/G
//
//   LLMKV_KV_INT4_COMPACT: the int4 nibbles, with the scales and mins as small indices into
//   steps the head stores once (three fp16 after the nibbles: z0, zstep, sstep); a scale or
//   min is then z0 + k * zstep or j * sstep, computed in f32 (int4c_k_params / _v_params).
//   Role K (per CHANNEL over the block's B tokens, 6-bit k and j):
//     [0, B*D/2)      nibbles as for int4
//     [.., +6)        fp16 z0 (smallest channel min, rounded down), zstep, sstep (rounded up)
//     [.., +D)        uint8 [D]: bits 0-3 of channel d's k (low nibble), bits 0-3 of its j (high)
//     [.., +D/2)      uint8 [D/2]: channel d's 4 high bits in nibble d % 2 of byte d / 2 (low
//                                          nibble for even d): k bits 4-5 in bits 0-1, j bits
//                                          4-5 in bits 2-3
//     value = (z0 + k_d * zstep) + (j_d * sstep) * nibble            bytes B*D/2 + 6 + 3*D/2
//   Role V (per TOKEN, groups of G = 64 channels, 32 / 16 when D % 64 / D % 32 != 0; 4-bit k, j):
//     [0, B*D/2)      nibbles as for int4
//     [.., +6)        fp16 z0, zstep, sstep over the head's (token, group) mins and scales
//     [.., +B*D/G)    uint8 [B][D/G]: k in bits 0-3, j in bits 4-7
//     value = (z0 + k_tg * zstep) + (j_tg * sstep) * nibble          bytes B*D/2 + 6 + B*D/G
//   Every min is <= its group's smallest value and z + 15 s covers its largest; the encoder
//   then picks, per group, the min index one step up and the scale index one step down when
//   that lowers the group's squared error (a clipped extreme can cost less than a coarser step).
//
// Nibbles are packed along head_dim, so int4 needs D % 16 == 0 but any B. Every part
// starts at an even offset when B*D is even (always for int4 and for the AVX2 paths, which
// need D % 8 == 0); all scale / min reads are unaligned-safe, so odd B*D works too.
//
// Bytes per token for SmolLM2-135M (30 layers, 3 KV heads, D 64, B 16), K + V:
//   f16/f16 23040 (1x); fp8/fp8 and int8/int8 11880 (0.516x); int8/int4 9540 (0.414x);
//   int4/int4 7920 (0.344x: int4 K carries 4 bytes of scale + min per channel per 16 tokens,
//   int4 V 4 bytes per 32 values); int4c/int4c 6457.5 (0.280x).
// A zero range (all-zero or constant row / channel / group) stores scale 0 and decodes to
// the min exactly (0 for zeros): no 0/0. Inputs are sanitized before quantizing: NaN -> 0,
// |x| > 65504 (inf, or a rotated outlier) -> +-65504, so no NaN / inf is ever stored.
//
// Rotation (CodecSpec::rotate; fp8/int8/int4 with D a power of two): the codec stores
// H x per token row, H the orthonormal Walsh-Hadamard matrix (H = H^T = H^-1). Attention
// rotates q once before the sealed K rows (dot products are unchanged since H is orthogonal)
// and applies H to the sum of the sealed V rows once at the end. codec_decode_head returns
// the UNrotated values (it applies H again), so references need not know about rotation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/half.h"
#include "kv/kv_layout.h"
#include "llmkv.h"

namespace llmkv {

// Which tensor a head holds: the int4 layouts of K and V differ.
enum class KvRole : uint8_t { K = 0, V = 1 };

// How sealed K or V heads are stored: the codec plus the Hadamard rotation flag.
struct CodecSpec {
    llmkv_kv_dtype dtype = LLMKV_KV_F16;
    bool rotate = false;
};

// The K and V specs of a KvGeometry. Reads geometry.rotate_k / rotate_v when the struct
// has them and assumes no rotation otherwise, so callers compile before and after those
// fields are added (a template: kv_cache.h includes this header).
template <class Geometry>
CodecSpec codec_spec_k(const Geometry &g) {
    if constexpr (requires { bool(g.rotate_k); }) {
        return CodecSpec{g.dtype_k, bool(g.rotate_k)};
    } else {
        return CodecSpec{g.dtype_k, false};
    }
}
template <class Geometry>
CodecSpec codec_spec_v(const Geometry &g) {
    if constexpr (requires { bool(g.rotate_v); }) {
        return CodecSpec{g.dtype_v, bool(g.rotate_v)};
    } else {
        return CodecSpec{g.dtype_v, false};
    }
}

// True when the codec (and rotation, if asked) is implemented for this role and shape:
//   f16 / bf16: any D > 0, no rotation;  fp8 / int8: any D > 0;  int4 / int4c: D % 16 == 0;
//   rotate: fp8 / int8 / int4 / int4c only, D a power of two. block_tokens must be > 0.
// Unknown dtype values are false.
bool codec_supported(CodecSpec spec, KvRole role, uint32_t block_tokens, uint32_t head_dim);
const char *codec_name(llmkv_kv_dtype dtype);
// Bytes of one head of one sealed block, scales included.
size_t codec_head_bytes(llmkv_kv_dtype dtype, KvRole role, uint32_t block_tokens,
                        uint32_t head_dim);
// Encodes n_tokens fp16 rows (src: [n_tokens][head_dim], row stride head_dim) into dst,
// which holds one head of n_tokens tokens (= block_tokens) in the codec's layout.
void codec_encode_head(CodecSpec spec, KvRole role, const uint16_t *src, uint32_t n_tokens,
                       uint32_t head_dim, uint8_t *dst);
// Decodes one head back to f32 ([n_tokens][head_dim]), inverse rotation applied; for
// tests and references (attention reads the codec directly).
void codec_decode_head(CodecSpec spec, KvRole role, const uint8_t *src, uint32_t n_tokens,
                       uint32_t head_dim, float *dst);

// Role-less forms of the calls above (rotate = false), kept for callers that predate
// roles. int4 needs the role, so codec_supported(INT4, D) is false here, encode / decode
// of INT4 fail, and codec_head_bytes(INT4, ...) returns the larger of the K and V sizes
// (a slot that fits either).
bool codec_supported(llmkv_kv_dtype dtype, uint32_t head_dim);
size_t codec_head_bytes(llmkv_kv_dtype dtype, uint32_t block_tokens, uint32_t head_dim);
void codec_encode_head(llmkv_kv_dtype dtype, const uint16_t *src, uint32_t n_tokens,
                       uint32_t head_dim, uint8_t *dst);
void codec_decode_head(llmkv_kv_dtype dtype, const uint8_t *src, uint32_t n_tokens,
                       uint32_t head_dim, float *dst);

// ---- Layout helpers shared by the codecs and the attention kernels -------------------

// Channels per int4 V group along head_dim: int4_v_group() in kv/kv_layout.h.

// Byte offsets of the scale and min arrays inside one head (see the layouts above).
inline size_t codec_scales_offset(llmkv_kv_dtype dtype, uint32_t block_tokens, uint32_t head_dim) {
    return dtype == LLMKV_KV_INT4 ? size_t(block_tokens) * head_dim / 2
                                  : size_t(block_tokens) * head_dim;
}
inline size_t int4_k_mins_offset(uint32_t block_tokens, uint32_t head_dim) {
    return size_t(block_tokens) * head_dim / 2 + size_t(2) * head_dim;
}
inline size_t int4_v_mins_offset(uint32_t block_tokens, uint32_t head_dim) {
    return size_t(block_tokens) * head_dim / 2 +
           size_t(2) * block_tokens * (head_dim / int4_v_group(head_dim));
}

// Scales and mins of an int4 or compact int4 head (dtype LLMKV_KV_INT4 or _INT4_COMPACT) as
// f32, what the attention kernels multiply with: K per channel (s, z: [D]); V per token and
// group (s, z: [n][D / int4_group(dtype, D)]).
uint32_t int4_group(llmkv_kv_dtype dtype, uint32_t head_dim);
void int4_k_params(llmkv_kv_dtype dtype, const uint8_t *head, uint32_t n, uint32_t head_dim,
                   float *s, float *z);
void int4_v_params(llmkv_kv_dtype dtype, const uint8_t *head, uint32_t n, uint32_t head_dim,
                   float *s, float *z);
inline bool is_int4(llmkv_kv_dtype dtype) {
    return dtype == LLMKV_KV_INT4 || dtype == LLMKV_KV_INT4_COMPACT;
}

// fp16 at any byte address.
inline float load_fp16(const uint8_t *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}

// e4m3fn -> f32, exact. Shifting the 7 magnitude bits into an fp16 gives value * 2^-8 for
// normals and subnormals alike (the AVX2 kernels use the same trick with F16C).
// 0x7F / 0xFF (NaN in e4m3fn) are never written and decode to +-480.
inline float fp8_e4m3_to_fp32(uint8_t b) {
    uint16_t h = uint16_t(((b & 0x80u) << 8) | ((b & 0x7Fu) << 7));
    return fp16_to_fp32(h) * 256.0f;
}
// f32 -> e4m3fn, round to nearest even, saturating at +-448; NaN -> 0.
uint8_t fp32_to_fp8_e4m3(float f);
// The 256 decoded e4m3fn values (table for the portable kernels).
const float *fp8_e4m3_table();

}  // namespace llmkv
