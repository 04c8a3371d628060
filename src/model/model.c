/* model.c: sharc_model_*, the GPT-2 and Llama decoders as one generic
 * pre-norm transformer whose family decides the norm (LayerNorm / RMSNorm),
 * positions (learned / RoPE), MLP (GELU / SwiGLU), biases and tying.
 *
 * The model owns activations, never parameters: every weight pointer comes
 * from sharc_fsdp_gather and every weight gradient goes into the buffer from
 * sharc_fsdp_grad, one unit at a time. Activations live on the model's
 * device and every kernel runs through its kernel table, on its default
 * stream (sharc/device.h, sharc/kernels.h).
 *
 * Note [unit-schedule]. The layer loops below are the schedule, and the
 * model declares it to the engine (sharc_model_schedule, sharc/units.h):
 *
 *   forward:  embed, block 0 .. block L-1, then the head, whose forward and
 *             backward run together (note [fused-head] in src/device/cpu/xent.c);
 *   backward: block L-1 .. block 0, embed.
 *
 * i.e. order = (embed, block 0, ..., block L-1, head), walked backwards in
 * backward; every unit but the embedding reads its parameters in backward
 * (the embedding's backward needs only its gradient buffer and the token
 * ids); one block is gathered at a time (max_live 1). The engine's prefetch
 * walks this order, so a model whose blocks are several units (experts)
 * declares a different order and max_live, and the engine needs no change.
 *
 * Tied embeddings (GPT-2, optional for Llama): the head borrows "wte" from the
 * embed unit, which is therefore a root unit (note [root-unit] in units.h):
 * gathered from its forward to its backward, its gradient buffer receiving
 * the head's contribution first and the embedding's last.
 *
 * Frozen parameters (note [frozen-params] in src/fsdp/units.c): their weight
 * gradient pointers are NULL, so the kernels skip those products; a unit
 * with nothing trainable gets NULL from sharc_fsdp_grad; the blocks before
 * the first trainable unit run no backward at all (released instead).
 *
 * Note [bf16-compute]. With fsdp.param_dtype bf16 on a device whose table
 * can compute in bf16 (bf16_compute), the model runs on a copy of the table
 * whose matmul, LM-head and attention slots are the *_bf16 variants
 * (use_kernels, at each entry point; attention's are the fp32 ones on a
 * device without its own, the CPU's); every other kernel and the loss stay
 * fp32, and the
 * saved product inputs are bf16 when planned so (note [bf16-acts]).
 * Otherwise the device's own table.
 *
 * Note [families]. Qwen2, Qwen3, Mistral and Llama-3.1/3.2 are the Llama
 * block with options (sharc_model_config): qkv_bias adds q/k/v_proj.bias
 * (adjacent, one (QKV) bias of the fused projection); qk_norm adds
 * q_norm/k_norm.weight (hd), an RMSNorm of every query and key head between
 * the projection and RoPE; head_dim may differ from embed_dim / num_heads
 * (o_proj is then (C, NH*hd)); rope_factor > 0 selects Llama-3's RoPE
 * scaling, whose tables are computed on the host at plan time. These
 * parameters are rows of Llama's table after the plain Llama's (note
 * [param-table] in params.c), so a plain Llama's layout stays fixed. sliding_window W > 0 limits every layer's attention to the W
 * keys i - W < j <= i (Hugging Face's sliding_window_overlay), through the
 * mask of note [packing]. The Hugging Face model_type each combination
 * exports as, and every config.json key, are in src/io/hf.c (note [hf-keys]).
 *
 * Note [packing]. sharc_model_set_positions gives each token of a
 * micro-batch its position inside its sample (packed SFT: several samples in
 * one row, positions restarting at 0 where a sample starts). A token at row
 * index t with position p belongs to the sample starting at t - p; attention
 * gets the per-query first visible key lo = max(t - p, t - W + 1) (note
 * [attention-mask] in sharc/kernels.h; W the sliding window, 0: none), over
 * whole sequences (sp T tokens under Ulysses, so each rank is given every
 * token's position). RoPE takes per-token cos/sin rows computed on the
 * device from the positions (the rope_table_pos slot: the same fp32
 * formula as the rope_table kernel, with sharc_model_rope_inv_freq's
 * frequencies copied in once per plan; a device without the slot gets them
 * from the host), and GPT-2's learned positions are gathered by position
 * with the embedding kernels (wpe[pos] added to the token embedding; the
 * backward scatters by position). Without positions (NULL) every row is one
 * sequence 0, 1, ..., and only a window (if any) narrows the mask.
 * The host never waits for this in the steady state: lo and the positions
 * are written into a slot of a ring of POS_SLOTS page-locked buffers and
 * copied in on the model's stream (after the previous micro-batch's work
 * that reads att_lo, pos_local and pk_cos / pk_sin: one stream, in order);
 * a slot is reused once the event recorded after its copies is reached:
 * polled (sharc_device_event_query, no wait, no host callback stalling the
 * stream), and waited for only when not (the host more than POS_SLOTS
 * micro-batches ahead of the device). */
#include "sharc/model.h"
#include "sharc/blas.h"
#include "sharc/clock.h"
#include "sharc/kernels.h"
#include "sharc/log.h"
#include "sharc/prof.h"
#include "moe.h"
#include "params.h"
#include "tp.h"
#include "ulysses.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of logits alive at once in the fused head: about 128 MB of them (GPT-2
 * at 1024 tokens: 2 chunks instead of one 206 MB buffer; 8 chunks of 32 MB
 * cost 20% more head time, the shorter sgemms being less efficient). */
#define HEAD_CHUNK_BYTES (128ll << 20)

/* The activations one block keeps from its forward for its backward. Without
 * activation checkpointing there is one set per block; with it, one set that
 * every block reuses, refilled by recomputing the block's forward from its
 * input (x[l], always kept) right before its backward. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
    float *qkv;                       /* (N, QKV) after RoPE; under sp (B, sp T, QKVl) head-sharded */
    float *att, *lse;                 /* (N,C), (B,NH,T); under sp lse (B, NHl, sp T) */
    float *att_h;                     /* sp only: (B, sp T, NHl hd) attention output before #2 */
    float *xmid;                      /* (N,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
    float *fc;                        /* (N, F) MLP pre-activation (NULL with a tiled MLP) */
    float *fca;                       /* (N, Fa) MLP activation (NULL with a tiled MLP) */
    float *qkraw, *qkrstd;            /* qk_norm: (N, QKV) before the head norms, (N, NH+NKV) */
    /* note [bf16-acts]: the saved products' inputs in bf16 (NULL in fp32);
     * ln1, att, ln2 then point at the shared dtmp and fca at dfca */
    uint16_t *ln1h, *atth, *ln2h, *fcah; /* (N,C), (N,AD), (N,C), (N,Fa) (fcah NULL with a tiled MLP) */
} block_acts;

/* Note [packing]: one slot of the ring sharc_model_set_positions stages a
 * micro-batch's positions in, page-locked host memory the device copies
 * from; reused once its copies ran: `ev`, recorded after them, is polled
 * (sharc_device_event_query) and waited for only when not reached. */
#define POS_SLOTS 8
typedef struct {
    int32_t *lo;     /* (B, sp T) each query's first visible key */
    int32_t *pl;     /* (B, T) this rank's tokens' positions */
    float *c, *sn;   /* (B*T, hd/2) RoPE rows, only where the device has no rope_table_pos slot */
    sharc_event *ev; /* recorded after the slot's copies (never recorded: free) */
} pos_slot;

/* note [packing]: the host waits until slot h's copies ran, if they have not */
static sharc_status pos_slot_wait(pos_slot *h) {
    bool done = true;
    SHARC_TRY(sharc_device_event_query(h->ev, &done));
    return done ? SHARC_OK : sharc_device_event_synchronize(h->ev);
}

struct sharc_model {
    sharc_model_config cfg;
    sharc_device *dev;         /* where activations live and kernels run */
    sharc_stream *s;           /* the device's default stream */
    const sharc_kernels *k;    /* the table kernels run from: kdev or k16 (note [bf16-compute]) */
    const sharc_kernels *kdev; /* the device's kernel table */
    sharc_kernels k16;         /* kdev with the bf16 matmul and head slots */
    sharc_dtype pdt;           /* the engine's param_dtype as sharc_model_set_param_dtype said (F32 until then) */
    bool a16;                  /* note [bf16-acts]: planned with bf16 activations */
    float *wsm;                /* note [bf16-acts]: one block's norms and biases widened from the bf16 gather */
    const uint16_t *w16qkv, *w16o, *w16fc, *w16proj; /* the gathered block's matrices in bf16 (the engine's) */
    uint16_t *tfcah;                                 /* bf16-acts with a tiled MLP: one chunk's tfca in bf16 */
    uint16_t *head16; /* note [bf16-head]: under tp, the head's (Vl, C) rows then lnf (N, C) in bf16 */
    float *att32;     /* bf16-acts: the attention output widened for attention's backward (tmp, dfca or own) */
    bool att32_own;   /* att32 is its own allocation */
    int nunits;
    sharc_unit_spec *units;
    int *order;                  /* (nunits) note [unit-schedule] */
    bool *backward_needs_params; /* (nunits) */
    sharc_unit_schedule schedule;
    sharc_unit_roles *roles; /* (nunits) note [param-table]: each role's parameter index */
    /* derived sizes */
    int L, C, NH, NKV, hd, QKV, AD, F, Fa, V; /* AD = NH*hd, the attention output width */
    int v0, Vl; /* note [tp-vocab] in tp.h: this rank's rows [v0, v0 + Vl) of wte and the head (Vl = V: all) */
    /* plan */
    int B, T;
    int plan_threads; /* the thread count the workspaces were sized for */
    bool ac;
    int tiles;         /* note [tiled-mlp]: the MLP runs over this many row chunks (1: untiled) */
    int64_t tile_rows; /* rows of one chunk: ceil(B*T / tiles) */
    float *tfc, *tfca; /* (tile_rows, F), (tile_rows, Fa): one chunk's MLP intermediates, every block's */
    int nsets;
    float *x;         /* (L+1, N, C) residual stream: x[l] is block l's input */
    block_acts *sets; /* nsets */
    float *lnf, *lnf_mean, *lnf_rstd;
    float *tmp, *dres, *dxmid, *dtmp, *dqkv, *dfc, *dfca; /* dfca NULL where unused (plans_dfca) */
    float *att_ws, *head_ws;
    float *head_red; /* (3 head_chunk) note [tp-vocab]: row statistics; NULL when Vl = V */
    int64_t head_chunk;
    float *rope_cos, *rope_sin; /* (T, hd/2) */
    /* note [packing]: set by sharc_model_set_positions */
    bool packed;                  /* per-token positions differ from 0..T-1 in some row */
    bool masked;                  /* att_lo is passed to attention (packed, or a window shorter than sp T) */
    int32_t *att_lo;              /* (B, sp T) device: each query's first visible key */
    int32_t *pos_local;           /* (B, T) device: this rank's tokens' positions (GPT-2's wpe rows) */
    float *pk_cos, *pk_sin;       /* (B*T, hd/2) device: per-token RoPE rows when packed */
    float *rope_inv;              /* (hd/2) device: the RoPE frequencies (sharc_model_rope_inv_freq) */
    pos_slot pslot[POS_SLOTS];    /* note [packing]: the ring the positions reach the device through */
    int pnext;                    /* the next slot of pslot to fill */
    int32_t *kv_lo;               /* (T) device: the cached path's window bounds */
    double *loss;                 /* (1) device scalar: the loss sum of the last head */
    double *sums, *hsums;         /* (4) note [loss-on-device]: a step's sums, device and pinned host */
    int32_t *batch_in, *batch_tg; /* (B*T) device: a micro-batch staged in (sharc_model_stage_batch); NULL on host */
    float *kcache, *vcache;       /* (L, T, NKV*hd) note [kv-cache]; NULL until sharc_model_kv_enable */
    int kv_len;                   /* positions the caches hold */
    /* Ulysses sequence parallelism (note [ulysses] in ulysses.h): this rank
     * holds tokens [sp_rank T, (sp_rank + 1) T) of sequences of sp T */
    int sp, sp_rank;
    sharc_comm *sp_group; /* borrowed */
    sharc_ulysses uly;    /* sp > 1 and planned */
    /* tensor parallelism (note [tp] in tp.h): this rank's part `tp_rank` of
     * `tp`; NH, NKV, QKV, AD, F and Fa above are then this rank's */
    int tp, tp_rank;
    sharc_comm *tp_group;      /* borrowed */
    sharc_tp_link tpl;         /* note [tp-device] in tp.h: how tp_group reaches the device's buffers */
    sharc_tp_link spl;         /* the same for sp_group (ulysses.c's exchanges) */
    sharc_model_timing timing; /* accumulated forward / backward seconds */
    sharc_moe *moe;            /* note [moe] in moe.c; NULL without MoE layers */
    sharc_fsdp *eng;           /* note [moe-units]: the engine of the pass running (expert units' gathers) */
};

void sharc_model_timing_get(const sharc_model *m, sharc_model_timing *out) { *out = m->timing; }
void sharc_model_timing_reset(sharc_model *m) { memset(&m->timing, 0, sizeof m->timing); }

/* ---------------------------------------------------------------- config */

const char *sharc_family_name(sharc_family f) { return f == SHARC_FAMILY_LLAMA ? "llama" : "gpt2"; }

void sharc_model_config_default(sharc_model_config *c, sharc_family family) {
    memset(c, 0, sizeof *c);
    c->family = family;
    c->num_layers = 12;
    c->embed_dim = 768;
    c->num_heads = 12;
    c->vocab_size = 50257;
    c->max_seq_len = 1024;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->init_std = 0.02f;
    c->tie_embeddings = family == SHARC_FAMILY_GPT2;
    c->bos_token_id = c->eos_token_id = -1;
    /* num_kv_heads and ff_hidden_dim: 0 = derived in validate */
}

