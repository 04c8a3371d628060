/* engine.c: sharc_fsdp_*, owner of every parameter, gradient and shard, and
 * of the unit life cycle (docs/ARCHITECTURE.md, "Life of a unit"):
 *
 *   SHARDED --gather--> GATHERED --forward_done--> SHARDED (FULL_SHARD)
 *                                 \-> stays GATHERED (SHARD_GRAD_OP, root units)
 *   GATHERED --backward_done--> SHARDED, its gradient reduced into the shard
 *
 * Note [engine-buffers]. Memory is planned at init: the fp32 shards
 * (params, grads), a pool of gathered-parameter slots and a pool of
 * full-gradient slots, each slot the size of the largest padded unit, and
 * communication staging. The step allocates nothing. With a shard group of
 * one rank (one process, NO_SHARD) and fp32 parameters, gather returns the
 * shard itself and gradients accumulate straight into the grad shard.
 *
 * Note [shared-params]. When a shard group lives on one node, may use shared
 * memory, and gathers fp32, the parameter shards of all its ranks are one
 * MPI shared-memory window laid out unit after unit, each unit's padded
 * buffer contiguous: rank r's shard of unit u is the slice it owns, written
 * only by r (optimizer, loading), and gather(u) returns the unit's whole
 * buffer in place: an all-gather with no copy and no gathered-memory slot.
 * The node still holds one copy of the parameters, 1/N per rank. A write to a
 * shard marks the parameters dirty (sharc_fsdp_params_updated); the next
 * gather first synchronises the group (memory barrier + barrier), so nobody
 * reads a shard before its owner finished the step. No rank writes while a
 * peer may read: the optimizer runs after the gradient-norm all-reduce, which
 * every rank reaches only after its backward. Groups spanning nodes, 16-bit
 * param_dtype and SHARC_COMM_SHM=0 use the all-gather path.
 *
 * Note [reduction-order]. A unit's gradient is reduce-scattered over the
 * shard group when its backward is done (every micro-batch, or only the last
 * with fsdp.no_sync); the replicate group (HYBRID_SHARD, NO_SHARD) all-reduces
 * the accumulated shard gradients once per step, in sharc_fsdp_finish_grads,
 * which is the same sum as reducing every micro-batch and moves
 * grad_accum times fewer bytes. */
#include "sharc/activity.h"
#include "sharc/fsdp.h"
#include "sharc/clock.h"
#include "sharc/comm.h"
#include "sharc/kernels.h"
#include "sharc/log.h"
#include "sharc/mesh.h"
#include "sharc/rng.h"
#include "layout.h"

#include <math.h>
#include <stdlib.h>

#define SHARC_MAX_UNITS_PLAN 4096
#include <string.h>

typedef enum { UNIT_SHARDED = 0, UNIT_GATHERED } unit_state;

typedef struct {
    sharc_unit_spec spec;
    int64_t numel_shard;  /* padded shard size */
    int64_t numel_padded; /* numel_shard x shard group size */
    int64_t shard_lo;     /* first element of this rank's shard in the flat buffer */
    float *param_shard;   /* (numel_shard) fp32 master parameters, SHARC_MEM_PARAMS */
    float *grad_shard;    /* (numel_shard) gradients, SHARC_MEM_GRADS */
    sharc_segment segs[SHARC_MAX_UNIT_PARAMS];
    int nseg;
    unit_state state;
    int64_t global_off;   /* first element of the unit in the shared parameter window */
    float *gathered;      /* (numel_padded) while GATHERED: a pool slot, param_shard, or the shared window */
    float *full_grad;     /* (numel_padded) while the backward accumulates: a pool slot, or grad_shard */
    sharc_comm_request *pending; /* a prefetch gather in flight */
} unit_t;

typedef struct {
    int n;
    bool borrowed;  /* the slots are carved from a shared window, not allocated on the device */
    int64_t *numel; /* (n) capacity of each slot */
    int *reserved;  /* (n) the only unit that may use the slot, or -1 */
    float **buf;
    int *owner;     /* unit holding the slot, -1 if free */
} pool_t;

struct sharc_fsdp {
    sharc_fsdp_config cfg;
    sharc_device *dev;       /* where shards, slots and staging live */
    sharc_stream *stream;    /* the device's default stream: the model's kernels and ours */
    const sharc_kernels *k;
    int nunits;
    unit_t *units;
    int *order, *pos;        /* note [unit-schedule]: units in forward order, and each unit's place in it */
    bool *bwd_params;        /* (nunits) the unit's backward reads its parameters */
    int max_live;
    sharc_comm *shard, *replicate, *world; /* NULL on one process */
    int S, R;                /* shard and replicate group sizes */
    int shard_rank;
    bool reshard_after_forward;
    bool direct_params;      /* S == 1 and fp32, or shared params: gather needs no slot and no copy */
    sharc_comm_shared *pshm; /* note [shared-params]: every unit's padded parameters, or NULL */
    float *pglobal;          /* (sum of numel_padded) the window's base, borrowed from pshm */
    int64_t pshared_bytes;   /* this rank's part of the window, counted as SHARC_MEM_PARAMS */
    bool params_dirty;       /* shards written since the group last synchronised */
    sharc_comm_shared *gshm; /* this group's gradient slots, each rank's in its own part, or NULL */
    float *gglobal_mine;     /* this rank's part of gshm, borrowed */
    int64_t gshared_bytes;
    bool direct_grads;       /* S == 1: gradients accumulate into the shard */
    bool reduce_now;         /* this micro-batch reduces (false under no_sync before the last) */
    bool in_backward;        /* for the activity record (note [watchdog]) */
    pool_t gathered, grads;
    int gathered_alive, gathered_peak;
    /* communication staging (SHARC_MEM_COMM) */
    uint16_t *stage16_shard; /* (max numel_shard) 16-bit send/recv */
    uint16_t *stage16_full;  /* (max numel_padded) 16-bit full unit */
    float *stage_shard;      /* (max numel_shard) fp32 reduce-scatter result */
    double *scalar;          /* (1) device scalar: the local sum of squares */
    sharc_fsdp_stats stats;
};

