/*
 * api_state.c - the session state machine through the C API: STATE errors, multi-turn,
 * cancel, max_context limits (KV_CAPACITY, FINISH_CONTEXT), states and finish reasons seen
 * via llmkv_session_get_info, and destroying an engine that still has live sessions.
 */
#include "capi_common.h"

#define PROMPT "The capital of France is"
#define MAX_TOKENS 256

/* Steps (capacity 16) until the session's DONE; returns the TOKEN events of that session
 * in tokens (capacity MAX_TOKENS) and their count; *reason gets the DONE's finish reason. */
static size_t run_to_done(llmkv_engine *e, llmkv_session *s, int32_t *tokens, uint32_t *reason) {
    llmkv_event ev[16];
    size_t count = 0;
    int done = 0, steps = 0;
    while (!done) {
        size_t n = 0, i;
        capi_assert_ok(llmkv_step(e, ev, 16, &n));
        assert_true(++steps < 600);
        for (i = 0; i < n; ++i) {
            if (ev[i].session != s) continue;
            assert_false(done);
            if (ev[i].kind == LLMKV_EVENT_TOKEN) {
                assert_true(count < MAX_TOKENS);
                tokens[count++] = ev[i].token;
            } else {
                assert_int_equal(ev[i].kind, LLMKV_EVENT_DONE);
                *reason = ev[i].finish_reason;
                done = 1;
            }
        }
    }
    return count;
}

