// Grammar engine: GBNF parsing and its errors, the byte-level automaton (repetition, UTF-8
// classes, tokens splitting characters), masks against brute force, the mask cache, the JSON
// Schema converter (each keyword, errors with JSON pointers) and property tests (random walks
// checked by std::regex and by an independent JSON Schema validator).
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>

#include "common/error.h"

namespace llmkv {
namespace {

using State = TokenMasker::State;
using OJson = nlohmann::ordered_json;

std::shared_ptr<const GrammarVocab> byte_vocab() {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    return std::make_shared<GrammarVocab>(toks, std::vector<uint8_t>{});
}

struct Matcher {
    explicit Matcher(std::shared_ptr<const Grammar> g) : m(std::move(g), byte_vocab()) {}
    explicit Matcher(std::string_view gbnf) : Matcher(Grammar::from_gbnf(gbnf)) {}
    bool accepts(std::string_view s) { return m.accepting(m.advance(m.start(), s)); }
    bool prefix(std::string_view s) { return m.advance(m.start(), s) != TokenMasker::kDead; }
    TokenMasker m;
};

std::string gbnf_error(std::string_view text) {
    try {
        Grammar::from_gbnf(text);
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_INVALID_ARGUMENT);
        return e.what();
    }
    return "(no error)";
}

std::string schema_error(std::string_view text) {
    try {
        Grammar::from_json_schema(text);
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_INVALID_ARGUMENT);
        return e.what();
    }
    return "(no error)";
}

// ---- GBNF parsing -------------------------------------------------------------------------

TEST(GrammarParse, SyntaxErrorsCarryLineAndColumn) {
    const std::pair<const char *, const char *> cases[] = {
        {"root ::= \"abc", "grammar: line 1, column 10: unterminated string literal"},
        {"root ::= foo\n", "grammar: line 1, column 10: rule 'foo' is used but never defined"},
        {"# c\n\nroot ::= [a-", "grammar: line 3, column 10: unterminated character class"},
        {"root ::= \"a\"\nx = \"b\"", "grammar: line 2, column 3: unexpected character '='"},
        {"root ::= ( \"a\"", "grammar: line 1, column 10: '(' is never closed"},
        {"root ::= \"a\" )", "grammar: line 1, column 14: unbalanced ')'"},
        {"root ::= \"\\q\"", "grammar: line 1, column 11: unknown escape '\\q'"},
        {"root ::= [z-a]", "grammar: line 1, column 11: character range U+007A-U+0061 is reversed"},
        {"root ::= \"a\"{3,2}",
         "grammar: line 1, column 13: repetition bounds {3,2}: the maximum is below the minimum"},
        {"root ::= \"a\"{5000}",
         "grammar: line 1, column 14: repetition bound is above the limit 4096"},
        {"root ::= \"a\"{2",
         "grammar: line 1, column 15: expected '}' to close the repetition bounds"},
        {"root ::= * \"a\"",
         "grammar: line 1, column 10: '*' does not follow anything it could repeat"},
        {"root \"a\"", "grammar: line 1, column 6: expected '::=' after the rule name 'root'"},
        {"a ::= \"x\"", "grammar: line 1, column 1: the root rule 'root' is not defined"},
        {"", "grammar: line 1, column 1: the root rule 'root' is not defined"},
        {"root ::= \"a\"\nroot ::= \"b\"",
         "grammar: line 2, column 1: rule 'root' is defined twice"},
        {"root ::= \"\\x4\"", "grammar: line 1, column 11: expected 2 hex digits"},
        {"root ::= \"\\uD800\"",
         "grammar: line 1, column 10: string literal contains the surrogate U+D800"},
        {"root ::= \"é\" ?? }", "grammar: line 1, column 17: unexpected character '}'"},
    };
    for (auto [text, want] : cases) EXPECT_EQ(gbnf_error(text), want) << text;
}

TEST(GrammarParse, ColumnsCountCharacters) {
    // "é" is two bytes but one column.
    EXPECT_EQ(gbnf_error("root ::= \"é\" bad"),
              "grammar: line 1, column 14: rule 'bad' is used but never defined");
}

TEST(GrammarParse, LeftRecursionIsRefused) {
    EXPECT_EQ(gbnf_error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]"),
              "grammar: line 2, column 1: rule 'expr' is left-recursive");
    // Indirect, through a nullable prefix.
    EXPECT_EQ(gbnf_error("root ::= a\na ::= b \"x\"\nb ::= \"y\"? a | \"z\""),
              "grammar: line 2, column 1: rule 'a' is left-recursive");
    EXPECT_EQ(gbnf_error("root ::= (\"a\"*)*"),
              "grammar: line 1, column 1: rule 'root' is left-recursive (it repeats an item that "
              "can match the "
              "empty string)");
    // Right recursion is fine.
    Matcher m("root ::= \"(\" root \")\" | \"x\"");
    EXPECT_TRUE(m.accepts("((x))"));
    EXPECT_FALSE(m.accepts("((x)"));
}