static void comm_fatal(void) { sharc_fatal(__FILE__, __LINE__, "fsdp: %s", sharc_last_error()); }

void sharc_fsdp_config_default(sharc_fsdp_config *c) {
    memset(c, 0, sizeof *c);
    c->strategy = SHARC_SHARDING_FULL_SHARD;
    c->reshard_after_forward = -1;
    c->fsdp_size = 0;
    c->param_dtype = SHARC_DT_F32;
    c->reduce_dtype = SHARC_DT_F32;
    c->forward_prefetch = false;
    c->backward_prefetch = SHARC_BACKWARD_PREFETCH_PRE;
    c->limit_all_gathers = 0;
    c->no_sync = false;
}

const char *sharc_sharding_name(sharc_sharding s) {
    static const char *n[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"};
    return (s >= 0 && s <= SHARC_SHARDING_HYBRID_SHARD) ? n[s] : "?";
}

/* ----------------------------------------------------------------- pools */

/* n slots with the given capacities (floats), reserved[i] >= 0 dedicates slot
 * i to one unit; carved back to back from `arena` if it is not NULL. */
static sharc_status pool_init(sharc_device *dev, pool_t *p, int n, const int64_t *numel, const int *reserved,
                              float *arena) {
    p->borrowed = arena != NULL;
    p->n = n;
    p->numel = calloc((size_t)(n > 0 ? n : 1), sizeof(int64_t));
    p->reserved = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    p->buf = calloc((size_t)(n > 0 ? n : 1), sizeof(float *));
    p->owner = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    if (!p->buf || !p->owner || !p->numel || !p->reserved) return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    for (int i = 0; i < n; i++) {
        p->owner[i] = -1;
        p->numel[i] = numel[i];
        p->reserved[i] = reserved[i];
        p->buf[i] = arena ? arena : sharc_device_alloc(dev, (size_t)numel[i] * sizeof(float), SHARC_MEM_GATHERED);
        if (arena) arena += numel[i];
        if (!p->buf[i])
            return sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate a gathered buffer of %lld floats",
                               (long long)numel[i]);
    }
    return SHARC_OK;
}

static void pool_free(sharc_device *dev, pool_t *p) {
    for (int i = 0; i < p->n && p->buf && !p->borrowed; i++) sharc_device_free(dev, p->buf[i]);
    free(p->buf);
    free(p->owner);
    free(p->numel);
    free(p->reserved);
    memset(p, 0, sizeof *p);
}

/* The unit's reserved slot, else the smallest free unreserved slot that holds
 * `numel` floats. */
static float *pool_get(pool_t *p, int unit, int64_t numel, bool must) {
    int best = -1;
    for (int i = 0; i < p->n && best < 0; i++)
        if (p->reserved[i] == unit && p->owner[i] < 0) best = i;
    if (best < 0)
        for (int i = 0; i < p->n; i++)
            if (p->owner[i] < 0 && p->reserved[i] < 0 && p->numel[i] >= numel &&
                (best < 0 || p->numel[i] < p->numel[best]))
                best = i;
    if (best >= 0) {
        p->owner[best] = unit;
        return p->buf[best];
    }
    if (must) {
        for (int i = 0; i < p->n; i++)
            sharc_log(SHARC_LOG_ERROR, "fsdp: buffer %d: %lld floats, held by unit %d", i, (long long)p->numel[i],
                      p->owner[i]);
        sharc_fatal(__FILE__, __LINE__, "fsdp: no free buffer of %lld floats when unit %d needs one (a schedule bug)",
                    (long long)numel, unit);
    }
    return NULL;
}

static void pool_put(pool_t *p, const float *buf) {
    for (int i = 0; i < p->n; i++)
        if (p->buf[i] == buf) {
            p->owner[i] = -1;
            return;
        }
    SHARC_CHECK(!"pool_put: not a pool buffer");
}

/* ------------------------------------------------------------------ init */

/* Gradient slots (note [gathered-bound]): one for the unit in backward plus
 * one per root unit, or one per unit with fsdp.no_sync; sizes (floats, padded)
 * and owners (the unit a slot is reserved for, or -1), nunits + 2 entries at
 * most. Returns the number of slots. */
