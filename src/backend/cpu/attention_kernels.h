// Internal row kernels of CPU attention: a portable version and an AVX2/FMA/F16C version of
// each, over fp16 / bf16 rows and over sealed heads in the quantized codecs of kv/codec.h
// (dequantized in registers; the per-token / per-channel scales are folded into q or w).
//
// Every kernel serves nh query heads that share one K/V head (grouped-query attention): the
// rows are read from memory once and each value is converted once for all nh heads. The
// result for one head does not depend on nh or on which other heads come along (the same
// operations in the same order), so batching heads never changes a bit of the output.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmkv::cpu::kernels {

// ---- K: scores[h][t] = dot(q[h], K[t]) for h < nh, t < n -------------------------------
// q: nh pointers to f32 [d]; scores: nh pointers to f32 [n].
// rows: fp16 or bf16 [n][d].
void dot_rows_f16_portable(uint32_t nh, const float *const *q, const uint16_t *rows, uint32_t n,
                           uint32_t d, float *const *scores);
void dot_rows_bf16_portable(uint32_t nh, const float *const *q, const uint16_t *rows, uint32_t n,
                            uint32_t d, float *const *scores);
// head: int8 [n][d], then fp16 scale [n]  (K[t] = scale[t] * int8 row)
void dot_rows_i8_portable(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                          uint32_t d, float *const *scores);
// head: e4m3fn [n][d], then fp16 scale [n]  (K[t] = scale[t] * e4m3 row)
void dot_rows_fp8_portable(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                           uint32_t d, float *const *scores);
// head: int4 K layout: nibbles [n][d/2], fp16 scale [d], fp16 min [d]  (n = the block's
// token count, d % 16 == 0). Computed as sum_d (q_d s_d) nib_td + sum_d q_d z_d.
void dot_rows_i4k_portable(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                           uint32_t d, float *const *scores);
// head: compact int4 K layout (kv/codec.h), computed as int4 K with the scales and mins
// int4_k_params gives.
void dot_rows_i4ck_portable(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                            uint32_t d, float *const *scores);

// ---- V: out[h] += sum_t w[h][t] * V[t] ----------------------------------------------------
// w: nh pointers to f32 [n]; out: nh pointers to f32 [d].
void axpy_rows_f16_portable(uint32_t nh, const float *const *w, const uint16_t *rows, uint32_t n,
                            uint32_t d, float *const *out);
void axpy_rows_bf16_portable(uint32_t nh, const float *const *w, const uint16_t *rows, uint32_t n,
                             uint32_t d, float *const *out);
// head: int8 [n][d], fp16 scale [n]
void axpy_rows_i8_portable(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                           uint32_t d, float *const *out);
// head: e4m3fn [n][d], fp16 scale [n]
void axpy_rows_fp8_portable(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                            uint32_t d, float *const *out);
// head: int4 V layout: nibbles [n][d/2], fp16 scale [n][d/G], fp16 min [n][d/G], G = 32
// (16 when d % 32 != 0). Computed per group as sum_t (w_t s_tg) nib_td + sum_t w_t z_tg.
void axpy_rows_i4v_portable(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                            uint32_t d, float *const *out);
// head: compact int4 V layout (groups of int4c_v_group(d) channels), computed as int4 V.
void axpy_rows_i4cv_portable(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                             uint32_t d, float *const *out);

// Per-thread f32 scratch (grown, never shrunk) for the scales and mins the int4 kernels expand.
float *int4_param_scratch(size_t n);

// ---- softmax: x <- softmax(scale * x) over n values (x: f32 [n], n >= 1) ----------------
void softmax_portable(float *x, uint32_t n, float scale);
// Unnormalized form for one context partition: x <- exp(scale * x - m) with m = max(scale * x);
// stores m in *max_out and returns sum(x). softmax_* is this followed by x *= 1 / sum (the
// same operations, so the two agree bit for bit up to the final scaling).
float softmax_partial_portable(float *x, uint32_t n, float scale, float *max_out);

#if defined(__x86_64__)
// Same contracts; require d % 8 == 0 (d % 16 == 0 for int4) and cpu_has_avx2().
void dot_rows_f16_avx2(uint32_t nh, const float *const *q, const uint16_t *rows, uint32_t n,
                       uint32_t d, float *const *scores);
void dot_rows_bf16_avx2(uint32_t nh, const float *const *q, const uint16_t *rows, uint32_t n,
                        uint32_t d, float *const *scores);
void dot_rows_i8_avx2(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                      uint32_t d, float *const *scores);
void dot_rows_fp8_avx2(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                       uint32_t d, float *const *scores);
void dot_rows_i4k_avx2(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                       uint32_t d, float *const *scores);
void dot_rows_i4ck_avx2(uint32_t nh, const float *const *q, const uint8_t *head, uint32_t n,
                        uint32_t d, float *const *scores);
void axpy_rows_f16_avx2(uint32_t nh, const float *const *w, const uint16_t *rows, uint32_t n,
                        uint32_t d, float *const *out);
void axpy_rows_bf16_avx2(uint32_t nh, const float *const *w, const uint16_t *rows, uint32_t n,
                         uint32_t d, float *const *out);
void axpy_rows_i8_avx2(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                       uint32_t d, float *const *out);
void axpy_rows_fp8_avx2(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                        uint32_t d, float *const *out);
void axpy_rows_i4v_avx2(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                        uint32_t d, float *const *out);
void axpy_rows_i4cv_avx2(uint32_t nh, const float *const *w, const uint8_t *head, uint32_t n,
                         uint32_t d, float *const *out);
// exp via range reduction and a degree-7 polynomial (within 2 ulp of expf for the
// arguments softmax produces; below -87 it returns ~1.6e-38 instead of 0).
void softmax_avx2(float *x, uint32_t n, float scale);
float softmax_partial_avx2(float *x, uint32_t n, float scale, float *max_out);
// dst[i] = fp16(src[i]) for i < n, round to nearest even (n % 8 == 0).
void f32_to_f16_avx2(const float *src, uint16_t *dst, uint32_t n);
#endif

}  // namespace llmkv::cpu::kernels
