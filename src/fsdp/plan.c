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
 * process. A unit the model reads in 16-bit (note [gathered16] in
 * collectives.c) under a 16-bit param_dtype has a slot of half the floats
 * (slot_numel, rounded up): the max below is over slot sizes. So, all
 * padded, fp32:
 *   parameters  FULL_SHARD:    (max_live + prefetch depth) x max non-root unit + sum of root units
 *               SHARD_GRAD_OP: sum of all units
 *   gradients   max_live x max non-root unit + sum of root units (every unit with no_sync)
 * where for gradients (slots and shards) only trainable units count: a unit
 * whose parameters are all frozen has no gradient memory (note
 * [frozen-params] in src/fsdp/units.c).
 *
 * Note [post-forward]. fsdp.reshard_after_forward as FSDP2 defines it: false
 * keeps a unit gathered from its forward to its backward, true reshards it
 * over the whole shard group of S ranks, and an int N (1 < N <= S, N divides
 * S) reshards it over groups of N contiguous ranks of the shard group
 * (FSDP2's post-forward mesh, mesh.view(-1, N); ZeRO++ hpZ): after forward
 * rank r keeps slice r % N of the gathered unit, numel_padded / N elements in
 * param_dtype, copied from the slot with no communication, and backward's
 * gather is an all-gather of those slices inside its group of N (typically
 * the ranks of one node) instead of the shard group. The forward gather
 * still spans the shard group. The values are the same bit for bit: the
 * slices are the gathered parameters. Memory: each unit that backward
 * gathers again (not a root, its backward reads parameters, not before the
 * first trainable unit, and not the last unit in forward order, whose
 * backward follows its forward at once: the fused head) holds numel_padded / N from its forward to its
 * backward; the plan gives every such unit its own buffer at init
 * (SHARC_MEM_GATHERED), where FSDP2 allocates them in forward. The parameter
 * slots are FULL_SHARD's. With parameters in a shared window (note
 * [shared-params] in shm.c) the group reads the node's copy in place: no
 * post-forward shard and no bytes, N changes nothing there. N = S is true;
 * 1 is refused by the configuration (FSDP2 reads it as false: write false),
 * as is any N that does not divide S, with the arithmetic. */
#include "plan.h"
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void divisors_above_1(int n, char *out, size_t len) {
    out[0] = 0;
    for (int d = 2; d <= n; d++)
        if (n % d == 0) snprintf(out + strlen(out), len - strlen(out), "%s%d", out[0] ? ", " : "", d);
}

