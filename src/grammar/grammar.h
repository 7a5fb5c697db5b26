// TEMPORARY STUB (not committed)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
#include "common/error.h"
namespace llmkv {
class Grammar {
public:
    static std::shared_ptr<const Grammar> from_gbnf(std::string_view, std::string_view = "root") { fail(LLMKV_ERR_UNSUPPORTED, "stub"); }
    static std::shared_ptr<const Grammar> from_json_schema(std::string_view) { fail(LLMKV_ERR_UNSUPPORTED, "stub"); }
};
class GrammarVocab {
public:
    GrammarVocab(std::vector<std::string>, std::vector<uint8_t>) {}
};
class TokenMasker {
public:
    using State = uint32_t;
    static constexpr State kDead = 0xffffffffu;
    TokenMasker(std::shared_ptr<const Grammar>, std::shared_ptr<const GrammarVocab>) {}
    State start() { return 0; }
    State advance(State, std::string_view) { return 0; }
    bool accepting(State) { return true; }
    bool can_continue(State) { return true; }
    const uint64_t *mask(State) { return nullptr; }
    struct Stats { uint64_t states, mask_hits, mask_misses, transitions; size_t cache_bytes; };
    Stats stats() const { return {}; }
};
}
