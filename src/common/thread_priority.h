// Priority of llmkv's own threads (engine_params.thread_priority): an embedded runtime shares
// the machine with its host, whose threads (a game's frame loop) should win the cores.
//
// Each thread llmkv starts (compute workers, the engine's worker thread, the copy and heap
// threads of the host tier) calls apply_thread_priority() first with the value in effect
// when it was created: the engine sets it with a SpawnPriority scope around its set-up, so
// objects that start threads deep inside it need no extra parameter.
#pragma once

namespace llmkv {

// Lowers the calling thread's priority by `nice_levels` (0 = unchanged; 1..19). Linux:
// setpriority on the thread id (the nice value is per thread there), clamped at 19. Best
// effort: a failure is logged, never thrown (the thread still works).
void apply_thread_priority(int nice_levels) noexcept;

// The priority threads created now on this thread should apply (0 outside any scope).
int spawn_priority() noexcept;

class SpawnPriority {
public:
    explicit SpawnPriority(int nice_levels) noexcept;
    ~SpawnPriority();
    SpawnPriority(const SpawnPriority &) = delete;
    SpawnPriority &operator=(const SpawnPriority &) = delete;

private:
    int saved_;
};

}  // namespace llmkv
