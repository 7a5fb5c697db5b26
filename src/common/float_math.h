// Floating-point helpers whose results must not depend on the C runtime.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace llmkv {

// a * b + c rounded once, to float, without an FMA instruction: the portable kernels' twin
// of the SIMD kernels' vfmadd, bit for bit. std::fma cannot be used for that: MinGW-w64's
// fmaf rounds the product first (measured: 29% of random inputs differ from the correctly
// rounded result), and a C runtime may fall back to slow code.
// How: a * b is exact in double (2 x 24 <= 53 bits); the sum is rounded to odd in double
// (TwoSum gives the error; an inexact even result moves one ulp toward the exact value),
// and a round-to-odd result with at least two extra bits rounds to float exactly as the
// exact value would (53 >= 24 + 2).
inline float fma_float(float a, float b, float c) noexcept {
    const double p = double(a) * double(b);
    double s = p + double(c);
    if (std::isfinite(s)) {
        const double bv = s - p;
        const double err = (p - (s - bv)) + (double(c) - bv);
        if (err != 0) {
            uint64_t u;
            std::memcpy(&u, &s, sizeof u);
            if ((u & 1) == 0) {
                u = (err > 0) == (s > 0) ? u + 1 : u - 1;
                std::memcpy(&s, &u, sizeof s);
            }
        }
    }
    return float(s);
}

// ---- exp, log, tanh, sin, cos whose bits do not depend on the C runtime -------------------
// glibc, MinGW-w64 and MSVC round expf/sinf/cosf/tanhf (and pow) differently in the last bit
// (measured: MinGW's expf, sinf and cosf differ from glibc's), which would make a model decode
// differently on another OS whenever two tokens nearly tie. These use only IEEE double
// arithmetic (+, -, *, / and exact scaling), so every platform computes the same bits; the
// float versions evaluate in double and round once, which is the correctly rounded result
// except where the double value (about 1 ulp of double off) straddles a float rounding
// boundary (about 1 input in 2^28). Accuracy: exp_double and log_double within a few ulp of
// double; sin/cos reduce by pi/2 in three parts, exact for |x| < 2^20 (RoPE angles are at
// most the context length), then lose accuracy gracefully but stay deterministic.

namespace float_math_detail {

constexpr double kInvLn2 = 1.4426950408889634;    // 1/ln 2
constexpr double kLn2Hi = 0x1.62e42fee00000p-1;   // ln 2, high part (k * hi is exact)
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;  // ln 2 - hi
constexpr double kRound = 0x1.8p52;               // adding and subtracting it rounds to nearest

// e^r for |r| <= 0.35: the Taylor series to r^13 (the next term is below 2^-57 relative).
inline double exp_series(double r) noexcept {
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    return p * r + 1.0;
}

}  // namespace float_math_detail

// e^x. Overflow gives +inf, underflow 0 (through the subnormals), NaN stays NaN.
inline double exp_double(double x) noexcept {
    using namespace float_math_detail;
    if (!(x == x)) return x;
    if (x > 709.8) return HUGE_VAL;
    if (x < -745.2) return 0.0;
    const double k = (x * kInvLn2 + kRound) - kRound;  // |k| <= 1075
    const double r = (x - k * kLn2Hi) - k * kLn2Lo;    // |r| <= 0.35
    return std::ldexp(exp_series(r), int(k));          // exact (rounds once in the subnormals)
}

// e^x in float (the softmax, SiLU): the double result rounded once. Scaling by 2^k is a
// multiplication by a constructed power of two (no call), so loops can inline it.
inline float exp_float(float xf) noexcept {
    using namespace float_math_detail;
    if (!(xf == xf)) return xf;
    if (xf > 89.0f) return std::numeric_limits<float>::infinity();
    if (xf < -104.0f) return 0.0f;  // below half the smallest subnormal
    const double x = double(xf);
    const double k = (x * kInvLn2 + kRound) - kRound;  // |k| <= 151
    const double r = (x - k * kLn2Hi) - k * kLn2Lo;
    const uint64_t bits = uint64_t(int64_t(k) + 1023) << 52;
    double scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return float(exp_series(r) * scale);
}

