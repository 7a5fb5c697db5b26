// Tokenizer construction and validation, special-token splitting, byte-level BPE (merges
// applied by rank) and SentencePiece BPE (pairs merged by score, byte fallback), decoding.
// Pre-tokenization is in tokenizer_pretokenize.cpp, GGUF loading in tokenizer_gguf.cpp.
#include "model/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <queue>

#include "common/error.h"
#include "common/log.h"

namespace llmkv {

namespace {

// GPT-2's byte-level alphabet: bytes that are printable stand for themselves, the other 68
// are given the code points U+0100.. in byte order.
bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t byte_to_code_point(int b) {
    if (byte_is_printable(b)) return uint32_t(b);
    uint32_t n = 0;
    for (int k = 0; k < b; ++k) n += byte_is_printable(k) ? 0 : 1;
    return 0x100 + n;
}

void append_utf8(std::string &s, uint32_t c) {
    if (c < 0x80) {
        s += char(c);
    } else if (c < 0x800) {
        s += char(0xC0 | (c >> 6));
        s += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        s += char(0xE0 | (c >> 12));
        s += char(0x80 | ((c >> 6) & 0x3F));
        s += char(0x80 | (c & 0x3F));
    } else {
        s += char(0xF0 | (c >> 18));
        s += char(0x80 | ((c >> 12) & 0x3F));
        s += char(0x80 | ((c >> 6) & 0x3F));
        s += char(0x80 | (c & 0x3F));
    }
}

// Decodes a byte-level token text to bytes; false when a character is not in the alphabet.
bool byte_level_decode(const std::string &text, const int16_t *cp_to_byte, std::string &out) {
    out.clear();
    const auto *p = reinterpret_cast<const unsigned char *>(text.data());
    size_t i = 0;
    while (i < text.size()) {
        size_t len = Utf8Stream::unit_length(p + i, text.size() - i);
        if (len == 0 || (len == 1 && p[i] >= 0x80)) return false;
        uint32_t c = len == 1 ? p[i] : (p[i] & (0x7Fu >> len));
        for (size_t k = 1; k < len; ++k) c = (c << 6) | (p[i + k] & 0x3Fu);
        if (c >= 0x144 || cp_to_byte[c] < 0) return false;
        out += char(cp_to_byte[c]);
        i += len;
    }
    return true;
}

// "<0xNN>" -> NN, else -1.
int parse_byte_token(const std::string &s) {
    if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; ++k) {
        char c = s[size_t(k)];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                         : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

const char *const kEogNames[] = {"<|im_end|>",      "<|endoftext|>", "<|eot_id|>", "<|eom_id|>",
                                 "<|end_of_text|>", "<end_of_turn>", "<|end|>",    "</s>",
                                 "<|return|>",      "<|call|>"};

constexpr const char *kSpmSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

}  // namespace

Tokenizer::Tokenizer(TokenizerVocab vocab) {
    model_ = std::move(vocab.model);
    pre_ = std::move(vocab.pre);
    tokens_ = std::move(vocab.tokens);
    scores_ = std::move(vocab.scores);
    types_ = std::move(vocab.token_types);
    bos_ = vocab.bos;
    eos_ = vocab.eos;
    eot_ = vocab.eot;
    unk_ = vocab.unk;
    pad_ = vocab.pad;
    add_bos_ = vocab.add_bos;
    add_space_prefix_ = vocab.add_space_prefix;

    if (model_ == "gpt2") {
        kind_ = Kind::kByteBpe;
    } else if (model_ == "llama") {
        kind_ = Kind::kSpm;
    } else {
        fail(LLMKV_ERR_UNSUPPORTED, "tokenizer model \"%s\" is not supported (gpt2, llama)",
             model_.c_str());
    }
    if (tokens_.empty()) fail(LLMKV_ERR_MODEL_FORMAT, "tokenizer vocabulary is empty");
    if (tokens_.size() > size_t(INT32_MAX)) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tokenizer vocabulary of %zu tokens is too large",
             tokens_.size());
    }
    const size_t n = tokens_.size();
    if (!scores_.empty() && scores_.size() != n) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tokenizer has %zu scores for %zu tokens", scores_.size(), n);
    }
    if (!types_.empty() && types_.size() != n) {
        fail(LLMKV_ERR_MODEL_FORMAT, "tokenizer has %zu token types for %zu tokens", types_.size(),
             n);
    }
    struct NamedId {
        const char *name;
        int32_t id;
    };
    std::vector<NamedId> ids = {
        {"bos", bos_}, {"eos", eos_}, {"eot", eot_}, {"unknown", unk_}, {"padding", pad_}};
    for (int32_t id : vocab.extra_eog) ids.push_back({"end-of-generation", id});
    for (const NamedId &s : ids) {
        if (s.id < -1 || (s.id >= 0 && size_t(s.id) >= n)) {
            fail(LLMKV_ERR_MODEL_FORMAT,
                 "tokenizer %s token id %d is outside the vocabulary of %zu", s.name, s.id, n);
        }
    }
    for (size_t i = 0; i < types_.size(); ++i) {
        if (types_[i] < kTokenUndefined || types_[i] > kTokenByte) {
            fail(LLMKV_ERR_MODEL_FORMAT, "token %zu has an invalid token type %d", i, types_[i]);
        }
    }
    if (types_.empty()) {
        // No types in the file: everything is text except the named special tokens (and, for
        // SentencePiece, the <0xNN> byte tokens).
        types_.assign(n, kTokenNormal);
        for (int32_t id : {bos_, eos_, eot_, pad_}) {
            if (id >= 0) types_[size_t(id)] = kTokenControl;
        }
        if (unk_ >= 0) types_[size_t(unk_)] = kTokenUnknown;
        if (kind_ == Kind::kSpm) {
            for (size_t i = 0; i < n; ++i) {
                if (parse_byte_token(tokens_[i]) >= 0) types_[i] = kTokenByte;
            }
        }
    }

    token_ids_.reserve(n);
    for (size_t i = 0; i < n; ++i) token_ids_.emplace(tokens_[i], int32_t(i));  // first wins

    // Byte tokens and what each token stands for.
    std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), -1);
    pieces_.resize(n);
    if (kind_ == Kind::kByteBpe) {
        int16_t cp_to_byte[0x144];
        std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t(-1));
        for (int b = 0; b < 256; ++b) {
            uint32_t c = byte_to_code_point(b);
            cp_to_byte[c] = int16_t(b);
            std::string sym;
            append_utf8(sym, c);
            byte_tokens_[b] = lookup_text(sym);
        }
        for (size_t i = 0; i < n; ++i) {
            int32_t t = types_[i];
            if (t == kTokenControl || t == kTokenUnknown || t == kTokenUserDefined ||
                !byte_level_decode(tokens_[i], cp_to_byte, pieces_[i])) {
                pieces_[i] = tokens_[i];
            }
        }
    } else {
        for (size_t i = 0; i < n; ++i) {
            const std::string &s = tokens_[i];
            int b = types_[i] == kTokenByte ? parse_byte_token(s) : -1;
            if (b >= 0) {
                pieces_[i] = std::string(1, char(b));
                if (byte_tokens_[b] < 0) byte_tokens_[b] = int32_t(i);
            } else if (types_[i] == kTokenControl || types_[i] == kTokenUnknown) {
                pieces_[i] = s;
            } else {
                std::string &p = pieces_[i];
                p.reserve(s.size());
                for (size_t k = 0; k < s.size();) {
                    if (s.compare(k, 3, kSpmSpace) == 0) {
                        p += ' ';
                        k += 3;
                    } else {
                        p += s[k++];
                    }
                }
            }
        }
    }

    // Merges (byte-level BPE only; SentencePiece merges by score).
    if (kind_ == Kind::kByteBpe) {
        merges_.reserve(vocab.merges.size());
        std::string joined;
        for (size_t r = 0; r < vocab.merges.size(); ++r) {
            const std::string &m = vocab.merges[r];
            size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            if (sp == std::string::npos || sp + 1 >= m.size()) {
                fail(LLMKV_ERR_MODEL_FORMAT, "tokenizer merge %zu \"%s\" is not two tokens", r,
                     m.c_str());
            }
            std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
            int32_t a = lookup_text(left), b = lookup_text(right);
            joined.assign(left);
            joined.append(right);
            int32_t c = lookup_text(joined);
            if (a < 0 || b < 0 || c < 0) {
                fail(LLMKV_ERR_MODEL_FORMAT,
                     "tokenizer merge %zu \"%s\" names a token not in the vocabulary (\"%s\")", r,
                     m.c_str(),
                     a < 0   ? std::string(left).c_str()
                     : b < 0 ? std::string(right).c_str()
                             : joined.c_str());
            }
            merges_.emplace((uint64_t(uint32_t(a)) << 32) | uint32_t(b), Merge{int32_t(r), c});
        }
    }

    // A SentencePiece vocabulary's user-defined tokens made only of spaces (Gemma stores
    // "\u2581\u2581".. with real spaces and a placeholder score): spelled with U+2581 so
    // merging reaches them, ranked above every other merge, shortest (lowest id) first.
    std::vector<uint8_t> merged_user(kind_ == Kind::kSpm ? n : 0, 0);
    if (kind_ == Kind::kSpm) {
        std::vector<int32_t> runs;
        for (size_t i = 0; i < n; ++i) {
            const std::string &s = tokens_[i];
            if (types_[i] == kTokenUserDefined && !s.empty() &&
                s.find_first_not_of(' ') == std::string::npos) {
                runs.push_back(int32_t(i));
            }
        }
        if (!runs.empty()) {
            if (scores_.empty()) scores_.assign(n, 0.0f);
            float top = 0.0f;
            for (size_t i = 0; i < n; ++i) {
                if (types_[i] == kTokenNormal) top = std::max(top, scores_[i]);
            }
            std::string spelled;
            for (size_t k = 0; k < runs.size(); ++k) {
                size_t id = size_t(runs[k]);
                merged_user[id] = 1;
                scores_[id] = top + 1.0f + float(runs.size() - k);
                spelled.clear();
                for (size_t c = 0; c < tokens_[id].size(); ++c) spelled += kSpmSpace;
                token_ids_.emplace(spelled, runs[k]);  // a token of that spelling wins
            }
        }
    }

    // Special tokens split out of the text: control tokens when parse_special, user-defined
    // ones always.
    for (size_t i = 0; i < n; ++i) {
        bool user = types_[i] == kTokenUserDefined && (merged_user.empty() || !merged_user[i]);
        if ((types_[i] == kTokenControl || user) && !tokens_[i].empty()) {
            special_ids_.emplace(tokens_[i], int32_t(i));
            special_lengths_[uint8_t(tokens_[i][0])].push_back(uint32_t(tokens_[i].size()));
            if (user) ++n_user_defined_specials_;
        }
    }
    for (auto &lengths : special_lengths_) {
        std::sort(lengths.begin(), lengths.end(), std::greater<uint32_t>());
        lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    }

    // End of generation.
    eog_.assign(n, 0);
    for (int32_t id : {eos_, eot_}) {
        if (id >= 0) eog_[size_t(id)] = 1;
    }
    for (int32_t id : vocab.extra_eog) {
        if (id >= 0) eog_[size_t(id)] = 1;
    }
    auto named_special = [this](const char *name) {
        int32_t id = lookup_text(name);
        bool ok = id >= 0 &&
                  (types_[size_t(id)] == kTokenControl || types_[size_t(id)] == kTokenUserDefined);
        return ok ? id : -1;
    };
    for (const char *name : kEogNames) {
        if (int32_t id = named_special(name); id >= 0) eog_[size_t(id)] = 1;
    }
    // The harmony format (gpt-oss's o200k_harmony vocabulary) closes every message with
    // <|end|>, the reasoning ("analysis") message before the answer included; the answer ends
    // with <|return|> and a tool call with <|call|>. Where both of those exist, <|end|> does
    // not end generation (as llama.cpp decides it), even when the file names it eos or eot.
    const int32_t harmony_return = named_special("<|return|>");
    const int32_t harmony_call = named_special("<|call|>");
    const int32_t harmony_end = named_special("<|end|>");
    if (harmony_return >= 0 && harmony_call >= 0 && harmony_end >= 0) eog_[size_t(harmony_end)] = 0;

    // Pre-tokenizer.
    if (kind_ == Kind::kByteBpe) {
        if (pre_ == "smollm" || pre_ == "starcoder" || pre_ == "refact") {
            pre_kind_ = PreTokenizer::kSmollm;
        } else if (pre_ == "llama-bpe" || pre_ == "llama3" || pre_ == "llama-v3") {
            pre_kind_ = PreTokenizer::kLlama3;
            ignore_merges_ = true;
        } else if (pre_ == "qwen2" || pre_ == "deepseek-r1-qwen") {
            pre_kind_ = PreTokenizer::kQwen2;
        } else if (pre_ == "gpt-4o" || pre_ == "llama4" || pre_ == "kanana2" || pre_ == "talkie" ||
                   pre_ == "minimax-m2") {
            // The names llama.cpp gives the o200k split pattern (whole words are still merged,
            // as there: no ignore_merges).
            pre_kind_ = PreTokenizer::kO200k;
        } else if (pre_.empty() || pre_ == "default" || pre_ == "gpt2" || pre_ == "gpt-2") {
            pre_kind_ = PreTokenizer::kGpt2;
        } else {
            LLMKV_LOG_WARN_F("tokenizer pre-tokenizer \"%s\" is not known; using GPT-2's pattern",
                             pre_.c_str());
            pre_kind_ = PreTokenizer::kGpt2;
        }
    }
}

