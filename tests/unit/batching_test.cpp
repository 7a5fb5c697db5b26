// Continuous batching on a tiny synthetic model: many concurrent sessions with mixed prompt
// and output lengths equal their solo runs bitwise, with a pool that fits the whole
// workload and with one that fits a quarter of it (preemption by recompute); priorities,
// requests that can never fit, idle sessions giving up their KV, and sessions destroyed
// mid-batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

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

struct Request {
    std::vector<int32_t> prompt;
    uint32_t max_new = 0;
    float temperature = 0.0f;
    uint64_t seed = 0;
    int32_t priority = 0;
};

class EngineBatchingTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        TinyModelSpec spec;
        spec.weight_type = TensorType::Q4_1;
        spec.embd_type = TensorType::Q8_0;
        spec.n_layers = 2;
        spec.n_ctx = 2048;
        path_ = new std::string(testing::temp_path("batching_tiny.gguf"));
        testing::write_tiny_model(spec, *path_);
        // 2 layers x 2 kv heads x 16 dims x 16 tokens x 2 bytes x 2 (K and V), fp16.
        block_bytes_ = 2 * 2 * 16 * kBlockTokens * 2 * 2;
    }
    static void TearDownTestSuite() {
        std::remove(path_->c_str());
        delete path_;
    }

    static llmkv_engine *make_engine(uint64_t kv_blocks, uint32_t max_batch_tokens = 256,
                                     uint32_t flags = 0) {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path_->c_str();
        p.backend = LLMKV_BACKEND_CPU;
        p.n_threads = 2;
        p.kv_block_tokens = kBlockTokens;
        p.max_batch_tokens = max_batch_tokens;
        p.kv_device_bytes = kv_blocks * block_bytes_;
        p.flags = flags;
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        return e;
    }

    // Mixed workload: prompt lengths 10..1500 (log-uniform, both ends included), outputs
    // 16..256, half greedy and half seeded sampling.
    static std::vector<Request> mixed_workload(size_t n, uint32_t seed) {
        std::mt19937 rng(seed);
        std::vector<Request> out;
        for (size_t i = 0; i < n; ++i) {
            Request r;
            size_t len = i == 0   ? 1500
                         : i == 1 ? 10
                                  : size_t(std::exp(std::uniform_real_distribution<double>(
                                        std::log(10.0), std::log(1500.0))(rng)));
            r.prompt = byte_tokens(len, seed * 1000 + uint32_t(i));
            r.max_new = i == 0 ? 256 : i == 1 ? 16 : 16 + rng() % 241;
            r.temperature = i % 2 ? 0.8f : 0.0f;
            r.seed = 7000 + i;
            out.push_back(std::move(r));
        }
        return out;
    }

    static llmkv_session *start(llmkv_engine *e, const Request &r) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = r.temperature;
        sp.sampling.top_k = 40;
        sp.sampling.top_p = 0.95f;
        sp.sampling.seed = r.seed;
        sp.priority = r.priority;
        llmkv_session *s = nullptr;
        EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK) << llmkv_last_error();
        EXPECT_EQ(llmkv_session_append(s, r.prompt.data(), r.prompt.size()), LLMKV_OK)
            << llmkv_last_error();
        EXPECT_EQ(llmkv_session_generate(s, r.max_new), LLMKV_OK) << llmkv_last_error();
        return s;
    }

    // Each request alone on a fresh engine with room for everything.
    static std::vector<std::vector<int32_t>> solo_runs(const std::vector<Request> &reqs) {
        llmkv_engine *e = make_engine(4096);
        std::vector<std::vector<int32_t>> out;
        for (const Request &r : reqs) {
            llmkv_session *s = start(e, r);
            EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
            out.push_back(tokens_of(s));
            llmkv_session_destroy(s);
        }
        llmkv_engine_destroy(e);
        return out;
    }

    struct BatchResult {
        std::vector<std::vector<int32_t>> tokens;
        std::vector<uint32_t> finish_order;  // request index of each DONE, in order
        uint64_t preemptions = 0;
        uint32_t errors = 0;
        double min_utilization = 1.0;  // tokens stored / token slots held, sampled per step
    };

    // All requests at once, stepped until done; checks the pool invariants every step.
    static BatchResult batch_run(llmkv_engine *e, const std::vector<Request> &reqs) {
        std::vector<llmkv_session *> sessions;
        for (const Request &r : reqs) sessions.push_back(start(e, r));
        BatchResult res;
        std::vector<llmkv_event> ev(256);
        for (int guard = 0; guard < 200000; ++guard) {
            size_t n = 0;
            EXPECT_EQ(llmkv_step(e, ev.data(), ev.size(), &n), LLMKV_OK) << llmkv_last_error();
            EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
            for (size_t i = 0; i < n; ++i) {
                auto it = std::find(sessions.begin(), sessions.end(), ev[i].session);
                if (ev[i].kind == LLMKV_EVENT_DONE)
                    res.finish_order.push_back(uint32_t(it - sessions.begin()));
                if (ev[i].kind == LLMKV_EVENT_ERROR) ++res.errors;
            }
            llmkv_stats st = stats(e);
            if (st.blocks_used > 0) {
                double slots = double(st.blocks_used) * kBlockTokens +
                               double(st.tail_blocks_used) * kBlockTokens;
                res.min_utilization =
                    std::min(res.min_utilization, double(st.tokens_stored) / slots);
            }
            if (n == 0 && st.sessions_queued + st.sessions_prefilling + st.sessions_generating == 0)
                break;
        }
        for (llmkv_session *s : sessions) res.tokens.push_back(tokens_of(s));
        res.preemptions = stats(e).preemptions;
        for (llmkv_session *s : sessions) llmkv_session_destroy(s);
        return res;
    }

    static uint32_t blocks_for(const std::vector<Request> &reqs) {
        uint32_t total = 0;
        for (const Request &r : reqs)
            total += uint32_t((r.prompt.size() + r.max_new) / kBlockTokens);
        return total;
    }

    static std::string *path_;
    static uint64_t block_bytes_;
};
std::string *EngineBatchingTest::path_ = nullptr;
uint64_t EngineBatchingTest::block_bytes_ = 0;

