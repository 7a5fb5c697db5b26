// PrefixCache: hash-chain index over sealed blocks, busy/idle/hot bookkeeping, the eviction
// heap (idle childless blocks by idle time) and the invariant checker.
#include "kv/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace llmkv {

PrefixCache::PrefixCache(BlockPool &pool, uint32_t block_tokens, const BlockHashKey &salt,
                         KeyFn key_fn)
    : pool_(pool), block_tokens_(block_tokens), salt_(salt), key_fn_(key_fn) {
    if (block_tokens == 0) fail(LLMKV_ERR_INVALID_ARGUMENT, "prefix cache: block_tokens is 0");
    if (!key_fn) fail(LLMKV_ERR_INVALID_ARGUMENT, "prefix cache: no key function");
    const uint32_t n = pool.n_total();
    if (n >= kUnlinkable)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "prefix cache: %u blocks is too many", n);
    nodes_.resize(n);
    tokens_.resize(size_t(n) * block_tokens);
    heap_.reserve(n);
    map_.reserve(n);
}

PrefixCache::~PrefixCache() {
    clear();
}

void PrefixCache::check_id(uint32_t id, const char *what) const {
    if (id >= nodes_.size()) {
        fail(LLMKV_ERR_INTERNAL, "prefix cache: %s of invalid block %u (%zu blocks)", what, id,
             nodes_.size());
    }
}

bool PrefixCache::tokens_equal(uint32_t id, const int32_t *tokens) const {
    return std::memcmp(stored_tokens(id), tokens, size_t(block_tokens_) * sizeof(int32_t)) == 0;
}

BlockHashKey PrefixCache::parent_key(uint32_t id) const {
    const uint32_t p = nodes_[id].parent;
    return p == kNoBlock ? kRootBlockKey : nodes_[p].key;
}

const BlockHashKey &PrefixCache::key_of(uint32_t block_id) const {
    if (!contains(block_id))
        fail(LLMKV_ERR_INTERNAL, "prefix cache: block %u is not cached", block_id);
    return nodes_[block_id].key;
}

// ---- busy / idle / hot ------------------------------------------------------------------

// Recomputes hot for id and carries a change up the parent chain; stops at the first
// block whose hot state does not change, so a session releasing or matching a whole chain
// costs O(chain) in total.
void PrefixCache::update_hot(uint32_t id) {
    while (id != kNoBlock) {
        Node &nd = nodes_[id];
        const bool hot = nd.busy || nd.n_hot_children > 0;
        if (hot == nd.hot) return;
        nd.hot = hot;
        if (hot) {
            --n_cold_;
        } else {
            ++n_cold_;
        }
        id = nd.parent;
        if (id != kNoBlock) {
            if (hot) {
                ++nodes_[id].n_hot_children;
            } else {
                --nodes_[id].n_hot_children;
            }
        }
    }
}

void PrefixCache::mark_busy(uint32_t id) {
    Node &nd = nodes_[id];
    nd.busy = true;
    --n_idle_;
    if (nd.heap_pos != kNoBlock) heap_remove(id);
    update_hot(id);
}

void PrefixCache::mark_idle(uint32_t id) {
    Node &nd = nodes_[id];
    nd.busy = false;
    nd.idle_since = ++clock_;
    ++n_idle_;
    if (nd.n_children == 0) heap_push(id);
    update_hot(id);
}

// Forgets a cached block that is idle and has no cached child (so it is cold and on the
// heap). Does not touch the pool.
void PrefixCache::unindex_leaf(uint32_t id) {
    Node &nd = nodes_[id];
    heap_remove(id);
    map_.erase(nd.key);
    --n_cached_;
    --n_idle_;
    --n_cold_;
    const uint32_t p = nd.parent;
    nd = Node{};
    if (p != kNoBlock) {
        Node &pn = nodes_[p];
        if (--pn.n_children == 0 && !pn.busy) heap_push(p);
    }
}

// ---- eviction heap ------------------------------------------------------------------------

