/*
 * api_args.c - argument checking of the C API as a C99 host sees it: version, status names,
 * NULL pointers, struct_size handling, bad files and values, token/text capacity rules.
 */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <math.h>
#include <unistd.h>

#include "capi_common.h"

#define NONEXISTENT_MODEL "/nonexistent-llmkv-dir/no-such-model.gguf"

/* ---- without a model ---------------------------------------------------------------------- */

static void test_version(void **state) {
    char expected[32];
    (void)state;
    assert_int_equal(llmkv_version(), LLMKV_VERSION_NUMBER);
    assert_int_equal(LLMKV_VERSION_NUMBER,
                     LLMKV_VERSION_MAJOR * 10000 + LLMKV_VERSION_MINOR * 100 + LLMKV_VERSION_PATCH);
    snprintf(expected, sizeof(expected), "%d.%d.%d", LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR,
             LLMKV_VERSION_PATCH);
    assert_non_null(llmkv_version_string());
    assert_string_equal(llmkv_version_string(), expected);
    /* static storage: the same text on every call */
    assert_string_equal(llmkv_version_string(), llmkv_version_string());
}

static void test_status_strings(void **state) {
    static const struct {
        llmkv_status status;
        const char *name;
    } known[] = {
        {LLMKV_OK, "LLMKV_OK"},
        {LLMKV_ERR_INVALID_ARGUMENT, "LLMKV_ERR_INVALID_ARGUMENT"},
        {LLMKV_ERR_OUT_OF_MEMORY, "LLMKV_ERR_OUT_OF_MEMORY"},
        {LLMKV_ERR_KV_CAPACITY, "LLMKV_ERR_KV_CAPACITY"},
        {LLMKV_ERR_IO, "LLMKV_ERR_IO"},
        {LLMKV_ERR_MODEL_FORMAT, "LLMKV_ERR_MODEL_FORMAT"},
        {LLMKV_ERR_UNSUPPORTED, "LLMKV_ERR_UNSUPPORTED"},
        {LLMKV_ERR_BACKEND, "LLMKV_ERR_BACKEND"},
        {LLMKV_ERR_STATE, "LLMKV_ERR_STATE"},
        {LLMKV_ERR_SNAPSHOT_FORMAT, "LLMKV_ERR_SNAPSHOT_FORMAT"},
        {LLMKV_ERR_CANCELLED, "LLMKV_ERR_CANCELLED"},
        {LLMKV_ERR_INTERNAL, "LLMKV_ERR_INTERNAL"},
    };
    static const llmkv_status unknown[] = {1,    2,  -11,   -12,       -98,
                                           -100, 99, 12345, INT32_MIN, INT32_MAX};
    size_t i;
    (void)state;
    /* the values are fixed forever */
    assert_int_equal(LLMKV_OK, 0);
    assert_int_equal(LLMKV_ERR_INVALID_ARGUMENT, -1);
    assert_int_equal(LLMKV_ERR_OUT_OF_MEMORY, -2);
    assert_int_equal(LLMKV_ERR_KV_CAPACITY, -3);
    assert_int_equal(LLMKV_ERR_IO, -4);
    assert_int_equal(LLMKV_ERR_MODEL_FORMAT, -5);
    assert_int_equal(LLMKV_ERR_UNSUPPORTED, -6);
    assert_int_equal(LLMKV_ERR_BACKEND, -7);
    assert_int_equal(LLMKV_ERR_STATE, -8);
    assert_int_equal(LLMKV_ERR_SNAPSHOT_FORMAT, -9);
    assert_int_equal(LLMKV_ERR_CANCELLED, -10);
    assert_int_equal(LLMKV_ERR_INTERNAL, -99);
    for (i = 0; i < sizeof(known) / sizeof(known[0]); ++i) {
        const char *s = llmkv_status_string(known[i].status);
        assert_non_null(s);
        assert_string_equal(s, known[i].name);
    }
    for (i = 0; i < sizeof(unknown) / sizeof(unknown[0]); ++i) {
        const char *s = llmkv_status_string(unknown[i]);
        assert_non_null(s);
        assert_string_equal(s, "LLMKV_ERR_UNKNOWN");
    }
}

static void test_params_init_defaults(void **state) {
    llmkv_engine_params ep;
    llmkv_session_params sp;
    (void)state;
    memset(&ep, 0xAB, sizeof(ep));
    llmkv_engine_params_init(&ep);
    assert_int_equal(ep.struct_size, sizeof(ep));
    assert_null(ep.model_path);
    assert_int_equal(ep.backend, LLMKV_BACKEND_AUTO);
    assert_null(ep.devices);
    assert_int_equal(ep.n_devices, 0);
    assert_int_equal(ep.n_threads, 0);
    assert_int_equal(ep.kv_dtype_k, LLMKV_KV_F16);
    assert_int_equal(ep.kv_dtype_v, LLMKV_KV_F16);
    assert_int_equal(ep.kv_block_tokens, 0);
    assert_int_equal(ep.kv_device_bytes, 0);
    assert_int_equal(ep.kv_host_bytes, 0);
    assert_int_equal(ep.max_batch_tokens, 0);
    assert_int_equal(ep.max_context, 0);
    assert_true((ep.flags & LLMKV_ENGINE_PREFIX_CACHE) != 0);
    assert_int_equal(ep.max_sessions, 0);

    memset(&sp, 0xAB, sizeof(sp));
    llmkv_session_params_init(&sp);
    assert_int_equal(sp.struct_size, sizeof(sp));
    assert_null(sp.prefix);
    assert_true(sp.sampling.temperature == 0.0f);
    assert_null(sp.stop_tokens);
    assert_int_equal(sp.n_stop_tokens, 0);
    assert_int_equal(sp.max_new_tokens, 0);
    assert_int_equal(sp.priority, 0);
    assert_null(sp.user_data);
    assert_true(sp.sampling.top_p == 1.0f);
    assert_true(sp.sampling.repeat_penalty == 1.0f);
}

