// Unit tests of the formats with 2- to 6-bit codes: IQ4_NL, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, which the kernels read packed (matmul_packed.h; revision 3, Q3_K since 4, Q2_K and IQ4_NL
// since 5; the suite keeps the name of the per-row "lane" kernels they replaced): decoding against
// the loop-structured decoders of tests/support/quant_reference on random raw blocks (every code,
// extreme scales), the reference quantizers' round trip, and bitwise equality of the portable, AVX2
// and AVX-512 kernels for every shape, token count and thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "common/error.h"
#include "common/half.h"
#include "quant_reference.h"

namespace llmkv::cpu {
namespace {

const TensorType kLaneTypes[] = {TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL,
                                 TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                                 TensorType::Q5_K, TensorType::Q6_K};

struct Matrix {
    TensorType type;
    int64_t rows, cols;
    std::vector<uint8_t> data;
    size_t row_bytes() const { return data.size() / size_t(rows); }
    WeightMatrix view() const { return WeightMatrix{type, data.data(), rows, cols, row_bytes()}; }
};

// Byte offsets of the fp16 factors inside a block of each type.
std::vector<size_t> f16_offsets(TensorType t) {
    switch (t) {
        case TensorType::Q5_0:
        case TensorType::IQ4_NL:
            return {0};
        case TensorType::Q5_1:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
            return {0, 2};
        case TensorType::Q2_K:
            return {80, 82};
        case TensorType::Q3_K:
            return {108};
        case TensorType::Q6_K:
            return {208};
        default:
            return {};
    }
}

// Random bytes (so every code, 6-bit scale and min, and int8 scale occurs, -128 included) with
// finite fp16 factors of both signs; `extreme` draws those from the whole finite fp16 range,
// subnormals and 65504 included.
Matrix raw_matrix(TensorType t, int64_t rows, int64_t cols, uint32_t seed, bool extreme) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
    Matrix m{t, rows, cols, {}};
    const size_t bb = tensor_type_block_bytes(t);
    m.data.resize(size_t(cols / tensor_type_block_elements(t)) * bb * size_t(rows));
    for (uint8_t &b : m.data) b = uint8_t(rng());
    for (size_t o = 0; o < m.data.size(); o += bb) {
        for (size_t off : f16_offsets(t)) {
            uint16_t h;
            if (extreme) {
                do {
                    h = uint16_t(rng());
                } while ((h & 0x7c00u) == 0x7c00u);                         // no Inf/NaN
                if (rng() % 8 == 0) h = uint16_t((h & 0x8000u) | 0x7bffu);  // +-65504
            } else {
                h = fp32_to_fp16(ud(rng));
            }
            std::memcpy(&m.data[o + off], &h, 2);
        }
    }
    return m;
}

// Weights through the reference quantizers (as a real model's look).
Matrix quantized_matrix(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    Matrix m{t, rows, cols, {}};
    std::vector<float> v(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = 0.05f + float(r % 5) * 0.3f, shift = r % 3 == 0 ? 0.2f : 0.0f;
        for (float &e : v) e = shift + nd(rng) * scale;
        if (cols >= 512 && r % 4 == 1) std::fill(v.begin() + 256, v.begin() + 512, 0.0f);
        std::vector<uint8_t> enc = quantize_reference(t, v.data(), cols);
        m.data.insert(m.data.end(), enc.begin(), enc.end());
    }
    return m;
}

// Gaussian activations with outliers, zero blocks, and every 4th token a block of +-amax.
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
        if (t % 3 == 1) std::fill(x.begin() + t * cols + 32, x.begin() + t * cols + 64, 0.0f);
        if (t % 4 == 2) {
            for (int i = 0; i < 32; ++i) x[size_t(t * cols + i)] = (i % 3 == 0) ? -9.0f : 9.0f;
        }
    }
    return x;
}

std::vector<MatmulKernel> families() {
    std::vector<MatmulKernel> f = {MatmulKernel::kPortable};
    if (set_matmul_kernel(MatmulKernel::kAvx2)) f.push_back(MatmulKernel::kAvx2);
    if (set_matmul_kernel(MatmulKernel::kAvx512)) f.push_back(MatmulKernel::kAvx512);
    set_matmul_kernel(MatmulKernel::kAuto);
    return f;
}

