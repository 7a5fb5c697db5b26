// CudaModule (loading libllmkv-cuda.so / llmkv-cuda.dll, ABI check) and CudaBackend (the Backend of
// backend/backend.h over the module's op-level C ABI: weight matrices uploaded packed and
// decoded to fp16 on the device, the device context, the ops, the KV transfer queue over the
// module's copy stream, pinned host memory for the host tier). Compiled into libllmkv on
// every machine: no CUDA header or library is involved, only the platform layer's loader.
#include "backend/cuda/cuda_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/communicator.h"
#include "common/error.h"
#include "common/half.h"
#include "platform/os.h"

namespace llmkv {

// ---- CudaModule -------------------------------------------------------------------------

namespace {

std::string libllmkv_directory() {
    return os::directory_of_binary_containing(reinterpret_cast<const void *>(&CudaModule::get));
}

}  // namespace

const CudaModule &CudaModule::get() {
    static const CudaModule module;
    return module;
}

CudaModule::CudaModule() {
    std::vector<std::string> tried;
    if (const char *env = std::getenv("LLMKV_CUDA_MODULE"); env && *env) {
        if (try_load(env)) return;
        tried.push_back(error_);
    }
    const std::string dir = libllmkv_directory();
    if (!dir.empty()) {
        if (try_load(dir + "/" + os::shared_library_file(LLMKV_CUDA_MODULE_STEM))) return;
        tried.push_back(error_);
    }
    if (try_load(os::shared_library_file(LLMKV_CUDA_MODULE_STEM))) return;
    tried.push_back(error_);
    error_ = "the CUDA module could not be loaded:";
    for (const std::string &t : tried) error_ += " [" + t + "]";
}

bool CudaModule::try_load(const std::string &path) {
    void *h = os::load_library(path, error_);
    if (!h) return false;
    auto get_api =
        reinterpret_cast<llmkv_cuda_get_api_fn>(os::library_symbol(h, LLMKV_CUDA_GET_API_SYMBOL));
    if (!get_api) {
        error_ = strprintf("%s: no symbol %s", path.c_str(), LLMKV_CUDA_GET_API_SYMBOL);
        os::unload_library(h);
        return false;
    }
    const llmkv_cuda_api *api = get_api(LLMKV_CUDA_ABI_VERSION);
    if (!api || api->abi_version != LLMKV_CUDA_ABI_VERSION ||
        api->struct_size < sizeof(llmkv_cuda_api)) {
        error_ = strprintf("%s: CUDA module ABI mismatch (libllmkv wants version %u)", path.c_str(),
                           LLMKV_CUDA_ABI_VERSION);
        os::unload_library(h);
        return false;
    }
    handle_ = h;  // never closed: kernels and cuBLAS state live as long as the process
    api_ = api;
    path_ = path;
    error_.clear();
    return true;
}

int CudaModule::device_count(std::string *why) const {
    if (!api_) {
        if (why) *why = error_;
        return 0;
    }
    int32_t n = 0;
    char err[512] = {0};
    if (api_->device_count(&n, err, sizeof err) != LLMKV_CUDA_OK) {
        if (why) *why = err;
        return 0;
    }
    return n;
}

// ---- CudaBackend ------------------------------------------------------------------------

int cuda_device_count(std::string *why) {
    return CudaModule::get().device_count(why);
}

// The one conversion of a KvGeometry (and the pool sizes) into the ABI's plain C struct.
llmkv_cuda_kv_desc cuda_kv_desc(const KvGeometry &g, uint32_t n_sealed_blocks,
                                uint32_t n_tail_slots) {
    llmkv_cuda_kv_desc kd{};
    kd.struct_size = sizeof kd;
    kd.n_layers = g.n_layers;
    kd.n_kv_heads = g.n_kv_heads;
    kd.head_dim = g.head_dim;
    kd.block_tokens = g.block_tokens;
    kd.residual_tokens = g.residual_tokens;
    kd.dtype_k = uint32_t(g.dtype_k);
    kd.dtype_v = uint32_t(g.dtype_v);
    kd.rotate_k = g.rotate_k ? 1 : 0;
    kd.rotate_v = g.rotate_v ? 1 : 0;
    kd.n_sealed_blocks = n_sealed_blocks;
    kd.n_tail_slots = n_tail_slots;
    kd.sealed_block_bytes = g.sealed_block_bytes();
    kd.tail_block_bytes = g.tail_block_bytes();
    kd.sink = g.sink ? 1 : 0;
    kd.window = g.window;
    kd.n_groups = g.n_groups;
    kd.group_layers = g.group_layers;
    kd.local_mask[0] = g.local_mask[0];
    kd.local_mask[1] = g.local_mask[1];
    return kd;
}

namespace {

llmkv_status status_of(llmkv_cuda_status s) {
    switch (s) {
        case LLMKV_CUDA_ERR_OUT_OF_MEMORY:
            return LLMKV_ERR_OUT_OF_MEMORY;
        case LLMKV_CUDA_ERR_INVALID:
            return LLMKV_ERR_INVALID_ARGUMENT;
        case LLMKV_CUDA_ERR_UNSUPPORTED:
            return LLMKV_ERR_UNSUPPORTED;
        default:
            return LLMKV_ERR_BACKEND;
    }
}

// Throws the llmkv::Error for a failed module call, with the context's message.
void check_cuda(const llmkv_cuda_api *api, const llmkv_cuda_context *ctx, llmkv_cuda_status s,
                const char *what) {
    if (s == LLMKV_CUDA_OK) return;
    const char *msg = (api && ctx) ? api->last_error(ctx) : "";
    fail(status_of(s), "CUDA backend: %s: %s", what, msg && *msg ? msg : "failed");
}

llmkv_cuda_tensor dev(const Tensor &t) {
    return llmkv_cuda_tensor{t.data, t.rows, t.cols};
}

// What the host allocator's callbacks share with the backend: the context is cleared when
// the backend goes, after which alloc returns nullptr and free still works (portable
// pinned memory needs no context).
struct HostAllocState {
    std::mutex mu;
    const llmkv_cuda_api *api = nullptr;
    llmkv_cuda_context *ctx = nullptr;
    std::unordered_map<void *, void *> bases;  // aligned pointer -> cudaHostAlloc pointer
};

// KV transfers over the module: sealed blocks asynchronously on its copy stream (one call
// per direction), tail slots synchronously (small). Tickets are the module's copy tickets.
class CudaTransferQueue final : public KvTransferQueue {
public:
    CudaTransferQueue(const llmkv_cuda_api *api, llmkv_cuda_context *ctx, bool async)
        : api_(api), ctx_(ctx), async_(async) {}