int32_t Tokenizer::lookup_text(std::string_view text) const {
    auto it = token_ids_.find(text);
    return it == token_ids_.end() ? -1 : it->second;
}

int32_t Tokenizer::find_token(std::string_view text) const {
    return lookup_text(text);
}

void Tokenizer::check_id(int32_t id) const {
    if (id < 0 || size_t(id) >= tokens_.size()) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "token id %d is outside the vocabulary of %zu", id,
             tokens_.size());
    }
}

const std::string &Tokenizer::token_text(int32_t id) const {
    check_id(id);
    return tokens_[size_t(id)];
}

const std::string &Tokenizer::token_piece(int32_t id) const {
    check_id(id);
    return pieces_[size_t(id)];
}

uint32_t Tokenizer::n_unrepresentable_bytes() const {
    if (kind_ == Kind::kSpm && unk_ >= 0) return 0;
    uint32_t n = 0;
    for (int32_t id : byte_tokens_) n += id < 0;
    return n;
}

int32_t Tokenizer::token_type(int32_t id) const {
    check_id(id);
    return types_[size_t(id)];
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
    return id >= 0 && size_t(id) < eog_.size() && eog_[size_t(id)] != 0;
}

bool Tokenizer::is_special(int32_t id) const {
    if (id < 0 || size_t(id) >= tokens_.size()) return false;
    if (id == bos_ || id == eos_ || id == eot_ || id == pad_) return true;
    int32_t t = types_[size_t(id)];
    return t == kTokenControl || t == kTokenUnknown;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special,
                                       DroppedBytes *dropped) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && bos_ >= 0) out.push_back(bos_);
    if (!parse_special && n_user_defined_specials_ == 0) {
        encode_fragment(text, out, dropped);
        return out;
    }
    size_t start = 0;  // first byte of the pending text fragment
    size_t p = 0;
    while (p < text.size()) {
        int32_t hit = -1;
        for (uint32_t len : special_lengths_[uint8_t(text[p])]) {
            if (len > text.size() - p) continue;
            auto it = special_ids_.find(text.substr(p, len));
            if (it == special_ids_.end()) continue;
            if (!parse_special && types_[size_t(it->second)] != kTokenUserDefined) continue;
            hit = it->second;
            break;
        }
        if (hit < 0) {
            ++p;
            continue;
        }
        if (p > start) encode_fragment(text.substr(start, p - start), out, dropped);
        out.push_back(hit);
        p += tokens_[size_t(hit)].size();
        start = p;
    }
    if (start < text.size()) encode_fragment(text.substr(start), out, dropped);
    return out;
}

