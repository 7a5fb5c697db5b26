// Fault injection counters (see common/fault.h). Lock-free and allocation-free: it is
// called from inside operator new.
#include "common/fault.h"

#include <system_error>

#ifdef LLMKV_FAULT_INJECTION
#include <atomic>
#endif

namespace llmkv::fault {

const char *site_name(Site s) {
    switch (s) {
        case Site::kOperatorNew:
            return "operator new";
        case Site::kModelMmap:
            return "model mmap";
        case Site::kKvPool:
            return "KV pool mmap";
        case Site::kHostRegion:
            return "host-tier region";
        case Site::kHostBlock:
            return "host-tier block";
        case Site::kThread:
            return "thread creation";
        case Site::kSnapshotCreate:
            return "snapshot temp-file create";
        case Site::kSnapshotWrite:
            return "snapshot write (ENOSPC)";
        case Site::kSnapshotShortWrite:
            return "snapshot short write";
        case Site::kSnapshotZeroWrite:
            return "snapshot zero-byte write";
        case Site::kSnapshotFsync:
            return "snapshot fsync";
        case Site::kSnapshotClose:
            return "snapshot close";
        case Site::kSnapshotRename:
            return "snapshot rename";
        case Site::kCount:
            break;
    }
    return "unknown";
}

#ifdef LLMKV_FAULT_INJECTION

void maybe_fail_thread_start() {
    if (should_fail(Site::kThread)) {
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                "injected thread-creation failure");
    }
}

namespace {

constexpr uint32_t kSites = uint32_t(Site::kCount);

struct State {
    std::atomic<bool> armed{false};
    std::atomic<int64_t> countdown{0};  // allocation sites: fails when it reaches 0
    std::atomic<int64_t> site_countdown[kSites]{};
    std::atomic<bool> site_sticky[kSites]{};
    std::atomic<uint64_t> hits[kSites]{};
    std::atomic<uint64_t> failures[kSites]{};
};

State g_state;
thread_local bool t_counting = false;  // operator new counts only on the arming thread
thread_local bool t_paused = false;

bool take(std::atomic<int64_t> &countdown) {
    int64_t v = countdown.load(std::memory_order_relaxed);
    while (v > 0) {
        if (countdown.compare_exchange_weak(v, v - 1, std::memory_order_acq_rel)) return v == 1;
    }
    return false;
}

}  // namespace

bool should_fail(Site site) noexcept {
    State &s = g_state;
    if (!s.armed.load(std::memory_order_acquire) || t_paused) return false;
    const uint32_t i = uint32_t(site);
    if (i >= kSites) return false;
    if (site == Site::kOperatorNew && !t_counting) return false;
    s.hits[i].fetch_add(1, std::memory_order_relaxed);
    bool fail = false;
    if (i < kAllocationSites) {
        fail = take(s.countdown);
    } else {
        // One site at a time, from the calling thread (the snapshot writer).
        const int64_t v = s.site_countdown[i].load(std::memory_order_relaxed);
        if (v == 1) {
            fail = true;
            if (!s.site_sticky[i].load(std::memory_order_relaxed)) s.site_countdown[i].store(0);
        } else if (v > 1) {
            s.site_countdown[i].store(v - 1);
        }
    }
    if (fail) s.failures[i].fetch_add(1, std::memory_order_relaxed);
    return fail;
}

void arm(uint64_t nth) noexcept {
    g_state.countdown.store(int64_t(nth), std::memory_order_relaxed);
    t_counting = true;
    g_state.armed.store(true, std::memory_order_release);
}

void arm_site(Site site, uint64_t nth, bool sticky) noexcept {
    const uint32_t i = uint32_t(site);
    if (i >= kSites) return;
    g_state.site_countdown[i].store(int64_t(nth), std::memory_order_relaxed);
    g_state.site_sticky[i].store(sticky, std::memory_order_relaxed);
    if (i == uint32_t(Site::kOperatorNew)) t_counting = true;
    g_state.armed.store(true, std::memory_order_release);
}

void disarm() noexcept {
    g_state.armed.store(false, std::memory_order_release);
    g_state.countdown.store(0, std::memory_order_relaxed);
    for (uint32_t i = 0; i < kSites; ++i) {
        g_state.site_countdown[i].store(0, std::memory_order_relaxed);
        g_state.site_sticky[i].store(false, std::memory_order_relaxed);
    }
    t_counting = false;
}

void pause(bool paused) noexcept {
    t_paused = paused;
}

uint64_t hits(Site site) noexcept {
    const uint32_t i = uint32_t(site);
    return i < kSites ? g_state.hits[i].load() : 0;
}

uint64_t failures() noexcept {
    uint64_t n = 0;
    for (uint32_t i = 0; i < kSites; ++i) n += g_state.failures[i].load();
    return n;
}

uint64_t failures(Site site) noexcept {
    const uint32_t i = uint32_t(site);
    return i < kSites ? g_state.failures[i].load() : 0;
}

void reset_counts() noexcept {
    for (uint32_t i = 0; i < kSites; ++i) {
        g_state.hits[i].store(0);
        g_state.failures[i].store(0);
    }
}

#endif  // LLMKV_FAULT_INJECTION

}  // namespace llmkv::fault
