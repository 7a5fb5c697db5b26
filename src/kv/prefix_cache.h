// PrefixCache: automatic prefix caching over the sealed BlockPool. Indexes sealed blocks by
// a hash chain of their token ids, hands matching prefixes to new sessions by refcount, and
// keeps blocks that only the cache still holds in LRU order, reclaimed oldest-first, tail-first.
//
// Ownership. The cache holds ONE reference of its own on every block it indexes (taken by
// publish, dropped by evict/clear). A block is
//   busy        indexed, refcount > 1: some session/handle holds it too;
//   idle        indexed, refcount == 1: held only by the cache ("cached-unreferenced"); these
//               are the evictable blocks, ordered by the time they became idle (LRU);
//   reclaimable idle, and no block in its cached subtree is busy. Eviction only removes
//               blocks with no cached child (chains shrink from the deepest block), so an idle
//               parent of a busy child stays until that child is released. This only happens
//               when a session holds a cached child without its cached parent (it published
//               its own copy of the parent, see PublishStatus::kDuplicate).
// Every holder other than the cache takes references through match()/acquire() and gives them
// back through release() (or pool.release() followed by on_release()); a reference taken on
// an idle block behind the cache's back is an invariant violation (check_invariants, evict).
//
// Eviction order: the evictable block with no cached child that became idle longest ago goes
// first (equivalently: scan the LRU from the oldest and take the first childless block). When
// the last child of an idle parent goes, the parent keeps its own place in that order, so a
// shared prefix that sessions keep using outlives the stale branches below it. Implemented
// with an indexed binary heap keyed by the idle time (no scanning, no allocation).
//
// Matching is verified: every hit compares the stored token ids of the block and that the
// block's cached parent is the previous hit; publish links a block only under the parent block
// its publisher holds (or one that block was verified to duplicate). So a returned chain holds
// the asked prefix token for token, whatever the hash does; the hash only finds candidates.
// Keys include a salt (see block_salt) so blocks of an incompatible model/codec/block size
// never match.
//
// Not thread-safe: the engine calls it from the step thread only. No allocation after
// construction except the unordered_map's nodes on publish and the caller's output vectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace llmkv {

class PrefixCache {
public:
    // The hash of one block; block_key unless a test wants to force collisions.
    using KeyFn = BlockHashKey (*)(const BlockHashKey &parent, const int32_t *tokens,
                                   uint32_t n_tokens, const BlockHashKey &salt);
    static constexpr uint32_t kNoBlock = UINT32_MAX;

    enum class PublishStatus {
        kInserted,       // new key: the block is now cached (the cache took a reference)
        kAlreadyCached,  // this very block is already cached under this key: nothing changed
        kDuplicate,      // an equal block (same cached parent, same tokens) is cached: block_id
                         // names it; the caller may switch to it (acquire it, release its own)
        kCollision,      // the key is taken by a block with other content: not cached
        kOrphan,         // the parent is not cached (evicted), or parent_block is neither the
                         // cached parent nor a verified duplicate of it: not cached, since it
                         // could never be matched or could not be linked safely
    };
    struct PublishResult {
        uint32_t block_id;  // the canonical block for this content (the argument unless kDuplicate)
        BlockHashKey key;   // the block's key: the parent key of the session's next block
        PublishStatus status;
    };

    // pool must outlive the cache. block_tokens: tokens per block (> 0). salt: block_salt()
    // of the engine's compatibility string.
    PrefixCache(BlockPool &pool, uint32_t block_tokens, const BlockHashKey &salt,
                KeyFn key_fn = &block_key);
    // Drops the cache's references (as clear()).
    ~PrefixCache();
    PrefixCache(const PrefixCache &) = delete;
    PrefixCache &operator=(const PrefixCache &) = delete;

    uint32_t block_tokens() const { return block_tokens_; }
    const BlockHashKey &salt() const { return salt_; }
    BlockPool &pool() { return pool_; }

    // Called for every block eviction frees, before it leaves the index (its bytes are
    // still intact): the tiered cache copies it to the host tier here.
    using EvictHook =
        std::function<void(uint32_t block_id, const BlockHashKey &key, const int32_t *tokens)>;
    void set_evict_hook(EvictHook hook) { evict_hook_ = std::move(hook); }

