// AVX-512 VNNI kernels for packed weights (matmul_packed.h: Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL,
// MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni
// -mfma -mf16c; called only after cpu_has_avx512_vnni().
//
// A ZMM register holds one int32 or f32 per row of a 16-row group. Per block and token, eight
// vpdpbusd (unsigned weight codes x broadcast signed activation codes, starting from the
// activation record's -o * S that turns the unsigned codes back into signed ones; Q6_K, Q3_K and
// Q2_K in two chains, one per 16-element half, each multiplied by its scales with vpmulld) give
// the exact block dot products of 16 rows, then one vcvtdq2ps, vmulps and vfmadd (two for the
// types with a min; Q2_K's min sum m_lo * S_lo + m_hi * S_hi is two more vpmulld) apply the
// float steps of matmul_packed.h. The Q5 types', Q6_K's and Q3_K's high
// bits are moved into place with one shift and one vpternlogd per code vector; Q4_K's and Q5_K's D
// and M are made per block and group (an exact int-to-float product), shared by the tile's tokens.
// Prefill tiles are one group x up to kTokens tokens, so a block's codes are loaded once per
// kTokens tokens; decode tiles are one group x 1 token with two integer chains (the integer
// sums are exact, so splitting them changes nothing).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/simd_util.h"

namespace llmkv::cpu::detail {

namespace {

constexpr int kTokens = 8;  // tokens per prefill tile
constexpr int64_t kTokenGroup = 64;
// Decode streams each weight once. A tile reads its row group (one contiguous region) block by
// block; the tiles prefetch a linear sweep kPrefetchDistance bytes ahead of the region's start
// plus the bytes consumed so far, the way matmul_avx2.cpp's drive() does for row-major weights,
// and the first kPrefetchDistance bytes of a call are requested up front.
constexpr size_t kPrefetchDistance = 8192;

template <TensorType kType>
inline constexpr size_t kCodes = packed_codes_offset(kType);
template <TensorType kType>
inline constexpr size_t kHigh = packed_high_offset(kType);

// Shifts each 16-bit lane left by S (right by -S); S is a compile-time constant.
template <int S>
inline __m512i shift16(__m512i v) {
    if constexpr (S > 0)
        return _mm512_slli_epi16(v, S);
    else if constexpr (S < 0)
        return _mm512_srli_epi16(v, -S);
    else
        return v;
}

// Code vector K of a group block as unsigned bytes (matmul_packed.h). Every shift below moves
// bits within their byte, so 16-bit shifts serve.
template <TensorType kType, int K>
inline __m512i codes(const uint8_t *blk) {
    if constexpr (kType == TensorType::Q8_0) {
        return _mm512_loadu_si512(blk + kCodes<kType> + 64 * K);  // stored as w + 128
    } else if constexpr (packed_has_crumbs(kType)) {
        // bits 2(K % 4).. of low vector K / 4; Q3_K: | bit K of the high vector as bit 2
        const __m512i lo = _mm512_and_si512(
            shift16<-2 * (K & 3)>(_mm512_loadu_si512(blk + kCodes<kType> + 64 * (K / 4))),
            _mm512_set1_epi8(0x03));
        if constexpr (kType == TensorType::Q2_K) return lo;
        const __m512i h = shift16<2 - K>(_mm512_loadu_si512(blk + kHigh<kType>));
        return _mm512_ternarylogic_epi32(lo, h, _mm512_set1_epi8(0x04), 0xF8);
    } else {
        const __m512i v = _mm512_loadu_si512(blk + kCodes<kType> + 64 * (K & 3));
        const __m512i nib =
            _mm512_and_si512(K < 4 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
        if constexpr (packed_has_levels(kType)) {
            // the levels + 128 (the sign bit flipped), one table per 128-bit lane
            const __m512i lut = _mm512_broadcast_i32x4(_mm_xor_si128(
                _mm_loadu_si128(reinterpret_cast<const __m128i *>(packed_levels(kType))),
                _mm_set1_epi8(char(0x80))));
            return _mm512_shuffle_epi8(lut, nib);
        } else if constexpr (packed_has_high_bit(kType)) {
            // nib | (h & 0x10): truth table 0xF8 over (nib, h, mask)
            const __m512i h = shift16<4 - K>(_mm512_loadu_si512(blk + kHigh<kType>));
            return _mm512_ternarylogic_epi32(nib, h, _mm512_set1_epi8(0x10), 0xF8);
        } else if constexpr (kType == TensorType::Q6_K) {
            const __m512i h =
                shift16<4 - 2 * (K & 3)>(_mm512_loadu_si512(blk + kHigh<kType> + 64 * (K / 4)));
            return _mm512_ternarylogic_epi32(nib, h, _mm512_set1_epi8(0x30), 0xF8);
        } else {
            return nib;
        }
    }
}

inline __m512i bcast4(const int8_t *p) {
    return _mm512_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t *>(p))));
}

