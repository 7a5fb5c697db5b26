// Weight decoding for the lane formats (IQ4_NL, Q2_K; matmul.h gives the
// arithmetic every kernel family follows): one 32-block of codes as bytes in element order,
// and per weight block the float factors and integer scales. 256-bit AVX2 code, shared by
// matmul_avx2.cpp and matmul_avx512.cpp; like simd_util.h it lives in an unnamed namespace
// so that each kernel file, compiled with its own target flags, gets its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/simd_util.h"
#include "common/half.h"

namespace llmkv::cpu::detail {
namespace {

// Per row and weight block: dA, dB and the integer scales sc / mins m, as matmul.h defines
// them: per sub-block of 16 (Q2_K).
struct LaneHeader {
    float dA, dB;
    alignas(32) int16_t sc[16];
    alignas(32) int16_t mn[16];
};

inline float lane_f16(const uint8_t *p) {
    return _cvtsh_ss(load_u16(p));
}

template <TensorType kType>
inline void lane_header(const uint8_t *blk, LaneHeader &h) {
    if constexpr (kType == TensorType::IQ4_NL) {
        h.dA = lane_f16(blk);
    } else if constexpr (kType == TensorType::Q2_K) {
        h.dA = lane_f16(blk + 80);
        h.dB = -lane_f16(blk + 82);
        const __m256i v =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk)));
        _mm256_store_si256(reinterpret_cast<__m256i *>(h.sc),
                           _mm256_and_si256(v, _mm256_set1_epi16(15)));
        _mm256_store_si256(reinterpret_cast<__m256i *>(h.mn), _mm256_srli_epi16(v, 4));
    }
}

// The integer scales of 32-block jb as 16 int16: 8 for lanes 0-3 (elements 0-15), 8 for lanes
// 4-7. madd(pairs, this) multiplies each lane's sum by its sub-block's scale.
template <TensorType kType>
inline __m256i lane_scales16(const int16_t *v, int jb) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(v[2 * jb])),
                                   _mm_set1_epi16(v[2 * jb + 1]), 1);
}

// 16 bytes of packed nibbles -> 32 bytes 0..15 in element order (low nibbles, then high).
inline __m256i lane_nibbles(const uint8_t *q) {
    const __m256i raw =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(q)));
    const __m256i shifted = _mm256_srlv_epi32(raw, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f));
}

// (the 32 bytes at p >> shift) & mask, per byte.
inline __m256i lane_bits(const uint8_t *p, int shift, int mask) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                            _mm256_set1_epi8(char(mask)));
}

// Codes u of 32-block jb of the weight block at blk, as unsigned bytes in element order. For
// IQ4_NL: the 4-bit indices (lane_iq4nl_split turns them into levels).
template <TensorType kType>
inline __m256i lane_codes(const uint8_t *blk, int jb) {
    if constexpr (kType == TensorType::IQ4_NL) {
        return lane_nibbles(blk + 2);
    } else if constexpr (kType == TensorType::Q2_K) {
        return lane_bits(blk + 16 + 32 * (jb / 4), 2 * (jb % 4), 3);
    }
}

// IQ4_NL levels as two unsigned parts, level = pos - neg (each <= 127, so maddubs pairs stay
// within int16 for any activation code).
inline __m256i lane_iq4nl_pos(__m256i idx) {
    const __m256i t = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 13, 25, 38, 53, 69, 89, 113));
    return _mm256_shuffle_epi8(t, idx);
}
inline __m256i lane_iq4nl_neg(__m256i idx) {
    const __m256i t = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(127, 104, 83, 65, 49, 35, 22, 10, 0, 0, 0, 0, 0, 0, 0, 0));
    return _mm256_shuffle_epi8(t, idx);
}

template <TensorType kType>
inline constexpr bool kLaneScaled = tensor_type_is_k_quant(kType);
template <TensorType kType>
inline constexpr bool kLaneMin = lane_format_has_min(kType);

}  // namespace
}  // namespace llmkv::cpu::detail
