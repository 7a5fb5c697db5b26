// KvCache: reservation of sealed blocks and tail slots for sessions.
#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kv/prefix_cache.h"

namespace llmkv {

KvCache::KvCache(const KvGeometry &geometry, uint32_t n_sealed_blocks, uint32_t n_tail_slots)
    : geometry_(geometry),
      sealed_(n_sealed_blocks, geometry.sealed_block_bytes(), "sealed"),
      tails_(n_tail_slots, geometry.tail_block_bytes(), "tail") {}

void set_layer_groups(KvGeometry &g, const std::vector<uint32_t> &layer_window) {
    g.window = 0;
    g.n_groups = 1;
    g.group_layers = 0;
    g.local_mask[0] = g.local_mask[1] = 0;
    const uint32_t n = uint32_t(layer_window.size());
    if (n != g.n_layers || n > 128) return;
    uint32_t window = 0, n_local = 0;
    uint64_t mask[2] = {0, 0};
    for (uint32_t l = 0; l < n; ++l) {
        if (layer_window[l] == 0) continue;
        if (window != 0 && layer_window[l] != window) return;
        window = layer_window[l];
        mask[l >> 6] |= uint64_t(1) << (l & 63);
        ++n_local;
    }
    const uint32_t n_global = n - n_local;
    if (n_local == 0 || n_global == 0) return;
    g.window = window;
    g.group_layers = n_global;
    g.n_groups = 1 + (n_local + n_global - 1) / n_global;
    g.local_mask[0] = mask[0];
    g.local_mask[1] = mask[1];
}

uint32_t KvCache::blocks_needed(const SessionKv &kv, uint32_t new_n_tokens) const {
    uint32_t full = geometry_.sealed_blocks(new_n_tokens);
    // Every group's block of each new token block (local ones are released later).
    return full > kv.blocks.size() ? (full - uint32_t(kv.blocks.size())) * geometry_.n_groups : 0;
}

uint32_t KvCache::release_outside_window(SessionKv &kv) {
    if (!geometry_.grouped()) return 0;
    const size_t per = geometry_.n_groups - 1;
    const size_t end =
        std::min<size_t>(geometry_.local_live_from(kv.n_tokens), kv.blocks.size()) * per;
    uint32_t n = 0;
    for (size_t i = kv.local_released; i < end && i < kv.local.size(); ++i) {
        if (kv.local[i] == SessionKv::kReleased) continue;
        if (kv.local[i] != SessionKv::kHostBlock) release_sealed(kv.local[i]);
        kv.local[i] = SessionKv::kReleased;
        ++n;
    }
    if (end > kv.local_released) kv.local_released = end;
    return n;
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
    std::vector<uint32_t> local = from.local;
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
    for (const std::vector<uint32_t> *table : {&from.blocks, &from.local}) {
        for (uint32_t id : *table) {
            if (id == SessionKv::kReleased) continue;
            if (prefix_) {
                prefix_->acquire(id);
            } else {
                sealed_.retain(id);
            }
        }
    }
    to.blocks = std::move(blocks);
    to.local = std::move(local);
    to.local_released = from.local_released;
    to.tail = tail;
    to.n_tokens = from.n_tokens;
    return true;
}

bool KvCache::reserve(SessionKv &kv, uint32_t new_n_tokens) {
    uint32_t need = blocks_needed(kv, new_n_tokens);
    bool need_tail = kv.tail < 0;
    if (need > sealed_available() || (need_tail && tails_.n_free() == 0)) return false;
    if (!geometry_.grouped()) {
        bool ok = prefix_ ? prefix_->allocate_with_eviction(need, kv.blocks)
                          : sealed_.allocate_many(need, kv.blocks);
        if (!ok) return false;  // unreachable: availability was checked; nothing changed
    } else if (need > 0) {
        // Group 0's block of each new token block, then its local blocks, in table order.
        std::vector<uint32_t> ids;
        ids.reserve(need);
        kv.blocks.reserve(kv.blocks.size() + need / geometry_.n_groups);
        kv.local.reserve(kv.local.size() + need);
        bool ok =
            prefix_ ? prefix_->allocate_with_eviction(need, ids) : sealed_.allocate_many(need, ids);
        if (!ok) return false;
        for (size_t i = 0; i < ids.size(); i += geometry_.n_groups) {
            kv.blocks.push_back(ids[i]);
            kv.local.insert(kv.local.end(), ids.begin() + i + 1,
                            ids.begin() + i + geometry_.n_groups);
        }
    }
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
    const size_t per = geometry_.n_groups - 1;
    while (kv.local.size() > keep * per) {
        if (kv.local.back() != SessionKv::kReleased) release_sealed(kv.local.back());
        kv.local.pop_back();
    }
    kv.local_released = std::min(kv.local_released, kv.local.size());
    while (kv.blocks.size() > keep) {
        release_sealed(kv.blocks.back());
        kv.blocks.pop_back();
    }
}

void KvCache::release(SessionKv &kv) {
    for (uint32_t id : kv.blocks) {
        if (id != SessionKv::kHostBlock) release_sealed(id);
    }
    for (uint32_t id : kv.local) {
        if (id != SessionKv::kHostBlock && id != SessionKv::kReleased) release_sealed(id);
    }
    kv.blocks.clear();
    kv.local.clear();
    kv.local_released = 0;
    if (kv.tail >= 0) tails_.release(uint32_t(kv.tail));
    kv.tail = -1;
    kv.n_tokens = 0;
}

}  // namespace llmkv
