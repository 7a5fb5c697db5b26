// ThreadPool: generation counter + pending counter; workers spin, then futex-wait.
#include "common/thread_pool.h"

#include <algorithm>

// No PAUSE instruction in the spin loops: under virtualisation a run of PAUSEs can trap
// the vCPU (pause-loop exiting) and cost milliseconds. The spin is short (tens of
// microseconds) and then the thread sleeps, so an oversubscribed machine is not starved.
#define LLMKV_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)

namespace llmkv {

namespace {
constexpr int kSpinIterations = 20000;  // about 20-50 us of polling
}

unsigned ThreadPool::hardware_threads() {
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : n;
}

ThreadPool::ThreadPool(unsigned n_threads) : n_threads_(std::max(1u, n_threads)) {
    workers_.reserve(n_threads_ - 1);
    for (unsigned i = 1; i < n_threads_; ++i) {
        workers_.emplace_back([this, i] { worker_loop(i); });
    }
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    for (auto &w : workers_) w.join();
}

void ThreadPool::run(const std::function<void(unsigned, unsigned)> &fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    fn(0, n_threads_);
    // Wait for the other workers: spin first, then sleep on the counter.
    int spins = 0;
    for (;;) {
        uint32_t left = pending_.load(std::memory_order_acquire);
        if (left == 0) break;
        if (++spins < kSpinIterations) {
            LLMKV_CPU_RELAX();
        } else {
            pending_.wait(left, std::memory_order_acquire);
        }
    }
    job_ = nullptr;
}

void ThreadPool::worker_loop(unsigned index) {
    uint32_t seen = 0;
    for (;;) {
        int spins = 0;
        uint32_t gen;
        for (;;) {
            gen = generation_.load(std::memory_order_acquire);
            if (gen != seen) break;
            if (++spins < kSpinIterations) {
                LLMKV_CPU_RELAX();
            } else {
                generation_.wait(seen, std::memory_order_acquire);
            }
        }
        seen = gen;
        if (stop_.load(std::memory_order_acquire)) return;
        (*job_)(index, n_threads_);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
}

}  // namespace llmkv
