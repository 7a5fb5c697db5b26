// Generation constraints: stop strings (matched across token boundaries, never delivered),
// logit bias and bans, the minimum length, the versioned structs that carry them; on the
// tiny model through the C API.
#include "engine/constraints.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "llmkv.h"
#include "session_helpers.h"
#include "tiny_model.h"

namespace llmkv {
namespace {

using testing::byte_tokens;
using testing::TinyVocab;
using testing::tokens_of;

// What one feed (or flush) releases.
std::string fed(StopStrings &s, std::string_view bytes) {
    Utf8Stream out;
    s.feed(bytes, out);
    return out.take_all();
}
std::string flushed(StopStrings &s) {
    Utf8Stream out;
    s.flush(out);
    return out.take_all();
}

TEST(StopStringsTest, MatchesAcrossPiecesAndReleasesOnlyWhatCannotStartAMatch) {
    StopStrings s({"\nPlayer:", "END"});
    EXPECT_EQ(fed(s, "Hello"), "Hello");
    EXPECT_EQ(fed(s, " there\nPl"), " there");  // "\nPl" could begin "\nPlayer:"
    EXPECT_EQ(s.held(), 3u);
    EXPECT_EQ(fed(s, "ay"), "");
    EXPECT_EQ(fed(s, "er: hi"), "");
    EXPECT_EQ(s.matched(), 0);
    EXPECT_EQ(s.held(), 0u);
    EXPECT_EQ(flushed(s), "");  // after a match nothing more is released
}

TEST(StopStringsTest, AFalseStartIsReleasedWhenItStopsMatching) {
    StopStrings s({"END"});
    EXPECT_EQ(fed(s, "EN"), "");
    EXPECT_EQ(fed(s, "D?"), "");
    EXPECT_EQ(s.matched(), 0);
    StopStrings t({"END"});
    EXPECT_EQ(fed(t, "EN"), "");
    EXPECT_EQ(fed(t, "X"), "ENX");
    EXPECT_EQ(fed(t, "E"), "");
    EXPECT_EQ(flushed(t), "E");  // generation ended otherwise: everything held goes out
    EXPECT_EQ(t.matched(), -1);
}

TEST(StopStringsTest, TheEarliestMatchWinsAndOverlappingPrefixesAreHeld) {
    StopStrings s({"bcd", "ab"});
    EXPECT_EQ(fed(s, "xa"), "x");
    EXPECT_EQ(fed(s, "bcd"), "");  // "ab" starts before "bcd"
    EXPECT_EQ(s.matched(), 1);
    StopStrings t({"aab"});
    EXPECT_EQ(fed(t, "aaaa"), "aa");  // the longest tail that can begin "aab" is "aa"
    EXPECT_EQ(fed(t, "b"), "");
    EXPECT_EQ(t.matched(), 0);
}

class ConstraintsTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        testing::TinyModelSpec spec;
        spec.n_ctx = 256;
        path_ = new std::string(testing::temp_path("constraints_tiny.gguf"));
        testing::write_tiny_model(spec, *path_);
    }
    static void TearDownTestSuite() {
        std::remove(path_->c_str());
        delete path_;
    }
    void SetUp() override {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path_->c_str();
        p.backend = LLMKV_BACKEND_CPU;
        p.n_threads = 2;
        p.kv_block_tokens = 4;
        ASSERT_EQ(llmkv_engine_create(&p, &e_), LLMKV_OK) << llmkv_last_error();
    }
    void TearDown() override { llmkv_engine_destroy(e_); }

    static llmkv_session_params params(float temperature, uint64_t seed) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = temperature;
        sp.sampling.seed = seed;
        return sp;
    }

    // Generates up to n tokens after a fixed prompt; returns the text read, step by step, and
    // checks every read is a prefix of the final text.
    struct Result {
        std::vector<int32_t> tokens;
        std::string text;
        uint32_t finish = 0;
        llmkv_session_info info{};
    };
    Result generate(const llmkv_session_params &sp, uint32_t n, uint32_t prompt_seed = 3) {
        Result r;
        llmkv_session *s = nullptr;
        EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_OK) << llmkv_last_error();
        if (!s) return r;
        std::vector<int32_t> prompt = byte_tokens(9, prompt_seed);
        EXPECT_EQ(llmkv_session_append(s, prompt.data(), prompt.size()), LLMKV_OK);
        EXPECT_EQ(llmkv_session_generate(s, n), LLMKV_OK);
        for (int guard = 0; guard < 1000; ++guard) {
            llmkv_event ev[8];
            size_t k = 0;
            EXPECT_EQ(llmkv_step(e_, ev, 8, &k), LLMKV_OK);
            char buf[64];
            size_t got = 0;
            while (llmkv_session_read_text(s, buf, sizeof(buf), &got) == LLMKV_OK && got > 0)
                r.text.append(buf, got);
            bool done = false;
            for (size_t i = 0; i < k; ++i) {
                if (ev[i].kind == LLMKV_EVENT_DONE) {
                    r.finish = ev[i].finish_reason;
                    done = true;
                }
            }
            if (done) break;
        }
        r.tokens = tokens_of(s);
        r.tokens.erase(r.tokens.begin(), r.tokens.begin() + long(prompt.size()));
        r.info.struct_size = sizeof(r.info);
        EXPECT_EQ(llmkv_session_get_info(s, &r.info), LLMKV_OK);
        EXPECT_EQ(llmkv_engine_validate(e_), LLMKV_OK) << llmkv_last_error();
        llmkv_session_destroy(s);
        return r;
    }

    static std::string *path_;
    llmkv_engine *e_ = nullptr;
};
std::string *ConstraintsTest::path_ = nullptr;

