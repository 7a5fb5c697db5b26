// Unit tests of the CPU matmul kernels (src/backend/cpu/matmul.*): accuracy against the
// double-precision reference with a derived error bound, bitwise determinism across batching,
// threads and tile positions (on every kernel family), AVX2 vs portable agreement, and exact
// dequantization. AVX-512 vs AVX2 bitwise equality: matmul_avx512_test.cpp.
#include "backend/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "common/error.h"
#include "common/half.h"
#include "quant_reference.h"

namespace llmkv::cpu {
namespace {

// ---- error bound ---------------------------------------------------------------------------
//
// For the quantized types matmul() replaces every activation x_i by x^_i = q_i * d_b, with
// d_b = max|x| / 127 over x_i's block b and q_i = nearbyint(x_i * (1 / d_b)), so
// |x_i - x^_i| <= d_b / 2 (plus a few ulps of q from the rounded reciprocal, hence 0.5 + 1e-3
// below). The block dot products are exact integers;
// the only other errors are float roundings: the scale d_w * d_x, the block accumulation over
// nb blocks, the 8-lane horizontal sum, and (Q4_1) the min term. Hence, with W the dequantized
// weights and |W| measured before cancellation (|n*d| + |m| for Q4_1):
//
//   |Y - Y_ref| <= sum_b (0.5 + 1e-3) d_b sum_{i in b} |W_i|            (activation quantization)
//                + 2 (nb + 16) FLT_EPSILON sum_i |W_i| (|x_i| + d_b)   (float arithmetic)
//
// For F32/F16/BF16 weights there is no activation quantization: the bound is the float term
// with cols in place of nb. AVX2 and portable runs quantize the activations identically
// (checked bitwise below), so they may only differ by the float term (counted twice).
// The quantization term is attainable: with sparse weights (a Q4_0 block dominated by one
// outlier) a single activation's rounding error is the whole error, and the test data does
// reach ~99.7% of the bound (the worst ratio per type is printed as [ info ]).

struct Bound {
    double quant = 0;  // activation quantization part
    double fp = 0;     // float rounding part
};

bool quantized(TensorType t) {
    return t == TensorType::Q4_0 || t == TensorType::Q4_1 || t == TensorType::Q8_0;
}

// |W_i| before cancellation, per element.
std::vector<double> weight_magnitudes(TensorType t, const uint8_t *row, int64_t cols) {
    std::vector<float> w = dequantize_reference(t, row, cols);
    std::vector<double> mag(w.begin(), w.end());
    for (double &v : mag) v = std::fabs(v);
    if (t == TensorType::Q4_1) {
        for (int64_t b = 0; b < cols / 32; ++b) {
            BlockQ4_1 blk;
            std::memcpy(&blk, row + b * sizeof(blk), sizeof(blk));
            const double d = std::fabs(fp16_to_fp32(blk.d)), m = std::fabs(fp16_to_fp32(blk.m));
            for (int j = 0; j < 16; ++j) {
                mag[b * 32 + j] = d * (blk.qs[j] & 15) + m;
                mag[b * 32 + j + 16] = d * (blk.qs[j] >> 4) + m;
            }
        }
    }
    return mag;
}

Bound error_bound(TensorType t, const std::vector<double> &mag, const float *x, int64_t cols) {
    Bound b;
    if (!quantized(t)) {
        double s = 0;
        for (int64_t i = 0; i < cols; ++i) s += mag[size_t(i)] * std::fabs(x[i]);
        b.fp = 2.0 * double(cols + 16) * FLT_EPSILON * s + 1e-30;
        return b;
    }
    const int64_t nb = cols / 32;
    double s = 0;
    for (int64_t blk = 0; blk < nb; ++blk) {
        double amax = 0, wsum = 0;
        for (int64_t i = blk * 32; i < blk * 32 + 32; ++i) {
            amax = std::max(amax, double(std::fabs(x[i])));
            wsum += mag[size_t(i)];
        }
        const double d = amax / 127.0;
        b.quant += (0.5 + 1e-3) * d * wsum;
        for (int64_t i = blk * 32; i < blk * 32 + 32; ++i) {
            s += mag[size_t(i)] * (std::fabs(x[i]) + d);
        }
    }
    b.fp = 2.0 * double(nb + 16) * FLT_EPSILON * s + 1e-30;
    return b;
}

// ---- test data ---------------------------------------------------------------------------------

struct Matrix {
    TensorType type;
    int64_t rows, cols;
    std::vector<uint8_t> data;
    WeightMatrix view() const {
        return WeightMatrix{type, data.data(), rows, cols, data.size() / size_t(rows)};
    }
    const uint8_t *row(int64_t r) const { return data.data() + size_t(r) * (data.size() / rows); }
};

// Random weights with varying per-row scale, some all-zero blocks and some outliers, encoded
// by the reference quantizers.
Matrix random_matrix(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    Matrix m{t, rows, cols, {}};
    std::vector<float> v(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = 0.02f + ud(rng) * 2.0f;
        const float shift = ud(rng) < 0.3f ? nd(rng) * scale : 0.0f;
        for (int64_t i = 0; i < cols; ++i) {
            v[size_t(i)] = shift + nd(rng) * scale;
            if (ud(rng) < 0.01f) v[size_t(i)] *= 20.0f;
        }
        if (cols >= 64 && r % 7 == 3) std::fill(v.begin() + 32, v.begin() + 64, 0.0f);
        std::vector<uint8_t> enc = quantize_reference(t, v.data(), cols);
        m.data.insert(m.data.end(), enc.begin(), enc.end());
    }
    return m;
}

// n_tokens rows of cols activations with row stride ldx (padding filled with NaN so that a
// kernel reading it would show).
std::vector<float> random_x(int64_t n_tokens, int64_t cols, int64_t ldx, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    std::vector<float> x(size_t(std::max<int64_t>(n_tokens, 1) * ldx), std::nanf(""));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float scale = 0.1f + ud(rng) * 5.0f;
        for (int64_t i = 0; i < cols; ++i) {
            float v = nd(rng) * scale;
            if (ud(rng) < 0.02f) v *= 30.0f;
            x[size_t(t * ldx + i)] = v;
        }
        if (cols >= 64 && t % 3 == 1) {  // an all-zero activation block (d = 0)
            for (int i = 32; i < 64; ++i) x[size_t(t * ldx + i)] = 0.0f;
        }
    }
    return x;
}

const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1};

