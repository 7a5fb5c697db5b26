// HostTier: the region (anonymous memory, locked, by default), mimalloc loaded privately at run
// time, and the heap thread that owns the arena-bound mimalloc heap.
//
// Why dlopen and not a link against libmimalloc: Debian's libmimalloc.so.2 is an override
// build; it exports malloc, free, operator new and friends. Linked into libllmkv.so (or
// into a program through llmkv_static) it becomes a DT_NEEDED of the process and can take
// over the host program's malloc (measured: a program linked with -lmimalloc gets every
// malloc from mimalloc). An embeddable library must never do that. dlopen with
// RTLD_LOCAL keeps mimalloc's symbols out of the global scope, so nothing else in the
// process resolves malloc to it; we dlsym only the mi_* functions below and never
// dlclose (mimalloc keeps thread-exit hooks and global state for the process lifetime).
// If the library is missing the host tier is unavailable (LLMKV_ERR_UNSUPPORTED). If the
// host itself preloaded mimalloc, dlopen returns that same instance, which is fine: our
// arena is exclusive either way.
//
// What mimalloc 2.0.9 (Debian bookworm) requires of a managed arena, read from its
// arena.c / segment-cache.c and checked on this machine:
//  - the arena is cut into MI_ARENA_BLOCK_SIZE = MI_SEGMENT_SIZE = 32 MiB blocks; a size
//    under 32 MiB is refused and a remainder past the last whole block is never used
//    (48 MiB registers as 32 MiB). So the region is rounded up to 32 MiB.
//  - the start must be MI_SEGMENT_ALIGN = 32 MiB aligned. This is only a debug assert in
//    mimalloc; a misaligned arena corrupts memory in release builds, because mimalloc
//    finds a block's segment by masking its address. So the allocator must align it.
//  - is_committed = true makes the arena "no decommit": its segments count as pinned and
//    are never decommitted or reset (madvise / mmap over them), which locked and
//    CUDA-pinned memory requires. is_large stays false (these are not huge OS pages).
//  - exclusive = true: only heaps made with mi_heap_new_in_arena(id) allocate there,
//    and such heaps never fall back to OS memory (they return NULL), which is exactly the
//    "full tier" signal we want. Freed segments may sit in mimalloc's global segment
//    cache, tagged with the arena id, where only this arena's heaps can take them.
//  - an arena can never be unregistered and there are at most 64 (MI_MAX_ARENAS) per
//    process. So ~HostTier does not drop the arena: with a recycling allocator (the
//    default one is) it frees the memory but keeps the address range reserved, and the
//    next tier of the same size and allocator takes the range and the arena over. That
//    is safe because mimalloc never touches the range in between: the heap was emptied
//    and destroyed, its segments left mimalloc's segment map, and freed segments of a
//    no-decommit arena that sit in the segment cache are never purged and only reissued
//    to heaps of this arena, which rewrite their headers. Without recycling (or with 64
//    arenas of other sizes registered) the 65th tier fails with LLMKV_ERR_OUT_OF_MEMORY
//    and says why.
#include "kv/host_tier.h"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <system_error>
#include <type_traits>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/thread_priority.h"
#include "platform/os.h"

#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#define LLMKV_HAVE_MIMALLOC_HEADER 1
#endif

