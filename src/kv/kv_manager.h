// KvManager: everything that holds KV bytes, behind one narrow view. It owns the device
// pools (KvCache: sealed blocks and tail slots), the prefix cache, the host tier (region,
// copy queue from the backend, host-resident prefix store) and the host byte budget. The
// scheduler and the engine see a session's KV only as a KvSeq and ask for blocks, shares,
// parks, resumes and offloads; they never touch a pool, a host block or a copy.
//
// Not thread-safe: it lives under the engine's lock. Invariants (check_invariants): every
// referenced block is held by exactly the sequences (and the prefix cache) that name it;
// every host block belongs to one sequence or to the prefix store; a block under a copy
// is never freed (device blocks stay referenced until the copy out completes, host blocks
// are freed only after the copy in completes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/block_hash.h"
#include "kv/host_prefix_store.h"
#include "kv/host_tier.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "kv/snapshot.h"
#include "kv/transfer.h"

namespace llmkv {

// The host-tier part of a sequence's KV. Parking copies the blocks only this sequence holds
// (and its tail) to host blocks; when that copy is done their device blocks are released
// and their block-table entries become SessionKv::kHostBlock. Resuming allocates device
// blocks for those entries and copies back.
struct HostKv {
    enum class Phase : uint8_t { kNone, kOut, kParked, kIn };
    Phase phase = Phase::kNone;
    std::vector<void *>
        blocks;  // per block-table entry: its host copy, or nullptr (kept on the device)
    std::vector<void *> local;  // the same per local block-table entry (layer groups)
    void *tail = nullptr;       // host copy of the tail slot
    Ticket ticket = 0;          // the copy in flight (kOut, kIn)
    uint64_t bytes = 0;         // host bytes held (block and tail sizes)
};

// One sequence's KV as the KV manager keeps it (a session, or a prefix handle's state).
struct KvSeq {
    SessionKv kv;                          // kv.n_tokens = tokens whose KV is computed
    std::vector<BlockHashKey> block_keys;  // prefix-cache key of each sealed block offered so far
    // KV from a source the engine does not vouch for (a loaded snapshot): none of its blocks,
    // nor any computed after them (they attended to it), is offered to the shared prefix
    // cache. Inherited by share(); cleared when the KV is dropped.
    bool unshared = false;
    // KV sink (KvGeometry::sink): the tail's sink rows do not hold position 0 yet, because
    // the sequence took block 0 from the prefix cache instead of computing it. The engine
    // computes position 0 alone (Engine::compute_sinks) before the sequence's next pass.
    // Inherited by share(); cleared when the KV is dropped.
    bool sink_missing = false;
    HostKv host;
    // Long context: a sequence whose KV exceeds the device pool keeps its older blocks in the
    // host tier; per block-table entry, the host copy (entry = SessionKv::kHostBlock) or
    // nullptr. Attention reads them in place through block_ptrs.
    std::vector<void *> offloaded;
    uint32_t n_offloaded = 0;
    std::vector<const uint8_t *> block_ptrs;

    // ---- what the scheduler, the engine and the API ask (outside kv/ no field is named:
    // tests/structure/check_includes.py) ----------------------------------------------------
    // Tokens whose KV is computed (positions [0, n_tokens) are in blocks and the tail).
    uint32_t n_tokens() const { return kv.n_tokens; }
    // Entries of the block table (sealed blocks, on the device or in the host tier).
    uint32_t n_blocks() const { return uint32_t(kv.blocks.size()); }
    bool has_blocks() const { return !kv.blocks.empty(); }
    bool has_tail() const { return kv.tail >= 0; }
    // Holds any KV at all (blocks or a tail slot).
    bool holds_kv() const { return kv.tail >= 0 || !kv.blocks.empty(); }
    // Where the KV is: all on the device, or parked in the host tier with the copy out
    // in flight (parking), done (parked) or the copy back in flight (resuming).
    bool on_device() const { return host.phase == HostKv::Phase::kNone; }
    bool parking() const { return host.phase == HostKv::Phase::kOut; }
    bool parked() const { return host.phase == HostKv::Phase::kParked; }
    bool resuming() const { return host.phase == HostKv::Phase::kIn; }
    // Sealed blocks of a long context kept in the host tier (read in place).
    uint32_t offloaded_blocks() const { return n_offloaded; }
    // KV sink: position 0 must be computed alone before the next pass (see sink_missing).
    bool needs_sink() const { return sink_missing; }
    void sink_written() { sink_missing = false; }
    // The block table a forward pass reads and appends to (ForwardSpan::kv).
    SessionKv *table() { return &kv; }
    // A table over this sequence's tail slot alone, holding nothing computed: the one-token
    // pass that writes position 0 into the KV sink rows uses it.
    SessionKv tail_only() const {
        SessionKv t;
        t.tail = kv.tail;
        return t;
    }
};

struct KvManagerConfig {
    KvGeometry geometry;
    uint32_t n_sealed_blocks = 0;
    uint32_t n_tail_slots = 0;
    bool prefix_cache = false;
    std::string prefix_salt;  // model fingerprint, codecs, block size (see the engine)
    uint64_t host_bytes = 0;  // 0: no host tier
};

// Counters for llmkv_stats.
struct KvCounters {
    uint64_t resumes = 0;
    uint64_t bytes_to_host = 0;
    uint64_t bytes_to_device = 0;
    uint64_t demotions = 0;
    uint64_t promotions = 0;
};

class KvManager {
public:
    explicit KvManager(const KvManagerConfig &config);
    ~KvManager();
    KvManager(const KvManager &) = delete;
    KvManager &operator=(const KvManager &) = delete;

