// AVX2/FMA/F16C row kernels for CPU attention over fp16 and bf16 K/V rows.
#include <immintrin.h>

#include "backend/cpu/attention_kernels.h"

namespace llmkv::cpu::kernels {

namespace {

inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 shuf = _mm_movehdup_ps(lo);
    __m128 sums = _mm_add_ps(lo, shuf);
    shuf = _mm_movehl_ps(shuf, sums);
    sums = _mm_add_ss(sums, shuf);
    return _mm_cvtss_f32(sums);
}

inline __m256 load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

inline __m256 load_bf16(const uint16_t *p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <__m256 (*Load)(const uint16_t *)>
void dot_rows(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    for (uint32_t t = 0; t < n; ++t) {
        const uint16_t *r = rows + size_t(t) * d;
        __m256 acc0 = _mm256_setzero_ps();
        __m256 acc1 = _mm256_setzero_ps();
        uint32_t i = 0;
        for (; i + 16 <= d; i += 16) {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), Load(r + i), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), Load(r + i + 8), acc1);
        }
        for (; i < d; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), Load(r + i), acc0);
        scores[t] = hsum(_mm256_add_ps(acc0, acc1));
    }
}

template <__m256 (*Load)(const uint16_t *)>
void axpy_rows(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    for (uint32_t i = 0; i < d; i += 8) {
        __m256 acc = _mm256_loadu_ps(out + i);
        for (uint32_t t = 0; t < n; ++t) {
            acc = _mm256_fmadd_ps(_mm256_set1_ps(w[t]), Load(rows + size_t(t) * d + i), acc);
        }
        _mm256_storeu_ps(out + i, acc);
    }
}

}  // namespace

void dot_rows_f16_avx2(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    dot_rows<load_f16>(q, rows, n, d, scores);
}
void dot_rows_bf16_avx2(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    dot_rows<load_bf16>(q, rows, n, d, scores);
}
void axpy_rows_f16_avx2(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    axpy_rows<load_f16>(w, rows, n, d, out);
}
void axpy_rows_bf16_avx2(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    axpy_rows<load_bf16>(w, rows, n, d, out);
}

void f32_to_f16_avx2(const float *src, uint16_t *dst, uint32_t n) {
    for (uint32_t i = 0; i < n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), h);
    }
}

}  // namespace llmkv::cpu::kernels
