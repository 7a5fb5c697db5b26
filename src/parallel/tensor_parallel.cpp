#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/factory.h"
#include "common/error.h"
#include "common/log.h"
#include "kv/kv_cache.h"
#include "model/arch/forward.h"

namespace llmkv {

// ---- KV layouts ---------------------------------------------------------------------------

KvGeometry rank_geometry(const KvGeometry &full, const ShardRanges &r) {
    KvGeometry g = full;
    g.n_kv_heads = r.n_kv_heads;
    return g;
}

namespace {

// Runs of bytes that hold one rank's heads: per sealed-block slot (or tail layer), the K
// heads then the V heads, each a contiguous run in both layouts.
template <typename Copy>
void for_block_runs(const KvGeometry &full, const KvGeometry &local, uint32_t h0, Copy copy) {
    const size_t hk = full.head_bytes_k(), hv = full.head_bytes_v(), n = local.n_kv_heads;
    for (uint32_t s = 0; s < full.block_layers(); ++s) {
        const size_t f = size_t(s) * full.sealed_layer_bytes(), l = size_t(s) * local.sealed_layer_bytes();
        copy(f + h0 * hk, l, n * hk);
        copy(f + full.n_kv_heads * hk + h0 * hv, l + n * hk, n * hv);
    }
}

template <typename Copy>
void for_tail_runs(const KvGeometry &full, const KvGeometry &local, uint32_t h0, Copy copy) {
    const size_t th = full.tail_head_bytes(), n = local.n_kv_heads;
    for (uint32_t l = 0; l < full.n_layers; ++l) {
        copy(full.tail_k_offset(l, h0), local.tail_k_offset(l, 0), n * th);
        copy(full.tail_v_offset(l, h0), local.tail_v_offset(l, 0), n * th);
    }
}

}  // namespace

void kv_block_to_rank(const KvGeometry &full, const KvGeometry &local, uint32_t h0, const uint8_t *src, uint8_t *dst) {
    for_block_runs(full, local, h0, [&](size_t f, size_t l, size_t n) { std::memcpy(dst + l, src + f, n); });
}
void kv_block_from_rank(const KvGeometry &full, const KvGeometry &local, uint32_t h0, const uint8_t *src, uint8_t *dst) {
    for_block_runs(full, local, h0, [&](size_t f, size_t l, size_t n) { std::memcpy(dst + f, src + l, n); });
}
void kv_tail_to_rank(const KvGeometry &full, const KvGeometry &local, uint32_t h0, const uint8_t *src, uint8_t *dst) {
    for_tail_runs(full, local, h0, [&](size_t f, size_t l, size_t n) { std::memcpy(dst + l, src + f, n); });
}
void kv_tail_from_rank(const KvGeometry &full, const KvGeometry &local, uint32_t h0, const uint8_t *src, uint8_t *dst) {
    for_tail_runs(full, local, h0, [&](size_t f, size_t l, size_t n) { std::memcpy(dst + f, src + l, n); });
}

// ---- one rank ---------------------------------------------------------------------------------

struct RankState {
    const LlamaConfig *model_config = nullptr;  // the whole model's
    std::unique_ptr<ModelShard> shard;
    KvGeometry local;
    std::unique_ptr<KvCache> cache;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<KvTransferQueue> queue;  // the backend's, synchronous: KV to and from host memory
    std::vector<uint8_t> staging;            // one block or tail slot in the rank's layout
    std::unique_ptr<Forward> forward;  // ranks 1..: their own forward pass (rank 0's is the engine's)
};

namespace {

constexpr uint32_t kMagic = 0x31507446;  // "FtP1"
enum Op : uint32_t { kSetup = 1, kAbort, kForward, kTransfer, kCopyTail, kShutdown };

struct Header {
    uint32_t magic = kMagic;
    uint32_t op = 0;
    uint64_t bytes = 0;  // of the payload broadcast next
};

struct SetupMessage {
    TpSetup setup;
    char fingerprint[64] = {};
};

struct Status {
    int32_t status = LLMKV_OK;
    char message[252] = {};
};

Status status_of(llmkv_status s, const std::string &message) {
    Status st;
    st.status = s;
    std::snprintf(st.message, sizeof(st.message), "%s", message.c_str());
    return st;
}

// The CUDA device of `rank`.
int rank_device(const TpSetup &setup, uint32_t rank) {
    if (setup.devices[rank] >= 0) return setup.devices[rank];
    std::string why;
    const int n = gpu_device_count(&why);
    if (n <= 0) fail(LLMKV_ERR_UNSUPPORTED, "the CUDA backend is not available: %s", why.c_str());
    return int(rank % uint32_t(n));
}

std::unique_ptr<RankState> make_rank(const LlamaModel &model, const TpSetup &setup, Communicator &comm,
                                     const RankThreads &threads, bool own_forward) {
    if (comm.size() > kMaxTpRanks) fail(LLMKV_ERR_INVALID_ARGUMENT, "%u tensor-parallel ranks (at most %u)", comm.size(), kMaxTpRanks);
    const bool cuda = setup.backend == LLMKV_BACKEND_CUDA;
    auto rs = std::make_unique<RankState>();
    rs->shard = ModelShard::make(model, comm.rank(), comm.size());
    rs->local = rank_geometry(setup.geometry, rs->shard->ranges());
    // A device rank's pools live on its device: this cache only gives their sizes (its
    // anonymous memory is never touched).
    rs->cache = std::make_unique<KvCache>(rs->local, setup.n_sealed_blocks, setup.n_tail_slots);
    rs->pool = std::make_unique<ThreadPool>(cuda ? 1 : threads.n_threads, threads.spin_us, threads.priority);
    BackendRequest br;
    br.kind = cuda ? LLMKV_BACKEND_CUDA : LLMKV_BACKEND_CPU;
    if (cuda) br.device = rank_device(setup, comm.rank());
    br.max_batch_tokens = setup.max_tokens;
    br.max_spans = std::min(setup.n_tail_slots, setup.max_tokens);  // one span per session at most
    br.cache = rs->cache.get();
    br.pool = rs->pool.get();
    rs->backend = create_backend(br);
    rs->backend->set_communicator(&comm);
    rs->queue = rs->backend->make_transfer_queue(false);
    rs->staging.resize(std::max(rs->local.sealed_block_bytes(), rs->local.tail_block_bytes()));
    if (own_forward) rs->forward = Forward::create(model, *rs->backend, setup.max_tokens, rs->shard.get());
    return rs;
}

// Every rank's setup status; throws the first failure on every rank.
void exchange_status(Communicator &comm, const Status &mine) {
    std::vector<Status> all(comm.size());
    comm.all_gather(&mine, all.data(), sizeof(Status));
    for (uint32_t r = 0; r < comm.size(); ++r) {
        if (all[r].status != LLMKV_OK) {
            all[r].message[sizeof(all[r].message) - 1] = 0;
            fail(llmkv_status(all[r].status), "tensor-parallel rank %u of %u: %s", r, comm.size(), all[r].message);
        }
    }
}

// Runs step on this rank and agrees on every rank's outcome (throws the first failure).
template <class Step>
void agree(Communicator &comm, Step step) {
    Status st;
    try {
        step();
    } catch (const Error &e) {
        st = status_of(e.status(), e.what());
    } catch (const std::bad_alloc &) {
        st = status_of(LLMKV_ERR_OUT_OF_MEMORY, "out of memory");
    }
    exchange_status(comm, st);
}

// CUDA ranks on distinct devices: every rank prepares (NCCL loaded, buffers allocated) and
// all agree before any joins the NCCL communicator rank 0 made, where each waits for all.
void connect_devices(RankState &rs, Communicator &comm, const TpSetup &setup, uint32_t n_embd) {
    if (!setup.device_collectives) return;
    agree(comm, [&] { rs.backend->prepare_device_ranks(comm.size(), uint64_t(setup.max_tokens) * n_embd); });
    agree(comm, [&] { rs.backend->connect_device_ranks(setup.comm_id, comm.size(), comm.rank()); });
}

// ---- batches on the wire ----------------------------------------------------------------------

struct Writer {
    std::vector<uint8_t> &out;
    template <typename T>
    void put(const T &v) {
        const size_t n = out.size();
        out.resize(n + sizeof(T));
        std::memcpy(out.data() + n, &v, sizeof(T));
    }
    template <typename T>
    void put_array(const T *p, size_t n) {
        const size_t at = out.size();
        out.resize(at + n * sizeof(T));
        if (n) std::memcpy(out.data() + at, p, n * sizeof(T));
    }
};

struct Reader {
    const uint8_t *p, *end;
    template <typename T>
    T get() {
        T v;
        take(&v, sizeof(T));
        return v;
    }
    void take(void *dst, size_t n) {
        if (size_t(end - p) < n) fail(LLMKV_ERR_INTERNAL, "tensor parallelism: a command is shorter than its contents");
        if (n) std::memcpy(dst, p, n);
        p += n;
    }
};

void encode_batch(const std::vector<ForwardSpan> &spans, std::vector<uint8_t> &out) {
    out.clear();
    Writer w{out};
    w.put(uint32_t(spans.size()));
    for (const ForwardSpan &s : spans) {
        w.put(s.n);
        w.put(uint32_t(s.want_logits) | uint32_t(s.all_logits) << 1);
        w.put(s.kv->n_tokens);
        w.put(s.kv->tail);
        w.put(uint32_t(s.kv->blocks.size()));
        w.put(uint32_t(s.kv->local.size()));
        w.put_array(s.tokens, s.n);
        w.put_array(s.kv->blocks.data(), s.kv->blocks.size());
        w.put_array(s.kv->local.data(), s.kv->local.size());
    }
}

struct DecodedBatch {
    std::vector<SessionKv> kv;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<ForwardSpan> spans;
};

void decode_batch(const std::vector<uint8_t> &in, DecodedBatch &b) {
    Reader r{in.data(), in.data() + in.size()};
    const uint32_t n = r.get<uint32_t>();
    b.kv.assign(n, SessionKv());
    b.tokens.assign(n, {});
    b.spans.assign(n, ForwardSpan());
    for (uint32_t i = 0; i < n; ++i) {
        ForwardSpan &s = b.spans[i];
        SessionKv &kv = b.kv[i];
        s.n = r.get<uint32_t>();
        const uint32_t flags = r.get<uint32_t>();
        s.want_logits = flags & 1;
        s.all_logits = (flags >> 1) & 1;
        kv.n_tokens = r.get<uint32_t>();
        kv.tail = r.get<int64_t>();
        kv.blocks.resize(r.get<uint32_t>());
        kv.local.resize(r.get<uint32_t>());
        b.tokens[i].resize(s.n);
        r.take(b.tokens[i].data(), s.n * sizeof(int32_t));
        r.take(kv.blocks.data(), kv.blocks.size() * sizeof(uint32_t));
        r.take(kv.local.data(), kv.local.size() * sizeof(uint32_t));
        s.tokens = b.tokens[i].data();
        s.kv = &kv;
    }
}

struct TransferItem {
    uint32_t kind;
    int64_t id;
};

// One transfer on every rank: in = rank 0's host bytes to each rank's heads; out = each
// rank's heads to rank 0's host bytes (from the lowest rank holding each head).
void run_transfer(RankState &rs, Communicator &comm, const TpSetup &setup, const TransferItem &t, void *host) {
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
    const uint8_t *mine = tail ? rs.queue->host_view_tail(t.id) : rs.queue->host_view_block(uint32_t(t.id));
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
        (tail ? kv_tail_from_rank : kv_block_from_rank)(full, rs.local, rr.kv_head0, all.data() + r * local_bytes,
                                                      static_cast<uint8_t *>(host));
    }
}

void send_command(Communicator &comm, uint32_t op, const void *payload, size_t bytes) {
    Header h;
    h.op = op;
    h.bytes = bytes;
    comm.broadcast(&h, sizeof(h), 0);
    if (bytes) comm.broadcast(const_cast<void *>(payload), bytes, 0);
}

}  // namespace

