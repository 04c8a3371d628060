/* progress.c: sharc/progress.h, the poll between a host device's kernels.
 *
 * Why the device layer: progress is needed exactly where the host thread
 * that owns MPI is busy computing, which is the CPU device's kernels (a GPU
 * backend's kernels run while the host is free, and NCCL progresses on its
 * own streams). The engine, which knows what is in flight, registers the
 * poll; the CPU backend's sgemm (src/device/cpu/blas.c), called between and
 * inside every layer, calls it. Neither knows the other.
 *
 * Note [progress]. A non-blocking collective moves bytes only while some
 * thread is inside MPI: Open MPI (4.1, TCP between hosts) sends a large
 * message in fragments after a rendezvous, and each fragment and each
 * acknowledgement waits for the next MPI call on that rank. A prefetch posted
 * before a unit's compute therefore travels during the next blocking
 * collective (the unit's reduce-scatter, which then takes about twice as
 * long) or at its wait. Measured between two hosts (bench/hosts.sh, section
 * micro: a 16 MB all-gather behind sgemms of the same length, 250 Mbit/s
 * links): MPI_Test between sgemms hid 0.96-1.11 of it, no calls -0.33-0.39,
 * Open MPI's TCP progress thread (btl_tcp_progress_thread=1) 0.48-0.78 while
 * it took CPU time the compute lacked, and in training it made blocking
 * collectives slower. So sharc polls: sharc_sgemm, called between and inside
 * every layer, calls the engine's poll, which MPI_Tests its prefetches (about
 * 1200 polls per step of the bench model, 0.02-0.05 s of it). Open MPI
 * polls its TCP event loop only every few milliseconds outside blocking
 * calls, so a poll would rarely move data; comm_mpi.c sets
 * OMPI_MCA_mpi_event_tick_rate=1 before MPI_Init when the job spans hosts
 * (OMPI_COMM_WORLD_LOCAL_SIZE < OMPI_COMM_WORLD_SIZE, unless the user set
 * it), and then the prefetches complete inside the polls. A poll only runs on
 * the thread that registered it and outside OpenMP parallel regions (MPI
 * runs MPI_THREAD_FUNNELED). SHARC_PROGRESS=none turns it off. */
#include "sharc/progress.h"

#include <omp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static sharc_progress_fn poll_fn;
static void *poll_ctx;
static pthread_t poll_thread;
static int enabled = -1; /* -1 unknown; SHARC_PROGRESS=none: 0 */

void sharc_progress_set(sharc_progress_fn fn, void *ctx) {
    if (enabled < 0) {
        const char *e = getenv("SHARC_PROGRESS");
        enabled = !(e && strcmp(e, "none") == 0);
    }
    if (!enabled) return;
    poll_fn = fn;
    poll_ctx = ctx;
    poll_thread = pthread_self();
}

void sharc_progress_clear(void *ctx) {
    if (poll_ctx == ctx) {
        poll_fn = NULL;
        poll_ctx = NULL;
    }
}

void sharc_progress_poll(void) {
    sharc_progress_fn fn = poll_fn;
    if (!fn || omp_in_parallel() || !pthread_equal(pthread_self(), poll_thread)) return;
    fn(poll_ctx);
}
