/*
 * api_events.c - event delivery through llmkv_step / llmkv_run: no event is ever dropped
 * with small arrays, llmkv_pending_events, user_data, per-session results independent of
 * batching, llmkv_session_read_text UTF-8 chunking, and events of destroyed sessions.
 */
#include "capi_common.h"

#define MAX_TOKENS 256
#define N_SESSIONS 3

static const char *const k_prompts[N_SESSIONS] = {
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
};

/* What one session received. */
typedef struct {
    llmkv_session *session;
    int tag; /* its user_data points here */
    size_t n_prompt;
    int32_t tokens[MAX_TOKENS];
    size_t n_tokens;
    int n_done;
    uint32_t finish_reason;
    int token_after_done;
} recv_t;

static recv_t *find_recv(recv_t *r, size_t n, const llmkv_event *ev) {
    size_t i;
    for (i = 0; i < n; ++i) {
        if (ev->user_data == &r[i].tag) {
            assert_ptr_equal(ev->session, r[i].session);
            return &r[i];
        }
    }
    print_error("event with unknown user_data %p\n", ev->user_data);
    fail();
    return NULL;
}

static void record(recv_t *r, size_t n, const llmkv_event *ev) {
    recv_t *x = find_recv(r, n, ev);
    if (ev->kind == LLMKV_EVENT_TOKEN) {
        if (x->n_done) x->token_after_done = 1;
        assert_true(x->n_tokens < MAX_TOKENS);
        x->tokens[x->n_tokens++] = ev->token;
    } else if (ev->kind == LLMKV_EVENT_DONE) {
        ++x->n_done;
        x->finish_reason = ev->finish_reason;
    } else {
        print_error("unexpected event kind %u (status %d)\n", ev->kind, (int)ev->status);
        fail();
    }
}

static void start_sessions(llmkv_engine *e, recv_t *r, size_t n, uint32_t max_new) {
    size_t i;
    for (i = 0; i < n; ++i) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i].tag = (int)i;
        r[i].session = capi_session_create(e, &r[i].tag, 0);
        capi_append_text(r[i].session, k_prompts[i % N_SESSIONS]);
        r[i].n_prompt = capi_session_info(r[i].session).n_tokens;
        capi_assert_ok(llmkv_session_generate(r[i].session, max_new));
    }
}

/* The TOKEN events of each session are exactly the generated part of its context, in
 * order, and one DONE came last. */
static void check_received(recv_t *r, size_t n, uint32_t max_new) {
    size_t i;
    for (i = 0; i < n; ++i) {
        int32_t ctx[MAX_TOKENS];
        size_t n_ctx = capi_session_tokens(r[i].session, ctx, MAX_TOKENS);
        llmkv_session_info info = capi_session_info(r[i].session);
        assert_int_equal(r[i].n_done, 1);
        assert_false(r[i].token_after_done);
        assert_int_equal(info.n_generated, r[i].n_tokens);
        assert_int_equal(info.state, LLMKV_SESSION_FINISHED);
        assert_int_equal(info.finish_reason, r[i].finish_reason);
        assert_true(n_ctx >= r[i].n_prompt + r[i].n_tokens);
        assert_memory_equal(ctx + r[i].n_prompt, r[i].tokens, r[i].n_tokens * sizeof(int32_t));
        if (r[i].finish_reason == LLMKV_FINISH_LENGTH) {
            assert_int_equal(r[i].n_tokens, max_new);
            assert_int_equal(n_ctx, r[i].n_prompt + max_new);
        } else {
            assert_int_equal(r[i].finish_reason, LLMKV_FINISH_STOP);
            assert_true(r[i].n_tokens < max_new);
        }
    }
}

static void destroy_sessions(recv_t *r, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) llmkv_session_destroy(r[i].session);
}

static int all_finished(recv_t *r, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        if (capi_session_info(r[i].session).state != LLMKV_SESSION_FINISHED) return 0;
    }
    return 1;
}

