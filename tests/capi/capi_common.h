/*
 * capi_common.h - shared helpers of the C API tests (every tests/capi program): finding the model,
 * creating an engine and sessions with small settings, stepping, UTF-8 and pool checks.
 */
#ifndef LLMKV_CAPI_COMMON_H
#define LLMKV_CAPI_COMMON_H

// clang-format off
// cmocka.h needs setjmp.h, stdarg.h and stddef.h before it: this order is kept by hand.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
// clang-format on

#include "llmkv.h"

#ifndef LLMKV_TEST_FIXTURES_DIR
#error "LLMKV_TEST_FIXTURES_DIR must be defined by the build"
#endif

#define CAPI_DEFAULT_MODEL LLMKV_TEST_FIXTURES_DIR "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define CAPI_MAX_CONTEXT 512u
#define CAPI_THREADS 2u

static inline int capi_file_exists(const char *path) {
    FILE *f;
    if (!path || !*path) return 0;
    f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    return 1;
}

/* $LLMKV_MODEL when set and readable, else the model under <repo>/models; NULL if none. */
static inline const char *capi_model_path(void) {
    const char *env = getenv("LLMKV_MODEL");
    if (env && *env && capi_file_exists(env)) return env;
    return capi_file_exists(CAPI_DEFAULT_MODEL) ? CAPI_DEFAULT_MODEL : NULL;
}

/* Skips the current test (with a printed reason) when no model is available. */
#define CAPI_REQUIRE_MODEL()                                                      \
    do {                                                                          \
        if (!capi_model_path()) {                                                 \
            print_message("SKIP: no model: set LLMKV_MODEL or put %s in place\n", \
                          CAPI_DEFAULT_MODEL);                                    \
            skip();                                                               \
        }                                                                         \
    } while (0)

/* Asserts an exact status and that llmkv_last_error() is non-empty and, when `needle` is
 * not NULL, contains it. */
#define capi_assert_error(status, expected, needle) \
    capi_assert_error_(status, expected, needle, __FILE__, __LINE__)

static inline void capi_assert_error_(llmkv_status status, llmkv_status expected,
                                      const char *needle, const char *file, int line) {
    const char *msg = llmkv_last_error();
    if (status != expected) {
        print_error("%s:%d: status %s (%d), expected %s (%d); last_error: \"%s\"\n", file, line,
                    llmkv_status_string(status), (int)status, llmkv_status_string(expected),
                    (int)expected, msg ? msg : "(null)");
    }
    _assert_int_equal((LargestIntegralType)(int64_t)status, (LargestIntegralType)(int64_t)expected,
                      file, line);
    _assert_true(msg != NULL, "llmkv_last_error() != NULL", file, line);
    if (msg[0] == '\0') print_error("%s:%d: llmkv_last_error() is empty\n", file, line);
    _assert_true(msg[0] != '\0', "llmkv_last_error() is non-empty", file, line);
    if (needle && !strstr(msg, needle)) {
        print_error("%s:%d: last_error \"%s\" does not mention \"%s\"\n", file, line, msg, needle);
        _assert_true(0, "last_error mentions the argument", file, line);
    }
}

#define capi_assert_ok(status) capi_assert_ok_(status, #status, __FILE__, __LINE__)

static inline void capi_assert_ok_(llmkv_status status, const char *expr, const char *file,
                                   int line) {
    if (status != LLMKV_OK) {
        print_error("%s:%d: %s returned %s (%d): %s\n", file, line, expr,
                    llmkv_status_string(status), (int)status, llmkv_last_error());
    }
    _assert_int_equal((LargestIntegralType)(int64_t)status, 0, file, line);
}

/* Engine params with small settings: CPU, 2 threads, max_context 512. */
static inline void capi_engine_params(llmkv_engine_params *p) {
    llmkv_engine_params_init(p);
    p->model_path = capi_model_path();
    p->backend = LLMKV_BACKEND_CPU;
    p->n_threads = CAPI_THREADS;
    p->max_context = CAPI_MAX_CONTEXT;
}

/* Creates an engine with capi_engine_params (the caller checked CAPI_REQUIRE_MODEL). */
static inline llmkv_engine *capi_engine_create(void) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    capi_engine_params(&p);
    capi_assert_ok(llmkv_engine_create(&p, &e));
    assert_non_null(e);
    return e;
}

