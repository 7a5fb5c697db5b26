/* llmkv soak: hours of random multi-session traffic through the public C API only.
 *
 * 64 session slots see arrivals, prompt turns and generations (greedy and sampled), cancels,
 * parks, forks, departures, sessions made from prefix handles (created, saved, loaded,
 * released) and prompts that share system text (the automatic prefix cache), on an engine
 * with a device pool small enough to preempt and a host tier. Every --interval seconds one
 * CSV row: time, tokens/s, RSS, live sessions, llmkv_engine_validate, and engine stats. At
 * the end a summary; the exit status is non-zero when a validation failed, a call failed
 * unexpectedly, or RSS grew beyond the tolerance after warm-up.
 *
 *   llmkv_soak -m MODEL [--minutes M] [--csv PATH] [--interval S] [--sessions N] [--seed S]
 *              [--threads T] [--rss-tolerance-mib X] [--device-kib K] [--host-mib H]
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <llmkv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SESSIONS 256
#define MAX_PREFIXES 4
#define MAX_TOKENS 4096

typedef struct {
    llmkv_session *s;
    int generating;    /* generate calls whose DONE / ERROR event has not arrived yet */
    uint32_t n_tokens; /* context length after the last settled turn */
} Slot;

typedef struct {
    const char *model;
    double minutes;
    const char *csv;
    double interval;
    int sessions;
    unsigned seed;
    unsigned threads;
    double rss_tolerance_mib;
    unsigned device_kib;
    unsigned host_mib;
} Options;

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static int chance(double p) {
    return (rnd() % 1000000u) < (uint32_t)(p * 1000000.0);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double rss_mib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0.0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

static const char *kWords[] = {
    "the",    "village", "river", "lantern", "market", "traveler", "bread", "winter",
    "storm",  "harbor",  "north", "song",    "castle", "old",      "green", "door",
    "silver", "road",    "quiet", "fire",    "why",    "where",    "tell",  "me",
    "about",  "a",       "story", "of",      "and",    "then",
};
static const char *kSystems[] = {
    "You are a helpful villager in a small mountain town. Answer briefly and kindly.",
    "You are the harbor master. You know every ship, every tide and every sailor by name.",
    "You are a travelling merchant who sells maps, spices and stories from distant lands.",
    "You are the keeper of the old library. You speak slowly and quote forgotten books.",
};

static int g_unexpected = 0;
static int check(llmkv_status st, const char *what) {
    if (st == LLMKV_OK) return 1;
    /* Expected under pressure: the pool, the host tier or max_sessions is full; a session
     * longer than the device pool (blocks in the host tier) cannot be forked or made a prefix. */
    if (st == LLMKV_ERR_KV_CAPACITY || st == LLMKV_ERR_UNSUPPORTED) return 0;
    ++g_unexpected;
    fprintf(stderr, "soak: %s: %s (%s)\n", what, llmkv_status_string(st), llmkv_last_error());
    return 0;
}

static size_t tokenize(llmkv_engine *e, const char *text, int bos, int32_t *out, size_t cap) {
    size_t n = 0;
    if (llmkv_tokenize(e, text, strlen(text), bos ? LLMKV_TOKENIZE_ADD_BOS : 0, out, cap, &n) !=
        LLMKV_OK)
        return 0;
    return n;
}

/* A random user turn of a few words. */
static size_t user_turn(llmkv_engine *e, int32_t *out, size_t cap) {
    char text[512];
    size_t len = 0;
    int words = 3 + (int)(rnd() % 24);
    for (int i = 0; i < words && len + 16 < sizeof(text); ++i) {
        const char *w = kWords[rnd() % (sizeof(kWords) / sizeof(kWords[0]))];
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%s", i ? " " : "\n", w);
    }
    return tokenize(e, text, 0, out, cap);
}

static void sampling(llmkv_session_params *sp) {
    llmkv_session_params_init(sp);
    if (chance(0.5)) {
        sp->sampling.temperature = 0.8f;
        sp->sampling.top_k = 40;
        sp->sampling.top_p = 0.95f;
        sp->sampling.seed = rnd();
    }
    sp->priority = (int32_t)(rnd() % 3);
}

static void usage(void) {
    fprintf(stderr,
            "usage: llmkv_soak -m MODEL [--minutes M (10)] [--csv PATH (soak.csv)] [--interval S "
            "(10)]\n"
            "                  [--sessions N (64)] [--seed S (1)] [--threads T (0 = all)]\n"
            "                  [--rss-tolerance-mib X (32)] [--device-kib K (0 = 1/4 of what the "
            "sessions need)]\n"
            "                  [--host-mib H (64)]\n");
}

int main(int argc, char **argv) {
    Options o = {NULL, 10.0, "soak.csv", 10.0, 64, 1, 0, 32.0, 0, 64};
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (!v) {
            usage();
            return 2;
        }
        ++i;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--minutes"))
            o.minutes = atof(v);
        else if (!strcmp(a, "--csv"))
            o.csv = v;
        else if (!strcmp(a, "--interval"))
            o.interval = atof(v);
        else if (!strcmp(a, "--sessions"))
            o.sessions = atoi(v);
        else if (!strcmp(a, "--seed"))
            o.seed = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--threads"))
            o.threads = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--rss-tolerance-mib"))
            o.rss_tolerance_mib = atof(v);
        else if (!strcmp(a, "--device-kib"))
            o.device_kib = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--host-mib"))
            o.host_mib = (unsigned)strtoul(v, NULL, 10);
        else {
            usage();
            return 2;
        }
    }
    if (!o.model) o.model = getenv("LLMKV_MODEL");
    if (!o.model || o.sessions < 1 || o.sessions > MAX_SESSIONS - 16 || o.interval <= 0 ||
        o.minutes <= 0) {
        usage();
        return 2;
    }
    g_rng ^= (uint64_t)o.seed * 0x9E3779B97F4A7C15ull;

    llmkv_engine_params ep;
    llmkv_engine_params_init(&ep);
    ep.model_path = o.model;
    ep.n_threads = o.threads;
    ep.max_sessions = (uint32_t)o.sessions + 16; /* sessions, forks and prefix handles */
    ep.max_context = 1024;
    ep.kv_host_bytes = (uint64_t)o.host_mib << 20;
    llmkv_engine *e = NULL;
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    if (o.device_kib == 0) {
        /* Size the pool from the model: a quarter of what every slot at ~400 tokens needs. */
        if (llmkv_engine_create(&ep, &e) != LLMKV_OK ||
            llmkv_engine_get_info(e, &info) != LLMKV_OK) {
            fprintf(stderr, "soak: engine: %s\n", llmkv_last_error());
            return 1;
        }
        llmkv_engine_destroy(e);
        e = NULL;
        ep.kv_device_bytes =
            (uint64_t)info.kv_bytes_per_token_device * 400u * (uint64_t)o.sessions / 4u;
    } else {
        ep.kv_device_bytes = (uint64_t)o.device_kib << 10;
    }
    if (llmkv_engine_create(&ep, &e) != LLMKV_OK || llmkv_engine_get_info(e, &info) != LLMKV_OK) {
        fprintf(stderr, "soak: engine: %s\n", llmkv_last_error());
        return 1;
    }
    fprintf(stderr,
            "soak: model %s (%s), %u threads, %u device blocks of %u tokens (%.1f MiB), host tier "
            "%u MiB, %d sessions, %.1f min\n",
            info.model_name, info.backend_name, info.n_threads, info.kv_blocks_total,
            info.kv_block_tokens, (double)info.kv_device_bytes / 1048576.0, o.host_mib, o.sessions,
            o.minutes);

    FILE *csv = fopen(o.csv, "w");
    if (!csv) {
        fprintf(stderr, "soak: cannot write %s: %s\n", o.csv, strerror(errno));
        return 1;
    }
    fprintf(csv,
            "t_s,tokens_per_s,rss_mib,live_sessions,generating,validate_failures,steps,tokens_"
            "generated,"
            "tokens_prefilled,preemptions,swaps,parks,resumes,prefix_hit_tokens,blocks_used,blocks_"
            "cached,"
            "host_mib_used,events_error\n");

    char snap_path[4096];
    snprintf(snap_path, sizeof(snap_path), "%s.prefix.snap", o.csv);

    Slot slots[MAX_SESSIONS];
    memset(slots, 0, sizeof(slots));
    llmkv_prefix *prefixes[MAX_PREFIXES] = {NULL};
    int32_t *buf = malloc(sizeof(int32_t) * MAX_TOKENS);
    llmkv_event events[256];
    if (!buf) return 1;

    const double t0 = now_s(), t_end = t0 + o.minutes * 60.0;
    double t_next = t0 + o.interval, t_last = t0;
    uint64_t tokens_total = 0, tokens_window = 0, validate_failures = 0, error_events = 0,
             arrivals = 0, departures = 0;
    uint64_t forks = 0, cancels = 0, park_calls = 0, handles_made = 0, saves = 0, loads = 0;
    int n_samples = 0;
    double rss_first = 0, rss_last = 0, rss_max = 0;
    double tps_min = 1e30, tps_max = 0, tps_sum = 0;
    static double rss_samples[100000];
    static double tps_samples[100000];

    while (now_s() < t_end) {
        /* ---- traffic: a few random actions per step ---- */
        for (int a = 0; a < 4; ++a) {
            int k = (int)(rnd() % (uint32_t)o.sessions);
            Slot *sl = &slots[k];
            if (!sl->s) {
                if (!chance(0.5)) continue;
                /* Arrival: from a prefix handle, or with a shared system prompt, or plain. */
                llmkv_session_params sp;
                sampling(&sp);
                int h = (int)(rnd() % MAX_PREFIXES);
                int from_handle = prefixes[h] && chance(0.4);
                if (from_handle) sp.prefix = prefixes[h];
                sp.max_new_tokens = 8 + rnd() % 40;
                if (!check(llmkv_session_create(e, &sp, &sl->s), "session_create")) continue;
                ++arrivals;
                size_t n = 0;
                if (!from_handle && chance(0.7)) {
                    n = tokenize(e, kSystems[rnd() % 4], 1, buf, MAX_TOKENS);
                }
                n += user_turn(e, buf + n, MAX_TOKENS - n);
                if (check(llmkv_session_append(sl->s, buf, n), "append") &&
                    check(llmkv_session_generate(sl->s, 0), "generate")) {
                    ++sl->generating;
                }
                continue;
            }
            llmkv_session_info si;
            si.struct_size = sizeof(si);
            if (!check(llmkv_session_get_info(sl->s, &si), "session_get_info")) continue;
            /* Generating until its DONE or ERROR event (a swapped-out generation reads PARKED;
             * a cancelled one reads IDLE before its DONE event is taken). */
            if (sl->generating || si.state == LLMKV_SESSION_QUEUED ||
                si.state == LLMKV_SESSION_PREFILLING || si.state == LLMKV_SESSION_GENERATING) {
                if (si.state != LLMKV_SESSION_IDLE && si.state != LLMKV_SESSION_FINISHED &&
                    si.state != LLMKV_SESSION_PARKED && chance(0.02)) {
                    /* STATE is not a failure here: a session may be QUEUED or PREFILLING with input
                     * only (a fork of a preempted session, input left by an ERROR event). */
                    llmkv_status cs = llmkv_session_cancel(sl->s);
                    if (cs == LLMKV_OK)
                        ++cancels; /* its DONE event follows */
                    else if (cs != LLMKV_ERR_STATE)
                        check(cs, "cancel");
                }
                continue;
            }
            if (si.n_tokens + 96 >= info.max_context || chance(0.08)) {
                /* Departure (and now and then the session becomes a prefix handle first). */
                if (chance(0.1)) {
                    int h = (int)(rnd() % MAX_PREFIXES);
                    llmkv_prefix *p = NULL;
                    if (check(llmkv_session_to_prefix(sl->s, &p), "session_to_prefix")) {
                        llmkv_prefix_release(prefixes[h]);
                        prefixes[h] = p;
                        ++handles_made;
                    }
                }
                llmkv_session_destroy(sl->s);
                sl->s = NULL;
                sl->generating = 0;
                ++departures;
                continue;
            }
            if (chance(0.15)) {
                check(llmkv_session_park(sl->s), "park");
                ++park_calls;
                continue;
            }
            if (chance(0.1)) {
                /* Fork into a free slot, then both continue differently. */
                for (int j = 0; j < o.sessions; ++j) {
                    if (slots[j].s) continue;
                    if (check(llmkv_session_fork(sl->s, &slots[j].s), "fork")) ++forks;
                    break;
                }
                continue;
            }
            /* Another turn. */
            size_t n = user_turn(e, buf, MAX_TOKENS);
            if (si.n_tokens + n + 64 < info.max_context &&
                check(llmkv_session_append(sl->s, buf, n), "append") &&
                check(llmkv_session_generate(sl->s, 8 + rnd() % 40), "generate")) {
                ++sl->generating;
            }
        }
        /* Prefix handles: created from a system prompt, saved and loaded back, released. */
        if (chance(0.01)) {
            int h = (int)(rnd() % MAX_PREFIXES);
            size_t n = tokenize(e, kSystems[rnd() % 4], 1, buf, MAX_TOKENS);
            llmkv_prefix *p = NULL;
            if (n && check(llmkv_prefix_create(e, buf, n, &p), "prefix_create")) {
                llmkv_prefix_release(prefixes[h]);
                prefixes[h] = p;
                ++handles_made;
                if (chance(0.5) && check(llmkv_prefix_save(p, snap_path), "prefix_save")) {
                    ++saves;
                    llmkv_prefix *q = NULL;
                    if (check(llmkv_prefix_load(e, snap_path, &q), "prefix_load")) {
                        llmkv_prefix_release(prefixes[h]);
                        prefixes[h] = q;
                        ++loads;
                    }
                }
            }
        }

        /* ---- one step ---- */
        size_t n_ev = 0;
        if (check(llmkv_step(e, events, 256, &n_ev), "step")) {
            for (size_t i = 0; i < n_ev; ++i) {
                if (events[i].kind == LLMKV_EVENT_TOKEN) ++tokens_window;
                if (events[i].kind == LLMKV_EVENT_ERROR) ++error_events;
                if (events[i].kind == LLMKV_EVENT_DONE || events[i].kind == LLMKV_EVENT_ERROR) {
                    for (int k = 0; k < o.sessions; ++k) {
                        if (slots[k].s == events[i].session && slots[k].generating > 0)
                            --slots[k].generating;
                    }
                }
            }
        }
        /* Text is read and dropped, as a host would stream it. */
        for (int k = 0; k < o.sessions; ++k) {
            char text[512];
            size_t nb = 0;
            if (slots[k].s) llmkv_session_read_text(slots[k].s, text, sizeof(text), &nb);
        }

        /* ---- a sample ---- */
        const double t = now_s();
        if (t >= t_next || t >= t_end) {
            const double tps = (double)tokens_window / (t - t_last);
            tokens_total += tokens_window;
            tokens_window = 0;
            t_last = t;
            t_next += o.interval;
            if (llmkv_engine_validate(e) != LLMKV_OK) {
                ++validate_failures;
                fprintf(stderr, "soak: validate: %s\n", llmkv_last_error());
            }
            llmkv_stats st;
            st.struct_size = sizeof(st);
            check(llmkv_engine_get_stats(e, &st), "get_stats");
            int live = 0, gen = 0;
            for (int k = 0; k < o.sessions; ++k) {
                live += slots[k].s != NULL;
                gen += slots[k].generating > 0;
            }
            const double rss = rss_mib();
            fprintf(csv,
                    "%.1f,%.1f,%.1f,%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%u,%u,%.2f,%"
                    "llu\n",
                    t - t0, tps, rss, live, gen, (unsigned long long)validate_failures,
                    (unsigned long long)st.steps, (unsigned long long)st.tokens_generated,
                    (unsigned long long)st.tokens_prefilled, (unsigned long long)st.preemptions,
                    (unsigned long long)st.swaps, (unsigned long long)st.parks,
                    (unsigned long long)st.resumes, (unsigned long long)st.prefix_hit_tokens,
                    st.blocks_used, st.blocks_cached, (double)st.host_bytes_used / 1048576.0,
                    (unsigned long long)error_events);
            fflush(csv);
            if (n_samples < 100000) {
                rss_samples[n_samples] = rss;
                tps_samples[n_samples] = tps;
            }
            if (n_samples == 0) rss_first = rss;
            rss_last = rss;
            if (rss > rss_max) rss_max = rss;
            if (tps < tps_min) tps_min = tps;
            if (tps > tps_max) tps_max = tps;
            tps_sum += tps;
            ++n_samples;
            fprintf(stderr,
                    "soak: t=%6.1fs %7.1f tok/s  RSS %7.1f MiB  live %3d  preempt %llu swaps %llu "
                    "parks %llu  validate failures %llu\n",
                    t - t0, tps, rss, live, (unsigned long long)st.preemptions,
                    (unsigned long long)st.swaps, (unsigned long long)st.parks,
                    (unsigned long long)validate_failures);
        }
    }

    /* ---- summary ---- */
    llmkv_stats st;
    st.struct_size = sizeof(st);
    llmkv_engine_get_stats(e, &st);
    for (int k = 0; k < o.sessions; ++k) llmkv_session_destroy(slots[k].s);
    for (int h = 0; h < MAX_PREFIXES; ++h) llmkv_prefix_release(prefixes[h]);
    const int final_ok = llmkv_engine_validate(e) == LLMKV_OK;
    llmkv_engine_destroy(e);
    fclose(csv);
    remove(snap_path);
    free(buf);

    /* RSS after warm-up: the largest RSS of the first fifth of the run is the plateau. */
    const int n = n_samples < 100000 ? n_samples : 100000;
    const int warm = n / 5 > 0 ? n / 5 : 1;
    double rss_warm = 0, tps_first = 0, tps_last = 0;
    for (int i = 0; i < warm && i < n; ++i)
        rss_warm = rss_samples[i] > rss_warm ? rss_samples[i] : rss_warm;
    int q = n / 4 > 0 ? n / 4 : 1;
    for (int i = 0; i < q && i < n; ++i) tps_first += tps_samples[i] / q;
    for (int i = n - q; i < n; ++i) tps_last += i >= 0 ? tps_samples[i] / q : 0;
    double rss_after_warm = 0;
    for (int i = warm; i < n; ++i)
        rss_after_warm = rss_samples[i] > rss_after_warm ? rss_samples[i] : rss_after_warm;
    const double growth = n > warm ? rss_after_warm - rss_warm : 0.0;
    const int rss_ok = growth <= o.rss_tolerance_mib;
    printf(
        "soak summary: %.1f min, %d samples every %.0f s, %llu tokens generated (%.1f tok/s "
        "overall)\n",
        (now_s() - t0) / 60.0, n_samples, o.interval,
        (unsigned long long)(tokens_total + tokens_window),
        (double)(tokens_total + tokens_window) / (now_s() - t0));
    printf(
        "  throughput tok/s per interval: min %.1f, mean %.1f, max %.1f; first quarter %.1f, last "
        "quarter %.1f\n",
        n_samples ? tps_min : 0, n_samples ? tps_sum / n_samples : 0, tps_max, tps_first, tps_last);
    printf(
        "  RSS MiB: first %.1f, last %.1f, max %.1f; after warm-up (first %d samples, max %.1f) it "
        "grew by %.1f MiB"
        " (tolerance %.1f): %s\n",
        rss_first, rss_last, rss_max, warm, rss_warm, growth, o.rss_tolerance_mib,
        rss_ok ? "ok" : "FAIL");
    printf(
        "  traffic: %llu arrivals, %llu departures, %llu forks, %llu cancels, %llu park calls, "
        "%llu prefix handles "
        "(%llu saved, %llu loaded), %llu steps\n",
        (unsigned long long)arrivals, (unsigned long long)departures, (unsigned long long)forks,
        (unsigned long long)cancels, (unsigned long long)park_calls,
        (unsigned long long)handles_made, (unsigned long long)saves, (unsigned long long)loads,
        (unsigned long long)st.steps);
    printf(
        "  engine: %llu preemptions, %llu swaps, %llu parks, %llu resumes, %llu prefix-hit tokens, "
        "%llu demotions, "
        "%llu promotions, %llu ERROR events (KV capacity)\n",
        (unsigned long long)st.preemptions, (unsigned long long)st.swaps,
        (unsigned long long)st.parks, (unsigned long long)st.resumes,
        (unsigned long long)st.prefix_hit_tokens, (unsigned long long)st.demotions,
        (unsigned long long)st.promotions, (unsigned long long)error_events);
    printf("  validate failures: %llu (final validate %s), unexpected call failures: %d\n",
           (unsigned long long)validate_failures, final_ok ? "ok" : "FAILED", g_unexpected);
    const int ok = validate_failures == 0 && final_ok && g_unexpected == 0 && rss_ok;
    printf("soak: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
