// Tokenizer tests: SmolLM2 ids against the HuggingFace reference fixture (needs the model),
// decode round trips, hand-built byte-level BPE and SentencePiece vocabularies (gpt-oss's
// harmony end-of-generation tokens among them), the
// pre-tokenizer patterns (Llama 3, Qwen2 and o200k against HuggingFace's splits), Utf8Stream,
// and rejection of malformed vocabularies.
#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/gguf.h"

namespace llmkv {
namespace {

// ---- helpers --------------------------------------------------------------------------

std::string model_path() {
    if (const char *env = std::getenv("LLMKV_MODEL"); env && *env) {
        if (std::ifstream(env).good()) return env;
    }
    std::string p = LLMKV_TEST_FIXTURES_DIR "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";
    return std::ifstream(p).good() ? p : std::string();
}

std::string read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string escape(const std::string &s) {
    std::string out;
    for (unsigned char c : s) {
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += char(c);
        }
    }
    return out;
}

std::string ids_str(const std::vector<int32_t> &ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return s + "]";
}

template <typename F>
llmkv_status status_of(F &&f) {
    try {
        f();
    } catch (const Error &e) {
        return e.status();
    }
    return 0;
}

// GPT-2 byte-level symbol of a byte, as UTF-8.
std::string byte_symbol(int b) {
    auto printable = [](int x) {
        return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    };
    uint32_t c = uint32_t(b);
    if (!printable(b)) {
        c = 0x100;
        for (int k = 0; k < b; ++k) c += printable(k) ? 0 : 1;
    }
    std::string s;
    if (c < 0x80) {
        s += char(c);
    } else {
        s += char(0xC0 | (c >> 6));
        s += char(0x80 | (c & 0x3F));
    }
    return s;
}

// ---- SmolLM2 against the reference fixture ------------------------------------------------

struct FixtureCase {
    std::string text;
    std::string pre;    // "smollm" (the file's own), "gpt2" or "llama-bpe"
    int parse_special;  // 1, 0, or -1 for "both"
    std::vector<int32_t> ids;
    bool roundtrip;
};

class SmolLM2Tokenizer : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::string path = model_path();
        if (path.empty()) return;
        file_ = GgufFile::open(path).release();
        tok_ = Tokenizer::from_gguf(*file_).release();
        // The same vocabulary with the other pre-tokenizations the fixture covers.
        for (const char *pre : {"gpt2", "llama-bpe"}) {
            TokenizerVocab v = Tokenizer::vocab_from_gguf(*file_);
            v.pre = pre;
            (*variants_)[pre] = new Tokenizer(std::move(v));
        }
        (*variants_)["smollm"] = tok_;
        const nlohmann::json doc =
            nlohmann::json::parse(read_file(LLMKV_TEST_FIXTURES_DIR "/tokenizer_smollm2.json"));
        for (const nlohmann::json &c : doc.at("cases")) {
            FixtureCase fc;
            fc.text = c.at("text").get<std::string>();
            fc.pre = c.value("pre", std::string("smollm"));
            const nlohmann::json &ps = c.at("parse_special");
            fc.parse_special = ps.is_null() ? -1 : (ps.get<bool>() ? 1 : 0);
            for (const nlohmann::json &id : c.at("ids")) fc.ids.push_back(id.get<int32_t>());
            fc.roundtrip = c.value("roundtrip", true);
            cases_->push_back(std::move(fc));
        }
    }
    static void TearDownTestSuite() {
        for (auto &kv : *variants_) {
            if (kv.second != tok_) delete kv.second;
        }
        variants_->clear();
        delete tok_;
        delete file_;
        tok_ = nullptr;
        file_ = nullptr;
    }
    void SetUp() override {
        if (!tok_) {
            GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found (set LLMKV_MODEL or put it "
                            "in models/)";
        }
    }

    static GgufFile *file_;
    static Tokenizer *tok_;
    static std::vector<FixtureCase> *cases_;
    static std::map<std::string, Tokenizer *> *variants_;  // by pre; "smollm" is tok_
};

GgufFile *SmolLM2Tokenizer::file_ = nullptr;
Tokenizer *SmolLM2Tokenizer::tok_ = nullptr;
std::vector<FixtureCase> *SmolLM2Tokenizer::cases_ = new std::vector<FixtureCase>();
std::map<std::string, Tokenizer *> *SmolLM2Tokenizer::variants_ =
    new std::map<std::string, Tokenizer *>();

TEST_F(SmolLM2Tokenizer, VocabularyFacts) {
    EXPECT_EQ(tok_->n_vocab(), 49152u);
    EXPECT_EQ(tok_->model(), "gpt2");
    EXPECT_EQ(tok_->pre_tokenizer(), PreTokenizer::kSmollm);
    EXPECT_EQ(tok_->bos(), 1);
    EXPECT_EQ(tok_->eos(), 2);
    EXPECT_FALSE(tok_->add_bos_default());
    EXPECT_EQ(tok_->find_token("<|im_start|>"), 1);
    EXPECT_EQ(tok_->find_token("no such token here"), -1);
    EXPECT_TRUE(tok_->is_end_of_generation(0));  // <|endoftext|>
    EXPECT_TRUE(tok_->is_end_of_generation(2));  // <|im_end|>
    EXPECT_FALSE(tok_->is_end_of_generation(1));
    EXPECT_FALSE(tok_->is_end_of_generation(-1));
    EXPECT_TRUE(tok_->is_special(1));
    EXPECT_FALSE(tok_->is_special(tok_->find_token("Hello")));
    EXPECT_EQ(tok_->token_bytes(tok_->find_token("\xC4\xA0the")), " the");  // "Ġthe"
    EXPECT_EQ(tok_->token_bytes(1), "<|im_start|>");
    EXPECT_EQ(tok_->encode("hi", true, false).front(), 1);
}

// The header's promise: bytes without a token are dropped (as the reference does), counted,
// and the 21 byte values SmolLM2 lacks are named.
TEST_F(SmolLM2Tokenizer, BytesWithoutATokenAreDroppedAndCounted) {
    EXPECT_EQ(tok_->n_unrepresentable_bytes(), 21u);
    DroppedBytes d;
    const std::string text = std::string(
        "a\x04"
        "b\xff\xc0"
        "c",
        6);
    EXPECT_EQ(tok_->decode(tok_->encode(text, false, false, &d)), "abc");
    EXPECT_EQ(d.count, 3u);
    EXPECT_EQ(d.first, 0x04);
    DroppedBytes none;
    tok_->encode("plain text, \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80", false, true, &none);
    EXPECT_EQ(none.count, 0u);
    EXPECT_EQ(none.first, -1);
}