void PrefixCache::heap_swap(uint32_t a, uint32_t b) {
    std::swap(heap_[a], heap_[b]);
    nodes_[heap_[a]].heap_pos = a;
    nodes_[heap_[b]].heap_pos = b;
}

void PrefixCache::heap_up(uint32_t pos) {
    while (pos > 0) {
        const uint32_t up = (pos - 1) / 2;
        if (!heap_less(pos, up)) return;
        heap_swap(pos, up);
        pos = up;
    }
}

void PrefixCache::heap_down(uint32_t pos) {
    const uint32_t n = uint32_t(heap_.size());
    for (;;) {
        const uint32_t l = 2 * pos + 1, r = l + 1;
        uint32_t m = pos;
        if (l < n && heap_less(l, m)) m = l;
        if (r < n && heap_less(r, m)) m = r;
        if (m == pos) return;
        heap_swap(pos, m);
        pos = m;
    }
}

void PrefixCache::heap_push(uint32_t id) {
    const uint32_t pos = uint32_t(heap_.size());
    heap_.push_back(id);  // capacity n_total reserved: no allocation
    nodes_[id].heap_pos = pos;
    heap_up(pos);
}

void PrefixCache::heap_remove(uint32_t id) {
    const uint32_t pos = nodes_[id].heap_pos;
    const uint32_t last = uint32_t(heap_.size()) - 1;
    if (pos != last) heap_swap(pos, last);
    heap_.pop_back();
    nodes_[id].heap_pos = kNoBlock;
    if (pos != last) {
        heap_up(pos);
        heap_down(pos);
    }
}

// ---- operations ---------------------------------------------------------------------------

size_t PrefixCache::match(const int32_t *tokens, size_t n_tokens, std::vector<uint32_t> &out) {
    const size_t n_full = n_tokens / block_tokens_;
    BlockHashKey parent = kRootBlockKey;
    uint32_t parent_id = kNoBlock;
    size_t hits = 0;
    for (; hits < n_full; ++hits) {
        const int32_t *t = tokens + hits * block_tokens_;
        const BlockHashKey key = key_for(parent, t);
        auto it = map_.find(key);
        if (it == map_.end()) break;
        const uint32_t id = it->second;
        // A hash hit is only a hit if it is the very chain asked for.
        if (nodes_[id].parent != parent_id || nodes_[id].group != 0 || !tokens_equal(id, t)) break;
        out.push_back(id);
        pool_.retain(id);
        if (!nodes_[id].busy) mark_busy(id);
        parent = key;
        parent_id = id;
    }
    hit_tokens_ += uint64_t(hits) * block_tokens_;
    miss_tokens_ += uint64_t(n_full - hits) * block_tokens_;
    return hits;
}

std::vector<uint32_t> PrefixCache::match(const int32_t *tokens, size_t n_tokens) {
    std::vector<uint32_t> out;
    match(tokens, n_tokens, out);
    return out;
}

uint32_t PrefixCache::resolve_parent(const BlockHashKey &parent, uint32_t parent_block) const {
    if (parent == kRootBlockKey) {
        if (parent_block != kNoBlock) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: first block published with parent block %u",
                 parent_block);
        }
        return kNoBlock;
    }
    // The parent's block left the device (its session moved it to the host tier): the new
    // block cannot be linked and stays uncached.
    if (parent_block == kNoBlock) return kUnlinkable;
    check_id(parent_block, "publish (parent)");
    auto it = map_.find(parent);
    if (it == map_.end()) return kUnlinkable;
    const uint32_t p = it->second;
    if (parent_block == p) return p;
    const Node &pb = nodes_[parent_block];
    if (!pb.indexed && pb.dup_of == p && pb.dup_serial == nodes_[p].serial) return p;
    return kUnlinkable;
}

PrefixCache::PublishResult PrefixCache::publish(const BlockHashKey &parent, const int32_t *tokens,
                                                uint32_t block_id, uint32_t parent_block) {
    return publish_in_group(0, parent, tokens, block_id, parent_block);
}