namespace llmkv {

namespace {

// The few mimalloc entry points we use, as plain function pointers. The types are
// written out so the build needs no mimalloc header; when the header is present they
// are checked against it.
using MiVersionFn = int (*)();
using MiManageOsMemoryExFn = bool (*)(void *, size_t, bool, bool, bool, int, bool, int *);
using MiArenaAreaFn = void *(*)(int, size_t *);
using MiHeapNewInArenaFn = void *(*)(int);
using MiHeapMallocAlignedFn = void *(*)(void *, size_t, size_t);
using MiHeapCollectFn = void (*)(void *, bool);
using MiHeapDestroyFn = void (*)(void *);
using MiFreeFn = void (*)(void *);
using MiUsableSizeFn = size_t (*)(const void *);

#ifdef LLMKV_HAVE_MIMALLOC_HEADER
// The header's functions are noexcept; a noexcept function pointer converts to ours only
// when the parameter and return types match exactly.
static_assert(std::is_same_v<mi_arena_id_t, int>);
static_assert(std::is_convertible_v<decltype(&mi_version), MiVersionFn>);
static_assert(std::is_convertible_v<decltype(&mi_manage_os_memory_ex), MiManageOsMemoryExFn>);
static_assert(std::is_convertible_v<decltype(&mi_arena_area), MiArenaAreaFn>);
static_assert(std::is_convertible_v<decltype(&mi_usable_size), MiUsableSizeFn>);
static_assert(std::is_convertible_v<decltype(&mi_free), MiFreeFn>);
// Heap functions take mi_heap_t*, which we hold as void*: check the other parts.
static_assert(std::is_same_v<decltype(mi_heap_new_in_arena(0)), mi_heap_t *>);
static_assert(std::is_same_v<decltype(mi_heap_malloc_aligned(nullptr, 1, 1)), void *>);
#endif

struct Mimalloc {
    MiVersionFn version = nullptr;
    MiManageOsMemoryExFn manage_os_memory_ex = nullptr;
    MiArenaAreaFn arena_area = nullptr;
    MiHeapNewInArenaFn heap_new_in_arena = nullptr;
    MiHeapMallocAlignedFn heap_malloc_aligned = nullptr;
    MiHeapCollectFn heap_collect = nullptr;
    MiHeapDestroyFn heap_destroy = nullptr;
    MiFreeFn free = nullptr;
    MiUsableSizeFn usable_size = nullptr;
    std::string error;  // empty when every entry point was found
};

template <typename Fn>
bool resolve(void *lib, const char *name, Fn &out, std::string &error) {
    out = reinterpret_cast<Fn>(os::library_symbol(lib, name));
    if (out == nullptr && error.empty())
        error = strprintf("%s has no %s", os::mimalloc_library_file(), name);
    return out != nullptr;
}

// Loaded once per process, never unloaded (see the file comment).
const Mimalloc &mimalloc() {
    static const Mimalloc api = [] {
        Mimalloc m;
        // Beside the llmkv library first (how a Windows application ships mimalloc.dll
        // with llmkv.dll), then the system's search path (Debian's libmimalloc.so.2).
        const std::string file = os::mimalloc_library_file();
        const std::string dir =
            os::directory_of_binary_containing(reinterpret_cast<const void *>(&mimalloc));
        std::string why_beside, why;
        void *lib = dir.empty() ? nullptr : os::load_library(dir + "/" + file, why_beside);
        if (lib == nullptr) lib = os::load_library(file, why);
        if (lib == nullptr) {
            if (!why_beside.empty()) why = why_beside + "; " + why;
            m.error = strprintf(
                "cannot load %s (%s); install mimalloc 2.x (Debian: libmimalloc2.0) or put %s "
                "beside the llmkv library",
                file.c_str(), why.c_str(), file.c_str());
            return m;
        }
        resolve(lib, "mi_version", m.version, m.error);
        resolve(lib, "mi_manage_os_memory_ex", m.manage_os_memory_ex, m.error);
        resolve(lib, "mi_arena_area", m.arena_area, m.error);
        resolve(lib, "mi_heap_new_in_arena", m.heap_new_in_arena, m.error);
        resolve(lib, "mi_heap_malloc_aligned", m.heap_malloc_aligned, m.error);
        resolve(lib, "mi_heap_collect", m.heap_collect, m.error);
        resolve(lib, "mi_heap_destroy", m.heap_destroy, m.error);
        resolve(lib, "mi_free", m.free, m.error);
        resolve(lib, "mi_usable_size", m.usable_size, m.error);
        // Exclusive arenas and mi_heap_new_in_arena appeared in 2.0.7; the 32 MiB arena
        // block size (the layout check in the constructor verifies it) is 2.x's.
        if (m.error.empty()) {
            const int v = m.version();
            if (v < 207 || v >= 300) {
                m.error =
                    strprintf("%s is version %d.%d.%d; the host tier needs 2.0.7 or a later 2.x",
                              file.c_str(), v / 100, (v / 10) % 10, v % 10);
            }
        }
        return m;
    }();
    return api;
}

int default_lock(const void *p, size_t n) {
    return os::lock_memory(p, n);
}

}  // namespace

namespace {

// mlock, or one warning saying why the region stays unlocked.
bool lock_or_warn(int (*lock)(const void *, size_t), void *p, uint64_t bytes) {
    if (lock(p, bytes) == 0) return true;
    const int err = errno;
    // One message per region, never per block.
    LLMKV_LOG_WARN_F(
        "host tier: %s of %llu bytes failed (%s; %s); the tier stays usable but unlocked, so "
        "the OS may swap it out. %s",
        os::lock_function_name(), (unsigned long long)bytes, std::strerror(err),
        os::lock_limit_text().c_str(), os::lock_advice());
    return false;
}

}  // namespace

HostAllocator mmap_host_allocator(int (*lock)(const void *, size_t)) {
    if (lock == nullptr) lock = default_lock;
    HostAllocator a;
    a.name = "mmap";
    a.zeroed = true;  // fresh anonymous pages read as zero
    a.alloc = [lock](uint64_t bytes, uint64_t alignment, bool &locked) -> void * {
        locked = false;
        void *p = os::map_memory_aligned(bytes, alignment);
        if (p == nullptr) return nullptr;
        os::exclude_from_children(p, bytes);
        locked = lock_or_warn(lock, p, bytes);
        return p;
    };
    a.free = [](void *p, uint64_t bytes) { os::release_memory(p, bytes); };  // drops the lock too
    // The range stays reserved while its memory goes back to the OS.
    a.release_keep_address = [](void *p, uint64_t bytes) { (void)os::decommit_memory(p, bytes); };
    a.reacquire = [lock](void *p, uint64_t bytes, bool &locked) {
        locked = false;
        if (!os::recommit_memory(p, bytes)) return false;
        os::exclude_from_children(p, bytes);
        locked = lock_or_warn(lock, p, bytes);
        return true;
    };
    return a;
}

bool HostTier::available(std::string *reason) {
    const Mimalloc &mi = mimalloc();
    if (reason) *reason = mi.error;
    return mi.error.empty();
}

HostTier::HostTier(uint64_t bytes, HostAllocator allocator) : allocator_(std::move(allocator)) {
    if (bytes == 0) fail(LLMKV_ERR_INVALID_ARGUMENT, "host tier: size is 0 bytes");
    if (!allocator_.alloc || !allocator_.free) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "host tier: allocator '%s' lacks alloc or free",
             allocator_.name.c_str());
    }
    const Mimalloc &mi = mimalloc();
    if (!mi.error.empty())
        fail(LLMKV_ERR_UNSUPPORTED, "host tier unavailable: %s", mi.error.c_str());

    // Round up to whole arena blocks: mimalloc would silently ignore a remainder.
    if (bytes > UINT64_MAX - (kArenaAlignment - 1) || bytes > uint64_t(SIZE_MAX) / 2) {
        fail(LLMKV_ERR_OUT_OF_MEMORY, "host tier: %llu bytes is too large",
             (unsigned long long)bytes);
    }
    region_bytes_ = (bytes + kArenaAlignment - 1) & ~(kArenaAlignment - 1);

    if (fault::should_fail(fault::Site::kHostRegion)) {
        fail(LLMKV_ERR_OUT_OF_MEMORY,
             "host tier: allocator '%s' could not provide %llu bytes of host memory (injected)",
             allocator_.name.c_str(), (unsigned long long)region_bytes_);
    }
    if (!take_retired_arena()) {
        bool locked = false;
        region_ = allocator_.alloc(region_bytes_, kArenaAlignment, locked);
        if (region_ == nullptr) {
            fail(LLMKV_ERR_OUT_OF_MEMORY,
                 "host tier: allocator '%s' could not provide %llu bytes of host memory",
                 allocator_.name.c_str(), (unsigned long long)region_bytes_);
        }
        locked_ = locked;
        if ((reinterpret_cast<uintptr_t>(region_) & (kArenaAlignment - 1)) != 0) {
            void *p = region_;
            release_region();
            fail(LLMKV_ERR_INTERNAL,
                 "host tier: allocator '%s' returned %p, not aligned to %llu bytes",
                 allocator_.name.c_str(), p, (unsigned long long)kArenaAlignment);
        }
        int arena_id = 0;
        if (!mi.manage_os_memory_ex(region_, size_t(region_bytes_), /*is_committed=*/true,
                                    /*is_large=*/false, /*is_zero=*/allocator_.zeroed,
                                    /*numa_node=*/-1, /*exclusive=*/true, &arena_id)) {
            release_region();
            fail(LLMKV_ERR_OUT_OF_MEMORY,
                 "host tier: mimalloc refused a %llu-byte arena (a process can register at most 64 "
                 "mimalloc arenas in its lifetime; only a tier of the same size and allocator can "
                 "reuse a destroyed tier's arena)",
                 (unsigned long long)region_bytes_);
        }
        // mimalloc reports the area it will carve: it must be exactly ours, or this
        // mimalloc lays out arenas differently from what the comment at the top assumes.
        size_t area_bytes = 0;
        void *area = mi.arena_area(arena_id, &area_bytes);
        if (area != region_ || area_bytes != region_bytes_) {
            release_region();  // arena_id_ still 0: this arena is never reused
            fail(LLMKV_ERR_UNSUPPORTED,
                 "host tier: mimalloc %d manages %zu bytes at %p for a %llu-byte region at %p; "
                 "unsupported arena layout",
                 mi.version(), area_bytes, area, (unsigned long long)region_bytes_, region_);
        }
        arena_id_ = arena_id;
    }

    try {
        fault::maybe_fail_thread_start();
        heap_thread_ = std::thread([this, priority = spawn_priority()] {
            apply_thread_priority(priority);
            heap_thread_main();
        });
    } catch (const std::system_error &e) {
        release_region();
        fail(LLMKV_ERR_OUT_OF_MEMORY, "host tier: cannot start its heap thread: %s", e.what());
    } catch (...) {  // std::bad_alloc for the thread's state: the region must not leak either
        release_region();
        throw;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return heap_state_ != 0; });
    if (heap_state_ < 0) {
        lock.unlock();
        heap_thread_.join();
        release_region();
        fail(LLMKV_ERR_OUT_OF_MEMORY, "host tier: mimalloc could not create a heap in arena %d",
             arena_id_);
    }
}

