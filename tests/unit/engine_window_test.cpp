// Sliding-window layers end to end (a tiny Gemma 3 layout, window 12, 4-token blocks): the
// engine releases the local layers' blocks once outside the window and produces bitwise the
// tokens of an engine that keeps every block (LLMKV_ENGINE_KEEP_WINDOW_BLOCKS), through
// chunked prefill, batching, the prefix cache, prefix handles and their snapshots, and
// preemption to the host tier; and holds exactly the blocks the window needs.
// The same source runs on the CUDA backend (tests/gpu/engine_cuda_window_test.cpp defines
// LLMKV_WINDOW_TEST_CUDA): suite EngineWindowCuda, in batch-invariant mode, skipped without a
// device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "host_tier_skip.h"
#include "llmkv.h"
#include "session_helpers.h"
#include "tiny_model.h"

#if defined(LLMKV_WINDOW_TEST_CUDA)
#include "../gpu/gpu_test_util.h"
#define EngineWindowTest EngineWindowCuda
#endif

namespace llmkv {
namespace {

#if defined(LLMKV_WINDOW_TEST_CUDA)
constexpr llmkv_backend kBackend = LLMKV_BACKEND_CUDA;
#else
constexpr llmkv_backend kBackend = LLMKV_BACKEND_CPU;
#endif

using testing::byte_tokens;
using testing::stats;
using testing::TinyModelSpec;
using testing::tokens_of;

constexpr uint32_t kWindow = 12, kBlock = 4;

class EngineWindowTest : public ::testing::Test {
protected:
#if defined(LLMKV_WINDOW_TEST_CUDA)
    // Batched, chunked and recomputed sessions give the tokens of each alone only when a
    // row's arithmetic does not depend on the batch.
    void SetUp() override {
        LLMKV_REQUIRE_DEVICE();
        setenv("LLMKV_CUDA_BATCH_INVARIANT", "1", 1);
    }
    void TearDown() override {
        unsetenv("LLMKV_CUDA_BATCH_INVARIANT");
    }
#endif
    static void SetUpTestSuite() {
        TinyModelSpec spec;
        spec.arch = "gemma3";
        spec.n_layers = 6;  // pattern 3: layers 2 and 5 global, the other four local
        spec.n_heads = 4;
        spec.n_kv_heads = 1;
        spec.n_ctx = 512;
        spec.sliding_window = kWindow;
        spec.window_pattern = 3;
        spec.weight_type = TensorType::Q8_0;
        spec.embd_type = TensorType::Q8_0;
        // A small embedding, so that tokens follow what the local layers read: a local layer
        // reading another group's blocks changes them (with 1.0 it did not).
        spec.embd_scale = 0.05f;
        path_ = new std::string(testing::temp_path(
            kBackend == LLMKV_BACKEND_CUDA ? "engine_window_cuda.gguf" : "engine_window.gguf"));
        testing::write_tiny_model(spec, *path_);
    }
    static void TearDownTestSuite() {
        std::remove(path_->c_str());
        delete path_;
    }

    static llmkv_engine *make(uint32_t flags, uint32_t max_batch_tokens = 0, uint64_t kv_bytes = 0,
                              uint64_t host_bytes = 0, uint32_t max_sessions = 0) {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path_->c_str();
        p.backend = kBackend;
        p.n_threads = 2;
        p.kv_block_tokens = kBlock;
        p.max_batch_tokens = max_batch_tokens;
        p.kv_device_bytes = kv_bytes;
        p.kv_host_bytes = host_bytes;
        p.max_sessions = max_sessions;
        p.flags = flags;
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        return e;
    }

    static llmkv_session_params greedy(llmkv_prefix *prefix = nullptr) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = 0;
        sp.prefix = prefix;
        return sp;
    }

    // Appends prompt, generates n and returns the whole context.
    static std::vector<int32_t> run(llmkv_engine *e, const std::vector<int32_t> &prompt, uint32_t n,
                                    llmkv_prefix *prefix = nullptr) {
        llmkv_session_params sp = greedy(prefix);
        llmkv_session *s = nullptr;
        EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK) << llmkv_last_error();
        EXPECT_EQ(llmkv_session_append(s, prompt.data(), prompt.size()), LLMKV_OK);
        EXPECT_EQ(llmkv_session_generate(s, n), LLMKV_OK);
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
        std::vector<int32_t> t = tokens_of(s);
        llmkv_session_destroy(s);
        return t;
    }

