/* test_torch_parity.c: 20 training steps of a small GPT-2 and a small Llama
 * against a from-scratch PyTorch implementation of the same models
 * (tests/fixtures/<family>_train.safetensors, made by tools/gen_fixtures.py
 * in float64): sharc starts from the reference's initial weights and trains
 * on its batches with its hyperparameters (read from the file's
 * __metadata__), then the step-0 gradients, every step's loss, gradient norm
 * and learning rate, and the final weights are compared.
 *
 * A step is the trainer's own, sharc_train_step_run (src/train/step.c),
 * given the fixture's batch of grad_accum micro-batches: loss scale
 * 1 / (valid targets of the whole step), global norm and clip factor, lr
 * from the schedule, AdamW. The step-0 gradients are read after it: AdamW
 * reads the gradient shards and leaves them as they are.
 *
 * Tolerances (reference fp64, sharc fp32):
 *   gradients at step 0: RTOL 1e-4 + ATOL 1e-5 * max |ref| of the tensor.
 *     Each is a chain of ~15 fp32 kernels of ~1e-6 relative error each;
 *     elements near zero by cancellation get the absolute part. Observed:
 *     the worst element uses 2-3% of this tolerance (at most 4% over six
 *     other generator seeds).
 *   loss of every step: 1e-4 relative (the requirement). Observed on the
 *     committed fixtures: 4.7e-7 (GPT-2), 1.2e-7 (Llama); over six other
 *     generator seeds at most 3.2e-6.
 *   gradient norm: at step 0, 1e-5 relative (observed 3e-8); at later steps
 *     1e-3: the trajectories have drifted apart a little by then (see the
 *     final weights), observed 1.1e-5 here, up to 9e-5 over six other seeds.
 *   learning rate: 1e-6 relative (the step's sharc_lr_at computes in fp32).
 *   final weights: see final_check below. */
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/safetensors.h"
#include "sharc/train.h"
#include "test.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define GRAD_RTOL  1e-4
#define GRAD_ATOL  1e-5 /* times max |ref| of the tensor */
#define LOSS_RTOL  1e-4
#define NORM0_RTOL 1e-5
#define NORM_RTOL  1e-3
#define LR_RTOL    1e-6

/* A number from the fixture's __metadata__ (written with Python's str()). */
static double meta(const sharc_st_file *f, const char *key) {
    const char *v = sharc_st_metadata(f, key);
    if (!v) TEST_FAIL_AT("fixture %s: no __metadata__ key '%s'", sharc_st_path(f), key);
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end) TEST_FAIL_AT("fixture metadata %s = '%s': not a number", key, v);
    return x;
}

static int meta_int(const sharc_st_file *f, const char *key) {
    double x = meta(f, key);
    if (x != (double)(int)x) TEST_FAIL_AT("fixture metadata %s = %g: not an integer", key, x);
    return (int)x;
}

static float *load(const sharc_st_file *f, const char *prefix, const char *name, int64_t n) {
    char full[SHARC_NAME_MAX + 16];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    ASSERT_TRUE(p != NULL);
    ASSERT_OK(sharc_st_load_f32(f, full, p, n));
    return p;
}

/* Final weights. The reference's AdamW (eps 1e-8) divides by sqrt(v) + eps,
 * so the update of an element whose gradient is tiny depends on that
 * gradient's rounding error: no fp32 implementation follows the fp64
 * trajectory exactly there. The extreme case is GPT-2's key bias, whose
 * gradient is exactly zero (softmax ignores a constant added to a row of
 * scores; the reference's is 1e-20): Adam normalises sharc's fp32 rounding
 * noise into real steps. Measured on the committed fixture: the key bias
 * ends up to 2.2e-4 from the reference, other elements 2.3e-5 (torch's own
 * fp32 run of the same script: 3.0e-4 and 3.3e-5); over six other generator
 * seeds, up to 3.3e-4 and 1.7e-4, at most 1.1% of a tensor's elements
 * beyond the tight tolerance below. Llama has no such parameter: 2e-6.
 * So, per parameter tensor:
 *   - every element within FINAL_LOOSE (1e-3) absolute: 3x the worst
 *     observed, yet a tenth of one step at the peak lr (1e-2), the size a
 *     wrong gradient, moment or bias correction moves a weight by;
 *   - at least FINAL_FRACTION (95%) of the elements, GPT-2's key-bias slice
 *     excepted, within FINAL_TIGHT (2e-5 + 1e-4 |ref|). A systematic error
 *     moves most elements of a tensor by more: without weight decay 95% of
 *     wte's elements are beyond it (the total decay over the run is 1.3% of
 *     each weight, 3e-4 for |w| = 0.02), and both parts fail separately for
 *     weight decay 0 or AdamW eps 1e-6. */
