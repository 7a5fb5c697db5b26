// Scheduler::plan_step: decode first, then chunked prefill under the token budget.
#include "sched/scheduler.h"

#include <algorithm>

namespace llmkv {

void Scheduler::plan_step(std::vector<SchedCandidate> &candidates, std::vector<SchedItem> &plan) const {
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

}  // namespace llmkv
