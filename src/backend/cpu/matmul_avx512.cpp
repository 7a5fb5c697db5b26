// AVX-512 (F/BW/VL) + VNNI matmul kernels for the lane format (IQ4_NL), bitwise identical to
// the AVX2 and portable ones. Compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512vnni -mfma -mf16c; called only after cpu_has_avx512_vnni().
// The packed types run on packed weights (matmul_packed_avx512.cpp); the float weight types
// (F32/F16/BF16) on the AVX2 kernels.
//
// NOTE (exactness): every family gives each output element (r, t) eight float lanes and the
// float steps of matmul.h in block order, then Y = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) +
// (l3 + l7)). A ZMM register holds the eight lanes of two outputs, rows r and r + 1 of the
// same token ("row pair", rows in lanes 0-7 and 8-15), and receives the same fma sequence in
// the same block order; the final reduction uses the same tree with the same operand order
// (see reduce_row_pairs). The integers come out of vpdpbusd (u8 x s8, four products summed
// into int32, no saturation) with the code offset as start value (from per-lane code sums in
// the activation record; see ltile).

// GCC 12's AVX-512 headers build "undefined" vectors from self-initialized locals (used by the
// cast/broadcast/convert intrinsics below) and then warn about them at -O3.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_lane_simd.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/simd_util.h"

namespace llmkv::cpu::detail {

namespace {

// Register tiles, in row pairs x tokens. Batches: 2 pairs (4 rows) x 8 tokens = 16 ZMM
// accumulators; decode: 4 pairs (8 rows) x 1 token. The loop structure around them (token
// groups kept in L2, row blocks in L1, decode prefetch sweep) is the AVX2 one.
//
// Measured on Zen 5 (EPYC, 1 thread, SmolLM2 weight set, 64 tokens): 2 x 8 runs at ~1 cycle per
// (row, token, block), which is the bound of the two FMA pipes (vpdpbusd, vmulps and both
// vfmadd per register, i.e. 2 cycles per row pair). 4 x 4 and 1 x 16 tiles were 5% and 15%
// slower; computing the d_w * d_x products 16 at a time and spreading them with vpermilps
// (fewer FMA-pipe ops) was 10% slower, as was keeping the accumulators in place with asm fmas.
constexpr int kPairsDecode = 4;
// The lane formats decode 2 pairs (4 rows) per tile: their per-block weight work (codes, scale
// spreads, two factor products) leaves too few registers for 4 (measured on Zen 4: 4 rows per
// tile decode faster than 8).
template <TensorType kType>
inline constexpr int kDecodePairs = is_lane_format(kType) ? 2 : kPairsDecode;
constexpr int kPairsBatch = 2;
constexpr int kTBatch = 8;
constexpr int64_t kTokenGroup = 64;
constexpr int64_t kRowBlock = 32;
constexpr size_t kPrefetchDistance = 8192;

template <TensorType kType>
inline constexpr size_t kBlockBytes = tensor_type_block_bytes(kType);

// Byte offset of the codes inside a block: Q4_1 has [d, m] (2 x f16) in front, the others d.
template <TensorType kType>
inline constexpr size_t kCodeOffset = kType == TensorType::Q4_1 ? 4 : 2;

// Weight codes of one block of a row pair as u8, in element order: bytes 0-31 row a, 32-63
// row b. Q4: nibbles 0..15 (low nibbles are elements 0-15, high ones 16-31). Q8_0: w + 128.
template <TensorType kType>
inline __m512i load_codes(const uint8_t *a, const uint8_t *b) {
    if constexpr (kType == TensorType::Q8_0) {
        const __m512i v = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(a))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b)), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80)));
    } else {
        const __m256i qa =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(a)));
        const __m256i qb =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b)));
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(qa), qb, 1);
        const __m512i shifted = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
        return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f));
    }
}

