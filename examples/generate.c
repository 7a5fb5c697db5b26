/* generate.c - the smallest complete llmkv host: load a model, run two sessions together
 * with llmkv_step, and print what each wrote.
 *
 *   build/examples/example_generate models/SmolLM2-135M-Instruct.Q4_1.gguf
 */
#include <stdio.h>
#include <string.h>

#include "llmkv.h"

static int fail(const char *what, llmkv_status st) {
    fprintf(stderr, "%s: %s: %s\n", what, llmkv_status_string(st), llmkv_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *questions[2] = {"What is the capital of France?", "Name three primary colors."};
    llmkv_engine_params ep;
    llmkv_engine *engine = NULL;
    llmkv_session *sessions[2] = {NULL, NULL};
    llmkv_status st;
    int i, live = 2;

    llmkv_engine_params_init(&ep);
    ep.model_path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if ((st = llmkv_engine_create(&ep, &engine)) != LLMKV_OK) return fail("engine_create", st);

    for (i = 0; i < 2; ++i) {
        llmkv_session_params sp;
        llmkv_chat_message msg;
        char prompt[512];
        size_t n = 0;
        llmkv_session_params_init(&sp);
        sp.max_new_tokens = 48;
        sp.user_data = (void *)questions[i];
        msg.role = "user";
        msg.content = questions[i];
        if ((st = llmkv_chat_format(engine, &msg, 1, 1, prompt, sizeof(prompt), &n)) != LLMKV_OK)
            return fail("chat_format", st);
        if ((st = llmkv_session_create(engine, &sp, &sessions[i])) != LLMKV_OK)
            return fail("session_create", st);
        if ((st = llmkv_session_append_text(sessions[i], prompt, n)) != LLMKV_OK)
            return fail("append_text", st);
        if ((st = llmkv_session_generate(sessions[i], 0)) != LLMKV_OK) return fail("generate", st);
    }

    /* Both sessions advance in the same steps; events tell who finished. */
    while (live > 0) {
        llmkv_event events[8];
        size_t n = 0, k;
        if ((st = llmkv_step(engine, events, 8, &n)) != LLMKV_OK) return fail("step", st);
        for (k = 0; k < n; ++k) {
            if (events[k].kind == LLMKV_EVENT_DONE || events[k].kind == LLMKV_EVENT_ERROR) --live;
        }
    }
    for (i = 0; i < 2; ++i) {
        char text[4096];
        size_t n = 0;
        llmkv_session_read_text(sessions[i], text, sizeof(text) - 1, &n);
        text[n] = '\0';
        printf("Q: %s\nA: %s\n\n", questions[i], text);
        llmkv_session_destroy(sessions[i]);
    }
    llmkv_engine_destroy(engine);
    return 0;
}
