// The worker thread of an engine (llmkv_worker_*: game-loop mode, docs/EMBEDDING.md). While
// it runs, it steps the engine whenever there is work and moves the events of each step to a
// queue of its own, which the host polls without the engine lock, so a frame thread that only
// submits, polls and reads text never waits for a forward pass.
//
// Locks: the engine lock (FIFO, held by every step), the io lock (held only for copies: this
// queue and its error; the engine uses the same lock for its submission queue and the
// sessions' outboxes), and the control lock (start / stop, taken before the others).
// Lock order: control, engine, io, wake.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/fair_mutex.h"
#include "llmkv.h"

namespace llmkv {

class Worker {
public:
    // What the worker does to the engine it steps; each is called with the engine lock held.
    struct Hooks {
        std::function<bool()> has_work;
        std::function<void()> step;  // throws Error (or bad_alloc) when a step fails
        std::function<void()>
            hand_over;  // the engine's queued events (and their text) to accept_locked
    };
    // engine_events: the engine's own event queue (guarded by the engine lock), where events
    // go back when the worker stops and where they are taken while it does not run.
    Worker(FairMutex &engine_lock, std::mutex &io, std::deque<llmkv_event> &engine_events,
           Hooks hooks);
    ~Worker();
    Worker(const Worker &) = delete;
    Worker &operator=(const Worker &) = delete;

    bool running() const { return running_.load(std::memory_order_acquire); }
    // Without the engine lock held by the caller. start: LLMKV_ERR_STATE when already
    // running; the events queued before it are handed over at once. stop: what nobody polled
    // goes back to the engine's queue, ahead of anything newer.
    void start(int32_t thread_priority);
    void stop();
    // A call made work for the worker (nothing when it does not run).
    void notify();
    // While running: moves up to capacity of its events into out, waiting up to timeout_us
    // for a first one; a failed step is thrown once, after the events queued before it.
    // Not running: the engine's queued events (takes the engine lock).
    size_t poll(llmkv_event *out, size_t capacity, uint32_t timeout_us);
    size_t pending();

    // With the io lock held: moves `events` to the worker's queue (waking a waiting poll).
    void accept_locked(std::deque<llmkv_event> &events);
    // With the io lock held: drops the queued events pred(event) is true of.
    void forget_locked(const std::function<bool(const llmkv_event &)> &pred);

private:
    void main(int32_t thread_priority);
    // With the io lock held: the step error, thrown once (when no event is queued before it).
    void throw_error_locked();
    void wake_up();

    FairMutex &engine_lock_;
    std::mutex &io_;
    std::deque<llmkv_event> &engine_events_;
    Hooks hooks_;
    std::deque<llmkv_event> events_;     // guarded by io_
    std::condition_variable events_cv_;  // events queued (or the worker stopped); with io_
    llmkv_status error_ = LLMKV_OK;      // a failed step, reported once by poll; guarded by io_
    std::string error_message_;
    std::mutex control_;
    std::thread thread_;
    std::atomic<bool> running_{false};
    std::atomic<bool> stop_{false};
    std::mutex wake_mutex_;
    std::condition_variable wake_cv_;
    bool wake_ = false;
};

}  // namespace llmkv
