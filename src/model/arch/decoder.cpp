// The decoder-only forward pass of every architecture llmkv runs, written once against the
// Backend ops; the architecture's traits (model/llama_model.h: LlamaConfig) switch its
// optional parts on:
//
//   x = embed(tokens) [* embd_scale]                                      Gemma: sqrt(n_embd)
//   per layer l:
//     xn = rms_norm(x, attn_norm)
//     q, k, v = xn Wq, xn Wk, xn Wv [+ biases]                           Qwen2
//     [q, k = per-head rms_norm(q, q_norm), rms_norm(k, k_norm)]          Gemma 3, Qwen3
//     q, k = rope(q, k) with layer l's RoPE (adjacent pairs, or NeoX halves)
//     write_kv(l, k, v); a = attention(l, q, scale, window(l))            Gemma 3, gpt-oss: local
//       [with a learned sink logit per head in each softmax]                 gpt-oss
//     o = a Wo [+ bo] [; o = rms_norm(o, post_attention_norm)]            gpt-oss; Gemma 3
//     x += o
//     xn = rms_norm(x, ffn_norm)
//     f = (act(xn Wgate) * xn Wup) Wdown   act = silu, or gelu_tanh (Gemma)
//     or, a mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss: LlamaConfig::moe):
//       routes = route_experts(xn Wrouter [+ b])   each token's n_used experts and weights
//       f = sum_i w_i (act(xn Wgate_e_i [+ b]) * (xn Wup_e_i [+ b])) Wdown_e_i [+ b]
//         (e_i: its i-th expert; gpt-oss: biases, act its clamped SwiGLU)
//       [f += sigmoid(xn Wshared_gate) * (silu(xn Wgate_sh) * xn Wup_sh) Wdown_sh]   Qwen2-MoE
//     [f = rms_norm(f, post_ffw_norm)]                                     Gemma 3
//     x += f
//   logits = rms_norm(x, output_norm) Wout   (rows that want logits)
//
// Tensor parallelism (a ModelShard): the same sequence on one rank's heads and feed-forward
// columns (of every expert, with the router and the shared gate whole on each rank), with x +=
// all_reduce(o) and x += all_reduce(f) (each rank's partial product of Wo and Wdown summed over the
// ranks before the post norms), and the logits of the rank's vocabulary rows gathered from every
// rank.
//
// Llama 2/3, Mistral, SmolLM2, TinyLlama ("llama"), Qwen2/2.5 ("qwen2"), Qwen3 ("qwen3"),
// Phi-3 ("phi3": fused QKV and gate/up bound as row ranges by the loader), Gemma 3 ("gemma3"),
// Mixtral ("llama" with experts), Qwen1.5/2-MoE ("qwen2moe"), Qwen3-MoE ("qwen3moe"),
// gpt-oss ("gpt-oss").
#include <cmath>

#include "common/error.h"
#include "common/float_math.h"
#include "model/arch/forward.h"

