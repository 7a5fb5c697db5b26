// KvManager: pools, prefix cache, host tier, transfers and snapshots of the KV store.
#include "kv/kv_manager.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace llmkv {

KvManager::KvManager(const KvManagerConfig &c) : config_(c) {
    cache_ = std::make_unique<KvCache>(c.geometry, c.n_sealed_blocks, c.n_tail_slots);
    if (c.geometry.grouped()) offload_allowed_ = false;  // host block addresses cover group 0 only
    if (c.prefix_cache) {
        prefix_ = std::make_unique<PrefixCache>(cache_->sealed_pool(), c.geometry.block_tokens,
                                                block_salt(c.prefix_salt));
        cache_->set_prefix_cache(prefix_.get());
    }
}

void KvManager::attach(std::unique_ptr<KvTransferQueue> queue, const HostAllocator &host_allocator,
                       std::function<void(int64_t, int64_t)> copy_tail) {
    transfers_ = std::move(queue);
    cache_->set_tail_copier(std::move(copy_tail));
    if (config_.host_bytes == 0) return;
    host_ = std::make_unique<HostTier>(config_.host_bytes, host_allocator);
    LLMKV_LOG_INFO_F("host tier: %.1f MiB (%s)", host_->bytes_total() / 1048576.0,
                     host_->locked() ? "locked" : "not locked");
    // The tiered prefix cache promotes chain blocks only; with layer groups a promoted chain
    // would lack its local blocks, so it is off there.
    if (prefix_ && !geometry().grouped()) {
        host_prefix_ = std::make_unique<HostPrefixStore>();
        prefix_->set_evict_hook([this](uint32_t block, const BlockHashKey &key,
                                       const int32_t *tokens) { demote(block, key, tokens); });
    }
}

KvManager::~KvManager() {
    drain();
    if (prefix_) prefix_->set_evict_hook(nullptr);
    if (host_prefix_) {
        while (void *p = host_prefix_->take_oldest()) host_->free_block(p);
    }
    if (prefix_) prefix_->clear();
    // The host tier's memory may come from the backend (a device's pinned allocator): give it
    // back while the backend exists.
    transfers_.reset();
    host_.reset();
}

void KvManager::drain() {
    if (transfers_) transfers_->wait_all();
}

// ---- blocks -------------------------------------------------------------------------------

void KvManager::trim(KvSeq &s) {
    cache_->trim(s.kv);
    if (s.block_keys.size() > s.kv.blocks.size()) s.block_keys.resize(s.kv.blocks.size());
}

uint32_t KvManager::holders(uint32_t block) const {
    return cache_->sealed_pool().refcount(block) - (prefix_ && prefix_->contains(block) ? 1 : 0);
}

uint32_t KvManager::freeable_blocks(const KvSeq &s) const {
    uint32_t n = 0;
    for (const std::vector<uint32_t> *table : {&s.kv.blocks, &s.kv.local}) {
        for (uint32_t id : *table) {
            if (id != SessionKv::kHostBlock && id != SessionKv::kReleased && holders(id) == 1) ++n;
        }
    }
    return n;
}

uint32_t KvManager::peak_blocks(uint32_t n_tokens) const {
    const KvGeometry &g = geometry();
    const uint32_t sealed = g.sealed_blocks(n_tokens);
    if (!g.grouped()) return sealed;
    // Reached in steps of at most max_step_tokens_: during the last one the local blocks
    // from the window of its first token on are held (released after it); the most when
    // that step is a full one.
    const uint32_t first = n_tokens > max_step_tokens_ ? n_tokens - max_step_tokens_ : 0;
    const uint64_t local = sealed - std::min(sealed, g.local_live_from(first));
    return uint32_t(std::min<uint64_t>(UINT32_MAX, sealed + local * (g.n_groups - 1)));
}

void KvManager::unpin_handle(const KvSeq *s) {
    auto it = std::find(handles_.begin(), handles_.end(), s);
    if (it != handles_.end()) handles_.erase(it);
}