TEST_F(SmolLM2Tokenizer, MatchesReferenceIds) {
    std::map<std::string, size_t> per_pre;
    for (const FixtureCase &c : *cases_) ++per_pre[c.pre];
    ASSERT_GE(per_pre["smollm"], 250u);
    ASSERT_GE(per_pre["gpt2"], 250u);
    ASSERT_GE(per_pre["llama-bpe"], 250u);
    ASSERT_EQ(per_pre.size(), 3u);
    size_t checked = 0, failures = 0;
    for (const FixtureCase &c : *cases_) {
        const Tokenizer &t = *variants_->at(c.pre);
        for (int parse = 0; parse < 2; ++parse) {
            if (c.parse_special != -1 && c.parse_special != parse) continue;
            std::vector<int32_t> got = t.encode(c.text, false, parse != 0);
            ++checked;
            if (got != c.ids && ++failures <= 25) {
                ADD_FAILURE() << "pre " << c.pre << " text \"" << escape(c.text)
                              << "\" parse_special=" << parse << "\n  expected " << ids_str(c.ids)
                              << "\n  got      " << ids_str(got);
            }
        }
    }
    EXPECT_EQ(failures, 0u) << "of " << checked << " encodings";
}

TEST_F(SmolLM2Tokenizer, DecodeRoundTrip) {
    size_t n = 0;
    for (const FixtureCase &c : *cases_) {
        if (!c.roundtrip) continue;
        const Tokenizer &t = *variants_->at(c.pre);
        ++n;
        EXPECT_EQ(t.decode(c.ids), c.text) << escape(c.text);
        EXPECT_EQ(t.decode(t.encode(c.text, false, true)), c.text) << escape(c.text);
        EXPECT_EQ(t.decode(t.encode(c.text, false, false)), c.text) << escape(c.text);
    }
    EXPECT_GT(n, 1000u);
}

TEST_F(SmolLM2Tokenizer, InvalidUtf8IsEncodedByteByByte) {
    // Bytes whose symbols SmolLM2 has (it lacks 0xC0, 0xC1, 0xF5..0xFF and a few others).
    const std::string text = "ok \x80 \xE2\x82 x\xC3(\xED\xA0\x80) end\xE2";
    EXPECT_EQ(tok_->decode(tok_->encode(text, false, false)), text);
}

TEST_F(SmolLM2Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
    std::vector<int32_t> with = tok_->encode("<|im_start|>user\nhi<|im_end|>", false, true);
    EXPECT_EQ(with.front(), 1);
    EXPECT_EQ(with.back(), 2);
    std::vector<int32_t> without = tok_->encode("<|im_start|>user\nhi<|im_end|>", false, false);
    for (int32_t id : without) EXPECT_FALSE(tok_->is_special(id)) << id;
}

TEST_F(SmolLM2Tokenizer, EncodesTenThousandTokensQuickly) {
    std::string text;
    for (const FixtureCase &c : *cases_) {
        if (c.parse_special == -1 && c.pre == "smollm") text += c.text + "\n";
    }
    std::string big;
    while (big.size() < 60000) big += text;
    // Warm-up, then time the best of three.
    size_t n_tokens = tok_->encode(big, false, true).size();
    double best_ms = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        std::vector<int32_t> ids = tok_->encode(big, false, true);
        auto t1 = std::chrono::steady_clock::now();
        best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
        EXPECT_EQ(ids.size(), n_tokens);
    }
    double per_10k = best_ms * 10000.0 / double(n_tokens);
    std::printf("[ perf ] %zu tokens from %zu bytes in %.2f ms (%.2f ms per 10k tokens)\n",
                n_tokens, big.size(), best_ms, per_10k);
    EXPECT_GT(n_tokens, 10000u);
    EXPECT_LT(per_10k, 250.0);  // a few ms in release builds; generous for sanitizers
}

// ---- Gemma 3 (SentencePiece-style BPE, 262,144 tokens) against its reference fixture ------

std::string gemma3_path() {
    if (const char *env = std::getenv("LLMKV_GEMMA3_MODEL"); env && *env) {
        if (std::ifstream(env).good()) return env;
    }
    std::string p = LLMKV_TEST_FIXTURES_DIR "/../../models/gemma-3-270m-q4_k_m.gguf";
    return std::ifstream(p).good() ? p : std::string();
}

class Gemma3Tokenizer : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::string path = gemma3_path();
        if (path.empty()) return;
        // From the metadata alone: the tokenizer does not depend on llmkv running the weights.
        using clock = std::chrono::steady_clock;
        auto t0 = clock::now();
        tok_ = Tokenizer::from_gguf_metadata(path).release();
        auto t1 = clock::now();
        load_ms_ = std::chrono::duration<double, std::milli>(t1 - t0).count();
        std::printf("[ perf ] Gemma 3 tokenizer from_gguf_metadata (read, parse, build) %.1f ms\n",
                    load_ms_);
        const nlohmann::json doc =
            nlohmann::json::parse(read_file(LLMKV_TEST_FIXTURES_DIR "/tokenizer_gemma3.json"));
        for (const nlohmann::json &c : doc.at("cases")) {
            FixtureCase fc;
            fc.text = c.at("text").get<std::string>();
            const nlohmann::json &ps = c.at("parse_special");
            fc.parse_special = ps.is_null() ? -1 : (ps.get<bool>() ? 1 : 0);
            for (const nlohmann::json &id : c.at("ids")) fc.ids.push_back(id.get<int32_t>());
            fc.roundtrip = c.value("roundtrip", true);
            cases_->push_back(std::move(fc));
        }
    }
    static void TearDownTestSuite() {
        delete tok_;
        tok_ = nullptr;
    }
    void SetUp() override {
        if (!tok_) {
            GTEST_SKIP()
                << "gemma-3-270m-q4_k_m.gguf not found (scripts/fetch_model.sh gemma3 puts it "
                   "in models/; or set LLMKV_GEMMA3_MODEL)";
        }
    }

    static Tokenizer *tok_;
    static double load_ms_;
    static std::vector<FixtureCase> *cases_;
};

Tokenizer *Gemma3Tokenizer::tok_ = nullptr;
double Gemma3Tokenizer::load_ms_ = 0;
std::vector<FixtureCase> *Gemma3Tokenizer::cases_ = new std::vector<FixtureCase>();

