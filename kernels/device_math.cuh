// Device helpers shared by the kernels (nvcc only): bit-exact ports of the CPU's scalar
// conversions (src/common/half.h, src/kv/codec.cpp), so the sealing kernels produce the
// same bytes as the CPU encoders, plus warp reductions and the row-group Hadamard.
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

namespace llmkv::cuda {

constexpr float kFp16Max = 65504.0f;

__device__ __forceinline__ float fp16_bits_to_f32(uint16_t h) {
    return __half2float(__ushort_as_half(h));  // exact for every non-NaN value
}

// fp32_to_fp16 of src/common/half.h, bit for bit (NaN payloads included).
__device__ __forceinline__ uint16_t f32_to_fp16_bits(float f) {
    const uint32_t x = __float_as_uint(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
    if (abs < 0x38800000u) {
        if (abs < 0x33000000u) return uint16_t(sign);
        const uint32_t e = abs >> 23;
        const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;
        uint32_t half_mant = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
        return uint16_t(sign | half_mant);
    }
    const uint32_t e = (abs >> 23) - 127 + 15;
    const uint32_t m = abs & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13);
    const uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return uint16_t(sign | h);
}

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) {
    return __uint_as_float(uint32_t(b) << 16);
}

// fp32_to_bf16 of src/common/half.h.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
    const uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
    const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return uint16_t((x + rounding) >> 16);
}

// e4m3fn -> f32 (fp8_e4m3_to_fp32 of kv/codec.h): magnitude bits shifted into an fp16.
__device__ __forceinline__ float fp8_e4m3_to_f32(uint32_t b) {
    const uint16_t h = uint16_t(((b & 0x80u) << 8) | ((b & 0x7Fu) << 7));
    return fp16_bits_to_f32(h) * 256.0f;
}

// fp32_to_fp8_e4m3 of src/kv/codec.cpp (round to nearest even, saturate at 448, NaN -> 0).
__device__ __forceinline__ uint8_t f32_to_fp8_e4m3(float f) {
    const uint32_t x = __float_as_uint(f);
    const uint8_t sign = uint8_t((x >> 24) & 0x80u);
    const uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return 0;
    if (a >= 0x43e00000u) return uint8_t(sign | 0x7Eu);
    if (a < 0x3c800000u) {
        const float af = __uint_as_float(a);
        return uint8_t(sign | uint8_t(__float2int_rn(__fmul_rn(af, 512.0f))));
    }
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    uint32_t e = (r >> 20) - ((127u - 7u) << 3);
    if (e > 0x7Eu) e = 0x7Eu;
    return uint8_t(sign | e);
}

// The smallest fp16 >= x (0 <= x <= 65504) and the largest fp16 <= x (|x| <= 65504).
__device__ __forceinline__ uint16_t fp16_round_up(float x) {
    uint16_t h = f32_to_fp16_bits(x);
    if (fp16_bits_to_f32(h) < x) ++h;
    return h;
}
__device__ __forceinline__ uint16_t fp16_round_down(float x) {
    uint16_t h = f32_to_fp16_bits(x);
    if (fp16_bits_to_f32(h) > x) {
        if (h == 0x0000u || h == 0x8000u) return 0x8001u;
        h = (h & 0x8000u) ? uint16_t(h + 1) : uint16_t(h - 1);
    }
    return h;
}

__device__ __forceinline__ float sanitize(float x) {
    if (isnan(x)) return 0.0f;
    return fminf(fmaxf(x, -kFp16Max), kFp16Max);
}

// fp16 at an even byte address.
__device__ __forceinline__ float load_fp16(const uint8_t *p) {
    return fp16_bits_to_f32(*reinterpret_cast<const uint16_t *>(p));
}

// Sum over the `width` lanes of an aligned lane group (width a power of two <= 32). Every
// lane of the warp must call it.
__device__ __forceinline__ float group_sum(float v, uint32_t width) {
    for (uint32_t o = width / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// x <- H x (orthonormal Walsh-Hadamard, hadamard_transform of kv/hadamard.cpp) for a vector
// of D = 8 * lanes floats spread over an aligned group of `lanes` lanes, 8 consecutive dims
// per lane (lane r holds dims [8r, 8r + 8)). Same butterflies in the same stage order as the
// CPU, so the result is bitwise identical. Every lane of the warp must call it.
__device__ __forceinline__ void group_hadamard(float (&x)[8], uint32_t lanes, float scale) {
    const uint32_t r = threadIdx.x % lanes;
    for (uint32_t len = 1; len < 8; len <<= 1) {
        for (uint32_t i = 0; i < 8; i += 2 * len) {
            for (uint32_t j = i; j < i + len; ++j) {
                const float a = x[j], b = x[j + len];
                x[j] = __fadd_rn(a, b);
                x[j + len] = __fsub_rn(a, b);
            }
        }
    }
    for (uint32_t m = 1; m < lanes; m <<= 1) {
        const bool upper = (r & m) != 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float other = __shfl_xor_sync(0xffffffffu, x[j], m);
            x[j] = upper ? __fsub_rn(other, x[j]) : __fadd_rn(x[j], other);
        }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = __fmul_rn(x[j], scale);
}

}  // namespace llmkv::cuda

namespace llmkv::cuda {

// fp16_to_fp32 of src/common/half.h including NaN payloads (the hardware conversion may
// canonicalize NaNs; the bf16 encoder must not).
__device__ __forceinline__ float fp16_bits_to_f32_exact(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u) {
        return __uint_as_float((uint32_t(h & 0x8000u) << 16) | 0x7f800000u |
                               (uint32_t(h & 0x3ffu) << 13));
    }
    return fp16_bits_to_f32(h);
}

}  // namespace llmkv::cuda