// The activation term the dot product of half h (Q6_K, Q3_K) or of the block starts from (0 for
// the types with a min, whose codes are unsigned weights).
template <TensorType kType>
inline __m512i start_value(const uint8_t *a, size_t s_off, int64_t b, int h) {
    if constexpr (packed_has_min(kType) || packed_has_half_mins(kType)) {
        return _mm512_setzero_si512();
    } else {
        return _mm512_set1_epi32(int(load_u32(a + s_off + 8 * size_t(b) + 4 * size_t(h))));
    }
}

inline __m512 f16x16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}
inline __m512 u8x16(const uint8_t *p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
}
inline __m512i i8x16(const uint8_t *p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
inline __m512i u8x16i(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
// 16 bytes of two nibbles each (Q2_K's scales or mins) -> the low nibbles (half 0) and the
// high nibbles (half 1) as int32.
inline void nibbles16(const uint8_t *p, __m512i *lo, __m512i *hi) {
    const __m512i v = u8x16i(p);
    *lo = _mm512_and_si512(v, _mm512_set1_epi32(15));
    *hi = _mm512_srli_epi32(v, 4);
}

// The block's D and M of 16 rows (matmul_packed.h): blk the group block, hdr its super-block's
// header.
template <TensorType kType>
inline void scales(const uint8_t *blk, const uint8_t *hdr, __m512 *D, __m512 *M) {
    if constexpr (kType == TensorType::Q4_K || kType == TensorType::Q5_K) {
        *D = _mm512_mul_ps(u8x16(blk), f16x16(hdr));
        *M = _mm512_mul_ps(u8x16(blk + 16), f16x16(hdr + 32));
    } else if constexpr (packed_has_half_mins(kType)) {
        *D = f16x16(hdr);
        *M = f16x16(hdr + 32);  // dminneg
    } else if constexpr (packed_has_half_scales(kType)) {
        *D = f16x16(hdr);
    } else if constexpr (packed_has_e8m0_scales(kType)) {
        // 2^(e - 128): (e - 1) << 23, or 0x00200000 << e for e < 2 (mxfp4_scale_bits)
        const __m512i e =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk)));
        const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        *D = _mm512_castsi512_ps(
            _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, sub));
    } else {
        *D = f16x16(blk);
        if constexpr (packed_has_f16_min(kType)) *M = f16x16(blk + 32);
    }
}

// The exact integer block dot product from the two chains: Q6_K and Q3_K scale each half
// (chain a covers codes 0-15, b codes 16-31), the other types add them.
template <TensorType kType>
inline __m512i combine(const uint8_t *blk, __m512i ia, __m512i ib) {
    if constexpr (packed_has_half_mins(kType)) {
        __m512i lo, hi;
        nibbles16(blk, &lo, &hi);
        return _mm512_add_epi32(_mm512_mullo_epi32(ia, lo), _mm512_mullo_epi32(ib, hi));
    } else if constexpr (packed_has_half_scales(kType)) {
        return _mm512_add_epi32(_mm512_mullo_epi32(ia, i8x16(blk)),
                                _mm512_mullo_epi32(ib, i8x16(blk + 16)));
    } else {
        return _mm512_add_epi32(ia, ib);
    }
}

