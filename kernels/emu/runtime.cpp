// llmkv's CUDA emulator, libllmkv-cudaemu.so: the runtime (devices, memory, streams, events),
// the fiber scheduler that runs kernels, and a reference cublasGemmEx. Everything is host
// memory; kernels run on the calling host thread and a few helper threads, each CUDA thread a
// fiber of its own stack. What it checks and what it cannot show: kernels/emu/README.md.
//
// Environment (read once):
//   LLMKV_EMU_DEVICES     emulated devices (default 2)
//   LLMKV_EMU_DEVICE_MIB  memory of each device in MiB (default 8192): cudaMalloc beyond it
//                         fails with cudaErrorMemoryAllocation, cudaMemGetInfo reports it
//   LLMKV_EMU_THREADS     host threads that run a launch's blocks (default: cores, at most 8)
//   LLMKV_EMU             comma-separated modes: "reverse" runs a block's threads in reverse
//                         order (a missing barrier shows), "hold" keeps every stream's work
//                         back until a synchronisation demands it (missing stream ordering
//                         shows), "quiet" drops the start-up line
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emu_internal.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace cudaemu {
namespace {

// ---- configuration ------------------------------------------------------------------------

struct Config {
    int devices = 2;
    size_t device_bytes = size_t(8192) << 20;
    unsigned threads = 1;
    bool reverse = false;
    bool hold = false;
    size_t stack_bytes = size_t(256) << 10;
};

long env_long(const char *name, long dflt, long lo, long hi) {
    const char *v = std::getenv(name);
    if (!v || !*v) return dflt;
    char *end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        std::fprintf(stderr, "cudaemu: %s=%s is not a number in [%ld, %ld]; using %ld\n", name, v,
                     lo, hi, dflt);
        return dflt;
    }
    return x;
}

const Config &config() {
    static const Config c = [] {
        Config k;
        k.devices = int(env_long("LLMKV_EMU_DEVICES", 2, 0, 16));
        k.device_bytes = size_t(env_long("LLMKV_EMU_DEVICE_MIB", 8192, 1, 1 << 22)) << 20;
        const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
        k.threads = unsigned(env_long("LLMKV_EMU_THREADS", std::min(hw, 8u), 1, 64));
        k.stack_bytes = size_t(env_long("LLMKV_EMU_STACK_KIB", 256, 16, 1 << 16)) << 10;
        bool quiet = false;
        if (const char *m = std::getenv("LLMKV_EMU")) {
            std::string s = std::string(",") + m + ",";
            k.reverse = s.find(",reverse,") != std::string::npos;
            k.hold = s.find(",hold,") != std::string::npos;
            quiet = s.find(",quiet,") != std::string::npos;
        }
        if (!quiet && (k.reverse || k.hold))
            std::fprintf(stderr, "cudaemu: %d device(s) of %zu MiB, modes:%s%s\n", k.devices,
                         k.device_bytes >> 20, k.reverse ? " reverse" : "", k.hold ? " hold" : "");
        return k;
    }();
    return c;
}

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) t_last_error = e;
    return e;
}

[[noreturn]] void die(const std::string &msg) {
    std::fprintf(stderr, "cudaemu: %s\n", msg.c_str());
    std::fflush(stderr);
    std::abort();
}

// ---- fibers -------------------------------------------------------------------------------

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save
// and continues on `to` (a stack saved the same way, or a new one laid out by fiber_init).
// MXCSR and the x87 control word are not switched: no kernel changes the floating-point
// environment, so every fiber runs in its host thread's (ldmxcsr and fldcw cost more than
// the rest of a switch).
extern "C" void cudaemu_switch(void **save, void *to);
extern "C" void cudaemu_fiber_start();
asm(R"(
.text
.p2align 4
.type cudaemu_switch,@function
cudaemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size cudaemu_switch, .-cudaemu_switch
.p2align 4
.type cudaemu_fiber_start,@function
cudaemu_fiber_start:
    movq %r12, %rdi
    callq *%r13
    ud2
.size cudaemu_fiber_start, .-cudaemu_fiber_start
)");
#endif

struct Fiber;
struct Block;
void fiber_main(Fiber *f);

enum State : uint8_t { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
    void *sp = nullptr;
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
    uint3 tid;
    unsigned linear = 0;
    State state = kReady;
    const char *file = nullptr;
    int line = 0;
    unsigned mask = 0;
};

