// BlockPool and KvCache: exact block ids, all-or-nothing allocation, and the pool
// invariants after random operation sequences.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/error.h"
#include "kv/kv_cache.h"

namespace llmkv {
namespace {

TEST(BlockPool, HandsOutLowestIdsFirstAndReusesReleasedBlocksFirst) {
    BlockPool pool(8, 64, "test");
    std::vector<uint32_t> ids;
    ASSERT_TRUE(pool.allocate_many(3, ids));
    EXPECT_EQ(ids, (std::vector<uint32_t>{0, 1, 2}));
    EXPECT_EQ(pool.n_free(), 5u);
    pool.release(1);
    uint32_t id = 99;
    ASSERT_TRUE(pool.allocate(id));
    EXPECT_EQ(id, 1u);
    pool.check_invariants();
}

TEST(BlockPool, FailedAllocationChangesNothing) {
    BlockPool pool(4, 16, "test");
    std::vector<uint32_t> ids;
    ASSERT_TRUE(pool.allocate_many(3, ids));
    std::vector<uint32_t> more;
    EXPECT_FALSE(pool.allocate_many(2, more));
    EXPECT_TRUE(more.empty());
    EXPECT_EQ(pool.n_free(), 1u);
    for (uint32_t i : ids) EXPECT_EQ(pool.refcount(i), 1u);
    pool.check_invariants();
}

TEST(BlockPool, RefcountsKeepSharedBlocksUntilTheLastRelease) {
    BlockPool pool(2, 16, "test");
    uint32_t id;
    ASSERT_TRUE(pool.allocate(id));
    pool.retain(id);
    EXPECT_EQ(pool.refcount(id), 2u);
    pool.release(id);
    EXPECT_EQ(pool.n_free(), 1u);
    pool.release(id);
    EXPECT_EQ(pool.n_free(), 2u);
    EXPECT_THROW(pool.release(id), Error);
    pool.check_invariants();
}

TEST(BlockPool, BlocksAreWritableAndDisjoint) {
    BlockPool pool(3, 100, "test");
    for (uint32_t i = 0; i < 3; ++i) std::memset(pool.data(i), int(i + 1), 100);
    for (uint32_t i = 0; i < 3; ++i) {
        for (int b = 0; b < 100; ++b) ASSERT_EQ(pool.data(i)[b], uint8_t(i + 1));
    }
}

KvGeometry small_geometry() {
    KvGeometry g;
    g.n_layers = 2;
    g.n_kv_heads = 2;
    g.head_dim = 8;
    g.block_tokens = 4;
    return g;
}

TEST(KvCache, ReserveTakesOneBlockPerCompletedBlockAndOneTailSlot) {
    KvCache cache(small_geometry(), 10, 2);
    SessionKv kv;
    ASSERT_TRUE(cache.reserve(kv, 3));
    EXPECT_EQ(kv.blocks.size(), 0u);
    EXPECT_EQ(kv.tail, 0);
    ASSERT_TRUE(cache.reserve(kv, 9));
    EXPECT_EQ(kv.blocks, (std::vector<uint32_t>{0, 1}));
    kv.n_tokens = 9;
    ASSERT_TRUE(cache.reserve(kv, 12));
    EXPECT_EQ(kv.blocks.size(), 3u);
    cache.release(kv);
    EXPECT_EQ(cache.sealed_pool().n_free(), 10u);
    EXPECT_EQ(cache.tail_pool().n_free(), 2u);
}

TEST(KvCache, ReserveBeyondThePoolChangesNothing) {
    KvCache cache(small_geometry(), 2, 1);
    SessionKv kv;
    EXPECT_FALSE(cache.reserve(kv, 12));
    EXPECT_TRUE(kv.blocks.empty());
    EXPECT_EQ(kv.tail, -1);
    EXPECT_EQ(cache.sealed_pool().n_free(), 2u);
    EXPECT_EQ(cache.tail_pool().n_free(), 1u);
    SessionKv other;
    ASSERT_TRUE(cache.reserve(other, 1));
    SessionKv third;
    EXPECT_FALSE(cache.reserve(third, 1)) << "no tail slot left";
    cache.sealed_pool().check_invariants();
    cache.tail_pool().check_invariants();
}

TEST(KvCache, TrimReturnsBlocksReservedPastTheComputedTokens) {
    KvCache cache(small_geometry(), 8, 1);
    SessionKv kv;
    ASSERT_TRUE(cache.reserve(kv, 16));
    kv.n_tokens = 5;
    cache.trim(kv);
    EXPECT_EQ(kv.blocks.size(), 1u);
    EXPECT_EQ(cache.sealed_pool().n_free(), 7u);
}

TEST(KvCache, RandomSessionsKeepInvariantsAndEndFullyFree) {
    KvCache cache(small_geometry(), 64, 8);
    std::mt19937 rng(1234);
    std::vector<SessionKv> sessions(8);
    for (int op = 0; op < 5000; ++op) {
        SessionKv &kv = sessions[rng() % sessions.size()];
        switch (rng() % 4) {
            case 0:
            case 1: {
                uint32_t grow = 1 + rng() % 9;
                uint32_t free_before = cache.sealed_pool().n_free();
                std::vector<uint32_t> before = kv.blocks;
                if (cache.reserve(kv, kv.n_tokens + grow)) {
                    kv.n_tokens += grow;
                } else {
                    EXPECT_EQ(cache.sealed_pool().n_free(), free_before);
                    EXPECT_EQ(kv.blocks, before);
                }
                break;
            }
            case 2:
                cache.release(kv);
                break;
            default:
                cache.trim(kv);
                break;
        }
        size_t used = 0;
        for (const SessionKv &s : sessions) {
            ASSERT_EQ(s.blocks.size(), s.n_tokens / 4);
            used += s.blocks.size();
        }
        ASSERT_EQ(used, cache.sealed_pool().n_used());
        cache.sealed_pool().check_invariants();
        cache.tail_pool().check_invariants();
    }
    for (SessionKv &kv : sessions) cache.release(kv);
    EXPECT_EQ(cache.sealed_pool().n_free(), 64u);
    EXPECT_EQ(cache.tail_pool().n_free(), 8u);
}

}  // namespace
}  // namespace llmkv
