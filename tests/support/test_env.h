// Setting and removing environment variables in tests, on POSIX and on Windows (MinGW has no
// setenv / unsetenv; _putenv_s with an empty value removes a variable there).
#pragma once

#include <cstdlib>

namespace llmkv::testing {

inline void set_env(const char *name, const char *value) {
#if defined(_WIN32)
    _putenv_s(name, value);
#else
    setenv(name, value, 1);
#endif
}

inline void unset_env(const char *name) {
#if defined(_WIN32)
    _putenv_s(name, "");
#else
    unsetenv(name);
#endif
}

}  // namespace llmkv::testing
