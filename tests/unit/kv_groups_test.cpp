// Layer groups (sliding-window layers): the geometry's layer-to-group mapping, and the KV
// manager releasing local blocks once they leave the window, composed with the prefix cache,
// forks, the host tier (park / resume) and snapshots. Exact block counts throughout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "host_tier_skip.h"
#include "kv/kv_manager.h"
#include "kv/transfer.h"

namespace llmkv {
namespace {

// 6 layers; layers 2 and 5 global, the others local with a 10-token window (Gemma 3's
// pattern at a smaller scale): group 0 = {2, 5}, group 1 = {0, 1}, group 2 = {3, 4}.
std::vector<uint32_t> windows6() {
    return {10, 10, 0, 10, 10, 0};
}

KvGeometry grouped_geometry() {
    KvGeometry g;
    g.n_layers = 6;
    g.n_kv_heads = 1;
    g.head_dim = 8;
    g.block_tokens = 4;
    set_layer_groups(g, windows6());
    return g;
}

TEST(KvGroups, LayersMapToGroupsAndSlots) {
    KvGeometry g = grouped_geometry();
    ASSERT_TRUE(g.grouped());
    EXPECT_EQ(g.n_groups, 3u);
    EXPECT_EQ(g.group_layers, 2u);
    EXPECT_EQ(g.window, 10u);
    const uint32_t group[6] = {1, 1, 0, 2, 2, 0}, slot[6] = {0, 1, 0, 0, 1, 1};
    for (uint32_t l = 0; l < 6; ++l) {
        EXPECT_EQ(g.layer_group(l), group[l]) << l;
        EXPECT_EQ(g.layer_slot(l), slot[l]) << l;
    }
    // A pool block holds two layers; a token costs all three groups while in the window.
    EXPECT_EQ(g.sealed_block_bytes(), 2 * g.sealed_layer_bytes());
    EXPECT_EQ(g.sealed_k_offset(4, 0), g.sealed_layer_bytes());
    EXPECT_DOUBLE_EQ(g.sealed_bytes_per_token(), 6.0 * g.sealed_layer_bytes() / 4);

    // A query at n sees n - 9 .. n: token block j (4 tokens) is out once 4j + 3 < n - 9.
    EXPECT_EQ(g.local_live_from(0), 0u);
    EXPECT_EQ(g.local_live_from(9), 0u);
    EXPECT_EQ(g.local_live_from(12), 0u);  // sees 3..12: block 0 still
    EXPECT_EQ(g.local_live_from(13), 1u);  // sees 4..13
    EXPECT_EQ(g.local_live_from(40), 7u);  // sees 31..40: blocks 7..
    EXPECT_EQ(g.held_blocks(40), 10u + 3u * 2u);

    // No groups: nothing local, all local, different windows, or no windows given.
    for (const std::vector<uint32_t> &w : std::vector<std::vector<uint32_t>>{
             {0, 0, 0, 0, 0, 0}, {8, 8, 8, 8, 8, 8}, {8, 8, 0, 16, 16, 0}, {}}) {
        KvGeometry u = grouped_geometry();
        set_layer_groups(u, w);
        EXPECT_FALSE(u.grouped());
        EXPECT_EQ(u.n_groups, 1u);
        EXPECT_EQ(u.layer_slot(4), 4u);
        EXPECT_EQ(u.sealed_block_bytes(), 6 * u.sealed_layer_bytes());
        EXPECT_EQ(u.held_blocks(40), 10u);
    }
    // 5 local layers in groups of 2: the last local group has an unused slot.
    KvGeometry odd = grouped_geometry();
    odd.n_layers = 7;
    set_layer_groups(odd, {10, 10, 0, 10, 10, 0, 10});
    EXPECT_EQ(odd.n_groups, 4u);
    EXPECT_EQ(odd.layer_group(6), 3u);
    EXPECT_EQ(odd.layer_slot(6), 0u);
}

struct Rig {
    std::unique_ptr<KvManager> kv;
    std::vector<std::unique_ptr<KvSeq>> seqs;

