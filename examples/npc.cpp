// npc.cpp - NPCs that answer in JSON the game can parse. Eight villagers are greeted by the
// player in one batch; each session carries the same JSON Schema, so every reply is an
// object {"say": string, "action": one of the game's verbs, "mood": ...} and the host
// parses it with an ordinary JSON parser and acts on it. A second turn gives one NPC a
// different format (a GBNF grammar for a yes/no answer) with llmkv_session_set_grammar.
// Only the C API is used (from C++, for the JSON parser).
//
//   build/examples/example_npc models/SmolLM2-135M-Instruct.Q4_1.gguf
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llmkv.h"

namespace {

const char *kSchema = R"({
  "type": "object",
  "properties": {
    "say": {"type": "string", "maxLength": 140},
    "action": {"enum": ["wave", "trade", "attack", "flee", "ignore", "follow"]},
    "mood": {"enum": ["friendly", "neutral", "wary", "hostile"]}
  },
  "required": ["say", "action", "mood"]
})";

const char *kYesNo = "root ::= (\"Yes\" | \"No\") \", \" [a-zA-Z ,']{2,60} \".\"\n";

struct Npc {
    Npc(const char *n, const char *p) : name(n), persona(p) {}
    const char *name;
    const char *persona;
    llmkv_session *session = nullptr;
    std::string reply;
};

int fail(const char *what) {
    std::fprintf(stderr, "%s: %s\n", what, llmkv_last_error());
    return 1;
}

// Formats one user turn with the model's chat template and queues it with a generate request.
llmkv_status ask(llmkv_engine *e, llmkv_session *s, const std::string &text, bool first) {
    llmkv_chat_message msg = {"user", text.c_str()};
    char prompt[2048];
    size_t n = 0;
    llmkv_status st = llmkv_chat_format(e, &msg, 1, 1, prompt, sizeof(prompt), &n);
    if (st != LLMKV_OK) return st;
    const char *start = prompt;
    if (!first) {  // later turns start at the user message (the default system prompt is said once)
        const char *user = std::strstr(prompt, "<|im_start|>user");
        if (user) start = user;
    }
    st = llmkv_session_append_text(s, start, std::strlen(start));
    return st == LLMKV_OK ? llmkv_session_generate(s, 160) : st;
}

// Steps the engine until no session has work, collecting each session's text.
bool run(llmkv_engine *e, std::vector<Npc> &npcs) {
    for (Npc &n : npcs) n.reply.clear();
    for (;;) {
        llmkv_event ev[64];
        size_t k = 0;
        if (llmkv_step(e, ev, 64, &k) != LLMKV_OK) return false;
        for (Npc &n : npcs) {
            char buf[512];
            size_t got = 0;
            while (llmkv_session_read_text(n.session, buf, sizeof(buf), &got) == LLMKV_OK &&
                   got > 0) {
                n.reply.append(buf, got);
            }
        }
        if (k == 0 && llmkv_pending_events(e) == 0) {
            llmkv_stats st;
            st.struct_size = sizeof(st);
            llmkv_engine_get_stats(e, &st);
            if (st.sessions_queued + st.sessions_prefilling + st.sessions_generating == 0)
                return true;
        }
    }
}

}  // namespace

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = model;
    ep.backend = LLMKV_BACKEND_CPU;
    llmkv_engine *e = nullptr;
    if (llmkv_engine_create(&ep, &e) != LLMKV_OK) return fail("engine_create");

    std::vector<Npc> npcs = {
        {"Brom", "a gruff blacksmith"},
        {"Lysa", "a cheerful innkeeper"},
        {"Odo", "a suspicious town guard"},
        {"Mirel", "a greedy merchant"},
        {"Tam", "a shy farmer"},
        {"Sera", "an old priestess"},
        {"Vex", "a pickpocket"},
        {"Quill", "a wandering bard"},
    };
    for (size_t i = 0; i < npcs.size(); ++i) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = 0.7f;
        sp.sampling.top_k = 40;
        sp.sampling.seed = 42 + i;
        sp.grammar_kind = LLMKV_GRAMMAR_JSON_SCHEMA;
        sp.grammar = kSchema;
        sp.grammar_len = std::strlen(kSchema);
        if (llmkv_session_create(e, &sp, &npcs[i].session) != LLMKV_OK)
            return fail("session_create");
        std::string text =
            std::string("You are ") + npcs[i].name + ", " + npcs[i].persona +
            " in a village. A stranger walks up and says: \"Hello there! Any work for me?\" "
            "Reply with JSON: what you say, your action and your mood.";
        if (ask(e, npcs[i].session, text, true) != LLMKV_OK) return fail("ask");
    }
    if (!run(e, npcs)) return fail("step");

    int parsed = 0;
    for (Npc &n : npcs) {
        try {
            nlohmann::json j = nlohmann::json::parse(n.reply);
            const std::string action = j.at("action"), mood = j.at("mood"), say = j.at("say");
            std::printf("[%s] (%s, %s) %s\n", n.name, action.c_str(), mood.c_str(), say.c_str());
            ++parsed;
        } catch (const std::exception &ex) {
            std::printf("[%s] unparsable reply (%s): %s\n", n.name, ex.what(), n.reply.c_str());
        }
    }
    std::printf("-- %d of %zu replies parsed as JSON\n", parsed, npcs.size());

    // Turn two: the guard must answer yes or no; the others stay quiet.
    Npc &guard = npcs[2];
    if (llmkv_session_set_grammar(guard.session, LLMKV_GRAMMAR_GBNF, kYesNo, std::strlen(kYesNo),
                                  nullptr) != LLMKV_OK) {
        return fail("set_grammar");
    }
    if (ask(e, guard.session, "May I enter the castle tonight? Answer yes or no, and why.",
            false) != LLMKV_OK) {
        return fail("ask");
    }
    if (!run(e, npcs)) return fail("step");
    const bool yes_no = guard.reply.rfind("Yes, ", 0) == 0 || guard.reply.rfind("No, ", 0) == 0;
    std::printf("[%s] %s\n-- yes/no answer: %s\n", guard.name, guard.reply.c_str(),
                yes_no ? "ok" : "MALFORMED");

    for (Npc &n : npcs) llmkv_session_destroy(n.session);
    llmkv_engine_destroy(e);
    return parsed == int(npcs.size()) && yes_no ? 0 : 1;
}
