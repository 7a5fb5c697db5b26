// Fault-injection sweeps (built only with -DLLMKV_FAULT_INJECTION=ON; ctest label `fault`).
//
//   llmkv_fault_tests create     n = 1, 2, ...: the n-th allocation of engine creation fails
//                                 (tiny model, host tier). Every failure is a clean status
//                                 (OUT_OF_MEMORY; IO for the model's mmap) and leaves no
//                                 leaked memory (LeakSanitizer, when built with ASan), file
//                                 descriptor, thread or mapping behind.
//   llmkv_fault_tests workload   n = 1, 2, ...: the n-th allocation of a multi-session C API
//                                 workload fails. The failing call returns a clean status;
//                                 then, disarmed, llmkv_engine_validate is OK, every session
//                                 holds exactly the tokens it held before the call, the call
//                                 succeeds when repeated, and the workload ends with output
//                                 identical to an uninjected run (greedy).
//   llmkv_fault_tests snapshot   snapshot writer I/O failures: ENOSPC (at every write), a
//                                 short write then ENOSPC, a write making no progress, fsync,
//                                 close, rename and temp-file creation failing: LLMKV_ERR_IO,
//                                 no partial or temporary file, an existing file untouched;
//                                 partial writes that do progress still produce a good file.
//
// Each sweep stops at the first n where nothing failed, and prints the allocation sites hit,
// the failures injected and the verdict.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LLMKV_HAVE_LSAN 1
#endif

#include "common/fault.h"
#include "llmkv.h"
#include "tiny_model.h"

#ifndef LLMKV_FAULT_INJECTION
#error "tests/fault needs a build with -DLLMKV_FAULT_INJECTION=ON"
#endif

namespace fault = llmkv::fault;
using fault::Site;

extern uint64_t g_nothrow_injected;  // counted_new.cpp

// Global operator new and delete are replaced in counted_new.cpp (a separate file, so the
// compiler does not pair inlined malloc/free calls with new/delete expressions here).

namespace {

int g_errors = 0;

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            ++g_errors;                                                          \
            std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                                   \
            std::fprintf(stderr, "\n");                                          \
        }                                                                        \
    } while (0)

std::string g_model;

constexpr uint32_t kBlockTokens = 16;
constexpr uint64_t kBlockBytes = 2 * 2 * 16 * kBlockTokens * 2 *
                                 2;  // tiny model: layers x kv heads x dims x tokens x fp16 x K,V
constexpr uint64_t kWorkloadBlocks = 12;  // the workload's device pool (the create sweep uses 23)

llmkv_engine_params engine_params() {
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = g_model.c_str();
    p.backend = LLMKV_BACKEND_CPU;
    p.n_threads = 2;
    p.kv_block_tokens = kBlockTokens;
    p.max_batch_tokens = 64;
    p.max_sessions = 19;  // odd pool sizes: the leak check finds the pools among the mappings
    p.kv_device_bytes = 23 * kBlockBytes;
    p.kv_host_bytes = 32u << 20;
    return p;
}

size_t count_dir(const char *path) {
    size_t n = 0;
    if (DIR *d = opendir(path)) {
        while (dirent *e = readdir(d)) n += e->d_name[0] != '.';
        closedir(d);
    }
    return n;
}

// Mappings the engine makes: the model file, and read-write anonymous mappings of exactly
// the KV pools' or the host region's size. (Counting every mapping is useless under ASan,
// whose allocator maps memory as it grows.)
size_t count_engine_maps() {
    const unsigned long sizes[] = {23 * kBlockBytes, 19 * kBlockBytes, 32ul << 20};
    size_t n = 0;
    if (FILE *f = std::fopen("/proc/self/maps", "r")) {
        char line[4096];
        while (std::fgets(line, sizeof(line), f)) {
            unsigned long lo = 0, hi = 0;
            char perms[8] = {0};
            if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
            if (std::strstr(line, g_model.c_str())) {
                ++n;
                continue;
            }
            if (perms[0] != 'r' || perms[1] != 'w') continue;
            for (unsigned long sz : sizes) {
                if (hi - lo == sz && std::strchr(line, '/') == nullptr) {
                    ++n;
                    if (std::getenv("LLMKV_FAULT_SHOW_MAPS"))
                        std::fprintf(stderr, "  map: %s", line);
                }
            }
        }
        std::fclose(f);
    }
    return n;
}

