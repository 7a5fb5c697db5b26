// BlockPool: one tier's preallocated slab of fixed-size KV blocks, a free list and
// per-block reference counts. No allocation happens after construction.
//
// NOTE invariants (checked by check_invariants(), exercised by property tests):
//  - free + used == total; a block is on the free list iff its refcount is 0.
//  - allocation is all-or-nothing: a failed allocate_many changes nothing.
//  - blocks are handed out lowest id first from a fresh pool, and a released block is
//    reused first (LIFO), which keeps the touched part of the slab small.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace llmkv {

class BlockPool {
public:
    BlockPool(uint32_t n_blocks, size_t block_bytes, const char *name);
    ~BlockPool();
    BlockPool(const BlockPool &) = delete;
    BlockPool &operator=(const BlockPool &) = delete;

    uint32_t n_total() const { return n_total_; }
    uint32_t n_free() const { return uint32_t(free_list_.size()); }
    uint32_t n_used() const { return n_total_ - n_free(); }
    size_t block_bytes() const { return block_bytes_; }

    // Allocates n blocks with refcount 1, appending their ids to out. Returns false and
    // changes nothing when fewer than n are free.
    bool allocate_many(uint32_t n, std::vector<uint32_t> &out);
    // Allocates one block (refcount 1); returns false when none is free.
    bool allocate(uint32_t &id);
    void retain(uint32_t id);
    // Drops one reference; the block returns to the free list at zero.
    void release(uint32_t id);
    uint32_t refcount(uint32_t id) const { return refcount_.at(id); }

    uint8_t *data(uint32_t id) { return slab_ + size_t(id) * block_bytes_; }
    const uint8_t *data(uint32_t id) const { return slab_ + size_t(id) * block_bytes_; }

    // Throws llmkv::Error(LLMKV_ERR_INTERNAL) when an invariant does not hold.
    void check_invariants() const;

private:
    const char *name_;
    uint32_t n_total_;
    size_t block_bytes_;
    size_t slab_bytes_ = 0;
    uint8_t *slab_ = nullptr;
    std::vector<uint32_t> free_list_;  // stack: back() is handed out next
    std::vector<uint32_t> refcount_;
};

}  // namespace llmkv
