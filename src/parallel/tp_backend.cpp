// TpBackend: rank 0's Backend. Its ops run on rank 0's own rank; each batch, KV transfer and
// tail copy is first sent to ranks 1.. as a command (wire.h), one command at a time.
#include <chrono>
#include <cstdio>

#include "common/error.h"
#include "common/log.h"
#include "parallel/rank_state.h"
#include "parallel/tensor_parallel.h"
#include "parallel/wire.h"

namespace llmkv {

class TpTransferQueue final : public KvTransferQueue {
public:
    explicit TpTransferQueue(TpBackend &be) : be_(be) {}
    Ticket submit(const std::vector<KvTransfer> &transfers, bool) override {
        const auto t0 = std::chrono::steady_clock::now();
        be_.transfer(transfers);
        ns_ += uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - t0)
                            .count());
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

TpBackend::TpBackend(const LlamaModel &model, const TpSetup &setup, Communicator &comm,
                     const RankThreads &threads, std::vector<std::unique_ptr<Communicator>> workers,
                     const RankThreads &worker_threads)
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
    wire::SetupMessage m;
    m.setup = setup_;
    std::snprintf(m.fingerprint, sizeof(m.fingerprint), "%s", model.fingerprint().c_str());
    wire::Status st;
    try {
        wire::send_command(comm_, wire::kSetup, &m, sizeof(m));
        rank0_ = make_rank(model, setup_, comm_, threads, false);
        rank0_->model_config = &model.config();
    } catch (const Error &e) {
        st = wire::status_of(e.status(), e.what());
    } catch (const std::bad_alloc &) {
        st = wire::status_of(LLMKV_ERR_OUT_OF_MEMORY, "out of memory");
    }
    try {
        wire::exchange_status(comm_, st);
        connect_devices(*rank0_, comm_, setup_, model.config().n_embd);
    } catch (...) {
        stopped_ = true;  // every rank saw the failure and left
        for (std::thread &t : workers_) t.join();
        throw;
    }
    LLMKV_LOG_INFO_F(
        "tensor parallelism: %u ranks, rank 0 holds query heads %u-%u, KV heads %u-%u, "
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

TpBackend::~TpBackend() {
    stop();
}

void TpBackend::stop() {
    if (stopped_) return;
    stopped_ = true;
    if (batch_lock_.owns_lock()) {
        // The ranks wait inside a step's collectives: a shutdown would be read as its data.
        LLMKV_LOG_ERROR_F(
            "tensor parallelism: destroyed in the middle of a step; the other ranks cannot be "
            "stopped");
        batch_lock_.unlock();
        // Thread ranks stay blocked in that collective for good: leave them their
        // communicators (leaked on purpose) rather than free what they wait on.
        for (std::thread &t : workers_) t.detach();
        for (auto &c : worker_comms_) (void)c.release();
        return;
    }
    try {
        std::lock_guard<std::mutex> l(command_mu_);
        wire::send_command(comm_, wire::kShutdown, nullptr, 0);
    } catch (const std::exception &e) {
        LLMKV_LOG_ERROR_F("tensor parallelism: the shutdown did not reach every rank: %s",
                          e.what());
    }
    for (std::thread &t : workers_) t.join();
}

const ModelShard &TpBackend::shard() const {
    return *rank0_->shard;
}
const KvGeometry &TpBackend::rank_kv_geometry() const {
    return rank0_->local;
}
Backend &TpBackend::local() {
    return *rank0_->backend;
}

const char *TpBackend::name() const {
    return rank0_->backend->name();
}
llmkv_backend TpBackend::kind() const {
    return rank0_->backend->kind();
}
std::string TpBackend::device_name() const {
    return strprintf("%s, %u tensor-parallel ranks", rank0_->backend->device_name().c_str(),
                     comm_.size());
}
std::string TpBackend::kernel_id() const {
    return strprintf("%s+tp%u", rank0_->backend->kernel_id().c_str(), comm_.size());
}

void TpBackend::load_weights(const WeightSet &weights) {
    local().load_weights(weights);
}
Tensor TpBackend::alloc(uint32_t rows, uint32_t cols) {
    return local().alloc(rows, cols);
}

void TpBackend::check_in_step() const {
    // A batch that began and never ended (an exception between the two) left the other
    // ranks inside its collectives: nothing rank 0 sends can be understood any more.
    if (batch_lock_.owns_lock()) {
        fail(LLMKV_ERR_BACKEND,
             "tensor parallelism: a step failed midway and the ranks are out of step; "
             "destroy the engine");
    }
}

void TpBackend::begin_batch(const std::vector<ForwardSpan> &spans, const BatchShape &shape) {
    check_in_step();
    batch_lock_ = std::unique_lock<std::mutex>(command_mu_);
    wire::encode_batch(spans, message_);
    wire::send_command(comm_, wire::kForward, message_.data(), message_.size());
    local().begin_batch(spans, shape);
}
void TpBackend::embed(const WeightMatrix &table, Tensor out) {
    local().embed(table, out);
}
void TpBackend::rms_norm(Tensor x, const float *w, float eps, Tensor out) {
    local().rms_norm(x, w, eps, out);
}
void TpBackend::matmul(const WeightMatrix &w, Tensor x, Tensor y) {
    local().matmul(w, x, y);
}
void TpBackend::rope(Tensor x, uint32_t n_heads, uint32_t head_dim, const RopeParams &rope) {
    local().rope(x, n_heads, head_dim, rope);
}
void TpBackend::write_kv(uint32_t layer, Tensor k, Tensor v) {
    local().write_kv(layer, k, v);
}
void TpBackend::attention(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                          Tensor out) {
    local().attention(layer, q, n_heads, scale, window, out);
}
void TpBackend::add(Tensor x, Tensor y) {
    local().add(x, y);
}
void TpBackend::add_bias(Tensor x, const float *bias) {
    local().add_bias(x, bias);
}
void TpBackend::scale(Tensor x, float s) {
    local().scale(x, s);
}
void TpBackend::swiglu(Tensor gate, Tensor up) {
    local().swiglu(gate, up);
}
void TpBackend::geglu(Tensor gate, Tensor up) {
    local().geglu(gate, up);
}
void TpBackend::route_experts(Tensor logits, const ExpertRouting &r, Tensor routes) {
    local().route_experts(logits, r, routes);
}
void TpBackend::matmul_experts(const WeightMatrix *experts, uint32_t n_expert, Tensor x,
                               Tensor routes, uint32_t n_used, Tensor y) {
    local().matmul_experts(experts, n_expert, x, routes, n_used, y);
}
void TpBackend::combine_experts(Tensor y, Tensor routes, uint32_t n_used, Tensor out) {
    local().combine_experts(y, routes, n_used, out);
}
void TpBackend::mul_sigmoid(Tensor x, Tensor g) {
    local().mul_sigmoid(x, g);
}
void TpBackend::add_expert_bias(Tensor y, Tensor routes, uint32_t n_used, const float *const *bias,
                                uint32_t n_expert) {
    local().add_expert_bias(y, routes, n_used, bias, n_expert);
}
void TpBackend::attention_sinks(uint32_t layer, Tensor q, uint32_t n_heads, float scale,
                                uint32_t window, const float *sinks, Tensor out) {
    local().attention_sinks(layer, q, n_heads, scale, window, sinks, out);
}
void TpBackend::swiglu_oai(Tensor gate, Tensor up, float alpha, float limit) {
    local().swiglu_oai(gate, up, alpha, limit);
}
void TpBackend::gather_logit_rows(Tensor x, Tensor out) {
    local().gather_logit_rows(x, out);
}
void TpBackend::logits(const WeightMatrix &w, Tensor x, float *host) {
    local().logits(w, x, host);
}
void TpBackend::all_reduce(Tensor x) {
    local().all_reduce(x);
}
void TpBackend::gather_logits(const float *l, uint32_t rows, uint32_t local_cols, uint32_t stride,
                              uint32_t n_vocab, float *host) {
    local().gather_logits(l, rows, local_cols, stride, n_vocab, host);
}
void TpBackend::end_batch() {
    local().end_batch();
    if (batch_lock_.owns_lock()) batch_lock_.unlock();
}

std::unique_ptr<KvTransferQueue> TpBackend::make_transfer_queue(bool) {
    return std::make_unique<TpTransferQueue>(*this);
}
HostAllocator TpBackend::host_allocator() {
    return local().host_allocator();
}

void TpBackend::copy_tail(int64_t from, int64_t to) {
    check_in_step();
    std::lock_guard<std::mutex> l(command_mu_);
    const int64_t ids[2] = {from, to};
    wire::send_command(comm_, wire::kCopyTail, ids, sizeof(ids));
    local().copy_tail(from, to);
}

void TpBackend::transfer(const std::vector<KvTransfer> &transfers) {
    check_in_step();
    std::lock_guard<std::mutex> l(command_mu_);
    message_.clear();
    wire::Writer w{message_};
    w.put(uint32_t(transfers.size()));
    for (const KvTransfer &t : transfers) w.put(wire::TransferItem{uint32_t(t.kind), t.id});
    wire::send_command(comm_, wire::kTransfer, message_.data(), message_.size());
    for (const KvTransfer &t : transfers)
        run_transfer(*rank0_, comm_, setup_, {uint32_t(t.kind), t.id}, t.host);
}

Backend::MemoryUsage TpBackend::memory_usage() const {
    MemoryUsage m = rank0_->backend->memory_usage();
    m.weights = rank0_->shard->weight_bytes();
    m.weights *= comm_.size();
    m.kv *= comm_.size();
    m.other *= comm_.size();
    return m;
}

}  // namespace llmkv
