// Fuzz target `grammar`: the GBNF and JSON Schema compilers and the TokenMasker.
//
// Input: byte 0 picks the language (bit 0: GBNF / JSON Schema) and the GBNF start rule
// (bits 1-2: root, root, value, expr); byte 1 is the number of bytes at the end of the input
// that drive the walk; the bytes between are the grammar or schema text.
// Properties:
//  - Grammar::from_gbnf / from_json_schema succeed or throw llmkv::Error with
//    LLMKV_ERR_INVALID_ARGUMENT and a message starting with "grammar:" / "json schema:";
//    nothing else escapes, and the compile takes bounded time (kMaxSeconds);
//  - for a grammar that compiles, a TokenMasker over a fixed vocabulary (all 256 single
//    bytes, multi-byte pieces, UTF-8 fragments, an empty and an ineligible token) walks from
//    start(), one token per walk byte, at most kMaxSteps tokens. In every state: the mask
//    equals brute force (bit i == eligible(i) && advance(state, token i) != kDead), no bit
//    past n_vocab is set, the chosen token's advance equals the byte-by-byte advance_byte
//    chain and is live, can_continue == some single byte continues (unless a run-time limit
//    was hit), and a live state that cannot continue is accepting;
//  - JSON Schema: whenever the walk is in an accepting state, the bytes so far parse with
//    nlohmann::json.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "fuzz_common.h"
#include "grammar/grammar.h"

using namespace llmkv;

namespace {

constexpr size_t kMaxSteps = 200;
constexpr double kMaxSeconds = 5.0;  // generous for sanitizer builds; a defect well before

const char *const kRoots[4] = {"root", "root", "value", "expr"};

std::shared_ptr<const GrammarVocab> *g_vocab = nullptr;

void setup() {
    if (g_vocab) return;
    fuzz::quiet_logs();
    std::vector<std::string> toks;
    std::vector<uint8_t> eligible;
    for (int b = 0; b < 256; ++b) {
        toks.push_back(std::string(1, char(b)));
        eligible.push_back(1);
    }
    const char *multi[] = {"{\"",
                           "\":",
                           "\",",
                           "\"}",
                           "true",
                           "null",
                           "false",
                           ", ",
                           ": ",
                           "[]",
                           "{}",
                           "12",
                           "0.5",
                           "e+",
                           "\\u00",
                           "\\n",
                           "ab",
                           "abc",
                           " the",
                           "\xC3\xA9",          // é
                           "\xC3",              // lead byte alone
                           "\xA9",              // continuation alone
                           "\xE2\x82",          // 2 of 3 bytes of €
                           "\xAC\"",            // the last byte of € and a quote
                           "\xF0\x9F\x98\x80",  // 😀
                           "\xED\xA0\x80",      // a UTF-8 surrogate (never valid)
                           "\xC0\x80",          // an overlong NUL (never valid)
                           "\"a\"",
                           "}]",
                           "]}"};
    for (const char *m : multi) {
        toks.push_back(m);
        eligible.push_back(1);
    }
    toks.push_back("");  // no bytes: never allowed
    eligible.push_back(1);
    toks.push_back("<|end|>");  // a control token: ineligible
    eligible.push_back(0);
    toks.push_back("a");  // a duplicate of a single byte, ineligible
    eligible.push_back(0);
    g_vocab = new std::shared_ptr<const GrammarVocab>(
        std::make_shared<GrammarVocab>(std::move(toks), std::move(eligible)));
}

std::string show(std::string_view s) {
    std::string out;
    for (unsigned char c : s.substr(0, 200)) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), c >= 0x20 && c < 0x7f && c != '\\' ? "%c" : "\\x%02x", c);
        out += buf;
    }
    return out;
}