TEST(GrammarParse, EmptyLanguageAndLimits) {
    EXPECT_EQ(gbnf_error("root ::= \"a\" root"),
              "grammar: line 1, column 1: the language of rule 'root' is empty (it matches no "
              "finite string)");
    EXPECT_EQ(gbnf_error("root ::= [^\\x00-\\U0010FFFF]"),
              "grammar: line 1, column 1: the language of rule 'root' is empty (it matches no "
              "finite string)");
    std::string big = "root ::= \"a\"\n# " + std::string(Grammar::kMaxTextBytes, 'x');
    EXPECT_EQ(gbnf_error(big), "grammar: line 1, column 1: the text is " +
                                   std::to_string(big.size()) + " bytes; the limit is 1048576");
    std::string deep = "root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')');
    EXPECT_EQ(gbnf_error(deep), "grammar: line 1, column 266: parentheses nested deeper than 256");
    std::string many = "root ::=";
    for (int i = 0; i < 17; ++i) many += " \"a\"{0,4096}";
    EXPECT_EQ(gbnf_error(many),
              "grammar: line 1, column 201: the grammar needs more than 65536 rules");
    // Non-productive alternatives are pruned; the rest still works.
    Matcher m("root ::= \"a\" loop | \"b\"\nloop ::= \"c\" loop");
    EXPECT_TRUE(m.accepts("b"));
    EXPECT_FALSE(m.prefix("a"));
}

TEST(GrammarParse, RulesSpanLinesUntilTheNextDefinition) {
    const char *g = R"G(# a commented grammar
root ::= (
    greeting   # a comment inside
    " " name
  )
  | "bye"
name ::= [A-Z] [a-z]*
greeting ::= "hello" |
             "hi"
)G";
    Matcher m(g);
    EXPECT_TRUE(m.accepts("hello Bob"));
    EXPECT_TRUE(m.accepts("hi Al"));
    EXPECT_TRUE(m.accepts("bye"));
    EXPECT_FALSE(m.accepts("hi bob"));
    EXPECT_EQ(Grammar::from_gbnf(g)->gbnf(), g);
}

TEST(GrammarParse, OtherRootAndEscapes) {
    auto g = Grammar::from_gbnf("start ::= \"\\x41\\u00e9\\U0001F600\\n\\t\\\\\\\"[\\]\"", "start");
    Matcher m(g);
    EXPECT_TRUE(m.accepts("A\xc3\xa9\xf0\x9f\x98\x80\n\t\\\"[]"));
    EXPECT_EQ(gbnf_error("start ::= \"a\""),
              "grammar: line 1, column 1: the root rule 'root' is not defined");
}

// ---- the automaton ------------------------------------------------------------------------

TEST(GrammarMatch, RepetitionOperators) {
    struct Case {
        const char *g;
        std::vector<std::string> yes, no;
    };
    const Case cases[] = {
        {"root ::= \"a\"*", {"", "a", "aaaa"}, {"b", "aab"}},
        {"root ::= \"a\"+", {"a", "aaa"}, {"", "ab"}},
        {"root ::= \"a\"?", {"", "a"}, {"aa"}},
        {"root ::= \"ab\"{2}", {"abab"}, {"ab", "ababab", ""}},
        {"root ::= \"a\"{2,}", {"aa", "aaaaaaa"}, {"a", ""}},
        {"root ::= [xy]{1,3}", {"x", "yx", "xyx"}, {"", "xyxy"}},
        {"root ::= \"a\"{0}", {""}, {"a"}},
        {"root ::= \"a\"{ 0 , 2 } \"b\"", {"b", "ab", "aab"}, {"aaab"}},
        {"root ::= (\"a\" | \"bc\")* \"d\"", {"d", "abcad", "bcbcd"}, {"bd", "abc"}},
        {"root ::= \"x\" ( \"a\"? ){1,3} \"y\"", {"xy", "xay", "xaaay"}, {"x", "xby", "xaaaay"}},
    };
    for (const Case &c : cases) {
        Matcher m(c.g);
        for (const auto &s : c.yes) EXPECT_TRUE(m.accepts(s)) << c.g << " on '" << s << "'";
        for (const auto &s : c.no) EXPECT_FALSE(m.accepts(s)) << c.g << " on '" << s << "'";
    }
}

TEST(GrammarMatch, StarKeepsTheStateCountBounded) {
    Matcher m("root ::= \"[\" ( [a-z] | \"-\" )* \"]\"");
    State s = m.m.advance(m.m.start(), "[");
    for (int i = 0; i < 1000; ++i) s = m.m.advance(s, i % 2 ? "q" : "-");
    EXPECT_NE(s, TokenMasker::kDead);
    EXPECT_LE(m.m.stats().states, 4u);
    EXPECT_TRUE(m.m.accepting(m.m.advance(s, "]")));
}

TEST(GrammarMatch, DeepNestingIsIterative) {
    Matcher m("root ::= \"(\" root \")\" | \"x\"");
    const int depth = 20000;
    std::string s = std::string(depth, '(') + "x" + std::string(depth, ')');
    EXPECT_TRUE(m.accepts(s));
    EXPECT_FALSE(m.accepts(s.substr(1)));
    EXPECT_EQ(m.m.stats().limit_hits, 0u);
}

