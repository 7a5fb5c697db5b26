// common/float_math.h: exp, log, pow, tanh, sin and cos that compute the same bits on every
// platform. Accuracy against the C runtime's double-precision functions (glibc's are
// correctly rounded in all but rare cases), the special values, and a fingerprint of the
// bits over fixed grids: the Linux and the Windows (Wine) runs of this test check the same
// number, which is the cross-platform promise itself.
#include "common/float_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace llmkv {
namespace {

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

uint64_t bits_of(double d) {
    uint64_t u;
    std::memcpy(&u, &d, sizeof u);
    return u;
}

// Distance in units in the last place between two finite floats of the same sign.
int64_t ulps(float a, float b) {
    return std::llabs(int64_t(bits_of(a)) - int64_t(bits_of(b)));
}
int64_t ulps(double a, double b) {
    return std::llabs(int64_t(bits_of(a)) - int64_t(bits_of(b)));
}

float float_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// FNV-1a over the result bits.
struct Fingerprint {
    uint64_t h = 1469598103934665603ull;
    void add(uint32_t v) {
        for (int i = 0; i < 4; ++i) {
            h ^= (v >> (8 * i)) & 0xff;
            h *= 1099511628211ull;
        }
    }
};

TEST(FloatMath, ExpFloatIsCorrectlyRoundedAlmostEverywhere) {
    // Every 61st float from -104 to 89 (about 33 million / 61 inputs of each sign).
    int64_t worst = 0;
    uint64_t checked = 0, off = 0;
    for (float lo : {-104.0f, 0.0f}) {
        const float hi = lo < 0 ? -0.0f : 89.0f;
        const uint32_t a = bits_of(lo < 0 ? hi : lo), b = bits_of(lo < 0 ? lo : hi);
        for (uint32_t u = a; u <= b; u += 61) {
            const float x = float_from_bits(u);
            const float want = float(std::exp(double(x)));
            const float got = exp_float(x);
            const int64_t d = ulps(got, want);
            worst = std::max(worst, d);
            off += d != 0;
            ++checked;
        }
    }
    EXPECT_LE(worst, 1);
    EXPECT_LT(double(off) / double(checked), 1e-5) << off << " of " << checked;
}

TEST(FloatMath, SpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(exp_float(0.0f), 1.0f);
    EXPECT_EQ(exp_float(-0.0f), 1.0f);
    EXPECT_EQ(exp_float(inf), inf);
    EXPECT_EQ(exp_float(89.5f), inf);
    EXPECT_EQ(exp_float(-inf), 0.0f);
    EXPECT_EQ(exp_float(-150.0f), 0.0f);
    EXPECT_TRUE(std::isnan(exp_float(std::numeric_limits<float>::quiet_NaN())));
    EXPECT_GT(exp_float(-103.0f), 0.0f);  // a subnormal, not flushed
    EXPECT_EQ(exp_double(0.0), 1.0);
    EXPECT_EQ(exp_double(710.0), HUGE_VAL);
    EXPECT_EQ(exp_double(-746.0), 0.0);
    EXPECT_LE(ulps(exp_double(1.0), 2.718281828459045), 1);
    EXPECT_EQ(log_double(1.0), 0.0);
    EXPECT_EQ(log_double(0.0), -HUGE_VAL);
    EXPECT_TRUE(std::isnan(log_double(-1.0)));
    EXPECT_EQ(log_double(HUGE_VAL), HUGE_VAL);
    EXPECT_EQ(tanh_float(0.0f), 0.0f);
    EXPECT_EQ(tanh_float(30.0f), 1.0f);
    EXPECT_EQ(tanh_float(-30.0f), -1.0f);
    float s = 0, c = 0;
    sincos_float(0.0f, s, c);
    EXPECT_EQ(s, 0.0f);
    EXPECT_EQ(c, 1.0f);
    sincos_float(inf, s, c);
    EXPECT_TRUE(std::isnan(s) && std::isnan(c));
}

TEST(FloatMath, DoubleExpLogAndPowAreWithinAFewUlps) {
    int64_t worst_exp = 0, worst_log = 0, worst_pow = 0;
    for (int i = -70000; i <= 70000; ++i) {
        const double x = i * 0.0101234567;
        worst_exp = std::max(worst_exp, ulps(exp_double(x), std::exp(x)));
    }
    for (int i = 1; i <= 100000; ++i) {
        const double x = std::ldexp(1.0 + i * 0.0000137, (i % 200) - 100);
        worst_log = std::max(worst_log, ulps(log_double(x), std::log(x)));
    }
    // RoPE frequencies: base^(-2i/d) for the bases and dimensions models use.
    for (double base : {10000.0, 500000.0, 1000000.0, 10000.0 * 8})
        for (int d : {64, 128, 256})
            for (int i = 0; i < d / 2; ++i) {
                const double e = double(2 * i) / d;
                worst_pow = std::max(worst_pow, ulps(pow_double(base, e), std::pow(base, e)));
            }
    EXPECT_LE(worst_exp, 2);
    EXPECT_LE(worst_log, 2);
    EXPECT_LE(worst_pow, 16);  // exp(e log b): log b's rounding scaled by e log b (< 16)
}

TEST(FloatMath, TanhAndSinCosWithinOneUlpOfTheCorrectlyRoundedValue) {
    int64_t worst_tanh = 0, worst_sin = 0, worst_cos = 0;
    for (int i = -200000; i <= 200000; ++i) {
        const float x = float(i) * 0.0001234f;
        worst_tanh = std::max(worst_tanh, ulps(tanh_float(x), float(std::tanh(double(x)))));
    }
    // RoPE angles: position * inverse frequency, positions up to 131072.
    for (uint32_t pos = 0; pos < 131072; pos += 7) {
        for (float inv_freq : {1.0f, 0.31622776f, 0.1f, 0.0017782794f, 1.0e-4f}) {
            const float x = float(pos) * inv_freq;
            float s, c;
            sincos_float(x, s, c);
            worst_sin = std::max(worst_sin, ulps(s, float(std::sin(double(x)))));
            worst_cos = std::max(worst_cos, ulps(c, float(std::cos(double(x)))));
        }
    }
    EXPECT_LE(worst_tanh, 1);
    EXPECT_LE(worst_sin, 1);
    EXPECT_LE(worst_cos, 1);
}

// The bits over fixed grids, as one number. The same number on every platform is the point of
// these functions: scripts/test_windows.sh runs this test under Wine against the same value.
// A deliberate change to the functions changes it (print the new one with the failure).
TEST(FloatMath, ResultsAreTheSameBitsOnEveryPlatform) {
    Fingerprint f;
    for (int i = -100000; i <= 100000; ++i) {
        const float x = float(i) * 0.000877f;
        f.add(bits_of(exp_float(x)));
        f.add(bits_of(tanh_float(x)));
        float s, c;
        sincos_float(x * 37.0f, s, c);
        f.add(bits_of(s));
        f.add(bits_of(c));
    }
    for (int i = 0; i < 64; ++i) {
        const uint64_t p = bits_of(pow_double(10000.0, double(2 * i) / 128));
        f.add(uint32_t(p));
        f.add(uint32_t(p >> 32));
        const uint64_t e = bits_of(exp_double(-0.37 * i));
        f.add(uint32_t(e));
        f.add(uint32_t(e >> 32));
    }
    EXPECT_EQ(f.h, 0xa728fd20a68a6143ull) << std::hex << "fingerprint 0x" << f.h;
}

}  // namespace
}  // namespace llmkv
