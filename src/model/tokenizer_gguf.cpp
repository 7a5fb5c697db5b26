// Tokenizer::from_gguf: reads the tokenizer.ggml.* metadata of a GGUF file into a
// TokenizerVocab and builds the Tokenizer (which validates it). from_gguf_metadata does the
// same from a file's header and metadata alone.

#include <cerrno>
#include <climits>
#include <cstring>

#include "common/error.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "platform/os.h"

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

// Bounds-checked walk over the metadata key/value section (the values themselves are parsed
// later by GgufFile; here only their extent matters).
class KvWalker {
public:
    KvWalker(const uint8_t *p, size_t n) : p_(p), n_(n) {}
    size_t pos() const { return pos_; }
    uint64_t u64() {
        need(8);
        uint64_t v;
        std::memcpy(&v, p_ + pos_, 8);
        pos_ += 8;
        return v;
    }
    uint32_t u32() {
        need(4);
        uint32_t v;
        std::memcpy(&v, p_ + pos_, 4);
        pos_ += 4;
        return v;
    }
    void skip(uint64_t k) {
        need(k);
        pos_ += size_t(k);
    }
    void skip_string() { skip(u64()); }
    void skip_value(uint32_t type, int depth) {
        switch (type) {
            case 0:
            case 1:
            case 7:
                skip(1);
                return;  // U8, I8, BOOL
            case 2:
            case 3:
                skip(2);
                return;  // U16, I16
            case 4:
            case 5:
            case 6:
                skip(4);
                return;  // U32, I32, F32
            case 10:
            case 11:
            case 12:
                skip(8);
                return;  // U64, I64, F64
            case 8:
                skip_string();
                return;  // STRING
            case 9: {    // ARRAY
                if (depth > 2) break;
                uint32_t et = u32();
                uint64_t count = u64();
                if (count > GgufLimits::kMaxArrayLength) break;
                for (uint64_t i = 0; i < count; ++i) skip_value(et, depth + 1);
                return;
            }
            default:
                break;
        }
        fail(LLMKV_ERR_MODEL_FORMAT, "GGUF metadata value of type %u at byte %zu is malformed",
             type, pos_);
    }

private:
    void need(uint64_t k) const {
        if (k > n_ - pos_)
            fail(LLMKV_ERR_MODEL_FORMAT, "GGUF metadata runs past the end of the file");
    }
    const uint8_t *p_;
    size_t n_;
    size_t pos_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf_metadata(const std::string &path) {
    os::FileMap map;
    switch (os::map_file(path, map)) {
        case os::MapError::kNone:
            break;
        case os::MapError::kNotRegular:
            fail(LLMKV_ERR_IO, "%s: not a regular file", path.c_str());
        case os::MapError::kMap: {
            const int err = errno;
            fail(LLMKV_ERR_IO, "%s: mmap: %s", path.c_str(), std::strerror(err));
        }
        default: {
            const int err = errno;
            fail(LLMKV_ERR_IO, "%s: %s", path.c_str(), std::strerror(err));
        }
    }
    struct Unmap {
        os::FileMap &m;
        ~Unmap() { os::unmap_file(m); }
    } unmap{map};
    const size_t size = map.size;
    if (size < GgufLimits::kHeaderBytes)
        fail(LLMKV_ERR_MODEL_FORMAT, "%s: too short for a GGUF header", path.c_str());

    // Header (magic, version, tensor count, kv count), then the key/value pairs. The copy
    // keeps both with the tensor count set to 0, so only the metadata is parsed.
    const uint8_t *bytes = map.data;
    KvWalker w(bytes, size);
    w.skip(8);  // magic and version: GgufFile checks them
    w.u64();    // tensor count
    uint64_t n_kv = w.u64();
    if (n_kv > GgufLimits::kMaxKv)
        fail(LLMKV_ERR_MODEL_FORMAT, "%s: %llu metadata entries", path.c_str(),
             static_cast<unsigned long long>(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) {
        w.skip_string();
        uint32_t type = w.u32();
        w.skip_value(type, 0);
    }
    std::vector<uint8_t> image(bytes, bytes + w.pos());
    std::memset(image.data() + 8, 0, 8);
    std::unique_ptr<GgufFile> f = GgufFile::from_memory(image.data(), image.size());
    return from_gguf(*f);
}

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
