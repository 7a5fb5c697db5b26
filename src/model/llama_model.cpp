// LlamaModel: reads llama-family hyperparameters and binds weight tensors in place.
#include "model/llama_model.h"

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

}  // namespace

const float *LlamaModel::f32_vector(const std::string &name, uint32_t n, bool required) {
    const GgufTensor *t = file_->find_tensor(name);
    if (!t) {
        if (required) fail(LLMKV_ERR_MODEL_FORMAT, "missing tensor %s", name.c_str());
        return nullptr;
    }
    if (t->dims.size() != 1 || t->dims[0] != int64_t(n)) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor %s: expected shape [%u], got %zu dims (dims[0] = %lld)",
             name.c_str(), n, t->dims.size(), (long long)t->dims[0]);
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

std::unique_ptr<LlamaModel> LlamaModel::load(std::shared_ptr<const GgufFile> file) {
    std::unique_ptr<LlamaModel> m(new LlamaModel());
    m->file_ = std::move(file);
    const GgufFile &f = *m->file_;
    LlamaConfig &c = m->config_;

    auto arch = f.get_string("general.architecture");
    if (!arch) fail(LLMKV_ERR_MODEL_FORMAT, "missing metadata key general.architecture");
    if (*arch != "llama") {
        fail(LLMKV_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: llama)",
             arch->c_str());
    }
    c.architecture = *arch;
    c.name = f.get_string("general.name").value_or("");
    const std::string p = c.architecture + ".";
    c.n_layers = require_u32(f, p + "block_count", 1, 1024);
    c.n_embd = require_u32(f, p + "embedding_length", 1, 65536);
    c.n_ff = require_u32(f, p + "feed_forward_length", 1, 1u << 20);
    c.n_heads = require_u32(f, p + "attention.head_count", 1, 1024);
    c.n_kv_heads = optional_u32(f, p + "attention.head_count_kv", c.n_heads, 1, c.n_heads);
    c.n_ctx_train = optional_u32(f, p + "context_length", 2048, 1, 1u << 24);
    if (c.n_heads % c.n_kv_heads != 0) {
        fail(LLMKV_ERR_MODEL_FORMAT, "attention.head_count %u is not a multiple of head_count_kv %u",
             c.n_heads, c.n_kv_heads);
    }
    if (c.n_embd % c.n_heads != 0) {
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
    if (c.rope_dim % 2 != 0) fail(LLMKV_ERR_MODEL_FORMAT, "rope.dimension_count %u is odd", c.rope_dim);
    if (auto base = f.get_float(p + "rope.freq_base")) {
        if (!(*base > 1.0 && *base < 1e12)) {
            fail(LLMKV_ERR_MODEL_FORMAT, "metadata %srope.freq_base = %g out of range", p.c_str(), *base);
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
            fail(LLMKV_ERR_MODEL_FORMAT, "attention.layer_norm_rms_epsilon = %g out of range", *eps);
        }
        c.rms_eps = float(*eps);
    }

    const GgufTensor *embd = f.find_tensor("token_embd.weight");
    if (!embd || embd->dims.size() != 2) fail(LLMKV_ERR_MODEL_FORMAT, "missing or malformed tensor token_embd.weight");
    if (embd->dims[1] < 1 || embd->dims[1] > (1 << 22)) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tensor token_embd.weight: vocabulary size %lld out of range",
             (long long)embd->dims[1]);
    }
    c.n_vocab = uint32_t(embd->dims[1]);
    if (auto vocab = f.get_uint(p + "vocab_size")) {
        if (*vocab != c.n_vocab) {
            fail(LLMKV_ERR_MODEL_FORMAT, "%svocab_size %llu differs from token_embd rows %u", p.c_str(),
                 (unsigned long long)*vocab, c.n_vocab);
        }
    }
    m->token_embd_ = m->matrix("token_embd.weight", c.n_vocab, c.n_embd);
    m->output_norm_ = m->f32_vector("output_norm.weight", c.n_embd, true);
    if (f.find_tensor("output.weight")) {
        m->output_ = m->matrix("output.weight", c.n_vocab, c.n_embd);
    } else {
        c.tied_output = true;
        m->output_ = m->token_embd_;
    }
    m->rope_freq_factors_ = m->f32_vector("rope_freqs.weight", c.rope_dim / 2, false);

    m->layers_.resize(c.n_layers);
    for (uint32_t l = 0; l < c.n_layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        LlamaLayer &L = m->layers_[l];
        L.attn_norm = m->f32_vector(b + "attn_norm.weight", c.n_embd, true);
        L.wq = m->matrix(b + "attn_q.weight", c.q_dim(), c.n_embd);
        L.wk = m->matrix(b + "attn_k.weight", c.kv_dim(), c.n_embd);
        L.wv = m->matrix(b + "attn_v.weight", c.kv_dim(), c.n_embd);
        L.wo = m->matrix(b + "attn_output.weight", c.n_embd, c.q_dim());
        L.ffn_norm = m->f32_vector(b + "ffn_norm.weight", c.n_embd, true);
        L.w_gate = m->matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd);
        L.w_up = m->matrix(b + "ffn_up.weight", c.n_ff, c.n_embd);
        L.w_down = m->matrix(b + "ffn_down.weight", c.n_embd, c.n_ff);
    }

    std::string desc = strprintf("%s|%u|%u|%u|%u|%u|%u|%u|%g|%g|%g|%u", c.architecture.c_str(),
                                 c.n_vocab, c.n_embd, c.n_ff, c.n_layers, c.n_heads, c.n_kv_heads,
                                 c.head_dim, double(c.rope_freq_base), double(c.rope_freq_scale),
                                 double(c.rms_eps), c.n_ctx_train);
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
