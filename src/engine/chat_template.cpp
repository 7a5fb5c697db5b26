// Chat formats: ChatML (SmolLM2, Qwen), Llama 3 headers, Llama 2 [INST] blocks, Gemma turns,
// Mistral [INST] blocks, Phi-3 tags, harmony messages (gpt-oss).
#include "engine/chat_template.h"

#include "common/error.h"

namespace llmkv {

namespace {

// SmolLM2's and Qwen2.5's templates insert a default system message when the conversation
// has none. It is recognised as the first literal "<|im_start|>system\n...<|im_end|>" inside
// the template text.
std::string chatml_default_system(const std::string &tmpl) {
    const std::string open = "<|im_start|>system\n";
    for (size_t a = tmpl.find(open); a != std::string::npos; a = tmpl.find(open, a)) {
        a += open.size();
        size_t b = tmpl.find("<|im_end|>", a);
        if (b == std::string::npos) return "";
        if (b - a > 4096) continue;
        std::string s = tmpl.substr(a, b - a);
        // Only a plain literal qualifies (no template syntax inside).
        if (s.empty() || s.find("{{") != std::string::npos || s.find("{%") != std::string::npos ||
            s.find('\'') != std::string::npos || s.find('"') != std::string::npos) {
            continue;
        }
        return s;
    }
    return "";
}

// Up to 64 bytes of a role for a message, bytes outside printable ASCII as \xNN.
std::string shown_role(const char *role) {
    std::string out;
    size_t k = 0;
    for (; role[k] != '\0' && k < 64; ++k) {
        unsigned char c = static_cast<unsigned char>(role[k]);
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out += char(c);
        } else {
            out += strprintf("\\x%02x", c);
        }
    }
    if (role[k] != '\0') out += "...";
    return out;
}

// A role is pasted into the family's markup, so only the roles the family defines are
// accepted (exact, case-sensitive): anything else could carry markup of its own and inject
// turns. Llama 2 has a place for a system message only at the start.
void check_roles(ChatFamily family, const llmkv_chat_message *msgs, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const std::string role = msgs[i].role;
        bool ok = role == "user" || role == "assistant" || role == "system";
        const char *accepted = "system, user, assistant";
        if (family == ChatFamily::llama3) {
            ok = ok || role == "ipython";
            accepted = "system, user, assistant, ipython";
        } else if (family == ChatFamily::harmony) {
            ok = ok || role == "developer";
            accepted = "system, developer, user, assistant";
        }
        if (!ok) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "msgs[%zu].role \"%s\" is not a role of the %s chat format (accepted: %s)", i,
                 shown_role(msgs[i].role).c_str(), chat_family_name(family), accepted);
        }
        bool system_first_only = family == ChatFamily::llama2 || family == ChatFamily::mistral ||
                                 family == ChatFamily::gemma || family == ChatFamily::harmony;
        if (system_first_only && (role == "system" || role == "developer") && i != 0) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "msgs[%zu].role \"%s\": the %s chat format takes a %s message only as msgs[0]", i,
                 role.c_str(), chat_family_name(family), role.c_str());
        }
    }
}

// gpt-oss's system message as its template writes it with no tools and the default reasoning
// effort, less the "Current date:" line.
constexpr const char *kHarmonySystem =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n\n"
    "Reasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.<|end|>";

std::string format_harmony(const llmkv_chat_message *msgs, size_t n, bool add_generation_prompt) {
    std::string out = kHarmonySystem;
    size_t i = 0;
    if (n > 0 &&
        (std::string(msgs[0].role) == "system" || std::string(msgs[0].role) == "developer")) {
        if (msgs[0].content[0] != '\0') {
            out += "<|start|>developer<|message|># Instructions\n\n";
            out += msgs[0].content;
            out += "\n\n<|end|>";
        }
        i = 1;
    }
    for (; i < n; ++i) {
        const std::string content = msgs[i].content;
        if (std::string(msgs[i].role) == "user") {
            out += "<|start|>user<|message|>" + content + "<|end|>";
            continue;
        }
        // assistant (roles were checked): its answer, the final channel. Reasoning from
        // earlier turns is not given back to the model.
        for (const char *markup :
             {"<|channel|>analysis<|message|>", "<|channel|>final<|message|>"}) {
            if (content.find(markup) != std::string::npos) {
                fail(LLMKV_ERR_INVALID_ARGUMENT,
                     "msgs[%zu].content holds \"%s\": the harmony chat format takes an assistant "
                     "message's answer alone (the text between <|message|> and <|end|>)",
                     i, markup);
            }
        }
        const bool finished = i + 1 == n && !add_generation_prompt;
        out += "<|start|>assistant<|channel|>final<|message|>" + content +
               (finished ? "<|return|>" : "<|end|>");
    }
    if (add_generation_prompt) out += "<|start|>assistant";
    return out;
}

