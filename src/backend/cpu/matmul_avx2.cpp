// AVX2/FMA/F16C matmul kernels: activation quantization to q8 blocks, FMA dot products for
// F32/F16/BF16, and SIMD dequantization (the quantized types' kernels are
// matmul_packed_avx2.cpp's). Compiled with -mavx2 -mfma -mf16c; called only after cpu_has_avx2().
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/simd_util.h"

namespace llmkv::cpu::detail {

namespace {

// Register tiles. Decode (n_tokens = 1) runs kRDecode weight rows per kernel call; batches run
// kRBatch rows x kTBatch tokens. Every output element goes through the same per-lane operation
// sequence whatever the tile shape, so results do not depend on n_tokens or on where a row or
// token falls in a tile.
constexpr int kRDecode = 4;
constexpr int kRBatch = 4;
constexpr int kTBatch = 3;
constexpr int64_t kTokenGroup = 64;         // activations kept in L2 per pass over the weights
constexpr int64_t kRowBlock = 32;           // weight rows kept in L1 while the tokens loop
constexpr size_t kPrefetchDistance = 8192;  // decode: bytes of weights prefetched ahead

inline float f16(const uint8_t *p) {
    return _cvtsh_ss(load_u16(p));
}

// Fixed-order horizontal sum: (l0+l4)+(l2+l6) + (l1+l5)+(l3+l7).
inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 16 bytes of packed nibbles -> 32 bytes 0..15 in element order (low nibbles, then high).
inline __m256i unpack_nibbles(const uint8_t *q) {
    const __m256i raw =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(q)));
    const __m256i shifted = _mm256_srlv_epi32(raw, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f));
}

// ---- quantized weights x q8 activations ---------------------------------------------------------

template <TensorType kType>
inline constexpr size_t kBlockBytes = tensor_type_block_bytes(kType);

// ---- float weights x f32 activations ------------------------------------------------------------

template <TensorType kType>
inline __m256 load8(const uint8_t *w, int64_t k) {
    if constexpr (kType == TensorType::F32) {
        return _mm256_loadu_ps(reinterpret_cast<const float *>(w) + k);
    } else if constexpr (kType == TensorType::F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(w + k * 2)));
    } else {
        const __m256i v =
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(w + k * 2)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
}

template <TensorType kType>
inline float load1(const uint8_t *w, int64_t k) {
    if constexpr (kType == TensorType::F32) {
        float v;
        std::memcpy(&v, w + k * 4, 4);
        return v;
    } else if constexpr (kType == TensorType::F16) {
        return _cvtsh_ss(load_u16(w + k * 2));
    } else {
        const uint32_t bits = uint32_t(load_u16(w + k * 2)) << 16;
        float v;
        std::memcpy(&v, &bits, 4);
        return v;
    }
}

template <TensorType kType, int R, int T>
void ftile(const uint8_t *w, size_t row_bytes, const float *x, int64_t ldx, int64_t cols, float *y,
           int64_t ldy, const uint8_t *pf) {
    constexpr size_t kStep = size_t(R) * 8 * (kType == TensorType::F32 ? 4 : 2);
    __m256 acc[R][T];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    const int64_t n8 = cols & ~int64_t(7);
    for (int64_t k = 0; k < n8; k += 8) {
        if (pf) prefetch_step<kStep>(pf + size_t(k / 8) * kStep);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            const __m256 wv = load8<kType>(w + size_t(r) * row_bytes, k);
#pragma GCC unroll 16
            for (int t = 0; t < T; ++t) {
                acc[r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + t * ldx + k), acc[r][t]);
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
            float s = hsum(acc[r][t]);
            for (int64_t k = n8; k < cols; ++k) {
                s = std::fma(load1<kType>(w + size_t(r) * row_bytes, k), x[t * ldx + k], s);
            }
            y[t * ldy + r] = s;
        }
    }
}

// ---- tile tables and the row-range driver -------------------------------------------------------

using FTileFn = void (*)(const uint8_t *, size_t, const float *, int64_t, int64_t, float *, int64_t,
                         const uint8_t *);

// Tile function tables: decode[R - 1] has shape R x 1; batch[(R - 1) * kTBatch + T - 1] has R x T.
template <typename Fn>
struct TileTable {
    std::array<Fn, kRDecode> decode;
    std::array<Fn, kRBatch * kTBatch> batch;
};

template <TensorType kType, int... I, int... J>
constexpr TileTable<FTileFn> make_ftiles(std::integer_sequence<int, I...>,
                                         std::integer_sequence<int, J...>) {
    return {{&ftile<kType, I + 1, 1>...}, {&ftile<kType, J / kTBatch + 1, J % kTBatch + 1>...}};
}

