// Tokenizer: byte-level BPE ("gpt2" vocabularies, e.g. SmolLM2, Llama 3, gpt-oss) and
// SentencePiece BPE ("llama" vocabularies, with byte fallback), built from the vocabulary a
// GGUF file carries. Also Utf8Stream, which hands out streamed token bytes as whole UTF-8
// characters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llmkv {

class GgufFile;

// Token types of tokenizer.ggml.token_type.
enum TokenType : int32_t {
    kTokenUndefined = 0,
    kTokenNormal = 1,
    kTokenUnknown = 2,
    kTokenControl = 3,
    kTokenUserDefined = 4,
    kTokenUnused = 5,
    kTokenByte = 6,
};

// What a GGUF file carries about its tokenizer.
struct TokenizerVocab {
    std::string model;                 // tokenizer.ggml.model: "gpt2" or "llama"
    std::string pre;                   // tokenizer.ggml.pre: "smollm", "llama-bpe", "gpt2", ...
    std::vector<std::string> tokens;   // tokenizer.ggml.tokens
    std::vector<float> scores;         // tokenizer.ggml.scores (SentencePiece); may be empty
    std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (TokenType); may be empty
    std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right"
    int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
    std::vector<int32_t> extra_eog;  // more end-of-generation ids (e.g. eom_token_id)
    bool add_bos = false, add_space_prefix = false;
};

// How text is cut into words before byte-level BPE.
enum class PreTokenizer {
    kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    kSmollm,  // every \p{N} code point alone, then kGpt2 on the pieces between them
    kLlama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
              //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    kQwen2,   // kLlama3 with \p{N} (every number code point alone) for \p{N}{1,3}; the text
              // is put in Unicode NFC first (Qwen2's normalizer)
    kO200k,   // tiktoken's o200k_base (GPT-4o, gpt-oss): words split at case changes, marks
              // kept with their letters, a contraction suffix of any case on the word:
              // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C?|
              // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*C?|
              // \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
              // with C = (?i:'s|'t|'re|'ve|'m|'ll|'d)
};

// Appends the words of `text` to `out` (views into `text`, in order, covering all of it).
// The patterns are matched over code points; a byte that is not part of valid UTF-8 counts
// as one code point that is neither letter, number nor space. (No normalization here: the
// tokenizer applies kQwen2's NFC before splitting.)
void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view> &out);

// `text` in Unicode normalization form C; bytes that are not valid UTF-8 are kept as they are
// (each valid run between them is normalized on its own).
std::string nfc_normalize(std::string_view text);

// Bytes Tokenizer::encode dropped because the vocabulary has no token for them.
struct DroppedBytes {
    size_t count = 0;
    int first = -1;  // the first dropped byte's value
    void add(uint8_t b) {
        if (count++ == 0) first = b;
    }
};

// Immutable after construction; every const member is safe to call from many threads.
class Tokenizer {
public:
    // Validates the vocabulary. Throws llmkv::Error: LLMKV_ERR_MODEL_FORMAT for an empty
    // vocabulary, a special id outside it, scores/token_types of the wrong length, a bad
    // token type, or a merge naming (or producing) a token that is not in it;
    // LLMKV_ERR_UNSUPPORTED for a tokenizer model other than "gpt2" and "llama".
    // An unknown `pre` for "gpt2" falls back to the GPT-2 pattern with a logged warning.
    explicit Tokenizer(TokenizerVocab vocab);
    // Reads the tokenizer.ggml.* keys. Throws like the constructor (a missing model or
    // token list is LLMKV_ERR_MODEL_FORMAT).
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile &f);
    // Just the reading part of from_gguf (no validation beyond the key types).
    static TokenizerVocab vocab_from_gguf(const GgufFile &f);
    // The tokenizer of the GGUF file at `path` from its metadata alone: the tensor infos are
    // not read, so a file whose tensors llmkv cannot load yet still gives its tokenizer.
    // Throws LLMKV_ERR_IO when the file cannot be read, LLMKV_ERR_MODEL_FORMAT for a
    // malformed header or metadata, and like from_gguf.
    static std::unique_ptr<Tokenizer> from_gguf_metadata(const std::string &path);

    // Tokenizes UTF-8 text (invalid bytes are tokenized byte by byte). add_bos: prepend BOS
    // when the vocabulary has one (callers that honour the model's preference pass
    // add_bos_default()). User-defined tokens (token type 4, e.g. Gemma's "\n\n" or
    // "<table>") are always split out of the text as whole tokens, as the reference tokenizers
    // do; parse_special: text equal to a control token becomes that token too (leftmost,
    // longest match first); otherwise control-token text is ordinary text. (A "llama"
    // vocabulary's user-defined tokens made only of spaces are the exception: they are
    // spelled with U+2581 and reached by merging, ranked above every other merge, shortest
    // first, as HuggingFace's conversion of such a vocabulary does.) A byte the vocabulary cannot
    // represent (a "gpt2" vocabulary without its byte-level symbol; a "llama" vocabulary without
    // its <0xNN> token and without an unknown token) is dropped, as the reference tokenizers do;
    // `dropped`, when given, counts them.
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special,
                                DroppedBytes *dropped = nullptr) const;
    // Byte values (0..255) the vocabulary cannot represent at all.
    uint32_t n_unrepresentable_bytes() const;

    // The raw vocabulary string. Throws LLMKV_ERR_INVALID_ARGUMENT for an id outside it.
    const std::string &token_text(int32_t id) const;
    // The bytes the token stands for: byte-level symbols decoded, U+2581 -> ' ', <0xNN> ->
    // byte; control, unknown and user-defined tokens give their text. Throws like token_text.
    std::string token_bytes(int32_t id) const { return token_piece(id); }
    const std::string &token_piece(int32_t id) const;
    // Concatenated token_bytes. For "llama" vocabularies with add_space_prefix, the space
    // the encoder put in front of the text (the first byte of the first non-control token)
    // is dropped. Throws LLMKV_ERR_INVALID_ARGUMENT for an id outside the vocabulary.
    std::string decode(const int32_t *ids, size_t n) const;
    std::string decode(const std::vector<int32_t> &ids) const {
        return decode(ids.data(), ids.size());
    }

    size_t n_vocab() const { return tokens_.size(); }
    int32_t bos() const { return bos_; }
    int32_t eos() const { return eos_; }
    int32_t eot() const { return eot_; }
    int32_t unk() const { return unk_; }
    int32_t pad() const { return pad_; }
    const std::string &model() const { return model_; }
    const std::string &pre() const { return pre_; }
    PreTokenizer pre_tokenizer() const { return pre_kind_; }
    bool add_bos_default() const { return add_bos_; }
    bool add_space_prefix() const { return add_space_prefix_; }
    int32_t token_type(int32_t id) const;

    // eos, eot, extra_eog, and control/user-defined tokens named <|im_end|>, <|endoftext|>,
    // <|eot_id|>, <|eom_id|>, <|end_of_text|>, <end_of_turn>, <|end|>, </s>, <|return|>,
    // <|call|>; except <|end|> in a vocabulary that also has <|return|> and <|call|> (the
    // harmony format of gpt-oss, where <|end|> closes a message that is not the last).
    bool is_end_of_generation(int32_t id) const;
    // Control and unknown tokens (and BOS/EOS/EOT/PAD): their text is markup, not content.
    // False for ids outside the vocabulary.
    bool is_special(int32_t id) const;
    int32_t find_token(std::string_view text) const;  // -1 if absent

