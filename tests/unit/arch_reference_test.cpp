// Every architecture against HuggingFace transformers (ctest label `arch`): tiny GGUF models
// with random F16 weights, laid out as llama.cpp's converter writes each architecture, and
// the logits transformers computed after loading those very files with its own GGUF loader
// (tests/fixtures/arch/<arch>.{gguf,json}, made by scripts/make_arch_fixtures.py; see
// tests/fixtures/arch/README.md). The runtime runs them with f16 KV on the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "common/thread_pool.h"
#include "kv/kv_cache.h"
#include "llmkv.h"
#include "model/arch/forward.h"
#include "model/gguf.h"
#include "model/llama_model.h"

namespace llmkv {
namespace {

std::string fixture_dir() {
    return LLMKV_TEST_FIXTURES_DIR "/arch/";
}

nlohmann::json load_json(const std::string &path) {
    std::ifstream f(path);
    EXPECT_TRUE(f.good()) << "missing fixture " << path << " (scripts/make_arch_fixtures.py)";
    std::stringstream ss;
    ss << f.rdbuf();
    return nlohmann::json::parse(ss.str());
}

int32_t argmax(const float *row, size_t n) {
    return int32_t(std::max_element(row, row + n) - row);
}

// One architecture's fixture: the model through the engine's own Forward (all-position
// logits), through the decode path (one token at a time) and through the C API.
class ArchReference : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        doc_ = load_json(fixture_dir() + GetParam() + ".json");
        gguf_path_ = fixture_dir() + doc_.at("gguf_file").get<std::string>();
        prompt_ = doc_.at("prompt_ids").get<std::vector<int32_t>>();
        tol_ = doc_.at("tolerance").at("logit_abs").get<double>();
        robust_margin_ = doc_.at("tolerance").at("robust_margin").get<double>();
        n_vocab_ = doc_.at("n_vocab").get<size_t>();
    }

    // Logits of every prompt position. chunk == 0: the whole prompt as one span with
    // all_logits; otherwise spans of `chunk` tokens, keeping each span's last row.
    std::vector<std::vector<float>> run(uint32_t chunk, std::string *error) {
        std::vector<std::vector<float>> rows;
        try {
            auto file = std::shared_ptr<GgufFile>(GgufFile::open(gguf_path_));
            std::unique_ptr<LlamaModel> model = LlamaModel::load(file);
            const LlamaConfig &c = model->config();
            EXPECT_EQ(c.n_vocab, n_vocab_);
            KvGeometry g;
            g.n_layers = c.n_layers;
            g.n_kv_heads = c.n_kv_heads;
            g.head_dim = c.head_dim;
            g.block_tokens = 16;
            g.dtype_k = LLMKV_KV_F16;
            g.dtype_v = LLMKV_KV_F16;
            KvCache cache(g, 16, 2);
            ThreadPool pool(2);
            CpuBackend backend(cache, pool);
            std::unique_ptr<Forward> forward = Forward::create(*model, backend, 128);
            SessionKv kv;
            std::vector<float> logits;
            if (chunk == 0) {
                EXPECT_TRUE(cache.reserve(kv, uint32_t(prompt_.size())));
                ForwardSpan span{&kv, prompt_.data(), uint32_t(prompt_.size()), true};
                span.all_logits = true;
                forward->run({span}, logits);
                EXPECT_EQ(logits.size(), prompt_.size() * n_vocab_);
                for (size_t p = 0; p < prompt_.size(); ++p)
                    rows.emplace_back(logits.begin() + long(p * n_vocab_),
                                      logits.begin() + long((p + 1) * n_vocab_));
            } else {
                for (size_t i = 0; i < prompt_.size(); i += chunk) {
                    uint32_t n = uint32_t(std::min<size_t>(chunk, prompt_.size() - i));
                    EXPECT_TRUE(cache.reserve(kv, kv.n_tokens + n));
                    forward->run({{&kv, prompt_.data() + i, n, true}}, logits);
                    rows.push_back(logits);
                }
            }
            cache.release(kv);
        } catch (const std::exception &e) {
            *error = e.what();
            rows.clear();
        }
        return rows;
    }

