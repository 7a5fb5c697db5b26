// Floating-point helpers whose results must not depend on the C runtime.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace llmkv
