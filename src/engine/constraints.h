// What a session asks of generation besides sampling: stop strings matched on the
// detokenized stream, logit bias, a minimum length, and a grammar whose token mask keeps the
// output a prefix of its language. The engine applies them around Sampler::sample.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "llmkv.h"
#include "model/tokenizer.h"

namespace llmkv {

// Stop strings over a byte stream: feed() passes on the bytes that can no longer be part of a
// match (the caller may show them), holds back the longest tail that could still begin one,
// and reports a complete match (the bytes from its start on are dropped). Without stop
// strings the bytes go straight through.
class StopStrings {
public:
    StopStrings() = default;
    explicit StopStrings(std::vector<std::string> strings);

    bool empty() const { return strings_.empty(); }
    // Appends bytes; pushes what is released to out. After a match, matched() >= 0 and the
    // released bytes end where the earliest match begins.
    void feed(std::string_view bytes, Utf8Stream &out);
    // End of generation without a match: everything held goes to out.
    void flush(Utf8Stream &out);
    void reset();
    int matched() const { return matched_; }
    // Where the stream stands, to go back to when a step is undone.
    struct Mark {
        std::string held;
        int matched = -1;
    };
    Mark mark() const { return {held_, matched_}; }
    void rollback(const Mark &m) {
        held_ = m.held;
        matched_ = m.matched;
    }
    size_t held() const { return held_.size(); }
    const std::vector<std::string> &strings() const { return strings_; }

private:
    std::vector<std::string> strings_;
    size_t max_len_ = 0;
    std::string held_;
    int matched_ = -1;
};

// A session's grammar: the shared masker (one per distinct grammar per engine, holding the
// caches) and where this session's output stands in it.
struct GrammarState {
    std::shared_ptr<TokenMasker> masker;
    TokenMasker::State state = 0;

    explicit operator bool() const { return masker != nullptr; }
    void restart() {
        if (masker) state = masker->start();
    }
};

// Per-step counters of constrained sampling (the engine sums them into llmkv_stats).
struct ConstraintCounters {
    uint64_t mask_ns = 0;
    uint64_t masks = 0;
    uint64_t mask_cache_hits = 0;
};

// The session's constraints on the next token.
struct Constraints {
    std::vector<int32_t>
        stop_tokens;                // the session's, besides the model's end-of-generation tokens
    std::vector<int32_t> stop_ids;  // end-of-generation ids and stop_tokens, sorted, unique
    std::vector<std::pair<int32_t, float>> bias;  // token -> additive bias (-inf bans)
    uint32_t min_new_tokens = 0;
    GrammarState grammar;

    // Sets stop_tokens and stop_ids (eog: the model's end-of-generation ids).
    void set_stop_tokens(std::vector<int32_t> tokens, const std::vector<int32_t> &eog);
    bool is_stop_token(int32_t id) const;

    // Applies the bias, the minimum-length ban and the grammar mask to logits (n_vocab).
    // n_generated: tokens generated so far by this generate(). Returns false when no token
    // may be sampled (every logit is -inf).
    bool apply(float *logits, uint32_t n_vocab, uint32_t n_generated, ConstraintCounters &counters);

    // Advances the grammar over a sampled token that is not a stop token. Returns false when
    // the token leaves the language (cannot happen for a token apply() allowed).
    bool advance(const Tokenizer &tok, int32_t id);

private:
    std::vector<std::pair<int32_t, float>> saved_;  // scratch of apply()
};

// Checks and copies the generation fields of session params (stop strings, logit bias).
// Throws INVALID_ARGUMENT naming the field.
std::vector<std::string> copy_stop_strings(const llmkv_session_params &p);
std::vector<std::pair<int32_t, float>> copy_logit_bias(const llmkv_session_params &p,
                                                       uint32_t n_vocab);

}  // namespace llmkv
