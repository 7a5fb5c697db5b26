// Slow, obvious scalar quantizers and dequantizers for the GGUF tensor types, used by tests to
// build model files and to check kernels. Written for clarity, not speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/tensor_type.h"

namespace llmkv {

// Bytes that `n` elements of type `t` occupy. Throws std::invalid_argument when `n` is not a
// multiple of the type's block size.
size_t tensor_bytes_reference(TensorType t, int64_t n);

// Encodes `n` floats as type `t` (every TensorType). For the block types `n`
// must be a multiple of 32 (else std::invalid_argument).
//  - Q8_0: d = max|x| / 127, q = round(x / d).
//  - Q4_0: d = (the value of largest magnitude, with its sign) / -8,
//          q = clamp(round(x / d) + 8, 0, 15).
//  - Q4_1: d = (max - min) / 15, m = min, q = clamp(round((x - m) / d), 0, 15).
//  - Q5_0: as Q4_0 with d = maxv / -16, q = clamp(round(x / d) + 16, 0, 31).
//  - Q5_1: as Q4_1 with d = (max - min) / 31, q 0..31.
//  - IQ4_NL: d = maxv / -127, q = the level nearest to x / d.
//  - MXFP4: e = floor(log2 max|x|) - 2 + 127 (clamped to 0..254; 0 for a zero block),
//    q = the level of kMxfp4Values nearest to x / 2^(e - 128).
//  - Q2_K / Q4_K / Q5_K: per sub-block (16 / 32 / 32 elements) the range [min(x, 0), max(x)]
//    in 3 / 15 / 31 steps; the steps and -min(x, 0) quantized against d = max step / 15 (Q2_K)
//    or / 63, dmin likewise; q = clamp(round((x + min) / step), 0, qmax).
//  - Q3_K / Q6_K: per sub-block of 16 a signed scale maxv / -4 (/ -32), quantized against
//    d = (signed largest scale) / -32 (/ -128); q = clamp(round(x / step), -4, 3) (-32, 31).
//  - Q8_K: as Q8_0 over 256 elements with an f32 d; bsums the sums of 16 codes.
// k-quants need n to be a multiple of 256.
// d and m are stored as fp16; an all-zero block gets d = 0 and q = 0 (Q4_0: q = 8).
std::vector<uint8_t> quantize_reference(TensorType t, const float *x, int64_t n);

// Decodes `n` elements of type `t` from `data`.
std::vector<float> dequantize_reference(TensorType t, const uint8_t *data, int64_t n);

}  // namespace llmkv