TEST(GrammarMatch, RunTimeLimitsMakeTransitionsDead) {
    // Ambiguous: after n "a"s there are 2^n distinct stacks. The closure limit stops it.
    auto g = Grammar::from_gbnf("root ::= \"a\" root \"b\" | \"a\" root \"c\" | \"\"");
    Matcher m(g);
    State s = m.m.start();
    int n = 0;
    while (n < 40 && s != TokenMasker::kDead) {
        s = m.m.advance(s, "a");
        ++n;
    }
    EXPECT_EQ(s, TokenMasker::kDead);
    EXPECT_GT(n, 10);
    EXPECT_GE(m.m.stats().limit_hits, 1u);
    // The dead transition is recorded: asking again is immediate and gives the same answer.
    State again = m.m.advance(m.m.start(), std::string(n, 'a'));
    EXPECT_EQ(again, TokenMasker::kDead);
    // Shorter prefixes still work.
    EXPECT_TRUE(m.accepts("aabc"));
}

TEST(GrammarMatch, AcceptingAndCanContinue) {
    Matcher m("root ::= \"ab\" | \"abc\"");
    TokenMasker &t = m.m;
    State a = t.advance(t.start(), "a"), ab = t.advance(a, "b"), abc = t.advance(ab, "c");
    EXPECT_FALSE(t.accepting(t.start()));
    EXPECT_FALSE(t.accepting(a));
    EXPECT_TRUE(t.can_continue(a));
    EXPECT_TRUE(t.accepting(ab));
    EXPECT_TRUE(t.can_continue(ab));
    EXPECT_TRUE(t.accepting(abc));
    EXPECT_FALSE(t.can_continue(abc));
    EXPECT_EQ(t.advance(abc, "c"), TokenMasker::kDead);
    EXPECT_EQ(t.advance(t.start(), "b"), TokenMasker::kDead);
    EXPECT_FALSE(t.accepting(TokenMasker::kDead));
    EXPECT_FALSE(t.can_continue(TokenMasker::kDead));
    // The same configuration reached twice is the same state.
    EXPECT_EQ(t.advance(t.start(), "ab"), ab);
}

TEST(GrammarMatch, Utf8ClassesAndSplitCharacters) {
    Matcher greek("root ::= [α-ω]+");
    EXPECT_TRUE(greek.accepts("αβω"));
    EXPECT_FALSE(greek.accepts("a"));
    EXPECT_FALSE(greek.accepts("Ω"));  // U+03A9 is below α
    Matcher neg("root ::= [^a\\x00-\\x1F]");
    for (const char *s : {"b", "é", "日", "\xf0\x9f\x98\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"})
        EXPECT_TRUE(neg.accepts(s)) << s;
    for (const char *s : {"a", "\n", "", "bb"}) EXPECT_FALSE(neg.accepts(s)) << s;
    Matcher any("root ::= .");
    EXPECT_TRUE(any.accepts("\n"));
    EXPECT_TRUE(any.accepts("\xe0\xa0\x80"));  // U+0800, smallest 3-byte
    EXPECT_FALSE(any.prefix("\xed\xa0\x80"));  // a surrogate
    EXPECT_FALSE(any.prefix("\xc0\x80"));      // overlong
    EXPECT_FALSE(any.prefix("\xe0\x80"));      // overlong 3-byte
    EXPECT_FALSE(any.prefix("\xf4\x90"));      // above U+10FFFF
    EXPECT_FALSE(any.prefix("\xff"));
    EXPECT_FALSE(any.prefix("\x80"));  // a lone continuation byte
    // A token ending inside a character: the state is alive, not accepting, and continues.
    TokenMasker &t = neg.m;
    State half = t.advance(t.start(), "\xe6\x97");
    ASSERT_NE(half, TokenMasker::kDead);
    EXPECT_FALSE(t.accepting(half));
    EXPECT_TRUE(t.can_continue(half));
    EXPECT_TRUE(t.accepting(t.advance(half, "\xa5")));  // 日
    EXPECT_EQ(t.advance(half, "a"), TokenMasker::kDead);
    // Class with several multi-byte ranges and ASCII mixed in.
    Matcher mix("root ::= [a-c\\u00e0-\\u00e5\\u4e00-\\u4e03\\U0001F600-\\U0001F601]*");
    EXPECT_TRUE(
        mix.accepts("aàå丁\xf0\x9f\x98\x81"
                    "c"));
    EXPECT_FALSE(mix.accepts("æ"));
    EXPECT_FALSE(mix.accepts("\xf0\x9f\x98\x82"));
}

// ---- masks --------------------------------------------------------------------------------

