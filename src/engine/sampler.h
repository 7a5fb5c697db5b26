// Token sampling: repeat penalty, greedy or temperature with top-k / top-p / min-p, from a
// per-session seeded RNG (xoshiro256**), so a session's draws never depend on others.
#pragma once

#include <cstdint>
#include <vector>

#include "llmkv.h"

namespace llmkv {

class Rng {
public:
    explicit Rng(uint64_t seed);
    uint64_t next();
    // Uniform in [0, 1) with 53 random bits; identical on every platform.
    double uniform();

private:
    uint64_t s_[4];
};

struct Candidate {
    int32_t id;
    float logit;
    float prob;
};

class Sampler {
public:
    Sampler(const llmkv_sampling &params, uint32_t n_vocab);

    // Picks the next token from logits (n_vocab), given the context so far (for the
    // repeat penalty). logits is modified in place.
    int32_t sample(float *logits, const std::vector<int32_t> &context);

    const llmkv_sampling &params() const { return params_; }
    // The RNG's state, to go back to when a step is undone.
    const Rng &rng() const { return rng_; }
    void set_rng(const Rng &r) { rng_ = r; }

private:
    llmkv_sampling params_;
    uint32_t n_vocab_;
    Rng rng_;
    std::vector<Candidate> candidates_;
    std::vector<uint8_t> seen_;
};

// Checks sampling parameters; returns an error message or nullptr when valid.
const char *validate_sampling(const llmkv_sampling &p);

}  // namespace llmkv
