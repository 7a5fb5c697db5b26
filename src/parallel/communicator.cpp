// InProcessGroup (ranks as threads: a futex barrier and shared pointers) and
// TransportCommunicator (the application's llmkv_tp_transport callbacks).
#include "parallel/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/thread_pool.h"
#include "platform/os.h"

namespace llmkv {

// ---- threads of one process ------------------------------------------------------------

namespace {

class InProcessCommunicator final : public Communicator {
public:
    InProcessCommunicator(std::shared_ptr<InProcessGroup> group, uint32_t rank, uint32_t size)
        : group_(std::move(group)), rank_(rank), size_(size) {}
    uint32_t rank() const override { return rank_; }
    uint32_t size() const override { return size_; }

    void broadcast(void *buf, size_t bytes, uint32_t root) override {
        if (rank_ == root) group_->ptrs_[root] = buf;
        group_->barrier();  // root's pointer is published
        if (rank_ != root && bytes) std::memcpy(buf, group_->ptrs_[root], bytes);
        group_->barrier();  // every rank has copied: root's buffer may change
    }

    void all_gather(const void *send, void *recv, size_t bytes) override {
        group_->ptrs_[rank_] = send;
        group_->barrier();
        for (uint32_t r = 0; r < size_; ++r) {
            if (bytes)
                std::memcpy(static_cast<uint8_t *>(recv) + r * bytes, group_->ptrs_[r], bytes);
        }
        group_->barrier();
    }

private:
    std::shared_ptr<InProcessGroup> group_;
    uint32_t rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> InProcessGroup::make(uint32_t n, long spin_us) {
    auto group = std::make_shared<InProcessGroup>(n, spin_us);
    std::vector<std::unique_ptr<Communicator>> out;
    for (uint32_t r = 0; r < n; ++r)
        out.push_back(std::make_unique<InProcessCommunicator>(group, r, n));
    return out;
}

InProcessGroup::InProcessGroup(uint32_t n, long spin_us)
    : ptrs_(n, nullptr),
      n_(n),
      spin_ns_((spin_us < 0 ? ThreadPool::default_spin_us()
                            : std::min(spin_us, ThreadPool::kMaxSpinUs)) *
               1000) {}

void InProcessGroup::barrier() {
    const uint32_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
        // The last to arrive opens the next barrier (the reset is seen by whoever sees the
        // new generation) and wakes the sleepers.
        arrived_.store(0, std::memory_order_relaxed);
        generation_.store(gen + 1, std::memory_order_release);
        os::wake_all(generation_);
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    while (generation_.load(std::memory_order_acquire) == gen) {
        if (std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                 t0)
                .count() >= spin_ns_) {
            while (generation_.load(std::memory_order_acquire) == gen)
                os::wait_while_equal(generation_, gen);
            return;
        }
        std::this_thread::yield();  // ranks may outnumber the cores
    }
}

// ---- the application's transport -------------------------------------------------------

TransportCommunicator::TransportCommunicator(const llmkv_tp_transport &t) : t_(t) {
    if (!t.broadcast || !t.all_gather)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "tp_transport: broadcast and all_gather must be set");
    if (t.size < 1 || t.rank < 0 || t.rank >= t.size) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "tp_transport: rank %d of size %d", t.rank, t.size);
    }
}

void TransportCommunicator::broadcast(void *buf, size_t bytes, uint32_t root) {
    if (t_.broadcast(t_.ctx, buf, bytes, int32_t(root)) != 0) {
        fail(LLMKV_ERR_BACKEND, "tp_transport: broadcast of %zu bytes failed on rank %d", bytes,
             t_.rank);
    }
}

void TransportCommunicator::all_gather(const void *send, void *recv, size_t bytes) {
    if (t_.all_gather(t_.ctx, send, recv, bytes) != 0) {
        fail(LLMKV_ERR_BACKEND, "tp_transport: all_gather of %zu bytes failed on rank %d", bytes,
             t_.rank);
    }
}

}  // namespace llmkv
