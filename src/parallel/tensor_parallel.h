// Tensor parallelism: TpBackend, the backend an engine holds on rank 0, and serve_rank(), the
// loop every other rank runs.
//
// Every rank holds its ModelShard (model/shard.h), a backend of its own (the CPU, or CUDA on
// the rank's device) with KV pools laid out for its KV heads, and the same block ids: rank 0's
// engine (scheduler, KV manager, prefix cache, host tier, snapshots) allocates ids once for all
// ranks. Rank 0 drives the others with commands over a Communicator (broadcast from rank 0):
//   setup      geometry, pool sizes and the model's fingerprint; every rank answers with
//              its status (all_gather) before anything else runs;
//   forward    a batch (its spans' tokens, block tables, tail slots and positions); every
//              rank runs its forward pass, meeting the others in the all-reduces;
//   transfer   KV blocks and tail slots between the pools and rank 0's host memory, in the
//              layout of the whole model (kv/kv_layout.h with every KV head): a block copied
//              out gathers each KV head from the lowest rank holding it, a block copied in
//              gives each rank its heads. Host tier, parking, the tiered prefix cache and
//              snapshots therefore see one block, whatever the rank count;
//   copy_tail  a tail slot inside the pools (forks, sessions from a prefix handle);
//   shutdown   (rank 0's engine is destroyed).
// Ranks inside one process are threads (InProcessGroup); ranks in other processes run
// llmkv_tp_serve over the application's transport (llmkv_tp_transport: MPI in the llmkv
// command). The commands always go over that communicator; the all-reduces of CUDA ranks on
// distinct devices go over NCCL on the devices' compute streams (TpSetup::device_collectives).
//
// Where each piece lives: tp_backend.cpp (TpBackend), rank_server.cpp (serve_rank,
// abort_ranks), rank_state.h (one rank, built from the setup), wire.h (the commands' bytes),
// kv_relayout.h (KV between the whole model's layout and a rank's).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "common/thread_pool.h"
#include "model/shard.h"
#include "parallel/communicator.h"
#include "parallel/kv_relayout.h"

namespace llmkv {

// How a rank runs: its threads (counting the rank's own), their spin and priority.
struct RankThreads {
    unsigned n_threads = 1;
    long spin_us = -1;
    int priority = 0;
};

constexpr uint32_t kMaxTpRanks = 256;

// What every rank agrees on, sent by rank 0 at setup.
struct TpSetup {
    KvGeometry geometry;  // the whole model's
    uint32_t n_sealed_blocks = 0;
    uint32_t n_tail_slots = 0;
    uint32_t max_tokens = 0;
    // The ranks' backend: LLMKV_BACKEND_CPU, or LLMKV_BACKEND_CUDA with rank r on CUDA device
    // devices[r] (-1: device r modulo the devices its process sees).
    llmkv_backend backend = LLMKV_BACKEND_CPU;
    int32_t devices[kMaxTpRanks] = {};
    // CUDA ranks: 1 = the all-reduces run over NCCL (communicator comm_id, made by rank 0);
    // 0 = through host memory and the host communicator.
    uint32_t device_collectives = 0;
    DeviceCommId comm_id{};
    // CUDA ranks: BackendRequest's cuda_fp16_weights / cuda_batch_invariant, as rank 0's
    // set-up stage resolved them (every rank computes alike).
    uint8_t cuda_fp16_weights = 0;
    uint8_t cuda_batch_invariant = 0;
    // A mixture of experts' split (ExpertSplit: 0 columns, 1 whole experts per rank).
    uint8_t expert_split = 0;
};

// One rank's state: shard, pools, threads, backend.
struct RankState;

class TpBackend final : public Backend {
public:
    // Rank 0 of `comm`: sends the setup, builds its own rank, and waits for every rank's
    // status (throws the first failure's status and message; the ranks then stop).
    // in_process > 0: starts that many ranks 1.. as threads of this process (comm is rank 0
    // of their InProcessGroup, whose other communicators `workers` holds), each with
    // worker_threads.
    TpBackend(const LlamaModel &model, const TpSetup &setup, Communicator &comm,
              const RankThreads &threads, std::vector<std::unique_ptr<Communicator>> workers = {},
              const RankThreads &worker_threads = {});
    ~TpBackend() override;