std::string label(TensorType t, int64_t rows, int64_t cols, int64_t n) {
    return std::string(tensor_type_name(t)) + " rows=" + std::to_string(rows) +
           " cols=" + std::to_string(cols) + " n_tokens=" + std::to_string(n) +
           " kernel=" + matmul_kernel_name();
}

// Runs the body once per available kernel family, restoring kAuto afterwards.
class KernelFamilies {
public:
    ~KernelFamilies() { set_matmul_kernel(MatmulKernel::kAuto); }
    template <typename F>
    void each(F &&f) {
        ASSERT_TRUE(set_matmul_kernel(MatmulKernel::kPortable));
        f();
        if (set_matmul_kernel(MatmulKernel::kAvx2)) {
            f();
        } else {
            std::printf("[ info ] AVX2 kernels not available here; portable only\n");
        }
        if (set_matmul_kernel(MatmulKernel::kAvx512)) {
            f();
        } else {
            std::printf("[ info ] AVX-512 VNNI kernels not available here\n");
        }
        set_matmul_kernel(MatmulKernel::kAuto);
    }
};

bool bitwise_equal(float a, float b) {
    return std::memcmp(&a, &b, sizeof(float)) == 0;
}

// Padding written by nobody: checks that matmul() stays inside Y's rows.
constexpr float kSentinel = -12345.678f;

std::vector<float> run(const Matrix &m, const std::vector<float> &x, int64_t ldx, int64_t n,
                       int64_t ldy, ThreadPool &pool, MatmulScratch &scratch) {
    std::vector<float> y(size_t(std::max<int64_t>(n, 1) * ldy), kSentinel);
    matmul(m.view(), x.data(), ldx, n, y.data(), ldy, pool, scratch);
    return y;
}

// ---- tests -----------------------------------------------------------------------------------

TEST(Matmul, KernelSelection) {
    const std::string name = matmul_kernel_name();
    EXPECT_TRUE(name == "avx512" || name == "avx2" || name == "portable");
    ASSERT_TRUE(set_matmul_kernel(MatmulKernel::kPortable));
    EXPECT_STREQ(matmul_kernel_name(), "portable");
    if (cpu_has_avx2()) {
        ASSERT_TRUE(set_matmul_kernel(MatmulKernel::kAvx2));
        EXPECT_STREQ(matmul_kernel_name(), "avx2");
    }
    if (cpu_has_avx512_vnni()) {
        ASSERT_TRUE(set_matmul_kernel(MatmulKernel::kAvx512));
        EXPECT_STREQ(matmul_kernel_name(), "avx512");
    }
    set_matmul_kernel(MatmulKernel::kAuto);
    EXPECT_EQ(std::string(matmul_kernel_name()), cpu_has_avx512_vnni() ? "avx512"
                                                 : cpu_has_avx2()      ? "avx2"
                                                                       : "portable");
}

