// The value of one element of a GGUF weight row, for every tensor type llmkv loads: the
// formulas of src/tensor/tensor_type.h evaluated in f32 with one IEEE rounding per operation,
// in the order the CPU reference (dequantize_row_reference, src/tensor/weights.cpp) uses, so
// that a device-decoded value is bitwise the CPU's. No FMA contraction on either side: device
// code uses the _rn intrinsics, host code rounds each product through a volatile.
//
// Compiled by nvcc (device: the dequantization kernels of dequant.cu, the packed matrix-vector
// kernels of matvec_q.cu) and by the host compiler (module.cpp names an out-of-range value in
// its error message; tests/gpu/dequant_host_test.cpp checks every decoder against the CPU
// reference on the host, where no GPU is needed). Plain integer code otherwise: no CUDA header.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tensor/tensor_type.h"

#if defined(__CUDACC__)
#define LLMKV_DQ_FN __host__ __device__ __forceinline__
#else
#define LLMKV_DQ_FN inline
#endif

namespace llmkv::dq {

// ---- scalar helpers -------------------------------------------------------------------------

LLMKV_DQ_FN float bits_to_f32(uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(b);
#else
    float f;
    memcpy(&f, &b, 4);
    return f;
#endif
}

LLMKV_DQ_FN uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
#endif
}

// a * b rounded once (never fused with a following add).
LLMKV_DQ_FN float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    volatile float p = a * b;
    return p;
#endif
}
LLMKV_DQ_FN float add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
LLMKV_DQ_FN float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

// Little-endian loads at any alignment (block fields are only 2-byte aligned).
LLMKV_DQ_FN uint32_t load_u16(const uint8_t *p) {
    return uint32_t(p[0]) | (uint32_t(p[1]) << 8);
}
LLMKV_DQ_FN uint32_t load_u32(const uint8_t *p) {
    return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// fp16_to_fp32 of src/common/half.h, bit for bit (NaN payloads included).
LLMKV_DQ_FN float fp16_to_f32(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                mant <<= 1;
                ++e;
            } while ((mant & 0x400u) == 0);
            mant &= 0x3ffu;
            bits = sign | (uint32_t(127 - 15 - e) << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    return bits_to_f32(bits);
}

LLMKV_DQ_FN float load_f16(const uint8_t *p) {
    return fp16_to_f32(load_u16(p));
}

// The 16 IQ4_NL levels packed into two words (byte k of word k / 8 = level k), so that host
// and device read the same constants without a table in device memory.
// The same for MXFP4's levels (kMxfp4Values).
constexpr uint64_t pack_levels(const int8_t *levels, int first) {
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= uint64_t(uint8_t(levels[first + k])) << (8 * k);
    return v;
}
constexpr uint64_t kIq4nlLo = pack_levels(kIq4nlValues, 0);
constexpr uint64_t kIq4nlHi = pack_levels(kIq4nlValues, 8);
constexpr uint64_t kMxfp4Lo = pack_levels(kMxfp4Values, 0);
constexpr uint64_t kMxfp4Hi = pack_levels(kMxfp4Values, 8);

LLMKV_DQ_FN int packed_level(uint64_t lo, uint64_t hi, uint32_t code) {
    const uint64_t w = code < 8 ? lo : hi;
    return int(int8_t(uint8_t(w >> (8 * (code & 7)))));
}
LLMKV_DQ_FN int iq4nl_level(uint32_t code) {
    return packed_level(kIq4nlLo, kIq4nlHi, code);
}

// MXFP4's block scale 2^(e - 128) (mxfp4_scale_bits of tensor_type.h, restated for device code).
LLMKV_DQ_FN float mxfp4_scale(uint32_t e) {
    return bits_to_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// The 6-bit scale and min of sub-block s (0..7) of Q4_K / Q5_K (k4_scale_min of
// tensor_type.h, restated for device code).
LLMKV_DQ_FN void k4_scale_min_at(const uint8_t *scales, uint32_t s, uint32_t *sc, uint32_t *m) {
    if (s < 4) {
        *sc = scales[s] & 63u;
        *m = scales[s + 4] & 63u;
    } else {
        *sc = (scales[s + 4] & 15u) | (uint32_t(scales[s - 4] >> 6) << 4);
        *m = uint32_t(scales[s + 4] >> 4) | (uint32_t(scales[s] >> 6) << 4);
    }
}

// The 6-bit scale of sub-block s (0..15) of Q3_K.
LLMKV_DQ_FN uint32_t q3k_scale_at(const uint8_t *scales, uint32_t s) {
    return ((uint32_t(scales[s % 8]) >> (4 * (s / 8))) & 15u) |
           (((uint32_t(scales[8 + s % 4]) >> (2 * (s / 4))) & 3u) << 4);
}

// The nibble of element j (0..31) of a 32-element block whose 16 bytes of nibbles are at qs:
// element j < 16 is the low nibble of qs[j], element j + 16 the high nibble of qs[j].
LLMKV_DQ_FN uint32_t nibble32(const uint8_t *qs, uint32_t j) {
    return j < 16 ? (qs[j] & 15u) : (uint32_t(qs[j - 16]) >> 4);
}

// ---- one element of each type -----------------------------------------------------------------
//
// Format<T>::decode(block, j): element j (0 <= j < kElems) of the block starting at `block`.
// kElems / kBytes: the block geometry of tensor_type.h.

template <TensorType T>
struct Format;

template <>
struct Format<TensorType::F32> {
    static constexpr uint32_t kElems = 1, kBytes = 4;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t) { return bits_to_f32(load_u32(b)); }
};

template <>
struct Format<TensorType::F16> {
    static constexpr uint32_t kElems = 1, kBytes = 2;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t) { return load_f16(b); }
};

