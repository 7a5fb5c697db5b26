// SwiGLU activation: gate = silu(gate) * up, in place.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace llmkv::cuda {

// gate[i] = g / (1 + exp(-g)) * up[i] with g = gate[i], for i < n.
// gate, up: f32 [n] (device; rows x n_ff contiguous).
cudaError_t launch_swiglu(float *gate, const float *up, size_t n, cudaStream_t stream);

}  // namespace llmkv::cuda