struct Resources {
    size_t fds, threads, maps;
};
Resources resources() {
    return {count_dir("/proc/self/fd"), count_dir("/proc/self/task"), count_engine_maps()};
}

// LLMKV_FAULT_FROM / LLMKV_FAULT_TO: sweep only n in [FROM, TO] (to look at one failure).
uint64_t env_n(const char *name, uint64_t def) {
    const char *v = std::getenv(name);
    return v && *v ? std::strtoull(v, nullptr, 10) : def;
}

bool leak_check() {
#ifdef LLMKV_HAVE_LSAN
    return __lsan_do_recoverable_leak_check() == 0;
#else
    return true;
#endif
}

using SiteHits = std::vector<uint64_t>;
SiteHits site_hits() {
    SiteHits h;
    for (uint32_t i = 0; i < fault::kAllocationSites; ++i) h.push_back(fault::hits(Site(i)));
    return h;
}

void print_sites(const char *what, uint64_t runs, uint64_t injected, bool clean,
                 const SiteHits &hits) {
    std::printf(
        "%s: %llu runs, %llu failures injected; allocation-site hits of one uninjected run:", what,
        (unsigned long long)runs, (unsigned long long)injected);
    for (uint32_t i = 0; i < fault::kAllocationSites && i < hits.size(); ++i) {
        std::printf(" [%s]=%llu", fault::site_name(Site(i)), (unsigned long long)hits[i]);
    }
    std::printf("\n%s: %s\n", what, clean ? "all clean" : "DEFECTS FOUND");
}

// ---- (a) engine creation -----------------------------------------------------------------

int sweep_create() {
    llmkv_log_set(nullptr, nullptr, LLMKV_LOG_ERROR);
    // Warm up: the first host tier registers its mimalloc arena for the process; later tiers
    // reuse it (see kv/host_tier.h), so the baseline is taken after one engine has lived.
    llmkv_engine_params p = engine_params();
    p.n_threads = 3;  // two pool workers: a failure starting the second must stop the first
    llmkv_engine *e = nullptr;
    const Resources before_any = resources();
    if (llmkv_engine_create(&p, &e) != LLMKV_OK) {
        std::fprintf(stderr, "engine_create: %s\n", llmkv_last_error());
        return 1;
    }
    llmkv_engine_destroy(e);
    CHECK(resources().maps == before_any.maps && resources().fds == before_any.fds,
          "a created and destroyed engine left mappings %zu->%zu or fds %zu->%zu", before_any.maps,
          resources().maps, before_any.fds, resources().fds);
    const Resources base = resources();
    std::map<std::string, uint64_t> by_status;
    uint64_t runs = 0, injected = 0;
    SiteHits hits;
    bool maps_differed = false;
    const uint64_t from = env_n("LLMKV_FAULT_FROM", 1), to = env_n("LLMKV_FAULT_TO", ~0ull);
    for (uint64_t n = from; n <= to; ++n) {
        fault::reset_counts();
        e = nullptr;
        const uint64_t nothrow_before = g_nothrow_injected;
        fault::arm(n);
        llmkv_status st = llmkv_engine_create(&p, &e);
        fault::disarm();
        const uint64_t fired = fault::failures();
        ++runs;
        if (fired == 0) {
            CHECK(st == LLMKV_OK, "n=%llu: nothing injected but %s: %s", (unsigned long long)n,
                  llmkv_status_string(st), llmkv_last_error());
            hits = site_hits();
            llmkv_engine_destroy(e);
            break;
        }
        injected += fired;
        if (st == LLMKV_OK && g_nothrow_injected != nothrow_before) {
            // A nothrow allocation failed and its caller did without (see counted_new.cpp).
            ++by_status["operator new (nothrow), absorbed -> LLMKV_OK"];
            llmkv_engine_destroy(e);
            continue;
        }
        Site site = Site::kCount;
        for (uint32_t i = 0; i < fault::kAllocationSites; ++i) {
            if (fault::failures(Site(i))) site = Site(i);
        }
        const llmkv_status want = site == Site::kModelMmap ? LLMKV_ERR_IO : LLMKV_ERR_OUT_OF_MEMORY;
        CHECK(st == want && e == nullptr, "n=%llu (%s): got %s (%s), want %s",
              (unsigned long long)n, fault::site_name(site), llmkv_status_string(st),
              llmkv_last_error(), llmkv_status_string(want));
        if (e) llmkv_engine_destroy(e);
        ++by_status[std::string(fault::site_name(site)) + " -> " + llmkv_status_string(st)];
        const Resources now = resources();
        // A mapping of a pool's size may be the sanitizer's own for a moment: one that is
        // still there after the next run counts as leaked.
        CHECK(now.fds == base.fds && now.threads == base.threads &&
                  (now.maps == base.maps || !maps_differed),
              "n=%llu (%s): leaked fds %zu->%zu, threads %zu->%zu, mappings %zu->%zu",
              (unsigned long long)n, fault::site_name(site), base.fds, now.fds, base.threads,
              now.threads, base.maps, now.maps);
        maps_differed = now.maps != base.maps;
        CHECK(leak_check(), "n=%llu (%s): LeakSanitizer found leaks (above)", (unsigned long long)n,
              fault::site_name(site));
    }
    const Resources end = resources();
    CHECK(end.fds == base.fds && end.threads == base.threads && end.maps == base.maps,
          "after the sweep: fds %zu->%zu, threads %zu->%zu, mappings %zu->%zu", base.fds, end.fds,
          base.threads, end.threads, base.maps, end.maps);
    for (const auto &kv : by_status)
        std::printf("  %-46s %llu\n", kv.first.c_str(), (unsigned long long)kv.second);
    print_sites("engine_create sweep", runs, injected, g_errors == 0, hits);
    return g_errors == 0 ? 0 : 1;
}

