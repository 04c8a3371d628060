/* test_hf.c: Hugging Face import and export. A tiny seeded model of each
 * family (odd sizes) is exported, re-imported bit-exactly (fp32) or to the
 * bf16-rounded values, in one file or in shards with an index; its logits
 * after import match the logits that tools/hf_reference.py (plain PyTorch,
 * Conv1D and rotate-half semantics, float64) computed from the same exported
 * directory (tests/fixtures/hf_reference.safetensors); bad directories give
 * one error naming the file or tensor. */
#include "sharc/dtype.h"
#include "sharc/fileio.h"
#include "sharc/hf.h"
#include "sharc/model.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    sharc_model_config cfg;
    sharc_model *m;
    sharc_fsdp *e;
} tiny;

/* The seeded variants: 0 and 1 are the sharc_family values. */
enum { V_GPT2, V_LLAMA, V_QWEN2, V_QWEN3, V_LLAMA31, V_MISTRAL, V_QWEN3_MOE, V_COUNT };
static const char *const variant_names[] = {"gpt2", "llama", "qwen2", "qwen3", "llama31", "mistral", "qwen3_moe"};

/* GPT-2: C=48, 3 heads, V=37, T=13, tied. Llama: C=48, 3 heads, 1 KV head,
 * intermediate 72, V=37, untied lm_head. Qwen2: the Llama with q/k/v biases.
 * Qwen3: head_dim 20 (not 48/3), q/k norms, tied. Llama-3.1: RoPE scaling
 * factor 8 over an original 32 positions (of hd/2 = 8 frequencies, 1 kept,
 * 2 smoothed, 5 divided). Mistral: a 13-token window (= T: it masks nothing).
 * Qwen3-MoE (note [moe]): the Qwen3 with 3 layers, layer 0 and 2 of 4
 * experts (top-2, renormalised, width 16), layer 1 dense (mlp_only_layers). */
static void tiny_config(sharc_model_config *c, int variant) {
    sharc_family fam = variant == V_GPT2 ? SHARC_FAMILY_GPT2 : SHARC_FAMILY_LLAMA;
    sharc_model_config_default(c, fam);
    c->num_layers = 2;
    c->embed_dim = 48;
    c->num_heads = 3;
    c->vocab_size = 37;
    c->max_seq_len = 13;
    if (fam == SHARC_FAMILY_LLAMA) {
        c->num_kv_heads = 1;
        c->ff_hidden_dim = 72;
        c->tie_embeddings = false;
        c->norm_eps = 1e-6f;
        c->rope_theta = 500.0f;
    }
    if (variant == V_QWEN2) c->qkv_bias = true;
    if (variant == V_QWEN3) {
        c->qk_norm = true;
        c->head_dim = 20;
        c->tie_embeddings = true;
    }
    if (variant == V_LLAMA31) {
        c->rope_factor = 8.0f;
        c->rope_low_freq_factor = 1.0f;
        c->rope_high_freq_factor = 4.0f;
        c->rope_original_max_pos = 32;
    }
    if (variant == V_MISTRAL) c->sliding_window = 5; /* shorter than the 13 positions: it masks */
    if (variant == V_QWEN3_MOE) {
        c->qk_norm = true;
        c->head_dim = 20;
        c->num_layers = 3;
        c->num_experts = 4;
        c->num_experts_per_tok = 2;
        c->moe_intermediate_size = 16;
        c->norm_topk_prob = true;
        c->router_aux_loss_coef = 0.001f;
        snprintf(c->mlp_only_layers, sizeof c->mlp_only_layers, "1");
    }
    ASSERT_OK(sharc_model_config_validate(c));
}

static int tiny_tiles = 1; /* > 1: the MLP tiled in that many chunks (note [tiled-mlp]) */

static void tiny_build(tiny *t, const sharc_model_config *c) {
    t->cfg = *c;
    ASSERT_OK(sharc_model_init(&t->m, c, NULL));
    sharc_model_set_tiled_mlp(t->m, tiny_tiles);
    ASSERT_OK(sharc_model_plan(t->m, 1, c->max_seq_len, false));
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    ASSERT_OK(sharc_fsdp_init(&t->e, sharc_model_units(t->m), sharc_model_num_units(t->m), sharc_model_schedule(t->m),
                              &fc, NULL, sharc_model_device(t->m)));
}

static void tiny_free(tiny *t) {
    sharc_fsdp_free(t->e);
    sharc_model_free(t->m);
}

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Every parameter from a hash of (parameter index, element): norms around 1,
 * biases and matrices around 0, large enough that attention is not uniform. */