static int plan_grad_slots(const sharc_unit_spec *units, int nunits, int S, bool no_sync, int64_t *sizes,
                           int *owners) {
    int n = 0;
    int64_t max_plain = 0;
    for (int u = 0; u < nunits; u++) {
        int64_t padded = sharc_layout_numel_shard(units[u].numel, S) * S;
        if (no_sync || units[u].root) {
            owners[n] = u;
            sizes[n++] = padded;
        } else if (padded > max_plain) {
            max_plain = padded;
        }
    }
    if (!no_sync && max_plain > 0) {
        owners[n] = -1;
        sizes[n++] = max_plain;
    }
    return n;
}

/* Note [shared-params], gradients: this rank's gradient slots live in its
 * part of a shared window, so the reduce-scatter reads every rank's slot in
 * place. Collective. */
static sharc_status share_grad_slots(sharc_fsdp *e, const sharc_unit_spec *units, int nunits) {
    int64_t sizes[SHARC_MAX_UNITS_PLAN], total = 0;
    int owners[SHARC_MAX_UNITS_PLAN];
    if (nunits + 2 > SHARC_MAX_UNITS_PLAN) return SHARC_OK; /* very deep model: the MPI path */
    int n = plan_grad_slots(units, nunits, e->S, e->cfg.no_sync, sizes, owners);
    for (int i = 0; i < n; i++) total += sizes[i];
    size_t per_rank = (size_t)total * sizeof(float);
    sharc_status st = sharc_comm_shared_alloc(e->shard, per_rank, &e->gshm);
    if (st == SHARC_ERR_UNSUPPORTED) return SHARC_OK;
    if (st != SHARC_OK) return st;
    e->gglobal_mine = (float *)e->gshm->base[e->shard_rank];
    e->gshared_bytes = (int64_t)per_rank;
    sharc_mem_account(SHARC_MEM_GATHERED, e->gshared_bytes);
    return SHARC_OK;
}

/* Note [shared-params]: one window of `total` floats over the shard group,
 * `total / S` per rank, used only if the ranks' parts lie back to back (MPI's
 * default contiguous layout) on every rank; otherwise, or on a group spanning
 * nodes, the engine keeps private shards and all-gathers. Collective. */
static sharc_status share_params(sharc_fsdp *e, int64_t total) {
    size_t per_rank = (size_t)(total / e->S) * sizeof(float);
    sharc_comm_shared *s = NULL;
    sharc_status st = sharc_comm_shared_alloc(e->shard, per_rank, &s);
    if (st == SHARC_ERR_UNSUPPORTED) return SHARC_OK; /* same answer on every rank */
    if (st != SHARC_OK) return st;
    int32_t ok = 1, all = 0;
    for (int r = 1; r < s->size; r++)
        if (s->base[r] != s->base[0] + (size_t)r * per_rank) ok = 0;
    st = sharc_comm_all_reduce(e->shard, &ok, &all, 1, SHARC_DT_I32, SHARC_REDUCE_OP_MIN);
    if (st != SHARC_OK || !all) {
        sharc_comm_shared_free(s);
        return st;
    }
    e->pshm = s;
    e->pglobal = (float *)s->base[0];
    e->pshared_bytes = (int64_t)per_rank;
    e->direct_params = true;
    e->params_dirty = true;
    sharc_mem_account(SHARC_MEM_PARAMS, e->pshared_bytes);
    return SHARC_OK;
}

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
            return sharc_error(SHARC_ERR_INVALID, "fsdp: the schedule's order[%d] = %d is not a unit or a repeat", i, u);
        e->order[i] = u;
        e->pos[u] = i;
        e->bwd_params[u] = sch ? sch->backward_needs_params[u] : true;
    }
    e->max_live = sch ? sch->max_live : 1;
    return SHARC_OK;
}