// One host thread's fiber stacks and dynamic shared memory, reused by every block it runs.
struct Worker {
    char *stacks = nullptr;
    size_t n_stacks = 0, stride = 0;
    char *shared = nullptr;  // kSharedCap bytes, then a PROT_NONE page
    std::vector<Fiber> fibers;
    void *sched_sp = nullptr;
#if !defined(__x86_64__)
    ucontext_t sched_uc;
#endif
    ~Worker() {
        if (stacks) munmap(stacks, n_stacks * stride);
        if (shared) munmap(shared, kSharedCap + page());
    }
    static constexpr size_t kSharedCap = 228 << 10;  // an H100's shared memory per block, opt-in
    static size_t page() {
        return size_t(sysconf(_SC_PAGESIZE));
    }
    void ensure(size_t n) {
        if (!shared) {
            void *p = mmap(nullptr, kSharedCap + page(), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) die("mmap of the shared-memory arena failed");
            shared = static_cast<char *>(p);
            mprotect(shared + kSharedCap, page(), PROT_NONE);
        }
        if (n <= n_stacks) return;
        if (stacks) munmap(stacks, n_stacks * stride);
        stride = config().stack_bytes + page();
        void *p =
            mmap(nullptr, n * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die("mmap of fiber stacks failed");
        stacks = static_cast<char *>(p);
        n_stacks = n;
        for (size_t i = 0; i < n; ++i) mprotect(stacks + i * stride, page(), PROT_NONE);  // guard
        fibers.resize(n);
    }
};

// The block a host thread runs now.
struct Block {
    const char *kernel = nullptr;
    const std::function<void()> *body = nullptr;
    uint3 idx;
    dim3 dim, grid;
    unsigned n = 0;
    char *shared = nullptr;  // dynamic shared memory (shared_bytes, ending at the guard page)
    size_t shared_bytes = 0;
    std::vector<unsigned char> slots;  // [warp][3][32 lanes][16 bytes]
    std::vector<unsigned> warp_gen;
    Worker *worker = nullptr;
    unsigned pass_k = 0;  // the running pass's position (next_ready)
};

// initial-exec: read at every threadIdx, barrier and shuffle, and a shared library's
// general-dynamic TLS goes through __tls_get_addr (a tenth of an emulated run's time).
#define CUDAEMU_TLS thread_local __attribute__((tls_model("initial-exec")))
CUDAEMU_TLS Worker *t_worker = nullptr;
CUDAEMU_TLS Block *t_block = nullptr;
CUDAEMU_TLS Fiber *t_fiber = nullptr;

// A signal stack for the calling thread (the SIGSEGV handler runs on it: SA_ONSTACK).
void install_alt_stack() {
    const size_t bytes = 1 << 16;
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;  // then a fault is a plain SIGSEGV, without the report
    stack_t ss{};
    ss.ss_sp = p;
    ss.ss_size = bytes;
    sigaltstack(&ss, nullptr);
}

Worker &worker() {
    if (!t_worker) {
        t_worker = new Worker();  // freed at thread exit would race fibers: kept
        // Every thread that runs blocks reports a fault in a guard page itself, which needs a
        // signal stack of its own (the fault is on the fiber's stack or past it).
        install_alt_stack();
    }
    return *t_worker;
}

std::string where(const Block &b, const Fiber *f) {
    char s[256];
    if (f)
        std::snprintf(s, sizeof s, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", b.kernel,
                      b.idx.x, b.idx.y, b.idx.z, f->tid.x, f->tid.y, f->tid.z);
    else
        std::snprintf(s, sizeof s, "kernel %s, block (%u,%u,%u)", b.kernel, b.idx.x, b.idx.y,
                      b.idx.z);
    return s;
}

// The next thread of the running pass that is ready (in the pass's order), or nullptr.
Fiber *next_ready(Block &b);

// A thread that waits or ends hands over to the next ready thread of the pass directly (one
// stack switch per hand-over instead of two through the scheduler); the pass's last thread
// returns to the scheduler. Whoever switches to a fiber sets t_fiber first.
void to_scheduler(Fiber *f) {
    Fiber *n = next_ready(*t_block);
#if defined(__x86_64__)
    if (n) {
        t_fiber = n;
        cudaemu_switch(&f->sp, n->sp);
    } else {
        cudaemu_switch(&f->sp, t_worker->sched_sp);
    }
#else
    if (n) {
        t_fiber = n;
        swapcontext(&f->uc, &n->uc);
    } else {
        swapcontext(&f->uc, &t_worker->sched_uc);
    }
#endif
}

void resume(Worker &w, Fiber *f) {
    t_fiber = f;
#if defined(__x86_64__)
    cudaemu_switch(&w.sched_sp, f->sp);
#else
    swapcontext(&w.sched_uc, &f->uc);
#endif
    t_fiber = nullptr;
}

void fiber_main(Fiber *f) {
    (*t_block->body)();
    f->state = kDone;
    to_scheduler(f);
    __builtin_unreachable();
}

#if !defined(__x86_64__)
void fiber_main_uc(unsigned lo, unsigned hi) {
    fiber_main(reinterpret_cast<Fiber *>((uintptr_t(hi) << 32) | uintptr_t(lo)));
}
#endif

void fiber_init(Worker &w, size_t i, Fiber *f) {
    char *base = w.stacks + i * w.stride + Worker::page();
    // Stacks are a page-multiple apart, so their tops would share L1 sets: each fiber's top
    // moves down by a cache line more than the previous one's (64 colours), or switching
    // through a block's fibers evicts itself.
    char *top = base + config().stack_bytes - (i % 64) * 64;
#if defined(__x86_64__)
    top = reinterpret_cast<char *>(uintptr_t(top) & ~uintptr_t(15));
    // Six registers and the return address; after the ret, rsp is top - 16 (16-aligned
    // before cudaemu_fiber_start's call, as the ABI wants).
    uint64_t *sp = reinterpret_cast<uint64_t *>(top - 16 - 56);
    sp[0] = 0;                                        // r15
    sp[1] = 0;                                        // r14
    sp[2] = reinterpret_cast<uint64_t>(&fiber_main);  // r13: the entry
    sp[3] = reinterpret_cast<uint64_t>(f);            // r12: its argument
    sp[4] = 0;                                        // rbx
    sp[5] = 0;                                        // rbp
    sp[6] = reinterpret_cast<uint64_t>(&cudaemu_fiber_start);
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = base;
    f->uc.uc_stack.ss_size = config().stack_bytes;
    f->uc.uc_link = nullptr;
    const uintptr_t p = reinterpret_cast<uintptr_t>(f);
    makecontext(&f->uc, reinterpret_cast<void (*)()>(&fiber_main_uc), 2, unsigned(p),
                unsigned(p >> 32));
#endif
}

Fiber *next_ready(Block &b) {
    Worker &w = *b.worker;
    const bool rev = config().reverse;
    while (++b.pass_k < b.n) {
        Fiber &f = w.fibers[rev ? b.n - 1 - b.pass_k : b.pass_k];
        if (f.state == kReady) return &f;
    }
    return nullptr;
}

// Runs every thread of `b` to its end: each pass resumes the ready threads (in order or in
// reverse), then releases the warp barriers and the block barrier every participant reached.
// A barrier that can never be released is a defect of the kernel, reported with its place.
void run_block(Block &b) {
    Worker &w = *b.worker;
    w.ensure(b.n);
    for (unsigned i = 0; i < b.n; ++i) {
        Fiber &f = w.fibers[i];
        f.linear = i;
        f.tid = uint3{i % b.dim.x, (i / b.dim.x) % b.dim.y, i / (b.dim.x * b.dim.y)};
        f.state = kReady;
        fiber_init(w, i, &f);
    }
    const unsigned n_warps = (b.n + 31) / 32;
    b.slots.assign(size_t(n_warps) * 3 * 32 * 16, 0);
    b.warp_gen.assign(n_warps, 0);
    for (;;) {
        // One pass: every ready thread runs until it waits or ends, in order (or reverse).
        b.pass_k = ~0u;
        if (Fiber *f = next_ready(b)) resume(w, f);
        bool released = false, all_done = true;
        for (unsigned wi = 0; wi < n_warps; ++wi) {
            const unsigned l0 = wi * 32, l1 = std::min(b.n, l0 + 32);
            Fiber *first = nullptr;
            for (unsigned i = l0; i < l1; ++i) {
                if (w.fibers[i].state == kAtWarpBarrier) {
                    first = &w.fibers[i];
                    break;
                }
            }
            if (!first) continue;
            const unsigned mask = first->mask;
            for (unsigned lane = 0; lane < 32; ++lane) {
                if (!(mask >> lane & 1u)) continue;
                if (l0 + lane >= b.n)
                    die(where(b, first) + ": warp sync at " + first->file + ":" +
                        std::to_string(first->line) + " names lane " + std::to_string(lane) +
                        ", which the block does not have");
                const Fiber &o = w.fibers[l0 + lane];
                if (o.state == kDone)
                    die(where(b, first) + ": warp sync (mask 0x" +
                        [&] {
                            char h[16];
                            std::snprintf(h, sizeof h, "%08x", mask);
                            return std::string(h);
                        }() +
                        ") at " + first->file + ":" + std::to_string(first->line) + " after lane " +
                        std::to_string(lane) + " exited");
                if (o.state == kAtBlockBarrier)
                    die(where(b, first) + ": lane " + std::to_string(lane) +
                        " waits at __syncthreads (" + o.file + ":" + std::to_string(o.line) +
                        ") while lane " + std::to_string(first->linear % 32) +
                        " waits at a warp sync (" + first->file + ":" +
                        std::to_string(first->line) + ")");
                if (o.mask != mask)
                    die(where(b, first) + ": lanes of one warp sync with different masks (" +
                        first->file + ":" + std::to_string(first->line) + ", " + o.file + ":" +
                        std::to_string(o.line) + ")");
            }
            for (unsigned lane = 0; lane < 32; ++lane)
                if (mask >> lane & 1u) w.fibers[l0 + lane].state = kReady;
            ++b.warp_gen[wi];
            released = true;
        }
        if (released) continue;
        const Fiber *at = nullptr;
        for (unsigned i = 0; i < b.n; ++i) {
            const Fiber &f = w.fibers[i];
            if (f.state == kDone) continue;
            all_done = false;
            if (!at) {
                at = &f;
            } else if (f.file != at->file || f.line != at->line) {
                die(where(b, &f) + ": divergent __syncthreads: this thread waits at " + f.file +
                    ":" + std::to_string(f.line) + ", thread (" + std::to_string(at->tid.x) + "," +
                    std::to_string(at->tid.y) + "," + std::to_string(at->tid.z) + ") at " +
                    at->file + ":" + std::to_string(at->line));
            }
        }
        if (all_done) break;
        for (unsigned i = 0; i < b.n; ++i)
            if (w.fibers[i].state == kAtBlockBarrier) w.fibers[i].state = kReady;
    }
}

// ---- launches -----------------------------------------------------------------------------

// The host threads that help run a launch's blocks (the launching thread runs blocks too).
class Pool {
public:
    static Pool &get() {
        static Pool *p = new Pool(config().threads - 1);  // never destroyed: threads may run
        return *p;
    }
    void run(std::function<void()> job, unsigned copies) {
        std::lock_guard<std::mutex> lk(m_);
        for (unsigned i = 0; i < copies && i < n_; ++i) q_.push_back(job);
        cv_.notify_all();
    }
    unsigned size() const { return n_; }

private:
    explicit Pool(unsigned n) : n_(n) {
        for (unsigned i = 0; i < n; ++i) std::thread([this] { loop(); }).detach();
    }
    void loop() {
        for (;;) {
            std::function<void()> job;
            {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, [&] { return !q_.empty(); });
                job = std::move(q_.front());
                q_.pop_front();
            }
            job();
        }
    }
    unsigned n_;
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> q_;
};

