// Block keys of the prefix cache: a 128-bit XXH3 hash chained over sealed KV blocks,
// key = H(parent key, the block's token ids, salt), plus the salt derived from a string.
// Keys are content-defined: two sessions holding the same token prefix get the same keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace llmkv {

struct BlockHashKey {
    uint64_t lo = 0;
    uint64_t hi = 0;

    friend bool operator==(const BlockHashKey &a, const BlockHashKey &b) {
        return a.lo == b.lo && a.hi == b.hi;
    }
    friend bool operator!=(const BlockHashKey &a, const BlockHashKey &b) { return !(a == b); }
};

// Parent key of a session's first block.
inline constexpr BlockHashKey kRootBlockKey{0, 0};

// For unordered containers: the key is already a strong hash, so any 64 bits of it will do.
struct BlockHashKeyHasher {
    size_t operator()(const BlockHashKey &k) const noexcept { return size_t(k.lo ^ (k.hi >> 1)); }
};

// The salt of a cache: XXH3-128 of a description of everything that makes a block's bytes
// differ for the same tokens (model fingerprint, K/V codecs and their parameters, block
// size, residual window). Blocks published under one salt never match another.
BlockHashKey block_salt(std::string_view description);

// The key of a block of n_tokens tokens whose predecessor has key parent (kRootBlockKey for
// a first block). Defined over the little-endian bytes of the token ids and of the two
// 128-bit inputs, so keys are the same on every host and can be stored in snapshots:
//   key = XXH3-128(parent.lo, parent.hi, salt.lo, salt.hi, XXH3-128(tokens).lo/.hi)
// (every field 8 bytes little-endian). Allocation-free on little-endian hosts.
BlockHashKey block_key(const BlockHashKey &parent, const int32_t *tokens, uint32_t n_tokens,
                       const BlockHashKey &salt);

}  // namespace llmkv