template <>
struct Format<TensorType::BF16> {
    static constexpr uint32_t kElems = 1, kBytes = 2;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t) {
        return bits_to_f32(load_u16(b) << 16);
    }
};

// (nibble - 8) * d
template <>
struct Format<TensorType::Q4_0> {
    static constexpr uint32_t kElems = 32, kBytes = 18;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t j) {
        const float d = load_f16(b + offsetof(BlockQ4_0, d));
        return mul(float(int(nibble32(b + offsetof(BlockQ4_0, qs), j)) - 8), d);
    }
};

// nibble * d + m (two roundings)
template <>
struct Format<TensorType::Q4_1> {
    static constexpr uint32_t kElems = 32, kBytes = 20;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t j) {
        const float d = load_f16(b + offsetof(BlockQ4_1, d));
        const float m = load_f16(b + offsetof(BlockQ4_1, m));
        return add(mul(float(nibble32(b + offsetof(BlockQ4_1, qs), j)), d), m);
    }
};

// q * d
template <>
struct Format<TensorType::Q8_0> {
    static constexpr uint32_t kElems = 32, kBytes = 34;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t j) {
        const float d = load_f16(b + offsetof(BlockQ8_0, d));
        return mul(float(int8_t(b[offsetof(BlockQ8_0, qs) + j])), d);
    }
};

// (q - 16) * d, q = nibble | bit j of qh << 4
template <>
struct Format<TensorType::Q5_0> {
    static constexpr uint32_t kElems = 32, kBytes = 22;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t j) {
        const float d = load_f16(b + offsetof(BlockQ5_0, d));
        const uint32_t hi = (load_u32(b + offsetof(BlockQ5_0, qh)) >> j) & 1u;
        const uint32_t q = nibble32(b + offsetof(BlockQ5_0, qs), j) | (hi << 4);
        return mul(float(int(q) - 16), d);
    }
};

// q * d + m (two roundings), q as Q5_0
template <>
struct Format<TensorType::Q5_1> {
    static constexpr uint32_t kElems = 32, kBytes = 24;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t j) {
        const float d = load_f16(b + offsetof(BlockQ5_1, d));
        const float m = load_f16(b + offsetof(BlockQ5_1, m));
        const uint32_t hi = (load_u32(b + offsetof(BlockQ5_1, qh)) >> j) & 1u;
        const uint32_t q = nibble32(b + offsetof(BlockQ5_1, qs), j) | (hi << 4);
        return add(mul(float(q), d), m);
    }
};

