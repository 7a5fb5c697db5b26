// `llmkv bench batch`: what continuous batching buys on the CPU backend.
//  1. aggregate decode tokens/s with 1, 8, 32, 64 sessions generating together;
//  2. a mixed workload (prompts 10-1,500 tokens, outputs 16-256) with at most N sessions
//     running: continuous batching (a finished session's slot is refilled at once) against
//     static batching (a batch waits for its longest member before the next starts), with
//     the pool utilization (tokens stored / token slots held) sampled every step;
//  3. capacity: how many 1,000-token sessions (a shared 500-token prefix + 500 of their
//     own) fit a 64 MiB KV budget with int8 blocks, against contiguous fp16 allocation.
// With --verify, every session of the mixed workload is also run alone and compared token
// for token. Numbers only; nothing is asserted about speed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_json.h"
#include "cli_common.h"
#include "llmkv.h"

namespace llmkv_cli {

namespace {

struct Request {
    std::vector<int32_t> prompt;
    uint32_t max_new = 0;
    float temperature = 0.0f;
    uint64_t seed = 0;
};

struct Options {
    std::string model = default_model_path();
    uint32_t threads = 0;
    uint32_t sessions = 64;       // mixed workload size
    uint32_t concurrency = 16;    // running sessions at most, for continuous vs static
    uint32_t decode_tokens = 64;  // per session in the decode sweep
    bool verify = false;
    bool quick = false;                               // smaller workload (for a smoke run)
    std::vector<uint32_t> batch_sizes{1, 8, 32, 64};  // sessions decoding together, in the sweep
    std::vector<llmkv_kv_dtype> dtypes;  // --kv-dtypes: a decode sweep per KV dtype (default f16)
    bool decode_only = false;            // the decode sweep alone
    std::string json;
};

llmkv_engine *make_engine(const Options &o, uint64_t kv_bytes, llmkv_kv_dtype dtype, uint32_t flags,
                          uint32_t max_context = 0) {
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = o.model.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = o.threads;
    ep.kv_device_bytes = kv_bytes;
    ep.kv_dtype_k = dtype;
    ep.kv_dtype_v = dtype;
    ep.flags = flags;
    ep.max_context = max_context;
    llmkv_engine *e = nullptr;
    if (llmkv_engine_create(&ep, &e) != LLMKV_OK) {
        std::fprintf(stderr, "llmkv bench batch: %s\n", llmkv_last_error());
        std::exit(1);
    }
    return e;
}

llmkv_session *start(llmkv_engine *e, const Request &r) {
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    sp.sampling.temperature = r.temperature;
    sp.sampling.top_k = 40;
    sp.sampling.top_p = 0.95f;
    sp.sampling.seed = r.seed;
    llmkv_session *s = nullptr;
    if (llmkv_session_create(e, &sp, &s) != LLMKV_OK ||
        llmkv_session_append(s, r.prompt.data(), r.prompt.size()) != LLMKV_OK ||
        llmkv_session_generate(s, r.max_new) != LLMKV_OK) {
        std::fprintf(stderr, "llmkv bench batch: %s\n", llmkv_last_error());
        std::exit(1);
    }
    return s;
}

std::vector<int32_t> tokens_of(llmkv_session *s) {
    llmkv_session_info info;
    info.struct_size = sizeof(info);
    llmkv_session_get_info(s, &info);
    std::vector<int32_t> t(info.n_tokens);
    size_t n = 0;
    llmkv_session_get_tokens(s, t.data(), t.size(), &n);
    t.resize(n);
    return t;
}

// Prompts 10..1,500 tokens (log-uniform; the first two are the extremes), outputs 16..256,
// every other session sampled with a seed. The end-of-text tokens are stop tokens, so a
// session may end before its length.
std::vector<Request> mixed_workload(llmkv_engine *e, uint32_t n) {
    std::mt19937 rng(2026);
    std::vector<Request> out;
    for (uint32_t i = 0; i < n; ++i) {
        Request r;
        size_t len = i == 0   ? 1500
                     : i == 1 ? 10
                              : size_t(std::exp(std::uniform_real_distribution<double>(
                                    std::log(10.0), std::log(1500.0))(rng)));
        r.prompt = filler_tokens(e, len, 100 + i);
        r.max_new = i == 0 ? 256 : i == 1 ? 16 : 16 + rng() % 241;
        r.temperature = i % 2 ? 0.8f : 0.0f;
        r.seed = 1000 + i;
        out.push_back(std::move(r));
    }
    return out;
}

struct RunStats {
    double seconds = 0;
    uint64_t generated = 0;
    uint64_t prefilled = 0;
    uint64_t steps = 0;
    uint64_t preemptions = 0;
    double util_mean = 0, util_min = 1;
    std::vector<std::vector<int32_t>> tokens;
};

llmkv_stats stats_of(llmkv_engine *e) {
    llmkv_stats st;
    st.struct_size = sizeof(st);
    llmkv_engine_get_stats(e, &st);
    return st;
}

// Runs reqs with at most `concurrency` sessions at once. Continuous: a new session starts
// as soon as one finishes. Static: the next group starts when the whole group is done.
RunStats run_workload(llmkv_engine *e, const std::vector<Request> &reqs, uint32_t concurrency,
                      bool continuous) {
    RunStats rs;
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    llmkv_engine_get_info(e, &info);
    const double B = info.kv_block_tokens;
    llmkv_stats st0 = stats_of(e);
    std::vector<llmkv_session *> sessions(reqs.size(), nullptr);
    size_t next = 0, running = 0, done = 0;
    double util_sum = 0;
    uint64_t util_n = 0;
    std::vector<llmkv_event> ev(512);
    double t0 = now();
    while (done < reqs.size()) {
        bool may_start = continuous ? running < concurrency : running == 0;
        while (may_start && next < reqs.size() && running < concurrency) {
            sessions[next] = start(e, reqs[next]);
            ++next;
            ++running;
        }
        size_t n = 0;
        if (llmkv_step(e, ev.data(), ev.size(), &n) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv bench batch: step: %s\n", llmkv_last_error());
            std::exit(1);
        }
        for (size_t i = 0; i < n; ++i) {
            if (ev[i].kind == LLMKV_EVENT_DONE || ev[i].kind == LLMKV_EVENT_ERROR) {
                if (ev[i].kind == LLMKV_EVENT_ERROR)
                    std::fprintf(stderr, "llmkv bench batch: a session failed (%d)\n",
                                 ev[i].status);
                --running;
                ++done;
            }
        }
        llmkv_stats st = stats_of(e);
        if (st.blocks_used + st.tail_blocks_used > 0) {
            const double slots = (double(st.blocks_used) + double(st.tail_blocks_used)) * B;
            const double u = double(st.tokens_stored) / slots;
            util_sum += u;
            ++util_n;
            rs.util_min = std::min(rs.util_min, u);
        }
        // Finished sessions give their blocks back at once, as a server would.
        for (size_t i = 0; i < n; ++i) {
            if (ev[i].kind == LLMKV_EVENT_DONE || ev[i].kind == LLMKV_EVENT_ERROR) {
                auto it = std::find(sessions.begin(), sessions.end(), ev[i].session);
                if (it != sessions.end()) {
                    rs.tokens.resize(reqs.size());
                    rs.tokens[size_t(it - sessions.begin())] = tokens_of(*it);
                    llmkv_session_destroy(*it);
                    *it = nullptr;
                }
            }
        }
    }
    rs.seconds = now() - t0;
    llmkv_stats st1 = stats_of(e);
    rs.generated = st1.tokens_generated - st0.tokens_generated;
    rs.prefilled = st1.tokens_prefilled - st0.tokens_prefilled;
    rs.steps = st1.steps - st0.steps;
    rs.preemptions = st1.preemptions - st0.preemptions;
    rs.util_mean = util_n ? util_sum / double(util_n) : 0;
    return rs;
}

// Aggregate decode rate of n sessions generating `gen` tokens each after short prompts.
double decode_rate(llmkv_engine *e, uint32_t n, uint32_t gen) {
    std::vector<llmkv_session *> s;
    for (uint32_t i = 0; i < n; ++i) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        llmkv_session *x = nullptr;
        llmkv_session_create(e, &sp, &x);
        std::vector<int32_t> p = filler_tokens(e, 32 + i % 32, 300 + i);
        llmkv_session_append(x, p.data(), p.size());
        s.push_back(x);
    }
    llmkv_run(e, nullptr, nullptr);  // prompts prefilled (all but their last token)
    for (auto *x : s) llmkv_session_generate(x, 1);
    llmkv_run(e, nullptr, nullptr);  // the first token of each
    llmkv_stats st0 = stats_of(e);
    double t0 = now();
    for (auto *x : s) llmkv_session_generate(x, gen);
    llmkv_run(e, nullptr, nullptr);
    double dt = now() - t0;
    llmkv_stats st1 = stats_of(e);
    for (auto *x : s) llmkv_session_destroy(x);
    return double(st1.tokens_generated - st0.tokens_generated) / dt;
}

int cmd_bench_batch(Options o, BenchReport &rep) {
    if (o.quick) {
        o.sessions = std::min(o.sessions, 8u);
        o.decode_tokens = std::min(o.decode_tokens, 8u);
    }
    if (o.sessions < 2 || o.concurrency == 0) {
        std::fprintf(stderr, "llmkv bench batch: --sessions must be >= 2 and --concurrency >= 1\n");
        return 2;
    }
    if (o.batch_sizes.empty() ||
        std::find(o.batch_sizes.begin(), o.batch_sizes.end(), 0u) != o.batch_sizes.end()) {
        std::fprintf(stderr, "llmkv bench batch: --batch-sizes must be >= 1 each\n");
        return 2;
    }
    const bool dtype_sweep = !o.dtypes.empty();
    const std::vector<llmkv_kv_dtype> dtypes =
        dtype_sweep ? o.dtypes : std::vector<llmkv_kv_dtype>{LLMKV_KV_F16};
    std::vector<uint32_t> sizes;
    for (uint32_t n : o.batch_sizes) {
        if (o.quick && n > 8) break;
        sizes.push_back(n);
    }
    if (sizes.empty()) {
        std::fprintf(stderr, "llmkv bench batch: --quick runs batch sizes up to 8 only\n");
        return 2;
    }
    Json &p = rep.params();
    p["threads"] = o.threads;
    p["batch_sizes"] = sizes;
    p["decode_tokens"] = o.decode_tokens;
    p["kv_dtypes"] = Json::array();
    for (llmkv_kv_dtype d : dtypes) p["kv_dtypes"].push_back(kv_dtype_name(d));
    p["decode_only"] = o.decode_only;
    if (!o.decode_only) {
        p["sessions"] = o.sessions;
        p["concurrency"] = o.concurrency;
        p["verify"] = o.verify;
    }
    p["quick"] = o.quick;

    // 1. Decode sweep (the engine of the first KV dtype also runs the mixed workload).
    llmkv_engine *e = nullptr;
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    for (size_t di = 0; di < dtypes.size(); ++di) {
        llmkv_engine *d = make_engine(o, 0, dtypes[di], 0);
        llmkv_engine_get_info(d, &info);
        rep.set_model(o.model, info);
        if (di == 0) {
            std::printf("llmkv bench batch: %s, %u threads, %s kernels\n\n", info.model_name,
                        info.n_threads, info.backend_name);
        }
        if (dtype_sweep)
            std::printf("%sKV cache %s:\n\n", di ? "\n" : "", kv_dtype_name(dtypes[di]));
        // "vs 1" is against the first size of the sweep (1 unless --batch-sizes says otherwise).
        std::printf(
            "| sessions decoding together | aggregate tok/s | per session | vs %u "
            "|\n|---|---|---|---|\n",
            sizes[0]);
        double base = 0;
        for (uint32_t n : sizes) {
            double r = decode_rate(d, n, o.decode_tokens);
            if (base == 0) base = r;
            std::printf("| %u | %.1f | %.1f | %.2fx |\n", n, r, r / n, r / base);
            std::fflush(stdout);
            rep.add({{"bench", "decode_batch"},
                     {"kv", kv_dtype_name(dtypes[di])},
                     {"threads", info.n_threads},
                     {"batch", n},
                     {"decode_tokens", o.decode_tokens},
                     {"tok_s", r},
                     {"per_session_tok_s", r / n},
                     {"vs_first", r / base}});
        }
        if (di == 0) {
            e = d;
        } else {
            llmkv_engine_destroy(d);
        }
    }
    if (o.decode_only) {
        llmkv_engine_destroy(e);
        return 0;
    }
    if (dtype_sweep) {  // the rest runs with f16 KV, as it always has
        llmkv_engine_destroy(e);
        e = make_engine(o, 0, LLMKV_KV_F16, 0);
        llmkv_engine_get_info(e, &info);
    }

    // 2. Mixed workload, continuous vs static.
    std::vector<Request> reqs = mixed_workload(e, o.sessions);
    uint64_t prompt_total = 0, out_max = 0;
    for (const Request &r : reqs) {
        prompt_total += r.prompt.size();
        out_max += r.max_new;
    }
    std::printf(
        "\nmixed workload: %u sessions, %llu prompt tokens, up to %llu output tokens, at most %u "
        "running\n\n",
        o.sessions, (unsigned long long)prompt_total, (unsigned long long)out_max, o.concurrency);
    p["mixed_prompt_tokens"] = prompt_total;
    p["mixed_max_output_tokens"] = out_max;
    RunStats cont = run_workload(e, reqs, o.concurrency, true);
    RunStats stat = run_workload(e, reqs, o.concurrency, false);
    std::printf(
        "| batching | seconds | generated tok/s | prompt+generated tok/s | steps | pool "
        "utilization mean / min |\n"
        "|---|---|---|---|---|---|\n");
    for (auto [name, r] :
         {std::pair<const char *, RunStats *>{"continuous", &cont}, {"static", &stat}}) {
        std::printf("| %s | %.1f | %.1f | %.1f | %llu | %.3f / %.3f |\n", name, r->seconds,
                    r->generated / r->seconds, (r->generated + r->prefilled) / r->seconds,
                    (unsigned long long)r->steps, r->util_mean, r->util_min);
        rep.add({{"bench", "mixed_workload"},
                 {"batching", name},
                 {"kv", "f16"},
                 {"threads", info.n_threads},
                 {"sessions", o.sessions},
                 {"concurrency", o.concurrency},
                 {"seconds", r->seconds},
                 {"generated_tokens", r->generated},
                 {"prefilled_tokens", r->prefilled},
                 {"generated_tok_s", r->generated / r->seconds},
                 {"total_tok_s", (r->generated + r->prefilled) / r->seconds},
                 {"steps", r->steps},
                 {"pool_utilization_mean", r->util_mean},
                 {"pool_utilization_min", r->util_min}});
    }
    std::printf("\ncontinuous / static: %.2fx generated tokens/s\n",
                (cont.generated / cont.seconds) / (stat.generated / stat.seconds));
    bool same = cont.tokens == stat.tokens;
    std::printf("continuous and static runs give identical tokens: %s\n", same ? "yes" : "NO");
    int status = same ? 0 : 1;
    rep.add({{"bench", "mixed_summary"},
             {"continuous_vs_static",
              (cont.generated / cont.seconds) / (stat.generated / stat.seconds)},
             {"identical_tokens", same}});

    if (o.verify) {
        // Every session alone, on the same engine, against the continuous run.
        size_t equal = 0;
        for (size_t i = 0; i < reqs.size(); ++i) {
            llmkv_session *s = start(e, reqs[i]);
            llmkv_run(e, nullptr, nullptr);
            equal += tokens_of(s) == cont.tokens[i] ? 1 : 0;
            llmkv_session_destroy(s);
        }
        std::printf("solo runs equal to the batched run, token for token: %zu of %zu\n", equal,
                    reqs.size());
        if (equal != reqs.size()) status = 1;
        rep.add({{"bench", "verify_solo"}, {"sessions", reqs.size()}, {"equal", equal}});
        // And with a pool that fits a quarter of the workload (preemption by recompute).
        uint64_t tokens_total = 0;
        for (const Request &r : reqs) tokens_total += r.prompt.size() + r.max_new;
        const uint64_t block_bytes = info.kv_bytes_per_token_device * info.kv_block_tokens;
        uint64_t quarter_blocks = std::max<uint64_t>(tokens_total / info.kv_block_tokens / 4,
                                                     (1500 + 256) / info.kv_block_tokens + 2);
        llmkv_engine *small = make_engine(o, quarter_blocks * block_bytes, LLMKV_KV_F16, 0);
        RunStats q = run_workload(small, reqs, o.sessions, true);
        size_t q_equal = 0;
        for (size_t i = 0; i < reqs.size(); ++i) q_equal += q.tokens[i] == cont.tokens[i] ? 1 : 0;
        std::printf(
            "pool of %llu blocks (a quarter of the workload's %llu), all %u sessions at once: %.1f "
            "s, %llu "
            "preemptions, %zu of %zu equal to the unconstrained run\n",
            (unsigned long long)quarter_blocks,
            (unsigned long long)(tokens_total / info.kv_block_tokens), o.sessions, q.seconds,
            (unsigned long long)q.preemptions, q_equal, reqs.size());
        if (q_equal != reqs.size()) status = 1;
        rep.add({{"bench", "verify_small_pool"},
                 {"pool_blocks", quarter_blocks},
                 {"workload_blocks", tokens_total / info.kv_block_tokens},
                 {"sessions", o.sessions},
                 {"seconds", q.seconds},
                 {"preemptions", q.preemptions},
                 {"equal", q_equal}});
        llmkv_engine_destroy(small);
    }
    llmkv_engine_destroy(e);

    // 3. Capacity of a 64 MiB budget: 1,000-token sessions, a shared 500-token prefix, int8.
    {
        const uint64_t budget = 64ull << 20;
        llmkv_engine *c = make_engine(o, budget, LLMKV_KV_INT8, LLMKV_ENGINE_PREFIX_CACHE);
        llmkv_engine_info ci;
        ci.struct_size = sizeof(ci);
        llmkv_engine_get_info(c, &ci);
        std::vector<int32_t> shared = filler_tokens(c, 500, 5);
        llmkv_prefix *prefix = nullptr;
        if (llmkv_prefix_create(c, shared.data(), shared.size(), &prefix) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv bench batch: %s\n", llmkv_last_error());
            return 1;
        }
        std::vector<llmkv_session *> sessions;
        uint32_t fitted = 0;
        for (uint32_t i = 0; i < 1000; ++i) {
            llmkv_session_params sp;
            llmkv_session_params_init(&sp);
            sp.prefix = prefix;
            llmkv_session *s = nullptr;
            if (llmkv_session_create(c, &sp, &s) != LLMKV_OK) break;
            std::vector<int32_t> own = filler_tokens(c, 500, 1000 + i);
            llmkv_session_append(s, own.data(), own.size());
            llmkv_session_generate(s, 1);  // the 1,000th token's KV is computed too
            llmkv_run(c, nullptr, nullptr);
            llmkv_stats st = stats_of(c);
            if (st.preemptions > 0) {  // it only fitted by taking another session's KV
                llmkv_session_destroy(s);
                break;
            }
            sessions.push_back(s);
            fitted = uint32_t(sessions.size());
        }
        const double fp16_token = double(ci.n_layers) * ci.n_kv_heads * ci.head_dim * 2 * 2;
        std::printf(
            "\n64 MiB of KV, int8 blocks, sessions of a shared 500-token prefix + 500 own tokens: "
            "%u sessions "
            "resident\n\n| contiguous fp16 allocation per session | sessions in 64 MiB | llmkv / "
            "contiguous |\n"
            "|---|---|---|\n",
            fitted);
        rep.add({{"bench", "capacity"},
                 {"kv", "int8"},
                 {"pool_bytes", budget},
                 {"shared_prefix_tokens", 500},
                 {"own_tokens", 500},
                 {"sessions_resident", fitted}});
        for (uint32_t ctx : {1000u, 2048u, ci.n_ctx_train}) {
            uint64_t per = uint64_t(double(ctx) * fp16_token);
            uint64_t n = budget / per;
            rep.add({{"bench", "capacity_contiguous_f16"},
                     {"context", ctx},
                     {"pool_bytes", budget},
                     {"bytes_per_session", per},
                     {"sessions", n},
                     {"llmkv_vs_contiguous", n ? Json(fitted / double(n)) : Json(nullptr)}});
            std::printf(
                "| %u-token context (%.1f MiB) | %llu | %s |\n", ctx, per / 1048576.0,
                (unsigned long long)n,
                n ? (std::to_string(fitted / double(n)).substr(0, 5) + "x").c_str() : "(none fit)");
        }
        for (auto *s : sessions) llmkv_session_destroy(s);
        llmkv_prefix_release(prefix);
        llmkv_engine_destroy(c);
    }
    return status;
}

}  // namespace

