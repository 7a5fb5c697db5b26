// The module's weights and activations: weight handles (fp16 matrices, f32 vectors, GGUF
// rows decoded to fp16 on the device, or kept in their encoding), activation buffers, and
// the argument checks the ops share. Part of the module's C ABI (module.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_module.h"
#include "dequant.cuh"
#include "dequant_formats.cuh"
#include "module_context.h"
#include "tensor/tensor_type.h"

namespace llmkv::cuda::abi {

// ---- weights and activations -------------------------------------------------------------

namespace {

llmkv_cuda_status upload_weight(Ctx *ctx, const void *host, uint32_t rows, uint32_t cols,
                                size_t elem, bool matrix, llmkv_cuda_weight *out) {
    if (!host || !out || rows == 0 || cols == 0)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID, "upload: null or empty weight");
    const size_t bytes = size_t(rows) * cols * elem;
    void *dev = nullptr;
    CKS(ctx->alloc(dev, bytes, ctx->weight_bytes, matrix ? "a weight matrix" : "a weight vector"));
    // On the compute stream, waited for: a cudaMemcpy from pageable memory runs on the legacy
    // stream and may return before its DMA lands, and the module's non-blocking compute
    // stream is not ordered after the legacy stream (a first GEMM could read a partial weight).
    cudaError_t e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, ctx->compute);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->compute);
    if (e != cudaSuccess) {
        ctx->free_device(dev);
        return ctx->cuda_fail("cudaMemcpyAsync (weight upload)", e);
    }
    ctx->weights.handles.push_back(DeviceWeight{dev, rows, cols, matrix});
    *out = llmkv_cuda_weight(ctx->weights.handles.size());
    return LLMKV_CUDA_OK;
}

}  // namespace

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
        uint16_t *xh = ctx->weights.xh;
        if (need_xh > ctx->weights.xh_elems)
            CKS(ctx->alloc(xh, need_xh * 2, ctx->other_bytes, "fp16 GEMM input"));
        float *p = nullptr;
        const size_t bytes = size_t(rows) * cols * 4;
        const llmkv_cuda_status s = ctx->alloc(p, bytes, ctx->other_bytes, "activations");
        if (s != LLMKV_CUDA_OK) {
            if (xh != ctx->weights.xh) ctx->free_device(xh);  // an out-of-memory changes nothing
            return s;
        }
        if (xh != ctx->weights.xh) {
            if (ctx->weights.xh) ctx->free_device(ctx->weights.xh);
            ctx->weights.xh = xh;
            ctx->weights.xh_elems = need_xh;
        }
        CK(ctx, cudaMemsetAsync(p, 0, bytes, ctx->compute));
        CK(ctx, cudaStreamSynchronize(ctx->compute));
        ctx->weights.activations.push_back(Activation{reinterpret_cast<const uint8_t *>(p), bytes});
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
    for (const Activation &a : ctx->weights.activations) {
        if (p >= a.data && p < a.data + a.bytes && bytes <= size_t(a.data + a.bytes - p))
            return LLMKV_CUDA_OK;
    }
    return ctx->fail(
        LLMKV_CUDA_ERR_INVALID,
        format("%s: %s (%u x %u) is not inside an activation buffer", op, name, t.rows, t.cols));
}

const DeviceWeight *weight_of(Ctx *ctx, llmkv_cuda_weight h, bool matrix) {
    if (h == 0 || h > ctx->weights.handles.size()) return nullptr;
    const DeviceWeight &w = ctx->weights.handles[h - 1];
    return w.matrix == matrix ? &w : nullptr;
}

llmkv_cuda_status bad(Ctx *ctx, const char *op, const std::string &what) {
    return ctx->fail(LLMKV_CUDA_ERR_INVALID, std::string(op) + ": " + what);
}

llmkv_cuda_status need_batch(Ctx *ctx, const char *op) {
    return ctx->batch.in_batch ? LLMKV_CUDA_OK : bad(ctx, op, "no batch begun");
}

// ---- packed weight matrices: GGUF rows uploaded as they are, decoded to fp16 on the device --

namespace {

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
    ctx->weights.handles.push_back(DeviceWeight{dev, rows, cols, true});
    *out = llmkv_cuda_weight(ctx->weights.handles.size());
    return LLMKV_CUDA_OK;
}

}  // namespace

