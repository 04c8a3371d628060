/* watchdog.c: sharc_watchdog_*, the step watchdog.
 *
 * Note [watchdog]. A rank that stops making progress (a peer that died or
 * hangs, a collective one rank never reaches) would leave every other rank
 * blocked in MPI forever. With train.timeout = N > 0 each rank runs one
 * thread that polls the activity record (sharc/activity.h) ten times a
 * second; when its sequence number has not moved for N seconds the thread
 * writes one line naming the step, the collective and unit it waits on (or
 * the unit it computes), waits two seconds so that the other ranks, which
 * stalled within moments of each other, print theirs before the launcher
 * starts killing processes, and ends the process with _exit(3). It never
 * calls MPI (initialised MPI_THREAD_FUNNELED) and takes no lock the
 * training thread may hold: only write(2) and relaxed loads. The launcher
 * (mpirun, srun) then ends the job with a non-zero status.
 *
 * The sharc command starts it before MPI_Init and stops it after
 * MPI_Finalize, so a stall there is caught too (note [job-end] in
 * src/cli/main.c); sharc_train_run starts it again inside (starts nest: the
 * innermost timeout applies, the thread ends with the outermost stop). The
 * rank printed is the log's (sharc_log_rank), which the command sets from
 * the launcher's environment before MPI_Init. */
#include "sharc/activity.h"
#include "sharc/clock.h"
#include "sharc/flight.h"
#include "sharc/liveness.h"
#include "sharc/log.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_t thread;
static bool running;
static int depth;
static atomic_bool stop;
static atomic_int timeout_s;
static _Atomic(const char *) setting_name;
static atomic_bool watching; /* the thread runs (read by the signal handler) */

/* Write the flight record (note [flight]) and say where, after `line`. */
static void dump_and_say(const char *reason, const char *what) {
    const char *path = sharc_flight_dump(reason, what);
    if (!path) return;
    char line[4400];
    int len = snprintf(line, sizeof line, "[rank %d] flight recorder: this rank's last collectives are in %s\n",
                       sharc_log_rank(), path);
    if (len > (int)sizeof line - 1) len = (int)sizeof line - 1;
    ssize_t w = write(STDERR_FILENO, line, (size_t)len);
    (void)w;
}

/* Note [rank-death]. When one rank of an Open MPI job dies (kill -9, the
 * OOM killer), its launcher daemon sends the others SIGTERM and, a second
 * later (odls_base_sigkill_timeout), SIGKILL; Slurm does the same. The
 * handler writes one line and the rank's flight record and exits with 128
 * + the signal, at once: handing it to the watchdog thread missed the
 * second on a loaded machine. It formats with snprintf, which POSIX does
 * not list as async-signal-safe; glibc's does not allocate or lock for the
 * integers, strings and fixed-precision doubles used, and the process
 * ends right after. MPI 4.1 without ULFM tells the survivors nothing
 * about the dead rank (the launcher prints "process rank R ... on node H
 * exited on signal 9"), so the handler first runs the liveness probe (note
 * [liveness] in src/core/liveness.c, 300 ms at most), which prints one line
 * per rank that is gone, naming its host and pid, and goes into the flight
 * record; then, so that the other survivors' probes do not find this one
 * gone, it keeps the process until LINGER_MS after the signal before it
 * exits (Open MPI's SIGKILL comes about a second after the SIGTERM).
 * `sharc doctor OUT_DIR` also names the dead rank as the one that left no
 * flight record. Without a watchdog (timeout 0) the default action runs. */
enum { TERM_PROBE_MS = 300, LINGER_MS = 600, WATCHDOG_PROBE_MS = 1000 };

static double mono_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void on_term(int sig) {
    if (atomic_load(&watching)) {
        const double t0 = mono_ms();
        bool fresh;
        sharc_liveness_probe(TERM_PROBE_MS, &fresh);
        char what[400], line[900];
        sharc_activity_describe(what, sizeof what);
        int len = snprintf(line, sizeof line,
                           "[rank %d] terminated by signal %d (%s) at %s: the launcher is ending the job (another "
                           "rank died, or the job was cancelled; the launcher's message names which)\n",
                           sharc_log_rank(), sig, sig == SIGTERM ? "SIGTERM" : "signal", what);
        if (len > (int)sizeof line - 1) len = (int)sizeof line - 1;
        ssize_t w = write(STDERR_FILENO, line, (size_t)len);
        (void)w;
        dump_and_say("terminated", what);
        for (double left; fresh && (left = t0 + LINGER_MS - mono_ms()) > 0;) poll(NULL, 0, (int)left + 1);
        _exit(128 + sig);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void sharc_watchdog_catch_term(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

static void *watch(void *arg) {
    (void)arg;
    uint64_t last = sharc_activity_seq();
    double since = sharc_clock_now();
    const struct timespec tick = {0, 100 * 1000 * 1000};
    while (!atomic_load(&stop)) {
        nanosleep(&tick, NULL);
        sharc_liveness_drain(); /* note [liveness]: other ranks' probes */
        uint64_t s = sharc_activity_seq();
        double now = sharc_clock_now();
        const int limit = atomic_load(&timeout_s);
        if (s != last || limit <= 0) {
            last = s;
            since = now;
            continue;
        }
        if (sharc_activity_in_collective()) /* note [liveness]: probe while every survivor waits */
            sharc_liveness_watch(s, now - since);
        if (now - since < (double)limit) continue;
        bool fresh;
        sharc_liveness_probe(WATCHDOG_PROBE_MS, &fresh); /* note [liveness]: the lost ranks, before the line */
        char what[400], line[700];
        sharc_activity_describe(what, sizeof what);
        int len = snprintf(line, sizeof line,
                           "[rank %d] watchdog: no progress for %d s (%s) at %s; exiting. "
                           "A rank that hangs or died stops every rank; see the other ranks' lines\n",
                           sharc_log_rank(), limit, atomic_load(&setting_name), what);
        if (len > (int)sizeof line - 1) len = (int)sizeof line - 1;
        ssize_t w = write(STDERR_FILENO, line, (size_t)len);
        (void)w;
        dump_and_say("watchdog", what);
        sleep(2);
        _exit(3);
    }
    return NULL;
}

sharc_status sharc_watchdog_start(int timeout, const char *setting) {
    depth++;
    atomic_store(&setting_name, setting ? setting : "timeout");
    atomic_store(&timeout_s, timeout);
    if (timeout <= 0 || running) return SHARC_OK;
    atomic_store(&stop, false);
    if (pthread_create(&thread, NULL, watch, NULL) != 0) {
        depth--;
        return sharc_error(SHARC_ERR_INTERNAL, "watchdog: cannot start its thread");
    }
    running = true;
    atomic_store(&watching, true);
    return SHARC_OK;
}

void sharc_watchdog_stop(void) {
    if (depth > 0) depth--;
    if (!running || depth > 0) return;
    atomic_store(&watching, false);
    atomic_store(&stop, true);
    pthread_join(thread, NULL);
    running = false;
}
