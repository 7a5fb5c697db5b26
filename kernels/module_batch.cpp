// The module's batch: begin_batch checks the spans and builds the batch's tables (tokens,
// positions, block tables, host-tier blocks, seal jobs, attention work items) in pinned host
// memory and uploads them once; end_batch closes it. Part of the module's C ABI (module.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_module.h"
#include "module_context.h"
#include "paged_attention.cuh"
#include "step.cuh"

namespace llmkv::cuda::abi {

// ---- one batch ------------------------------------------------------------------------------

namespace {

// A host-tier block the kernels may read: 16-byte aligned, its sealed_block_bytes inside one
// allocation of api_host_alloc (mapped pinned memory).
bool host_block_ok(const Ctx *ctx, const void *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (!p || a % 16 != 0 || !ctx->kv.unified_addressing) return false;
    auto it = std::upper_bound(ctx->kv.host_ranges.begin(), ctx->kv.host_ranges.end(),
                               std::make_pair(a, ~size_t(0)));
    if (it == ctx->kv.host_ranges.begin()) return false;
    --it;
    return a >= it->first && a - it->first <= it->second &&
           ctx->kv.block_bytes <= it->second - (a - it->first);
}

llmkv_cuda_status begin_batch_impl(Ctx *ctx, const llmkv_cuda_span *spans, uint32_t n_spans,
                                   uint32_t *n_tokens, uint32_t *n_logit_rows) {
    ctx->batch.in_batch = false;
    if (n_spans == 0 || !spans) return bad(ctx, "begin_batch", "no spans");
    if (n_spans > ctx->max_spans)
        return bad(ctx, "begin_batch",
                   format("%u spans exceed the limit %u", n_spans, ctx->max_spans));
    const KvGeometry &g = ctx->kv.g;
    const uint32_t B = g.block_tokens;

    // Validate everything before any device work.
    uint64_t T = 0, n_blocks_total = 0, n_host_total = 0;
    uint32_t n_logits = 0, max_ctx = 0;
    int32_t max_token = 0;
    ++ctx->batch.step_counter;
    if (ctx->batch.step_counter == 0) {  // wrapped: restart the stamps
        std::fill(ctx->batch.tail_stamp.begin(), ctx->batch.tail_stamp.end(), 0u);
        std::fill(ctx->batch.layer_stamp.begin(), ctx->batch.layer_stamp.end(), 0u);
        ctx->batch.step_counter = 1;
    }
    for (uint32_t i = 0; i < n_spans; ++i) {
        const llmkv_cuda_span &s = spans[i];
        if (s.n == 0 || !s.tokens) return bad(ctx, "begin_batch", format("span %u is empty", i));
        if (uint64_t(s.pos0) + s.n > 0x7fffffffu)
            return bad(ctx, "begin_batch", format("span %u position overflow", i));
        if (s.tail_slot >= ctx->kv.n_tail)
            return bad(
                ctx, "begin_batch",
                format("span %u tail slot %u out of range (%u)", i, s.tail_slot, ctx->kv.n_tail));
        if (ctx->batch.tail_stamp[s.tail_slot] == ctx->batch.step_counter)
            return bad(ctx, "begin_batch", format("tail slot %u used by two spans", s.tail_slot));
        ctx->batch.tail_stamp[s.tail_slot] = ctx->batch.step_counter;
        const uint32_t need = g.sealed_blocks(s.pos0 + s.n);
        if (s.n_blocks < need || (need > 0 && !s.blocks))
            return bad(ctx, "begin_batch",
                       format("span %u has %u sealed blocks, needs %u", i, s.n_blocks, need));
        const uint32_t first_sealed_here = g.sealed_blocks(s.pos0);  // the batch seals from here
        if (g.grouped()) {
            // Local-group blocks: pool blocks, or released where no query of the span sees
            // them (KvGeometry::local_live_from) and the batch seals nothing.
            if (need > 0 && !s.local_blocks)
                return bad(ctx, "begin_batch", format("span %u has no local-group blocks", i));
            const uint32_t released_below = std::min(g.local_live_from(s.pos0), first_sealed_here);
            const uint32_t per = g.n_groups - 1;
            for (uint32_t b = 0; b < need; ++b) {
                if (s.blocks[b] == LLMKV_CUDA_HOST_BLOCK)
                    return bad(
                        ctx, "begin_batch",
                        format("span %u block %u names host memory (not with layer groups)", i, b));
                for (uint32_t k = 0; k < per; ++k) {
                    const uint32_t id = s.local_blocks[size_t(b) * per + k];
                    if (id == LLMKV_CUDA_RELEASED_BLOCK && b < released_below) continue;
                    if (id >= ctx->kv.n_sealed)
                        return bad(
                            ctx, "begin_batch",
                            format("span %u token block %u: local group %u block id %u is "
                                   "%s",
                                   i, b, k + 1, id,
                                   id == LLMKV_CUDA_RELEASED_BLOCK ? "released but still visible"
                                                                   : "out of range"));
                }
            }
        }
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
            if (s.blocks[b] >= ctx->kv.n_sealed)
                return bad(ctx, "begin_batch",
                           format("span %u block %u id %u out of range (%u)", i, b, s.blocks[b],
                                  ctx->kv.n_sealed));
        }
        for (uint32_t t = 0; t < s.n; ++t) {
            if (s.tokens[t] < 0)
                return bad(ctx, "begin_batch", format("token id %d is negative", s.tokens[t]));
            max_token = std::max(max_token, s.tokens[t]);
        }
        T += s.n;
        n_blocks_total += uint64_t(need) * g.n_groups;
        n_logits += s.want_logits ? (s.all_logits ? s.n : 1) : 0;
        max_ctx = std::max(max_ctx, s.pos0 + s.n);
    }
    if (T > ctx->max_tokens)
        return bad(ctx, "begin_batch",
                   format("%llu tokens exceed the batch limit %u", (unsigned long long)T,
                          ctx->max_tokens));
    // The previous batch's table uploads read the pinned mirrors: wait for them before
    // rewriting (they are at the head of that batch's work).
    if (ctx->tables.pending) {
        CK(ctx, cudaEventSynchronize(ctx->tables.uploaded));
        ctx->tables.pending = false;
    }
    if (uint64_t(ctx->kv.n_sealed) + n_host_total >= LLMKV_CUDA_HOST_BLOCK)
        return bad(ctx, "begin_batch", "too many host blocks for 32-bit block ids");
    CKS(grow_table(ctx, ctx->tables.d_block_ids, &ctx->tables.h_block_ids,
                   ctx->tables.block_ids_cap, n_blocks_total, 1, "batch block tables"));
    CKS(grow_table(ctx, ctx->tables.d_host_blocks, &ctx->tables.h_host_blocks,
                   ctx->tables.host_blocks_cap, n_host_total, 256, "host block table"));

