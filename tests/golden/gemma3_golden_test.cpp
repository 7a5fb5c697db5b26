// Golden tests of Gemma 3 270M against HuggingFace transformers (float32, on the GGUF's
// dequantized weights; references in gemma3_golden.json, made by
// scripts/make_golden_gemma3.py; tests/golden/README.md, section Gemma 3). Needs the real
// model: skipped with a reason when it is absent; a model the engine cannot load fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "golden_common.h"
#include "llmkv.h"
#include "model/gguf.h"
#include "model/llama_model.h"

namespace llmkv {
namespace {

using golden::file_exists;
using golden::ints;
using golden::numbers;

std::string model_path() {
    const char *env = std::getenv("LLMKV_GEMMA3_MODEL");
    if (env && *env) return env;
    return LLMKV_TEST_FIXTURES_DIR "/../../models/gemma-3-270m-q4_k_m.gguf";
}

class Gemma3Golden : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        doc_ = golden::read_json(LLMKV_TEST_GOLDEN_DIR "/gemma3_golden.json");
        if (!file_exists(model_path())) return;
        try {
            file_ = std::shared_ptr<GgufFile>(GgufFile::open(model_path()));
            model_ = LlamaModel::load(file_).release();
        } catch (const std::exception &e) {
            load_error_ = new std::string(e.what());
        }
    }
    static void TearDownTestSuite() {
        delete doc_;
        delete model_;
        delete load_error_;
        doc_ = nullptr;
        model_ = nullptr;
        load_error_ = nullptr;
        file_.reset();
    }
    void SetUp() override {
        if (!file_exists(model_path()))
            GTEST_SKIP() << "Gemma 3 model not found at " << model_path()
                         << " (set LLMKV_GEMMA3_MODEL)";
        if (load_error_)
            FAIL() << "the engine cannot load " << model_path() << ": " << *load_error_;
        ASSERT_NE(model_, nullptr);
    }

    static double tol(const char *key) {
        return doc_->at("suggested_tolerances").at(key).get<double>();
    }

    // Logits after each token from first_needed on (prefill, then decode); 80 blocks hold
    // 1280 tokens: the longest prompt + 32 is 964.
    std::vector<std::vector<float>> logits_per_position(const std::vector<int32_t> &tokens,
                                                        size_t first_needed) {
        return golden::logits_per_position(*model_, tokens, first_needed, 80);
    }

    static nlohmann::json *doc_;
    static std::shared_ptr<GgufFile> file_;
    static LlamaModel *model_;
    static std::string *load_error_;
};
nlohmann::json *Gemma3Golden::doc_ = nullptr;
std::shared_ptr<GgufFile> Gemma3Golden::file_;
LlamaModel *Gemma3Golden::model_ = nullptr;
std::string *Gemma3Golden::load_error_ = nullptr;

// Tolerances come from the JSON (suggested_tolerances): ~1.6x what simulating the runtime's
// 8-bit activations (per 256 for k-quant weights, per 32 otherwise) moved transformers'
// logits over these prompts; see the README.
TEST_F(Gemma3Golden, FinalPromptLogitsAgreeWithTransformers) {
    const double max_tol = tol("final_top40_max_abs_diff"),
                 mean_tol = tol("final_top40_mean_abs_diff");
    const double margin = tol("robust_margin");
    for (const auto &p : doc_->at("prompts")) {
        SCOPED_TRACE(p.at("name").get<std::string>());
        std::vector<int32_t> prompt = ints(p.at("prompt_ids"));
        auto all = logits_per_position(prompt, prompt.size());
        ASSERT_EQ(all.size(), 1u);
        const std::vector<float> &ours = all[0];
        std::vector<int32_t> top_ids = ints(p.at("final_logits").at("top_ids"));
        std::vector<double> top_logits = numbers(p.at("final_logits").at("top_logits"));
        double max_err = 0, sum_err = 0;
        for (size_t k = 0; k < top_ids.size(); ++k) {
            double e = std::fabs(double(ours[size_t(top_ids[k])]) - top_logits[k]);
            max_err = std::max(max_err, e);
            sum_err += e;
        }
        int32_t argmax = int32_t(std::max_element(ours.begin(), ours.end()) - ours.begin());
        double mx = *std::max_element(ours.begin(), ours.end());
        std::printf(
            "[gemma3] %-22s (%4zu tokens) top-40 logits: max |diff| %.3f, mean %.3f; top-1 %d (ref "
            "%d)\n",
            p.at("name").get<std::string>().c_str(), prompt.size(), max_err,
            sum_err / top_ids.size(), argmax, top_ids[0]);
        EXPECT_LE(max_err, max_tol);
        EXPECT_LE(sum_err / top_ids.size(), mean_tol);
        EXPECT_NEAR(mx, p.at("final_logits").at("max").get<double>(), tol("final_max_abs_diff"));
        if (numbers(p.at("steps").at("top1_top2_margin"))[0] >= margin) {
            EXPECT_EQ(argmax, top_ids[0]);
        }
    }
}

