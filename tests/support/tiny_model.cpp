// Tiny synthetic Llama models: writer and the naive f32 reference forward pass.
#include "tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numbers>
#include <random>
#include <stdexcept>

#include "gguf_writer.h"
#include "platform/os.h"
#include "quant_reference.h"

namespace llmkv::testing {

namespace {

// GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to U+0100 + k.
std::string byte_token(int b) {
    auto printable = [](int c) {
        return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
    };
    int cp = b;
    if (!printable(b)) {
        int k = 0;
        for (int c = 0; c < b; ++c) k += printable(c) ? 0 : 1;
        cp = 256 + k;
    }
    std::string s;
    if (cp < 0x80) {
        s += char(cp);
    } else {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
    }
    return s;
}

struct Weights {
    std::map<std::string, std::vector<float>> values;  // dequantized, as the engine sees them
};

std::vector<float> random_values(std::mt19937_64 &rng, size_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto &x : v) x = dist(rng);
    return v;
}

// Builds the file and (optionally) the dequantized weights the file holds.
std::vector<uint8_t> build(const TinyModelSpec &s, Weights *out) {
    GgufWriter w;
    const uint32_t V = TinyVocab::kSize, E = s.n_embd, hd = s.hd();
    const std::string a = s.arch, p = a + ".";
    w.add_string("general.architecture", a);
    w.add_string("general.name", "tiny-test-model");
    w.add_uint32(p + "block_count", s.n_layers);
    w.add_uint32(p + "context_length", s.n_ctx);
    w.add_uint32(p + "embedding_length", E);
    w.add_uint32(p + "feed_forward_length", s.n_ff);
    w.add_uint32(p + "attention.head_count", s.n_heads);
    w.add_uint32(p + "attention.head_count_kv", s.n_kv_heads);
    w.add_float32(p + "rope.freq_base", s.rope_base);
    w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_uint32(p + "rope.dimension_count", hd);
    if (s.head_dim) {
        w.add_uint32(p + "attention.key_length", hd);
        w.add_uint32(p + "attention.value_length", hd);
    }
    if (s.sliding_window) w.add_uint32(p + "attention.sliding_window", s.sliding_window);
    if (s.window_pattern) w.add_uint32(p + "attention.sliding_window_pattern", s.window_pattern);
    if (a == "llama") w.add_uint32(p + "vocab_size", V);
    const uint32_t FE = a == "llama" ? s.n_ff : s.n_ff_expert;
    if (s.n_expert) {
        w.add_uint32(p + "expert_count", s.n_expert);
        if (s.write_expert_used) w.add_uint32(p + "expert_used_count", s.n_expert_used);
        if (a != "llama") w.add_uint32(p + "expert_feed_forward_length", FE);
        if (s.n_ff_shared) w.add_uint32(p + "expert_shared_feed_forward_length", s.n_ff_shared);
    }

    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(byte_token(b));
        types.push_back(1);
    }
    const char *merges[TinyVocab::kNumMerges][2] = {
        {"t", "h"}, {"th", "e"}, {"\xC4\xA0", "the"}, {"a", "n"}};
    std::vector<std::string> merge_strings;
    for (auto &m : merges) {
        tokens.push_back(std::string(m[0]) + m[1]);
        types.push_back(1);
        merge_strings.push_back(std::string(m[0]) + " " + m[1]);
    }
    for (const char *special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        tokens.push_back(special);
        types.push_back(3);
    }
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "smollm");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_int32_array("tokenizer.ggml.token_type", types);
    w.add_string_array("tokenizer.ggml.merges", merge_strings);
    w.add_uint32("tokenizer.ggml.bos_token_id", TinyVocab::kEndOfText);
    w.add_uint32("tokenizer.ggml.eos_token_id", TinyVocab::kEndOfText);
    w.add_bool("tokenizer.ggml.add_bos_token", false);

    std::mt19937_64 rng(s.seed);
    auto tensor = [&](const std::string &name, std::vector<int64_t> dims, TensorType type,
                      float scale, float offset = 0.0f) {
        size_t n = 1;
        for (int64_t d : dims) n *= size_t(d);
        std::vector<float> v = random_values(rng, n, scale);
        for (auto &x : v) x += offset;
        std::vector<uint8_t> bytes = quantize_reference(type, v.data(), int64_t(n));
        if (out) out->values[name] = dequantize_reference(type, bytes.data(), int64_t(n));
        w.add_tensor(name, dims, type, std::move(bytes));
    };
    const uint32_t kvd = s.n_kv_heads * hd, qd = s.n_heads * hd;
    tensor("token_embd.weight", {E, V}, s.embd_type, s.embd_scale);
    tensor("output_norm.weight", {E}, TensorType::F32, 0.1f, 1.0f);
    if (!s.tied_output) tensor("output.weight", {E, V}, s.weight_type, 0.2f);
    for (uint32_t l = 0; l < s.n_layers; ++l) {
        std::string b = "blk." + std::to_string(l) + ".";
        tensor(b + "attn_norm.weight", {E}, TensorType::F32, 0.1f, 1.0f);
        if (a == "phi3") {
            tensor(b + "attn_qkv.weight", {E, qd + 2 * kvd}, s.weight_type, 0.25f);
        } else {
            tensor(b + "attn_q.weight", {E, qd}, s.weight_type, 0.25f);
            tensor(b + "attn_k.weight", {E, kvd}, s.weight_type, 0.25f);
            tensor(b + "attn_v.weight", {E, kvd}, s.weight_type, 0.25f);
        }
        if (a == "qwen2" || a == "qwen2moe") {
            tensor(b + "attn_q.bias", {qd}, TensorType::F32, 0.3f);
            tensor(b + "attn_k.bias", {kvd}, TensorType::F32, 0.3f);
            tensor(b + "attn_v.bias", {kvd}, TensorType::F32, 0.3f);
        }
        if (a == "gemma3" || a == "qwen3" || a == "qwen3moe") {
            tensor(b + "attn_q_norm.weight", {hd}, TensorType::F32, 0.1f, 1.0f);
            tensor(b + "attn_k_norm.weight", {hd}, TensorType::F32, 0.1f, 1.0f);
        }
        tensor(b + "attn_output.weight", {qd, E}, s.weight_type, 0.1f);
        if (a == "gemma3")
            tensor(b + "post_attention_norm.weight", {E}, TensorType::F32, 0.1f, 1.0f);
        tensor(b + "ffn_norm.weight", {E}, TensorType::F32, 0.1f, 1.0f);
        if (s.n_expert) {
            const uint32_t NE = s.n_expert;
            tensor(b + "ffn_gate_inp.weight", {E, NE}, TensorType::F32, s.router_scale);
            tensor(b + "ffn_gate_exps.weight", {E, FE, NE}, s.weight_type, 0.2f);
            tensor(b + "ffn_up_exps.weight", {E, FE, NE}, s.weight_type, 0.2f);
            tensor(b + "ffn_down_exps.weight", {FE, E, s.n_expert_down ? s.n_expert_down : NE},
                   s.weight_type, 0.1f);
            if (s.n_ff_shared) {
                tensor(b + "ffn_gate_inp_shexp.weight", {E}, TensorType::F32, 0.3f);
                tensor(b + "ffn_gate_shexp.weight", {E, s.n_ff_shared}, s.weight_type, 0.2f);
                tensor(b + "ffn_up_shexp.weight", {E, s.n_ff_shared}, s.weight_type, 0.2f);
                tensor(b + "ffn_down_shexp.weight", {s.n_ff_shared, E}, s.weight_type, 0.1f);
            }
            continue;
        }
        if (a == "phi3") {
            tensor(b + "ffn_up.weight", {E, 2 * s.n_ff}, s.weight_type, 0.2f);
        } else {
            tensor(b + "ffn_gate.weight", {E, s.n_ff}, s.weight_type, 0.2f);
            tensor(b + "ffn_up.weight", {E, s.n_ff}, s.weight_type, 0.2f);
        }
        tensor(b + "ffn_down.weight", {s.n_ff, E}, s.weight_type, 0.1f);
        if (a == "gemma3") tensor(b + "post_ffw_norm.weight", {E}, TensorType::F32, 0.1f, 1.0f);
    }
    return w.build();
}

