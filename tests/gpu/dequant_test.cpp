// Device dequantization (kernels/dequant.cu) of every GGUF type the CPU loads: random packed
// rows with extreme scales, decoded on the device, equal the CPU reference rounded to fp16 bit
// for bit (NaN: both NaN), and the overflow flag names the first value beyond the fp16 range.
// Where the CPU reference does not decode a type yet, the loop-order statement of
// dequant_test_util.h stands in (printed). Then upload_matrix_packed through the module's ABI:
// the same GEMM results as upload_matrix of the host-decoded fp16 matrix, and its errors.
// Then upload_matrix_quantized (weights kept in their GGUF encoding): the file's bytes on the
// device, decode-sized products equal to the host twin of the matvec, prefill-sized ones to
// the fp16 upload's GEMM, the embedding equal to the reference values, and its errors.
// Last, the decode-path matrix-vector kernel over packed weights of every type
// (kernels/matvec_q.cu): bit for bit its host twin (matvec_q_math.cuh), and against a
// double-precision dot product of the reference weights and the CPU matmul (q8 activations)
// where it takes the type.
#include "dequant.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "backend/cpu/matmul.h"
#include "backend/cuda/cuda_backend.h"
#include "common/thread_pool.h"
#include "dequant_test_util.h"
#include "gpu_test_util.h"
#include "matvec_q.cuh"
#include "matvec_q_math.cuh"
#include "module_test_util.h"