/* A greedy session with max_new_tokens as its default limit. */
static inline llmkv_session *capi_session_create(llmkv_engine *e, void *user_data,
                                                 uint32_t max_new_tokens) {
    llmkv_session_params sp;
    llmkv_session *s = NULL;
    llmkv_session_params_init(&sp);
    sp.user_data = user_data;
    sp.max_new_tokens = max_new_tokens;
    capi_assert_ok(llmkv_session_create(e, &sp, &s));
    assert_non_null(s);
    return s;
}

/* Tokenizes a NUL-terminated string (special tokens parsed, no BOS); returns the count. */
static inline size_t capi_tokenize(llmkv_engine *e, const char *text, int32_t *out,
                                   size_t capacity) {
    size_t n = 0;
    capi_assert_ok(
        llmkv_tokenize(e, text, strlen(text), LLMKV_TOKENIZE_PARSE_SPECIAL, out, capacity, &n));
    return n;
}

/* Appends the tokens of a NUL-terminated text to a session. */
static inline void capi_append_text(llmkv_session *s, const char *text) {
    capi_assert_ok(llmkv_session_append_text(s, text, strlen(text)));
}

static inline llmkv_session_info capi_session_info(const llmkv_session *s) {
    llmkv_session_info info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    capi_assert_ok(llmkv_session_get_info(s, &info));
    return info;
}

static inline llmkv_stats capi_stats(const llmkv_engine *e) {
    llmkv_stats st;
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    capi_assert_ok(llmkv_engine_get_stats(e, &st));
    return st;
}

static inline llmkv_engine_info capi_engine_info(const llmkv_engine *e) {
    llmkv_engine_info info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    capi_assert_ok(llmkv_engine_get_info(e, &info));
    return info;
}

/* Copies the session's context tokens into out (capacity max); returns the total count. */
static inline size_t capi_session_tokens(const llmkv_session *s, int32_t *out, size_t capacity) {
    size_t n = 0;
    capi_assert_ok(llmkv_session_get_tokens(s, out, capacity, &n));
    assert_true(n <= capacity);
    return n;
}

/* Steps (capacity 16) until a step returns no events and nothing is pending; at most
 * max_steps steps. Returns the number of steps taken. */
static inline int capi_drain(llmkv_engine *e, int max_steps) {
    llmkv_event ev[16];
    int steps = 0;
    for (;;) {
        size_t n = 0;
        capi_assert_ok(llmkv_step(e, ev, 16, &n));
        ++steps;
        if (n == 0 && llmkv_pending_events(e) == 0) break;
        assert_true(steps < max_steps);
    }
    return steps;
}

/* Each destroyed session gave its blocks back and the pool invariants hold. Blocks the
 * prefix cache keeps (cached, referenced by nobody) are reclaimable, so free + cached is
 * the whole pool. */
static inline void capi_assert_pool_clean(const llmkv_engine *e) {
    llmkv_stats st;
    capi_assert_ok(llmkv_engine_validate(e));
    st = capi_stats(e);
    assert_int_equal(st.sessions_total, 0);
    assert_int_equal(st.blocks_free + st.blocks_cached, st.blocks_total);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(st.tail_blocks_used, 0);
}

/* 1 when buf[0..len) is valid UTF-8 (no overlongs, surrogates or values above U+10FFFF). */
static inline int capi_utf8_valid(const char *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    size_t i = 0;
    while (i < len) {
        unsigned char b = p[i];
        size_t need, k;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b < 0x80) {
            ++i;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            need = 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 3;
            if (b == 0xE0) lo = 0xA0;
            if (b == 0xED) hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 4;
            if (b == 0xF0) lo = 0x90;
            if (b == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (i + need > len) return 0;
        for (k = 1; k < need; ++k) {
            unsigned char c = p[i + k];
            unsigned char klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
            if (c < klo || c > khi) return 0;
        }
        i += need;
    }
    return 1;
}

/* 1 when buf[0..len) is a proper prefix of one valid UTF-8 character (1..3 bytes). */
static inline int capi_utf8_incomplete_char(const char *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    size_t need, k;
    if (len == 0 || len > 3) return 0;
    if (p[0] >= 0xC2 && p[0] <= 0xDF)
        need = 2;
    else if (p[0] >= 0xE0 && p[0] <= 0xEF)
        need = 3;
    else if (p[0] >= 0xF0 && p[0] <= 0xF4)
        need = 4;
    else
        return 0;
    if (len >= need) return 0;
    for (k = 1; k < len; ++k) {
        if (p[k] < 0x80 || p[k] > 0xBF) return 0;
    }
    return 1;
}

#endif /* LLMKV_CAPI_COMMON_H */
