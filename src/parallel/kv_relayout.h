// KV re-layout between the whole model's geometry (full: every KV head) and one rank's
// (local: full with n_kv_heads = the rank's count): sealed blocks and tail slots, both ways.
// Pure byte copies; the transfers that move them between ranks are rank_state.h's.
#pragma once

#include <cstdint>

#include "kv/kv_layout.h"
#include "model/shard.h"

namespace llmkv {

// Copies one rank's KV heads between the whole model's layout (full) and the rank's pool
// layout (local: full with n_kv_heads = the rank's count); kv_head0 = its first KV head.
// Sealed blocks (both directions) and tail slots.
void kv_block_to_rank(const KvGeometry &full, const KvGeometry &local, uint32_t kv_head0,
                      const uint8_t *full_bytes, uint8_t *rank_bytes);
void kv_block_from_rank(const KvGeometry &full, const KvGeometry &local, uint32_t kv_head0,
                        const uint8_t *rank_bytes, uint8_t *full_bytes);
void kv_tail_to_rank(const KvGeometry &full, const KvGeometry &local, uint32_t kv_head0,
                     const uint8_t *full_bytes, uint8_t *rank_bytes);
void kv_tail_from_rank(const KvGeometry &full, const KvGeometry &local, uint32_t kv_head0,
                       const uint8_t *rank_bytes, uint8_t *full_bytes);

// The whole model's geometry with one rank's KV heads.
KvGeometry rank_geometry(const KvGeometry &full, const ShardRanges &r);

}  // namespace llmkv
