// AVX-512 VNNI kernels for packed Q4_0 / Q4_1 / Q8_0 weights (matmul_packed.h). Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma -mf16c; called only after
// cpu_has_avx512_vnni().
//
// A ZMM register holds one int32 or f32 per row of a 16-row group. Per block and token, eight
// vpdpbusd (unsigned weight codes x broadcast signed activation codes; Q4_0 and Q8_0 start from
// the -8 * S / -128 * S of the activation record that turns the unsigned codes back into
// signed ones; Q8_0's codes are stored as w + 128) give the exact
// block dot products of 16 rows, then one vcvtdq2ps, vmulps and vfmadd (two for Q4_1) apply
// the float steps of matmul_packed.h. Prefill tiles are one group x up to kTokens tokens, so
// a block's codes are loaded once per kTokens tokens; decode tiles are up to kDecodeGroups
// groups x 1 token with two integer chains per group (the integer sums are exact, so splitting
// them changes nothing).
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

constexpr int kTokens = 8;         // tokens per prefill tile
constexpr int kDecodeGroups = 1;   // row groups per decode tile (one stream: 2 and 4 were 1.4x slower)
constexpr int64_t kTokenGroup = 64;
// Decode streams each weight once. A tile reads its G groups (one contiguous region) block by
// block; the tiles prefetch a linear sweep kPrefetchDistance bytes ahead of the region's start
// plus the bytes consumed so far, the way matmul_avx2.cpp's drive() does for row-major weights,
// and the first kPrefetchDistance bytes of a call are requested up front.
constexpr size_t kPrefetchDistance = 8192;

template <TensorType kType>
inline constexpr size_t kGBB = packed_group_block_bytes(kType);
template <TensorType kType>
inline constexpr size_t kCodes = packed_codes_offset(kType);

// Code vector k of a group block as unsigned bytes.
template <TensorType kType>
inline __m512i codes(const uint8_t *blk, int k) {
    if constexpr (kType == TensorType::Q8_0) {
        return _mm512_loadu_si512(blk + kCodes<kType> + 64 * k);  // stored as w + 128
    } else {
        const __m512i v = _mm512_loadu_si512(blk + kCodes<kType> + 64 * (k & 3));
        const __m512i m = _mm512_set1_epi8(0x0f);
        return k < 4 ? _mm512_and_si512(v, m) : _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
}

inline __m512i bcast4(const int8_t *p) { return _mm512_set1_epi32(int(load_u32(reinterpret_cast<const uint8_t *>(p)))); }

template <TensorType kType>
inline __m512i start_value(const uint8_t *a, size_t s_off, int64_t b) {
    if constexpr (kType == TensorType::Q4_1) {
        return _mm512_setzero_si512();
    } else {
        return _mm512_set1_epi32(int(load_u32(a + s_off + 4 * size_t(b))));
    }
}

// One row group x T tokens (prefill). gw: the group's block 0. Stores nrows rows per token.
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
        const uint8_t *blk = gw + size_t(b) * kGBB<kType>;
        __m512i ia[T];
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) ia[t] = start_value<kType>(tok[t], s_off, b);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            const __m512i w = codes<kType>(blk, k);
#pragma GCC unroll 16
            for (int t = 0; t < T; ++t) {
                const int8_t *x = act_qs(tok[t]) + b * kQBlock + packed_elem_of(kType, k);
                ia[t] = _mm512_dpbusd_epi32(ia[t], w, bcast4(x));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk)));
        __m512 dm = dw;
        if constexpr (kType == TensorType::Q4_1) {
            dm = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 32)));
        }
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
            const float *dx = reinterpret_cast<const float *>(tok[t] + d_off);
            const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(dx[b]));
            acc[t] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(ia[t]), acc[t]);
            if constexpr (kType == TensorType::Q4_1) {
                const float *xs = reinterpret_cast<const float *>(tok[t] + s_off);
                acc[t] = _mm512_fmadd_ps(dm, _mm512_set1_ps(xs[b]), acc[t]);
            }
        }
    }
    const __mmask16 mask = __mmask16((1u << nrows) - 1u);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

