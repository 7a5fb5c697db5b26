// HostPrefixStore: prefix-cache blocks demoted to the host tier. When the device prefix
// cache evicts a block, its bytes are copied into a host block and kept here under the
// block's key, with its tokens (a hit is verified token by token, as on the device); a
// later session whose prompt continues a cached chain finds the block here and promotes it
// back instead of recomputing it. Oldest entries go first when the host tier needs room.
// The store only indexes host blocks; their memory belongs to the engine's HostTier.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace llmkv {

class HostPrefixStore {
public:
    struct Entry {
        void *data = nullptr;
        std::vector<int32_t> tokens;
        uint64_t stamp = 0;  // LRU position
    };

    // The entry for key whose tokens equal tokens[0, n), or nullptr.
    const Entry *find(const BlockHashKey &key, const int32_t *tokens, uint32_t n) const {
        auto it = map_.find(key);
        if (it == map_.end() || it->second.tokens.size() != n) return nullptr;
        for (uint32_t i = 0; i < n; ++i) {
            if (it->second.tokens[i] != tokens[i]) return nullptr;
        }
        return &it->second;
    }

    // Adds a block; false (nothing stored) when the key is already present.
    bool insert(const BlockHashKey &key, void *data, const int32_t *tokens, uint32_t n) {
        if (map_.count(key)) return false;
        Entry e;
        e.data = data;
        e.tokens.assign(tokens, tokens + n);
        e.stamp = ++clock_;
        lru_.emplace(e.stamp, key);
        map_.emplace(key, std::move(e));
        return true;
    }

    // Removes the entry and returns its host block (nullptr when absent).
    void *take(const BlockHashKey &key) {
        auto it = map_.find(key);
        if (it == map_.end()) return nullptr;
        void *data = it->second.data;
        lru_.erase(it->second.stamp);
        map_.erase(it);
        return data;
    }

    // Removes the least recently stored entry and returns its host block (nullptr if empty).
    void *take_oldest() { return lru_.empty() ? nullptr : take(lru_.begin()->second); }

    size_t size() const { return map_.size(); }
    bool empty() const { return map_.empty(); }

private:
    std::unordered_map<BlockHashKey, Entry, BlockHashKeyHasher> map_;
    std::map<uint64_t, BlockHashKey> lru_;
    uint64_t clock_ = 0;
};

}  // namespace llmkv