TEST_F(ConstraintsTest, AStopStringAcrossTokensEndsGenerationAndIsNeverDelivered) {
    llmkv_session_params sp = params(1.0f, 77);
    Result free_run = generate(sp, 40);
    ASSERT_GE(free_run.text.size(), 20u);
    // A stop string made of the bytes of tokens 6..8 (each byte token is one byte; merges
    // give longer pieces), starting inside the stream.
    std::string all;
    std::vector<size_t> ends;
    for (int32_t t : free_run.tokens) {
        char buf[32];
        size_t n = 0;
        ASSERT_EQ(llmkv_detokenize(e_, &t, 1, buf, sizeof(buf), &n), LLMKV_OK);
        all.append(buf, n);
        ends.push_back(all.size());
    }
    const size_t start = ends[5] - 1,
                 stop_end = ends[8];  // from the last byte of token 5 into token 8
    std::string stop = all.substr(start, stop_end - start);
    const char *stops[] = {"\x01never", stop.c_str()};
    size_t lens[] = {6, stop.size()};
    sp.stop_strings = stops;
    sp.stop_string_lengths = lens;
    sp.n_stop_strings = 2;
    Result r = generate(sp, 40);
    EXPECT_EQ(r.finish, LLMKV_FINISH_STOP);
    EXPECT_EQ(r.info.stop_string, 1);
    EXPECT_EQ(r.info.finish_reason, LLMKV_FINISH_STOP);
    // The first match in the stream decides where the text ends.
    size_t first = all.find(stop);
    ASSERT_LE(first, start);
    EXPECT_EQ(r.text, all.substr(0, first));
    // The tokens up to the one completing the match stay in the context, as computed.
    size_t last = 0;
    while (ends[last] < first + stop.size()) ++last;
    EXPECT_EQ(r.tokens, std::vector<int32_t>(free_run.tokens.begin(),
                                             free_run.tokens.begin() + long(last) + 1));
}

TEST_F(ConstraintsTest, HeldBytesAreDeliveredWhenGenerationEndsWithoutAMatch) {
    llmkv_session_params sp = params(1.0f, 78);
    Result free_run = generate(sp, 12);
    ASSERT_GE(free_run.text.size(), 2u);
    // A stop string that starts with the last byte generated but never completes.
    std::string stop = free_run.text.substr(free_run.text.size() - 1) + "\x01\x02";
    const char *stops[] = {stop.c_str()};
    size_t lens[] = {stop.size()};
    sp.stop_strings = stops;
    sp.stop_string_lengths = lens;
    sp.n_stop_strings = 1;
    Result r = generate(sp, 12);
    EXPECT_EQ(r.finish, LLMKV_FINISH_LENGTH);
    EXPECT_EQ(r.info.stop_string, -1);
    EXPECT_EQ(r.text, free_run.text);
    EXPECT_EQ(r.tokens, free_run.tokens);
}

TEST_F(ConstraintsTest, LogitBiasBansAndForcesTokens) {
    llmkv_session_params sp = params(1.0f, 5);
    std::vector<llmkv_logit_bias> bias;
    for (int32_t t = 'a'; t <= 'z'; ++t)
        bias.push_back({t, -INFINITY});  // byte tokens of the tiny vocabulary
    for (int32_t t = TinyVocab::kFirstMerge; t < TinyVocab::kFirstMerge + TinyVocab::kNumMerges;
         ++t) {
        bias.push_back({t, -INFINITY});
    }
    sp.logit_bias = bias.data();
    sp.n_logit_bias = uint32_t(bias.size());
    Result r = generate(sp, 60);
    ASSERT_FALSE(r.tokens.empty());
    for (int32_t t : r.tokens) EXPECT_FALSE((t >= 'a' && t <= 'z') || (t >= 256 && t < 260)) << t;

    llmkv_session_params g = params(0.0f, 0);
    llmkv_logit_bias force[] = {{'Q', 1000.0f}, {'Q', -500.0f}};  // entries add up: +500
    g.logit_bias = force;
    g.n_logit_bias = 2;
    Result q = generate(g, 8);
    EXPECT_EQ(q.tokens, std::vector<int32_t>(8, 'Q'));
    EXPECT_EQ(q.text, "QQQQQQQQ");
}