static void tiny_fill(tiny *t) {
    int k = 0;
    for (int u = 0; u < sharc_fsdp_num_units(t->e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(t->e, u);
        for (int p = 0; p < s->nparams; p++, k++) {
            const sharc_param_spec *ps = &s->params[p];
            float *v = malloc(sizeof(float) * (size_t)ps->numel);
            for (int64_t i = 0; i < ps->numel; i++) {
                float r =
                    (float)((double)(mix(((uint64_t)k << 32) ^ (uint64_t)i) >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
                v[i] = ps->init == SHARC_INIT_ONES ? 1.0f + 0.2f * r : 0.3f * r;
            }
            ASSERT_OK(sharc_fsdp_param_write_local(t->e, ps->name, v, ps->numel));
            free(v);
        }
    }
}

static void tiny_seeded(tiny *t, int fam) {
    sharc_model_config c;
    tiny_config(&c, fam);
    tiny_build(t, &c);
    tiny_fill(t);
}

static const char *tmp_path(const char *name) {
    static char buf[4][1200];
    static int k;
    char *b = buf[k++ & 3];
    snprintf(b, 1200, "%s/%s", sharc_test_tmpdir(), name);
    return b;
}

/* Every parameter of b equals f(a's value). */
static void assert_params(tiny *a, tiny *b, sharc_dtype dt) {
    for (int u = 0; u < sharc_fsdp_num_units(a->e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(a->e, u);
        for (int p = 0; p < s->nparams; p++) {
            const sharc_param_spec *ps = &s->params[p];
            float *x = malloc(sizeof(float) * (size_t)ps->numel), *y = malloc(sizeof(float) * (size_t)ps->numel);
            ASSERT_OK(sharc_fsdp_param_read_local(a->e, ps->name, x, ps->numel));
            ASSERT_OK(sharc_fsdp_param_read_local(b->e, ps->name, y, ps->numel));
            for (int64_t i = 0; i < ps->numel; i++) {
                float want = dt == SHARC_DT_BF16  ? sharc_bf16_to_f32(sharc_f32_to_bf16(x[i]))
                             : dt == SHARC_DT_F16 ? sharc_f16_to_f32(sharc_f32_to_f16(x[i]))
                                                  : x[i];
                if (memcmp(&want, &y[i], 4) != 0)
                    TEST_FAIL_AT("%s[%lld]: %.9g, expected %.9g", ps->name, (long long)i, (double)y[i], (double)want);
            }
            free(x);
            free(y);
        }
    }
}

static void roundtrip(int fam, sharc_dtype dt, uint64_t shard_bytes, const char *name) {
    tiny a, b;
    tiny_seeded(&a, fam);
    const char *dir = tmp_path(name);
    ASSERT_OK(sharc_hf_export(a.e, NULL, &a.cfg, dir, dt, shard_bytes));
    sharc_model_config c;
    ASSERT_OK(sharc_hf_read_config(dir, &c));
    ASSERT_TRUE(memcmp(&c, &a.cfg, sizeof c) == 0);
    tiny_build(&b, &c);
    ASSERT_OK(sharc_hf_load(b.e, dir));
    assert_params(&a, &b, dt);
    char p[1300];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    ASSERT_EQ(access(p, F_OK) == 0, shard_bytes > 0);
    tiny_free(&a);
    tiny_free(&b);
}

TEST(hf_roundtrip_gpt2_fp32) { roundtrip(SHARC_FAMILY_GPT2, SHARC_DT_F32, 0, "g"); }

TEST(hf_roundtrip_gpt2_untied_and_tied_llama) {
    /* GPT-2 with its own lm_head (unprefixed, as GPT2LMHeadModel names it),
     * Llama tied (no lm_head in the file) */
    for (int f = 0; f < 2; f++) {
        sharc_model_config c, r;
        tiny_config(&c, f ? SHARC_FAMILY_LLAMA : SHARC_FAMILY_GPT2);
        c.tie_embeddings = f == 1;
        tiny a, b;
        tiny_build(&a, &c);
        tiny_fill(&a);
        const char *dir = tmp_path(f ? "tl" : "ug");
        ASSERT_OK(sharc_hf_export(a.e, NULL, &c, dir, SHARC_DT_F32, 0));
        char p[1300];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        sharc_st_file *sf;
        ASSERT_OK(sharc_st_open(&sf, p));
        ASSERT_EQ(sharc_st_find(sf, "lm_head.weight") != NULL, f == 0);
        sharc_st_close(sf);
        ASSERT_OK(sharc_hf_read_config(dir, &r));
        ASSERT_EQ(r.tie_embeddings, f == 1);
        tiny_build(&b, &r);
        ASSERT_OK(sharc_hf_load(b.e, dir));
        assert_params(&a, &b, SHARC_DT_F32);
        tiny_free(&a);
        tiny_free(&b);
    }
}
TEST(hf_roundtrip_llama_fp32) { roundtrip(SHARC_FAMILY_LLAMA, SHARC_DT_F32, 0, "l"); }
TEST(hf_roundtrip_gpt2_bf16_sharded) { roundtrip(SHARC_FAMILY_GPT2, SHARC_DT_BF16, 20000, "gs"); }
TEST(hf_roundtrip_llama_fp16) { roundtrip(SHARC_FAMILY_LLAMA, SHARC_DT_F16, 0, "lh"); }
TEST(hf_roundtrip_llama_fp32_sharded) { roundtrip(SHARC_FAMILY_LLAMA, SHARC_DT_F32, 30000, "ls"); }

/* Each family variant: export -> import (the same config, the same bits) ->
 * export again gives byte-identical files, sharded or not. */
TEST(hf_roundtrip_families_byte_identical) {
    for (int f = V_QWEN2; f < V_COUNT; f++) {
        for (int sharded = 0; sharded < 2; sharded++) {
            tiny a, b;
            tiny_seeded(&a, f);
            char n1[64], n2[64], cmd[3000];
            snprintf(n1, sizeof n1, "rt-%s-%d", variant_names[f], sharded);
            snprintf(n2, sizeof n2, "rt2-%s-%d", variant_names[f], sharded);
            const char *d1 = tmp_path(n1), *d2 = tmp_path(n2);
            ASSERT_OK(sharc_hf_export(a.e, NULL, &a.cfg, d1, SHARC_DT_F32, sharded ? 20000 : 0));
            sharc_model_config c;
            ASSERT_OK(sharc_hf_read_config(d1, &c));
            ASSERT_TRUE(memcmp(&c, &a.cfg, sizeof c) == 0);
            tiny_build(&b, &c);
            ASSERT_OK(sharc_hf_load(b.e, d1));
            assert_params(&a, &b, SHARC_DT_F32);
            ASSERT_OK(sharc_hf_export(b.e, NULL, &b.cfg, d2, SHARC_DT_F32, sharded ? 20000 : 0));
            snprintf(cmd, sizeof cmd, "diff -r %s %s >/dev/null", d1, d2);
            ASSERT_EQ(system(cmd), 0);
            tiny_free(&a);
            tiny_free(&b);
        }
    }
}

TEST(hf_export_layout_gpt2) {
    /* GPT2LMHeadModel's names and Conv1D (in, out) shapes; buffers of the
     * original hub files and an unprefixed layout are accepted on import */
    tiny a, b;
    tiny_seeded(&a, SHARC_FAMILY_GPT2);
    const char *dir = tmp_path("gl");
    ASSERT_OK(sharc_hf_export(a.e, NULL, &a.cfg, dir, SHARC_DT_F32, 0));
    char p[1300];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    sharc_st_file *f;
    ASSERT_OK(sharc_st_open(&f, p));
    const sharc_st_tensor *t = sharc_st_find(f, "transformer.h.1.attn.c_attn.weight");
    ASSERT_TRUE(t != NULL);
    ASSERT_EQ(t->shape[0], 48);
    ASSERT_EQ(t->shape[1], 144);
    t = sharc_st_find(f, "transformer.h.0.mlp.c_proj.weight");
    ASSERT_EQ(t->shape[0], 192);
    ASSERT_EQ(t->shape[1], 48);
    ASSERT_TRUE(sharc_st_find(f, "transformer.wte.weight") && !sharc_st_find(f, "lm_head.weight"));
    ASSERT_TRUE(strcmp(sharc_st_metadata(f, "format"), "pt") == 0);
    /* rewrite it unprefixed with the mask buffers and a tied lm_head copy */
    int n = sharc_st_count(f);
    sharc_st_entry *es = calloc((size_t)n + 3, sizeof *es);
    char **names = calloc((size_t)n, sizeof *names);
    void **data = calloc((size_t)n, sizeof *data);
    for (int i = 0; i < n; i++) {
        const sharc_st_tensor *x = sharc_st_tensor_at(f, i);
        names[i] = strdup(x->name + strlen("transformer."));
        data[i] = malloc((size_t)(x->end - x->begin) + 1);
        ASSERT_OK(sharc_st_read_bytes(f, x, 0, x->end - x->begin, data[i]));
        es[i] =
            (sharc_st_entry){.name = names[i], .dtype = x->dtype, .ndim = x->ndim, .shape = x->shape, .data = data[i]};
    }
    static float mask[13 * 13], mb = -1e4f;
    int64_t mshape[4] = {1, 1, 13, 13};
    es[n] = (sharc_st_entry){.name = "h.0.attn.bias", .dtype = SHARC_DT_F32, .ndim = 4, .shape = mshape, .data = mask};
    es[n + 1] =
        (sharc_st_entry){.name = "h.1.attn.masked_bias", .dtype = SHARC_DT_F32, .ndim = 0, .shape = NULL, .data = &mb};
    const sharc_st_tensor *wte = sharc_st_find(f, "transformer.wte.weight");
    es[n + 2] =
        (sharc_st_entry){.name = "lm_head.weight", .dtype = SHARC_DT_F32, .ndim = 2, .shape = wte->shape, .data = NULL};
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], "wte.weight")) es[n + 2].data = data[i];
    const char *dir2 = tmp_path("gl2");
    ASSERT_OK(sharc_mkdirs(dir2));
    char p2[1300], c1[1300], c2[1300];
    snprintf(p2, sizeof p2, "%s/model.safetensors", dir2);
    ASSERT_OK(sharc_st_write(p2, es, n + 3, NULL, NULL, 0));
    snprintf(c1, sizeof c1, "cp %s/config.json %s/", dir, dir2);
    ASSERT_EQ(system(c1), 0);
    (void)c2;
    tiny_build(&b, &a.cfg);
    ASSERT_OK(sharc_hf_load(b.e, dir2));
    assert_params(&a, &b, SHARC_DT_F32);
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(data[i]);
    }
    free(names);
    free(data);
    free(es);
    sharc_st_close(f);
    tiny_free(&a);
    tiny_free(&b);
}

