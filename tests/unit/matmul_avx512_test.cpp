// Unit tests of the AVX-512 VNNI matmul kernels (src/backend/cpu/matmul_packed_avx512.cpp; the
// float types run on the AVX2 kernels under this family too): every output must be bitwise the
// AVX2 kernel's, for every weight type, tile remainder, token count,
// thread count, and for the integer edge cases (extreme codes, activation code -128).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "common/half.h"
#include "quant_reference.h"

namespace llmkv::cpu {
namespace {

bool have_avx512() {
    const CpuFeatures &f = cpu_features();
    return f.avx2 && f.fma && f.f16c && f.avx512_vnni;
}

#define SKIP_WITHOUT_AVX512()                                                                \
    do {                                                                                     \
        if (!have_avx512()) {                                                                \
            GTEST_SKIP() << "this CPU (or its OS) lacks AVX-512 F/BW/VL + VNNI: nothing to " \
                            "compare";                                                       \
        }                                                                                    \
    } while (0)

// MXFP4's raw blocks carry every E8M0 exponent 0..255: subnormal scales (2^-128, 2^-127) and
// the largest (2^127, whose products overflow to inf alike in both families).
const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                TensorType::MXFP4};

struct Matrix {
    TensorType type;
    int64_t rows, cols;
    std::vector<uint8_t> data;
    WeightMatrix view() const {
        return WeightMatrix{type, data.data(), rows, cols, data.size() / size_t(rows)};
    }
};

// Weights encoded by the reference quantizers from gaussian values (as real models look).
Matrix quantized_matrix(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    Matrix m{t, rows, cols, {}};
    std::vector<float> v(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = 0.05f + float(r % 5) * 0.3f;
        for (float &e : v) e = nd(rng) * scale;
        std::vector<uint8_t> enc = quantize_reference(t, v.data(), cols);
        m.data.insert(m.data.end(), enc.begin(), enc.end());
    }
    return m;
}

// Raw random blocks: every code value (Q8_0 -128 included, which no quantizer writes) and
// random finite fp16 scales and mins of both signs. Float types: random finite values.
Matrix raw_matrix(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
    Matrix m{t, rows, cols, {}};
    const size_t bb = tensor_type_block_bytes(t);
    const size_t row_bytes = size_t(cols / tensor_type_block_elements(t)) * bb;
    m.data.resize(row_bytes * size_t(rows));
    for (uint8_t &b : m.data) b = uint8_t(rng());
    for (size_t o = 0; o < m.data.size(); o += bb) {
        uint8_t *p = &m.data[o];
        auto put_f16 = [&](uint8_t *dst) {
            const uint16_t h = fp32_to_fp16(ud(rng));
            std::memcpy(dst, &h, 2);
        };
        switch (t) {
            case TensorType::F32: {
                const float f = ud(rng);
                std::memcpy(p, &f, 4);
                break;
            }
            case TensorType::F16:
                put_f16(p);
                break;
            case TensorType::BF16: {
                const uint16_t h = fp32_to_bf16(ud(rng));
                std::memcpy(p, &h, 2);
                break;
            }
            case TensorType::Q4_1:
                put_f16(p + 2);
                [[fallthrough]];
            case TensorType::Q4_0:
            case TensorType::Q8_0:
                put_f16(p);
                break;
            default:
                break;
        }
    }
    return m;
}

// Activations: gaussian rows with outliers; some all-zero blocks (d = 0) and, every 4th token,
// a block of +-amax values (codes +-127 exactly).
std::vector<float> random_x(int64_t n, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(n * cols));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < cols; ++i) {
            float v = nd(rng) * (0.2f + float(t % 7));
            if (rng() % 50 == 0) v *= 25.0f;
            x[size_t(t * cols + i)] = v;
        }
        if (cols >= 64 && t % 3 == 1) {
            for (int i = 32; i < 64; ++i) x[size_t(t * cols + i)] = 0.0f;
        }
        if (t % 4 == 2) {
            for (int i = 0; i < 32; ++i) x[size_t(t * cols + i)] = (i % 3 == 0) ? -9.0f : 9.0f;
        }
    }
    return x;
}

std::string label(TensorType t, int64_t rows, int64_t cols, int64_t n, int threads) {
    return std::string(tensor_type_name(t)) + " rows=" + std::to_string(rows) +
           " cols=" + std::to_string(cols) + " n_tokens=" + std::to_string(n) +
           " threads=" + std::to_string(threads);
}