sharc_status sharc_fsdp_post_forward_size(const sharc_fsdp_config *cfg, int S, int *post) {
    int v = cfg->reshard_after_forward;
    if (v < 0) v = cfg->strategy != SHARC_SHARDING_SHARD_GRAD_OP; /* auto: by the strategy */
    if (v == 0 || v == 1) {
        *post = v ? S : 1;
        return SHARC_OK;
    }
    char d[256];
    divisors_above_1(S, d, sizeof d);
    if (S < 2)
        return sharc_error(SHARC_ERR_INVALID,
                           "fsdp.reshard_after_forward: %d ranks, but the shard group has %d rank (NO_SHARD or one "
                           "process): nothing to reshard; set it to true or false",
                           v, S);
    if (v > S)
        return sharc_error(SHARC_ERR_INVALID,
                           "fsdp.reshard_after_forward: %d ranks is more than the shard group's %d; set it to a "
                           "divisor of %d greater than 1 (%s), true or false",
                           v, S, S, d);
    if (S % v != 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "fsdp.reshard_after_forward: %d does not divide the shard group of %d ranks (%d %% %d = %d, "
                           "%d / %d = %.2f groups); set it to a divisor of %d greater than 1 (%s), true or false",
                           v, S, S, v, S % v, S, v, (double)S / v, S, d);
    *post = v;
    return SHARC_OK;
}

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
    int post = 1;
    SHARC_TRY(sharc_fsdp_post_forward_size(cfg, in->S, &post));
    p->post = post;
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
    int grad_units = 0;
    for (int u = 0; u < nunits; u++) {
        sharc_fsdp_unit_plan *t = &p->units[u];
        t->numel_shard = sharc_layout_numel_shard(units[u].numel, S);
        t->numel_padded = t->numel_shard * S;
        t->shard_lo = t->numel_shard * in->shard_rank;
        t->global_off = p->total_padded;
        /* note [gathered16] (collectives.c): kept 16-bit where the gather is 16-bit (never in place) */
        t->g16 = units[u].gathered16 && cfg->param_dtype != SHARC_DT_F32 && !in->params_in_place;
        t->slot_numel = t->g16 ? (t->numel_padded + 1) / 2 : t->numel_padded;
        p->total_padded += t->numel_padded;
        shards += t->numel_shard;
        if (!units[u].root && t->slot_numel > max_plain) max_plain = t->slot_numel;
        if (sharc_unit_trainable(&units[u])) {
            grad_shards += t->numel_shard;
            grad_units++;
            if (!units[u].root && t->numel_padded > max_plain_grad) max_plain_grad = t->numel_padded;
        }
        if (t->numel_shard > max_shard) max_shard = t->numel_shard;
        if (t->numel_padded > max_padded) max_padded = t->numel_padded;
    }
    bool reshard = cfg->reshard_after_forward >= 0 ? cfg->reshard_after_forward != 0
                                                   : cfg->strategy != SHARC_SHARDING_SHARD_GRAD_OP;
    /* note [post-forward]: the units backward gathers keep a 1/post slice */
    if (post > 1 && post < S && !in->params_in_place) {
        const sharc_unit_schedule *sch = in->schedule;
        const int64_t es = (int64_t)sharc_dtype_size(cfg->param_dtype);
        int from = nunits;
        for (int i = 0; i < nunits && from == nunits; i++)
            if (sharc_unit_trainable(&units[sch ? sch->order[i] : i])) from = i;
        /* the last unit in forward order runs its backward at once (the
         * fused head): it is never resharded between the two */
        for (int i = from; i < nunits - 1; i++) {
            int u = sch ? sch->order[i] : i;
            if (units[u].root || (sch && !sch->backward_needs_params[u])) continue;
            p->units[u].numel_post = p->units[u].numel_padded / post;
            p->units[u].post_off = p->post_bytes;
            p->post_bytes += p->units[u].numel_post * es;
        }
    }
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
                    p->param_slot_numel[k++] = p->units[u].slot_numel;
                }
        } else {
            for (int u = 0; u < nunits; u++) {
                p->param_slot_owner[k] = u;
                p->param_slot_numel[k++] = p->units[u].slot_numel;
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
            for (int i = 0; i < in->max_live + (in->overlap_reduce ? 1 : 0); i++) {
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
    /* note [shard-device]: the shards, the norm's scalars and a reduced shard's landing place on the host */
    int64_t *sb = in->offload ? p->host_bytes : p->bytes;
    /* note [offload-reduce] (collectives.c): a ring of landing slots */
    if (in->offload && grad_shards > 0) {
        p->hslots = grad_units < SHARC_FSDP_HREDUCED_SLOTS ? grad_units : SHARC_FSDP_HREDUCED_SLOTS;
        p->hreduced = max_shard * p->hslots;
    }
    sb[SHARC_MEM_PARAMS] = shards * (int64_t)sizeof(float);
    sb[SHARC_MEM_GRADS] = grad_shards * (int64_t)sizeof(float);
    p->bytes[SHARC_MEM_GATHERED] = gathered * (int64_t)sizeof(float) + p->post_bytes;
    p->bytes[SHARC_MEM_COMM] = 2 * (p->stage16_shard + p->stage16_full) + (int64_t)sizeof(float) * p->stage_shard;
    sb[SHARC_MEM_COMM] += (int64_t)sizeof(float) * p->hreduced;
    sb[SHARC_MEM_OTHER] += 2 * (int64_t)sizeof(double); /* the scalars of the gradient norm */
    return SHARC_OK;
}

sharc_status sharc_fsdp_plan_bytes(const sharc_unit_spec *units, int nunits, const sharc_unit_schedule *schedule,
                                   const sharc_fsdp_config *cfg, int S, bool shared, bool device,
                                   sharc_fsdp_plan_summary *out) {
    if (S < 1) return sharc_error(SHARC_ERR_INVALID, "fsdp: a shard group of %d ranks", S);
    shared = shared && S > 1 && cfg->param_dtype == SHARC_DT_F32;
    /* as sharc_fsdp_init makes it (fsdp.c make_plan, after the shared windows) */
    sharc_fsdp_plan_in in = {.S = S,
                             .shard_rank = 0,
                             .max_live = schedule ? schedule->max_live : 1,
                             .params_in_place =
                                 shared || (S == 1 && cfg->param_dtype == SHARC_DT_F32 && !cfg->cpu_offload),
                             .grads_in_place = S == 1 && !cfg->cpu_offload,
                             .offload = cfg->cpu_offload,
                             .grads_shared = shared && cfg->reduce_dtype == SHARC_DT_F32,
                             .overlap_reduce = device && !cfg->cpu_offload,
                             .schedule = schedule};
    sharc_fsdp_plan p;
    SHARC_TRY(sharc_fsdp_plan_make(&p, units, nunits, cfg, &in));
    memset(out, 0, sizeof *out);
    for (int c = 0; c < SHARC_MEM_NCAT; c++) out->bytes[c] = p.bytes[c], out->host_bytes[c] = p.host_bytes[c];
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
