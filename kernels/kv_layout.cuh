// KvLayout: the byte layout of the KV store on the device, identical to the CPU's
// KvGeometry (src/kv/kv_cache.h) and codec layouts (src/kv/codec.h), so blocks copy between
// backends, snapshots and the host tier bit for bit. Host and device code (plain C++ when
// not compiled by nvcc).
//
//   sealed block (sealed_block_bytes): for each layer l: K heads [H][head_bytes_k], then
//                 V heads [H][head_bytes_v]; one head = B tokens x D dims in its codec.
//   tail slot (tail_block_bytes): for each layer l: K [H][C][D] fp16, then V [H][C][D]
//                 fp16, C = B + R (block_tokens + residual_tokens).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define LLMKV_HD __host__ __device__ __forceinline__
#else
#define LLMKV_HD inline
#endif

namespace llmkv::cuda {

// Values of llmkv_kv_dtype.
enum KvCodec : uint32_t { kF16 = 0, kBF16 = 1, kFP8 = 2, kINT8 = 3, kINT4 = 4 };
constexpr uint32_t kNumCodecs = 5;

LLMKV_HD uint32_t int4_v_group(uint32_t D) {
    return D % 32 == 0 ? 32u : 16u;
}

// Bytes of one head of one sealed block (codec_head_bytes).
LLMKV_HD size_t head_bytes(uint32_t codec, bool is_v, uint32_t B, uint32_t D) {
    const size_t b = B, d = D;
    switch (codec) {
        case kF16:
        case kBF16:
            return b * d * 2;
        case kFP8:
        case kINT8:
            return b * d + b * 2;
        case kINT4:
            return is_v ? b * d / 2 + b * (d / int4_v_group(D)) * 4 : b * d / 2 + d * 4;
        default:
            return 0;
    }
}

struct KvLayout {
    uint32_t n_layers = 0, H = 0, D = 0, B = 0, R = 0;
    uint32_t codec_k = kF16, codec_v = kF16;
    bool rotate_k = false, rotate_v = false;

    LLMKV_HD uint32_t cap() const { return B + R; }
    LLMKV_HD uint32_t sealed_blocks(uint32_t n_tokens) const {
        return n_tokens > R ? (n_tokens - R) / B : 0u;
    }
    LLMKV_HD size_t head_bytes_k() const { return head_bytes(codec_k, false, B, D); }
    LLMKV_HD size_t head_bytes_v() const { return head_bytes(codec_v, true, B, D); }
    LLMKV_HD size_t sealed_layer_bytes() const {
        return size_t(H) * (head_bytes_k() + head_bytes_v());
    }
    LLMKV_HD size_t sealed_block_bytes() const { return size_t(n_layers) * sealed_layer_bytes(); }
    LLMKV_HD size_t sealed_k_offset(uint32_t l, uint32_t h) const {
        return size_t(l) * sealed_layer_bytes() + size_t(h) * head_bytes_k();
    }
    LLMKV_HD size_t sealed_v_offset(uint32_t l, uint32_t h) const {
        return size_t(l) * sealed_layer_bytes() + size_t(H) * head_bytes_k() +
               size_t(h) * head_bytes_v();
    }
    LLMKV_HD size_t tail_head_bytes() const { return size_t(cap()) * D * 2; }
    LLMKV_HD size_t tail_layer_bytes() const { return 2 * size_t(H) * tail_head_bytes(); }
    LLMKV_HD size_t tail_block_bytes() const { return size_t(n_layers) * tail_layer_bytes(); }
    LLMKV_HD size_t tail_k_offset(uint32_t l, uint32_t h) const {
        return size_t(l) * tail_layer_bytes() + size_t(h) * tail_head_bytes();
    }
    LLMKV_HD size_t tail_v_offset(uint32_t l, uint32_t h) const {
        return size_t(l) * tail_layer_bytes() + size_t(H + h) * tail_head_bytes();
    }
    // True when every head of a sealed block starts 16-byte aligned (given a 256-aligned
    // pool): the attention kernel then uses vector loads.
    bool vector_aligned() const {
        return head_bytes_k() % 16 == 0 && head_bytes_v() % 16 == 0 && D % 8 == 0;
    }
};

// What the kernels support (checked by the module at create): every codec of
// codec_supported() restricted to D % 8 == 0 and D <= 256 (one row split over at most 32
// lanes of 8 dims), rotation with D a power of two, int4 with D % 16 == 0, and a sealing
// tile of B * D floats in 48 KiB of shared memory.
inline const char *kv_layout_unsupported(const KvLayout &g) {
    if (g.n_layers == 0 || g.H == 0 || g.B == 0) return "empty KV geometry";
    if (g.D == 0 || g.D % 8 != 0 || g.D > 256) return "head_dim must be a multiple of 8 and <= 256";
    if (g.codec_k >= kNumCodecs || g.codec_v >= kNumCodecs) return "unknown KV dtype";
    if ((g.codec_k == kINT4 || g.codec_v == kINT4) && g.D % 16 != 0)
        return "int4 needs head_dim % 16 == 0";
    const bool pow2 = (g.D & (g.D - 1)) == 0;
    if ((g.rotate_k && (g.codec_k < kFP8 || !pow2)) ||
        (g.rotate_v && (g.codec_v < kFP8 || !pow2))) {
        return "rotation needs a quantized codec and head_dim a power of two";
    }
    if (size_t(g.B) * g.D * 4 > 48 * 1024) return "block_tokens * head_dim must be <= 12288";
    return nullptr;
}

}  // namespace llmkv::cuda
