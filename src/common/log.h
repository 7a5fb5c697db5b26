// Internal logging: routes messages to the host's llmkv_log_set callback (or stderr).
#pragma once

#include "llmkv.h"
#include "platform/compiler.h"

namespace llmkv {

void log_message(llmkv_log_level level, const char *fmt, ...) LLMKV_PRINTF_FORMAT(2, 3);
bool log_enabled(llmkv_log_level level);

#define LLMKV_LOG_ERROR_F(...) ::llmkv::log_message(LLMKV_LOG_ERROR, __VA_ARGS__)
#define LLMKV_LOG_WARN_F(...) ::llmkv::log_message(LLMKV_LOG_WARN, __VA_ARGS__)
#define LLMKV_LOG_INFO_F(...) ::llmkv::log_message(LLMKV_LOG_INFO, __VA_ARGS__)
#define LLMKV_LOG_DEBUG_F(...) ::llmkv::log_message(LLMKV_LOG_DEBUG, __VA_ARGS__)

}  // namespace llmkv