    static llmkv_engine_info info(llmkv_engine *e) {
        llmkv_engine_info i;
        i.struct_size = sizeof(i);
        EXPECT_EQ(llmkv_engine_get_info(e, &i), LLMKV_OK);
        return i;
    }

    // Blocks one session of n computed tokens holds with the release: its sealed blocks plus
    // two local groups' blocks for each token block a later query still sees.
    static uint32_t held(uint32_t n) {
        const uint32_t sealed = n / kBlock,
                       live_from = n + 1 > kWindow ? (n + 1 - kWindow) / kBlock : 0;
        return sealed + 2 * (sealed > live_from ? sealed - live_from : 0);
    }

    static std::string *path_;
};
std::string *EngineWindowTest::path_ = nullptr;

TEST_F(EngineWindowTest, ReleasingWindowBlocksChangesNoTokenAndHoldsExactlyTheWindow) {
    llmkv_engine *released = make(0, /*max_batch_tokens=*/8);
    llmkv_engine *kept = make(LLMKV_ENGINE_KEEP_WINDOW_BLOCKS, 8);
    const llmkv_engine_info ir = info(released), ik = info(kept);
    EXPECT_EQ(ir.kv_window, kWindow);
    EXPECT_EQ(ik.kv_window, kWindow);
    EXPECT_EQ(ir.kv_layer_groups, 3u);  // {2, 5}, {0, 1}, {3, 4}
    EXPECT_EQ(ik.kv_layer_groups, 1u);
    EXPECT_EQ(ir.kv_bytes_per_token_device, ik.kv_bytes_per_token_device);
    EXPECT_EQ(ir.kv_bytes_per_token_global * 3, ir.kv_bytes_per_token_device);

    const std::vector<int32_t> prompt = byte_tokens(37, 1);
    const std::vector<int32_t> a = run(released, prompt, 70), b = run(kept, prompt, 70);
    EXPECT_EQ(a, b);
    ASSERT_EQ(a.size(), prompt.size() + 70);

    // A live session: exactly its window's blocks besides the global layers' ones.
    llmkv_session_params sp = greedy();
    llmkv_session *s = nullptr;
    ASSERT_EQ(llmkv_session_create(released, &sp, &s), LLMKV_OK);
    ASSERT_EQ(llmkv_session_append(s, prompt.data(), prompt.size()), LLMKV_OK);
    for (uint32_t round = 0; round < 6; ++round) {
        ASSERT_EQ(llmkv_session_generate(s, 5 + round), LLMKV_OK);
        ASSERT_EQ(llmkv_run(released, nullptr, nullptr), LLMKV_OK);
        const llmkv_stats st = stats(released);
        EXPECT_EQ(st.blocks_used, held(uint32_t(st.tokens_stored))) << st.tokens_stored;
        EXPECT_EQ(st.kv_bytes_used,
                  uint64_t(st.blocks_used) * ir.kv_bytes_per_token_global * kBlock +
                      uint64_t(st.tail_blocks_used) * ir.kv_bytes_per_token_tail * (kBlock + 0));
    }
    llmkv_session_destroy(s);
    llmkv_engine_destroy(released);
    llmkv_engine_destroy(kept);
}

TEST_F(EngineWindowTest, BatchedSessionsAndThePrefixCacheGiveTheSoloTokens) {
    llmkv_engine *kept = make(LLMKV_ENGINE_KEEP_WINDOW_BLOCKS);
    llmkv_engine *cached = make(LLMKV_ENGINE_PREFIX_CACHE, /*max_batch_tokens=*/16);
    const std::vector<int32_t> shared = byte_tokens(45, 2);
    std::vector<std::vector<int32_t>> prompts, expect;
    for (uint32_t i = 0; i < 4; ++i) {
        std::vector<int32_t> p = shared;
        const std::vector<int32_t> tail = byte_tokens(3 + 5 * i, 10 + i);
        p.insert(p.end(), tail.begin(), tail.end());
        prompts.push_back(p);
        expect.push_back(run(kept, p, 30));
    }
    // One after the other: the later ones match the shared prefix (with its window's local
    // blocks) in the cache.
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(run(cached, prompts[i], 30), expect[i]) << i;
    EXPECT_GT(stats(cached).prefix_hit_tokens, 0u);
    // All at once, in one batch.
    std::vector<llmkv_session *> ss(4);
    llmkv_session_params sp = greedy();
    for (uint32_t i = 0; i < 4; ++i) {
        ASSERT_EQ(llmkv_session_create(cached, &sp, &ss[i]), LLMKV_OK);
        ASSERT_EQ(llmkv_session_append(ss[i], prompts[i].data(), prompts[i].size()), LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(ss[i], 30), LLMKV_OK);
    }
    ASSERT_EQ(llmkv_run(cached, nullptr, nullptr), LLMKV_OK);
    for (uint32_t i = 0; i < 4; ++i) {
        EXPECT_EQ(tokens_of(ss[i]), expect[i]) << i;
        llmkv_session_destroy(ss[i]);
    }
    llmkv_engine_destroy(cached);
    llmkv_engine_destroy(kept);
}