    // Key of the block of block_tokens tokens that follows the block keyed parent
    // (kRootBlockKey for the first block of a sequence).
    BlockHashKey key_for(const BlockHashKey &parent, const int32_t *tokens) const {
        return key_fn_(parent, tokens, block_tokens_, salt_);
    }

    // Longest chain of cached blocks equal to the full blocks of tokens[0, n_tokens). Appends
    // their ids, in position order, to out and returns how many; each is retained (refcount
    // + 1) for the caller and is no longer evictable. Counts hit_tokens (tokens covered by
    // the returned blocks) and miss_tokens (the other tokens of full blocks; a trailing
    // partial block counts as neither). Allocates only if out lacks capacity.
    size_t match(const int32_t *tokens, size_t n_tokens, std::vector<uint32_t> &out);
    std::vector<uint32_t> match(const int32_t *tokens, size_t n_tokens);

    // Offers a sealed block that the caller holds. tokens: its block_tokens token ids;
    // parent: the key of the block before it (kRootBlockKey for the first); parent_block:
    // the block the caller holds for the previous position (kNoBlock for the first). The
    // new block is linked under the cached block of the parent key only when parent_block is
    // that block or was published as a kDuplicate of it, so a child is never attached to a
    // parent with other content, even if keys collide. See PublishStatus.
    PublishResult publish(const BlockHashKey &parent, const int32_t *tokens, uint32_t block_id,
                          uint32_t parent_block);

    // ---- layer groups (KvGeometry::grouped) ----
    // A token block's local-layer blocks are cached as children of its group-0 block (the
    // chain block), keyed by key_for(local_parent_key(chain key, group), tokens). They are
    // leaves: eviction takes them before the chain block they hang from, and a chain match
    // (match) never returns them.
    static BlockHashKey local_parent_key(const BlockHashKey &chain_key, uint32_t group) {
        return {chain_key.lo ^ (0x9E3779B97F4A7C15ull * group),
                chain_key.hi ^ (0xC2B2AE3D27D4EB4Full * group) ^ 1u};
    }
    // Offers the local block of `group` (>= 1) of the token block whose chain block the
    // caller holds (chain_block, cached under chain_key). Statuses as publish.
    PublishResult publish_local(uint32_t group, const BlockHashKey &chain_key,
                                const int32_t *tokens, uint32_t block_id, uint32_t chain_block);
    // The cached local block of `group` hanging from cached chain block chain_block (whose
    // tokens are `tokens`), retained for the caller; kNoBlock when there is none.
    uint32_t match_local(uint32_t group, uint32_t chain_block, const int32_t *tokens);
    // Layer group of a cached block (0 for chain blocks).
    uint32_t group_of(uint32_t block_id) const {
        return contains(block_id) ? nodes_[block_id].group : 0;
    }

    // Takes a holder's reference on a block (a session switching to a canonical block, a
    // fork, a prefix handle); a cached block stops being evictable.
    void acquire(uint32_t block_id);
    // Gives back a holder's reference: pool.release(block_id) then on_release(block_id).
    void release(uint32_t block_id);
    // To call after every release of a sealed-pool block done through the pool itself: if
    // only the cache holds it now, it becomes evictable (newest in the LRU); an uncached block
    // that became free forgets its kDuplicate record.
    void on_release(uint32_t block_id);

    // Frees up to n_blocks evictable blocks (order above) to the pool's free list; returns
    // how many. Appends their ids to evicted when given.
    uint32_t evict(uint32_t n_blocks, std::vector<uint32_t> *evicted = nullptr);
    // Allocates n blocks (refcount 1, ids appended to out) from the free list, evicting the
    // fewest blocks needed first. All or nothing: returns false and changes nothing (pool,
    // cache, out) when free + reclaimable < n.
    bool allocate_with_eviction(uint32_t n, std::vector<uint32_t> &out);

    // Drops every reference the cache holds and forgets every block (engine destroy, cache
    // disabled). Blocks that sessions still hold stay with them, uncached. Stats are kept.
    void clear();

    bool contains(uint32_t block_id) const {
        return block_id < nodes_.size() && nodes_[block_id].indexed;
    }
    // Key of a cached block (fails with LLMKV_ERR_INTERNAL otherwise).
    const BlockHashKey &key_of(uint32_t block_id) const;