sharc_status sharc_model_config_validate(sharc_model_config *c) {
    if (c->num_layers < 1) return sharc_error(SHARC_ERR_INVALID, "model.num_layers: %d, expected >= 1", c->num_layers);
    if (c->embed_dim < 1) return sharc_error(SHARC_ERR_INVALID, "model.embed_dim: %d, expected >= 1", c->embed_dim);
    if (c->num_heads < 1 || c->embed_dim % c->num_heads != 0)
        return sharc_error(SHARC_ERR_INVALID, "model.num_heads: %d does not divide model.embed_dim %d", c->num_heads,
                           c->embed_dim);
    if (c->num_kv_heads == 0) c->num_kv_heads = c->num_heads;
    if (c->num_kv_heads < 1 || c->num_heads % c->num_kv_heads != 0)
        return sharc_error(SHARC_ERR_INVALID, "model.num_kv_heads: %d does not divide model.num_heads %d",
                           c->num_kv_heads, c->num_heads);
    if (c->family == SHARC_FAMILY_GPT2 && c->num_kv_heads != c->num_heads)
        return sharc_error(SHARC_ERR_INVALID, "model.num_kv_heads: %d, gpt2 has num_kv_heads = num_heads (%d)",
                           c->num_kv_heads, c->num_heads);
    bool gpt2 = c->family == SHARC_FAMILY_GPT2;
    bool hd_set = c->head_dim && c->head_dim != c->embed_dim / c->num_heads;
    if (gpt2 && (hd_set || c->qkv_bias || c->qk_norm || c->sliding_window || c->rope_factor != 0.0f))
        return sharc_error(SHARC_ERR_INVALID, "model.%s: a llama-family option; model.family is gpt2",
                           hd_set              ? "head_dim"
                           : c->qkv_bias       ? "qkv_bias"
                           : c->qk_norm        ? "qk_norm"
                           : c->sliding_window ? "sliding_window"
                                               : "rope_factor");
    if (c->head_dim < 0) return sharc_error(SHARC_ERR_INVALID, "model.head_dim: %d, expected >= 0", c->head_dim);
    if (c->head_dim == 0) c->head_dim = c->embed_dim / c->num_heads;
    int hd = c->head_dim;
    if (!gpt2 && hd % 2 != 0) return sharc_error(SHARC_ERR_INVALID, "model.head_dim: %d must be even for RoPE", hd);
    if (c->sliding_window < 0)
        return sharc_error(SHARC_ERR_INVALID, "model.sliding_window: %d, expected >= 0 (0: none)", c->sliding_window);
    if (c->rope_factor != 0.0f) {
        if (!(c->rope_factor >= 1.0f))
            return sharc_error(SHARC_ERR_INVALID, "model.rope_factor: %g, expected >= 1 (0: no scaling)",
                               (double)c->rope_factor);
        if (!(c->rope_low_freq_factor > 0.0f) || !(c->rope_high_freq_factor > c->rope_low_freq_factor))
            return sharc_error(SHARC_ERR_INVALID,
                               "model.rope_low_freq_factor %g / rope_high_freq_factor %g: expected 0 < low < high",
                               (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor);
        if (c->rope_original_max_pos < 1)
            return sharc_error(SHARC_ERR_INVALID, "model.rope_original_max_pos: %d, expected >= 1",
                               c->rope_original_max_pos);
    }
    if (c->ff_hidden_dim == 0) {
        if (c->family == SHARC_FAMILY_GPT2) c->ff_hidden_dim = 4 * c->embed_dim;
        else c->ff_hidden_dim = (8 * c->embed_dim / 3 + 15) / 16 * 16; /* Llama: 2/3 of 4C, to 16 */
    }
    if (c->ff_hidden_dim < 1)
        return sharc_error(SHARC_ERR_INVALID, "model.ff_hidden_dim: %d, expected >= 1", c->ff_hidden_dim);
    if (c->vocab_size < 2) return sharc_error(SHARC_ERR_INVALID, "model.vocab_size: %d, expected >= 2", c->vocab_size);
    if (c->max_seq_len < 1)
        return sharc_error(SHARC_ERR_INVALID, "model.max_seq_len: %d, expected >= 1", c->max_seq_len);
    if (!(c->norm_eps > 0.0f))
        return sharc_error(SHARC_ERR_INVALID, "model.norm_eps: %g, expected > 0", (double)c->norm_eps);
    if (!(c->rope_theta > 0.0f))
        return sharc_error(SHARC_ERR_INVALID, "model.rope_theta: %g, expected > 0", (double)c->rope_theta);
    if (!(c->init_std >= 0.0f))
        return sharc_error(SHARC_ERR_INVALID, "model.init_std: %g, expected >= 0", (double)c->init_std);
    if (c->decoder_sparse_step == 0) c->decoder_sparse_step = 1;
    int base, router, per_expert; /* note [moe]: a block unit's size */
    sharc_params_moe_block(c, &base, &router, &per_expert);
    return sharc_moe_config_check(c, base, router, per_expert);
}

/* Note [param-table]: sums over the family's rows (src/model/params.c). */
int64_t sharc_model_num_params(const sharc_model_config *cfg) {
    sharc_model_config full = *cfg;
    if (sharc_model_config_validate(&full) != SHARC_OK) return 0;
    return sharc_params_count(&full, false);
}

double sharc_model_flops_per_token(const sharc_model_config *cfg, int T) {
    sharc_model_config full = *cfg, *c = &full;
    if (sharc_model_config_validate(c) != SHARC_OK) return 0.0;
    double n_matmul = (double)sharc_params_count(c, true); /* MoE: the router and K experts */
    return 6.0 * n_matmul + 12.0 * c->num_layers * (double)c->num_heads * c->head_dim * T;
}

/* ----------------------------------------------------------------- units */

/* Note [moe-units]: the unit of expert e of MoE layer l under
 * fsdp.wrap_policy.moe_experts, -1 otherwise. */
static int expert_unit(const sharc_model *m, int l, int e) { return sharc_params_expert_unit(&m->cfg, l, e); }

/* The unit specs and roles from the family's table (note [param-table]),
 * and the schedule. */
static sharc_status build_units(sharc_model *m) {
    const sharc_model_config *c = &m->cfg;
    SHARC_TRY(sharc_params_build(c, &m->units, &m->roles));
    m->nunits = sharc_params_num_units(c);
    int moe_layers = 0; /* note [moe-units]: E expert units per MoE layer, after the head */
    for (int l = 0; l < m->L && c->experts_as_units; l++) moe_layers += sharc_model_layer_is_moe(c, l);

    /* note [unit-schedule] */
    m->order = calloc((size_t)m->nunits, sizeof(int));
    m->backward_needs_params = calloc((size_t)m->nunits, sizeof(bool));
    SHARC_CHECK(m->order != NULL && m->backward_needs_params != NULL);
    int i = 0; /* note [moe-units]: a MoE layer's experts follow its block */
    for (int u = 0; u <= m->L + 1; u++) {
        m->order[i++] = u;
        for (int x = 0;
             moe_layers > 0 && u >= 1 && u <= m->L && sharc_model_layer_is_moe(c, u - 1) && x < c->num_experts; x++)
            m->order[i++] = expert_unit(m, u - 1, x);
    }
    SHARC_CHECK(i == m->nunits);
    for (int u = 0; u < m->nunits; u++) m->backward_needs_params[u] = u != 0;
    m->schedule = (sharc_unit_schedule){.n = m->nunits,
                                        .order = m->order,
                                        .backward_needs_params = m->backward_needs_params,
                                        .max_live = moe_layers > 0 ? 2 : 1};
    return SHARC_OK;
}

/* The derived sizes, the heads and MLP width being one tp rank's (note [tp]). */
static void set_dims(sharc_model *m, int tp) {
    const sharc_model_config *c = &m->cfg;
    m->L = c->num_layers;
    m->C = c->embed_dim;
    m->NH = c->num_heads / tp;
    m->NKV = c->num_kv_heads / tp;
    m->hd = c->head_dim;
    m->QKV = (m->NH + 2 * m->NKV) * m->hd;
    m->AD = m->NH * m->hd;
    m->Fa = c->ff_hidden_dim / tp;
    m->F = c->family == SHARC_FAMILY_LLAMA ? 2 * m->Fa : m->Fa;
    m->V = c->vocab_size;
    const bool vp = tp > 1 && m->V % tp == 0; /* note [tp-vocab] */
    m->Vl = vp ? m->V / tp : m->V;
    m->v0 = vp ? m->tp_rank * m->Vl : 0;
}

sharc_status sharc_model_init(sharc_model **out, const sharc_model_config *cfg, sharc_device *dev) {
    *out = NULL;
    sharc_model_config c = *cfg;
    SHARC_TRY(sharc_model_config_validate(&c));
    sharc_model *m = calloc(1, sizeof *m);
    if (!m) return sharc_error(SHARC_ERR_NOMEM, "model: out of memory");
    m->cfg = c;
    m->dev = dev ? dev : sharc_device_cpu();
    m->sp = 1;
    m->s = sharc_device_stream(m->dev);
    m->k = m->kdev = sharc_device_kernels(m->dev);
    m->k16 = *m->kdev;
    m->k16.matmul_forward = m->kdev->matmul_forward_bf16;
    m->k16.matmul_backward = m->kdev->matmul_backward_bf16;
    m->k16.lmhead_xent = m->kdev->lmhead_xent_bf16;
    m->k16.attention_forward = m->kdev->attention_forward_bf16;
    m->k16.attention_backward = m->kdev->attention_backward_bf16;
    m->k16.matmul_gelu_forward = NULL; /* note [gemm-gelu]: fp32 operands only; mm_gelu_fwd composes for k16 */
    m->k16.matmul_backward_dgelu = NULL;
    m->tp = 1;
    set_dims(m, 1);
    sharc_status st = build_units(m);
    if (st == SHARC_OK) st = sharc_moe_init(&m->moe, &c, m->dev);
    if (st != SHARC_OK) {
        sharc_model_free(m);
        return st;
    }
    *out = m;
    return SHARC_OK;
}

static void free_plan(sharc_model *m) {
    sharc_device_free(m->dev, m->x);
    for (int s = 0; s < m->nsets; s++) {
        block_acts *a = &m->sets[s];
        if (m->a16) { /* note [bf16-acts]: aliases of dtmp and dfca */
            a->ln1 = a->att = a->ln2 = a->fca = NULL;
            uint16_t *h[] = {a->ln1h, a->atth, a->ln2h, a->fcah};
            for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) sharc_device_free(m->dev, h[i]);
        }
        float *bufs[] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->att, a->lse,   a->att_h, a->xmid,
                         a->ln2, a->ln2_mean, a->ln2_rstd, a->fc,  a->fca, a->qkraw, a->qkrstd};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) sharc_device_free(m->dev, bufs[i]);
    }
    free(m->sets);
    m->sets = NULL;
    m->nsets = 0;
    float *bufs[] = {m->lnf,  m->lnf_mean, m->lnf_rstd, m->tmp,      m->dres,     m->dxmid, m->dtmp, m->dqkv,    m->dfc,
                     m->dfca, m->att_ws,   m->head_ws,  m->rope_cos, m->rope_sin, m->tfc,   m->tfca, m->head_red};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) sharc_device_free(m->dev, bufs[i]);
    sharc_device_free(m->dev, m->loss);
    sharc_device_free(m->dev, m->sums);
    sharc_device_host_free(m->dev, m->hsums);
    m->sums = m->hsums = NULL;
    sharc_device_free(m->dev, m->batch_in);
    sharc_device_free(m->dev, m->batch_tg);
    m->batch_in = m->batch_tg = NULL;
    sharc_device_free(m->dev, m->wsm);
    sharc_device_free(m->dev, m->tfcah);
    sharc_device_free(m->dev, m->head16);
    if (m->att32_own) sharc_device_free(m->dev, m->att32);
    m->tfcah = m->head16 = NULL;
    m->wsm = NULL;
    m->att32 = NULL;
    m->att32_own = m->a16 = false;
    for (int k = 0; k < POS_SLOTS; k++) { /* note [packing] */
        pos_slot *h = &m->pslot[k];
        if (h->ev) (void)pos_slot_wait(h); /* its copies read the slot */
        sharc_device_event_free(h->ev);
        sharc_device_host_free(m->dev, h->lo);
        sharc_device_host_free(m->dev, h->pl);
        sharc_device_host_free(m->dev, h->c);
        sharc_device_host_free(m->dev, h->sn);
        memset(h, 0, sizeof *h);
    }
    m->pnext = 0;
    sharc_device_free(m->dev, m->rope_inv);
    m->rope_inv = NULL;
    sharc_device_free(m->dev, m->pk_cos);
    sharc_device_free(m->dev, m->pk_sin);
    sharc_device_free(m->dev, m->att_lo);
    sharc_device_free(m->dev, m->pos_local);
    sharc_device_free(m->dev, m->kv_lo);
    m->pk_cos = m->pk_sin = NULL;
    m->att_lo = m->pos_local = m->kv_lo = NULL;
    m->packed = m->masked = false;
    sharc_device_free(m->dev, m->kcache);
    sharc_device_free(m->dev, m->vcache);
    m->kcache = m->vcache = NULL;
    m->kv_len = 0;
    sharc_ulysses_free(&m->uly);
    sharc_moe_unplan(m->moe);
    m->x = NULL;
    m->lnf = m->lnf_mean = m->lnf_rstd = m->tmp = m->dres = m->dxmid = m->dtmp = NULL;
    m->dqkv = m->dfc = m->dfca = m->att_ws = m->head_ws = m->rope_cos = m->rope_sin = NULL;
    m->tfc = m->tfca = m->head_red = NULL;
    m->loss = NULL;
}

void sharc_model_free(sharc_model *m) {
    if (!m) return;
    free_plan(m);
    sharc_tp_link_free(&m->tpl);
    sharc_tp_link_free(&m->spl);
    sharc_moe_free(m->moe);
    free(m->units);
    free(m->roles);
    free(m->order);
    free(m->backward_needs_params);
    free(m);
}

sharc_status sharc_model_set_sequence_parallel(sharc_model *m, int sp, int rank) {
    if (sp < 1 || rank < 0 || rank >= sp)
        return sharc_error(SHARC_ERR_INVALID, "model: sequence-parallel rank %d of %d", rank, sp);
    if (sp > 1 && (m->NH % sp != 0 || (m->NKV % sp != 0 && sp % m->NKV != 0)))
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.sp: %d does not fit model.num_heads %d and model.num_kv_heads %d (sp must divide "
                           "the heads, and divide or be a multiple of the key/value heads)",
                           sp, m->NH, m->NKV);
    free_plan(m);
    m->sp = sp;
    m->sp_rank = rank;
    return SHARC_OK;
}

sharc_status sharc_model_set_tensor_parallel(sharc_model *m, int tp, int rank) {
    const sharc_model_config *c = &m->cfg;
    if (tp < 1 || rank < 0 || rank >= tp)
        return sharc_error(SHARC_ERR_INVALID, "model: tensor-parallel rank %d of %d", rank, tp);
    if (c->num_heads % tp != 0 || c->num_kv_heads % tp != 0 || c->ff_hidden_dim % tp != 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.tp: %d does not divide model.num_heads %d, model.num_kv_heads %d and "
                           "model.ff_hidden_dim %d",
                           tp, c->num_heads, c->num_kv_heads, c->ff_hidden_dim);
    /* note [tp-sp] in tp.h: Ulysses splits this rank's heads */
    const int nhl = c->num_heads / tp, nkvl = c->num_kv_heads / tp;
    if (m->sp > 1 && (nhl % m->sp != 0 || (nkvl % m->sp != 0 && m->sp % nkvl != 0)))
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.sp: %d does not fit the %d query and %d key/value heads of a tp rank (mesh.tp %d; sp "
                           "must divide the heads, and divide or be a multiple of the key/value heads)",
                           m->sp, nhl, nkvl, tp);
    if (m->moe && c->moe_intermediate_size % tp != 0) /* note [tp-moe] in moe.c */
        return sharc_error(SHARC_ERR_INVALID, "mesh.tp: %d does not divide model.moe_intermediate_size %d", tp,
                           c->moe_intermediate_size);
    bool frozen = false;
    for (int u = 0; u < m->nunits; u++)
        for (int i = 0; i < m->units[u].nparams; i++) frozen |= m->units[u].params[i].frozen;
    if (frozen) return sharc_error(SHARC_ERR_INVALID, "model: set tensor parallelism before freezing parameters");
    free_plan(m);
    free(m->units);
    free(m->roles);
    free(m->order);
    free(m->backward_needs_params);
    m->units = NULL;
    m->roles = NULL;
    m->order = NULL;
    m->backward_needs_params = NULL;
    m->nunits = 0;
    m->tp = tp;
    m->tp_rank = rank;
    set_dims(m, 1); /* the units hold the full shapes; the split gives this rank's part */
    sharc_status st = build_units(m);
    /* note [param-table]: each row's split; wte's and the head's rows when tp divides V (note [tp-vocab]) */
    if (st == SHARC_OK) st = sharc_params_split_tp(c, m->units, tp, rank);
    if (st == SHARC_OK && tp > 1 && c->vocab_size % tp != 0 && rank == 0) {
        sharc_info("mesh.tp: %d does not divide model.vocab_size %d: the embedding and LM head stay replicated on "
                   "every tp rank (a vocabulary padded to a multiple of %d splits them)",
                   tp, c->vocab_size, tp);
    }
    set_dims(m, tp);
    sharc_moe_set_tp(m->moe, tp, rank, &m->tpl); /* note [tp-moe] in moe.c: each expert's I / tp columns */
    return st;
}

