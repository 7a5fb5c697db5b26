// The Llama-family model description: hyperparameters read from GGUF metadata and the
// weight tensors bound in place (still in their GGUF formats) for the forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/weights.h"
#include "model/gguf.h"

namespace llmkv {

struct LlamaConfig {
    std::string architecture;  // "llama"
    std::string name;
    uint32_t n_vocab = 0;
    uint32_t n_ctx_train = 0;
    uint32_t n_embd = 0;
    uint32_t n_ff = 0;
    uint32_t n_layers = 0;
    uint32_t n_heads = 0;
    uint32_t n_kv_heads = 0;
    uint32_t head_dim = 0;
    uint32_t rope_dim = 0;          // rotated dimensions (== head_dim for Llama)
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;   // linear scaling: positions are multiplied by this
    float rms_eps = 1e-5f;
    bool tied_output = false;

    uint32_t q_dim() const { return n_heads * head_dim; }
    uint32_t kv_dim() const { return n_kv_heads * head_dim; }
};

struct LlamaLayer {
    const float *attn_norm = nullptr;  // (n_embd)
    WeightMatrix wq, wk, wv, wo;  // (q_dim, n_embd) (kv_dim, n_embd) x2, (n_embd, q_dim)
    const float *ffn_norm = nullptr;   // (n_embd)
    WeightMatrix w_gate, w_up;    // (n_ff, n_embd)
    WeightMatrix w_down;          // (n_embd, n_ff)
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
    // Per-pair frequency divisors from rope_freqs.weight (Llama 3), or nullptr.
    const float *rope_freq_factors() const { return rope_freq_factors_; }
    const GgufFile &file() const { return *file_; }
    uint64_t n_params() const { return n_params_; }
    uint64_t weight_bytes() const { return weight_bytes_; }
    // Hex SHA-like fingerprint of hyperparameters and tensor layout (used to salt caches).
    const std::string &fingerprint() const { return fingerprint_; }

private:
    LlamaModel() = default;
    const float *f32_vector(const std::string &name, uint32_t n, bool required);
    WeightMatrix matrix(const std::string &name, uint32_t rows, uint32_t cols);

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
    std::string fingerprint_;
};

}  // namespace llmkv