static void test_generate_on_empty_session(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_session_info info;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 4);
    capi_assert_error(llmkv_session_generate(s, 4), LLMKV_ERR_STATE, NULL);
    capi_assert_error(llmkv_session_generate(s, 0), LLMKV_ERR_STATE, NULL);
    info = capi_session_info(s);
    assert_int_equal(info.state, LLMKV_SESSION_IDLE);
    assert_int_equal(info.n_tokens, 0);
    /* appending nothing does not make it generatable */
    capi_assert_ok(llmkv_session_append(s, NULL, 0));
    capi_assert_error(llmkv_session_generate(s, 4), LLMKV_ERR_STATE, NULL);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_cancel_when_not_generating(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    int32_t toks[MAX_TOKENS];
    uint32_t reason = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 2);
    /* empty and idle */
    capi_assert_error(llmkv_session_cancel(s), LLMKV_ERR_STATE, NULL);
    /* with input but no generate request */
    capi_append_text(s, PROMPT);
    capi_assert_error(llmkv_session_cancel(s), LLMKV_ERR_STATE, NULL);
    /* after the generation has finished */
    capi_assert_ok(llmkv_session_generate(s, 2));
    run_to_done(e, s, toks, &reason);
    capi_assert_error(llmkv_session_cancel(s), LLMKV_ERR_STATE, NULL);
    assert_int_equal(llmkv_pending_events(e), 0);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_generate_twice(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev[8];
    size_t n;
    int32_t toks[MAX_TOKENS];
    uint32_t reason = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);
    capi_append_text(s, PROMPT);
    capi_assert_ok(llmkv_session_generate(s, 4));
    /* queued, not started */
    capi_assert_error(llmkv_session_generate(s, 4), LLMKV_ERR_STATE, NULL);
    /* started */
    capi_assert_ok(llmkv_step(e, ev, 8, &n));
    capi_assert_error(llmkv_session_generate(s, 4), LLMKV_ERR_STATE, NULL);
    capi_assert_error(llmkv_session_generate(s, 0), LLMKV_ERR_STATE, NULL);
    /* the first request is unaffected: 4 tokens in all */
    run_to_done(e, s, toks, &reason);
    assert_int_equal(reason, LLMKV_FINISH_LENGTH);
    assert_int_equal(capi_session_info(s).n_generated, 4);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_append_while_generating(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev[8];
    size_t n;
    uint32_t n_tokens;
    int32_t tok = 100;
    int32_t toks[MAX_TOKENS];
    uint32_t reason = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);
    capi_append_text(s, PROMPT);
    capi_assert_ok(llmkv_session_generate(s, 4));
    n_tokens = capi_session_info(s).n_tokens;
    /* queued */
    capi_assert_error(llmkv_session_append(s, &tok, 1), LLMKV_ERR_STATE, NULL);
    capi_assert_error(llmkv_session_append_text(s, " more", 5), LLMKV_ERR_STATE, NULL);
    assert_int_equal(capi_session_info(s).n_tokens, n_tokens);
    /* generating */
    capi_assert_ok(llmkv_step(e, ev, 8, &n));
    n_tokens = capi_session_info(s).n_tokens;
    capi_assert_error(llmkv_session_append(s, &tok, 1), LLMKV_ERR_STATE, NULL);
    capi_assert_error(llmkv_session_append_text(s, " more", 5), LLMKV_ERR_STATE, NULL);
    assert_int_equal(capi_session_info(s).n_tokens, n_tokens);
    run_to_done(e, s, toks, &reason);
    /* finished: appending works again */
    capi_assert_ok(llmkv_session_append(s, &tok, 1));
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_multi_turn(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    int32_t turn1[MAX_TOKENS], turn2[MAX_TOKENS], ctx1[MAX_TOKENS], ctx2[MAX_TOKENS],
        gen[MAX_TOKENS];
    size_t n1, n2, appended;
    uint32_t reason = 0;
    size_t g;
    llmkv_session_info info;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);

    capi_append_text(s, PROMPT);
    capi_assert_ok(llmkv_session_generate(s, 4));
    g = run_to_done(e, s, gen, &reason);
    assert_int_equal(reason, LLMKV_FINISH_LENGTH);
    assert_int_equal(g, 4);
    n1 = capi_session_tokens(s, turn1, MAX_TOKENS);
    memcpy(ctx1, turn1, n1 * sizeof(int32_t));
    /* the generated tokens are the tail of the context */
    assert_memory_equal(turn1 + n1 - 4, gen, 4 * sizeof(int32_t));

    /* second turn */
    appended = capi_tokenize(e, " And the capital of Germany is", turn2, MAX_TOKENS);
    capi_append_text(s, " And the capital of Germany is");
    info = capi_session_info(s);
    assert_int_equal(info.n_tokens, n1 + appended);
    capi_assert_ok(llmkv_session_generate(s, 3));
    g = run_to_done(e, s, gen, &reason);
    assert_int_equal(reason, LLMKV_FINISH_LENGTH);
    assert_int_equal(g, 3);
    n2 = capi_session_tokens(s, ctx2, MAX_TOKENS);
    assert_int_equal(n2, n1 + appended + 3);
    /* the first turn is kept as it was, then the appended text, then the new tokens */
    assert_memory_equal(ctx2, ctx1, n1 * sizeof(int32_t));
    assert_memory_equal(ctx2 + n1, turn2, appended * sizeof(int32_t));
    assert_memory_equal(ctx2 + n1 + appended, gen, 3 * sizeof(int32_t));
    info = capi_session_info(s);
    assert_int_equal(info.state, LLMKV_SESSION_FINISHED);
    assert_int_equal(info.n_generated, 3);

    /* a third turn without new input continues from the context */
    capi_assert_ok(llmkv_session_generate(s, 2));
    g = run_to_done(e, s, gen, &reason);
    assert_int_equal(g, 2);
    assert_int_equal(capi_session_info(s).n_tokens, n2 + 2);

    capi_assert_ok(llmkv_engine_validate(e));
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_cancel_mid_generation(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev[8];
    int32_t gen[MAX_TOKENS], ctx[MAX_TOKENS];
    size_t n_prompt, n_gen = 0, n, i;
    int steps = 0, done = 0;
    llmkv_session_info info;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, (void *)&n_gen, 0);
    capi_append_text(s, PROMPT);
    n_prompt = capi_session_info(s).n_tokens;
    capi_assert_ok(llmkv_session_generate(s, 100));
    while (n_gen < 3) {
        capi_assert_ok(llmkv_step(e, ev, 8, &n));
        assert_true(++steps < 50);
        for (i = 0; i < n; ++i) {
            assert_int_equal(ev[i].kind, LLMKV_EVENT_TOKEN);
            gen[n_gen++] = ev[i].token;
        }
    }
    capi_assert_ok(llmkv_session_cancel(s));
    /* cancel is not repeatable */
    capi_assert_error(llmkv_session_cancel(s), LLMKV_ERR_STATE, NULL);
    /* the next step delivers DONE / CANCELLED, and no more tokens for it */
    for (steps = 0; !done; ++steps) {
        assert_true(steps < 4);
        capi_assert_ok(llmkv_step(e, ev, 8, &n));
        for (i = 0; i < n; ++i) {
            assert_ptr_equal(ev[i].session, s);
            assert_ptr_equal(ev[i].user_data, &n_gen);
            assert_int_equal(ev[i].kind, LLMKV_EVENT_DONE);
            assert_int_equal(ev[i].finish_reason, LLMKV_FINISH_CANCELLED);
            assert_false(done);
            done = 1;
        }
    }
    capi_assert_ok(llmkv_step(e, ev, 8, &n));
    assert_int_equal(n, 0);
    info = capi_session_info(s);
    assert_int_equal(info.finish_reason, LLMKV_FINISH_CANCELLED);
    assert_int_equal(info.state, LLMKV_SESSION_FINISHED);
    assert_int_equal(info.n_generated, n_gen);
    /* the session keeps its tokens: prompt + generated so far */
    assert_int_equal(info.n_tokens, n_prompt + n_gen);
    assert_int_equal(capi_session_tokens(s, ctx, MAX_TOKENS), n_prompt + n_gen);
    assert_memory_equal(ctx + n_prompt, gen, n_gen * sizeof(int32_t));
    capi_assert_ok(llmkv_engine_validate(e));

    /* and can continue from there */
    {
        uint32_t reason = 0;
        int32_t more[MAX_TOKENS];
        capi_assert_ok(llmkv_session_generate(s, 2));
        assert_int_equal(run_to_done(e, s, more, &reason), 2);
        assert_int_equal(reason, LLMKV_FINISH_LENGTH);
        assert_int_equal(capi_session_info(s).n_tokens, n_prompt + n_gen + 2);
    }
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Cancelled while still queued: DONE/CANCELLED, nothing generated, generate works again. */
static void test_cancel_queued_then_continue(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_event ev[8];
    size_t n_prompt, n;
    int32_t gen[MAX_TOKENS];
    uint32_t reason = 0;
    llmkv_session_info info;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);
    capi_append_text(s, PROMPT);
    n_prompt = capi_session_info(s).n_tokens;
    capi_assert_ok(llmkv_session_generate(s, 5));
    /* cancelled before any step */
    capi_assert_ok(llmkv_session_cancel(s));
    capi_assert_ok(llmkv_step(e, ev, 8, &n));
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].kind, LLMKV_EVENT_DONE);
    assert_int_equal(ev[0].finish_reason, LLMKV_FINISH_CANCELLED);
    info = capi_session_info(s);
    assert_int_equal(info.n_tokens, n_prompt);
    assert_int_equal(info.n_generated, 0);
    assert_int_equal(info.finish_reason, LLMKV_FINISH_CANCELLED);
    /* generate again: works from the same context */
    capi_assert_ok(llmkv_session_generate(s, 3));
    assert_int_equal(run_to_done(e, s, gen, &reason), 3);
    assert_int_equal(reason, LLMKV_FINISH_LENGTH);
    assert_int_equal(capi_session_info(s).n_tokens, n_prompt + 3);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_append_past_max_context(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    static int32_t toks[CAPI_MAX_CONTEXT + 16];
    size_t i;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    for (i = 0; i < sizeof(toks) / sizeof(toks[0]); ++i) toks[i] = (int32_t)(100 + i % 50);
    s = capi_session_create(e, NULL, 0);

    capi_assert_error(llmkv_session_append(s, toks, CAPI_MAX_CONTEXT + 1), LLMKV_ERR_KV_CAPACITY,
                      "max_context");
    assert_int_equal(capi_session_info(s).n_tokens, 0);
    capi_assert_ok(llmkv_session_append(s, toks, CAPI_MAX_CONTEXT - 12));
    capi_assert_error(llmkv_session_append(s, toks, 13), LLMKV_ERR_KV_CAPACITY, NULL);
    assert_int_equal(capi_session_info(s).n_tokens, CAPI_MAX_CONTEXT - 12);
    {
        /* text that tokenizes to more than 12 tokens */
        static const char text[] =
            " one two three four five six seven eight nine ten eleven twelve thirteen";
        capi_assert_error(llmkv_session_append_text(s, text, strlen(text)), LLMKV_ERR_KV_CAPACITY,
                          NULL);
        assert_int_equal(capi_session_info(s).n_tokens, CAPI_MAX_CONTEXT - 12);
    }
    /* exactly up to the limit is fine */
    capi_assert_ok(llmkv_session_append(s, toks, 12));
    assert_int_equal(capi_session_info(s).n_tokens, CAPI_MAX_CONTEXT);
    capi_assert_error(llmkv_session_append(s, toks, 1), LLMKV_ERR_KV_CAPACITY, NULL);
    assert_int_equal(capi_session_info(s).n_tokens, CAPI_MAX_CONTEXT);
    {
        int32_t back[CAPI_MAX_CONTEXT];
        assert_int_equal(capi_session_tokens(s, back, CAPI_MAX_CONTEXT), CAPI_MAX_CONTEXT);
        assert_memory_equal(back, toks, (CAPI_MAX_CONTEXT - 12) * sizeof(int32_t));
        assert_memory_equal(back + CAPI_MAX_CONTEXT - 12, toks, 12 * sizeof(int32_t));
    }
    capi_assert_ok(llmkv_engine_validate(e));
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Generation that reaches max_context ends with FINISH_CONTEXT at exactly max_context. */
static void test_generate_to_max_context(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    llmkv_session *s;
    int32_t toks[MAX_TOKENS], gen[MAX_TOKENS];
    size_t n;
    uint32_t reason = 0;
    llmkv_session_info info;
    const uint32_t max_ctx = 64;
    (void)state;
    CAPI_REQUIRE_MODEL();
    capi_engine_params(&p);
    p.max_context = max_ctx;
    capi_assert_ok(llmkv_engine_create(&p, &e));
    assert_int_equal(capi_engine_info(e).max_context, max_ctx);
    n = capi_tokenize(
        e,
        "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, "
        "24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40",
        toks, MAX_TOKENS);
    assert_true(n >= max_ctx - 5);
    s = capi_session_create(e, NULL, 0);
    capi_assert_ok(llmkv_session_append(s, toks, max_ctx - 5));
    capi_assert_ok(llmkv_session_generate(s, 0)); /* until stop or the context end */
    n = run_to_done(e, s, gen, &reason);
    info = capi_session_info(s);
    if (reason == LLMKV_FINISH_STOP) {
        print_message("the model stopped early after %zu tokens; FINISH_CONTEXT not reached\n", n);
        assert_true(info.n_tokens <= max_ctx);
    } else {
        assert_int_equal(reason, LLMKV_FINISH_CONTEXT);
        assert_int_equal(info.finish_reason, LLMKV_FINISH_CONTEXT);
        assert_int_equal(info.n_tokens, max_ctx);
        assert_int_equal(n, 5);
        assert_int_equal(info.n_generated, 5);
    }
    capi_assert_error(llmkv_session_append(s, toks, max_ctx - info.n_tokens + 1),
                      LLMKV_ERR_KV_CAPACITY, NULL);
    capi_assert_ok(llmkv_engine_validate(e));
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

static void test_state_transitions(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_session_info info;
    llmkv_stats st;
    llmkv_event ev[8];
    size_t n_prompt, n, n_gen = 0, i;
    int done = 0, steps = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);

    info = capi_session_info(s);
    assert_int_equal(info.struct_size, sizeof(info));
    assert_int_equal(info.state, LLMKV_SESSION_IDLE);
    assert_int_equal(info.finish_reason, LLMKV_FINISH_NONE);
    assert_int_equal(info.n_tokens, 0);
    assert_int_equal(info.n_cached, 0);
    assert_int_equal(info.n_generated, 0);
    assert_int_equal(info.n_blocks, 0);
    st = capi_stats(e);
    assert_int_equal(st.sessions_total, 1);
    assert_int_equal(st.sessions_idle, 1);

    /* input queued: QUEUED ("has input or a generate request, not started") */
    capi_append_text(s, PROMPT);
    info = capi_session_info(s);
    n_prompt = info.n_tokens;
    assert_true(n_prompt > 1);
    assert_int_equal(info.state, LLMKV_SESSION_QUEUED);

    capi_assert_ok(llmkv_session_generate(s, 5));
    info = capi_session_info(s);
    assert_int_equal(info.state, LLMKV_SESSION_QUEUED);
    assert_int_equal(info.finish_reason, LLMKV_FINISH_NONE);
    st = capi_stats(e);
    assert_int_equal(st.sessions_queued, 1);

    while (!done) {
        capi_assert_ok(llmkv_step(e, ev, 8, &n));
        assert_true(++steps < 50);
        for (i = 0; i < n; ++i) {
            if (ev[i].kind == LLMKV_EVENT_TOKEN) {
                ++n_gen;
            } else {
                assert_int_equal(ev[i].kind, LLMKV_EVENT_DONE);
                assert_int_equal(ev[i].finish_reason, LLMKV_FINISH_LENGTH);
                done = 1;
            }
        }
        info = capi_session_info(s);
        assert_int_equal(info.n_generated, n_gen);
        assert_int_equal(info.n_tokens, n_prompt + n_gen);
        assert_true(info.n_cached <= info.n_tokens);
        if (!done) {
            assert_true(info.state == LLMKV_SESSION_PREFILLING ||
                        info.state == LLMKV_SESSION_GENERATING);
            st = capi_stats(e);
            assert_int_equal(st.sessions_prefilling + st.sessions_generating, 1);
            capi_assert_ok(llmkv_engine_validate(e));
        }
    }
    info = capi_session_info(s);
    assert_int_equal(info.state, LLMKV_SESSION_FINISHED);
    assert_int_equal(info.finish_reason, LLMKV_FINISH_LENGTH);
    assert_int_equal(info.n_generated, 5);
    assert_int_equal(info.n_tokens, n_prompt + 5);
    assert_int_equal(info.tier, 0);
    st = capi_stats(e);
    assert_int_equal(st.sessions_finished, 1);
    assert_true(st.tokens_generated >= 5);
    assert_true(st.steps >= 5);
    assert_true(st.tokens_stored <= n_prompt + 5);

    /* generate again: QUEUED, then FINISHED/LENGTH with the new count */
    capi_assert_ok(llmkv_session_generate(s, 2));
    info = capi_session_info(s);
    assert_int_equal(info.state, LLMKV_SESSION_QUEUED);
    assert_int_equal(info.n_generated, 0);
    capi_drain(e, 20);
    info = capi_session_info(s);
    assert_int_equal(info.state, LLMKV_SESSION_FINISHED);
    assert_int_equal(info.finish_reason, LLMKV_FINISH_LENGTH);
    assert_int_equal(info.n_generated, 2);
    assert_int_equal(info.n_tokens, n_prompt + 7);

    capi_assert_ok(llmkv_engine_validate(e));
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* llmkv_session_append: "they are run through the model by the next llmkv_step"; an IDLE
 * session is one whose "KV holds all its tokens". */
static void test_append_then_step_computes_kv(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_session_info info;
    llmkv_event ev[4];
    size_t n;
    int steps;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);
    capi_append_text(s, PROMPT);
    for (steps = 0; steps < 5; ++steps) {
        capi_assert_ok(llmkv_step(e, ev, 4, &n));
        assert_int_equal(n, 0);
    }
    info = capi_session_info(s);
    /* The header: every appended token but the last is computed; the last waits for the
     * step that starts generation. */
    assert_int_equal(info.state, LLMKV_SESSION_IDLE);
    assert_int_equal(info.n_cached, info.n_tokens - 1);
    capi_assert_ok(llmkv_session_generate(s, 1));
    capi_assert_ok(llmkv_run(e, NULL, NULL));
    info = capi_session_info(s);
    assert_int_equal(info.n_cached, info.n_tokens - 1);
    assert_int_equal(info.n_generated, 1);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* generate(0) uses the session's max_new_tokens; an explicit count overrides it. */
static void test_max_new_tokens_default(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    int32_t gen[MAX_TOKENS];
    uint32_t reason = 0;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 3);
    capi_append_text(s, PROMPT);
    capi_assert_ok(llmkv_session_generate(s, 0));
    assert_int_equal(run_to_done(e, s, gen, &reason), 3);
    assert_int_equal(reason, LLMKV_FINISH_LENGTH);
    capi_assert_ok(llmkv_session_generate(s, 1));
    assert_int_equal(run_to_done(e, s, gen, &reason), 1);
    assert_int_equal(reason, LLMKV_FINISH_LENGTH);
    assert_int_equal(capi_session_info(s).n_generated, 1);
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* A stop token ends the generation with FINISH_STOP; nothing after it is generated. */
static void test_stop_token(void **state) {
    llmkv_engine *e;
    llmkv_session *s;
    llmkv_session_params sp;
    int32_t ref[MAX_TOKENS], gen[MAX_TOKENS];
    size_t n_ref, n, j;
    uint32_t reason = 0;
    int32_t stop;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    s = capi_session_create(e, NULL, 0);
    capi_append_text(s, PROMPT);
    capi_assert_ok(llmkv_session_generate(s, 6));
    n_ref = run_to_done(e, s, ref, &reason);
    assert_int_equal(n_ref, 6);
    llmkv_session_destroy(s);

    stop = ref[3];
    for (j = 0; ref[j] != stop; ++j) {
    }
    llmkv_session_params_init(&sp);
    sp.stop_tokens = &stop;
    sp.n_stop_tokens = 1;
    s = NULL;
    capi_assert_ok(llmkv_session_create(e, &sp, &s));
    stop = -12345; /* copied at create */
    capi_append_text(s, PROMPT);
    capi_assert_ok(llmkv_session_generate(s, 6));
    n = run_to_done(e, s, gen, &reason);
    assert_int_equal(reason, LLMKV_FINISH_STOP);
    assert_int_equal(capi_session_info(s).finish_reason, LLMKV_FINISH_STOP);
    /* the tokens before the stop token, and possibly the stop token itself */
    assert_true(n == j || n == j + 1);
    assert_memory_equal(gen, ref, n * sizeof(int32_t));
    llmkv_session_destroy(s);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* max_sessions live sessions at once: one more is KV_CAPACITY until one is destroyed. */
static void test_max_sessions(void **state) {
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    llmkv_session_params sp;
    llmkv_session *s[3] = {NULL, NULL, NULL};
    llmkv_session *extra = NULL;
    (void)state;
    CAPI_REQUIRE_MODEL();
    capi_engine_params(&p);
    p.max_sessions = 2;
    capi_assert_ok(llmkv_engine_create(&p, &e));
    llmkv_session_params_init(&sp);
    sp.priority = 7;
    capi_assert_ok(llmkv_session_create(e, &sp, &s[0]));
    capi_assert_ok(llmkv_session_create(e, &sp, &s[1]));
    assert_int_equal(capi_session_info(s[0]).priority, 7);
    capi_assert_error(llmkv_session_create(e, &sp, &extra), LLMKV_ERR_KV_CAPACITY, NULL);
    assert_null(extra);
    assert_int_equal(capi_stats(e).sessions_total, 2);
    llmkv_session_destroy(s[0]);
    capi_assert_ok(llmkv_session_create(e, &sp, &s[2]));
    llmkv_session_destroy(s[1]);
    llmkv_session_destroy(s[2]);
    capi_assert_pool_clean(e);
    llmkv_engine_destroy(e);
}

/* Destroying an engine with live sessions in every state and undelivered events is clean
 * (ASan builds check for leaks and use-after-free). */
static void test_destroy_engine_with_live_sessions(void **state) {
    llmkv_engine *e;
    llmkv_session *s[4];
    llmkv_event ev[4];
    size_t n;
    int i;
    (void)state;
    CAPI_REQUIRE_MODEL();
    e = capi_engine_create();
    for (i = 0; i < 4; ++i) s[i] = capi_session_create(e, NULL, 0);
    /* s[0]: finished, s[1] and s[2]: generating with undelivered events, s[3]: queued input */
    capi_append_text(s[0], PROMPT);
    capi_assert_ok(llmkv_session_generate(s[0], 2));
    capi_drain(e, 20);
    capi_append_text(s[1], PROMPT);
    capi_append_text(s[2], "Once upon a time");
    capi_assert_ok(llmkv_session_generate(s[1], 50));
    capi_assert_ok(llmkv_session_generate(s[2], 50));
    for (i = 0; i < 3; ++i) {
        capi_assert_ok(llmkv_step(e, NULL, 0, &n));
        assert_int_equal(n, 0);
    }
    capi_assert_ok(llmkv_step(e, ev, 1, &n));
    assert_true(llmkv_pending_events(e) > 0);
    capi_append_text(s[3], "Hello there, how are you");
    capi_assert_ok(llmkv_engine_validate(e));
    llmkv_engine_destroy(e);

    /* a second engine: destroy it while a session is queued, before any step */
    e = capi_engine_create();
    s[0] = capi_session_create(e, NULL, 4);
    capi_append_text(s[0], PROMPT);
    capi_assert_ok(llmkv_session_generate(s[0], 0));
    llmkv_engine_destroy(e);
}

/* Parking through the C API on the real model: UNSUPPORTED without a host tier, STATE while
 * generating; a parked session reports the host tier and its second turn equals the second
 * turn of a session that was never parked. */
static void test_park_and_resume(void **state) {
    llmkv_engine_params p;
    llmkv_engine *plain, *e;
    llmkv_session *s, *ref;
    llmkv_session_info info;
    llmkv_stats st;
    int32_t toks[MAX_TOKENS], ref_toks[MAX_TOKENS];
    uint32_t reason = 0;
    size_t n, ref_n, i;
    (void)state;
    CAPI_REQUIRE_MODEL();
    plain = capi_engine_create();
    s = capi_session_create(plain, NULL, 4);
    capi_append_text(s, PROMPT);
    capi_assert_ok(llmkv_session_generate(s, 4));
    run_to_done(plain, s, toks, &reason);
    capi_assert_error(llmkv_session_park(s), LLMKV_ERR_UNSUPPORTED, "kv_host_bytes");
    llmkv_session_destroy(s);
    llmkv_engine_destroy(plain);

    capi_engine_params(&p);
    p.kv_host_bytes = 64ull << 20;
    if (llmkv_engine_create(&p, &e) == LLMKV_ERR_UNSUPPORTED) {
        /* The host tier needs mimalloc (a Linux package dependency; mimalloc.dll on Windows). */
        print_message("SKIP: %s\n", llmkv_last_error());
        skip();
    }
    s = capi_session_create(e, NULL, 8);
    ref = capi_session_create(e, NULL, 8);
    capi_append_text(s, PROMPT);
    capi_append_text(ref, PROMPT);
    /* one at a time: run_to_done skips other sessions' events */
    capi_assert_ok(llmkv_session_generate(s, 8));
    capi_assert_error(llmkv_session_park(s), LLMKV_ERR_STATE, NULL);
    run_to_done(e, s, toks, &reason);
    capi_assert_ok(llmkv_session_generate(ref, 8));
    run_to_done(e, ref, ref_toks, &reason);
    capi_assert_ok(llmkv_session_park(s));
    info = capi_session_info(s);
    assert_int_equal(info.tier, LLMKV_TIER_HOST);
    assert_int_equal(info.state, LLMKV_SESSION_PARKED);
    /* second turn on both: the parked one comes back first */
    capi_append_text(s, " and the capital of Italy is");
    capi_append_text(ref, " and the capital of Italy is");
    capi_assert_ok(llmkv_session_generate(s, 8));
    n = run_to_done(e, s, toks, &reason);
    capi_assert_ok(llmkv_session_generate(ref, 8));
    ref_n = run_to_done(e, ref, ref_toks, &reason);
    assert_int_equal(n, ref_n);
    for (i = 0; i < n; ++i) assert_int_equal(toks[i], ref_toks[i]);
    info = capi_session_info(s);
    assert_int_equal(info.tier, LLMKV_TIER_DEVICE);
    st.struct_size = sizeof(st);
    capi_assert_ok(llmkv_engine_get_stats(e, &st));
    assert_int_equal(st.parks, 1);
    assert_int_equal(st.resumes, 1);
    assert_true(st.bytes_to_host > 0 && st.bytes_to_device > 0);
    capi_assert_ok(llmkv_engine_validate(e));
    llmkv_session_destroy(s);
    llmkv_session_destroy(ref);
    llmkv_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_on_empty_session),
        cmocka_unit_test(test_cancel_when_not_generating),
        cmocka_unit_test(test_generate_twice),
        cmocka_unit_test(test_append_while_generating),
        cmocka_unit_test(test_multi_turn),
        cmocka_unit_test(test_cancel_mid_generation),
        cmocka_unit_test(test_cancel_queued_then_continue),
        cmocka_unit_test(test_append_past_max_context),
        cmocka_unit_test(test_generate_to_max_context),
        cmocka_unit_test(test_state_transitions),
        cmocka_unit_test(test_max_new_tokens_default),
        cmocka_unit_test(test_append_then_step_computes_kv),
        cmocka_unit_test(test_stop_token),
        cmocka_unit_test(test_max_sessions),
        cmocka_unit_test(test_destroy_engine_with_live_sessions),
        cmocka_unit_test(test_park_and_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