    // Batch tables.
    uint32_t row = 0, n_jobs = 0, n_lrows = 0;
    size_t n_host = 0;
    uint64_t win_off = 0;
    size_t blocks_off = 0;
    for (uint32_t i = 0; i < n_spans; ++i) {
        const llmkv_cuda_span &s = spans[i];
        const uint32_t ws = g.span_window_start(s.pos0);
        const uint32_t cap = g.span_window_rows(s.pos0, s.n);
        const uint32_t need = g.sealed_blocks(s.pos0 + s.n);
        StepSpan &d = ctx->tables.h_spans[i];
        d.pos0 = s.pos0;
        d.n = s.n;
        d.row0 = row;
        d.tail_slot = s.tail_slot;
        d.win_start = ws;
        d.win_cap = cap;
        d.win_offset = win_off;
        d.blocks_offset = uint32_t(blocks_off);
        d.n_blocks = need;
        // The block table: per token block, its block of each group ([need][n_groups]; group
        // 0 alone without groups). Host blocks (never with groups): virtual ids past the pool.
        const uint32_t ng = g.n_groups;
        uint32_t *table = ctx->tables.h_block_ids + blocks_off;
        for (uint32_t b = 0; b < need; ++b) {
            table[size_t(b) * ng] = s.blocks[b];
            for (uint32_t k = 1; k < ng; ++k)
                table[size_t(b) * ng + k] = s.local_blocks[size_t(b) * (ng - 1) + (k - 1)];
            if (s.blocks[b] != LLMKV_CUDA_HOST_BLOCK) continue;
            ctx->tables.h_host_blocks[n_host] = static_cast<const uint8_t *>(s.host_blocks[b]);
            table[b] = ctx->kv.n_sealed + uint32_t(n_host++);
        }
        // Seal jobs: per completed token block, one per group ([job][n_groups]: the seal of
        // layer l takes its group's).
        for (uint32_t b = ws / B; b < need; ++b) {
            if (n_jobs >= ctx->tables.max_jobs)
                return bad(ctx, "begin_batch", "too many blocks sealed in one batch");
            for (uint32_t k = 0; k < ng; ++k)
                ctx->tables.h_jobs[size_t(n_jobs) * ng + k] =
                    SealJob{i, table[size_t(b) * ng + k], b * B - ws};
            ++n_jobs;
        }
        for (uint32_t t = 0; t < s.n; ++t) {
            ctx->tables.h_tokens[row + t] = s.tokens[t];
            ctx->tables.h_pos[row + t] = int32_t(s.pos0 + t);
            ctx->tables.h_row_span[row + t] = i;
        }
        if (s.want_logits) {
            for (uint32_t t = s.all_logits ? 0 : s.n - 1; t < s.n; ++t)
                ctx->tables.h_logit_rows[n_lrows++] = int32_t(row + t);
        }
        win_off += 2ull * ctx->kv.kvd * cap;
        blocks_off += size_t(need) * ng;
        row += s.n;
    }
    if (win_off > ctx->work.window_elems)
        return bad(ctx, "begin_batch", "KV window buffer too small (internal)");
    if (!attention_partition_plan(ctx->tables.h_pos, uint32_t(T), ctx->tables.h_row_parts))
        return bad(ctx, "begin_batch", "more than 2^32 attention work items in one batch");
    CKS(grow_table<uint32_t>(ctx, ctx->tables.d_item_row, nullptr, ctx->tables.item_row_cap,
                             ctx->tables.h_row_parts[T], 1024, "attention work items"));

