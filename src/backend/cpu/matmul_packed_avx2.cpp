// AVX2 kernels for packed Q4_0 / Q4_1 / Q8_0 weights (matmul_packed.h), bitwise equal to the
// portable and AVX-512 ones. Compiled with -mavx2 -mfma -mf16c; called only after
// cpu_has_avx2().
//
// A YMM register holds one value per row of half a row group (rows 0-7 or 8-15). The exact
// block dot products come from vpmaddubsw (unsigned x signed bytes, pairs summed to int16):
//   Q4: nibbles 0..15 times codes -127..127: a pair is at most 2 * 15 * 127 = 3810 in size,
//       the eight pairs of a lane over the block at most 30480, so the int16 sums neither
//       saturate nor wrap; one vpmaddwd by 1 widens them. Q4_0 adds -8 * S (activation record).
//   Q8_0: |w| times sign(x, w) (vpsignb), pairs within 2 * 128 * 127 = 32512; widened per step.
//       Activation codes are never -128 (the quantizer clamps to -127), so vpsignb is exact.
// Then the float steps of matmul_packed.h, as the other families.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/simd_util.h"

namespace llmkv::cpu::detail {

namespace {

constexpr int kTokens = 2;  // tokens per tile (2 halves x 2 tokens x 2 accumulators)
constexpr int64_t kTokenGroup = 64;

template <TensorType kType>
inline constexpr size_t kGBB = packed_group_block_bytes(kType);
template <TensorType kType>
inline constexpr size_t kCodes = packed_codes_offset(kType);

inline __m256i bcast4(const int8_t *p) {
    return _mm256_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t *>(p))));
}

inline __m256 half_f16(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}

// One row group x T tokens. gw: the group's block 0; nrows rows stored per token.
template <TensorType kType, int T>
void tile(const uint8_t *gw, int64_t nb, const uint8_t *act, size_t act_stride, float *y,
          int64_t ldy, int nrows) {
    const size_t d_off = size_t(nb) * kQBlock;
    const size_t s_off = d_off + size_t(nb) * 4;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i low = _mm256_set1_epi8(0x0f);
    __m256 acc[2][T];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *blk = gw + size_t(b) * kGBB<kType>;
        __m256i dot[2][T];
        if constexpr (kType == TensorType::Q8_0) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) dot[h][t] = _mm256_setzero_si256();
            }
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256i w = _mm256_xor_si256(  // stored as w + 128: back to signed
                        _mm256_loadu_si256(
                            reinterpret_cast<const __m256i *>(blk + kCodes<kType> + 64 * k + 32 * h)),
                        _mm256_set1_epi8(char(0x80)));
                    const __m256i aw = _mm256_abs_epi8(w);
#pragma GCC unroll 4
                    for (int t = 0; t < T; ++t) {
                        const int8_t *x = act_qs(act + size_t(t) * act_stride) + b * kQBlock + 4 * k;
                        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(x), w));
                        dot[h][t] = _mm256_add_epi32(dot[h][t], _mm256_madd_epi16(p, ones));
                    }
                }
            }
        } else {
            __m256i p16[2][T];
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) p16[h][t] = _mm256_setzero_si256();
            }
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256i v = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i *>(blk + kCodes<kType> + 64 * k + 32 * h));
                    const __m256i lo = _mm256_and_si256(v, low);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
#pragma GCC unroll 4
                    for (int t = 0; t < T; ++t) {
                        const int8_t *x = act_qs(act + size_t(t) * act_stride) + b * kQBlock;
                        p16[h][t] = _mm256_add_epi16(
                            p16[h][t], _mm256_maddubs_epi16(lo, bcast4(x + packed_elem_of(kType, k))));
                        p16[h][t] = _mm256_add_epi16(
                            p16[h][t], _mm256_maddubs_epi16(hi, bcast4(x + packed_elem_of(kType, k + 4))));
                    }
                }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
                for (int t = 0; t < T; ++t) {
                    dot[h][t] = _mm256_madd_epi16(p16[h][t], ones);
                    if constexpr (kType == TensorType::Q4_0) {
                        const uint8_t *a = act + size_t(t) * act_stride;
                        dot[h][t] = _mm256_add_epi32(
                            dot[h][t], _mm256_set1_epi32(int(load_u32(a + s_off + 4 * size_t(b)))));
                    }
                }
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m256 dw = half_f16(blk + 16 * h);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                const uint8_t *a = act + size_t(t) * act_stride;
                const float *dx = reinterpret_cast<const float *>(a + d_off);
                const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(dx[b]));
                acc[h][t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(dot[h][t]), acc[h][t]);
                if constexpr (kType == TensorType::Q4_1) {
                    const float *xs = reinterpret_cast<const float *>(a + s_off);
                    acc[h][t] = _mm256_fmadd_ps(half_f16(blk + 32 + 16 * h), _mm256_set1_ps(xs[b]),
                                                acc[h][t]);
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
    const size_t group_bytes = size_t(nb) * kGBB<kType>;
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
    switch (job.type) {
        case TensorType::Q4_0:
            rows<TensorType::Q4_0>(job, r0, r1);
            return;
        case TensorType::Q4_1:
            rows<TensorType::Q4_1>(job, r0, r1);
            return;
        default:
            rows<TensorType::Q8_0>(job, r0, r1);
            return;
    }
}

}  // namespace llmkv::cpu::detail