bool KvManager::could_hold_alone(const KvSeq &s, uint32_t n_tokens) const {
    const uint32_t total = cache_->sealed_pool().n_total();
    std::vector<bool> pinned(total, false);
    for (const KvSeq *h : handles_) {
        for (uint32_t id : h->kv.blocks) pinned[id] = true;
        for (uint32_t id : h->kv.local) {
            if (id < total) pinned[id] = true;
        }
    }
    for (const std::vector<uint32_t> *table : {&s.kv.blocks, &s.kv.local}) {
        for (uint32_t id : *table) {
            if (id < total) pinned[id] = false;  // already the sequence's own
        }
    }
    uint32_t n_pinned = uint32_t(std::count(pinned.begin(), pinned.end(), true));
    return peak_blocks(n_tokens) <= total - n_pinned;
}

bool KvManager::could_hold_with_host(const KvSeq &s, uint32_t n_tokens,
                                     uint32_t max_step_tokens) const {
    if (!host_ || !offload_allowed_) return false;
    const KvGeometry &g = geometry();
    const uint64_t block_bytes = cache_->sealed_pool().block_bytes();
    const uint64_t host_room = (config_.host_bytes - host_bytes_held_) / block_bytes;
    // The device keeps at least one step's worth of new blocks; the rest may go to the host.
    const uint32_t on_device =
        std::min(g.sealed_blocks(n_tokens), max_step_tokens / g.block_tokens + 2);
    const uint32_t total = g.sealed_blocks(n_tokens);
    return could_hold_alone(s, on_device * g.block_tokens) &&
           total - on_device <= host_room + s.n_offloaded;
}

// ---- prefixes -----------------------------------------------------------------------------

void KvManager::match_prefix(KvSeq &s, const std::vector<int32_t> &tokens) {
    if (!prefix_ || s.kv.n_tokens != 0 || !s.kv.blocks.empty() || tokens.size() < 2) return;
    try {
        match_prefix_impl(s, tokens);
    } catch (...) {
        // An allocation failed part-way: the sequence gives back what it matched and starts
        // from nothing, as before the call (matched blocks stay in the cache).
        cache_->release(s.kv);
        s.block_keys.clear();
        throw;
    }
}

void KvManager::match_prefix_impl(KvSeq &s, const std::vector<int32_t> &tokens) {
    const size_t limit = tokens.size() - 1;
    size_t m = prefix_->match(tokens.data(), limit, s.kv.blocks);
    if (geometry().grouped()) m = match_local_blocks(s, tokens, m);
    s.block_keys.clear();
    for (uint32_t id : s.kv.blocks) s.block_keys.push_back(prefix_->key_of(id));
    const uint32_t B = geometry().block_tokens;
    // Tiered cache: the chain may continue in the host tier; promote those blocks back.
    if (host_prefix_) {
        const size_t block_bytes = cache_->sealed_pool().block_bytes();
        while ((m + 1) * B <= limit) {
            const int32_t *t = tokens.data() + m * B;
            const BlockHashKey parent = m ? s.block_keys.back() : kRootBlockKey;
            const BlockHashKey key = prefix_->key_for(parent, t);
            if (!host_prefix_->find(key, t, B)) break;
            // Out of the store first: the allocation below may evict (and so demote) another
            // block, which may drop the oldest demoted entries to make room.
            void *data = host_prefix_->take(key);
            std::vector<uint32_t> id;
            bool promoted = false;
            try {
                s.kv.blocks.reserve(m + 1);
                s.block_keys.reserve(m + 1);
                if (cache_->allocate_sealed(1, id)) {
                    transfers_->submit({{KvTransfer::kBlockIn, id[0], data}}, true);
                    promoted = true;
                } else if (host_prefix_->insert(key, data, t, B)) {
                    data = nullptr;  // back in the store
                }
            } catch (...) {
                if (!id.empty()) cache_->release_sealed(id[0]);
                promoted = false;
                if (data) {
                    host_->free_block(data);
                    host_bytes_held_ -= block_bytes;
                }
                throw;
            }
            if (!promoted) {
                if (data) {  // could not go back into the store: the demoted copy is dropped
                    host_->free_block(data);
                    host_bytes_held_ -= block_bytes;
                }
                break;
            }
            host_->free_block(data);
            host_bytes_held_ -= block_bytes;
            counters_.bytes_to_device += block_bytes;
            s.kv.blocks.push_back(id[0]);
            PrefixCache::PublishResult r =
                prefix_->publish(parent, t, id[0], m ? s.kv.blocks[m - 1] : PrefixCache::kNoBlock);
            s.block_keys.push_back(r.key);
            ++counters_.promotions;
            ++m;
        }
    }
    s.kv.n_tokens = uint32_t(m) * B;
    s.sink_missing = geometry().sink && m > 0;
}

