/* test_model.c: whole-model gradients of both families at odd sizes against
 * finite differences; activation checkpointing gives identical gradients;
 * micro-batch accumulation equals one big batch; the unit list. */
#include "grad_check.h"
#include "sharc/alloc.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/optim.h"

#include <math.h>
#include <string.h>

typedef struct {
    sharc_model *m;
    sharc_fsdp *e;
    int32_t *in, *tgt;
} model_ctx;

/* Llama-family variant of the next setup (note [families]): 0 plain,
 * 1 Qwen2 (q/k/v biases), 2 Qwen3 (q/k norms, head_dim 10 != 48/3), 3 Llama-3.1
 * RoPE scaling (factor 4 over 8 original positions: kept, smoothed and
 * divided frequencies all present). */
static int variant;

static void small_config(sharc_model_config *c, sharc_family f) {
    sharc_model_config_default(c, f);
    c->num_layers = 2;
    c->embed_dim = 48;
    c->num_heads = 3;
    c->num_kv_heads = f == SHARC_FAMILY_LLAMA ? 1 : 3;
    c->ff_hidden_dim = f == SHARC_FAMILY_LLAMA ? 70 : 0;
    c->vocab_size = 37;
    c->max_seq_len = 16;
    c->init_std = 0.2f;
    c->qkv_bias = variant == 1;
    c->qk_norm = variant == 2;
    c->head_dim = variant == 2 ? 10 : 0;
    int v = variant >= 6 ? variant - 2 : variant; /* 6, 7: 4, 5 with each expert its own unit (note [moe-units]) */
    c->experts_as_units = variant >= 6;
    if (v >= 4) { /* note [moe]: Qwen3-MoE, 4 experts, top-2; layer 1 dense (4) or both MoE (5) */
        c->qk_norm = true;
        c->head_dim = 10;
        c->num_experts = 4;
        c->num_experts_per_tok = 2;
        c->moe_intermediate_size = 12;
        c->norm_topk_prob = v == 4;
        snprintf(c->mlp_only_layers, sizeof c->mlp_only_layers, "%s", v == 4 ? "1" : "");
        c->router_aux_loss_coef = 0.05f;
        c->output_router_logits = true;
    }
    if (variant == 3) {
        c->rope_theta = 100.0f;
        c->rope_factor = 4.0f;
        c->rope_low_freq_factor = 1.0f;
        c->rope_high_freq_factor = 4.0f;
        c->rope_original_max_pos = 8;
    }
}

/* tiles > 1: the tiled MLP (note [tiled-mlp]) in that many chunks */
static void setup_tiled(model_ctx *x, sharc_family f, int B, int T, bool ac, bool tie, int tiles) {
    sharc_model_config c;
    small_config(&c, f);
    c.tie_embeddings = tie;
    if (T > c.max_seq_len) c.max_seq_len = T;
    ASSERT_OK(sharc_model_init(&x->m, &c, NULL));
    sharc_model_set_tiled_mlp(x->m, tiles);
    ASSERT_OK(sharc_model_plan(x->m, B, T, ac));
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    ASSERT_OK(sharc_fsdp_init(&x->e, sharc_model_units(x->m), sharc_model_num_units(x->m), sharc_model_schedule(x->m),
                              &fc, NULL, sharc_model_device(x->m)));
    sharc_fsdp_init_params(x->e, 42);
    /* make norms and biases non-trivial so their gradients are exercised */
    sharc_fsdp_shard_write_begin(x->e);
    for (int u = 0; u < sharc_fsdp_num_units(x->e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(x->e, u);
        float *p = sharc_fsdp_shard_write(x->e, u);
        for (int i = 0; i < s->nparams; i++)
            if (s->params[i].ndim == 1)
                for (int64_t k = 0; k < s->params[i].numel; k++)
                    p[s->params[i].offset + k] += 0.1f * sharc_rng_normal(7, (uint64_t)i, (uint64_t)k);
    }
    sharc_fsdp_shard_write_end(x->e);
    x->in = malloc(sizeof(int32_t) * (size_t)(B * T));
    x->tgt = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int i = 0; i < B * T; i++) {
        x->in[i] = (int32_t)(sharc_rng_u64(5, 1, (uint64_t)i) % 37);
        x->tgt[i] = (int32_t)(sharc_rng_u64(5, 2, (uint64_t)i) % 37);
    }
    x->tgt[3] = -1; /* one masked target */
}

static void setup(model_ctx *x, sharc_family f, int B, int T, bool ac, bool tie) {
    setup_tiled(x, f, B, T, ac, tie, 1);
}

