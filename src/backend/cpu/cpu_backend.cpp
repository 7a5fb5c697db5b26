// CpuBackend: the ops of a forward pass on the CPU, and the KV pools in host memory.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/activation.h"
#include "backend/cpu/cpu_features.h"
#include "common/communicator.h"
#include "common/error.h"
#include "common/float_math.h"
#include "common/half.h"
#include "tensor/expert_routing.h"

namespace llmkv {

void rms_norm(const float *x, const float *weight, uint32_t n, float eps, float *out) {
    double ss = 0.0;
    for (uint32_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
    float scale = float(1.0 / std::sqrt(ss / n + eps));
    for (uint32_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

float gelu_tanh(float x) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    const float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanh_float(inner));
}

// Llama's rotary embedding as GGUF stores it: adjacent pairs (v[2i], v[2i+1]) rotate by
// pos * inv_freq[i].
void rope_rotate(float *v, uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim, uint32_t pos,
                 float freq_scale, const float *inv_freq) {
    float p = float(pos) * freq_scale;
    for (uint32_t i = 0; i < rope_dim / 2; ++i) {
        float s, c;
        sincos_float(p * inv_freq[i], s, c);
        for (uint32_t h = 0; h < n_heads; ++h) {
            float *x = v + size_t(h) * head_dim + 2 * i;
            float x0 = x[0], x1 = x[1];
            x[0] = x0 * c - x1 * s;
            x[1] = x0 * s + x1 * c;
        }
    }
}

namespace {

// NeoX-style rotary embedding: pairs (v[i], v[i + rope_dim / 2]).
void rope_rotate_halves(float *v, uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim,
                        uint32_t pos, float freq_scale, const float *inv_freq) {
    const float p = float(pos) * freq_scale;
    const uint32_t half = rope_dim / 2;
    for (uint32_t i = 0; i < half; ++i) {
        float s, c;
        sincos_float(p * inv_freq[i], s, c);
        for (uint32_t h = 0; h < n_heads; ++h) {
            float *x = v + size_t(h) * head_dim;
            float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * c - x1 * s;
            x[i + half] = x0 * s + x1 * c;
        }
    }
}

float *rows(const Tensor &t) {
    return static_cast<float *>(t.data);
}

}  // namespace

CpuBackend::CpuBackend(KvCache &cache, ThreadPool &pool) : cache_(cache), pool_(pool) {}

Tensor CpuBackend::alloc(uint32_t n_rows, uint32_t cols) {
    const size_t n = size_t(n_rows) * cols;
    buffers_.push_back(std::make_unique<float[]>(n));  // value-initialised: zeroed
    buffer_bytes_ += n * sizeof(float);
    return Tensor{buffers_.back().get(), n_rows, cols};
}

void CpuBackend::begin_batch(const std::vector<ForwardSpan> &spans, const BatchShape &shape) {
    const KvGeometry &g = cache_.geometry();
    const uint32_t KVD = g.n_kv_heads * g.head_dim;
    spans_ = &spans;
    shape_ = shape;
    size_t window_rows = 0;
    for (const ForwardSpan &s : spans) window_rows += g.span_window_rows(s.kv->n_tokens, s.n);
    if (window_.size() < window_rows * 2 * KVD) window_.resize(window_rows * 2 * KVD);
    // Per-span window placement and attention descriptors (q and out are set per layer).
    att_.assign(spans.size(), cpu::AttentionSpan{});
    row0_.assign(spans.size(), 0);
    uint32_t row = 0;
    size_t win_off = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
        const ForwardSpan &s = spans[i];
        const uint32_t pos0 = s.kv->n_tokens;
        const uint32_t cap = g.span_window_rows(pos0, s.n);
        cpu::AttentionSpan &a = att_[i];
        a.kv = s.kv;
        a.block_data = s.block_data;
        a.window_k = window_.data() + win_off;
        a.window_v = window_.data() + win_off + size_t(cap) * KVD;
        a.window_start = g.span_window_start(pos0);
        a.window_capacity = cap;
        a.pos0 = pos0;
        a.n = s.n;
        a.sink = g.sink ? cache_.tail_data(s.kv->tail) : nullptr;
        row0_[i] = row;
        row += s.n;
        win_off += size_t(cap) * KVD * 2;
    }
}

void CpuBackend::embed(const WeightMatrix &table, Tensor out) {
    uint32_t row = 0;
    for (const ForwardSpan &s : *spans_) {
        for (uint32_t i = 0; i < s.n; ++i, ++row) {
            const uint8_t *src =
                static_cast<const uint8_t *>(table.data) + size_t(s.tokens[i]) * table.row_bytes;
            cpu::dequantize_row(table.type, src, rows(out) + size_t(row) * out.cols, out.cols);
        }
    }
}

void CpuBackend::rms_norm(Tensor x, const float *weight, float eps, Tensor out) {
    const uint32_t E = x.cols;
    float *xs = rows(x), *os = rows(out);
    pool_.parallel_for(x.rows, 1, [&](size_t b, size_t e) {
        for (size_t t = b; t < e; ++t) llmkv::rms_norm(&xs[t * E], weight, E, eps, &os[t * E]);
    });
}

void CpuBackend::load_weights(const WeightSet &weights) {
    // Matrices of the packed types (matmul_packed.h: Q4_0 / Q4_1 / Q8_0 / Q5_0 / Q5_1 / Q3_K /
    // Q4_K / Q5_K / Q6_K) get the packed copy their kernels read; the mapped file then serves only
    // embedding rows. A matrix listed twice is packed once.
    for (const WeightMatrix *w : weights.matrices) {
        if (w) kernel_revision_ = std::max(kernel_revision_, cpu::matmul_revision(w->type));
        if (!w || !cpu::is_packed_type(w->type) || w->rows == 0) continue;
        const PackedKey key{w->data, w->rows};
        if (packed_.count(key)) continue;
        cpu::PackedWeights p(*w, &pool_);
        packed_bytes_ += p.bytes();
        packed_.emplace(key, std::move(p));
        // The matmuls read only the copy now; embed() still reads rows of a tied embedding in
        // place, and those pages come back from the file as they are touched.
        if (weights.release) weights.release(w->data, size_t(w->rows) * w->row_bytes);
    }
}

WeightMatrix CpuBackend::with_packed(const WeightMatrix &w) const {
    WeightMatrix r = w;
    if (!r.packed && cpu::is_packed_type(w.type)) {
        auto it = packed_.find(PackedKey{w.data, w.rows});
        if (it != packed_.end()) r.packed = it->second.data();
    }
    return r;
}

void CpuBackend::matmul(const WeightMatrix &w, Tensor x, Tensor y) {
    cpu::matmul(with_packed(w), rows(x), x.cols, x.rows, rows(y), y.cols, pool_, matmul_scratch_);
}

void CpuBackend::rope(Tensor x, uint32_t n_heads, uint32_t head_dim, const RopeParams &r) {
    const auto rotate = r.style == RopeParams::Style::kAdjacent ? rope_rotate : rope_rotate_halves;
    for (size_t i = 0; i < spans_->size(); ++i) {
        for (uint32_t t = 0; t < (*spans_)[i].n; ++t) {
            const uint32_t row = row0_[i] + t, pos = att_[i].pos0 + t;
            rotate(rows(x) + size_t(row) * x.cols, n_heads, head_dim, r.rope_dim, pos, r.freq_scale,
                   r.inv_freq);
        }
    }
}

// Builds the span's fp16 window for this layer: rows [window_start, pos0) come from the
// tail slot, rows [pos0, pos0 + n) from the new K/V; then seals every block this span
// completes (layer `layer` only) and writes the trailing partial block back to the tail.
// With the KV sink, a span that computes position 0 also keeps it in the tail's sink rows.
void CpuBackend::write_span_kv(uint32_t layer, size_t span, const float *k, const float *v,
                               uint32_t kv_dim) {
    const KvGeometry &g = cache_.geometry();
    const ForwardSpan &s = (*spans_)[span];
    const cpu::AttentionSpan &a = att_[span];
    const uint32_t B = g.block_tokens, D = g.head_dim, H = g.n_kv_heads;
    const uint32_t pos0 = a.pos0, row0 = row0_[span], win_cap = a.window_capacity;
    const uint32_t ws = g.span_window_start(pos0);
    const uint32_t end = pos0 + s.n;
    const uint32_t sealed_end = g.sealed_blocks(end);
    uint8_t *tail = cache_.tail_data(s.kv->tail);
    uint16_t *win_k = const_cast<uint16_t *>(a.window_k),
             *win_v = const_cast<uint16_t *>(a.window_v);
    for (uint32_t h = 0; h < H; ++h) {
        uint16_t *wk = win_k + size_t(h) * win_cap * D;
        uint16_t *wv = win_v + size_t(h) * win_cap * D;
        size_t old_rows = pos0 - ws;
        if (old_rows) {
            std::memcpy(wk, tail + g.tail_k_offset(layer, h), old_rows * D * 2);
            std::memcpy(wv, tail + g.tail_v_offset(layer, h), old_rows * D * 2);
        }
        for (uint32_t i = 0; i < s.n; ++i) {
            const float *kr = k + size_t(row0 + i) * kv_dim + size_t(h) * D;
            const float *vr = v + size_t(row0 + i) * kv_dim + size_t(h) * D;
            uint16_t *dk = wk + (old_rows + i) * D;
            uint16_t *dv = wv + (old_rows + i) * D;
            for (uint32_t d = 0; d < D; ++d) {
                dk[d] = fp32_to_fp16(kr[d]);
                dv[d] = fp32_to_fp16(vr[d]);
            }
        }
        if (g.sink && pos0 == 0) {
            std::memcpy(tail + g.tail_sink_k_offset(layer, h), wk, D * 2);
            std::memcpy(tail + g.tail_sink_v_offset(layer, h), wv, D * 2);
        }
        // Seal the blocks that leave the full-precision window with this span.
        for (uint32_t b = ws / B; b < sealed_end; ++b) {
            uint8_t *blk = cache_.sealed_data(cache_.block_id(*s.kv, layer, b));
            size_t row = size_t(b * B - ws);
            codec_encode_head(codec_spec_k(g), KvRole::K, wk + row * D, B, D,
                              blk + g.sealed_k_offset(layer, h));
            codec_encode_head(codec_spec_v(g), KvRole::V, wv + row * D, B, D,
                              blk + g.sealed_v_offset(layer, h));
        }
        // What stays unsealed goes back to the tail slot, from row 0.
        uint32_t tail_start = sealed_end * B;
        if (end > tail_start) {
            size_t row = tail_start - ws;
            std::memcpy(tail + g.tail_k_offset(layer, h), wk + row * D,
                        size_t(end - tail_start) * D * 2);
            std::memcpy(tail + g.tail_v_offset(layer, h), wv + row * D,
                        size_t(end - tail_start) * D * 2);
        }
    }
}

void CpuBackend::write_kv(uint32_t layer, Tensor k, Tensor v) {
    pool_.parallel_for(spans_->size(), 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) write_span_kv(layer, i, rows(k), rows(v), k.cols);
    });
}

