// AVX2/FMA/F16C row kernels for CPU attention: fp16 / bf16 rows and sealed heads in the
// fp8 e4m3, int8 and int4 codecs (kv/codec.h), dequantized in registers 8 values at a time.
// K kernels score 8 tokens at once and reduce them with one transposing horizontal add.
#include <immintrin.h>

#include "backend/cpu/attention_kernels.h"
#include "kv/codec.h"

namespace llmkv::cpu::kernels {

namespace {

// ---- loaders: 8 consecutive values of a row as f32 (before any scale) ------------------

inline __m256 load_f16(const uint16_t *p) {  // p: fp16 [8]
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

inline __m256 load_bf16(const uint16_t *p) {  // p: bf16 [8]
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 load_i8(const uint8_t *p) {  // p: int8 [8]
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

// p: e4m3fn [8]. Returns value * 2^-8 exactly: sign-extend to 16 bits, shift the 7
// magnitude bits into fp16 exponent/mantissa position, clear the duplicated sign bit.
inline __m256 load_fp8(const uint8_t *p) {
    __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
    __m128i h = _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(int16_t(0xBF80)));
    return _mm256_cvtph_ps(h);
}
constexpr float kFp8Unscale = 256.0f;  // load_fp8 returns value / 256

// p: 8 bytes of packed nibbles = 16 values (byte i: value 2i low, 2i+1 high), in order.
inline __m128i unpack_nibbles16(const uint8_t *p) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    __m128i lo = _mm_and_si128(b, mask);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    return _mm_unpacklo_epi8(lo, hi);
}
inline __m256 nibbles_lo8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
inline __m256 nibbles_hi8(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
}

inline float fp16_at(const uint8_t *p) {  // p: one fp16, any alignment
    uint16_t h;
    __builtin_memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 shuf = _mm_movehdup_ps(lo);
    __m128 sums = _mm_add_ps(lo, shuf);
    shuf = _mm_movehl_ps(shuf, sums);
    sums = _mm_add_ss(sums, shuf);
    return _mm_cvtss_f32(sums);
}

// The 8 horizontal sums of a[0..7] as one vector (lane i = sum of a[i]).
inline __m256 hsum8(const __m256 *a) {
    __m256 s01 = _mm256_hadd_ps(a[0], a[1]);
    __m256 s23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 s45 = _mm256_hadd_ps(a[4], a[5]);
    __m256 s67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 s0123 = _mm256_hadd_ps(s01, s23);
    __m256 s4567 = _mm256_hadd_ps(s45, s67);
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                         _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// 8 fp16 scales (fewer when n < 8: the rest read as 0).
inline __m256 load_scales8(const uint8_t *p, uint32_t n) {  // p: fp16 [n]
    if (n >= 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    alignas(16) uint16_t tmp[8] = {};
    for (uint32_t i = 0; i < n; ++i) __builtin_memcpy(&tmp[i], p + 2 * i, 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i *>(tmp)));
}

inline void store_n(float *dst, __m256 v, uint32_t n) {  // dst: f32 [n], n <= 8
    if (n >= 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    for (uint32_t i = 0; i < n; ++i) dst[i] = tmp[i];
}

// ---- K scores ----------------------------------------------------------------------------

#define LLMKV_INLINE inline __attribute__((always_inline))

// Row pointers of the 8 tokens from t0; tokens past n repeat the last row (their sums are
// computed and dropped), so every token's sum is the same arithmetic wherever it falls.
template <class T>
LLMKV_INLINE void rows8(const T *base, size_t stride, uint32_t t0, uint32_t n, const T *r[8]) {
    for (uint32_t j = 0; j < 8; ++j) r[j] = base + size_t(t0 + j < n ? t0 + j : n - 1) * stride;
}

// dot(q, row_t) for 8 tokens at once: 8 independent FMA chains, then one transposing
// reduction. r: 8 rows of d values (element type T); Load converts 8 values to f32.
template <class T, __m256 (*Load)(const T *)>
LLMKV_INLINE __m256 dot8(const float *q, const T *const r[8], uint32_t d) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (uint32_t i = 0; i < d; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, Load(r[j] + i), acc[j]);
    }
    return hsum8(acc);
}

template <__m256 (*Load)(const uint16_t *)>
void dot_rows_16bit(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    // rows: fp16 / bf16 [n][d]
    for (uint32_t t0 = 0; t0 < n; t0 += 8) {
        const uint16_t *r[8];
        rows8(rows, d, t0, n, r);
        store_n(scores + t0, dot8<uint16_t, Load>(q, r, d), n - t0);
    }
}

// head: values [n][d] (1 byte each), fp16 scale [n]; scores = scale_t * unscale * dot.
template <__m256 (*Load)(const uint8_t *)>
void dot_rows_scaled(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float unscale,
                     float *scores) {
    const uint8_t *scales = head + size_t(n) * d;
    const __m256 u = _mm256_set1_ps(unscale);
    for (uint32_t t0 = 0; t0 < n; t0 += 8) {
        const uint8_t *r[8];
        rows8(head, d, t0, n, r);
        __m256 s = dot8<uint8_t, Load>(q, r, d);
        s = _mm256_mul_ps(s, _mm256_mul_ps(load_scales8(scales + size_t(t0) * 2, n - t0), u));
        store_n(scores + t0, s, n - t0);
    }
}

// ---- V accumulation ----------------------------------------------------------------------

// out[c0, c0 + 8*NC) += sum_t ws(t) * row_t[c0 ..]: NC accumulators stay in registers
// while the tokens stream by. Load(t, c) returns 8 values of token t at column c.
template <int NC, class Weight, class Load>
inline void axpy_chunk(uint32_t n, uint32_t c0, float *out, Weight ws, Load load) {
    __m256 acc[NC];
    for (int j = 0; j < NC; ++j) acc[j] = _mm256_loadu_ps(out + c0 + 8 * j);
    for (uint32_t t = 0; t < n; ++t) {
        const __m256 w = _mm256_set1_ps(ws(t));
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_fmadd_ps(w, load(t, c0 + 8 * j), acc[j]);
    }
    for (int j = 0; j < NC; ++j) _mm256_storeu_ps(out + c0 + 8 * j, acc[j]);
}

template <class Weight, class Load>
void axpy_all(uint32_t n, uint32_t d, float *out, Weight ws, Load load) {
    uint32_t c = 0;
    for (; c + 64 <= d; c += 64) axpy_chunk<8>(n, c, out, ws, load);
    for (; c + 32 <= d; c += 32) axpy_chunk<4>(n, c, out, ws, load);
    for (; c < d; c += 8) axpy_chunk<1>(n, c, out, ws, load);
}

// int4 V: NG groups of G columns (NG * G / 8 accumulators) from column c0. Nibbles give
// sum_t (w_t s_tg) nib; the mins add sum_t w_t z_tg per group at the end.
template <uint32_t G, uint32_t NG>
void axpy_i4v_groups(const float *w, const uint8_t *head, uint32_t n, uint32_t d, uint32_t c0,
                     float *out) {
    // head: nibbles [n][d/2], fp16 scale [n][d/G], fp16 min [n][d/G]
    constexpr uint32_t NA = G / 8;  // accumulators per group
    const uint32_t ng = d / G, g0 = c0 / G;
    const uint8_t *scales = head + codec_scales_offset(LLMKV_KV_INT4, n, d);
    const uint8_t *mins = head + int4_v_mins_offset(n, d);
    __m256 acc[NG * NA];
    float bias[NG] = {};
    for (uint32_t j = 0; j < NG * NA; ++j) acc[j] = _mm256_loadu_ps(out + c0 + 8 * j);
    for (uint32_t t = 0; t < n; ++t) {
        const uint8_t *row = head + size_t(t) * d / 2 + c0 / 2;
        for (uint32_t g = 0; g < NG; ++g) {
            const size_t gi = size_t(t) * ng + g0 + g;
            const __m256 ws = _mm256_set1_ps(w[t] * fp16_at(scales + gi * 2));
            bias[g] += w[t] * fp16_at(mins + gi * 2);
            for (uint32_t k = 0; k < NA; k += 2) {  // 16 values per 8 bytes
                __m128i v = unpack_nibbles16(row + (g * G + 8 * k) / 2);
                acc[g * NA + k] = _mm256_fmadd_ps(ws, nibbles_lo8(v), acc[g * NA + k]);
                acc[g * NA + k + 1] = _mm256_fmadd_ps(ws, nibbles_hi8(v), acc[g * NA + k + 1]);
            }
        }
    }
    for (uint32_t g = 0; g < NG; ++g) {
        const __m256 b = _mm256_set1_ps(bias[g]);
        for (uint32_t k = 0; k < NA; ++k) {
            _mm256_storeu_ps(out + c0 + g * G + 8 * k, _mm256_add_ps(acc[g * NA + k], b));
        }
    }
}

}  // namespace

void dot_rows_f16_avx2(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    dot_rows_16bit<load_f16>(q, rows, n, d, scores);
}
void dot_rows_bf16_avx2(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    dot_rows_16bit<load_bf16>(q, rows, n, d, scores);
}
void dot_rows_i8_avx2(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores) {
    dot_rows_scaled<load_i8>(q, head, n, d, 1.0f, scores);
}
void dot_rows_fp8_avx2(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores) {
    dot_rows_scaled<load_fp8>(q, head, n, d, kFp8Unscale, scores);
}

void dot_rows_i4k_avx2(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores) {
    // head: nibbles [n][d/2], fp16 scale [d], fp16 min [d]
    const uint8_t *scales = head + codec_scales_offset(LLMKV_KV_INT4, n, d);
    const uint8_t *mins = head + int4_k_mins_offset(n, d);
    constexpr uint32_t kChunk = 256;  // channels per pass: q * scale lives on the stack
    alignas(32) float qs[kChunk];     // f32 [chunk]: q_d * s_d
    __m256 qz = _mm256_setzero_ps();
    for (uint32_t c0 = 0; c0 < d; c0 += kChunk) {
        const uint32_t len = d - c0 < kChunk ? d - c0 : kChunk;
        for (uint32_t i = 0; i < len; i += 8) {
            const __m256 qv = _mm256_loadu_ps(q + c0 + i);
            const auto *s = reinterpret_cast<const uint16_t *>(scales) + c0 + i;
            const auto *z = reinterpret_cast<const uint16_t *>(mins) + c0 + i;
            _mm256_store_ps(qs + i, _mm256_mul_ps(qv, load_f16(s)));
            qz = _mm256_fmadd_ps(qv, load_f16(z), qz);
        }
        for (uint32_t t0 = 0; t0 < n; t0 += 8) {
            const uint8_t *r[8];  // nibble rows of 8 tokens, from channel c0
            rows8(head + c0 / 2, d / 2, t0, n, r);
            __m256 acc[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
            for (uint32_t i = 0; i < len; i += 16) {  // 16 channels = 8 bytes per token
                const __m256 q_lo = _mm256_load_ps(qs + i), q_hi = _mm256_load_ps(qs + i + 8);
#pragma GCC unroll 8
                for (int j = 0; j < 8; ++j) {
                    const __m128i v = unpack_nibbles16(r[j] + i / 2);
                    acc[j] = _mm256_fmadd_ps(q_lo, nibbles_lo8(v), acc[j]);
                    acc[j] = _mm256_fmadd_ps(q_hi, nibbles_hi8(v), acc[j]);
                }
            }
            __m256 s = hsum8(acc);
            if (c0 > 0) {  // later chunks add to the partial sums
                alignas(32) float prev[8] = {};
                for (uint32_t j = 0; j < 8 && t0 + j < n; ++j) prev[j] = scores[t0 + j];
                s = _mm256_add_ps(_mm256_load_ps(prev), s);
            }
            store_n(scores + t0, s, n - t0);
        }
    }
    const float bias = hsum(qz);
    for (uint32_t t = 0; t < n; ++t) scores[t] += bias;
}

void axpy_rows_f16_avx2(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    // rows: fp16 [n][d]
    axpy_all(n, d, out, [&](uint32_t t) { return w[t]; },
             [&](uint32_t t, uint32_t c) { return load_f16(rows + size_t(t) * d + c); });
}
void axpy_rows_bf16_avx2(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    // rows: bf16 [n][d]
    axpy_all(n, d, out, [&](uint32_t t) { return w[t]; },
             [&](uint32_t t, uint32_t c) { return load_bf16(rows + size_t(t) * d + c); });
}
void axpy_rows_i8_avx2(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out) {
    // head: int8 [n][d], fp16 scale [n]
    const uint8_t *scales = head + size_t(n) * d;
    axpy_all(n, d, out, [&](uint32_t t) { return w[t] * fp16_at(scales + size_t(t) * 2); },
             [&](uint32_t t, uint32_t c) { return load_i8(head + size_t(t) * d + c); });
}
void axpy_rows_fp8_avx2(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out) {
    // head: e4m3fn [n][d], fp16 scale [n]
    const uint8_t *scales = head + size_t(n) * d;
    axpy_all(n, d, out,
             [&](uint32_t t) { return w[t] * (fp16_at(scales + size_t(t) * 2) * kFp8Unscale); },
             [&](uint32_t t, uint32_t c) { return load_fp8(head + size_t(t) * d + c); });
}
void axpy_rows_i4v_avx2(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out) {
    // head: nibbles [n][d/2], fp16 scale [n][d/G], fp16 min [n][d/G]
    uint32_t c = 0;
    if (int4_v_group(d) == 32) {
        for (; c + 64 <= d; c += 64) axpy_i4v_groups<32, 2>(w, head, n, d, c, out);
        for (; c < d; c += 32) axpy_i4v_groups<32, 1>(w, head, n, d, c, out);
    } else {
        for (; c + 64 <= d; c += 64) axpy_i4v_groups<16, 4>(w, head, n, d, c, out);
        for (; c < d; c += 16) axpy_i4v_groups<16, 1>(w, head, n, d, c, out);
    }
}

void f32_to_f16_avx2(const float *src, uint16_t *dst, uint32_t n) {
    // src: f32 [n]; dst: fp16 [n]
    for (uint32_t i = 0; i < n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), h);
    }
}

}  // namespace llmkv::cpu::kernels
