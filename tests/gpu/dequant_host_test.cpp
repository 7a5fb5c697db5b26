// The device dequantization's decoders (kernels/dequant_formats.cuh) run on the HOST, where
// no GPU is needed: every element of random rows of every type (extreme scales included)
// against the CPU reference (dequantize_row_reference) and against the loop-order statement
// of dequant_test_util.h, bit for bit (NaN: both NaN). The same source is compiled for the
// device by dequant.cu with the _rn intrinsics; dequant_test.cpp checks the device's results.
#include <gtest/gtest.h>

#include <cstdio>

#include "dequant_formats.cuh"
#include "dequant_test_util.h"

namespace llmkv {
namespace {

using dqtest::TypeCase;

class DequantHost : public ::testing::TestWithParam<TypeCase> {};

// Every element of `rows` random rows decoded by dq::decode_element vs `reference`.
template <class Reference>
void expect_rows_match(const TypeCase &c, uint32_t seed, Reference &&reference) {
    const uint32_t rows = 16;
    const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
    const std::vector<uint8_t> data = dqtest::random_rows(c.type, rows, c.cols, seed);
    std::vector<float> want(c.cols);
    size_t mismatches = 0;
    for (uint32_t r = 0; r < rows; ++r) {
        const uint8_t *row = data.data() + size_t(r) * rb;
        if (!reference(row, want.data())) return;
        for (uint32_t col = 0; col < c.cols; ++col) {
            float got = 0.0f;
            ASSERT_TRUE(dq::decode_element(c.type, row, col, &got));
            if (!dqtest::same_f32(got, want[col]) && ++mismatches <= 8) {
                ADD_FAILURE() << tensor_type_name(c.type) << " row " << r << " col " << col
                              << ": decoder " << got << ", reference " << want[col];
            }
        }
    }
    EXPECT_EQ(mismatches, 0u);
}

TEST_P(DequantHost, DecodersMatchTheLoopOrderStatement) {
    const TypeCase c = GetParam();
    expect_rows_match(c, 11, [&](const uint8_t *row, float *out) {
        dqtest::spec_decode_row(c.type, row, c.cols, out);
        return true;
    });
}

TEST_P(DequantHost, DecodersMatchTheCpuReference) {
    const TypeCase c = GetParam();
    std::string why;
    std::vector<float> probe(c.cols);
    const std::vector<uint8_t> one = dqtest::random_rows(c.type, 1, c.cols, 1);
    if (!dqtest::cpu_reference_row(c.type, one.data(), c.cols, probe.data(), &why)) {
        std::printf("[ SKIP REASON ] the CPU reference does not decode %s yet: %s\n",
                    tensor_type_name(c.type), why.c_str());
        GTEST_SKIP() << "no CPU reference for " << tensor_type_name(c.type) << ": " << why;
    }
    expect_rows_match(c, 12, [&](const uint8_t *row, float *out) {
        return dqtest::cpu_reference_row(c.type, row, c.cols, out, &why);
    });
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantHost, ::testing::ValuesIn(dqtest::all_type_cases()),
                         dqtest::type_case_name);

TEST(DequantHostTables, PackedIq4nlLevelsAreTheTable) {
    for (uint32_t k = 0; k < 16; ++k) EXPECT_EQ(dq::iq4nl_level(k), int(kIq4nlValues[k])) << k;
}

TEST(DequantHostTables, ScaleUnpackingAgreesWithTheHeader) {
    std::mt19937 rng(3);
    for (int trial = 0; trial < 2000; ++trial) {
        uint8_t scales[12];
        for (auto &b : scales) b = uint8_t(rng() >> 24);
        for (uint32_t s = 0; s < 8; ++s) {
            int sc = 0, m = 0;
            uint32_t sc2 = 0, m2 = 0;
            k4_scale_min(scales, int(s), &sc, &m);
            dq::k4_scale_min_at(scales, s, &sc2, &m2);
            ASSERT_EQ(uint32_t(sc), sc2);
            ASSERT_EQ(uint32_t(m), m2);
        }
    }
}

// The random rows of the device tests do reach the fp16 overflow path (the upload's
// UNSUPPORTED error) for every type that can exceed fp16.
TEST(DequantHostTables, RandomRowsExerciseTheFp16Overflow) {
    for (const TypeCase &c : dqtest::all_type_cases()) {
        if (c.type == TensorType::F16 || c.type == TensorType::BF16) continue;
        const std::vector<uint8_t> data = dqtest::random_rows(c.type, 16, c.cols, 11);
        std::vector<float> v(c.cols);
        bool any = false;
        const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
        for (uint32_t r = 0; r < 16 && !any; ++r) {
            dqtest::spec_decode_row(c.type, data.data() + r * rb, c.cols, v.data());
            for (float f : v) any = any || dqtest::beyond_fp16(f);
        }
        EXPECT_TRUE(any) << tensor_type_name(c.type);
    }
}

}  // namespace
}  // namespace llmkv
