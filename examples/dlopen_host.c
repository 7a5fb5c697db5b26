/* dlopen_host.c - a host for which llmkv is optional: it loads libllmkv at run time through
 * include/llmkv_loader.h (loader/llmkv_loader.c is compiled in; the binary is not linked
 * against libllmkv), says clearly why when it cannot, and otherwise answers one chat
 * message through the function table.
 *
 *   example_dlopen_host [--library PATH] [MODEL] [PROMPT]
 *
 * Without --library: $LLMKV_LIBRARY, else libllmkv.so.0 from the system search path
 * (LD_LIBRARY_PATH, ld.so.cache). MODEL defaults to models/SmolLM2-135M-Instruct.Q4_1.gguf.
 * Build by hand: cc -Iinclude examples/dlopen_host.c loader/llmkv_loader.c -ldl
 */
#include <stdio.h>
#include <string.h>

#include "llmkv_loader.h"

static llmkv_api llmkv; /* every call below is llmkv.NAME(...) for llmkv_NAME(...) */

static int fail(const char *what, llmkv_status st) {
    fprintf(stderr, "%s: %s: %s\n", what, llmkv.status_string(st), llmkv.last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *library = NULL;
    const char *model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    const char *question = "What is the capital of France?";
    char err[1024], prompt[1024], text[256];
    llmkv_engine_params ep;
    llmkv_session_params sp;
    llmkv_engine *engine = NULL;
    llmkv_session *session = NULL;
    llmkv_chat_message msg;
    llmkv_status st;
    size_t n = 0;
    int argi = 1, done = 0, rc = 0;

    if (argc > 2 && strcmp(argv[1], "--library") == 0) {
        library = argv[2];
        argi = 3;
    }
    if (argi < argc) model = argv[argi++];
    if (argi < argc) question = argv[argi++];

    if (llmkv_load(library, &llmkv, err, sizeof err) != LLMKV_LOAD_OK) {
        /* A real host would carry on without the feature; this one has nothing else to do. */
        fprintf(stderr, "llmkv is not available: %s\n", err);
        return 1;
    }
    printf("loaded llmkv %s (built against the %d.%d header)\n", llmkv.version_string(),
           LLMKV_VERSION_MAJOR, LLMKV_VERSION_MINOR);

    llmkv.engine_params_init_sized(&ep, sizeof ep);
    ep.model_path = model;
    if ((st = llmkv.engine_create(&ep, &engine)) != LLMKV_OK) {
        rc = fail("engine_create", st);
        goto out;
    }
    msg.role = "user";
    msg.content = question;
    if ((st = llmkv.chat_format(engine, &msg, 1, 1, prompt, sizeof prompt, &n)) != LLMKV_OK) {
        rc = fail("chat_format", st);
        goto out;
    }
    llmkv.session_params_init_sized(&sp, sizeof sp);
    sp.max_new_tokens = 48;
    if ((st = llmkv.session_create(engine, &sp, &session)) != LLMKV_OK ||
        (st = llmkv.session_append_text(session, prompt, n)) != LLMKV_OK ||
        (st = llmkv.session_generate(session, 0)) != LLMKV_OK) {
        rc = fail("session", st);
        goto out;
    }
    printf("> %s\n", question);
    while (!done) {
        llmkv_event ev[8];
        size_t i, n_ev = 0;
        if ((st = llmkv.step(engine, ev, 8, &n_ev)) != LLMKV_OK) {
            rc = fail("step", st);
            goto out;
        }
        while (llmkv.session_read_text(session, text, sizeof text, &n) == LLMKV_OK && n > 0)
            fwrite(text, 1, n, stdout);
        fflush(stdout);
        for (i = 0; i < n_ev; ++i) {
            if (ev[i].kind == LLMKV_EVENT_DONE)
                done = 1;
            else if (ev[i].kind == LLMKV_EVENT_ERROR) {
                rc = fail("generation", ev[i].status);
                goto out;
            }
        }
        if (n_ev == 0 && llmkv.pending_events(engine) == 0) done = 1; /* no work left */
    }
    printf("\n");

out:
    llmkv.session_destroy(session);
    llmkv.engine_destroy(engine);
    llmkv_unload(&llmkv); /* after every engine is destroyed */
    return rc;
}
