// CopyEngine and PinSet: copies of random data across many tickets, in-order execution,
// done/wait semantics, counters, rejected ops, draining on destruction, concurrent
// submitters (run under TSan, see the command in host_tier_test.cpp), and pins that last
// exactly as long as their tickets.
#include "kv/copy_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/error.h"
#include "kv/host_tier.h"

namespace llmkv {
namespace {

constexpr size_t kSealedBlockBytes = 30 * 3 * 2 * 16 * 64;  // SmolLM2-135M int8 block

llmkv_status status_of(const std::function<void()> &fn) {
    try {
        fn();
    } catch (const Error &e) {
        return e.status();
    }
    return LLMKV_OK;
}

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<unsigned char> v(n);
    for (auto &b : v) b = static_cast<unsigned char>(rng());
    return v;
}

TEST(CopyEngine, CopiesRandomDataAcrossManyTicketsAndCountsIt) {
    CopyEngine engine;
    const std::vector<unsigned char> src = random_bytes(4 << 20, 1);
    std::vector<unsigned char> dst(src.size(), 0);
    std::mt19937 rng(7);
    // Each ticket copies a few random disjoint spans [off, off + n) from src to the same
    // offsets of dst; spans never repeat, so every byte is written at most once.
    size_t cursor = 0, total_ops = 0, total_bytes = 0;
    std::vector<Ticket> tickets;
    while (cursor < src.size()) {
        std::vector<CopyOp> ops;
        const size_t n_ops = 1 + rng() % 8;
        for (size_t i = 0; i < n_ops && cursor < src.size(); ++i) {
            const size_t n = std::min(src.size() - cursor, size_t(1 + rng() % 65536));
            ops.push_back(CopyOp{src.data() + cursor, dst.data() + cursor, n});
            cursor += n;
            total_bytes += n;
        }
        total_ops += ops.size();
        const Ticket t = engine.submit(std::move(ops));
        if (!tickets.empty()) {
            EXPECT_EQ(t, tickets.back() + 1);
        }
        tickets.push_back(t);
    }
    EXPECT_EQ(tickets.front(), 1u);
    engine.wait_all();
    for (Ticket t : tickets) EXPECT_TRUE(engine.done(t));
    EXPECT_EQ(dst, src);
    const CopyStats s = engine.stats();
    EXPECT_EQ(s.tickets, tickets.size());
    EXPECT_EQ(s.ops, total_ops);
    EXPECT_EQ(s.bytes_copied, total_bytes);
    EXPECT_EQ(total_bytes, src.size());
    EXPECT_GT(s.copy_ns, 0u);
}

TEST(CopyEngine, OpsRunInSubmissionOrderWithinAndAcrossTickets) {
    CopyEngine engine;
    for (int trial = 0; trial < 50; ++trial) {
        const std::vector<unsigned char> a = random_bytes(kSealedBlockBytes, uint32_t(trial));
        std::vector<unsigned char> b(a.size(), 0), c(a.size(), 0), d(a.size(), 0);
        // a -> b -> c inside one ticket, then c -> d in the next: only in-order execution
        // leaves a's bytes in d.
        engine.submit({CopyOp{a.data(), b.data(), a.size()}, CopyOp{b.data(), c.data(), a.size()}});
        const Ticket last = engine.submit({CopyOp{c.data(), d.data(), a.size()}});
        engine.wait(last);
        ASSERT_EQ(d, a) << "trial " << trial;
    }
}

TEST(CopyEngine, DoneAndWaitSemantics) {
    CopyEngine engine;
    EXPECT_TRUE(engine.done(0));   // "no ticket"
    EXPECT_FALSE(engine.done(1));  // not issued yet
    engine.wait(0);                // returns at once
    engine.wait_all();             // nothing issued: returns at once
    EXPECT_EQ(status_of([&] { engine.wait(1); }), LLMKV_ERR_INVALID_ARGUMENT);

    const std::vector<unsigned char> src = random_bytes(32 << 20, 3);
    std::vector<unsigned char> dst(src.size());
    const Ticket big = engine.submit({CopyOp{src.data(), dst.data(), src.size()}});
    const Ticket empty = engine.submit({});
    EXPECT_EQ(empty, big + 1);
    engine.wait(empty);  // in order: the big copy is done too
    EXPECT_TRUE(engine.done(big));
    EXPECT_TRUE(engine.done(empty));
    EXPECT_FALSE(engine.done(empty + 1));
    EXPECT_EQ(dst, src);
    engine.wait(big);  // waiting again on a finished ticket is fine
    EXPECT_EQ(engine.stats().tickets, 2u);
    EXPECT_EQ(engine.stats().ops, 1u);
}

TEST(CopyEngine, RejectsNullAndOverlappingOpsWithoutIssuingATicket) {
    CopyEngine engine;
    std::vector<unsigned char> buf(1024, 1), out(1024, 0);
    EXPECT_EQ(status_of([&] {
                  engine.submit({CopyOp{nullptr, out.data(), 16}});
              }),
              LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] {
                  engine.submit({CopyOp{buf.data(), nullptr, 16}});
              }),
              LLMKV_ERR_INVALID_ARGUMENT);
    // A valid op before a bad one: the whole submission is refused.
    EXPECT_EQ(status_of([&] {
                  engine.submit(
                      {CopyOp{buf.data(), out.data(), 16}, CopyOp{buf.data(), buf.data() + 8, 16}});
              }),
              LLMKV_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] {
                  engine.submit({CopyOp{buf.data(), buf.data(), 1}});
              }),
              LLMKV_ERR_INVALID_ARGUMENT);
    // Zero bytes with null pointers, and touching (not overlapping) ranges, are fine.
    const Ticket t =
        engine.submit({CopyOp{nullptr, nullptr, 0}, CopyOp{buf.data(), buf.data() + 512, 512}});
    EXPECT_EQ(t, 1u);
    engine.wait(t);
    EXPECT_EQ(out[0], 0);
    EXPECT_EQ(engine.stats().bytes_copied, 512u);
}