TEST_F(ConstraintsTest, MinNewTokensHoldsOffEndOfGeneration) {
    llmkv_session_params sp = params(0.0f, 0);
    llmkv_logit_bias eos[] = {{TinyVocab::kEndOfText, 1000.0f}};
    sp.logit_bias = eos;
    sp.n_logit_bias = 1;
    Result at_once = generate(sp, 20);
    EXPECT_EQ(at_once.finish, LLMKV_FINISH_STOP);
    EXPECT_EQ(at_once.info.n_generated, 0u);
    sp.min_new_tokens = 5;
    Result r = generate(sp, 20);
    EXPECT_EQ(r.finish, LLMKV_FINISH_STOP);
    EXPECT_EQ(r.info.n_generated, 5u);
    ASSERT_EQ(r.tokens.size(), 6u);
    EXPECT_EQ(r.tokens.back(), TinyVocab::kEndOfText);
}

TEST_F(ConstraintsTest, BanningEveryTokenEndsWithConstraintAndKeepsTheContext) {
    llmkv_session_params sp = params(0.7f, 1);
    std::vector<llmkv_logit_bias> bias;
    for (int32_t t = 0; t < TinyVocab::kSize; ++t) bias.push_back({t, -INFINITY});
    sp.logit_bias = bias.data();
    sp.n_logit_bias = uint32_t(bias.size());
    Result r = generate(sp, 10);
    EXPECT_EQ(r.finish, LLMKV_FINISH_CONSTRAINT);
    EXPECT_TRUE(r.tokens.empty());
    EXPECT_EQ(r.info.state, LLMKV_SESSION_FINISHED);
}

TEST_F(ConstraintsTest, BadConstraintParamsAreInvalidArguments) {
    llmkv_session *s = nullptr;
    llmkv_session_params sp = params(0.0f, 0);
    const char *empty[] = {""};
    sp.stop_strings = empty;
    sp.n_stop_strings = 1;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(llmkv_last_error()).find("stop_strings[0]"), std::string::npos)
        << llmkv_last_error();
    std::string long_stop(257, 'x');
    const char *longs[] = {long_stop.c_str()};
    sp.stop_strings = longs;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    sp.stop_strings = nullptr;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    sp.n_stop_strings = 0;

    llmkv_logit_bias outside[] = {{TinyVocab::kSize, 1.0f}};
    sp.logit_bias = outside;
    sp.n_logit_bias = 1;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(llmkv_last_error()).find("logit_bias[0].token"), std::string::npos)
        << llmkv_last_error();
    llmkv_logit_bias nan_bias[] = {{1, NAN}};
    sp.logit_bias = nan_bias;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    llmkv_logit_bias plus_inf[] = {{1, INFINITY}};
    sp.logit_bias = plus_inf;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    sp.logit_bias = nullptr;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    sp.n_logit_bias = 0;

    sp.grammar_kind = 7;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    sp.grammar_kind = LLMKV_GRAMMAR_GBNF;
    sp.grammar_len = 4;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    llmkv_stats st;
    st.struct_size = sizeof(st);
    ASSERT_EQ(llmkv_engine_get_stats(e_, &st), LLMKV_OK);
    EXPECT_EQ(st.sessions_total, 0u);
}

TEST_F(ConstraintsTest, StrictTokenizationRefusesWhatItWouldDrop) {
    // The tiny vocabulary has every byte: nothing to drop, strict or not.
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(e_, &info), LLMKV_OK);
    EXPECT_EQ(info.n_unrepresentable_bytes, 0u);
    int32_t ids[8];
    size_t n = 0;
    EXPECT_EQ(llmkv_tokenize(e_, "\x04\xff", 2, LLMKV_TOKENIZE_STRICT, ids, 8, &n), LLMKV_OK);
    EXPECT_EQ(n, 2u);
    EXPECT_EQ(llmkv_tokenize(e_, "x", 1, 0x8u, ids, 8, &n), LLMKV_ERR_INVALID_ARGUMENT);
    // A 0.1 host's engine_info ends at eot_token.
    info.struct_size = uint32_t(offsetof(llmkv_engine_info, n_unrepresentable_bytes));
    EXPECT_EQ(llmkv_engine_get_info(e_, &info), LLMKV_OK);
}

