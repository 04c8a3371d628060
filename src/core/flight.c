/* flight.c: sharc_flight_*, the collective flight recorder (sharc/flight.h).
 *
 * Note [flight]. When a job hangs or a rank dies, each rank's last line says
 * where it waits, but not where the ranks parted. So the dispatcher
 * (src/comm/comm.c) records every collective: its group (a process-local id;
 * groups are created collectively, so the ids agree across ranks), its
 * sequence number on that group (every rank makes the same calls in the same
 * order, so collective #k of a group is the same call on every rank), kind,
 * bytes, the step and unit from the activity record, and start and end on
 * the monotonic clock (end 0: not completed). Non-blocking collectives start
 * at their post and end when a wait or test completes them. The ring holds
 * the last SHARC_FLIGHT_N entries per process: an entry is a few stores, a
 * ring of fixed size is written without allocation or locks, and the
 * watchdog thread can read it while the training thread is stuck (a torn
 * entry can only be the one being written).
 *
 * It is written to DIR/debug/flight-rank-R.json by sharc_flight_dump: from
 * the watchdog thread when it fires or when the launcher terminates the
 * rank (SIGTERM, after another rank died), and by the command before it
 * aborts the job. The JSON is formatted into a static buffer and written
 * with write(2) to a temporary name, then renamed, so a reader never sees
 * half a file. `sharc doctor DIR` (src/cli/doctor.c) reads every rank's. */
#include "sharc/flight.h"
#include "sharc/activity.h"
#include "sharc/clock.h"
#include "sharc/liveness.h"
#include "sharc/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Atomic uint64_t handle; /* 1 + the global count at begin; 0: empty */
    uint64_t seq;
    int group, group_size, group_rank, unit, nonblocking;
    const char *kind;
    int64_t bytes, step;
    double t_start;
    _Atomic double t_end;
} entry;

static entry ring[SHARC_FLIGHT_N];
static _Atomic uint64_t count;
static _Atomic int groups;
static char dir[4096];
static atomic_bool have_dir, dumped;
static char buf[SHARC_FLIGHT_N * 320 + SHARC_LIVENESS_PROBED * 160 + 4096]; /* the JSON: one dump per process */
static char path[4300];

int sharc_flight_group_new(void) { return atomic_fetch_add(&groups, 1); }

uint64_t sharc_flight_begin(int group, uint64_t seq, int group_size, int group_rank, const char *kind, int64_t bytes,
                            int nonblocking) {
    uint64_t h = atomic_fetch_add_explicit(&count, 1, memory_order_relaxed) + 1;
    entry *e = &ring[(h - 1) % SHARC_FLIGHT_N];
    atomic_store_explicit(&e->handle, 0, memory_order_relaxed);
    e->seq = seq;
    e->group = group;
    e->group_size = group_size;
    e->group_rank = group_rank;
    e->kind = kind;
    e->bytes = bytes;
    e->nonblocking = nonblocking;
    sharc_activity_where(&e->step, &e->unit);
    e->t_start = sharc_clock_now();
    atomic_store_explicit(&e->t_end, 0.0, memory_order_relaxed);
    atomic_store_explicit(&e->handle, h, memory_order_release);
    return h;
}

void sharc_flight_end(uint64_t h) {
    if (!h) return;
    entry *e = &ring[(h - 1) % SHARC_FLIGHT_N];
    if (atomic_load_explicit(&e->handle, memory_order_acquire) == h)
        atomic_store_explicit(&e->t_end, sharc_clock_now(), memory_order_relaxed);
}

void sharc_flight_set_dir(const char *d) {
    atomic_store(&have_dir, false);
    if (!d || !*d || strlen(d) >= sizeof dir) return;
    memcpy(dir, d, strlen(d) + 1);
    atomic_store(&have_dir, true);
}

/* s as a JSON string's contents: quotes, backslashes and controls become '?'. */
static void json_safe(char *out, size_t n, const char *s) {
    size_t i = 0;
    for (; s && *s && i + 1 < n; s++) out[i++] = (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) ? '?' : *s;
    out[i] = 0;
}

#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if (len < sizeof buf) len += (size_t)snprintf(buf + len, sizeof buf - len, __VA_ARGS__);                       \
    } while (0)

const char *sharc_flight_dump(const char *reason, const char *what) {
    if (!atomic_load(&have_dir) || atomic_exchange(&dumped, true)) return NULL;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    const double offset = (double)rt.tv_sec + rt.tv_nsec * 1e-9 - sharc_clock_now();
    char host[256] = "?", w[512];
    gethostname(host, sizeof host - 1);
    json_safe(w, sizeof w, what);
    size_t len = 0;
    const uint64_t n = atomic_load(&count);
    ADD("{\"rank\": %d, \"world_size\": %d, \"host\": \"%s\", \"pid\": %d, \"reason\": \"%s\", \"activity\": \"%s\", "
        "\"now\": %.6f, \"realtime_minus_now\": %.6f, \"recorded\": %llu, ",
        sharc_log_rank(), sharc_log_world_size(), host, (int)getpid(), reason, w, sharc_clock_now(), offset,
        (unsigned long long)n);
    const char *live = sharc_liveness_json(); /* note [liveness] */
    if (live) ADD("\"liveness\": %s, ", live);
    ADD("\"entries\": [");
    const uint64_t first = n > SHARC_FLIGHT_N ? n - SHARC_FLIGHT_N + 1 : 1;
    for (uint64_t h = first; h <= n; h++) {
        const entry *e = &ring[(h - 1) % SHARC_FLIGHT_N];
        if (atomic_load_explicit(&e->handle, memory_order_acquire) != h) continue; /* being written */
        const double end = atomic_load_explicit(&e->t_end, memory_order_relaxed);
        ADD("%s\n  {\"group\": %d, \"seq\": %llu, \"kind\": \"%s\", \"bytes\": %lld, \"group_size\": %d, "
            "\"group_rank\": %d, \"nonblocking\": %s, \"step\": %lld, \"unit\": %d, \"start\": %.6f, ",
            h == first ? "" : ",", e->group, (unsigned long long)e->seq, e->kind ? e->kind : "?", (long long)e->bytes,
            e->group_size, e->group_rank, e->nonblocking ? "true" : "false", (long long)e->step, e->unit, e->t_start);
        if (end > 0) ADD("\"end\": %.6f}", end);
        else ADD("\"end\": null}");
    }
    ADD("\n]}\n");
    if (len >= sizeof buf) return NULL; /* cannot happen: the buffer holds a full ring */
    char d[4200], tmp[4400];
    snprintf(d, sizeof d, "%s/debug", dir);
    if (mkdir(d, 0755) != 0 && errno != EEXIST) return NULL;
    snprintf(path, sizeof path, "%s/flight-rank-%d.json", d, sharc_log_rank());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return NULL;
    size_t off = 0;
    while (off < len) {
        ssize_t k = write(fd, buf + off, len - off);
        if (k <= 0) break;
        off += (size_t)k;
    }
    if (close(fd) != 0 || off < len || rename(tmp, path) != 0) {
        unlink(tmp);
        return NULL;
    }
    return path;
}
