// Synthetic vocabularies of fuzz_vocab.h.
#include "fuzz_vocab.h"

namespace llmkv::fuzz {

namespace {

bool printable_byte(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

void utf8_append(std::string &s, uint32_t c) {
    if (c < 0x80) {
        s += char(c);
    } else if (c < 0x800) {
        s += char(0xC0 | (c >> 6));
        s += char(0x80 | (c & 0x3F));
    } else {
        s += char(0xE0 | (c >> 12));
        s += char(0x80 | ((c >> 6) & 0x3F));
        s += char(0x80 | (c & 0x3F));
    }
}

// Byte-level text of a plain string (each byte replaced by its symbol).
std::string to_symbols(const std::string &text) {
    std::string out;
    for (unsigned char c : text) out += byte_symbol(c);
    return out;
}

}  // namespace

std::string byte_symbol(int b) {
    uint32_t cp = uint32_t(b);
    if (!printable_byte(b)) {
        uint32_t k = 0;
        for (int c = 0; c < b; ++c) k += printable_byte(c) ? 0 : 1;
        cp = 0x100 + k;
    }
    std::string s;
    utf8_append(s, cp);
    return s;
}

TokenizerVocab byte_bpe_vocab(const std::string &pre) {
    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = pre;
    for (int b = 0; b < 256; ++b) {
        v.tokens.push_back(byte_symbol(b));
        v.token_types.push_back(kTokenNormal);
    }
    // Merges build a few English words; each result is added as a token.
    const char *merges[][2] = {{" ", "t"},   {"h", "e"},   {" t", "he"},    {"i", "n"},
                               {" ", "a"},   {"e", "r"},   {"o", "n"},      {" a", "n"},
                               {" an", "d"}, {"in", "g"},  {"1", "2"},      {"12", "3"},
                               {" ", " "},   {"\n", "\n"}, {"\xC3", "\xA9"}};
    for (auto &m : merges) {
        std::string a = to_symbols(m[0]), b = to_symbols(m[1]);
        v.merges.push_back(a + " " + b);
        v.tokens.push_back(a + b);
        v.token_types.push_back(kTokenNormal);
    }
    for (const char *s :
         {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}) {
        v.tokens.push_back(s);
        v.token_types.push_back(kTokenControl);
    }
    v.tokens.push_back("<|user_tag|>");
    v.token_types.push_back(kTokenUserDefined);
    v.bos = int32_t(v.tokens.size() - 5);
    v.eos = int32_t(v.tokens.size() - 2);
    v.add_bos = true;
    return v;
}

TokenizerVocab spm_vocab(bool add_space_prefix) {
    TokenizerVocab v;
    v.model = "llama";
    v.pre = "default";
    auto add = [&](const std::string &t, int32_t type, float score) {
        v.tokens.push_back(t);
        v.token_types.push_back(type);
        v.scores.push_back(score);
    };
    add("<unk>", kTokenUnknown, 0.0f);
    add("<s>", kTokenControl, 0.0f);
    add("</s>", kTokenControl, 0.0f);
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", kTokenByte, 0.0f);
    }
    const std::string sp = "\xE2\x96\x81";
    const char *pieces[] = {"t",  "h", "e",  "a",    "n",  "d",   "i",   "g",   "o",
                            "r",  "s", "he", "the",  "an", "and", "in",  "ing", "er",
                            "on", "[", "]",  "INST", "/",  "é",   "日本"};
    float score = -1.0f;
    add(sp, kTokenNormal, -0.5f);
    for (const char *p : pieces) {
        add(p, kTokenNormal, score);
        add(sp + p, kTokenNormal, score + 0.25f);
        score -= 0.5f;
    }
    add(sp + sp, kTokenNormal, -20.0f);
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    v.add_bos = true;
    v.add_space_prefix = add_space_prefix;
    return v;
}

void add_vocab(GgufWriter &w, const TokenizerVocab &v) {
    w.add_string("tokenizer.ggml.model", v.model);
    w.add_string("tokenizer.ggml.pre", v.pre);
    w.add_string_array("tokenizer.ggml.tokens", v.tokens);
    if (!v.scores.empty()) w.add_float32_array("tokenizer.ggml.scores", v.scores);
    if (!v.token_types.empty()) w.add_int32_array("tokenizer.ggml.token_type", v.token_types);
    if (!v.merges.empty()) w.add_string_array("tokenizer.ggml.merges", v.merges);
    if (v.bos >= 0) w.add_uint32("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
    if (v.eos >= 0) w.add_uint32("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
    if (v.unk >= 0) w.add_uint32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
    w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
    w.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
}

std::vector<uint8_t> chatml_gguf(bool default_system) {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    TokenizerVocab v = byte_bpe_vocab("smollm");
    for (const char *s : {"<|im_start|>", "<|im_end|>"}) {
        v.tokens.push_back(s);
        v.token_types.push_back(kTokenControl);
    }
    add_vocab(w, v);
    std::string tmpl =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}";
    if (default_system) {
        tmpl =
            "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a fuzzing "
            "assistant.<|im_end|>\n' }}{% endif %}" +
            tmpl;
    }
    w.add_string("tokenizer.chat_template", tmpl);
    return w.build();
}

std::vector<uint8_t> llama3_gguf() {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    add_vocab(w, byte_bpe_vocab("llama-bpe"));
    w.add_string("tokenizer.chat_template",
                 "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}");
    return w.build();
}

std::vector<uint8_t> llama2_gguf() {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    add_vocab(w, spm_vocab(true));
    // <<SYS>> tells Llama 2's format from Mistral's.
    w.add_string("tokenizer.chat_template",
                 "{{ bos_token + '[INST] <<SYS>>' + content + ' [/INST]' }}");
    return w.build();
}

std::vector<uint8_t> plain_gguf() {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    add_vocab(w, spm_vocab(false));
    return w.build();
}

}  // namespace llmkv::fuzz
