// The CUDA module's C ABI, version 5 (src/backend/cuda/cuda_module.h): one context = one
// device, the KV pools in the CPU's byte layouts (llmkv::KvGeometry), weights uploaded one
// matrix / vector at a time as handles, activation buffers, and the operations of a forward
// pass (the architecture itself lives in libllmkv, src/model/arch/). A compute stream runs
// the ops and the synchronous block / tail copies; a copy stream runs the asynchronous block
// copies of the host tier; cuBLAS does the GEMMs.
// This file: device discovery, create / destroy, errors and usage, and the exported table;
// the context is module_context.h, the calls are in module_weights.cpp, module_batch.cpp,
// module_ops.cpp, module_copies.cpp and module_collectives.cpp. Host code only (compiled by
// the host compiler); kernels are called through their launchers. Every CUDA / cuBLAS call is
// checked; a failure becomes the context's sticky error.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "backend/cuda/cuda_module.h"
#include "kv_layout.cuh"
#include "module_context.h"
#include "nccl_loader.h"
#include "step.cuh"

namespace llmkv::cuda::abi {

namespace {

std::string vformat(const char *fmt, va_list args) {
    char buf[1024];
    std::vsnprintf(buf, sizeof buf, fmt, args);
    return buf;
}

}  // namespace

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

namespace {

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
    g.sink = kv.sink != 0;
    g.window = kv.window;
    g.n_groups = kv.n_groups;
    g.group_layers = kv.group_layers;
    g.local_mask[0] = kv.local_mask[0];
    g.local_mask[1] = kv.local_mask[1];
    return g;
}

// Layer groups as set_layer_groups (src/kv/kv_cache.cpp) makes them, or none: nullptr, else
// what is wrong. The kernels index blocks by layer_group / layer_slot, which must stay inside
// the group's block and the span's block table.
const char *groups_unsupported(const KvGeometry &g) {
    if (g.n_groups == 1)
        return g.window == 0 && g.group_layers == 0 && g.local_mask[0] == 0 && g.local_mask[1] == 0
                   ? nullptr
                   : "layer-group fields set with n_groups 1";
    if (g.n_groups == 0) return "n_groups 0";
    if (g.n_layers > 128) return "layer groups need at most 128 layers";
    const uint64_t beyond[2] = {g.n_layers >= 64 ? 0 : ~uint64_t(0) << g.n_layers,
                                g.n_layers >= 128  ? 0
                                : g.n_layers <= 64 ? ~uint64_t(0)
                                                   : ~uint64_t(0) << (g.n_layers - 64)};
    if ((g.local_mask[0] & beyond[0]) || (g.local_mask[1] & beyond[1]))
        return "a local layer past n_layers";
    const uint32_t n_local = g.local_rank(g.n_layers), n_global = g.n_layers - n_local;
    if (g.window == 0 || n_local == 0 || n_global == 0)
        return "groups without a window, a local or a global layer";
    if (g.group_layers != n_global || g.n_groups != 1 + (n_local + n_global - 1) / n_global)
        return "group sizes disagree with the local layers";
    return nullptr;
}

}  // namespace

}  // namespace llmkv::cuda::abi

void llmkv_cuda_context::release_all() {
    if (tp.comm) {
        // After a device error the other ranks may never finish a collective with this
        // one (nor this one's queued all-gathers): abort before waiting for the streams.
        // A healthy context's work completed with the last synchronizing call; destroy
        // waits for the other ranks' last collectives.
        const llmkv::cuda::NcclApi *n = llmkv::cuda::nccl_api(nullptr);
        if (n && sticky != LLMKV_CUDA_OK) n->comm_abort(tp.comm);
        if (compute) cudaStreamSynchronize(compute);
        if (n && sticky == LLMKV_CUDA_OK) n->comm_destroy(tp.comm);
        tp.comm = nullptr;
    }
    if (compute) cudaStreamSynchronize(compute);
    if (copy) cudaStreamSynchronize(copy);
    for (cudaEvent_t e : copies.ticket_events) cudaEventDestroy(e);
    copies.ticket_events.clear();
    if (copies.compute_marker) cudaEventDestroy(copies.compute_marker);
    if (copies.copy_marker) cudaEventDestroy(copies.copy_marker);
    if (tables.uploaded) cudaEventDestroy(tables.uploaded);
    copies.compute_marker = copies.copy_marker = tables.uploaded = nullptr;
    if (cublas) cublasDestroy(cublas);
    for (const llmkv::cuda::abi::DeviceAlloc &a : device_allocs) cudaFree(a.p);
    for (void *p : host_allocs) cudaFreeHost(p);
    device_allocs.clear();
    host_allocs.clear();
    if (compute) cudaStreamDestroy(compute);
    if (copy) cudaStreamDestroy(copy);
    compute = copy = nullptr;
    cublas = nullptr;
    cudaGetLastError();
}

