// `llmkv bench`: prefill and decode speed of one session on the CPU backend, the machine's
// memory read bandwidth, and the decode roofline (bandwidth / bytes read per token).
// Numbers only; nothing is asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_json.h"
#include "cli_common.h"
#include "llmkv.h"
#include "model/gguf.h"
#include "model/llama_model.h"

namespace llmkv_cli {

namespace {

// Read bandwidth in GB/s: each thread sums its own slice of a buffer much larger than the
// caches; the best of several passes.
double read_bandwidth(unsigned threads) {
    const size_t bytes = size_t(512) << 20;
    std::vector<uint64_t> buf(bytes / 8);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
    double best = 0;
    for (int pass = 0; pass < 5; ++pass) {
        std::vector<uint64_t> sums(threads);
        double t0 = now();
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t) {
            pool.emplace_back([&, t] {
                size_t n = buf.size() / threads, b = t * n;
                uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (size_t i = b; i + 4 <= b + n; i += 4) {
                    s0 += buf[i];
                    s1 += buf[i + 1];
                    s2 += buf[i + 2];
                    s3 += buf[i + 3];
                }
                sums[t] = s0 + s1 + s2 + s3;
            });
        }
        for (auto &th : pool) th.join();
        double dt = now() - t0;
        volatile uint64_t sink = 0;
        for (auto s : sums) sink = sink + s;
        best = std::max(best, bytes / dt / 1e9);
    }
    return best;
}

struct RunResult {
    double prefill_tps = 0;
    double decode_tps = 0;
    uint64_t kv_bytes = 0;   // KV in use (sealed + tail blocks) once the prompt is computed
    uint32_t kv_tokens = 0;  // tokens whose KV that is
};

// Prefills n_prompt tokens, then decodes n_gen tokens (greedy, no stop) and times both.
RunResult run_once(llmkv_engine *e, uint32_t n_prompt, uint32_t n_gen) {
    RunResult r;
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    llmkv_session *s = nullptr;
    if (llmkv_session_create(e, &sp, &s) != LLMKV_OK) return r;
    // Deterministic filler: the ids of ordinary text tokens, repeated.
    const char *text =
        " the quick brown fox jumps over the lazy dog while the river runs to the sea";
    std::vector<int32_t> unit(64);
    size_t n = 0;
    llmkv_tokenize(e, text, std::strlen(text), 0, unit.data(), unit.size(), &n);
    unit.resize(n);
    std::vector<int32_t> prompt;
    while (prompt.size() < n_prompt) prompt.push_back(unit[prompt.size() % unit.size()]);
    llmkv_session_append(s, prompt.data(), prompt.size() - 1);
    double t0 = now();
    llmkv_event ev[8];
    while (llmkv_step(e, ev, 8, &n) == LLMKV_OK && n == 0 && llmkv_pending_events(e) == 0) {
        llmkv_session_info info;
        info.struct_size = sizeof(info);
        llmkv_session_get_info(s, &info);
        if (info.n_cached + 1 >= info.n_tokens) break;
    }
    // The last prompt token and the first sampled token come with generate().
    llmkv_session_append(s, prompt.data() + prompt.size() - 1, 1);
    llmkv_session_generate(s, 1);
    llmkv_run(e, nullptr, nullptr);
    double t1 = now();
    r.prefill_tps = n_prompt / (t1 - t0);
    {
        llmkv_stats st;
        st.struct_size = sizeof(st);
        llmkv_engine_get_stats(e, &st);
        llmkv_session_info info;
        info.struct_size = sizeof(info);
        llmkv_session_get_info(s, &info);
        r.kv_bytes = st.kv_bytes_used;
        r.kv_tokens = info.n_cached;
    }
    llmkv_session_generate(s, n_gen);
    uint32_t got = 0;
    double t2 = now();
    bool done = false;
    while (!done) {
        if (llmkv_step(e, ev, 8, &n) != LLMKV_OK) break;
        for (size_t i = 0; i < n; ++i) {
            if (ev[i].kind == LLMKV_EVENT_TOKEN) ++got;
            if (ev[i].kind != LLMKV_EVENT_TOKEN) done = true;
        }
    }
    double t3 = now();
    r.decode_tps = got / (t3 - t2);
    llmkv_session_destroy(s);
    return r;
}

struct BenchOptions {
    std::string model;
    std::vector<uint32_t> threads_list;
    uint32_t n_prompt = 128, n_gen = 64, context = 2048, reps = 3;
    llmkv_kv_dtype dtype = LLMKV_KV_F16;
    std::vector<uint32_t> contexts;      // --contexts: long decode runs at each (else --context)
    std::vector<llmkv_kv_dtype> dtypes;  // --kv-dtypes: one table each (else --kv-dtype)
    bool no_kv_sink = false;             // --no-kv-sink: LLMKV_ENGINE_NO_KV_SINK
    std::string json;
};

// Weight bytes one decoded token reads: of a mixture of experts, all but the experts it was
// not routed to (read from the file's header; the engine's info has the total only).
uint64_t weights_read_per_token(const std::string &path, const llmkv_engine_info &info) {
    try {
        std::shared_ptr<llmkv::GgufFile> file(llmkv::GgufFile::open(path));
        return llmkv::LlamaModel::load(file)->active_weight_bytes();
    } catch (const std::exception &) {
        return info.weight_bytes;
    }
}

int cmd_bench(BenchOptions o, BenchReport &rep) {
    const std::string &model = o.model;
    std::vector<uint32_t> &threads_list = o.threads_list;
    const uint32_t n_prompt = o.n_prompt, n_gen = o.n_gen, context = o.context, reps = o.reps;
    if (threads_list.empty()) threads_list = {1, 2};
    if (n_prompt < 2 || n_gen < 2 || reps < 1) {
        std::fprintf(stderr, "llmkv bench: --prompt-tokens and --gen-tokens must be >= 2\n");
        return 2;
    }
    const bool dtype_sweep = !o.dtypes.empty();
    const std::vector<llmkv_kv_dtype> dtypes =
        dtype_sweep ? o.dtypes : std::vector<llmkv_kv_dtype>{o.dtype};
    const std::vector<uint32_t> contexts =
        o.contexts.empty() ? std::vector<uint32_t>{context} : o.contexts;
    for (uint32_t c : contexts) {
        if (c < 2) {
            std::fprintf(stderr, "llmkv bench: contexts must be >= 2\n");
            return 2;
        }
    }
    const uint32_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
    Json &p = rep.params();
    p["threads"] = threads_list;
    p["prompt_tokens"] = n_prompt;
    p["gen_tokens"] = n_gen;
    p["contexts"] = contexts;
    p["reps"] = reps;
    p["kv_sink"] = o.no_kv_sink ? "off" : "default";
    p["kv_dtypes"] = Json::array();
    for (llmkv_kv_dtype d : dtypes) p["kv_dtypes"].push_back(kv_dtype_name(d));

    std::printf("llmkv bench: %s\n", model.c_str());
    std::printf("memory read bandwidth: ");
    std::fflush(stdout);
    std::vector<double> bw;
    for (uint32_t t : threads_list) {
        bw.push_back(read_bandwidth(t));
        std::printf("%u thread%s %.1f GB/s  ", t, t > 1 ? "s" : "", bw.back());
        rep.add({{"bench", "read_bandwidth"}, {"threads", t}, {"gb_s", bw.back()}});
    }
    std::printf("\n\n");
    uint64_t read_per_token = 0;  // weights_read_per_token, read from the file once
    for (llmkv_kv_dtype dtype : dtypes) {
        if (dtype_sweep) std::printf("KV cache %s:\n\n", kv_dtype_name(dtype));
        std::printf("| threads | prefill %u tok/s | decode tok/s (ctx %u) |", n_prompt, n_prompt);
        for (uint32_t c : contexts) std::printf(" decode tok/s (ctx %u) |", c);
        std::printf(" roofline tok/s (short) | %% of roofline |\n");
        std::printf("|---|---|---|");
        for (size_t i = 0; i < contexts.size(); ++i) std::printf("---|");
        std::printf("---|---|\n");
        for (size_t ti = 0; ti < threads_list.size(); ++ti) {
            llmkv_engine_params ep;
            llmkv_engine_params_init(&ep);
            ep.model_path = model.c_str();
            ep.backend = LLMKV_BACKEND_CPU;
            ep.n_threads = threads_list[ti];
            ep.kv_dtype_k = dtype;
            ep.kv_dtype_v = dtype;
            ep.flags = 0;  // no prefix cache: every repetition really computes its prompt
            if (o.no_kv_sink) ep.flags |= LLMKV_ENGINE_NO_KV_SINK;
            ep.max_context = std::max(max_ctx + n_gen + 8, n_prompt + n_gen + 8);
            llmkv_engine *e = nullptr;
            if (llmkv_engine_create(&ep, &e) != LLMKV_OK) {
                std::fprintf(stderr, "llmkv bench: %s\n", llmkv_last_error());
                return 1;
            }
            llmkv_engine_info info;
            info.struct_size = sizeof(info);
            llmkv_engine_get_info(e, &info);
            rep.set_model(model, info);
            // The engine caps max_context at the model's trained context: a run that cannot fit
            // its prompt and the tokens it decodes is refused here instead of never finishing.
            if (std::max(max_ctx, n_prompt) + n_gen + 1 > info.max_context) {
                std::fprintf(stderr,
                             "llmkv bench: a %u-token context plus %u generated tokens exceeds the "
                             "session limit of %u tokens (the model's context); use a shorter "
                             "--context / --prompt-tokens\n",
                             std::max(max_ctx, n_prompt), n_gen, info.max_context);
                llmkv_engine_destroy(e);
                return 2;
            }
            const char *kv = kv_dtype_name(dtype);
            const uint32_t threads = info.n_threads;
            RunResult best_short;
            for (uint32_t r = 0; r < reps; ++r) {
                RunResult a = run_once(e, n_prompt, n_gen);
                best_short.prefill_tps = std::max(best_short.prefill_tps, a.prefill_tps);
                best_short.decode_tps = std::max(best_short.decode_tps, a.decode_tps);
                best_short.kv_bytes = a.kv_bytes;
                best_short.kv_tokens = a.kv_tokens;
            }
            std::vector<RunResult> longs;
            for (uint32_t c : contexts) longs.push_back(run_once(e, c, n_gen));
            // Bytes read per decoded token at short context: the weights a token reads (all, or
            // of a mixture of experts all but the unchosen experts') plus the session's KV.
            if (!read_per_token) read_per_token = weights_read_per_token(model, info);
            double bytes = double(read_per_token) +
                           double(info.kv_bytes_per_token_device) * (n_prompt + n_gen / 2);
            double roofline = bw[ti] * 1e9 / bytes;
            std::printf("| %u | %.1f | %.1f |", threads_list[ti], best_short.prefill_tps,
                        best_short.decode_tps);
            for (const RunResult &l : longs) std::printf(" %.1f |", l.decode_tps);
            std::printf(" %.1f | %.0f%% |\n", roofline, 100.0 * best_short.decode_tps / roofline);
            std::fflush(stdout);

            rep.add({{"bench", "prefill"},
                     {"kv", kv},
                     {"threads", threads},
                     {"prompt_tokens", n_prompt},
                     {"reps", reps},
                     {"tok_s", best_short.prefill_tps}});
            // The decode records: the short run (best of --reps) and one run at each context.
            rep.add({{"bench", "decode"},
                     {"kv", kv},
                     {"threads", threads},
                     {"context", n_prompt},
                     {"run", "short"},
                     {"gen_tokens", n_gen},
                     {"tok_s", best_short.decode_tps}});
            for (size_t ci = 0; ci < contexts.size(); ++ci) {
                rep.add({{"bench", "decode"},
                         {"kv", kv},
                         {"threads", threads},
                         {"context", contexts[ci]},
                         {"run", "long"},
                         {"gen_tokens", n_gen},
                         {"tok_s", longs[ci].decode_tps},
                         {"prefill_tok_s", longs[ci].prefill_tps}});
            }
            rep.add({{"bench", "roofline"},
                     {"kv", kv},
                     {"threads", threads},
                     {"context", n_prompt},
                     {"bytes_per_token_read", bytes},
                     {"read_gb_s", bw[ti]},
                     {"tok_s", roofline},
                     {"decode_pct_of_roofline", 100.0 * best_short.decode_tps / roofline}});
            if (ti == 0) {
                // The KV one session holds (measured after its prompt), per codec and context:
                // the same for every thread count, so recorded once.
                auto footprint = [&](uint32_t context_tokens, const RunResult &r) {
                    rep.add(
                        {{"bench", "kv_footprint"},
                         {"kv", kv},
                         {"context", context_tokens},
                         {"kv_tokens", r.kv_tokens},
                         {"session_kv_bytes", r.kv_bytes},
                         {"bytes_per_token", r.kv_tokens ? double(r.kv_bytes) / r.kv_tokens : 0.0},
                         {"sealed_bytes_per_token", info.kv_bytes_per_token_device},
                         {"tail_bytes_per_token", info.kv_bytes_per_token_tail},
                         {"block_tokens", info.kv_block_tokens},
                         {"residual_tokens", info.kv_residual_tokens}});
                };
                footprint(n_prompt, best_short);
                for (size_t ci = 0; ci < contexts.size(); ++ci) footprint(contexts[ci], longs[ci]);
            }
            llmkv_engine_destroy(e);
        }
        if (dtype_sweep) std::printf("\n");
    }
    std::printf(
        "\nweights are read once per decoded token (a mixture of experts: those of the chosen "
        "experts); roofline = read bandwidth / (weight bytes read + KV "
        "bytes of the context)\n");
    return 0;
}

}  // namespace

