// KvGeometry: THE description of the KV store's byte layout, shared by the block pool
// (kv/kv_cache.h), the codecs (kv/codec.h), the snapshot writer (kv/snapshot.h), the CPU
// attention and the CUDA kernels (kernels/, compiled by nvcc: this header is plain C++ with
// host/device annotations, and needs nothing but llmkv.h).
//
//   sealed block (sealed_block_bytes): for each layer l: K heads [H][head_bytes_k], then
//                V heads [H][head_bytes_v]; one head = B tokens x D dims in its codec.
//   tail slot (tail_block_bytes): for each layer l: K [H][C'][D] fp16, then V [H][C'][D]
//                fp16, C = B + R (block_tokens + residual_tokens) rows of positions, and
//                C' = C, or C + 1 with the KV sink (`sink`): row C of each head then holds
//                position 0's K or V, which attention reads instead of its sealed copy.
// With n tokens computed, the first sealed_blocks(n) = max(0, n - R) / B blocks are sealed
// and the tail holds positions [sealed_blocks(n) * B, n) from row 0.
#pragma once

#include <cstddef>
#include <cstdint>

#include "llmkv.h"

#if defined(__CUDACC__)
#define LLMKV_HD __host__ __device__ __forceinline__
#else
#define LLMKV_HD inline
#endif

namespace llmkv {

// Values of the int4 V layout: scales per group of this many dims.
LLMKV_HD uint32_t int4_v_group(uint32_t head_dim) {
    return head_dim % 32 == 0 ? 32u : 16u;
}

// ---- LLMKV_KV_INT4_COMPACT (layout in kv/codec.h) -------------------------------------
// V: one (scale, min) index pair per token and group of this many dims.
LLMKV_HD uint32_t int4c_v_group(uint32_t head_dim) {
    return head_dim % 64 == 0 ? 64u : head_dim % 32 == 0 ? 32u : 16u;
}
// Bytes of the three fp16 steps (z0, zstep, sstep) that head each compact int4 head's indices.
constexpr uint32_t kInt4cHeaderBytes = 6;

// Bytes of one head of one sealed block in a codec, scales included (0 for an unknown
// dtype). K and V differ only for the int4 codecs (K per channel over the block, V per token in
// groups).
LLMKV_HD size_t kv_head_bytes(uint32_t dtype, bool is_v, uint32_t block_tokens, uint32_t head_dim) {
    const size_t B = block_tokens, D = head_dim;
    switch (dtype) {
        case LLMKV_KV_F16:
        case LLMKV_KV_BF16:
            return B * D * 2;
        case LLMKV_KV_FP8_E4M3:
        case LLMKV_KV_INT8:
            return B * D + B * 2;
        case LLMKV_KV_INT4:
            return is_v ? B * D / 2 + B * (D / int4_v_group(head_dim)) * 4 : B * D / 2 + D * 4;
        case LLMKV_KV_INT4_COMPACT:
            return is_v ? B * D / 2 + kInt4cHeaderBytes + B * (D / int4c_v_group(head_dim))
                        : B * D / 2 + kInt4cHeaderBytes + D + D / 2;
        default:
            return 0;
    }
}

struct KvGeometry {
    uint32_t n_layers = 0;
    uint32_t n_kv_heads = 0;
    uint32_t head_dim = 0;
    uint32_t block_tokens = 16;
    llmkv_kv_dtype dtype_k = LLMKV_KV_F16;
    llmkv_kv_dtype dtype_v = LLMKV_KV_F16;
    uint32_t residual_tokens = 0;  // newest tokens always kept in fp16 (besides the partial block)
    bool rotate_k = false;         // sealed K stored Hadamard-rotated along head_dim
    bool rotate_v = false;         // sealed V stored Hadamard-rotated along head_dim
    // KV sink: position 0's K and V stay in fp16 in one extra row per head of the tail slot
    // (written when position 0 is computed, kept for the session's life) and attention reads
    // them there in place of the sealed block's quantized copy. Most queries weigh the first
    // position heavily, so its quantization error reaches every later token.
    bool sink = false;

