// HostTier: region sizing and alignment, locking and its fallback, arena exclusivity
// (nothing but tier blocks lands in the region), full-tier behaviour, error paths that leak
// nothing, and concurrent use. Portable (these run on Windows too, with mimalloc.dll);
// host_tier_posix_test.cpp has the Linux-only ones (a real mlock failure under RLIMIT_MEMLOCK,
// mimalloc's symbols kept out of the process's global scope).
//
// NOTE every HostTier registers one mimalloc arena and a process gets 64 of them over its
// lifetime (see src/kv/host_tier.cpp), so these tests create only a handful of tiers.
//
// TSan (concurrency tests here and in copy_engine_test.cpp):
//   cmake -S . -B build-tsan -G Ninja -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF
//         -DLLMKV_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo   (one line)
//   cmake --build build-tsan -j2 --target llmkv_unit_tests
//   build-tsan/tests/llmkv_unit_tests --gtest_filter='HostTier*:CopyEngine*'
#include "kv/host_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "host_tier_skip.h"
#include "platform/os.h"

namespace llmkv {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;
// One sealed SmolLM2-135M int8 block: 30 layers x 3 kv heads x (K,V) x 16 tokens x 64 dims.
constexpr size_t kSealedBlockBytes = 30 * 3 * 2 * 16 * 64;

llmkv_status status_of(const std::function<void()> &fn) {
    try {
        fn();
    } catch (const Error &e) {
        return e.status();
    }
    return LLMKV_OK;
}

bool inside(const HostTier &tier, const void *p, size_t bytes) {
    return tier.contains(p) && tier.contains(static_cast<const char *>(p) + bytes - 1);
}

// Collects log messages for the duration of a test.
struct LogCapture {
    static std::mutex mutex;
    static std::vector<std::pair<llmkv_log_level, std::string>> messages;
    static void sink(llmkv_log_level level, const char *message, void *) {
        std::lock_guard<std::mutex> lock(mutex);
        messages.emplace_back(level, message);
    }
    LogCapture() {
        messages.clear();
        llmkv_log_set(&LogCapture::sink, nullptr, LLMKV_LOG_DEBUG);
    }
    ~LogCapture() { llmkv_log_set(nullptr, nullptr, LLMKV_LOG_WARN); }
    size_t count(llmkv_log_level level, const char *needle) const {
        std::lock_guard<std::mutex> lock(mutex);
        size_t n = 0;
        for (const auto &m : messages)
            n += m.first == level && m.second.find(needle) != std::string::npos;
        return n;
    }
};
std::mutex LogCapture::mutex;
std::vector<std::pair<llmkv_log_level, std::string>> LogCapture::messages;

int failing_lock(const void *, size_t) {
    errno = ENOMEM;
    return -1;
}

// Whether this process may lock `bytes` right now (root, CAP_IPC_LOCK or a high limit on
// Linux; a large enough working set on Windows).
bool can_lock(size_t bytes) {
    void *p = os::map_memory(bytes);
    if (p == nullptr) return false;
    const bool ok = os::lock_memory(p, bytes) == 0;
    os::release_memory(p, bytes);
    return ok;
}

TEST(HostTier, RegionIsRoundedUpToWholeArenaBlocksAndAligned) {
    SKIP_WITHOUT_MIMALLOC();
    HostTier tier(40 * kMiB);
    EXPECT_EQ(tier.bytes_total(), 64 * kMiB);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tier.region_begin()) % HostTier::kArenaAlignment, 0u);
    EXPECT_EQ(tier.bytes_used(), 0u);
    EXPECT_EQ(tier.blocks_used(), 0u);
    EXPECT_EQ(tier.allocator_name(), "mmap");
    EXPECT_EQ(tier.locked(), can_lock(size_t(tier.bytes_total())));
    EXPECT_TRUE(tier.contains(tier.region_begin()));
    EXPECT_FALSE(
        tier.contains(static_cast<const char *>(tier.region_begin()) + tier.bytes_total()));
    EXPECT_FALSE(tier.contains(nullptr));
}

TEST(HostTier, FailedMlockKeepsTheTierUsableUnlockedAndWarnsOnce) {
    SKIP_WITHOUT_MIMALLOC();
    LogCapture log;
    HostTier tier(32 * kMiB, mmap_host_allocator(&failing_lock));
    EXPECT_FALSE(tier.locked());
    std::vector<void *> blocks;
    ASSERT_TRUE(tier.allocate_blocks(kSealedBlockBytes, 8, blocks));
    for (size_t i = 0; i < blocks.size(); ++i)
        std::memset(blocks[i], int(i + 1), kSealedBlockBytes);
    for (size_t i = 0; i < blocks.size(); ++i) {
        EXPECT_EQ(static_cast<unsigned char *>(blocks[i])[kSealedBlockBytes - 1], i + 1);
        tier.free_block(blocks[i]);
    }
    EXPECT_EQ(log.count(LLMKV_LOG_WARN, os::lock_function_name()), 1u);
}