TEST_F(EngineBatchingTest, SixtyFourMixedSessionsEqualTheirSoloRunsBitwise) {
    std::vector<Request> reqs = mixed_workload(64, 1);
    std::vector<std::vector<int32_t>> solo = solo_runs(reqs);
    llmkv_engine *e = make_engine(blocks_for(reqs) + 64);
    BatchResult res = batch_run(e, reqs);
    ASSERT_EQ(res.tokens.size(), reqs.size());
    EXPECT_EQ(res.finish_order.size(), reqs.size()) << "every session finishes";
    EXPECT_EQ(res.errors, 0u);
    EXPECT_EQ(res.preemptions, 0u) << "the pool holds the whole workload";
    for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(res.tokens[i], solo[i])
            << "session " << i << " (prompt " << reqs[i].prompt.size() << ", "
            << (reqs[i].temperature > 0 ? "seeded" : "greedy") << ")";
    }
    // Sessions hold sealed blocks only for full blocks: at most one partial tail slot each.
    EXPECT_GT(res.min_utilization, 0.5);
    llmkv_stats st = stats(e);
    EXPECT_EQ(st.blocks_used, 0u);
    EXPECT_EQ(st.tail_blocks_used, 0u);
    llmkv_engine_destroy(e);
}

TEST_F(EngineBatchingTest, PoolThatFitsAQuarterOfTheWorkloadCompletesItWithTheSameTokens) {
    std::vector<Request> reqs = mixed_workload(32, 2);
    std::vector<std::vector<int32_t>> solo = solo_runs(reqs);
    const uint32_t quarter = blocks_for(reqs) / 4;
    // The largest request (1500 + 256 tokens) must fit alone.
    ASSERT_GE(quarter, (1500u + 256u) / kBlockTokens + 1);
    for (uint32_t flags : {0u, uint32_t(LLMKV_ENGINE_PREFIX_CACHE)}) {
        llmkv_engine *e = make_engine(quarter, 256, flags);
        BatchResult res = batch_run(e, reqs);
        EXPECT_EQ(res.finish_order.size(), reqs.size())
            << "every session finishes (flags " << flags << ")";
        EXPECT_EQ(res.errors, 0u);
        EXPECT_GT(res.preemptions, 0u) << "a quarter-size pool must preempt";
        for (size_t i = 0; i < reqs.size(); ++i) {
            EXPECT_EQ(res.tokens[i], solo[i]) << "session " << i << " (flags " << flags << ")";
        }
        llmkv_stats st = stats(e);
        EXPECT_EQ(st.blocks_used, 0u);
        EXPECT_EQ(st.blocks_free + st.blocks_cached, st.blocks_total);
        llmkv_engine_destroy(e);
    }
}