TEST(CpuFeatures, DetectionAgreesWithCompilerBuiltins) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    EXPECT_EQ(cpu_features().avx2, bool(__builtin_cpu_supports("avx2")));
    EXPECT_EQ(cpu_features().fma, bool(__builtin_cpu_supports("fma")));
    const char *env = std::getenv("LLMKV_CPU_FEATURES");
    EXPECT_EQ(cpu_features().forced_portable, env && std::string(env) == "portable");
    EXPECT_EQ(cpu_features().forced_avx2, env && std::string(env) == "avx2");
    if (cpu_features().forced_portable) {
        EXPECT_FALSE(cpu_has_avx2());
        EXPECT_FALSE(cpu_has_avx512_vnni());
        EXPECT_STREQ(matmul_kernel_name(), "portable");
    }
    if (cpu_features().forced_avx2) {
        EXPECT_FALSE(cpu_has_avx512_vnni());
        EXPECT_EQ(std::string(matmul_kernel_name()), cpu_has_avx2() ? "avx2" : "portable");
    }
#else
    EXPECT_FALSE(cpu_has_avx2());
#endif
}

TEST(Matmul, MatchesReferenceWithinBound) {
    ThreadPool pool(2);
    MatmulScratch scratch;
    KernelFamilies families;
    families.each([&] {
        for (TensorType t : kAllTypes) {
            double worst = 0;  // largest err / bound seen for this type (printed, for the record)
            std::vector<int64_t> col_set = {32, 64, 576, 1536};
            if (!quantized(t)) col_set.insert(col_set.end(), {1, 7, 13, 45});
            for (int64_t cols : col_set) {
                for (int64_t rows : {1, 5, 16, 17, 43, 333}) {
                    const uint32_t seed = uint32_t(rows * 131 + cols * 7);
                    Matrix m = random_matrix(t, rows, cols, seed);
                    std::vector<std::vector<double>> mags;
                    for (int64_t r = 0; r < rows; ++r) {
                        mags.push_back(weight_magnitudes(t, m.row(r), cols));
                    }
                    for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 64}) {
                        if (rows * cols * n > 4'000'000) continue;  // keep the reference quick
                        const int64_t ldx = cols + (n % 2), ldy = rows + (n % 3);
                        std::vector<float> x = random_x(n, cols, ldx, seed + uint32_t(n));
                        std::vector<float> y = run(m, x, ldx, n, ldy, pool, scratch);
                        std::vector<float> ref(size_t(n * ldy));
                        matmul_reference(m.view(), x.data(), ldx, n, ref.data(), ldy);
                        int bad = 0;
                        for (int64_t tok = 0; tok < n && bad < 5; ++tok) {
                            for (int64_t r = 0; r < rows && bad < 5; ++r) {
                                const Bound bd =
                                    error_bound(t, mags[size_t(r)], &x[size_t(tok * ldx)], cols);
                                const double got = y[size_t(tok * ldy + r)];
                                const double want = ref[size_t(tok * ldy + r)];
                                const double err = std::fabs(got - want);
                                worst = std::max(worst, err / (bd.quant + bd.fp));
                                if (!(err <= bd.quant + bd.fp)) {
                                    ADD_FAILURE()
                                        << label(t, rows, cols, n) << " Y[" << tok << "][" << r
                                        << "]=" << got << " ref=" << want << " err=" << err
                                        << " bound=" << bd.quant + bd.fp;
                                    ++bad;
                                }
                            }
                            for (int64_t r = rows; r < ldy; ++r) {
                                ASSERT_EQ(y[size_t(tok * ldy + r)], kSentinel)
                                    << label(t, rows, cols, n) << ": wrote Y padding";
                            }
                        }
                        ASSERT_EQ(bad, 0);
                    }
                }
            }
            std::printf("[ info ] %-4s %-8s worst |Y - ref| / bound = %.3f\n", tensor_type_name(t),
                        matmul_kernel_name(), worst);
        }
    });
}