// ---- rank 0 -------------------------------------------------------------------------------------

class TpTransferQueue final : public KvTransferQueue {
public:
    explicit TpTransferQueue(TpBackend &be) : be_(be) {}
    Ticket submit(const std::vector<KvTransfer> &transfers, bool) override {
        const auto t0 = std::chrono::steady_clock::now();
        be_.transfer(transfers);
        ns_ += uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
        return 0;  // done: the ranks copy while rank 0 waits
    }
    bool done(Ticket) override { return true; }
    void wait(Ticket) override {}
    void wait_all() override {}
    uint64_t copy_ns() const override { return ns_; }

private:
    TpBackend &be_;
    uint64_t ns_ = 0;
};

TpBackend::TpBackend(const LlamaModel &model, const TpSetup &setup, Communicator &comm, const RankThreads &threads,
                     std::vector<std::unique_ptr<Communicator>> workers, const RankThreads &worker_threads)
    : model_(model), setup_(setup), comm_(comm), worker_comms_(std::move(workers)) {
    if (comm.rank() != 0) fail(LLMKV_ERR_INTERNAL, "TpBackend on rank %u", comm.rank());
    for (auto &wc : worker_comms_) {
        Communicator *c = wc.get();
        const LlamaModel *m = &model_;
        workers_.emplace_back([m, c, worker_threads] {
            try {
                serve_rank(m, "", *c, worker_threads);
            } catch (const std::exception &e) {
                LLMKV_LOG_ERROR_F("tensor-parallel rank %u: %s", c->rank(), e.what());
            }
        });
    }
    SetupMessage m;
    m.setup = setup_;
    std::snprintf(m.fingerprint, sizeof(m.fingerprint), "%s", model.fingerprint().c_str());
    Status st;
    try {
        send_command(comm_, kSetup, &m, sizeof(m));
        rank0_ = make_rank(model, setup_, comm_, threads, false);
        rank0_->model_config = &model.config();
    } catch (const Error &e) {
        st = status_of(e.status(), e.what());
    } catch (const std::bad_alloc &) {
        st = status_of(LLMKV_ERR_OUT_OF_MEMORY, "out of memory");
    }
    try {
        exchange_status(comm_, st);
        connect_devices(*rank0_, comm_, setup_, model.config().n_embd);
    } catch (...) {
        stopped_ = true;  // every rank saw the failure and left
        for (std::thread &t : workers_) t.join();
        throw;
    }
    LLMKV_LOG_INFO_F("tensor parallelism: %u ranks, rank 0 holds query heads %u-%u, KV heads %u-%u, "
                     "feed-forward columns %u-%u, vocabulary rows %u-%u; %.1f MiB of weights per rank",
                     comm_.size(), rank0_->shard->ranges().q_head0,
                     rank0_->shard->ranges().q_head0 + rank0_->shard->ranges().n_q_heads - 1,
                     rank0_->shard->ranges().kv_head0,
                     rank0_->shard->ranges().kv_head0 + rank0_->shard->ranges().n_kv_heads - 1,
                     rank0_->shard->ranges().ff0, rank0_->shard->ranges().ff0 + rank0_->shard->ranges().n_ff - 1,
                     rank0_->shard->ranges().vocab0,
                     rank0_->shard->ranges().vocab0 + rank0_->shard->ranges().n_vocab - 1,
                     rank0_->shard->weight_bytes() / 1048576.0);
}

