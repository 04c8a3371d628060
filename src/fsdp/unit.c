/* unit.c: sharc_fsdp_unit_*, the unit state machine of note [unit-states]
 * (engine.h): each verb moves one unit's parameters or gradient from
 * one state to the next through the strategies of collectives.c; fsdp.c
 * decides when, and checks with sharc_fsdp_unit_expect that the model
 * calls the public verbs in an order that makes sense. */
#include "engine.h"
#include "sharc/clock.h"
#include "sharc/progress.h"

#include <stdio.h>
#include <string.h>

static const char *const params_names[] = {"SHARDED", "GATHERING", "GATHERED", "POST_FORWARD"};
static const char *const grad_names[] = {"NONE", "OPEN", "REDUCING", "HELD"};

static void names_of(char *out, size_t len, unsigned mask, const char *const *names, int n) {
    out[0] = 0;
    for (int s = 0; s < n; s++)
        if (mask & (1u << s)) snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? " or " : "", names[s]);
}

void sharc_fsdp_unit_expect(const sharc_fsdp_unit *t, const char *verb, unsigned params_ok, unsigned grad_ok) {
    char want[64];
    if (!(params_ok & (1u << t->params))) {
        names_of(want, sizeof want, params_ok, params_names, 4);
        sharc_fatal(__FILE__, __LINE__, "fsdp: %s(unit %d '%s'): its parameters are %s, expected %s", verb, t->index,
                    t->spec.name, params_names[t->params], want);
    }
    if (!(grad_ok & (1u << t->grad))) {
        names_of(want, sizeof want, grad_ok, grad_names, 4);
        sharc_fatal(__FILE__, __LINE__, "fsdp: %s(unit %d '%s'): its gradient is %s, expected %s", verb, t->index,
                    t->spec.name, grad_names[t->grad], want);
    }
}

#define P(s) (1u << SHARC_PARAMS_##s)
#define G(s) (1u << SHARC_GRAD_##s)

/* One gather in flight fewer: the poll stops with the last. */
static void pending_done(sharc_fsdp *e, sharc_fsdp_unit *t) {
    t->pending = NULL;
    if (--e->npending == 0) sharc_progress_clear(e);
}

/* Note [progress] (src/device/progress.c): called by the CPU device between
 * kernels while prefetches are in flight; MPI_Test moves them on. A unit
 * whose gather completes here stays GATHERING until its wait, which then
 * has nothing left to wait for. */
static void poll_pending(void *ctx) {
    sharc_fsdp *e = ctx;
    for (int u = 0; u < e->nunits && e->npending > 0; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        if (!t->pending) continue;
        bool done = false;
        if (sharc_comm_test(t->pending, &done) != SHARC_OK) SHARC_FSDP_COMM_FATAL();
        if (done) pending_done(e, t); /* sharc_comm_test recycled the request */
    }
}

bool sharc_fsdp_unit_unshard(sharc_fsdp *e, sharc_fsdp_unit *t, bool ahead) {
    sharc_fsdp_unit_expect(t, ahead ? "prefetch" : "gather", P(SHARDED) | P(POST_FORWARD), G(NONE) | G(OPEN) | G(HELD));
    if (e->writing)
        sharc_fatal(__FILE__, __LINE__,
                    "fsdp: gather(unit %d '%s') while shards are being written (sharc_fsdp_shard_write_begin "
                    "without sharc_fsdp_shard_write_end)",
                    t->index, t->spec.name);
    /* note [post-forward]: from the slices kept after forward, inside the group of N */
    const sharc_fsdp_gather_i *g = t->params == SHARC_PARAMS_POST_FORWARD ? &sharc_fsdp_gather_post_forward : e->gather;
    if (g->slot) {
        t->param_full = sharc_fsdp_pool_get(&e->gathered, t->index, t->slot_numel, !ahead);
        if (!t->param_full) return false; /* limit_all_gathers reached: gather on demand instead */
    }
    t->ready_seq = 0;
    g->start(e, t, !ahead);
    bool queued = t->ready_seq > e->cwaited; /* note [comm-stream]: on the comm stream, not waited for yet */
    t->params = t->pending || queued ? SHARC_PARAMS_GATHERING : SHARC_PARAMS_GATHERED;
    if (t->pending && e->npending++ == 0) sharc_progress_set(poll_pending, e);
    return true;
}

