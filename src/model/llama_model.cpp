// LlamaModel: reads llama-family hyperparameters and binds weight tensors in place.
#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/half.h"

namespace llmkv {

namespace {

uint32_t require_u32(const GgufFile &f, const std::string &key, uint32_t lo, uint32_t hi) {
    auto v = f.get_uint(key);
    if (!v) fail(LLMKV_ERR_MODEL_FORMAT, "missing metadata key %s", key.c_str());
    if (*v < lo || *v > hi) {
        fail(LLMKV_ERR_MODEL_FORMAT, "metadata %s = %llu out of range [%u, %u]", key.c_str(),
             (unsigned long long)*v, lo, hi);
    }
    return uint32_t(*v);
}

uint32_t optional_u32(const GgufFile &f, const std::string &key, uint32_t dflt, uint32_t lo,
                      uint32_t hi) {
    auto v = f.get_uint(key);
    if (!v) return dflt;
    if (*v < lo || *v > hi) {
        fail(LLMKV_ERR_MODEL_FORMAT, "metadata %s = %llu out of range [%u, %u]", key.c_str(),
             (unsigned long long)*v, lo, hi);
    }
    return uint32_t(*v);
}

// FNV-1a 64 over a string; enough for a fingerprint that salts cache keys.
uint64_t fnv1a(const std::string &s, uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

bool is_supported_arch(const std::string &a) {
    return a == "llama" || a == "gemma3" || a == "qwen2" || a == "qwen3" || a == "phi3" ||
           a == "qwen2moe" || a == "qwen3moe";
}

// Rows [row0, row0 + n) of a matrix: a view of a fused tensor (Phi-3's attn_qkv, ffn_up).
WeightMatrix row_range(const WeightMatrix &w, uint32_t row0, uint32_t n) {
    WeightMatrix r = w;
    r.data = static_cast<const uint8_t *>(w.data) + size_t(row0) * w.row_bytes;
    r.rows = n;
    return r;
}

// The mixture-of-experts keys (llama.cpp's names): qwen2moe and qwen3moe always have experts,
// llama has them when expert_count > 1 (Mixtral; llama.cpp treats 0 and 1 as dense).
void read_moe_config(const GgufFile &f, const std::string &p, LlamaConfig &c) {
    const std::string &a = c.architecture;
    const bool qwen_moe = a == "qwen2moe" || a == "qwen3moe";
    if (!qwen_moe && a != "llama") return;
    MoeConfig &m = c.moe;
    ExpertRouting &r = m.routing;
    const uint32_t n_expert = qwen_moe ? require_u32(f, p + "expert_count", 1, 1024)
                                       : optional_u32(f, p + "expert_count", 0, 0, 1024);
    if (n_expert <= 1 && !qwen_moe) return;
    r.n_expert = n_expert;
    auto used = f.get_uint(p + "expert_used_count");
    if (!used) fail(LLMKV_ERR_MODEL_FORMAT, "missing metadata key %sexpert_used_count", p.c_str());
    if (*used < 1 || *used > n_expert) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "metadata %sexpert_used_count = %llu: must be 1 to expert_count %u", p.c_str(),
             (unsigned long long)*used, n_expert);
    }
    r.n_used = uint32_t(*used);
    // One expert's width: expert_feed_forward_length, else (as llama.cpp) n_ff / n_used for the
    // Qwen families; Mixtral's experts are feed_forward_length wide.
    m.n_ff_expert = qwen_moe ? optional_u32(f, p + "expert_feed_forward_length",
                                            std::max(1u, c.n_ff / r.n_used), 1, 1u << 20)
                             : c.n_ff;
    if (a == "qwen2moe") {
        m.n_ff_shared =
            optional_u32(f, p + "expert_shared_feed_forward_length", c.n_ff, 1, 1u << 20);
    }
    r.gating = ExpertRouting::Gating::kSoftmax;
    r.norm_weights = a != "qwen2moe";  // llama.cpp: Mixtral and Qwen3-MoE normalize, Qwen2-MoE not
    if (auto s = f.get_float(p + "expert_weights_scale")) {
        if (!(*s >= 0 && *s < 1e6))
            fail(LLMKV_ERR_MODEL_FORMAT, "%sexpert_weights_scale = %g out of range", p.c_str(), *s);
        if (*s != 0) r.weight_scale = float(*s);  // 0: not set
    }
}

}  // namespace