HostTier::~HostTier() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
        if (!live_.empty()) {
            LLMKV_LOG_DEBUG_F("host tier: destroyed with %zu blocks (%llu bytes) still allocated",
                              live_.size(), (unsigned long long)bytes_used_);
        }
    }
    cv_.notify_all();
    if (heap_thread_.joinable()) heap_thread_.join();
    release_region();
}

namespace {

// Arenas of destroyed tiers, waiting for a tier of the same size and allocator. Their
// address ranges stay reserved (no memory) for the rest of the process.
struct RetiredArena {
    std::string allocator;
    void *start;
    uint64_t bytes;
    int arena_id;
};
std::mutex g_retired_mutex;
std::vector<RetiredArena> g_retired;

}  // namespace

bool HostTier::take_retired_arena() {
    if (!allocator_.reacquire || !allocator_.release_keep_address) return false;
    RetiredArena arena;
    {
        std::lock_guard<std::mutex> lock(g_retired_mutex);
        auto it = g_retired.begin();
        while (it != g_retired.end() &&
               (it->bytes != region_bytes_ || it->allocator != allocator_.name))
            ++it;
        if (it == g_retired.end()) return false;
        arena = std::move(*it);
        g_retired.erase(it);
    }
    bool locked = false;
    if (!allocator_.reacquire(arena.start, arena.bytes, locked)) {
        // Leave it retired; a fresh region serves this tier.
        LLMKV_LOG_DEBUG_F("host tier: could not reacquire retired arena %d at %p", arena.arena_id,
                          arena.start);
        std::lock_guard<std::mutex> lock(g_retired_mutex);
        try {
            g_retired.push_back(std::move(arena));
        } catch (const std::bad_alloc &) {
            // Forgotten: only its address range (no memory) and its arena slot are lost.
        }
        return false;
    }
    region_ = arena.start;
    locked_ = locked;
    arena_id_ = arena.arena_id;
    reused_arena_ = true;
    return true;
}

