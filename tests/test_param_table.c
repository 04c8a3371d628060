/* test_param_table.c: the parameter specs every supported family and variant
 * builds (note [param-table] in src/model/params.c), against a checked-in
 * golden file, tests/fixtures/param_specs.txt.
 *
 * For each configuration below the dump holds: sharc_model_num_params,
 * sharc_model_flops_per_token at T = 64 (hex floats), the unit schedule, and
 * per unit, per parameter: name, shape, init kind and std (hex), decay,
 * frozen, the tp split (dim, parts, tp, rank), numel_local and offset, and
 * the Hugging Face tensor name and transposed flag (sharc_hf_tensor_name).
 *
 * How the golden file was produced: by this test's dump run on the code
 * *before* the parameter table existed (commit "param specs golden", where
 * build_units, the closed num_params formula, tp.c's suffix rules and hf.c's
 * transposed list were hand-kept), with
 *     SHARC_PARAM_SPECS_OUT=tests/fixtures/param_specs.txt \
 *         build/sharc_tests --filter param_specs_golden
 * The table-driven code reproduces it byte for byte but for one line, a fix:
 * GPT-2 untied's num_params was 8128, the old closed formula leaving out
 * its lm_head.weight (V C = 1024) that the specs held all along; it is now
 * the sum over the rows, 9152 (and asserted equal to the specs' sum). */
#include "test.h"

#include "sharc/hf.h"
#include "sharc/model.h"
#include "sharc/status.h"

#include <stdio.h>
#include <string.h>

static sharc_model_config tiny(sharc_family f) {
    sharc_model_config c;
    sharc_model_config_default(&c, f);
    c.num_layers = 2;
    c.embed_dim = 16;
    c.num_heads = 4;
    c.vocab_size = 64;
    c.max_seq_len = 32;
    c.ff_hidden_dim = f == SHARC_FAMILY_GPT2 ? 0 : 24;
    return c;
}

static const char *init_name(sharc_init_kind k) {
    return k == SHARC_INIT_NORMAL ? "normal" : k == SHARC_INIT_ONES ? "ones" : "zeros";
}

/* One configuration's dump; tp 0: no sharc_model_set_tensor_parallel call. */
static void dump(FILE *out, const char *label, const sharc_model_config *c, int tp, int rank, const char *freeze) {
    sharc_model *m;
    if (sharc_model_init(&m, c, NULL) != SHARC_OK) TEST_FAIL_AT("%s: %s", label, sharc_last_error());
    if (tp > 0 && sharc_model_set_tensor_parallel(m, tp, rank) != SHARC_OK)
        TEST_FAIL_AT("%s: %s", label, sharc_last_error());
    int nfrozen = 0;
    if (freeze && sharc_model_freeze(m, freeze, NULL, &nfrozen) != SHARC_OK)
        TEST_FAIL_AT("%s: %s", label, sharc_last_error());
    fprintf(out, "== %s (tp %d rank %d, frozen %d)\n", label, tp, rank, nfrozen);
    fprintf(out, "num_params %lld flops_per_token(64) %a\n", (long long)sharc_model_num_params(c),
            sharc_model_flops_per_token(c, 64));
    const sharc_unit_schedule *s = sharc_model_schedule(m);
    fprintf(out, "schedule max_live %d order", s->max_live);
    for (int i = 0; i < s->n; i++) fprintf(out, " %d%s", s->order[i], s->backward_needs_params[i] ? "" : "-");
    fprintf(out, "\n");
    int64_t total = 0;
    const sharc_unit_spec *units = sharc_model_units(m);
    for (int u = 0; u < sharc_model_num_units(m); u++) {
        const sharc_unit_spec *us = &units[u];
        fprintf(out, "unit %d %s root %d numel %lld nparams %d\n", u, us->name, us->root, (long long)us->numel,
                us->nparams);
        for (int i = 0; i < us->nparams; i++) {
            const sharc_param_spec *p = &us->params[i];
            char hf[SHARC_NAME_MAX + 32];
            bool t = sharc_hf_tensor_name(c->family, p->name, hf, sizeof hf);
            fprintf(out, "  %s [", p->name);
            for (int d = 0; d < p->ndim; d++) fprintf(out, "%s%lld", d ? "," : "", (long long)p->shape[d]);
            fprintf(out, "] %s %a decay %d frozen %d tp %d/%d/%d/%d local %lld off %lld hf %s%s\n", init_name(p->init),
                    (double)p->std, p->decay, p->frozen, p->tp_dim, p->tp_parts, p->tp, p->tp_rank,
                    (long long)p->numel_local, (long long)p->offset, hf, t ? " T" : "");
            total += p->numel;
        }
    }
    fprintf(out, "specs hold %lld\n", (long long)total); /* full tensors, expert units included */
    /* the count is the specs' sum (it was a closed formula that missed GPT-2's untied lm_head) */
    if (tp == 0 && total != sharc_model_num_params(c))
        TEST_FAIL_AT("%s: num_params %lld, the specs hold %lld", label, (long long)sharc_model_num_params(c),
                     (long long)total);
    sharc_model_free(m);
}

