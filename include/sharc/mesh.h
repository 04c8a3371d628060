/* sharc/mesh.h: the device mesh. The world is split into dp_replicate x
 * dp_shard: ranks r with the same r / dp_shard form a shard group (FSDP shards
 * a unit across it); ranks with the same r % dp_shard form a replicate group
 * (the same shard, kept identical by an all-reduce of gradients). Shard groups
 * are consecutive ranks, so with ranks placed by node they are node-local.
 * Tensor- and sequence-parallel axes will be further factors (tp, sp = 1 now). */
#ifndef SHARC_MESH_H
#define SHARC_MESH_H

#include "sharc/comm.h"
#include "sharc/fsdp.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sharc_mesh {
    sharc_comm *world;     /* borrowed */
    sharc_comm *shard;     /* this rank's shard group (owned) */
    sharc_comm *replicate; /* this rank's replicate group (owned) */
    int rank, world_size;
    int dp_shard, dp_replicate;
    int shard_rank, replicate_rank;
    int tp, sp;            /* 1: room for tensor and sequence parallelism */
} sharc_mesh;

/* The shard-group size a strategy gives on `world_size` ranks: FULL_SHARD and
 * SHARD_GRAD_OP shard over everything, NO_SHARD over nothing, HYBRID_SHARD
 * over fsdp_size (as in ROLL: fsdp_size >= world_size or <= 1 means plain FSDP).
 * Errors carry the arithmetic. */
sharc_status sharc_mesh_shard_size(const sharc_fsdp_config *cfg, int world_size, int *dp_shard);
sharc_status sharc_mesh_init(sharc_mesh *m, sharc_comm *world, int dp_shard);
void sharc_mesh_free(sharc_mesh *m);

#ifdef __cplusplus
}
#endif
#endif