// ---- (b) the multi-session workload -------------------------------------------------------

std::vector<int32_t> byte_tokens(size_t n, uint32_t seed) {
    std::vector<int32_t> t(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto &v : t) {
        x = x * 1664525u + 1013904223u;
        v = int32_t((x >> 13) % 256);
    }
    return t;
}

struct Output {
    std::vector<std::vector<int32_t>> tokens;    // per session: its final context
    std::vector<std::vector<int32_t>> streamed;  // per session: TOKEN events
    std::vector<std::string> text;
    llmkv_stats stats{};  // not compared: a recomputation after a failure adds work
    bool operator==(const Output &o) const {
        return tokens == o.tokens && streamed == o.streamed && text == o.text;
    }
};

struct Run {
    llmkv_engine *engine = nullptr;
    std::vector<llmkv_session *> sessions;
    std::vector<llmkv_prefix *> prefixes;
    std::vector<std::vector<int32_t>> streamed;
    std::vector<std::string> text;
    std::vector<int> awaiting_done;  // per session: generate calls whose DONE has not come
    std::string snap_path;
    bool armed = false;  // the countdown is set and has not fired yet
    bool fired = false;
    uint64_t calls = 0;
    std::map<std::string, uint64_t> failed_calls;  // "call -> status"

    std::vector<int32_t> tokens_of(llmkv_session *s) const {
        size_t n = 0;
        llmkv_session_get_tokens(s, nullptr, 0, &n);
        std::vector<int32_t> t(n);
        llmkv_session_get_tokens(s, t.data(), t.size(), &n);
        return t;
    }
    std::vector<std::vector<int32_t>> all_tokens() const {
        std::vector<std::vector<int32_t>> out;
        for (llmkv_session *s : sessions) out.push_back(s ? tokens_of(s) : std::vector<int32_t>{});
        return out;
    }

