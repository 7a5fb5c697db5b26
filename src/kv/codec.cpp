// KV codecs: support checks, sizes, encode (seal) and reference decode of sealed block heads
// for f16 / bf16 / fp8 e4m3 / int8 / int4, with the optional Hadamard rotation. Layouts are
// documented in kv/codec.h.
#include "kv/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "kv/hadamard.h"

namespace llmkv {

namespace {

constexpr float kFp16Max = 65504.0f;

bool known_dtype(llmkv_kv_dtype dtype) {
    switch (dtype) {
        case LLMKV_KV_F16:
        case LLMKV_KV_BF16:
        case LLMKV_KV_FP8_E4M3:
        case LLMKV_KV_INT8:
        case LLMKV_KV_INT4:
        case LLMKV_KV_INT4_COMPACT:
            return true;
    }
    return false;
}

bool quantized(llmkv_kv_dtype dtype) {
    return dtype == LLMKV_KV_FP8_E4M3 || dtype == LLMKV_KV_INT8 || is_int4(dtype);
}

[[noreturn]] void unsupported(CodecSpec spec, KvRole role, uint32_t head_dim) {
    fail(LLMKV_ERR_UNSUPPORTED, "KV codec %s%s for %s is not supported (head_dim %u)",
         codec_name(spec.dtype), spec.rotate ? "+rotation" : "", role == KvRole::K ? "K" : "V",
         head_dim);
}

// Per-thread f32 workspace for the rows being encoded / decoded (grown, never shrunk).
float *workspace(size_t n) {
    thread_local std::vector<float> w;
    if (w.size() < n) w.resize(n);
    return w.data();
}

inline float sanitize(float x) {
    if (std::isnan(x)) return 0.0f;
    return std::clamp(x, -kFp16Max, kFp16Max);
}

inline void store_fp16(uint8_t *p, uint16_t h) {
    std::memcpy(p, &h, 2);
}  // p: one fp16, any alignment

// The smallest fp16 >= x, for 0 <= x <= 65504.
uint16_t fp16_round_up(float x) {
    uint16_t h = fp32_to_fp16(x);
    if (fp16_to_fp32(h) < x) ++h;  // positive: the next encoding is the next value up
    return h;
}

// The largest fp16 <= x, for |x| <= 65504.
uint16_t fp16_round_down(float x) {
    uint16_t h = fp32_to_fp16(x);
    if (fp16_to_fp32(h) > x) {
        if (h == 0x0000u || h == 0x8000u) return 0x8001u;  // -smallest subnormal
        h = (h & 0x8000u) ? uint16_t(h + 1) : uint16_t(h - 1);
    }
    return h;
}

// src fp16 [n][D] -> dst f32 [n][D]: sanitized, and when asked each row rotated and
// clamped again (a rotated row can exceed the fp16 range only by sqrt(D)).
void prepare_rows(const uint16_t *src, uint32_t n, uint32_t D, bool rotate, float *dst) {
    for (size_t i = 0; i < size_t(n) * D; ++i) dst[i] = sanitize(fp16_to_fp32(src[i]));
    if (rotate) {
        for (uint32_t t = 0; t < n; ++t) hadamard_transform(dst + size_t(t) * D, D);
        for (size_t i = 0; i < size_t(n) * D; ++i) dst[i] = sanitize(dst[i]);
    }
}

// ---- fp8 / int8: per (token, head) symmetric scale -----------------------------------

// x: f32 [n][D] (sanitized) -> dst: values [n][D] bytes, then fp16 scales [n].
template <bool Fp8>
void encode_scaled(const float *x, uint32_t n, uint32_t D, uint8_t *dst) {
    const float qmax = Fp8 ? 448.0f : 127.0f;
    uint8_t *scales = dst + size_t(n) * D;
    for (uint32_t t = 0; t < n; ++t) {
        const float *r = x + size_t(t) * D;
        uint8_t *v = dst + size_t(t) * D;
        float amax = 0.0f;
        for (uint32_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(r[d]));
        const uint16_t sh = amax > 0.0f ? fp16_round_up(amax / qmax) : uint16_t(0);
        store_fp16(scales + size_t(t) * 2, sh);
        const float s = fp16_to_fp32(sh);
        for (uint32_t d = 0; d < D; ++d) {
            if (s == 0.0f) {
                v[d] = 0;
            } else if (Fp8) {
                v[d] = fp32_to_fp8_e4m3(r[d] / s);
            } else {
                long q = std::lrint(r[d] / s);
                v[d] = uint8_t(int8_t(std::clamp(q, -127L, 127L)));
            }
        }
    }
}

// src: values [n][D] bytes, then fp16 scales [n] -> dst: f32 [n][D].
template <bool Fp8>
void decode_scaled(const uint8_t *src, uint32_t n, uint32_t D, float *dst) {
    const uint8_t *scales = src + size_t(n) * D;
    const float *table = fp8_e4m3_table();
    for (uint32_t t = 0; t < n; ++t) {
        const float s = load_fp16(scales + size_t(t) * 2);
        for (uint32_t d = 0; d < D; ++d) {
            const uint8_t b = src[size_t(t) * D + d];
            dst[size_t(t) * D + d] = s * (Fp8 ? table[b] : float(int8_t(b)));
        }
    }
}

// ---- int4: asymmetric (scale, min) per group ------------------------------------------

// Quantization parameters of one group whose values span [lo, hi].
struct Int4Params {
    uint16_t scale_h, min_h;
    float scale, min;
};

Int4Params int4_params(float lo, float hi) {
    Int4Params p;
    p.min_h = fp16_round_down(lo);
    p.min = fp16_to_fp32(p.min_h);
    const float range = hi - p.min;
    p.scale_h = range > 0.0f ? fp16_round_up(range / 15.0f) : uint16_t(0);
    p.scale = fp16_to_fp32(p.scale_h);
    return p;
}

inline uint8_t int4_quantize(float x, const Int4Params &p) {
    if (p.scale == 0.0f) return 0;
    long q = std::lrint((x - p.min) / p.scale);
    return uint8_t(std::clamp(q, 0L, 15L));
}

// row: nibbles [D/2] of one token; channel d is byte d/2, low nibble when d is even.
inline void put_nibble(uint8_t *row, uint32_t d, uint8_t q) {
    uint8_t &b = row[d / 2];
    b = (d & 1u) ? uint8_t((b & 0x0Fu) | (q << 4)) : uint8_t((b & 0xF0u) | q);
}

inline uint8_t get_nibble(const uint8_t *row, uint32_t d) {
    return (d & 1u) ? uint8_t(row[d / 2] >> 4) : uint8_t(row[d / 2] & 0x0Fu);
}

// x: f32 [n][D] -> int4 K layout (per-channel scale / min over the n tokens).
void encode_int4_k(const float *x, uint32_t n, uint32_t D, uint8_t *dst) {
    uint8_t *scales = dst + codec_scales_offset(LLMKV_KV_INT4, n, D);
    uint8_t *mins = dst + int4_k_mins_offset(n, D);
    std::memset(dst, 0, size_t(n) * D / 2);
    for (uint32_t d = 0; d < D; ++d) {
        float lo = x[d], hi = x[d];
        for (uint32_t t = 1; t < n; ++t) {
            lo = std::min(lo, x[size_t(t) * D + d]);
            hi = std::max(hi, x[size_t(t) * D + d]);
        }
        const Int4Params p = int4_params(lo, hi);
        store_fp16(scales + size_t(d) * 2, p.scale_h);
        store_fp16(mins + size_t(d) * 2, p.min_h);
        for (uint32_t t = 0; t < n; ++t) {
            put_nibble(dst + size_t(t) * D / 2, d, int4_quantize(x[size_t(t) * D + d], p));
        }
    }
}

// x: f32 [n][D] -> int4 V layout (per-token scale / min over groups of G channels).
void encode_int4_v(const float *x, uint32_t n, uint32_t D, uint8_t *dst) {
    const uint32_t G = int4_v_group(D), ng = D / G;
    uint8_t *scales = dst + codec_scales_offset(LLMKV_KV_INT4, n, D);
    uint8_t *mins = dst + int4_v_mins_offset(n, D);
    std::memset(dst, 0, size_t(n) * D / 2);
    for (uint32_t t = 0; t < n; ++t) {
        for (uint32_t g = 0; g < ng; ++g) {
            const float *r = x + size_t(t) * D + size_t(g) * G;
            float lo = r[0], hi = r[0];
            for (uint32_t i = 1; i < G; ++i) {
                lo = std::min(lo, r[i]);
                hi = std::max(hi, r[i]);
            }
            const Int4Params p = int4_params(lo, hi);
            store_fp16(scales + (size_t(t) * ng + g) * 2, p.scale_h);
            store_fp16(mins + (size_t(t) * ng + g) * 2, p.min_h);
            for (uint32_t i = 0; i < G; ++i) {
                put_nibble(dst + size_t(t) * D / 2, g * G + i, int4_quantize(r[i], p));
            }
        }
    }
}

// ---- compact int4: scales and mins as indices into per-head fp16 steps --------------------

// One head's steps: min(k) = z0 + k * zstep, scale(j) = j * sstep (f32, as the kernels compute).
struct Int4cSteps {
    float z0 = 0.0f, zstep = 0.0f, sstep = 0.0f;
    float min(uint32_t k) const { return z0 + float(k) * zstep; }
    float scale(uint32_t j) const { return float(j) * sstep; }
};

Int4cSteps load_steps(const uint8_t *p) {
    return Int4cSteps{load_fp16(p), load_fp16(p + 2), load_fp16(p + 4)};
}

// Sum of squared errors of values x[0], x[stride], ... (m of them) coded with (z, s).
float group_sse(const float *x, size_t stride, uint32_t m, float z, float s) {
    float e = 0.0f;
    for (uint32_t i = 0; i < m; ++i) {
        const float v = x[size_t(i) * stride];
        const float d = z + s * float(int4_quantize(v, Int4Params{0, 0, s, z})) - v;
        e += d * d;
    }
    return e;
}

// Every group's best (k, j) for the steps st, by squared error among the covering choice
// (the largest min index at or below the group's smallest value, then the smallest scale
// index whose range reaches its largest) and its neighbours one min step up and / or one
// scale step down; indices clamp at kmax / jmax.
void int4c_assign(const Int4cSteps &st, const std::vector<float> &lo, const std::vector<float> &hi,
                  const float *x, const std::vector<size_t> &first, size_t stride, uint32_t m,
                  uint32_t kmax, uint32_t jmax, std::vector<uint8_t> &k, std::vector<uint8_t> &j) {
    const size_t ng = lo.size();
    k.resize(ng);
    j.resize(ng);
    for (size_t g = 0; g < ng; ++g) {
        uint32_t kb = 0;
        if (st.zstep > 0.0f) {
            kb = uint32_t(std::clamp((lo[g] - st.z0) / st.zstep, 0.0f, float(kmax)));
            while (kb > 0 && st.min(kb) > lo[g]) --kb;
        }
        float best = INFINITY;
        for (uint32_t dk = 0; dk <= 1; ++dk) {
            const uint32_t kk = kb + dk;
            if (kk > kmax || (dk == 1 && st.zstep == 0.0f)) continue;
            const float z = st.min(kk);
            uint32_t jc = 0;
            if (st.sstep > 0.0f && hi[g] > z) {
                jc = uint32_t(
                    std::clamp(std::ceil((hi[g] - z) / 15.0f / st.sstep), 0.0f, float(jmax)));
                while (jc < jmax && z + 15.0f * st.scale(jc) < hi[g]) ++jc;
            }
            for (uint32_t dj = 0; dj <= 1; ++dj) {
                if (dj == 1 && jc <= 1) continue;
                const uint32_t jj = jc - dj;
                const float e = group_sse(x + first[g], stride, m, z, st.scale(jj));
                if (e < best) {
                    best = e;
                    k[g] = uint8_t(kk);
                    j[g] = uint8_t(jj);
                }
            }
        }
    }
}

// Chooses the steps and every group's (k, j) for groups whose values span [lo[g], hi[g]]
// (x + first[g], stride, m values each), with kmax / jmax the largest indices: steps that
// span every group's min and scale (rounded up to fp16), then int4c_assign. (Shrinking the
// steps to minimize the total squared error, clipping the extreme groups, measured clearly
// worse in KL on SmolLM2; so did choosing only covering indices.) Writes the fp16 steps to
// header.
Int4cSteps int4c_choose(const std::vector<float> &lo, const std::vector<float> &hi, const float *x,
                        const std::vector<size_t> &first, size_t stride, uint32_t m, uint32_t kmax,
                        uint32_t jmax, std::vector<uint8_t> &k, std::vector<uint8_t> &j,
                        uint8_t *header) {
    const size_t ng = lo.size();
    float zlo = lo[0], zhi = lo[0];
    for (size_t g = 1; g < ng; ++g) {
        zlo = std::min(zlo, lo[g]);
        zhi = std::max(zhi, lo[g]);
    }
    const uint16_t z0h = fp16_round_down(zlo);
    const float z0 = fp16_to_fp32(z0h);
    const float zspan = zhi > z0 ? std::min((zhi - z0) / float(kmax), kFp16Max) : 0.0f;
    const float zstep_cover = zspan > 0.0f ? fp16_to_fp32(fp16_round_up(zspan)) : 0.0f;
    float smax = 0.0f;  // the largest scale the covering mins need
    for (size_t g = 0; g < ng; ++g) {
        uint32_t kb = 0;
        if (zstep_cover > 0.0f) {
            kb = uint32_t(std::clamp((lo[g] - z0) / zstep_cover, 0.0f, float(kmax)));
            while (kb > 0 && z0 + float(kb) * zstep_cover > lo[g]) --kb;
        }
        smax = std::max(smax, (hi[g] - (z0 + float(kb) * zstep_cover)) / 15.0f);
    }
    const uint16_t ssh =
        smax > 0.0f ? fp16_round_up(std::min(smax / float(jmax), kFp16Max)) : uint16_t(0);
    const Int4cSteps st{z0, zstep_cover, fp16_to_fp32(ssh)};
    int4c_assign(st, lo, hi, x, first, stride, m, kmax, jmax, k, j);
    store_fp16(header, z0h);
    store_fp16(header + 2, zspan > 0.0f ? fp16_round_up(zspan) : uint16_t(0));
    store_fp16(header + 4, ssh);
    return st;
}

// x: f32 [n][D] -> compact int4 K layout.
void encode_int4c_k(const float *x, uint32_t n, uint32_t D, uint8_t *dst) {
    std::memset(dst, 0, size_t(n) * D / 2);
    std::vector<float> lo(D), hi(D);
    std::vector<size_t> first(D);
    for (uint32_t d = 0; d < D; ++d) {
        lo[d] = hi[d] = x[d];
        for (uint32_t t = 1; t < n; ++t) {
            lo[d] = std::min(lo[d], x[size_t(t) * D + d]);
            hi[d] = std::max(hi[d], x[size_t(t) * D + d]);
        }
        first[d] = d;
    }
    uint8_t *header = dst + size_t(n) * D / 2, *low = header + kInt4cHeaderBytes, *high = low + D;
    std::vector<uint8_t> k, j;
    const Int4cSteps st = int4c_choose(lo, hi, x, first, D, n, 63, 63, k, j, header);
    std::memset(high, 0, D / 2);
    for (uint32_t d = 0; d < D; ++d) {
        low[d] = uint8_t((k[d] & 15u) | ((j[d] & 15u) << 4));
        high[d / 2] |= uint8_t(((k[d] >> 4) | ((j[d] >> 4) << 2)) << (4 * (d & 1u)));
        const Int4Params p{0, 0, st.scale(j[d]), st.min(k[d])};
        for (uint32_t t = 0; t < n; ++t)
            put_nibble(dst + size_t(t) * D / 2, d, int4_quantize(x[size_t(t) * D + d], p));
    }
}

// x: f32 [n][D] -> compact int4 V layout.
void encode_int4c_v(const float *x, uint32_t n, uint32_t D, uint8_t *dst) {
    const uint32_t G = int4c_v_group(D), ng = D / G;
    std::memset(dst, 0, size_t(n) * D / 2);
    std::vector<float> lo(size_t(n) * ng), hi(size_t(n) * ng);
    std::vector<size_t> first(size_t(n) * ng);
    for (uint32_t t = 0; t < n; ++t) {
        for (uint32_t g = 0; g < ng; ++g) {
            const size_t gi = size_t(t) * ng + g;
            const float *r = x + size_t(t) * D + size_t(g) * G;
            lo[gi] = hi[gi] = r[0];
            for (uint32_t i = 1; i < G; ++i) {
                lo[gi] = std::min(lo[gi], r[i]);
                hi[gi] = std::max(hi[gi], r[i]);
            }
            first[gi] = size_t(t) * D + size_t(g) * G;
        }
    }
    uint8_t *header = dst + size_t(n) * D / 2, *idx = header + kInt4cHeaderBytes;
    std::vector<uint8_t> k, j;
    const Int4cSteps st = int4c_choose(lo, hi, x, first, 1, G, 15, 15, k, j, header);
    for (uint32_t t = 0; t < n; ++t) {
        for (uint32_t g = 0; g < ng; ++g) {
            const size_t gi = size_t(t) * ng + g;
            idx[gi] = uint8_t(k[gi] | (j[gi] << 4));
            const Int4Params p{0, 0, st.scale(j[gi]), st.min(k[gi])};
            for (uint32_t i = 0; i < G; ++i)
                put_nibble(dst + size_t(t) * D / 2, g * G + i, int4_quantize(x[first[gi] + i], p));
        }
    }
}

// Shared decode: value = z + s * nibble with the params of int4_k_params / int4_v_params.
void decode_int4_any(llmkv_kv_dtype dtype, KvRole role, const uint8_t *src, uint32_t n, uint32_t D,
                     float *dst) {
    if (role == KvRole::K) {
        std::vector<float> s(D), z(D);
        int4_k_params(dtype, src, n, D, s.data(), z.data());
        for (uint32_t t = 0; t < n; ++t)
            for (uint32_t d = 0; d < D; ++d)
                dst[size_t(t) * D + d] =
                    z[d] + s[d] * float(get_nibble(src + size_t(t) * D / 2, d));
    } else {
        const uint32_t G = int4_group(dtype, D), ng = D / G;
        std::vector<float> s(size_t(n) * ng), z(size_t(n) * ng);
        int4_v_params(dtype, src, n, D, s.data(), z.data());
        for (uint32_t t = 0; t < n; ++t)
            for (uint32_t d = 0; d < D; ++d) {
                const size_t gi = size_t(t) * ng + d / G;
                dst[size_t(t) * D + d] =
                    z[gi] + s[gi] * float(get_nibble(src + size_t(t) * D / 2, d));
            }
    }
}

}  // namespace

// ---- fp8 conversion ---------------------------------------------------------------------

uint8_t fp32_to_fp8_e4m3(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint8_t sign = uint8_t((x >> 24) & 0x80u);
    const uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return 0;                       // NaN
    if (a >= 0x43e00000u) return uint8_t(sign | 0x7Eu);  // >= 448 (or inf): saturate
    if (a < 0x3c800000u) {  // below 2^-6: subnormal, in units of 2^-9 (8 = the smallest normal)
        float af;
        std::memcpy(&af, &a, 4);
        return uint8_t(sign | uint8_t(std::lrint(af * 512.0f)));
    }
    // Normal: round the fp32 mantissa to 3 bits (nearest even; a carry bumps the exponent),
    // then rebias the exponent from 127 to 7.
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    uint32_t e = (r >> 20) - ((127u - 7u) << 3);
    if (e > 0x7Eu) e = 0x7Eu;  // 448 < |f| rounded up to 480: saturate
    return uint8_t(sign | e);
}

const float *fp8_e4m3_table() {
    static const struct Table {
        float v[256];
        Table() {
            for (int i = 0; i < 256; ++i) v[i] = fp8_e4m3_to_fp32(uint8_t(i));
        }
    } table;
    return table.v;
}

// ---- int4 scales and mins as f32 -------------------------------------------------------

uint32_t int4_group(llmkv_kv_dtype dtype, uint32_t head_dim) {
    return dtype == LLMKV_KV_INT4_COMPACT ? int4c_v_group(head_dim) : int4_v_group(head_dim);
}

void int4_k_params(llmkv_kv_dtype dtype, const uint8_t *head, uint32_t n, uint32_t D, float *s,
                   float *z) {
    if (dtype == LLMKV_KV_INT4) {
        const uint8_t *scales = head + codec_scales_offset(LLMKV_KV_INT4, n, D),
                      *mins = head + int4_k_mins_offset(n, D);
        for (uint32_t d = 0; d < D; ++d) {
            s[d] = load_fp16(scales + size_t(d) * 2);
            z[d] = load_fp16(mins + size_t(d) * 2);
        }
        return;
    }
    const uint8_t *header = head + size_t(n) * D / 2, *low = header + kInt4cHeaderBytes,
                  *high = low + D;
    const Int4cSteps st = load_steps(header);
    for (uint32_t d = 0; d < D; ++d) {
        const uint32_t hb = uint32_t(high[d / 2] >> (4 * (d & 1u))) & 15u;
        s[d] = st.scale((low[d] >> 4) | ((hb >> 2) << 4));
        z[d] = st.min((low[d] & 15u) | ((hb & 3u) << 4));
    }
}

void int4_v_params(llmkv_kv_dtype dtype, const uint8_t *head, uint32_t n, uint32_t D, float *s,
                   float *z) {
    const size_t m = size_t(n) * (D / int4_group(dtype, D));
    if (dtype == LLMKV_KV_INT4) {
        const uint8_t *scales = head + codec_scales_offset(LLMKV_KV_INT4, n, D),
                      *mins = head + int4_v_mins_offset(n, D);
        for (size_t i = 0; i < m; ++i) {
            s[i] = load_fp16(scales + i * 2);
            z[i] = load_fp16(mins + i * 2);
        }
        return;
    }
    const uint8_t *header = head + size_t(n) * D / 2, *idx = header + kInt4cHeaderBytes;
    const Int4cSteps st = load_steps(header);
    for (size_t i = 0; i < m; ++i) {
        s[i] = st.scale(idx[i] >> 4);
        z[i] = st.min(idx[i] & 15u);
    }
}

// ---- the codec interface --------------------------------------------------------------

bool codec_supported(CodecSpec spec, KvRole role, uint32_t block_tokens, uint32_t head_dim) {
    if (!known_dtype(spec.dtype) || head_dim == 0 || block_tokens == 0) return false;
    if (spec.rotate && (!quantized(spec.dtype) || !hadamard_supported(head_dim))) return false;
    if (is_int4(spec.dtype)) return head_dim % 16 == 0;
    (void)role;
    return true;
}

bool codec_supported(llmkv_kv_dtype dtype, uint32_t head_dim) {
    return !is_int4(dtype) && codec_supported(CodecSpec{dtype, false}, KvRole::K, 1, head_dim);
}

const char *codec_name(llmkv_kv_dtype dtype) {
    switch (dtype) {
        case LLMKV_KV_F16:
            return "f16";
        case LLMKV_KV_BF16:
            return "bf16";
        case LLMKV_KV_FP8_E4M3:
            return "fp8_e4m3";
        case LLMKV_KV_INT8:
            return "int8";
        case LLMKV_KV_INT4:
            return "int4";
        case LLMKV_KV_INT4_COMPACT:
            return "int4c";
    }
    return "unknown";
}

size_t codec_head_bytes(llmkv_kv_dtype dtype, KvRole role, uint32_t block_tokens,
                        uint32_t head_dim) {
    const size_t bytes = kv_head_bytes(dtype, role == KvRole::V, block_tokens, head_dim);
    if (bytes == 0) fail(LLMKV_ERR_UNSUPPORTED, "KV dtype %d is not supported", int(dtype));
    return bytes;
}

size_t codec_head_bytes(llmkv_kv_dtype dtype, uint32_t block_tokens, uint32_t head_dim) {
    return std::max(codec_head_bytes(dtype, KvRole::K, block_tokens, head_dim),
                    codec_head_bytes(dtype, KvRole::V, block_tokens, head_dim));
}

void codec_encode_head(CodecSpec spec, KvRole role, const uint16_t *src, uint32_t n_tokens,
                       uint32_t head_dim, uint8_t *dst) {
    if (!codec_supported(spec, role, n_tokens, head_dim)) unsupported(spec, role, head_dim);
    const size_t n = size_t(n_tokens) * head_dim;
    switch (spec.dtype) {
        case LLMKV_KV_F16:
            std::memcpy(dst, src, n * 2);
            return;
        case LLMKV_KV_BF16: {
            uint16_t *out = reinterpret_cast<uint16_t *>(dst);  // bf16 [n_tokens][head_dim]
            for (size_t i = 0; i < n; ++i) out[i] = fp32_to_bf16(fp16_to_fp32(src[i]));
            return;
        }
        default:
            break;
    }
    float *x = workspace(n);  // f32 [n_tokens][head_dim], rotated and sanitized
    prepare_rows(src, n_tokens, head_dim, spec.rotate, x);
    switch (spec.dtype) {
        case LLMKV_KV_FP8_E4M3:
            encode_scaled<true>(x, n_tokens, head_dim, dst);
            return;
        case LLMKV_KV_INT8:
            encode_scaled<false>(x, n_tokens, head_dim, dst);
            return;
        case LLMKV_KV_INT4:
            role == KvRole::K ? encode_int4_k(x, n_tokens, head_dim, dst)
                              : encode_int4_v(x, n_tokens, head_dim, dst);
            return;
        case LLMKV_KV_INT4_COMPACT:
            role == KvRole::K ? encode_int4c_k(x, n_tokens, head_dim, dst)
                              : encode_int4c_v(x, n_tokens, head_dim, dst);
            return;
        default:
            unsupported(spec, role, head_dim);
    }
}

void codec_decode_head(CodecSpec spec, KvRole role, const uint8_t *src, uint32_t n_tokens,
                       uint32_t head_dim, float *dst) {
    if (!codec_supported(spec, role, n_tokens, head_dim)) unsupported(spec, role, head_dim);
    const size_t n = size_t(n_tokens) * head_dim;
    const uint16_t *in =
        reinterpret_cast<const uint16_t *>(src);  // f16 / bf16 [n_tokens][head_dim]
    switch (spec.dtype) {
        case LLMKV_KV_F16:
            for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(in[i]);
            return;
        case LLMKV_KV_BF16:
            for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(in[i]);
            return;
        case LLMKV_KV_FP8_E4M3:
            decode_scaled<true>(src, n_tokens, head_dim, dst);
            break;
        case LLMKV_KV_INT8:
            decode_scaled<false>(src, n_tokens, head_dim, dst);
            break;
        case LLMKV_KV_INT4:
        case LLMKV_KV_INT4_COMPACT:
            decode_int4_any(spec.dtype, role, src, n_tokens, head_dim, dst);
            break;
    }
    if (spec.rotate) {
        for (uint32_t t = 0; t < n_tokens; ++t)
            hadamard_transform(dst + size_t(t) * head_dim, head_dim);
    }
}

void codec_encode_head(llmkv_kv_dtype dtype, const uint16_t *src, uint32_t n_tokens,
                       uint32_t head_dim, uint8_t *dst) {
    if (is_int4(dtype)) {
        fail(LLMKV_ERR_UNSUPPORTED,
             "KV dtype %s needs the K/V role (codec_encode_head with KvRole)", codec_name(dtype));
    }
    codec_encode_head(CodecSpec{dtype, false}, KvRole::K, src, n_tokens, head_dim, dst);
}

void codec_decode_head(llmkv_kv_dtype dtype, const uint8_t *src, uint32_t n_tokens,
                       uint32_t head_dim, float *dst) {
    if (is_int4(dtype)) {
        fail(LLMKV_ERR_UNSUPPORTED,
             "KV dtype %s needs the K/V role (codec_decode_head with KvRole)", codec_name(dtype));
    }
    codec_decode_head(CodecSpec{dtype, false}, KvRole::K, src, n_tokens, head_dim, dst);
}

}  // namespace llmkv
