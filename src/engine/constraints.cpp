// Constraints around sampling: stop strings, logit bias, minimum length, grammar masks.
#include "engine/constraints.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "model/tokenizer.h"

namespace llmkv {

namespace {
constexpr uint32_t kMaxStopStrings = 64;
constexpr size_t kMaxStopStringBytes = 256;
}  // namespace

StopStrings::StopStrings(std::vector<std::string> strings) : strings_(std::move(strings)) {
    for (const std::string &s : strings_) max_len_ = std::max(max_len_, s.size());
}

void StopStrings::feed(std::string_view bytes, Utf8Stream &out) {
    if (matched_ >= 0) return;
    if (strings_.empty()) {
        out.push(bytes);
        return;
    }
    held_.append(bytes.data(), bytes.size());
    size_t best = std::string::npos;
    for (size_t i = 0; i < strings_.size(); ++i) {
        size_t pos = held_.find(strings_[i]);
        if (pos < best) {
            best = pos;
            matched_ = int(i);
        }
    }
    if (matched_ >= 0) {
        out.push(std::string_view(held_).substr(0, best));
        held_.clear();
        return;
    }
    // Hold back the longest tail that is a proper prefix of some stop string.
    size_t keep = 0;
    for (size_t k = std::min(held_.size(), max_len_ - 1); k > 0 && keep == 0; --k) {
        std::string_view tail(held_.data() + held_.size() - k, k);
        for (const std::string &s : strings_) {
            if (s.size() > k && std::memcmp(s.data(), tail.data(), k) == 0) {
                keep = k;
                break;
            }
        }
    }
    out.push(std::string_view(held_).substr(0, held_.size() - keep));
    held_.erase(0, held_.size() - keep);
}

void StopStrings::flush(Utf8Stream &out) {
    if (matched_ < 0) out.push(held_);
    held_.clear();
}

void StopStrings::reset() {
    held_.clear();
    matched_ = -1;
}

void Constraints::set_stop_tokens(std::vector<int32_t> tokens, const std::vector<int32_t> &eog) {
    stop_tokens = std::move(tokens);
    stop_ids = eog;
    stop_ids.insert(stop_ids.end(), stop_tokens.begin(), stop_tokens.end());
    std::sort(stop_ids.begin(), stop_ids.end());
    stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
}

bool Constraints::is_stop_token(int32_t id) const {
    return std::binary_search(stop_ids.begin(), stop_ids.end(), id);
}

bool Constraints::apply(float *logits, uint32_t n_vocab, uint32_t n_generated,
                        ConstraintCounters &counters) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    bool may_ban = false;
    for (const auto &[id, b] : bias) {
        logits[id] += b;
        may_ban |= std::isinf(b);
    }
    if (!grammar && n_generated >= min_new_tokens && !may_ban) return true;

    // End-of-generation and stop tokens: by the grammar's completeness and the minimum length.
    bool stops_allowed = n_generated >= min_new_tokens;
    if (grammar) {
        auto t0 = std::chrono::steady_clock::now();
        TokenMasker &m = *grammar.masker;
        bool complete = m.accepting(grammar.state);
        if (complete && !m.can_continue(grammar.state))
            stops_allowed = true;  // nothing else may follow
        if (!complete) stops_allowed = false;
        uint64_t hits_before = m.stats().mask_hits;
        const uint64_t *mask = m.mask(grammar.state);
        counters.mask_cache_hits += m.stats().mask_hits - hits_before;
        // Stop tokens are decided here, not by the mask (which never allows control tokens).
        saved_.clear();
        if (stops_allowed) {
            for (int32_t id : stop_ids) saved_.emplace_back(id, logits[id]);
        }
        for (uint32_t w = 0; w * 64 < n_vocab; ++w) {
            uint64_t bits = mask[w];
            if (bits == ~uint64_t(0)) continue;
            uint32_t end = std::min<uint32_t>(n_vocab, (w + 1) * 64);
            for (uint32_t i = w * 64; i < end; ++i) {
                if (!((bits >> (i & 63)) & 1)) logits[i] = kNegInf;
            }
        }
        for (int32_t id : stop_ids) logits[id] = kNegInf;
        for (const auto &[id, l] : saved_) logits[id] = l;
        ++counters.masks;
        counters.mask_ns += uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now() - t0)
                                         .count());
    } else if (!stops_allowed) {
        for (int32_t id : stop_ids) logits[id] = kNegInf;
    }
    for (uint32_t i = 0; i < n_vocab; ++i) {
        if (logits[i] > kNegInf) return true;
    }
    return false;
}

bool Constraints::advance(const Tokenizer &tok, int32_t id) {
    if (!grammar) return true;
    grammar.state = grammar.masker->advance(grammar.state, tok.token_bytes(id));
    return grammar.state != TokenMasker::kDead;
}

std::vector<std::string> copy_stop_strings(const llmkv_session_params &p) {
    if (p.n_stop_strings == 0) return {};
    if (!p.stop_strings)
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "session_params.stop_strings is NULL with n_stop_strings = %u", p.n_stop_strings);
    if (p.n_stop_strings > kMaxStopStrings) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "session_params.n_stop_strings = %u exceeds %u",
             p.n_stop_strings, kMaxStopStrings);
    }
    std::vector<std::string> out;
    for (uint32_t i = 0; i < p.n_stop_strings; ++i) {
        const char *s = p.stop_strings[i];
        if (!s) fail(LLMKV_ERR_INVALID_ARGUMENT, "session_params.stop_strings[%u] is NULL", i);
        size_t len =
            p.stop_string_lengths ? p.stop_string_lengths[i] : strnlen(s, kMaxStopStringBytes + 1);
        if (len == 0 || len > kMaxStopStringBytes) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "session_params.stop_strings[%u] has %zu bytes; 1..%zu are allowed", i, len,
                 kMaxStopStringBytes);
        }
        out.emplace_back(s, len);
    }
    return out;
}

std::vector<std::pair<int32_t, float>> copy_logit_bias(const llmkv_session_params &p,
                                                       uint32_t n_vocab) {
    if (p.n_logit_bias == 0) return {};
    if (!p.logit_bias)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "session_params.logit_bias is NULL with n_logit_bias = %u",
             p.n_logit_bias);
    if (p.n_logit_bias > n_vocab) {
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "session_params.n_logit_bias = %u exceeds the vocabulary (%u)", p.n_logit_bias,
             n_vocab);
    }
    std::vector<std::pair<int32_t, float>> out;
    for (uint32_t i = 0; i < p.n_logit_bias; ++i) {
        const llmkv_logit_bias &b = p.logit_bias[i];
        if (b.token < 0 || uint32_t(b.token) >= n_vocab) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "session_params.logit_bias[%u].token = %d is outside the vocabulary (%u)", i,
                 b.token, n_vocab);
        }
        if (std::isnan(b.bias) || b.bias == std::numeric_limits<float>::infinity()) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "session_params.logit_bias[%u].bias must be finite or -INFINITY", i);
        }
        out.emplace_back(b.token, b.bias);
    }
    return out;
}

}  // namespace llmkv
