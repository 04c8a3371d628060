/* cudasim.cpp: the CUDA simulator's runtime (note [cudasim] in
 * docs/ARCHITECTURE.md): the CUDA runtime API calls sharc makes, over host
 * memory, and the kernel scheduler behind cudasim_launch.
 *
 * Device memory is an arena the host cannot read or write: every
 * allocation has its own pages (the pointer placed so that its end, rounded
 * up to 256 bytes, touches a guard page), and the arena is PROT_NONE except
 * while a kernel, a copy or a memset runs. A host dereference of a device
 * pointer, or a kernel reading past its allocation, faults, and the fault
 * handler names the address, the allocation and the kernel. Copies check
 * their direction and bounds; kernel launches check that every pointer
 * argument is device (or pinned host) memory.
 *
 * Kernels: each thread of a block is a coroutine (ucontext) on its own
 * stack; they run in turn until they finish or wait at a barrier
 * (__syncthreads: every live thread of the block; a warp shuffle: every lane
 * its mask names). Barriers that can never all be reached (a __syncthreads
 * inside a branch some threads skip, a shuffle whose mask names a thread
 * that exited) abort with the kernel's name: on a GPU they hang or read
 * garbage. Blocks run one after another.
 *
 * Streams: launches, copies and memsets are queued on their stream and run
 * only when the host waits for them (a stream or event synchronize, a
 * device synchronize, a free, a copy into pageable host memory) or when
 * another stream waits on an event recorded after them; a stream never
 * runs ahead because a different stream was drained. So work that reads
 * what another stream writes without an event between them reads stale
 * data, as it may on a GPU. CUDASIM_SYNC=1 runs everything when queued.
 * CUDASIM_LAUNCH_STATS=1 prints the launches queued, by kernel, at exit.
 * CUDASIM_ORDER=forward|reverse|shuffle[:seed]: the order threads and
 * blocks are resumed in (order_init below); CUDASIM_DIGEST=1 prints a hash
 * of every device-to-host copy (copy_now). */

#include "cudasim.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <time.h>
#include <stdarg.h>
#include <execinfo.h>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <memory>
#include <string>
#include <setjmp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

namespace cudasim {

uint3 cur_thread, cur_block;
dim3 cur_block_dim, cur_grid_dim;
uint64_t block_serial;

/* ------------------------------------------------------------ memory */

static const size_t PAGE = 4096;
/* address space reserved for device memory, never committed up front: 4 TiB
 * (CUDASIM_ARENA bytes: valgrind cannot reserve that much) */
static size_t ARENA = (size_t)1 << 42;
static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static char *arena, *top;
struct alloc_rec {
    size_t bytes;     /* as asked */
    char *pages;      /* first page of the allocation */
    size_t npages;    /* without the guard page */
    bool pinned_host; /* cudaMallocHost: host memory (not in the arena) */
};
static std::map<uintptr_t, alloc_rec> allocs; /* by user pointer */
static size_t live_bytes, peak_bytes;
static unsigned long host_syncs; /* cudasim_host_syncs */
/* Launches queued (kernels and cuBLASLt matmuls), by name: CUDASIM_LAUNCH_STATS=1 prints them at exit. */
static std::map<std::string, unsigned long> launches;
static void count_launch(const char *what) { launches[what ? what : "?"]++; }
static void print_launches(void) {
    unsigned long total = 0;
    for (const auto &l : launches) total += l.second;
    fprintf(stderr, "cudasim: kernel launches %lu\n", total);
    for (const auto &l : launches) fprintf(stderr, "cudasim: launches %s %lu\n", l.first.c_str(), l.second);
}
/* One host synchronization (CUDASIM_SYNC_TRACE=1: with the caller's backtrace). */
static void count_sync(void) {
    host_syncs++;
    static int trace = -1;
    if (trace < 0) trace = getenv("CUDASIM_SYNC_TRACE") && getenv("CUDASIM_SYNC_TRACE")[0] == '1';
    if (!trace) return;
    fprintf(stderr, "cudasim: host sync %lu\n", host_syncs);
    void *bt[16];
    int n = backtrace(bt, 16);
    backtrace_symbols_fd(bt, n, 2);
}
static int device_depth; /* > 0 while device code runs (the arena is readable) */
static const char *cur_kernel;
static cudaError_t last_error = cudaSuccess;

static size_t mem_limit(void) {
    const char *e = getenv("CUDASIM_MEMORY");
    return e && e[0] ? (size_t)strtoull(e, NULL, 10) : (size_t)80 << 30;
}

[[noreturn]] static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudasim: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    void *bt[32];
    int n = backtrace(bt, 32);
    backtrace_symbols_fd(bt, n, 2);
    abort();
}

/* the allocation holding [p, p + n) (n = 0: p may also be its end), or NULL */
static const alloc_rec *find(const void *p, size_t n, uintptr_t *start) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return NULL;
    --it;
    if (a + n > it->first + it->second.bytes) return NULL;
    if (n > 0 && a >= it->first + it->second.bytes) return NULL;
    if (start) *start = it->first;
    return &it->second;
}

static bool in_arena(const void *p) { return arena && (const char *)p >= arena && (const char *)p < arena + ARENA; }

