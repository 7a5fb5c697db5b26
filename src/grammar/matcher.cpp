// GrammarVocab (the byte trie of a vocabulary) and TokenMasker (the pushdown automaton over
// bytes with its state, transition and mask caches).
//
// A stack is a hash-consed linked list of nodes: node = (grammar position, parent node);
// node 0 is the empty stack (the root rule has completed). A state is the sorted set of the
// stacks whose top is a terminal (plus node 0 when the input so far is a sentence), interned
// so that equal parse configurations share one State id. A rule reference in tail position
// does not push a frame (its continuation is the caller's), so right-recursive repetition
// runs in constant stack depth and revisits the same states.
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "grammar/grammar.h"

namespace llmkv {

namespace {
constexpr uint32_t kUnknown = 0xfffffffeu;  // transition not computed yet
constexpr uint32_t kNoNode = 0xffffffffu;   // node table full
constexpr uint32_t kAcceptPos = 0xffffffffu;
}  // namespace

// ---- GrammarVocab ------------------------------------------------------------------------

GrammarVocab::GrammarVocab(std::vector<std::string> token_bytes, std::vector<uint8_t> eligible)
    : tokens_(std::move(token_bytes)), eligible_(std::move(eligible)) {
    if (eligible_.empty()) eligible_.assign(tokens_.size(), 1);
    if (eligible_.size() != tokens_.size())
        fail(LLMKV_ERR_INVALID_ARGUMENT, "grammar vocab: %zu tokens but %zu eligibility flags",
             tokens_.size(), eligible_.size());
    if (tokens_.size() >= 0xffffffffu)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "grammar vocab: too many tokens");
    std::vector<uint32_t> order;
    for (size_t i = 0; i < tokens_.size(); ++i) {
        if (tokens_[i].empty()) eligible_[i] = 0;
        if (eligible_[i]) order.push_back(static_cast<uint32_t>(i));
    }
    // Sorted by bytes (std::string compares bytes as unsigned char), the tokens list the trie
    // in preorder.
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return tokens_[a] < tokens_[b]; });
    Trie &t = trie_;
    std::vector<uint32_t> path;                       // node index per depth - 1
    std::vector<std::pair<uint32_t, uint32_t>> ends;  // (node, token), nodes non-decreasing
    const std::string *prev = nullptr;
    for (uint32_t id : order) {
        const std::string &s = tokens_[id];
        size_t lcp = 0;
        if (prev) {
            size_t m = std::min(prev->size(), s.size());
            while (lcp < m && (*prev)[lcp] == s[lcp]) ++lcp;
        }
        lcp = std::min(lcp, path.size());
        while (path.size() > lcp) {
            t.subtree_end[path.back()] = static_cast<uint32_t>(t.byte.size());
            path.pop_back();
        }
        for (size_t k = path.size(); k < s.size(); ++k) {
            path.push_back(static_cast<uint32_t>(t.byte.size()));
            t.byte.push_back(static_cast<uint8_t>(s[k]));
            t.depth.push_back(static_cast<uint32_t>(k + 1));
            t.subtree_end.push_back(0);
        }
        t.max_depth = std::max<uint32_t>(t.max_depth, static_cast<uint32_t>(s.size()));
        ends.push_back({path.back(), id});
        prev = &s;
    }
    while (!path.empty()) {
        t.subtree_end[path.back()] = static_cast<uint32_t>(t.byte.size());
        path.pop_back();
    }
    t.token_begin.assign(t.byte.size() + 1, 0);
    for (auto [node, id] : ends) ++t.token_begin[node + 1];
    for (size_t i = 1; i < t.token_begin.size(); ++i) t.token_begin[i] += t.token_begin[i - 1];
    t.token_ids.reserve(ends.size());
    for (auto [node, id] : ends) t.token_ids.push_back(id);  // already grouped by node, in order
}

// ---- TokenMasker -------------------------------------------------------------------------

size_t TokenMasker::VecHash::operator()(const std::vector<uint32_t> &v) const noexcept {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
    for (uint32_t x : v) {
        h ^= x;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return static_cast<size_t>(h);
}

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> g, std::shared_ptr<const GrammarVocab> v)
    : grammar_(std::move(g)), vocab_(std::move(v)), prog_(grammar_->program()) {
    node_pos_.push_back(kAcceptPos);  // node 0: the empty stack
    node_parent_.push_back(0);
    walk_.resize(vocab_->trie().max_depth + 1);
}