static void test_destroy_null(void **state) {
    (void)state;
    llmkv_engine_destroy(NULL);
    llmkv_session_destroy(NULL);
}

static void test_engine_create_null(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    (void)state;
    capi_assert_error(llmkv_engine_create(NULL, &e), LLMKV_ERR_INVALID_ARGUMENT, "params");
    assert_null(e);
    llmkv_engine_params_init(&p);
    p.model_path = NONEXISTENT_MODEL;
    capi_assert_error(llmkv_engine_create(&p, NULL), LLMKV_ERR_INVALID_ARGUMENT, "out");
    capi_assert_error(llmkv_engine_create(NULL, NULL), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    /* model_path NULL is a bad value */
    p.model_path = NULL;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "model_path");
    assert_null(e);
}

/* An unknown struct_size is rejected before any other field is read. */
static void test_engine_params_struct_size(void **state) {
    const uint32_t sizes[] = {0, 4, (uint32_t)sizeof(llmkv_engine_params) - 4,
                              (uint32_t)sizeof(llmkv_engine_params) + 4, UINT32_MAX};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        llmkv_engine_params p;
        llmkv_engine *e = NULL;
        llmkv_engine_params_init(&p);
        p.model_path = NONEXISTENT_MODEL;
        p.struct_size = sizes[i];
        capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "struct_size");
        assert_null(e);
    }
}

static void test_engine_create_nonexistent(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    (void)state;
    llmkv_engine_params_init(&p);
    p.model_path = NONEXISTENT_MODEL;
    p.backend = LLMKV_BACKEND_CPU;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_IO, "no-such-model.gguf");
    assert_null(e);
}

static void test_engine_create_directory(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    (void)state;
    llmkv_engine_params_init(&p);
    p.model_path = LLMKV_TEST_FIXTURES_DIR;
    p.backend = LLMKV_BACKEND_CPU;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_IO, NULL);
    assert_null(e);
}

