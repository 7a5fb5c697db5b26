// The worker thread of an engine (worker.h).
#include "engine/worker.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "common/error.h"
#include "common/fault.h"
#include "common/thread_priority.h"

namespace llmkv {

Worker::Worker(FairMutex &engine_lock, std::mutex &io, std::deque<llmkv_event> &engine_events,
               Hooks hooks)
    : engine_lock_(engine_lock), io_(io), engine_events_(engine_events), hooks_(std::move(hooks)) {}

Worker::~Worker() {
    // The owner stops the worker while the engine is whole; this is the safety net.
    stop_.store(true, std::memory_order_release);
    wake_up();
    if (thread_.joinable()) thread_.join();
}

void Worker::wake_up() {
    {
        std::lock_guard<std::mutex> l(wake_mutex_);
        wake_ = true;
    }
    wake_cv_.notify_all();
}

void Worker::notify() {
    if (running()) wake_up();
}

void Worker::accept_locked(std::deque<llmkv_event> &events) {
    const bool had = !events_.empty();
    while (!events.empty()) {
        events_.push_back(events.front());
        events.pop_front();
    }
    if (!had && !events_.empty()) events_cv_.notify_all();
}

void Worker::forget_locked(const std::function<bool(const llmkv_event &)> &pred) {
    events_.erase(std::remove_if(events_.begin(), events_.end(), pred), events_.end());
}

void Worker::start(int32_t thread_priority) {
    std::lock_guard<std::mutex> control(control_);
    std::lock_guard<FairMutex> lock(engine_lock_);
    if (running()) fail(LLMKV_ERR_STATE, "the worker thread is already running");
    if (thread_.joinable()) thread_.join();  // it stopped itself after a failed step
    stop_.store(false, std::memory_order_release);
    {
        std::lock_guard<std::mutex> io(io_);
        error_ = LLMKV_OK;
        error_message_.clear();
    }
    running_.store(true, std::memory_order_release);
    try {
        fault::maybe_fail_thread_start();
        thread_ = std::thread([this, thread_priority] { main(thread_priority); });
    } catch (const std::system_error &e) {
        running_.store(false, std::memory_order_release);
        fail(LLMKV_ERR_OUT_OF_MEMORY, "cannot start the worker thread: %s", e.what());
    }
    // Events queued before the start (llmkv_step's) are handed out by llmkv_worker_poll.
    hooks_.hand_over();
}

void Worker::stop() {
    std::lock_guard<std::mutex> control(control_);
    stop_.store(true, std::memory_order_release);
    wake_up();
    if (thread_.joinable()) thread_.join();
    running_.store(false, std::memory_order_release);
    events_cv_.notify_all();
    std::lock_guard<FairMutex> lock(engine_lock_);
    std::lock_guard<std::mutex> io(io_);
    engine_events_.insert(engine_events_.begin(), events_.begin(), events_.end());
    events_.clear();
}

void Worker::main(int32_t thread_priority) {
    apply_thread_priority(thread_priority);
    while (!stop_.load(std::memory_order_acquire)) {
        bool stepped = false, fatal = false;
        {
            std::lock_guard<FairMutex> lock(engine_lock_);
            if (stop_.load(std::memory_order_acquire)) break;
            if (hooks_.has_work()) {
                stepped = true;
                try {
                    hooks_.step();
                } catch (const Error &e) {
                    std::lock_guard<std::mutex> io(io_);
                    error_ = e.status();
                    error_message_ = e.what();
                    fatal = e.status() == LLMKV_ERR_BACKEND || e.status() == LLMKV_ERR_INTERNAL;
                } catch (const std::bad_alloc &) {
                    std::lock_guard<std::mutex> io(io_);
                    error_ = LLMKV_ERR_OUT_OF_MEMORY;
                    error_message_ = "out of memory";
                } catch (const std::exception &e) {
                    std::lock_guard<std::mutex> io(io_);
                    error_ = LLMKV_ERR_INTERNAL;
                    error_message_ = std::string("internal error: ") + e.what();
                    fatal = true;
                }
            }
            try {
                hooks_.hand_over();
            } catch (
                ...) {  // no memory for the queue: the events stay with the engine for the next try
            }
            bool failed;
            {
                std::lock_guard<std::mutex> io(io_);
                failed = error_ != LLMKV_OK;
            }
            if (failed) events_cv_.notify_all();
        }
        if (fatal) break;
        if (!stepped) {
            std::unique_lock<std::mutex> l(wake_mutex_);
            // The timeout is a safety net only: every call that makes work wakes the worker.
            wake_cv_.wait_for(l, std::chrono::milliseconds(50), [&] { return wake_; });
            wake_ = false;
        }
    }
    running_.store(false, std::memory_order_release);
    events_cv_.notify_all();
}

void Worker::throw_error_locked() {
    const llmkv_status st = error_;
    error_ = LLMKV_OK;
    fail(st, "%s", error_message_.c_str());
}

size_t Worker::poll(llmkv_event *out, size_t capacity, uint32_t timeout_us) {
    if (!running()) {
        std::lock_guard<FairMutex> lock(engine_lock_);
        std::lock_guard<std::mutex> io(io_);
        // A worker that stopped itself after a fatal step: its queue, then its error.
        engine_events_.insert(engine_events_.begin(), events_.begin(), events_.end());
        events_.clear();
        if (engine_events_.empty() && error_ != LLMKV_OK) throw_error_locked();
        const size_t n = std::min(capacity, engine_events_.size());
        std::copy_n(engine_events_.begin(), n, out);
        engine_events_.erase(engine_events_.begin(), engine_events_.begin() + std::ptrdiff_t(n));
        return n;
    }
    std::unique_lock<std::mutex> io(io_);
    if (events_.empty() && error_ == LLMKV_OK && timeout_us > 0) {
        events_cv_.wait_for(io, std::chrono::microseconds(timeout_us),
                            [&] { return !events_.empty() || error_ != LLMKV_OK || !running(); });
    }
    if (events_.empty() && error_ != LLMKV_OK) throw_error_locked();
    const size_t n = std::min(capacity, events_.size());
    std::copy_n(events_.begin(), n, out);
    events_.erase(events_.begin(), events_.begin() + std::ptrdiff_t(n));
    return n;
}

size_t Worker::pending() {
    if (running()) {
        std::lock_guard<std::mutex> io(io_);
        return events_.size();
    }
    std::lock_guard<FairMutex> lock(engine_lock_);
    std::lock_guard<std::mutex> io(io_);
    return engine_events_.size() + events_.size();
}

}  // namespace llmkv