void sharc_fsdp_unit_wait(sharc_fsdp *e, sharc_fsdp_unit *t) {
    sharc_fsdp_unit_expect(t, "wait", P(GATHERING) | P(GATHERED), G(NONE) | G(OPEN) | G(HELD));
    if (t->pending) {
        double t0 = sharc_clock_now();
        if (sharc_comm_wait_on(t->pending, e->stream) != SHARC_OK) SHARC_FSDP_COMM_FATAL();
        pending_done(e, t);
        e->stats.wait_s += sharc_clock_now() - t0;
    }
    if (t->ready_seq) sharc_fsdp_coll_wait(e, t->ready, t->ready_seq); /* note [comm-stream] */
    t->params = SHARC_PARAMS_GATHERED;
}

void sharc_fsdp_unit_reshard(sharc_fsdp *e, sharc_fsdp_unit *t) {
    if (t->params == SHARC_PARAMS_SHARDED) return;
    if (t->params == SHARC_PARAMS_POST_FORWARD) { /* the slice is dropped (its buffer is the unit's own) */
        t->params = SHARC_PARAMS_SHARDED;
        return;
    }
    sharc_fsdp_unit_wait(e, t); /* a prefetch still in flight writes into the slot */
    if (e->gather->slot) sharc_fsdp_pool_put(&e->gathered, t->param_full);
    t->param_full = NULL;
    t->params = SHARC_PARAMS_SHARDED;
}

void sharc_fsdp_unit_reshard_post_forward(sharc_fsdp *e, sharc_fsdp_unit *t) {
    sharc_fsdp_unit_expect(t, "reshard_post_forward", P(GATHERED), G(NONE) | G(HELD));
    SHARC_CHECK(t->post_shard != NULL);
    sharc_fsdp_coll_keep_post_forward(e, t);
    sharc_fsdp_unit_reshard(e, t);
    t->params = SHARC_PARAMS_POST_FORWARD;
}

float *sharc_fsdp_unit_grad_open(sharc_fsdp *e, sharc_fsdp_unit *t) {
    sharc_fsdp_unit_expect(t, "grad", P(SHARDED) | P(GATHERED), G(NONE) | G(OPEN) | G(HELD));
    if (t->grad == SHARC_GRAD_NONE) {
        if (!e->reduce->slot) {
            t->grad_full = t->grad_shard;
        } else {
            t->grad_full = sharc_fsdp_pool_get(&e->grads, t->index, t->numel_padded, true);
            if (e->grads.ev) { /* note [comm-stream]: the slot's last reduction has read it */
                int i = sharc_fsdp_pool_slot(&e->grads, t->grad_full);
                sharc_fsdp_coll_wait(e, e->grads.ev[i], e->grads.seq[i]);
            }
            if (sharc_device_memset0(e->dev, t->grad_full, (size_t)t->numel_padded * sizeof(float), e->stream) !=
                SHARC_OK)
                SHARC_FSDP_COMM_FATAL();
        }
    }
    t->grad = SHARC_GRAD_OPEN;
    return t->grad_full;
}

void sharc_fsdp_unit_reduce(sharc_fsdp *e, sharc_fsdp_unit *t) {
    sharc_fsdp_unit_expect(t, "reduce", P(SHARDED) | P(GATHERING) | P(GATHERED), G(OPEN) | G(HELD));
    t->grad = SHARC_GRAD_REDUCING;
    if (e->reduce->slot) {
        double t0 = sharc_clock_now();
        e->reduce->reduce(e, t);
        e->stats.reduces++;
        e->stats.wait_s += sharc_clock_now() - t0;
        if (e->grads.ev) { /* note [comm-stream]: reused only after the reduction queued on the comm stream */
            int i = sharc_fsdp_pool_slot(&e->grads, t->grad_full);
            e->grads.seq[i] = sharc_fsdp_coll_mark(e, e->grads.ev[i]);
        }
        sharc_fsdp_pool_put(&e->grads, t->grad_full);
    }
    t->grad_full = NULL;
    t->grad = SHARC_GRAD_NONE;
}

void sharc_fsdp_unit_hold(sharc_fsdp_unit *t) {
    sharc_fsdp_unit_expect(t, "hold", P(SHARDED) | P(GATHERING) | P(GATHERED), G(OPEN));
    t->grad = SHARC_GRAD_HELD;
}