/* Writes len bytes to a new temp file; the path goes into path (size >= 64). */
static void write_temp_file(char *path, const void *data, size_t len) {
    const char *dir = getenv("TMPDIR");
    int fd;
    snprintf(path, 256, "%s/llmkv_capi_XXXXXX", dir && *dir ? dir : "/tmp");
    fd = mkstemp(path);
    assert_true(fd >= 0);
    if (len > 0) assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

static void expect_model_format(const void *data, size_t len) {
    char path[256];
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    llmkv_status st;
    write_temp_file(path, data, len);
    llmkv_engine_params_init(&p);
    p.model_path = path;
    p.backend = LLMKV_BACKEND_CPU;
    p.n_threads = CAPI_THREADS;
    st = llmkv_engine_create(&p, &e);
    unlink(path);
    if (st == LLMKV_OK) llmkv_engine_destroy(e);
    capi_assert_error(st, LLMKV_ERR_MODEL_FORMAT, NULL);
}

static void test_engine_create_not_gguf(void **state) {
    unsigned char junk[4096];
    size_t i;
    (void)state;
    /* text */
    {
        static const char text[] =
            "this is not a GGUF file, just some text that happens to be here\n";
        expect_model_format(text, sizeof(text) - 1);
    }
    /* pseudo-random bytes */
    for (i = 0; i < sizeof(junk); ++i) junk[i] = (unsigned char)((i * 2654435761u) >> 13);
    junk[0] = 'J';
    expect_model_format(junk, sizeof(junk));
    /* empty file */
    expect_model_format("", 0);
    /* GGUF magic, then cut short */
    expect_model_format("GGUF", 4);
    /* GGUF magic, version 3, absurd tensor count, no more data */
    {
        unsigned char hdr[24];
        uint32_t version = 3;
        uint64_t count = UINT64_MAX;
        memcpy(hdr, "GGUF", 4);
        memcpy(hdr + 4, &version, 4);
        memcpy(hdr + 8, &count, 8);
        memcpy(hdr + 16, &count, 8);
        expect_model_format(hdr, sizeof(hdr));
    }
}

/* Handles that are NULL: every function that takes one says INVALID_ARGUMENT. */
static void test_null_handles(void **state) {
    llmkv_engine_params ep;
    llmkv_session_params sp;
    llmkv_session *s = (llmkv_session *)0;
    llmkv_engine_info info;
    llmkv_stats stats;
    llmkv_session_info sinfo;
    llmkv_event ev[2];
    llmkv_chat_message msg = {"user", "hi"};
    int32_t toks[8] = {1, 2};
    char buf[16];
    size_t n = 7;
    (void)state;
    llmkv_engine_params_init(&ep);
    llmkv_session_params_init(&sp);
    info.struct_size = sizeof(info);
    stats.struct_size = sizeof(stats);
    sinfo.struct_size = sizeof(sinfo);

    capi_assert_error(llmkv_session_create(NULL, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT, "engine");
    assert_null(s);
    capi_assert_error(llmkv_engine_get_info(NULL, &info), LLMKV_ERR_INVALID_ARGUMENT, "engine");
    capi_assert_error(llmkv_engine_get_stats(NULL, &stats), LLMKV_ERR_INVALID_ARGUMENT, "engine");
    capi_assert_error(llmkv_engine_validate(NULL), LLMKV_ERR_INVALID_ARGUMENT, "engine");
    capi_assert_error(llmkv_tokenize(NULL, "hi", 2, 0, toks, 8, &n), LLMKV_ERR_INVALID_ARGUMENT,
                      "engine");
    capi_assert_error(llmkv_detokenize(NULL, toks, 2, buf, sizeof(buf), &n),
                      LLMKV_ERR_INVALID_ARGUMENT, "engine");
    capi_assert_error(llmkv_chat_format(NULL, &msg, 1, 1, buf, sizeof(buf), &n),
                      LLMKV_ERR_INVALID_ARGUMENT, "engine");
    n = 7;
    capi_assert_error(llmkv_step(NULL, ev, 2, &n), LLMKV_ERR_INVALID_ARGUMENT, "engine");
    capi_assert_error(llmkv_run(NULL, NULL, NULL), LLMKV_ERR_INVALID_ARGUMENT, "engine");

    capi_assert_error(llmkv_session_append(NULL, toks, 2), LLMKV_ERR_INVALID_ARGUMENT, "session");
    capi_assert_error(llmkv_session_append_text(NULL, "hi", 2), LLMKV_ERR_INVALID_ARGUMENT,
                      "session");
    capi_assert_error(llmkv_session_generate(NULL, 4), LLMKV_ERR_INVALID_ARGUMENT, "session");
    capi_assert_error(llmkv_session_cancel(NULL), LLMKV_ERR_INVALID_ARGUMENT, "session");
    capi_assert_error(llmkv_session_read_text(NULL, buf, sizeof(buf), &n),
                      LLMKV_ERR_INVALID_ARGUMENT, "session");
    capi_assert_error(llmkv_session_get_info(NULL, &sinfo), LLMKV_ERR_INVALID_ARGUMENT, "session");
    capi_assert_error(llmkv_session_get_tokens(NULL, toks, 8, &n), LLMKV_ERR_INVALID_ARGUMENT,
                      "session");

    /* NULL handle and NULL out pointer together */
    capi_assert_error(llmkv_engine_get_info(NULL, NULL), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    capi_assert_error(llmkv_engine_get_stats(NULL, NULL), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    capi_assert_error(llmkv_session_get_info(NULL, NULL), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    capi_assert_error(llmkv_tokenize(NULL, "hi", 2, 0, toks, 8, NULL), LLMKV_ERR_INVALID_ARGUMENT,
                      NULL);
    capi_assert_error(llmkv_detokenize(NULL, toks, 2, buf, sizeof(buf), NULL),
                      LLMKV_ERR_INVALID_ARGUMENT, NULL);
    capi_assert_error(llmkv_chat_format(NULL, &msg, 1, 1, buf, sizeof(buf), NULL),
                      LLMKV_ERR_INVALID_ARGUMENT, NULL);
    capi_assert_error(llmkv_step(NULL, ev, 2, NULL), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    capi_assert_error(llmkv_session_create(NULL, NULL, NULL), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    capi_assert_error(llmkv_session_read_text(NULL, buf, sizeof(buf), NULL),
                      LLMKV_ERR_INVALID_ARGUMENT, NULL);
    capi_assert_error(llmkv_session_get_tokens(NULL, toks, 8, NULL), LLMKV_ERR_INVALID_ARGUMENT,
                      NULL);
}

/* ---- with the model ----------------------------------------------------------------------- */

static void test_engine_info(void **state) {
    llmkv_engine *e;
    llmkv_engine_info info;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    info = capi_engine_info(e);
    assert_int_equal(info.struct_size, sizeof(info));
    assert_int_equal(info.n_vocab, 49152);
    assert_int_equal(info.n_layers, 30);
    assert_int_equal(info.max_context, CAPI_MAX_CONTEXT);
    assert_true(info.n_ctx_train >= CAPI_MAX_CONTEXT);
    assert_int_equal(info.n_threads, CAPI_THREADS);
    assert_int_equal(info.backend, LLMKV_BACKEND_CPU);
    assert_string_equal(info.backend_name, "cpu");
    assert_string_equal(info.architecture, "llama");
    assert_int_equal(info.kv_block_tokens, 16);
    assert_int_equal(info.kv_dtype_k, LLMKV_KV_F16);
    assert_int_equal(info.kv_dtype_v, LLMKV_KV_F16);
    assert_int_equal(info.tp_size, 1);
    assert_true(info.n_heads > 0 && info.n_kv_heads > 0 && info.head_dim > 0);
    assert_true(info.kv_blocks_total > 0);
    assert_true(info.eos_token >= -1 && info.eos_token < (int32_t)info.n_vocab);
    assert_true(memchr(info.model_name, '\0', sizeof(info.model_name)) != NULL);
    capi_assert_ok(llmkv_engine_validate(e));
    llmkv_engine_destroy(e);
}

typedef struct {
    int n_messages;
    int too_verbose;
    int bad_message;
    llmkv_log_level max_level;
} log_ctx_t;

static void log_fn(llmkv_log_level level, const char *message, void *user_data) {
    log_ctx_t *c = (log_ctx_t *)user_data;
    size_t len = message ? strlen(message) : 0;
    ++c->n_messages;
    if (level > c->max_level) c->too_verbose = 1;
    if (!message || len == 0 || message[len - 1] == '\n') c->bad_message = 1;
}

/* llmkv_log_set: messages reach the callback with its user_data, no trailing newline, no
 * level above the one asked for. */
static void test_log_callback(void **state) {
    log_ctx_t c;
    llmkv_engine *e;
    llmkv_engine_params p;
    (void)state;
    CAPI_REQUIRE_MODEL();
    memset(&c, 0, sizeof(c));
    c.max_level = LLMKV_LOG_DEBUG;
    llmkv_log_set(log_fn, &c, LLMKV_LOG_DEBUG);
    e = capi_engine_create();
    llmkv_engine_destroy(e);
    /* a warning: max_context above the model's trained context */
    capi_engine_params(&p);
    p.max_context = 0x7fffffffu;
    e = NULL;
    if (llmkv_engine_create(&p, &e) == LLMKV_OK) llmkv_engine_destroy(e);
    assert_true(c.n_messages > 0);
    assert_false(c.too_verbose);
    assert_false(c.bad_message);

    memset(&c, 0, sizeof(c));
    c.max_level = LLMKV_LOG_ERROR;
    llmkv_log_set(log_fn, &c, LLMKV_LOG_ERROR);
    e = capi_engine_create();
    llmkv_engine_destroy(e);
    assert_false(c.too_verbose);
    assert_false(c.bad_message);
    llmkv_log_set(NULL, NULL, LLMKV_LOG_WARN);
}

static void test_engine_create_bad_values(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    (void)state;
    CAPI_REQUIRE_MODEL();

    capi_engine_params(&p);
    p.kv_dtype_k = (llmkv_kv_dtype)99;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "kv_dtype_k");
    assert_null(e);

    capi_engine_params(&p);
    p.kv_dtype_v = (llmkv_kv_dtype)99;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "kv_dtype_v");
    assert_null(e);

    capi_engine_params(&p);
    p.backend = (llmkv_backend)99;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "backend");
    assert_null(e);

    capi_engine_params(&p);
    p.flags = 0x80000000u;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "flags");
    assert_null(e);

    capi_engine_params(&p);
    p.n_devices = 1;
    p.devices = NULL;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "devices");
    assert_null(e);
}

/* The header: AUTO picks CUDA when available, else CPU; a backend not available is
 * UNSUPPORTED. So when AUTO gives CPU, asking for CUDA must be UNSUPPORTED. */
static void test_engine_create_cuda_backend(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    llmkv_engine_info info;
    llmkv_status st;
    (void)state;
    CAPI_REQUIRE_MODEL();
    capi_engine_params(&p);
    p.backend = LLMKV_BACKEND_AUTO;
    capi_assert_ok(llmkv_engine_create(&p, &e));
    info = capi_engine_info(e);
    llmkv_engine_destroy(e);
    e = NULL;

    capi_engine_params(&p);
    p.backend = LLMKV_BACKEND_CUDA;
    st = llmkv_engine_create(&p, &e);
    if (info.backend == LLMKV_BACKEND_CPU) {
        const char *msg;
        capi_assert_error(st, LLMKV_ERR_UNSUPPORTED, NULL);
        msg = llmkv_last_error();
        assert_true(strstr(msg, "CUDA") != NULL || strstr(msg, "cuda") != NULL);
        assert_null(e);
    } else {
        capi_assert_ok(st);
        info = capi_engine_info(e);
        assert_int_equal(info.backend, LLMKV_BACKEND_CUDA);
        llmkv_engine_destroy(e);
    }
}

static void test_null_out_pointers(void **state) {
    llmkv_engine *e;
    llmkv_session *s = NULL;
    llmkv_session *s2 = (llmkv_session *)0;
    llmkv_session_params sp;
    llmkv_chat_message msg = {"user", "hi"};
    llmkv_chat_message bad_msg = {NULL, "hi"};
    llmkv_event ev[2];
    int32_t toks[8];
    char buf[64];
    size_t n;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 4);

    /* session_create */
    llmkv_session_params_init(&sp);
    capi_assert_error(llmkv_session_create(e, NULL, &s2), LLMKV_ERR_INVALID_ARGUMENT, "params");
    assert_null(s2);
    capi_assert_error(llmkv_session_create(e, &sp, NULL), LLMKV_ERR_INVALID_ARGUMENT, "out");

    /* get_info / get_stats / session_get_info */
    capi_assert_error(llmkv_engine_get_info(e, NULL), LLMKV_ERR_INVALID_ARGUMENT, "out");
    capi_assert_error(llmkv_engine_get_stats(e, NULL), LLMKV_ERR_INVALID_ARGUMENT, "out");
    capi_assert_error(llmkv_session_get_info(s, NULL), LLMKV_ERR_INVALID_ARGUMENT, "out");

    /* tokenize */
    capi_assert_error(llmkv_tokenize(e, "hi", 2, 0, toks, 8, NULL), LLMKV_ERR_INVALID_ARGUMENT,
                      "n_tokens");
    capi_assert_error(llmkv_tokenize(e, NULL, 2, 0, toks, 8, &n), LLMKV_ERR_INVALID_ARGUMENT,
                      "text");
    capi_assert_error(llmkv_tokenize(e, "hi", 2, 0, NULL, 8, &n), LLMKV_ERR_INVALID_ARGUMENT,
                      "tokens");
    capi_assert_error(llmkv_tokenize(e, "hi", 2, 0x100u, toks, 8, &n), LLMKV_ERR_INVALID_ARGUMENT,
                      "flags");
    /* NULL text with len 0 is an empty text */
    n = 99;
    capi_assert_ok(llmkv_tokenize(e, NULL, 0, 0, NULL, 0, &n));
    assert_int_equal(n, 0);

    /* detokenize */
    toks[0] = 100;
    capi_assert_error(llmkv_detokenize(e, toks, 1, buf, sizeof(buf), NULL),
                      LLMKV_ERR_INVALID_ARGUMENT, "n_bytes");
    capi_assert_error(llmkv_detokenize(e, NULL, 1, buf, sizeof(buf), &n),
                      LLMKV_ERR_INVALID_ARGUMENT, "tokens");
    capi_assert_error(llmkv_detokenize(e, toks, 1, NULL, 8, &n), LLMKV_ERR_INVALID_ARGUMENT, "buf");
    n = 99;
    capi_assert_ok(llmkv_detokenize(e, NULL, 0, NULL, 0, &n));
    assert_int_equal(n, 0);

    /* chat_format */
    capi_assert_error(llmkv_chat_format(e, &msg, 1, 1, buf, sizeof(buf), NULL),
                      LLMKV_ERR_INVALID_ARGUMENT, "n_bytes");
    capi_assert_error(llmkv_chat_format(e, NULL, 1, 1, buf, sizeof(buf), &n),
                      LLMKV_ERR_INVALID_ARGUMENT, "msgs");
    capi_assert_error(llmkv_chat_format(e, &msg, 1, 1, NULL, 8, &n), LLMKV_ERR_INVALID_ARGUMENT,
                      "buf");
    capi_assert_error(llmkv_chat_format(e, &bad_msg, 1, 1, buf, sizeof(buf), &n),
                      LLMKV_ERR_INVALID_ARGUMENT, "role");

    /* step */
    capi_assert_error(llmkv_step(e, ev, 2, NULL), LLMKV_ERR_INVALID_ARGUMENT, "n_events");
    capi_assert_error(llmkv_step(e, NULL, 2, &n), LLMKV_ERR_INVALID_ARGUMENT, "events");

    /* read_text / get_tokens */
    capi_assert_error(llmkv_session_read_text(s, buf, sizeof(buf), NULL),
                      LLMKV_ERR_INVALID_ARGUMENT, "n_bytes");
    capi_assert_error(llmkv_session_read_text(s, NULL, 8, &n), LLMKV_ERR_INVALID_ARGUMENT, "buf");
    capi_assert_error(llmkv_session_get_tokens(s, toks, 8, NULL), LLMKV_ERR_INVALID_ARGUMENT,
                      "n_tokens");
    capi_assert_error(llmkv_session_get_tokens(s, NULL, 8, &n), LLMKV_ERR_INVALID_ARGUMENT,
                      "tokens");
    n = 99;
    capi_assert_ok(llmkv_session_get_tokens(s, NULL, 0, &n));
    assert_int_equal(n, 0);

    /* append */
    capi_assert_error(llmkv_session_append(s, NULL, 3), LLMKV_ERR_INVALID_ARGUMENT, "tokens");
    capi_assert_error(llmkv_session_append_text(s, NULL, 3), LLMKV_ERR_INVALID_ARGUMENT, "text");
    assert_int_equal(capi_session_info(s).n_tokens, 0);

    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_session_params_struct_size(void **state) {
    const uint32_t sizes[] = {0, 4, (uint32_t)sizeof(llmkv_session_params) - 4,
                              (uint32_t)sizeof(llmkv_session_params) + 4, UINT32_MAX};
    llmkv_engine *e;
    size_t i;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        llmkv_session_params sp;
        llmkv_session *s = NULL;
        llmkv_session_params_init(&sp);
        sp.struct_size = sizes[i];
        capi_assert_error(llmkv_session_create(e, &sp, &s), LLMKV_ERR_INVALID_ARGUMENT,
                          "struct_size");
        assert_null(s);
    }
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Query structs: struct_size is set by the caller to sizeof(the struct). Sizes that no
 * version of the struct can have (0, smaller than two fields, larger than the struct) are
 * INVALID_ARGUMENT, and the library never writes past the size the caller gave. */
#define QUERY_BUF 512
static void check_query_sizes(const char *what, size_t full,
                              llmkv_status (*call)(const void *h, void *out), const void *handle) {
    const uint32_t bad[] = {0, 4, (uint32_t)full + 4, (uint32_t)full + 8, UINT32_MAX};
    unsigned char buf[QUERY_BUF];
    uint32_t sz;
    size_t i, k;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        memset(buf, 0xCD, sizeof(buf));
        sz = bad[i];
        memcpy(buf, &sz, sizeof(sz));
        capi_assert_error(call(handle, buf), LLMKV_ERR_INVALID_ARGUMENT, "struct_size");
        /* nothing written */
        for (k = sizeof(sz); k < sizeof(buf); ++k) assert_int_equal(buf[k], 0xCD);
    }
    /* the full size works and keeps struct_size */
    memset(buf, 0xCD, sizeof(buf));
    sz = (uint32_t)full;
    memcpy(buf, &sz, sizeof(sz));
    capi_assert_ok(call(handle, buf));
    memcpy(&sz, buf, sizeof(sz));
    assert_int_equal(sz, full);
    for (k = full; k < sizeof(buf); ++k) assert_int_equal(buf[k], 0xCD);
    /* sizeof - 4: either refused, or filled without writing past it */
    memset(buf, 0xCD, sizeof(buf));
    sz = (uint32_t)full - 4;
    memcpy(buf, &sz, sizeof(sz));
    {
        llmkv_status st = call(handle, buf);
        print_message("%s: struct_size sizeof-4 (%u) -> %s\n", what, sz, llmkv_status_string(st));
        assert_true(st == LLMKV_OK || st == LLMKV_ERR_INVALID_ARGUMENT);
        memcpy(&sz, buf, sizeof(sz));
        assert_int_equal(sz, full - 4);
        for (k = full - 4; k < sizeof(buf); ++k) assert_int_equal(buf[k], 0xCD);
    }
}

static llmkv_status call_engine_info(const void *h, void *out) {
    return llmkv_engine_get_info((const llmkv_engine *)h, (llmkv_engine_info *)out);
}
static llmkv_status call_stats(const void *h, void *out) {
    return llmkv_engine_get_stats((const llmkv_engine *)h, (llmkv_stats *)out);
}
static llmkv_status call_session_info(const void *h, void *out) {
    return llmkv_session_get_info((const llmkv_session *)h, (llmkv_session_info *)out);
}

static void test_query_struct_size(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);
    check_query_sizes("engine_info", sizeof(llmkv_engine_info), call_engine_info, e);
    check_query_sizes("stats", sizeof(llmkv_stats), call_stats, e);
    check_query_sizes("session_info", sizeof(llmkv_session_info), call_session_info, s);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* A struct_size that ends inside a field cannot be the size of any version of the struct
 * (fields are only ever appended), so it is a size the library does not know. */
static int expect_rejected_size(const char *what, uint32_t size, llmkv_status st) {
    if (st == LLMKV_ERR_INVALID_ARGUMENT && strstr(llmkv_last_error(), "struct_size")) return 0;
    print_error(
        "%s with struct_size %u (ends inside a field): %s, expected LLMKV_ERR_INVALID_ARGUMENT\n",
        what, size, llmkv_status_string(st));
    return 1;
}

static void test_query_struct_size_mid_field(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_stats st;
    llmkv_session_info si;
    llmkv_engine_info ei;
    int failures = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);

    /* sizeof(llmkv_stats) - 4: half of `steps` */
    memset(&st, 0, sizeof(st));
    st.struct_size = (uint32_t)(offsetof(llmkv_stats, steps) + 4);
    failures += expect_rejected_size("llmkv_engine_get_stats", st.struct_size,
                                     llmkv_engine_get_stats(e, &st));

    memset(&si, 0, sizeof(si));
    si.struct_size = (uint32_t)offsetof(llmkv_session_info, finish_reason) + 2;
    failures += expect_rejected_size("llmkv_session_get_info", si.struct_size,
                                     llmkv_session_get_info(s, &si));

    memset(&ei, 0, sizeof(ei));
    ei.struct_size = (uint32_t)offsetof(llmkv_engine_info, model_name) + 5;
    failures += expect_rejected_size("llmkv_engine_get_info", ei.struct_size,
                                     llmkv_engine_get_info(e, &ei));

    llmkv_session_destroy(s);
    llmkv_engine_destroy(e);
    assert_int_equal(failures, 0);
}

