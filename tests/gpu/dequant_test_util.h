// Helpers of the dequantization tests (dequant_host_test.cpp on the host, dequant_test.cpp on
// a device): random packed rows of every GGUF type with extreme scales mixed in, the CPU
// reference (dequantize_row_reference) when it knows the type, fp16 comparison, and a
// second, independent statement of each format: whole blocks decoded in the loop order of
// the GGML definitions (bit planes walked in order, scales unpacked with word masks), so that
// the per-element decoders of kernels/dequant_formats.cuh are checked against a different
// formulation even for a type the CPU reference does not decode yet.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "tensor/tensor_type.h"
#include "tensor/weights.h"

namespace llmkv::dqtest {

// Every type with a device decoder, and a row length for its tests (float types: an odd one).
struct TypeCase {
    TensorType type;
    uint32_t cols;
};

inline std::vector<TypeCase> all_type_cases() {
    return {{TensorType::F32, 37},    {TensorType::F16, 37},    {TensorType::BF16, 37},
            {TensorType::Q4_0, 512},  {TensorType::Q4_1, 512},  {TensorType::Q5_0, 512},
            {TensorType::Q5_1, 512},  {TensorType::Q8_0, 512},  {TensorType::IQ4_NL, 512},
            {TensorType::MXFP4, 512}, {TensorType::Q2_K, 1024}, {TensorType::Q3_K, 1024},
            {TensorType::Q4_K, 1024}, {TensorType::Q5_K, 1024}, {TensorType::Q6_K, 1024},
            {TensorType::Q8_K, 1024}};
}

// The test-name suffix of a TypeCase parameter: its type's name.
inline std::string type_case_name(const ::testing::TestParamInfo<TypeCase> &info) {
    return tensor_type_name(info.param.type);
}

inline size_t row_bytes_of(TensorType t, uint32_t cols) {
    return size_t(cols / tensor_type_block_elements(t)) * tensor_type_block_bytes(t);
}

// Byte offsets of the fp16 scale fields (d, and m or dmin) inside one block.
inline std::vector<size_t> fp16_scale_fields(TensorType t) {
    switch (t) {
        case TensorType::Q4_0:
        case TensorType::Q5_0:
        case TensorType::Q8_0:
        case TensorType::IQ4_NL:
            return {0};
        case TensorType::Q4_1:
        case TensorType::Q5_1:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
            return {0, 2};
        case TensorType::Q2_K:
            return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
        case TensorType::Q3_K:
            return {offsetof(BlockQ3_K, d)};
        case TensorType::Q6_K:
            return {offsetof(BlockQ6_K, d)};
        default:
            return {};
    }
}

// Random packed rows: random bytes, with each block's scales chosen by block number b:
// b % 4 == 0 typical (a normal value, sd 0.02), 1 raw random bits (any fp16, inf and NaN
// included), 2 an extreme (fp16 max, min subnormal, +-0, 1000, inf, NaN, ...), 3 typical.
// Q8_K's f32 d likewise; float rows are half random bit patterns, half normal values.
// typical_only: every block's scales typical, float rows all normal values (no overflow).
inline std::vector<uint8_t> random_rows(TensorType t, uint32_t rows, uint32_t cols, uint32_t seed,
                                        bool typical_only = false) {
    std::mt19937 rng(seed);
    const size_t rb = row_bytes_of(t, cols);
    std::vector<uint8_t> data(size_t(rows) * rb);
    for (auto &b : data) b = uint8_t(rng() >> 24);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    static const uint16_t kExtreme16[] = {
        0x7bff, 0xfbff, 0x0001, 0x8001, 0x0000,           0x8000, 0x0400, 0x63d0 /* 1000 */,
        0x7c00, 0xfc00, 0x7e00, 0x3c00, 0x5a40 /* 200 */, 0xd8b0 /* -150 */};
    static const float kExtreme32[] = {3.4028235e38f, -3.4028235e38f, 1e-45f, 1e-38f,   0.0f,
                                       -0.0f,         600.0f,         1.0f,   INFINITY, NAN};
    if (t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16) {
        const size_t eb = tensor_type_block_bytes(t);
        for (size_t i = 0; i < data.size() / eb; i += typical_only ? 1 : 2) {
            const float f = normal(rng) * 50.0f;
            uint8_t *p = data.data() + i * eb;
            if (t == TensorType::F32) {
                std::memcpy(p, &f, 4);
            } else {
                const uint16_t h = t == TensorType::F16 ? fp32_to_fp16(f) : fp32_to_bf16(f);
                std::memcpy(p, &h, 2);
            }
        }
        return data;
    }
    const size_t bb = tensor_type_block_bytes(t);
    const size_t n_blocks = data.size() / bb;
    for (size_t b = 0; b < n_blocks; ++b) {
        uint8_t *blk = data.data() + b * bb;
        const size_t mode = typical_only ? 0 : b % 4, pick = b / 4;
        if (t == TensorType::MXFP4) {  // the E8M0 byte: any (mode 1, 2) or 2^-9..2^-2 scales
            if (mode == 0 || mode == 3) blk[0] = uint8_t(119 + pick % 7);
            if (mode == 2) blk[0] = uint8_t(pick % 2 ? 255 : pick % 3);
            continue;
        }
        if (t == TensorType::Q8_K) {
            if (mode == 1) continue;
            const float d = mode == 2 ? kExtreme32[pick % (sizeof kExtreme32 / 4)] : normal(rng);
            std::memcpy(blk, &d, 4);
            continue;
        }
        const std::vector<size_t> fields = fp16_scale_fields(t);
        for (size_t f = 0; f < fields.size(); ++f) {
            if (mode == 1) continue;
            const uint16_t h = mode == 2 ? kExtreme16[(pick + 5 * f) % (sizeof kExtreme16 / 2)]
                                         : fp32_to_fp16(normal(rng));
            std::memcpy(blk + fields[f], &h, 2);
        }
    }
    return data;
}

// The CPU reference of one row, or false with the reason (a type it does not decode yet).
inline bool cpu_reference_row(TensorType t, const uint8_t *row, uint32_t cols, float *out,
                              std::string *why) {
    try {
        dequantize_row_reference(t, row, out, cols);
        return true;
    } catch (const Error &e) {
        *why = e.what();
        return false;
    }
}

// fp16 bit patterns equal, or both NaN (NaN payloads and signs are not kept alike: the
// device's arithmetic returns its canonical NaN).
inline bool same_fp16(uint16_t a, uint16_t b) {
    const bool nan_a = (a & 0x7c00u) == 0x7c00u && (a & 0x3ffu) != 0;
    const bool nan_b = (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
    return a == b || (nan_a && nan_b);
}
inline bool same_f32(float a, float b) {
    uint32_t x, y;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    return x == y || (std::isnan(a) && std::isnan(b));
}

// fp16 of a reference value and whether it is beyond the fp16 range (the upload's error).
inline bool beyond_fp16(float f) {
    return (fp32_to_fp16(f) & 0x7c00u) == 0x7c00u && std::isfinite(f);
}

// ---- the formats in GGML's loop order -------------------------------------------------------

inline float rmul(float a, float b) {  // one rounding, never fused
    volatile float p = a * b;
    return p;
}
inline float h2f(const uint8_t *p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return fp16_to_fp32(v);
}

// Decodes one block of type t (tensor_type_block_elements(t) values) into y.
inline bool spec_decode_block(TensorType t, const uint8_t *x, float *y) {
    switch (t) {
        case TensorType::F32:
            std::memcpy(y, x, 4);
            return true;
        case TensorType::F16:
            y[0] = h2f(x);
            return true;
        case TensorType::BF16: {
            uint16_t v;
            std::memcpy(&v, x, 2);
            y[0] = bf16_to_fp32(v);
            return true;
        }
        case TensorType::Q4_0: {
            const float d = h2f(x);
            for (int j = 0; j < 16; ++j) {
                y[j] = rmul(float(int(x[2 + j] & 15) - 8), d);
                y[j + 16] = rmul(float(int(x[2 + j] >> 4) - 8), d);
            }
            return true;
        }
        case TensorType::Q4_1: {
            const float d = h2f(x), m = h2f(x + 2);
            for (int j = 0; j < 16; ++j) {
                y[j] = rmul(float(x[4 + j] & 15), d) + m;
                y[j + 16] = rmul(float(x[4 + j] >> 4), d) + m;
            }
            return true;
        }
        case TensorType::Q5_0:
        case TensorType::Q5_1: {
            const bool q51 = t == TensorType::Q5_1;
            const float d = h2f(x), m = q51 ? h2f(x + 2) : 0.0f;
            uint32_t qh;
            std::memcpy(&qh, x + (q51 ? 4 : 2), 4);
            const uint8_t *qs = x + (q51 ? 8 : 6);
            for (int j = 0; j < 16; ++j) {
                const uint32_t xh0 = ((qh >> j) << 4) & 0x10u;
                const uint32_t xh1 = (qh >> (j + 12)) & 0x10u;
                const uint32_t q0 = (qs[j] & 15u) | xh0, q1 = (uint32_t(qs[j]) >> 4) | xh1;
                if (q51) {
                    y[j] = rmul(float(q0), d) + m;
                    y[j + 16] = rmul(float(q1), d) + m;
                } else {
                    y[j] = rmul(float(int(q0) - 16), d);
                    y[j + 16] = rmul(float(int(q1) - 16), d);
                }
            }
            return true;
        }
        case TensorType::Q8_0: {
            const float d = h2f(x);
            for (int j = 0; j < 32; ++j) y[j] = rmul(float(int8_t(x[2 + j])), d);
            return true;
        }
        case TensorType::IQ4_NL: {
            const float d = h2f(x);
            for (int j = 0; j < 16; ++j) {
                y[j] = rmul(float(kIq4nlValues[x[2 + j] & 15]), d);
                y[j + 16] = rmul(float(kIq4nlValues[x[2 + j] >> 4]), d);
            }
            return true;
        }
        case TensorType::MXFP4: {  // 2^(e - 128) (the spec's constant, not the decoder's)
            const uint32_t bits = mxfp4_scale_bits(x[0]);
            float d;
            std::memcpy(&d, &bits, 4);
            for (int j = 0; j < 16; ++j) {
                y[j] = rmul(float(kMxfp4Values[x[1 + j] & 15]), d);
                y[j + 16] = rmul(float(kMxfp4Values[x[1 + j] >> 4]), d);
            }
            return true;
        }
        case TensorType::Q2_K: {
            const uint8_t *sc = x, *q = x + 16;
            const float d = h2f(x + 80), dmin = h2f(x + 82);
            int is = 0;
            for (int n = 0; n < 256; n += 128) {
                int shift = 0;
                for (int j = 0; j < 4; ++j) {
                    for (int half = 0; half < 2; ++half) {
                        const uint8_t s = sc[is++];
                        const float dl = rmul(d, float(s & 15)), ml = rmul(dmin, float(s >> 4));
                        for (int l = 0; l < 16; ++l)
                            *y++ = rmul(dl, float((q[l + 16 * half] >> shift) & 3)) - ml;
                    }
                    shift += 2;
                }
                q += 32;
            }
            return true;
        }
        case TensorType::Q3_K: {
            const uint8_t *hm = x, *q = x + 32;
            const float d = h2f(x + 108);
            constexpr uint32_t kmask1 = 0x03030303u, kmask2 = 0x0f0f0f0fu;
            uint32_t aux[4];
            std::memcpy(aux, x + 96, 12);
            const uint32_t tmp = aux[2];
            aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
            aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
            aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
            aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
            int8_t scales[16];
            std::memcpy(scales, aux, 16);
            int is = 0;
            uint32_t m = 1;
            for (int n = 0; n < 256; n += 128) {
                int shift = 0;
                for (int j = 0; j < 4; ++j) {
                    for (int half = 0; half < 2; ++half) {
                        const float dl = rmul(d, float(scales[is++] - 32));
                        for (int l = 16 * half; l < 16 * half + 16; ++l) {
                            const int v = int((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                            *y++ = rmul(dl, float(v));
                        }
                    }
                    shift += 2;
                    m <<= 1;
                }
                q += 32;
            }
            return true;
        }
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool q5 = t == TensorType::Q5_K;
            const float d = h2f(x), dmin = h2f(x + 2);
            const uint8_t *scales = x + 4, *qh = x + 16, *ql = x + (q5 ? 48 : 16);
            uint32_t u1 = 1, u2 = 2;
            for (int is = 0; is < 8; is += 2) {
                int sc1, m1, sc2, m2;
                k4_scale_min(scales, is, &sc1, &m1);
                k4_scale_min(scales, is + 1, &sc2, &m2);
                const float d1 = rmul(d, float(sc1)), mm1 = rmul(dmin, float(m1));
                const float d2 = rmul(d, float(sc2)), mm2 = rmul(dmin, float(m2));
                for (int l = 0; l < 32; ++l) {
                    const uint32_t v = (ql[l] & 15u) + (q5 && (qh[l] & u1) ? 16u : 0u);
                    *y++ = rmul(d1, float(v)) - mm1;
                }
                for (int l = 0; l < 32; ++l) {
                    const uint32_t v = (uint32_t(ql[l]) >> 4) + (q5 && (qh[l] & u2) ? 16u : 0u);
                    *y++ = rmul(d2, float(v)) - mm2;
                }
                ql += 32;
                u1 <<= 2;
                u2 <<= 2;
            }
            return true;
        }
        case TensorType::Q6_K: {
            const uint8_t *ql = x, *qh = x + 128;
            const int8_t *sc = reinterpret_cast<const int8_t *>(x + 192);
            const float d = h2f(x + 208);
            for (int n = 0; n < 256; n += 128) {
                for (int l = 0; l < 32; ++l) {
                    const int is = l / 16;
                    const int q1 = int((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = int((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[l] = rmul(rmul(d, float(sc[is])), float(q1));
                    y[l + 32] = rmul(rmul(d, float(sc[is + 2])), float(q2));
                    y[l + 64] = rmul(rmul(d, float(sc[is + 4])), float(q3));
                    y[l + 96] = rmul(rmul(d, float(sc[is + 6])), float(q4));
                }
                y += 128;
                ql += 64;
                qh += 32;
                sc += 8;
            }
            return true;
        }
        case TensorType::Q8_K: {
            float d;
            std::memcpy(&d, x, 4);
            for (int j = 0; j < 256; ++j) y[j] = rmul(float(int8_t(x[4 + j])), d);
            return true;
        }
    }
    return false;
}

inline void spec_decode_row(TensorType t, const uint8_t *row, uint32_t cols, float *out) {
    const int64_t be = tensor_type_block_elements(t);
    const size_t bb = tensor_type_block_bytes(t);
    for (int64_t b = 0; b < int64_t(cols) / be; ++b)
        spec_decode_block(t, row + size_t(b) * bb, out + b * be);
}

// The reference the device is held to: the CPU's when it decodes the type, else the loop-order
// statement above (*which says which).
inline void reference_row(TensorType t, const uint8_t *row, uint32_t cols, float *out,
                          std::string *which) {
    std::string why;
    if (cpu_reference_row(t, row, cols, out, &why)) {
        *which = "dequantize_row_reference";
        return;
    }
    spec_decode_row(t, row, cols, out);
    *which = "the loop-order statement (CPU reference: " + why + ")";
}

// Types and a row length the packed matvec reads (the float types: a multiple of 8).
inline std::vector<TypeCase> matvec_cases() {
    std::vector<TypeCase> cases;
    for (TypeCase c : all_type_cases()) {
        if (c.cols % 8 != 0) c.cols = 40;
        cases.push_back(c);
    }
    return cases;
}

// How far the CPU matmul may be from an f32 dot product of the weights w and activations x
// (cols each): it quantizes each block of 32 activations (256 for the k-quants) to 8 bits,
// |dx| <= max|x over the block| / 254 per element; plus 1e-5 of sum |w x| for the f32 sums.
// Float weights: the CPU keeps x in f32, only the sums' part.
inline double q8_activation_bound(TensorType t, const float *w, const float *x, uint32_t cols) {
    const uint32_t xblock = tensor_type_is_k_quant(t) ? 256 : 32;
    const bool float_type = tensor_type_block_elements(t) == 1;
    double bound = 0.0, mag = 0.0;
    for (uint32_t b0 = 0; b0 < cols; b0 += xblock) {
        double wsum = 0.0, xmax = 0.0;
        for (uint32_t k = b0; k < std::min(cols, b0 + xblock); ++k) {
            wsum += std::fabs(double(w[k]));
            xmax = std::max(xmax, std::fabs(double(x[k])));
            mag += std::fabs(double(w[k]) * x[k]);
        }
        bound += wsum * xmax / 254.0;
    }
    return (float_type ? 0.0 : 1.01 * bound) + 1e-5 * mag;
}

}  // namespace llmkv::dqtest