// Eight float lanes of output (rows r .. r + 7 as 4 row pairs A..D, one token) reduced with
// the AVX2 hsum tree, lower operand first at every step as in hsum(): s_i = l_i + l_{i+4},
// u_0 = s_0 + s_2, u_1 = s_1 + s_3, y = u_0 + u_1. Returns y for rows r .. r + 7.
inline __m256 reduce_row_pairs(__m512 a, __m512 b, __m512 c, __m512 d) {
    // 128-bit lane k of a row pair register holds lanes 0-3 (k even) or 4-7 (k odd) of row
    // r + k / 2. Step 1 puts row j's s_0..s_3 in 128-bit lane j % 4 of sab (j < 4) / scd.
    const __m512 sab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 scd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
    // Step 2: lane k = [row k: u_0, u_1, row k + 4: u_0, u_1].
    const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(sab, scd, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(sab, scd, _MM_SHUFFLE(3, 2, 3, 2)));
    // Step 3: lane k = [y row k, y row k + 4, (copies)].
    const __m512 y = _mm512_add_ps(_mm512_shuffle_ps(u, u, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(u, u, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, y));
}

// ---- lane format (IQ4_NL) x q8 activations (matmul.h) ------------------------------------------
//
// Per 32-block and row pair: d as [row a x 8, row b x 8] floats, and the codes of both rows out
// of one 512-bit register (the nibbles through one table lookup). The values that reach the
// lanes are those of the AVX2 ltile, in the same order.

// f16 at a / b -> [a x 8, b x 8] as f32 (exact conversion, as lane_f16).
inline __m512 pair_f16(const uint8_t *a, const uint8_t *b) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_set1_epi16(short(load_u16(a)))),
        _mm_set1_epi16(short(load_u16(b))), 1));
}

// Codes of the IQ4_NL blocks at a and b as unsigned bytes in element order, level + 128: row a
// in bytes 0-31, row b in 32-63.
inline __m512i pair_codes(const uint8_t *a, const uint8_t *b) {
    const __m512i idx = load_codes<TensorType::Q4_0>(a + 2, b + 2);
    // kIq4nlValues + 128
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(
        1, 24, 45, 63, 79, 93, 106, 118, char(129), char(141), char(153), char(166), char(181),
        char(197), char(217), char(241)));
    return _mm512_shuffle_epi8(lut, idx);
}

// P row pairs x T tokens. Per lane, the values of matmul.h, computed as:
//   P_i  = vpdpbusd(-128 * S_i, level + 128, x)   exact: sum_k level_k x_k, with S_i the lane's
//          code sum from the activation record (lane_act_sums_avx512)
//   L_i  = fma(d * d_x, float(P_i), L_i)
// so every lane gets the float operations of the AVX2 and portable kernels, in their order.
template <TensorType kType, int P, int T>
void ltile(const uint8_t *w, size_t row_bytes, int nrows, const uint8_t *act, size_t act_stride,
           int64_t nb, float *y, int64_t ldy, const uint8_t *pf) {
    static_assert(P >= 1 && P <= 4);
    static_assert(kType == TensorType::IQ4_NL);
    constexpr size_t kUB = tensor_type_block_bytes(kType);
    const uint8_t *rows[2 * P];
#pragma GCC unroll 8
    for (int i = 0; i < 2 * P; ++i) rows[i] = w + size_t(std::min(i, nrows - 1)) * row_bytes;
    const uint8_t *tok[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) tok[t] = act + size_t(t) * act_stride;
    const size_t d_off = size_t(nb) * kQBlock;   // act_d(row, nb) - row
    const size_t s_off = d_off + size_t(nb) * 4;  // act_s(row, nb) - row

    __m512 acc[P][T];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; ++b) {
        if (pf) prefetch_step<2 * P * kUB>(pf + size_t(b) * (2 * P * kUB));
        __m512i wq[P];
        __m512 da[P];
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) {
            const uint8_t *ra = rows[2 * p] + b * kUB, *rb = rows[2 * p + 1] + b * kUB;
            wq[p] = pair_codes(ra, rb);
            da[p] = pair_f16(ra, rb);
        }
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
            const uint8_t *a = tok[t];
            const __m512i xv = _mm512_broadcast_i64x4(
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a + size_t(b) * kQBlock)));
            float dxs;
            std::memcpy(&dxs, a + d_off + size_t(b) * 4, 4);
            const __m512 dx = _mm512_set1_ps(dxs);
            // Lane sums of the codes times -128, as int32.
            const __m512i sums = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                reinterpret_cast<const __m256i *>(a + s_off + size_t(b) * 32)));
#pragma GCC unroll 4
            for (int p = 0; p < P; ++p) {
                const __m512 ip = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(sums, wq[p], xv));
                acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(da[p], dx), ip, acc[p][t]);
            }
        }
    }
    const __mmask8 store_mask = __mmask8((1u << nrows) - 1u);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
        __m512 pairs[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            pairs[p] = p < P ? acc[std::min(p, P - 1)][t] : _mm512_setzero_ps();
        }
        const __m256 out = reduce_row_pairs(pairs[0], pairs[1], pairs[2], pairs[3]);
        _mm256_mask_storeu_ps(y + t * ldy, store_mask, out);
    }
}

// ---- tile tables and the row-range driver -------------------------------------------------------

using QTileFn = void (*)(const uint8_t *, size_t, int, const uint8_t *, size_t, int64_t, float *,
                         int64_t, const uint8_t *);

