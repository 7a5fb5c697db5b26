/* serve.c - many conversations in a fixed KV budget: a small device pool, a host tier,
 * priorities, and parking idle conversations between turns. Twelve users each ask a
 * question; one of them is urgent (higher priority). After the first turn every
 * conversation is parked (its KV moves to the host tier); the second turn brings each back
 * and continues it. The pool is too small for all of them at once, so the engine preempts
 * (swapping to the host tier) and resumes on its own; the answers are those of an
 * unconstrained run.
 *
 *   build/examples/example_serve models/SmolLM2-135M-Instruct.Q4_1.gguf
 */
#include <stdio.h>
#include <string.h>

#include "llmkv.h"

#define N_USERS 12

static int fail(const char *what, llmkv_status st) {
    fprintf(stderr, "%s: %s: %s\n", what, llmkv_status_string(st), llmkv_last_error());
    return 1;
}

/* Appends one chat turn (formatted with the model's chat template) and asks for an answer.
 * A later turn starts at its user message: the template's default system prompt belongs
 * to the start of a conversation only. */
static llmkv_status ask(llmkv_engine *e, llmkv_session *s, const char *question, int first) {
    llmkv_chat_message msg;
    char prompt[1024];
    const char *text = prompt, *user;
    size_t n = 0;
    llmkv_status st;
    msg.role = "user";
    msg.content = question;
    st = llmkv_chat_format(e, &msg, 1, 1, prompt, sizeof(prompt), &n);
    if (st != LLMKV_OK) return st;
    user = strstr(prompt, "<|im_start|>user");
    if (!first && user) text = user;
    st = llmkv_session_append_text(s, text, strlen(text));
    if (st != LLMKV_OK) return st;
    return llmkv_session_generate(s, 0);
}

/* Steps until no session has work, printing each finished answer. */
static llmkv_status run_turn(llmkv_engine *e, llmkv_session **sessions, const char **names) {
    llmkv_event ev[64];
    size_t n = 0, i;
    int k;
    llmkv_status st;
    for (;;) {
        if ((st = llmkv_step(e, ev, 64, &n)) != LLMKV_OK) return st;
        if (n == 0) return LLMKV_OK;
        for (i = 0; i < n; ++i) {
            if (ev[i].kind == LLMKV_EVENT_ERROR)
                fprintf(stderr, "a session failed: %s\n", llmkv_status_string(ev[i].status));
            if (ev[i].kind != LLMKV_EVENT_DONE) continue;
            for (k = 0; k < N_USERS; ++k) {
                char text[2048];
                size_t len = 0;
                if (sessions[k] != ev[i].session) continue;
                llmkv_session_read_text(sessions[k], text, sizeof(text) - 1, &len);
                text[len] = '\0';
                printf("[%s] %s\n", names[k], text);
            }
        }
    }
}

int main(int argc, char **argv) {
    static const char *names[N_USERS] = {"ada", "ben", "cai", "dee", "eli", "fay",
                                         "gus", "hal", "ivy", "jon", "kit", "lou"};
    static const char *topics[N_USERS] = {"rivers", "bread", "stars", "bees",   "winter", "bridges",
                                          "apples", "boats", "bells", "clocks", "maps",   "owls"};
    llmkv_engine_params ep;
    llmkv_engine *engine = NULL;
    llmkv_session *sessions[N_USERS];
    llmkv_stats st_out;
    llmkv_status st;
    int k;

    llmkv_engine_params_init(&ep);
    ep.model_path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    ep.kv_dtype_k = LLMKV_KV_INT8; /* half the bytes of f16 */
    ep.kv_dtype_v = LLMKV_KV_INT8;
    ep.kv_device_bytes = 8u << 20; /* room for a few conversations at a time */
    ep.kv_host_bytes = 64u << 20;  /* where parked and swapped-out KV goes */
    if ((st = llmkv_engine_create(&ep, &engine)) != LLMKV_OK) return fail("engine_create", st);

    for (k = 0; k < N_USERS; ++k) {
        llmkv_session_params sp;
        char q[256];
        llmkv_session_params_init(&sp);
        sp.max_new_tokens = 40;
        sp.priority = k == 7 ? 10 : 0; /* hal is urgent: runs first, preempted last */
        if ((st = llmkv_session_create(engine, &sp, &sessions[k])) != LLMKV_OK)
            return fail("session_create", st);
        snprintf(q, sizeof(q), "Write two sentences about %s.", topics[k]);
        if ((st = ask(engine, sessions[k], q, 1)) != LLMKV_OK) return fail("ask", st);
    }
    printf("-- first turn (hal has priority 10)\n");
    if ((st = run_turn(engine, sessions, names)) != LLMKV_OK) return fail("step", st);

    /* Between turns: park everyone (as a server would while users type). */
    for (k = 0; k < N_USERS; ++k) {
        if ((st = llmkv_session_park(sessions[k])) != LLMKV_OK) return fail("park", st);
    }
    for (k = 0; k < N_USERS; ++k) {
        if ((st = ask(engine, sessions[k], "Now say it in five words.", 0)) != LLMKV_OK)
            return fail("ask", st);
    }
    printf("-- second turn (each conversation comes back from the host tier)\n");
    if ((st = run_turn(engine, sessions, names)) != LLMKV_OK) return fail("step", st);

    st_out.struct_size = sizeof(st_out);
    llmkv_engine_get_stats(engine, &st_out);
    printf(
        "-- %u device blocks, %llu steps, %llu tokens generated; %llu parks, %llu swaps, %llu "
        "resumes, "
        "%llu preemptions; %.1f MiB to the host tier, %.1f MiB back\n",
        st_out.blocks_total, (unsigned long long)st_out.steps,
        (unsigned long long)st_out.tokens_generated, (unsigned long long)st_out.parks,
        (unsigned long long)st_out.swaps, (unsigned long long)st_out.resumes,
        (unsigned long long)st_out.preemptions, st_out.bytes_to_host / 1048576.0,
        st_out.bytes_to_device / 1048576.0);
    for (k = 0; k < N_USERS; ++k) llmkv_session_destroy(sessions[k]);
    llmkv_engine_destroy(engine);
    return 0;
}
