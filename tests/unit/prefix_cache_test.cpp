// PrefixCache and block keys: exact block ids, refcounts and token counts for publish/match,
// collisions, LRU and tail-first eviction, all-or-nothing allocation, and a property test
// of random sessions checked against a model after every operation.
#include "kv/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "common/error.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace llmkv {
namespace {

constexpr uint32_t kB = 4;  // tokens per block in these tests
using Status = PrefixCache::PublishStatus;

BlockHashKey test_salt() {
    return block_salt("model=test f16/f16 block_tokens=4 residual=0");
}

// Tokens of consecutive blocks; block i holds {s_i, s_i + 1, s_i + 2, s_i + 3}.
std::vector<int32_t> blocks_of(std::initializer_list<int32_t> starts) {
    std::vector<int32_t> t;
    for (int32_t s : starts) {
        for (int32_t j = 0; j < int32_t(kB); ++j) t.push_back(s + j);
    }
    return t;
}

// What a session does: allocates a block per full block of tokens, "computes" them and
// publishes them in order. Returns the session's block ids (its own, even for duplicates).
std::vector<uint32_t> compute(PrefixCache &cache, BlockPool &pool, const std::vector<int32_t> &t,
                              std::vector<PrefixCache::PublishResult> *results = nullptr) {
    std::vector<uint32_t> ids;
    EXPECT_TRUE(pool.allocate_many(uint32_t(t.size() / kB), ids));
    BlockHashKey parent = kRootBlockKey;
    for (size_t i = 0; i < ids.size(); ++i) {
        const uint32_t prev = i ? ids[i - 1] : PrefixCache::kNoBlock;
        PrefixCache::PublishResult r = cache.publish(parent, t.data() + i * kB, ids[i], prev);
        parent = r.key;
        if (results) results->push_back(r);
    }
    return ids;
}

void release_all(PrefixCache &cache, std::vector<uint32_t> &ids) {
    for (uint32_t id : ids) cache.release(id);
    ids.clear();
}

std::vector<uint32_t> refcounts(const BlockPool &pool) {
    std::vector<uint32_t> rc;
    for (uint32_t id = 0; id < pool.n_total(); ++id) rc.push_back(pool.refcount(id));
    return rc;
}

void check_all(const PrefixCache &cache, const BlockPool &pool) {
    pool.check_invariants();
    cache.check_invariants();
}

// A deliberately weak key: the sum of the tokens, so {1,2,3,4} and {4,3,2,1} collide.
BlockHashKey sum_key(const BlockHashKey &parent, const int32_t *tokens, uint32_t n,
                     const BlockHashKey &salt) {
    uint64_t s = 0;
    for (uint32_t i = 0; i < n; ++i) s += uint64_t(tokens[i]);
    return BlockHashKey{parent.lo * 1000003u + s + 1, salt.hi};
}

// ---- keys ---------------------------------------------------------------------------------

TEST(PrefixCacheKey, IsDeterministicAndIsWhatTheCacheUses) {
    BlockPool pool(4, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({10});
    const BlockHashKey a = block_key(kRootBlockKey, t.data(), kB, test_salt());
    EXPECT_EQ(a, block_key(kRootBlockKey, t.data(), kB, test_salt()));
    EXPECT_EQ(a, cache.key_for(kRootBlockKey, t.data()));
    EXPECT_NE(a, kRootBlockKey);
    EXPECT_EQ(block_salt("abc"), block_salt("abc"));
}

TEST(PrefixCacheKey, ChangesWhenAnyTokenChanges) {
    std::vector<int32_t> t(16);
    for (int32_t i = 0; i < 16; ++i) t[size_t(i)] = 1000 + i;
    const BlockHashKey base = block_key(kRootBlockKey, t.data(), 16, test_salt());
    std::set<std::pair<uint64_t, uint64_t>> seen{{base.lo, base.hi}};
    for (size_t i = 0; i < t.size(); ++i) {
        std::vector<int32_t> u = t;
        u[i] ^= 1;
        const BlockHashKey k = block_key(kRootBlockKey, u.data(), 16, test_salt());
        EXPECT_NE(k, base) << "token " << i;
        seen.insert({k.lo, k.hi});
    }
    EXPECT_EQ(seen.size(), 17u);
    // Order and count of the tokens are part of the key.
    const std::vector<int32_t> fwd{1, 2, 3, 4}, rev{4, 3, 2, 1};
    EXPECT_NE(block_key(kRootBlockKey, fwd.data(), 4, test_salt()),
              block_key(kRootBlockKey, rev.data(), 4, test_salt()));
    EXPECT_NE(block_key(kRootBlockKey, fwd.data(), 4, test_salt()),
              block_key(kRootBlockKey, fwd.data(), 3, test_salt()));
}

TEST(PrefixCacheKey, ChangesWhenTheParentChanges) {
    const std::vector<int32_t> t = blocks_of({10});
    const BlockHashKey p1 = block_key(kRootBlockKey, blocks_of({20}).data(), kB, test_salt());
    const BlockHashKey p2 = block_key(kRootBlockKey, blocks_of({21}).data(), kB, test_salt());
    const BlockHashKey k0 = block_key(kRootBlockKey, t.data(), kB, test_salt());
    const BlockHashKey k1 = block_key(p1, t.data(), kB, test_salt());
    const BlockHashKey k2 = block_key(p2, t.data(), kB, test_salt());
    EXPECT_NE(k0, k1);
    EXPECT_NE(k1, k2);
    EXPECT_NE(k0, k2);
    EXPECT_NE(k1, block_key(BlockHashKey{p1.lo, p1.hi ^ 1}, t.data(), kB, test_salt()));
}

TEST(PrefixCacheKey, ChangesWhenTheSaltChanges) {
    const std::vector<int32_t> t = blocks_of({10});
    const BlockHashKey s1 = block_salt("model=A q8_0/q8_0 block_tokens=16");
    const BlockHashKey s2 = block_salt("model=A q8_0/q8_0 block_tokens=32");
    const BlockHashKey s3 = block_salt("model=B q8_0/q8_0 block_tokens=16");
    EXPECT_NE(s1, s2);
    EXPECT_NE(s1, s3);
    EXPECT_NE(block_key(kRootBlockKey, t.data(), kB, s1),
              block_key(kRootBlockKey, t.data(), kB, s2));
    EXPECT_NE(block_key(kRootBlockKey, t.data(), kB, s1),
              block_key(kRootBlockKey, t.data(), kB, s3));
    EXPECT_NE(block_key(kRootBlockKey, t.data(), kB, s1),
              block_key(kRootBlockKey, t.data(), kB, BlockHashKey{s1.lo ^ (1ull << 63), s1.hi}));
}

TEST(PrefixCacheKey, ValueIsStableSoKeysCanBeStored) {
    // Pinned (and cross-checked against an independent implementation of the formula in
    // block_hash.h): changing the key derivation invalidates stored keys; do it on purpose.
    const std::vector<int32_t> t{1, 2, 3, 4};
    const BlockHashKey salt = block_salt("llmkv");
    const BlockHashKey k = block_key(kRootBlockKey, t.data(), 4, salt);
    const BlockHashKey k2 = block_key(k, t.data(), 4, salt);
    EXPECT_EQ(salt.lo, 0x6fbe1e05b21f3c55ull);
    EXPECT_EQ(salt.hi, 0xc8f1e3efa8af08ceull);
    EXPECT_EQ(k.lo, 0x961db55fa377990dull);
    EXPECT_EQ(k.hi, 0x4ad98eaeb4bd011bull);
    EXPECT_EQ(k2.lo, 0x7ee28bc460f6735cull);
    EXPECT_EQ(k2.hi, 0xad9c6ffc7f7e9372ull);
}

// ---- publish and match --------------------------------------------------------------------

TEST(PrefixCache, PublishThenMatchReturnsTheSameBlocksRetainedForTheCaller) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({100, 200, 300});
    std::vector<PrefixCache::PublishResult> res;
    std::vector<uint32_t> s1 = compute(cache, pool, t, &res);
    ASSERT_EQ(s1, (std::vector<uint32_t>{0, 1, 2}));
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(res[i].status, Status::kInserted);
        EXPECT_EQ(res[i].block_id, s1[i]);
        EXPECT_EQ(cache.key_of(s1[i]), res[i].key);
    }
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{2, 2, 2, 0, 0, 0, 0, 0}));
    EXPECT_EQ(cache.n_cached(), 3u);
    EXPECT_EQ(cache.n_evictable(), 0u);
    check_all(cache, pool);

    std::vector<int32_t> asked = t;
    asked.push_back(7);  // a partial block: neither hit nor miss
    asked.push_back(8);
    std::vector<uint32_t> s2 = cache.match(asked.data(), asked.size());
    EXPECT_EQ(s2, (std::vector<uint32_t>{0, 1, 2}));
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{3, 3, 3, 0, 0, 0, 0, 0}));
    EXPECT_EQ(cache.hit_tokens(), 12u);
    EXPECT_EQ(cache.miss_tokens(), 0u);
    check_all(cache, pool);

    release_all(cache, s1);
    release_all(cache, s2);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{1, 1, 1, 0, 0, 0, 0, 0}));
    EXPECT_EQ(cache.n_evictable(), 3u);
    check_all(cache, pool);
}