const char *family_name(MatmulKernel k) {
    return k == MatmulKernel::kPortable ? "portable" : k == MatmulKernel::kAvx2 ? "avx2" : "avx512";
}

std::vector<float> run(MatmulKernel family, const Matrix &m, const float *x, int64_t n,
                       ThreadPool &pool, MatmulScratch &scratch) {
    EXPECT_TRUE(set_matmul_kernel(family));
    std::vector<float> y(size_t(n * m.rows) + 8, -777.0f);  // + 8: no write past the rows
    matmul(m.view(), x, m.cols, n, y.data(), m.rows, pool, scratch);
    set_matmul_kernel(MatmulKernel::kAuto);
    return y;
}

std::string label(TensorType t, int64_t rows, int64_t cols, int64_t n, int threads) {
    return std::string(tensor_type_name(t)) + " rows=" + std::to_string(rows) +
           " cols=" + std::to_string(cols) + " n_tokens=" + std::to_string(n) +
           " threads=" + std::to_string(threads);
}

// Every family against the first (portable), bit for bit, NaN payloads included.
void expect_families_agree(const Matrix &m, const std::vector<float> &x, int64_t n,
                           ThreadPool &pool, MatmulScratch &scratch, const std::string &what) {
    const std::vector<MatmulKernel> fams = families();
    const std::vector<float> base = run(fams[0], m, x.data(), n, pool, scratch);
    for (size_t f = 1; f < fams.size(); ++f) {
        const std::vector<float> y = run(fams[f], m, x.data(), n, pool, scratch);
        for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_EQ(std::memcmp(&y[i], &base[i], 4), 0)
                << what << ": element " << i << " (token " << i / size_t(m.rows) << ", row "
                << i % size_t(m.rows) << ") " << family_name(fams[f]) << " " << y[i] << " portable "
                << base[i];
        }
    }
}

class LaneFormats : public ::testing::Test {
protected:
    void TearDown() override { set_matmul_kernel(MatmulKernel::kAuto); }
};

TEST_F(LaneFormats, GeometryMatchesTheBlockStructs) {
    EXPECT_EQ(tensor_type_block_elements(TensorType::Q5_0), 32);
    EXPECT_EQ(tensor_type_block_elements(TensorType::IQ4_NL), 32);
    for (TensorType t : {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                         TensorType::Q6_K, TensorType::Q8_K}) {
        EXPECT_EQ(tensor_type_block_elements(t), 256) << tensor_type_name(t);
    }
    EXPECT_TRUE(tensor_type_supported(uint32_t(TensorType::Q4_K)));
    EXPECT_FALSE(tensor_type_supported(uint32_t(TensorType::Q8_K)));
    EXPECT_STREQ(tensor_type_name(TensorType::IQ4_NL), "IQ4_NL");
    EXPECT_STREQ(tensor_type_name(TensorType::Q6_K), "Q6_K");
}

// The library's decoder (per-element formulas) against the test decoder (loops over the packed
// planes), bitwise, on raw random blocks with ordinary and extreme factors, in every family.
TEST_F(LaneFormats, DequantizeMatchesTheLoopReference) {
    for (TensorType t : kLaneTypes) {
        for (bool extreme : {false, true}) {
            const int64_t n = tensor_type_block_elements(t) * 37;
            const Matrix m = raw_matrix(t, 1, n, 1234 + uint32_t(t), extreme);
            const std::vector<float> want = dequantize_reference(t, m.data.data(), n);
            for (MatmulKernel k : families()) {
                ASSERT_TRUE(set_matmul_kernel(k));
                std::vector<float> got(static_cast<size_t>(n), -1.0f);
                dequantize_row(t, m.data.data(), got.data(), n);
                for (int64_t i = 0; i < n; ++i) {
                    ASSERT_EQ(std::memcmp(&got[size_t(i)], &want[size_t(i)], 4), 0)
                        << tensor_type_name(t) << (extreme ? " extreme" : "") << " element " << i
                        << ": " << got[size_t(i)] << " vs " << want[size_t(i)] << " ("
                        << family_name(k) << ")";
                }
            }
        }
    }
    // Q8_K (activations only) decodes too, through the reference.
    std::vector<float> v(256);
    for (int i = 0; i < 256; ++i) v[size_t(i)] = float(i - 128) * 0.25f;
    const std::vector<uint8_t> q8k = quantize_reference(TensorType::Q8_K, v.data(), 256);
    std::vector<float> back(256);
    dequantize_row_reference(TensorType::Q8_K, q8k.data(), back.data(), 256);
    EXPECT_EQ(back, dequantize_reference(TensorType::Q8_K, q8k.data(), 256));
    for (int i = 0; i < 256; ++i) EXPECT_NEAR(back[size_t(i)], v[size_t(i)], 0.13f);
}