// The family's beginning-of-text marker, or nothing when the tokenizer adds that very token
// in front of the text by itself (the prompt would otherwise hold it twice).
std::string leading_bos(const Tokenizer &tokenizer, const char *marker) {
    int32_t bos = tokenizer.bos();
    if (tokenizer.add_bos_default() && bos >= 0 && tokenizer.token_text(bos) == marker) return "";
    return marker;
}

// Jinja's `trim`: surrounding whitespace removed.
std::string trimmed(const char *text) {
    std::string_view s(text);
    const char *ws = " \t\n\r\f\v";
    size_t a = s.find_first_not_of(ws);
    if (a == std::string_view::npos) return "";
    size_t b = s.find_last_not_of(ws);
    return std::string(s.substr(a, b - a + 1));
}

}  // namespace

const char *chat_family_name(ChatFamily f) {
    switch (f) {
        case ChatFamily::chatml:
            return "ChatML";
        case ChatFamily::llama3:
            return "Llama 3";
        case ChatFamily::llama2:
            return "Llama 2";
        case ChatFamily::gemma:
            return "Gemma";
        case ChatFamily::mistral:
            return "Mistral";
        case ChatFamily::phi3:
            return "Phi-3";
        case ChatFamily::harmony:
            return "harmony";
        case ChatFamily::none:
            break;
    }
    return "none";
}

ChatFamily detect_chat_family(const GgufFile &file, const Tokenizer &tokenizer) {
    const std::string tmpl = file.get_string("tokenizer.chat_template").value_or("");
    auto in_tmpl = [&tmpl](const char *s) { return tmpl.find(s) != std::string::npos; };
    if (in_tmpl("<|start|>") && (in_tmpl("<|channel|>") || in_tmpl("<|message|>")))
        return ChatFamily::harmony;
    if (in_tmpl("<start_of_turn>")) return ChatFamily::gemma;
    if (in_tmpl("<|im_start|>")) return ChatFamily::chatml;
    if (in_tmpl("<|start_header_id|>")) return ChatFamily::llama3;
    if (in_tmpl("<|user|>") || in_tmpl("<|assistant|>")) return ChatFamily::phi3;
    if (in_tmpl("[INST]")) return in_tmpl("<<SYS>>") ? ChatFamily::llama2 : ChatFamily::mistral;

    // No template (Gemma 3 270M has none) or one naming no known format: the vocabulary's chat
    // tokens, then the architecture.
    const std::string arch = file.get_string("general.architecture").value_or("");
    auto has = [&tokenizer](const char *s) { return tokenizer.find_token(s) >= 0; };
    if (arch == "gpt-oss" || (has("<|start|>") && has("<|message|>") && has("<|channel|>")))
        return ChatFamily::harmony;
    if (has("<start_of_turn>") || arch.rfind("gemma", 0) == 0) return ChatFamily::gemma;
    if (has("<|im_start|>") || arch.rfind("qwen", 0) == 0) return ChatFamily::chatml;
    if (has("<|start_header_id|>")) return ChatFamily::llama3;
    if (arch == "phi3" || (has("<|user|>") && has("<|assistant|>") && has("<|end|>")))
        return ChatFamily::phi3;
    if (has("[INST]") && has("[/INST]")) return ChatFamily::mistral;
    return ChatFamily::none;
}

