/* params.c: sharc_params_*, the per-family parameter tables and the one walk
 * over them that builds the unit specs, the role arrays, the counts, the
 * tensor-parallel split and Hugging Face's transposed set.
 *
 * Note [param-table]. Every parameter of a family is one row of its table
 * (gpt2_rows, llama_rows; Qwen2, Qwen3, Mistral, Llama-3.x and Qwen3-MoE are
 * Llama rows under conditions): the unit it lives in, its name (Hugging
 * Face's without the family prefix: "%d" the layer, then the expert), two
 * symbolic sizes resolved from the config, its init, the condition under
 * which it exists for (config, layer), its role (the model's pointer it
 * fills, and how many adjacent rows that pointer covers), whether it is a
 * matmul weight for the FLOP count, its tensor-parallel split and whether HF
 * stores it transposed. walk() visits the rows whose condition holds in unit
 * order (embed; each layer's block, its experts' rows E times; the head)
 * and everything below is a visitor of it, so the unit specs, the
 * role -> index arrays, sharc_model_num_params, the FLOPs, the tp split and
 * the MoE unit-size check cannot disagree. The row order is the flat layout
 * of every unit (checkpoints, parity): append new rows at the end of their
 * unit's, under a condition. To add a variant: a `when` value (and its test
 * in row_on), its rows, a role if the model reads it, and a golden
 * configuration in tests/test_param_table.c. */
#include "params.h"
#include "sharc/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which layers hold experts (decoder_sparse_step, mlp_only_layers): a fact
 * of the parameter layout, so it lives beside the table that reads it. */
bool sharc_model_layer_is_moe(const sharc_model_config *c, int l) {
    if (c->num_experts <= 0) return false;
    int step = c->decoder_sparse_step > 0 ? c->decoder_sparse_step : 1;
    if ((l + 1) % step != 0) return false;
    for (const char *p = c->mlp_only_layers; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        if (v == l) return false;
        p = end;
    }
    return true;
}

typedef enum { U_EMBED, U_BLOCK, U_EXPERT, U_HEAD } row_unit; /* U_EXPERT: a block row repeated per expert */
typedef enum { D_0, D_V, D_C, D_MAXT, D_QKV, D_Q, D_KV, D_FF, D_HD, D_E, D_I } row_dim;
typedef enum { I_ZEROS, I_ONES, I_NORMAL, I_NORMAL_RES } row_init; /* RES: init_std / sqrt(2 L) */
typedef enum { W_ALWAYS, W_UNTIED, W_DENSE, W_MOE, W_QKV_BIAS, W_QK_NORM } row_when;
typedef enum { M_NO, M_YES, M_IF_TIED } row_matmul;      /* IF_TIED: the embedding is the LM head */
typedef enum { T_NONE, T_ROWS, T_COLS, T_VOCAB } row_tp; /* T_VOCAB: rows, when tp divides V */

typedef struct {
    row_unit unit;
    const char *name;
    row_dim d0, d1;
    row_init init;
    row_when when;
    sharc_param_role role;
    int fused; /* adjacent rows the role's pointer covers (1 but for the first of q, k, v / gate, up) */
    row_matmul matmul;
    row_tp tp;
    int tp_parts; /* T_ROWS: blocks of dim 0 each split (GPT-2's fused q, k, v) */
    bool hf_t;    /* stored (in, out) in HF files: GPT-2's Conv1D */
} param_row;