TEST(PrefixCache, MatchCountsHitAndMissTokensOfFullBlocksOnly) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    std::vector<uint32_t> s1 = compute(cache, pool, blocks_of({100, 200}));
    std::vector<int32_t> asked = blocks_of({100, 200, 300, 400});
    asked.insert(asked.end(), {1, 2, 3});
    std::vector<uint32_t> out{42};
    EXPECT_EQ(cache.match(asked.data(), asked.size(), out), 2u);
    EXPECT_EQ(out, (std::vector<uint32_t>{42, 0, 1}));  // appended
    EXPECT_EQ(cache.hit_tokens(), 8u);
    EXPECT_EQ(cache.miss_tokens(), 8u);
    // Fewer tokens than a block: nothing asked, nothing counted.
    EXPECT_TRUE(cache.match(asked.data(), 3).empty());
    EXPECT_EQ(cache.hit_tokens(), 8u);
    EXPECT_EQ(cache.miss_tokens(), 8u);
    out.erase(out.begin());
    release_all(cache, out);
    release_all(cache, s1);
    check_all(cache, pool);
}

TEST(PrefixCache, PartialMatchStopsAtTheFirstUncachedBlock) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    std::vector<uint32_t> s1 = compute(cache, pool, blocks_of({100, 200, 300}));
    // The second block differs; the third is equal but follows another parent: no hit.
    const std::vector<int32_t> a = blocks_of({100, 999, 300});
    std::vector<uint32_t> m = cache.match(a.data(), a.size());
    EXPECT_EQ(m, (std::vector<uint32_t>{0}));
    EXPECT_EQ(cache.hit_tokens(), 4u);
    EXPECT_EQ(cache.miss_tokens(), 8u);
    const std::vector<int32_t> b = blocks_of({999, 200, 300});
    EXPECT_TRUE(cache.match(b.data(), b.size()).empty());
    EXPECT_EQ(cache.hit_tokens(), 4u);
    EXPECT_EQ(cache.miss_tokens(), 20u);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{3, 2, 2, 0, 0, 0, 0, 0}));
    release_all(cache, m);
    release_all(cache, s1);
    check_all(cache, pool);
}

