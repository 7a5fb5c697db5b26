// The host tier through the engine, on a tiny synthetic model: swapping instead of
// recomputing when the device pool is short, parking and resuming idle sessions, a full
// host tier falling back to recomputation, and sessions destroyed while their copies are
// in flight. Tokens must equal an unconstrained run bitwise; the pool invariants (device
// and host) are checked after every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "llmkv.h"
#include "session_helpers.h"
#include "tiny_model.h"

namespace llmkv {
namespace {

using testing::byte_tokens;
using testing::stats;
using testing::tokens_of;

using testing::TinyModelSpec;

constexpr uint32_t kBlockTokens = 16;
constexpr uint64_t kBlockBytes =
    2 * 2 * 16 * kBlockTokens * 2 * 2;  // layers x kv heads x dims x tokens x fp16 x K,V

class EngineHostTierTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        TinyModelSpec spec;
        spec.weight_type = TensorType::Q4_1;
        spec.embd_type = TensorType::Q8_0;
        spec.n_ctx = 1024;
        path_ = new std::string(testing::temp_path("host_tier_tiny.gguf"));
        testing::write_tiny_model(spec, *path_);
    }
    static void TearDownTestSuite() {
        std::remove(path_->c_str());
        delete path_;
    }

    static llmkv_status try_engine(uint64_t device_blocks, uint64_t host_bytes, llmkv_engine **out,
                                   uint32_t flags = 0) {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path_->c_str();
        p.backend = LLMKV_BACKEND_CPU;
        p.n_threads = 2;
        p.kv_block_tokens = kBlockTokens;
        p.max_batch_tokens = 128;
        p.kv_device_bytes = device_blocks * kBlockBytes;
        p.kv_host_bytes = host_bytes;
        p.flags = flags;
        return llmkv_engine_create(&p, out);
    }
    static llmkv_engine *make_engine(uint64_t device_blocks, uint64_t host_bytes,
                                     uint32_t flags = 0) {
        llmkv_engine *e = nullptr;
        EXPECT_EQ(try_engine(device_blocks, host_bytes, &e, flags), LLMKV_OK) << llmkv_last_error();
        return e;
    }

    static llmkv_session *create(llmkv_engine *e, uint32_t i) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = i % 2 ? 0.9f : 0.0f;
        sp.sampling.top_k = 40;
        sp.sampling.seed = 500 + i;
        llmkv_session *s = nullptr;
        EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK) << llmkv_last_error();
        return s;
    }

    static void turn(llmkv_session *s, const std::vector<int32_t> &input, uint32_t n) {
        ASSERT_EQ(llmkv_session_append(s, input.data(), input.size()), LLMKV_OK)
            << llmkv_last_error();
        ASSERT_EQ(llmkv_session_generate(s, n), LLMKV_OK) << llmkv_last_error();
    }

    static uint32_t tier_of(llmkv_session *s) {
        llmkv_session_info si;
        si.struct_size = sizeof(si);
        EXPECT_EQ(llmkv_session_get_info(s, &si), LLMKV_OK);
        return si.tier;
    }

    // Steps until idle, validating the invariants after every step; returns error events.
    static uint32_t run_checked(llmkv_engine *e) {
        uint32_t errors = 0;
        llmkv_event ev[128];
        for (int guard = 0; guard < 100000; ++guard) {
            size_t n = 0;
            EXPECT_EQ(llmkv_step(e, ev, 128, &n), LLMKV_OK) << llmkv_last_error();
            EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
            for (size_t i = 0; i < n; ++i) errors += ev[i].kind == LLMKV_EVENT_ERROR ? 1 : 0;
            llmkv_stats st = stats(e);
            if (n == 0 &&
                st.sessions_queued + st.sessions_prefilling + st.sessions_generating == 0 &&
                llmkv_pending_events(e) == 0) {
                // Parked sessions with work come back in the next step; stop only when idle.
                llmkv_step(e, ev, 128, &n);
                if (n == 0 && stats(e).steps == st.steps) break;
                for (size_t i = 0; i < n; ++i) errors += ev[i].kind == LLMKV_EVENT_ERROR ? 1 : 0;
            }
        }
        return errors;
    }

    static std::string *path_;
};
std::string *EngineHostTierTest::path_ = nullptr;