/* Logits of every prefix (T x V) after importing the exported model; for the
 * Llama family also every gradient of the mean cross-entropy of the
 * reference's targets (float64 autograd), within 1e-4 relative + 1e-5 of the
 * tensor's largest gradient. */
static void reference(int fam) {
    const char *fam_name = variant_names[fam];
    char path[1200], key[64];
    snprintf(path, sizeof path, "%s/hf_reference.safetensors", sharc_test_fixture_dir());
    sharc_st_file *fx;
    ASSERT_OK(sharc_st_open(&fx, path));
    tiny a, b;
    tiny_seeded(&a, fam);
    int T = a.cfg.max_seq_len, V = a.cfg.vocab_size;
    int32_t tok[64];
    float *want = malloc(sizeof(float) * (size_t)(T * V)), got[64];
    snprintf(key, sizeof key, "%s.tokens", fam_name);
    ASSERT_OK(sharc_st_load_i32(fx, key, tok, T));
    snprintf(key, sizeof key, "%s.logits", fam_name);
    ASSERT_OK(sharc_st_load_f32(fx, key, want, (int64_t)T * V));
    const char *dir = tmp_path(fam_name);
    ASSERT_OK(sharc_hf_export(a.e, NULL, &a.cfg, dir, SHARC_DT_F32, 0));
    sharc_model_config c;
    ASSERT_OK(sharc_hf_read_config(dir, &c));
    tiny_build(&b, &c);
    ASSERT_OK(sharc_hf_load(b.e, dir));
    double worst = 0;
    for (int len = 1; len <= T; len++) {
        sharc_model_logits_last(b.m, b.e, tok, len, got);
        for (int v = 0; v < V; v++) {
            double d = fabs((double)got[v] - (double)want[(len - 1) * V + v]);
            if (d > worst) worst = d;
        }
        ASSERT_ALLCLOSE(got, want + (len - 1) * V, V, 1e-5, 1e-5);
    }
    fprintf(stderr, "  %s: max |sharc - pytorch| over %d x %d logits = %.3g\n", fam_name, T, V, worst);
    if (fam != V_GPT2) {
        int32_t tgt[64];
        snprintf(key, sizeof key, "%s.targets", fam_name);
        ASSERT_OK(sharc_st_load_i32(fx, key, tgt, T));
        double loss = sharc_model_forward_backward(b.m, b.e, tok, tgt, 1.0f / (float)T);
        ASSERT_TRUE(isfinite(loss));
        double gworst = 0;
        int compared = 0;
        for (int u = 0; u < sharc_fsdp_num_units(b.e); u++) {
            const sharc_unit_spec *s = sharc_fsdp_unit_spec(b.e, u);
            const float *g = sharc_fsdp_shard_grads(b.e, u);
            for (int p = 0; p < s->nparams; p++, compared++) {
                const sharc_param_spec *ps = &s->params[p];
                float *ref = malloc(sizeof(float) * (size_t)ps->numel);
                snprintf(key, sizeof key, "%s.grad.%s", fam_name, ps->name);
                ASSERT_OK(sharc_st_load_f32(fx, key, ref, ps->numel));
                double scale = 0;
                for (int64_t i = 0; i < ps->numel; i++) scale = fmax(scale, fabs((double)ref[i]));
                for (int64_t i = 0; i < ps->numel; i++) {
                    double d = fabs((double)g[ps->offset + i] - (double)ref[i]);
                    if (d / (scale > 0 ? scale : 1) > gworst) gworst = d / (scale > 0 ? scale : 1);
                }
                ASSERT_ALLCLOSE(g + ps->offset, ref, ps->numel, 1e-4, 1e-5 * (scale > 0 ? scale : 1.0));
                free(ref);
            }
        }
        fprintf(stderr, "  %s: %d gradients, max |sharc - pytorch| / max |grad| = %.3g\n", fam_name, compared, gworst);
    }
    free(want);
    sharc_st_close(fx);
    tiny_free(&a);
    tiny_free(&b);
}

