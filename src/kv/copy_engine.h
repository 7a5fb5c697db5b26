// Copy queues: asynchronous copies of host memory on a copy thread, overlapped with
// compute. CopyQueue is the interface; CopyEngine is the CPU implementation (one copy
// thread). The KV manager does not use them directly: it moves KV through the backend's
// KvTransferQueue (kv/transfer.h), whose CPU version runs on a CopyEngine.
//
// NOTE contract: the memory of every op of a ticket (src and dst) must stay valid and
// must not be written by anyone else until done(ticket) is true. The KV manager keeps it
// by construction (invariant 4: a block is evicted only when its refcount is 0 and no copy
// touches it): device blocks stay referenced until their copy out completes, and host
// blocks are freed only after their copy in completes. PinSet is a helper for callers that
// instead free or evict blocks while copies are in flight.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace llmkv {

struct CopyOp {
    const void *src;
    void *dst;
    size_t bytes;
};

// Identifies one submission. Tickets are issued in increasing order starting at 1;
// 0 is "no ticket" and always counts as done.
using Ticket = uint64_t;

struct CopyStats {
    uint64_t tickets = 0;       // submissions completed
    uint64_t ops = 0;           // ops completed
    uint64_t bytes_copied = 0;  // payload bytes of completed ops
    uint64_t copy_ns = 0;       // time spent copying (not waiting for work)
};

class CopyQueue {
public:
    virtual ~CopyQueue() = default;

    // Queues ops; they run after every earlier submission's ops, in the given order.
    // Throws llmkv::Error LLMKV_ERR_INVALID_ARGUMENT (and queues nothing) for an op with
    // a null pointer and bytes > 0, or whose src and dst ranges overlap.
    virtual Ticket submit(std::vector<CopyOp> ops) = 0;
    // Whether every op of ticket t has finished. Never blocks.
    virtual bool done(Ticket t) const = 0;
    // Blocks until done(t). Throws LLMKV_ERR_INVALID_ARGUMENT for a ticket this queue
    // has not issued (waiting would never end).
    virtual void wait(Ticket t) = 0;
    // Blocks until every ticket issued so far is done.
    virtual void wait_all() = 0;
    virtual CopyStats stats() const = 0;
    virtual const char *name() const = 0;
};

// CPU copies on one dedicated thread: one large memcpy per op. Tickets complete in
// submission order. Thread-safety: every member may be called from any thread.
// The destructor finishes every queued copy before it returns (so blocks a caller
// pinned are never written after the engine is gone).
class CopyEngine final : public CopyQueue {
public:
    CopyEngine();
    ~CopyEngine() override;
    CopyEngine(const CopyEngine &) = delete;
    CopyEngine &operator=(const CopyEngine &) = delete;

    Ticket submit(std::vector<CopyOp> ops) override;
    bool done(Ticket t) const override;
    void wait(Ticket t) override;
    void wait_all() override;
    CopyStats stats() const override;
    const char *name() const override { return "cpu-copy-thread"; }

private:
    struct Job {
        Ticket ticket;
        std::vector<CopyOp> ops;
    };
    void copy_thread_main();

    mutable std::mutex mutex_;
    std::condition_variable work_cv_;  // copy thread waits for jobs / stop
    std::condition_variable done_cv_;  // waiters wait for completed_ to advance
    std::deque<Job> queue_;
    Ticket last_issued_ = 0;
    Ticket completed_ = 0;  // every ticket <= completed_ is done
    bool stop_ = false;
    CopyStats stats_;
    std::thread thread_;
};

// Block keys pinned by in-flight tickets, with a count per key (a block may be read by
// several pending copies). A key is whatever names a block to its owner: a device block
// id, or a host block address as uintptr_t; keep keys of different tiers apart.
// Not thread-safe: it lives with the KV manager, under the engine's lock.
class PinSet {
public:
    // Pins keys until ticket t is done (call right after submit).
    void pin(Ticket t, const std::vector<uint64_t> &keys);
    // Drops the pins of every ticket the queue reports done; returns how many keys
    // became unpinned. Call before choosing blocks to free or evict.
    size_t release_done(const CopyQueue &queue);
    bool is_pinned(uint64_t key) const { return counts_.count(key) != 0; }
    size_t n_pinned() const { return counts_.size(); }
    size_t n_tickets() const { return pending_.size(); }

private:
    std::deque<std::pair<Ticket, std::vector<uint64_t>>> pending_;
    std::unordered_map<uint64_t, uint32_t> counts_;
};

}  // namespace llmkv
