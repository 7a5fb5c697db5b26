// The module's KV copies between the device and host memory: synchronous block and tail
// copies on the compute stream, asynchronous block copies on the copy stream with their
// tickets, and the pinned host memory of the host tier. Part of the module's C ABI (module.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "backend/cuda/cuda_module.h"
#include "module_context.h"

namespace llmkv::cuda::abi {

// The compute stream after the asynchronous copies (module_context.h says when).
llmkv_cuda_status order_after_copies(Ctx *ctx, bool reads_too) {
    if (!ctx->copies.pending_writes && !(reads_too && ctx->copies.pending_reads))
        return LLMKV_CUDA_OK;
    CK(ctx, cudaEventRecord(ctx->copies.copy_marker, ctx->copy));
    CK(ctx, cudaStreamWaitEvent(ctx->compute, ctx->copies.copy_marker, 0));
    ctx->copies.pending_writes = false;
    if (reads_too) ctx->copies.pending_reads = false;
    return LLMKV_CUDA_OK;
}

// ---- synchronous copies -----------------------------------------------------------------

namespace {

llmkv_cuda_status sync_copy(Ctx *ctx, void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind kind) {
    CKS(order_after_copies(ctx, /*reads_too=*/true));
    CK(ctx, cudaMemcpyAsync(dst, src, bytes, kind, ctx->compute));
    CK(ctx, cudaStreamSynchronize(ctx->compute));
    return LLMKV_CUDA_OK;
}

llmkv_cuda_status check_block(Ctx *ctx, uint32_t id, const void *host) {
    if (!host) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "null host buffer");
    if (id >= ctx->kv.n_sealed)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("sealed block %u out of range (%u)", id, ctx->kv.n_sealed));
    return LLMKV_CUDA_OK;
}
llmkv_cuda_status check_tail(Ctx *ctx, uint32_t slot) {
    if (slot >= ctx->kv.n_tail)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("tail slot %u out of range (%u)", slot, ctx->kv.n_tail));
    return LLMKV_CUDA_OK;
}

}  // namespace

llmkv_cuda_status api_read_block(llmkv_cuda_context *ctx, uint32_t id, void *host) {
    return guarded(ctx, [&] {
        CKS(check_block(ctx, id, host));
        return sync_copy(ctx, host, ctx->kv.pool + size_t(id) * ctx->kv.block_bytes,
                         ctx->kv.block_bytes, cudaMemcpyDeviceToHost);
    });
}
llmkv_cuda_status api_write_block(llmkv_cuda_context *ctx, uint32_t id, const void *host) {
    return guarded(ctx, [&] {
        CKS(check_block(ctx, id, host));
        return sync_copy(ctx, ctx->kv.pool + size_t(id) * ctx->kv.block_bytes, host,
                         ctx->kv.block_bytes, cudaMemcpyHostToDevice);
    });
}
llmkv_cuda_status api_read_tail(llmkv_cuda_context *ctx, uint32_t slot, void *host) {
    return guarded(ctx, [&] {
        CKS(check_tail(ctx, slot));
        if (!host) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "null host buffer");
        return sync_copy(ctx, host, ctx->kv.tails + size_t(slot) * ctx->kv.tail_bytes,
                         ctx->kv.tail_bytes, cudaMemcpyDeviceToHost);
    });
}
llmkv_cuda_status api_write_tail(llmkv_cuda_context *ctx, uint32_t slot, const void *host) {
    return guarded(ctx, [&] {
        CKS(check_tail(ctx, slot));
        if (!host) return ctx->fail(LLMKV_CUDA_ERR_INVALID, "null host buffer");
        return sync_copy(ctx, ctx->kv.tails + size_t(slot) * ctx->kv.tail_bytes, host,
                         ctx->kv.tail_bytes, cudaMemcpyHostToDevice);
    });
}
llmkv_cuda_status api_copy_tail(llmkv_cuda_context *ctx, uint32_t from, uint32_t to) {
    return guarded(ctx, [&] {
        CKS(check_tail(ctx, from));
        CKS(check_tail(ctx, to));
        if (from == to) return LLMKV_CUDA_OK;
        CK(ctx, cudaMemcpyAsync(ctx->kv.tails + size_t(to) * ctx->kv.tail_bytes,
                                ctx->kv.tails + size_t(from) * ctx->kv.tail_bytes,
                                ctx->kv.tail_bytes, cudaMemcpyDeviceToDevice, ctx->compute));
        return LLMKV_CUDA_OK;
    });
}