// Layer groups: the chain blocks alone cannot continue a sequence, its local layers also need
// the local blocks of the last window. Takes them from the cache for the longest matched
// prefix that has all of them (shorter prefixes need fewer); gives back the rest.
size_t KvManager::match_local_blocks(KvSeq &s, const std::vector<int32_t> &tokens, size_t m) {
    const KvGeometry &g = geometry();
    const uint32_t B = g.block_tokens, per = g.n_groups - 1;
    s.kv.local.reserve(m * per);
    while (m > 0) {
        const size_t from = g.local_live_from(uint32_t(m) * B);
        s.kv.local.assign(m * per, SessionKv::kReleased);
        bool complete = true;
        for (size_t j = from; j < m && complete; ++j) {
            for (uint32_t gr = 1; gr <= per; ++gr) {
                const uint32_t id = prefix_->match_local(gr, s.kv.blocks[j], tokens.data() + j * B);
                if (id == PrefixCache::kNoBlock) {
                    complete = false;
                    break;
                }
                s.kv.local[j * per + gr - 1] = id;
            }
        }
        if (complete) {
            s.kv.local_released = from * per;
            return m;
        }
        for (uint32_t &id : s.kv.local) {
            if (id != SessionKv::kReleased) cache_->release_sealed(id);
            id = SessionKv::kReleased;
        }
        cache_->release_sealed(s.kv.blocks.back());
        s.kv.blocks.pop_back();
        --m;
    }
    s.kv.local.clear();
    s.kv.local_released = 0;
    return 0;
}

void KvManager::publish_sealed(KvSeq &s, const std::vector<int32_t> &tokens) {
    if (prefix_ && !s.unshared) publish_blocks(s, tokens);
    cache_->release_outside_window(s.kv);
}

void KvManager::publish_blocks(KvSeq &s, const std::vector<int32_t> &tokens) {
    const uint32_t B = geometry().block_tokens, per = geometry().n_groups - 1;
    for (size_t i = s.block_keys.size(); i < s.kv.blocks.size(); ++i) {
        const BlockHashKey &parent = i ? s.block_keys[i - 1] : kRootBlockKey;
        uint32_t parent_block = i && s.kv.blocks[i - 1] != SessionKv::kHostBlock
                                    ? s.kv.blocks[i - 1]
                                    : PrefixCache::kNoBlock;
        PrefixCache::PublishResult r =
            prefix_->publish(parent, tokens.data() + i * B, s.kv.blocks[i], parent_block);
        s.block_keys.push_back(r.key);
        if (r.status == PrefixCache::PublishStatus::kDuplicate && r.block_id != s.kv.blocks[i]) {
            prefix_->acquire(r.block_id);
            prefix_->release(s.kv.blocks[i]);
            s.kv.blocks[i] = r.block_id;
        }
        for (uint32_t gr = 1; gr <= per; ++gr) {
            uint32_t &id = s.kv.local[i * per + gr - 1];
            if (id == SessionKv::kReleased || id == SessionKv::kHostBlock) continue;
            PrefixCache::PublishResult lr =
                prefix_->publish_local(gr, r.key, tokens.data() + i * B, id, s.kv.blocks[i]);
            if (lr.status == PrefixCache::PublishStatus::kDuplicate && lr.block_id != id) {
                prefix_->acquire(lr.block_id);
                prefix_->release(id);
                id = lr.block_id;
            }
        }
    }
}

