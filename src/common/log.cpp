// Process-wide log sink: a host callback or stderr, filtered by level.
#include "common/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

namespace llmkv {

namespace {
std::mutex g_log_mutex;
llmkv_log_fn g_log_fn = nullptr;
void *g_log_user_data = nullptr;
std::atomic<int> g_log_level{LLMKV_LOG_WARN};

const char *level_name(llmkv_log_level level) {
    switch (level) {
        case LLMKV_LOG_ERROR:
            return "error";
        case LLMKV_LOG_WARN:
            return "warn";
        case LLMKV_LOG_INFO:
            return "info";
        default:
            return "debug";
    }
}
}  // namespace

void set_log_sink(llmkv_log_fn fn, void *user_data, llmkv_log_level max_level) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_fn = fn;
    g_log_user_data = user_data;
    g_log_level.store(int(max_level));
}

bool log_enabled(llmkv_log_level level) {
    return int(level) <= g_log_level.load();
}

void log_message(llmkv_log_level level, const char *fmt, ...) {
    if (!log_enabled(level)) return;
    char stack_buf[512];
    va_list args;
    va_start(args, fmt);
    int n = std::vsnprintf(stack_buf, sizeof(stack_buf), fmt, args);
    va_end(args);
    std::string heap;
    const char *msg = stack_buf;
    if (n >= int(sizeof(stack_buf))) {
        heap.resize(size_t(n));
        va_start(args, fmt);
        std::vsnprintf(heap.data(), heap.size() + 1, fmt, args);
        va_end(args);
        msg = heap.c_str();
    }
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (g_log_fn) {
        g_log_fn(level, msg, g_log_user_data);
    } else {
        std::fprintf(stderr, "llmkv %s: %s\n", level_name(level), msg);
    }
}

}  // namespace llmkv