// With the activations replaced by their q8 values x^ (computed here from the documented rule:
// d = max|x| / 127 in float, q = nearbyint(x * (1 / d))), only float rounding is left: the
// kernels must match sum_i W_i x^_i within the float part of the bound alone.
TEST(Matmul, MatchesQuantizedActivationReferenceTightly) {
    ThreadPool pool(2);
    MatmulScratch scratch;
    KernelFamilies families;
    families.each([&] {
        for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1}) {
            for (int64_t cols : {int64_t(32), int64_t(576), int64_t(1536)}) {
                const int64_t rows = 37, n = 5;
                Matrix m = random_matrix(t, rows, cols, uint32_t(cols) + 17);
                std::vector<float> x = random_x(n, cols, cols, uint32_t(cols) + 18);
                std::vector<float> y = run(m, x, cols, n, rows, pool, scratch);
                std::vector<double> xq(x.size());
                for (size_t b = 0; b < x.size(); b += 32) {
                    float amax = 0.0f;
                    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
                    const float d = amax / 127.0f;
                    const float id = d != 0.0f ? 1.0f / d : 0.0f;
                    for (size_t i = b; i < b + 32; ++i) {
                        xq[i] = double(std::nearbyint(x[i] * id)) * double(d);
                    }
                }
                for (int64_t r = 0; r < rows; ++r) {
                    std::vector<float> wr = dequantize_reference(t, m.row(r), cols);
                    std::vector<double> mag = weight_magnitudes(t, m.row(r), cols);
                    for (int64_t tok = 0; tok < n; ++tok) {
                        double want = 0;
                        for (int64_t i = 0; i < cols; ++i) {
                            want += double(wr[size_t(i)]) * xq[size_t(tok * cols + i)];
                        }
                        const Bound bd = error_bound(t, mag, &x[size_t(tok * cols)], cols);
                        const double got = y[size_t(tok * rows + r)];
                        ASSERT_LE(std::fabs(got - want), bd.fp)
                            << label(t, rows, cols, n) << " token " << tok << " row " << r
                            << ": got " << got << " want " << want;
                    }
                }
            }
        }
    });
}

// Y[t][r] must not depend on n_tokens, on the other rows of X, on the thread count or split,
// or on the position of r inside a register tile / row chunk.
TEST(Matmul, DeterministicAcrossBatchingAndThreads) {
    ThreadPool pool1(1), pool2(2), pool3(3);
    MatmulScratch scratch;
    KernelFamilies families;
    families.each([&] {
        for (TensorType t : kAllTypes) {
            for (int64_t cols : {int64_t(64), int64_t(576)}) {
                for (int64_t rows : {1, 17, 333, 1000}) {
                    const uint32_t seed = uint32_t(rows * 3 + cols);
                    Matrix m = random_matrix(t, rows, cols, seed);
                    const int64_t max_n = 70;
                    std::vector<float> x = random_x(max_n, cols, cols, seed + 2);
                    // Every token alone (n_tokens = 1) is the baseline.
                    std::vector<float> solo(size_t(max_n * rows));
                    for (int64_t tok = 0; tok < max_n; ++tok) {
                        matmul(m.view(), &x[size_t(tok * cols)], cols, 1, &solo[size_t(tok * rows)],
                               rows, pool2, scratch);
                    }
                    for (int64_t n : {2, 3, 5, 9, 64, 70}) {
                        // Batches of n tokens starting at token 0 and at token 1 (so each token
                        // also lands at another position in the register tiles), 1-3 threads.
                        for (int64_t first : {0, 1}) {
                            if (first + n > max_n) continue;
                            const float *xb = &x[size_t(first * cols)];
                            int pi = 0;
                            for (ThreadPool *pool : {&pool1, &pool2, &pool3}) {
                                ++pi;
                                std::vector<float> y(size_t(n * rows));
                                matmul(m.view(), xb, cols, n, y.data(), rows, *pool, scratch);
                                for (int64_t i = 0; i < n * rows; ++i) {
                                    const float want = solo[size_t(first * rows + i)];
                                    ASSERT_TRUE(bitwise_equal(y[size_t(i)], want))
                                        << label(t, rows, cols, n) << " first token " << first
                                        << ", " << pi << " thread(s): token " << first + i / rows
                                        << " row " << i % rows << " batched " << y[size_t(i)]
                                        << " solo " << want;
                                }
                            }
                        }
                    }
                }
            }
        }
    });
}