void rms_norm_ref(const std::vector<double> &x, const std::vector<float> &w,
                  std::vector<double> &out) {
    double ss = 0;
    for (double v : x) ss += v * v;
    double scale = 1.0 / std::sqrt(ss / double(x.size()) + 1e-5);
    out.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * w[i];
}

bool is_block_quantized(TensorType t) {
    return t == TensorType::Q8_0 || t == TensorType::Q4_0 || t == TensorType::Q4_1;
}

// The CPU matmul multiplies block-quantized weights by activations quantized to 8 bits per
// 32-element block (scale = max|x| / 127, round to nearest); the reference does the same
// so that only float rounding separates the two.
std::vector<double> quantize_activations(const std::vector<double> &x) {
    std::vector<double> out(x.size());
    for (size_t b = 0; b < x.size(); b += 32) {
        float amax = 0.0f;
        for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(float(x[i])));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (size_t i = b; i < b + 32; ++i) out[i] = double(std::nearbyint(float(x[i]) * id)) * d;
    }
    return out;
}

// y = W x with W stored (rows, cols) row-major as GGUF does (dims[0] = cols).
std::vector<double> matvec(const std::vector<float> &W, size_t rows, size_t cols,
                           const std::vector<double> &x_in, TensorType type = TensorType::F32) {
    const std::vector<double> x = is_block_quantized(type) ? quantize_activations(x_in) : x_in;
    std::vector<double> y(rows, 0.0);
    for (size_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (size_t c = 0; c < cols; ++c) acc += double(W[r * cols + c]) * x[c];
        y[r] = acc;
    }
    return y;
}

