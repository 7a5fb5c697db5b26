/*
 * api_worker.c - the engine's worker thread (game-loop mode, C API 0.4): submitted requests
 * and polled events give exactly the tokens and text of llmkv_step; errors of submitted
 * requests arrive as ERROR events with their message; state rules (step while the worker
 * runs, double start, stop with events queued); spin_us / thread_priority parameters and
 * the 0.3 engine_params size.
 */
#define _GNU_SOURCE

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "capi_common.h"

#define N_SESSIONS 3
#define N_NEW 12
#define MAX_OUT 64

static const char *const k_prompts[N_SESSIONS] = {
    "The capital of France is",
    "Once upon a time, in a small village,",
    "List three colors:",
};

typedef struct {
    int32_t tokens[MAX_OUT];
    size_t n_tokens;
    char text[1024];
    size_t n_text;
    int done;
    uint32_t finish;
} output_t;

static void read_all_text(llmkv_session *s, output_t *o) {
    for (;;) {
        size_t n = 0;
        capi_assert_ok(
            llmkv_session_read_text(s, o->text + o->n_text, sizeof(o->text) - 1 - o->n_text, &n));
        if (n == 0) break;
        o->n_text += n;
    }
    o->text[o->n_text] = '\0';
}

static int index_of(llmkv_session **s, size_t n, llmkv_session *x) {
    size_t i;
    for (i = 0; i < n; ++i) {
        if (s[i] == x) return (int)i;
    }
    return -1;
}

static void record(llmkv_session **s, output_t *out, const llmkv_event *ev) {
    int i = index_of(s, N_SESSIONS, ev->session);
    assert_true(i >= 0);
    if (ev->kind == LLMKV_EVENT_TOKEN) {
        assert_true(out[i].n_tokens < MAX_OUT);
        out[i].tokens[out[i].n_tokens++] = ev->token;
    } else if (ev->kind == LLMKV_EVENT_DONE) {
        out[i].done = 1;
        out[i].finish = ev->finish_reason;
    } else {
        print_error("unexpected event kind %u status %d\n", ev->kind, ev->status);
        fail();
    }
}

/* The reference: append + generate, llmkv_step until every session is done. */
static void run_with_step(output_t *out) {
    llmkv_engine *e = capi_engine_create();
    llmkv_session *s[N_SESSIONS];
    llmkv_event ev[16];
    int i, guard = 0;
    memset(out, 0, sizeof(output_t) * N_SESSIONS);
    for (i = 0; i < N_SESSIONS; ++i) {
        s[i] = capi_session_create(e, NULL, N_NEW);
        capi_append_text(s[i], k_prompts[i]);
        capi_assert_ok(llmkv_session_generate(s[i], 0));
    }
    while (llmkv_engine_has_work(e) || llmkv_pending_events(e) > 0) {
        size_t n = 0, k;
        capi_assert_ok(llmkv_step(e, ev, 16, &n));
        for (k = 0; k < n; ++k) record(s, out, &ev[k]);
        assert_true(++guard < 1000);
    }
    for (i = 0; i < N_SESSIONS; ++i) {
        read_all_text(s[i], &out[i]);
        assert_true(out[i].done);
    }
    llmkv_engine_destroy(e);
}

/* Polls (100 ms timeouts) until every session is done, reading text after each poll. */
static void poll_until_done(llmkv_engine *e, llmkv_session **s, output_t *out) {
    llmkv_event ev[16];
    int guard = 0;
    for (;;) {
        size_t n = 0, k;
        int all = 1, i;
        capi_assert_ok(llmkv_worker_poll(e, ev, 16, 100000, &n));
        for (k = 0; k < n; ++k) record(s, out, &ev[k]);
        for (i = 0; i < N_SESSIONS; ++i) {
            read_all_text(s[i], &out[i]);
            all = all && out[i].done;
        }
        if (all) break;
        assert_true(++guard < 2000);
    }
}

static void assert_same_outputs(const output_t *a, const output_t *b) {
    int i;
    for (i = 0; i < N_SESSIONS; ++i) {
        assert_int_equal(a[i].n_tokens, b[i].n_tokens);
        assert_memory_equal(a[i].tokens, b[i].tokens, a[i].n_tokens * sizeof(int32_t));
        assert_int_equal(a[i].finish, b[i].finish);
        assert_string_equal(a[i].text, b[i].text);
        assert_true(a[i].n_text > 0);
    }
}