sharc_status sharc_fsdp_init(sharc_fsdp **out, const sharc_unit_spec *units, int nunits,
                             const sharc_unit_schedule *schedule, const sharc_fsdp_config *cfg,
                             struct sharc_mesh *mesh, sharc_device *dev) {
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
    e->nunits = nunits;
    e->S = mesh ? mesh->dp_shard : 1;
    e->R = mesh ? mesh->dp_replicate : 1;
    e->shard_rank = mesh ? mesh->shard_rank : 0;
    e->shard = mesh ? mesh->shard : NULL;
    e->replicate = mesh ? mesh->replicate : NULL;
    e->world = mesh ? mesh->world : NULL;
    e->reshard_after_forward = cfg->reshard_after_forward >= 0 ? cfg->reshard_after_forward != 0
                                                               : cfg->strategy != SHARC_SHARDING_SHARD_GRAD_OP;
    e->direct_params = e->S == 1 && cfg->param_dtype == SHARC_DT_F32; /* or shared: below */
    e->direct_grads = e->S == 1;
    e->reduce_now = true;
    e->units = calloc((size_t)nunits, sizeof(unit_t));
    sharc_status st = SHARC_OK;
    if (!e->units) {
        st = sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
        goto fail;
    }
    if ((st = init_schedule(e, schedule, nunits)) != SHARC_OK) goto fail;
    /* collective first (every rank of the group reaches it), local allocations after */
    if (e->S > 1 && cfg->param_dtype == SHARC_DT_F32 && e->shard && sharc_device_is_host(e->dev) &&
        sharc_comm_shared_memory_allowed(e->shard)) {
        int64_t total = 0;
        for (int u = 0; u < nunits; u++) total += sharc_layout_numel_shard(units[u].numel, e->S) * e->S;
        if ((st = share_params(e, total)) != SHARC_OK) goto fail;
        if (e->pglobal && cfg->reduce_dtype == SHARC_DT_F32 && (st = share_grad_slots(e, units, nunits)) != SHARC_OK)
            goto fail;
    }
    int64_t max_padded = 0, max_shard = 0, global_off = 0;
    for (int u = 0; u < nunits; u++) {
        unit_t *t = &e->units[u];
        t->spec = units[u];
        t->numel_shard = sharc_layout_numel_shard(t->spec.numel, e->S);
        t->numel_padded = t->numel_shard * e->S;
        t->shard_lo = t->numel_shard * e->shard_rank;
        t->global_off = global_off;
        global_off += t->numel_padded;
        t->param_shard = e->pglobal ? e->pglobal + t->global_off + t->shard_lo
                                    : sharc_device_alloc(e->dev, (size_t)t->numel_shard * sizeof(float), SHARC_MEM_PARAMS);
        t->grad_shard = sharc_device_alloc(e->dev, (size_t)t->numel_shard * sizeof(float), SHARC_MEM_GRADS);
        if (!t->param_shard || !t->grad_shard) {
            st = sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate unit '%s' (%lld floats)", t->spec.name,
                             (long long)t->numel_shard);
            goto fail;
        }
        t->nseg = sharc_layout_segments(&t->spec, t->shard_lo, t->shard_lo + t->numel_shard, t->segs);
        max_padded = t->numel_padded > max_padded ? t->numel_padded : max_padded;
        max_shard = t->numel_shard > max_shard ? t->numel_shard : max_shard;
    }
    /* Note [gathered-bound]: gathered-parameter slots. FULL_SHARD keeps the
     * running unit, one prefetched unit if prefetch is on (capped by
     * fsdp.limit_all_gathers, >= 1), each sized for the largest non-root unit,
     * and one exact-size slot per root unit. With reshard_after_forward false
     * (SHARD_GRAD_OP) every unit keeps an exact-size slot from its forward to
     * its backward. Gradient slots: one for the unit in backward plus one per
     * root unit, or one per unit with fsdp.no_sync. So the gathered memory is
     *   FULL_SHARD:    (1 + prefetch) x max non-root unit + sum of root units
     *   SHARD_GRAD_OP: sum of all units
     * for parameters, and max non-root unit + sum of root units for gradients
     * (every unit with no_sync), all padded, fp32. */
    int64_t max_plain = 0;
    int roots = 0;
    for (int u = 0; u < nunits; u++) {
        if (units[u].root) roots++;
        else if (e->units[u].numel_padded > max_plain) max_plain = e->units[u].numel_padded;
    }
    int64_t *sizes = calloc((size_t)nunits + 2, sizeof(int64_t));
    int *owners = malloc(sizeof(int) * ((size_t)nunits + 2));
    for (int i = 0; owners && i < nunits + 2; i++) owners[i] = -1;
    if (!sizes || !owners) {
        free(sizes);
        free(owners);
        st = sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
        goto fail;
    }
    int n_gather = 0;
    if (!e->direct_params) {
        if (e->reshard_after_forward) {
            int prefetch = (cfg->forward_prefetch || cfg->backward_prefetch != SHARC_BACKWARD_PREFETCH_NONE) ? 1 : 0;
            int live = e->max_live + prefetch;
            if (cfg->limit_all_gathers > 0 && live > cfg->limit_all_gathers) live = cfg->limit_all_gathers;
            if (live < e->max_live) live = e->max_live; /* the model needs that many at once */
            if (max_plain > 0)
                for (int i = 0; i < live; i++) sizes[n_gather++] = max_plain;
            for (int u = 0; u < nunits; u++)
                if (units[u].root) {
                    owners[n_gather] = u;
                    sizes[n_gather++] = e->units[u].numel_padded;
                }
        } else {
            for (int u = 0; u < nunits; u++) {
                owners[n_gather] = u;
                sizes[n_gather++] = e->units[u].numel_padded;
            }
        }
    }
    st = pool_init(e->dev, &e->gathered, n_gather, sizes, owners, NULL);
    int n_grad = e->direct_grads ? 0 : plan_grad_slots(units, nunits, e->S, cfg->no_sync, sizes, owners);
    if (st == SHARC_OK) st = pool_init(e->dev, &e->grads, n_grad, sizes, owners, e->gglobal_mine);
    free(sizes);
    free(owners);
    if (st != SHARC_OK) goto fail;
    e->scalar = sharc_device_alloc(e->dev, sizeof(double), SHARC_MEM_OTHER);
    if (!e->scalar) {
        st = sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
        goto fail;
    }
    if (e->S > 1 || cfg->param_dtype != SHARC_DT_F32 || cfg->reduce_dtype != SHARC_DT_F32) {
        e->stage16_shard = sharc_device_alloc(e->dev, (size_t)max_shard * 2, SHARC_MEM_COMM);
        e->stage16_full = sharc_device_alloc(e->dev, (size_t)max_padded * 2, SHARC_MEM_COMM);
        e->stage_shard = sharc_device_alloc(e->dev, (size_t)max_shard * sizeof(float), SHARC_MEM_COMM);
        if (!e->stage16_shard || !e->stage16_full || !e->stage_shard) {
            st = sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate communication buffers");
            goto fail;
        }
    }
    *out = e;
    return SHARC_OK;
