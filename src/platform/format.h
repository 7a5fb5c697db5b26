// snprintf into a std::string, for the platform layer's messages (it depends on nothing else
// of the project, so not on common/error.h's strprintf).
#pragma once

#include <cstdio>
#include <string>

namespace llmkv::os {

template <class... A>
std::string format(const char *fmt, A... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, args...);
    return buf;
}

}  // namespace llmkv::os
