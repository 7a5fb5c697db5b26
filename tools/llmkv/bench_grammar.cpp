// `llmkv bench grammar`: what grammar-constrained decoding costs. For each batch size, the
// same NPC prompts are decoded without a grammar and with a JSON Schema (the built-in NPC
// schema, or --json-schema FILE), in one run; printed: decode tokens/s, the grammar's masking
// cost per constrained token (compute + apply, from llmkv_stats), the mask cache's hit rate,
// and how many constrained outputs completed. Numbers only; nothing is asserted.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_json.h"
#include "cli_common.h"
#include "llmkv.h"

namespace llmkv_cli {

namespace {

const char *kNpcSchema = R"({
  "type": "object",
  "properties": {
    "say": {"type": "string", "maxLength": 160},
    "action": {"enum": ["wave", "trade", "attack", "flee", "ignore", "follow"]},
    "mood": {"enum": ["friendly", "neutral", "wary", "hostile"]},
    "gold": {"type": "integer"}
  },
  "required": ["say", "action", "mood"]
})";

const char *kRoles[] = {"blacksmith", "innkeeper", "guard", "merchant",
                        "farmer",     "priest",    "thief", "bard"};

struct Options {
    std::string model = default_model_path();
    uint32_t threads = 0;
    std::vector<uint32_t> batches{1, 32};
    uint32_t tokens = 96;  // max new tokens per session
    std::string schema_file;
    std::string json;
};

struct Result {
    double decode_tps = 0;
    uint64_t tokens = 0;
    double mask_us = 0;    // per constrained token
    double sample_us = 0;  // per token, everything sampling does
    double hit_rate = 0;
    uint32_t completed = 0;  // generations that ended with STOP
};

llmkv_stats stats_of(llmkv_engine *e) {
    llmkv_stats st;
    st.struct_size = sizeof(st);
    llmkv_engine_get_stats(e, &st);
    return st;
}

bool run_batch(llmkv_engine *e, uint32_t batch, uint32_t max_new, const std::string *schema,
               Result &r, uint64_t seed_base = 1000) {
    std::vector<llmkv_session *> sessions(batch, nullptr);
    for (uint32_t i = 0; i < batch; ++i) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = 0.7f;
        sp.sampling.top_k = 40;
        sp.sampling.seed = seed_base + i;
        if (schema) {
            sp.grammar_kind = LLMKV_GRAMMAR_JSON_SCHEMA;
            sp.grammar = schema->data();
            sp.grammar_len = schema->size();
        } else {
            sp.min_new_tokens =
                max_new;  // the same amount of decoding as the longest constrained run
        }
        std::string user =
            std::string("You are a ") + kRoles[i % 8] + " in a village (NPC " + std::to_string(i) +
            "). A traveler says: \"Good day! What news?\" Reply as JSON with say, action and mood.";
        llmkv_chat_message msgs[] = {{"user", user.c_str()}};
        char prompt[2048];
        size_t n = 0;
        if (llmkv_session_create(e, &sp, &sessions[i]) != LLMKV_OK ||
            llmkv_chat_format(e, msgs, 1, 1, prompt, sizeof(prompt), &n) != LLMKV_OK ||
            llmkv_session_append_text(sessions[i], prompt, n) != LLMKV_OK ||
            llmkv_session_generate(sessions[i], max_new) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv bench grammar: %s\n", llmkv_last_error());
            for (llmkv_session *s : sessions) llmkv_session_destroy(s);
            return false;
        }
    }
    const llmkv_stats before = stats_of(e);
    std::vector<uint8_t> started(batch, 0), done(batch, 0);
    uint32_t n_started = 0, n_done = 0;
    double t_decode = 0;
    uint64_t decode_tokens = 0;
    std::vector<llmkv_event> ev(256);
    while (n_done < batch) {
        size_t k = 0;
        if (llmkv_step(e, ev.data(), ev.size(), &k) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv bench grammar: %s\n", llmkv_last_error());
            return false;
        }
        for (size_t j = 0; j < k; ++j) {
            uint32_t i = uint32_t(std::find(sessions.begin(), sessions.end(), ev[j].session) -
                                  sessions.begin());
            if (i >= batch) continue;
            if (ev[j].kind == LLMKV_EVENT_TOKEN) {
                if (!started[i]) {
                    started[i] = 1;
                    if (++n_started == batch)
                        t_decode = now();  // every prompt is in: decoding from here
                } else if (n_started == batch) {
                    ++decode_tokens;
                }
            } else {
                if (!done[i]) ++n_done;
                done[i] = 1;
                if (!started[i]) {
                    started[i] = 1;
                    if (++n_started == batch) t_decode = now();
                }
                if (ev[j].kind == LLMKV_EVENT_DONE && ev[j].finish_reason == LLMKV_FINISH_STOP)
                    ++r.completed;
            }
        }
    }
    const double t_end = now();
    const llmkv_stats after = stats_of(e);
    r.tokens = after.tokens_generated - before.tokens_generated;
    r.decode_tps = t_end > t_decode ? double(decode_tokens) / (t_end - t_decode) : 0.0;
    const uint64_t masks = after.grammar_masks - before.grammar_masks;
    r.mask_us = masks ? double(after.grammar_mask_ns - before.grammar_mask_ns) / masks / 1e3 : 0.0;
    const uint64_t picks = r.tokens + batch;  // every generated token, and each final stop token
    r.sample_us = double(after.sample_ns - before.sample_ns) / double(picks) / 1e3;
    r.hit_rate =
        masks ? double(after.grammar_mask_cache_hits - before.grammar_mask_cache_hits) / masks
              : 0.0;
    for (llmkv_session *s : sessions) llmkv_session_destroy(s);
    return true;
}