fail:
    sharc_fsdp_free(e);
    return st;
}

void sharc_fsdp_free(sharc_fsdp *e) {
    if (!e) return;
    for (int u = 0; u < e->nunits && e->units; u++) {
        if (e->units[u].pending) sharc_comm_wait(e->units[u].pending);
        if (!e->pglobal) sharc_device_free(e->dev, e->units[u].param_shard);
        sharc_device_free(e->dev, e->units[u].grad_shard);
    }
    pool_free(e->dev, &e->gathered);
    pool_free(e->dev, &e->grads);
    if (e->gshm) { /* collective, like every engine teardown */
        sharc_comm_shared_free(e->gshm);
        sharc_mem_account(SHARC_MEM_GATHERED, -e->gshared_bytes);
    }
    if (e->pshm) {
        sharc_comm_shared_free(e->pshm);
        sharc_mem_account(SHARC_MEM_PARAMS, -e->pshared_bytes);
    }
    sharc_device_free(e->dev, e->stage16_shard);
    sharc_device_free(e->dev, e->stage16_full);
    sharc_device_free(e->dev, e->stage_shard);
    sharc_device_free(e->dev, e->scalar);
    free(e->units);
    free(e->order);
    free(e->pos);
    free(e->bwd_params);
    free(e);
}

void sharc_fsdp_init_params(sharc_fsdp *e, uint64_t seed) {
    for (int u = 0; u < e->nunits; u++) {
        unit_t *t = &e->units[u];
        for (int s = 0; s < t->nseg; s++) {
            const sharc_segment *g = &t->segs[s];
            const sharc_param_spec *p = &t->spec.params[g->param];
            float *dst = t->param_shard + g->shard_off;
            if (p->init == SHARC_INIT_NORMAL)
                e->k->init_normal(e->stream, dst, g->len, p->std, seed, sharc_rng_stream(p->name),
                                  (uint64_t)g->param_off);
            else
                e->k->fill(e->stream, dst, p->init == SHARC_INIT_ONES ? 1.0f : 0.0f, g->len);
        }
    }
    sharc_fsdp_params_updated(e);
}

void sharc_fsdp_params_updated(sharc_fsdp *e) { e->params_dirty = true; }
bool sharc_fsdp_params_shared(const sharc_fsdp *e) { return e->pglobal != NULL; }

/* Shared parameters: wait until every rank finished writing its shards. */
static void sync_params(sharc_fsdp *e) {
    if (!e->pglobal || !e->params_dirty) return;
    double t0 = sharc_clock_now();
    if (sharc_comm_shared_sync(e->shard, e->pshm) != SHARC_OK) comm_fatal();
    e->params_dirty = false;
    e->stats.wait_s += sharc_clock_now() - t0;
}

static unit_t *unit_at(const sharc_fsdp *e, int u) {
    SHARC_CHECK(u >= 0 && u < e->nunits);
    return &e->units[u];
}

/* --------------------------------------------------------------- gather */

/* Post (or do) the gather of unit t into a slot it already holds. */
static void start_gather(sharc_fsdp *e, unit_t *t, bool blocking) {
    sharc_status st;
    if (e->S == 1) {
        e->k->round(e->stream, t->gathered, t->param_shard, e->cfg.param_dtype, t->numel_shard);
        return;
    }
    if (e->cfg.param_dtype == SHARC_DT_F32) {
        if (blocking) st = sharc_comm_all_gather(e->shard, t->param_shard, t->gathered, (size_t)t->numel_shard, SHARC_DT_F32);
        else st = sharc_comm_iall_gather(e->shard, t->param_shard, t->gathered, (size_t)t->numel_shard, SHARC_DT_F32,
                                         e->stream, &t->pending);
        if (st != SHARC_OK) comm_fatal();
        return;
    }
    /* 16-bit: the shard is rounded, gathered as 16-bit, widened on completion
     * (blocking: the staging buffers are shared by all units) */
    e->k->cast(e->stream, e->stage16_shard, e->cfg.param_dtype, t->param_shard, SHARC_DT_F32, t->numel_shard);
    st = sharc_comm_all_gather(e->shard, e->stage16_shard, e->stage16_full, (size_t)t->numel_shard, e->cfg.param_dtype);
    if (st != SHARC_OK) comm_fatal();
    e->k->cast(e->stream, t->gathered, SHARC_DT_F32, e->stage16_full, e->cfg.param_dtype, t->numel_padded);
}

static void wait_pending(sharc_fsdp *e, unit_t *t) {
    if (!t->pending) return;
    double t0 = sharc_clock_now();
    if (sharc_comm_wait_on(t->pending, e->stream) != SHARC_OK) comm_fatal();
    t->pending = NULL;
    e->stats.wait_s += sharc_clock_now() - t0;
}

