/* fsdp.c: sharc_fsdp_*, the engine's public verbs: init and free, the
 * schedule the model drives (gather, forward_done, grad, backward_done,
 * release), prefetch along the model's unit schedule, the end of a step's
 * gradients (finish_grads, the norm) and the accessors. How a unit changes
 * state is unit.c, how bytes move is collectives.c / shm.c, how memory is
 * sized is plan.c, and writes to shards go through param_io.c
 * (engine.h lists the files).
 *
 * Note [engine-buffers]. Memory is planned at init (plan.c): the fp32 shards
 * (params, grads), a pool of gathered-parameter slots and a pool of
 * full-gradient slots, and communication staging. After init the engine
 * allocates nothing (the collectives it calls recycle their requests). With
 * a shard group of one rank (one process, NO_SHARD) and fp32 parameters,
 * gather returns the shard itself and gradients accumulate straight into
 * the grad shard.
 *
 * Note [reduction-order]. A unit's gradient is reduce-scattered over the
 * shard group when its backward is done (every micro-batch, or only the last
 * with fsdp.no_sync); the replicate group (HYBRID_SHARD, NO_SHARD) all-reduces
 * the accumulated shard gradients once per step, in sharc_fsdp_finish_grads,
 * which is the same sum as reducing every micro-batch and moves
 * grad_accum times fewer bytes. */
#include "engine.h"
#include "sharc/prof.h"
#include "sharc/activity.h"
#include "sharc/clock.h"
#include "sharc/mesh.h"
#include "sharc/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define P(s) (1u << SHARC_PARAMS_##s)
#define G(s) (1u << SHARC_GRAD_##s)

void sharc_fsdp_config_default(sharc_fsdp_config *c) {
    memset(c, 0, sizeof *c);
    c->strategy = SHARC_SHARDING_FULL_SHARD;
    c->reshard_after_forward = -1;
    c->fsdp_size = 0;
    c->param_dtype = SHARC_DT_F32;
    c->reduce_dtype = SHARC_DT_F32;
    c->forward_prefetch = false;
    c->backward_prefetch = SHARC_BACKWARD_PREFETCH_PRE;
    c->forward_prefetch_depth = 1;
    c->backward_prefetch_depth = 1;
    c->limit_all_gathers = 0;
    c->no_sync = false;
}

const char *sharc_sharding_name(sharc_sharding s) {
    static const char *n[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"};
    return (s >= 0 && s <= SHARC_SHARDING_HYBRID_SHARD) ? n[s] : "?";
}

/* ------------------------------------------------------------------ init */

/* Copy the model's schedule (or the default: units in order, every unit's
 * backward reading its parameters, one at a time) and check it. */
static sharc_status init_schedule(sharc_fsdp *e, const sharc_unit_schedule *sch, int nunits) {
    e->order = calloc((size_t)nunits, sizeof(int));
    e->pos = calloc((size_t)nunits, sizeof(int));
    e->bwd_params = calloc((size_t)nunits, sizeof(bool));
    if (!e->order || !e->pos || !e->bwd_params) return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    if (sch && sch->n != nunits)
        return sharc_error(SHARC_ERR_INVALID, "fsdp: the schedule orders %d units, the model has %d", sch->n, nunits);
    if (sch && sch->max_live < 1)
        return sharc_error(SHARC_ERR_INVALID, "fsdp: the schedule's max_live is %d, expected >= 1", sch->max_live);
    for (int u = 0; u < nunits; u++) e->pos[u] = -1;
    for (int i = 0; i < nunits; i++) {
        int u = sch ? sch->order[i] : i;
        if (u < 0 || u >= nunits || e->pos[u] >= 0)
            return sharc_error(SHARC_ERR_INVALID, "fsdp: the schedule's order[%d] = %d is not a unit or a repeat", i,
                               u);
        e->order[i] = u;
        e->pos[u] = i;
        e->bwd_params[u] = sch ? sch->backward_needs_params[u] : true;
    }
    e->max_live = sch ? sch->max_live : 1;
    return SHARC_OK;
}

/* Note [frozen-params]: the backward of the units before the first
 * trainable one in forward order computes nothing anyone needs (no weight
 * gradient, and the input gradient flows only to frozen units), so the
 * model skips it and prefetch does not gather them. */
static void init_backward_from(sharc_fsdp *e) {
    e->bwd_from = e->nunits;
    for (int i = 0; i < e->nunits; i++)
        if (e->units[e->order[i]].trainable) {
            e->bwd_from = i;
            break;
        }
}

static sharc_status make_plan(sharc_fsdp *e, const sharc_unit_spec *units, const sharc_unit_schedule *schedule) {
    sharc_fsdp_plan_free(&e->plan);
    sharc_fsdp_plan_in in = {
        .S = e->S,
        .shard_rank = e->shard_rank,
        .max_live = e->max_live,
        .params_in_place = e->pglobal || (e->S == 1 && e->cfg.param_dtype == SHARC_DT_F32 && !sharc_fsdp_offloaded(e)),
        .grads_in_place = e->S == 1 && !sharc_fsdp_offloaded(e),
        .offload = sharc_fsdp_offloaded(e),
        .grads_shared = e->gshm != NULL,
        .overlap_reduce = !sharc_device_is_host(e->dev) && !sharc_fsdp_offloaded(e),
        .schedule = schedule};
    return sharc_fsdp_plan_make(&e->plan, units, e->nunits, &e->cfg, &in);
}

/* Note [post-forward] (plan.c): the group of N contiguous ranks of the shard
 * group (a split: collective over it) and each kept slice's buffer, for the
 * units the plan gave one. */
static sharc_status init_post_forward(sharc_fsdp *e) {
    e->post = e->plan.post;
    if (e->plan.post_bytes == 0) return SHARC_OK;
    SHARC_TRY(sharc_comm_split(e->shard, e->shard_rank / e->post, e->shard_rank % e->post, &e->post_comm));
    e->post_arena = sharc_device_alloc(e->dev, (size_t)e->plan.post_bytes, SHARC_MEM_GATHERED);
    if (!e->post_arena)
        return sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate the post-forward shards (%lld bytes)",
                           (long long)e->plan.post_bytes);
    for (int u = 0; u < e->nunits; u++) {
        const sharc_fsdp_unit_plan *up = &e->plan.units[u];
        e->units[u].numel_post = up->numel_post;
        e->units[u].post_shard = up->numel_post ? (char *)e->post_arena + up->post_off : NULL;
    }
    return SHARC_OK;
}