namespace llmkv {

namespace {

class DecoderForward final : public Forward {
public:
    DecoderForward(const LlamaModel &model, Backend &backend, uint32_t max_tokens,
                   const ModelShard *shard)
        : model_(model),
          shard_(shard),
          cfg_(shard ? shard->config() : model.config()),
          layers_(shard ? shard->layers() : model.layers()),
          output_(shard ? shard->output() : model.output()),
          be_(backend),
          max_tokens_(max_tokens) {
        const uint32_t T = max_tokens;
        x_ = be_.alloc(T, cfg_.n_embd);
        xn_ = be_.alloc(T, cfg_.n_embd);
        q_ = be_.alloc(T, cfg_.q_dim());
        k_ = be_.alloc(T, cfg_.kv_dim());
        v_ = be_.alloc(T, cfg_.kv_dim());
        attn_ = be_.alloc(T, cfg_.q_dim());
        tmp_ = be_.alloc(T, cfg_.n_embd);
        const MoeConfig &moe = cfg_.moe;
        // The dense FFN's buffers; a mixture of experts uses them for its shared expert.
        const uint32_t ff = cfg_.is_moe() ? moe.n_ff_shared : cfg_.n_ff;
        if (ff > 0) {
            gate_ = be_.alloc(T, ff);
            up_ = be_.alloc(T, ff);
        }
        if (cfg_.is_moe()) {
            const uint32_t K = moe.routing.n_used;
            router_ = be_.alloc(T, moe.routing.n_expert);
            routes_ = be_.alloc(T, 2 * K);
            // One row per (token, expert) slot: buffers of T rows of K slots each (a backend's
            // buffers have at most max_tokens rows), seen as T * K rows.
            auto slots = [&](uint32_t cols) {
                Tensor t = be_.alloc(T, K * cols);
                return Tensor{t.data, T * K, cols};
            };
            expert_gate_ = slots(moe.n_ff_expert);
            expert_up_ = slots(moe.n_ff_expert);
            expert_out_ = slots(cfg_.n_embd);
            if (ff > 0) {
                shared_out_ = be_.alloc(T, cfg_.n_embd);
                shared_gate_ = be_.alloc(T, 1);
            }
        }
        last_ = be_.alloc(T, cfg_.n_embd);
        last_norm_ = be_.alloc(T, cfg_.n_embd);

        // One RoPE per group of layers (Gemma 3: global and local), YaRN's mix folded into
        // the frequencies and its attention factor into the softmax scale (q.k is scaled by
        // its square when both q and k are).
        const float *factors = model.rope_freq_factors();
        inv_freq_.resize(cfg_.ropes.size());
        ropes_.resize(cfg_.ropes.size());
        for (size_t r = 0; r < cfg_.ropes.size(); ++r) {
            const LayerRope &lr = cfg_.ropes[r];
            inv_freq_[r] = rope_inv_freq(lr, cfg_.rope_dim, factors);
            RopeParams &rp = ropes_[r];
            rp.style = cfg_.rope_neox ? RopeParams::Style::kHalves : RopeParams::Style::kAdjacent;
            rp.rope_dim = cfg_.rope_dim;
            rp.freq_scale = rope_position_scale(lr);
            rp.inv_freq = inv_freq_[r].data();
        }
        layer_scale_.resize(cfg_.n_layers);
        for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
            const float a = cfg_.rope(l).attn_factor;
            layer_scale_[l] = a == 1.0f ? cfg_.attn_scale : cfg_.attn_scale * a * a;
        }

        if (shard_) local_logits_.resize(size_t(T) * shard_->ranges().n_vocab);
        WeightSet w;
        w.matrices.push_back(&model.token_embedding());
        if (output_.data != model.token_embedding().data ||
            output_.rows != model.token_embedding().rows) {
            w.matrices.push_back(&output_);
        }
        w.vectors.push_back({model.output_norm(), cfg_.n_embd});
        auto vec = [&](const float *p, uint32_t n) {
            if (p) w.vectors.push_back({p, n});
        };
        for (const LlamaLayer &L : layers_) {
            for (const WeightMatrix *m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down,
                                          &L.router, &L.shared_gate}) {
                if (m->data) w.matrices.push_back(m);
            }
            for (const std::vector<WeightMatrix> *ex : {&L.gate_exps, &L.up_exps, &L.down_exps}) {
                for (const WeightMatrix &m : *ex) {
                    if (m.data) w.matrices.push_back(&m);  // (empty: another rank's expert)
                }
            }
            vec(L.attn_norm, cfg_.n_embd);
            vec(L.ffn_norm, cfg_.n_embd);
            vec(L.bq, cfg_.q_dim());
            vec(L.bk, cfg_.kv_dim());
            vec(L.bv, cfg_.kv_dim());
            vec(L.bo, cfg_.n_embd);
            vec(L.attn_sinks, cfg_.n_heads);
            vec(L.router_bias, cfg_.moe.routing.n_expert);
            for (const float *b : L.gate_exps_bias) vec(b, cfg_.moe.n_ff_expert);
            for (const float *b : L.up_exps_bias) vec(b, cfg_.moe.n_ff_expert);
            for (const float *b : L.down_exps_bias) vec(b, cfg_.n_embd);
            vec(L.q_norm, cfg_.head_dim);
            vec(L.k_norm, cfg_.head_dim);
            vec(L.post_attn_norm, cfg_.n_embd);
            vec(L.post_ffn_norm, cfg_.n_embd);
        }
        const GgufFile *file = &model.file();
        w.release = [file](const void *p, size_t n) { file->release_pages(p, n); };
        be_.load_weights(w);
    }

