// The CUDA module's context (llmkv_cuda_context, opaque in src/backend/cuda/cuda_module.h),
// one sub-struct per concern, and what the module's files share: its error helpers, the
// CK / CKB / CKS checks, the per-call guard, and the entry points each file implements.
// Private to the module (kernels/module*.cpp); host code only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_module.h"
#include "kv_layout.cuh"
#include "matvec_q.cuh"
#include "nccl_loader.h"
#include "step.cuh"

namespace llmkv::cuda::abi {

constexpr uint64_t kDefaultAttentionWorkspace = 128ull << 20;
constexpr size_t kCublasWorkspace = 32ull << 20;
constexpr size_t kLogitsBufferBytes = 64ull << 20;  // device logits of one chunk of rows
constexpr uint32_t kTicketEvents = 1024;            // copy tickets in flight before a wait
// A matrix kept in its GGUF encoding (upload_matrix_quantized): products with at most this
// many activation rows read the packed rows directly (launch_matvec_q, in launches of
// kMatvecMaxTokens rows: the decode steps of up to 32 sessions), larger ones decode row
// chunks into an fp16 scratch of at most kDequantScratchBytes for cuBLAS (prefill).
constexpr uint32_t kMatvecRouteMaxRows = 4 * kMatvecMaxTokens;
constexpr size_t kDequantScratchBytes = 64ull << 20;

// ---- messages (module.cpp) ---------------------------------------------------------------

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// msg into err[0, cap), NUL-terminated and truncated; nothing when err is null or cap 0.
void write_err(char *err, size_t cap, const std::string &msg);
std::string cuda_text(cudaError_t e);

// ---- the context's parts -------------------------------------------------------------------

// A weight on the device: an fp16 matrix [rows][cols], a matrix kept in its GGUF encoding
// (`encoded`: rows of row_bytes bytes of GGML type `type`), or an f32 vector (rows = 1,
// cols = n).
struct DeviceWeight {
    void *data = nullptr;
    uint32_t rows = 0, cols = 0;
    bool matrix = false;
    bool encoded = false;
    uint32_t type = 0;
    size_t row_bytes = 0;
};

// A buffer of alloc_activation.
struct Activation {
    const uint8_t *data = nullptr;
    size_t bytes = 0;
};

// A device allocation and the usage counter it is charged to.
struct DeviceAlloc {
    void *p;
    size_t bytes;
    uint64_t *counter;
};

// The KV store (create): the layout, the pools on the device, and the mapped host memory
// whose host-tier blocks the kernels may read in place.
struct KvStore {
    KvGeometry g;
    uint32_t n_sealed = 0, n_tail = 0, kvd = 0;
    size_t block_bytes = 0, tail_bytes = 0;
    uint8_t *pool = nullptr;          // [n_sealed][block_bytes]
    uint8_t *tails = nullptr;         // [n_tail][tail_bytes]
    bool unified_addressing = false;  // host-tier blocks are read at their host address
    // Memory from api_host_alloc (mapped): [start, start + bytes), sorted by start.
    std::vector<std::pair<uintptr_t, size_t>> host_ranges;
};

// Weight handles and activation buffers (module_weights.cpp), and the fp16 buffers the
// matrix products read, grown by the set-up calls.
struct WeightStore {
    std::vector<DeviceWeight> handles;  // handle h = index h - 1
    std::vector<Activation> activations;
    uint16_t *xh = nullptr;  // fp16 copy of a GEMM input: max_tokens x the widest activation
    size_t xh_elems = 0;
    // Encoded matrices: rows decoded to fp16 for a GEMM (at most kDequantScratchBytes, grown by
    // the uploads), and the overflow flag of the upload's check.
    uint16_t *dq_scratch = nullptr;
    size_t dq_scratch_elems = 0;
    unsigned long long *dq_flag = nullptr;
};

// The workspaces of the ops (allocated at create).
struct OpWorkspaces {
    uint16_t *window = nullptr;  // fp16 window buffer (step.cuh), one layer at a time
    size_t window_elems = 0;
    float *attn_ws = nullptr;
    size_t attn_ws_bytes = 0;
    float *logits_dev = nullptr;  // f32, kLogitsBufferBytes
};

// The per-batch tables (module_batch.cpp): device buffers and their pinned host mirrors,
// sized at create for max_tokens rows, max_spans spans and max_jobs seal jobs.
struct BatchTables {
    uint32_t max_jobs = 0;
    int32_t *d_tokens = nullptr, *d_pos = nullptr, *d_logit_rows = nullptr;  // [T]
    uint32_t *d_row_span = nullptr;                                          // [T]
    StepSpan *d_spans = nullptr;                                             // [max_spans]
    SealJob *d_jobs = nullptr;  // [max_jobs][n_groups]: per token block, each group's block
    int32_t *h_tokens = nullptr, *h_pos = nullptr, *h_logit_rows = nullptr;
    // attention work items per row (attention_partition_plan): [T + 1] prefix sums
    uint32_t *d_row_parts = nullptr, *h_row_parts = nullptr;
    uint32_t *d_item_row = nullptr;  // the row of each work item, grown by doubling
    size_t item_row_cap = 0;
    uint32_t *h_row_span = nullptr;
    StepSpan *h_spans = nullptr;
    SealJob *h_jobs = nullptr;
    uint32_t *d_block_ids = nullptr, *h_block_ids = nullptr;  // grown by doubling
    size_t block_ids_cap = 0;
    // Host-tier blocks of the batch (llmkv_cuda_span.host_blocks): the device pointers of
    // virtual ids n_sealed + k, grown by doubling.
    const uint8_t **d_host_blocks = nullptr, **h_host_blocks = nullptr;
    size_t host_blocks_cap = 0;
    cudaEvent_t uploaded = nullptr;  // the host mirrors may be rewritten after it
    bool pending = false;            // `uploaded` recorded and not yet waited for
};

// The open batch (begin_batch .. end_batch), and the stamps that check its distinctness
// rules.
struct OpenBatch {
    std::vector<uint32_t> tail_stamp;  // tail slot -> last batch that used it (distinctness)
    uint32_t step_counter = 0;
    bool in_batch = false;
    uint32_t T = 0, n_spans = 0, n_jobs = 0, n_lrows = 0, max_ctx = 0;
    int32_t max_token = 0;
    int64_t window_layer = -1;          // layer whose window write_kv built last
    std::vector<uint32_t> layer_stamp;  // layer -> batch (step_counter) of its write_kv
};

// The asynchronous block copies on the copy stream and their tickets (module_copies.cpp).
struct CopyTickets {
    std::vector<cudaEvent_t> ticket_events;
    uint64_t next_ticket = 1, completed_ticket = 0;
    cudaEvent_t compute_marker = nullptr, copy_marker = nullptr;
    bool pending_writes = false;  // async host-to-device copies not yet ordered before compute
    bool pending_reads = false;   // async device-to-host copies, likewise
};

// Tensor parallelism (comm_prepare, comm_init; module_collectives.cpp): the NCCL
// communicator and the all-gather buffer of one chunk.
// Mixture-of-experts state: the host's copy of the last routes (route_experts), the rows of
// matmul_experts in expert order, and the gathered rows and their products (grown by
// doubling, kept for the context's life).
struct ExpertScratch {
    std::vector<float> logits, routes, p;  // host
    std::vector<uint8_t> taken;
    const void *routes_data = nullptr;  // the device tensor the host routes were written to
    uint32_t routes_rows = 0;
    std::vector<uint32_t> count, order;  // order_slots_by_expert's first and slots
    std::vector<int32_t> rows;           // per gathered row its x row, then its y row
    int32_t *d_rows = nullptr;           // [2 S]
    size_t rows_cap = 0;
    float *d_x = nullptr, *d_y = nullptr;
    size_t x_cap = 0, y_cap = 0;  // floats
    // add_expert_bias: each expert's bias (device, null: none), each routed row's
    std::vector<const float *> bias_ptrs, row_bias;
    const float **d_row_bias = nullptr;  // [S]
    size_t row_bias_cap = 0;
};

struct Collectives {
    ncclComm_t comm = nullptr;
    uint32_t n_ranks = 0, rank = 0;
    float *gathered = nullptr;  // [n_ranks][chunk]
    size_t chunk = 0;           // floats per rank of one all-gather
};

}  // namespace llmkv::cuda::abi