std::vector<std::string> synthetic_tokens(uint32_t seed) {
    std::vector<std::string> t;
    for (int b = 0x20; b < 0x7F; ++b) t.push_back(std::string(1, static_cast<char>(b)));
    for (const char *s : {"\n",
                          "\t",
                          "\x01",
                          "é",
                          "日本",
                          "日",
                          "\xe6",
                          "\x97\xa5",
                          "\xe6\x97",
                          "\xa5",
                          "\xf0\x9f\x98\x80",
                          "\xf0\x9f",
                          "\x98\x80",
                          "\xff",
                          "\xc3",
                          "\\n",
                          "\\u00e9",
                          "\\\"",
                          "\"",
                          "{\"",
                          "\":",
                          "\": ",
                          ", \"",
                          ",\"",
                          "\"}",
                          "true",
                          "false",
                          "null",
                          "tr",
                          "ue",
                          "name",
                          "age",
                          "tags",
                          "12",
                          "-3",
                          "0.5",
                          ".5",
                          "e+1",
                          "E-2",
                          "]}",
                          "}]",
                          "[]",
                          "{}",
                          "[\"",
                          "\"]",
                          "\", \"",
                          "α",
                          "ω",
                          "αβ",
                          "hello",
                          "hi",
                          "bye",
                          " ",
                          "  ",
                          ": ",
                          ", ",
                          "ab",
                          "abc",
                          "x",
                          "xyz",
                          "+",
                          "(",
                          ")",
                          "1+",
                          "2)"})
        t.push_back(s);
    std::mt19937 rng(seed);
    const std::string alphabet = "abcxyz0123456789\"{}[],: -+.eE()\\tnulrsf";
    while (t.size() < 320) {
        std::string s;
        int len = 2 + static_cast<int>(rng() % 5);
        for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
        t.push_back(s);
    }
    t.push_back("");  // never allowed
    return t;
}

std::shared_ptr<const GrammarVocab> synthetic_vocab(std::vector<std::string> toks,
                                                    std::vector<uint8_t> *eligible_out = nullptr) {
    std::vector<uint8_t> eligible(toks.size(), 1);
    // Some ineligible ones (not among the single bytes, which keep every walk alive).
    for (size_t i = 95; i < toks.size(); i += 17) eligible[i] = 0;
    if (eligible_out) *eligible_out = eligible;
    return std::make_shared<GrammarVocab>(std::move(toks), std::move(eligible));
}

bool bit(const uint64_t *m, size_t i) {
    return (m[i / 64] >> (i % 64)) & 1;
}

// Explores states breadth-first by tokens; for each, compares mask() with token-by-token
// advance() on a second, independent masker fed the whole prefix.
void check_mask_brute_force(std::shared_ptr<const Grammar> g, size_t max_states) {
    std::vector<std::string> toks = synthetic_tokens(7);
    std::vector<uint8_t> eligible;
    auto vocab = synthetic_vocab(toks, &eligible);
    TokenMasker m(g, vocab), ref(g, vocab);
    std::vector<std::pair<State, std::string>> queue{{m.start(), ""}};
    std::set<State> seen{m.start()};
    size_t checked = 0, allowed_total = 0;
    for (size_t q = 0; q < queue.size() && checked < max_states; ++q, ++checked) {
        auto [s, prefix] = queue[q];
        const uint64_t *mask = m.mask(s);
        std::vector<uint64_t> copy(mask, mask + m.mask_words());
        for (size_t i = 0; i < toks.size(); ++i) {
            bool want = eligible[i] && !toks[i].empty() &&
                        ref.advance(ref.start(), prefix + toks[i]) != TokenMasker::kDead;
            ASSERT_EQ(bit(copy.data(), i), want)
                << "state " << s << " prefix '" << prefix << "' token '" << toks[i] << "'";
            if (!want) continue;
            ++allowed_total;
            State n = m.advance(s, toks[i]);
            if (seen.insert(n).second) queue.push_back({n, prefix + toks[i]});
        }
        // Unused tail bits stay clear.
        for (size_t i = toks.size(); i < m.mask_words() * 64; ++i)
            ASSERT_FALSE(bit(copy.data(), i));
    }
    EXPECT_GT(checked, 5u);
    if (getenv("LLMKV_GRAMMAR_TEST_VERBOSE"))
        printf("brute force: %zu states, %zu allowed\n", checked, allowed_total);
    EXPECT_GT(allowed_total, checked);
}

TEST(GrammarMask, EqualsBruteForceArithmetic) {
    check_mask_brute_force(Grammar::from_gbnf(R"G(
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= num | "(" expr ")"
num ::= "-"? [0-9]+ ("." [0-9]+)?
)G"),
                           150);
}

TEST(GrammarMask, EqualsBruteForceUtf8) {
    check_mask_brute_force(
        Grammar::from_gbnf("root ::= ([α-ω] | [日本] | [^\\x00-\\x7F] \"x\" | \"hello\")+ \"!\"?"),
        120);
}

TEST(GrammarMask, EqualsBruteForceJsonSchema) {
    check_mask_brute_force(Grammar::from_json_schema(R"({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["x", "xyz", 12, true]}, "maxItems": 3}
        },
        "required": ["name"]
    })"),
                           200);
}

