// ThreadPool with explicit spin times: the spin-then-sleep hand-off between the caller and
// the workers, whatever LLMKV_SPIN_US says (CI's test runs set it to 0, see scripts/test.sh,
// so the polling path is covered here, and under ThreadSanitizer in CI's TSan stage).
#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace llmkv {
namespace {

// Every job runs once on every worker, with its index and the pool size, and run() returns
// only after all of them finished (the counters are read without waiting).
void expect_every_job_runs_once_per_worker(unsigned threads, long spin_us) {
    ThreadPool pool(threads, spin_us);
    ASSERT_EQ(pool.size(), threads);
    EXPECT_EQ(pool.spin_us(), spin_us);
    std::vector<uint64_t> runs(threads, 0);  // each slot written by one worker only
    std::vector<uint32_t> last_job(threads, 0);
    constexpr uint32_t kJobs = 3000;
    for (uint32_t job = 1; job <= kJobs; ++job) {
        pool.run([&](unsigned t, unsigned nt) {
            EXPECT_EQ(nt, threads);
            ASSERT_LT(t, threads);
            EXPECT_EQ(last_job[t], job - 1) << "worker " << t << " skipped or repeated a job";
            last_job[t] = job;
            ++runs[t];
        });
        // Every 500 jobs, let the workers outlast their spin and fall asleep.
        if (job % 500 == 0) std::this_thread::sleep_for(std::chrono::microseconds(spin_us + 2000));
    }
    for (unsigned t = 0; t < threads; ++t) EXPECT_EQ(runs[t], kJobs) << "worker " << t;
}

TEST(ThreadPool, EveryJobRunsOncePerWorkerWithoutSpinning) {
    expect_every_job_runs_once_per_worker(3, 0);
}

TEST(ThreadPool, EveryJobRunsOncePerWorkerWithTheDefaultSpin) {
    expect_every_job_runs_once_per_worker(3, 200);
}

TEST(ThreadPool, EveryJobRunsOncePerWorkerWithALongSpin) {
    expect_every_job_runs_once_per_worker(2, 5000);
}

TEST(ThreadPool, ParallelForCoversTheRangeOnceInDisjointChunks) {
    for (long spin : {0L, 200L}) {
        ThreadPool pool(4, spin);
        for (size_t n : {size_t(1), size_t(7), size_t(64), size_t(1001)}) {
            for (size_t grain : {size_t(0), size_t(1), size_t(16)}) {
                std::vector<std::atomic<uint32_t>> hits(n);
                pool.parallel_for(n, grain, [&](size_t b, size_t e) {
                    ASSERT_LT(b, e);
                    ASSERT_LE(e, n);
                    for (size_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
                });
                for (size_t i = 0; i < n; ++i)
                    ASSERT_EQ(hits[i].load(), 1u) << "n " << n << " grain " << grain << " i " << i;
            }
        }
    }
}

TEST(ThreadPool, SpinIsClampedAndNegativeMeansTheDefault) {
    ThreadPool big(2, ThreadPool::kMaxSpinUs * 10);
    EXPECT_EQ(big.spin_us(), ThreadPool::kMaxSpinUs);
    ThreadPool dflt(2, -1);
    EXPECT_EQ(dflt.spin_us(), ThreadPool::default_spin_us());
    ThreadPool one(1, 200);  // the caller only: run() calls inline
    unsigned calls = 0;
    one.run([&](unsigned t, unsigned nt) {
        EXPECT_EQ(t, 0u);
        EXPECT_EQ(nt, 1u);
        ++calls;
    });
    EXPECT_EQ(calls, 1u);
}

}  // namespace
}  // namespace llmkv