sharc_status sharc_model_set_tp_group(sharc_model *m, sharc_comm *group) {
    SHARC_CHECK(m->tp == 1 || (group && sharc_comm_size(group) == m->tp && sharc_comm_rank(group) == m->tp_rank));
    m->tp_group = m->tp > 1 ? group : NULL;
    return sharc_tp_link_init(&m->tpl, m->tp_group, m->dev);
}

sharc_status sharc_model_set_sp_group(sharc_model *m, sharc_comm *group) {
    SHARC_CHECK(m->sp == 1 || (group && sharc_comm_size(group) == m->sp && sharc_comm_rank(group) == m->sp_rank));
    m->sp_group = m->uly.group = group;
    m->uly.link = &m->spl;
    return sharc_tp_link_init(&m->spl, m->sp > 1 ? group : NULL, m->dev);
}

const sharc_model_config *sharc_model_get_config(const sharc_model *m) { return &m->cfg; }
int sharc_model_num_units(const sharc_model *m) { return m->nunits; }
const sharc_unit_spec *sharc_model_units(const sharc_model *m) { return m->units; }
const sharc_unit_schedule *sharc_model_schedule(const sharc_model *m) { return &m->schedule; }

sharc_status sharc_model_freeze(sharc_model *m, const char *prefixes, const char *trainable, int *nfrozen) {
    return sharc_units_freeze(m->units, m->nunits, prefixes, trainable, nfrozen);
}
sharc_device *sharc_model_device(const sharc_model *m) { return m->dev; }

void sharc_model_moe_stats(const sharc_model *m, double *aux_loss, int *idle_experts) {
    if (aux_loss) *aux_loss = sharc_moe_aux_loss(m->moe);
    if (idle_experts) *idle_experts = sharc_moe_idle_experts(m->moe);
}

/* ------------------------------------------------------------------ rope */

void sharc_model_rope_inv_freq(const sharc_model_config *c, float *inv_freq) {
    int hd = c->head_dim ? c->head_dim : c->embed_dim / c->num_heads, half = hd / 2;
    for (int i = 0; i < half; i++) {
        /* as the rope_table kernel and Hugging Face: fp32 throughout */
        float f = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)hd);
        if (c->rope_factor != 0.0f) { /* note [families]: Llama-3 scaling */
            float orig = (float)c->rope_original_max_pos, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
            float wavelen = 2.0f * (float)M_PI / f;
            if (wavelen > orig / lo) {
                f = f / c->rope_factor;
            } else if (!(wavelen < orig / hi)) {
                float sm = (orig / wavelen - lo) / (hi - lo);
                f = (1.0f - sm) * f / c->rope_factor + sm * f;
            }
        }
        inv_freq[i] = f;
    }
}

/* The cos / sin tables of a scaled RoPE, computed on the host (once per
 * plan) with the angle in fp32 as the rope_table kernel does. */
static sharc_status rope_table_scaled(sharc_model *m, int T, int t0) {
    int half = m->hd / 2;
    float *inv = malloc(sizeof(float) * (size_t)half), *c = malloc(sizeof(float) * (size_t)T * half),
          *sn = malloc(sizeof(float) * (size_t)T * half);
    sharc_status st = SHARC_OK;
    if (!inv || !c || !sn) st = sharc_error(SHARC_ERR_NOMEM, "model: out of memory for the RoPE tables");
    if (st == SHARC_OK) {
        sharc_model_rope_inv_freq(&m->cfg, inv);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < half; i++) {
                float a = (float)(t0 + t) * inv[i];
                c[(int64_t)t * half + i] = cosf(a);
                sn[(int64_t)t * half + i] = sinf(a);
            }
        size_t bytes = sizeof(float) * (size_t)T * half;
        st = sharc_device_copy(m->dev, m->rope_cos, c, bytes, SHARC_COPY_HOST_TO_DEVICE, m->s);
        if (st == SHARC_OK) st = sharc_device_copy(m->dev, m->rope_sin, sn, bytes, SHARC_COPY_HOST_TO_DEVICE, m->s);
        if (st == SHARC_OK) st = sharc_device_synchronize(m->s);
    }
    free(inv);
    free(c);
    free(sn);
    return st;
}

/* Note [packing]: the frequencies rope_table_pos takes, into m->rope_inv (once per plan). */
static sharc_status rope_inv_upload(sharc_model *m) {
    int half = m->hd / 2;
    float *inv = malloc(sizeof(float) * (size_t)(half > 0 ? half : 1));
    if (!inv) return sharc_error(SHARC_ERR_NOMEM, "model: out of memory for the RoPE frequencies");
    sharc_model_rope_inv_freq(&m->cfg, inv);
    sharc_status st =
        sharc_device_copy(m->dev, m->rope_inv, inv, sizeof(float) * (size_t)half, SHARC_COPY_HOST_TO_DEVICE, m->s);
    if (st == SHARC_OK) st = sharc_device_synchronize(m->s);
    free(inv);
    return st;
}

/* ------------------------------------------------------------------ plan */

static float *act(sharc_model *m, int64_t n, bool *ok) {
    float *p = sharc_device_alloc(m->dev, (size_t)n * sizeof(float), SHARC_MEM_ACTIVATIONS);
    if (!p) *ok = false;
    return p;
}

/* Note [tiled-mlp] (ROLL's apply_tiled_mlp / tiled_num_shards, DeepSpeed's
 * TiledMLP). The MLP is row-wise, so with `tiles` > 1 each block runs it over
 * chunks of ceil(B*T / tiles) rows (the flattened batch x sequence, the last
 * chunk shorter): forward keeps only the MLP's input (ln2, which the block
 * keeps anyway) and, per chunk, computes fc, the activation and the down
 * projection into its rows of the output; backward recomputes each chunk's
 * fc and activation from ln2 and runs that chunk's backward, the weight
 * gradients of every chunk accumulating (+=) into the unit's one gradient
 * buffer, reduce-scattered once after the block as always. So the
 * (B*T, F) and (B*T, Fa) intermediates of every block, and their gradients,
 * become one chunk's, shared by all blocks, for one more fc matmul and
 * activation per block in backward. Outputs and input gradients are the
 * untiled ones row for row; weight gradients are the same sums taken chunk
 * by chunk (fp32 rounding). The number of chunks may differ between ranks
 * (the gather stays per unit). */
void sharc_model_set_tiled_mlp(sharc_model *m, int tiles) { m->tiles = tiles > 1 ? tiles : 1; }

static uint16_t *act16(sharc_model *m, int64_t n, bool *ok) {
    uint16_t *p = sharc_device_alloc(m->dev, (size_t)n * sizeof(uint16_t), SHARC_MEM_ACTIVATIONS);
    if (!p) *ok = false;
    return p;
}

/* Pointers to one block's weights (or gradients) inside a unit buffer. */
typedef struct {
    float *ln1w, *ln1b, *wqkv, *bqkv, *wo, *bo, *ln2w, *ln2b, *wfc, *bfc, *wproj, *bproj;
    float *qnw, *knw; /* Qwen3's per-head norms (hd), NULL otherwise */
    int layer;
    bool is_moe;        /* note [moe]: the MLP is the layer's experts (wfc, wproj NULL) */
    sharc_moe_view moe; /* router and experts */
} block_ptrs;

/* Note [bf16-acts]. When the model computes in bf16 (note [bf16-compute])
 * and was told so before its plan (sharc_model_set_param_dtype), the
 * tensors a block keeps for backward only as a matrix product's input are
 * kept in bf16: ln1 (the qkv product's), the attention output att (o_proj's;
 * attention's backward reads it too, widened back), ln2 (the MLP's first
 * product's) and the MLP hidden fca after GELU / SwiGLU (the down
 * projection's). The products round exactly these inputs to bf16 anyway,
 * so the forward is unchanged and the weight gradients see the same
 * operands; what changes is attention's backward, whose D = rowsum(dO * O)
 * now takes the bf16-rounded O (FlashAttention's bf16 path does the same).
 * Each is computed in fp32 into a shared buffer (dtmp, free in forward and
 * in a recompute; dfca for fca), rounded once into the set's bf16 copy, and
 * the kernel table's *_b16 slots take the copy directly. Everything else
 * stays fp32: the residual stream x and xmid, the norms' statistics, qkv
 * (attention's input), the MLP pre-activation fc (GELU / SwiGLU's backward
 * reads it), lse, the final norm's output and the loss. The block units are
 * marked gathered16 (note [gathered16] in src/fsdp/collectives.c): the
 * engine gathers them in bf16 and never widens them, the products read the
 * four weight matrices straight from that gathered buffer, and the model
 * widens only the block's norms and biases, once per gather, into wsm (one
 * block's worth: forward_body and the backward loop, before a recompute).
 * The *_bf16 slots rounded each weight in every call; the values are the
 * same bits (a bf16 value widened and rounded back is itself). Not with MoE
 * layers or sequence parallelism (their kernels take fp32), nor on a device
 * without the *_b16 slots; sharc_model_activation_bytes plans exactly these
 * buffers. */
static bool plans_bf16_acts(const sharc_model *m) {
    return m->pdt == SHARC_DT_BF16 && m->kdev->bf16_compute() && m->kdev->matmul_forward_b16 && m->sp == 1 && !m->moe;
}

/* note [param-table]: the roles a block's pointers are and the block_ptrs
 * fields they fill (absent roles stay NULL); `matrix` marks the four
 * products' weights, which bf16 compute reads in bf16 (note [bf16-acts]),
 * the others being the norms and biases it widens to fp32 (wsm). */
static const struct {
    sharc_param_role role;
    size_t field;
    bool matrix;
} block_roles[] = {
    {SHARC_ROLE_LN1W, offsetof(block_ptrs, ln1w), false},  {SHARC_ROLE_LN1B, offsetof(block_ptrs, ln1b), false},
    {SHARC_ROLE_WQKV, offsetof(block_ptrs, wqkv), true},   {SHARC_ROLE_BQKV, offsetof(block_ptrs, bqkv), false},
    {SHARC_ROLE_WO, offsetof(block_ptrs, wo), true},       {SHARC_ROLE_BO, offsetof(block_ptrs, bo), false},
    {SHARC_ROLE_LN2W, offsetof(block_ptrs, ln2w), false},  {SHARC_ROLE_LN2B, offsetof(block_ptrs, ln2b), false},
    {SHARC_ROLE_WFC, offsetof(block_ptrs, wfc), true},     {SHARC_ROLE_BFC, offsetof(block_ptrs, bfc), false},
    {SHARC_ROLE_WPROJ, offsetof(block_ptrs, wproj), true}, {SHARC_ROLE_BPROJ, offsetof(block_ptrs, bproj), false},
    {SHARC_ROLE_QNW, offsetof(block_ptrs, qnw), false},    {SHARC_ROLE_KNW, offsetof(block_ptrs, knw), false},
};
#define NBLOCK_ROLES (sizeof block_roles / sizeof block_roles[0])

/* Elements of role r in unit u's buffer (the adjacent parameters it covers), 0 when absent. */
static int64_t role_numel(const sharc_model *m, int u, sharc_param_role r) {
    int i = m->roles[u].at[r];
    int64_t n = 0;
    for (int k = 0; i >= 0 && k < m->roles[u].n[r]; k++) n += m->units[u].params[i + k].numel_local;
    return n;
}

/* wsm's elements: the most any block's norms and biases take. */
static int64_t block_small_numel(const sharc_model *m) {
    int64_t mx = 0;
    for (int l = 0; l < m->L; l++) {
        int64_t n = 0;
        for (size_t i = 0; i < NBLOCK_ROLES; i++)
            if (!block_roles[i].matrix) n += role_numel(m, 1 + l, block_roles[i].role);
        mx = n > mx ? n : mx;
    }
    return mx;
}

/* Note [gathered16]: the engine keeps the blocks' gathered parameters in
 * bf16 exactly when the model plans bf16 activations. */
static void mark_gathered16(sharc_model *m) {
    bool a16 = plans_bf16_acts(m);
    for (int l = 0; l < m->L; l++) m->units[1 + l].gathered16 = a16;
}

/* att32's own elements: none when tmp (N, C) or dfca (R, Fa) holds (N, AD). */
static int64_t att32_own_numel(const sharc_model *m, int64_t N, int64_t R) {
    return m->AD <= m->C || R * m->Fa >= N * m->AD ? 0 : N * m->AD;
}

/* dfca (R, Fa), the MLP hidden's gradient: SwiGLU's backward input (the
 * Llama family), and under bf16 activations the shared fp32 fca of an
 * untiled MLP and maybe att32 (note [bf16-acts]). GPT-2 in fp32 activations
 * never touches it: the fused DGELU backward writes dfc from dres directly
 * (note [gemm-gelu]; its fallback runs gelu's backward in place on dfc). */
static bool plans_dfca(const sharc_model *m, bool a16, int64_t N, int64_t R) {
    if (m->cfg.family == SHARC_FAMILY_LLAMA) return true;
    return a16 && (R == N || (m->AD > m->C && att32_own_numel(m, N, R) == 0));
}

void sharc_model_set_param_dtype(sharc_model *m, sharc_dtype dt) {
    m->pdt = dt;
    mark_gathered16(m);
}

/* Rows of MLP intermediates alive at once for N rows (N when untiled). */
static int64_t mlp_rows(const sharc_model *m, int64_t N) {
    int64_t t = m->tiles > 1 ? m->tiles : 1;
    return t > 1 ? (N + t - 1) / t : N;
}

/* What sharc_model_plan below allocates (SHARC_MEM_ACTIVATIONS), buffer for
 * buffer: the planner's activations (tests/test_model.c holds the two equal). */