static void test_tokenize_capacity(void **state) {
    static const char text[] = "Hello, world! This sentence has a few more tokens than one.";
    llmkv_engine *e;
    int32_t toks[64];
    int32_t again[64];
    size_t need = 0, n = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();

    /* capacity 0 with NULL tokens: the required count */
    capi_assert_error(llmkv_tokenize(e, text, strlen(text), 0, NULL, 0, &need),
                      LLMKV_ERR_INVALID_ARGUMENT, "capacity");
    assert_true(need > 3 && need < 64);

    /* capacity one short: INVALID_ARGUMENT with the required count */
    memset(toks, 0x7f, sizeof(toks));
    n = 0;
    capi_assert_error(llmkv_tokenize(e, text, strlen(text), 0, toks, need - 1, &n),
                      LLMKV_ERR_INVALID_ARGUMENT, "capacity");
    assert_int_equal(n, need);

    /* exactly the required capacity succeeds */
    n = 0;
    capi_assert_ok(llmkv_tokenize(e, text, strlen(text), 0, toks, need, &n));
    assert_int_equal(n, need);
    /* and a larger one gives the same tokens */
    capi_assert_ok(llmkv_tokenize(e, text, strlen(text), 0, again, 64, &n));
    assert_int_equal(n, need);
    assert_memory_equal(toks, again, need * sizeof(int32_t));
    llmkv_engine_destroy(e);
}

