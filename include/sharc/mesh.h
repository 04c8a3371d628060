/* sharc/mesh.h: the device mesh. The world is dp_replicate x dp_shard x sp
 * x tp, tp innermost (torchtitan's order), so rank
 *     r = ((replicate * dp_shard + shard) * sp + sp_rank) * tp + tp_rank.
 * Sequence-parallel groups are consecutive ranks (as ROLL's Ulysses groups).
 *
 * Note [mesh-fsdp]. FSDP shards a unit over the flattened dp_shard x sp
 * group (torchtitan's "dp_shard_cp"): the sp ranks of a sequence hold
 * partial gradients of the same samples, and the engine's reduce-scatter
 * SUMs them with the data-parallel ones, which the global-token loss scale
 * (note [loss-normalization] in src/train/step.c) makes exactly the
 * gradient of the whole batch. The engine's groups are therefore:
 *   shard     the ranks with the same r / (dp_shard*sp): FULL_SHARD,
 *             SHARD_GRAD_OP and HYBRID_SHARD shard over them;
 *   replicate the ranks with the same r % (dp_shard*sp);
 * NO_SHARD has dp_shard = 1 and shards nothing: its shard group is one rank
 * and its replicate group (all-reduce) holds the sp ranks too. The batch
 * axis (which samples a rank reads) is dp = dp_replicate x dp_shard streams,
 * dp_rank = r / (sp*tp): every rank of a sequence-parallel group reads the
 * same samples and keeps its T/sp tokens of each.
 *
 * Tensor parallelism (note [tp] in src/model/tp.h) splits each block's
 * parameters over the tp ranks of a group, so FSDP's groups above are taken
 * per tp rank: the shard group is the ranks with the same r / (dp_shard*sp*tp)
 * and the same tp_rank, each FSDP group sharding its tp part. The tp ranks
 * of a group see the same tokens. With sp too, the sp group is the ranks
 * of equal dp_rank and tp_rank, the tp group those of equal dp_rank and
 * sp_rank (note [tp-sp] in src/model/tp.h). */
#ifndef SHARC_MESH_H
#define SHARC_MESH_H

#include "sharc/comm.h"
#include "sharc/config.h"
#include "sharc/fsdp.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The four degrees of a mesh; their product is the world size. */
typedef struct {
    int dp_replicate, dp_shard, sp, tp;
} sharc_mesh_dims;

typedef struct sharc_mesh {
    sharc_comm *world;     /* borrowed */
    sharc_comm *shard;     /* FSDP's shard group, note [mesh-fsdp] (owned) */
    sharc_comm *replicate; /* FSDP's replicate group (owned) */
    sharc_comm *sp_group;  /* this rank's sequence-parallel group (owned; NULL when sp = 1) */
    sharc_comm *tp_group;  /* this rank's tensor-parallel group, tp consecutive ranks (owned; NULL when tp = 1) */
    int rank, world_size;
    sharc_mesh_dims dims; /* the mesh's degrees */
    /* FSDP's view (what sharc_fsdp_init and the checkpoints read): the sizes
     * of and this rank's place in the shard and replicate groups; with sp = 1
     * dp_shard and dp_replicate are the mesh's degrees */
    int dp_shard, dp_replicate;
    int shard_rank, replicate_rank;
    int tp, tp_rank, sp, sp_rank;
    int dp, dp_rank; /* the batch axis: data streams, and this rank's */
} sharc_mesh;

/* The shard-group size a strategy gives on `world_size` ranks: FULL_SHARD and
 * SHARD_GRAD_OP shard over everything, NO_SHARD over nothing, HYBRID_SHARD
 * over fsdp_size (as in ROLL: fsdp_size >= world_size or <= 1 means plain FSDP).
 * Errors carry the arithmetic. */
sharc_status sharc_mesh_shard_size(const sharc_fsdp_config *cfg, int world_size, int *dp_shard);
/* The degrees for a strategy, mesh.sp and mesh.tp on `world_size` ranks.
 * fsdp.fsdp_size counts the ranks of FSDP's flattened shard group (ROLL's
 * meaning: it holds the Ulysses groups), so dp_shard = fsdp_size / sp. Pure
 * arithmetic; a mesh that does not fit the world is refused with the
 * arithmetic in one line. */
sharc_status sharc_mesh_dims_resolve(const sharc_fsdp_config *cfg, const sharc_mesh_config *mc, int world_size,
                                     sharc_mesh_dims *d);
/* The world-independent checks of mesh.sp and mesh.tp against the model and
 * train.seq_len: sp divides seq_len and num_heads, and num_kv_heads and sp
 * divide one or the other (key/value heads are replicated when sp exceeds
 * them); tp divides num_heads, num_kv_heads and ff_hidden_dim; with both,
 * the sp rule holds for each tp rank's heads (num_heads / tp and
 * num_kv_heads / tp: note [tp-sp] in src/model/tp.h); with experts tp
 * divides moe_intermediate_size too (note [tp-moe]). */
sharc_status sharc_mesh_check_model(const sharc_mesh_config *mc, const sharc_model_config *model, int seq_len);
/* Collective over `world` (splits): the groups of note [mesh-fsdp]. */
sharc_status sharc_mesh_init_dims(sharc_mesh *m, sharc_comm *world, const sharc_mesh_dims *d, sharc_sharding strategy);
/* dp_replicate x dp_shard with sp = tp = 1 (FSDP alone). */
sharc_status sharc_mesh_init(sharc_mesh *m, sharc_comm *world, int dp_shard);
void sharc_mesh_free(sharc_mesh *m);

#ifdef __cplusplus
}
#endif
#endif