using DecodeSeq = std::make_integer_sequence<int, kRDecode>;
using BatchSeq = std::make_integer_sequence<int, kRBatch * kTBatch>;

// Walks [r0, r1) x tokens: token groups, then row blocks, then register tiles. The weight
// rows of a block stay in L1 while every token of the group passes over them.
template <typename Fn, typename Call>
void drive(const MatmulJob &job, int64_t r0, int64_t r1, const TileTable<Fn> &tiles, Call &&call) {
    // Decode streams each weight once; rows are short (a few hundred bytes), too short for the
    // hardware prefetchers to ramp up per row, so the tiles prefetch the weight bytes
    // kPrefetchDistance ahead of the ones they read, sweeping linearly through the range. The
    // sweep stops at the end of the matrix (not of this range: the next rows are another
    // chunk, usually read soon). The first kPrefetchDistance bytes of the range have no
    // earlier tile to prefetch them, so they are requested up front.
    const size_t total = size_t(job.rows) * job.row_bytes;
    const size_t start = size_t(r0) * job.row_bytes;
    if (job.n_tokens == 1) {
        for (size_t o = start; o < std::min(start + kPrefetchDistance, total); o += 64) {
            _mm_prefetch(reinterpret_cast<const char *>(job.w + o), _MM_HINT_T0);
        }
        for (int64_t r = r0; r < r1; r += kRDecode) {
            const int nr = int(std::min<int64_t>(kRDecode, r1 - r));
            const size_t ahead = size_t(r) * job.row_bytes + kPrefetchDistance;
            call(tiles.decode[size_t(nr - 1)], r, 0, ahead < total ? job.w + ahead : nullptr);
        }
        return;
    }
    // Batches: the first token tile of each row block reads the weights from memory and runs
    // the same prefetch sweep; the other token tiles find the block in L1/L2.
    for (int64_t tg = 0; tg < job.n_tokens; tg += kTokenGroup) {
        const int64_t tg_end = std::min(job.n_tokens, tg + kTokenGroup);
        for (size_t o = start; o < std::min(start + kPrefetchDistance, total); o += 64) {
            _mm_prefetch(reinterpret_cast<const char *>(job.w + o), _MM_HINT_T0);
        }
        for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
            const int64_t rb_end = std::min(r1, rb + kRowBlock);
            for (int64_t t = tg; t < tg_end; t += kTBatch) {
                const int nt = int(std::min<int64_t>(kTBatch, tg_end - t));
                for (int64_t r = rb; r < rb_end; r += kRBatch) {
                    const int nr = int(std::min<int64_t>(kRBatch, rb_end - r));
                    const size_t ahead = size_t(r) * job.row_bytes + kPrefetchDistance;
                    const uint8_t *pf = t == tg && ahead < total ? job.w + ahead : nullptr;
                    call(tiles.batch[size_t((nr - 1) * kTBatch + (nt - 1))], r, t, pf);
                }
            }
        }
    }
}

template <TensorType kType>
void f_rows(const MatmulJob &job, int64_t r0, int64_t r1) {
    static constexpr TileTable<FTileFn> kTiles = make_ftiles<kType>(DecodeSeq{}, BatchSeq{});
    drive(job, r0, r1, kTiles, [&](FTileFn fn, int64_t r, int64_t t, const uint8_t *pf) {
        fn(job.w + size_t(r) * job.row_bytes, job.row_bytes, job.x + t * job.ldx, job.ldx, job.cols,
           job.y + t * job.ldy + r, job.ldy, pf);
    });
}

// Keeps the optimizer from fusing a multiply and a following add into one fma.
inline __m256 opaque(__m256 v) {
    asm("" : "+x"(v));
    return v;
}

}  // namespace

void matmul_rows_avx2(const MatmulJob &job, int64_t r0, int64_t r1) {
    if (is_packed_type(job.type)) return packed_rows_avx2(job, r0, r1);  // job.w: the packed copy
    switch (job.type) {
        case TensorType::F32:
            f_rows<TensorType::F32>(job, r0, r1);
            return;
        case TensorType::F16:
            f_rows<TensorType::F16>(job, r0, r1);
            return;
        case TensorType::BF16:
            f_rows<TensorType::BF16>(job, r0, r1);
            return;
        default:
            return;  // Q8_K: not a weight type (tensor_type_supported)
    }
}