TEST(hf_reference_logits_gpt2) { reference(V_GPT2); }
TEST(hf_reference_logits_llama) { reference(V_LLAMA); }
TEST(hf_reference_qwen2) { reference(V_QWEN2); }
TEST(hf_reference_qwen3) { reference(V_QWEN3); }
TEST(hf_reference_llama31) { reference(V_LLAMA31); }
TEST(hf_reference_mistral) { reference(V_MISTRAL); }
TEST(hf_reference_qwen3_moe) { reference(V_QWEN3_MOE); }

/* With SHARC_HF_FIXTURE_OUT set, write the seeded models there for
 * tools/hf_reference.py (make hf-fixtures); otherwise check the export is
 * deterministic (two exports, identical bytes). */
TEST(hf_reference_models_export) {
    const char *out = getenv("SHARC_HF_FIXTURE_OUT");
    for (int f = 0; f < V_COUNT; f++) {
        tiny a;
        tiny_seeded(&a, f);
        char d1[1200], d2[1200], cmd[5000];
        snprintf(d1, sizeof d1, "%s/%s", out ? out : sharc_test_tmpdir(), variant_names[f]);
        snprintf(d2, sizeof d2, "%s/again-%d", sharc_test_tmpdir(), f);
        ASSERT_OK(sharc_hf_export(a.e, NULL, &a.cfg, d1, SHARC_DT_F32, 0));
        ASSERT_OK(sharc_hf_export(a.e, NULL, &a.cfg, d2, SHARC_DT_F32, 0));
        snprintf(cmd, sizeof cmd,
                 "cmp -s %s/model.safetensors %s/model.safetensors && cmp -s %s/config.json %s/config.json", d1, d2, d1,
                 d2);
        ASSERT_EQ(system(cmd), 0);
        tiny_free(&a);
    }
}