const float *LlamaModel::f32_vector(const std::string &name, uint32_t n, bool required) {
    const GgufTensor *t = file_->find_tensor(name);
    if (!t) {
        if (required) fail(LLMKV_ERR_MODEL_FORMAT, "missing tensor %s", name.c_str());
        return nullptr;
    }
    if (t->dims.size() != 1 || t->dims[0] != int64_t(n)) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "tensor %s: expected shape [%u], got %zu dims (dims[0] = %lld)", name.c_str(), n,
             t->dims.size(), (long long)t->dims[0]);
    }
    n_params_ += t->n_elements;
    weight_bytes_ += t->n_bytes;
    switch (t->type) {
        case TensorType::F32: {
            if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
                return reinterpret_cast<const float *>(t->data);
            }
            std::vector<float> v(n);
            std::memcpy(v.data(), t->data, n * sizeof(float));
            owned_vectors_.push_back(std::move(v));
            return owned_vectors_.back().data();
        }
        case TensorType::F16:
        case TensorType::BF16: {
            std::vector<float> v(n);
            for (uint32_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, t->data + 2 * i, 2);
                v[i] = t->type == TensorType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
            }
            owned_vectors_.push_back(std::move(v));
            return owned_vectors_.back().data();
        }
        default:
            fail(LLMKV_ERR_UNSUPPORTED, "tensor %s: type %s is not supported for a vector",
                 name.c_str(), tensor_type_name(t->type));
    }
}

WeightMatrix LlamaModel::matrix(const std::string &name, uint32_t rows, uint32_t cols) {
    const GgufTensor *t = file_->find_tensor(name);
    if (!t) fail(LLMKV_ERR_MODEL_FORMAT, "missing tensor %s", name.c_str());
    if (t->dims.size() != 2 || t->dims[0] != int64_t(cols) || t->dims[1] != int64_t(rows)) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: expected shape [%u, %u], got [%lld, %lld]%s",
             name.c_str(), cols, rows, (long long)t->dims[0],
             (long long)(t->dims.size() > 1 ? t->dims[1] : 1),
             t->dims.size() > 2 ? " (+more dims)" : "");
    }
    n_params_ += t->n_elements;
    weight_bytes_ += t->n_bytes;
    WeightMatrix w{};
    w.type = t->type;
    w.data = t->data;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = t->row_bytes();
    return w;
}

std::vector<WeightMatrix> LlamaModel::matrices(const std::string &name, uint32_t n, uint32_t rows,
                                               uint32_t cols) {
    const GgufTensor *t = file_->find_tensor(name);
    if (!t) fail(LLMKV_ERR_MODEL_FORMAT, "missing tensor %s", name.c_str());
    if (t->dims.size() != 3 || t->dims[0] != int64_t(cols) || t->dims[1] != int64_t(rows) ||
        t->dims[2] != int64_t(n)) {
        std::string got;
        for (size_t i = 0; i < t->dims.size(); ++i)
            got += strprintf("%s%lld", i ? ", " : "", (long long)t->dims[i]);
        fail(LLMKV_ERR_MODEL_FORMAT,
             "tensor %s: expected shape [%u, %u, %u] (%u experts), got [%s]", name.c_str(), cols,
             rows, n, n, got.c_str());
    }
    n_params_ += t->n_elements;
    weight_bytes_ += t->n_bytes;
    expert_params_ += t->n_elements;
    expert_bytes_ += t->n_bytes;
    std::vector<WeightMatrix> v(n);
    const size_t row_bytes = t->row_bytes();
    for (uint32_t e = 0; e < n; ++e) {
        WeightMatrix &w = v[e];
        w.type = t->type;
        w.data = t->data + size_t(e) * rows * row_bytes;
        w.rows = rows;
        w.cols = cols;
        w.row_bytes = row_bytes;
    }
    return v;
}

