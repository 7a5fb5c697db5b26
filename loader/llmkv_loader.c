/*
 * llmkv_loader.c - the run-time loader declared in include/llmkv_loader.h.
 *
 * Compile this file into the host (C99; link -ldl on glibc older than 2.34). It has no
 * link-time dependency on libllmkv: llmkv.h is included for its types only, and the
 * functions it declares are never referenced outside sizeof (a type check, no symbol).
 */
#if !defined(_WIN32) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* dladdr: the file the system loader actually opened, for messages */
#endif

#include "llmkv_loader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <windows.h>
#else
#include <dlfcn.h>
#endif

/* An entry of LLMKV_LOADER_FUNCTIONS whose type differs from llmkv.h's declaration is an
 * error, whatever the host's warning flags (GCC before 14 only warns). */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic error "-Wincompatible-pointer-types"
#endif

#ifdef _WIN32
#define LLMKV_LOADER_DEFAULT_NAME "llmkv.dll"
#else
#define LLMKV_LOADER_DEFAULT_NAME "libllmkv.so.0"
#endif

/* A data pointer and a function pointer have the same size on every platform this runs on
 * (POSIX requires it for dlsym); the symbol is copied, not cast, so -pedantic stays quiet. */
typedef char llmkv_loader_fnptr_size_check_[sizeof(void *) == sizeof(void (*)(void)) ? 1 : -1];

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static void
set_err(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    if (!err || cap == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* ---- the platform layer ---------------------------------------------------------------- */

#ifdef _WIN32
/* path is UTF-8: converted for LoadLibraryW (LoadLibraryA would read it in the ANSI code
 * page). */
static void *lib_open(const char *path) {
    wchar_t wide[32768];
    if (MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, wide, 32768) <= 0) return NULL;
    return (void *)LoadLibraryW(wide);
}
static void *lib_sym(void *h, const char *name) {
    FARPROC f = GetProcAddress((HMODULE)h, name);
    void *p;
    memcpy(&p, &f, sizeof p);
    return p;
}
static void lib_close(void *h) {
    FreeLibrary((HMODULE)h);
}
static void lib_error(char *buf, size_t cap) {
    DWORD code = GetLastError();
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, code,
                             0, buf, (DWORD)cap, NULL);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (n == 0) snprintf(buf, cap, "error %lu", (unsigned long)code);
}
static const char *lib_file(void *h, const char *fallback, char *buf, size_t cap) {
    DWORD n = GetModuleFileNameA((HMODULE)h, buf, (DWORD)cap);
    return (n > 0 && n < cap) ? buf : fallback;
}
#else
static void *lib_open(const char *path) {
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}
static void *lib_sym(void *h, const char *name) {
    return dlsym(h, name);
}
static void lib_close(void *h) {
    dlclose(h);
}
static void lib_error(char *buf, size_t cap) {
    const char *e = dlerror();
    snprintf(buf, cap, "%s", e ? e : "unknown error");
}
/* The file the system loader opened (a search for "libllmkv.so.0" names the one it found). */
static const char *lib_file(void *h, const char *fallback, char *buf, size_t cap) {
#if defined(__GLIBC__) || defined(__APPLE__) || defined(__FreeBSD__)
    Dl_info info;
    void *sym = dlsym(h, "llmkv_version");
    if (sym && dladdr(sym, &info) && info.dli_fname && info.dli_fname[0]) {
        snprintf(buf, cap, "%s", info.dli_fname);
        return buf;
    }
#endif
    (void)h;
    (void)buf;
    (void)cap;
    return fallback;
}
#endif

/* ---- load / unload ----------------------------------------------------------------------- */

static void version_parts(int v, int *major, int *minor, int *patch) {
    *major = v / 10000;
    *minor = (v / 100) % 100;
    *patch = v % 100;
}

/* Copies a resolved symbol into a function pointer member (memcpy: ISO C has no cast
 * between data and function pointers). */
#define LLMKV_LOADER_SET_(dst, sym) memcpy(&(dst), &(sym), sizeof(dst))

