// The engine through the C API on tiny synthetic models: scheduling across sessions,
// chunked prefill, sampling reproducibility, stop conditions, KV exhaustion, and the pool
// invariants after random operation sequences.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "kv/snapshot.h"
#include "llmkv.h"
#include "session_helpers.h"
#include "tiny_model.h"

// engine_moe_test.cpp and engine_gptoss_test.cpp include this file with one of these set.
#ifndef LLMKV_ENGINE_TEST_MOE
#define LLMKV_ENGINE_TEST_MOE 0
#endif
#ifndef LLMKV_ENGINE_TEST_GPTOSS
#define LLMKV_ENGINE_TEST_GPTOSS 0
#endif

namespace llmkv {
namespace {
// The model's KV sizes: 2 layers x 2 KV heads x head_dim 16 (the tiny models) or 32
// (gpt-oss, whose two layers are two layer groups: a pool block holds one layer's K and V,
// and a token block takes one of each group's).
#if LLMKV_ENGINE_TEST_GPTOSS
constexpr uint32_t kRowBytes = 512;            // one position's fp16 K and V, every layer
constexpr uint32_t kInt4cBytesPerToken = 192;  // sealed int4c, every layer
constexpr uint32_t kGroups = 2;
#else
constexpr uint32_t kRowBytes = 256;
constexpr uint32_t kInt4cBytesPerToken = 104;
constexpr uint32_t kGroups = 1;
#endif
// Bytes of one pool block of 4 tokens: f16 (1 KiB in both) and int4c.
constexpr uint32_t kF16PoolBlock = kRowBytes * 4 / kGroups;
constexpr uint32_t kInt4cPoolBlock = kInt4cBytesPerToken * 4 / kGroups;
}  // namespace
}  // namespace llmkv

namespace llmkv {
namespace {

using testing::byte_tokens;
using testing::stats;
using testing::tokens_of;

using testing::TinyModelSpec;
using testing::TinyVocab;

class EngineTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
#if LLMKV_ENGINE_TEST_GPTOSS
        path_ = new std::string(LLMKV_TEST_FIXTURES_DIR "/arch/gptoss.gguf");
        return;
#endif
        TinyModelSpec spec;
        spec.weight_type = TensorType::Q4_1;
        spec.embd_type = TensorType::Q8_0;
        spec.n_ctx = 128;
#if LLMKV_ENGINE_TEST_MOE
        // A Qwen3-MoE-style model: 8 experts of 32 columns, 2 per token (Q4_1, packed).
        spec.arch = "qwen3moe";
        spec.n_expert = 8;
        spec.n_ff_expert = 32;
        spec.router_scale = 2.0f;
        spec.embd_scale = 0.05f;  // the layers outweigh the embedding (tokens depend on the KV)
        path_ = new std::string(testing::temp_path("engine_tiny_moe.gguf"));
#else
        path_ = new std::string(testing::temp_path("engine_tiny.gguf"));
#endif
        testing::write_tiny_model(spec, *path_);
    }
    static void TearDownTestSuite() {
        if (!LLMKV_ENGINE_TEST_GPTOSS) std::remove(path_->c_str());  // (a fixture: kept)
        delete path_;
    }

    llmkv_engine *make_engine(uint32_t max_batch_tokens = 0, uint64_t kv_bytes = 0,
                              uint32_t threads = 2, uint32_t max_context = 0,
                              uint32_t flags = LLMKV_ENGINE_PREFIX_CACHE) {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path_->c_str();
        p.backend = LLMKV_BACKEND_CPU;
        p.n_threads = threads;
        p.kv_block_tokens = 4;
        p.max_batch_tokens = max_batch_tokens;
        p.kv_device_bytes = kv_bytes;
        p.max_context = max_context;
        p.flags = flags;
        p.kv_dtype_k = p.kv_dtype_v = kv_dtype_;
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        return e;
    }
    llmkv_kv_dtype kv_dtype_ = LLMKV_KV_F16;  // make_engine's K and V codec

    static llmkv_session_params sampling_params(float temperature, uint64_t seed) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = temperature;
        sp.sampling.top_k = 40;
        sp.sampling.top_p = 0.95f;
        sp.sampling.seed = seed;
        return sp;
    }

    static std::string *path_;
};
std::string *EngineTest::path_ = nullptr;

// Runs one session alone and returns its context after generating n tokens.
std::vector<int32_t> solo_run(llmkv_engine *e, const llmkv_session_params &sp,
                              const std::vector<int32_t> &p, uint32_t n) {
    llmkv_session *s = nullptr;
    EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
    EXPECT_EQ(llmkv_session_append(s, p.data(), p.size()), LLMKV_OK);
    EXPECT_EQ(llmkv_session_generate(s, n), LLMKV_OK);
    EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    std::vector<int32_t> t(p.size() + n + 1);
    size_t count = 0;
    llmkv_session_get_tokens(s, t.data(), t.size(), &count);
    t.resize(count);
    llmkv_session_destroy(s);
    return t;
}

TEST_F(EngineTest, SessionsInOneBatchProduceTheirSoloTokensBitwise) {
    llmkv_engine *e = make_engine(64);
    const int kSessions = 6;
    std::vector<std::vector<int32_t>> prompts, solo;
    std::vector<llmkv_session_params> params;
    for (int i = 0; i < kSessions; ++i) {
        prompts.push_back(byte_tokens(3 + 11 * i, 100 + i));
        params.push_back(sampling_params(i % 2 ? 0.8f : 0.0f, 1000 + i));
        solo.push_back(solo_run(e, params.back(), prompts.back(), 12));
    }
    llmkv_stats st;
    st.struct_size = sizeof(st);
    ASSERT_EQ(llmkv_engine_get_stats(e, &st), LLMKV_OK);
    const uint64_t steps_before = st.steps;
    std::vector<llmkv_session *> sessions(kSessions);
    for (int i = 0; i < kSessions; ++i) {
        ASSERT_EQ(llmkv_session_create(e, &params[i], &sessions[i]), LLMKV_OK);
        ASSERT_EQ(llmkv_session_append(sessions[i], prompts[i].data(), prompts[i].size()),
                  LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(sessions[i], 12), LLMKV_OK);
    }
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    for (int i = 0; i < kSessions; ++i)
        EXPECT_EQ(tokens_of(sessions[i]), solo[i]) << "session " << i;
    ASSERT_EQ(llmkv_engine_get_stats(e, &st), LLMKV_OK);
    // 12 decode steps after a prefill that fits the 64-token budget in about two steps.
    EXPECT_LE(st.steps - steps_before, 16u) << "sessions should share steps";
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    for (auto *s : sessions) llmkv_session_destroy(s);
    ASSERT_EQ(llmkv_engine_get_stats(e, &st), LLMKV_OK);
    EXPECT_EQ(st.blocks_free + st.blocks_cached, st.blocks_total);
    EXPECT_EQ(st.blocks_used, 0u);
    EXPECT_EQ(st.tail_blocks_used, 0u);
    llmkv_engine_destroy(e);
}

