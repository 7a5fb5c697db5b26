// Per-batch descriptors the module builds on the host in begin_batch and uploads once
// (plain structs shared by host and device code).
//
// The fp16 "window" of a span (per layer, rebuilt by every write_kv, as the CPU backend's
// write_kv builds it): rows for positions [win_start, pos0 + n) where win_start =
// sealed_blocks(pos0) * B; rows [0, pos0 - win_start) come from the tail slot, the rest are
// the new K/V. Window buffer layout of one span (fp16, elements from win_offset):
//   K [H][win_cap][D], then V [H][win_cap][D],   win_cap = pos0 - win_start + n.
#pragma once

#include <stdint.h>

namespace llmkv::cuda {

struct StepSpan {
    uint32_t pos0;        // positions already computed
    uint32_t n;           // new tokens
    uint32_t row0;        // the span's first row in the batch's activations
    uint32_t tail_slot;   // tail slot id
    uint32_t win_start;   // position of window row 0 (a multiple of B)
    uint32_t win_cap;     // window rows per head
    uint64_t win_offset;  // fp16 element offset of the span's window (K part)
    // The span's block table at [blocks_offset, + n_blocks * n_groups): per token block j,
    // its block of each layer group g at blocks_offset + j * n_groups + g (KvGeometry: group
    // 0 alone without groups). Local-group entries no query of the span sees may be
    // LLMKV_CUDA_RELEASED_BLOCK; ids past the pool name host blocks (never with groups).
    uint32_t blocks_offset;
    uint32_t n_blocks;  // sealed token blocks of the span
};

// One sealed block completed during this step: seal window rows [win_row, win_row + B) of
// span `span` into sealed block `block_id` (every layer of its group, as each layer's window
// is built). With layer groups, the jobs of a token block are n_groups consecutive entries,
// one per group, and the seal of layer l reads its group's (KvGeometry::layer_group).
struct SealJob {
    uint32_t span;
    uint32_t block_id;
    uint32_t win_row;
};

}  // namespace llmkv::cuda
