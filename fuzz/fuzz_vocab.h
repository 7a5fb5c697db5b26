// Synthetic vocabularies and GGUF images for the fuzz targets: a byte-level BPE vocabulary
// (all 256 byte symbols, merges, Llama 3 style specials), a SentencePiece vocabulary with
// byte fallback (<0x00>..<0xFF>), and vocabulary-only GGUF files of each chat family.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "model/tokenizer.h"

namespace llmkv::fuzz {

// GPT-2's byte-to-symbol map: the UTF-8 text of byte b's byte-level symbol.
std::string byte_symbol(int b);

// Byte-level BPE ("gpt2") covering every byte, with merges and control/user-defined tokens
// (<|begin_of_text|>, <|start_header_id|>, <|end_header_id|>, <|eot_id|>, <|user_tag|>).
TokenizerVocab byte_bpe_vocab(const std::string &pre);
// SentencePiece ("llama") with byte fallback for every byte, "▁" and scored pieces, and
// <unk>, <s>, </s>.
TokenizerVocab spm_vocab(bool add_space_prefix);

// Writes the tokenizer.ggml.* keys of v.
void add_vocab(GgufWriter &w, const TokenizerVocab &v);

// Vocabulary-only GGUF images (no tensors) of each chat family.
std::vector<uint8_t> chatml_gguf(bool default_system);
std::vector<uint8_t> llama3_gguf();
std::vector<uint8_t> llama2_gguf();
std::vector<uint8_t> plain_gguf();  // no template: no chat family

}  // namespace llmkv::fuzz