// ---- asynchronous block copies -----------------------------------------------------------

namespace {

llmkv_cuda_status record_ticket(Ctx *ctx, uint64_t *ticket) {
    const uint64_t t = ctx->copies.next_ticket;
    cudaEvent_t ev = ctx->copies.ticket_events[t % kTicketEvents];
    if (t > kTicketEvents && t - kTicketEvents > ctx->copies.completed_ticket) {
        // The event still stands for ticket t - kTicketEvents: wait for it (the copy stream
        // is in order, so every earlier ticket is then complete too).
        CK(ctx, cudaEventSynchronize(ev));
        ctx->copies.completed_ticket = t - kTicketEvents;
    }
    CK(ctx, cudaEventRecord(ev, ctx->copy));
    ctx->copies.next_ticket = t + 1;
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
    CK(ctx, cudaEventRecord(ctx->copies.compute_marker, ctx->compute));
    CK(ctx, cudaStreamWaitEvent(ctx->copy, ctx->copies.compute_marker, 0));
    for (uint32_t i = 0; i < n; ++i) {
        uint8_t *dev = ctx->kv.pool + size_t(ids[i]) * ctx->kv.block_bytes;
        if (to_host) {
            CK(ctx, cudaMemcpyAsync(const_cast<void *>(host[i]), dev, ctx->kv.block_bytes,
                                    cudaMemcpyDeviceToHost, ctx->copy));
        } else {
            CK(ctx, cudaMemcpyAsync(dev, host[i], ctx->kv.block_bytes, cudaMemcpyHostToDevice,
                                    ctx->copy));
        }
    }
    if (n > 0) (to_host ? ctx->copies.pending_reads : ctx->copies.pending_writes) = true;
    return record_ticket(ctx, ticket);
}

}  // namespace

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

namespace {

llmkv_cuda_status ticket_status(Ctx *ctx, uint64_t ticket, bool wait) {
    if (ticket == 0 || ticket >= ctx->copies.next_ticket)
        return ctx->fail(LLMKV_CUDA_ERR_INVALID,
                         format("unknown copy ticket %llu", (unsigned long long)ticket));
    if (ticket <= ctx->copies.completed_ticket) return LLMKV_CUDA_OK;
    if (ticket + kTicketEvents < ctx->copies.next_ticket) {
        // Its event was reused, which only happens after waiting for it.
        return LLMKV_CUDA_OK;
    }
    cudaEvent_t ev = ctx->copies.ticket_events[ticket % kTicketEvents];
    const cudaError_t e = wait ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return LLMKV_CUDA_NOT_READY;
    }
    CK(ctx, e);
    ctx->copies.completed_ticket = std::max(ctx->copies.completed_ticket, ticket);
    return LLMKV_CUDA_OK;
}

}  // namespace

llmkv_cuda_status api_copy_query(llmkv_cuda_context *ctx, uint64_t ticket) {
    return guarded(ctx, [&] { return ticket_status(ctx, ticket, false); });
}
llmkv_cuda_status api_copy_wait(llmkv_cuda_context *ctx, uint64_t ticket) {
    return guarded(ctx, [&] { return ticket_status(ctx, ticket, true); });
}

// ---- pinned host memory ------------------------------------------------------------------

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
            ctx->kv.host_ranges.insert(
                std::upper_bound(ctx->kv.host_ranges.begin(), ctx->kv.host_ranges.end(), range),
                range);
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
        auto &r = ctx->kv.host_ranges;
        r.erase(std::remove_if(r.begin(), r.end(),
                               [&](const auto &x) { return x.first == uintptr_t(p); }),
                r.end());
    }
    cudaFreeHost(p);
    cudaGetLastError();
}

}  // namespace llmkv::cuda::abi