static void test_tokenize_detokenize_round_trip(void **state) {
    static const char *texts[] = {"Hello, world!", "  two  spaces and\ttabs\nnewline",
                                  "caf\xc3\xa9 na\xc3\xafve \xe2\x82\xac 10 \xf0\x9f\x98\x80", "",
                                  /* invalid UTF-8 is encoded byte by byte (bytes that
                                   * SmolLM2's vocabulary has, unlike 0xFF) */
                                  "bad \xc3( bytes \xe2\x82 end \x80"};
    llmkv_engine *e;
    size_t t;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    for (t = 0; t < sizeof(texts) / sizeof(texts[0]); ++t) {
        int32_t toks[128];
        char buf[256];
        size_t n = 0, nb = 0, need = 0;
        const char *text = texts[t];
        capi_assert_ok(llmkv_tokenize(e, text, strlen(text), 0, toks, 128, &n));
        if (strlen(text) > 0) assert_true(n > 0);
        capi_assert_ok(llmkv_detokenize(e, toks, n, buf, sizeof(buf), &nb));
        assert_int_equal(nb, strlen(text));
        assert_memory_equal(buf, text, nb);
        if (nb > 0) {
            /* capacity too small: the required size */
            capi_assert_error(llmkv_detokenize(e, toks, n, buf, nb - 1, &need),
                              LLMKV_ERR_INVALID_ARGUMENT, "capacity");
            assert_int_equal(need, nb);
            capi_assert_ok(llmkv_detokenize(e, toks, n, buf, nb, &need));
            assert_int_equal(need, nb);
        }
    }
    llmkv_engine_destroy(e);
}