TEST(GrammarMask, CacheHitsAndIneligibleTokens) {
    std::vector<std::string> toks = {"a", "b", "ab", "", "c", "a"};
    auto vocab = std::make_shared<GrammarVocab>(toks, std::vector<uint8_t>{1, 1, 1, 1, 1, 0});
    TokenMasker m(Grammar::from_gbnf("root ::= \"a\" \"b\"?"), vocab);
    EXPECT_EQ(m.n_vocab(), 6u);
    State s = m.start();
    const uint64_t *a = m.mask(s);
    EXPECT_EQ(a[0], 0b000101u);  // "a" and "ab"; not "" nor the ineligible second "a"
    TokenMasker::Stats st = m.stats();
    EXPECT_EQ(st.mask_misses, 1u);
    EXPECT_EQ(st.mask_hits, 0u);
    const uint64_t *b = m.mask(s);
    EXPECT_EQ(b[0], 0b000101u);
    EXPECT_EQ(m.stats().mask_hits, 1u);
    EXPECT_EQ(m.stats().mask_misses, 1u);
    State sa = m.advance(s, "a");
    EXPECT_EQ(m.mask(sa)[0], 0b000010u);
    EXPECT_EQ(m.stats().mask_misses, 2u);
    EXPECT_EQ(m.mask(m.advance(s, "ab"))[0], 0u);
    EXPECT_EQ(m.mask(TokenMasker::kDead)[0], 0u);
    EXPECT_GT(m.stats().cache_bytes, 0u);
    EXPECT_GE(m.stats().states, 3u);
    EXPECT_EQ(m.stats().limit_hits, 0u);
    EXPECT_THROW(GrammarVocab(toks, std::vector<uint8_t>{1, 1}), Error);
}

TEST(GrammarMask, SharedGrammarAcrossMaskers) {
    auto g = Grammar::from_gbnf("root ::= [a-z]+");
    auto v = synthetic_vocab(synthetic_tokens(3));
    TokenMasker m1(g, v), m2(g, v);
    State s1 = m1.advance(m1.start(), "abc"), s2 = m2.advance(m2.start(), "abc");
    std::vector<uint64_t> a(m1.mask(s1), m1.mask(s1) + m1.mask_words());
    EXPECT_EQ(0, memcmp(a.data(), m2.mask(s2), a.size() * 8));
}

// ---- GBNF property test against std::regex -----------------------------------------------

TEST(GrammarProperty, MembershipAgreesWithRegex) {
    const char *gbnf = R"G(
root ::= item{1,3} "!"?
item ::= "ab" | [c-e]+ "x"? | "(" [a-c]* ")"
)G";
    const std::regex re("(ab|[c-e]+x?|\\([a-c]*\\)){1,3}!?");
    Matcher m(gbnf);
    std::mt19937 rng(42);
    const std::string alphabet = "abcdex!()";
    int accepted = 0;
    for (int i = 0; i < 4000; ++i) {
        std::string s;
        int len = static_cast<int>(rng() % 9);
        for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
        bool want = std::regex_match(s, re);
        ASSERT_EQ(m.accepts(s), want) << s;
        accepted += want;
        // A prefix of an accepted string is never dead.
        if (want) {
            for (size_t k = 0; k <= s.size(); ++k) ASSERT_TRUE(m.prefix(s.substr(0, k))) << s;
        }
    }
    EXPECT_GT(accepted, 50);
    if (getenv("LLMKV_GRAMMAR_TEST_VERBOSE")) printf("regex: %d of 4000 accepted\n", accepted);
    // Random walks over allowed tokens produce strings the regex accepts.
    auto vocab = synthetic_vocab(synthetic_tokens(11));
    TokenMasker t(Grammar::from_gbnf(gbnf), vocab);
    for (int walk = 0; walk < 200; ++walk) {
        State s = t.start();
        std::string out;
        for (int step = 0; step < 200; ++step) {
            if (t.accepting(s) && (!t.can_continue(s) || rng() % 3 == 0)) break;
            const uint64_t *mask = t.mask(s);
            std::vector<size_t> allowed;
            for (size_t i = 0; i < vocab->n_vocab(); ++i)
                if (bit(mask, i)) allowed.push_back(i);
            ASSERT_FALSE(allowed.empty()) << out;
            size_t pick = allowed[rng() % allowed.size()];
            out += vocab->token(pick);
            s = t.advance(s, vocab->token(pick));
            ASSERT_NE(s, TokenMasker::kDead);
        }
        if (t.accepting(s)) {
            EXPECT_TRUE(std::regex_match(out, re)) << out;
        }
    }
}

// ---- JSON Schema ---------------------------------------------------------------------------

struct SchemaMatcher : Matcher {
    explicit SchemaMatcher(const char *schema) : Matcher(Grammar::from_json_schema(schema)) {}
};