TpBackend::~TpBackend() { stop(); }

void TpBackend::stop() {
    if (stopped_) return;
    stopped_ = true;
    if (batch_lock_.owns_lock()) {
        // The ranks wait inside a step's collectives: a shutdown would be read as its data.
        LLMKV_LOG_ERROR_F("tensor parallelism: destroyed in the middle of a step; the other ranks cannot be stopped");
        batch_lock_.unlock();
        // Thread ranks stay blocked in that collective for good: leave them their
        // communicators (leaked on purpose) rather than free what they wait on.
        for (std::thread &t : workers_) t.detach();
        for (auto &c : worker_comms_) (void)c.release();
        return;
    }
    try {
        std::lock_guard<std::mutex> l(command_mu_);
        send_command(comm_, kShutdown, nullptr, 0);
    } catch (const std::exception &e) {
        LLMKV_LOG_ERROR_F("tensor parallelism: the shutdown did not reach every rank: %s", e.what());
    }
    for (std::thread &t : workers_) t.join();
}

const ModelShard &TpBackend::shard() const { return *rank0_->shard; }
const KvGeometry &TpBackend::rank_kv_geometry() const { return rank0_->local; }
Backend &TpBackend::local() { return *rank0_->backend; }

const char *TpBackend::name() const { return rank0_->backend->name(); }
llmkv_backend TpBackend::kind() const { return rank0_->backend->kind(); }
std::string TpBackend::device_name() const {
    return strprintf("%s, %u tensor-parallel ranks", rank0_->backend->device_name().c_str(), comm_.size());
}
std::string TpBackend::kernel_id() const { return strprintf("%s+tp%u", rank0_->backend->kernel_id().c_str(), comm_.size()); }