static void test_detokenize_out_of_range(void **state) {
    llmkv_engine *e;
    llmkv_engine_info info;
    int32_t bad[3];
    char buf[64];
    char num[32];
    size_t i, n;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    info = capi_engine_info(e);
    bad[0] = (int32_t)info.n_vocab;
    bad[1] = -1;
    bad[2] = INT32_MAX;
    for (i = 0; i < 3; ++i) {
        int32_t toks[3] = {100, 0, 200};
        toks[1] = bad[i];
        n = 0;
        capi_assert_error(llmkv_detokenize(e, toks, 3, buf, sizeof(buf), &n),
                          LLMKV_ERR_INVALID_ARGUMENT, NULL);
        snprintf(num, sizeof(num), "%d", (int)bad[i]);
        if (!strstr(llmkv_last_error(), num)) {
            print_error("last_error \"%s\" does not name the token %s\n", llmkv_last_error(), num);
            fail();
        }
    }
    /* the last valid id is fine */
    bad[0] = (int32_t)info.n_vocab - 1;
    capi_assert_ok(llmkv_detokenize(e, bad, 1, buf, sizeof(buf), &n));
    llmkv_engine_destroy(e);
}

static void test_chat_format(void **state) {
    llmkv_engine *e;
    llmkv_chat_message msgs[2] = {{"user", "What is 2+2?"}, {"assistant", "4"}};
    char buf[2048];
    char small[16];
    size_t n = 0, need = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();

    memset(buf, 'x', sizeof(buf));
    capi_assert_ok(llmkv_chat_format(e, msgs, 1, 1, buf, sizeof(buf), &n));
    assert_true(n > 0 && n < sizeof(buf));
    assert_int_equal(buf[n], '\0'); /* NUL-terminated when capacity allows, not counted */
    assert_int_equal(strlen(buf), n);
    assert_non_null(strstr(buf, "<|im_start|>user\nWhat is 2+2?<|im_end|>"));
    /* the generation prompt comes last */
    {
        static const char gen[] = "<|im_start|>assistant\n";
        assert_true(n >= strlen(gen));
        assert_string_equal(buf + n - strlen(gen), gen);
    }

    /* without the generation prompt */
    capi_assert_ok(llmkv_chat_format(e, msgs, 2, 0, buf, sizeof(buf), &n));
    assert_non_null(strstr(buf, "<|im_start|>user\nWhat is 2+2?<|im_end|>"));
    assert_non_null(strstr(buf, "<|im_start|>assistant\n4<|im_end|>"));
    assert_true(strstr(buf, "<|im_start|>user") < strstr(buf, "<|im_start|>assistant"));

    /* capacity too small: the required size */
    capi_assert_ok(llmkv_chat_format(e, msgs, 1, 1, buf, sizeof(buf), &n));
    capi_assert_error(llmkv_chat_format(e, msgs, 1, 1, small, sizeof(small), &need),
                      LLMKV_ERR_INVALID_ARGUMENT, "capacity");
    assert_int_equal(need, n);
    capi_assert_error(llmkv_chat_format(e, msgs, 1, 1, NULL, 0, &need), LLMKV_ERR_INVALID_ARGUMENT,
                      NULL);
    assert_int_equal(need, n);

    /* capacity exactly n: the text, no NUL written after it */
    memset(buf, 'x', sizeof(buf));
    capi_assert_ok(llmkv_chat_format(e, msgs, 1, 1, buf, n, &need));
    assert_int_equal(need, n);
    assert_int_equal(buf[n], 'x');

    /* the formatted prompt tokenizes to the special tokens */
    {
        int32_t toks[256];
        size_t nt = 0;
        int32_t im_start = -1;
        size_t k;
        char text[64];
        size_t nb = 0;
        capi_assert_ok(
            llmkv_tokenize(e, "<|im_start|>", 12, LLMKV_TOKENIZE_PARSE_SPECIAL, toks, 256, &nt));
        assert_int_equal(nt, 1);
        im_start = toks[0];
        /* special tokens detokenize to their text */
        capi_assert_ok(llmkv_detokenize(e, &im_start, 1, text, sizeof(text), &nb));
        assert_int_equal(nb, 12);
        assert_memory_equal(text, "<|im_start|>", 12);
        /* without PARSE_SPECIAL the text is plain text */
        capi_assert_ok(llmkv_tokenize(e, "<|im_start|>", 12, 0, toks, 256, &nt));
        assert_true(nt > 1);
        for (k = 0; k < nt; ++k) assert_int_not_equal(toks[k], im_start);
        capi_assert_ok(llmkv_detokenize(e, toks, nt, text, sizeof(text), &nb));
        assert_int_equal(nb, 12);
        assert_memory_equal(text, "<|im_start|>", 12);
        capi_assert_ok(llmkv_chat_format(e, msgs, 1, 1, buf, sizeof(buf), &n));
        capi_assert_ok(llmkv_tokenize(e, buf, n, LLMKV_TOKENIZE_PARSE_SPECIAL, toks, 256, &nt));
        for (k = 0; k < nt && toks[k] != im_start; ++k) {
        }
        assert_true(k < nt);
    }
    llmkv_engine_destroy(e);
}