// clang-format off
static const param_row gpt2_rows[] = {
    {U_EMBED, "wte.weight",             D_V,    D_C,  I_NORMAL,     W_ALWAYS, SHARC_ROLE_WTE,     1, M_IF_TIED, T_VOCAB, 1, false},
    {U_EMBED, "wpe.weight",             D_MAXT, D_C,  I_NORMAL,     W_ALWAYS, SHARC_ROLE_WPE,     1, M_NO,      T_NONE,  1, false},
    {U_BLOCK, "h.%d.ln_1.weight",       D_C,    D_0,  I_ONES,       W_ALWAYS, SHARC_ROLE_LN1W,    1, M_NO,      T_NONE,  1, false},
    {U_BLOCK, "h.%d.ln_1.bias",         D_C,    D_0,  I_ZEROS,      W_ALWAYS, SHARC_ROLE_LN1B,    1, M_NO,      T_NONE,  1, false},
    {U_BLOCK, "h.%d.attn.c_attn.weight",D_QKV,  D_C,  I_NORMAL,     W_ALWAYS, SHARC_ROLE_WQKV,    1, M_YES,     T_ROWS,  3, true},
    {U_BLOCK, "h.%d.attn.c_attn.bias",  D_QKV,  D_0,  I_ZEROS,      W_ALWAYS, SHARC_ROLE_BQKV,    1, M_NO,      T_ROWS,  3, false},
    {U_BLOCK, "h.%d.attn.c_proj.weight",D_C,    D_Q,  I_NORMAL_RES, W_ALWAYS, SHARC_ROLE_WO,      1, M_YES,     T_COLS,  1, true},
    {U_BLOCK, "h.%d.attn.c_proj.bias",  D_C,    D_0,  I_ZEROS,      W_ALWAYS, SHARC_ROLE_BO,      1, M_NO,      T_NONE,  1, false},
    {U_BLOCK, "h.%d.ln_2.weight",       D_C,    D_0,  I_ONES,       W_ALWAYS, SHARC_ROLE_LN2W,    1, M_NO,      T_NONE,  1, false},
    {U_BLOCK, "h.%d.ln_2.bias",         D_C,    D_0,  I_ZEROS,      W_ALWAYS, SHARC_ROLE_LN2B,    1, M_NO,      T_NONE,  1, false},
    {U_BLOCK, "h.%d.mlp.c_fc.weight",   D_FF,   D_C,  I_NORMAL,     W_ALWAYS, SHARC_ROLE_WFC,     1, M_YES,     T_ROWS,  1, true},
    {U_BLOCK, "h.%d.mlp.c_fc.bias",     D_FF,   D_0,  I_ZEROS,      W_ALWAYS, SHARC_ROLE_BFC,     1, M_NO,      T_ROWS,  1, false},
    {U_BLOCK, "h.%d.mlp.c_proj.weight", D_C,    D_FF, I_NORMAL_RES, W_ALWAYS, SHARC_ROLE_WPROJ,   1, M_YES,     T_COLS,  1, true},
    {U_BLOCK, "h.%d.mlp.c_proj.bias",   D_C,    D_0,  I_ZEROS,      W_ALWAYS, SHARC_ROLE_BPROJ,   1, M_NO,      T_NONE,  1, false},
    {U_HEAD,  "ln_f.weight",            D_C,    D_0,  I_ONES,       W_ALWAYS, SHARC_ROLE_LNFW,    1, M_NO,      T_NONE,  1, false},
    {U_HEAD,  "ln_f.bias",              D_C,    D_0,  I_ZEROS,      W_ALWAYS, SHARC_ROLE_LNFB,    1, M_NO,      T_NONE,  1, false},
    {U_HEAD,  "lm_head.weight",         D_V,    D_C,  I_NORMAL,     W_UNTIED, SHARC_ROLE_LM_HEAD, 1, M_YES,     T_VOCAB, 1, false},
};

