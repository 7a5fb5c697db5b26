// The scheduler and the KV manager on their own, with no model, backend or engine: the policy
// (decode first, token budget, admission order and watermark, victim choice, failing what
// can never fit) and the exact block counts it leaves behind.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "host_tier_skip.h"
#include "kv/kv_manager.h"
#include "kv/transfer.h"

namespace llmkv {
namespace {

struct Rig {
    std::unique_ptr<KvManager> kv;
    std::unique_ptr<Scheduler> sched;
    std::vector<std::unique_ptr<Request>> owned;
    std::vector<Request *> requests;
    StepPlan plan;

    // A pool of n_blocks sealed blocks of 4 tokens (tiny geometry: 1 layer, 1 head, dim 8).
    Rig(uint32_t n_blocks, uint32_t budget, uint32_t tails = 16, uint64_t host_bytes = 0) {
        KvManagerConfig c;
        c.geometry.n_layers = 1;
        c.geometry.n_kv_heads = 1;
        c.geometry.head_dim = 8;
        c.geometry.block_tokens = 4;
        c.n_sealed_blocks = n_blocks;
        c.n_tail_slots = tails;
        c.host_bytes = host_bytes;
        kv = std::make_unique<KvManager>(c);
        // No tail copier: the cache copies tail slots in its host slabs itself.
        kv->attach(std::make_unique<PoolMemoryTransferQueue>(kv->cache(), false),
                   mmap_host_allocator(), nullptr);
        sched = std::make_unique<Scheduler>(*kv, budget);
    }

    // A request with `computed` tokens of KV in place and `pending` more tokens queued.
    Request *add(uint32_t computed, uint32_t pending, bool generating, int32_t priority = 0,
                 uint64_t seq = 0) {
        auto r = std::make_unique<Request>();
        r->tokens.assign(computed + pending, 7);
        if (computed > 0) {
            EXPECT_TRUE(kv->reserve(r->seq, computed));
            r->seq.kv.n_tokens = computed;
            r->n_committed = computed;
        }
        r->generate_requested = generating;
        r->started = computed > 0 && pending > 0;
        r->priority = priority;
        r->admit_seq = seq ? seq : owned.size() + 1;
        r->refresh_state();
        requests.push_back(r.get());
        owned.push_back(std::move(r));
        return requests.back();
    }

    uint32_t span_tokens(const Request *r) const {
        for (const StepPlan::Span &s : plan.spans) {
            if (s.request == r) return s.n_tokens;
        }
        return 0;
    }

    // What running the plan does to the KV (the forward pass advances each span).
    void run_plan() {
        for (const StepPlan::Span &s : plan.spans) s.request->seq.kv.n_tokens += s.n_tokens;
        std::vector<const KvSeq *> seqs;
        for (const Request *r : requests) seqs.push_back(&r->seq);
        kv->check_invariants(seqs);
    }

