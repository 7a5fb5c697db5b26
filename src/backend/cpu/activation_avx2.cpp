// AVX2/FMA gated activations (activation.h): 8 values at a time through exp_ps; the tail goes
// through the same exp in one padded vector, so every element gets the same bits wherever it is.
#include <immintrin.h>

#include "backend/cpu/activation.h"
#include "backend/cpu/exp_avx2.h"

namespace llmkv::cpu::kernels {

namespace {

template <typename Exponent>
inline __attribute__((always_inline)) void glu_avx2(float *g, const float *u, size_t n,
                                                    Exponent exponent) {
    const __m256 one = _mm256_set1_ps(1.0f);
    auto step = [&](__m256 x, __m256 up) {
        return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, exp_ps(exponent(x)))), up);
    };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, step(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        alignas(32) float x[8] = {}, up[8] = {};
        for (size_t k = i; k < n; ++k) {
            x[k - i] = g[k];
            up[k - i] = u[k];
        }
        _mm256_store_ps(x, step(_mm256_load_ps(x), _mm256_load_ps(up)));
        for (size_t k = i; k < n; ++k) g[k] = x[k - i];
    }
}

}  // namespace

void swiglu_avx2(float *g, const float *u, size_t n) {
    const __m256 zero = _mm256_setzero_ps();
    glu_avx2(g, u, n, [zero](__m256 x) { return _mm256_sub_ps(zero, x); });
}

void geglu_avx2(float *g, const float *u, size_t n) {
    const __m256 scale = _mm256_set1_ps(kGeluExpScale), cubic = _mm256_set1_ps(kGeluCubic);
    glu_avx2(g, u, n, [scale, cubic](__m256 x) {
        const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        return _mm256_mul_ps(scale, _mm256_add_ps(x, _mm256_mul_ps(cubic, x3)));
    });
}

}  // namespace llmkv::cpu::kernels
