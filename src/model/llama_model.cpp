// LlamaModel: reads llama-family hyperparameters and binds weight tensors in place.
#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/float_math.h"
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
           a == "qwen2moe" || a == "qwen3moe" || a == "gpt-oss";
}

// Rows [row0, row0 + n) of a matrix: a view of a fused tensor (Phi-3's attn_qkv, ffn_up).
WeightMatrix row_range(const WeightMatrix &w, uint32_t row0, uint32_t n) {
    WeightMatrix r = w;
    r.data = static_cast<const uint8_t *>(w.data) + size_t(row0) * w.row_bytes;
    r.rows = n;
    return r;
}

// The mixture-of-experts keys (llama.cpp's names): qwen2moe, qwen3moe and gpt-oss always have
// experts, llama has them when expert_count > 1 (Mixtral; llama.cpp treats 0 and 1 as dense).
void read_moe_config(const GgufFile &f, const std::string &p, LlamaConfig &c) {
    const std::string &a = c.architecture;
    const bool oss = a == "gpt-oss";
    const bool qwen_moe = a == "qwen2moe" || a == "qwen3moe" || oss;
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
    // gpt-oss: the key is required (llama.cpp reads it unconditionally).
    m.n_ff_expert = oss        ? require_u32(f, p + "expert_feed_forward_length", 1, 1u << 20)
                    : qwen_moe ? optional_u32(f, p + "expert_feed_forward_length",
                                              std::max(1u, c.n_ff / r.n_used), 1, 1u << 20)
                               : c.n_ff;
    if (a == "qwen2moe") {
        m.n_ff_shared =
            optional_u32(f, p + "expert_shared_feed_forward_length", c.n_ff, 1, 1u << 20);
    }
    // gpt-oss: the best logits, weighed by the softmax over them (llama.cpp's SOFTMAX_WEIGHT).
    r.gating = oss ? ExpertRouting::Gating::kSoftmaxChosen : ExpertRouting::Gating::kSoftmax;
    // llama.cpp: Mixtral and Qwen3-MoE normalize, Qwen2-MoE and gpt-oss not
    r.norm_weights = a != "qwen2moe" && !oss;
    if (auto s = f.get_float(p + "expert_weights_scale")) {
        if (!(*s >= 0 && *s < 1e6))
            fail(LLMKV_ERR_MODEL_FORMAT, "%sexpert_weights_scale = %g out of range", p.c_str(), *s);
        if (*s != 0) r.weight_scale = float(*s);  // 0: not set
    }
}

}  // namespace

std::vector<float> rope_inv_freq(const LayerRope &r, uint32_t rope_dim, const float *factors) {
    std::vector<float> f(rope_dim / 2);
    float lo = 0.0f, hi = 0.0f;
    const bool yarn = r.yarn_ext_factor != 0.0f;
    if (yarn) {
        auto corr = [&](float beta) {  // (C-runtime-independent logs: the same bits anywhere)
            return float(double(rope_dim) *
                         log_double(double(r.yarn_orig_ctx) /
                                    (double(beta) * 2.0 * 3.14159265358979323846)) /
                         (2.0 * log_double(double(r.freq_base))));
        };
        lo = std::max(0.0f, std::floor(corr(r.yarn_beta_fast)));
        hi = std::min(float(rope_dim - 1), std::ceil(corr(r.yarn_beta_slow)));
    }
    for (uint32_t i = 0; i < rope_dim / 2; ++i) {
        double v = 1.0 / pow_double(double(r.freq_base), double(2 * i) / rope_dim);
        if (factors && r.use_freq_factors) v /= factors[i];
        if (yarn) {
            const float y = (float(i) - lo) / std::max(0.001f, hi - lo);
            const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * r.yarn_ext_factor;
            v *= double(r.freq_scale * (1.0f - mix) + mix);
        }
        f[i] = float(v);
    }
    return f;
}

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
    return f32_values(name, *t, n);
}

