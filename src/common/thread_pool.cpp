// ThreadPool: generation counter + pending counter; workers spin (for a time), then futex-wait
// (os::wait_while_equal: a futex on Linux, WaitOnAddress on Windows).
#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <system_error>

#include "common/error.h"
#include "common/fault.h"
#include "common/thread_priority.h"
#include "platform/os.h"

// No PAUSE instruction in the spin loops: under virtualisation a run of PAUSEs can trap
// the vCPU (pause-loop exiting) and cost milliseconds. The spin is bounded in time (see
// spin_ns) and then the thread sleeps, so an oversubscribed machine is not starved.
#define LLMKV_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)

namespace llmkv {

namespace {
// Polling before sleeping: the gaps between the ops of one forward pass (RoPE, residual
// adds, sampling on the caller) are often longer than 20 us, and waking a sleeping thread
// costs tens of microseconds on a virtual machine (futex wake + reschedule): with a 20 us
// spin, two threads were slower than one (prefill 3.8k vs 5.3k tok/s on SmolLM2); with
// 200 us, 8.6k. The price is up to that much CPU time polled after the last op of a step,
// which an embedding host can refuse (engine_params.spin_us = 0).
constexpr long kDefaultSpinUs = 200;

// Polls until ready() or budget_ns has passed; true when ready.
template <typename Ready>
bool spin_until(long budget_ns, Ready &&ready) {
    if (budget_ns == 0) return ready();
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        for (int i = 0; i < 256; ++i) {
            if (ready()) return true;
            LLMKV_CPU_RELAX();
        }
        if (std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                 t0)
                .count() > budget_ns) {
            return ready();
        }
    }
}
}  // namespace

unsigned ThreadPool::hardware_threads() {
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : n;
}

long ThreadPool::default_spin_us() {
    static const long us = [] {
        const char *env = std::getenv("LLMKV_SPIN_US");
        long v = env && *env ? std::strtol(env, nullptr, 10) : kDefaultSpinUs;
        return std::clamp(v, 0L, kMaxSpinUs);
    }();
    return us;
}

ThreadPool::ThreadPool(unsigned n_threads, long spin_us, int priority)
    : n_threads_(std::max(1u, n_threads)),
      spin_ns_((spin_us < 0 ? default_spin_us() : std::min(spin_us, kMaxSpinUs)) * 1000),
      priority_(priority) {
    // A failure part-way (no thread or no memory for one) stops the workers already
    // started: destroying a joinable std::thread would terminate the process.
    try {
        workers_.reserve(n_threads_ - 1);
        for (unsigned i = 1; i < n_threads_; ++i) {
            fault::maybe_fail_thread_start();
            workers_.emplace_back([this, i] { worker_loop(i); });
        }
    } catch (const std::system_error &e) {
        stop_workers();
        fail(LLMKV_ERR_OUT_OF_MEMORY, "thread pool: cannot start worker %zu of %u: %s",
             workers_.size() + 1, n_threads_ - 1, e.what());
    } catch (...) {
        stop_workers();
        throw;
    }
}

ThreadPool::~ThreadPool() {
    stop_workers();
}

void ThreadPool::stop_workers() noexcept {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    os::wake_all(generation_);
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
    os::wake_all(generation_);
    fn(0, n_threads_);
    // Wait for the other workers: spin first, then sleep on the counter.
    if (!spin_until(spin_ns_, [this] { return pending_.load(std::memory_order_acquire) == 0; })) {
        for (;;) {
            uint32_t left = pending_.load(std::memory_order_acquire);
            if (left == 0) break;
            os::wait_while_equal(pending_, left);
        }
    }
    job_ = nullptr;
}

void ThreadPool::worker_loop(unsigned index) {
    apply_thread_priority(priority_);
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = seen;
        if (!spin_until(spin_ns_, [&] {
                return (gen = generation_.load(std::memory_order_acquire)) != seen;
            })) {
            for (;;) {
                gen = generation_.load(std::memory_order_acquire);
                if (gen != seen) break;
                os::wait_while_equal(generation_, seen);
            }
        }
        seen = gen;
        if (stop_.load(std::memory_order_acquire)) return;
        (*job_)(index, n_threads_);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) os::wake_one(pending_);
    }
}

}  // namespace llmkv
