// Rotary position embedding of q and k rows in place (rope_rotate of src/engine/forward.h).
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

namespace llmkv::cuda {

// For each row t < n_rows at position pos[t]: the first n_heads heads (q) and the next
// n_kv_heads heads (k) of the row, each head_dim wide, rotate adjacent pairs
// (v[2i], v[2i+1]) by float(pos) * freq_scale * inv_freq[i] for i < rope_dim / 2.
// qk: f32 [n_rows][ld] (device), q heads at columns [0, n_heads * head_dim), k heads right
// after; pos: int32 [n_rows] (device); inv_freq: f32 [rope_dim / 2] (device).
cudaError_t launch_rope(float *qk, uint32_t ld, uint32_t n_rows, const int32_t *pos,
                        uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim, uint32_t rope_dim,
                        float freq_scale, const float *inv_freq, cudaStream_t stream);

}  // namespace llmkv::cuda