TEST(GrammarJsonSchema, Types) {
    SchemaMatcher str(R"({"type": "string"})");
    for (const char *s : {"\"\"", "\"a b\"", "\"\\n\\u00e9\\\"\"", "\"日本\""})
        EXPECT_TRUE(str.accepts(s)) << s;
    for (const char *s : {"a", "\"a", "\"\n\"", "\"\\q\"", "1", "\"\\u00g0\""})
        EXPECT_FALSE(str.accepts(s)) << s;
    // Surrogate escapes: only as a high-low pair (found by the grammar fuzz target).
    for (const char *s : {"\"\\ud83d\\ude00\"", "\"\\uD7FF\\uE000\\uffff\""})
        EXPECT_TRUE(str.accepts(s)) << s;
    for (const char *s : {"\"\\ud812\"", "\"\\udc00\"", "\"\\ud83d\\u0041\"", "\"\\ud83d\\ud83d\""})
        EXPECT_FALSE(str.accepts(s)) << s;
    SchemaMatcher num(R"({"type": "number"})");
    for (const char *s : {"0", "-1.5", "3e10", "2.5E-3", "12345"}) EXPECT_TRUE(num.accepts(s)) << s;
    for (const char *s : {"01", "1.", ".5", "+1", "-", "1e"}) EXPECT_FALSE(num.accepts(s)) << s;
    SchemaMatcher integer(R"({"type": "integer"})");
    EXPECT_TRUE(integer.accepts("-42"));
    EXPECT_FALSE(integer.accepts("4.2"));
    EXPECT_FALSE(integer.accepts("12345678901234567"));  // at most 16 digits
    SchemaMatcher b(R"({"type": "boolean"})");
    EXPECT_TRUE(b.accepts("true"));
    EXPECT_TRUE(b.accepts("false"));
    EXPECT_FALSE(b.accepts("null"));
    SchemaMatcher n(R"({"type": ["null", "integer"]})");
    EXPECT_TRUE(n.accepts("null"));
    EXPECT_TRUE(n.accepts("7"));
    EXPECT_FALSE(n.accepts("\"x\""));
    SchemaMatcher any(R"({"description": "anything"})");
    for (const char *s : {"{\"a\": [1, {\"b\":null}]}", "[]", "\"s\"", "-0.5", "true"})
        EXPECT_TRUE(any.accepts(s)) << s;
    EXPECT_FALSE(any.accepts("{\"a\"  :1}"));
}

TEST(GrammarJsonSchema, ObjectsKeepOrderAndOptionalKeys) {
    SchemaMatcher m(R"({"type": "object", "title": "t",
        "properties": {"b": {"type": "integer"}, "a": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["a"], "additionalProperties": false})");
    for (const char *s : {"{\"a\":\"x\"}", "{\"b\":1,\"a\":\"x\"}",
                          "{\"b\": 1, \"a\": \"x\", \"c\": true}", "{\"a\":\"x\",\"c\":false}"})
        EXPECT_TRUE(m.accepts(s)) << s;
    for (const char *s :
         {"{}", "{\"b\":1}", "{\"a\":\"x\",\"b\":1}", "{\"a\":\"x\",\"d\":1}", "{ \"a\":\"x\"}",
          "{\"a\":  \"x\"}", "{\"a\":\"x\" }", "{\"a\":\"x\",,\"c\":true}"})
        EXPECT_FALSE(m.accepts(s)) << s;
    SchemaMatcher all_optional(R"({"properties": {"x": {"type": "null"}, "y": {"type": "null"}}})");
    for (const char *s : {"{}", "{\"x\":null}", "{\"y\":null}", "{\"x\":null, \"y\":null}"})
        EXPECT_TRUE(all_optional.accepts(s)) << s;
    EXPECT_FALSE(all_optional.accepts("{\"y\":null,\"x\":null}"));
    SchemaMatcher empty(R"({"type": "object"})");
    EXPECT_TRUE(empty.accepts("{}"));
    EXPECT_FALSE(empty.accepts("{\"a\":1}"));
    SchemaMatcher odd_key(R"({"properties": {"q\"k/~": {"const": 1}}, "required": ["q\"k/~"]})");
    EXPECT_TRUE(odd_key.accepts("{\"q\\\"k/~\":1}"));
}