TEST_F(EngineTest, TokenBudgetChunkingDoesNotChangeTokens) {
    std::vector<int32_t> p = byte_tokens(45, 7);
    llmkv_session_params sp = sampling_params(0.7f, 99);
    std::vector<std::vector<int32_t>> results;
    for (uint32_t budget : {512u, 1u, 5u, 16u}) {
        llmkv_engine *e = make_engine(budget);
        results.push_back(solo_run(e, sp, p, 10));
        llmkv_engine_destroy(e);
    }
    for (size_t i = 1; i < results.size(); ++i)
        EXPECT_EQ(results[i], results[0]) << "budget case " << i;
}

TEST_F(EngineTest, ThreadCountDoesNotChangeTokens) {
    std::vector<int32_t> p = byte_tokens(20, 8);
    llmkv_session_params sp = sampling_params(0.9f, 5);
    std::vector<std::vector<int32_t>> results;
    for (uint32_t threads : {1u, 2u, 4u}) {
        llmkv_engine *e = make_engine(0, 0, threads);
        results.push_back(solo_run(e, sp, p, 10));
        llmkv_engine_destroy(e);
    }
    EXPECT_EQ(results[1], results[0]);
    EXPECT_EQ(results[2], results[0]);
}

TEST_F(EngineTest, SeededSamplingIsReproducibleAndSeedsDiffer) {
    llmkv_engine *e = make_engine();
    std::vector<int32_t> p = byte_tokens(10, 3);
    // A high temperature without truncation: the random tiny model is otherwise too peaked
    // for two seeds to differ.
    auto params = [](uint64_t seed) {
        llmkv_session_params sp = sampling_params(4.0f, seed);
        sp.sampling.top_k = 0;
        sp.sampling.top_p = 1.0f;
        return sp;
    };
    auto a = solo_run(e, params(42), p, 24);
    auto b = solo_run(e, params(42), p, 24);
    auto c = solo_run(e, params(43), p, 24);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    llmkv_engine_destroy(e);
}

TEST_F(EngineTest, StopTokenEndsGenerationWithStopAndIsNotReportedAsAToken) {
    llmkv_engine *e = make_engine();
    std::vector<int32_t> p = byte_tokens(8, 4);
    llmkv_session_params greedy = sampling_params(0.0f, 0);
    auto free_run = solo_run(e, greedy, p, 6);
    ASSERT_EQ(free_run.size(), p.size() + 6);
    int32_t third = free_run[p.size() + 2];
    llmkv_session_params sp = greedy;
    sp.stop_tokens = &third;
    sp.n_stop_tokens = 1;
    llmkv_session *s = nullptr;
    ASSERT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
    ASSERT_EQ(llmkv_session_append(s, p.data(), p.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(s, 6), LLMKV_OK);
    std::vector<llmkv_event> events;
    for (;;) {
        llmkv_event ev[8];
        size_t n = 0;
        ASSERT_EQ(llmkv_step(e, ev, 8, &n), LLMKV_OK);
        events.insert(events.end(), ev, ev + n);
        if (n == 0) break;
    }
    int tokens = 0;
    for (auto &ev : events) tokens += ev.kind == LLMKV_EVENT_TOKEN;
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().kind, uint32_t(LLMKV_EVENT_DONE));
    EXPECT_EQ(events.back().finish_reason, uint32_t(LLMKV_FINISH_STOP));
    // The first two generated tokens are reported; the stop token ends it (unless the
    // stop token also appeared earlier, in which case generation ends there).
    EXPECT_LE(tokens, 2);
    llmkv_session_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_session_get_info(s, &info), LLMKV_OK);
    EXPECT_EQ(info.state, uint32_t(LLMKV_SESSION_FINISHED));
    EXPECT_EQ(info.finish_reason, uint32_t(LLMKV_FINISH_STOP));
    llmkv_session_destroy(s);
    llmkv_engine_destroy(e);
}

TEST_F(EngineTest, GenerationStopsAtTheContextLimit) {
    llmkv_engine *e = make_engine(0, 0, 2, 20);
    llmkv_session_params sp = sampling_params(0.0f, 0);
    llmkv_session *s = nullptr;
    ASSERT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
    std::vector<int32_t> p = byte_tokens(15, 5);
    ASSERT_EQ(llmkv_session_append(s, p.data(), p.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(s, 100), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    llmkv_session_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_session_get_info(s, &info), LLMKV_OK);
    EXPECT_EQ(info.finish_reason, uint32_t(LLMKV_FINISH_CONTEXT));
    EXPECT_EQ(info.n_tokens, 20u);
    EXPECT_EQ(llmkv_session_generate(s, 1), LLMKV_ERR_KV_CAPACITY);
    int32_t one = 1;
    EXPECT_EQ(llmkv_session_append(s, &one, 1), LLMKV_ERR_KV_CAPACITY);
    llmkv_session_destroy(s);
    llmkv_engine_destroy(e);
}

TEST_F(EngineTest, ExhaustedPoolGivesKvCapacityErrorAndKeepsComputedTokens) {
    // Tiny model: 2 layers x 2 kv heads x 16 dims x 4 tokens x 2 bytes x 2 (K,V) = 1 KiB per block.
    // (gpt-oss: each token block takes one pool block of each of its 2 layer groups.)
    llmkv_engine *e = make_engine(0, 3 * kGroups * kF16PoolBlock);
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
    ASSERT_EQ(info.kv_blocks_total, 3u * kGroups);
    llmkv_session_params sp = sampling_params(0.0f, 0);
    llmkv_session *s = nullptr;
    ASSERT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
    std::vector<int32_t> p = byte_tokens(10, 6);
    ASSERT_EQ(llmkv_session_append(s, p.data(), p.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(s, 20), LLMKV_OK);
    std::vector<llmkv_event> events;
    for (int guard = 0; guard < 100; ++guard) {
        llmkv_event ev[4];
        size_t n = 0;
        ASSERT_EQ(llmkv_step(e, ev, 4, &n), LLMKV_OK);
        events.insert(events.end(), ev, ev + n);
        if (n == 0) break;
    }
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().kind, uint32_t(LLMKV_EVENT_ERROR));
    EXPECT_EQ(events.back().status, LLMKV_ERR_KV_CAPACITY);
    llmkv_session_info si;
    si.struct_size = sizeof(si);
    ASSERT_EQ(llmkv_session_get_info(s, &si), LLMKV_OK);
    // 3 sealed blocks of 4 tokens hold 12 positions and the session's tail slot 3 more;
    // the 16th position would need a 4th sealed block.
    EXPECT_EQ(si.n_cached, 15u);
    EXPECT_EQ(si.n_tokens, 16u) << "the last generated token is kept (its KV is not computed)";
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_session_destroy(s);
    llmkv_stats st;
    st.struct_size = sizeof(st);
    ASSERT_EQ(llmkv_engine_get_stats(e, &st), LLMKV_OK);
    EXPECT_EQ(st.blocks_free + st.blocks_cached, 3u * kGroups);
    EXPECT_EQ(st.blocks_used, 0u);
    llmkv_engine_destroy(e);
}

TEST_F(EngineTest, RandomOperationSequencesKeepThePoolInvariants) {
    llmkv_engine *e = make_engine(24, 64 * 1024);
    std::mt19937 rng(2024);
    std::vector<llmkv_session *> live;
    for (int op = 0; op < 400; ++op) {
        switch (rng() % 6) {
            case 0:
                if (live.size() < 12) {
                    llmkv_session_params sp = sampling_params(float(rng() % 2), rng());
                    llmkv_session *s = nullptr;
                    ASSERT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
                    live.push_back(s);
                }
                break;
            case 1:
                if (!live.empty()) {
                    auto p = byte_tokens(1 + rng() % 20, rng());
                    llmkv_status st =
                        llmkv_session_append(live[rng() % live.size()], p.data(), p.size());
                    EXPECT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_STATE ||
                                st == LLMKV_ERR_KV_CAPACITY)
                        << st;
                }
                break;
            case 2:
                if (!live.empty()) {
                    llmkv_status st =
                        llmkv_session_generate(live[rng() % live.size()], 1 + rng() % 8);
                    EXPECT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_STATE ||
                                st == LLMKV_ERR_KV_CAPACITY)
                        << st;
                }
                break;
            case 3:
                if (!live.empty()) {
                    llmkv_status st = llmkv_session_cancel(live[rng() % live.size()]);
                    EXPECT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_STATE) << st;
                }
                break;
            case 4:
                if (!live.empty()) {
                    size_t i = rng() % live.size();
                    llmkv_session_destroy(live[i]);
                    live.erase(live.begin() + long(i));
                }
                break;
            default: {
                llmkv_event ev[3];
                size_t n = 0;
                ASSERT_EQ(llmkv_step(e, ev, rng() % 4, &n), LLMKV_OK);
                break;
            }
        }
        ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK)
            << "after op " << op << ": " << llmkv_last_error();
    }
    for (auto *s : live) llmkv_session_destroy(s);
    llmkv_stats st;
    st.struct_size = sizeof(st);
    ASSERT_EQ(llmkv_engine_get_stats(e, &st), LLMKV_OK);
    EXPECT_EQ(st.blocks_free + st.blocks_cached, st.blocks_total);
    EXPECT_EQ(st.blocks_used, 0u);
    EXPECT_EQ(st.tail_blocks_used, 0u);
    EXPECT_EQ(llmkv_pending_events(e), 0u);
    llmkv_engine_destroy(e);
}

