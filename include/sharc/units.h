/* sharc/units.h: the contract between a model and the engine that holds its
 * parameters. A model is an ordered list of units (the embedding, one unit
 * per transformer block, the final norm and head); a unit is an ordered list
 * of parameters laid out back to back in one flat buffer. The model declares
 * the units; the engine (sharc/fsdp.h) owns the memory, shards it, gathers a
 * unit before it runs and reduce-scatters its gradient after. */
#ifndef SHARC_UNITS_H
#define SHARC_UNITS_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_MAX_UNIT_PARAMS 64 /* a Qwen3-MoE block holds 3 per expert (note [moe]) */
#define SHARC_NAME_MAX        96

typedef enum { SHARC_INIT_ZEROS = 0, SHARC_INIT_ONES, SHARC_INIT_NORMAL } sharc_init_kind;

typedef struct {
    char name[SHARC_NAME_MAX]; /* global name, e.g. "h.3.attn.c_attn.weight" */
    int ndim;
    int64_t shape[4];
    int64_t numel;
    int64_t offset; /* first element in the unit's flat buffer */
    sharc_init_kind init;
    float std;   /* for SHARC_INIT_NORMAL */
    bool decay;  /* AdamW weight decay applies (matrices, not norms/biases) */
    bool frozen; /* note [frozen-params]: gathered, never given a gradient or an update */
    /* Note [tp-params] (src/model/tp.h): under tensor parallelism a rank
     * holds part of the tensor. name, shape and numel stay the full tensor's
     * (checkpoints and files are topology-free); the unit's buffer holds
     * numel_local elements: rows (tp_dim 0) or columns (tp_dim 1) of the
     * full tensor, part tp_rank of tp; tp_parts > 1 views dim 0 as tp_parts
     * equal blocks each split (GPT-2's fused q, k, v rows). tp_dim -1: the
     * whole tensor, replicated over the tp ranks (tp_rank: which copy). */
    int64_t numel_local;
    int tp_dim, tp_parts, tp, tp_rank;
} sharc_param_spec;

typedef struct {
    char name[32]; /* "embed", "block.3", "head" */
    int nparams;
    sharc_param_spec params[SHARC_MAX_UNIT_PARAMS];
    int64_t numel; /* sum of the parameters' numel (no padding) */
    /* Note [root-unit]: a root unit stays gathered from its forward until its
     * backward is done, and its gradient buffer collects contributions from
     * other units (the embedding tied to the LM head). */
    bool root;
    /* Note [gathered16] (src/fsdp/collectives.c): the model reads this unit's
     * gathered parameters as 16-bit values (sharc_fsdp_gather16): with a
     * 16-bit param_dtype the engine gathers it into a slot of numel_padded
     * 16-bit elements and never widens it to fp32. Set by the model
     * (sharc_model_set_param_dtype) on its blocks under bf16 activations. */
    bool gathered16;
} sharc_unit_spec;

/* The order a model uses its units in (note [unit-schedule] in
 * src/model/model.c), declared beside the specs: the engine prefetches by
 * walking it (forward in order, backward in reverse) and sizes its
 * gathered-memory slots from max_live. */
typedef struct {
    int n;                             /* entries of order: the number of units */
    const int *order;                  /* (n) unit indices in the order the forward pass gathers them */
    const bool *backward_needs_params; /* (n) by unit index: its backward reads its parameters; false
                                        * (the embedding): no gather and no prefetch in backward */
    int max_live;                      /* most non-root units gathered at once by the model itself,
                                        * prefetch aside (1: one block at a time) */
} sharc_unit_schedule;

/* Append a parameter to a unit (offsets are assigned in order). */
void sharc_unit_add_param(sharc_unit_spec *u, const char *name, int ndim, const int64_t *shape, sharc_init_kind init,
                          float std, bool decay);
/* Note [tp-params]: make parameter i of the unit this rank's part `rank`
 * of `tp` along dim (0 rows, 1 columns; parts: dim 0's blocks, see above);
 * the offsets of the unit's parameters are reassigned. tp must divide the
 * split dimension (per block), else SHARC_ERR_INVALID naming the parameter. */
sharc_status sharc_unit_split_param(sharc_unit_spec *u, int i, int dim, int parts, int tp, int rank);
/* Note [tp-params]: the element of the full tensor that element `local`
 * (< numel_local) of this rank's part is, in *full; returns how many
 * elements from there are contiguous in both (the run, >= 1). */
int64_t sharc_param_tp_run(const sharc_param_spec *p, int64_t local, int64_t *full);
/* The most segments (sharc/fsdp.h) any range of the unit's buffer maps to:
 * the parameters' runs summed. */
int sharc_unit_max_segments(const sharc_unit_spec *u);
/* Index of the parameter called `name` in the unit, or -1. */
int sharc_unit_find_param(const sharc_unit_spec *u, const char *name);
/* The unit has a parameter that is not frozen (note [frozen-params]). */
bool sharc_unit_trainable(const sharc_unit_spec *u);

/* Note [frozen-params] (src/fsdp/units.c). Mark parameters frozen:
 * `prefixes` (model.freeze_module_prefix, ROLL's rule) is a comma-separated
 * list of name prefixes, each freezing every parameter whose name starts
 * with it; `trainable` (train.trainable) a comma-separated list of fnmatch
 * globs, which when non-empty freezes every parameter that matches none.
 * Either may be NULL or "". Each entry must match at least one parameter and
 * something must stay trainable, else SHARC_ERR_INVALID naming the key and
 * the entry. *nfrozen (may be NULL): parameters frozen. */
sharc_status sharc_units_freeze(sharc_unit_spec *units, int nunits, const char *prefixes, const char *trainable,
                                int *nfrozen);

#ifdef __cplusplus
}
#endif
#endif
