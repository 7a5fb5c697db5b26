/*
 * api_threads.c - the C API from several threads (pthreads): llmkv_last_error() is per
 * thread, two threads driving two sessions of one engine get the single-threaded results,
 * and two engines in two threads are independent. (Worker threads never call cmocka.)
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>

#include "capi_common.h"

#define MAX_TOKENS 256
#define N_NEW 10
#define NONEXISTENT_MODEL "/nonexistent-llmkv-dir/thread-b-model.gguf"

static const char *const k_prompts[2] = {
    "The capital of France is",
    "Once upon a time, in a small village,",
};

/* First failure seen by a worker thread; checked by the main thread after join. */
typedef struct {
    int failed;
    char what[512];
} wfail_t;

#define WCHECK(f, cond, ...)                                     \
    do {                                                         \
        if (!(cond) && !(f)->failed) {                           \
            (f)->failed = 1;                                     \
            snprintf((f)->what, sizeof((f)->what), __VA_ARGS__); \
        }                                                        \
    } while (0)

#define WCALL(f, call)                                                               \
    do {                                                                             \
        llmkv_status st_ = (call);                                                   \
        WCHECK(f, st_ == LLMKV_OK, "%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call, \
               llmkv_status_string(st_), llmkv_last_error());                        \
    } while (0)

static void assert_no_failure(const wfail_t *f, const char *who) {
    if (f->failed) {
        print_error("%s: %s\n", who, f->what);
        fail();
    }
}

/* ---- last error per thread ------------------------------------------------------------------ */

#define ERR_ITERATIONS 2000

typedef struct {
    int which; /* 0: INVALID_ARGUMENT (struct_size), 1: IO (nonexistent file) */
    pthread_barrier_t *barrier;
    char initial[64];
    char first[512];
    char after_other[512];
    wfail_t f;
} err_arg_t;

static llmkv_status trigger(int which) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    llmkv_engine_params_init(&p);
    p.model_path = NONEXISTENT_MODEL;
    p.backend = LLMKV_BACKEND_CPU;
    if (which == 0) p.struct_size = 8;
    return llmkv_engine_create(&p, &e);
}

static void *err_thread(void *arg) {
    err_arg_t *a = (err_arg_t *)arg;
    llmkv_status expect = a->which == 0 ? LLMKV_ERR_INVALID_ARGUMENT : LLMKV_ERR_IO;
    const char *needle = a->which == 0 ? "struct_size" : "thread-b-model.gguf";
    const char *other = a->which == 0 ? "thread-b-model.gguf" : "struct_size";
    int i;
    /* a new thread has no error yet */
    snprintf(a->initial, sizeof(a->initial), "%s", llmkv_last_error());
    pthread_barrier_wait(a->barrier);
    WCHECK(&a->f, trigger(a->which) == expect, "thread %d: wrong status", a->which);
    snprintf(a->first, sizeof(a->first), "%s", llmkv_last_error());
    pthread_barrier_wait(a->barrier); /* both have failed once */
    pthread_barrier_wait(a->barrier); /* ... and read their message */
    snprintf(a->after_other, sizeof(a->after_other), "%s", llmkv_last_error());
    /* hammer: each thread only ever sees its own message */
    for (i = 0; i < ERR_ITERATIONS && !a->f.failed; ++i) {
        const char *msg;
        llmkv_status st = trigger(a->which);
        WCHECK(&a->f, st == expect, "thread %d iteration %d: %s", a->which, i,
               llmkv_status_string(st));
        msg = llmkv_last_error();
        WCHECK(&a->f, strstr(msg, needle) != NULL && strstr(msg, other) == NULL,
               "thread %d iteration %d: last_error \"%s\" is not its own", a->which, i, msg);
    }
    return NULL;
}

static void test_last_error_is_per_thread(void **state) {
    pthread_t t[2];
    pthread_barrier_t barrier;
    err_arg_t a[2];
    char main_msg[512];
    int i;
    (void)state;
    /* the main thread's own error */
    capi_assert_error(llmkv_engine_create(NULL, NULL), LLMKV_ERR_INVALID_ARGUMENT, NULL);
    snprintf(main_msg, sizeof(main_msg), "%s", llmkv_last_error());
    assert_true(main_msg[0] != '\0');

    assert_int_equal(pthread_barrier_init(&barrier, NULL, 2), 0);
    for (i = 0; i < 2; ++i) {
        memset(&a[i], 0, sizeof(a[i]));
        a[i].which = i;
        a[i].barrier = &barrier;
        assert_int_equal(pthread_create(&t[i], NULL, err_thread, &a[i]), 0);
    }
    for (i = 0; i < 2; ++i) assert_int_equal(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&barrier);
    assert_no_failure(&a[0].f, "thread A");
    assert_no_failure(&a[1].f, "thread B");

    for (i = 0; i < 2; ++i) assert_string_equal(a[i].initial, "");
    assert_non_null(strstr(a[0].first, "struct_size"));
    assert_non_null(strstr(a[1].first, "thread-b-model.gguf"));
    /* the other thread's failure did not change it */
    assert_string_equal(a[0].after_other, a[0].first);
    assert_string_equal(a[1].after_other, a[1].first);
    assert_string_not_equal(a[0].first, a[1].first);
    /* nor the main thread's */
    assert_string_equal(llmkv_last_error(), main_msg);
}

/* ---- two threads, two sessions, one engine ----------------------------------------------- */

/* Greedy reference on one thread: the session alone. */
typedef struct {
    int32_t tokens[MAX_TOKENS];
    size_t n_tokens;
    char text[2048];
    size_t n_text;
} result_t;

static void reference(llmkv_engine *e, const char *prompt, result_t *out) {
    llmkv_session *s = capi_session_create(e, NULL, 0);
    int32_t ctx[MAX_TOKENS];
    size_t n_prompt, n;
    llmkv_session_info info;
    capi_append_text(s, prompt);
    n_prompt = capi_session_info(s).n_tokens;
    capi_assert_ok(llmkv_session_generate(s, N_NEW));
    capi_assert_ok(llmkv_run(e, NULL, NULL));
    info = capi_session_info(s);
    assert_int_equal(info.state, LLMKV_SESSION_FINISHED);
    n = capi_session_tokens(s, ctx, MAX_TOKENS);
    assert_true(n >= n_prompt + info.n_generated);
    out->n_tokens = info.n_generated;
    memcpy(out->tokens, ctx + n_prompt, out->n_tokens * sizeof(int32_t));
    capi_assert_ok(llmkv_session_read_text(s, out->text, sizeof(out->text), &out->n_text));
    llmkv_session_destroy(s);
}

/* Events taken by any thread go to the session they belong to. */
typedef struct {
    pthread_mutex_t mu;
    size_t n_token_events[2];
    int n_done[2];
    uint32_t finish_reason[2];
    int bad_events;
} shared_t;

typedef struct {
    int index;
    llmkv_engine *e;
    llmkv_session *s; /* set by main, or created by the thread when NULL */
    int own_session;  /* the thread creates and destroys it */
    shared_t *shared;
    int *shared_tags; /* user_data of session i is &shared_tags[i] */
    result_t result;
    wfail_t f;
} worker_t;

static void dispatch(worker_t *w, const llmkv_event *ev, size_t n) {
    size_t i;
    pthread_mutex_lock(&w->shared->mu);
    for (i = 0; i < n; ++i) {
        int k = ev[i].user_data == &w->shared_tags[0]   ? 0
                : ev[i].user_data == &w->shared_tags[1] ? 1
                                                        : -1;
        if (k < 0) {
            ++w->shared->bad_events;
        } else if (ev[i].kind == LLMKV_EVENT_TOKEN) {
            ++w->shared->n_token_events[k];
        } else if (ev[i].kind == LLMKV_EVENT_DONE) {
            ++w->shared->n_done[k];
            w->shared->finish_reason[k] = ev[i].finish_reason;
        } else {
            ++w->shared->bad_events;
        }
    }
    pthread_mutex_unlock(&w->shared->mu);
}

static int done_of(worker_t *w, int k) {
    int d;
    pthread_mutex_lock(&w->shared->mu);
    d = w->shared->n_done[k];
    pthread_mutex_unlock(&w->shared->mu);
    return d;
}

static void *session_worker(void *arg) {
    worker_t *w = (worker_t *)arg;
    llmkv_event ev[4];
    llmkv_session_info info;
    int32_t ctx[MAX_TOKENS];
    size_t n, n_prompt, n_ctx;
    int steps;
    const char *prompt = k_prompts[w->index];

    if (w->own_session) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.user_data = &w->shared_tags[w->index];
        WCALL(&w->f, llmkv_session_create(w->e, &sp, &w->s));
        if (w->f.failed) return NULL;
    }
    WCALL(&w->f, llmkv_session_append_text(w->s, prompt, strlen(prompt)));
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    WCALL(&w->f, llmkv_session_get_info(w->s, &info));
    n_prompt = info.n_tokens;
    WCALL(&w->f, llmkv_session_generate(w->s, N_NEW));
    for (steps = 0; !w->f.failed && !done_of(w, w->index); ++steps) {
        size_t got = 0;
        WCHECK(&w->f, steps < 5000, "thread %d: no DONE after %d steps", w->index, steps);
        WCALL(&w->f, llmkv_step(w->e, ev, 4, &n));
        dispatch(w, ev, n);
        /* read text as it comes */
        WCALL(&w->f, llmkv_session_read_text(w->s, w->result.text + w->result.n_text,
                                             sizeof(w->result.text) - w->result.n_text, &got));
        w->result.n_text += got;
        WCALL(&w->f, llmkv_session_get_info(w->s, &info));
        if (n == 0) sched_yield();
    }
    if (w->f.failed) return NULL;
    {
        size_t got = 0;
        WCALL(&w->f, llmkv_session_read_text(w->s, w->result.text + w->result.n_text,
                                             sizeof(w->result.text) - w->result.n_text, &got));
        w->result.n_text += got;
    }
    WCALL(&w->f, llmkv_session_get_info(w->s, &info));
    WCHECK(&w->f, info.state == LLMKV_SESSION_FINISHED, "thread %d: state %u after DONE", w->index,
           info.state);
    WCALL(&w->f, llmkv_session_get_tokens(w->s, ctx, MAX_TOKENS, &n_ctx));
    WCHECK(&w->f, n_ctx >= n_prompt + info.n_generated && n_ctx <= MAX_TOKENS,
           "thread %d: %zu tokens", w->index, n_ctx);
    if (!w->f.failed) {
        w->result.n_tokens = info.n_generated;
        memcpy(w->result.tokens, ctx + n_prompt, info.n_generated * sizeof(int32_t));
    }
    if (w->own_session) {
        llmkv_session_destroy(w->s);
        w->s = NULL;
    }
    return NULL;
}

