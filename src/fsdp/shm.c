/* shm.c: sharc_fsdp_shm_*, the shared-window strategy of the engine's
 * collectives (CPU device and a backend with shared memory only).
 *
 * Note [shared-params]. When a shard group lives on one node, may use shared
 * memory, and gathers fp32, the parameter shards of all its ranks are one
 * shared-memory window laid out unit after unit, each unit's padded buffer
 * contiguous: rank r's shard of unit u is the slice it owns, written only by
 * r (optimizer, loading), and gather(u) returns the unit's whole buffer in
 * place: an all-gather with no copy and no gathered-memory slot. The node
 * still holds one copy of the parameters, 1/N per rank. Writes to shards go
 * through sharc_fsdp_shard_write_begin/_end (param_io.c), whose end marks
 * the parameters dirty on every rank; the next gather first synchronises
 * the group (memory barrier + barrier), so nobody reads a shard before its
 * owner finished writing. No rank writes while a peer may read: the
 * optimizer runs after the gradient-norm all-reduce, which every rank
 * reaches only after its backward. Groups spanning nodes, 16-bit
 * param_dtype and SHARC_COMM_SHM=0 use the all-gather path.
 *
 * With fp32 reduction the gradient slots live in a second window, each
 * rank's in its own part at the same offsets: a unit's reduce-scatter is
 * sharc_comm_shared_reduce_scatter, each rank summing its slice of every
 * rank's slot in rank order (note [rank-order]) straight into its grad
 * shard, bit-identical to the all-to-all path, with no copy into staging.
 * Its pointer scratch has the group's size, so groups of any size qualify. */
#include "engine.h"
#include "sharc/clock.h"

bool sharc_fsdp_shm_eligible(const sharc_fsdp *e) {
    return e->S > 1 && e->cfg.param_dtype == SHARC_DT_F32 && e->shard && sharc_device_is_host(e->dev) &&
           sharc_comm_shared_memory_allowed(e->shard);
}

/* One window of `total` floats over the shard group, `total / S` per rank,
 * used only if the ranks' parts lie back to back (MPI's default contiguous
 * layout) on every rank; otherwise, or on a group spanning nodes, the
 * engine keeps private shards and all-gathers. Collective. */
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
    e->params_dirty = true;
    sharc_mem_account(SHARC_MEM_PARAMS, (int64_t)s->bytes);
    return SHARC_OK;
}

/* This rank's gradient slots in its part of a second window, so the
 * reduce-scatter reads every rank's slot in place. Collective. */
static sharc_status share_grad_slots(sharc_fsdp *e, int64_t floats) {
    sharc_status st = sharc_comm_shared_alloc(e->shard, (size_t)floats * sizeof(float), &e->gshm);
    if (st == SHARC_ERR_UNSUPPORTED) return SHARC_OK;
    if (st != SHARC_OK) return st;
    sharc_mem_account(SHARC_MEM_GATHERED, (int64_t)e->gshm->bytes);
    return SHARC_OK;
}

sharc_status sharc_fsdp_shm_init(sharc_fsdp *e, const sharc_fsdp_plan *plan) {
    SHARC_TRY(share_params(e, plan->total_padded));
    if (e->pglobal && e->cfg.reduce_dtype == SHARC_DT_F32 && plan->grad_slots_numel > 0)
        SHARC_TRY(share_grad_slots(e, plan->grad_slots_numel));
    return SHARC_OK;
}

void sharc_fsdp_shm_free(sharc_fsdp *e) {
    if (e->gshm) { /* collective, like every engine teardown */
        sharc_mem_account(SHARC_MEM_GATHERED, -(int64_t)e->gshm->bytes);
        sharc_comm_shared_free(e->gshm);
        e->gshm = NULL;
    }
    if (e->pshm) {
        sharc_mem_account(SHARC_MEM_PARAMS, -(int64_t)e->pshm->bytes);
        sharc_comm_shared_free(e->pshm);
        e->pshm = NULL;
        e->pglobal = NULL;
    }
}

void sharc_fsdp_shm_sync_params(sharc_fsdp *e) {
    if (!e->pglobal || !e->params_dirty) return;
    double t0 = sharc_clock_now();
    if (sharc_comm_shared_sync(e->shard, e->pshm) != SHARC_OK) SHARC_FSDP_COMM_FATAL();
    e->params_dirty = false;
    e->stats.wait_s += sharc_clock_now() - t0;
}

static void gather_shared(sharc_fsdp *e, sharc_fsdp_unit *t, bool blocking) {
    sharc_fsdp_shm_sync_params(e);
    t->param_full = e->pglobal + t->global_off;
    e->stats.gathers++;
}

static void reduce_shared(sharc_fsdp *e, sharc_fsdp_unit *t) {
    size_t off = (size_t)((char *)t->grad_full - e->gshm->base[e->shard_rank]);
    if (sharc_comm_shared_reduce_scatter(e->gshm, off, t->grad_shard, (size_t)t->numel_shard, true) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
}

const sharc_fsdp_gather_i sharc_fsdp_gather_shared = {.name = "shared window", .slot = false, .start = gather_shared};
const sharc_fsdp_reduce_i sharc_fsdp_reduce_shared = {.name = "shared window", .slot = true, .reduce = reduce_shared};
