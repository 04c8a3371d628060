/* mesh.c: sharc_mesh_*, the world split into dp_replicate x dp_shard x sp x
 * tp and the groups FSDP and sequence parallelism use (note [mesh-fsdp] in
 * sharc/mesh.h). */
#include "sharc/mesh.h"

#include <stdio.h>
#include <string.h>

static void divisors(int n, char *out, size_t len) {
    out[0] = 0;
    for (int d = 1; d <= n; d++)
        if (n % d == 0) snprintf(out + strlen(out), len - strlen(out), "%s%d", out[0] ? ", " : "", d);
}

sharc_status sharc_mesh_shard_size(const sharc_fsdp_config *cfg, int world_size, int *dp_shard) {
    switch (cfg->strategy) {
    case SHARC_SHARDING_FULL_SHARD:
    case SHARC_SHARDING_SHARD_GRAD_OP: *dp_shard = world_size; return SHARC_OK;
    case SHARC_SHARDING_NO_SHARD: *dp_shard = 1; return SHARC_OK;
    case SHARC_SHARDING_HYBRID_SHARD: {
        int f = cfg->fsdp_size;
        if (f >= world_size || f <= 1) {
            *dp_shard = world_size;
            return SHARC_OK;
        }
        if (world_size % f != 0) {
            char d[256];
            divisors(world_size, d, sizeof d);
            return sharc_error(SHARC_ERR_INVALID,
                               "mesh: world_size %d is not a multiple of fsdp.fsdp_size %d (%d / %d = %.2f "
                               "replicas); set fsdp.fsdp_size to a divisor of %d (%s)",
                               world_size, f, world_size, f, (double)world_size / f, world_size, d);
        }
        *dp_shard = f;
        return SHARC_OK;
    }
    }
    return sharc_error(SHARC_ERR_INVALID, "mesh: unknown sharding strategy %d", (int)cfg->strategy);
}