static void teardown(model_ctx *x) {
    sharc_fsdp_free(x->e);
    sharc_model_free(x->m);
    free(x->in);
    free(x->tgt);
}

/* The objective forward_backward differentiates at loss_scale 1: the
 * language-model loss sum plus, with MoE and output_router_logits, coef *
 * aux * N (note [moe]). */
static double model_loss(void *p) {
    model_ctx *x = p;
    double lm = sharc_model_forward_loss(x->m, x->e, x->in, x->tgt), aux;
    sharc_model_moe_stats(x->m, &aux, NULL);
    const sharc_model_config *c = sharc_model_get_config(x->m);
    if (c->output_router_logits) lm += (double)c->router_aux_loss_coef * aux * 26.0; /* N = 2 x 13 */
    return lm;
}

static void model_fd_tiled(sharc_family f, bool tie, int tiles) {
    model_ctx x;
    setup_tiled(&x, f, 2, 13, false, tie, tiles);
    sharc_fsdp_zero_grad(x.e);
    double loss = sharc_model_forward_backward(x.m, x.e, x.in, x.tgt, 1.0f);
    ASSERT_NEAR(loss, model_loss(&x), 1e-6, 0);
    for (int u = 0; u < sharc_fsdp_num_units(x.e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(x.e, u);
        /* fd_check perturbs p between forward passes: one process, whose gather
         * reads the shard itself and has no shared window to synchronise */
        sharc_fsdp_shard_write_begin(x.e);
        float *p = sharc_fsdp_shard_write(x.e, u), *g = sharc_fsdp_shard_grads(x.e, u);
        sharc_fsdp_shard_write_end(x.e);
        for (int i = 0; i < s->nparams; i++) {
            const sharc_param_spec *ps = &s->params[i];
            fd_check(model_loss, &x, p + ps->offset, g + ps->offset, ps->numel > 300 ? 300 : ps->numel,
                     variant == 1 ? 2e-3f : 1e-2f, 3e-2, 2e-3, ps->name);
        }
    }
    teardown(&x);
}

static void model_fd(sharc_family f, bool tie) { model_fd_tiled(f, tie, 1); }
static void ac_identical(sharc_family f);

TEST(model_gpt2_finite_difference) { model_fd(SHARC_FAMILY_GPT2, true); }
TEST(model_llama_finite_difference) { model_fd(SHARC_FAMILY_LLAMA, false); }
/* Llama with tied embeddings through the tiled MLP (note [tiled-mlp]): 26
 * rows in 3 chunks of 9, 9 and 8 */
TEST(model_llama_tied_finite_difference) { model_fd_tiled(SHARC_FAMILY_LLAMA, true, 3); }
TEST(model_qwen2_finite_difference) {
    variant = 1;
    model_fd(SHARC_FAMILY_LLAMA, false);
}
TEST(model_qwen3_finite_difference) {
    variant = 2;
    model_fd(SHARC_FAMILY_LLAMA, true);
}
TEST(model_llama31_finite_difference) {
    variant = 3;
    model_fd(SHARC_FAMILY_LLAMA, false);
}

/* Qwen3-MoE (note [moe]): router and experts against finite differences,
 * the auxiliary loss included (coef 0.05), top-k renormalised with a dense
 * layer beside (4), and not renormalised with every layer MoE (5). */
TEST(model_qwen3_moe_finite_difference) {
    variant = 4;
    model_fd(SHARC_FAMILY_LLAMA, false);
}
TEST(model_qwen3_moe_all_sparse_finite_difference) {
    variant = 5;
    model_fd(SHARC_FAMILY_LLAMA, true);
}

/* Note [moe-units]: each expert its own unit; the same finite differences. */
TEST(model_qwen3_moe_expert_units_finite_difference) {
    variant = 6;
    model_fd(SHARC_FAMILY_LLAMA, false);
}

/* Note [moe-units]: experts as units compute what experts in the block do,
 * bit for bit (the same kernels in the same order), with and without
 * activation checkpointing: the loss and every gradient, matched by name. */
static void expert_units_identical(bool ac) {
    model_ctx a, b;
    variant = 5;
    setup(&a, SHARC_FAMILY_LLAMA, 2, 13, false, false);
    variant = 7;
    setup(&b, SHARC_FAMILY_LLAMA, 2, 13, ac, false);
    ASSERT_EQ(sharc_fsdp_num_units(a.e), 4);
    ASSERT_EQ(sharc_fsdp_num_units(b.e), 4 + 2 * 4);
    /* b's parameters from a's, by name */
    int copied = 0;
    sharc_fsdp_shard_write_begin(a.e);
    sharc_fsdp_shard_write_begin(b.e);
    for (int ub = 0; ub < sharc_fsdp_num_units(b.e); ub++) {
        const sharc_unit_spec *sb = sharc_fsdp_unit_spec(b.e, ub);
        float *pb = sharc_fsdp_shard_write(b.e, ub);
        for (int i = 0; i < sb->nparams; i++)
            for (int ua = 0; ua < sharc_fsdp_num_units(a.e); ua++) {
                const sharc_unit_spec *sa = sharc_fsdp_unit_spec(a.e, ua);
                int j = sharc_unit_find_param(sa, sb->params[i].name);
                if (j < 0) continue;
                memcpy(pb + sb->params[i].offset, sharc_fsdp_shard_write(a.e, ua) + sa->params[j].offset,
                       sizeof(float) * (size_t)sb->params[i].numel);
                copied++;
            }
    }
    sharc_fsdp_shard_write_end(b.e);
    sharc_fsdp_shard_write_end(a.e);
    ASSERT_EQ(copied, 1 + 2 * (8 + 1 + 12) + 2); /* embed, 2 blocks (attention, norms, router, 4 experts), head */
    sharc_fsdp_zero_grad(a.e);
    sharc_fsdp_zero_grad(b.e);
    double la = sharc_model_forward_backward(a.m, a.e, a.in, a.tgt, 0.04f);
    double lb = sharc_model_forward_backward(b.m, b.e, b.in, b.tgt, 0.04f);
    ASSERT_TRUE(la == lb);
    for (int ub = 0; ub < sharc_fsdp_num_units(b.e); ub++) {
        const sharc_unit_spec *sb = sharc_fsdp_unit_spec(b.e, ub);
        const float *gb = sharc_fsdp_shard_grads(b.e, ub);
        for (int i = 0; i < sb->nparams; i++)
            for (int ua = 0; ua < sharc_fsdp_num_units(a.e); ua++) {
                const sharc_unit_spec *sa = sharc_fsdp_unit_spec(a.e, ua);
                int j = sharc_unit_find_param(sa, sb->params[i].name);
                if (j >= 0)
                    ASSERT_TRUE(memcmp(gb + sb->params[i].offset,
                                       sharc_fsdp_shard_grads(a.e, ua) + sa->params[j].offset,
                                       sizeof(float) * (size_t)sb->params[i].numel) == 0);
            }
    }
    teardown(&a);
    teardown(&b);
}
TEST(model_moe_expert_units_identical) { expert_units_identical(false); }
TEST(model_moe_expert_units_checkpointing_identical) { expert_units_identical(true); }

/* Note [moe-units]: Qwen3-30B-A3B's 128 experts per layer: refused in the
 * block unit (SHARC_MAX_UNIT_PARAMS) with the key named, accepted as units. */
TEST(model_moe_128_experts_build_as_units) {
    sharc_model_config c;
    variant = 5;
    small_config(&c, SHARC_FAMILY_LLAMA);
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    sharc_model *m = NULL;
    ASSERT_TRUE(sharc_model_init(&m, &c, NULL) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "fsdp.wrap_policy.moe_experts") != NULL);
    c.experts_as_units = true;
    ASSERT_OK(sharc_model_init(&m, &c, NULL));
    ASSERT_EQ(sharc_model_num_units(m), 4 + 2 * 128);
    const sharc_unit_spec *u = sharc_model_units(m);
    ASSERT_EQ(u[4 + 128 + 127].nparams, 3);
    ASSERT_TRUE(strcmp(u[4 + 128 + 127].params[2].name, "model.layers.1.mlp.experts.127.down_proj.weight") == 0);
    const sharc_unit_schedule *sch = sharc_model_schedule(m);
    ASSERT_EQ(sch->max_live, 2);
    ASSERT_EQ(sch->order[2], 4);       /* block 0, then its experts */
    ASSERT_EQ(sch->order[2 + 128], 2); /* block 1 */
    ASSERT_EQ(sch->order[259], 3);     /* the head last */
    sharc_model_free(m);
}