TEST(PrefixCache, ADifferentSaltNeverMatches) {
    BlockPool pool(8, 64, "test");
    PrefixCache a(pool, kB, block_salt("model=A q8_0 block_tokens=4"));
    PrefixCache b(pool, kB, block_salt("model=A q4_0 block_tokens=4"));
    const std::vector<int32_t> t = blocks_of({100, 200, 300});
    std::vector<uint32_t> s1 = compute(a, pool, t);
    EXPECT_TRUE(b.match(t.data(), t.size()).empty());
    EXPECT_EQ(b.hit_tokens(), 0u);
    EXPECT_EQ(b.miss_tokens(), 12u);
    EXPECT_NE(a.key_for(kRootBlockKey, t.data()), b.key_for(kRootBlockKey, t.data()));
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{2, 2, 2, 0, 0, 0, 0, 0}));
    release_all(a, s1);
    check_all(a, pool);
    check_all(b, pool);
}

TEST(PrefixCache, AHashHitWithDifferentTokensIsAMiss) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt(), &sum_key);
    const std::vector<int32_t> t{1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<uint32_t> s1 = compute(cache, pool, t);
    const std::vector<int32_t> forged{4, 3, 2, 1};
    ASSERT_EQ(cache.key_for(kRootBlockKey, forged.data()), cache.key_for(kRootBlockKey, t.data()));
    EXPECT_TRUE(cache.match(forged.data(), forged.size()).empty());
    EXPECT_EQ(cache.hit_tokens(), 0u);
    EXPECT_EQ(cache.miss_tokens(), 4u);
    // Same first block, forged second block: the chain stops after the first.
    const std::vector<int32_t> half{1, 2, 3, 4, 8, 7, 6, 5};
    std::vector<uint32_t> m = cache.match(half.data(), half.size());
    EXPECT_EQ(m, (std::vector<uint32_t>{0}));
    EXPECT_EQ(cache.hit_tokens(), 4u);
    EXPECT_EQ(cache.miss_tokens(), 8u);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{3, 2, 0, 0, 0, 0, 0, 0}));
    release_all(cache, m);
    release_all(cache, s1);
    check_all(cache, pool);
}

TEST(PrefixCache, PublishOverACollidingKeyIsNotCached) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt(), &sum_key);
    std::vector<uint32_t> s1 = compute(cache, pool, {1, 2, 3, 4});
    std::vector<PrefixCache::PublishResult> res;
    std::vector<uint32_t> s2 = compute(cache, pool, {4, 3, 2, 1}, &res);
    ASSERT_EQ(s2, (std::vector<uint32_t>{1}));
    EXPECT_EQ(res[0].status, Status::kCollision);
    EXPECT_EQ(res[0].block_id, 1u);
    EXPECT_FALSE(cache.contains(1));
    EXPECT_EQ(cache.n_cached(), 1u);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{2, 1, 0, 0, 0, 0, 0, 0}));
    check_all(cache, pool);
    release_all(cache, s2);
    release_all(cache, s1);
    check_all(cache, pool);
}

TEST(PrefixCache, AChildOfACollidingBlockIsNeverLinkedUnderTheOtherParent) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt(), &sum_key);
    std::vector<uint32_t> s1 = compute(cache, pool, {1, 2, 3, 4});  // block 0
    // s2's first block collides with block 0; its second block follows s2's own first block,
    // so it must not hang below block 0 although its parent key is block 0's key.
    std::vector<PrefixCache::PublishResult> res;
    std::vector<uint32_t> s2 = compute(cache, pool, {4, 3, 2, 1, 9, 9, 9, 9}, &res);
    ASSERT_EQ(s2, (std::vector<uint32_t>{1, 2}));
    EXPECT_EQ(res[0].status, Status::kCollision);
    EXPECT_EQ(res[0].key, cache.key_of(0));
    EXPECT_EQ(res[1].status, Status::kOrphan);
    EXPECT_EQ(cache.n_cached(), 1u);
    const std::vector<int32_t> asked{1, 2, 3, 4, 9, 9, 9, 9};
    std::vector<uint32_t> m = cache.match(asked.data(), asked.size());
    EXPECT_EQ(m, (std::vector<uint32_t>{0}));
    EXPECT_EQ(cache.hit_tokens(), 4u);
    EXPECT_EQ(cache.miss_tokens(), 4u);
    // Naming a parent block that is not the cached parent is refused the same way.
    std::vector<uint32_t> s3;
    ASSERT_TRUE(pool.allocate_many(1, s3));
    EXPECT_EQ(cache.publish(cache.key_of(0), asked.data() + kB, s3[0], s2[0]).status,
              Status::kOrphan);
    EXPECT_EQ(cache.publish(cache.key_of(0), asked.data() + kB, s3[0], 0).status,
              Status::kInserted);
    EXPECT_THROW(
        cache.publish(cache.key_of(0), asked.data() + kB, s3[0] + 1, PrefixCache::kNoBlock), Error);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{3, 1, 1, 2, 0, 0, 0, 0}));
    release_all(cache, m);
    release_all(cache, s3);
    release_all(cache, s2);
    release_all(cache, s1);
    check_all(cache, pool);
}

TEST(PrefixCache, PublishingAnEqualBlockKeepsTheCachedOne) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({100, 200});
    std::vector<uint32_t> s1 = compute(cache, pool, t);
    std::vector<PrefixCache::PublishResult> res;
    std::vector<uint32_t> s2 = compute(cache, pool, t, &res);
    ASSERT_EQ(s2, (std::vector<uint32_t>{2, 3}));
    EXPECT_EQ(res[0].status, Status::kDuplicate);
    EXPECT_EQ(res[0].block_id, 0u);
    EXPECT_EQ(res[1].status, Status::kDuplicate);
    EXPECT_EQ(res[1].block_id, 1u);
    EXPECT_EQ(res[1].key, cache.key_of(1));
    EXPECT_EQ(cache.n_cached(), 2u);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{2, 2, 1, 1, 0, 0, 0, 0}));
    check_all(cache, pool);
    // The session switches to the canonical blocks.
    for (size_t i = 0; i < s2.size(); ++i) {
        cache.acquire(res[i].block_id);
        cache.release(s2[i]);
        s2[i] = res[i].block_id;
    }
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{3, 3, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(pool.n_free(), 6u);
    check_all(cache, pool);
    // Publishing a block that is already cached under its key changes nothing.
    PrefixCache::PublishResult again =
        cache.publish(kRootBlockKey, t.data(), 0, PrefixCache::kNoBlock);
    EXPECT_EQ(again.status, Status::kAlreadyCached);
    EXPECT_EQ(again.block_id, 0u);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{3, 3, 0, 0, 0, 0, 0, 0}));
    release_all(cache, s1);
    release_all(cache, s2);
    check_all(cache, pool);
}

