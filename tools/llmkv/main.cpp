// The llmkv command line: one CLI11 parser with a subcommand each for `run` (generate text
// from a prompt, defined here), `demo`, `inspect`, `bench` (and its own subcommands) and
// `version`. `run` uses only the public C API.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_json.h"
#include "cli_common.h"
#include "llmkv.h"
#include "platform/os.h"

namespace {

using llmkv_cli::apply_tp_options;
using llmkv_cli::serve_tp_rank;
using llmkv_cli::TpOptions;

struct RunOptions {
    std::string model;
    std::string prompt;
    uint32_t n_predict = 128;
    bool chat = false;
    bool verbose = false;
    llmkv_sampling sampling{};
    uint32_t n_threads = 0;
    uint32_t max_context = 0;
    llmkv_kv_dtype kv_dtype = LLMKV_KV_F16;
    std::string system;       // --system: a shared system prompt, served from a prefix
    std::string prefix_file;  // --prefix-file: snapshot of that prefix (create or load)
    bool any_kernel = false;  // --any-kernel: load a snapshot of another kernel variant
    int kv_dtype_v = -1;      // -1: same as kv_dtype
    llmkv_kv_dtype kv_dtype_v_choice = LLMKV_KV_F16;  // --kv-dtype-v as parsed
    uint32_t kv_residual = 0;
    // Constrained generation.
    std::vector<std::string> stop;        // --stop, repeatable
    std::vector<std::string> logit_bias;  // --logit-bias TOKEN=BIAS, repeatable
    uint32_t min_new_tokens = 0;
    std::string grammar_file;      // --grammar FILE (GBNF)
    std::string json_schema_file;  // --json-schema FILE
    std::string grammar_root = "root";
    TpOptions tp;
};

// "TOKEN=BIAS": BIAS a number or -inf (bans the token).
bool parse_logit_bias(const std::string &spec, llmkv_logit_bias &out) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) return false;
    char *end = nullptr;
    long id = std::strtol(spec.c_str(), &end, 10);
    if (end != spec.c_str() + eq || id < 0 || id > INT32_MAX) return false;
    std::string b = spec.substr(eq + 1);
    if (b == "-inf" || b == "-INF" || b == "ban") {
        out = {int32_t(id), -INFINITY};
        return true;
    }
    float v = std::strtof(b.c_str(), &end);
    if (*end != '\0' || !std::isfinite(v)) return false;
    out = {int32_t(id), v};
    return true;
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int check(llmkv_status st, const char *what) {
    if (st == LLMKV_OK) return 0;
    std::fprintf(stderr, "llmkv: %s failed: %s: %s\n", what, llmkv_status_string(st),
                 llmkv_last_error());
    return 1;
}

// gpt-oss (the harmony chat format) answers in channels: its reasoning ("analysis") first,
// then "<|channel|>final<|message|>" and the answer. With --chat only the answer goes to
// stdout; the rest, markup included, goes to stderr. A marker split across reads is held
// back until it is whole.
class HarmonyView {
public:
    void feed(const char *text, size_t n) {
        held_.append(text, n);
        flush(false);
    }
    void finish() { flush(true); }

private:
    void flush(bool end) {
        for (;;) {
            const std::string &marker = in_final_ ? kEnd : kFinal;
            size_t p = held_.find(marker);
            FILE *to = in_final_ ? stdout : stderr;
            if (p == std::string::npos) {
                size_t keep = end ? 0 : std::min(held_.size(), marker.size() - 1);
                std::fwrite(held_.data(), 1, held_.size() - keep, to);
                held_.erase(0, held_.size() - keep);
                break;
            }
            std::fwrite(held_.data(), 1, in_final_ ? p : p + marker.size(), to);
            held_.erase(0, p + marker.size());
            if (in_final_) std::fwrite(kEnd.data(), 1, kEnd.size(), stderr);
            in_final_ = !in_final_;
        }
        std::fflush(stderr);
        std::fflush(stdout);
    }

    const std::string kFinal = "<|channel|>final<|message|>";
    const std::string kEnd = "<|end|>";
    std::string held_;
    bool in_final_ = false;
};

void print_text(llmkv_session *s, HarmonyView *harmony = nullptr) {
    char buf[4096];
    size_t n = 0;
    while (llmkv_session_read_text(s, buf, sizeof(buf), &n) == LLMKV_OK && n > 0) {
        if (harmony) {
            harmony->feed(buf, n);
        } else {
            std::fwrite(buf, 1, n, stdout);
        }
    }
    std::fflush(stdout);
}

