// The CUDA module's C ABI (src/backend/cuda_module.h): one context = one device, the model
// weights in fp16, the KV pools in the CPU's byte layouts, activation buffers for
// max_batch_tokens, a compute stream (forward, synchronous block / tail copies) and a copy
// stream (asynchronous block copies for the host tier), cuBLAS for the GEMMs.
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
#include <string>
#include <vector>

#include "backend/cuda_module.h"
#include "embedding.cuh"
#include "gemm.cuh"
#include "kv_layout.cuh"
#include "kv_seal.cuh"
#include "kv_window.cuh"
#include "paged_attention.cuh"
#include "rms_norm.cuh"
#include "rope.cuh"
#include "step.cuh"
#include "swiglu.cuh"

using namespace llmkv::cuda;

namespace {

constexpr uint64_t kDefaultAttentionWorkspace = 128ull << 20;
constexpr size_t kCublasWorkspace = 32ull << 20;
constexpr size_t kLogitsBufferBytes = 64ull << 20;  // device logits of one output-head chunk
constexpr uint32_t kTicketEvents = 1024;            // copy tickets in flight before a wait

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

struct LayerDevice {
    uint16_t *wqkv = nullptr;    // fp16 [QD + 2 KVD][E]: wq rows, then wk, then wv
    uint16_t *wo = nullptr;      // fp16 [E][QD]
    uint16_t *wgu = nullptr;     // fp16 [2 FF][E]: gate rows, then up
    uint16_t *wdown = nullptr;   // fp16 [E][FF]
    float *attn_norm = nullptr;  // f32 [E]
    float *ffn_norm = nullptr;   // f32 [E]
    bool uploaded = false;
};

}  // namespace

struct llmkv_cuda_context {
    int device = 0;
    // model
    uint32_t n_layers = 0, E = 0, n_heads = 0, n_kv_heads = 0, D = 0, FF = 0, V = 0, rope_dim = 0;
    uint32_t QD = 0, KVD = 0, QKVD = 0;
    float rms_eps = 0, rope_freq_scale = 1;
    bool tied = false;
    // KV
    KvLayout g;
    uint32_t n_sealed = 0, n_tail = 0;
    size_t block_bytes = 0, tail_bytes = 0;
    // limits
    uint32_t max_tokens = 0, max_spans = 0, max_jobs = 0, logit_chunk = 0;
    size_t window_elems = 0;

    cudaStream_t compute = nullptr, copy = nullptr;
    cublasHandle_t cublas = nullptr;
    std::vector<void *> device_allocs;
    std::vector<void *> host_allocs;  // pinned staging owned by the context
    uint64_t weight_bytes = 0, kv_bytes = 0, other_bytes = 0;

    std::vector<LayerDevice> layers;
    uint16_t *embd = nullptr, *output = nullptr;  // fp16 [V][E]
    float *output_norm = nullptr, *inv_freq = nullptr;
    uint8_t *pool = nullptr;   // [n_sealed][block_bytes]
    uint8_t *tails = nullptr;  // [n_tail][tail_bytes]
    // activations (max_tokens rows)
    float *x = nullptr;          // f32 [T][E]
    uint16_t *xn = nullptr;      // fp16 [T][max(E, FF)]: normed input of a GEMM
    float *qkv = nullptr;        // f32 [T][QKVD]
    uint16_t *attn = nullptr;    // fp16 [T][QD]
    float *gu = nullptr;         // f32 [T][2 FF]
    uint16_t *hidden = nullptr;  // fp16 [T][FF]
    uint16_t *window = nullptr;  // fp16 window buffer (step.cuh)
    float *attn_ws = nullptr;
    size_t attn_ws_bytes = 0;
    float *logits_dev = nullptr;  // f32 [logit_chunk][V]
    void *cublas_ws = nullptr;