void KvManager::share(const KvSeq &from, KvSeq &to, uint32_t max_sessions) {
    if (from.n_offloaded > 0) {
        fail(LLMKV_ERR_UNSUPPORTED,
             "the session's context exceeds the device pool (%u blocks in the host tier); "
             "it cannot be forked or made a prefix",
             from.n_offloaded);
    }
    std::vector<BlockHashKey> keys = from.block_keys;  // may throw: nothing shared yet
    if (!cache_->share(from.kv, to.kv)) {
        fail(LLMKV_ERR_KV_CAPACITY,
             "no free tail slot (max_sessions = %u counts sessions and prefixes)", max_sessions);
    }
    to.block_keys = std::move(keys);
    to.unshared = from.unshared;
    to.sink_missing = from.sink_missing;
}

// ---- host tier ----------------------------------------------------------------------------

bool KvManager::host_reserve(uint64_t bytes) {
    const uint64_t budget = config_.host_bytes;
    if (bytes > budget) return false;
    if (host_prefix_) {
        const size_t block_bytes = cache_->sealed_pool().block_bytes();
        while (host_bytes_held_ + bytes > budget && !host_prefix_->empty()) {
            host_->free_block(host_prefix_->take_oldest());
            host_bytes_held_ -= block_bytes;
        }
    }
    return host_bytes_held_ + bytes <= budget;
}

// Prefix-cache eviction hook: copies the block to the host tier (tiered prefix cache).
// Never throws: it runs inside the prefix cache's eviction, and a demotion is only an
// optimisation, so when memory runs out the block is simply not kept.
void KvManager::demote(uint32_t block, const BlockHashKey &key, const int32_t *tokens) noexcept {
    const size_t block_bytes = cache_->sealed_pool().block_bytes();
    void *p = nullptr;
    try {
        if (!host_reserve(block_bytes)) return;
        p = host_->allocate_block(block_bytes);
        if (!p) return;
        transfers_->submit({{KvTransfer::kBlockOut, block, p}}, true);
        if (!host_prefix_->insert(key, p, tokens, geometry().block_tokens)) {
            host_->free_block(p);
            return;
        }
    } catch (...) {
        if (p) {
            try {
                host_->free_block(p);
            } catch (...) {
            }
        }
        return;
    }
    host_bytes_held_ += block_bytes;
    counters_.bytes_to_host += block_bytes;
    ++counters_.demotions;
}

bool KvManager::park_out(KvSeq &s, bool wait) {
    if (!host_ || s.host.phase != HostKv::Phase::kNone || (s.kv.tail < 0 && s.kv.blocks.empty()))
        return false;
    const size_t block_bytes = cache_->sealed_pool().block_bytes(),
                 tail_bytes = cache_->tail_pool().block_bytes();
    // Block-table entries only this sequence holds: group-0 entries i, then local entries
    // as blocks.size() + i.
    std::vector<size_t> moved;
    const size_t nb = s.kv.blocks.size();
    for (size_t i = 0; i < nb + s.kv.local.size(); ++i) {
        const uint32_t id = i < nb ? s.kv.blocks[i] : s.kv.local[i - nb];
        if (id != SessionKv::kHostBlock && id != SessionKv::kReleased && holders(id) == 1)
            moved.push_back(i);
    }
    // The budget is host_bytes; the region itself is rounded up to the arena granularity.
    const uint64_t bytes = moved.size() * block_bytes + (s.kv.tail >= 0 ? tail_bytes : 0);
    if (!host_reserve(bytes)) return false;
    std::vector<void *> copies;
    if (!moved.empty() && !host_->allocate_blocks(block_bytes, moved.size(), copies)) return false;
    // Everything that may throw happens before the sequence changes; a throw gives the
    // host blocks back.
    void *tail = nullptr;
    std::vector<void *> host_blocks, host_local;
    Ticket ticket = 0;
    try {
        tail = s.kv.tail >= 0 ? host_->allocate_block(tail_bytes) : nullptr;
        if (s.kv.tail >= 0 && !tail) {
            for (void *p : copies) host_->free_block(p);
            return false;
        }
        std::vector<KvTransfer> ops;
        ops.reserve(moved.size() + 1);
        host_blocks.assign(nb, nullptr);
        host_local.assign(s.kv.local.size(), nullptr);
        for (size_t k = 0; k < moved.size(); ++k) {
            const size_t i = moved[k];
            (i < nb ? host_blocks[i] : host_local[i - nb]) = copies[k];
            ops.push_back(
                {KvTransfer::kBlockOut, i < nb ? s.kv.blocks[i] : s.kv.local[i - nb], copies[k]});
        }
        if (tail) ops.push_back({KvTransfer::kTailOut, s.kv.tail, tail});
        ticket = transfers_->submit(ops, false);
    } catch (...) {
        for (void *p : copies) host_->free_block(p);
        if (tail) host_->free_block(tail);
        throw;
    }
    s.host.blocks = std::move(host_blocks);
    s.host.local = std::move(host_local);
    s.host.tail = tail;
    s.host.bytes = bytes;
    host_bytes_held_ += bytes;
    counters_.bytes_to_host += bytes;
    s.host.ticket = ticket;
    s.host.phase = HostKv::Phase::kOut;
    if (wait) {
        transfers_->wait(s.host.ticket);
        finish_park_out(s);
    }
    return true;
}

