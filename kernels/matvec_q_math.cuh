// The arithmetic of one output of launch_matvec_q (matvec_q.cu), written once for the device
// kernel and for its host twin, so that a machine without a GPU checks the very operations
// the kernel performs (tests/gpu/matvec_host_test.cpp) and a GPU run checks the kernel
// against the twin bit for bit (tests/gpu/dequant_test.cpp).
//
// y = sum over c of W[c] * x[c] for one packed weight row W and one f32 activation row x:
// the row is cut into 8-element groups (a group never straddles a block: blocks are 1, 32 or
// 256 elements); lane k of a 32-lane warp takes groups k, k + 32, ..., decodes each group's 8
// weights with dequant_formats.cuh (exactly the CPU reference's values) and accumulates
// s = fma(w[i], x[i], s) for i = 0..7, in order; the warp then adds its lanes with a
// butterfly (lane l adds lane l ^ o, o = 16, 8, 4, 2, 1) and lane 0 holds y. Every step is
// one IEEE f32 operation with round to nearest (FMA on both sides), so host and device agree
// bit for bit. A result depends only on its weight row and activation row.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "dequant_formats.cuh"

namespace llmkv::mv {

constexpr uint32_t kLanes = 32;      // a warp
constexpr uint32_t kGroupElems = 8;  // weights one lane decodes per step

// One rounding: a * b + c (fused multiply-add on both sides).
LLMKV_DQ_FN float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

// The 8 weights of group g (elements 8g .. 8g + 7) of a packed row of type T.
template <TensorType T>
LLMKV_DQ_FN void decode_group8(const uint8_t *row, uint32_t g, float (&w)[kGroupElems]) {
    const uint64_t e0 = uint64_t(kGroupElems) * g;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t i = 0; i < kGroupElems; ++i) w[i] = dq::decode_at<T>(row, e0 + i);
}

// s + w[0] x[0] + ... + w[7] x[7], one FMA per term in index order.
LLMKV_DQ_FN float fma8(const float (&w)[kGroupElems], const float (&x)[kGroupElems], float s) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t i = 0; i < kGroupElems; ++i) s = fma_rn(w[i], x[i], s);
    return s;
}

// True when launch_matvec_q reads rows of this type and length: a type with a decoder,
// cols a whole number of its blocks and of 8-element groups.
inline bool row_supported(TensorType type, uint64_t cols) {
    if (cols == 0 || cols % kGroupElems != 0) return false;
    switch (type) {
#define LLMKV_MV_CASE(name) \
    case TensorType::name:  \
        return cols % dq::Format<TensorType::name>::kElems == 0;
        LLMKV_DQ_TYPES(LLMKV_MV_CASE)
#undef LLMKV_MV_CASE
    }
    return false;
}

// ---- the host twin ------------------------------------------------------------------------

// The kernel's result for one packed row (cols elements) and one activation row x, computed
// on the host with the kernel's operations in the kernel's order.
template <TensorType T>
inline float row_dot_host(const uint8_t *row, uint32_t cols, const float *x) {
    float lane[kLanes];
    const uint32_t n_groups = cols / kGroupElems;
    for (uint32_t l = 0; l < kLanes; ++l) {
        float s = 0.0f;
        for (uint32_t g = l; g < n_groups; g += kLanes) {
            float w[kGroupElems], xv[kGroupElems];
            decode_group8<T>(row, g, w);
            for (uint32_t i = 0; i < kGroupElems; ++i) xv[i] = x[size_t(g) * kGroupElems + i];
            s = fma8(w, xv, s);
        }
        lane[l] = s;
    }
    for (uint32_t o = kLanes / 2; o > 0; o /= 2) {  // __shfl_xor_sync: every lane at once
        float next[kLanes];
        for (uint32_t l = 0; l < kLanes; ++l) next[l] = lane[l] + lane[l ^ o];
        for (uint32_t l = 0; l < kLanes; ++l) lane[l] = next[l];
    }
    return lane[0];
}

// row_dot_host for a run-time type; false when row_supported(type, cols) is false.
inline bool row_dot_host(TensorType type, const uint8_t *row, uint32_t cols, const float *x,
                         float *y) {
    if (!row_supported(type, cols)) return false;
    switch (type) {
#define LLMKV_MV_CASE(name)                                \
    case TensorType::name:                                 \
        *y = row_dot_host<TensorType::name>(row, cols, x); \
        return true;
        LLMKV_DQ_TYPES(LLMKV_MV_CASE)
#undef LLMKV_MV_CASE
    }
    return false;
}

}  // namespace llmkv::mv