    Ticket submit(const std::vector<KvTransfer> &transfers, bool sync) override {
        out_ids_.clear();
        in_ids_.clear();
        out_host_.clear();
        in_host_.clear();
        for (const KvTransfer &t : transfers) {
            if (t.id < 0 || t.id > int64_t(UINT32_MAX))
                fail(LLMKV_ERR_INTERNAL, "CUDA transfer: no block / tail slot (%lld)",
                     (long long)t.id);
            switch (t.kind) {
                case KvTransfer::kBlockOut:
                    out_ids_.push_back(uint32_t(t.id));
                    out_host_.push_back(t.host);
                    break;
                case KvTransfer::kBlockIn:
                    in_ids_.push_back(uint32_t(t.id));
                    in_host_.push_back(t.host);
                    break;
                case KvTransfer::kTailOut:
                    check(api_->read_tail(ctx_, uint32_t(t.id), t.host), "read_tail");
                    break;
                case KvTransfer::kTailIn:
                    check(api_->write_tail(ctx_, uint32_t(t.id), t.host), "write_tail");
                    break;
            }
        }
        uint64_t ticket = 0;
        if (!out_ids_.empty()) {
            check(api_->read_blocks_async(ctx_, out_ids_.data(), uint32_t(out_ids_.size()),
                                          out_host_.data(), &ticket),
                  "read_blocks_async");
        }
        if (!in_ids_.empty()) {
            if (ticket) wait(ticket);  // one ticket per call: finish the other direction first
            check(api_->write_blocks_async(ctx_, in_ids_.data(), uint32_t(in_ids_.size()),
                                           in_host_.data(), &ticket),
                  "write_blocks_async");
        }
        if (ticket) last_ = ticket;
        if ((sync || !async_) && ticket) {
            wait(ticket);
            return 0;
        }
        return ticket;
    }
    bool done(Ticket t) override {
        if (t == 0) return true;
        const llmkv_cuda_status s = api_->copy_query(ctx_, t);
        if (s == LLMKV_CUDA_NOT_READY) return false;
        check(s, "copy_query");
        return true;
    }
    void wait(Ticket t) override {
        if (t == 0) return;
        check(api_->copy_wait(ctx_, t), "copy_wait");
    }
    void wait_all() override { wait(last_); }
    uint64_t copy_ns() const override { return 0; }

private:
    void check(llmkv_cuda_status s, const char *what) const { check_cuda(api_, ctx_, s, what); }