TEST(PrefixCache, ABlockWhoseParentWasEvictedIsNotCached) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({100, 200});
    std::vector<uint32_t> s1 = compute(cache, pool, blocks_of({100}));  // block 0, cached
    std::vector<uint32_t> s2;
    ASSERT_TRUE(pool.allocate_many(1, s2));  // block 1: s2's own copy of {100}
    PrefixCache::PublishResult r0 =
        cache.publish(kRootBlockKey, t.data(), s2[0], PrefixCache::kNoBlock);
    EXPECT_EQ(r0.status, Status::kDuplicate);
    release_all(cache, s1);
    EXPECT_EQ(cache.evict(1), 1u);  // block 0 goes
    ASSERT_TRUE(pool.allocate_many(1, s2));
    EXPECT_EQ(s2, (std::vector<uint32_t>{1, 0}));
    PrefixCache::PublishResult r1 = cache.publish(r0.key, t.data() + kB, s2[1], s2[0]);
    EXPECT_EQ(r1.status, Status::kOrphan);
    EXPECT_EQ(r1.block_id, 0u);
    EXPECT_FALSE(cache.contains(0));
    EXPECT_EQ(cache.n_cached(), 0u);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{1, 1, 0, 0, 0, 0, 0, 0}));
    check_all(cache, pool);
    // Republishing the chain from its first block caches both.
    EXPECT_EQ(cache.publish(kRootBlockKey, t.data(), s2[0], PrefixCache::kNoBlock).status,
              Status::kInserted);
    EXPECT_EQ(cache.publish(r0.key, t.data() + kB, s2[1], s2[0]).status, Status::kInserted);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{2, 2, 0, 0, 0, 0, 0, 0}));
    release_all(cache, s2);
    check_all(cache, pool);
}

TEST(PrefixCache, ABlockBecomesEvictableOnlyWhenTheCacheIsItsLastHolder) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({100, 200});
    std::vector<uint32_t> s1 = compute(cache, pool, t);
    std::vector<uint32_t> s2 = cache.match(t.data(), t.size());
    release_all(cache, s1);
    EXPECT_EQ(cache.n_evictable(), 0u);
    EXPECT_EQ(cache.evict(8), 0u);
    // Released through the pool, then told.
    pool.release(s2[1]);
    cache.on_release(s2[1]);
    EXPECT_EQ(cache.n_evictable(), 1u);
    pool.release(s2[0]);
    cache.on_release(s2[0]);
    EXPECT_EQ(cache.n_evictable(), 2u);
    EXPECT_EQ(cache.n_reclaimable(), 2u);
    cache.on_release(s2[0]);  // telling twice is harmless
    EXPECT_EQ(cache.n_evictable(), 2u);
    check_all(cache, pool);
}

TEST(PrefixCache, ClearDropsOnlyTheCachesReferences) {
    BlockPool pool(8, 64, "test");
    {
        PrefixCache cache(pool, kB, test_salt());
        std::vector<uint32_t> s1 = compute(cache, pool, blocks_of({100, 200}));
        std::vector<uint32_t> s2 = compute(cache, pool, blocks_of({300}));
        release_all(cache, s2);
        EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{2, 2, 1, 0, 0, 0, 0, 0}));
        cache.clear();
        EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{1, 1, 0, 0, 0, 0, 0, 0}));
        EXPECT_EQ(cache.n_cached(), 0u);
        EXPECT_FALSE(cache.contains(0));
        check_all(cache, pool);
        release_all(cache, s1);
        EXPECT_EQ(pool.n_free(), 8u);
        // The destructor drops the references of what is cached when it runs.
        std::vector<uint32_t> s3 = compute(cache, pool, blocks_of({100, 200}));
        release_all(cache, s3);
        EXPECT_EQ(pool.n_free(), 6u);
    }
    EXPECT_EQ(pool.n_free(), 8u);
    pool.check_invariants();
}

TEST(PrefixCache, CheckInvariantsCatchesReferencesTakenOrDroppedBehindItsBack) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    std::vector<uint32_t> s1 = compute(cache, pool, blocks_of({100}));
    pool.release(s1[0]);  // no on_release: the cache still thinks a session holds it
    EXPECT_THROW(cache.check_invariants(), Error);
    cache.on_release(s1[0]);
    cache.check_invariants();
    pool.retain(s1[0]);  // no acquire: an evictable block is held
    try {
        cache.check_invariants();
        ADD_FAILURE() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_INTERNAL);
    }
    EXPECT_THROW(cache.evict(1), Error);
    pool.release(s1[0]);
    cache.check_invariants();
}

TEST(PrefixCache, PublishingAFreeBlockFails) {
    BlockPool pool(4, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({100});
    EXPECT_THROW(cache.publish(kRootBlockKey, t.data(), 0, PrefixCache::kNoBlock), Error);
    EXPECT_THROW(cache.publish(kRootBlockKey, t.data(), 4, PrefixCache::kNoBlock), Error);
    EXPECT_EQ(cache.n_cached(), 0u);
    check_all(cache, pool);
}

// ---- LRU and eviction ---------------------------------------------------------------------

TEST(PrefixCacheLru, BlocksReleasedEarlierAreEvictedFirst) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    std::vector<uint32_t> a = compute(cache, pool, blocks_of({100}));
    std::vector<uint32_t> b = compute(cache, pool, blocks_of({200}));
    std::vector<uint32_t> c = compute(cache, pool, blocks_of({300}));
    ASSERT_EQ(a[0], 0u);
    ASSERT_EQ(b[0], 1u);
    ASSERT_EQ(c[0], 2u);
    release_all(cache, b);
    release_all(cache, c);
    release_all(cache, a);
    std::vector<uint32_t> ev;
    EXPECT_EQ(cache.evict(1, &ev), 1u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{1}));
    check_all(cache, pool);
    EXPECT_EQ(cache.evict(2, &ev), 2u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{1, 2, 0}));
    EXPECT_EQ(cache.evict(5, &ev), 0u);
    EXPECT_EQ(pool.n_free(), 8u);
    EXPECT_EQ(cache.n_cached(), 0u);
    check_all(cache, pool);
}

