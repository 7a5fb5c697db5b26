// AVX2/FMA/F16C kernels for CPU attention: fp16 / bf16 rows and sealed heads in the fp8
// e4m3, int8 and int4 codecs (kv/codec.h), dequantized in registers 8 values at a time, for
// several query heads per pass (GQA), plus a vectorized softmax.
#include <immintrin.h>

#include <cmath>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/exp_avx2.h"
#include "kv/codec.h"

namespace llmkv::cpu::kernels {

namespace {

#define LLMKV_INLINE inline __attribute__((always_inline))

// ---- loaders: 8 consecutive values of a row as f32 (before any scale) ------------------

LLMKV_INLINE __m256 load_f16(const uint16_t *p) {  // p: fp16 [8]
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

LLMKV_INLINE __m256 load_bf16(const uint16_t *p) {  // p: bf16 [8]
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

LLMKV_INLINE __m256 load_i8(const uint8_t *p) {  // p: int8 [8]
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

// p: e4m3fn [8]. Returns value * 2^-8 exactly: sign-extend to 16 bits, shift the 7
// magnitude bits into fp16 exponent/mantissa position, clear the duplicated sign bit.
LLMKV_INLINE __m256 load_fp8(const uint8_t *p) {
    __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
    __m128i h = _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(int16_t(0xBF80)));
    return _mm256_cvtph_ps(h);
}
constexpr float kFp8Unscale = 256.0f;  // load_fp8 returns value / 256

// p: e4m3fn [16] -> two vectors of value * 2^-8 (one widening for 16 values).
LLMKV_INLINE void load2_fp8(const uint8_t *p, __m256 &lo, __m256 &hi) {
    __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(int16_t(0xBF80)));
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// Row element types: load converts 8 values, load2 16 (to f32, before any scale). kPairs:
// the tiles step 16 columns at a time through load2 (worth it only when one widening serves
// 16 values; otherwise the extra live vectors cost more in register spills).
#define LLMKV_ROWS(Name, Elem, Load8)                                        \
    struct Name {                                                            \
        using T = Elem;                                                      \
        static constexpr bool kPairs = false;                                \
        static LLMKV_INLINE __m256 load(const T *p) { return Load8(p); }     \
        static LLMKV_INLINE void load2(const T *p, __m256 &lo, __m256 &hi) { \
            lo = Load8(p);                                                   \
            hi = Load8(p + 8);                                               \
        }                                                                    \
    };
LLMKV_ROWS(F16Rows, uint16_t, load_f16)    // fp16 [.][d]
LLMKV_ROWS(Bf16Rows, uint16_t, load_bf16)  // bf16 [.][d]
LLMKV_ROWS(I8Rows, uint8_t, load_i8)       // int8 [.][d]
#undef LLMKV_ROWS
struct Fp8Rows {  // e4m3fn [.][d]
    using T = uint8_t;
    static constexpr bool kPairs = true;
    static LLMKV_INLINE __m256 load(const T *p) { return load_fp8(p); }
    static LLMKV_INLINE void load2(const T *p, __m256 &lo, __m256 &hi) { load2_fp8(p, lo, hi); }
};

// p: 8 bytes of packed nibbles = 16 values (byte i: value 2i low, 2i+1 high), in order.
LLMKV_INLINE __m128i unpack_nibbles16(const uint8_t *p) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    __m128i lo = _mm_and_si128(b, mask);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    return _mm_unpacklo_epi8(lo, hi);
}
LLMKV_INLINE __m256 nibbles_lo8(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}
LLMKV_INLINE __m256 nibbles_hi8(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
}

LLMKV_INLINE float fp16_at(const uint8_t *p) {  // p: one fp16, any alignment
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

LLMKV_INLINE float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 shuf = _mm_movehdup_ps(lo);
    __m128 sums = _mm_add_ps(lo, shuf);
    shuf = _mm_movehl_ps(shuf, sums);
    sums = _mm_add_ss(sums, shuf);
    return _mm_cvtss_f32(sums);
}

// The 8 horizontal sums of a[0..7] as one vector (lane i = sum of a[i]). Every lane gets
// the same addition tree, so a sum does not depend on the slot it was reduced in.
LLMKV_INLINE __m256 hsum8(const __m256 *a) {
    __m256 s01 = _mm256_hadd_ps(a[0], a[1]);
    __m256 s23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 s45 = _mm256_hadd_ps(a[4], a[5]);
    __m256 s67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 s0123 = _mm256_hadd_ps(s01, s23);
    __m256 s4567 = _mm256_hadd_ps(s45, s67);
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                         _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// sums[k] = horizontal sum of acc[k] for k < K. sums: f32 [K rounded up to 8].
template <int K>
LLMKV_INLINE void reduce_store(const __m256 *acc, float *sums) {
#pragma GCC unroll 2
    for (int k = 0; k < K; k += 8) {
        __m256 t[8];
#pragma GCC unroll 8
        for (int m = 0; m < 8; ++m) t[m] = k + m < K ? acc[k + m] : _mm256_setzero_ps();
        _mm256_storeu_ps(sums + k, hsum8(t));
    }
}

// Query heads per pass are at most 4; per head count, the tokens per K tile (TT) and the
// column vectors per V tile (C) keep NH x TT (NH x C) accumulators in the 16 YMM registers.
template <int NH>
constexpr int kTileTokens = NH == 1   ? 8
                            : NH == 4 ? 2
                                      : 4;
template <int NH>
constexpr int kTileCols = NH == 1   ? 8
                          : NH == 4 ? 2
                                    : 4;

// Calls pass.operator()<NH>(h0) over heads [0, nh) in chunks of at most 4.
template <class Pass>
LLMKV_INLINE void by_head_chunks(uint32_t nh, Pass &&pass) {
    uint32_t h0 = 0;
    for (; h0 + 4 <= nh; h0 += 4) pass.template operator()<4>(h0);
    switch (nh - h0) {
        case 3:
            pass.template operator()<3>(h0);
            break;
        case 2:
            pass.template operator()<2>(h0);
            break;
        case 1:
            pass.template operator()<1>(h0);
            break;
        default:
            break;
    }
}

// ---- K scores ----------------------------------------------------------------------------

// sums[h * TT + j] = dot(q[h], r[j]) for NH heads and TT rows of d values. Columns go in
// order (16 at a time for kPairs rows, else 8), so each sum is the same FMA sequence for any
// NH / TT. q: NH pointers to f32 [d]; r: TT pointers to rows [d]; sums: f32 [NH*TT, to 8].
template <int NH, int TT, class R>
LLMKV_INLINE void dot_tile(const float *const *q, const typename R::T *const *r, uint32_t d,
                           float *sums) {
    constexpr int K = NH * TT;
    __m256 acc[K];
#pragma GCC unroll 16
    for (int k = 0; k < K; ++k) acc[k] = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; R::kPairs && i + 16 <= d; i += 16) {
#pragma GCC unroll 8
        for (int j = 0; j < TT; ++j) {
            __m256 v0, v1;
            R::load2(r[j] + i, v0, v1);
#pragma GCC unroll 4
            for (int h = 0; h < NH; ++h) {
                acc[h * TT + j] = _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + i), v0, acc[h * TT + j]);
                acc[h * TT + j] =
                    _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + i + 8), v1, acc[h * TT + j]);
            }
        }
    }
    for (; i < d; i += 8) {
#pragma GCC unroll 8
        for (int j = 0; j < TT; ++j) {
            const __m256 v = R::load(r[j] + i);
#pragma GCC unroll 4
            for (int h = 0; h < NH; ++h) {
                acc[h * TT + j] = _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + i), v, acc[h * TT + j]);
            }
        }
    }
    reduce_store<K>(acc, sums);
}