llmkv_stats stats_of(llmkv_engine *e) {
    llmkv_stats st;
    st.struct_size = sizeof(st);
    EXPECT_EQ(llmkv_engine_get_stats(e, &st), LLMKV_OK);
    return st;
}

// A prompt whose every cacheable block is served by the prefix cache leaves nothing to
// compute before generate: the session must become IDLE, not stay QUEUED forever (a host
// loop stepping until nothing is queued would spin). Also after session_to_prefix of a
// session whose tokens were still queued.
TEST_F(EngineTest, APromptServedEntirelyFromThePrefixCacheDoesNotStayQueued) {
    llmkv_engine *e = make_engine();
    const std::vector<int32_t> prompt = byte_tokens(33, 5);  // 4-token blocks: 32 cacheable tokens
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    llmkv_session *a = nullptr, *b = nullptr;
    ASSERT_EQ(llmkv_session_create(e, &sp, &a), LLMKV_OK);
    ASSERT_EQ(llmkv_session_append(a, prompt.data(), prompt.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    ASSERT_EQ(stats_of(e).sessions_queued, 0u);
    ASSERT_EQ(llmkv_session_create(e, &sp, &b), LLMKV_OK);
    ASSERT_EQ(llmkv_session_append(b, prompt.data(), prompt.size()), LLMKV_OK);
    EXPECT_EQ(stats_of(e).sessions_queued, 1u);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    llmkv_stats st = stats_of(e);
    EXPECT_EQ(st.sessions_queued, 0u);
    EXPECT_EQ(st.sessions_idle, 2u);
    EXPECT_EQ(st.prefix_hit_tokens, 32u);
    // Generation from there equals a session that computed the prompt itself.
    ASSERT_EQ(llmkv_session_generate(b, 6), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(a, 6), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    EXPECT_EQ(tokens_of(a), tokens_of(b));

    // A handle made from a session whose tokens are still queued: the handle computes them,
    // and the session then finds them all cached.
    llmkv_session *c = nullptr;
    const std::vector<int32_t> other = byte_tokens(29, 6);
    ASSERT_EQ(llmkv_session_create(e, &sp, &c), LLMKV_OK);
    ASSERT_EQ(llmkv_session_append(c, other.data(), other.size()), LLMKV_OK);
    llmkv_prefix *handle = nullptr;
    ASSERT_EQ(llmkv_session_to_prefix(c, &handle), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    EXPECT_EQ(stats_of(e).sessions_queued, 0u);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_prefix_release(handle);
    llmkv_engine_destroy(e);
}

TEST_F(EngineTest, SharedPromptIsServedFromThePrefixCacheWithIdenticalTokens) {
    std::vector<int32_t> shared = byte_tokens(50, 21);
    std::vector<int32_t> second = shared;
    for (int32_t t : byte_tokens(7, 22)) second.push_back(t);
    for (float temperature : {0.0f, 0.9f}) {
        llmkv_session_params sp = sampling_params(temperature, 77);
        llmkv_engine *cached = make_engine();
        llmkv_engine *plain = make_engine(0, 0, 2, 0, 0);
        auto first_cached = solo_run(cached, sp, shared, 10);
        llmkv_stats before = stats_of(cached);
        EXPECT_EQ(before.prefix_hit_tokens, 0u);
        auto second_cached = solo_run(cached, sp, second, 10);
        llmkv_stats after = stats_of(cached);
        // Blocks 0..11 (positions 0..47) are shared; block 12 differs (the first session
        // continued with its own generated tokens there).
        EXPECT_EQ(after.prefix_hit_tokens - before.prefix_hit_tokens, 48u);
        EXPECT_EQ(after.tokens_prefilled - before.tokens_prefilled, second.size() - 48);
        EXPECT_EQ(first_cached, solo_run(plain, sp, shared, 10));
        EXPECT_EQ(second_cached, solo_run(plain, sp, second, 10));
        EXPECT_EQ(stats_of(plain).prefix_hit_tokens, 0u);
        // The same prompt again hits every full block but the one holding its last token.
        auto again = solo_run(cached, sp, second, 10);
        EXPECT_EQ(again, second_cached);
        EXPECT_EQ(stats_of(cached).prefix_hit_tokens - after.prefix_hit_tokens,
                  (second.size() - 1) / 4 * 4);
        EXPECT_EQ(llmkv_engine_validate(cached), LLMKV_OK) << llmkv_last_error();
        llmkv_engine_destroy(cached);
        llmkv_engine_destroy(plain);
    }
}

TEST_F(EngineTest, PrefixCacheEvictsUnreferencedBlocksWhenThePoolRunsDry) {
    // 16 blocks of 4 tokens; every session needs about 8: the cache must give blocks back.
    llmkv_engine *e = make_engine(0, 16 * kGroups * kF16PoolBlock);
    llmkv_engine *plain = make_engine(0, 0, 2, 0, 0);
    llmkv_session_params sp = sampling_params(0.0f, 0);
    for (uint32_t i = 0; i < 12; ++i) {
        // A recurring prompt between one-off prompts: LRU keeps the recurring chain and
        // evicts the one-offs.
        std::vector<int32_t> p = byte_tokens(25, i % 2 ? 400 + i : 300);
        auto got = solo_run(e, sp, p, 6);
        ASSERT_EQ(got, solo_run(plain, sp, p, 6)) << "run " << i;
        ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
        llmkv_stats st = stats_of(e);
        ASSERT_EQ(st.blocks_used, 0u);
        ASSERT_EQ(st.blocks_free + st.blocks_cached, st.blocks_total);
    }
    // The recurring prompt hits its 6 full blocks (24 of its 25 tokens) on runs 2, 4, .., 10.
    EXPECT_EQ(stats_of(e).prefix_hit_tokens, 5u * 24u);
    llmkv_engine_destroy(e);
    llmkv_engine_destroy(plain);
}

TEST_F(EngineTest, PrefixCacheStaysOffWithAResidualWindow) {
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = path_->c_str();
    p.kv_block_tokens = 4;
    p.kv_residual_tokens = 8;
    llmkv_engine *e = nullptr;
    ASSERT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
    llmkv_session_params sp = sampling_params(0.0f, 0);
    std::vector<int32_t> pr = byte_tokens(30, 5);
    auto a = solo_run(e, sp, pr, 4);
    auto b = solo_run(e, sp, pr, 4);
    EXPECT_EQ(a, b);
    EXPECT_EQ(stats_of(e).prefix_hit_tokens, 0u);
    EXPECT_EQ(stats_of(e).blocks_cached, 0u);
    llmkv_engine_destroy(e);
}

// Runs a session made from `prefix` with `suffix` appended and returns its whole context.
std::vector<int32_t> run_from_prefix(llmkv_engine *e, llmkv_prefix *prefix, llmkv_session_params sp,
                                     const std::vector<int32_t> &suffix, uint32_t n) {
    sp.prefix = prefix;
    llmkv_session *s = nullptr;
    EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK) << llmkv_last_error();
    if (!suffix.empty()) {
        EXPECT_EQ(llmkv_session_append(s, suffix.data(), suffix.size()), LLMKV_OK);
    }
    EXPECT_EQ(llmkv_session_generate(s, n), LLMKV_OK);
    EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    std::vector<int32_t> t(4096);
    size_t count = 0;
    llmkv_session_get_tokens(s, t.data(), t.size(), &count);
    t.resize(count);
    llmkv_session_destroy(s);
    return t;
}

TEST_F(EngineTest, SessionsFromAPrefixHandleEqualFreshSessionsBitwise) {
    for (uint32_t flags : {0u, LLMKV_ENGINE_PREFIX_CACHE}) {
        llmkv_engine *e = make_engine(16, 0, 2, 0, flags);
        std::vector<int32_t> system = byte_tokens(37, 31), suffix = byte_tokens(9, 32);
        std::vector<int32_t> full = system;
        full.insert(full.end(), suffix.begin(), suffix.end());
        llmkv_session_params sp = sampling_params(0.8f, 5);
        auto fresh = solo_run(e, sp, full, 12);
        auto fresh_system_only = solo_run(e, sp, system, 12);
        llmkv_prefix *prefix = nullptr;
        ASSERT_EQ(llmkv_prefix_create(e, system.data(), system.size(), &prefix), LLMKV_OK)
            << llmkv_last_error();
        EXPECT_EQ(llmkv_prefix_n_tokens(prefix), system.size());
        EXPECT_EQ(run_from_prefix(e, prefix, sp, suffix, 12), fresh);
        EXPECT_EQ(run_from_prefix(e, prefix, sp, {}, 12), fresh_system_only);
        // A session keeps the shared blocks after the handle is released.
        sp.prefix = prefix;
        llmkv_session *s = nullptr;
        ASSERT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
        llmkv_prefix_release(prefix);
        ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
        ASSERT_EQ(llmkv_session_append(s, suffix.data(), suffix.size()), LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(s, 12), LLMKV_OK);
        ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        EXPECT_EQ(tokens_of(s), fresh);
        llmkv_session_destroy(s);
        llmkv_stats st = stats_of(e);
        EXPECT_EQ(st.blocks_used, 0u);
        EXPECT_EQ(st.tail_blocks_used, 0u);
        EXPECT_EQ(st.blocks_free + st.blocks_cached, st.blocks_total);
        EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
        llmkv_engine_destroy(e);
    }
}

TEST_F(EngineTest, ForkAndToPrefixContinueExactlyLikeTheOriginal) {
    llmkv_engine *e = make_engine();
    llmkv_session_params sp = sampling_params(1.0f, 123);
    sp.sampling.top_k = 0;
    std::vector<int32_t> p = byte_tokens(21, 40);
    llmkv_session *a = nullptr;
    ASSERT_EQ(llmkv_session_create(e, &sp, &a), LLMKV_OK);
    ASSERT_EQ(llmkv_session_append(a, p.data(), p.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(a, 5), LLMKV_OK);
    llmkv_session *busy = nullptr;
    EXPECT_EQ(llmkv_session_fork(a, &busy), LLMKV_ERR_STATE);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    llmkv_session *b = nullptr;
    ASSERT_EQ(llmkv_session_fork(a, &b), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(tokens_of(b), tokens_of(a));
    llmkv_prefix *q = nullptr;
    ASSERT_EQ(llmkv_session_to_prefix(a, &q), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(llmkv_prefix_n_tokens(q), tokens_of(a).size());
    // Same RNG state: both continue with the same tokens.
    ASSERT_EQ(llmkv_session_generate(a, 9), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(b, 9), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    EXPECT_EQ(tokens_of(a), tokens_of(b));
    // A session from the to_prefix handle equals a fresh session given the same context.
    std::vector<int32_t> ctx = tokens_of(b);
    ctx.resize(llmkv_prefix_n_tokens(q));
    llmkv_session_params greedy = sampling_params(0.0f, 0);
    EXPECT_EQ(run_from_prefix(e, q, greedy, {}, 6), solo_run(e, greedy, ctx, 6));
    llmkv_prefix_release(q);
    llmkv_session_destroy(a);
    llmkv_session_destroy(b);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(stats_of(e).blocks_used, 0u);
    llmkv_engine_destroy(e);
}

TEST_F(EngineTest, RandomHandleForkAndSessionOperationsKeepInvariantsAndEndFree) {
    llmkv_engine *e = make_engine(20, 48 * 1024);
    std::mt19937 rng(77);
    std::vector<llmkv_session *> sessions;
    std::vector<llmkv_prefix *> prefixes;
    std::vector<int32_t> common = byte_tokens(18, 1);
    for (int op = 0; op < 500; ++op) {
        switch (rng() % 8) {
            case 0: {  // create a session, maybe from a prefix
                if (sessions.size() >= 10) break;
                llmkv_session_params sp = sampling_params(float(rng() % 2), rng());
                if (!prefixes.empty() && rng() % 2) sp.prefix = prefixes[rng() % prefixes.size()];
                llmkv_session *s = nullptr;
                llmkv_status st = llmkv_session_create(e, &sp, &s);
                ASSERT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_KV_CAPACITY) << st;
                if (st == LLMKV_OK) sessions.push_back(s);
                break;
            }
            case 1: {  // append: often the common prompt, so the prefix cache gets hits
                if (sessions.empty()) break;
                auto p = rng() % 2 ? common : byte_tokens(1 + rng() % 12, rng());
                llmkv_status st =
                    llmkv_session_append(sessions[rng() % sessions.size()], p.data(), p.size());
                ASSERT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_STATE || st == LLMKV_ERR_KV_CAPACITY)
                    << st;
                break;
            }
            case 2:
                if (!sessions.empty()) {
                    llmkv_status st =
                        llmkv_session_generate(sessions[rng() % sessions.size()], 1 + rng() % 6);
                    ASSERT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_STATE ||
                                st == LLMKV_ERR_KV_CAPACITY)
                        << st;
                }
                break;
            case 3:
                if (!sessions.empty() && sessions.size() < 10) {
                    llmkv_session *f = nullptr;
                    llmkv_status st = llmkv_session_fork(sessions[rng() % sessions.size()], &f);
                    ASSERT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_STATE ||
                                st == LLMKV_ERR_KV_CAPACITY)
                        << st;
                    if (st == LLMKV_OK) sessions.push_back(f);
                }
                break;
            case 4:
                if (!sessions.empty() && prefixes.size() < 4) {
                    llmkv_prefix *q = nullptr;
                    llmkv_status st =
                        llmkv_session_to_prefix(sessions[rng() % sessions.size()], &q);
                    ASSERT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_STATE ||
                                st == LLMKV_ERR_KV_CAPACITY)
                        << st;
                    if (st == LLMKV_OK) prefixes.push_back(q);
                } else if (prefixes.size() < 4) {
                    llmkv_prefix *q = nullptr;
                    llmkv_status st = llmkv_prefix_create(e, common.data(), common.size(), &q);
                    ASSERT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_KV_CAPACITY) << st;
                    if (st == LLMKV_OK) prefixes.push_back(q);
                }
                break;
            case 5:
                if (!prefixes.empty()) {
                    size_t i = rng() % prefixes.size();
                    llmkv_prefix_release(prefixes[i]);
                    prefixes.erase(prefixes.begin() + long(i));
                }
                break;
            case 6:
                if (!sessions.empty()) {
                    size_t i = rng() % sessions.size();
                    llmkv_session_destroy(sessions[i]);
                    sessions.erase(sessions.begin() + long(i));
                }
                break;
            default: {
                llmkv_event ev[4];
                size_t n = 0;
                ASSERT_EQ(llmkv_step(e, ev, rng() % 5, &n), LLMKV_OK) << llmkv_last_error();
                break;
            }
        }
        ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK)
            << "after op " << op << ": " << llmkv_last_error();
    }
    for (auto *s : sessions) llmkv_session_destroy(s);
    for (auto *q : prefixes) llmkv_prefix_release(q);
    llmkv_stats st = stats_of(e);
    EXPECT_EQ(st.blocks_used, 0u);
    EXPECT_EQ(st.tail_blocks_used, 0u);
    EXPECT_EQ(st.blocks_free + st.blocks_cached, st.blocks_total);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_destroy(e);
}

