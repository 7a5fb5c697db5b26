// `llmkv bench offload`: what the host tier buys on this machine.
//  1. resuming a parked 1,000-token session (host -> device copy) against recomputing the
//     same 1,000 tokens;
//  2. copy bandwidth of parking/resuming (bytes moved / copy-engine time) against plain
//     memcpy of the same bytes;
//  3. many sessions on a device budget that fits a quarter of them: swapping against
//     recomputation (host tier on / off), same tokens.
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

namespace llmkv_cli {

namespace {

// Remembers the status of the first ERROR event of a run.
void record_error(const llmkv_event *ev, void *user_data) {
    auto *status = static_cast<llmkv_status *>(user_data);
    if (ev->kind == LLMKV_EVENT_ERROR && *status == LLMKV_OK) *status = ev->status;
}

llmkv_engine *make_engine(const std::string &model, uint32_t threads, uint64_t device_bytes,
                          uint64_t host_bytes) {
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = model.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = threads;
    ep.kv_device_bytes = device_bytes;
    ep.kv_host_bytes = host_bytes;
    ep.kv_dtype_k = LLMKV_KV_INT8;
    ep.kv_dtype_v = LLMKV_KV_INT8;
    ep.flags = 0;  // no prefix cache: recomputation really recomputes
    llmkv_engine *e = nullptr;
    if (llmkv_engine_create(&ep, &e) != LLMKV_OK) {
        std::fprintf(stderr, "llmkv bench offload: %s\n", llmkv_last_error());
        std::exit(1);
    }
    return e;
}

llmkv_stats stats_of(llmkv_engine *e) {
    llmkv_stats st;
    st.struct_size = sizeof(st);
    llmkv_engine_get_stats(e, &st);
    return st;
}

double memcpy_gbs(size_t bytes) {
    std::vector<uint8_t> a(bytes, 1), b(bytes, 0);
    double best = 1e9;
    for (int r = 0; r < 5; ++r) {
        double t = now();
        std::memcpy(b.data(), a.data(), bytes);
        best = std::min(best, now() - t);
    }
    volatile uint8_t sink = b[bytes / 2];
    (void)sink;
    return bytes / best / 1e9;
}

std::vector<int32_t> tokens_of(llmkv_session *s) {
    std::vector<int32_t> t(8192);
    size_t n = 0;
    llmkv_session_get_tokens(s, t.data(), t.size(), &n);
    t.resize(n);
    return t;
}

struct OffloadOptions {
    std::string model;
    uint32_t threads = 0, context = 1000, sessions = 16;
    std::string json;
};

int cmd_bench_offload(const OffloadOptions &o, BenchReport &rep) {
    const std::string &model = o.model;
    const uint32_t threads = o.threads, context = o.context, sessions = o.sessions;
    if (context < 16 || sessions < 2) {
        std::fprintf(stderr, "llmkv bench offload: --context must be >= 16 and --sessions >= 2\n");
        return 2;
    }
    rep.params()["threads"] = threads;
    rep.params()["context"] = context;
    rep.params()["sessions"] = sessions;
    rep.params()["kv"] = "int8";

    // 1 + 2: park and resume one session against recomputing it.
    llmkv_engine *e = make_engine(model, threads, 0, 256ull << 20);
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    llmkv_engine_get_info(e, &info);
    rep.set_model(model, info);
    std::vector<int32_t> prompt = filler_tokens(e, context, 7);
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    double best_recompute = 1e9, best_park = 1e9, best_resume = 1e9;
    uint64_t moved = 0, copy_ns = 0;
    for (int r = 0; r < 3; ++r) {
        llmkv_session *s = nullptr;
        llmkv_session_create(e, &sp, &s);
        llmkv_session_append(s, prompt.data(), prompt.size());
        double t0 = now();
        llmkv_run(e, nullptr, nullptr);  // KV of context - 1 tokens
        best_recompute = std::min(best_recompute, now() - t0);
        llmkv_stats st0 = stats_of(e);
        t0 = now();
        if (llmkv_session_park(s) != LLMKV_OK) {
            std::fprintf(stderr, "llmkv bench offload: park: %s\n", llmkv_last_error());
            return 1;
        }
        best_park = std::min(best_park, now() - t0);  // the call; the copy runs on the copy thread
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        llmkv_event ev[4];
        size_t n_ev = 0;
        llmkv_step(e, ev, 4, &n_ev);  // reaps the finished copy: device blocks return to the pool
        llmkv_stats st1 = stats_of(e);
        // Resume, timed through the synchronous path: fork brings s back to the device
        // (host -> device copy) before sharing its blocks with the new session.
        t0 = now();
        llmkv_session *f = nullptr;
        llmkv_session_fork(s, &f);
        best_resume = std::min(best_resume, now() - t0);
        llmkv_stats st2 = stats_of(e);
        moved =
            (st1.bytes_to_host - st0.bytes_to_host) + (st2.bytes_to_device - st1.bytes_to_device);
        copy_ns = st2.copy_ns - st0.copy_ns;
        llmkv_session_destroy(f);
        llmkv_session_destroy(s);
    }
    const double copy_gbs = copy_ns ? moved / (copy_ns * 1e-9) / 1e9 : 0;
    const double plain_gbs =
        memcpy_gbs(size_t(256) << 20);  // the machine's memcpy, beyond the caches
    std::printf(
        "llmkv bench offload: %s, %u threads, int8 KV, %u-token session (%.1f MiB of KV)\n\n",
        info.model_name, info.n_threads, context, moved / 2 / 1048576.0);
    std::printf("| operation | ms | vs recompute |\n|---|---|---|\n");
    std::printf("| recompute %u tokens | %.2f | 1.000 |\n", context - 1, best_recompute * 1e3);
    std::printf("| park call (asynchronous copy started) | %.2f | %.3f |\n", best_park * 1e3,
                best_park / best_recompute);
    std::printf("| resume (host -> device, synchronous, incl. a fork) | %.2f | %.3f |\n",
                best_resume * 1e3, best_resume / best_recompute);
    std::printf(
        "\ncopy engine: %.1f GB/s over %.1f MiB moved; memcpy of 256 MiB: %.1f GB/s (%.2fx)\n\n",
        copy_gbs, moved / 1048576.0, plain_gbs, copy_gbs / plain_gbs);
    rep.add({{"bench", "park_resume"},
             {"kv", "int8"},
             {"threads", info.n_threads},
             {"context", context},
             {"kv_bytes", moved / 2},
             {"recompute_ms", best_recompute * 1e3},
             {"park_call_ms", best_park * 1e3},
             {"resume_ms", best_resume * 1e3},
             {"park_vs_recompute", best_park / best_recompute},
             {"resume_vs_recompute", best_resume / best_recompute}});
    rep.add({{"bench", "copy_bandwidth"},
             {"bytes_moved", moved},
             {"copy_gb_s", copy_gbs},
             {"memcpy_gb_s", plain_gbs},
             {"memcpy_bytes", uint64_t(256) << 20},
             {"copy_vs_memcpy", copy_gbs / plain_gbs}});
    llmkv_engine_destroy(e);

    // 3. Quarter device budget: swap against recompute.
    std::vector<std::vector<int32_t>> prompts;
    {
        llmkv_engine *t = make_engine(model, threads, 64ull << 20, 0);
        for (uint32_t i = 0; i < sessions; ++i)
            prompts.push_back(filler_tokens(t, 200 + 40 * (i % 8), 100 + i));
        llmkv_engine_destroy(t);
    }
    const uint64_t per_token = info.kv_bytes_per_token_device;
    uint64_t total_tokens = 0;
    for (auto &p : prompts) total_tokens += p.size() + 64;
    const uint64_t device =
        std::max<uint64_t>(total_tokens * per_token / 4, (200 + 40 * 7 + 64 + 32) * per_token * 2);
    std::printf(
        "| %u sessions (64 new tokens each), device budget %.1f MiB (a quarter) | seconds | steps "
        "| preemptions | swaps | "
        "parks | tokens prefilled | to host MiB | to device MiB "
        "|\n|---|---|---|---|---|---|---|---|---|\n",
        sessions, device / 1048576.0);
    std::vector<std::vector<int32_t>> results[2];
    for (int with_host = 1; with_host >= 0; --with_host) {
        llmkv_engine *q = make_engine(model, threads, device, with_host ? (256ull << 20) : 0);
        std::vector<llmkv_session *> ss;
        for (uint32_t i = 0; i < sessions; ++i) {
            llmkv_session *s = nullptr;
            llmkv_session_create(q, &sp, &s);
            llmkv_session_append(s, prompts[i].data(), prompts[i].size());
            llmkv_session_generate(s, 64);
            ss.push_back(s);
        }
        double t0 = now();
        llmkv_run(q, nullptr, nullptr);
        double dt = now() - t0;
        llmkv_stats st = stats_of(q);
        std::printf("| host tier %s | %.2f | %llu | %llu | %llu | %llu | %llu | %.1f | %.1f |\n",
                    with_host ? "on (swap)" : "off (recompute)", dt, (unsigned long long)st.steps,
                    (unsigned long long)st.preemptions, (unsigned long long)st.swaps,
                    (unsigned long long)st.parks, (unsigned long long)st.tokens_prefilled,
                    st.bytes_to_host / 1048576.0, st.bytes_to_device / 1048576.0);
        rep.add({{"bench", "quarter_pool"},
                 {"host_tier", bool(with_host)},
                 {"kv", "int8"},
                 {"threads", info.n_threads},
                 {"sessions", sessions},
                 {"new_tokens", 64},
                 {"device_bytes", device},
                 {"seconds", dt},
                 {"steps", st.steps},
                 {"preemptions", st.preemptions},
                 {"swaps", st.swaps},
                 {"parks", st.parks},
                 {"tokens_prefilled", st.tokens_prefilled},
                 {"bytes_to_host", st.bytes_to_host},
                 {"bytes_to_device", st.bytes_to_device}});
        for (auto *s : ss) {
            results[with_host].push_back(tokens_of(s));
            llmkv_session_destroy(s);
        }
        llmkv_engine_destroy(q);
    }
    bool same = results[0] == results[1];
    std::printf("\nswap and recompute runs give identical tokens: %s\n\n", same ? "yes" : "NO");
    rep.add({{"bench", "quarter_pool_summary"}, {"identical_tokens", same}});

    // 4. One session 4x longer than the device pool: older blocks in the host tier.
    {
        const uint32_t long_ctx = 4 * context;
        std::vector<int32_t> p;
        {
            llmkv_engine *t = make_engine(model, threads, 64ull << 20, 0);
            p = filler_tokens(t, long_ctx, 11);
            llmkv_engine_destroy(t);
        }
        const uint64_t device_bytes = uint64_t(long_ctx / 4 + 128) * per_token;
        std::vector<int32_t> out[2];
        double gen_tps[2] = {0, 0}, prefill_s[2] = {0, 0};
        llmkv_status failed[2] = {LLMKV_OK, LLMKV_OK};  // an ERROR event's status
        for (int constrained = 0; constrained < 2; ++constrained) {
            llmkv_engine *q = make_engine(model, threads, constrained ? device_bytes : 0,
                                          constrained ? (512ull << 20) : 0);
            llmkv_session *s = nullptr;
            llmkv_session_create(q, &sp, &s);
            llmkv_session_append(s, p.data(), p.size());
            double t0 = now();
            llmkv_run(q, record_error, &failed[constrained]);
            prefill_s[constrained] = now() - t0;
            llmkv_session_generate(s, 64);
            t0 = now();
            llmkv_run(q, record_error, &failed[constrained]);
            gen_tps[constrained] = 64 / (now() - t0);
            out[constrained] = tokens_of(s);
            llmkv_session_destroy(s);
            llmkv_engine_destroy(q);
        }
        if (failed[0] != LLMKV_OK || failed[1] != LLMKV_OK) {
            // E.g. a context so short that a quarter of it is less than the device must keep
            // for one step (max_batch_tokens): the engine refuses the session.
            std::printf(
                "one %u-token session: the %s run failed with %s; no timing (raise --context)\n",
                long_ctx, failed[0] != LLMKV_OK ? "unconstrained" : "quarter-pool",
                llmkv_status_string(failed[0] != LLMKV_OK ? failed[0] : failed[1]));
            return 1;
        }
        std::printf("| one %u-token session | prefill s | decode tok/s |\n|---|---|---|\n",
                    long_ctx);
        std::printf("| no device limit | %.2f | %.1f |\n", prefill_s[0], gen_tps[0]);
        std::printf(
            "| device pool of %.1f MiB (a quarter), the rest in the host tier | %.2f | %.1f "
            "(%.2fx) |\n",
            device_bytes / 1048576.0, prefill_s[1], gen_tps[1], gen_tps[1] / gen_tps[0]);
        bool long_same = out[0] == out[1];
        for (int constrained = 0; constrained < 2; ++constrained) {
            rep.add({{"bench", "long_session"},
                     {"kv", "int8"},
                     {"threads", info.n_threads},
                     {"context", long_ctx},
                     {"device_limit", bool(constrained)},
                     {"device_bytes", constrained ? Json(device_bytes) : Json(nullptr)},
                     {"prefill_s", prefill_s[constrained]},
                     {"decode_tok_s", gen_tps[constrained]},
                     {"decode_vs_unlimited", gen_tps[constrained] / gen_tps[0]}});
        }
        rep.add({{"bench", "long_session_summary"}, {"identical_tokens", long_same}});
        std::printf("\nidentical tokens: %s\n", long_same ? "yes" : "NO");
        same = same && long_same;
    }
    return same ? 0 : 1;
}

}  // namespace

Command add_bench_offload(CLI::App &bench) {
    CLI::App *app = bench.add_subcommand(
        "offload", "resume from the host tier vs recompute, copy bandwidth, swap vs recompute");
    auto o = std::make_shared<OffloadOptions>();
    add_model_option(*app, &o->model);
    add_threads_option(*app, &o->threads);
    add_uint_option(*app, "--context", &o->context, "tokens per session (>= 16)");
    add_uint_option(*app, "--sessions", &o->sessions, "sessions (>= 2)");
    add_json_option(*app, &o->json);
    return {app, [o] {
                BenchReport rep("bench offload", o->json);
                if (!rep.check_writable("llmkv bench offload")) return 2;
                return rep.finish(cmd_bench_offload(*o, rep), "llmkv bench offload");
            }};
}

}  // namespace llmkv_cli