/* Note [comm-staging]: on a device, *stage |= group g (more than one rank)
 * reads host memory only. Collective over g. */
/* Note [shard-device] (collectives.c): the shard device's blocks the
 * compute device copies to and from each step (the master and gradient
 * shards, the reduced-shard landing buffer) are, under offload, page-locked
 * host memory of the compute device (sharc_device_host_alloc: the copies
 * then run without the driver's staging, as FSDP2's pinned CPU shards);
 * counted in the same host counters as the shard device's own blocks. */
static void *shard_alloc(sharc_fsdp *e, size_t bytes, sharc_mem_cat cat) {
    return sharc_fsdp_offloaded(e) ? sharc_device_host_alloc(e->dev, bytes, cat)
                                   : sharc_device_alloc(e->sdev, bytes, cat);
}

static void shard_free(sharc_fsdp *e, void *p) {
    if (sharc_fsdp_offloaded(e)) sharc_device_host_free(e->dev, p);
    else sharc_device_free(e->sdev, p);
}

static sharc_status takes_device(const sharc_fsdp *e, sharc_comm *g, bool *stage) {
    bool direct = true;
    if (!sharc_device_is_host(e->dev) && g && sharc_comm_size(g) > 1) SHARC_TRY(sharc_comm_takes_device(g, &direct));
    *stage |= !direct;
    return SHARC_OK;
}