std::string format_chat(const GgufFile &file, const Tokenizer &tokenizer,
                        const llmkv_chat_message *msgs, size_t n, bool add_generation_prompt) {
    if (n > 0 && !msgs) fail(LLMKV_ERR_INVALID_ARGUMENT, "msgs is NULL with n = %zu", n);
    for (size_t i = 0; i < n; ++i) {
        if (!msgs[i].role || !msgs[i].content) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "msgs[%zu] has a NULL role or content", i);
        }
    }
    const ChatFamily family = detect_chat_family(file, tokenizer);
    if (family == ChatFamily::none)
        fail(LLMKV_ERR_UNSUPPORTED, "no known chat template for this model");
    check_roles(family, msgs, n);
    std::string out;
    switch (family) {
        case ChatFamily::chatml: {
            std::string tmpl = file.get_string("tokenizer.chat_template").value_or("");
            std::string default_system = chatml_default_system(tmpl);
            if (!default_system.empty() && (n == 0 || std::string(msgs[0].role) != "system")) {
                out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
            }
            for (size_t i = 0; i < n; ++i) {
                out += "<|im_start|>";
                out += msgs[i].role;
                out += "\n";
                out += msgs[i].content;
                out += "<|im_end|>\n";
            }
            if (add_generation_prompt) out += "<|im_start|>assistant\n";
            return out;
        }
        case ChatFamily::llama3: {
            out += leading_bos(tokenizer, "<|begin_of_text|>");
            for (size_t i = 0; i < n; ++i) {
                out += "<|start_header_id|>";
                out += msgs[i].role;
                out += "<|end_header_id|>\n\n";
                out += msgs[i].content;
                out += "<|eot_id|>";
            }
            if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            return out;
        }
        case ChatFamily::llama2: {
            std::string system;
            size_t i = 0;
            if (n > 0 && std::string(msgs[0].role) == "system") {
                system = msgs[0].content;
                i = 1;
            }
            bool first = true;
            if (!system.empty() && (i == n || std::string(msgs[i].role) != "user")) {
                // No user message follows to carry the system prompt: it gets a turn of its own
                // (it used to be dropped silently).
                out += leading_bos(tokenizer, "<s>") + "[INST] <<SYS>>\n" + system +
                       "\n<</SYS>>\n\n [/INST]";
                first = false;
            }
            for (; i < n; ++i) {
                std::string role = msgs[i].role;
                if (role == "user") {
                    out += out.empty() ? leading_bos(tokenizer, "<s>") : std::string("<s>");
                    out += "[INST] ";
                    if (first && !system.empty()) out += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
                    out += msgs[i].content;
                    out += " [/INST]";
                    first = false;
                } else {  // assistant (roles were checked)
                    out += " ";
                    out += msgs[i].content;
                    out += " </s>";
                }
            }
            return out;
        }
        case ChatFamily::gemma: {
            // <start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n...; no system role.
            out += leading_bos(tokenizer, "<bos>");
            size_t i = 0;
            std::string prefix;
            if (n > 0 && std::string(msgs[0].role) == "system") {
                prefix = std::string(msgs[0].content) + "\n\n";
                i = 1;
            }
            if (i == 1 && n == 1) {
                out += "<start_of_turn>user\n";
                if (!add_generation_prompt) return out + prefix;  // the open first user turn
                out += trimmed(msgs[0].content) + "<end_of_turn>\n<start_of_turn>model\n";
                return out;
            }
            for (bool first = true; i < n; ++i, first = false) {
                const bool user = std::string(msgs[i].role) == "user";
                out += user ? "<start_of_turn>user\n" : "<start_of_turn>model\n";
                if (first) out += prefix;
                out += trimmed(msgs[i].content);
                out += "<end_of_turn>\n";
            }
            if (add_generation_prompt) out += "<start_of_turn>model\n";
            return out;
        }
        case ChatFamily::mistral: {
            // [INST] user [/INST] assistant</s>[INST] ...; a system message opens the first
            // user turn.
            out += leading_bos(tokenizer, "<s>");
            size_t i = 0;
            std::string prefix;
            if (n > 0 && std::string(msgs[0].role) == "system") {
                prefix = std::string(msgs[0].content) + "\n\n";
                i = 1;
            }
            if (i == 1 && n == 1) {
                if (!add_generation_prompt) return out + "[INST] " + prefix;
                return out + "[INST] " + msgs[0].content + " [/INST]";
            }
            for (bool first = true; i < n; ++i) {
                if (std::string(msgs[i].role) == "user") {
                    out += "[INST] ";
                    if (first) out += prefix;
                    out += msgs[i].content;
                    out += " [/INST]";
                    first = false;
                } else {  // assistant (roles were checked)
                    out += " ";
                    out += msgs[i].content;
                    out += "</s>";
                }
            }
            return out;
        }
        case ChatFamily::harmony:
            return format_harmony(msgs, n, add_generation_prompt);
        case ChatFamily::phi3: {
            for (size_t i = 0; i < n; ++i) {
                out += "<|";
                out += msgs[i].role;
                out += "|>\n";
                out += msgs[i].content;
                out += "<|end|>\n";
            }
            if (add_generation_prompt) out += "<|assistant|>\n";
            return out;
        }
        case ChatFamily::none:
            break;
    }
    fail(LLMKV_ERR_UNSUPPORTED, "no known chat template for this model");
}

}  // namespace llmkv
