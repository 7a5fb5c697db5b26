#include "model/shard.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "common/error.h"

namespace llmkv {

namespace {

int64_t block_elements(const WeightMatrix &w) {
    return tensor_type_block_elements(w.type);
}

}  // namespace

std::string shard_unsupported_reason(const LlamaModel &model, uint32_t size, ExpertSplit experts) {
    const LlamaConfig &c = model.config();
    if (size == 0) return "0 ranks";
    if (size == 1) return "";
    if (c.n_heads % size != 0)
        return strprintf("%u query heads do not split over %u ranks", c.n_heads, size);
    if (c.n_kv_heads % size != 0 && size % c.n_kv_heads != 0) {
        return strprintf("%u KV heads neither split over %u ranks nor replicate evenly on them",
                         c.n_kv_heads, size);
    }
    // The dense FFN's columns, or a mixture's: every expert's and the shared expert's.
    const uint32_t n_ff = c.is_moe() ? c.moe.n_ff_shared : c.n_ff;
    if (n_ff % size != 0)
        return strprintf("%u feed-forward columns do not split over %u ranks", n_ff, size);
    const bool whole = experts == ExpertSplit::kWhole;
    if (c.is_moe() && whole && c.moe.routing.n_expert < size) {
        return strprintf("%u experts cannot be held whole by %u ranks", c.moe.routing.n_expert,
                         size);
    }
    if (c.is_moe() && !whole && c.moe.n_ff_expert % size != 0) {
        return strprintf("%u feed-forward columns of each expert do not split over %u ranks",
                         c.moe.n_ff_expert, size);
    }
    if (c.n_vocab < size)
        return strprintf("a vocabulary of %u tokens does not split over %u ranks", c.n_vocab, size);
    const uint32_t q_cols = c.n_heads / size * c.head_dim, ff_cols = n_ff / size;
    const uint32_t expert_cols = c.moe.n_ff_expert / size;
    for (size_t l = 0; l < model.layers().size(); ++l) {
        const LlamaLayer &L = model.layers()[l];
        if (q_cols % block_elements(L.wo) != 0) {
            return strprintf(
                "layer %zu: attn_output is %s, whose %lld-value blocks do not split at %u columns",
                l, tensor_type_name(L.wo.type), (long long)block_elements(L.wo), q_cols);
        }
        if (L.w_down.data && ff_cols % block_elements(L.w_down) != 0) {
            return strprintf(
                "layer %zu: ffn_down is %s, whose %lld-value blocks do not split at %u columns", l,
                tensor_type_name(L.w_down.type), (long long)block_elements(L.w_down), ff_cols);
        }
        if (!whole && !L.down_exps.empty() && expert_cols % block_elements(L.down_exps[0]) != 0) {
            return strprintf(
                "layer %zu: ffn_down_exps is %s, whose %lld-value blocks do not split at %u "
                "columns",
                l, tensor_type_name(L.down_exps[0].type), (long long)block_elements(L.down_exps[0]),
                expert_cols);
        }
    }
    return "";
}

ShardRanges shard_ranges(const LlamaConfig &c, uint32_t rank, uint32_t size, ExpertSplit experts) {
    ShardRanges r;
    r.n_q_heads = c.n_heads / size;
    r.q_head0 = rank * r.n_q_heads;
    if (c.n_kv_heads >= size) {
        r.n_kv_heads = c.n_kv_heads / size;
        r.kv_head0 = rank * r.n_kv_heads;
    } else {
        r.kv_replicas = size / c.n_kv_heads;
        r.n_kv_heads = 1;
        r.kv_head0 = rank / r.kv_replicas;
        r.kv_primary = rank % r.kv_replicas == 0;
    }
    r.n_ff = (c.is_moe() ? c.moe.n_ff_shared : c.n_ff) / size;
    r.ff0 = rank * r.n_ff;
    const uint32_t n_expert = c.moe.routing.n_expert;
    if (experts == ExpertSplit::kWhole) {
        r.n_ff_expert = c.moe.n_ff_expert;
        r.expert0 = uint32_t(uint64_t(rank) * n_expert / size);
        r.n_experts = uint32_t(uint64_t(rank + 1) * n_expert / size) - r.expert0;
    } else {
        r.n_ff_expert = c.moe.n_ff_expert / size;
        r.ff_expert0 = rank * r.n_ff_expert;
        r.n_experts = n_expert;
    }
    r.vocab_stride = (c.n_vocab + size - 1) / size;
    r.vocab0 = std::min(c.n_vocab, rank * r.vocab_stride);
    r.n_vocab = std::min(r.vocab_stride, c.n_vocab - r.vocab0);
    return r;
}

WeightMatrix ModelShard::rows(const WeightMatrix &w, int64_t row0, int64_t n) {
    WeightMatrix s = w;
    s.data = static_cast<const uint8_t *>(w.data) + size_t(row0) * w.row_bytes;
    s.rows = n;
    s.packed = nullptr;
    return s;
}

WeightMatrix ModelShard::columns(const WeightMatrix &w, int64_t col0, int64_t n) {
    const int64_t be = block_elements(w);
    const size_t bb = tensor_type_block_bytes(w.type);
    const size_t off = size_t(col0 / be) * bb, row_bytes = size_t(n / be) * bb;
    std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[size_t(w.rows) * row_bytes]);
    if (!buf)
        fail(LLMKV_ERR_OUT_OF_MEMORY, "tensor parallelism: no memory for a %zu-byte weight slice",
             size_t(w.rows) * row_bytes);
    for (int64_t i = 0; i < w.rows; ++i) {
        std::memcpy(buf.get() + size_t(i) * row_bytes,
                    static_cast<const uint8_t *>(w.data) + size_t(i) * w.row_bytes + off,
                    row_bytes);
    }
    WeightMatrix s = w;
    s.data = buf.get();
    s.cols = n;
    s.row_bytes = row_bytes;
    s.packed = nullptr;
    owned_.push_back(std::move(buf));
    return s;
}