/* the arena readable (device code runs) or not (host code runs) */
static void device_enter(void) {
    if (device_depth++ > 0) return;
    for (auto &a : allocs)
        if (!a.second.pinned_host && mprotect(a.second.pages, a.second.npages * PAGE, PROT_READ | PROT_WRITE) != 0)
            die("mprotect: %s", strerror(errno));
}
static void device_leave(void) {
    if (--device_depth > 0) return;
    if (top > arena && mprotect(arena, (size_t)(top - arena), PROT_NONE) != 0) die("mprotect: %s", strerror(errno));
}

/* a host function queued on a stream (cudaLaunchHostFunc) runs as host code: the arena unreadable */
static void as_host(cudaHostFn_t fn, void *arg) {
    const int depth = device_depth;
    if (depth > 0) {
        device_depth = 1;
        device_leave();
    }
    fn(arg);
    if (depth > 0) {
        device_enter();
        device_depth = depth;
    }
}

static void describe(uintptr_t a, char *buf, size_t n) {
    auto it = allocs.upper_bound(a);
    if (it != allocs.begin()) {
        --it;
        uintptr_t s = it->first;
        if (a < s + it->second.bytes) {
            snprintf(buf, n, "byte %zu of a %zu-byte allocation", (size_t)(a - s), it->second.bytes);
            return;
        }
        if (a < (uintptr_t)(it->second.pages + (it->second.npages + 1) * PAGE)) {
            snprintf(buf, n, "%zu bytes past the end of a %zu-byte allocation", (size_t)(a - s - it->second.bytes),
                     it->second.bytes);
            return;
        }
    }
    snprintf(buf, n, "no live allocation (freed, or never allocated)");
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
    if (in_arena(si->si_addr)) {
        char what[160];
        describe((uintptr_t)si->si_addr, what, sizeof what);
        if (device_depth > 0)
            die("%s (block %u,%u,%u thread %u,%u,%u) touched device address %p: %s",
                cur_kernel ? cur_kernel : "a device copy", cur_block.x, cur_block.y, cur_block.z, cur_thread.x,
                cur_thread.y, cur_thread.z, si->si_addr, what);
        die("host code touched device memory at %p (%s): device memory is only for kernels and copies", si->si_addr,
            what);
    }
    signal(sig, SIG_DFL); /* not ours: the default action (a core, the usual message) */
    raise(sig);
}