// Natural logarithm: NaN for x < 0 or NaN, -inf for 0, +inf for +inf.
inline double log_double(double x) noexcept {
    if (!(x > 0.0)) return x == 0.0 ? -HUGE_VAL : std::numeric_limits<double>::quiet_NaN();
    if (x == HUGE_VAL) return x;
    int e = 0;
    double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1): exact
    if (m < 0.70710678118654752) {
        m *= 2.0;
        --e;
    }
    // log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716: series to s^23.
    const double f = m - 1.0;
    const double s = f / (2.0 + f);
    const double s2 = s * s;
    double p = 1.0 / 23.0;
    p = p * s2 + 1.0 / 21.0;
    p = p * s2 + 1.0 / 19.0;
    p = p * s2 + 1.0 / 17.0;
    p = p * s2 + 1.0 / 15.0;
    p = p * s2 + 1.0 / 13.0;
    p = p * s2 + 1.0 / 11.0;
    p = p * s2 + 1.0 / 9.0;
    p = p * s2 + 1.0 / 7.0;
    p = p * s2 + 1.0 / 5.0;
    p = p * s2 + 1.0 / 3.0;
    const double log_m = 2.0 * s + 2.0 * s * s2 * p;
    return double(e) * float_math_detail::kLn2Hi + (log_m + double(e) * float_math_detail::kLn2Lo);
}

// base^exponent for base > 0 (the RoPE frequencies): exp(exponent log base).
inline double pow_double(double base, double exponent) noexcept {
    return exp_double(exponent * log_double(base));
}

// tanh, evaluated in double and rounded once.
inline float tanh_float(float xf) noexcept {
    const double x = double(xf);
    const double a = x < 0 ? -x : x;
    if (!(a == a)) return xf;
    double t;
    if (a > 20.0) {
        t = 1.0;
    } else if (a < 0.0625) {
        // Taylor series to x^11 (the next term is below 2^-60 relative).
        const double a2 = a * a;
        double p = -1382.0 / 155925.0;
        p = p * a2 + 62.0 / 2835.0;
        p = p * a2 - 17.0 / 315.0;
        p = p * a2 + 2.0 / 15.0;
        p = p * a2 - 1.0 / 3.0;
        t = a + a * a2 * p;
    } else {
        t = 1.0 - 2.0 / (exp_double(2.0 * a) + 1.0);
    }
    return float(x < 0 ? -t : t);
}

// sin and cos of one angle, evaluated in double and rounded once each.
inline void sincos_float(float xf, float &sin_out, float &cos_out) noexcept {
    const double x = double(xf);
    if (!(x - x == 0.0)) {  // inf or NaN
        sin_out = cos_out = std::numeric_limits<float>::quiet_NaN();
        return;
    }
    constexpr double kTwoOverPi = 0.63661977236758134;
    // pi/2 in three parts of 33, 33 and 53 bits: k * part1 and k * part2 are exact for |k| < 2^20.
    constexpr double kPio2_1 = 0x1.921fb544p0;
    constexpr double kPio2_2 = 0x1.0b4611a6p-34;
    constexpr double kPio2_3 = 0x1.3198a2e037073p-69;
    const double k = (x * kTwoOverPi + float_math_detail::kRound) - float_math_detail::kRound;
    const double r = ((x - k * kPio2_1) - k * kPio2_2) - k * kPio2_3;  // |r| <= pi/4 (+ tiny)
    const double r2 = r * r;
    // Taylor series: sin to r^19, cos to r^18 (next terms below 2^-60 relative).
    double ps = -1.0 / 121645100408832000.0;
    ps = ps * r2 + 1.0 / 355687428096000.0;
    ps = ps * r2 - 1.0 / 1307674368000.0;
    ps = ps * r2 + 1.0 / 6227020800.0;
    ps = ps * r2 - 1.0 / 39916800.0;
    ps = ps * r2 + 1.0 / 362880.0;
    ps = ps * r2 - 1.0 / 5040.0;
    ps = ps * r2 + 1.0 / 120.0;
    ps = ps * r2 - 1.0 / 6.0;
    const double s = r + r * r2 * ps;
    double pc = 1.0 / 6402373705728000.0;
    pc = pc * r2 - 1.0 / 20922789888000.0;
    pc = pc * r2 + 1.0 / 87178291200.0;
    pc = pc * r2 - 1.0 / 479001600.0;
    pc = pc * r2 + 1.0 / 3628800.0;
    pc = pc * r2 - 1.0 / 40320.0;
    pc = pc * r2 + 1.0 / 720.0;
    pc = pc * r2 - 1.0 / 24.0;
    pc = pc * r2 + 0.5;
    const double c = 1.0 - r2 * pc;
    // The quadrant: sin(x) = sin(r + k pi/2).
    const int q = int(int64_t(k) & 3);
    const double sv = q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
    const double cv = q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
    sin_out = float(sv);
    cos_out = float(cv);
}

}  // namespace llmkv