uint64_t shard_weight_bytes(const LlamaModel &model, const ShardRanges &r) {
    const LlamaConfig &c = model.config();
    auto row_part = [](const WeightMatrix &w, uint64_t rows) { return rows * w.row_bytes; };
    auto col_part = [](const WeightMatrix &w, uint64_t cols) {
        return w.cols ? uint64_t(w.rows) * w.row_bytes * cols / w.cols : 0;
    };
    uint64_t n = 0;
    for (const LlamaLayer &L : model.layers()) {
        n += row_part(L.wq, uint64_t(r.n_q_heads) * c.head_dim) +
             row_part(L.wk, uint64_t(r.n_kv_heads) * c.head_dim) +
             row_part(L.wv, uint64_t(r.n_kv_heads) * c.head_dim) +
             col_part(L.wo, uint64_t(r.n_q_heads) * c.head_dim) + row_part(L.w_gate, r.n_ff) +
             row_part(L.w_up, r.n_ff) + col_part(L.w_down, r.n_ff);
        n += uint64_t(L.router.rows) * L.router.row_bytes +
             uint64_t(L.shared_gate.rows) * L.shared_gate.row_bytes;
        for (size_t e = r.expert0; e < r.expert0 + r.n_experts && e < L.gate_exps.size(); ++e) {
            n += row_part(L.gate_exps[e], r.n_ff_expert) + row_part(L.up_exps[e], r.n_ff_expert) +
                 col_part(L.down_exps[e], r.n_ff_expert);
        }
    }
    // The embedding whole on every rank; a separate output head's vocabulary rows (a tied
    // head is a view of the embedding).
    const WeightMatrix &e = model.token_embedding();
    n += uint64_t(e.rows) * e.row_bytes;
    if (model.output().data != e.data) n += row_part(model.output(), r.n_vocab);
    return n;
}

uint64_t shard_weight_elements(const LlamaConfig &c, const ShardRanges &r, bool tied_output) {
    const uint64_t E = c.n_embd, D = c.head_dim;
    const uint64_t per_layer = 2 * uint64_t(r.n_q_heads) * D * E     // wq rows, wo columns
                               + 2 * uint64_t(r.n_kv_heads) * D * E  // wk, wv rows
                               + 3 * uint64_t(r.n_ff) * E            // gate, up rows; down columns
                               + uint64_t(r.n_experts) * 3 * r.n_ff_expert * E  // its experts
                               + uint64_t(c.moe.routing.n_expert) * E           // the router
                               + (c.moe.n_ff_shared ? E : 0);  // shared expert's gate
    return per_layer * c.n_layers + uint64_t(c.n_vocab) * E +
           (tied_output ? 0 : uint64_t(r.n_vocab) * E);
}