TokenMasker::~TokenMasker() = default;

uint32_t TokenMasker::node(uint32_t pos, uint32_t parent) {
    uint64_t key = (uint64_t(pos) << 32) | parent;
    auto it = node_ids_.find(key);
    if (it != node_ids_.end()) return it->second;
    if (node_pos_.size() >= kMaxNodes) return kNoNode;
    uint32_t id = static_cast<uint32_t>(node_pos_.size());
    node_pos_.push_back(pos);
    node_parent_.push_back(parent);
    node_ids_.emplace(key, id);
    return id;
}

bool TokenMasker::close(std::vector<uint32_t> &work, std::vector<uint32_t> &out) {
    if (++epoch_ == 0) {
        std::fill(seen_.begin(), seen_.end(), 0);
        epoch_ = 1;
    }
    size_t explored = 0;
    while (!work.empty()) {
        uint32_t x = work.back();
        work.pop_back();
        if (x >= seen_.size()) seen_.resize(std::max<size_t>(node_pos_.size(), x + 1) + 1024, 0);
        if (seen_[x] == epoch_) continue;
        seen_[x] = epoch_;
        if (++explored > kMaxClosureNodes) return false;
        if (x == 0) {
            out.push_back(0);
            continue;
        }
        const uint32_t p = node_pos_[x];
        const GrammarProgram::Elem e = prog_.elems[p];
        if (e.kind == GrammarProgram::kBytes) {
            out.push_back(x);
        } else if (e.kind == GrammarProgram::kEnd) {
            work.push_back(node_parent_[x]);
        } else {
            const uint32_t parent = node_parent_[x];
            // Tail call: a reference closing its alternative continues where the caller does.
            uint32_t cont =
                prog_.elems[p + 1].kind == GrammarProgram::kEnd ? parent : node(p + 1, parent);
            if (cont == kNoNode) return false;
            for (uint32_t a : prog_.rule_alts[e.arg]) {
                uint32_t child = prog_.elems[a].kind == GrammarProgram::kEnd ? cont : node(a, cont);
                if (child == kNoNode) return false;
                work.push_back(child);
            }
        }
    }
    return true;
}

TokenMasker::State TokenMasker::intern(std::vector<uint32_t> &nodes) {
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    auto it = state_ids_.find(nodes);
    if (it != state_ids_.end()) return it->second;
    if (states_.size() >= kMaxStates) {
        ++limit_hits_;
        return kDead;
    }
    State id = static_cast<State>(states_.size());
    StateInfo info;
    for (uint32_t x : nodes) {
        if (x == 0) continue;
        const auto &set = prog_.byte_sets[prog_.elems[node_pos_[x]].arg];
        for (int w = 0; w < 4; ++w) info.first[w] |= set[w];
    }
    info.nodes = nodes;
    states_.push_back(std::move(info));
    state_ids_.emplace(nodes, id);
    return id;
}

TokenMasker::State TokenMasker::start() {
    if (start_ != kDead) return start_;
    std::vector<uint32_t> &work = stack_scratch_, &out = out_scratch_;
    work.clear();
    out.clear();
    for (uint32_t a : prog_.rule_alts[prog_.root]) {
        uint32_t n = prog_.elems[a].kind == GrammarProgram::kEnd ? 0 : node(a, 0);
        if (n == kNoNode) {
            ++limit_hits_;
            return kDead;
        }
        work.push_back(n);
    }
    if (!close(work, out) || out.empty()) {
        ++limit_hits_;
        return kDead;
    }
    start_ = intern(out);
    return start_;
}

TokenMasker::State TokenMasker::compute(State s, uint8_t b) {
    ++transitions_;
    std::vector<uint32_t> &work = stack_scratch_, &out = out_scratch_;
    work.clear();
    out.clear();
    for (uint32_t x : states_[s].nodes) {
        if (x == 0) continue;
        const uint32_t p = node_pos_[x];
        if (!GrammarProgram::has(prog_.byte_sets[prog_.elems[p].arg], b)) continue;
        const uint32_t parent = node_parent_[x];
        uint32_t n = prog_.elems[p + 1].kind == GrammarProgram::kEnd ? parent : node(p + 1, parent);
        if (n == kNoNode) {
            ++limit_hits_;
            return kDead;
        }
        work.push_back(n);
    }
    if (work.empty()) return kDead;
    if (!close(work, out)) {
        ++limit_hits_;
        return kDead;
    }
    if (out.empty()) return kDead;
    return intern(out);
}