int run(const Options &o, BenchReport &rep) {
    std::string schema = kNpcSchema;
    if (!o.schema_file.empty()) {
        schema.clear();
        if (!read_file(o.schema_file, schema, "llmkv bench grammar")) return 1;
    }
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = o.model.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = o.threads;
    llmkv_engine *e = nullptr;
    if (llmkv_engine_create(&ep, &e) != LLMKV_OK) {
        std::fprintf(stderr, "llmkv bench grammar: %s\n", llmkv_last_error());
        return 1;
    }
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    llmkv_engine_get_info(e, &info);
    rep.set_model(o.model, info);
    rep.params()["threads"] = o.threads;
    rep.params()["batch_sizes"] = o.batches;
    rep.params()["max_new_tokens"] = o.tokens;
    rep.params()["temperature"] = 0.7;
    rep.params()["schema"] =
        o.schema_file.empty() ? std::string("built-in NPC schema") : o.schema_file;
    std::printf("llmkv bench grammar: %s, %u threads, up to %u new tokens, temperature 0.7\n",
                info.model_name, info.n_threads, o.tokens);
    std::printf("%6s %-10s %12s %10s %14s %14s %10s %10s\n", "batch", "grammar", "decode tok/s",
                "tokens", "mask us/token", "sample us/tok", "mask hits", "complete");
    for (uint32_t b : o.batches) {
        // Unconstrained first, then the schema twice: a cold mask cache (the grammar compiled
        // afresh), then warm (a session holding the grammar keeps its masker and caches alive).
        llmkv_session *keeper = nullptr;
        for (int pass = 0; pass < 3; ++pass) {
            Result r;
            if (!run_batch(e, b, o.tokens, pass == 0 ? nullptr : &schema, r)) {
                llmkv_session_destroy(keeper);
                llmkv_engine_destroy(e);
                return 1;
            }
            const char *label = pass == 0 ? "none" : pass == 1 ? "json-cold" : "json-warm";
            std::printf("%6u %-10s %12.1f %10llu %14.1f %14.1f %9.1f%% %7u/%-3u\n", b, label,
                        r.decode_tps, (unsigned long long)r.tokens, r.mask_us, r.sample_us,
                        r.hit_rate * 100.0, pass == 0 ? 0u : r.completed, b);
            Json rec{{"bench", "grammar_decode"},
                     {"grammar", label},
                     {"threads", info.n_threads},
                     {"batch", b},
                     {"tok_s", r.decode_tps},
                     {"tokens", r.tokens},
                     {"mask_us_per_token", r.mask_us},
                     {"sample_us_per_token", r.sample_us},
                     {"mask_cache_hit_rate", r.hit_rate}};
            rec["completed"] = pass == 0 ? Json(nullptr) : Json(r.completed);
            rec["sessions"] = b;
            rep.add(std::move(rec));
            std::fflush(stdout);
            if (pass == 1) {
                // The schema once more, other seeds, with a keeper alive: the warm pass finds the
                // caches of a grammar that has served a batch before (a game's steady state).
                llmkv_session_params sp;
                llmkv_session_params_init(&sp);
                sp.grammar_kind = LLMKV_GRAMMAR_JSON_SCHEMA;
                sp.grammar = schema.data();
                sp.grammar_len = schema.size();
                llmkv_session_create(e, &sp, &keeper);
                Result warmup;
                run_batch(e, b, o.tokens, &schema, warmup, 5000);
            }
        }
        llmkv_session_destroy(keeper);
    }
    llmkv_engine_destroy(e);
    return 0;
}

}  // namespace

Command add_bench_grammar(CLI::App &bench) {
    CLI::App *app = bench.add_subcommand(
        "grammar", "decode speed and masking cost with and without a JSON Schema");
    auto o = std::make_shared<Options>();
    add_model_option(*app, &o->model);
    add_threads_option(*app, &o->threads);
    add_uint_list_option(*app, "--batch", &o->batches, "batch sizes (comma-separated)");
    add_uint_option(*app, "-n,--tokens", &o->tokens, "new tokens per session at most");
    app->add_option("--json-schema", o->schema_file, "the schema (default: a built-in NPC schema)")
        ->type_name("FILE");
    add_json_option(*app, &o->json);
    return {app, [o] {
                BenchReport rep("bench grammar", o->json);
                if (!rep.check_writable("llmkv bench grammar")) return 2;
                return rep.finish(run(*o, rep), "llmkv bench grammar");
            }};
}

}  // namespace llmkv_cli
