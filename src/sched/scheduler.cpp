// Scheduler: step planning, admission, preemption, and the host tier's part of the policy.
#include "sched/scheduler.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"

namespace llmkv {

void Scheduler::plan_step(std::vector<SchedCandidate> &candidates,
                          std::vector<SchedItem> &plan) const {
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const SchedCandidate &a, const SchedCandidate &b) {
                         if (a.decoding != b.decoding) return a.decoding;
                         if (a.priority != b.priority) return a.priority > b.priority;
                         return a.admit_seq < b.admit_seq;
                     });
    plan.clear();
    uint32_t budget = max_batch_tokens_;
    for (const SchedCandidate &c : candidates) {
        if (c.n_pending == 0) continue;
        if (budget == 0) break;
        uint32_t n = std::min(c.n_pending, budget);
        plan.push_back({c.index, n});
        budget -= n;
    }
}

void Scheduler::reap_copies(const std::vector<Request *> &requests) {
    if (!kv_.has_host_tier()) return;
    for (Request *r : requests) {
        if (kv_.reap(r->seq, /*wait=*/false)) r->refresh_state();
    }
}

void Scheduler::preempt(Request *v) {
    const bool had_work = v->has_pending_work();
    ++counters_.preemptions;
    // A victim already planned in this step holds blocks reserved for its span, which is
    // cancelled below: they hold nothing yet and must not be parked with its KV (it would
    // come back holding more blocks than its tokens fill).
    kv_.trim(v->seq);
    if (kv_.park_out(v->seq, /*wait=*/true)) {
        // Swapped (or parked, when idle): its KV comes back by copy, not recomputation.
        ++(had_work ? counters_.swaps : counters_.parks);
    } else {
        kv_.drop(v->seq);
        if (!had_work) v->kv_dropped = true;
    }
    if (had_work) v->started = false;  // back to the queue, keeping its place (admit_seq)
    v->refresh_state();
    preempted_.push_back(v);
    if (plan_) {
        auto &spans = plan_->spans;
        auto it = std::find_if(spans.begin(), spans.end(),
                               [&](const StepPlan::Span &s) { return s.request == v; });
        if (it != spans.end()) spans.erase(it);
    }
}

bool Scheduler::make_room(const std::vector<Request *> &requests, Request *r, uint32_t need,
                          bool fresh) {
    uint32_t available = kv_.available();
    if (need <= available) return true;
    if (kv_.has_host_tier()) {
        // Blocks of requests being parked come back to the pool when their copies end.
        bool parking = false;
        for (const Request *v : requests) parking |= v->seq.parking();
        if (parking) {
            for (Request *v : requests) {
                if (v->seq.parking()) kv_.reap(v->seq, /*wait=*/true);
            }
            reap_copies(requests);
            available = kv_.available();
            if (need <= available) return true;
        }
    }
    // Victims in order: idle requests, least recently active first; then requests ranked
    // below r, lowest first. A request not yet running (fresh) only displaces idle
    // requests and requests of strictly lower priority, so admission never thrashes.
    std::vector<Request *> &idle = idle_, &active = active_;
    idle.clear();
    active.clear();
    for (Request *v : requests) {
        if (v == r || !v->seq.has_blocks() || !v->seq.on_device()) continue;
        if (!v->has_pending_work()) {
            idle.push_back(v);
        } else if (ranks_below(*v, *r) && (!fresh || v->priority < r->priority)) {
            active.push_back(v);
        }
    }
    std::sort(idle.begin(), idle.end(),
              [](const Request *a, const Request *b) { return a->last_active < b->last_active; });
    std::sort(active.begin(), active.end(),
              [](const Request *a, const Request *b) { return ranks_below(*a, *b); });
    idle.insert(idle.end(), active.begin(), active.end());
    // Count first, so that nobody is preempted for nothing.
    size_t n_victims = 0;
    uint32_t gain = 0;
    while (n_victims < idle.size() && available + gain < need)
        gain += kv_.freeable_blocks(idle[n_victims++]->seq);
    if (available + gain < need) return false;
    for (size_t i = 0; i < n_victims; ++i) preempt(idle[i]);
    return true;
}