// Q2_K's min sum Im = m_lo * S_lo + m_hi * S_hi of 16 rows (ml, mh: the rows' mins) for the
// activation record a's block b (its s holds the halves' sums).
inline __m512i half_min_sum(__m512i ml, __m512i mh, const uint8_t *a, size_t s_off, int64_t b) {
    const uint8_t *s = a + s_off + 8 * size_t(b);
    return _mm512_add_epi32(_mm512_mullo_epi32(ml, _mm512_set1_epi32(int(load_u32(s)))),
                            _mm512_mullo_epi32(mh, _mm512_set1_epi32(int(load_u32(s + 4)))));
}

// One row group x T tokens (prefill). gw: the group's start. Stores nrows rows per token.
template <TensorType kType, int T>
void ptile(const uint8_t *gw, int64_t nb, const uint8_t *act, size_t act_stride, float *y,
           int64_t ldy, int nrows) {
    const size_t d_off = size_t(nb) * kQBlock;
    const size_t s_off = d_off + size_t(nb) * 4;
    const uint8_t *tok[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) tok[t] = act + size_t(t) * act_stride;
    __m512 acc[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *blk = gw + packed_block_offset(kType, b);
        __m512i ia[T], ib[T];
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
            ia[t] = start_value<kType>(tok[t], s_off, b, 0);
            ib[t] = start_value<kType>(tok[t], s_off, b, 1);
        }
        static_for<8>([&](auto kc) {
            constexpr int k = decltype(kc)::value;
            const __m512i w = codes<kType, k>(blk);
#pragma GCC unroll 16
            for (int t = 0; t < T; ++t) {
                const __m512i x = bcast4(act_qs(tok[t]) + b * kQBlock + packed_elem_of(kType, k));
                if (k < 4)
                    ia[t] = _mm512_dpbusd_epi32(ia[t], w, x);
                else
                    ib[t] = _mm512_dpbusd_epi32(ib[t], w, x);
            }
        });
        __m512 D, M;
        scales<kType>(blk, gw + packed_header_offset(kType, b), &D, &M);
        __m512i ml, mh;
        if constexpr (packed_has_half_mins(kType)) nibbles16(blk + 16, &ml, &mh);
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
            const float *dx = reinterpret_cast<const float *>(tok[t] + d_off);
            const __m512 sc = _mm512_mul_ps(D, _mm512_set1_ps(dx[b]));
            acc[t] =
                _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(combine<kType>(blk, ia[t], ib[t])), acc[t]);
            if constexpr (packed_has_min(kType)) {
                const float *xs = reinterpret_cast<const float *>(tok[t] + s_off);
                acc[t] = _mm512_fmadd_ps(M, _mm512_set1_ps(xs[2 * b]), acc[t]);
            }
            if constexpr (packed_has_half_mins(kType)) {
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(M, _mm512_set1_ps(dx[b])),
                                         _mm512_cvtepi32_ps(half_min_sum(ml, mh, tok[t], s_off, b)),
                                         acc[t]);
            }
        }
    }
    const __mmask16 mask = __mmask16((1u << nrows) - 1u);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