void HostTier::release_region() noexcept {
    if (region_ == nullptr) return;
    // A registered arena of a recycling allocator is kept for a later tier (see
    // HostAllocator::reacquire); everything else goes back to the allocator.
    if (arena_id_ != 0 && allocator_.release_keep_address && allocator_.reacquire) {
        try {
            std::lock_guard<std::mutex> lock(g_retired_mutex);
            g_retired.push_back(RetiredArena{allocator_.name, region_, region_bytes_, arena_id_});
            allocator_.release_keep_address(region_, region_bytes_);
            region_ = nullptr;
            return;
        } catch (const std::bad_alloc &) {
            // Could not record it: free it outright below (the arena slot is lost).
        }
    }
    allocator_.free(region_, region_bytes_);
    region_ = nullptr;
}

void HostTier::heap_thread_main() {
    const Mimalloc &mi = mimalloc();
    void *heap = mi.heap_new_in_arena(arena_id_);
    std::unique_lock<std::mutex> lock(mutex_);
    heap_state_ = heap != nullptr ? 1 : -1;
    cv_.notify_all();
    if (heap == nullptr) return;
    for (;;) {
        cv_.wait(lock, [this] { return stop_ || (request_ != nullptr && !request_->done); });
        if (stop_) break;
        Request &req = *request_;
        lock.unlock();
        // mimalloc calls run without our mutex: frees (mi_free from other threads) and
        // bookkeeping queries proceed meanwhile.
        bool ok = true;
        for (size_t i = 0; i < req.count; ++i) {
            void *p = fault::should_fail(fault::Site::kHostBlock)
                          ? nullptr
                          : mi.heap_malloc_aligned(heap, req.bytes, kBlockAlignment);
            if (p == nullptr) {
                ok = false;
                break;
            }
            req.blocks.push_back(p);  // capacity reserved by the caller: cannot throw
        }
        if (!ok) {
            for (void *p : req.blocks) mi.free(p);
            req.blocks.clear();
        }
        lock.lock();
        req.done = true;
        cv_.notify_all();
    }
    // Shutting down: free what the caller left allocated, return empty pages and
    // segments to the arena, then destroy the heap. All on the heap's own thread, before
    // it exits (thread exit would otherwise delete the heap behind our back). Emptying
    // the heap first means nothing of the region can be left for mimalloc to abandon or
    // reclaim later, whichever of destroy's variants (free pages / move them to the
    // backing heap) this mimalloc version implements.
    std::vector<void *> leftovers;
    try {
        leftovers.reserve(live_.size());
        for (const auto &entry : live_) leftovers.push_back(const_cast<void *>(entry.first));
    } catch (const std::bad_alloc &) {
        leftovers.clear();  // heap_destroy below still releases them
    }
    live_.clear();
    bytes_used_ = 0;
    lock.unlock();
    for (void *p : leftovers) mi.free(p);
    mi.heap_collect(heap, /*force=*/true);
    mi.heap_destroy(heap);
}