sharc_status sharc_mesh_check_model(const sharc_mesh_config *mc, const sharc_model_config *model, int seq_len) {
    int sp = mc->sp, tp = mc->tp, nh = model->num_heads, nkv = model->num_kv_heads > 0 ? model->num_kv_heads : nh;
    if (tp < 1) return sharc_error(SHARC_ERR_INVALID, "mesh.tp: %d, expected >= 1", tp);
    if (tp > 1) {
        const struct {
            const char *key;
            int n;
        } dims[] = {
            {"model.num_heads", nh}, {"model.num_kv_heads", nkv}, {"model.ff_hidden_dim", model->ff_hidden_dim}};
        for (int i = 0; i < 3; i++)
            if (dims[i].n % tp != 0)
                return sharc_error(SHARC_ERR_INVALID,
                                   "mesh.tp: %d does not divide %s %d (%d / %d = %.2f per rank); set mesh.tp "
                                   "(fsdp_tensor_parallel_size) to a divisor of %d",
                                   tp, dims[i].key, dims[i].n, dims[i].n, tp, (double)dims[i].n / tp, dims[i].n);
        /* note [tp-moe]: every expert's gate/up rows and down columns split as the dense MLP's */
        if (model->num_experts > 0 && model->moe_intermediate_size % tp != 0)
            return sharc_error(SHARC_ERR_INVALID,
                               "mesh.tp: %d does not divide model.moe_intermediate_size %d (%d / %d = %.2f per rank); "
                               "set mesh.tp (fsdp_tensor_parallel_size) to a divisor of %d",
                               tp, model->moe_intermediate_size, model->moe_intermediate_size, tp,
                               (double)model->moe_intermediate_size / tp, model->moe_intermediate_size);
    }
    if (sp < 1) return sharc_error(SHARC_ERR_INVALID, "mesh.sp: %d, expected >= 1", sp);
    if (sp == 1) return SHARC_OK;
    if (seq_len % sp != 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.sp: %d does not divide train.seq_len %d (%d / %d = %.2f tokens per rank); set "
                           "train.seq_len to a multiple of %d",
                           sp, seq_len, seq_len, sp, (double)seq_len / sp, sp);
    if (tp == 1 && nh % sp != 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.sp: %d does not divide model.num_heads %d (%d / %d = %.2f heads per rank); set "
                           "mesh.sp to a divisor of %d",
                           sp, nh, nh, sp, (double)nh / sp, nh);
    if (tp == 1 && nkv % sp != 0 && sp % nkv != 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.sp: %d and model.num_kv_heads %d: neither divides the other (%d %% %d = %d, %d %% %d "
                           "= %d); key/value heads are split over sp ranks or replicated to them, so set mesh.sp to "
                           "a divisor or a multiple of %d",
                           sp, nkv, nkv, sp, nkv % sp, sp, nkv, sp % nkv, nkv);
    /* note [tp-sp]: Ulysses splits each tp rank's heads, the rule above on the local counts */
    const int nhl = nh / tp, nkvl = nkv / tp;
    if (tp > 1 && nhl % sp != 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.sp: %d does not divide the query heads of a tp rank (model.num_heads %d / mesh.tp %d "
                           "= %d; %d / %d = %.2f heads per rank); set mesh.sp to a divisor of %d",
                           sp, nh, tp, nhl, nhl, sp, (double)nhl / sp, nhl);
    if (tp > 1 && nkvl % sp != 0 && sp % nkvl != 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.sp: %d and the key/value heads of a tp rank (model.num_kv_heads %d / mesh.tp %d = "
                           "%d): neither divides the other (%d %% %d = %d, %d %% %d = %d); set mesh.sp to a divisor "
                           "or a multiple of %d",
                           sp, nkv, tp, nkvl, nkvl, sp, nkvl % sp, sp, nkvl, sp % nkvl, nkvl);
    return SHARC_OK;
}

sharc_status sharc_mesh_dims_resolve(const sharc_fsdp_config *cfg, const sharc_mesh_config *mc, int world_size,
                                     sharc_mesh_dims *d) {
    int sp = mc->sp, tp = mc->tp;
    memset(d, 0, sizeof *d);
    if (sp < 1 || tp < 1) return sharc_error(SHARC_ERR_INVALID, "mesh: mesh.sp %d and mesh.tp %d must be >= 1", sp, tp);
    if (world_size % (sp * tp) != 0) {
        char dv[256];
        divisors(world_size, dv, sizeof dv);
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh: world_size %d is not a multiple of mesh.sp %d x mesh.tp %d (%d / %d = %.2f "
                           "data-parallel ranks); set mesh.sp x mesh.tp to a divisor of %d (%s)",
                           world_size, sp, tp, world_size, sp * tp, (double)world_size / (sp * tp), world_size, dv);
    }
    /* FSDP's flattened group, before HYBRID; the tp ranks are outside it
     * (each tp rank's FSDP groups shard its part, note [mesh-fsdp]) */
    int dp = world_size / (sp * tp), shard_ranks = world_size / tp;
    if (cfg->strategy == SHARC_SHARDING_NO_SHARD) {
        shard_ranks = sp; /* folded into the replicate all-reduce: dp_shard = 1 */
    } else if (cfg->strategy == SHARC_SHARDING_HYBRID_SHARD && cfg->fsdp_size > 1 && cfg->fsdp_size < world_size / tp) {
        SHARC_TRY(sharc_mesh_shard_size(cfg, world_size / tp, &shard_ranks));
        if (shard_ranks % sp != 0)
            return sharc_error(SHARC_ERR_INVALID,
                               "mesh: fsdp.fsdp_size %d is not a multiple of mesh.sp %d (%d / %d = %.2f data-parallel "
                               "shards); each sequence-parallel group lies inside one shard group, so set "
                               "fsdp.fsdp_size to a multiple of %d",
                               shard_ranks, sp, shard_ranks, sp, (double)shard_ranks / sp, sp);
    }
    /* note [post-forward] in src/fsdp/plan.c: an int reshard_after_forward divides FSDP's shard group */
    int post;
    SHARC_TRY(sharc_fsdp_post_forward_size(cfg, cfg->strategy == SHARC_SHARDING_NO_SHARD ? 1 : shard_ranks, &post));
    d->sp = sp;
    d->tp = tp;
    d->dp_shard = shard_ranks / sp;
    d->dp_replicate = dp / d->dp_shard;
    if (d->dp_replicate * d->dp_shard * d->sp * d->tp != world_size)
        return sharc_error(SHARC_ERR_INTERNAL, "mesh: dp_replicate %d x dp_shard %d x sp %d x tp %d != world_size %d",
                           d->dp_replicate, d->dp_shard, d->sp, d->tp, world_size);
    return SHARC_OK;
}

sharc_status sharc_mesh_init_dims(sharc_mesh *m, sharc_comm *world, const sharc_mesh_dims *d, sharc_sharding strategy) {
    memset(m, 0, sizeof *m);
    int n = sharc_comm_size(world), r = sharc_comm_rank(world);
    if (d->dp_replicate < 1 || d->dp_shard < 1 || d->sp < 1 || d->tp < 1 ||
        d->dp_replicate * d->dp_shard * d->sp * d->tp != n)
        return sharc_error(SHARC_ERR_INVALID, "mesh: dp_replicate %d x dp_shard %d x sp %d x tp %d != world_size %d",
                           d->dp_replicate, d->dp_shard, d->sp, d->tp, n);
    m->world = world;
    m->rank = r;
    m->world_size = n;
    m->dims = *d;
    m->sp = d->sp;
    m->tp = d->tp;
    const int tp = d->tp, tr = r % tp, q = r / tp; /* q: the rank among those of tp rank tr */
    m->tp_rank = tr;
    m->sp_rank = q % d->sp;
    m->dp = d->dp_replicate * d->dp_shard;
    m->dp_rank = q / d->sp;
    /* note [mesh-fsdp]: FSDP's shard group is dp_shard x sp flattened, or
     * one rank for NO_SHARD; one set of FSDP groups per tp rank */
    int group = strategy == SHARC_SHARDING_NO_SHARD ? 1 : d->dp_shard * d->sp;
    m->dp_shard = group;
    m->dp_replicate = n / tp / group;
    m->shard_rank = q % group;
    m->replicate_rank = q / group;
    sharc_status st = sharc_comm_split(world, (q / group) * tp + tr, q % group, &m->shard);
    if (st == SHARC_OK) st = sharc_comm_split(world, (q % group) * tp + tr, q / group, &m->replicate);
    if (st == SHARC_OK && d->sp > 1) st = sharc_comm_split(world, (q / d->sp) * tp + tr, q % d->sp, &m->sp_group);
    if (st == SHARC_OK && tp > 1) st = sharc_comm_split(world, q, tr, &m->tp_group);
    if (st != SHARC_OK) sharc_mesh_free(m);
    return st;
}

sharc_status sharc_mesh_init(sharc_mesh *m, sharc_comm *world, int dp_shard) {
    int n = sharc_comm_size(world);
    if (dp_shard < 1 || n % dp_shard != 0) {
        memset(m, 0, sizeof *m);
        return sharc_error(SHARC_ERR_INVALID, "mesh: dp_replicate x dp_shard(%d) != world_size(%d)", dp_shard, n);
    }
    sharc_mesh_dims d = {.dp_replicate = n / dp_shard, .dp_shard = dp_shard, .sp = 1, .tp = 1};
    return sharc_mesh_init_dims(m, world, &d, SHARC_SHARDING_FULL_SHARD);
}

void sharc_mesh_free(sharc_mesh *m) {
    sharc_comm_free(m->shard);
    sharc_comm_free(m->replicate);
    sharc_comm_free(m->sp_group);
    sharc_comm_free(m->tp_group);
    m->shard = m->replicate = m->sp_group = m->tp_group = NULL;
}