TEST(CopyEngine, DestructionFinishesCopiesInFlight) {
    const std::vector<unsigned char> src = random_bytes(8 << 20, 5);
    std::vector<unsigned char> dst(src.size(), 0);
    {
        CopyEngine engine;
        const size_t chunk = 64 << 10;
        for (size_t off = 0; off < src.size(); off += chunk) {
            engine.submit({CopyOp{src.data() + off, dst.data() + off, chunk}});
        }
        // No wait: the destructor must drain before the buffers go away.
    }
    EXPECT_EQ(dst, src);
}

TEST(CopyEngine, ConcurrentSubmittersWaitersAndPollers) {
    CopyEngine engine;
    constexpr int kThreads = 4;
    constexpr int kTickets = 100;
    constexpr size_t kBytes = 16 << 10;
    std::atomic<bool> stop{false};
    std::atomic<int> mismatches{0};
    // A poller reads stats and done() while copies run.
    std::thread poller([&] {
        uint64_t last_tickets = 0;
        while (!stop.load()) {
            const CopyStats s = engine.stats();
            if (s.tickets < last_tickets) mismatches.fetch_add(1);
            last_tickets = s.tickets;
            (void)engine.done(s.tickets);
            std::this_thread::yield();
        }
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            const std::vector<unsigned char> src =
                random_bytes(kBytes * kTickets, uint32_t(100 + t));
            std::vector<unsigned char> dst(src.size(), 0);
            std::vector<Ticket> mine;
            for (int i = 0; i < kTickets; ++i) {
                const size_t off = size_t(i) * kBytes;
                mine.push_back(engine.submit({CopyOp{src.data() + off, dst.data() + off, kBytes}}));
                if (i % 10 == 9) engine.wait(mine.back());
            }
            for (Ticket k : mine) engine.wait(k);
            if (dst != src) mismatches.fetch_add(1);
        });
    }
    for (auto &th : threads) th.join();
    stop.store(true);
    poller.join();
    engine.wait_all();
    EXPECT_EQ(mismatches.load(), 0);
    EXPECT_EQ(engine.stats().tickets, uint64_t(kThreads * kTickets));
    EXPECT_EQ(engine.stats().bytes_copied, uint64_t(kThreads) * kTickets * kBytes);
}

