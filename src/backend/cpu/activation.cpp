// The portable gated activations (activation.h) and the kernel choice.
#include "backend/cpu/activation.h"

#include "common/float_math.h"

namespace llmkv::cpu::kernels {

float exp_fma_portable(float x) {
    // maxps / minps: (x > -87 ? x : -87), then (x < 88 ? x : 88); a NaN becomes -87.
    x = x > -87.0f ? x : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    // Round to nearest even, as _mm256_round_ps does (|x log2 e| < 2^22: adding and
    // subtracting 1.5 * 2^23 rounds exactly).
    const float v = x * 1.44269504088896341f;
    const float k = (v + 12582912.0f) - 12582912.0f;
    float r = fma_float(-k, 0.693359375f, x);
    r = fma_float(-k, -2.12194440054690583e-4f, r);
    float p = 1.0f / 5040.0f;
    p = fma_float(p, r, 1.0f / 720.0f);
    p = fma_float(p, r, 1.0f / 120.0f);
    p = fma_float(p, r, 1.0f / 24.0f);
    p = fma_float(p, r, 1.0f / 6.0f);
    p = fma_float(p, r, 0.5f);
    p = fma_float(p, r, 1.0f);
    p = fma_float(p, r, 1.0f);
    const uint32_t bits = uint32_t(int32_t(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

void swiglu_portable(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const float x = g[i];
        g[i] = x / (1.0f + exp_fma_portable(-x)) * u[i];
    }
}

void geglu_portable(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const float x = g[i];
        const float z = kGeluExpScale * (x + kGeluCubic * (x * x * x));
        g[i] = x / (1.0f + exp_fma_portable(z)) * u[i];
    }
}

GluFn swiglu_kernel(bool avx2) {
#if defined(__x86_64__)
    if (avx2) return swiglu_avx2;
#endif
    (void)avx2;
    return swiglu_portable;
}

GluFn geglu_kernel(bool avx2) {
#if defined(__x86_64__)
    if (avx2) return geglu_avx2;
#endif
    (void)avx2;
    return geglu_portable;
}

}  // namespace llmkv::cpu::kernels