    uint32_t max_tokens() const override { return max_tokens_; }

    void run(const std::vector<ForwardSpan> &spans, std::vector<float> &logits) override {
        // Validate the whole batch before any KV is written.
        const BatchShape shape =
            validate_batch(spans, be_.kv_geometry(), cfg_.n_vocab, max_tokens_);
        const uint32_t T = shape.tokens, n_logits = shape.logit_rows;
        Tensor x = x_.first_rows(T), xn = xn_.first_rows(T), q = q_.first_rows(T),
               k = k_.first_rows(T), v = v_.first_rows(T), attn = attn_.first_rows(T),
               tmp = tmp_.first_rows(T);
        const uint32_t D = cfg_.head_dim;

        be_.begin_batch(spans, shape);
        be_.embed(model_.token_embedding(), x);
        if (cfg_.embd_scale != 1.0f) be_.scale(x, cfg_.embd_scale);
        for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
            const LlamaLayer &L = layers_[l];
            const RopeParams &rope = ropes_[cfg_.layer_rope[l]];
            be_.rms_norm(x, L.attn_norm, cfg_.rms_eps, xn);
            be_.matmul(L.wq, xn, q);
            be_.matmul(L.wk, xn, k);
            be_.matmul(L.wv, xn, v);
            if (L.bq) {
                be_.add_bias(q, L.bq);
                be_.add_bias(k, L.bk);
                be_.add_bias(v, L.bv);
            }
            if (L.q_norm) {
                be_.rms_norm(q.heads(D), L.q_norm, cfg_.rms_eps, q.heads(D));
                be_.rms_norm(k.heads(D), L.k_norm, cfg_.rms_eps, k.heads(D));
            }
            be_.rope(q, cfg_.n_heads, D, rope);
            be_.rope(k, cfg_.n_kv_heads, D, rope);
            be_.write_kv(l, k, v);
            if (L.attn_sinks) {
                be_.attention_sinks(l, q, cfg_.n_heads, layer_scale_[l], cfg_.window(l),
                                    L.attn_sinks, attn);
            } else {
                be_.attention(l, q, cfg_.n_heads, layer_scale_[l], cfg_.window(l), attn);
            }
            be_.matmul(L.wo, attn, tmp);
            if (shard_) be_.all_reduce(tmp);
            if (L.bo) be_.add_bias(tmp, L.bo);  // after the sum: once, on every rank
            if (L.post_attn_norm) be_.rms_norm(tmp, L.post_attn_norm, cfg_.rms_eps, tmp);
            be_.add(x, tmp);

            be_.rms_norm(x, L.ffn_norm, cfg_.rms_eps, xn);
            if (cfg_.is_moe()) {
                experts(L, xn, tmp);
            } else {
                dense_ffn(L, xn, tmp);
            }
            if (shard_) be_.all_reduce(tmp);
            if (L.post_ffn_norm) be_.rms_norm(tmp, L.post_ffn_norm, cfg_.rms_eps, tmp);
            be_.add(x, tmp);
        }
        for (const ForwardSpan &s : spans) s.kv->n_tokens += s.n;  // the KV is written

        // Final norm and logits for the rows that need them.
        logits.resize(size_t(n_logits) * cfg_.n_vocab);
        if (n_logits > 0) {
            Tensor last = last_.first_rows(n_logits), last_norm = last_norm_.first_rows(n_logits);
            be_.gather_logit_rows(x, last);
            be_.rms_norm(last, model_.output_norm(), cfg_.rms_eps, last_norm);
            if (shard_) {
                const ShardRanges &r = shard_->ranges();
                be_.logits(output_, last_norm, local_logits_.data());
                be_.gather_logits(local_logits_.data(), n_logits, r.n_vocab, r.vocab_stride,
                                  cfg_.n_vocab, logits.data());
            } else {
                be_.logits(output_, last_norm, logits.data());
            }
        }
        be_.end_batch();
    }

