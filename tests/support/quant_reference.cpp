// Scalar reference quantizers/dequantizers for tests (see quant_reference.h for the rules).
// Block layouts follow the structs in tensor/tensor_type.h; the host is little-endian.
#include "quant_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/half.h"

namespace llmkv {

namespace {

void check_blocks(TensorType t, int64_t n) {
    if (n < 0 || n % tensor_type_block_elements(t) != 0) {
        throw std::invalid_argument(std::string("element count ") + std::to_string(n) +
                                    " is not a multiple of the " + tensor_type_name(t) +
                                    " block size");
    }
}

// Keeps a product from being fused with the following addition (the formats round both).
float unfused(float v) {
    volatile float keep = v;
    return keep;
}

void put_f16(uint8_t *dst, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(dst, &h, 2);
}

// The value of largest magnitude, with its sign.
float signed_absmax(const float *x, int n) {
    float maxv = 0;
    for (int j = 0; j < n; ++j) {
        if (std::fabs(x[j]) > std::fabs(maxv)) maxv = x[j];
    }
    return maxv;
}

int round_clamp(float v, int lo, int hi) {
    if (!(v == v)) return lo;
    return int(std::clamp(std::round(v), float(lo), float(hi)));
}

// Q5_0 / Q5_1 / IQ4_NL / MXFP4, one block of 32.
void quantize_block32(TensorType t, const float *x, uint8_t *dst) {
    int q[32];
    if (t == TensorType::MXFP4) {  // e from the largest magnitude, the nearest of the levels
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const int e =
            amax > 0.0f ? std::clamp(int(std::floor(std::log2(amax))) - 2 + 127, 0, 254) : 0;
        const uint32_t bits = mxfp4_scale_bits(uint32_t(e));
        float d;
        std::memcpy(&d, &bits, 4);
        for (int j = 0; j < 32; ++j) {
            int best = 0;
            for (int k = 1; k < 16; ++k) {
                if (std::fabs(x[j] / d - kMxfp4Values[k]) <
                    std::fabs(x[j] / d - kMxfp4Values[best]))
                    best = k;
            }
            q[j] = best;
        }
        dst[0] = uint8_t(e);
        for (int j = 0; j < 16; ++j) dst[1 + j] = uint8_t(q[j] | (q[j + 16] << 4));
        return;
    }
    if (t == TensorType::Q5_0) {
        const float d = signed_absmax(x, 32) / -16.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; ++j) q[j] = round_clamp(x[j] * id + 16.0f, 0, 31);
        put_f16(dst, d);
    } else if (t == TensorType::Q5_1) {
        const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
        const float d = (hi - lo) / 31.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; ++j) q[j] = round_clamp((x[j] - lo) * id, 0, 31);
        put_f16(dst, d);
        put_f16(dst + 2, lo);
    } else if (t == TensorType::IQ4_NL) {  // the nearest of the 16 levels
        const float d = signed_absmax(x, 32) / float(kIq4nlValues[0]);
        const float id = d != 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; ++j) {
            int best = 0;
            for (int k = 1; k < 16; ++k) {
                if (std::fabs(x[j] * id - kIq4nlValues[k]) <
                    std::fabs(x[j] * id - kIq4nlValues[best])) {
                    best = k;
                }
            }
            q[j] = best;
        }
        put_f16(dst, d);
        for (int j = 0; j < 16; ++j) dst[2 + j] = uint8_t(q[j] | (q[j + 16] << 4));
        return;
    }
    const size_t off = t == TensorType::Q5_1 ? 4 : 2;
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= uint32_t(q[j] >> 4) << j;
    std::memcpy(dst + off, &qh, 4);
    for (int j = 0; j < 16; ++j) dst[off + 4 + j] = uint8_t((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

// Element e of a k-quant super-block as e = 128 h + 32 j + l (see tensor/tensor_type.h).
struct Hjl {
    int h, j, l;
};
Hjl hjl(int e) {
    return {e / 128, (e / 32) % 4, e % 32};
}

// Unsigned scale/min per sub-block (an asymmetric range [min(x, 0), max(x)] split into
// `levels` steps), then 4- or 6-bit super-block quantization of both.
void kquant_scales_mins(const float *x, int sub, int n_sub, int levels, int scale_max, float *d_out,
                        float *dmin_out, int *sc, int *mn) {
    float scale[16], minv[16], max_scale = 0, max_min = 0;
    for (int s = 0; s < n_sub; ++s) {
        float lo = 0, hi = 0;
        for (int i = 0; i < sub; ++i) {
            lo = std::min(lo, x[s * sub + i]);
            hi = std::max(hi, x[s * sub + i]);
        }
        scale[s] = (hi - lo) / float(levels);
        minv[s] = -lo;
        max_scale = std::max(max_scale, scale[s]);
        max_min = std::max(max_min, minv[s]);
    }
    // Stored as fp16: the codes are computed against the rounded values.
    const float d = fp16_to_fp32(fp32_to_fp16(max_scale / float(scale_max)));
    const float dmin = fp16_to_fp32(fp32_to_fp16(max_min / float(scale_max)));
    for (int s = 0; s < n_sub; ++s) {
        sc[s] = d > 0 ? round_clamp(scale[s] / d, 0, scale_max) : 0;
        mn[s] = dmin > 0 ? round_clamp(minv[s] / dmin, 0, scale_max) : 0;
    }
    *d_out = d;
    *dmin_out = dmin;
}

void quantize_super_block(TensorType t, const float *x, uint8_t *dst) {
    std::memset(dst, 0, tensor_type_block_bytes(t));
    int q[256];
    switch (t) {
        case TensorType::Q2_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool k2 = t == TensorType::Q2_K;
            const int sub = k2 ? 16 : 32, n_sub = 256 / sub;
            const int qmax = t == TensorType::Q2_K ? 3 : t == TensorType::Q4_K ? 15 : 31;
            float d, dmin;
            int sc[16], mn[16];
            kquant_scales_mins(x, sub, n_sub, qmax, k2 ? 15 : 63, &d, &dmin, sc, mn);
            for (int e = 0; e < 256; ++e) {
                const float step = d * float(sc[e / sub]);
                const float m = dmin * float(mn[e / sub]);
                q[e] = step > 0 ? round_clamp((x[e] + m) / step, 0, qmax) : 0;
            }
            if (k2) {
                for (int s = 0; s < 16; ++s) dst[s] = uint8_t(sc[s] | (mn[s] << 4));
                for (int e = 0; e < 256; ++e) {
                    const Hjl p = hjl(e);
                    dst[16 + 32 * p.h + p.l] |= uint8_t(q[e] << (2 * p.j));
                }
                put_f16(dst + 80, d);
                put_f16(dst + 82, dmin);
                return;
            }
            put_f16(dst, d);
            put_f16(dst + 2, dmin);
            uint8_t *scales = dst + 4;
            for (int s = 0; s < 4; ++s) {
                scales[s] = uint8_t((sc[s] & 63) | ((sc[s + 4] >> 4) << 6));
                scales[s + 4] = uint8_t((mn[s] & 63) | ((mn[s + 4] >> 4) << 6));
                scales[s + 8] = uint8_t((sc[s + 4] & 15) | ((mn[s + 4] & 15) << 4));
            }
            const bool k5 = t == TensorType::Q5_K;
            uint8_t *qh = dst + 16, *qs = dst + (k5 ? 48 : 16);
            for (int e = 0; e < 256; ++e) {
                const int s = e / 32, l = e % 32;
                qs[32 * (s / 2) + l] |= uint8_t((q[e] & 15) << (4 * (s % 2)));
                if (k5) qh[l] |= uint8_t((q[e] >> 4) << s);
            }
            return;
        }
        case TensorType::Q3_K:
        case TensorType::Q6_K: {
            // Symmetric: per sub-block of 16 a signed scale mapping the largest magnitude to the
            // most negative code, then a signed super-block scale for those.
            const bool k3 = t == TensorType::Q3_K;
            const int half = k3 ? 4 : 32, scale_half = k3 ? 32 : 128;
            float scale[16];
            for (int s = 0; s < 16; ++s) scale[s] = signed_absmax(x + 16 * s, 16) / float(-half);
            const float d =
                fp16_to_fp32(fp32_to_fp16(signed_absmax(scale, 16) / float(-scale_half)));
            int sc[16];
            for (int s = 0; s < 16; ++s) {
                sc[s] = d != 0 ? round_clamp(scale[s] / d, -scale_half, scale_half - 1) : 0;
            }
            for (int e = 0; e < 256; ++e) {
                const float step = d * float(sc[e / 16]);
                q[e] = (step != 0 ? round_clamp(x[e] / step, -half, half - 1) : 0) + half;
            }
            if (k3) {
                uint8_t *hmask = dst, *qs = dst + 32, *scales = dst + 96;
                for (int e = 0; e < 256; ++e) {
                    const Hjl p = hjl(e);
                    qs[32 * p.h + p.l] |= uint8_t((q[e] & 3) << (2 * p.j));
                    hmask[p.l] |= uint8_t((q[e] >> 2) << (4 * p.h + p.j));
                }
                for (int s = 0; s < 16; ++s) {
                    const int u = sc[s] + 32;
                    scales[s % 8] |= uint8_t((u & 15) << (4 * (s / 8)));
                    scales[8 + s % 4] |= uint8_t((u >> 4) << (2 * (s / 4)));
                }
                put_f16(dst + 108, d);
                return;
            }
            uint8_t *ql = dst, *qh = dst + 128;
            for (int e = 0; e < 256; ++e) {
                const Hjl p = hjl(e);
                ql[64 * p.h + 32 * (p.j & 1) + p.l] |= uint8_t((q[e] & 15) << (4 * (p.j / 2)));
                qh[32 * p.h + p.l] |= uint8_t((q[e] >> 4) << (2 * p.j));
            }
            for (int s = 0; s < 16; ++s) dst[192 + s] = uint8_t(int8_t(sc[s]));
            put_f16(dst + 208, d);
            return;
        }
        case TensorType::Q8_K: {
            float amax = 0;
            for (int e = 0; e < 256; ++e) amax = std::max(amax, std::fabs(x[e]));
            const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
            BlockQ8_K blk{};
            blk.d = d;
            for (int e = 0; e < 256; ++e) {
                blk.qs[e] = int8_t(round_clamp(x[e] * id, -127, 127));
                blk.bsums[e / 16] = int16_t(blk.bsums[e / 16] + blk.qs[e]);
            }
            std::memcpy(dst, &blk, sizeof(blk));
            return;
        }
        default:
            return;
    }
}

// The k-quant decoders, written as loops over the packed planes (the formulas per element are
// in tensor/tensor_type.h; the library's decoder follows those instead).
void dequantize_super_block(TensorType t, const uint8_t *src, float *y) {
    switch (t) {
        case TensorType::Q2_K: {
            BlockQ2_K b;
            std::memcpy(&b, src, sizeof(b));
            const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
            const uint8_t *q = b.qs;
            int is = 0;
            for (int n = 0; n < 256; n += 128) {
                for (int shift = 0; shift < 8; shift += 2) {
                    for (int half = 0; half < 2; ++half) {
                        const uint8_t sc = b.scales[is++];
                        const float dl = d * float(sc & 15), ml = dmin * float(sc >> 4);
                        for (int l = 0; l < 16; ++l) {
                            *y++ = unfused(dl * float((q[l + 16 * half] >> shift) & 3)) - ml;
                        }
                    }
                }
                q += 32;
            }
            return;
        }
        case TensorType::Q3_K: {
            BlockQ3_K b;
            std::memcpy(&b, src, sizeof(b));
            const float d = fp16_to_fp32(b.d);
            uint32_t aux[4];
            std::memcpy(aux, b.scales, 12);
            const uint32_t tmp = aux[2];
            aux[2] = ((aux[0] >> 4) & 0x0f0f0f0f) | (((tmp >> 4) & 0x03030303) << 4);
            aux[3] = ((aux[1] >> 4) & 0x0f0f0f0f) | (((tmp >> 6) & 0x03030303) << 4);
            aux[0] = (aux[0] & 0x0f0f0f0f) | (((tmp >> 0) & 0x03030303) << 4);
            aux[1] = (aux[1] & 0x0f0f0f0f) | (((tmp >> 2) & 0x03030303) << 4);
            int8_t scales[16];
            std::memcpy(scales, aux, 16);
            const uint8_t *q = b.qs;
            uint8_t m = 1;
            int is = 0;
            for (int n = 0; n < 256; n += 128) {
                for (int shift = 0; shift < 8; shift += 2) {
                    for (int half = 0; half < 2; ++half) {
                        const float dl = d * float(scales[is++] - 32);
                        for (int l = 16 * half; l < 16 * half + 16; ++l) {
                            const int v = ((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4);
                            *y++ = dl * float(v);
                        }
                    }
                    m = uint8_t(m << 1);
                }
                q += 32;
            }
            return;
        }
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool k5 = t == TensorType::Q5_K;
            const float d = fp16_to_fp32(uint16_t(src[0] | src[1] << 8));
            const float dmin = fp16_to_fp32(uint16_t(src[2] | src[3] << 8));
            const uint8_t *scales = src + 4, *qh = src + 16, *ql = src + (k5 ? 48 : 16);
            uint8_t u1 = 1, u2 = 2;
            for (int is = 0; is < 8; is += 2) {
                int sc1, m1, sc2, m2;
                k4_scale_min(scales, is, &sc1, &m1);
                k4_scale_min(scales, is + 1, &sc2, &m2);
                const float d1 = d * float(sc1), mm1 = dmin * float(m1);
                const float d2 = d * float(sc2), mm2 = dmin * float(m2);
                for (int l = 0; l < 32; ++l) {
                    const int h = k5 && (qh[l] & u1) ? 16 : 0;
                    *y++ = unfused(d1 * float((ql[l] & 15) + h)) - mm1;
                }
                for (int l = 0; l < 32; ++l) {
                    const int h = k5 && (qh[l] & u2) ? 16 : 0;
                    *y++ = unfused(d2 * float((ql[l] >> 4) + h)) - mm2;
                }
                ql += 32;
                u1 = uint8_t(u1 << 2);
                u2 = uint8_t(u2 << 2);
            }
            return;
        }
        case TensorType::Q6_K: {
            BlockQ6_K b;
            std::memcpy(&b, src, sizeof(b));
            const float d = fp16_to_fp32(b.d);
            const uint8_t *ql = b.ql, *qh = b.qh;
            const int8_t *sc = b.scales;
            for (int n = 0; n < 256; n += 128) {
                for (int l = 0; l < 32; ++l) {
                    const int is = l / 16;
                    const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[l] = d * float(sc[is]) * float(q1);
                    y[l + 32] = d * float(sc[is + 2]) * float(q2);
                    y[l + 64] = d * float(sc[is + 4]) * float(q3);
                    y[l + 96] = d * float(sc[is + 6]) * float(q4);
                }
                y += 128;
                ql += 64;
                qh += 32;
                sc += 8;
            }
            return;
        }
        case TensorType::Q8_K: {
            BlockQ8_K b;
            std::memcpy(&b, src, sizeof(b));
            for (int e = 0; e < 256; ++e) y[e] = float(b.qs[e]) * b.d;
            return;
        }
        default:
            return;
    }
}

}  // namespace

