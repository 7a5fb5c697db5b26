// Internal row kernels of CPU attention: a portable version and an AVX2/FMA/F16C version of
// each, over fp16 / bf16 rows and over sealed heads in the quantized codecs of kv/codec.h
// (dequantized in registers; the per-token / per-channel scales are folded into q or w).
#pragma once

#include <cstdint>

namespace llmkv::cpu::kernels {

// ---- K: scores[t] = dot(q, K[t]) for t < n ---------------------------------------------
// q: f32 [d]; scores: f32 [n].
// rows: fp16 or bf16 [n][d].
void dot_rows_f16_portable(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores);
void dot_rows_bf16_portable(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores);
// head: int8 [n][d], then fp16 scale [n]  (K[t] = scale[t] * int8 row)
void dot_rows_i8_portable(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores);
// head: e4m3fn [n][d], then fp16 scale [n]  (K[t] = scale[t] * e4m3 row)
void dot_rows_fp8_portable(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores);
// head: int4 K layout: nibbles [n][d/2], fp16 scale [d], fp16 min [d]  (n = the block's
// token count, d % 16 == 0). Computed as sum_d (q_d s_d) nib_td + sum_d q_d z_d.
void dot_rows_i4k_portable(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores);

// ---- V: out += sum_t w[t] * V[t] -------------------------------------------------------
// w: f32 [n]; out: f32 [d].
void axpy_rows_f16_portable(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out);
void axpy_rows_bf16_portable(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out);
// head: int8 [n][d], fp16 scale [n]
void axpy_rows_i8_portable(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out);
// head: e4m3fn [n][d], fp16 scale [n]
void axpy_rows_fp8_portable(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out);
// head: int4 V layout: nibbles [n][d/2], fp16 scale [n][d/G], fp16 min [n][d/G], G = 32
// (16 when d % 32 != 0). Computed per group as sum_t (w_t s_tg) nib_td + sum_t w_t z_tg.
void axpy_rows_i4v_portable(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out);

#if defined(__x86_64__)
// Same contracts; require d % 8 == 0 (d % 16 == 0 for int4) and cpu_has_avx2().
void dot_rows_f16_avx2(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores);
void dot_rows_bf16_avx2(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores);
void dot_rows_i8_avx2(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores);
void dot_rows_fp8_avx2(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores);
void dot_rows_i4k_avx2(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores);
void axpy_rows_f16_avx2(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out);
void axpy_rows_bf16_avx2(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out);
void axpy_rows_i8_avx2(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out);
void axpy_rows_fp8_avx2(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out);
void axpy_rows_i4v_avx2(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out);
// dst[i] = fp16(src[i]) for i < n, round to nearest even (n % 8 == 0).
void f32_to_f16_avx2(const float *src, uint16_t *dst, uint32_t n);
#endif

}  // namespace llmkv::cpu::kernels
