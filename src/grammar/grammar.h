// Grammar engine for constrained decoding: GBNF grammars (and JSON Schemas converted to GBNF)
// compiled to a byte-level context-free grammar, and a matcher that runs it as a pushdown
// automaton over raw bytes and answers "which tokens may come next" as a bitset.
//
//   auto g = Grammar::from_gbnf(text);            // immutable, shareable across threads
//   auto v = std::make_shared<GrammarVocab>(token_bytes, eligible);   // once per engine
//   TokenMasker m(g, v);                          // per (grammar, vocab); not thread-safe
//   State s = m.start();  const uint64_t *bits = m.mask(s);  s = m.advance(s, token_bytes);
//
// docs/GRAMMAR.md describes the syntax, the JSON Schema subset, the limits and the caches.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llmkv {

// The compiled, byte-level form. Every terminal is a set of bytes; character classes and
// string literals are already spelled out as UTF-8 byte sequences. A position is an index
// into `elems`; every alternative is a run of elements closed by a kEnd element.
// Non-productive alternatives are pruned, so every position reachable from the root can
// still be completed to a sentence.
struct GrammarProgram {
    enum Kind : uint32_t { kBytes = 0, kRule = 1, kEnd = 2 };
    struct Elem {
        Kind kind;
        uint32_t arg;  // kBytes: index into byte_sets; kRule: rule index; kEnd: rule index
    };
    using ByteSet = std::array<uint64_t, 4>;

    std::vector<Elem> elems;
    std::vector<ByteSet> byte_sets;
    std::vector<std::vector<uint32_t>> rule_alts;  // rule -> start positions of its alternatives
    std::vector<std::string> rule_names;           // generated rules: "<owner>#<n>"
    uint32_t root = 0;

    static bool has(const ByteSet &s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }
};

class Grammar {  // immutable, compiled, byte-level; shareable across threads
public:
    // Limits for hostile input (docs/GRAMMAR.md).
    static constexpr size_t kMaxTextBytes = 1u << 20;  // grammar / schema text
    static constexpr uint32_t kMaxRepetition = 4096;   // m and n of {m,n}
    static constexpr size_t kMaxRules = 1u << 16;      // named + generated rules
    static constexpr size_t kMaxElements = 1u << 21;   // byte-level elements after expansion
    static constexpr int kMaxNesting = 256;            // parentheses / schema nesting

    // Parses GBNF. root: the start rule name. Throws INVALID_ARGUMENT
    // "grammar: line L, column C: <what>".
    static std::shared_ptr<const Grammar> from_gbnf(std::string_view text,
                                                    std::string_view root = "root");
    // Converts a JSON Schema (docs/GRAMMAR.md) to GBNF and compiles it. Throws INVALID_ARGUMENT
    // "json schema: at <JSON pointer>: <what>" ("json schema: byte N: ..." for malformed JSON).
    static std::shared_ptr<const Grammar> from_json_schema(std::string_view schema_json);

    const std::string &gbnf() const { return gbnf_; }  // the text this grammar was compiled from
    const std::string &root_name() const { return root_name_; }
    const GrammarProgram &program() const { return prog_; }

    Grammar(std::string gbnf, std::string root_name, GrammarProgram prog)
        : gbnf_(std::move(gbnf)), root_name_(std::move(root_name)), prog_(std::move(prog)) {}

private:
    std::string gbnf_;
    std::string root_name_;
    GrammarProgram prog_;
};

// What Grammar::from_json_schema compiles.
std::string json_schema_to_gbnf(std::string_view schema_json);

// The vocabulary seen by a grammar: token byte strings; eligible[i] = 0 excludes token i
// (control tokens, tokens with no bytes) — such tokens are never allowed by a mask. A token
// with no bytes is treated as ineligible whatever `eligible` says. Built once per engine;
// immutable. Holds a byte trie of the eligible tokens in preorder.
class GrammarVocab {
public:
    // eligible may be empty (= every token with bytes is eligible); otherwise its size must
    // equal token_bytes' (INVALID_ARGUMENT).
    GrammarVocab(std::vector<std::string> token_bytes, std::vector<uint8_t> eligible);
    size_t n_vocab() const { return tokens_.size(); }
    const std::string &token(size_t i) const { return tokens_[i]; }
    bool eligible(size_t i) const { return eligible_[i] != 0; }