void LlamaModel::bind_moe(LlamaLayer &L, const std::string &b) {
    const LlamaConfig &c = config_;
    const MoeConfig &m = c.moe;
    const uint32_t n = m.routing.n_expert;
    L.router = matrix(b + "ffn_gate_inp.weight", n, c.n_embd);
    L.gate_exps = matrices(b + "ffn_gate_exps.weight", n, m.n_ff_expert, c.n_embd);
    L.up_exps = matrices(b + "ffn_up_exps.weight", n, m.n_ff_expert, c.n_embd);
    L.down_exps = matrices(b + "ffn_down_exps.weight", n, c.n_embd, m.n_ff_expert);
    if (m.n_ff_shared == 0) return;
    // The shared expert's gate is one row: GGUF [n_embd] (as llama.cpp's converter writes it)
    // or [n_embd, 1].
    const std::string g = b + "ffn_gate_inp_shexp.weight";
    const GgufTensor *t = file_->find_tensor(g);
    if (!t) fail(LLMKV_ERR_MODEL_FORMAT, "missing tensor %s", g.c_str());
    if (t->dims.size() == 1 && t->dims[0] == int64_t(c.n_embd)) {
        n_params_ += t->n_elements;
        weight_bytes_ += t->n_bytes;
        L.shared_gate = WeightMatrix{t->type, t->data, 1, c.n_embd, t->row_bytes()};
    } else {
        L.shared_gate = matrix(g, 1, c.n_embd);
    }
    L.w_gate = matrix(b + "ffn_gate_shexp.weight", m.n_ff_shared, c.n_embd);
    L.w_up = matrix(b + "ffn_up_shexp.weight", m.n_ff_shared, c.n_embd);
    L.w_down = matrix(b + "ffn_down_shexp.weight", c.n_embd, m.n_ff_shared);
}

uint64_t LlamaModel::n_active_params() const {
    const ExpertRouting &r = config_.moe.routing;
    if (r.n_expert == 0) return n_params_;
    return n_params_ - expert_params_ + expert_params_ / r.n_expert * r.n_used;
}

uint64_t LlamaModel::active_weight_bytes() const {
    const ExpertRouting &r = config_.moe.routing;
    if (r.n_expert == 0) return weight_bytes_;
    return weight_bytes_ - expert_bytes_ + expert_bytes_ / r.n_expert * r.n_used;
}