// The defect: a snapshot whose tokens were changed and whose checksums were recomputed
// loaded fine and its KV went into the automatic prefix cache under the changed tokens, so
// an unrelated session sending those tokens got another prompt's KV.
TEST_F(EngineTest, ACraftedSnapshotDoesNotPoisonTheSharedPrefixCache) {
    const std::vector<int32_t> real = byte_tokens(45, 61), claimed = byte_tokens(45, 62);
    const std::vector<int32_t> suffix = byte_tokens(5, 63);
    std::vector<int32_t> victim = claimed;
    victim.insert(victim.end(), suffix.begin(), suffix.end());
    llmkv_session_params sp = sampling_params(0.0f, 0);
    const std::string honest = testing::temp_path("honest.llmkvsnap"),
                      forged = testing::temp_path("forged.llmkvsnap");
    {
        llmkv_engine *e = make_engine();
        llmkv_prefix *prefix = nullptr;
        ASSERT_EQ(llmkv_prefix_create(e, real.data(), real.size(), &prefix), LLMKV_OK);
        ASSERT_EQ(llmkv_prefix_save(prefix, honest.c_str()), LLMKV_OK) << llmkv_last_error();
        // The forgery: the real prompt's KV under the claimed tokens, checksums recomputed.
        LoadedSnapshot snap = read_snapshot(honest, reinterpret_cast<Engine *>(e)->snapshot_meta());
        SnapshotMeta m = snap.meta();
        m.tokens = claimed;
        std::vector<const uint8_t *> blocks;
        for (size_t i = 0; i < snap.n_blocks(); ++i) blocks.push_back(snap.block(i));
        write_snapshot(forged, m, blocks, snap.tail());
        llmkv_prefix_release(prefix);
        llmkv_engine_destroy(e);
    }
    llmkv_engine *clean = make_engine();
    const std::vector<int32_t> expected = solo_run(clean, sp, victim, 8);
    llmkv_engine_destroy(clean);

    // Loaded by one part of the host (and used: a session from it computes more blocks after
    // the forged ones), then another part sends the claimed tokens.
    llmkv_engine *e = make_engine();
    llmkv_prefix *loaded = nullptr;
    ASSERT_EQ(llmkv_prefix_load(e, forged.c_str(), &loaded), LLMKV_OK) << llmkv_last_error();
    run_from_prefix(e, loaded, sp, suffix, 8);
    const uint64_t hits = stats_of(e).prefix_hit_tokens;
    EXPECT_EQ(solo_run(e, sp, victim, 8), expected);
    EXPECT_EQ(stats_of(e).prefix_hit_tokens, hits) << "the loaded KV reached the shared cache";
    // The same tokens computed honestly are cached as usual.
    EXPECT_EQ(solo_run(e, sp, victim, 8), expected);
    EXPECT_GT(stats_of(e).prefix_hit_tokens, hits);
    llmkv_prefix_release(loaded);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_destroy(e);

    // A host that trusts its files opts in: the loaded blocks serve the cache.
    e = make_engine();
    EXPECT_EQ(llmkv_prefix_load_ex(e, honest.c_str(), 0x4u, &loaded), LLMKV_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(llmkv_prefix_load_ex(e, honest.c_str(), LLMKV_PREFIX_LOAD_SHARE, &loaded), LLMKV_OK);
    std::vector<int32_t> real_victim = real;
    real_victim.insert(real_victim.end(), suffix.begin(), suffix.end());
    solo_run(e, sp, real_victim, 2);
    EXPECT_EQ(stats_of(e).prefix_hit_tokens, 44u);  // 11 full blocks of 4 tokens
    llmkv_prefix_release(loaded);
    llmkv_engine_destroy(e);
    std::remove(honest.c_str());
    std::remove(forged.c_str());
}

TEST_F(EngineTest, PrefixSnapshotLoadsInAFreshEngineAndGivesIdenticalTokens) {
    std::vector<int32_t> system = byte_tokens(45, 51), suffix = byte_tokens(6, 52);
    std::vector<int32_t> full = system;
    full.insert(full.end(), suffix.begin(), suffix.end());
    llmkv_session_params sp = sampling_params(0.7f, 9);
    std::string path = testing::temp_path("prefix.llmkvsnap");
    {
        llmkv_engine *e = make_engine();
        llmkv_prefix *prefix = nullptr;
        ASSERT_EQ(llmkv_prefix_create(e, system.data(), system.size(), &prefix), LLMKV_OK);
        ASSERT_EQ(llmkv_prefix_save(prefix, path.c_str()), LLMKV_OK) << llmkv_last_error();
        llmkv_prefix_release(prefix);
        llmkv_engine_destroy(e);
    }
    llmkv_engine *fresh = make_engine();
    std::vector<int32_t> expected = solo_run(fresh, sp, full, 10);
    llmkv_engine_destroy(fresh);

    for (uint32_t flags : {0u, LLMKV_ENGINE_PREFIX_CACHE}) {
        llmkv_engine *e = make_engine(0, 0, 2, 0, flags);
        llmkv_prefix *loaded = nullptr;
        ASSERT_EQ(llmkv_prefix_load(e, path.c_str(), &loaded), LLMKV_OK) << llmkv_last_error();
        EXPECT_EQ(llmkv_prefix_n_tokens(loaded), system.size());
        llmkv_stats before = stats_of(e);
        EXPECT_EQ(run_from_prefix(e, loaded, sp, suffix, 10), expected);
        // Only the suffix and the prompt's last token were computed.
        EXPECT_EQ(stats_of(e).tokens_prefilled - before.tokens_prefilled, suffix.size() + 1);
        llmkv_prefix_release(loaded);
        EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
        llmkv_engine_destroy(e);
    }

    // Corrupt copies and an incompatible engine: SNAPSHOT_FORMAT, and the engine unchanged.
    std::FILE *f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    std::vector<uint8_t> bytes;
    for (int c; (c = std::fgetc(f)) != EOF;) bytes.push_back(uint8_t(c));
    std::fclose(f);
    auto write = [&](const std::vector<uint8_t> &b) {
        std::FILE *o = std::fopen(path.c_str(), "wb");
        std::fwrite(b.data(), 1, b.size(), o);
        std::fclose(o);
    };
    llmkv_engine *e = make_engine();
    llmkv_stats clean = stats_of(e);
    for (size_t at : {size_t(3), size_t(40), bytes.size() / 2, bytes.size() - 1}) {
        std::vector<uint8_t> bad = bytes;
        bad[at] ^= 0x10;
        write(bad);
        llmkv_prefix *p = nullptr;
        EXPECT_EQ(llmkv_prefix_load(e, path.c_str(), &p), LLMKV_ERR_SNAPSHOT_FORMAT)
            << "flip at " << at;
        EXPECT_EQ(p, nullptr);
    }
    write(std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(bytes.size() - 100)));
    llmkv_prefix *p = nullptr;
    EXPECT_EQ(llmkv_prefix_load(e, path.c_str(), &p), LLMKV_ERR_SNAPSHOT_FORMAT);
    llmkv_stats after = stats_of(e);
    EXPECT_EQ(after.blocks_free, clean.blocks_free);
    EXPECT_EQ(after.tail_blocks_used, clean.tail_blocks_used);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK);
    llmkv_engine_destroy(e);

    write(bytes);
    llmkv_engine_params other;
    llmkv_engine_params_init(&other);
    other.model_path = path_->c_str();
    other.kv_block_tokens = 4;
    other.kv_dtype_k = LLMKV_KV_INT8;  // another codec
    llmkv_engine *e2 = nullptr;
    ASSERT_EQ(llmkv_engine_create(&other, &e2), LLMKV_OK);
    EXPECT_EQ(llmkv_prefix_load(e2, path.c_str(), &p), LLMKV_ERR_SNAPSHOT_FORMAT);
    EXPECT_NE(std::string(llmkv_last_error()).find("codec"), std::string::npos)
        << llmkv_last_error();
    llmkv_engine_destroy(e2);
    EXPECT_EQ(llmkv_prefix_load(nullptr, path.c_str(), &p), LLMKV_ERR_INVALID_ARGUMENT);
    std::remove(path.c_str());
    llmkv_engine *e3 = make_engine();
    EXPECT_EQ(llmkv_prefix_load(e3, path.c_str(), &p), LLMKV_ERR_IO);
    llmkv_engine_destroy(e3);
}

