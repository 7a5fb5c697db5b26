// Weight decoding for the lane format IQ4_NL (matmul.h gives the arithmetic every kernel family
// follows): one 32-block's codes as bytes in element order, and its levels as two unsigned
// parts. 256-bit AVX2 code, shared by matmul_avx2.cpp and matmul_avx512.cpp; like simd_util.h it
// lives in an unnamed namespace so that each kernel file, compiled with its own target flags,
// gets its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/simd_util.h"
#include "common/half.h"

namespace llmkv::cpu::detail {
namespace {

inline float lane_f16(const uint8_t *p) {
    return _cvtsh_ss(load_u16(p));
}

// 16 bytes of packed nibbles -> 32 bytes 0..15 in element order (low nibbles, then high).
inline __m256i lane_nibbles(const uint8_t *q) {
    const __m256i raw =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(q)));
    const __m256i shifted = _mm256_srlv_epi32(raw, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f));
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

}  // namespace
}  // namespace llmkv::cpu::detail
