// Packed Q4_0 / Q4_1 / Q8_0 / Q5_0 / Q5_1 / IQ4_NL / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K weights
// (src/backend/cpu/matmul_packed.*): the arithmetic of matmul_packed.h computed here straight from
// the GGUF blocks (no packing) must equal every kernel family's output bit for bit, for decode and
// prefill shapes, row counts that are not a multiple of 16, row ranges, thread counts, and with the
// packed copy made ahead or per call.
#include "backend/cpu/matmul_packed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "common/error.h"
#include "common/float_math.h"  // fma_float: std::fma is not correctly rounded in every C runtime
#include "common/half.h"
#include "quant_reference.h"

namespace llmkv::cpu {
namespace {

struct Matrix {
    TensorType type;
    int64_t rows, cols;
    std::vector<uint8_t> data;
    size_t row_bytes() const { return data.size() / size_t(rows); }
    WeightMatrix view() const { return WeightMatrix{type, data.data(), rows, cols, row_bytes()}; }
};

Matrix random_matrix(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    Matrix m{t, rows, cols, {}};
    std::vector<float> v(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = 0.05f + 0.1f * float(r % 9);
        const float shift = r % 3 == 0 ? 0.5f * scale : 0.0f;
        for (float &e : v) e = shift + nd(rng) * scale;
        if (r % 5 == 2) std::fill(v.begin(), v.begin() + 32, 0.0f);  // an all-zero block
        std::vector<uint8_t> enc = quantize_reference(t, v.data(), cols);
        m.data.insert(m.data.end(), enc.begin(), enc.end());
    }
    return m;
}

std::vector<float> random_x(int64_t n_tokens, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n_tokens * cols));
    for (float &e : x) e = nd(rng);
    // Outliers and a zero block, as activations have.
    for (size_t i = 0; i < x.size(); i += 97) x[i] *= 30.0f;
    if (cols >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
    return x;
}

uint16_t u16(const uint8_t *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}

// What the arithmetic needs of block b of one GGUF row, decoded from the file format's
// definition (tensor/tensor_type.h): signed codes w, and D, M, the Q6_K / Q3_K / Q2_K half scales
// and Q2_K's half mins.
struct SpecBlock {
    int32_t w[32];
    float D = 0, M = 0;
    int32_t sc[2] = {1, 1};
    int32_t mn[2] = {0, 0};
};

SpecBlock spec_block(TensorType t, const uint8_t *row, int64_t b) {
    SpecBlock sb;
    if (tensor_type_is_k_quant(t)) {
        const uint8_t *u = row + size_t(b / 8) * tensor_type_block_bytes(t);
        const int s = int(b % 8);  // 32-element sub-block of the super-block
        if (t == TensorType::Q4_K || t == TensorType::Q5_K) {
            const bool q5 = t == TensorType::Q5_K;
            int sc, m;
            k4_scale_min(u + 4, s, &sc, &m);
            sb.D = float(sc) * fp16_to_fp32(u16(u));
            sb.M = -(float(m) * fp16_to_fp32(u16(u + 2)));
            for (int l = 0; l < 32; ++l) {
                sb.w[l] = (u[(q5 ? 48 : 16) + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
                if (q5) sb.w[l] |= ((u[16 + l] >> s) & 1) << 4;  // qh
            }
        } else if (t == TensorType::Q2_K) {  // e = 128 h + 32 j + l, 16-element sub-block e / 16
            const uint8_t *scales = u, *qs = u + 16;
            sb.D = fp16_to_fp32(u16(u + 80));
            sb.M = -fp16_to_fp32(u16(u + 82));
            for (int half = 0; half < 2; ++half) {
                sb.sc[half] = scales[2 * s + half] & 15;
                sb.mn[half] = scales[2 * s + half] >> 4;
            }
            const int h = s / 4, j = s % 4;
            for (int l = 0; l < 32; ++l) sb.w[l] = (qs[32 * h + l] >> (2 * j)) & 3;
        } else if (t == TensorType::Q3_K) {  // e = 128 h + 32 j + l, 16-element sub-block e / 16
            const uint8_t *hmask = u, *qs = u + 32, *scales = u + 96;
            sb.D = fp16_to_fp32(u16(u + 108));
            for (int half = 0; half < 2; ++half) {
                const int sub = 2 * s + half;
                const int sc6 = ((scales[sub % 8] >> (4 * (sub / 8))) & 15) |
                                (((scales[8 + sub % 4] >> (2 * (sub / 4))) & 3) << 4);
                sb.sc[half] = sc6 - 32;
            }
            const int h = s / 4, j = s % 4;
            for (int l = 0; l < 32; ++l) {
                const int q =
                    ((qs[32 * h + l] >> (2 * j)) & 3) | (((hmask[l] >> (4 * h + j)) & 1) << 2);
                sb.w[l] = q - 4;
            }
        } else {  // Q6_K: e = 128 h + 32 j + l
            sb.D = fp16_to_fp32(u16(u + 208));
            sb.sc[0] = int8_t(u[192 + 2 * s]);
            sb.sc[1] = int8_t(u[192 + 2 * s + 1]);
            const int h = s / 4, j = s % 4;
            for (int l = 0; l < 32; ++l) {
                const int lo = (u[64 * h + 32 * (j & 1) + l] >> (4 * (j / 2))) & 15;
                const int hi = (u[128 + 32 * h + l] >> (2 * j)) & 3;
                sb.w[l] = (lo | hi << 4) - 32;
            }
        }
        return sb;
    }
    const uint8_t *blk = row + size_t(b) * tensor_type_block_bytes(t);
    if (t == TensorType::MXFP4) {  // D = 2^(e - 128), w = the nibble's level
        const uint32_t bits = mxfp4_scale_bits(blk[0]);
        std::memcpy(&sb.D, &bits, 4);
        for (int k = 0; k < 32; ++k) {
            const uint8_t byte = blk[1 + k % 16];
            sb.w[k] = kMxfp4Values[k < 16 ? byte & 15 : byte >> 4];
        }
        return sb;
    }
    sb.D = fp16_to_fp32(u16(blk));
    for (int k = 0; k < 32; ++k) {
        switch (t) {
            case TensorType::Q8_0:
                sb.w[k] = int8_t(blk[2 + k]);
                break;
            case TensorType::Q5_0:
            case TensorType::Q5_1: {
                const int hdr = t == TensorType::Q5_1 ? 4 : 2;
                uint32_t qh;
                std::memcpy(&qh, blk + hdr, 4);
                const uint8_t byte = blk[hdr + 4 + k % 16];
                sb.w[k] = (k < 16 ? byte & 15 : byte >> 4) | int((qh >> k) & 1) << 4;
                if (t == TensorType::Q5_0) sb.w[k] -= 16;
                break;
            }
            default: {
                const uint8_t byte = blk[(t == TensorType::Q4_1 ? 4 : 2) + k % 16];
                sb.w[k] = k < 16 ? byte & 15 : byte >> 4;
                if (t == TensorType::Q4_0) sb.w[k] -= 8;
                if (t == TensorType::IQ4_NL) sb.w[k] = kIq4nlValues[sb.w[k]];
            }
        }
    }
    if (t == TensorType::Q4_1 || t == TensorType::Q5_1) sb.M = fp16_to_fp32(u16(blk + 2));
    return sb;
}

// matmul_packed.h's arithmetic, from the GGUF blocks and the portable activation quantizer.
std::vector<float> spec(const Matrix &m, const std::vector<float> &x, int64_t n_tokens) {
    const int64_t nb = m.cols / 32;
    std::vector<uint8_t> act(detail::act_row_bytes(nb));
    std::vector<float> y(size_t(n_tokens * m.rows));
    const bool has_min = m.type == TensorType::Q4_1 || m.type == TensorType::Q5_1 ||
                         m.type == TensorType::Q4_K || m.type == TensorType::Q5_K;
    for (int64_t t = 0; t < n_tokens; ++t) {
        detail::quantize_act_row_portable(&x[size_t(t * m.cols)], nb, act.data());
        const int8_t *q = detail::act_qs(act.data());
        const float *d = detail::act_d(act.data(), nb);
        for (int64_t r = 0; r < m.rows; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const SpecBlock sb =
                    spec_block(m.type, m.data.data() + size_t(r) * m.row_bytes(), b);
                int32_t half[2] = {0, 0}, xhalf[2] = {0, 0};
                for (int k = 0; k < 32; ++k) {
                    half[k / 16] += sb.w[k] * q[b * 32 + k];
                    xhalf[k / 16] += q[b * 32 + k];
                }
                const int32_t dot = sb.sc[0] * half[0] + sb.sc[1] * half[1];
                acc = fma_float(sb.D * d[b], float(dot), acc);
                if (has_min) acc = fma_float(sb.M, d[b] * float(xhalf[0] + xhalf[1]), acc);
                if (m.type == TensorType::Q2_K) {
                    const int32_t im = sb.mn[0] * xhalf[0] + sb.mn[1] * xhalf[1];
                    acc = fma_float(sb.M * d[b], float(im), acc);
                }
            }
            y[size_t(t * m.rows + r)] = acc;
        }
    }
    return y;
}

// Column counts to test: the k-quants need multiples of 256.
std::vector<int64_t> test_cols(TensorType t) {
    if (tensor_type_is_k_quant(t)) return {256, 768};
    return {32, 96, 576};
}

std::vector<MatmulKernel> families() {
    std::vector<MatmulKernel> f{MatmulKernel::kPortable};
    if (set_matmul_kernel(MatmulKernel::kAvx2)) f.push_back(MatmulKernel::kAvx2);
    if (set_matmul_kernel(MatmulKernel::kAvx512)) f.push_back(MatmulKernel::kAvx512);
    set_matmul_kernel(MatmulKernel::kAuto);
    return f;
}

const char *family_name(MatmulKernel k) {
    return k == MatmulKernel::kAvx512 ? "avx512" : k == MatmulKernel::kAvx2 ? "avx2" : "portable";
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class PackedMatmul : public ::testing::TestWithParam<TensorType> {
protected:
    void TearDown() override { set_matmul_kernel(MatmulKernel::kAuto); }
};

TEST_P(PackedMatmul, EveryFamilyComputesTheSpecBitwise) {
    const TensorType type = GetParam();
    const auto fams = families();
    if (fams.size() == 1) std::printf("[ info ] no SIMD kernels on this CPU: portable only\n");
    for (int64_t rows : {1, 16, 37, 100}) {
        for (int64_t cols : test_cols(type)) {
            const Matrix m = random_matrix(type, rows, cols, uint32_t(rows * 131 + cols));
            PackedWeights packed(m.view());
            ASSERT_EQ(packed.bytes(), packed_bytes(m.view()));
            for (int64_t n_tokens : {1, 2, 7, 8, 9, 70}) {
                const std::vector<float> x = random_x(n_tokens, cols, uint32_t(n_tokens + rows));
                const std::vector<float> want = spec(m, x, n_tokens);
                for (MatmulKernel fam : fams) {
                    ASSERT_TRUE(set_matmul_kernel(fam));
                    for (unsigned threads : {1u, 3u}) {
                        ThreadPool pool(threads);
                        MatmulScratch scratch;
                        for (bool ahead : {false, true}) {
                            WeightMatrix w = m.view();
                            if (ahead) w.packed = packed.data();
                            std::vector<float> y(size_t(n_tokens * rows), -1.0f);
                            matmul(w, x.data(), cols, n_tokens, y.data(), rows, pool, scratch);
                            ASSERT_TRUE(same_bits(y, want))
                                << tensor_type_name(type) << " " << family_name(fam) << " rows "
                                << rows << " cols " << cols << " tokens " << n_tokens << " threads "
                                << threads << (ahead ? " packed ahead" : " packed per call");
                        }
                    }
                }
            }
        }
    }
}

// Output strides wider than the row count, and a row's value regardless of the tokens next to it.
TEST_P(PackedMatmul, RowsIndependentOfBatchAndStrides) {
    const TensorType type = GetParam();
    const int64_t cols = tensor_type_is_k_quant(type) ? 256 : 128;
    const Matrix m = random_matrix(type, 48, cols, 7);
    PackedWeights packed(m.view());
    WeightMatrix w = m.view();
    w.packed = packed.data();
    const int64_t n = 19, ldy = 61, ldx = cols + 32;
    std::vector<float> x(size_t(n * ldx), 0.0f);
    const std::vector<float> xr = random_x(n, cols, 3);
    for (int64_t t = 0; t < n; ++t) std::copy_n(&xr[size_t(t * cols)], cols, &x[size_t(t * ldx)]);
    ThreadPool pool(2);
    MatmulScratch scratch;
    for (MatmulKernel fam : families()) {
        ASSERT_TRUE(set_matmul_kernel(fam));
        std::vector<float> y(size_t(n * ldy), 7.0f);
        matmul(w, x.data(), ldx, n, y.data(), ldy, pool, scratch);
        for (int64_t t = 0; t < n; ++t) {
            std::vector<float> one(48);
            matmul(w, &x[size_t(t * ldx)], ldx, 1, one.data(), 48, pool, scratch);
            ASSERT_EQ(std::memcmp(one.data(), &y[size_t(t * ldy)], 48 * sizeof(float)), 0)
                << family_name(fam) << " token " << t;
            for (int64_t r = 48; r < ldy; ++r)
                ASSERT_EQ(y[size_t(t * ldy + r)], 7.0f) << "wrote past the rows";
        }
    }
}

// The bytes are where matmul_packed.h's layout comment says, read by its formulas.
TEST_P(PackedMatmul, LayoutIsTheDocumentedOne) {
    const TensorType type = GetParam();
    const bool kq = tensor_type_is_k_quant(type);
    const int64_t cols = kq ? 256 : 64, nb = cols / 32;
    const Matrix m = random_matrix(type, 20, cols, 11);
    PackedWeights p(m.view());
    // Bytes per row group: nb group blocks, plus the k-quants' super-block header.
    const size_t group_bytes = type == TensorType::Q4_K   ? 64 + 8 * 288
                               : type == TensorType::Q5_K ? 64 + 8 * 352
                               : type == TensorType::Q6_K ? 32 + 8 * 416
                               : type == TensorType::Q3_K ? 32 + 8 * 224
                               : type == TensorType::Q2_K
                                   ? 64 + 8 * 160
                                   : size_t(nb) * packed_group_block_bytes(type);
    ASSERT_EQ(p.bytes(), 2 * group_bytes);  // 2 row groups (16 + 4 rows padded)
    const size_t gbb = packed_group_block_bytes(type), hdr_bytes = kq ? group_bytes - 8 * gbb : 0;
    const size_t codes = type == TensorType::Q4_1 || type == TensorType::Q5_1 ? 64 : 32;
    // The high-bit vectors, after the 4 nibble vectors (Q3_K: after its 2 low-bit vectors).
    const size_t high = codes + (type == TensorType::Q3_K ? 128 : 256);
    const int o =
        type == TensorType::Q4_0                                                              ? 8
        : type == TensorType::Q8_0 || type == TensorType::IQ4_NL || type == TensorType::MXFP4 ? 128
        : type == TensorType::Q5_0                                                            ? 16
        : type == TensorType::Q6_K                                                            ? 32
        : type == TensorType::Q3_K                                                            ? 4
                                                                                              : 0;
    for (int64_t r = 0; r < 32; ++r) {
        const int j = int(r % 16);
        const uint8_t *group = p.data() + size_t(r / 16) * group_bytes;
        const uint8_t *hdr = group;  // one super-block per row here
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *blk = group + hdr_bytes + size_t(b) * gbb;
            for (int i = 0; i < 32; ++i) {
                const int k = i / 4, e = i % 4;
                int u;
                if (type == TensorType::Q8_0) {
                    u = blk[codes + 64 * k + 4 * j + e];
                } else if (type == TensorType::Q3_K) {
                    u = ((blk[codes + 64 * (k / 4) + 4 * j + e] >> (2 * (k % 4))) & 3) |
                        (((blk[high + 4 * j + e] >> k) & 1) << 2);
                } else if (type == TensorType::Q2_K) {
                    u = (blk[codes + 64 * (k / 4) + 4 * j + e] >> (2 * (k % 4))) & 3;
                } else {
                    u = (blk[codes + 64 * (k % 4) + 4 * j + e] >> (k < 4 ? 0 : 4)) & 15;
                    if (type == TensorType::Q5_0 || type == TensorType::Q5_1 ||
                        type == TensorType::Q5_K) {
                        u |= ((blk[high + 4 * j + e] >> k) & 1) << 4;
                    }
                    if (type == TensorType::Q6_K) {
                        u |= ((blk[high + 64 * (k / 4) + 4 * j + e] >> (2 * (k % 4))) & 3) << 4;
                    }
                }
                if (r >= 20) {
                    ASSERT_EQ(u, 0) << "padding row " << r;
                    continue;
                }
                if (type == TensorType::IQ4_NL)
                    u = kIq4nlValues[u] + 128;  // the stored index's level
                if (type == TensorType::MXFP4) u = kMxfp4Values[u] + 128;
                const SpecBlock sb = spec_block(type, m.data.data() + size_t(r) * m.row_bytes(), b);
                ASSERT_EQ(u - o, sb.w[i]) << "row " << r << " block " << b << " element " << i;
            }
            if (r >= 20) continue;
            const SpecBlock sb = spec_block(type, m.data.data() + size_t(r) * m.row_bytes(), b);
            if (type == TensorType::Q4_K || type == TensorType::Q5_K) {
                EXPECT_EQ(float(blk[j]) * fp16_to_fp32(u16(hdr + 2 * j)), sb.D) << "D of row " << r;
                EXPECT_EQ(float(blk[16 + j]) * fp16_to_fp32(u16(hdr + 32 + 2 * j)), sb.M)
                    << "M of row " << r;
            } else if (type == TensorType::Q2_K) {
                EXPECT_EQ(fp16_to_fp32(u16(hdr + 2 * j)), sb.D) << "d of row " << r;
                EXPECT_EQ(fp16_to_fp32(u16(hdr + 32 + 2 * j)), sb.M) << "-dmin of row " << r;
                EXPECT_EQ(blk[j] & 15, sb.sc[0]) << "scale, first half, row " << r;
                EXPECT_EQ(blk[j] >> 4, sb.sc[1]) << "scale, second half, row " << r;
                EXPECT_EQ(blk[16 + j] & 15, sb.mn[0]) << "min, first half, row " << r;
                EXPECT_EQ(blk[16 + j] >> 4, sb.mn[1]) << "min, second half, row " << r;
            } else if (type == TensorType::Q6_K || type == TensorType::Q3_K) {
                EXPECT_EQ(fp16_to_fp32(u16(hdr + 2 * j)), sb.D) << "d of row " << r;
                EXPECT_EQ(int8_t(blk[j]), sb.sc[0]) << "scale, first half, row " << r;
                EXPECT_EQ(int8_t(blk[16 + j]), sb.sc[1]) << "scale, second half, row " << r;
            } else if (type == TensorType::MXFP4) {
                EXPECT_EQ(u16(blk + 2 * j), m.data[size_t(r) * m.row_bytes() + size_t(b) * 17])
                    << "the E8M0 byte of row " << r;
            } else {
                EXPECT_EQ(fp16_to_fp32(u16(blk + 2 * j)), sb.D) << "d of row " << r;
                if (type == TensorType::Q4_1 || type == TensorType::Q5_1) {
                    EXPECT_EQ(fp16_to_fp32(u16(blk + 32 + 2 * j)), sb.M) << "m of row " << r;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedMatmul,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0,
                                           TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL,
                                           TensorType::MXFP4, TensorType::Q2_K, TensorType::Q3_K,
                                           TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const auto &p) { return std::string(tensor_type_name(p.param)); });

// MXFP4 blocks of every E8M0 exponent 0..255 (2^-128 and 2^-127 are subnormal f32; 2^127
// times a level overflows) and random codes: every family computes the spec bit for bit.
TEST(PackedMatmulMxfp4, EveryExponentInEveryFamilyIsTheSpec) {
    const int64_t rows = 37, cols = 256;
    Matrix m{TensorType::MXFP4, rows, cols, {}};
    m.data.resize(size_t(rows) * (cols / 32) * 17);
    std::mt19937 rng(17);
    for (uint8_t &b : m.data) b = uint8_t(rng());
    for (size_t blk = 0; blk * 17 < m.data.size(); ++blk) m.data[blk * 17] = uint8_t(blk % 256);
    ASSERT_GE(m.data.size() / 17, 256u);  // every exponent appears
    for (int64_t n_tokens : {1, 5, 16}) {
        const std::vector<float> x = random_x(n_tokens, cols, uint32_t(n_tokens));
        const std::vector<float> want = spec(m, x, n_tokens);
        for (MatmulKernel fam : families()) {
            ASSERT_TRUE(set_matmul_kernel(fam));
            ThreadPool pool(2);
            MatmulScratch scratch;
            std::vector<float> y(size_t(n_tokens * rows), -1.0f);
            matmul(m.view(), x.data(), cols, n_tokens, y.data(), rows, pool, scratch);
            EXPECT_TRUE(same_bits(y, want)) << family_name(fam) << " tokens " << n_tokens;
        }
    }
    set_matmul_kernel(MatmulKernel::kAuto);
    // The GGUF definition: value = kMxfp4Values[nibble] * 2^(e - 128).
    const uint8_t blk[17] = {130, 0x71, 0xF8};  // e = 130: 2^2; nibbles 1, 7 / 8, 15 ...
    float out[32];
    dequantize_row_reference(TensorType::MXFP4, blk, out, 32);
    EXPECT_EQ(out[0], 4.0f * 1);     // low nibble of byte 0: 1
    EXPECT_EQ(out[16], 4.0f * 12);   // high nibble of byte 0: 7
    EXPECT_EQ(out[1], 4.0f * 0);     // 8: -0
    EXPECT_EQ(out[17], 4.0f * -12);  // 15
    const uint8_t tiny[17] = {0, 0x07};
    dequantize_row_reference(TensorType::MXFP4, tiny, out, 32);
    EXPECT_EQ(out[0], std::ldexp(12.0f, -128));  // 2^-128: a subnormal scale, exact
}

TEST(PackedWeightsTest, RejectsWhatCannotBePacked) {
    std::vector<uint8_t> data(64 * 36, 0);
    WeightMatrix w{TensorType::F16, data.data(), 1, 256, 512};  // a float type
    EXPECT_THROW(PackedWeights{w}, Error);
    WeightMatrix k{TensorType::Q4_K, data.data(), 1, 160, 144};  // not whole super-blocks
    EXPECT_THROW(PackedWeights{k}, Error);
    WeightMatrix q{TensorType::Q4_0, data.data(), 2, 48, 27};
    EXPECT_THROW(PackedWeights{q}, Error);
}

}  // namespace
}  // namespace llmkv::cpu