TEST_F(Gemma3Golden, TeacherForcedGreedyStepsAgreeWhereTheReferenceIsConfident) {
    for (const auto &p : doc_->at("prompts")) {
        SCOPED_TRACE(p.at("name").get<std::string>());
        size_t n_prompt = 0;
        std::vector<int32_t> tokens = golden::teacher_forced_tokens(p, n_prompt);
        golden::expect_teacher_forced(p, logits_per_position(tokens, n_prompt),
                                      tol("robust_margin"), "gemma3");
    }
}

// Free-running greedy generation through the C API equals the reference over each prompt's
// confident prefix, cut after an end-of-generation token (the engine stops there).
TEST_F(Gemma3Golden, GreedyContinuationsEqualTransformers) {
    const double margin = tol("robust_margin");
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    std::string path = model_path();
    ep.model_path = path.c_str();
    ep.n_threads = 2;
    ep.backend = LLMKV_BACKEND_CPU;
    llmkv_engine *e = nullptr;
    ASSERT_EQ(llmkv_engine_create(&ep, &e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
    EXPECT_EQ(info.bos_token, doc_->at("model").at("bos_token_id").get<int32_t>());
    int full = 0;
    for (const auto &p : doc_->at("prompts")) {
        std::vector<int32_t> prompt = ints(p.at("prompt_ids"));
        std::vector<int32_t> expected = ints(p.at("generated_ids"));
        std::vector<double> margins = numbers(p.at("steps").at("top1_top2_margin"));
        size_t n_expected = 0;
        while (n_expected < expected.size() && margins[n_expected] >= margin) {
            ++n_expected;
            int32_t t = expected[n_expected - 1];
            if (t == info.eos_token || t == info.eot_token) break;
        }
        if (n_expected == 0) continue;
        SCOPED_TRACE(p.at("name").get<std::string>());
        full += n_expected == expected.size() ? 1 : 0;
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        llmkv_session *s = nullptr;
        ASSERT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
        ASSERT_EQ(llmkv_session_append(s, prompt.data(), prompt.size()), LLMKV_OK);
        ASSERT_EQ(llmkv_session_generate(s, uint32_t(n_expected)), LLMKV_OK);
        ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        std::vector<int32_t> all(prompt.size() + expected.size() + 1);
        size_t n = 0;
        ASSERT_EQ(llmkv_session_get_tokens(s, all.data(), all.size(), &n), LLMKV_OK);
        std::vector<int32_t> got(all.begin() + long(prompt.size()), all.begin() + long(n));
        EXPECT_EQ(got, std::vector<int32_t>(expected.begin(), expected.begin() + long(n_expected)));
        std::printf("[gemma3] %-22s greedy: %zu tokens compared\n",
                    p.at("name").get<std::string>().c_str(), n_expected);
        llmkv_session_destroy(s);
    }
    llmkv_engine_destroy(e);
    std::printf("[gemma3] %d prompts matched over all their generated tokens\n", full);
    EXPECT_GE(full, 2) << "the golden file needs prompts without near-ties (the counting ones)";
}

// The SentencePiece tokenizer end to end: BOS added (the file asks for it), control tokens
// such as <start_of_turn> parsed, against transformers' GemmaTokenizer built from the GGUF.
TEST_F(Gemma3Golden, TokenizerMatchesTransformers) {
    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    std::string path = model_path();
    ep.model_path = path.c_str();
    ep.n_threads = 1;
    ep.backend = LLMKV_BACKEND_CPU;
    llmkv_engine *e = nullptr;
    ASSERT_EQ(llmkv_engine_create(&ep, &e), LLMKV_OK) << llmkv_last_error();
    auto check = [&](const std::string &text, const std::vector<int32_t> &want) {
        std::vector<int32_t> got(text.size() + 8);
        size_t n = 0;
        ASSERT_EQ(llmkv_tokenize(e, text.data(), text.size(),
                                 LLMKV_TOKENIZE_ADD_BOS | LLMKV_TOKENIZE_PARSE_SPECIAL, got.data(),
                                 got.size(), &n),
                  LLMKV_OK)
            << llmkv_last_error();
        got.resize(n);
        EXPECT_EQ(got, want) << "text: " << text;
    };
    for (const auto &c : doc_->at("tokenizer_cases"))
        check(c.at("text").get<std::string>(), ints(c.at("ids")));
    for (const auto &p : doc_->at("prompts"))
        check(p.at("prompt").get<std::string>(), ints(p.at("prompt_ids")));
    llmkv_engine_destroy(e);
}

}  // namespace
}  // namespace llmkv