/* Keeps reading engine-wide state while the workers run. */
typedef struct {
    llmkv_engine *e;
    int stop;
    pthread_mutex_t mu;
    long iterations;
    wfail_t f;
} observer_t;

static int observer_stopped(observer_t *o) {
    int s;
    pthread_mutex_lock(&o->mu);
    s = o->stop;
    pthread_mutex_unlock(&o->mu);
    return s;
}

static void *observer_thread(void *arg) {
    observer_t *o = (observer_t *)arg;
    while (!observer_stopped(o) && !o->f.failed) {
        llmkv_stats st;
        memset(&st, 0, sizeof(st));
        st.struct_size = sizeof(st);
        WCALL(&o->f, llmkv_engine_get_stats(o->e, &st));
        WCHECK(&o->f, st.blocks_free <= st.blocks_total && st.sessions_total <= 2,
               "stats: free %u of %u, %u sessions", st.blocks_free, st.blocks_total,
               st.sessions_total);
        (void)llmkv_pending_events(o->e);
        WCALL(&o->f, llmkv_engine_validate(o->e));
        ++o->iterations;
        sched_yield();
    }
    return NULL;
}

static void run_workers(llmkv_engine *e, worker_t *w, shared_t *shared, int *tags,
                        int own_sessions) {
    pthread_t t[2], ot;
    observer_t obs;
    int i;
    memset(shared, 0, sizeof(*shared));
    assert_int_equal(pthread_mutex_init(&shared->mu, NULL), 0);
    memset(&obs, 0, sizeof(obs));
    obs.e = e;
    assert_int_equal(pthread_mutex_init(&obs.mu, NULL), 0);
    for (i = 0; i < 2; ++i) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].index = i;
        w[i].e = e;
        w[i].shared = shared;
        w[i].shared_tags = tags;
        w[i].own_session = own_sessions;
        if (!own_sessions) w[i].s = capi_session_create(e, &tags[i], 0);
    }
    assert_int_equal(pthread_create(&ot, NULL, observer_thread, &obs), 0);
    for (i = 0; i < 2; ++i) assert_int_equal(pthread_create(&t[i], NULL, session_worker, &w[i]), 0);
    for (i = 0; i < 2; ++i) assert_int_equal(pthread_join(t[i], NULL), 0);
    pthread_mutex_lock(&obs.mu);
    obs.stop = 1;
    pthread_mutex_unlock(&obs.mu);
    assert_int_equal(pthread_join(ot, NULL), 0);
    pthread_mutex_destroy(&obs.mu);
    assert_no_failure(&w[0].f, "worker 0");
    assert_no_failure(&w[1].f, "worker 1");
    assert_no_failure(&obs.f, "observer");
    assert_true(obs.iterations > 0);
    assert_int_equal(shared->bad_events, 0);
    for (i = 0; i < 2; ++i) {
        assert_int_equal(shared->n_done[i], 1);
        assert_int_equal(shared->n_token_events[i], w[i].result.n_tokens);
    }
    pthread_mutex_destroy(&shared->mu);
}