void KvManager::finish_park_out(KvSeq &s) {
    for (size_t i = 0; i < s.host.blocks.size(); ++i) {
        if (!s.host.blocks[i]) continue;
        cache_->release_sealed(s.kv.blocks[i]);
        s.kv.blocks[i] = SessionKv::kHostBlock;
    }
    for (size_t i = 0; i < s.host.local.size(); ++i) {
        if (!s.host.local[i]) continue;
        cache_->release_sealed(s.kv.local[i]);
        s.kv.local[i] = SessionKv::kHostBlock;
    }
    if (s.host.tail) {
        cache_->tail_pool().release(uint32_t(s.kv.tail));
        s.kv.tail = -1;
    }
    s.host.ticket = 0;
    s.host.phase = HostKv::Phase::kParked;
}

uint32_t KvManager::resume_blocks(const KvSeq &s) const {
    uint32_t need = 0;
    for (void *p : s.host.blocks) need += p ? 1 : 0;
    for (void *p : s.host.local) need += p ? 1 : 0;
    return need;
}

bool KvManager::start_resume(KvSeq &s) {
    const uint32_t need = resume_blocks(s);
    std::vector<uint32_t> ids;
    if (!cache_->allocate_sealed(need, ids)) return false;
    int64_t tail = -1;
    if (s.host.tail && (tail = cache_->allocate_tail()) < 0) {
        for (uint32_t id : ids) cache_->release_sealed(id);
        return false;
    }
    const size_t block_bytes = cache_->sealed_pool().block_bytes(),
                 tail_bytes = cache_->tail_pool().block_bytes();
    // The copies are queued before the block table changes; a throw gives the blocks back.
    Ticket ticket = 0;
    try {
        std::vector<KvTransfer> ops;
        ops.reserve(ids.size() + 1);
        size_t k = 0;
        for (size_t i = 0; i < s.kv.blocks.size(); ++i) {
            if (s.host.blocks[i]) ops.push_back({KvTransfer::kBlockIn, ids[k++], s.host.blocks[i]});
        }
        for (size_t i = 0; i < s.host.local.size(); ++i) {
            if (s.host.local[i]) ops.push_back({KvTransfer::kBlockIn, ids[k++], s.host.local[i]});
        }
        if (tail >= 0) ops.push_back({KvTransfer::kTailIn, tail, s.host.tail});
        ticket = transfers_->submit(ops, false);
    } catch (...) {
        for (uint32_t id : ids) cache_->release_sealed(id);
        if (tail >= 0) cache_->tail_pool().release(uint32_t(tail));
        throw;
    }
    size_t k = 0;
    for (size_t i = 0; i < s.kv.blocks.size(); ++i) {
        if (s.host.blocks[i]) s.kv.blocks[i] = ids[k++];
    }
    for (size_t i = 0; i < s.host.local.size(); ++i) {
        if (s.host.local[i]) s.kv.local[i] = ids[k++];
    }
    if (tail >= 0) s.kv.tail = tail;
    counters_.bytes_to_device += need * block_bytes + (tail >= 0 ? tail_bytes : 0);
    s.host.ticket = ticket;
    s.host.phase = HostKv::Phase::kIn;
    return true;
}