struct Grid {
    const char *kernel;
    dim3 grid, block;
    size_t shared_bytes;
    std::function<void()> body;
    std::atomic<uint64_t> next{0};
    uint64_t total = 0;
    std::mutex m;
    std::condition_variable cv;
    unsigned helpers_busy = 0;
};

void run_blocks(Grid &g) {
    Worker &w = worker();
    Block b;
    b.kernel = g.kernel;
    b.body = &g.body;
    b.dim = g.block;
    b.grid = g.grid;
    b.n = g.block.x * g.block.y * g.block.z;
    b.worker = &w;
    b.shared_bytes = g.shared_bytes;
    w.ensure(b.n);
    b.shared = w.shared + Worker::kSharedCap - ((g.shared_bytes + 15) & ~size_t(15));
    Block *saved = t_block;
    t_block = &b;
    for (;;) {
        const uint64_t i = g.next.fetch_add(1);
        if (i >= g.total) break;
        b.idx = uint3{unsigned(i % g.grid.x), unsigned((i / g.grid.x) % g.grid.y),
                      unsigned(i / (uint64_t(g.grid.x) * g.grid.y))};
        // Poison (NaN floats), and the up to 15 bytes of alignment slack before the guard
        // page too: a write there is past the launch's bytes, found after the block.
        const size_t slack = size_t(w.shared + Worker::kSharedCap - b.shared) - g.shared_bytes;
        std::memset(b.shared, 0xff, g.shared_bytes + slack);
        run_block(b);
        for (size_t k = 0; k < slack; ++k)
            if (static_cast<unsigned char>(b.shared[g.shared_bytes + k]) != 0xffu)
                die(where(b, nullptr) + ": write to dynamic shared memory past the launch's " +
                    std::to_string(g.shared_bytes) + " bytes (at byte " +
                    std::to_string(g.shared_bytes + k) + ")");
    }
    t_block = saved;
}