void CpuBackend::attention(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                           Tensor out) {
    attention_sinks(layer, q, n_heads, scale, window, nullptr, out);
}

void CpuBackend::attention_sinks(uint32_t layer, Tensor q, uint32_t n_heads, float scale,
                                 uint32_t window, const float *sinks, Tensor out) {
    for (size_t i = 0; i < att_.size(); ++i) {
        att_[i].q = rows(q) + size_t(row0_[i]) * q.cols;
        att_[i].out = rows(out) + size_t(row0_[i]) * out.cols;
    }
    cpu::AttentionParams ap{};
    ap.layer = layer;
    ap.n_heads = n_heads;
    ap.scale = scale;
    ap.q_stride = q.cols;
    ap.out_stride = out.cols;
    ap.window = window;
    ap.sinks = sinks;
    cpu::paged_attention(cache_, ap, att_.data(), att_.size(), pool_, attention_scratch_);
}

void CpuBackend::add(Tensor x, Tensor y) {
    float *xs = rows(x);
    const float *ys = rows(y);
    for (size_t i = 0; i < size_t(x.rows) * x.cols; ++i) xs[i] += ys[i];
}

void CpuBackend::add_bias(Tensor x, const float *bias) {
    float *xs = rows(x);
    const uint32_t C = x.cols;
    pool_.parallel_for(x.rows, 16, [&](size_t b, size_t e) {
        for (size_t t = b; t < e; ++t) {
            float *r = xs + t * C;
            for (uint32_t i = 0; i < C; ++i) r[i] += bias[i];
        }
    });
}