int llmkv_load(const char *path, llmkv_api *api, char *err, size_t err_cap) {
    const char *name = path;
    const char *origin = ""; /* how the name was chosen, for the open error */
    char why[512];
    char file_buf[1024];
    const char *file;
    void *h;
    void *sym;
    int (*version_fn)(void);
    int lib, major, minor, patch;
    const int hdr = LLMKV_VERSION_NUMBER;
    size_t missing = 0, total = 0;
    const char *first_missing = NULL;

    if (err && err_cap) err[0] = '\0';
    if (!api) {
        set_err(err, err_cap, "api is NULL");
        return LLMKV_LOAD_ERR_ARGUMENT;
    }
    memset(api, 0, sizeof *api);

    /* The type of every entry of LLMKV_LOADER_FUNCTIONS against llmkv.h's declaration: an
     * assignment inside sizeof is compiled (a wrong type is an incompatible-pointer
     * diagnostic) but never evaluated, so it references no symbol of the library. */
#define LLMKV_LOADER_TYPECHECK_(ret, fn, params) (void)sizeof(api->fn = &llmkv_##fn);
    LLMKV_LOADER_FUNCTIONS(LLMKV_LOADER_TYPECHECK_)
#undef LLMKV_LOADER_TYPECHECK_

    if (!name) {
        const char *env = getenv("LLMKV_LIBRARY");
        if (env && env[0]) {
            name = env;
            origin = " (from LLMKV_LIBRARY)";
        } else {
            name = LLMKV_LOADER_DEFAULT_NAME;
            origin =
                " (the default: searched by the system loader; pass a path or set LLMKV_LIBRARY)";
        }
    }

    h = lib_open(name);
    if (!h) {
        lib_error(why, sizeof why);
        set_err(err, err_cap, "cannot open %s%s: %s", name, origin, why);
        return LLMKV_LOAD_ERR_OPEN;
    }

    sym = lib_sym(h, "llmkv_version");
    if (!sym) {
        set_err(err, err_cap, "%s: not an llmkv library (no symbol llmkv_version)",
                lib_file(h, name, file_buf, sizeof file_buf));
        lib_close(h);
        return LLMKV_LOAD_ERR_NOT_LLMKV;
    }
    file = lib_file(h, name, file_buf, sizeof file_buf);
    LLMKV_LOADER_SET_(version_fn, sym);
    lib = version_fn();
    version_parts(lib, &major, &minor, &patch);
    if (major != LLMKV_VERSION_MAJOR || minor < LLMKV_VERSION_MINOR) {
        if (lib < hdr)
            set_err(err, err_cap,
                    "%s: too old: library %d.%d.%d, header %d.%d.%d (this host needs %d.%d or a "
                    "later %d.x)",
                    file, major, minor, patch, LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR,
                    LLMKV_VERSION_PATCH, LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR,
                    LLMKV_VERSION_MAJOR);
        else
            set_err(
                err, err_cap,
                "%s: incompatible: library %d.%d.%d, header %d.%d.%d (the major versions differ)",
                file, major, minor, patch, LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR,
                LLMKV_VERSION_PATCH);
        lib_close(h);
        return LLMKV_LOAD_ERR_VERSION;
    }

#define LLMKV_LOADER_RESOLVE_(ret, fn, params)            \
    total++;                                              \
    sym = lib_sym(h, "llmkv_" #fn);                       \
    if (sym) {                                            \
        LLMKV_LOADER_SET_(api->fn, sym);                  \
    } else {                                              \
        if (!first_missing) first_missing = "llmkv_" #fn; \
        missing++;                                        \
    }
    LLMKV_LOADER_FUNCTIONS(LLMKV_LOADER_RESOLVE_)
#undef LLMKV_LOADER_RESOLVE_

    if (missing) {
        set_err(err, err_cap,
                "%s: missing symbol %s (library %d.%d.%d, header %d.%d.%d; %lu of %lu functions "
                "missing)",
                file, first_missing, major, minor, patch, LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR,
                LLMKV_VERSION_PATCH, (unsigned long)missing, (unsigned long)total);
        memset(api, 0, sizeof *api);
        lib_close(h);
        return LLMKV_LOAD_ERR_SYMBOL;
    }
    api->handle = h;
    api->library_version = lib;
    return LLMKV_LOAD_OK;
}

void llmkv_unload(llmkv_api *api) {
    if (!api) return;
    if (api->handle) lib_close(api->handle);
    memset(api, 0, sizeof *api);
}