    // |ours - ref| over each position's stored top-k, the position's max/mean/std, and the
    // argmax where the reference's top1-top2 gap is comfortable.
    void compare(const std::vector<float> &ours, const nlohmann::json &ref, size_t pos,
                 double *worst) {
        std::vector<int32_t> ids = ref.at("top_ids").get<std::vector<int32_t>>();
        std::vector<double> vals = ref.at("top_logits").get<std::vector<double>>();
        for (size_t k = 0; k < ids.size(); ++k) {
            double e = std::fabs(double(ours[size_t(ids[k])]) - vals[k]);
            *worst = std::max(*worst, e);
            EXPECT_LE(e, tol_) << "position " << pos << " token " << ids[k];
        }
        double mean = 0, sq = 0, mx = -1e30;
        for (float v : ours) {
            mean += v;
            mx = std::max(mx, double(v));
        }
        mean /= double(ours.size());
        for (float v : ours) sq += (v - mean) * (v - mean);
        double sd = std::sqrt(sq / double(ours.size()));
        EXPECT_NEAR(mx, ref.at("max").get<double>(), tol_) << "position " << pos;
        EXPECT_NEAR(mean, ref.at("mean").get<double>(), tol_) << "position " << pos;
        EXPECT_NEAR(sd, ref.at("std").get<double>(), tol_) << "position " << pos;
        if (vals[0] - vals[1] >= robust_margin_) {
            EXPECT_EQ(argmax(ours.data(), ours.size()), ids[0]) << "position " << pos;
        }
    }

    nlohmann::json doc_;
    std::string gguf_path_;
    std::vector<int32_t> prompt_;
    double tol_ = 0, robust_margin_ = 0;
    size_t n_vocab_ = 0;
};

TEST_P(ArchReference, AllPositionLogitsMatchTransformers) {
    std::string error;
    auto rows = run(0, &error);
    ASSERT_TRUE(error.empty()) << GetParam() << ": " << error;
    ASSERT_EQ(rows.size(), prompt_.size());
    const auto &positions = doc_.at("positions");
    double worst = 0;
    for (size_t p = 0; p < rows.size(); ++p) compare(rows[p], positions.at(p), p, &worst);
    std::printf("[arch] %-8s prompt (%zu tokens, one span): max |diff| %.2e (tolerance %.2e)\n",
                GetParam().c_str(), rows.size(), worst, tol_);
}

// The decode path: one token per step over a KV that grows past the sliding window (gemma3:
// window 16, 64 tokens) and across several 16-token blocks.
TEST_P(ArchReference, TokenByTokenLogitsMatchTransformers) {
    std::string error;
    auto rows = run(1, &error);
    ASSERT_TRUE(error.empty()) << GetParam() << ": " << error;
    ASSERT_EQ(rows.size(), prompt_.size());
    const auto &positions = doc_.at("positions");
    double worst = 0;
    for (size_t p = 0; p < rows.size(); ++p) compare(rows[p], positions.at(p), p, &worst);
    std::printf("[arch] %-8s token by token: max |diff| %.2e (tolerance %.2e)\n",
                GetParam().c_str(), worst, tol_);
}

// Uneven chunks (prefill spans that straddle blocks and the window) agree too.
TEST_P(ArchReference, ChunkedPrefillMatchesTransformers) {
    std::string error;
    auto rows = run(7, &error);
    ASSERT_TRUE(error.empty()) << GetParam() << ": " << error;
    const auto &positions = doc_.at("positions");
    double worst = 0;
    for (size_t c = 0; c < rows.size(); ++c) {
        size_t p = std::min(prompt_.size(), (c + 1) * 7) - 1;
        compare(rows[c], positions.at(p), p, &worst);
    }
    std::printf("[arch] %-8s chunks of 7: max |diff| %.2e\n", GetParam().c_str(), worst);
}

// The engine's promise on every architecture (experts, sinks and windows included): a position's
// logits do not change by a bit with the chunking of the prompt (one span, one token per step,
// chunks of 7).
TEST_P(ArchReference, ChunkingIsBitwiseInvariant) {
    std::string error;
    auto whole = run(0, &error);
    ASSERT_TRUE(error.empty()) << GetParam() << ": " << error;
    auto steps = run(1, &error);
    ASSERT_TRUE(error.empty()) << GetParam() << ": " << error;
    auto chunks = run(7, &error);
    ASSERT_TRUE(error.empty()) << GetParam() << ": " << error;
    ASSERT_EQ(whole.size(), prompt_.size());
    ASSERT_EQ(steps.size(), prompt_.size());
    for (size_t p = 0; p < whole.size(); ++p)
        ASSERT_TRUE(whole[p] == steps[p]) << GetParam() << ": position " << p;
    for (size_t c = 0; c < chunks.size(); ++c) {
        const size_t p = std::min(prompt_.size(), (c + 1) * 7) - 1;
        ASSERT_TRUE(whole[p] == chunks[c]) << GetParam() << ": position " << p;
    }
}

