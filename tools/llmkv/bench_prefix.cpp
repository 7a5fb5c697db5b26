// `llmkv bench prefix`: what prefix reuse buys. Time to first token of a short question
// after a long system prompt, computed vs served from a prefix handle vs found by the
// automatic prefix cache; and the KV bytes of many sessions sharing one prefix against the
// same sessions unshared. Numbers only.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_json.h"
#include "cli_common.h"
#include "llmkv.h"
#include "platform/os.h"

namespace llmkv_cli {

namespace {

// Time from generate() to the first TOKEN event, with the prompt already appended.
double time_to_first_token(llmkv_engine *e, llmkv_session *s) {
    double t0 = now();
    llmkv_session_generate(s, 1);
    llmkv_event ev[4];
    size_t n = 0;
    for (;;) {
        if (llmkv_step(e, ev, 4, &n) != LLMKV_OK) return -1;
        for (size_t i = 0; i < n; ++i) {
            if (ev[i].kind == LLMKV_EVENT_TOKEN) {
                double t = now() - t0;
                llmkv_run(e, nullptr, nullptr);
                return t;
            }
        }
    }
}

// The bench's engines: KV dtype `dtype` (K and V), `flags`.
llmkv_engine *make(const std::string &model, uint32_t threads, llmkv_kv_dtype dtype,
                   uint32_t flags) {
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = model.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = threads;
    ep.kv_dtype_k = ep.kv_dtype_v = dtype;
    ep.flags = flags;
    llmkv_engine *e = nullptr;
    if (llmkv_engine_create(&ep, &e) != LLMKV_OK)
        std::fprintf(stderr, "llmkv bench prefix: %s\n", llmkv_last_error());
    return e;
}

struct PrefixOptions {
    std::string model;
    uint32_t threads = 0, system_tokens = 1500, n_sessions = 64, decode_tokens = 128;
    std::vector<uint32_t> prefix_lengths;  // --prefix-lengths: a sweep (else --system-tokens)
    llmkv_kv_dtype dtype = LLMKV_KV_F16;   // --kv-dtype
    bool no_kv_sink = false;               // --no-kv-sink: LLMKV_ENGINE_NO_KV_SINK
    std::string json;
};

struct Ttft {
    double plain = 0, handle = 0, automatic = 0, loaded = 0;  // seconds to the first token
    double create = 0, save = 0, load = 0;                    // prefix handle / snapshot
};

int cmd_bench_prefix(const PrefixOptions &o, BenchReport &rep) {
    const std::string &model = o.model;
    const uint32_t threads = o.threads, question_tokens = 20, n_sessions = o.n_sessions,
                   shared_tokens = 1000;
    const std::vector<uint32_t> lengths =
        o.prefix_lengths.empty() ? std::vector<uint32_t>{o.system_tokens} : o.prefix_lengths;
    if (lengths.size() > 50 || o.decode_tokens < 1) {
        std::fprintf(stderr,
                     "llmkv bench prefix: at most 50 --prefix-lengths, and --decode-tokens >= 1\n");
        return 2;
    }
    Json &params = rep.params();
    params["threads"] = threads;
    params["prefix_lengths"] = lengths;
    params["question_tokens"] = question_tokens;
    params["sessions"] = n_sessions;
    params["shared_tokens"] = shared_tokens;
    params["decode_tokens"] = o.decode_tokens;
    params["ttft_reps"] = 3;
    params["kv_dtype"] = kv_dtype_name(o.dtype);
    params["kv_sink"] = o.no_kv_sink ? "off" : "default";
    const uint32_t sink_flags = o.no_kv_sink ? LLMKV_ENGINE_NO_KV_SINK : 0;
    llmkv_engine *plain = make(model, threads, o.dtype, sink_flags);
    llmkv_engine *cached = make(model, threads, o.dtype, LLMKV_ENGINE_PREFIX_CACHE | sink_flags);
    if (!plain || !cached) return 1;
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    llmkv_engine_get_info(cached, &info);
    rep.set_model(model, info);
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);