void LlamaModel::read_config() {
    const GgufFile &f = *file_;
    LlamaConfig &c = config_;
    auto arch = f.get_string("general.architecture");
    if (!arch) fail(LLMKV_ERR_MODEL_FORMAT, "missing metadata key general.architecture");
    if (!is_supported_arch(*arch)) {
        fail(LLMKV_ERR_UNSUPPORTED,
             "architecture '%s' is not supported (supported: llama, gemma3, qwen2, qwen3, phi3, "
             "qwen2moe, qwen3moe)",
             arch->c_str());
    }
    c.architecture = *arch;
    const std::string &a = c.architecture;
    c.name = f.get_string("general.name").value_or("");
    const std::string p = c.architecture + ".";
    c.n_layers = require_u32(f, p + "block_count", 1, 1024);
    c.n_embd = require_u32(f, p + "embedding_length", 1, 65536);
    c.n_ff = require_u32(f, p + "feed_forward_length", 1, 1u << 20);
    c.n_heads = require_u32(f, p + "attention.head_count", 1, 1024);
    c.n_kv_heads = optional_u32(f, p + "attention.head_count_kv", c.n_heads, 1, c.n_heads);
    c.n_ctx_train = optional_u32(f, p + "context_length", 2048, 1, 1u << 24);
    if (c.n_heads % c.n_kv_heads != 0) {
        fail(LLMKV_ERR_MODEL_FORMAT,
             "attention.head_count %u is not a multiple of head_count_kv %u", c.n_heads,
             c.n_kv_heads);
    }
    // The head width: attention.key_length when the file has it (Gemma, Qwen3: it may differ
    // from n_embd / n_heads), else n_embd / n_heads.
    if (!f.get_uint(p + "attention.key_length") && c.n_embd % c.n_heads != 0) {
        fail(LLMKV_ERR_MODEL_FORMAT, "embedding_length %u is not a multiple of head_count %u",
             c.n_embd, c.n_heads);
    }
    c.head_dim = optional_u32(f, p + "attention.key_length", c.n_embd / c.n_heads, 2, 1024);
    uint32_t value_length = optional_u32(f, p + "attention.value_length", c.head_dim, 2, 1024);
    if (value_length != c.head_dim) {
        fail(LLMKV_ERR_UNSUPPORTED, "attention.value_length %u differs from key_length %u",
             value_length, c.head_dim);
    }
    if (c.head_dim % 2 != 0) fail(LLMKV_ERR_MODEL_FORMAT, "head_dim %u is odd", c.head_dim);
    c.rope_dim = optional_u32(f, p + "rope.dimension_count", c.head_dim, 2, c.head_dim);
    if (c.rope_dim % 2 != 0)
        fail(LLMKV_ERR_MODEL_FORMAT, "rope.dimension_count %u is odd", c.rope_dim);
    if (auto base = f.get_float(p + "rope.freq_base")) {
        if (!(*base > 1.0 && *base < 1e12)) {
            fail(LLMKV_ERR_MODEL_FORMAT, "metadata %srope.freq_base = %g out of range", p.c_str(),
                 *base);
        }
        c.rope_freq_base = float(*base);
    }
    if (auto type = f.get_string(p + "rope.scaling.type")) {
        if (*type == "linear") {
            auto factor = f.get_float(p + "rope.scaling.factor");
            if (factor && *factor > 0 && *factor < 1e6) c.rope_freq_scale = float(1.0 / *factor);
        } else if (*type != "none") {
            fail(LLMKV_ERR_UNSUPPORTED, "rope scaling type '%s' is not supported", type->c_str());
        }
    }
    if (auto eps = f.get_float(p + "attention.layer_norm_rms_epsilon")) {
        if (!(*eps > 0 && *eps < 1)) {
            fail(LLMKV_ERR_MODEL_FORMAT, "attention.layer_norm_rms_epsilon = %g out of range",
                 *eps);
        }
        c.rms_eps = float(*eps);
    }

    // Architecture traits.
    c.rope_neox = a != "llama";
    c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));
    if (a == "gemma3") {
        c.embd_scale = std::sqrt(float(c.n_embd));
        c.activation = FfnActivation::kGeluTanh;
        c.qk_norm = true;
        c.post_norms = true;
        // query_pre_attn_scalar: head_dim, except Gemma 3 27B (62 layers) where it is
        // n_embd / n_heads; GGUF has no key for it (attention.scale overrides below).
        if (c.n_layers == 62) c.attn_scale = 1.0f / std::sqrt(float(c.n_embd / c.n_heads));
    } else if (a == "qwen3" || a == "qwen3moe") {
        c.qk_norm = true;
    }
    read_moe_config(f, p, c);
    if (auto s = f.get_float(p + "attention.scale")) {
        if (!(*s > 0 && *s < 1e3))
            fail(LLMKV_ERR_MODEL_FORMAT, "%sattention.scale = %g out of range", p.c_str(), *s);
        c.attn_scale = float(*s);
    }

    // Per-layer attention: windows and RoPE.
    c.ropes.assign(1, LayerRope{c.rope_freq_base, c.rope_freq_scale, true});
    c.layer_rope.assign(c.n_layers, 0);
    c.layer_window.assign(c.n_layers, 0);
    if (a == "gemma3") {
        c.sliding_window = optional_u32(f, p + "attention.sliding_window", 0, 0, 1u << 24);
        if (c.sliding_window > 0) {
            // Local layers: the window, RoPE base rope.freq_base_swa (10000 when absent), no
            // scaling. Global layers: layer l is global iff (l + 1) % pattern == 0 (pattern 6),
            // or as attention.sliding_window_pattern says (a period, or one flag per layer:
            // true = sliding window).
            float base_swa = 10000.0f;
            if (auto b = f.get_float(p + "rope.freq_base_swa")) {
                if (!(*b > 1.0 && *b < 1e12)) {
                    fail(LLMKV_ERR_MODEL_FORMAT, "%srope.freq_base_swa = %g out of range",
                         p.c_str(), *b);
                }
                base_swa = float(*b);
            }
            c.ropes.push_back(LayerRope{base_swa, 1.0f, false});
            std::vector<bool> local(c.n_layers);
            const GgufValue *pattern = f.find(p + "attention.sliding_window_pattern");
            if (pattern && pattern->type == GgufValueType::ARRAY) {
                const std::vector<int64_t> *flags =
                    f.get_int_array(p + "attention.sliding_window_pattern");
                if (!flags || flags->size() != c.n_layers) {
                    fail(LLMKV_ERR_MODEL_FORMAT,
                         "%sattention.sliding_window_pattern has %zu entries for %u layers",
                         p.c_str(), pattern->array_size(), c.n_layers);
                }
                for (uint32_t l = 0; l < c.n_layers; ++l) local[l] = (*flags)[l] != 0;
            } else {
                const uint32_t period =
                    optional_u32(f, p + "attention.sliding_window_pattern", 6, 1, 1u << 16);
                for (uint32_t l = 0; l < c.n_layers; ++l) local[l] = (l + 1) % period != 0;
            }
            for (uint32_t l = 0; l < c.n_layers; ++l) {
                if (local[l]) {
                    c.layer_window[l] = c.sliding_window;
                    c.layer_rope[l] = 1;
                }
            }
        }
    }
    // Phi-3 files carry attention.sliding_window too; like llama.cpp, llmkv runs Phi-3 with
    // full attention (the converters do not say which layers use it).
}