namespace llmkv::cuda::abi {

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

namespace {

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
    ctx->kv.g = g;
    if (const char *why = kv_layout_unsupported(g)) {
        return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                         format("CUDA KV layout not supported: %s (head_dim %u, block_tokens %u, "
                                "dtypes %u/%u, rotation %u/%u)",
                                why, g.head_dim, g.block_tokens, kv->dtype_k, kv->dtype_v,
                                kv->rotate_k, kv->rotate_v));
    }
    if (const char *why = groups_unsupported(g)) {
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("CUDA KV layer groups: %s (%u groups of %u layers, window %u)", why,
                                g.n_groups, g.group_layers, g.window));
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
    ctx->kv.kvd = g.n_kv_heads * g.head_dim;
    ctx->kv.block_bytes = g.sealed_block_bytes();
    ctx->kv.tail_bytes = g.tail_block_bytes();
    ctx->kv.n_sealed = kv->n_sealed_blocks;
    ctx->kv.n_tail = kv->n_tail_slots;
    ctx->max_tokens = p->max_batch_tokens;
    ctx->max_spans =
        p->max_spans ? std::min(p->max_spans, p->max_batch_tokens) : p->max_batch_tokens;
    const size_t window_rows = g.batch_window_rows_max(ctx->max_spans, ctx->max_tokens);
    ctx->work.window_elems = window_rows * 2 * ctx->kv.kvd;
    ctx->tables.max_jobs = uint32_t(window_rows / g.block_tokens + 1);
    ctx->work.attn_ws_bytes =
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
    ctx->kv.unified_addressing = uva != 0;
    CK(ctx, cudaStreamCreateWithFlags(&ctx->compute, cudaStreamNonBlocking));
    CK(ctx, cudaStreamCreateWithFlags(&ctx->copy, cudaStreamNonBlocking));
    CK(ctx, cudaEventCreateWithFlags(&ctx->copies.compute_marker, cudaEventDisableTiming));
    CK(ctx, cudaEventCreateWithFlags(&ctx->copies.copy_marker, cudaEventDisableTiming));
    CK(ctx, cudaEventCreateWithFlags(&ctx->tables.uploaded, cudaEventDisableTiming));
    ctx->copies.ticket_events.reserve(kTicketEvents);
    for (uint32_t i = 0; i < kTicketEvents; ++i) {
        cudaEvent_t ev = nullptr;
        CK(ctx, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        ctx->copies.ticket_events.push_back(ev);
    }

    // KV pools (zeroed: a never-written tail reads as zeros, not garbage).
    CKS(ctx->alloc(ctx->kv.pool, size_t(ctx->kv.n_sealed) * ctx->kv.block_bytes, ctx->kv_bytes,
                   "sealed KV pool"));
    CKS(ctx->alloc(ctx->kv.tails, size_t(ctx->kv.n_tail) * ctx->kv.tail_bytes, ctx->kv_bytes,
                   "KV tail slots"));
    CK(ctx, cudaMemsetAsync(ctx->kv.pool, 0, size_t(ctx->kv.n_sealed) * ctx->kv.block_bytes,
                            ctx->compute));
    CK(ctx, cudaMemsetAsync(ctx->kv.tails, 0, size_t(ctx->kv.n_tail) * ctx->kv.tail_bytes,
                            ctx->compute));
    // Window, workspaces, batch tables.
    const size_t T = ctx->max_tokens;
    uint64_t &o = ctx->other_bytes;
    CKS(ctx->alloc(ctx->work.window, ctx->work.window_elems * 2, o, "KV window"));
    CKS(ctx->alloc(ctx->work.attn_ws, ctx->work.attn_ws_bytes, o, "attention workspace"));
    CKS(ctx->alloc(ctx->work.logits_dev, kLogitsBufferBytes, o, "logits"));
    CKS(ctx->alloc(ctx->cublas_ws, kCublasWorkspace, o, "cuBLAS workspace"));
    CKS(ctx->alloc(ctx->tables.d_tokens, T * 4, o, "batch tokens"));
    CKS(ctx->alloc(ctx->tables.d_pos, T * 4, o, "batch positions"));
    CKS(ctx->alloc(ctx->tables.d_row_parts, (T + 1) * 4, o, "attention work items"));
    CKS(ctx->alloc(ctx->tables.d_logit_rows, T * 4, o, "batch logit rows"));
    CKS(ctx->alloc(ctx->tables.d_row_span, T * 4, o, "batch row spans"));
    CKS(ctx->alloc(ctx->tables.d_spans, size_t(ctx->max_spans) * sizeof(StepSpan), o,
                   "batch spans"));
    CKS(ctx->alloc(ctx->tables.d_jobs, size_t(ctx->tables.max_jobs) * g.n_groups * sizeof(SealJob),
                   o, "batch seal jobs"));
    CKS(ctx->alloc_host(ctx->tables.h_tokens, T * 4, "batch tokens"));
    CKS(ctx->alloc_host(ctx->tables.h_pos, T * 4, "batch positions"));
    CKS(ctx->alloc_host(ctx->tables.h_row_parts, (T + 1) * 4, "attention work items"));
    CKS(ctx->alloc_host(ctx->tables.h_logit_rows, T * 4, "batch logit rows"));
    CKS(ctx->alloc_host(ctx->tables.h_row_span, T * 4, "batch row spans"));
    CKS(ctx->alloc_host(ctx->tables.h_spans, size_t(ctx->max_spans) * sizeof(StepSpan),
                        "batch spans"));
    CKS(ctx->alloc_host(ctx->tables.h_jobs,
                        size_t(ctx->tables.max_jobs) * g.n_groups * sizeof(SealJob),
                        "batch seal jobs"));
    const size_t ids = std::max<size_t>(4096, size_t(ctx->kv.n_sealed));
    CKS(ctx->alloc(ctx->tables.d_block_ids, ids * 4, o, "batch block tables"));
    CKS(ctx->alloc_host(ctx->tables.h_block_ids, ids * 4, "batch block tables"));
    ctx->tables.block_ids_cap = ids;
    ctx->batch.tail_stamp.assign(ctx->kv.n_tail, 0);
    ctx->batch.layer_stamp.assign(g.n_layers, 0);

    CKB(ctx, cublasCreate(&ctx->cublas));
    CKB(ctx, cublasSetStream(ctx->cublas, ctx->compute));
    CKB(ctx, cublasSetWorkspace(ctx->cublas, ctx->cublas_ws, kCublasWorkspace));
    CK(ctx, cudaStreamSynchronize(ctx->compute));
    return LLMKV_CUDA_OK;
}

}  // namespace

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

// ---- errors, usage -----------------------------------------------------------------------

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

namespace {

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
    api_route_experts,
    api_matmul_experts,
    api_combine_experts,
    api_mul_sigmoid,
    api_attention_sinks,
    api_swiglu_oai,
    api_add_expert_bias,
};

}  // namespace

}  // namespace llmkv::cuda::abi

extern "C" __attribute__((visibility("default"))) const llmkv_cuda_api *llmkv_cuda_get_api(
    uint32_t abi_version) {
    return abi_version == LLMKV_CUDA_ABI_VERSION ? &llmkv::cuda::abi::kApi : nullptr;
}