private:
    // out = the gated FFN of the layer's w_gate / w_up / w_down over xn.
    void dense_ffn(const LlamaLayer &L, Tensor xn, Tensor out) {
        const uint32_t T = xn.rows;
        Tensor gate = gate_.first_rows(T), up = up_.first_rows(T);
        be_.matmul(L.w_gate, xn, gate);
        be_.matmul(L.w_up, xn, up);
        glu(gate, up);
        be_.matmul(L.w_down, gate, out);
    }

    // gate = act(gate) * up, the model's activation.
    void glu(Tensor gate, Tensor up) {
        switch (cfg_.activation) {
            case FfnActivation::kGeluTanh:
                be_.geglu(gate, up);
                break;
            case FfnActivation::kSwigluOai:
                be_.swiglu_oai(gate, up, cfg_.glu_alpha, cfg_.glu_limit);
                break;
            case FfnActivation::kSilu:
                be_.swiglu(gate, up);
                break;
        }
    }

    // out = the weighted sum of each token's experts [+ the gated shared expert].
    void experts(const LlamaLayer &L, Tensor xn, Tensor out) {
        const ExpertRouting &r = cfg_.moe.routing;
        const uint32_t T = xn.rows, S = T * r.n_used, n = r.n_expert;
        Tensor router = router_.first_rows(T), routes = routes_.first_rows(T),
               eg = expert_gate_.first_rows(S), eu = expert_up_.first_rows(S),
               eo = expert_out_.first_rows(S);
        be_.matmul(L.router, xn, router);
        if (L.router_bias) be_.add_bias(router, L.router_bias);
        be_.route_experts(router, r, routes);
        be_.matmul_experts(L.gate_exps.data(), n, xn, routes, r.n_used, eg);
        be_.matmul_experts(L.up_exps.data(), n, xn, routes, r.n_used, eu);
        if (!L.gate_exps_bias.empty()) {
            be_.add_expert_bias(eg, routes, r.n_used, L.gate_exps_bias.data(), n);
            be_.add_expert_bias(eu, routes, r.n_used, L.up_exps_bias.data(), n);
        }
        glu(eg, eu);
        be_.matmul_experts(L.down_exps.data(), n, eg, routes, r.n_used, eo);
        if (!L.down_exps_bias.empty())
            be_.add_expert_bias(eo, routes, r.n_used, L.down_exps_bias.data(), n);
        be_.combine_experts(eo, routes, r.n_used, out);
        if (L.shared_gate.data) {
            Tensor sh = shared_out_.first_rows(T), sg = shared_gate_.first_rows(T);
            dense_ffn(L, xn, sh);
            be_.matmul(L.shared_gate, xn, sg);
            be_.mul_sigmoid(sh, sg);
            be_.add(out, sh);
        }
    }

    const LlamaModel &model_;
    const ModelShard *shard_;  // null: the whole model on one rank
    const LlamaConfig &cfg_;
    const std::vector<LlamaLayer> &layers_;
    const WeightMatrix &output_;
    Backend &be_;
    uint32_t max_tokens_;
    Tensor x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_, last_, last_norm_;
    Tensor router_, routes_, expert_gate_, expert_up_, expert_out_, shared_out_, shared_gate_;
    std::vector<std::vector<float>> inv_freq_;
    std::vector<RopeParams> ropes_;
    std::vector<float> layer_scale_;   // each layer's softmax scale (YaRN's factor included)
    std::vector<float> local_logits_;  // this rank's vocabulary columns (tensor parallelism)
};

}  // namespace

std::unique_ptr<Forward> Forward::create(const LlamaModel &model, Backend &backend,
                                         uint32_t max_tokens, const ModelShard *shard) {
    const std::string &arch = model.config().architecture;
    if (arch == "llama" || arch == "gemma3" || arch == "qwen2" || arch == "qwen3" ||
        arch == "phi3" || arch == "qwen2moe" || arch == "qwen3moe" || arch == "gpt-oss") {
        return std::make_unique<DecoderForward>(model, backend, max_tokens, shard);
    }
    fail(LLMKV_ERR_UNSUPPORTED, "no forward pass for architecture '%s'", arch.c_str());
}

}  // namespace llmkv