void LlamaModel::bind_weights() {
    const GgufFile &f = *file_;
    LlamaConfig &c = config_;
    const std::string p = c.architecture + ".";
    const GgufTensor *embd = f.find_tensor("token_embd.weight");
    if (!embd || embd->dims.size() != 2)
        fail(LLMKV_ERR_MODEL_FORMAT, "missing or malformed tensor token_embd.weight");
    if (embd->dims[1] < 1 || embd->dims[1] > (1 << 22)) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor token_embd.weight: vocabulary size %lld out of range",
             (long long)embd->dims[1]);
    }
    c.n_vocab = uint32_t(embd->dims[1]);
    if (auto vocab = f.get_uint(p + "vocab_size")) {
        if (*vocab != c.n_vocab) {
            fail(LLMKV_ERR_MODEL_FORMAT, "%svocab_size %llu differs from token_embd rows %u",
                 p.c_str(), (unsigned long long)*vocab, c.n_vocab);
        }
    }
    token_embd_ = matrix("token_embd.weight", c.n_vocab, c.n_embd);
    output_norm_ = f32_vector("output_norm.weight", c.n_embd, true);
    if (f.find_tensor("output.weight")) {
        output_ = matrix("output.weight", c.n_vocab, c.n_embd);
    } else {
        c.tied_output = true;
        output_ = token_embd_;
    }
    if (c.architecture == "phi3") {
        // rope_factors_short applies up to the original context; the long factors need the
        // attention factor of the 128k variants (not supported yet: they are not used).
        rope_freq_factors_ = f32_vector("rope_factors_short.weight", c.rope_dim / 2, false);
        if (const GgufTensor *t = f.find_tensor("rope_factors_long.weight")) {
            n_params_ += t->n_elements;
            weight_bytes_ += t->n_bytes;
        }
    } else {
        rope_freq_factors_ = f32_vector("rope_freqs.weight", c.rope_dim / 2, false);
    }

    layers_.resize(c.n_layers);
    const bool phi3 = c.architecture == "phi3";
    for (uint32_t l = 0; l < c.n_layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        LlamaLayer &L = layers_[l];
        L.attn_norm = f32_vector(b + "attn_norm.weight", c.n_embd, true);
        if (phi3 && f.find_tensor(b + "attn_qkv.weight")) {
            WeightMatrix qkv = matrix(b + "attn_qkv.weight", c.q_dim() + 2 * c.kv_dim(), c.n_embd);
            L.wq = row_range(qkv, 0, c.q_dim());
            L.wk = row_range(qkv, c.q_dim(), c.kv_dim());
            L.wv = row_range(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
        } else {
            L.wq = matrix(b + "attn_q.weight", c.q_dim(), c.n_embd);
            L.wk = matrix(b + "attn_k.weight", c.kv_dim(), c.n_embd);
            L.wv = matrix(b + "attn_v.weight", c.kv_dim(), c.n_embd);
        }
        L.wo = matrix(b + "attn_output.weight", c.n_embd, c.q_dim());
        // Q/K/V biases: always on qwen2, where the file has them on qwen2moe (Qwen1.5-MoE).
        if (c.architecture == "qwen2" ||
            (c.architecture == "qwen2moe" && f.find_tensor(b + "attn_q.bias"))) {
            L.bq = f32_vector(b + "attn_q.bias", c.q_dim(), true);
            L.bk = f32_vector(b + "attn_k.bias", c.kv_dim(), true);
            L.bv = f32_vector(b + "attn_v.bias", c.kv_dim(), true);
            c.qkv_bias = true;
        }
        if (c.qk_norm) {
            L.q_norm = f32_vector(b + "attn_q_norm.weight", c.head_dim, true);
            L.k_norm = f32_vector(b + "attn_k_norm.weight", c.head_dim, true);
        }
        if (c.post_norms) {
            L.post_attn_norm = f32_vector(b + "post_attention_norm.weight", c.n_embd, true);
            L.post_ffn_norm = f32_vector(b + "post_ffw_norm.weight", c.n_embd, true);
        }
        L.ffn_norm = f32_vector(b + "ffn_norm.weight", c.n_embd, true);
        if (c.is_moe()) {
            bind_moe(L, b);
            continue;
        }
        if (phi3) {
            WeightMatrix up = matrix(b + "ffn_up.weight", 2 * c.n_ff, c.n_embd);
            L.w_gate = row_range(up, 0, c.n_ff);
            L.w_up = row_range(up, c.n_ff, c.n_ff);
        } else {
            L.w_gate = matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd);
            L.w_up = matrix(b + "ffn_up.weight", c.n_ff, c.n_embd);
        }
        L.w_down = matrix(b + "ffn_down.weight", c.n_embd, c.n_ff);
    }
}