// Raw dot products of NH heads with n rows (base: [n][stride]); finish(h, t, sum) stores.
// Tiles past n repeat the last row and drop its sums.
template <int NH, class R, class Finish>
LLMKV_INLINE void dot_heads(const float *const *q, const typename R::T *base, size_t stride,
                            uint32_t n, uint32_t d, Finish &&finish) {
    constexpr int TT = kTileTokens<NH>;
    alignas(32) float sums[16];
    for (uint32_t t0 = 0; t0 < n; t0 += TT) {
        const typename R::T *r[TT];
#pragma GCC unroll 8
        for (int j = 0; j < TT; ++j) r[j] = base + size_t(t0 + j < n ? t0 + j : n - 1) * stride;
        dot_tile<NH, TT, R>(q, r, d, sums);
        for (int h = 0; h < NH; ++h) {
            for (int j = 0; j < TT && t0 + j < n; ++j) finish(h, t0 + j, sums[h * TT + j]);
        }
    }
}

template <class R>
void dot_rows_16bit(uint32_t nh, const float *const *q, const uint16_t *rows, uint32_t n,
                    uint32_t d, float *const *scores) {
    // rows: fp16 / bf16 [n][d]
    by_head_chunks(nh, [&]<int NH>(uint32_t h0) {
        dot_heads<NH, R>(q + h0, rows, d, n, d,
                         [&](int h, uint32_t t, float s) { scores[h0 + h][t] = s; });
    });
}