void KvManager::finish_resume(KvSeq &s) {
    for (void *p : s.host.blocks) host_->free_block(p);
    for (void *p : s.host.local) host_->free_block(p);
    if (s.host.tail) host_->free_block(s.host.tail);
    host_bytes_held_ -= s.host.bytes;
    s.host = HostKv{};
    ++counters_.resumes;
}

bool KvManager::reap(KvSeq &s, bool wait) {
    if (s.host.phase != HostKv::Phase::kOut && s.host.phase != HostKv::Phase::kIn) return false;
    if (wait) {
        transfers_->wait(s.host.ticket);
    } else if (!transfers_->done(s.host.ticket)) {
        return false;
    }
    if (s.host.phase == HostKv::Phase::kOut) {
        finish_park_out(s);
        return false;
    }
    finish_resume(s);
    return true;
}

void KvManager::drop(KvSeq &s) {
    s.unshared = false;  // what it vouched nothing for is gone; recomputed KV is the engine's own
    s.sink_missing = false;
    s.block_keys.clear();
    if (s.host.phase == HostKv::Phase::kOut || s.host.phase == HostKv::Phase::kIn)
        transfers_->wait(s.host.ticket);
    if (host_) {
        for (void *p : s.host.blocks) host_->free_block(p);
        for (void *p : s.host.local) host_->free_block(p);
        if (s.host.tail) host_->free_block(s.host.tail);
    }
    host_bytes_held_ -= s.host.bytes;
    s.host = HostKv{};
    for (void *p : s.offloaded) {
        if (p) host_->free_block(p);
    }
    host_bytes_held_ -= uint64_t(s.n_offloaded) * cache_->sealed_pool().block_bytes();
    s.offloaded.clear();
    s.n_offloaded = 0;
    cache_->release(s.kv);
}

uint32_t KvManager::offload_blocks(KvSeq &s, uint32_t n) {
    if (!host_ || n == 0 || !offload_allowed_) return 0;
    const size_t block_bytes = cache_->sealed_pool().block_bytes();
    std::vector<size_t> picked;
    // Newest first: with the prefix cache on, the blocks released here are then a chain of
    // idle cached blocks ending in a leaf, which eviction reclaims (an idle cached block with
    // a cached child still held would not be). The choice does not change any result.
    for (size_t i = s.kv.blocks.size(); i-- > 0 && picked.size() < n;) {
        if (s.kv.blocks[i] != SessionKv::kHostBlock && holders(s.kv.blocks[i]) == 1)
            picked.push_back(i);
    }
    while (!picked.empty() && !host_reserve(picked.size() * block_bytes)) picked.pop_back();
    std::vector<void *> copies;
    if (picked.empty()) return 0;
    std::vector<KvTransfer> ops;
    ops.reserve(picked.size());
    s.offloaded.resize(s.kv.blocks.size(), nullptr);  // more null entries change nothing
    if (!host_->allocate_blocks(block_bytes, picked.size(), copies)) return 0;
    try {
        for (size_t k = 0; k < picked.size(); ++k)
            ops.push_back({KvTransfer::kBlockOut, s.kv.blocks[picked[k]], copies[k]});
        transfers_->submit(ops, true);
    } catch (...) {
        for (void *p : copies) host_->free_block(p);
        throw;
    }
    for (size_t k = 0; k < picked.size(); ++k) {
        cache_->release_sealed(s.kv.blocks[picked[k]]);
        s.kv.blocks[picked[k]] = SessionKv::kHostBlock;
        s.offloaded[picked[k]] = copies[k];
    }
    s.n_offloaded += uint32_t(picked.size());
    host_bytes_held_ += picked.size() * block_bytes;
    counters_.bytes_to_host += picked.size() * block_bytes;
    return uint32_t(picked.size());
}

const uint8_t *const *KvManager::block_addresses(KvSeq &s) {
    if (s.n_offloaded == 0) return nullptr;
    s.block_ptrs.resize(s.kv.blocks.size());
    for (size_t j = 0; j < s.kv.blocks.size(); ++j) {
        s.block_ptrs[j] = s.kv.blocks[j] == SessionKv::kHostBlock
                              ? static_cast<const uint8_t *>(s.offloaded[j])
                              : cache_->sealed_data(s.kv.blocks[j]);
    }
    return s.block_ptrs.data();
}