int64_t sharc_model_activation_bytes(const sharc_model *m, int B, int T, bool activation_checkpointing) {
    int64_t N = (int64_t)B * T, C = m->C, f = 0;
    int64_t sets = activation_checkpointing ? 1 : m->L;
    int64_t R = mlp_rows(m, N); /* note [tiled-mlp]: rows of MLP intermediates alive */
    bool tiled = R < N;
    const bool a16 = plans_bf16_acts(m);                  /* note [bf16-acts] */
    int64_t h = 0;                                        /* bf16 elements */
    f += (int64_t)(m->L + 1) * N * C;                     /* x */
    const int64_t AD = m->AD;                             /* attention width NH hd */
    f += sets * (N * C + 4 * N + (int64_t)B * m->NH * T); /* xmid, statistics, lse */
    if (m->sp == 1) f += sets * N * m->QKV;               /* qkv */
    else { /* note [ulysses]: qkv and out head-sharded at sp T, its exchange buffers */
        f += sets * sharc_ulysses_set_numel(m->sp, B, T, m->NH, m->NKV, m->hd);
        f += sharc_ulysses_buffers_numel(m->sp, B, T, m->NH, m->NKV, m->hd);
    }
    if (!a16) f += sets * (2 * N * C + N * AD);                          /* ln1, ln2, att */
    else h += sets * (2 * N * C + N * AD);                               /* ln1h, ln2h, atth */
    if (a16) f += block_small_numel(m);                                  /* wsm */
    if (m->cfg.qk_norm) f += sets * (N * m->QKV + N * (m->NH + m->NKV)); /* qkraw, qkrstd */
    if (!tiled) f += sets * (N * m->F + (a16 ? 0 : N * m->Fa));          /* fc, fca per set */
    else f += R * m->F + R * m->Fa;                                      /* tfc, tfca */
    if (a16) h += tiled ? R * m->Fa : sets * N * m->Fa;                  /* tfcah or fcah */
    if (a16) f += att32_own_numel(m, N, R);
    if (a16 && m->Vl < m->V) h += ((int64_t)m->Vl + N) * C;         /* head16 (note [bf16-head]) */
    f += 2 * N + N * C;                                             /* lnf, mean, rstd */
    f += 3 * N * C + N * (AD > C ? AD : C) + N * m->QKV + R * m->F; /* tmp, dres, dxmid, dtmp, dqkv, dfc */
    if (plans_dfca(m, a16, N, R)) f += R * m->Fa;                   /* dfca */
    f += m->k->attention_workspace(T * m->sp);                      /* whole sequences under sp */
    int64_t chunk = HEAD_CHUNK_BYTES / ((int64_t)m->Vl * (int64_t)sizeof(float));
    if (chunk < 16) chunk = 16;
    if (chunk > N) chunk = N;
    f += chunk * m->Vl;                                    /* head_ws: this rank's columns (note [tp-vocab]) */
    if (m->Vl < m->V) f += 3 * chunk;                      /* head_red */
    f += 2 * (int64_t)T * (m->hd / 2 > 0 ? m->hd / 2 : 1); /* rope tables */
    f += 2 * N * (m->hd / 2 > 0 ? m->hd / 2 : 1);          /* note [packing]: per-token rope rows */
    f += m->hd / 2 > 0 ? m->hd / 2 : 1;                    /* rope_inv */
    f += (int64_t)B * T * m->sp + N;                       /* att_lo, pos_local (int32) */
    if (!sharc_device_is_host(m->dev)) f += sharc_model_device_batch_bytes(B, T) / (int64_t)sizeof(float);
    return f * (int64_t)sizeof(float) + h * (int64_t)sizeof(uint16_t) + (int64_t)sizeof(double) +
           sharc_moe_activation_bytes(m->moe, N, (int)sets); /* + the loss scalar, the experts' (note [moe]) */
}

/* note [device-batch]: batch_in and batch_tg, (B T) int32 each */
int64_t sharc_model_device_batch_bytes(int B, int T) { return 2 * (int64_t)B * T * (int64_t)sizeof(int32_t); }

sharc_status sharc_model_plan(sharc_model *m, int B, int T, bool activation_checkpointing) {
    if (B < 1 || T < 1) return sharc_error(SHARC_ERR_INVALID, "model: batch %d x %d tokens, expected >= 1", B, T);
    if (m->cfg.family == SHARC_FAMILY_GPT2 && T > m->cfg.max_seq_len)
        return sharc_error(SHARC_ERR_INVALID, "train.seq_len: %d exceeds model.max_seq_len %d (the position table)", T,
                           m->cfg.max_seq_len);
    free_plan(m);
    m->B = B;
    m->T = T;
    m->a16 = plans_bf16_acts(m); /* note [bf16-acts] */
    mark_gathered16(m);
    if (m->sp > 1) {
        SHARC_TRY(sharc_ulysses_init(&m->uly, m->dev, m->sp, m->sp_rank, B, T, m->NH, m->NKV, m->hd));
        m->uly.group = m->sp_group;
        m->uly.link = &m->spl;
    }
    m->ac = activation_checkpointing;
    m->plan_threads = sharc_threads_get();
    int64_t N = (int64_t)B * T, C = m->C;
    bool ok = true;
    m->tile_rows = mlp_rows(m, N); /* note [tiled-mlp] */
    const bool tiled = m->tile_rows < N;
    m->x = act(m, (int64_t)(m->L + 1) * N * C, &ok);
    m->nsets = activation_checkpointing ? 1 : m->L;
    m->sets = calloc((size_t)m->nsets, sizeof(block_acts));
    if (!m->sets) return sharc_error(SHARC_ERR_NOMEM, "model: out of memory");
    for (int s = 0; s < m->nsets; s++) {
        block_acts *a = &m->sets[s];
        if (m->a16) { /* note [bf16-acts]: the fp32 ln1, att, ln2, fca are shared buffers, aliased below */
            a->ln1h = act16(m, N * C, &ok);
            a->atth = act16(m, N * m->AD, &ok);
            a->ln2h = act16(m, N * C, &ok);
            if (!tiled) a->fcah = act16(m, N * m->Fa, &ok);
        } else {
            a->ln1 = act(m, N * C, &ok);
            a->att = act(m, N * m->AD, &ok);
            a->ln2 = act(m, N * C, &ok);
            if (!tiled) a->fca = act(m, N * m->Fa, &ok);
        }
        a->ln1_mean = act(m, N, &ok);
        a->ln1_rstd = act(m, N, &ok);
        if (m->sp > 1) {
            a->qkv = act(m, sharc_ulysses_qkv_numel(&m->uly), &ok);
            a->att_h = act(m, sharc_ulysses_att_numel(&m->uly), &ok);
        } else {
            a->qkv = act(m, N * m->QKV, &ok);
        }
        a->lse = act(m, (int64_t)B * m->NH * T, &ok); /* = B NHl (sp T) under sp */
        a->xmid = act(m, N * C, &ok);
        a->ln2_mean = act(m, N, &ok);
        a->ln2_rstd = act(m, N, &ok);
        if (!tiled) a->fc = act(m, N * m->F, &ok);
        if (m->cfg.qk_norm) {
            a->qkraw = act(m, N * m->QKV, &ok);
            a->qkrstd = act(m, N * (m->NH + m->NKV), &ok);
        }
    }
    if (tiled) {
        m->tfc = act(m, m->tile_rows * m->F, &ok);
        m->tfca = act(m, m->tile_rows * m->Fa, &ok);
    }
    m->lnf = act(m, N * C, &ok);
    m->lnf_mean = act(m, N, &ok);
    m->lnf_rstd = act(m, N, &ok);
    m->tmp = act(m, N * C, &ok);
    m->dres = act(m, N * C, &ok);
    m->dxmid = act(m, N * C, &ok);
    m->dtmp = act(m, N * (m->AD > C ? m->AD : C), &ok);
    m->dqkv = act(m, N * m->QKV, &ok);
    m->dfc = act(m, m->tile_rows * m->F, &ok);
    if (plans_dfca(m, m->a16, N, m->tile_rows)) m->dfca = act(m, m->tile_rows * m->Fa, &ok);
    m->att_ws = act(m, m->k->attention_workspace(T * m->sp), &ok);
    if (m->a16) { /* note [bf16-acts] */
        for (int s = 0; s < m->nsets; s++) {
            block_acts *a = &m->sets[s];
            a->ln1 = a->att = a->ln2 = m->dtmp;
            if (!tiled) a->fca = m->dfca;
        }
        m->wsm = act(m, block_small_numel(m), &ok);
        if (tiled) m->tfcah = act16(m, m->tile_rows * m->Fa, &ok);
        m->att32_own = att32_own_numel(m, N, m->tile_rows) > 0;
        m->att32 = m->att32_own ? act(m, N * m->AD, &ok) : m->AD <= C ? m->tmp : m->dfca;
        if (m->Vl < m->V) m->head16 = act16(m, ((int64_t)m->Vl + N) * C, &ok); /* note [bf16-head] */
    }
    int64_t chunk = HEAD_CHUNK_BYTES / ((int64_t)m->Vl * (int64_t)sizeof(float));
    if (chunk < 16) chunk = 16;
    if (chunk > N) chunk = N;
    m->head_chunk = chunk;
    m->head_ws = act(m, chunk * m->Vl, &ok);
    if (m->Vl < m->V) m->head_red = act(m, 3 * chunk, &ok);
    m->rope_cos = act(m, (int64_t)T * (m->hd / 2 > 0 ? m->hd / 2 : 1), &ok);
    m->rope_sin = act(m, (int64_t)T * (m->hd / 2 > 0 ? m->hd / 2 : 1), &ok);
    m->pk_cos = act(m, N * (m->hd / 2 > 0 ? m->hd / 2 : 1), &ok);
    m->pk_sin = act(m, N * (m->hd / 2 > 0 ? m->hd / 2 : 1), &ok);
    m->att_lo = (int32_t *)act(m, (int64_t)B * T * m->sp, &ok);
    m->pos_local = (int32_t *)act(m, N, &ok);
    m->rope_inv = act(m, m->hd / 2 > 0 ? m->hd / 2 : 1, &ok);
    for (int k = 0; ok && k < POS_SLOTS; k++) { /* note [packing] */
        pos_slot *h = &m->pslot[k];
        size_t rows = sizeof(float) * (size_t)N * (m->hd / 2 > 0 ? m->hd / 2 : 1);
        bool host_rope = m->cfg.family == SHARC_FAMILY_LLAMA && !m->kdev->rope_table_pos;
        h->lo = sharc_device_host_alloc(m->dev, sizeof(int32_t) * (size_t)B * T * m->sp, SHARC_MEM_OTHER);
        h->pl = sharc_device_host_alloc(m->dev, sizeof(int32_t) * (size_t)N, SHARC_MEM_OTHER);
        if (host_rope) {
            h->c = sharc_device_host_alloc(m->dev, rows, SHARC_MEM_OTHER);
            h->sn = sharc_device_host_alloc(m->dev, rows, SHARC_MEM_OTHER);
        }
        ok = h->lo && h->pl && (!host_rope || (h->c && h->sn)) && sharc_device_event_new(m->dev, &h->ev) == SHARC_OK;
    }
    m->loss = sharc_device_alloc(m->dev, sizeof(double), SHARC_MEM_ACTIVATIONS);
    /* note [loss-on-device]: not activations (not in the plan), like the engine's norm scalars */
    m->sums = sharc_device_alloc(m->dev, SHARC_MODEL_SUMS * sizeof(double), SHARC_MEM_OTHER);
    m->hsums = sharc_device_host_alloc(m->dev, SHARC_MODEL_SUMS * sizeof(double), SHARC_MEM_OTHER);
    ok = ok && m->sums && m->hsums;
    if (!sharc_device_is_host(m->dev)) { /* note [device-batch] */
        m->batch_in = (int32_t *)act(m, N, &ok);
        m->batch_tg = (int32_t *)act(m, N, &ok);
    }
    if (ok && m->loss && sharc_moe_plan(m->moe, N, m->nsets) != SHARC_OK) ok = false;
    if (!ok || !m->loss) {
        free_plan(m);
        return sharc_error(SHARC_ERR_NOMEM,
                           "model: cannot allocate activations for batch %d x %d tokens; lower "
                           "train.batch_size or set fsdp.activation_checkpointing: true",
                           B, T);
    }
    if (m->cfg.family == SHARC_FAMILY_LLAMA && m->kdev->rope_table_pos) { /* note [packing] */
        sharc_status st = rope_inv_upload(m);
        if (st != SHARC_OK) {
            free_plan(m);
            return st;
        }
    }
    if (m->cfg.family == SHARC_FAMILY_LLAMA) {
        if (m->cfg.rope_factor == 0.0f) {
            m->k->rope_table(m->s, m->rope_cos, m->rope_sin, T, m->hd, m->cfg.rope_theta, m->sp_rank * T);
        } else {
            sharc_status st = rope_table_scaled(m, T, m->sp_rank * T);
            if (st != SHARC_OK) {
                free_plan(m);
                return st;
            }
        }
    }
    sharc_status st = sharc_model_set_positions(m, NULL);
    if (st != SHARC_OK) free_plan(m);
    return st;
}

/* note [packing] */
sharc_status sharc_model_set_positions(sharc_model *m, const int32_t *pos) {
    if (!m->x) return sharc_error(SHARC_ERR_INVALID, "model: sharc_model_set_positions before sharc_model_plan");
    const int B = m->B, T = m->T, Tf = m->sp * T, half = m->hd / 2 > 0 ? m->hd / 2 : 1, W = m->cfg.sliding_window;
    const int64_t N = (int64_t)B * T;
    bool packed = false;
    if (pos)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tf; t++) {
                int p = pos[(int64_t)b * Tf + t], prev = t ? pos[(int64_t)b * Tf + t - 1] : -1;
                if (p != 0 && p != prev + 1)
                    return sharc_error(SHARC_ERR_INVALID,
                                       "model: position %d of token %d of row %d: expected 0 (a sample starts) or %d",
                                       p, t, b, prev + 1);
                packed |= p != t;
            }
    const bool masked = packed || (W > 0 && W < Tf);
    m->packed = packed;
    m->masked = masked;
    if (!masked) return SHARC_OK; /* nothing to copy: att_lo and the per-token rows go unread */
    pos_slot *h = &m->pslot[m->pnext];
    m->pnext = (m->pnext + 1) % POS_SLOTS;
    SHARC_TRY(pos_slot_wait(h)); /* its copies may still read it */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tf; t++) {
            int start = pos ? t - pos[(int64_t)b * Tf + t] : 0, win = W > 0 ? t - W + 1 : 0;
            h->lo[(int64_t)b * Tf + t] = start > win ? start : win;
        }
    sharc_status st =
        sharc_device_copy(m->dev, m->att_lo, h->lo, sizeof(int32_t) * (size_t)B * Tf, SHARC_COPY_HOST_TO_DEVICE, m->s);
    if (st == SHARC_OK && packed) {
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) h->pl[(int64_t)b * T + t] = pos[(int64_t)b * Tf + (int64_t)m->sp_rank * T + t];
        st = sharc_device_copy(m->dev, m->pos_local, h->pl, sizeof(int32_t) * (size_t)N, SHARC_COPY_HOST_TO_DEVICE,
                               m->s);
        if (st == SHARC_OK && m->cfg.family == SHARC_FAMILY_LLAMA) {
            if (m->kdev->rope_table_pos) {
                m->kdev->rope_table_pos(m->s, m->pk_cos, m->pk_sin, m->pos_local, m->rope_inv, N, m->hd / 2);
            } else { /* the host computes the rows (the same expression as the CPU's slot) */
                float *inv = malloc(sizeof(float) * (size_t)half);
                if (!inv) st = sharc_error(SHARC_ERR_NOMEM, "model: out of memory for the RoPE frequencies");
                if (inv) {
                    sharc_model_rope_inv_freq(&m->cfg, inv);
                    for (int64_t r = 0; r < N; r++)
                        for (int i = 0; i < m->hd / 2; i++) {
                            float a = (float)h->pl[r] * inv[i];
                            h->c[r * half + i] = cosf(a);
                            h->sn[r * half + i] = sinf(a);
                        }
                    free(inv);
                    size_t bytes = sizeof(float) * (size_t)N * half;
                    st = sharc_device_copy(m->dev, m->pk_cos, h->c, bytes, SHARC_COPY_HOST_TO_DEVICE, m->s);
                    if (st == SHARC_OK)
                        st = sharc_device_copy(m->dev, m->pk_sin, h->sn, bytes, SHARC_COPY_HOST_TO_DEVICE, m->s);
                }
            }
        }
    }
    if (st == SHARC_OK) st = sharc_device_event_record(h->ev, m->s);
    if (st != SHARC_OK) { /* the slot's state is unknown: wait for the stream before it is reused (a record that
                             failed leaves the event at its last record, reached before this use) */
        (void)sharc_device_synchronize(m->s);
        m->packed = m->masked = false;
    }
    return st;
}