// head: values [n][d] (1 byte each), fp16 scale [n]; scores = dot * (scale_t * unscale).
template <class R>
void dot_rows_scaled(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                     uint32_t d, float unscale, float *const *scores) {
    const uint8_t *scales = head + size_t(n) * d;
    by_head_chunks(nh, [&]<int NH>(uint32_t h0) {
        dot_heads<NH, R>(q + h0, head, d, n, d, [&](int h, uint32_t t, float s) {
            scores[h0 + h][t] = s * (fp16_at(scales + size_t(t) * 2) * unscale);
        });
    });
}

// Where the int4 kernels get a K channel's (scale, min) or a V group's: the fp16 arrays of
// int4, or the indices of compact int4 with the head's steps (min = z0 + k * zstep, scale =
// j * sstep; up to the rounding of a fused multiply-add, the values int4_k_params gives).
template <llmkv_kv_dtype DT>
struct Int4Params;
template <>
struct Int4Params<LLMKV_KV_INT4> {
    const uint16_t *ks, *kz;  // K: fp16 scale [d], min [d]
    const uint8_t *vs, *vz;   // V: fp16 scale [n][d/G], min [n][d/G]
    Int4Params(const uint8_t *head, uint32_t n, uint32_t d)
        : ks(reinterpret_cast<const uint16_t *>(head + codec_scales_offset(LLMKV_KV_INT4, n, d))),
          kz(reinterpret_cast<const uint16_t *>(head + int4_k_mins_offset(n, d))),
          vs(head + codec_scales_offset(LLMKV_KV_INT4, n, d)),
          vz(head + int4_v_mins_offset(n, d)) {}
    LLMKV_INLINE void k8(uint32_t c, __m256 &s, __m256 &z) const {  // channels c..c+7
        s = load_f16(ks + c);
        z = load_f16(kz + c);
    }
    LLMKV_INLINE void v1(size_t gi, float &s, float &z) const {
        s = fp16_at(vs + gi * 2);
        z = fp16_at(vz + gi * 2);
    }
};
template <>
struct Int4Params<LLMKV_KV_INT4_COMPACT> {
    const uint8_t *low, *high, *idx;  // K: low [d], high [d/2]; V: idx [n][d/G]
    float z0, zstep, sstep;
    Int4Params(const uint8_t *head, uint32_t n, uint32_t d) {
        const uint8_t *header = head + size_t(n) * d / 2;
        low = idx = header + kInt4cHeaderBytes;
        high = low + d;
        z0 = fp16_at(header);
        zstep = fp16_at(header + 2);
        sstep = fp16_at(header + 4);
    }
    LLMKV_INLINE void k8(uint32_t c, __m256 &s, __m256 &z) const {  // channels c..c+7 (c % 8 == 0)
        const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1);
        const __m256i m15 = _mm256_set1_epi32(15);
        const __m256i lo =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(low + c)));
        int32_t h4;
        __builtin_memcpy(&h4, high + c / 2, 4);  // the high bits of channels c..c+7
        const __m256i hb = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi32_si128(h4), dup)),
                              _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)),
            m15);
        const __m256i k =
            _mm256_or_si256(_mm256_and_si256(lo, m15),
                            _mm256_slli_epi32(_mm256_and_si256(hb, _mm256_set1_epi32(3)), 4));
        const __m256i j = _mm256_or_si256(_mm256_srli_epi32(lo, 4),
                                          _mm256_slli_epi32(_mm256_srli_epi32(hb, 2), 4));
        z = _mm256_add_ps(_mm256_set1_ps(z0),
                          _mm256_mul_ps(_mm256_cvtepi32_ps(k), _mm256_set1_ps(zstep)));
        s = _mm256_mul_ps(_mm256_cvtepi32_ps(j), _mm256_set1_ps(sstep));
    }
    LLMKV_INLINE void v1(size_t gi, float &s, float &z) const {
        s = float(idx[gi] >> 4) * sstep;
        z = z0 + float(idx[gi] & 15u) * zstep;
    }
};

