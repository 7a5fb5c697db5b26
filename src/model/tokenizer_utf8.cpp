// Utf8Stream: buffers streamed token bytes and hands them out as whole UTF-8 characters,
// passing through bytes that can never become part of a valid character.
#include <algorithm>

#include "model/tokenizer.h"

namespace llmkv {

size_t Utf8Stream::unit_length(const unsigned char *p, size_t avail) {
    if (avail == 0) return 0;
    unsigned char b = p[0];
    if (b < 0x80) return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;  // no overlong forms
        if (b == 0xED) hi = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;  // no overlong forms
        if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
        return 1;  // a continuation byte, C0, C1 or F5..FF: never starts a character
    }
    for (size_t k = 1; k < need; ++k) {
        if (k >= avail) return 0;  // so far a valid prefix: wait for more
        unsigned char c = p[k];
        unsigned char klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
        if (c < klo || c > khi) return 1;  // the lead byte alone is invalid
    }
    return need;
}

void Utf8Stream::push(std::string_view bytes) {
    buf_.append(bytes.data(), bytes.size());
    const auto *p = reinterpret_cast<const unsigned char *>(buf_.data());
    while (complete_end_ < buf_.size()) {
        size_t len = unit_length(p + complete_end_, buf_.size() - complete_end_);
        if (len == 0) break;
        complete_end_ += len;
    }
}

std::string Utf8Stream::take_complete(size_t max_bytes) {
    const auto *p = reinterpret_cast<const unsigned char *>(buf_.data());
    size_t end = head_;
    while (end < complete_end_) {
        // Judge with every byte held: an invalid lead byte may need the next one to tell.
        size_t len = unit_length(p + end, buf_.size() - end);
        if (len == 0 || end - head_ + len > max_bytes) break;
        end += len;
    }
    std::string out(buf_, head_, end - head_);
    head_ = end;
    compact();
    return out;
}

std::string Utf8Stream::take_all() {
    std::string out(buf_, head_, std::string::npos);
    clear();
    return out;
}

void Utf8Stream::clear() {
    buf_.clear();
    head_ = 0;
    complete_end_ = 0;
}

void Utf8Stream::compact() {
    if (head_ == buf_.size()) {
        clear();
    } else if (head_ >= 4096 && head_ * 2 >= buf_.size()) {
        buf_.erase(0, head_);
        complete_end_ -= head_;
        head_ = 0;
    }
}

}  // namespace llmkv