TEST_F(EngineTest, UnsupportedKvDtypeIsRejectedAtCreation) {
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = path_->c_str();
    p.kv_rotation = LLMKV_KV_ROTATION_K;  // rotation is only for the 8- and 4-bit codecs
    llmkv_engine *e = nullptr;
    EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_ERR_UNSUPPORTED);
    EXPECT_EQ(e, nullptr);
    EXPECT_NE(std::string(llmkv_last_error()).find("rotation"), std::string::npos)
        << llmkv_last_error();
    p.kv_rotation = llmkv_kv_rotation(9);
    EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT);
    p.kv_rotation = LLMKV_KV_ROTATION_AUTO;
    p.kv_dtype_k = llmkv_kv_dtype(77);
    EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT);
}

// Compact int4 through the C API: its bytes per token (tiny model: 2 layers x 2 KV heads,
// head_dim 16, 4-token blocks: K 32 nibble bytes + 6 + 16 + 8, V 32 + 6 + 4 per head and
// layer = 416 bytes per block), the pool it makes of a byte budget, and sessions batched
// together giving their solo tokens bit for bit.
TEST_F(EngineTest, CompactInt4CountsItsBytesAndKeepsBatchInvariance) {
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = path_->c_str();
    p.backend = LLMKV_BACKEND_CPU;
    p.n_threads = 2;
    p.kv_block_tokens = 4;
    p.kv_dtype_k = LLMKV_KV_INT4_COMPACT;
    p.kv_dtype_v = LLMKV_KV_INT4_COMPACT;
    p.kv_device_bytes = kInt4cPoolBlock * 40;
    llmkv_engine *e = nullptr;
    ASSERT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
    EXPECT_EQ(info.kv_bytes_per_token_device, kInt4cBytesPerToken);
    EXPECT_EQ(info.kv_blocks_total, 40u);
    const int kSessions = 4;
    std::vector<std::vector<int32_t>> prompts, solo;
    const llmkv_session_params sp = sampling_params(0.0f, 0);
    for (int i = 0; i < kSessions; ++i) {
        prompts.push_back(byte_tokens(9 + 7 * i, 30 + i));
        solo.push_back(solo_run(e, sp, prompts.back(), 14));
    }
    std::vector<llmkv_session *> sessions(kSessions);
    for (int i = 0; i < kSessions; ++i) {
        ASSERT_EQ(llmkv_session_create(e, &sp, &sessions[i]), LLMKV_OK);
        ASSERT_EQ(llmkv_session_append(sessions[i], prompts[i].data(), prompts[i].size()),
                  LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(sessions[i], 14), LLMKV_OK);
    }
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    for (int i = 0; i < kSessions; ++i)
        EXPECT_EQ(tokens_of(sessions[i]), solo[i]) << "session " << i;
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    for (auto *s : sessions) llmkv_session_destroy(s);
    llmkv_engine_destroy(e);
}