    // Best of 3: a session (from `from`, when given) appends `head` (the system prompt, or
    // nothing after a prefix) and a question; time to its first token. Every session asks a
    // question of its own (`way` and the rep choose it): none finds another's question blocks
    // in the cache, so each way computes what a new question costs it.
    auto best_ttft = [&](llmkv_engine *e, llmkv_prefix *from, const std::vector<int32_t> &head,
                         unsigned way) {
        double best = 1e9;
        for (unsigned r = 0; r < 3; ++r) {
            std::vector<int32_t> tokens = head;
            const std::vector<int32_t> question =
                filler_tokens(plain, question_tokens, 1000 + 10 * way + r);
            tokens.insert(tokens.end(), question.begin(), question.end());
            llmkv_session_params hp = sp;
            hp.prefix = from;
            llmkv_session *s = nullptr;
            llmkv_session_create(e, &hp, &s);
            llmkv_session_append(s, tokens.data(), tokens.size());
            best = std::min(best, time_to_first_token(e, s));
            llmkv_session_destroy(s);
        }
        return best;
    };
    // One system prompt of `system_tokens`: every way to its first token. Each length of a
    // sweep has its own text (salt), so no length finds another's blocks in the cache.
    auto measure = [&](uint32_t system_tokens, unsigned salt, Ttft &m) {
        std::vector<int32_t> system = filler_tokens(plain, system_tokens, salt);
        const unsigned way = 4 * salt;  // this length's questions
        // 1. Computed from scratch.
        m.plain = best_ttft(plain, nullptr, system, way);
        // 2. From a prefix handle.
        double t0 = now();
        llmkv_prefix *prefix = nullptr;
        if (llmkv_prefix_create(cached, system.data(), system.size(), &prefix) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv bench prefix: %s\n", llmkv_last_error());
            return false;
        }
        m.create = now() - t0;
        m.handle = best_ttft(cached, prefix, {}, way + 1);
        // 3. Found by the automatic cache (the handle's blocks are cached too; the system
        // prompt's last partial block is computed again, with the question).
        m.automatic = best_ttft(cached, nullptr, system, way + 2);
        // 4. Saved to a snapshot and loaded by a fresh engine (as the next launch would).
        std::string snap =
            (std::filesystem::temp_directory_path() /
             ("llmkv_bench_prefix_" + std::to_string(llmkv::os::process_id()) + ".snap"))
                .string();
        m.save = now();
        llmkv_prefix_save(prefix, snap.c_str());
        m.save = now() - m.save;
        llmkv_prefix_release(prefix);
        llmkv_engine *next = make(model, threads, o.dtype, LLMKV_ENGINE_PREFIX_CACHE | sink_flags);
        m.load = now();
        llmkv_prefix *loaded = nullptr;
        if (!next || llmkv_prefix_load(next, snap.c_str(), &loaded) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv bench prefix: load failed: %s\n", llmkv_last_error());
            return false;
        }
        m.load = now() - m.load;
        m.loaded = best_ttft(next, loaded, {}, way + 3);
        llmkv_prefix_release(loaded);
        llmkv_engine_destroy(next);
        std::remove(snap.c_str());
        return true;
    };
    auto report = [&](uint32_t system_tokens, const Ttft &m) {
        std::printf("llmkv bench prefix: %u-token system prompt, %u-token question\n\n",
                    system_tokens, question_tokens);
        std::printf("| time to first token | ms | vs computed |\n|---|---|---|\n");
        std::printf("| computed (no cache) | %.1f | 1.000 |\n", m.plain * 1e3);
        std::printf("| from a prefix handle | %.1f | %.3f |\n", m.handle * 1e3, m.handle / m.plain);
        std::printf("| automatic prefix cache | %.1f | %.3f |\n", m.automatic * 1e3,
                    m.automatic / m.plain);
        std::printf("| from a snapshot loaded by a fresh engine | %.1f | %.3f |\n", m.loaded * 1e3,
                    m.loaded / m.plain);
        std::printf("| (creating the handle once) | %.1f | |\n", m.create * 1e3);
        std::printf(
            "| (saving the snapshot / loading it) | %.1f / %.1f | %.3f load vs computing |\n\n",
            m.save * 1e3, m.load * 1e3, m.load / m.create);
        const std::pair<const char *, double> ways[] = {{"computed", m.plain},
                                                        {"prefix_handle", m.handle},
                                                        {"prefix_cache", m.automatic},
                                                        {"snapshot_loaded", m.loaded}};
        for (const auto &[how, t] : ways) {
            rep.add({{"bench", "ttft"},
                     {"how", how},
                     {"threads", info.n_threads},
                     {"prefix_tokens", system_tokens},
                     {"question_tokens", question_tokens},
                     {"ms", t * 1e3},
                     {"vs_computed", t / m.plain}});
        }
        rep.add({{"bench", "prefix_snapshot"},
                 {"threads", info.n_threads},
                 {"prefix_tokens", system_tokens},
                 {"create_ms", m.create * 1e3},
                 {"save_ms", m.save * 1e3},
                 {"load_ms", m.load * 1e3},
                 {"load_vs_create", m.load / m.create}});
    };
    std::vector<Ttft> results(lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
        if (!measure(lengths[i], i == 0 ? 1 : unsigned(40 + i), results[i])) return 1;
        if (i + 1 < lengths.size()) report(lengths[i], results[i]);  // a sweep reports as it goes
    }

