// e^x on 8 floats with AVX2/FMA, for the *_avx2.cpp kernels (softmax, SwiGLU, GeGLU). Include
// only from files compiled for AVX2/FMA. exp_fma_portable (activation.h) is its scalar twin:
// the same operations in the same order, bit for bit.
#pragma once

#include <immintrin.h>

namespace llmkv::cpu::kernels {

// e^x for x <= 88: x = k ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact k ln2_hi),
// e^r by its Taylor polynomial to degree 7 (error < 1e-8 relative), times 2^k. Arguments
// below -87 are raised to -87 so 2^k stays normal (a NaN becomes -87: maxps returns its
// second operand).
inline __attribute__((always_inline)) __m256 exp_ps(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440054690583e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace llmkv::cpu::kernels