    // Connects the backend's side, once, before any KV moves: the copy queue (async when
    // there is a host tier), where the host region comes from, and the tail copy inside
    // the pools.
    void attach(std::unique_ptr<KvTransferQueue> queue, const HostAllocator &host_allocator,
                std::function<void(int64_t, int64_t)> copy_tail);

    const KvGeometry &geometry() const { return cache_->geometry(); }
    KvCache &cache() { return *cache_; }
    const KvCache &cache() const { return *cache_; }
    bool has_host_tier() const { return host_ != nullptr; }
    bool has_prefix_cache() const { return prefix_ != nullptr; }
    const KvCounters &counters() const { return counters_; }

    // ---- blocks ---------------------------------------------------------------------
    // Reserves blocks and a tail slot for positions [0, n_tokens); all or nothing.
    bool reserve(KvSeq &s, uint32_t n_tokens) { return cache_->reserve(s.kv, n_tokens); }
    uint32_t blocks_needed(const KvSeq &s, uint32_t n_tokens) const {
        return cache_->blocks_needed(s.kv, n_tokens);
    }
    // Sealed blocks an allocation can obtain now: free plus reclaimable cached blocks.
    uint32_t available() const { return cache_->sealed_available(); }
    uint32_t total_blocks() const { return cache_->sealed_pool().n_total(); }
    // Gives back blocks reserved past s.kv.n_tokens (after a failed pass); drops keys of
    // blocks no longer held.
    void trim(KvSeq &s);
    // Holders of a block other than the prefix cache.
    uint32_t holders(uint32_t block) const;
    // Blocks that return to the pool (or become evictable) when the sequence lets go.
    uint32_t freeable_blocks(const KvSeq &s) const;
    // Pool blocks a sequence holds at most on its way to n_tokens (with layer groups: its
    // sealed blocks, and local blocks for the window and one step; see set_max_step_tokens).
    uint32_t peak_blocks(uint32_t n_tokens) const;
    // The most tokens one step computes for a sequence (the scheduler's token budget).
    void set_max_step_tokens(uint32_t n) { max_step_tokens_ = n; }
    // Whether n_tokens of s could be held if every other sequence but the pinned handles
    // gave up its blocks.
    bool could_hold_alone(const KvSeq &s, uint32_t n_tokens) const;
    // Whether n_tokens of s could be held by the device pool (alone, keeping one step's
    // worth of new blocks, max_step_tokens) and the host tier's free room together.
    bool could_hold_with_host(const KvSeq &s, uint32_t n_tokens, uint32_t max_step_tokens) const;
    // Prefix handles pin their blocks for good (could_hold_alone counts them).
    void pin_handle(const KvSeq *s) { handles_.push_back(s); }
    void unpin_handle(const KvSeq *s);

    // ---- prefixes -----------------------------------------------------------------------
    // A sequence about to start from nothing takes the longest cached chain of full blocks
    // of tokens (all but the last token), promoting blocks back from the host tier.
    void match_prefix(KvSeq &s, const std::vector<int32_t> &tokens);
    // After a step: offers the sequence's newly sealed blocks to the prefix cache (switching
    // to an equal cached block when there is one), then, with layer groups, releases the
    // local blocks that left the window (KvCache::release_outside_window).
    void publish_sealed(KvSeq &s, const std::vector<int32_t> &tokens);
    // Makes `to` share `from`'s sealed blocks and own a copy of its tail. Throws
    // KV_CAPACITY (no tail slot) or UNSUPPORTED (from holds host-tier blocks).
    void share(const KvSeq &from, KvSeq &to, uint32_t max_sessions);
    uint64_t prefix_hit_tokens() const { return prefix_ ? prefix_->hit_tokens() : 0; }
    uint64_t prefix_miss_tokens() const { return prefix_ ? prefix_->miss_tokens() : 0; }
    uint32_t cached_blocks() const { return prefix_ ? prefix_->n_evictable() : 0; }