/* Greedy reference: the session generated alone on the engine. */
static size_t generate_alone(llmkv_engine *e, const char *prompt, uint32_t max_new, int32_t *out) {
    recv_t r;
    llmkv_event ev[8];
    int steps = 0;
    memset(&r, 0, sizeof(r));
    r.session = capi_session_create(e, &r.tag, 0);
    capi_append_text(r.session, prompt);
    r.n_prompt = capi_session_info(r.session).n_tokens;
    capi_assert_ok(llmkv_session_generate(r.session, max_new));
    while (!r.n_done) {
        size_t n = 0, i;
        capi_assert_ok(llmkv_step(e, ev, 8, &n));
        assert_true(++steps < 200);
        for (i = 0; i < n; ++i) record(&r, 1, &ev[i]);
    }
    check_received(&r, 1, max_new);
    memcpy(out, r.tokens, r.n_tokens * sizeof(int32_t));
    llmkv_session_destroy(r.session);
    return r.n_tokens;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_step_without_work(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev[4];
    size_t n = 77;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    assert_int_equal(llmkv_pending_events(e), 0);
    capi_assert_ok(llmkv_step(e, ev, 4, &n));
    assert_int_equal(n, 0);
    n = 77;
    capi_assert_ok(llmkv_step(e, NULL, 0, &n));
    assert_int_equal(n, 0);
    /* an empty session is no work either */
    s = capi_session_create(e, NULL, 4);
    n = 77;
    capi_assert_ok(llmkv_step(e, ev, 4, &n));
    assert_int_equal(n, 0);
    assert_int_equal(llmkv_pending_events(e), 0);
    /* nor is llmkv_run: returns at once, no callback */
    capi_assert_ok(llmkv_run(e, NULL, NULL));
    assert_int_equal(capi_stats(e).steps, 0);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Three sessions, 8 tokens each, stepped with capacity 1 and 0: nothing is dropped. */
static void test_small_capacity_drops_nothing(void **state) {
    llmkv_engine *e;
    recv_t r[N_SESSIONS];
    llmkv_event ev[N_SESSIONS * 16];
    size_t n, pending, i, total = 0;
    int steps;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    start_sessions(e, r, N_SESSIONS, 8);

    /* capacity 0: events pile up */
    for (steps = 0; steps < 3; ++steps) {
        n = 99;
        capi_assert_ok(llmkv_step(e, NULL, 0, &n));
        assert_int_equal(n, 0);
    }
    pending = llmkv_pending_events(e);
    assert_true(pending >= 1);
    assert_true(pending <= 3 * N_SESSIONS);

    /* capacity 1, now and then 0, until every session has finished */
    for (steps = 0; !all_finished(r, N_SESSIONS); ++steps) {
        size_t cap = steps % 4 == 3 ? 0 : 1;
        assert_true(steps < 200);
        n = 99;
        capi_assert_ok(llmkv_step(e, cap ? ev : NULL, cap, &n));
        assert_true(n <= cap);
        /* the queue is never skipped over: a pending event is always returned */
        if (cap == 1 && pending > 0) assert_int_equal(n, 1);
        for (i = 0; i < n; ++i) record(r, N_SESSIONS, &ev[i]);
        total += n;
        pending = llmkv_pending_events(e);
    }
    /* no work is left; what is pending comes out, and exactly that */
    pending = llmkv_pending_events(e);
    assert_true(pending > 0);
    n = 0;
    capi_assert_ok(llmkv_step(e, ev, sizeof(ev) / sizeof(ev[0]), &n));
    assert_int_equal(n, pending);
    for (i = 0; i < n; ++i) record(r, N_SESSIONS, &ev[i]);
    total += n;
    assert_int_equal(llmkv_pending_events(e), 0);
    n = 99;
    capi_assert_ok(llmkv_step(e, ev, 4, &n));
    assert_int_equal(n, 0);

    check_received(r, N_SESSIONS, 8);
    {
        size_t expected = 0;
        for (i = 0; i < N_SESSIONS; ++i) expected += r[i].n_tokens + 1;
        assert_int_equal(total, expected);
    }
    capi_assert_ok(llmkv_engine_validate(e));
    destroy_sessions(r, N_SESSIONS);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Draining with capacity 1 only: events come one at a time in order. */
static void test_drain_one_at_a_time(void **state) {
    llmkv_engine *e;
    recv_t r[N_SESSIONS];
    llmkv_event ev;
    size_t n, i;
    int steps = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    start_sessions(e, r, N_SESSIONS, 5);
    /* generate everything without taking any event */
    while (!all_finished(r, N_SESSIONS)) {
        capi_assert_ok(llmkv_step(e, NULL, 0, &n));
        assert_true(++steps < 100);
    }
    n = llmkv_pending_events(e);
    {
        size_t expected = 0;
        for (i = 0; i < N_SESSIONS; ++i)
            expected += capi_session_info(r[i].session).n_generated + 1;
        assert_int_equal(n, expected);
    }
    while (llmkv_pending_events(e) > 0) {
        size_t before = llmkv_pending_events(e);
        capi_assert_ok(llmkv_step(e, &ev, 1, &n));
        assert_int_equal(n, 1);
        assert_int_equal(llmkv_pending_events(e), before - 1);
        record(r, N_SESSIONS, &ev);
    }
    check_received(r, N_SESSIONS, 5);
    destroy_sessions(r, N_SESSIONS);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

#define MAX_EVENTS 512

/* The callback only copies: assertions run after llmkv_run has returned. */
typedef struct {
    llmkv_event events[MAX_EVENTS];
    size_t n;
    int overflow;
} run_ctx_t;

static void on_event(const llmkv_event *ev, void *user_data) {
    run_ctx_t *ctx = (run_ctx_t *)user_data;
    if (ctx->n == MAX_EVENTS) {
        ctx->overflow = 1;
        return;
    }
    ctx->events[ctx->n++] = *ev;
}

static void record_all(recv_t *r, size_t n, const run_ctx_t *ctx) {
    size_t i;
    assert_false(ctx->overflow);
    for (i = 0; i < ctx->n; ++i) record(r, n, &ctx->events[i]);
}

static void test_run_with_callback(void **state) {
    llmkv_engine *e;
    recv_t r[N_SESSIONS];
    static run_ctx_t ctx;
    size_t i, expected = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    start_sessions(e, r, N_SESSIONS, 6);
    memset(&ctx, 0, sizeof(ctx));
    capi_assert_ok(llmkv_run(e, on_event, &ctx));
    assert_int_equal(llmkv_pending_events(e), 0);
    record_all(r, N_SESSIONS, &ctx);
    check_received(r, N_SESSIONS, 6);
    for (i = 0; i < N_SESSIONS; ++i) expected += r[i].n_tokens + 1;
    assert_int_equal(ctx.n, expected);

    /* events queued by earlier steps are delivered by run too */
    {
        size_t n;
        llmkv_session_info info;
        capi_assert_ok(llmkv_session_generate(r[0].session, 3));
        capi_assert_ok(llmkv_step(e, NULL, 0, &n));
        capi_assert_ok(llmkv_step(e, NULL, 0, &n));
        assert_true(llmkv_pending_events(e) > 0);
        r[0].n_tokens = 0;
        r[0].n_done = 0;
        memset(&ctx, 0, sizeof(ctx));
        capi_assert_ok(llmkv_run(e, on_event, &ctx));
        assert_int_equal(llmkv_pending_events(e), 0);
        record_all(r, N_SESSIONS, &ctx);
        info = capi_session_info(r[0].session);
        assert_int_equal(r[0].n_done, 1);
        assert_int_equal(r[0].n_tokens, info.n_generated);
        assert_int_equal(ctx.n, r[0].n_tokens + 1);
        for (i = 1; i < N_SESSIONS; ++i) assert_int_equal(r[i].n_done, 1);
    }

    /* run with a NULL callback still runs everything to the end */
    capi_assert_ok(llmkv_session_generate(r[1].session, 2));
    capi_assert_ok(llmkv_run(e, NULL, NULL));
    assert_int_equal(llmkv_pending_events(e), 0);
    assert_int_equal(capi_session_info(r[1].session).state, LLMKV_SESSION_FINISHED);
    assert_int_equal(capi_session_info(r[1].session).n_generated, 2);
    /* and with nothing to do, the callback is not called */
    memset(&ctx, 0, sizeof(ctx));
    capi_assert_ok(llmkv_run(e, on_event, &ctx));
    assert_int_equal(ctx.n, 0);
    capi_assert_ok(llmkv_engine_validate(e));
    destroy_sessions(r, N_SESSIONS);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Greedy output does not depend on what else is in the batch. */
static void test_batching_does_not_change_greedy_output(void **state) {
    llmkv_engine *e;
    int32_t ref[N_SESSIONS][MAX_TOKENS];
    size_t n_ref[N_SESSIONS];
    recv_t r[N_SESSIONS];
    llmkv_event ev[16];
    size_t i, n;
    int steps = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    for (i = 0; i < N_SESSIONS; ++i) n_ref[i] = generate_alone(e, k_prompts[i], 8, ref[i]);

    /* all three together */
    start_sessions(e, r, N_SESSIONS, 8);
    capi_assert_ok(llmkv_run(e, NULL, NULL));
    for (i = 0; i < N_SESSIONS; ++i) {
        int32_t ctx[MAX_TOKENS];
        size_t n_ctx = capi_session_tokens(r[i].session, ctx, MAX_TOKENS);
        assert_int_equal(capi_session_info(r[i].session).n_generated, n_ref[i]);
        assert_true(n_ctx >= r[i].n_prompt + n_ref[i]);
        assert_memory_equal(ctx + r[i].n_prompt, ref[i], n_ref[i] * sizeof(int32_t));
    }
    destroy_sessions(r, N_SESSIONS);

    /* staggered: session 0's prompt runs in the same pass as the others' decoding */
    for (i = 1; i < N_SESSIONS; ++i) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i].tag = (int)i;
        r[i].session = capi_session_create(e, &r[i].tag, 0);
        capi_append_text(r[i].session, k_prompts[i]);
        r[i].n_prompt = capi_session_info(r[i].session).n_tokens;
        capi_assert_ok(llmkv_session_generate(r[i].session, 8));
    }
    for (steps = 0; steps < 3; ++steps) {
        capi_assert_ok(llmkv_step(e, ev, 16, &n));
        for (i = 0; i < n; ++i) record(r + 1, N_SESSIONS - 1, &ev[i]);
    }
    memset(&r[0], 0, sizeof(r[0]));
    r[0].session = capi_session_create(e, &r[0].tag, 0);
    capi_append_text(r[0].session, k_prompts[0]);
    r[0].n_prompt = capi_session_info(r[0].session).n_tokens;
    capi_assert_ok(llmkv_session_generate(r[0].session, 8));
    for (steps = 0; !all_finished(r, N_SESSIONS) || llmkv_pending_events(e) > 0; ++steps) {
        assert_true(steps < 100);
        capi_assert_ok(llmkv_step(e, ev, 16, &n));
        for (i = 0; i < n; ++i) record(r, N_SESSIONS, &ev[i]);
    }
    check_received(r, N_SESSIONS, 8);
    for (i = 0; i < N_SESSIONS; ++i) {
        if (r[i].n_tokens != n_ref[i] ||
            memcmp(r[i].tokens, ref[i], n_ref[i] * sizeof(int32_t)) != 0) {
            size_t k;
            print_error("session %zu: batched output differs from its output alone\n  alone:  ", i);
            for (k = 0; k < n_ref[i]; ++k) print_error("%d ", (int)ref[i][k]);
            print_error("\n  batched: ");
            for (k = 0; k < r[i].n_tokens; ++k) print_error("%d ", (int)r[i].tokens[k]);
            print_error("\n");
            fail();
        }
    }
    capi_assert_ok(llmkv_engine_validate(e));
    destroy_sessions(r, N_SESSIONS);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* read_text hands out whole UTF-8 characters only, whatever the capacity. */
static void test_read_text_utf8_chunks(void **state) {
    static const char prompt[] =
        "<|im_start|>user\nWrite the word 'hello' in Japanese, Chinese and Russian.<|im_end|>\n"
        "<|im_start|>assistant\n";
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev[8];
    char text[4096];
    char chunk[8];
    char expected[4096];
    size_t n_text = 0, n_expected = 0, n, n_prompt, i, n_multibyte = 0;
    int32_t ctx[MAX_TOKENS];
    size_t n_ctx;
    unsigned reads = 0;
    int done = 0, steps = 0;
    llmkv_session_info info;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);
    capi_append_text(s, prompt);
    n_prompt = capi_session_info(s).n_tokens;
    /* capacity 0 and nothing generated: 0 bytes */
    n = 9;
    capi_assert_ok(llmkv_session_read_text(s, NULL, 0, &n));
    assert_int_equal(n, 0);
    capi_assert_ok(llmkv_session_generate(s, 40));
    for (;;) {
        /* read with capacities 1, 2, 3, 4, ... until a 4-byte read finds nothing whole */
        for (;;) {
            size_t cap = 1 + reads++ % 4;
            memset(chunk, 0, sizeof(chunk));
            capi_assert_ok(llmkv_session_read_text(s, chunk, cap, &n));
            assert_true(n <= cap);
            if (!capi_utf8_valid(chunk, n)) {
                print_error("read_text returned %zu bytes that are not whole UTF-8 characters:", n);
                for (i = 0; i < n; ++i) print_error(" %02x", (unsigned char)chunk[i]);
                print_error("\n");
                fail();
            }
            assert_true(n_text + n < sizeof(text));
            memcpy(text + n_text, chunk, n);
            n_text += n;
            if (n == 0 && cap == 4) break;
        }
        if (done) break;
        capi_assert_ok(llmkv_step(e, ev, 8, &n));
        assert_true(++steps < 100);
        for (i = 0; i < n; ++i) {
            if (ev[i].kind == LLMKV_EVENT_DONE) done = 1;
        }
    }
    info = capi_session_info(s);
    n_ctx = capi_session_tokens(s, ctx, MAX_TOKENS);
    assert_true(n_ctx >= n_prompt + info.n_generated);
    capi_assert_ok(llmkv_detokenize(e, ctx + n_prompt, info.n_generated, expected, sizeof(expected),
                                    &n_expected));

    /* the concatenation is the generated text, except an incomplete last character that
     * is still waiting for its next token */
    assert_true(n_text <= n_expected);
    assert_memory_equal(text, expected, n_text);
    if (n_text < n_expected) {
        if (!capi_utf8_incomplete_char(expected + n_text, n_expected - n_text)) {
            print_error(
                "read_text returned %zu of %zu bytes; the rest is not one incomplete character\n",
                n_text, n_expected);
            fail();
        }
    }
    assert_true(capi_utf8_valid(text, n_text));
    for (i = 0; i < n_text; ++i) {
        if (((unsigned char)text[i] & 0xC0) == 0xC0) ++n_multibyte;
    }
    if (n_multibyte == 0) {
        print_error(
            "the generated text has no multi-byte character; the test exercises nothing: [%.*s]\n",
            (int)n_text, text);
        fail();
    }
    /* nothing more to read */
    capi_assert_ok(llmkv_session_read_text(s, chunk, sizeof(chunk), &n));
    assert_int_equal(n, 0);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Destroying a session discards its queued events; the others' stay. */
static void test_destroy_session_discards_its_events(void **state) {
    llmkv_engine *e;
    recv_t r[N_SESSIONS];
    llmkv_event ev[16];
    llmkv_session_info victim;
    size_t pending_before, pending_after, n, i;
    int steps;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    start_sessions(e, r, N_SESSIONS, 6);
    for (steps = 0; steps < 3; ++steps) capi_assert_ok(llmkv_step(e, NULL, 0, &n));
    pending_before = llmkv_pending_events(e);
    victim = capi_session_info(r[1].session);
    assert_true(victim.n_generated > 0);
    llmkv_session_destroy(r[1].session);
    pending_after = llmkv_pending_events(e);
    assert_int_equal(pending_after, pending_before - victim.n_generated -
                                        (victim.state == LLMKV_SESSION_FINISHED ? 1 : 0));
    capi_assert_ok(llmkv_engine_validate(e));

    /* drain: nothing more arrives for the destroyed session */
    for (steps = 0; llmkv_pending_events(e) > 0 ||
                    capi_session_info(r[0].session).state != LLMKV_SESSION_FINISHED ||
                    capi_session_info(r[2].session).state != LLMKV_SESSION_FINISHED;
         ++steps) {
        assert_true(steps < 100);
        capi_assert_ok(llmkv_step(e, ev, 16, &n));
        for (i = 0; i < n; ++i) {
            assert_true(ev[i].user_data != &r[1].tag);
            record(r, N_SESSIONS, &ev[i]);
        }
    }
    assert_int_equal(r[1].n_tokens, 0);
    assert_int_equal(r[1].n_done, 0);
    check_received(&r[0], 1, 6);
    check_received(&r[2], 1, 6);
    llmkv_session_destroy(r[0].session);
    llmkv_session_destroy(r[2].session);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* A session that can never get the KV blocks it needs gets an ERROR event with
 * LLMKV_ERR_KV_CAPACITY instead of hanging; the engine stays consistent. */
static void test_error_event_when_pool_exhausted(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    llmkv_engine_info info;
    llmkv_session *s;
    llmkv_event ev[8];
    int32_t toks[200];
    size_t n, i, n_error = 0, n_done = 0;
    int steps;
    int tag = 5;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    info = capi_engine_info(e);
    llmkv_engine_destroy(e);

    /* room for 4 sealed blocks */
    capi_engine_params(&p);
    p.kv_device_bytes = 4 * info.kv_bytes_per_token_device * info.kv_block_tokens;
    e = NULL;
    capi_assert_ok(llmkv_engine_create(&p, &e));
    info = capi_engine_info(e);
    assert_int_equal(info.kv_blocks_total, 4);

    s = capi_session_create(e, &tag, 0);
    for (i = 0; i < 200; ++i) toks[i] = (int32_t)(300 + i);
    capi_assert_ok(llmkv_session_append(s, toks, 200)); /* needs 12 blocks */
    capi_assert_ok(llmkv_session_generate(s, 4));
    for (steps = 0; steps < 20 && n_error + n_done == 0; ++steps) {
        capi_assert_ok(llmkv_step(e, ev, 8, &n));
        for (i = 0; i < n; ++i) {
            assert_ptr_equal(ev[i].session, s);
            assert_ptr_equal(ev[i].user_data, &tag);
            if (ev[i].kind == LLMKV_EVENT_ERROR) {
                ++n_error;
                assert_int_equal(ev[i].status, LLMKV_ERR_KV_CAPACITY);
            } else if (ev[i].kind == LLMKV_EVENT_DONE) {
                ++n_done;
            }
        }
    }
    assert_int_equal(n_error, 1);
    assert_int_equal(n_done, 0);
    /* nothing keeps running */
    capi_drain(e, 20);
    assert_int_equal(capi_session_info(s).state == LLMKV_SESSION_GENERATING, 0);
    capi_assert_ok(llmkv_engine_validate(e));
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_without_work),
        cmocka_unit_test(test_small_capacity_drops_nothing),
        cmocka_unit_test(test_drain_one_at_a_time),
        cmocka_unit_test(test_run_with_callback),
        cmocka_unit_test(test_batching_does_not_change_greedy_output),
        cmocka_unit_test(test_read_text_utf8_chunks),
        cmocka_unit_test(test_destroy_session_discards_its_events),
        cmocka_unit_test(test_error_event_when_pool_exhausted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
