// KvCache: the device tier of the KV store. Sealed blocks (in the K/V codecs) live in one
// BlockPool, each session's partial tail block (fp16) in a second pool of tail slots.
//
// Block layouts (per block id; B = block_tokens, D = head_dim, H = n_kv_heads):
//   sealed block: for each layer l: K heads [H][head_bytes_k], then V heads [H][head_bytes_v]
//                 where a head holds B tokens x D dims in the codec (kv/codec.h).
//   tail slot:    for each layer l: K [H][C][D] fp16, then V [H][C][D] fp16, where the
//                 capacity C = B + R and R = residual_tokens.
// With n tokens computed, the first sealed_blocks(n) = max(0, n - R) / B blocks are sealed
// and the tail holds positions [sealed_blocks(n) * B, n) from row 0: at least the R newest
// tokens always stay in full precision. A query at position p reads sealed_blocks(p)
// sealed blocks and the rest of its context in fp16, whatever the chunking.
//
// NOTE a sealed block is written once, layer by layer, during the forward pass that
// completes it, and never again; its id is reserved (allocated) before that pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kv/block_pool.h"
#include "kv/codec.h"
#include "kv/kv_layout.h"
#include "llmkv.h"

namespace llmkv {

// Sets up layer groups (KvGeometry::window ...) for a model whose layer l attends over the
// last layer_window[l] positions (0: all of them). Leaves g ungrouped (one group, nothing
// released) when no layer is local, none is global, the local layers' windows differ, or
// the model has more than 128 layers.
void set_layer_groups(KvGeometry &g, const std::vector<uint32_t> &layer_window);

// The KV state of one session: its sealed block table and tail slot.
struct SessionKv {
    // Marks a block table entry whose block lives in the host tier (a parked session).
    static constexpr uint32_t kHostBlock = UINT32_MAX;
    // Marks a local block-table entry whose block was released: it left every local
    // layer's window (KvGeometry::local_live_from).
    static constexpr uint32_t kReleased = UINT32_MAX - 1;
    std::vector<uint32_t> blocks;  // sealed block ids, in position order (group 0)
    // With layer groups (KvGeometry::grouped): the local groups' blocks of each sealed token
    // block, local[j * (n_groups - 1) + (g - 1)] for token block j and group g >= 1;
    // kReleased before local_live_from(n_tokens). Empty without groups.
    std::vector<uint32_t> local;
    size_t local_released = 0;  // local entries before this index are all kReleased
    int64_t tail = -1;          // tail slot id, -1 before the first token
    uint32_t n_tokens = 0;      // positions [0, n_tokens) hold computed KV
};

class PrefixCache;

class KvCache {
public:
    KvCache(const KvGeometry &geometry, uint32_t n_sealed_blocks, uint32_t n_tail_slots);

    const KvGeometry &geometry() const { return geometry_; }
    BlockPool &sealed_pool() { return sealed_; }
    const BlockPool &sealed_pool() const { return sealed_; }
    BlockPool &tail_pool() { return tails_; }
    const BlockPool &tail_pool() const { return tails_; }

    // Makes room for positions [0, new_n_tokens): reserves the sealed blocks that will be
    // complete and a tail slot. All or nothing: returns false and changes nothing when
    // the pool cannot supply them.
    bool reserve(SessionKv &kv, uint32_t new_n_tokens);
    // Pool blocks needed to hold n_tokens beyond what kv already has (every group's).
    uint32_t blocks_needed(const SessionKv &kv, uint32_t new_n_tokens) const;
    // n more sealed blocks appended to out (evicting cached blocks when needed); all or
    // nothing. For blocks whose contents are copied in (resuming from the host tier).
    bool allocate_sealed(uint32_t n, std::vector<uint32_t> &out);
    // A tail slot, or -1 when none is free.
    int64_t allocate_tail();
    // Gives back reserved blocks past kv.n_tokens (after a failed pass).
    void trim(SessionKv &kv);
    // Returns every block and the tail slot of a session to the pools.
    void release(SessionKv &kv);
    // Layer groups: releases the local blocks of token blocks before
    // local_live_from(kv.n_tokens) (no query can see them any more); returns how many.
    uint32_t release_outside_window(SessionKv &kv);
    // The block id of token block j for layer `layer` (its group's block).
    uint32_t block_id(const SessionKv &kv, uint32_t layer, uint32_t j) const {
        const uint32_t g = geometry_.layer_group(layer);
        return g == 0 ? kv.blocks[j] : kv.local[size_t(j) * (geometry_.n_groups - 1) + (g - 1)];
    }

    // With a prefix cache attached, sealed blocks are allocated through it (evicting
    // cached-unreferenced blocks when the free list runs out) and released through it (so a
    // block only the cache still holds becomes evictable). Not owned.
    void set_prefix_cache(PrefixCache *prefix) { prefix_ = prefix; }
    PrefixCache *prefix_cache() { return prefix_; }
    // Sealed blocks an allocation can obtain now: free plus reclaimable cached blocks.
    uint32_t sealed_available() const;
    // Drops one holder reference on a sealed block.
    void release_sealed(uint32_t id);
    // Makes `to` share `from`'s sealed blocks (one more reference each) and own a copy of
    // its tail slot. All or nothing: false (nothing changed) when no tail slot is free.
    bool share(const SessionKv &from, SessionKv &to);
    // Where the pools' bytes live when not in this object's host slabs (a device backend):
    // share() copies a tail slot through this (from, to) instead of memcpy. The host slabs
    // are then never touched (they are reserved, not committed, memory).
    void set_tail_copier(std::function<void(int64_t from, int64_t to)> copier) {
        tail_copier_ = std::move(copier);
    }

    uint8_t *sealed_data(uint32_t id) { return sealed_.data(id); }
    const uint8_t *sealed_data(uint32_t id) const { return sealed_.data(id); }
    uint8_t *tail_data(int64_t slot) { return tails_.data(uint32_t(slot)); }

private:
    KvGeometry geometry_;
    BlockPool sealed_;
    BlockPool tails_;
    PrefixCache *prefix_ = nullptr;
    std::function<void(int64_t, int64_t)> tail_copier_;
};

}  // namespace llmkv
