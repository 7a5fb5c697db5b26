// The CUDA module's C ABI, version 5 (src/backend/cuda/cuda_module.h): one context = one
// device, the KV pools in the CPU's byte layouts (llmkv::KvGeometry), weights uploaded one
// matrix / vector at a time as handles, activation buffers, and the operations of a forward
// pass (the architecture itself lives in libllmkv, src/model/arch/). A compute stream runs
// the ops and the synchronous block / tail copies; a copy stream runs the asynchronous block
// copies of the host tier; cuBLAS does the GEMMs.
// Host code only (compiled by the host compiler); kernels are called through their
// launchers. Every CUDA / cuBLAS call is checked; a failure becomes the context's sticky
// error.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_module.h"
#include "dequant.cuh"
#include "dequant_formats.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gemm.cuh"
#include "kv_layout.cuh"
#include "kv_seal.cuh"
#include "kv_window.cuh"
#include "matvec_q.cuh"
#include "nccl_loader.h"
#include "paged_attention.cuh"
#include "rms_norm.cuh"
#include "rope.cuh"
#include "step.cuh"
#include "swiglu.cuh"

using namespace llmkv::cuda;

namespace {

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

std::string vformat(const char *fmt, va_list args) {
    char buf[1024];
    std::vsnprintf(buf, sizeof buf, fmt, args);
    return buf;
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::string s = vformat(fmt, args);
    va_end(args);
    return s;
}

void write_err(char *err, size_t cap, const std::string &msg) {
    if (!err || cap == 0) return;
    const size_t n = std::min(cap - 1, msg.size());
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
}

std::string cuda_text(cudaError_t e) {
    return format("%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
}

// The one conversion of the ABI's plain C KV description into the kernels' layout.
KvGeometry geometry_of(const llmkv_cuda_kv_desc &kv) {
    KvGeometry g;
    g.n_layers = kv.n_layers;
    g.n_kv_heads = kv.n_kv_heads;
    g.head_dim = kv.head_dim;
    g.block_tokens = kv.block_tokens;
    g.residual_tokens = kv.residual_tokens;
    g.dtype_k = llmkv_kv_dtype(kv.dtype_k);
    g.dtype_v = llmkv_kv_dtype(kv.dtype_v);
    g.rotate_k = kv.rotate_k != 0;
    g.rotate_v = kv.rotate_v != 0;
    return g;
}

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

}  // namespace

struct llmkv_cuda_context {
    int device = 0;
    // KV
    KvGeometry g;
    uint32_t n_sealed = 0, n_tail = 0, kvd = 0;
    size_t block_bytes = 0, tail_bytes = 0;
    // limits
    uint32_t max_tokens = 0, max_spans = 0, max_jobs = 0;
    bool batch_invariant = false;  // every product through the matvec kernel
    bool unified_addressing = false;  // host-tier blocks are read at their host address
    size_t window_elems = 0;

    cudaStream_t compute = nullptr, copy = nullptr;
    cublasHandle_t cublas = nullptr;
    std::vector<DeviceAlloc> device_allocs;
    std::vector<void *> host_allocs;  // pinned staging owned by the context
    uint64_t weight_bytes = 0, kv_bytes = 0, other_bytes = 0;

    std::vector<DeviceWeight> weights;   // handle h = index h - 1
    std::vector<Activation> activations;
    uint8_t *pool = nullptr;   // [n_sealed][block_bytes]
    uint8_t *tails = nullptr;  // [n_tail][tail_bytes]
    uint16_t *window = nullptr;  // fp16 window buffer (step.cuh), one layer at a time
    float *attn_ws = nullptr;
    size_t attn_ws_bytes = 0;
    float *logits_dev = nullptr;  // f32, kLogitsBufferBytes
    void *cublas_ws = nullptr;
    uint16_t *xh = nullptr;  // fp16 copy of a GEMM input: max_tokens x the widest activation
    size_t xh_elems = 0;
    // Encoded matrices: rows decoded to fp16 for a GEMM (at most kDequantScratchBytes, grown by
    // the uploads), and the overflow flag of the upload's check.
    uint16_t *dq_scratch = nullptr;
    size_t dq_scratch_elems = 0;
    unsigned long long *dq_flag = nullptr;

    // per-batch tables: device and pinned host mirrors
    int32_t *d_tokens = nullptr, *d_pos = nullptr, *d_logit_rows = nullptr;  // [T]
    uint32_t *d_row_span = nullptr;                                          // [T]
    StepSpan *d_spans = nullptr;                                             // [max_spans]
    SealJob *d_jobs = nullptr;                                               // [max_jobs]
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
    // Memory from api_host_alloc (mapped): [start, start + bytes), sorted by start.
    std::vector<std::pair<uintptr_t, size_t>> host_ranges;
    cudaEvent_t tables_uploaded = nullptr;  // the host mirrors may be rewritten after it
    bool tables_pending = false;
    std::vector<uint32_t> tail_stamp;  // tail slot -> last batch that used it (distinctness)
    uint32_t step_counter = 0;

    // the open batch
    bool in_batch = false;
    uint32_t T = 0, n_spans = 0, n_jobs = 0, n_lrows = 0, max_ctx = 0;
    int32_t max_token = 0;
    int64_t window_layer = -1;           // layer whose window write_kv built last
    std::vector<uint32_t> layer_stamp;  // layer -> batch (step_counter) of its write_kv

    // async copies
    std::vector<cudaEvent_t> ticket_events;
    uint64_t next_ticket = 1, completed_ticket = 0;
    cudaEvent_t compute_marker = nullptr, copy_marker = nullptr;
    bool pending_writes = false;  // async host-to-device block copies not yet ordered before compute
    bool pending_reads = false;   // async device-to-host block copies, likewise

    // tensor parallelism (comm_prepare, comm_init): the NCCL communicator and the all-gather
    // buffer of one chunk
    ncclComm_t comm = nullptr;
    uint32_t comm_ranks = 0, comm_rank = 0;
    float *gathered = nullptr;  // [comm_ranks][comm_chunk]
    size_t comm_chunk = 0;      // floats per rank of one all-gather

    llmkv_cuda_status sticky = LLMKV_CUDA_OK;
    std::string err;

    llmkv_cuda_status fail(llmkv_cuda_status s, const std::string &msg) {
        err = msg;
        if (s == LLMKV_CUDA_ERR_DEVICE && sticky == LLMKV_CUDA_OK) sticky = s;
        return s;
    }
    llmkv_cuda_status cuda_fail(const char *what, cudaError_t e) {
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
        return fail(
            LLMKV_CUDA_ERR_DEVICE,
            format("cuBLAS %s: %s (%s)", what, cublasGetStatusString(s), cublasGetStatusName(s)));
    }

