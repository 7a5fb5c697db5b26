// Internal row kernels of CPU attention: a portable version and an AVX2/F16C version.
#pragma once

#include <cstdint>

namespace llmkv::cpu::kernels {

// scores[t] = dot(q, rows[t]) for t < n; rows are fp16 or bf16 [n][d].
void dot_rows_f16_portable(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores);
void dot_rows_bf16_portable(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores);
// out += sum_t w[t] * rows[t]
void axpy_rows_f16_portable(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out);
void axpy_rows_bf16_portable(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out);

#if defined(__x86_64__)
// Require d % 8 == 0 and a CPU with AVX2, FMA and F16C.
void dot_rows_f16_avx2(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores);
void dot_rows_bf16_avx2(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores);
void axpy_rows_f16_avx2(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out);
void axpy_rows_bf16_avx2(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out);
// dst[i] = fp16(src[i]) for i < n, round to nearest even (n % 8 == 0).
void f32_to_f16_avx2(const float *src, uint16_t *dst, uint32_t n);
#endif

}  // namespace llmkv::cpu::kernels