sharc_status sharc_fsdp_init(sharc_fsdp **out, const sharc_unit_spec *units, int nunits,
                             const sharc_unit_schedule *schedule, const sharc_fsdp_config *cfg, struct sharc_mesh *mesh,
                             sharc_device *dev) {
    *out = NULL;
    if (cfg->param_dtype != SHARC_DT_F32 && cfg->param_dtype != SHARC_DT_BF16 && cfg->param_dtype != SHARC_DT_F16)
        return sharc_error(SHARC_ERR_INVALID, "fsdp.param_dtype: %s, expected fp32, bf16 or fp16",
                           sharc_dtype_st_name(cfg->param_dtype));
    if (cfg->reduce_dtype != SHARC_DT_F32 && cfg->reduce_dtype != SHARC_DT_BF16)
        return sharc_error(SHARC_ERR_INVALID, "fsdp.reduce_dtype: %s, expected fp32 or bf16",
                           sharc_dtype_st_name(cfg->reduce_dtype));
    sharc_fsdp *e = calloc(1, sizeof *e);
    if (!e) return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    e->cfg = *cfg;
    e->dev = dev ? dev : sharc_device_cpu();
    e->stream = sharc_device_stream(e->dev);
    e->k = sharc_device_kernels(e->dev);
    /* note [shard-device] (collectives.c): on the CPU device offload changes nothing */
    e->cfg.cpu_offload = cfg->cpu_offload && !sharc_device_is_host(e->dev);
    e->sdev = e->cfg.cpu_offload ? sharc_device_cpu() : e->dev;
    e->sstream = sharc_device_stream(e->sdev);
    e->sk = sharc_device_kernels(e->sdev);
    e->nunits = nunits;
    e->S = mesh ? mesh->dp_shard : 1;
    e->R = mesh ? mesh->dp_replicate : 1;
    e->tp = mesh && mesh->tp > 1 ? mesh->tp : 1;
    e->tp_group = e->tp > 1 ? mesh->tp_group : NULL;
    e->shard_rank = mesh ? mesh->shard_rank : 0;
    e->shard = mesh ? mesh->shard : NULL;
    e->replicate = mesh ? mesh->replicate : NULL;
    e->world = mesh ? mesh->world : NULL;
    e->reshard_after_forward = cfg->reshard_after_forward >= 0 ? cfg->reshard_after_forward != 0
                                                               : cfg->strategy != SHARC_SHARDING_SHARD_GRAD_OP;
    e->reduce_now = true;
    e->units = calloc((size_t)nunits, sizeof(sharc_fsdp_unit));
    sharc_status st = SHARC_OK;
    if (!e->units) {
        st = sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
        goto fail;
    }
    if ((st = init_schedule(e, schedule, nunits)) != SHARC_OK) goto fail;
    if ((st = make_plan(e, units, schedule)) != SHARC_OK) goto fail;
    /* collective first (every rank of the group reaches it), local allocations after */
    if (sharc_fsdp_shm_eligible(e)) {
        if ((st = sharc_fsdp_shm_init(e, &e->plan)) != SHARC_OK) goto fail;
        if (e->pglobal && (st = make_plan(e, units, schedule)) != SHARC_OK) goto fail;
    }
    for (int u = 0; u < nunits; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        const sharc_fsdp_unit_plan *up = &e->plan.units[u];
        t->spec = units[u];
        t->index = u;
        t->numel_shard = up->numel_shard;
        t->numel_padded = up->numel_padded;
        t->shard_lo = up->shard_lo;
        t->global_off = up->global_off;
        t->g16 = up->g16;
        t->slot_numel = up->slot_numel;
        t->param_shard = e->pglobal ? e->pglobal + t->global_off + t->shard_lo
                                    : shard_alloc(e, (size_t)t->numel_shard * sizeof(float), SHARC_MEM_PARAMS);
        t->trainable = sharc_unit_trainable(&t->spec);
        t->grad_shard = t->trainable ? shard_alloc(e, (size_t)t->numel_shard * sizeof(float), SHARC_MEM_GRADS) : NULL;
        if (!t->param_shard || (t->trainable && !t->grad_shard)) {
            st = sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate unit '%s' (%lld floats)", t->spec.name,
                             (long long)t->numel_shard);
            goto fail;
        }
        t->segs = calloc((size_t)sharc_unit_max_segments(&t->spec), sizeof(sharc_segment));
        if (!t->segs) {
            st = sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
            goto fail;
        }
        t->nseg = sharc_layout_segments(&t->spec, t->shard_lo, t->shard_lo + t->numel_shard, t->segs);
    }
    init_backward_from(e);
    if ((st = init_post_forward(e)) != SHARC_OK) goto fail;
    const sharc_fsdp_plan *pl = &e->plan;
    st =
        sharc_fsdp_pool_init(e->dev, &e->gathered, pl->n_param_slots, pl->param_slot_numel, pl->param_slot_owner, NULL);
    if (st == SHARC_OK)
        st = sharc_fsdp_pool_init(e->dev, &e->grads, pl->n_grad_slots, pl->grad_slot_numel, pl->grad_slot_owner,
                                  e->gshm ? (float *)e->gshm->base[e->shard_rank] : NULL);
    if (st != SHARC_OK) goto fail;
    if (pl->stage_shard > 0) {
        e->stage16_shard = sharc_device_alloc(e->dev, (size_t)pl->stage16_shard * 2, SHARC_MEM_COMM);
        e->stage16_full = sharc_device_alloc(e->dev, (size_t)pl->stage16_full * 2, SHARC_MEM_COMM);
        e->stage_shard = sharc_device_alloc(e->dev, (size_t)pl->stage_shard * sizeof(float), SHARC_MEM_COMM);
        if (!e->stage16_shard || !e->stage16_full || !e->stage_shard) {
            st = sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate communication buffers");
            goto fail;
        }
    }
    e->scalar = sharc_device_alloc(e->sdev, 2 * sizeof(double), SHARC_MEM_OTHER);
    e->sq = calloc(1, sizeof *e->sq);
    if (e->sq) e->sq->grad = calloc((size_t)e->nunits + 1, sizeof *e->sq->grad);
    if (!e->sq || !e->sq->grad) {
        st = sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
        goto fail;
    }
    if (pl->hreduced > 0) {
        e->hreduced = shard_alloc(e, (size_t)pl->hreduced * sizeof(float), SHARC_MEM_COMM);
        e->hslot = calloc((size_t)pl->hslots, sizeof *e->hslot);
    }
    if (!e->scalar || (pl->hreduced > 0 && (!e->hreduced || !e->hslot))) {
        st = sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
        goto fail;
    }
    for (int k = 0; e->hslot && k < pl->hslots; k++) { /* note [offload-reduce] (collectives.c) */
        sharc_fsdp_hslot *h = &e->hslot[k];
        h->buf = e->hreduced + (int64_t)k * (pl->hreduced / pl->hslots);
        h->sk = e->sk;
        h->ss = e->sstream;
        e->hslots = k + 1;
        if ((st = sharc_device_event_new(e->dev, &h->ev)) != SHARC_OK) goto fail;
    }
    /* note [comm-staging]: a device's buffers, a group that reads host memory
     * (asked of every group in the same order on every rank: collective) */
    sharc_comm *groups[3] = {e->shard, e->replicate, e->post_comm};
    bool stage = false;
    for (int g = 0; g < 3; g++)
        if ((st = takes_device(e, groups[g], &stage)) != SHARC_OK) goto fail;
    if (stage) {
        e->hstage = sharc_device_host_alloc(e->dev, (size_t)sharc_fsdp_coll_stage_bytes(e), SHARC_MEM_COMM);
        if (!e->hstage) {
            st = sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate the host staging buffer (%lld bytes)",
                             (long long)sharc_fsdp_coll_stage_bytes(e));
            goto fail;
        }
    } else if (!sharc_device_is_host(e->dev)) {
        /* note [comm-stream] (collectives.c) */
        st = sharc_device_stream_new(e->dev, &e->cstream);
        if (st == SHARC_OK) st = sharc_device_event_new(e->dev, &e->computed);
        if (st == SHARC_OK) st = sharc_device_event_new(e->dev, &e->reduced);
        for (int u = 0; u < nunits && st == SHARC_OK; u++) st = sharc_device_event_new(e->dev, &e->units[u].ready);
        if (st == SHARC_OK) st = sharc_fsdp_pool_events(e->dev, &e->grads);
        if (st != SHARC_OK) goto fail;
    }
    sharc_fsdp_coll_choose(e);
    *out = e;
    return SHARC_OK;
