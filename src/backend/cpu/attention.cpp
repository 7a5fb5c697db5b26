// Paged attention on the CPU: per (span, query, head) a two-pass softmax over the visible
// positions: sealed blocks through the block table, then the session's fp16 window.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_features.h"
#include "common/error.h"
#include "common/half.h"

namespace llmkv::cpu {

namespace kernels {

void dot_rows_f16_portable(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    for (uint32_t t = 0; t < n; ++t) {
        float acc = 0.0f;
        for (uint32_t i = 0; i < d; ++i) acc += q[i] * fp16_to_fp32(rows[size_t(t) * d + i]);
        scores[t] = acc;
    }
}
void dot_rows_bf16_portable(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    for (uint32_t t = 0; t < n; ++t) {
        float acc = 0.0f;
        for (uint32_t i = 0; i < d; ++i) acc += q[i] * bf16_to_fp32(rows[size_t(t) * d + i]);
        scores[t] = acc;
    }
}
void axpy_rows_f16_portable(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    for (uint32_t t = 0; t < n; ++t) {
        for (uint32_t i = 0; i < d; ++i) out[i] += w[t] * fp16_to_fp32(rows[size_t(t) * d + i]);
    }
}
void axpy_rows_bf16_portable(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    for (uint32_t t = 0; t < n; ++t) {
        for (uint32_t i = 0; i < d; ++i) out[i] += w[t] * bf16_to_fp32(rows[size_t(t) * d + i]);
    }
}

}  // namespace kernels

namespace {

bool use_avx2(uint32_t head_dim) {
#if defined(__x86_64__)
    return head_dim % 8 == 0 && cpu_has_avx2();
#else
    (void)head_dim;
    return false;
#endif
}

void dot_rows(bool fp16, bool avx2, const float *q, const uint16_t *rows, uint32_t n, uint32_t d,
              float *scores) {
#if defined(__x86_64__)
    if (avx2) {
        fp16 ? kernels::dot_rows_f16_avx2(q, rows, n, d, scores)
             : kernels::dot_rows_bf16_avx2(q, rows, n, d, scores);
        return;
    }
#endif
    (void)avx2;
    fp16 ? kernels::dot_rows_f16_portable(q, rows, n, d, scores)
         : kernels::dot_rows_bf16_portable(q, rows, n, d, scores);
}

void axpy_rows(bool fp16, bool avx2, const float *w, const uint16_t *rows, uint32_t n, uint32_t d,
               float *out) {
#if defined(__x86_64__)
    if (avx2) {
        fp16 ? kernels::axpy_rows_f16_avx2(w, rows, n, d, out)
             : kernels::axpy_rows_bf16_avx2(w, rows, n, d, out);
        return;
    }
#endif
    (void)avx2;
    fp16 ? kernels::axpy_rows_f16_portable(w, rows, n, d, out)
         : kernels::axpy_rows_bf16_portable(w, rows, n, d, out);
}

// Index of the span holding flattened item `item`, given prefix sums of items per span.
size_t find_span(const std::vector<size_t> &offsets, size_t item) {
    return size_t(std::upper_bound(offsets.begin(), offsets.end(), item) - offsets.begin()) - 1;
}

}  // namespace

float *AttentionScratch::scores(unsigned thread, size_t n) {
    if (per_thread_.size() <= thread) per_thread_.resize(thread + 1);
    auto &v = per_thread_[thread];
    if (v.size() < n) v.resize(std::max(n, size_t(4096)));
    return v.data();
}

void head_scores(llmkv_kv_dtype dtype, const float *q, const uint8_t *k_head, uint32_t n,
                 uint32_t head_dim, float *scores) {
    const uint16_t *rows = reinterpret_cast<const uint16_t *>(k_head);
    switch (dtype) {
        case LLMKV_KV_F16: dot_rows(true, use_avx2(head_dim), q, rows, n, head_dim, scores); return;
        case LLMKV_KV_BF16: dot_rows(false, use_avx2(head_dim), q, rows, n, head_dim, scores); return;
        default: fail(LLMKV_ERR_UNSUPPORTED, "attention over KV dtype %d", int(dtype));
    }
}

void head_accumulate(llmkv_kv_dtype dtype, const float *w, const uint8_t *v_head, uint32_t n,
                     uint32_t head_dim, float *out) {
    const uint16_t *rows = reinterpret_cast<const uint16_t *>(v_head);
    switch (dtype) {
        case LLMKV_KV_F16: axpy_rows(true, use_avx2(head_dim), w, rows, n, head_dim, out); return;
        case LLMKV_KV_BF16: axpy_rows(false, use_avx2(head_dim), w, rows, n, head_dim, out); return;
        default: fail(LLMKV_ERR_UNSUPPORTED, "attention over KV dtype %d", int(dtype));
    }
}

void paged_attention(KvCache &cache, const AttentionParams &params, const AttentionSpan *spans,
                     size_t n_spans, ThreadPool &pool, AttentionScratch &scratch) {
    const KvGeometry &g = cache.geometry();
    const uint32_t D = g.head_dim;
    const uint32_t B = g.block_tokens;
    const uint32_t group = params.n_heads / g.n_kv_heads;
    const bool avx2 = use_avx2(D);

    std::vector<size_t> offsets(n_spans + 1, 0);
    size_t max_context = 0;
    for (size_t s = 0; s < n_spans; ++s) {
        offsets[s + 1] = offsets[s] + size_t(spans[s].n) * params.n_heads;
        max_context = std::max<size_t>(max_context, spans[s].pos0 + spans[s].n);
    }
    const size_t total = offsets[n_spans];
    // Score buffers are sized before the threads start (resizing is not thread-safe).
    for (unsigned t = 0; t < pool.size(); ++t) scratch.scores(t, max_context);

    pool.run([&](unsigned thread, unsigned n_threads) {
        size_t per = (total + n_threads - 1) / n_threads;
        size_t begin = std::min(total, size_t(thread) * per);
        size_t end = std::min(total, begin + per);
        float *scores = scratch.scores(thread, max_context);
        for (size_t item = begin; item < end; ++item) {
            size_t s = find_span(offsets, item);
            const AttentionSpan &sp = spans[s];
            uint32_t local = uint32_t(item - offsets[s]);
            uint32_t i = local / params.n_heads;
            uint32_t h = local % params.n_heads;
            uint32_t kvh = h / group;
            uint32_t p = sp.pos0 + i;
            uint32_t n_sealed = g.sealed_blocks(p);  // sealed when the query was computed
            const float *q = sp.q + size_t(i) * params.q_stride + size_t(h) * D;
            float *out = sp.out + size_t(i) * params.out_stride + size_t(h) * D;

            for (uint32_t j = 0; j < n_sealed; ++j) {
                const uint8_t *blk = cache.sealed_data(sp.kv->blocks[j]);
                head_scores(g.dtype_k, q, blk + g.sealed_k_offset(params.layer, kvh), B, D,
                            scores + size_t(j) * B);
            }
            uint32_t first = n_sealed * B;  // first position read from the window
            const uint16_t *wk = sp.window_k + (size_t(kvh) * sp.window_capacity +
                                                (first - sp.window_start)) * D;
            const uint16_t *wv = sp.window_v + (size_t(kvh) * sp.window_capacity +
                                                (first - sp.window_start)) * D;
            uint32_t n_window = p - first + 1;
            dot_rows(true, avx2, q, wk, n_window, D, scores + first);

            uint32_t n_ctx = p + 1;
            float max_score = -INFINITY;
            for (uint32_t t = 0; t < n_ctx; ++t) {
                scores[t] *= params.scale;
                max_score = std::max(max_score, scores[t]);
            }
            float sum = 0.0f;
            for (uint32_t t = 0; t < n_ctx; ++t) {
                scores[t] = std::exp(scores[t] - max_score);
                sum += scores[t];
            }
            float inv = 1.0f / sum;
            for (uint32_t t = 0; t < n_ctx; ++t) scores[t] *= inv;

            std::memset(out, 0, D * sizeof(float));
            for (uint32_t j = 0; j < n_sealed; ++j) {
                const uint8_t *blk = cache.sealed_data(sp.kv->blocks[j]);
                head_accumulate(g.dtype_v, scores + size_t(j) * B,
                                blk + g.sealed_v_offset(params.layer, kvh), B, D, out);
            }
            axpy_rows(true, avx2, scores + first, wv, n_window, D, out);
        }
    });
}

void paged_attention_reference(KvCache &cache, const AttentionParams &params,
                               const AttentionSpan *spans, size_t n_spans) {
    const KvGeometry &g = cache.geometry();
    const uint32_t D = g.head_dim;
    const uint32_t B = g.block_tokens;
    const uint32_t group = params.n_heads / g.n_kv_heads;
    std::vector<float> row(size_t(B) * D);
    for (size_t s = 0; s < n_spans; ++s) {
        const AttentionSpan &sp = spans[s];
        for (uint32_t i = 0; i < sp.n; ++i) {
            uint32_t p = sp.pos0 + i;
            for (uint32_t h = 0; h < params.n_heads; ++h) {
                uint32_t kvh = h / group;
                std::vector<float> keys(size_t(p + 1) * D), values(size_t(p + 1) * D);
                uint32_t n_sealed = g.sealed_blocks(p);
                for (uint32_t j = 0; j < n_sealed; ++j) {
                    const uint8_t *blk = cache.sealed_data(sp.kv->blocks[j]);
                    codec_decode_head(g.dtype_k, blk + g.sealed_k_offset(params.layer, kvh), B, D,
                                      keys.data() + size_t(j) * B * D);
                    codec_decode_head(g.dtype_v, blk + g.sealed_v_offset(params.layer, kvh), B, D,
                                      values.data() + size_t(j) * B * D);
                }
                for (uint32_t t = n_sealed * B; t <= p; ++t) {
                    size_t w = size_t(kvh) * sp.window_capacity + (t - sp.window_start);
                    for (uint32_t d = 0; d < D; ++d) {
                        keys[size_t(t) * D + d] = fp16_to_fp32(sp.window_k[w * D + d]);
                        values[size_t(t) * D + d] = fp16_to_fp32(sp.window_v[w * D + d]);
                    }
                }
                const float *q = sp.q + size_t(i) * params.q_stride + size_t(h) * D;
                std::vector<double> sc(p + 1);
                double mx = -INFINITY;
                for (uint32_t t = 0; t <= p; ++t) {
                    double acc = 0;
                    for (uint32_t d = 0; d < D; ++d) acc += double(q[d]) * keys[size_t(t) * D + d];
                    sc[t] = acc * params.scale;
                    mx = std::max(mx, sc[t]);
                }
                double sum = 0;
                for (uint32_t t = 0; t <= p; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
                float *out = sp.out + size_t(i) * params.out_stride + size_t(h) * D;
                for (uint32_t d = 0; d < D; ++d) {
                    double acc = 0;
                    for (uint32_t t = 0; t <= p; ++t) acc += sc[t] * values[size_t(t) * D + d];
                    out[d] = float(acc / sum);
                }
            }
        }
    }
}

}  // namespace llmkv::cpu