TEST_F(Gemma3Tokenizer, VocabularyFacts) {
    EXPECT_EQ(tok_->n_vocab(), 262144u);
    EXPECT_EQ(tok_->model(), "llama");
    EXPECT_EQ(tok_->bos(), 2);
    EXPECT_EQ(tok_->eos(), 1);
    EXPECT_EQ(tok_->unk(), 3);
    EXPECT_EQ(tok_->pad(), 0);
    EXPECT_TRUE(tok_->add_bos_default());
    EXPECT_FALSE(tok_->add_space_prefix());
    EXPECT_EQ(tok_->n_unrepresentable_bytes(), 0u);
    const int32_t start = tok_->find_token("<start_of_turn>"),
                  end = tok_->find_token("<end_of_turn>");
    EXPECT_EQ(start, 105);
    EXPECT_EQ(end, 106);
    EXPECT_TRUE(tok_->is_end_of_generation(end));
    EXPECT_TRUE(tok_->is_end_of_generation(1));
    EXPECT_FALSE(tok_->is_end_of_generation(start));
    EXPECT_TRUE(tok_->is_special(start));
    EXPECT_EQ(tok_->encode("hi", true, false).front(), 2);
    EXPECT_EQ(tok_->encode("<start_of_turn>user\n", false, true),
              (std::vector<int32_t>{105, tok_->find_token("user"), 107}));
    EXPECT_EQ(tok_->token_bytes(138), "  ");  // stored with real spaces
    EXPECT_EQ(tok_->token_bytes(tok_->find_token("\xE2\x96\x81the")), " the");
    EXPECT_EQ(tok_->token_bytes(tok_->find_token("<0xE2>")), "\xE2");
    EXPECT_EQ(tok_->decode(tok_->encode("  two  spaces", true, true)), "<bos>  two  spaces");
}

TEST_F(Gemma3Tokenizer, LoadsWellUnderASecond) {
    // Measured in SetUpTestSuite: the metadata (262,144 strings, scores, types) read and parsed,
    // and the tokenizer built from it.
    EXPECT_LT(load_ms_, 1000.0);
}

TEST_F(Gemma3Tokenizer, MatchesReferenceIds) {
    ASSERT_GE(cases_->size(), 400u);
    size_t checked = 0, failures = 0;
    for (const FixtureCase &c : *cases_) {
        for (int parse = 0; parse < 2; ++parse) {
            if (c.parse_special != -1 && c.parse_special != parse) continue;
            std::vector<int32_t> got = tok_->encode(c.text, false, parse != 0);
            ++checked;
            if (got != c.ids && ++failures <= 25) {
                ADD_FAILURE() << "text \"" << escape(c.text) << "\" parse_special=" << parse
                              << "\n  expected " << ids_str(c.ids) << "\n  got      "
                              << ids_str(got);
            }
        }
    }
    EXPECT_EQ(failures, 0u) << "of " << checked << " encodings";
}

TEST_F(Gemma3Tokenizer, DecodeRoundTrip) {
    size_t n = 0;
    for (const FixtureCase &c : *cases_) {
        if (!c.roundtrip) continue;
        ++n;
        EXPECT_EQ(tok_->decode(c.ids), c.text) << escape(c.text);
        EXPECT_EQ(tok_->decode(tok_->encode(c.text, false, true)), c.text) << escape(c.text);
        EXPECT_EQ(tok_->decode(tok_->encode(c.text, false, false)), c.text) << escape(c.text);
    }
    EXPECT_GT(n, 400u);
}

TEST_F(Gemma3Tokenizer, InvalidUtf8RoundTripsThroughByteTokens) {
    const std::string text = "ok \x80 \xE2\x82 x\xC3(\xED\xA0\x80) end\xE2\xFF";
    DroppedBytes d;
    EXPECT_EQ(tok_->decode(tok_->encode(text, false, false, &d)), text);
    EXPECT_EQ(d.count, 0u);
}

TEST_F(Gemma3Tokenizer, EncodesTenThousandTokensQuickly) {
    std::string text;
    for (const FixtureCase &c : *cases_) {
        if (c.parse_special == -1) text += c.text + "\n";
    }
    std::string big;
    while (big.size() < 60000) big += text;
    size_t n_tokens = tok_->encode(big, false, true).size();
    double best_ms = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        std::vector<int32_t> ids = tok_->encode(big, false, true);
        auto t1 = std::chrono::steady_clock::now();
        best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
        EXPECT_EQ(ids.size(), n_tokens);
    }
    double per_10k = best_ms * 10000.0 / double(n_tokens);
    std::printf("[ perf ] Gemma 3: %zu tokens from %zu bytes in %.2f ms (%.2f ms per 10k tokens)\n",
                n_tokens, big.size(), best_ms, per_10k);
    EXPECT_GT(n_tokens, 10000u);
    EXPECT_LT(per_10k, 250.0);
}

// ---- a hand-built byte-level BPE vocabulary -------------------------------------------

// Ids 0..255: the byte symbols (id = byte); then merges' results; then control tokens.
TokenizerVocab small_bpe_vocab() {
    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = "gpt2";
    for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_symbol(b));
    const char *merges[] = {"h e", "l l",          "he ll", "hell o", "\xC4\xA0 w",
                            "o r", "\xC4\xA0w or", "l d",   "1 2"};
    for (const char *m : merges) {
        std::string s = m;
        size_t sp = s.find(' ');
        v.merges.push_back(s);
        v.tokens.push_back(s.substr(0, sp) + s.substr(sp + 1));  // ids 256..264
    }
    v.tokens.push_back("<|end|>");  // 265
    v.tokens.push_back("<s>");      // 266
    v.token_types.assign(v.tokens.size(), kTokenNormal);
    v.token_types[265] = kTokenControl;
    v.token_types[266] = kTokenControl;
    v.bos = 266;
    v.eos = 265;
    return v;
}

TEST(ByteBpeTokenizer, AVocabularyMissingByteSymbolsDropsAndCountsThoseBytes) {
    TokenizerVocab v = small_bpe_vocab();
    v.tokens[0x07] = "\xE2\x90\x87";  // the symbol of byte 0x07 replaced by another string
    Tokenizer t(std::move(v));
    EXPECT_EQ(t.n_unrepresentable_bytes(), 1u);
    DroppedBytes d;
    EXPECT_EQ(t.encode(std::string("h\x07i\x07", 4), false, false, &d),
              (std::vector<int32_t>{'h', 'i'}));
    EXPECT_EQ(d.count, 2u);
    EXPECT_EQ(d.first, 0x07);
    EXPECT_EQ(Tokenizer(small_bpe_vocab()).n_unrepresentable_bytes(), 0u);
}

