// The worker thread as a class of its own (engine/worker.h), driven by hooks instead of an
// engine: what it steps, what it hands over, how a failed step is reported and what a stop
// gives back.
#include "engine/worker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/error.h"

namespace llmkv {
namespace {

llmkv_event event(int32_t token) {
    llmkv_event e{};
    e.kind = LLMKV_EVENT_TOKEN;
    e.token = token;
    return e;
}

// A stand-in engine: `work` steps to do, each queuing one event with its number; the step
// numbered `fail_at` throws `fail_status` instead.
struct FakeEngine {
    FairMutex lock;
    std::mutex io;
    std::deque<llmkv_event> events;
    int work = 0, steps = 0, fail_at = -1;
    llmkv_status fail_status = LLMKV_OK;
    Worker worker{lock, io, events,
                  Worker::Hooks{[this] { return work > 0; },
                                [this] {
                                    --work;
                                    const int n = ++steps;
                                    if (n == fail_at) fail(fail_status, "step %d failed", n);
                                    events.push_back(event(n));
                                },
                                [this] {
                                    std::lock_guard<std::mutex> l(io);
                                    worker.accept_locked(events);
                                }}};
    void add_work(int n) {
        {
            std::lock_guard<FairMutex> l(lock);
            work += n;
        }
        worker.notify();
    }
};

// Polls until n events came (or 5 s passed).
std::vector<int32_t> poll_tokens(Worker &w, size_t n) {
    std::vector<int32_t> got;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got.size() < n && std::chrono::steady_clock::now() < until) {
        llmkv_event ev[8];
        const size_t k = w.poll(ev, 8, 10000);
        for (size_t i = 0; i < k; ++i) got.push_back(ev[i].token);
    }
    return got;
}

TEST(Worker, StepsWhileThereIsWorkAndHandsTheEventsOverInOrder) {
    FakeEngine e;
    e.events.push_back(event(0));  // queued before the start: handed over by it
    e.worker.start(0);
    EXPECT_TRUE(e.worker.running());
    e.add_work(3);
    EXPECT_EQ(poll_tokens(e.worker, 4), (std::vector<int32_t>{0, 1, 2, 3}));
    e.add_work(2);
    EXPECT_EQ(poll_tokens(e.worker, 2), (std::vector<int32_t>{4, 5}));
    e.worker.stop();
    EXPECT_FALSE(e.worker.running());
    EXPECT_EQ(e.steps, 5);
}

TEST(Worker, StartingTwiceIsAStateErrorAndAStopGivesTheUnpolledEventsBack) {
    FakeEngine e;
    e.worker.start(0);
    try {
        e.worker.start(0);
        FAIL() << "started twice";
    } catch (const Error &err) {
        EXPECT_EQ(err.status(), LLMKV_ERR_STATE);
    }
    e.add_work(3);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (e.worker.pending() < 3 && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    ASSERT_EQ(e.worker.pending(), 3u);
    {
        std::lock_guard<FairMutex> l(e.lock);
        e.events.push_back(event(99));  // newer than the worker's: stays behind them
    }
    e.worker.stop();
    ASSERT_EQ(e.events.size(), 4u);
    EXPECT_EQ(e.events[0].token, 1);
    EXPECT_EQ(e.events[2].token, 3);
    EXPECT_EQ(e.events[3].token, 99);
    // Not running: poll takes the engine's queue.
    llmkv_event ev[2];
    ASSERT_EQ(e.worker.poll(ev, 2, 0), 2u);
    EXPECT_EQ(ev[1].token, 2);
    EXPECT_EQ(e.worker.pending(), 2u);
}

TEST(Worker, AFailedStepIsThrownOnceAfterTheEventsBeforeItAndTheWorkerGoesOn) {
    FakeEngine e;
    e.fail_at = 2;
    e.fail_status = LLMKV_ERR_KV_CAPACITY;
    e.worker.start(0);
    e.add_work(1);
    EXPECT_EQ(poll_tokens(e.worker, 1), (std::vector<int32_t>{1}));
    e.add_work(1);
    llmkv_event ev[4];
    bool thrown = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!thrown && std::chrono::steady_clock::now() < until) {
        try {
            EXPECT_EQ(e.worker.poll(ev, 4, 10000), 0u);
        } catch (const Error &err) {
            thrown = true;
            EXPECT_EQ(err.status(), LLMKV_ERR_KV_CAPACITY);
            EXPECT_NE(std::string(err.what()).find("step 2 failed"), std::string::npos);
        }
    }
    ASSERT_TRUE(thrown);
    EXPECT_EQ(e.worker.poll(ev, 4, 0), 0u);  // once
    EXPECT_TRUE(e.worker.running());         // not fatal
    e.add_work(1);
    EXPECT_EQ(poll_tokens(e.worker, 1), (std::vector<int32_t>{3}));
    e.worker.stop();
}

TEST(Worker, AFatalStepStopsTheWorkerWhichReportsItOnceAndCanBeStartedAgain) {
    FakeEngine e;
    e.fail_at = 1;
    e.fail_status = LLMKV_ERR_BACKEND;
    e.worker.start(0);
    e.add_work(2);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (e.worker.running() && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    ASSERT_FALSE(e.worker.running());
    llmkv_event ev[4];
    try {
        e.worker.poll(ev, 4, 0);
        FAIL() << "the fatal step was not reported";
    } catch (const Error &err) {
        EXPECT_EQ(err.status(), LLMKV_ERR_BACKEND);
    }
    EXPECT_EQ(e.worker.poll(ev, 4, 0), 0u);
    e.worker.start(0);  // joins the stopped thread, clears the error
    EXPECT_EQ(poll_tokens(e.worker, 1), (std::vector<int32_t>{2}));
    e.worker.stop();
}

}  // namespace
}  // namespace llmkv
