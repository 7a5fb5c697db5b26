// Packed Q4_0 / Q4_1 / Q8_0 weights (src/backend/cpu/matmul_packed.*): the arithmetic of
// matmul_packed.h computed here straight from the GGUF blocks (no packing) must equal every
// kernel family's output bit for bit, for decode and prefill shapes, row counts that are not a
// multiple of 16, row ranges, thread counts, and with the packed copy made ahead or per call.
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

// matmul_packed.h's arithmetic, from the GGUF blocks and the portable activation quantizer.
std::vector<float> spec(const Matrix &m, const std::vector<float> &x, int64_t n_tokens) {
    const int64_t nb = m.cols / 32;
    std::vector<uint8_t> act(detail::act_row_bytes(nb));
    std::vector<float> y(size_t(n_tokens * m.rows));
    const size_t bb = tensor_type_block_bytes(m.type);
    for (int64_t t = 0; t < n_tokens; ++t) {
        detail::quantize_act_row_portable(&x[size_t(t * m.cols)], nb, false, act.data());
        const int8_t *q = detail::act_qs(act.data());
        const float *d = detail::act_d(act.data(), nb);
        for (int64_t r = 0; r < m.rows; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *blk = m.data.data() + size_t(r) * m.row_bytes() + size_t(b) * bb;
                int32_t dot = 0, sum = 0;
                for (int k = 0; k < 32; ++k) {
                    int32_t w;
                    if (m.type == TensorType::Q8_0) {
                        w = int8_t(blk[2 + k]);
                    } else {
                        const uint8_t byte = blk[(m.type == TensorType::Q4_1 ? 4 : 2) + k % 16];
                        w = k < 16 ? byte & 15 : byte >> 4;
                        if (m.type == TensorType::Q4_0) w -= 8;
                    }
                    dot += w * q[b * 32 + k];
                    sum += q[b * 32 + k];
                }
                uint16_t h;
                std::memcpy(&h, blk, 2);
                acc = fma_float(fp16_to_fp32(h) * d[b], float(dot), acc);
                if (m.type == TensorType::Q4_1) {
                    std::memcpy(&h, blk + 2, 2);
                    acc = fma_float(fp16_to_fp32(h), d[b] * float(sum), acc);
                }
            }
            y[size_t(t * m.rows + r)] = acc;
        }
    }
    return y;
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
        for (int64_t cols : {32, 96, 576}) {
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
                                << tensor_type_name(type) << " " << family_name(fam) << " rows " << rows
                                << " cols " << cols << " tokens " << n_tokens << " threads " << threads
                                << (ahead ? " packed ahead" : " packed per call");
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
    const Matrix m = random_matrix(type, 48, 128, 7);
    PackedWeights packed(m.view());
    WeightMatrix w = m.view();
    w.packed = packed.data();
    const int64_t n = 19, ldy = 61, ldx = 160;
    std::vector<float> x(size_t(n * ldx), 0.0f);
    const std::vector<float> xr = random_x(n, 128, 3);
    for (int64_t t = 0; t < n; ++t) std::copy_n(&xr[size_t(t * 128)], 128, &x[size_t(t * ldx)]);
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
            for (int64_t r = 48; r < ldy; ++r) ASSERT_EQ(y[size_t(t * ldy + r)], 7.0f) << "wrote past the rows";
        }
    }
}

TEST_P(PackedMatmul, LayoutIsTheDocumentedOne) {
    const TensorType type = GetParam();
    const Matrix m = random_matrix(type, 20, 64, 11);
    PackedWeights p(m.view());
    const size_t gbb = packed_group_block_bytes(type);
    ASSERT_EQ(p.bytes(), 2 * 2 * gbb);  // 2 row groups (16 + 4 rows padded) x 2 blocks
    const size_t bb = tensor_type_block_bytes(type);
    const size_t hdr = type == TensorType::Q4_1 ? 4 : 2, codes = type == TensorType::Q4_1 ? 64 : 32;
    for (int64_t r = 0; r < 32; ++r) {
        for (int64_t b = 0; b < 2; ++b) {
            const uint8_t *gblk = p.data() + size_t(r / 16) * 2 * gbb + size_t(b) * gbb;
            const int j = int(r % 16);
            std::vector<uint8_t> src(bb, 0);
            if (r < 20) std::memcpy(src.data(), m.data.data() + size_t(r) * m.row_bytes() + b * bb, bb);
            EXPECT_EQ(std::memcmp(gblk + 2 * j, src.data(), 2), 0) << "d of row " << r;
            if (type == TensorType::Q4_1) {
                EXPECT_EQ(std::memcmp(gblk + 32 + 2 * j, src.data() + 2, 2), 0) << "m of row " << r;
            }
            for (int k = 0; k < (type == TensorType::Q8_0 ? 8 : 4); ++k) {
                uint8_t want[4];
                std::memcpy(want, src.data() + hdr + 4 * k, 4);
                if (type == TensorType::Q8_0 && r < 20) {
                    for (uint8_t &c : want) c ^= 0x80;  // w + 128 (padding rows stay 0)
                }
                EXPECT_EQ(std::memcmp(gblk + codes + 64 * k + 4 * j, want, 4), 0)
                    << "codes " << k << " of row " << r;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedMatmul,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0),
                         [](const auto &p) { return std::string(tensor_type_name(p.param)); });

TEST(PackedWeightsTest, RejectsWhatCannotBePacked) {
    std::vector<uint8_t> data(64 * 36, 0);
    WeightMatrix w{TensorType::Q4_K, data.data(), 1, 256, 144};
    EXPECT_THROW(PackedWeights{w}, Error);
    WeightMatrix q{TensorType::Q4_0, data.data(), 2, 48, 27};
    EXPECT_THROW(PackedWeights{q}, Error);
}

}  // namespace
}  // namespace llmkv::cpu