Command add_bench(CLI::App &parent) {
    CLI::App *app = parent.add_subcommand("bench",
                                          "prefill/decode tok/s, memory bandwidth and the decode "
                                          "roofline; or one of the benchmarks below");
    app->require_subcommand(0, 1);
    auto o = std::make_shared<BenchOptions>();
    add_model_option(*app, &o->model);
    // Repeatable: `-t 1 -t 2` measures each thread count in turn (default 1 and 2).
    add_uint_option(*app, "-t,--threads", &o->threads_list,
                    "worker threads; repeat to compare (default: -t 1 -t 2)")
        ->type_name("THREADS");
    add_uint_option(*app, "--prompt-tokens", &o->n_prompt, "prompt length of the prefill run");
    add_uint_option(*app, "--gen-tokens", &o->n_gen, "tokens decoded per run");
    CLI::Option *context =
        add_uint_option(*app, "--context", &o->context, "context length of the long decode run");
    add_uint_list_option(*app, "--contexts", &o->contexts,
                         "long decode runs at each of these contexts (a sweep)")
        ->excludes(context);
    add_uint_option(*app, "--reps", &o->reps, "repetitions of the short run (the best counts)");
    CLI::Option *dtype =
        add_kv_dtype_option(*app, "--kv-dtype", &o->dtype, "KV cache dtype (K and V)");
    add_kv_dtype_list_option(*app, "--kv-dtypes", &o->dtypes,
                             "one table per KV dtype (a sweep, e.g. f16,int8,int4)")
        ->excludes(dtype);
    app->add_flag("--no-kv-sink", o->no_kv_sink,
                  "without the KV sink (position 0 in fp16; on by default with int4 codecs)");
    add_json_option(*app, &o->json);
    return {app, [o] {
                BenchReport rep("bench", o->json);
                if (!rep.check_writable("llmkv bench")) return 2;
                return rep.finish(cmd_bench(*o, rep), "llmkv bench");
            }};
}

}  // namespace llmkv_cli