// int4 K for NH heads: per chunk of channels, qs = q * scale on the stack, nibble dots,
// then + sum_d q_d z_d.
template <int NH, llmkv_kv_dtype DT>
LLMKV_INLINE void dot_i4k_heads(const float *const *q, const uint8_t *head, uint32_t n, uint32_t d,
                                float *const *scores) {
    // head: nibbles [n][d/2], then the int4 or compact int4 K parameters
    const Int4Params<DT> params(head, n, d);
    constexpr int TT = kTileTokens<NH>;
    constexpr uint32_t kChunk = 256;   // channels per pass
    alignas(32) float qs[NH][kChunk];  // f32 [NH][chunk]: q_d * s_d
    alignas(32) float sums[16];
    __m256 qz[NH];
    for (int h = 0; h < NH; ++h) qz[h] = _mm256_setzero_ps();
    for (uint32_t c0 = 0; c0 < d; c0 += kChunk) {
        const uint32_t len = d - c0 < kChunk ? d - c0 : kChunk;
        for (uint32_t i = 0; i < len; i += 8) {
            __m256 s, z;
            params.k8(c0 + i, s, z);
            for (int h = 0; h < NH; ++h) {
                const __m256 qv = _mm256_loadu_ps(q[h] + c0 + i);
                _mm256_store_ps(qs[h] + i, _mm256_mul_ps(qv, s));
                qz[h] = _mm256_fmadd_ps(qv, z, qz[h]);
            }
        }
        for (uint32_t t0 = 0; t0 < n; t0 += TT) {
            const uint8_t *r[TT];  // nibble rows of TT tokens, from channel c0
#pragma GCC unroll 8
            for (int j = 0; j < TT; ++j) {
                r[j] = head + (size_t(t0 + j < n ? t0 + j : n - 1) * d + c0) / 2;
            }
            __m256 acc[NH * TT];
#pragma GCC unroll 16
            for (int k = 0; k < NH * TT; ++k) acc[k] = _mm256_setzero_ps();
            for (uint32_t i = 0; i < len; i += 16) {  // 16 channels = 8 bytes per token
#pragma GCC unroll 8
                for (int j = 0; j < TT; ++j) {
                    const __m128i v = unpack_nibbles16(r[j] + i / 2);
                    const __m256 lo = nibbles_lo8(v), hi = nibbles_hi8(v);
#pragma GCC unroll 4
                    for (int h = 0; h < NH; ++h) {
                        acc[h * TT + j] =
                            _mm256_fmadd_ps(_mm256_load_ps(qs[h] + i), lo, acc[h * TT + j]);
                        acc[h * TT + j] =
                            _mm256_fmadd_ps(_mm256_load_ps(qs[h] + i + 8), hi, acc[h * TT + j]);
                    }
                }
            }
            reduce_store<NH * TT>(acc, sums);
            for (int h = 0; h < NH; ++h) {
                for (int j = 0; j < TT && t0 + j < n; ++j) {
                    float &dst = scores[h][t0 + j];
                    dst = c0 == 0 ? sums[h * TT + j] : dst + sums[h * TT + j];
                }
            }
        }
    }
    for (int h = 0; h < NH; ++h) {
        const float bias = hsum(qz[h]);
        for (uint32_t t = 0; t < n; ++t) scores[h][t] += bias;
    }
}