/* A router of zeros is uniform: the auxiliary loss is exactly K (HF's
 * load_balancing_loss_func: E * sum_e f_e P_e with P_e = 1/E, sum_e f_e = K). */
TEST(model_moe_aux_loss_is_k_for_a_uniform_router) {
    variant = 5;
    model_ctx x;
    setup(&x, SHARC_FAMILY_LLAMA, 2, 13, false, false);
    sharc_fsdp_shard_write_begin(x.e);
    for (int u = 0; u < sharc_fsdp_num_units(x.e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(x.e, u);
        float *p = sharc_fsdp_shard_write(x.e, u);
        for (int i = 0; i < s->nparams; i++)
            if (strstr(s->params[i].name, ".mlp.gate.weight"))
                memset(p + s->params[i].offset, 0, sizeof(float) * (size_t)s->params[i].numel);
    }
    sharc_fsdp_shard_write_end(x.e);
    double lm = sharc_model_forward_loss(x.m, x.e, x.in, x.tgt), aux = -1;
    int idle = -1;
    sharc_model_moe_stats(x.m, &aux, &idle);
    ASSERT_TRUE(lm > 0);
    ASSERT_NEAR(aux, 2.0, 1e-6, 0);
    ASSERT_EQ(idle, 4); /* ties go to the lower experts: 0 and 1 take every token of both layers */
    /* the reported loss adds coef * aux per token: 26 tokens, coef 0.05 */
    sharc_fsdp_zero_grad(x.e);
    double l2 = sharc_model_forward_backward(x.m, x.e, x.in, x.tgt, 1.0f);
    ASSERT_NEAR(l2, lm + 0.05 * 2.0 * 26.0, 1e-4, 0);
    teardown(&x);
}

/* Activation checkpointing recomputes the routing too: bit-identical. */
TEST(model_moe_activation_checkpointing_identical) {
    variant = 4;
    ac_identical(SHARC_FAMILY_LLAMA);
}

/* Llama-3.1-8B's RoPE (theta 5e5, hd 128, factor 8, low 1, high 4, original
 * 8192) against float64 values of Hugging Face's llama3 rule: 29 frequencies
 * kept, 6 smoothed, 29 divided by 8. */
TEST(model_rope_llama3_inv_freq) {
    sharc_model_config c;
    sharc_model_config_default(&c, SHARC_FAMILY_LLAMA);
    c.embed_dim = 4096;
    c.num_heads = 32;
    c.rope_theta = 500000.0f;
    c.rope_factor = 8.0f;
    c.rope_low_freq_factor = 1.0f;
    c.rope_high_freq_factor = 4.0f;
    c.rope_original_max_pos = 8192;
    ASSERT_OK(sharc_model_config_validate(&c));
    float f[64], plain[64];
    sharc_model_rope_inv_freq(&c, f);
    c.rope_factor = 0.0f;
    sharc_model_rope_inv_freq(&c, plain);
    int kept = 0, divided = 0, smoothed = 0;
    for (int i = 0; i < 64; i++) {
        if (f[i] == plain[i]) kept++;
        else if (fabsf(f[i] - plain[i] / 8.0f) <= 1e-7f * plain[i]) divided++;
        else smoothed++;
    }
    ASSERT_EQ(kept, 29);
    ASSERT_EQ(smoothed, 6);
    ASSERT_EQ(divided, 29);
    ASSERT_NEAR(f[0], 1.0, 1e-6, 0);
    ASSERT_NEAR(f[20], 1.656044008e-2, 1e-6, 0);
    ASSERT_NEAR(f[30], 1.371893568e-3, 1e-6, 0);
    ASSERT_NEAR(f[40], 3.428102196e-5, 1e-6, 0);
    ASSERT_NEAR(f[63], 3.068925989e-7, 1e-6, 0);
}

/* Note [packing]: three samples packed into one row of 16 positions (5, 6
 * and 3 tokens, then 2 of padding) give the loss and every gradient of the
 * same samples padded one per row (B = 3): the loss within 1e-6, every
 * gradient within 1e-5 of its tensor's largest element (fp32 rounding: the
 * attention products run over other key ranges, so their rounding differs;
 * observed up to 4.9e-6 with Qwen2's biases, and the padded rows merely
 * reversed already move single elements by 1.4e-6). Positions restart per sample (RoPE, and GPT-2's learned table),
 * attention stays inside each sample, targets never cross a boundary. */
static void packed_vs_padded(sharc_family f) {
    const int T = 16, lens[3] = {5, 6, 3};
    model_ctx pk, pd;
    setup_tiled(&pk, f, 1, T, false, f == SHARC_FAMILY_GPT2, 1);
    setup_tiled(&pd, f, 3, T, false, f == SHARC_FAMILY_GPT2, 1);
    int32_t pos[16];
    int t = 0;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < lens[s]; i++, t++) {
            int32_t tok = (int32_t)(sharc_rng_u64(9, (uint64_t)s, (uint64_t)i) % 37);
            int32_t tgt = i == 1 ? -1 : (int32_t)(sharc_rng_u64(9, 10 + (uint64_t)s, (uint64_t)i) % 37);
            pk.in[t] = pd.in[s * T + i] = tok;
            pk.tgt[t] = pd.tgt[s * T + i] = tgt;
            pos[t] = i;
        }
    for (int p = 0; t < T; t++, p++) {
        pk.in[t] = 0;
        pk.tgt[t] = -1;
        pos[t] = p;
    }
    for (int s = 0; s < 3; s++)
        for (int i = lens[s]; i < T; i++) {
            pd.in[s * T + i] = (int32_t)(i % 37); /* padding: anything */
            pd.tgt[s * T + i] = -1;
        }
    ASSERT_OK(sharc_model_set_positions(pk.m, pos));
    sharc_fsdp_zero_grad(pk.e);
    sharc_fsdp_zero_grad(pd.e);
    double lk = sharc_model_forward_backward(pk.m, pk.e, pk.in, pk.tgt, 0.1f);
    double ld = sharc_model_forward_backward(pd.m, pd.e, pd.in, pd.tgt, 0.1f);
    ASSERT_NEAR(lk, ld, 1e-6, 0);
    for (int u = 0; u < sharc_fsdp_num_units(pk.e); u++) {
        int64_t n = sharc_fsdp_shard_numel(pk.e, u);
        const float *a = sharc_fsdp_shard_grads(pk.e, u), *b = sharc_fsdp_shard_grads(pd.e, u);
        double scale = 0.0;
        for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
        ASSERT_TRUE(scale > 0.0);
        ASSERT_ALLCLOSE(a, b, n, 0, 1e-5 * scale);
    }
    /* without the positions the same row is one sequence: a different loss */
    ASSERT_OK(sharc_model_set_positions(pk.m, NULL));
    double lw = sharc_model_forward_backward(pk.m, pk.e, pk.in, pk.tgt, 0.1f);
    ASSERT_TRUE(fabs(lw - ld) > 1e-3 * fabs(ld));
    /* positions that neither restart at 0 nor continue are refused */
    pos[3] = 7;
    ASSERT_TRUE(sharc_model_set_positions(pk.m, pos) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "position 7 of token 3 of row 0: expected 0") != NULL);
    teardown(&pk);
    teardown(&pd);
}