void *HostTier::allocate_block(size_t bytes) {
    std::vector<void *> out;
    out.reserve(1);
    if (!allocate_blocks(bytes, 1, out)) return nullptr;
    return out[0];
}

bool HostTier::allocate_blocks(size_t bytes, size_t count, std::vector<void *> &out) {
    if (bytes == 0) fail(LLMKV_ERR_INVALID_ARGUMENT, "host tier: block size is 0 bytes");
    if (count == 0) return true;
    // Cheap early answer for requests that cannot fit at all (also bounds the reserve).
    if (bytes > region_bytes_ || count > region_bytes_ / bytes) return false;

    Request req;
    req.bytes = bytes;
    req.count = count;
    req.blocks.reserve(count);
    out.reserve(out.size() + count);  // so appending below cannot throw

    std::lock_guard<std::mutex> call(call_mutex_);
    std::unique_lock<std::mutex> lock(mutex_);
    request_ = &req;
    cv_.notify_all();
    cv_.wait(lock, [&req] { return req.done; });
    request_ = nullptr;
    if (req.blocks.empty()) return false;

    const Mimalloc &mi = mimalloc();
    size_t inserted = 0;
    try {
        for (void *p : req.blocks) {
            const size_t usable = mi.usable_size(p);
            live_.emplace(p, usable);
            bytes_used_ += usable;
            ++inserted;
        }
    } catch (const std::bad_alloc &) {
        // Undo: the tier must look untouched after a failed allocation.
        for (size_t i = 0; i < inserted; ++i) {
            auto it = live_.find(req.blocks[i]);
            bytes_used_ -= it->second;
            live_.erase(it);
        }
        lock.unlock();
        for (void *p : req.blocks) mi.free(p);
        fail(LLMKV_ERR_OUT_OF_MEMORY, "host tier: out of memory for block bookkeeping");
    }
    out.insert(out.end(), req.blocks.begin(), req.blocks.end());
    return true;
}

void HostTier::free_block(void *block) {
    if (block == nullptr) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = live_.find(block);
        if (it == live_.end()) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "host tier: %p is not a live block of this tier (%s)",
                 block,
                 contains(block) ? "already freed or interior pointer" : "outside the region");
        }
        bytes_used_ -= it->second;
        live_.erase(it);
    }
    // mi_free is safe from any thread; the heap thread reclaims the space on its next
    // allocation (mimalloc's delayed cross-thread free).
    mimalloc().free(block);
}

bool HostTier::contains(const void *p) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t begin = reinterpret_cast<uintptr_t>(region_);
    return region_ != nullptr && a >= begin && a - begin < region_bytes_;
}

uint64_t HostTier::bytes_used() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_used_;
}

size_t HostTier::blocks_used() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size();
}

}  // namespace llmkv
