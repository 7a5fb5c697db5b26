// The model description of every decoder-only architecture llmkv runs (GGUF
// general.architecture "llama" (Llama 2/3, Mistral, SmolLM2, TinyLlama, Mixtral), "gemma3",
// "qwen2", "qwen3", "phi3", and the mixtures of experts "qwen2moe", "qwen3moe" and "gpt-oss"):
// hyperparameters read from GGUF metadata, per-layer attention shape (sliding window or full, RoPE
// parameters), and the weight tensors bound in place (still in their GGUF formats) for the forward
// pass (model/arch/). The names LlamaModel / LlamaConfig are historical: one description serves
// every architecture above.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "tensor/weights.h"

namespace llmkv {

// Rotary embedding of a group of layers: inverse frequencies base^(-2i/rope_dim) divided by
// the file's frequency factors (if any), positions multiplied by freq_scale.
struct LayerRope {
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;       // linear scaling: positions are multiplied by this
    bool use_freq_factors = true;  // rope_freqs / rope_factors_* apply to these layers
    // YaRN (rope.scaling.type "yarn", gpt-oss): pair i turns at
    //   pos * inv_freq[i] * (freq_scale (1 - mix_i) + mix_i),
    //   mix_i = yarn_ext_factor * (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)),
    // lo = floor(corr(beta_fast)), hi = ceil(corr(beta_slow)) clamped to [0, rope_dim - 1],
    // corr(b) = rope_dim ln(orig_ctx / (2 pi b)) / (2 ln freq_base) (llama.cpp's
    // definition: the correction range is always truncated), and the rotated q and k are
    // multiplied by attn_factor (so q.k by its square). yarn_ext_factor 0: no YaRN.
    float yarn_ext_factor = 0.0f;
    float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
    uint32_t yarn_orig_ctx = 0;
    float attn_factor = 1.0f;
};

// The inverse frequencies of a rope_dim-wide RoPE: base^(-2i/rope_dim), divided by factors[i]
// (null: none; applied only with use_freq_factors), with YaRN's per-pair mix when the rope
// has one (then positions are not scaled further: RopeParams::freq_scale is 1).
std::vector<float> rope_inv_freq(const LayerRope &rope, uint32_t rope_dim, const float *factors);
// The position multiplier the backends apply with those frequencies.
inline float rope_position_scale(const LayerRope &rope) {
    return rope.yarn_ext_factor != 0.0f ? 1.0f : rope.freq_scale;
}

enum class FfnActivation : uint8_t {
    kSilu,      // down(silu(gate) * up)        Llama, Qwen, Phi-3
    kGeluTanh,  // down(gelu_tanh(gate) * up)   Gemma
    // gpt-oss: down(g sigmoid(alpha g) (u + 1)) with g = min(gate, limit) and
    // u = clamp(up, -limit, limit) (LlamaConfig::glu_alpha, glu_limit)
    kSwigluOai,
};

// The mixture-of-experts feed-forward of a model (routing.n_expert 0: every layer is dense).
// Each token's router logits (ffn_gate_inp) pick its routing.n_used experts; the layer's
// output is the weighted sum of their SwiGLU FFNs (ffn_{gate,up,down}_exps), plus a shared
// expert where the family has one (qwen2moe: ffn_*_shexp, scaled by
// sigmoid(ffn_gate_inp_shexp . x)).
struct MoeConfig {
    ExpertRouting routing;     // expert_count, expert_used_count, gating, normalisation, scale
    uint32_t n_ff_expert = 0;  // one expert's feed-forward width
    uint32_t n_ff_shared = 0;  // the shared expert's width (0: none)
};

struct LlamaConfig {
    std::string architecture;  // GGUF general.architecture: llama, gemma3, qwen2, qwen3, phi3,
                               // qwen2moe, qwen3moe, gpt-oss
    std::string name;
    uint32_t n_vocab = 0;
    uint32_t n_ctx_train = 0;
    uint32_t n_embd = 0;
    uint32_t n_ff = 0;
    uint32_t n_layers = 0;
    uint32_t n_heads = 0;
    uint32_t n_kv_heads = 0;
    uint32_t head_dim = 0;
    uint32_t rope_dim = 0;  // rotated dimensions (== head_dim for Llama)
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;  // linear scaling: positions are multiplied by this
    float rms_eps = 1e-5f;
    bool tied_output = false;

