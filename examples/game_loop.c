/*
 * game_loop.c - llmkv inside a game's frame loop (C API 0.4 worker mode).
 *
 * A simulated game runs a 60 frames-per-second loop on its main thread: each frame does
 * FRAME_WORK_MS of "game work" (a busy loop), then talks to llmkv, then sleeps until the next
 * frame. Meanwhile a batch of NPC sessions generates replies, and the game keeps its other
 * cores busy with its own threads (--busy, default: all cores but one). Each NPC, when its
 * reply is done, gets the next line of dialogue.
 *
 * Three ways to drive llmkv are measured, one after the other, each for --seconds and on until
 * every NPC finished a reply (at most --max-seconds):
 *   step     the frame thread calls llmkv_step once per frame (the pre-0.4 way: the frame
 *            waits for a whole forward pass);
 *   worker   llmkv_worker_start; the frame calls only llmkv_worker_poll, read_text and
 *            submit_text, which never wait for a step;
 *   worker+  the same, with thread_priority 10 and spin_us 0 (llmkv yields the cores).
 *
 * For each it prints the frame time (p50, p99, max), the longest time one frame spent in
 * llmkv calls (the stall llmkv adds to a frame), frames that missed their 16.7 ms deadline,
 * and llmkv's throughput (tokens/s, replies). Timings are printed, never asserted: the exit
 * status only says whether every NPC got its replies without an error.
 *
 *   example_game_loop MODEL.gguf [--seconds S] [--max-seconds S] [--npcs N] [--threads T] [--busy
 * B]
 *                     [--mode M]
 */
#define _GNU_SOURCE

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llmkv.h"

/* Online cores: the one call here that differs between POSIX and Windows (MinGW-w64's
 * winpthreads provides the pthreads and POSIX clocks used below). */
#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
static long online_cores(void) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return (long)si.dwNumberOfProcessors;
}
#else
static long online_cores(void) {
    return sysconf(_SC_NPROCESSORS_ONLN);
}
#endif

#define MAX_NPCS 32
#define FRAME_NS 16666667LL
#define FRAME_WORK_MS 4
#define MAX_FRAMES 100000

static const char *const k_lines[] = {
    "Traveler: Good evening! What is this place?",
    "Traveler: Have you heard any rumors lately?",
    "Traveler: What do you sell here?",
    "Traveler: Where can I find the blacksmith?",
    "Traveler: Is the road north safe to travel?",
    "Traveler: Tell me about the old castle.",
};
#define N_LINES (sizeof(k_lines) / sizeof(k_lines[0]))

static const char *const k_personas[] = {
    "You are Mira, the innkeeper of Oakvale. Answer in one or two friendly sentences.",
    "You are Brom, a grumpy blacksmith. Answer in one or two short sentences.",
    "You are Elin, a curious young scholar. Answer in one or two sentences.",
    "You are Tomas, a nervous merchant. Answer in one or two sentences.",
};
#define N_PERSONAS (sizeof(k_personas) / sizeof(k_personas[0]))

typedef struct {
    const char *model;
    double seconds;
    double max_seconds;
    int npcs;
    int threads;
    int busy;
    const char *mode; /* NULL: all three */
} options_t;