    // Trie in preorder: node i extends its parent (the nearest earlier node of depth - 1) by
    // byte[i]; its subtree is [i, subtree_end[i]). Tokens ending at node i are
    // token_ids[token_begin[i] .. token_begin[i + 1]).
    struct Trie {
        std::vector<uint8_t> byte;
        std::vector<uint32_t> depth;  // 1 for children of the (implicit) root
        std::vector<uint32_t> subtree_end;
        std::vector<uint32_t> token_begin;  // size nodes + 1
        std::vector<uint32_t> token_ids;
        uint32_t max_depth = 0;
    };
    const Trie &trie() const { return trie_; }

private:
    std::vector<std::string> tokens_;
    std::vector<uint8_t> eligible_;
    Trie trie_;
};

// Per (grammar, vocab) matcher with caches; NOT thread-safe (the engine serializes calls).
// Shared by every session that uses the same grammar. States are small integers valid for
// the matcher's lifetime: a state is the set of parse stacks the input so far allows, the
// stacks being hash-consed linked nodes (grammar position, parent node), so identical
// parse configurations get the same State id.
class TokenMasker {
public:
    using State = uint32_t;
    static constexpr State kDead = 0xffffffffu;

    // Run-time limits (docs/GRAMMAR.md): reaching one makes the transition that needed it
    // kDead (and counts it in Stats::limit_hits); earlier states stay valid.
    static constexpr size_t kMaxStates = 1u << 17;
    static constexpr size_t kMaxNodes = 1u << 22;
    static constexpr size_t kMaxClosureNodes = 1u << 16;  // stacks explored by one transition
    static constexpr size_t kMaskCacheBytes = 64u << 20;  // LRU cache of per-state masks

    TokenMasker(std::shared_ptr<const Grammar> g, std::shared_ptr<const GrammarVocab> v);
    ~TokenMasker();
    TokenMasker(const TokenMasker &) = delete;
    TokenMasker &operator=(const TokenMasker &) = delete;

    State start();
    State advance(State s, std::string_view bytes);  // kDead when the bytes leave the language
    State advance_byte(State s, uint8_t byte);
    bool accepting(State s);     // the bytes so far form a complete sentence of the grammar
    bool can_continue(State s);  // some byte may follow
    // Bit i (word i/64, bit i%64) set = token i may follow (its bytes keep the output a prefix
    // of a sentence). n_vocab bits. The pointer stays valid until the next call on this masker.
    const uint64_t *mask(State s);
    size_t n_vocab() const { return vocab_->n_vocab(); }
    size_t mask_words() const { return (n_vocab() + 63) / 64; }

    struct Stats {
        uint64_t states, mask_hits, mask_misses, transitions;
        size_t cache_bytes;   // mask cache + transition tables + stack nodes
        uint64_t nodes;       // stack nodes interned
        uint64_t limit_hits;  // transitions made kDead by a run-time limit
        uint64_t mask_evictions;
    };
    Stats stats() const;

private:
    struct StateInfo {
        std::vector<uint32_t> nodes;       // sorted; node 0 (the empty stack) = accepting
        GrammarProgram::ByteSet first{};   // bytes some stack can take
        std::unique_ptr<uint32_t[]> next;  // 256 transitions, kUnknown until computed
    };
    struct MaskEntry {
        std::vector<uint64_t> bits;
        std::list<State>::iterator lru;
    };
    struct VecHash {
        size_t operator()(const std::vector<uint32_t> &v) const noexcept;
    };

    uint32_t node(uint32_t pos, uint32_t parent);
    State intern(std::vector<uint32_t> &nodes);
    // Closes the work list (stacks whose top may be any element) into stacks whose top is a
    // terminal; false when a limit was hit.
    bool close(std::vector<uint32_t> &work, std::vector<uint32_t> &out);
    State compute(State s, uint8_t b);

    std::shared_ptr<const Grammar> grammar_;
    std::shared_ptr<const GrammarVocab> vocab_;
    const GrammarProgram &prog_;

    std::vector<uint32_t> node_pos_, node_parent_;
    std::unordered_map<uint64_t, uint32_t> node_ids_;
    std::vector<StateInfo> states_;
    std::unordered_map<std::vector<uint32_t>, State, VecHash> state_ids_;
    State start_ = kDead;

    std::unordered_map<State, MaskEntry> masks_;
    std::list<State> lru_;  // front = most recently used
    size_t mask_bytes_ = 0;
    static constexpr size_t kMaskEntryOverhead = 64;  // map node + list node, roughly
    std::vector<uint64_t> zero_;                      // the mask of kDead

    // Scratch for close().
    std::vector<uint32_t> seen_;  // epoch per node
    uint32_t epoch_ = 0;
    std::vector<uint32_t> stack_scratch_, out_scratch_;
    std::vector<State> walk_;

    uint64_t mask_hits_ = 0, mask_misses_ = 0, transitions_ = 0, limit_hits_ = 0, evictions_ = 0;
};

}  // namespace llmkv