static void init_once(void) {
    if (arena) return;
    const char *ea = getenv("CUDASIM_ARENA");
    if (ea && ea[0]) ARENA = (size_t)strtoull(ea, NULL, 10);
    void *p = mmap(NULL, ARENA, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("cannot reserve the device arena: %s", strerror(errno));
    arena = top = (char *)p;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    static char altstack[1 << 16];
    stack_t ss = {altstack, 0, sizeof altstack};
    sigaltstack(&ss, NULL);
    const char *es = getenv("CUDASIM_SYNC_STATS");
    if (es && es[0] == '1') atexit([]() { fprintf(stderr, "cudasim: host syncs %lu\n", host_syncs); });
    const char *el = getenv("CUDASIM_LAUNCH_STATS");
    if (el && el[0] == '1') atexit(print_launches);
}

static cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cudaError_t fail(cudaError_t e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudasim: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    last_error = e;
    return e;
}

/* ------------------------------------------------------------ kernels */

static const size_t STACK = (size_t)128 << 10;
enum { RUN, AT_BLOCK, AT_WARP, DONE };
/* A simulated thread: a coroutine on its own stack, created once (the pool
 * grows to the largest block) and reused for every block of every launch.
 * Switches are _setjmp/_longjmp (no signal-mask system call, unlike
 * swapcontext, which is used once per coroutine to start it). */
struct sim_thread {
    jmp_buf jb;
    uint3 tid;
    int state;
    unsigned warp_mask; /* at AT_WARP: the lanes it waits for */
    void *site;         /* at AT_BLOCK: where its __syncthreads is */
    const char *coll;   /* at AT_WARP: the warp collective it waits in (NULL: a shuffle) */
    uint64_t coll_key;  /* ... and the arguments every lane must agree on */
};
/* never destroyed: the pool lives as long as the process, and a vector
 * destroyed at exit would leave LeakSanitizer (make asan) its threads unreachable */
static std::vector<sim_thread *> &threads = *new std::vector<sim_thread *>;
static jmp_buf sched_jb;
static ucontext_t builder_uc;
static sim_thread *creating;
static sim_thread *cur;
static int cur_index;
static body_fn cur_body;
static void *cur_arg;
static std::vector<uint64_t> warp_slots; /* 32 per warp */
static std::vector<float> warp_bufs;     /* WARP_BUF per warp: a warp collective's exchange area */
static const size_t WARP_BUF = 3 * 256;
static int nthreads;

static void coro_main(void) {
    sim_thread *me = creating;
    if (_setjmp(me->jb) == 0) setcontext(&builder_uc); /* created: back to the pool's builder */
    for (;;) {
        cur_body(cur_arg);
        me->state = DONE;
        if (_setjmp(me->jb) == 0) _longjmp(sched_jb, 1);
    }
}

static void grow_pool(int n) {
    while ((int)threads.size() < n) {
        sim_thread *t = new sim_thread();
        void *stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (stack == MAP_FAILED) die("cannot map a thread stack");
        ucontext_t uc;
        getcontext(&uc);
        uc.uc_stack.ss_sp = stack;
        uc.uc_stack.ss_size = STACK;
        uc.uc_link = NULL;
        makecontext(&uc, coro_main, 0);
        creating = t;
        swapcontext(&builder_uc, &uc);
        threads.push_back(t);
    }
}

/* run cur until it yields (its own frame: the caller's locals are not live across the jump) */
__attribute__((noinline)) static void resume_cur(void) {
    if (_setjmp(sched_jb) == 0) _longjmp(cur->jb, 1);
}

static void yield_to_scheduler(void) {
    if (_setjmp(cur->jb) == 0) _longjmp(sched_jb, 1);
}

__attribute__((noinline)) void sync_block(void) {
    if (!cur) die("__syncthreads outside a kernel");
    cur->state = AT_BLOCK;
    cur->site = __builtin_return_address(0);
    yield_to_scheduler();
}

int lane(void) { return cur_index % 32; }

uint64_t warp_exchange(unsigned mask, uint64_t mine, int src) {
    if (!cur) die("warp shuffle outside a kernel");
    int l = cur_index % 32, w = cur_index / 32;
    if (!(mask & (1u << l))) die("%s: lane %d shuffles with a mask (0x%08x) that leaves it out", cur_kernel, l, mask);
    warp_slots[(size_t)w * 32 + l] = mine;
    cur->state = AT_WARP;
    cur->warp_mask = mask;
    cur->coll = NULL;
    yield_to_scheduler(); /* every lane of the mask has written */
    if (!(mask & (1u << src)))
        die("%s: lane %d reads lane %d, which its mask 0x%08x leaves out", cur_kernel, l, src, mask);
    uint64_t v = warp_slots[(size_t)w * 32 + src];
    cur->state = AT_WARP;
    yield_to_scheduler(); /* every lane has read: the slots may be written again */
    return v;
}

void warp_collective(const char *op, uint64_t key) {
    if (!cur) die("%s outside a kernel", op);
    cur->state = AT_WARP;
    cur->warp_mask = 0xffffffffu;
    cur->coll = op;
    cur->coll_key = key;
    yield_to_scheduler(); /* released once all 32 lanes wait here with the same key */
    cur->coll = NULL;
}

void kernel_fail(const char *what) {
    die("%s: block %u,%u,%u thread %u,%u,%u: %s", cur_kernel ? cur_kernel : "(no kernel)", cur_block.x, cur_block.y,
        cur_block.z, cur_thread.x, cur_thread.y, cur_thread.z, what);
}

float *warp_buf(void) { return &warp_bufs[(size_t)(cur_index / 32) * WARP_BUF]; }

/* release the waiters of every warp whose named lanes all wait at a shuffle
 * or at one warp collective (every lane, the same operation and arguments);
 * returns whether any thread may run */
static bool release_warps(void) {
    bool any = false;
    for (int w = 0; w * 32 < nthreads; w++) {
        int lo = w * 32, hi = lo + 32 < nthreads ? lo + 32 : nthreads;
        unsigned mask = 0;
        bool waiting = false, ok = true;
        const sim_thread *coll = NULL; /* a lane waiting in a warp collective, lane coll_lane */
        int coll_lane = 0;
        for (int i = lo; i < hi && !coll; i++)
            if (threads[i]->state == AT_WARP && threads[i]->coll) coll = threads[i], coll_lane = i - lo;
        for (int i = lo; i < hi; i++)
            if (threads[i]->state == AT_WARP) {
                const sim_thread *t = threads[i];
                if (coll && (!t->coll || strcmp(t->coll, coll->coll) || t->coll_key != coll->coll_key))
                    die("%s: lanes of warp %d wait in different warp operations (lane %d in %s, lane %d in %s%s): "
                        "a warp collective (wmma, __syncwarp) needs every lane at the same call, with the same "
                        "arguments",
                        cur_kernel, w, coll_lane, coll->coll, i - lo, t->coll ? t->coll : "a shuffle",
                        t->coll && !strcmp(t->coll, coll->coll) ? " with other arguments" : "");
                if (waiting && threads[i]->warp_mask != mask)
                    die("%s: lanes of warp %d shuffle with different masks (0x%08x, 0x%08x)", cur_kernel, w, mask,
                        threads[i]->warp_mask);
                mask = threads[i]->warp_mask;
                waiting = true;
            }
        if (!waiting) continue;
        for (int l = 0; l < 32; l++) {
            if (!(mask & (1u << l))) continue;
            int i = lo + l;
            if (i >= hi)
                die("%s: a shuffle's mask 0x%08x names lane %d, beyond the block's %d threads", cur_kernel, mask, l,
                    nthreads);
            if (threads[i]->state == DONE)
                die("%s: a shuffle's mask 0x%08x names lane %d of warp %d, which has exited", cur_kernel, mask, l, w);
            if (threads[i]->state != AT_WARP) ok = false;
        }
        if (!ok) continue;
        for (int l = 0; l < 32; l++)
            if (mask & (1u << l)) threads[lo + l]->state = RUN;
        any = true;
    }
    return any;
}

/* CUDASIM_ORDER (note [cudasim]): the order in which a block's threads
 * (and so its warps) are resumed between synchronization points, and the
 * order of a launch's blocks. forward (the default): thread 0 first, block
 * 0 first; reverse: the last first; shuffle[:seed]: a permutation drawn
 * anew for every round of every block (and a permuted block order) from a
 * generator seeded once (seed 1 unless given), so a run is repeatable. A
 * thread that reads what another thread of its block wrote, or overwrites
 * what another reads, with no __syncthreads/__syncwarp/shuffle between
 * them, gets the right value in forward order only by luck; reverse and
 * shuffle give it the other order, as a GPU (Volta's independent thread
 * scheduling included) may. */
enum order_kind { ORDER_FORWARD, ORDER_REVERSE, ORDER_SHUFFLE };
static order_kind order_mode;
static uint64_t order_state; /* splitmix64 */
static std::vector<int> order;

static void order_init(void) {
    static bool done;
    if (done) return;
    done = true;
    const char *e = getenv("CUDASIM_ORDER");
    if (!e || !e[0] || !strcmp(e, "forward")) order_mode = ORDER_FORWARD;
    else if (!strcmp(e, "reverse")) order_mode = ORDER_REVERSE;
    else if (!strncmp(e, "shuffle", 7) && (e[7] == 0 || e[7] == ':')) {
        order_mode = ORDER_SHUFFLE;
        order_state = 1;
        if (e[7] == ':') {
            char *end;
            order_state = strtoull(e + 8, &end, 10);
            if (e[8] == 0 || *end) die("CUDASIM_ORDER=%s: expected shuffle:SEED with a decimal seed", e);
        }
    } else die("CUDASIM_ORDER=%s: expected forward, reverse or shuffle[:seed]", e);
}

static uint64_t order_next(void) {
    uint64_t z = (order_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* the resume order of the next round over the block's n threads */
static void order_round(int n) {
    if ((int)order.size() != n || order_mode == ORDER_SHUFFLE) {
        order.resize((size_t)n);
        for (int i = 0; i < n; i++) order[(size_t)i] = order_mode == ORDER_REVERSE ? n - 1 - i : i;
        if (order_mode == ORDER_SHUFFLE)
            for (int i = n - 1; i > 0; i--)
                std::swap(order[(size_t)i], order[(size_t)(order_next() % (uint64_t)(i + 1))]);
    }
}

static void run_block(void) {
    order.clear();
    for (int i = 0; i < nthreads; i++) {
        sim_thread &t = *threads[i];
        t.state = RUN;
        t.tid.x = (unsigned)(i % cur_block_dim.x);
        t.tid.y = (unsigned)((i / cur_block_dim.x) % cur_block_dim.y);
        t.tid.z = (unsigned)(i / (cur_block_dim.x * cur_block_dim.y));
    }
    for (;;) {
        order_round(nthreads);
        for (int k = 0; k < nthreads; k++) {
            int i = order[(size_t)k];
            if (threads[i]->state != RUN) continue;
            cur = threads[i];
            cur_index = i;
            cur_thread = cur->tid;
            resume_cur();
            cur = NULL;
        }
        if (release_warps()) continue;
        int done = 0, at_block = 0;
        for (int i = 0; i < nthreads; i++) {
            done += threads[i]->state == DONE;
            at_block += threads[i]->state == AT_BLOCK;
        }
        if (done == nthreads) return;
        if (done + at_block == nthreads) {
            /* threads that exited count as arrived (what GPUs do for an early
             * return); threads at two different barriers would hang a GPU */
            void *site = NULL;
            for (int i = 0; i < nthreads; i++) {
                if (threads[i]->state != AT_BLOCK) continue;
                if (site && threads[i]->site != site)
                    die("%s: block %u,%u,%u: threads wait at two different __syncthreads (%p and %p): a barrier "
                        "inside a branch not every thread takes",
                        cur_kernel, cur_block.x, cur_block.y, cur_block.z, site, threads[i]->site);
                site = threads[i]->site;
            }
            for (int i = 0; i < nthreads; i++)
                if (threads[i]->state == AT_BLOCK) threads[i]->state = RUN;
            continue;
        }
        die("%s: block %u,%u,%u cannot go on: %d threads wait at __syncthreads while others wait at a warp shuffle "
            "(a barrier inside a branch not every thread takes)",
            cur_kernel, cur_block.x, cur_block.y, cur_block.z, at_block);
    }
}

/* ------------------------------------------------------------ streams */

struct sim_event;
struct op {
    std::function<void()> fn; /* the work (empty for an event record or wait) */
    sim_event *rec;           /* an event record: the event and its generation */
    uint64_t rec_gen;
    sim_event *wait; /* a wait for an event's generation */
    uint64_t wait_gen;
};
struct sim_stream {
    int magic;
    std::deque<op> q;
    bool draining;
};
struct sim_event {
    int magic;
    sim_stream *stream; /* where its last record is queued */
    uint64_t gen, done; /* records asked, records reached */
    bool timing;        /* created without cudaEventDisableTiming */
    double reached_s;   /* host monotonic time when its last record was reached */
};
static sim_stream legacy_stream = {0x57, {}, false};
static std::vector<sim_stream *> streams = {&legacy_stream};

static bool deferred(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CUDASIM_SYNC");
        v = !(e && e[0] == '1');
    }
    return v;
}

sim_stream *stream_of(cudaStream_t s) {
    if (!s) return &legacy_stream;
    sim_stream *st = (sim_stream *)s;
    if (st->magic != 0x57) die("a stream that is not one (destroyed, or never created): %p", (void *)s);
    return st;
}

static void exec(op &o) {
    if (o.fn) o.fn();
    if (o.rec) {
        o.rec->done = o.rec_gen > o.rec->done ? o.rec_gen : o.rec->done;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        o.rec->reached_s = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    }
}

static void drain_event(sim_event *e);

/* run up to n of the stream's queued operations, in order */
static void drain(sim_stream *st, size_t n = (size_t)-1) {
    if (st->draining) die("streams wait on each other's events in a cycle: a GPU would hang");
    st->draining = true;
    device_enter(); /* once for the whole run of operations, not per kernel: mprotect of every allocation was
                       most of a small run's time (host functions protect it again: as_host) */
    while (!st->q.empty() && n-- > 0) {
        op &front = st->q.front();
        if (front.wait && front.wait->done < front.wait_gen) drain_event(front.wait);
        op o = std::move(st->q.front());
        st->q.pop_front();
        exec(o);
    }
    device_leave();
    st->draining = false;
}

static void drain_event(sim_event *e) {
    while (e->done < e->gen) {
        if (!e->stream || e->stream->q.empty()) die("an event's record is not queued anywhere");
        drain(e->stream, 1);
    }
}

static void drain_all(void) {
    for (bool again = true; again;) {
        again = false;
        for (sim_stream *st : streams)
            if (!st->q.empty()) {
                drain(st);
                again = true;
            }
    }
}

void enqueue(sim_stream *st, std::function<void()> fn) {
    op o{std::move(fn), NULL, 0, NULL, 0};
    if (deferred()) st->q.push_back(std::move(o));
    else exec(o);
}

static void launch_now(const char *kernel, const launch_cfg &cfg, body_fn body, void *arg) {
    int nt = (int)(cfg.block.x * cfg.block.y * cfg.block.z);
    grow_pool(nt);
    warp_slots.assign((size_t)(nt + 31) / 32 * 32, 0);
    warp_bufs.assign((size_t)(nt + 31) / 32 * WARP_BUF, 0.0f);
    nthreads = nt;
    cur_body = body;
    cur_arg = arg;
    cur_kernel = kernel;
    cur_block_dim = cfg.block;
    cur_grid_dim = cfg.grid;
    device_enter();
    /* blocks in CUDASIM_ORDER too: reverse, or shuffled as b -> (a b + c)
     * mod nb with a prime to nb (a permutation needing no table) */
    uint64_t nb = (uint64_t)cfg.grid.x * cfg.grid.y * cfg.grid.z, a = 1, c = 0;
    if (order_mode == ORDER_SHUFFLE && nb > 1) {
        c = order_next() % nb;
        do a = order_next() % nb;
        while (std::gcd(a, nb) != 1);
    }
    for (uint64_t k = 0; k < nb; k++) {
        uint64_t b = order_mode == ORDER_REVERSE ? nb - 1 - k : (uint64_t)(((unsigned __int128)a * k + c) % nb);
        cur_block.x = (unsigned)(b % cfg.grid.x);
        cur_block.y = (unsigned)(b / cfg.grid.x % cfg.grid.y);
        cur_block.z = (unsigned)(b / ((uint64_t)cfg.grid.x * cfg.grid.y));
        block_serial++; /* a fresh block: its shared memory is poisoned anew */
        run_block();
    }
    device_leave();
    cur_kernel = NULL;
}

void run(const char *kernel, const launch_cfg &cfg, body_fn body, void *arg, body_fn drop, const void *const *ptrs,
         const size_t *align, int nptr) {
    pthread_mutex_lock(&lock);
    init_once();
    order_init();
    int nt = (int)(cfg.block.x * cfg.block.y * cfg.block.z);
    unsigned long long nb = (unsigned long long)cfg.grid.x * cfg.grid.y * cfg.grid.z;
    if (nt < 1 || nt > 1024 || cfg.block.z > 64 || nb < 1 || cfg.grid.y > 65535 || cfg.grid.z > 65535 ||
        cfg.grid.x > 2147483647u) {
        fail(cudaErrorInvalidConfiguration, "%s: invalid launch: grid %u,%u,%u block %u,%u,%u", kernel, cfg.grid.x,
             cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y, cfg.block.z);
        drop(arg);
        pthread_mutex_unlock(&lock);
        return;
    }
    if (cfg.smem > 0) die("%s: dynamic shared memory is not simulated yet (%zu bytes asked)", kernel, cfg.smem);
    for (int i = 0; i < nptr; i++) {
        uintptr_t s;
        const alloc_rec *r;
        if (ptrs[i] && !((r = find(ptrs[i], 0, &s)))) {
            char what[160];
            describe((uintptr_t)ptrs[i], what, sizeof what);
            die("%s: pointer argument %d (%p) is not device memory (%s)", kernel, i + 1, ptrs[i],
                in_arena(ptrs[i]) ? what : "a host address");
        }
        if ((uintptr_t)ptrs[i] % align[i])
            die("%s: pointer argument %d (%p) is not aligned to the %zu bytes of its type: a GPU faults (misaligned "
                "address)",
                kernel, i + 1, ptrs[i], align[i]);
    }
    count_launch(kernel);
    launch_cfg c = cfg;
    enqueue(stream_of(cfg.stream), [kernel, c, body, arg, drop]() {
        launch_now(kernel, c, body, arg);
        drop(arg);
    });
    pthread_mutex_unlock(&lock);
}

} /* namespace cudasim */

using namespace cudasim;

/* ------------------------------------------------------------ for the fake cuBLASLt */

/* Whether [p, p + n) lies in one device allocation; device code may run
 * while the depth is above zero. Exported for tests/cudasim/cublaslt.cpp. */
extern "C" int cudasim_device_range(const void *p, size_t n) {
    pthread_mutex_lock(&lock);
    const alloc_rec *r = find(p, n, NULL);
    bool ok = r && !r->pinned_host;
    pthread_mutex_unlock(&lock);
    return ok;
}
extern "C" void cudasim_device_begin(const char *what) {
    pthread_mutex_lock(&lock);
    cur_kernel = what;
    device_enter();
}
extern "C" void cudasim_device_end(void) {
    device_leave();
    cur_kernel = NULL;
    pthread_mutex_unlock(&lock);
}
extern "C" size_t cudasim_peak_bytes(void) { return peak_bytes; }
/* Host synchronizations: the calls where the host waits for the simulated
 * GPU (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize,
 * cudaMemcpy/cudaMemset and an async copy into pageable host memory).
 * cudaEventQuery (a poll, no wait on a GPU; it drains nothing), the fake
 * driver's cuEventQuery (cudasim_event_poll) and the fake NCCL's own drain
 * before it exchanges (cudasim_stream_drain: on a GPU NCCL queues its work)
 * are not counted. CUDASIM_SYNC_STATS=1 prints the count at exit. */
extern "C" unsigned long cudasim_host_syncs(void) { return host_syncs; }
extern "C" void cudasim_stream_drain(cudaStream_t s) {
    pthread_mutex_lock(&lock);
    drain(stream_of(s));
    pthread_mutex_unlock(&lock);
}
/* Queue fn(arg) on stream s as device work named `what` (fn owns arg). */
extern "C" void cudasim_enqueue(cudaStream_t s, const char *what, void (*fn)(void *), void *arg) {
    pthread_mutex_lock(&lock);
    count_launch(what);
    enqueue(stream_of(s), [what, fn, arg]() {
        cur_kernel = what;
        device_enter();
        fn(arg);
        device_leave();
        cur_kernel = NULL;
    });
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------ the runtime API */

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    const char *e = getenv("CUDASIM_DEVICES");
    *count = e && e[0] ? atoi(e) : 1;
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

static int cur_device;
cudaError_t cudaSetDevice(int device) {
    int n = 0;
    cudaGetDeviceCount(&n);
    if (device < 0 || device >= n) return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): %d devices", device, n);
    cur_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
    *device = cur_device;
    return cudaSuccess;
}

/* The attributes sharc reads (note [cuda-peak] in src/device/cuda/cuda.cu),
 * as an H100 SXM5 answers them: 132 SMs, 1980 MHz, compute capability 9.0,
 * HBM3 at 2619 MHz on a 5120-bit bus. */
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
    int n = 0;
    cudaGetDeviceCount(&n);
    if (device < 0 || device >= n)
        return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: device %d of %d", device, n);
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrClockRate: *value = 1980000; return cudaSuccess; /* kHz */
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMemoryClockRate: *value = 2619000; return cudaSuccess;   /* kHz: HBM3 */
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; return cudaSuccess; /* bits */
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d is not simulated", (int)attr);
    }
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "cudasim: some error";
    }
}
const char *cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }

cudaError_t cudaMalloc(void **p, size_t bytes) {
    pthread_mutex_lock(&lock);
    init_once();
    *p = NULL;
    if (live_bytes + bytes > mem_limit()) {
        pthread_mutex_unlock(&lock);
        return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu): %zu bytes live, CUDASIM_MEMORY %zu", bytes, live_bytes,
                    mem_limit());
    }
    size_t rounded = (bytes + 255) / 256 * 256;
    size_t npages = (rounded + PAGE - 1) / PAGE;
    if (npages == 0) npages = 1;
    char *pages = top;
    if ((size_t)(top - arena) + (npages + 1) * PAGE > ARENA) die("the device arena is used up");
    top += (npages + 1) * PAGE; /* + a guard page */
    char *user = pages + npages * PAGE - rounded;
    if (rounded == 0) user = pages;
    allocs[(uintptr_t)user] = alloc_rec{bytes, pages, npages, false};
    live_bytes += bytes;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    /* fresh device memory holds garbage on a GPU: fill it with NaN bytes */
    if (mprotect(pages, npages * PAGE, PROT_READ | PROT_WRITE) != 0) die("mprotect: %s", strerror(errno));
    memset(pages, 0xff, npages * PAGE);
    if (device_depth == 0) mprotect(pages, npages * PAGE, PROT_NONE);
    *p = user;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&lock);
    drain_all(); /* cudaFree waits for the device */
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.pinned_host) {
        /* a GPU returns an error here that sharc_device_free cannot report */
        die("cudaFree(%p): not a live device allocation (freed twice, or never allocated)", p);
    }
    alloc_rec r = it->second;
    allocs.erase(it);
    live_bytes -= r.bytes;
    /* the pages stay reserved and inaccessible: a use after free faults */
    mprotect(r.pages, r.npages * PAGE, PROT_NONE);
    madvise(r.pages, r.npages * PAGE, MADV_DONTNEED);
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    pthread_mutex_lock(&lock);
    init_once();
    *p = malloc(bytes ? bytes : 1);
    if (*p) allocs[(uintptr_t)*p] = alloc_rec{bytes, NULL, 0, true};
    pthread_mutex_unlock(&lock);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation, "cudaMallocHost(%zu)", bytes);
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags) { return cudaMallocHost(p, bytes); }
cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&lock);
    drain_all();
    auto it = allocs.find((uintptr_t)p);
    bool ok = it != allocs.end() && it->second.pinned_host;
    if (ok) allocs.erase(it);
    pthread_mutex_unlock(&lock);
    if (!ok) return fail(cudaErrorInvalidValue, "cudaFreeHost(%p): not pinned host memory", p);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *total = mem_limit();
    *free_b = *total - live_bytes;
    return cudaSuccess;
}