namespace llmkv {
namespace {

using dqtest::TypeCase;
using gputest::DeviceBuffer;

class DequantParity : public ::testing::TestWithParam<TypeCase> {};

TEST_P(DequantParity, DeviceValuesAreTheReferenceRoundedToFp16) {
    LLMKV_REQUIRE_DEVICE();
    const TypeCase c = GetParam();
    const uint32_t rows = 12, split = 5;  // two launches, as the module's staged upload does
    const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
    ASSERT_EQ(cuda::dequant_row_bytes(uint32_t(c.type), c.cols), rb);
    ASSERT_TRUE(cuda::dequant_type_supported(uint32_t(c.type)));
    const std::vector<uint8_t> data = dqtest::random_rows(c.type, rows, c.cols, 21);

    std::vector<uint16_t> want(size_t(rows) * c.cols);
    std::vector<float> ref(c.cols);
    std::string which;
    unsigned long long want_bad = ~0ull;
    for (uint32_t r = 0; r < rows; ++r) {
        dqtest::reference_row(c.type, data.data() + r * rb, c.cols, ref.data(), &which);
        for (uint32_t col = 0; col < c.cols; ++col) {
            want[size_t(r) * c.cols + col] = fp32_to_fp16(ref[col]);
            if (dqtest::beyond_fp16(ref[col]) && want_bad == ~0ull)
                want_bad = (unsigned long long)r * c.cols + col;
        }
    }
    std::printf("[ REFERENCE   ] %s: %s\n", tensor_type_name(c.type), which.c_str());

    DeviceBuffer<uint8_t> d_packed(data.size());
    DeviceBuffer<uint16_t> d_out(want.size());
    DeviceBuffer<unsigned long long> d_bad(1);
    ASSERT_TRUE(d_packed.upload(data));
    CUDA_OK(cudaMemset(d_bad.get(), 0xff, sizeof(unsigned long long)));
    CUDA_OK(cuda::launch_dequant_f16(uint32_t(c.type), d_packed.get(), rb, split, c.cols,
                                     d_out.get(), d_bad.get(), 0, nullptr));
    CUDA_OK(cuda::launch_dequant_f16(uint32_t(c.type), d_packed.get() + split * rb, rb,
                                     rows - split, c.cols, d_out.get() + size_t(split) * c.cols,
                                     d_bad.get(), (unsigned long long)split * c.cols, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = d_out.download(want.size());
    ASSERT_EQ(got.size(), want.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (!dqtest::same_fp16(got[i], want[i]) && ++mismatches <= 8) {
            ADD_FAILURE() << tensor_type_name(c.type) << " row " << i / c.cols << " col "
                          << i % c.cols << ": device 0x" << std::hex << got[i] << ", reference 0x"
                          << want[i] << std::dec;
        }
    }
    EXPECT_EQ(mismatches, 0u);
    EXPECT_EQ(d_bad.download(1).at(0), want_bad) << "first value beyond the fp16 range";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantParity, ::testing::ValuesIn(dqtest::all_type_cases()),
                         dqtest::type_case_name);

TEST(DequantParity, UnknownTypesAreRefused) {
    LLMKV_REQUIRE_DEVICE();
    for (uint32_t id : {4u, 9u, 16u, 23u, 38u, 1000u}) {  // (39, MXFP4, has a decoder)
        EXPECT_FALSE(cuda::dequant_type_supported(id)) << id;
        EXPECT_EQ(cuda::dequant_row_bytes(id, 256), 0u) << id;
        EXPECT_EQ(cuda::launch_dequant_f16(id, nullptr, 0, 1, 256, nullptr, nullptr, 0, nullptr),
                  cudaErrorInvalidValue);
    }
    EXPECT_EQ(cuda::dequant_row_bytes(uint32_t(TensorType::Q4_K), 128), 0u);  // not whole blocks
}

// ---- through the module's ABI ---------------------------------------------------------------

using gputest::ContextPtr;

// A small context (one layer, one KV head of 16, 4-token blocks) for the weight tests.
ContextPtr make_context(const llmkv_cuda_api *api, uint32_t max_tokens) {
    KvGeometry g;
    g.n_layers = 1;
    g.n_kv_heads = 1;
    g.head_dim = 16;
    g.block_tokens = 4;
    llmkv_cuda_status s = LLMKV_CUDA_OK;
    std::string err;
    ContextPtr ctx = gputest::create_context(api, g, 2, 1, max_tokens, &s, &err);
    EXPECT_EQ(s, LLMKV_CUDA_OK) << err;
    return ctx;
}

// A packed upload holds exactly the matrix upload_matrix holds for the host-decoded fp16
// values: the same GEMM (logits) results, bit for bit, and the same weight bytes.
TEST(CudaModuleAbi, PackedUploadEqualsTheFp16Upload) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    const llmkv_cuda_api *api = CudaModule::get().api();
    ContextPtr ctx = make_context(api, 4);
    ASSERT_TRUE(ctx);
    for (const TypeCase &c : dqtest::all_type_cases()) {
        SCOPED_TRACE(tensor_type_name(c.type));
        const uint32_t rows = 24;
        const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
        const std::vector<uint8_t> data = dqtest::random_rows(c.type, rows, c.cols, 31, true);
        std::vector<uint16_t> fp16(size_t(rows) * c.cols);
        std::vector<float> ref(c.cols);
        std::string which;
        for (uint32_t r = 0; r < rows; ++r) {
            dqtest::reference_row(c.type, data.data() + r * rb, c.cols, ref.data(), &which);
            for (uint32_t col = 0; col < c.cols; ++col) {
                ASSERT_FALSE(dqtest::beyond_fp16(ref[col]));
                fp16[size_t(r) * c.cols + col] = fp32_to_fp16(ref[col]);
            }
        }
        uint64_t w0 = 0, kv0 = 0, o0 = 0, w1 = 0, kv1 = 0, o1 = 0;
        ASSERT_EQ(api->memory_usage(ctx.get(), &w0, &kv0, &o0), LLMKV_CUDA_OK);
        llmkv_cuda_weight packed = 0, plain = 0;
        ASSERT_EQ(api->upload_matrix_packed(ctx.get(), uint32_t(c.type), data.data(), rows, c.cols,
                                            rb, &packed),
                  LLMKV_CUDA_OK)
            << api->last_error(ctx.get());
        ASSERT_EQ(api->memory_usage(ctx.get(), &w1, &kv1, &o1), LLMKV_CUDA_OK);
        EXPECT_EQ(w1 - w0, uint64_t(rows) * c.cols * 2);
        EXPECT_EQ(o1, o0) << "the staging buffer is freed";
        ASSERT_EQ(api->upload_matrix(ctx.get(), fp16.data(), rows, c.cols, &plain), LLMKV_CUDA_OK);

        llmkv_cuda_tensor x{};
        ASSERT_EQ(api->alloc_activation(ctx.get(), 4, c.cols, &x), LLMKV_CUDA_OK);
        const std::vector<float> xs = gputest::random_f32(size_t(4) * c.cols, 5);
        CUDA_OK(cudaMemcpy(x.data, xs.data(), xs.size() * 4, cudaMemcpyHostToDevice));
        std::vector<float> a(size_t(4) * rows), b(size_t(4) * rows);
        ASSERT_EQ(api->logits(ctx.get(), packed, x, a.data()), LLMKV_CUDA_OK);
        ASSERT_EQ(api->logits(ctx.get(), plain, x, b.data()), LLMKV_CUDA_OK);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
    }
    EXPECT_EQ(api->sticky_error(ctx.get()), LLMKV_CUDA_OK);
}

// Errors of both packed uploads (decoded to fp16, and kept encoded): a value beyond the fp16
// range is UNSUPPORTED naming the value, row and column, and keeps no weight (the encoded
// upload may keep the prefill scratch it grew, at most 64 MiB of other_bytes, for the next
// upload); a type without a decoder is UNSUPPORTED; a wrong row size or partial blocks are
// INVALID; none of them is sticky.
TEST(CudaModuleAbi, PackedUploadErrorsKeepNothing) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    const llmkv_cuda_api *api = CudaModule::get().api();
    for (const bool encoded : {false, true}) {
        SCOPED_TRACE(encoded ? "upload_matrix_quantized" : "upload_matrix_packed");
        const auto upload = encoded ? api->upload_matrix_quantized : api->upload_matrix_packed;
        ContextPtr ctx = make_context(api, 4);
        ASSERT_TRUE(ctx);
        const uint32_t rows = 6, cols = 64, q8 = uint32_t(TensorType::Q8_0);
        const size_t rb = sizeof(BlockQ8_0) * 2;
        std::vector<BlockQ8_0> blocks(size_t(rows) * cols / 32);
        for (BlockQ8_0 &b : blocks) {
            b.d = fp32_to_fp16(0.01f);
            for (int8_t &q : b.qs) q = 3;
        }
        blocks[2 * 3 + 1].d = fp32_to_fp16(1000.0f);  // row 3, columns 32..63: 3000
        blocks[2 * 3 + 1].qs[7] = 100;                // row 3, column 39: 100000 > 65504
        uint64_t w0 = 0, o0 = 0, w1 = 0, o1 = 0;
        ASSERT_EQ(api->memory_usage(ctx.get(), &w0, nullptr, &o0), LLMKV_CUDA_OK);
        llmkv_cuda_weight h = 0;
        EXPECT_EQ(upload(ctx.get(), q8, blocks.data(), rows, cols, rb, &h),
                  LLMKV_CUDA_ERR_UNSUPPORTED);
        const std::string msg = api->last_error(ctx.get());
        EXPECT_NE(msg.find("beyond the fp16 range"), std::string::npos) << msg;
        EXPECT_NE(msg.find("row 3, column 39"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Q8_0"), std::string::npos) << msg;
        EXPECT_EQ(h, 0u);
        ASSERT_EQ(api->memory_usage(ctx.get(), &w1, nullptr, &o1), LLMKV_CUDA_OK);
        EXPECT_EQ(w1, w0);
        if (encoded)
            EXPECT_LE(o1, o0 + (64ull << 20) + 256);
        else
            EXPECT_EQ(o1, o0);

        EXPECT_EQ(upload(ctx.get(), 16 /* IQ2_XXS */, blocks.data(), rows, cols, rb, &h),
                  LLMKV_CUDA_ERR_UNSUPPORTED);
        EXPECT_EQ(upload(ctx.get(), q8, blocks.data(), rows, cols, rb + 1, &h),
                  LLMKV_CUDA_ERR_INVALID);
        EXPECT_EQ(upload(ctx.get(), q8, blocks.data(), rows, 48, rb, &h), LLMKV_CUDA_ERR_INVALID);
        EXPECT_EQ(upload(ctx.get(), q8, nullptr, rows, cols, rb, &h), LLMKV_CUDA_ERR_INVALID);
        EXPECT_EQ(api->sticky_error(ctx.get()), LLMKV_CUDA_OK);
        blocks[2 * 3 + 1].qs[7] = 3;  // now every value fits
        EXPECT_EQ(upload(ctx.get(), q8, blocks.data(), rows, cols, rb, &h), LLMKV_CUDA_OK)
            << api->last_error(ctx.get());
        EXPECT_NE(h, 0u);
    }
}

// ---- matrices kept in their GGUF encoding (upload_matrix_quantized) ---------------------------

using dqtest::matvec_cases;

// Weight bytes are the file's; products of up to 32 rows are the matvec's (bit for bit the
// host twin, whatever the number of rows: 1, 8, 9 and 32 are 1 to 4 launches); 33 rows go
// through the fp16 scratch and one cuBLAS GEMM of the same shape as the fp16 upload's (the
// matrix fits one chunk), so they are bitwise that GEMM; logits route the same way.
TEST(CudaModuleAbi, QuantizedUploadKeepsTheFileBytesAndRoutesByRows) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    const llmkv_cuda_api *api = CudaModule::get().api();
    ContextPtr ctx = make_context(api, 40);
    ASSERT_TRUE(ctx);
    for (const TypeCase &c : matvec_cases()) {
        SCOPED_TRACE(tensor_type_name(c.type));
        const uint32_t rows = 24;
        const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
        const std::vector<uint8_t> data = dqtest::random_rows(c.type, rows, c.cols, 61, true);
        uint64_t w0 = 0, w1 = 0;
        ASSERT_EQ(api->memory_usage(ctx.get(), &w0, nullptr, nullptr), LLMKV_CUDA_OK);
        llmkv_cuda_weight q = 0, f = 0;
        ASSERT_EQ(api->upload_matrix_quantized(ctx.get(), uint32_t(c.type), data.data(), rows,
                                               c.cols, rb, &q),
                  LLMKV_CUDA_OK)
            << api->last_error(ctx.get());
        ASSERT_EQ(api->memory_usage(ctx.get(), &w1, nullptr, nullptr), LLMKV_CUDA_OK);
        EXPECT_EQ(w1 - w0, uint64_t(rows) * rb);
        ASSERT_EQ(api->upload_matrix_packed(ctx.get(), uint32_t(c.type), data.data(), rows, c.cols,
                                            rb, &f),
                  LLMKV_CUDA_OK)
            << api->last_error(ctx.get());

        const uint32_t T = 33;
        llmkv_cuda_tensor x{}, y{}, yf{};
        ASSERT_EQ(api->alloc_activation(ctx.get(), T, c.cols, &x), LLMKV_CUDA_OK);
        ASSERT_EQ(api->alloc_activation(ctx.get(), T, rows, &y), LLMKV_CUDA_OK);
        ASSERT_EQ(api->alloc_activation(ctx.get(), T, rows, &yf), LLMKV_CUDA_OK);
        const std::vector<float> xs = gputest::random_f32(size_t(T) * c.cols, 62);
        CUDA_OK(cudaMemcpy(x.data, xs.data(), xs.size() * 4, cudaMemcpyHostToDevice));
        for (uint32_t n : {1u, 8u, 9u, 32u}) {
            SCOPED_TRACE("rows " + std::to_string(n));
            llmkv_cuda_tensor xn = x, yn = y;
            xn.rows = yn.rows = n;
            ASSERT_EQ(api->matmul(ctx.get(), q, xn, yn), LLMKV_CUDA_OK)
                << api->last_error(ctx.get());
            std::vector<float> got(size_t(n) * rows);
            // Through the module: a raw cudaMemcpy on the legacy stream would not wait for the
            // module's non-blocking compute stream (the emulator's hold mode showed it).
            ASSERT_EQ(api->read_activation(ctx.get(), yn, got.data()), LLMKV_CUDA_OK);
            for (uint32_t t = 0; t < n; ++t) {
                for (uint32_t r = 0; r < rows; ++r) {
                    float want = 0.0f;
                    ASSERT_TRUE(mv::row_dot_host(c.type, data.data() + r * rb, c.cols,
                                                 xs.data() + size_t(t) * c.cols, &want));
                    ASSERT_TRUE(dqtest::same_f32(got[size_t(t) * rows + r], want))
                        << "token " << t << " row " << r;
                }
            }
            std::vector<float> lg(size_t(n) * rows);
            ASSERT_EQ(api->logits(ctx.get(), q, xn, lg.data()), LLMKV_CUDA_OK);
            EXPECT_EQ(0, std::memcmp(lg.data(), got.data(), lg.size() * 4));
        }
        ASSERT_EQ(api->matmul(ctx.get(), q, x, y), LLMKV_CUDA_OK) << api->last_error(ctx.get());
        ASSERT_EQ(api->matmul(ctx.get(), f, x, yf), LLMKV_CUDA_OK) << api->last_error(ctx.get());
        std::vector<float> a(size_t(T) * rows), b(size_t(T) * rows), l(size_t(T) * rows);
        ASSERT_EQ(api->read_activation(ctx.get(), y, a.data()), LLMKV_CUDA_OK);
        ASSERT_EQ(api->read_activation(ctx.get(), yf, b.data()), LLMKV_CUDA_OK);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
        ASSERT_EQ(api->logits(ctx.get(), q, x, l.data()), LLMKV_CUDA_OK);
        EXPECT_EQ(0, std::memcmp(l.data(), b.data(), l.size() * 4));
    }
    EXPECT_EQ(api->sticky_error(ctx.get()), LLMKV_CUDA_OK);
}

// A matrix larger than the 64 MiB scratch: prefill-sized products decode it in row chunks,
// one GEMM each; every output stays within the fp16-GEMM tolerance of the fp16 upload's.
TEST(CudaModuleAbi, QuantizedPrefillCoversEveryRowChunk) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    const llmkv_cuda_api *api = CudaModule::get().api();
    ContextPtr ctx = make_context(api, 40);
    ASSERT_TRUE(ctx);
    const TensorType type = TensorType::Q4_0;
    const uint32_t rows = 40000, cols = 1024;  // 78 MiB of fp16: two chunks
    const size_t rb = dqtest::row_bytes_of(type, cols);
    const std::vector<uint8_t> data = dqtest::random_rows(type, rows, cols, 63, true);
    llmkv_cuda_weight q = 0, f = 0;
    ASSERT_EQ(
        api->upload_matrix_quantized(ctx.get(), uint32_t(type), data.data(), rows, cols, rb, &q),
        LLMKV_CUDA_OK)
        << api->last_error(ctx.get());
    ASSERT_EQ(api->upload_matrix_packed(ctx.get(), uint32_t(type), data.data(), rows, cols, rb, &f),
              LLMKV_CUDA_OK)
        << api->last_error(ctx.get());
    const uint32_t T = 40;
    llmkv_cuda_tensor x{}, y{}, yf{};
    ASSERT_EQ(api->alloc_activation(ctx.get(), T, cols, &x), LLMKV_CUDA_OK);
    ASSERT_EQ(api->alloc_activation(ctx.get(), T, rows, &y), LLMKV_CUDA_OK);
    ASSERT_EQ(api->alloc_activation(ctx.get(), T, rows, &yf), LLMKV_CUDA_OK);
    const std::vector<float> xs = gputest::random_f32(size_t(T) * cols, 64);
    CUDA_OK(cudaMemcpy(x.data, xs.data(), xs.size() * 4, cudaMemcpyHostToDevice));
    ASSERT_EQ(api->matmul(ctx.get(), q, x, y), LLMKV_CUDA_OK) << api->last_error(ctx.get());
    ASSERT_EQ(api->matmul(ctx.get(), f, x, yf), LLMKV_CUDA_OK) << api->last_error(ctx.get());
    std::vector<float> a(size_t(T) * rows), b(size_t(T) * rows);
    ASSERT_EQ(api->read_activation(ctx.get(), y, a.data()), LLMKV_CUDA_OK);
    ASSERT_EQ(api->read_activation(ctx.get(), yf, b.data()), LLMKV_CUDA_OK);
    float max_b = 0.0f;
    for (float v : b) max_b = std::max(max_b, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-3f * max_b) << "output " << i << " (row " << i % rows << ")";
    EXPECT_EQ(api->sticky_error(ctx.get()), LLMKV_CUDA_OK);
}

// The embedding of an encoded table: rows decoded to f32, the CPU reference's values exactly.
TEST(CudaModuleAbi, QuantizedEmbeddingIsTheReferenceRows) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    const llmkv_cuda_api *api = CudaModule::get().api();
    ContextPtr ctx = make_context(api, 8);
    ASSERT_TRUE(ctx);
    const TensorType type = TensorType::Q6_K;
    const uint32_t rows = 50, cols = 512;
    const size_t rb = dqtest::row_bytes_of(type, cols);
    const std::vector<uint8_t> data = dqtest::random_rows(type, rows, cols, 65, true);
    llmkv_cuda_weight q = 0;
    ASSERT_EQ(
        api->upload_matrix_quantized(ctx.get(), uint32_t(type), data.data(), rows, cols, rb, &q),
        LLMKV_CUDA_OK)
        << api->last_error(ctx.get());
    const int32_t tokens[3] = {49, 0, 17};
    llmkv_cuda_span span{};
    span.tokens = tokens;
    span.n = 3;
    uint32_t n = 0;
    ASSERT_EQ(api->begin_batch(ctx.get(), &span, 1, &n, nullptr), LLMKV_CUDA_OK)
        << api->last_error(ctx.get());
    llmkv_cuda_tensor x{};
    ASSERT_EQ(api->alloc_activation(ctx.get(), 3, cols, &x), LLMKV_CUDA_OK);
    ASSERT_EQ(api->embed(ctx.get(), q, x), LLMKV_CUDA_OK) << api->last_error(ctx.get());
    std::vector<float> got(size_t(3) * cols), ref(cols);
    // Through the module: a raw cudaMemcpy on the legacy stream does not wait for the
    // module's non-blocking compute stream (a race on a GPU; the emulator's hold mode showed
    // it as a wrong result).
    ASSERT_EQ(api->read_activation(ctx.get(), x, got.data()), LLMKV_CUDA_OK);
    std::string which;
    for (uint32_t t = 0; t < 3; ++t) {
        dqtest::reference_row(type, data.data() + size_t(tokens[t]) * rb, cols, ref.data(), &which);
        EXPECT_EQ(0, std::memcmp(got.data() + size_t(t) * cols, ref.data(), cols * 4)) << t;
    }
    ASSERT_EQ(api->end_batch(ctx.get()), LLMKV_CUDA_OK);
}

// ---- packed matrix-vector products (decode path) ---------------------------------------------

class MatvecParity : public ::testing::TestWithParam<TypeCase> {};

TEST_P(MatvecParity, MatchesTheReferenceDotProductsAndTheCpuMatmul) {
    LLMKV_REQUIRE_DEVICE();
    const TypeCase c = GetParam();
    const uint32_t rows = 37;  // not a multiple of the CTA's 4 rows
    const uint32_t T = cuda::kMatvecMaxTokens;
    const size_t rb = dqtest::row_bytes_of(c.type, c.cols);
    ASSERT_TRUE(cuda::matvec_q_row_supported(uint32_t(c.type), c.cols));
    const std::vector<uint8_t> data = dqtest::random_rows(c.type, rows, c.cols, 41, true);
    const std::vector<float> x = gputest::random_f32(size_t(T) * c.cols, 42);

    // Reference weights (f32, exact) and, per output, the double dot product and sum |w x|.
    std::vector<float> wref(size_t(rows) * c.cols);
    std::string which;
    for (uint32_t r = 0; r < rows; ++r)
        dqtest::reference_row(c.type, data.data() + r * rb, c.cols, wref.data() + r * c.cols,
                              &which);
    std::printf("[ REFERENCE   ] %s: %s\n", tensor_type_name(c.type), which.c_str());

    DeviceBuffer<uint8_t> d_w(data.size());
    DeviceBuffer<float> d_x(x.size()), d_y(size_t(T) * rows), d_y1(rows);
    ASSERT_TRUE(d_w.upload(data) && d_x.upload(x));
    for (uint32_t n : {1u, 3u, T}) {
        SCOPED_TRACE("n_tokens " + std::to_string(n));
        CUDA_OK(cuda::launch_matvec_q(uint32_t(c.type), d_w.get(), rb, rows, c.cols, d_x.get(),
                                      c.cols, n, d_y.get(), rows, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> y = d_y.download(size_t(n) * rows);
        ASSERT_EQ(y.size(), size_t(n) * rows);
        for (uint32_t t = 0; t < n; ++t) {
            for (uint32_t r = 0; r < rows; ++r) {
                float twin = 0.0f;  // the same operations on the host: the same bits
                ASSERT_TRUE(mv::row_dot_host(c.type, data.data() + r * rb, c.cols,
                                             x.data() + size_t(t) * c.cols, &twin));
                ASSERT_TRUE(dqtest::same_f32(y[size_t(t) * rows + r], twin))
                    << "token " << t << " row " << r << ": device " << y[size_t(t) * rows + r]
                    << ", host twin " << twin;
                double dot = 0.0, mag = 0.0;
                for (uint32_t k = 0; k < c.cols; ++k) {
                    const double p =
                        double(wref[size_t(r) * c.cols + k]) * x[size_t(t) * c.cols + k];
                    dot += p;
                    mag += std::fabs(p);
                }
                ASSERT_NEAR(y[size_t(t) * rows + r], dot, 1e-5 * mag + 1e-30)
                    << "token " << t << " row " << r;
            }
        }
        // A row's result does not depend on the other token rows of the launch.
        for (uint32_t t = 0; t < n; ++t) {
            CUDA_OK(cuda::launch_matvec_q(uint32_t(c.type), d_w.get(), rb, rows, c.cols,
                                          d_x.get() + size_t(t) * c.cols, c.cols, 1, d_y1.get(),
                                          rows, nullptr));
            CUDA_OK(cudaDeviceSynchronize());
            const std::vector<float> y1 = d_y1.download(rows);
            EXPECT_EQ(0, std::memcmp(y1.data(), y.data() + size_t(t) * rows, rows * 4)) << t;
        }
    }

    // The CPU matmul: within the 8-bit rounding of x it makes (dqtest::q8_activation_bound).
    const WeightMatrix wm{c.type, data.data(), int64_t(rows), int64_t(c.cols), rb};
    std::vector<float> ycpu(size_t(T) * rows);
    ThreadPool pool(2);
    cpu::MatmulScratch scratch;
    try {
        cpu::matmul(wm, x.data(), c.cols, T, ycpu.data(), rows, pool, scratch);
    } catch (const Error &e) {
        std::printf("[ SKIP REASON ] CPU matmul comparison for %s: %s\n", tensor_type_name(c.type),
                    e.what());
        return;
    }
    const std::vector<float> y = d_y.download(size_t(T) * rows);
    for (uint32_t t = 0; t < T; ++t) {
        for (uint32_t r = 0; r < rows; ++r) {
            EXPECT_NEAR(y[size_t(t) * rows + r], ycpu[size_t(t) * rows + r],
                        dqtest::q8_activation_bound(c.type, wref.data() + size_t(r) * c.cols,
                                                    x.data() + size_t(t) * c.cols, c.cols))
                << "token " << t << " row " << r;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(PackedTypes, MatvecParity, ::testing::ValuesIn(matvec_cases()),
                         dqtest::type_case_name);

TEST(MatvecParity, RefusesWhatItDoesNotRead) {
    LLMKV_REQUIRE_DEVICE();
    DeviceBuffer<float> d_x(64), d_y(64);
    const size_t rb = dqtest::row_bytes_of(TensorType::Q8_0, 32);
    auto call = [&](uint32_t type, size_t row_bytes, uint32_t cols, const float *x, size_t ldx,
                    uint32_t n) {
        return cuda::launch_matvec_q(type, d_y.get(), row_bytes, 1, cols, x, ldx, n, d_y.get(), 1,
                                     nullptr);
    };
    const uint32_t q8 = uint32_t(TensorType::Q8_0);
    EXPECT_EQ(call(16 /* IQ2_XXS: no decoder */, 66, 256, d_x.get(), 256, 1),
              cudaErrorInvalidValue);
    EXPECT_EQ(call(uint32_t(TensorType::F16), 2 * 36, 36, d_x.get(), 36, 1),
              cudaErrorInvalidValue);  // not whole 8-element groups
    EXPECT_EQ(call(q8, rb, 32, d_x.get(), 32, 0), cudaErrorInvalidValue);
    EXPECT_EQ(call(q8, rb, 32, d_x.get(), 32, cuda::kMatvecMaxTokens + 1), cudaErrorInvalidValue);
    EXPECT_EQ(call(q8, rb + 1, 32, d_x.get(), 32, 1), cudaErrorInvalidValue);
    EXPECT_EQ(call(q8, rb, 16, d_x.get(), 16, 1), cudaErrorInvalidValue);
    EXPECT_EQ(call(q8, rb, 32, d_x.get() + 1, 32, 1), cudaErrorInvalidValue);
    EXPECT_EQ(call(q8, rb, 32, d_x.get(), 34, 1), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace llmkv