TEST(ByteBpeTokenizer, MergesByRank) {
    Tokenizer t(small_bpe_vocab());
    EXPECT_EQ(t.encode("hello", false, false), (std::vector<int32_t>{259}));
    EXPECT_EQ(t.encode("hello world", false, false), (std::vector<int32_t>{259, 262, 263}));
    // "l l" applies leftmost first: "lll" -> "ll" "l".
    EXPECT_EQ(t.encode("lll", false, false), (std::vector<int32_t>{257, 'l'}));
    EXPECT_EQ(t.encode("12", false, false), (std::vector<int32_t>{264}));
    EXPECT_EQ(t.encode("", false, false), (std::vector<int32_t>{}));
    EXPECT_EQ(t.encode("", true, false), (std::vector<int32_t>{266}));
    EXPECT_EQ(t.encode("hi", true, false), (std::vector<int32_t>{266, 'h', 'i'}));
    // Spaces and newlines are byte symbols too: "a\n" -> 'a', '\n'.
    EXPECT_EQ(t.encode("a\n", false, false), (std::vector<int32_t>{'a', '\n'}));
    EXPECT_EQ(t.decode(t.encode("hello world\n\t\xC3\xA9", false, false)),
              "hello world\n\t\xC3\xA9");
    EXPECT_EQ(t.token_bytes(262), " wor");
    EXPECT_EQ(t.token_text(262), "\xC4\xA0wor");
}

TEST(ByteBpeTokenizer, SmollmDigitsAreSeparate) {
    TokenizerVocab v = small_bpe_vocab();
    v.pre = "smollm";
    Tokenizer t(std::move(v));
    EXPECT_EQ(t.encode("12", false, false), (std::vector<int32_t>{'1', '2'}));
    TokenizerVocab v2 = small_bpe_vocab();
    v2.pre = "something-new";  // falls back to the GPT-2 pattern (with a warning)
    EXPECT_EQ(Tokenizer(std::move(v2)).encode("12", false, false), (std::vector<int32_t>{264}));
}

TEST(ByteBpeTokenizer, SpecialTokens) {
    Tokenizer t(small_bpe_vocab());
    EXPECT_EQ(t.encode("hi<|end|>", false, true), (std::vector<int32_t>{'h', 'i', 265}));
    EXPECT_EQ(t.encode("<s><|end|><|end", false, true),
              (std::vector<int32_t>{266, 265, '<', '|', 'e', 'n', 'd'}));
    std::vector<int32_t> plain = t.encode("hi<|end|>", false, false);
    EXPECT_EQ(plain, (std::vector<int32_t>{'h', 'i', '<', '|', 'e', 'n', 'd', '|', '>'}));
    EXPECT_EQ(t.decode(t.encode("a<|end|>b", false, true)), "a<|end|>b");
    EXPECT_TRUE(t.is_end_of_generation(265));
    EXPECT_TRUE(t.is_special(266));
    EXPECT_FALSE(t.is_special('a'));
    EXPECT_EQ(t.token_bytes(265), "<|end|>");
}

TEST(ByteBpeTokenizer, LongestSpecialMatchWins) {
    TokenizerVocab v = small_bpe_vocab();
    v.tokens.push_back("<|end|>x");  // 267
    v.token_types.push_back(kTokenUserDefined);
    Tokenizer t(std::move(v));
    EXPECT_EQ(t.encode("<|end|>x<|end|>", false, true), (std::vector<int32_t>{267, 265}));
}

TEST(ByteBpeTokenizer, MissingByteSymbolIsDropped) {
    TokenizerVocab v = small_bpe_vocab();
    v.tokens[0x1d] = "unused-symbol";  // the vocabulary no longer has byte 0x1d's symbol
    v.tokens['x'] = "unused-x";        // nor 'x'
    Tokenizer t(std::move(v));
    EXPECT_EQ(t.encode("a\x1d", false, false), (std::vector<int32_t>{'a'}));
    // Left out before merging: its neighbours merge as if it were not there.
    EXPECT_EQ(t.encode("hxello", false, false), (std::vector<int32_t>{259}));
    EXPECT_EQ(t.encode("x", false, false), (std::vector<int32_t>{}));
}

TEST(ByteBpeTokenizer, Llama3IgnoresMergesForWholeWords) {
    TokenizerVocab v = small_bpe_vocab();
    v.pre = "llama-bpe";
    v.tokens.push_back("lll");  // 267, reachable by no merge
    v.token_types.push_back(kTokenNormal);
    Tokenizer t(std::move(v));
    EXPECT_EQ(t.encode("lll", false, false), (std::vector<int32_t>{267}));
    EXPECT_EQ(t.encode("hello", false, false), (std::vector<int32_t>{259}));
}

TEST(ByteBpeTokenizer, DecodeRejectsBadIds) {
    Tokenizer t(small_bpe_vocab());
    int32_t bad[] = {'a', 9999};
    EXPECT_EQ(status_of([&] { t.decode(bad, 2); }), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] { t.token_text(-1); }), LLMKV_ERR_INVALID_ARGUMENT);
}

TEST(ByteBpeTokenizer, RandomBytesRoundTrip) {
    std::mt19937 rng(99);
    for (const char *pre : {"gpt2", "smollm", "llama-bpe", "gpt-4o"}) {
        TokenizerVocab v = small_bpe_vocab();
        v.pre = pre;
        Tokenizer t(std::move(v));
        for (int round = 0; round < 300; ++round) {
            std::string text;
            size_t len = rng() % 40;
            for (size_t i = 0; i < len; ++i) {
                // Mostly ASCII, some high bytes (often invalid UTF-8), some markup.
                uint32_t r = rng() % 10;
                text += r < 6   ? char(' ' + rng() % 95)
                        : r < 9 ? char(rng() % 256)
                                : std::string("<|end|>")[rng() % 7];
            }
            EXPECT_EQ(t.decode(t.encode(text, false, false)), text) << pre;
            EXPECT_EQ(t.decode(t.encode(text, false, true)), text) << pre;
        }
    }
}

// ---- pre-tokenizer patterns -----------------------------------------------------------

std::vector<std::string> split(PreTokenizer kind, std::string_view text) {
    std::vector<std::string_view> words;
    pretokenize(kind, text, words);
    return std::vector<std::string>(words.begin(), words.end());
}

