// AVX2 kernels for packed weights (matmul_packed.h), bitwise equal to the portable and AVX-512
// ones. Compiled with -mavx2 -mfma -mf16c; called only after cpu_has_avx2().
//
// A YMM register holds one value per row of half a row group (rows 0-7 or 8-15). The exact
// block dot products come from vpmaddubsw (unsigned x signed bytes, pairs summed to int16):
//   nibble types, Q3_K and Q2_K: codes 0..15 (Q4), 0..31 (Q5), 0..63 (Q6_K), 0..7 (Q3_K), 0..3
//       (Q2_K) times codes -127..127: a pair is at most 2 * 15 * 127 = 3810, 7874, 16002, 1778
//       or 762 in size, so the int16 sums of 8, 4, 2, 4 or 4 steps neither saturate nor wrap;
//       one vpmaddwd by 1 widens them. The sums start from the activation record's -o * S
//       (matmul_packed.h; 0 for the types with a min), per 16-element half for the types with
//       half scales, each half then multiplied by its scales (vpmulld); Q2_K's min sum
//       m_lo * S_lo + m_hi * S_hi takes two more.
//   Q8_0, IQ4_NL and MXFP4 (IQ4_NL's levels reach 241 as unsigned codes): the signed weight code w
//   times
//       x as |w| times sign(x, w) (vpsignb), pairs within 2 * 128 * 127 = 32512; widened per
//       step. Activation codes are never -128 (the quantizer clamps to -127), so vpsignb is exact.
// Then the float steps of matmul_packed.h, as the other families.
#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/simd_util.h"

namespace llmkv::cpu::detail {

namespace {

constexpr int kTokens = 2;  // tokens per tile (2 halves x 2 tokens x 2 accumulators)
constexpr int64_t kTokenGroup = 64;

template <TensorType kType>
inline constexpr size_t kCodes = packed_codes_offset(kType);
template <TensorType kType>
inline constexpr size_t kHigh = packed_high_offset(kType);
// Steps whose int16 pair sums may be added before widening (see above).
template <TensorType kType>
inline constexpr int kRun = kType == TensorType::Q6_K                                ? 2
                            : packed_has_high_bit(kType) || packed_has_crumbs(kType) ? 4
                                                                                     : 8;

// Shifts each 16-bit lane left by S (right by -S); S is a compile-time constant.
template <int S>
inline __m256i shift16(__m256i v) {
    if constexpr (S > 0)
        return _mm256_slli_epi16(v, S);
    else if constexpr (S < 0)
        return _mm256_srli_epi16(v, -S);
    else
        return v;
}

inline __m256i load256(const uint8_t *p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
}

// Half h of code vector K of Q8_0, IQ4_NL or MXFP4 as signed weight codes w (int8).
template <TensorType kType, int K>
inline __m256i signed_codes(const uint8_t *blk, int h) {
    if constexpr (kType == TensorType::Q8_0) {  // stored as w + 128
        return _mm256_xor_si256(load256(blk + kCodes<kType> + 64 * K + 32 * h),
                                _mm256_set1_epi8(char(0x80)));
    } else {  // IQ4_NL, MXFP4: the nibble's level (packed_levels)
        const __m256i v = load256(blk + kCodes<kType> + 64 * (K & 3) + 32 * h);
        const __m256i nib =
            _mm256_and_si256(K < 4 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
        const __m256i lut = _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(packed_levels(kType))));
        return _mm256_shuffle_epi8(lut, nib);
    }
}

// Half h of code vector K of a nibble type, Q3_K or Q2_K as unsigned bytes (matmul_packed.h).
template <TensorType kType, int K>
inline __m256i codes(const uint8_t *blk, int h) {
    if constexpr (packed_has_crumbs(kType)) {
        const __m256i lo = _mm256_and_si256(
            shift16<-2 * (K & 3)>(load256(blk + kCodes<kType> + 64 * (K / 4) + 32 * h)),
            _mm256_set1_epi8(0x03));
        if constexpr (kType == TensorType::Q2_K) return lo;
        const __m256i hb = shift16<2 - K>(load256(blk + kHigh<kType> + 32 * h));
        return _mm256_or_si256(lo, _mm256_and_si256(hb, _mm256_set1_epi8(0x04)));
    } else {
        const __m256i v = load256(blk + kCodes<kType> + 64 * (K & 3) + 32 * h);
        const __m256i nib =
            _mm256_and_si256(K < 4 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
        if constexpr (packed_has_high_bit(kType)) {
            const __m256i hb = shift16<4 - K>(load256(blk + kHigh<kType> + 32 * h));
            return _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
        } else if constexpr (kType == TensorType::Q6_K) {
            const __m256i hb =
                shift16<4 - 2 * (K & 3)>(load256(blk + kHigh<kType> + 64 * (K / 4) + 32 * h));
            return _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
        } else {
            return nib;
        }
    }
}

inline __m256 u8x8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))));
}
inline __m256i i8x8(const uint8_t *p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
}
// 8 bytes of two nibbles each (Q2_K's scales or mins) -> the low nibbles (half 0) and the high
// nibbles (half 1) as int32.
inline void nibbles8(const uint8_t *p, __m256i *lo, __m256i *hi) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
    *lo = _mm256_and_si256(v, _mm256_set1_epi32(15));
    *hi = _mm256_srli_epi32(v, 4);
}