// One row group x 1 token (decode). Stores nrows rows. pf .. pf_end: the bytes to prefetch,
// one block's worth per block.
template <TensorType kType>
void dtile(const uint8_t *gw, int64_t nb, const uint8_t *a, float *y, int nrows, const uint8_t *pf,
           const uint8_t *pf_end) {
    const size_t d_off = size_t(nb) * kQBlock;
    const size_t s_off = d_off + size_t(nb) * 4;
    constexpr size_t kStep = packed_unit_bytes(kType) / size_t(packed_unit_blocks(kType));
    const int8_t *xq = act_qs(a);
    const float *dx = reinterpret_cast<const float *>(a + d_off);
    const float *xs = reinterpret_cast<const float *>(a + s_off);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        if (pf + kStep <= pf_end) prefetch_step<kStep>(pf);
        pf += kStep;
        const uint8_t *blk = gw + packed_block_offset(kType, b);
        // Two chains: codes 0-15 and 16-31 (the halves of the types with half scales; for the
        // others any split is exact).
        __m512i ia = start_value<kType>(a, s_off, b, 0);
        __m512i ib = start_value<kType>(a, s_off, b, 1);
        static_for<8>([&](auto kc) {
            constexpr int k = decltype(kc)::value;
            const __m512i x = bcast4(xq + b * kQBlock + packed_elem_of(kType, k));
            if (k < 4)
                ia = _mm512_dpbusd_epi32(ia, codes<kType, k>(blk), x);
            else
                ib = _mm512_dpbusd_epi32(ib, codes<kType, k>(blk), x);
        });
        __m512 D, M;
        scales<kType>(blk, gw + packed_header_offset(kType, b), &D, &M);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(D, _mm512_set1_ps(dx[b])),
                              _mm512_cvtepi32_ps(combine<kType>(blk, ia, ib)), acc);
        if constexpr (packed_has_min(kType))
            acc = _mm512_fmadd_ps(M, _mm512_set1_ps(xs[2 * b]), acc);
        if constexpr (packed_has_half_mins(kType)) {
            __m512i ml, mh;
            nibbles16(blk + 16, &ml, &mh);
            acc = _mm512_fmadd_ps(_mm512_mul_ps(M, _mm512_set1_ps(dx[b])),
                                  _mm512_cvtepi32_ps(half_min_sum(ml, mh, a, s_off, b)), acc);
        }
    }
    _mm512_mask_storeu_ps(y, __mmask16((1u << nrows) - 1u), acc);
}

using PTileFn = void (*)(const uint8_t *, int64_t, const uint8_t *, size_t, float *, int64_t, int);

template <TensorType kType, int... I>
constexpr std::array<PTileFn, sizeof...(I)> make_ptiles(std::integer_sequence<int, I...>) {
    return {&ptile<kType, I + 1>...};
}

template <TensorType kType>
void rows(const MatmulJob &job, int64_t r0, int64_t r1) {
    static constexpr auto kP = make_ptiles<kType>(std::make_integer_sequence<int, kTokens>{});
    const int64_t nb = job.cols / kQBlock;
    const size_t group_bytes = packed_group_bytes(kType, nb);
    const uint8_t *w0 = job.w + size_t(r0 / kPackRows) * group_bytes;
    const uint8_t *end = job.w + size_t((job.rows + kPackRows - 1) / kPackRows) * group_bytes;
    if (job.n_tokens == 1) {
        for (const uint8_t *p = w0; p < std::min(w0 + kPrefetchDistance, end); p += 64) {
            _mm_prefetch(reinterpret_cast<const char *>(p), _MM_HINT_T0);
        }
        for (int64_t r = r0; r < r1; r += kPackRows) {
            const int nr = int(std::min(kPackRows, r1 - r));
            const uint8_t *gw = w0 + size_t((r - r0) / kPackRows) * group_bytes;
            dtile<kType>(gw, nb, job.act, job.y + r, nr, gw + kPrefetchDistance, end);
        }
        return;
    }
    for (int64_t tg = 0; tg < job.n_tokens; tg += kTokenGroup) {
        const int64_t tg_end = std::min(job.n_tokens, tg + kTokenGroup);
        for (int64_t r = r0; r < r1; r += kPackRows) {
            const int nr = int(std::min(kPackRows, r1 - r));
            const uint8_t *gw = w0 + size_t((r - r0) / kPackRows) * group_bytes;
            for (int64_t t = tg; t < tg_end; t += kTokens) {
                const int nt = int(std::min<int64_t>(kTokens, tg_end - t));
                kP[size_t(nt - 1)](gw, nb, job.act + size_t(t) * job.act_stride, job.act_stride,
                                   job.y + t * job.ldy + r, job.ldy, nr);
            }
        }
    }
}

}  // namespace

void packed_rows_avx512(const MatmulJob &job, int64_t r0, int64_t r1) {
    visit_packed_type(job.type, [&](auto t) { rows<decltype(t)::value>(job, r0, r1); });
}

}  // namespace llmkv::cpu::detail