TEST(hf_check_config) {
    tiny a;
    tiny_seeded(&a, SHARC_FAMILY_LLAMA);
    const char *dir = tmp_path("cc");
    ASSERT_OK(sharc_hf_export(a.e, NULL, &a.cfg, dir, SHARC_DT_F32, 0));
    ASSERT_OK(sharc_hf_check_config(dir, &a.cfg));
    sharc_model_config c = a.cfg;
    c.rope_theta = 10000.0f;
    ASSERT_TRUE(sharc_hf_check_config(dir, &c) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "rope_theta is 500, model.rope_theta is 10000") != NULL);
    c = a.cfg;
    c.num_layers = 3;
    ASSERT_TRUE(sharc_hf_check_config(dir, &c) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "num_hidden_layers is 2, model.num_layers is 3") != NULL);
    c = a.cfg;
    c.family = SHARC_FAMILY_GPT2;
    c.num_kv_heads = 0;
    ASSERT_TRUE(sharc_hf_check_config(dir, &c) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "is a llama model, model.family is gpt2") != NULL);
    tiny_free(&a);
}

/* Every config.json key the map writes reads back to the same model field
 * (note [hf-map] in src/io/hf.c): non-default values of both families, and
 * GPT-2's n_inner written as null when it is the 4C default. */
TEST(hf_config_every_key_round_trips) {
    for (int fam = 0; fam < 2; fam++)
        for (int variant = 0; variant < 2; variant++) {
            sharc_model_config c;
            tiny_config(&c, fam ? SHARC_FAMILY_LLAMA : SHARC_FAMILY_GPT2);
            if (variant) { /* every field away from its default */
                c.ff_hidden_dim = 40;
                c.norm_eps = 3e-6f;
                c.init_std = 0.015f;
                c.tie_embeddings = !c.tie_embeddings;
                c.max_seq_len = 11;
                if (fam) c.rope_theta = 12345.0f, c.num_kv_heads = 3;
            }
            ASSERT_OK(sharc_model_config_validate(&c));
            tiny t;
            tiny_build(&t, &c);
            char name[32]; /* room for two whole ints */
            snprintf(name, sizeof name, "rt%d%d", fam, variant);
            const char *dir = tmp_path(name);
            ASSERT_OK(sharc_hf_export(t.e, NULL, &t.cfg, dir, SHARC_DT_BF16, 0));
            sharc_model_config r;
            ASSERT_OK(sharc_hf_read_config(dir, &r));
            if (memcmp(&r, &c, sizeof r) != 0)
                TEST_FAIL_AT("%s: config.json does not read back to the model exported", name);
            ASSERT_OK(sharc_hf_check_config(dir, &c));
            char p[1300], *text;
            size_t len;
            snprintf(p, sizeof p, "%s/config.json", dir);
            ASSERT_OK(sharc_read_file(p, &text, &len));
            ASSERT_TRUE(strstr(text, "\"torch_dtype\": \"bfloat16\"") != NULL);
            if (!fam) ASSERT_TRUE((strstr(text, "\"n_inner\": null") != NULL) == !variant);
            free(text);
            tiny_free(&t);
        }
}