inline __m256i bcast4(const int8_t *p) {
    return _mm256_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t *>(p))));
}

inline __m256 half_f16(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
// 8 rows' MXFP4 scales 2^(e - 128) from their E8M0 bytes (zero-extended to 16 bits):
// (e - 1) << 23, or 0x00200000 << e for e < 2 (mxfp4_scale_bits).
inline __m256 half_e8m0(const uint8_t *p) {
    const __m256i e = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

// One row group x T tokens. gw: the group's block 0; nrows rows stored per token.
template <TensorType kType, int T>
void tile(const uint8_t *gw, int64_t nb, const uint8_t *act, size_t act_stride, float *y,
          int64_t ldy, int nrows) {
    const size_t d_off = size_t(nb) * kQBlock;
    const size_t s_off = d_off + size_t(nb) * 4;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][T];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *blk = gw + packed_block_offset(kType, b);
        __m256i dot[2][T];
        if constexpr (kType == TensorType::Q8_0 || packed_has_levels(kType)) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) dot[h][t] = _mm256_setzero_si256();
            }
            static_for<8>([&](auto kc) {
                constexpr int k = decltype(kc)::value;
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256i w = signed_codes<kType, k>(blk, h);
                    const __m256i aw = _mm256_abs_epi8(w);
#pragma GCC unroll 4
                    for (int t = 0; t < T; ++t) {
                        const int8_t *x =
                            act_qs(act + size_t(t) * act_stride) + b * kQBlock + 4 * k;
                        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(x), w));
                        dot[h][t] = _mm256_add_epi32(dot[h][t], _mm256_madd_epi16(p, ones));
                    }
                }
            });
        } else {
            // Chain c covers codes 0-15 (c = 0) and 16-31 (c = 1); each starts from its
            // activation term (Q6_K, Q3_K) or chain 0 from the block's (the others).
            __m256i chain[2][2][T], p16[2][T];
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    const uint8_t *a = act + size_t(t) * act_stride;
                    for (int c = 0; c < 2; ++c) {
                        const bool start = !packed_has_min(kType) && !packed_has_half_mins(kType) &&
                                           (c == 0 || packed_has_half_scales(kType));
                        chain[c][h][t] =
                            start ? _mm256_set1_epi32(
                                        int(load_u32(a + s_off + 8 * size_t(b) + 4 * size_t(c))))
                                  : _mm256_setzero_si256();
                    }
                    p16[h][t] = _mm256_setzero_si256();
                }
            }
            static_for<8>([&](auto kc) {
                constexpr int k = decltype(kc)::value;
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256i w = codes<kType, k>(blk, h);
#pragma GCC unroll 4
                    for (int t = 0; t < T; ++t) {
                        const int8_t *x = act_qs(act + size_t(t) * act_stride) + b * kQBlock;
                        p16[h][t] = _mm256_add_epi16(
                            p16[h][t],
                            _mm256_maddubs_epi16(w, bcast4(x + packed_elem_of(kType, k))));
                        if constexpr ((k + 1) % kRun<kType> == 0) {
                            constexpr int c = packed_has_half_scales(kType) ? k / 4 : 0;
                            chain[c][h][t] = _mm256_add_epi32(chain[c][h][t],
                                                              _mm256_madd_epi16(p16[h][t], ones));
                            p16[h][t] = _mm256_setzero_si256();
                        }
                    }
                }
            });
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    if constexpr (packed_has_half_mins(kType)) {
                        __m256i lo, hi;
                        nibbles8(blk + 8 * h, &lo, &hi);
                        dot[h][t] = _mm256_add_epi32(_mm256_mullo_epi32(chain[0][h][t], lo),
                                                     _mm256_mullo_epi32(chain[1][h][t], hi));
                    } else if constexpr (packed_has_half_scales(kType)) {
                        dot[h][t] = _mm256_add_epi32(
                            _mm256_mullo_epi32(chain[0][h][t], i8x8(blk + 8 * h)),
                            _mm256_mullo_epi32(chain[1][h][t], i8x8(blk + 16 + 8 * h)));
                    } else {
                        dot[h][t] = chain[0][h][t];
                    }
                }
            }
        }
        const uint8_t *hdr = gw + packed_header_offset(kType, b);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            __m256 D, M = _mm256_setzero_ps();
            if constexpr (kType == TensorType::Q4_K || kType == TensorType::Q5_K) {
                D = _mm256_mul_ps(u8x8(blk + 8 * h), half_f16(hdr + 16 * h));
                M = _mm256_mul_ps(u8x8(blk + 16 + 8 * h), half_f16(hdr + 32 + 16 * h));
            } else if constexpr (packed_has_half_mins(kType)) {
                D = half_f16(hdr + 16 * h);
                M = half_f16(hdr + 32 + 16 * h);  // dminneg
            } else if constexpr (packed_has_half_scales(kType)) {
                D = half_f16(hdr + 16 * h);
            } else if constexpr (packed_has_e8m0_scales(kType)) {
                D = half_e8m0(blk + 16 * h);
            } else {
                D = half_f16(blk + 16 * h);
                if constexpr (packed_has_f16_min(kType)) M = half_f16(blk + 32 + 16 * h);
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                const uint8_t *a = act + size_t(t) * act_stride;
                const float *dx = reinterpret_cast<const float *>(a + d_off);
                const __m256 sc = _mm256_mul_ps(D, _mm256_set1_ps(dx[b]));
                acc[h][t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(dot[h][t]), acc[h][t]);
                if constexpr (packed_has_min(kType)) {
                    const float *xs = reinterpret_cast<const float *>(a + s_off);
                    acc[h][t] = _mm256_fmadd_ps(M, _mm256_set1_ps(xs[2 * b]), acc[h][t]);
                }
                if constexpr (packed_has_half_mins(kType)) {
                    __m256i ml, mh;
                    nibbles8(blk + 16 + 8 * h, &ml, &mh);
                    const uint8_t *sums = a + s_off + 8 * size_t(b);
                    const __m256i im = _mm256_add_epi32(
                        _mm256_mullo_epi32(ml, _mm256_set1_epi32(int(load_u32(sums)))),
                        _mm256_mullo_epi32(mh, _mm256_set1_epi32(int(load_u32(sums + 4)))));
                    acc[h][t] = _mm256_fmadd_ps(_mm256_mul_ps(M, _mm256_set1_ps(dx[b])),
                                                _mm256_cvtepi32_ps(im), acc[h][t]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        alignas(32) float out[16];
        _mm256_store_ps(out, acc[0][t]);
        _mm256_store_ps(out + 8, acc[1][t]);
        std::copy(out, out + nrows, y + t * ldy);
    }
}

template <TensorType kType>
void rows(const MatmulJob &job, int64_t r0, int64_t r1) {
    const int64_t nb = job.cols / kQBlock;
    const size_t group_bytes = packed_group_bytes(kType, nb);
    const uint8_t *w0 = job.w + size_t(r0 / kPackRows) * group_bytes;
    for (int64_t tg = 0; tg < job.n_tokens; tg += kTokenGroup) {
        const int64_t tg_end = std::min(job.n_tokens, tg + kTokenGroup);
        for (int64_t r = r0; r < r1; r += kPackRows) {
            const int nr = int(std::min(kPackRows, r1 - r));
            const uint8_t *gw = w0 + size_t((r - r0) / kPackRows) * group_bytes;
            int64_t t = tg;
            for (; t + kTokens <= tg_end; t += kTokens) {
                tile<kType, kTokens>(gw, nb, job.act + size_t(t) * job.act_stride, job.act_stride,
                                     job.y + t * job.ldy + r, job.ldy, nr);
            }
            for (; t < tg_end; ++t) {
                tile<kType, 1>(gw, nb, job.act + size_t(t) * job.act_stride, job.act_stride,
                               job.y + t * job.ldy + r, job.ldy, nr);
            }
        }
    }
}

}  // namespace

void packed_rows_avx2(const MatmulJob &job, int64_t r0, int64_t r1) {
    visit_packed_type(job.type, [&](auto t) { rows<decltype(t)::value>(job, r0, r1); });
}

}  // namespace llmkv::cpu::detail
