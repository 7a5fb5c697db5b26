// SwiGLU activation of the fused gate/up projection.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

namespace llmkv::cuda {

// out[t][i] = g / (1 + exp(-g)) * u with g = gate_up[t][i], u = gate_up[t][n_ff + i].
// gate_up: f32 [n_rows][2 * n_ff] (device); out: fp16 [n_rows][n_ff] (device).
cudaError_t launch_swiglu(const float *gate_up, uint32_t n_ff, uint32_t n_rows, uint16_t *out,
                          cudaStream_t stream);

}  // namespace llmkv::cuda