bool Scheduler::start_resume(const std::vector<Request *> &requests, Request *r) {
    if (!make_room(requests, r, kv_.resume_blocks(r->seq), /*fresh=*/true)) return false;
    return kv_.start_resume(r->seq);
}

void Scheduler::bring_back(const std::vector<Request *> &requests, Request *r) {
    if (r->seq.on_device()) return;
    if (r->seq.parking()) kv_.reap(r->seq, /*wait=*/true);
    if (r->seq.parked() && !start_resume(requests, r)) {
        fail(LLMKV_ERR_KV_CAPACITY, "the device pool cannot take back the parked session's KV now");
    }
    kv_.reap(r->seq, /*wait=*/true);
    r->refresh_state();
}

void Scheduler::fail_capacity(Request *r) {
    LLMKV_LOG_WARN_F(
        "KV pool exhausted: a session of %zu tokens cannot get the blocks it needs (%u of %u "
        "available)",
        r->tokens.size(), kv_.available(), kv_.total_blocks());
    // Drop its unprocessed input (nothing computed is lost) and report the error.
    if (!(r->generate_requested && r->n_generated > 0)) {
        r->tokens.resize(std::max<size_t>(std::min(r->tokens.size(), size_t(r->n_committed)),
                                          r->seq.n_tokens()));
    }
    r->generate_requested = false;
    r->finish_reason = LLMKV_FINISH_NONE;
    if (r->seq.n_tokens() + 1 < r->tokens.size())
        r->kv_dropped = true;  // recomputed on the next request
    plan_->failed.push_back(r);
    r->refresh_state();
}

void Scheduler::schedule(const std::vector<Request *> &requests, StepPlan &plan) {
    try {
        schedule_impl(requests, plan);
    } catch (...) {
        // An allocation failed part-way: blocks reserved for spans that will not run go
        // back (every request holds exactly the blocks of its computed tokens between steps).
        for (Request *r : requests) kv_.trim(r->seq);
        plan.spans.clear();
        throw;
    }
}