    cudaStream_t st = ctx->compute;
    CKS(order_after_copies(ctx));
    CK(ctx, cudaMemcpyAsync(ctx->tables.d_tokens, ctx->tables.h_tokens, size_t(T) * 4,
                            cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->tables.d_pos, ctx->tables.h_pos, size_t(T) * 4,
                            cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->tables.d_row_parts, ctx->tables.h_row_parts, size_t(T + 1) * 4,
                            cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->tables.d_row_span, ctx->tables.h_row_span, size_t(T) * 4,
                            cudaMemcpyHostToDevice, st));
    CK(ctx, cudaMemcpyAsync(ctx->tables.d_spans, ctx->tables.h_spans,
                            size_t(n_spans) * sizeof(StepSpan), cudaMemcpyHostToDevice, st));
    if (n_jobs)
        CK(ctx, cudaMemcpyAsync(ctx->tables.d_jobs, ctx->tables.h_jobs,
                                size_t(n_jobs) * g.n_groups * sizeof(SealJob),
                                cudaMemcpyHostToDevice, st));
    if (n_lrows)
        CK(ctx, cudaMemcpyAsync(ctx->tables.d_logit_rows, ctx->tables.h_logit_rows,
                                size_t(n_lrows) * 4, cudaMemcpyHostToDevice, st));
    if (blocks_off)
        CK(ctx, cudaMemcpyAsync(ctx->tables.d_block_ids, ctx->tables.h_block_ids, blocks_off * 4,
                                cudaMemcpyHostToDevice, st));
    if (n_host)
        CK(ctx, cudaMemcpyAsync(ctx->tables.d_host_blocks, ctx->tables.h_host_blocks,
                                n_host * sizeof(void *), cudaMemcpyHostToDevice, st));
    CK(ctx, cudaEventRecord(ctx->tables.uploaded, st));
    ctx->tables.pending = true;
    CK(ctx, launch_attention_item_rows(ctx->tables.d_row_parts, uint32_t(T), ctx->tables.d_item_row,
                                       st));

    ctx->batch.T = uint32_t(T);
    ctx->batch.n_spans = n_spans;
    ctx->batch.n_jobs = n_jobs;
    ctx->batch.n_lrows = n_lrows;
    ctx->batch.max_ctx = max_ctx;
    ctx->batch.max_token = max_token;
    ctx->batch.window_layer = -1;
    ctx->batch.in_batch = true;
    if (n_tokens) *n_tokens = uint32_t(T);
    if (n_logit_rows) *n_logit_rows = n_logits;
    return LLMKV_CUDA_OK;
}

}  // namespace

llmkv_cuda_status api_begin_batch(llmkv_cuda_context *ctx, const llmkv_cuda_span *spans,
                                  uint32_t n_spans, uint32_t *n_tokens, uint32_t *n_logit_rows) {
    ctx->experts.routes_data = nullptr;  // routes of an earlier batch are not this one's
    return guarded(ctx,
                   [&] { return begin_batch_impl(ctx, spans, n_spans, n_tokens, n_logit_rows); });
}

llmkv_cuda_status api_end_batch(llmkv_cuda_context *ctx) {
    return guarded(ctx, [&] {
        ctx->batch.in_batch = false;
        ctx->batch.window_layer = -1;
        return LLMKV_CUDA_OK;
    });
}

}  // namespace llmkv::cuda::abi