/* ---- bad input ---- */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void expect_error(sharc_status st, const char *a, const char *b) {
    if (st == SHARC_OK) TEST_FAIL_AT("accepted; expected an error saying '%s'", a);
    if (!strstr(sharc_last_error(), a) || (b && !strstr(sharc_last_error(), b)))
        TEST_FAIL_AT("error '%s' does not say '%s' / '%s'", sharc_last_error(), a, b ? b : "");
}

TEST(hf_bad_directories) {
    tiny a, b;
    tiny_seeded(&a, SHARC_FAMILY_LLAMA);
    tiny_build(&b, &a.cfg);
    const char *dir = tmp_path("bad");
    char p[1300], q[1300], cmd[5000];
    ASSERT_OK(sharc_hf_export(a.e, NULL, &a.cfg, dir, SHARC_DT_F32, 30000));
    /* export refuses a non-empty directory and leaves it alone */
    expect_error(sharc_hf_export(a.e, NULL, &a.cfg, dir, SHARC_DT_F32, 0), "is not empty", dir);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    ASSERT_TRUE(access(p, F_OK) != 0);
    /* a name mapped to a shard that lacks it */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    snprintf(
        cmd, sizeof cmd,
        "cp %s %s.orig && sed -i 's/\"model.norm.weight\": "
        "\"model-0000[0-9]-of-00006.safetensors\"/\"model.norm.weight\": \"model-00001-of-00006.safetensors\"/' %s",
        p, p, p);
    ASSERT_EQ(system(cmd), 0);
    expect_error(sharc_hf_load(b.e, dir), "maps 'model.norm.weight' to", "which has no such tensor");
    /* bad JSON in the index */
    write_text(p, "{\"weight_map\": {\"a\": ");
    expect_error(sharc_hf_load(b.e, dir), "model.safetensors.index.json' is not valid JSON", NULL);
    /* a missing shard */
    snprintf(cmd, sizeof cmd, "cp %s.orig %s && mv %s/model-00001-of-00006.safetensors %s/moved", p, p, dir, dir);
    ASSERT_EQ(system(cmd), 0);
    expect_error(sharc_hf_load(b.e, dir), "model-00001-of-00006.safetensors' (holding", "is missing");
    /* a truncated shard */
    snprintf(cmd, sizeof cmd, "head -c 3000 %s/moved > %s/model-00001-of-00006.safetensors", dir, dir);
    ASSERT_EQ(system(cmd), 0);
    expect_error(sharc_hf_load(b.e, dir), "model-00001-of-00006.safetensors", "data bytes but the file has");
    /* a corrupt header */
    snprintf(cmd, sizeof cmd,
             "cp %s/moved %s/model-00001-of-00006.safetensors && printf '\\377\\377' | dd "
             "of=%s/model-00001-of-00006.safetensors bs=1 seek=10 conv=notrunc 2>/dev/null",
             dir, dir, dir);
    ASSERT_EQ(system(cmd), 0);
    expect_error(sharc_hf_load(b.e, dir), "model-00001-of-00006.safetensors", "not valid JSON");
    /* bad JSON in config.json, unsupported keys */
    snprintf(q, sizeof q, "%s/config.json", dir);
    sharc_model_config c;
    write_text(q, "{\"model_type\": \"llama\",");
    expect_error(sharc_hf_read_config(dir, &c), "config.json' is not valid JSON", NULL);
    write_text(
        q,
        "{\"model_type\": \"llama\", \"hidden_size\": 48, \"intermediate_size\": 72, \"num_hidden_layers\": 2,"
        " \"num_attention_heads\": 3, \"vocab_size\": 37, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}");
    expect_error(sharc_hf_read_config(dir, &c), "\"rope_scaling\"", "not supported");
    write_text(q, "{\"model_type\": \"llama\", \"hidden_size\": \"48\"}");
    expect_error(sharc_hf_read_config(dir, &c), "\"hidden_size\" is \"48\"", "expected an integer");
    write_text(q, "{\"model_type\": \"gpt2\", \"n_embd\": 48, \"n_layer\": 2, \"n_head\": 3, \"vocab_size\": 37,"
                  " \"n_positions\": 13, \"activation_function\": \"relu\"}");
    expect_error(sharc_hf_read_config(dir, &c), "\"activation_function\": \"relu\"", "not supported");
    write_text(q, "{\"model_type\": \"gpt2\", \"n_embd\": 48, \"n_layer\": 2, \"n_head\": 5, \"vocab_size\": 37, "
                  "\"n_positions\": 13}");
    expect_error(sharc_hf_read_config(dir, &c), "config.json", "model.num_heads: 5 does not divide");
    write_text(q, "{\"model_type\": \"bert\"}");
    expect_error(sharc_hf_read_config(dir, &c), "model_type 'bert'", "not supported");
    /* a checkpoint of another model: shapes differ */
    const char *dir2 = tmp_path("other");
    sharc_model_config oc = a.cfg;
    oc.embed_dim = 24;
    oc.num_heads = 3;
    tiny o;
    tiny_build(&o, &oc);
    ASSERT_OK(sharc_hf_export(o.e, NULL, &oc, dir2, SHARC_DT_F32, 0));
    expect_error(sharc_hf_load(b.e, dir2), "'model.embed_tokens.weight' has shape [37, 24], this model needs [37, 48]",
                 dir2);
    /* another family */
    tiny g;
    tiny_seeded(&g, SHARC_FAMILY_GPT2);
    const char *dir3 = tmp_path("gpt2");
    ASSERT_OK(sharc_hf_export(g.e, NULL, &g.cfg, dir3, SHARC_DT_F32, 0));
    expect_error(sharc_hf_load(b.e, dir3), "parameter 'model.embed_tokens.weight' is missing", dir3);
    /* no model files */
    expect_error(sharc_hf_load(b.e, sharc_test_tmpdir()), "has neither model.safetensors nor", NULL);
    tiny_free(&a);
    tiny_free(&b);
    tiny_free(&o);
    tiny_free(&g);
}