using Words = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
    EXPECT_EQ(split(PreTokenizer::kGpt2, "Hello world's  end\n\n"),
              (Words{"Hello", " world", "'s", " ", " end", "\n\n"}));
    EXPECT_EQ(split(PreTokenizer::kGpt2, "x \n y"), (Words{"x", " \n", " y"}));
    EXPECT_EQ(split(PreTokenizer::kGpt2, "a 123 !?  \t"), (Words{"a", " 123", " !?", "  \t"}));
    EXPECT_EQ(split(PreTokenizer::kGpt2, "IT'S ''s"), (Words{"IT", "'", "S", " ''", "s"}));
    EXPECT_EQ(split(PreTokenizer::kGpt2, "caf\xC3\xA9 e\xCC\x81"),
              (Words{"caf\xC3\xA9", " e", "\xCC\x81"}));
    EXPECT_EQ(split(PreTokenizer::kGpt2, std::string("a\xFF") + "b"), (Words{"a", "\xFF", "b"}));
    EXPECT_EQ(split(PreTokenizer::kGpt2, "\xE3\x80\x80x"), (Words{"\xE3\x80\x80", "x"}));
    EXPECT_EQ(split(PreTokenizer::kGpt2, ""), Words{});
}

TEST(PreTokenizer, Smollm) {
    EXPECT_EQ(split(PreTokenizer::kSmollm, "abc 123 def"),
              (Words{"abc", " ", "1", "2", "3", " def"}));
    EXPECT_EQ(split(PreTokenizer::kSmollm, "x\xC2\xB2  4"), (Words{"x", "\xC2\xB2", "  ", "4"}));
}

TEST(PreTokenizer, Llama3) {
    EXPECT_EQ(split(PreTokenizer::kLlama3, "Hello 12345 world!!\n\n  x"),
              (Words{"Hello", " ", "123", "45", " world", "!!\n\n", " ", " x"}));
    EXPECT_EQ(split(PreTokenizer::kLlama3, "IT'S 'Re"), (Words{"IT", "'S", " '", "Re"}));
    EXPECT_EQ(split(PreTokenizer::kLlama3, "a\n\n \n  b"), (Words{"a", "\n\n \n", " ", " b"}));
    EXPECT_EQ(split(PreTokenizer::kLlama3, "(x) \tend"), (Words{"(x", ")", " ", "\tend"}));
}

TEST(PreTokenizer, Qwen2) {
    // As Llama 3, but every number code point alone.
    EXPECT_EQ(split(PreTokenizer::kQwen2, "Hello 12345 world!!\n\n  x"),
              (Words{"Hello", " ", "1", "2", "3", "4", "5", " world", "!!\n\n", " ", " x"}));
    EXPECT_EQ(split(PreTokenizer::kQwen2, "IT'S 'Re"), (Words{"IT", "'S", " '", "Re"}));
    EXPECT_EQ(split(PreTokenizer::kQwen2, "v2.0 x\xC2\xB2"),
              (Words{"v", "2", ".", "0", " x", "\xC2\xB2"}));
    EXPECT_EQ(split(PreTokenizer::kQwen2, "a\n\n \n  b"), (Words{"a", "\n\n \n", " ", " b"}));
    EXPECT_EQ(split(PreTokenizer::kQwen2, "\xE4\xBD\xA0\xE5\xA5\xBD 42"),
              (Words{"\xE4\xBD\xA0\xE5\xA5\xBD", " ", "4", "2"}));
}

TEST(PreTokenizer, MatchesHuggingFaceSplits) {
    // tokenizer_pretokenize.json: HuggingFace's Split(Regex(pattern), isolated) over the
    // fixture strings, for the llama-bpe and qwen2 patterns.
    const nlohmann::json doc =
        nlohmann::json::parse(read_file(LLMKV_TEST_FIXTURES_DIR "/tokenizer_pretokenize.json"));
    std::map<std::string, size_t> per_pre;
    size_t failures = 0;
    for (const nlohmann::json &c : doc.at("cases")) {
        const std::string pre = c.at("pre").get<std::string>();
        const std::string text = c.at("text").get<std::string>();
        Words want;
        for (const nlohmann::json &w : c.at("words")) want.push_back(w.get<std::string>());
        ASSERT_TRUE(pre == "llama-bpe" || pre == "qwen2") << pre;
        Words got = split(pre == "qwen2" ? PreTokenizer::kQwen2 : PreTokenizer::kLlama3, text);
        ++per_pre[pre];
        if (got != want && ++failures <= 20) {
            std::string g, w;
            for (const std::string &x : got) g.append("[").append(escape(x)).append("]");
            for (const std::string &x : want) w.append("[").append(escape(x)).append("]");
            ADD_FAILURE() << pre << " \"" << escape(text) << "\"\n  expected " << w
                          << "\n  got      " << g;
        }
    }
    EXPECT_GE(per_pre["llama-bpe"], 400u);
    EXPECT_GE(per_pre["qwen2"], 400u);
    EXPECT_EQ(failures, 0u);
}

