/* sharc/progress.h: communication progress while kernels compute (note
 * [progress] in src/device/progress.c). The engine registers a poll function
 * while it has non-blocking collectives in flight; the CPU device's
 * sharc_sgemm (src/device/cpu/blas.c) calls
 * sharc_progress_poll() after each product, and the poll runs only on the
 * thread that registered it, outside parallel regions (MPI is initialised
 * MPI_THREAD_FUNNELED). SHARC_PROGRESS=none turns the polling off. */
#ifndef SHARC_PROGRESS_H
#define SHARC_PROGRESS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*sharc_progress_fn)(void *ctx);

/* Poll fn(ctx) between kernels from now on (replacing any other). */
void sharc_progress_set(sharc_progress_fn fn, void *ctx);
/* Stop polling ctx's function (nothing if another is registered). */
void sharc_progress_clear(void *ctx);
/* Call the registered function, if any, when on its thread and outside a
 * parallel region; otherwise return at once. */
void sharc_progress_poll(void);

#ifdef __cplusplus
}
#endif
#endif