/* ---------------------------------------------------------------- blocks */


/* For gradients (`grads`), a frozen parameter's pointer is NULL (and so is
 * every pointer when base is NULL, a unit with nothing trainable); a fused
 * matrix (Llama's q, k, v or gate, up) has one if any of its parts trains,
 * the frozen parts' gradients then being computed but never used (note
 * [frozen-params]). */
static block_ptrs block_view(const sharc_model *m, int l, float *base, bool grads) {
    const sharc_unit_spec *u = &m->units[1 + l];
    const sharc_unit_roles *r = &m->roles[1 + l];
    block_ptrs b = {.layer = l, .is_moe = sharc_model_layer_is_moe(&m->cfg, l)};
    for (size_t i = 0; i < NBLOCK_ROLES; i++)
        *(float **)((char *)&b + block_roles[i].field) = sharc_params_at(u, r, block_roles[i].role, base, grads);
    if (b.is_moe) b.moe = sharc_moe_view_of(m->moe, u, r, base, grads);
    if (!grads && m->tp_rank > 0) b.bo = b.bproj = NULL; /* note [tp]: added once, by tp rank 0 */
    return b;
}

/* Note [param-table]: role r of unit u inside the unit's gathered buffer p
 * (NULL when absent), and inside its gradient buffer g (NULL also when g is
 * NULL or every parameter of the role is frozen). */
static const float *weight_at(const sharc_model *m, int u, sharc_param_role r, const float *p) {
    return sharc_params_at(&m->units[u], &m->roles[u], r, (float *)p, false);
}
static float *grad_at(const sharc_model *m, int u, sharc_param_role r, float *g) {
    return sharc_params_at(&m->units[u], &m->roles[u], r, g, true);
}

/* Note [prof-work]: the work the helpers below credit to the region they run
 * in when profiling (sharc_prof_count, note [prof] in docs/ARCHITECTURE.md):
 * a product's 2 M N K FLOPs per output (dx, dw), the bytes of its operands
 * at their storage width read once and its results written once (dw
 * accumulates: read and written); elementwise kernels their bytes only. */
#define PROF_COUNT(flops, bytes)                                                                                       \
    do {                                                                                                               \
        if (sharc_prof_enabled()) sharc_prof_count((double)(flops), (double)(bytes));                                  \
    } while (0)

static void norm_fwd(const sharc_model *m, float *y, float *mean, float *rstd, const float *x, const float *w,
                     const float *b, int64_t N) {
    PROF_COUNT(0, 4.0 * 2 * N * m->C);
    if (m->cfg.family == SHARC_FAMILY_GPT2)
        m->k->layernorm_forward(m->s, y, mean, rstd, x, w, b, N, m->C, m->cfg.norm_eps);
    else m->k->rmsnorm_forward(m->s, y, rstd, x, w, N, m->C, m->cfg.norm_eps);
}

/* Note [add-norm]: sum = x + r and the norm of sum in one pass (one read
 * of x and r, sum and y written; the bits of add then norm_fwd) */
static void add_norm_fwd(const sharc_model *m, float *sum, float *y, float *mean, float *rstd, const float *x,
                         const float *r, const float *w, const float *b, int64_t N) {
    PROF_COUNT(0, 4.0 * 4 * N * m->C);
    if (m->cfg.family == SHARC_FAMILY_GPT2)
        m->k->add_layernorm_forward(m->s, sum, y, mean, rstd, x, r, w, b, N, m->C, m->cfg.norm_eps);
    else m->k->add_rmsnorm_forward(m->s, sum, y, rstd, x, r, w, N, m->C, m->cfg.norm_eps);
}

static void norm_bwd(const sharc_model *m, float *dx, float *dw, float *db, const float *dy, const float *dres,
                     const float *x, const float *w, const float *mean, const float *rstd, int64_t N) {
    PROF_COUNT(0, 4.0 * (dres ? 4 : 3) * N * m->C);
    if (m->cfg.family == SHARC_FAMILY_GPT2)
        m->k->layernorm_backward(m->s, dx, dw, db, dy, dres, x, w, mean, rstd, N, m->C);
    else m->k->rmsnorm_backward(m->s, dx, dw, dy, dres, x, w, rstd, N, m->C);
}

/* Note [bf16-acts]: dst = src rounded to bf16 when the model keeps bf16
 * activations (dst is NULL otherwise). */
static void keep16(const sharc_model *m, uint16_t *dst, const float *src, int64_t n) {
    if (!dst) return;
    PROF_COUNT(0, 6.0 * n);
    m->k->cast(m->s, dst, SHARC_DT_BF16, src, SHARC_DT_F32, n);
}

static const uint16_t *rows16(const uint16_t *p, int64_t off) { return p ? p + off : NULL; }

/* y = x w^T + b: from the bf16 copies xh and wh when xh is given (note
 * [bf16-acts]), else from x and w through the model's table. */
static void mm_fwd(const sharc_model *m, float *y, const float *x, const uint16_t *xh, const float *w,
                   const uint16_t *wh, const float *b, int64_t n, int ic, int oc) {
    const double e = xh ? 2.0 : 4.0; /* operand bytes */
    PROF_COUNT(2.0 * n * ic * oc, e * ((double)n * ic + (double)ic * oc) + 4.0 * n * oc);
    if (xh) m->kdev->matmul_forward_b16(m->s, y, xh, wh, b, n, ic, oc);
    else m->k->matmul_forward(m->s, y, x, w, b, n, ic, oc);
}

static void mm_bwd_count(bool b16, bool dx, bool dw, int64_t n, int ic, int oc) {
    const double e = b16 ? 2.0 : 4.0;
    PROF_COUNT(2.0 * n * ic * oc * (dx + dw), 4.0 * n * oc + e * ((double)n * ic + (double)ic * oc) +
                                                  (dx ? 4.0 * n * ic : 0) + (dw ? 8.0 * ic * oc : 0));
}

static void mm_bwd(const sharc_model *m, float *dx, float *dw, float *db, const float *dy, const float *x,
                   const uint16_t *xh, const float *w, const uint16_t *wh, int64_t n, int ic, int oc) {
    mm_bwd_count(xh != NULL, dx != NULL, dw != NULL, n, ic, oc);
    if (xh) m->kdev->matmul_backward_b16(m->s, dx, dw, db, dy, xh, wh, n, ic, oc);
    else m->k->matmul_backward(m->s, dx, dw, db, dy, x, w, n, ic, oc);
}

/* Note [gemm-gelu] (src/device/cuda/cuda.cu): GPT-2's fc product and GELU
 * in one call, pre = x w^T + b kept for backward, y = gelu(pre) and its bf16
 * copy yh (NULL unless bf16 activations): the table's fused slot (the CPU's
 * is the unfused composition, the same bits as before), or with bf16
 * operands rounded from fp32 (k16) the unfused kernels. The region counts
 * the product's FLOPs and GELU's bytes only (profile.sh sums the matmul
 * regions' FLOPs to 6 x weights x tokens). */
static void mm_gelu_fwd(const sharc_model *m, float *pre, float *y, uint16_t *yh, const float *x, const uint16_t *xh,
                        const float *w, const uint16_t *wh, const float *b, int64_t n, int ic, int oc) {
    if (xh) {
        PROF_COUNT(2.0 * n * ic * oc, 2.0 * ((double)n * ic + (double)ic * oc) + 10.0 * n * oc);
        m->kdev->matmul_gelu_forward_b16(m->s, pre, y, yh, xh, wh, b, n, ic, oc);
    } else if (m->k->matmul_gelu_forward) {
        PROF_COUNT(2.0 * n * ic * oc, 4.0 * ((double)n * ic + (double)ic * oc) + 8.0 * n * oc);
        m->k->matmul_gelu_forward(m->s, pre, y, x, w, b, n, ic, oc);
    } else {
        mm_fwd(m, pre, x, NULL, w, NULL, b, n, ic, oc);
        PROF_COUNT(0, 8.0 * n * oc);
        m->k->gelu_forward(m->s, y, pre, n * oc);
        keep16(m, yh, y, n * oc);
    }
}

/* the product that reads gelu(pre): dx = (dy w) * gelu'(pre), dw, db as mm_bwd */
static void mm_bwd_dgelu(const sharc_model *m, float *dx, float *dw, float *db, const float *dy, const float *x,
                         const uint16_t *xh, const float *w, const uint16_t *wh, const float *pre, int64_t n, int ic,
                         int oc) {
    PROF_COUNT(0, 12.0 * n * ic); /* gelu''s bytes (its FLOPs are not the region's matmul work) */
    if (xh || m->k->matmul_backward_dgelu) mm_bwd_count(xh != NULL, dx != NULL, dw != NULL, n, ic, oc);
    if (xh) {
        m->kdev->matmul_backward_dgelu_b16(m->s, dx, dw, db, dy, xh, wh, pre, n, ic, oc);
    } else if (m->k->matmul_backward_dgelu) {
        m->k->matmul_backward_dgelu(m->s, dx, dw, db, dy, x, w, pre, n, ic, oc);
    } else {
        mm_bwd(m, dx, dw, db, dy, x, NULL, w, NULL, n, ic, oc);
        m->k->gelu_backward(m->s, dx, dx, pre, n * ic);
    }
}

/* Block l gathered: its pointers into the engine's buffer, or under bf16
 * activations (note [bf16-acts]) its matrices as views of the engine's bf16
 * gather (note [gathered16]) and its norms and biases widened into wsm (the
 * fp32 matrix pointers then NULL: the products take the bf16 views). */
static block_ptrs gathered_block(sharc_model *m, sharc_fsdp *e, int l) {
    float *p = (float *)sharc_fsdp_gather(e, 1 + l);
    if (!m->a16) return block_view(m, l, p, false);
    const uint16_t *h = sharc_fsdp_gather16(e, 1 + l);
    if (!h)
        sharc_fatal(__FILE__, __LINE__,
                    "model: planned with bf16 activations but the engine gathered block %d in fp32 (make the engine "
                    "from sharc_model_units after sharc_model_set_param_dtype bf16)",
                    l);
    const sharc_unit_spec *u = &m->units[1 + l];
    const sharc_unit_roles *r = &m->roles[1 + l];
    block_ptrs b = {.layer = l, .is_moe = false};
    const sharc_param_role mats[4] = {SHARC_ROLE_WQKV, SHARC_ROLE_WO, SHARC_ROLE_WFC, SHARC_ROLE_WPROJ};
    const uint16_t **dst[4] = {&m->w16qkv, &m->w16o, &m->w16fc, &m->w16proj};
    for (int i = 0; i < 4; i++) *dst[i] = h + u->params[r->at[mats[i]]].offset;
    float *q = m->wsm;
    for (size_t i = 0; i < NBLOCK_ROLES; i++) {
        int at = r->at[block_roles[i].role];
        if (block_roles[i].matrix || at < 0) continue;
        int64_t n = role_numel(m, 1 + l, block_roles[i].role);
        SHARC_PROF("weights16", m->k->cast(m->s, q, SHARC_DT_F32, h + u->params[at].offset, SHARC_DT_BF16, n));
        *(float **)((char *)&b + block_roles[i].field) = q;
        q += n;
    }
    if (m->tp_rank > 0) b.bo = b.bproj = NULL; /* note [tp]: added once, by tp rank 0 */
    return b;
}

/* Note [tiled-mlp]: one chunk of n rows of the MLP input (ln2 rows, or their
 * bf16 copy ln2h: note [bf16-acts]) through fc and the activation, into the
 * shared chunk buffers tfc, tfca (and tfcah). */
static void mlp_chunk_forward(sharc_model *m, const block_ptrs *w, const float *ln2, const uint16_t *ln2h, int64_t n) {
    const sharc_kernels *k = m->k;
    if (m->cfg.family != SHARC_FAMILY_LLAMA) { /* note [gemm-gelu] */
        SHARC_PROF("fwd.matmul.fc", mm_gelu_fwd(m, m->tfc, m->tfca, ln2h ? m->tfcah : NULL, ln2, ln2h, w->wfc, m->w16fc,
                                                w->bfc, n, m->C, m->F));
        return;
    }
    SHARC_PROF("fwd.matmul.fc", mm_fwd(m, m->tfc, ln2, ln2h, w->wfc, m->w16fc, w->bfc, n, m->C, m->F));
    SHARC_PROF_WORK("fwd.act", 0, 12.0 * n * m->Fa, k->swiglu_forward(m->s, m->tfca, m->tfc, n, m->Fa));
    if (ln2h) SHARC_PROF("fwd.act", keep16(m, m->tfcah, m->tfca, n * m->Fa));
}

/* Qwen3's q_norm / k_norm: qkv = qkraw with each query and key head
 * RMS-normalised (rstd: N*NH for q, then N*NKV for k). */
static void qk_norm_fwd(sharc_model *m, const block_ptrs *w, block_acts *a, float *qkv, int64_t N) {
    int64_t ld = m->QKV, nq = (int64_t)m->NH * m->hd;
    if (sharc_device_copy(m->dev, qkv, a->qkraw, (size_t)(N * ld) * sizeof(float), SHARC_COPY_DEVICE_TO_DEVICE, m->s) !=
        SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "model: copying qkv: %s", sharc_last_error());
    m->k->head_rmsnorm_forward(m->s, qkv, a->qkrstd, a->qkraw, w->qnw, N, m->NH, m->hd, ld, m->cfg.norm_eps);
    m->k->head_rmsnorm_forward(m->s, qkv + nq, a->qkrstd + N * m->NH, a->qkraw + nq, w->knw, N, m->NKV, m->hd, ld,
                               m->cfg.norm_eps);
}

/* Note [moe-units]. A MoE layer's MLP into y (N, C). With its experts in
 * their own units, every expert's unit is gathered and released in turn
 * whatever the routing (an expert with no rows computes nothing), so every
 * rank issues the same collectives; a recompute for backward releases
 * them (backward gathers them again). */
static void moe_mlp_forward(sharc_model *m, const block_ptrs *w, int set, float *y, const float *x, int64_t N,
                            bool recompute) {
    if (!m->cfg.experts_as_units) {
        sharc_moe_forward(m->moe, m->k, m->s, set, w->layer, &w->moe, y, x, N);
        return;
    }
    sharc_moe_route(m->moe, m->k, m->s, set, w->layer, w->moe.router, x, N);
    for (int x_ = 0; x_ < m->cfg.num_experts; x_++) {
        int u = expert_unit(m, w->layer, x_);
        const float *p = sharc_fsdp_gather(m->eng, u);
        sharc_moe_expert_forward(m->moe, m->k, m->s, set, x_, weight_at(m, u, SHARC_ROLE_EXPERT_GATE, p),
                                 weight_at(m, u, SHARC_ROLE_EXPERT_DOWN, p));
        if (recompute) sharc_fsdp_release(m->eng, u);
        else sharc_fsdp_forward_done(m->eng, u);
    }
    sharc_moe_combine(m->moe, m->k, m->s, set, y, N);
}

/* Note [moe-units]: the experts' backward of MoE layer l from dy (their
 * units gathered, given gradients and reduced in reverse schedule order),
 * before the block's own backward runs the router's (block_backward). */
