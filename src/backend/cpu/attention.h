// Paged attention on the CPU backend: queries attend over a session's sealed blocks (read
// in their codec directly, dequantized in registers) and its fp16 window of recent rows.
#pragma once

#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "kv/kv_cache.h"

namespace llmkv::cpu {

// One span of queries from one session, for one layer.
struct AttentionSpan {
    const SessionKv *kv;       // sealed block table (blocks < pos/B must be sealed for this layer)
    const uint16_t *window_k;  // fp16 [n_kv_heads][window_capacity][head_dim]
    const uint16_t *window_v;  // fp16 [n_kv_heads][window_capacity][head_dim]
    uint32_t window_start;     // position of window row 0 (a multiple of block_tokens)
    uint32_t window_capacity;  // rows per head in the window buffers
    uint32_t pos0;             // position of the first query
    uint32_t n;                // number of queries
    const float *q;            // (n, n_heads * head_dim), row stride q_stride, RoPE applied
    float *out;                // (n, n_heads * head_dim), row stride out_stride
};

struct AttentionParams {
    uint32_t layer;
    uint32_t n_heads;
    float scale;               // usually 1/sqrt(head_dim)
    uint32_t q_stride;
    uint32_t out_stride;
};

// Reusable per-thread score buffers (grown only when a longer context appears).
class AttentionScratch {
public:
    float *scores(unsigned thread, size_t n);

private:
    std::vector<std::vector<float>> per_thread_;
};

// Causal attention for every (span, query, head). Each output row is computed by one
// thread in a fixed order, so results do not depend on batching or thread count.
void paged_attention(KvCache &cache, const AttentionParams &params, const AttentionSpan *spans,
                     size_t n_spans, ThreadPool &pool, AttentionScratch &scratch);

// Obvious reference: dequantizes every visible row to f32 and computes softmax(qK^T)V in
// double precision. For tests.
void paged_attention_reference(KvCache &cache, const AttentionParams &params,
                               const AttentionSpan *spans, size_t n_spans);

// Row kernels over one block head (exposed for tests and the CUDA parity checks).
// scores[t] = dot(q, K[t]) for t < n;   out += sum_t w[t] * V[t]
void head_scores(llmkv_kv_dtype dtype, const float *q, const uint8_t *k_head, uint32_t n,
                 uint32_t head_dim, float *scores);
void head_accumulate(llmkv_kv_dtype dtype, const float *w, const uint8_t *v_head, uint32_t n,
                     uint32_t head_dim, float *out);

}  // namespace llmkv::cpu