    ~Rig() {
        for (Request *r : requests) kv->drop(r->seq);
    }
};

// Found by the soak: a request already planned in this step (its next block reserved) and
// then swapped to the host tier to make room for a higher-priority one must not take the
// reserved, never-written block with it; it would come back holding more blocks than its
// tokens fill, and llmkv_engine_validate would fail.
TEST(Scheduler, ARequestSwappedOutAfterItWasPlannedGivesBackItsReservedBlock) {
    SKIP_WITHOUT_MIMALLOC();
    Rig rig(5, 16, 16, 32u << 20);
    Request *victim =
        rig.add(11, 1, true, /*priority=*/0);  // decoding: planned first, reserves block 3
    Request *urgent = rig.add(4, 8, true, /*priority=*/1);  // started prompt: needs 2 more blocks
    ASSERT_EQ(rig.kv->available(), 2u);
    rig.sched->schedule(rig.requests, rig.plan);
    EXPECT_EQ(rig.span_tokens(victim), 0u);
    EXPECT_EQ(rig.span_tokens(urgent), 8u);
    EXPECT_EQ(victim->seq.host.phase, HostKv::Phase::kParked);
    EXPECT_EQ(victim->seq.kv.blocks.size(), 2u);  // the blocks of its 11 computed tokens, no more
    EXPECT_EQ(rig.sched->counters().swaps, 1u);
    rig.run_plan();  // checks the invariants
}

TEST(Scheduler, DecodingRequestsGoFirstThenPromptsInChunksUnderTheBudget) {
    Rig rig(64, 8);
    Request *prompt_a = rig.add(0, 10, true);
    Request *decoding = rig.add(5, 1, true);
    Request *prompt_b = rig.add(0, 10, true);
    rig.sched->schedule(rig.requests, rig.plan);
    ASSERT_EQ(rig.plan.spans.size(), 2u);
    EXPECT_EQ(rig.plan.spans[0].request, decoding);
    EXPECT_EQ(rig.plan.spans[0].n_tokens, 1u);
    EXPECT_TRUE(rig.plan.spans[0].want_logits);
    EXPECT_EQ(rig.span_tokens(prompt_a), 7u);
    EXPECT_FALSE(rig.plan.spans[1].want_logits);  // its prompt is not done
    EXPECT_EQ(rig.span_tokens(prompt_b), 0u);
    EXPECT_TRUE(rig.plan.failed.empty());
    // Blocks reserved exactly: the decoder's 6 tokens hold 1 sealed block, the prompt's 7 hold 1.
    EXPECT_EQ(decoding->seq.kv.blocks.size(), 1u);
    EXPECT_EQ(prompt_a->seq.kv.blocks.size(), 1u);
    rig.run_plan();
}

TEST(Scheduler, HigherPriorityPromptsRunBeforeEarlierOnes) {
    Rig rig(64, 4);
    Request *early = rig.add(0, 6, true, 0);
    Request *urgent = rig.add(0, 6, true, 5);
    rig.sched->schedule(rig.requests, rig.plan);
    ASSERT_EQ(rig.plan.spans.size(), 1u);
    EXPECT_EQ(rig.plan.spans[0].request, urgent);
    EXPECT_EQ(rig.span_tokens(early), 0u);
}

TEST(Scheduler, PreemptsTheLeastRecentlyActiveIdleRequestFirst) {
    Rig rig(6, 64);
    Request *old_idle = rig.add(8, 0, false);  // 2 blocks
    Request *new_idle = rig.add(8, 0, false);  // 2 blocks
    old_idle->last_active = 1;
    new_idle->last_active = 2;
    // 2 blocks free; the newcomer's 12 tokens need 3 (plus the admission watermark of 1 is
    // not asked: nothing else is running).
    Request *newcomer = rig.add(0, 12, true);
    rig.sched->schedule(rig.requests, rig.plan);
    ASSERT_EQ(rig.plan.spans.size(), 1u);
    EXPECT_EQ(rig.plan.spans[0].request, newcomer);
    EXPECT_EQ(rig.sched->counters().preemptions, 1u);
    EXPECT_TRUE(old_idle->seq.kv.blocks.empty());
    EXPECT_TRUE(old_idle->kv_dropped);  // recomputed on its next request
    EXPECT_EQ(new_idle->seq.kv.blocks.size(), 2u);
    EXPECT_EQ(newcomer->seq.kv.blocks.size(), 3u);
    EXPECT_EQ(rig.kv->available(), 1u);
    rig.run_plan();
}

TEST(Scheduler, ARequestThatCanNeverFitFailsAndTheQueueBehindItMoves) {
    Rig rig(4, 64);
    Request *huge = rig.add(0, 40, true);  // 10 blocks: more than the whole pool
    Request *small = rig.add(0, 6, true);
    rig.sched->schedule(rig.requests, rig.plan);
    ASSERT_EQ(rig.plan.failed.size(), 1u);
    EXPECT_EQ(rig.plan.failed[0], huge);
    EXPECT_FALSE(huge->generate_requested);
    EXPECT_TRUE(
        huge->tokens.empty());  // its unprocessed input is dropped; nothing computed is lost
    EXPECT_EQ(huge->state, LLMKV_SESSION_IDLE);
    ASSERT_EQ(rig.plan.spans.size(), 1u);
    EXPECT_EQ(rig.plan.spans[0].request, small);
    EXPECT_EQ(rig.kv->available(), 3u);
}

TEST(Scheduler, NewWorkWaitsInOrderBehindAnAdmissionThatDoesNotFit) {
    Rig rig(8, 64);
    Request *running = rig.add(12, 1, true);  // 3 blocks, decoding
    Request *big = rig.add(0, 24, true);      // needs 6 blocks + watermark: must wait
    Request *small = rig.add(0, 4, true);     // would fit, but is behind big (same priority)
    rig.sched->schedule(rig.requests, rig.plan);
    EXPECT_EQ(rig.span_tokens(running), 1u);
    EXPECT_EQ(rig.span_tokens(big), 0u);
    EXPECT_EQ(rig.span_tokens(small), 0u);
    EXPECT_TRUE(rig.plan.failed.empty());
    EXPECT_EQ(rig.sched->counters().preemptions,
              0u);  // a fresh request never displaces an equal one
    EXPECT_TRUE(big->seq.kv.blocks.empty());
}

}  // namespace
}  // namespace llmkv
