// PoolMemoryTransferQueue: KV transfers for pools that live in host memory.
#include "kv/transfer.h"

#include <cstring>

#include "kv/kv_cache.h"

namespace llmkv {

PoolMemoryTransferQueue::PoolMemoryTransferQueue(KvCache &cache, bool async) : cache_(cache) {
    if (async) copier_ = std::make_unique<CopyEngine>();
}

PoolMemoryTransferQueue::~PoolMemoryTransferQueue() = default;

Ticket PoolMemoryTransferQueue::submit(const std::vector<KvTransfer> &transfers, bool wait) {
    const size_t block_bytes = cache_.sealed_pool().block_bytes(),
                 tail_bytes = cache_.tail_pool().block_bytes();
    std::vector<CopyOp> ops;
    ops.reserve(transfers.size());
    for (const KvTransfer &t : transfers) {
        switch (t.kind) {
            case KvTransfer::kBlockOut:
                ops.push_back({cache_.sealed_data(uint32_t(t.id)), t.host, block_bytes});
                break;
            case KvTransfer::kBlockIn:
                ops.push_back({t.host, cache_.sealed_data(uint32_t(t.id)), block_bytes});
                break;
            case KvTransfer::kTailOut:
                ops.push_back({cache_.tail_data(t.id), t.host, tail_bytes});
                break;
            case KvTransfer::kTailIn:
                ops.push_back({t.host, cache_.tail_data(t.id), tail_bytes});
                break;
        }
    }
    if (!copier_ || (wait && ops.size() <= 1)) {  // small or no copy thread: at once
        for (const CopyOp &op : ops) std::memcpy(op.dst, op.src, op.bytes);
        return 0;
    }
    Ticket ticket = copier_->submit(std::move(ops));
    if (wait) {
        copier_->wait(ticket);
        return 0;
    }
    return ticket;
}

bool PoolMemoryTransferQueue::done(Ticket t) {
    return t == 0 || copier_->done(t);
}

void PoolMemoryTransferQueue::wait(Ticket t) {
    if (t != 0) copier_->wait(t);
}

void PoolMemoryTransferQueue::wait_all() {
    if (copier_) copier_->wait_all();
}

uint64_t PoolMemoryTransferQueue::copy_ns() const {
    return copier_ ? copier_->stats().copy_ns : 0;
}

const uint8_t *PoolMemoryTransferQueue::host_view_block(uint32_t id) const {
    return cache_.sealed_data(id);
}

const uint8_t *PoolMemoryTransferQueue::host_view_tail(int64_t slot) const {
    return cache_.tail_pool().data(uint32_t(slot));
}

}  // namespace llmkv