    // per-step tables: device and pinned host mirrors
    int32_t *d_tokens = nullptr, *d_pos = nullptr, *d_logit_rows = nullptr;  // [T]
    uint32_t *d_row_span = nullptr;                                          // [T]
    StepSpan *d_spans = nullptr;                                             // [max_spans]
    SealJob *d_jobs = nullptr;                                               // [max_jobs]
    int32_t *h_tokens = nullptr, *h_pos = nullptr, *h_logit_rows = nullptr;
    uint32_t *h_row_span = nullptr;
    StepSpan *h_spans = nullptr;
    SealJob *h_jobs = nullptr;
    uint32_t *d_block_ids = nullptr, *h_block_ids = nullptr;  // grown by doubling
    size_t block_ids_cap = 0;
    std::vector<uint32_t> tail_stamp;  // tail slot -> last step that used it (distinctness)
    uint32_t step_counter = 0;

    // async copies
    std::vector<cudaEvent_t> ticket_events;
    uint64_t next_ticket = 1, completed_ticket = 0;
    cudaEvent_t compute_marker = nullptr, copy_marker = nullptr;
    bool pending_writes = false;

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
        return fail(LLMKV_CUDA_ERR_DEVICE, format("CUDA %s: %s", what, cuda_text(e).c_str()));
    }
    llmkv_cuda_status cublas_fail(const char *what, cublasStatus_t s) {
        return fail(
            LLMKV_CUDA_ERR_DEVICE,
            format("cuBLAS %s: %s (%s)", what, cublasGetStatusString(s), cublasGetStatusName(s)));
    }

    // Device allocation counted in `counter`; OUT_OF_MEMORY names the buffer.
    template <class T>
    llmkv_cuda_status alloc(T *&p, size_t bytes, uint64_t &counter, const char *what) {
        p = nullptr;
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
        device_allocs.push_back(raw);
        counter += bytes;
        p = static_cast<T *>(raw);
        return LLMKV_CUDA_OK;
    }
    template <class T>
    llmkv_cuda_status alloc_host(T *&p, size_t bytes, const char *what) {
        p = nullptr;
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

    void release_all() {
        if (compute) cudaStreamSynchronize(compute);
        if (copy) cudaStreamSynchronize(copy);
        for (cudaEvent_t e : ticket_events) cudaEventDestroy(e);
        ticket_events.clear();
        if (compute_marker) cudaEventDestroy(compute_marker);
        if (copy_marker) cudaEventDestroy(copy_marker);
        if (cublas) cublasDestroy(cublas);
        for (void *p : device_allocs) cudaFree(p);
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

// Start of every context call: the device of the context, and no sticky error.
llmkv_cuda_status enter(Ctx *ctx) {
    if (ctx->sticky != LLMKV_CUDA_OK) return ctx->sticky;
    ctx->err.clear();
    CK(ctx, cudaSetDevice(ctx->device));
    return LLMKV_CUDA_OK;
}

// Makes the compute stream wait for asynchronous block writes submitted so far.
llmkv_cuda_status order_after_copies(Ctx *ctx) {
    if (!ctx->pending_writes) return LLMKV_CUDA_OK;
    CK(ctx, cudaEventRecord(ctx->copy_marker, ctx->copy));
    CK(ctx, cudaStreamWaitEvent(ctx->compute, ctx->copy_marker, 0));
    ctx->pending_writes = false;
    return LLMKV_CUDA_OK;
}

template <class F>
llmkv_cuda_status guarded(Ctx *ctx, F &&f) {
    if (!ctx) return LLMKV_CUDA_ERR_INVALID;
    try {
        CKS(enter(ctx));
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
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = cudaSetDevice(device)) != cudaSuccess) {
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

std::string check_descs(const llmkv_cuda_model_desc *m, const llmkv_cuda_kv_desc *kv,
                        const llmkv_cuda_context_params *p) {
    if (!m || !kv || !p) return "null model, kv or params description";
    if (m->struct_size < sizeof(llmkv_cuda_model_desc))
        return format("model desc struct_size %u is too small", m->struct_size);
    if (kv->struct_size < sizeof(llmkv_cuda_kv_desc))
        return format("kv desc struct_size %u is too small", kv->struct_size);
    if (p->struct_size < sizeof(llmkv_cuda_context_params))
        return format("params struct_size %u is too small", p->struct_size);
    if (m->n_layers == 0 || m->n_embd == 0 || m->n_heads == 0 || m->n_kv_heads == 0 ||
        m->head_dim == 0 || m->n_ff == 0 || m->n_vocab == 0) {
        return "model dimensions must be non-zero";
    }
    if (m->n_heads % m->n_kv_heads != 0)
        return format("n_heads %u is not a multiple of n_kv_heads %u", m->n_heads, m->n_kv_heads);
    if (m->rope_dim % 2 != 0 || m->rope_dim > m->head_dim)
        return format("rope_dim %u (head_dim %u)", m->rope_dim, m->head_dim);
    if (m->rope_dim > 0 && !m->inv_freq) return "inv_freq is null";
    if (!m->token_embd || !m->output || !m->output_norm)
        return "token_embd, output and output_norm are required";
    if (kv->n_layers != m->n_layers || kv->n_kv_heads != m->n_kv_heads ||
        kv->head_dim != m->head_dim) {
        return "KV geometry disagrees with the model (layers, kv heads, head_dim)";
    }
    if (kv->n_sealed_blocks == 0 || kv->n_tail_slots == 0) return "empty KV pools";
    if (p->max_batch_tokens == 0) return "max_batch_tokens must be > 0";
    return std::string();
}

llmkv_cuda_status upload_layer_impl(Ctx *ctx, uint32_t l, const llmkv_cuda_layer_weights *w) {
    if (l >= ctx->n_layers || !w)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("upload_layer: layer %u of %u", l, ctx->n_layers));
    if (!w->wq || !w->wk || !w->wv || !w->wo || !w->w_gate || !w->w_up || !w->w_down ||
        !w->attn_norm || !w->ffn_norm) {
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("upload_layer: layer %u has a null tensor", l));
    }
    LayerDevice &L = ctx->layers[l];
    const size_t E = ctx->E, QD = ctx->QD, KVD = ctx->KVD, FF = ctx->FF;
    CK(ctx, cudaMemcpy(L.wqkv, w->wq, QD * E * 2, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(L.wqkv + QD * E, w->wk, KVD * E * 2, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(L.wqkv + (QD + KVD) * E, w->wv, KVD * E * 2, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(L.wo, w->wo, E * QD * 2, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(L.wgu, w->w_gate, FF * E * 2, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(L.wgu + FF * E, w->w_up, FF * E * 2, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(L.wdown, w->w_down, E * FF * 2, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(L.attn_norm, w->attn_norm, E * 4, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(L.ffn_norm, w->ffn_norm, E * 4, cudaMemcpyHostToDevice));
    L.uploaded = true;
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status create_impl(Ctx *ctx, const llmkv_cuda_model_desc *m,
                              const llmkv_cuda_kv_desc *kv, const llmkv_cuda_context_params *p) {
    ctx->device = p->device;
    ctx->n_layers = m->n_layers;
    ctx->E = m->n_embd;
    ctx->n_heads = m->n_heads;
    ctx->n_kv_heads = m->n_kv_heads;
    ctx->D = m->head_dim;
    ctx->FF = m->n_ff;
    ctx->V = m->n_vocab;
    ctx->rope_dim = m->rope_dim;
    ctx->QD = m->n_heads * m->head_dim;
    ctx->KVD = m->n_kv_heads * m->head_dim;
    ctx->QKVD = ctx->QD + 2 * ctx->KVD;
    ctx->rms_eps = m->rms_eps;
    ctx->rope_freq_scale = m->rope_freq_scale;
    ctx->tied = m->output == m->token_embd;

    KvLayout &g = ctx->g;
    g.n_layers = kv->n_layers;
    g.H = kv->n_kv_heads;
    g.D = kv->head_dim;
    g.B = kv->block_tokens;
    g.R = kv->residual_tokens;
    g.codec_k = kv->dtype_k;
    g.codec_v = kv->dtype_v;
    g.rotate_k = kv->rotate_k != 0;
    g.rotate_v = kv->rotate_v != 0;
    if (const char *why = kv_layout_unsupported(g)) {
        return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                         format("CUDA KV layout not supported: %s (head_dim %u, block_tokens %u, "
                                "dtypes %u/%u, rotation %u/%u)",
                                why, g.D, g.B, g.codec_k, g.codec_v, kv->rotate_k, kv->rotate_v));
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
    ctx->block_bytes = g.sealed_block_bytes();
    ctx->tail_bytes = g.tail_block_bytes();
    ctx->n_sealed = kv->n_sealed_blocks;
    ctx->n_tail = kv->n_tail_slots;
    ctx->max_tokens = p->max_batch_tokens;
    ctx->max_spans =
        p->max_spans ? std::min(p->max_spans, p->max_batch_tokens) : p->max_batch_tokens;
    const size_t window_rows = size_t(ctx->max_spans) * (g.B + g.R - 1) + ctx->max_tokens;
    ctx->window_elems = window_rows * 2 * ctx->KVD;
    ctx->max_jobs = uint32_t(window_rows / g.B + 1);
    ctx->logit_chunk =
        uint32_t(std::clamp<size_t>(kLogitsBufferBytes / (size_t(ctx->V) * 4), 1, ctx->max_tokens));
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
    CK(ctx, cudaSetDevice(ctx->device));
    CK(ctx, cudaStreamCreateWithFlags(&ctx->compute, cudaStreamNonBlocking));
    CK(ctx, cudaStreamCreateWithFlags(&ctx->copy, cudaStreamNonBlocking));
    CK(ctx, cudaEventCreateWithFlags(&ctx->compute_marker, cudaEventDisableTiming));
    CK(ctx, cudaEventCreateWithFlags(&ctx->copy_marker, cudaEventDisableTiming));
    ctx->ticket_events.reserve(kTicketEvents);
    for (uint32_t i = 0; i < kTicketEvents; ++i) {
        cudaEvent_t ev = nullptr;
        CK(ctx, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        ctx->ticket_events.push_back(ev);
    }

    // Weights.
    const size_t E = ctx->E, V = ctx->V, FF = ctx->FF;
    CKS(ctx->alloc(ctx->embd, V * E * 2, ctx->weight_bytes, "token embedding"));
    if (ctx->tied) {
        ctx->output = ctx->embd;
    } else {
        CKS(ctx->alloc(ctx->output, V * E * 2, ctx->weight_bytes, "output head"));
    }
    CKS(ctx->alloc(ctx->output_norm, E * 4, ctx->weight_bytes, "output norm"));
    CKS(ctx->alloc(ctx->inv_freq, std::max<size_t>(ctx->rope_dim / 2, 1) * 4, ctx->other_bytes,
                   "rope frequencies"));
    ctx->layers.resize(ctx->n_layers);
    for (LayerDevice &L : ctx->layers) {
        CKS(ctx->alloc(L.wqkv, size_t(ctx->QKVD) * E * 2, ctx->weight_bytes,
                       "attention qkv weights"));
        CKS(ctx->alloc(L.wo, E * ctx->QD * 2, ctx->weight_bytes, "attention output weights"));
        CKS(ctx->alloc(L.wgu, 2 * FF * E * 2, ctx->weight_bytes, "mlp gate/up weights"));
        CKS(ctx->alloc(L.wdown, E * FF * 2, ctx->weight_bytes, "mlp down weights"));
        CKS(ctx->alloc(L.attn_norm, E * 4, ctx->weight_bytes, "attention norm"));
        CKS(ctx->alloc(L.ffn_norm, E * 4, ctx->weight_bytes, "mlp norm"));
    }
    // KV pools (zeroed: a never-written tail reads as zeros, not garbage).
    CKS(ctx->alloc(ctx->pool, size_t(ctx->n_sealed) * ctx->block_bytes, ctx->kv_bytes,
                   "sealed KV pool"));
    CKS(ctx->alloc(ctx->tails, size_t(ctx->n_tail) * ctx->tail_bytes, ctx->kv_bytes,
                   "KV tail slots"));
    CK(ctx, cudaMemsetAsync(ctx->pool, 0, size_t(ctx->n_sealed) * ctx->block_bytes, ctx->compute));
    CK(ctx, cudaMemsetAsync(ctx->tails, 0, size_t(ctx->n_tail) * ctx->tail_bytes, ctx->compute));
    // Activations and workspaces.
    const size_t T = ctx->max_tokens;
    uint64_t &o = ctx->other_bytes;
    CKS(ctx->alloc(ctx->x, T * E * 4, o, "activations x"));
    CKS(ctx->alloc(ctx->xn, T * E * 2, o, "normed activations"));
    CKS(ctx->alloc(ctx->qkv, T * ctx->QKVD * 4, o, "qkv activations"));
    CKS(ctx->alloc(ctx->attn, T * ctx->QD * 2, o, "attention output"));
    CKS(ctx->alloc(ctx->gu, T * 2 * FF * 4, o, "gate/up activations"));
    CKS(ctx->alloc(ctx->hidden, T * FF * 2, o, "mlp hidden activations"));
    CKS(ctx->alloc(ctx->window, ctx->window_elems * 2, o, "KV window"));
    CKS(ctx->alloc(ctx->attn_ws, ctx->attn_ws_bytes, o, "attention workspace"));
    CKS(ctx->alloc(ctx->logits_dev, size_t(ctx->logit_chunk) * V * 4, o, "logits"));
    CKS(ctx->alloc(ctx->cublas_ws, kCublasWorkspace, o, "cuBLAS workspace"));
    CKS(ctx->alloc(ctx->d_tokens, T * 4, o, "step tokens"));
    CKS(ctx->alloc(ctx->d_pos, T * 4, o, "step positions"));
    CKS(ctx->alloc(ctx->d_logit_rows, T * 4, o, "step logit rows"));
    CKS(ctx->alloc(ctx->d_row_span, T * 4, o, "step row spans"));
    CKS(ctx->alloc(ctx->d_spans, size_t(ctx->max_spans) * sizeof(StepSpan), o, "step spans"));
    CKS(ctx->alloc(ctx->d_jobs, size_t(ctx->max_jobs) * sizeof(SealJob), o, "step seal jobs"));
    CKS(ctx->alloc_host(ctx->h_tokens, T * 4, "step tokens"));
    CKS(ctx->alloc_host(ctx->h_pos, T * 4, "step positions"));
    CKS(ctx->alloc_host(ctx->h_logit_rows, T * 4, "step logit rows"));
    CKS(ctx->alloc_host(ctx->h_row_span, T * 4, "step row spans"));
    CKS(ctx->alloc_host(ctx->h_spans, size_t(ctx->max_spans) * sizeof(StepSpan), "step spans"));
    CKS(ctx->alloc_host(ctx->h_jobs, size_t(ctx->max_jobs) * sizeof(SealJob), "step seal jobs"));
    ctx->block_ids_cap = std::max<size_t>(4096, size_t(ctx->n_sealed));
    CKS(ctx->alloc(ctx->d_block_ids, ctx->block_ids_cap * 4, o, "step block tables"));
    CKS(ctx->alloc_host(ctx->h_block_ids, ctx->block_ids_cap * 4, "step block tables"));
    ctx->tail_stamp.assign(ctx->n_tail, 0);

    CKB(ctx, cublasCreate(&ctx->cublas));
    CKB(ctx, cublasSetStream(ctx->cublas, ctx->compute));
    CKB(ctx, cublasSetWorkspace(ctx->cublas, ctx->cublas_ws, kCublasWorkspace));

    // Upload.
    CK(ctx, cudaMemcpy(ctx->embd, m->token_embd, V * E * 2, cudaMemcpyHostToDevice));
    if (!ctx->tied) CK(ctx, cudaMemcpy(ctx->output, m->output, V * E * 2, cudaMemcpyHostToDevice));
    CK(ctx, cudaMemcpy(ctx->output_norm, m->output_norm, E * 4, cudaMemcpyHostToDevice));
    if (ctx->rope_dim > 0)
        CK(ctx, cudaMemcpy(ctx->inv_freq, m->inv_freq, size_t(ctx->rope_dim / 2) * 4,
                           cudaMemcpyHostToDevice));
    if (m->layers) {
        for (uint32_t l = 0; l < ctx->n_layers; ++l) CKS(upload_layer_impl(ctx, l, &m->layers[l]));
    }
    CK(ctx, cudaStreamSynchronize(ctx->compute));
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_create(const llmkv_cuda_model_desc *m, const llmkv_cuda_kv_desc *kv,
                             const llmkv_cuda_context_params *p, llmkv_cuda_context **out,
                             char *err, size_t err_cap) {
    if (!out) return LLMKV_CUDA_ERR_INVALID;
    *out = nullptr;
    const std::string bad = check_descs(m, kv, p);
    if (!bad.empty()) {
        write_err(err, err_cap, bad);
        return LLMKV_CUDA_ERR_INVALID;
    }
    Ctx *ctx = nullptr;
    try {
        ctx = new Ctx();
        const llmkv_cuda_status s = create_impl(ctx, m, kv, p);
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
    cudaSetDevice(ctx->device);
    ctx->release_all();
    delete ctx;
}

llmkv_cuda_status api_upload_layer(llmkv_cuda_context *ctx, uint32_t layer,
                                   const llmkv_cuda_layer_weights *w) {
    return guarded(ctx, [&] { return upload_layer_impl(ctx, layer, w); });
}

// ---- forward ---------------------------------------------------------------------------

llmkv_cuda_status grow_block_ids(Ctx *ctx, size_t need) {
    if (need <= ctx->block_ids_cap) return LLMKV_CUDA_OK;
    size_t cap = ctx->block_ids_cap;
    while (cap < need) cap *= 2;
    // The old buffers stay allocated until destroy (at most log2 growth steps); this keeps
    // the bookkeeping trivial and happens only at a new high-water mark.
    CKS(ctx->alloc(ctx->d_block_ids, cap * 4, ctx->other_bytes, "step block tables"));
    CKS(ctx->alloc_host(ctx->h_block_ids, cap * 4, "step block tables"));
    ctx->block_ids_cap = cap;
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status forward_impl(Ctx *ctx, const llmkv_cuda_span *spans, uint32_t n_spans,
                               float *logits_host) {
    if (n_spans == 0) return LLMKV_CUDA_OK;
    if (!spans) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "forward: spans is null");
    if (n_spans > ctx->max_spans) {
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("forward: %u spans exceed the limit %u", n_spans, ctx->max_spans));
    }
    for (const LayerDevice &L : ctx->layers) {
        if (!L.uploaded)
            return ctx->fail(LLMKV_CUDA_ERR_INVALID, "forward: model layers were not all uploaded");
    }
    const KvLayout &g = ctx->g;
    const uint32_t B = g.B;

    // Validate everything before any device work.
    uint64_t T = 0, n_blocks_total = 0;
    uint32_t n_logits = 0, max_ctx = 0;
    ++ctx->step_counter;
    if (ctx->step_counter == 0) {  // wrapped: restart the stamps
        std::fill(ctx->tail_stamp.begin(), ctx->tail_stamp.end(), 0u);
        ctx->step_counter = 1;
    }
    for (uint32_t i = 0; i < n_spans; ++i) {
        const llmkv_cuda_span &s = spans[i];
        if (s.n == 0 || !s.tokens)
            return ctx->fail(LLMKV_CUDA_ERR_INVALID, format("forward: span %u is empty", i));
        if (uint64_t(s.pos0) + s.n > 0x7fffffffu)
            return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                             format("forward: span %u position overflow", i));
        if (s.tail_slot >= ctx->n_tail) {
            return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                             format("forward: span %u tail slot %u out of range (%u)", i,
                                    s.tail_slot, ctx->n_tail));
        }
        if (ctx->tail_stamp[s.tail_slot] == ctx->step_counter) {
            return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                             format("forward: tail slot %u used by two spans", s.tail_slot));
        }
        ctx->tail_stamp[s.tail_slot] = ctx->step_counter;
        const uint32_t need = g.sealed_blocks(s.pos0 + s.n);
        if (s.n_blocks < need || (need > 0 && !s.blocks)) {
            return ctx->fail(
                LLMKV_CUDA_ERR_INVALID,
                format("forward: span %u has %u sealed blocks, needs %u", i, s.n_blocks, need));
        }
        for (uint32_t b = 0; b < need; ++b) {
            if (s.blocks[b] >= ctx->n_sealed) {
                return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                                 format("forward: span %u block %u id %u out of range (%u)", i, b,
                                        s.blocks[b], ctx->n_sealed));
            }
        }
        for (uint32_t t = 0; t < s.n; ++t) {
            if (s.tokens[t] < 0 || uint32_t(s.tokens[t]) >= ctx->V) {
                return ctx->fail(
                    LLMKV_CUDA_ERR_INVALID,
                    format("token id %d outside the vocabulary (%u)", s.tokens[t], ctx->V));
            }
        }
        T += s.n;
        n_blocks_total += need;
        n_logits += s.want_logits ? (s.all_logits ? s.n : 1) : 0;
        max_ctx = std::max(max_ctx, s.pos0 + s.n);
    }
    if (T > ctx->max_tokens) {
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("forward: %llu tokens exceed the batch limit %u",
                                (unsigned long long)T, ctx->max_tokens));
    }
    if (n_logits > 0 && !logits_host)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID, "forward: logits_host is null");
    const size_t need_ws = attention_min_workspace(ctx->n_heads, ctx->D, max_ctx);
    if (need_ws > ctx->attn_ws_bytes) {
        return ctx->fail(
            LLMKV_CUDA_ERR_UNSUPPORTED,
            format(
                "forward: context %u needs %zu bytes of attention workspace, the context has %zu",
                max_ctx, need_ws, ctx->attn_ws_bytes));
    }
    CKS(grow_block_ids(ctx, n_blocks_total));

    // Step tables.
    uint32_t row = 0, n_jobs = 0, n_lrows = 0;
    uint64_t win_off = 0;
    size_t blocks_off = 0;
    for (uint32_t i = 0; i < n_spans; ++i) {
        const llmkv_cuda_span &s = spans[i];
        const uint32_t ws = g.sealed_blocks(s.pos0) * B;
        const uint32_t cap = s.pos0 - ws + s.n;
        const uint32_t end = s.pos0 + s.n;
        const uint32_t need = g.sealed_blocks(end);
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
        for (uint32_t b = ws / B; b < need; ++b) {
            if (n_jobs >= ctx->max_jobs)
                return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                                 "forward: too many blocks sealed in one step");
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
        win_off += 2ull * g.H * cap * g.D;
        blocks_off += need;
        row += s.n;
    }
    if (win_off > ctx->window_elems)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID, "forward: KV window buffer too small (internal)");

    cudaStream_t st = ctx->compute;
    CKS(order_after_copies(ctx));
    CK(ctx,
       cudaMemcpyAsync(ctx->d_tokens, ctx->h_tokens, size_t(T) * 4, cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->d_pos, ctx->h_pos, size_t(T) * 4, cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->d_row_span, ctx->h_row_span, size_t(T) * 4, cudaMemcpyHostToDevice,
                            st));
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

    const uint32_t Tn = uint32_t(T);
    const uint32_t E = ctx->E, QD = ctx->QD, KVD = ctx->KVD, QKVD = ctx->QKVD, FF = ctx->FF;
    CK(ctx, launch_embedding(ctx->embd, E, ctx->d_tokens, Tn, ctx->x, st));

    AttentionArgs aa;
    aa.g = g;
    aa.n_heads = ctx->n_heads;
    aa.scale = 1.0f / std::sqrt(float(ctx->D));
    aa.q = ctx->qkv;
    aa.q_stride = QKVD;
    aa.pool = ctx->pool;
    aa.block_ids = ctx->d_block_ids;
    aa.window = ctx->window;
    aa.spans = ctx->d_spans;
    aa.row_span = ctx->d_row_span;
    aa.n_rows = Tn;
    aa.max_context = max_ctx;
    aa.out_f16 = ctx->attn;
    aa.out_stride = QD;
    aa.workspace = ctx->attn_ws;
    aa.workspace_bytes = ctx->attn_ws_bytes;

    for (uint32_t l = 0; l < ctx->n_layers; ++l) {
        const LayerDevice &L = ctx->layers[l];
        CK(ctx, launch_rms_norm(ctx->x, E, nullptr, Tn, L.attn_norm, E, ctx->rms_eps, ctx->xn,
                                nullptr, st));
        CKB(ctx, gemm_f16_f32(ctx->cublas, L.wqkv, QKVD, E, ctx->xn, E, Tn, ctx->qkv, QKVD, 0.0f));
        CK(ctx, launch_rope(ctx->qkv, QKVD, Tn, ctx->d_pos, ctx->n_heads, ctx->n_kv_heads, ctx->D,
                            ctx->rope_dim, ctx->rope_freq_scale, ctx->inv_freq, st));
        CK(ctx, launch_window_load_tail(g, l, ctx->tails, ctx->d_spans, n_spans, ctx->window, st));
        CK(ctx, launch_window_append(g, ctx->qkv, QKVD, QD, QD + KVD, ctx->d_row_span, Tn,
                                     ctx->d_spans, ctx->window, st));
        CK(ctx,
           launch_kv_seal(g, l, ctx->window, ctx->d_spans, ctx->d_jobs, n_jobs, ctx->pool, st));
        CK(ctx, launch_window_store_tail(g, l, ctx->window, ctx->d_spans, n_spans, ctx->tails, st));
        aa.layer = l;
        CK(ctx, launch_paged_attention(aa, st));
        CKB(ctx, gemm_f16_f32(ctx->cublas, L.wo, E, QD, ctx->attn, QD, Tn, ctx->x, E, 1.0f));
        CK(ctx, launch_rms_norm(ctx->x, E, nullptr, Tn, L.ffn_norm, E, ctx->rms_eps, ctx->xn,
                                nullptr, st));
        CKB(ctx,
            gemm_f16_f32(ctx->cublas, L.wgu, 2 * FF, E, ctx->xn, E, Tn, ctx->gu, 2 * FF, 0.0f));
        CK(ctx, launch_swiglu(ctx->gu, FF, Tn, ctx->hidden, st));
        CKB(ctx, gemm_f16_f32(ctx->cublas, L.wdown, E, FF, ctx->hidden, FF, Tn, ctx->x, E, 1.0f));
    }

    // Final norm and the output head over the rows that want logits, chunk by chunk.
    for (uint32_t c0 = 0; c0 < n_lrows; c0 += ctx->logit_chunk) {
        const uint32_t nc = std::min(ctx->logit_chunk, n_lrows - c0);
        CK(ctx, launch_rms_norm(ctx->x, E, ctx->d_logit_rows + c0, nc, ctx->output_norm, E,
                                ctx->rms_eps, ctx->xn, nullptr, st));
        CKB(ctx, gemm_f16_f32(ctx->cublas, ctx->output, ctx->V, E, ctx->xn, E, nc, ctx->logits_dev,
                              ctx->V, 0.0f));
        CK(ctx, cudaMemcpyAsync(logits_host + size_t(c0) * ctx->V, ctx->logits_dev,
                                size_t(nc) * ctx->V * 4, cudaMemcpyDeviceToHost, st));
    }
    CK(ctx, cudaStreamSynchronize(st));
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status api_forward(llmkv_cuda_context *ctx, const llmkv_cuda_span *spans,
                              uint32_t n_spans, float *logits) {
    return guarded(ctx, [&] { return forward_impl(ctx, spans, n_spans, logits); });
}

// ---- synchronous copies -----------------------------------------------------------------

llmkv_cuda_status sync_copy(Ctx *ctx, void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind kind) {
    CKS(order_after_copies(ctx));
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
    if (!to_host && n > 0) ctx->pending_writes = true;
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

// ---- pinned host memory, errors, usage ------------------------------------------------------

llmkv_cuda_status api_host_alloc(llmkv_cuda_context *ctx, uint64_t bytes, void **out) {
    return guarded(ctx, [&] {
        if (!out) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "host_alloc: null out");
        *out = nullptr;
        const cudaError_t e = cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocPortable);
        if (e != cudaSuccess) {
            *out = nullptr;
            cudaGetLastError();
            return ctx->fail(
                e == cudaErrorMemoryAllocation ? LLMKV_CUDA_ERR_OUT_OF_MEMORY
                                               : LLMKV_CUDA_ERR_DEVICE,
                format("cudaHostAlloc of %.1f MiB: %s", bytes / 1048576.0, cuda_text(e).c_str()));
        }
        return LLMKV_CUDA_OK;
    });
}

void api_host_free(llmkv_cuda_context *ctx, void *p) {
    if (!p) return;
    if (ctx) cudaSetDevice(ctx->device);
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
    api_upload_layer,
    api_forward,
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
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const llmkv_cuda_api *llmkv_cuda_get_api(
    uint32_t abi_version) {
    return abi_version == LLMKV_CUDA_ABI_VERSION ? &kApi : nullptr;
}