static void test_worker_matches_step(void **state) {
    output_t ref[N_SESSIONS], got[N_SESSIONS];
    llmkv_engine *e;
    llmkv_session *s[N_SESSIONS];
    int i;
    (void)state;
    CAPI_REQUIRE_MODEL();
    run_with_step(ref);

    e = capi_engine_create();
    memset(got, 0, sizeof(got));
    for (i = 0; i < N_SESSIONS; ++i) s[i] = capi_session_create(e, NULL, N_NEW);
    capi_assert_ok(llmkv_worker_start(e));
    for (i = 0; i < N_SESSIONS; ++i) {
        capi_assert_ok(llmkv_session_submit_text(s[i], k_prompts[i], strlen(k_prompts[i]),
                                                 LLMKV_SUBMIT_GENERATE, 0));
    }
    poll_until_done(e, s, got);
    assert_same_outputs(ref, got);

    /* A second turn on session 0 through submitted tokens continues the context. */
    {
        llmkv_session_info info = capi_session_info(s[0]);
        assert_int_equal(info.state, LLMKV_SESSION_FINISHED);
    }
    capi_assert_ok(llmkv_worker_stop(e));
    capi_assert_ok(llmkv_worker_stop(e)); /* stopping a stopped worker does nothing */
    for (i = 0; i < N_SESSIONS; ++i) llmkv_session_destroy(s[i]);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Submissions without a worker are carried out by llmkv_step. */
static void test_submit_without_worker(void **state) {
    output_t ref[N_SESSIONS], got[N_SESSIONS];
    llmkv_engine *e;
    llmkv_session *s[N_SESSIONS];
    llmkv_event ev[16];
    int i, guard = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    run_with_step(ref);
    e = capi_engine_create();
    memset(got, 0, sizeof(got));
    for (i = 0; i < N_SESSIONS; ++i) {
        s[i] = capi_session_create(e, NULL, N_NEW);
        capi_assert_ok(llmkv_session_submit_text(s[i], k_prompts[i], strlen(k_prompts[i]),
                                                 LLMKV_SUBMIT_GENERATE, 0));
    }
    assert_int_equal(llmkv_engine_has_work(e), 1);
    while (llmkv_engine_has_work(e) || llmkv_pending_events(e) > 0) {
        size_t n = 0, k;
        capi_assert_ok(llmkv_step(e, ev, 16, &n));
        for (k = 0; k < n; ++k) record(s, got, &ev[k]);
        assert_true(++guard < 1000);
    }
    for (i = 0; i < N_SESSIONS; ++i) read_all_text(s[i], &got[i]);
    assert_same_outputs(ref, got);
    llmkv_engine_destroy(e);
}

static void test_worker_state_rules(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev[4];
    size_t n = 99;
    int guard = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    capi_assert_error(llmkv_worker_start(NULL), LLMKV_ERR_INVALID_ARGUMENT, "engine");
    capi_assert_ok(llmkv_worker_start(e));
    capi_assert_error(llmkv_worker_start(e), LLMKV_ERR_STATE, "already running");
    capi_assert_error(llmkv_step(e, ev, 4, &n), LLMKV_ERR_STATE, "llmkv_worker_poll");
    assert_int_equal(n, 0);
    capi_assert_error(llmkv_run(e, NULL, NULL), LLMKV_ERR_STATE, "worker");
    capi_assert_error(llmkv_worker_poll(e, NULL, 4, 0, &n), LLMKV_ERR_INVALID_ARGUMENT, "events");
    capi_assert_error(llmkv_worker_poll(e, ev, 4, 0, NULL), LLMKV_ERR_INVALID_ARGUMENT, "n_events");
    capi_assert_ok(llmkv_worker_poll(e, ev, 4, 0, &n)); /* nothing to do: no events, no wait */
    assert_int_equal(n, 0);

    /* Events the worker queued and nobody polled stay for llmkv_step after a stop. */
    s = capi_session_create(e, NULL, 4);
    capi_assert_ok(llmkv_session_submit_text(s, "Hello", 5, LLMKV_SUBMIT_GENERATE, 0));
    while (llmkv_engine_has_work(e)) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        assert_true(++guard < 20000);
    }
    capi_assert_ok(llmkv_worker_stop(e));
    assert_int_equal(llmkv_pending_events(e), 5); /* 4 TOKEN + DONE */
    capi_assert_ok(llmkv_step(e, ev, 4, &n));
    assert_int_equal(n, 4);
    assert_int_equal(ev[0].kind, LLMKV_EVENT_TOKEN);
    capi_assert_ok(llmkv_worker_poll(e, ev, 4, 0, &n)); /* without the worker: the queued rest */
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].kind, LLMKV_EVENT_DONE);
    assert_int_equal(ev[0].finish_reason, LLMKV_FINISH_LENGTH);

    /* Destroying a session while the worker runs drops its queued events. */
    capi_assert_ok(llmkv_worker_start(e));
    capi_assert_ok(llmkv_session_submit_text(s, " again", 6, LLMKV_SUBMIT_GENERATE, 0));
    guard = 0;
    while (llmkv_engine_has_work(e)) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        assert_true(++guard < 20000);
    }
    assert_true(llmkv_pending_events(e) > 0);
    llmkv_session_destroy(s);
    assert_int_equal(llmkv_pending_events(e), 0);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e); /* with the worker running */
}