TEST(model_packed_equals_padded_gpt2) { packed_vs_padded(SHARC_FAMILY_GPT2); }
TEST(model_packed_equals_padded_llama) { packed_vs_padded(SHARC_FAMILY_LLAMA); }
TEST(model_packed_equals_padded_qwen3_llama31) {
    for (variant = 1; variant <= 3; variant++) packed_vs_padded(SHARC_FAMILY_LLAMA);
    variant = 0;
}

/* Activation checkpointing recomputes the same kernels on the same inputs:
 * the loss and every gradient are bit-identical. */
static void ac_identical(sharc_family f) {
    model_ctx a, b;
    setup(&a, f, 2, 13, false, f == SHARC_FAMILY_GPT2);
    setup(&b, f, 2, 13, true, f == SHARC_FAMILY_GPT2);
    sharc_fsdp_zero_grad(a.e);
    sharc_fsdp_zero_grad(b.e);
    double la = sharc_model_forward_backward(a.m, a.e, a.in, a.tgt, 0.04f);
    double lb = sharc_model_forward_backward(b.m, b.e, b.in, b.tgt, 0.04f);
    ASSERT_TRUE(la == lb);
    for (int u = 0; u < sharc_fsdp_num_units(a.e); u++) {
        int64_t n = sharc_fsdp_shard_numel(a.e, u);
        ASSERT_TRUE(memcmp(sharc_fsdp_shard_grads(a.e, u), sharc_fsdp_shard_grads(b.e, u), (size_t)n * sizeof(float)) ==
                    0);
    }
    teardown(&a);
    teardown(&b);
}