/* where a copy's side lies: 1 device, 0 host (pinned or pageable), -1 a
 * device address outside any live allocation or a range overrunning one */
static int side(const void *p, size_t n) {
    const alloc_rec *r = find(p, n, NULL);
    if (r) return r->pinned_host ? 0 : 1;
    return in_arena(p) ? -1 : 0;
}

static cudaError_t copy_check(void *dst, const void *src, size_t n, cudaMemcpyKind kind, int *d, int *s) {
    static const char *kn[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
    *d = side(dst, n);
    *s = side(src, n);
    if (*d < 0 || *s < 0)
        return fail(cudaErrorInvalidValue,
                    "cudaMemcpy%s of %zu bytes: the %s range is not inside one live device allocation",
                    kind <= 4 ? kn[kind] : "?", n, *d < 0 ? "destination" : "source");
    if ((kind == cudaMemcpyHostToDevice && (*d != 1 || *s != 0)) ||
        (kind == cudaMemcpyDeviceToHost && (*d != 0 || *s != 1)) ||
        (kind == cudaMemcpyDeviceToDevice && (*d != 1 || *s != 1)) || (kind == cudaMemcpyHostToHost && (*d || *s)))
        return fail(cudaErrorInvalidValue, "cudaMemcpy%s of %zu bytes from %s to %s memory", kind <= 4 ? kn[kind] : "?",
                    n, *s ? "device" : "host", *d ? "device" : "host");
    return cudaSuccess;
}

static bool pinned(const void *p, size_t n) {
    const alloc_rec *r = find(p, n, NULL);
    return r && r->pinned_host;
}

/* CUDASIM_DIGEST=1: every device-to-host copy prints "cudasim: d2h BYTES
 * HASH" (FNV-1a of the bytes) as it runs, so two runs (CUDASIM_ORDER
 * forward and reverse) can be compared bit for bit by diffing their logs. */
static bool digest_on(void) {
    static int v = -1;
    if (v < 0) v = getenv("CUDASIM_DIGEST") && getenv("CUDASIM_DIGEST")[0] == '1';
    return v;
}

static void copy_now(void *dst, const void *src, size_t n, bool to_host = false) {
    cur_kernel = "a copy";
    device_enter();
    memmove(dst, src, n);
    device_leave();
    cur_kernel = NULL;
    if (to_host && digest_on()) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)dst)[i]) * 0x100000001b3ull;
        fprintf(stderr, "cudasim: d2h %zu %016llx\n", n, (unsigned long long)h);
    }
}