// The reference quantizers' error stays within a fraction of the block's range: they write
// what the formats mean (a wrong bit plane or scale packing would be far off).
TEST_F(LaneFormats, QuantizersRoundTrip) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t n = 2048;
    std::vector<float> x(static_cast<size_t>(n));
    for (float &v : x) v = nd(rng);
    struct Tol {
        TensorType t;
        double rms;  // relative to the data's rms (1)
    };
    for (Tol tol :
         {Tol{TensorType::Q5_0, 0.06}, Tol{TensorType::Q5_1, 0.05}, Tol{TensorType::IQ4_NL, 0.12},
          Tol{TensorType::Q2_K, 0.45}, Tol{TensorType::Q3_K, 0.25}, Tol{TensorType::Q4_K, 0.12},
          Tol{TensorType::Q5_K, 0.06}, Tol{TensorType::Q6_K, 0.03}, Tol{TensorType::Q8_K, 0.01}}) {
        const std::vector<uint8_t> q = quantize_reference(tol.t, x.data(), n);
        ASSERT_EQ(q.size(), tensor_bytes_reference(tol.t, n));
        const std::vector<float> back = dequantize_reference(tol.t, q.data(), n);
        double se = 0;
        for (int64_t i = 0; i < n; ++i) se += std::pow(double(back[size_t(i)] - x[size_t(i)]), 2);
        const double rms = std::sqrt(se / double(n));
        EXPECT_LT(rms, tol.rms) << tensor_type_name(tol.t);
        std::printf("[ info ] %-6s round-trip rms error %.4f\n", tensor_type_name(tol.t), rms);
    }
}

// matmul against the double-precision reference: the activation quantization error bound of
// matmul_test.cpp, with |W| taken as the decoded magnitude plus the min term.
TEST_F(LaneFormats, MatmulMatchesReference) {
    ThreadPool pool(2);
    MatmulScratch scratch;
    for (MatmulKernel k : families()) {
        for (TensorType t : kLaneTypes) {
            const int64_t cols = 768, rows = 19, n = 5;
            const Matrix m = quantized_matrix(t, rows, cols, 99);
            const std::vector<float> x = random_x(n, cols, 100);
            const std::vector<float> y = run(k, m, x.data(), n, pool, scratch);
            std::vector<float> ref(size_t(n * rows));
            matmul_reference(m.view(), x.data(), cols, n, ref.data(), rows);
            for (int64_t r = 0; r < rows; ++r) {
                const std::vector<float> w =
                    dequantize_reference(t, m.data.data() + size_t(r) * m.row_bytes(), cols);
                for (int64_t tok = 0; tok < n; ++tok) {
                    // sum over blocks of (d_x / 2) * sum |W| (plus a little for min terms and
                    // float rounding), as in matmul_test.cpp.
                    double bound = 0, mag = 0;
                    for (int64_t b = 0; b < cols / 32; ++b) {
                        double amax = 0, ws = 0;
                        for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
                            amax = std::max(amax, double(std::fabs(x[size_t(tok * cols + i)])));
                            ws += std::fabs(w[size_t(i)]);
                            mag += std::fabs(w[size_t(i)]) * std::fabs(x[size_t(tok * cols + i)]);
                        }
                        bound += (0.5 + 1e-3) * amax / 127.0 * ws;
                    }
                    bound += 1e-4 * mag + 1e-20;
                    const double got = y[size_t(tok * rows + r)];
                    const double want = ref[size_t(tok * rows + r)];
                    ASSERT_LE(std::fabs(got - want), bound)
                        << label(t, rows, cols, n, 2) << " " << family_name(k) << " token " << tok
                        << " row " << r << ": " << got << " vs " << want;
                }
            }
        }
    }
}

