// `llmkv bench window`: what releasing sliding-window layers' blocks saves, for a model that
// has such layers (Gemma 3). Per KV codec: the KV bytes of one session at each context length
// with the release (layer groups) and without (LLMKV_ENGINE_KEEP_WINDOW_BLOCKS) — measured
// for the contexts it prefills (--measure), computed from the engine's block geometry for
// the others — plus prefill and decode speed. Numbers only.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_json.h"
#include "cli_common.h"
#include "llmkv.h"

namespace llmkv_cli {

namespace {

struct WindowOptions {
    std::string model;
    uint32_t threads = 0;
    std::vector<uint32_t> contexts;  // default 4096, 32768
    uint32_t measure = 4096;         // contexts up to this are prefilled and measured
    uint32_t decode_tokens = 64;
    std::vector<std::string> codecs;  // K/V pairs, default f16/f16 int8/int8 int4/int4
    std::string json;
};

llmkv_engine *make(const WindowOptions &o, llmkv_kv_dtype k, llmkv_kv_dtype v, uint32_t flags,
                   uint32_t max_ctx) {
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = o.model.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = o.threads;
    ep.kv_dtype_k = k;
    ep.kv_dtype_v = v;
    ep.flags = flags;  // no prefix cache: the blocks counted are the session's own
    ep.max_context = max_ctx;
    ep.max_sessions = 4;
    llmkv_engine *e = nullptr;
    if (llmkv_engine_create(&ep, &e) != LLMKV_OK) {
        std::fprintf(stderr, "llmkv bench window: %s\n", llmkv_last_error());
        return nullptr;
    }
    return e;
}

// KV bytes of one session with n tokens computed, from the geometry: sealed blocks of every
// group while in the window, of group 0 only once outside it; plus the tail slot.
double computed_bytes(const llmkv_engine_info &info, uint32_t n) {
    const uint32_t B = info.kv_block_tokens;
    const uint32_t sealed = n > info.kv_residual_tokens ? (n - info.kv_residual_tokens) / B : 0;
    const double group_block = double(info.kv_bytes_per_token_global) * B;
    double blocks = sealed;
    if (info.kv_layer_groups > 1) {
        const uint32_t live_from = n + 1 > info.kv_window ? (n + 1 - info.kv_window) / B : 0;
        blocks += double(sealed > live_from ? sealed - live_from : 0) * (info.kv_layer_groups - 1);
    } else {
        blocks = double(sealed) * double(info.kv_bytes_per_token_device) /
                 double(info.kv_bytes_per_token_global);
    }
    const double tail = double(info.kv_bytes_per_token_tail) * (B + info.kv_residual_tokens);
    return blocks * group_block + tail;
}

struct Measured {
    double kv_bytes = 0, prefill_tps = 0, decode_tps = 0;
    bool ok = false;
};

Measured measure(llmkv_engine *e, uint32_t n, uint32_t decode_tokens) {
    Measured m;
    std::vector<int32_t> prompt = filler_tokens(e, n, 7);
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    sp.sampling.temperature = 0;
    llmkv_session *s = nullptr;
    if (llmkv_session_create(e, &sp, &s) != LLMKV_OK) return m;
    double t0 = now();
    llmkv_session_append(s, prompt.data(), prompt.size());
    llmkv_session_generate(s, 1);
    if (llmkv_run(e, nullptr, nullptr) != LLMKV_OK) {
        std::fprintf(stderr, "llmkv bench window: %s\n", llmkv_last_error());
        llmkv_session_destroy(s);
        return m;
    }
    m.prefill_tps = n / (now() - t0);
    llmkv_stats st;
    st.struct_size = sizeof(st);
    llmkv_engine_get_stats(e, &st);
    m.kv_bytes = double(st.kv_bytes_used);
    if (decode_tokens > 0) {
        t0 = now();
        llmkv_session_generate(s, decode_tokens);
        llmkv_run(e, nullptr, nullptr);
        m.decode_tps = decode_tokens / (now() - t0);
    }
    llmkv_session_destroy(s);
    m.ok = true;
    return m;
}

int cmd_bench_window(WindowOptions o, BenchReport &rep) {
    if (o.contexts.empty()) o.contexts = {4096, 32768};
    if (o.codecs.empty()) o.codecs = {"f16/f16", "int8/int8", "int4/int4"};
    rep.params()["threads"] = o.threads;
    rep.params()["contexts"] = o.contexts;
    rep.params()["measure"] = o.measure;
    rep.params()["decode_tokens"] = o.decode_tokens;
    rep.params()["kv_pairs"] = o.codecs;
    const uint32_t max_ctx =
        *std::max_element(o.contexts.begin(), o.contexts.end()) + o.decode_tokens + 1;
    std::printf("llmkv bench window: %s\n\n", o.model.c_str());
    std::printf(
        "| K/V | context | KV MiB, window blocks released | KV MiB, kept | saved | how | prefill "
        "tok/s (released / kept) | decode tok/s (released / kept) |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (const std::string &pair : o.codecs) {
        const size_t slash = pair.find('/');
        llmkv_kv_dtype k, v;
        try {
            k = kv_dtype_from_name(pair.substr(0, slash));
            v = kv_dtype_from_name(slash == std::string::npos ? pair : pair.substr(slash + 1));
        } catch (const std::exception &) {
            std::fprintf(stderr, "llmkv bench window: unknown codec pair '%s'\n", pair.c_str());
            return 2;
        }
        std::unique_ptr<llmkv_engine, void (*)(llmkv_engine *)> released(make(o, k, v, 0, max_ctx),
                                                                         llmkv_engine_destroy);
        std::unique_ptr<llmkv_engine, void (*)(llmkv_engine *)> kept(
            make(o, k, v, LLMKV_ENGINE_KEEP_WINDOW_BLOCKS, max_ctx), llmkv_engine_destroy);
        if (!released || !kept) return 1;
        llmkv_engine_info ir, ik;
        ir.struct_size = ik.struct_size = sizeof(ir);
        llmkv_engine_get_info(released.get(), &ir);
        llmkv_engine_get_info(kept.get(), &ik);
        rep.set_model(o.model, ir);
        if (ir.kv_window == 0) {
            std::fprintf(stderr, "llmkv bench window: %s has no sliding-window layers\n",
                         o.model.c_str());
            return 1;
        }
        for (uint32_t n : o.contexts) {
            Measured mr, mk;
            const bool run = n <= o.measure;
            if (run) {
                mr = measure(released.get(), n, o.decode_tokens);
                mk = measure(kept.get(), n, o.decode_tokens);
                if (!mr.ok || !mk.ok) return 1;
            }
            const double br = run ? mr.kv_bytes : computed_bytes(ir, n);
            const double bk = run ? mk.kv_bytes : computed_bytes(ik, n);
            char speed_p[64] = "", speed_d[64] = "";
            if (run) {
                std::snprintf(speed_p, sizeof speed_p, "%.0f / %.0f", mr.prefill_tps,
                              mk.prefill_tps);
                std::snprintf(speed_d, sizeof speed_d, "%.1f / %.1f", mr.decode_tps, mk.decode_tps);
            }
            std::printf("| %s | %u | %.2f | %.2f | %.1f%% | %s | %s | %s |\n", pair.c_str(), n,
                        br / 1048576.0, bk / 1048576.0, 100.0 * (1.0 - br / bk),
                        run ? "measured" : "computed", speed_p, speed_d);
            Json r{{"bench", "window_kv"},
                   {"kv", pair},
                   {"threads", ir.n_threads},
                   {"context", n},
                   {"how", run ? "measured" : "computed"},
                   {"kv_bytes_released", br},
                   {"kv_bytes_kept", bk},
                   {"saved_pct", 100.0 * (1.0 - br / bk)}};
            if (run) {
                r["prefill_tok_s_released"] = mr.prefill_tps;
                r["prefill_tok_s_kept"] = mk.prefill_tps;
                r["decode_tok_s_released"] = mr.decode_tps;
                r["decode_tok_s_kept"] = mk.decode_tps;
            }
            rep.add(std::move(r));
        }
    }
    std::printf(
        "\n(KV = sealed blocks in use + tail slots of one session, no prefix cache; \"computed\" = "
        "from the "
        "engine's block geometry, which the KV manager's tests hold exact)\n");
    return 0;
}

}  // namespace

Command add_bench_window(CLI::App &bench) {
    CLI::App *app = bench.add_subcommand(
        "window",
        "KV bytes of sliding-window models with and without releasing out-of-window blocks");
    auto o = std::make_shared<WindowOptions>();
    add_model_option(*app, &o->model);
    add_threads_option(*app, &o->threads);
    add_uint_option(*app, "--context", &o->contexts,
                    "context length to report (repeatable; default 4096 and 32768)");
    add_uint_option(*app, "--measure", &o->measure,
                    "prefill and measure contexts up to this length (others are computed)");
    add_uint_option(*app, "--decode", &o->decode_tokens,
                    "tokens decoded after each measured prefill");
    app->add_option("--kv", o->codecs,
                    "K/V codec pair, e.g. int8/int4 (repeatable; default f16, int8, int4)");
    add_json_option(*app, &o->json);
    return {app, [o] {
                BenchReport rep("bench window", o->json);
                if (!rep.check_writable("llmkv bench window")) return 2;
                return rep.finish(cmd_bench_window(*o, rep), "llmkv bench window");
            }};
}

}  // namespace llmkv_cli