void TpBackend::load_weights(const WeightSet &weights) { local().load_weights(weights); }
Tensor TpBackend::alloc(uint32_t rows, uint32_t cols) { return local().alloc(rows, cols); }

void TpBackend::check_in_step() const {
    // A batch that began and never ended (an exception between the two) left the other
    // ranks inside its collectives: nothing rank 0 sends can be understood any more.
    if (batch_lock_.owns_lock()) {
        fail(LLMKV_ERR_BACKEND, "tensor parallelism: a step failed midway and the ranks are out of step; "
                                "destroy the engine");
    }
}

void TpBackend::begin_batch(const std::vector<ForwardSpan> &spans, const BatchShape &shape) {
    check_in_step();
    batch_lock_ = std::unique_lock<std::mutex>(command_mu_);
    encode_batch(spans, message_);
    send_command(comm_, kForward, message_.data(), message_.size());
    local().begin_batch(spans, shape);
}
void TpBackend::embed(const WeightMatrix &table, Tensor out) { local().embed(table, out); }
void TpBackend::rms_norm(Tensor x, const float *w, float eps, Tensor out) { local().rms_norm(x, w, eps, out); }
void TpBackend::matmul(const WeightMatrix &w, Tensor x, Tensor y) { local().matmul(w, x, y); }
void TpBackend::rope(Tensor x, uint32_t n_heads, uint32_t head_dim, const RopeParams &rope) {
    local().rope(x, n_heads, head_dim, rope);
}
void TpBackend::write_kv(uint32_t layer, Tensor k, Tensor v) { local().write_kv(layer, k, v); }
void TpBackend::attention(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window, Tensor out) {
    local().attention(layer, q, n_heads, scale, window, out);
}
void TpBackend::add(Tensor x, Tensor y) { local().add(x, y); }
void TpBackend::add_bias(Tensor x, const float *bias) { local().add_bias(x, bias); }
void TpBackend::scale(Tensor x, float s) { local().scale(x, s); }
void TpBackend::swiglu(Tensor gate, Tensor up) { local().swiglu(gate, up); }
void TpBackend::geglu(Tensor gate, Tensor up) { local().geglu(gate, up); }
void TpBackend::gather_logit_rows(Tensor x, Tensor out) { local().gather_logit_rows(x, out); }
void TpBackend::logits(const WeightMatrix &w, Tensor x, float *host) { local().logits(w, x, host); }
void TpBackend::all_reduce(Tensor x) { local().all_reduce(x); }
void TpBackend::gather_logits(const float *l, uint32_t rows, uint32_t local_cols, uint32_t stride, uint32_t n_vocab,
                              float *host) {
    local().gather_logits(l, rows, local_cols, stride, n_vocab, host);
}
void TpBackend::end_batch() {
    local().end_batch();
    if (batch_lock_.owns_lock()) batch_lock_.unlock();
}