    // Runs one C API call under the countdown. A failing call must be a clean failure:
    // validate OK, tokens unchanged, and the call succeeds when repeated (disarmed).
    void call(const char *name, const std::function<llmkv_status()> &fn,
              const std::function<bool()> &out_cleared = {}) {
        ++calls;
        if (!armed) {
            llmkv_status st = fn();
            CHECK(st == LLMKV_OK, "%s: %s (%s)", name, llmkv_status_string(st), llmkv_last_error());
            return;
        }
        // Paused between calls: only the library's allocations inside the call count.
        const auto before = all_tokens();
        const uint64_t nothrow_before = g_nothrow_injected;
        fault::pause(false);
        llmkv_status st = fn();
        fault::pause(true);
        if (fault::failures() == 0) {
            CHECK(st == LLMKV_OK, "%s: %s without an injected failure (%s)", name,
                  llmkv_status_string(st), llmkv_last_error());
            return;
        }
        // The injected failure happened in this call: from here on the run is unarmed.
        fault::disarm();
        if (st == LLMKV_OK) {
            // The call succeeded without what failed: a nothrow allocation whose caller did
            // without it (see counted_new.cpp), a host-tier block (a full tier: the scheduler
            // recomputes instead of swapping), or an optional demotion of a prefix-cache block
            // to the host tier. Its effects stand; the engine must still be consistent, and
            // the final output identical.
            fault::pause(false);
            armed = false;
            fired = true;
            const char *what = g_nothrow_injected != nothrow_before ? "nothrow operator new"
                               : fault::failures(Site::kHostBlock)  ? "host-tier block"
                                                                    : "operator new";
            ++failed_calls[std::string(name) + " -> LLMKV_OK (absorbed: " + what + ")"];
            CHECK(llmkv_engine_validate(engine) == LLMKV_OK,
                  "%s absorbed a failure (%s); validate then says %s", name, what,
                  llmkv_last_error());
            return;
        }
        fault::pause(false);  // disarmed: nothing counts any more
        armed = false;
        fired = true;
        ++failed_calls[std::string(name) + " -> " + llmkv_status_string(st)];
        const std::string why = llmkv_last_error();
        CHECK(st != LLMKV_OK && st != LLMKV_ERR_INTERNAL && !why.empty(),
              "%s: an injected allocation failure gave %s (%s)", name, llmkv_status_string(st),
              why.c_str());
        if (out_cleared) CHECK(out_cleared(), "%s failed but left an output handle set", name);
        llmkv_status v = llmkv_engine_validate(engine);
        CHECK(v == LLMKV_OK, "%s failed with %s (%s); validate then says %s", name,
              llmkv_status_string(st), why.c_str(), llmkv_last_error());
        CHECK(all_tokens() == before, "%s failed with %s (%s) and changed a session's tokens", name,
              llmkv_status_string(st), why.c_str());
        st = fn();
        CHECK(st == LLMKV_OK, "%s: repeated after the failure: %s (%s)", name,
              llmkv_status_string(st), llmkv_last_error());
    }

    void collect(const llmkv_event *ev, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            for (size_t k = 0; k < sessions.size(); ++k) {
                if (sessions[k] != ev[i].session) continue;
                if (ev[i].kind == LLMKV_EVENT_TOKEN) streamed[k].push_back(ev[i].token);
                if (ev[i].kind == LLMKV_EVENT_DONE && awaiting_done[k] > 0) --awaiting_done[k];
                CHECK(ev[i].kind != LLMKV_EVENT_ERROR, "session %zu got an ERROR event (%s)", k,
                      llmkv_status_string(ev[i].status));
            }
        }
    }

    void drain() {
        for (int guard = 0; guard < 10000; ++guard) {
            llmkv_event ev[64];
            size_t n = 0;
            call("llmkv_step", [&] { return llmkv_step(engine, ev, 64, &n); });
            collect(ev, n);
            fault::pause(true);  // the harness's own queries do not count
            bool busy = llmkv_pending_events(engine) > 0;
            for (int w : awaiting_done)
                busy |= w > 0;  // a generating session may read PARKED (swapped out)
            for (llmkv_session *s : sessions) {
                if (!s) continue;
                llmkv_session_info info;
                info.struct_size = sizeof(info);
                llmkv_session_get_info(s, &info);
                busy |= info.state == LLMKV_SESSION_QUEUED ||
                        info.state == LLMKV_SESSION_PREFILLING ||
                        info.state == LLMKV_SESSION_GENERATING;
            }
            if (armed) {
                fault::pause(true);
            } else {
                fault::pause(false);
            }
            if (!busy) return;
        }
        CHECK(false, "the workload did not settle");
    }

    size_t new_session(const llmkv_prefix *from) {
        sessions.push_back(nullptr);
        streamed.emplace_back();
        text.emplace_back();
        awaiting_done.push_back(0);
        const size_t k = sessions.size() - 1;
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.max_new_tokens = 8;
        sp.prefix = from;
        call(
            "llmkv_session_create", [&] { return llmkv_session_create(engine, &sp, &sessions[k]); },
            [&] { return sessions[k] == nullptr; });
        return k;
    }
    void append(size_t k, size_t n, uint32_t seed) {
        std::vector<int32_t> t = byte_tokens(n, seed);
        call("llmkv_session_append",
             [&] { return llmkv_session_append(sessions[k], t.data(), t.size()); });
    }
    void generate(size_t k, uint32_t n) {
        call("llmkv_session_generate", [&] { return llmkv_session_generate(sessions[k], n); });
        ++awaiting_done[k];
    }
};

