// Paged attention on the CPU: per (span, query, head) a two-pass softmax over the visible
// positions (all earlier ones, or the last `window` with a sliding window): sealed blocks
// through the block table (read in their codec, rotated codecs via
// H q and H applied once to the sealed V sum), then the session's fp16 window. Long
// contexts are cut into fixed-size partitions computed in parallel and combined in order.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_features.h"
#include "common/error.h"
#include "common/float_math.h"
#include "common/half.h"
#include "kv/hadamard.h"

namespace llmkv::cpu {

namespace kernels {

namespace {

// Single-head portable kernels; the exported forms loop over the heads.

void dot_f16(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    // rows: fp16 [n][d]
    for (uint32_t t = 0; t < n; ++t) {
        float acc = 0.0f;
        for (uint32_t i = 0; i < d; ++i) acc += q[i] * fp16_to_fp32(rows[size_t(t) * d + i]);
        scores[t] = acc;
    }
}
void dot_bf16(const float *q, const uint16_t *rows, uint32_t n, uint32_t d, float *scores) {
    // rows: bf16 [n][d]
    for (uint32_t t = 0; t < n; ++t) {
        float acc = 0.0f;
        for (uint32_t i = 0; i < d; ++i) acc += q[i] * bf16_to_fp32(rows[size_t(t) * d + i]);
        scores[t] = acc;
    }
}
void dot_i8(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores) {
    // head: int8 [n][d], fp16 scale [n]
    const uint8_t *scales = head + size_t(n) * d;
    for (uint32_t t = 0; t < n; ++t) {
        const int8_t *r = reinterpret_cast<const int8_t *>(head) + size_t(t) * d;
        float acc = 0.0f;
        for (uint32_t i = 0; i < d; ++i) acc += q[i] * float(r[i]);
        scores[t] = acc * load_fp16(scales + size_t(t) * 2);
    }
}
void dot_fp8(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores) {
    // head: e4m3fn [n][d], fp16 scale [n]
    const uint8_t *scales = head + size_t(n) * d;
    const float *table = fp8_e4m3_table();
    for (uint32_t t = 0; t < n; ++t) {
        const uint8_t *r = head + size_t(t) * d;
        float acc = 0.0f;
        for (uint32_t i = 0; i < d; ++i) acc += q[i] * table[r[i]];
        scores[t] = acc * load_fp16(scales + size_t(t) * 2);
    }
}
template <llmkv_kv_dtype DT>
void dot_i4k(const float *q, const uint8_t *head, uint32_t n, uint32_t d, float *scores) {
    // head: nibbles [n][d/2] and the scales / mins of an int4 or compact int4 K head
    float *sc = kernels::int4_param_scratch(2 * size_t(d)), *mn = sc + d;  // f32 [d] each
    int4_k_params(DT, head, n, d, sc, mn);
    constexpr uint32_t kChunk = 256;  // channels per pass: q * scale lives on the stack
    float qs[kChunk];                 // f32 [chunk]: q_d * s_d
    float qz = 0.0f;
    for (uint32_t t = 0; t < n; ++t) scores[t] = 0.0f;
    for (uint32_t c0 = 0; c0 < d; c0 += kChunk) {
        const uint32_t len = std::min(d - c0, kChunk);
        for (uint32_t i = 0; i < len; ++i) {
            qs[i] = q[c0 + i] * sc[c0 + i];
            qz += q[c0 + i] * mn[c0 + i];
        }
        for (uint32_t t = 0; t < n; ++t) {
            const uint8_t *r = head + (size_t(t) * d + c0) / 2;
            float acc = 0.0f;
            for (uint32_t i = 0; i < len; i += 2) {
                acc += qs[i] * float(r[i / 2] & 0x0Fu);
                acc += qs[i + 1] * float(r[i / 2] >> 4);
            }
            scores[t] += acc;
        }
    }
    for (uint32_t t = 0; t < n; ++t) scores[t] += qz;
}

void axpy_f16(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    // rows: fp16 [n][d]
    for (uint32_t t = 0; t < n; ++t) {
        for (uint32_t i = 0; i < d; ++i) out[i] += w[t] * fp16_to_fp32(rows[size_t(t) * d + i]);
    }
}
void axpy_bf16(const float *w, const uint16_t *rows, uint32_t n, uint32_t d, float *out) {
    // rows: bf16 [n][d]
    for (uint32_t t = 0; t < n; ++t) {
        for (uint32_t i = 0; i < d; ++i) out[i] += w[t] * bf16_to_fp32(rows[size_t(t) * d + i]);
    }
}
void axpy_i8(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out) {
    // head: int8 [n][d], fp16 scale [n]
    const uint8_t *scales = head + size_t(n) * d;
    for (uint32_t t = 0; t < n; ++t) {
        const int8_t *r = reinterpret_cast<const int8_t *>(head) + size_t(t) * d;
        const float ws = w[t] * load_fp16(scales + size_t(t) * 2);
        for (uint32_t i = 0; i < d; ++i) out[i] += ws * float(r[i]);
    }
}
void axpy_fp8(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out) {
    // head: e4m3fn [n][d], fp16 scale [n]
    const uint8_t *scales = head + size_t(n) * d;
    const float *table = fp8_e4m3_table();
    for (uint32_t t = 0; t < n; ++t) {
        const uint8_t *r = head + size_t(t) * d;
        const float ws = w[t] * load_fp16(scales + size_t(t) * 2);
        for (uint32_t i = 0; i < d; ++i) out[i] += ws * table[r[i]];
    }
}
template <llmkv_kv_dtype DT>
void axpy_i4v(const float *w, const uint8_t *head, uint32_t n, uint32_t d, float *out) {
    // head: nibbles [n][d/2] and the (token, group) scales / mins of an int4 or compact int4 V head
    const uint32_t G = int4_group(DT, d), ng = d / G;
    float *sc = kernels::int4_param_scratch(2 * size_t(n) * ng), *mn = sc + size_t(n) * ng;
    int4_v_params(DT, head, n, d, sc, mn);
    for (uint32_t g = 0; g < ng; ++g) {
        float bias = 0.0f;
        float *o = out + size_t(g) * G;
        for (uint32_t t = 0; t < n; ++t) {
            const size_t gi = size_t(t) * ng + g;
            const float ws = w[t] * sc[gi];
            bias += w[t] * mn[gi];
            const uint8_t *r = head + (size_t(t) * d + size_t(g) * G) / 2;
            for (uint32_t i = 0; i < G; i += 2) {
                o[i] += ws * float(r[i / 2] & 0x0Fu);
                o[i + 1] += ws * float(r[i / 2] >> 4);
            }
        }
        for (uint32_t i = 0; i < G; ++i) o[i] += bias;
    }
}

}  // namespace

#define LLMKV_PORTABLE_HEADS(name, kernel, Row)                                            \
    void name(uint32_t nh, const float *const *x, const Row *rows, uint32_t n, uint32_t d, \
              float *const *y) {                                                           \
        for (uint32_t h = 0; h < nh; ++h) kernel(x[h], rows, n, d, y[h]);                  \
    }
LLMKV_PORTABLE_HEADS(dot_rows_f16_portable, dot_f16, uint16_t)
LLMKV_PORTABLE_HEADS(dot_rows_bf16_portable, dot_bf16, uint16_t)
LLMKV_PORTABLE_HEADS(dot_rows_i8_portable, dot_i8, uint8_t)
LLMKV_PORTABLE_HEADS(dot_rows_fp8_portable, dot_fp8, uint8_t)
LLMKV_PORTABLE_HEADS(dot_rows_i4k_portable, dot_i4k<LLMKV_KV_INT4>, uint8_t)
LLMKV_PORTABLE_HEADS(dot_rows_i4ck_portable, dot_i4k<LLMKV_KV_INT4_COMPACT>, uint8_t)
LLMKV_PORTABLE_HEADS(axpy_rows_f16_portable, axpy_f16, uint16_t)
LLMKV_PORTABLE_HEADS(axpy_rows_bf16_portable, axpy_bf16, uint16_t)
LLMKV_PORTABLE_HEADS(axpy_rows_i8_portable, axpy_i8, uint8_t)
LLMKV_PORTABLE_HEADS(axpy_rows_fp8_portable, axpy_fp8, uint8_t)
LLMKV_PORTABLE_HEADS(axpy_rows_i4v_portable, axpy_i4v<LLMKV_KV_INT4>, uint8_t)
LLMKV_PORTABLE_HEADS(axpy_rows_i4cv_portable, axpy_i4v<LLMKV_KV_INT4_COMPACT>, uint8_t)

float *int4_param_scratch(size_t n) {
    thread_local std::vector<float> v;
    if (v.size() < n) v.resize(n);
    return v.data();
}
#undef LLMKV_PORTABLE_HEADS

float softmax_partial_portable(float *x, uint32_t n, float scale, float *max_out) {  // x: f32 [n]
    float max_score = -INFINITY;
    for (uint32_t t = 0; t < n; ++t) {
        x[t] *= scale;
        max_score = std::max(max_score, x[t]);
    }
    float sum = 0.0f;
    for (uint32_t t = 0; t < n; ++t) {
        x[t] = exp_float(x[t] - max_score);
        sum += x[t];
    }
    *max_out = max_score;
    return sum;
}

void softmax_portable(float *x, uint32_t n, float scale) {  // x: f32 [n]
    float max_score;
    const float sum = softmax_partial_portable(x, n, scale, &max_score);
    const float inv = 1.0f / sum;
    for (uint32_t t = 0; t < n; ++t) x[t] *= inv;
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

// Kernels over nh heads sharing one K/V head, with the head given as bytes.
using RowsFn = void (*)(uint32_t, const float *const *, const uint8_t *, uint32_t, uint32_t,
                        float *const *);
using SoftmaxFn = void (*)(float *, uint32_t, float);
using PartialSoftmaxFn = float (*)(float *, uint32_t, float, float *);

template <void (*F)(uint32_t, const float *const *, const uint16_t *, uint32_t, uint32_t,
                    float *const *)>
void as_bytes(uint32_t nh, const float *const *x, const uint8_t *head, uint32_t n, uint32_t d,
              float *const *y) {
    F(nh, x, reinterpret_cast<const uint16_t *>(head), n, d, y);  // head: 16-bit [n][d]
}

RowsFn score_kernel(llmkv_kv_dtype dtype, bool avx2) {
#if defined(__x86_64__)
    if (avx2) {
        switch (dtype) {
            case LLMKV_KV_F16:
                return as_bytes<kernels::dot_rows_f16_avx2>;
            case LLMKV_KV_BF16:
                return as_bytes<kernels::dot_rows_bf16_avx2>;
            case LLMKV_KV_FP8_E4M3:
                return kernels::dot_rows_fp8_avx2;
            case LLMKV_KV_INT8:
                return kernels::dot_rows_i8_avx2;
            case LLMKV_KV_INT4:
                return kernels::dot_rows_i4k_avx2;
            case LLMKV_KV_INT4_COMPACT:
                return kernels::dot_rows_i4ck_avx2;
        }
    }
#endif
    (void)avx2;
    switch (dtype) {
        case LLMKV_KV_F16:
            return as_bytes<kernels::dot_rows_f16_portable>;
        case LLMKV_KV_BF16:
            return as_bytes<kernels::dot_rows_bf16_portable>;
        case LLMKV_KV_FP8_E4M3:
            return kernels::dot_rows_fp8_portable;
        case LLMKV_KV_INT8:
            return kernels::dot_rows_i8_portable;
        case LLMKV_KV_INT4:
            return kernels::dot_rows_i4k_portable;
        case LLMKV_KV_INT4_COMPACT:
            return kernels::dot_rows_i4ck_portable;
    }
    fail(LLMKV_ERR_UNSUPPORTED, "attention over KV dtype %d", int(dtype));
}

RowsFn accumulate_kernel(llmkv_kv_dtype dtype, bool avx2) {
#if defined(__x86_64__)
    if (avx2) {
        switch (dtype) {
            case LLMKV_KV_F16:
                return as_bytes<kernels::axpy_rows_f16_avx2>;
            case LLMKV_KV_BF16:
                return as_bytes<kernels::axpy_rows_bf16_avx2>;
            case LLMKV_KV_FP8_E4M3:
                return kernels::axpy_rows_fp8_avx2;
            case LLMKV_KV_INT8:
                return kernels::axpy_rows_i8_avx2;
            case LLMKV_KV_INT4:
                return kernels::axpy_rows_i4v_avx2;
            case LLMKV_KV_INT4_COMPACT:
                return kernels::axpy_rows_i4cv_avx2;
        }
    }
#endif
    (void)avx2;
    switch (dtype) {
        case LLMKV_KV_F16:
            return as_bytes<kernels::axpy_rows_f16_portable>;
        case LLMKV_KV_BF16:
            return as_bytes<kernels::axpy_rows_bf16_portable>;
        case LLMKV_KV_FP8_E4M3:
            return kernels::axpy_rows_fp8_portable;
        case LLMKV_KV_INT8:
            return kernels::axpy_rows_i8_portable;
        case LLMKV_KV_INT4:
            return kernels::axpy_rows_i4v_portable;
        case LLMKV_KV_INT4_COMPACT:
            return kernels::axpy_rows_i4cv_portable;
    }
    fail(LLMKV_ERR_UNSUPPORTED, "attention over KV dtype %d", int(dtype));
}

SoftmaxFn softmax_kernel(bool avx2) {
#if defined(__x86_64__)
    if (avx2) return kernels::softmax_avx2;
#endif
    (void)avx2;
    return kernels::softmax_portable;
}

PartialSoftmaxFn partial_softmax_kernel(bool avx2) {
#if defined(__x86_64__)
    if (avx2) return kernels::softmax_partial_avx2;
#endif
    (void)avx2;
    return kernels::softmax_partial_portable;
}

void check_codecs(const KvGeometry &g, const AttentionCodecs &c) {
    if (c.k.dtype != g.dtype_k || c.v.dtype != g.dtype_v) {
        fail(LLMKV_ERR_INTERNAL, "attention codecs %s/%s differ from the cache's %s/%s",
             codec_name(c.k.dtype), codec_name(c.v.dtype), codec_name(g.dtype_k),
             codec_name(g.dtype_v));
    }
    if (!codec_supported(c.k, KvRole::K, g.block_tokens, g.head_dim) ||
        !codec_supported(c.v, KvRole::V, g.block_tokens, g.head_dim)) {
        fail(LLMKV_ERR_UNSUPPORTED, "attention over KV codecs %s%s/%s%s with head_dim %u",
             codec_name(c.k.dtype), c.k.rotate ? "+rot" : "", codec_name(c.v.dtype),
             c.v.rotate ? "+rot" : "", g.head_dim);
    }
}

// Software prefetch of one sealed head (the blocks of a session are scattered over the
// pool, so the hardware prefetchers cannot run ahead across them).
constexpr uint32_t kPrefetchBlocks = 4;                      // how many blocks ahead
inline void prefetch_head(const uint8_t *p, size_t bytes) {  // p: one head, `bytes` long
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
    __builtin_prefetch(p + bytes - 1, 0, 3);
}

// Query heads one work item computes together (they share a K/V head).
constexpr uint32_t kMaxItemHeads = 16;

}  // namespace

float *AttentionScratch::scores(unsigned thread, size_t n) {
    if (per_thread_.size() <= thread) per_thread_.resize(thread + 1);
    auto &v = per_thread_[thread].scores;
    if (v.size() < n) v.resize(std::max(n, size_t(4096)));
    return v.data();
}

float *AttentionScratch::partials(size_t n) {
    if (partials_.size() < n) partials_.resize(n);
    return partials_.data();
}

float *AttentionScratch::work(unsigned thread, size_t n) {
    if (per_thread_.size() <= thread) per_thread_.resize(thread + 1);
    auto &v = per_thread_[thread].work;
    if (v.size() < n) v.resize(n);
    return v.data();
}

void head_scores(llmkv_kv_dtype dtype, const float *q, const uint8_t *k_head, uint32_t n,
                 uint32_t head_dim, float *scores) {
    if (!codec_supported(CodecSpec{dtype, false}, KvRole::K, n, head_dim)) {
        fail(LLMKV_ERR_UNSUPPORTED, "attention over KV dtype %s with head_dim %u",
             codec_name(dtype), head_dim);
    }
    score_kernel(dtype, use_avx2(head_dim))(1, &q, k_head, n, head_dim, &scores);
}

void head_accumulate(llmkv_kv_dtype dtype, const float *w, const uint8_t *v_head, uint32_t n,
                     uint32_t head_dim, float *out) {
    if (!codec_supported(CodecSpec{dtype, false}, KvRole::V, n, head_dim)) {
        fail(LLMKV_ERR_UNSUPPORTED, "attention over KV dtype %s with head_dim %u",
             codec_name(dtype), head_dim);
    }
    accumulate_kernel(dtype, use_avx2(head_dim))(1, &w, v_head, n, head_dim, &out);
}

void paged_attention(KvCache &cache, const AttentionParams &params, const AttentionSpan *spans,
                     size_t n_spans, ThreadPool &pool, AttentionScratch &scratch) {
    paged_attention(cache, attention_codecs(cache.geometry()), params, spans, n_spans, pool,
                    scratch);
}

void paged_attention(KvCache &cache, const AttentionCodecs &codecs, const AttentionParams &params,
                     const AttentionSpan *spans, size_t n_spans, ThreadPool &pool,
                     AttentionScratch &scratch) {
    const KvGeometry &g = cache.geometry();
    check_codecs(g, codecs);
    const uint32_t D = g.head_dim;
    const uint32_t B = g.block_tokens;
    const uint32_t group = params.n_heads / g.n_kv_heads;
    const bool avx2 = use_avx2(D);
    const RowsFn score_k = score_kernel(codecs.k.dtype, avx2);
    const RowsFn accumulate_v = accumulate_kernel(codecs.v.dtype, avx2);
    const RowsFn score_window = score_kernel(LLMKV_KV_F16, avx2);
    const RowsFn accumulate_window = accumulate_kernel(LLMKV_KV_F16, avx2);
    const SoftmaxFn softmax = softmax_kernel(avx2);
    const PartialSoftmaxFn softmax_partial = partial_softmax_kernel(avx2);
    const bool rotate_k = codecs.k.rotate, rotate_v = codecs.v.rotate;
    const size_t k_bytes = codec_head_bytes(codecs.k.dtype, KvRole::K, B, D);
    const size_t v_bytes = codec_head_bytes(codecs.v.dtype, KvRole::V, B, D);
    const uint32_t P = attention_partition_tokens(B);  // positions per partition

    // Work units: (span, query, partition). A query's visible positions [lo, p] are read
    // from `base` (the first block read, or lo when only the fp16 window is read) and cut
    // into partitions [base + k P, base + (k + 1) P): fixed by the query's position and
    // the window alone, never by the thread count or the batch. A query with one partition
    // is computed as before partitions existed: one softmax, normalized weights, V summed
    // straight into its output row. Otherwise each partition stores its max, sum of exp and
    // unnormalized V sum per head, and a second pass combines them in partition order.
    std::vector<AttentionScratch::Unit> &units = scratch.units();
    units.clear();
    size_t partial_floats = 0;           // f32 entries of the partial buffer
    const size_t entry = size_t(D) + 2;  // one (head, partition) partial: o [D], m, l
    for (size_t s = 0; s < n_spans; ++s) {
        for (uint32_t i = 0; i < spans[s].n; ++i) {
            const uint32_t p = spans[s].pos0 + i;
            const uint32_t n_sealed = g.sealed_blocks(p);
            const uint32_t lo =
                params.window != 0 && p + 1 > params.window ? p + 1 - params.window : 0;
            const uint32_t j_lo = std::min(lo / B, n_sealed);
            const uint32_t base = j_lo < n_sealed ? j_lo * B : lo;
            const uint32_t n_parts = (p + 1 - base + P - 1) / P;
            for (uint32_t k = 0; k < n_parts; ++k) {
                const uint32_t begin = std::max(base + k * P, lo),
                               end = std::min(base + (k + 1) * P, p + 1);
                units.push_back({uint32_t(s), i, k, n_parts, n_parts > 1 ? partial_floats : 0,
                                 size_t(end - begin) + 32});
            }
            if (n_parts > 1) partial_floats += size_t(params.n_heads) * n_parts * entry;
        }
    }
    // Cost prefix sums over the units (cost ~ positions read, plus a fixed overhead).
    std::vector<size_t> &cost = scratch.span_offsets();
    cost.assign(units.size() + 1, 0);
    for (size_t u = 0; u < units.size(); ++u) cost[u + 1] = cost[u] + units[u].cost;
    const size_t total_cost = cost[units.size()];
    float *partials = scratch.partials(partial_floats);  // [unit row][head][part][D + 2]

    const uint32_t item_heads = std::min(group, kMaxItemHeads);  // most heads computed together
    // Buffers are sized before the threads start (resizing is not thread-safe).
    for (unsigned t = 0; t < pool.size(); ++t) {
        scratch.scores(t, size_t(item_heads) * P);
        scratch.work(t, 2 * size_t(item_heads) * D);
    }

    // Flattened rows (unit, head), split over the threads as contiguous ranges of about
    // equal cost; inside its range a thread computes the heads that share a K/V head
    // together, so each sealed row is read and converted once for all of them. Kernels
    // compute each head exactly the same way whatever heads come along, so neither the
    // thread count nor the grouping changes a bit of the result.
    const uint32_t nq = params.n_heads;
    auto split = [&](unsigned t, unsigned n_threads) -> size_t {  // first flattened row of thread t
        if (t >= n_threads) return units.size() * nq;
        const size_t target = size_t((unsigned __int128)total_cost * t / n_threads);
        const size_t u =
            size_t(std::upper_bound(cost.begin(), cost.end(), target) - cost.begin()) - 1;
        if (u >= units.size()) return units.size() * nq;
        return u * nq + (target - cost[u]) * nq / units[u].cost;
    };

    pool.run([&](unsigned thread, unsigned n_threads) {
        const size_t begin = split(thread, n_threads), end = split(thread + 1, n_threads);
        float *scores = scratch.scores(thread, size_t(item_heads) * P);   // f32 [heads][P]
        float *q_rot = scratch.work(thread, 2 * size_t(item_heads) * D);  // f32 [heads][D]: H q
        float *v_rot = q_rot + size_t(item_heads) * D;  // f32 [heads][D]: sum of H v
        const float *q[kMaxItemHeads];                  // per head: q (unrotated)
        const float *q_k[kMaxItemHeads];                // per head: q in the sealed K domain
        const float *w[kMaxItemHeads];  // per head: softmax weights of the rows being read
        float *sc[kMaxItemHeads];       // per head: scores of the rows being read
        float *acc[kMaxItemHeads];      // per head: where the sealed V sum goes
        float *out[kMaxItemHeads];      // per head: the output row (or the partial's o)
        for (size_t row = begin; row < end;) {
            const AttentionScratch::Unit &un = units[row / nq];
            const AttentionSpan &sp = spans[un.span];
            const uint32_t i = un.query;
            const uint32_t h0 = uint32_t(row % nq);
            const uint32_t kvh = h0 / group;
            // heads [h0, h0 + nh): same K/V head, inside this thread's range
            const uint32_t nh =
                uint32_t(std::min<size_t>({end - row, (kvh + 1) * group - h0, item_heads}));
            row += nh;
            const uint32_t p = sp.pos0 + i;
            const uint32_t n_sealed = g.sealed_blocks(p);  // sealed when the query was computed
            // Visible positions [lo, p]; sealed blocks [j_lo, n_sealed) are read, the ones
            // before j_lo (wholly outside a sliding window) are never touched.
            const uint32_t lo =
                params.window != 0 && p + 1 > params.window ? p + 1 - params.window : 0;
            const uint32_t j_lo0 = std::min(lo / B, n_sealed);
            const uint32_t base = j_lo0 < n_sealed ? j_lo0 * B : lo;
            // This unit's partition: positions [ps, pe) (ps a block boundary when blocks are read).
            const uint32_t ps = base + un.part * P, pe = std::min(base + (un.part + 1) * P, p + 1);
            const uint32_t vis = std::max(ps, lo);  // first visible position in it
            const uint32_t j_lo = std::max(j_lo0, std::min(ps / B, n_sealed));
            const uint32_t j_hi = std::min(n_sealed, std::max(j_lo, (pe + B - 1) / B));
            const bool reads_sealed = j_lo < j_hi;
            const bool single = un.n_parts == 1;
            // KV sink: position 0 comes from the tail's fp16 sink rows, not sealed block 0.
            const bool use_sink = sp.sink != nullptr && lo == 0 && ps == 0 && reads_sealed;
            for (uint32_t h = 0; h < nh; ++h) {
                q[h] = sp.q + size_t(i) * params.q_stride + size_t(h0 + h) * D;
                out[h] = single ? sp.out + size_t(i) * params.out_stride + size_t(h0 + h) * D
                                : partials + un.partial +
                                      (size_t(h0 + h) * un.n_parts + un.part) * entry;
                q_k[h] = q[h];
                if (rotate_k && reads_sealed) {
                    float *r = q_rot + size_t(h) * D;
                    std::memcpy(r, q[h], D * sizeof(float));
                    hadamard_transform(r, D);
                    q_k[h] = r;
                }
            }
            const size_t k_off = g.sealed_k_offset(params.layer, kvh);
            const size_t v_off = g.sealed_v_offset(params.layer, kvh);
            // scores of position x of this partition: scores[h * P + (x - ps)]

            // Scores: sealed blocks in their codec, then the fp16 window.
            for (uint32_t j = j_lo; j < std::min(j_hi, j_lo + kPrefetchBlocks); ++j) {
                prefetch_head(sp.block(cache, params.layer, j) + k_off, k_bytes);
            }
            for (uint32_t j = j_lo; j < j_hi; ++j) {
                if (j + kPrefetchBlocks < j_hi) {
                    prefetch_head(sp.block(cache, params.layer, j + kPrefetchBlocks) + k_off,
                                  k_bytes);
                }
                for (uint32_t h = 0; h < nh; ++h)
                    sc[h] = scores + size_t(h) * P + (size_t(j) * B - ps);
                score_k(nh, q_k, sp.block(cache, params.layer, j) + k_off, B, D, sc);
            }
            const uint16_t *sink_k = nullptr, *sink_v = nullptr;
            if (use_sink) {
                sink_k = reinterpret_cast<const uint16_t *>(
                    sp.sink + g.tail_sink_k_offset(params.layer, kvh));
                sink_v = reinterpret_cast<const uint16_t *>(
                    sp.sink + g.tail_sink_v_offset(params.layer, kvh));
                for (uint32_t h = 0; h < nh; ++h)
                    sc[h] = scores + size_t(h) * P;  // position 0 (ps == 0)
                score_window(nh, q, reinterpret_cast<const uint8_t *>(sink_k), 1, D, sc);
            }
            // Window rows of this partition: [first, pe), possibly none.
            const uint32_t first = std::max({n_sealed * B, lo, ps});
            const uint32_t n_window = pe > first ? pe - first : 0;
            const uint16_t *wk =
                sp.window_k + (size_t(kvh) * sp.window_capacity + (first - sp.window_start)) * D;
            const uint16_t *wv =
                sp.window_v + (size_t(kvh) * sp.window_capacity + (first - sp.window_start)) * D;
            if (n_window > 0) {
                for (uint32_t h = 0; h < nh; ++h) sc[h] = scores + size_t(h) * P + (first - ps);
                score_window(nh, q, reinterpret_cast<const uint8_t *>(wk), n_window, D, sc);
            }

            for (uint32_t h = 0; h < nh; ++h) {
                float *s_h = scores + size_t(h) * P;
                if (single && params.sinks) {  // the sink joins the denominator
                    float m;
                    float *x = s_h + (vis - ps);
                    const uint32_t n = pe - vis;
                    const float sum = softmax_partial(x, n, params.scale, &m);
                    const float inv = 1.0f / (sum + exp_float(params.sinks[h0 + h] - m));
                    for (uint32_t t = 0; t < n; ++t) x[t] *= inv;
                } else if (single) {
                    softmax(s_h + (vis - ps), pe - vis, params.scale);
                } else {
                    float *ml = out[h] + D;  // m, l after the partial's o
                    ml[1] = softmax_partial(s_h + (vis - ps), pe - vis, params.scale, &ml[0]);
                }
                // Rows of the first sealed block read that lie before the window weigh 0.
                if (reads_sealed) std::fill(s_h, s_h + (vis - ps), 0.0f);
            }
            float w_sink[kMaxItemHeads];  // per head: position 0's weight (the sealed copy's is 0)
            if (use_sink) {
                for (uint32_t h = 0; h < nh; ++h) {
                    w_sink[h] = scores[size_t(h) * P];
                    scores[size_t(h) * P] = 0.0f;
                }
            }

            // Sealed V: straight into out, or into the rotated sums that H maps back.
            const bool rotated = rotate_v && reads_sealed;
            for (uint32_t h = 0; h < nh; ++h) {
                acc[h] = rotated ? v_rot + size_t(h) * D : out[h];
                std::memset(acc[h], 0, D * sizeof(float));
            }
            for (uint32_t j = j_lo; j < std::min(j_hi, j_lo + kPrefetchBlocks); ++j) {
                prefetch_head(sp.block(cache, params.layer, j) + v_off, v_bytes);
            }
            for (uint32_t j = j_lo; j < j_hi; ++j) {
                if (j + kPrefetchBlocks < j_hi) {
                    prefetch_head(sp.block(cache, params.layer, j + kPrefetchBlocks) + v_off,
                                  v_bytes);
                }
                for (uint32_t h = 0; h < nh; ++h)
                    w[h] = scores + size_t(h) * P + (size_t(j) * B - ps);
                accumulate_v(nh, w, sp.block(cache, params.layer, j) + v_off, B, D, acc);
            }
            if (rotated) {
                for (uint32_t h = 0; h < nh; ++h) {
                    hadamard_transform(acc[h], D);  // H^T = H
                    std::memcpy(out[h], acc[h], D * sizeof(float));
                }
            }
            if (use_sink) {
                for (uint32_t h = 0; h < nh; ++h) w[h] = &w_sink[h];
                accumulate_window(nh, w, reinterpret_cast<const uint8_t *>(sink_v), 1, D, out);
            }
            if (n_window > 0) {
                for (uint32_t h = 0; h < nh; ++h) w[h] = scores + size_t(h) * P + (first - ps);
                accumulate_window(nh, w, reinterpret_cast<const uint8_t *>(wv), n_window, D, out);
            }
        }
    });

    if (partial_floats == 0) return;
    // Combine the partitions of each multi-partition (query, head), in partition order:
    // M = max_k m_k, c_k = exp(m_k - M), out = (sum_k c_k o_k) / (sum_k c_k l_k).
    // The first unit of each such query carries the offset of its partials.
    std::vector<size_t> &firsts = scratch.combine_units();
    firsts.clear();
    for (size_t u = 0; u < units.size(); ++u) {
        if (units[u].n_parts > 1 && units[u].part == 0) firsts.push_back(u);
    }
    const size_t n_rows = firsts.size() * nq;
    auto combine = [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) {
            const AttentionScratch::Unit &un = units[firsts[r / nq]];
            const uint32_t h = uint32_t(r % nq);
            const AttentionSpan &sp = spans[un.span];
            const float *part = partials + un.partial + size_t(h) * un.n_parts * entry;
            float *o = sp.out + size_t(un.query) * params.out_stride + size_t(h) * D;
            float m = -INFINITY;
            for (uint32_t k = 0; k < un.n_parts; ++k) m = std::max(m, part[k * entry + D]);
            float l = 0.0f;
            std::memset(o, 0, D * sizeof(float));
            for (uint32_t k = 0; k < un.n_parts; ++k) {
                const float *pk = part + k * entry;
                const float c = exp_float(pk[D] - m);
                l += c * pk[D + 1];
                for (uint32_t d = 0; d < D; ++d) o[d] += c * pk[d];
            }
            if (params.sinks) l += exp_float(params.sinks[h] - m);
            const float inv = 1.0f / l;
            for (uint32_t d = 0; d < D; ++d) o[d] *= inv;
        }
    };
    if (n_rows * entry < 4096 || pool.size() == 1) {
        combine(0, n_rows);
    } else {
        pool.parallel_for(n_rows, 1, combine);
    }
}

void paged_attention_reference(KvCache &cache, const AttentionParams &params,
                               const AttentionSpan *spans, size_t n_spans) {
    paged_attention_reference(cache, attention_codecs(cache.geometry()), params, spans, n_spans);
}

void paged_attention_reference(KvCache &cache, const AttentionCodecs &codecs,
                               const AttentionParams &params, const AttentionSpan *spans,
                               size_t n_spans) {
    const KvGeometry &g = cache.geometry();
    check_codecs(g, codecs);
    const uint32_t D = g.head_dim;
    const uint32_t B = g.block_tokens;
    const uint32_t group = params.n_heads / g.n_kv_heads;
    for (size_t s = 0; s < n_spans; ++s) {
        const AttentionSpan &sp = spans[s];
        for (uint32_t i = 0; i < sp.n; ++i) {
            uint32_t p = sp.pos0 + i;
            const uint32_t lo =
                params.window != 0 && p + 1 > params.window ? p + 1 - params.window : 0;
            for (uint32_t h = 0; h < params.n_heads; ++h) {
                uint32_t kvh = h / group;
                std::vector<float> keys(size_t(p + 1) * D), values(size_t(p + 1) * D);
                uint32_t n_sealed = g.sealed_blocks(p);
                for (uint32_t j = lo / B; j < n_sealed; ++j) {
                    const uint8_t *blk = sp.block(cache, params.layer, j);
                    codec_decode_head(codecs.k, KvRole::K,
                                      blk + g.sealed_k_offset(params.layer, kvh), B, D,
                                      keys.data() + size_t(j) * B * D);
                    codec_decode_head(codecs.v, KvRole::V,
                                      blk + g.sealed_v_offset(params.layer, kvh), B, D,
                                      values.data() + size_t(j) * B * D);
                }
                if (sp.sink && lo == 0 && n_sealed > 0) {  // KV sink: position 0 from the tail
                    const uint8_t *sk = sp.sink + g.tail_sink_k_offset(params.layer, kvh);
                    const uint8_t *sv = sp.sink + g.tail_sink_v_offset(params.layer, kvh);
                    for (uint32_t d = 0; d < D; ++d) {
                        keys[d] = load_fp16(sk + size_t(d) * 2);
                        values[d] = load_fp16(sv + size_t(d) * 2);
                    }
                }
                for (uint32_t t = std::max(n_sealed * B, lo); t <= p; ++t) {
                    size_t w = size_t(kvh) * sp.window_capacity + (t - sp.window_start);
                    for (uint32_t d = 0; d < D; ++d) {
                        keys[size_t(t) * D + d] = fp16_to_fp32(sp.window_k[w * D + d]);
                        values[size_t(t) * D + d] = fp16_to_fp32(sp.window_v[w * D + d]);
                    }
                }
                const float *q = sp.q + size_t(i) * params.q_stride + size_t(h) * D;
                std::vector<double> sc(p + 1, 0.0);
                double mx = -INFINITY;
                for (uint32_t t = lo; t <= p; ++t) {
                    double acc = 0;
                    for (uint32_t d = 0; d < D; ++d) acc += double(q[d]) * keys[size_t(t) * D + d];
                    sc[t] = acc * params.scale;
                    mx = std::max(mx, sc[t]);
                }
                if (params.sinks) mx = std::max(mx, double(params.sinks[h]));
                double sum = 0;
                for (uint32_t t = lo; t <= p; ++t) sum += (sc[t] = exp_double(sc[t] - mx));
                if (params.sinks) sum += exp_double(double(params.sinks[h]) - mx);
                float *out = sp.out + size_t(i) * params.out_stride + size_t(h) * D;
                for (uint32_t d = 0; d < D; ++d) {
                    double acc = 0;
                    for (uint32_t t = lo; t <= p; ++t) acc += sc[t] * values[size_t(t) * D + d];
                    out[d] = float(acc / sum);
                }
            }
        }
    }
}

}  // namespace llmkv::cpu