    const llmkv_cuda_api *api_;
    llmkv_cuda_context *ctx_;
    bool async_;
    Ticket last_ = 0;
    std::vector<uint32_t> out_ids_, in_ids_;  // scratch of submit
    std::vector<void *> out_host_;
    std::vector<const void *> in_host_;
};

class CudaBackend final : public Backend {
public:
    CudaBackend(const KvGeometry &geometry, const CudaBackendOptions &options)
        : geometry_(geometry), options_(options) {
        const CudaModule &module = CudaModule::get();
        std::string why;
        if (module.device_count(&why) == 0)
            fail(LLMKV_ERR_BACKEND, "CUDA backend unavailable: %s", why.c_str());
        api_ = module.api();
        if (options_.max_batch_tokens == 0)
            fail(LLMKV_ERR_INVALID_ARGUMENT, "CUDA backend: max_batch_tokens is 0");

        char err[1024] = {0};
        uint64_t free_b = 0, total_b = 0;
        char name[256] = {0};
        if (api_->device_info(options_.device, name, sizeof name, &free_b, &total_b, err,
                              sizeof err) != LLMKV_CUDA_OK) {
            fail(LLMKV_ERR_BACKEND, "CUDA device %d: %s", options_.device, err);
        }
        device_name_ = name;

        const llmkv_cuda_kv_desc kd =
            cuda_kv_desc(geometry_, options_.n_sealed_blocks, options_.n_tail_slots);
        llmkv_cuda_context_params cp{};
        cp.struct_size = sizeof cp;
        cp.device = options_.device;
        cp.max_batch_tokens = options_.max_batch_tokens;
        cp.max_spans = options_.max_spans;
        cp.attention_workspace_bytes = options_.attention_workspace_bytes;
        cp.batch_invariant = options_.batch_invariant ? 1 : 0;
        const llmkv_cuda_status s = api_->create(&kd, &cp, &ctx_, err, sizeof err);
        if (s != LLMKV_CUDA_OK) {
            ctx_ = nullptr;
            fail(status_of(s), "CUDA backend on %s: %s", device_name_.c_str(), err);
        }
        host_ = std::make_shared<HostAllocState>();
        host_->api = api_;
        host_->ctx = ctx_;
    }

    ~CudaBackend() override {
        {
            std::lock_guard<std::mutex> lock(host_->mu);
            host_->ctx = nullptr;
        }
        if (api_ && ctx_) api_->destroy(ctx_);
    }

    const char *name() const override { return "cuda"; }
    std::string device_name() const override { return device_name_; }
    // The arithmetic that computed a KV block (a prefix snapshot records it): "cuda" with fp16
    // weights, "-q" once a matrix is kept encoded (decode steps read exact weights and f32
    // inputs), "-bi" in batch-invariant mode (prefill through the matvec too).
    std::string kernel_id() const override {
        return std::string("cuda") + (any_encoded_ ? "-q" : "") +
               (options_.batch_invariant ? "-bi" : "");
    }
    llmkv_backend kind() const override { return LLMKV_BACKEND_CUDA; }