std::vector<float> run(MatmulKernel family, const Matrix &m, const float *x, int64_t n,
                       ThreadPool &pool, MatmulScratch &scratch) {
    EXPECT_TRUE(set_matmul_kernel(family));
    std::vector<float> y(size_t(n * m.rows) + 8, -777.0f);  // + 8: no write past the rows
    matmul(m.view(), x, m.cols, n, y.data(), m.rows, pool, scratch);
    set_matmul_kernel(MatmulKernel::kAuto);
    return y;
}

// Compares bit patterns (NaN payloads included).
void expect_same_bits(const std::vector<float> &a, const std::vector<float> &b,
                      const std::string &what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
            << what << ": element " << i << " avx512 " << a[i] << " avx2 " << b[i];
    }
}

class Avx512 : public ::testing::Test {
protected:
    void TearDown() override { set_matmul_kernel(MatmulKernel::kAuto); }
};

TEST_F(Avx512, SelectedByDefaultWhenAvailable) {
    SKIP_WITHOUT_AVX512();
    ASSERT_TRUE(set_matmul_kernel(MatmulKernel::kAvx512));
    EXPECT_STREQ(matmul_kernel_name(), "avx512");
    set_matmul_kernel(MatmulKernel::kAuto);
    const CpuFeatures &f = cpu_features();
    const char *want = f.forced_portable ? "portable" : f.forced_avx2 ? "avx2" : "avx512";
    EXPECT_STREQ(matmul_kernel_name(), want);
    EXPECT_EQ(cpu_has_avx512_vnni(), !f.forced_portable && !f.forced_avx2);
}

TEST_F(Avx512, DetectionAgreesWithCompilerBuiltins) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool builtin = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl");
    EXPECT_EQ(cpu_features().avx512, builtin);
    EXPECT_EQ(cpu_features().avx512_vnni, builtin && __builtin_cpu_supports("avx512vnni"));
#else
    EXPECT_FALSE(cpu_has_avx512_vnni());
#endif
}

// The main promise: same bits as AVX2 for every type, tile remainder (rows 1..9 and more,
// n_tokens 1..70) and thread count, at the model's k = 576 and 1536 and small k.
TEST_F(Avx512, BitwiseEqualToAvx2AllShapes) {
    SKIP_WITHOUT_AVX512();
    ThreadPool pool1(1), pool2(2), pool3(3);
    ThreadPool *pools[] = {&pool1, &pool2, &pool3};
    MatmulScratch scratch;
    for (TensorType t : kAllTypes) {
        for (int64_t cols : {int64_t(32), int64_t(576), int64_t(1536)}) {
            for (int64_t rows : {1, 2, 3, 4, 5, 7, 9, 17, 45, 301}) {
                const uint32_t seed = uint32_t(rows * 7919 + cols);
                const Matrix m = quantized_matrix(t, rows, cols, seed);
                const int64_t max_n = 70;
                const std::vector<float> x = random_x(max_n, cols, seed + 1);
                for (int64_t n = 1; n <= max_n; ++n) {
                    // All n for the small matrices; a spread of n for the big ones.
                    if (rows * cols > 20000 && n > 10 && n % 9 != 0 && n != max_n) continue;
                    for (int th = 1; th <= 3; ++th) {
                        if (th > 1 && rows * cols <= 20000 && n % 5 != 0) continue;
                        ThreadPool &pool = *pools[th - 1];
                        const auto y512 = run(MatmulKernel::kAvx512, m, x.data(), n, pool, scratch);
                        const auto y2 = run(MatmulKernel::kAvx2, m, x.data(), n, pool, scratch);
                        expect_same_bits(y512, y2, label(t, rows, cols, n, th));
                        if (HasFatalFailure()) return;
                    }
                }
            }
        }
    }
}