fail:
    sharc_fsdp_free(e);
    return st;
}

void sharc_fsdp_free(sharc_fsdp *e) {
    if (!e) return;
    sharc_fsdp_overlap_free(e); /* note [offload-overlap]: its queued updates run first */
    sharc_progress_clear(e);
    if (e->cstream) sharc_device_synchronize(e->cstream); /* note [comm-stream]: before its buffers go */
    for (int u = 0; u < e->nunits && e->units; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        if (t->pending) sharc_comm_wait(t->pending);
        if (t->ready) sharc_device_event_free(t->ready);
        if (!e->pglobal) shard_free(e, t->param_shard);
        shard_free(e, t->grad_shard);
        free(t->segs);
    }
    sharc_fsdp_pool_free(e->dev, &e->gathered);
    sharc_fsdp_pool_free(e->dev, &e->grads);
    sharc_fsdp_shm_free(e);
    sharc_device_free(e->dev, e->post_arena);
    sharc_comm_free(e->post_comm);
    sharc_device_free(e->dev, e->stage16_shard);
    sharc_device_free(e->dev, e->stage16_full);
    sharc_device_free(e->dev, e->stage_shard);
    sharc_device_free(e->sdev, e->scalar);
    if (e->sq) {
        sharc_device_free(e->sdev, e->sq->segs_d);
        free(e->sq->segs_h);
        free(e->sq->grad);
        free(e->sq);
    }
    for (int k = 0; k < e->hslots; k++) {
        if (e->hslot[k].ev) (void)sharc_fsdp_hslot_wait(&e->hslot[k]);
        if (e->hslot[k].ev) sharc_device_event_free(e->hslot[k].ev);
    }
    free(e->hslot);
    shard_free(e, e->hreduced);
    sharc_device_host_free(e->dev, e->hstage);
    if (e->computed) sharc_device_event_free(e->computed);
    if (e->reduced) sharc_device_event_free(e->reduced);
    if (e->cstream) sharc_device_stream_free(e->cstream);
    sharc_fsdp_plan_free(&e->plan);
    free(e->units);
    free(e->order);
    free(e->pos);
    free(e->bwd_params);
    free(e);
}