    void load_weights(const WeightSet &weights) override {
        for (const WeightMatrix *w : weights.matrices) {
            // A tied head is uploaded once; a rank's vocabulary rows of it (tensor
            // parallelism) start at the same address with fewer rows: a matrix of its own.
            if (!w || find_matrix(*w)) continue;
            if (w->rows <= 0 || w->cols <= 0 || w->rows > int64_t(UINT32_MAX) ||
                w->cols > int64_t(UINT32_MAX))
                fail(LLMKV_ERR_UNSUPPORTED, "CUDA backend: weight matrix of %lld x %lld",
                     (long long)w->rows, (long long)w->cols);
            // Packed rows as in the file (no host temporaries), kept so on the device or
            // decoded there to fp16; a value beyond the fp16 range is LLMKV_ERR_UNSUPPORTED,
            // naming it.
            llmkv_cuda_weight handle = 0;
            const bool keep_encoded = !options_.fp16_weights && w->type != TensorType::F32 &&
                                      w->type != TensorType::F16 && w->type != TensorType::BF16;
            const auto upload =
                keep_encoded ? api_->upload_matrix_quantized : api_->upload_matrix_packed;
            check(upload(ctx_, uint32_t(w->type), w->data, uint32_t(w->rows), uint32_t(w->cols),
                         uint64_t(w->row_bytes), &handle),
                  "uploading a weight matrix");
            any_encoded_ = any_encoded_ || keep_encoded;
            matrices_[w->data].push_back(Matrix{handle, uint32_t(w->rows), uint32_t(w->cols)});
        }
        for (const WeightSet::Vector &v : weights.vectors) {
            if (!v.data || vectors_.count(v.data)) continue;
            llmkv_cuda_weight handle = 0;
            check(api_->upload_vector(ctx_, v.data, v.n, &handle), "uploading a weight vector");
            vectors_[v.data] = handle;
        }
    }

    Tensor alloc(uint32_t rows, uint32_t cols) override {
        llmkv_cuda_tensor t{};
        check(api_->alloc_activation(ctx_, rows, cols, &t), "allocating activations");
        return Tensor{t.data, t.rows, t.cols};
    }

    const KvGeometry &kv_geometry() const override { return geometry_; }

    void begin_batch(const std::vector<ForwardSpan> &spans, const BatchShape &shape) override {
        static_assert(SessionKv::kHostBlock == LLMKV_CUDA_HOST_BLOCK,
                      "host-tier blocks are named the same way on both sides");
        static_assert(SessionKv::kReleased == LLMKV_CUDA_RELEASED_BLOCK,
                      "released local blocks are named the same way on both sides");
        spans_.resize(spans.size());
        for (size_t i = 0; i < spans.size(); ++i) {
            const ForwardSpan &s = spans[i];
            if (s.kv->tail < 0) fail(LLMKV_ERR_INTERNAL, "CUDA backend: span without a tail slot");
            llmkv_cuda_span &c = spans_[i];
            // Host-tier blocks (long context beyond the device pool): block_data[j] is the
            // block's pinned, mapped host memory; the kernels read it in place.
            c.host_blocks = reinterpret_cast<const void *const *>(s.block_data);
            c.blocks = s.kv->blocks.data();
            c.n_blocks = uint32_t(s.kv->blocks.size());
            c.tail_slot = uint32_t(s.kv->tail);
            c.pos0 = s.kv->n_tokens;
            c.tokens = s.tokens;
            c.n = s.n;
            c.want_logits = s.want_logits ? 1 : 0;
            c.all_logits = s.all_logits ? 1 : 0;
            // Layer groups: each sealed token block's local-group blocks.
            c.local_blocks = geometry_.grouped() ? s.kv->local.data() : nullptr;
        }
        uint32_t n_tokens = 0, n_logit_rows = 0;
        check(api_->begin_batch(ctx_, spans_.data(), uint32_t(spans_.size()), &n_tokens,
                                &n_logit_rows),
              "begin_batch");
        if (n_tokens != shape.tokens || n_logit_rows != shape.logit_rows)
            fail(LLMKV_ERR_INTERNAL, "CUDA backend: batch shape %u/%u, the module counts %u/%u",
                 shape.tokens, shape.logit_rows, n_tokens, n_logit_rows);
    }

