// KV transfers: moving sealed blocks and tail slots between the KV pools and host memory
// (the host tier, snapshots, the tiered prefix cache). The KV manager programs against
// KvTransferQueue; each backend makes one (Backend::make_transfer_queue): the CPU backend's
// pools are host memory, so PoolMemoryTransferQueue below copies with memcpy (on the copy
// thread when asynchronous); the CUDA backend's goes through its copy stream.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kv/copy_engine.h"

namespace llmkv {

class KvCache;

struct KvTransfer {
    enum Kind : uint8_t { kBlockOut, kBlockIn, kTailOut, kTailIn } kind;
    int64_t id;  // sealed block id or tail slot
    void *host;  // sealed_block_bytes / tail_block_bytes of host memory
};

class KvTransferQueue {
public:
    virtual ~KvTransferQueue() = default;
    // Starts the transfers, in order after every earlier submission; returns a ticket
    // (0 = already done). With wait, returns when they are done (and always 0). The pool
    // entries and host buffers named must stay untouched until the ticket is done.
    virtual Ticket submit(const std::vector<KvTransfer> &transfers, bool wait) = 0;
    virtual bool done(Ticket t) = 0;
    virtual void wait(Ticket t) = 0;
    virtual void wait_all() = 0;
    // Time spent copying so far (0 where the device does not tell).
    virtual uint64_t copy_ns() const = 0;
    // Where the pools are host memory: the bytes of a sealed block / tail slot, readable in
    // place (snapshots are written from there without a copy). nullptr elsewhere.
    virtual const uint8_t *host_view_block(uint32_t /*id*/) const { return nullptr; }
    virtual const uint8_t *host_view_tail(int64_t /*slot*/) const { return nullptr; }
};

// Transfers for pools in host memory (the CPU backend): memcpy of the pool's bytes, on a
// copy thread when asynchronous (submissions of one op with wait are done at once).
class PoolMemoryTransferQueue final : public KvTransferQueue {
public:
    PoolMemoryTransferQueue(KvCache &cache, bool async);
    ~PoolMemoryTransferQueue() override;
    Ticket submit(const std::vector<KvTransfer> &transfers, bool wait) override;
    bool done(Ticket t) override;
    void wait(Ticket t) override;
    void wait_all() override;
    uint64_t copy_ns() const override;
    const uint8_t *host_view_block(uint32_t id) const override;
    const uint8_t *host_view_tail(int64_t slot) const override;

private:
    KvCache &cache_;
    std::unique_ptr<CopyEngine> copier_;  // null: synchronous
};

}  // namespace llmkv
