// Fuzz target `tokenizer`: encode/decode on real vocabularies built once, for any bytes.
//
// Input: byte 0 picks the vocabulary and the flags, the rest is the text.
// Vocabularies: the tiny test model's (byte-level BPE, smollm pre-tokenizer, ChatML
// specials), a synthetic byte-level BPE with the GPT-2 and with the Llama 3 pre-tokenizer
// (more merges, control and user-defined tokens), and a SentencePiece vocabulary with byte
// fallback, with and without the space prefix. Every one covers all 256 bytes.
// Properties:
//  - encode never throws and every id is inside the vocabulary; add_bos puts BOS first;
//  - decode(encode(text)) == text for byte-level BPE, with and without special-token
//    parsing, for any bytes; for SentencePiece without special-token parsing, for text
//    without U+2581 (which the vocabulary uses for the space), and with special-token
//    parsing too when there is no space prefix;
//  - streaming the decoded pieces through Utf8Stream gives the same bytes back, and
//    take_complete never hands out part of a character.
#include <memory>

#include "common/error.h"
#include "fuzz_common.h"
#include "fuzz_vocab.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tiny_model.h"

using namespace llmkv;

namespace {

struct Vocabs {
    std::vector<uint8_t> tiny_bytes;
    std::unique_ptr<GgufFile> tiny_file;
    std::vector<std::unique_ptr<Tokenizer>> list;
};

Vocabs *g_vocabs = nullptr;

void setup() {
    if (g_vocabs) return;
    fuzz::quiet_logs();
    auto *v = new Vocabs();
    testing::TinyModelSpec spec;
    spec.n_layers = 1;
    spec.n_embd = 32;
    spec.n_ff = 32;
    spec.n_heads = 2;
    spec.n_kv_heads = 1;
    v->tiny_bytes = testing::build_tiny_model(spec);
    v->tiny_file = GgufFile::from_memory(v->tiny_bytes.data(), v->tiny_bytes.size());
    v->list.push_back(Tokenizer::from_gguf(*v->tiny_file));
    v->list.push_back(std::make_unique<Tokenizer>(fuzz::byte_bpe_vocab("gpt2")));
    v->list.push_back(std::make_unique<Tokenizer>(fuzz::byte_bpe_vocab("llama-bpe")));
    v->list.push_back(std::make_unique<Tokenizer>(fuzz::spm_vocab(true)));
    v->list.push_back(std::make_unique<Tokenizer>(fuzz::spm_vocab(false)));
    g_vocabs = v;
}

std::string show(std::string_view s) {
    std::string out;
    for (unsigned char c : s.substr(0, 200)) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), c >= 0x20 && c < 0x7f && c != '\\' ? "%c" : "\\x%02x", c);
        out += buf;
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setup();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    if (size == 0) return 0;
    const uint8_t sel = data[0];
    const Tokenizer &tok = *g_vocabs->list[(sel & 7) % g_vocabs->list.size()];
    const bool parse_special = sel & 0x10;
    const bool add_bos = sel & 0x20;
    const std::string_view text(reinterpret_cast<const char *>(data + 1), size - 1);
    const bool spm = tok.model() == "llama";

    std::vector<int32_t> ids;
    try {
        ids = tok.encode(text, add_bos, parse_special);
    } catch (const Error &e) {
        FUZZ_CHECK(false, "encode threw %s: %s", llmkv_status_string(e.status()), e.what());
    }
    for (int32_t id : ids)
        FUZZ_CHECK(id >= 0 && size_t(id) < tok.n_vocab(), "id %d outside the vocabulary", id);
    size_t skip = 0;
    if (add_bos && tok.bos() >= 0) {
        FUZZ_CHECK(!ids.empty() && ids[0] == tok.bos(), "add_bos did not put BOS first");
        skip = 1;
    }
    if (!parse_special) {
        // Control tokens never come out of plain text.
        for (size_t i = skip; i < ids.size(); ++i) {
            FUZZ_CHECK(tok.token_type(ids[i]) != kTokenControl, "control token %d from plain text",
                       ids[i]);
        }
    }

    std::string decoded;
    try {
        decoded = tok.decode(ids.data() + skip, ids.size() - skip);
    } catch (const Error &e) {
        FUZZ_CHECK(false, "decode threw %s: %s", llmkv_status_string(e.status()), e.what());
    }
    bool must_round_trip = true;
    if (spm) {
        must_round_trip = text.find("\xE2\x96\x81") == std::string_view::npos &&
                          (!parse_special || !tok.add_space_prefix());
    }
    if (must_round_trip) {
        FUZZ_CHECK(
            decoded == text,
            "round trip differs (vocabulary %u, parse_special %d)\n  text:    %s\n  decoded: %s",
            unsigned((sel & 7) % g_vocabs->list.size()), int(parse_special), show(text).c_str(),
            show(decoded).c_str());
    }

    // Streaming: the pieces in order, handed out in whole characters.
    Utf8Stream stream;
    std::string streamed;
    const size_t cap = 1 + (sel >> 6);  // 1..4 bytes per take
    for (size_t i = skip; i < ids.size(); ++i) {
        stream.push(tok.token_bytes(ids[i]));
        for (;;) {
            std::string part = stream.take_complete(cap);
            if (part.empty()) break;
            FUZZ_CHECK(part.size() <= cap, "take_complete(%zu) gave %zu bytes", cap, part.size());
            streamed += part;
        }
    }
    streamed += stream.take_all();
    FUZZ_CHECK(stream.pending() == 0, "bytes left after take_all");
    std::string pieces;
    for (size_t i = skip; i < ids.size(); ++i) pieces += tok.token_bytes(ids[i]);
    FUZZ_CHECK(streamed == pieces, "Utf8Stream changed the bytes\n  in:  %s\n  out: %s",
               show(pieces).c_str(), show(streamed).c_str());
    return 0;
}

namespace llmkv::fuzz {

Seeds seeds() {
    auto seed = [](uint8_t sel, const std::string &text) {
        std::vector<uint8_t> b(1 + text.size());
        b[0] = sel;
        std::copy(text.begin(), text.end(), b.begin() + 1);
        return b;
    };
    const std::string chat = "<|im_start|>user\nthe answer is 123 and then<|im_end|>\n";
    const std::string mixed =
        "Hello, world! Ünïcödé 日本語 \xF0\x9F\x98\x80 it's   \t\n\n 1234567 the";
    const std::string invalid =
        std::string("ab\xC3(\xE2\x82 \xFF\xFE\x80\xF0\x9F\x98", 18) + std::string(1, '\0') + "z";
    const std::string llama3 =
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nI'm here<|eot_id|>";
    Seeds s;
    s.push_back({"tiny-chat", seed(0x10, chat)});
    s.push_back({"tiny-plain", seed(0x00, mixed)});
    s.push_back({"gpt2-invalid", seed(0x61, invalid)});
    s.push_back({"llama3-special", seed(0x32, llama3)});
    s.push_back({"llama3-words", seed(0x82, "THE and THE're 12345 thing  \r\n\r\n  x")});
    s.push_back({"spm-prefix", seed(0x23, " the and  in\xE2\x96\x81g é 日本")});
    s.push_back({"spm-special", seed(0x14, "<s>[INST] the ing [/INST]</s>" + invalid)});
    return s;
}

}  // namespace llmkv::fuzz
