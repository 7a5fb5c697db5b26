// The gated activations of the feed-forward block, elementwise over n values:
//   SwiGLU: g <- silu(g) * u = g / (1 + e^-g) * u                             (Llama, Qwen, ...)
//   GeGLU:  g <- gelu_tanh(g) * u = g / (1 + e^(-2 sqrt(2/pi) (g + 0.044715 g^3))) * u (Gemma)
// (0.5 g (1 + tanh y) = g / (1 + e^-2y): GeGLU needs no tanh.) The AVX2 kernels and the
// portable ones compute the same bits: the portable exp is the AVX2 exp_ps's scalar twin, with
// its fused multiply-adds through fma_float, so results depend neither on the kernel family nor
// on the C runtime, and each element is computed alone (independent of n and of chunking).
#pragma once

#include <cstddef>

namespace llmkv::cpu::kernels {

using GluFn = void (*)(float *g, const float *u, size_t n);

// exp_ps (exp_avx2.h) on one float, bit for bit.
float exp_fma_portable(float x);

void swiglu_portable(float *g, const float *u, size_t n);
void geglu_portable(float *g, const float *u, size_t n);
#if defined(__x86_64__)
void swiglu_avx2(float *g, const float *u, size_t n);
void geglu_avx2(float *g, const float *u, size_t n);
#endif

// The AVX2 kernel when `avx2` (cpu_has_avx2()), else the portable one.
GluFn swiglu_kernel(bool avx2);
GluFn geglu_kernel(bool avx2);

// -2 sqrt(2/pi), in float: GeGLU's exponent is kGeluExpScale * (g + 0.044715 g^3).
constexpr float kGeluExpScale = -1.5957691216057308f;
constexpr float kGeluCubic = 0.044715f;

}  // namespace llmkv::cpu::kernels