// ---- snapshots ----------------------------------------------------------------------------

SnapshotMeta KvManager::snapshot_meta(const std::string &model_fingerprint,
                                      const std::string &kernel_id) const {
    const KvGeometry &g = geometry();
    SnapshotMeta m = snapshot_meta_for(g);
    m.model_fingerprint = model_fingerprint;
    m.codec = snapshot_codec_string(g.dtype_k, g.dtype_v, g.rotate_k, g.rotate_v) +
              (g.sink ? " sink=1" : "") + " kernels=" + kernel_id;
    return m;
}

void KvManager::save_snapshot(const KvSeq &s, SnapshotMeta m, const std::string &path) {
    m.n_cached = s.kv.n_tokens;
    // Group-0 blocks, then the live local blocks (layer groups), as the snapshot stores them.
    std::vector<uint32_t> ids = s.kv.blocks;
    for (size_t i = s.kv.local_released; i < s.kv.local.size(); ++i) {
        if (s.kv.local[i] != SessionKv::kReleased) ids.push_back(s.kv.local[i]);
    }
    std::vector<const uint8_t *> blocks;
    std::vector<uint8_t> tail_bytes(m.tail_bytes, 0);
    const uint8_t *tail = tail_bytes.data();
    if (transfers_->host_view_block(0)) {
        // Pools in host memory: written from where they are.
        for (uint32_t id : ids) blocks.push_back(transfers_->host_view_block(id));
        if (s.kv.tail >= 0) tail = transfers_->host_view_tail(s.kv.tail);
        write_snapshot(path, m, blocks, tail);
        return;
    }
    // Device pools: the bytes come to host memory first.
    std::vector<uint8_t> staged(ids.size() * m.block_bytes);
    std::vector<KvTransfer> t;
    for (size_t i = 0; i < ids.size(); ++i) {
        t.push_back({KvTransfer::kBlockOut, ids[i], staged.data() + i * m.block_bytes});
        blocks.push_back(staged.data() + i * m.block_bytes);
    }
    if (s.kv.tail >= 0) t.push_back({KvTransfer::kTailOut, s.kv.tail, tail_bytes.data()});
    transfers_->submit(t, true);
    write_snapshot(path, m, blocks, tail);
}

void KvManager::load_snapshot(KvSeq &s, const LoadedSnapshot &snap, const std::string &path,
                              bool shared) {
    const SnapshotMeta &m = snap.meta();
    s.unshared = !shared;
    if (!cache_->reserve(s.kv, m.n_cached)) {
        fail(LLMKV_ERR_KV_CAPACITY, "KV pool cannot hold the %u cached tokens of snapshot %s",
             m.n_cached, path.c_str());
    }
    s.kv.n_tokens = m.n_cached;
    cache_->release_outside_window(s.kv);  // the snapshot holds only the live local blocks
    std::vector<uint32_t> ids = s.kv.blocks;
    for (size_t i = s.kv.local_released; i < s.kv.local.size(); ++i) ids.push_back(s.kv.local[i]);
    std::vector<KvTransfer> t;
    for (size_t i = 0; i < ids.size(); ++i) {
        t.push_back({KvTransfer::kBlockIn, ids[i], const_cast<uint8_t *>(snap.block(i))});
    }
    t.push_back({KvTransfer::kTailIn, s.kv.tail, const_cast<uint8_t *>(snap.tail())});
    transfers_->submit(t, true);
    s.kv.n_tokens = m.n_cached;
}

// ---- stats and checks ---------------------------------------------------------------------

uint64_t KvManager::host_bytes_total() const {
    return host_ ? host_->bytes_total() : 0;
}
uint64_t KvManager::host_region_used() const {
    return host_ ? host_->bytes_used() : 0;
}
size_t KvManager::host_blocks() const {
    return host_ ? host_->blocks_used() : 0;
}

