// `llmkv inspect MODEL`: architecture, hyperparameters, tensor formats and sizes, and the
// KV bytes per token of every KV codec this build supports. Reads the file with the same
// hardened GGUF reader the engine uses.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"
#include "common/error.h"
#include "kv/kv_cache.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "model/shard.h"
#include "tensor/tensor_type.h"

namespace llmkv_cli {

namespace {

// The tensor-parallel plan over tp ranks: each rank's heads, columns and vocabulary rows,
// its weight bytes and KV bytes per token (the engine's own split, model/shard.h).
void print_tp_plan(const llmkv::LlamaModel &model, const llmkv::KvGeometry &whole, uint32_t tp,
                   llmkv::ExpertSplit experts) {
    const llmkv::LlamaConfig &c = model.config();
    std::printf("\ntensor parallelism over %u ranks%s:\n", tp,
                !c.is_moe() ? ""
                : experts == llmkv::ExpertSplit::kWhole
                    ? ", whole experts per rank (LLMKV_TP_EXPERTS=whole)"
                    : ", every expert's columns split (LLMKV_TP_EXPERTS=columns, the default)");
    const std::string why = llmkv::shard_unsupported_reason(model, tp, experts);
    if (!why.empty()) {
        std::printf("  not possible: %s\n", why.c_str());
        return;
    }
    std::printf("  %-5s %-12s %-14s %-14s %-16s %12s %14s %14s%s\n", "rank", "query heads",
                "KV heads", "ffn columns", "vocab rows", "weights MiB", "f16 KV B/tok",
                "int8 KV B/tok", c.is_moe() ? "  experts" : "");
    for (uint32_t r = 0; r < tp; ++r) {
        const llmkv::ShardRanges s = llmkv::shard_ranges(c, r, tp, experts);
        llmkv::KvGeometry g = whole;
        g.n_kv_heads = s.n_kv_heads;
        g.dtype_k = g.dtype_v = LLMKV_KV_F16;
        const double f16 = g.sealed_bytes_per_token();
        g.dtype_k = g.dtype_v = LLMKV_KV_INT8;
        const double i8 = g.sealed_bytes_per_token();
        const std::string kv =
            std::to_string(s.kv_head0) + "-" + std::to_string(s.kv_head0 + s.n_kv_heads - 1) +
            (s.kv_replicas > 1 ? " (x" + std::to_string(s.kv_replicas) + ")" : "");
        std::printf(
            "  %-5u %-12s %-14s %-14s %-16s %12.1f %14.0f %14.0f", r,
            (std::to_string(s.q_head0) + "-" + std::to_string(s.q_head0 + s.n_q_heads - 1)).c_str(),
            kv.c_str(), (std::to_string(s.ff0) + "-" + std::to_string(s.ff0 + s.n_ff - 1)).c_str(),
            (std::to_string(s.vocab0) + "-" + std::to_string(s.vocab0 + s.n_vocab - 1)).c_str(),
            llmkv::shard_weight_bytes(model, s) / 1048576.0, f16, i8);
        if (c.is_moe() && experts == llmkv::ExpertSplit::kWhole) {
            std::printf("  %u-%u whole", s.expert0, s.expert0 + s.n_experts - 1);
        } else if (c.is_moe()) {
            std::printf("  all, columns %u-%u of each", s.ff_expert0,
                        s.ff_expert0 + s.n_ff_expert - 1);
        }
        std::printf("\n");
    }
    std::printf(
        "  per token and layer two all-reduces of %u floats (%.1f KiB per token for all %u "
        "layers), and a\n"
        "  gather of the logits (%u floats per rank)\n",
        c.n_embd, 2.0 * c.n_layers * c.n_embd * 4 / 1024.0, c.n_layers, (c.n_vocab + tp - 1) / tp);
}

int cmd_inspect(const std::string &path, uint32_t tp) {
    try {
        std::shared_ptr<llmkv::GgufFile> file(llmkv::GgufFile::open(path));
        std::printf("file: %s\nGGUF version %u, %zu metadata keys, %zu tensors, %zu bytes\n",
                    path.c_str(), file->version(), file->metadata().size(), file->tensors().size(),
                    file->file_size());
        auto model = llmkv::LlamaModel::load(file);
        const llmkv::LlamaConfig &c = model->config();
        std::printf("\nmodel: %s\narchitecture: %s\n", c.name.c_str(), c.architecture.c_str());
        std::printf(
            "layers %u, embedding %u, feed-forward %u, heads %u, kv heads %u, head_dim %u\n",
            c.n_layers, c.n_embd, c.n_ff, c.n_heads, c.n_kv_heads, c.head_dim);
        std::printf(
            "vocab %u, trained context %u, rope base %g (dims %u, scale %g), rms eps %g, %s output "
            "head\n",
            c.n_vocab, c.n_ctx_train, double(c.rope_freq_base), c.rope_dim,
            double(c.rope_freq_scale), double(c.rms_eps), c.tied_output ? "tied" : "separate");
        std::printf("parameters %.1f M, weight bytes %.1f MiB\n", model->n_params() / 1e6,
                    model->weight_bytes() / 1048576.0);
        if (c.is_moe()) {
            const llmkv::MoeConfig &m = c.moe;
            std::printf(
                "mixture of experts: %u experts of %u feed-forward columns, %u per token (softmax "
                "router%s%s)%s\n",
                m.routing.n_expert, m.n_ff_expert, m.routing.n_used,
                m.routing.norm_weights ? ", weights normalised" : "",
                m.routing.weight_scale != 1.0f ? ", weights scaled" : "",
                m.n_ff_shared
                    ? (", shared expert of " + std::to_string(m.n_ff_shared) + " columns").c_str()
                    : "");
        }
        // What one decoded token reads: the whole model, or all but the unchosen experts.
        std::printf("per decoded token: %.1f M active parameters, %.1f MiB of weights read\n",
                    model->n_active_params() / 1e6, model->active_weight_bytes() / 1048576.0);
        std::printf("rope %s, attention scale %g, embedding scale %g, ffn %s%s%s%s\n",
                    c.rope_neox ? "neox (halves)" : "adjacent pairs", double(c.attn_scale),
                    double(c.embd_scale),
                    c.activation == llmkv::FfnActivation::kGeluTanh ? "gelu-tanh" : "silu",
                    c.qk_norm ? ", q/k norm" : "", c.qkv_bias ? ", qkv bias" : "",
                    c.post_norms ? ", post norms" : "");
        std::printf("layers (L = local sliding window, G = global):\n ");
        uint32_t n_local = 0;
        for (uint32_t l = 0; l < c.n_layers; ++l) {
            const llmkv::LayerRope &r = c.rope(l);
            n_local += c.is_local(l);
            const char *scaled = r.yarn_ext_factor != 0.0f ? ",yarn"
                                 : r.freq_scale != 1.0f    ? ",scaled"
                                                           : "";
            if (c.is_local(l)) {
                std::printf(" %u:L(w%u,base %g%s)", l, c.window(l), double(r.freq_base), scaled);
            } else {
                std::printf(" %u:G(base %g%s)", l, double(r.freq_base), scaled);
            }
            if (l % 6 == 5 && l + 1 < c.n_layers) std::printf("\n ");
        }
        std::printf("\n  %u local, %u global\n", n_local, c.n_layers - n_local);

        std::map<std::string, std::pair<size_t, uint64_t>> by_type;
        for (const auto &t : file->tensors()) {
            auto &e = by_type[llmkv::tensor_type_name(t.type)];
            e.first += 1;
            e.second += t.n_bytes;
        }
        std::printf("\ntensor formats:\n  %-8s %8s %12s\n", "type", "tensors", "MiB");
        for (const auto &[name, e] : by_type) {
            std::printf("  %-8s %8zu %12.2f\n", name.c_str(), e.first, e.second / 1048576.0);
        }
        std::printf("\ntensors:\n  %-28s %-6s %-20s %12s\n", "name", "type", "shape", "bytes");
        for (const auto &t : file->tensors()) {
            std::string shape;
            for (size_t i = 0; i < t.dims.size(); ++i)
                shape += (i ? " x " : "") + std::to_string(t.dims[i]);
            std::printf("  %-28s %-6s %-20s %12llu\n", t.name.c_str(),
                        llmkv::tensor_type_name(t.type), shape.c_str(),
                        (unsigned long long)t.n_bytes);
        }

        llmkv::KvGeometry g;
        g.n_layers = c.n_layers;
        g.n_kv_heads = c.n_kv_heads;
        g.head_dim = c.head_dim;
        g.block_tokens = 16;
        // Sliding-window layers: the engine's layer groups (their blocks released outside the
        // window); the same split as the engine makes.
        std::vector<uint32_t> windows(c.n_layers);
        for (uint32_t l = 0; l < c.n_layers; ++l) windows[l] = c.window(l);
        llmkv::set_layer_groups(g, windows);
        const bool grouped = g.grouped();
        const uint32_t n_global = c.n_layers - n_local;
        std::printf("\nKV bytes per token (16-token blocks, scales included)%s:\n",
                    grouped ? "" : "");
        if (grouped) {
            std::printf(
                "  %u global layers keep every token; %u local layers keep their %u-token window\n"
                "  (%u layer groups of %u layers; `per token` is a token inside the window)\n",
                n_global, n_local, g.window, g.n_groups, g.group_layers);
            std::printf("  %-10s %-10s %12s %10s %12s %12s %14s %14s\n", "K", "V", "bytes/token",
                        "vs f16", "global/token", "local/token", "MiB 4k ctx", "MiB 32k ctx");
        } else {
            std::printf("  %-10s %-10s %12s %10s %16s\n", "K", "V", "bytes/token", "vs f16",
                        "MiB per 2k ctx");
        }
        const double f16 = 2.0 * 2 * c.n_layers * c.n_kv_heads * c.head_dim;
        const llmkv_kv_dtype pairs[][2] = {
            {LLMKV_KV_F16, LLMKV_KV_F16},           {LLMKV_KV_BF16, LLMKV_KV_BF16},
            {LLMKV_KV_FP8_E4M3, LLMKV_KV_FP8_E4M3}, {LLMKV_KV_INT8, LLMKV_KV_INT8},
            {LLMKV_KV_INT8, LLMKV_KV_INT4},         {LLMKV_KV_INT4, LLMKV_KV_INT4}};
        for (const auto &pair : pairs) {
            g.dtype_k = pair[0];
            g.dtype_v = pair[1];
            if (!llmkv::codec_supported(llmkv::CodecSpec{pair[0], false}, llmkv::KvRole::K, 16,
                                        c.head_dim) ||
                !llmkv::codec_supported(llmkv::CodecSpec{pair[1], false}, llmkv::KvRole::V, 16,
                                        c.head_dim)) {
                std::printf("  %-10s %-10s %12s %10s %16s\n", llmkv::codec_name(pair[0]),
                            llmkv::codec_name(pair[1]), "n/a", "", "(not in this build)");
                continue;
            }
            const double bpt = double(g.sealed_layer_bytes()) * c.n_layers / g.block_tokens;
            if (!grouped) {
                std::printf("  %-10s %-10s %12.0f %9.3fx %16.1f\n", llmkv::codec_name(pair[0]),
                            llmkv::codec_name(pair[1]), bpt, bpt / f16, bpt * 2048 / 1048576.0);
                continue;
            }
            // A session of n tokens: held_blocks(n) pool blocks of one group each.
            auto mib = [&](uint32_t n) {
                return double(g.held_blocks(n)) * g.sealed_block_bytes() / 1048576.0;
            };
            std::printf("  %-10s %-10s %12.0f %9.3fx %12.0f %12.0f %14.1f %14.1f\n",
                        llmkv::codec_name(pair[0]), llmkv::codec_name(pair[1]), bpt, bpt / f16,
                        double(g.sealed_layer_bytes()) * n_global / g.block_tokens,
                        double(g.sealed_layer_bytes()) * n_local / g.block_tokens, mib(4096),
                        mib(32768));
        }
        if (grouped) {
            llmkv::KvGeometry all = g;
            llmkv::set_layer_groups(all, {});
            all.dtype_k = all.dtype_v = LLMKV_KV_F16;
            std::printf("  (f16 without the window release: %.1f MiB at 4k, %.1f MiB at 32k)\n",
                        double(all.held_blocks(4096)) * all.sealed_block_bytes() / 1048576.0,
                        double(all.held_blocks(32768)) * all.sealed_block_bytes() / 1048576.0);
        }
        if (tp > 1) {
            print_tp_plan(*model, g, tp, llmkv::ExpertSplit::kColumns);
            if (c.is_moe()) print_tp_plan(*model, g, tp, llmkv::ExpertSplit::kWhole);
        }
        return 0;
    } catch (const llmkv::Error &e) {
        std::fprintf(stderr, "llmkv inspect: %s: %s\n", llmkv_status_string(e.status()), e.what());
        return 1;
    }
}

}  // namespace

Command add_inspect(CLI::App &parent) {
    CLI::App *app = parent.add_subcommand(
        "inspect",
        "describe a model file: architecture, tensor formats and sizes, KV bytes/token per codec");
    auto path = std::make_shared<std::string>();
    auto tp = std::make_shared<uint32_t>(0);
    add_model_option(*app, path.get(), /*positional=*/true);
    add_uint_option(*app, "--tp", tp.get(),
                    "also show the tensor-parallel plan over this many ranks");
    return {app, [path, tp] { return cmd_inspect(*path, *tp); }};
}

}  // namespace llmkv_cli
