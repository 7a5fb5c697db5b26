// Orthonormal fast Walsh-Hadamard transform along head_dim, used to rotate K / V rows before
// quantization (spreads outlier channels over all channels of a token).
//
// H is the Sylvester-ordered Hadamard matrix scaled by 1/sqrt(n): symmetric and orthogonal,
// so H = H^T = H^-1 and applying the transform twice gives the input back.
#pragma once

#include <cstdint>

namespace llmkv {

// True when n is a power of two (n >= 1): the sizes the transform handles.
bool hadamard_supported(uint32_t n);

// x <- H x in place. x: float [n], n a power of two. O(n log n), no allocation.
void hadamard_transform(float *x, uint32_t n);

}  // namespace llmkv