// G row groups (consecutive, group_bytes apart) x 1 token (decode). Stores nrows rows in all.
template <TensorType kType, int G>
void dtile(const uint8_t *gw, size_t group_bytes, int64_t nb, const uint8_t *a, float *y,
           int nrows, const uint8_t *pf, const uint8_t *pf_end) {
    const size_t d_off = size_t(nb) * kQBlock;
    const size_t s_off = d_off + size_t(nb) * 4;
    const int8_t *xq = act_qs(a);
    const float *dx = reinterpret_cast<const float *>(a + d_off);
    const float *xs = reinterpret_cast<const float *>(a + s_off);
    __m512 acc[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        if (pf + size_t(G) * kGBB<kType> <= pf_end) prefetch_step<size_t(G) * kGBB<kType>>(pf);
        pf += size_t(G) * kGBB<kType>;
        __m512i ia[G], ib[G];
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
            const uint8_t *blk = gw + size_t(g) * group_bytes + size_t(b) * kGBB<kType>;
            ia[g] = start_value<kType>(a, s_off, b);
            ib[g] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k += 2) {
                ia[g] = _mm512_dpbusd_epi32(ia[g], codes<kType>(blk, k),
                                            bcast4(xq + b * kQBlock + packed_elem_of(kType, k)));
                ib[g] = _mm512_dpbusd_epi32(ib[g], codes<kType>(blk, k + 1),
                                            bcast4(xq + b * kQBlock + packed_elem_of(kType, k + 1)));
            }
        }
        const __m512 xd = _mm512_set1_ps(dx[b]);
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) {
            const uint8_t *blk = gw + size_t(g) * group_bytes + size_t(b) * kGBB<kType>;
            const __m512 dw =
                _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk)));
            const __m512i dot = _mm512_add_epi32(ia[g], ib[g]);
            acc[g] = _mm512_fmadd_ps(_mm512_mul_ps(dw, xd), _mm512_cvtepi32_ps(dot), acc[g]);
            if constexpr (kType == TensorType::Q4_1) {
                const __m512 dm =
                    _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 32)));
                acc[g] = _mm512_fmadd_ps(dm, _mm512_set1_ps(xs[b]), acc[g]);
            }
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
        const int n = std::min(int(kPackRows), nrows - g * int(kPackRows));
        if (n <= 0) break;
        _mm512_mask_storeu_ps(y + g * kPackRows, __mmask16((1u << n) - 1u), acc[g]);
    }
}

using PTileFn = void (*)(const uint8_t *, int64_t, const uint8_t *, size_t, float *, int64_t, int);
using DTileFn = void (*)(const uint8_t *, size_t, int64_t, const uint8_t *, float *, int,
                         const uint8_t *, const uint8_t *);

template <TensorType kType, int... I>
constexpr std::array<PTileFn, sizeof...(I)> make_ptiles(std::integer_sequence<int, I...>) {
    return {&ptile<kType, I + 1>...};
}
template <TensorType kType, int... I>
constexpr std::array<DTileFn, sizeof...(I)> make_dtiles(std::integer_sequence<int, I...>) {
    return {&dtile<kType, I + 1>...};
}

template <TensorType kType>
void rows(const MatmulJob &job, int64_t r0, int64_t r1) {
    static constexpr auto kP = make_ptiles<kType>(std::make_integer_sequence<int, kTokens>{});
    static constexpr auto kD = make_dtiles<kType>(std::make_integer_sequence<int, kDecodeGroups>{});
    const int64_t nb = job.cols / kQBlock;
    const size_t group_bytes = size_t(nb) * kGBB<kType>;
    const uint8_t *w0 = job.w + size_t(r0 / kPackRows) * group_bytes;
    const uint8_t *end = job.w + size_t((job.rows + kPackRows - 1) / kPackRows) * group_bytes;
    if (job.n_tokens == 1) {
        for (const uint8_t *p = w0; p < std::min(w0 + kPrefetchDistance, end); p += 64) {
            _mm_prefetch(reinterpret_cast<const char *>(p), _MM_HINT_T0);
        }
        constexpr int64_t kStep = kDecodeGroups * kPackRows;
        for (int64_t r = r0; r < r1; r += kStep) {
            const int nr = int(std::min(kStep, r1 - r));
            const int ng = (nr + int(kPackRows) - 1) / int(kPackRows);
            const uint8_t *gw = w0 + size_t((r - r0) / kPackRows) * group_bytes;
            kD[size_t(ng - 1)](gw, group_bytes, nb, job.act, job.y + r, nr, gw + kPrefetchDistance, end);
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
