// KV re-layout between the whole model's geometry and one rank's (kv_relayout.h): each copy
// is a run of whole heads per sealed-block slot or tail layer, contiguous in both layouts.
#include "parallel/kv_relayout.h"

#include <cstddef>
#include <cstring>

namespace llmkv {

KvGeometry rank_geometry(const KvGeometry &full, const ShardRanges &r) {
    KvGeometry g = full;
    g.n_kv_heads = r.n_kv_heads;
    return g;
}

namespace {

// Runs of bytes that hold one rank's heads: per sealed-block slot (or tail layer), the K
// heads then the V heads, each a contiguous run in both layouts.
template <typename Copy>
void for_block_runs(const KvGeometry &full, const KvGeometry &local, uint32_t h0, Copy copy) {
    const size_t hk = full.head_bytes_k(), hv = full.head_bytes_v(), n = local.n_kv_heads;
    for (uint32_t s = 0; s < full.block_layers(); ++s) {
        const size_t f = size_t(s) * full.sealed_layer_bytes(),
                     l = size_t(s) * local.sealed_layer_bytes();
        copy(f + h0 * hk, l, n * hk);
        copy(f + full.n_kv_heads * hk + h0 * hv, l + n * hk, n * hv);
    }
}

template <typename Copy>
void for_tail_runs(const KvGeometry &full, const KvGeometry &local, uint32_t h0, Copy copy) {
    const size_t th = full.tail_head_bytes(), n = local.n_kv_heads;
    for (uint32_t l = 0; l < full.n_layers; ++l) {
        copy(full.tail_k_offset(l, h0), local.tail_k_offset(l, 0), n * th);
        copy(full.tail_v_offset(l, h0), local.tail_v_offset(l, 0), n * th);
    }
}

}  // namespace

void kv_block_to_rank(const KvGeometry &full, const KvGeometry &local, uint32_t h0,
                      const uint8_t *src, uint8_t *dst) {
    for_block_runs(full, local, h0,
                   [&](size_t f, size_t l, size_t n) { std::memcpy(dst + l, src + f, n); });
}
void kv_block_from_rank(const KvGeometry &full, const KvGeometry &local, uint32_t h0,
                        const uint8_t *src, uint8_t *dst) {
    for_block_runs(full, local, h0,
                   [&](size_t f, size_t l, size_t n) { std::memcpy(dst + f, src + l, n); });
}
void kv_tail_to_rank(const KvGeometry &full, const KvGeometry &local, uint32_t h0,
                     const uint8_t *src, uint8_t *dst) {
    for_tail_runs(full, local, h0,
                  [&](size_t f, size_t l, size_t n) { std::memcpy(dst + l, src + f, n); });
}
void kv_tail_from_rank(const KvGeometry &full, const KvGeometry &local, uint32_t h0,
                       const uint8_t *src, uint8_t *dst) {
    for_tail_runs(full, local, h0,
                  [&](size_t f, size_t l, size_t n) { std::memcpy(dst + f, src + l, n); });
}

}  // namespace llmkv
