// Paged attention over a batch of spans, for decode and prefill chunks alike: each query
// row attends causally (or over a sliding window of its last positions) over its session's
// sealed blocks (read in their codec, dequantized
// in registers) and its fp16 window (step.cuh), grouped-query aware.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kv_layout.cuh"
#include "step.cuh"

namespace llmkv::cuda {

// Tokens per context partition (split-K / "flash decoding"): fixed, so a row's result
// never depends on the rest of the batch.
constexpr uint32_t kAttentionPartitionTokens = 256;

struct AttentionArgs {
    KvGeometry g;
    uint32_t layer = 0;
    uint32_t n_heads = 0;         // query heads; n_heads % g.n_kv_heads == 0
    float scale = 0.0f;           // usually 1 / sqrt(head_dim)
    uint32_t sliding_window = 0;  // position p sees (p - sliding_window, p]; 0: all <= p
    const float *q =
        nullptr;  // f32 [n_rows][q_stride], head h at columns [h*D, h*D + D), RoPE applied
    uint32_t q_stride = 0;
    const uint8_t *pool = nullptr;  // sealed pool [n_blocks][sealed_block_bytes], 256-aligned
    // Block ids >= n_pool_blocks name host_blocks[id - n_pool_blocks]: a block in mapped host
    // memory (the host tier), read in place. host_blocks: device array; may be null when no
    // id reaches n_pool_blocks.
    uint32_t n_pool_blocks = 0xffffffffu;
    const uint8_t *const *host_blocks = nullptr;
    const uint32_t *block_ids = nullptr;  // uint32 block ids; a span's at [blocks_offset, +
                                          // n_blocks * g.n_groups) (step.cuh)
    const uint16_t *window = nullptr;     // fp16 window buffer (step.cuh)
    // Tail pool [n_tail_slots][tail_block_bytes]: with the KV sink (g.sink), position 0's K / V
    // of a span whose position 0 is sealed come from its tail slot's sink rows. Unused (may be
    // null) without the sink.
    const uint8_t *tails = nullptr;
    const StepSpan *spans = nullptr;     // [n_spans]
    const uint32_t *row_span = nullptr;  // uint32 [n_rows]: span of each row
    uint32_t n_rows = 0;
    // Per-row partitions (attention_partition_plan): row r reads partitions [0, parts(r)),
    // parts(r) = position(r) / kAttentionPartitionTokens + 1, as work items
    // [row_parts[r], row_parts[r + 1]); the same n_rows + 1 prefix sums on the host (to size
    // the launches) and on the device, and the row of every work item on the device
    // (launch_attention_item_rows, once per batch: a CTA reads its row in one load).
    const uint32_t *row_parts_host = nullptr;
    const uint32_t *row_parts = nullptr;
    const uint32_t *item_row = nullptr;
    float *out_f32 = nullptr;     // f32 [n_rows][out_stride] or nullptr
    uint16_t *out_f16 = nullptr;  // fp16 [n_rows][out_stride] or nullptr (exactly one set)
    uint32_t out_stride = 0;
    // Learned attention sinks (gpt-oss): device f32 [n_heads], head h's logit joining the
    // softmax's denominator in the merge (out = A / (L + e^(sinks[h] - M))). Null: none.
    const float *sinks = nullptr;
    float *workspace = nullptr;  // device scratch for the partition results
    size_t workspace_bytes = 0;
};

// Workspace bytes needed to run at least one row at max_context (the launcher splits the
// rows into as many launches as the workspace requires).
size_t attention_min_workspace(uint32_t n_heads, uint32_t head_dim, uint32_t max_context);

// base[0] = 0, base[r + 1] = base[r] + position[r] / kAttentionPartitionTokens + 1: the work
// items of each row (AttentionArgs::row_parts). Host code. False when the sum does not fit
// 32 bits (base is then unspecified).
bool attention_partition_plan(const int32_t *position, uint32_t n_rows, uint32_t *base);

// item_row[i] = r for i in [row_parts[r], row_parts[r + 1]), r < n_rows (device arrays;
// item_row holds row_parts[n_rows] entries).
cudaError_t launch_attention_item_rows(const uint32_t *row_parts, uint32_t n_rows,
                                       uint32_t *item_row, cudaStream_t stream);

// Launches the partition kernel and the merge kernel (possibly several times over row
// ranges), one CTA per (work item, kv head, head chunk): a row's grid is sized by its own
// context, not the batch's longest. Returns cudaErrorInvalidValue for unsupported shapes,
// missing row_parts / item_row, or a too small workspace.
cudaError_t launch_paged_attention(const AttentionArgs &args, cudaStream_t stream);

}  // namespace llmkv::cuda