TEST_F(ConstraintsTest, StructsOfVersion01AreStillAccepted) {
    // A 0.1 host: session_params ended at user_data, stats at promotions, session_info at priority.
    llmkv_session_params sp = params(0.0f, 0);
    sp.struct_size = uint32_t(offsetof(llmkv_session_params, stop_strings));
    sp.min_new_tokens = 99;  // beyond the caller's struct: must be ignored
    llmkv_session *s = nullptr;
    ASSERT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_OK) << llmkv_last_error();
    std::vector<int32_t> prompt = byte_tokens(5, 1);
    ASSERT_EQ(llmkv_session_append(s, prompt.data(), prompt.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(s, 3), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);

    struct {
        llmkv_session_info info;
        unsigned char canary[32];
    } old_info;
    std::memset(&old_info, 0xAB, sizeof(old_info));
    old_info.info.struct_size = uint32_t(offsetof(llmkv_session_info, stop_string));
    ASSERT_EQ(llmkv_session_get_info(s, &old_info.info), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(old_info.info.n_generated, 3u);
    EXPECT_EQ(old_info.info.stop_string, int32_t(0xABABABAB)) << "wrote past the 0.1 struct";

    llmkv_stats st;
    std::memset(&st, 0xAB, sizeof(st));
    st.struct_size = uint32_t(offsetof(llmkv_stats, sample_ns));
    ASSERT_EQ(llmkv_engine_get_stats(e_, &st), LLMKV_OK);
    EXPECT_EQ(st.tokens_generated, 3u);
    EXPECT_EQ(st.sample_ns, 0xABABABABABABABABull);
    st.struct_size = uint32_t(offsetof(llmkv_stats, sample_ns)) + 4;
    EXPECT_EQ(llmkv_engine_get_stats(e_, &st), LLMKV_ERR_INVALID_ARGUMENT);
    sp.struct_size = uint32_t(offsetof(llmkv_session_params, stop_strings)) + 8;
    llmkv_session *t = nullptr;
    EXPECT_EQ(llmkv_session_create(e_, &sp, &t), LLMKV_ERR_INVALID_ARGUMENT);
    llmkv_session_destroy(s);
}

TEST_F(ConstraintsTest, AForkContinuesIdenticallyUnderStopStrings) {
    llmkv_session_params sp = params(0.9f, 21);
    Result free_run = generate(sp, 30);
    ASSERT_GE(free_run.text.size(), 10u);
    std::string stop = free_run.text.substr(free_run.text.size() - 3);
    const char *stops[] = {stop.c_str()};
    size_t lens[] = {stop.size()};
    sp.stop_strings = stops;
    sp.stop_string_lengths = lens;
    sp.n_stop_strings = 1;
    llmkv_session *a = nullptr, *b = nullptr;
    ASSERT_EQ(llmkv_session_create(e_, &sp, &a), LLMKV_OK);
    std::vector<int32_t> prompt = byte_tokens(9, 3);
    ASSERT_EQ(llmkv_session_append(a, prompt.data(), prompt.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(a, 15), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    char buf[256];
    size_t n = 0;
    while (llmkv_session_read_text(a, buf, sizeof(buf), &n) == LLMKV_OK && n) {
    }
    ASSERT_EQ(llmkv_session_fork(a, &b), LLMKV_OK);
    for (llmkv_session *s : {a, b}) ASSERT_EQ(llmkv_session_generate(s, 15), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    EXPECT_EQ(tokens_of(a), tokens_of(b));
    llmkv_session_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_session_get_info(b, &info), LLMKV_OK);
    EXPECT_EQ(info.finish_reason, LLMKV_FINISH_STOP);  // the free run's last bytes end it again
    EXPECT_EQ(info.stop_string, 0);
    std::string ta, tb;
    while (llmkv_session_read_text(a, buf, sizeof(buf), &n) == LLMKV_OK && n) ta.append(buf, n);
    while (llmkv_session_read_text(b, buf, sizeof(buf), &n) == LLMKV_OK && n) tb.append(buf, n);
    // Both deliver the same text from the fork on.
    EXPECT_FALSE(ta.empty());
    EXPECT_EQ(ta, tb);
    EXPECT_EQ(ta.find(stop), std::string::npos);
    llmkv_session_destroy(a);
    llmkv_session_destroy(b);
}

// ---- grammars in the engine ----------------------------------------------------------------

namespace grammar_cases {

const char *kNpcSchema = R"({
  "type": "object",
  "properties": {
    "say": {"type": "string", "maxLength": 24},
    "action": {"enum": ["wave", "attack", "flee", "trade"]},
    "mood": {"type": "integer"},
    "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}
  },
  "required": ["say", "action", "mood"]
})";

// The schema above, checked independently of the grammar engine.
bool valid_npc(const std::string &text, std::string &why) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const std::exception &e) {
        why = e.what();
        return false;
    }
    if (!j.is_object()) return why = "not an object", false;
    for (const char *k : {"say", "action", "mood"}) {
        if (!j.contains(k)) return why = std::string("missing ") + k, false;
    }
    for (const auto &[k, v] : j.items()) {
        if (k == "say") {
            if (!v.is_string()) return why = "say", false;
            // maxLength counts code points.
            size_t cps = 0;
            for (unsigned char c : v.get<std::string>()) cps += (c & 0xC0) != 0x80;
            if (cps > 24) return why = "say too long", false;
        } else if (k == "action") {
            static const std::vector<std::string> ok = {"wave", "attack", "flee", "trade"};
            if (!v.is_string() ||
                std::find(ok.begin(), ok.end(), v.get<std::string>()) == ok.end()) {
                return why = "action", false;
            }
        } else if (k == "mood") {
            if (!v.is_number_integer()) return why = "mood", false;
        } else if (k == "items") {
            if (!v.is_array() || v.size() > 3) return why = "items", false;
            for (const auto &x : v) {
                if (!x.is_boolean()) return why = "items[]", false;
            }
        } else {
            return why = "extra key " + k, false;
        }
    }
    return true;
}

