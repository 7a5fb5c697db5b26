// The module's ops of a forward pass, queued on the compute stream inside a batch: embed,
// rms_norm, matmul and logits (cuBLAS or the matvec kernel), rope, write_kv, attention and the
// elementwise ops. Part of the module's C ABI (module.cpp).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_module.h"
#include "dequant.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gemm.cuh"
#include "kv_seal.cuh"
#include "kv_window.cuh"
#include "matvec_q.cuh"
#include "module_context.h"
#include "moe.cuh"
#include "paged_attention.cuh"
#include "rms_norm.cuh"
#include "rope.cuh"
#include "swiglu.cuh"
#include "tensor/expert_routing.h"
#include "tensor/tensor_type.h"

namespace llmkv::cuda::abi {

// ---- the ops of one batch ----------------------------------------------------------------

llmkv_cuda_status api_embed(llmkv_cuda_context *ctx, llmkv_cuda_weight table,
                            llmkv_cuda_tensor out) {
    return guarded(ctx, [&] {
        const char *op = "embed";
        CKS(need_batch(ctx, op));
        CKS(check_tensor(ctx, out, op, "out"));
        const DeviceWeight *w = weight_of(ctx, table, true);
        if (!w) return bad(ctx, op, "table is not a matrix handle");
        if (w->cols != out.cols || out.rows < ctx->batch.T)
            return bad(ctx, op,
                       format("table %u x %u, out %u x %u, %u tokens", w->rows, w->cols, out.rows,
                              out.cols, ctx->batch.T));
        if (uint32_t(ctx->batch.max_token) >= w->rows)
            return bad(
                ctx, op,
                format("token id %d outside the vocabulary (%u)", ctx->batch.max_token, w->rows));
        if (w->encoded)  // the rows decoded straight to f32: the CPU reference's values
            CK(ctx, launch_gather_decoded_rows(w->type, w->data, w->row_bytes, ctx->tables.d_tokens,
                                               ctx->batch.T, w->cols,
                                               static_cast<float *>(out.data), ctx->compute));
        else
            CK(ctx, launch_embedding(static_cast<const uint16_t *>(w->data), w->cols,
                                     ctx->tables.d_tokens, ctx->batch.T,
                                     static_cast<float *>(out.data), ctx->compute));
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
            return bad(ctx, op,
                       format("x %u x %u, weight %u, out %u x %u", x.rows, x.cols, w->cols,
                              out.rows, out.cols));
        CK(ctx, launch_rms_norm(static_cast<const float *>(x.data), x.cols, nullptr, x.rows,
                                static_cast<const float *>(w->data), x.cols, eps, nullptr,
                                static_cast<float *>(out.data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

namespace {

// x (f32) -> the fp16 GEMM input buffer.
llmkv_cuda_status to_fp16_input(Ctx *ctx, const llmkv_cuda_tensor &x, const char *op) {
    const size_t n = size_t(x.rows) * x.cols;
    if (n > ctx->weights.xh_elems) return bad(ctx, op, "x is wider than every activation buffer");
    CK(ctx,
       launch_f32_to_f16(static_cast<const float *>(x.data), n, ctx->weights.xh, ctx->compute));
    return LLMKV_CUDA_OK;
}

// y[t][r] (f32, row stride ldy) = x[t] . w[r] for the n rows of x starting at row x0 of the
// activation x (f32, stride x.cols); *xh_ready: whether ctx->weights.xh already holds the
// fp16 copy of x's rows (to_fp16_input; made here, once, when a GEMM needs it).
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
            CK(ctx,
               launch_matvec_q(type, w.data, row_bytes, w.rows, w.cols, xf + size_t(t0) * x.cols,
                               x.cols, nt, y + size_t(t0) * ldy, ldy, ctx->compute));
        }
        return LLMKV_CUDA_OK;
    }
    if (!*xh_ready) {
        CKS(to_fp16_input(ctx, x, op));
        *xh_ready = true;
    }
    const uint16_t *xh = ctx->weights.xh + size_t(x0) * x.cols;
    if (!w.encoded) {
        CKB(ctx, gemm_f16_f32(ctx->cublas, static_cast<const uint16_t *>(w.data), w.rows, w.cols,
                              xh, x.cols, n, y, int64_t(ldy), 0.0f));
        return LLMKV_CUDA_OK;
    }
    const uint32_t chunk = dq_chunk_rows(ctx, w);
    for (uint32_t r0 = 0; r0 < w.rows; r0 += chunk) {
        const uint32_t nr = std::min(chunk, w.rows - r0);
        CKS(decode_chunk(ctx, w, r0, nr, nullptr));
        CKB(ctx, gemm_f16_f32(ctx->cublas, ctx->weights.dq_scratch, nr, w.cols, xh, x.cols, n,
                              y + r0, int64_t(ldy), 0.0f));
    }
    return LLMKV_CUDA_OK;
}

}  // namespace

llmkv_cuda_status api_matmul(llmkv_cuda_context *ctx, llmkv_cuda_weight weight, llmkv_cuda_tensor x,
                             llmkv_cuda_tensor y) {
    return guarded(ctx, [&] {
        const char *op = "matmul";
        CKS(check_tensor(ctx, x, op, "x"));
        CKS(check_tensor(ctx, y, op, "y"));
        const DeviceWeight *w = weight_of(ctx, weight, true);
        if (!w) return bad(ctx, op, "w is not a matrix handle");
        if (w->cols != x.cols || y.cols != w->rows || y.rows < x.rows || x.data == y.data)
            return bad(ctx, op,
                       format("w %u x %u, x %u x %u, y %u x %u", w->rows, w->cols, x.rows, x.cols,
                              y.rows, y.cols));
        bool xh_ready = false;
        return product(ctx, op, *w, x, 0, x.rows, &xh_ready, static_cast<float *>(y.data), y.cols);
    });
}

llmkv_cuda_status api_rope(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, uint32_t n_heads,
                           uint32_t head_dim, uint32_t rope_dim, uint32_t style, float freq_scale,
                           llmkv_cuda_weight inv_freq) {
    return guarded(ctx, [&] {
        const char *op = "rope";
        CKS(need_batch(ctx, op));
        CKS(check_tensor(ctx, x, op, "x"));
        if (x.rows > ctx->batch.T) return bad(ctx, op, "x has more rows than the batch");
        if (style > LLMKV_CUDA_ROPE_HALVES) return bad(ctx, op, format("style %u", style));
        if (rope_dim % 2 != 0 || rope_dim > head_dim || size_t(n_heads) * head_dim > x.cols)
            return bad(ctx, op,
                       format("rope_dim %u, head_dim %u, %u heads, x.cols %u", rope_dim, head_dim,
                              n_heads, x.cols));
        if (rope_dim == 0) return LLMKV_CUDA_OK;
        const DeviceWeight *f = weight_of(ctx, inv_freq, false);
        if (!f || f->cols < rope_dim / 2)
            return bad(ctx, op, "inv_freq: no vector of rope_dim / 2");
        CK(ctx, launch_rope(static_cast<float *>(x.data), x.cols, x.rows, ctx->tables.d_pos,
                            n_heads, head_dim, rope_dim, style == LLMKV_CUDA_ROPE_HALVES,
                            freq_scale, static_cast<const float *>(f->data), ctx->compute));
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
        if (layer >= ctx->kv.g.n_layers)
            return bad(ctx, op, format("layer %u of %u", layer, ctx->kv.g.n_layers));
        if (k.rows < ctx->batch.T || v.rows < ctx->batch.T || k.cols < ctx->kv.kvd ||
            v.cols < ctx->kv.kvd)
            return bad(ctx, op,
                       format("k %u x %u, v %u x %u for %u tokens of %u values", k.rows, k.cols,
                              v.rows, v.cols, ctx->batch.T, ctx->kv.kvd));
        // A second write of one layer would reload the tail it already advanced.
        if (ctx->batch.layer_stamp[layer] == ctx->batch.step_counter)
            return bad(ctx, op, format("layer %u written twice in one batch", layer));
        CKS(order_after_copies(ctx));
        const KvGeometry &g = ctx->kv.g;
        cudaStream_t st = ctx->compute;
        CK(ctx, launch_window_load_tail(g, layer, ctx->kv.tails, ctx->tables.d_spans,
                                        ctx->batch.n_spans, ctx->work.window, st));
        CK(ctx,
           launch_window_append(g, static_cast<const float *>(k.data), k.cols,
                                static_cast<const float *>(v.data), v.cols, ctx->tables.d_row_span,
                                ctx->batch.T, ctx->tables.d_spans, ctx->work.window, st));
        CK(ctx, launch_kv_seal(g, layer, ctx->work.window, ctx->tables.d_spans, ctx->tables.d_jobs,
                               ctx->batch.n_jobs, ctx->kv.pool, st));
        CK(ctx, launch_window_store_tail(g, layer, ctx->work.window, ctx->tables.d_spans,
                                         ctx->batch.n_spans, ctx->kv.tails, st));
        ctx->batch.layer_stamp[layer] = ctx->batch.step_counter;
        ctx->batch.window_layer = layer;
        return LLMKV_CUDA_OK;
    });
}

namespace {

// attention and attention_sinks (sinks 0: none).
llmkv_cuda_status attention_op(llmkv_cuda_context *ctx, const char *op, uint32_t layer,
                               llmkv_cuda_tensor q, uint32_t n_heads, float scale, uint32_t window,
                               llmkv_cuda_weight sinks, llmkv_cuda_tensor out) {
    return guarded(ctx, [&] {
        CKS(need_batch(ctx, op));
        CKS(check_tensor(ctx, q, op, "q"));
        CKS(check_tensor(ctx, out, op, "out"));
        const KvGeometry &g = ctx->kv.g;
        if (ctx->batch.window_layer != int64_t(layer))
            return bad(ctx, op, format("layer %u is not the layer of the last write_kv", layer));
        const size_t width = size_t(n_heads) * g.head_dim;
        if (n_heads == 0 || n_heads % g.n_kv_heads != 0 || q.cols < width || out.cols < width ||
            q.rows < ctx->batch.T || out.rows < ctx->batch.T)
            return bad(ctx, op,
                       format("%u heads (%u kv heads), q %u x %u, out %u x %u", n_heads,
                              g.n_kv_heads, q.rows, q.cols, out.rows, out.cols));
        const float *sink_values = nullptr;
        if (sinks) {
            const DeviceWeight *w = weight_of(ctx, sinks, false);
            if (!w) return bad(ctx, op, "sinks is not a vector handle");
            if (w->cols != n_heads)
                return bad(ctx, op, format("%u sinks for %u heads", w->cols, n_heads));
            sink_values = static_cast<const float *>(w->data);
        }
        const size_t need_ws = attention_min_workspace(n_heads, g.head_dim, ctx->batch.max_ctx);
        if (need_ws > ctx->work.attn_ws_bytes)
            return ctx->fail(LLMKV_CUDA_ERR_UNSUPPORTED,
                             format("attention: context %u needs %zu bytes of attention "
                                    "workspace, the context has %zu",
                                    ctx->batch.max_ctx, need_ws, ctx->work.attn_ws_bytes));
        CKS(order_after_copies(ctx));
        AttentionArgs aa;
        aa.g = g;
        aa.layer = layer;
        aa.n_heads = n_heads;
        aa.scale = scale;
        aa.sliding_window = window;
        aa.q = static_cast<const float *>(q.data);
        aa.q_stride = q.cols;
        aa.pool = ctx->kv.pool;
        aa.block_ids = ctx->tables.d_block_ids;
        aa.window = ctx->work.window;
        aa.tails = ctx->kv.tails;
        aa.spans = ctx->tables.d_spans;
        aa.row_span = ctx->tables.d_row_span;
        aa.n_rows = ctx->batch.T;
        aa.row_parts_host = ctx->tables.h_row_parts;
        aa.row_parts = ctx->tables.d_row_parts;
        aa.item_row = ctx->tables.d_item_row;
        aa.n_pool_blocks = ctx->kv.n_sealed;
        aa.host_blocks = ctx->tables.d_host_blocks;
        aa.out_f32 = static_cast<float *>(out.data);
        aa.out_stride = out.cols;
        aa.workspace = ctx->work.attn_ws;
        aa.workspace_bytes = ctx->work.attn_ws_bytes;
        aa.sinks = sink_values;
        CK(ctx, launch_paged_attention(aa, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

}  // namespace

llmkv_cuda_status api_attention(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor q,
                                uint32_t n_heads, float scale, uint32_t window,
                                llmkv_cuda_tensor out) {
    return attention_op(ctx, "attention", layer, q, n_heads, scale, window, 0, out);
}

llmkv_cuda_status api_attention_sinks(llmkv_cuda_context *ctx, uint32_t layer, llmkv_cuda_tensor q,
                                      uint32_t n_heads, float scale, uint32_t window,
                                      llmkv_cuda_weight sinks, llmkv_cuda_tensor out) {
    if (!sinks) return bad(ctx, "attention_sinks", "no sinks vector");
    return attention_op(ctx, "attention_sinks", layer, q, n_heads, scale, window, sinks, out);
}

namespace {

llmkv_cuda_status same_shape(Ctx *ctx, const char *op, const llmkv_cuda_tensor &a,
                             const llmkv_cuda_tensor &b) {
    CKS(check_tensor(ctx, a, op, "first tensor"));
    CKS(check_tensor(ctx, b, op, "second tensor"));
    if (a.cols != b.cols || b.rows < a.rows)
        return bad(ctx, op, format("%u x %u and %u x %u", a.rows, a.cols, b.rows, b.cols));
    return LLMKV_CUDA_OK;
}

}  // namespace

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

llmkv_cuda_status api_swiglu_oai(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate,
                                 llmkv_cuda_tensor up, float alpha, float limit) {
    return guarded(ctx, [&] {
        CKS(same_shape(ctx, "swiglu_oai", gate, up));
        CK(ctx,
           launch_swiglu_oai(static_cast<float *>(gate.data), static_cast<const float *>(up.data),
                             size_t(gate.rows) * gate.cols, alpha, limit, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_geglu(llmkv_cuda_context *ctx, llmkv_cuda_tensor gate, llmkv_cuda_tensor up) {
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
        if (w->cols != x.cols)
            return bad(ctx, op, format("x %u x %u, bias %u", x.rows, x.cols, w->cols));
        CK(ctx, launch_add_bias(static_cast<float *>(x.data), x.cols, x.rows,
                                static_cast<const float *>(w->data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_scale(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, float s) {
    return guarded(ctx, [&] {
        CKS(check_tensor(ctx, x, "scale", "x"));
        CK(ctx,
           launch_scale(static_cast<float *>(x.data), size_t(x.rows) * x.cols, s, ctx->compute));
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
        if (x.cols != out.cols || x.rows < ctx->batch.T || out.rows < ctx->batch.n_lrows ||
            x.data == out.data)
            return bad(ctx, op,
                       format("x %u x %u, out %u x %u, %u tokens, %u logit rows", x.rows, x.cols,
                              out.rows, out.cols, ctx->batch.T, ctx->batch.n_lrows));
        CK(ctx,
           launch_gather_rows(static_cast<const float *>(x.data), x.cols, ctx->tables.d_logit_rows,
                              ctx->batch.n_lrows, static_cast<float *>(out.data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_logits(llmkv_cuda_context *ctx, llmkv_cuda_weight weight, llmkv_cuda_tensor x,
                             float *host) {
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
            CKS(product(ctx, op, *w, x, r0, nc, &xh_ready, ctx->work.logits_dev, w->rows));
            CK(ctx, cudaMemcpyAsync(host + size_t(r0) * w->rows, ctx->work.logits_dev,
                                    nc * row_bytes, cudaMemcpyDeviceToHost, ctx->compute));
        }
        CK(ctx, cudaStreamSynchronize(ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

}  // namespace llmkv::cuda::abi

// ---- mixture of experts ---------------------------------------------------------------------

namespace llmkv::cuda::abi {

namespace {

// The host's copy of a routes tensor: the last route_experts output, or copied back now.
llmkv_cuda_status host_routes(Ctx *ctx, const llmkv_cuda_tensor &routes, const char *op) {
    ExpertScratch &m = ctx->experts;
    if (m.routes_data == routes.data && m.routes_rows == routes.rows &&
        m.routes.size() == size_t(routes.rows) * routes.cols)
        return LLMKV_CUDA_OK;
    m.routes.resize(size_t(routes.rows) * routes.cols);
    CK(ctx, cudaMemcpyAsync(m.routes.data(), routes.data, m.routes.size() * sizeof(float),
                            cudaMemcpyDeviceToHost, ctx->compute));
    CK(ctx, cudaStreamSynchronize(ctx->compute));
    m.routes_data = routes.data;
    m.routes_rows = routes.rows;
    (void)op;
    return LLMKV_CUDA_OK;
}

// INVALID naming the token and the expert id of slot `slot` of the routes.
llmkv_cuda_status bad_route(Ctx *ctx, const char *op, const std::vector<float> &routes,
                            uint32_t slot, uint32_t n_used, uint32_t n_expert) {
    const uint32_t t = slot / n_used;
    return bad(ctx, op,
               format("token %u: expert %g of %u", t,
                      double(routes[size_t(t) * 2 * n_used + slot % n_used]), n_expert));
}

// Grows a gathered-rows buffer to n floats (the old one may be read by queued work: wait).
llmkv_cuda_status grow_floats(Ctx *ctx, float *&d, size_t &cap, size_t n, const char *what) {
    return grow_table<float>(ctx, d, nullptr, cap, n, 1 << 16, what);
}

}  // namespace

llmkv_cuda_status api_route_experts(llmkv_cuda_context *ctx, llmkv_cuda_tensor logits,
                                    uint32_t n_expert, uint32_t n_used, uint32_t flags,
                                    float weight_scale, llmkv_cuda_tensor routes) {
    return guarded(ctx, [&] {
        const char *op = "route_experts";
        CKS(check_tensor(ctx, logits, op, "logits"));
        CKS(check_tensor(ctx, routes, op, "routes"));
        if (n_expert == 0 || n_used == 0 || n_used > n_expert || logits.cols != n_expert ||
            routes.cols != 2 * n_used || routes.rows != logits.rows)
            return bad(ctx, op,
                       format("%u of %u experts, logits %u x %u, routes %u x %u", n_used, n_expert,
                              logits.rows, logits.cols, routes.rows, routes.cols));
        ExpertScratch &m = ctx->experts;
        m.logits.resize(size_t(logits.rows) * n_expert);
        CK(ctx, cudaMemcpyAsync(m.logits.data(), logits.data, m.logits.size() * sizeof(float),
                                cudaMemcpyDeviceToHost, ctx->compute));
        CK(ctx, cudaStreamSynchronize(ctx->compute));
        ExpertRouting r;
        r.n_expert = n_expert;
        r.n_used = n_used;
        r.norm_weights = (flags & LLMKV_CUDA_MOE_NORM_WEIGHTS) != 0;
        if (flags & LLMKV_CUDA_MOE_SOFTMAX_CHOSEN) r.gating = ExpertRouting::Gating::kSoftmaxChosen;
        r.weight_scale = weight_scale;
        m.p.resize(n_expert);
        m.taken.resize(n_expert);
        m.routes.resize(size_t(routes.rows) * routes.cols);
        for (uint32_t t = 0; t < logits.rows; ++t)
            route_token(m.logits.data() + size_t(t) * n_expert, r, m.p.data(), m.taken.data(),
                        m.routes.data() + size_t(t) * routes.cols);
        // Pageable memory: the copy has taken the host values when it returns.
        CK(ctx, cudaMemcpyAsync(routes.data, m.routes.data(), m.routes.size() * sizeof(float),
                                cudaMemcpyHostToDevice, ctx->compute));
        m.routes_data = routes.data;
        m.routes_rows = routes.rows;
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_matmul_experts(llmkv_cuda_context *ctx, const llmkv_cuda_weight *experts,
                                     uint32_t n_expert, llmkv_cuda_tensor x,
                                     llmkv_cuda_tensor routes, uint32_t n_used,
                                     llmkv_cuda_tensor y) {
    return guarded(ctx, [&] {
        const char *op = "matmul_experts";
        CKS(check_tensor(ctx, x, op, "x"));
        CKS(check_tensor(ctx, routes, op, "routes"));
        CKS(check_tensor(ctx, y, op, "y"));
        const uint32_t T = routes.rows, S = T * n_used;
        if (!experts || n_used == 0 || routes.cols != 2 * n_used || (x.rows != T && x.rows != S) ||
            y.rows != S || x.data == y.data)
            return bad(ctx, op,
                       format("routes %u x %u, x %u x %u, y %u x %u, %u experts per token",
                              routes.rows, routes.cols, x.rows, x.cols, y.rows, y.cols, n_used));
        for (uint32_t e = 0; e < n_expert; ++e) {
            if (!experts[e]) continue;
            const DeviceWeight *w = weight_of(ctx, experts[e], true);
            if (!w) return bad(ctx, op, format("expert %u is not a matrix handle", e));
            if (w->cols != x.cols || w->rows != y.cols)
                return bad(ctx, op,
                           format("expert %u is %u x %u for x %u, y %u columns", e, w->rows,
                                  w->cols, x.cols, y.cols));
        }
        CKS(host_routes(ctx, routes, op));
        ExpertScratch &m = ctx->experts;
        // The slots of each expert in slot order, gathered end to end.
        const int64_t bad_slot =
            order_slots_by_expert(m.routes.data(), T, n_used, n_expert, m.count, m.order);
        if (bad_slot >= 0)
            return bad_route(ctx, op, m.routes, uint32_t(bad_slot), n_used, n_expert);
        const bool per_slot = x.rows == S && n_used > 1;
        m.rows.resize(2 * size_t(S));
        for (uint32_t j = 0; j < S; ++j) {
            m.rows[j] = int32_t(per_slot ? m.order[j] : m.order[j] / n_used);  // source row
            m.rows[S + j] = int32_t(m.order[j]);                               // destination
        }
        // One table: the gathered rows' sources, then their destinations.
        CKS(grow_table<int32_t>(ctx, m.d_rows, nullptr, m.rows_cap, 2 * size_t(S), 256,
                                "expert row tables"));
        const size_t xn = size_t(S) * x.cols, yn = size_t(S) * y.cols;
        CKS(grow_floats(ctx, m.d_x, m.x_cap, xn, "gathered expert inputs"));
        CKS(grow_floats(ctx, m.d_y, m.y_cap, yn, "gathered expert outputs"));
        CK(ctx, cudaMemcpyAsync(m.d_rows, m.rows.data(), m.rows.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, ctx->compute));
        CK(ctx, launch_gather_rows(static_cast<const float *>(x.data), x.cols, m.d_rows, S, m.d_x,
                                   ctx->compute));
        for (uint32_t e = 0; e < n_expert; ++e) {
            const uint32_t b = m.count[e], n = m.count[e + 1] - b;
            if (n == 0) continue;
            float *ye = m.d_y + size_t(b) * y.cols;
            if (!experts[e]) {  // another rank's expert: zero rows in this rank's partial sum
                CK(ctx, cudaMemsetAsync(ye, 0, size_t(n) * y.cols * sizeof(float), ctx->compute));
                continue;
            }
            const llmkv_cuda_tensor xe{m.d_x + size_t(b) * x.cols, n, x.cols};
            bool xh_ready = false;
            CKS(product(ctx, op, *weight_of(ctx, experts[e], true), xe, 0, n, &xh_ready, ye,
                        y.cols));
        }
        CK(ctx, launch_scatter_rows(m.d_y, y.cols, m.d_rows + S, S, static_cast<float *>(y.data),
                                    ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_combine_experts(llmkv_cuda_context *ctx, llmkv_cuda_tensor y,
                                      llmkv_cuda_tensor routes, uint32_t n_used,
                                      llmkv_cuda_tensor out) {
    return guarded(ctx, [&] {
        const char *op = "combine_experts";
        CKS(check_tensor(ctx, y, op, "y"));
        CKS(check_tensor(ctx, routes, op, "routes"));
        CKS(check_tensor(ctx, out, op, "out"));
        const uint32_t T = routes.rows;
        if (n_used == 0 || routes.cols != 2 * n_used || y.rows != T * n_used ||
            y.cols != out.cols || out.rows != T)
            return bad(ctx, op,
                       format("y %u x %u, routes %u x %u, out %u x %u", y.rows, y.cols, routes.rows,
                              routes.cols, out.rows, out.cols));
        CK(ctx, launch_combine_experts(static_cast<const float *>(y.data),
                                       static_cast<const float *>(routes.data), n_used, T, out.cols,
                                       static_cast<float *>(out.data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_add_expert_bias(llmkv_cuda_context *ctx, llmkv_cuda_tensor y,
                                      llmkv_cuda_tensor routes, uint32_t n_used,
                                      const llmkv_cuda_weight *bias, uint32_t n_expert) {
    return guarded(ctx, [&] {
        const char *op = "add_expert_bias";
        CKS(check_tensor(ctx, y, op, "y"));
        CKS(check_tensor(ctx, routes, op, "routes"));
        const uint32_t T = routes.rows, S = T * n_used;
        if (!bias || n_used == 0 || routes.cols != 2 * n_used || y.rows != S)
            return bad(ctx, op,
                       format("routes %u x %u, y %u x %u, %u experts per token", routes.rows,
                              routes.cols, y.rows, y.cols, n_used));
        ExpertScratch &m = ctx->experts;
        m.bias_ptrs.assign(n_expert, nullptr);
        for (uint32_t e = 0; e < n_expert; ++e) {
            if (!bias[e]) continue;  // another rank's expert, or none
            const DeviceWeight *w = weight_of(ctx, bias[e], false);
            if (!w) return bad(ctx, op, format("bias %u is not a vector handle", e));
            if (w->cols != y.cols)
                return bad(ctx, op,
                           format("bias %u has %u values for y %u columns", e, w->cols, y.cols));
            m.bias_ptrs[e] = static_cast<const float *>(w->data);
        }
        CKS(host_routes(ctx, routes, op));
        m.row_bias.resize(S);
        for (uint32_t s = 0; s < S; ++s) {
            const float id = m.routes[size_t(s / n_used) * 2 * n_used + s % n_used];
            if (!(id >= 0.0f && id < float(n_expert)))
                return bad_route(ctx, op, m.routes, s, n_used, n_expert);
            m.row_bias[s] = m.bias_ptrs[uint32_t(id)];
        }
        CKS(grow_table<const float *>(ctx, m.d_row_bias, nullptr, m.row_bias_cap, S, 256,
                                      "expert bias tables"));
        // Pageable memory: the copy has taken the host values when it returns.
        CK(ctx, cudaMemcpyAsync(m.d_row_bias, m.row_bias.data(), S * sizeof(const float *),
                                cudaMemcpyHostToDevice, ctx->compute));
        CK(ctx, launch_add_row_biases(static_cast<float *>(y.data), y.cols, m.d_row_bias, S,
                                      ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_mul_sigmoid(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                  llmkv_cuda_tensor g) {
    return guarded(ctx, [&] {
        const char *op = "mul_sigmoid";
        CKS(check_tensor(ctx, x, op, "x"));
        CKS(check_tensor(ctx, g, op, "g"));
        if (g.rows != x.rows || g.cols != 1)
            return bad(ctx, op, format("g %u x %u for x %u rows", g.rows, g.cols, x.rows));
        CK(ctx, launch_mul_sigmoid(static_cast<float *>(x.data), x.cols, x.rows,
                                   static_cast<const float *>(g.data), ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

}  // namespace llmkv::cuda::abi
