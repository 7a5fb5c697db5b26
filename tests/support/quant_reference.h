// Slow, obvious scalar quantizers and dequantizers for the GGUF tensor types, used by tests to
// build model files and to check kernels. Written for clarity, not speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/tensor_type.h"

namespace llmkv {

// Bytes that `n` elements of type `t` occupy. Throws std::invalid_argument when `n` is not a
// multiple of the type's block size.
size_t tensor_bytes_reference(TensorType t, int64_t n);

// Encodes `n` floats as type `t` (F32, F16, BF16, Q8_0, Q4_0, Q4_1). For the block types `n`
// must be a multiple of 32 (else std::invalid_argument).
//  - Q8_0: d = max|x| / 127, q = round(x / d).
//  - Q4_0: d = (the value of largest magnitude, with its sign) / -8,
//          q = clamp(round(x / d) + 8, 0, 15).
//  - Q4_1: d = (max - min) / 15, m = min, q = clamp(round((x - m) / d), 0, 15).
// d and m are stored as fp16; an all-zero block gets d = 0 and q = 0 (Q4_0: q = 8).
std::vector<uint8_t> quantize_reference(TensorType t, const float *x, int64_t n);

// Decodes `n` elements of type `t` from `data`.
std::vector<float> dequantize_reference(TensorType t, const uint8_t *data, int64_t n);

}  // namespace llmkv