// The promise of matmul.h: portable, AVX2 and AVX-512 give the same bits for every type, row
// count (tile remainders), token count (odd ones included) and thread count.
TEST_F(LaneFormats, FamiliesBitwiseEqualAllShapes) {
    ThreadPool pool1(1), pool2(2), pool3(3);
    ThreadPool *pools[] = {&pool1, &pool2, &pool3};
    MatmulScratch scratch;
    for (TensorType t : kLaneTypes) {
        const bool k = tensor_type_is_k_quant(t);
        for (int64_t cols : {k ? int64_t(256) : int64_t(32), int64_t(768)}) {
            for (int64_t rows : {1, 2, 3, 5, 7, 9, 17, 45, 131}) {
                const uint32_t seed = uint32_t(rows * 7919 + cols);
                const Matrix m = rows % 2 ? quantized_matrix(t, rows, cols, seed)
                                          : raw_matrix(t, rows, cols, seed, rows == 2);
                const std::vector<float> x = random_x(70, cols, seed + 1);
                for (int64_t n : {1, 2, 3, 5, 8, 9, 13, 64, 70}) {
                    for (int th = 1; th <= 3; ++th) {
                        if (th > 1 && n % 2 == 0) continue;
                        expect_families_agree(m, x, n, *pools[th - 1], scratch,
                                              label(t, rows, cols, n, th));
                        if (HasFatalFailure()) return;
                    }
                }
            }
        }
    }
}

// Batching never changes a token's result: each token alone gives the bits it gets in a batch.
TEST_F(LaneFormats, BatchedEqualsSolo) {
    ThreadPool pool(2);
    MatmulScratch scratch;
    for (MatmulKernel fam : families()) {
        for (TensorType t : kLaneTypes) {
            const int64_t cols = 512, rows = 37, n = 11;
            const Matrix m = quantized_matrix(t, rows, cols, 5);
            const std::vector<float> x = random_x(n, cols, 6);
            const std::vector<float> yb = run(fam, m, x.data(), n, pool, scratch);
            for (int64_t tok = 0; tok < n; ++tok) {
                const std::vector<float> ys = run(fam, m, x.data() + tok * cols, 1, pool, scratch);
                for (int64_t r = 0; r < rows; ++r) {
                    ASSERT_EQ(std::memcmp(&ys[size_t(r)], &yb[size_t(tok * rows + r)], 4), 0)
                        << tensor_type_name(t) << " " << family_name(fam) << " token " << tok
                        << " row " << r;
                }
            }
        }
    }
}

// Degenerate activation blocks (a subnormal maximum gives codes of -128; NaN and Inf) and raw
// weights with extreme factors: the families still agree bit for bit.
TEST_F(LaneFormats, FamiliesBitwiseEqualDegenerateInputs) {
    ThreadPool pool(2);
    MatmulScratch scratch;
    const int64_t cols = 512, n = 6;
    std::vector<float> x = random_x(n, cols, 99);
    for (int i = 0; i < 32; ++i)
        x[size_t(1 * cols + 64 + i)] = (i % 2 ? -1 : 1) * 1e-44f * float(i);
    x[size_t(3 * cols + 100)] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(4 * cols + 200)] = std::numeric_limits<float>::infinity();
    for (TensorType t : kLaneTypes) {
        for (bool extreme : {false, true}) {
            const Matrix m = raw_matrix(t, 41, cols, 5, extreme);
            expect_families_agree(
                m, x, n, pool, scratch,
                std::string(tensor_type_name(t)) + " degenerate" + (extreme ? " extreme" : ""));
            if (HasFatalFailure()) return;
        }
    }
}