/* -------------------------------------------------------------- prefetch */

/* Note [unit-schedule]: the unit after u in forward order, or -1. */
static int next_in_forward(const sharc_fsdp *e, int u) {
    int i = e->pos[u] + 1;
    return i < e->nunits ? e->order[i] : -1;
}

/* The next unit that backward will gather after u (backward walks the order
 * in reverse), skipping units whose backward reads no parameters, or -1. */
static int next_in_backward(const sharc_fsdp *e, int u) {
    for (int i = e->pos[u] - 1; i >= e->bwd_from; i--)
        if (e->bwd_params[e->order[i]]) return e->order[i];
    return -1;
}

/* Start gathering unit u ahead of its use if its strategy takes a slot and
 * one is free (fsdp.limit_all_gathers may leave none: then it is gathered
 * on demand). Returns false when no slot was free. */
static bool prefetch(sharc_fsdp *e, int u) {
    if (u < 0 || !e->gather->slot) return true;
    sharc_fsdp_unit *t = &e->units[u];
    if (t->params != SHARC_PARAMS_SHARDED && t->params != SHARC_PARAMS_POST_FORWARD) return true;
    return sharc_fsdp_unit_unshard(e, t, true);
}

/* Note [prefetch-depth]. The `depth` units after u in forward order (or in
 * backward order), in that order: a unit already gathered or in flight
 * counts, the walk stops at the first unit no slot is free for, so the
 * nearest units are always the ones in flight. The plan gives max_live +
 * depth slots (fsdp.limit_all_gathers caps them), so at depth d up to d
 * all-gathers are in flight at once; which units are gathered, and so every
 * value computed, does not depend on d. */
static void prefetch_forward(sharc_fsdp *e, int u) {
    int depth = e->cfg.forward_prefetch_depth > 1 ? e->cfg.forward_prefetch_depth : 1;
    for (int k = 0; k < depth && (u = next_in_forward(e, u)) >= 0; k++)
        if (!prefetch(e, u)) return;
}

static void prefetch_backward(sharc_fsdp *e, int u) {
    int depth = e->cfg.backward_prefetch_depth > 1 ? e->cfg.backward_prefetch_depth : 1;
    for (int k = 0; k < depth && (u = next_in_backward(e, u)) >= 0; k++)
        if (!prefetch(e, u)) return;
}

/* ------------------------------------------------------------- the verbs */

const float *sharc_fsdp_gather(sharc_fsdp *e, int u) {
    sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    sharc_activity_phase(e->in_backward ? "backward" : "forward", u, t->spec.name);
    if (t->params == SHARC_PARAMS_SHARDED || t->params == SHARC_PARAMS_POST_FORWARD) {
        double t0 = sharc_clock_now();
        bool slot = e->gather->slot || t->params == SHARC_PARAMS_POST_FORWARD;
        sharc_fsdp_unit_unshard(e, t, false);
        if (slot) e->stats.wait_s += sharc_clock_now() - t0;
    } else {
        sharc_fsdp_unit_wait(e, t);
    }
    if (sharc_prof_tracing()) { /* note [trace]: a mark on the compute stream where it has the unit */
        int h = sharc_prof_span_begin(e->stream);
        sharc_prof_span_end(h, e->stream, SHARC_PROF_TRACK_COMPUTE, u, "%s unit %d (%s)",
                            e->in_backward ? "backward" : "forward", u, t->spec.name);
    }
    /* forward prefetch: the next unit's gather travels behind this unit's
     * compute (PyTorch FSDP's forward_prefetch, issued before the current
     * forward, to the depth of note [prefetch-depth]); forward_done tries
     * again if no slot was free now */
    if (!e->in_backward && e->cfg.forward_prefetch) prefetch_forward(e, u);
    return t->param_full;
}