TEST(model_gpt2_activation_checkpointing_identical) { ac_identical(SHARC_FAMILY_GPT2); }
TEST(model_llama_activation_checkpointing_identical) { ac_identical(SHARC_FAMILY_LLAMA); }

/* Activation memory: checkpointing keeps one block's set instead of L. */
TEST(model_activation_checkpointing_saves_memory) {
    sharc_model_config c;
    small_config(&c, SHARC_FAMILY_GPT2);
    c.num_layers = 6;
    sharc_model *m;
    ASSERT_OK(sharc_model_init(&m, &c, NULL));
    sharc_mem_stats s0, s1, s2;
    sharc_mem_get(&s0);
    ASSERT_OK(sharc_model_plan(m, 2, 16, false));
    sharc_mem_get(&s1);
    ASSERT_OK(sharc_model_plan(m, 2, 16, true));
    sharc_mem_get(&s2);
    int64_t full = s1.current[SHARC_MEM_ACTIVATIONS] - s0.current[SHARC_MEM_ACTIVATIONS];
    int64_t ckpt = s2.current[SHARC_MEM_ACTIVATIONS] - s0.current[SHARC_MEM_ACTIVATIONS];
    /* per block and token: 16 C floats stored without, C with checkpointing */
    int64_t per_set = ((int64_t)2 * 16 * (48 * 15 + 4) + 2 * 3 * 16) * 4;
    ASSERT_EQ(full - ckpt, 5 * per_set);
    sharc_model_free(m);
}