// decode[P - 1] has shape P pairs x 1 token; batch[(P - 1) * kTBatch + T - 1] P pairs x T.
struct TileTable {
    std::array<QTileFn, kPairsDecode> decode;
    std::array<QTileFn, kPairsBatch * kTBatch> batch;
};

template <TensorType kType, int... I, int... J>
constexpr TileTable make_ltiles(std::integer_sequence<int, I...>, std::integer_sequence<int, J...>) {
    return {{&ltile<kType, std::min(I + 1, kDecodePairs<kType>), 1>...},
            {&ltile<kType, J / kTBatch + 1, J % kTBatch + 1>...}};
}

template <TensorType kType>
constexpr TileTable tiles_for() {
    return make_ltiles<kType>(std::make_integer_sequence<int, kPairsDecode>{},
                              std::make_integer_sequence<int, kPairsBatch * kTBatch>{});
}

template <TensorType kType>
void q_rows(const MatmulJob &job, int64_t r0, int64_t r1) {
    static constexpr TileTable kTiles = tiles_for<kType>();
    const int64_t nb = job.cols / kQBlock;
    auto call = [&](QTileFn fn, int64_t r, int nr, int64_t t, const uint8_t *pf) {
        fn(job.w + size_t(r) * job.row_bytes, job.row_bytes, nr,
           job.act + size_t(t) * job.act_stride, job.act_stride, nb, job.y + t * job.ldy + r,
           job.ldy, pf);
    };
    // Same walk and prefetch sweep as the AVX2 driver (see drive() in matmul_avx2.cpp).
    const size_t total = size_t(job.rows) * job.row_bytes;
    const size_t start = size_t(r0) * job.row_bytes;
    auto prefetch_head = [&] {
        for (size_t o = start; o < std::min(start + kPrefetchDistance, total); o += 64) {
            _mm_prefetch(reinterpret_cast<const char *>(job.w + o), _MM_HINT_T0);
        }
    };
    if (job.n_tokens == 1) {
        prefetch_head();
        constexpr int kRows = 2 * kDecodePairs<kType>;
        for (int64_t r = r0; r < r1; r += kRows) {
            const int nr = int(std::min<int64_t>(kRows, r1 - r));
            const size_t ahead = size_t(r) * job.row_bytes + kPrefetchDistance;
            call(kTiles.decode[size_t((nr + 1) / 2 - 1)], r, nr, 0,
                 ahead < total ? job.w + ahead : nullptr);
        }
        return;
    }
    constexpr int kRows = 2 * kPairsBatch;
    for (int64_t tg = 0; tg < job.n_tokens; tg += kTokenGroup) {
        const int64_t tg_end = std::min(job.n_tokens, tg + kTokenGroup);
        prefetch_head();
        for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
            const int64_t rb_end = std::min(r1, rb + kRowBlock);
            for (int64_t t = tg; t < tg_end; t += kTBatch) {
                const int nt = int(std::min<int64_t>(kTBatch, tg_end - t));
                for (int64_t r = rb; r < rb_end; r += kRows) {
                    const int nr = int(std::min<int64_t>(kRows, rb_end - r));
                    const size_t ahead = size_t(r) * job.row_bytes + kPrefetchDistance;
                    const uint8_t *pf = t == tg && ahead < total ? job.w + ahead : nullptr;
                    call(kTiles.batch[size_t(((nr + 1) / 2 - 1) * kTBatch + (nt - 1))], r, nr, t,
                         pf);
                }
            }
        }
    }
}

}  // namespace

void matmul_rows_avx512(const MatmulJob &job, int64_t r0, int64_t r1) {
    switch (job.type) {
        case TensorType::Q8_0:
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
            packed_rows_avx512(job, r0, r1);  // job.w is the packed copy (matmul_packed.h)
            return;
        case TensorType::IQ4_NL:
            q_rows<TensorType::IQ4_NL>(job, r0, r1);
            return;
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16:
        case TensorType::Q8_K:  // not a weight type (tensor_type_supported)
            matmul_rows_avx2(job, r0, r1);
            return;
    }
}

void lane_act_sums_avx512(TensorType type, uint8_t *act, size_t act_stride, int64_t n_tokens,
                          int64_t nb) {
    const int o = type == TensorType::IQ4_NL ? 128 : 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
        uint8_t *row = act + size_t(t) * act_stride;
        const int8_t *q = act_qs(row);
        uint8_t *s = row + size_t(nb) * (kQBlock + 4);
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q + b * kQBlock));
            const __m256i s4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), x);
            const __m256i v = _mm256_mullo_epi32(s4, _mm256_set1_epi32(-o));
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(s + b * 32), v);
        }
    }
}

}  // namespace llmkv::cpu::detail
