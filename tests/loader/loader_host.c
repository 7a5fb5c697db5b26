/*
 * A host with no link-time dependency on libllmkv (loader.no_link_dependency checks the
 * binary): every llmkv call goes through the table llmkv_load fills.
 *
 *   loader_host errors LIB OLD MAJOR PARTIAL NOVERSION SCRATCH_DIR
 *       LIB is the built library; OLD, MAJOR, PARTIAL, NOVERSION are the fake libraries of
 *       tests/loader (0.3.0, 1.0.0, 0.4 without most functions, no llmkv_version). Every
 *       error of llmkv_load with its exact message, the LLMKV_LIBRARY override, loading LIB
 *       by path, twice, and again after llmkv_unload.
 *   loader_host default
 *       llmkv_load(NULL): run with LD_LIBRARY_PATH naming the build's lib folder.
 *   loader_host model LIB MODEL
 *       An engine on the real model through the table: generate a few tokens with
 *       llmkv_step, detokenize them, the same through the worker thread (submit + poll);
 *       then unload, load again and get the same text. Exits 77 (skipped) when MODEL ($LLMKV_MODEL
 * first) is absent.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmkv_loader.h"

static int failures = 0;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                     \
        }                                                                   \
    } while (0)

static int api_is_clear(const llmkv_api *api) {
    int clear = api->handle == NULL && api->library_version == 0;
#define IS_NULL_(ret, fn, params) clear = clear && api->fn == NULL;
    LLMKV_LOADER_FUNCTIONS(IS_NULL_)
#undef IS_NULL_
    return clear;
}

static int api_is_full(const llmkv_api *api) {
    int full = api->handle != NULL;
#define NOT_NULL_(ret, fn, params) full = full && api->fn != NULL;
    LLMKV_LOADER_FUNCTIONS(NOT_NULL_)
#undef NOT_NULL_
    return full;
}

static size_t n_functions(void) {
    size_t n = 0;
#define COUNT_(ret, fn, params) n++;
    LLMKV_LOADER_FUNCTIONS(COUNT_)
#undef COUNT_
    return n;
}

/* What the system loader says about path: the text llmkv_load must quote. */
static void dlopen_error(const char *path, char *buf, size_t cap) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) {
        snprintf(buf, cap, "(dlopen succeeded)");
        dlclose(h);
        return;
    }
    snprintf(buf, cap, "%s", dlerror());
}