PrefixCache::PublishResult PrefixCache::publish_local(uint32_t group, const BlockHashKey &chain_key,
                                                      const int32_t *tokens, uint32_t block_id,
                                                      uint32_t chain_block) {
    if (group == 0 || group > 255)
        fail(LLMKV_ERR_INTERNAL, "prefix cache: local block of group %u", group);
    return publish_in_group(group, chain_key, tokens, block_id, chain_block);
}

uint32_t PrefixCache::match_local(uint32_t group, uint32_t chain_block, const int32_t *tokens) {
    check_id(chain_block, "match_local");
    if (!nodes_[chain_block].indexed || group == 0) return kNoBlock;
    const BlockHashKey key = key_for(local_parent_key(nodes_[chain_block].key, group), tokens);
    auto it = map_.find(key);
    if (it == map_.end()) return kNoBlock;
    const uint32_t id = it->second;
    if (nodes_[id].parent != chain_block || nodes_[id].group != group || !tokens_equal(id, tokens))
        return kNoBlock;
    pool_.retain(id);
    if (!nodes_[id].busy) mark_busy(id);
    return id;
}

PrefixCache::PublishResult PrefixCache::publish_in_group(uint32_t group, const BlockHashKey &parent,
                                                         const int32_t *tokens, uint32_t block_id,
                                                         uint32_t parent_block) {
    check_id(block_id, "publish");
    if (pool_.refcount(block_id) == 0) {
        fail(LLMKV_ERR_INTERNAL, "prefix cache: publish of free block %u", block_id);
    }
    const BlockHashKey key = key_for(group ? local_parent_key(parent, group) : parent, tokens);
    if (nodes_[block_id].indexed) {
        if (nodes_[block_id].key != key) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: block %u is already cached under another key",
                 block_id);
        }
        return {block_id, key, PublishStatus::kAlreadyCached};
    }
    const uint32_t parent_id = resolve_parent(parent, parent_block);
    forget_duplicate(block_id);
    if (parent_id == kUnlinkable) return {block_id, key, PublishStatus::kOrphan};
    auto it = map_.find(key);
    if (it != map_.end()) {
        const uint32_t existing = it->second;
        if (nodes_[existing].parent == parent_id && nodes_[existing].group == group &&
            tokens_equal(existing, tokens)) {
            nodes_[block_id].dup_of = existing;
            nodes_[block_id].dup_serial = nodes_[existing].serial;
            return {existing, key, PublishStatus::kDuplicate};
        }
        return {block_id, key, PublishStatus::kCollision};
    }
    map_.emplace(key, block_id);  // may throw (allocation) before anything else changes
    pool_.retain(block_id);
    std::memcpy(tokens_.data() + size_t(block_id) * block_tokens_, tokens,
                size_t(block_tokens_) * sizeof(int32_t));
    Node &nd = nodes_[block_id];
    nd = Node{};
    nd.key = key;
    nd.serial = next_serial_++;
    nd.parent = parent_id;
    nd.indexed = true;
    nd.group = uint8_t(group);
    nd.busy = true;  // the publisher holds it
    ++n_cached_;
    ++n_cold_;  // counted cold until update_hot makes it hot
    if (parent_id != kNoBlock) {
        Node &pn = nodes_[parent_id];
        if (pn.n_children++ == 0 && pn.heap_pos != kNoBlock) heap_remove(parent_id);
    }
    update_hot(block_id);
    return {block_id, key, PublishStatus::kInserted};
}

void PrefixCache::acquire(uint32_t block_id) {
    check_id(block_id, "acquire");
    pool_.retain(block_id);
    if (nodes_[block_id].indexed && !nodes_[block_id].busy) mark_busy(block_id);
}

void PrefixCache::release(uint32_t block_id) {
    check_id(block_id, "release");
    pool_.release(block_id);
    on_release(block_id);
}

