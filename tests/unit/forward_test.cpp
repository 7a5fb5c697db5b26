// The CPU forward pass on tiny synthetic models: agreement with a naive dense reference for
// every weight format, and bitwise independence from chunking, batching and thread count.
#include "model/arch/forward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "tiny_model.h"

namespace llmkv {
namespace {

using testing::TinyModelSpec;

struct Harness {
    std::vector<uint8_t> bytes;
    std::shared_ptr<GgufFile> file;
    std::unique_ptr<LlamaModel> model;
    std::unique_ptr<KvCache> cache;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<Forward> forward;

    Harness(const TinyModelSpec &spec, unsigned threads = 2, uint32_t block_tokens = 4,
            llmkv_kv_dtype dtype = LLMKV_KV_F16, uint32_t residual = 0,
            const std::function<void(KvGeometry &)> &tweak = nullptr) {
        bytes = testing::build_tiny_model(spec);
        file = std::shared_ptr<GgufFile>(GgufFile::from_memory(bytes.data(), bytes.size()));
        model = LlamaModel::load(file);
        const LlamaConfig &c = model->config();
        KvGeometry g;
        g.n_layers = c.n_layers;
        g.n_kv_heads = c.n_kv_heads;
        g.head_dim = c.head_dim;
        g.block_tokens = block_tokens;
        g.dtype_k = dtype;
        g.dtype_v = dtype;
        g.residual_tokens = residual;
        if (tweak) tweak(g);
        cache = std::make_unique<KvCache>(g, 256, 8);
        pool = std::make_unique<ThreadPool>(threads);
        backend = std::make_unique<CpuBackend>(*cache, *pool);
        forward = Forward::create(*model, *backend, 128);
    }