#define FINAL_LOOSE      1e-3
#define FINAL_TIGHT_ATOL 2e-5
#define FINAL_TIGHT_RTOL 1e-4
#define FINAL_FRACTION   0.95

typedef struct {
    double loss_rel, norm_rel, grad_used, final_abs, final_abs_other, final_outside;
    char grad_worst[SHARC_NAME_MAX], final_worst[SHARC_NAME_MAX];
} worst_seen;

/* Returns the number of parameters compared. */
static int check_grads(const sharc_st_file *f, sharc_fsdp *e, worst_seen *w) {
    int compared = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        const float *g = sharc_fsdp_shard_grads(e, u);
        for (int p = 0; p < s->nparams; p++) {
            const sharc_param_spec *ps = &s->params[p];
            float *ref = load(f, "grad.", ps->name, ps->numel);
            double scale = 0.0;
            for (int64_t i = 0; i < ps->numel; i++) scale = fmax(scale, fabs((double)ref[i]));
            double atol = GRAD_ATOL * (scale > 0 ? scale : 1.0);
            for (int64_t i = 0; i < ps->numel; i++) {
                double d = fabs((double)g[ps->offset + i] - (double)ref[i]);
                double used = d / (atol + GRAD_RTOL * fabs((double)ref[i]));
                if (used > w->grad_used || isnan(d)) {
                    w->grad_used = used;
                    snprintf(w->grad_worst, sizeof w->grad_worst, "%s", ps->name);
                }
            }
            if (sharc_test_allclose(g + ps->offset, ref, ps->numel, GRAD_RTOL, atol) >= 0)
                fprintf(stderr, "step-0 gradient of %s differs\n", ps->name);
            ASSERT_ALLCLOSE(g + ps->offset, ref, ps->numel, GRAD_RTOL, atol);
            free(ref);
            compared++;
        }
    }
    return compared;
}

/* GPT-2's key-bias slice of c_attn.bias: elements [C, 2C). */
static bool is_key_bias(sharc_family family, const sharc_param_spec *ps, int64_t i, int C) {
    return family == SHARC_FAMILY_GPT2 && strstr(ps->name, ".attn.c_attn.bias") && i >= C && i < 2 * C;
}

static int final_check(const sharc_st_file *f, sharc_fsdp *e, sharc_family family, int C, worst_seen *w) {
    int compared = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        const float *got = sharc_fsdp_shard_params(e, u);
        for (int p = 0; p < s->nparams; p++) {
            const sharc_param_spec *ps = &s->params[p];
            float *ref = load(f, "final.", ps->name, ps->numel);
            int64_t counted = 0, outside = 0;
            for (int64_t i = 0; i < ps->numel; i++) {
                double a = got[ps->offset + i], b = ref[i], d = fabs(a - b);
                if (!(d <= FINAL_LOOSE))
                    TEST_FAIL_AT("final %s[%lld]: %.9g vs reference %.9g (diff %.3g > %g)", ps->name, (long long)i, a,
                                 b, d, FINAL_LOOSE);
                if (d > w->final_abs) {
                    w->final_abs = d;
                    snprintf(w->final_worst, sizeof w->final_worst, "%s[%lld]", ps->name, (long long)i);
                }
                if (is_key_bias(family, ps, i, C)) continue;
                counted++;
                w->final_abs_other = fmax(w->final_abs_other, d);
                if (d > FINAL_TIGHT_ATOL + FINAL_TIGHT_RTOL * fabs(b)) outside++;
            }
            double frac = counted ? (double)outside / (double)counted : 0.0;
            w->final_outside = fmax(w->final_outside, frac);
            if (outside > 0)
                fprintf(stderr, "  final %-44s %5lld of %6lld elements beyond %g + %g |ref|\n", ps->name,
                        (long long)outside, (long long)counted, FINAL_TIGHT_ATOL, FINAL_TIGHT_RTOL);
            if (frac > 1.0 - FINAL_FRACTION)
                TEST_FAIL_AT("final %s: %.1f%% of the elements differ from the reference by more "
                             "than %g + %g |ref| (at most %.0f%% may)",
                             ps->name, 100.0 * frac, FINAL_TIGHT_ATOL, FINAL_TIGHT_RTOL,
                             100.0 * (1.0 - FINAL_FRACTION));
            free(ref);
            compared++;
        }
    }
    return compared;
}