    // ---- host tier -------------------------------------------------------------------
    // Starts copying the sequence's exclusive blocks and tail to host blocks (false,
    // nothing changed, without a host tier or when it is full); with wait it completes at
    // once.
    bool park_out(KvSeq &s, bool wait);
    void finish_park_out(KvSeq &s);
    // Reserves device blocks for a parked sequence and starts the copy back (false, nothing
    // changed, when the pool cannot supply them now). Blocks it needs: resume_blocks(s).
    uint32_t resume_blocks(const KvSeq &s) const;
    bool start_resume(KvSeq &s);
    void finish_resume(KvSeq &s);
    // Finishes the copy of s if it is done (or, with wait, when it is); returns true when
    // a resume completed (the sequence is on the device again).
    bool reap(KvSeq &s, bool wait);
    // Moves up to n of the sequence's exclusive sealed blocks to the host tier
    // (synchronously; only with a backend that reads host blocks); returns how many moved.
    uint32_t offload_blocks(KvSeq &s, uint32_t n);
    // (Never with layer groups: host block addresses cover group 0 only.)
    void set_offload_allowed(bool allowed) { offload_allowed_ = allowed && !geometry().grouped(); }
    // block_ptrs for a sequence with offloaded blocks (attention reads them in place);
    // nullptr when every block is in the pool.
    const uint8_t *const *block_addresses(KvSeq &s);
    // Releases every block of a sequence, device and host, after its copy in flight, and
    // forgets what it knew of them (prefix-cache keys, the sink and unshared marks).
    void drop(KvSeq &s);
    // Waits for every copy in flight.
    void drain();

    // ---- snapshots -----------------------------------------------------------------------
    // The layout part of what a snapshot of these pools must agree on.
    SnapshotMeta snapshot_meta(const std::string &model_fingerprint,
                               const std::string &kernel_id) const;
    void save_snapshot(const KvSeq &s, SnapshotMeta meta, const std::string &path);
    // Fills s (empty) with the snapshot's cached blocks and tail. KV_CAPACITY when the pool
    // cannot hold them (nothing changed).
    // shared: its blocks may reach the shared prefix cache (else s is marked unshared).
    void load_snapshot(KvSeq &s, const LoadedSnapshot &snap, const std::string &path, bool shared);

    // ---- stats and checks ---------------------------------------------------------------
    uint64_t host_bytes_total() const;
    uint64_t host_bytes_used() const { return host_bytes_held_; }
    uint64_t host_region_used() const;  // the region's live block bytes (allocator view)
    size_t host_blocks() const;
    uint64_t copy_ns() const { return transfers_ ? transfers_->copy_ns() : 0; }
    // Throws LLMKV_ERR_INTERNAL if a pool invariant does not hold for these sequences
    // (every live sequence and handle).
    void check_invariants(const std::vector<const KvSeq *> &seqs) const;

private:
    bool host_reserve(uint64_t bytes);
    void match_prefix_impl(KvSeq &s, const std::vector<int32_t> &tokens);
    size_t match_local_blocks(KvSeq &s, const std::vector<int32_t> &tokens, size_t m);
    void publish_blocks(KvSeq &s, const std::vector<int32_t> &tokens);
    void demote(uint32_t block, const BlockHashKey &key, const int32_t *tokens) noexcept;

    KvManagerConfig config_;
    std::unique_ptr<KvCache> cache_;
    std::unique_ptr<PrefixCache> prefix_;  // after cache_: destroyed first; null when disabled
    std::unique_ptr<HostTier> host_;       // null without a host tier
    std::unique_ptr<KvTransferQueue> transfers_;  // after host_: drained and destroyed first
    std::unique_ptr<HostPrefixStore>
        host_prefix_;  // demoted prefix-cache blocks (host tier + prefix cache)
    std::vector<const KvSeq *> handles_;
    uint64_t host_bytes_held_ =
        0;  // host-tier bytes held by sequences and demoted blocks, within host_bytes
    bool offload_allowed_ = true;
    uint32_t max_step_tokens_ = 512;
    KvCounters counters_;
};

}  // namespace llmkv