void Scheduler::schedule_impl(const std::vector<Request *> &requests, StepPlan &plan) {
    plan.clear();
    plan_ = &plan;
    struct Reset {
        StepPlan *&p;
        ~Reset() { p = nullptr; }
    } reset{plan_};

    if (kv_.has_host_tier()) {
        reap_copies(requests);
        // Parked requests with work come back first, highest ranked first; their copies
        // overlap this step's compute, and they run from the next step.
        std::vector<Request *> &waiting = waiting_;
        waiting.clear();
        for (Request *r : requests) {
            if (r->pending_runnable() == 0) continue;
            if (r->seq.parking())
                kv_.reap(r->seq, /*wait=*/true);  // parked, then given work at once
            if (r->seq.parked()) waiting.push_back(r);
        }
        std::sort(waiting.begin(), waiting.end(),
                  [](const Request *a, const Request *b) { return ranks_below(*b, *a); });
        for (Request *r : waiting) start_resume(requests, r);
        bool ready = false, incoming = false;
        for (const Request *r : requests) {
            ready |= r->seq.on_device() && r->pending_runnable() > 0;
            incoming |= r->seq.resuming();
        }
        if (!ready && incoming) {  // nothing else to do meanwhile
            for (Request *r : requests) {
                if (r->seq.resuming() && kv_.reap(r->seq, /*wait=*/true)) r->refresh_state();
            }
            reap_copies(requests);
        }
    }
    for (Request *r : requests) {
        if (!r->seq.on_device() || r->pending_runnable() == 0) continue;
        kv_.match_prefix(r->seq, r->tokens);
        // The cache may have served every token there was to compute: the request is then
        // idle until it asks to generate (it would otherwise stay QUEUED forever).
        r->refresh_state();
    }
    candidates_.clear();
    uint32_t n_running = 0;
    Request *top_parked = nullptr;  // highest-ranked parked request with work
    for (uint32_t i = 0; i < requests.size(); ++i) {
        Request &r = *requests[i];
        uint32_t n = r.pending_runnable();
        if (n == 0) continue;
        if (!r.seq.on_device()) {
            if (r.seq.parked() && (!top_parked || ranks_below(*top_parked, r))) top_parked = &r;
            continue;
        }
        candidates_.push_back({i, r.priority, r.admit_seq, n, r.generate_requested && n == 1});
        n_running += r.started ? 1 : 0;
    }
    if (candidates_.empty()) {
        // Only parked requests have work and none could come back: the pool cannot hold
        // the first of them even alone.
        bool incoming = false;
        for (const Request *r : requests) incoming |= r->seq.resuming();
        if (top_parked && !incoming) fail_capacity(top_parked);
        return;
    }
    plan_step(candidates_, items_);

    // Reserve KV for every planned span, preempting lower-ranked requests when the pool
    // runs dry. New work is admitted only with a watermark of free blocks left while
    // others run, and in order: once a new request must wait, later ones of no higher
    // priority wait too, so a large request is not starved by small ones.
    preempted_.clear();
    std::vector<Request *> &refused = refused_;
    refused.clear();
    bool admission_closed = false;
    int32_t closed_priority = 0;
    for (const SchedItem &item : items_) {
        Request *r = requests[item.index];
        if (std::find(preempted_.begin(), preempted_.end(), r) != preempted_.end()) continue;
        const bool fresh = !r->started;
        if (fresh && admission_closed && r->priority <= closed_priority) continue;
        const uint32_t target = r->seq.n_tokens() + item.n_tokens;
        const uint32_t need = kv_.blocks_needed(r->seq, target);
        // A request whose input could not be held even alone fails before more is computed.
        const uint32_t full = std::max<uint32_t>(
            target, uint32_t(r->tokens.size()) - (r->generate_requested ? 0 : 1));
        const uint32_t more =
            kv_.geometry().grouped() ? kv_.peak_blocks(full) : kv_.blocks_needed(r->seq, full);
        if (more > kv_.available() && !kv_.could_hold_alone(r->seq, full) &&
            !kv_.could_hold_with_host(r->seq, full, max_batch_tokens_)) {
            fail_capacity(r);
            continue;
        }
        const uint32_t watermark = fresh && n_running > 0 ? admission_watermark_ : 0;
        bool room = make_room(requests, r, need + watermark, fresh);
        if (!room && kv_.has_host_tier() && (!fresh || n_running == 0)) {
            // Longer than the device pool can hold: its oldest blocks move to the host tier.
            const uint32_t available = kv_.available();
            if (need + watermark > available)
                kv_.offload_blocks(r->seq, need + watermark - available);
            room = make_room(requests, r, need + watermark, fresh);
        }
        if (!room || !kv_.reserve(r->seq, target)) {
            if (fresh && !admission_closed) {
                admission_closed = true;
                closed_priority = r->priority;
            }
            refused.push_back(r);
            continue;
        }
        const bool want_logits = r->generate_requested && target == r->tokens.size();
        plan.spans.push_back({r, item.n_tokens, want_logits, nullptr});
    }
    // Requests with blocks in the host tier: attention reads them in place.
    for (StepPlan::Span &s : plan.spans) s.block_data = kv_.block_addresses(s.request->seq);
    bool incoming = false;  // a resume in flight: its request runs once the copy is in
    for (const Request *q : requests) incoming |= q->seq.resuming();
    if (plan.spans.empty() && !refused.empty() && !incoming) {
        // Nothing could run: the highest-ranked waiting request fails instead of hanging.
        Request *top = refused.front();
        for (Request *r : refused) {
            if (ranks_below(*top, *r)) top = r;
        }
        fail_capacity(top);
    }
}

}  // namespace llmkv
