/* overlap.c: does a non-blocking all-gather progress while the ranks
 * compute? Run under mpirun with 2 ranks on this 2-core machine:
 *
 *   mpirun -n 2 build/bench/overlap [--mb 64] [--threads 1] [--level funneled|multiple]
 *
 * Each rank times (a) its compute alone (sgemms, ~the time of the transfer),
 * (b) an all-gather alone, and (c) the all-gather posted with MPI_Iallgather,
 * the same compute, then MPI_Wait, in three ways: no MPI call in between,
 * MPI_Test between every sgemm ("progress calls"), and a helper thread that
 * sits in MPI_Wait (MPI_THREAD_MULTIPLE). Overlap = (a + b - c) / min(a, b):
 * 1 is perfect, 0 is none. Prints one JSON line per variant from rank 0.
 * --level funneled initialises MPI as sharc does (MPI_THREAD_FUNNELED; no
 * helper thread then); bench/hosts.sh runs it across hosts, where Open MPI's
 * TCP progress thread (btl_tcp_progress_thread) is the other variable. */
#include "sharc/blas.h"
#include "sharc/clock.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *A, *B, *C;
static const int N = 512;

/* `reps` sgemms of 512^3, calling progress between them if given */
static void compute(int reps, MPI_Request *progress) {
    for (int r = 0; r < reps; r++) {
        sharc_sgemm(false, false, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N);
        if (progress) {
            int flag;
            MPI_Test(progress, &flag, MPI_STATUS_IGNORE);
        }
    }
}

typedef struct {
    MPI_Request *req;
    double done_at;
} waiter;

static void *wait_thread(void *p) {
    waiter *w = p;
    MPI_Wait(w->req, MPI_STATUS_IGNORE);
    w->done_at = sharc_clock_now();
    return NULL;
}

int main(int argc, char **argv) {
    int provided, rank, size, level = MPI_THREAD_MULTIPLE;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--level"))
            level = strcmp(argv[i + 1], "funneled") ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
    MPI_Init_thread(&argc, &argv, level, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mb = 64, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb")) mb = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    }
    sharc_blas_init(threads);
    A = calloc((size_t)N * N, 4);
    B = calloc((size_t)N * N, 4);
    C = calloc((size_t)N * N, 4);
    size_t count = (size_t)mb << 18; /* floats per rank */
    float *send = calloc(count, 4), *recv = calloc(count * (size_t)size, 4);
    for (size_t i = 0; i < count; i++) send[i] = (float)i;
    /* warm up: touch every page, let MPI set up its buffers */
    MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
    compute(2, NULL);

    /* (b) the all-gather alone */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = sharc_clock_now();
    for (int k = 0; k < 3; k++) MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
    double comm = (sharc_clock_now() - t0) / 3;
    /* (a) compute sized to take about as long */
    t0 = sharc_clock_now();
    compute(4, NULL);
    double per = (sharc_clock_now() - t0) / 4;
    int reps = (int)(comm / per) + 1;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = sharc_clock_now();
    compute(reps, NULL);
    double comp = sharc_clock_now() - t0;

    const char *names[3] = {"no progress calls", "MPI_Test between sgemms", "helper thread in MPI_Wait"};
    for (int v = 0; v < 3; v++) {
        if (v == 2 && provided < MPI_THREAD_MULTIPLE) continue;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Request req;
        t0 = sharc_clock_now();
        MPI_Iallgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD, &req);
        if (v == 2) {
            waiter w = {&req, 0};
            pthread_t th;
            pthread_create(&th, NULL, wait_thread, &w);
            compute(reps, NULL);
            pthread_join(th, NULL);
        } else {
            compute(reps, v == 1 ? &req : NULL);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        }
        double both = sharc_clock_now() - t0;
        double overlap = (comp + comm - both) / (comp < comm ? comp : comm);
        double worst;
        MPI_Reduce(&overlap, &worst, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("{\"variant\": \"%s\", \"level\": \"%s\", \"ranks\": %d, \"threads\": %d, \"mb_per_rank\": %d, "
                   "\"compute_s\": %.4f, \"allgather_s\": %.4f, \"together_s\": %.4f, \"overlap\": %.2f}\n",
                   names[v], provided >= MPI_THREAD_MULTIPLE ? "multiple" : "funneled", size, threads, mb, comp, comm,
                   both, worst);
    }
    MPI_Finalize();
    return 0;
}
