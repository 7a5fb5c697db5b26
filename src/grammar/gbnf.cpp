// GBNF parser and compiler: text -> byte-level GrammarProgram.
//
// Parsing lowers as it goes: string literals become runs of single-byte terminals (UTF-8),
// character classes and `.` become alternatives of UTF-8 byte-range sequences, groups and
// repetitions become generated rules (x* = R ::= x R | empty, right-recursive, so matching
// x* keeps a constant stack depth). Then: undefined rules, the root, left recursion (through
// nullable prefixes) and an empty language are checked, and non-productive alternatives are
// pruned so every reachable parse position can still complete.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "common/error.h"
#include "grammar/grammar.h"
#include "platform/compiler.h"

namespace llmkv {
namespace {

using Elem = GrammarProgram::Elem;
using ByteSet = GrammarProgram::ByteSet;
using Seq = std::vector<Elem>;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr size_t kNoOffset = SIZE_MAX;

struct RuleDef {
    std::string name;
    bool named = false;
    bool defined = false;
    size_t def_off = kNoOffset;    // named: offset of the name in its definition
    size_t first_use = kNoOffset;  // named: offset of the first reference
    uint32_t owner = 0;            // generated: the named rule whose body made it
    std::vector<Seq> alts;
};

void encode_utf8(uint32_t cp, std::string &out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

int utf8_len_of(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

using Range = std::pair<uint32_t, uint32_t>;
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;  // one per byte of a sequence

// Splits a code-point range whose members all encode to `len` bytes into ranges whose
// encodings form a "rectangle" (every byte position varies independently over a range).
void split_rect(uint32_t lo, uint32_t hi, int len, std::vector<ByteRanges> &out) {
    // Iterative: a work stack of ranges.
    std::vector<Range> work{{lo, hi}};
    while (!work.empty()) {
        auto [a, b] = work.back();
        work.pop_back();
        bool split = false;
        for (int i = 1; i < len && !split; ++i) {
            uint32_t m = (1u << (6 * i)) - 1;
            if ((a & ~m) != (b & ~m)) {
                if ((a & m) != 0) {
                    work.push_back({(a | m) + 1, b});
                    work.push_back({a, a | m});
                    split = true;
                } else if ((b & m) != m) {
                    work.push_back({b & ~m, b});
                    work.push_back({a, (b & ~m) - 1});
                    split = true;
                }
            }
        }
        if (split) continue;
        std::string ea, eb;
        encode_utf8(a, ea);
        encode_utf8(b, eb);
        ByteRanges r;
        for (int k = 0; k < len; ++k)
            r.push_back({static_cast<uint8_t>(ea[k]), static_cast<uint8_t>(eb[k])});
        out.push_back(std::move(r));
    }
}

class Compiler {
public:
    explicit Compiler(std::string_view text) : t_(text) {}

    GrammarProgram compile(std::string_view root_name);

private:
    [[noreturn]] void error(size_t off, const char *fmt, ...) LLMKV_PRINTF_FORMAT(3, 4);

    // ---- building ----
    uint32_t byte_set(const ByteSet &s) {
        auto it = set_ids_.find(s);
        if (it != set_ids_.end()) return it->second;
        uint32_t id = static_cast<uint32_t>(sets_.size());
        sets_.push_back(s);
        set_ids_.emplace(s, id);
        return id;
    }
    Elem bytes_elem(uint8_t lo, uint8_t hi) {
        ByteSet s{};
        for (unsigned b = lo; b <= hi; ++b) s[b >> 6] |= uint64_t(1) << (b & 63);
        return {GrammarProgram::kBytes, byte_set(s)};
    }
    uint32_t new_rule(RuleDef def) {
        if (rules_.size() >= Grammar::kMaxRules)
            error(p_, "the grammar needs more than %zu rules", Grammar::kMaxRules);
        rules_.push_back(std::move(def));
        return static_cast<uint32_t>(rules_.size() - 1);
    }
    uint32_t anon_rule(std::vector<Seq> alts) {
        RuleDef d;
        d.owner = owner_;
        d.name = rules_[owner_].name + "~" + std::to_string(rules_.size());
        d.alts = std::move(alts);
        return new_rule(std::move(d));
    }
    uint32_t named_rule(const std::string &name) {
        auto it = by_name_.find(name);
        if (it != by_name_.end()) return it->second;
        RuleDef d;
        d.name = name;
        d.named = true;
        uint32_t id = new_rule(std::move(d));
        rules_[id].owner = id;
        by_name_.emplace(name, id);
        return id;
    }
    void count(size_t n) {
        n_elems_ += n;
        if (n_elems_ > Grammar::kMaxElements)
            error(p_, "the grammar expands to more than %zu elements", Grammar::kMaxElements);
    }
    void append(Seq &seq, const Seq &unit) {
        count(unit.size());
        seq.insert(seq.end(), unit.begin(), unit.end());
    }
    Elem single(Seq unit) {
        if (unit.size() == 1) return unit[0];
        return {GrammarProgram::kRule, anon_rule({std::move(unit)})};
    }
    Seq code_points(std::vector<Range> ranges);

    // ---- lexing / parsing ----
    bool at_end() const { return p_ >= t_.size(); }
    static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-';
    }
    void skip_ws() {
        while (!at_end()) {
            char c = t_[p_];
            if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
                ++p_;
            } else if (c == '#') {
                while (!at_end() && t_[p_] != '\n') ++p_;
            } else {
                break;
            }
        }
    }
    std::string parse_name() {
        size_t s = p_;
        while (!at_end() && name_char(t_[p_])) ++p_;
        return std::string(t_.substr(s, p_ - s));
    }
    bool at_rule_start() {
        size_t save = p_;
        bool yes = false;
        if (!at_end() && name_char(t_[p_])) {
            parse_name();
            skip_ws();
            yes = t_.substr(p_, 3) == "::=";
        }
        p_ = save;
        return yes;
    }
    std::vector<Seq> parse_alternates(bool nested);
    Seq parse_sequence(bool nested);
    Seq parse_primary();
    Seq apply_postfix(Seq unit, size_t op_off);
    uint32_t parse_char(bool in_class);
    uint32_t parse_hex(int digits);
    uint32_t parse_count();

    std::string_view t_;
    size_t p_ = 0;
    int depth_ = 0;
    uint32_t owner_ = 0;
    size_t n_elems_ = 0;
    std::vector<RuleDef> rules_;
    std::unordered_map<std::string, uint32_t> by_name_;
    std::vector<ByteSet> sets_;
    std::map<ByteSet, uint32_t> set_ids_;
};

void Compiler::error(size_t off, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    off = std::min(off, t_.size());
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off; ++i) {
        unsigned char c = static_cast<unsigned char>(t_[i]);
        if (c == '\n') {
            ++line;
            col = 1;
        } else if ((c & 0xC0) != 0x80) {
            ++col;  // columns count characters (UTF-8 lead bytes), from 1
        }
    }
    fail(LLMKV_ERR_INVALID_ARGUMENT, "grammar: line %zu, column %zu: %s", line, col, buf);
}

uint32_t Compiler::parse_hex(int digits) {
    size_t start = p_;
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
        if (at_end()) error(start - 2, "expected %d hex digits", digits);
        char c = t_[p_];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            error(start - 2, "expected %d hex digits", digits);
        v = v * 16 + d;
        ++p_;
    }
    if (v > kMaxCodePoint) error(start - 2, "code point U+%X is above U+10FFFF", v);
    return v;
}