// Greedy generation through the C API (f16 KV, CPU) equals transformers' generate() over the
// steps before the first near-tie (and before an end-of-generation token, where it stops).
TEST_P(ArchReference, GreedyTokensMatchTransformers) {
    std::vector<int32_t> expected = doc_.at("generated_ids").get<std::vector<int32_t>>();
    std::vector<double> margins = doc_.at("generated_margins").get<std::vector<double>>();
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = gguf_path_.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = 2;
    ep.kv_dtype_k = LLMKV_KV_F16;
    ep.kv_dtype_v = LLMKV_KV_F16;
    llmkv_engine *e = nullptr;
    ASSERT_EQ(llmkv_engine_create(&ep, &e), LLMKV_OK) << GetParam() << ": " << llmkv_last_error();
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
    EXPECT_EQ(info.n_vocab, n_vocab_);
    EXPECT_EQ(info.bos_token, doc_.at("bos_token_id").get<int32_t>());
    size_t n_expected = 0;
    while (n_expected < expected.size() && margins[n_expected] >= robust_margin_) {
        ++n_expected;
        int32_t t = expected[n_expected - 1];
        if (t == info.eos_token || t == info.eot_token) break;
    }
    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    llmkv_session *s = nullptr;
    ASSERT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
    ASSERT_EQ(llmkv_session_append(s, prompt_.data(), prompt_.size()), LLMKV_OK);
    if (n_expected > 0) {
        ASSERT_EQ(llmkv_session_generate(s, uint32_t(n_expected)), LLMKV_OK);
        ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        std::vector<int32_t> all(prompt_.size() + expected.size() + 1);
        size_t n = 0;
        ASSERT_EQ(llmkv_session_get_tokens(s, all.data(), all.size(), &n), LLMKV_OK);
        std::vector<int32_t> got(all.begin() + long(prompt_.size()), all.begin() + long(n));
        EXPECT_EQ(got, std::vector<int32_t>(expected.begin(), expected.begin() + long(n_expected)));
        // The second reference where the fixture has one: llama.cpp's greedy tokens on the
        // same file (the same robust prefix).
        if (doc_.contains("llama_cpp")) {
            std::vector<int32_t> lc =
                doc_.at("llama_cpp").at("generated_ids").get<std::vector<int32_t>>();
            ASSERT_GE(lc.size(), n_expected);
            EXPECT_EQ(got, std::vector<int32_t>(lc.begin(), lc.begin() + long(n_expected)))
                << "llama.cpp's tokens";
        }
    }
    std::printf("[arch] %-8s greedy: %zu of %zu tokens compared (robust margin %.3f)\n",
                GetParam().c_str(), n_expected, expected.size(), robust_margin_);
    llmkv_session_destroy(s);
    llmkv_engine_destroy(e);
}

// The vocabulary section: the runtime's tokenizer gives the ids transformers' GGUF tokenizer
// gave (BOS added where the file asks for it, control tokens parsed).
TEST_P(ArchReference, TokenizerMatchesTransformers) {
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = gguf_path_.c_str();
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = 1;
    llmkv_engine *e = nullptr;
    ASSERT_EQ(llmkv_engine_create(&ep, &e), LLMKV_OK) << GetParam() << ": " << llmkv_last_error();
    for (const auto &c : doc_.at("tokenizer_cases")) {
        std::string text = c.at("text").get<std::string>();
        std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
        std::vector<int32_t> got(text.size() + 8);
        size_t n = 0;
        ASSERT_EQ(llmkv_tokenize(e, text.data(), text.size(),
                                 LLMKV_TOKENIZE_ADD_BOS | LLMKV_TOKENIZE_PARSE_SPECIAL, got.data(),
                                 got.size(), &n),
                  LLMKV_OK)
            << llmkv_last_error();
        got.resize(n);
        EXPECT_EQ(got, want) << "text: " << text;
    }
    llmkv_engine_destroy(e);
}

