// Option parsing helpers for the llmkv command line.
#include "cli_common.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llmkv_cli {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Text of common words, tokenized, cut to n tokens; salt selects the word sequence (and
// salts >= 100 start with a villager line, so suffixes share no block with a prefix).
std::vector<int32_t> filler_tokens(llmkv_engine *e, size_t n, unsigned salt) {
    const char *words[] = {"village", "river", "lantern", "harvest", "market", "bridge", "forest", "elder",
                           "story", "winter", "mill", "well", "festival", "road", "stone", "bell"};
    // Each salt starts differently, so suffixes share no block with each other.
    std::string text = salt < 100 ? "The lore of the village, as the elders tell it."
                                  : " Villager " + std::to_string(salt) + " asks:";
    unsigned x = 12345u + salt;
    std::vector<int32_t> ids(n + 64);
    size_t count = 0;
    while (count < n) {
        for (int i = 0; i < 64; ++i) {
            x = x * 1103515245u + 12345u;
            text += " ";
            text += words[(x >> 16) % 16];
        }
        text += ".";
        llmkv_tokenize(e, text.data(), text.size(), 0, nullptr, 0, &count);
    }
    ids.resize(count);
    llmkv_tokenize(e, text.data(), text.size(), 0, ids.data(), ids.size(), &count);
    ids.resize(n);
    return ids;
}


std::string default_model_path() {
    const char *env = std::getenv("LLMKV_MODEL");
    if (env && *env) return env;
    return "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

uint64_t parse_uint(const char *s, const char *name) {
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (errno || !end || *end || *s == '-' || !*s) {
        std::fprintf(stderr, "llmkv: %s expects a non-negative integer, got '%s'\n", name, s);
        std::exit(2);
    }
    return v;
}

double parse_float(const char *s, const char *name) {
    char *end = nullptr;
    errno = 0;
    double v = std::strtod(s, &end);
    if (errno || !end || *end || !*s) {
        std::fprintf(stderr, "llmkv: %s expects a number, got '%s'\n", name, s);
        std::exit(2);
    }
    return v;
}

llmkv_kv_dtype parse_kv_dtype(const char *s) {
    if (!std::strcmp(s, "f16")) return LLMKV_KV_F16;
    if (!std::strcmp(s, "bf16")) return LLMKV_KV_BF16;
    if (!std::strcmp(s, "fp8")) return LLMKV_KV_FP8_E4M3;
    if (!std::strcmp(s, "int8")) return LLMKV_KV_INT8;
    if (!std::strcmp(s, "int4")) return LLMKV_KV_INT4;
    std::fprintf(stderr, "llmkv: unknown KV dtype '%s' (f16, bf16, fp8, int8, int4)\n", s);
    std::exit(2);
}

}  // namespace llmkv_cli