std::string format_chat(llmkv_engine *engine, const std::vector<llmkv_chat_message> &msgs,
                        bool add_generation_prompt) {
    size_t need = 0;
    llmkv_chat_format(engine, msgs.data(), msgs.size(), add_generation_prompt, nullptr, 0, &need);
    std::vector<char> buf(need + 1);
    if (check(llmkv_chat_format(engine, msgs.data(), msgs.size(), add_generation_prompt, buf.data(),
                                buf.size(), &need),
              "chat_format")) {
        return std::string();
    }
    return std::string(buf.data(), need);
}

// The system prompt's prefix: loaded from the snapshot when it holds exactly these tokens,
// else computed (and saved when a path is given).
llmkv_prefix *obtain_prefix(llmkv_engine *engine, const std::string &system_text,
                            const std::string &path, bool any_kernel) {
    size_t n = 0;
    llmkv_tokenize(engine, system_text.data(), system_text.size(),
                   LLMKV_TOKENIZE_PARSE_SPECIAL | LLMKV_TOKENIZE_ADD_BOS, nullptr, 0, &n);
    std::vector<int32_t> ids(n);
    if (check(llmkv_tokenize(engine, system_text.data(), system_text.size(),
                             LLMKV_TOKENIZE_PARSE_SPECIAL | LLMKV_TOKENIZE_ADD_BOS, ids.data(),
                             ids.size(), &n),
              "tokenize")) {
        return nullptr;
    }
    llmkv_prefix *prefix = nullptr;
    double t0 = now_seconds();
    if (!path.empty()) {
        llmkv_status st = llmkv_prefix_load_ex(
            engine, path.c_str(), any_kernel ? LLMKV_PREFIX_LOAD_ANY_KERNEL : 0u, &prefix);
        if (st == LLMKV_OK) {
            std::vector<int32_t> stored(llmkv_prefix_n_tokens(prefix));
            size_t count = 0;
            llmkv_prefix_get_tokens(prefix, stored.data(), stored.size(), &count);
            if (stored == ids) {
                std::fprintf(stderr,
                             "[llmkv] system prompt: %zu tokens loaded from %s in %.1f ms\n",
                             ids.size(), path.c_str(), (now_seconds() - t0) * 1e3);
                return prefix;
            }
            std::fprintf(stderr, "[llmkv] %s holds another system prompt; recomputing\n",
                         path.c_str());
            llmkv_prefix_release(prefix);
            prefix = nullptr;
        } else if (st != LLMKV_ERR_IO) {
            std::fprintf(stderr, "[llmkv] cannot use %s (%s: %s); recomputing\n", path.c_str(),
                         llmkv_status_string(st), llmkv_last_error());
        }
    }
    t0 = now_seconds();
    if (check(llmkv_prefix_create(engine, ids.data(), ids.size(), &prefix), "prefix_create"))
        return nullptr;
    std::fprintf(stderr, "[llmkv] system prompt: %zu tokens computed in %.1f ms\n", ids.size(),
                 (now_seconds() - t0) * 1e3);
    if (!path.empty()) {
        if (llmkv_prefix_save(prefix, path.c_str()) == LLMKV_OK) {
            std::fprintf(stderr, "[llmkv] saved to %s\n", path.c_str());
        } else {
            std::fprintf(stderr, "[llmkv] could not save %s: %s\n", path.c_str(),
                         llmkv_last_error());
        }
    }
    return prefix;
}