std::unique_ptr<KvTransferQueue> TpBackend::make_transfer_queue(bool) { return std::make_unique<TpTransferQueue>(*this); }
HostAllocator TpBackend::host_allocator() { return local().host_allocator(); }

void TpBackend::copy_tail(int64_t from, int64_t to) {
    check_in_step();
    std::lock_guard<std::mutex> l(command_mu_);
    const int64_t ids[2] = {from, to};
    send_command(comm_, kCopyTail, ids, sizeof(ids));
    local().copy_tail(from, to);
}

void TpBackend::transfer(const std::vector<KvTransfer> &transfers) {
    check_in_step();
    std::lock_guard<std::mutex> l(command_mu_);
    message_.clear();
    Writer w{message_};
    w.put(uint32_t(transfers.size()));
    for (const KvTransfer &t : transfers) w.put(TransferItem{uint32_t(t.kind), t.id});
    send_command(comm_, kTransfer, message_.data(), message_.size());
    for (const KvTransfer &t : transfers) run_transfer(*rank0_, comm_, setup_, {uint32_t(t.kind), t.id}, t.host);
}

Backend::MemoryUsage TpBackend::memory_usage() const {
    MemoryUsage m = rank0_->backend->memory_usage();
    m.weights = rank0_->shard->weight_bytes();
    m.weights *= comm_.size();
    m.kv *= comm_.size();
    m.other *= comm_.size();
    return m;
}