/* Note [hf-keys]: a Llama-3.1 config in transformers 4.x's layout (rope_theta
 * + rope_scaling) and 5.x's (rope_parameters) read the same; every key is
 * honoured, harmless or refused by name; bos/eos ids come and go with the
 * config, exported only inside the vocabulary. */
#define LLAMA_KEYS                                                                                                     \
    "\"model_type\": \"llama\", \"hidden_size\": 48, \"intermediate_size\": 72, \"num_hidden_layers\": 2, "            \
    "\"num_attention_heads\": 3, \"num_key_value_heads\": 1, \"vocab_size\": 37"
TEST(hf_config_keys) {
    char dir[1200], q[1300];
    snprintf(dir, sizeof dir, "%s", tmp_path("keys"));
    ASSERT_OK(sharc_mkdirs(dir));
    snprintf(q, sizeof q, "%s/config.json", dir);
    sharc_model_config v4, v5;
    write_text(q, "{" LLAMA_KEYS
                  ", \"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
                  " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192},"
                  " \"bos_token_id\": 1, \"eos_token_id\": [2, 3], \"transformers_version\": \"4.43.0\", "
                  "\"attention_dropout\": 0.0}");
    ASSERT_OK(sharc_hf_read_config(dir, &v4));
    ASSERT_NEAR(v4.rope_theta, 500000.0, 0, 0);
    ASSERT_NEAR(v4.rope_factor, 8.0, 0, 0);
    ASSERT_EQ(v4.rope_original_max_pos, 8192);
    ASSERT_EQ(v4.bos_token_id, 1);
    ASSERT_EQ(v4.eos_token_id, 2);
    /* the 5.x layout: theta inside rope_parameters (the defect: read as 10000 before) */
    write_text(
        q,
        "{" LLAMA_KEYS ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0,"
        " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192},"
        " \"bos_token_id\": 1, \"eos_token_id\": 2, \"transformers_version\": \"5.0.0\", \"dtype\": \"bfloat16\"}");
    ASSERT_OK(sharc_hf_read_config(dir, &v5));
    ASSERT_TRUE(memcmp(&v4, &v5, sizeof v4) == 0);
    write_text(q, "{" LLAMA_KEYS ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0}}");
    ASSERT_OK(sharc_hf_read_config(dir, &v5));
    ASSERT_NEAR(v5.rope_theta, 1e6, 0, 0);
    ASSERT_NEAR(v5.rope_factor, 0, 0, 0);
    /* refused by name */
    sharc_model_config c;
    write_text(q, "{" LLAMA_KEYS ", \"attn_logit_softcapping\": 50.0}");
    expect_error(sharc_hf_read_config(dir, &c),
                 "key \"attn_logit_softcapping\" is not one sharc knows for model_type llama", q);
    write_text(q, "{" LLAMA_KEYS
                  ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 1e6, \"factor\": 4.0}}");
    expect_error(sharc_hf_read_config(dir, &c), "\"rope_parameters\" rope_type \"yarn\" is not supported", q);
    write_text(q, "{" LLAMA_KEYS
                  ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e6, \"beta_fast\": 32}}");
    expect_error(sharc_hf_read_config(dir, &c), "\"rope_parameters\".\"beta_fast\" is not a key sharc knows", q);
    write_text(q, "{" LLAMA_KEYS
                  ", \"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e6}}");
    expect_error(sharc_hf_read_config(dir, &c), "disagree", q);
    write_text(q, "{" LLAMA_KEYS ", \"attention_bias\": true}");
    expect_error(sharc_hf_read_config(dir, &c), "\"attention_bias\": true is not supported", q);
    write_text(q,
               "{\"model_type\": \"qwen2\", \"hidden_size\": 48, \"intermediate_size\": 72, \"num_hidden_layers\": 2,"
               " \"num_attention_heads\": 3, \"vocab_size\": 37, \"use_sliding_window\": true, \"sliding_window\": 8,"
               " \"max_window_layers\": 1}");
    expect_error(sharc_hf_read_config(dir, &c), "a sliding window on 1 of 2 layers is not supported", q);
    write_text(q,
               "{\"model_type\": \"mistral\", \"hidden_size\": 48, \"intermediate_size\": 72, \"num_hidden_layers\": 2,"
               " \"num_attention_heads\": 3, \"vocab_size\": 37, \"sliding_window\": 8, \"head_dim\": 20}");
    ASSERT_OK(sharc_hf_read_config(dir, &c));
    ASSERT_EQ(c.sliding_window, 8);
    ASSERT_EQ(c.head_dim, 20);
    ASSERT_TRUE(!c.qkv_bias && !c.qk_norm);
    write_text(q,
               "{\"model_type\": \"qwen3\", \"hidden_size\": 48, \"intermediate_size\": 72, \"num_hidden_layers\": 2,"
               " \"num_attention_heads\": 3, \"vocab_size\": 37, \"head_dim\": 20, \"use_sliding_window\": false,"
               " \"sliding_window\": null, \"max_window_layers\": 2, \"tie_word_embeddings\": true}");
    ASSERT_OK(sharc_hf_read_config(dir, &c));
    ASSERT_TRUE(c.qk_norm && !c.qkv_bias && c.head_dim == 20 && c.sliding_window == 0 && c.tie_embeddings);
    /* bos/eos inside the vocabulary: a 300-token GPT-2 exports null, a 50257-token one 50256 */
    for (int big = 0; big < 2; big++) {
        sharc_model_config g;
        tiny_config(&g, V_GPT2);
        g.vocab_size = big ? 50257 : 300;
        tiny t;
        tiny_build(&t, &g);
        char name[32];
        snprintf(name, sizeof name, "bos-%d", big);
        const char *d = tmp_path(name);
        ASSERT_OK(sharc_hf_export(t.e, NULL, &g, d, SHARC_DT_BF16, 0));
        char *text;
        size_t len;
        snprintf(q, sizeof q, "%s/config.json", d);
        ASSERT_OK(sharc_read_file(q, &text, &len));
        ASSERT_TRUE(strstr(text, big ? "\"bos_token_id\": 50256" : "\"bos_token_id\": null") != NULL);
        ASSERT_TRUE(strstr(text, big ? "\"eos_token_id\": 50256" : "\"eos_token_id\": null") != NULL);
        free(text);
        tiny_free(&t);
    }
}

