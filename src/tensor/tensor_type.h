// Tensor element types as numbered in GGUF files (GGML type ids), their block geometry, and
// the packed block layouts of the quantized types. Shared by the GGUF reader and the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmkv {

// The types llmkv can load and compute with. Values are the GGML type ids stored in GGUF.
enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    BF16 = 30,
    MXFP4 = 39,  // gpt-oss's experts
};

// One past the largest GGML type id this code knows a name for.
inline constexpr uint32_t kGgmlTypeIdLimit = 40;

// Name of any GGML type id ("Q6_K", "IQ2_XXS", ...), or nullptr for ids that were never
// assigned, were retired, or are beyond kGgmlTypeIdLimit. Used for "unsupported" messages.
constexpr const char *ggml_type_name(uint32_t id) {
    switch (id) {
        case 0:
            return "F32";
        case 1:
            return "F16";
        case 2:
            return "Q4_0";
        case 3:
            return "Q4_1";
        // 4 and 5 (Q4_2, Q4_3) were removed from GGML before GGUF existed.
        case 6:
            return "Q5_0";
        case 7:
            return "Q5_1";
        case 8:
            return "Q8_0";
        case 9:
            return "Q8_1";
        case 10:
            return "Q2_K";
        case 11:
            return "Q3_K";
        case 12:
            return "Q4_K";
        case 13:
            return "Q5_K";
        case 14:
            return "Q6_K";
        case 15:
            return "Q8_K";
        case 16:
            return "IQ2_XXS";
        case 17:
            return "IQ2_XS";
        case 18:
            return "IQ3_XXS";
        case 19:
            return "IQ1_S";
        case 20:
            return "IQ4_NL";
        case 21:
            return "IQ3_S";
        case 22:
            return "IQ2_S";
        case 23:
            return "IQ4_XS";
        case 24:
            return "I8";
        case 25:
            return "I16";
        case 26:
            return "I32";
        case 27:
            return "I64";
        case 28:
            return "F64";
        case 29:
            return "IQ1_M";
        case 30:
            return "BF16";
        case 31:
            return "Q4_0_4_4";
        case 32:
            return "Q4_0_4_8";
        case 33:
            return "Q4_0_8_8";
        case 34:
            return "TQ1_0";
        case 35:
            return "TQ2_0";
        case 36:
            return "IQ4_NL_4_4";
        case 37:
            return "IQ4_NL_4_8";
        case 38:
            return "IQ4_NL_8_8";
        case 39:
            return "MXFP4";
        default:
            return nullptr;
    }
}

// True when `id` is a type llmkv computes with: every TensorType value except Q8_K, which
// GGML uses only for intermediate activations.
constexpr bool tensor_type_supported(uint32_t id) {
    switch (id) {
        case uint32_t(TensorType::F32):
        case uint32_t(TensorType::F16):
        case uint32_t(TensorType::Q4_0):
        case uint32_t(TensorType::Q4_1):
        case uint32_t(TensorType::Q5_0):
        case uint32_t(TensorType::Q5_1):
        case uint32_t(TensorType::Q8_0):
        case uint32_t(TensorType::Q2_K):
        case uint32_t(TensorType::Q3_K):
        case uint32_t(TensorType::Q4_K):
        case uint32_t(TensorType::Q5_K):
        case uint32_t(TensorType::Q6_K):
        case uint32_t(TensorType::IQ4_NL):
        case uint32_t(TensorType::BF16):
        case uint32_t(TensorType::MXFP4):
            return true;
        default:
            return false;
    }
}

// "F32", "Q4_1", ...
constexpr const char *tensor_type_name(TensorType t) {
    const char *name = ggml_type_name(uint32_t(t));
    return name ? name : "unknown";
}

// True for the k-quant types (256-element super-blocks).
constexpr bool tensor_type_is_k_quant(TensorType t) {
    switch (t) {
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::Q8_K:
            return true;
        default:
            return false;
    }
}

