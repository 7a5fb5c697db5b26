// Tokenizer::from_gguf: reads the tokenizer.ggml.* metadata of a GGUF file into a
// TokenizerVocab and builds the Tokenizer (which validates it).
#include <climits>

#include "common/error.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace llmkv {

namespace {

int32_t read_id(const GgufFile &f, const char *key) {
    std::optional<uint64_t> v = f.get_uint(key);
    if (!v) return -1;
    if (*v > uint64_t(INT32_MAX)) {
        fail(LLMKV_ERR_MODEL_FORMAT, "%s = %llu is not a token id", key,
             static_cast<unsigned long long>(*v));
    }
    return int32_t(*v);
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile &f) {
    return std::make_unique<Tokenizer>(vocab_from_gguf(f));
}

TokenizerVocab Tokenizer::vocab_from_gguf(const GgufFile &f) {
    TokenizerVocab v;
    std::optional<std::string> model = f.get_string("tokenizer.ggml.model");
    if (!model) fail(LLMKV_ERR_MODEL_FORMAT, "GGUF file has no tokenizer.ggml.model");
    v.model = *model;
    v.pre = f.get_string("tokenizer.ggml.pre").value_or("default");

    const std::vector<std::string> *tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (!tokens) fail(LLMKV_ERR_MODEL_FORMAT, "GGUF file has no tokenizer.ggml.tokens");
    v.tokens = *tokens;
    if (const std::vector<double> *scores = f.get_float_array("tokenizer.ggml.scores")) {
        v.scores.assign(scores->begin(), scores->end());
    }
    if (const std::vector<int64_t> *types = f.get_int_array("tokenizer.ggml.token_type")) {
        v.token_types.reserve(types->size());
        for (size_t i = 0; i < types->size(); ++i) {
            int64_t t = (*types)[i];
            if (t < INT32_MIN || t > INT32_MAX) {
                fail(LLMKV_ERR_MODEL_FORMAT, "token %zu has an invalid token type %lld", i,
                     static_cast<long long>(t));
            }
            v.token_types.push_back(int32_t(t));
        }
    }
    if (const std::vector<std::string> *merges = f.get_string_array("tokenizer.ggml.merges")) {
        v.merges = *merges;
    }

    v.bos = read_id(f, "tokenizer.ggml.bos_token_id");
    v.eos = read_id(f, "tokenizer.ggml.eos_token_id");
    v.eot = read_id(f, "tokenizer.ggml.eot_token_id");
    v.unk = read_id(f, "tokenizer.ggml.unknown_token_id");
    v.pad = read_id(f, "tokenizer.ggml.padding_token_id");
    int32_t eom = read_id(f, "tokenizer.ggml.eom_token_id");
    if (eom >= 0) v.extra_eog.push_back(eom);

    // Defaults when the file does not say: SentencePiece models add BOS and a space prefix.
    bool spm = v.model == "llama";
    v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
    v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
    return v;
}

}  // namespace llmkv