TEST_F(EngineHostTierTest, ThirtyTwoSessionsOnADeviceBudgetForEightSwapWithIdenticalTokens) {
    const uint32_t kSessions = 32, kPrompt = 100, kNew = 60;
    // Reference: plenty of device blocks, no host tier.
    std::vector<std::vector<int32_t>> reference;
    {
        llmkv_engine *e = make_engine(4096, 0);
        std::vector<llmkv_session *> s;
        for (uint32_t i = 0; i < kSessions; ++i) {
            s.push_back(create(e, i));
            turn(s.back(), byte_tokens(kPrompt + i, 40 + i), kNew);
        }
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        for (auto *x : s) reference.push_back(tokens_of(x));
        for (auto *x : s) llmkv_session_destroy(x);
        llmkv_engine_destroy(e);
    }
    // A device pool for 8 sessions at their final length, a host tier for all of them.
    const uint32_t per_session = (kPrompt + kSessions + kNew) / kBlockTokens + 1;
    llmkv_engine *e = make_engine(8 * per_session, 64ull << 20);
    std::vector<llmkv_session *> s;
    for (uint32_t i = 0; i < kSessions; ++i) {
        s.push_back(create(e, i));
        turn(s.back(), byte_tokens(kPrompt + i, 40 + i), kNew);
    }
    EXPECT_EQ(run_checked(e), 0u);
    for (uint32_t i = 0; i < kSessions; ++i)
        EXPECT_EQ(tokens_of(s[i]), reference[i]) << "session " << i;
    llmkv_stats st = stats(e);
    EXPECT_GT(st.swaps, 0u) << "running sessions were swapped out, not recomputed";
    EXPECT_GT(st.bytes_to_host, 0u);
    EXPECT_GT(st.bytes_to_device, 0u);
    EXPECT_GT(st.resumes, 0u);
    for (auto *x : s) llmkv_session_destroy(x);
    st = stats(e);
    EXPECT_EQ(st.host_bytes_used, 0u);
    EXPECT_EQ(st.blocks_used, 0u);
    llmkv_engine_destroy(e);
}