// The workload: prefix handles (created, saved, loaded, made from a session), sessions from
// them and from nothing, the automatic prefix cache (shared prompts), a pool small enough to
// preempt, fork, park and resume, cancel.
Output workload(uint64_t arm_at, Run &run, bool *fired) {
    llmkv_engine_params p = engine_params();
    p.kv_device_bytes =
        kWorkloadBlocks * kBlockBytes;  // tight: idle sessions are preempted to the host tier
    if (llmkv_engine_create(&p, &run.engine) != LLMKV_OK) {
        std::fprintf(stderr, "engine_create: %s\n", llmkv_last_error());
        std::exit(1);
    }
    run.snap_path = llmkv::testing::temp_path("fault_prefix.snap");
    std::remove(run.snap_path.c_str());
    if (arm_at) {
        fault::reset_counts();
        fault::arm(arm_at);
        fault::pause(true);
        run.armed = true;
    }
    const std::vector<int32_t> system = byte_tokens(40, 1);
    run.prefixes.push_back(nullptr);
    run.call(
        "llmkv_prefix_create",
        [&] {
            return llmkv_prefix_create(run.engine, system.data(), system.size(), &run.prefixes[0]);
        },
        [&] { return run.prefixes[0] == nullptr; });
    const size_t s0 = run.new_session(run.prefixes[0]);
    const size_t s1 = run.new_session(nullptr);
    const size_t s2 = run.new_session(nullptr);
    run.append(s0, 10, 2);
    run.append(s1, 70, 3);
    std::string hello = "hello, world: a fault-injection test";
    run.call("llmkv_session_append_text", [&] {
        return llmkv_session_append_text(run.sessions[s2], hello.data(), hello.size());
    });
    run.generate(s0, 8);
    run.generate(s1, 8);
    run.generate(s2, 8);
    run.drain();

    // The same 70-token prompt again: the automatic prefix cache serves its full blocks.
    const size_t s3 = run.new_session(nullptr);
    run.append(s3, 70, 3);
    run.generate(s3, 6);
    // Fork, park, snapshots.
    run.sessions.push_back(nullptr);
    run.streamed.emplace_back();
    run.text.emplace_back();
    run.awaiting_done.push_back(0);
    const size_t s4 = run.sessions.size() - 1;
    run.call(
        "llmkv_session_fork",
        [&] { return llmkv_session_fork(run.sessions[s1], &run.sessions[s4]); },
        [&] { return run.sessions[s4] == nullptr; });
    run.append(s4, 5, 4);
    run.generate(s4, 6);
    run.call("llmkv_session_park", [&] { return llmkv_session_park(run.sessions[s0]); });
    run.call("llmkv_prefix_save",
             [&] { return llmkv_prefix_save(run.prefixes[0], run.snap_path.c_str()); });
    run.prefixes.push_back(nullptr);
    run.call(
        "llmkv_prefix_load",
        [&] { return llmkv_prefix_load(run.engine, run.snap_path.c_str(), &run.prefixes[1]); },
        [&] { return run.prefixes[1] == nullptr; });
    const size_t s5 = run.new_session(run.prefixes[1]);
    run.append(s5, 5, 5);
    run.generate(s5, 6);
    run.drain();

    run.prefixes.push_back(nullptr);
    run.call(
        "llmkv_session_to_prefix",
        [&] { return llmkv_session_to_prefix(run.sessions[s2], &run.prefixes[2]); },
        [&] { return run.prefixes[2] == nullptr; });
    const size_t s6 = run.new_session(run.prefixes[2]);
    run.append(s6, 4, 6);
    run.generate(s6, 5);
    run.append(s0, 6, 7);  // s0 was parked: it comes back from the host tier
    run.generate(s0, 5);
    run.generate(s1, 20);
    {
        llmkv_event ev[64];
        size_t n = 0;
        run.call("llmkv_step", [&] { return llmkv_step(run.engine, ev, 64, &n); });
        run.collect(ev, n);
    }
    run.call("llmkv_session_cancel", [&] { return llmkv_session_cancel(run.sessions[s1]); });
    run.drain();
    // Everyone parks (idle sessions), then a last turn for two of them.
    for (size_t k : {s3, s4, s5}) {
        run.call("llmkv_session_park", [&] { return llmkv_session_park(run.sessions[k]); });
    }
    run.append(s3, 3, 8);
    run.generate(s3, 4);
    run.append(s5, 3, 9);
    run.generate(s5, 4);
    run.drain();

    *fired = run.fired;
    fault::disarm();
    fault::pause(false);
    run.armed = false;
    CHECK(llmkv_engine_validate(run.engine) == LLMKV_OK, "final validate: %s", llmkv_last_error());
    Output out;
    out.tokens = run.all_tokens();
    out.streamed = run.streamed;
    for (llmkv_session *s : run.sessions) {
        char buf[4096];
        size_t n = 0;
        llmkv_session_read_text(s, buf, sizeof(buf), &n);
        out.text.emplace_back(buf, n);
    }
    out.stats.struct_size = sizeof(out.stats);
    llmkv_engine_get_stats(run.engine, &out.stats);
    for (llmkv_session *s : run.sessions) llmkv_session_destroy(s);
    for (llmkv_prefix *px : run.prefixes) llmkv_prefix_release(px);
    llmkv_engine_destroy(run.engine);
    std::remove(run.snap_path.c_str());
    return out;
}

