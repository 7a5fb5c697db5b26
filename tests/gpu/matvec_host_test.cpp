// The host twin of the packed matrix-vector kernel (kernels/matvec_q_math.cuh, the arithmetic
// kernels/matvec_q.cu runs for the CUDA backend's decode steps over weights kept in their
// GGUF encoding) checked on the HOST, where no GPU is needed:
//  - exactness of the indexing: with a one-hot activation row the result is bitwise the
//    decoded weight of that column (-0 becomes +0), for every column of every type (a lane or group
//    mapped to the wrong elements cannot pass);
//  - the sums against a double-precision dot product of the CPU reference's weights;
//  - against the CPU backend's matmul, within the 8-bit rounding of the activations it makes.
// On a device, dequant_test.cpp (MatvecParity) holds the kernel to this twin bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "backend/cpu/matmul.h"
#include "common/thread_pool.h"
#include "dequant_test_util.h"
#include "matvec_q_math.cuh"

namespace llmkv {
namespace {

using dqtest::TypeCase;

using dqtest::matvec_cases;

std::vector<float> random_x(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float &x : v) x = dist(rng);
    return v;
}

class MatvecHost : public ::testing::TestWithParam<TypeCase> {};

TEST_P(MatvecHost, OneHotActivationsGiveTheDecodedWeightsExactly) {
    const TypeCase c = GetParam();
    ASSERT_TRUE(mv::row_supported(c.type, c.cols));
    const uint32_t rows = 3;
    const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
    const std::vector<uint8_t> data = dqtest::random_rows(c.type, rows, c.cols, 51);
    std::vector<float> x(c.cols, 0.0f);
    size_t mismatches = 0;
    for (uint32_t r = 0; r < rows; ++r) {
        const uint8_t *row = data.data() + r * rb;
        for (uint32_t col = 0; col < c.cols; ++col) {
            float w = 0.0f, y = 0.0f;
            ASSERT_TRUE(dq::decode_element(c.type, row, col, &w));
            if (!std::isfinite(w)) continue;  // inf * 0 elsewhere would be NaN: no statement
            x[col] = 1.0f;
            ASSERT_TRUE(mv::row_dot_host(c.type, row, c.cols, x.data(), &y));
            x[col] = 0.0f;
            bool row_finite = true;  // another inf weight times 0 makes the sum NaN
            for (uint32_t k = 0; k < c.cols && row_finite; ++k) {
                float o = 0.0f;
                dq::decode_element(c.type, row, k, &o);
                row_finite = std::isfinite(o);
            }
            if (!row_finite) break;
            // Zero products added to +0 make a -0 weight +0, as in IEEE arithmetic.
            const float want = w == 0.0f ? 0.0f : w;
            if (!dqtest::same_f32(y, want) && ++mismatches <= 8)
                ADD_FAILURE() << "row " << r << " col " << col << ": " << y << " vs " << w;
        }
    }
    EXPECT_EQ(mismatches, 0u);
}

TEST_P(MatvecHost, SumsAreWithinF32RoundingOfTheDoubleDotProduct) {
    const TypeCase c = GetParam();
    const uint32_t rows = 24;
    const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
    const std::vector<uint8_t> data = dqtest::random_rows(c.type, rows, c.cols, 52, true);
    const std::vector<float> x = random_x(c.cols, 53);
    std::vector<float> w(c.cols);
    std::string which;
    for (uint32_t r = 0; r < rows; ++r) {
        const uint8_t *row = data.data() + r * rb;
        dqtest::reference_row(c.type, row, c.cols, w.data(), &which);
        double dot = 0.0, mag = 0.0;
        for (uint32_t k = 0; k < c.cols; ++k) {
            dot += double(w[k]) * x[k];
            mag += std::fabs(double(w[k]) * x[k]);
        }
        float y = 0.0f;
        ASSERT_TRUE(mv::row_dot_host(c.type, row, c.cols, x.data(), &y));
        ASSERT_NEAR(y, dot, 1e-5 * mag + 1e-30) << "row " << r << " (" << which << ")";
    }
}

// The CPU backend's matmul quantizes each block of 32 (k-quants: 256) activations to 8 bits:
// per element |dx| <= max|x over the block| / 254; the twin uses x as it is.
TEST_P(MatvecHost, AgreesWithTheCpuMatmulWithinItsActivationRounding) {
    const TypeCase c = GetParam();
    const uint32_t rows = 20, T = 3;
    const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
    const std::vector<uint8_t> data = dqtest::random_rows(c.type, rows, c.cols, 54, true);
    const std::vector<float> x = random_x(size_t(T) * c.cols, 55);
    const WeightMatrix wm{c.type, data.data(), int64_t(rows), int64_t(c.cols), rb};
    std::vector<float> ycpu(size_t(T) * rows);
    ThreadPool pool(2);
    cpu::MatmulScratch scratch;
    try {
        cpu::matmul(wm, x.data(), c.cols, T, ycpu.data(), rows, pool, scratch);
    } catch (const Error &e) {
        std::printf("[ SKIP REASON ] the CPU matmul does not read %s: %s\n",
                    tensor_type_name(c.type), e.what());
        GTEST_SKIP() << "no CPU matmul for " << tensor_type_name(c.type);
    }
    std::vector<float> w(c.cols);
    std::string which;
    for (uint32_t r = 0; r < rows; ++r) {
        const uint8_t *row = data.data() + r * rb;
        dqtest::reference_row(c.type, row, c.cols, w.data(), &which);
        for (uint32_t t = 0; t < T; ++t) {
            const float *xt = x.data() + size_t(t) * c.cols;
            float y = 0.0f;
            ASSERT_TRUE(mv::row_dot_host(c.type, row, c.cols, xt, &y));
            EXPECT_NEAR(y, ycpu[size_t(t) * rows + r],
                        dqtest::q8_activation_bound(c.type, w.data(), xt, c.cols))
                << "token " << t << " row " << r;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatvecHost, ::testing::ValuesIn(matvec_cases()),
                         dqtest::type_case_name);

TEST(MatvecHostRows, WhatTheKernelReads) {
    EXPECT_TRUE(mv::row_supported(TensorType::Q4_0, 512));
    EXPECT_TRUE(mv::row_supported(TensorType::Q4_K, 768));
    EXPECT_TRUE(mv::row_supported(TensorType::F16, 40));
    EXPECT_FALSE(mv::row_supported(TensorType::F16, 37));         // not whole 8-element groups
    EXPECT_FALSE(mv::row_supported(TensorType::Q4_K, 512 + 32));  // not whole super-blocks
    EXPECT_FALSE(mv::row_supported(TensorType::Q8_0, 0));
    EXPECT_FALSE(mv::row_supported(TensorType(9999), 512));
    float y = 1.0f;
    const float x[8] = {};
    EXPECT_FALSE(mv::row_dot_host(TensorType::F16, nullptr, 4, x, &y));
    EXPECT_EQ(y, 1.0f);
}

// The butterfly's order: lane 0 ends with ((a0 + a16) + (a8 + a24)) + ...; values chosen so
// that a sequential order rounds differently.
TEST(MatvecHostRows, LanesAreAddedInTheButterflyOrder) {
    // Q8_0 row of 256 elements: 32 groups, group g to lane g. Scale 1, codes 1 at the group's
    // first element, so lane l's sum is x[8l].
    const uint32_t cols = 256;
    std::vector<uint8_t> row(dqtest::row_bytes_of(TensorType::Q8_0, cols), 0);
    for (uint32_t b = 0; b < cols / 32; ++b) {
        uint8_t *blk = row.data() + b * 34;
        blk[0] = 0x00;
        blk[1] = 0x3c;  // fp16 1.0
        for (uint32_t g = 0; g < 4; ++g) blk[2 + g * 8] = 1;
    }
    std::vector<float> x(cols, 0.0f);
    float lanes[32];
    for (uint32_t l = 0; l < 32; ++l) {
        lanes[l] = (l % 2 ? 1.0f : -1.0f) * std::ldexp(1.0f + float(l) / 64.0f, int(l % 7) * 4);
        x[8 * l] = lanes[l];
    }
    // The butterfly seen from lane 0: fold the upper half onto the lower, 16 then 8, 4, 2, 1.
    float v[32];
    std::memcpy(v, lanes, sizeof v);
    for (uint32_t half = 16; half > 0; half /= 2)
        for (uint32_t l = 0; l < half; ++l) v[l] = v[l] + v[l + half];
    const float want = v[0];
    float sequential = 0.0f;
    for (float f : lanes) sequential += f;
    ASSERT_NE(want, sequential) << "the values do not tell the orders apart";
    float y = 0.0f;
    ASSERT_TRUE(mv::row_dot_host(TensorType::Q8_0, row.data(), cols, x.data(), &y));
    EXPECT_EQ(y, want);
}

}  // namespace
}  // namespace llmkv