// Elements per block: 1 for the float types, 256 for the k-quants, 32 for the other
// quantized ones.
constexpr int64_t tensor_type_block_elements(TensorType t) {
    if (tensor_type_is_k_quant(t)) return 256;
    switch (t) {
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::Q8_0:
        case TensorType::IQ4_NL:
        case TensorType::MXFP4:
            return 32;
        default:
            return 1;
    }
}

// Bytes per block.
constexpr size_t tensor_type_block_bytes(TensorType t) {
    switch (t) {
        case TensorType::F32:
            return 4;
        case TensorType::F16:
            return 2;
        case TensorType::BF16:
            return 2;
        case TensorType::Q4_0:
            return 18;
        case TensorType::Q4_1:
            return 20;
        case TensorType::Q5_0:
            return 22;
        case TensorType::Q5_1:
            return 24;
        case TensorType::Q8_0:
            return 34;
        case TensorType::Q2_K:
            return 84;
        case TensorType::Q3_K:
            return 110;
        case TensorType::Q4_K:
            return 144;
        case TensorType::Q5_K:
            return 176;
        case TensorType::Q6_K:
            return 210;
        case TensorType::Q8_K:
            return 292;
        case TensorType::IQ4_NL:
            return 18;
        case TensorType::MXFP4:
            return 17;
    }
    return 0;
}

// Elements in one quantization block of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL.
inline constexpr int kQuantBlock = 32;
// Elements in one super-block of the k-quants.
inline constexpr int kSuperBlock = 256;

// Q4_0: value = (nibble - 8) * d. Element j (0..15) is the low nibble of qs[j], element j + 16
// the high nibble of qs[j]. d is IEEE fp16.
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

// Q4_1: value = nibble * d + m, nibble layout as Q4_0. d and m are IEEE fp16.
struct BlockQ4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");

// Q8_0: value = qs[j] * d. d is IEEE fp16.
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

// Q5_0: value = (q - 16) * d with the 5-bit q = nibble | (bit << 4). Nibbles as Q4_0 (element
// j < 16: low nibble of qs[j]; j + 16: high nibble of qs[j]); the fifth bit of element j
// (0..31) is bit j of qh read as a little-endian uint32. d is IEEE fp16.
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");

// Q5_1: value = q * d + m (product rounded, then the sum), q 0..31 laid out as in Q5_0.
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes");

// IQ4_NL: value = kIq4nlValues[nibble] * d, nibble layout as Q4_0. d is IEEE fp16.
struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL block is 18 bytes");

// The 16 non-uniform levels of IQ4_NL, indexed by the 4-bit code.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4 (OCP microscaling FP4, gpt-oss): value = kMxfp4Values[nibble] * 2^(e - 128), nibble
// layout as Q4_0. kMxfp4Values are twice the E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
// negatives), so the block's E8M0 scale 2^(e - 127) enters halved: mxfp4_scale(e), exact in f32
// for every e (2^-128 and 2^-127 subnormal), as llama.cpp defines the type.
struct BlockMXFP4 {
    uint8_t e;
    uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockMXFP4) == 17, "MXFP4 block is 17 bytes");

inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as f32 bits.
constexpr uint32_t mxfp4_scale_bits(uint32_t e) {
    return e < 2 ? 0x00200000u << e : (e - 1) << 23;
}

// ---- k-quants: 256 elements per super-block, sub-blocks of 16 or 32 with their own scales ----
//
// Element e (0..255) of a super-block is written e = 128 h + 32 j + l (h half 0..1, j 0..3,
// l 0..31) where the quants are packed in bit planes; "sub-block" s is e / 16 or e / 32.
// Products of a scale and an integer code are computed in f32 in the order written.