/* CUDA's rules for a copy on a stream: from pageable host memory, the bytes
 * are taken when the call returns (staged); into pageable host memory, the
 * call returns when they have arrived (the stream's earlier work done);
 * pinned host and device memory are read and written when the copy runs. */
static cudaError_t copy_on(sim_stream *st, void *dst, const void *src, size_t n, cudaMemcpyKind kind, bool sync) {
    if (n == 0) return cudaSuccess;
    pthread_mutex_lock(&lock);
    init_once();
    int d, s;
    cudaError_t e = copy_check(dst, src, n, kind, &d, &s);
    if (e == cudaSuccess) {
        if (s == 0 && !pinned(src, n)) {
            std::shared_ptr<std::vector<char>> snap =
                std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
            enqueue(st, [dst, snap, n]() { copy_now(dst, snap->data(), n); });
        } else {
            bool to_host = d == 0 && s == 1;
            enqueue(st, [dst, src, n, to_host]() { copy_now(dst, src, n, to_host); });
        }
        if (sync || (d == 0 && !pinned(dst, n))) {
            count_sync();
            drain(st);
        }
    }
    pthread_mutex_unlock(&lock);
    return e;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    return copy_on(&legacy_stream, dst, src, n, kind, true);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    return copy_on(stream_of(s), dst, src, n, kind, false);
}

