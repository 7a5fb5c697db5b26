// Typed errors of the C++ core. Only src/api/ turns them into llmkv_status codes;
// everywhere else code throws llmkv::Error with a message naming the thing and the value.
#pragma once

#include <stdexcept>
#include <string>

#include "llmkv.h"
#include "platform/compiler.h"

namespace llmkv {

class Error : public std::runtime_error {
public:
    Error(llmkv_status status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    llmkv_status status() const noexcept { return status_; }

private:
    llmkv_status status_;
};

// printf-style formatting into a std::string (GCC 12 has no std::format).
std::string strprintf(const char *fmt, ...) LLMKV_PRINTF_FORMAT(1, 2);

// Throws llmkv::Error(status, formatted message).
[[noreturn]] void fail(llmkv_status status, const char *fmt, ...) LLMKV_PRINTF_FORMAT(2, 3);

}  // namespace llmkv