    // Runs tokens through a fresh session in chunks; returns the logits after each chunk.
    std::vector<float> run_chunked(SessionKv &kv, const std::vector<int32_t> &tokens,
                                   uint32_t chunk) {
        std::vector<float> logits;
        for (size_t i = 0; i < tokens.size(); i += chunk) {
            uint32_t n = uint32_t(std::min<size_t>(chunk, tokens.size() - i));
            EXPECT_TRUE(cache->reserve(kv, kv.n_tokens + n));
            forward->run({{&kv, tokens.data() + i, n, true}}, logits);
        }
        return logits;
    }
};

std::vector<int32_t> some_tokens(size_t n, uint32_t seed = 7) {
    std::vector<int32_t> t(n);
    uint32_t x = seed;
    for (auto &v : t) {
        x = x * 1103515245u + 12345u;
        v = int32_t((x >> 16) % testing::TinyVocab::kSize);
    }
    return t;
}

struct FormatCase {
    TensorType weights;
    TensorType embd;
    bool tied;
    float tolerance;  // max |logit - reference| relative to the reference's max |logit|
};

class ForwardFormats : public ::testing::TestWithParam<FormatCase> {};

TEST_P(ForwardFormats, LogitsMatchTheNaiveDenseReference) {
    const FormatCase fc = GetParam();
    TinyModelSpec spec;
    spec.weight_type = fc.weights;
    spec.embd_type = fc.embd;
    spec.tied_output = fc.tied;
    Harness h(spec);
    std::vector<int32_t> tokens = some_tokens(11);
    auto ref = testing::reference_logits(spec, tokens);
    SessionKv kv;
    std::vector<float> logits = h.run_chunked(kv, tokens, 1);
    (void)logits;
    // Check every position, token by token.
    SessionKv kv2;
    for (size_t i = 0; i < tokens.size(); ++i) {
        ASSERT_TRUE(h.cache->reserve(kv2, kv2.n_tokens + 1));
        std::vector<float> out;
        h.forward->run({{&kv2, tokens.data() + i, 1, true}}, out);
        double max_ref = 0, max_err = 0;
        for (size_t v = 0; v < out.size(); ++v) {
            max_ref = std::max(max_ref, std::fabs(double(ref[i][v])));
            max_err = std::max(max_err, std::fabs(double(out[v]) - ref[i][v]));
        }
        EXPECT_LE(max_err, fc.tolerance * max_ref) << "position " << i;
    }
    h.cache->release(kv);
    h.cache->release(kv2);
}

// Tolerances: the reference mimics fp16 K/V storage and, for block-quantized weights, the
// 8-bit activation quantization of the CPU matmul, so what remains is float vs double
// accumulation and the occasional activation whose float value lands on the other side of
// an 8-bit rounding boundary than the double reference's (one step = max|block| / 127,
// which two random layers amplify to ~1% of the logit scale in the worst position).
INSTANTIATE_TEST_SUITE_P(
    AllWeightFormats, ForwardFormats,
    ::testing::Values(FormatCase{TensorType::F32, TensorType::F32, true, 1e-4f},
                      FormatCase{TensorType::F16, TensorType::F16, false, 1e-4f},
                      FormatCase{TensorType::BF16, TensorType::F32, true, 1e-4f},
                      FormatCase{TensorType::Q8_0, TensorType::Q8_0, true, 1.5e-2f},
                      FormatCase{TensorType::Q4_0, TensorType::Q8_0, false, 1.5e-2f},
                      FormatCase{TensorType::Q4_1, TensorType::Q8_0, true, 1.5e-2f}));

TEST(Forward, ChunkedPrefillIsBitwiseIdenticalToOneShotAndTokenByToken) {
    TinyModelSpec spec;
    spec.weight_type = TensorType::Q4_1;
    spec.embd_type = TensorType::Q8_0;
    Harness h(spec);
    std::vector<int32_t> tokens = some_tokens(37);
    std::vector<std::vector<float>> results;
    std::vector<SessionKv> kvs(4);
    const uint32_t chunks[] = {37, 1, 5, 16};
    for (size_t c = 0; c < 4; ++c) results.push_back(h.run_chunked(kvs[c], tokens, chunks[c]));
    for (size_t c = 1; c < 4; ++c) {
        ASSERT_EQ(results[c].size(), results[0].size());
        EXPECT_EQ(
            0, std::memcmp(results[c].data(), results[0].data(), results[0].size() * sizeof(float)))
            << "chunk size " << chunks[c];
        // The sealed blocks hold the same bytes too.
        ASSERT_EQ(kvs[c].blocks.size(), 37u / 4);
        for (size_t b = 0; b < kvs[c].blocks.size(); ++b) {
            EXPECT_EQ(0, std::memcmp(h.cache->sealed_data(kvs[c].blocks[b]),
                                     h.cache->sealed_data(kvs[0].blocks[b]),
                                     h.cache->geometry().sealed_block_bytes()));
        }
    }
    for (auto &kv : kvs) h.cache->release(kv);
}

TEST(Forward, BatchedSpansAreBitwiseIdenticalToSoloRuns) {
    TinyModelSpec spec;
    spec.weight_type = TensorType::Q4_0;
    spec.embd_type = TensorType::Q8_0;
    Harness h(spec);
    std::vector<std::vector<int32_t>> prompts = {some_tokens(9, 1), some_tokens(1, 2),
                                                 some_tokens(23, 3)};
    std::vector<std::vector<float>> solo;
    for (auto &p : prompts) {
        SessionKv kv;
        solo.push_back(h.run_chunked(kv, p, 64));
        h.cache->release(kv);
    }
    std::vector<SessionKv> kvs(3);
    std::vector<ForwardSpan> spans;
    for (size_t i = 0; i < 3; ++i) {
        ASSERT_TRUE(h.cache->reserve(kvs[i], uint32_t(prompts[i].size())));
        spans.push_back({&kvs[i], prompts[i].data(), uint32_t(prompts[i].size()), true});
    }
    std::vector<float> batched;
    h.forward->run(spans, batched);
    const size_t V = testing::TinyVocab::kSize;
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(0, std::memcmp(batched.data() + i * V, solo[i].data(), V * sizeof(float)))
            << "span " << i;
    }
    for (auto &kv : kvs) h.cache->release(kv);
}

TEST(Forward, ThreadCountDoesNotChangeResults) {
    TinyModelSpec spec;
    spec.weight_type = TensorType::Q4_1;
    spec.embd_type = TensorType::Q8_0;
    std::vector<int32_t> tokens = some_tokens(19);
    std::vector<std::vector<float>> results;
    for (unsigned threads : {1u, 2u, 3u}) {
        Harness h(spec, threads);
        SessionKv kv;
        results.push_back(h.run_chunked(kv, tokens, 7));
        h.cache->release(kv);
    }
    EXPECT_EQ(0,
              std::memcmp(results[1].data(), results[0].data(), results[0].size() * sizeof(float)));
    EXPECT_EQ(0,
              std::memcmp(results[2].data(), results[0].data(), results[0].size() * sizeof(float)));
}

TEST(Forward, BlockCountsAreExact) {
    TinyModelSpec spec;
    Harness h(spec, 1, 4);
    SessionKv kv;
    std::vector<int32_t> tokens = some_tokens(15);
    h.run_chunked(kv, tokens, 6);
    EXPECT_EQ(kv.n_tokens, 15u);
    EXPECT_EQ(kv.blocks.size(), 3u);
    EXPECT_EQ(h.cache->sealed_pool().n_used(), 3u);
    EXPECT_EQ(h.cache->tail_pool().n_used(), 1u);
    h.cache->release(kv);
    EXPECT_EQ(h.cache->sealed_pool().n_used(), 0u);
}

TEST(Forward, Bf16SealedBlocksStayCloseToF16) {
    TinyModelSpec spec;
    std::vector<int32_t> tokens = some_tokens(21);
    Harness a(spec, 2, 4, LLMKV_KV_F16);
    Harness b(spec, 2, 4, LLMKV_KV_BF16);
    SessionKv ka, kb;
    std::vector<float> la = a.run_chunked(ka, tokens, 21);
    std::vector<float> lb = b.run_chunked(kb, tokens, 21);
    double max_ref = 0, max_err = 0;
    for (size_t i = 0; i < la.size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(double(la[i])));
        max_err = std::max(max_err, std::fabs(double(la[i]) - lb[i]));
    }
    EXPECT_GT(max_err, 0.0) << "bf16 blocks must actually be bf16";
    EXPECT_LE(max_err, 0.02 * max_ref);
    a.cache->release(ka);
    b.cache->release(kb);
}