// level[nibble] * d
template <>
struct Format<TensorType::IQ4_NL> {
    static constexpr uint32_t kElems = 32, kBytes = 18;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t j) {
        const float d = load_f16(b + offsetof(BlockIQ4_NL, d));
        return mul(float(iq4nl_level(nibble32(b + offsetof(BlockIQ4_NL, qs), j))), d);
    }
};

// level[nibble] * 2^(e - 128)
template <>
struct Format<TensorType::MXFP4> {
    static constexpr uint32_t kElems = 32, kBytes = 17;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t j) {
        const float d = mxfp4_scale(b[offsetof(BlockMXFP4, e)]);
        return mul(
            float(packed_level(kMxfp4Lo, kMxfp4Hi, nibble32(b + offsetof(BlockMXFP4, qs), j))), d);
    }
};

// k-quants: element e = 128 h + 32 j + l.

// (d * (sc & 15)) * q - dmin * (sc >> 4), s = e / 16
template <>
struct Format<TensorType::Q2_K> {
    static constexpr uint32_t kElems = 256, kBytes = 84;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t e) {
        const uint32_t h = e / 128, j = (e % 128) / 32, l = e % 32;
        const uint32_t sc = b[offsetof(BlockQ2_K, scales) + e / 16];
        const uint32_t q = (uint32_t(b[offsetof(BlockQ2_K, qs) + 32 * h + l]) >> (2 * j)) & 3u;
        const float d = load_f16(b + offsetof(BlockQ2_K, d));
        const float dmin = load_f16(b + offsetof(BlockQ2_K, dmin));
        const float dl = mul(d, float(sc & 15u));
        const float ml = mul(dmin, float(sc >> 4));
        return sub(mul(dl, float(q)), ml);
    }
};

// (d * (sc - 32)) * (q - 4), s = e / 16, q = 2 bits of qs | hmask bit << 2
template <>
struct Format<TensorType::Q3_K> {
    static constexpr uint32_t kElems = 256, kBytes = 110;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t e) {
        const uint32_t h = e / 128, j = (e % 128) / 32, l = e % 32;
        const uint32_t lo = (uint32_t(b[offsetof(BlockQ3_K, qs) + 32 * h + l]) >> (2 * j)) & 3u;
        const uint32_t hb = (uint32_t(b[offsetof(BlockQ3_K, hmask) + l]) >> (4 * h + j)) & 1u;
        const uint32_t q = lo | (hb << 2);
        const uint32_t sc = q3k_scale_at(b + offsetof(BlockQ3_K, scales), e / 16);
        const float d = load_f16(b + offsetof(BlockQ3_K, d));
        return mul(mul(d, float(int(sc) - 32)), float(int(q) - 4));
    }
};

// (d * sc) * q - dmin * m, s = e / 32, q the low (even s) or high (odd s) nibble
template <>
struct Format<TensorType::Q4_K> {
    static constexpr uint32_t kElems = 256, kBytes = 144;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t e) {
        const uint32_t s = e / 32, l = e % 32;
        uint32_t sc, m;
        k4_scale_min_at(b + offsetof(BlockQ4_K, scales), s, &sc, &m);
        const uint32_t byte = b[offsetof(BlockQ4_K, qs) + 32 * (s / 2) + l];
        const uint32_t q = (s & 1u) ? (byte >> 4) : (byte & 15u);
        const float d = load_f16(b + offsetof(BlockQ4_K, d));
        const float dmin = load_f16(b + offsetof(BlockQ4_K, dmin));
        const float dl = mul(d, float(sc));
        const float ml = mul(dmin, float(m));
        return sub(mul(dl, float(q)), ml);
    }
};