int cmd_run(const RunOptions &o) {
    if (o.prompt.empty()) {
        std::fprintf(stderr, "llmkv run: -p PROMPT is required\n");
        return 2;
    }
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    if (o.verbose) llmkv_log_set(nullptr, nullptr, LLMKV_LOG_INFO);

    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = o.model.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = o.n_threads;
    ep.max_context = o.max_context;
    ep.kv_dtype_k = o.kv_dtype;
    ep.kv_dtype_v = o.kv_dtype_v >= 0 ? llmkv_kv_dtype(o.kv_dtype_v) : o.kv_dtype;
    ep.kv_residual_tokens = o.kv_residual;
    if (!apply_tp_options(o.tp, ep)) return 1;
    if (int rc = 0; serve_tp_rank(ep, &rc)) return rc;
    llmkv_engine *engine = nullptr;
    double t_load = now_seconds();
    if (check(llmkv_engine_create(&ep, &engine), "engine_create")) return 1;
    t_load = now_seconds() - t_load;

    // The prompt, split into the shared system part (served from a prefix) and the rest.
    std::string system_text, text = o.prompt;
    std::unique_ptr<HarmonyView> harmony;
    if (o.chat) {
        std::vector<llmkv_chat_message> msgs;
        if (!o.system.empty()) msgs.push_back({"system", o.system.c_str()});
        std::string sys_only = msgs.empty() ? std::string() : format_chat(engine, msgs, false);
        msgs.push_back({"user", o.prompt.c_str()});
        std::string full = format_chat(engine, msgs, true);
        if (full.empty()) {
            llmkv_engine_destroy(engine);
            return 1;
        }
        system_text = sys_only;
        text = full.substr(sys_only.size());
        if (full.rfind("<|start|>system<|message|>", 0) == 0) {
            harmony = std::make_unique<HarmonyView>();
        }
    } else if (!o.system.empty()) {
        system_text = o.system;
    }

    llmkv_prefix *prefix = nullptr;
    if (!system_text.empty() || !o.prefix_file.empty()) {
        if (system_text.empty()) {
            std::fprintf(stderr, "llmkv run: --prefix-file needs --system TEXT\n");
            llmkv_engine_destroy(engine);
            return 2;
        }
        prefix = obtain_prefix(engine, system_text, o.prefix_file, o.any_kernel);
        if (!prefix) {
            llmkv_engine_destroy(engine);
            return 1;
        }
    }

    sp.sampling = o.sampling;
    sp.prefix = prefix;
    std::vector<const char *> stops;
    std::vector<size_t> stop_lengths;
    for (const std::string &st : o.stop) {
        stops.push_back(st.data());
        stop_lengths.push_back(st.size());
    }
    sp.stop_strings = stops.data();
    sp.stop_string_lengths = stop_lengths.data();
    sp.n_stop_strings = uint32_t(stops.size());
    std::vector<llmkv_logit_bias> bias(o.logit_bias.size());
    for (size_t i = 0; i < o.logit_bias.size(); ++i) {
        if (!parse_logit_bias(o.logit_bias[i], bias[i])) {
            std::fprintf(
                stderr, "llmkv run: --logit-bias %s: expected TOKEN=BIAS (BIAS a number or -inf)\n",
                o.logit_bias[i].c_str());
            llmkv_prefix_release(prefix);
            llmkv_engine_destroy(engine);
            return 2;
        }
    }
    sp.logit_bias = bias.data();
    sp.n_logit_bias = uint32_t(bias.size());
    sp.min_new_tokens = o.min_new_tokens;
    std::string grammar;
    if (!o.grammar_file.empty() || !o.json_schema_file.empty()) {
        bool schema = !o.json_schema_file.empty();
        if (!llmkv_cli::read_file(schema ? o.json_schema_file : o.grammar_file, grammar,
                                  "llmkv run")) {
            llmkv_prefix_release(prefix);
            llmkv_engine_destroy(engine);
            return 1;
        }
        sp.grammar_kind = schema ? LLMKV_GRAMMAR_JSON_SCHEMA : LLMKV_GRAMMAR_GBNF;
        sp.grammar = grammar.data();
        sp.grammar_len = grammar.size();
        sp.grammar_root = o.grammar_root.c_str();
    }
    llmkv_session *session = nullptr;
    int rc = check(llmkv_session_create(engine, &sp, &session), "session_create");
    if (!rc)
        rc = check(llmkv_session_append_text(session, text.data(), text.size()), "append_text");
    llmkv_session_info info;
    info.struct_size = sizeof(info);
    if (!rc) rc = check(llmkv_session_get_info(session, &info), "session_get_info");
    const uint32_t n_prompt = rc ? 0 : info.n_tokens;
    if (!rc) rc = check(llmkv_session_generate(session, o.n_predict), "generate");

    double t_start = now_seconds(), t_first = 0;
    uint32_t n_generated = 0;
    uint32_t finish = LLMKV_FINISH_NONE;
    bool done = false;
    llmkv_event events[16];
    while (!rc && !done) {
        size_t n = 0;
        if (check(llmkv_step(engine, events, 16, &n), "step")) {
            rc = 1;
            break;
        }
        for (size_t i = 0; i < n; ++i) {
            if (events[i].kind == LLMKV_EVENT_TOKEN) {
                if (n_generated++ == 0) t_first = now_seconds();
            } else if (events[i].kind == LLMKV_EVENT_DONE) {
                finish = events[i].finish_reason;
                done = true;
            } else if (events[i].kind == LLMKV_EVENT_ERROR) {
                std::fprintf(stderr, "\nllmkv: session error %s\n",
                             llmkv_status_string(events[i].status));
                rc = 1;
            }
        }
        print_text(session, harmony.get());
        if (n == 0 && llmkv_pending_events(engine) == 0 && !done) {
            // No events and no work: should not happen while generating.
            llmkv_session_get_info(session, &info);
            if (info.state != LLMKV_SESSION_GENERATING && info.state != LLMKV_SESSION_PREFILLING &&
                info.state != LLMKV_SESSION_QUEUED) {
                break;
            }
        }
    }
    if (harmony) harmony->finish();
    double t_end = now_seconds();
    std::printf("\n");
    if (!rc) {
        static const char *reasons[] = {"none",      "stop",    "length",
                                        "cancelled", "context", "constraint"};
        double prefill_s = (t_first > 0 ? t_first : t_end) - t_start;
        double decode_s = t_end - (t_first > 0 ? t_first : t_end);
        llmkv_engine_info ei;
        ei.struct_size = sizeof(ei);
        llmkv_engine_get_info(engine, &ei);
        std::fprintf(stderr,
                     "\n[llmkv] model load %.0f ms | prompt %u tokens, first token after %.1f ms "
                     "(%.1f tok/s) | "
                     "generated %u tokens, %.1f tok/s decode | finish: %s | %u threads | peak RSS "
                     "%.1f MiB\n",
                     t_load * 1e3, n_prompt, prefill_s * 1e3,
                     prefill_s > 0 ? n_prompt / prefill_s : 0.0, n_generated,
                     (n_generated > 1 && decode_s > 0) ? (n_generated - 1) / decode_s : 0.0,
                     finish < 6 ? reasons[finish] : "?", ei.n_threads,
                     double(llmkv::os::peak_resident_bytes()) / (1024.0 * 1024.0));
    }
    llmkv_session_destroy(session);
    llmkv_prefix_release(prefix);
    llmkv_engine_destroy(engine);
    return rc;
}

}  // namespace

