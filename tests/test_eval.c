/* test_eval.c: validation loss (sharc/eval.h) equals the mean of a
 * one-window-at-a-time forward (sharc_model_forward_loss) over the same
 * windows, with padding of the last batch, a batch limit, and through a
 * saved weights file (the `sharc eval` path). */
#include "test.h"
#include "sharc/eval.h"
#include "sharc/weights.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { T = 16, B = 3 };

static void tiny(sharc_config *c) {
    sharc_config_default(c);
    c->model.num_layers = 2;
    c->model.embed_dim = 32;
    c->model.num_heads = 2;
    c->model.vocab_size = 256;
    c->model.max_seq_len = T;
    c->model.init_std = 0.2f;
    c->train.seq_len = T;
    c->train.batch_size = B;
    ASSERT_OK(sharc_config_validate(c));
}

/* Mean loss of windows [0, nwin) computed one window per forward. */
static double reference(const sharc_config *c, sharc_fsdp *e, const sharc_dataset *d, int64_t nwin) {
    sharc_model *m1;
    ASSERT_OK(sharc_model_init(&m1, &c->model, NULL));
    ASSERT_OK(sharc_model_plan(m1, 1, T, false));
    int32_t win[T + 1];
    double sum = 0.0;
    for (int64_t k = 0; k < nwin; k++) {
        sharc_dataset_read(d, k * T, T + 1, win);
        sum += sharc_model_forward_loss(m1, e, win, win + 1);
    }
    sharc_model_free(m1);
    return sum / (double)(nwin * T);
}

TEST(eval_matches_window_by_window_forward) {
    sharc_config c;
    tiny(&c);
    char data[512], wpath[512];
    snprintf(data, sizeof data, "%s/eval_val.txt", sharc_test_tmpdir());
    snprintf(wpath, sizeof wpath, "%s/eval_model.safetensors", sharc_test_tmpdir());
    FILE *f = fopen(data, "w");
    ASSERT_TRUE(f != NULL);
    for (int i = 0; i < 23; i++) fprintf(f, "line %d: pack my box with five dozen liquor jugs\n", i * 7);
    fclose(f);
    sharc_dataset *d;
    ASSERT_OK(sharc_dataset_open(&d, data, SHARC_TOKENS_TEXT, 256));
    const int64_t W = (sharc_dataset_num_tokens(d) - 1) / T;
    ASSERT_TRUE(W % B != 0); /* the last batch is padded */

    sharc_model *m;
    sharc_fsdp *e;
    ASSERT_OK(sharc_model_init(&m, &c.model, NULL));
    ASSERT_OK(sharc_model_plan(m, B, T, false));
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    ASSERT_OK(sharc_fsdp_init(&e, sharc_model_units(m), sharc_model_num_units(m), sharc_model_schedule(m), &fc, NULL,
                              sharc_model_device(m)));
    sharc_fsdp_init_params(e, 7);
    sharc_comm *self;
    ASSERT_OK(sharc_comm_self(&self));

    sharc_eval_result all, some;
    ASSERT_OK(sharc_eval_dataset(m, e, self, NULL, d, B, T, 0, &all));
    ASSERT_EQ(all.windows, W);
    ASSERT_EQ(all.targets, W * T);
    double ref_all = reference(&c, e, d, W);
    ASSERT_NEAR(all.loss, ref_all, 1e-5, 0);
    ASSERT_NEAR(all.perplexity, exp(ref_all), 1e-4, 0);
    /* an untrained model is near ln(256) = 5.55 per byte */
    ASSERT_TRUE(all.loss > 4.0 && all.loss < 7.0);

    ASSERT_OK(sharc_eval_dataset(m, e, self, NULL, d, B, T, 2, &some));
    ASSERT_EQ(some.windows, 2 * B);
    double ref_some = reference(&c, e, d, 2 * B);
    ASSERT_NEAR(some.loss, ref_some, 1e-5, 0);

    /* the `sharc eval` path: a weights file, batch size 4 */
    ASSERT_OK(sharc_weights_save(e, NULL, &c, wpath));
    sharc_eval_options o = {.weights = wpath, .data_path = data, .format = SHARC_TOKENS_TEXT, .batch_size = 4};
    sharc_eval_result fromfile;
    ASSERT_OK(sharc_eval_checkpoint(&o, self, &fromfile));
    ASSERT_EQ(fromfile.windows, W);
    ASSERT_NEAR(fromfile.loss, ref_all, 1e-5, 0);

    /* bad input: a data file with fewer tokens than one window */
    FILE *s = fopen(data, "w");
    fputs("short", s);
    fclose(s);
    ASSERT_TRUE(sharc_eval_checkpoint(&o, self, &fromfile) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "fewer than one window") != NULL);

    sharc_comm_free(self);
    sharc_fsdp_free(e);
    sharc_model_free(m);
    sharc_dataset_free(d);
}