void run_grid(const std::shared_ptr<Grid> &g) {
    const unsigned helpers = unsigned(std::min<uint64_t>(Pool::get().size(), g->total - 1));
    if (helpers > 0) {
        g->helpers_busy = helpers;
        Pool::get().run(
            [g] {
                run_blocks(*g);
                std::lock_guard<std::mutex> lk(g->m);
                if (--g->helpers_busy == 0) g->cv.notify_all();
            },
            helpers);
    }
    run_blocks(*g);
    std::unique_lock<std::mutex> lk(g->m);
    g->cv.wait(lk, [&] { return g->helpers_busy == 0; });
}

// ---- memory -------------------------------------------------------------------------------

struct Alloc {
    size_t bytes;
    int device;  // -1: pinned host memory
    bool mmapped;
};

struct Memory {
    std::mutex m;
    std::map<uintptr_t, Alloc> allocs;
    std::vector<size_t> used;
};
Memory &memory() {
    static Memory *mem = [] {
        auto *x = new Memory();
        x->used.assign(size_t(std::max(config().devices, 1)), 0);
        return x;
    }();
    return *mem;
}

// The allocation holding [p, p + bytes), or nullptr.
const Alloc *find_alloc(Memory &mem, const void *p, size_t bytes, uintptr_t *base = nullptr) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = mem.allocs.upper_bound(a);
    if (it == mem.allocs.begin()) return nullptr;
    --it;
    if (a < it->first || a - it->first + bytes > it->second.bytes) return nullptr;
    if (base) *base = it->first;
    return &it->second;
}

void *allocate(size_t bytes, bool *mmapped) {
    const size_t r = (bytes + 255) & ~size_t(255);
    if (r >= (size_t(1) << 20)) {
        void *p = mmap(nullptr, r, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *mmapped = true;
        return p == MAP_FAILED ? nullptr : p;
    }
    *mmapped = false;
    return std::aligned_alloc(256, r);
}
void release(void *p, const Alloc &a) {
    if (a.mmapped)
        munmap(p, (a.bytes + 255) & ~size_t(255));
    else
        std::free(p);
}

// ---- streams and events -------------------------------------------------------------------

struct Stream;
struct Event {
    Stream *stream = nullptr;
    uint64_t seq = 0;  // complete once stream->executed >= seq
    bool timing = true;
    double at_ms = 0;
    int queried = 0;
};
struct Op {
    std::function<void()> fn;
    Event *wait = nullptr;
    Stream *wait_stream = nullptr;
    uint64_t wait_seq = 0;
};
struct Stream {
    int device = 0;
    bool blocking = true;
    std::recursive_mutex m;
    std::deque<Op> q;
    uint64_t enqueued = 0, executed = 0;
    int queried = 0;
};

struct Streams {
    std::mutex m;
    std::set<Stream *> all;
    std::vector<Stream *> legacy;  // one per device, for stream 0
};
Streams &streams() {
    static Streams *s = [] {
        auto *x = new Streams();
        for (int d = 0; d < std::max(config().devices, 1); ++d) {
            auto *st = new Stream();
            st->device = d;
            x->legacy.push_back(st);
        }
        return x;
    }();
    return *s;
}

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

void flush(Stream *s, uint64_t upto);

void run_op(Op &op) {
    if (op.wait_stream) flush(op.wait_stream, op.wait_seq);
    if (op.fn) op.fn();
}

void flush(Stream *s, uint64_t upto) {
    std::lock_guard<std::recursive_mutex> lk(s->m);
    while (s->executed < upto && !s->q.empty()) {
        Op op = std::move(s->q.front());
        s->q.pop_front();
        run_op(op);
        ++s->executed;
    }
}
void flush_all(Stream *s) {
    flush(s, UINT64_MAX);
}

Stream *resolve(cudaStream_t s) {
    if (!s) return streams().legacy[size_t(std::min(t_device, int(streams().legacy.size()) - 1))];
    return reinterpret_cast<Stream *>(s);
}
bool is_legacy(Stream *s) {
    for (Stream *l : streams().legacy)
        if (l == s) return true;
    return false;
}

// The legacy default stream waits for the blocking streams of its device (non-blocking ones
// do not synchronise with it).
void legacy_barrier(int device) {
    std::vector<Stream *> todo;
    {
        std::lock_guard<std::mutex> lk(streams().m);
        for (Stream *s : streams().all)
            if (s->blocking && s->device == device) todo.push_back(s);
    }
    for (Stream *s : todo) flush_all(s);
}
void device_barrier(int device) {
    std::vector<Stream *> todo;
    {
        std::lock_guard<std::mutex> lk(streams().m);
        for (Stream *s : streams().all)
            if (s->device == device) todo.push_back(s);
    }
    for (Stream *s : todo) flush_all(s);
    flush_all(streams().legacy[size_t(device)]);
}

uint64_t submit(Stream *s, Op op) {
    std::lock_guard<std::recursive_mutex> lk(s->m);
    const bool legacy = is_legacy(s);
    if (legacy && config().hold) legacy_barrier(s->device);
    s->q.push_back(std::move(op));
    const uint64_t seq = ++s->enqueued;
    if (!config().hold || legacy) flush(s, seq);
    return seq;
}

bool valid_device(int d) {
    return d >= 0 && d < config().devices;
}

}  // namespace

// ---- the scheduler's device-side interface -------------------------------------------------