std::unique_ptr<ModelShard> ModelShard::make(const LlamaModel &model, uint32_t rank, uint32_t size,
                                             ExpertSplit experts) {
    const std::string why = shard_unsupported_reason(model, size, experts);
    if (!why.empty())
        fail(LLMKV_ERR_UNSUPPORTED, "tensor parallelism over %u ranks: %s", size, why.c_str());
    if (rank >= size)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "tensor parallelism: rank %u of %u", rank, size);
    std::unique_ptr<ModelShard> s(new ModelShard());
    const LlamaConfig &c = model.config();
    s->rank_ = rank;
    s->size_ = size;
    s->ranges_ = shard_ranges(c, rank, size, experts);
    const ShardRanges &r = s->ranges_;
    s->config_ = c;
    s->config_.n_heads = r.n_q_heads;
    s->config_.n_kv_heads = r.n_kv_heads;
    s->config_.n_ff = c.is_moe() ? c.n_ff : r.n_ff;
    s->config_.moe.n_ff_expert = r.n_ff_expert;
    s->config_.moe.n_ff_shared = c.is_moe() ? r.n_ff : 0;
    const int64_t D = c.head_dim;
    for (const LlamaLayer &L : model.layers()) {
        LlamaLayer o = L;
        o.wq = s->rows(L.wq, r.q_head0 * D, r.n_q_heads * D);
        o.wk = s->rows(L.wk, r.kv_head0 * D, r.n_kv_heads * D);
        o.wv = s->rows(L.wv, r.kv_head0 * D, r.n_kv_heads * D);
        o.wo = s->columns(L.wo, r.q_head0 * D, r.n_q_heads * D);
        if (L.bq) {
            o.bq = L.bq + r.q_head0 * D;
            o.bk = L.bk + r.kv_head0 * D;
            o.bv = L.bv + r.kv_head0 * D;
        }
        if (L.attn_sinks) o.attn_sinks = L.attn_sinks + r.q_head0;  // the rank's heads' sinks
        // (attn_output's bias is added once after the all-reduce, by every rank: kept whole.)
        if (L.w_gate.data) {
            o.w_gate = s->rows(L.w_gate, r.ff0, r.n_ff);
            o.w_up = s->rows(L.w_up, r.ff0, r.n_ff);
            o.w_down = s->columns(L.w_down, r.ff0, r.n_ff);
        }
        // Expert biases: another rank's expert has none here; with split columns the gate
        // and up biases are the rank's columns' and the down bias is rank 0's alone (the
        // ranks' partial sums add up to one bias).
        const bool biases = !L.gate_exps_bias.empty();
        for (size_t e = 0; biases && e < L.gate_exps.size(); ++e) {
            if (e < r.expert0 || e >= r.expert0 + r.n_experts) {
                o.gate_exps_bias[e] = o.up_exps_bias[e] = o.down_exps_bias[e] = nullptr;
            } else if (experts == ExpertSplit::kColumns) {
                o.gate_exps_bias[e] = L.gate_exps_bias[e] + r.ff_expert0;
                o.up_exps_bias[e] = L.up_exps_bias[e] + r.ff_expert0;
                if (rank != 0) o.down_exps_bias[e] = nullptr;
            }
        }
        for (size_t e = 0; e < L.gate_exps.size(); ++e) {
            if (e < r.expert0 || e >= r.expert0 + r.n_experts) {
                o.gate_exps[e] = o.up_exps[e] = o.down_exps[e] = WeightMatrix{};  // another rank's
            } else if (experts == ExpertSplit::kWhole) {
                continue;  // the model's own views, whole
            } else {
                o.gate_exps[e] = s->rows(L.gate_exps[e], r.ff_expert0, r.n_ff_expert);
                o.up_exps[e] = s->rows(L.up_exps[e], r.ff_expert0, r.n_ff_expert);
                o.down_exps[e] = s->columns(L.down_exps[e], r.ff_expert0, r.n_ff_expert);
            }
        }
        s->layers_.push_back(o);
    }
    s->output_ = s->rows(model.output(), r.vocab0, r.n_vocab);
    s->weight_bytes_ = shard_weight_bytes(model, r);
    return s;
}

}  // namespace llmkv