void CpuBackend::scale(Tensor x, float s) {
    float *xs = rows(x);
    pool_.parallel_for(size_t(x.rows) * x.cols, 1024, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) xs[i] *= s;
    });
}

void CpuBackend::geglu(Tensor gate, Tensor up) {
    float *g = rows(gate);
    const float *u = rows(up);
    const cpu::kernels::GluFn glu = cpu::kernels::geglu_kernel(cpu::cpu_has_avx2());
    pool_.parallel_for(size_t(gate.rows) * gate.cols, 256,
                       [&](size_t b, size_t e) { glu(g + b, u + b, e - b); });
}

void CpuBackend::swiglu(Tensor gate, Tensor up) {
    float *g = rows(gate);
    const float *u = rows(up);
    const cpu::kernels::GluFn glu = cpu::kernels::swiglu_kernel(cpu::cpu_has_avx2());
    pool_.parallel_for(size_t(gate.rows) * gate.cols, 256,
                       [&](size_t b, size_t e) { glu(g + b, u + b, e - b); });
}

// Each token's experts as tensor/expert_routing.h picks them.
void CpuBackend::route_experts(Tensor logits, const ExpertRouting &r, Tensor routes) {
    const uint32_t N = r.n_expert, K = r.n_used;
    if (logits.cols != N || routes.cols != 2 * K || routes.rows != logits.rows || K == 0 || K > N)
        fail(LLMKV_ERR_BACKEND, "route_experts: %u experts of %u, logits %ux%u, routes %ux%u", K, N,
             logits.rows, logits.cols, routes.rows, routes.cols);
    // One thread: T x n_expert values, little beside the experts' matmuls that follow.
    route_p_.resize(N);
    route_taken_.resize(N);
    for (uint32_t t = 0; t < logits.rows; ++t)
        route_token(rows(logits) + size_t(t) * N, r, route_p_.data(), route_taken_.data(),
                    rows(routes) + size_t(t) * 2 * K);
}