void KvManager::check_invariants(const std::vector<const KvSeq *> &seqs) const {
    cache_->sealed_pool().check_invariants();
    cache_->tail_pool().check_invariants();
    // Every referenced block belongs to exactly the sequences that hold it.
    std::vector<uint32_t> refs(cache_->sealed_pool().n_total(), 0);
    std::vector<uint32_t> tail_refs(cache_->tail_pool().n_total(), 0);
    for (const KvSeq *s : seqs) {
        if (s->kv.blocks.size() != geometry().sealed_blocks(s->kv.n_tokens)) {
            fail(LLMKV_ERR_INTERNAL, "session holds %zu blocks for %u tokens", s->kv.blocks.size(),
                 s->kv.n_tokens);
        }
        const bool parked = s->host.phase == HostKv::Phase::kParked;
        for (size_t i = 0; i < s->kv.blocks.size(); ++i) {
            uint32_t id = s->kv.blocks[i];
            const bool on_host =
                (parked && i < s->host.blocks.size() && s->host.blocks[i] != nullptr) ||
                (i < s->offloaded.size() && s->offloaded[i] != nullptr);
            if ((id == SessionKv::kHostBlock) != on_host) {
                fail(LLMKV_ERR_INTERNAL,
                     "block-table entry %zu: host marker does not match the parked copies", i);
            }
            if (id != SessionKv::kHostBlock) ++refs[id];
        }
        // Layer groups: local entries per token block; released exactly before the window.
        const KvGeometry &g = geometry();
        const size_t per = g.n_groups - 1;
        if (s->kv.local.size() != s->kv.blocks.size() * per) {
            fail(LLMKV_ERR_INTERNAL, "session holds %zu local entries for %zu token blocks",
                 s->kv.local.size(), s->kv.blocks.size());
        }
        const size_t live_from =
            std::min<size_t>(g.local_live_from(s->kv.n_tokens), s->kv.blocks.size()) * per;
        for (size_t i = 0; i < s->kv.local.size(); ++i) {
            const uint32_t id = s->kv.local[i];
            if ((id == SessionKv::kReleased) != (i < live_from)) {
                fail(LLMKV_ERR_INTERNAL, "local entry %zu: %s, window starts at entry %zu", i,
                     id == SessionKv::kReleased ? "released" : "held", live_from);
            }
            const bool on_host = parked && i < s->host.local.size() && s->host.local[i] != nullptr;
            if ((id == SessionKv::kHostBlock) != on_host) {
                fail(LLMKV_ERR_INTERNAL,
                     "local entry %zu: host marker does not match the parked copies", i);
            }
            if (id != SessionKv::kHostBlock && id != SessionKv::kReleased) ++refs[id];
        }
        if (s->kv.tail >= 0) ++tail_refs[size_t(s->kv.tail)];
    }
    if (prefix_) {
        prefix_->check_invariants();
        for (uint32_t id = 0; id < refs.size(); ++id) refs[id] += prefix_->contains(id) ? 1 : 0;
    }
    for (uint32_t id = 0; id < refs.size(); ++id) {
        if (refs[id] != cache_->sealed_pool().refcount(id)) {
            fail(LLMKV_ERR_INTERNAL, "block %u: refcount %u but %u holders", id,
                 cache_->sealed_pool().refcount(id), refs[id]);
        }
    }
    if (host_) {
        size_t host_blocks = 0;
        for (const KvSeq *s : seqs) {
            for (void *p : s->host.blocks) host_blocks += p ? 1 : 0;
            for (void *p : s->host.local) host_blocks += p ? 1 : 0;
            host_blocks += s->host.tail ? 1 : 0;
            for (void *p : s->offloaded) host_blocks += p ? 1 : 0;
        }
        if (host_prefix_) host_blocks += host_prefix_->size();
        if (host_blocks != host_->blocks_used()) {
            fail(LLMKV_ERR_INTERNAL, "host tier holds %zu blocks but sessions own %zu",
                 host_->blocks_used(), host_blocks);
        }
    }
    for (uint32_t id = 0; id < tail_refs.size(); ++id) {
        if (tail_refs[id] != cache_->tail_pool().refcount(id)) {
            fail(LLMKV_ERR_INTERNAL, "tail slot %u: refcount %u but %u holders", id,
                 cache_->tail_pool().refcount(id), tail_refs[id]);
        }
    }
}

}  // namespace llmkv
