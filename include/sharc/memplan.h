/* sharc/memplan.h: the memory plan of a run, per rank and per category
 * (sharc/alloc.h), from the configuration, the number of ranks and whether
 * each shard group lives on one node: pure arithmetic over the same
 * functions the engine, the optimizer and the model allocate from
 * (sharc_fsdp_plan_bytes, sharc_model_activation_bytes), so nothing the
 * size of the model is allocated. `sharc plan` prints it, every training run
 * prints it at start and its measured peaks beside it at the end (note
 * [memory-plan] in src/train/memplan.c). */
#ifndef SHARC_MEMPLAN_H
#define SHARC_MEMPLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sharc/alloc.h"
#include "sharc/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int world, dp_shard, dp_replicate, tp, sp, threads; /* dp_shard: FSDP's shard group (x sp), per tp rank */
    bool node_local;                                    /* every shard group on one node */
    bool shared;                        /* parameters in one shared-memory window per group (note [shared-params]) */
    int64_t nparams, ntrainable;        /* parameter elements, and those not frozen */
    int64_t bytes[SHARC_MEM_NCAT];      /* per rank */
    int64_t offload_file;               /* optim.offload_dir: the moments' file per rank, on disk (0: none) */
    int64_t total;                      /* of bytes: the run's device (host memory on train.device cpu) */
    int64_t host_bytes[SHARC_MEM_NCAT]; /* fsdp.cpu_offload on a device: per rank in host memory, not in bytes */
    int64_t host_total;
} sharc_memplan;

/* The plan of `cfg` (validated) over `world` ranks placed `ranks_per_node`
 * to a node (consecutive ranks; >= world: one node), `threads` per rank
 * (the attention workspace). SHARC_ERR_INVALID for a mesh the strategy
 * cannot make or nodes that do not divide the ranks. */
sharc_status sharc_memplan_make(sharc_memplan *p, const sharc_config *cfg, int world, int ranks_per_node, int threads);
/* The table, one line per category in GiB; with `measured` (per category,
 * may be NULL) a column of measured peaks and their ratio to the plan. */
void sharc_memplan_print(FILE *f, const sharc_memplan *p, const sharc_config *cfg, const int64_t *measured);
/* For a plan above `limit` bytes per rank: the smallest single change
 * that fits (activation checkpointing, FULL_SHARD, a smaller micro-batch
 * with more accumulation, more ranks), printed with its plan. Returns true
 * when the configuration fits as it is or a change was found. */
bool sharc_memplan_suggest(FILE *f, const sharc_config *cfg, int world, int ranks_per_node, int threads, int64_t limit);

#ifdef __cplusplus
}
#endif
#endif