// One character of a literal or class: an escape or one UTF-8 encoded code point.
uint32_t Compiler::parse_char(bool in_class) {
    size_t start = p_;
    unsigned char c = static_cast<unsigned char>(t_[p_]);
    if (c == '\\') {
        ++p_;
        if (at_end()) error(start, "escape at the end of the text");
        char e = t_[p_++];
        switch (e) {
            case 'n':
                return '\n';
            case 'r':
                return '\r';
            case 't':
                return '\t';
            case '\\':
                return '\\';
            case '"':
                return '"';
            case '[':
                return '[';
            case ']':
                return ']';
            case '-':
                return '-';
            case '^':
                return '^';
            case 'x':
                return parse_hex(2);
            case 'u':
                return parse_hex(4);
            case 'U':
                return parse_hex(8);
            default:
                error(start, "unknown escape '\\%c'", e);
        }
    }
    if (c == '\n' || c == '\r') {
        error(start, in_class ? "unterminated character class" : "unterminated string literal");
    }
    int len = c < 0x80             ? 1
              : (c & 0xE0) == 0xC0 ? 2
              : (c & 0xF0) == 0xE0 ? 3
              : (c & 0xF8) == 0xF0 ? 4
                                   : 0;
    if (len == 0 || p_ + len > t_.size()) error(start, "invalid UTF-8");
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; ++i) {
        unsigned char d = static_cast<unsigned char>(t_[p_ + i]);
        if ((d & 0xC0) != 0x80) error(start, "invalid UTF-8");
        cp = (cp << 6) | (d & 0x3F);
    }
    if (utf8_len_of(cp) != len || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
        error(start, "invalid UTF-8");
    p_ += len;
    return cp;
}