std::unique_ptr<LlamaModel> LlamaModel::load(std::shared_ptr<const GgufFile> file) {
    std::unique_ptr<LlamaModel> m(new LlamaModel());
    m->file_ = std::move(file);
    m->read_config();
    m->bind_weights();
    const GgufFile &f = *m->file_;
    const LlamaConfig &c = m->config_;

    std::string desc = strprintf("%s|%u|%u|%u|%u|%u|%u|%u|%g|%g|%g|%u", c.architecture.c_str(),
                                 c.n_vocab, c.n_embd, c.n_ff, c.n_layers, c.n_heads, c.n_kv_heads,
                                 c.head_dim, double(c.rope_freq_base), double(c.rope_freq_scale),
                                 double(c.rms_eps), c.n_ctx_train);
    if (c.architecture != "llama") {  // (llama's description, and so its salts, stay as they were)
        for (uint32_t l = 0; l < c.n_layers; ++l) {
            const LayerRope &r = c.rope(l);
            desc += strprintf("|%u:%g:%g", c.window(l), double(r.freq_base), double(r.freq_scale));
        }
        desc += strprintf("|%g|%g", double(c.attn_scale), double(c.embd_scale));
    }
    if (c.is_moe()) {
        const MoeConfig &mo = c.moe;
        const ExpertRouting &r = mo.routing;
        desc +=
            strprintf("|moe:%u:%u:%u:%u:%d:%d:%g", r.n_expert, r.n_used, mo.n_ff_expert,
                      mo.n_ff_shared, int(r.gating), int(r.norm_weights), double(r.weight_scale));
    }
    uint64_t h = fnv1a(desc);
    for (const GgufTensor &t : f.tensors()) {
        h = fnv1a(t.name, h);
        h = fnv1a(strprintf("%u:%llu:%llu", unsigned(t.type), (unsigned long long)t.n_bytes,
                            (unsigned long long)t.offset),
                  h);
        // Sample the payload too, so two quantizations of one model differ.
        size_t n = std::min<uint64_t>(t.n_bytes, 64);
        h = fnv1a(std::string(reinterpret_cast<const char *>(t.data), n), h);
    }
    m->fingerprint_ = strprintf("%016llx", (unsigned long long)h);
    return m;
}

}  // namespace llmkv
