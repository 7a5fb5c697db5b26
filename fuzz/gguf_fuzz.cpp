// Fuzz target `gguf`: the GGUF reader on arbitrary bytes, and what is built from a file it
// accepts: every metadata getter, the tokenizer (encode/decode of a fixed text), the chat
// family and format, the Llama model description, and, when model and tokenizer agree, an
// engine through the C API (small KV budget) that computes a 2-token prefix.
// Properties: the reader and every builder either succeed or throw llmkv::Error with
// MODEL_FORMAT or UNSUPPORTED (getters: MODEL_FORMAT; the tokenizer's decode of its own ids
// never fails; encode yields ids inside the vocabulary); tensor data lies inside the
// input; engine creation answers only its documented statuses, and an engine that exists
// keeps its invariants.
#include <cstdlib>
#include <memory>

#include "common/error.h"
#include "engine/chat_template.h"
#include "fuzz_common.h"
#include "fuzz_vocab.h"
#include "gguf_writer.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "model/tokenizer.h"
#include "tiny_model.h"

using namespace llmkv;

namespace {

void expect_format_error(const Error &e, const char *what) {
    FUZZ_CHECK(fuzz::status_in(e.status(), {LLMKV_ERR_MODEL_FORMAT, LLMKV_ERR_UNSUPPORTED}),
               "%s: %s: %s", what, llmkv_status_string(e.status()), e.what());
}

void exercise_metadata(const GgufFile &f) {
    for (const auto &[key, v] : f.metadata()) {
        try {
            (void)f.get_uint(key);
        } catch (const Error &e) {
            expect_format_error(e, "get_uint");
        }
        try {
            (void)f.get_int(key);
        } catch (const Error &e) {
            expect_format_error(e, "get_int");
        }
        try {
            (void)f.get_float(key);
        } catch (const Error &e) {
            expect_format_error(e, "get_float");
        }
        try {
            (void)f.get_bool(key);
        } catch (const Error &e) {
            expect_format_error(e, "get_bool");
        }
        try {
            (void)f.get_string(key);
        } catch (const Error &e) {
            expect_format_error(e, "get_string");
        }
        try {
            (void)f.get_string_array(key);
        } catch (const Error &e) {
            expect_format_error(e, "get_string_array");
        }
        try {
            (void)f.get_int_array(key);
        } catch (const Error &e) {
            expect_format_error(e, "get_int_array");
        }
        try {
            (void)f.get_float_array(key);
        } catch (const Error &e) {
            expect_format_error(e, "get_float_array");
        }
        (void)v.array_size();
        FUZZ_CHECK(f.find(key) == &v, "find(%s) is not the entry", key.c_str());
    }
    const uint8_t *begin = f.data(), *end = f.data() + f.file_size();
    for (const GgufTensor &t : f.tensors()) {
        FUZZ_CHECK(f.find_tensor(t.name) == &t, "find_tensor");
        FUZZ_CHECK(t.data >= begin && t.data <= end && t.n_bytes <= uint64_t(end - t.data),
                   "tensor %s outside the file", t.name.c_str());
        (void)t.rows();
        (void)t.row_bytes();
    }
}

void exercise_tokenizer(const GgufFile &f, const Tokenizer &tok) {
    const std::string text = "Hello <|im_start|>world 123 é\xE2\x96\x81 [INST]\xff";
    for (bool special : {false, true}) {
        std::vector<int32_t> ids = tok.encode(text, true, special);
        for (int32_t id : ids)
            FUZZ_CHECK(id >= 0 && size_t(id) < tok.n_vocab(), "id %d outside the vocabulary", id);
        try {
            (void)tok.decode(ids);
        } catch (const Error &e) {
            FUZZ_CHECK(false, "decode of its own ids: %s", e.what());
        }
    }
    for (int32_t id : {tok.bos(), tok.eos(), tok.eot(), tok.unk(), tok.pad()}) {
        if (id >= 0) (void)tok.is_end_of_generation(id);
    }
    const llmkv_chat_message msgs[] = {{"system", "s"}, {"user", "u"}, {"assistant", "a"}};
    try {
        (void)detect_chat_family(f, tok);
        (void)format_chat(f, tok, msgs, 3, true);
    } catch (const Error &e) {
        expect_format_error(e, "chat");
    }
}

// The image through the C API: engine creation, a 2-token prefix, validation.
void exercise_engine(const uint8_t *data, size_t size, uint32_t n_vocab) {
    const std::string path = fuzz::scratch_path("gguf_input.model");
    FUZZ_CHECK(fuzz::write_file(path, data, size), "write %s", path.c_str());
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = path.c_str();
    p.backend = LLMKV_BACKEND_CPU;
    p.n_threads = 1;
    p.kv_block_tokens = 4;
    p.kv_device_bytes = 256 << 10;
    p.max_batch_tokens = 8;
    p.max_sessions = 2;
    p.max_context = 16;
    llmkv_engine *e = nullptr;
    llmkv_status st = llmkv_engine_create(&p, &e);
    std::remove(path.c_str());
    FUZZ_CHECK(fuzz::status_in(st, {LLMKV_OK, LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_MODEL_FORMAT,
                                    LLMKV_ERR_UNSUPPORTED, LLMKV_ERR_OUT_OF_MEMORY}),
               "engine_create: %s", llmkv_status_string(st));
    if (st != LLMKV_OK) return;
    const int32_t tokens[2] = {0, int32_t(n_vocab > 1 ? 1 : 0)};
    llmkv_prefix *prefix = nullptr;
    st = llmkv_prefix_create(e, tokens, 2, &prefix);
    FUZZ_CHECK(fuzz::status_in(st, {LLMKV_OK, LLMKV_ERR_KV_CAPACITY}), "prefix_create: %s",
               llmkv_status_string(st));
    FUZZ_CHECK(llmkv_engine_validate(e) == LLMKV_OK, "invariants");
    llmkv_prefix_release(prefix);
    FUZZ_CHECK(llmkv_engine_validate(e) == LLMKV_OK, "invariants after release");
    llmkv_engine_destroy(e);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    fuzz::quiet_logs();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // A page-aligned copy, as a mapped file would be: tensor data is read in place.
    struct Free {
        void operator()(void *p) const { std::free(p); }
    };
    const size_t alloc = (size + 4095) / 4096 * 4096;
    std::unique_ptr<uint8_t, Free> buf(
        static_cast<uint8_t *>(std::aligned_alloc(4096, alloc ? alloc : 4096)));
    if (size) std::memcpy(buf.get(), data, size);

    std::shared_ptr<GgufFile> file;
    try {
        file = std::shared_ptr<GgufFile>(GgufFile::from_memory(buf.get(), size));
    } catch (const Error &e) {
        expect_format_error(e, "from_memory");
        return 0;
    }
    exercise_metadata(*file);
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = Tokenizer::from_gguf(*file);
    } catch (const Error &e) {
        expect_format_error(e, "tokenizer");
    }
    if (tok) exercise_tokenizer(*file, *tok);
    std::unique_ptr<LlamaModel> model;
    try {
        model = LlamaModel::load(file);
    } catch (const Error &e) {
        expect_format_error(e, "model");
    }
    if (model && tok && tok->n_vocab() == model->config().n_vocab) {
        exercise_engine(buf.get(), size, model->config().n_vocab);
    }
    return 0;
}

