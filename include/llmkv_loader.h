/*
 * llmkv_loader.h - load libllmkv at run time (dlopen / LoadLibrary) instead of linking it.
 *
 * For hosts that treat llmkv as optional: plugin hosts, game engines, apps that must start
 * (and say why) when the library is absent. The host compiles loader/llmkv_loader.c (C99,
 * no dependency on libllmkv) into itself and calls every llmkv function through a table of
 * function pointers:
 *
 *     #include <llmkv_loader.h>
 *
 *     llmkv_api api;
 *     char err[512];
 *     if (llmkv_load(NULL, &api, err, sizeof err) != LLMKV_LOAD_OK) {
 *         fprintf(stderr, "llmkv unavailable: %s\n", err);   // carry on without it
 *         return;
 *     }
 *     llmkv_engine_params ep;
 *     api.engine_params_init_sized(&ep, sizeof ep);  // api.NAME is llmkv_NAME of llmkv.h
 *     ...
 *     llmkv_unload(&api);                 // after destroying every engine
 *
 * Names: the table has one member per LLMKV_API function of llmkv.h, named as the function
 * without its "llmkv_" prefix and with the header's exact type (api.version is
 * llmkv_version, api.session_submit_text is llmkv_session_submit_text). The list is the
 * X-macro LLMKV_LOADER_FUNCTIONS below; the test loader.function_list fails when llmkv.h
 * declares a function this list lacks (or the other way round), and compiling
 * llmkv_loader.c checks each entry's type against the header's declaration.
 * Initialize params with api.engine_params_init_sized / api.session_params_init_sized and
 * the size of your struct: api.engine_params_init is the unsized entry point of programs
 * built against headers before 0.4, which fills only their (smaller) struct.
 *
 * Which library: llmkv_load(path, ...) opens
 *  - path, when it is not NULL (a name without '/' is searched like any dlopen name);
 *  - else the file named by the environment variable LLMKV_LIBRARY, when set and not empty;
 *  - else "libllmkv.so.0", the library's SONAME, through the system loader's search
 *    (LD_LIBRARY_PATH, the host's RUNPATH, /etc/ld.so.cache, the default directories);
 *    on Windows "llmkv.dll" through the DLL search order.
 * On POSIX systems the library is opened with RTLD_NOW | RTLD_LOCAL: every symbol is bound
 * at once, and none of them becomes visible to other libraries of the process.
 *
 * Versions: the library's llmkv_version() must have this header's LLMKV_VERSION_MAJOR and a
 * minor version at least this header's LLMKV_VERSION_MINOR (in 0.x, a minor version only
 * adds functions and appends struct fields; it never changes what exists). The patch level
 * is not compared. The check runs before the other functions are resolved, so a library
 * that is too old is reported as too old, not as missing the newer functions.
 *
 * Errors: llmkv_load returns one of the LLMKV_LOAD_* codes below and writes one line
 * (NUL-terminated, truncated to err_cap) into err; err may be NULL when err_cap is 0.
 * The messages, where FILE is the library as the system loader named it:
 *   LLMKV_LOAD_ERR_OPEN      "cannot open PATH: <dlerror() text>" and, without a path,
 *                            "cannot open libllmkv.so.0 (the default: searched by the system
 *                            loader; pass a path or set LLMKV_LIBRARY): <dlerror() text>",
 *                            or "cannot open PATH (from LLMKV_LIBRARY): <dlerror() text>"
 *   LLMKV_LOAD_ERR_NOT_LLMKV "FILE: not an llmkv library (no symbol llmkv_version)"
 *   LLMKV_LOAD_ERR_VERSION   "FILE: too old: library 0.3.0, header 0.4.0 (this host needs 0.4
 *                            or a later 0.x)", or "FILE: incompatible: library 1.0.0, header
 *                            0.4.0 (the major versions differ)"
 *   LLMKV_LOAD_ERR_SYMBOL    "FILE: missing symbol llmkv_log_set (library 0.4.0, header
 *                            0.4.0; 44 of 48 functions missing)"
 *   LLMKV_LOAD_ERR_ARGUMENT  "api is NULL"
 * On failure the library is closed again and every member of *api is NULL / 0.
 *
 * Threads: llmkv_load and llmkv_unload may be called from any thread; each call with its
 * own llmkv_api. Loading twice (two tables) opens the library once; the system loader
 * counts references, and the last llmkv_unload closes it.
 *
 * Windows: LoadLibraryA / GetProcAddress / FreeLibrary under _WIN32, with the system's
 * message for a failing LoadLibrary. Written to the same rules but not built or tested in
 * this project's CI (Linux only).
 */