    // Device allocation charged to `counter`; OUT_OF_MEMORY names the buffer. p is only
    // assigned on success: a failure changes nothing the caller holds.
    template <class T>
    llmkv_cuda_status alloc(T *&p, size_t bytes, uint64_t &counter, const char *what) {
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

    void release_all() {
        if (comm) {
            // After a device error the other ranks may never finish a collective with this
            // one (nor this one's queued all-gathers): abort before waiting for the streams.
            // A healthy context's work completed with the last synchronizing call; destroy
            // waits for the other ranks' last collectives.
            const NcclApi *n = nccl_api(nullptr);
            if (n && sticky != LLMKV_CUDA_OK) n->comm_abort(comm);
            if (compute) cudaStreamSynchronize(compute);
            if (n && sticky == LLMKV_CUDA_OK) n->comm_destroy(comm);
            comm = nullptr;
        }
        if (compute) cudaStreamSynchronize(compute);
        if (copy) cudaStreamSynchronize(copy);
        for (cudaEvent_t e : ticket_events) cudaEventDestroy(e);
        ticket_events.clear();
        if (compute_marker) cudaEventDestroy(compute_marker);
        if (copy_marker) cudaEventDestroy(copy_marker);
        if (tables_uploaded) cudaEventDestroy(tables_uploaded);
        compute_marker = copy_marker = tables_uploaded = nullptr;
        if (cublas) cublasDestroy(cublas);
        for (const DeviceAlloc &a : device_allocs) cudaFree(a.p);
        for (void *p : host_allocs) cudaFreeHost(p);
        device_allocs.clear();
        host_allocs.clear();
        if (compute) cudaStreamDestroy(compute);
        if (copy) cudaStreamDestroy(copy);
        compute = copy = nullptr;
        cublas = nullptr;
        cudaGetLastError();
    }
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

namespace {

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
llmkv_cuda_status enter(Ctx *ctx, const DeviceScope &scope) {
    if (ctx->sticky != LLMKV_CUDA_OK) return ctx->sticky;
    ctx->err.clear();
    CK(ctx, scope.error());
    return LLMKV_CUDA_OK;
}

// Makes the compute stream wait for the asynchronous block writes submitted so far (ops:
// they must see the onboarded blocks) or, with reads_too, for every async copy (synchronous
// copies: a write_block after read_blocks_async of the same block must not overtake the read,
// the write-after-read the module header promises to order). Reads do not hold back ops, so
// an offload keeps overlapping the next forward; the caller leaves those blocks untouched.
llmkv_cuda_status order_after_copies(Ctx *ctx, bool reads_too = false) {
    if (!ctx->pending_writes && !(reads_too && ctx->pending_reads)) return LLMKV_CUDA_OK;
    CK(ctx, cudaEventRecord(ctx->copy_marker, ctx->copy));
    CK(ctx, cudaStreamWaitEvent(ctx->compute, ctx->copy_marker, 0));
    ctx->pending_writes = false;
    if (reads_too) ctx->pending_reads = false;
    return LLMKV_CUDA_OK;
}

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

// ---- device discovery -----------------------------------------------------------------

llmkv_cuda_status api_device_count(int32_t *count, char *err, size_t err_cap) {
    if (!count) return LLMKV_CUDA_ERR_INVALID;
    *count = 0;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        write_err(err, err_cap, "cudaGetDeviceCount: " + cuda_text(e));
        return LLMKV_CUDA_ERR_NO_DEVICE;
    }
    if (n <= 0) {
        write_err(err, err_cap, "no CUDA device");
        return LLMKV_CUDA_ERR_NO_DEVICE;
    }
    *count = n;
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_device_info(int32_t device, char *name, size_t name_cap, uint64_t *free_bytes,
                                  uint64_t *total_bytes, char *err, size_t err_cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || device < 0 || device >= n) {
        cudaGetLastError();
        write_err(err, err_cap,
                  e != cudaSuccess
                      ? "cudaGetDeviceCount: " + cuda_text(e)
                      : format("CUDA device %d does not exist (%d devices)", device, n));
        return LLMKV_CUDA_ERR_NO_DEVICE;
    }
    cudaDeviceProp prop;
    const DeviceScope scope(device);  // cudaMemGetInfo reports the current device
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = scope.error()) != cudaSuccess) {
        cudaGetLastError();
        write_err(err, err_cap, "cudaGetDeviceProperties: " + cuda_text(e));
        return LLMKV_CUDA_ERR_DEVICE;
    }
    write_err(name, name_cap,
              format("%s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount));
    size_t f = 0, t = 0;
    if ((e = cudaMemGetInfo(&f, &t)) != cudaSuccess) {
        cudaGetLastError();
        write_err(err, err_cap, "cudaMemGetInfo: " + cuda_text(e));
        return LLMKV_CUDA_ERR_DEVICE;
    }
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
    return LLMKV_CUDA_OK;
}

// ---- create ----------------------------------------------------------------------------

std::string check_descs(const llmkv_cuda_kv_desc *kv, const llmkv_cuda_context_params *p) {
    if (!kv || !p) return "null kv or params description";
    if (kv->struct_size < sizeof(llmkv_cuda_kv_desc))
        return format("kv desc struct_size %u is too small", kv->struct_size);
    if (p->struct_size < sizeof(llmkv_cuda_context_params))
        return format("params struct_size %u is too small", p->struct_size);
    if (kv->n_sealed_blocks == 0 || kv->n_tail_slots == 0) return "empty KV pools";
    if (p->max_batch_tokens == 0) return "max_batch_tokens must be > 0";
    return std::string();
}

llmkv_cuda_status create_impl(Ctx *ctx, const llmkv_cuda_kv_desc *kv,
                              const llmkv_cuda_context_params *p) {
    ctx->device = p->device;
    ctx->batch_invariant = p->batch_invariant != 0;
    const KvGeometry g = geometry_of(*kv);
    ctx->g = g;
    if (const char *why = kv_layout_unsupported(g)) {
        return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                         format("CUDA KV layout not supported: %s (head_dim %u, block_tokens %u, "
                                "dtypes %u/%u, rotation %u/%u)",
                                why, g.head_dim, g.block_tokens, kv->dtype_k, kv->dtype_v,
                                kv->rotate_k, kv->rotate_v));
    }
    if (g.sealed_block_bytes() != kv->sealed_block_bytes ||
        g.tail_block_bytes() != kv->tail_block_bytes) {
        return ctx->fail(
            LLMKV_CUDA_ERR_INVALID,
            format("KV block sizes disagree: caller %llu/%llu bytes, module %zu/%zu (sealed/tail)",
                   (unsigned long long)kv->sealed_block_bytes,
                   (unsigned long long)kv->tail_block_bytes, g.sealed_block_bytes(),
                   g.tail_block_bytes()));
    }
    ctx->kvd = g.n_kv_heads * g.head_dim;
    ctx->block_bytes = g.sealed_block_bytes();
    ctx->tail_bytes = g.tail_block_bytes();
    ctx->n_sealed = kv->n_sealed_blocks;
    ctx->n_tail = kv->n_tail_slots;
    ctx->max_tokens = p->max_batch_tokens;
    ctx->max_spans =
        p->max_spans ? std::min(p->max_spans, p->max_batch_tokens) : p->max_batch_tokens;
    const size_t window_rows =
        size_t(ctx->max_spans) * (g.tail_capacity() - 1) + ctx->max_tokens;
    ctx->window_elems = window_rows * 2 * ctx->kvd;
    ctx->max_jobs = uint32_t(window_rows / g.block_tokens + 1);
    ctx->attn_ws_bytes =
        p->attention_workspace_bytes ? p->attention_workspace_bytes : kDefaultAttentionWorkspace;

    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return ctx->fail(LLMKV_CUDA_ERR_NO_DEVICE, "cudaGetDeviceCount: " + cuda_text(e));
    }
    if (p->device < 0 || p->device >= n_dev) {
        return ctx->fail(LLMKV_CUDA_ERR_NO_DEVICE,
                         format("CUDA device %d does not exist (%d devices)", p->device, n_dev));
    }
    CK(ctx, cudaSetDevice(ctx->device));  // inside api_create's DeviceScope
    int uva = 0;
    CK(ctx, cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, ctx->device));
    ctx->unified_addressing = uva != 0;
    CK(ctx, cudaStreamCreateWithFlags(&ctx->compute, cudaStreamNonBlocking));
    CK(ctx, cudaStreamCreateWithFlags(&ctx->copy, cudaStreamNonBlocking));
    CK(ctx, cudaEventCreateWithFlags(&ctx->compute_marker, cudaEventDisableTiming));
    CK(ctx, cudaEventCreateWithFlags(&ctx->copy_marker, cudaEventDisableTiming));
    CK(ctx, cudaEventCreateWithFlags(&ctx->tables_uploaded, cudaEventDisableTiming));
    ctx->ticket_events.reserve(kTicketEvents);
    for (uint32_t i = 0; i < kTicketEvents; ++i) {
        cudaEvent_t ev = nullptr;
        CK(ctx, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        ctx->ticket_events.push_back(ev);
    }

    // KV pools (zeroed: a never-written tail reads as zeros, not garbage).
    CKS(ctx->alloc(ctx->pool, size_t(ctx->n_sealed) * ctx->block_bytes, ctx->kv_bytes,
                   "sealed KV pool"));
    CKS(ctx->alloc(ctx->tails, size_t(ctx->n_tail) * ctx->tail_bytes, ctx->kv_bytes,
                   "KV tail slots"));
    CK(ctx, cudaMemsetAsync(ctx->pool, 0, size_t(ctx->n_sealed) * ctx->block_bytes, ctx->compute));
    CK(ctx, cudaMemsetAsync(ctx->tails, 0, size_t(ctx->n_tail) * ctx->tail_bytes, ctx->compute));
    // Window, workspaces, batch tables.
    const size_t T = ctx->max_tokens;
    uint64_t &o = ctx->other_bytes;
    CKS(ctx->alloc(ctx->window, ctx->window_elems * 2, o, "KV window"));
    CKS(ctx->alloc(ctx->attn_ws, ctx->attn_ws_bytes, o, "attention workspace"));
    CKS(ctx->alloc(ctx->logits_dev, kLogitsBufferBytes, o, "logits"));
    CKS(ctx->alloc(ctx->cublas_ws, kCublasWorkspace, o, "cuBLAS workspace"));
    CKS(ctx->alloc(ctx->d_tokens, T * 4, o, "batch tokens"));
    CKS(ctx->alloc(ctx->d_pos, T * 4, o, "batch positions"));
    CKS(ctx->alloc(ctx->d_row_parts, (T + 1) * 4, o, "attention work items"));
    CKS(ctx->alloc(ctx->d_logit_rows, T * 4, o, "batch logit rows"));
    CKS(ctx->alloc(ctx->d_row_span, T * 4, o, "batch row spans"));
    CKS(ctx->alloc(ctx->d_spans, size_t(ctx->max_spans) * sizeof(StepSpan), o, "batch spans"));
    CKS(ctx->alloc(ctx->d_jobs, size_t(ctx->max_jobs) * sizeof(SealJob), o, "batch seal jobs"));
    CKS(ctx->alloc_host(ctx->h_tokens, T * 4, "batch tokens"));
    CKS(ctx->alloc_host(ctx->h_pos, T * 4, "batch positions"));
    CKS(ctx->alloc_host(ctx->h_row_parts, (T + 1) * 4, "attention work items"));
    CKS(ctx->alloc_host(ctx->h_logit_rows, T * 4, "batch logit rows"));
    CKS(ctx->alloc_host(ctx->h_row_span, T * 4, "batch row spans"));
    CKS(ctx->alloc_host(ctx->h_spans, size_t(ctx->max_spans) * sizeof(StepSpan), "batch spans"));
    CKS(ctx->alloc_host(ctx->h_jobs, size_t(ctx->max_jobs) * sizeof(SealJob), "batch seal jobs"));
    const size_t ids = std::max<size_t>(4096, size_t(ctx->n_sealed));
    CKS(ctx->alloc(ctx->d_block_ids, ids * 4, o, "batch block tables"));
    CKS(ctx->alloc_host(ctx->h_block_ids, ids * 4, "batch block tables"));
    ctx->block_ids_cap = ids;
    ctx->tail_stamp.assign(ctx->n_tail, 0);
    ctx->layer_stamp.assign(g.n_layers, 0);

    CKB(ctx, cublasCreate(&ctx->cublas));
    CKB(ctx, cublasSetStream(ctx->cublas, ctx->compute));
    CKB(ctx, cublasSetWorkspace(ctx->cublas, ctx->cublas_ws, kCublasWorkspace));
    CK(ctx, cudaStreamSynchronize(ctx->compute));
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_create(const llmkv_cuda_kv_desc *kv, const llmkv_cuda_context_params *p,
                             llmkv_cuda_context **out, char *err, size_t err_cap) {
    if (!out) return LLMKV_CUDA_ERR_INVALID;
    *out = nullptr;
    const std::string bad = check_descs(kv, p);
    if (!bad.empty()) {
        write_err(err, err_cap, bad);
        return LLMKV_CUDA_ERR_INVALID;
    }
    Ctx *ctx = nullptr;
    try {
        ctx = new Ctx();
        const DeviceScope scope(p->device);  // the caller's device is current again on return
        const llmkv_cuda_status s = create_impl(ctx, kv, p);
        if (s != LLMKV_CUDA_OK) {
            write_err(err, err_cap, ctx->err);
            ctx->release_all();
            delete ctx;
            return s;
        }
    } catch (const std::bad_alloc &) {
        if (ctx) ctx->release_all();
        delete ctx;
        write_err(err, err_cap, "host out of memory creating the CUDA context");
        return LLMKV_CUDA_ERR_OUT_OF_MEMORY;
    } catch (const std::exception &ex) {
        if (ctx) ctx->release_all();
        delete ctx;
        write_err(err, err_cap, ex.what());
        return LLMKV_CUDA_ERR_INVALID;
    }
    *out = ctx;
    return LLMKV_CUDA_OK;
}

void api_destroy(llmkv_cuda_context *ctx) {
    if (!ctx) return;
    const DeviceScope scope(ctx->device);
    ctx->release_all();
    delete ctx;
}

// ---- weights and activations -------------------------------------------------------------

llmkv_cuda_status upload_weight(Ctx *ctx, const void *host, uint32_t rows, uint32_t cols,
                                size_t elem, bool matrix, llmkv_cuda_weight *out) {
    if (!host || !out || rows == 0 || cols == 0)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID, "upload: null or empty weight");
    const size_t bytes = size_t(rows) * cols * elem;
    void *dev = nullptr;
    CKS(ctx->alloc(dev, bytes, ctx->weight_bytes, matrix ? "a weight matrix" : "a weight vector"));
    const cudaError_t e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        ctx->free_device(dev);
        return ctx->cuda_fail("cudaMemcpy (weight upload)", e);
    }
    ctx->weights.push_back(DeviceWeight{dev, rows, cols, matrix});
    *out = llmkv_cuda_weight(ctx->weights.size());
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_upload_matrix(llmkv_cuda_context *ctx, const uint16_t *host, uint32_t rows,
                                    uint32_t cols, llmkv_cuda_weight *out) {
    return guarded(ctx, [&] { return upload_weight(ctx, host, rows, cols, 2, true, out); });
}

llmkv_cuda_status api_upload_vector(llmkv_cuda_context *ctx, const float *host, uint32_t n,
                                    llmkv_cuda_weight *out) {
    return guarded(ctx, [&] { return upload_weight(ctx, host, 1, n, 4, false, out); });
}

llmkv_cuda_status api_alloc_activation(llmkv_cuda_context *ctx, uint32_t rows, uint32_t cols,
                                       llmkv_cuda_tensor *out) {
    return guarded(ctx, [&] {
        if (!out || rows == 0 || cols == 0 || rows > ctx->max_tokens)
            return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                             format("alloc_activation: %u x %u (max_batch_tokens %u)", rows, cols,
                                    ctx->max_tokens));
        // The fp16 copy of a GEMM input must hold max_tokens rows of the widest activation.
        const size_t need_xh = size_t(ctx->max_tokens) * cols;
        uint16_t *xh = ctx->xh;
        if (need_xh > ctx->xh_elems)
            CKS(ctx->alloc(xh, need_xh * 2, ctx->other_bytes, "fp16 GEMM input"));
        float *p = nullptr;
        const size_t bytes = size_t(rows) * cols * 4;
        const llmkv_cuda_status s = ctx->alloc(p, bytes, ctx->other_bytes, "activations");
        if (s != LLMKV_CUDA_OK) {
            if (xh != ctx->xh) ctx->free_device(xh);  // an out-of-memory changes nothing
            return s;
        }
        if (xh != ctx->xh) {
            if (ctx->xh) ctx->free_device(ctx->xh);
            ctx->xh = xh;
            ctx->xh_elems = need_xh;
        }
        CK(ctx, cudaMemsetAsync(p, 0, bytes, ctx->compute));
        CK(ctx, cudaStreamSynchronize(ctx->compute));
        ctx->activations.push_back(Activation{reinterpret_cast<const uint8_t *>(p), bytes});
        *out = llmkv_cuda_tensor{p, rows, cols};
        return LLMKV_CUDA_OK;
    });
}

