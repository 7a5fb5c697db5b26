// llmkv's CUDA emulator: the part of cuda_fp16.h the kernels use. __half is 16 bits of IEEE
// binary16; the conversions are exact (to f32) and round to nearest even (from f32).
#pragma once

#include <stdint.h>
#include <string.h>

struct __half {
    unsigned short x;
};

inline __half __ushort_as_half(unsigned short v) {
    return __half{v};
}
inline unsigned short __half_as_ushort(__half h) {
    return h.x;
}

inline float __half2float(__half h) {
    const uint32_t sign = uint32_t(h.x & 0x8000u) << 16;
    uint32_t exp = (h.x >> 10) & 0x1fu, mant = h.x & 0x3ffu, bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        exp = 113;
        while (!(mant & 0x400u)) mant <<= 1, --exp;
        bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

inline __half __float2half_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u)
        return __half{uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
    if (abs >= 0x477ff000u) return __half{uint16_t(sign | 0x7c00u)};
    if (abs < 0x38800000u) {
        if (abs < 0x33000000u) return __half{uint16_t(sign)};
        const uint32_t e = abs >> 23, m = (abs & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t hm = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (hm & 1u))) ++hm;
        return __half{uint16_t(sign | hm)};
    }
    uint32_t h = (((abs >> 23) - 112u) << 10) | ((abs & 0x7fffffu) >> 13);
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return __half{uint16_t(sign | h)};
}
inline __half __float2half(float f) {
    return __float2half_rn(f);
}
