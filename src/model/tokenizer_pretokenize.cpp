// Pre-tokenization for byte-level BPE: the GPT-2, SmolLM (isolated digits + GPT-2), Llama 3,
// Qwen2 and o200k (GPT-4o, gpt-oss) split patterns, matched by hand over code points with
// utf8proc categories (each matcher returns the end of the match of the pattern's
// alternatives, tried in order, as a backtracking regex engine finds it), and the NFC
// normalization Qwen2 applies first.
#include <utf8proc.h>

#include <cstdlib>

#include "model/tokenizer.h"

namespace llmkv {

namespace {

enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// The two letter sets of the o200k pattern, as bits: kUpperSide is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}],
// kLowerSide [\p{Ll}\p{Lm}\p{Lo}\p{M}] (modifier and other letters and marks are in both).
enum LetterSide : uint8_t { kUpperSide = 1, kLowerSide = 2 };

constexpr uint32_t kInvalid = 0xFFFFFFFFu;  // a byte that is not part of valid UTF-8

// The Unicode White_Space property (what \s matches in the reference regex engine).
bool is_white_space(uint32_t c) {
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || c == 0x20;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

CharClass classify(uint32_t c) {
    if (c == kInvalid) return kOther;
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return kLetter;
        if (c >= '0' && c <= '9') return kNumber;
        return is_white_space(c) ? kSpace : kOther;
    }
    if (is_white_space(c)) return kSpace;
    switch (utf8proc_category(utf8proc_int32_t(c))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
            return kLetter;
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO:
            return kNumber;
        default:
            return kOther;
    }
}

uint8_t letter_sides(uint32_t c) {
    if (c < 0x80) {
        if (c >= 'A' && c <= 'Z') return kUpperSide;
        return (c >= 'a' && c <= 'z') ? kLowerSide : 0;
    }
    if (c == kInvalid) return 0;
    switch (utf8proc_category(utf8proc_int32_t(c))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LT:
            return kUpperSide;
        case UTF8PROC_CATEGORY_LL:
            return kLowerSide;
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_MN:
        case UTF8PROC_CATEGORY_MC:
        case UTF8PROC_CATEGORY_ME:
            return kUpperSide | kLowerSide;
        default:
            return 0;
    }
}

// The text as code points: cp[i] starts at byte off[i]; off has one more entry (the end).
// sides (LetterSide bits) is filled only when asked for (the o200k pattern).
struct CodePoints {
    std::vector<uint32_t> cp;
    std::vector<uint8_t> cls;
    std::vector<uint8_t> sides;
    std::vector<size_t> off;