/* Note [tiled-mlp] against the untiled MLP (DeepSpeed's TiledMLP test shape:
 * 125 rows, so the last chunk is short; s = 1, 2, 4, 7 chunks): the loss
 * within 1e-6 relative (outputs are the same rows, only GEMM blocking may
 * differ), every parameter gradient within 1e-5 relative + 1e-6 of its
 * unit's largest (chunk sums of the weight gradients in another order: a
 * small sum with cancellation keeps its absolute, not its relative, error);
 * s = 1 is the untiled code,
 * bit for bit; checkpointing on and off; and the activation bytes drop by
 * the (B*T, F + Fa) buffers of every block and of their gradients. */
static void tiled_vs_untiled(sharc_family f, bool ac) {
    const int B = 1, T = 125;
    const int shards[] = {1, 2, 4, 7};
    model_ctx ref;
    sharc_mem_stats m0, m1;
    sharc_mem_get(&m0);
    setup_tiled(&ref, f, B, T, ac, f == SHARC_FAMILY_GPT2, 1);
    sharc_mem_get(&m1);
    int64_t untiled_bytes = m1.current[SHARC_MEM_ACTIVATIONS] - m0.current[SHARC_MEM_ACTIVATIONS];
    sharc_fsdp_zero_grad(ref.e);
    double lr = sharc_model_forward_backward(ref.m, ref.e, ref.in, ref.tgt, 0.01f);
    for (int i = 0; i < 4; i++) {
        model_ctx x;
        sharc_mem_get(&m0);
        setup_tiled(&x, f, B, T, ac, f == SHARC_FAMILY_GPT2, shards[i]);
        sharc_mem_get(&m1);
        int64_t bytes = m1.current[SHARC_MEM_ACTIVATIONS] - m0.current[SHARC_MEM_ACTIVATIONS];
        sharc_fsdp_zero_grad(x.e);
        double l = sharc_model_forward_backward(x.m, x.e, x.in, x.tgt, 0.01f);
        if (shards[i] == 1) ASSERT_TRUE(l == lr);
        else ASSERT_NEAR(l, lr, 1e-6, 0);
        for (int u = 0; u < sharc_fsdp_num_units(x.e); u++) {
            int64_t n = sharc_fsdp_shard_numel(x.e, u);
            const float *g = sharc_fsdp_shard_grads(x.e, u), *gr = sharc_fsdp_shard_grads(ref.e, u);
            if (shards[i] == 1) {
                ASSERT_TRUE(memcmp(g, gr, (size_t)n * sizeof(float)) == 0);
                continue;
            }
            double scale = 0.0;
            for (int64_t k = 0; k < n; k++) scale = fabs((double)gr[k]) > scale ? fabs((double)gr[k]) : scale;
            for (int64_t k = 0; k < n; k++)
                if (!(fabs((double)g[k] - gr[k]) <= 1e-5 * fabs((double)gr[k]) + 1e-6 * scale))
                    TEST_FAIL_AT("%d chunks, unit %d element %lld: %.9g tiled, %.9g untiled (unit's largest %.3g)",
                                 shards[i], u, (long long)k, g[k], gr[k], scale);
        }
        /* what the MLP no longer keeps: per block (without checkpointing) or once, its (N, F + Fa)
         * intermediates, and the gradient buffers, (N, F + Fa) for Llama, (N, F) for GPT-2 (no dfca:
         * the fused DGELU backward, note [gemm-gelu]); one chunk of each remains */
        const sharc_model_config *c = sharc_model_get_config(x.m);
        int64_t F = f == SHARC_FAMILY_LLAMA ? 2 * c->ff_hidden_dim : c->ff_hidden_dim, Fa = c->ff_hidden_dim;
        int64_t N = (int64_t)B * T, rows = (N + shards[i] - 1) / shards[i], sets = ac ? 1 : c->num_layers;
        int64_t G = f == SHARC_FAMILY_LLAMA ? F + Fa : F; /* dfc (and dfca) */
        int64_t saved = shards[i] == 1 ? 0 : 4 * ((sets * N - rows) * (F + Fa) + (N - rows) * G);
        ASSERT_EQ(untiled_bytes - bytes, saved);
        ASSERT_EQ(bytes, sharc_model_activation_bytes(x.m, B, T, ac));
        teardown(&x);
    }
    teardown(&ref);
}

