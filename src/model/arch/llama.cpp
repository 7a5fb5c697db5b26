// The Llama forward pass (Llama 2/3, SmolLM2, TinyLlama, Mistral-style GQA): embeddings ->
// n_layers x (RMSNorm, QKV, RoPE, KV write, paged attention, output projection, residual,
// RMSNorm, SwiGLU MLP, residual) -> final norm -> logits for the rows that need them.
#include <cmath>

#include "common/error.h"
#include "model/arch/forward.h"

namespace llmkv {

namespace {

class LlamaForward final : public Forward {
public:
    LlamaForward(const LlamaModel &model, Backend &backend, uint32_t max_tokens)
        : model_(model), cfg_(model.config()), be_(backend), max_tokens_(max_tokens) {
        const uint32_t T = max_tokens;
        x_ = be_.alloc(T, cfg_.n_embd);
        xn_ = be_.alloc(T, cfg_.n_embd);
        q_ = be_.alloc(T, cfg_.q_dim());
        k_ = be_.alloc(T, cfg_.kv_dim());
        v_ = be_.alloc(T, cfg_.kv_dim());
        attn_ = be_.alloc(T, cfg_.q_dim());
        tmp_ = be_.alloc(T, cfg_.n_embd);
        gate_ = be_.alloc(T, cfg_.n_ff);
        up_ = be_.alloc(T, cfg_.n_ff);
        last_ = be_.alloc(T, cfg_.n_embd);
        last_norm_ = be_.alloc(T, cfg_.n_embd);
        inv_freq_.resize(cfg_.rope_dim / 2);
        const float *factors = model.rope_freq_factors();
        for (uint32_t i = 0; i < cfg_.rope_dim / 2; ++i) {
            double f = 1.0 / std::pow(double(cfg_.rope_freq_base), double(2 * i) / cfg_.rope_dim);
            if (factors) f /= factors[i];
            inv_freq_[i] = float(f);
        }
        rope_.style = RopeParams::Style::kAdjacent;
        rope_.rope_dim = cfg_.rope_dim;
        rope_.freq_scale = cfg_.rope_freq_scale;
        rope_.inv_freq = inv_freq_.data();

        WeightSet w;
        w.matrices.push_back(&model.token_embedding());
        if (model.output().data != model.token_embedding().data) w.matrices.push_back(&model.output());
        w.vectors.push_back({model.output_norm(), cfg_.n_embd});
        for (const LlamaLayer &L : model.layers()) {
            for (const WeightMatrix *m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
                w.matrices.push_back(m);
            }
            w.vectors.push_back({L.attn_norm, cfg_.n_embd});
            w.vectors.push_back({L.ffn_norm, cfg_.n_embd});
        }
        be_.load_weights(w);
    }

    uint32_t max_tokens() const override { return max_tokens_; }

    void run(const std::vector<ForwardSpan> &spans, std::vector<float> &logits) override {
        // Validate the whole batch before any KV is written.
        const BatchShape shape = validate_batch(spans, be_.kv_geometry(), cfg_.n_vocab, max_tokens_);
        const uint32_t T = shape.tokens, n_logits = shape.logit_rows;
        Tensor x = x_.first_rows(T), xn = xn_.first_rows(T), q = q_.first_rows(T), k = k_.first_rows(T),
               v = v_.first_rows(T), attn = attn_.first_rows(T), tmp = tmp_.first_rows(T),
               gate = gate_.first_rows(T), up = up_.first_rows(T);
        const float scale = 1.0f / std::sqrt(float(cfg_.head_dim));

        be_.begin_batch(spans, shape);
        be_.embed(model_.token_embedding(), x);
        for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
            const LlamaLayer &L = model_.layers()[l];
            be_.rms_norm(x, L.attn_norm, cfg_.rms_eps, xn);
            be_.matmul(L.wq, xn, q);
            be_.matmul(L.wk, xn, k);
            be_.matmul(L.wv, xn, v);
            be_.rope(q, cfg_.n_heads, cfg_.head_dim, rope_);
            be_.rope(k, cfg_.n_kv_heads, cfg_.head_dim, rope_);
            be_.write_kv(l, k, v);
            be_.attention(l, q, cfg_.n_heads, scale, attn);
            be_.matmul(L.wo, attn, tmp);
            be_.add(x, tmp);

            be_.rms_norm(x, L.ffn_norm, cfg_.rms_eps, xn);
            be_.matmul(L.w_gate, xn, gate);
            be_.matmul(L.w_up, xn, up);
            be_.swiglu(gate, up);
            be_.matmul(L.w_down, gate, tmp);
            be_.add(x, tmp);
        }
        for (const ForwardSpan &s : spans) s.kv->n_tokens += s.n;  // the KV is written

        // Final norm and logits for the rows that need them.
        logits.resize(size_t(n_logits) * cfg_.n_vocab);
        if (n_logits > 0) {
            Tensor last = last_.first_rows(n_logits), last_norm = last_norm_.first_rows(n_logits);
            be_.gather_logit_rows(x, last);
            be_.rms_norm(last, model_.output_norm(), cfg_.rms_eps, last_norm);
            be_.logits(model_.output(), last_norm, logits.data());
        }
        be_.end_batch();
    }

private:
    const LlamaModel &model_;
    const LlamaConfig &cfg_;
    Backend &be_;
    uint32_t max_tokens_;
    Tensor x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_, last_, last_norm_;
    std::vector<float> inv_freq_;
    RopeParams rope_;
};

}  // namespace

std::unique_ptr<Forward> Forward::create(const LlamaModel &model, Backend &backend, uint32_t max_tokens) {
    const std::string &arch = model.config().architecture;
    if (arch == "llama") return std::make_unique<LlamaForward>(model, backend, max_tokens);
    fail(LLMKV_ERR_UNSUPPORTED, "no forward pass for architecture '%s'", arch.c_str());
}

}  // namespace llmkv
