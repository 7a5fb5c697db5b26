// Block keys: two XXH3-128 calls per block (token bytes, then the fixed 48-byte record of
// parent, salt and token hash), so no buffer proportional to block_tokens is needed.
#include "kv/block_hash.h"

#include <xxhash.h>

#include <bit>
#include <vector>

namespace llmkv {
namespace {

// Distinct seeds keep the three uses of XXH3 (salt, token bytes, chain record) apart.
constexpr uint64_t kSaltSeed = 0x6c6c6d6b762d7361ull;    // "llmkv-sa"
constexpr uint64_t kTokensSeed = 0x6c6c6d6b762d746bull;  // "llmkv-tk"
constexpr uint64_t kChainSeed = 0x6c6c6d6b762d6368ull;   // "llmkv-ch"

void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}

BlockHashKey from_xxh(const XXH128_hash_t &h) {
    return BlockHashKey{h.low64, h.high64};
}

XXH128_hash_t hash_tokens(const int32_t *tokens, uint32_t n_tokens) {
    const size_t bytes = size_t(n_tokens) * sizeof(int32_t);
    if constexpr (std::endian::native == std::endian::little) {
        return XXH3_128bits_withSeed(tokens, bytes, kTokensSeed);
    } else {
        std::vector<uint8_t> le(bytes);
        for (uint32_t i = 0; i < n_tokens; ++i) {
            uint32_t v = uint32_t(tokens[i]);
            for (int b = 0; b < 4; ++b) le[size_t(i) * 4 + size_t(b)] = uint8_t(v >> (8 * b));
        }
        return XXH3_128bits_withSeed(le.data(), bytes, kTokensSeed);
    }
}

}  // namespace

BlockHashKey block_salt(std::string_view description) {
    return from_xxh(XXH3_128bits_withSeed(description.data(), description.size(), kSaltSeed));
}

BlockHashKey block_key(const BlockHashKey &parent, const int32_t *tokens, uint32_t n_tokens,
                       const BlockHashKey &salt) {
    const XXH128_hash_t th = hash_tokens(tokens, n_tokens);
    uint8_t record[48];
    put_le64(record + 0, parent.lo);
    put_le64(record + 8, parent.hi);
    put_le64(record + 16, salt.lo);
    put_le64(record + 24, salt.hi);
    put_le64(record + 32, th.low64);
    put_le64(record + 40, th.high64);
    return from_xxh(XXH3_128bits_withSeed(record, sizeof(record), kChainSeed));
}

}  // namespace llmkv