// gpt-oss files spoiled byte by byte (a tensor or key renamed, a dimension or a count changed):
// each is refused with LLMKV_ERR_MODEL_FORMAT and a message naming what is wrong.
TEST(ArchHostile, SpoiledGptOssFilesAreRefused) {
    std::ifstream in(fixture_dir() + "gptoss.gguf", std::ios::binary);
    ASSERT_TRUE(in.good()) << "missing fixture gptoss.gguf (scripts/make_arch_fixtures.py)";
    const std::vector<uint8_t> good((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    // The first byte after `name` (a key or a tensor name, which are length-prefixed).
    auto after = [&](const std::vector<uint8_t> &b, const std::string &name) -> size_t {
        for (size_t i = 8; i + name.size() <= b.size(); ++i) {
            uint64_t len = 0;
            std::memcpy(&len, b.data() + i - 8, 8);
            if (len == name.size() && std::memcmp(b.data() + i, name.data(), name.size()) == 0)
                return i + name.size();
        }
        ADD_FAILURE() << name << " not in the file";
        return 0;
    };
    auto rename = [&](std::vector<uint8_t> &b, const std::string &from, const std::string &to) {
        ASSERT_EQ(from.size(), to.size());
        const size_t end = after(b, from);
        if (end) std::memcpy(b.data() + end - from.size(), to.data(), to.size());
    };
    auto set_dim = [&](std::vector<uint8_t> &b, const std::string &tensor, uint32_t d,
                       uint64_t v) {  // n_dims (u32), then dims (u64 each)
        const size_t end = after(b, tensor);
        if (end) std::memcpy(b.data() + end + 4 + 8 * d, &v, 8);
    };
    auto set_u32 = [&](std::vector<uint8_t> &b, const std::string &key,
                       uint32_t v) {  // value type (u32), then the value
        const size_t end = after(b, key);
        if (end) std::memcpy(b.data() + end + 4, &v, 4);
    };
    struct Case {
        const char *what;
        std::function<void(std::vector<uint8_t> &)> spoil;
        const char *message;
    };
    const Case cases[] = {
        {"no sinks",
         [&](auto &b) { rename(b, "blk.0.attn_sinks.weight", "blk.0.attn_sinkz.weight"); },
         "blk.0.attn_sinks.weight"},
        {"sinks for 2 heads", [&](auto &b) { set_dim(b, "blk.1.attn_sinks.weight", 0, 2); },
         "blk.1.attn_sinks.weight"},
        {"router bias of 3", [&](auto &b) { set_dim(b, "blk.0.ffn_gate_inp.bias", 0, 3); },
         "blk.0.ffn_gate_inp.bias"},
        {"up bias of 3 experts", [&](auto &b) { set_dim(b, "blk.1.ffn_up_exps.bias", 1, 3); },
         "blk.1.ffn_up_exps.bias"},
        {"down bias too narrow", [&](auto &b) { set_dim(b, "blk.0.ffn_down_exps.bias", 0, 32); },
         "blk.0.ffn_down_exps.bias"},
        {"no output bias",
         [&](auto &b) { rename(b, "blk.1.attn_output.bias", "blk.1.attn_outpuz.bias"); },
         "blk.1.attn_output.bias"},
        {"no window",
         [&](auto &b) {
             rename(b, "gpt-oss.attention.sliding_window", "gpt-oss.attention.sliding_windoq");
         },
         "gpt-oss.attention.sliding_window"},
        {"no expert width",
         [&](auto &b) {
             rename(b, "gpt-oss.expert_feed_forward_length", "gpt-oss.expert_feed_forward_lengtq");
         },
         "gpt-oss.expert_feed_forward_length"},
        {"used > count", [&](auto &b) { set_u32(b, "gpt-oss.expert_used_count", 5); },
         "expert_used_count = 5"},
    };
    for (const Case &c : cases) {
        std::vector<uint8_t> bytes = good;
        c.spoil(bytes);
        try {
            auto file =
                std::shared_ptr<GgufFile>(GgufFile::from_memory(bytes.data(), bytes.size()));
            LlamaModel::load(file);
            ADD_FAILURE() << c.what << ": loaded";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LLMKV_ERR_MODEL_FORMAT) << c.what << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
                << c.what << ": " << e.what();
            std::printf("[arch] gpt-oss, %s: %s\n", c.what, e.what());
        }
    }
    // Unspoiled, the same bytes load.
    std::vector<uint8_t> bytes = good;
    auto file = std::shared_ptr<GgufFile>(GgufFile::from_memory(bytes.data(), bytes.size()));
    EXPECT_NO_THROW(LlamaModel::load(file));
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchReference,
                         ::testing::Values("qwen2", "qwen3", "llama", "mistral", "phi3", "gemma3",
                                           "qwen3moe", "qwen2moe", "mixtral", "gptoss"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

}  // namespace
}  // namespace llmkv