/* Gather unit u ahead of time if a slot is free (prefetch). */
static void prefetch(sharc_fsdp *e, int u) {
    if (u < 0 || u >= e->nunits || e->direct_params) return;
    unit_t *t = &e->units[u];
    if (t->state == UNIT_GATHERED) return;
    float *slot = pool_get(&e->gathered, u, t->numel_padded, false);
    if (!slot) return; /* limit_all_gathers reached: gather on demand instead */
    t->gathered = slot;
    t->state = UNIT_GATHERED;
    e->gathered_alive++;
    e->gathered_peak = e->gathered_alive > e->gathered_peak ? e->gathered_alive : e->gathered_peak;
    e->stats.gathers++;
    start_gather(e, t, false);
}

/* Note [unit-schedule]: the unit after u in forward order, or -1. */
static int next_in_forward(const sharc_fsdp *e, int u) {
    int i = e->pos[u] + 1;
    return i < e->nunits ? e->order[i] : -1;
}

/* The next unit that backward will gather after u (backward walks the order
 * in reverse), skipping units whose backward reads no parameters, or -1. */
static int next_in_backward(const sharc_fsdp *e, int u) {
    for (int i = e->pos[u] - 1; i >= 0; i--)
        if (e->bwd_params[e->order[i]]) return e->order[i];
    return -1;
}

const float *sharc_fsdp_gather(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    sharc_activity_phase(e->in_backward ? "backward" : "forward", u, t->spec.name);
    if (t->state != UNIT_GATHERED) {
        if (e->direct_params) {
            sync_params(e);
            t->gathered = e->pglobal ? e->pglobal + t->global_off : t->param_shard;
            if (e->pglobal) e->stats.gathers++;
        } else {
            t->gathered = pool_get(&e->gathered, u, t->numel_padded, true);
            e->gathered_alive++;
            e->gathered_peak = e->gathered_alive > e->gathered_peak ? e->gathered_alive : e->gathered_peak;
            e->stats.gathers++;
            double t0 = sharc_clock_now();
            start_gather(e, t, true);
            e->stats.wait_s += sharc_clock_now() - t0;
        }
        t->state = UNIT_GATHERED;
    } else {
        wait_pending(e, t);
    }
    return t->gathered;
}

static void release(sharc_fsdp *e, unit_t *t) {
    if (t->state != UNIT_GATHERED) return;
    wait_pending(e, t);
    if (!e->direct_params) {
        pool_put(&e->gathered, t->gathered);
        e->gathered_alive--;
    }
    t->gathered = NULL;
    t->state = UNIT_SHARDED;
}

void sharc_fsdp_forward_done(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    SHARC_CHECK(t->state == UNIT_GATHERED);
    if (e->reshard_after_forward && !t->spec.root) release(e, t);
    if (e->cfg.forward_prefetch) prefetch(e, next_in_forward(e, u));
}

void sharc_fsdp_release(sharc_fsdp *e, int u) { release(e, unit_at(e, u)); }

/* ------------------------------------------------------------- gradients */

float *sharc_fsdp_grad(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    e->in_backward = true;
    sharc_activity_phase("backward", u, t->spec.name);
    if (!t->full_grad) {
        if (e->direct_grads) {
            t->full_grad = t->grad_shard;
        } else {
            t->full_grad = pool_get(&e->grads, u, t->numel_padded, true);
            if (sharc_device_memset0(e->dev, t->full_grad, (size_t)t->numel_padded * sizeof(float), e->stream) !=
                SHARC_OK)
                comm_fatal();
        }
    }
    /* BACKWARD_PRE: the next unit's parameters are requested now, while this
     * unit's backward runs (the first call to grad(u) opens its backward). */
    if (e->cfg.backward_prefetch == SHARC_BACKWARD_PREFETCH_PRE) prefetch(e, next_in_backward(e, u));
    return t->full_grad;
}

/* Note [shared-params]: every rank's full gradient of the unit sits in its
 * slot of the shared window at the same offset; each rank sums its shard's
 * slice of all of them in rank order (the first term as is, like the
 * all-to-all path, so results are bit-identical) into its grad shard. One
 * sync before (every slot complete), one after (nobody reuses a slot a peer
 * still reads). */
static void reduce_unit_shared(sharc_fsdp *e, unit_t *t) {
    size_t off = (size_t)((char *)t->full_grad - e->gshm->base[e->shard_rank]);
    if (sharc_comm_shared_reduce_scatter(e->gshm, off, t->grad_shard, (size_t)t->numel_shard, true) != SHARC_OK)
        comm_fatal();
}