const uint3 &thread_idx() {
    return t_fiber->tid;
}
const uint3 &block_idx() {
    return t_block->idx;
}
const dim3 &block_dim() {
    return t_block->dim;
}
const dim3 &grid_dim() {
    return t_block->grid;
}
void *dynamic_shared() {
    // A launch of 0 bytes gets the guard page's address: declaring the array is legal, the
    // first access faults (and is reported as past the launch's bytes).
    return t_block->shared;
}

void sync_block(const char *file, int line) {
    Fiber *f = t_fiber;
    if (!f) die("__syncthreads outside a kernel");
    f->state = kAtBlockBarrier;
    f->file = file;
    f->line = line;
    to_scheduler(f);
}

void sync_warp(unsigned mask, const char *file, int line) {
    Fiber *f = t_fiber;
    if (!f) die("warp sync outside a kernel");
    if (!(mask >> (f->linear % 32) & 1u))
        die(where(*t_block, f) + ": warp sync at " + file + ":" + std::to_string(line) +
            " by a lane not in its mask");
    f->state = kAtWarpBarrier;
    f->mask = mask;
    f->file = file;
    f->line = line;
    to_scheduler(f);
}

void shuffle(unsigned mask, const void *in, void *out, unsigned bytes, int src_lane,
             const char *file, int line) {
    Block &b = *t_block;
    Fiber *f = t_fiber;
    const unsigned warp = f->linear / 32, lane = f->linear % 32;
    if (src_lane < 0 || src_lane > 31 || !(mask >> src_lane & 1u))
        die(where(b, f) + ": shuffle at " + file + ":" + std::to_string(line) + " reads lane " +
            std::to_string(src_lane) + ", which is not in its mask");
    auto slot = [&](unsigned buf, unsigned l) {
        return &b.slots[((size_t(warp) * 3 + buf) * 32 + l) * 16];
    };
    // Most shuffles move a float or an int: copied inline rather than through memcpy's PLT.
    auto copy = [bytes](void *dst, const void *src) {
        if (bytes == 4) {
            uint32_t v;
            __builtin_memcpy(&v, src, 4);
            __builtin_memcpy(dst, &v, 4);
        } else {
            std::memcpy(dst, src, bytes);
        }
    };
    if (mask == 0xffffffffu) {
        // Double-buffered by the warp's barrier count: one barrier per shuffle.
        const unsigned buf = b.warp_gen[warp] & 1u;
        copy(slot(buf, lane), in);
        sync_warp(mask, file, line);
        copy(out, slot(buf, unsigned(src_lane)));
    } else {
        copy(slot(2, lane), in);
        sync_warp(mask, file, line);
        copy(out, slot(2, unsigned(src_lane)));
        sync_warp(mask, file, line);
    }
}

void fault(const char *what, const void *address) {
    char s[64];
    std::snprintf(s, sizeof s, " (address %p)", address);
    die(where(*t_block, t_fiber) + ": " + what + s);
}

cudaError_t launch(const char *kernel, dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, std::function<void()> body) {
    const uint64_t threads = uint64_t(block.x) * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
        grid.z > 65535) {
        std::fprintf(stderr,
                     "cudaemu: launch of %s with grid (%u,%u,%u), block (%u,%u,%u): invalid "
                     "configuration\n",
                     kernel, grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return ret(cudaErrorInvalidConfiguration);
    }
    if (shared_bytes > (48u << 10)) {
        // Beyond 48 KiB a kernel needs cudaFuncSetAttribute (which the module never calls).
        std::fprintf(stderr,
                     "cudaemu: launch of %s with %zu bytes of dynamic shared memory "
                     "(48 KiB without an opt-in)\n",
                     kernel, shared_bytes);
        return ret(cudaErrorInvalidValue);
    }
    auto g = std::make_shared<Grid>();
    g->kernel = kernel;
    g->grid = grid;
    g->block = block;
    g->shared_bytes = shared_bytes;
    g->body = std::move(body);
    g->total = uint64_t(grid.x) * grid.y * grid.z;
    Op op;
    op.fn = [g] { run_grid(g); };
    submit(resolve(stream), std::move(op));
    return cudaSuccess;
}

cudaError_t enqueue(cudaStream_t stream, std::function<void()> fn) {
    Op op;
    op.fn = std::move(fn);
    submit(resolve(stream), std::move(op));
    return cudaSuccess;
}

}  // namespace cudaemu

using namespace cudaemu;

// ---- the runtime API ----------------------------------------------------------------------