    void embed(const WeightMatrix &table, Tensor out) override {
        check(api_->embed(ctx_, matrix(table), dev(out)), "embed");
    }
    void rms_norm(Tensor x, const float *weight, float eps, Tensor out) override {
        check(api_->rms_norm(ctx_, dev(x), vector(weight), eps, dev(out)), "rms_norm");
    }
    void matmul(const WeightMatrix &w, Tensor x, Tensor y) override {
        check(api_->matmul(ctx_, matrix(w), dev(x), dev(y)), "matmul");
    }
    void rope(Tensor x, uint32_t n_heads, uint32_t head_dim, const RopeParams &rope) override {
        const uint32_t style = rope.style == RopeParams::Style::kHalves ? LLMKV_CUDA_ROPE_HALVES
                                                                        : LLMKV_CUDA_ROPE_ADJACENT;
        const llmkv_cuda_weight f = rope.rope_dim ? inv_freq(rope.inv_freq, rope.rope_dim / 2) : 0;
        check(api_->rope(ctx_, dev(x), n_heads, head_dim, rope.rope_dim, style, rope.freq_scale, f),
              "rope");
    }
    void write_kv(uint32_t layer, Tensor k, Tensor v) override {
        check(api_->write_kv(ctx_, layer, dev(k), dev(v)), "write_kv");
    }
    void attention(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                   Tensor out) override {
        check(api_->attention(ctx_, layer, dev(q), n_heads, scale, window, dev(out)), "attention");
    }
    void attention_sinks(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                         const float *sinks, Tensor out) override {
        check(api_->attention_sinks(ctx_, layer, dev(q), n_heads, scale, window, vector(sinks),
                                    dev(out)),
              "attention_sinks");
    }
    void swiglu_oai(Tensor gate, Tensor up, float alpha, float limit) override {
        check(api_->swiglu_oai(ctx_, dev(gate), dev(up), alpha, limit), "swiglu_oai");
    }
    void add_expert_bias(Tensor y, Tensor routes, uint32_t n_used, const float *const *bias,
                         uint32_t n_expert) override {
        bias_handles_.resize(n_expert);
        for (uint32_t e = 0; e < n_expert; ++e)  // 0: another rank's expert, or none
            bias_handles_[e] = bias[e] ? vector(bias[e]) : 0;
        check(api_->add_expert_bias(ctx_, dev(y), dev(routes), n_used, bias_handles_.data(),
                                    n_expert),
              "add_expert_bias");
    }
    void add(Tensor x, Tensor y) override { check(api_->add(ctx_, dev(x), dev(y)), "add"); }
    void add_bias(Tensor x, const float *bias) override {
        check(api_->add_bias(ctx_, dev(x), vector(bias)), "add_bias");
    }
    void scale(Tensor x, float s) override { check(api_->scale(ctx_, dev(x), s), "scale"); }
    void swiglu(Tensor gate, Tensor up) override {
        check(api_->swiglu(ctx_, dev(gate), dev(up)), "swiglu");
    }
    void geglu(Tensor gate, Tensor up) override {
        check(api_->geglu(ctx_, dev(gate), dev(up)), "geglu");
    }
    void route_experts(Tensor logits, const ExpertRouting &r, Tensor routes) override {
        check(api_->route_experts(ctx_, dev(logits), r.n_expert, r.n_used, route_flags(r),
                                  r.weight_scale, dev(routes)),
              "route_experts");
    }
    void matmul_experts(const WeightMatrix *experts, uint32_t n_expert, Tensor x, Tensor routes,
                        uint32_t n_used, Tensor y) override {
        expert_handles_.resize(n_expert);
        for (uint32_t e = 0; e < n_expert; ++e)  // 0: another rank's expert
            expert_handles_[e] = experts[e].data ? matrix(experts[e]) : 0;
        check(api_->matmul_experts(ctx_, expert_handles_.data(), n_expert, dev(x), dev(routes),
                                   n_used, dev(y)),
              "matmul_experts");
    }
    void combine_experts(Tensor y, Tensor routes, uint32_t n_used, Tensor out) override {
        check(api_->combine_experts(ctx_, dev(y), dev(routes), n_used, dev(out)),
              "combine_experts");
    }
    void mul_sigmoid(Tensor x, Tensor g) override {
        check(api_->mul_sigmoid(ctx_, dev(x), dev(g)), "mul_sigmoid");
    }
    void gather_logit_rows(Tensor x, Tensor out) override {
        check(api_->gather_logit_rows(ctx_, dev(x), dev(out)), "gather_logit_rows");
    }
    void logits(const WeightMatrix &w, Tensor x, float *host) override {
        check(api_->logits(ctx_, matrix(w), dev(x), host), "logits");
    }
    void end_batch() override { check(api_->end_batch(ctx_), "end_batch"); }