// ---- V accumulation ----------------------------------------------------------------------

// out[h][c0, c0 + 8C) += sum_t w[h][t] * scale(t) * row_t[c0, ..) for NH heads: the NH x C
// accumulators stay in registers while the tokens stream by. rows: [n][d]; w: NH pointers
// to f32 [n]; out: NH pointers to f32 [d].
template <int NH, int C, class R, class Scale>
LLMKV_INLINE void axpy_tile(const float *const *w, const typename R::T *rows, uint32_t n,
                            uint32_t d, uint32_t c0, float *const *out, Scale &&scale) {
    __m256 acc[NH * C];
    for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[h * C + c] = _mm256_loadu_ps(out[h] + c0 + 8 * c);
    }
    for (uint32_t t = 0; t < n; ++t) {
        const float s = scale(t);
        const typename R::T *row = rows + size_t(t) * d + c0;
        __m256 ws[NH];
#pragma GCC unroll 4
        for (int h = 0; h < NH; ++h) ws[h] = _mm256_set1_ps(w[h][t] * s);
        constexpr int C2 = R::kPairs ? C / 2 * 2 : 0;  // columns loaded in pairs
#pragma GCC unroll 4
        for (int c = 0; c < C2; c += 2) {
            __m256 v0, v1;
            R::load2(row + 8 * c, v0, v1);
#pragma GCC unroll 4
            for (int h = 0; h < NH; ++h) {
                acc[h * C + c] = _mm256_fmadd_ps(ws[h], v0, acc[h * C + c]);
                acc[h * C + c + 1] = _mm256_fmadd_ps(ws[h], v1, acc[h * C + c + 1]);
            }
        }
#pragma GCC unroll 8
        for (int c = C2; c < C; ++c) {
            const __m256 v = R::load(row + 8 * c);
#pragma GCC unroll 4
            for (int h = 0; h < NH; ++h) acc[h * C + c] = _mm256_fmadd_ps(ws[h], v, acc[h * C + c]);
        }
    }
    for (int h = 0; h < NH; ++h) {
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(out[h] + c0 + 8 * c, acc[h * C + c]);
    }
}

template <class R, class Scale>
LLMKV_INLINE void axpy_rows(uint32_t nh, const float *const *w, const typename R::T *rows,
                            uint32_t n, uint32_t d, float *const *out, Scale &&scale) {
    by_head_chunks(nh, [&]<int NH>(uint32_t h0) {
        constexpr int C = kTileCols<NH>;
        uint32_t c = 0;
        for (; c + 8 * C <= d; c += 8 * C)
            axpy_tile<NH, C, R>(w + h0, rows, n, d, c, out + h0, scale);
        for (; c < d; c += 8) axpy_tile<NH, 1, R>(w + h0, rows, n, d, c, out + h0, scale);
    });
}

