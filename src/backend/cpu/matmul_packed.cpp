// Packed Q4_0 / Q4_1 / Q8_0 / Q5_0 / Q5_1 / IQ4_NL / MXFP4 / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K
// weights (matmul_packed.h): the packing, the per-block activation terms and the portable kernel,
// which spells out the arithmetic the SIMD kernels reproduce.
#include "backend/cpu/matmul_packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "backend/cpu/matmul.h"
#include "common/error.h"
#include "common/float_math.h"
#include "common/half.h"

namespace llmkv::cpu {

using detail::kQBlock;
using detail::MatmulJob;

namespace {

constexpr int64_t kR = kPackRows;

int64_t n_groups(int64_t rows) {
    return (rows + kR - 1) / kR;
}

// One GGUF unit (a 32-block, or a k-quant super-block of 8 blocks) of one row, decoded to what
// the packed layout stores: unsigned codes, f16 bits of the scales, and the per-block integer
// scales (Q4_K: sc, m of the block's sub-block; Q6_K, Q3_K: the scales of its two halves;
// Q2_K: its halves' scales and mins as the two nibbles of s1 and of s2).
struct Unit {
    uint8_t u[256];
    uint16_t d = 0, d2 = 0;  // d2: Q4_1's / Q5_1's m, Q4_K's / Q5_K's / Q2_K's dminneg
    uint8_t s1[8] = {}, s2[8] = {};
};

uint16_t u16_at(const uint8_t *p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

void decode_unit(TensorType t, const uint8_t *src, Unit &un) {
    switch (t) {
        case TensorType::MXFP4:  // the E8M0 byte as d; nibbles kept as indices into kMxfp4Values
            un.d = src[0];
            for (int i = 0; i < 16; ++i) {
                un.u[i] = src[1 + i] & 15;
                un.u[16 + i] = src[1 + i] >> 4;
            }
            return;
        case TensorType::Q4_0:
        case TensorType::IQ4_NL:  // nibbles as Q4_0's: kept as indices into kIq4nlValues
        case TensorType::Q4_1: {
            const size_t hdr = t == TensorType::Q4_1 ? 4 : 2;
            un.d = u16_at(src);
            if (t == TensorType::Q4_1) un.d2 = u16_at(src + 2);
            for (int i = 0; i < 16; ++i) {
                un.u[i] = src[hdr + i] & 15;
                un.u[16 + i] = src[hdr + i] >> 4;
            }
            return;
        }
        case TensorType::Q8_0:
            un.d = u16_at(src);
            for (int i = 0; i < 32; ++i) un.u[i] = uint8_t(src[2 + i] ^ 0x80);  // int8 + 128
            return;
        case TensorType::Q5_0:
        case TensorType::Q5_1: {
            const size_t hdr = t == TensorType::Q5_1 ? 4 : 2;
            un.d = u16_at(src);
            if (t == TensorType::Q5_1) un.d2 = u16_at(src + 2);
            uint32_t qh;
            std::memcpy(&qh, src + hdr, 4);
            for (int i = 0; i < 32; ++i) {
                const int nib = i < 16 ? src[hdr + 4 + i] & 15 : src[hdr + 4 + i - 16] >> 4;
                un.u[i] = uint8_t(nib | int((qh >> i) & 1) << 4);
            }
            return;
        }
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool q5 = t == TensorType::Q5_K;
            un.d = u16_at(src);
            un.d2 = uint16_t(u16_at(src + 2) ^ 0x8000u);  // -dmin, exactly
            const uint8_t *qh = src + 16, *qs = src + (q5 ? 48 : 16);
            for (int s = 0; s < 8; ++s) {
                int sc, m;
                k4_scale_min(src + 4, s, &sc, &m);
                un.s1[s] = uint8_t(sc);
                un.s2[s] = uint8_t(m);
                for (int l = 0; l < 32; ++l) {
                    int q = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
                    if (q5) q |= ((qh[l] >> s) & 1) << 4;
                    un.u[32 * s + l] = uint8_t(q);
                }
            }
            return;
        }
        case TensorType::Q6_K: {
            const uint8_t *ql = src, *qh = src + 128;
            un.d = u16_at(src + 208);
            for (int s = 0; s < 8; ++s) {
                un.s1[s] = src[192 + 2 * s];
                un.s2[s] = src[192 + 2 * s + 1];
            }
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, j = (e / 32) % 4, l = e % 32;
                un.u[e] = uint8_t(((ql[64 * h + 32 * (j & 1) + l] >> (4 * (j / 2))) & 15) |
                                  (((qh[32 * h + l] >> (2 * j)) & 3) << 4));
            }
            return;
        }
        case TensorType::Q3_K: {  // tensor/tensor_type.h's BlockQ3_K
            const uint8_t *hmask = src, *qs = src + 32, *scales = src + 96;
            un.d = u16_at(src + 108);
            for (int s = 0; s < 16; ++s) {
                const int sc = ((scales[s % 8] >> (4 * (s / 8))) & 15) |
                               (((scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
                uint8_t *half_scales = s % 2 ? un.s2 : un.s1;  // the block's second or first half
                half_scales[s / 2] = uint8_t(int8_t(sc - 32));
            }
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, j = (e / 32) % 4, l = e % 32;
                un.u[e] = uint8_t(((qs[32 * h + l] >> (2 * j)) & 3) |
                                  (((hmask[l] >> (4 * h + j)) & 1) << 2));
            }
            return;
        }
        case TensorType::Q2_K: {  // tensor/tensor_type.h's BlockQ2_K
            const uint8_t *scales = src, *qs = src + 16;
            un.d = u16_at(src + 80);
            un.d2 = uint16_t(u16_at(src + 82) ^ 0x8000u);  // -dmin, exactly
            for (int b = 0; b < 8; ++b) {
                const uint8_t lo = scales[2 * b], hi = scales[2 * b + 1];  // sub-blocks of 16
                un.s1[b] = uint8_t((lo & 15) | ((hi & 15) << 4));
                un.s2[b] = uint8_t((lo >> 4) | (hi & 0xF0));
            }
            for (int e = 0; e < 256; ++e) {
                un.u[e] = uint8_t((qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3);
            }
            return;
        }
        default:
            return;
    }
}

void pack_group(const WeightMatrix &w, int64_t g, uint8_t *dst) {
    const TensorType t = w.type;
    const int64_t nb = w.cols / kQBlock;
    const int U = packed_unit_blocks(t);
    const size_t unit_src = tensor_type_block_bytes(t);
    const size_t off = packed_codes_offset(t);
    const size_t hi = packed_high_offset(t);
    uint8_t *gdst = dst + size_t(g) * packed_group_bytes(t, nb);
    std::memset(gdst, 0, packed_group_bytes(t, nb));
    const int64_t rows = std::min<int64_t>(kR, w.rows - g * kR);
    Unit un;
    for (int64_t j = 0; j < rows; ++j) {
        const uint8_t *row =
            static_cast<const uint8_t *>(w.data) + size_t(g * kR + j) * w.row_bytes;
        for (int64_t ub = 0; ub < nb / U; ++ub) {
            decode_unit(t, row + size_t(ub) * unit_src, un);
            uint8_t *hdr = gdst + packed_header_offset(t, ub * U);
            if (t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q2_K) {
                std::memcpy(hdr + 2 * j, &un.d, 2);
                std::memcpy(hdr + 32 + 2 * j, &un.d2, 2);
            } else if (packed_has_half_scales(t)) {
                std::memcpy(hdr + 2 * j, &un.d, 2);
            }
            for (int bi = 0; bi < U; ++bi) {
                uint8_t *blk = gdst + packed_block_offset(t, ub * U + bi);
                const uint8_t *u = un.u + 32 * bi;
                if (U == 1) {
                    std::memcpy(blk + 2 * j, &un.d, 2);
                    if (packed_has_f16_min(t)) std::memcpy(blk + 32 + 2 * j, &un.d2, 2);
                } else {
                    blk[j] = un.s1[bi];
                    blk[16 + j] = un.s2[bi];
                }
                for (int e = 0; e < 4; ++e) {
                    for (int k = 0; k < 8; ++k) {
                        const int c = u[4 * k + e];
                        if (packed_has_crumbs(t)) {
                            blk[off + 64 * (k / 4) + 4 * j + e] |=
                                uint8_t((c & 3) << (2 * (k % 4)));
                            if (t == TensorType::Q3_K)
                                blk[hi + 4 * j + e] |= uint8_t(((c >> 2) & 1) << k);
                            continue;
                        }
                        if (!packed_has_nibbles(t)) {
                            blk[off + 64 * k + 4 * j + e] = uint8_t(c);
                            continue;
                        }
                        blk[off + 64 * (k % 4) + 4 * j + e] |= uint8_t((c & 15) << (k < 4 ? 0 : 4));
                        if (packed_has_high_bit(t)) {
                            blk[hi + 4 * j + e] |= uint8_t(((c >> 4) & 1) << k);
                        } else if (t == TensorType::Q6_K) {
                            blk[hi + 64 * (k / 4) + 4 * j + e] |=
                                uint8_t(((c >> 4) & 3) << (2 * (k % 4)));
                        }
                    }
                }
            }
        }
    }
}

}  // namespace

size_t packed_bytes(const WeightMatrix &w) {
    return size_t(n_groups(w.rows)) * packed_group_bytes(w.type, w.cols / kQBlock);
}

void pack_weights(const WeightMatrix &w, uint8_t *dst, ThreadPool *pool) {
    if (!is_packed_type(w.type) || w.cols <= 0 ||
        w.cols % tensor_type_block_elements(w.type) != 0 || w.rows < 0) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "pack_weights: %s %lld x %lld cannot be packed",
             tensor_type_name(w.type), (long long)w.rows, (long long)w.cols);
    }
    const int64_t ng = n_groups(w.rows);
    if (pool && pool->size() > 1 && ng > 1) {
        pool->run([&](unsigned t, unsigned nt) {
            for (int64_t g = t; g < ng; g += nt) pack_group(w, g, dst);
        });
    } else {
        for (int64_t g = 0; g < ng; ++g) pack_group(w, g, dst);
    }
}

void PackedWeights::Free::operator()(uint8_t *p) const {
    ::operator delete(p, std::align_val_t(64));
}

PackedWeights::PackedWeights(const WeightMatrix &w, ThreadPool *pool) {
    const size_t n = std::max<size_t>(packed_bytes(w), 64);
    uint8_t *p = static_cast<uint8_t *>(::operator new(n, std::align_val_t(64), std::nothrow));
    if (!p) fail(LLMKV_ERR_OUT_OF_MEMORY, "packing weights: cannot allocate %zu bytes", n);
    buf_.reset(p);
    bytes_ = packed_bytes(w);
    pack_weights(w, p, pool);
}

namespace detail {

void packed_act_terms(TensorType type, uint8_t *row, int64_t nb) {
    if (packed_has_half_mins(type)) return;  // Q2_K reads the halves' sums as they are
    const float *d = act_d(row, nb);
    uint8_t *s = row + size_t(nb) * (kQBlock + 4);
    const int32_t o = packed_code_offset(type);
    for (int64_t b = 0; b < nb; ++b) {
        int32_t half[2];
        std::memcpy(half, s + 8 * b, 8);  // the quantizer's sums (matmul.h)
        const int32_t sum = half[0] + half[1];
        uint32_t v[2] = {0, 0};
        if (packed_has_min(type)) {
            const float xs = d[b] * float(sum);
            std::memcpy(&v[0], &xs, 4);
        } else if (packed_has_half_scales(type)) {
            v[0] = uint32_t(-o * half[0]);
            v[1] = uint32_t(-o * half[1]);
        } else {
            v[0] = uint32_t(-o * sum);
        }
        std::memcpy(s + 8 * b, v, 8);
    }
}

// Unsigned code of element 4k + e of row j in group block blk (see the layout).
inline int packed_code(TensorType type, const uint8_t *blk, int k, int j, int e) {
    const size_t off = packed_codes_offset(type);
    if (packed_has_crumbs(type)) {
        const int c = (blk[off + 64 * (k / 4) + 4 * j + e] >> (2 * (k % 4))) & 3;
        if (type == TensorType::Q2_K) return c;
        return c | (((blk[packed_high_offset(type) + 4 * j + e] >> k) & 1) << 2);
    }
    if (!packed_has_nibbles(type)) return blk[off + 64 * k + 4 * j + e];
    int c = (blk[off + 64 * (k % 4) + 4 * j + e] >> (k < 4 ? 0 : 4)) & 15;
    if (packed_has_levels(type)) return packed_levels(type)[c] + 128;
    const size_t hi = packed_high_offset(type);
    if (packed_has_high_bit(type)) c |= ((blk[hi + 4 * j + e] >> k) & 1) << 4;
    if (type == TensorType::Q6_K)
        c |= ((blk[hi + 64 * (k / 4) + 4 * j + e] >> (2 * (k % 4))) & 3) << 4;
    return c;
}

void packed_rows_portable(const MatmulJob &job, int64_t r0, int64_t r1) {
    const TensorType type = job.type;
    const int64_t nb = job.cols / kQBlock;
    const size_t group_bytes = packed_group_bytes(type, nb);
    const int o = packed_code_offset(type);
    for (int64_t g0 = r0; g0 < r1; g0 += kR) {
        const uint8_t *group = job.w + size_t(g0 / kR) * group_bytes;
        const int nr = int(std::min<int64_t>(kR, r1 - g0));
        for (int64_t t = 0; t < job.n_tokens; ++t) {
            const uint8_t *a = job.act + size_t(t) * job.act_stride;
            const int8_t *xq = act_qs(a);
            const float *xd = act_d(a, nb);
            const float *xs = act_s(a, nb);
            float y[kR] = {};
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *blk = group + packed_block_offset(type, b);
                const uint8_t *hdr = group + packed_header_offset(type, b);
                const int8_t *x = xq + b * kQBlock;
                for (int j = 0; j < nr; ++j) {
                    int32_t half[2] = {0, 0};
                    for (int k = 0; k < 8; ++k) {
                        for (int e = 0; e < 4; ++e) {
                            half[k / 4] += (packed_code(type, blk, k, j, e) - o) * x[4 * k + e];
                        }
                    }
                    float D, M = 0.0f;
                    int32_t dot = half[0] + half[1];
                    if (type == TensorType::Q4_K || type == TensorType::Q5_K) {
                        D = float(blk[j]) * fp16_to_fp32(u16_at(hdr + 2 * j));
                        M = float(blk[16 + j]) * fp16_to_fp32(u16_at(hdr + 32 + 2 * j));
                    } else if (packed_has_half_mins(type)) {  // Q2_K: nibble scales and mins
                        D = fp16_to_fp32(u16_at(hdr + 2 * j));
                        M = fp16_to_fp32(u16_at(hdr + 32 + 2 * j));
                        dot = int32_t(blk[j] & 15) * half[0] + int32_t(blk[j] >> 4) * half[1];
                    } else if (packed_has_half_scales(type)) {
                        D = fp16_to_fp32(u16_at(hdr + 2 * j));
                        dot = int32_t(int8_t(blk[j])) * half[0] +
                              int32_t(int8_t(blk[16 + j])) * half[1];
                    } else if (packed_has_e8m0_scales(type)) {
                        const uint32_t bits = mxfp4_scale_bits(u16_at(blk + 2 * j) & 0xff);
                        std::memcpy(&D, &bits, 4);
                    } else {
                        D = fp16_to_fp32(u16_at(blk + 2 * j));
                        if (packed_has_f16_min(type)) M = fp16_to_fp32(u16_at(blk + 32 + 2 * j));
                    }
                    y[j] = fma_float(D * xd[b], float(dot), y[j]);
                    if (packed_has_min(type)) y[j] = fma_float(M, xs[2 * b], y[j]);
                    if (packed_has_half_mins(type)) {
                        int32_t sums[2];
                        std::memcpy(sums, xs + 2 * b, 8);
                        const int32_t im = int32_t(blk[16 + j] & 15) * sums[0] +
                                           int32_t(blk[16 + j] >> 4) * sums[1];
                        y[j] = fma_float(M * xd[b], float(im), y[j]);
                    }
                }
            }
            std::memcpy(job.y + t * job.ldy + g0, y, size_t(nr) * sizeof(float));
        }
    }
}

}  // namespace detail

}  // namespace llmkv::cpu