static void expect_bad_sampling(llmkv_engine *e, llmkv_session_params *sp, const char *field) {
    llmkv_session *s = NULL;
    capi_assert_error(llmkv_session_create(e, sp, &s), LLMKV_ERR_INVALID_ARGUMENT, field);
    assert_null(s);
}

static void test_session_create_bad_values(void **state) {
    llmkv_engine *e;
    llmkv_engine_info info;
    llmkv_session_params sp;
    int32_t stops[2];
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    info = capi_engine_info(e);

    llmkv_session_params_init(&sp);
    sp.sampling.temperature = -0.5f;
    expect_bad_sampling(e, &sp, "temperature");
    llmkv_session_params_init(&sp);
    sp.sampling.temperature = (float)NAN;
    expect_bad_sampling(e, &sp, "temperature");
    llmkv_session_params_init(&sp);
    sp.sampling.top_p = 0.0f;
    expect_bad_sampling(e, &sp, "top_p");
    llmkv_session_params_init(&sp);
    sp.sampling.top_p = 1.5f;
    expect_bad_sampling(e, &sp, "top_p");
    llmkv_session_params_init(&sp);
    sp.sampling.top_p = -0.1f;
    expect_bad_sampling(e, &sp, "top_p");

    /* stop tokens outside the vocabulary */
    llmkv_session_params_init(&sp);
    stops[0] = 10;
    stops[1] = (int32_t)info.n_vocab;
    sp.stop_tokens = stops;
    sp.n_stop_tokens = 2;
    expect_bad_sampling(e, &sp, "stop_tokens");
    stops[1] = -1;
    expect_bad_sampling(e, &sp, "stop_tokens");
    /* NULL stop_tokens with a count */
    sp.stop_tokens = NULL;
    sp.n_stop_tokens = 1;
    expect_bad_sampling(e, &sp, "stop_tokens");

    /* good values are accepted: edges of the ranges */
    {
        llmkv_session *s = NULL;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = 0.7f;
        sp.sampling.top_p = 1.0f;
        sp.sampling.top_k = 40;
        stops[0] = 0;
        stops[1] = (int32_t)info.n_vocab - 1;
        sp.stop_tokens = stops;
        sp.n_stop_tokens = 2;
        capi_assert_ok(llmkv_session_create(e, &sp, &s));
        llmkv_session_destroy(s);
    }
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_append_out_of_vocab(void **state) {
    llmkv_engine *e;
    llmkv_engine_info info;
    llmkv_session *s;
    int32_t good[3] = {100, 200, 300};
    int32_t bad[3] = {100, 0, 300};
    size_t n_before;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    info = capi_engine_info(e);
    s = capi_session_create(e, NULL, 0);

    capi_assert_ok(llmkv_session_append(s, good, 3));
    n_before = capi_session_info(s).n_tokens;
    assert_int_equal(n_before, 3);

    bad[1] = (int32_t)info.n_vocab;
    capi_assert_error(llmkv_session_append(s, bad, 3), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    assert_int_equal(capi_session_info(s).n_tokens, n_before);
    bad[1] = -5;
    capi_assert_error(llmkv_session_append(s, bad, 3), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    assert_int_equal(capi_session_info(s).n_tokens, n_before);
    bad[0] = INT32_MIN;
    capi_assert_error(llmkv_session_append(s, bad, 1), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    assert_int_equal(capi_session_info(s).n_tokens, n_before);
    {
        int32_t toks[8];
        size_t n = capi_session_tokens(s, toks, 8);
        assert_int_equal(n, 3);
        assert_memory_equal(toks, good, sizeof(good));
    }
    {
        /* a capacity below the count copies a prefix and reports the total */
        int32_t two[2] = {-1, -1};
        size_t n = 0;
        capi_assert_ok(llmkv_session_get_tokens(s, two, 2, &n));
        assert_int_equal(n, 3);
        assert_memory_equal(two, good, sizeof(two));
    }
    /* appending zero tokens is fine and changes nothing */
    capi_assert_ok(llmkv_session_append(s, good, 0));
    assert_int_equal(capi_session_info(s).n_tokens, n_before);

    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_params_init_defaults),
        cmocka_unit_test(test_destroy_null),
        cmocka_unit_test(test_engine_create_null),
        cmocka_unit_test(test_engine_params_struct_size),
        cmocka_unit_test(test_engine_create_nonexistent),
        cmocka_unit_test(test_engine_create_directory),
        cmocka_unit_test(test_engine_create_not_gguf),
        cmocka_unit_test(test_null_handles),
        cmocka_unit_test(test_engine_info),
        cmocka_unit_test(test_engine_create_cuda_backend),
        cmocka_unit_test(test_null_out_pointers),
        cmocka_unit_test(test_session_params_struct_size),
        cmocka_unit_test(test_query_struct_size),
        cmocka_unit_test(test_query_struct_size_mid_field),
        cmocka_unit_test(test_tokenize_capacity),
        cmocka_unit_test(test_tokenize_detokenize_round_trip),
        cmocka_unit_test(test_detokenize_out_of_range),
        cmocka_unit_test(test_chat_format),
        cmocka_unit_test(test_session_create_bad_values),
        cmocka_unit_test(test_append_out_of_vocab),
        cmocka_unit_test(test_log_callback),
        /* last: values outside a C enum's enumerators are legal C; a library that loads them
         * as a C++ enum trips UBSan, which ends the program */
        cmocka_unit_test(test_engine_create_bad_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