Command add_bench_batch(CLI::App &bench) {
    CLI::App *app = bench.add_subcommand(
        "batch",
        "decode tok/s at batch 1/8/32/64, continuous vs static batching, utilization, capacity");
    auto o = std::make_shared<Options>();
    add_model_option(*app, &o->model);
    add_threads_option(*app, &o->threads);
    add_uint_option(*app, "--sessions", &o->sessions, "sessions in the mixed workload (>= 2)");
    add_uint_option(*app, "--concurrency", &o->concurrency, "running sessions at most (>= 1)");
    add_uint_option(*app, "--decode-tokens", &o->decode_tokens,
                    "tokens per session in the decode sweep");
    app->add_flag("--verify", o->verify, "check that batched output matches sessions run alone");
    app->add_flag("--quick", o->quick, "a smaller workload, for a smoke run");
    add_uint_list_option(*app, "--batch-sizes", &o->batch_sizes,
                         "sessions decoding together in the decode sweep");
    add_kv_dtype_list_option(*app, "--kv-dtypes", &o->dtypes,
                             "a decode sweep per KV dtype (default f16; the rest always runs f16)");
    app->add_flag("--decode-only", o->decode_only,
                  "run the decode sweep alone (no mixed workload, no capacity)");
    add_json_option(*app, &o->json);
    return {app, [o] {
                BenchReport rep("bench batch", o->json);
                if (!rep.check_writable("llmkv bench batch")) return 2;
                return rep.finish(cmd_bench_batch(*o, rep), "llmkv bench batch");
            }};
}

}  // namespace llmkv_cli