/* Note [kv-cache]: for every family variant, generation with the key/value
 * cache (a 5-token prefill, then one token at a time) gives the logits of
 * the uncached forward over the whole prefix within fp32 rounding, and so
 * the same greedy tokens, up to the planned 13 positions. */
TEST(generate_kv_cache_matches_recompute) {
    /* every variant untiled, then GPT-2 and Llama with a tiled MLP, whose
     * cached path runs the MLP in chunks of its own buffers */
    for (int f = 0; f < V_COUNT + 2; f++) {
        tiny_tiles = f < V_COUNT ? 1 : 3;
        tiny a;
        tiny_seeded(&a, f < V_COUNT ? f : (f == V_COUNT ? V_GPT2 : V_LLAMA));
        int T = a.cfg.max_seq_len, V = a.cfg.vocab_size;
        int32_t ids[64] = {3, 17, 5, 30, 11};
        int n = 5;
        float got[64], want[64];
        ASSERT_OK(sharc_model_kv_enable(a.m));
        ASSERT_OK(sharc_model_kv_append(a.m, a.e, ids, n, got));
        double worst = 0;
        for (;;) {
            sharc_model_logits_last(a.m, a.e, ids, n, want);
            for (int v = 0; v < V; v++) worst = fmax(worst, fabs((double)got[v] - (double)want[v]));
            ASSERT_ALLCLOSE(got, want, V, 1e-5, 1e-5);
            int g = sharc_sample_logits(got, V, 0.0f, 0, 0.5f), w = sharc_sample_logits(want, V, 0.0f, 0, 0.5f);
            ASSERT_EQ(g, w);
            if (n == T) break;
            ids[n++] = g;
            ASSERT_OK(sharc_model_kv_append(a.m, a.e, ids + n - 1, 1, got));
        }
        ASSERT_EQ(sharc_model_kv_len(a.m), T);
        /* full: one more position is refused, not written past the cache */
        ASSERT_TRUE(sharc_model_kv_append(a.m, a.e, ids, 1, got) == SHARC_ERR_INVALID);
        fprintf(stderr, "  %s%s: %d greedy tokens, max |cached - uncached| logit %.3g\n",
                variant_names[f < V_COUNT ? f : (f == V_COUNT ? V_GPT2 : V_LLAMA)],
                tiny_tiles > 1 ? " (tiled MLP)" : "", T - 5, worst);
        tiny_free(&a);
    }
    tiny_tiles = 1;
}