// root ::= ("yes" | "no") ", " [0-9]{1,3} " item" "s"? "."
const char *kAnswerGbnf = "root ::= (\"yes\" | \"no\") \", \" [0-9]{1,3} \" item\" \"s\"? \".\"\n";
const std::regex kAnswerRegex("(yes|no), [0-9]{1,3} items?\\.");

}  // namespace grammar_cases

TEST_F(ConstraintsTest, EveryOutputUnderAJsonSchemaParsesAndValidates) {
    int complete = 0;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
        for (float temperature : {0.0f, 0.7f, 1.5f}) {
            llmkv_session_params sp = params(temperature, seed);
            sp.grammar_kind = LLMKV_GRAMMAR_JSON_SCHEMA;
            sp.grammar = grammar_cases::kNpcSchema;
            sp.grammar_len = std::strlen(grammar_cases::kNpcSchema);
            Result r = generate(sp, 200, uint32_t(seed));
            ASSERT_NE(r.finish, LLMKV_FINISH_CONSTRAINT) << "seed " << seed;
            if (r.finish != LLMKV_FINISH_STOP) continue;  // random weights may ramble to the limit
            ++complete;
            std::string why;
            EXPECT_TRUE(grammar_cases::valid_npc(r.text, why)) << why << ": " << r.text;
            EXPECT_EQ(r.info.has_grammar, 1u);
        }
    }
    EXPECT_GE(complete, 18) << "most constrained runs should complete their JSON";
}

TEST_F(ConstraintsTest, EveryOutputUnderAGbnfGrammarMatchesItsLanguage) {
    for (uint64_t seed = 1; seed <= 16; ++seed) {
        llmkv_session_params sp = params(seed % 4 == 0 ? 0.0f : 1.2f, seed);
        sp.grammar_kind = LLMKV_GRAMMAR_GBNF;
        sp.grammar = grammar_cases::kAnswerGbnf;
        sp.grammar_len = std::strlen(grammar_cases::kAnswerGbnf);
        Result r = generate(sp, 64, uint32_t(seed));
        ASSERT_EQ(r.finish, LLMKV_FINISH_STOP) << "seed " << seed << ": " << r.text;
        EXPECT_TRUE(std::regex_match(r.text, grammar_cases::kAnswerRegex)) << r.text;
        // The sentence is complete when generation ends: the grammar restarted for the next one.
        EXPECT_TRUE(r.tokens.back() == TinyVocab::kEndOfText ||
                    r.tokens.back() == TinyVocab::kImEnd)
            << r.tokens.back();
    }
}