    // ---- tensor parallelism: NCCL on the compute stream, or through host memory ----------
    void set_communicator(Communicator *comm) override { comm_ = comm; }
    void prepare_device_ranks(uint32_t n_ranks, uint64_t max_elements) override {
        check(api_->comm_prepare(ctx_, n_ranks, max_elements), "preparing the NCCL communicator");
    }
    void connect_device_ranks(const DeviceCommId &id, uint32_t n_ranks, uint32_t rank) override {
        check(api_->comm_init(ctx_, id.data(), n_ranks, rank), "joining the NCCL communicator");
        device_collectives_ = true;
    }
    void all_reduce(Tensor x) override {
        if (device_collectives_) {
            check(api_->all_reduce_sum(ctx_, dev(x)), "all_reduce_sum");
            return;
        }
        if (!comm_ || comm_->size() <= 1) return;
        // Ranks sharing a device, or no NCCL: the rows through host memory, summed in rank
        // order by the communicator (the same adds as the device path).
        host_rows_.resize(size_t(x.rows) * x.cols);
        check(api_->read_activation(ctx_, dev(x), host_rows_.data()), "read_activation");
        comm_->all_reduce_sum(host_rows_.data(), host_rows_.size());
        check(api_->write_activation(ctx_, dev(x), host_rows_.data()), "write_activation");
    }
    void gather_logits(const float *local, uint32_t rows, uint32_t local_cols, uint32_t stride,
                       uint32_t n_vocab, float *host) override {
        gather_logits_over(comm_, local, rows, local_cols, stride, n_vocab, host);
    }

    std::unique_ptr<KvTransferQueue> make_transfer_queue(bool async) override {
        return std::make_unique<CudaTransferQueue>(api_, ctx_, async);
    }

    // Page-locked memory from cudaHostAlloc, aligned inside a slightly larger allocation.
    HostAllocator host_allocator() override {
        std::shared_ptr<HostAllocState> st = host_;
        HostAllocator a;
        a.name = "cudaHostAlloc";
        a.alloc = [st](uint64_t bytes, uint64_t alignment, bool &locked) -> void * {
            std::lock_guard<std::mutex> lock(st->mu);
            if (!st->ctx) return nullptr;
            void *base = nullptr;
            if (st->api->host_alloc(st->ctx, bytes + alignment, &base) != LLMKV_CUDA_OK || !base)
                return nullptr;
            const uintptr_t aligned =
                (reinterpret_cast<uintptr_t>(base) + alignment - 1) & ~uintptr_t(alignment - 1);
            try {
                st->bases[reinterpret_cast<void *>(aligned)] = base;
            } catch (...) {
                st->api->host_free(st->ctx, base);
                return nullptr;
            }
            locked = true;
            return reinterpret_cast<void *>(aligned);
        };
        a.free = [st](void *p, uint64_t) {
            std::lock_guard<std::mutex> lock(st->mu);
            auto it = st->bases.find(p);
            if (it == st->bases.end()) return;
            st->api->host_free(st->ctx, it->second);  // ctx may be null: portable memory
            st->bases.erase(it);
        };
        return a;
    }

    void copy_tail(int64_t from, int64_t to) override {
        if (from < 0 || to < 0) fail(LLMKV_ERR_INTERNAL, "copy_tail: no tail slot");
        check(api_->copy_tail(ctx_, uint32_t(from), uint32_t(to)), "copy_tail");
    }

    // Host-tier blocks are read in place by the attention kernels (mapped pinned memory from
    // host_allocator()): sessions longer than the device pool keep their newest blocks on
    // the device and read the older ones over the bus, layer by layer.
    bool reads_host_blocks() const override { return true; }

    MemoryUsage memory_usage() const override {
        MemoryUsage u;
        api_->memory_usage(ctx_, &u.weights, &u.kv, &u.other);
        return u;
    }

private:
    struct Matrix {
        llmkv_cuda_weight handle;
        uint32_t rows, cols;
    };
    struct RopeFreq {
        llmkv_cuda_weight handle;
        std::vector<float> values;  // what was uploaded (a reused address is re-checked)
    };

