// Packed Q4_0 / Q4_1 / Q8_0 weights (matmul_packed.h): the packing, the per-block activation
// terms and the portable kernel, which spells out the arithmetic the SIMD kernels reproduce.
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

int64_t n_groups(int64_t rows) { return (rows + kR - 1) / kR; }

void pack_group(const WeightMatrix &w, int64_t g, uint8_t *dst) {
    const TensorType t = w.type;
    const int64_t nb = w.cols / kQBlock;
    const size_t gbb = packed_group_block_bytes(t);
    const size_t bb = tensor_type_block_bytes(t);
    const size_t off = packed_codes_offset(t);
    const int n_vec = t == TensorType::Q8_0 ? 8 : 4;
    const size_t scale_bytes = t == TensorType::Q4_1 ? 4 : 2;  // GGUF block header
    uint8_t *gdst = dst + size_t(g) * size_t(nb) * gbb;
    std::memset(gdst, 0, size_t(nb) * gbb);
    const int64_t rows = std::min<int64_t>(kR, w.rows - g * kR);
    for (int64_t j = 0; j < rows; ++j) {
        const uint8_t *row = static_cast<const uint8_t *>(w.data) + size_t(g * kR + j) * w.row_bytes;
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *src = row + size_t(b) * bb;
            uint8_t *blk = gdst + size_t(b) * gbb;
            std::memcpy(blk + 2 * j, src, 2);                                     // d
            if (t == TensorType::Q4_1) std::memcpy(blk + 32 + 2 * j, src + 2, 2);  // m
            for (int k = 0; k < n_vec; ++k) {
                uint8_t *dst4 = blk + off + size_t(k) * 64 + 4 * size_t(j);
                std::memcpy(dst4, src + scale_bytes + 4 * k, 4);
                if (t == TensorType::Q8_0) {
                    for (int e = 0; e < 4; ++e) dst4[e] ^= 0x80;  // stored as w + 128
                }
            }
        }
    }
}

}  // namespace

size_t packed_bytes(const WeightMatrix &w) {
    return size_t(n_groups(w.rows)) * size_t(w.cols / kQBlock) * packed_group_block_bytes(w.type);
}

void pack_weights(const WeightMatrix &w, uint8_t *dst, ThreadPool *pool) {
    if (!is_packed_type(w.type) || w.cols <= 0 || w.cols % kQBlock != 0 || w.rows < 0) {
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

void PackedWeights::Free::operator()(uint8_t *p) const { ::operator delete(p, std::align_val_t(64)); }

PackedWeights::PackedWeights(const WeightMatrix &w, ThreadPool *pool) {
    const size_t n = std::max<size_t>(packed_bytes(w), 64);
    uint8_t *p = static_cast<uint8_t *>(::operator new(n, std::align_val_t(64), std::nothrow));
    if (!p) fail(LLMKV_ERR_OUT_OF_MEMORY, "packing weights: cannot allocate %zu bytes", n);
    buf_.reset(p);
    bytes_ = packed_bytes(w);
    pack_weights(w, p, pool);
}

namespace detail {

void packed_act_terms(TensorType type, uint8_t *act, size_t act_stride, int64_t n_tokens,
                      int64_t nb) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        uint8_t *row = act + size_t(t) * act_stride;
        const int8_t *q = act_qs(row);
        const float *d = act_d(row, nb);
        uint8_t *s = row + size_t(nb) * (kQBlock + 4);
        for (int64_t b = 0; b < nb; ++b) {
            int32_t sum = 0;
            for (int64_t k = 0; k < kQBlock; ++k) sum += q[b * kQBlock + k];
            if (type == TensorType::Q4_1) {
                const float xs = d[b] * float(sum);
                std::memcpy(s + 4 * b, &xs, 4);
            } else {
                const int32_t o = (type == TensorType::Q4_0 ? -8 : -128) * sum;
                std::memcpy(s + 4 * b, &o, 4);
            }
        }
    }
}

void packed_rows_portable(const MatmulJob &job, int64_t r0, int64_t r1) {
    const TensorType type = job.type;
    const int64_t nb = job.cols / kQBlock;
    const size_t gbb = packed_group_block_bytes(type);
    const size_t off = packed_codes_offset(type);
    for (int64_t g0 = r0; g0 < r1; g0 += kR) {
        const uint8_t *group = job.w + size_t(g0 / kR) * size_t(nb) * gbb;
        const int nr = int(std::min<int64_t>(kR, r1 - g0));
        for (int64_t t = 0; t < job.n_tokens; ++t) {
            const uint8_t *a = job.act + size_t(t) * job.act_stride;
            const int8_t *xq = act_qs(a);
            const float *xd = act_d(a, nb);
            const float *xs = act_s(a, nb);
            float y[kR] = {};
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *blk = group + size_t(b) * gbb;
                const int8_t *x = xq + b * kQBlock;
                for (int j = 0; j < nr; ++j) {
                    int32_t dot = 0;
                    if (type == TensorType::Q8_0) {
                        for (int k = 0; k < 8; ++k) {
                            const uint8_t *c = blk + off + 64 * k + 4 * j;
                            for (int e = 0; e < 4; ++e) dot += (int32_t(c[e]) - 128) * x[4 * k + e];
                        }
                    } else {
                        const int bias = type == TensorType::Q4_0 ? 8 : 0;
                        for (int k = 0; k < 4; ++k) {
                            const uint8_t *c = blk + off + 64 * k + 4 * j;
                            for (int e = 0; e < 4; ++e) {
                                dot += (int32_t(c[e] & 15) - bias) * x[4 * k + e];
                                dot += (int32_t(c[e] >> 4) - bias) * x[16 + 4 * k + e];
                            }
                        }
                    }
                    uint16_t h;
                    std::memcpy(&h, blk + 2 * j, 2);
                    const float sc = fp16_to_fp32(h) * xd[b];
                    y[j] = fma_float(sc, float(dot), y[j]);
                    if (type == TensorType::Q4_1) {
                        std::memcpy(&h, blk + 32 + 2 * j, 2);
                        y[j] = fma_float(fp16_to_fp32(h), xs[b], y[j]);
                    }
                }
            }
            std::memcpy(job.y + t * job.ldy + g0, y, size_t(nr) * sizeof(float));
        }
    }
}

}  // namespace detail

}  // namespace llmkv::cpu