namespace llmkv::fuzz {

Seeds seeds() {
    Seeds s;
    testing::TinyModelSpec spec;  // small: one layer, quantized matrices
    spec.n_layers = 1;
    spec.n_embd = 32;
    spec.n_ff = 32;
    spec.n_heads = 2;
    spec.n_kv_heads = 1;
    spec.n_ctx = 64;
    spec.weight_type = TensorType::Q4_0;
    spec.embd_type = TensorType::Q8_0;
    s.push_back({"tiny-model-q4", testing::build_tiny_model(spec)});
    s.push_back({"vocab-chatml", chatml_gguf(true)});
    s.push_back({"vocab-llama3", llama3_gguf()});
    s.push_back({"vocab-llama2-spm", llama2_gguf()});
    // Every value type, arrays of each, alignment, and a few raw tensors of each format.
    GgufWriter w;
    w.set_version(2);
    w.set_alignment(64);
    w.add_uint8("t.u8", 200);
    w.add_int8("t.i8", -3);
    w.add_uint16("t.u16", 60000);
    w.add_int16("t.i16", -300);
    w.add_uint32("t.u32", 4000000000u);
    w.add_int32("t.i32", -7);
    w.add_uint64("t.u64", ~0ull);
    w.add_int64("t.i64", -1ll << 40);
    w.add_float32("t.f32", 1.5f);
    w.add_float64("t.f64", -2.25);
    w.add_bool("t.bool", true);
    w.add_string("t.str", "text");
    w.add_string_array("t.astr", {"a", "", "ccc"});
    w.add_float32_array("t.af32", {1.0f, 2.0f});
    w.add_float64_array("t.af64", {3.0});
    w.add_int32_array("t.ai32", {-1, 2});
    w.add_uint32_array("t.au32", {7});
    w.add_int64_array("t.ai64", {1ll << 50});
    w.add_uint8_array("t.au8", {1, 2, 3});
    w.add_bool_array("t.abool", {true, false});
    std::vector<float> vals(64, 0.5f);
    w.add_tensor_f32("f32", {64}, vals, TensorType::F32);
    w.add_tensor_f32("f16", {32, 2}, vals, TensorType::F16);
    w.add_tensor_f32("bf16", {64}, vals, TensorType::BF16);
    w.add_tensor_f32("q8_0", {64}, vals, TensorType::Q8_0);
    w.add_tensor_f32("q4_0", {32, 2}, vals, TensorType::Q4_0);
    w.add_tensor_f32("q4_1", {64}, vals, TensorType::Q4_1);
    s.push_back({"all-types-v2", w.build()});
    return s;
}

}  // namespace llmkv::fuzz