TEST_F(EngineHostTierTest, HundredIdleSessionsParkedAndResumedInRandomOrderContinueIdentically) {
    const uint32_t kSessions = 100;
    auto first = [](uint32_t i) { return byte_tokens(20 + i % 40, 900 + i); };
    auto second = [](uint32_t i) { return byte_tokens(5 + i % 7, 1900 + i); };
    std::vector<std::vector<int32_t>> reference;
    {
        llmkv_engine *e = make_engine(8192, 0);
        std::vector<llmkv_session *> s;
        for (uint32_t i = 0; i < kSessions; ++i) {
            s.push_back(create(e, i));
            turn(s.back(), first(i), 12);
        }
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        for (uint32_t i = 0; i < kSessions; ++i) turn(s[i], second(i), 12);
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        for (auto *x : s) reference.push_back(tokens_of(x));
        for (auto *x : s) llmkv_session_destroy(x);
        llmkv_engine_destroy(e);
    }
    llmkv_engine *e = make_engine(8192, 32ull << 20);
    std::vector<llmkv_session *> s;
    for (uint32_t i = 0; i < kSessions; ++i) {
        s.push_back(create(e, i));
        turn(s.back(), first(i), 12);
    }
    EXPECT_EQ(run_checked(e), 0u);
    for (auto *x : s) ASSERT_EQ(llmkv_session_park(x), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    for (auto *x : s) EXPECT_EQ(tier_of(x), uint32_t(LLMKV_TIER_HOST));
    llmkv_stats st = stats(e);
    EXPECT_EQ(st.sessions_parked, kSessions);
    EXPECT_EQ(st.parks, kSessions);
    EXPECT_GE(st.host_blocks, kSessions) << "at least each session's tail";
    // The copies run on the copy thread; steps reap them and return the device blocks. How
    // long that takes is the scheduler's business (a loaded CI machine under Wine needed more
    // than a second): wait up to a minute, stepping.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (stats(e).tail_blocks_used > 0 && std::chrono::steady_clock::now() < deadline) {
        llmkv_event ev[4];
        size_t n = 0;
        ASSERT_EQ(llmkv_step(e, ev, 4, &n), LLMKV_OK);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    st = stats(e);
    EXPECT_EQ(st.tail_blocks_used, 0u) << "parked sessions hold no device tail slot";
    EXPECT_EQ(st.blocks_used, 0u) << "nor sealed blocks";
    std::vector<uint32_t> order(kSessions);
    for (uint32_t i = 0; i < kSessions; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(77));
    // Resume in random order, a few at a time, stepping in between.
    for (size_t k = 0; k < order.size(); ++k) {
        turn(s[order[k]], second(order[k]), 12);
        if (k % 7 == 6) {
            llmkv_event ev[64];
            size_t n = 0;
            ASSERT_EQ(llmkv_step(e, ev, 64, &n), LLMKV_OK);
            ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
        }
    }
    EXPECT_EQ(run_checked(e), 0u);
    for (uint32_t i = 0; i < kSessions; ++i) {
        EXPECT_EQ(tokens_of(s[i]), reference[i]) << "session " << i;
        EXPECT_EQ(tier_of(s[i]), uint32_t(LLMKV_TIER_DEVICE));
    }
    st = stats(e);
    EXPECT_EQ(st.resumes, kSessions);
    EXPECT_EQ(st.host_bytes_used, 0u);
    EXPECT_EQ(st.preemptions, 0u) << "nothing was recomputed";
    for (auto *x : s) llmkv_session_destroy(x);
    llmkv_engine_destroy(e);
}

TEST_F(EngineHostTierTest, FullHostTierFallsBackToRecomputationWithIdenticalTokens) {
    const uint32_t kSessions = 12, kPrompt = 120, kNew = 40;
    std::vector<std::vector<int32_t>> reference;
    {
        llmkv_engine *e = make_engine(4096, 0);
        std::vector<llmkv_session *> s;
        for (uint32_t i = 0; i < kSessions; ++i) {
            s.push_back(create(e, i));
            turn(s.back(), byte_tokens(kPrompt, 300 + i), kNew);
        }
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        for (auto *x : s) reference.push_back(tokens_of(x));
        for (auto *x : s) llmkv_session_destroy(x);
        llmkv_engine_destroy(e);
    }
    // Device room for 3 sessions, host room for about one.
    const uint32_t per_session = (kPrompt + kNew) / kBlockTokens + 1;
    llmkv_engine *e = make_engine(3 * per_session, per_session * kBlockBytes + 8192);
    std::vector<llmkv_session *> s;
    for (uint32_t i = 0; i < kSessions; ++i) {
        s.push_back(create(e, i));
        turn(s.back(), byte_tokens(kPrompt, 300 + i), kNew);
    }
    EXPECT_EQ(run_checked(e), 0u);
    for (uint32_t i = 0; i < kSessions; ++i)
        EXPECT_EQ(tokens_of(s[i]), reference[i]) << "session " << i;
    llmkv_stats st = stats(e);
    EXPECT_GT(st.swaps, 0u);
    EXPECT_GT(st.preemptions, st.swaps) << "some victims were recomputed: the host tier was full";
    EXPECT_LE(st.host_bytes_used, per_session * kBlockBytes + 8192);
    for (auto *x : s) llmkv_session_destroy(x);
    llmkv_engine_destroy(e);
}

TEST_F(EngineHostTierTest, SessionFourTimesTheDeviceBudgetRunsWithIdenticalTokens) {
    const std::vector<int32_t> prompt = byte_tokens(900, 4242);
    for (float temperature : {0.0f, 0.9f}) {
        auto run = [&](uint64_t device_blocks, uint64_t host_bytes, llmkv_stats *st_out,
                       uint32_t *tier, uint32_t flags = 0) {
            llmkv_engine *e = make_engine(device_blocks, host_bytes, flags);
            llmkv_session_params sp;
            llmkv_session_params_init(&sp);
            sp.sampling.temperature = temperature;
            sp.sampling.seed = 9;
            llmkv_session *s = nullptr;
            EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
            turn(s, prompt, 100);
            EXPECT_EQ(run_checked(e), 0u);
            std::vector<int32_t> out = tokens_of(s);
            if (st_out) *st_out = stats(e);
            if (tier) *tier = tier_of(s);
            llmkv_session_destroy(s);
            // (With the prefix cache, evicted blocks may stay in the host tier as demoted.)
            if (flags == 0) {
                EXPECT_EQ(stats(e).host_bytes_used, 0u);
            }
            llmkv_engine_destroy(e);
            return out;
        };
        std::vector<int32_t> reference = run(4096, 0, nullptr, nullptr);
        ASSERT_EQ(reference.size(), 1000u);
        // 16 device blocks hold 256 tokens: a quarter of the session's 1,000.
        llmkv_stats st{};
        uint32_t tier = 0;
        std::vector<int32_t> constrained = run(16, 4ull << 20, &st, &tier);
        EXPECT_EQ(constrained, reference) << "temperature " << temperature;
        EXPECT_EQ(tier, uint32_t(LLMKV_TIER_MIXED));
        EXPECT_GE(st.bytes_to_host, (1000u - 256u) / kBlockTokens * kBlockBytes);
        // With the prefix cache on, offloaded blocks stay published (their device copies
        // become evictable cache entries).
        EXPECT_EQ(run(16, 4ull << 20, nullptr, nullptr, LLMKV_ENGINE_PREFIX_CACHE), reference);
        // Without a host tier the same session cannot run.
        llmkv_engine *e = make_engine(16, 0);
        llmkv_session *s = create(e, 0);
        turn(s, prompt, 100);
        EXPECT_EQ(run_checked(e), 1u) << "one ERROR event (KV_CAPACITY)";
        llmkv_session_destroy(s);
        llmkv_engine_destroy(e);
    }
}

TEST_F(EngineHostTierTest, PrefixBlocksEvictedFromTheDeviceAreDemotedAndPromotedBack) {
    const std::vector<int32_t> system = byte_tokens(320, 31);  // 20 blocks
    auto with_question = [&](uint32_t q) {
        std::vector<int32_t> t = system;
        std::vector<int32_t> tail = byte_tokens(10, 600 + q);
        t.insert(t.end(), tail.begin(), tail.end());
        return t;
    };
    std::vector<int32_t> reference;
    {
        llmkv_engine *e = make_engine(4096, 0, 0);
        llmkv_session *s = create(e, 0);
        turn(s, with_question(1), 16);
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        reference = tokens_of(s);
        llmkv_session_destroy(s);
        llmkv_engine_destroy(e);
    }
    // 40 device blocks; the prefix cache and a host tier.
    llmkv_engine *e = make_engine(40, 4ull << 20, LLMKV_ENGINE_PREFIX_CACHE);
    llmkv_session *a = create(e, 0);
    turn(a, with_question(0), 16);
    EXPECT_EQ(run_checked(e), 0u);
    llmkv_session_destroy(a);  // the system prompt's blocks stay cached, unreferenced
    // Unrelated work evicts them from the device.
    llmkv_session *b = create(e, 0);
    turn(b, byte_tokens(600, 32), 8);
    EXPECT_EQ(run_checked(e), 0u);
    llmkv_session_destroy(b);
    const llmkv_stats before = stats(e);
    EXPECT_GE(before.demotions, 15u) << "most of the system prompt's blocks went to the host tier";
    // A new session with the same system prompt finds them: the first blocks still on the
    // device (eviction takes chains from their deepest block), the rest in the host tier.
    llmkv_session *c = create(e, 0);
    turn(c, with_question(1), 16);
    EXPECT_EQ(run_checked(e), 0u);
    EXPECT_EQ(tokens_of(c), reference);
    const llmkv_stats after = stats(e);
    const uint64_t promoted = after.promotions - before.promotions;
    EXPECT_GE(promoted, 15u);
    EXPECT_EQ((after.prefix_hit_tokens - before.prefix_hit_tokens) / kBlockTokens + promoted, 20u)
        << "all 20 blocks of the system prompt were reused, none recomputed";
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_session_destroy(c);
    llmkv_engine_destroy(e);
}

TEST_F(EngineHostTierTest, EverythingAtOnceKeepsEverySessionEqualToItsSoloRun) {
    // Small device pool, small host tier, prefix cache, shared prompt prefixes, random
    // priorities, arrivals, cancels, parks and destroys: every session that finishes must
    // equal its solo run; a cancelled one must be a prefix of it.
    struct Req {
        std::vector<int32_t> prompt;
        uint32_t n = 0;
        int32_t priority = 0;
        uint32_t index = 0;
    };
    std::mt19937 rng(99);
    const std::vector<int32_t> shared = byte_tokens(96, 5);
    std::vector<Req> reqs;
    for (uint32_t i = 0; i < 40; ++i) {
        Req r;
        if (i % 3 != 2) r.prompt = shared;  // two thirds start with the same 6 blocks
        std::vector<int32_t> own = byte_tokens(5 + rng() % 150, 7000 + i);
        r.prompt.insert(r.prompt.end(), own.begin(), own.end());
        r.n = 4 + rng() % 40;
        r.priority = int32_t(rng() % 3);
        r.index = i;
        reqs.push_back(r);
    }
    auto start = [&](llmkv_engine *e, const Req &r) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = r.index % 2 ? 0.9f : 0.0f;
        sp.sampling.top_k = 40;
        sp.sampling.seed = 300 + r.index;
        sp.priority = r.priority;
        llmkv_session *s = nullptr;
        EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK) << llmkv_last_error();
        turn(s, r.prompt, r.n);
        return s;
    };
    std::vector<std::vector<int32_t>> solo;
    {
        llmkv_engine *e = make_engine(4096, 0, 0);
        for (const Req &r : reqs) {
            llmkv_session *s = start(e, r);
            EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
            solo.push_back(tokens_of(s));
            llmkv_session_destroy(s);
        }
        llmkv_engine_destroy(e);
    }
    // 30 device blocks (480 tokens), 48 KiB of host tier (12 blocks).
    llmkv_engine *e = make_engine(30, 12 * kBlockBytes, LLMKV_ENGINE_PREFIX_CACHE);
    std::vector<llmkv_session *> live(reqs.size(), nullptr);
    std::vector<int> outcome(reqs.size(), 0);  // 0 running, 1 done, 2 cancelled, 3 destroyed
    size_t next = 0;
    uint32_t errors = 0;
    llmkv_event ev[128];
    for (int step = 0; step < 20000; ++step) {
        const uint32_t r = rng() % 20;
        if (r < 3 && next < reqs.size()) {
            live[next] = start(e, reqs[next]);
            ++next;
        } else if (r == 3 || r == 4) {  // cancel or destroy a random running session
            const size_t k = rng() % reqs.size();
            if (live[k] && outcome[k] == 0) {
                if (r == 3) {
                    if (llmkv_session_cancel(live[k]) == LLMKV_OK) outcome[k] = 2;
                } else {
                    std::vector<int32_t> t = tokens_of(live[k]);
                    EXPECT_TRUE(t.size() <= solo[k].size() &&
                                std::equal(t.begin(), t.end(), solo[k].begin()))
                        << "session " << k << " diverged before it was destroyed";
                    llmkv_session_destroy(live[k]);
                    live[k] = nullptr;
                    outcome[k] = 3;
                }
            }
        } else if (r == 5) {  // park a finished session (its KV may be needed by no one)
            const size_t k = rng() % reqs.size();
            if (live[k] && outcome[k] == 1) {
                const llmkv_status st = llmkv_session_park(live[k]);
                EXPECT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_KV_CAPACITY) << st;
            }
        } else {
            size_t n = 0;
            ASSERT_EQ(llmkv_step(e, ev, 128, &n), LLMKV_OK) << llmkv_last_error();
            for (size_t i = 0; i < n; ++i) {
                const size_t k =
                    size_t(std::find(live.begin(), live.end(), ev[i].session) - live.begin());
                ASSERT_LT(k, live.size());
                if (ev[i].kind == LLMKV_EVENT_DONE && outcome[k] == 0) outcome[k] = 1;
                if (ev[i].kind == LLMKV_EVENT_ERROR) ++errors;
            }
        }
        ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK)
            << "step " << step << ": " << llmkv_last_error();
        if (next == reqs.size() && std::count(outcome.begin(), outcome.end(), 0) == 0) break;
    }
    EXPECT_EQ(errors, 0u);
    EXPECT_EQ(std::count(outcome.begin(), outcome.end(), 0), 0) << "every session ended";
    for (size_t k = 0; k < reqs.size(); ++k) {
        if (!live[k]) continue;
        std::vector<int32_t> t = tokens_of(live[k]);
        if (outcome[k] == 1) {
            EXPECT_EQ(t, solo[k]) << "session " << k;
        } else {
            EXPECT_TRUE(t.size() <= solo[k].size() &&
                        std::equal(t.begin(), t.end(), solo[k].begin()))
                << "cancelled session " << k << " is not a prefix of its solo run";
        }
        llmkv_session_destroy(live[k]);
    }
    llmkv_stats st = stats(e);
    std::printf(
        "outcomes: %ld done, %ld cancelled, %ld destroyed; preemptions %llu, swaps %llu, parks "
        "%llu, "
        "demotions %llu, promotions %llu, prefix hit tokens %llu\n",
        long(std::count(outcome.begin(), outcome.end(), 1)),
        long(std::count(outcome.begin(), outcome.end(), 2)),
        long(std::count(outcome.begin(), outcome.end(), 3)), (unsigned long long)st.preemptions,
        (unsigned long long)st.swaps, (unsigned long long)st.parks,
        (unsigned long long)st.demotions, (unsigned long long)st.promotions,
        (unsigned long long)st.prefix_hit_tokens);
    EXPECT_GT(st.preemptions, 0u);
    EXPECT_GT(st.swaps, 0u);
    EXPECT_GT(st.prefix_hit_tokens + st.promotions, 0u);
    EXPECT_EQ(st.blocks_used, 0u);
    EXPECT_EQ(st.tail_blocks_used, 0u);
    llmkv_engine_destroy(e);
}