void Tokenizer::encode_fragment(std::string_view text, std::vector<int32_t> &out,
                                DroppedBytes *dropped) const {
    if (kind_ == Kind::kSpm) {
        // The space prefix goes in front of every text fragment (at the start of the text
        // and after each special token), as llama.cpp does.
        std::string s;
        s.reserve(text.size() + text.size() / 4 + 3);
        if (add_space_prefix_) s += kSpmSpace;
        for (char c : text) {
            if (c == ' ') {
                s += kSpmSpace;
            } else {
                s += c;
            }
        }
        encode_spm(s, out, dropped);
        return;
    }
    std::vector<std::string_view> words;
    if (pre_kind_ == PreTokenizer::kQwen2) {
        const std::string normalized = nfc_normalize(text);
        pretokenize(pre_kind_, normalized, words);
        for (std::string_view w : words) encode_bpe_word(w, out, dropped);
        return;
    }
    pretokenize(pre_kind_, text, words);
    for (std::string_view w : words) encode_bpe_word(w, out, dropped);
}

void Tokenizer::encode_bpe_word(std::string_view word, std::vector<int32_t> &out,
                                DroppedBytes *dropped) const {
    const size_t n = word.size();
    if (n == 0) return;
    const auto *bytes = reinterpret_cast<const unsigned char *>(word.data());
    if (ignore_merges_ && n > 1) {
        std::string mapped;
        mapped.reserve(n * 2);
        for (size_t i = 0; i < n; ++i) append_utf8(mapped, byte_to_code_point(bytes[i]));
        int32_t whole = lookup_text(mapped);
        if (whole >= 0) {
            out.push_back(whole);
            return;
        }
    }

    // Symbols in a linked list; candidate merges in a queue (lowest rank, then leftmost).
    // A queued pair is stale once either symbol changed: ids only ever get longer, so
    // comparing the ids recorded at queue time is enough.
    constexpr int32_t kGone = -2;
    struct Candidate {
        int32_t rank;
        int32_t pos;
        int32_t left;
        int32_t right;
        int32_t result;
        bool operator<(const Candidate &o) const {
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    // Bytes whose symbol is not in the vocabulary are left out before merging (so their
    // neighbours can merge), as HuggingFace's BPE without an unknown token does.
    std::vector<int32_t> ids;
    ids.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        if (byte_tokens_[bytes[i]] >= 0) {
            ids.push_back(byte_tokens_[bytes[i]]);
        } else if (dropped) {
            dropped->add(bytes[i]);
        }
    }
    const size_t m = ids.size();
    if (m <= 1) {
        out.insert(out.end(), ids.begin(), ids.end());
        return;
    }
    std::vector<int32_t> next(m), prev(m);
    for (size_t i = 0; i < m; ++i) {
        next[i] = i + 1 < m ? int32_t(i + 1) : -1;
        prev[i] = int32_t(i) - 1;
    }
    std::vector<Candidate> heap_storage;
    heap_storage.reserve(m * 2);
    std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(heap_storage));
    auto consider = [&](int32_t pos) {
        if (pos < 0) return;
        int32_t r = next[size_t(pos)];
        if (r < 0) return;
        int32_t a = ids[size_t(pos)], b = ids[size_t(r)];
        auto it = merges_.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
        if (it != merges_.end()) queue.push({it->second.rank, pos, a, b, it->second.result});
    };
    for (size_t i = 0; i + 1 < m; ++i) consider(int32_t(i));
    while (!queue.empty()) {
        Candidate c = queue.top();
        queue.pop();
        size_t pos = size_t(c.pos);
        if (ids[pos] != c.left) continue;
        int32_t r = next[pos];
        if (r < 0 || ids[size_t(r)] != c.right) continue;
        ids[pos] = c.result;
        ids[size_t(r)] = kGone;
        next[pos] = next[size_t(r)];
        if (next[pos] >= 0) prev[size_t(next[pos])] = c.pos;
        consider(prev[pos]);
        consider(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(ids[size_t(i)]);
}

void Tokenizer::push_bytes_spm(std::string_view bytes, std::vector<int32_t> &out,
                               DroppedBytes *dropped) const {
    for (char ch : bytes) {
        int32_t id = byte_tokens_[uint8_t(ch)];
        if (id < 0) id = unk_;
        if (id >= 0) {
            out.push_back(id);
        } else if (dropped) {
            dropped->add(uint8_t(ch));
        }
    }
}

void Tokenizer::encode_spm(std::string_view text, std::vector<int32_t> &out,
                           DroppedBytes *dropped) const {
    if (text.empty()) return;
    // A token SentencePiece may produce from text (not control, byte or unknown tokens).
    auto text_token = [this](std::string_view s) -> int32_t {
        int32_t id = lookup_text(s);
        if (id < 0) return -1;
        int32_t t = types_[size_t(id)];
        return (t == kTokenNormal || t == kTokenUserDefined || t == kTokenUndefined) ? id : -1;
    };
    struct Symbol {
        uint32_t off, len;
        int32_t prev, next;
    };
    std::vector<Symbol> sym;
    sym.reserve(text.size());
    const auto *p = reinterpret_cast<const unsigned char *>(text.data());
    for (size_t i = 0; i < text.size();) {
        size_t len = Utf8Stream::unit_length(p + i, text.size() - i);
        if (len == 0) len = 1;
        int32_t idx = int32_t(sym.size());
        sym.push_back({uint32_t(i), uint32_t(len), idx - 1, idx + 1});
        i += len;
    }
    sym.back().next = -1;

    struct Candidate {
        float score;
        int32_t left, right;
        uint32_t len;
        bool operator<(const Candidate &o) const {
            return score != o.score ? score < o.score : left > o.left;
        }
    };
    std::priority_queue<Candidate> queue;
    auto consider = [&](int32_t left) {
        if (left < 0) return;
        int32_t right = sym[size_t(left)].next;
        if (right < 0) return;
        const Symbol &a = sym[size_t(left)], &b = sym[size_t(right)];
        int32_t id = text_token(text.substr(a.off, a.len + b.len));
        if (id < 0) return;
        float score = scores_.empty() ? 0.0f : scores_[size_t(id)];
        queue.push({score, left, right, a.len + b.len});
    };
    for (size_t i = 0; i + 1 < sym.size(); ++i) consider(int32_t(i));
    while (!queue.empty()) {
        Candidate c = queue.top();
        queue.pop();
        Symbol &a = sym[size_t(c.left)];
        if (a.len == 0 || a.next != c.right) continue;
        Symbol &b = sym[size_t(c.right)];
        if (b.len == 0 || a.len + b.len != c.len) continue;
        a.len += b.len;
        b.len = 0;
        a.next = b.next;
        if (a.next >= 0) sym[size_t(a.next)].prev = c.left;
        consider(a.prev);
        consider(c.left);
    }
    for (int32_t i = 0; i >= 0; i = sym[size_t(i)].next) {
        std::string_view piece = text.substr(sym[size_t(i)].off, sym[size_t(i)].len);
        int32_t id = text_token(piece);
        if (id >= 0) {
            out.push_back(id);
        } else {
            push_bytes_spm(piece, out, dropped);
        }
    }
}

std::string Tokenizer::decode(const int32_t *ids, size_t n) const {
    std::string out;
    bool strip = kind_ == Kind::kSpm && add_space_prefix_;
    for (size_t i = 0; i < n; ++i) {
        const std::string &piece = token_piece(ids[i]);
        if (strip && types_[size_t(ids[i])] != kTokenControl) {
            strip = false;
            if (!piece.empty() && piece[0] == ' ') {
                out.append(piece, 1, std::string::npos);
                continue;
            }
        }
        out += piece;
    }
    return out;
}

}  // namespace llmkv