/* Polls until an ERROR event of s arrives (and nothing else). */
static llmkv_event wait_error(llmkv_engine *e, llmkv_session *s) {
    llmkv_event ev;
    int guard = 0;
    for (;;) {
        size_t n = 0;
        capi_assert_ok(llmkv_worker_poll(e, &ev, 1, 100000, &n));
        if (n == 1) {
            assert_ptr_equal(ev.session, s);
            assert_int_equal(ev.kind, LLMKV_EVENT_ERROR);
            return ev;
        }
        assert_true(++guard < 200);
    }
}

static void test_submit_errors(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev;
    char msg[256], tiny[8];
    size_t n = 0;
    int32_t bad = 1000000;
    llmkv_session_info before, after;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, (void *)0x1234, 0);

    /* Refused at once. */
    capi_assert_error(llmkv_session_submit_text(NULL, "x", 1, 0, 0), LLMKV_ERR_INVALID_ARGUMENT,
                      "session");
    capi_assert_error(llmkv_session_submit_text(s, NULL, 3, 0, 0), LLMKV_ERR_INVALID_ARGUMENT,
                      "text");
    capi_assert_error(llmkv_session_submit_text(s, "x", 1, 0x80, 0), LLMKV_ERR_INVALID_ARGUMENT,
                      "unknown bits");
    capi_assert_error(llmkv_session_submit_tokens(s, NULL, 2, 0, 0), LLMKV_ERR_INVALID_ARGUMENT,
                      "tokens");
    capi_assert_error(llmkv_session_submit_cancel(NULL), LLMKV_ERR_INVALID_ARGUMENT, "session");
    capi_assert_error(llmkv_session_submit_error(s, NULL, 4, &n), LLMKV_ERR_INVALID_ARGUMENT,
                      "buf");
    capi_assert_ok(llmkv_session_submit_error(s, msg, sizeof msg, &n));
    assert_int_equal(n, 0);
    assert_string_equal(msg, "");

    capi_assert_ok(llmkv_worker_start(e));
    /* Nothing to continue from: STATE, as llmkv_session_generate. */
    capi_assert_ok(llmkv_session_submit_tokens(s, NULL, 0, LLMKV_SUBMIT_GENERATE, 0));
    ev = wait_error(e, s);
    assert_int_equal(ev.status, LLMKV_ERR_STATE);
    assert_ptr_equal(ev.user_data, (void *)0x1234);
    capi_assert_ok(llmkv_session_submit_error(s, msg, sizeof msg, &n));
    assert_non_null(strstr(msg, "no tokens"));

    /* A token outside the vocabulary: INVALID_ARGUMENT, and nothing appended. */
    capi_append_text(s, "Hello there");
    before = capi_session_info(s);
    capi_assert_ok(llmkv_session_submit_tokens(s, &bad, 1, LLMKV_SUBMIT_GENERATE, 0));
    ev = wait_error(e, s);
    assert_int_equal(ev.status, LLMKV_ERR_INVALID_ARGUMENT);
    capi_assert_ok(llmkv_session_submit_error(s, msg, sizeof msg, &n));
    assert_non_null(strstr(msg, "outside the vocabulary"));
    assert_int_equal(n, strlen(msg));
    after = capi_session_info(s);
    assert_int_equal(after.n_tokens, before.n_tokens);
    /* A small buffer: truncated, NUL-terminated, full length reported. */
    capi_assert_ok(llmkv_session_submit_error(s, tiny, sizeof tiny, &n));
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
    assert_int_equal(n, strlen(msg));

    /* Past max_context: KV_CAPACITY before anything is appended. */
    {
        static int32_t many[CAPI_MAX_CONTEXT];
        size_t k;
        for (k = 0; k < CAPI_MAX_CONTEXT; ++k) many[k] = 42;
        capi_assert_ok(llmkv_session_submit_tokens(s, many, CAPI_MAX_CONTEXT - before.n_tokens,
                                                   LLMKV_SUBMIT_GENERATE, 0));
        ev = wait_error(e, s);
        assert_int_equal(ev.status, LLMKV_ERR_KV_CAPACITY);
        after = capi_session_info(s);
        assert_int_equal(after.n_tokens, before.n_tokens);
    }
    /* A cancel with nothing to cancel is no error. */
    capi_assert_ok(llmkv_session_submit_cancel(s));
    capi_assert_ok(llmkv_worker_stop(e));
    capi_assert_ok(llmkv_worker_poll(e, &ev, 1, 0, &n));
    assert_int_equal(n, 0);
    llmkv_engine_destroy(e);
}