TEST(model_tiled_mlp_matches_untiled) {
    tiled_vs_untiled(SHARC_FAMILY_GPT2, false);
    tiled_vs_untiled(SHARC_FAMILY_GPT2, true);
    tiled_vs_untiled(SHARC_FAMILY_LLAMA, false);
    tiled_vs_untiled(SHARC_FAMILY_LLAMA, true);
}

/* The planner's activation bytes (sharc_model_activation_bytes) are exactly
 * what sharc_model_plan allocates: both families, checkpointing on and off,
 * a sequence that is not a multiple of the attention block, a head chunked
 * in several pieces (V large against HEAD_CHUNK_BYTES) and a short one;
 * each also as the last of 3 sequence-parallel ranks (note [ulysses]: the
 * head-sharded sets at 3 T and the exchange buffers; Llama's one key/value
 * head replicated). */
TEST(model_activation_bytes_match_the_plan) {
    for (int fam = 0; fam < 2; fam++)
        for (int ac = 0; ac < 2; ac++)
            for (int shape = 0; shape < 6; shape++) {
                const int sp = shape >= 3 ? 3 : 1;
                sharc_model_config c;
                small_config(&c, fam ? SHARC_FAMILY_LLAMA : SHARC_FAMILY_GPT2);
                c.num_layers = 3;
                c.max_seq_len = 200;
                if (shape % 3 == 2) c.vocab_size = 300000; /* 16-row head chunks */
                int B = shape % 3 == 1 ? 3 : 1, T = shape % 3 == 1 ? 131 : 16;
                sharc_model *m;
                ASSERT_OK(sharc_model_init(&m, &c, NULL));
                ASSERT_OK(sharc_model_set_sequence_parallel(m, sp, sp - 1));
                sharc_mem_stats s0, s1;
                sharc_mem_get(&s0);
                ASSERT_OK(sharc_model_plan(m, B, T, ac));
                sharc_mem_get(&s1);
                int64_t got = s1.current[SHARC_MEM_ACTIVATIONS] - s0.current[SHARC_MEM_ACTIVATIONS];
                if (got != sharc_model_activation_bytes(m, B, T, ac))
                    TEST_FAIL_AT("family %d ac %d shape %d: %lld allocated, %lld planned", fam, ac, shape,
                                 (long long)got, (long long)sharc_model_activation_bytes(m, B, T, ac));
                sharc_model_free(m);
            }
}

/* Two micro-batches of one sequence, each scaled by 1/total, accumulate to
 * the gradient of one batch of two sequences. */
TEST(model_micro_batches_accumulate) {
    model_ctx a, b;
    setup(&a, SHARC_FAMILY_LLAMA, 2, 13, false, false);
    setup(&b, SHARC_FAMILY_LLAMA, 1, 13, false, false);
    float scale = 1.0f / 25.0f; /* 26 targets, one masked */
    sharc_fsdp_zero_grad(a.e);
    sharc_fsdp_zero_grad(b.e);
    double la = sharc_model_forward_backward(a.m, a.e, a.in, a.tgt, scale);
    double lb = sharc_model_forward_backward(b.m, b.e, a.in, a.tgt, scale);
    lb += sharc_model_forward_backward(b.m, b.e, a.in + 13, a.tgt + 13, scale);
    ASSERT_NEAR(lb, la, 1e-6, 0);
    for (int u = 0; u < sharc_fsdp_num_units(a.e); u++)
        ASSERT_ALLCLOSE(sharc_fsdp_shard_grads(b.e, u), sharc_fsdp_shard_grads(a.e, u), sharc_fsdp_shard_numel(a.e, u),
                        1e-4, 2e-6);
    teardown(&a);
    teardown(&b);
}

