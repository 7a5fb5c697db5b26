// `llmkv bench tp`: tensor parallelism on CPU ranks (threads of this process; GPU ranks with
// --devices): prefill and
// decode tok/s, each rank's KV and weight bytes, and the time rank 0 spends in the
// all-reduces per decoded token, for each rank count; then the capacity arithmetic of
// tensor parallelism on 80 GB (H100) and 141 GB (H200) GPUs for a 7B and a 70B model,
// from the engine's own split (model/shard.h) and KV layout (kv/kv_layout.h). Numbers only.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_json.h"
#include "cli_common.h"
#include "kv/kv_layout.h"
#include "llmkv.h"
#include "model/llama_model.h"
#include "model/shard.h"

namespace llmkv_cli {

namespace {

struct TpBenchOptions {
    std::string model;
    uint32_t threads = 0;
    std::vector<uint32_t> sizes;
    std::vector<uint32_t> devices;  // --devices: GPU ranks
    uint32_t n_prompt = 128, n_gen = 64;
    llmkv_kv_dtype dtype = LLMKV_KV_F16;
    std::string json;
};

llmkv_stats get_stats(llmkv_engine *e) {
    llmkv_stats st;
    st.struct_size = sizeof(st);
    llmkv_engine_get_stats(e, &st);
    return st;
}

// The capacity table: weights (fp16) and the KV of one 32k-token sequence per GPU, and how
// many such sequences fit beside the weights in 90% of the GPU's memory.
void capacity_table(BenchReport &rep) {
    struct Model {
        const char *name;
        llmkv::LlamaConfig c;
    };
    auto config = [](uint32_t layers, uint32_t embd, uint32_t heads, uint32_t kv_heads, uint32_t ff,
                     uint32_t vocab) {
        llmkv::LlamaConfig c;
        c.n_layers = layers;
        c.n_embd = embd;
        c.n_heads = heads;
        c.n_kv_heads = kv_heads;
        c.head_dim = embd / heads;
        c.n_ff = ff;
        c.n_vocab = vocab;
        return c;
    };
    // Hyperparameters as published: Llama 2 7B (MHA) and Llama 3 70B (GQA, 8 KV heads).
    const Model models[] = {{"Llama-2-7B", config(32, 4096, 32, 32, 11008, 32000)},
                            {"Llama-3-70B", config(80, 8192, 64, 8, 28672, 128256)}};
    const struct {
        const char *name;
        double bytes;
    } gpus[] = {{"H100 80GB", 80e9}, {"H200 141GB", 141e9}};
    const llmkv_kv_dtype kvs[] = {LLMKV_KV_F16, LLMKV_KV_INT8, LLMKV_KV_FP8_E4M3};
    const uint32_t context = 32768;
    std::printf(
        "\ncapacity per GPU: fp16 weights + KV of %u-token sequences (16-token blocks), sequences "
        "that fit "
        "beside the weights in 90%% of the GPU\n\n",
        context);
    std::printf(
        "| model | tp | weights GiB/GPU | KV | KV GiB/seq/GPU | H100 80GB seqs | H200 141GB seqs "
        "|\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const Model &m : models) {
        for (uint32_t tp : {1u, 2u, 4u, 8u}) {
            const llmkv::ShardRanges r = llmkv::shard_ranges(m.c, 0, tp);
            const double weights = 2.0 * double(llmkv::shard_weight_elements(m.c, r, false));
            for (llmkv_kv_dtype d : kvs) {
                llmkv::KvGeometry g;
                g.n_layers = m.c.n_layers;
                g.n_kv_heads = r.n_kv_heads;
                g.head_dim = m.c.head_dim;
                g.block_tokens = 16;
                g.dtype_k = g.dtype_v = d;
                const double kv = g.sealed_bytes_per_token() * context;
                double fit[2];
                for (int i = 0; i < 2; ++i)
                    fit[i] = std::max(0.0, (0.9 * gpus[i].bytes - weights) / kv);
                std::printf("| %s | %u | %.1f | %s | %.2f | %.0f | %.0f |\n", m.name, tp,
                            weights / 1073741824.0, kv_dtype_name(d), kv / 1073741824.0, fit[0],
                            fit[1]);
                rep.add({{"bench", "tp_capacity"},
                         {"model", m.name},
                         {"tp", tp},
                         {"kv", kv_dtype_name(d)},
                         {"context", context},
                         {"weight_bytes_per_gpu", weights},
                         {"kv_bytes_per_seq_per_gpu", kv},
                         {"h100_seqs", fit[0]},
                         {"h200_seqs", fit[1]}});
            }
        }
    }
}

int cmd_bench_tp(TpBenchOptions o, BenchReport &rep) {
    if (o.sizes.empty()) o.sizes = {1, 3};
    if (o.n_prompt < 2 || o.n_gen < 2) {
        std::fprintf(stderr, "llmkv bench tp: --prompt-tokens and --gen-tokens must be >= 2\n");
        return 2;
    }
    Json &p = rep.params();
    p["tp_sizes"] = o.sizes;
    p["prompt_tokens"] = o.n_prompt;
    p["gen_tokens"] = o.n_gen;
    p["kv"] = kv_dtype_name(o.dtype);
    p["devices"] = o.devices;
    std::printf("llmkv bench tp: %s, KV %s, %u-token prompt, %u decoded tokens, %s\n\n",
                o.model.c_str(), kv_dtype_name(o.dtype), o.n_prompt, o.n_gen,
                o.devices.empty() ? "CPU ranks" : "GPU ranks (--devices)");
    std::printf(
        "| tp | threads/rank | prefill tok/s | decode tok/s | all-reduce us/token | "
        "collectives/token | "
        "KV B/token/rank | KV MiB/rank (prompt) | weights MiB/rank |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (uint32_t tp : o.sizes) {
        llmkv_engine_params ep;
        llmkv_engine_params_init(&ep);
        ep.model_path = o.model.c_str();
        ep.backend = LLMKV_BACKEND_CPU;
        ep.n_threads = o.threads;
        ep.kv_dtype_k = ep.kv_dtype_v = o.dtype;
        ep.flags = 0;
        ep.tp_size = tp;
        if (!apply_devices(o.devices, tp, ep)) return 2;
        llmkv_engine *e = nullptr;
        if (llmkv_engine_create(&ep, &e) != LLMKV_OK) {
            std::printf("| %u | - | %s |\n", tp, llmkv_last_error());
            continue;
        }
        llmkv_engine_info info;
        info.struct_size = sizeof(info);
        llmkv_engine_get_info(e, &info);
        rep.set_model(o.model, info);
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        llmkv_session *s = nullptr;
        llmkv_session_create(e, &sp, &s);
        const std::vector<int32_t> prompt = filler_tokens(e, o.n_prompt, 1);
        const double t0 = now();
        llmkv_session_append(s, prompt.data(), prompt.size());
        llmkv_session_generate(s, 1);
        llmkv_run(e, nullptr, nullptr);
        const double t1 = now();
        const llmkv_stats a = get_stats(e);
        llmkv_session_generate(s, o.n_gen);
        llmkv_run(e, nullptr, nullptr);
        const double t2 = now();
        const llmkv_stats b = get_stats(e);
        const uint64_t decoded = b.tokens_generated - a.tokens_generated;
        const double prefill = o.n_prompt / (t1 - t0), decode = decoded / (t2 - t1);
        const double reduce_us = decoded ? (b.tp_reduce_ns - a.tp_reduce_ns) / 1e3 / decoded : 0;
        const double reduces = decoded ? double(b.tp_reduces - a.tp_reduces) / decoded : 0;
        const unsigned per_rank = info.n_threads / std::max(1u, tp);
        std::printf("| %u | %u | %.1f | %.1f | %.0f | %.0f | %llu | %.2f | %.1f |\n", info.tp_size,
                    per_rank, prefill, decode, reduce_us, reduces,
                    (unsigned long long)info.kv_bytes_per_token_rank,
                    a.kv_bytes_used_rank / 1048576.0, info.weight_bytes_rank / 1048576.0);
        std::fflush(stdout);
        rep.add({{"bench", "tp"},
                 {"tp", info.tp_size},
                 {"threads", info.n_threads},
                 {"threads_per_rank", per_rank},
                 {"prompt_tokens", o.n_prompt},
                 {"gen_tokens", decoded},
                 {"prefill_tok_s", prefill},
                 {"decode_tok_s", decode},
                 {"allreduce_us_per_token", reduce_us},
                 {"collectives_per_token", reduces},
                 {"kv_bytes_per_token_rank", info.kv_bytes_per_token_rank},
                 {"kv_bytes_rank_after_prompt", a.kv_bytes_used_rank},
                 {"weight_bytes_rank", info.weight_bytes_rank}});
        llmkv_session_destroy(s);
        llmkv_engine_destroy(e);
    }
    std::printf(
        "\nall-reduce us/token: rank 0's time in the decode steps' all-reduces and logit gathers, "
        "waiting for "
        "the other ranks included (GPU ranks over NCCL: the logit gathers only; their all-reduces "
        "run on the "
        "device streams)\n");
    capacity_table(rep);
    return 0;
}

}  // namespace

Command add_bench_tp(CLI::App &bench) {
    CLI::App *app = bench.add_subcommand("tp",
                                         "tensor parallelism on CPU ranks (or GPU ranks: "
                                         "--devices): tok/s, per-rank bytes, all-reduce time; GPU "
                                         "capacity arithmetic");
    auto o = std::make_shared<TpBenchOptions>();
    add_model_option(*app, &o->model);
    add_threads_option(*app, &o->threads);
    add_uint_list_option(*app, "--tp-sizes", &o->sizes, "rank counts to run (default 1,3)");
    add_uint_option(*app, "--prompt-tokens", &o->n_prompt, "prompt length");
    add_uint_option(*app, "--gen-tokens", &o->n_gen, "tokens decoded");
    add_kv_dtype_option(*app, "--kv-dtype", &o->dtype, "KV cache dtype");
    add_devices_option(*app, &o->devices);
    add_json_option(*app, &o->json);
    return {app, [o] {
                BenchReport rep("bench tp", o->json);
                if (!rep.check_writable("llmkv bench tp")) return 2;
                return rep.finish(cmd_bench_tp(*o, rep), "llmkv bench tp");
            }};
}

}  // namespace llmkv_cli