TEST_F(ConstraintsTest, GrammarSessionsInOneBatchEqualTheirSoloRunsBitwise) {
    // Each its own grammar (two kinds, two seeds), batched, against one at a time.
    auto make = [](int i) {
        llmkv_session_params sp = params(0.9f, 100 + uint64_t(i));
        const char *g = i % 2 ? grammar_cases::kNpcSchema : grammar_cases::kAnswerGbnf;
        sp.grammar_kind = i % 2 ? LLMKV_GRAMMAR_JSON_SCHEMA : LLMKV_GRAMMAR_GBNF;
        sp.grammar = g;
        sp.grammar_len = std::strlen(g);
        return sp;
    };
    const int kSessions = 6;
    std::vector<Result> solo;
    for (int i = 0; i < kSessions; ++i) solo.push_back(generate(make(i), 60, uint32_t(i)));
    std::vector<llmkv_session *> s(kSessions);
    for (int i = 0; i < kSessions; ++i) {
        llmkv_session_params sp = make(i);
        ASSERT_EQ(llmkv_session_create(e_, &sp, &s[i]), LLMKV_OK);
        std::vector<int32_t> prompt = byte_tokens(9, uint32_t(i));
        ASSERT_EQ(llmkv_session_append(s[i], prompt.data(), prompt.size()), LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(s[i], 60), LLMKV_OK);
    }
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    for (int i = 0; i < kSessions; ++i) {
        std::vector<int32_t> t = tokens_of(s[i]);
        t.erase(t.begin(), t.begin() + 9);
        EXPECT_EQ(t, solo[i].tokens) << "session " << i;
        llmkv_session_destroy(s[i]);
    }
    llmkv_stats st;
    st.struct_size = sizeof(st);
    ASSERT_EQ(llmkv_engine_get_stats(e_, &st), LLMKV_OK);
    EXPECT_GT(st.grammar_masks, 0u);
    EXPECT_GT(st.grammar_mask_cache_hits, 0u);  // the batch revisits the solo runs' states
    EXPECT_GE(st.sample_ns, st.grammar_mask_ns);
}