TEST(PreTokenizer, O200k) {
    // Words split where lower case turns to upper; a contraction of any case stays on the word.
    EXPECT_EQ(split(PreTokenizer::kO200k, "DON'T I'm we'VE they'Re"),
              (Words{"DON'T", " I'm", " we'VE", " they'Re"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, "HelloWorld HTTPServer iPhone"),
              (Words{"Hello", "World", " HTTPServer", " i", "Phone"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, "O'Neil don'tstop"),
              (Words{"O", "'Neil", " don't", "stop"}));
    // (?i) folds U+017F (long s) to 's'.
    EXPECT_EQ(split(PreTokenizer::kO200k, "it'\xC5\xBF"), (Words{"it'\xC5\xBF"}));
    // Numbers in threes; punctuation takes the newlines and slashes after it.
    EXPECT_EQ(split(PreTokenizer::kO200k, "x12345 6"), (Words{"x", "123", "45", " ", "6"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, "(a) //x\n/"), (Words{"(a", ")", " //", "x", "\n", "/"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, "!\n/x"), (Words{"!\n/", "x"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, "  \n  x"), (Words{"  \n", " ", " x"}));
    // Marks are in both letter sets: a lone mark before an upper-case letter is a word of its
    // own (the first alternative matches it before the second could take both).
    EXPECT_EQ(split(PreTokenizer::kO200k, "\xCC\x81Q \xCC\x81\xCC\x81z"),
              (Words{"\xCC\x81", "Q", " \xCC\x81\xCC\x81z"}));
    EXPECT_EQ(split(PreTokenizer::kO200k,
                    "CAFE\xCC\x81 \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D"),
              (Words{"CAFE\xCC\x81", " \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D"}));
    // Modifier (Lm) and titlecase (Lt) letters; a no-break space is a prefix like any space.
    EXPECT_EQ(split(PreTokenizer::kO200k, "a\xCA\xB0Q"), (Words{"a\xCA\xB0", "Q"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, "\xC7\x85x\xC7\x85X"), (Words{"\xC7\x85x", "\xC7\x85X"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, "a\xC2\xA0z"), (Words{"a", "\xC2\xA0z"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, ""), Words{});
}

TEST(PreTokenizer, O200kInvalidBytesSplitLikeASymbol) {
    // A byte that is not part of valid UTF-8 is one code point, neither letter, number nor
    // space: the text splits exactly as it does with '!' for each such byte.
    for (const char *shape : {"a!b", "!A", "x !!\n/y", "1!2", "A!'s", "\xCC\x81!", " !\t", "!"}) {
        for (const std::string bad : {"\xFF", "\x80", "\xC3", "\xE2\x82"}) {
            std::string text, with_symbols;
            for (const char *c = shape; *c; ++c) {
                text += *c == '!' ? bad : std::string(1, *c);
                with_symbols += *c == '!' ? std::string(bad.size(), '!') : std::string(1, *c);
            }
            Words want;
            size_t k = 0;
            for (const std::string &w : split(PreTokenizer::kO200k, with_symbols)) {
                std::string m;
                for (char c : w) m += c == '!' ? bad[k++ % bad.size()] : c;
                want.push_back(m);
            }
            EXPECT_EQ(split(PreTokenizer::kO200k, text), want) << escape(text);
        }
    }
    EXPECT_EQ(split(PreTokenizer::kO200k, "a\xFFz"), (Words{"a", "\xFFz"}));
    EXPECT_EQ(split(PreTokenizer::kO200k, "\xE2\x82 x"), (Words{"\xE2\x82", " x"}));
}

TEST(PreTokenizer, O200kMatchesHuggingFaceSplits) {
    // tokenizer/o200k_pretokenize.json: HuggingFace's Split(Regex(o200k pattern), isolated)
    // over chosen and seeded random strings (scripts/make_pretokenizer_fixture.py).
    const nlohmann::json doc = nlohmann::json::parse(
        read_file(LLMKV_TEST_FIXTURES_DIR "/tokenizer/o200k_pretokenize.json"));
    size_t n = 0, failures = 0;
    for (const nlohmann::json &c : doc.at("cases")) {
        const std::string text = c.at("text").get<std::string>();
        Words want;
        for (const nlohmann::json &w : c.at("words")) want.push_back(w.get<std::string>());
        Words got = split(PreTokenizer::kO200k, text);
        ++n;
        if (got != want && ++failures <= 20) {
            std::string g, w;
            for (const std::string &x : got) g.append("[").append(escape(x)).append("]");
            for (const std::string &x : want) w.append("[").append(escape(x)).append("]");
            ADD_FAILURE() << "\"" << escape(text) << "\"\n  expected " << w << "\n  got      " << g;
        }
    }
    EXPECT_GE(n, 700u);
    EXPECT_EQ(failures, 0u);
}

TEST(PreTokenizer, NfcNormalization) {
    EXPECT_EQ(nfc_normalize("plain ascii"), "plain ascii");
    EXPECT_EQ(nfc_normalize("cafe\xCC\x81"), "caf\xC3\xA9");   // e + U+0301 -> é
    EXPECT_EQ(nfc_normalize("\xE2\x84\xAB"), "\xC3\x85");      // Å (angstrom) -> Å
    EXPECT_EQ(nfc_normalize("\xEF\xAC\x81"), "\xEF\xAC\x81");  // ﬁ: NFC keeps it
    EXPECT_EQ(nfc_normalize("a\xFF"
                            "e\xCC\x81\x80"),
              "a\xFF\xC3\xA9\x80");  // invalid bytes kept
    EXPECT_EQ(nfc_normalize(""), "");
}

TEST(ByteBpeTokenizer, Qwen2SplitsDigitsAndNormalizes) {
    TokenizerVocab v = small_bpe_vocab();
    v.pre = "qwen2";
    v.tokens.push_back("\xC3\x83\xC2\xA9");  // 267: "é" as byte-level symbols (C3 A9)
    v.token_types.push_back(kTokenNormal);
    v.merges.push_back("\xC3\x83 \xC2\xA9");
    Tokenizer t(std::move(v));
    EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kQwen2);
    EXPECT_EQ(t.encode("12", false, false),
              (std::vector<int32_t>{'1', '2'}));  // no "12" merge across words
    EXPECT_EQ(t.encode("hello", false, false), (std::vector<int32_t>{259}));
    // "e" + combining acute is composed to "é" first, then merged.
    EXPECT_EQ(t.encode("e\xCC\x81", false, false), (std::vector<int32_t>{267}));
    EXPECT_EQ(t.decode(t.encode("e\xCC\x81", false, false)), "\xC3\xA9");
    TokenizerVocab v2 = small_bpe_vocab();
    v2.pre = "llama-bpe";
    EXPECT_EQ(Tokenizer(std::move(v2)).encode("12", false, false), (std::vector<int32_t>{264}));
}

TEST(ByteBpeTokenizer, Gpt4oVocabularySplitsWithO200k) {
    for (const char *pre : {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}) {
        TokenizerVocab v = small_bpe_vocab();
        v.pre = pre;
        EXPECT_EQ(Tokenizer(std::move(v)).pre_tokenizer(), PreTokenizer::kO200k) << pre;
    }
    TokenizerVocab v = small_bpe_vocab();
    v.pre = "gpt-4o";
    Tokenizer t(std::move(v));
    // "12345" is the words "123" "45": the "1 2" merge applies in the first only.
    EXPECT_EQ(t.encode("12345", false, false), (std::vector<int32_t>{264, '3', '4', '5'}));
    EXPECT_EQ(t.encode("helloWorld", false, false),
              (std::vector<int32_t>{259, 'W', 261, 263}));  // "hello" "World"
    EXPECT_EQ(t.decode(t.encode("DON'T\r\n/ x", false, false)), "DON'T\r\n/ x");
}

// A vocabulary with gpt-oss's harmony tokens (o200k_harmony), control-typed as in its file.
TokenizerVocab harmony_vocab(bool with_call) {
    TokenizerVocab v = small_bpe_vocab();  // 265 <|end|>, 266 <s>
    v.pre = "gpt-4o";
    for (const char *s : {"<|return|>", "<|start|>", "<|message|>", "<|channel|>", "<|endoftext|>",
                          "<|call|>"}) {  // 267..272
        if (!with_call && std::string(s) == "<|call|>") continue;
        v.tokens.push_back(s);
        v.token_types.push_back(kTokenControl);
    }
    v.bos = -1;
    v.eos = 267;  // <|return|>, as gpt-oss's file names it
    return v;
}

TEST(ByteBpeTokenizer, HarmonyEndsGenerationAtReturnAndCallNotAtEnd) {
    Tokenizer t(harmony_vocab(true));
    EXPECT_TRUE(t.is_end_of_generation(267));   // <|return|>
    EXPECT_TRUE(t.is_end_of_generation(272));   // <|call|>
    EXPECT_TRUE(t.is_end_of_generation(271));   // <|endoftext|>
    EXPECT_FALSE(t.is_end_of_generation(265));  // <|end|> closes the analysis message too
    for (int32_t id : {268, 269, 270}) {        // <|start|>, <|message|>, <|channel|>
        EXPECT_FALSE(t.is_end_of_generation(id)) << id;
        EXPECT_TRUE(t.is_special(id)) << id;
    }
    // Even named as eot, <|end|> does not end a harmony generation.
    TokenizerVocab named = harmony_vocab(true);
    named.eot = 265;
    EXPECT_FALSE(Tokenizer(std::move(named)).is_end_of_generation(265));
    // Markup parses as single tokens.
    EXPECT_EQ(
        t.encode("<|start|>assistant<|channel|>final<|message|>hi<|return|>", false, true).front(),
        268);
    // Without <|call|> it is not harmony: <|end|> ends generation as before.
    Tokenizer partial(harmony_vocab(false));
    EXPECT_TRUE(partial.is_end_of_generation(265));
    EXPECT_TRUE(partial.is_end_of_generation(267));
}

// ---- a hand-built SentencePiece vocabulary ----------------------------------------------

TokenizerVocab small_spm_vocab() {
    TokenizerVocab v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.token_types = {kTokenUnknown, kTokenControl, kTokenControl};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        v.tokens.push_back(name);  // id 3 + b
        v.token_types.push_back(kTokenByte);
    }
    v.scores.assign(v.tokens.size(), 0.0f);
    const std::pair<const char *, float> pieces[] = {
        {"\xE2\x96\x81", -20},
        {"h", -20},
        {"e", -20},
        {"l", -20},
        {"o", -20},
        {"w", -20},
        {"r", -20},
        {"d", -20},
        {"\xE2\x96\x81h", -1},
        {"he", -2},
        {"ll", -3},
        {"\xE2\x96\x81he", -4},
        {"llo", -5},
        {"\xE2\x96\x81hello", -6},
        {"\xE2\x96\x81w", -7},
        {"or", -8},
        {"\xE2\x96\x81wor", -9},
        {"ld", -10},
        {"\xE2\x96\x81world", -11},
    };
    for (const auto &p : pieces) {
        v.tokens.push_back(p.first);
        v.scores.push_back(p.second);
        v.token_types.push_back(kTokenNormal);
    }
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    v.add_bos = true;
    v.add_space_prefix = true;
    return v;
}

int32_t t_id(const TokenizerVocab &v, const std::string &s) {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        if (v.tokens[i] == s) return int32_t(i);
    }
    return -1;
}

TEST(SpmTokenizer, MergesByScoreWithByteFallback) {
    Tokenizer t(small_spm_vocab());
    const int32_t kHello = t.find_token("\xE2\x96\x81hello");
    const int32_t kWorld = t.find_token("\xE2\x96\x81world");
    const int32_t kSpH = t.find_token("\xE2\x96\x81h");
    const int32_t kLl = t.find_token("ll");
    ASSERT_GE(kHello, 0);
    EXPECT_TRUE(t.add_bos_default());
    EXPECT_EQ(t.encode("hello world", true, false), (std::vector<int32_t>{1, kHello, kWorld}));
    // "é" is not in the vocabulary: its two bytes as <0xC3> <0xA9>.
    EXPECT_EQ(t.encode("h\xC3\xA9", false, false),
              (std::vector<int32_t>{kSpH, 3 + 0xC3, 3 + 0xA9}));
    // Equal scores: leftmost pair first.
    EXPECT_EQ(t.encode("lll", false, false)[1], kLl);
    EXPECT_EQ(t.encode("<s>h", false, true), (std::vector<int32_t>{1, kSpH}));
    EXPECT_EQ(t.encode("<s>h", false, false)[0], t.find_token("\xE2\x96\x81"));
    EXPECT_EQ(t.token_bytes(kHello), " hello");
    EXPECT_EQ(t.token_bytes(3 + 0x41), "A");
    EXPECT_EQ(t.token_bytes(1), "<s>");
    // decode drops the space the encoder put in front.
    EXPECT_EQ(t.decode(t.encode("hello world h\xC3\xA9!", false, false)), "hello world h\xC3\xA9!");
    EXPECT_EQ(t.decode(t.encode("hello", true, false)), "<s>hello");
    EXPECT_TRUE(t.is_end_of_generation(2));
    EXPECT_TRUE(t.is_special(0));
}

TEST(SpmTokenizer, UserDefinedTokensAlwaysSplitOut) {
    TokenizerVocab v = small_spm_vocab();
    v.add_space_prefix = false;
    for (const char *s : {"\n", "\n\n", "<b>", "  ", "   "}) {
        v.tokens.push_back(s);
        v.scores.push_back(-1000.0f);
        v.token_types.push_back(kTokenUserDefined);
    }
    const int32_t nl = t_id(v, "\n"), nl2 = t_id(v, "\n\n"), bold = t_id(v, "<b>"),
                  sp2 = t_id(v, "  "), sp3 = t_id(v, "   ");
    Tokenizer t(std::move(v));
    const int32_t kHello = t.find_token("\xE2\x96\x81hello"), kH = t.find_token("h");
    // Whether or not control tokens are parsed, user-defined ones are whole tokens.
    for (bool parse : {false, true}) {
        EXPECT_EQ(t.encode("h\n\n\nh", false, parse), (std::vector<int32_t>{kH, nl2, nl, kH}))
            << parse;
        EXPECT_EQ(t.encode("<b>h", false, parse), (std::vector<int32_t>{bold, kH})) << parse;
    }
    EXPECT_EQ(t.encode("<s>h", false, false)[0], 3 + '<');  // a control token only when asked
    // Space-run tokens are spelled with U+2581 and merged before anything else, so the run
    // takes the space "hello" would otherwise have carried.
    EXPECT_EQ(t.find_token("\xE2\x96\x81\xE2\x96\x81"), sp2);
    EXPECT_EQ(t.encode("h   hello", false, false),
              (std::vector<int32_t>{kH, sp3, t.find_token("he"), t.find_token("llo")}));
    EXPECT_EQ(t.encode(" hello", false, false), (std::vector<int32_t>{kHello}));
    EXPECT_EQ(t.decode(t.encode("h   hello  \n\n<b>", false, false)), "h   hello  \n\n<b>");
}

TEST(SpmTokenizer, RandomTextRoundTrip) {
    Tokenizer t(small_spm_vocab());
    std::mt19937 rng(5);
    const std::string pieces[] = {"h",  "e",     "l",        "o",    " ",
                                  "  ", "world", "\xC3\xA9", "\xFF", "\xE4\xB8\xAD",
                                  "\n", "<s>",   "x"};
    for (int round = 0; round < 300; ++round) {
        std::string text;
        for (size_t i = 0, n = rng() % 12; i < n; ++i) text += pieces[rng() % std::size(pieces)];
        std::vector<int32_t> ids = t.encode(text, false, false);
        for (int32_t id : ids) EXPECT_NE(id, t.unk());  // every byte has a <0xNN> token
        EXPECT_EQ(t.decode(ids), text);
    }
}

// ---- malformed vocabularies -------------------------------------------------------------

TEST(TokenizerValidation, RejectsMalformedVocabularies) {
    auto status = [](TokenizerVocab v) { return status_of([&] { Tokenizer t(std::move(v)); }); };
    {
        TokenizerVocab v = small_bpe_vocab();
        v.merges.push_back("h zzz");  // names an unknown token
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_bpe_vocab();
        v.merges.push_back("w x");  // "wx" is not in the vocabulary
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_bpe_vocab();
        v.merges.push_back("hello");  // not two tokens
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_bpe_vocab();
        v.bos = int32_t(v.tokens.size());
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_bpe_vocab();
        v.eos = -7;
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_bpe_vocab();
        v.tokens.clear();
        v.token_types.clear();
        v.merges.clear();
        v.bos = v.eos = -1;
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_bpe_vocab();
        v.token_types.pop_back();
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_bpe_vocab();
        v.token_types[3] = 9;
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_spm_vocab();
        v.scores.pop_back();
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_MODEL_FORMAT);
    }
    {
        TokenizerVocab v = small_bpe_vocab();
        v.model = "bert";
        EXPECT_EQ(status(std::move(v)), LLMKV_ERR_UNSUPPORTED);
    }
    EXPECT_EQ(status(small_bpe_vocab()), 0);
    EXPECT_EQ(status(small_spm_vocab()), 0);
}

// ---- Utf8Stream --------------------------------------------------------------------------

TEST(Utf8Stream, HoldsBackPartialCharacters) {
    Utf8Stream s;
    s.push("a\xE2\x82");
    EXPECT_EQ(s.pending_complete(), 1u);
    EXPECT_EQ(s.pending(), 3u);
    EXPECT_EQ(s.take_complete(), "a");
    EXPECT_EQ(s.take_complete(), "");
    s.push("\xAC");
    EXPECT_EQ(s.take_complete(), "\xE2\x82\xAC");  // €
    // A 4-byte emoji one byte at a time.
    const std::string emoji = "\xF0\x9F\x98\x80";
    for (size_t i = 0; i < 3; ++i) {
        s.push(emoji.substr(i, 1));
        EXPECT_EQ(s.pending_complete(), 0u);
    }
    s.push(emoji.substr(3));
    EXPECT_EQ(s.take_complete(), emoji);
    EXPECT_EQ(s.pending(), 0u);
}

TEST(Utf8Stream, InvalidBytesDoNotStall) {
    Utf8Stream s;
    s.push("\xFF");
    EXPECT_EQ(s.take_complete(), "\xFF");
    s.push("\xE2(");  // a lead byte followed by a non-continuation byte
    EXPECT_EQ(s.take_complete(), "\xE2(");
    s.push("\xC3");
    EXPECT_EQ(s.pending_complete(), 0u);
    s.push("x");
    EXPECT_EQ(s.take_complete(), "\xC3x");
    s.push("\xED\xA0\x80");  // an encoded surrogate: three invalid bytes
    EXPECT_EQ(s.pending_complete(), 3u);
    s.push("\xC0\x80\x80");  // overlong NUL and a stray continuation byte
    EXPECT_EQ(s.take_complete(), "\xED\xA0\x80\xC0\x80\x80");
    s.push("ok\xF0\x9F");
    EXPECT_EQ(s.take_complete(), "ok");
    EXPECT_EQ(s.take_all(), "\xF0\x9F");  // end of stream: the rest as is
    EXPECT_EQ(s.pending(), 0u);
}

TEST(Utf8Stream, MaxBytesNeverSplitsACharacter) {
    Utf8Stream s;
    s.push(
        "a\xE2\x82\xAC"
        "b");
    EXPECT_EQ(s.take_complete(2), "a");
    EXPECT_EQ(s.take_complete(2), "");
    EXPECT_EQ(s.take_complete(3), "\xE2\x82\xAC");
    EXPECT_EQ(s.take_complete(0), "");
    EXPECT_EQ(s.take_complete(10), "b");
}

TEST(Utf8Stream, RandomChunksReassembleExactly) {
    std::mt19937 rng(1234);
    const std::string pieces[] = {"a",    " ",    "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                  "\xFF", "\x80", "\xE2",     "\xF0\x9F",     "\xED\xA0\x80",
                                  "\n"};
    for (int round = 0; round < 200; ++round) {
        std::string input;
        for (int k = 0; k < 40; ++k) input += pieces[rng() % std::size(pieces)];
        // Unit boundaries of the whole input: every piece handed out must end on one.
        std::vector<bool> boundary(input.size() + 1, false);
        const auto *p = reinterpret_cast<const unsigned char *>(input.data());
        for (size_t i = 0; i < input.size();) {
            boundary[i] = true;
            size_t len = Utf8Stream::unit_length(p + i, input.size() - i);
            i += len ? len : input.size() - i;  // an unfinished character at the very end
        }
        boundary[input.size()] = true;
        Utf8Stream s;
        std::string output;
        size_t pos = 0;
        while (pos < input.size()) {
            size_t n = std::min<size_t>(input.size() - pos, rng() % 5);
            s.push(std::string_view(input).substr(pos, n));
            pos += n;
            size_t limit = 1 + rng() % 8;
            std::string got = s.take_complete(limit);
            ASSERT_LE(got.size(), limit);
            output += got;
            ASSERT_TRUE(boundary[output.size()]) << "partial character handed out";
        }
        output += s.take_complete();
        ASSERT_EQ(s.pending_complete(), 0u);
        ASSERT_LE(s.pending(), 3u);
        output += s.take_all();
        ASSERT_EQ(output, input);
    }
}

}  // namespace
}  // namespace llmkv