namespace llmkv_cli {

Command add_run(CLI::App &parent) {
    CLI::App *app =
        parent.add_subcommand("run", "generate text from a prompt (streams it; timings on stderr)");
    auto o = std::make_shared<RunOptions>();
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    o->sampling = sp.sampling;
    add_model_option(*app, &o->model);
    app->add_option("-p,--prompt", o->prompt, "the prompt")->required();
    add_uint_option(*app, "-n,--n-predict", &o->n_predict, "tokens to generate at most");
    app->add_flag("--chat", o->chat, "wrap the prompt in the model's chat format");
    CLI::Option *system =
        app->add_option("--system", o->system, "system prompt, served from a shared prefix");
    app->add_option("--prefix-file", o->prefix_file,
                    "snapshot of the system prompt's prefix: loaded when it matches, else computed "
                    "and saved")
        ->type_name("PATH")
        ->needs(system);
    app->add_flag("--any-kernel", o->any_kernel,
                  "accept a --prefix-file written by another kernel variant (AVX-512, AVX2, "
                  "portable): not bitwise")
        ->needs("--prefix-file");
    app->add_flag("-v,--verbose", o->verbose, "log engine information on stderr");
    add_sampling_options(*app, &o->sampling);
    add_threads_option(*app, &o->n_threads);
    add_tp_options(*app, &o->tp);
    add_uint_option(*app, "--max-context", &o->max_context,
                    "tokens per session at most (0: the model's)");
    add_kv_dtype_option(*app, "--kv-dtype", &o->kv_dtype, "KV cache dtype (K and V)");
    CLI::Option *dtype_v = add_kv_dtype_option(*app, "--kv-dtype-v", &o->kv_dtype_v_choice,
                                               "KV dtype of V, when it differs from --kv-dtype");
    dtype_v->default_str("same as --kv-dtype");
    add_uint_option(*app, "--kv-residual", &o->kv_residual, "most recent tokens kept unquantized");
    app->add_option("--stop", o->stop,
                    "end generation where the text contains STR (repeatable; not printed)")
        ->type_name("STR")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app->add_option("--logit-bias", o->logit_bias,
                    "add BIAS to token ID's logit; -inf bans it (repeatable)")
        ->type_name("ID=BIAS")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    add_uint_option(*app, "--min-new-tokens", &o->min_new_tokens,
                    "ban end-of-generation until this many tokens");
    CLI::Option *grammar =
        app->add_option("--grammar", o->grammar_file, "constrain the output to a GBNF grammar")
            ->type_name("FILE");
    app->add_option("--json-schema", o->json_schema_file,
                    "constrain the output to JSON valid under a JSON Schema")
        ->type_name("FILE")
        ->excludes(grammar);
    app->add_option("--grammar-root", o->grammar_root, "the GBNF start rule")
        ->type_name("RULE")
        ->needs(grammar);
    return {app, [o, dtype_v] {
                o->kv_dtype_v = dtype_v->count() ? int(o->kv_dtype_v_choice) : -1;
                return cmd_run(*o);
            }};
}

}  // namespace llmkv_cli