// ---- ranks 1.. ----------------------------------------------------------------------------------

void abort_ranks(Communicator &comm, const std::string &why) {
    Status st = status_of(LLMKV_ERR_BACKEND, why);
    send_command(comm, kAbort, &st, sizeof(st));
}

void serve_rank(const LlamaModel *model, const std::string &load_error, Communicator &comm, const RankThreads &threads) {
    Header h;
    comm.broadcast(&h, sizeof(h), 0);
    if (h.magic != kMagic) fail(LLMKV_ERR_BACKEND, "tensor parallelism: rank 0 does not speak this protocol");
    if (h.op == kAbort) {
        Status st;
        comm.broadcast(&st, sizeof(st), 0);
        st.message[sizeof(st.message) - 1] = 0;
        fail(LLMKV_ERR_BACKEND, "rank 0 stopped before setting up: %s", st.message);
    }
    if (h.op != kSetup || h.bytes != sizeof(SetupMessage)) fail(LLMKV_ERR_BACKEND, "tensor parallelism: no setup from rank 0");
    SetupMessage m;
    comm.broadcast(&m, sizeof(m), 0);
    m.fingerprint[sizeof(m.fingerprint) - 1] = 0;
    Status st;
    std::unique_ptr<RankState> rs;
    if (!load_error.empty()) {
        st = status_of(LLMKV_ERR_MODEL_FORMAT, load_error);
    } else if (!model || model->fingerprint() != m.fingerprint) {
        st = status_of(LLMKV_ERR_INVALID_ARGUMENT,
                       strprintf("its model (fingerprint %s) is not rank 0's (%s)", model ? model->fingerprint().c_str() : "-",
                                 m.fingerprint));
    } else {
        try {
            rs = make_rank(*model, m.setup, comm, threads, true);
            rs->model_config = &model->config();
        } catch (const Error &e) {
            st = status_of(e.status(), e.what());
        } catch (const std::bad_alloc &) {
            st = status_of(LLMKV_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    exchange_status(comm, st);
    connect_devices(*rs, comm, m.setup, model->config().n_embd);

    std::vector<uint8_t> payload;
    DecodedBatch batch;
    std::vector<float> logits;
    for (;;) {
        comm.broadcast(&h, sizeof(h), 0);
        if (h.magic != kMagic) fail(LLMKV_ERR_BACKEND, "tensor parallelism: a garbled command from rank 0");
        payload.resize(h.bytes);
        if (h.bytes) comm.broadcast(payload.data(), h.bytes, 0);
        if (h.op == kShutdown) return;
        try {
            switch (h.op) {
                case kForward:
                    decode_batch(payload, batch);
                    rs->forward->run(batch.spans, logits);
                    break;
                case kTransfer: {
                    Reader r{payload.data(), payload.data() + payload.size()};
                    const uint32_t n = r.get<uint32_t>();
                    for (uint32_t i = 0; i < n; ++i) run_transfer(*rs, comm, m.setup, r.get<TransferItem>(), nullptr);
                    break;
                }
                case kCopyTail: {
                    Reader r{payload.data(), payload.data() + payload.size()};
                    const int64_t from = r.get<int64_t>(), to = r.get<int64_t>();
                    rs->backend->copy_tail(from, to);
                    break;
                }
                default: fail(LLMKV_ERR_BACKEND, "tensor parallelism: unknown command %u from rank 0", h.op);
            }
        } catch (const std::exception &e) {
            // The other ranks are inside the same collective sequence; one that leaves it
            // midway leaves them waiting forever. Stop loudly instead (as a failed NCCL rank).
            LLMKV_LOG_ERROR_F("tensor-parallel rank %u failed in a command: %s", comm.rank(), e.what());
            std::abort();
        }
    }
}

}  // namespace llmkv
