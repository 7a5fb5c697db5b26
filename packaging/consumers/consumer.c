/* A program that uses an installed llmkv the way a user's would: loads the model given as
 * argv[1] (else $LLMKV_MODEL), generates up to 24 tokens greedily for a prompt and prints
 * them. Exit 0 when text came out, 77 (skipped) without a model, 1 on any error. Built by
 * packaging/consumers/pkgconfig/build.sh (pkg-config) and packaging/consumers/cmake
 * (find_package(llmkv)) against packages or a staging prefix. */
#include <llmkv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CONSUMER_NAME
#define CONSUMER_NAME "consumer"
#endif

static int fail(const char *what, llmkv_status st) {
    fprintf(stderr, CONSUMER_NAME ": %s: %s (%s)\n", what, llmkv_status_string(st), llmkv_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : getenv("LLMKV_MODEL");
    FILE *f = model && *model ? fopen(model, "rb") : NULL;
    if (!f) {
        printf(CONSUMER_NAME ": SKIP: no model (pass a GGUF path or set LLMKV_MODEL)\n");
        return 77;
    }
    fclose(f);
    /* Same major, and at least the minor of the header it was built against. */
    if (llmkv_version() / 10000 != LLMKV_VERSION_MAJOR || llmkv_version() < LLMKV_VERSION_NUMBER / 100 * 100) {
        fprintf(stderr, CONSUMER_NAME ": library %s, header %d\n", llmkv_version_string(), LLMKV_VERSION_NUMBER);
        return 1;
    }
    printf(CONSUMER_NAME ": llmkv %s (header %d.%d.%d)\n", llmkv_version_string(), LLMKV_VERSION_MAJOR,
           LLMKV_VERSION_MINOR, LLMKV_VERSION_PATCH);

    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = model;
    ep.backend = LLMKV_BACKEND_CPU;
    ep.n_threads = 2;
    llmkv_engine *engine = NULL;
    llmkv_status st = llmkv_engine_create(&ep, &engine);
    if (st != LLMKV_OK) return fail("engine_create", st);

    llmkv_session_params sp;
    llmkv_session_params_init(&sp);
    sp.max_new_tokens = 24;
    llmkv_session *s = NULL;
    if ((st = llmkv_session_create(engine, &sp, &s)) != LLMKV_OK) return fail("session_create", st);
    const char *prompt = "The capital of France is";
    if ((st = llmkv_session_append_text(s, prompt, strlen(prompt))) != LLMKV_OK) return fail("append_text", st);
    if ((st = llmkv_session_generate(s, 0)) != LLMKV_OK) return fail("generate", st);

    char out[4096];
    size_t used = 0;
    int done = 0, tokens = 0;
    for (int iter = 0; !done && iter < 1000; ++iter) {
        llmkv_event ev[16];
        size_t n = 0;
        if ((st = llmkv_step(engine, ev, 16, &n)) != LLMKV_OK) return fail("step", st);
        for (size_t i = 0; i < n; ++i) {
            if (ev[i].kind == LLMKV_EVENT_TOKEN) ++tokens;
            if (ev[i].kind == LLMKV_EVENT_DONE) done = 1;
            if (ev[i].kind == LLMKV_EVENT_ERROR) return fail("event", (llmkv_status)ev[i].status);
        }
        size_t len = 0;
        if ((st = llmkv_session_read_text(s, out + used, sizeof out - 1 - used, &len)) != LLMKV_OK)
            return fail("read_text", st);
        used += len;
        if (n == 0 && !done) break;
    }
    out[used] = '\0';
    printf(CONSUMER_NAME ": %d tokens: %s%s\n", tokens, prompt, out);
    llmkv_session_destroy(s);
    llmkv_engine_destroy(engine);
    if (tokens == 0 || used == 0) {
        fprintf(stderr, CONSUMER_NAME ": no text generated\n");
        return 1;
    }
    return 0;
}
