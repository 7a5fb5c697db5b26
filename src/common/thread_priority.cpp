#include "common/thread_priority.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "common/log.h"

namespace llmkv {

namespace {
thread_local int t_spawn_priority = 0;
}

void apply_thread_priority(int nice_levels) noexcept {
    if (nice_levels <= 0) return;
#if defined(__linux__)
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    errno = 0;
    const int current = getpriority(PRIO_PROCESS, tid);
    try {
        if (current == -1 && errno != 0) {
            LLMKV_LOG_WARN_F("thread priority: getpriority failed: %s", std::strerror(errno));
            return;
        }
        const int target = std::min(19, current + nice_levels);
        if (setpriority(PRIO_PROCESS, tid, target) != 0) {
            LLMKV_LOG_WARN_F("thread priority: setpriority(%d) failed: %s", target, std::strerror(errno));
        }
    } catch (...) {  // logging could not allocate: the thread runs at its old priority
    }
#else
    (void)nice_levels;  // other systems: not implemented (documented in llmkv.h)
#endif
}

int spawn_priority() noexcept { return t_spawn_priority; }

SpawnPriority::SpawnPriority(int nice_levels) noexcept : saved_(t_spawn_priority) { t_spawn_priority = nice_levels; }

SpawnPriority::~SpawnPriority() { t_spawn_priority = saved_; }

}  // namespace llmkv