TEST(HostTier, NothingButTierBlocksLandsInTheRegion) {
    SKIP_WITHOUT_MIMALLOC();
    HostTier tier(64 * kMiB);

    // The same mimalloc instance's default heap and a fresh non-arena heap (loading the
    // library by name again returns the instance the tier loaded).
    std::string why;
    void *lib = os::load_library(os::mimalloc_library_file(), why);
    ASSERT_NE(lib, nullptr) << why;
    auto mi_malloc_fn = reinterpret_cast<void *(*)(size_t)>(os::library_symbol(lib, "mi_malloc"));
    auto mi_free_fn = reinterpret_cast<void (*)(void *)>(os::library_symbol(lib, "mi_free"));
    auto mi_heap_new_fn = reinterpret_cast<void *(*)()>(os::library_symbol(lib, "mi_heap_new"));
    auto mi_heap_malloc_fn =
        reinterpret_cast<void *(*)(void *, size_t)>(os::library_symbol(lib, "mi_heap_malloc"));
    auto mi_heap_destroy_fn =
        reinterpret_cast<void (*)(void *)>(os::library_symbol(lib, "mi_heap_destroy"));
    ASSERT_TRUE(mi_malloc_fn && mi_free_fn && mi_heap_new_fn && mi_heap_malloc_fn &&
                mi_heap_destroy_fn);
    void *other_heap = mi_heap_new_fn();
    ASSERT_NE(other_heap, nullptr);

    const size_t sizes[] = {
        16, 64, 1000, 4096, 70000, kSealedBlockBytes, 2 * kSealedBlockBytes, 3 * kMiB};
    std::vector<void *> blocks, mallocs, mi_blocks;
    std::vector<std::unique_ptr<char[]>> news;
    // Interleaved, and enough outside allocations (> 64 MiB) that mimalloc's other heaps
    // need fresh segments while the tier still has free space.
    for (int round = 0; round < 8; ++round) {
        for (size_t bytes : sizes) {
            if (void *b = tier.allocate_block(bytes)) {
                blocks.push_back(b);
                EXPECT_TRUE(inside(tier, b, bytes));
                EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % HostTier::kBlockAlignment, 0u);
            }
            void *m = std::malloc(bytes);
            ASSERT_NE(m, nullptr);
            mallocs.push_back(m);
            news.emplace_back(new char[bytes]);
            void *a = mi_malloc_fn(bytes);
            void *h = mi_heap_malloc_fn(other_heap, bytes);
            ASSERT_TRUE(a && h);
            mi_blocks.push_back(a);
            mi_blocks.push_back(h);
        }
    }
    EXPECT_GT(blocks.size(), 40u);
    for (void *m : mallocs) EXPECT_FALSE(tier.contains(m));
    for (const auto &n : news) EXPECT_FALSE(tier.contains(n.get()));
    for (void *a : mi_blocks) EXPECT_FALSE(tier.contains(a));

    for (void *m : mallocs) std::free(m);
    for (size_t i = 0; i < mi_blocks.size(); i += 2) mi_free_fn(mi_blocks[i]);
    mi_heap_destroy_fn(other_heap);
    for (void *b : blocks) tier.free_block(b);
    EXPECT_EQ(tier.bytes_used(), 0u);
}

TEST(HostTier, FullTierReturnsNullAndFreedBlocksMakeRoomAgain) {
    SKIP_WITHOUT_MIMALLOC();
    HostTier tier(32 * kMiB);
    std::vector<void *> blocks;
    while (void *b = tier.allocate_block(kSealedBlockBytes)) {
        blocks.push_back(b);
        ASSERT_LT(blocks.size(), 1000u) << "a 32 MiB tier cannot hold 1000 blocks of 180 KiB";
    }
    const size_t capacity = blocks.size();
    // 32 MiB holds at most 182 blocks of 180 KiB; mimalloc's page rounding (64 KiB slices)
    // and segment header leave somewhat fewer.
    EXPECT_GT(capacity, 150u);
    EXPECT_LE(capacity, 182u);
    EXPECT_EQ(tier.blocks_used(), capacity);
    EXPECT_GE(tier.bytes_used(), capacity * kSealedBlockBytes);

    // All or nothing: two more do not fit, so nothing changes.
    std::vector<void *> more{reinterpret_cast<void *>(0x1)};
    EXPECT_FALSE(tier.allocate_blocks(kSealedBlockBytes, 2, more));
    EXPECT_EQ(more.size(), 1u);
    EXPECT_EQ(tier.blocks_used(), capacity);

    // A block freed on this thread (not the heap's) is reusable.
    void *freed = blocks.back();
    blocks.pop_back();
    tier.free_block(freed);
    void *again = tier.allocate_block(kSealedBlockBytes);
    ASSERT_NE(again, nullptr);
    blocks.push_back(again);
    EXPECT_EQ(tier.allocate_block(kSealedBlockBytes), nullptr);

    // Freeing everything restores the whole capacity.
    for (void *b : blocks) tier.free_block(b);
    EXPECT_EQ(tier.bytes_used(), 0u);
    EXPECT_EQ(tier.blocks_used(), 0u);
    blocks.clear();
    ASSERT_TRUE(tier.allocate_blocks(kSealedBlockBytes, capacity, blocks));
    EXPECT_EQ(tier.allocate_block(kSealedBlockBytes), nullptr);
    // A request larger than the region is answered without asking mimalloc.
    EXPECT_EQ(tier.allocate_block(size_t(tier.bytes_total()) + 1), nullptr);
    for (void *b : blocks) tier.free_block(b);
}