#define LL "model.layers.%d."
static const param_row llama_rows[] = {
    {U_EMBED,  "model.embed_tokens.weight",               D_V,  D_C,  I_NORMAL,     W_ALWAYS,   SHARC_ROLE_WTE,         1, M_IF_TIED, T_VOCAB, 1, false},
    {U_BLOCK,  LL "input_layernorm.weight",               D_C,  D_0,  I_ONES,       W_ALWAYS,   SHARC_ROLE_LN1W,        1, M_NO,      T_NONE,  1, false},
    {U_BLOCK,  LL "self_attn.q_proj.weight",              D_Q,  D_C,  I_NORMAL,     W_ALWAYS,   SHARC_ROLE_WQKV,        3, M_YES,     T_ROWS,  1, false},
    {U_BLOCK,  LL "self_attn.k_proj.weight",              D_KV, D_C,  I_NORMAL,     W_ALWAYS,   SHARC_ROLE_WK,          1, M_YES,     T_ROWS,  1, false},
    {U_BLOCK,  LL "self_attn.v_proj.weight",              D_KV, D_C,  I_NORMAL,     W_ALWAYS,   SHARC_ROLE_WV,          1, M_YES,     T_ROWS,  1, false},
    {U_BLOCK,  LL "self_attn.o_proj.weight",              D_C,  D_Q,  I_NORMAL_RES, W_ALWAYS,   SHARC_ROLE_WO,          1, M_YES,     T_COLS,  1, false},
    {U_BLOCK,  LL "post_attention_layernorm.weight",      D_C,  D_0,  I_ONES,       W_ALWAYS,   SHARC_ROLE_LN2W,        1, M_NO,      T_NONE,  1, false},
    {U_BLOCK,  LL "mlp.gate_proj.weight",                 D_FF, D_C,  I_NORMAL,     W_DENSE,    SHARC_ROLE_WFC,         2, M_YES,     T_ROWS,  1, false},
    {U_BLOCK,  LL "mlp.up_proj.weight",                   D_FF, D_C,  I_NORMAL,     W_DENSE,    SHARC_ROLE_WUP,         1, M_YES,     T_ROWS,  1, false},
    {U_BLOCK,  LL "mlp.down_proj.weight",                 D_C,  D_FF, I_NORMAL_RES, W_DENSE,    SHARC_ROLE_WPROJ,       1, M_YES,     T_COLS,  1, false},
    /* note [families]: the variants' rows follow the plain Llama's */
    {U_BLOCK,  LL "self_attn.q_proj.bias",                D_Q,  D_0,  I_ZEROS,      W_QKV_BIAS, SHARC_ROLE_BQKV,        3, M_NO,      T_ROWS,  1, false},
    {U_BLOCK,  LL "self_attn.k_proj.bias",                D_KV, D_0,  I_ZEROS,      W_QKV_BIAS, SHARC_ROLE_BK,          1, M_NO,      T_ROWS,  1, false},
    {U_BLOCK,  LL "self_attn.v_proj.bias",                D_KV, D_0,  I_ZEROS,      W_QKV_BIAS, SHARC_ROLE_BV,          1, M_NO,      T_ROWS,  1, false},
    {U_BLOCK,  LL "self_attn.q_norm.weight",              D_HD, D_0,  I_ONES,       W_QK_NORM,  SHARC_ROLE_QNW,         1, M_NO,      T_NONE,  1, false},
    {U_BLOCK,  LL "self_attn.k_norm.weight",              D_HD, D_0,  I_ONES,       W_QK_NORM,  SHARC_ROLE_KNW,         1, M_NO,      T_NONE,  1, false},
    /* note [moe]: the router, then per expert gate, up, down (their own units under note [moe-units]) */
    {U_BLOCK,  LL "mlp.gate.weight",                      D_E,  D_C,  I_NORMAL,     W_MOE,      SHARC_ROLE_ROUTER,      1, M_YES,     T_NONE,  1, false},
    {U_EXPERT, LL "mlp.experts.%d.gate_proj.weight",      D_I,  D_C,  I_NORMAL,     W_MOE,      SHARC_ROLE_EXPERT_GATE, 2, M_YES,     T_ROWS,  1, false},
    {U_EXPERT, LL "mlp.experts.%d.up_proj.weight",        D_I,  D_C,  I_NORMAL,     W_MOE,      SHARC_ROLE_EXPERT_UP,   1, M_YES,     T_ROWS,  1, false},
    {U_EXPERT, LL "mlp.experts.%d.down_proj.weight",      D_C,  D_I,  I_NORMAL_RES, W_MOE,      SHARC_ROLE_EXPERT_DOWN, 1, M_YES,     T_COLS,  1, false},
    {U_HEAD,   "model.norm.weight",                       D_C,  D_0,  I_ONES,       W_ALWAYS,   SHARC_ROLE_LNFW,        1, M_NO,      T_NONE,  1, false},
    {U_HEAD,   "lm_head.weight",                          D_V,  D_C,  I_NORMAL,     W_UNTIED,   SHARC_ROLE_LM_HEAD,     1, M_YES,     T_VOCAB, 1, false},
};
#undef LL
// clang-format on