void PrefixCache::on_release(uint32_t block_id) {
    check_id(block_id, "on_release");
    const Node &nd = nodes_[block_id];
    const uint32_t rc = pool_.refcount(block_id);
    if (!nd.indexed) {
        if (rc == 0) forget_duplicate(block_id);
        return;
    }
    if (rc == 0) {
        fail(LLMKV_ERR_INTERNAL, "prefix cache: cached block %u lost the cache's reference",
             block_id);
    }
    if (!nd.busy) {
        if (rc > 1) {
            fail(LLMKV_ERR_INTERNAL,
                 "prefix cache: idle block %u has refcount %u (retained without acquire)", block_id,
                 rc);
        }
        return;
    }
    if (rc == 1) mark_idle(block_id);
}

uint32_t PrefixCache::evict(uint32_t n_blocks, std::vector<uint32_t> *evicted) {
    uint32_t freed = 0;
    while (freed < n_blocks && !heap_.empty()) {
        const uint32_t id = heap_.front();
        const uint32_t rc = pool_.refcount(id);
        if (rc != 1) {
            fail(LLMKV_ERR_INTERNAL,
                 "prefix cache: evictable block %u has refcount %u (retained without acquire)", id,
                 rc);
        }
        if (evict_hook_) evict_hook_(id, nodes_[id].key, stored_tokens(id));
        unindex_leaf(id);
        pool_.release(id);
        if (evicted) evicted->push_back(id);
        ++freed;
    }
    return freed;
}

bool PrefixCache::allocate_with_eviction(uint32_t n, std::vector<uint32_t> &out) {
    const uint32_t n_free = pool_.n_free();
    out.reserve(out.size() + n);  // before any eviction: a throw here changes nothing
    if (n > n_free) {
        const uint32_t short_by = n - n_free;
        if (short_by > n_cold_) return false;
        // Every cold block can be evicted: its subtree is cold, so repeatedly taking the
        // childless idle blocks reaches it.
        const uint32_t freed = evict(short_by);
        if (freed != short_by) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: evicted %u of %u reclaimable blocks", freed,
                 short_by);
        }
    }
    const size_t first = out.size();
    if (!pool_.allocate_many(n, out)) {
        fail(LLMKV_ERR_INTERNAL, "prefix cache: pool refused %u blocks after eviction", n);
    }
    for (size_t i = first; i < out.size(); ++i) forget_duplicate(out[i]);
    return true;
}

void PrefixCache::clear() {
    for (uint32_t id = 0; id < nodes_.size(); ++id) {
        if (!nodes_[id].indexed) continue;
        nodes_[id] = Node{};
        pool_.release(id);
    }
    map_.clear();
    heap_.clear();
    n_cached_ = n_idle_ = n_cold_ = 0;
}

// ---- invariants ---------------------------------------------------------------------------

