/* overlap.c: the engine's host worker of note [offload-overlap]: the
 * optimizer's per-unit updates of offloaded shards queued to one pthread,
 * and every wait for them (sharc_fsdp_shard_update, sharc_fsdp_shard_sync,
 * the per-unit wait of a gather, the deferred zeroing of gradient shards).
 *
 * Note [offload-overlap]. Under fsdp.cpu_offload on a device the shards and
 * moments are host memory and the update is the CPU kernel table's, so the
 * step need not finish before the next forward starts: sharc_fsdp_shard_update
 * queues fn(ctx, u) for every unit, in the order the next forward gathers
 * them (e->order), to a worker thread (created at the first queue, joined by
 * sharc_fsdp_free) and returns. The worker marks each unit's generation done
 * (done[u] = the batch's number, under mu, cv broadcast), and:
 *   - a gather of unit u (shard to compute device, collectives.c) waits for
 *     done[u] alone, so the device's forward of unit 0 runs while the host
 *     updates units 1..n;
 *   - zero_grad (the next step's first call, before its forward) does not
 *     wait: a unit still queued gets zero_after[u], and the worker zeroes its
 *     gradient shard after the update, before marking it done (the same
 *     bytes: zero then the backward's accumulates);
 *   - everything else that reads or writes shards or moments waits for the
 *     whole batch first (sharc_fsdp_shard_sync, or shard_wait where the
 *     caller returns no status): the shard accessors, the write bracket,
 *     copies in and out, gathers for saving, the norm's sums, the reduced
 *     shards' accumulates, the moments' views (adamw.c), and free.
 * A failed update is kept (its status and message, copied from the worker's
 * thread-local error) and the worker skips the batch's other updates but
 * still marks them done, so no wait hangs; the first status-returning wait
 * (the next step's finish_grads or norm, a checkpoint's copy, the next
 * update) returns it, once; free logs one never returned.
 * Shared state: queued, finished, done[], zero_after[], fn/ctx, failed and
 * msg are read and written under mu only. The shards, grad shards and
 * moments of unit u belong to the worker from the queue until done[u] (the
 * main thread touches them only after a wait); the engine's fields the task
 * reads (units' pointers, segments, specs, order) are not written after
 * init. The worker makes no device call (the simulator is not thread-safe,
 * and the compute device's streams are the main thread's): only the CPU
 * device's kernels on host memory, and memset. The test hook
 * SHARC_TEST_OFFLOAD_SLOW=MS makes it sleep before each update, so a gather
 * that did not wait would copy the old shard. SHARC_OFFLOAD_OVERLAP=0 runs
 * the same updates in the same order at the call instead (the comparison of
 * tests/cli/cudasim_offload.sh). */
#include "engine.h"
#include "sharc/fault.h"
#include "sharc/log.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sharc_fsdp_overlap {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t queued;   /* batches queued so far */
    int64_t finished; /* batches whose every unit is done */
    int64_t *done;    /* (nunits) the last batch whose update of the unit is done */
    bool *zero_after; /* (nunits) zero the unit's gradient shard after its update */
    sharc_fsdp_shard_task fn;
    void *ctx;
    sharc_status failed; /* the first failure not yet returned */
    char msg[1024];
    bool stop;
    int omp_threads; /* the main thread's, for the CPU kernels on the worker */
    int delay_ms;    /* the test hook SHARC_TEST_OFFLOAD_SLOW: a sleep before each update */
};

bool sharc_fsdp_overlap_on(const sharc_fsdp *e) {
    if (!sharc_fsdp_offloaded(e)) return false;
    const char *v = getenv("SHARC_OFFLOAD_OVERLAP");
    return !(v && !strcmp(v, "0"));
}