/* grad_shard += reduce-scatter(full_grad) over the shard group. */
static void reduce_unit(sharc_fsdp *e, unit_t *t) {
    double t0 = sharc_clock_now();
    sharc_status st;
    if (e->gshm) {
        reduce_unit_shared(e, t);
        e->stats.reduces++;
        e->stats.wait_s += sharc_clock_now() - t0;
        return;
    }
    if (e->cfg.reduce_dtype == SHARC_DT_F32) {
        st = sharc_comm_reduce_scatter(e->shard, t->full_grad, e->stage_shard, (size_t)t->numel_shard, SHARC_DT_F32,
                                       SHARC_REDUCE_OP_SUM);
        if (st != SHARC_OK) comm_fatal();
    } else {
        e->k->cast(e->stream, e->stage16_full, e->cfg.reduce_dtype, t->full_grad, SHARC_DT_F32, t->numel_padded);
        st = sharc_comm_reduce_scatter(e->shard, e->stage16_full, e->stage16_shard, (size_t)t->numel_shard,
                                       e->cfg.reduce_dtype, SHARC_REDUCE_OP_SUM);
        if (st != SHARC_OK) comm_fatal();
        e->k->cast(e->stream, e->stage_shard, SHARC_DT_F32, e->stage16_shard, e->cfg.reduce_dtype, t->numel_shard);
    }
    e->k->accumulate(e->stream, t->grad_shard, e->stage_shard, t->numel_shard);
    e->stats.reduces++;
    e->stats.wait_s += sharc_clock_now() - t0;
}

void sharc_fsdp_backward_done(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    sharc_activity_phase("backward, reducing gradients", u, t->spec.name);
    if (t->full_grad && !e->direct_grads && e->reduce_now) {
        reduce_unit(e, t);
        pool_put(&e->grads, t->full_grad);
        t->full_grad = NULL;
    } else if (e->direct_grads) {
        t->full_grad = NULL;
    }
    release(e, t);
    if (e->cfg.backward_prefetch == SHARC_BACKWARD_PREFETCH_POST) prefetch(e, next_in_backward(e, u));
}

void sharc_fsdp_zero_grad(sharc_fsdp *e) {
    for (int u = 0; u < e->nunits; u++)
        if (sharc_device_memset0(e->dev, e->units[u].grad_shard, (size_t)e->units[u].numel_shard * sizeof(float),
                                 e->stream) != SHARC_OK)
            comm_fatal();
}

void sharc_fsdp_begin_microbatch(sharc_fsdp *e, bool last) {
    e->reduce_now = !e->cfg.no_sync || last;
    e->in_backward = false;
}

sharc_status sharc_fsdp_finish_grads(sharc_fsdp *e) {
    sharc_activity_phase("finishing gradients", -1, NULL);
    e->in_backward = false;
    for (int u = 0; u < e->nunits; u++) {
        unit_t *t = &e->units[u];
        SHARC_CHECK(t->state == UNIT_SHARDED || t->spec.root);
        if (t->full_grad && !e->direct_grads) {
            /* no_sync leftovers (cannot happen when the last micro-batch reduced) */
            reduce_unit(e, t);
            pool_put(&e->grads, t->full_grad);
            t->full_grad = NULL;
        }
    }
    if (e->R > 1) {
        double t0 = sharc_clock_now();
        for (int u = 0; u < e->nunits; u++) {
            unit_t *t = &e->units[u];
            sharc_status st;
            if (e->cfg.reduce_dtype == SHARC_DT_F32) {
                st = sharc_comm_all_reduce(e->replicate, t->grad_shard, t->grad_shard, (size_t)t->numel_shard,
                                          SHARC_DT_F32, SHARC_REDUCE_OP_SUM);
            } else {
                /* 16-bit on the wire, summed in fp32 by the backend */
                int64_t n = t->numel_shard;
                e->k->cast(e->stream, e->stage16_shard, e->cfg.reduce_dtype, t->grad_shard, SHARC_DT_F32, n);
                st = sharc_comm_all_reduce(e->replicate, e->stage16_shard, e->stage16_shard, (size_t)n,
                                          e->cfg.reduce_dtype, SHARC_REDUCE_OP_SUM);
                if (st == SHARC_OK)
                    e->k->cast(e->stream, t->grad_shard, SHARC_DT_F32, e->stage16_shard, e->cfg.reduce_dtype, n);
            }
            if (st != SHARC_OK) return st;
        }
        e->stats.wait_s += sharc_clock_now() - t0;
    }
    e->reduce_now = true;
    return SHARC_OK;
}

/* ------------------------------------------------------------------ norm */

double sharc_fsdp_grad_sumsq_local(const sharc_fsdp *e) {
    double total = 0.0;
    if (sharc_device_memset0(e->dev, e->scalar, sizeof(double), e->stream) != SHARC_OK) comm_fatal();
    for (int u = 0; u < e->nunits; u++) {
        const unit_t *t = &e->units[u];
        for (int s = 0; s < t->nseg; s++)
            e->k->sumsq(e->stream, e->scalar, t->grad_shard + t->segs[s].shard_off, t->segs[s].len);
    }
    if (sharc_device_copy(e->dev, &total, e->scalar, sizeof total, SHARC_COPY_DEVICE_TO_HOST, e->stream) != SHARC_OK ||
        sharc_device_synchronize(e->stream) != SHARC_OK)
        comm_fatal();
    return total;
}

sharc_status sharc_fsdp_grad_norm(sharc_fsdp *e, double *norm, double *extra) {
    double v[2] = {sharc_fsdp_grad_sumsq_local(e) / e->R, extra ? *extra : 0.0};
    if (e->world) SHARC_TRY(sharc_comm_all_reduce(e->world, v, v, 2, SHARC_DT_F64, SHARC_REDUCE_OP_SUM));
    *norm = sqrt(v[0]);
    if (extra) *extra = v[1];
    return SHARC_OK;
}

