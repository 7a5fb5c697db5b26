// Small helpers shared by the engine tests that drive the C API (GoogleTest assertions
// inside): random byte-token prompts, a session's context, the engine's stats, sessions run
// alone.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "llmkv.h"

namespace llmkv::testing {

// n tokens drawn from the 256 byte tokens of the tiny vocabulary: never a stop token.
inline std::vector<int32_t> byte_tokens(size_t n, uint32_t seed) {
    std::vector<int32_t> t(n);
    std::mt19937 rng(seed);
    for (auto &v : t) v = int32_t(rng() % 256);
    return t;
}

// The session's whole context (prompt and generated tokens).
inline std::vector<int32_t> tokens_of(llmkv_session *s) {
    std::vector<int32_t> t(4096);
    size_t n = 0;
    EXPECT_EQ(llmkv_session_get_tokens(s, t.data(), t.size(), &n), LLMKV_OK);
    t.resize(n);
    return t;
}

inline llmkv_stats stats(llmkv_engine *e) {
    llmkv_stats st;
    st.struct_size = sizeof(st);
    EXPECT_EQ(llmkv_engine_get_stats(e, &st), LLMKV_OK);
    return st;
}

// Session parameters: temperature (0: greedy), top-k 40, the seed.
inline llmkv_session_params sampling(float temperature, uint64_t seed) {
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    sp.sampling.temperature = temperature;
    sp.sampling.top_k = 40;
    sp.sampling.seed = seed;
    return sp;
}

// A session with the prompt appended and n tokens asked for (not run yet).
inline llmkv_session *start(llmkv_engine *e, const llmkv_session_params &sp,
                            const std::vector<int32_t> &prompt, uint32_t n) {
    llmkv_session *s = nullptr;
    EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(llmkv_session_append(s, prompt.data(), prompt.size()), LLMKV_OK);
    EXPECT_EQ(llmkv_session_generate(s, n), LLMKV_OK);
    return s;
}

// The whole context of a session run alone to completion (the session is destroyed).
inline std::vector<int32_t> solo(llmkv_engine *e, const llmkv_session_params &sp,
                                 const std::vector<int32_t> &prompt, uint32_t n) {
    llmkv_session *s = start(e, sp, prompt, n);
    EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
    std::vector<int32_t> t = tokens_of(s);
    llmkv_session_destroy(s);
    return t;
}

}  // namespace llmkv::testing
