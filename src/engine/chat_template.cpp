// Chat formats: ChatML (SmolLM2, Qwen), Llama 3 headers, Llama 2 [INST] blocks.
#include "engine/chat_template.h"

#include "common/error.h"

namespace llmkv {

namespace {

// SmolLM2's template inserts a default system message when the conversation has none.
// It is recognised as the literal "<|im_start|>system\n...<|im_end|>" inside the
// template text.
std::string chatml_default_system(const std::string &tmpl) {
    const std::string open = "<|im_start|>system\n";
    size_t a = tmpl.find(open);
    if (a == std::string::npos) return "";
    a += open.size();
    size_t b = tmpl.find("<|im_end|>", a);
    if (b == std::string::npos || b - a > 4096) return "";
    std::string s = tmpl.substr(a, b - a);
    // Only a plain literal qualifies (no template syntax inside).
    if (s.find("{{") != std::string::npos || s.find("{%") != std::string::npos ||
        s.find('\'') != std::string::npos) {
        return "";
    }
    return s;
}

const char *family_name(ChatFamily f) {
    switch (f) {
        case ChatFamily::chatml: return "ChatML";
        case ChatFamily::llama3: return "Llama 3";
        case ChatFamily::llama2: return "Llama 2";
        case ChatFamily::none: break;
    }
    return "none";
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
        }
        if (!ok) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "msgs[%zu].role \"%s\" is not a role of the %s chat format (accepted: %s)",
                 i, shown_role(msgs[i].role).c_str(), family_name(family), accepted);
        }
        if (family == ChatFamily::llama2 && role == "system" && i != 0) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "msgs[%zu].role \"system\": the Llama 2 chat format takes a system message only as msgs[0]", i);
        }
    }
}

}  // namespace

ChatFamily detect_chat_family(const GgufFile &file, const Tokenizer &tokenizer) {
    std::string tmpl = file.get_string("tokenizer.chat_template").value_or("");
    if (tmpl.find("<|im_start|>") != std::string::npos || tokenizer.find_token("<|im_start|>") >= 0) {
        return ChatFamily::chatml;
    }
    if (tmpl.find("<|start_header_id|>") != std::string::npos ||
        tokenizer.find_token("<|start_header_id|>") >= 0) {
        return ChatFamily::llama3;
    }
    if (tmpl.find("[INST]") != std::string::npos) return ChatFamily::llama2;
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
    if (family == ChatFamily::none) fail(LLMKV_ERR_UNSUPPORTED, "no known chat template for this model");
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
            out += "<|begin_of_text|>";
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
                out += "<s>[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n [/INST]";
                first = false;
            }
            for (; i < n; ++i) {
                std::string role = msgs[i].role;
                if (role == "user") {
                    out += "<s>[INST] ";
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
        case ChatFamily::none: break;
    }
    fail(LLMKV_ERR_UNSUPPORTED, "no known chat template for this model");
}

}  // namespace llmkv