static void test_submit_cancel(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev[8];
    int tokens = 0, done = 0, cancelled = 0, guard = 0;
    llmkv_session_info info;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);
    capi_assert_ok(llmkv_worker_start(e));
    capi_assert_ok(llmkv_session_submit_text(s, "Count from one to one hundred:", 30,
                                             LLMKV_SUBMIT_GENERATE, 200));
    while (!done) {
        size_t n = 0, k;
        capi_assert_ok(llmkv_worker_poll(e, ev, 8, 100000, &n));
        for (k = 0; k < n; ++k) {
            if (ev[k].kind == LLMKV_EVENT_TOKEN) {
                ++tokens;
                if (!cancelled) {
                    capi_assert_ok(llmkv_session_submit_cancel(s));
                    cancelled = 1;
                }
            } else {
                assert_int_equal(ev[k].kind, LLMKV_EVENT_DONE);
                assert_int_equal(ev[k].finish_reason, LLMKV_FINISH_CANCELLED);
                done = 1;
            }
        }
        assert_true(++guard < 2000);
    }
    capi_assert_ok(llmkv_worker_stop(e));
    info = capi_session_info(s);
    assert_int_equal(info.finish_reason, LLMKV_FINISH_CANCELLED);
    assert_true(tokens >= 1 && tokens < 200);
    assert_int_equal(info.n_generated, (uint32_t)tokens);
    assert_int_equal(info.n_cached + 1, info.n_tokens); /* the KV of every token so far is kept */
    llmkv_engine_destroy(e);
}

#if defined(__linux__)
/* Nice value (field 19 of /proc/self/task/TID/stat) of every thread of this process. */
static int count_threads_with_nice(int nice_value) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *ent;
    int count = 0;
    if (!d) return -1;
    while ((ent = readdir(d)) != NULL) {
        char path[300], buf[1024];
        FILE *f;
        const char *p;
        int field = 2, nice = -100;
        size_t len;
        if (ent->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", ent->d_name);
        f = fopen(path, "r");
        if (!f) continue;
        len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        p = strrchr(buf, ')'); /* the command name may hold spaces */
        if (!p) continue;
        for (++p; *p; ++p) {
            if (*p == ' ') {
                ++field;
                if (field == 19) {
                    nice = atoi(p + 1);
                    break;
                }
            }
        }
        if (nice == nice_value) ++count;
    }
    closedir(d);
    return count;
}
#endif

/* The init functions never write past the caller's struct: the unsized ones (the entry points
 * of programs built against headers before 0.4; the parentheses call the function, not the
 * header's macro) fill the 0.3 engine struct and the session struct of 0.2-0.4; the sized ones
 * exactly the size given, capped at the library's struct. */
