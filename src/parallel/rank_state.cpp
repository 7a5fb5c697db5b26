// One tensor-parallel rank (rank_state.h): building its shard, pools and backend, joining the
// device collectives, and its share of a KV transfer in the whole model's layout.
#include "parallel/rank_state.h"

#include <algorithm>
#include <string>

#include "backend/factory.h"
#include "common/error.h"
#include "model/arch/forward.h"
#include "parallel/kv_relayout.h"

namespace llmkv {

// Out of line: Forward is complete only here.
RankState::~RankState() = default;

namespace {

// The CUDA device of `rank`.
int rank_device(const TpSetup &setup, uint32_t rank) {
    if (setup.devices[rank] >= 0) return setup.devices[rank];
    std::string why;
    const int n = gpu_device_count(&why);
    if (n <= 0) fail(LLMKV_ERR_UNSUPPORTED, "the CUDA backend is not available: %s", why.c_str());
    return int(rank % uint32_t(n));
}

}  // namespace

std::unique_ptr<RankState> make_rank(const LlamaModel &model, const TpSetup &setup,
                                     Communicator &comm, const RankThreads &threads,
                                     bool own_forward) {
    if (comm.size() > kMaxTpRanks)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "%u tensor-parallel ranks (at most %u)", comm.size(),
             kMaxTpRanks);
    const bool cuda = setup.backend == LLMKV_BACKEND_CUDA;
    auto rs = std::make_unique<RankState>();
    rs->shard = ModelShard::make(model, comm.rank(), comm.size(), ExpertSplit(setup.expert_split));
    rs->local = rank_geometry(setup.geometry, rs->shard->ranges());
    // A device rank's pools live on its device: this cache only gives their sizes (its
    // anonymous memory is never touched).
    rs->cache = std::make_unique<KvCache>(rs->local, setup.n_sealed_blocks, setup.n_tail_slots);
    rs->pool = std::make_unique<ThreadPool>(cuda ? 1 : threads.n_threads, threads.spin_us,
                                            threads.priority);
    BackendRequest br;
    br.kind = cuda ? LLMKV_BACKEND_CUDA : LLMKV_BACKEND_CPU;
    if (cuda) br.device = rank_device(setup, comm.rank());
    br.max_batch_tokens = setup.max_tokens;
    br.max_spans = std::min(setup.n_tail_slots, setup.max_tokens);  // one span per session at most
    br.cache = rs->cache.get();
    br.pool = rs->pool.get();
    br.cuda_fp16_weights = setup.cuda_fp16_weights != 0;
    br.cuda_batch_invariant = setup.cuda_batch_invariant != 0;
    rs->backend = create_backend(br);
    rs->backend->set_communicator(&comm);
    rs->queue = rs->backend->make_transfer_queue(false);
    rs->staging.resize(std::max(rs->local.sealed_block_bytes(), rs->local.tail_block_bytes()));
    if (own_forward)
        rs->forward = Forward::create(model, *rs->backend, setup.max_tokens, rs->shard.get());
    return rs;
}

void connect_devices(RankState &rs, Communicator &comm, const TpSetup &setup, uint32_t n_embd) {
    if (!setup.device_collectives) return;
    wire::agree(comm, [&] {
        rs.backend->prepare_device_ranks(comm.size(), uint64_t(setup.max_tokens) * n_embd);
    });
    wire::agree(comm,
                [&] { rs.backend->connect_device_ranks(setup.comm_id, comm.size(), comm.rank()); });
}

void run_transfer(RankState &rs, Communicator &comm, const TpSetup &setup,
                  const wire::TransferItem &t, void *host) {
    const bool tail = t.kind == KvTransfer::kTailIn || t.kind == KvTransfer::kTailOut;
    const bool in = t.kind == KvTransfer::kBlockIn || t.kind == KvTransfer::kTailIn;
    const KvGeometry &full = setup.geometry;
    const size_t full_bytes = tail ? full.tail_block_bytes() : full.sealed_block_bytes();
    const size_t local_bytes = tail ? rs.local.tail_block_bytes() : rs.local.sealed_block_bytes();
    const uint32_t h0 = rs.shard->ranges().kv_head0;
    // The rank's bytes go through its backend's queue (a device's pools are not host memory),
    // staged in the rank's layout.
    uint8_t *staging = rs.staging.data();
    if (in) {
        std::vector<uint8_t> buf;
        uint8_t *src = static_cast<uint8_t *>(host);
        if (comm.rank() != 0) {
            buf.resize(full_bytes);
            src = buf.data();
        }
        comm.broadcast(src, full_bytes, 0);
        (tail ? kv_tail_to_rank : kv_block_to_rank)(full, rs.local, h0, src, staging);
        rs.queue->submit({KvTransfer{KvTransfer::Kind(t.kind), t.id, staging}}, true);
        return;
    }
    // Pools in host memory are read in place.
    const uint8_t *mine =
        tail ? rs.queue->host_view_tail(t.id) : rs.queue->host_view_block(uint32_t(t.id));
    if (!mine) {
        rs.queue->submit({KvTransfer{KvTransfer::Kind(t.kind), t.id, staging}}, true);
        mine = staging;
    }
    std::vector<uint8_t> all(local_bytes * comm.size());
    comm.all_gather(mine, all.data(), local_bytes);
    if (comm.rank() != 0) return;
    for (uint32_t r = 0; r < comm.size(); ++r) {
        const ShardRanges rr = shard_ranges(*rs.model_config, r, comm.size());
        if (!rr.kv_primary) continue;
        (tail ? kv_tail_from_rank : kv_block_from_rank)(full, rs.local, rr.kv_head0,
                                                        all.data() + r * local_bytes,
                                                        static_cast<uint8_t *>(host));
    }
}

}  // namespace llmkv
