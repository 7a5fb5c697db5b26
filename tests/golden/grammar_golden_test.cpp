// Constrained decoding on the real model (SmolLM2): many sessions in one batch, each with a
// seed and temperature, under a nested JSON Schema and under a GBNF grammar. Every output
// must be complete and belong to its language, checked by a JSON parser and a schema checker
// written here (independent of the grammar engine), and by a regular expression.
// Skipped with a reason when the model file is absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "llmkv.h"

namespace {

std::string model_path() {
    const char *env = std::getenv("LLMKV_MODEL");
    if (env && *env) return env;
    return LLMKV_TEST_FIXTURES_DIR "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

const char *kSchema = R"({
  "type": "object",
  "properties": {
    "say": {"type": "string", "maxLength": 80},
    "action": {"enum": ["wave", "trade", "attack", "flee"]},
    "mood": {"enum": ["friendly", "neutral", "hostile"]},
    "stats": {
      "type": "object",
      "properties": {
        "hp": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
        "armed": {"type": "boolean"}
      },
      "required": ["hp", "tags"]
    }
  },
  "required": ["say", "action", "mood", "stats"]
})";

size_t code_points(const std::string &s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

bool in(const std::string &v, std::initializer_list<const char *> options) {
    for (const char *o : options) {
        if (v == o) return true;
    }
    return false;
}

// The schema above, by hand.
std::string check(const std::string &text) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const std::exception &e) {
        return std::string("not JSON: ") + e.what();
    }
    if (!j.is_object() || j.size() != 4)
        return "top level: not an object with exactly the four required keys";
    if (!j["say"].is_string() || code_points(j["say"]) > 80) return "say";
    if (!j["action"].is_string() || !in(j["action"], {"wave", "trade", "attack", "flee"}))
        return "action";
    if (!j["mood"].is_string() || !in(j["mood"], {"friendly", "neutral", "hostile"})) return "mood";
    const nlohmann::json &st = j["stats"];
    if (!st.is_object()) return "stats";
    for (const auto &[k, v] : st.items()) {
        if (k == "hp") {
            if (!v.is_number_integer()) return "stats.hp";
        } else if (k == "tags") {
            if (!v.is_array() || v.empty() || v.size() > 3) return "stats.tags size";
            for (const auto &t : v) {
                if (!t.is_string() || code_points(t) > 12) return "stats.tags[]";
            }
        } else if (k == "armed") {
            if (!v.is_boolean()) return "stats.armed";
        } else {
            return "stats: extra key " + k;
        }
    }
    if (!st.contains("hp") || !st.contains("tags")) return "stats: missing a required key";
    return "";
}

struct Reply {
    std::string text;
    uint32_t finish = 0;
};

// n sessions in one batch; session i uses seed 10 + i and temperatures cycling over `temps`.
std::vector<Reply> run_batch(llmkv_engine *e, int n, llmkv_grammar_kind kind, const char *grammar,
                             const std::vector<float> &temps, const char *question) {
    std::vector<llmkv_session *> s(n, nullptr);
    for (int i = 0; i < n; ++i) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = temps[size_t(i) % temps.size()];
        sp.sampling.seed = 10 + uint64_t(i);
        sp.grammar_kind = kind;
        sp.grammar = grammar;
        sp.grammar_len = std::strlen(grammar);
        EXPECT_EQ(llmkv_session_create(e, &sp, &s[i]), LLMKV_OK) << llmkv_last_error();
        llmkv_chat_message m = {"user", question};
        char prompt[1024];
        size_t len = 0;
        EXPECT_EQ(llmkv_chat_format(e, &m, 1, 1, prompt, sizeof(prompt), &len), LLMKV_OK);
        EXPECT_EQ(llmkv_session_append_text(s[i], prompt, len), LLMKV_OK);
        EXPECT_EQ(llmkv_session_generate(s[i], 320), LLMKV_OK);
    }
    std::vector<Reply> out(n);
    std::vector<llmkv_event> ev(4 * size_t(n));
    for (int done = 0; done < n;) {
        size_t k = 0;
        EXPECT_EQ(llmkv_step(e, ev.data(), ev.size(), &k), LLMKV_OK);
        if (k == 0 && llmkv_pending_events(e) == 0) {
            llmkv_stats st;
            st.struct_size = sizeof(st);
            llmkv_engine_get_stats(e, &st);
            if (st.sessions_queued + st.sessions_prefilling + st.sessions_generating == 0) break;
        }
        for (size_t j = 0; j < k; ++j) {
            for (int i = 0; i < n; ++i) {
                if (ev[j].session == s[i] && ev[j].kind != LLMKV_EVENT_TOKEN) {
                    out[i].finish = ev[j].kind == LLMKV_EVENT_DONE ? ev[j].finish_reason : 99;
                    ++done;
                }
            }
        }
    }
    for (int i = 0; i < n; ++i) {
        char buf[1024];
        size_t got = 0;
        while (llmkv_session_read_text(s[i], buf, sizeof(buf), &got) == LLMKV_OK && got)
            out[i].text.append(buf, got);
        llmkv_session_destroy(s[i]);
    }
    return out;
}

class GrammarGoldenTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::ifstream(model_path()).good()) {
            GTEST_SKIP() << "model not found at " << model_path()
                         << " (set LLMKV_MODEL or run scripts/fetch_model.sh)";
        }
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        const std::string path = model_path();
        p.model_path = path.c_str();
        p.backend = LLMKV_BACKEND_CPU;
        ASSERT_EQ(llmkv_engine_create(&p, &e_), LLMKV_OK) << llmkv_last_error();
    }
    void TearDown() override { llmkv_engine_destroy(e_); }
    llmkv_engine *e_ = nullptr;
};

TEST_F(GrammarGoldenTest, EveryReplyUnderANestedSchemaIsCompleteValidJson) {
    std::vector<Reply> runs =
        run_batch(e_, 12, LLMKV_GRAMMAR_JSON_SCHEMA, kSchema, {0.0f, 0.7f, 1.0f, 1.4f},
                  "You are a guard at the city gate. A traveler approaches. Describe your reaction "
                  "as JSON with say, action, mood and stats.");
    for (size_t i = 0; i < runs.size(); ++i) {
        EXPECT_EQ(runs[i].finish, LLMKV_FINISH_STOP) << "session " << i << ": " << runs[i].text;
        EXPECT_EQ(check(runs[i].text), "") << "session " << i << ": " << runs[i].text;
    }
}

TEST_F(GrammarGoldenTest, EveryReplyUnderAGbnfGrammarMatchesItsLanguage) {
    const char *grammar =
        "root   ::= answer \" (\" number \"/10)\"\n"
        "answer ::= (\"Yes\" | \"No\" | \"Maybe\") \", \" [a-z ]{1,40} \".\"\n"
        "number ::= [0-9] | \"10\"\n";
    const std::regex language("(Yes|No|Maybe), [a-z ]{1,40}\\. \\(([0-9]|10)/10\\)");
    std::vector<Reply> runs =
        run_batch(e_, 8, LLMKV_GRAMMAR_GBNF, grammar, {0.0f, 0.8f, 1.3f},
                  "Is it safe to travel through the forest at night? Rate the danger.");
    for (size_t i = 0; i < runs.size(); ++i) {
        EXPECT_EQ(runs[i].finish, LLMKV_FINISH_STOP) << "session " << i << ": " << runs[i].text;
        EXPECT_TRUE(std::regex_match(runs[i].text, language))
            << "session " << i << ": " << runs[i].text;
    }
}

}  // namespace
