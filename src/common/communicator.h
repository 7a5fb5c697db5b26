// Communicator: the interface through which the ranks of a tensor-parallel engine exchange
// bytes, and the rank-ordered reductions built on it. It sits below backend/ and parallel/:
// backends reduce over it, parallel/communicator.h implements it (threads, the host's transport).
//
// Two collectives carry everything (every rank calls each one in the same order, with the same
// sizes):
//   broadcast   root's bytes to every rank (rank 0's commands and batches),
//   all_gather  every rank's bytes to every rank, in rank order (partial sums, shards).
// The reductions the forward pass needs are built on all_gather so that every rank adds
// the partial sums in the same order (rank 0 + rank 1 + ...): the result is bitwise the
// same on every rank and from run to run, which a tree or ring all-reduce does not promise.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

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
    // Adds the time of a scope to the counters.
    class ScopeTimer {
    public:
        ScopeTimer(uint64_t &ns, uint64_t &calls) : ns_(ns), t0_(std::chrono::steady_clock::now()) {
            ++calls;
        }
        ~ScopeTimer() {
            ns_ += uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - t0_)
                                .count());
        }

    private:
        uint64_t &ns_;
        std::chrono::steady_clock::time_point t0_;
    };

    std::vector<float> send_, recv_;
    uint64_t reduce_ns_ = 0, reduces_ = 0;
};

// The reductions are defined here, on the two collectives alone, so that this header needs
// no implementation from the rooms above it.

inline void Communicator::all_reduce_sum(float *x, size_t n) {
    const uint32_t p = size();
    if (p <= 1 || n == 0) return;
    ScopeTimer timer(reduce_ns_, reduces_);
    recv_.resize(n * p);
    all_gather(x, recv_.data(), n * sizeof(float));
    // Rank order, every rank: the same additions in the same order.
    std::memcpy(x, recv_.data(), n * sizeof(float));
    for (uint32_t r = 1; r < p; ++r) {
        const float *src = recv_.data() + size_t(r) * n;
        for (size_t i = 0; i < n; ++i) x[i] += src[i];
    }
}

inline void Communicator::gather_columns(const float *local, uint32_t rows, uint32_t local_cols,
                                         uint32_t stride, uint32_t total_cols, float *out) {
    ScopeTimer timer(reduce_ns_, reduces_);
    const uint32_t p = size();
    const size_t per_rank = size_t(rows) * stride;
    send_.assign(per_rank, 0.0f);
    for (uint32_t i = 0; i < rows; ++i) {
        std::memcpy(send_.data() + size_t(i) * stride, local + size_t(i) * local_cols,
                    local_cols * sizeof(float));
    }
    recv_.resize(per_rank * p);
    if (p > 1) {
        all_gather(send_.data(), recv_.data(), per_rank * sizeof(float));
    } else {
        std::copy(send_.begin(), send_.end(), recv_.begin());
    }
    for (uint32_t r = 0; r < p; ++r) {
        const uint32_t c0 = r * stride;
        if (c0 >= total_cols) break;
        const uint32_t n = std::min(stride, total_cols - c0);
        for (uint32_t i = 0; i < rows; ++i) {
            std::memcpy(out + size_t(i) * total_cols + c0,
                        recv_.data() + size_t(r) * per_rank + size_t(i) * stride,
                        n * sizeof(float));
        }
    }
}

}  // namespace llmkv