TEST(Forward, ResidualWindowDelaysSealingAndKeepsChunkingInvariance) {
    TinyModelSpec spec;
    spec.weight_type = TensorType::Q8_0;
    spec.embd_type = TensorType::Q8_0;
    std::vector<int32_t> tokens = some_tokens(29);
    // bf16 sealed blocks, so sealing changes the numbers and the window rule is visible.
    Harness with(spec, 2, 4, LLMKV_KV_BF16, 6);
    std::vector<std::vector<float>> results;
    std::vector<SessionKv> kvs(3);
    const uint32_t chunks[] = {29, 1, 5};
    for (size_t c = 0; c < 3; ++c) results.push_back(with.run_chunked(kvs[c], tokens, chunks[c]));
    for (size_t c = 1; c < 3; ++c) {
        EXPECT_EQ(
            0, std::memcmp(results[c].data(), results[0].data(), results[0].size() * sizeof(float)))
            << "chunk size " << chunks[c];
    }
    // 29 tokens, 6 residual: (29 - 6) / 4 = 5 sealed blocks; positions 20..28 stay fp16.
    EXPECT_EQ(kvs[0].blocks.size(), 5u);
    EXPECT_EQ(with.cache->geometry().tail_capacity(), 10u);
    // With no residual window, 7 blocks are sealed and the logits differ (bf16 vs fp16 rows).
    Harness without(spec, 2, 4, LLMKV_KV_BF16, 0);
    SessionKv kv;
    std::vector<float> plain = without.run_chunked(kv, tokens, 29);
    EXPECT_EQ(kv.blocks.size(), 7u);
    EXPECT_NE(0, std::memcmp(plain.data(), results[0].data(), plain.size() * sizeof(float)));
    for (auto &k : kvs) with.cache->release(k);
    without.cache->release(kv);
}