TEST(PrefixCacheLru, AChainIsEvictedTailFirstWhateverTheReleaseOrder) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    std::vector<uint32_t> s = compute(cache, pool, blocks_of({100, 200, 300, 400}));
    ASSERT_EQ(s, (std::vector<uint32_t>{0, 1, 2, 3}));
    release_all(cache, s);  // root first
    std::vector<uint32_t> ev;
    EXPECT_EQ(cache.evict(4, &ev), 4u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{3, 2, 1, 0}));
    check_all(cache, pool);

    // Released tail first; then two chains, the older one goes first, each tail-first.
    std::vector<uint32_t> x = compute(cache, pool, blocks_of({100, 200, 300}));
    std::vector<uint32_t> y = compute(cache, pool, blocks_of({500, 600}));
    ASSERT_EQ(x, (std::vector<uint32_t>{0, 1, 2}));
    ASSERT_EQ(y, (std::vector<uint32_t>{3, 4}));
    for (size_t i = x.size(); i-- > 0;) cache.release(x[i]);
    release_all(cache, y);
    ev.clear();
    EXPECT_EQ(cache.evict(2, &ev), 2u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{2, 1}));
    check_all(cache, pool);
    EXPECT_EQ(cache.evict(10, &ev), 3u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{2, 1, 0, 4, 3}));
    EXPECT_EQ(pool.n_free(), 8u);
    check_all(cache, pool);
}

TEST(PrefixCacheLru, AParentThatLosesItsLastChildKeepsItsOwnLruPlace) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> shared = blocks_of({100, 200});
    std::vector<uint32_t> s1 = compute(cache, pool, shared);            // {0, 1}
    std::vector<uint32_t> s2 = compute(cache, pool, blocks_of({300}));  // {2}
    std::vector<uint32_t> s3 = cache.match(shared.data(), kB);          // {0}
    ASSERT_EQ(s3, (std::vector<uint32_t>{0}));
    release_all(cache, s1);  // 1 idle first (0 still held by s3)
    release_all(cache, s2);  // then 2
    release_all(cache, s3);  // then 0, the most recently used
    std::vector<uint32_t> ev;
    EXPECT_EQ(cache.evict(3, &ev), 3u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{1, 2, 0}));
    check_all(cache, pool);
}

TEST(PrefixCacheLru, ABlockHeldByASessionIsNeverEvicted) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    std::vector<uint32_t> s1 = compute(cache, pool, blocks_of({100, 200, 300}));
    std::vector<uint32_t> s2 = compute(cache, pool, blocks_of({400, 500}));
    release_all(cache, s2);
    std::vector<uint32_t> ev;
    EXPECT_EQ(cache.evict(10, &ev), 2u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{4, 3}));
    EXPECT_EQ(cache.n_cached(), 3u);
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{2, 2, 2, 0, 0, 0, 0, 0}));
    std::vector<uint32_t> out;
    EXPECT_FALSE(cache.allocate_with_eviction(6, out));
    EXPECT_TRUE(out.empty());
    check_all(cache, pool);
    release_all(cache, s1);
    check_all(cache, pool);
}

TEST(PrefixCacheLru, AMatchTakesBlocksOutOfTheLru) {
    BlockPool pool(8, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({100, 200, 300});
    std::vector<uint32_t> s1 = compute(cache, pool, t);
    release_all(cache, s1);
    EXPECT_EQ(cache.n_evictable(), 3u);
    std::vector<uint32_t> s2 = cache.match(t.data(), 2 * kB);
    EXPECT_EQ(s2, (std::vector<uint32_t>{0, 1}));
    EXPECT_EQ(cache.n_evictable(), 1u);
    EXPECT_EQ(cache.n_reclaimable(), 1u);
    std::vector<uint32_t> ev;
    EXPECT_EQ(cache.evict(3, &ev), 1u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{2}));
    EXPECT_EQ(refcounts(pool), (std::vector<uint32_t>{2, 2, 0, 0, 0, 0, 0, 0}));
    check_all(cache, pool);
    release_all(cache, s2);
    check_all(cache, pool);
}