static void *worker(void *arg) {
    sharc_fsdp *e = arg;
    sharc_fsdp_overlap *o = e->ovl;
    omp_set_num_threads(o->omp_threads);
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->stop && o->finished == o->queued) pthread_cond_wait(&o->cv, &o->mu);
        if (o->finished == o->queued) break; /* stop, nothing queued */
        const int64_t gen = o->finished + 1;
        sharc_fsdp_shard_task fn = o->fn;
        void *ctx = o->ctx;
        bool failed = o->failed != SHARC_OK;
        pthread_mutex_unlock(&o->mu);
        for (int i = 0; i < e->nunits; i++) {
            const int u = e->order[i];
            sharc_fsdp_unit *t = &e->units[u];
            if (o->delay_ms > 0 && !failed) {
                struct timespec d = {o->delay_ms / 1000, (long)(o->delay_ms % 1000) * 1000000L};
                nanosleep(&d, NULL);
            }
            sharc_status st = failed ? SHARC_OK : fn(ctx, u, t->param_shard, t->grad_shard);
            pthread_mutex_lock(&o->mu);
            if (st != SHARC_OK) {
                failed = true;
                o->failed = st;
                snprintf(o->msg, sizeof o->msg, "%s", sharc_last_error());
            }
            bool zero = o->zero_after[u];
            o->zero_after[u] = false;
            if (zero) {
                pthread_mutex_unlock(&o->mu);
                memset(t->grad_shard, 0, (size_t)t->numel_shard * sizeof(float));
                pthread_mutex_lock(&o->mu);
            }
            o->done[u] = gen;
            pthread_cond_broadcast(&o->cv);
            pthread_mutex_unlock(&o->mu);
        }
        pthread_mutex_lock(&o->mu);
        o->finished = gen;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static sharc_status overlap_start(sharc_fsdp *e) {
    sharc_fsdp_overlap *o = calloc(1, sizeof *o);
    if (!o) return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    o->done = calloc((size_t)e->nunits, sizeof *o->done);
    o->zero_after = calloc((size_t)e->nunits, sizeof *o->zero_after);
    if (!o->done || !o->zero_after) {
        free(o->done);
        free(o->zero_after);
        free(o);
        return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    }
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->omp_threads = omp_get_max_threads();
    o->delay_ms = sharc_fault_offload_delay_ms();
    e->ovl = o;
    int err = pthread_create(&o->thread, NULL, worker, e);
    if (err) {
        e->ovl = NULL;
        pthread_cond_destroy(&o->cv);
        pthread_mutex_destroy(&o->mu);
        free(o->done);
        free(o->zero_after);
        free(o);
        return sharc_error(SHARC_ERR_INTERNAL, "fsdp.cpu_offload: cannot start the optimizer's host thread: %s",
                           strerror(err));
    }
    return SHARC_OK;
}

/* Every queued update done (o->mu held). */
static void wait_all_locked(sharc_fsdp_overlap *o) {
    while (o->finished < o->queued) pthread_cond_wait(&o->cv, &o->mu);
}

void sharc_fsdp_shard_wait(const sharc_fsdp *e) {
    sharc_fsdp_overlap *o = e->ovl;
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    wait_all_locked(o);
    pthread_mutex_unlock(&o->mu);
}

sharc_status sharc_fsdp_shard_sync(const sharc_fsdp *e) {
    sharc_fsdp_overlap *o = e->ovl;
    if (!o) return SHARC_OK;
    pthread_mutex_lock(&o->mu);
    wait_all_locked(o);
    sharc_status st = o->failed;
    o->failed = SHARC_OK;
    pthread_mutex_unlock(&o->mu);
    return st == SHARC_OK ? SHARC_OK : sharc_error(st, "%s", o->msg);
}

void sharc_fsdp_shard_wait_unit(const sharc_fsdp *e, int u) {
    sharc_fsdp_overlap *o = e->ovl;
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    while (o->done[u] < o->queued) pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

bool sharc_fsdp_shard_unit_done(const sharc_fsdp *e, int u) {
    sharc_fsdp_overlap *o = e->ovl;
    if (!o) return true;
    pthread_mutex_lock(&o->mu);
    bool done = o->done[u] >= o->queued;
    pthread_mutex_unlock(&o->mu);
    return done;
}

bool sharc_fsdp_shard_zero_later(sharc_fsdp *e, int u) {
    sharc_fsdp_overlap *o = e->ovl;
    if (!o) return false;
    pthread_mutex_lock(&o->mu);
    bool later = o->done[u] < o->queued;
    if (later) o->zero_after[u] = true;
    pthread_mutex_unlock(&o->mu);
    return later;
}

sharc_status sharc_fsdp_shard_update(sharc_fsdp *e, sharc_fsdp_shard_task fn, void *ctx) {
    SHARC_TRY(sharc_fsdp_shard_sync(e));
    if (!sharc_fsdp_overlap_on(e)) {
        for (int i = 0; i < e->nunits; i++) {
            sharc_fsdp_unit *t = &e->units[e->order[i]];
            SHARC_TRY(fn(ctx, e->order[i], t->param_shard, t->grad_shard));
        }
        return SHARC_OK;
    }
    if (!e->ovl) SHARC_TRY(overlap_start(e));
    sharc_fsdp_overlap *o = e->ovl;
    pthread_mutex_lock(&o->mu);
    o->fn = fn;
    o->ctx = ctx;
    o->queued++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    return SHARC_OK;
}

void sharc_fsdp_overlap_free(sharc_fsdp *e) {
    sharc_fsdp_overlap *o = e->ovl;
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL); /* it finishes what was queued first */
    if (o->failed != SHARC_OK) sharc_warn("fsdp.cpu_offload: the optimizer's last update failed: %s", o->msg);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o->done);
    free(o->zero_after);
    free(o);
    e->ovl = NULL;
}