TEST_F(EngineBatchingTest, HigherPriorityRunsFirstAndIsPreemptedLast) {
    // Three long generations that cannot all fit: the high-priority one, though submitted
    // last, never gives up its blocks and finishes first.
    std::vector<Request> reqs;
    for (int i = 0; i < 3; ++i) {
        Request r;
        r.prompt = byte_tokens(200, 50 + i);
        r.max_new = 200;
        r.priority = i == 2 ? 5 : 0;
        reqs.push_back(r);
    }
    std::vector<std::vector<int32_t>> solo = solo_runs(reqs);
    llmkv_engine *e = make_engine(35);  // one request needs 25 blocks at its end
    std::vector<llmkv_session *> s;
    s.push_back(start(e, reqs[0]));
    s.push_back(start(e, reqs[1]));
    llmkv_event ev[64];
    size_t n = 0;
    for (int i = 0; i < 30; ++i) ASSERT_EQ(llmkv_step(e, ev, 64, &n), LLMKV_OK);
    s.push_back(start(e, reqs[2]));
    std::vector<llmkv_session *> done;
    uint64_t high_preempted_check = 0;
    for (int guard = 0; guard < 10000; ++guard) {
        ASSERT_EQ(llmkv_step(e, ev, 64, &n), LLMKV_OK);
        ASSERT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
        llmkv_session_info si;
        si.struct_size = sizeof(si);
        ASSERT_EQ(llmkv_session_get_info(s[2], &si), LLMKV_OK);
        // Until it finishes, the high-priority session's computed KV only grows.
        if (std::find(done.begin(), done.end(), s[2]) == done.end()) {
            EXPECT_GE(si.n_cached, high_preempted_check);
            high_preempted_check = si.n_cached;
        }
        for (size_t i = 0; i < n; ++i) {
            ASSERT_NE(ev[i].kind, uint32_t(LLMKV_EVENT_ERROR));
            if (ev[i].kind == LLMKV_EVENT_DONE) done.push_back(ev[i].session);
        }
        if (done.size() == 3) break;
    }
    ASSERT_EQ(done.size(), 3u);
    EXPECT_EQ(done[0], s[2]) << "the high-priority session finishes first";
    EXPECT_GT(stats(e).preemptions, 0u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(tokens_of(s[i]), solo[i]) << "session " << i;
    for (auto *x : s) llmkv_session_destroy(x);
    llmkv_engine_destroy(e);
}

TEST_F(EngineBatchingTest, RequestThatCanNeverFitFailsAndTheQueueBehindItMoves) {
    std::vector<Request> reqs(4);
    for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].prompt = byte_tokens(i == 0 ? 700 : 60, 80 + uint32_t(i));
        reqs[i].max_new = 20;
    }
    std::vector<std::vector<int32_t>> solo = solo_runs(reqs);
    llmkv_engine *e = make_engine(30);  // 480 tokens: the 700-token prompt can never fit
    std::vector<llmkv_session *> s;
    for (const Request &r : reqs) s.push_back(start(e, r));
    std::vector<llmkv_event> events;
    ASSERT_EQ(llmkv_run(
                  e,
                  [](const llmkv_event *ev, void *u) {
                      static_cast<std::vector<llmkv_event> *>(u)->push_back(*ev);
                  },
                  &events),
              LLMKV_OK);
    uint32_t errors = 0, dones = 0;
    for (const llmkv_event &ev : events) {
        if (ev.kind == LLMKV_EVENT_ERROR) {
            ++errors;
            EXPECT_EQ(ev.session, s[0]);
            EXPECT_EQ(ev.status, LLMKV_ERR_KV_CAPACITY);
        }
        if (ev.kind == LLMKV_EVENT_DONE) ++dones;
    }
    EXPECT_EQ(errors, 1u);
    EXPECT_EQ(dones, 3u);
    for (size_t i = 1; i < reqs.size(); ++i) EXPECT_EQ(tokens_of(s[i]), solo[i]) << "session " << i;
    // The failed session keeps what it computed and accepts a smaller request later.
    llmkv_session_info si;
    si.struct_size = sizeof(si);
    ASSERT_EQ(llmkv_session_get_info(s[0], &si), LLMKV_OK);
    EXPECT_LE(si.n_tokens, 700u);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    for (auto *x : s) llmkv_session_destroy(x);
    llmkv_engine_destroy(e);
}

