// A persistent worker pool for the CPU backend. The calling thread is worker 0; the
// others spin briefly and then sleep on an atomic wait between jobs, so the per-op
// dispatch cost of a decode step (hundreds of ops per token) stays in microseconds.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace llmkv {

class ThreadPool {
public:
    // The most a spin may be set to (100 ms).
    static constexpr long kMaxSpinUs = 100000;
    // n_threads counts the caller: n_threads = 1 runs everything inline. spin_us: how long
    // an idle worker (and the caller waiting for workers) polls before sleeping; < 0 =
    // default_spin_us(). priority: nice levels the workers run below their creator (0..19,
    // see common/thread_priority.h).
    explicit ThreadPool(unsigned n_threads, long spin_us = -1, int priority = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    unsigned size() const { return n_threads_; }

    // Runs fn(thread_index, n_threads) once on every worker (the caller is index 0) and
    // returns when all have finished. Not reentrant: fn must not call run().
    void run(const std::function<void(unsigned, unsigned)> &fn);

    // Splits [0, n) into contiguous ranges, one per worker (rounded to multiples of
    // grain), and calls fn(begin, end) for each non-empty range. Which thread computes
    // which range never changes the result as long as fn writes disjoint outputs.
    template <typename F>
    void parallel_for(size_t n, size_t grain, F &&fn) {
        if (n == 0) return;
        if (grain == 0) grain = 1;
        size_t chunks = (n + grain - 1) / grain;
        if (n_threads_ == 1 || chunks == 1) {
            fn(size_t{0}, n);
            return;
        }
        run([&](unsigned t, unsigned nt) {
            size_t per = (chunks + nt - 1) / nt;
            size_t begin = std::min(n, size_t(t) * per * grain);
            size_t end = std::min(n, (size_t(t) + 1) * per * grain);
            if (begin < end) fn(begin, end);
        });
    }

    // Number of hardware threads (at least 1).
    static unsigned hardware_threads();
    // The LLMKV_SPIN_US environment variable (clamped to 0..kMaxSpinUs), else 200.
    static long default_spin_us();
    long spin_us() const { return spin_ns_ / 1000; }

private:
    void worker_loop(unsigned index);
    void stop_workers() noexcept;

    unsigned n_threads_;
    long spin_ns_;
    int priority_;
    std::vector<std::thread> workers_;
    const std::function<void(unsigned, unsigned)> *job_ = nullptr;
    std::atomic<uint32_t> generation_{0};
    std::atomic<uint32_t> pending_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace llmkv