    // ---- what differs between architectures --------------------------------------------
    bool rope_neox = false;   // RoPE pairs (i, i + rope_dim/2) instead of (2i, 2i+1)
    float embd_scale = 1.0f;  // embeddings are multiplied by this (Gemma: sqrt(n_embd))
    float attn_scale = 0.0f;  // softmax scale of q.k (1/sqrt(head_dim) unless a key says)
    FfnActivation activation = FfnActivation::kSilu;  // of the dense FFN and the experts
    float glu_alpha = 1.702f, glu_limit = 7.0f;       // kSwigluOai's constants
    // Learned attention sinks (gpt-oss: attn_sinks): one logit per query head that joins
    // every softmax of the head's attention and weighs no value.
    bool attn_sinks = false;
    bool qk_norm = false;     // per-head RMSNorm of q and k before RoPE (Gemma 3, Qwen3)
    bool qkv_bias = false;    // q/k/v projections have biases (Qwen2)
    bool post_norms = false;  // RMSNorm of the attention and FFN outputs before the
                              // residual adds (Gemma 2/3: post_attention_norm, post_ffw_norm)
    MoeConfig moe;            // n_expert > 0: the feed-forward is a mixture of experts

    // ---- per layer ------------------------------------------------------------------------
    // Sliding-window size of each layer: the query at position p attends to positions j with
    // p - window < j <= p; 0 = full causal attention. A local layer's attention never reads
    // a sealed KV block whose positions all lie before the window of the span's first query,
    // so the KV manager may release such blocks' storage for local layers.
    std::vector<uint32_t> layer_window;
    // RoPE of each layer: index into `ropes` (Gemma 3: local layers base 10000, global layers
    // rope.freq_base with the file's scaling).
    std::vector<uint8_t> layer_rope;
    std::vector<LayerRope> ropes;
    uint32_t sliding_window = 0;  // the file's attention.sliding_window (0: none)

    bool is_moe() const { return moe.routing.n_expert > 0; }
    uint32_t q_dim() const { return n_heads * head_dim; }
    uint32_t kv_dim() const { return n_kv_heads * head_dim; }
    bool is_local(uint32_t layer) const {
        return layer < layer_window.size() && layer_window[layer] != 0;
    }
    uint32_t window(uint32_t layer) const {
        return layer < layer_window.size() ? layer_window[layer] : 0;
    }
    const LayerRope &rope(uint32_t layer) const { return ropes[layer_rope[layer]]; }
};
using ModelConfig = LlamaConfig;

struct LlamaLayer {
    const float *attn_norm = nullptr;  // (n_embd)
    // (q_dim, n_embd) (kv_dim, n_embd) x2, (n_embd, q_dim). Phi-3's fused attn_qkv is bound
    // as three row ranges of one tensor.
    WeightMatrix wq, wk, wv, wo;
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // (q_dim) (kv_dim) x2, or null
    const float *bo = nullptr;                                // (n_embd), or null (gpt-oss)
    const float *attn_sinks = nullptr;                        // (n_heads), or null (gpt-oss)
    const float *q_norm = nullptr, *k_norm = nullptr;         // (head_dim), or null
    const float *post_attn_norm = nullptr;                    // (n_embd), or null
    const float *ffn_norm = nullptr;                          // (n_embd)
    // (n_ff, n_embd). Phi-3's fused ffn_up (gate rows, then up rows) is bound as two ranges.
    WeightMatrix w_gate, w_up;
    WeightMatrix w_down;                   // (n_embd, n_ff)
    const float *post_ffn_norm = nullptr;  // (n_embd), or null