TEST(Forward, RejectsTokenIdsOutsideTheVocabularyBeforeWritingKv) {
    TinyModelSpec spec;
    Harness h(spec);
    SessionKv kv;
    std::vector<int32_t> tokens = {1, 2, testing::TinyVocab::kSize};
    ASSERT_TRUE(h.cache->reserve(kv, 3));
    std::vector<float> out;
    EXPECT_THROW(h.forward->run({{&kv, tokens.data(), 3, true}}, out), Error);
    EXPECT_EQ(kv.n_tokens, 0u);
    h.cache->release(kv);
}

}  // namespace
}  // namespace llmkv

namespace llmkv {
namespace {

struct CodecPairCase {
    llmkv_kv_dtype k, v;
    bool rotate;
    uint32_t residual;
};

class ForwardCodecs : public ::testing::TestWithParam<CodecPairCase> {};

// Sealed blocks are quantized layer by layer inside the pass that completes them, and a
// query reads exactly the blocks sealed before its own position: so every codec gives the
// same bits whatever the chunking and batching.
TEST_P(ForwardCodecs, ChunkingAndBatchingAreBitwiseInvariantForQuantizedBlocks) {
    const CodecPairCase pc = GetParam();
    TinyModelSpec spec;
    spec.weight_type = TensorType::Q4_1;
    spec.embd_type = TensorType::Q8_0;
    spec.n_embd = 128;
    spec.n_heads = 2;
    spec.n_kv_heads = 1;  // head_dim 64: every codec, rotation included
    std::vector<int32_t> tokens = some_tokens(41);
    Harness h(spec, 2, 16, pc.k, pc.residual, [&](KvGeometry &g) {
        g.dtype_v = pc.v;
        g.rotate_k = pc.rotate;
        g.rotate_v = pc.rotate;
    });
    std::vector<std::vector<float>> results;
    std::vector<SessionKv> kvs(3);
    const uint32_t chunks[] = {41, 1, 7};
    for (size_t c = 0; c < 3; ++c) results.push_back(h.run_chunked(kvs[c], tokens, chunks[c]));
    for (size_t c = 1; c < 3; ++c) {
        EXPECT_EQ(
            0, std::memcmp(results[c].data(), results[0].data(), results[0].size() * sizeof(float)))
            << "chunk size " << chunks[c];
    }
    // Batched with another session's span: same bits.
    SessionKv a, b;
    std::vector<int32_t> other = some_tokens(23, 9);
    ASSERT_TRUE(h.cache->reserve(a, 41));
    ASSERT_TRUE(h.cache->reserve(b, 23));
    std::vector<float> batched;
    h.forward->run({{&b, other.data(), 23, true}, {&a, tokens.data(), 41, true}}, batched);
    EXPECT_EQ(0, std::memcmp(batched.data() + testing::TinyVocab::kSize, results[0].data(),
                             results[0].size() * sizeof(float)));
    for (auto &kv : kvs) h.cache->release(kv);
    h.cache->release(a);
    h.cache->release(b);
}

INSTANTIATE_TEST_SUITE_P(
    AllCodecPairs, ForwardCodecs,
    ::testing::Values(CodecPairCase{LLMKV_KV_F16, LLMKV_KV_F16, false, 0},
                      CodecPairCase{LLMKV_KV_FP8_E4M3, LLMKV_KV_FP8_E4M3, false, 0},
                      CodecPairCase{LLMKV_KV_INT8, LLMKV_KV_INT8, false, 0},
                      CodecPairCase{LLMKV_KV_INT8, LLMKV_KV_INT8, true, 5},
                      CodecPairCase{LLMKV_KV_INT8, LLMKV_KV_INT4, false, 0},
                      CodecPairCase{LLMKV_KV_INT4, LLMKV_KV_INT4, true, 0},
                      CodecPairCase{LLMKV_KV_INT4, LLMKV_KV_INT4, false, 20},
                      CodecPairCase{LLMKV_KV_INT4_COMPACT, LLMKV_KV_INT4_COMPACT, true, 0},
                      CodecPairCase{LLMKV_KV_INT8, LLMKV_KV_INT4_COMPACT, false, 20}));

}  // namespace
}  // namespace llmkv
