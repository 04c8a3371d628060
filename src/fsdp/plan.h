/* plan.h (internal): the engine's memory plan, a pure function of the unit
 * specs, the schedule's max_live, the configuration and the group sizes:
 * how each unit is sharded, which gathered-memory slots exist, the
 * communication staging, and so the bytes this rank allocates per category,
 * before anything is allocated (note [gathered-bound] in
 * docs/ARCHITECTURE.md). Tested on its own and against what the engine
 * allocates (tests/test_plan.c). */
#ifndef SHARC_FSDP_PLAN_H
#define SHARC_FSDP_PLAN_H

#include "sharc/alloc.h"
#include "sharc/fsdp.h"

/* Note [offload-reduce] (collectives.c): the landing ring's slots at most. */
#define SHARC_FSDP_HREDUCED_SLOTS 4

typedef struct {
    int64_t numel_shard;  /* padded shard (note [flat-layout]) */
    int64_t numel_padded; /* numel_shard x S: the unit's gathered size */
    int64_t shard_lo;     /* first element of this rank's shard in the unit's padded buffer */
    int64_t global_off;   /* first element of the unit in a buffer of all units back to back */
    int64_t numel_post;   /* note [post-forward]: elements of the post-forward shard (numel_padded / N), 0: none */
    int64_t post_off;     /* its first byte in the post-forward arena */
    bool g16;             /* note [gathered16]: its slot holds the gathered unit in 16-bit param_dtype */
    int64_t slot_numel;   /* floats its gathered slot needs: numel_padded, half of it (rounded up) when g16 */
} sharc_fsdp_unit_plan;

/* What the plan is made for, besides the specs and the configuration. */
typedef struct {
    int S, shard_rank;    /* shard group size and this rank's place in it */
    int max_live;         /* the schedule's: non-root units the model holds gathered at once */
    bool params_in_place; /* gather needs no slot: S = 1 in fp32, or the shared window (note [shared-params]) */
    bool grads_in_place;  /* S = 1: gradients accumulate into the shard, no slot */
    bool grads_shared;    /* the gradient slots are carved from the shared window, not allocated */
    bool offload;         /* note [shard-device]: the shards live in host memory (fsdp.cpu_offload on a device) */
    bool overlap_reduce;  /* a device (not host memory): one more gradient slot, so a unit's reduction runs
                             on the comm stream while the next unit's backward fills another (note
                             [comm-stream], collectives.c; unused where note [comm-staging] blocks) */
    const sharc_unit_schedule *schedule; /* which units backward gathers (NULL: every unit, in order) */
} sharc_fsdp_plan_in;

typedef struct {
    int nunits;
    sharc_fsdp_unit_plan *units; /* (nunits) */
    int64_t total_padded;        /* sum of numel_padded: the shared parameter window */
    int post;                    /* note [post-forward]: ranks a unit stays sharded over after forward */
    int64_t post_bytes;          /* the post-forward shards of every unit, in param_dtype (SHARC_MEM_GATHERED) */
    /* slots: capacity (floats) and the unit a slot is reserved for (-1: any) */
    int n_param_slots, n_grad_slots;
    int64_t *param_slot_numel, *grad_slot_numel;
    int *param_slot_owner, *grad_slot_owner;
    int64_t grad_slots_numel; /* sum of grad_slot_numel: the shared gradient window's part per rank */
    int64_t stage16_shard, stage16_full, stage_shard; /* staging elements (0: none) */
    int64_t hreduced;                                 /* note [offload-reduce]: host floats of the landing ring */
    int hslots;                                       /* its slots, each the largest shard's (0: none) */
    int64_t bytes[SHARC_MEM_NCAT];      /* this rank's allocations per category (shared windows included) on the
                                      compute device: with offload, without the shards' */
    int64_t host_bytes[SHARC_MEM_NCAT]; /* with offload: what lives on the shard device (host memory), else 0 */
} sharc_fsdp_plan;

/* Fill *p (free with sharc_fsdp_plan_free); fails for lack of memory or a
 * reshard_after_forward the group size refuses (note [post-forward]). */
sharc_status sharc_fsdp_plan_make(sharc_fsdp_plan *p, const sharc_unit_spec *units, int nunits,
                                  const sharc_fsdp_config *cfg, const sharc_fsdp_plan_in *in);
void sharc_fsdp_plan_free(sharc_fsdp_plan *p);

#endif
