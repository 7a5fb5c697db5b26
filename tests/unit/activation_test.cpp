// The gated activations (backend/cpu/activation.h): the AVX2 kernels and the portable ones give
// the same bits for every input (specials and the clamp edges included) at every length, each
// element independent of where it sits, and both stay close to the double-precision formulas.
#include "backend/cpu/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_features.h"

namespace llmkv::cpu::kernels {
namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

std::vector<float> inputs(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::uniform_real_distribution<float> wide(-120.0f, 120.0f);
    const float inf = std::numeric_limits<float>::infinity();
    const float specials[] = {
        0.0f,   -0.0f,  inf,     -inf,    std::numeric_limits<float>::quiet_NaN(),
        87.0f,  -87.0f, 88.0f,   -88.0f,  87.5f,
        -87.5f, 1e-40f, -1e-40f, 44.0f,   -44.0f,
        9.0f,   -9.0f,  3.4e38f, -3.4e38f};
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
        const uint32_t pick = rng() % 10;
        x[i] = pick == 0  ? specials[rng() % (sizeof specials / sizeof specials[0])]
               : pick < 3 ? wide(rng)
                          : normal(rng);
    }
    return x;
}

void expect_same_bits(const std::vector<float> &a, const std::vector<float> &b, const char *what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) && std::isnan(b[i])) continue;
        ASSERT_EQ(bits(a[i]), bits(b[i]))
            << what << " element " << i << ": " << a[i] << " vs " << b[i];
    }
}

TEST(Activation, Avx2AndPortableGiveTheSameBitsAtEveryLength) {
    if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU (or LLMKV_CPU_FEATURES=portable)";
#if defined(__x86_64__)
    for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 64, 67, 255, 256, 4099}) {
        const std::vector<float> g = inputs(n, uint32_t(n)), u = inputs(n, uint32_t(n) + 1000);
        for (int glu = 0; glu < 2; ++glu) {
            std::vector<float> a = g, b = g;
            (glu ? geglu_avx2 : swiglu_avx2)(a.data(), u.data(), n);
            (glu ? geglu_portable : swiglu_portable)(b.data(), u.data(), n);
            expect_same_bits(a, b, glu ? "geglu" : "swiglu");
        }
    }
#endif
}

TEST(Activation, EachElementIsIndependentOfItsNeighboursAndOfChunking) {
    const size_t n = 1000;
    const std::vector<float> g = inputs(n, 7), u = inputs(n, 8);
    for (bool avx2 : {false, true}) {
        if (avx2 && !cpu_has_avx2()) continue;
        for (int glu = 0; glu < 2; ++glu) {
            const GluFn fn = glu ? geglu_kernel(avx2) : swiglu_kernel(avx2);
            std::vector<float> whole = g, pieces = g;
            fn(whole.data(), u.data(), n);
            for (size_t b = 0, len = 1; b < n; b += len, len = len % 13 + 1)
                fn(pieces.data() + b, u.data() + b, std::min(len, n - b));
            expect_same_bits(whole, pieces, glu ? "geglu" : "swiglu");
        }
    }
}

TEST(Activation, CloseToTheDoublePrecisionFormulas) {
    const size_t n = 20000;
    std::vector<float> g(n), u(n, 1.0f);
    for (size_t i = 0; i < n; ++i) g[i] = -30.0f + 60.0f * float(i) / float(n);
    for (bool avx2 : {false, true}) {
        if (avx2 && !cpu_has_avx2()) continue;
        std::vector<float> s = g, t = g;
        swiglu_kernel(avx2)(s.data(), u.data(), n);
        geglu_kernel(avx2)(t.data(), u.data(), n);
        for (size_t i = 0; i < n; ++i) {
            const double x = g[i];
            const double silu = x / (1.0 + std::exp(-x));
            // 0.5 x (1 + tanh y) written as x / (1 + e^-2y), which does not cancel for x << 0.
            const double gelu =
                x / (1.0 + std::exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
            EXPECT_NEAR(s[i], silu, 4e-7 * std::fabs(silu) + 1e-30) << "silu(" << x << ")";
            // GeGLU's exponent z is rounded to float first: e^z then carries |z| times its
            // relative error (the same holds for 1 + tanh in float, which cancels too).
            const double z = 1.5957691216057308 * std::fabs(x + 0.044715 * x * x * x);
            EXPECT_NEAR(t[i], gelu, 3e-7 * (1.0 + z) * std::fabs(gelu) + 1e-30)
                << "gelu(" << x << ")";
        }
    }
}

TEST(Activation, ExpAtTheClampEdgesAndSpecials) {
    EXPECT_EQ(exp_fma_portable(0.0f), 1.0f);
    EXPECT_EQ(exp_fma_portable(-1000.0f), exp_fma_portable(-87.0f));  // clamped, normal
    EXPECT_GT(exp_fma_portable(-87.0f), 0.0f);
    EXPECT_TRUE(std::isfinite(exp_fma_portable(1000.0f)));  // clamped at 88
    EXPECT_EQ(exp_fma_portable(std::numeric_limits<float>::quiet_NaN()), exp_fma_portable(-87.0f));
    EXPECT_NEAR(exp_fma_portable(1.0f), 2.7182817f, 2.5e-7f);
}

}  // namespace
}  // namespace llmkv::cpu::kernels