// A queue whose tickets finish when the test says so, in any order.
class ManualQueue final : public CopyQueue {
public:
    Ticket submit(std::vector<CopyOp>) override { return ++last_; }
    bool done(Ticket t) const override { return t == 0 || finished_.count(t) != 0; }
    void wait(Ticket t) override { finished_.insert(t); }
    void wait_all() override {
        for (Ticket t = 1; t <= last_; ++t) finished_.insert(t);
    }
    CopyStats stats() const override { return {}; }
    const char *name() const override { return "manual"; }
    void finish(Ticket t) { finished_.insert(t); }

private:
    Ticket last_ = 0;
    std::set<Ticket> finished_;
};

TEST(CopyEngine, PinSetHoldsBlocksUntilTheirTicketsAreDoneInAnyOrder) {
    ManualQueue queue;
    PinSet pins;
    const Ticket t1 = queue.submit({});
    pins.pin(t1, {1, 2});
    const Ticket t2 = queue.submit({});
    pins.pin(t2, {2, 3});
    pins.pin(queue.submit({}), {});  // nothing to pin: not tracked
    EXPECT_EQ(pins.n_tickets(), 2u);
    EXPECT_EQ(pins.n_pinned(), 3u);
    EXPECT_EQ(pins.release_done(queue), 0u);

    queue.finish(t2);                         // out of order
    EXPECT_EQ(pins.release_done(queue), 1u);  // 3 unpinned; 2 still held by t1
    EXPECT_TRUE(pins.is_pinned(1));
    EXPECT_TRUE(pins.is_pinned(2));
    EXPECT_FALSE(pins.is_pinned(3));

    queue.finish(t1);
    EXPECT_EQ(pins.release_done(queue), 2u);
    EXPECT_EQ(pins.n_pinned(), 0u);
    EXPECT_EQ(pins.n_tickets(), 0u);
}

TEST(CopyEngine, RoundTripOfKvBlocksThroughTheHostTier) {
    std::string why;
    if (!HostTier::available(&why)) GTEST_SKIP() << "no host tier: " << why;
    constexpr size_t kBlocks = 64;
    HostTier tier(32 << 20);
    CopyEngine engine;
    PinSet pins;
    const std::vector<unsigned char> device = random_bytes(kBlocks * kSealedBlockBytes, 9);
    std::vector<unsigned char> back(device.size(), 0);
    std::vector<void *> host;
    ASSERT_TRUE(tier.allocate_blocks(kSealedBlockBytes, kBlocks, host));

    std::vector<CopyOp> offload;
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < kBlocks; ++i) {
        offload.push_back(
            CopyOp{device.data() + i * kSealedBlockBytes, host[i], kSealedBlockBytes});
        keys.push_back(reinterpret_cast<uintptr_t>(host[i]));
    }
    const Ticket out = engine.submit(std::move(offload));
    pins.pin(out, keys);
    std::vector<CopyOp> onboard;
    for (size_t i = 0; i < kBlocks; ++i) {
        onboard.push_back(CopyOp{host[i], back.data() + i * kSealedBlockBytes, kSealedBlockBytes});
    }
    const Ticket in = engine.submit(std::move(onboard));
    pins.pin(in, keys);
    engine.wait(in);
    EXPECT_EQ(pins.release_done(engine), kBlocks);
    EXPECT_EQ(back, device);
    for (void *b : host) tier.free_block(b);
    EXPECT_EQ(tier.bytes_used(), 0u);
}

}  // namespace
}  // namespace llmkv