namespace {

// Reports a fault in a guard page (a fiber stack overflow, dynamic shared memory past its end)
// with the kernel and thread, instead of a bare segmentation fault.
void on_segv(int sig, siginfo_t *info, void *) {
    if (t_block && t_fiber) {
        char msg[512];
        const char *what = "invalid memory access";
        const char *a = static_cast<const char *>(info->si_addr);
        Worker *w = t_block->worker;
        if (w && a >= w->shared + Worker::kSharedCap &&
            a < w->shared + Worker::kSharedCap + Worker::page())
            what = "out-of-range dynamic shared memory access (past the launch's bytes)";
        else if (w && a >= w->stacks && a < w->stacks + w->n_stacks * w->stride)
            what = "fiber stack overflow or access below a thread's stack (LLMKV_EMU_STACK_KIB)";
        const int n =
            std::snprintf(msg, sizeof msg,
                          "cudaemu: %s at %p in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)\n",
                          what, info->si_addr, t_block->kernel, t_block->idx.x, t_block->idx.y,
                          t_block->idx.z, t_fiber->tid.x, t_fiber->tid.y, t_fiber->tid.z);
        if (n > 0) (void)!write(2, msg, size_t(std::min(n, int(sizeof msg) - 1)));
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

struct SegvHandler {
    SegvHandler() {
        struct sigaction sa {};
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        struct sigaction old {};
        sigaction(SIGSEGV, nullptr, &old);
        // Leave a handler someone else installed (a sanitizer) alone.
        if (old.sa_handler == SIG_DFL) sigaction(SIGSEGV, &sa, nullptr);
    }
};
const SegvHandler g_segv_handler;

enum class Side { kHost, kDevice, kAny };

// Checks one side of a copy: device memory (or mapped pinned memory) must be an allocation
// that holds the whole range, as the real runtime checks.
bool side_ok(const void *p, size_t bytes, Side side, bool *pinned) {
    Memory &mem = memory();
    std::lock_guard<std::mutex> lk(mem.m);
    const Alloc *a = find_alloc(mem, p, bytes);
    *pinned = a && a->device < 0;
    if (side == Side::kDevice) return a != nullptr;
    return true;
}

cudaError_t copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                 bool async) {
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return ret(cudaErrorInvalidValue);
    Side ds = Side::kAny, ss = Side::kAny;
    switch (kind) {
        case cudaMemcpyHostToHost:
            ds = ss = Side::kHost;
            break;
        case cudaMemcpyHostToDevice:
            ds = Side::kDevice, ss = Side::kHost;
            break;
        case cudaMemcpyDeviceToHost:
            ds = Side::kHost, ss = Side::kDevice;
            break;
        case cudaMemcpyDeviceToDevice:
            ds = ss = Side::kDevice;
            break;
        case cudaMemcpyDefault:
            break;
        default:
            return ret(cudaErrorInvalidMemcpyDirection);
    }
    bool dst_pinned = false, src_pinned = false;
    if (!side_ok(dst, bytes, ds, &dst_pinned) || !side_ok(src, bytes, ss, &src_pinned)) {
        std::fprintf(stderr,
                     "cudaemu: cudaMemcpy%s of %zu bytes %p -> %p: a device range outside "
                     "every allocation\n",
                     async ? "Async" : "", bytes, src, dst);
        return ret(cudaErrorInvalidValue);
    }
    Stream *s = resolve(stream);
    Op op;
    if (kind == cudaMemcpyHostToDevice && !src_pinned) {
        // From pageable memory the data is staged before the call returns.
        auto staged = std::make_shared<std::vector<unsigned char>>(
            static_cast<const unsigned char *>(src),
            static_cast<const unsigned char *>(src) + bytes);
        op.fn = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
    } else {
        op.fn = [dst, src, bytes] { std::memmove(dst, src, bytes); };
    }
    const uint64_t seq = submit(s, std::move(op));
    // Synchronous copies, and copies to pageable memory, complete before the call returns.
    if (!async || (kind == cudaMemcpyDeviceToHost && !dst_pinned)) flush(s, seq);
    return cudaSuccess;
}

cudaError_t set(void *p, int value, size_t bytes, cudaStream_t stream, bool async) {
    if (bytes == 0) return cudaSuccess;
    bool pinned = false;
    if (!p || !side_ok(p, bytes, Side::kDevice, &pinned)) return ret(cudaErrorInvalidValue);
    Stream *s = resolve(stream);
    Op op;
    op.fn = [p, value, bytes] { std::memset(p, value, bytes); };
    const uint64_t seq = submit(s, std::move(op));
    if (!async) flush(s, seq);
    return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return ret(cudaErrorInvalidValue);
    *count = config().devices;
    return config().devices > 0 ? cudaSuccess : ret(cudaErrorNoDevice);
}
cudaError_t cudaGetDevice(int *device) {
    if (!device) return ret(cudaErrorInvalidValue);
    *device = t_device;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    if (!prop) return ret(cudaErrorInvalidValue);
    if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
    std::memset(prop, 0, sizeof *prop);
    std::snprintf(prop->name, sizeof prop->name, "llmkv emulated H100 %d", device);
    prop->totalGlobalMem = config().device_bytes;
    prop->sharedMemPerBlock = 48 << 10;
    prop->sharedMemPerBlockOptin = 227 << 10;
    prop->sharedMemPerMultiprocessor = 228 << 10;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7fffffff;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->clockRate = 1980000;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->unifiedAddressing = 1;
    prop->memoryBusWidth = 5120;
    prop->l2CacheSize = 50 << 20;
    prop->maxThreadsPerMultiProcessor = 2048;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
    if (!value) return ret(cudaErrorInvalidValue);
    cudaDeviceProp p;
    if (cudaError_t e = cudaGetDeviceProperties(&p, device); e != cudaSuccess) return e;
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock:
            *value = p.maxThreadsPerBlock;
            break;
        case cudaDevAttrMaxSharedMemoryPerBlock:
            *value = int(p.sharedMemPerBlock);
            break;
        case cudaDevAttrWarpSize:
            *value = 32;
            break;
        case cudaDevAttrMultiProcessorCount:
            *value = p.multiProcessorCount;
            break;
        case cudaDevAttrUnifiedAddressing:
            *value = 1;
            break;
        case cudaDevAttrComputeCapabilityMajor:
            *value = p.major;
            break;
        case cudaDevAttrComputeCapabilityMinor:
            *value = p.minor;
            break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin:
            *value = int(p.sharedMemPerBlockOptin);
            break;
        default:
            return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
    device_barrier(t_device);
    return cudaSuccess;
}
cudaError_t cudaDeviceReset(void) {
    return cudaDeviceSynchronize();
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
    Memory &mem = memory();
    std::lock_guard<std::mutex> lk(mem.m);
    const size_t used = mem.used[size_t(t_device)];
    if (free_bytes) *free_bytes = config().device_bytes - std::min(used, config().device_bytes);
    if (total_bytes) *total_bytes = config().device_bytes;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    const cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) {
    return t_last_error;
}
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess:
            return "cudaSuccess";
        case cudaErrorInvalidValue:
            return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation:
            return "cudaErrorMemoryAllocation";
        case cudaErrorInitializationError:
            return "cudaErrorInitializationError";
        case cudaErrorInvalidConfiguration:
            return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidPitchValue:
            return "cudaErrorInvalidPitchValue";
        case cudaErrorInvalidDevicePointer:
            return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidMemcpyDirection:
            return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorNoDevice:
            return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice:
            return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle:
            return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady:
            return "cudaErrorNotReady";
        case cudaErrorIllegalAddress:
            return "cudaErrorIllegalAddress";
        case cudaErrorLaunchOutOfResources:
            return "cudaErrorLaunchOutOfResources";
        case cudaErrorLaunchFailure:
            return "cudaErrorLaunchFailure";
        case cudaErrorNotSupported:
            return "cudaErrorNotSupported";
        default:
            return "cudaErrorUnknown";
    }
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess:
            return "no error";
        case cudaErrorInvalidValue:
            return "invalid argument";
        case cudaErrorMemoryAllocation:
            return "out of memory";
        case cudaErrorInvalidConfiguration:
            return "invalid configuration argument";
        case cudaErrorNoDevice:
            return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice:
            return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle:
            return "invalid resource handle";
        case cudaErrorNotReady:
            return "device not ready";
        case cudaErrorInvalidMemcpyDirection:
            return "invalid copy direction for memcpy";
        default:
            return cudaGetErrorName(e);
    }
}
cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return ret(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
    return cudaRuntimeGetVersion(v);
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    if (!ptr) return ret(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
    if (bytes == 0) return cudaSuccess;
    Memory &mem = memory();
    {
        std::lock_guard<std::mutex> lk(mem.m);
        size_t &used = mem.used[size_t(t_device)];
        if (bytes > config().device_bytes - std::min(used, config().device_bytes))
            return ret(cudaErrorMemoryAllocation);
        used += bytes;
    }
    bool mm = false;
    void *p = allocate(bytes, &mm);
    std::lock_guard<std::mutex> lk(mem.m);
    if (!p) {
        mem.used[size_t(t_device)] -= bytes;
        return ret(cudaErrorMemoryAllocation);
    }
    // Device memory is not initialised: poison it (NaN floats and halves) so a read before a
    // write shows. Large (lazily committed) allocations are left alone.
    if (bytes <= (size_t(64) << 20)) std::memset(p, 0xff, bytes);
    mem.allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, t_device, mm};
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    Memory &mem = memory();
    int device = -1;
    {
        std::lock_guard<std::mutex> lk(mem.m);
        auto it = mem.allocs.find(reinterpret_cast<uintptr_t>(ptr));
        if (it == mem.allocs.end() || it->second.device < 0) return ret(cudaErrorInvalidValue);
        device = it->second.device;
    }
    device_barrier(device);  // cudaFree synchronises the device
    std::lock_guard<std::mutex> lk(mem.m);
    auto it = mem.allocs.find(reinterpret_cast<uintptr_t>(ptr));
    mem.used[size_t(device)] -= it->second.bytes;
    release(ptr, it->second);
    mem.allocs.erase(it);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
    if (!ptr) return ret(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (flags & ~unsigned(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
        return ret(cudaErrorInvalidValue);
    if (bytes == 0) return cudaSuccess;
    bool mm = false;
    void *p = allocate(bytes, &mm);
    if (!p) return ret(cudaErrorMemoryAllocation);
    Memory &mem = memory();
    std::lock_guard<std::mutex> lk(mem.m);
    mem.allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, -1, mm};
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **ptr, size_t bytes) {
    return cudaHostAlloc(ptr, bytes, 0);
}
cudaError_t cudaFreeHost(void *ptr) {
    if (!ptr) return cudaSuccess;
    Memory &mem = memory();
    {
        std::lock_guard<std::mutex> lk(mem.m);
        auto it = mem.allocs.find(reinterpret_cast<uintptr_t>(ptr));
        if (it == mem.allocs.end() || it->second.device >= 0) return ret(cudaErrorInvalidValue);
    }
    for (int d = 0; d < config().devices; ++d) device_barrier(d);
    std::lock_guard<std::mutex> lk(mem.m);
    auto it = mem.allocs.find(reinterpret_cast<uintptr_t>(ptr));
    release(ptr, it->second);
    mem.allocs.erase(it);
    return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void **device_ptr, void *host_ptr, unsigned int) {
    if (!device_ptr) return ret(cudaErrorInvalidValue);
    bool pinned = false;
    if (!side_ok(host_ptr, 1, Side::kDevice, &pinned) || !pinned) return ret(cudaErrorInvalidValue);
    *device_ptr = host_ptr;  // unified addressing
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    return copy(dst, src, bytes, kind, nullptr, false);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    return copy(dst, src, bytes, kind, stream, true);
}
cudaError_t cudaMemset(void *p, int v, size_t bytes) {
    return set(p, v, bytes, nullptr, false);
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t stream) {
    return set(p, v, bytes, stream, true);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    if (!stream) return ret(cudaErrorInvalidValue);
    if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
    auto *s = new Stream();
    s->device = t_device;
    s->blocking = !(flags & cudaStreamNonBlocking);
    {
        std::lock_guard<std::mutex> lk(streams().m);
        streams().all.insert(s);
    }
    *stream = reinterpret_cast<cudaStream_t>(s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream) return ret(cudaErrorInvalidResourceHandle);
    Stream *s = reinterpret_cast<Stream *>(stream);
    {
        std::lock_guard<std::mutex> lk(streams().m);
        if (!streams().all.count(s)) return ret(cudaErrorInvalidResourceHandle);
    }
    flush_all(s);  // its work completes; the handle goes
    std::lock_guard<std::mutex> lk(streams().m);
    streams().all.erase(s);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    Stream *s = resolve(stream);
    if (is_legacy(s) && config().hold) legacy_barrier(s->device);
    flush_all(s);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    Stream *s = resolve(stream);
    std::lock_guard<std::recursive_mutex> lk(s->m);
    if (s->executed == s->enqueued) return cudaSuccess;
    // Held work stays pending the first time it is asked about, then completes (a poller
    // would otherwise wait forever).
    if (s->queried++ == 0) return cudaErrorNotReady;
    s->queried = 0;
    flush_all(s);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
    if (!event) return ret(cudaErrorInvalidResourceHandle);
    Event *e = reinterpret_cast<Event *>(event);
    if (!e->stream) return cudaSuccess;  // never recorded: nothing to wait for
    Op op;
    op.wait_stream = e->stream;
    op.wait_seq = e->seq;
    submit(resolve(stream), std::move(op));
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    if (!event) return ret(cudaErrorInvalidValue);
    auto *e = new Event();
    e->timing = !(flags & cudaEventDisableTiming);
    *event = reinterpret_cast<cudaEvent_t>(e);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *event) {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event) return ret(cudaErrorInvalidResourceHandle);
    delete reinterpret_cast<Event *>(event);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return ret(cudaErrorInvalidResourceHandle);
    Event *e = reinterpret_cast<Event *>(event);
    Stream *s = resolve(stream);
    std::lock_guard<std::recursive_mutex> lk(s->m);
    e->stream = s;
    e->seq = s->enqueued + 1;
    e->queried = 0;
    Op op;
    op.fn = [e] { e->at_ms = now_ms(); };
    submit(s, std::move(op));
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event) return ret(cudaErrorInvalidResourceHandle);
    Event *e = reinterpret_cast<Event *>(event);
    if (e->stream) flush(e->stream, e->seq);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event) return ret(cudaErrorInvalidResourceHandle);
    Event *e = reinterpret_cast<Event *>(event);
    if (!e->stream) return cudaSuccess;
    {
        std::lock_guard<std::recursive_mutex> lk(e->stream->m);
        if (e->stream->executed >= e->seq) return cudaSuccess;
    }
    if (e->queried++ == 0) return cudaErrorNotReady;
    flush(e->stream, e->seq);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !start || !end) return ret(cudaErrorInvalidValue);
    Event *a = reinterpret_cast<Event *>(start), *b = reinterpret_cast<Event *>(end);
    if (!a->timing || !b->timing) return ret(cudaErrorInvalidResourceHandle);
    if (!a->stream || !b->stream) return ret(cudaErrorInvalidResourceHandle);
    if (a->stream->executed < a->seq || b->stream->executed < b->seq) return cudaErrorNotReady;
    *ms = float(b->at_ms - a->at_ms);
    return cudaSuccess;
}