// Rotates pairs (2i, 2i+1) (Llama as GGUF stores it) or (i, i + hd/2) (NeoX) by
// pos * base^(-2i/hd).
void rope_ref(std::vector<double> &v, uint32_t n_heads, uint32_t hd, uint32_t pos, double base,
              bool neox = false) {
    for (uint32_t h = 0; h < n_heads; ++h) {
        for (uint32_t i = 0; i < hd / 2; ++i) {
            double theta = pos * std::pow(base, -2.0 * i / hd);
            double c = std::cos(theta), s = std::sin(theta);
            const size_t i0 = h * hd + (neox ? i : 2 * i), i1 = neox ? i0 + hd / 2 : i0 + 1;
            double &x0 = v[i0], &x1 = v[i1];
            double a = x0, b = x1;
            x0 = a * c - b * s;
            x1 = a * s + b * c;
        }
    }
}

// Rows [row0, row0 + n) of a (rows, cols) row-major matrix.
std::vector<float> rows_of(const std::vector<float> &m, size_t cols, size_t row0, size_t n) {
    return std::vector<float>(m.begin() + row0 * cols, m.begin() + (row0 + n) * cols);
}

// SwiGLU FFN of a (n_ff, E) gate and up and an (E, n_ff) down: down (silu(gate x) * up x).
std::vector<double> swiglu_ffn(const std::vector<float> &gate, const std::vector<float> &up,
                               const std::vector<float> &down, uint32_t n_ff, uint32_t E,
                               const std::vector<double> &x, TensorType type) {
    std::vector<double> g = matvec(gate, n_ff, E, x, type), u = matvec(up, n_ff, E, x, type);
    for (uint32_t i = 0; i < n_ff; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return matvec(down, E, n_ff, g, type);
}

// The mixture of experts in double precision: softmax over the router logits, the n_used
// most probable experts (ties to the lower id), their probabilities as weights (divided by
// their sum except on qwen2moe), plus qwen2moe's sigmoid-gated shared expert.
std::vector<double> moe_ref(const TinyModelSpec &s, std::map<std::string, std::vector<float>> &v,
                            const std::string &b, const std::vector<double> &xn) {
    const uint32_t E = s.n_embd, NE = s.n_expert, K = s.n_expert_used;
    const uint32_t FE = s.arch == "llama" ? s.n_ff : s.n_ff_expert;
    std::vector<double> z = matvec(v[b + "ffn_gate_inp.weight"], NE, E, xn);
    const double zmax = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double &e : z) sum += (e = std::exp(e - zmax));
    for (double &e : z) e /= sum;
    std::vector<uint32_t> order(NE);
    for (uint32_t i = 0; i < NE; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t i, uint32_t j) { return z[i] > z[j]; });
    double wsum = 0;
    for (uint32_t k = 0; k < K; ++k) wsum += z[order[k]];
    std::vector<double> out(E, 0.0);
    for (uint32_t k = 0; k < K; ++k) {
        const uint32_t e = order[k];
        const double w = s.arch == "qwen2moe" ? z[e] : z[e] / wsum;
        const size_t m = size_t(FE) * E;
        auto slice = [&](const std::string &n) {
            const std::vector<float> &all = v[b + n];
            return std::vector<float>(all.begin() + e * m, all.begin() + (e + 1) * m);
        };
        std::vector<double> f =
            swiglu_ffn(slice("ffn_gate_exps.weight"), slice("ffn_up_exps.weight"),
                       slice("ffn_down_exps.weight"), FE, E, xn, s.weight_type);
        for (uint32_t i = 0; i < E; ++i) out[i] += w * f[i];
    }
    if (s.n_ff_shared) {
        std::vector<double> f =
            swiglu_ffn(v[b + "ffn_gate_shexp.weight"], v[b + "ffn_up_shexp.weight"],
                       v[b + "ffn_down_shexp.weight"], s.n_ff_shared, E, xn, s.weight_type);
        const double g = matvec(v[b + "ffn_gate_inp_shexp.weight"], 1, E, xn)[0];
        for (uint32_t i = 0; i < E; ++i) out[i] += f[i] / (1.0 + std::exp(-g));
    }
    return out;
}

}  // namespace

