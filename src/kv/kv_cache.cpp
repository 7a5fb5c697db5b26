// KvCache: reservation of sealed blocks and tail slots for sessions.
#include "kv/kv_cache.h"

#include <cstring>

#include "common/error.h"
#include "kv/prefix_cache.h"

namespace llmkv {

KvCache::KvCache(const KvGeometry &geometry, uint32_t n_sealed_blocks, uint32_t n_tail_slots)
    : geometry_(geometry),
      sealed_(n_sealed_blocks, geometry.sealed_block_bytes(), "sealed"),
      tails_(n_tail_slots, geometry.tail_block_bytes(), "tail") {}

uint32_t KvCache::blocks_needed(const SessionKv &kv, uint32_t new_n_tokens) const {
    uint32_t full = geometry_.sealed_blocks(new_n_tokens);
    return full > kv.blocks.size() ? full - uint32_t(kv.blocks.size()) : 0;
}

uint32_t KvCache::sealed_available() const {
    return sealed_.n_free() + (prefix_ ? prefix_->n_reclaimable() : 0);
}

void KvCache::release_sealed(uint32_t id) {
    if (prefix_) {
        prefix_->release(id);
    } else {
        sealed_.release(id);
    }
}

bool KvCache::share(const SessionKv &from, SessionKv &to) {
    std::vector<uint32_t> blocks = from.blocks;  // may throw: nothing taken yet
    int64_t tail = -1;
    if (from.tail >= 0) {
        uint32_t slot;
        if (!tails_.allocate(slot)) return false;
        tail = slot;
        if (tail_copier_) {
            tail_copier_(from.tail, tail);
        } else {
            std::memcpy(tails_.data(slot), tails_.data(uint32_t(from.tail)), tails_.block_bytes());
        }
    }
    for (uint32_t id : from.blocks) {
        if (prefix_) {
            prefix_->acquire(id);
        } else {
            sealed_.retain(id);
        }
    }
    to.blocks = std::move(blocks);
    to.tail = tail;
    to.n_tokens = from.n_tokens;
    return true;
}

bool KvCache::reserve(SessionKv &kv, uint32_t new_n_tokens) {
    uint32_t need = blocks_needed(kv, new_n_tokens);
    bool need_tail = kv.tail < 0;
    if (need > sealed_available() || (need_tail && tails_.n_free() == 0)) return false;
    bool ok = prefix_ ? prefix_->allocate_with_eviction(need, kv.blocks) : sealed_.allocate_many(need, kv.blocks);
    if (!ok) return false;  // unreachable: availability was checked; nothing changed
    if (need_tail) {
        uint32_t slot;
        tails_.allocate(slot);
        kv.tail = slot;
    }
    return true;
}

bool KvCache::allocate_sealed(uint32_t n, std::vector<uint32_t> &out) {
    if (n > sealed_available()) return false;
    return prefix_ ? prefix_->allocate_with_eviction(n, out) : sealed_.allocate_many(n, out);
}

int64_t KvCache::allocate_tail() {
    uint32_t slot;
    return tails_.allocate(slot) ? int64_t(slot) : -1;
}

void KvCache::trim(SessionKv &kv) {
    size_t keep = geometry_.sealed_blocks(kv.n_tokens);
    while (kv.blocks.size() > keep) {
        release_sealed(kv.blocks.back());
        kv.blocks.pop_back();
    }
}

void KvCache::release(SessionKv &kv) {
    for (uint32_t id : kv.blocks) {
        if (id != SessionKv::kHostBlock) release_sealed(id);
    }
    kv.blocks.clear();
    if (kv.tail >= 0) tails_.release(uint32_t(kv.tail));
    kv.tail = -1;
    kv.n_tokens = 0;
}

}  // namespace llmkv