// Code-point ranges (sorted, merged, surrogate-free) -> a unit matching one of them as UTF-8.
Seq Compiler::code_points(std::vector<Range> ranges) {
    ByteSet ascii{};
    bool have_ascii = false;
    std::vector<ByteRanges> seqs;
    for (auto [lo, hi] : ranges) {
        // Cut at the encoded-length boundaries.
        const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
        for (int k = 0; k < 4 && lo <= hi; ++k) {
            if (lo > bounds[k]) continue;
            uint32_t h = std::min(hi, bounds[k]);
            if (k == 0) {
                for (uint32_t b = lo; b <= h; ++b) ascii[b >> 6] |= uint64_t(1) << (b & 63);
                have_ascii = true;
            } else {
                split_rect(lo, h, k + 1, seqs);
            }
            lo = h + 1;
        }
    }
    std::vector<Seq> alts;
    if (have_ascii) alts.push_back({{GrammarProgram::kBytes, byte_set(ascii)}});
    for (const ByteRanges &r : seqs) {
        Seq s;
        for (auto [a, b] : r) s.push_back(bytes_elem(a, b));
        count(s.size());
        alts.push_back(std::move(s));
    }
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0];
    // An empty class (alts empty) becomes a rule with no alternatives: it matches nothing.
    return {{GrammarProgram::kRule, anon_rule(std::move(alts))}};
}

uint32_t Compiler::parse_count() {
    size_t start = p_;
    uint64_t v = 0;
    while (!at_end() && t_[p_] >= '0' && t_[p_] <= '9') {
        v = v * 10 + (t_[p_] - '0');
        if (v > Grammar::kMaxRepetition)
            error(start, "repetition bound is above the limit %u", Grammar::kMaxRepetition);
        ++p_;
    }
    if (p_ == start) error(start, "expected a number in the repetition bounds");
    return static_cast<uint32_t>(v);
}