TEST(PrefixCacheLru, AllocateWithEvictionTakesFreeBlocksBeforeEvicting) {
    BlockPool pool(6, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    std::vector<uint32_t> s1 = compute(cache, pool, blocks_of({100, 200, 300}));
    release_all(cache, s1);
    std::vector<uint32_t> out;
    ASSERT_TRUE(cache.allocate_with_eviction(3, out));
    EXPECT_EQ(out, (std::vector<uint32_t>{3, 4, 5}));
    EXPECT_EQ(cache.n_cached(), 3u);
    check_all(cache, pool);
    ASSERT_TRUE(cache.allocate_with_eviction(1, out));
    EXPECT_EQ(out, (std::vector<uint32_t>{3, 4, 5, 2}));  // the chain's tail
    EXPECT_EQ(cache.n_cached(), 2u);
    check_all(cache, pool);
    release_all(cache, out);
    check_all(cache, pool);
}

TEST(PrefixCacheLru, AllocateWithEvictionIsAllOrNothing) {
    BlockPool pool(6, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({100, 200, 300});
    std::vector<uint32_t> s1 = compute(cache, pool, t);  // {0, 1, 2}
    release_all(cache, s1);
    std::vector<uint32_t> held;
    ASSERT_TRUE(pool.allocate_many(2, held));  // {3, 4}, not cached; block 5 free
    ASSERT_EQ(held, (std::vector<uint32_t>{3, 4}));

    const std::vector<uint32_t> rc_before = refcounts(pool);
    std::vector<uint32_t> out{77};
    EXPECT_FALSE(cache.allocate_with_eviction(5, out));  // 1 free + 3 evictable < 5
    EXPECT_EQ(out, (std::vector<uint32_t>{77}));
    EXPECT_EQ(refcounts(pool), rc_before);
    EXPECT_EQ(pool.n_free(), 1u);
    EXPECT_EQ(cache.n_cached(), 3u);
    EXPECT_EQ(cache.n_evictable(), 3u);
    for (uint32_t id : {0u, 1u, 2u}) EXPECT_TRUE(cache.contains(id));
    check_all(cache, pool);

    ASSERT_TRUE(cache.allocate_with_eviction(4, out));
    EXPECT_EQ(out, (std::vector<uint32_t>{77, 0, 1, 2, 5}));
    EXPECT_EQ(cache.n_cached(), 0u);
    EXPECT_EQ(pool.n_free(), 0u);
    EXPECT_TRUE(cache.match(t.data(), t.size()).empty());
    check_all(cache, pool);
    out.erase(out.begin());
    release_all(cache, out);
    release_all(cache, held);
    EXPECT_EQ(pool.n_free(), 6u);
    check_all(cache, pool);
}

TEST(PrefixCacheLru, AnIdleParentOfABusyChildIsNotReclaimable) {
    BlockPool pool(6, 64, "test");
    PrefixCache cache(pool, kB, test_salt());
    const std::vector<int32_t> t = blocks_of({100, 200, 300});
    std::vector<uint32_t> s1 = compute(cache, pool, blocks_of({100, 200}));  // {0, 1}
    // s2 computed its own copy of {100} (block 2, a duplicate) and then a new block {300}
    // (block 3) that is cached as a child of block 0, which s2 does not hold.
    std::vector<uint32_t> s2;
    ASSERT_TRUE(pool.allocate_many(2, s2));
    ASSERT_EQ(s2, (std::vector<uint32_t>{2, 3}));
    PrefixCache::PublishResult r0 =
        cache.publish(kRootBlockKey, t.data(), 2, PrefixCache::kNoBlock);
    ASSERT_EQ(r0.status, Status::kDuplicate);
    ASSERT_EQ(cache.publish(r0.key, t.data() + 2 * kB, 3, 2).status, Status::kInserted);
    release_all(cache, s1);
    EXPECT_EQ(cache.n_evictable(), 2u);    // blocks 0 and 1
    EXPECT_EQ(cache.n_reclaimable(), 1u);  // only 1: block 0 has the busy child 3
    check_all(cache, pool);

    const std::vector<uint32_t> rc_before = refcounts(pool);
    std::vector<uint32_t> out;
    EXPECT_FALSE(cache.allocate_with_eviction(4, out));  // 2 free + 1 reclaimable
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(refcounts(pool), rc_before);
    EXPECT_EQ(cache.n_cached(), 3u);
    check_all(cache, pool);
    ASSERT_TRUE(cache.allocate_with_eviction(3, out));
    EXPECT_EQ(out, (std::vector<uint32_t>{1, 4, 5}));
    EXPECT_TRUE(cache.contains(0));
    EXPECT_TRUE(cache.contains(3));
    check_all(cache, pool);

    release_all(cache, s2);  // block 2 is freed, block 3 becomes idle
    EXPECT_EQ(cache.n_reclaimable(), 2u);
    std::vector<uint32_t> ev;
    EXPECT_EQ(cache.evict(5, &ev), 2u);
    EXPECT_EQ(ev, (std::vector<uint32_t>{3, 0}));
    release_all(cache, out);
    EXPECT_EQ(pool.n_free(), 6u);
    check_all(cache, pool);
}

// ---- property test ------------------------------------------------------------------------

// Sessions over token streams that share a few common prefixes, against a model of what the
// cache must contain: the set of cached prefixes (token sequences) and their block ids.
class PrefixCacheModel {
public:
    PrefixCacheModel(uint32_t n_blocks, uint32_t seed, PrefixCache::KeyFn key_fn)
        : pool_(n_blocks, 16, "prop"),
          cache_(pool_, kB, test_salt(), key_fn),
          rng_(seed),
          content_(n_blocks),
          weak_hash_(key_fn != &block_key) {
        for (int p = 0; p < 3; ++p) {
            std::vector<int32_t> prefix;
            const int n = p == 2 ? int(rng_() % 5) : 2 + int(rng_() % 3);  // blocks
            for (int i = 0; i < n * int(kB); ++i) prefix.push_back(int32_t(rng_() % 50));
            prefixes_.push_back(prefix);
        }
    }

    void run(int n_ops) {
        for (int op = 0; op < n_ops; ++op) {
            const uint32_t r = rng_() % 100;
            if (r < 22) {
                start_session();
            } else if (r < 50) {
                extend_session();
            } else if (r < 64) {
                end_session();
            } else if (r < 72) {
                trim_session();
            } else if (r < 80) {
                evict();
            } else if (r < 92) {
                scratch_allocate();
            } else {
                scratch_release();
            }
            check();
            if (::testing::Test::HasFatalFailure()) return;
        }
        finish();
    }

    uint64_t n_matched_blocks = 0, n_inserted = 0, n_duplicates = 0, n_failed_allocs = 0,
             n_evicted = 0, n_collisions = 0, n_orphans = 0;

private:
    struct Session {
        std::vector<int32_t> tokens;
        std::vector<uint32_t> blocks;
        std::vector<BlockHashKey> keys;  // key of each held block's content
    };

    std::vector<int32_t> prefix_tokens(const Session &s, size_t n_blocks) const {
        return std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + long(n_blocks * kB));
    }

    void start_session() {
        if (sessions_.size() >= 8) return;
        Session s;
        if (rng_() % 4 != 0) s.tokens = prefixes_[rng_() % prefixes_.size()];
        const int extra = int(rng_() % 7);
        for (int i = 0; i < extra * int(kB); ++i) s.tokens.push_back(int32_t(rng_() % 3));
        const int partial = int(rng_() % kB);
        for (int i = 0; i < partial; ++i) s.tokens.push_back(int32_t(rng_() % 3));

        // Expected: the longest prefix of full blocks that the model has cached.
        const size_t n_full = s.tokens.size() / kB;
        std::vector<uint32_t> expect;
        for (size_t i = 1; i <= n_full; ++i) {
            auto it = cached_.find(prefix_tokens(s, i));
            if (it == cached_.end()) break;
            expect.push_back(it->second);
        }
        const uint64_t hit0 = cache_.hit_tokens(), miss0 = cache_.miss_tokens();
        const size_t n = cache_.match(s.tokens.data(), s.tokens.size(), s.blocks);
        ASSERT_EQ(n, expect.size());
        ASSERT_EQ(s.blocks, expect);
        ASSERT_EQ(cache_.hit_tokens() - hit0, n * kB);
        ASSERT_EQ(cache_.miss_tokens() - miss0, (n_full - n) * kB);
        for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(content_[s.blocks[i]], prefix_tokens(s, i + 1));
            s.keys.push_back(cache_.key_of(s.blocks[i]));
        }
        n_matched_blocks += n;
        sessions_.push_back(std::move(s));
    }

    void extend_session() {
        if (sessions_.empty()) return;
        Session &s = sessions_[rng_() % sessions_.size()];
        const size_t n_full = s.tokens.size() / kB;
        if (s.blocks.size() == n_full) return;
        const uint32_t k = 1 + uint32_t(rng_() % (n_full - s.blocks.size()));
        std::vector<uint32_t> ids;
        if (!allocate(k, ids)) return;
        for (uint32_t id : ids) {
            const size_t i = s.blocks.size();
            content_[id] = prefix_tokens(s, i + 1);  // the block is computed
            const BlockHashKey parent = i ? s.keys[i - 1] : kRootBlockKey;
            const uint32_t prev = i ? s.blocks[i - 1] : PrefixCache::kNoBlock;
            PrefixCache::PublishResult r =
                cache_.publish(parent, s.tokens.data() + i * kB, id, prev);
            ASSERT_EQ(r.key, cache_.key_for(parent, s.tokens.data() + i * kB));
            uint32_t held = id;
            switch (r.status) {
                case PrefixCache::PublishStatus::kInserted:
                    ASSERT_EQ(r.block_id, id);
                    ASSERT_TRUE(cached_.emplace(content_[id], id).second);
                    ++n_inserted;
                    break;
                case PrefixCache::PublishStatus::kDuplicate: {
                    auto it = cached_.find(content_[id]);
                    ASSERT_TRUE(it != cached_.end()) << "a duplicate of content that is not cached";
                    ASSERT_EQ(it->second, r.block_id);
                }
                    ASSERT_EQ(content_[r.block_id], content_[id]);
                    ++n_duplicates;
                    if (rng_() % 2) {  // switch to the canonical block
                        cache_.acquire(r.block_id);
                        cache_.release(id);
                        held = r.block_id;
                    }
                    break;
                case PrefixCache::PublishStatus::kOrphan: {
                    // The parent prefix is not cached, or not as the block the session
                    // holds nor as one that block was verified to duplicate.
                    ASSERT_GT(i, 0u);
                    auto it = cached_.find(prefix_tokens(s, i));
                    ASSERT_TRUE(it == cached_.end() || it->second != prev);
                    ++n_orphans;
                    break;
                }
                case PrefixCache::PublishStatus::kCollision:
                    ASSERT_TRUE(weak_hash_);
                    ASSERT_EQ(cached_.count(content_[id]), 0u);
                    ++n_collisions;
                    break;
                default:
                    FAIL() << "unexpected publish status " << int(r.status);
            }
            s.blocks.push_back(held);
            s.keys.push_back(r.key);
        }
    }

    void release_block(uint32_t id) {
        if (rng_() % 2) {
            cache_.release(id);
        } else {
            pool_.release(id);
            cache_.on_release(id);
        }
    }

    void end_session() {
        if (sessions_.empty()) return;
        const size_t which = rng_() % sessions_.size();
        Session &s = sessions_[which];
        if (rng_() % 2) {
            for (uint32_t id : s.blocks) release_block(id);
        } else {
            for (size_t i = s.blocks.size(); i-- > 0;) release_block(s.blocks[i]);
        }
        sessions_.erase(sessions_.begin() + long(which));
    }

    void trim_session() {
        if (sessions_.empty()) return;
        Session &s = sessions_[rng_() % sessions_.size()];
        if (s.blocks.empty()) return;
        const size_t drop = 1 + rng_() % s.blocks.size();
        for (size_t i = 0; i < drop; ++i) {
            release_block(s.blocks.back());
            s.blocks.pop_back();
            s.keys.pop_back();
        }
    }

    void evict() {
        const uint32_t n = rng_() % 7;
        const uint32_t free0 = pool_.n_free(), cached0 = cache_.n_cached();
        const uint32_t reclaimable0 = cache_.n_reclaimable();
        std::vector<uint32_t> ev;
        const uint32_t freed = cache_.evict(n, &ev);
        ASSERT_EQ(freed, std::min(n, reclaimable0));
        ASSERT_EQ(ev.size(), freed);
        ASSERT_EQ(pool_.n_free(), free0 + freed);
        ASSERT_EQ(cache_.n_cached(), cached0 - freed);
        n_evicted += freed;
    }

    bool allocate(uint32_t n, std::vector<uint32_t> &ids) {
        const std::vector<uint32_t> rc0 = refcounts(pool_);
        const uint32_t free0 = pool_.n_free(), cached0 = cache_.n_cached();
        const uint32_t evictable0 = cache_.n_evictable(), reclaimable0 = cache_.n_reclaimable();
        const bool ok = cache_.allocate_with_eviction(n, ids);
        EXPECT_EQ(ok, n <= free0 + reclaimable0);
        if (!ok) {
            ++n_failed_allocs;
            EXPECT_TRUE(ids.empty());
            EXPECT_EQ(refcounts(pool_), rc0);
            EXPECT_EQ(pool_.n_free(), free0);
            EXPECT_EQ(cache_.n_cached(), cached0);
            EXPECT_EQ(cache_.n_evictable(), evictable0);
        } else {
            EXPECT_EQ(ids.size(), n);
            const uint32_t evicted = n > free0 ? n - free0 : 0;
            EXPECT_EQ(cache_.n_cached(), cached0 - evicted);
            n_evicted += evicted;
            sync_model();
            for (uint32_t id : ids) content_[id].clear();  // overwritten from here on
        }
        return ok;
    }

    void scratch_allocate() {
        std::vector<uint32_t> ids;
        if (allocate(1 + uint32_t(rng_() % 10), ids))
            scratch_.insert(scratch_.end(), ids.begin(), ids.end());
    }

    void scratch_release() {
        const size_t n = scratch_.empty() ? 0 : 1 + rng_() % scratch_.size();
        for (size_t i = 0; i < n; ++i) {
            const size_t at = rng_() % scratch_.size();
            release_block(scratch_[at]);
            scratch_.erase(scratch_.begin() + long(at));
        }
    }

    // Forgets model entries whose block the cache evicted.
    void sync_model() {
        for (auto it = cached_.begin(); it != cached_.end();) {
            if (cache_.contains(it->second)) {
                ++it;
            } else {
                it = cached_.erase(it);
            }
        }
    }

    // Invariants after every operation, and the model: evicted blocks leave it, and every
    // block's refcount is exactly its holders plus the cache's own reference.
    void check() {
        ASSERT_NO_THROW(pool_.check_invariants());
        ASSERT_NO_THROW(cache_.check_invariants());
        sync_model();
        ASSERT_EQ(cached_.size(), cache_.n_cached());
        std::vector<uint32_t> holders(pool_.n_total(), 0);
        for (const Session &s : sessions_) {
            for (uint32_t id : s.blocks) ++holders[id];
        }
        for (uint32_t id : scratch_) ++holders[id];
        for (uint32_t id = 0; id < pool_.n_total(); ++id) {
            ASSERT_EQ(pool_.refcount(id), holders[id] + (cache_.contains(id) ? 1u : 0u))
                << "block " << id;
        }
    }

    void finish() {
        while (!sessions_.empty()) end_session();
        while (!scratch_.empty()) scratch_release();
        check();
        EXPECT_EQ(cache_.n_evictable(), cache_.n_cached());
        EXPECT_EQ(cache_.n_reclaimable(), cache_.n_cached());
        EXPECT_EQ(pool_.n_free() + cache_.n_cached(), pool_.n_total());
        cache_.clear();
        EXPECT_EQ(pool_.n_free(), pool_.n_total());
        cache_.check_invariants();
        pool_.check_invariants();
    }

    BlockPool pool_;
    PrefixCache cache_;
    std::mt19937 rng_;
    std::vector<std::vector<int32_t>> prefixes_;
    std::vector<Session> sessions_;
    std::vector<uint32_t> scratch_;
    std::vector<std::vector<int32_t>> content_;        // by block id: the prefix it holds
    std::map<std::vector<int32_t>, uint32_t> cached_;  // prefix -> cached block
    bool weak_hash_;
};