void sharc_fsdp_forward_done(sharc_fsdp *e, int u) {
    sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    sharc_fsdp_unit_expect(t, "forward_done", P(GATHERED), G(NONE) | G(HELD));
    /* note [post-forward]: a unit backward gathers keeps its slice for the group of N */
    if (e->reshard_after_forward && !t->spec.root) {
        if (t->post_shard) sharc_fsdp_unit_reshard_post_forward(e, t);
        else sharc_fsdp_unit_reshard(e, t);
    }
    if (e->cfg.forward_prefetch) prefetch_forward(e, u);
}

void sharc_fsdp_release(sharc_fsdp *e, int u) {
    sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    sharc_fsdp_unit_expect(t, "release", P(SHARDED) | P(GATHERING) | P(GATHERED) | P(POST_FORWARD), G(NONE) | G(HELD));
    sharc_fsdp_unit_reshard(e, t);
}

float *sharc_fsdp_grad(sharc_fsdp *e, int u) {
    sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    e->in_backward = true;
    sharc_activity_phase("backward", u, t->spec.name);
    /* a unit whose backward reads its parameters has them gathered by now */
    if (e->bwd_params[u]) sharc_fsdp_unit_expect(t, "grad", P(GATHERED), G(NONE) | G(OPEN) | G(HELD));
    /* note [frozen-params]: a frozen unit has no gradient; its state stays NONE */
    float *g = t->trainable ? sharc_fsdp_unit_grad_open(e, t) : NULL;
    /* BACKWARD_PRE: the next unit's parameters are requested now, while this
     * unit's backward runs (the first call to grad(u) opens its backward). */
    if (e->cfg.backward_prefetch == SHARC_BACKWARD_PREFETCH_PRE) prefetch_backward(e, u);
    return g;
}

void sharc_fsdp_backward_done(sharc_fsdp *e, int u) {
    sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    sharc_activity_phase("backward, reducing gradients", u, t->spec.name);
    sharc_fsdp_unit_expect(t, "backward_done", P(SHARDED) | P(GATHERED), t->trainable ? G(OPEN) : G(NONE));
    if (!t->trainable) { /* note [frozen-params]: nothing to reduce */
    } else if (!e->reduce->slot || e->reduce_now) {
        sharc_fsdp_unit_reduce(e, t);
    } else {
        sharc_fsdp_unit_hold(t);
    }
    sharc_fsdp_unit_reshard(e, t);
    if (e->cfg.backward_prefetch == SHARC_BACKWARD_PREFETCH_POST) prefetch_backward(e, u);
}

void sharc_fsdp_zero_grad(sharc_fsdp *e) {
    for (int u = 0; u < e->nunits; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        sharc_fsdp_unit_expect(t, "zero_grad", P(SHARDED) | P(GATHERING) | P(GATHERED) | P(POST_FORWARD), G(NONE));
        /* note [offload-overlap]: a unit still queued is zeroed by the worker after its update */
        if (t->trainable && !sharc_fsdp_shard_zero_later(e, u) &&
            sharc_device_memset0(e->sdev, t->grad_shard, (size_t)t->numel_shard * sizeof(float), e->sstream) !=
                SHARC_OK)
            SHARC_FSDP_COMM_FATAL();
    }
}

void sharc_fsdp_begin_microbatch(sharc_fsdp *e, bool last) {
    e->reduce_now = !e->cfg.no_sync || last;
    e->in_backward = false;
}

sharc_status sharc_fsdp_finish_grads(sharc_fsdp *e) {
    sharc_activity_phase("finishing gradients", -1, NULL);
    e->in_backward = false;
    SHARC_TRY(sharc_fsdp_shard_sync(e)); /* note [offload-overlap]: a failed update of the last step ends this one */
    for (int u = 0; u < e->nunits; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        sharc_fsdp_unit_expect(t, "finish_grads", t->spec.root ? P(SHARDED) | P(GATHERED) : P(SHARDED),
                               G(NONE) | G(HELD));
        /* no_sync leftovers (cannot happen when the last micro-batch reduced) */
        if (t->grad == SHARC_GRAD_HELD) sharc_fsdp_unit_reduce(e, t);
    }
    if (e->R > 1) SHARC_TRY(sharc_fsdp_coll_all_reduce_replicas(e));
    /* note [comm-stream]: the one wait for the step's reductions, before
     * anything on the compute stream reads or writes a grad shard */
    if (e->cstream) sharc_fsdp_coll_wait(e, e->reduced, sharc_fsdp_coll_mark(e, e->reduced));
    /* note [offload-reduce] (collectives.c): the host's accumulates, before the host reads a grad shard */
    sharc_fsdp_coll_reduced_wait(e);
    e->reduce_now = true;
    return SHARC_OK;
}

/* ------------------------------------------------------------------ norm */