Seq Compiler::apply_postfix(Seq unit, size_t op_off) {
    char op = t_[p_];
    if (op == '*' || op == '+' || op == '?') {
        ++p_;
        Elem x = single(std::move(unit));
        if (op == '?') return {{GrammarProgram::kRule, anon_rule({{x}, {}})}};
        uint32_t r = anon_rule({});
        rules_[r].alts = {{x, {GrammarProgram::kRule, r}}, {}};
        count(2);
        if (op == '*') return {{GrammarProgram::kRule, r}};
        return {x, {GrammarProgram::kRule, r}};
    }
    // {m}, {m,}, {m,n}
    ++p_;
    skip_ws();
    uint32_t m = parse_count();
    skip_ws();
    uint32_t n = m;
    bool unbounded = false;
    if (!at_end() && t_[p_] == ',') {
        ++p_;
        skip_ws();
        if (!at_end() && t_[p_] == '}')
            unbounded = true;
        else
            n = parse_count();
        skip_ws();
    }
    if (at_end() || t_[p_] != '}') error(p_, "expected '}' to close the repetition bounds");
    ++p_;
    if (!unbounded && n < m)
        error(op_off, "repetition bounds {%u,%u}: the maximum is below the minimum", m, n);
    Elem x = single(std::move(unit));
    Seq out;
    for (uint32_t i = 0; i < m; ++i) {
        count(1);
        out.push_back(x);
    }
    if (unbounded) {
        uint32_t r = anon_rule({});
        rules_[r].alts = {{x, {GrammarProgram::kRule, r}}, {}};
        count(3);
        out.push_back({GrammarProgram::kRule, r});
    } else if (n > m) {
        // opt_1 ::= x | empty; opt_k ::= x opt_{k-1} | empty
        uint32_t prev = anon_rule({{x}, {}});
        for (uint32_t k = 2; k <= n - m; ++k) {
            count(2);
            prev = anon_rule({{x, {GrammarProgram::kRule, prev}}, {}});
        }
        count(1);
        out.push_back({GrammarProgram::kRule, prev});
    }
    return out;
}

Seq Compiler::parse_primary() {
    size_t start = p_;
    char c = t_[p_];
    if (c == '"') {
        ++p_;
        Seq s;
        std::string bytes;
        for (;;) {
            if (at_end()) error(start, "unterminated string literal");
            if (t_[p_] == '"') {
                ++p_;
                break;
            }
            uint32_t cp = parse_char(false);
            if (cp >= 0xD800 && cp <= 0xDFFF)
                error(start, "string literal contains the surrogate U+%04X", cp);
            bytes.clear();
            encode_utf8(cp, bytes);
            for (char b : bytes) s.push_back(bytes_elem(uint8_t(b), uint8_t(b)));
            count(bytes.size());
        }
        return s;
    }
    if (c == '[') {
        ++p_;
        bool neg = !at_end() && t_[p_] == '^';
        if (neg) ++p_;
        std::vector<Range> rs;
        for (;;) {
            if (at_end()) error(start, "unterminated character class");
            if (t_[p_] == ']') {
                ++p_;
                break;
            }
            size_t item = p_;
            uint32_t lo = parse_char(true), hi = lo;
            if (!at_end() && t_[p_] == '-' && p_ + 1 < t_.size() && t_[p_ + 1] != ']') {
                ++p_;
                if (at_end()) error(start, "unterminated character class");
                hi = parse_char(true);
                if (hi < lo) error(item, "character range U+%04X-U+%04X is reversed", lo, hi);
            }
            rs.push_back({lo, hi});
        }
        std::sort(rs.begin(), rs.end());
        std::vector<Range> merged;
        for (auto r : rs) {
            if (!merged.empty() && r.first <= merged.back().second + 1)
                merged.back().second = std::max(merged.back().second, r.second);
            else
                merged.push_back(r);
        }
        if (neg) {
            std::vector<Range> comp;
            uint32_t next = 0;
            for (auto r : merged) {
                if (r.first > next) comp.push_back({next, r.first - 1});
                next = r.second + 1;
            }
            if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
            merged = std::move(comp);
        }
        std::vector<Range> clean;  // without surrogates
        for (auto r : merged) {
            if (r.second < 0xD800 || r.first > 0xDFFF) {
                clean.push_back(r);
                continue;
            }
            if (r.first < 0xD800) clean.push_back({r.first, 0xD7FF});
            if (r.second > 0xDFFF) clean.push_back({0xE000, r.second});
        }
        return code_points(std::move(clean));
    }
    if (c == '.') {
        ++p_;
        return code_points({{0, 0xD7FF}, {0xE000, kMaxCodePoint}});
    }
    if (c == '(') {
        if (++depth_ > Grammar::kMaxNesting)
            error(start, "parentheses nested deeper than %d", Grammar::kMaxNesting);
        ++p_;
        std::vector<Seq> alts = parse_alternates(true);
        skip_ws();
        if (at_end() || t_[p_] != ')') error(start, "'(' is never closed");
        ++p_;
        --depth_;
        if (alts.size() == 1) return std::move(alts[0]);
        return {{GrammarProgram::kRule, anon_rule(std::move(alts))}};
    }
    if (name_char(c)) {
        std::string name = parse_name();
        uint32_t r = named_rule(name);
        if (rules_[r].first_use == kNoOffset) rules_[r].first_use = start;
        return {{GrammarProgram::kRule, r}};
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
        error(start, "'%c' does not follow anything it could repeat", c);
    if (c == ')') error(start, "unbalanced ')'");
    if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F)
        error(start, "unexpected character '%c'", c);
    error(start, "unexpected byte 0x%02X", static_cast<unsigned char>(c));
}