static void moe_experts_backward(sharc_model *m, int set, int l, const float *dy) {
    sharc_moe_backward_dispatch(m->moe, m->k, m->s, set, dy);
    for (int x = m->cfg.num_experts - 1; x >= 0; x--) {
        int u = expert_unit(m, l, x);
        const float *p = sharc_fsdp_gather(m->eng, u);
        float *g = sharc_fsdp_grad(m->eng, u);
        sharc_moe_expert_backward(m->moe, m->k, m->s, set, x, weight_at(m, u, SHARC_ROLE_EXPERT_GATE, p),
                                  weight_at(m, u, SHARC_ROLE_EXPERT_DOWN, p), grad_at(m, u, SHARC_ROLE_EXPERT_GATE, g),
                                  grad_at(m, u, SHARC_ROLE_EXPERT_DOWN, g));
        sharc_fsdp_backward_done(m->eng, u);
    }
}

/* note [prof-work] for attention over nh heads of B sequences of T: the
 * causal half of the T x T scores, as FlashAttention counts it (QK^T and PV
 * forward, 2.5 times that backward); sliding windows and document masks do
 * less than this. Bytes: q, k, v and the output (and their gradients). */
static double att_flops(const sharc_model *m, int B, int T, int nh, bool bwd) {
    return (bwd ? 2.5 : 1.0) * 2.0 * 2.0 * B * nh * (double)T * T * m->hd / 2.0;
}
static double att_bytes(const sharc_model *m, int B, int T, int nh, bool bwd) {
    double io = 4.0 * B * (double)T * ((double)m->QKV + (double)m->AD) / m->NH * nh; /* this rank's heads */
    return bwd ? 2.0 * io : io;
}

static void block_forward(sharc_model *m, const block_ptrs *w, block_acts *a, const float *x, float *y, int B, int T) {
    const sharc_kernels *k = m->k;
    sharc_stream *s = m->s;
    int64_t N = (int64_t)B * T;
    bool llama = m->cfg.family == SHARC_FAMILY_LLAMA;
    SHARC_PROF("fwd.norm", norm_fwd(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, N));
    SHARC_PROF("fwd.norm", keep16(m, a->ln1h, a->ln1, N * m->C)); /* note [bf16-acts] */
    float *qkv = m->sp > 1 ? m->uly.qkv_seq : a->qkv;             /* this rank's tokens */
    if (w->qnw) { /* Qwen3: project into qkraw, normalise q and k heads into qkv (v copied) */
        SHARC_PROF("fwd.matmul.qkv",
                   mm_fwd(m, a->qkraw, a->ln1, a->ln1h, w->wqkv, m->w16qkv, w->bqkv, N, m->C, m->QKV));
        SHARC_PROF("fwd.qknorm", qk_norm_fwd(m, w, a, qkv, N));
    } else {
        SHARC_PROF("fwd.matmul.qkv", mm_fwd(m, qkv, a->ln1, a->ln1h, w->wqkv, m->w16qkv, w->bqkv, N, m->C, m->QKV));
    }
    if (llama && m->packed) /* note [packing]: one table row per token */
        SHARC_PROF("fwd.rope", k->rope_forward(s, qkv, m->pk_cos, m->pk_sin, 1, B * T, m->NH, m->NKV, m->hd));
    else if (llama)
        SHARC_PROF("fwd.rope", k->rope_forward(s, qkv, m->rope_cos, m->rope_sin, B, T, m->NH, m->NKV, m->hd));
    const int32_t *lo = m->masked ? m->att_lo : NULL;
    if (m->sp > 1) { /* note [ulysses]: whole sequences, NHl heads */
        sharc_ulysses *u = &m->uly;
        SHARC_PROF("fwd.ulysses", sharc_ulysses_qkv_to_heads(u, a->qkv, qkv));
        SHARC_PROF_WORK(
            "fwd.attention", att_flops(m, B, u->Tf, u->NHl, false), att_bytes(m, B, u->Tf, u->NHl, false),
            k->attention_forward(s, a->att_h, a->lse, a->qkv, lo, B, u->Tf, u->NHl, u->NKVl, m->hd, m->att_ws));
        SHARC_PROF("fwd.ulysses", sharc_ulysses_att_to_tokens(u, a->att, a->att_h));
    } else {
        SHARC_PROF_WORK("fwd.attention", att_flops(m, B, T, m->NH, false), att_bytes(m, B, T, m->NH, false),
                        k->attention_forward(s, a->att, a->lse, a->qkv, lo, B, T, m->NH, m->NKV, m->hd, m->att_ws));
        SHARC_PROF("fwd.attention", keep16(m, a->atth, a->att, N * m->AD));
    }
    SHARC_PROF("fwd.matmul.attproj", mm_fwd(m, m->tmp, a->att, a->atth, w->wo, m->w16o, w->bo, N, m->AD, m->C));
    SHARC_PROF("fwd.tp", sharc_tp_all_reduce(&m->tpl, m->s, m->tmp, N * m->C)); /* note [tp]: g */
    /* note [add-norm]: the residual and ln2 in one pass (tp's all-reduce of tmp is done by now) */
    SHARC_PROF("fwd.norm", add_norm_fwd(m, a->xmid, a->ln2, a->ln2_mean, a->ln2_rstd, x, m->tmp, w->ln2w, w->ln2b, N));
    SHARC_PROF("fwd.norm", keep16(m, a->ln2h, a->ln2, N * m->C));
    if (w->is_moe) { /* note [moe]: a recompute (y NULL) refills the set too */
        SHARC_PROF("fwd.moe", moe_mlp_forward(m, w, (int)(a - m->sets), m->tmp, a->ln2, N, y == NULL));
        if (y) SHARC_PROF("fwd.tp", sharc_tp_all_reduce(&m->tpl, m->s, m->tmp, N * m->C)); /* note [tp-moe] */
        if (y) SHARC_PROF_WORK("fwd.residual", 0, 12.0 * N * m->C, k->add(s, y, a->xmid, m->tmp, N * m->C));
        return;
    }
    /* note [tiled-mlp]: chunk by chunk into tmp; a recompute stops at ln2. A
     * tiled plan has no per-set fc buffers, so a forward over fewer rows than
     * planned (logits of a shorter prefix) takes this path too */
    if (!a->fc || m->tile_rows < N) {
        if (!y) return;
        for (int64_t r0 = 0; r0 < N; r0 += m->tile_rows) {
            int64_t n = N - r0 < m->tile_rows ? N - r0 : m->tile_rows;
            mlp_chunk_forward(m, w, a->ln2 + r0 * m->C, rows16(a->ln2h, r0 * m->C), n);
            SHARC_PROF("fwd.matmul.fcproj", mm_fwd(m, m->tmp + r0 * m->C, m->tfca, m->tfcah, w->wproj, m->w16proj,
                                                   w->bproj, n, m->Fa, m->C));
        }
        SHARC_PROF("fwd.tp", sharc_tp_all_reduce(&m->tpl, m->s, m->tmp, N * m->C));
        SHARC_PROF_WORK("fwd.residual", 0, 12.0 * N * m->C, k->add(s, y, a->xmid, m->tmp, N * m->C));
        return;
    }
    if (llama) {
        SHARC_PROF("fwd.matmul.fc", mm_fwd(m, a->fc, a->ln2, a->ln2h, w->wfc, m->w16fc, w->bfc, N, m->C, m->F));
        SHARC_PROF_WORK("fwd.act", 0, 12.0 * N * m->Fa, k->swiglu_forward(s, a->fca, a->fc, N, m->Fa));
        SHARC_PROF("fwd.act", keep16(m, a->fcah, a->fca, N * m->Fa));
    } else { /* note [gemm-gelu] */
        SHARC_PROF("fwd.matmul.fc",
                   mm_gelu_fwd(m, a->fc, a->fca, a->fcah, a->ln2, a->ln2h, w->wfc, m->w16fc, w->bfc, N, m->C, m->F));
    }
    if (!y) return; /* recomputing for backward: the block output is not needed */
    SHARC_PROF("fwd.matmul.fcproj", mm_fwd(m, m->tmp, a->fca, a->fcah, w->wproj, m->w16proj, w->bproj, N, m->Fa, m->C));
    SHARC_PROF("fwd.tp", sharc_tp_all_reduce(&m->tpl, m->s, m->tmp, N * m->C));
    SHARC_PROF_WORK("fwd.residual", 0, 12.0 * N * m->C, k->add(s, y, a->xmid, m->tmp, N * m->C));
}

/* dres: in, d loss / d y; out, d loss / d x (the block input). */
/* Note [tp-qknorm]. Qwen3's q_norm / k_norm weights (hd each) are shared by
 * every head, and a tp rank normalises only its NH/tp query and NKV/tp key
 * heads, so its gradient of them is its heads' part: the weights stay
 * replicated and this micro-batch's part is summed over the tp group (the
 * accumulated gradient of earlier micro-batches is already summed). Called
 * before the head norms' backward (`done` false: keep the gradients so far
 * in dtmp, free between attention's backward and the qkv product's, and
 * zero them, device copies and kernels) and after it (`done` true:
 * all-reduce the increment, 2 hd floats, and add the kept sums back), so
 * the sum is equal on the tp ranks and the weights stay equal. */
static sharc_status d2d(sharc_model *m, float *dst, const float *src, size_t bytes) {
    return sharc_device_copy(m->dev, dst, src, bytes, SHARC_COPY_DEVICE_TO_DEVICE, m->s);
}

static void tp_qk_norm_grads(sharc_model *m, const block_ptrs *g, bool done) {
    const int64_t hd = m->hd;
    float *old = m->dtmp, *inc = m->dtmp + 2 * hd; /* (2, hd) each: q then k */
    const size_t hb = (size_t)hd * sizeof(float);
    SHARC_CHECK((int64_t)m->B * m->T * m->C >= 4 * hd);
    if (!done) { /* keep the sums so far; the norms' backward then accumulates from 0 */
        SHARC_CHECK(d2d(m, old, g->qnw, hb) == SHARC_OK);
        SHARC_CHECK(d2d(m, old + hd, g->knw, hb) == SHARC_OK);
        m->k->fill(m->s, g->qnw, 0.0f, hd);
        m->k->fill(m->s, g->knw, 0.0f, hd);
        return;
    }
    SHARC_CHECK(d2d(m, inc, g->qnw, hb) == SHARC_OK);
    SHARC_CHECK(d2d(m, inc + hd, g->knw, hb) == SHARC_OK);
    sharc_tp_all_reduce(&m->tpl, m->s, inc, 2 * hd);
    m->k->add(m->s, g->qnw, old, inc, hd);
    m->k->add(m->s, g->knw, old + hd, inc + hd, hd);
}

static void block_backward(sharc_model *m, const block_ptrs *w, const block_ptrs *g, const block_acts *a,
                           const float *x, float *dres) {
    const sharc_kernels *k = m->k;
    sharc_stream *s = m->s;
    int B = m->B, T = m->T;
    int64_t N = (int64_t)B * T;
    bool llama = m->cfg.family == SHARC_FAMILY_LLAMA;
    const int32_t *lo = m->masked ? m->att_lo : NULL;
    if (w->is_moe && m->cfg.experts_as_units) /* note [moe-units]: the experts ran before */
        SHARC_PROF("bwd.moe", sharc_moe_backward_router(m->moe, k, s, (int)(a - m->sets), w->moe.router, g->moe.router,
                                                        m->dtmp, a->ln2));
    else if (w->is_moe) /* note [moe] */
        SHARC_PROF("bwd.moe", sharc_moe_backward(m->moe, k, s, (int)(a - m->sets), w->layer, &w->moe, &g->moe, m->dtmp,
                                                 dres, a->ln2));
    /* the MLP: at once, or chunk by chunk recomputing each chunk (note [tiled-mlp]) */
    for (int64_t r0 = 0; r0 < N && !w->is_moe; r0 += m->tile_rows) {
        int64_t n = N - r0 < m->tile_rows ? N - r0 : m->tile_rows;
        const float *fc = a->fc, *fca = a->fca;
        const uint16_t *fcah = a->fcah, *ln2h = rows16(a->ln2h, r0 * m->C); /* note [bf16-acts] */
        if (m->tile_rows < N) {
            mlp_chunk_forward(m, w, a->ln2 + r0 * m->C, ln2h, n);
            fc = m->tfc;
            fca = m->tfca;
            fcah = m->tfcah;
        }
        if (llama) {
            SHARC_PROF("bwd.matmul.fcproj", mm_bwd(m, m->dfca, g->wproj, g->bproj, dres + r0 * m->C, fca, fcah,
                                                   w->wproj, m->w16proj, n, m->Fa, m->C));
            SHARC_PROF_WORK("bwd.act", 0, 20.0 * n * m->Fa, k->swiglu_backward(s, m->dfc, m->dfca, fc, n, m->Fa));
        } else { /* note [gemm-gelu]: dfc = (dres wproj) * gelu'(fc) */
            SHARC_PROF("bwd.matmul.fcproj", mm_bwd_dgelu(m, m->dfc, g->wproj, g->bproj, dres + r0 * m->C, fca, fcah,
                                                         w->wproj, m->w16proj, fc, n, m->Fa, m->C));
        }
        SHARC_PROF("bwd.matmul.fc", mm_bwd(m, m->dtmp + r0 * m->C, g->wfc, g->bfc, m->dfc, a->ln2 + r0 * m->C, ln2h,
                                           w->wfc, m->w16fc, n, m->C, m->F));
    }
    SHARC_PROF("bwd.tp", sharc_tp_all_reduce(&m->tpl, m->s, m->dtmp, N * m->C)); /* note [tp]: f */
    SHARC_PROF("bwd.norm",
               norm_bwd(m, m->dxmid, g->ln2w, g->ln2b, m->dtmp, dres, a->xmid, w->ln2w, a->ln2_mean, a->ln2_rstd, N));
    SHARC_PROF("bwd.matmul.attproj",
               mm_bwd(m, m->dtmp, g->wo, g->bo, m->dxmid, a->att, a->atth, w->wo, m->w16o, N, m->AD, m->C));
    if (m->sp > 1) { /* note [ulysses], mirrored */
        sharc_ulysses *u = &m->uly;
        SHARC_PROF("bwd.ulysses", sharc_ulysses_datt_to_heads(u, u->datt_h, m->dtmp));
        SHARC_PROF_WORK("bwd.attention", att_flops(m, B, u->Tf, u->NHl, true), att_bytes(m, B, u->Tf, u->NHl, true),
                        k->attention_backward(s, u->dqkv_h, u->datt_h, a->qkv, a->att_h, a->lse, lo, B, u->Tf, u->NHl,
                                              u->NKVl, m->hd, m->att_ws));
        SHARC_PROF("bwd.ulysses", sharc_ulysses_dqkv_to_tokens(u, m->dqkv, u->dqkv_h));
    } else {
        const float *att = a->att;
        if (a->atth) { /* note [bf16-acts]: widened back (a->att is dtmp, now datt) */
            SHARC_PROF("bwd.attention", k->cast(s, m->att32, SHARC_DT_F32, a->atth, SHARC_DT_BF16, N * m->AD));
            att = m->att32;
        }
        SHARC_PROF_WORK(
            "bwd.attention", att_flops(m, B, T, m->NH, true), att_bytes(m, B, T, m->NH, true),
            k->attention_backward(s, m->dqkv, m->dtmp, a->qkv, att, a->lse, lo, B, T, m->NH, m->NKV, m->hd, m->att_ws));
    }
    if (llama && m->packed)
        SHARC_PROF("bwd.rope", k->rope_backward(s, m->dqkv, m->pk_cos, m->pk_sin, 1, B * T, m->NH, m->NKV, m->hd));
    else if (llama)
        SHARC_PROF("bwd.rope", k->rope_backward(s, m->dqkv, m->rope_cos, m->rope_sin, B, T, m->NH, m->NKV, m->hd));
    if (w->qnw) {
        int64_t ld = m->QKV, nq = (int64_t)m->NH * m->hd;
        const bool tp_sum = m->tp_group && g->qnw; /* note [tp-qknorm] */
        if (tp_sum) tp_qk_norm_grads(m, g, false);
        SHARC_PROF("bwd.qknorm", k->head_rmsnorm_backward(s, m->dqkv, g->qnw, m->dqkv, a->qkraw, w->qnw, a->qkrstd, N,
                                                          m->NH, m->hd, ld));
        SHARC_PROF("bwd.qknorm", k->head_rmsnorm_backward(s, m->dqkv + nq, g->knw, m->dqkv + nq, a->qkraw + nq, w->knw,
                                                          a->qkrstd + N * m->NH, N, m->NKV, m->hd, ld));
        if (tp_sum) SHARC_PROF("bwd.tp", tp_qk_norm_grads(m, g, true));
    }
    SHARC_PROF("bwd.matmul.qkv",
               mm_bwd(m, m->dtmp, g->wqkv, g->bqkv, m->dqkv, a->ln1, a->ln1h, w->wqkv, m->w16qkv, N, m->C, m->QKV));
    SHARC_PROF("bwd.tp", sharc_tp_all_reduce(&m->tpl, m->s, m->dtmp, N * m->C));
    SHARC_PROF("bwd.norm",
               norm_bwd(m, dres, g->ln1w, g->ln1b, m->dtmp, m->dxmid, x, w->ln1w, a->ln1_mean, a->ln1_rstd, N));
}