// One device: its limits, streams, cuBLAS, allocations and sticky error, and the parts above.
struct llmkv_cuda_context {
    int device = 0;
    // limits
    uint32_t max_tokens = 0, max_spans = 0;
    bool batch_invariant = false;  // every product through the matvec kernel

    cudaStream_t compute = nullptr, copy = nullptr;
    cublasHandle_t cublas = nullptr;
    void *cublas_ws = nullptr;
    std::vector<llmkv::cuda::abi::DeviceAlloc> device_allocs;
    std::vector<void *> host_allocs;  // pinned staging owned by the context
    uint64_t weight_bytes = 0, kv_bytes = 0, other_bytes = 0;

    llmkv::cuda::abi::KvStore kv;
    llmkv::cuda::abi::WeightStore weights;
    llmkv::cuda::abi::OpWorkspaces work;
    llmkv::cuda::abi::BatchTables tables;
    llmkv::cuda::abi::OpenBatch batch;
    llmkv::cuda::abi::CopyTickets copies;
    llmkv::cuda::abi::Collectives tp;
    llmkv::cuda::abi::ExpertScratch experts;

    llmkv_cuda_status sticky = LLMKV_CUDA_OK;
    std::string err;

    llmkv_cuda_status fail(llmkv_cuda_status s, const std::string &msg) {
        err = msg;
        if (s == LLMKV_CUDA_ERR_DEVICE && sticky == LLMKV_CUDA_OK) sticky = s;
        return s;
    }
    llmkv_cuda_status cuda_fail(const char *what, cudaError_t e) {
        using llmkv::cuda::abi::cuda_text, llmkv::cuda::abi::format;
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();  // not sticky in CUDA: clear it
            return fail(LLMKV_CUDA_ERR_OUT_OF_MEMORY,
                        format("CUDA %s: %s", what, cuda_text(e).c_str()));
        }
        if (e == cudaErrorInvalidValue) {
            // The launchers' answer to a shape they do not handle (checked before anything is
            // launched), and not sticky in CUDA either: UNSUPPORTED, the context stays usable.
            cudaGetLastError();
            return fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                        format("CUDA %s: %s (a shape or size these kernels do not handle)", what,
                               cuda_text(e).c_str()));
        }
        return fail(LLMKV_CUDA_ERR_DEVICE, format("CUDA %s: %s", what, cuda_text(e).c_str()));
    }
    llmkv_cuda_status cublas_fail(const char *what, cublasStatus_t s) {
        return fail(LLMKV_CUDA_ERR_DEVICE,
                    llmkv::cuda::abi::format("cuBLAS %s: %s (%s)", what, cublasGetStatusString(s),
                                             cublasGetStatusName(s)));
    }

    // Device allocation charged to `counter`; OUT_OF_MEMORY names the buffer. p is only
    // assigned on success: a failure changes nothing the caller holds.
    template <class T>
    llmkv_cuda_status alloc(T *&p, size_t bytes, uint64_t &counter, const char *what) {
        using llmkv::cuda::abi::cuda_text, llmkv::cuda::abi::format;
        if (bytes == 0) bytes = 16;
        void *raw = nullptr;
        cudaError_t e = cudaMalloc(&raw, bytes);
        if (e != cudaSuccess) {
            cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            cudaGetLastError();
            const llmkv_cuda_status s = e == cudaErrorMemoryAllocation
                                            ? LLMKV_CUDA_ERR_OUT_OF_MEMORY
                                            : LLMKV_CUDA_ERR_DEVICE;
            return fail(
                s, format("cudaMalloc of %.1f MiB for %s: %s (device free %.1f MiB of %.1f MiB)",
                          bytes / 1048576.0, what, cuda_text(e).c_str(), free_b / 1048576.0,
                          total_b / 1048576.0));
        }
        device_allocs.push_back({raw, bytes, &counter});
        counter += bytes;
        p = static_cast<T *>(raw);
        return LLMKV_CUDA_OK;
    }
    // Frees one buffer of alloc (waits for the device: only outside the hot path).
    void free_device(void *p) {
        for (size_t i = 0; i < device_allocs.size(); ++i) {
            if (device_allocs[i].p != p) continue;
            *device_allocs[i].counter -= device_allocs[i].bytes;
            cudaFree(p);
            cudaGetLastError();
            device_allocs.erase(device_allocs.begin() + std::ptrdiff_t(i));
            return;
        }
    }
    template <class T>
    llmkv_cuda_status alloc_host(T *&p, size_t bytes, const char *what) {
        using llmkv::cuda::abi::cuda_text, llmkv::cuda::abi::format;
        if (bytes == 0) bytes = 16;
        void *raw = nullptr;
        cudaError_t e = cudaHostAlloc(&raw, bytes, cudaHostAllocPortable);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return fail(e == cudaErrorMemoryAllocation ? LLMKV_CUDA_ERR_OUT_OF_MEMORY
                                                       : LLMKV_CUDA_ERR_DEVICE,
                        format("cudaHostAlloc of %.1f MiB for %s: %s", bytes / 1048576.0, what,
                               cuda_text(e).c_str()));
        }
        host_allocs.push_back(raw);
        p = static_cast<T *>(raw);
        return LLMKV_CUDA_OK;
    }
    void free_host(void *p) {
        auto it = std::find(host_allocs.begin(), host_allocs.end(), p);
        if (it == host_allocs.end()) return;
        cudaFreeHost(p);
        cudaGetLastError();
        host_allocs.erase(it);
    }

    // Everything the context holds, communicator included (module.cpp).
    void release_all();
};