static cudaError_t set2d(sim_stream *st, void *p, size_t pitch, int value, size_t width, size_t height, bool sync) {
    if (width == 0 || height == 0) return cudaSuccess;
    pthread_mutex_lock(&lock);
    init_once();
    cudaError_t e = cudaSuccess;
    if (width > pitch && height > 1)
        e = fail(cudaErrorInvalidValue, "cudaMemset2D: width %zu > pitch %zu", width, pitch);
    else if (side(p, pitch * (height - 1) + width) != 1)
        e = fail(cudaErrorInvalidValue, "cudaMemset of %zu x %zu bytes at %p: not inside one live device allocation",
                 height, width, p);
    if (e == cudaSuccess) {
        enqueue(st, [p, pitch, value, width, height]() {
            cur_kernel = "a memset";
            device_enter();
            for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, value, width);
            device_leave();
            cur_kernel = NULL;
        });
        if (sync) {
            count_sync();
            drain(st);
        }
    }
    pthread_mutex_unlock(&lock);
    return e;
}
cudaError_t cudaMemset(void *p, int value, size_t n) { return set2d(&legacy_stream, p, n, value, n, 1, true); }
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
    return set2d(stream_of(s), p, n, value, n, 1, false);
}
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int value, size_t width, size_t height, cudaStream_t s) {
    return set2d(stream_of(s), p, pitch, value, width, height, false);
}