// Each chosen expert once, over the rows routed to it (gathered in row order, so prefill
// reads an expert's matrix once for all its tokens and decode reads only the chosen ones);
// matmul's results depend only on the weight row and the x row, so a row's result does not
// depend on which other rows share its expert.
void CpuBackend::matmul_experts(const WeightMatrix *experts, uint32_t n_expert, Tensor x,
                                Tensor routes, uint32_t n_used, Tensor y) {
    const uint32_t T = routes.rows, S = T * n_used;
    if (routes.cols != 2 * n_used || (x.rows != T && x.rows != S) || y.rows != S)
        fail(LLMKV_ERR_BACKEND, "matmul_experts: routes %ux%u, x %u rows, y %u rows for %u tokens",
             routes.rows, routes.cols, x.rows, y.rows, T);
    const bool per_slot = x.rows == S && n_used > 1;
    const float *rs = rows(routes);
    const int64_t bad_slot =
        order_slots_by_expert(rs, T, n_used, n_expert, expert_count_, expert_rows_);
    if (bad_slot >= 0)
        fail(LLMKV_ERR_BACKEND, "matmul_experts: expert %g of %u",
             double(rs[bad_slot / n_used * 2 * n_used + bad_slot % n_used]), n_expert);
    const uint32_t C = x.cols;
    for (uint32_t e = 0; e < n_expert; ++e) {
        const uint32_t b = expert_count_[e], n = expert_count_[e + 1] - b;
        if (n == 0) continue;
        const WeightMatrix &w = experts[e];
        if (!w.data) {  // another rank's expert: its rows are zero in this rank's partial sum
            for (uint32_t j = 0; j < n; ++j) {
                std::memset(rows(y) + size_t(expert_rows_[b + j]) * y.cols, 0,
                            size_t(y.cols) * sizeof(float));
            }
            continue;
        }
        if (w.cols != C || w.rows != y.cols)
            fail(LLMKV_ERR_BACKEND, "matmul_experts: expert %u is %lldx%lld for x %u, y %u columns",
                 e, (long long)w.rows, (long long)w.cols, C, y.cols);
        if (expert_x_.size() < size_t(n) * C) expert_x_.resize(size_t(n) * C);
        if (expert_y_.size() < size_t(n) * y.cols) expert_y_.resize(size_t(n) * y.cols);
        for (uint32_t j = 0; j < n; ++j) {
            const uint32_t slot = expert_rows_[b + j];
            const uint32_t src = per_slot ? slot : slot / n_used;
            std::memcpy(expert_x_.data() + size_t(j) * C, rows(x) + size_t(src) * C,
                        size_t(C) * sizeof(float));
        }
        cpu::matmul(with_packed(w), expert_x_.data(), C, n, expert_y_.data(), y.cols, pool_,
                    matmul_scratch_);
        for (uint32_t j = 0; j < n; ++j) {
            std::memcpy(rows(y) + size_t(expert_rows_[b + j]) * y.cols,
                        expert_y_.data() + size_t(j) * y.cols, size_t(y.cols) * sizeof(float));
        }
    }
}

