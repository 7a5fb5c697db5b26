// json_lite: a small JSON reader for test fixtures (objects, arrays, strings with \u escapes
// and surrogate pairs, numbers, true/false/null). Header-only; throws std::runtime_error
// with the byte offset on malformed input. Not for untrusted or huge documents.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace json_lite {

struct Value {
    enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
    Type type = Type::kNull;
    bool boolean = false;
    double number = 0;
    std::string string;
    std::vector<Value> array;
    std::map<std::string, Value> object;

    bool is_null() const { return type == Type::kNull; }
    // The member `key`; throws when this is not an object or has no such member.
    const Value &operator[](const std::string &key) const {
        auto it = object.find(key);
        if (type != Type::kObject || it == object.end()) {
            throw std::runtime_error("json_lite: no member \"" + key + "\"");
        }
        return it->second;
    }
    const Value *find(const std::string &key) const {
        auto it = object.find(key);
        return it == object.end() ? nullptr : &it->second;
    }
};

class Parser {
public:
    explicit Parser(std::string_view text) : s_(text) {}

    Value parse_document() {
        Value v = parse_value();
        skip_ws();
        if (i_ != s_.size()) error("trailing characters");
        return v;
    }

private:
    [[noreturn]] void error(const std::string &what) const {
        throw std::runtime_error("json_lite: " + what + " at byte " + std::to_string(i_));
    }
    void skip_ws() {
        while (i_ < s_.size() &&
               (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
            ++i_;
        }
    }
    char peek() {
        skip_ws();
        if (i_ >= s_.size()) error("unexpected end");
        return s_[i_];
    }
    void expect(char c) {
        if (peek() != c) error(std::string("expected '") + c + "'");
        ++i_;
    }
    bool consume_word(std::string_view w) {
        if (s_.substr(i_, w.size()) != w) return false;
        i_ += w.size();
        return true;
    }

    Value parse_value() {
        Value v;
        char c = peek();
        if (c == '{') {
            v.type = Value::Type::kObject;
            ++i_;
            if (peek() == '}') {
                ++i_;
                return v;
            }
            for (;;) {
                if (peek() != '"') error("expected a member name");
                std::string key = parse_string();
                expect(':');
                v.object[key] = parse_value();
                char d = peek();
                ++i_;
                if (d == '}') break;
                if (d != ',') error("expected ',' or '}'");
            }
        } else if (c == '[') {
            v.type = Value::Type::kArray;
            ++i_;
            if (peek() == ']') {
                ++i_;
                return v;
            }
            for (;;) {
                v.array.push_back(parse_value());
                char d = peek();
                ++i_;
                if (d == ']') break;
                if (d != ',') error("expected ',' or ']'");
            }
        } else if (c == '"') {
            v.type = Value::Type::kString;
            v.string = parse_string();
        } else if (consume_word("true")) {
            v.type = Value::Type::kBool;
            v.boolean = true;
        } else if (consume_word("false")) {
            v.type = Value::Type::kBool;
        } else if (consume_word("null")) {
            v.type = Value::Type::kNull;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            v.type = Value::Type::kNumber;
            size_t start = i_;
            while (i_ < s_.size() &&
                   std::string_view("+-.eE0123456789").find(s_[i_]) != std::string_view::npos) {
                ++i_;
            }
            std::string num(s_.substr(start, i_ - start));
            char *end = nullptr;
            v.number = std::strtod(num.c_str(), &end);
            if (end != num.c_str() + num.size()) error("bad number");
        } else {
            error("unexpected character");
        }
        return v;
    }

    uint32_t parse_hex4() {
        if (i_ + 4 > s_.size()) error("short \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
            char c = s_[i_++];
            v <<= 4;
            if (c >= '0' && c <= '9') {
                v |= uint32_t(c - '0');
            } else if (c >= 'a' && c <= 'f') {
                v |= uint32_t(c - 'a' + 10);
            } else if (c >= 'A' && c <= 'F') {
                v |= uint32_t(c - 'A' + 10);
            } else {
                error("bad \\u escape");
            }
        }
        return v;
    }

    static void append_utf8(std::string &out, uint32_t c) {
        if (c < 0x80) {
            out += char(c);
        } else if (c < 0x800) {
            out += char(0xC0 | (c >> 6));
            out += char(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            out += char(0xE0 | (c >> 12));
            out += char(0x80 | ((c >> 6) & 0x3F));
            out += char(0x80 | (c & 0x3F));
        } else {
            out += char(0xF0 | (c >> 18));
            out += char(0x80 | ((c >> 12) & 0x3F));
            out += char(0x80 | ((c >> 6) & 0x3F));
            out += char(0x80 | (c & 0x3F));
        }
    }

    std::string parse_string() {
        expect('"');
        std::string out;
        for (;;) {
            if (i_ >= s_.size()) error("unterminated string");
            char c = s_[i_++];
            if (c == '"') break;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (i_ >= s_.size()) error("unterminated escape");
            char e = s_[i_++];
            switch (e) {
                case '"':
                    out += '"';
                    break;
                case '\\':
                    out += '\\';
                    break;
                case '/':
                    out += '/';
                    break;
                case 'b':
                    out += '\b';
                    break;
                case 'f':
                    out += '\f';
                    break;
                case 'n':
                    out += '\n';
                    break;
                case 'r':
                    out += '\r';
                    break;
                case 't':
                    out += '\t';
                    break;
                case 'u': {
                    uint32_t c1 = parse_hex4();
                    if (c1 >= 0xD800 && c1 <= 0xDBFF && s_.substr(i_, 2) == "\\u") {
                        size_t save = i_;
                        i_ += 2;
                        uint32_t c2 = parse_hex4();
                        if (c2 >= 0xDC00 && c2 <= 0xDFFF) {
                            c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
                        } else {
                            i_ = save;
                        }
                    }
                    append_utf8(out, c1);
                    break;
                }
                default:
                    error("bad escape");
            }
        }
        return out;
    }

    std::string_view s_;
    size_t i_ = 0;
};

inline Value parse(std::string_view text) {
    return Parser(text).parse_document();
}

}  // namespace json_lite
