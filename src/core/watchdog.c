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
 * (mpirun, srun) then ends the job with a non-zero status. */
#include "sharc/activity.h"
#include "sharc/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_t thread;
static bool running;
static atomic_bool stop;
static int timeout_s, rank_id;

static void *watch(void *arg) {
    (void)arg;
    uint64_t last = sharc_activity_seq();
    double since = sharc_clock_now();
    const struct timespec tick = {0, 100 * 1000 * 1000};
    while (!atomic_load(&stop)) {
        nanosleep(&tick, NULL);
        uint64_t s = sharc_activity_seq();
        double now = sharc_clock_now();
        if (s != last) {
            last = s;
            since = now;
            continue;
        }
        if (now - since < (double)timeout_s) continue;
        char what[400], line[600];
        sharc_activity_describe(what, sizeof what);
        int len = snprintf(line, sizeof line,
                           "[rank %d] watchdog: no progress for %d s (train.timeout) at %s; exiting. "
                           "A rank that hangs or died stops every rank; see the other ranks' lines\n",
                           rank_id, timeout_s, what);
        if (len > (int)sizeof line - 1) len = (int)sizeof line - 1;
        ssize_t w = write(STDERR_FILENO, line, (size_t)len);
        (void)w;
        sleep(2);
        _exit(3);
    }
    return NULL;
}

sharc_status sharc_watchdog_start(int timeout, int rank) {
    if (timeout <= 0 || running) return SHARC_OK;
    timeout_s = timeout;
    rank_id = rank;
    atomic_store(&stop, false);
    if (pthread_create(&thread, NULL, watch, NULL) != 0)
        return sharc_error(SHARC_ERR_INTERNAL, "watchdog: cannot start its thread");
    running = true;
    return SHARC_OK;
}

void sharc_watchdog_stop(void) {
    if (!running) return;
    atomic_store(&stop, true);
    pthread_join(thread, NULL);
    running = false;
}