    // ---- sliding-window layers (layer groups) -------------------------------------------
    // A model whose local layers attend over the last `window` positions only keeps their
    // sealed KV in separate blocks, so that blocks no query can see any more are released
    // for those layers while the global layers keep theirs. The layers are split into
    // n_groups groups of group_layers layers each, every group's block the same size (one
    // pool): group 0 holds the global layers (in layer order), groups 1.. the local layers
    // (in layer order, group_layers per group; the last one may have unused slots). A
    // session's block table then holds, per token block, its group-0 block
    // (SessionKv::blocks) and n_groups - 1 local blocks (SessionKv::local), the latter
    // released once the block leaves every local layer's window.
    // With n_groups == 1 (the default) every layer is in group 0 and nothing is released:
    // the layout is the plain one above.
    uint32_t window = 0;  // tokens a local layer's query sees, itself included
    uint32_t n_groups = 1;
    uint32_t group_layers = 0;        // layers per group block (0: n_layers)
    uint64_t local_mask[2] = {0, 0};  // bit l: layer l is a local (sliding-window) layer

    LLMKV_HD bool grouped() const { return n_groups > 1; }
    LLMKV_HD uint32_t block_layers() const { return n_groups > 1 ? group_layers : n_layers; }
    LLMKV_HD bool layer_local(uint32_t l) const {
        return n_groups > 1 && l < 128 && ((local_mask[l >> 6] >> (l & 63)) & 1u);
    }
    // Local layers below layer l.
    LLMKV_HD uint32_t local_rank(uint32_t l) const {
        uint32_t n = 0;
        for (uint32_t w = 0; w < 2; ++w) {
            const uint32_t lo = w * 64;
            if (l <= lo) break;
            const uint32_t bits = l - lo >= 64 ? 64 : l - lo;
            const uint64_t m =
                bits == 64 ? local_mask[w] : (local_mask[w] & ((uint64_t(1) << bits) - 1));
#if defined(__CUDA_ARCH__)
            n += uint32_t(__popcll(m));
#else
            n += uint32_t(__builtin_popcountll(m));
#endif
        }
        return n;
    }
    // The group whose blocks hold layer l, and the layer's slot inside such a block.
    LLMKV_HD uint32_t layer_group(uint32_t l) const {
        return layer_local(l) ? 1 + local_rank(l) / group_layers : 0;
    }
    LLMKV_HD uint32_t layer_slot(uint32_t l) const {
        if (n_groups <= 1) return l;
        return layer_local(l) ? local_rank(l) % group_layers : l - local_rank(l);
    }
    // First token block whose local-layer KV a query at position n or later can still see
    // (a query at p sees positions p - window + 1 .. p); with groups, the local blocks of
    // earlier token blocks are released.
    LLMKV_HD uint32_t local_live_from(uint32_t n_tokens) const {
        if (n_groups <= 1 || n_tokens + 1 <= window) return 0;
        return (n_tokens + 1 - window) / block_tokens;
    }
    // Local block-table entries of a session with n_tokens computed whose blocks are held
    // (not released): (n_groups - 1) per sealed token block from local_live_from.
    LLMKV_HD uint32_t live_local_blocks(uint32_t n_tokens) const {
        const uint32_t sealed = sealed_blocks(n_tokens), from = local_live_from(n_tokens);
        return n_groups > 1 && sealed > from ? (sealed - from) * (n_groups - 1) : 0;
    }
    // Pool blocks a session with n_tokens computed holds (group 0 and live local blocks).
    LLMKV_HD uint32_t held_blocks(uint32_t n_tokens) const {
        return sealed_blocks(n_tokens) + live_local_blocks(n_tokens);
    }

    // Sealed blocks of a session whose first n_tokens positions hold KV.
    LLMKV_HD uint32_t sealed_blocks(uint32_t n_tokens) const {
        return n_tokens > residual_tokens ? (n_tokens - residual_tokens) / block_tokens : 0;
    }
    LLMKV_HD uint32_t tail_capacity() const {
        return block_tokens + residual_tokens;
    }

