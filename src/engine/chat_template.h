// Chat templates of known model families, applied natively. A template string found in a
// model file is only inspected to recognise the family (and its default system prompt);
// it is never executed.
#pragma once

#include <string>

#include "llmkv.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace llmkv {

enum class ChatFamily { none, chatml, llama3, llama2, gemma, mistral, phi3, harmony };

// The family of tokenizer.chat_template when the file has one that names a known format
// (<|start|> with <|channel|> or <|message|>: harmony; <start_of_turn>: Gemma; <|im_start|>:
// ChatML; <|start_header_id|>: Llama 3; <|user|> or <|assistant|>: Phi-3; [INST] with
// <<SYS>>: Llama 2, without: Mistral); otherwise from the vocabulary's chat tokens and
// general.architecture (gpt-oss or the tokens <|start|>, <|message|> and <|channel|>:
// harmony; gemma*: Gemma, qwen*: ChatML, phi3: Phi-3, an [INST] token: Mistral).
ChatFamily detect_chat_family(const GgufFile &file, const Tokenizer &tokenizer);
const char *chat_family_name(ChatFamily family);

// Throws LLMKV_ERR_UNSUPPORTED when the family is unknown, INVALID_ARGUMENT for NULL
// roles/contents and for a role the family does not define (system, user, assistant; Llama 3
// also ipython; harmony also developer, which like system it takes only as msgs[0]; Llama 2,
// Mistral and Gemma take system only as msgs[0]), naming the message and the role.
//
// The text starts with the beginning-of-text marker where the family has one (Llama 3, Llama
// 2, Mistral, Gemma) unless the tokenizer adds that token by itself (add_bos), so a prompt
// holds it once. Gemma and Mistral have no system turn: a system message opens the first
// user turn ("<start_of_turn>user\nSYSTEM\n\nUSER..."); a conversation of only a system
// message renders as that open turn, so it is a prefix of every longer conversation with the
// same system message (or, with add_generation_prompt, as a closed user turn and the model's
// turn). Gemma's turns carry their content with surrounding whitespace trimmed, as its
// template does; its assistant role is written "model".
//
// Harmony (gpt-oss) renders as gpt-oss's chat_template.jinja does with no tools and the
// default reasoning effort, except that it has no "Current date:" line (the template writes
// today's date there; without it the prompt is the same every day, as openai-harmony renders
// a system message given no date). It always opens with the system message
// "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n
// Knowledge cutoff: 2024-06\n\nReasoning: medium\n\n# Valid channels: analysis, commentary,
// final. Channel must be included for every message.<|end|>"; a system (or developer) message
// msgs[0] with content becomes "<|start|>developer<|message|># Instructions\n\nCONTENT\n\n
// <|end|>"; a user turn is "<|start|>user<|message|>CONTENT<|end|>", an assistant turn
// "<|start|>assistant<|channel|>final<|message|>CONTENT<|end|>" (<|return|> in place of
// <|end|> when it is the last message and add_generation_prompt is false, as the template
// writes a finished answer); the generation prompt is "<|start|>assistant", after which the
// model picks its channel (its reasoning, "analysis", usually comes first). An assistant
// content holding "<|channel|>analysis<|message|>" or "<|channel|>final<|message|>" is
// INVALID_ARGUMENT, as the template refuses it.
std::string format_chat(const GgufFile &file, const Tokenizer &tokenizer,
                        const llmkv_chat_message *msgs, size_t n, bool add_generation_prompt);

}  // namespace llmkv