/* -------------------------------------------------------------- schedule */

static float *xl(const sharc_model *m, int l) { return m->x + (int64_t)l * m->B * m->T * m->C; }

static void check_inputs(const sharc_model *m, sharc_fsdp *e, const int32_t *tok, int64_t N) {
    if (sharc_fsdp_device(e) != m->dev)
        sharc_fatal(__FILE__, __LINE__, "model: on device %s, its engine on %s", sharc_device_name(m->dev),
                    sharc_device_name(sharc_fsdp_device(e)));
    if (sharc_threads_get() > m->plan_threads)
        sharc_fatal(
            __FILE__, __LINE__,
            "model: %d threads but workspaces were planned for %d; set the thread count before sharc_model_plan",
            sharc_threads_get(), m->plan_threads);
    /* token ids in device memory (a GPU) are not readable here: whoever
     * copied them there checked them on the host first */
    for (int64_t i = 0; sharc_device_is_host(m->dev) && i < N; i++)
        if (tok[i] < 0 || tok[i] >= m->V)
            sharc_fatal(__FILE__, __LINE__, "model: token %d at %lld outside vocabulary [0, %d)", tok[i], (long long)i,
                        m->V);
}

/* Note [device-batch]. Token ids and targets reach the kernels in the
 * model's device memory. On a host device the caller's arrays are read in
 * place (check_inputs scans the ids); on a device with its own memory
 * sharc_model_stage_batch checks the ids on the host, copies a micro-batch
 * into two planned (B*T) buffers on the model's stream and hands back their
 * addresses, which stay valid until the next call (the copies are ordered
 * before the kernels that read them by the stream). */
sharc_status sharc_model_stage_batch(sharc_model *m, const int32_t *inputs, const int32_t *targets, int64_t n,
                                     const int32_t **dinputs, const int32_t **dtargets) {
    *dinputs = inputs;
    *dtargets = targets;
    if (sharc_device_is_host(m->dev)) return SHARC_OK;
    if (!m->batch_in || n > (int64_t)m->B * m->T)
        return sharc_error(SHARC_ERR_INVALID, "model: a batch of %lld tokens, planned for %lld", (long long)n,
                           (long long)m->B * m->T);
    for (int64_t i = 0; i < n; i++)
        if (inputs[i] < 0 || inputs[i] >= m->V)
            return sharc_error(SHARC_ERR_INVALID, "model: token %d at %lld outside the vocabulary [0, %d)", inputs[i],
                               (long long)i, m->V);
    SHARC_TRY(
        sharc_device_copy(m->dev, m->batch_in, inputs, (size_t)n * sizeof(int32_t), SHARC_COPY_HOST_TO_DEVICE, m->s));
    if (targets)
        SHARC_TRY(sharc_device_copy(m->dev, m->batch_tg, targets, (size_t)n * sizeof(int32_t),
                                    SHARC_COPY_HOST_TO_DEVICE, m->s));
    *dinputs = m->batch_in;
    *dtargets = targets ? m->batch_tg : NULL;
    return SHARC_OK;
}

/* Unit u (0 .. L + 1) or, for a block, one of its expert units has a
 * trainable parameter (note [frozen-params], note [moe-units]). */
static bool unit_trains(const sharc_model *m, int u) {
    if (sharc_unit_trainable(&m->units[u])) return true;
    for (int x = 0; u >= 1 && u <= m->L && expert_unit(m, u - 1, x) >= 0 && x < m->cfg.num_experts; x++)
        if (sharc_unit_trainable(&m->units[expert_unit(m, u - 1, x)])) return true;
    return false;
}

/* The loss sum the last head kernel left in the device scalar. */
static double read_loss(sharc_model *m) {
    double loss = 0.0;
    if (sharc_device_copy(m->dev, &loss, m->loss, sizeof loss, SHARC_COPY_DEVICE_TO_HOST, m->s) != SHARC_OK ||
        sharc_device_synchronize(m->s) != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "model: reading the loss: %s", sharc_last_error());
    return loss;
}

/* The head unit's final-norm weight and bias (NULL for RMSNorm) in its buffer hp. */
static void head_norm(const sharc_model *m, const float *hp, const float **nw, const float **nb) {
    *nw = weight_at(m, m->L + 1, SHARC_ROLE_LNFW, hp);
    *nb = weight_at(m, m->L + 1, SHARC_ROLE_LNFB, hp); /* GPT-2's LayerNorm bias */
}

/* The head weight (V, C): the embed unit's wte when tied, else the head's own. */
static const float *head_weight(sharc_model *m, sharc_fsdp *e, const float *hp) {
    if (m->cfg.tie_embeddings) return weight_at(m, 0, SHARC_ROLE_WTE, sharc_fsdp_gather(e, 0));
    return weight_at(m, m->L + 1, SHARC_ROLE_LM_HEAD, hp);
}

/* Note [bf16-head]. Under bf16 compute the replicated head's kernel
 * (lmhead_xent_bf16) rounds x and w once per call, i.e. once per gather
 * of the head, and each chunk's dlogits. The vocabulary-parallel head of
 * tp (note [tp-vocab]) calls the table's matmuls chunk by chunk, whose
 * bf16 slots rounded the head's (Vl, C) rows twice per chunk (forward,
 * then dx); with bf16 activations planned (note [bf16-acts]) the model
 * rounds them and lnf once per call into head16 and the chunks take the
 * *_b16 slots: the same operands, the same bits (tests/test_bf16.c), one
 * rounding of w instead of 2 ceil(N / chunk). head16 is planned
 * ((Vl + N) C bf16). Generation (sharc_model_logits_last,
 * sharc_model_kv_append) still rounds the head per call, one token at a
 * time: keeping a bf16 copy across calls would need the engine to say
 * when a gather changed the weights. */
static void head_xent(sharc_model *m, float *dx, float *dw, const float *w, const int32_t *targets, float scale,
                      int64_t N) {
    if (m->Vl == m->V) {
        /* note [prof-work]: the logits, then dx and dw from them */
        SHARC_PROF_WORK("head.lm_xent", 2.0 * N * m->C * m->V * (1 + (dx != NULL) + (dw != NULL)),
                        4.0 * ((double)N * m->C + (double)m->V * m->C) + (dx ? 4.0 * N * m->C : 0) +
                            (dw ? 8.0 * m->V * m->C : 0),
                        m->k->lmhead_xent(m->s, m->loss, dx, dw, m->lnf, w, targets, scale, N, m->C, m->V, m->head_ws,
                                          m->head_chunk));
        return;
    }
    uint16_t *wh = m->head16, *xh = wh ? wh + (int64_t)m->Vl * m->C : NULL;
    if (wh) {
        SHARC_PROF("head.bf16_operands", m->k->cast(m->s, wh, SHARC_DT_BF16, w, SHARC_DT_F32, (int64_t)m->Vl * m->C));
        SHARC_PROF("head.bf16_operands", m->k->cast(m->s, xh, SHARC_DT_BF16, m->lnf, SHARC_DT_F32, N * m->C));
    }
    sharc_tp_lmhead_xent(m->k, m->s, &m->tpl, m->loss, dx, dw, m->lnf, w, xh, wh, targets, scale, N, m->C, m->v0, m->Vl,
                         m->head_ws, m->head_red, m->head_chunk);
}

/* note [bf16-compute] */
bool sharc_model_computes_bf16(const sharc_model *m, const sharc_fsdp *e) {
    return sharc_fsdp_param_dtype(e) == SHARC_DT_BF16 && m->kdev->bf16_compute();
}

static void use_kernels(sharc_model *m, const sharc_fsdp *e) {
    bool b = sharc_model_computes_bf16(m, e);
    m->k = b ? &m->k16 : m->kdev;
    if (m->a16 && !b) /* note [bf16-acts] */
        sharc_fatal(__FILE__, __LINE__,
                    "model: planned with bf16 activations (sharc_model_set_param_dtype bf16) but its engine computes "
                    "in fp32 (param_dtype %s); plan again",
                    sharc_dtype_st_name(sharc_fsdp_param_dtype(e)));
}

/* Embedding and blocks; with `store` false every block reuses set 0. */
static void forward_body(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, int B, int T, bool store) {
    int64_t N = (int64_t)B * T;
    use_kernels(m, e);
    m->eng = e;
    check_inputs(m, e, inputs, N);
    const float *ep = sharc_fsdp_gather(e, 0);
    const float *wpe = weight_at(m, 0, SHARC_ROLE_WPE, ep); /* GPT-2's learned positions */
    if (m->Vl < m->V) { /* note [tp-vocab]: this rank's rows, zero elsewhere, summed over tp */
        /* under sp (note [tp-sp]) the slice's positions start at sp_rank T: the table from that row */
        const float *wp = wpe && !m->packed ? wpe + (int64_t)m->sp_rank * T * m->C : wpe;
        SHARC_PROF("fwd.embedding",
                   m->k->vocab_embedding_forward(m->s, xl(m, 0), inputs, m->packed ? m->pos_local : NULL, ep, wp, N, T,
                                                 m->C, m->v0, m->Vl));
        SHARC_PROF("fwd.tp", sharc_tp_all_reduce(&m->tpl, m->s, xl(m, 0), N * m->C));
    } else if (wpe && m->packed) { /* note [packing]: wpe rows by position, added */
        SHARC_PROF("fwd.embedding", m->k->embedding_forward(m->s, xl(m, 0), inputs, ep, NULL, B, T, m->C, 0));
        SHARC_PROF("fwd.embedding", m->k->embedding_forward(m->s, m->tmp, m->pos_local, wpe, NULL, B, T, m->C, 0));
        SHARC_PROF("fwd.embedding", m->k->add(m->s, xl(m, 0), xl(m, 0), m->tmp, N * m->C));
    } else {
        SHARC_PROF("fwd.embedding",
                   m->k->embedding_forward(m->s, xl(m, 0), inputs, ep, wpe, B, T, m->C, m->sp_rank * m->T));
    }
    sharc_fsdp_forward_done(e, 0);
    for (int l = 0; l < m->L; l++) {
        block_ptrs w = gathered_block(m, e, l); /* note [bf16-acts] */
        block_acts *a = &m->sets[store && !m->ac ? l : 0];
        block_forward(m, &w, a, xl(m, l), xl(m, l + 1), B, T);
        sharc_fsdp_forward_done(e, 1 + l);
    }
}

/* After a forward-only pass: the head and the embed unit (a root unit when
 * tied, so still gathered; under SHARD_GRAD_OP kept gathered too) are released. */
static void release_head(sharc_model *m, sharc_fsdp *e) {
    sharc_fsdp_release(e, m->L + 1);
    sharc_fsdp_release(e, 0);
}

/* Forward and backward of one micro-batch; its loss sum is left in m->loss
 * (the MoE term not added), not read. */
static void forward_backward(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, const int32_t *targets,
                             float loss_scale) {
    const int B = m->B, T = m->T, L = m->L, H = L + 1;
    const int64_t N = (int64_t)B * T;
    double t0 = sharc_clock_now();
    forward_body(m, e, inputs, B, T, true);

    /* head: final norm, fused LM head + loss + backward */
    const float *hp = sharc_fsdp_gather(e, H);
    float *hg = sharc_fsdp_grad(e, H);
    const float *nw, *nb;
    head_norm(m, hp, &nw, &nb);
    norm_fwd(m, m->lnf, m->lnf_mean, m->lnf_rstd, xl(m, L), nw, nb, N);
    double t1 = sharc_clock_now();
    m->timing.forward_s += t1 - t0;
    const float *wh = head_weight(m, e, hp);
    float *gh = m->cfg.tie_embeddings ? grad_at(m, 0, SHARC_ROLE_WTE, sharc_fsdp_grad(e, 0))
                                      : grad_at(m, H, SHARC_ROLE_LM_HEAD, hg);
    /* note [frozen-params]: the first unit whose backward runs (units in forward order = index order) */
    int from = 0;
    while (from < H && !unit_trains(m, from)) from++;
    head_xent(m, m->dtmp, gh, wh, targets, loss_scale, N);
    norm_bwd(m, m->dres, grad_at(m, H, SHARC_ROLE_LNFW, hg), grad_at(m, H, SHARC_ROLE_LNFB, hg), m->dtmp, NULL,
             xl(m, L), nw, m->lnf_mean, m->lnf_rstd, N);
    sharc_fsdp_backward_done(e, H);
    sharc_moe_backward_begin(m->moe, m->s, loss_scale); /* note [moe]: the auxiliary loss's weight */

    for (int l = L - 1; l >= 0; l--) {
        if (1 + l < from) { /* frozen, and so is everything before it: no backward */
            sharc_fsdp_release(e, 1 + l);
            for (int x = 0; expert_unit(m, l, x) >= 0 && x < m->cfg.num_experts; x++)
                sharc_fsdp_release(e, expert_unit(m, l, x));
            continue;
        }
        block_acts *a = &m->sets[m->ac ? 0 : l];
        block_ptrs w;
        if (expert_unit(m, l, 0) >= 0) { /* note [moe-units]: the experts (reverse order), then the block */
            if (m->ac) { /* recompute: the block's weights now, the experts gathered and released in turn */
                w = block_view(m, l, (float *)sharc_fsdp_gather(e, 1 + l), false);
                block_forward(m, &w, a, xl(m, l), NULL, B, T);
            }
            moe_experts_backward(m, (int)(a - m->sets), l, m->dres);
        }
        w = gathered_block(m, e, l); /* note [bf16-acts]: once for the recompute and the backward */
        block_ptrs g = block_view(m, l, sharc_fsdp_grad(e, 1 + l), true);
        if (m->ac && expert_unit(m, l, 0) < 0) block_forward(m, &w, a, xl(m, l), NULL, B, T); /* recompute */
        block_backward(m, &w, &g, a, xl(m, l), m->dres);
        sharc_fsdp_backward_done(e, 1 + l);
    }

    /* the embedding's backward needs no parameters, only its gradient buffer */
    float *eg = sharc_fsdp_grad(e, 0);
    float *gwte = grad_at(m, 0, SHARC_ROLE_WTE, eg);
    float *gwpe = grad_at(m, 0, SHARC_ROLE_WPE, eg);
    if (m->Vl < m->V) { /* note [tp-vocab]: this rank's rows; the position table whole */
        if (gwte)
            SHARC_PROF("bwd.embedding",
                       m->k->vocab_embedding_backward(m->s, gwte, m->dres, inputs, N, m->C, m->v0, m->Vl));
        if (gwpe && m->packed)
            SHARC_PROF("bwd.embedding",
                       m->k->embedding_backward(m->s, gwpe, NULL, m->dres, m->pos_local, B, T, m->C, 0));
        else if (gwpe)
            SHARC_PROF("bwd.embedding",
                       m->k->embedding_backward(m->s, NULL, gwpe, m->dres, inputs, B, T, m->C, m->sp_rank * T));
    } else if (gwpe && m->packed) { /* note [packing]: scattered by position */
        if (gwte)
            SHARC_PROF("bwd.embedding", m->k->embedding_backward(m->s, gwte, NULL, m->dres, inputs, B, T, m->C, 0));
        SHARC_PROF("bwd.embedding", m->k->embedding_backward(m->s, gwpe, NULL, m->dres, m->pos_local, B, T, m->C, 0));
    } else if (gwte || gwpe) {
        SHARC_PROF("bwd.embedding",
                   m->k->embedding_backward(m->s, gwte, gwpe, m->dres, inputs, B, T, m->C, m->sp_rank * T));
    }
    sharc_fsdp_backward_done(e, 0);
    int idle = 0; /* note [moe-units]: the cost of unused experts */
    sharc_model_moe_stats(m, NULL, &idle);
    m->timing.moe_idle_pairs += idle;
    m->timing.moe_idle_params += (int64_t)idle * 3 * (m->cfg.moe_intermediate_size / m->tp) * m->C;
    m->timing.backward_s += sharc_clock_now() - t1;
}