    // ---- the fp16 window of a span (one batch, one layer at a time) -----------------------
    // (Not the sliding `window` above.) A span appending n tokens to a session with pos0
    // computed builds, per layer, an fp16 window of positions [span_window_start(pos0),
    // pos0 + n): rows [0, pos0 - start) are the tail slot's rows, the rest the new K/V. The
    // blocks it completes are sealed from it and what stays unsealed goes back to the tail.
    // Per head it has span_window_rows(pos0, n) rows; the backends lay K out [H][rows][D],
    // then V likewise.
    LLMKV_HD uint32_t span_window_start(uint32_t pos0) const {
        return sealed_blocks(pos0) * block_tokens;
    }
    LLMKV_HD uint32_t span_window_rows(uint32_t pos0, uint32_t n) const {
        return pos0 - span_window_start(pos0) + n;
    }
    // The most window rows of a batch of at most max_spans spans and max_tokens tokens: a
    // span's tail part is at most tail_capacity() - 1 rows.
    LLMKV_HD size_t batch_window_rows_max(uint32_t max_spans, uint32_t max_tokens) const {
        return size_t(max_spans) * (tail_capacity() - 1) + max_tokens;
    }

    LLMKV_HD size_t head_bytes_k() const {
        return kv_head_bytes(dtype_k, false, block_tokens, head_dim);
    }
    LLMKV_HD size_t head_bytes_v() const {
        return kv_head_bytes(dtype_v, true, block_tokens, head_dim);
    }
    LLMKV_HD size_t sealed_layer_bytes() const {
        return size_t(n_kv_heads) * (head_bytes_k() + head_bytes_v());
    }
    // One pool block: block_layers() layers (all of them without groups).
    LLMKV_HD size_t sealed_block_bytes() const {
        return size_t(block_layers()) * sealed_layer_bytes();
    }
    // Offsets of layer `layer`'s heads inside the block of the layer's group.
    LLMKV_HD size_t sealed_k_offset(uint32_t layer, uint32_t head) const {
        return size_t(layer_slot(layer)) * sealed_layer_bytes() + size_t(head) * head_bytes_k();
    }
    LLMKV_HD size_t sealed_v_offset(uint32_t layer, uint32_t head) const {
        return size_t(layer_slot(layer)) * sealed_layer_bytes() +
               size_t(n_kv_heads) * head_bytes_k() + size_t(head) * head_bytes_v();
    }
    LLMKV_HD size_t tail_head_bytes() const {
        return size_t(tail_capacity() + (sink ? 1 : 0)) * head_dim * 2;
    }
    LLMKV_HD size_t tail_layer_bytes() const {
        return 2 * size_t(n_kv_heads) * tail_head_bytes();
    }
    LLMKV_HD size_t tail_block_bytes() const {
        return size_t(n_layers) * tail_layer_bytes();
    }
    LLMKV_HD size_t tail_k_offset(uint32_t layer, uint32_t head) const {
        return size_t(layer) * tail_layer_bytes() + size_t(head) * tail_head_bytes();
    }
    LLMKV_HD size_t tail_v_offset(uint32_t layer, uint32_t head) const {
        return size_t(layer) * tail_layer_bytes() + size_t(n_kv_heads + head) * tail_head_bytes();
    }
    // With the sink: the row of position 0's K / V of a head (after the head's C rows).
    LLMKV_HD size_t tail_sink_k_offset(uint32_t layer, uint32_t head) const {
        return tail_k_offset(layer, head) + size_t(tail_capacity()) * head_dim * 2;
    }
    LLMKV_HD size_t tail_sink_v_offset(uint32_t layer, uint32_t head) const {
        return tail_v_offset(layer, head) + size_t(tail_capacity()) * head_dim * 2;
    }
    // Sealed bytes per token, scales included.
    // (All layers: with groups, what a token costs while every group holds it.)
    LLMKV_HD double sealed_bytes_per_token() const {
        return double(sealed_block_bytes()) * n_groups / block_tokens;
    }
};

}  // namespace llmkv
