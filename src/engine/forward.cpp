// Forward pass: embeddings -> 30 x (RMSNorm, QKV, RoPE, KV write, paged attention, output
// projection, RMSNorm, SwiGLU MLP) -> final norm -> logits for the rows that need them.
#include "engine/forward.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/half.h"

namespace llmkv {

void rms_norm(const float *x, const float *weight, uint32_t n, float eps, float *out) {
    double ss = 0.0;
    for (uint32_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
    float scale = float(1.0 / std::sqrt(ss / n + eps));
    for (uint32_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// Llama's rotary embedding as GGUF stores it: adjacent pairs (v[2i], v[2i+1]) rotate by
// pos * inv_freq[i].
void rope_rotate(float *v, uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim, uint32_t pos,
                 float freq_scale, const float *inv_freq) {
    float p = float(pos) * freq_scale;
    for (uint32_t i = 0; i < rope_dim / 2; ++i) {
        float angle = p * inv_freq[i];
        float c = std::cos(angle), s = std::sin(angle);
        for (uint32_t h = 0; h < n_heads; ++h) {
            float *x = v + size_t(h) * head_dim + 2 * i;
            float x0 = x[0], x1 = x[1];
            x[0] = x0 * c - x1 * s;
            x[1] = x0 * s + x1 * c;
        }
    }
}

BatchShape validate_batch(const std::vector<ForwardSpan> &spans, const KvGeometry &g, uint32_t n_vocab,
                          uint32_t max_tokens) {
    uint64_t T = 0, n_logits = 0;
    for (const ForwardSpan &s : spans) {
        if (s.n == 0) fail(LLMKV_ERR_INTERNAL, "forward: empty span");
        if (s.kv->tail < 0) fail(LLMKV_ERR_INTERNAL, "forward: span without a tail slot");
        if (s.kv->blocks.size() < g.sealed_blocks(s.kv->n_tokens + s.n)) {
            fail(LLMKV_ERR_INTERNAL, "forward: span blocks not reserved");
        }
        for (uint32_t i = 0; i < s.n; ++i) {
            if (s.tokens[i] < 0 || uint32_t(s.tokens[i]) >= n_vocab) {
                fail(LLMKV_ERR_INVALID_ARGUMENT, "token id %d outside the vocabulary (%u)", s.tokens[i], n_vocab);
            }
        }
        T += s.n;
        n_logits += s.want_logits ? (s.all_logits ? s.n : 1) : 0;
    }
    if (T > max_tokens) {
        fail(LLMKV_ERR_INTERNAL, "forward: %llu tokens exceed the batch limit %u", (unsigned long long)T, max_tokens);
    }
    return {uint32_t(T), uint32_t(n_logits)};
}

Forward::Forward(const LlamaModel &model, KvCache &cache, ThreadPool &pool, uint32_t max_tokens)
    : model_(model), cfg_(model.config()), cache_(cache), pool_(pool), max_tokens_(max_tokens) {
    const size_t T = max_tokens;
    x_.resize(T * cfg_.n_embd);
    xn_.resize(T * cfg_.n_embd);
    q_.resize(T * cfg_.q_dim());
    k_.resize(T * cfg_.kv_dim());
    v_.resize(T * cfg_.kv_dim());
    attn_.resize(T * cfg_.q_dim());
    tmp_.resize(T * cfg_.n_embd);
    gate_.resize(T * cfg_.n_ff);
    up_.resize(T * cfg_.n_ff);
    inv_freq_.resize(cfg_.rope_dim / 2);
    const float *factors = model.rope_freq_factors();
    for (uint32_t i = 0; i < cfg_.rope_dim / 2; ++i) {
        double f = 1.0 / std::pow(double(cfg_.rope_freq_base), double(2 * i) / cfg_.rope_dim);
        if (factors) f /= factors[i];
        inv_freq_[i] = float(f);
    }
}

// Builds the span's fp16 window for this layer: rows [window_start, pos0) come from the
// tail slot, rows [pos0, pos0 + n) from the new K/V; then seals every block this span
// completes (layer `layer` only) and writes the trailing partial block back to the tail.
void Forward::write_kv_window(uint32_t layer, const ForwardSpan &span, uint32_t row0, uint32_t pos0,
                              uint16_t *win_k, uint16_t *win_v, uint32_t win_cap) {
    const KvGeometry &g = cache_.geometry();
    const uint32_t B = g.block_tokens, D = g.head_dim, H = g.n_kv_heads;
    const uint32_t ws = g.sealed_blocks(pos0) * B;
    const uint32_t end = pos0 + span.n;
    const uint32_t sealed_end = g.sealed_blocks(end);
    uint8_t *tail = cache_.tail_data(span.kv->tail);
    for (uint32_t h = 0; h < H; ++h) {
        uint16_t *wk = win_k + size_t(h) * win_cap * D;
        uint16_t *wv = win_v + size_t(h) * win_cap * D;
        size_t old_rows = pos0 - ws;
        if (old_rows) {
            std::memcpy(wk, tail + g.tail_k_offset(layer, h), old_rows * D * 2);
            std::memcpy(wv, tail + g.tail_v_offset(layer, h), old_rows * D * 2);
        }
        for (uint32_t i = 0; i < span.n; ++i) {
            const float *kr = k_.data() + size_t(row0 + i) * cfg_.kv_dim() + size_t(h) * D;
            const float *vr = v_.data() + size_t(row0 + i) * cfg_.kv_dim() + size_t(h) * D;
            uint16_t *dk = wk + (old_rows + i) * D;
            uint16_t *dv = wv + (old_rows + i) * D;
            for (uint32_t d = 0; d < D; ++d) {
                dk[d] = fp32_to_fp16(kr[d]);
                dv[d] = fp32_to_fp16(vr[d]);
            }
        }
        // Seal the blocks that leave the full-precision window with this span.
        for (uint32_t b = ws / B; b < sealed_end; ++b) {
            uint8_t *blk = cache_.sealed_data(span.kv->blocks[b]);
            size_t row = size_t(b * B - ws);
            codec_encode_head(codec_spec_k(g), KvRole::K, wk + row * D, B, D, blk + g.sealed_k_offset(layer, h));
            codec_encode_head(codec_spec_v(g), KvRole::V, wv + row * D, B, D, blk + g.sealed_v_offset(layer, h));
        }
        // What stays unsealed goes back to the tail slot, from row 0.
        uint32_t tail_start = sealed_end * B;
        if (end > tail_start) {
            size_t row = tail_start - ws;
            std::memcpy(tail + g.tail_k_offset(layer, h), wk + row * D, size_t(end - tail_start) * D * 2);
            std::memcpy(tail + g.tail_v_offset(layer, h), wv + row * D, size_t(end - tail_start) * D * 2);
        }
    }
}

void Forward::run(const std::vector<ForwardSpan> &spans, std::vector<float> &logits) {
    const KvGeometry &g = cache_.geometry();
    const uint32_t E = cfg_.n_embd, QD = cfg_.q_dim(), KVD = cfg_.kv_dim();
    const uint32_t B = g.block_tokens;

    // Validate the whole batch before any KV is written.
    const BatchShape shape = validate_batch(spans, g, cfg_.n_vocab, max_tokens_);
    const uint32_t T = shape.tokens, n_logits = shape.logit_rows;
    size_t window_rows = 0;
    for (const ForwardSpan &s : spans) window_rows += s.kv->n_tokens - g.sealed_blocks(s.kv->n_tokens) * B + s.n;
    if (window_.size() < window_rows * 2 * KVD) window_.resize(window_rows * 2 * KVD);

    // Embeddings: x (T, E).
    {
        uint32_t row = 0;
        for (const ForwardSpan &s : spans) {
            for (uint32_t i = 0; i < s.n; ++i, ++row) {
                const cpu::WeightMatrix &emb = model_.token_embedding();
                const uint8_t *src = static_cast<const uint8_t *>(emb.data) + size_t(s.tokens[i]) * emb.row_bytes;
                cpu::dequantize_row(emb.type, src, x_.data() + size_t(row) * E, E);
            }
        }
    }

    // Per-span window placement and attention descriptors.
    std::vector<cpu::AttentionSpan> &att = att_;
    std::vector<uint32_t> &row0 = row0_;
    att.assign(spans.size(), cpu::AttentionSpan{});
    row0.assign(spans.size(), 0);
    {
        uint32_t row = 0;
        size_t win_off = 0;
        for (size_t i = 0; i < spans.size(); ++i) {
            const ForwardSpan &s = spans[i];
            uint32_t pos0 = s.kv->n_tokens;
            uint32_t cap = pos0 - g.sealed_blocks(pos0) * B + s.n;
            cpu::AttentionSpan &a = att[i];
            a.kv = s.kv;
            a.block_data = s.block_data;
            a.window_k = window_.data() + win_off;
            a.window_v = window_.data() + win_off + size_t(cap) * KVD;
            a.window_start = g.sealed_blocks(pos0) * B;
            a.window_capacity = cap;
            a.pos0 = pos0;
            a.n = s.n;
            a.q = q_.data() + size_t(row) * QD;
            a.out = attn_.data() + size_t(row) * QD;
            row0[i] = row;
            row += s.n;
            win_off += size_t(cap) * KVD * 2;
        }
    }

    cpu::AttentionParams ap{};
    ap.n_heads = cfg_.n_heads;
    ap.scale = 1.0f / std::sqrt(float(cfg_.head_dim));
    ap.q_stride = QD;
    ap.out_stride = QD;

    for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
        const LlamaLayer &L = model_.layers()[l];
        pool_.parallel_for(T, 1, [&](size_t b, size_t e) {
            for (size_t t = b; t < e; ++t) rms_norm(&x_[t * E], L.attn_norm, E, cfg_.rms_eps, &xn_[t * E]);
        });
        cpu::matmul(L.wq, xn_.data(), E, T, q_.data(), QD, pool_, matmul_scratch_);
        cpu::matmul(L.wk, xn_.data(), E, T, k_.data(), KVD, pool_, matmul_scratch_);
        cpu::matmul(L.wv, xn_.data(), E, T, v_.data(), KVD, pool_, matmul_scratch_);
        for (size_t i = 0; i < spans.size(); ++i) {
            for (uint32_t t = 0; t < spans[i].n; ++t) {
                uint32_t row = row0[i] + t, pos = att[i].pos0 + t;
                rope_rotate(&q_[size_t(row) * QD], cfg_.n_heads, cfg_.head_dim, cfg_.rope_dim, pos,
                            cfg_.rope_freq_scale, inv_freq_.data());
                rope_rotate(&k_[size_t(row) * KVD], cfg_.n_kv_heads, cfg_.head_dim, cfg_.rope_dim, pos,
                            cfg_.rope_freq_scale, inv_freq_.data());
            }
        }
        pool_.parallel_for(spans.size(), 1, [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) {
                write_kv_window(l, spans[i], row0[i], att[i].pos0, const_cast<uint16_t *>(att[i].window_k),
                                const_cast<uint16_t *>(att[i].window_v), att[i].window_capacity);
            }
        });
        ap.layer = l;
        cpu::paged_attention(cache_, ap, att.data(), att.size(), pool_, attention_scratch_);
        cpu::matmul(L.wo, attn_.data(), QD, T, tmp_.data(), E, pool_, matmul_scratch_);
        for (size_t i = 0; i < size_t(T) * E; ++i) x_[i] += tmp_[i];

        pool_.parallel_for(T, 1, [&](size_t b, size_t e) {
            for (size_t t = b; t < e; ++t) rms_norm(&x_[t * E], L.ffn_norm, E, cfg_.rms_eps, &xn_[t * E]);
        });
        cpu::matmul(L.w_gate, xn_.data(), E, T, gate_.data(), cfg_.n_ff, pool_, matmul_scratch_);
        cpu::matmul(L.w_up, xn_.data(), E, T, up_.data(), cfg_.n_ff, pool_, matmul_scratch_);
        const size_t n_ff_total = size_t(T) * cfg_.n_ff;
        pool_.parallel_for(n_ff_total, 256, [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) {
                float gv = gate_[i];
                gate_[i] = gv / (1.0f + std::exp(-gv)) * up_[i];
            }
        });
        cpu::matmul(L.w_down, gate_.data(), cfg_.n_ff, T, tmp_.data(), E, pool_, matmul_scratch_);
        for (size_t i = 0; i < size_t(T) * E; ++i) x_[i] += tmp_[i];
    }

    for (const ForwardSpan &s : spans) s.kv->n_tokens += s.n;

    // Final norm and logits for the rows that need them.
    logits.resize(size_t(n_logits) * cfg_.n_vocab);
    if (n_logits == 0) return;
    last_rows_.resize(size_t(n_logits) * E);
    uint32_t k = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
        if (!spans[i].want_logits) continue;
        uint32_t first = spans[i].all_logits ? 0 : spans[i].n - 1;
        for (uint32_t t = first; t < spans[i].n; ++t, ++k) {
            uint32_t row = row0[i] + t;
            rms_norm(&x_[size_t(row) * E], model_.output_norm(), E, cfg_.rms_eps, &last_rows_[size_t(k) * E]);
        }
    }
    cpu::matmul(model_.output(), last_rows_.data(), E, n_logits, logits.data(), cfg_.n_vocab, pool_,
                matmul_scratch_);
}

}  // namespace llmkv
