// KvGeometry: THE description of the KV store's byte layout, shared by the block pool
// (kv/kv_cache.h), the codecs (kv/codec.h), the snapshot writer (kv/snapshot.h), the CPU
// attention and the CUDA kernels (kernels/, compiled by nvcc: this header is plain C++ with
// host/device annotations, and needs nothing but llmkv.h).
//
//   sealed block (sealed_block_bytes): for each layer l: K heads [H][head_bytes_k], then
//                V heads [H][head_bytes_v]; one head = B tokens x D dims in its codec.
//   tail slot (tail_block_bytes): for each layer l: K [H][C][D] fp16, then V [H][C][D]
//                fp16, C = B + R (block_tokens + residual_tokens).
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
LLMKV_HD uint32_t int4_v_group(uint32_t head_dim) { return head_dim % 32 == 0 ? 32u : 16u; }

// Bytes of one head of one sealed block in a codec, scales included (0 for an unknown
// dtype). K and V differ only for int4 (K per channel over the block, V per token in groups).
LLMKV_HD size_t kv_head_bytes(uint32_t dtype, bool is_v, uint32_t block_tokens, uint32_t head_dim) {
    const size_t B = block_tokens, D = head_dim;
    switch (dtype) {
        case LLMKV_KV_F16:
        case LLMKV_KV_BF16: return B * D * 2;
        case LLMKV_KV_FP8_E4M3:
        case LLMKV_KV_INT8: return B * D + B * 2;
        case LLMKV_KV_INT4:
            return is_v ? B * D / 2 + B * (D / int4_v_group(head_dim)) * 4 : B * D / 2 + D * 4;
        default: return 0;
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

    // Sealed blocks of a session whose first n_tokens positions hold KV.
    LLMKV_HD uint32_t sealed_blocks(uint32_t n_tokens) const {
        return n_tokens > residual_tokens ? (n_tokens - residual_tokens) / block_tokens : 0;
    }
    LLMKV_HD uint32_t tail_capacity() const { return block_tokens + residual_tokens; }

    LLMKV_HD size_t head_bytes_k() const { return kv_head_bytes(dtype_k, false, block_tokens, head_dim); }
    LLMKV_HD size_t head_bytes_v() const { return kv_head_bytes(dtype_v, true, block_tokens, head_dim); }
    LLMKV_HD size_t sealed_layer_bytes() const { return size_t(n_kv_heads) * (head_bytes_k() + head_bytes_v()); }
    LLMKV_HD size_t sealed_block_bytes() const { return size_t(n_layers) * sealed_layer_bytes(); }
    LLMKV_HD size_t sealed_k_offset(uint32_t layer, uint32_t head) const {
        return size_t(layer) * sealed_layer_bytes() + size_t(head) * head_bytes_k();
    }
    LLMKV_HD size_t sealed_v_offset(uint32_t layer, uint32_t head) const {
        return size_t(layer) * sealed_layer_bytes() + size_t(n_kv_heads) * head_bytes_k() +
               size_t(head) * head_bytes_v();
    }
    LLMKV_HD size_t tail_head_bytes() const { return size_t(tail_capacity()) * head_dim * 2; }
    LLMKV_HD size_t tail_layer_bytes() const { return 2 * size_t(n_kv_heads) * tail_head_bytes(); }
    LLMKV_HD size_t tail_block_bytes() const { return size_t(n_layers) * tail_layer_bytes(); }
    LLMKV_HD size_t tail_k_offset(uint32_t layer, uint32_t head) const {
        return size_t(layer) * tail_layer_bytes() + size_t(head) * tail_head_bytes();
    }
    LLMKV_HD size_t tail_v_offset(uint32_t layer, uint32_t head) const {
        return size_t(layer) * tail_layer_bytes() + size_t(n_kv_heads + head) * tail_head_bytes();
    }
    // Sealed bytes per token, scales included.
    LLMKV_HD double sealed_bytes_per_token() const { return double(sealed_block_bytes()) / block_tokens; }
};

}  // namespace llmkv
