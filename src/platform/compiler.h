// Compiler differences the library's headers need (part of the platform layer, os.h).
#pragma once

// printf-style format checking. MinGW's "printf" archetype is Microsoft's (no %zu, %lld
// spelled %I64d); Windows builds use the C99 stdio of MinGW (__USE_MINGW_ANSI_STDIO, set by
// the build), so they check against the GNU archetype. MSVC has no format attribute.
#if defined(__MINGW32__)
#define LLMKV_PRINTF_FORMAT(fmt, args) __attribute__((format(gnu_printf, fmt, args)))
#elif defined(__GNUC__) || defined(__clang__)
#define LLMKV_PRINTF_FORMAT(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define LLMKV_PRINTF_FORMAT(fmt, args)
#endif