    // ---- mixture of experts (LlamaConfig::is_moe()) -----------------------------
    // Then w_gate, w_up and w_down are the shared expert's (n_ff_shared wide) or empty
    // (rows 0, data null) without one.
    WeightMatrix router{};  // ffn_gate_inp (n_expert, n_embd)
    // Expert e's matrices: views of the 3-D ffn_{gate,up,down}_exps tensors, n_expert each:
    // gate and up (n_ff_expert, n_embd), down (n_embd, n_ff_expert).
    std::vector<WeightMatrix> gate_exps, up_exps, down_exps;
    WeightMatrix shared_gate{};  // ffn_gate_inp_shexp (1, n_embd), or empty
    // gpt-oss's biases: the router's (n_expert), and per expert e the gate and up
    // biases (n_ff_expert) and the down bias (n_embd): views of ffn_*_exps.bias. Empty: none;
    // a null entry: none for that expert (another tensor-parallel rank adds it).
    const float *router_bias = nullptr;
    std::vector<const float *> gate_exps_bias, up_exps_bias, down_exps_bias;
};

class LlamaModel {
public:
    // Validates every tensor's presence, type and shape against the config. Throws
    // llmkv::Error (MODEL_FORMAT / UNSUPPORTED) naming the tensor or key.
    static std::unique_ptr<LlamaModel> load(std::shared_ptr<const GgufFile> file);

    const LlamaConfig &config() const { return config_; }
    const std::vector<LlamaLayer> &layers() const { return layers_; }
    const WeightMatrix &token_embedding() const { return token_embd_; }  // (n_vocab, n_embd)
    const WeightMatrix &output() const { return output_; }               // (n_vocab, n_embd)
    const float *output_norm() const { return output_norm_; }
    // Per-pair frequency divisors from rope_freqs.weight (Llama 3) or rope_factors_short
    // (Phi-3), or nullptr.
    const float *rope_freq_factors() const { return rope_freq_factors_; }
    const GgufFile &file() const { return *file_; }
    uint64_t n_params() const { return n_params_; }
    uint64_t weight_bytes() const { return weight_bytes_; }
    // What one decoded token reads: every parameter of a dense model; of a mixture of experts
    // all but the unchosen experts' (n_used of n_expert experts per layer).
    uint64_t n_active_params() const;
    uint64_t active_weight_bytes() const;
    // Hex SHA-like fingerprint of hyperparameters and tensor layout (used to salt caches).
    const std::string &fingerprint() const { return fingerprint_; }

private:
    LlamaModel() = default;
    const float *f32_vector(const std::string &name, uint32_t n, bool required);
    // A 2-D f32 tensor [cols, rows] (GGUF dims) as rows x cols values, or null when absent
    // and not required.
    const float *f32_rows(const std::string &name, uint32_t rows, uint32_t cols, bool required);
    const float *f32_values(const std::string &name, const GgufTensor &t, size_t n);
    WeightMatrix matrix(const std::string &name, uint32_t rows, uint32_t cols);
    // The n views of a 3-D tensor [cols, rows, n] (GGUF dims): n matrices of rows x cols.
    std::vector<WeightMatrix> matrices(const std::string &name, uint32_t n, uint32_t rows,
                                       uint32_t cols);
    void bind_moe(LlamaLayer &L, const std::string &blk);
    void read_config();
    void bind_weights();

    std::shared_ptr<const GgufFile> file_;
    LlamaConfig config_;
    std::vector<LlamaLayer> layers_;
    WeightMatrix token_embd_{};
    WeightMatrix output_{};
    const float *output_norm_ = nullptr;
    const float *rope_freq_factors_ = nullptr;
    std::vector<std::vector<float>> owned_vectors_;  // norms stored as f16/bf16 in the file
    uint64_t n_params_ = 0;
    uint64_t weight_bytes_ = 0;
    uint64_t expert_params_ = 0, expert_bytes_ = 0;  // of the routed experts' tensors
    std::string fingerprint_;
};

}  // namespace llmkv
