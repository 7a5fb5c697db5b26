// Gated activations, in place: SwiGLU gate = silu(gate) * up, GeGLU gate = gelu_tanh(gate) * up.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace llmkv::cuda {

// gate[i] = g / (1 + exp(-g)) * up[i] with g = gate[i], for i < n.
// gate, up: f32 [n] (device; rows x n_ff contiguous).
cudaError_t launch_swiglu(float *gate, const float *up, size_t n, cudaStream_t stream);

// gate[i] = gelu_tanh(g) * up[i] with g = gate[i], for i < n, where gelu_tanh(g) =
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). gate, up: f32 [n] (device).
cudaError_t launch_geglu(float *gate, const float *up, size_t n, cudaStream_t stream);

// gpt-oss's clamped SwiGLU: with x = min(gate[i], limit) and y = clamp(up[i], -limit, limit),
// gate[i] = x / (1 + exp(-alpha x)) * (y + 1), for i < n (the CPU's order, rounded steps).
cudaError_t launch_swiglu_oai(float *gate, const float *up, size_t n, float alpha, float limit,
                              cudaStream_t stream);

}  // namespace llmkv::cuda
