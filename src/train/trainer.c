/* trainer.c: sharc_trainer_* and sharc_train_run: the training loop, its
 * log lines and metrics file. */
#include "sharc/train.h"
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "sharc/data.h"
#include "sharc/fileio.h"
#include "sharc/log.h"
#include "sharc/optim.h"
#include "sharc/prof.h"
#include "sharc/weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sharc_trainer {
    sharc_config cfg;
    sharc_model *model;
    sharc_fsdp *engine;
    sharc_adamw *opt;
    sharc_dataset *data;
    sharc_sampler *sampler;
    int32_t *inputs, *targets; /* (grad_accum, B, T) */
    int64_t step;
    double flops_per_token;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

sharc_status sharc_trainer_init(sharc_trainer **out, const sharc_config *cfg) {
    *out = NULL;
    sharc_trainer *t = calloc(1, sizeof *t);
    if (!t) return sharc_error(SHARC_ERR_NOMEM, "train: out of memory");
    t->cfg = *cfg;
    sharc_status st;
    const sharc_train_config *tc = &t->cfg.train;
    if ((st = sharc_blas_init(tc->threads)) != SHARC_OK) goto fail;
    if ((st = sharc_model_init(&t->model, &t->cfg.model)) != SHARC_OK) goto fail;
    t->cfg.model = *sharc_model_get_config(t->model); /* with derived defaults */
    if ((st = sharc_model_plan(t->model, tc->batch_size, tc->seq_len,
                               t->cfg.fsdp.activation_checkpointing)) != SHARC_OK)
        goto fail;
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    if ((st = sharc_fsdp_init(&t->engine, sharc_model_units(t->model), sharc_model_num_units(t->model), &fc)) != SHARC_OK)
        goto fail;
    sharc_fsdp_init_params(t->engine, tc->seed);
    if ((st = sharc_adamw_init(&t->opt, t->engine, &t->cfg.optim)) != SHARC_OK) goto fail;
    if ((st = sharc_dataset_open(&t->data, t->cfg.data.path, t->cfg.data.format, t->cfg.model.vocab_size)) != SHARC_OK)
        goto fail;
    sharc_sampler_config sc = {.seq_len = tc->seq_len, .batch_size = tc->batch_size,
                               .grad_accum = tc->grad_accum, .dp_size = 1,
                               .shuffle = t->cfg.data.shuffle, .seed = t->cfg.data.seed};
    if ((st = sharc_sampler_init(&t->sampler, t->data, &sc)) != SHARC_OK) goto fail;
    size_t n = (size_t)tc->grad_accum * (size_t)tc->batch_size * (size_t)tc->seq_len;
    t->inputs = sharc_alloc(n * sizeof(int32_t), SHARC_MEM_OTHER);
    t->targets = sharc_alloc(n * sizeof(int32_t), SHARC_MEM_OTHER);
    if (!t->inputs || !t->targets) {
        st = sharc_error(SHARC_ERR_NOMEM, "train: cannot allocate the batch");
        goto fail;
    }
    t->flops_per_token = sharc_model_flops_per_token(&t->cfg.model, tc->seq_len);
    *out = t;
    return SHARC_OK;
fail:
    sharc_trainer_free(t);
    return st;
}

void sharc_trainer_free(sharc_trainer *t) {
    if (!t) return;
    sharc_free(t->inputs);
    sharc_free(t->targets);
    sharc_sampler_free(t->sampler);
    sharc_dataset_free(t->data);
    sharc_adamw_free(t->opt);
    sharc_fsdp_free(t->engine);
    sharc_model_free(t->model);
    free(t);
}

sharc_model *sharc_trainer_model(sharc_trainer *t) { return t->model; }
sharc_fsdp *sharc_trainer_engine(sharc_trainer *t) { return t->engine; }
const sharc_config *sharc_trainer_config(const sharc_trainer *t) { return &t->cfg; }

sharc_status sharc_trainer_step(sharc_trainer *t, sharc_step_stats *s) {
    const sharc_train_config *tc = &t->cfg.train;
    const int A = tc->grad_accum, B = tc->batch_size, T = tc->seq_len;
    const int64_t mb = (int64_t)B * T;
    double t0 = now_s();
    /* the whole step's batch first: the loss scale needs its valid-target count */
    int64_t valid = 0;
    for (int m = 0; m < A; m++) {
        sharc_sampler_batch(t->sampler, t->step, m, 0, t->inputs + m * mb, t->targets + m * mb);
        for (int64_t i = 0; i < mb; i++) valid += t->targets[m * mb + i] >= 0;
    }
    float scale = valid > 0 ? 1.0f / (float)valid : 0.0f;
    sharc_fsdp_zero_grad(t->engine);
    double loss_sum = 0.0;
    for (int m = 0; m < A; m++)
        loss_sum += sharc_model_forward_backward(t->model, t->engine, t->inputs + m * mb,
                                                 t->targets + m * mb, scale);
    double norm = sqrt(sharc_fsdp_grad_sumsq_local(t->engine));
    float lr = sharc_lr_at(&t->cfg.optim, t->step, tc->max_steps);
    sharc_adamw_step(t->opt, t->engine, lr, sharc_clip_coef(&t->cfg.optim, norm));
    t->step++;
    double dt = now_s() - t0;
    s->step = t->step;
    s->loss = valid > 0 ? loss_sum / (double)valid : 0.0;
    s->lr = lr;
    s->grad_norm = norm;
    s->tokens = (int64_t)A * mb;
    s->valid_tokens = valid;
    s->step_s = dt;
    s->tokens_per_s = (double)s->tokens / dt;
    s->tflops = t->flops_per_token * s->tokens_per_s * 1e-12;
    return SHARC_OK;
}