TEST_F(EngineHostTierTest, ParkErrorsAndNoOps) {
    llmkv_engine *plain = make_engine(256, 0);
    llmkv_session *s = create(plain, 0);
    turn(s, byte_tokens(30, 1), 4);
    EXPECT_EQ(llmkv_session_park(s), LLMKV_ERR_UNSUPPORTED) << "no host tier";
    EXPECT_NE(std::string(llmkv_last_error()).find("kv_host_bytes"), std::string::npos);
    llmkv_session_destroy(s);
    llmkv_engine_destroy(plain);

    llmkv_engine *e = make_engine(256, 1 << 20);
    s = create(e, 0);
    EXPECT_EQ(llmkv_session_park(s), LLMKV_OK) << "nothing computed: nothing to do";
    EXPECT_EQ(tier_of(s), uint32_t(LLMKV_TIER_DEVICE));
    turn(s, byte_tokens(30, 1), 4);
    EXPECT_EQ(llmkv_session_park(s), LLMKV_ERR_STATE) << "generating";
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    EXPECT_EQ(llmkv_session_park(s), LLMKV_OK);
    EXPECT_EQ(llmkv_session_park(s), LLMKV_OK) << "parking a parked session does nothing";
    EXPECT_EQ(tier_of(s), uint32_t(LLMKV_TIER_HOST));
    // Fork of a parked session brings it back first and continues identically.
    llmkv_session *f = nullptr;
    ASSERT_EQ(llmkv_session_fork(s, &f), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(tier_of(s), uint32_t(LLMKV_TIER_DEVICE));
    EXPECT_EQ(tokens_of(f), tokens_of(s));
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_session_destroy(f);
    llmkv_session_destroy(s);
    llmkv_engine_destroy(e);
}

TEST_F(EngineHostTierTest, HostRegionThatCannotBeAllocatedIsAClearError) {
    llmkv_engine *e = nullptr;
    // Far beyond memory + swap: the region cannot be mapped.
    EXPECT_EQ(try_engine(256, 1ull << 46, &e), LLMKV_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(e, nullptr);
    EXPECT_NE(std::string(llmkv_last_error()).size(), 0u);
}

TEST_F(EngineHostTierTest, SessionsDestroyedAndPreemptedWhileCopiesAreInFlightKeepInvariants) {
    // Random parks (asynchronous copies), turns, steps and destroys; under TSan this is the
    // race check of the copy thread against the engine (scripts/test.sh runs it in a TSan build).
    llmkv_engine *e = make_engine(60, 8ull << 20);
    std::mt19937 rng(2024);
    std::vector<llmkv_session *> live;
    uint32_t made = 0;
    for (int op = 0; op < 400; ++op) {
        uint32_t r = rng() % 10;
        if (r < 2 || live.empty()) {
            if (live.size() < 24) {
                live.push_back(create(e, made++));
                turn(live.back(), byte_tokens(10 + rng() % 90, rng()), 1 + rng() % 12);
            }
        } else if (r < 4) {
            llmkv_session *x = live[rng() % live.size()];
            llmkv_status st = llmkv_session_park(x);
            EXPECT_TRUE(st == LLMKV_OK || st == LLMKV_ERR_STATE || st == LLMKV_ERR_KV_CAPACITY)
                << st;
        } else if (r < 5) {
            size_t k = rng() % live.size();
            llmkv_session_destroy(live[k]);  // possibly right after a park: copy in flight
            live.erase(live.begin() + long(k));
        } else if (r < 6) {
            llmkv_session *x = live[rng() % live.size()];
            llmkv_session_info si;
            si.struct_size = sizeof(si);
            ASSERT_EQ(llmkv_session_get_info(x, &si), LLMKV_OK);
            if (si.state != LLMKV_SESSION_QUEUED && si.state != LLMKV_SESSION_PREFILLING &&
                si.state != LLMKV_SESSION_GENERATING && si.n_tokens + 20 < 1000) {
                turn(x, byte_tokens(1 + rng() % 8, rng()), 1 + rng() % 8);
            }
        } else {
            llmkv_event ev[64];
            size_t n = 0;
            ASSERT_EQ(llmkv_step(e, ev, 64, &n), LLMKV_OK) << llmkv_last_error();
        }
        ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK) << "op " << op << ": " << llmkv_last_error();
    }
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    for (auto *x : live) llmkv_session_destroy(x);
    llmkv_stats st = stats(e);
    EXPECT_EQ(st.host_bytes_used, 0u);
    EXPECT_EQ(st.blocks_used, 0u);
    EXPECT_EQ(st.tail_blocks_used, 0u);
    EXPECT_GT(st.parks, 0u);
    llmkv_engine_destroy(e);
}

}  // namespace
}  // namespace llmkv
