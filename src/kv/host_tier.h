// HostTier: the pinned host tier's memory. One region of locked (or CUDA-pinned) host
// memory registered as an exclusive mimalloc arena; host-resident KV blocks are carved
// from a mimalloc heap bound to that arena, so nothing else ever lands in the region.
//
// NOTE invariants (tested in tests/unit/host_tier_test.cpp):
//  - every block pointer lies inside [region_begin, region_begin + bytes_total) and is
//    aligned to kBlockAlignment; no allocation outside this class lands in the region.
//  - a failed allocate_blocks changes nothing (all or nothing), and a full tier answers
//    nullptr / false rather than throwing; freeing blocks makes room again.
//  - bytes_used() is the sum of the usable sizes of the live blocks; 0 when none live.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace llmkv {

// Where the region's memory comes from. CPU builds use mmap_host_allocator(); a CUDA
// build passes one built on cudaHostAlloc (or mmap + cudaHostRegister).
struct HostAllocator {
    // Returns `bytes` of host memory whose start is aligned to `alignment` (a power of
    // two, HostTier::kArenaAlignment), or nullptr. Sets `locked` to whether the pages are
    // locked / pinned in RAM. Must not throw.
    std::function<void *(uint64_t bytes, uint64_t alignment, bool &locked)> alloc;
    // Releases what alloc returned, with the same byte count. Must not throw.
    std::function<void(void *p, uint64_t bytes)> free;
    // For messages: "mmap", "cudaHostAlloc".
    std::string name;
    // Memory from alloc reads as zero (lets mimalloc skip zeroing for calloc-style use).
    bool zeroed = false;

    // Optional, both or neither: arena recycling. mimalloc can never unregister an arena
    // and allows 64 per process, so without these a process can create at most 64 host
    // tiers in its lifetime. With them, a destroyed tier's address range stays reserved
    // (no memory behind it) and a later tier of the same size and allocator name reuses
    // it and its arena. release_keep_address(p, bytes) frees the memory of [p, p+bytes)
    // but keeps the range reserved; reacquire(p, bytes, locked) puts usable memory there
    // again (false: it stays reserved, unused). Must not throw.
    std::function<void(void *p, uint64_t bytes)> release_keep_address;
    std::function<bool(void *p, uint64_t bytes, bool &locked)> reacquire;
};

// Anonymous private mmap, then mlock(); recyclable (mmap PROT_NONE / read-write with
// MAP_FIXED over the same range). When mlock fails (RLIMIT_MEMLOCK, no
// CAP_IPC_LOCK) the memory is kept unlocked, locked = false, and one warning per region
// says so. `lock` replaces ::mlock (tests inject a failing one); nullptr means ::mlock.
HostAllocator mmap_host_allocator(int (*lock)(const void *, size_t) = nullptr);

class HostTier {
public:
    // mimalloc 2.x arenas are made of 32 MiB blocks (MI_SEGMENT_SIZE), see host_tier.cpp.
    static constexpr uint64_t kArenaAlignment = uint64_t(32) << 20;
    // Every block starts on a cache line (and on an AVX-512 vector).
    static constexpr size_t kBlockAlignment = 64;

    // Reserves round_up(bytes, kArenaAlignment) bytes with `allocator` (or reuses the
    // arena of a destroyed tier of that size and allocator name), registers them as an
    // exclusive mimalloc arena and starts the heap thread. Throws llmkv::Error:
    //  - LLMKV_ERR_INVALID_ARGUMENT: bytes == 0, or an allocator without alloc/free;
    //  - LLMKV_ERR_UNSUPPORTED: libmimalloc.so.2 (>= 2.0.7) cannot be loaded;
    //  - LLMKV_ERR_OUT_OF_MEMORY: the allocator returned nullptr, mimalloc refused the
    //    arena (at most 64 per process; see HostAllocator::reacquire), or the heap could
    //    not be made;
    //  - LLMKV_ERR_INTERNAL: the allocator broke its alignment contract.
    // On any throw every byte obtained from the allocator has been given back.
    explicit HostTier(uint64_t bytes, HostAllocator allocator = mmap_host_allocator());
    // Stops the heap thread and returns the region to the allocator. Every block becomes
    // invalid: the caller must have drained copies touching the region first.
    ~HostTier();
    HostTier(const HostTier &) = delete;
    HostTier &operator=(const HostTier &) = delete;

    // One block of `bytes` (> 0), aligned to kBlockAlignment; nullptr when the tier has
    // no room (the caller falls back, e.g. to drop-and-recompute). bytes == 0 throws
    // LLMKV_ERR_INVALID_ARGUMENT.
    void *allocate_block(size_t bytes);
    // `count` blocks of `bytes` each, appended to out; all or nothing: false (out
    // unchanged, tier unchanged) when they do not all fit.
    bool allocate_blocks(size_t bytes, size_t count, std::vector<void *> &out);
    // Returns a block. nullptr is a no-op; a pointer that is not a live block of this
    // tier (foreign, interior, or already freed) throws LLMKV_ERR_INVALID_ARGUMENT and
    // changes nothing.
    void free_block(void *block);

    // Whether p points into the region (a block or not).
    bool contains(const void *p) const;
    const void *region_begin() const { return region_; }
    uint64_t bytes_total() const { return region_bytes_; }
    uint64_t bytes_used() const;
    size_t blocks_used() const;
    bool locked() const { return locked_; }
    // Whether this tier took over the arena of a destroyed one (see HostAllocator).
    bool reused_arena() const { return reused_arena_; }
    const std::string &allocator_name() const { return allocator_.name; }

    // Whether libmimalloc.so.2 can be loaded (the tier is usable); why not in *reason.
    static bool available(std::string *reason = nullptr);

private:
    struct Request {
        size_t bytes = 0;
        size_t count = 0;
        std::vector<void *> blocks;  // filled by the heap thread; empty when it failed
        bool done = false;
    };

    void heap_thread_main();
    bool take_retired_arena();
    void release_region() noexcept;

    HostAllocator allocator_;
    void *region_ = nullptr;
    uint64_t region_bytes_ = 0;
    bool locked_ = false;
    bool reused_arena_ = false;
    int arena_id_ = 0;  // 0 until the region is a registered mimalloc arena

    // Thread-safety: every public member may be called from any thread. mimalloc lets
    // only a heap's creating thread allocate from it, and deletes a thread's heaps when
    // that thread exits, while llmkv engines are called from any host thread. So one
    // heap thread owned by this object creates the heap, serves every allocation and
    // destroys it; frees call mi_free directly, which mimalloc allows from any thread.
    std::mutex call_mutex_;     // one allocation request in flight at a time
    mutable std::mutex mutex_;  // guards everything below
    std::condition_variable cv_;
    Request *request_ = nullptr;
    bool stop_ = false;
    int heap_state_ = 0;  // 0 starting, 1 ready, -1 mi_heap_new_in_arena failed
    std::unordered_map<const void *, size_t> live_;  // block -> usable bytes
    uint64_t bytes_used_ = 0;
    std::thread heap_thread_;
};

}  // namespace llmkv