static void assert_same_result(const result_t *got, const result_t *ref, int index) {
    if (got->n_tokens != ref->n_tokens ||
        memcmp(got->tokens, ref->tokens, ref->n_tokens * sizeof(int32_t)) != 0) {
        size_t k;
        print_error("session %d: tokens differ from the single-threaded run\n  single: ", index);
        for (k = 0; k < ref->n_tokens; ++k) print_error("%d ", (int)ref->tokens[k]);
        print_error("\n  threads: ");
        for (k = 0; k < got->n_tokens; ++k) print_error("%d ", (int)got->tokens[k]);
        print_error("\n");
        fail();
    }
    assert_int_equal(got->n_text, ref->n_text);
    assert_memory_equal(got->text, ref->text, ref->n_text);
}

static void test_two_threads_one_engine(void **state) {
    llmkv_engine *e;
    result_t ref[2];
    static worker_t w[2];
    shared_t shared;
    int tags[2] = {0, 1};
    int i;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    for (i = 0; i < 2; ++i) reference(e, k_prompts[i], &ref[i]);
    for (i = 0; i < 2; ++i) assert_true(ref[i].n_tokens > 0);

    /* sessions created by the main thread */
    run_workers(e, w, &shared, tags, 0);
    for (i = 0; i < 2; ++i) assert_same_result(&w[i].result, &ref[i], i);
    for (i = 0; i < 2; ++i) llmkv_session_destroy(w[i].s);
    capi_assert_pool_clean(e);

    /* sessions created and destroyed by the worker threads */
    run_workers(e, w, &shared, tags, 1);
    for (i = 0; i < 2; ++i) assert_same_result(&w[i].result, &ref[i], i);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* ---- two engines in two threads --------------------------------------------------------- */

typedef struct {
    int index;
    pthread_t owner;
    int wrong_thread;
    size_t n_events;
} cb_ctx_t;

static void engine_cb(const llmkv_event *ev, void *user_data) {
    cb_ctx_t *c = (cb_ctx_t *)user_data;
    (void)ev;
    if (!pthread_equal(pthread_self(), c->owner)) c->wrong_thread = 1;
    ++c->n_events;
}

typedef struct {
    int index;
    result_t result;
    wfail_t f;
} engine_worker_t;

static void *engine_worker(void *arg) {
    engine_worker_t *w = (engine_worker_t *)arg;
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    llmkv_session *s = NULL;
    llmkv_session_params sp;
    llmkv_session_info info;
    llmkv_stats st;
    cb_ctx_t cb;
    int32_t ctx[MAX_TOKENS];
    size_t n_prompt, n_ctx;
    const char *prompt = k_prompts[w->index];

    capi_engine_params(&p);
    WCALL(&w->f, llmkv_engine_create(&p, &e));
    if (w->f.failed) return NULL;
    llmkv_session_params_init(&sp);
    WCALL(&w->f, llmkv_session_create(e, &sp, &s));
    if (w->f.failed) {
        llmkv_engine_destroy(e);
        return NULL;
    }
    WCALL(&w->f, llmkv_session_append_text(s, prompt, strlen(prompt)));
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    WCALL(&w->f, llmkv_session_get_info(s, &info));
    n_prompt = info.n_tokens;
    WCALL(&w->f, llmkv_session_generate(s, N_NEW));
    memset(&cb, 0, sizeof(cb));
    cb.index = w->index;
    cb.owner = pthread_self();
    WCALL(&w->f, llmkv_run(e, engine_cb, &cb));
    WCHECK(&w->f, !cb.wrong_thread, "engine %d: callback ran on another thread", w->index);
    WCALL(&w->f, llmkv_session_get_info(s, &info));
    WCHECK(&w->f, cb.n_events == info.n_generated + 1, "engine %d: %zu events for %u tokens",
           w->index, cb.n_events, info.n_generated);
    WCALL(&w->f, llmkv_session_get_tokens(s, ctx, MAX_TOKENS, &n_ctx));
    if (!w->f.failed && n_ctx >= n_prompt + info.n_generated && n_ctx <= MAX_TOKENS) {
        w->result.n_tokens = info.n_generated;
        memcpy(w->result.tokens, ctx + n_prompt, info.n_generated * sizeof(int32_t));
    }
    WCALL(&w->f,
          llmkv_session_read_text(s, w->result.text, sizeof(w->result.text), &w->result.n_text));
    WCALL(&w->f, llmkv_engine_validate(e));
    llmkv_session_destroy(s);
    memset(&st, 0, sizeof(st));
    st.struct_size = sizeof(st);
    WCALL(&w->f, llmkv_engine_get_stats(e, &st));
    WCHECK(&w->f,
           st.blocks_free + st.blocks_cached == st.blocks_total && st.blocks_used == 0 &&
               st.tail_blocks_used == 0 && st.sessions_total == 0,
           "engine %d: pool not clean after destroying the session", w->index);
    llmkv_engine_destroy(e);
    return NULL;
}

static void test_two_engines_two_threads(void **state) {
    llmkv_engine *e;
    result_t ref[2];
    static engine_worker_t w[4];
    pthread_t t[4];
    int i;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    for (i = 0; i < 2; ++i) reference(e, k_prompts[i], &ref[i]);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);

    /* two engines with different prompts, then two with the same prompt */
    for (i = 0; i < 4; ++i) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].index = i < 2 ? i : 0;
    }
    for (i = 0; i < 2; ++i) assert_int_equal(pthread_create(&t[i], NULL, engine_worker, &w[i]), 0);
    for (i = 0; i < 2; ++i) assert_int_equal(pthread_join(t[i], NULL), 0);
    for (i = 2; i < 4; ++i) assert_int_equal(pthread_create(&t[i], NULL, engine_worker, &w[i]), 0);
    for (i = 2; i < 4; ++i) assert_int_equal(pthread_join(t[i], NULL), 0);
    for (i = 0; i < 4; ++i) {
        assert_no_failure(&w[i].f, "engine worker");
        assert_same_result(&w[i].result, &ref[w[i].index], i);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_last_error_is_per_thread),
        cmocka_unit_test(test_two_threads_one_engine),
        cmocka_unit_test(test_two_engines_two_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