// The output bits of every quantized type, pinned when its current arithmetic was introduced:
// restructuring a kernel for speed must not change a single bit. The inputs come from a fixed
// integer generator and exact conversions, so they are the same under every standard library.
TEST_F(LaneFormats, OutputBitsArePinned) {
    // Q8_0, Q4_0, Q4_1: the packed-block arithmetic of matmul_packed.h (pinned when it replaced
    // the 8-lane one, which the portable kernel did not share); every family gives these bits.
    // Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: the same arithmetic since kernel revision 3 (pinned when their
    // packed kernels replaced the lane ones); Q3_K since revision 4, Q2_K and IQ4_NL since
    // revision 5.
    struct Pin {
        TensorType type;
        uint64_t portable, simd;
    };
    const Pin pins[] = {
        {TensorType::Q8_0, 0x483122720b0cef51ull, 0x483122720b0cef51ull},
        {TensorType::Q4_0, 0xb1614400e1f6b36dull, 0xb1614400e1f6b36dull},
        {TensorType::Q4_1, 0x516b1bfb1adea62full, 0x516b1bfb1adea62full},
        {TensorType::Q5_0, 0x1006090d94099456ull, 0x1006090d94099456ull},
        {TensorType::Q5_1, 0x187f97ffa1d67f35ull, 0x187f97ffa1d67f35ull},
        {TensorType::IQ4_NL, 0x3d485db66db14994ull, 0x3d485db66db14994ull},
        {TensorType::Q2_K, 0x4567430cc3eeaf5dull, 0x4567430cc3eeaf5dull},
        {TensorType::Q3_K, 0xb35b2cf4fa278959ull, 0xb35b2cf4fa278959ull},
        {TensorType::Q4_K, 0x7f6720a25e6912e0ull, 0x7f6720a25e6912e0ull},
        {TensorType::Q5_K, 0x62be1412bf6b2e38ull, 0x62be1412bf6b2e38ull},
        {TensorType::Q6_K, 0xc560d79c17cfabb2ull, 0xc560d79c17cfabb2ull},
    };
    uint64_t state = 0x243f6a8885a308d3ull;
    auto next = [&state] {  // splitmix64
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    ThreadPool pool(2);
    MatmulScratch scratch;
    const int64_t rows = 19, cols = 512, n = 11;
    for (const Pin &pin : pins) {
        const TensorType t = pin.type;
        Matrix m{t, rows, cols, {}};
        const size_t bb = tensor_type_block_bytes(t);
        m.data.resize(size_t(cols / tensor_type_block_elements(t)) * bb * size_t(rows));
        for (uint8_t &b : m.data) b = uint8_t(next());
        std::vector<size_t> offs = f16_offsets(t);
        if (t == TensorType::Q8_0 || t == TensorType::Q4_0) offs = {0};
        if (t == TensorType::Q4_1) offs = {0, 2};
        for (size_t o = 0; o < m.data.size(); o += bb) {
            for (size_t off : offs) {
                const uint16_t h = fp32_to_fp16(float(int(next() % 2001) - 1000) / 4096.0f);
                std::memcpy(&m.data[o + off], &h, 2);
            }
        }
        std::vector<float> x(size_t(n * cols));
        for (float &v : x) v = float(int(next() % 20001) - 10000) / 1000.0f;
        for (MatmulKernel fam : families()) {
            const std::vector<float> y = run(fam, m, x.data(), n, pool, scratch);
            uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the output bits
            for (size_t i = 0; i < size_t(n * rows); ++i) {
                uint32_t bits;
                std::memcpy(&bits, &y[i], 4);
                for (int k = 0; k < 4; ++k)
                    h = (h ^ ((bits >> (8 * k)) & 0xffu)) * 0x100000001b3ull;
            }
            EXPECT_EQ(h, fam == MatmulKernel::kPortable ? pin.portable : pin.simd)
                << tensor_type_name(t) << " " << family_name(fam) << " 0x" << std::hex << h;
        }
    }
}

TEST_F(LaneFormats, RejectsRowsThatAreNotWholeBlocks) {
    ThreadPool pool(1);
    MatmulScratch scratch;
    const Matrix m = quantized_matrix(TensorType::Q4_K, 2, 512, 1);
    std::vector<float> x(512, 1.0f), y(2);
    WeightMatrix w = m.view();
    w.cols = 288;  // a multiple of 32, not of 256
    EXPECT_THROW(matmul(w, x.data(), 512, 1, y.data(), 2, pool, scratch), Error);
    w = m.view();
    w.type = TensorType::Q8_K;
    EXPECT_THROW(matmul(w, x.data(), 512, 1, y.data(), 2, pool, scratch), Error);
    EXPECT_THROW(dequantize_row(TensorType::Q6_K, m.data.data(), y.data(), 128), Error);
}

}  // namespace
}  // namespace llmkv::cpu
