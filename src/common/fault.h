// Fault injection for tests: a build with -DLLMKV_FAULT_INJECTION=ON makes chosen resource
// acquisitions fail on demand, so tests can prove every failure path returns a clean
// status and leaks nothing. In every other build should_fail() is a constant false and
// each site compiles to nothing.
//
// Two ways to arm it (both process-wide; a test arms, runs one call, disarms):
//  - arm(n): the n-th hit (1-based) of any *allocation* site fails, then the countdown is
//    spent. Allocation sites: operator new (replaced by the test executable, which calls
//    should_fail(kOperatorNew) and throws std::bad_alloc), the model file's mmap, the KV
//    pools' mmap, the host tier's region, the host tier's blocks (mimalloc) and thread
//    creation. operator new is counted only on the thread that called arm() (the library's
//    own threads are built not to allocate while they run); the other sites count on any
//    thread (the host tier's heap thread allocates blocks on behalf of the caller, who waits).
//  - arm_site(site, n, sticky): the n-th hit of that one site fails (and with sticky, every
//    later hit too). For the snapshot writer's I/O sites.
#pragma once

#include <cstdint>

namespace llmkv::fault {

enum class Site : uint32_t {
    // Allocation sites (counted by arm(n)).
    kOperatorNew = 0,  // global operator new (the test executable replaces it)
    kModelMmap,        // mmap of the model file            -> LLMKV_ERR_IO
    kKvPool,           // mmap of a KV block pool            -> LLMKV_ERR_OUT_OF_MEMORY
    kHostRegion,       // the host tier's region allocation -> LLMKV_ERR_OUT_OF_MEMORY
    kHostBlock,        // a host-tier block (mimalloc)        -> "tier full" (see host_tier.h)
    kThread,           // std::thread creation                -> LLMKV_ERR_OUT_OF_MEMORY
    // Snapshot writer I/O sites (armed one at a time with arm_site).
    kSnapshotCreate,      // open(O_CREAT) of the temp file fails (EACCES)
    kSnapshotWrite,       // write() fails with ENOSPC
    kSnapshotShortWrite,  // write() transfers only half of what was asked (a partial write)
    kSnapshotZeroWrite,   // write() returns 0 (no progress)
    kSnapshotFsync,       // fsync() fails with EIO
    kSnapshotClose,       // close() reports EIO
    kSnapshotRename,      // rename() fails with ENOSPC
    kCount
};

inline constexpr uint32_t kAllocationSites = 6;  // sites [0, kAllocationSites) count for arm(n)

const char *site_name(Site s);

#ifdef LLMKV_FAULT_INJECTION
inline constexpr bool kEnabled = true;
// Throws what std::thread throws when the system cannot start a thread, when the
// kThread site is told to fail. Call it right before creating a thread.
void maybe_fail_thread_start();
// Whether this hit of `site` must fail. Never allocates, never throws.
bool should_fail(Site site) noexcept;
void arm(uint64_t nth) noexcept;
void arm_site(Site site, uint64_t nth, bool sticky = false) noexcept;
void disarm() noexcept;
// While paused, hits are neither counted nor failed (the test's own bookkeeping).
void pause(bool paused) noexcept;
// Hits of `site` while armed, and failures injected, since the last reset_counts().
uint64_t hits(Site site) noexcept;
uint64_t failures() noexcept;
uint64_t failures(Site site) noexcept;
void reset_counts() noexcept;
#else
inline constexpr bool kEnabled = false;
constexpr bool should_fail(Site) noexcept {
    return false;
}
inline void maybe_fail_thread_start() {}
#endif

}  // namespace llmkv::fault