void PrefixCache::check_invariants() const {
    const uint32_t n_total = uint32_t(nodes_.size());
    if (n_total != pool_.n_total()) {
        fail(LLMKV_ERR_INTERNAL, "prefix cache: sized for %u blocks, pool has %u", n_total,
             pool_.n_total());
    }
    std::vector<uint32_t> children(n_total, 0), hot_children(n_total, 0);
    uint32_t n_cached = 0, n_idle = 0, n_cold = 0, n_leaf_idle = 0;
    for (uint32_t id = 0; id < n_total; ++id) {
        const Node &nd = nodes_[id];
        if (!nd.indexed) {
            if (nd.heap_pos != kNoBlock || nd.n_children || nd.n_hot_children || nd.busy ||
                nd.hot || nd.serial) {
                fail(LLMKV_ERR_INTERNAL, "prefix cache: uncached block %u has cache state", id);
            }
            if (pool_.refcount(id) == 0 && nd.dup_of != kNoBlock) {
                fail(LLMKV_ERR_INTERNAL, "prefix cache: free block %u keeps a duplicate record",
                     id);
            }
            continue;
        }
        if (nd.dup_of != kNoBlock || nd.serial == 0) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: cached block %u has a bad serial or record",
                 id);
        }
        ++n_cached;
        auto it = map_.find(nd.key);
        if (it == map_.end() || it->second != id) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: block %u is not in the map under its key", id);
        }
        if (nd.parent != kNoBlock) {
            if (nd.parent >= n_total || !nodes_[nd.parent].indexed) {
                fail(LLMKV_ERR_INTERNAL, "prefix cache: block %u has uncached parent %u", id,
                     nd.parent);
            }
            ++children[nd.parent];
        }
        const BlockHashKey pk =
            nd.group ? local_parent_key(parent_key(id), nd.group) : parent_key(id);
        if (nd.group && nd.parent == kNoBlock) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: local block %u has no chain block", id);
        }
        if (key_for(pk, stored_tokens(id)) != nd.key) {
            fail(LLMKV_ERR_INTERNAL,
                 "prefix cache: block %u key does not match its parent and tokens", id);
        }
        const uint32_t rc = pool_.refcount(id);
        if (rc == 0) fail(LLMKV_ERR_INTERNAL, "prefix cache: cached block %u has refcount 0", id);
        if (nd.busy != (rc > 1)) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: block %u refcount %u but %s", id, rc,
                 nd.busy ? "busy" : "evictable");
        }
        if (!nd.busy) ++n_idle;
        if (!nd.hot) ++n_cold;
        if (nd.hot && nd.parent != kNoBlock) ++hot_children[nd.parent];
    }
    for (uint32_t id = 0; id < n_total; ++id) {
        const Node &nd = nodes_[id];
        if (!nd.indexed) continue;
        if (nd.n_children != children[id] || nd.n_hot_children != hot_children[id]) {
            fail(LLMKV_ERR_INTERNAL,
                 "prefix cache: block %u counts %u children (%u hot), has %u (%u)", id,
                 nd.n_children, nd.n_hot_children, children[id], hot_children[id]);
        }
        if (nd.hot != (nd.busy || hot_children[id] > 0)) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: block %u hot flag is stale", id);
        }
        const bool should_be_on_heap = !nd.busy && nd.n_children == 0;
        if (should_be_on_heap) ++n_leaf_idle;
        if (should_be_on_heap != (nd.heap_pos != kNoBlock)) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: block %u %s the eviction heap", id,
                 should_be_on_heap ? "missing from" : "wrongly on");
        }
    }
    if (map_.size() != n_cached || n_cached != n_cached_ || n_idle != n_idle_ ||
        n_cold != n_cold_) {
        fail(LLMKV_ERR_INTERNAL,
             "prefix cache: counters (map %zu, cached %u, evictable %u, reclaimable %u) != "
             "recount (%u, %u, %u)",
             map_.size(), n_cached_, n_idle_, n_cold_, n_cached, n_idle, n_cold);
    }
    if (heap_.size() != n_leaf_idle) {
        fail(LLMKV_ERR_INTERNAL, "prefix cache: heap holds %zu blocks, %u expected", heap_.size(),
             n_leaf_idle);
    }
    for (uint32_t pos = 0; pos < heap_.size(); ++pos) {
        const uint32_t id = heap_[pos];
        if (id >= n_total || nodes_[id].heap_pos != pos) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: heap slot %u holds %u out of place", pos, id);
        }
        if (pos > 0 && heap_less(pos, (pos - 1) / 2)) {
            fail(LLMKV_ERR_INTERNAL, "prefix cache: heap order broken at slot %u", pos);
        }
    }
    // free + referenced by others + evictable == total.
    uint32_t referenced_by_others = 0;
    for (uint32_t id = 0; id < n_total; ++id) {
        const uint32_t rc = pool_.refcount(id);
        if (rc > 0 && !(nodes_[id].indexed && rc == 1)) ++referenced_by_others;
    }
    if (pool_.n_free() + referenced_by_others + n_idle != n_total) {
        fail(LLMKV_ERR_INTERNAL, "prefix cache: free %u + referenced %u + evictable %u != total %u",
             pool_.n_free(), referenced_by_others, n_idle, n_total);
    }
}

}  // namespace llmkv