// Bytes of one tail slot, seen through kv_bytes_used with one session holding a tail and no
// sealed block (3 tokens in 4-token blocks).
uint64_t tail_slot_bytes(llmkv_engine *e) {
    llmkv_session *s = nullptr;
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
    const std::vector<int32_t> t = byte_tokens(3, 5);
    EXPECT_EQ(llmkv_session_append(s, t.data(), t.size()), LLMKV_OK);
    EXPECT_EQ(llmkv_session_generate(s, 1), LLMKV_OK);
    EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    const uint64_t bytes = stats(e).kv_bytes_used;
    llmkv_session_destroy(s);
    return bytes;
}

// The KV sink (on by default with int4 codecs): position 0 is read from fp16 rows beside the
// tail. A session that takes block 0 from the prefix cache, a prefix handle made over cached
// blocks and a handle made from such a session compute position 0 alone; each must then give
// the tokens of an engine without the prefix cache, bit for bit (a sink row left unwritten
// would change what every later position attends to).
TEST_F(EngineTest, KvSinkSessionsFromCachedBlocksGiveTheUncachedTokens) {
    kv_dtype_ = LLMKV_KV_INT4_COMPACT;
    // Tiny model: 2 layers x 2 KV heads x head_dim 16, fp16: 256 bytes per tail row; the
    // sink adds one row to the 4-row tail slot.
    for (uint32_t sink_flag : {0u, LLMKV_ENGINE_NO_KV_SINK}) {
        llmkv_engine *e = make_engine(0, 0, 2, 0, LLMKV_ENGINE_PREFIX_CACHE | sink_flag);
        llmkv_engine_info info;
        info.struct_size = sizeof(info);
        ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
        EXPECT_EQ(info.kv_bytes_per_token_tail, kRowBytes);  // per position row, sink or not
        EXPECT_EQ(info.kv_bytes_per_token_device, kInt4cBytesPerToken);  // sealed unchanged
        EXPECT_EQ(tail_slot_bytes(e), (sink_flag ? 4 : 5) * kRowBytes);  // the sink: one more row
        llmkv_engine_destroy(e);
    }
    int sink_changes_tokens = 0;  // prompts whose tokens differ without the sink
    for (uint32_t seed = 0; seed < 8; ++seed) {
        std::vector<int32_t> shared = byte_tokens(42, 200 + seed),
                             suffix = byte_tokens(7, 400 + seed);
        std::vector<int32_t> second = shared;
        second.insert(second.end(), suffix.begin(), suffix.end());
        const llmkv_session_params sp = sampling_params(seed % 2 ? 0.9f : 0.0f, seed);
        llmkv_engine *plain = make_engine(0, 0, 2, 0, 0);
        const auto want_shared = solo_run(plain, sp, shared, 12);
        const auto want_second = solo_run(plain, sp, second, 12);
        llmkv_engine *without = make_engine(0, 0, 2, 0, LLMKV_ENGINE_NO_KV_SINK);
        sink_changes_tokens += solo_run(without, sp, second, 12) != want_second;
        llmkv_engine_destroy(without);
        llmkv_engine *cached = make_engine();
        // Tail slots are reused: a session that starts with another token leaves its own
        // position 0 in the slot's sink rows before each use of the cached blocks.
        std::vector<int32_t> other = byte_tokens(9, 300 + seed);
        other[0] = shared[0] == 1 ? 2 : 1;
        auto scrub = [&] { solo_run(cached, sp, other, 2); };
        EXPECT_EQ(solo_run(cached, sp, shared, 12), want_shared);
        scrub();
        const uint64_t hits0 = stats_of(cached).prefix_hit_tokens;
        EXPECT_EQ(solo_run(cached, sp, second, 12), want_second);  // blocks 0..9 from the cache
        EXPECT_EQ(stats_of(cached).prefix_hit_tokens - hits0, 40u);
        // A handle over cached blocks (computed in prefill_now), sessions made from it.
        scrub();
        llmkv_prefix *prefix = nullptr;
        ASSERT_EQ(llmkv_prefix_create(cached, shared.data(), shared.size(), &prefix), LLMKV_OK)
            << llmkv_last_error();
        EXPECT_EQ(run_from_prefix(cached, prefix, sp, suffix, 12), want_second);
        // Saved and loaded in a fresh engine (the sink rows travel with the tail).
        const std::string path = testing::temp_path("sink_prefix.llmkvsnap");
        ASSERT_EQ(llmkv_prefix_save(prefix, path.c_str()), LLMKV_OK) << llmkv_last_error();
        llmkv_prefix_release(prefix);
        llmkv_engine *fresh = make_engine();
        llmkv_prefix *loaded = nullptr;
        ASSERT_EQ(llmkv_prefix_load(fresh, path.c_str(), &loaded), LLMKV_OK) << llmkv_last_error();
        EXPECT_EQ(run_from_prefix(fresh, loaded, sp, suffix, 12), want_second);
        llmkv_prefix_release(loaded);
        llmkv_engine_destroy(fresh);
        // An engine without the sink reads another layout: refused, naming the codec.
        llmkv_engine *no_sink =
            make_engine(0, 0, 2, 0, LLMKV_ENGINE_PREFIX_CACHE | LLMKV_ENGINE_NO_KV_SINK);
        EXPECT_EQ(llmkv_prefix_load(no_sink, path.c_str(), &loaded), LLMKV_ERR_SNAPSHOT_FORMAT);
        EXPECT_NE(std::string(llmkv_last_error()).find("sink"), std::string::npos)
            << llmkv_last_error();
        llmkv_engine_destroy(no_sink);
        std::remove(path.c_str());
        // A session whose blocks came from the cache, made a handle before it ever ran.
        scrub();
        llmkv_session *s = nullptr;
        ASSERT_EQ(llmkv_session_create(cached, &sp, &s), LLMKV_OK);
        ASSERT_EQ(llmkv_session_append(s, shared.data(), shared.size()), LLMKV_OK);
        llmkv_prefix *from_session = nullptr;
        ASSERT_EQ(llmkv_session_to_prefix(s, &from_session), LLMKV_OK) << llmkv_last_error();
        llmkv_session_destroy(s);
        EXPECT_EQ(run_from_prefix(cached, from_session, sp, suffix, 12), want_second);
        llmkv_prefix_release(from_session);
        EXPECT_EQ(llmkv_engine_validate(cached), LLMKV_OK) << llmkv_last_error();
        llmkv_engine_destroy(cached);
        llmkv_engine_destroy(plain);
    }
    // The prompts are ones where position 0's rows matter (else the test could not fail).
    EXPECT_GT(sink_changes_tokens, 0);
}