    void check(llmkv_cuda_status status, const char *what) const {
        check_cuda(api_, ctx_, status, what);
    }
    const Matrix *find_matrix(const WeightMatrix &w) const {
        auto it = matrices_.find(w.data);
        if (it == matrices_.end()) return nullptr;
        for (const Matrix &m : it->second) {
            if (m.rows == uint64_t(w.rows) && m.cols == uint64_t(w.cols)) return &m;
        }
        return nullptr;
    }
    llmkv_cuda_weight matrix(const WeightMatrix &w) const {
        const Matrix *m = find_matrix(w);
        if (!m)
            fail(LLMKV_ERR_INTERNAL, "CUDA backend: a weight matrix (%lld x %lld) was not loaded",
                 (long long)w.rows, (long long)w.cols);
        return m->handle;
    }
    static uint32_t route_flags(const ExpertRouting &r) {
        return (r.norm_weights ? LLMKV_CUDA_MOE_NORM_WEIGHTS : 0u) |
               (r.gating == ExpertRouting::Gating::kSoftmaxChosen ? LLMKV_CUDA_MOE_SOFTMAX_CHOSEN
                                                                  : 0u);
    }
    llmkv_cuda_weight vector(const float *v) const {
        auto it = vectors_.find(v);
        if (it == vectors_.end())
            fail(LLMKV_ERR_INTERNAL, "CUDA backend: a weight vector was not loaded");
        return it->second;
    }
    // Rotary frequencies: uploaded once per distinct address and contents (set-up cost on
    // the first batch; later batches compare rope_dim / 2 floats).
    llmkv_cuda_weight inv_freq(const float *values, uint32_t n) {
        if (!values) fail(LLMKV_ERR_INTERNAL, "CUDA backend: rope without inv_freq");
        RopeFreq &f = rope_freqs_[values];
        if (f.handle && f.values.size() == n &&
            std::memcmp(f.values.data(), values, size_t(n) * sizeof(float)) == 0)
            return f.handle;
        llmkv_cuda_weight handle = 0;
        check(api_->upload_vector(ctx_, values, n, &handle), "uploading rope frequencies");
        f.handle = handle;
        f.values.assign(values, values + n);
        return handle;
    }

    const llmkv_cuda_api *api_ = nullptr;
    llmkv_cuda_context *ctx_ = nullptr;
    KvGeometry geometry_;
    CudaBackendOptions options_;
    std::string device_name_;
    std::shared_ptr<HostAllocState> host_;
    // By WeightMatrix::data, then shape (a tied head and a rank's rows of it share an address).
    std::unordered_map<const void *, std::vector<Matrix>> matrices_;
    std::unordered_map<const float *, llmkv_cuda_weight> vectors_;
    std::vector<llmkv_cuda_weight> expert_handles_;  // matmul_experts: one layer's experts
    std::vector<llmkv_cuda_weight> bias_handles_;    // add_expert_bias: one layer's biases
    std::unordered_map<const float *, RopeFreq> rope_freqs_;
    std::vector<llmkv_cuda_span> spans_;  // scratch of begin_batch
    Communicator *comm_ = nullptr;        // tensor-parallel ranks (not owned)
    bool device_collectives_ = false;     // all_reduce over NCCL (connect_device_ranks)
    std::vector<float> host_rows_;        // all_reduce through host memory
    bool any_encoded_ = false;            // a matrix was uploaded in its GGUF encoding
};

}  // namespace

bool cuda_comm_unique_id(DeviceCommId &id, std::string *why) {
    static_assert(sizeof(DeviceCommId) == LLMKV_CUDA_COMM_ID_BYTES, "one id size on both sides");
    const CudaModule &module = CudaModule::get();
    if (!module.loaded()) {
        if (why) *why = module.error();
        return false;
    }
    char err[1024] = {0};
    if (module.api()->comm_unique_id(id.data(), err, sizeof err) != LLMKV_CUDA_OK) {
        if (why) *why = err;
        return false;
    }
    return true;
}

std::unique_ptr<Backend> make_cuda_backend(const KvGeometry &geometry,
                                           const CudaBackendOptions &options) {
    return std::make_unique<CudaBackend>(geometry, options);
}

}  // namespace llmkv