TEST(HostTier, BadFreesThrowAndChangeNothing) {
    SKIP_WITHOUT_MIMALLOC();
    HostTier tier(32 * kMiB);
    void *block = tier.allocate_block(4096);
    ASSERT_NE(block, nullptr);
    const uint64_t used = tier.bytes_used();
    int on_stack = 0;
    EXPECT_EQ(status_of([&] { tier.free_block(&on_stack); }), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] { tier.free_block(static_cast<char *>(block) + 64); }),
              LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(tier.bytes_used(), used);
    tier.free_block(nullptr);  // a no-op, like free(NULL)
    tier.free_block(block);
    EXPECT_EQ(status_of([&] { tier.free_block(block); }), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(tier.bytes_used(), 0u);
    EXPECT_EQ(status_of([&] { tier.allocate_block(0); }), LLMKV_ERR_INVALID_ARGUMENT);
    std::vector<void *> none;
    EXPECT_TRUE(tier.allocate_blocks(64, 0, none));
    EXPECT_TRUE(none.empty());
}

struct CountingAllocator {
    int allocs = 0;
    int frees = 0;
    void *returned = nullptr;
    void *freed = nullptr;
};

TEST(HostTier, AllocatorFailureIsOutOfMemoryAndLeaksNothing) {
    SKIP_WITHOUT_MIMALLOC();
    EXPECT_EQ(status_of([] { HostTier tier(0); }), LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([] { HostTier tier(32 * kMiB, HostAllocator{}); }),
              LLMKV_ERR_INVALID_ARGUMENT);

    CountingAllocator counts;
    HostAllocator failing;
    failing.name = "always-fails";
    failing.alloc = [&counts](uint64_t, uint64_t, bool &locked) -> void * {
        ++counts.allocs;
        locked = true;
        return nullptr;
    };
    failing.free = [&counts](void *, uint64_t) { ++counts.frees; };
    try {
        HostTier tier(32 * kMiB, failing);
        FAIL() << "constructed a tier without memory";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_OUT_OF_MEMORY);
        EXPECT_NE(std::string(e.what()).find("always-fails"), std::string::npos) << e.what();
    }
    EXPECT_EQ(counts.allocs, 1);
    EXPECT_EQ(counts.frees, 0);

    // Too large for any machine: the default allocator fails and nothing is mapped.
    EXPECT_EQ(
        status_of([] { HostTier tier(uint64_t(1) << 60, mmap_host_allocator(&failing_lock)); }),
        LLMKV_ERR_OUT_OF_MEMORY);

    // An allocator that breaks the alignment contract gets its memory back.
    CountingAllocator misaligned_counts;
    void *mapping = nullptr;
    size_t mapping_bytes = 0;
    HostAllocator misaligned;
    misaligned.name = "misaligned";
    misaligned.alloc = [&](uint64_t bytes, uint64_t alignment, bool &locked) -> void * {
        ++misaligned_counts.allocs;
        locked = false;
        mapping_bytes = size_t(bytes + 2 * alignment);
        mapping = os::map_memory(mapping_bytes);
        if (mapping == nullptr) return nullptr;
        // One page past an aligned address: never aligned.
        const uintptr_t aligned =
            (reinterpret_cast<uintptr_t>(mapping) + alignment - 1) & ~uintptr_t(alignment - 1);
        misaligned_counts.returned = reinterpret_cast<void *>(aligned + 4096);
        return misaligned_counts.returned;
    };
    misaligned.free = [&](void *p, uint64_t) {
        ++misaligned_counts.frees;
        misaligned_counts.freed = p;
        os::release_memory(mapping, mapping_bytes);
    };
    EXPECT_EQ(status_of([&] { HostTier tier(32 * kMiB, misaligned); }), LLMKV_ERR_INTERNAL);
    EXPECT_EQ(misaligned_counts.allocs, 1);
    EXPECT_EQ(misaligned_counts.frees, 1);
    EXPECT_EQ(misaligned_counts.freed, misaligned_counts.returned);
}