// ---- argument checks of the ops (cheap: a handful of buffers) ---------------------------

// The tensor lies inside one buffer of alloc_activation.
llmkv_cuda_status check_tensor(Ctx *ctx, const llmkv_cuda_tensor &t, const char *op,
                               const char *name) {
    if (!t.data || t.cols == 0)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID, format("%s: %s is null or empty", op, name));
    const uint8_t *p = static_cast<const uint8_t *>(t.data);
    const size_t bytes = size_t(t.rows) * t.cols * 4;
    for (const Activation &a : ctx->activations) {
        if (p >= a.data && p < a.data + a.bytes && bytes <= size_t(a.data + a.bytes - p))
            return LLMKV_CUDA_OK;
    }
    return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                     format("%s: %s (%u x %u) is not inside an activation buffer", op, name,
                            t.rows, t.cols));
}

const DeviceWeight *weight_of(Ctx *ctx, llmkv_cuda_weight h, bool matrix) {
    if (h == 0 || h > ctx->weights.size()) return nullptr;
    const DeviceWeight &w = ctx->weights[h - 1];
    return w.matrix == matrix ? &w : nullptr;
}

llmkv_cuda_status bad(Ctx *ctx, const char *op, const std::string &what) {
    return ctx->fail(LLMKV_CUDA_ERR_INVALID, std::string(op) + ": " + what);
}

llmkv_cuda_status need_batch(Ctx *ctx, const char *op) {
    return ctx->in_batch ? LLMKV_CUDA_OK : bad(ctx, op, "no batch begun");
}

// ---- packed weight matrices: GGUF rows uploaded as they are, decoded to fp16 on the device --

constexpr size_t kPackedStagingBytes = 64ull << 20;  // packed rows per host-to-device copy
constexpr size_t kStagingFlagBytes = 256;            // the overflow flag, then the rows

// Copies the packed rows through one staging buffer in chunks of whole rows and decodes each
// chunk into `dev` on the compute stream; *first_bad = the first element beyond the fp16
// range (row-major index) or ~0.
llmkv_cuda_status decode_packed_rows(Ctx *ctx, uint32_t type, const uint8_t *host, uint32_t rows,
                                     uint32_t cols, size_t row_bytes, uint8_t *staging,
                                     uint32_t chunk_rows, uint16_t *dev,
                                     unsigned long long *first_bad) {
    auto *flag = reinterpret_cast<unsigned long long *>(staging);
    uint8_t *rows_buf = staging + kStagingFlagBytes;
    CK(ctx, cudaMemsetAsync(flag, 0xff, sizeof *flag, ctx->compute));
    for (uint32_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        const uint32_t n = std::min(chunk_rows, rows - r0);
        // Stream-ordered: the next chunk's copy waits for this chunk's kernel.
        CK(ctx, cudaMemcpyAsync(rows_buf, host + size_t(r0) * row_bytes, size_t(n) * row_bytes,
                                cudaMemcpyHostToDevice, ctx->compute));
        CK(ctx, launch_dequant_f16(type, rows_buf, row_bytes, n, cols, dev + size_t(r0) * cols,
                                   flag, (unsigned long long)r0 * cols, ctx->compute));
    }
    CK(ctx, cudaMemcpyAsync(first_bad, flag, sizeof *flag, cudaMemcpyDeviceToHost, ctx->compute));
    CK(ctx, cudaStreamSynchronize(ctx->compute));
    return LLMKV_CUDA_OK;
}

const char *type_name_of(uint32_t type) {
    const char *name = llmkv::ggml_type_name(type);
    return name ? name : "unknown";
}

// The arguments of the packed uploads: *want = the type's bytes per row of cols elements.
llmkv_cuda_status check_packed_args(Ctx *ctx, const char *op, uint32_t type, const void *host,
                                    const llmkv_cuda_weight *out, uint32_t rows, uint32_t cols,
                                    uint64_t row_bytes, size_t *want) {
    if (!host || !out || rows == 0 || cols == 0) return bad(ctx, op, "null or empty matrix");
    const char *tname = type_name_of(type);
    if (!dequant_type_supported(type))
        return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                         format("%s: tensor type %s (%u) has no device decoder", op, tname, type));
    *want = dequant_row_bytes(type, cols);
    if (*want == 0 || row_bytes != *want)
        return bad(ctx, op,
                   format("%u columns of %s in rows of %llu bytes (%zu expected, 0: not whole "
                          "blocks)",
                          cols, tname, (unsigned long long)row_bytes, *want));
    return LLMKV_CUDA_OK;
}

// The UNSUPPORTED error of a matrix with a finite value beyond the fp16 range: the value,
// decoded here from the host's packed row, its row and column.
llmkv_cuda_status beyond_fp16(Ctx *ctx, uint32_t type, const void *host, uint32_t rows,
                              uint32_t cols, size_t row_bytes, unsigned long long first_bad,
                              const char *why) {
    const uint64_t r = first_bad / cols, c = first_bad % cols;
    float f = 0.0f;
    llmkv::dq::decode_element(llmkv::TensorType(type),
                              static_cast<const uint8_t *>(host) + r * row_bytes, c, &f);
    return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                     format("weight matrix %u x %u (%s): value %g at row %llu, column %llu is "
                            "beyond the fp16 range (%s)",
                            rows, cols, type_name_of(type), double(f), (unsigned long long)r,
                            (unsigned long long)c, why));
}

