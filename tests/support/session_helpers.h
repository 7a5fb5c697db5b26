// Small helpers shared by the engine tests that drive the C API (GoogleTest assertions
// inside): random byte-token prompts, a session's context, the engine's stats.
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

}  // namespace llmkv::testing