TEST(HostTier, InjectedAllocatorIsUsedAndReleasedWithTheTier) {
    SKIP_WITHOUT_MIMALLOC();
    CountingAllocator counts;
    HostAllocator base = mmap_host_allocator();
    HostAllocator counting;
    counting.name = "counting-mmap";
    counting.zeroed = true;
    counting.alloc = [&counts, base](uint64_t bytes, uint64_t alignment, bool &locked) {
        ++counts.allocs;
        counts.returned = base.alloc(bytes, alignment, locked);
        return counts.returned;
    };
    counting.free = [&counts, base](void *p, uint64_t bytes) {
        ++counts.frees;
        counts.freed = p;
        base.free(p, bytes);
    };
    {
        HostTier tier(32 * kMiB, counting);
        EXPECT_EQ(tier.allocator_name(), "counting-mmap");
        EXPECT_EQ(tier.region_begin(), counts.returned);
        // Left allocated on purpose: destruction must cope.
        std::vector<void *> blocks;
        ASSERT_TRUE(tier.allocate_blocks(kSealedBlockBytes, 20, blocks));
        for (void *b : blocks) std::memset(b, 0xab, kSealedBlockBytes);
    }
    EXPECT_EQ(counts.allocs, 1);
    EXPECT_EQ(counts.frees, 1);
    EXPECT_EQ(counts.freed, counts.returned);
}

// mimalloc arenas cannot be unregistered (64 per process): a destroyed tier's arena is
// taken over by the next tier of the same size, which works like a fresh one.
TEST(HostTier, DestroyedTiersArenaIsReusedBySameSizedTier) {
    SKIP_WITHOUT_MIMALLOC();
    const uint64_t bytes = 96 * kMiB;  // a size no other test uses
    size_t fresh_capacity = 0;
    {
        HostTier first(bytes);
        std::vector<void *> blocks;
        while (void *b = first.allocate_block(kSealedBlockBytes)) {
            std::memset(b, 0xcd, kSealedBlockBytes);
            blocks.push_back(b);
        }
        fresh_capacity = blocks.size();
        // Half of them are left allocated on purpose.
        for (size_t i = 0; i < blocks.size(); i += 2) first.free_block(blocks[i]);
    }
    for (int round = 0; round < 3; ++round) {
        HostTier tier(bytes);
        EXPECT_TRUE(tier.reused_arena());
        EXPECT_EQ(tier.locked(), can_lock(size_t(tier.bytes_total())));
        std::vector<void *> blocks;
        while (void *b = tier.allocate_block(kSealedBlockBytes)) {
            ASSERT_TRUE(inside(tier, b, kSealedBlockBytes));
            std::memset(b, round, kSealedBlockBytes);
            blocks.push_back(b);
        }
        EXPECT_EQ(blocks.size(), fresh_capacity);
        for (size_t i = 0; i < blocks.size(); ++i) {
            ASSERT_EQ(static_cast<unsigned char *>(blocks[i])[i % kSealedBlockBytes], round);
        }
        for (void *b : blocks) tier.free_block(b);
    }
    // Many more tiers than mimalloc has arena slots: recycling keeps this working.
    for (int i = 0; i < 80; ++i) {
        HostTier tier(32 * kMiB);
        ASSERT_NE(tier.allocate_block(4096), nullptr);
    }
}

TEST(HostTier, ConcurrentAllocateAndFreeFromManyThreadsNeverShareABlock) {
    SKIP_WITHOUT_MIMALLOC();
    HostTier tier(64 * kMiB);
    constexpr int kThreads = 4;
    constexpr int kRounds = 200;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            std::vector<unsigned char *> mine;
            for (int r = 0; r < kRounds; ++r) {
                const size_t bytes = (r % 3 == 0) ? kSealedBlockBytes : 4096 + 64 * size_t(r);
                auto *b = static_cast<unsigned char *>(tier.allocate_block(bytes));
                if (b != nullptr) {
                    std::memset(b, t + 1, bytes);
                    mine.push_back(b);
                }
                if (mine.size() > 16 || (r % 5 == 4 && !mine.empty())) {
                    unsigned char *victim = mine.front();
                    mine.erase(mine.begin());
                    if (victim[0] != t + 1) failures.fetch_add(1);
                    tier.free_block(victim);
                }
            }
            for (unsigned char *b : mine) {
                if (b[0] != t + 1) failures.fetch_add(1);
                tier.free_block(b);
            }
        });
    }
    for (auto &th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(tier.bytes_used(), 0u);
    EXPECT_EQ(tier.blocks_used(), 0u);
}

}  // namespace
}  // namespace llmkv