std::vector<uint8_t> build_tiny_model(const TinyModelSpec &spec) {
    return build(spec, nullptr);
}

void write_tiny_model(const TinyModelSpec &spec, const std::string &path) {
    std::vector<uint8_t> bytes = build(spec, nullptr);
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot write " + path);
    size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    if (n != bytes.size()) throw std::runtime_error("short write to " + path);
}

std::vector<std::vector<float>> reference_logits(const TinyModelSpec &s,
                                                 const std::vector<int32_t> &tokens) {
    Weights W;
    build(s, &W);
    auto &v = W.values;
    const std::string &a = s.arch;
    const bool gemma = a == "gemma3", neox = a != "llama",
               qk_norm = gemma || a == "qwen3" || a == "qwen3moe";
    const uint32_t E = s.n_embd, hd = s.hd(), qd = s.n_heads * hd, kvd = s.n_kv_heads * hd,
                   V = TinyVocab::kSize;
    const uint32_t group = s.n_heads / s.n_kv_heads;
    // Gemma 3 layer kinds: local (sliding window, base rope_base_local) unless (l+1) % period == 0.
    const uint32_t period = s.window_pattern ? s.window_pattern : 6;
    auto window_of = [&](uint32_t l) -> uint32_t {
        return gemma && s.sliding_window && (l + 1) % period != 0 ? s.sliding_window : 0;
    };
    std::vector<std::vector<std::vector<double>>> K(s.n_layers), Vv(s.n_layers);
    std::vector<std::vector<float>> all_logits;
    auto fp16_round = [](double x) {
        // The engine stores K/V as fp16; the reference does the same rounding.
        return double(dequantize_reference(
            TensorType::F16,
            quantize_reference(TensorType::F16, std::vector<float>{float(x)}.data(), 1).data(),
            1)[0]);
    };
    auto head_norm = [&](std::vector<double> &x, uint32_t n_heads, const std::vector<float> &w) {
        for (uint32_t h = 0; h < n_heads; ++h) {
            std::vector<double> in(x.begin() + h * hd, x.begin() + (h + 1) * hd), out;
            rms_norm_ref(in, w, out);
            std::copy(out.begin(), out.end(), x.begin() + h * hd);
        }
    };
    for (uint32_t pos = 0; pos < tokens.size(); ++pos) {
        std::vector<double> x(E);
        for (uint32_t i = 0; i < E; ++i) x[i] = v["token_embd.weight"][size_t(tokens[pos]) * E + i];
        if (gemma) {
            for (auto &e : x) e *= double(std::sqrt(float(E)));
        }
        for (uint32_t l = 0; l < s.n_layers; ++l) {
            std::string b = "blk." + std::to_string(l) + ".";
            std::vector<double> xn;
            rms_norm_ref(x, v[b + "attn_norm.weight"], xn);
            std::vector<double> q, k, val;
            if (a == "phi3") {
                const auto &qkv = v[b + "attn_qkv.weight"];
                q = matvec(rows_of(qkv, E, 0, qd), qd, E, xn, s.weight_type);
                k = matvec(rows_of(qkv, E, qd, kvd), kvd, E, xn, s.weight_type);
                val = matvec(rows_of(qkv, E, qd + kvd, kvd), kvd, E, xn, s.weight_type);
            } else {
                q = matvec(v[b + "attn_q.weight"], qd, E, xn, s.weight_type);
                k = matvec(v[b + "attn_k.weight"], kvd, E, xn, s.weight_type);
                val = matvec(v[b + "attn_v.weight"], kvd, E, xn, s.weight_type);
            }
            if (a == "qwen2" || a == "qwen2moe") {
                for (uint32_t i = 0; i < qd; ++i) q[i] += v[b + "attn_q.bias"][i];
                for (uint32_t i = 0; i < kvd; ++i) k[i] += v[b + "attn_k.bias"][i];
                for (uint32_t i = 0; i < kvd; ++i) val[i] += v[b + "attn_v.bias"][i];
            }
            if (qk_norm) {
                head_norm(q, s.n_heads, v[b + "attn_q_norm.weight"]);
                head_norm(k, s.n_kv_heads, v[b + "attn_k_norm.weight"]);
            }
            const uint32_t window = window_of(l);
            const double base = window ? s.rope_base_local : s.rope_base;
            rope_ref(q, s.n_heads, hd, pos, base, neox);
            rope_ref(k, s.n_kv_heads, hd, pos, base, neox);
            for (auto &e : k) e = fp16_round(e);
            for (auto &e : val) e = fp16_round(e);
            K[l].push_back(k);
            Vv[l].push_back(val);
            const uint32_t lo = window && pos + 1 > window ? pos + 1 - window : 0;
            std::vector<double> att(qd, 0.0);
            for (uint32_t h = 0; h < s.n_heads; ++h) {
                uint32_t kh = h / group;
                std::vector<double> sc(pos + 1, 0.0);
                double mx = -1e300;
                for (uint32_t t = lo; t <= pos; ++t) {
                    double d = 0;
                    for (uint32_t i = 0; i < hd; ++i) d += q[h * hd + i] * K[l][t][kh * hd + i];
                    sc[t] = d / std::sqrt(double(hd));
                    mx = std::max(mx, sc[t]);
                }
                double sum = 0;
                for (uint32_t t = lo; t <= pos; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
                for (uint32_t t = lo; t <= pos; ++t) {
                    for (uint32_t i = 0; i < hd; ++i)
                        att[h * hd + i] += sc[t] / sum * Vv[l][t][kh * hd + i];
                }
            }
            auto o = matvec(v[b + "attn_output.weight"], E, qd, att, s.weight_type);
            if (gemma) {
                std::vector<double> on;
                rms_norm_ref(o, v[b + "post_attention_norm.weight"], on);
                o = on;
            }
            for (uint32_t i = 0; i < E; ++i) x[i] += o[i];
            rms_norm_ref(x, v[b + "ffn_norm.weight"], xn);
            if (s.n_expert) {
                std::vector<double> f = moe_ref(s, v, b, xn);
                for (uint32_t i = 0; i < E; ++i) x[i] += f[i];
                continue;
            }
            std::vector<double> g, u;
            if (a == "phi3") {
                const auto &gu = v[b + "ffn_up.weight"];
                g = matvec(rows_of(gu, E, 0, s.n_ff), s.n_ff, E, xn, s.weight_type);
                u = matvec(rows_of(gu, E, s.n_ff, s.n_ff), s.n_ff, E, xn, s.weight_type);
            } else {
                g = matvec(v[b + "ffn_gate.weight"], s.n_ff, E, xn, s.weight_type);
                u = matvec(v[b + "ffn_up.weight"], s.n_ff, E, xn, s.weight_type);
            }
            for (uint32_t i = 0; i < s.n_ff; ++i) {
                if (gemma) {
                    const double z = g[i];
                    g[i] = 0.5 * z *
                           (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) *
                                            (z + 0.044715 * z * z * z))) *
                           u[i];
                } else {
                    g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
                }
            }
            auto d = matvec(v[b + "ffn_down.weight"], E, s.n_ff, g, s.weight_type);
            if (gemma) {
                std::vector<double> dn;
                rms_norm_ref(d, v[b + "post_ffw_norm.weight"], dn);
                d = dn;
            }
            for (uint32_t i = 0; i < E; ++i) x[i] += d[i];
        }
        std::vector<double> xn;
        rms_norm_ref(x, v["output_norm.weight"], xn);
        const auto &head = s.tied_output ? v["token_embd.weight"] : v["output.weight"];
        auto logits = matvec(head, V, E, xn, s.tied_output ? s.embd_type : s.weight_type);
        all_logits.emplace_back(logits.begin(), logits.end());
    }
    return all_logits;
}

std::string temp_path(const std::string &name) {
    const char *dir = std::getenv("TMPDIR");
    const std::string base =
        dir && *dir ? std::string(dir) : std::filesystem::temp_directory_path().string();
    return base + "/llmkv_test_" + std::to_string(llmkv::os::process_id()) + "_" + name;
}

}  // namespace llmkv::testing
