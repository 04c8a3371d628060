/* tp.c: sharc_tp_*, tensor parallelism's split of a block's parameters and
 * its all-reduce (note [tp] in tp.h). */
#include "tp.h"
#include "sharc/log.h"

#include <string.h>

/* A parameter name ending, the dimension it is split along and in how many
 * blocks dim 0 lies (note [tp-params] in sharc/units.h). */
typedef struct {
    const char *suffix;
    int dim, parts;
} tp_rule;

static const tp_rule gpt2_rules[] = {
    {".attn.c_attn.weight", 0, 3}, {".attn.c_attn.bias", 0, 3}, {".attn.c_proj.weight", 1, 1},
    {".mlp.c_fc.weight", 0, 1},    {".mlp.c_fc.bias", 0, 1},    {".mlp.c_proj.weight", 1, 1},
};

static const tp_rule llama_rules[] = {
    {".self_attn.q_proj.weight", 0, 1}, {".self_attn.k_proj.weight", 0, 1}, {".self_attn.v_proj.weight", 0, 1},
    {".self_attn.q_proj.bias", 0, 1},   {".self_attn.k_proj.bias", 0, 1},   {".self_attn.v_proj.bias", 0, 1},
    {".self_attn.o_proj.weight", 1, 1}, {".mlp.gate_proj.weight", 0, 1},    {".mlp.up_proj.weight", 0, 1},
    {".mlp.down_proj.weight", 1, 1},
};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

sharc_status sharc_tp_split_units(sharc_unit_spec *units, int nunits, sharc_family family, int tp, int rank) {
    const tp_rule *rules = family == SHARC_FAMILY_GPT2 ? gpt2_rules : llama_rules;
    int nrules = family == SHARC_FAMILY_GPT2 ? (int)(sizeof gpt2_rules / sizeof gpt2_rules[0])
                                             : (int)(sizeof llama_rules / sizeof llama_rules[0]);
    for (int u = 0; u < nunits; u++) /* every parameter knows its tp rank: a replicated one's copy */
        for (int i = 0; i < units[u].nparams; i++) {
            units[u].params[i].tp = tp;
            units[u].params[i].tp_rank = rank;
        }
    for (int u = 1; u < nunits - 1; u++)
        for (int i = 0; i < units[u].nparams; i++)
            for (int r = 0; r < nrules; r++)
                if (ends_with(units[u].params[i].name, rules[r].suffix))
                    SHARC_TRY(sharc_unit_split_param(&units[u], i, rules[r].dim, rules[r].parts, tp, rank));
    return SHARC_OK;
}

void sharc_tp_all_reduce(sharc_comm *group, float *buf, int64_t n) {
    if (!group) return;
    if (sharc_comm_all_reduce(group, buf, buf, (size_t)n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM) != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "tp: all-reduce of %lld floats over the tensor-parallel group: %s",
                    (long long)n, sharc_last_error());
}
