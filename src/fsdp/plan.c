/* plan.c: sharc_fsdp_plan_*, the engine's memory plan (plan.h): pure
 * arithmetic from the specs, the configuration and the group sizes, no
 * allocation but the plan's own arrays.
 *
 * Note [gathered-bound]. Gathered memory is planned as slots lent to units.
 * Parameters: with reshard_after_forward (FULL_SHARD), max_live slots of the
 * largest non-root unit for the units the model holds at once, one more per
 * unit prefetched ahead (the larger of the forward and backward depths, note
 * [prefetch-depth] in fsdp.c; fsdp.limit_all_gathers caps the total, never below
 * max_live), and one exact-size slot per root unit; without it
 * (SHARD_GRAD_OP) every unit keeps an exact-size slot from its forward to its
 * backward; none when gathers need no slot (one process in fp32, or the
 * shared window). Gradients: max_live slots of the largest non-root unit
 * plus one per root unit, or one per unit with fsdp.no_sync; none at one
 * process. So, all padded, fp32:
 *   parameters  FULL_SHARD:    (max_live + prefetch depth) x max non-root unit + sum of root units
 *               SHARD_GRAD_OP: sum of all units
 *   gradients   max_live x max non-root unit + sum of root units (every unit with no_sync)
 * where for gradients (slots and shards) only trainable units count: a unit
 * whose parameters are all frozen has no gradient memory (note
 * [frozen-params] in src/fsdp/units.c). */
#include "plan.h"
#include "layout.h"

#include <stdlib.h>
#include <string.h>

void sharc_fsdp_plan_free(sharc_fsdp_plan *p) {
    free(p->units);
    free(p->param_slot_numel);
    free(p->grad_slot_numel);
    free(p->param_slot_owner);
    free(p->grad_slot_owner);
    memset(p, 0, sizeof *p);
}

