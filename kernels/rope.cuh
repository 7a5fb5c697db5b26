// Rotary position embedding of activation rows in place (RopeParams of
// src/backend/backend.h, both pair styles).
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

namespace llmkv::cuda {

// For each row t < n_rows at position pos[t] and each of its n_heads heads (head_dim wide,
// at columns [h * head_dim, (h + 1) * head_dim)), rotates pair i < rope_dim / 2 by
// float(pos) * freq_scale * inv_freq[i]. Pairs: (v[2i], v[2i+1]) (adjacent, GGUF Llama
// q/k) or, with halves, (v[i], v[i + rope_dim / 2]) (NeoX style).
// x: f32 [n_rows][ld] (device); pos: int32 [n_rows] (device); inv_freq: f32 [rope_dim / 2]
// (device).
cudaError_t launch_rope(float *x, uint32_t ld, uint32_t n_rows, const int32_t *pos,
                        uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim, bool halves,
                        float freq_scale, const float *inv_freq, cudaStream_t stream);

}  // namespace llmkv::cuda