void CpuBackend::combine_experts(Tensor y, Tensor routes, uint32_t n_used, Tensor out) {
    const uint32_t T = routes.rows, C = out.cols;
    if (y.rows != T * n_used || y.cols != C || out.rows != T || routes.cols != 2 * n_used)
        fail(LLMKV_ERR_BACKEND, "combine_experts: y %ux%u, out %ux%u, routes %ux%u", y.rows, y.cols,
             out.rows, out.cols, routes.rows, routes.cols);
    const float *ys = rows(y), *rs = rows(routes);
    float *os = rows(out);
    pool_.parallel_for(T, 4, [&](size_t b, size_t e) {
        for (size_t t = b; t < e; ++t) {
            float *o = os + t * C;
            const float *w = rs + t * 2 * n_used + n_used;
            for (uint32_t c = 0; c < C; ++c) o[c] = 0.0f;
            for (uint32_t i = 0; i < n_used; ++i) {
                const float *yr = ys + (t * n_used + i) * C;
                for (uint32_t c = 0; c < C; ++c) o[c] += w[i] * yr[c];
            }
        }
    });
}

void CpuBackend::mul_sigmoid(Tensor x, Tensor g) {
    if (g.rows != x.rows || g.cols != 1)
        fail(LLMKV_ERR_BACKEND, "mul_sigmoid: gate %ux%u for %u rows", g.rows, g.cols, x.rows);
    float *xs = rows(x);
    const float *gs = rows(g);
    for (uint32_t t = 0; t < x.rows; ++t) {
        const float s = 1.0f / (1.0f + exp_float(-gs[t]));
        for (uint32_t c = 0; c < x.cols; ++c) xs[size_t(t) * x.cols + c] *= s;
    }
}