#ifndef LLMKV_LOADER_H
#define LLMKV_LOADER_H

#include <stddef.h>

#include "llmkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every LLMKV_API function of llmkv.h, in the header's order: X(return type, name without
 * the llmkv_ prefix, parameter types). Appending a function to llmkv.h means appending it
 * here (the loader.function_list test says so). */
#define LLMKV_LOADER_FUNCTIONS(X)                                                                 \
    X(int, version, (void))                                                                       \
    X(const char *, version_string, (void))                                                       \
    X(const char *, status_string, (llmkv_status))                                                \
    X(const char *, last_error, (void))                                                           \
    X(void, log_set, (llmkv_log_fn, void *, llmkv_log_level))                                     \
    X(void, engine_params_init, (llmkv_engine_params *))                                          \
    X(void, engine_params_init_sized, (llmkv_engine_params *, size_t))                            \
    X(llmkv_status, engine_create, (const llmkv_engine_params *, llmkv_engine **))                \
    X(llmkv_status, tp_serve, (const llmkv_engine_params *))                                      \
    X(void, engine_destroy, (llmkv_engine *))                                                     \
    X(llmkv_status, engine_get_info, (const llmkv_engine *, llmkv_engine_info *))                 \
    X(llmkv_status, engine_get_stats, (const llmkv_engine *, llmkv_stats *))                      \
    X(llmkv_status, engine_validate, (const llmkv_engine *))                                      \
    X(llmkv_status, tokenize,                                                                     \
      (const llmkv_engine *, const char *, size_t, uint32_t, int32_t *, size_t, size_t *))        \
    X(llmkv_status, detokenize,                                                                   \
      (const llmkv_engine *, const int32_t *, size_t, char *, size_t, size_t *))                  \
    X(llmkv_status, chat_format,                                                                  \
      (const llmkv_engine *, const llmkv_chat_message *, size_t, int, char *, size_t, size_t *))  \
    X(llmkv_status, prefix_create, (llmkv_engine *, const int32_t *, size_t, llmkv_prefix **))    \
    X(llmkv_status, prefix_save, (const llmkv_prefix *, const char *))                            \
    X(llmkv_status, prefix_load, (llmkv_engine *, const char *, llmkv_prefix **))                 \
    X(llmkv_status, prefix_load_ex, (llmkv_engine *, const char *, uint32_t, llmkv_prefix **))    \
    X(size_t, prefix_n_tokens, (const llmkv_prefix *))                                            \
    X(llmkv_status, prefix_get_tokens, (const llmkv_prefix *, int32_t *, size_t, size_t *))       \
    X(void, prefix_release, (llmkv_prefix *))                                                     \
    X(void, session_params_init, (llmkv_session_params *))                                        \
    X(void, session_params_init_sized, (llmkv_session_params *, size_t))                          \
    X(llmkv_status, session_create,                                                               \
      (llmkv_engine *, const llmkv_session_params *, llmkv_session **))                           \
    X(llmkv_status, session_append, (llmkv_session *, const int32_t *, size_t))                   \
    X(llmkv_status, session_append_text, (llmkv_session *, const char *, size_t))                 \
    X(llmkv_status, session_generate, (llmkv_session *, uint32_t))                                \
    X(llmkv_status, session_cancel, (llmkv_session *))                                            \
    X(llmkv_status, session_park, (llmkv_session *))                                              \
    X(llmkv_status, session_read_text, (llmkv_session *, char *, size_t, size_t *))               \
    X(llmkv_status, session_get_info, (const llmkv_session *, llmkv_session_info *))              \
    X(llmkv_status, session_get_tokens, (const llmkv_session *, int32_t *, size_t, size_t *))     \
    X(llmkv_status, session_fork, (llmkv_session *, llmkv_session **))                            \
    X(llmkv_status, session_to_prefix, (llmkv_session *, llmkv_prefix **))                        \
    X(llmkv_status, session_set_grammar,                                                          \
      (llmkv_session *, llmkv_grammar_kind, const char *, size_t, const char *))                  \
    X(void, session_destroy, (llmkv_session *))                                                   \
    X(llmkv_status, step, (llmkv_engine *, llmkv_event *, size_t, size_t *))                      \
    X(size_t, pending_events, (const llmkv_engine *))                                             \
    X(int, engine_has_work, (const llmkv_engine *))                                               \
    X(llmkv_status, run, (llmkv_engine *, llmkv_event_fn, void *))                                \
    X(llmkv_status, worker_start, (llmkv_engine *))                                               \
    X(llmkv_status, worker_stop, (llmkv_engine *))                                                \
    X(llmkv_status, worker_poll, (llmkv_engine *, llmkv_event *, size_t, uint32_t, size_t *))     \
    X(llmkv_status, session_submit_text,                                                          \
      (llmkv_session *, const char *, size_t, uint32_t, uint32_t))                                \
    X(llmkv_status, session_submit_tokens,                                                        \
      (llmkv_session *, const int32_t *, size_t, uint32_t, uint32_t))                             \
    X(llmkv_status, session_submit_cancel, (llmkv_session *))                                     \
    X(llmkv_status, session_submit_error, (const llmkv_session *, char *, size_t, size_t *))