/* Note [sumsq-multi]. The squared gradients of this rank's segments whose
 * parameters are not split over tp (acc[0]) and split (acc[1]), each summed
 * into its own scalar of the shard device (note [shard-device] in
 * collectives.c) in the order of units and segments, on its stream: one
 * sumsq_multi call over a table of those segments (frozen parameters and
 * empty segments in no entry), built at the first call and uploaded to the
 * shard device once. Each call compares the units' grad shard pointers with
 * those the table was built from and rebuilds it if one moved (they are
 * allocated at init and never move: a guard, as adamw.c's table). */
static sharc_status sumsq_table(const sharc_fsdp *e) {
    struct sharc_fsdp_sumsq_tab *q = e->sq;
    bool same = q->built;
    for (int u = 0; u < e->nunits && same; u++) same = q->grad[u] == e->units[u].grad_shard;
    if (same) return SHARC_OK;
    if (q->segs_d) SHARC_TRY(sharc_device_synchronize(e->sstream)); /* queued work may still read the old table */
    sharc_device_free(e->sdev, q->segs_d);
    free(q->segs_h);
    q->segs_d = q->segs_h = NULL;
    q->nseg = 0;
    q->built = false;
    int cap = 0;
    for (int u = 0; u < e->nunits; u++) cap += e->units[u].nseg;
    q->segs_h = calloc(cap > 0 ? (size_t)cap : 1, sizeof *q->segs_h);
    if (!q->segs_h) return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory (gradient norm table)");
    int64_t blk = 0;
    for (int u = 0; u < e->nunits; u++) {
        const sharc_fsdp_unit *t = &e->units[u];
        q->grad[u] = t->grad_shard;
        for (int s = 0; s < t->nseg; s++) {
            const sharc_param_spec *p = &t->spec.params[t->segs[s].param];
            if (p->frozen || t->segs[s].len <= 0) continue;
            q->segs_h[q->nseg++] = (sharc_sumsq_seg){
                .x = t->grad_shard + t->segs[s].shard_off, .n = t->segs[s].len, .blk = blk, .which = p->tp_dim >= 0};
            blk += (t->segs[s].len + 4095) / 4096;
        }
    }
    if (q->nseg > 0) {
        size_t bytes = (size_t)q->nseg * sizeof *q->segs_h;
        q->segs_d = sharc_device_alloc(e->sdev, bytes, SHARC_MEM_OTHER); /* metadata, unplanned */
        if (!q->segs_d)
            return sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate the gradient norm table (%zu bytes)", bytes);
        SHARC_TRY(sharc_device_copy(e->sdev, q->segs_d, q->segs_h, bytes, SHARC_COPY_HOST_TO_DEVICE, e->sstream));
    }
    q->built = true;
    return SHARC_OK;
}

static sharc_status sumsq_on_shard_device(const sharc_fsdp *e, double *acc) {
    SHARC_TRY(sharc_fsdp_shard_sync(e)); /* note [offload-overlap] */
    sharc_fsdp_coll_reduced_wait(e);     /* note [offload-reduce] */
    SHARC_TRY(sumsq_table(e));
    SHARC_TRY(sharc_device_memset0(e->sdev, acc, 2 * sizeof(double), e->sstream));
    if (e->sq->nseg > 0) e->sk->sumsq_multi(e->sstream, acc, e->sq->segs_d, e->sq->segs_h, e->sq->nseg);
    return SHARC_OK;
}

/* Offloaded, the sums are made on the host (the grad shards' device) and
 * copied into sq on the engine's stream. */
sharc_status sharc_fsdp_grad_sumsq_queue(const sharc_fsdp *e, double *sq) {
    if (!sharc_fsdp_offloaded(e)) return sumsq_on_shard_device(e, sq);
    SHARC_TRY(sumsq_on_shard_device(e, e->scalar));
    return sharc_device_copy(e->dev, sq, e->scalar, 2 * sizeof(double), SHARC_COPY_HOST_TO_DEVICE, e->stream);
}

