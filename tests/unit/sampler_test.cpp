// Sampler: greedy, truncation rules (top-k, top-p, min-p), repeat penalty, and the
// per-session RNG's reproducibility.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace llmkv {
namespace {

llmkv_sampling defaults() {
    llmkv_sampling s{};
    s.temperature = 0.0f;
    s.top_p = 1.0f;
    s.repeat_penalty = 1.0f;
    return s;
}

TEST(Sampler, GreedyPicksTheArgmaxAndBreaksTiesByLowestId) {
    Sampler s(defaults(), 5);
    std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
    EXPECT_EQ(s.sample(logits.data(), {}), 1);
}

TEST(Sampler, TopKOneEqualsGreedyAtAnyTemperature) {
    llmkv_sampling p = defaults();
    p.temperature = 5.0f;
    p.top_k = 1;
    p.seed = 9;
    Sampler s(p, 4);
    for (int i = 0; i < 50; ++i) {
        std::vector<float> logits = {0.5f, 0.4f, 2.0f, 1.9f};
        EXPECT_EQ(s.sample(logits.data(), {}), 2);
    }
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
    // Probabilities at temperature 1: about 0.665, 0.245, 0.090 for logits 2, 1, 0.
    llmkv_sampling p = defaults();
    p.temperature = 1.0f;
    p.top_p = 0.8f;
    p.seed = 1;
    Sampler s(p, 3);
    std::map<int, int> seen;
    for (int i = 0; i < 2000; ++i) {
        std::vector<float> logits = {2.0f, 1.0f, 0.0f};
        ++seen[s.sample(logits.data(), {})];
    }
    EXPECT_EQ(seen.count(2), 0u);
    EXPECT_GT(seen[0], 1300);
    EXPECT_GT(seen[1], 400);
}

TEST(Sampler, MinPDropsTokensBelowTheFractionOfTheBest) {
    llmkv_sampling p = defaults();
    p.temperature = 1.0f;
    p.min_p = 0.2f;  // keeps tokens with prob >= 0.2 * 0.665 = 0.133: ids 0 and 1
    p.seed = 2;
    Sampler s(p, 3);
    for (int i = 0; i < 500; ++i) {
        std::vector<float> logits = {2.0f, 1.0f, 0.0f};
        EXPECT_NE(s.sample(logits.data(), {}), 2);
    }
}

TEST(Sampler, DrawsFollowTheSoftmaxDistribution) {
    llmkv_sampling p = defaults();
    p.temperature = 1.0f;
    p.seed = 3;
    Sampler s(p, 3);
    std::map<int, int> seen;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
        std::vector<float> logits = {2.0f, 1.0f, 0.0f};
        ++seen[s.sample(logits.data(), {})];
    }
    const double z = std::exp(2.0) + std::exp(1.0) + 1.0;
    EXPECT_NEAR(seen[0] / double(n), std::exp(2.0) / z, 0.015);
    EXPECT_NEAR(seen[1] / double(n), std::exp(1.0) / z, 0.015);
    EXPECT_NEAR(seen[2] / double(n), 1.0 / z, 0.015);
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogitsOfSeenTokens) {
    llmkv_sampling p = defaults();
    p.repeat_penalty = 2.0f;
    Sampler s(p, 4);
    std::vector<float> logits = {4.0f, 3.0f, -1.0f, 0.5f};
    // Token 0 was seen: 4 -> 2, so token 1 (3.0) wins greedy.
    EXPECT_EQ(s.sample(logits.data(), {0, 2}), 1);
    EXPECT_FLOAT_EQ(logits[0], 2.0f);
    EXPECT_FLOAT_EQ(logits[2], -2.0f);
    EXPECT_FLOAT_EQ(logits[3], 0.5f);
}

TEST(Sampler, RepeatPenaltyOnlyLooksAtTheLastNTokens) {
    llmkv_sampling p = defaults();
    p.repeat_penalty = 10.0f;
    p.repeat_last_n = 2;
    Sampler s(p, 3);
    std::vector<float> logits = {5.0f, 1.0f, 1.0f};
    EXPECT_EQ(s.sample(logits.data(), {0, 1, 2}), 0) << "token 0 is outside the window";
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
    llmkv_sampling p = defaults();
    p.temperature = 1.5f;
    auto draw = [&](uint64_t seed) {
        p.seed = seed;
        Sampler s(p, 8);
        std::vector<int32_t> out;
        for (int i = 0; i < 64; ++i) {
            std::vector<float> logits = {0, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
            out.push_back(s.sample(logits.data(), {}));
        }
        return out;
    };
    EXPECT_EQ(draw(7), draw(7));
    EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, RngIsTheSameOnEveryPlatform) {
    // xoshiro256** seeded by splitmix64(0): known answers (checked against an independent
    // implementation), so a port or a compiler change cannot silently alter seeded output.
    Rng rng(0);
    EXPECT_EQ(rng.next(), 11091344671253066420ull);
    EXPECT_EQ(rng.next(), 13793997310169335082ull);
    double u = Rng(123).uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
}

TEST(Sampler, ValidationRejectsOutOfRangeParameters) {
    llmkv_sampling p = defaults();
    EXPECT_EQ(validate_sampling(p), nullptr);
    p.temperature = -1;
    EXPECT_NE(validate_sampling(p), nullptr);
    p = defaults();
    p.top_p = 0;
    EXPECT_NE(validate_sampling(p), nullptr);
    p = defaults();
    p.min_p = 1.5f;
    EXPECT_NE(validate_sampling(p), nullptr);
    p = defaults();
    p.repeat_penalty = 0;
    EXPECT_NE(validate_sampling(p), nullptr);
    p = defaults();
    p.top_k = -3;
    EXPECT_NE(validate_sampling(p), nullptr);
    p = defaults();
    p.temperature = NAN;
    EXPECT_NE(validate_sampling(p), nullptr);
}

}  // namespace
}  // namespace llmkv