#define CK(ctx, expr)                                              \
    do {                                                           \
        const cudaError_t e_ = (expr);                             \
        if (e_ != cudaSuccess) return (ctx)->cuda_fail(#expr, e_); \
    } while (0)
#define CKB(ctx, expr)                                                         \
    do {                                                                       \
        const cublasStatus_t s_ = (expr);                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) return (ctx)->cublas_fail(#expr, s_); \
    } while (0)
#define CKS(expr)                             \
    do {                                      \
        const llmkv_cuda_status st_ = (expr); \
        if (st_ != LLMKV_CUDA_OK) return st_; \
    } while (0)

namespace llmkv::cuda::abi {

using Ctx = llmkv_cuda_context;

// Makes `device` current for the length of one module call and gives the calling thread its
// own current device back afterwards: a host application with CUDA work of its own on another
// device does not find its device changed by llmkv.
class DeviceScope {
public:
    explicit DeviceScope(int device) {
        if (cudaGetDevice(&prev_) != cudaSuccess) {
            cudaGetLastError();
            prev_ = -1;
        }
        if (prev_ != device) {
            error_ = cudaSetDevice(device);
            changed_ = error_ == cudaSuccess && prev_ >= 0;
        }
    }
    ~DeviceScope() {
        if (changed_ && cudaSetDevice(prev_) != cudaSuccess) cudaGetLastError();
    }
    DeviceScope(const DeviceScope &) = delete;
    DeviceScope &operator=(const DeviceScope &) = delete;
    cudaError_t error() const { return error_; }

private:
    int prev_ = -1;
    bool changed_ = false;
    cudaError_t error_ = cudaSuccess;
};

// Start of every context call: no sticky error, the message of the previous call cleared.
inline llmkv_cuda_status enter(Ctx *ctx, const DeviceScope &scope) {
    if (ctx->sticky != LLMKV_CUDA_OK) return ctx->sticky;
    ctx->err.clear();
    CK(ctx, scope.error());
    return LLMKV_CUDA_OK;
}

// One context call: the context's device current, no sticky error, every exception turned
// into a status.
template <class F>
llmkv_cuda_status guarded(Ctx *ctx, F &&f) {
    if (!ctx) return LLMKV_CUDA_ERR_INVALID;
    const DeviceScope scope(ctx->device);
    try {
        CKS(enter(ctx, scope));
        return f();
    } catch (const std::bad_alloc &) {
        return ctx->fail(LLMKV_CUDA_ERR_OUT_OF_MEMORY, "host out of memory");
    } catch (const std::exception &e) {
        return ctx->fail(LLMKV_CUDA_ERR_INVALID, e.what());
    } catch (...) {
        return ctx->fail(LLMKV_CUDA_ERR_INVALID, "unknown exception");
    }
}

// ---- shared between the files -------------------------------------------------------------

// Grows a per-batch table to hold `need` entries (capacity doubled from max(cap, min_cap)):
// the device buffer and, when h is given, its pinned host mirror. The new buffers are
// allocated before the old ones go, so an out-of-memory keeps the old tables and capacity;
// the old ones may still be read by queued work and are freed after it (rare: a new
// high-water mark).
template <class T>
inline llmkv_cuda_status grow_table(Ctx *ctx, T *&d, T **h, size_t &cap, size_t need,
                                    size_t min_cap, const char *what) {
    if (need <= cap) return LLMKV_CUDA_OK;
    size_t n = std::max(cap, min_cap);
    while (n < need) n *= 2;
    T *nd = nullptr, *nh = nullptr;
    CKS(ctx->alloc(nd, n * sizeof(T), ctx->other_bytes, what));
    if (h) {
        const llmkv_cuda_status s = ctx->alloc_host(nh, n * sizeof(T), what);
        if (s != LLMKV_CUDA_OK) {
            ctx->free_device(nd);
            return s;
        }
    }
    CK(ctx, cudaStreamSynchronize(ctx->compute));
    ctx->free_device(d);
    d = nd;
    if (h) {
        ctx->free_host(*h);
        *h = nh;
    }
    cap = n;
    return LLMKV_CUDA_OK;
}

// module_weights.cpp: the argument checks of the ops (cheap: a handful of buffers).
// The tensor lies inside one buffer of alloc_activation.
llmkv_cuda_status check_tensor(Ctx *ctx, const llmkv_cuda_tensor &t, const char *op,
                               const char *name);
// The weight of handle h when it is a matrix (matrix) or a vector (!matrix), else nullptr.
const DeviceWeight *weight_of(Ctx *ctx, llmkv_cuda_weight h, bool matrix);
// INVALID with "op: what".
llmkv_cuda_status bad(Ctx *ctx, const char *op, const std::string &what);
llmkv_cuda_status need_batch(Ctx *ctx, const char *op);
// module_weights.cpp: rows of an encoded matrix per chunk of the fp16 scratch, and rows
// [r0, r0 + n) of it decoded into the scratch (a value beyond fp16 lowers *flag, if given).
uint32_t dq_chunk_rows(const Ctx *ctx, const DeviceWeight &w);
llmkv_cuda_status decode_chunk(Ctx *ctx, const DeviceWeight &w, uint32_t r0, uint32_t n,
                               unsigned long long *flag);

// module_copies.cpp: makes the compute stream wait for the asynchronous block writes
// submitted so far (ops: they must see the onboarded blocks) or, with reads_too, for every
// async copy (synchronous copies: a write_block after read_blocks_async of the same block must
// not overtake the read, the write-after-read the module header promises to order). Reads do
// not hold back ops, so an offload keeps overlapping the next forward; the caller leaves those
// blocks untouched.
llmkv_cuda_status order_after_copies(Ctx *ctx, bool reads_too = false);

// ---- the entry points of the ABI table (module.cpp: kApi), by file ------------------------

// module.cpp: discovery, create / destroy, errors and usage.
llmkv_cuda_status api_device_count(int32_t *count, char *err, size_t err_cap);
llmkv_cuda_status api_device_info(int32_t device, char *name, size_t name_cap, uint64_t *free_bytes,
                                  uint64_t *total_bytes, char *err, size_t err_cap);
llmkv_cuda_status api_create(const llmkv_cuda_kv_desc *kv, const llmkv_cuda_context_params *p,
                             llmkv_cuda_context **out, char *err, size_t err_cap);
void api_destroy(llmkv_cuda_context *ctx);
llmkv_cuda_status api_sticky_error(const llmkv_cuda_context *ctx);
const char *api_last_error(const llmkv_cuda_context *ctx);
llmkv_cuda_status api_memory_usage(const llmkv_cuda_context *ctx, uint64_t *w, uint64_t *kv,
                                   uint64_t *other);

// module_weights.cpp: weights and activations.
llmkv_cuda_status api_upload_matrix(llmkv_cuda_context *ctx, const uint16_t *host, uint32_t rows,
                                    uint32_t cols, llmkv_cuda_weight *out);
llmkv_cuda_status api_upload_vector(llmkv_cuda_context *ctx, const float *host, uint32_t n,
                                    llmkv_cuda_weight *out);
llmkv_cuda_status api_alloc_activation(llmkv_cuda_context *ctx, uint32_t rows, uint32_t cols,
                                       llmkv_cuda_tensor *out);
llmkv_cuda_status api_upload_matrix_packed(llmkv_cuda_context *ctx, uint32_t type, const void *host,
                                           uint32_t rows, uint32_t cols, uint64_t row_bytes,
                                           llmkv_cuda_weight *out);
llmkv_cuda_status api_upload_matrix_quantized(llmkv_cuda_context *ctx, uint32_t type,
                                              const void *host, uint32_t rows, uint32_t cols,
                                              uint64_t row_bytes, llmkv_cuda_weight *out);

// module_batch.cpp: one batch's tables.
llmkv_cuda_status api_begin_batch(llmkv_cuda_context *ctx, const llmkv_cuda_span *spans,
                                  uint32_t n_spans, uint32_t *n_tokens, uint32_t *n_logit_rows);
llmkv_cuda_status api_end_batch(llmkv_cuda_context *ctx);

// module_ops.cpp: the ops of a forward pass.
llmkv_cuda_status api_embed(llmkv_cuda_context *ctx, llmkv_cuda_weight table,
                            llmkv_cuda_tensor out);
llmkv_cuda_status api_rms_norm(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                               llmkv_cuda_weight weight, float eps, llmkv_cuda_tensor out);
llmkv_cuda_status api_matmul(llmkv_cuda_context *ctx, llmkv_cuda_weight weight, llmkv_cuda_tensor x,
                             llmkv_cuda_tensor y);
llmkv_cuda_status api_rope(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, uint32_t n_heads,
                           uint32_t head_dim, uint32_t rope_dim, uint32_t style, float freq_scale,
                           llmkv_cuda_weight inv_freq);
llmkv_cuda_status api_write_kv(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor k,
                               llmkv_cuda_tensor v);
llmkv_cuda_status api_attention(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor q,
                                uint32_t n_heads, float scale, uint32_t window,
                                llmkv_cuda_tensor out);
llmkv_cuda_status api_add(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, llmkv_cuda_tensor y);
llmkv_cuda_status api_swiglu(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate, llmkv_cuda_tensor up);
llmkv_cuda_status api_geglu(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate, llmkv_cuda_tensor up);
llmkv_cuda_status api_add_bias(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                               llmkv_cuda_weight bias);
llmkv_cuda_status api_scale(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, float s);
llmkv_cuda_status api_gather_logit_rows(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                        llmkv_cuda_tensor out);
llmkv_cuda_status api_logits(llmkv_cuda_context *ctx, llmkv_cuda_weight weight, llmkv_cuda_tensor x,
                             float *host);

// module_copies.cpp: block and tail copies, copy tickets, pinned host memory.
llmkv_cuda_status api_read_block(llmkv_cuda_context *ctx, uint32_t id, void *host);
llmkv_cuda_status api_write_block(llmkv_cuda_context *ctx, uint32_t id, const void *host);
llmkv_cuda_status api_read_tail(llmkv_cuda_context *ctx, uint32_t slot, void *host);
llmkv_cuda_status api_write_tail(llmkv_cuda_context *ctx, uint32_t slot, const void *host);
llmkv_cuda_status api_copy_tail(llmkv_cuda_context *ctx, uint32_t from, uint32_t to);
llmkv_cuda_status api_read_blocks_async(llmkv_cuda_context *ctx, const uint32_t *ids, uint32_t n,
                                        void *const *host, uint64_t *ticket);
llmkv_cuda_status api_write_blocks_async(llmkv_cuda_context *ctx, const uint32_t *ids, uint32_t n,
                                         const void *const *host, uint64_t *ticket);
llmkv_cuda_status api_copy_query(llmkv_cuda_context *ctx, uint64_t ticket);
llmkv_cuda_status api_copy_wait(llmkv_cuda_context *ctx, uint64_t ticket);
llmkv_cuda_status api_host_alloc(llmkv_cuda_context *ctx, uint64_t bytes, void **out);
void api_host_free(llmkv_cuda_context *ctx, void *p);

// module_collectives.cpp: tensor-parallel ranks.
llmkv_cuda_status api_read_activation(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, float *host);
llmkv_cuda_status api_write_activation(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                       const float *host);
llmkv_cuda_status api_comm_unique_id(uint8_t id[LLMKV_CUDA_COMM_ID_BYTES], char *err,
                                     size_t err_cap);
llmkv_cuda_status api_comm_prepare(llmkv_cuda_context *ctx, uint32_t n_ranks,
                                   uint64_t max_elements);
llmkv_cuda_status api_comm_init(llmkv_cuda_context *ctx, const uint8_t id[LLMKV_CUDA_COMM_ID_BYTES],
                                uint32_t n_ranks, uint32_t rank);
llmkv_cuda_status api_all_reduce_sum(llmkv_cuda_context *ctx, llmkv_cuda_tensor x);
llmkv_cuda_status api_route_experts(llmkv_cuda_context *ctx, llmkv_cuda_tensor logits,
                                    uint32_t n_expert, uint32_t n_used, uint32_t flags,
                                    float weight_scale, llmkv_cuda_tensor routes);
llmkv_cuda_status api_matmul_experts(llmkv_cuda_context *ctx, const llmkv_cuda_weight *experts,
                                     uint32_t n_expert, llmkv_cuda_tensor x,
                                     llmkv_cuda_tensor routes, uint32_t n_used,
                                     llmkv_cuda_tensor y);
llmkv_cuda_status api_combine_experts(llmkv_cuda_context *ctx, llmkv_cuda_tensor y,
                                      llmkv_cuda_tensor routes, uint32_t n_used,
                                      llmkv_cuda_tensor out);
llmkv_cuda_status api_mul_sigmoid(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                  llmkv_cuda_tensor g);
// Version 8 (gpt-oss).
llmkv_cuda_status api_attention_sinks(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor q,
                                      uint32_t n_heads, float scale, uint32_t window,
                                      llmkv_cuda_weight sinks, llmkv_cuda_tensor out);
llmkv_cuda_status api_swiglu_oai(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate,
                                 llmkv_cuda_tensor up, float alpha, float limit);
llmkv_cuda_status api_add_expert_bias(llmkv_cuda_context *ctx, llmkv_cuda_tensor y,
                                      llmkv_cuda_tensor routes, uint32_t n_used,
                                      const llmkv_cuda_weight *bias, uint32_t n_expert);

}  // namespace llmkv::cuda::abi
