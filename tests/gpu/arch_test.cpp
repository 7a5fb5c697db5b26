// The architectures beyond Llama on the CUDA backend: the kernels of the ops they added
// (bias add, scale, GeGLU) against the CPU, and the forward pass of tiny gemma3 (sliding
// window across 16-token blocks), qwen2, qwen3, phi3 and the mixtures of experts qwen3moe,
// qwen2moe, Mixtral-style llama and gpt-oss (the arch fixture) against the same forward pass on the
// CPU backend, including a Gemma 3 session whose blocks outside every window are poisoned on the
// device (they must not be read). Every test skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/error.h"
#include "common/thread_pool.h"
#include "elementwise.cuh"
#include "gpu_test_util.h"
#include "kv/kv_cache.h"
#include "model/arch/forward.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "module_test_util.h"
#include "swiglu.cuh"
#include "tiny_model.h"

namespace llmkv {
namespace {

using gputest::DeviceBuffer;
using gputest::random_f32;
using testing::TinyModelSpec;

TEST(ArchKernelParity, AddBiasAndScaleAreExactGegluWithinTanhsUlps) {
    LLMKV_REQUIRE_DEVICE();
    const uint32_t rows = 5, cols = 640;
    const size_t n = size_t(rows) * cols;
    const std::vector<float> x = random_f32(n, 1, 3.0f), up = random_f32(n, 2),
                             bias = random_f32(cols, 3);
    DeviceBuffer<float> dx(n), du(n), db(cols);
    ASSERT_TRUE(dx.upload(x) && du.upload(up) && db.upload(bias));
    CUDA_OK(cuda::launch_add_bias(dx.get(), cols, rows, db.get(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got = dx.download(n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], x[i] + bias[i % cols]) << i;

    ASSERT_TRUE(dx.upload(x));
    CUDA_OK(cuda::launch_scale(dx.get(), n, 25.298221f, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    got = dx.download(n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], x[i] * 25.298221f) << i;

    ASSERT_TRUE(dx.upload(x));
    CUDA_OK(cuda::launch_geglu(dx.get(), du.get(), n, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    got = dx.download(n);
    for (size_t i = 0; i < n; ++i) {
        const float want = gelu_tanh(x[i]) * up[i];
        // The CPU's tanh is correctly rounded, CUDA's tanhf (and the host's, under the
        // emulator) within 2 ulp: up to 4 ulp of 1 (2^-22) in tanh, which 1 + tanh cancels
        // for negative x (a relative error of 3e-5 at x = -2.5), scaled by 0.5 x up; the
        // rest is f32 in the same order.
        const float tanh_err = 0.5f * std::fabs(x[i] * up[i]) * 0x1p-22f;
        EXPECT_NEAR(got[i], want, 4e-6f * std::fabs(want) + tanh_err + 1e-30f) << i;
    }
}

// One model, its forward pass on the CPU backend and on the CUDA backend.
struct Twin {
    std::vector<uint8_t> bytes;
    std::shared_ptr<GgufFile> file;
    std::unique_ptr<LlamaModel> model;
    std::unique_ptr<KvCache> cpu_cache, gpu_cache;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<Backend> cpu_backend, gpu_backend;
    std::unique_ptr<Forward> cpu, gpu;
    std::unique_ptr<KvTransferQueue> copies;

    Twin(const TinyModelSpec &spec, uint32_t block_tokens, uint32_t max_tokens = 160) {
        bytes = testing::build_tiny_model(spec);
        init(std::shared_ptr<GgufFile>(GgufFile::from_memory(bytes.data(), bytes.size())),
             block_tokens, max_tokens);
    }
    // A model file (tests/fixtures/arch).
    Twin(const std::string &path, uint32_t block_tokens, uint32_t max_tokens = 160) {
        init(std::shared_ptr<GgufFile>(GgufFile::open(path)), block_tokens, max_tokens);
    }
    void init(std::shared_ptr<GgufFile> f, uint32_t block_tokens, uint32_t max_tokens) {
        file = std::move(f);
        model = LlamaModel::load(file);
        const LlamaConfig &c = model->config();
        KvGeometry g;
        g.n_layers = c.n_layers;
        g.n_kv_heads = c.n_kv_heads;
        g.head_dim = c.head_dim;
        g.block_tokens = block_tokens;
        cpu_cache = std::make_unique<KvCache>(g, 128, 8);
        gpu_cache = std::make_unique<KvCache>(g, 128, 8);
        pool = std::make_unique<ThreadPool>(2);
        cpu_backend = std::make_unique<CpuBackend>(*cpu_cache, *pool);
        cpu = Forward::create(*model, *cpu_backend, max_tokens);
        CudaBackendOptions o;
        o.max_batch_tokens = max_tokens;
        o.n_sealed_blocks = 128;
        o.n_tail_slots = 8;
        gpu_backend = make_cuda_backend(g, o);
        gpu = Forward::create(*model, *gpu_backend, max_tokens);
        copies = gpu_backend->make_transfer_queue(true);
    }
    ~Twin() { copies.reset(); }
};

std::vector<int32_t> some_tokens(size_t n, uint32_t seed) {
    std::vector<int32_t> t(n);
    uint32_t x = seed;
    for (auto &v : t) {
        x = x * 1103515245u + 12345u;
        v = int32_t((x >> 16) % testing::TinyVocab::kSize);
    }
    return t;
}

struct ArchCase {
    const char *name;
    std::function<void(TinyModelSpec &)> setup;
    uint32_t block_tokens;
    // Largest |logit difference| / max |logit|: fp16 GEMM inputs on the device vs f32 on the
    // CPU (F16 weights, as TinyModelParity) 1%; quantized weights 6%: the CPU rounds the
    // activations to 8 bits per block (up to 1/254 of the block's largest value each, 8x the
    // fp16 rounding of the F16 cases) where the device's matvec keeps them f32, and every
    // later layer reads the difference. Under the emulator (f32 arithmetic as the GPU's):
    // F16 weights 0.01-0.27%, llama Q8_0 at head_dim 128 4.5% (4.8% at 64, 3.4% with an F16
    // embedding, 0.44% with F16 weights and a Q8_0 embedding), gemma3 Q4_0 0.27%.
    double tolerance = 0.01;
};

const ArchCase kCases[] = {
    {"gemma3_window12",
     [](TinyModelSpec &s) {
         s.arch = "gemma3";
         s.head_dim = 32;
         s.n_kv_heads = 1;
         s.n_layers = 3;
         s.sliding_window = 12;
         s.window_pattern = 3;
         s.rope_base = 1e6f;
         s.n_ctx = 512;
     },
     16},
    {"qwen2", [](TinyModelSpec &s) { s.arch = "qwen2"; }, 4},
    {"qwen3",
     [](TinyModelSpec &s) {
         s.arch = "qwen3";
         s.head_dim = 32;
     },
     4},
    {"phi3",
     [](TinyModelSpec &s) {
         s.arch = "phi3";
         s.n_kv_heads = 4;
         s.tied_output = false;
     },
     4},
    // head_dim 128 and 256 end to end, with weights kept encoded on the device (Q8_0 / Q4_0).
    {"llama_hd128_q8_0",
     [](TinyModelSpec &s) {
         s.head_dim = 128;
         s.n_kv_heads = 2;
         s.weight_type = TensorType::Q8_0;
         s.embd_type = TensorType::Q8_0;
     },
     16, 0.06},
    {"gemma3_hd256_q4_0",
     [](TinyModelSpec &s) {
         s.arch = "gemma3";
         s.head_dim = 256;
         s.n_kv_heads = 1;
         s.n_layers = 3;
         s.sliding_window = 40;
         s.window_pattern = 3;
         s.rope_base = 1e6f;
         s.n_ctx = 512;
         s.weight_type = TensorType::Q4_0;
         s.embd_type = TensorType::Q8_0;
     },
     16, 0.06},
    // Mixtures of experts (module ABI 7): the experts chosen on the host by the CPU's routing.
    {"qwen3moe",
     [](TinyModelSpec &s) {
         s.arch = "qwen3moe";
         s.head_dim = 32;
         s.n_expert = 8;
         s.n_ff_expert = 32;
     },
     4},
    {"qwen2moe_shared",
     [](TinyModelSpec &s) {
         s.arch = "qwen2moe";
         s.tied_output = false;
         s.n_expert = 4;
         s.n_ff_expert = 32;
         s.n_ff_shared = 64;
     },
     4},
    {"mixtral_q8_0",
     [](TinyModelSpec &s) {
         s.n_expert = 4;
         s.n_ff = 64;
         s.tied_output = false;
         s.weight_type = TensorType::Q8_0;
         s.embd_type = TensorType::Q8_0;
     },
     16, 0.06},
};

class ArchParity : public ::testing::TestWithParam<ArchCase> {};

// Prefill 110 tokens in chunks of 13 (Gemma: 110 > 16-token blocks x window), then decode;
// the largest |logit difference| against tolerance x the largest |logit|.
void expect_parity(Twin &tw, double tolerance) {
    const size_t V = tw.model->config().n_vocab;
    std::vector<int32_t> tokens = some_tokens(120, 3);
    SessionKv c, d;
    double max_ref = 0, max_err = 0;
    for (size_t off = 0; off < tokens.size();) {
        const uint32_t n = off < 110 ? uint32_t(std::min<size_t>(13, 110 - off)) : 1;
        ASSERT_TRUE(tw.cpu_cache->reserve(c, c.n_tokens + n));
        ASSERT_TRUE(tw.gpu_cache->reserve(d, d.n_tokens + n));
        std::vector<float> lc, ld;
        tw.cpu->run({{&c, tokens.data() + off, n, true}}, lc);
        tw.gpu->run({{&d, tokens.data() + off, n, true}}, ld);
        ASSERT_EQ(ld.size(), V);
        for (size_t v = 0; v < V; ++v) {
            ASSERT_TRUE(std::isfinite(ld[v]));
            max_ref = std::max(max_ref, std::fabs(double(lc[v])));
            max_err = std::max(max_err, std::fabs(double(lc[v]) - ld[v]));
        }
        off += n;
    }
    std::printf("[gpu] CPU vs CUDA: max |logit diff| %.3g of max |logit| %.3g\n", max_err, max_ref);
    EXPECT_LE(max_err, tolerance * max_ref) << "max |logit| " << max_ref;
    tw.cpu_cache->release(c);
    tw.gpu_cache->release(d);
}

TEST_P(ArchParity, LogitsMatchTheCpuForward) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    TinyModelSpec spec;
    spec.weight_type = TensorType::F16;
    spec.embd_type = TensorType::F16;
    GetParam().setup(spec);
    Twin tw(spec, GetParam().block_tokens);
    expect_parity(tw, GetParam().tolerance);
}

// gpt-oss (module ABI 8): the tests/fixtures/arch model, whose 4 heads have learned sinks, every
// other layer a 16-token window, MXFP4 experts kept encoded on the device with per-expert
// biases, the router's softmax over the chosen experts and the clamped SwiGLU. F16 attention
// weights; the CPU rounds the experts' inputs to 8 bits (the device's matvec keeps them f32):
// the Q8_0 cases' 6%.
TEST(ArchParityGptOss, LogitsMatchTheCpuForward) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    // The source tree's fixtures, or (a prebuilt pack run elsewhere: tools/gpu-check.sh
    // --prebuilt) those under the working directory.
    std::string path = LLMKV_TEST_FIXTURES_DIR "/arch/gptoss.gguf";
    if (!std::ifstream(path).good()) path = "tests/fixtures/arch/gptoss.gguf";
    ASSERT_TRUE(std::ifstream(path).good()) << "missing fixture " << path;
    Twin tw(path, 16);
    expect_parity(tw, 0.06);
}

// The clamped SwiGLU of gpt-oss against the CPU backend's formula: exact but for expf's ulps.
TEST(ArchKernelParity, SwigluOaiWithinExpfsUlps) {
    LLMKV_REQUIRE_DEVICE();
    const uint32_t n = 4096;
    const std::vector<float> g = random_f32(n, 4, 6.0f), u = random_f32(n, 5, 6.0f);
    DeviceBuffer<float> dg(n), du(n);
    ASSERT_TRUE(dg.upload(g) && du.upload(u));
    CUDA_OK(cuda::launch_swiglu_oai(dg.get(), du.get(), n, 1.702f, 7.0f, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = dg.download(n);
    for (uint32_t i = 0; i < n; ++i) {
        const float x = std::min(g[i], 7.0f), y = std::clamp(u[i], -7.0f, 7.0f);
        const float want = x / (1.0f + std::exp(-1.702f * x)) * (y + 1.0f);
        EXPECT_NEAR(got[i], want, 4e-6f * std::fabs(want) + 1e-30f) << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ArchParity, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ArchCase> &i) {
                             return std::string(i.param.name);
                         });

// Every layer local (window 20): after 100 tokens the device blocks wholly before position
// 81 are overwritten with 0xFF (NaN in fp16); the next 20 tokens still match the CPU.
TEST(ArchParityWindow, DeviceAttentionNeverReadsBlocksOutsideTheWindow) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    TinyModelSpec spec;
    kCases[0].setup(spec);
    spec.sliding_window = 20;
    spec.window_pattern = 1000;  // no global layer
    spec.weight_type = TensorType::F16;
    spec.embd_type = TensorType::F16;
    Twin tw(spec, 16);
    const size_t V = tw.model->config().n_vocab;
    std::vector<int32_t> tokens = some_tokens(120, 9);
    SessionKv c, d;
    ASSERT_TRUE(tw.cpu_cache->reserve(c, 100));
    ASSERT_TRUE(tw.gpu_cache->reserve(d, 100));
    std::vector<float> lc, ld;
    tw.cpu->run({{&c, tokens.data(), 100, true}}, lc);
    tw.gpu->run({{&d, tokens.data(), 100, true}}, ld);
    std::vector<uint8_t> poison(tw.gpu_cache->geometry().sealed_block_bytes(), 0xFF);
    for (uint32_t b = 0; b < 5; ++b) {  // blocks [0, 80): wholly before (80, 100]
        tw.copies->submit({{KvTransfer::kBlockIn, int64_t(d.blocks[b]), poison.data()}}, true);
    }
    double max_ref = 0, max_err = 0;
    for (size_t off = 100; off < 120; off += 5) {
        ASSERT_TRUE(tw.cpu_cache->reserve(c, c.n_tokens + 5));
        ASSERT_TRUE(tw.gpu_cache->reserve(d, d.n_tokens + 5));
        tw.cpu->run({{&c, tokens.data() + off, 5, true}}, lc);
        tw.gpu->run({{&d, tokens.data() + off, 5, true}}, ld);
        for (size_t v = 0; v < V; ++v) {
            ASSERT_TRUE(std::isfinite(ld[v])) << "a poisoned block was read";
            max_ref = std::max(max_ref, std::fabs(double(lc[v])));
            max_err = std::max(max_err, std::fabs(double(lc[v]) - ld[v]));
        }
    }
    EXPECT_LE(max_err, 0.01 * max_ref);
    tw.cpu_cache->release(c);
    tw.gpu_cache->release(d);
}

}  // namespace
}  // namespace llmkv