    // 5. Bookkeeping when nothing is shared: decode speed with the cache on and off.
    const uint32_t gen = o.decode_tokens;
    auto decode_rate = [&](llmkv_engine *e, unsigned salt) {
        std::vector<int32_t> p = filler_tokens(plain, 64, 200 + salt);
        llmkv_session *s = nullptr;
        llmkv_session_create(e, &sp, &s);
        llmkv_session_append(s, p.data(), p.size());
        llmkv_session_generate(s, 1);
        llmkv_run(e, nullptr, nullptr);
        double t = now();
        llmkv_session_generate(s, gen);
        llmkv_run(e, nullptr, nullptr);
        double rate = gen / (now() - t);
        llmkv_session_destroy(s);
        return rate;
    };
    double on = 0, off = 0;
    for (unsigned r = 0; r < 3; ++r) {
        off = std::max(off, decode_rate(plain, 2 * r));
        on = std::max(on, decode_rate(cached, 2 * r + 1));
    }

    report(lengths.back(), results.back());
    std::printf(
        "decode with nothing shared: %.1f tok/s with the prefix cache, %.1f without (%.2f%% "
        "difference)\n\n",
        on, off, 100.0 * (off - on) / off);
    rep.add({{"bench", "decode_prefix_cache"},
             {"threads", info.n_threads},
             {"decode_tokens", gen},
             {"tok_s_cache_on", on},
             {"tok_s_cache_off", off},
             {"difference_pct", 100.0 * (off - on) / off}});