    const ModelShard &shard() const;
    uint32_t tp_size() const { return comm_.size(); }
    // The rank-local geometry (rank 0's; every rank's has the same sizes).
    const KvGeometry &rank_kv_geometry() const;

    const char *name() const override;
    std::string device_name() const override;
    std::string kernel_id() const override;
    llmkv_backend kind() const override;

    void load_weights(const WeightSet &weights) override;
    Tensor alloc(uint32_t rows, uint32_t cols) override;
    const KvGeometry &kv_geometry() const override { return setup_.geometry; }

    void begin_batch(const std::vector<ForwardSpan> &spans, const BatchShape &shape) override;
    void embed(const WeightMatrix &table, Tensor out) override;
    void rms_norm(Tensor x, const float *weight, float eps, Tensor out) override;
    void matmul(const WeightMatrix &w, Tensor x, Tensor y) override;
    void rope(Tensor x, uint32_t n_heads, uint32_t head_dim, const RopeParams &rope) override;
    void write_kv(uint32_t layer, Tensor k, Tensor v) override;
    void attention(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                   Tensor out) override;
    void add(Tensor x, Tensor y) override;
    void add_bias(Tensor x, const float *bias) override;
    void scale(Tensor x, float s) override;
    void swiglu(Tensor gate, Tensor up) override;
    void geglu(Tensor gate, Tensor up) override;
    void route_experts(Tensor logits, const ExpertRouting &r, Tensor routes) override;
    void matmul_experts(const WeightMatrix *experts, uint32_t n_expert, Tensor x, Tensor routes,
                        uint32_t n_used, Tensor y) override;
    void combine_experts(Tensor y, Tensor routes, uint32_t n_used, Tensor out) override;
    void mul_sigmoid(Tensor x, Tensor g) override;
    void add_expert_bias(Tensor y, Tensor routes, uint32_t n_used, const float *const *bias,
                         uint32_t n_expert) override;
    void attention_sinks(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                         const float *sinks, Tensor out) override;
    void swiglu_oai(Tensor gate, Tensor up, float alpha, float limit) override;
    void gather_logit_rows(Tensor x, Tensor out) override;
    void logits(const WeightMatrix &w, Tensor x, float *host) override;
    void end_batch() override;
    void all_reduce(Tensor x) override;
    void gather_logits(const float *local, uint32_t rows, uint32_t local_cols, uint32_t stride,
                       uint32_t n_vocab, float *host) override;
    void set_communicator(Communicator *) override {}

    std::unique_ptr<KvTransferQueue> make_transfer_queue(bool async) override;
    HostAllocator host_allocator() override;
    void copy_tail(int64_t from, int64_t to) override;
    // Host blocks live in rank 0's memory only: long contexts beyond the pools are off.
    bool reads_host_blocks() const override { return false; }
    // Every rank's (rank 0's times the rank count: their shapes are equal).
    MemoryUsage memory_usage() const override;

    // Moves KV between the pools and rank 0's host memory (the transfer queue's work).
    void transfer(const std::vector<KvTransfer> &transfers);

private:
    Backend &local();
    void stop();
    // Throws BACKEND when a batch began and never ended (the ranks are out of step).
    void check_in_step() const;

    const LlamaModel &model_;
    TpSetup setup_;
    Communicator &comm_;
    std::unique_ptr<RankState> rank0_;
    std::vector<std::unique_ptr<Communicator>> worker_comms_;
    std::vector<std::thread> workers_;
    std::mutex command_mu_;  // one command at a time (a batch holds it from begin to end)
    std::unique_lock<std::mutex> batch_lock_;
    std::vector<uint8_t> message_;
    bool stopped_ = false;
};

// Ranks 1..: serves rank 0's commands until its shutdown. `model` is this rank's copy of
// the model (the same file: the setup checks its fingerprint); load_error, when not
// empty, is this rank's failure to load it, reported to rank 0 at setup. Throws what
// ended it early (a transport failure, a setup refused).
void serve_rank(const LlamaModel *model, const std::string &load_error, Communicator &comm,
                const RankThreads &threads);

// Rank 0 could not set up (its own model failed to load, bad parameters): tells ranks
// waiting in serve_rank to stop.
void abort_ranks(Communicator &comm, const std::string &why);

}  // namespace llmkv
