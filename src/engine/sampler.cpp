// Sampler: the order of operations follows common practice (llama.cpp, vLLM):
// repeat penalty -> greedy | (top-k -> temperature softmax -> top-p -> min-p -> draw).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/float_math.h"

namespace llmkv {

namespace {
uint64_t splitmix64(uint64_t &x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}
}  // namespace

Rng::Rng(uint64_t seed) {
    uint64_t x = seed;
    for (auto &s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
    uint64_t result = rotl(s_[1] * 5, 7) * 9;
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Rng::uniform() {
    return double(next() >> 11) * (1.0 / 9007199254740992.0);
}

const char *validate_sampling(const llmkv_sampling &p) {
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
        return "sampling.temperature must be >= 0";
    if (p.top_k < 0) return "sampling.top_k must be >= 0";
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return "sampling.top_p must be in (0, 1]";
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return "sampling.min_p must be in [0, 1]";
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
        return "sampling.repeat_penalty must be > 0";
    if (p.repeat_last_n < -1) return "sampling.repeat_last_n must be >= -1";
    return nullptr;
}

Sampler::Sampler(const llmkv_sampling &params, uint32_t n_vocab)
    : params_(params), n_vocab_(n_vocab), rng_(params.seed) {}

int32_t Sampler::sample(float *logits, const std::vector<int32_t> &context) {
    const llmkv_sampling &p = params_;
    if (p.repeat_penalty != 1.0f && !context.empty()) {
        size_t window = p.repeat_last_n < 0    ? context.size()
                        : p.repeat_last_n == 0 ? 64
                                               : size_t(p.repeat_last_n);
        size_t start = context.size() > window ? context.size() - window : 0;
        seen_.assign(n_vocab_, 0);
        for (size_t i = start; i < context.size(); ++i) {
            int32_t t = context[i];
            if (t < 0 || uint32_t(t) >= n_vocab_ || seen_[t]) continue;
            seen_[t] = 1;
            logits[t] = logits[t] > 0 ? logits[t] / p.repeat_penalty : logits[t] * p.repeat_penalty;
        }
    }
    if (p.temperature <= 0.0f) {  // greedy; ties go to the lowest id
        int32_t best = 0;
        for (uint32_t i = 1; i < n_vocab_; ++i) {
            if (logits[i] > logits[best]) best = int32_t(i);
        }
        return best;
    }

    // Candidates in id order; only the truncation rules that need an order pay for sorting,
    // and then only for the head of the distribution (the vocabulary is ~50k tokens and a
    // step may sample for dozens of sessions).
    candidates_.resize(n_vocab_);
    for (uint32_t i = 0; i < n_vocab_; ++i) candidates_[i] = {int32_t(i), logits[i], 0.0f};
    auto by_logit = [](const Candidate &a, const Candidate &b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    size_t n = candidates_.size();
    bool sorted = false;
    if (p.top_k > 0 && size_t(p.top_k) < n) {
        std::partial_sort(candidates_.begin(), candidates_.begin() + p.top_k, candidates_.end(),
                          by_logit);
        n = size_t(p.top_k);
        sorted = true;
    }
    // Softmax with temperature over the survivors.
    float max_logit = candidates_[0].logit;
    for (size_t i = 1; i < n; ++i) max_logit = std::max(max_logit, candidates_[i].logit);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        double e = exp_double((double(candidates_[i].logit) - max_logit) / p.temperature);
        candidates_[i].prob = float(e);
        sum += e;
    }
    for (size_t i = 0; i < n; ++i) candidates_[i].prob = float(candidates_[i].prob / sum);
    if (p.min_p > 0.0f) {  // p >= min_p * p_max; p_max is the probability of max_logit
        float threshold = float(1.0 / sum) * p.min_p;
        size_t keep = 0;
        for (size_t i = 0; i < n; ++i) {
            if (candidates_[i].prob >= threshold) candidates_[keep++] = candidates_[i];
        }
        n = keep;
    }
    if (p.top_p < 1.0f) {
        // Sort the head only: grow it until it holds top_p of the mass.
        size_t head = std::min<size_t>(n, 64);
        for (;;) {
            if (!sorted) {
                std::partial_sort(candidates_.begin(), candidates_.begin() + long(head),
                                  candidates_.begin() + long(n), by_logit);
            }
            double cum = 0.0;
            size_t keep = 0;
            for (size_t i = 0; i < head; ++i) {
                cum += candidates_[i].prob;
                if (cum >= p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            if (keep > 0) {
                n = keep;
                break;
            }
            if (head == n) break;  // the whole set is below top_p in rounding: keep it all
            head = std::min(n, head * 4);
        }
    }
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += candidates_[i].prob;
    double r = rng_.uniform() * total;
    double acc = 0.0;
    for (size_t i = 0; i < n; ++i) {
        acc += candidates_[i].prob;
        if (r < acc) return candidates_[i].id;
    }
    return candidates_[n - 1].id;
}

}  // namespace llmkv