TEST(PrefixCacheProperty, RandomSessionsKeepEveryInvariantAndEndWithAFreePool) {
    for (uint32_t seed : {1u, 2u, 3u, 4u}) {
        SCOPED_TRACE(seed);
        PrefixCacheModel m(40, seed, &block_key);
        m.run(4000);
        if (HasFatalFailure()) return;
        std::printf(
            "seed %u: matched %llu, inserted %llu, duplicates %llu, orphans %llu, failed allocs "
            "%llu, "
            "evicted %llu\n",
            seed, (unsigned long long)m.n_matched_blocks, (unsigned long long)m.n_inserted,
            (unsigned long long)m.n_duplicates, (unsigned long long)m.n_orphans,
            (unsigned long long)m.n_failed_allocs, (unsigned long long)m.n_evicted);
        // The run exercised every path.
        EXPECT_GT(m.n_matched_blocks, 100u);
        EXPECT_GT(m.n_inserted, 100u);
        EXPECT_GT(m.n_duplicates, 10u);
        EXPECT_GT(m.n_failed_allocs, 10u);
        EXPECT_GT(m.n_evicted, 100u);
        EXPECT_GT(m.n_orphans, 0u);
        EXPECT_EQ(m.n_collisions, 0u);
    }
}

// With a key that collides all the time, every match must still be exactly the longest
// cached prefix, token for token (the model checks content, not keys).
TEST(PrefixCacheProperty, RandomSessionsWithAWeakHashStillMatchExactPrefixes) {
    for (uint32_t seed : {5u, 6u, 7u, 8u}) {
        SCOPED_TRACE(seed);
        PrefixCacheModel m(40, seed, &sum_key);
        m.run(4000);
        if (HasFatalFailure()) return;
        std::printf(
            "weak seed %u: matched %llu, inserted %llu, duplicates %llu, collisions %llu, orphans "
            "%llu\n",
            seed, (unsigned long long)m.n_matched_blocks, (unsigned long long)m.n_inserted,
            (unsigned long long)m.n_duplicates, (unsigned long long)m.n_collisions,
            (unsigned long long)m.n_orphans);
        EXPECT_GT(m.n_matched_blocks, 100u);
        EXPECT_GT(m.n_collisions, 20u);
    }
}

}  // namespace
}  // namespace llmkv
