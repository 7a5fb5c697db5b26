// One tensor-parallel rank: what it holds (RankState: shard, KV pools, threads, backend), how
// it is built from the setup every rank agreed on, and its part in moving KV between the
// ranks' pools and rank 0's host memory. Rank 0 (TpBackend) and ranks 1.. (serve_rank) share it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "common/communicator.h"
#include "common/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/shard.h"
#include "parallel/tensor_parallel.h"
#include "parallel/wire.h"

namespace llmkv {

class Forward;

struct RankState {
    const LlamaConfig *model_config = nullptr;  // the whole model's
    std::unique_ptr<ModelShard> shard;
    KvGeometry local;
    std::unique_ptr<KvCache> cache;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<KvTransferQueue>
        queue;                     // the backend's, synchronous: KV to and from host memory
    std::vector<uint8_t> staging;  // one block or tail slot in the rank's layout
    std::unique_ptr<Forward>
        forward;  // ranks 1..: their own forward pass (rank 0's is the engine's)

    ~RankState();
};

// This rank of `comm`: its shard, pools (setup's sizes in the rank's layout), thread pool
// and backend (the CPU, or CUDA on the rank's device); own_forward: a forward pass of its own
// (ranks 1..). Throws what failed.
std::unique_ptr<RankState> make_rank(const LlamaModel &model, const TpSetup &setup,
                                     Communicator &comm, const RankThreads &threads,
                                     bool own_forward);

// CUDA ranks on distinct devices: every rank prepares (NCCL loaded, buffers allocated) and
// all agree before any joins the NCCL communicator rank 0 made, where each waits for all.
void connect_devices(RankState &rs, Communicator &comm, const TpSetup &setup, uint32_t n_embd);

// One transfer on every rank: in = rank 0's host bytes to each rank's heads; out = each
// rank's heads to rank 0's host bytes (from the lowest rank holding each head). host: rank
// 0's bytes in the whole model's layout (null on ranks 1..).
void run_transfer(RankState &rs, Communicator &comm, const TpSetup &setup,
                  const wire::TransferItem &t, void *host);

}  // namespace llmkv
