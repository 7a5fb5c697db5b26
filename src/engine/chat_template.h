// Chat templates of known model families, applied natively. A template string found in a
// model file is only inspected to recognise the family (and its default system prompt);
// it is never executed.
#pragma once

#include <string>

#include "llmkv.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace llmkv {

enum class ChatFamily { none, chatml, llama3, llama2, gemma, mistral, phi3 };

// The family of tokenizer.chat_template when the file has one that names a known format
// (<start_of_turn>: Gemma; <|im_start|>: ChatML; <|start_header_id|>: Llama 3; <|user|> or
// <|assistant|>: Phi-3; [INST] with <<SYS>>: Llama 2, without: Mistral); otherwise from the
// vocabulary's chat tokens and general.architecture (gemma*: Gemma, qwen*: ChatML, phi3:
// Phi-3, an [INST] token: Mistral).
ChatFamily detect_chat_family(const GgufFile &file, const Tokenizer &tokenizer);
const char *chat_family_name(ChatFamily family);

// Throws LLMKV_ERR_UNSUPPORTED when the family is unknown, INVALID_ARGUMENT for NULL
// roles/contents and for a role the family does not define (system, user, assistant; Llama 3
// also ipython; Llama 2, Mistral and Gemma take system only as msgs[0]), naming the message
// and the role.
//
// The text starts with the beginning-of-text marker where the family has one (Llama 3, Llama
// 2, Mistral, Gemma) unless the tokenizer adds that token by itself (add_bos), so a prompt
// holds it once. Gemma and Mistral have no system turn: a system message opens the first
// user turn ("<start_of_turn>user\nSYSTEM\n\nUSER..."); a conversation of only a system
// message renders as that open turn, so it is a prefix of every longer conversation with the
// same system message (or, with add_generation_prompt, as a closed user turn and the model's
// turn). Gemma's turns carry their content with surrounding whitespace trimmed, as its
// template does; its assistant role is written "model".
std::string format_chat(const GgufFile &file, const Tokenizer &tokenizer,
                        const llmkv_chat_message *msgs, size_t n, bool add_generation_prompt);

}  // namespace llmkv