static sharc_status write_text(const char *path, const char *text) {
    sharc_afile af;
    SHARC_TRY(sharc_afile_open(&af, path));
    sharc_status st = sharc_afile_write(&af, text, strlen(text));
    if (st != SHARC_OK) {
        sharc_afile_abort(&af);
        return st;
    }
    return sharc_afile_commit(&af);
}

sharc_status sharc_train_run(const sharc_config *cfg) {
    sharc_trainer *t;
    SHARC_TRY(sharc_trainer_init(&t, cfg));
    const sharc_config *c = &t->cfg;
    char path[SHARC_PATH_MAX + 64];
    sharc_status st = sharc_mkdirs(c->train.out_dir);
    char *yaml = sharc_config_to_yaml(c);
    if (st == SHARC_OK) {
        snprintf(path, sizeof path, "%s/config.yaml", c->train.out_dir);
        st = write_text(path, yaml ? yaml : "");
    }
    free(yaml);
    FILE *metrics = NULL;
    if (st == SHARC_OK) {
        if (c->train.metrics_path[0]) snprintf(path, sizeof path, "%s", c->train.metrics_path);
        else snprintf(path, sizeof path, "%s/metrics.jsonl", c->train.out_dir);
        metrics = fopen(path, "w");
        if (!metrics) st = sharc_error(SHARC_ERR_IO, "train: cannot create metrics file '%s': %s", path, strerror(errno));
    }
    if (st != SHARC_OK) {
        sharc_trainer_free(t);
        return st;
    }
    const sharc_blas_info *bi = sharc_blas_get_info();
    sharc_info("sharc: %s, %lld parameters, %d threads, BLAS %s (%s)%s%s", sharc_family_name(c->model.family),
               (long long)sharc_model_num_params(&c->model), sharc_threads_get(), bi->corename, bi->library,
               bi->overridden[0] ? ", OPENBLAS_CORETYPE overridden from " : "", bi->overridden);
    sharc_info("sharc: data %s: %lld tokens, %lld windows of %d", c->data.path,
               (long long)sharc_dataset_num_tokens(t->data), (long long)sharc_sampler_windows(t->sampler),
               c->train.seq_len + 1);
    if (getenv("SHARC_PROFILE")) sharc_prof_enable(true);
    double tok_sum = 0.0, time_sum = 0.0;
    for (int64_t i = 0; i < c->train.max_steps && st == SHARC_OK; i++) {
        sharc_step_stats s;
        st = sharc_trainer_step(t, &s);
        if (st != SHARC_OK) break;
        tok_sum += (double)s.tokens;
        time_sum += s.step_s;
        sharc_mem_stats mem;
        sharc_mem_get(&mem);
        fprintf(metrics,
                "{\"step\": %lld, \"loss_metrics/global_avg_loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6f, "
                "\"throughput(tps)\": %.1f, \"tflops\": %.4f, \"time_metrics/end_to_end(s)\": %.4f, "
                "\"tokens\": %lld, \"memory/max_active(GiB)\": %.4f}\n",
                (long long)s.step, s.loss, (double)s.lr, s.grad_norm, s.tokens_per_s, s.tflops, s.step_s,
                (long long)s.tokens, (double)mem.peak_total / (double)(1ll << 30));
        fflush(metrics);
        if (s.step % c->train.log_every == 0 || s.step == 1 || s.step == c->train.max_steps)
            printf("step %5lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %.0f tok/s\n", (long long)s.step,
                   (long long)c->train.max_steps, s.loss, (double)s.lr, s.grad_norm, s.tokens_per_s);
        fflush(stdout);
    }
    fclose(metrics);
    if (sharc_prof_enabled()) sharc_prof_report(stderr, (int)(c->train.max_steps > 0 ? c->train.max_steps : 1));
    if (st == SHARC_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", c->train.out_dir);
        st = sharc_weights_save(t->engine, c, path);
        if (st == SHARC_OK)
            sharc_info("sharc: %.0f tok/s over the run; weights saved to %s", time_sum > 0 ? tok_sum / time_sum : 0.0, path);
    }
    sharc_trainer_free(t);
    return st;
}