// ---- cuBLAS ---------------------------------------------------------------------------------

struct cublasContext {
    cudaStream_t stream = nullptr;
};

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *, size_t) {
    return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

namespace {

float half_to_float(uint16_t h) {
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t i = 0; i < 65536; ++i) t[i] = __half2float(__ushort_as_half(uint16_t(i)));
        return t;
    }();
    return table[h];
}

// op(X) as rows x k floats, row-major: row r is op(X)[r][0..k).
std::vector<float> rows_of(const void *x, cudaDataType t, bool trans, int rows, int k, int ld) {
    std::vector<float> out(size_t(rows) * size_t(k));
    for (int r = 0; r < rows; ++r) {
        for (int l = 0; l < k; ++l) {
            // column-major X: element (i, j) at i + j * ld; op(X)(r, l) = trans ? X(l, r) : X(r, l)
            const size_t at =
                trans ? size_t(l) + size_t(r) * size_t(ld) : size_t(r) + size_t(l) * size_t(ld);
            out[size_t(r) * size_t(k) + size_t(l)] =
                t == CUDA_R_16F ? half_to_float(static_cast<const uint16_t *>(x)[at])
                                : static_cast<const float *>(x)[at];
        }
    }
    return out;
}

float dot(const float *a, const float *b, int k) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int l = 0;
    for (; l + 8 <= k; l += 8)
        for (int u = 0; u < 8; ++u) s[u] += a[l + u] * b[l + u];
    for (; l < k; ++l) s[0] += a[l] * b[l];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    auto type_ok = [](cudaDataType t) { return t == CUDA_R_16F || t == CUDA_R_32F; };
    if (m < 0 || n < 0 || k < 0 || !alpha || !beta || !type_ok(Atype) || !type_ok(Btype) ||
        !type_ok(Ctype) || transa == CUBLAS_OP_C || transb == CUBLAS_OP_C ||
        lda < std::max(1, transa == CUBLAS_OP_N ? m : k) ||
        ldb < std::max(1, transb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
    const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    enqueue(handle->stream, [=] {
        const std::vector<float> a = rows_of(A, Atype, ta, m, k, lda);
        // op(B) is k x n; its columns as rows: op(B)^T = rows_of(B, !tb) with n rows.
        const std::vector<float> b = rows_of(B, Btype, !tb, n, k, ldb);
        for (int j = 0; j < n; ++j) {
            for (int i = 0; i < m; ++i) {
                float v = al * dot(&a[size_t(i) * size_t(k)], &b[size_t(j) * size_t(k)], k);
                const size_t at = size_t(i) + size_t(j) * size_t(ldc);
                if (Ctype == CUDA_R_32F) {
                    float *c = static_cast<float *>(C);
                    if (be != 0.0f) v += be * c[at];  // beta == 0: C is not read
                    c[at] = v;
                } else {
                    uint16_t *c = static_cast<uint16_t *>(C);
                    if (be != 0.0f) v += be * half_to_float(c[at]);
                    c[at] = __half_as_ushort(__float2half_rn(v));
                }
            }
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS:
            return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED:
            return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED:
            return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE:
            return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH:
            return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_EXECUTION_FAILED:
            return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR:
            return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED:
            return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS:
            return "success";
        case CUBLAS_STATUS_INVALID_VALUE:
            return "an invalid value was used as an argument";
        case CUBLAS_STATUS_NOT_SUPPORTED:
            return "the functionality requested is not supported";
        default:
            return cublasGetStatusName(s);
    }
}

}  // extern "C"
