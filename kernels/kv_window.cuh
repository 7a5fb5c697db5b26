// The fp16 KV window of each span, per layer: load the tail rows, append the new K/V rows,
// write the rows that stay unsealed back to the tail slot (the CPU backend's write_kv).
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kv_layout.cuh"
#include "step.cuh"

namespace llmkv::cuda {

// Window rows [0, pos0 - win_start) of every span <- tail slot rows of layer `layer`.
// tails: tail pool [n_tail_slots][tail_block_bytes] (device); spans: [n_spans] (device);
// window: fp16 window buffer (device, layout in step.cuh).
cudaError_t launch_window_load_tail(const KvGeometry &g, uint32_t layer, const uint8_t *tails,
                                    const StepSpan *spans, uint32_t n_spans, uint16_t *window,
                                    cudaStream_t stream);

// Window rows of the new tokens <- K and V of the batch rows converted to fp16 (round to
// nearest even). k: f32 [n_rows][ld_k], v: f32 [n_rows][ld_v], each row's first
// n_kv_heads * head_dim columns (RoPE already applied to K); row_span: uint32 [n_rows] span
// index of each row (device).
cudaError_t launch_window_append(const KvGeometry &g, const float *k, uint32_t ld_k, const float *v,
                                 uint32_t ld_v, const uint32_t *row_span, uint32_t n_rows,
                                 const StepSpan *spans, uint16_t *window, cudaStream_t stream);

// Tail slot rows [0, end - tail_start) of layer `layer` <- window rows from tail_start -
// win_start, where end = pos0 + n and tail_start = sealed_blocks(end) * B; with the KV sink
// (g.sink), a span with pos0 == 0 also copies window row 0 to its heads' sink rows.
cudaError_t launch_window_store_tail(const KvGeometry &g, uint32_t layer, const uint16_t *window,
                                     const StepSpan *spans, uint32_t n_spans, uint8_t *tails,
                                     cudaStream_t stream);

}  // namespace llmkv::cuda