static const param_row *family_rows(sharc_family f, int *n) {
    if (f == SHARC_FAMILY_GPT2) {
        *n = (int)(sizeof gpt2_rows / sizeof gpt2_rows[0]);
        return gpt2_rows;
    }
    *n = (int)(sizeof llama_rows / sizeof llama_rows[0]);
    return llama_rows;
}

static int64_t dim_of(const sharc_model_config *c, row_dim d) {
    int64_t hd = c->head_dim;
    switch (d) {
    case D_0: return 0;
    case D_V: return c->vocab_size;
    case D_C: return c->embed_dim;
    case D_MAXT: return c->max_seq_len;
    case D_QKV: return (c->num_heads + 2 * (int64_t)c->num_kv_heads) * hd;
    case D_Q: return c->num_heads * hd;
    case D_KV: return c->num_kv_heads * hd;
    case D_FF: return c->ff_hidden_dim;
    case D_HD: return hd;
    case D_E: return c->num_experts;
    case D_I: return c->moe_intermediate_size;
    }
    return 0;
}

/* The row exists for (config, layer is MoE). */
static bool row_on(const param_row *r, const sharc_model_config *c, bool moe) {
    switch (r->when) {
    case W_ALWAYS: return true;
    case W_UNTIED: return !c->tie_embeddings;
    case W_DENSE: return !moe;
    case W_MOE: return moe;
    case W_QKV_BIAS: return c->qkv_bias;
    case W_QK_NORM: return c->qk_norm;
    }
    return false;
}

int sharc_params_expert_unit(const sharc_model_config *c, int l, int e) {
    if (!c->experts_as_units || !sharc_model_layer_is_moe(c, l)) return -1;
    int k = 0;
    for (int j = 0; j < l; j++) k += sharc_model_layer_is_moe(c, j);
    return c->num_layers + 2 + k * c->num_experts + e;
}

int sharc_params_num_units(const sharc_model_config *c) {
    int moe_layers = 0;
    for (int l = 0; l < c->num_layers && c->experts_as_units; l++) moe_layers += sharc_model_layer_is_moe(c, l);
    return c->num_layers + 2 + moe_layers * c->num_experts;
}

/* One visited parameter: the unit it goes to, its row, layer and expert (-1: none). */
typedef void (*row_visit)(void *ctx, int unit, const param_row *r, int layer, int expert);

static void visit_unit_rows(const sharc_model_config *c, const param_row *rows, int n, row_unit which, int unit,
                            int layer, row_visit f, void *ctx) {
    bool moe = layer >= 0 && sharc_model_layer_is_moe(c, layer);
    for (int i = 0; i < n; i++) {
        const param_row *r = &rows[i];
        if (r->unit != which || !row_on(r, c, moe)) continue;
        f(ctx, unit, r, layer, -1);
    }
    if (which != U_BLOCK || !moe) return;
    for (int e = 0; e < c->num_experts; e++) { /* the experts' rows, in the block or their own units */
        int eu = sharc_params_expert_unit(c, layer, e);
        for (int i = 0; i < n; i++)
            if (rows[i].unit == U_EXPERT && row_on(&rows[i], c, moe)) f(ctx, eu >= 0 ? eu : unit, &rows[i], layer, e);
    }
}