int llmkv_cli::cli_main(int argc, char **argv) {
    set_command_line(argc, argv);  // for the benches' --json reports
    CLI::App app("llmkv: an embeddable LLM inference runtime", "llmkv");
    // A repeated option keeps its last value (`-n 8 -n 16` is 16), as it always has.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("llmkv ") + llmkv_version_string());

    std::vector<Command> commands;
    commands.push_back(add_run(app));
    commands.push_back(add_demo(app));
    commands.push_back(add_inspect(app));
    Command bench = add_bench(app);
    commands.push_back(bench);
    commands.push_back(add_bench_quality(*bench.app));
    commands.push_back(add_bench_prefix(*bench.app));
    commands.push_back(add_bench_batch(*bench.app));
    commands.push_back(add_bench_offload(*bench.app));
    commands.push_back(add_bench_grammar(*bench.app));
    commands.push_back(add_bench_window(*bench.app));
    commands.push_back(add_bench_tp(*bench.app));
    CLI::App *version = app.add_subcommand("version", "print the version");
    CLI::App *help = app.add_subcommand("help", "print this help");
    app.footer(
        "MODEL defaults to $LLMKV_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf.\n"
        "`llmkv COMMAND --help` lists a command's options.");
    auto root_help = [&app] {
        return app.get_formatter()->make_help(&app, "llmkv", CLI::AppFormatMode::Normal);
    };

    if (argc < 2) {
        std::fprintf(stderr, "%s", root_help().c_str());
        return 2;
    }
    if (argv[1][0] != '-' &&
        app.get_subcommands([&](const CLI::App *a) { return a->check_name(argv[1]); }).empty()) {
        std::fprintf(stderr, "llmkv: unknown command '%s'\nRun 'llmkv --help' for the commands.\n",
                     argv[1]);
        return 2;
    }

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        // Name the subcommand being parsed, so its --help is one copy-paste away.
        std::string where = "llmkv";
        for (CLI::App *a = &app; !a->get_subcommands().empty();) {
            a = a->get_subcommands().front();
            where += " " + a->get_name();
        }
        std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", where.c_str(), e.what(),
                     where.c_str());
        return 2;
    }
    if (version->parsed()) {
        std::printf("llmkv %s\n", llmkv_version_string());
        return 0;
    }
    if (help->parsed()) {
        std::printf("%s", root_help().c_str());
        return 0;
    }
    // The innermost subcommand named on the line is the one to run.
    CLI::App *chosen = &app;
    while (!chosen->get_subcommands().empty()) chosen = chosen->get_subcommands().front();
    // `bench -t 2 quality` would drop the -t silently: options belong after the command they are
    // for.
    for (CLI::App *a = chosen->get_parent(); a && a != &app; a = a->get_parent()) {
        for (const CLI::Option *opt : a->get_options()) {
            if (opt->count() > 0) {
                std::string where = "llmkv " + a->get_name();
                std::fprintf(stderr, "%s: %s is not an option of '%s %s'; give it after '%s'\n",
                             where.c_str(), opt->get_name().c_str(), where.c_str(),
                             chosen->get_name().c_str(), chosen->get_name().c_str());
                return 2;
            }
        }
    }
    for (const Command &c : commands) {
        if (c.app == chosen) return c.action();
    }
    return 2;
}
