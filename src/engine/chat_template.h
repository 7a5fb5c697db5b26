// Chat templates of known model families, applied natively. A template string found in a
// model file is only inspected to recognise the family (and its default system prompt);
// it is never executed.
#pragma once

#include <string>

#include "llmkv.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace llmkv {

enum class ChatFamily { none, chatml, llama3, llama2 };

ChatFamily detect_chat_family(const GgufFile &file, const Tokenizer &tokenizer);

// Throws LLMKV_ERR_UNSUPPORTED when the family is unknown, INVALID_ARGUMENT for NULL
// roles/contents and for a role the family does not define (ChatML and Llama 2: system,
// user, assistant; Llama 3: those and ipython; Llama 2 takes system only as msgs[0]),
// naming the message and the role.
std::string format_chat(const GgufFile &file, const Tokenizer &tokenizer,
                        const llmkv_chat_message *msgs, size_t n, bool add_generation_prompt);

}  // namespace llmkv