void CpuBackend::add_expert_bias(Tensor y, Tensor routes, uint32_t n_used, const float *const *bias,
                                 uint32_t n_expert) {
    const uint32_t T = routes.rows;
    if (routes.cols != 2 * n_used || y.rows != T * n_used)
        fail(LLMKV_ERR_BACKEND, "add_expert_bias: routes %ux%u, y %u rows", routes.rows,
             routes.cols, y.rows);
    const float *rs = rows(routes);
    float *ys = rows(y);
    for (uint32_t t = 0; t < T; ++t) {
        for (uint32_t i = 0; i < n_used; ++i) {
            const float id = rs[size_t(t) * 2 * n_used + i];
            if (!(id >= 0.0f && id < float(n_expert)))
                fail(LLMKV_ERR_BACKEND, "add_expert_bias: expert %g of %u", double(id), n_expert);
            const float *b = bias[uint32_t(id)];
            if (!b) continue;
            float *r = ys + (size_t(t) * n_used + i) * y.cols;
            for (uint32_t c = 0; c < y.cols; ++c) r[c] += b[c];
        }
    }
}

void CpuBackend::swiglu_oai(Tensor gate, Tensor up, float alpha, float limit) {
    float *g = rows(gate);
    const float *u = rows(up);
    pool_.parallel_for(size_t(gate.rows) * gate.cols, 256, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
            const float x = std::min(g[i], limit);
            const float y = std::min(std::max(u[i], -limit), limit);
            g[i] = x / (1.0f + exp_float(-alpha * x)) * (y + 1.0f);
        }
    });
}

void CpuBackend::gather_logit_rows(Tensor x, Tensor out) {
    uint32_t k = 0;
    for (size_t i = 0; i < spans_->size(); ++i) {
        const ForwardSpan &s = (*spans_)[i];
        if (!s.want_logits) continue;
        for (uint32_t t = s.all_logits ? 0 : s.n - 1; t < s.n; ++t, ++k) {
            std::memcpy(rows(out) + size_t(k) * out.cols, rows(x) + size_t(row0_[i] + t) * x.cols,
                        size_t(x.cols) * sizeof(float));
        }
    }
}

void CpuBackend::logits(const WeightMatrix &w, Tensor x, float *host) {
    cpu::matmul(with_packed(w), rows(x), x.cols, x.rows, host, w.rows, pool_, matmul_scratch_);
}

void CpuBackend::all_reduce(Tensor x) {
    if (comm_) comm_->all_reduce_sum(rows(x), size_t(x.rows) * x.cols);
}

void CpuBackend::gather_logits(const float *local, uint32_t n_rows, uint32_t local_cols,
                               uint32_t stride, uint32_t n_vocab, float *host) {
    gather_logits_over(comm_, local, n_rows, local_cols, stride, n_vocab, host);
}

std::unique_ptr<KvTransferQueue> CpuBackend::make_transfer_queue(bool async) {
    return std::make_unique<PoolMemoryTransferQueue>(cache_, async);
}

void CpuBackend::copy_tail(int64_t from, int64_t to) {
    std::memcpy(cache_.tail_data(to), cache_.tail_data(from), cache_.tail_pool().block_bytes());
}

Backend::MemoryUsage CpuBackend::memory_usage() const {
    MemoryUsage m;
    m.kv = uint64_t(cache_.sealed_pool().n_total()) * cache_.sealed_pool().block_bytes() +
           uint64_t(cache_.tail_pool().n_total()) * cache_.tail_pool().block_bytes();
    m.weights = packed_bytes_;
    m.other = buffer_bytes_;
    return m;
}

}  // namespace llmkv