llmkv_cuda_status api_upload_matrix_packed(llmkv_cuda_context *ctx, uint32_t type, const void *host,
                                           uint32_t rows, uint32_t cols, uint64_t row_bytes,
                                           llmkv_cuda_weight *out) {
    return guarded(ctx, [&] { return upload_packed(ctx, type, host, rows, cols, row_bytes, out); });
}

// ---- matrices kept in their GGUF encoding -------------------------------------------------

namespace {

// Grows the fp16 scratch of the encoded matrices' GEMMs to hold min(rows, as many rows as
// kDequantScratchBytes holds, at least one) rows of `cols`, and allocates the overflow flag.
// The new buffer is allocated before the old one goes: an out-of-memory changes nothing.
llmkv_cuda_status grow_dq_scratch(Ctx *ctx, uint32_t rows, uint32_t cols) {
    if (!ctx->weights.dq_flag)
        CKS(ctx->alloc(ctx->weights.dq_flag, sizeof(unsigned long long), ctx->other_bytes,
                       "dequantization flag"));
    const size_t fit = std::max<size_t>(kDequantScratchBytes / 2 / cols, 1);
    const size_t need = std::min<size_t>(rows, fit) * cols;
    if (need <= ctx->weights.dq_scratch_elems) return LLMKV_CUDA_OK;
    uint16_t *p = nullptr;
    CKS(ctx->alloc(p, need * 2, ctx->other_bytes, "dequantization scratch"));
    if (ctx->weights.dq_scratch) {
        CK(ctx, cudaStreamSynchronize(ctx->compute));  // queued GEMMs may still read it
        ctx->free_device(ctx->weights.dq_scratch);
    }
    ctx->weights.dq_scratch = p;
    ctx->weights.dq_scratch_elems = need;
    return LLMKV_CUDA_OK;
}

}  // namespace

// Rows of an encoded matrix per chunk of the scratch.
uint32_t dq_chunk_rows(const Ctx *ctx, const DeviceWeight &w) {
    return uint32_t(std::clamp<size_t>(ctx->weights.dq_scratch_elems / w.cols, 1, w.rows));
}

// Rows [r0, r0 + n) of an encoded matrix decoded to fp16 into the scratch; with a flag, a
// value beyond fp16 lowers it (launch_dequant_f16).
llmkv_cuda_status decode_chunk(Ctx *ctx, const DeviceWeight &w, uint32_t r0, uint32_t n,
                               unsigned long long *flag) {
    CK(ctx,
       launch_dequant_f16(w.type, static_cast<const uint8_t *>(w.data) + size_t(r0) * w.row_bytes,
                          w.row_bytes, n, w.cols, ctx->weights.dq_scratch, flag,
                          (unsigned long long)r0 * w.cols, ctx->compute));
    return LLMKV_CUDA_OK;
}

namespace {

llmkv_cuda_status upload_quantized(Ctx *ctx, uint32_t type, const void *host, uint32_t rows,
                                   uint32_t cols, uint64_t row_bytes, llmkv_cuda_weight *out) {
    size_t want = 0;
    CKS(check_packed_args(ctx, "upload_matrix_quantized", type, host, out, rows, cols, row_bytes,
                          &want));
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
        CK(ctx,
           cudaMemcpyAsync(dev, host, size_t(rows) * want, cudaMemcpyHostToDevice, ctx->compute));
        CK(ctx, cudaMemsetAsync(ctx->weights.dq_flag, 0xff, sizeof first_bad, ctx->compute));
        const uint32_t chunk = dq_chunk_rows(ctx, w);
        for (uint32_t r0 = 0; r0 < rows; r0 += chunk)
            CKS(decode_chunk(ctx, w, r0, std::min(chunk, rows - r0), ctx->weights.dq_flag));
        CK(ctx, cudaMemcpyAsync(&first_bad, ctx->weights.dq_flag, sizeof first_bad,
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
    ctx->weights.handles.push_back(w);
    *out = llmkv_cuda_weight(ctx->weights.handles.size());
    return LLMKV_CUDA_OK;
}

}  // namespace

llmkv_cuda_status api_upload_matrix_quantized(llmkv_cuda_context *ctx, uint32_t type,
                                              const void *host, uint32_t rows, uint32_t cols,
                                              uint64_t row_bytes, llmkv_cuda_weight *out) {
    return guarded(ctx,
                   [&] { return upload_quantized(ctx, type, host, rows, cols, row_bytes, out); });
}

}  // namespace llmkv::cuda::abi