// Rows taken from a matrix at an offset land in different tiles / thread chunks but must give
// the same bits.
TEST(Matmul, DeterministicAcrossRowOffsets) {
    ThreadPool pool(2);
    MatmulScratch scratch;
    KernelFamilies families;
    families.each([&] {
        for (TensorType t : kAllTypes) {
            const int64_t rows = 101, cols = 576;
            Matrix m = random_matrix(t, rows, cols, 77);
            for (int64_t n : {1, 4, 7}) {
                std::vector<float> x = random_x(n, cols, cols, 78);
                std::vector<float> y = run(m, x, cols, n, rows, pool, scratch);
                for (int64_t off : {1, 3, 18}) {
                    WeightMatrix sub = m.view();
                    sub.data = m.row(off);
                    sub.rows = rows - off;
                    std::vector<float> ys(size_t(n * sub.rows));
                    matmul(sub, x.data(), cols, n, ys.data(), sub.rows, pool, scratch);
                    for (int64_t tok = 0; tok < n; ++tok) {
                        for (int64_t r = 0; r < sub.rows; ++r) {
                            ASSERT_TRUE(bitwise_equal(ys[size_t(tok * sub.rows + r)],
                                                      y[size_t(tok * rows + r + off)]))
                                << label(t, rows, cols, n) << " offset " << off << " row " << r;
                        }
                    }
                }
            }
        }
    });
}

TEST(Matmul, Avx2AndPortableAgree) {
    if (!cpu_features().avx2 || !cpu_features().fma || !cpu_features().f16c) {
        GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
    }
    ThreadPool pool(2);
    MatmulScratch scratch;
    for (TensorType t : kAllTypes) {
        for (int64_t cols : {int64_t(32), int64_t(576), int64_t(1536)}) {
            const int64_t rows = 77, n = 5;
            Matrix m = random_matrix(t, rows, cols, uint32_t(cols));
            std::vector<float> x = random_x(n, cols, cols, 5);
            ASSERT_TRUE(set_matmul_kernel(MatmulKernel::kPortable));
            std::vector<float> yp = run(m, x, cols, n, rows, pool, scratch);
            ASSERT_TRUE(set_matmul_kernel(MatmulKernel::kAvx2));
            std::vector<float> ya = run(m, x, cols, n, rows, pool, scratch);
            set_matmul_kernel(MatmulKernel::kAuto);
            for (int64_t tok = 0; tok < n; ++tok) {
                for (int64_t r = 0; r < rows; ++r) {
                    const Bound bd = error_bound(t, weight_magnitudes(t, m.row(r), cols),
                                                 &x[size_t(tok * cols)], cols);
                    const double diff = std::fabs(double(yp[size_t(tok * rows + r)]) -
                                                  double(ya[size_t(tok * rows + r)]));
                    ASSERT_LE(diff, 2 * bd.fp)
                        << label(t, rows, cols, n) << " token " << tok << " row " << r;
                }
            }
        }
    }
}

// Both kernel families must quantize activations to the same bits (so they differ only by
// float summation order).
TEST(Matmul, ActivationQuantizationIdenticalAcrossFamilies) {
#if defined(LLMKV_MATMUL_HAVE_AVX2)
    if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 kernels on this CPU";
    for (int64_t cols : {int64_t(32), int64_t(576), int64_t(1536)}) {
        const int64_t nb = cols / 32;
        std::vector<float> x = random_x(3, cols, cols, 11);
        // Block 0 of token 0 gets d = 1 exactly, so these hit rounding ties (to even).
        x[0] = 127.0f;
        x[1] = 2.5f;
        x[2] = -3.5f;
        x[3] = 0.5f;
        x[4] = -1e-30f;
        for (int64_t tok = 0; tok < 3; ++tok) {
            std::vector<uint8_t> a(detail::act_row_bytes(nb)), p(detail::act_row_bytes(nb));
            detail::quantize_act_row_avx2(&x[size_t(tok * cols)], nb, a.data());
            detail::quantize_act_row_portable(&x[size_t(tok * cols)], nb, p.data());
            // Codes, scales and the halves' sums.
            ASSERT_EQ(std::memcmp(a.data(), p.data(), size_t(nb) * 44), 0) << "cols " << cols;
        }
    }
#else
    GTEST_SKIP() << "not an x86 build";
#endif
}

