// The Communicator implementations (the interface and its rank-ordered reductions are
// common/communicator.h): InProcessGroup (ranks are threads of this process: CPU ranks, tests)
// and TransportCommunicator (the host application's transport, llmkv_tp_transport in llmkv.h:
// the llmkv command's MPI ranks). A GPU communicator (NCCL) reduces device buffers inside the
// CUDA backend and uses one of these for the host-side commands.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/communicator.h"
#include "llmkv.h"

namespace llmkv {

// Ranks that are threads of one process. make(n) returns the n communicators; each is
// used by one thread. A rank waiting for the others polls for spin_us microseconds (< 0:
// the thread pool's default, LLMKV_SPIN_US or 200) before it sleeps on a futex: a forward
// pass meets the other ranks twice per layer, sooner than a sleeping thread wakes.
class InProcessGroup {
public:
    static std::vector<std::unique_ptr<Communicator>> make(uint32_t n, long spin_us = -1);

    InProcessGroup(uint32_t n, long spin_us);
    // Waits until every rank has arrived.
    void barrier();
    std::vector<const void *> ptrs_;  // what each rank shares for the current collective

private:
    const uint32_t n_;
    const long spin_ns_;
    std::atomic<uint32_t> arrived_{0};
    std::atomic<uint32_t> generation_{0};
};

// Ranks in other processes (or machines), reached through the application's transport.
class TransportCommunicator final : public Communicator {
public:
    // Checks the transport (callbacks set, rank < size); throws INVALID_ARGUMENT.
    explicit TransportCommunicator(const llmkv_tp_transport &t);
    uint32_t rank() const override { return uint32_t(t_.rank); }
    uint32_t size() const override { return uint32_t(t_.size); }
    void broadcast(void *buf, size_t bytes, uint32_t root) override;
    void all_gather(const void *send, void *recv, size_t bytes) override;

private:
    llmkv_tp_transport t_;
};

}  // namespace llmkv
