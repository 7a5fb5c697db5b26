// Continuous batching on the real model (SmolLM2): 64 concurrent sessions with prompts of
// 10 to 600 tokens and one of 1,500, outputs of 16 to 128 (256 for the longest prompt), half
// greedy and half seeded sampling, all
// finish and each equals its solo run token for token; the same workload on a pool that
// fits a quarter of it completes with preemption and the same tokens. Skipped (with the
// reason) when the model file is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "llmkv.h"

namespace {

std::string model_path() {
    const char *env = std::getenv("LLMKV_MODEL");
    if (env && *env) return env;
    return LLMKV_TEST_FIXTURES_DIR "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct Request {
    std::vector<int32_t> prompt;
    uint32_t max_new = 0;
    bool sampled = false;
};

llmkv_engine *make_engine(uint64_t kv_bytes) {
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    const std::string path = model_path();
    p.model_path = path.c_str();
    p.backend = LLMKV_BACKEND_CPU;
    p.kv_device_bytes = kv_bytes;
    p.flags = 0;
    llmkv_engine *e = nullptr;
    EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
    return e;
}

// Text of ordinary words, tokenized and cut to n tokens.
std::vector<int32_t> text_tokens(llmkv_engine *e, size_t n, std::mt19937 &rng) {
    static const char *words[] = {"the",   "village", "river",  "old",   "miller", "walked",
                                  "to",    "market",  "with",   "bread", "and",    "a",
                                  "story", "about",   "winter", "stars"};
    std::string text = "Tell me";
    std::vector<int32_t> ids;
    size_t count = 0;
    while (count < n) {
        for (int i = 0; i < 64; ++i) {
            text += " ";
            text += words[rng() % 16];
        }
        text += ".";
        llmkv_tokenize(e, text.data(), text.size(), 0, nullptr, 0, &count);
    }
    ids.resize(count);
    llmkv_tokenize(e, text.data(), text.size(), 0, ids.data(), ids.size(), &count);
    ids.resize(n);
    return ids;
}

llmkv_session *start(llmkv_engine *e, const Request &r, uint64_t seed) {
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    sp.sampling.temperature = r.sampled ? 0.8f : 0.0f;
    sp.sampling.top_k = 40;
    sp.sampling.top_p = 0.95f;
    sp.sampling.seed = seed;
    llmkv_session *s = nullptr;
    EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(llmkv_session_append(s, r.prompt.data(), r.prompt.size()), LLMKV_OK)
        << llmkv_last_error();
    EXPECT_EQ(llmkv_session_generate(s, r.max_new), LLMKV_OK) << llmkv_last_error();
    return s;
}

std::vector<int32_t> tokens_of(llmkv_session *s) {
    std::vector<int32_t> t(4096);
    size_t n = 0;
    EXPECT_EQ(llmkv_session_get_tokens(s, t.data(), t.size(), &n), LLMKV_OK);
    t.resize(n);
    return t;
}

// All requests at once; returns each session's context and counts DONE / ERROR events.
std::vector<std::vector<int32_t>> run_together(llmkv_engine *e, const std::vector<Request> &reqs,
                                               uint32_t *done, uint32_t *errors) {
    std::vector<llmkv_session *> s;
    for (size_t i = 0; i < reqs.size(); ++i) s.push_back(start(e, reqs[i], 1000 + i));
    struct Counts {
        uint32_t done = 0, errors = 0;
    } counts;
    EXPECT_EQ(llmkv_run(
                  e,
                  [](const llmkv_event *ev, void *u) {
                      auto *c = static_cast<Counts *>(u);
                      if (ev->kind == LLMKV_EVENT_DONE) ++c->done;
                      if (ev->kind == LLMKV_EVENT_ERROR) ++c->errors;
                  },
                  &counts),
              LLMKV_OK);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    std::vector<std::vector<int32_t>> out;
    for (auto *x : s) {
        out.push_back(tokens_of(x));
        llmkv_session_destroy(x);
    }
    *done = counts.done;
    *errors = counts.errors;
    return out;
}

TEST(SmolLM2Batching, SixtyFourMixedSessionsEqualTheirSoloRunsAlsoOnAQuarterPool) {
    if (!std::ifstream(model_path()).good()) {
        GTEST_SKIP() << "model not found at " << model_path()
                     << " (set LLMKV_MODEL or run scripts/fetch_model.sh)";
    }
    llmkv_engine *e = make_engine(0);
    ASSERT_NE(e, nullptr);
    std::mt19937 rng(2026);
    std::vector<Request> reqs;
    uint64_t tokens_total = 0;
    for (uint32_t i = 0; i < 64; ++i) {
        Request r;
        const size_t len = i == 0   ? 1500
                           : i == 1 ? 10
                                    : size_t(std::exp(std::uniform_real_distribution<double>(
                                          std::log(10.0), std::log(600.0))(rng)));
        r.prompt = text_tokens(e, len, rng);
        r.max_new = i == 0 ? 256 : i == 1 ? 16 : 16 + rng() % 113;
        r.sampled = i % 2 == 1;
        tokens_total += r.prompt.size() + r.max_new;
        reqs.push_back(std::move(r));
    }
    std::vector<std::vector<int32_t>> solo;
    for (size_t i = 0; i < reqs.size(); ++i) {
        llmkv_session *s = start(e, reqs[i], 1000 + i);
        ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        solo.push_back(tokens_of(s));
        llmkv_session_destroy(s);
    }
    uint32_t done = 0, errors = 0;
    std::vector<std::vector<int32_t>> together = run_together(e, reqs, &done, &errors);
    EXPECT_EQ(done, 64u);
    EXPECT_EQ(errors, 0u);
    for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(together[i], solo[i])
            << "session " << i << " (" << reqs[i].prompt.size() << "-token prompt, "
            << (reqs[i].sampled ? "seeded" : "greedy") << ")";
    }
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
    llmkv_engine_destroy(e);

    // A pool for a quarter of the workload's final KV (still more than the largest session).
    const uint64_t block_bytes = info.kv_bytes_per_token_device * info.kv_block_tokens;
    const uint64_t blocks = tokens_total / info.kv_block_tokens / 4;
    ASSERT_GT(blocks, (1500u + 256u) / info.kv_block_tokens + 1);
    llmkv_engine *small = make_engine(blocks * block_bytes);
    ASSERT_NE(small, nullptr);
    std::vector<std::vector<int32_t>> squeezed = run_together(small, reqs, &done, &errors);
    EXPECT_EQ(done, 64u);
    EXPECT_EQ(errors, 0u);
    llmkv_stats st;
    st.struct_size = sizeof(st);
    ASSERT_EQ(llmkv_engine_get_stats(small, &st), LLMKV_OK);
    EXPECT_GT(st.preemptions, 0u) << "a quarter-size pool must preempt";
    for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(squeezed[i], solo[i]) << "session " << i << " (quarter pool)";
    llmkv_engine_destroy(small);
}

}  // namespace
