// The Llama forward pass on the CPU backend, written once for a batch of spans: every
// span is a run of consecutive tokens of one session; all spans go through each weight
// matrix together (one GEMM per matrix per step), attention runs per span over its own
// block table.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "common/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/llama_model.h"

namespace llmkv {

struct ForwardSpan {
    SessionKv *kv;          // positions start at kv->n_tokens; blocks must be reserved
    const int32_t *tokens;  // n token ids
    uint32_t n;
    bool want_logits;       // produce logits for the span's last token
    bool all_logits = false;  // with want_logits: logits for every token of the span
    // Optional address of every sealed block (older ones in the host tier); see AttentionSpan.
    const uint8_t *const *block_data = nullptr;
};

// Checks a batch before anything runs (every backend calls this first): non-empty spans,
// tail slots and sealed blocks reserved, token ids inside the vocabulary, at most
// max_tokens tokens in all. Throws llmkv::Error; returns the batch's token count and how
// many logit rows it asks for.
struct BatchShape {
    uint32_t tokens = 0;
    uint32_t logit_rows = 0;
};
BatchShape validate_batch(const std::vector<ForwardSpan> &spans, const KvGeometry &g, uint32_t n_vocab,
                          uint32_t max_tokens);

class Forward {
public:
    Forward(const LlamaModel &model, KvCache &cache, ThreadPool &pool, uint32_t max_tokens);

    // Runs the batch. On return each span's kv->n_tokens has advanced by n, and logits
    // holds one n_vocab row per span with want_logits (n rows with all_logits), in span
    // order. Throws on bad input
    // (a token id outside the vocabulary) before touching any KV.
    void run(const std::vector<ForwardSpan> &spans, std::vector<float> &logits);

    uint32_t max_tokens() const { return max_tokens_; }

private:
    void write_kv_window(uint32_t layer, const ForwardSpan &span, uint32_t row0, uint32_t pos0,
                         uint16_t *win_k, uint16_t *win_v, uint32_t win_cap);

    const LlamaModel &model_;
    const LlamaConfig &cfg_;
    KvCache &cache_;
    ThreadPool &pool_;
    uint32_t max_tokens_;
    cpu::MatmulScratch matmul_scratch_;
    cpu::AttentionScratch attention_scratch_;
    std::vector<float> inv_freq_;   // (rope_dim / 2)
    // Activations, (max_tokens, width) row-major.
    std::vector<float> x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_;
    std::vector<uint16_t> window_;  // per-span fp16 K/V windows of the current layer
    std::vector<float> last_rows_;  // hidden states of rows that need logits
    std::vector<cpu::AttentionSpan> att_;  // per-span attention descriptors (reused every step)
    std::vector<uint32_t> row0_;           // first activation row of each span
};

// Helpers shared with tests.
void rms_norm(const float *x, const float *weight, uint32_t n, float eps, float *out);
void rope_rotate(float *v, uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim, uint32_t pos,
                 float freq_scale, const float *inv_freq);

}  // namespace llmkv