/* Both sums read back at once (one host wait). */
static void sumsq_local(const sharc_fsdp *e, double sq[2]) {
    if (sumsq_on_shard_device(e, e->scalar) != SHARC_OK ||
        sharc_device_copy(e->sdev, sq, e->scalar, 2 * sizeof(double), SHARC_COPY_DEVICE_TO_HOST, e->sstream) !=
            SHARC_OK ||
        sharc_device_synchronize(e->sstream) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
}

double sharc_fsdp_grad_sumsq_local(const sharc_fsdp *e) {
    double sq[2];
    sumsq_local(e, sq);
    return sq[0] + sq[1];
}

sharc_status sharc_fsdp_grad_norm_reduce(sharc_fsdp *e, const double l[2], double *norm, double *extra) {
    /* every replica holds the same shards (/ R); a parameter replicated over
     * tp is held alike by its tp ranks (/ tp), a split one in parts (note
     * [tp-params] in sharc/units.h) */
    double sq = e->tp > 1 ? l[1] + l[0] / e->tp : l[0] + l[1];
    double v[2] = {sq / e->R, extra ? *extra : 0.0};
    if (e->world) SHARC_TRY(sharc_comm_all_reduce(e->world, v, v, 2, SHARC_DT_F64, SHARC_REDUCE_OP_SUM));
    *norm = sqrt(v[0]);
    if (extra) *extra = v[1];
    return SHARC_OK;
}

sharc_status sharc_fsdp_grad_norm(sharc_fsdp *e, double *norm, double *extra) {
    double l[2];
    sumsq_local(e, l);
    return sharc_fsdp_grad_norm_reduce(e, l, norm, extra);
}

/* ------------------------------------------------------------ accessors */

int sharc_fsdp_num_units(const sharc_fsdp *e) { return e->nunits; }
sharc_comm *sharc_fsdp_tp_group(const sharc_fsdp *e) { return e->tp_group; }
sharc_device *sharc_fsdp_device(const sharc_fsdp *e) { return e->dev; }
sharc_device *sharc_fsdp_shard_device(const sharc_fsdp *e) { return e->sdev; }
sharc_dtype sharc_fsdp_param_dtype(const sharc_fsdp *e) { return e->cfg.param_dtype; }

const uint16_t *sharc_fsdp_gather16(const sharc_fsdp *e, int u) {
    const sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    if (!t->g16) return NULL;
    sharc_fsdp_unit_expect(t, "gather16", P(GATHERED), G(NONE) | G(OPEN) | G(HELD));
    return (const uint16_t *)(const void *)t->param_full;
}
const sharc_unit_spec *sharc_fsdp_unit_spec(const sharc_fsdp *e, int u) { return &sharc_fsdp_unit_at(e, u)->spec; }
int64_t sharc_fsdp_shard_numel(const sharc_fsdp *e, int u) { return sharc_fsdp_unit_at(e, u)->numel_shard; }
/* note [offload-overlap] (overlap.c): a shard is read only after the queued updates */
const float *sharc_fsdp_shard_params(const sharc_fsdp *e, int u) {
    sharc_fsdp_shard_wait(e);
    return sharc_fsdp_unit_at(e, u)->param_shard;
}
float *sharc_fsdp_shard_grads(sharc_fsdp *e, int u) {
    sharc_fsdp_shard_wait(e);
    sharc_fsdp_coll_reduced_wait(e); /* note [offload-reduce] (collectives.c) */
    return sharc_fsdp_unit_at(e, u)->grad_shard;
}

int sharc_fsdp_shard_segments(const sharc_fsdp *e, int u, const sharc_segment **out) {
    const sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    *out = t->segs;
    return t->nseg;
}

sharc_comm *sharc_fsdp_post_forward_comm(const sharc_fsdp *e) { return e->post_comm; }

const char *sharc_fsdp_strategy_names(const sharc_fsdp *e, const char **reduce) {
    if (reduce) *reduce = e->reduce->name;
    return e->gather->name;
}

void sharc_fsdp_stats_get(const sharc_fsdp *e, sharc_fsdp_stats *out) {
    *out = e->stats;
    out->gathered_peak = e->gathered.peak;
}

void sharc_fsdp_stats_reset(sharc_fsdp *e) {
    memset(&e->stats, 0, sizeof e->stats);
    e->gathered.peak = e->gathered.alive;
}

int64_t sharc_fsdp_gathered_unit_bytes(const sharc_fsdp *e) {
    int64_t mx = 0;
    for (int u = 0; u < e->nunits; u++) mx = e->units[u].numel_padded > mx ? e->units[u].numel_padded : mx;
    return mx * (int64_t)sizeof(float);
}

int sharc_fsdp_gathered_limit(const sharc_fsdp *e) { return e->gathered.n; }

int64_t sharc_fsdp_gathered_capacity_bytes(const sharc_fsdp *e) { return e->plan.bytes[SHARC_MEM_GATHERED]; }

int64_t sharc_fsdp_planned_bytes(const sharc_fsdp *e, sharc_mem_cat cat) {
    return cat >= 0 && cat < SHARC_MEM_NCAT ? e->plan.bytes[cat] : 0;
}