// Random raw blocks: Q8_0 codes -128..127 (|w| = 128 is the largest unsigned operand AVX2's
// maddubs sees), Q4 nibbles 0..15 at their extremes, scales and mins of both signs.
TEST_F(Avx512, BitwiseEqualToAvx2RawBlocks) {
    SKIP_WITHOUT_AVX512();
    ThreadPool pool(2);
    MatmulScratch scratch;
    for (TensorType t : kAllTypes) {
        for (int64_t cols : {int64_t(576), int64_t(1536)}) {
            const Matrix m = raw_matrix(t, 67, cols, uint32_t(cols) + 3);
            for (int64_t n : {1, 2, 8, 13, 64}) {
                const std::vector<float> x = random_x(n, cols, uint32_t(n) + 5);
                const auto y512 = run(MatmulKernel::kAvx512, m, x.data(), n, pool, scratch);
                const auto y2 = run(MatmulKernel::kAvx2, m, x.data(), n, pool, scratch);
                expect_same_bits(y512, y2, label(t, 67, cols, n, 2) + " raw blocks");
                if (HasFatalFailure()) return;
            }
        }
    }
}

// Activation blocks whose quantization is degenerate (a subnormal maximum: 1 / d overflows, so
// codes come out as -128; NaN and Inf inputs likewise). The AVX2 Q8_0 kernel's vpsignb wraps
// on -128, so matmul() must route these calls to it; the Q4 kernels are exact for -128 anyway.
// Batched with ordinary tokens, the ordinary tokens' results must not change either.
TEST_F(Avx512, BitwiseEqualToAvx2DegenerateActivations) {
    SKIP_WITHOUT_AVX512();
    ThreadPool pool(2);
    MatmulScratch scratch;
    const int64_t cols = 576, n = 6;
    std::vector<float> x = random_x(n, cols, 99);
    for (int i = 0; i < 32; ++i)
        x[size_t(1 * cols + 64 + i)] = (i % 2 ? -1 : 1) * 1e-44f * float(i);
    x[size_t(3 * cols + 100)] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(4 * cols + 200)] = std::numeric_limits<float>::infinity();
    for (TensorType t : kAllTypes) {
        for (bool raw : {false, true}) {
            const Matrix m = raw ? raw_matrix(t, 41, cols, 5) : quantized_matrix(t, 41, cols, 5);
            const auto y512 = run(MatmulKernel::kAvx512, m, x.data(), n, pool, scratch);
            const auto y2 = run(MatmulKernel::kAvx2, m, x.data(), n, pool, scratch);
            expect_same_bits(y512, y2, label(t, 41, cols, n, 2) + " degenerate activations");
            // Token 0 alone and inside the batch.
            const auto solo = run(MatmulKernel::kAvx512, m, x.data(), 1, pool, scratch);
            for (int64_t r = 0; r < m.rows; ++r) {
                ASSERT_EQ(std::memcmp(&solo[size_t(r)], &y512[size_t(r)], 4), 0) << "row " << r;
            }
        }
    }
}

// The packed Q8_0 kernels rely on activation codes in -127..127 (AVX2's vpsignb would wrap
// -(-128)): both quantizers clamp there, for NaN, infinities and subnormal scales too.
TEST_F(Avx512, ActivationCodesNeverMinus128) {
#if defined(LLMKV_MATMUL_HAVE_AVX2)
    if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
    const int64_t nb = 6;
    std::vector<float> x(size_t(nb * 32), 1.0f);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[40] = std::numeric_limits<float>::infinity();
    x[70] = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < 32; ++i) x[size_t(96 + i)] = (i % 2 ? -1 : 1) * 1e-44f * float(i + 1);
    for (int i = 0; i < 32; ++i) x[size_t(128 + i)] = -3.0e38f;
    for (int i = 0; i < 32; ++i) x[size_t(160 + i)] = i == 5 ? -1.0f : 0.0f;
    std::vector<uint8_t> a(detail::act_row_bytes(nb)), b(detail::act_row_bytes(nb));
    detail::quantize_act_row_avx2(x.data(), nb, a.data());
    detail::quantize_act_row_portable(x.data(), nb, b.data());
    for (int64_t i = 0; i < nb * 32; ++i) {
        ASSERT_NE(detail::act_qs(a.data())[i], -128) << "avx2, element " << i;
        ASSERT_NE(detail::act_qs(b.data())[i], -128) << "portable, element " << i;
        ASSERT_EQ(detail::act_qs(a.data())[i], detail::act_qs(b.data())[i]) << "element " << i;
    }
    // The scales and the halves' code sums too.
    EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(nb) * 44), 0);
#else
    GTEST_SKIP() << "not an x86 build";
#endif
}

}  // namespace
}  // namespace llmkv::cpu
