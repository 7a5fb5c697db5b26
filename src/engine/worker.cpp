// The engine's worker thread and the requests a host submits without waiting for a step
// (llmkv_worker_*, llmkv_session_submit_*: game-loop mode, docs/EMBEDDING.md).
//
// Locks: mutex_ (the engine lock, FIFO) is held by every step; io_mutex_ only for copies:
// the submission queue, each session's outbox and submit_error, the worker's event queue.
// A host thread that calls only submit/poll/read_text takes io_mutex_ alone, so it never
// waits for a forward pass. Lock order: mutex_, then io_mutex_.
#include <algorithm>
#include <chrono>
#include <system_error>

#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/thread_priority.h"
#include "engine/engine.h"

namespace llmkv {

void Engine::submit(Submission r) {
    {
        std::lock_guard<std::mutex> io(io_mutex_);
        submissions_.push_back(std::move(r));
        n_submissions_.store(submissions_.size(), std::memory_order_release);
    }
    notify_work();
}

std::string Engine::submit_error(const Session *s) {
    std::lock_guard<std::mutex> io(io_mutex_);
    return s->submit_error;
}

void Engine::run_submissions() {
    if (n_submissions_.load(std::memory_order_acquire) == 0) return;
    std::deque<Submission> todo;
    {
        std::lock_guard<std::mutex> io(io_mutex_);
        todo.swap(submissions_);
        n_submissions_.store(0, std::memory_order_release);
    }
    for (Submission &r : todo) {
        Session *s = r.session;
        try {
            if (r.cancel) {
                if (s->generate_requested) cancel(s);  // nothing to cancel: no error
                continue;
            }
            std::vector<int32_t> ids;
            if (r.is_text) {
                if (s->generate_requested) {
                    fail(LLMKV_ERR_STATE, "session is generating; cancel it or wait for DONE before submitting input");
                }
                const bool add_bos = s->tokens.empty() && tokenizer_->add_bos_default();
                ids = tokenizer_->encode(r.text, add_bos, true);
            } else {
                ids = std::move(r.tokens);
            }
            if (r.flags & LLMKV_SUBMIT_GENERATE) {
                // The generate's own checks first, so that a request that cannot generate
                // appends nothing either.
                if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is already generating");
                const size_t n = s->tokens.size() + ids.size();
                if (n == 0) fail(LLMKV_ERR_STATE, "session has no tokens to continue from; submit a prompt first");
                if (n >= max_context_) {
                    fail(LLMKV_ERR_KV_CAPACITY, "session would hold %zu tokens, max_context is %u: no room to generate",
                         n, max_context_);
                }
            }
            append(s, ids.data(), ids.size());
            if (r.flags & LLMKV_SUBMIT_GENERATE) generate(s, r.max_new_tokens);
        } catch (const Error &e) {
            push_event(s, LLMKV_EVENT_ERROR, -1, LLMKV_FINISH_NONE, e.status());
            std::lock_guard<std::mutex> io(io_mutex_);
            s->submit_error = e.what();
        }
    }
}

void Engine::notify_work() {
    if (!worker_running()) return;
    {
        std::lock_guard<std::mutex> l(wake_mutex_);
        wake_ = true;
    }
    wake_cv_.notify_one();
}

void Engine::hand_over_locked() {
    // The text is gathered under the engine lock alone: io_mutex_, which the host's frame
    // thread may be waiting for, is held only for the appends (a worker running at a lower
    // priority must not be preempted while holding it for long).
    handover_text_.clear();
    for (Request *r : sessions_) {
        Session *s = static_cast<Session *>(r);
        if (s->text.pending_complete() > 0) handover_text_.emplace_back(s, s->text.take_complete());
    }
    std::lock_guard<std::mutex> io(io_mutex_);
    // Text first: a host that sees a TOKEN or DONE event finds its text already there.
    for (const auto &[s, text] : handover_text_) s->outbox.push(text);
    const bool had = !worker_events_.empty();
    while (!events_.empty()) {
        worker_events_.push_back(events_.front());
        events_.pop_front();
    }
    if (!had && !worker_events_.empty()) events_cv_.notify_all();
}

void Engine::worker_start() {
    std::lock_guard<std::mutex> control(control_mutex_);
    std::lock_guard<FairMutex> lock(mutex_);
    if (worker_running()) fail(LLMKV_ERR_STATE, "the worker thread is already running");
    if (worker_.joinable()) worker_.join();  // it stopped itself after a failed step
    worker_stop_.store(false, std::memory_order_release);
    {
        std::lock_guard<std::mutex> io(io_mutex_);
        worker_error_ = LLMKV_OK;
        worker_error_message_.clear();
    }
    worker_running_.store(true, std::memory_order_release);
    try {
        fault::maybe_fail_thread_start();
        worker_ = std::thread([this] { worker_main(); });
    } catch (const std::system_error &e) {
        worker_running_.store(false, std::memory_order_release);
        fail(LLMKV_ERR_OUT_OF_MEMORY, "cannot start the worker thread: %s", e.what());
    }
    // Events queued before the start (llmkv_step's) are handed out by llmkv_worker_poll.
    hand_over_locked();
}

void Engine::worker_stop() {
    std::lock_guard<std::mutex> control(control_mutex_);
    worker_stop_.store(true, std::memory_order_release);
    {
        std::lock_guard<std::mutex> l(wake_mutex_);
        wake_ = true;
    }
    wake_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    worker_running_.store(false, std::memory_order_release);
    events_cv_.notify_all();
    // What the worker queued and nobody polled goes back to the engine's queue, ahead of
    // anything newer, for llmkv_worker_poll or llmkv_step.
    std::lock_guard<FairMutex> lock(mutex_);
    std::lock_guard<std::mutex> io(io_mutex_);
    events_.insert(events_.begin(), worker_events_.begin(), worker_events_.end());
    worker_events_.clear();
}

void Engine::worker_main() {
    apply_thread_priority(params_.thread_priority);
    while (!worker_stop_.load(std::memory_order_acquire)) {
        bool stepped = false, fatal = false;
        {
            std::lock_guard<FairMutex> lock(mutex_);
            if (worker_stop_.load(std::memory_order_acquire)) break;
            if (has_work()) {
                stepped = true;
                try {
                    step();
                } catch (const Error &e) {
                    std::lock_guard<std::mutex> io(io_mutex_);
                    worker_error_ = e.status();
                    worker_error_message_ = e.what();
                    fatal = e.status() == LLMKV_ERR_BACKEND || e.status() == LLMKV_ERR_INTERNAL;
                } catch (const std::bad_alloc &) {
                    std::lock_guard<std::mutex> io(io_mutex_);
                    worker_error_ = LLMKV_ERR_OUT_OF_MEMORY;
                    worker_error_message_ = "out of memory";
                } catch (const std::exception &e) {
                    std::lock_guard<std::mutex> io(io_mutex_);
                    worker_error_ = LLMKV_ERR_INTERNAL;
                    worker_error_message_ = std::string("internal error: ") + e.what();
                    fatal = true;
                }
            }
            try {
                hand_over_locked();
            } catch (...) {  // no memory for the queue: the events stay in events_ for the next try
            }
            if (worker_error_ != LLMKV_OK) events_cv_.notify_all();
        }
        if (fatal) break;
        if (!stepped) {
            std::unique_lock<std::mutex> l(wake_mutex_);
            // The timeout is a safety net only: every call that makes work wakes the worker.
            wake_cv_.wait_for(l, std::chrono::milliseconds(50), [&] { return wake_; });
            wake_ = false;
        }
    }
    worker_running_.store(false, std::memory_order_release);
    events_cv_.notify_all();
}

size_t Engine::worker_poll(llmkv_event *out, size_t capacity, uint32_t timeout_us) {
    if (!worker_running()) {
        std::lock_guard<FairMutex> lock(mutex_);
        std::lock_guard<std::mutex> io(io_mutex_);
        // A worker that stopped itself after a fatal step: its queue, then its error.
        while (!worker_events_.empty()) {
            events_.push_front(worker_events_.back());
            worker_events_.pop_back();
        }
        if (events_.empty() && worker_error_ != LLMKV_OK) {
            const llmkv_status st = worker_error_;
            worker_error_ = LLMKV_OK;
            fail(st, "%s", worker_error_message_.c_str());
        }
        return take_events(out, capacity);
    }
    std::unique_lock<std::mutex> io(io_mutex_);
    if (worker_events_.empty() && worker_error_ == LLMKV_OK && timeout_us > 0) {
        events_cv_.wait_for(io, std::chrono::microseconds(timeout_us), [&] {
            return !worker_events_.empty() || worker_error_ != LLMKV_OK || !worker_running();
        });
    }
    if (worker_events_.empty() && worker_error_ != LLMKV_OK) {
        const llmkv_status st = worker_error_;
        worker_error_ = LLMKV_OK;
        fail(st, "%s", worker_error_message_.c_str());
    }
    const size_t n = std::min(capacity, worker_events_.size());
    for (size_t i = 0; i < n; ++i) {
        out[i] = worker_events_.front();
        worker_events_.pop_front();
    }
    return n;
}

size_t Engine::worker_pending_events() {
    if (worker_running()) {
        std::lock_guard<std::mutex> io(io_mutex_);
        return worker_events_.size();
    }
    std::lock_guard<FairMutex> lock(mutex_);
    std::lock_guard<std::mutex> io(io_mutex_);
    return events_.size() + worker_events_.size();
}

std::string Engine::read_text(Session *s, size_t capacity) {
    std::string out;
    {
        std::lock_guard<std::mutex> io(io_mutex_);
        out = s->outbox.take_complete(capacity);
        // Anything still in the outbox comes before the session's own text.
        if (worker_running() || s->outbox.pending() > 0) return out;
    }
    std::lock_guard<FairMutex> lock(mutex_);
    if (worker_running()) return out;  // started meanwhile: its hand-over has the rest
    std::string more = s->text.take_complete(capacity - out.size());
    out += more;
    return out;
}

}  // namespace llmkv