Seq Compiler::parse_sequence(bool nested) {
    Seq seq;
    for (;;) {
        skip_ws();
        if (at_end()) break;
        char c = t_[p_];
        if (c == '|') break;
        if (c == ')') {
            if (nested) break;
            error(p_, "unbalanced ')'");
        }
        if (at_rule_start()) {
            if (nested) error(p_, "expected ')' before the next rule definition");
            break;
        }
        Seq unit = parse_primary();
        for (;;) {
            size_t save = p_;
            skip_ws();
            if (!at_end() && (t_[p_] == '*' || t_[p_] == '+' || t_[p_] == '?' || t_[p_] == '{')) {
                unit = apply_postfix(std::move(unit), p_);
            } else {
                p_ = save;
                break;
            }
        }
        append(seq, unit);
    }
    return seq;
}

std::vector<Seq> Compiler::parse_alternates(bool nested) {
    std::vector<Seq> alts;
    alts.push_back(parse_sequence(nested));
    while (!at_end() && t_[p_] == '|') {
        ++p_;
        alts.push_back(parse_sequence(nested));
    }
    return alts;
}

GrammarProgram Compiler::compile(std::string_view root_name) {
    if (t_.size() > Grammar::kMaxTextBytes)
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "grammar: line 1, column 1: the text is %zu bytes; the limit is %zu", t_.size(),
             Grammar::kMaxTextBytes);
    skip_ws();
    while (!at_end()) {
        size_t name_off = p_;
        if (!name_char(t_[p_])) {
            unsigned char c = static_cast<unsigned char>(t_[p_]);
            if (c >= 0x20 && c < 0x7F) error(p_, "expected a rule name, found '%c'", c);
            error(p_, "expected a rule name");
        }
        std::string name = parse_name();
        skip_ws();
        if (t_.substr(p_, 3) != "::=")
            error(p_, "expected '::=' after the rule name '%s'", name.c_str());
        p_ += 3;
        uint32_t id = named_rule(name);
        if (rules_[id].defined) error(name_off, "rule '%s' is defined twice", name.c_str());
        rules_[id].defined = true;
        rules_[id].def_off = name_off;
        owner_ = id;
        std::vector<Seq> alts = parse_alternates(false);
        rules_[id].alts = std::move(alts);
        skip_ws();
    }

    // Undefined rules: report the earliest use.
    size_t bad = kNoOffset;
    uint32_t bad_rule = 0;
    for (uint32_t r = 0; r < rules_.size(); ++r) {
        if (rules_[r].named && !rules_[r].defined && rules_[r].first_use < bad) {
            bad = rules_[r].first_use;
            bad_rule = r;
        }
    }
    if (bad != kNoOffset)
        error(bad, "rule '%s' is used but never defined", rules_[bad_rule].name.c_str());
    auto root_it = by_name_.find(std::string(root_name));
    if (root_it == by_name_.end() || !rules_[root_it->second].defined)
        error(0, "the root rule '%.*s' is not defined", static_cast<int>(root_name.size()),
              root_name.data());
    const uint32_t root = root_it->second;
    const size_t n = rules_.size();

    // Nullable rules (fixpoint).
    std::vector<uint8_t> nullable(n, 0);
    auto elem_nullable = [&](const Elem &e) {
        return e.kind == GrammarProgram::kRule && nullable[e.arg];
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < n; ++r) {
            if (nullable[r]) continue;
            for (const Seq &a : rules_[r].alts) {
                if (std::all_of(a.begin(), a.end(), elem_nullable)) {
                    nullable[r] = 1;
                    changed = true;
                    break;
                }
            }
        }
    }

    // Left recursion: a cycle in "r may start with s" (through nullable prefixes).
    std::vector<std::vector<uint32_t>> starts(n);
    for (uint32_t r = 0; r < n; ++r) {
        for (const Seq &a : rules_[r].alts) {
            for (const Elem &e : a) {
                if (e.kind == GrammarProgram::kRule) starts[r].push_back(e.arg);
                if (!elem_nullable(e)) break;
            }
        }
    }
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t s = 0; s < n; ++s) {
        if (color[s]) continue;
        path.push_back({s, 0});
        color[s] = 1;
        while (!path.empty()) {
            auto &[r, i] = path.back();
            if (i == starts[r].size()) {
                color[r] = 2;
                path.pop_back();
                continue;
            }
            uint32_t next = starts[r][i++];
            if (color[next] == 2) continue;
            if (color[next] == 0) {
                color[next] = 1;
                path.push_back({next, 0});
                continue;
            }
            // A cycle: the path from `next` to the top.
            size_t k = 0;
            while (path[k].first != next) ++k;
            int64_t best = -1;
            for (size_t j = k; j < path.size(); ++j) {
                uint32_t q = path[j].first;
                if (rules_[q].named && (best < 0 || rules_[q].def_off < rules_[best].def_off))
                    best = q;
            }
            if (best >= 0)
                error(rules_[best].def_off, "rule '%s' is left-recursive",
                      rules_[best].name.c_str());
            const RuleDef &o = rules_[rules_[next].owner];
            error(
                o.def_off,
                "rule '%s' is left-recursive (it repeats an item that can match the empty string)",
                o.name.c_str());
        }
    }

    // Productive rules (derive some finite string); prune the other alternatives.
    std::vector<uint8_t> productive(n, 0);
    auto elem_productive = [&](const Elem &e) {
        return e.kind == GrammarProgram::kBytes || productive[e.arg];
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < n; ++r) {
            if (productive[r]) continue;
            for (const Seq &a : rules_[r].alts) {
                if (std::all_of(a.begin(), a.end(), elem_productive)) {
                    productive[r] = 1;
                    changed = true;
                    break;
                }
            }
        }
    }
    if (!productive[root])
        error(rules_[root].def_off,
              "the language of rule '%s' is empty (it matches no finite string)",
              rules_[root].name.c_str());

    GrammarProgram prog;
    prog.byte_sets = std::move(sets_);
    prog.rule_alts.resize(n);
    prog.rule_names.resize(n);
    prog.root = root;
    for (uint32_t r = 0; r < n; ++r) {
        prog.rule_names[r] = rules_[r].name;
        for (const Seq &a : rules_[r].alts) {
            if (!std::all_of(a.begin(), a.end(), elem_productive)) continue;
            prog.rule_alts[r].push_back(static_cast<uint32_t>(prog.elems.size()));
            prog.elems.insert(prog.elems.end(), a.begin(), a.end());
            prog.elems.push_back({GrammarProgram::kEnd, r});
        }
    }
    return prog;
}

}  // namespace

std::shared_ptr<const Grammar> Grammar::from_gbnf(std::string_view text, std::string_view root) {
    Compiler c(text);
    GrammarProgram prog = c.compile(root);
    return std::make_shared<const Grammar>(std::string(text), std::string(root), std::move(prog));
}

}  // namespace llmkv
