// Grammar masking cost on a real vocabulary: the tokenizer of the model in LLMKV_MODEL, a
// JSON-schema grammar, random walks over allowed tokens; prints mask() µs per state for the
// first visit (cold: the trie walk) and for revisits (cached), and the per-token advance.
// Without a model it prints why and exits 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/grammar.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

const char *kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer"},
    "email": {"type": "string"},
    "role": {"enum": ["admin", "user", "guest"]},
    "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 8},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": ["string", "null"]}},
      "required": ["city"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}},
    "active": {"type": "boolean"}
  },
  "required": ["name", "age", "role", "active"]
})";

struct Summary {
    std::vector<double> v;
    void add(double x) { v.push_back(x); }
    void print(const char *what) {
        if (v.empty()) {
            printf("  %-28s (none)\n", what);
            return;
        }
        std::sort(v.begin(), v.end());
        double sum = 0;
        for (double x : v) sum += x;
        printf("  %-28s n=%-6zu mean %9.2f  p50 %9.2f  p99 %9.2f  max %9.2f µs\n", what, v.size(),
               sum / v.size(), v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)],
               v.back());
    }
};

}  // namespace

int main() {
    const char *model = getenv("LLMKV_MODEL");
    if (!model || !*model) {
        printf(
            "grammar_bench: LLMKV_MODEL is not set (a GGUF model whose tokenizer to use); nothing "
            "measured\n");
        return 0;
    }
    std::unique_ptr<llmkv::GgufFile> file;
    std::unique_ptr<llmkv::Tokenizer> tok;
    try {
        file = llmkv::GgufFile::open(model);
        tok = llmkv::Tokenizer::from_gguf(*file);
    } catch (const std::exception &e) {
        printf("grammar_bench: cannot load the tokenizer of %s: %s; nothing measured\n", model,
               e.what());
        return 0;
    }
    const size_t n = tok->n_vocab();
    std::vector<std::string> bytes(n);
    std::vector<uint8_t> eligible(n);
    for (size_t i = 0; i < n; ++i) {
        const int32_t id = static_cast<int32_t>(i);
        bytes[i] = tok->token_bytes(id);
        eligible[i] = !tok->is_special(id) && tok->token_type(id) != llmkv::kTokenControl &&
                      !bytes[i].empty();
    }
    auto t0 = Clock::now();
    auto vocab = std::make_shared<llmkv::GrammarVocab>(bytes, eligible);
    const double vocab_ms = us_since(t0) / 1000;
    t0 = Clock::now();
    auto grammar = llmkv::Grammar::from_json_schema(kSchema);
    const double grammar_ms = us_since(t0) / 1000;
    printf(
        "grammar_bench: %s: %zu tokens, trie of %zu nodes built in %.1f ms; grammar compiled in "
        "%.2f ms "
        "(%zu rules, %zu elements)\n",
        model, n, vocab->trie().byte.size(), vocab_ms, grammar_ms,
        grammar->program().rule_alts.size(), grammar->program().elems.size());

    llmkv::TokenMasker masker(grammar, vocab);
    std::mt19937 rng(17);
    Summary cold, cached, advance;
    std::vector<uint8_t> seen;
    size_t tokens_out = 0, completed = 0;
    const int kWalks = 40;
    for (int walk = 0; walk < kWalks; ++walk) {
        llmkv::TokenMasker::State s = masker.start();
        std::string out;
        for (int step = 0; step < 400; ++step) {
            if (masker.accepting(s) && (!masker.can_continue(s) || rng() % 4 == 0)) {
                ++completed;
                break;
            }
            const bool first = s >= seen.size() || !seen[s];
            auto t = Clock::now();
            const uint64_t *mask = masker.mask(s);
            (first ? cold : cached).add(us_since(t));
            if (s >= seen.size()) seen.resize(s + 1024, 0);
            seen[s] = 1;
            std::vector<size_t> allowed, closers;
            for (size_t i = 0; i < n; ++i) {
                if (!((mask[i / 64] >> (i % 64)) & 1)) continue;
                allowed.push_back(i);
                const std::string &b = bytes[i];
                if (b.size() <= 2 && (b[0] == '"' || b[0] == ']' || b[0] == '}' || b[0] == '0'))
                    closers.push_back(i);
            }
            if (allowed.empty()) break;
            const auto &pool = step > 60 && !closers.empty() ? closers : allowed;
            const size_t pick = pool[rng() % pool.size()];
            t = Clock::now();
            s = masker.advance(s, bytes[pick]);
            advance.add(us_since(t));
            out += bytes[pick];
            ++tokens_out;
        }
        if (walk < 2)
            printf("  walk %d: %.160s%s\n", walk, out.c_str(), out.size() > 160 ? "..." : "");
    }
    llmkv::TokenMasker::Stats st = masker.stats();
    printf(
        "%d random walks, %zu tokens, %zu complete documents; %llu states, %llu transitions, %llu "
        "stack nodes, "
        "cache %.1f MiB, limit hits %llu\n",
        kWalks, tokens_out, completed, static_cast<unsigned long long>(st.states),
        static_cast<unsigned long long>(st.transitions), static_cast<unsigned long long>(st.nodes),
        st.cache_bytes / 1048576.0, static_cast<unsigned long long>(st.limit_hits));
    cold.print("mask, first visit (cold)");
    cached.print("mask, revisit (cached)");
    advance.print("advance by one token");
    return 0;
}