/* Every parameter of the config in unit order (note [param-table]). */
static void walk(const sharc_model_config *c, row_visit f, void *ctx) {
    int n;
    const param_row *rows = family_rows(c->family, &n);
    visit_unit_rows(c, rows, n, U_EMBED, 0, -1, f, ctx);
    for (int l = 0; l < c->num_layers; l++) visit_unit_rows(c, rows, n, U_BLOCK, 1 + l, l, f, ctx);
    visit_unit_rows(c, rows, n, U_HEAD, c->num_layers + 1, -1, f, ctx);
}

/* ------------------------------------------------------------ the specs */

typedef struct {
    const sharc_model_config *c;
    sharc_unit_spec *units;
    sharc_unit_roles *roles;
} build_ctx;

static void build_visit(void *ctx, int unit, const param_row *r, int layer, int expert) {
    build_ctx *b = ctx;
    const sharc_model_config *c = b->c;
    sharc_unit_spec *u = &b->units[unit];
    sharc_unit_roles *ro = &b->roles[unit];
    char name[SHARC_NAME_MAX];
    snprintf(name, sizeof name, r->name, layer, expert);
    int64_t shape[2] = {dim_of(c, r->d0), dim_of(c, r->d1)};
    float std = c->init_std, std_res = c->init_std / sqrtf(2.0f * (float)c->num_layers);
    sharc_init_kind init = r->init == I_ZEROS  ? SHARC_INIT_ZEROS
                           : r->init == I_ONES ? SHARC_INIT_ONES
                                               : SHARC_INIT_NORMAL;
    float s = r->init == I_NORMAL ? std : r->init == I_NORMAL_RES ? std_res : 0.0f;
    if (ro->at[r->role] < 0) { /* the first of its role in the unit (expert 0's in a block) */
        ro->at[r->role] = (int8_t)u->nparams;
        ro->n[r->role] = (int8_t)r->fused;
    }
    sharc_unit_add_param(u, name, shape[1] > 0 ? 2 : 1, shape, init, s, shape[1] > 0);
}

sharc_status sharc_params_build(const sharc_model_config *c, sharc_unit_spec **units, sharc_unit_roles **roles) {
    int n = sharc_params_num_units(c);
    *units = calloc((size_t)n, sizeof(sharc_unit_spec));
    *roles = calloc((size_t)n, sizeof(sharc_unit_roles));
    if (!*units || !*roles) {
        free(*units);
        free(*roles);
        *units = NULL;
        *roles = NULL;
        return sharc_error(SHARC_ERR_NOMEM, "model: out of memory");
    }
    sharc_unit_spec *u = *units;
    for (int i = 0; i < n; i++) memset((*roles)[i].at, -1, sizeof(*roles)[i].at);
    snprintf(u[0].name, sizeof u[0].name, "embed");
    u[0].root = c->tie_embeddings; /* note [root-unit]: the head borrows its wte */
    for (int l = 0; l < c->num_layers; l++) {
        snprintf(u[1 + l].name, sizeof u[1 + l].name, "block.%d", l);
        for (int e = 0; e < c->num_experts; e++) {
            int eu = sharc_params_expert_unit(c, l, e);
            if (eu >= 0) snprintf(u[eu].name, sizeof u[eu].name, "expert.%d.%d", l, e);
        }
    }
    snprintf(u[c->num_layers + 1].name, sizeof u[c->num_layers + 1].name, "head");
    build_ctx b = {c, *units, *roles};
    walk(c, build_visit, &b);
    return SHARC_OK;
}

/* -------------------------------------------------------- the tp split */