TEST(GrammarJsonSchema, EnumConstArraysStrings) {
    SchemaMatcher e(R"({"enum": ["red", 1, null, [1,2], {"k": "v"}]})");
    for (const char *s : {"\"red\"", "1", "null", "[1,2]", "{\"k\":\"v\"}"})
        EXPECT_TRUE(e.accepts(s)) << s;
    for (const char *s : {"\"blue\"", "[1, 2]", "2"}) EXPECT_FALSE(e.accepts(s)) << s;
    SchemaMatcher typed_enum(R"({"type": "string", "enum": ["a", 1]})");
    EXPECT_TRUE(typed_enum.accepts("\"a\""));
    EXPECT_FALSE(typed_enum.accepts("1"));
    SchemaMatcher c(R"({"const": "only"})");
    EXPECT_TRUE(c.accepts("\"only\""));
    EXPECT_FALSE(c.accepts("\"other\""));
    SchemaMatcher arr(
        R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
    for (const char *s : {"[1]", "[1,2]", "[1, 2, 3]"}) EXPECT_TRUE(arr.accepts(s)) << s;
    for (const char *s : {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]", "[ 1]"})
        EXPECT_FALSE(arr.accepts(s)) << s;
    SchemaMatcher arr0(R"({"type": "array", "minItems": 2})");
    EXPECT_TRUE(arr0.accepts("[1, \"x\", {}]"));
    EXPECT_FALSE(arr0.accepts("[1]"));
    SchemaMatcher none(R"({"type": "array", "maxItems": 0})");
    EXPECT_TRUE(none.accepts("[]"));
    EXPECT_FALSE(none.accepts("[1]"));
    SchemaMatcher len(R"({"type": "string", "minLength": 2, "maxLength": 3})");
    for (const char *s : {"\"ab\"", "\"abc\"", "\"日本\"", "\"a\\n\""})
        EXPECT_TRUE(len.accepts(s)) << s;
    for (const char *s : {"\"a\"", "\"abcd\"", "\"\""}) EXPECT_FALSE(len.accepts(s)) << s;
    SchemaMatcher minlen(R"({"minLength": 1})");
    EXPECT_TRUE(minlen.accepts("\"abcdefgh\""));
    EXPECT_FALSE(minlen.accepts("\"\""));
}

TEST(GrammarJsonSchema, AnyOfOneOfAndRefs) {
    SchemaMatcher any(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})");
    EXPECT_TRUE(any.accepts("5"));
    EXPECT_TRUE(any.accepts("\"x\""));
    EXPECT_FALSE(any.accepts("\"xy\""));
    SchemaMatcher one(R"({"oneOf": [{"const": 1}, {"const": 2}]})");
    EXPECT_TRUE(one.accepts("2"));
    EXPECT_FALSE(one.accepts("3"));
    SchemaMatcher tree(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
        "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"]}}})");
    EXPECT_TRUE(
        tree.accepts("{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}"));
    EXPECT_FALSE(tree.accepts("{\"v\":1,\"kids\":[{}]}"));
    SchemaMatcher defs(R"({"type": "object", "properties": {"p": {"$ref": "#/definitions/pt"}},
        "required": ["p"], "definitions": {"pt": {"type": "array", "items": {"type": "number"}}}})");
    EXPECT_TRUE(defs.accepts("{\"p\":[1.5, 2]}"));
    std::string g = json_schema_to_gbnf(R"({"type": "string"})");
    EXPECT_EQ(g.substr(0, 16), "root ::= string\n");
    EXPECT_EQ(Grammar::from_json_schema(R"({"type": "string"})")->gbnf(), g);
}

TEST(GrammarJsonSchema, ErrorsNameTheJsonPointer) {
    const std::pair<const char *, const char *> cases[] = {
        {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}})",
         "json schema: at /properties/a/pattern: unsupported keyword 'pattern'"},
        {R"({"type": "strin"})",
         "json schema: at /type: type must be one of object, string, number, integer, boolean, "
         "null, array"},
        {R"({"properties": {"a": {}}, "required": ["a", "b"]})",
         "json schema: at /required/1: required property 'b' is not in properties"},
        {R"({"type": "object", "additionalProperties": true})",
         "json schema: at /additionalProperties: additionalProperties other than false is not "
         "supported "
         "(objects have exactly the listed properties)"},
        {R"({"items": {"$ref": "#/$defs/missing"}})",
         "json schema: at /items/$ref: $ref '#/$defs/missing' names no definition"},
        {R"({"$ref": "http://example.com/s.json"})",
         "json schema: at /$ref: $ref 'http://example.com/s.json' is not supported (only "
         "#/$defs/NAME and "
         "#/definitions/NAME)"},
        {R"({"$ref": "#/$defs/a", "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}})",
         "json schema: at /$defs/a: the schema refers to itself before matching any input"},
        {R"({"type": "array", "maxItems": 5000})",
         "json schema: at /maxItems: maxItems 5000 is above the supported 4096"},
        {R"({"type": "string", "minLength": -1})",
         "json schema: at /minLength: minLength must be a non-negative integer"},
        {R"({"type": "string", "minLength": 3, "maxLength": 2})",
         "json schema: at /maxLength: maxLength is below minLength"},
        {R"({"anyOf": []})", "json schema: at /anyOf: anyOf must be a non-empty array"},
        {R"({"properties": {"a/b": false}})",
         "json schema: at /properties/a~1b: the schema false matches nothing"},
        {R"([1])", "json schema: at (root): a schema must be an object or a boolean"},
        {R"({"type": "array", "items": [{"type": "integer"}]})",
         "json schema: at /items: items as an array (tuple form) is not supported"},
        {R"({"enum": [1], "type": "string"})",
         "json schema: at (root): no enum/const value has the schema's type"},
    };
    for (auto [schema, want] : cases) EXPECT_EQ(schema_error(schema), want) << schema;
    std::string bad = schema_error(R"({"type": "string",})");
    EXPECT_EQ(bad.substr(0, 22), "json schema: byte 19: ") << bad;
    std::string deep(600, '[');
    EXPECT_EQ(schema_error(deep), "json schema: byte 513: nested deeper than 512");
}