TEST_F(ConstraintsTest, AForkMidSentenceContinuesTheSameSentence) {
    llmkv_session_params sp = params(1.0f, 8);
    sp.grammar_kind = LLMKV_GRAMMAR_JSON_SCHEMA;
    sp.grammar = grammar_cases::kNpcSchema;
    sp.grammar_len = std::strlen(grammar_cases::kNpcSchema);
    Result whole = generate(sp, 200, 4);
    ASSERT_EQ(whole.finish, LLMKV_FINISH_STOP);
    ASSERT_GT(whole.tokens.size(), 6u);

    llmkv_session *a = nullptr, *b = nullptr;
    ASSERT_EQ(llmkv_session_create(e_, &sp, &a), LLMKV_OK);
    std::vector<int32_t> prompt = byte_tokens(9, 4);
    ASSERT_EQ(llmkv_session_append(a, prompt.data(), prompt.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(a, 5), LLMKV_OK);  // stops mid-object: LENGTH
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    llmkv_session_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_session_get_info(a, &info), LLMKV_OK);
    ASSERT_EQ(info.finish_reason, LLMKV_FINISH_LENGTH);
    EXPECT_EQ(info.grammar_complete, 0u);
    ASSERT_EQ(llmkv_session_fork(a, &b), LLMKV_OK);
    for (llmkv_session *s : {a, b}) ASSERT_EQ(llmkv_session_generate(s, 200), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    std::vector<int32_t> ta = tokens_of(a), tb = tokens_of(b);
    EXPECT_EQ(ta, tb);
    ta.erase(ta.begin(), ta.begin() + 9);
    EXPECT_EQ(ta, whole.tokens) << "continuing after LENGTH must not restart the sentence";
    std::string text;
    char buf[512];
    size_t n = 0;
    while (llmkv_session_read_text(a, buf, sizeof(buf), &n) == LLMKV_OK && n) text.append(buf, n);
    std::string why;
    EXPECT_TRUE(grammar_cases::valid_npc(text, why)) << why << ": " << text;
    llmkv_session_destroy(a);
    llmkv_session_destroy(b);
}

TEST_F(ConstraintsTest, PreemptionAndRecomputationDoNotChangeConstrainedOutput) {
    // A pool that holds about one session: the others are preempted and recomputed.
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = path_->c_str();
    p.backend = LLMKV_BACKEND_CPU;
    p.n_threads = 2;
    p.kv_block_tokens = 4;
    llmkv_engine_info ei;
    ei.struct_size = sizeof(ei);
    ASSERT_EQ(llmkv_engine_get_info(e_, &ei), LLMKV_OK);
    p.kv_device_bytes = ei.kv_bytes_per_token_device * 4 * 30;  // 30 blocks
    llmkv_engine *small = nullptr;
    ASSERT_EQ(llmkv_engine_create(&p, &small), LLMKV_OK) << llmkv_last_error();
    const int kSessions = 4;
    std::vector<llmkv_session *> s(kSessions);
    std::vector<Result> solo;
    for (int i = 0; i < kSessions; ++i) {
        llmkv_session_params sp = params(0.8f, 40 + uint64_t(i));
        sp.grammar_kind = LLMKV_GRAMMAR_JSON_SCHEMA;
        sp.grammar = grammar_cases::kNpcSchema;
        sp.grammar_len = std::strlen(grammar_cases::kNpcSchema);
        solo.push_back(generate(sp, 70, uint32_t(i)));
        ASSERT_EQ(llmkv_session_create(small, &sp, &s[i]), LLMKV_OK);
        std::vector<int32_t> prompt = byte_tokens(9, uint32_t(i));
        ASSERT_EQ(llmkv_session_append(s[i], prompt.data(), prompt.size()), LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(s[i], 70), LLMKV_OK);
    }
    ASSERT_EQ(llmkv_run(small, nullptr, nullptr), LLMKV_OK);
    llmkv_stats st;
    st.struct_size = sizeof(st);
    ASSERT_EQ(llmkv_engine_get_stats(small, &st), LLMKV_OK);
    EXPECT_GT(st.preemptions, 0u) << "the pool was meant to be too small for all four";
    for (int i = 0; i < kSessions; ++i) {
        std::vector<int32_t> t = tokens_of(s[i]);
        t.erase(t.begin(), t.begin() + 9);
        EXPECT_EQ(t, solo[i].tokens) << "session " << i;
        llmkv_session_destroy(s[i]);
    }
    EXPECT_EQ(llmkv_engine_validate(small), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_destroy(small);
}

TEST_F(ConstraintsTest, ACompleteSentenceEndsGenerationAndAnUnspellableOneIsAConstraintFinish) {
    llmkv_session_params sp = params(1.0f, 2);
    const char *ok = "root ::= \"ok\"";
    sp.grammar_kind = LLMKV_GRAMMAR_GBNF;
    sp.grammar = ok;
    sp.grammar_len = std::strlen(ok);
    Result r = generate(sp, 50);
    EXPECT_EQ(r.text, "ok");
    EXPECT_EQ(r.finish, LLMKV_FINISH_STOP);
    ASSERT_EQ(r.tokens.size(),
              3u);  // 'o', 'k', then an end-of-generation token (the only ones allowed)
    EXPECT_EQ(r.tokens[0], 'o');
    EXPECT_EQ(r.tokens[1], 'k');
    EXPECT_TRUE(r.tokens[2] == TinyVocab::kEndOfText || r.tokens[2] == TinyVocab::kImEnd)
        << r.tokens[2];
    // min_new_tokens cannot hold a complete sentence open.
    sp.min_new_tokens = 10;
    EXPECT_EQ(generate(sp, 50).text, "ok");

    // The grammar needs 'k', the bias bans it: no token can follow "o".
    llmkv_logit_bias ban[] = {{'k', -INFINITY}};
    sp.logit_bias = ban;
    sp.n_logit_bias = 1;
    Result stuck = generate(sp, 50);
    EXPECT_EQ(stuck.finish, LLMKV_FINISH_CONSTRAINT);
    EXPECT_EQ(stuck.text, "o");
    EXPECT_EQ(stuck.tokens, std::vector<int32_t>{'o'});
}

TEST_F(ConstraintsTest, ASessionEndedByItsConstraintsContinuesAndMakesAPrefix) {
    llmkv_session_params sp = params(0.0f, 0);
    const char *ok = "root ::= \"ok\"";
    sp.grammar_kind = LLMKV_GRAMMAR_GBNF;
    sp.grammar = ok;
    sp.grammar_len = std::strlen(ok);
    llmkv_logit_bias ban[] = {{'k', -INFINITY}};
    sp.logit_bias = ban;
    sp.n_logit_bias = 1;
    llmkv_session *s = nullptr;
    ASSERT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_OK);
    std::vector<int32_t> prompt = byte_tokens(13, 5);
    ASSERT_EQ(llmkv_session_append(s, prompt.data(), prompt.size()), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(s, 10), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    llmkv_session_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_session_get_info(s, &info), LLMKV_OK);
    ASSERT_EQ(info.finish_reason, LLMKV_FINISH_CONSTRAINT);
    EXPECT_EQ(info.state, LLMKV_SESSION_FINISHED);
    EXPECT_EQ(info.n_tokens, 14u);
    EXPECT_EQ(llmkv_engine_validate(e_), LLMKV_OK) << llmkv_last_error();
    // A prefix of it saves and loads (an idle context holds the KV of all but its last token).
    llmkv_prefix *p = nullptr, *q = nullptr;
    ASSERT_EQ(llmkv_session_to_prefix(s, &p), LLMKV_OK) << llmkv_last_error();
    const std::string path = testing::temp_path("constraint_end.llmkvsnap");
    ASSERT_EQ(llmkv_prefix_save(p, path.c_str()), LLMKV_OK) << llmkv_last_error();
    ASSERT_EQ(llmkv_prefix_load(e_, path.c_str(), &q), LLMKV_OK) << llmkv_last_error();
    std::remove(path.c_str());
    // Without the grammar it goes on, as a fresh session with the same context would.
    ASSERT_EQ(llmkv_session_set_grammar(s, LLMKV_GRAMMAR_NONE, nullptr, 0, nullptr), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(s, 3), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    ASSERT_EQ(llmkv_session_get_info(s, &info), LLMKV_OK);
    EXPECT_EQ(info.finish_reason, LLMKV_FINISH_LENGTH);
    EXPECT_EQ(info.n_generated, 3u);
    std::vector<int32_t> context = tokens_of(s);
    ASSERT_EQ(context.size(), 17u);
    llmkv_session_params plain = params(0.0f, 0);
    plain.logit_bias = ban;
    plain.n_logit_bias = 1;
    llmkv_session *f = nullptr;
    ASSERT_EQ(llmkv_session_create(e_, &plain, &f), LLMKV_OK);
    ASSERT_EQ(llmkv_session_append(f, context.data(), 14), LLMKV_OK);
    ASSERT_EQ(llmkv_session_generate(f, 3), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    EXPECT_EQ(tokens_of(f), context);
    EXPECT_EQ(llmkv_engine_validate(e_), LLMKV_OK) << llmkv_last_error();
    llmkv_prefix_release(p);
    llmkv_prefix_release(q);
    llmkv_session_destroy(s);
    llmkv_session_destroy(f);
}

TEST_F(ConstraintsTest, BadGrammarsPointAtTheErrorAndSetGrammarFollowsTheRules) {
    llmkv_session_params sp = params(0.0f, 0);
    llmkv_session *s = nullptr;
    const char *bad = "root ::= \"a\" | [b-\n";
    sp.grammar_kind = LLMKV_GRAMMAR_GBNF;
    sp.grammar = bad;
    sp.grammar_len = std::strlen(bad);
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(llmkv_last_error()).find("line 1, column"), std::string::npos)
        << llmkv_last_error();
    const char *undefined = "root ::= item\n";
    sp.grammar = undefined;
    sp.grammar_len = std::strlen(undefined);
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(llmkv_last_error()).find("'item'"), std::string::npos)
        << llmkv_last_error();
    const char *schema = R"({"type":"object","properties":{"a":{"type":"strnig"}}})";
    sp.grammar_kind = LLMKV_GRAMMAR_JSON_SCHEMA;
    sp.grammar = schema;
    sp.grammar_len = std::strlen(schema);
    EXPECT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(llmkv_last_error()).find("/properties/a"), std::string::npos)
        << llmkv_last_error();
    EXPECT_EQ(s, nullptr);

    // A conversation whose turns want different formats.
    sp = params(0.5f, 3);
    ASSERT_EQ(llmkv_session_create(e_, &sp, &s), LLMKV_OK);
    std::vector<int32_t> prompt = byte_tokens(6, 9);
    ASSERT_EQ(llmkv_session_append(s, prompt.data(), prompt.size()), LLMKV_OK);
    EXPECT_EQ(llmkv_session_set_grammar(s, LLMKV_GRAMMAR_GBNF, bad, std::strlen(bad), nullptr),
              LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(llmkv_session_set_grammar(s, LLMKV_GRAMMAR_GBNF, grammar_cases::kAnswerGbnf,
                                        std::strlen(grammar_cases::kAnswerGbnf), "nope"),
              LLMKV_ERR_INVALID_ARGUMENT);  // no such root rule
    const char *two = "answer ::= \"2\"\nroot ::= \"1\"";
    ASSERT_EQ(llmkv_session_set_grammar(s, LLMKV_GRAMMAR_GBNF, two, std::strlen(two), "answer"),
              LLMKV_OK)
        << llmkv_last_error();
    ASSERT_EQ(llmkv_session_generate(s, 10), LLMKV_OK);
    EXPECT_EQ(llmkv_session_set_grammar(s, LLMKV_GRAMMAR_NONE, nullptr, 0, nullptr),
              LLMKV_ERR_STATE);
    ASSERT_EQ(llmkv_run(e_, nullptr, nullptr), LLMKV_OK);
    char buf[64];
    size_t n = 0;
    ASSERT_EQ(llmkv_session_read_text(s, buf, sizeof(buf), &n), LLMKV_OK);
    EXPECT_EQ(std::string(buf, n), "2");
    ASSERT_EQ(llmkv_session_set_grammar(s, LLMKV_GRAMMAR_NONE, nullptr, 0, nullptr), LLMKV_OK);
    llmkv_session_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_session_get_info(s, &info), LLMKV_OK);
    EXPECT_EQ(info.has_grammar, 0u);
    llmkv_session_destroy(s);
}

}  // namespace
}  // namespace llmkv