TEST_F(EngineWindowTest, PrefixHandlesAndTheirSnapshotsContinueExactly) {
    llmkv_engine *kept = make(LLMKV_ENGINE_KEEP_WINDOW_BLOCKS);
    llmkv_engine *e = make(LLMKV_ENGINE_PREFIX_CACHE);
    const std::vector<int32_t> system = byte_tokens(41, 3), question = byte_tokens(9, 4);
    std::vector<int32_t> full = system;
    full.insert(full.end(), question.begin(), question.end());
    const std::vector<int32_t> expect = run(kept, full, 25);

    llmkv_prefix *prefix = nullptr;
    ASSERT_EQ(llmkv_prefix_create(e, system.data(), system.size(), &prefix), LLMKV_OK)
        << llmkv_last_error();
    EXPECT_EQ(run(e, question, 25, prefix), expect);
    const std::string snap = testing::temp_path(
        kBackend == LLMKV_BACKEND_CUDA ? "engine_window_cuda.snap" : "engine_window.snap");
    ASSERT_EQ(llmkv_prefix_save(prefix, snap.c_str()), LLMKV_OK) << llmkv_last_error();
    llmkv_prefix_release(prefix);

    llmkv_engine *fresh = make(0);
    llmkv_prefix *loaded = nullptr;
    ASSERT_EQ(llmkv_prefix_load(fresh, snap.c_str(), &loaded), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(run(fresh, question, 25, loaded), expect);
    llmkv_prefix_release(loaded);

    // An engine that keeps every block has another layout: it refuses the snapshot.
    llmkv_prefix *refused = nullptr;
    EXPECT_NE(llmkv_prefix_load(kept, snap.c_str(), &refused), LLMKV_OK);
    EXPECT_EQ(refused, nullptr);
    std::remove(snap.c_str());
    llmkv_engine_destroy(fresh);
    llmkv_engine_destroy(e);
    llmkv_engine_destroy(kept);
}

TEST_F(EngineWindowTest, PreemptionToTheHostTierUnderAFullPoolGivesTheSoloTokens) {
    SKIP_WITHOUT_MIMALLOC();
    llmkv_engine *kept = make(LLMKV_ENGINE_KEEP_WINDOW_BLOCKS);
    std::vector<std::vector<int32_t>> prompts, expect;
    for (uint32_t i = 0; i < 6; ++i) {
        prompts.push_back(byte_tokens(20 + 7 * i, 30 + i));
        expect.push_back(run(kept, prompts[i], 40));
    }
    // A pool of 40 blocks for six sessions of up to 100 tokens: they cannot all stay.
    const uint64_t block_bytes = info(kept).kv_bytes_per_token_device / 3 * kBlock;
    llmkv_engine *tight =
        make(0, /*max_batch_tokens=*/16, 40 * block_bytes, /*host_bytes=*/4u << 20);
    std::vector<llmkv_session *> ss(6);
    llmkv_session_params sp = greedy();
    for (uint32_t i = 0; i < 6; ++i) {
        ASSERT_EQ(llmkv_session_create(tight, &sp, &ss[i]), LLMKV_OK);
        ASSERT_EQ(llmkv_session_append(ss[i], prompts[i].data(), prompts[i].size()), LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(ss[i], 40), LLMKV_OK);
    }
    ASSERT_EQ(llmkv_run(tight, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
    for (uint32_t i = 0; i < 6; ++i) {
        EXPECT_EQ(tokens_of(ss[i]), expect[i]) << i;
        llmkv_session_destroy(ss[i]);
    }
    const llmkv_stats st = stats(tight);
    EXPECT_GT(st.preemptions + st.parks, 0u) << "the pool was never full";
    llmkv_engine_destroy(tight);
    llmkv_engine_destroy(kept);
}

}  // namespace
}  // namespace llmkv