TEST(Matmul, DequantizeRowExact) {
    KernelFamilies families;
    families.each([&] {
        for (TensorType t : kAllTypes) {
            for (int64_t n : {32, 64, 576}) {
                Matrix m = random_matrix(t, 1, n, uint32_t(n) + 3);
                std::vector<float> ref = dequantize_reference(t, m.data.data(), n);
                std::vector<float> out(size_t(n), -1.0f);
                dequantize_row(t, m.data.data(), out.data(), n);
                for (int64_t i = 0; i < n; ++i) {
                    ASSERT_TRUE(bitwise_equal(out[size_t(i)], ref[size_t(i)]))
                        << tensor_type_name(t) << " n=" << n << " i=" << i << ": " << out[size_t(i)]
                        << " vs " << ref[size_t(i)] << " (" << matmul_kernel_name() << ")";
                }
            }
        }
        // Float types accept any length, including a SIMD tail.
        for (TensorType t : {TensorType::F16, TensorType::BF16, TensorType::F32}) {
            Matrix m = random_matrix(t, 1, 13, 9);
            std::vector<float> ref = dequantize_reference(t, m.data.data(), 13);
            std::vector<float> out(13);
            dequantize_row(t, m.data.data(), out.data(), 13);
            for (int i = 0; i < 13; ++i) ASSERT_TRUE(bitwise_equal(out[size_t(i)], ref[size_t(i)]));
        }
    });
}

// Every fp16 and bf16 bit pattern decodes to the same bits as the scalar conversions in
// common/half.h, on both kernel families: subnormals and Inf included. NaNs only need to stay
// NaN (the F16C instruction quietens signalling NaNs, the scalar code keeps them).
TEST(Matmul, DequantizeAllHalfBitPatterns) {
    std::vector<uint16_t> all(65536);
    for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
    KernelFamilies families;
    families.each([&] {
        std::vector<float> out(65536);
        dequantize_row(TensorType::F16, all.data(), out.data(), 65536);
        for (uint32_t i = 0; i < 65536; ++i) {
            const float want = fp16_to_fp32(uint16_t(i));
            if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(out[i])) << "fp16 0x" << std::hex << i;
                continue;
            }
            ASSERT_TRUE(bitwise_equal(out[i], want))
                << "fp16 0x" << std::hex << i << " (" << matmul_kernel_name() << ")";
        }
        dequantize_row(TensorType::BF16, all.data(), out.data(), 65536);
        for (uint32_t i = 0; i < 65536; ++i) {
            const float want = bf16_to_fp32(uint16_t(i));
            if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(out[i])) << "bf16 0x" << std::hex << i;
                continue;
            }
            ASSERT_TRUE(bitwise_equal(out[i], want))
                << "bf16 0x" << std::hex << i << " (" << matmul_kernel_name() << ")";
        }
    });
}

TEST(Matmul, RejectsBadArguments) {
    ThreadPool pool(1);
    MatmulScratch scratch;
    Matrix m = random_matrix(TensorType::Q8_0, 4, 64, 1);
    std::vector<float> x(64, 1.0f), y(4);
    WeightMatrix w = m.view();
    w.cols = 48;  // not a multiple of 32
    EXPECT_THROW(matmul(w, x.data(), 64, 1, y.data(), 4, pool, scratch), Error);
    w = m.view();
    w.row_bytes = 20;  // too small for 64 Q8_0 values
    EXPECT_THROW(matmul(w, x.data(), 64, 1, y.data(), 4, pool, scratch), Error);
    w = m.view();
    w.type = TensorType(16);  // IQ2_XXS
    EXPECT_THROW(matmul(w, x.data(), 64, 1, y.data(), 4, pool, scratch), Error);
    EXPECT_THROW(dequantize_row(TensorType::Q4_0, m.data.data(), y.data(), 31), Error);
    // n_tokens = 0 and rows = 0 are no-ops.
    matmul(m.view(), x.data(), 64, 0, y.data(), 4, pool, scratch);
    w = m.view();
    w.rows = 0;
    matmul(w, x.data(), 64, 1, y.data(), 4, pool, scratch);
}

TEST(Matmul, ScratchGrowsOnlyWhenNeeded) {
    ThreadPool pool(2);
    MatmulScratch scratch;
    Matrix m = random_matrix(TensorType::Q4_1, 64, 576, 2);
    std::vector<float> x = random_x(16, 576, 576, 3), y(16 * 64);
    matmul(m.view(), x.data(), 576, 16, y.data(), 64, pool, scratch);
    const size_t cap = scratch.capacity();
    EXPECT_GE(cap, detail::act_row_bytes(576 / 32) * 16);
    for (int64_t n : {1, 8, 16}) {
        matmul(m.view(), x.data(), 576, n, y.data(), 64, pool, scratch);
        EXPECT_EQ(scratch.capacity(), cap);
    }
}

}  // namespace
}  // namespace llmkv::cpu