sharc_status sharc_fsdp_plan_make(sharc_fsdp_plan *p, const sharc_unit_spec *units, int nunits,
                                  const sharc_fsdp_config *cfg, const sharc_fsdp_plan_in *in) {
    memset(p, 0, sizeof *p);
    p->nunits = nunits;
    /* note [prefetch-depth] in fsdp.c: as many slots as units prefetched ahead (at most every unit) */
    int fd = cfg->forward_prefetch ? (cfg->forward_prefetch_depth > 1 ? cfg->forward_prefetch_depth : 1) : 0;
    int bd = cfg->backward_prefetch != SHARC_BACKWARD_PREFETCH_NONE
                 ? (cfg->backward_prefetch_depth > 1 ? cfg->backward_prefetch_depth : 1)
                 : 0;
    int prefetch = fd > bd ? fd : bd;
    if (prefetch > nunits) prefetch = nunits;
    size_t n = (size_t)nunits + (size_t)in->max_live + (size_t)prefetch + 1; /* most slots a list can have */
    p->units = calloc((size_t)(nunits > 0 ? nunits : 1), sizeof *p->units);
    p->param_slot_numel = calloc(n, sizeof(int64_t));
    p->grad_slot_numel = calloc(n, sizeof(int64_t));
    p->param_slot_owner = calloc(n, sizeof(int));
    p->grad_slot_owner = calloc(n, sizeof(int));
    if (!p->units || !p->param_slot_numel || !p->grad_slot_numel || !p->param_slot_owner || !p->grad_slot_owner) {
        sharc_fsdp_plan_free(p);
        return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    }
    const int S = in->S;
    int64_t max_plain = 0, max_shard = 0, max_padded = 0, shards = 0, grad_shards = 0, max_plain_grad = 0;
    for (int u = 0; u < nunits; u++) {
        sharc_fsdp_unit_plan *t = &p->units[u];
        t->numel_shard = sharc_layout_numel_shard(units[u].numel, S);
        t->numel_padded = t->numel_shard * S;
        t->shard_lo = t->numel_shard * in->shard_rank;
        t->global_off = p->total_padded;
        p->total_padded += t->numel_padded;
        shards += t->numel_shard;
        if (!units[u].root && t->numel_padded > max_plain) max_plain = t->numel_padded;
        if (sharc_unit_trainable(&units[u])) {
            grad_shards += t->numel_shard;
            if (!units[u].root && t->numel_padded > max_plain_grad) max_plain_grad = t->numel_padded;
        }
        if (t->numel_shard > max_shard) max_shard = t->numel_shard;
        if (t->numel_padded > max_padded) max_padded = t->numel_padded;
    }
    bool reshard = cfg->reshard_after_forward >= 0 ? cfg->reshard_after_forward != 0
                                                   : cfg->strategy != SHARC_SHARDING_SHARD_GRAD_OP;
    /* parameter slots */
    int k = 0;
    if (!in->params_in_place) {
        if (reshard) {
            int live = in->max_live + prefetch;
            if (cfg->limit_all_gathers > 0 && live > cfg->limit_all_gathers) live = cfg->limit_all_gathers;
            if (live < in->max_live) live = in->max_live; /* the model needs that many at once */
            if (max_plain > 0)
                for (int i = 0; i < live; i++) {
                    p->param_slot_owner[k] = -1;
                    p->param_slot_numel[k++] = max_plain;
                }
            for (int u = 0; u < nunits; u++)
                if (units[u].root) {
                    p->param_slot_owner[k] = u;
                    p->param_slot_numel[k++] = p->units[u].numel_padded;
                }
        } else {
            for (int u = 0; u < nunits; u++) {
                p->param_slot_owner[k] = u;
                p->param_slot_numel[k++] = p->units[u].numel_padded;
            }
        }
    }
    p->n_param_slots = k;
    /* gradient slots */
    k = 0;
    if (!in->grads_in_place) {
        for (int u = 0; u < nunits; u++)
            if ((cfg->no_sync || units[u].root) && sharc_unit_trainable(&units[u])) {
                p->grad_slot_owner[k] = u;
                p->grad_slot_numel[k++] = p->units[u].numel_padded;
            }
        if (!cfg->no_sync && max_plain_grad > 0)
            for (int i = 0; i < in->max_live; i++) {
                p->grad_slot_owner[k] = -1;
                p->grad_slot_numel[k++] = max_plain_grad;
            }
    }
    p->n_grad_slots = k;
    for (int i = 0; i < p->n_grad_slots; i++) p->grad_slots_numel += p->grad_slot_numel[i];
    /* 16-bit send/receive buffers and the fp32 reduce-scatter result */
    if (S > 1 || cfg->param_dtype != SHARC_DT_F32 || cfg->reduce_dtype != SHARC_DT_F32) {
        p->stage16_shard = max_shard;
        p->stage16_full = max_padded;
        p->stage_shard = max_shard;
    }
    int64_t gathered = p->grad_slots_numel;
    for (int i = 0; i < p->n_param_slots; i++) gathered += p->param_slot_numel[i];
    p->bytes[SHARC_MEM_PARAMS] = shards * (int64_t)sizeof(float);
    p->bytes[SHARC_MEM_GRADS] = grad_shards * (int64_t)sizeof(float);
    p->bytes[SHARC_MEM_GATHERED] = gathered * (int64_t)sizeof(float);
    p->bytes[SHARC_MEM_COMM] = 2 * (p->stage16_shard + p->stage16_full) + (int64_t)sizeof(float) * p->stage_shard;
    p->bytes[SHARC_MEM_OTHER] = (int64_t)sizeof(double); /* the device scalar of the gradient norm */
    return SHARC_OK;
}

sharc_status sharc_fsdp_plan_bytes(const sharc_unit_spec *units, int nunits, const sharc_unit_schedule *schedule,
                                   const sharc_fsdp_config *cfg, int S, bool shared, sharc_fsdp_plan_summary *out) {
    if (S < 1) return sharc_error(SHARC_ERR_INVALID, "fsdp: a shard group of %d ranks", S);
    shared = shared && S > 1 && cfg->param_dtype == SHARC_DT_F32;
    /* as sharc_fsdp_init makes it (fsdp.c make_plan, after the shared windows) */
    sharc_fsdp_plan_in in = {.S = S,
                             .shard_rank = 0,
                             .max_live = schedule ? schedule->max_live : 1,
                             .params_in_place = shared || (S == 1 && cfg->param_dtype == SHARC_DT_F32),
                             .grads_in_place = S == 1,
                             .grads_shared = shared && cfg->reduce_dtype == SHARC_DT_F32};
    sharc_fsdp_plan p;
    SHARC_TRY(sharc_fsdp_plan_make(&p, units, nunits, cfg, &in));
    memset(out, 0, sizeof *out);
    for (int c = 0; c < SHARC_MEM_NCAT; c++) out->bytes[c] = p.bytes[c];
    for (int u = 0; u < nunits; u++) {
        if (sharc_unit_trainable(&units[u])) {
            out->trainable_shard += p.units[u].numel_shard;
            if (p.units[u].numel_shard > out->max_trainable_shard) out->max_trainable_shard = p.units[u].numel_shard;
        }
        if (p.units[u].numel_padded > out->max_padded) out->max_padded = p.units[u].numel_padded;
    }
    sharc_fsdp_plan_free(&p);
    return SHARC_OK;
}
