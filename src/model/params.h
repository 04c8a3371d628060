/* params.h: the per-family parameter table (note [param-table] in
 * src/model/params.c) and what is built from it: the unit specs, each
 * unit's role -> parameter index array the model's views read, the counts,
 * the tensor-parallel split. Internal to src/model/. */
#ifndef SHARC_MODEL_PARAMS_H
#define SHARC_MODEL_PARAMS_H

#include "sharc/model.h"
#include "sharc/status.h"
#include "sharc/units.h"

#include <stdint.h>

/* What a parameter is to the model's code: the field of block_ptrs (or the
 * embedding / head lookup) it fills. */
typedef enum {
    SHARC_ROLE_WTE,
    SHARC_ROLE_WPE,
    SHARC_ROLE_LN1W,
    SHARC_ROLE_LN1B,
    SHARC_ROLE_WQKV, /* q (Llama: then k, v adjacent) or GPT-2's fused c_attn */
    SHARC_ROLE_WK,
    SHARC_ROLE_WV,
    SHARC_ROLE_BQKV,
    SHARC_ROLE_BK,
    SHARC_ROLE_BV,
    SHARC_ROLE_WO,
    SHARC_ROLE_BO,
    SHARC_ROLE_LN2W,
    SHARC_ROLE_LN2B,
    SHARC_ROLE_WFC, /* GPT-2's c_fc; Llama's gate (up adjacent) */
    SHARC_ROLE_WUP,
    SHARC_ROLE_BFC,
    SHARC_ROLE_WPROJ,
    SHARC_ROLE_BPROJ,
    SHARC_ROLE_QNW,
    SHARC_ROLE_KNW,
    SHARC_ROLE_ROUTER,
    SHARC_ROLE_EXPERT_GATE, /* expert 0's in a block unit (expert e: + e * the expert's rows) */
    SHARC_ROLE_EXPERT_UP,
    SHARC_ROLE_EXPERT_DOWN,
    SHARC_ROLE_LNFW,
    SHARC_ROLE_LNFB,
    SHARC_ROLE_LM_HEAD,
    SHARC_ROLE_COUNT
} sharc_param_role;

/* One unit's roles: at[r] the index of role r's (first) parameter, -1 when
 * absent; n[r] how many adjacent parameters one pointer of it covers (q, k,
 * v; gate, up: one sgemm computes them together). */
typedef struct {
    int8_t at[SHARC_ROLE_COUNT];
    int8_t n[SHARC_ROLE_COUNT];
} sharc_unit_roles;

/* Units of a (validated) config: embed, L blocks, head, then note
 * [moe-units]'s E expert units per MoE layer. */
int sharc_params_num_units(const sharc_model_config *c);
/* Note [moe-units]: the unit of expert e of MoE layer l, -1 when the layer's
 * experts live in its block unit (or it is dense). */
int sharc_params_expert_unit(const sharc_model_config *c, int l, int e);
/* The unit specs (full shapes, calloc'd array of sharc_params_num_units)
 * and each unit's roles (likewise). */
sharc_status sharc_params_build(const sharc_model_config *c, sharc_unit_spec **units, sharc_unit_roles **roles);
/* Note [tp-params]: every parameter becomes this rank's part of tp by its
 * row's split (the vocabulary rows only when tp divides V, note [tp-vocab]). */
sharc_status sharc_params_split_tp(const sharc_model_config *c, sharc_unit_spec *units, int tp, int rank);
/* Parameters (all), and the matmul parameters PaLM's FLOPs count (MoE: the
 * router and the K experts a token uses; the LM head whether tied or not). */
int64_t sharc_params_count(const sharc_model_config *c, bool matmul_active);
/* A block unit's parameter count for an MoE layer, beside its router and
 * experts: base (attention, norms, variants), router and per expert. */
void sharc_params_moe_block(const sharc_model_config *c, int *base, int *router, int *per_expert);

/* A role's pointer inside a unit buffer `base` (NULL when absent, when base
 * is NULL, or for gradients when every parameter it covers is frozen). */
static inline float *sharc_params_at(const sharc_unit_spec *u, const sharc_unit_roles *r, sharc_param_role role,
                                     float *base, bool grads) {
    int i = r->at[role];
    if (i < 0 || !base) return NULL;
    bool frozen = grads;
    for (int k = 0; k < r->n[role] && frozen; k++) frozen = u->params[i + k].frozen;
    return frozen ? NULL : base + u->params[i].offset;
}

#endif
