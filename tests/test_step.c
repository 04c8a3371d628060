/* test_step.c: sharc_train_step_run (src/train/step.c) on one process, for
 * what the PyTorch parity test (global_tokens, every step finite) does not
 * reach: micro_batch normalisation with the per-micro-batch counts taken
 * from the targets (micro_valid NULL), against the rule of note
 * [loss-normalization] applied by hand to the same model; and a non-finite
 * loss skipping the update (note [bad-steps]). */
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/rng.h"
#include "sharc/train.h"
#include "test.h"

#include <math.h>
#include <string.h>

enum { A = 3, T = 13 };

typedef struct {
    sharc_model *m;
    sharc_fsdp *e;
    sharc_adamw *opt;
    sharc_optim_config oc;
} step_ctx;

static void setup(step_ctx *x) {
    sharc_model_config c;
    sharc_model_config_default(&c, SHARC_FAMILY_LLAMA);
    c.num_layers = 2;
    c.embed_dim = 24;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.ff_hidden_dim = 40;
    c.vocab_size = 37;
    c.max_seq_len = 16;
    c.init_std = 0.2f;
    ASSERT_OK(sharc_model_init(&x->m, &c, NULL));
    ASSERT_OK(sharc_model_plan(x->m, 1, T, false));
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    ASSERT_OK(sharc_fsdp_init(&x->e, sharc_model_units(x->m), sharc_model_num_units(x->m), sharc_model_schedule(x->m),
                              &fc, NULL, sharc_model_device(x->m)));
    sharc_fsdp_init_params(x->e, 42);
    sharc_optim_config_default(&x->oc);
    x->oc.lr = 1e-2f;
    x->oc.warmup_steps = 2;
    ASSERT_OK(sharc_adamw_init(&x->opt, x->e, &x->oc));
}

static void teardown(step_ctx *x) {
    sharc_adamw_free(x->opt);
    sharc_fsdp_free(x->e);
    sharc_model_free(x->m);
}

/* A micro-batches of one row of T tokens; micro-batch m has masked[m]
 * masked targets (the last ones), so each has its own valid count. */
static void batch(int32_t *in, int32_t *tg, const int *masked) {
    for (int m = 0; m < A; m++)
        for (int i = 0; i < T; i++) {
            in[m * T + i] = (int32_t)(sharc_rng_u64(3, (uint64_t)m, (uint64_t)i) % 37);
            tg[m * T + i] = i >= T - masked[m] ? -1 : (int32_t)(sharc_rng_u64(4, (uint64_t)m, (uint64_t)i) % 37);
        }
}

/* micro_batch: the loss is the mean of the micro-batch means (one without
 * targets adds 0) and the gradient that of the same sum; compared with the
 * model driven by hand from identical parameters. */
TEST(train_step_micro_batch_normalization) {
    step_ctx a, b;
    setup(&a);
    setup(&b);
    int32_t in[A * T], tg[A * T];
    const int masked[A] = {1, 6, T}; /* the last micro-batch has no target */
    batch(in, tg, masked);

    double want = 0.0;
    sharc_fsdp_zero_grad(b.e);
    for (int m = 0; m < A; m++) {
        int v = T - masked[m];
        float scale = v > 0 ? 1.0f / ((float)v * (float)A) : 0.0f;
        double sum = sharc_model_forward_loss(b.m, b.e, in + m * T, tg + m * T);
        if (v > 0) want += sum / v / A;
        sharc_model_forward_backward(b.m, b.e, in + m * T, tg + m * T, scale);
    }

    const sharc_train_step_ctx ctx = {
        .model = a.m, .engine = a.e, .opt = a.opt, .optim = &a.oc, .max_steps = 10, .loss_normalization = 1};
    const sharc_train_batch bt = {.grad_accum = A, .micro_tokens = T, .inputs = in, .targets = tg};
    sharc_train_step_result r;
    ASSERT_OK(sharc_train_step_run(&ctx, &bt, 0, &r));
    ASSERT_NEAR(r.loss, want, 1e-6, 0);
    ASSERT_TRUE(want > 1.0); /* a real loss (ln 37 = 3.6 at random) */
    ASSERT_EQ(r.valid_tokens, (int64_t)(3 * T - 1 - 6 - T));
    ASSERT_TRUE(!r.skipped);
    ASSERT_NEAR(r.lr, sharc_lr_at(&a.oc, 0, 10), 0, 0);
    ASSERT_NEAR(r.grad_norm, sqrt(sharc_fsdp_grad_sumsq_local(b.e)), 1e-6, 0);
    for (int u = 0; u < sharc_fsdp_num_units(a.e); u++)
        ASSERT_ALLCLOSE(sharc_fsdp_shard_grads(a.e, u), sharc_fsdp_shard_grads(b.e, u), sharc_fsdp_shard_numel(a.e, u),
                        1e-6, 1e-9);
    ASSERT_EQ(sharc_adamw_steps(a.opt), 1);
    teardown(&a);
    teardown(&b);
}

/* A non-finite loss (a NaN weight in the final norm): skipped, no AdamW
 * update (its step count and every other weight unchanged); the next
 * finite step updates. */
TEST(train_step_skips_a_non_finite_step) {
    step_ctx a;
    setup(&a);
    int32_t in[A * T], tg[A * T];
    const int masked[A] = {0, 2, 4};
    batch(in, tg, masked);
    int H = sharc_fsdp_num_units(a.e) - 1; /* head: model.norm.weight first */
    sharc_fsdp_shard_write_begin(a.e);
    sharc_fsdp_shard_write(a.e, H)[0] = NAN;
    sharc_fsdp_shard_write_end(a.e);
    int64_t n1 = sharc_fsdp_shard_numel(a.e, 1);
    float *before = malloc(sizeof(float) * (size_t)n1);
    ASSERT_TRUE(before != NULL);
    memcpy(before, sharc_fsdp_shard_params(a.e, 1), sizeof(float) * (size_t)n1);

    const sharc_train_step_ctx ctx = {.model = a.m, .engine = a.e, .opt = a.opt, .optim = &a.oc, .max_steps = 10};
    const sharc_train_batch bt = {.grad_accum = A, .micro_tokens = T, .inputs = in, .targets = tg};
    sharc_train_step_result r;
    ASSERT_OK(sharc_train_step_run(&ctx, &bt, 0, &r));
    ASSERT_TRUE(r.skipped);
    ASSERT_TRUE(!isfinite(r.loss));
    ASSERT_EQ(sharc_adamw_steps(a.opt), 0);
    ASSERT_TRUE(memcmp(before, sharc_fsdp_shard_params(a.e, 1), sizeof(float) * (size_t)n1) == 0);

    sharc_fsdp_shard_write_begin(a.e);
    sharc_fsdp_shard_write(a.e, H)[0] = 1.0f;
    sharc_fsdp_shard_write_end(a.e);
    ASSERT_OK(sharc_train_step_run(&ctx, &bt, 1, &r));
    ASSERT_TRUE(!r.skipped && isfinite(r.loss));
    ASSERT_EQ(sharc_adamw_steps(a.opt), 1);
    ASSERT_TRUE(memcmp(before, sharc_fsdp_shard_params(a.e, 1), sizeof(float) * (size_t)n1) != 0);
    free(before);
    teardown(&a);
}