double sharc_model_forward_backward(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, const int32_t *targets,
                                    float loss_scale) {
    forward_backward(m, e, inputs, targets, loss_scale);
    return read_loss(m) + sharc_moe_loss_term(m->moe);
}

/* Note [loss-on-device]. A training step's loss sums stay on the device
 * until the step's end: each micro-batch's loss sum l (the head's device
 * scalar plus the MoE term, a host value) is added by a kernel on the
 * model's stream into m->sums (sums[0] += l * weight, sums[1] += l: the
 * step's fp64 arithmetic in its order, so the CPU gives the bits it gave
 * when it read each l), and sums[2..3] take the gradient norm's squared
 * sums (sharc_fsdp_grad_sumsq_queue on the engine's stream: the device's
 * default stream, the model's too). One copy of the four into pinned host
 * memory and one wait read them all, whatever the micro-batch count. */
sharc_status sharc_model_sums_zero(sharc_model *m) {
    return sharc_device_memset0(m->dev, m->sums, SHARC_MODEL_SUMS * sizeof(double), m->s);
}

void sharc_model_forward_backward_add(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, const int32_t *targets,
                                      float loss_scale, double weight) {
    forward_backward(m, e, inputs, targets, loss_scale);
    m->kdev->loss_add(m->s, m->sums, m->loss, sharc_moe_loss_term(m->moe), weight);
}

double *sharc_model_sums(sharc_model *m) { return m->sums; }

sharc_status sharc_model_sums_read(sharc_model *m, double out[SHARC_MODEL_SUMS]) {
    SHARC_TRY(sharc_device_copy(m->dev, m->hsums, m->sums, SHARC_MODEL_SUMS * sizeof(double), SHARC_COPY_DEVICE_TO_HOST,
                                m->s));
    SHARC_TRY(sharc_device_synchronize(m->s));
    memcpy(out, m->hsums, SHARC_MODEL_SUMS * sizeof(double));
    return SHARC_OK;
}

double sharc_model_forward_loss(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, const int32_t *targets) {
    const int B = m->B, T = m->T, L = m->L, H = L + 1;
    const int64_t N = (int64_t)B * T;
    double t0 = sharc_clock_now();
    forward_body(m, e, inputs, B, T, false);
    const float *hp = sharc_fsdp_gather(e, H), *nw, *nb;
    head_norm(m, hp, &nw, &nb);
    norm_fwd(m, m->lnf, m->lnf_mean, m->lnf_rstd, xl(m, L), nw, nb, N);
    head_xent(m, NULL, NULL, head_weight(m, e, hp), targets, 1.0f, N);
    release_head(m, e);
    double loss = read_loss(m);
    m->timing.forward_s += sharc_clock_now() - t0;
    return loss;
}

void sharc_model_logits_last(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, int len, float *logits) {
    SHARC_CHECK(len >= 1 && len <= m->T && m->sp == 1 && m->Vl == m->V);
    const int L = m->L, H = L + 1;
    forward_body(m, e, inputs, 1, len, false);
    const float *hp = sharc_fsdp_gather(e, H), *nw, *nb;
    head_norm(m, hp, &nw, &nb);
    const float *last = xl(m, L) + (int64_t)(len - 1) * m->C;
    norm_fwd(m, m->lnf, m->lnf_mean, m->lnf_rstd, last, nw, nb, 1);
    /* into the head's workspace (device memory, at least V floats), then to the host */
    m->k->matmul_forward(m->s, m->head_ws, m->lnf, head_weight(m, e, hp), NULL, 1, m->C, m->V);
    release_head(m, e);
    if (sharc_device_copy(m->dev, logits, m->head_ws, (size_t)m->V * sizeof(float), SHARC_COPY_DEVICE_TO_HOST, m->s) !=
            SHARC_OK ||
        sharc_device_synchronize(m->s) != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "model: reading the logits: %s", sharc_last_error());
}

/* ------------------------------------------------------------ generation */

/* Note [kv-cache]. Generation appends tokens to a per-layer cache of keys
 * and values (after RoPE) at their positions, so a new token costs one
 * token's forward plus attention over the cached positions: O(T) per token,
 * not the O(T^2) of recomputing the prefix. The caches hold the plan's T
 * positions (plan B = 1); the block below is block_forward's forward for n
 * rows at positions pos .. pos+n-1 with attention_cached in place of
 * attention_forward, using activation set 0 (nothing is kept for backward). */
sharc_status sharc_model_kv_enable(sharc_model *m) {
    if (m->B != 1 || m->T < 1 || m->sp > 1 || m->tp > 1)
        return sharc_error(SHARC_ERR_INVALID,
                           "model: a key/value cache needs a plan of batch 1 on one sequence- and tensor-parallel "
                           "rank (planned %d x %d, sp %d, tp %d)",
                           m->B, m->T, m->sp, m->tp);
    if (!m->kcache) {
        size_t bytes = (size_t)m->L * (size_t)m->T * (size_t)m->NKV * (size_t)m->hd * sizeof(float);
        m->kcache = sharc_device_alloc(m->dev, bytes, SHARC_MEM_ACTIVATIONS);
        m->vcache = sharc_device_alloc(m->dev, bytes, SHARC_MEM_ACTIVATIONS);
        m->kv_lo = sharc_device_alloc(m->dev, sizeof(int32_t) * (size_t)m->T, SHARC_MEM_ACTIVATIONS);
        if (!m->kcache || !m->vcache || !m->kv_lo) {
            sharc_device_free(m->dev, m->kv_lo);
            m->kv_lo = NULL;
            sharc_device_free(m->dev, m->kcache);
            sharc_device_free(m->dev, m->vcache);
            m->kcache = m->vcache = NULL;
            return sharc_error(SHARC_ERR_NOMEM, "model: cannot allocate the key/value cache (%d positions)", m->T);
        }
    }
    m->kv_len = 0;
    return SHARC_OK;
}

int sharc_model_kv_len(const sharc_model *m) { return m->kv_len; }

static void kv_copy(sharc_model *m, float *dst, const float *src, size_t n) {
    if (sharc_device_copy(m->dev, dst, src, n * sizeof(float), SHARC_COPY_DEVICE_TO_DEVICE, m->s) != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "model: filling the key/value cache: %s", sharc_last_error());
}

static void block_forward_cached(sharc_model *m, int l, const block_ptrs *w, const float *x, float *y, int n, int pos) {
    const sharc_kernels *k = m->k;
    sharc_stream *s = m->s;
    block_acts *a = &m->sets[0];
    bool llama = m->cfg.family == SHARC_FAMILY_LLAMA;
    int half = m->hd / 2, KV = m->NKV * m->hd;
    const int64_t nc = (int64_t)n * m->C;
    norm_fwd(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, n);
    keep16(m, a->ln1h, a->ln1, nc); /* note [bf16-acts]: the products read bf16 copies (NULL in fp32) */
    if (w->qnw) {
        mm_fwd(m, a->qkraw, a->ln1, a->ln1h, w->wqkv, m->w16qkv, w->bqkv, n, m->C, m->QKV);
        qk_norm_fwd(m, w, a, a->qkv, n);
    } else {
        mm_fwd(m, a->qkv, a->ln1, a->ln1h, w->wqkv, m->w16qkv, w->bqkv, n, m->C, m->QKV);
    }
    if (llama) /* the tables' rows from position pos */
        k->rope_forward(s, a->qkv, m->rope_cos + (int64_t)pos * half, m->rope_sin + (int64_t)pos * half, 1, n, m->NH,
                        m->NKV, m->hd);
    float *kc = m->kcache + (int64_t)l * m->T * KV, *vc = m->vcache + (int64_t)l * m->T * KV;
    for (int i = 0; i < n; i++) {
        const float *row = a->qkv + (int64_t)i * m->QKV;
        kv_copy(m, kc + (int64_t)(pos + i) * KV, row + m->AD, (size_t)KV);
        kv_copy(m, vc + (int64_t)(pos + i) * KV, row + m->AD + KV, (size_t)KV);
    }
    const int W = m->cfg.sliding_window;
    if (W > 0 && pos + n > W) { /* note [packing]: the window's first key per new query */
        int32_t lo[64];
        for (int i0 = 0; i0 < n; i0 += 64) {
            int c = n - i0 < 64 ? n - i0 : 64;
            for (int i = 0; i < c; i++) lo[i] = pos + i0 + i - W + 1 > 0 ? pos + i0 + i - W + 1 : 0;
            if (sharc_device_copy(m->dev, m->kv_lo + i0, lo, sizeof(int32_t) * (size_t)c, SHARC_COPY_HOST_TO_DEVICE,
                                  m->s) != SHARC_OK)
                sharc_fatal(__FILE__, __LINE__, "model: the window bounds: %s", sharc_last_error());
        }
    }
    k->attention_cached(s, a->att, a->qkv, m->QKV, kc, vc, W > 0 && pos + n > W ? m->kv_lo : NULL, n, pos, m->NH,
                        m->NKV, m->hd, m->att_ws);
    keep16(m, a->atth, a->att, (int64_t)n * m->AD);
    mm_fwd(m, m->tmp, a->att, a->atth, w->wo, m->w16o, w->bo, n, m->AD, m->C);
    k->add(s, a->xmid, x, m->tmp, nc);
    norm_fwd(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->xmid, w->ln2w, w->ln2b, n);
    keep16(m, a->ln2h, a->ln2, nc);
    if (w->is_moe) { /* note [moe] */
        moe_mlp_forward(m, w, 0, m->tmp, a->ln2, n, false);
    } else if (a->fc) {
        if (llama) {
            mm_fwd(m, a->fc, a->ln2, a->ln2h, w->wfc, m->w16fc, w->bfc, n, m->C, m->F);
            k->swiglu_forward(s, a->fca, a->fc, n, m->Fa);
            keep16(m, a->fcah, a->fca, (int64_t)n * m->Fa);
        } else {
            mm_gelu_fwd(m, a->fc, a->fca, a->fcah, a->ln2, a->ln2h, w->wfc, m->w16fc, w->bfc, n, m->C, m->F);
        }
        mm_fwd(m, m->tmp, a->fca, a->fcah, w->wproj, m->w16proj, w->bproj, n, m->Fa, m->C);
    } else { /* a tiled MLP (note [tiled-mlp]): its chunk buffers, tile_rows rows at a time */
        for (int64_t r0 = 0; r0 < n; r0 += m->tile_rows) {
            int64_t nr = n - r0 < m->tile_rows ? n - r0 : m->tile_rows;
            mlp_chunk_forward(m, w, a->ln2 + r0 * m->C, rows16(a->ln2h, r0 * m->C), nr);
            mm_fwd(m, m->tmp + r0 * m->C, m->tfca, m->tfcah, w->wproj, m->w16proj, w->bproj, nr, m->Fa, m->C);
        }
    }
    k->add(s, y, a->xmid, m->tmp, (int64_t)n * m->C);
}

sharc_status sharc_model_kv_append(sharc_model *m, sharc_fsdp *e, const int32_t *tokens, int n, float *logits) {
    if (!m->kcache) return sharc_error(SHARC_ERR_INVALID, "model: sharc_model_kv_enable was not called");
    if (n < 1 || m->kv_len + n > m->T)
        return sharc_error(SHARC_ERR_INVALID, "model: %d new tokens after %d cached exceed the %d positions planned", n,
                           m->kv_len, m->T);
    const int L = m->L, H = L + 1, pos = m->kv_len;
    use_kernels(m, e); /* note [bf16-compute] */
    m->eng = e;
    check_inputs(m, e, tokens, n);
    const float *ep = sharc_fsdp_gather(e, 0);
    const float *wpe = weight_at(m, 0, SHARC_ROLE_WPE, ep); /* GPT-2's learned positions */
    m->k->embedding_forward(m->s, xl(m, 0), tokens, ep, wpe, 1, n, m->C, pos);
    sharc_fsdp_forward_done(e, 0);
    for (int l = 0; l < L; l++) {
        block_ptrs w = gathered_block(m, e, l); /* note [bf16-acts] */
        block_forward_cached(m, l, &w, xl(m, l), xl(m, l + 1), n, pos);
        sharc_fsdp_forward_done(e, 1 + l);
    }
    const float *hp = sharc_fsdp_gather(e, H), *nw, *nb;
    head_norm(m, hp, &nw, &nb);
    norm_fwd(m, m->lnf, m->lnf_mean, m->lnf_rstd, xl(m, L) + (int64_t)(n - 1) * m->C, nw, nb, 1);
    m->k->matmul_forward(m->s, m->head_ws, m->lnf, head_weight(m, e, hp), NULL, 1, m->C, m->V);
    release_head(m, e);
    m->kv_len = pos + n;
    if (sharc_device_copy(m->dev, logits, m->head_ws, (size_t)m->V * sizeof(float), SHARC_COPY_DEVICE_TO_HOST, m->s) !=
            SHARC_OK ||
        sharc_device_synchronize(m->s) != SHARC_OK)
        return sharc_error(SHARC_ERR_IO, "model: reading the logits: %s", sharc_last_error());
    return SHARC_OK;
}