TEST_F(EngineTest, KvSinkFlagsAreCheckedAtCreation) {
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = path_->c_str();
    p.backend = LLMKV_BACKEND_CPU;
    p.kv_block_tokens = 4;
    p.flags = LLMKV_ENGINE_KV_SINK | LLMKV_ENGINE_NO_KV_SINK;
    llmkv_engine *e = nullptr;
    EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(e, nullptr);
    EXPECT_NE(std::string(llmkv_last_error()).find("NO_KV_SINK"), std::string::npos)
        << llmkv_last_error();
    // Asked for with any codec: int8 here (not a default).
    p.flags = LLMKV_ENGINE_KV_SINK;
    p.kv_dtype_k = p.kv_dtype_v = LLMKV_KV_INT8;
    ASSERT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    EXPECT_EQ(tail_slot_bytes(e), 5 * kRowBytes);
    llmkv_engine_destroy(e);
    p.flags = 0;
    ASSERT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(tail_slot_bytes(e), 4 * kRowBytes);
    llmkv_engine_destroy(e);
    // The AUTO backend: int4c runs on the CPU (CUDA has no int4c), with the sink by default;
    // asked for with int8, AUTO takes the CPU too (the CUDA attention does not read it).
    p.backend = LLMKV_BACKEND_AUTO;
    for (uint32_t flags : {0u, LLMKV_ENGINE_KV_SINK}) {
        p.flags = flags;
        p.kv_dtype_k = p.kv_dtype_v = flags ? LLMKV_KV_INT8 : LLMKV_KV_INT4_COMPACT;
        ASSERT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
        EXPECT_EQ(info.backend, uint32_t(LLMKV_BACKEND_CPU));
        EXPECT_EQ(tail_slot_bytes(e), 5 * kRowBytes);
        llmkv_engine_destroy(e);
    }
    // One-token blocks seal position 0 at once: no sink (refused when asked for).
    p.backend = LLMKV_BACKEND_CPU;
    p.kv_block_tokens = 1;
    p.flags = LLMKV_ENGINE_KV_SINK;
    EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(llmkv_last_error()).find("kv_block_tokens"), std::string::npos)
        << llmkv_last_error();
}