llmkv_cuda_status upload_packed(Ctx *ctx, uint32_t type, const void *host, uint32_t rows,
                                uint32_t cols, uint64_t row_bytes, llmkv_cuda_weight *out) {
    size_t want = 0;
    CKS(check_packed_args(ctx, "upload_matrix_packed", type, host, out, rows, cols, row_bytes,
                          &want));
    uint16_t *dev = nullptr;
    CKS(ctx->alloc(dev, size_t(rows) * cols * 2, ctx->weight_bytes, "a weight matrix"));
    uint32_t chunk_rows = uint32_t(std::clamp<uint64_t>(kPackedStagingBytes / want, 1, rows));
    uint8_t *staging = nullptr;
    llmkv_cuda_status s;
    for (;;) {  // a smaller staging buffer when the device is nearly full of weights
        s = ctx->alloc(staging, kStagingFlagBytes + size_t(chunk_rows) * want, ctx->other_bytes,
                       "packed weight staging");
        if (s != LLMKV_CUDA_ERR_OUT_OF_MEMORY || chunk_rows == 1) break;
        chunk_rows = (chunk_rows + 1) / 2;
    }
    unsigned long long first_bad = ~0ull;
    if (s == LLMKV_CUDA_OK) {
        s = decode_packed_rows(ctx, type, static_cast<const uint8_t *>(host), rows, cols, want,
                               staging, chunk_rows, dev, &first_bad);
        ctx->free_device(staging);
    }
    if (s == LLMKV_CUDA_OK && first_bad != ~0ull)
        s = beyond_fp16(ctx, type, host, rows, cols, want, first_bad,
                        "the CUDA backend keeps weights in fp16");
    if (s != LLMKV_CUDA_OK) {
        ctx->free_device(dev);
        return s;
    }
    ctx->weights.push_back(DeviceWeight{dev, rows, cols, true});
    *out = llmkv_cuda_weight(ctx->weights.size());
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_upload_matrix_packed(llmkv_cuda_context *ctx, uint32_t type,
                                           const void *host, uint32_t rows, uint32_t cols,
                                           uint64_t row_bytes, llmkv_cuda_weight *out) {
    return guarded(ctx, [&] { return upload_packed(ctx, type, host, rows, cols, row_bytes, out); });
}

// ---- matrices kept in their GGUF encoding -------------------------------------------------

// Grows the fp16 scratch of the encoded matrices' GEMMs to hold min(rows, as many rows as
// kDequantScratchBytes holds, at least one) rows of `cols`, and allocates the overflow flag.
// The new buffer is allocated before the old one goes: an out-of-memory changes nothing.
llmkv_cuda_status grow_dq_scratch(Ctx *ctx, uint32_t rows, uint32_t cols) {
    if (!ctx->dq_flag)
        CKS(ctx->alloc(ctx->dq_flag, sizeof(unsigned long long), ctx->other_bytes,
                       "dequantization flag"));
    const size_t fit = std::max<size_t>(kDequantScratchBytes / 2 / cols, 1);
    const size_t need = std::min<size_t>(rows, fit) * cols;
    if (need <= ctx->dq_scratch_elems) return LLMKV_CUDA_OK;
    uint16_t *p = nullptr;
    CKS(ctx->alloc(p, need * 2, ctx->other_bytes, "dequantization scratch"));
    if (ctx->dq_scratch) {
        CK(ctx, cudaStreamSynchronize(ctx->compute));  // queued GEMMs may still read it
        ctx->free_device(ctx->dq_scratch);
    }
    ctx->dq_scratch = p;
    ctx->dq_scratch_elems = need;
    return LLMKV_CUDA_OK;
}

// Rows of an encoded matrix per chunk of the scratch.
uint32_t dq_chunk_rows(const Ctx *ctx, const DeviceWeight &w) {
    return uint32_t(std::clamp<size_t>(ctx->dq_scratch_elems / w.cols, 1, w.rows));
}

// Rows [r0, r0 + n) of an encoded matrix decoded to fp16 into the scratch; with a flag, a
// value beyond fp16 lowers it (launch_dequant_f16).
llmkv_cuda_status decode_chunk(Ctx *ctx, const DeviceWeight &w, uint32_t r0, uint32_t n,
                               unsigned long long *flag) {
    CK(ctx, launch_dequant_f16(w.type, static_cast<const uint8_t *>(w.data) + size_t(r0) * w.row_bytes,
                               w.row_bytes, n, w.cols, ctx->dq_scratch, flag,
                               (unsigned long long)r0 * w.cols, ctx->compute));
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status upload_quantized(Ctx *ctx, uint32_t type, const void *host, uint32_t rows,
                                   uint32_t cols, uint64_t row_bytes, llmkv_cuda_weight *out) {
    size_t want = 0;
    CKS(check_packed_args(ctx, "upload_matrix_quantized", type, host, out, rows, cols,
                          row_bytes, &want));
    void *dev = nullptr;
    CKS(ctx->alloc(dev, size_t(rows) * want, ctx->weight_bytes, "a weight matrix (encoded)"));
    if (const llmkv_cuda_status g = grow_dq_scratch(ctx, rows, cols); g != LLMKV_CUDA_OK) {
        ctx->free_device(dev);  // an out-of-memory keeps nothing
        return g;
    }
    DeviceWeight w{dev, rows, cols, true, true, type, want};
    // The rows as they are in the file, then every row decoded once through the scratch: the
    // prefill GEMMs use fp16 rows, so a value beyond the fp16 range is refused here as
    // upload_matrix_packed refuses it.
    unsigned long long first_bad = ~0ull;
    auto copy_and_check = [&]() -> llmkv_cuda_status {
        CK(ctx, cudaMemcpyAsync(dev, host, size_t(rows) * want, cudaMemcpyHostToDevice,
                                ctx->compute));
        CK(ctx, cudaMemsetAsync(ctx->dq_flag, 0xff, sizeof first_bad, ctx->compute));
        const uint32_t chunk = dq_chunk_rows(ctx, w);
        for (uint32_t r0 = 0; r0 < rows; r0 += chunk)
            CKS(decode_chunk(ctx, w, r0, std::min(chunk, rows - r0), ctx->dq_flag));
        CK(ctx, cudaMemcpyAsync(&first_bad, ctx->dq_flag, sizeof first_bad,
                                cudaMemcpyDeviceToHost, ctx->compute));
        CK(ctx, cudaStreamSynchronize(ctx->compute));
        return LLMKV_CUDA_OK;
    };
    llmkv_cuda_status s = copy_and_check();
    if (s == LLMKV_CUDA_OK && first_bad != ~0ull)
        s = beyond_fp16(ctx, type, host, rows, cols, want, first_bad,
                        "the CUDA backend's prefill GEMMs read fp16 rows");
    if (s != LLMKV_CUDA_OK) {
        ctx->free_device(dev);
        return s;
    }
    ctx->weights.push_back(w);
    *out = llmkv_cuda_weight(ctx->weights.size());
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_upload_matrix_quantized(llmkv_cuda_context *ctx, uint32_t type,
                                              const void *host, uint32_t rows, uint32_t cols,
                                              uint64_t row_bytes, llmkv_cuda_weight *out) {
    return guarded(ctx,
                   [&] { return upload_quantized(ctx, type, host, rows, cols, row_bytes, out); });
}

// ---- one batch ------------------------------------------------------------------------------

// Grows a per-batch table to hold `need` entries (capacity doubled from max(cap, min_cap)):
// the device buffer and, when h is given, its pinned host mirror. The new buffers are
// allocated before the old ones go, so an out-of-memory keeps the old tables and capacity;
// the old ones may still be read by queued work and are freed after it (rare: a new
// high-water mark).
template <class T>
llmkv_cuda_status grow_table(Ctx *ctx, T *&d, T **h, size_t &cap, size_t need, size_t min_cap,
                             const char *what) {
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

// A host-tier block the kernels may read: 16-byte aligned, its sealed_block_bytes inside one
// allocation of api_host_alloc (mapped pinned memory).
bool host_block_ok(const Ctx *ctx, const void *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (!p || a % 16 != 0 || !ctx->unified_addressing) return false;
    auto it = std::upper_bound(ctx->host_ranges.begin(), ctx->host_ranges.end(),
                               std::make_pair(a, ~size_t(0)));
    if (it == ctx->host_ranges.begin()) return false;
    --it;
    return a >= it->first && a - it->first <= it->second &&
           ctx->block_bytes <= it->second - (a - it->first);
}

llmkv_cuda_status begin_batch_impl(Ctx *ctx, const llmkv_cuda_span *spans, uint32_t n_spans,
                                   uint32_t *n_tokens, uint32_t *n_logit_rows) {
    ctx->in_batch = false;
    if (n_spans == 0 || !spans) return bad(ctx, "begin_batch", "no spans");
    if (n_spans > ctx->max_spans)
        return bad(ctx, "begin_batch",
                   format("%u spans exceed the limit %u", n_spans, ctx->max_spans));
    const KvGeometry &g = ctx->g;
    const uint32_t B = g.block_tokens;

    // Validate everything before any device work.
    uint64_t T = 0, n_blocks_total = 0, n_host_total = 0;
    uint32_t n_logits = 0, max_ctx = 0;
    int32_t max_token = 0;
    ++ctx->step_counter;
    if (ctx->step_counter == 0) {  // wrapped: restart the stamps
        std::fill(ctx->tail_stamp.begin(), ctx->tail_stamp.end(), 0u);
        std::fill(ctx->layer_stamp.begin(), ctx->layer_stamp.end(), 0u);
        ctx->step_counter = 1;
    }
    for (uint32_t i = 0; i < n_spans; ++i) {
        const llmkv_cuda_span &s = spans[i];
        if (s.n == 0 || !s.tokens) return bad(ctx, "begin_batch", format("span %u is empty", i));
        if (uint64_t(s.pos0) + s.n > 0x7fffffffu)
            return bad(ctx, "begin_batch", format("span %u position overflow", i));
        if (s.tail_slot >= ctx->n_tail)
            return bad(ctx, "begin_batch",
                       format("span %u tail slot %u out of range (%u)", i, s.tail_slot,
                              ctx->n_tail));
        if (ctx->tail_stamp[s.tail_slot] == ctx->step_counter)
            return bad(ctx, "begin_batch", format("tail slot %u used by two spans", s.tail_slot));
        ctx->tail_stamp[s.tail_slot] = ctx->step_counter;
        const uint32_t need = g.sealed_blocks(s.pos0 + s.n);
        if (s.n_blocks < need || (need > 0 && !s.blocks))
            return bad(ctx, "begin_batch",
                       format("span %u has %u sealed blocks, needs %u", i, s.n_blocks, need));
        const uint32_t first_sealed_here = g.sealed_blocks(s.pos0);  // the batch seals from here
        for (uint32_t b = 0; b < need; ++b) {
            if (s.blocks[b] == LLMKV_CUDA_HOST_BLOCK) {
                const void *hp = s.host_blocks ? s.host_blocks[b] : nullptr;
                if (b >= first_sealed_here)
                    return bad(ctx, "begin_batch",
                               format("span %u block %u is sealed by this batch but names host "
                                      "memory",
                                      i, b));
                if (!host_block_ok(ctx, hp))
                    return bad(ctx, "begin_batch",
                               format("span %u block %u: host block %p is not 16-byte aligned "
                                      "memory from host_alloc",
                                      i, b, hp));
                ++n_host_total;
                continue;
            }
            if (s.blocks[b] >= ctx->n_sealed)
                return bad(ctx, "begin_batch",
                           format("span %u block %u id %u out of range (%u)", i, b, s.blocks[b],
                                  ctx->n_sealed));
        }
        for (uint32_t t = 0; t < s.n; ++t) {
            if (s.tokens[t] < 0)
                return bad(ctx, "begin_batch", format("token id %d is negative", s.tokens[t]));
            max_token = std::max(max_token, s.tokens[t]);
        }
        T += s.n;
        n_blocks_total += need;
        n_logits += s.want_logits ? (s.all_logits ? s.n : 1) : 0;
        max_ctx = std::max(max_ctx, s.pos0 + s.n);
    }
    if (T > ctx->max_tokens)
        return bad(ctx, "begin_batch",
                   format("%llu tokens exceed the batch limit %u", (unsigned long long)T,
                          ctx->max_tokens));
    // The previous batch's table uploads read the pinned mirrors: wait for them before
    // rewriting (they are at the head of that batch's work).
    if (ctx->tables_pending) {
        CK(ctx, cudaEventSynchronize(ctx->tables_uploaded));
        ctx->tables_pending = false;
    }
    if (uint64_t(ctx->n_sealed) + n_host_total >= LLMKV_CUDA_HOST_BLOCK)
        return bad(ctx, "begin_batch", "too many host blocks for 32-bit block ids");
    CKS(grow_table(ctx, ctx->d_block_ids, &ctx->h_block_ids, ctx->block_ids_cap, n_blocks_total,
                   1, "batch block tables"));
    CKS(grow_table(ctx, ctx->d_host_blocks, &ctx->h_host_blocks, ctx->host_blocks_cap,
                   n_host_total, 256, "host block table"));

    // Batch tables.
    uint32_t row = 0, n_jobs = 0, n_lrows = 0;
    size_t n_host = 0;
    uint64_t win_off = 0;
    size_t blocks_off = 0;
    for (uint32_t i = 0; i < n_spans; ++i) {
        const llmkv_cuda_span &s = spans[i];
        const uint32_t ws = g.sealed_blocks(s.pos0) * B;
        const uint32_t cap = s.pos0 - ws + s.n;
        const uint32_t need = g.sealed_blocks(s.pos0 + s.n);
        StepSpan &d = ctx->h_spans[i];
        d.pos0 = s.pos0;
        d.n = s.n;
        d.row0 = row;
        d.tail_slot = s.tail_slot;
        d.win_start = ws;
        d.win_cap = cap;
        d.win_offset = win_off;
        d.blocks_offset = uint32_t(blocks_off);
        d.n_blocks = need;
        if (need) std::memcpy(ctx->h_block_ids + blocks_off, s.blocks, size_t(need) * 4);
        for (uint32_t b = 0; b < need; ++b) {  // host blocks: virtual ids past the pool
            if (s.blocks[b] != LLMKV_CUDA_HOST_BLOCK) continue;
            ctx->h_host_blocks[n_host] = static_cast<const uint8_t *>(s.host_blocks[b]);
            ctx->h_block_ids[blocks_off + b] = ctx->n_sealed + uint32_t(n_host++);
        }
        for (uint32_t b = ws / B; b < need; ++b) {
            if (n_jobs >= ctx->max_jobs)
                return bad(ctx, "begin_batch", "too many blocks sealed in one batch");
            ctx->h_jobs[n_jobs++] = SealJob{i, s.blocks[b], b * B - ws};
        }
        for (uint32_t t = 0; t < s.n; ++t) {
            ctx->h_tokens[row + t] = s.tokens[t];
            ctx->h_pos[row + t] = int32_t(s.pos0 + t);
            ctx->h_row_span[row + t] = i;
        }
        if (s.want_logits) {
            for (uint32_t t = s.all_logits ? 0 : s.n - 1; t < s.n; ++t)
                ctx->h_logit_rows[n_lrows++] = int32_t(row + t);
        }
        win_off += 2ull * ctx->kvd * cap;
        blocks_off += need;
        row += s.n;
    }
    if (win_off > ctx->window_elems)
        return bad(ctx, "begin_batch", "KV window buffer too small (internal)");
    if (!attention_partition_plan(ctx->h_pos, uint32_t(T), ctx->h_row_parts))
        return bad(ctx, "begin_batch", "more than 2^32 attention work items in one batch");
    CKS(grow_table<uint32_t>(ctx, ctx->d_item_row, nullptr, ctx->item_row_cap,
                             ctx->h_row_parts[T], 1024, "attention work items"));

    cudaStream_t st = ctx->compute;
    CKS(order_after_copies(ctx));
    CK(ctx, cudaMemcpyAsync(ctx->d_tokens, ctx->h_tokens, size_t(T) * 4, cudaMemcpyHostToDevice,
                            st));
    CK(ctx, cudaMemcpyAsync(ctx->d_pos, ctx->h_pos, size_t(T) * 4, cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->d_row_parts, ctx->h_row_parts, size_t(T + 1) * 4,
                            cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->d_row_span, ctx->h_row_span, size_t(T) * 4,
                            cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->d_spans, ctx->h_spans, size_t(n_spans) * sizeof(StepSpan),
                            cudaMemcpyHostToDevice, st));
    if (n_jobs)
        CK(ctx, cudaMemcpyAsync(ctx->d_jobs, ctx->h_jobs, size_t(n_jobs) * sizeof(SealJob),
                                cudaMemcpyHostToDevice, st));
    if (n_lrows)
        CK(ctx, cudaMemcpyAsync(ctx->d_logit_rows, ctx->h_logit_rows, size_t(n_lrows) * 4,
                                cudaMemcpyHostToDevice, st));
    if (blocks_off)
        CK(ctx, cudaMemcpyAsync(ctx->d_block_ids, ctx->h_block_ids, blocks_off * 4,
                                cudaMemcpyHostToDevice, st));
    if (n_host)
        CK(ctx, cudaMemcpyAsync(ctx->d_host_blocks, ctx->h_host_blocks, n_host * sizeof(void *),
                                cudaMemcpyHostToDevice, st));
    CK(ctx, cudaEventRecord(ctx->tables_uploaded, st));
    ctx->tables_pending = true;
    CK(ctx, launch_attention_item_rows(ctx->d_row_parts, uint32_t(T), ctx->d_item_row, st));

    ctx->T = uint32_t(T);
    ctx->n_spans = n_spans;
    ctx->n_jobs = n_jobs;
    ctx->n_lrows = n_lrows;
    ctx->max_ctx = max_ctx;
    ctx->max_token = max_token;
    ctx->window_layer = -1;
    ctx->in_batch = true;
    if (n_tokens) *n_tokens = uint32_t(T);
    if (n_logit_rows) *n_logit_rows = n_logits;
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_begin_batch(llmkv_cuda_context *ctx, const llmkv_cuda_span *spans,
                                  uint32_t n_spans, uint32_t *n_tokens, uint32_t *n_logit_rows) {
    return guarded(ctx,
                   [&] { return begin_batch_impl(ctx, spans, n_spans, n_tokens, n_logit_rows); });
}

llmkv_cuda_status api_embed(llmkv_cuda_context *ctx, llmkv_cuda_weight table,
                            llmkv_cuda_tensor out) {
    return guarded(ctx, [&] {
        const char *op = "embed";
        CKS(need_batch(ctx, op));
        CKS(check_tensor(ctx, out, op, "out"));
        const DeviceWeight *w = weight_of(ctx, table, true);
        if (!w) return bad(ctx, op, "table is not a matrix handle");
        if (w->cols != out.cols || out.rows < ctx->T)
            return bad(ctx, op, format("table %u x %u, out %u x %u, %u tokens", w->rows, w->cols,
                                       out.rows, out.cols, ctx->T));
        if (uint32_t(ctx->max_token) >= w->rows)
            return bad(ctx, op, format("token id %d outside the vocabulary (%u)", ctx->max_token,
                                       w->rows));
        if (w->encoded)  // the rows decoded straight to f32: the CPU reference's values
            CK(ctx, launch_gather_decoded_rows(w->type, w->data, w->row_bytes, ctx->d_tokens,
                                               ctx->T, w->cols, static_cast<float *>(out.data),
                                               ctx->compute));
        else
            CK(ctx, launch_embedding(static_cast<const uint16_t *>(w->data), w->cols,
                                     ctx->d_tokens, ctx->T, static_cast<float *>(out.data),
                                     ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_rms_norm(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                               llmkv_cuda_weight weight, float eps, llmkv_cuda_tensor out) {
    return guarded(ctx, [&] {
        const char *op = "rms_norm";
        CKS(check_tensor(ctx, x, op, "x"));
        CKS(check_tensor(ctx, out, op, "out"));
        const DeviceWeight *w = weight_of(ctx, weight, false);
        if (!w) return bad(ctx, op, "weight is not a vector handle");
        if (w->cols != x.cols || out.cols != x.cols || out.rows < x.rows)
            return bad(ctx, op, format("x %u x %u, weight %u, out %u x %u", x.rows, x.cols,
                                       w->cols, out.rows, out.cols));
        CK(ctx, launch_rms_norm(static_cast<const float *>(x.data), x.cols, nullptr, x.rows,
                                static_cast<const float *>(w->data), x.cols, eps, nullptr,
                                static_cast<float *>(out.data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

// x (f32) -> the fp16 GEMM input buffer.
llmkv_cuda_status to_fp16_input(Ctx *ctx, const llmkv_cuda_tensor &x, const char *op) {
    const size_t n = size_t(x.rows) * x.cols;
    if (n > ctx->xh_elems) return bad(ctx, op, "x is wider than every activation buffer");
    CK(ctx, launch_f32_to_f16(static_cast<const float *>(x.data), n, ctx->xh, ctx->compute));
    return LLMKV_CUDA_OK;
}

// y[t][r] (f32, row stride ldy) = x[t] . w[r] for the n rows of x starting at row x0 of the
// activation x (f32, stride x.cols); *xh_ready: whether ctx->xh already holds the fp16 copy of
// x's rows (to_fp16_input; made here, once, when a GEMM needs it).
// Batch-invariant context, or an encoded matrix with n <= kMatvecRouteMaxRows, and a row the
// matvec reads -> launch_matvec_q on the f32 rows, kMatvecMaxTokens rows per launch (a row's
// result does not depend on n; an fp16 matrix is read as F16 rows). Else an fp16 matrix is
// one cuBLAS GEMM, an encoded one row chunks decoded into the fp16 scratch, one GEMM each.
llmkv_cuda_status product(Ctx *ctx, const char *op, const DeviceWeight &w,
                          const llmkv_cuda_tensor &x, uint32_t x0, uint32_t n, bool *xh_ready,
                          float *y, size_t ldy) {
    const float *xf = static_cast<const float *>(x.data) + size_t(x0) * x.cols;
    const uint32_t type = w.encoded ? w.type : uint32_t(llmkv::TensorType::F16);
    const size_t row_bytes = w.encoded ? w.row_bytes : size_t(w.cols) * 2;
    const bool matvec_reads = matvec_q_row_supported(type, w.cols) && x.cols % 4 == 0 &&
                              reinterpret_cast<uintptr_t>(xf) % 16 == 0;
    if (ctx->batch_invariant && !matvec_reads)
        return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                         format("%s: a %u x %u matrix the matvec kernel cannot read (batch-"
                                "invariant mode)",
                                op, w.rows, w.cols));
    if (matvec_reads && (ctx->batch_invariant || (w.encoded && n <= kMatvecRouteMaxRows))) {
        for (uint32_t t0 = 0; t0 < n; t0 += kMatvecMaxTokens) {
            const uint32_t nt = std::min(kMatvecMaxTokens, n - t0);
            CK(ctx, launch_matvec_q(type, w.data, row_bytes, w.rows, w.cols,
                                    xf + size_t(t0) * x.cols, x.cols, nt, y + size_t(t0) * ldy,
                                    ldy, ctx->compute));
        }
        return LLMKV_CUDA_OK;
    }
    if (!*xh_ready) {
        CKS(to_fp16_input(ctx, x, op));
        *xh_ready = true;
    }
    const uint16_t *xh = ctx->xh + size_t(x0) * x.cols;
    if (!w.encoded) {
        CKB(ctx, gemm_f16_f32(ctx->cublas, static_cast<const uint16_t *>(w.data), w.rows, w.cols,
                              xh, x.cols, n, y, int64_t(ldy), 0.0f));
        return LLMKV_CUDA_OK;
    }
    const uint32_t chunk = dq_chunk_rows(ctx, w);
    for (uint32_t r0 = 0; r0 < w.rows; r0 += chunk) {
        const uint32_t nr = std::min(chunk, w.rows - r0);
        CKS(decode_chunk(ctx, w, r0, nr, nullptr));
        CKB(ctx, gemm_f16_f32(ctx->cublas, ctx->dq_scratch, nr, w.cols, xh, x.cols, n, y + r0,
                              int64_t(ldy), 0.0f));
    }
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_matmul(llmkv_cuda_context *ctx, llmkv_cuda_weight weight,
                             llmkv_cuda_tensor x, llmkv_cuda_tensor y) {
    return guarded(ctx, [&] {
        const char *op = "matmul";
        CKS(check_tensor(ctx, x, op, "x"));
        CKS(check_tensor(ctx, y, op, "y"));
        const DeviceWeight *w = weight_of(ctx, weight, true);
        if (!w) return bad(ctx, op, "w is not a matrix handle");
        if (w->cols != x.cols || y.cols != w->rows || y.rows < x.rows || x.data == y.data)
            return bad(ctx, op, format("w %u x %u, x %u x %u, y %u x %u", w->rows, w->cols,
                                       x.rows, x.cols, y.rows, y.cols));
        bool xh_ready = false;
        return product(ctx, op, *w, x, 0, x.rows, &xh_ready, static_cast<float *>(y.data),
                       y.cols);
    });
}

llmkv_cuda_status api_rope(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, uint32_t n_heads,
                           uint32_t head_dim, uint32_t rope_dim, uint32_t style, float freq_scale,
                           llmkv_cuda_weight inv_freq) {
    return guarded(ctx, [&] {
        const char *op = "rope";
        CKS(need_batch(ctx, op));
        CKS(check_tensor(ctx, x, op, "x"));
        if (x.rows > ctx->T) return bad(ctx, op, "x has more rows than the batch");
        if (style > LLMKV_CUDA_ROPE_HALVES) return bad(ctx, op, format("style %u", style));
        if (rope_dim % 2 != 0 || rope_dim > head_dim || size_t(n_heads) * head_dim > x.cols)
            return bad(ctx, op, format("rope_dim %u, head_dim %u, %u heads, x.cols %u", rope_dim,
                                       head_dim, n_heads, x.cols));
        if (rope_dim == 0) return LLMKV_CUDA_OK;
        const DeviceWeight *f = weight_of(ctx, inv_freq, false);
        if (!f || f->cols < rope_dim / 2) return bad(ctx, op, "inv_freq: no vector of rope_dim / 2");
        CK(ctx, launch_rope(static_cast<float *>(x.data), x.cols, x.rows, ctx->d_pos, n_heads,
                            head_dim, rope_dim, style == LLMKV_CUDA_ROPE_HALVES, freq_scale,
                            static_cast<const float *>(f->data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_write_kv(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor k,
                               llmkv_cuda_tensor v) {
    return guarded(ctx, [&] {
        const char *op = "write_kv";
        CKS(need_batch(ctx, op));
        CKS(check_tensor(ctx, k, op, "k"));
        CKS(check_tensor(ctx, v, op, "v"));
        if (layer >= ctx->g.n_layers)
            return bad(ctx, op, format("layer %u of %u", layer, ctx->g.n_layers));
        if (k.rows < ctx->T || v.rows < ctx->T || k.cols < ctx->kvd || v.cols < ctx->kvd)
            return bad(ctx, op, format("k %u x %u, v %u x %u for %u tokens of %u values", k.rows,
                                       k.cols, v.rows, v.cols, ctx->T, ctx->kvd));
        // A second write of one layer would reload the tail it already advanced.
        if (ctx->layer_stamp[layer] == ctx->step_counter)
            return bad(ctx, op, format("layer %u written twice in one batch", layer));
        CKS(order_after_copies(ctx));
        const KvGeometry &g = ctx->g;
        cudaStream_t st = ctx->compute;
        CK(ctx, launch_window_load_tail(g, layer, ctx->tails, ctx->d_spans, ctx->n_spans,
                                        ctx->window, st));
        CK(ctx, launch_window_append(g, static_cast<const float *>(k.data), k.cols,
                                     static_cast<const float *>(v.data), v.cols, ctx->d_row_span,
                                     ctx->T, ctx->d_spans, ctx->window, st));
        CK(ctx, launch_kv_seal(g, layer, ctx->window, ctx->d_spans, ctx->d_jobs, ctx->n_jobs,
                               ctx->pool, st));
        CK(ctx, launch_window_store_tail(g, layer, ctx->window, ctx->d_spans, ctx->n_spans,
                                         ctx->tails, st));
        ctx->layer_stamp[layer] = ctx->step_counter;
        ctx->window_layer = layer;
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_attention(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor q,
                                uint32_t n_heads, float scale, uint32_t window,
                                llmkv_cuda_tensor out) {
    return guarded(ctx, [&] {
        const char *op = "attention";
        CKS(need_batch(ctx, op));
        CKS(check_tensor(ctx, q, op, "q"));
        CKS(check_tensor(ctx, out, op, "out"));
        const KvGeometry &g = ctx->g;
        if (ctx->window_layer != int64_t(layer))
            return bad(ctx, op, format("layer %u is not the layer of the last write_kv", layer));
        const size_t width = size_t(n_heads) * g.head_dim;
        if (n_heads == 0 || n_heads % g.n_kv_heads != 0 || q.cols < width || out.cols < width ||
            q.rows < ctx->T || out.rows < ctx->T)
            return bad(ctx, op, format("%u heads (%u kv heads), q %u x %u, out %u x %u", n_heads,
                                       g.n_kv_heads, q.rows, q.cols, out.rows, out.cols));
        const size_t need_ws = attention_min_workspace(n_heads, g.head_dim, ctx->max_ctx);
        if (need_ws > ctx->attn_ws_bytes)
            return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                             format("attention: context %u needs %zu bytes of attention "
                                    "workspace, the context has %zu",
                                    ctx->max_ctx, need_ws, ctx->attn_ws_bytes));
        CKS(order_after_copies(ctx));
        AttentionArgs aa;
        aa.g = g;
        aa.layer = layer;
        aa.n_heads = n_heads;
        aa.scale = scale;
        aa.sliding_window = window;
        aa.q = static_cast<const float *>(q.data);
        aa.q_stride = q.cols;
        aa.pool = ctx->pool;
        aa.block_ids = ctx->d_block_ids;
        aa.window = ctx->window;
        aa.spans = ctx->d_spans;
        aa.row_span = ctx->d_row_span;
        aa.n_rows = ctx->T;
        aa.row_parts_host = ctx->h_row_parts;
        aa.row_parts = ctx->d_row_parts;
        aa.item_row = ctx->d_item_row;
        aa.n_pool_blocks = ctx->n_sealed;
        aa.host_blocks = ctx->d_host_blocks;
        aa.out_f32 = static_cast<float *>(out.data);
        aa.out_stride = out.cols;
        aa.workspace = ctx->attn_ws;
        aa.workspace_bytes = ctx->attn_ws_bytes;
        CK(ctx, launch_paged_attention(aa, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status same_shape(Ctx *ctx, const char *op, const llmkv_cuda_tensor &a,
                             const llmkv_cuda_tensor &b) {
    CKS(check_tensor(ctx, a, op, "first tensor"));
    CKS(check_tensor(ctx, b, op, "second tensor"));
    if (a.cols != b.cols || b.rows < a.rows)
        return bad(ctx, op, format("%u x %u and %u x %u", a.rows, a.cols, b.rows, b.cols));
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_add(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, llmkv_cuda_tensor y) {
    return guarded(ctx, [&] {
        CKS(same_shape(ctx, "add", x, y));
        CK(ctx, launch_add(static_cast<float *>(x.data), static_cast<const float *>(y.data),
                           size_t(x.rows) * x.cols, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_swiglu(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate,
                             llmkv_cuda_tensor up) {
    return guarded(ctx, [&] {
        CKS(same_shape(ctx, "swiglu", gate, up));
        CK(ctx, launch_swiglu(static_cast<float *>(gate.data), static_cast<const float *>(up.data),
                              size_t(gate.rows) * gate.cols, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_geglu(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate,
                            llmkv_cuda_tensor up) {
    return guarded(ctx, [&] {
        CKS(same_shape(ctx, "geglu", gate, up));
        CK(ctx, launch_geglu(static_cast<float *>(gate.data), static_cast<const float *>(up.data),
                             size_t(gate.rows) * gate.cols, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_add_bias(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                               llmkv_cuda_weight bias) {
    return guarded(ctx, [&] {
        const char *op = "add_bias";
        CKS(check_tensor(ctx, x, op, "x"));
        const DeviceWeight *w = weight_of(ctx, bias, false);
        if (!w) return bad(ctx, op, "bias is not a vector handle");
        if (w->cols != x.cols) return bad(ctx, op, format("x %u x %u, bias %u", x.rows, x.cols, w->cols));
        CK(ctx, launch_add_bias(static_cast<float *>(x.data), x.cols, x.rows,
                                static_cast<const float *>(w->data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_scale(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, float s) {
    return guarded(ctx, [&] {
        CKS(check_tensor(ctx, x, "scale", "x"));
        CK(ctx, launch_scale(static_cast<float *>(x.data), size_t(x.rows) * x.cols, s, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_gather_logit_rows(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                        llmkv_cuda_tensor out) {
    return guarded(ctx, [&] {
        const char *op = "gather_logit_rows";
        CKS(need_batch(ctx, op));
        CKS(check_tensor(ctx, x, op, "x"));
        CKS(check_tensor(ctx, out, op, "out"));
        if (x.cols != out.cols || x.rows < ctx->T || out.rows < ctx->n_lrows || x.data == out.data)
            return bad(ctx, op, format("x %u x %u, out %u x %u, %u tokens, %u logit rows", x.rows,
                                       x.cols, out.rows, out.cols, ctx->T, ctx->n_lrows));
        CK(ctx, launch_gather_rows(static_cast<const float *>(x.data), x.cols, ctx->d_logit_rows,
                                   ctx->n_lrows, static_cast<float *>(out.data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_logits(llmkv_cuda_context *ctx, llmkv_cuda_weight weight,
                             llmkv_cuda_tensor x, float *host) {
    return guarded(ctx, [&] {
        const char *op = "logits";
        CKS(check_tensor(ctx, x, op, "x"));
        const DeviceWeight *w = weight_of(ctx, weight, true);
        if (!w) return bad(ctx, op, "w is not a matrix handle");
        if (w->cols != x.cols) return bad(ctx, op, "x.cols differs from the matrix's cols");
        if (x.rows == 0) return LLMKV_CUDA_OK;
        if (!host) return bad(ctx, op, "host is null");
        const size_t row_bytes = size_t(w->rows) * 4;
        if (row_bytes > kLogitsBufferBytes)
            return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                             format("logits: %u outputs exceed the logits buffer", w->rows));
        const uint32_t chunk = uint32_t(std::min<size_t>(kLogitsBufferBytes / row_bytes, x.rows));
        bool xh_ready = false;
        for (uint32_t r0 = 0; r0 < x.rows; r0 += chunk) {
            const uint32_t nc = std::min(chunk, x.rows - r0);
            CKS(product(ctx, op, *w, x, r0, nc, &xh_ready, ctx->logits_dev, w->rows));
            CK(ctx, cudaMemcpyAsync(host + size_t(r0) * w->rows, ctx->logits_dev, nc * row_bytes,
                                    cudaMemcpyDeviceToHost, ctx->compute));
        }
        CK(ctx, cudaStreamSynchronize(ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_end_batch(llmkv_cuda_context *ctx) {
    return guarded(ctx, [&] {
        ctx->in_batch = false;
        ctx->window_layer = -1;
        return LLMKV_CUDA_OK;
    });
}

// ---- synchronous copies -----------------------------------------------------------------

llmkv_cuda_status sync_copy(Ctx *ctx, void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind kind) {
    CKS(order_after_copies(ctx, /*reads_too=*/true));
    CK(ctx, cudaMemcpyAsync(dst, src, bytes, kind, ctx->compute));
    CK(ctx, cudaStreamSynchronize(ctx->compute));
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status check_block(Ctx *ctx, uint32_t id, const void *host) {
    if (!host) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "null host buffer");
    if (id >= ctx->n_sealed)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("sealed block %u out of range (%u)", id, ctx->n_sealed));
    return LLMKV_CUDA_OK;
}
llmkv_cuda_status check_tail(Ctx *ctx, uint32_t slot) {
    if (slot >= ctx->n_tail)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("tail slot %u out of range (%u)", slot, ctx->n_tail));
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_read_block(llmkv_cuda_context *ctx, uint32_t id, void *host) {
    return guarded(ctx, [&] {
        CKS(check_block(ctx, id, host));
        return sync_copy(ctx, host, ctx->pool + size_t(id) * ctx->block_bytes, ctx->block_bytes,
                         cudaMemcpyDeviceToHost);
    });
}
llmkv_cuda_status api_write_block(llmkv_cuda_context *ctx, uint32_t id, const void *host) {
    return guarded(ctx, [&] {
        CKS(check_block(ctx, id, host));
        return sync_copy(ctx, ctx->pool + size_t(id) * ctx->block_bytes, host, ctx->block_bytes,
                         cudaMemcpyHostToDevice);
    });
}
llmkv_cuda_status api_read_tail(llmkv_cuda_context *ctx, uint32_t slot, void *host) {
    return guarded(ctx, [&] {
        CKS(check_tail(ctx, slot));
        if (!host) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "null host buffer");
        return sync_copy(ctx, host, ctx->tails + size_t(slot) * ctx->tail_bytes, ctx->tail_bytes,
                         cudaMemcpyDeviceToHost);
    });
}
llmkv_cuda_status api_write_tail(llmkv_cuda_context *ctx, uint32_t slot, const void *host) {
    return guarded(ctx, [&] {
        CKS(check_tail(ctx, slot));
        if (!host) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "null host buffer");
        return sync_copy(ctx, ctx->tails + size_t(slot) * ctx->tail_bytes, host, ctx->tail_bytes,
                         cudaMemcpyHostToDevice);
    });
}
llmkv_cuda_status api_copy_tail(llmkv_cuda_context *ctx, uint32_t from, uint32_t to) {
    return guarded(ctx, [&] {
        CKS(check_tail(ctx, from));
        CKS(check_tail(ctx, to));
        if (from == to) return LLMKV_CUDA_OK;
        CK(ctx, cudaMemcpyAsync(ctx->tails + size_t(to) * ctx->tail_bytes,
                                ctx->tails + size_t(from) * ctx->tail_bytes, ctx->tail_bytes,
                                cudaMemcpyDeviceToDevice, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

// ---- asynchronous block copies -----------------------------------------------------------

llmkv_cuda_status record_ticket(Ctx *ctx, uint64_t *ticket) {
    const uint64_t t = ctx->next_ticket;
    cudaEvent_t ev = ctx->ticket_events[t % kTicketEvents];
    if (t > kTicketEvents && t - kTicketEvents > ctx->completed_ticket) {
        // The event still stands for ticket t - kTicketEvents: wait for it (the copy stream
        // is in order, so every earlier ticket is then complete too).
        CK(ctx, cudaEventSynchronize(ev));
        ctx->completed_ticket = t - kTicketEvents;
    }
    CK(ctx, cudaEventRecord(ev, ctx->copy));
    ctx->next_ticket = t + 1;
    *ticket = t;
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status async_copies(Ctx *ctx, const uint32_t *ids, uint32_t n, const void *const *host,
                               bool to_host, uint64_t *ticket) {
    if (!ticket || (n > 0 && (!ids || !host)))
        return ctx->fail(LLMKV_CUDA_ERR_INVALID, "async copy: null argument");
    for (uint32_t i = 0; i < n; ++i) CKS(check_block(ctx, ids[i], host[i]));
    // Copies start after the compute submitted so far (reads see its writes; writes do not
    // overtake a forward still reading the previous contents).
    CK(ctx, cudaEventRecord(ctx->compute_marker, ctx->compute));
    CK(ctx, cudaStreamWaitEvent(ctx->copy, ctx->compute_marker, 0));
    for (uint32_t i = 0; i < n; ++i) {
        uint8_t *dev = ctx->pool + size_t(ids[i]) * ctx->block_bytes;
        if (to_host) {
            CK(ctx, cudaMemcpyAsync(const_cast<void *>(host[i]), dev, ctx->block_bytes,
                                    cudaMemcpyDeviceToHost, ctx->copy));
        } else {
            CK(ctx,
               cudaMemcpyAsync(dev, host[i], ctx->block_bytes, cudaMemcpyHostToDevice, ctx->copy));
        }
    }
    if (n > 0) (to_host ? ctx->pending_reads : ctx->pending_writes) = true;
    return record_ticket(ctx, ticket);
}

llmkv_cuda_status api_read_blocks_async(llmkv_cuda_context *ctx, const uint32_t *ids, uint32_t n,
                                        void *const *host, uint64_t *ticket) {
    return guarded(ctx, [&] {
        return async_copies(ctx, ids, n, const_cast<const void *const *>(host), true, ticket);
    });
}
llmkv_cuda_status api_write_blocks_async(llmkv_cuda_context *ctx, const uint32_t *ids, uint32_t n,
                                         const void *const *host, uint64_t *ticket) {
    return guarded(ctx, [&] { return async_copies(ctx, ids, n, host, false, ticket); });
}

llmkv_cuda_status ticket_status(Ctx *ctx, uint64_t ticket, bool wait) {
    if (ticket == 0 || ticket >= ctx->next_ticket)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("unknown copy ticket %llu", (unsigned long long)ticket));
    if (ticket <= ctx->completed_ticket) return LLMKV_CUDA_OK;
    if (ticket + kTicketEvents < ctx->next_ticket) {
        // Its event was reused, which only happens after waiting for it.
        return LLMKV_CUDA_OK;
    }
    cudaEvent_t ev = ctx->ticket_events[ticket % kTicketEvents];
    const cudaError_t e = wait ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return LLMKV_CUDA_NOT_READY;
    }
    CK(ctx, e);
    ctx->completed_ticket = std::max(ctx->completed_ticket, ticket);
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_copy_query(llmkv_cuda_context *ctx, uint64_t ticket) {
    return guarded(ctx, [&] { return ticket_status(ctx, ticket, false); });
}
llmkv_cuda_status api_copy_wait(llmkv_cuda_context *ctx, uint64_t ticket) {
    return guarded(ctx, [&] { return ticket_status(ctx, ticket, true); });
}

// ---- tensor-parallel ranks ---------------------------------------------------------------------

llmkv_cuda_status activation_copy(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, void *dst,
                                  const void *src, cudaMemcpyKind kind, const char *op) {
    return guarded(ctx, [&] {
        CKS(check_tensor(ctx, x, op, "x"));
        if (!(kind == cudaMemcpyDeviceToHost ? dst : src)) return bad(ctx, op, "host is null");
        CK(ctx, cudaMemcpyAsync(dst, src, size_t(x.rows) * x.cols * 4, kind, ctx->compute));
        CK(ctx, cudaStreamSynchronize(ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_read_activation(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, float *host) {
    return activation_copy(ctx, x, host, x.data, cudaMemcpyDeviceToHost, "read_activation");
}

llmkv_cuda_status api_write_activation(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                       const float *host) {
    return activation_copy(ctx, x, x.data, host, cudaMemcpyHostToDevice, "write_activation");
}

std::string nccl_text(const NcclApi *n, ncclResult_t r) {
    return format("%s (NCCL %d, error %d)", n->error_string(r), n->version, int(r));
}

llmkv_cuda_status api_comm_unique_id(uint8_t id[LLMKV_CUDA_COMM_ID_BYTES], char *err,
                                     size_t err_cap) {
    static_assert(sizeof(ncclUniqueId) == LLMKV_CUDA_COMM_ID_BYTES, "NCCL's id size");
    if (!id) return LLMKV_CUDA_ERR_INVALID;
    std::string why;
    const NcclApi *n = nccl_api(&why);
    if (!n) {
        write_err(err, err_cap, why);
        return LLMKV_CUDA_ERR_NO_DEVICE;
    }
    ncclUniqueId u;
    const ncclResult_t r = n->get_unique_id(&u);
    if (r != ncclSuccess) {
        write_err(err, err_cap, "ncclGetUniqueId: " + nccl_text(n, r));
        return LLMKV_CUDA_ERR_NO_DEVICE;
    }
    std::memcpy(id, &u, sizeof u);
    return LLMKV_CUDA_OK;
}

// The per-rank floats of one all-gather: at most this many (the buffer holds one chunk of
// every rank's: 128 MiB with 8 ranks), so that a large batch does not cost its size times
// the rank count on every device.
constexpr uint64_t kCommChunkElems = uint64_t(4) << 20;

llmkv_cuda_status api_comm_prepare(llmkv_cuda_context *ctx, uint32_t n_ranks, uint64_t max_elements) {
    return guarded(ctx, [&] {
        const char *op = "comm_prepare";
        if (n_ranks == 0 || max_elements == 0)
            return bad(ctx, op, format("%u ranks, %llu elements", n_ranks, (unsigned long long)max_elements));
        if (ctx->comm || ctx->gathered) return bad(ctx, op, "the context is prepared already");
        std::string why;
        if (!nccl_api(&why)) return ctx->fail(LLMKV_CUDA_ERR_NO_DEVICE, why);
        const size_t chunk = size_t(std::min(max_elements, kCommChunkElems));
        float *gathered = nullptr;
        CKS(ctx->alloc(gathered, chunk * n_ranks * 4, ctx->other_bytes, "the all-gather buffer"));
        ctx->gathered = gathered;
        ctx->comm_chunk = chunk;
        ctx->comm_ranks = n_ranks;
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_comm_init(llmkv_cuda_context *ctx, const uint8_t id[LLMKV_CUDA_COMM_ID_BYTES],
                                uint32_t n_ranks, uint32_t rank) {
    return guarded(ctx, [&] {
        const char *op = "comm_init";
        if (!ctx->gathered) return bad(ctx, op, "not prepared (comm_prepare)");
        if (!id || n_ranks != ctx->comm_ranks || rank >= n_ranks)
            return bad(ctx, op, format("rank %u of %u (prepared for %u)", rank, n_ranks, ctx->comm_ranks));
        if (ctx->comm) return bad(ctx, op, "the context has joined a communicator already");
        const NcclApi *n = nccl_api(nullptr);
        ncclUniqueId u;
        std::memcpy(&u, id, sizeof u);
        ncclComm_t comm = nullptr;
        const ncclResult_t r = n->comm_init_rank(&comm, int(n_ranks), u, int(rank));
        if (r != ncclSuccess)
            return ctx->fail(LLMKV_CUDA_ERR_DEVICE, format("ncclCommInitRank (rank %u of %u): %s", rank, n_ranks,
                                                           nccl_text(n, r).c_str()));
        ctx->comm = comm;
        ctx->comm_rank = rank;
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_all_reduce_sum(llmkv_cuda_context *ctx, llmkv_cuda_tensor x) {
    return guarded(ctx, [&] {
        const char *op = "all_reduce_sum";
        CKS(check_tensor(ctx, x, op, "x"));
        if (!ctx->comm) return bad(ctx, op, "no communicator (comm_init)");
        const NcclApi *nc = nccl_api(nullptr);
        CKS(order_after_copies(ctx));
        float *data = static_cast<float *>(x.data);
        const size_t n = size_t(x.rows) * x.cols;
        for (size_t at = 0; at < n; at += ctx->comm_chunk) {
            const size_t count = std::min(ctx->comm_chunk, n - at);
            const ncclResult_t r =
                nc->all_gather(data + at, ctx->gathered, count, ncclFloat32, ctx->comm, ctx->compute);
            if (r != ncclSuccess)
                return ctx->fail(LLMKV_CUDA_ERR_DEVICE, "ncclAllGather: " + nccl_text(nc, r));
            CK(ctx, launch_sum_parts(ctx->gathered, count, ctx->comm_ranks, data + at, ctx->compute));
        }
        return LLMKV_CUDA_OK;
    });
}

// ---- pinned host memory, errors, usage ------------------------------------------------------

llmkv_cuda_status api_host_alloc(llmkv_cuda_context *ctx, uint64_t bytes, void **out) {
    return guarded(ctx, [&] {
        if (!out) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "host_alloc: null out");
        *out = nullptr;
        const size_t n = bytes ? bytes : 1;
        const cudaError_t e = cudaHostAlloc(out, n, cudaHostAllocPortable | cudaHostAllocMapped);
        if (e != cudaSuccess) {
            *out = nullptr;
            cudaGetLastError();
            return ctx->fail(
                e == cudaErrorMemoryAllocation ? LLMKV_CUDA_ERR_OUT_OF_MEMORY
                                               : LLMKV_CUDA_ERR_DEVICE,
                format("cudaHostAlloc of %.1f MiB: %s", bytes / 1048576.0, cuda_text(e).c_str()));
        }
        // The kernels read host-tier blocks at their host address (unified addressing,
        // checked at create); begin_batch checks that a host block lies in such memory.
        const auto range = std::make_pair(reinterpret_cast<uintptr_t>(*out), n);
        try {
            ctx->host_ranges.insert(
                std::upper_bound(ctx->host_ranges.begin(), ctx->host_ranges.end(), range), range);
        } catch (...) {  // out of host memory for the range list: keep nothing
            cudaFreeHost(*out);
            *out = nullptr;
            throw;
        }
        return LLMKV_CUDA_OK;
    });
}

void api_host_free(llmkv_cuda_context *ctx, void *p) {
    if (!p) return;
    std::optional<DeviceScope> scope;
    if (ctx) {
        scope.emplace(ctx->device);
        auto &r = ctx->host_ranges;
        r.erase(std::remove_if(r.begin(), r.end(),
                               [&](const auto &x) { return x.first == uintptr_t(p); }),
                r.end());
    }
    cudaFreeHost(p);
    cudaGetLastError();
}

llmkv_cuda_status api_sticky_error(const llmkv_cuda_context *ctx) {
    return ctx ? ctx->sticky : LLMKV_CUDA_ERR_INVALID;
}
const char *api_last_error(const llmkv_cuda_context *ctx) {
    return ctx ? ctx->err.c_str() : "null context";
}

llmkv_cuda_status api_memory_usage(const llmkv_cuda_context *ctx, uint64_t *w, uint64_t *kv,
                                   uint64_t *other) {
    if (!ctx) return LLMKV_CUDA_ERR_INVALID;
    if (w) *w = ctx->weight_bytes;
    if (kv) *kv = ctx->kv_bytes;
    if (other) *other = ctx->other_bytes;
    return LLMKV_CUDA_OK;
}

const llmkv_cuda_api kApi = {
    sizeof(llmkv_cuda_api),
    LLMKV_CUDA_ABI_VERSION,
    api_device_count,
    api_device_info,
    api_create,
    api_destroy,
    api_upload_matrix,
    api_upload_vector,
    api_alloc_activation,
    api_begin_batch,
    api_embed,
    api_rms_norm,
    api_matmul,
    api_rope,
    api_write_kv,
    api_attention,
    api_add,
    api_swiglu,
    api_gather_logit_rows,
    api_logits,
    api_end_batch,
    api_read_block,
    api_write_block,
    api_read_tail,
    api_write_tail,
    api_copy_tail,
    api_read_blocks_async,
    api_write_blocks_async,
    api_copy_query,
    api_copy_wait,
    api_host_alloc,
    api_host_free,
    api_sticky_error,
    api_last_error,
    api_memory_usage,
    api_add_bias,
    api_scale,
    api_geglu,
    api_upload_matrix_packed,
    api_upload_matrix_quantized,
    api_read_activation,
    api_write_activation,
    api_comm_unique_id,
    api_comm_prepare,
    api_comm_init,
    api_all_reduce_sum,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const llmkv_cuda_api *llmkv_cuda_get_api(
    uint32_t abi_version) {
    return abi_version == LLMKV_CUDA_ABI_VERSION ? &kApi : nullptr;
}
