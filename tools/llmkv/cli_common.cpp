// Option parsing helpers for the llmkv command line.
#include "cli_common.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llmkv_cli {

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