TokenMasker::State TokenMasker::advance_byte(State s, uint8_t b) {
    if (s == kDead || s >= states_.size()) return kDead;
    StateInfo &st = states_[s];
    if (!GrammarProgram::has(st.first, b)) return kDead;
    if (!st.next) {
        st.next.reset(new uint32_t[256]);
        std::fill(st.next.get(), st.next.get() + 256, kUnknown);
    }
    uint32_t t = st.next[b];
    if (t == kUnknown) {
        t = compute(s, b);
        states_[s].next[b] = t;  // states_ may have grown: index again
    }
    return t;
}

TokenMasker::State TokenMasker::advance(State s, std::string_view bytes) {
    for (char c : bytes) {
        s = advance_byte(s, static_cast<uint8_t>(c));
        if (s == kDead) break;
    }
    return s;
}

bool TokenMasker::accepting(State s) {
    return s != kDead && s < states_.size() && !states_[s].nodes.empty() &&
           states_[s].nodes[0] == 0;
}

bool TokenMasker::can_continue(State s) {
    if (s == kDead || s >= states_.size()) return false;
    const auto &f = states_[s].first;
    return (f[0] | f[1] | f[2] | f[3]) != 0;
}

const uint64_t *TokenMasker::mask(State s) {
    const size_t words = mask_words();
    if (s == kDead || s >= states_.size()) {
        static_assert(sizeof(uint64_t) == 8);
        zero_.assign(words, 0);
        return zero_.data();
    }
    auto it = masks_.find(s);
    if (it != masks_.end()) {
        ++mask_hits_;
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        return it->second.bits.data();
    }
    ++mask_misses_;
    std::vector<uint64_t> bits(words, 0);
    const GrammarVocab::Trie &t = vocab_->trie();
    const uint32_t n = static_cast<uint32_t>(t.byte.size());
    walk_[0] = s;
    for (uint32_t i = 0; i < n;) {
        const uint32_t d = t.depth[i];
        const State next = advance_byte(walk_[d - 1], t.byte[i]);
        if (next == kDead) {
            i = t.subtree_end[i];
            continue;
        }
        walk_[d] = next;
        for (uint32_t k = t.token_begin[i]; k < t.token_begin[i + 1]; ++k) {
            const uint32_t id = t.token_ids[k];
            bits[id >> 6] |= uint64_t(1) << (id & 63);
        }
        ++i;
    }
    // Insert, then evict least recently used masks beyond the byte budget (never this one).
    lru_.push_front(s);
    MaskEntry &e = masks_[s];
    e.bits = std::move(bits);
    e.lru = lru_.begin();
    mask_bytes_ += words * 8 + kMaskEntryOverhead;
    while (mask_bytes_ > kMaskCacheBytes && lru_.size() > 1) {
        State victim = lru_.back();
        lru_.pop_back();
        masks_.erase(victim);
        mask_bytes_ -= words * 8 + kMaskEntryOverhead;
        ++evictions_;
    }
    return e.bits.data();
}

TokenMasker::Stats TokenMasker::stats() const {
    Stats s{};
    s.states = states_.size();
    s.mask_hits = mask_hits_;
    s.mask_misses = mask_misses_;
    s.transitions = transitions_;
    size_t tables = 0, state_nodes = 0;
    for (const StateInfo &st : states_) {
        if (st.next) tables += 256 * sizeof(uint32_t);
        state_nodes += st.nodes.size() * sizeof(uint32_t) * 2;  // the state and its map key
    }
    s.cache_bytes = mask_bytes_ + tables + state_nodes + states_.size() * sizeof(StateInfo) +
                    node_pos_.size() * (2 * sizeof(uint32_t) + 32);
    s.nodes = node_pos_.size();
    s.limit_hits = limit_hits_;
    s.mask_evictions = evictions_;
    return s;
}

}  // namespace llmkv
