// What the golden tests of every model share: reading the reference JSON, running the
// forward pass position by position on the CPU backend, and the teacher-forced check
// (tests/golden/README.md explains the tolerances of each model).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "common/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/arch/forward.h"
#include "model/llama_model.h"

namespace llmkv::golden {

inline bool file_exists(const std::string &p) {
    return std::ifstream(p).good();
}

inline std::vector<int32_t> ints(const nlohmann::json &v) {
    return v.get<std::vector<int32_t>>();
}
inline std::vector<double> numbers(const nlohmann::json &v) {
    return v.get<std::vector<double>>();
}

inline nlohmann::json *read_json(const std::string &path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return new nlohmann::json(nlohmann::json::parse(ss.str()));
}

// Logits after each token from first_needed on: the tokens before it are prefilled in spans
// of at most 512 tokens, the rest run one at a time (decode). n_blocks: the pool's 16-token
// blocks (enough for the longest sequence).
inline std::vector<std::vector<float>> logits_per_position(const LlamaModel &model,
                                                           const std::vector<int32_t> &tokens,
                                                           size_t first_needed, uint32_t n_blocks) {
    const LlamaConfig &c = model.config();
    KvGeometry g;
    g.n_layers = c.n_layers;
    g.n_kv_heads = c.n_kv_heads;
    g.head_dim = c.head_dim;
    KvCache cache(g, n_blocks, 1);
    ThreadPool pool(2);
    CpuBackend backend(cache, pool);
    const uint32_t max_tokens = 512;
    std::unique_ptr<Forward> forward = Forward::create(model, backend, max_tokens);
    SessionKv kv;
    std::vector<std::vector<float>> out;
    std::vector<float> logits;
    size_t i = 0;
    while (i < tokens.size()) {
        uint32_t n =
            i + 1 < first_needed ? uint32_t(std::min<size_t>(first_needed - i, max_tokens)) : 1;
        EXPECT_TRUE(cache.reserve(kv, kv.n_tokens + n));
        forward->run({{&kv, tokens.data() + i, n, true}}, logits);
        i += n;
        if (i >= first_needed) out.push_back(logits);
    }
    cache.release(kv);
    return out;
}

// Teacher-forced greedy steps of one reference prompt: fed prompt + generated[:-1], the
// argmax at step s must be the reference token where the reference's top1-top2 margin is at
// least `margin`, and the reference's top-1 or top-2 elsewhere. `all` holds the logits of
// the last generated.size() positions. Prints a summary line tagged `tag`.
inline void expect_teacher_forced(const nlohmann::json &p,
                                  const std::vector<std::vector<float>> &all, double margin,
                                  const char *tag) {
    std::vector<int32_t> generated = ints(p.at("generated_ids"));
    std::vector<double> margins = numbers(p.at("steps").at("top1_top2_margin"));
    ASSERT_EQ(all.size(), generated.size());
    int confident = 0, agreed = 0;
    for (size_t s = 0; s < generated.size(); ++s) {
        int32_t argmax = int32_t(std::max_element(all[s].begin(), all[s].end()) - all[s].begin());
        if (margins[s] >= margin) {
            ++confident;
            EXPECT_EQ(argmax, generated[s])
                << "step " << s << " (reference margin " << margins[s] << ")";
        } else {
            int32_t second = p.at("steps").at("top2_ids").at(s).get<int32_t>();
            EXPECT_TRUE(argmax == generated[s] || argmax == second)
                << "step " << s << ": " << argmax << " is neither the reference top-1 "
                << generated[s] << " nor top-2 " << second;
        }
        agreed += argmax == generated[s];
    }
    std::printf("[%s] %-22s teacher-forced: %d/%zu steps agree (%d confident steps all checked)\n",
                tag, p.at("name").get<std::string>().c_str(), agreed, generated.size(), confident);
}

// The teacher-forced input of a reference prompt: prompt + generated[:-1], and the prompt's length.
inline std::vector<int32_t> teacher_forced_tokens(const nlohmann::json &p, size_t &n_prompt) {
    std::vector<int32_t> tokens = ints(p.at("prompt_ids"));
    std::vector<int32_t> generated = ints(p.at("generated_ids"));
    n_prompt = tokens.size();
    tokens.insert(tokens.end(), generated.begin(), generated.end() - 1);
    return tokens;
}

}  // namespace llmkv::golden