cudaError_t cudaDeviceSynchronize(void) {
    pthread_mutex_lock(&lock);
    count_sync();
    drain_all();
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    pthread_mutex_lock(&lock);
    sim_stream *p = new sim_stream{0x57, {}, false};
    streams.push_back(p);
    *s = (cudaStream_t)p;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: the legacy stream");
    pthread_mutex_lock(&lock);
    sim_stream *st = stream_of(s);
    drain(st); /* queued work still runs, as on a GPU */
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == st) streams.erase(streams.begin() + (long)i);
    st->magic = 0;
    delete st;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    pthread_mutex_lock(&lock);
    count_sync();
    drain(stream_of(s));
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    sim_event *p = new sim_event{0xe7, NULL, 0, 0, !(flags & cudaEventDisableTiming), 0.0};
    *e = (cudaEvent_t)p;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
static sim_event *event_of(cudaEvent_t e) {
    sim_event *ev = (sim_event *)e;
    if (!ev || ev->magic != 0xe7) die("an event that is not one (destroyed, or never created): %p", (void *)e);
    return ev;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    pthread_mutex_lock(&lock);
    sim_event *ev = event_of(e);
    drain_event(ev); /* a GPU releases it once its record is reached */
    ev->magic = 0;
    delete ev;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    pthread_mutex_lock(&lock);
    sim_event *ev = event_of(e);
    sim_stream *st = stream_of(s);
    ev->gen++;
    ev->stream = st;
    op o{std::function<void()>(), ev, ev->gen, NULL, 0};
    if (deferred()) st->q.push_back(std::move(o));
    else exec(o);
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}
/* A host function runs when its stream is drained to it, in order, as host
 * code (the arena closed) under the simulator's lock: a CUDA call from it
 * deadlocks, as CUDA forbids it. */
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg) {
    pthread_mutex_lock(&lock);
    enqueue(stream_of(s), [fn, arg]() { as_host(fn, arg); });
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    pthread_mutex_lock(&lock);
    sim_event *ev = event_of(e);
    sim_stream *st = stream_of(s);
    /* waits for the record queued last, nothing if none (as CUDA does) */
    op o{std::function<void()>(), NULL, 0, ev, ev->gen};
    if (deferred()) st->q.push_back(std::move(o));
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    pthread_mutex_lock(&lock);
    count_sync();
    drain_event(event_of(e));
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}
/* The simulated time of an event is the host's monotonic clock when the
 * simulator executed its record, i.e. when its stream was drained to that
 * point (work runs when the host waits, not when it is queued): elapsed
 * times are real orderings of simulated work but meaningless as speeds.
 * As on a GPU: both records must have been reached (else cudaErrorNotReady)
 * and both events created with timing (else cudaErrorInvalidResourceHandle). */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    pthread_mutex_lock(&lock);
    sim_event *a = event_of(start), *b = event_of(end);
    cudaError_t r = cudaSuccess;
    if (!a->timing || !b->timing)
        r = fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event created with cudaEventDisableTiming");
    else if (a->gen == 0 || b->gen == 0)
        r = fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event never recorded");
    else if (a->done < a->gen || b->done < b->gen) r = cudaErrorNotReady;
    else *ms = (float)((b->reached_s - a->reached_s) * 1e3);
    pthread_mutex_unlock(&lock);
    return r;
}
/* A poll: reached iff the record has run, no queue drained (the simulated
 * GPU moves only when the host waits), so a caller that reuses what the
 * record's work read must wait when told cudaErrorNotReady. Like the
 * runtime, a not-ready answer is also left as the last error (callers
 * clear it: cudaGetLastError). */
cudaError_t cudaEventQuery(cudaEvent_t e) {
    pthread_mutex_lock(&lock);
    sim_event *ev = event_of(e);
    cudaError_t r = ev->done < ev->gen ? cudaErrorNotReady : cudaSuccess;
    if (r != cudaSuccess) last_error = r;
    pthread_mutex_unlock(&lock);
    return r;
}

/* The fake driver's cuEventQuery (tests/support/fake_nccl.c): the GPU
 * makes progress when asked, the record is reached (a poll: not a host
 * synchronization), so a loop polling a collective ends. */
extern "C" cudaError_t cudasim_event_poll(cudaEvent_t e) {
    pthread_mutex_lock(&lock);
    drain_event(event_of(e));
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

} /* extern "C" */