typedef struct {
    llmkv_session *s;
    int line;     /* next dialogue line */
    int busy;     /* a reply is being generated */
    long replies; /* replies finished */
    size_t text_bytes;
} npc_t;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(int64_t t) {
    struct timespec ts;
    ts.tv_sec = (time_t)(t / 1000000000LL);
    ts.tv_nsec = (long)(t % 1000000000LL);
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static volatile uint64_t g_sink;
static void busy_work_ns(int64_t ns) {
    int64_t end = now_ns() + ns;
    uint64_t x = 1;
    while (now_ns() < end) {
        int i;
        for (i = 0; i < 1000; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    }
    g_sink = x;
}

/* The game's other threads: busy until told to stop. */
static atomic_int g_busy_stop;
static void *busy_thread(void *arg) {
    (void)arg;
    while (!atomic_load(&g_busy_stop)) busy_work_ns(1000000);
    return NULL;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int check(llmkv_status st, const char *what) {
    if (st == LLMKV_OK) return 0;
    fprintf(stderr, "game_loop: %s: %s: %s\n", what, llmkv_status_string(st), llmkv_last_error());
    return 1;
}

/* The next user turn of an NPC, in the model's chat format (the whole conversation so far
 * is in the session; only the new turn is appended). */
static int npc_turn(llmkv_engine *e, npc_t *npc, int index, char *buf, size_t cap, size_t *len) {
    llmkv_chat_message msgs[2];
    size_t n = 0, k = 0;
    if (npc->line == 0) msgs[n++] = (llmkv_chat_message){"system", k_personas[index % N_PERSONAS]};
    msgs[n++] = (llmkv_chat_message){"user", k_lines[(npc->line + (size_t)index) % N_LINES]};
    if (check(llmkv_chat_format(e, msgs, n, 1, buf, cap, &k), "chat_format")) return 1;
    *len = k;
    return 0;
}

typedef struct {
    long frames, missed, tokens, replies, errors;
    double p50_ms, p99_ms, max_ms, stall_max_ms, stall_p99_ms, tok_per_s;
} result_t;

static int run_mode(const options_t *o, const char *mode, result_t *r) {
    const int worker = strcmp(mode, "step") != 0;
    const int yielding = strcmp(mode, "worker+") == 0;
    llmkv_engine_params p;
    llmkv_engine *e = NULL;
    npc_t npcs[MAX_NPCS];
    int64_t *frame_ns = malloc(sizeof(int64_t) * MAX_FRAMES);
    int64_t *stall_ns = malloc(sizeof(int64_t) * MAX_FRAMES);
    pthread_t busy[64];
    int i, rc = 1;
    long f = 0;
    char turn[2048];
    int64_t t_start, next;

    memset(r, 0, sizeof(*r));
    memset(npcs, 0, sizeof(npcs));
    if (!frame_ns || !stall_ns) return 1;
    llmkv_engine_params_init(&p);
    p.model_path = o->model;
    p.backend = LLMKV_BACKEND_CPU;
    p.n_threads = (uint32_t)o->threads;
    p.max_context = 2048;
    if (yielding) {
        p.thread_priority = 10;
        p.spin_us = 0;
    }
    if (check(llmkv_engine_create(&p, &e), "engine_create")) goto out;
    for (i = 0; i < o->npcs; ++i) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.user_data = &npcs[i];
        sp.max_new_tokens = 40;
        if (check(llmkv_session_create(e, &sp, &npcs[i].s), "session_create")) goto out;
    }
    if (worker && check(llmkv_worker_start(e), "worker_start")) goto out;

    atomic_store(&g_busy_stop, 0);
    for (i = 0; i < o->busy && i < 64; ++i) pthread_create(&busy[i], NULL, busy_thread, NULL);

    t_start = now_ns();
    next = t_start;
    /* At least --seconds, and on until every NPC finished a reply (at most --max-seconds). */
    for (;;) {
        const int64_t elapsed = now_ns() - t_start;
        int all_replied = 1;
        for (i = 0; i < o->npcs; ++i) all_replied = all_replied && npcs[i].replies > 0;
        if (f >= MAX_FRAMES || elapsed >= (int64_t)(o->max_seconds * 1e9)) break;
        if (elapsed >= (int64_t)(o->seconds * 1e9) && all_replied) break;
        const int64_t frame_begin = now_ns();
        int64_t in_llmkv = 0, t0;
        llmkv_event ev[64];
        size_t n = 0, k;

        busy_work_ns(FRAME_WORK_MS * 1000000LL); /* the game's own frame work */

        t0 = now_ns();
        /* Give every idle NPC its next line. */
        for (i = 0; i < o->npcs; ++i) {
            size_t len = 0;
            if (npcs[i].busy) continue;
            if (npc_turn(e, &npcs[i], i, turn, sizeof turn, &len)) goto stop;
            if (worker) {
                if (check(llmkv_session_submit_text(npcs[i].s, turn, len, LLMKV_SUBMIT_GENERATE, 0),
                          "submit"))
                    goto stop;
            } else {
                if (check(llmkv_session_append_text(npcs[i].s, turn, len), "append") ||
                    check(llmkv_session_generate(npcs[i].s, 0), "generate")) {
                    goto stop;
                }
            }
            npcs[i].busy = 1;
            npcs[i].line++;
        }
        /* Events of this frame. */
        if (worker) {
            if (check(llmkv_worker_poll(e, ev, 64, 0, &n), "poll")) goto stop;
        } else {
            if (check(llmkv_step(e, ev, 64, &n), "step")) goto stop;
        }
        for (k = 0; k < n; ++k) {
            npc_t *npc = (npc_t *)ev[k].user_data;
            if (ev[k].kind == LLMKV_EVENT_TOKEN) {
                r->tokens++;
            } else if (ev[k].kind == LLMKV_EVENT_DONE) {
                npc->busy = 0;
                npc->replies++;
                r->replies++;
            } else {
                char msg[256];
                size_t m = 0;
                llmkv_session_submit_error(ev[k].session, msg, sizeof msg, &m);
                fprintf(stderr, "game_loop: ERROR event %s: %s\n",
                        llmkv_status_string(ev[k].status), msg);
                r->errors++;
                npc->busy = 0;
            }
        }
        /* The NPCs' new text (a game would put it in speech bubbles). */
        for (i = 0; i < o->npcs; ++i) {
            char text[512];
            size_t m = 0;
            if (check(llmkv_session_read_text(npcs[i].s, text, sizeof text, &m), "read_text"))
                goto stop;
            npcs[i].text_bytes += m;
            if (i == 0 && m > 0 && o->mode) fwrite(text, 1, m, stdout);
        }
        in_llmkv = now_ns() - t0;

        stall_ns[f] = in_llmkv;
        next += FRAME_NS;
        if (now_ns() < next)
            sleep_until(next);
        else
            next = now_ns(); /* late: the next frame starts now */
        frame_ns[f] = now_ns() - frame_begin;
        if (frame_ns[f] > FRAME_NS + 1000000) r->missed++;
        ++f;
    }
    rc = 0;
stop : {
    const double secs = (double)(now_ns() - t_start) / 1e9;
    atomic_store(&g_busy_stop, 1);
    for (i = 0; i < o->busy && i < 64; ++i) pthread_join(busy[i], NULL);
    if (worker) llmkv_worker_stop(e);
    r->frames = f;
    if (f > 0) {
        qsort(frame_ns, (size_t)f, sizeof(int64_t), cmp_i64);
        qsort(stall_ns, (size_t)f, sizeof(int64_t), cmp_i64);
        r->p50_ms = frame_ns[f / 2] / 1e6;
        r->p99_ms = frame_ns[(f * 99) / 100] / 1e6;
        r->max_ms = frame_ns[f - 1] / 1e6;
        r->stall_p99_ms = stall_ns[(f * 99) / 100] / 1e6;
        r->stall_max_ms = stall_ns[f - 1] / 1e6;
    }
    r->tok_per_s = secs > 0 ? r->tokens / secs : 0;
    for (i = 0; i < o->npcs; ++i) {
        if (npcs[i].replies == 0 || npcs[i].text_bytes == 0) {
            fprintf(stderr, "game_loop: NPC %d finished no reply in %s mode\n", i, mode);
            rc = 1;
        }
    }
    if (r->errors) rc = 1;
}
out:
    llmkv_engine_destroy(e);
    free(frame_ns);
    free(stall_ns);
    return rc;
}

static void usage(void) {
    fprintf(stderr,
            "usage: example_game_loop MODEL.gguf [--seconds S] [--max-seconds S] [--npcs N] "
            "[--threads T] [--busy B]\n"
            "                         [--mode step|worker|worker+]\n");
}

int main(int argc, char **argv) {
    options_t o;
    const char *modes[3] = {"step", "worker", "worker+"};
    result_t res[3];
    int i, n_modes = 3, failed = 0;
    long cores = online_cores();
    if (argc < 2) {
        usage();
        return 2;
    }
    o.model = argv[1];
    o.seconds = 6;
    o.max_seconds = 120;
    o.npcs = 8;
    o.threads = 1;
    o.busy = cores > 1 ? (int)cores - 1 : 0;
    o.mode = NULL;
    for (i = 2; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--seconds"))
            o.seconds = atof(v);
        else if (!strcmp(a, "--max-seconds"))
            o.max_seconds = atof(v);
        else if (!strcmp(a, "--npcs"))
            o.npcs = atoi(v);
        else if (!strcmp(a, "--threads"))
            o.threads = atoi(v);
        else if (!strcmp(a, "--busy"))
            o.busy = atoi(v);
        else if (!strcmp(a, "--mode"))
            o.mode = v;
        else {
            usage();
            return 2;
        }
        ++i;
    }
    if (o.npcs < 1 || o.npcs > MAX_NPCS || o.threads < 1 || o.seconds <= 0 ||
        o.max_seconds < o.seconds || o.busy < 0) {
        usage();
        return 2;
    }
    if (o.mode) {
        if (strcmp(o.mode, "step") && strcmp(o.mode, "worker") && strcmp(o.mode, "worker+")) {
            usage();
            return 2;
        }
        modes[0] = o.mode;
        n_modes = 1;
    }
    printf(
        "game loop: 60 fps, %d ms of game work per frame, %d NPC sessions, llmkv %d thread(s), "
        "%d busy game thread(s) on %ld cores, at least %.0f s per mode\n",
        FRAME_WORK_MS, o.npcs, o.threads, o.busy, cores, o.seconds);
    for (i = 0; i < n_modes; ++i) {
        if (run_mode(&o, modes[i], &res[i])) failed = 1;
    }
    printf("\n%-8s %7s %7s %8s %8s %8s %10s %10s %8s %8s\n", "mode", "frames", "missed", "p50 ms",
           "p99 ms", "max ms", "stall p99", "stall max", "tok/s", "replies");
    for (i = 0; i < n_modes; ++i) {
        const result_t *r = &res[i];
        printf("%-8s %7ld %7ld %8.2f %8.2f %8.2f %10.2f %10.2f %8.1f %8ld\n", modes[i], r->frames,
               r->missed, r->p50_ms, r->p99_ms, r->max_ms, r->stall_p99_ms, r->stall_max_ms,
               r->tok_per_s, r->replies);
    }
    printf(
        "(stall: time one frame spent inside llmkv calls; missed: frames longer than 17.7 ms)\n");
    return failed;
}