static void parity(sharc_family family) {
    const char *fam = sharc_family_name(family);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s_train.safetensors", sharc_test_fixture_dir(), fam);
    sharc_st_file *f;
    ASSERT_OK(sharc_st_open(&f, path));
    const char *mf = sharc_st_metadata(f, "family");
    ASSERT_TRUE(mf && strcmp(mf, fam) == 0);

    /* the model, exactly as the reference */
    sharc_model_config c;
    sharc_model_config_default(&c, family);
    c.num_layers = meta_int(f, "num_layers");
    c.embed_dim = meta_int(f, "embed_dim");
    c.num_heads = meta_int(f, "num_heads");
    c.num_kv_heads = meta_int(f, "num_kv_heads");
    c.ff_hidden_dim = meta_int(f, "ff_hidden_dim");
    c.vocab_size = meta_int(f, "vocab_size");
    c.max_seq_len = meta_int(f, "max_seq_len");
    c.norm_eps = (float)meta(f, "norm_eps");
    c.rope_theta = (float)meta(f, "rope_theta");
    c.init_std = (float)meta(f, "init_std"); /* unused: the weights are loaded */
    c.tie_embeddings = family == SHARC_FAMILY_GPT2;
    const int S = meta_int(f, "steps"), A = meta_int(f, "grad_accum");
    const int B = meta_int(f, "batch"), T = meta_int(f, "seq_len");
    const int64_t per_step = (int64_t)A * B * T;

    sharc_model *m;
    ASSERT_OK(sharc_model_init(&m, &c, NULL));
    ASSERT_OK(sharc_model_plan(m, B, T, false));
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    sharc_fsdp *e;
    ASSERT_OK(sharc_fsdp_init(&e, sharc_model_units(m), sharc_model_num_units(m), sharc_model_schedule(m), &fc, NULL,
                              sharc_model_device(m)));

    /* every parameter from the fixture; and the fixture has no parameter
     * sharc lacks: init + grad. + final. per parameter, plus 5 run tensors */
    int nparams = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams; p++, nparams++) {
            float *w = load(f, "", s->params[p].name, s->params[p].numel);
            ASSERT_OK(sharc_fsdp_param_write_local(e, s->params[p].name, w, s->params[p].numel));
            free(w);
        }
    }
    ASSERT_EQ(sharc_st_count(f), 3 * nparams + 5);

    sharc_optim_config oc;
    sharc_optim_config_default(&oc);
    oc.lr = (float)meta(f, "lr");
    oc.warmup_steps = meta_int(f, "warmup_steps");
    oc.min_lr_ratio = (float)meta(f, "min_lr_ratio");
    oc.decay_steps = 0;
    oc.decay = SHARC_LR_COSINE;
    oc.beta1 = (float)meta(f, "beta1");
    oc.beta2 = (float)meta(f, "beta2");
    oc.eps = (float)meta(f, "adam_eps");
    oc.weight_decay = (float)meta(f, "weight_decay");
    oc.max_grad_norm = (float)meta(f, "max_grad_norm");
    sharc_adamw *opt;
    ASSERT_OK(sharc_adamw_init(&opt, e, &oc));

    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(S * per_step));
    int32_t *targets = malloc(sizeof(int32_t) * (size_t)(S * per_step));
    ASSERT_TRUE(tokens && targets);
    ASSERT_OK(sharc_st_load_i32(f, "tokens", tokens, S * per_step));
    ASSERT_OK(sharc_st_load_i32(f, "targets", targets, S * per_step));
    float *ref_loss = load(f, "", "losses", S), *ref_norm = load(f, "", "grad_norm", S);
    float *ref_lr = load(f, "", "lr", S);

    worst_seen w = {0};
    const sharc_train_step_ctx ctx = {.model = m, .engine = e, .opt = opt, .optim = &oc, .max_steps = S};
    for (int step = 0; step < S; step++) {
        const int32_t *in = tokens + step * per_step, *tg = targets + step * per_step;
        int valid = 0;
        for (int64_t i = 0; i < per_step; i++) valid += tg[i] >= 0;
        ASSERT_TRUE(valid > 0 && valid < per_step); /* some targets are masked */

        const sharc_train_batch batch = {.grad_accum = A, .micro_tokens = (int64_t)B * T, .inputs = in, .targets = tg};
        sharc_train_step_result r;
        ASSERT_OK(sharc_train_step_run(&ctx, &batch, step, &r));
        ASSERT_EQ(r.valid_tokens, valid);
        ASSERT_TRUE(!r.skipped);
        double ref = ref_loss[step], loss = r.loss, rel = fabs(loss - ref) / fabs(ref);
        w.loss_rel = fmax(w.loss_rel, rel);
        fprintf(stderr, "step %2d: loss %.7f (PyTorch %.7f, rel %.1e)", step, loss, ref, rel);
        if (!(rel <= LOSS_RTOL))
            TEST_FAIL_AT("step %d: loss %.8f vs PyTorch %.8f (rel %.2e > %g)", step, loss, ref, rel, LOSS_RTOL);
        /* every parameter compared: this also catches a corrupted engine (an
         * out-of-bounds write once zeroed unit specs, and loops over their
         * parameters then skipped whole units in silence) */
        if (step == 0) ASSERT_EQ(check_grads(f, e, &w), nparams);

        double norm = r.grad_norm;
        double nrel = fabs(norm - ref_norm[step]) / (double)ref_norm[step];
        w.norm_rel = fmax(w.norm_rel, nrel);
        fprintf(stderr, "  grad norm %.6f (rel %.1e)\n", norm, nrel);
        if (!(nrel <= (step == 0 ? NORM0_RTOL : NORM_RTOL)))
            TEST_FAIL_AT("step %d: grad norm %.8f vs PyTorch %.8f (rel %.2e)", step, norm, (double)ref_norm[step],
                         nrel);
        ASSERT_NEAR(r.lr, ref_lr[step], LR_RTOL, 0);
    }
    ASSERT_EQ(final_check(f, e, family, c.embed_dim, &w), nparams);
    fprintf(stderr,
            "%s: worst relative loss difference %.2e, grad norm %.2e; step-0 gradients use %.0f%% "
            "of their tolerance (worst: %s); final weights: worst %.2e at %s, %.2e outside "
            "GPT-2's key bias, at most %.2f%% of a tensor beyond the tight tolerance\n",
            fam, w.loss_rel, w.norm_rel, 100.0 * w.grad_used, w.grad_worst, w.final_abs, w.final_worst,
            w.final_abs_other, 100.0 * w.final_outside);

    free(tokens);
    free(targets);
    free(ref_loss);
    free(ref_norm);
    free(ref_lr);
    sharc_adamw_free(opt);
    sharc_fsdp_free(e);
    sharc_model_free(m);
    sharc_st_close(f);
}

TEST(torch_parity_gpt2_20_steps) { parity(SHARC_FAMILY_GPT2); }
TEST(torch_parity_llama_20_steps) { parity(SHARC_FAMILY_LLAMA); }
