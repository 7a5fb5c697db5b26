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
    // n_threads counts the caller: n_threads = 1 runs everything inline.
    explicit ThreadPool(unsigned n_threads);
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

private:
    void worker_loop(unsigned index);
    void stop_workers() noexcept;

    unsigned n_threads_;
    std::vector<std::thread> workers_;
    const std::function<void(unsigned, unsigned)> *job_ = nullptr;
    std::atomic<uint32_t> generation_{0};
    std::atomic<uint32_t> pending_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace llmkv