size_t tensor_bytes_reference(TensorType t, int64_t n) {
    check_blocks(t, n);
    return size_t(n / tensor_type_block_elements(t)) * tensor_type_block_bytes(t);
}

std::vector<uint8_t> quantize_reference(TensorType t, const float *x, int64_t n) {
    std::vector<uint8_t> out(tensor_bytes_reference(t, n));
    uint8_t *dst = out.data();
    switch (t) {
        case TensorType::F32:
            std::memcpy(dst, x, size_t(n) * sizeof(float));
            break;
        case TensorType::F16:
        case TensorType::BF16:
            for (int64_t k = 0; k < n; ++k) {
                uint16_t h = t == TensorType::F16 ? fp32_to_fp16(x[k]) : fp32_to_bf16(x[k]);
                std::memcpy(dst + 2 * k, &h, 2);
            }
            break;
        case TensorType::Q8_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                const float *xb = x + b * kQuantBlock;
                float amax = 0;
                for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
                float d = amax / 127.0f;
                float id = d != 0 ? 1.0f / d : 0.0f;
                BlockQ8_0 blk{};
                blk.d = fp32_to_fp16(d);
                for (int j = 0; j < kQuantBlock; ++j) {
                    float q = std::round(xb[j] * id);
                    blk.qs[j] = int8_t(std::clamp(q, -127.0f, 127.0f));
                }
                std::memcpy(dst + b * sizeof(blk), &blk, sizeof(blk));
            }
            break;
        case TensorType::Q4_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                const float *xb = x + b * kQuantBlock;
                float maxv = 0;  // the element of largest magnitude, with its sign
                for (int j = 0; j < kQuantBlock; ++j) {
                    if (std::fabs(xb[j]) > std::fabs(maxv)) maxv = xb[j];
                }
                float d = maxv / -8.0f;
                float id = d != 0 ? 1.0f / d : 0.0f;
                BlockQ4_0 blk{};
                blk.d = fp32_to_fp16(d);
                for (int j = 0; j < kQuantBlock / 2; ++j) {
                    int lo = int(std::clamp(std::round(xb[j] * id) + 8.0f, 0.0f, 15.0f));
                    int hi = int(std::clamp(std::round(xb[j + 16] * id) + 8.0f, 0.0f, 15.0f));
                    blk.qs[j] = uint8_t(lo | (hi << 4));
                }
                std::memcpy(dst + b * sizeof(blk), &blk, sizeof(blk));
            }
            break;
        case TensorType::Q4_1:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                const float *xb = x + b * kQuantBlock;
                float lo_v = xb[0], hi_v = xb[0];
                for (int j = 1; j < kQuantBlock; ++j) {
                    lo_v = std::min(lo_v, xb[j]);
                    hi_v = std::max(hi_v, xb[j]);
                }
                float d = (hi_v - lo_v) / 15.0f;
                float id = d != 0 ? 1.0f / d : 0.0f;
                BlockQ4_1 blk{};
                blk.d = fp32_to_fp16(d);
                blk.m = fp32_to_fp16(lo_v);
                for (int j = 0; j < kQuantBlock / 2; ++j) {
                    int lo = int(std::clamp(std::round((xb[j] - lo_v) * id), 0.0f, 15.0f));
                    int hi = int(std::clamp(std::round((xb[j + 16] - lo_v) * id), 0.0f, 15.0f));
                    blk.qs[j] = uint8_t(lo | (hi << 4));
                }
                std::memcpy(dst + b * sizeof(blk), &blk, sizeof(blk));
            }
            break;
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::IQ4_NL:
        case TensorType::MXFP4:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                quantize_block32(t, x + b * kQuantBlock,
                                 dst + size_t(b) * tensor_type_block_bytes(t));
            }
            break;
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::Q8_K:
            for (int64_t b = 0; b < n / kSuperBlock; ++b) {
                quantize_super_block(t, x + b * kSuperBlock,
                                     dst + size_t(b) * tensor_type_block_bytes(t));
            }
            break;
    }
    return out;
}