/* llmkv_load(path) must fail with code and exactly the message want. */
static void expect_error(const char *what, const char *path, int code, const char *want) {
    llmkv_api api;
    char err[1024];
    int rc;
    memset(&api, 0x5a, sizeof api); /* garbage in: llmkv_load must clear it */
    rc = llmkv_load(path, &api, err, sizeof err);
    printf("%-22s -> %d \"%s\"\n", what, rc, err);
    CHECK(rc == code);
    if (strcmp(err, want) != 0) {
        fprintf(stderr, "FAIL %s: message\n  got:  \"%s\"\n  want: \"%s\"\n", what, err, want);
        failures++;
    }
    CHECK(api_is_clear(&api));
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static void check_loaded(const llmkv_api *api) {
    char want[32];
    CHECK(api_is_full(api));
    CHECK(api->library_version == api->version());
    CHECK(api->library_version / 10000 == LLMKV_VERSION_MAJOR);
    CHECK(api->library_version / 100 % 100 >= LLMKV_VERSION_MINOR);
    snprintf(want, sizeof want, "%d.%d.%d", api->library_version / 10000,
             api->library_version / 100 % 100, api->library_version % 100);
    CHECK(strcmp(api->version_string(), want) == 0);
    CHECK(strcmp(api->status_string(LLMKV_ERR_STATE), "LLMKV_ERR_STATE") == 0);
}

static int run_errors(char **argv) {
    const char *lib = argv[2], *old_lib = argv[3], *major_lib = argv[4];
    const char *partial_lib = argv[5], *noversion_lib = argv[6], *scratch = argv[7];
    char want[4096], why[1024], path[1024], path2[1024];
    llmkv_api a, b;
    char err[1024];
    const char *text =
        "This is a text file, not a shared library: long enough (over 64 bytes) to be "
        "read as an ELF header and rejected as one.\n";
    int rc;
    llmkv_engine *engine = NULL;

    /* A file that does not exist: the message quotes the path and dlerror(). */
    snprintf(path, sizeof path, "%s/no-such-dir/libllmkv.so.0", scratch);
    dlopen_error(path, why, sizeof why);
    CHECK(strstr(why, path) != NULL);
    snprintf(want, sizeof want, "cannot open %s: %s", path, why);
    expect_error("missing file", path, LLMKV_LOAD_ERR_OPEN, want);

    /* Files that are not libraries: text, and empty. */
    snprintf(path, sizeof path, "%s/not_a_library.so", scratch);
    write_file(path, text, strlen(text));
    dlopen_error(path, why, sizeof why);
    snprintf(want, sizeof want, "cannot open %s: %s", path, why);
    expect_error("text file", path, LLMKV_LOAD_ERR_OPEN, want);
    snprintf(path2, sizeof path2, "%s/empty.so", scratch);
    write_file(path2, "", 0);
    dlopen_error(path2, why, sizeof why);
    snprintf(want, sizeof want, "cannot open %s: %s", path2, why);
    expect_error("empty file", path2, LLMKV_LOAD_ERR_OPEN, want);

    /* A shared library that is not llmkv. */
    snprintf(want, sizeof want, "%s: not an llmkv library (no symbol llmkv_version)",
             noversion_lib);
    expect_error("not llmkv", noversion_lib, LLMKV_LOAD_ERR_NOT_LLMKV, want);

    /* Too old (0.3.0) and another major version (1.0.0). */
    snprintf(want, sizeof want,
             "%s: too old: library 0.3.0, header %d.%d.%d (this host needs %d.%d or a later %d.x)",
             old_lib, LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR, LLMKV_VERSION_PATCH,
             LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR, LLMKV_VERSION_MAJOR);
    expect_error("too old", old_lib, LLMKV_LOAD_ERR_VERSION, want);
    if (LLMKV_VERSION_NUMBER == 400) /* the literal text of the issue, while the header is 0.4.0 */
        CHECK(strstr(want,
                     "too old: library 0.3.0, header 0.4.0 (this host needs 0.4 or a later 0.x)"));
    snprintf(want, sizeof want,
             "%s: incompatible: library 1.0.0, header %d.%d.%d (the major versions differ)",
             major_lib, LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR, LLMKV_VERSION_PATCH);
    expect_error("other major", major_lib, LLMKV_LOAD_ERR_VERSION, want);

    /* The right version but only version, version_string, status_string and last_error. */
    snprintf(want, sizeof want,
             "%s: missing symbol llmkv_log_set (library %d.%d.%d, header %d.%d.%d; %zu of %zu "
             "functions missing)",
             partial_lib, LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR, LLMKV_VERSION_PATCH,
             LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR, LLMKV_VERSION_PATCH, n_functions() - 4,
             n_functions());
    expect_error("missing symbol", partial_lib, LLMKV_LOAD_ERR_SYMBOL, want);

    /* Arguments: NULL api; a short err buffer gets a truncated, terminated message; no
     * buffer at all. */
    rc = llmkv_load(lib, NULL, err, sizeof err);
    CHECK(rc == LLMKV_LOAD_ERR_ARGUMENT);
    CHECK(strcmp(err, "api is NULL") == 0);
    memset(err, 'x', sizeof err);
    rc = llmkv_load(old_lib, &a, err, 17);
    CHECK(rc == LLMKV_LOAD_ERR_VERSION);
    CHECK(strlen(err) == 16 && strncmp(err, old_lib, 16) == 0);
    CHECK(llmkv_load(old_lib, &a, NULL, 0) == LLMKV_LOAD_ERR_VERSION);

    /* The default search. LLMKV_LIBRARY pointing nowhere names itself; unset, the SONAME is
     * searched (this test runs without the build folder on the search path). */
    snprintf(path, sizeof path, "%s/no-such-dir/libllmkv-env.so", scratch);
    setenv("LLMKV_LIBRARY", path, 1);
    dlopen_error(path, why, sizeof why);
    snprintf(want, sizeof want, "cannot open %s (from LLMKV_LIBRARY): %s", path, why);
    expect_error("LLMKV_LIBRARY missing", NULL, LLMKV_LOAD_ERR_OPEN, want);
    setenv("LLMKV_LIBRARY", old_lib, 1);
    snprintf(want, sizeof want,
             "%s: too old: library 0.3.0, header %d.%d.%d (this host needs %d.%d or a later %d.x)",
             old_lib, LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR, LLMKV_VERSION_PATCH,
             LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR, LLMKV_VERSION_MAJOR);
    expect_error("LLMKV_LIBRARY too old", NULL, LLMKV_LOAD_ERR_VERSION, want);
    setenv("LLMKV_LIBRARY", "", 1); /* empty = unset */
    dlopen_error("libllmkv.so.0", why, sizeof why);
    if (strcmp(why, "(dlopen succeeded)") == 0) {
        printf("default search        -> skipped: a libllmkv.so.0 is installed on this system\n");
    } else {
        snprintf(want, sizeof want,
                 "cannot open libllmkv.so.0 (the default: searched by the system loader; pass a "
                 "path or set LLMKV_LIBRARY): %s",
                 why);
        expect_error("default search", NULL, LLMKV_LOAD_ERR_OPEN, want);
    }
    setenv("LLMKV_LIBRARY", lib, 1);
    rc = llmkv_load(NULL, &a, err, sizeof err);
    printf("%-22s -> %d \"%s\"\n", "LLMKV_LIBRARY=lib", rc, err);
    CHECK(rc == LLMKV_LOAD_OK);
    llmkv_unload(&a);
    CHECK(api_is_clear(&a));
    unsetenv("LLMKV_LIBRARY");

    /* The built library by path: every function, a call that fails without a model. */
    rc = llmkv_load(lib, &a, err, sizeof err);
    printf("%-22s -> %d \"%s\"\n", "built library", rc, err);
    CHECK(rc == LLMKV_LOAD_OK);
    if (rc != LLMKV_LOAD_OK) return 1;
    CHECK(err[0] == '\0');
    check_loaded(&a);
    printf("loaded %s: version %s, %zu functions\n", lib, a.version_string(), n_functions());
    CHECK(a.engine_create(NULL, &engine) == LLMKV_ERR_INVALID_ARGUMENT);
    CHECK(a.last_error()[0] != '\0');
    printf("engine_create(NULL): %s: %s\n", a.status_string(LLMKV_ERR_INVALID_ARGUMENT),
           a.last_error());

    /* Twice: the system loader's reference count; one unload leaves the other table valid. */
    CHECK(llmkv_load(lib, &b, err, sizeof err) == LLMKV_LOAD_OK);
    CHECK(b.handle == a.handle && b.version == a.version);
    llmkv_unload(&a);
    CHECK(api_is_clear(&a));
    check_loaded(&b);
    llmkv_unload(&b);
    llmkv_unload(&b); /* a cleared table: nothing to do */
    llmkv_unload(NULL);

    /* Again after the library was closed. */
    CHECK(llmkv_load(lib, &a, err, sizeof err) == LLMKV_LOAD_OK);
    check_loaded(&a);
    llmkv_unload(&a);

    printf(failures ? "FAILED: %d checks\n" : "ok\n", failures);
    return failures ? 1 : 0;
}

static int run_default(void) {
    llmkv_api a;
    char err[1024];
    int rc = llmkv_load(NULL, &a, err, sizeof err);
    printf("llmkv_load(NULL) -> %d \"%s\"\n", rc, err);
    CHECK(rc == LLMKV_LOAD_OK);
    if (rc == LLMKV_LOAD_OK) {
        check_loaded(&a);
        printf("found libllmkv.so.0 by the system search: version %s\n", a.version_string());
        llmkv_unload(&a);
    }
    printf(failures ? "FAILED: %d checks\n" : "ok\n", failures);
    return failures ? 1 : 0;
}

/* One load - engine - generate - detokenize - unload round; the text goes to out. */
static int generate_once(const char *lib, const char *model, char *out, size_t out_cap) {
    const char *prompt = "The capital of France is";
    llmkv_api a;
    char err[1024];
    llmkv_engine_params ep;
    llmkv_session_params sp;
    llmkv_engine *engine = NULL;
    llmkv_session *s = NULL;
    int32_t tokens[64];
    size_t n_tok = 0, n_bytes = 0, n_read = 0, total_read = 0;
    char text[512], streamed[512];
    int done = 0, guard = 0, failed_before = failures;
    uint32_t finish = 0;

    if (llmkv_load(lib, &a, err, sizeof err) != LLMKV_LOAD_OK) {
        fprintf(stderr, "FAIL: llmkv_load: %s\n", err);
        return 1;
    }
    a.engine_params_init_sized(&ep, sizeof ep);
    ep.model_path = model;
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = 2;
    if (a.engine_create(&ep, &engine) != LLMKV_OK) {
        fprintf(stderr, "FAIL: engine_create: %s\n", a.last_error());
        llmkv_unload(&a);
        return 1;
    }
    a.session_params_init_sized(&sp, sizeof sp);
    sp.max_new_tokens = 8;
    CHECK(a.session_create(engine, &sp, &s) == LLMKV_OK);
    CHECK(a.session_append_text(s, prompt, strlen(prompt)) == LLMKV_OK);
    CHECK(a.session_generate(s, 0) == LLMKV_OK);
    while (!done && guard++ < 1000) {
        llmkv_event ev[16];
        size_t n = 0, i;
        if (a.step(engine, ev, 16, &n) != LLMKV_OK) {
            fprintf(stderr, "FAIL: step: %s\n", a.last_error());
            failures++;
            break;
        }
        for (i = 0; i < n; i++) {
            CHECK(ev[i].session == s);
            if (ev[i].kind == LLMKV_EVENT_TOKEN && n_tok < 64)
                tokens[n_tok++] = ev[i].token;
            else if (ev[i].kind == LLMKV_EVENT_DONE) {
                finish = ev[i].finish_reason;
                done = 1;
            } else if (ev[i].kind == LLMKV_EVENT_ERROR) {
                fprintf(stderr, "FAIL: error event %d\n", ev[i].status);
                failures++;
                done = 1;
            }
        }
        if (a.session_read_text(s, streamed + total_read, sizeof streamed - 1 - total_read,
                                &n_read) == LLMKV_OK)
            total_read += n_read;
    }
    streamed[total_read] = '\0';
    CHECK(done);
    CHECK(n_tok >= 1 && n_tok <= 8);
    CHECK(finish == LLMKV_FINISH_LENGTH ? n_tok == 8 : finish == LLMKV_FINISH_STOP);
    CHECK(a.detokenize(engine, tokens, n_tok, text, sizeof text - 1, &n_bytes) == LLMKV_OK);
    text[n_bytes < sizeof text ? n_bytes : sizeof text - 1] = '\0';
    printf("prompt: \"%s\"\ngenerated %zu tokens (finish %u): \"%s\"\n", prompt, n_tok, finish,
           text);
    CHECK(n_bytes > 0);
    CHECK(strcmp(text, streamed) == 0); /* no stop strings: read_text delivers the same text */
    /* The same request the game-loop way (0.4): the engine's worker thread steps; this
     * thread only submits and polls. Greedy, so the same text. */
    {
        llmkv_session *s2 = NULL;
        char wtext[512];
        size_t wlen = 0, got = 0;
        int wdone = 0, polls = 0;
        CHECK(a.session_create(engine, &sp, &s2) == LLMKV_OK);
        CHECK(a.worker_start(engine) == LLMKV_OK);
        CHECK(a.step(engine, NULL, 0, &got) == LLMKV_ERR_STATE); /* the worker steps now */
        CHECK(a.session_submit_text(s2, prompt, strlen(prompt), LLMKV_SUBMIT_GENERATE, 0) ==
              LLMKV_OK);
        while (!wdone && polls++ < 3000) {
            llmkv_event ev[16];
            size_t n = 0, i;
            if (a.worker_poll(engine, ev, 16, 10000, &n) != LLMKV_OK) {
                fprintf(stderr, "FAIL: worker_poll: %s\n", a.last_error());
                failures++;
                break;
            }
            for (i = 0; i < n; i++) {
                CHECK(ev[i].session == s2);
                if (ev[i].kind == LLMKV_EVENT_DONE)
                    wdone = 1;
                else if (ev[i].kind == LLMKV_EVENT_ERROR) {
                    fprintf(stderr, "FAIL: worker error event %d\n", ev[i].status);
                    failures++;
                    wdone = 1;
                }
            }
            if (a.session_read_text(s2, wtext + wlen, sizeof wtext - 1 - wlen, &got) == LLMKV_OK)
                wlen += got;
        }
        CHECK(a.worker_stop(engine) == LLMKV_OK);
        while (a.session_read_text(s2, wtext + wlen, sizeof wtext - 1 - wlen, &got) == LLMKV_OK &&
               got > 0)
            wlen += got;
        wtext[wlen] = '\0';
        printf("worker thread, submit + poll: \"%s\"\n", wtext);
        CHECK(wdone);
        CHECK(strcmp(wtext, text) == 0);
        a.session_destroy(s2);
    }
    CHECK(a.engine_validate(engine) == LLMKV_OK);
    a.session_destroy(s);
    a.engine_destroy(engine);
    llmkv_unload(&a);
    snprintf(out, out_cap, "%s", text);
    return failures != failed_before;
}

static int run_model(const char *lib, const char *model_arg) {
    const char *model = getenv("LLMKV_MODEL");
    char first[512], second[512];
    FILE *f;

    if (!model || !model[0]) model = model_arg;
    f = fopen(model, "rb");
    if (!f) {
        printf("SKIP: model not found at %s (set LLMKV_MODEL or run scripts/fetch_model.sh)\n",
               model);
        return 77;
    }
    fclose(f);

    if (generate_once(lib, model, first, sizeof first) != 0) return 1;
    /* A plugin host's reload: the library was closed; loaded again, it answers the same. */
    if (generate_once(lib, model, second, sizeof second) != 0) return 1;
    CHECK(strcmp(first, second) == 0);
    printf(failures ? "FAILED: %d checks\n" : "ok (the same text after unload and reload)\n",
           failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 8 && strcmp(argv[1], "errors") == 0) return run_errors(argv);
    if (argc == 2 && strcmp(argv[1], "default") == 0) return run_default();
    if (argc == 4 && strcmp(argv[1], "model") == 0) return run_model(argv[2], argv[3]);
    fprintf(stderr,
            "usage: %s errors LIB OLD MAJOR PARTIAL NOVERSION SCRATCH_DIR | default | model LIB "
            "MODEL\n",
            argv[0]);
    return 2;
}