typedef struct {
    const sharc_model_config *c;
    sharc_unit_spec *units;
    int *next; /* per unit: the index of the next parameter visited */
    int tp, rank;
    sharc_status st;
} split_ctx;

static void split_visit(void *ctx, int unit, const param_row *r, int layer, int expert) {
    split_ctx *s = ctx;
    int i = s->next[unit]++;
    if (s->st != SHARC_OK) return;
    bool vocab = s->tp > 1 && s->c->vocab_size % s->tp == 0; /* note [tp-vocab] */
    if (r->tp == T_ROWS || r->tp == T_COLS)
        s->st = sharc_unit_split_param(&s->units[unit], i, r->tp == T_ROWS ? 0 : 1, r->tp_parts, s->tp, s->rank);
    else if (r->tp == T_VOCAB && vocab) s->st = sharc_unit_split_param(&s->units[unit], i, 0, 1, s->tp, s->rank);
}

sharc_status sharc_params_split_tp(const sharc_model_config *c, sharc_unit_spec *units, int tp, int rank) {
    int n = sharc_params_num_units(c);
    for (int u = 0; u < n; u++) /* every parameter knows its tp rank: a replicated one's copy */
        for (int i = 0; i < units[u].nparams; i++) {
            units[u].params[i].tp = tp;
            units[u].params[i].tp_rank = rank;
        }
    int *next = calloc((size_t)n, sizeof(int));
    if (!next) return sharc_error(SHARC_ERR_NOMEM, "model: out of memory");
    split_ctx s = {c, units, next, tp, rank, SHARC_OK};
    walk(c, split_visit, &s);
    free(next);
    return s.st;
}

/* ------------------------------------------------------------ counting */

typedef struct {
    const sharc_model_config *c;
    bool matmul_active; /* count matmul rows only, an MoE layer's first K experts standing for any K */
    int64_t n;
} count_ctx;

static void count_visit(void *ctx, int unit, const param_row *r, int layer, int expert) {
    count_ctx *k = ctx;
    const sharc_model_config *c = k->c;
    if (k->matmul_active) {
        if (r->matmul == M_NO || (r->matmul == M_IF_TIED && !c->tie_embeddings)) return;
        if (expert >= c->num_experts_per_tok) return;
    }
    int64_t d1 = dim_of(c, r->d1);
    k->n += dim_of(c, r->d0) * (d1 > 0 ? d1 : 1);
}

int64_t sharc_params_count(const sharc_model_config *c, bool matmul_active) {
    count_ctx k = {c, matmul_active, 0};
    walk(c, count_visit, &k);
    return k.n;
}

void sharc_params_moe_block(const sharc_model_config *c, int *base, int *router, int *per_expert) {
    int n;
    const param_row *rows = family_rows(c->family, &n);
    *base = *router = *per_expert = 0;
    for (int i = 0; i < n; i++) {
        const param_row *r = &rows[i];
        if ((r->unit != U_BLOCK && r->unit != U_EXPERT) || !row_on(r, c, true)) continue;
        if (r->unit == U_EXPERT) ++*per_expert;
        else if (r->when == W_MOE) ++*router;
        else ++*base;
    }
}

/* ------------------------------------------------------- Hugging Face */

/* `name` is `pattern` with each "%d" a run of digits. */
static bool name_matches(const char *pattern, const char *name) {
    while (*pattern) {
        if (pattern[0] == '%' && pattern[1] == 'd') {
            if (*name < '0' || *name > '9') return false;
            while (*name >= '0' && *name <= '9') name++;
            pattern += 2;
        } else if (*pattern++ != *name++) {
            return false;
        }
    }
    return *name == 0;
}

bool sharc_model_param_hf_transposed(sharc_family family, const char *name) {
    int n;
    const param_row *rows = family_rows(family, &n);
    for (int i = 0; i < n; i++)
        if (name_matches(rows[i].name, name)) return rows[i].hf_t;
    return false;
}