static void test_params_init_sizes(void **state) {
    unsigned char buf[512];
    size_t i;
    const size_t v3 = offsetof(llmkv_engine_params, spin_us);
    (void)state;
    memset(buf, 0xAB, sizeof buf);
    (llmkv_engine_params_init)((llmkv_engine_params *)(void *)buf);
    assert_int_equal(((llmkv_engine_params *)(void *)buf)->struct_size, v3);
    for (i = v3; i < sizeof buf; ++i) assert_int_equal(buf[i], 0xAB);

    memset(buf, 0xAB, sizeof buf);
    llmkv_engine_params_init_sized((llmkv_engine_params *)(void *)buf, sizeof buf);
    assert_int_equal(((llmkv_engine_params *)(void *)buf)->struct_size,
                     sizeof(llmkv_engine_params));
    assert_int_equal(((llmkv_engine_params *)(void *)buf)->spin_us, -1);
    for (i = sizeof(llmkv_engine_params); i < sizeof buf; ++i) assert_int_equal(buf[i], 0xAB);

    memset(buf, 0xAB, sizeof buf);
    llmkv_engine_params_init_sized((llmkv_engine_params *)(void *)buf, 40);
    assert_int_equal(((llmkv_engine_params *)(void *)buf)->struct_size, 40);
    for (i = 40; i < sizeof buf; ++i) assert_int_equal(buf[i], 0xAB);
    memset(buf, 0xAB, sizeof buf);
    llmkv_engine_params_init_sized((llmkv_engine_params *)(void *)buf, 3); /* too small: nothing */
    for (i = 0; i < sizeof buf; ++i) assert_int_equal(buf[i], 0xAB);
    llmkv_engine_params_init_sized(NULL, 100);

    memset(buf, 0xAB, sizeof buf);
    (llmkv_session_params_init)((llmkv_session_params *)(void *)buf);
    assert_int_equal(((llmkv_session_params *)(void *)buf)->struct_size,
                     sizeof(llmkv_session_params));
    for (i = sizeof(llmkv_session_params); i < sizeof buf; ++i) assert_int_equal(buf[i], 0xAB);
    memset(buf, 0xAB, sizeof buf);
    llmkv_session_params_init_sized((llmkv_session_params *)(void *)buf,
                                    offsetof(llmkv_session_params, stop_strings));
    assert_int_equal(((llmkv_session_params *)(void *)buf)->struct_size,
                     offsetof(llmkv_session_params, stop_strings));
    for (i = offsetof(llmkv_session_params, stop_strings); i < sizeof buf; ++i)
        assert_int_equal(buf[i], 0xAB);
}

static void test_engine_params_04(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    (void)state;
    CAPI_REQUIRE_MODEL();
    llmkv_engine_params_init(&p);
    assert_int_equal(p.struct_size, sizeof(llmkv_engine_params)); /* the macro: the sized init */
    assert_int_equal(p.spin_us, -1);
    assert_int_equal(p.thread_priority, 0);

    capi_engine_params(&p);
    p.spin_us = -2;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "spin_us");
    p.spin_us = 100001;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "spin_us");
    p.spin_us = 0;
    p.thread_priority = -1;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "thread_priority");
    p.thread_priority = 20;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "thread_priority");
    assert_null(e);

    /* The 0.3 size (ending at kv_rotation): accepted, with the new fields' defaults even if the
     * caller's memory past its struct holds garbage. */
    capi_engine_params(&p);
    p.struct_size = (uint32_t)offsetof(llmkv_engine_params, spin_us);
    p.spin_us = 12345678;
    p.thread_priority = 99;
    capi_assert_ok(llmkv_engine_create(&p, &e));
    llmkv_engine_destroy(e);
    e = NULL;
    p.struct_size = (uint32_t)offsetof(llmkv_engine_params, spin_us) + 4;
    capi_assert_error(llmkv_engine_create(&p, &e), LLMKV_ERR_INVALID_ARGUMENT, "struct_size");

#if defined(__linux__)
    /* thread_priority 7: the compute worker (2 threads = the caller + 1) and the worker thread
     * run 7 nice levels below this thread, which keeps its own priority. */
    capi_engine_params(&p);
    p.thread_priority = 7;
    p.spin_us = 0;
    assert_int_equal(count_threads_with_nice(7), 0);
    capi_assert_ok(llmkv_engine_create(&p, &e));
    assert_int_equal(count_threads_with_nice(7), 1);
    capi_assert_ok(llmkv_worker_start(e));
    {
        int guard = 0; /* the worker lowers its own priority first thing */
        while (count_threads_with_nice(7) < 2) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            assert_true(++guard < 5000);
        }
    }
    assert_int_equal(count_threads_with_nice(7), 2);
    assert_true(count_threads_with_nice(0) >= 1); /* this thread */
    llmkv_engine_destroy(e);
    assert_int_equal(count_threads_with_nice(7), 0);
#else
    /* The nice levels are read from /proc/self/task: Linux only. Elsewhere the priority is
     * only accepted (the Windows mapping is in src/platform/os_windows.cpp). */
    print_message("SKIP part: per-thread nice levels are observed through /proc (Linux)\n");
    capi_engine_params(&p);
    p.thread_priority = 7;
    capi_assert_ok(llmkv_engine_create(&p, &e));
    capi_assert_ok(llmkv_worker_start(e));
    llmkv_engine_destroy(e);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_matches_step), cmocka_unit_test(test_submit_without_worker),
        cmocka_unit_test(test_worker_state_rules),  cmocka_unit_test(test_submit_errors),
        cmocka_unit_test(test_submit_cancel),       cmocka_unit_test(test_params_init_sizes),
        cmocka_unit_test(test_engine_params_04),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