bool bit(const uint64_t *m, size_t i) {
    return (m[i >> 6] >> (i & 63)) & 1;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setup();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    if (size < 2) return 0;
    const bool schema = data[0] & 1;
    const char *root = kRoots[(data[0] >> 1) & 3];
    const size_t n_walk = std::min<size_t>(data[1], size - 2);
    const std::string_view text(reinterpret_cast<const char *>(data + 2), size - 2 - n_walk);
    fuzz::Input walk(data + size - n_walk, n_walk);

    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    std::shared_ptr<const Grammar> g;
    try {
        g = schema ? Grammar::from_json_schema(text) : Grammar::from_gbnf(text, root);
    } catch (const Error &e) {
        const std::string msg = e.what();
        const char *prefix = schema ? "json schema: " : "grammar: ";
        FUZZ_CHECK(e.status() == LLMKV_ERR_INVALID_ARGUMENT, "status %d: %s", int(e.status()),
                   msg.c_str());
        FUZZ_CHECK(msg.rfind(prefix, 0) == 0, "message without '%s': %s", prefix, msg.c_str());
        FUZZ_CHECK(elapsed() < kMaxSeconds, "refusing took %.2f s", elapsed());
        return 0;
    } catch (const std::exception &e) {
        FUZZ_CHECK(false, "unexpected exception: %s", e.what());
    }
    FUZZ_CHECK(g != nullptr, "no grammar and no exception");
    FUZZ_CHECK(elapsed() < kMaxSeconds, "compiling took %.2f s", elapsed());

    const GrammarVocab &v = **g_vocab;
    const size_t nv = v.n_vocab();
    TokenMasker m(g, *g_vocab);
    TokenMasker::State s = m.start();
    // Non-productive alternatives are pruned, so a compiled grammar has a live start.
    if (s == TokenMasker::kDead) {
        FUZZ_CHECK(m.stats().limit_hits > 0, "start state is dead");
        return 0;
    }
    std::string out;
    std::vector<uint32_t> allowed;
    for (size_t step = 0; step <= kMaxSteps; ++step) {
        const bool acc = m.accepting(s);
        const bool cont = m.can_continue(s);
        FUZZ_CHECK(cont || acc, "live state %u can neither continue nor end after '%s'", s,
                   show(out).c_str());
        if (schema && acc) {
            try {
                const nlohmann::json j = nlohmann::json::parse(out);
                (void)j;
            } catch (const std::exception &e) {
                FUZZ_CHECK(false, "accepted output is not JSON: '%s': %s\n  schema: %s",
                           show(out).c_str(), e.what(), show(text).c_str());
            }
        }
        const uint64_t *mask = m.mask(s);
        std::vector<uint64_t> bits(mask, mask + m.mask_words());
        allowed.clear();
        bool any_byte = false;
        for (size_t i = 0; i < nv; ++i) {
            const bool ok = v.eligible(i) && !v.token(i).empty() &&
                            m.advance(s, v.token(i)) != TokenMasker::kDead;
            FUZZ_CHECK(
                bit(bits.data(), i) == ok, "mask bit %zu ('%s') is %d, brute force %d after '%s'",
                i, show(v.token(i)).c_str(), int(bit(bits.data(), i)), int(ok), show(out).c_str());
            if (ok) allowed.push_back(uint32_t(i));
            if (ok && i < 256) any_byte = true;
        }
        for (size_t i = nv; i < m.mask_words() * 64; ++i)
            FUZZ_CHECK(!bit(bits.data(), i), "bit %zu past n_vocab", i);
        if (m.stats().limit_hits == 0)
            FUZZ_CHECK(cont == any_byte,
                       "can_continue %d but a single byte continues: %d after '%s'", int(cont),
                       int(any_byte), show(out).c_str());
        if (allowed.empty() || walk.empty() || step == kMaxSteps) break;
        const uint32_t t = allowed[walk.below(uint32_t(allowed.size()))];
        const std::string &tb = v.token(t);
        TokenMasker::State bytewise = s;
        for (unsigned char c : tb) bytewise = m.advance_byte(bytewise, c);
        const TokenMasker::State next = m.advance(s, tb);
        FUZZ_CHECK(next == bytewise, "advance %u != advance_byte chain %u for '%s'", next, bytewise,
                   show(tb).c_str());
        FUZZ_CHECK(next != TokenMasker::kDead, "allowed token '%s' leads to kDead",
                   show(tb).c_str());
        out += tb;
        s = next;
        FUZZ_CHECK(elapsed() < kMaxSeconds, "walk took %.2f s", elapsed());
    }
    FUZZ_CHECK(m.advance(m.start(), out) == s,
               "advance(start, output) differs from the walk's state");
    return 0;
}