// engine_info's 0.6 fields: the experts, and the parameters and bytes one token reads; the
// 0.5 size is still accepted and nothing past it is written.
TEST_F(EngineTest, EngineInfoReportsExpertsAndActiveParameters) {
    llmkv_engine *e = make_engine();
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
#if LLMKV_ENGINE_TEST_MOE
    // 8 experts of 32 columns over n_embd 64, 2 per token, 2 layers: 6 of 8 experts' gate, up
    // and down matrices (3 x 32 x 64 each) are not read by a token.
    EXPECT_EQ(info.n_expert, 8u);
    EXPECT_EQ(info.n_expert_used, 2u);
    EXPECT_EQ(info.n_params - info.n_params_active, 2u * 6u * 3u * 32u * 64u);
    EXPECT_LT(info.weight_bytes_active, info.weight_bytes);
#elif LLMKV_ENGINE_TEST_GPTOSS
    EXPECT_EQ(info.n_expert, 4u);  // every expert used by every token
    EXPECT_EQ(info.n_expert_used, 4u);
    EXPECT_EQ(info.n_params_active, info.n_params);
    EXPECT_EQ(info.weight_bytes_active, info.weight_bytes);
#else
    EXPECT_EQ(info.n_expert, 0u);
    EXPECT_EQ(info.n_expert_used, 0u);
    EXPECT_EQ(info.n_params_active, info.n_params);
    EXPECT_EQ(info.weight_bytes_active, info.weight_bytes);
#endif
    EXPECT_GT(info.n_params_active, 0u);
    llmkv_engine_info old;
    std::memset(&old, 0xAB, sizeof(old));
    old.struct_size = uint32_t(offsetof(llmkv_engine_info, n_expert));  // a 0.5 caller
    ASSERT_EQ(llmkv_engine_get_info(e, &old), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(old.n_params, info.n_params);
    EXPECT_EQ(old.weight_bytes_rank, info.weight_bytes_rank);
    EXPECT_EQ(old.n_expert, 0xABABABABu) << "a 0.5 struct has no n_expert";
    old.struct_size = uint32_t(offsetof(llmkv_engine_info, n_expert)) + 4;  // no version's size
    EXPECT_EQ(llmkv_engine_get_info(e, &old), LLMKV_ERR_INVALID_ARGUMENT);
    llmkv_engine_destroy(e);
}

#if !LLMKV_ENGINE_TEST_GPTOSS  // (harmony: tests/unit/chat_template_test.cpp)
TEST_F(EngineTest, ChatFormatUsesChatMlForThisVocabulary) {
    llmkv_engine *e = make_engine();
    llmkv_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
    char buf[256];
    size_t n = 0;
    ASSERT_EQ(llmkv_chat_format(e, msgs, 2, 1, buf, sizeof(buf), &n), LLMKV_OK);
    EXPECT_EQ(std::string(buf, n),
              "<|im_start|>system\nBe "
              "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    llmkv_engine_destroy(e);
}
#endif

}  // namespace
}  // namespace llmkv