    uint32_t n_cached() const { return n_cached_; }     // indexed blocks
    uint32_t n_evictable() const { return n_idle_; }    // indexed, refcount 1
    uint32_t n_reclaimable() const { return n_cold_; }  // what eviction can free now
    uint64_t hit_tokens() const { return hit_tokens_; }
    uint64_t miss_tokens() const { return miss_tokens_; }

    // Throws llmkv::Error(LLMKV_ERR_INTERNAL) when an invariant does not hold:
    //  - map and per-block records agree; every cached block's key is key_for(its parent's
    //    key, its stored tokens); its parent is cached; child counts are exact; a free block
    //    has no kDuplicate record;
    //  - every cached block has refcount >= 1; idle == (refcount == 1); evictable set ==
    //    {cached blocks with refcount 1}; the eviction heap holds exactly the idle blocks
    //    without cached children, once each, in heap order;
    //  - reclaimable == idle blocks whose cached subtree has no busy block;
    //  - free + referenced by others + evictable == total.
    // O(n_total * block_tokens); meant for tests and debug builds. Does not check the pool
    // itself (pool.check_invariants() does).
    void check_invariants() const;

private:
    struct Node {
        BlockHashKey key;
        uint64_t idle_since = 0;      // clock value when it last became idle
        uint32_t parent = kNoBlock;   // cached parent block, kNoBlock for a first block
        uint32_t n_children = 0;      // cached blocks whose parent this is
        uint32_t n_hot_children = 0;  // of those, the hot ones
        uint32_t heap_pos = kNoBlock;
        uint64_t serial = 0;         // cached: unique per indexing
        uint32_t dup_of = kNoBlock;  // uncached: the block its last publish duplicated
        uint64_t dup_serial = 0;     // ... and that block's serial then
        bool indexed = false;
        bool busy = false;  // refcount > 1 (as last told)
        bool hot = false;   // busy, or a hot child: its subtree cannot be reclaimed
        uint8_t group = 0;  // layer group (0: a chain block; >= 1: a local block)
    };

    const int32_t *stored_tokens(uint32_t id) const {
        return tokens_.data() + size_t(id) * block_tokens_;
    }
    bool tokens_equal(uint32_t id, const int32_t *tokens) const;
    BlockHashKey parent_key(uint32_t id) const;
    PublishResult publish_in_group(uint32_t group, const BlockHashKey &parent,
                                   const int32_t *tokens, uint32_t block_id, uint32_t parent_block);
    void check_id(uint32_t id, const char *what) const;
    // The cached block to link a child under, kNoBlock for a first block, or kUnlinkable.
    uint32_t resolve_parent(const BlockHashKey &parent, uint32_t parent_block) const;
    void forget_duplicate(uint32_t id) {
        nodes_[id].dup_of = kNoBlock;
        nodes_[id].dup_serial = 0;
    }
    static constexpr uint32_t kUnlinkable = UINT32_MAX - 1;

    void update_hot(uint32_t id);
    void mark_busy(uint32_t id);
    void mark_idle(uint32_t id);
    void unindex_leaf(uint32_t id);

    bool heap_less(uint32_t a, uint32_t b) const {
        return nodes_[heap_[a]].idle_since < nodes_[heap_[b]].idle_since;
    }
    void heap_swap(uint32_t a, uint32_t b);
    void heap_up(uint32_t pos);
    void heap_down(uint32_t pos);
    void heap_push(uint32_t id);
    void heap_remove(uint32_t id);

    BlockPool &pool_;
    const uint32_t block_tokens_;
    const BlockHashKey salt_;
    const KeyFn key_fn_;
    EvictHook evict_hook_;
    std::vector<Node> nodes_;      // by block id
    std::vector<int32_t> tokens_;  // block_tokens per block id
    std::vector<uint32_t> heap_;   // idle blocks without cached children, min idle_since on top
    std::unordered_map<BlockHashKey, uint32_t, BlockHashKeyHasher> map_;
    uint64_t clock_ = 0;
    uint64_t next_serial_ = 1;
    uint32_t n_cached_ = 0;
    uint32_t n_idle_ = 0;
    uint32_t n_cold_ = 0;  // cached blocks that are not hot
    uint64_t hit_tokens_ = 0;
    uint64_t miss_tokens_ = 0;
};

}  // namespace llmkv