namespace llmkv::fuzz {

Seeds seeds() {
    // sel (bit 0: schema; bits 1-2: root), walk bytes, text, then the walk.
    auto in = [](uint8_t sel, std::string_view text, std::vector<uint8_t> walk) {
        std::vector<uint8_t> b;
        b.push_back(sel);
        b.push_back(uint8_t(walk.size()));
        b.insert(b.end(), text.begin(), text.end());
        b.insert(b.end(), walk.begin(), walk.end());
        return b;
    };
    std::vector<uint8_t> w64;
    for (int i = 0; i < 64; ++i) w64.push_back(uint8_t(i * 37 + 11));
    std::vector<uint8_t> zeros(48, 0), ones(48, 1), highs(48, 250);
    Seeds s;
    // GBNF.
    s.push_back({"gbnf-yes-no", in(0, "root ::= \"yes\" | \"no\"\n", zeros)});
    s.push_back(
        {"gbnf-arith",
         in(6,
            "expr ::= term ((\"+\" | \"-\") term)*\nterm ::= factor ((\"*\" | \"/\") factor)*\n"
            "factor ::= [0-9]+ | \"(\" expr \")\"\n",
            w64)});
    s.push_back(
        {"gbnf-json",
         in(4,
            "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
            "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\"\n"
            "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\"\n"
            "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt])* \"\\\"\"\n"
            "number ::= \"-\"? [0-9]+ (\".\" [0-9]+)?\nws ::= [ \\t\\n]{0,2}\n",
            w64)});
    s.push_back(
        {"gbnf-list", in(0, "root ::= item+\nitem ::= \"- \" [a-z ]{1,20} \"\\n\"\n", highs)});
    s.push_back(
        {"gbnf-unicode", in(0, "root ::= [\\u00e9\\u20ac\\U0001F600a-c]{1,4} . [^a-z]?\n", w64)});
    s.push_back({"gbnf-repeat",
                 in(0, "root ::= (\"ab\" | [0-9]){2,5} \"x\"{3} (\"y\"? \"z\"){0,2}\n", ones)});
    s.push_back(
        {"gbnf-comments",
         in(0, "# a comment\nroot ::= a # trailing\n  | b\na ::= \"\\x41\" \"\\t\"\nb ::= ()\n",
            zeros)});
    s.push_back({"gbnf-left-recursive", in(0, "root ::= root \"a\" | \"b\"\n", zeros)});
    s.push_back({"gbnf-empty-language", in(0, "root ::= \"a\" root\n", zeros)});
    s.push_back({"gbnf-undefined", in(0, "root ::= x y\nx ::= \"1\"\n", zeros)});
    s.push_back({"gbnf-unclosed", in(0, "root ::= (\"a\" | [b-\n", zeros)});
    s.push_back({"gbnf-empty-star", in(0, "root ::= (\"a\"?)* \"b\"\n", zeros)});
    s.push_back({"gbnf-big-repeat", in(0, "root ::= ((\"ab\"{4096}){4096}){2}\n", zeros)});
    s.push_back(
        {"gbnf-nested", in(0, std::string(300, '(') + "\"a\"" + std::string(300, ')'), zeros)});
    s.push_back(
        {"gbnf-ambiguous", in(0, "root ::= (\"a\" | \"a\" \"a\" | [a-z])* \"b\"?\n", highs)});
    s.push_back({"gbnf-reversed-range", in(0, "root ::= [z-a]\n", zeros)});
    s.push_back({"gbnf-no-root", in(2, "root ::= \"a\"\n", zeros)});
    // JSON Schema.
    s.push_back({"schema-person",
                 in(1,
                    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
                    R"("age":{"type":"integer"},"mood":{"enum":["happy","sad"]},)"
                    R"("tags":{"type":"array","items":{"type":"string"},"maxItems":3}},)"
                    R"("required":["name","age"]})",
                    w64)});
    s.push_back({"schema-any", in(1, "{}", w64)});
    s.push_back({"schema-number", in(1, R"({"type":"number"})", w64)});
    s.push_back(
        {"schema-string", in(1, R"({"type":"string","minLength":1,"maxLength":8})",
                             {1, 92 % 37, 200, 3, 17, 9, 250, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})});
    s.push_back({"schema-ref",
                 in(1,
                    R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},)"
                    R"("next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},)"
                    R"("required":["v","next"]}},"$ref":"#/$defs/node"})",
                    w64)});
    s.push_back({"schema-types", in(1, R"({"type":["boolean","null","integer"]})", ones)});
    s.push_back({"schema-const", in(1, R"({"const":{"k":[1,2,{"a":null}]}})", zeros)});
    s.push_back(
        {"schema-oneof",
         in(1,
            R"({"oneOf":[{"type":"array","minItems":1,"maxItems":2,"items":{"type":"boolean"}},)"
            R"({"type":"string","enum":["x","y"]}]})",
            w64)});
    s.push_back({"schema-unsupported", in(1, R"({"type":"string","pattern":"^a+$"})", zeros)});
    s.push_back({"schema-self-ref",
                 in(1, R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", zeros)});
    s.push_back({"schema-malformed", in(1, R"({"type":"object",})", zeros)});
    s.push_back({"schema-deep", in(1, std::string(600, '[') + std::string(600, ']'), zeros)});
    s.push_back({"schema-false", in(1, "false", zeros)});
    s.push_back({"schema-big-items", in(1,
                                        R"({"type":"array","minItems":4096,"maxItems":4096,)"
                                        R"("items":{"type":"string","minLength":4096}})",
                                        zeros)});
    // A string that starts with an escape \u: the walk picks the escape token.
    s.push_back({"schema-unicode-escape", in(1, R"({"type":"string"})", {34, 2, 2, 2})});
    return s;
}

}  // namespace llmkv::fuzz
