// The engine's side of game-loop mode (docs/EMBEDDING.md): the requests a host submits
// without waiting for a step (llmkv_session_submit_*), carried out at the start of the next
// step, and the hand-over of each step's events and text to the worker thread (worker.h).
//
// io_mutex_ guards the submission queue, each session's outbox and submit_error, and the
// worker's event queue; it is held only for copies. Lock order: mutex_, then io_mutex_.
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
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
                    fail(LLMKV_ERR_STATE,
                         "session is generating; cancel it or wait for DONE before submitting "
                         "input");
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
                if (n == 0)
                    fail(LLMKV_ERR_STATE,
                         "session has no tokens to continue from; submit a prompt first");
                if (n >= max_context_) {
                    fail(LLMKV_ERR_KV_CAPACITY,
                         "session would hold %zu tokens, max_context is %u: no room to generate", n,
                         max_context_);
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
    worker_.accept_locked(events_);
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
