#include "common/thread_priority.h"

#include <string>

#include "common/log.h"
#include "platform/os.h"

namespace llmkv {

namespace {
thread_local int t_spawn_priority = 0;
}

void apply_thread_priority(int nice_levels) noexcept {
    if (nice_levels <= 0) return;
    try {
        std::string error;
        if (!os::lower_thread_priority(nice_levels, error))
            LLMKV_LOG_WARN_F("thread priority: %s", error.c_str());
    } catch (...) {  // logging could not allocate: the thread runs at its old priority
    }
}

int spawn_priority() noexcept {
    return t_spawn_priority;
}

SpawnPriority::SpawnPriority(int nice_levels) noexcept : saved_(t_spawn_priority) {
    t_spawn_priority = nice_levels;
}

SpawnPriority::~SpawnPriority() {
    t_spawn_priority = saved_;
}

}  // namespace llmkv