// Q2_K: value = (d * (sc_s & 15)) * q - dmin * (sc_s >> 4), s = e / 16, sc_s = scales[s];
// q = (qs[32 h + l] >> 2 j) & 3. The two products are rounded (both exact: 11-bit mantissas
// times 4-bit integers), then q * the first, then the difference. d, dmin are IEEE fp16.
struct BlockQ2_K {
    uint8_t scales[kSuperBlock / 16];
    uint8_t qs[kSuperBlock / 4];
    uint16_t d;
    uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block is 84 bytes");

// Q3_K: value = (d * (sc_s - 32)) * (q - 4), s = e / 16, with the 3-bit
// q = ((qs[32 h + l] >> 2 j) & 3) | (((hmask[l] >> (4 h + j)) & 1) << 2) and the 6-bit scale
// sc_s = (scales[s % 8] >> 4 (s / 8)) & 15 | ((scales[8 + s % 4] >> 2 (s / 4)) & 3) << 4.
// d is IEEE fp16; d * (sc - 32) is exact.
struct BlockQ3_K {
    uint8_t hmask[kSuperBlock / 8];
    uint8_t qs[kSuperBlock / 4];
    uint8_t scales[12];
    uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block is 110 bytes");

// The 6-bit scale and min of sub-block s (0..7) of Q4_K / Q5_K, packed in 12 bytes:
//   s < 4: sc = scales[s] & 63,                                  m = scales[s + 4] & 63
//   s >= 4: sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4,
//           m = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4
constexpr void k4_scale_min(const uint8_t *scales, int s, int *sc, int *m) {
    if (s < 4) {
        *sc = scales[s] & 63;
        *m = scales[s + 4] & 63;
    } else {
        *sc = (scales[s + 4] & 15) | ((scales[s - 4] >> 6) << 4);
        *m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
    }
}

// Q4_K: value = (d * sc_s) * q - dmin * m_s, s = e / 32 (k4_scale_min), q the low nibble of
// qs[32 (s / 2) + l] for even s, the high nibble for odd s (l = e % 32). Rounding as Q2_K.
struct BlockQ4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[kSuperBlock / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block is 144 bytes");

// Q5_K: as Q4_K with the 5-bit q = nibble | ((qh[l] >> s) & 1) << 4.
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[kSuperBlock / 8];
    uint8_t qs[kSuperBlock / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block is 176 bytes");

// Q6_K: value = (d * scales[s]) * (q - 32), s = e / 16, signed 8-bit scales, with the 6-bit
// q = ((ql[64 h + 32 (j & 1) + l] >> 4 (j / 2)) & 15) | ((qh[32 h + l] >> 2 j) & 3) << 4.
// d is IEEE fp16; d * scale is exact.
struct BlockQ6_K {
    uint8_t ql[kSuperBlock / 2];
    uint8_t qh[kSuperBlock / 4];
    int8_t scales[kSuperBlock / 16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes");

// Q8_K: value = qs[e] * d with an f32 d; bsums[k] = sum of qs[16 k .. 16 k + 15].
struct BlockQ8_K {
    float d;
    int8_t qs[kSuperBlock];
    int16_t bsums[kSuperBlock / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block is 292 bytes");

static_assert(tensor_type_block_bytes(TensorType::Q4_0) == sizeof(BlockQ4_0));
static_assert(tensor_type_block_bytes(TensorType::Q4_1) == sizeof(BlockQ4_1));
static_assert(tensor_type_block_bytes(TensorType::Q5_0) == sizeof(BlockQ5_0));
static_assert(tensor_type_block_bytes(TensorType::Q5_1) == sizeof(BlockQ5_1));
static_assert(tensor_type_block_bytes(TensorType::Q8_0) == sizeof(BlockQ8_0));
static_assert(tensor_type_block_bytes(TensorType::IQ4_NL) == sizeof(BlockIQ4_NL));
static_assert(tensor_type_block_bytes(TensorType::MXFP4) == sizeof(BlockMXFP4));
static_assert(tensor_type_block_bytes(TensorType::Q2_K) == sizeof(BlockQ2_K));
static_assert(tensor_type_block_bytes(TensorType::Q3_K) == sizeof(BlockQ3_K));
static_assert(tensor_type_block_bytes(TensorType::Q4_K) == sizeof(BlockQ4_K));
static_assert(tensor_type_block_bytes(TensorType::Q5_K) == sizeof(BlockQ5_K));
static_assert(tensor_type_block_bytes(TensorType::Q6_K) == sizeof(BlockQ6_K));
static_assert(tensor_type_block_bytes(TensorType::Q8_K) == sizeof(BlockQ8_K));

}  // namespace llmkv