// An independent validator for the subset (semantics from the JSON Schema spec, plus this
// converter's documented choices: keys in schema order, no extra keys).
bool valid(const OJson &v, const OJson &s, const OJson &root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
        std::string r = s["$ref"];
        std::string sect = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
        return valid(v, root[sect][r.substr(r.find('/', 2) + 1)], root);
    }
    if (s.contains("anyOf")) {
        for (const auto &sub : s["anyOf"])
            if (valid(v, sub, root)) return true;
        return false;
    }
    if (s.contains("oneOf")) {
        int n = 0;
        for (const auto &sub : s["oneOf"]) n += valid(v, sub, root);
        return n == 1;
    }
    if (s.contains("const") && v != s["const"]) return false;
    if (s.contains("enum")) {
        bool any = false;
        for (const auto &e : s["enum"]) any = any || e == v;
        if (!any) return false;
    }
    if (s.contains("type")) {
        std::vector<std::string> ts;
        if (s["type"].is_array())
            for (const auto &t : s["type"]) ts.push_back(t);
        else
            ts.push_back(s["type"]);
        bool ok = false;
        for (const auto &t : ts) {
            ok = ok || (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
                 (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
                 (t == "null" && v.is_null()) || (t == "object" && v.is_object()) ||
                 (t == "array" && v.is_array());
        }
        if (!ok) return false;
    }
    if (v.is_string()) {
        size_t cps = 0;
        for (unsigned char c : v.get<std::string>()) cps += (c & 0xC0) != 0x80;
        if (s.contains("minLength") && cps < s["minLength"].get<size_t>()) return false;
        if (s.contains("maxLength") && cps > s["maxLength"].get<size_t>()) return false;
    }
    if (v.is_array()) {
        if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
        if (s.contains("items"))
            for (const auto &x : v)
                if (!valid(x, s["items"], root)) return false;
    }
    if (v.is_object() && (s.contains("properties") || s.contains("type"))) {
        OJson props = s.value("properties", OJson::object());
        std::vector<std::string> order;
        for (auto it = props.begin(); it != props.end(); ++it) order.push_back(it.key());
        size_t last = 0;
        for (auto it = v.begin(); it != v.end(); ++it) {
            auto pos = std::find(order.begin(), order.end(), it.key());
            if (pos == order.end()) return false;  // no additional properties
            size_t idx = static_cast<size_t>(pos - order.begin()) + 1;
            if (idx <= last) return false;  // schema order
            last = idx;
            if (!valid(it.value(), props[it.key()], root)) return false;
        }
        for (const auto &r : s.value("required", OJson::array()))
            if (!v.contains(r.get<std::string>())) return false;
    }
    return true;
}

TEST(GrammarJsonSchema, RandomWalksProduceValidJson) {
    const char *schemas[] = {
        R"({"type": "object", "properties": {
              "name": {"type": "string", "minLength": 1, "maxLength": 8},
              "age": {"type": "integer"},
              "score": {"type": ["number", "null"]},
              "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
              "kind": {"enum": ["a", "b", 3]},
              "ok": {"type": "boolean"}},
            "required": ["name", "ok"], "additionalProperties": false})",
        R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object", "properties": {
              "v": {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
              "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
            "required": ["v"]}}})",
        R"({"type": "array", "items": {"anyOf": [{"const": {"k": [1, "x"]}}, {"type": "null"},
              {"properties": {"x": {"type": "number"}}}]}, "minItems": 1, "maxItems": 4})",
        R"({"description": "any JSON value"})",
    };
    auto vocab = synthetic_vocab(synthetic_tokens(5));
    std::mt19937 rng(1234);
    for (const char *schema_text : schemas) {
        const OJson schema = OJson::parse(schema_text);
        TokenMasker t(Grammar::from_json_schema(schema_text), vocab);
        int done = 0;
        for (int walk = 0; walk < 120; ++walk) {
            State s = t.start();
            std::string out;
            for (int step = 0;; ++step) {
                ASSERT_LT(step, 5000) << out;
                if (t.accepting(s) && (!t.can_continue(s) || rng() % 4 == 0)) break;
                const uint64_t *mask = t.mask(s);
                std::vector<size_t> allowed, closers;
                for (size_t i = 0; i < vocab->n_vocab(); ++i) {
                    if (!bit(mask, i)) continue;
                    allowed.push_back(i);
                    char c = vocab->token(i)[0];
                    if (vocab->token(i).size() == 1 &&
                        (c == '"' || c == ']' || c == '}' || c == '0'))
                        closers.push_back(i);
                }
                ASSERT_FALSE(allowed.empty()) << out;
                // Past a budget, prefer tokens that close strings, arrays and objects.
                const auto &pool = step > 120 && !closers.empty() ? closers : allowed;
                size_t pick = pool[rng() % pool.size()];
                out += vocab->token(pick);
                s = t.advance(s, vocab->token(pick));
                ASSERT_NE(s, TokenMasker::kDead) << out;
            }
            OJson v;
            ASSERT_NO_THROW(v = OJson::parse(out)) << out;
            ASSERT_TRUE(valid(v, schema, schema)) << schema_text << "\n" << out;
            if (getenv("LLMKV_GRAMMAR_TEST_VERBOSE") && walk < 3) printf("walk: %s\n", out.c_str());
            ++done;
        }
        EXPECT_EQ(done, 120);
        TokenMasker::Stats st = t.stats();
        EXPECT_GT(st.mask_hits, 0u);
        EXPECT_EQ(st.limit_hits, 0u);
    }
}

}  // namespace
}  // namespace llmkv