// Same values as quantize_act_row_portable: d = max|x| / 127, q = nearbyint(x * (1 / d)).
void quantize_act_row_avx2(const float *x, int64_t nb, uint8_t *dst) {
    int8_t *qs = reinterpret_cast<int8_t *>(dst);
    float *d = reinterpret_cast<float *>(dst + nb * kQBlock);
    uint8_t *s = dst + nb * (kQBlock + 4);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < nb; ++b) {
        const float *xb = x + b * kQBlock;
        const __m256 v0 = _mm256_loadu_ps(xb);
        const __m256 v1 = _mm256_loadu_ps(xb + 8);
        const __m256 v2 = _mm256_loadu_ps(xb + 16);
        const __m256 v3 = _mm256_loadu_ps(xb + 24);
        const __m256 m =
            _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absmask), _mm256_and_ps(v1, absmask)),
                          _mm256_max_ps(_mm256_and_ps(v2, absmask), _mm256_and_ps(v3, absmask)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        const __m256 idv = _mm256_set1_ps(id);
        constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, idv), kRound));
        const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, idv), kRound));
        const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, idv), kRound));
        const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, idv), kRound));
        // packs interleave the 128-bit halves; the permute restores element order.
        const __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        // Codes stay within -127..127 (only a NaN or out-of-range product packs to -128).
        const __m256i q =
            _mm256_max_epi8(_mm256_permutevar8x32_epi32(p, order), _mm256_set1_epi8(-127));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(qs + b * kQBlock), q);
        d[b] = db;
        // The halves' sums: vpsadbw of the codes + 128 gives four 8-byte sums; each half is two.
        const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(char(0x80))),
                                            _mm256_setzero_si256());
        const __m256i lane =
            _mm256_add_epi64(sad, _mm256_shuffle_epi32(sad, _MM_SHUFFLE(1, 0, 3, 2)));
        const int32_t half[2] = {_mm256_cvtsi256_si32(lane) - 16 * 128,
                                 _mm256_extract_epi32(lane, 4) - 16 * 128};
        std::memcpy(s + 8 * b, half, 8);
    }
}

void dequantize_row_avx2(TensorType type, const void *src, float *dst, int64_t n) {
    const uint8_t *p = static_cast<const uint8_t *>(src);
    switch (type) {
        case TensorType::F32:
            std::memcpy(dst, p, size_t(n) * 4);
            return;
        case TensorType::F16:
        case TensorType::BF16: {
            const int64_t n8 = n & ~int64_t(7);
            if (type == TensorType::F16) {
                for (int64_t i = 0; i < n8; i += 8)
                    _mm256_storeu_ps(dst + i, load8<TensorType::F16>(p, i));
                for (int64_t i = n8; i < n; ++i) dst[i] = load1<TensorType::F16>(p, i);
            } else {
                for (int64_t i = 0; i < n8; i += 8)
                    _mm256_storeu_ps(dst + i, load8<TensorType::BF16>(p, i));
                for (int64_t i = n8; i < n; ++i) dst[i] = load1<TensorType::BF16>(p, i);
            }
            return;
        }
        case TensorType::Q8_0:
            for (int64_t b = 0; b < n / kQBlock; ++b) {
                const uint8_t *blk = p + b * 34;
                const __m256 d = _mm256_set1_ps(f16(blk));
                for (int j = 0; j < 4; ++j) {
                    const __m128i q8 =
                        _mm_loadl_epi64(reinterpret_cast<const __m128i *>(blk + 2 + 8 * j));
                    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
                    _mm256_storeu_ps(dst + b * kQBlock + 8 * j, _mm256_mul_ps(v, d));
                }
            }
            return;
        case TensorType::Q4_0:
        case TensorType::Q4_1: {
            const bool q41 = type == TensorType::Q4_1;
            const size_t bb = q41 ? 20 : 18;
            for (int64_t b = 0; b < n / kQBlock; ++b) {
                const uint8_t *blk = p + size_t(b) * bb;
                const __m256 d = _mm256_set1_ps(f16(blk));
                const __m256 m = _mm256_set1_ps(q41 ? f16(blk + 2) : 0.0f);
                __m256i q = unpack_nibbles(blk + (q41 ? 4 : 2));
                if (!q41) q = _mm256_sub_epi8(q, _mm256_set1_epi8(8));
                const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
                const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
                for (int j = 0; j < 4; ++j) {
                    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[j]));
                    __m256 o = _mm256_mul_ps(v, d);
                    if (q41) o = _mm256_add_ps(opaque(o), m);
                    _mm256_storeu_ps(dst + b * kQBlock + 8 * j, o);
                }
            }
            return;
        }
        default:
            dequantize_row_reference(type, src, dst, n);
            return;
    }
}

}  // namespace llmkv::cpu::detail