// int4 V, NH heads, columns [c0, c0 + 8C) inside group g (G channels): sum_t (w_t s_tg) nib
// in registers, then + sum_t w_t z_tg. C is even (16 columns = 8 bytes per step).
// w: NH pointers to f32 [n]; out: NH pointers to f32 [d].
template <int NH, int C, llmkv_kv_dtype DT>
LLMKV_INLINE void axpy_i4v_tile(const float *const *w, const uint8_t *head, uint32_t n, uint32_t d,
                                uint32_t G, uint32_t c0, float *const *out) {
    // head: nibbles [n][d/2], then the int4 or compact int4 V parameters ([n][d/G])
    const Int4Params<DT> params(head, n, d);
    const uint32_t ng = d / G, g = c0 / G;
    __m256 acc[NH * C];
    float bias[NH];
    for (int h = 0; h < NH; ++h) {
        bias[h] = 0.0f;
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[h * C + c] = _mm256_loadu_ps(out[h] + c0 + 8 * c);
    }
    for (uint32_t t = 0; t < n; ++t) {
        const size_t gi = size_t(t) * ng + g;
        float s, z;
        params.v1(gi, s, z);
        __m256 ws[NH];
#pragma GCC unroll 4
        for (int h = 0; h < NH; ++h) {
            ws[h] = _mm256_set1_ps(w[h][t] * s);
            bias[h] += w[h][t] * z;
        }
        const uint8_t *row = head + (size_t(t) * d + c0) / 2;
#pragma GCC unroll 4
        for (int c = 0; c < C; c += 2) {
            const __m128i v = unpack_nibbles16(row + 4 * c);
            const __m256 lo = nibbles_lo8(v), hi = nibbles_hi8(v);
#pragma GCC unroll 4
            for (int h = 0; h < NH; ++h) {
                acc[h * C + c] = _mm256_fmadd_ps(ws[h], lo, acc[h * C + c]);
                acc[h * C + c + 1] = _mm256_fmadd_ps(ws[h], hi, acc[h * C + c + 1]);
            }
        }
    }
    for (int h = 0; h < NH; ++h) {
        const __m256 b = _mm256_set1_ps(bias[h]);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c)
            _mm256_storeu_ps(out[h] + c0 + 8 * c, _mm256_add_ps(acc[h * C + c], b));
    }
}

// ---- softmax -------------------------------------------------------------------------------

}  // namespace

void dot_rows_f16_avx2(uint32_t nh, const float *const *q, const uint16_t *rows, uint32_t n,
                       uint32_t d, float *const *scores) {
    dot_rows_16bit<F16Rows>(nh, q, rows, n, d, scores);
}
void dot_rows_bf16_avx2(uint32_t nh, const float *const *q, const uint16_t *rows, uint32_t n,
                        uint32_t d, float *const *scores) {
    dot_rows_16bit<Bf16Rows>(nh, q, rows, n, d, scores);
}
void dot_rows_i8_avx2(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                      uint32_t d, float *const *scores) {
    dot_rows_scaled<I8Rows>(nh, q, head, n, d, 1.0f, scores);
}
void dot_rows_fp8_avx2(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                       uint32_t d, float *const *scores) {
    dot_rows_scaled<Fp8Rows>(nh, q, head, n, d, kFp8Unscale, scores);
}
template <llmkv_kv_dtype DT>
void dot_rows_int4(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n, uint32_t d,
                   float *const *scores) {
    by_head_chunks(
        nh, [&]<int NH>(uint32_t h0) { dot_i4k_heads<NH, DT>(q + h0, head, n, d, scores + h0); });
}
void dot_rows_i4k_avx2(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                       uint32_t d, float *const *scores) {
    dot_rows_int4<LLMKV_KV_INT4>(nh, q, head, n, d, scores);
}
void dot_rows_i4ck_avx2(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                        uint32_t d, float *const *scores) {
    dot_rows_int4<LLMKV_KV_INT4_COMPACT>(nh, q, head, n, d, scores);
}

