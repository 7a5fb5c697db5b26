// Paged attention on the CPU backend: queries attend over a session's sealed blocks (read
// in their codec directly, dequantized in registers, Hadamard-rotated codecs handled by
// rotating q and the V sum once) and its fp16 window of recent rows.
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
    // Optional: the address of each sealed block, for sessions whose older blocks live in
    // the host tier (read in place: host memory is addressable by the CPU). Null: every
    // block is a device-pool block, found through kv->blocks.
    const uint8_t *const *block_data = nullptr;
    // KV sink (KvGeometry::sink): the session's tail slot, whose sink rows hold position 0's
    // K and V in fp16; a query that reads sealed block 0 takes position 0 from there
    // instead (score and V row), the block's quantized copy weighing 0. Null: no sink.
    const uint8_t *sink = nullptr;

    // Token block j's sealed block for `layer` (its group's block with layer groups; host
    // addresses exist only without groups, see KvManager::offload_blocks).
    const uint8_t *block(const KvCache &cache, uint32_t layer, uint32_t j) const {
        return block_data ? block_data[j] : cache.sealed_data(cache.block_id(*kv, layer, j));
    }
};

struct AttentionParams {
    uint32_t layer;
    uint32_t n_heads;
    float scale;  // usually 1/sqrt(head_dim)
    uint32_t q_stride;
    uint32_t out_stride;
    // Sliding window: the query at position p sees positions j with p - window < j <= p
    // (0: every j <= p). Sealed blocks wholly before the window are never read.
    uint32_t window = 0;
    // Learned attention sinks (gpt-oss): n_heads logits, head h's joining each of its
    // softmaxes unscaled and weighing no value (out = sum_j e^s_j v_j / (sum_j e^s_j +
    // e^sinks[h])). Null: none.
    const float *sinks = nullptr;
};

// How the sealed K and V heads are stored (codec and rotation of each).
struct AttentionCodecs {
    CodecSpec k;
    CodecSpec v;
};
// The codecs of a cache: dtype_k / dtype_v and, once KvGeometry has them, rotate_k / rotate_v.
inline AttentionCodecs attention_codecs(const KvGeometry &g) {
    return {codec_spec_k(g), codec_spec_v(g)};
}

// Context partitions: a query's visible positions are cut into partitions of this many
// positions (a whole number of blocks, counted from the first block the query reads), each
// computed as one work item; a query with more than one is combined from the partitions'
// max / sum of exp / unnormalized V sums in partition order. The size depends on the block
// size only, never on the thread count or the batch, so results do not either.
constexpr uint32_t kAttentionPartitionTokens = 1024;
inline uint32_t attention_partition_tokens(uint32_t block_tokens) {
    const uint32_t blocks = kAttentionPartitionTokens / block_tokens;
    return (blocks > 0 ? blocks : 1) * block_tokens;
}

// Reusable buffers (grown only when a longer context, a larger batch or head_dim appears),
// so paged_attention allocates nothing once warm.
class AttentionScratch {
public:
    // One work unit of paged_attention: one partition of one query of one span, all heads.
    struct Unit {
        uint32_t span, query, part, n_parts;
        size_t partial;  // multi-partition queries: offset of the query's partials (floats)
        size_t cost;     // positions read plus a fixed overhead (for splitting the work)
    };
    float *scores(unsigned thread, size_t n);  // f32 [n]: one score per position of a partition
    float *work(unsigned thread, size_t n);    // f32 [n]: rotated q, rotated V sum
    float *partials(size_t n);                 // f32 [n]: per-partition results, shared
    std::vector<size_t> &span_offsets() { return offsets_; }
    std::vector<Unit> &units() { return units_; }
    std::vector<size_t> &combine_units() { return combine_; }

private:
    struct PerThread {
        std::vector<float> scores;
        std::vector<float> work;
    };
    std::vector<PerThread> per_thread_;
    std::vector<size_t> offsets_;
    std::vector<Unit> units_;
    std::vector<size_t> combine_;
    std::vector<float> partials_;
};

// Causal attention for every (span, query, head) over sealed blocks in the cache's codecs
// (attention_codecs(cache.geometry())). Each (query, head, context partition) is computed
// by one thread in a fixed order and partitions are combined in a fixed order, so results
// do not depend on batching or thread count.
void paged_attention(KvCache &cache, const AttentionParams &params, const AttentionSpan *spans,
                     size_t n_spans, ThreadPool &pool, AttentionScratch &scratch);
// Same with the codecs given explicitly (their dtypes must be the geometry's; the rotation
// flags say how the sealed heads were encoded).
void paged_attention(KvCache &cache, const AttentionCodecs &codecs, const AttentionParams &params,
                     const AttentionSpan *spans, size_t n_spans, ThreadPool &pool,
                     AttentionScratch &scratch);

// Obvious reference: decodes every visible row to f32 with codec_decode_head (which undoes
// the rotation) and computes softmax(qK^T)V in double precision. For tests.
void paged_attention_reference(KvCache &cache, const AttentionParams &params,
                               const AttentionSpan *spans, size_t n_spans);
void paged_attention_reference(KvCache &cache, const AttentionCodecs &codecs,
                               const AttentionParams &params, const AttentionSpan *spans,
                               size_t n_spans);

// Row kernels over one sealed block head in its stored domain (exposed for tests and the
// CUDA parity checks); n is the block's token count (the int4 layouts depend on it).
// For a rotated head, q must be rotated (H q) and out receives H-rotated values.
// scores[t] = dot(q, K[t]) for t < n;   out += sum_t w[t] * V[t]
// q, out: f32 [head_dim]; scores, w: f32 [n]; k_head / v_head: one head (kv/codec.h).
void head_scores(llmkv_kv_dtype dtype, const float *q, const uint8_t *k_head, uint32_t n,
                 uint32_t head_dim, float *scores);
void head_accumulate(llmkv_kv_dtype dtype, const float *w, const uint8_t *v_head, uint32_t n,
                     uint32_t head_dim, float *out);

}  // namespace llmkv::cpu
