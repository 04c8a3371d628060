/* mesh.c: sharc_mesh_*, the world split into replicate x shard groups. */
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

sharc_status sharc_mesh_init(sharc_mesh *m, sharc_comm *world, int dp_shard) {
    memset(m, 0, sizeof *m);
    int n = sharc_comm_size(world), r = sharc_comm_rank(world);
    if (dp_shard < 1 || n % dp_shard != 0)
        return sharc_error(SHARC_ERR_INVALID, "mesh: dp_replicate x dp_shard(%d) != world_size(%d)", dp_shard, n);
    m->world = world;
    m->rank = r;
    m->world_size = n;
    m->dp_shard = dp_shard;
    m->dp_replicate = n / dp_shard;
    m->tp = m->sp = 1;
    m->shard_rank = r % dp_shard;
    m->replicate_rank = r / dp_shard;
    sharc_status st = sharc_comm_split(world, r / dp_shard, r % dp_shard, &m->shard);
    if (st == SHARC_OK) st = sharc_comm_split(world, r % dp_shard, r / dp_shard, &m->replicate);
    if (st != SHARC_OK) sharc_mesh_free(m);
    return st;
}

void sharc_mesh_free(sharc_mesh *m) {
    sharc_comm_free(m->shard);
    sharc_comm_free(m->replicate);
    m->shard = m->replicate = NULL;
}