    explicit CodePoints(std::string_view text, bool with_sides = false) {
        cp.reserve(text.size());
        cls.reserve(text.size());
        if (with_sides) sides.reserve(text.size());
        off.reserve(text.size() + 1);
        const auto *p = reinterpret_cast<const unsigned char *>(text.data());
        size_t i = 0;
        while (i < text.size()) {
            size_t len = Utf8Stream::unit_length(p + i, text.size() - i);
            uint32_t c;
            if (len == 0 || (len == 1 && p[i] >= 0x80)) {
                len = 1;
                c = kInvalid;
            } else if (len == 1) {
                c = p[i];
            } else {
                c = p[i] & (0x7Fu >> len);
                for (size_t k = 1; k < len; ++k) c = (c << 6) | (p[i + k] & 0x3Fu);
            }
            cp.push_back(c);
            cls.push_back(classify(c));
            if (with_sides) sides.push_back(letter_sides(c));
            off.push_back(i);
            i += len;
        }
        off.push_back(text.size());
    }
    size_t size() const { return cp.size(); }
};

// Decimal digits added after Unicode 15 (the bundled utf8proc's tables may predate them).
// HuggingFace's Digits pre-tokenizer (Rust's char::is_numeric) isolates them.
bool is_recent_digit(uint32_t c) {
    static constexpr uint32_t kRanges[][2] = {
        {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9},
        {0x11DE0, 0x11DE9}, {0x16130, 0x16139}, {0x16D70, 0x16D79},
        {0x16FF4, 0x16FF6}, {0x1CCF0, 0x1CCF9}, {0x1E5F1, 0x1E5FA},
    };
    if (c < 0x10D40 || c == kInvalid) return false;
    for (const auto &r : kRanges) {
        if (c >= r[0] && c <= r[1]) return true;
    }
    return false;
}

bool is_cr_lf(uint32_t c) {
    return c == '\r' || c == '\n';
}

uint32_t ascii_lower(uint32_t c) {
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

// 's|'t|'re|'ve|'m|'ll|'d, case-sensitive or not. Returns the match end or 0.
size_t match_contraction(const CodePoints &t, size_t i, size_t end, bool fold) {
    if (t.cp[i] != '\'' || i + 1 >= end) return 0;
    uint32_t a = fold ? ascii_lower(t.cp[i + 1]) : t.cp[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= end) return 0;
    uint32_t b = fold ? ascii_lower(t.cp[i + 2]) : t.cp[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
}

size_t skip_class(const CodePoints &t, size_t j, size_t end, uint8_t cls) {
    while (j < end && t.cls[j] == cls) ++j;
    return j;
}

// \s+(?!\S)|\s+ at a whitespace code point i.
size_t match_space_run(const CodePoints &t, size_t i, size_t end) {
    size_t k = skip_class(t, i, end, kSpace);
    if (k == end || k - i < 2) return k;  // to the end, or a single space before \S
    return k - 1;                         // leave the last one to prefix the next word
}

size_t match_gpt2(const CodePoints &t, size_t i, size_t end) {
    if (size_t m = match_contraction(t, i, end, false)) return m;
    size_t j = i + (t.cp[i] == ' ' ? 1 : 0);  // ' ?'
    if (j < end && t.cls[j] != kSpace) return skip_class(t, j, end, t.cls[j]);
    return match_space_run(t, i, end);
}

// The Llama 3 pattern with \p{N}{1,max_digits}; Qwen2's is the same with one digit.
size_t match_llama3_like(const CodePoints &t, size_t i, size_t end, size_t max_digits) {
    if (size_t m = match_contraction(t, i, end, true)) return m;
    uint8_t c0 = t.cls[i];
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (c0 == kLetter) return skip_class(t, i, end, kLetter);
    if (c0 != kNumber && !is_cr_lf(t.cp[i]) && i + 1 < end && t.cls[i + 1] == kLetter) {
        return skip_class(t, i + 1, end, kLetter);
    }
    // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2)
    if (c0 == kNumber) {
        size_t j = i;
        while (j < end && j - i < max_digits && t.cls[j] == kNumber) ++j;
        return j;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t j = i + (t.cp[i] == ' ' ? 1 : 0);
    if (j < end && t.cls[j] == kOther) {
        j = skip_class(t, j, end, kOther);
        while (j < end && is_cr_lf(t.cp[j])) ++j;
        return j;
    }
    // \s*[\r\n]+ : through the last CR/LF of the whitespace run
    size_t k = skip_class(t, i, end, kSpace);
    for (size_t m = k; m > i; --m) {
        if (is_cr_lf(t.cp[m - 1])) return m;
    }
    return match_space_run(t, i, end);
}

size_t match_llama3(const CodePoints &t, size_t i, size_t end) {
    return match_llama3_like(t, i, end, 3);
}

size_t match_qwen2(const CodePoints &t, size_t i, size_t end) {
    return match_llama3_like(t, i, end, 1);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) after the letters ending at j: the end of the contraction, or j.
// Case folding as the reference engine does it: U+017F (long s) folds to 's' too.
size_t contraction_after(const CodePoints &t, size_t j, size_t end) {
    if (j >= end || t.cp[j] != '\'') return j;
    auto fold = [](uint32_t c) { return c == 0x17F ? uint32_t('s') : ascii_lower(c); };
    uint32_t a = j + 1 < end ? fold(t.cp[j + 1]) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return j + 2;
    uint32_t b = j + 2 < end ? fold(t.cp[j + 2]) : 0;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return j + 3;
    return j;
}

size_t skip_side(const CodePoints &t, size_t j, size_t end, uint8_t side) {
    while (j < end && (t.sides[j] & side)) ++j;
    return j;
}

// The o200k pattern (tiktoken's o200k_base; U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}],
// W = [\p{Ll}\p{Lm}\p{Lo}\p{M}], P = [^\r\n\p{L}\p{N}], C = (?i:'s|'t|'re|'ve|'m|'ll|'d)):
//   P?U*W+C? | P?U+W*C? | \p{N}{1,3} |  ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// Marks are not \p{L}: they may be P and are in both U and W.
size_t match_o200k(const CodePoints &t, size_t i, size_t end) {
    const bool prefix = t.cls[i] != kLetter && t.cls[i] != kNumber && !is_cr_lf(t.cp[i]);
    // P? is tried with the prefix first, then without it.
    const size_t starts[2] = {prefix ? i + 1 : i, i};
    const size_t n_starts = prefix ? 2 : 1;
    // P?U*W+C?: U* takes its whole run, then gives code points back until W+ can start, which
    // then runs as far as it can (after giving back, only over the one code point: everything
    // after it in U's run is Lu/Lt).
    for (size_t s = 0; s < n_starts; ++s) {
        const size_t j = starts[s];
        const size_t k = skip_side(t, j, end, kUpperSide);
        if (k < end && (t.sides[k] & kLowerSide)) {
            return contraction_after(t, skip_side(t, k, end, kLowerSide), end);
        }
        for (size_t e = k; e > j; --e) {
            if (t.sides[e - 1] & kLowerSide) {
                return contraction_after(t, skip_side(t, e - 1, end, kLowerSide), end);
            }
        }
    }
    // P?U+W*C?
    for (size_t s = 0; s < n_starts; ++s) {
        const size_t j = starts[s];
        const size_t k = skip_side(t, j, end, kUpperSide);
        if (k > j) return contraction_after(t, skip_side(t, k, end, kLowerSide), end);
    }
    // \p{N}{1,3}
    if (t.cls[i] == kNumber) {
        size_t j = i;
        while (j < end && j - i < 3 && t.cls[j] == kNumber) ++j;
        return j;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n/]*
    size_t j = i + (t.cp[i] == ' ' ? 1 : 0);
    if (j < end && t.cls[j] == kOther) {
        j = skip_class(t, j, end, kOther);
        while (j < end && (is_cr_lf(t.cp[j]) || t.cp[j] == '/')) ++j;
        return j;
    }
    // \s*[\r\n]+ : through the last CR/LF of the whitespace run
    size_t k = skip_class(t, i, end, kSpace);
    for (size_t m = k; m > i; --m) {
        if (is_cr_lf(t.cp[m - 1])) return m;
    }
    return match_space_run(t, i, end);
}

template <typename Matcher>
void split_range(const CodePoints &t, std::string_view text, size_t begin, size_t end,
                 Matcher match, std::vector<std::string_view> &out) {
    size_t i = begin;
    while (i < end) {
        size_t m = match(t, i, end);
        if (m <= i) m = i + 1;  // cannot happen: every code point matches some alternative
        out.push_back(text.substr(t.off[i], t.off[m] - t.off[i]));
        i = m;
    }
}

}  // namespace

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view> &out) {
    if (text.empty()) return;
    CodePoints t(text, kind == PreTokenizer::kO200k);
    size_t n = t.size();
    switch (kind) {
        case PreTokenizer::kGpt2:
            split_range(t, text, 0, n, match_gpt2, out);
            break;
        case PreTokenizer::kLlama3:
            split_range(t, text, 0, n, match_llama3, out);
            break;
        case PreTokenizer::kQwen2:
            split_range(t, text, 0, n, match_qwen2, out);
            break;
        case PreTokenizer::kO200k:
            split_range(t, text, 0, n, match_o200k, out);
            break;
        case PreTokenizer::kSmollm: {
            size_t i = 0;
            auto digit = [&t](size_t k) { return t.cls[k] == kNumber || is_recent_digit(t.cp[k]); };
            while (i < n) {
                if (digit(i)) {
                    out.push_back(text.substr(t.off[i], t.off[i + 1] - t.off[i]));
                    ++i;
                    continue;
                }
                size_t k = i;
                while (k < n && !digit(k)) ++k;
                split_range(t, text, i, k, match_gpt2, out);
                i = k;
            }
            break;
        }
    }
}

std::string nfc_normalize(std::string_view text) {
    const auto *p = reinterpret_cast<const unsigned char *>(text.data());
    size_t i = 0;
    while (i < text.size() && p[i] < 0x80) ++i;
    if (i == text.size()) return std::string(text);  // ASCII is already in NFC
    if (i > 0) --i;  // the last ASCII character may compose with what follows (e + U+0301)
    std::string out(text.substr(0, i));
    out.reserve(text.size() + 8);
    while (i < text.size()) {
        // The longest run of valid UTF-8 from i, or one invalid byte.
        size_t j = i;
        while (j < text.size()) {
            size_t len = Utf8Stream::unit_length(p + j, text.size() - j);
            if (len == 0 || (len == 1 && p[j] >= 0x80)) break;
            j += len;
        }
        if (j == i) {
            out += char(p[i++]);
            continue;
        }
        utf8proc_uint8_t *norm = nullptr;
        utf8proc_ssize_t n = utf8proc_map(p + i, utf8proc_ssize_t(j - i), &norm,
                                          utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        if (n >= 0 && norm) {
            out.append(reinterpret_cast<const char *>(norm), size_t(n));
        } else {
            out.append(text.substr(i, j - i));  // cannot happen for valid UTF-8; keep it as is
        }
        std::free(norm);
        i = j;
    }
    return out;
}

}  // namespace llmkv
