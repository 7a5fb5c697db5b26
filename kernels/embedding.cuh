// Token embedding lookup: fp16 table rows -> f32 activations.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

namespace llmkv::cuda {

// x[t][e] = table[tokens[t]][e] for t < n_tokens, e < n_embd.
// table: fp16 [n_vocab][n_embd] (device); tokens: int32 [n_tokens] (device, already
// validated against n_vocab); x: f32 [n_tokens][n_embd] (device).
cudaError_t launch_embedding(const uint16_t *table, uint32_t n_embd, const int32_t *tokens,
                             uint32_t n_tokens, float *x, cudaStream_t stream);

}  // namespace llmkv::cuda