TEST(model_units_and_names) {
    sharc_model_config c;
    small_config(&c, SHARC_FAMILY_GPT2);
    sharc_model *m;
    ASSERT_OK(sharc_model_init(&m, &c, NULL));
    ASSERT_EQ(sharc_model_num_units(m), 4);
    const sharc_unit_spec *u = sharc_model_units(m);
    ASSERT_TRUE(u[0].root); /* tied wte */
    ASSERT_TRUE(strcmp(u[1].params[2].name, "h.0.attn.c_attn.weight") == 0);
    ASSERT_EQ(u[1].params[2].shape[0], 144);
    ASSERT_TRUE(u[1].params[2].decay && !u[1].params[0].decay);
    int64_t total = 0;
    for (int i = 0; i < 4; i++) total += u[i].numel;
    ASSERT_EQ(total, sharc_model_num_params(&c));
    sharc_model_free(m);

    small_config(&c, SHARC_FAMILY_LLAMA);
    ASSERT_OK(sharc_model_init(&m, &c, NULL));
    u = sharc_model_units(m);
    ASSERT_TRUE(!u[0].root);
    ASSERT_TRUE(strcmp(u[3].params[1].name, "lm_head.weight") == 0);
    total = 0;
    for (int i = 0; i < 4; i++) total += u[i].numel;
    ASSERT_EQ(total, sharc_model_num_params(&c));
    sharc_model_free(m);

    c.num_kv_heads = 2; /* does not divide 3 heads */
    ASSERT_TRUE(sharc_model_init(&m, &c, NULL) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "model.num_kv_heads") != NULL);
}

/* Inverting the CDF at evenly spaced draws reproduces softmax(logits / temp)
 * restricted to the top k. */
TEST(model_sampling_matches_softmax_top_k) {
    const float logits[5] = {1.0f, 3.0f, 2.0f, -1.0f, 2.5f};
    for (int top_k = 0; top_k <= 3; top_k += 3) {
        const float temp = 0.7f;
        double want[5], z = 0.0;
        for (int i = 0; i < 5; i++) {
            bool kept = top_k == 0 || logits[i] >= 2.0f; /* the top 3 are 3, 2.5, 2 */
            want[i] = kept ? exp(logits[i] / temp) : 0.0;
            z += want[i];
        }
        int count[5] = {0};
        const int n = 100000;
        for (int k = 0; k < n; k++) {
            float l[5];
            memcpy(l, logits, sizeof l);
            count[sharc_sample_logits(l, 5, temp, top_k, ((float)k + 0.5f) / (float)n)]++;
        }
        for (int i = 0; i < 5; i++) ASSERT_NEAR((double)count[i] / n, want[i] / z, 0, 2e-4);
    }
    float l[5];
    memcpy(l, logits, sizeof l);
    ASSERT_EQ(sharc_sample_logits(l, 5, 0.0f, 0, 0.99f), 1); /* greedy */
}

/* The schedule: linear warmup, cosine/linear decay to the floor, constant;
 * clipping as torch.nn.utils.clip_grad_norm_. */
TEST(optim_lr_schedule_and_clip) {
    sharc_optim_config c;
    sharc_optim_config_default(&c);
    c.lr = 1.0f;
    c.min_lr_ratio = 0.1f;
    c.warmup_steps = 4;
    c.decay = SHARC_LR_COSINE;
    ASSERT_NEAR(sharc_lr_at(&c, 0, 14), 0.25, 1e-7, 0);
    ASSERT_NEAR(sharc_lr_at(&c, 3, 14), 1.0, 1e-7, 0);
    ASSERT_NEAR(sharc_lr_at(&c, 4, 14), 1.0, 1e-7, 0);
    ASSERT_NEAR(sharc_lr_at(&c, 9, 14), 0.55, 1e-6, 0); /* halfway: floor + (1 - floor) / 2 */
    ASSERT_NEAR(sharc_lr_at(&c, 14, 14), 0.1, 1e-6, 0);
    ASSERT_NEAR(sharc_lr_at(&c, 100, 14), 0.1, 1e-6, 0);
    c.decay = SHARC_LR_LINEAR;
    ASSERT_NEAR(sharc_lr_at(&c, 9, 14), 0.55, 1e-6, 0);
    ASSERT_NEAR(sharc_lr_at(&c, 6, 14), 1.0 - 0.9 * 0.2, 1e-6, 0);
    c.decay = SHARC_LR_CONSTANT;
    ASSERT_NEAR(sharc_lr_at(&c, 13, 14), 1.0, 0, 0);
    c.max_grad_norm = 1.0f;
    ASSERT_NEAR(sharc_clip_coef(&c, 4.0), 1.0 / (4.0 + 1e-6), 1e-7, 0);
    ASSERT_NEAR(sharc_clip_coef(&c, 0.5), 1.0, 0, 0);
    c.max_grad_norm = 0.0f;
    ASSERT_NEAR(sharc_clip_coef(&c, 400.0), 1.0, 0, 0);
}