std::string describe_difference(const Output &o, const Output &ref) {
    std::string d;
    for (size_t k = 0; k < ref.tokens.size() && k < o.tokens.size(); ++k) {
        auto first_diff = [](const std::vector<int32_t> &a, const std::vector<int32_t> &b) {
            size_t i = 0;
            while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
            return i;
        };
        if (o.tokens[k] != ref.tokens[k]) {
            d += "session " + std::to_string(k) + ": context " +
                 std::to_string(o.tokens[k].size()) + " tokens vs " +
                 std::to_string(ref.tokens[k].size()) + ", first difference at " +
                 std::to_string(first_diff(o.tokens[k], ref.tokens[k])) + "; ";
        }
        if (o.streamed[k] != ref.streamed[k]) {
            d += "session " + std::to_string(k) + ": " + std::to_string(o.streamed[k].size()) +
                 " TOKEN events vs " + std::to_string(ref.streamed[k].size()) +
                 ", first difference at " +
                 std::to_string(first_diff(o.streamed[k], ref.streamed[k])) + "; ";
        }
        if (o.text[k] != ref.text[k]) d += "session " + std::to_string(k) + ": text differs; ";
    }
    return d;
}

int sweep_workload() {
    llmkv_log_set(nullptr, nullptr, LLMKV_LOG_ERROR);
    Run ref_run;
    bool fired = false;
    // Counting run (armed far beyond the end): the sites the workload hits.
    fault::reset_counts();
    Output ref = workload(0, ref_run, &fired);
    uint64_t total = 0;
    SiteHits hits;
    {
        Run counting;  // armed far beyond the end: counts the sites without failing any
        Output o = workload(~0ull >> 2, counting, &fired);
        CHECK(o == ref, "an armed run without failures differs from the reference");
        hits = site_hits();
        for (uint64_t h : hits) total += h;
    }
    std::printf(
        "workload: %llu allocation-site hits in %llu C API calls per run; uninjected: %u sessions, "
        "%llu steps, "
        "%llu preemptions (%llu swaps, %llu parks), %llu resumes, %llu prefix-hit tokens, %llu "
        "demotions\n",
        (unsigned long long)total, (unsigned long long)ref_run.calls, unsigned(ref.tokens.size()),
        (unsigned long long)ref.stats.steps, (unsigned long long)ref.stats.preemptions,
        (unsigned long long)ref.stats.swaps, (unsigned long long)ref.stats.parks,
        (unsigned long long)ref.stats.resumes, (unsigned long long)ref.stats.prefix_hit_tokens,
        (unsigned long long)ref.stats.demotions);
    std::map<std::string, uint64_t> failed;
    uint64_t runs = 0, injected = 0, unfired = 0;
    const int errors_before = g_errors;
    const uint64_t from = env_n("LLMKV_FAULT_FROM", 1), to = env_n("LLMKV_FAULT_TO", ~0ull);
    for (uint64_t n = from; n <= to; ++n) {
        Run run;
        const int before = g_errors;
        Output o = workload(n, run, &fired);
        ++runs;
        for (const auto &kv : run.failed_calls) failed[kv.first] += kv.second;
        // Whether an asynchronous copy has finished when the scheduler looks changes its path
        // a little, so a run may hit a few allocations fewer than the counting run: the sweep
        // goes on to the counting run's total, and stops at the first n past it where
        // nothing failed.
        if (!fired) {
            ++unfired;
            if (n > total) break;
            continue;
        }
        ++injected;
        CHECK(o == ref, "n=%llu: the completed workload differs from the uninjected run: %s",
              (unsigned long long)n, describe_difference(o, ref).c_str());
        if (g_errors != before)
            std::fprintf(stderr, "  (n=%llu: %s)\n", (unsigned long long)n,
                         run.failed_calls.begin()->first.c_str());
        if (n % 500 == 0)
            std::fprintf(stderr, "  ... n=%llu of ~%llu\n", (unsigned long long)n,
                         (unsigned long long)total);
    }
    CHECK(leak_check(), "LeakSanitizer found leaks (above)");
    for (const auto &kv : failed)
        std::printf("  %-50s %llu\n", kv.first.c_str(), (unsigned long long)kv.second);
    std::printf("workload sweep: %llu runs in which the countdown outlasted the workload\n",
                (unsigned long long)unfired);
    print_sites("workload sweep", runs, injected, g_errors == errors_before, hits);
    return g_errors == 0 ? 0 : 1;
}

