// Tiny synthetic models for tests, in the GGUF layout of each architecture llmkv runs
// (llama, gemma3, qwen2, qwen3, phi3: key and tensor names as llama.cpp's converter writes
// them): random weights in any supported tensor format, a byte-level BPE vocabulary (256
// byte tokens, a few merges, ChatML specials), written as a GGUF file by the test itself.
// Also a naive double-precision reference forward pass over them, written independently
// of src/model/arch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor_type.h"

namespace llmkv::testing {

struct TinyModelSpec {
    std::string arch = "llama";  // general.architecture: llama, gemma3, qwen2, qwen3, phi3,
                                 // qwen2moe, qwen3moe
    uint32_t n_layers = 2;
    uint32_t n_embd = 64;
    uint32_t n_ff = 96;
    uint32_t n_heads = 4;
    uint32_t n_kv_heads = 2;
    uint32_t n_ctx = 256;
    float rope_base = 10000.0f;
    TensorType weight_type = TensorType::F32;  // attention and MLP matrices
    TensorType embd_type = TensorType::F32;    // token embedding (and tied output head)
    bool tied_output = true;
    uint64_t seed = 42;
    // Standard deviation of token_embd's values. Below 1 the layers' outputs weigh more against
    // the embedding in the residual stream (gemma3 scales it by sqrt(n_embd)), so tokens depend
    // on what attention reads.
    float embd_scale = 1.0f;
    // attention.key_length / value_length (0: not written, head_dim = n_embd / n_heads).
    uint32_t head_dim = 0;
    // gemma3: attention.sliding_window (0: not written) and attention.sliding_window_pattern
    // (0: not written, the default period 6 applies).
    uint32_t sliding_window = 0;
    uint32_t window_pattern = 0;
    float rope_base_local = 10000.0f;  // gemma3: RoPE base of the sliding-window layers
    // A mixture of experts (arch llama, qwen2moe, qwen3moe): n_expert > 0 writes expert_count,
    // expert_used_count, ffn_gate_inp (F32, values of deviation router_scale) and
    // ffn_{gate,up,down}_exps (weight_type) n_ff_expert wide instead of the dense FFN
    // (llama: feed_forward_length is the experts' width, n_ff_expert unused); n_ff_shared > 0
    // adds qwen2moe's shared expert and its gate.
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 2;
    uint32_t n_ff_expert = 64;
    uint32_t n_ff_shared = 0;
    float router_scale = 1.0f;
    // Hostile files (loader tests): experts written in ffn_down_exps (0: n_expert), and whether
    // expert_used_count is written.
    uint32_t n_expert_down = 0;
    bool write_expert_used = true;

    uint32_t hd() const { return head_dim ? head_dim : n_embd / n_heads; }
};

// Token ids of the tiny vocabulary.
struct TinyVocab {
    static constexpr int32_t kFirstMerge = 256;
    static constexpr int32_t kNumMerges = 4;
    static constexpr int32_t kEndOfText = 260;  // <|endoftext|>, eos/bos
    static constexpr int32_t kImStart = 261;
    static constexpr int32_t kImEnd = 262;
    static constexpr int32_t kSize = 263;
};

// Writes the model to path (throws std::runtime_error on IO failure).
void write_tiny_model(const TinyModelSpec &spec, const std::string &path);
// Same bytes, in memory.
std::vector<uint8_t> build_tiny_model(const TinyModelSpec &spec);

// Naive reference: runs tokens[0..n) from position 0 with dense f32 math on dequantized
// weights and returns the logits of every position (n x vocab).
std::vector<std::vector<float>> reference_logits(const TinyModelSpec &spec,
                                                 const std::vector<int32_t> &tokens);

// A temp file path unique to this process and name.
std::string temp_path(const std::string &name);

}  // namespace llmkv::testing