// as Q4_K with q = nibble | bit s of qh[l] << 4
template <>
struct Format<TensorType::Q5_K> {
    static constexpr uint32_t kElems = 256, kBytes = 176;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t e) {
        const uint32_t s = e / 32, l = e % 32;
        uint32_t sc, m;
        k4_scale_min_at(b + offsetof(BlockQ5_K, scales), s, &sc, &m);
        const uint32_t byte = b[offsetof(BlockQ5_K, qs) + 32 * (s / 2) + l];
        const uint32_t nib = (s & 1u) ? (byte >> 4) : (byte & 15u);
        const uint32_t hb = (uint32_t(b[offsetof(BlockQ5_K, qh) + l]) >> s) & 1u;
        const uint32_t q = nib | (hb << 4);
        const float d = load_f16(b + offsetof(BlockQ5_K, d));
        const float dmin = load_f16(b + offsetof(BlockQ5_K, dmin));
        const float dl = mul(d, float(sc));
        const float ml = mul(dmin, float(m));
        return sub(mul(dl, float(q)), ml);
    }
};

// (d * scales[s]) * (q - 32), s = e / 16, q = 4 bits of ql | 2 bits of qh << 4
template <>
struct Format<TensorType::Q6_K> {
    static constexpr uint32_t kElems = 256, kBytes = 210;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t e) {
        const uint32_t h = e / 128, j = (e % 128) / 32, l = e % 32;
        const uint32_t lo =
            (uint32_t(b[offsetof(BlockQ6_K, ql) + 64 * h + 32 * (j & 1u) + l]) >> (4 * (j / 2))) &
            15u;
        const uint32_t hi = (uint32_t(b[offsetof(BlockQ6_K, qh) + 32 * h + l]) >> (2 * j)) & 3u;
        const uint32_t q = lo | (hi << 4);
        const int sc = int8_t(b[offsetof(BlockQ6_K, scales) + e / 16]);
        const float d = load_f16(b + offsetof(BlockQ6_K, d));
        return mul(mul(d, float(sc)), float(int(q) - 32));
    }
};

// qs[e] * d, d an f32
template <>
struct Format<TensorType::Q8_K> {
    static constexpr uint32_t kElems = 256, kBytes = 292;
    static LLMKV_DQ_FN float decode(const uint8_t *b, uint32_t e) {
        const float d = bits_to_f32(load_u32(b + offsetof(BlockQ8_K, d)));
        return mul(float(int8_t(b[offsetof(BlockQ8_K, qs) + e])), d);
    }
};

// Element c of a row of Format<T>.
template <TensorType T>
LLMKV_DQ_FN float decode_at(const uint8_t *row, uint64_t c) {
    using F = Format<T>;
    return F::decode(row + (c / F::kElems) * F::kBytes, uint32_t(c % F::kElems));
}

// X(name) for every type with a decoder (the TensorType enumerators).
// One list, by hand (clang-format 14 wraps it differently on each pass).
// clang-format off
#define LLMKV_DQ_TYPES(X) \
    X(F32) X(F16) X(BF16) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(IQ4_NL) \
    X(MXFP4) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K) X(Q8_K)
// clang-format on

// Host-side: element c of a row of type `type`; false for a type without a decoder.
inline bool decode_element(TensorType type, const uint8_t *row, uint64_t c, float *out) {
    switch (type) {
#define LLMKV_DQ_CASE(name)                         \
    case TensorType::name:                          \
        *out = decode_at<TensorType::name>(row, c); \
        return true;
        LLMKV_DQ_TYPES(LLMKV_DQ_CASE)
#undef LLMKV_DQ_CASE
    }
    return false;
}

#define LLMKV_DQ_GEOMETRY(name)                                                     \
    static_assert(Format<TensorType::name>::kElems ==                               \
                          uint32_t(tensor_type_block_elements(TensorType::name)) && \
                      Format<TensorType::name>::kBytes ==                           \
                          uint32_t(tensor_type_block_bytes(TensorType::name)),      \
                  "dequant_formats.cuh: block geometry of " #name);
LLMKV_DQ_TYPES(LLMKV_DQ_GEOMETRY)
#undef LLMKV_DQ_GEOMETRY

}  // namespace llmkv::dq
