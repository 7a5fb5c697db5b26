// A weight matrix as stored: a 2-D tensor in its GGUF encoding, and the reference decoding of
// its rows (every backend's kernels must agree with it). Below both model/ (which fills it from a
// file) and backend/ (whose kernels read it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/tensor_type.h"

namespace llmkv {

// A 2-D weight tensor as stored in GGUF: `rows` output features, each a row of `cols` input
// features (GGUF dims[0]) encoded in `type`; row r starts at data + r * row_bytes.
struct WeightMatrix {
    TensorType type;
    const void *data;
    int64_t rows;  // output features
    int64_t cols;  // input features = GGUF dims[0]
    size_t row_bytes;
    // Optional backend-specific copy of the same values in the layout its kernels read (the
    // CPU backend's packed copy of the types backend/cpu/matmul_packed.h lists); null: none.
    const void *packed = nullptr;
};

// How a mixture-of-experts layer picks and weighs a token's experts from its router logits
// (one logit per expert): the n_used experts of highest probability, ties to the lower id,
// best first; their weights the probabilities, divided by their sum (clamped below at
// 2^-14, as llama.cpp does) with norm_weights, then multiplied by weight_scale.
struct ExpertRouting {
    enum class Gating : uint8_t {
        kSoftmax,  // probabilities = softmax over all n_expert logits
        // gpt-oss: the n_used highest logits, weighed by the softmax over those n_used
        // logits only (llama.cpp's SOFTMAX_WEIGHT gating)
        kSoftmaxChosen,
    };
    Gating gating = Gating::kSoftmax;
    uint32_t n_expert = 0;
    uint32_t n_used = 0;
    bool norm_weights = false;
    float weight_scale = 1.0f;
};

// Decodes n elements (a multiple of the type's block size) to f32 in plain scalar code:
// exactly the GGUF definition evaluated in f32 (q4_1: nibble * d + m rounded after each
// operation). Throws LLMKV_ERR_UNSUPPORTED for a type it does not know.
void dequantize_row_reference(TensorType type, const void *src, float *dst, int64_t n);

}  // namespace llmkv
