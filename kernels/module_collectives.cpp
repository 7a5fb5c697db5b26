// The module's tensor-parallel ranks: activation rows to and from the host, and the NCCL
// communicator (comm_unique_id, comm_prepare, comm_init) behind all_reduce_sum. NCCL is
// loaded at run time (nccl_loader.h). Part of the module's C ABI (module.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_module.h"
#include "elementwise.cuh"
#include "module_context.h"
#include "nccl_loader.h"

namespace llmkv::cuda::abi {

// ---- tensor-parallel ranks ---------------------------------------------------------------------

namespace {

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

}  // namespace

llmkv_cuda_status api_read_activation(llmkv_cuda_context *ctx, llmkv_cuda_tensor x, float *host) {
    return activation_copy(ctx, x, host, x.data, cudaMemcpyDeviceToHost, "read_activation");
}

llmkv_cuda_status api_write_activation(llmkv_cuda_context *ctx, llmkv_cuda_tensor x,
                                       const float *host) {
    ctx->experts.routes_data = nullptr;  // the host's routes may be stale now (matmul_experts)
    return activation_copy(ctx, x, x.data, host, cudaMemcpyHostToDevice, "write_activation");
}

namespace {

std::string nccl_text(const NcclApi *n, ncclResult_t r) {
    return format("%s (NCCL %d, error %d)", n->error_string(r), n->version, int(r));
}

// The per-rank floats of one all-gather: at most this many (the buffer holds one chunk of
// every rank's: 128 MiB with 8 ranks), so that a large batch does not cost its size times
// the rank count on every device.
constexpr uint64_t kCommChunkElems = uint64_t(4) << 20;

}  // namespace

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

llmkv_cuda_status api_comm_prepare(llmkv_cuda_context *ctx, uint32_t n_ranks,
                                   uint64_t max_elements) {
    return guarded(ctx, [&] {
        const char *op = "comm_prepare";
        if (n_ranks == 0 || max_elements == 0)
            return bad(
                ctx, op,
                format("%u ranks, %llu elements", n_ranks, (unsigned long long)max_elements));
        if (ctx->tp.comm || ctx->tp.gathered)
            return bad(ctx, op, "the context is prepared already");
        std::string why;
        if (!nccl_api(&why)) return ctx->fail(LLMKV_CUDA_ERR_NO_DEVICE, why);
        const size_t chunk = size_t(std::min(max_elements, kCommChunkElems));
        float *gathered = nullptr;
        CKS(ctx->alloc(gathered, chunk * n_ranks * 4, ctx->other_bytes, "the all-gather buffer"));
        ctx->tp.gathered = gathered;
        ctx->tp.chunk = chunk;
        ctx->tp.n_ranks = n_ranks;
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_comm_init(llmkv_cuda_context *ctx, const uint8_t id[LLMKV_CUDA_COMM_ID_BYTES],
                                uint32_t n_ranks, uint32_t rank) {
    return guarded(ctx, [&] {
        const char *op = "comm_init";
        if (!ctx->tp.gathered) return bad(ctx, op, "not prepared (comm_prepare)");
        if (!id || n_ranks != ctx->tp.n_ranks || rank >= n_ranks)
            return bad(ctx, op,
                       format("rank %u of %u (prepared for %u)", rank, n_ranks, ctx->tp.n_ranks));
        if (ctx->tp.comm) return bad(ctx, op, "the context has joined a communicator already");
        const NcclApi *n = nccl_api(nullptr);
        ncclUniqueId u;
        std::memcpy(&u, id, sizeof u);
        ncclComm_t comm = nullptr;
        const ncclResult_t r = n->comm_init_rank(&comm, int(n_ranks), u, int(rank));
        if (r != ncclSuccess)
            return ctx->fail(LLMKV_CUDA_ERR_DEVICE, format("ncclCommInitRank (rank %u of %u): %s",
                                                           rank, n_ranks, nccl_text(n, r).c_str()));
        ctx->tp.comm = comm;
        ctx->tp.rank = rank;
        return LLMKV_CUDA_OK;
    });
}

llmkv_cuda_status api_all_reduce_sum(llmkv_cuda_context *ctx, llmkv_cuda_tensor x) {
    return guarded(ctx, [&] {
        const char *op = "all_reduce_sum";
        CKS(check_tensor(ctx, x, op, "x"));
        if (!ctx->tp.comm) return bad(ctx, op, "no communicator (comm_init)");
        const NcclApi *nc = nccl_api(nullptr);
        CKS(order_after_copies(ctx));
        float *data = static_cast<float *>(x.data);
        const size_t n = size_t(x.rows) * x.cols;
        for (size_t at = 0; at < n; at += ctx->tp.chunk) {
            const size_t count = std::min(ctx->tp.chunk, n - at);
            const ncclResult_t r = nc->all_gather(data + at, ctx->tp.gathered, count, ncclFloat32,
                                                  ctx->tp.comm, ctx->compute);
            if (r != ncclSuccess)
                return ctx->fail(LLMKV_CUDA_ERR_DEVICE, "ncclAllGather: " + nccl_text(nc, r));
            CK(ctx,
               launch_sum_parts(ctx->tp.gathered, count, ctx->tp.n_ranks, data + at, ctx->compute));
        }
        return LLMKV_CUDA_OK;
    });
}

}  // namespace llmkv::cuda::abi