// ---- snapshot writer I/O failures ---------------------------------------------------------

bool file_exists(const std::string &p) {
    return access(p.c_str(), F_OK) == 0;
}

std::vector<std::string> temp_leftovers(const std::string &dir, const std::string &base) {
    std::vector<std::string> out;
    if (DIR *d = opendir(dir.c_str())) {
        while (dirent *e = readdir(d)) {
            std::string name = e->d_name;
            if (name.rfind(base + ".tmp.", 0) == 0) out.push_back(name);
        }
        closedir(d);
    }
    return out;
}

std::string read_file(const std::string &p) {
    std::string s;
    if (FILE *f = std::fopen(p.c_str(), "rb")) {
        char buf[65536];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
        std::fclose(f);
    }
    return s;
}

int snapshot_io() {
    llmkv_log_set(nullptr, nullptr, LLMKV_LOG_ERROR);
    llmkv_engine_params p = engine_params();
    p.kv_host_bytes = 0;
    llmkv_engine *e = nullptr;
    if (llmkv_engine_create(&p, &e) != LLMKV_OK) return 1;
    const std::vector<int32_t> system = byte_tokens(70, 11);  // 4 sealed blocks and a tail
    llmkv_prefix *px = nullptr;
    CHECK(llmkv_prefix_create(e, system.data(), system.size(), &px) == LLMKV_OK, "%s",
          llmkv_last_error());
    const std::string path = llmkv::testing::temp_path("fault_io.snap");
    const std::string dir = path.substr(0, path.rfind('/'));
    const std::string base = path.substr(path.rfind('/') + 1);
    std::remove(path.c_str());
    CHECK(llmkv_prefix_save(px, path.c_str()) == LLMKV_OK, "%s", llmkv_last_error());
    const std::string good = read_file(path);
    std::remove(path.c_str());

    // How many write() calls one save makes (header, each block, the tail).
    fault::reset_counts();
    fault::arm_site(Site::kSnapshotWrite, ~0ull >> 2);
    CHECK(llmkv_prefix_save(px, path.c_str()) == LLMKV_OK, "%s", llmkv_last_error());
    fault::disarm();
    const uint64_t writes = fault::hits(Site::kSnapshotWrite);
    std::remove(path.c_str());
    int cases = 0;

    // Each failure, with no file at path before and with an older file there.
    struct Case {
        std::string name;
        std::function<void()> arm;
        std::string expect;  // in the message
    };
    std::vector<Case> failing;
    for (uint64_t k = 1; k <= writes; ++k) {
        failing.push_back({"ENOSPC at write " + std::to_string(k),
                           [k] { fault::arm_site(Site::kSnapshotWrite, k); }, "disk full"});
    }
    failing.push_back({"short write, then ENOSPC",
                       [] {
                           fault::arm_site(Site::kSnapshotShortWrite, 2);
                           fault::arm_site(Site::kSnapshotWrite, 3);
                       },
                       "No space left"});
    failing.push_back({"write makes no progress",
                       [] { fault::arm_site(Site::kSnapshotZeroWrite, 2); }, "no progress"});
    failing.push_back(
        {"fsync fails", [] { fault::arm_site(Site::kSnapshotFsync, 1); }, "fsync failed"});
    failing.push_back(
        {"close fails", [] { fault::arm_site(Site::kSnapshotClose, 1); }, "close failed"});
    failing.push_back(
        {"rename fails", [] { fault::arm_site(Site::kSnapshotRename, 1); }, "rename"});
    failing.push_back({"temp file cannot be created",
                       [] { fault::arm_site(Site::kSnapshotCreate, 1); }, "temp file"});
    const std::string older = "an older file that must survive";
    for (int with_old = 0; with_old < 2; ++with_old) {
        for (const Case &c : failing) {
            std::remove(path.c_str());
            if (with_old) {
                FILE *f = std::fopen(path.c_str(), "wb");
                std::fwrite(older.data(), 1, older.size(), f);
                std::fclose(f);
            }
            c.arm();
            llmkv_status st = llmkv_prefix_save(px, path.c_str());
            fault::disarm();
            const std::string msg = llmkv_last_error();
            ++cases;
            CHECK(st == LLMKV_ERR_IO, "%s: got %s (%s)", c.name.c_str(), llmkv_status_string(st),
                  msg.c_str());
            CHECK(msg.find(c.expect) != std::string::npos && msg.find(path) != std::string::npos,
                  "%s: message \"%s\" should name the file and say \"%s\"", c.name.c_str(),
                  msg.c_str(), c.expect.c_str());
            CHECK(temp_leftovers(dir, base).empty(), "%s: a temporary file was left behind",
                  c.name.c_str());
            if (with_old) {
                CHECK(read_file(path) == older, "%s: the existing file was changed",
                      c.name.c_str());
            } else {
                CHECK(!file_exists(path), "%s: a partial file was left at the path",
                      c.name.c_str());
            }
            std::printf("  %-28s %s -> %s: %s\n", c.name.c_str(),
                        with_old ? "(file existed)" : "(no file)   ", llmkv_status_string(st),
                        msg.c_str());
        }
    }
    // Partial writes that keep progressing: the file is complete and loads.
    std::remove(path.c_str());
    fault::arm_site(Site::kSnapshotShortWrite, 1, /*sticky=*/true);
    llmkv_status st = llmkv_prefix_save(px, path.c_str());
    fault::disarm();
    ++cases;
    CHECK(st == LLMKV_OK, "every write short: %s (%s)", llmkv_status_string(st),
          llmkv_last_error());
    CHECK(read_file(path) == good, "every write short: the file differs from a normal save");
    llmkv_prefix *loaded = nullptr;
    CHECK(llmkv_prefix_load(e, path.c_str(), &loaded) == LLMKV_OK, "%s", llmkv_last_error());
    std::printf("  %-28s -> %s, file identical to a normal save, loads\n",
                "every write short (partial)", llmkv_status_string(st));
    llmkv_prefix_release(loaded);
    std::remove(path.c_str());
    CHECK(llmkv_engine_validate(e) == LLMKV_OK, "%s", llmkv_last_error());
    llmkv_prefix_release(px);
    llmkv_engine_destroy(e);
    std::printf("snapshot I/O: %d cases (%llu writes per save), %s\n", cases,
                (unsigned long long)writes, g_errors == 0 ? "all clean" : "DEFECTS FOUND");
    return g_errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    const std::string what = argc > 1 ? argv[1] : "all";
    llmkv::testing::TinyModelSpec spec;
    spec.n_ctx = 512;
    g_model = llmkv::testing::temp_path("fault_tiny.gguf");
    llmkv::testing::write_tiny_model(spec, g_model);
    int rc = 0;
    if (what == "create" || what == "all") rc |= sweep_create();
    if (what == "workload" || what == "all") rc |= sweep_workload();
    if (what == "snapshot" || what == "all") rc |= snapshot_io();
    std::remove(g_model.c_str());
    return rc;
}