    // Memory: n sessions sharing a prefix vs unshared.
    llmkv_prefix *prefix = nullptr;
    std::vector<int32_t> shared = filler_tokens(plain, shared_tokens, 3);
    llmkv_prefix_create(cached, shared.data(), shared.size(), &prefix);
    std::vector<llmkv_session *> sessions;
    for (uint32_t i = 0; i < n_sessions; ++i) {
        llmkv_session_params hp = sp;
        hp.prefix = prefix;
        llmkv_session *s = nullptr;
        if (llmkv_session_create(cached, &hp, &s) != LLMKV_OK) break;
        std::vector<int32_t> suffix = filler_tokens(plain, question_tokens, 100 + i);
        llmkv_session_append(s, suffix.data(), suffix.size());
        sessions.push_back(s);
    }
    llmkv_run(cached, nullptr, nullptr);
    llmkv_stats st;
    st.struct_size = sizeof(st);
    llmkv_engine_get_stats(cached, &st);
    double per_token = double(info.kv_bytes_per_token_device);
    double unshared = double(sessions.size()) * (shared_tokens + question_tokens) * per_token;
    double ideal = (double(shared_tokens) + double(sessions.size()) * question_tokens) * per_token;
    std::printf("| %zu sessions on a %u-token prefix (+%u each) | MiB |\n|---|---|\n",
                sessions.size(), shared_tokens, question_tokens);
    std::printf("| KV used (sealed + tail blocks) | %.1f |\n", st.kv_bytes_used / 1048576.0);
    std::printf("| one prefix + the suffixes (ideal) | %.1f |\n", ideal / 1048576.0);
    std::printf("| unshared (every session its own copy) | %.1f |\n", unshared / 1048576.0);
    std::printf("(blocks used %u of %u, tail slots %u, tokens held by sessions %llu)\n",
                st.blocks_used, st.blocks_total, st.tail_blocks_used,
                (unsigned long long)st.tokens_stored);
    std::printf("\nused / ideal = %.2fx, unshared / used = %.1fx\n", st.kv_bytes_used / ideal,
                unshared / st.kv_bytes_used);
    rep.add({{"bench", "shared_prefix_memory"},
             {"kv", kv_dtype_name(llmkv_kv_dtype(info.kv_dtype_k))},
             {"sessions", sessions.size()},
             {"prefix_tokens", shared_tokens},
             {"suffix_tokens", question_tokens},
             {"kv_bytes_used", st.kv_bytes_used},
             {"ideal_bytes", ideal},
             {"unshared_bytes", unshared},
             {"blocks_used", st.blocks_used},
             {"blocks_total", st.blocks_total},
             {"tail_blocks_used", st.tail_blocks_used},
             {"tokens_stored", st.tokens_stored},
             {"used_vs_ideal", st.kv_bytes_used / ideal},
             {"unshared_vs_used", unshared / st.kv_bytes_used}});
    for (auto *s : sessions) llmkv_session_destroy(s);
    llmkv_prefix_release(prefix);
    llmkv_engine_destroy(plain);
    llmkv_engine_destroy(cached);
    return 0;
}

}  // namespace

Command add_bench_prefix(CLI::App &bench) {
    CLI::App *app = bench.add_subcommand(
        "prefix", "time to first token with and without prefix reuse, and the KV bytes shared");
    auto o = std::make_shared<PrefixOptions>();
    add_model_option(*app, &o->model);
    add_threads_option(*app, &o->threads);
    CLI::Option *system = add_uint_option(*app, "--system-tokens", &o->system_tokens,
                                          "length of the shared system prompt");
    add_uint_list_option(*app, "--prefix-lengths", &o->prefix_lengths,
                         "time to first token at each of these system-prompt lengths (a sweep)")
        ->excludes(system);
    add_uint_option(*app, "--sessions", &o->n_sessions, "sessions sharing it");
    add_uint_option(*app, "--decode-tokens", &o->decode_tokens,
                    "tokens of each decode run (prefix cache on/off)");
    add_kv_dtype_option(*app, "--kv-dtype", &o->dtype, "KV cache dtype (K and V)");
    app->add_flag("--no-kv-sink", o->no_kv_sink,
                  "without the KV sink (position 0 in fp16; on by default with int4 codecs)");
    add_json_option(*app, &o->json);
    return {app, [o] {
                BenchReport rep("bench prefix", o->json);
                if (!rep.check_writable("llmkv bench prefix")) return 2;
                return rep.finish(cmd_bench_prefix(*o, rep), "llmkv bench prefix");
            }};
}

}  // namespace llmkv_cli