const float *LlamaModel::f32_rows(const std::string &name, uint32_t rows, uint32_t cols,
                                  bool required) {
    const GgufTensor *t = file_->find_tensor(name);
    if (!t) {
        if (required) fail(LLMKV_ERR_MODEL_FORMAT, "missing tensor %s", name.c_str());
        return nullptr;
    }
    if (t->dims.size() != 2 || t->dims[0] != int64_t(cols) || t->dims[1] != int64_t(rows)) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: expected shape [%u, %u], got [%lld, %lld]%s",
             name.c_str(), cols, rows, (long long)t->dims[0],
             (long long)(t->dims.size() > 1 ? t->dims[1] : 1),
             t->dims.size() > 2 ? " (+more dims)" : "");
    }
    return f32_values(name, *t, size_t(rows) * cols);
}

const float *LlamaModel::f32_values(const std::string &name, const GgufTensor &tensor, size_t n) {
    const GgufTensor *t = &tensor;
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
            for (size_t i = 0; i < n; ++i) {
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
    if (c.architecture == "gpt-oss") {  // the router's and every expert's biases
        L.router_bias = f32_vector(b + "ffn_gate_inp.bias", n, true);
        auto per_expert = [&](const char *name, uint32_t width) {
            const float *all = f32_rows(b + name, n, width, true);
            std::vector<const float *> v(n);
            for (uint32_t e = 0; e < n; ++e) v[e] = all + size_t(e) * width;
            return v;
        };
        L.gate_exps_bias = per_expert("ffn_gate_exps.bias", m.n_ff_expert);
        L.up_exps_bias = per_expert("ffn_up_exps.bias", m.n_ff_expert);
        L.down_exps_bias = per_expert("ffn_down_exps.bias", c.n_embd);
    }
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
             "qwen2moe, qwen3moe, gpt-oss)",
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
    LayerRope yarn;  // yarn_ext_factor 0: no YaRN
    if (auto type = f.get_string(p + "rope.scaling.type")) {
        if (*type == "linear" || *type == "yarn") {
            auto factor = f.get_float(p + "rope.scaling.factor");
            if (factor && *factor > 0 && *factor < 1e6) c.rope_freq_scale = float(1.0 / *factor);
        } else if (*type != "none") {
            fail(LLMKV_ERR_UNSUPPORTED, "rope scaling type '%s' is not supported", type->c_str());
        }
        // YaRN as llama.cpp runs it: extrapolation factor 1 (unless the file says),
        // beta_fast 32 / beta_slow 1 unless the file says, the original context from
        // rope.scaling.original_context_length (else the training context), and the rotated
        // q and k scaled by rope.scaling.attn_factor (1) * (1 + 0.1 ln factor).
        if (*type == "yarn" && c.rope_freq_scale != 1.0f) {
            auto num = [&](const char *key, double dflt, double lo, double hi) {
                auto v = f.get_float(p + key);
                if (!v) return float(dflt);
                if (!(*v >= lo && *v <= hi))
                    fail(LLMKV_ERR_MODEL_FORMAT, "metadata %s%s = %g out of range", p.c_str(), key,
                         *v);
                return float(*v);
            };
            yarn.yarn_ext_factor = num("rope.scaling.yarn_ext_factor", 1.0, 0.0, 1.0);
            yarn.yarn_beta_fast = num("rope.scaling.yarn_beta_fast", 32.0, 1e-3, 1e6);
            yarn.yarn_beta_slow = num("rope.scaling.yarn_beta_slow", 1.0, 1e-3, 1e6);
            const float attn = num("rope.scaling.attn_factor", 1.0, 1e-3, 1e3);
            yarn.attn_factor =
                yarn.yarn_ext_factor != 0.0f
                    ? attn * float(1.0 + 0.1 * log_double(1.0 / double(c.rope_freq_scale)))
                    : attn;
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
    } else if (a == "gpt-oss") {
        c.activation = FfnActivation::kSwigluOai;
        c.attn_sinks = true;
        c.qkv_bias = true;
    }
    read_moe_config(f, p, c);
    if (auto s = f.get_float(p + "attention.scale")) {
        if (!(*s > 0 && *s < 1e3))
            fail(LLMKV_ERR_MODEL_FORMAT, "%sattention.scale = %g out of range", p.c_str(), *s);
        c.attn_scale = float(*s);
    }

    // Per-layer attention: windows and RoPE.
    yarn.freq_base = c.rope_freq_base;
    yarn.freq_scale = c.rope_freq_scale;
    yarn.use_freq_factors = true;
    if (yarn.yarn_ext_factor != 0.0f)
        yarn.yarn_orig_ctx =
            optional_u32(f, p + "rope.scaling.original_context_length", c.n_ctx_train, 1, 1u << 24);
    c.ropes.assign(1, yarn);
    c.layer_rope.assign(c.n_layers, 0);
    c.layer_window.assign(c.n_layers, 0);
    const bool oss = a == "gpt-oss";
    if (a == "gemma3" || oss) {
        c.sliding_window = oss ? require_u32(f, p + "attention.sliding_window", 1, 1u << 24)
                               : optional_u32(f, p + "attention.sliding_window", 0, 0, 1u << 24);
        if (c.sliding_window > 0) {
            // Local layers: the window, RoPE base rope.freq_base_swa (Gemma 3: 10000 and no
            // scaling when absent; gpt-oss: the global layers' RoPE, scaling included).
            // Global layers: layer l is global iff (l + 1) % pattern == 0 (pattern 6; gpt-oss
            // 2: the even layers are local), or as attention.sliding_window_pattern says (a
            // period, or one flag per layer: true = sliding window).
            float base_swa = oss ? c.rope_freq_base : 10000.0f;
            if (auto b = f.get_float(p + "rope.freq_base_swa")) {
                if (!(*b > 1.0 && *b < 1e12)) {
                    fail(LLMKV_ERR_MODEL_FORMAT, "%srope.freq_base_swa = %g out of range",
                         p.c_str(), *b);
                }
                base_swa = float(*b);
            }
            if (oss) {
                LayerRope local = c.ropes[0];
                local.freq_base = base_swa;
                c.ropes.push_back(local);
            } else {
                c.ropes.push_back(LayerRope{base_swa, 1.0f, false});
            }
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
                const uint32_t period = optional_u32(f, p + "attention.sliding_window_pattern",
                                                     oss ? 2 : 6, 1, 1u << 16);
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
        // Q/K/V biases: always on qwen2 and gpt-oss, where the file has them on qwen2moe
        // (Qwen1.5-MoE).
        const bool oss = c.architecture == "gpt-oss";
        if (c.architecture == "qwen2" || oss ||
            (c.architecture == "qwen2moe" && f.find_tensor(b + "attn_q.bias"))) {
            L.bq = f32_vector(b + "attn_q.bias", c.q_dim(), true);
            L.bk = f32_vector(b + "attn_k.bias", c.kv_dim(), true);
            L.bv = f32_vector(b + "attn_v.bias", c.kv_dim(), true);
            c.qkv_bias = true;
        }
        if (oss) {
            L.bo = f32_vector(b + "attn_output.bias", c.n_embd, true);
            L.attn_sinks = f32_vector(b + "attn_sinks.weight", c.n_heads, true);
        }
        if (c.qk_norm) {
            L.q_norm = f32_vector(b + "attn_q_norm.weight", c.head_dim, true);
            L.k_norm = f32_vector(b + "attn_k_norm.weight", c.head_dim, true);
        }
        if (c.post_norms) {
            L.post_attn_norm = f32_vector(b + "post_attention_norm.weight", c.n_embd, true);
            L.post_ffn_norm = f32_vector(b + "post_ffw_norm.weight", c.n_embd, true);
        }
        // gpt-oss names the FFN's norm post_attention_norm (its HF post_attention_layernorm).
        L.ffn_norm = f32_vector(b + (oss ? "post_attention_norm.weight" : "ffn_norm.weight"),
                                c.n_embd, true);
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
    for (const LayerRope &r : c.ropes) {
        if (r.yarn_ext_factor != 0.0f)
            desc += strprintf("|yarn:%g:%g:%g:%u:%g", double(r.yarn_ext_factor),
                              double(r.yarn_beta_fast), double(r.yarn_beta_slow), r.yarn_orig_ctx,
                              double(r.attn_factor));
    }
    if (c.activation == FfnActivation::kSwigluOai)
        desc += strprintf("|oai:%g:%g", double(c.glu_alpha), double(c.glu_limit));
    if (c.attn_sinks) desc += "|sinks";
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