    explicit Rig(uint32_t n_blocks, bool prefix_cache, uint64_t host_bytes = 0) {
        KvManagerConfig c;
        c.geometry = grouped_geometry();
        c.n_sealed_blocks = n_blocks;
        c.n_tail_slots = 8;
        c.prefix_cache = prefix_cache;
        c.prefix_salt = "kv-groups-test";
        c.host_bytes = host_bytes;
        kv = std::make_unique<KvManager>(c);
        kv->attach(std::make_unique<PoolMemoryTransferQueue>(kv->cache(), host_bytes != 0),
                   mmap_host_allocator(), nullptr);
    }
    KvSeq &add() {
        seqs.push_back(std::make_unique<KvSeq>());
        return *seqs.back();
    }
    void check() {
        std::vector<const KvSeq *> v;
        for (auto &s : seqs) v.push_back(s.get());
        kv->check_invariants(v);
    }
    uint32_t used() const { return kv->cache().sealed_pool().n_used(); }
    // Fills each newly sealed block with bytes naming (token block, group): what the
    // forward pass would write.
    void write_blocks(KvSeq &s, uint32_t from_block) {
        const KvGeometry &g = kv->geometry();
        const size_t per = g.n_groups - 1;
        for (size_t j = from_block; j < s.kv.blocks.size(); ++j) {
            std::memset(kv->cache().sealed_data(s.kv.blocks[j]), int(j * 8),
                        g.sealed_block_bytes());
            for (size_t k = 0; k < per; ++k) {
                uint32_t id = s.kv.local[j * per + k];
                if (id != SessionKv::kReleased)
                    std::memset(kv->cache().sealed_data(id), int(j * 8 + 1 + k),
                                g.sealed_block_bytes());
            }
        }
    }
    // One step of n tokens: reserve, "compute", publish and release.
    void step(KvSeq &s, const std::vector<int32_t> &tokens, uint32_t n) {
        const uint32_t before = uint32_t(s.kv.blocks.size());
        ASSERT_TRUE(kv->reserve(s, s.kv.n_tokens + n));
        s.kv.n_tokens += n;
        write_blocks(s, before);
        kv->publish_sealed(s, tokens);
    }
};

std::vector<int32_t> tokens_of(uint32_t n, int32_t seed = 1) {
    std::vector<int32_t> t(n);
    for (uint32_t i = 0; i < n; ++i) t[i] = int32_t((i * 7 + seed) % 50);
    return t;
}

// Whether every held block of s still has the bytes write_blocks gave it.
void expect_bytes(Rig &r, const KvSeq &s) {
    const KvGeometry &g = r.kv->geometry();
    const size_t per = g.n_groups - 1;
    for (size_t j = 0; j < s.kv.blocks.size(); ++j) {
        EXPECT_EQ(r.kv->cache().sealed_data(s.kv.blocks[j])[g.sealed_block_bytes() - 1],
                  uint8_t(j * 8))
            << j;
        for (size_t k = 0; k < per; ++k) {
            uint32_t id = s.kv.local[j * per + k];
            if (id == SessionKv::kReleased) continue;
            EXPECT_EQ(r.kv->cache().sealed_data(id)[0], uint8_t(j * 8 + 1 + k)) << j << "/" << k;
        }
    }
}

TEST(KvGroups, LocalBlocksAreReleasedOutsideTheWindowExactly) {
    Rig r(200, /*prefix_cache=*/false);
    KvSeq &s = r.add();
    const std::vector<int32_t> t = tokens_of(100);
    const KvGeometry &g = r.kv->geometry();
    uint32_t n = 0;
    for (uint32_t chunk : {7u, 1u, 1u, 16u, 3u, 1u, 30u, 1u, 1u, 1u, 38u}) {
        r.step(s, t, chunk);
        n += chunk;
        ASSERT_EQ(s.kv.n_tokens, n);
        // Exactly the group-0 blocks plus the local blocks of the window.
        EXPECT_EQ(r.used(), g.held_blocks(n)) << n;
        EXPECT_EQ(r.kv->freeable_blocks(s), g.held_blocks(n)) << n;
        r.check();
    }
    EXPECT_EQ(n, 100u);
    EXPECT_EQ(r.used(), 25u + 2u * (25u - g.local_live_from(100)));  // 25 + 2 * 3
    expect_bytes(r, s);
    r.kv->drop(s);
    EXPECT_EQ(r.used(), 0u);
    r.check();
}

TEST(KvGroups, ReleaseCanBeTurnedOffByNotGrouping) {
    // The comparison point: without groups every layer keeps every block.
    KvManagerConfig c;
    c.geometry = grouped_geometry();
    set_layer_groups(c.geometry, {});
    c.n_sealed_blocks = 64;
    c.n_tail_slots = 2;
    KvManager kv(c);
    kv.attach(std::make_unique<PoolMemoryTransferQueue>(kv.cache(), false), mmap_host_allocator(),
              nullptr);
    KvSeq s;
    ASSERT_TRUE(kv.reserve(s, 100));
    s.kv.n_tokens = 100;
    kv.publish_sealed(s, tokens_of(100));
    EXPECT_EQ(kv.cache().sealed_pool().n_used(), 25u);
    EXPECT_EQ(kv.cache().sealed_pool().block_bytes(), 3 * grouped_geometry().sealed_block_bytes());
    kv.drop(s);
}

TEST(KvGroups, PrefixCacheHandsOverTheWindowsLocalBlocks) {
    Rig r(200, /*prefix_cache=*/true);
    const std::vector<int32_t> t = tokens_of(60);
    KvSeq &a = r.add();
    r.step(a, t, 41);
    r.check();
    // b asks for 50 tokens of which the first 41 are a's: it matches 40 (10 blocks; all but
    // the last prompt token), with the local blocks of the window before position 40.
    KvSeq &b = r.add();
    std::vector<int32_t> tb(t.begin(), t.begin() + 50);
    r.kv->match_prefix(b, tb);
    EXPECT_EQ(b.kv.n_tokens, 40u);
    const KvGeometry &g = r.kv->geometry();
    const uint32_t from = g.local_live_from(40);
    EXPECT_EQ(from, 7u);
    EXPECT_EQ(g.local_live_from(41), 8u);  // a itself no longer holds block 7's local blocks
    for (uint32_t j = 0; j < 10; ++j) {
        EXPECT_EQ(b.kv.blocks[j], a.kv.blocks[j]);
        for (uint32_t k = 0; k < 2; ++k) {
            if (j < from) {
                EXPECT_EQ(b.kv.local[j * 2 + k], SessionKv::kReleased);
            } else if (a.kv.local[j * 2 + k] != SessionKv::kReleased) {
                EXPECT_EQ(b.kv.local[j * 2 + k], a.kv.local[j * 2 + k]) << j;
            } else {
                // a released it (a's window moved on) but the cache kept it for b.
                EXPECT_NE(b.kv.local[j * 2 + k], SessionKv::kReleased) << j;
                EXPECT_EQ(r.kv->holders(b.kv.local[j * 2 + k]), 1u) << j;
            }
        }
    }
    r.check();
    expect_bytes(r, b);

    // a goes away: its local blocks outside b's window stay cached (evictable); b continues.
    r.kv->drop(a);
    r.check();
    r.step(b, tb, 10);
    EXPECT_EQ(b.kv.n_tokens, 50u);
    r.check();
    r.kv->drop(b);
    r.check();
    // Everything is cached and idle now; nothing held.
    EXPECT_EQ(r.kv->cache().sealed_available(), 200u);
}

TEST(KvGroups, AMatchShrinksToWhereTheLocalBlocksAreStillCached) {
    // A pool so small that caching a long sequence's local blocks must evict some of them.
    Rig r(40, /*prefix_cache=*/true);
    const std::vector<int32_t> t = tokens_of(80);
    KvSeq &a = r.add();
    for (int i = 0; i < 8; ++i) r.step(a, t, 9);  // 72 tokens, 18 blocks
    r.check();
    r.kv->drop(a);
    // Another sequence takes most of the pool: the cache evicts its oldest leaves first,
    // which are local blocks of early token blocks.
    KvSeq &hog = r.add();
    const std::vector<int32_t> other = tokens_of(80, 3);
    ASSERT_TRUE(r.kv->reserve(hog, 4 * 6));
    hog.kv.n_tokens = 24;
    r.kv->publish_sealed(hog, other);
    r.check();
    KvSeq &b = r.add();
    r.kv->match_prefix(b, t);
    r.check();
    // Whatever b got, it holds every local block its window needs.
    const KvGeometry &g = r.kv->geometry();
    const uint32_t m = b.kv.n_tokens / 4;
    EXPECT_EQ(b.kv.blocks.size(), m);
    for (uint32_t j = g.local_live_from(b.kv.n_tokens); j < m; ++j) {
        EXPECT_NE(b.kv.local[j * 2], SessionKv::kReleased);
        EXPECT_NE(b.kv.local[j * 2 + 1], SessionKv::kReleased);
    }
    expect_bytes(r, b);
    r.kv->drop(b);
    r.kv->drop(hog);
    r.check();
}

TEST(KvGroups, ForkSharesLiveBlocksAndBothRelease) {
    Rig r(100, /*prefix_cache=*/false);
    const std::vector<int32_t> t = tokens_of(80);
    KvSeq &a = r.add();
    r.step(a, t, 30);
    KvSeq &b = r.add();
    r.kv->share(a, b, 8);
    r.check();
    const KvGeometry &g = r.kv->geometry();
    EXPECT_EQ(r.used(), g.held_blocks(30));
    r.step(a, t, 20);
    r.step(b, t, 5);
    r.check();
    expect_bytes(r, a);
    expect_bytes(r, b);
    r.kv->drop(a);
    r.check();
    EXPECT_EQ(r.used(), g.held_blocks(35));
    r.kv->drop(b);
    EXPECT_EQ(r.used(), 0u);
}

TEST(KvGroups, ParkAndResumeMoveLocalBlocksToo) {
    SKIP_WITHOUT_MIMALLOC();
    Rig r(100, /*prefix_cache=*/false, /*host_bytes=*/8u << 20);
    const std::vector<int32_t> t = tokens_of(80);
    KvSeq &a = r.add();
    r.step(a, t, 45);
    const uint32_t held = r.used();
    ASSERT_TRUE(r.kv->park_out(a, /*wait=*/true));
    r.check();
    EXPECT_EQ(r.used(), 0u);
    EXPECT_EQ(r.kv->resume_blocks(a), held);
    ASSERT_TRUE(r.kv->start_resume(a));
    r.kv->reap(a, true);
    r.check();
    EXPECT_EQ(r.used(), held);
    expect_bytes(r, a);
    r.step(a, t, 20);
    r.check();
    r.kv->drop(a);
    r.check();
}

TEST(KvGroups, SnapshotStoresTheLiveBlocksAndLoadsThemBack) {
    Rig r(100, /*prefix_cache=*/false);
    const std::vector<int32_t> t = tokens_of(80);
    KvSeq &a = r.add();
    r.step(a, t, 37);
    SnapshotMeta m = r.kv->snapshot_meta("fp", "cpu");
    m.tokens.assign(t.begin(), t.begin() + 37);
    const KvGeometry &g = r.kv->geometry();
    EXPECT_EQ(m.n_groups, 3u);
    EXPECT_EQ(m.window, 10u);
    const std::string path =
        testing::TempDir() + "/kv_groups_" + std::to_string(getpid()) + ".snap";
    r.kv->save_snapshot(a, m, path);
    SnapshotMeta expected = r.kv->snapshot_meta("fp", "cpu");
    LoadedSnapshot snap = read_snapshot(path, expected);
    EXPECT_EQ(snap.meta().stored_blocks(), g.held_blocks(37));
    KvSeq &b = r.add();
    r.kv->load_snapshot(b, snap, path, /*shared=*/true);
    r.check();
    EXPECT_EQ(b.kv.n_tokens, 37u);
    expect_bytes(r, b);
    EXPECT_EQ(r.used(), 2 * g.held_blocks(37));

    // An engine without groups refuses it, naming the difference.
    KvGeometry plain = grouped_geometry();
    set_layer_groups(plain, {});
    SnapshotMeta other = snapshot_meta_for(plain);
    other.model_fingerprint = expected.model_fingerprint;
    other.codec = expected.codec;
    other.block_bytes = expected.block_bytes;  // so that the group count is what differs
    try {
        read_snapshot(path, other);
        FAIL() << "a grouped snapshot loaded into an ungrouped engine";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("n_groups"), std::string::npos) << e.what();
    }
    std::remove(path.c_str());
}

}  // namespace
}  // namespace llmkv