/* ------------------------------------------------------------ accessors */

int sharc_fsdp_num_units(const sharc_fsdp *e) { return e->nunits; }
sharc_device *sharc_fsdp_device(const sharc_fsdp *e) { return e->dev; }
const sharc_unit_spec *sharc_fsdp_unit_spec(const sharc_fsdp *e, int u) { return &unit_at(e, u)->spec; }
int64_t sharc_fsdp_shard_numel(const sharc_fsdp *e, int u) { return unit_at(e, u)->numel_shard; }
float *sharc_fsdp_shard_params(sharc_fsdp *e, int u) { return unit_at(e, u)->param_shard; }
float *sharc_fsdp_shard_grads(sharc_fsdp *e, int u) { return unit_at(e, u)->grad_shard; }

int sharc_fsdp_shard_segments(const sharc_fsdp *e, int u, const sharc_segment **out) {
    const unit_t *t = unit_at(e, u);
    *out = t->segs;
    return t->nseg;
}

void sharc_fsdp_stats_get(const sharc_fsdp *e, sharc_fsdp_stats *out) {
    *out = e->stats;
    out->gathered_peak = e->gathered_peak;
}

void sharc_fsdp_stats_reset(sharc_fsdp *e) {
    memset(&e->stats, 0, sizeof e->stats);
    e->gathered_peak = e->gathered_alive;
}

int64_t sharc_fsdp_gathered_unit_bytes(const sharc_fsdp *e) {
    int64_t mx = 0;
    for (int u = 0; u < e->nunits; u++) mx = e->units[u].numel_padded > mx ? e->units[u].numel_padded : mx;
    return mx * (int64_t)sizeof(float);
}

sharc_status sharc_fsdp_gather_master(sharc_fsdp *e, int u, float *dst) {
    unit_t *t = unit_at(e, u);
    if (e->S == 1 || e->pglobal) {
        sync_params(e);
        SHARC_TRY(sharc_device_copy(e->dev, dst, e->pglobal ? e->pglobal + t->global_off : t->param_shard,
                                    (size_t)t->numel_padded * sizeof(float), SHARC_COPY_DEVICE_TO_HOST, e->stream));
        return sharc_device_synchronize(e->stream);
    }
    return sharc_comm_all_gather(e->shard, t->param_shard, dst, (size_t)t->numel_shard, SHARC_DT_F32);
}
int sharc_fsdp_gathered_limit(const sharc_fsdp *e) { return e->gathered.n; }

int64_t sharc_fsdp_gathered_capacity_bytes(const sharc_fsdp *e) {
    int64_t total = 0;
    for (int i = 0; i < e->gathered.n; i++) total += e->gathered.numel[i];
    for (int i = 0; i < e->grads.n; i++) total += e->grads.numel[i];
    return total * (int64_t)sizeof(float);
}

sharc_status sharc_fsdp_find_param(const sharc_fsdp *e, const char *name, int *unit, int *param) {
    for (int u = 0; u < e->nunits; u++) {
        int p = sharc_unit_find_param(&e->units[u].spec, name);
        if (p >= 0) {
            *unit = u;
            *param = p;
            return SHARC_OK;
        }
    }
    return sharc_error(SHARC_ERR_INVALID, "fsdp: no parameter named '%s' in this model", name);
}

sharc_status sharc_fsdp_param_write_local(sharc_fsdp *e, const char *name, const float *src, int64_t numel) {
    int u, p;
    SHARC_TRY(sharc_fsdp_find_param(e, name, &u, &p));
    unit_t *t = &e->units[u];
    if (numel != t->spec.params[p].numel)
        return sharc_error(SHARC_ERR_INVALID, "fsdp: parameter '%s' has %lld elements, got %lld", name,
                           (long long)t->spec.params[p].numel, (long long)numel);
    for (int s = 0; s < t->nseg; s++)
        if (t->segs[s].param == p)
            SHARC_TRY(sharc_device_copy(e->dev, t->param_shard + t->segs[s].shard_off, src + t->segs[s].param_off,
                                        (size_t)t->segs[s].len * sizeof(float), SHARC_COPY_HOST_TO_DEVICE,
                                        e->stream));
    e->params_dirty = true;
    return sharc_device_synchronize(e->stream);
}

sharc_status sharc_fsdp_param_read_local(const sharc_fsdp *e, const char *name, float *dst, int64_t numel) {
    int u, p;
    SHARC_TRY(sharc_fsdp_find_param(e, name, &u, &p));
    const unit_t *t = &e->units[u];
    if (numel != t->spec.params[p].numel)
        return sharc_error(SHARC_ERR_INVALID, "fsdp: parameter '%s' has %lld elements, got %lld", name,
                           (long long)t->spec.params[p].numel, (long long)numel);
    for (int s = 0; s < t->nseg; s++)
        if (t->segs[s].param == p)
            SHARC_TRY(sharc_device_copy(e->dev, dst + t->segs[s].param_off, t->param_shard + t->segs[s].shard_off,
                                        (size_t)t->segs[s].len * sizeof(float), SHARC_COPY_DEVICE_TO_HOST,
                                        e->stream));
    return sharc_device_synchronize(e->stream);
}