std::vector<float> dequantize_reference(TensorType t, const uint8_t *data, int64_t n) {
    check_blocks(t, n);
    std::vector<float> out(static_cast<size_t>(n));
    switch (t) {
        case TensorType::F32:
            std::memcpy(out.data(), data, size_t(n) * sizeof(float));
            break;
        case TensorType::F16:
        case TensorType::BF16:
            for (int64_t k = 0; k < n; ++k) {
                uint16_t h;
                std::memcpy(&h, data + 2 * k, 2);
                out[k] = t == TensorType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
            }
            break;
        case TensorType::Q8_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockQ8_0 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                float d = fp16_to_fp32(blk.d);
                for (int j = 0; j < kQuantBlock; ++j) out[b * kQuantBlock + j] = blk.qs[j] * d;
            }
            break;
        case TensorType::Q4_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockQ4_0 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                float d = fp16_to_fp32(blk.d);
                for (int j = 0; j < kQuantBlock / 2; ++j) {
                    out[b * kQuantBlock + j] = float((blk.qs[j] & 0x0f) - 8) * d;
                    out[b * kQuantBlock + j + 16] = float((blk.qs[j] >> 4) - 8) * d;
                }
            }
            break;
        case TensorType::Q4_1:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockQ4_1 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                float d = fp16_to_fp32(blk.d);
                float m = fp16_to_fp32(blk.m);
                for (int j = 0; j < kQuantBlock / 2; ++j) {
                    out[b * kQuantBlock + j] = float(blk.qs[j] & 0x0f) * d + m;
                    out[b * kQuantBlock + j + 16] = float(blk.qs[j] >> 4) * d + m;
                }
            }
            break;
        case TensorType::Q5_0:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockQ5_0 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                uint32_t qh;
                std::memcpy(&qh, blk.qh, 4);
                const float d = fp16_to_fp32(blk.d);
                for (int j = 0; j < 16; ++j) {
                    const int x0 = ((blk.qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10)) - 16;
                    const int x1 = ((blk.qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
                    out[b * 32 + j] = float(x0) * d;
                    out[b * 32 + j + 16] = float(x1) * d;
                }
            }
            break;
        case TensorType::Q5_1:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockQ5_1 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                uint32_t qh;
                std::memcpy(&qh, blk.qh, 4);
                const float d = fp16_to_fp32(blk.d), m = fp16_to_fp32(blk.m);
                for (int j = 0; j < 16; ++j) {
                    const int x0 = (blk.qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10);
                    const int x1 = (blk.qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
                    out[b * 32 + j] = unfused(float(x0) * d) + m;
                    out[b * 32 + j + 16] = unfused(float(x1) * d) + m;
                }
            }
            break;
        case TensorType::IQ4_NL:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockIQ4_NL blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                const float d = fp16_to_fp32(blk.d);
                for (int j = 0; j < 16; ++j) {
                    out[b * 32 + j] = d * float(kIq4nlValues[blk.qs[j] & 15]);
                    out[b * 32 + j + 16] = d * float(kIq4nlValues[blk.qs[j] >> 4]);
                }
            }
            break;
        case TensorType::MXFP4:
            for (int64_t b = 0; b < n / kQuantBlock; ++b) {
                BlockMXFP4 blk;
                std::memcpy(&blk, data + b * sizeof(blk), sizeof(blk));
                const uint32_t bits = mxfp4_scale_bits(blk.e);
                float d;
                std::memcpy(&d, &bits, 4);
                for (int j = 0; j < 16; ++j) {
                    out[b * 32 + j] = float(kMxfp4Values[blk.qs[j] & 15]) * d;
                    out[b * 32 + j + 16] = float(kMxfp4Values[blk.qs[j] >> 4]) * d;
                }
            }
            break;
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
        case TensorType::Q8_K:
            for (int64_t b = 0; b < n / kSuperBlock; ++b) {
                dequantize_super_block(t, data + size_t(b) * tensor_type_block_bytes(t),
                                       out.data() + b * kSuperBlock);
            }
            break;
    }
    return out;
}

}  // namespace llmkv