private:
    enum class Kind { kByteBpe, kSpm };

    void check_id(int32_t id) const;
    void encode_fragment(std::string_view text, std::vector<int32_t> &out,
                         DroppedBytes *dropped) const;
    void encode_bpe_word(std::string_view word, std::vector<int32_t> &out,
                         DroppedBytes *dropped) const;
    void encode_spm(std::string_view text, std::vector<int32_t> &out, DroppedBytes *dropped) const;
    void push_bytes_spm(std::string_view bytes, std::vector<int32_t> &out,
                        DroppedBytes *dropped) const;
    int32_t lookup_text(std::string_view text) const;

    struct StringHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };
    struct Merge {
        int32_t rank;
        int32_t result;
    };

    Kind kind_ = Kind::kByteBpe;
    PreTokenizer pre_kind_ = PreTokenizer::kGpt2;
    bool ignore_merges_ = false;  // a whole word found in the vocabulary is taken as is
    std::string model_, pre_;
    std::vector<std::string> tokens_;
    std::vector<std::string> pieces_;  // token_bytes of each id
    std::vector<float> scores_;
    std::vector<int32_t> types_;
    std::vector<uint8_t> eog_;
    std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_ids_;
    std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> rank, result
    int32_t byte_tokens_[256];  // byte-level symbol (gpt2) or <0xNN> token (llama); -1 absent
    // Control and user-defined tokens split out of the text: by their text (the lowest id of
    // a text), and the distinct lengths of those starting with each byte, longest first.
    std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> special_ids_;
    std::vector<uint32_t> special_lengths_[256];
    size_t n_user_defined_specials_ = 0;  // user-defined tokens among them
    int32_t bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1, pad_ = -1;
    bool add_bos_ = false, add_space_prefix_ = false;
};

// Collects streamed bytes and hands them out as whole UTF-8 characters. A byte that cannot
// start or continue a valid character, once that is known, is handed out on its own, as
// is, so invalid input never stalls the stream; only a still-possible prefix of a valid
// character at the end is held back.
class Utf8Stream {
public:
    void push(std::string_view bytes);
    // Takes the longest run of complete characters of at most max_bytes bytes (never part
    // of a character: when the first one is longer than max_bytes, takes nothing).
    std::string take_complete(size_t max_bytes = SIZE_MAX);
    // Bytes take_complete could hand out now with no limit.
    size_t pending_complete() const { return complete_end_ - head_; }
    // All bytes held, including an unfinished character at the end.
    size_t pending() const { return buf_.size() - head_; }
    // Takes everything, an unfinished character at the end included (end of stream).
    std::string take_all();
    void clear();

    // The stream's extent now, to undo the pushes made after it (a failed step). Valid only
    // while nothing is taken in between; rollback never allocates.
    struct Mark {
        size_t size = 0;
        size_t complete_end = 0;
    };
    Mark mark() const { return {buf_.size(), complete_end_}; }
    void rollback(const Mark &m) noexcept {
        if (m.size <= buf_.size()) buf_.resize(m.size);
        complete_end_ = m.complete_end;
    }

    // Length of the UTF-8 unit at p[0..avail): the length of a valid character, 1 for a
    // byte that cannot begin one there, or 0 when p is a valid prefix that needs more bytes.
    static size_t unit_length(const unsigned char *p, size_t avail);

private:
    void compact();

    std::string buf_;
    size_t head_ = 0;          // first byte not yet taken
    size_t complete_end_ = 0;  // end of the complete units that follow head_
};

}  // namespace llmkv
