// Communicator: how the ranks of a tensor-parallel engine exchange bytes. Two collectives
// carry everything (every rank calls each one in the same order, with the same sizes):
//   broadcast   root's bytes to every rank (rank 0's commands and batches),
//   all_gather  every rank's bytes to every rank, in rank order (partial sums, shards).
// The reductions the forward pass needs are built on all_gather so that every rank adds
// the partial sums in the same order (rank 0 + rank 1 + ...): the result is bitwise the
// same on every rank and from run to run, which a tree or ring all-reduce does not promise.
//
// Implementations: InProcessGroup (ranks are threads of this process: CPU ranks, tests),
// TransportCommunicator (the host application's transport, llmkv_tp_transport in llmkv.h:
// the llmkv command's MPI ranks). A GPU communicator (NCCL) reduces device buffers inside
// the CUDA backend and uses one of these for the host-side commands.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "llmkv.h"

namespace llmkv {

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual uint32_t rank() const = 0;
    virtual uint32_t size() const = 0;
    // Every rank's buf (bytes) = root's. Throws LLMKV_ERR_BACKEND when the transport fails.
    virtual void broadcast(void *buf, size_t bytes, uint32_t root) = 0;
    // recv (size() * bytes) = every rank's send (bytes), in rank order.
    virtual void all_gather(const void *send, void *recv, size_t bytes) = 0;

    // x (n floats) = the sum of every rank's x, added in rank order (bitwise equal on every
    // rank).
    void all_reduce_sum(float *x, size_t n);
    // Logit columns split over the ranks: rank r holds columns [r * stride, r * stride +
    // local_cols) of a rows x total_cols matrix as rows x local_cols values (local_cols <=
    // stride). Every rank's out (rows x total_cols) receives the whole matrix.
    void gather_columns(const float *local, uint32_t rows, uint32_t local_cols, uint32_t stride,
                        uint32_t total_cols, float *out);

    // Time spent in all_reduce_sum and gather_columns (waiting for the other ranks included),
    // and how many calls.
    uint64_t reduce_ns() const { return reduce_ns_; }
    uint64_t reduces() const { return reduces_; }

private:
    std::vector<float> send_, recv_;
    uint64_t reduce_ns_ = 0, reduces_ = 0;
};

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