#define LLMKV_LOADER_MEMBER_(ret, name, params) ret(*name) params;

/* llmkv_load and llmkv_unload are hidden on ELF platforms: two plugins of one process that
 * each compile the loader in (perhaps against different versions of llmkv.h) never bind to
 * each other's copy. A host that calls them from another of its own shared objects than the
 * one compiling llmkv_loader.c defines LLMKV_LOADER_API (for example as
 * __attribute__((visibility("default")))) for all of its translation units. */
#ifndef LLMKV_LOADER_API
#if (defined(__GNUC__) || defined(__clang__)) && !defined(_WIN32) && !defined(__CYGWIN__)
#define LLMKV_LOADER_API __attribute__((visibility("hidden")))
#else
#define LLMKV_LOADER_API
#endif
#endif

/* The loaded library: one function pointer per llmkv.h function (all non-NULL after a
 * successful llmkv_load), then the loader's own fields. */
typedef struct llmkv_api {
    LLMKV_LOADER_FUNCTIONS(LLMKV_LOADER_MEMBER_)
    void *handle;        /* dlopen handle (HMODULE on Windows); NULL when not loaded */
    int library_version; /* llmkv_version() of the loaded library, e.g. 400 for 0.4.0 */
} llmkv_api;

/* llmkv_load results. */
#define LLMKV_LOAD_OK 0
#define LLMKV_LOAD_ERR_ARGUMENT (-1)   /* api is NULL */
#define LLMKV_LOAD_ERR_OPEN (-2)       /* the file is missing or not a loadable library */
#define LLMKV_LOAD_ERR_NOT_LLMKV (-3)  /* a library without llmkv_version */
#define LLMKV_LOAD_ERR_VERSION (-4)    /* too old, or another major version */
#define LLMKV_LOAD_ERR_SYMBOL (-5)     /* a function of this header is missing */

/* Opens the library (see "Which library" above), checks its version and resolves every
 * function into *api. Returns LLMKV_LOAD_OK, or an LLMKV_LOAD_ERR_* code with the reason in
 * err (see "Errors" above) and *api cleared. */
LLMKV_LOADER_API int llmkv_load(const char *path, llmkv_api *api, char *err, size_t err_cap);

/* Closes the library loaded into *api and clears *api. Every engine created through it must
 * have been destroyed first (their threads run the library's code). An api that is not
 * loaded (cleared, or failed llmkv_load) is fine, as is NULL. */
LLMKV_LOADER_API void llmkv_unload(llmkv_api *api);

#ifdef __cplusplus
}
#endif

#endif /* LLMKV_LOADER_H */