static void dump_all(FILE *out) {
    sharc_model_config c = tiny(SHARC_FAMILY_GPT2); /* GPT-2, tied */
    dump(out, "gpt2", &c, 0, 0, NULL);
    for (int r = 0; r < 2; r++) dump(out, "gpt2 tp2 vocab-parallel", &c, 2, r, NULL);
    c.vocab_size = 63;
    dump(out, "gpt2 tp2 replicated vocab", &c, 2, 1, NULL);
    c = tiny(SHARC_FAMILY_GPT2);
    c.tie_embeddings = false;
    dump(out, "gpt2 untied", &c, 0, 0, NULL);

    c = tiny(SHARC_FAMILY_LLAMA); /* Llama, untied, grouped-query */
    c.num_kv_heads = 2;
    dump(out, "llama", &c, 0, 0, NULL);
    dump(out, "llama tp1", &c, 1, 0, NULL);
    for (int r = 0; r < 2; r++) dump(out, "llama tp2 vocab-parallel", &c, 2, r, NULL);
    c.vocab_size = 63;
    dump(out, "llama tp2 replicated vocab", &c, 2, 0, NULL);
    c = tiny(SHARC_FAMILY_LLAMA);
    c.num_kv_heads = 2;
    dump(out, "llama frozen", &c, 0, 0, "model.embed_tokens.,model.layers.0.");

    c = tiny(SHARC_FAMILY_LLAMA); /* Qwen2: q/k/v biases, tied */
    c.num_kv_heads = 2;
    c.qkv_bias = true;
    c.tie_embeddings = true;
    dump(out, "qwen2", &c, 0, 0, NULL);
    dump(out, "qwen2 tp2", &c, 2, 1, NULL);

    c = tiny(SHARC_FAMILY_LLAMA); /* Qwen3: qk_norm, head_dim apart */
    c.num_kv_heads = 2;
    c.qk_norm = true;
    c.head_dim = 8;
    c.tie_embeddings = true;
    dump(out, "qwen3", &c, 0, 0, NULL);

    c = tiny(SHARC_FAMILY_LLAMA); /* Mistral: a window, no parameter of its own */
    c.num_kv_heads = 1;
    c.sliding_window = 8;
    dump(out, "mistral", &c, 0, 0, NULL);

    c = tiny(SHARC_FAMILY_LLAMA); /* Qwen3-MoE: experts in the block, a dense layer */
    c.num_layers = 3;
    c.num_kv_heads = 2;
    c.qk_norm = true;
    c.head_dim = 8;
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 8;
    snprintf(c.mlp_only_layers, sizeof c.mlp_only_layers, "1");
    dump(out, "qwen3-moe", &c, 0, 0, NULL);
    c.experts_as_units = true;
    dump(out, "qwen3-moe expert units", &c, 0, 0, NULL);
    dump(out, "qwen3-moe expert units tp2", &c, 2, 1, NULL); /* note [tp-moe]: gate/up rows, down columns */
    c.experts_as_units = false;
    dump(out, "qwen3-moe tp2", &c, 2, 1, NULL);
    c.qkv_bias = true; /* every variant at once, MoE every other layer */
    c.decoder_sparse_step = 2;
    c.mlp_only_layers[0] = 0;
    dump(out, "moe qkv_bias qk_norm sparse_step 2", &c, 0, 0, NULL);
    c.experts_as_units = true;
    dump(out, "moe qkv_bias qk_norm sparse_step 2 expert units", &c, 0, 0, "model.layers.1.mlp.experts.0.");
}

TEST(param_specs_golden) {
    char *got = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&got, &n);
    ASSERT_TRUE(out != NULL);
    dump_all(out);
    fclose(out);
    const char *regen = getenv("SHARC_PARAM_SPECS_OUT");
    if (regen && *regen) {
        FILE *f = fopen(regen, "w");
        ASSERT_TRUE(f != NULL);
        fwrite(got, 1, n, f);
        fclose(f);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/param_specs.txt", sharc_test_fixture_dir());
    FILE *f = fopen(path, "r");
    if (!f) TEST_FAIL_AT("cannot open %s", path);
    char *want = malloc(n + 2);
    size_t wn = fread(want, 1, n + 1, f);
    fclose(f);
    /* the first differing line, for the failure message */
    size_t i = 0, line = 1, start = 0;
    while (i < n && i < wn && got[i] == want[i]) {
        if (got[i] == '\n') {
            line++;
            start = i + 1;
        }
        i++;
    }
    if (i != n || wn != n) {
        const char *g = got + start, *w = start < wn ? want + start : "";
        TEST_FAIL_AT("%s line %zu differs:\n  got:  %.*s\n  want: %.*s", path, line, (int)strcspn(g, "\n"), g,
                     (int)strcspn(w, "\n"), w);
    }
    free(want);
    free(got);
}
