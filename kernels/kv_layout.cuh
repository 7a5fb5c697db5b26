// The KV byte layout on the device is llmkv::KvGeometry (src/kv/kv_layout.h): the one
// description shared with the block pool, the codecs, snapshots and the CPU attention, so
// blocks copy between backends, snapshots and the host tier bit for bit. This header only
// adds what the kernels need on top of it: codec constants usable as template arguments,
// the vector-load alignment test, and the shapes the kernels support.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/kv_layout.h"

namespace llmkv::cuda {

using llmkv::int4_v_group;
using llmkv::kv_head_bytes;
using llmkv::KvGeometry;

// The values of llmkv_kv_dtype, as plain integers (template arguments of the kernels).
constexpr uint32_t kF16 = LLMKV_KV_F16;
constexpr uint32_t kBF16 = LLMKV_KV_BF16;
constexpr uint32_t kFP8 = LLMKV_KV_FP8_E4M3;
constexpr uint32_t kINT8 = LLMKV_KV_INT8;
constexpr uint32_t kINT4 = LLMKV_KV_INT4;
constexpr uint32_t kNumCodecs = 5;

// True when every head of a sealed block starts 16-byte aligned (given a 256-aligned pool):
// the attention kernel then uses vector loads.
inline bool kv_vector_aligned(const KvGeometry &g) {
    return g.head_bytes_k() % 16 == 0 && g.head_bytes_v() % 16 == 0 && g.head_dim % 8 == 0;
}

// What the kernels support (checked by the module at create): every codec restricted to
// head_dim % 8 == 0 and head_dim <= 256 (one row split over at most 32 lanes of 8 dims),
// rotation with head_dim a power of two, int4 with head_dim % 16 == 0, and a sealing tile
// of block_tokens * head_dim floats in 48 KiB of shared memory. nullptr when supported.
inline const char *kv_layout_unsupported(const KvGeometry &g) {
    const uint32_t D = g.head_dim, ck = uint32_t(g.dtype_k), cv = uint32_t(g.dtype_v);
    if (g.n_layers == 0 || g.n_kv_heads == 0 || g.block_tokens == 0) return "empty KV geometry";
    if (D == 0 || D % 8 != 0 || D > 256) return "head_dim must be a multiple of 8 and <= 256";
    if (ck == LLMKV_KV_INT4_COMPACT || cv == LLMKV_KV_INT4_COMPACT)
        return "compact int4 (LLMKV_KV_INT4_COMPACT) runs on the CPU backend only";
    if (ck >= kNumCodecs || cv >= kNumCodecs) return "unknown KV dtype";
    if ((ck == kINT4 || cv == kINT4) && D % 16 != 0) return "int4 needs head_dim % 16 == 0";
    const bool pow2 = (D & (D - 1)) == 0;
    if ((g.rotate_k && (ck < kFP8 || !pow2)) || (g.rotate_v && (cv < kFP8 || !pow2)))
        return "rotation needs a quantized codec and head_dim a power of two";
    if (size_t(g.block_tokens) * D * 4 > 48 * 1024)
        return "block_tokens * head_dim must be <= 12288";
    return nullptr;
}

}  // namespace llmkv::cuda