void axpy_rows_f16_avx2(uint32_t nh, const float *const *w, const uint16_t *rows, uint32_t n,
                        uint32_t d, float *const *out) {
    // rows: fp16 [n][d]
    axpy_rows<F16Rows>(nh, w, rows, n, d, out, [](uint32_t) { return 1.0f; });
}
void axpy_rows_bf16_avx2(uint32_t nh, const float *const *w, const uint16_t *rows, uint32_t n,
                         uint32_t d, float *const *out) {
    // rows: bf16 [n][d]
    axpy_rows<Bf16Rows>(nh, w, rows, n, d, out, [](uint32_t) { return 1.0f; });
}
void axpy_rows_i8_avx2(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                       uint32_t d, float *const *out) {
    // head: int8 [n][d], fp16 scale [n]
    const uint8_t *scales = head + size_t(n) * d;
    axpy_rows<I8Rows>(nh, w, head, n, d, out,
                      [&](uint32_t t) { return fp16_at(scales + size_t(t) * 2); });
}
void axpy_rows_fp8_avx2(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                        uint32_t d, float *const *out) {
    // head: e4m3fn [n][d], fp16 scale [n]
    const uint8_t *scales = head + size_t(n) * d;
    axpy_rows<Fp8Rows>(nh, w, head, n, d, out,
                       [&](uint32_t t) { return fp16_at(scales + size_t(t) * 2) * kFp8Unscale; });
}
template <llmkv_kv_dtype DT>
void axpy_rows_int4(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n, uint32_t d,
                    float *const *out) {
    // head: nibbles [n][d/2] and the (token, group) scales / mins of an int4 or compact int4 V head
    const uint32_t G = DT == LLMKV_KV_INT4 ? int4_v_group(d) : int4c_v_group(d);
    by_head_chunks(nh, [&]<int NH>(uint32_t h0) {
        // 32 columns per tile (16 for 4 heads or 16-channel groups): inside one group.
        constexpr int C = NH == 4 ? 2 : 4;
        const uint32_t cols = G >= 32 ? 8 * C : 16;
        for (uint32_t c = 0; c < d; c += cols) {
            if (cols == 32) {
                axpy_i4v_tile<NH, 4, DT>(w + h0, head, n, d, G, c, out + h0);
            } else {
                axpy_i4v_tile<NH, 2, DT>(w + h0, head, n, d, G, c, out + h0);
            }
        }
    });
}
void axpy_rows_i4v_avx2(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                        uint32_t d, float *const *out) {
    axpy_rows_int4<LLMKV_KV_INT4>(nh, w, head, n, d, out);
}
void axpy_rows_i4cv_avx2(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                         uint32_t d, float *const *out) {
    axpy_rows_int4<LLMKV_KV_INT4_COMPACT>(nh, w, head, n, d, out);
}

float softmax_partial_avx2(float *x, uint32_t n, float scale, float *max_out) {  // x: f32 [n]
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 mx = _mm256_set1_ps(-INFINITY);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sc);
        _mm256_storeu_ps(x + i, v);
        mx = _mm256_max_ps(mx, v);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mx);
    float m = lanes[0];
    for (int k = 1; k < 8; ++k) m = lanes[k] > m ? lanes[k] : m;
    for (; i < n; ++i) {
        x[i] *= scale;
        m = x[i] > m ? x[i] : m;
    }
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = hsum(sum);
    if (i < n) {  // the tail through the same exp, one padded vector
        alignas(32) float tail[8] = {};
        for (uint32_t k = i; k < n; ++k) tail[k - i] = x[k];
        _mm256_store_ps(tail, exp_ps(_mm256_sub_ps(_mm256_load_ps(tail), mv)));
        for (uint32_t k = i; k < n; ++k) {
            x[k] = tail[k - i];
            total += x[k];
        }
    }
    *max_out = m;
    return total;
}

void softmax_avx2(float *x, uint32_t n, float scale) {  // x: f32 [n]
    float m;
    const float total = softmax_partial_avx2(x, n, scale, &m);
    uint32_t i;
    const __m256 inv = _mm256_set1_ps(1.0f / total);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; ++i) x[i] *= 1.0f / total;
}

void f32_to_f16_avx2(const float *src, uint16_t *dst, uint32_t n) {
    // src: f32 [n]; dst: fp16 [n]
    for (uint32_t i = 0; i < n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), h);
    }
}

}  // namespace llmkv::cpu::kernels