TEST_F(EngineBatchingTest, IdleSessionGivesUpItsKvUnderPressureAndContinuesIdentically) {
    Request first;
    first.prompt = byte_tokens(300, 11);
    first.max_new = 30;
    std::vector<int32_t> turn2 = byte_tokens(40, 12);
    // Reference: two turns with no pressure.
    std::vector<int32_t> reference;
    {
        llmkv_engine *e = make_engine(4096);
        llmkv_session *s = start(e, first);
        ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        ASSERT_EQ(llmkv_session_append(s, turn2.data(), turn2.size()), LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(s, 30), LLMKV_OK);
        ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        reference = tokens_of(s);
        llmkv_session_destroy(s);
        llmkv_engine_destroy(e);
    }
    llmkv_engine *e = make_engine(40);
    llmkv_session *s = start(e, first);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    // Another session needs most of the pool while the first is idle.
    Request other;
    other.prompt = byte_tokens(500, 13);
    other.max_new = 20;
    llmkv_session *o = start(e, other);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    EXPECT_GT(stats(e).preemptions, 0u);
    llmkv_session_info si;
    si.struct_size = sizeof(si);
    ASSERT_EQ(llmkv_session_get_info(s, &si), LLMKV_OK);
    EXPECT_EQ(si.n_cached, 0u) << "the idle session's KV went to the other session";
    EXPECT_EQ(si.state, uint32_t(LLMKV_SESSION_FINISHED))
        << "an idle session whose KV was dropped stays idle";
    llmkv_session_destroy(o);
    ASSERT_EQ(llmkv_session_append(s, turn2.data(), turn2.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(s, 30), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    EXPECT_EQ(tokens_of(s), reference);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_session_destroy(s);
    llmkv_engine_destroy(e);
}

TEST_F(EngineBatchingTest, DestroyAndCancelMidBatchReturnBlocksAtOnceAndLeaveOthersAlone) {
    std::vector<Request> reqs = mixed_workload(8, 3);
    for (Request &r : reqs) r.max_new = 40;
    std::vector<std::vector<int32_t>> solo = solo_runs(reqs);
    llmkv_engine *e = make_engine(4096);
    std::vector<llmkv_session *> s;
    for (const Request &r : reqs) s.push_back(start(e, r));
    llmkv_event ev[64];
    size_t n = 0;
    for (int i = 0; i < 12; ++i) ASSERT_EQ(llmkv_step(e, ev, 64, &n), LLMKV_OK);
    llmkv_stats before = stats(e);
    llmkv_session_info si;
    si.struct_size = sizeof(si);
    ASSERT_EQ(llmkv_session_get_info(s[0], &si), LLMKV_OK);
    ASSERT_GT(si.n_cached, kBlockTokens);
    llmkv_session_destroy(s[0]);
    s[0] = nullptr;
    llmkv_stats after = stats(e);
    EXPECT_EQ(after.blocks_used, before.blocks_used - si.n_cached / kBlockTokens)
        << "a destroyed session's blocks return to the pool at once";
    EXPECT_EQ(after.tail_blocks_used, before.tail_blocks_used - 1);
    ASSERT_EQ(llmkv_session_cancel(s[1]), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
    for (size_t i = 2; i < reqs.size(); ++i) EXPECT_EQ(tokens_of(s[i]), solo[i]) << "session " << i;
    std::vector<int32_t> cancelled = tokens_of(s[1]);
    ASSERT_LE(cancelled.size(), solo[1].size());
    EXPECT_TRUE(std::equal(cancelled.begin(), cancelled.end(), solo[1].begin()))
        << "cancel keeps a prefix of the solo run";
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    for (auto *x : s) {
        if (x) llmkv_session_destroy(x);
    }
    llmkv_engine_destroy(e);
}

}  // namespace
}  // namespace llmkv
