/* step.c: time full sharc training steps, or measure this machine's sgemm
 * ceiling through sharc_sgemm. Used by bench/run.sh.
 *
 *   step --family gpt2|llama [--layers L --dim C --heads H --kv-heads K --ffn F
 *        --vocab V --max-seq M] --batch B --seq T [--steps N] [--threads K] [--ac]
 *        [--fwd-steps N] [--bf16]
 *   step --sgemm [--threads K] [--min-time S]
 *
 * A training step is the trainer's own, sharc_train_step_run (src/train/step.c),
 * on one micro-batch of B x T random tokens (fixed seed): zero the gradients,
 * one forward+backward with loss_scale 1/(B*T), the global gradient norm and
 * its clip factor, one AdamW step (betas 0.9/0.95, weight decay 0.1, max norm
 * 1, constant lr 1e-4). One warm-up step, then N timed ones; the figures are
 * medians over the timed steps (the phases as the step reports them).
 *
 * --fwd-steps N additionally times N forward-only passes (sharc_model_forward_loss:
 * the same blocks and the head's logits + loss, no backward sgemms) so that a
 * step can be split into forward and backward through the public API.
 * --bf16: fsdp.param_dtype bf16, so the model computes in bf16 where the CPU
 * can (JSON "bf16": "oneDNN", "emulated" or "fp32", note [bf16-gemm]).
 * SHARC_PROFILE=1 prints the per-kernel regions of sharc/prof.h to stderr.
 *
 * Prints one JSON line on stdout. */
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/prof.h"
#include "sharc/rng.h"
#include "sharc/train.h"
#include "sharc/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n values (sorts a copy). */
static double median(const double *v, int n) {
    if (n <= 0) return 0.0;
    double *s = malloc(sizeof(double) * (size_t)n);
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double r = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return r;
}

static double max_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

static float *filled(int64_t n, float scale, int salt) {
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) {
        fprintf(stderr, "step: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) p[i] = scale * (float)((i * 7 + salt) % 17 - 8);
    return p;
}

/* The sgemm ceiling: the big matmuls of the two benchmark models at their
 * token counts (GPT-2 124M, 1024 tokens; the small Llama, 2048 tokens), each
 * in the three forms a linear layer uses, exactly as sharc calls them:
 *   NT  forward   y(M,N)   = x(M,K) w(N,K)^T
 *   NN  backward  dx(M,K)  = dy(M,N) w(N,K)
 *   TN  backward  dw(N,K) += dy(M,N)^T x(M,K)
 * Every form of a shape does 2*M*N*K flops. Each is repeated for at least
 * min_time seconds after one untimed call; the ceiling is the best rate. */
static int sgemm_ceiling(double min_time) {
    static const int shapes[][3] = {
        {1024, 2304, 768},  /* GPT-2 qkv */
        {1024, 3072, 768},  /* GPT-2 fc */
        {1024, 768, 3072},  /* GPT-2 mlp proj */
        {1024, 768, 768},   /* GPT-2 attention proj */
        {1024, 50257, 768}, /* GPT-2 tied LM head (sharc runs it in row chunks) */
        {2048, 1376, 256},  /* Llama gate+up */
        {2048, 256, 688},   /* Llama down */
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    const char *form_name[3] = {"NT", "NN", "TN"};
    double best = 0.0, gpt2_best = 0.0;
    char best_what[64] = "";
    printf("{\"mode\": \"sgemm\", \"shapes\": [");
    for (int s = 0; s < nshapes; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *x = filled((int64_t)M * K, 1e-2f, 1), *w = filled((int64_t)N * K, 1e-2f, 2);
        float *y = filled((int64_t)M * N, 1e-2f, 3), *dx = filled((int64_t)M * K, 0.0f, 0);
        float *dw = filled((int64_t)N * K, 0.0f, 0);
        for (int form = 0; form < 3; form++) {
            double t0 = 0.0, dt = 0.0;
            int reps = -1; /* the first call is untimed */
            do {
                if (form == 0) sharc_sgemm(false, true, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
                else if (form == 1) sharc_sgemm(false, false, M, K, N, 1.0f, y, N, w, K, 0.0f, dx, K);
                else sharc_sgemm(true, false, N, K, M, 1.0f, y, N, x, K, 1.0f, dw, K);
                if (++reps == 0) t0 = sharc_clock_now();
                dt = sharc_clock_now() - t0;
            } while (reps < 1 || dt < min_time);
            double gf = 2.0 * M * N * K * reps / dt * 1e-9;
            if (gf > best) {
                best = gf;
                snprintf(best_what, sizeof best_what, "%dx%dx%d %s", M, N, K, form_name[form]);
            }
            if (s < 5 && gf > gpt2_best) gpt2_best = gf;
            printf("%s{\"m\": %d, \"n\": %d, \"k\": %d, \"form\": \"%s\", \"gflops\": %.1f}", s + form ? ", " : "", M,
                   N, K, form_name[form], gf);
            fflush(stdout);
        }
        free(x);
        free(w);
        free(y);
        free(dx);
        free(dw);
    }
    const sharc_blas_info *bi = sharc_blas_get_info();
    printf("], \"sgemm_gflops\": %.1f, \"best_shape\": \"%s\", \"threads\": %d, \"gemm\": \"%s\", "
           "\"blas_core\": \"%s\", \"blas_library\": \"%s\"}\n",
           best, best_what, sharc_threads_get(), bi->gemm, bi->corename, bi->library);
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: step --family gpt2|llama [--layers L --dim C --heads H --kv-heads K --ffn F --vocab V\n"
                    "            --max-seq M] [--batch B --seq T --steps N --threads K --ac --fwd-steps N --bf16\n"
                    "            --offload-dir DIR --offload-chunk N --offload-pipeline 0|1]\n"
                    "       step --sgemm [--threads K --min-time S]\n");
}

int main(int argc, char **argv) {
    const char *family = "gpt2";
    int L = 0, C = 0, H = 0, KV = 0, F = 0, V = 0, maxT = 0;
    int B = 4, T = 256, steps = 5, threads = 0, ac = 0, sgemm = 0, fwd_steps = 0, bf16 = 0;
    double min_time = 0.4;
    const char *offload_dir = "";
    long long offload_chunk = 0; /* optim.offload_sub_group_size (0: its default) */
    bool offload_pipeline = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--sgemm")) {
            sgemm = 1;
            continue;
        }
        if (!strcmp(a, "--ac")) {
            ac = 1;
            continue;
        }
        if (!strcmp(a, "--bf16")) {
            bf16 = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "step: %s needs a value\n", a);
            usage();
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--family")) family = v;
        else if (!strcmp(a, "--layers")) L = atoi(v);
        else if (!strcmp(a, "--dim")) C = atoi(v);
        else if (!strcmp(a, "--heads")) H = atoi(v);
        else if (!strcmp(a, "--kv-heads")) KV = atoi(v);
        else if (!strcmp(a, "--ffn")) F = atoi(v);
        else if (!strcmp(a, "--vocab")) V = atoi(v);
        else if (!strcmp(a, "--max-seq")) maxT = atoi(v);
        else if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--seq")) T = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--fwd-steps")) fwd_steps = atoi(v);
        else if (!strcmp(a, "--min-time")) min_time = atof(v);
        else if (!strcmp(a, "--offload-dir")) offload_dir = v;
        else if (!strcmp(a, "--offload-chunk")) offload_chunk = atoll(v);
        else if (!strcmp(a, "--offload-pipeline")) offload_pipeline = atoi(v) != 0;
        else {
            fprintf(stderr, "step: unknown option %s\n", a);
            usage();
            return 2;
        }
    }
    if (sharc_blas_init(threads) != SHARC_OK) {
        fprintf(stderr, "step: %s\n", sharc_last_error());
        return 1;
    }
    if (sgemm) return sgemm_ceiling(min_time);
    if (strcmp(family, "gpt2") != 0 && strcmp(family, "llama") != 0) {
        fprintf(stderr, "step: --family %s: expected gpt2 or llama\n", family);
        return 2;
    }
    if (steps < 1) steps = 1;

    sharc_model_config c;
    sharc_model_config_default(&c, !strcmp(family, "llama") ? SHARC_FAMILY_LLAMA : SHARC_FAMILY_GPT2);
    if (L) c.num_layers = L;
    if (C) c.embed_dim = C;
    if (H) c.num_heads = H;
    if (KV) c.num_kv_heads = KV;
    if (F) c.ff_hidden_dim = F;
    if (V) c.vocab_size = V;
    if (maxT) c.max_seq_len = maxT;

    sharc_model *m;
    sharc_fsdp *e;
    sharc_adamw *opt;
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    if (bf16) fc.param_dtype = SHARC_DT_BF16;
    sharc_optim_config oc;
    sharc_optim_config_default(&oc); /* betas 0.9/0.95, eps 1e-8, wd 0.1, max norm 1 */
    oc.lr = 1e-4f;
    oc.decay = SHARC_LR_CONSTANT;
    snprintf(oc.offload_dir, sizeof oc.offload_dir, "%s", offload_dir); /* note [optim-offload] */
    oc.offload_chunk_numel = offload_chunk;
    oc.offload_pipeline = offload_pipeline;
    if (sharc_model_init(&m, &c, NULL) != SHARC_OK || sharc_model_plan(m, B, T, ac) != SHARC_OK ||
        sharc_fsdp_init(&e, sharc_model_units(m), sharc_model_num_units(m), sharc_model_schedule(m), &fc, NULL,
                        sharc_model_device(m)) != SHARC_OK ||
        sharc_adamw_init(&opt, e, &oc) != SHARC_OK) {
        fprintf(stderr, "step: %s\n", sharc_last_error());
        return 1;
    }
    c = *sharc_model_get_config(m);
    sharc_fsdp_init_params(e, 1);
    const int N = B * T;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)N), *tg = malloc(sizeof(int32_t) * (size_t)N);
    /* per timed step: total, zero_grad, forward+backward, norm+clip, adamw */
    double *ph[5];
    for (int k = 0; k < 5; k++) ph[k] = calloc((size_t)steps, sizeof(double));
    double first_loss = 0.0, last_loss = 0.0;
    sharc_adamw_offload_stats io0 = {0}; /* the counters after step 0 */
    const sharc_train_step_ctx ctx = {.model = m, .engine = e, .opt = opt, .optim = &oc, .max_steps = steps + 1};
    for (int s = 0; s <= steps; s++) {
        for (int i = 0; i < N; i++) {
            in[i] = (int32_t)(sharc_rng_u64(7, (uint64_t)s, (uint64_t)i) % (uint64_t)c.vocab_size);
            tg[i] = (int32_t)(sharc_rng_u64(8, (uint64_t)s, (uint64_t)i) % (uint64_t)c.vocab_size);
        }
        if (s == 1 && getenv("SHARC_PROFILE")) sharc_prof_enable(true); /* after the warm-up step */
        const sharc_train_batch batch = {.grad_accum = 1, .micro_tokens = N, .inputs = in, .targets = tg};
        sharc_train_step_result r;
        double t0 = sharc_clock_now();
        sharc_prof_step_begin();
        if (sharc_train_step_run(&ctx, &batch, s, &r) != SHARC_OK) {
            fprintf(stderr, "step: %s\n", sharc_last_error());
            return 1;
        }
        sharc_prof_step_end();
        double t1 = sharc_clock_now(), loss = r.loss;
        if (s == 0) {
            first_loss = loss;
            sharc_adamw_offload_stats_get(opt, &io0); /* step 0 (the file's first writes) not timed */
        }
        last_loss = loss;
        if (s > 0) {
            ph[0][s - 1] = t1 - t0;
            ph[1][s - 1] = r.zero_grad_s;
            ph[2][s - 1] = r.forward_backward_s;
            ph[3][s - 1] = r.clip_s;
            ph[4][s - 1] = r.optimizer_s - r.clip_s;
        }
    }
    if (sharc_prof_enabled()) {
        sharc_prof_report(stderr, steps);
        sharc_prof_enable(false);
    }
    double fwd_ms = 0.0;
    if (fwd_steps > 0) {
        double *ft = calloc((size_t)fwd_steps, sizeof(double));
        for (int s = 0; s < fwd_steps; s++) {
            double t0 = sharc_clock_now();
            sharc_model_forward_loss(m, e, in, tg);
            ft[s] = sharc_clock_now() - t0;
        }
        fwd_ms = median(ft, fwd_steps) * 1e3;
        free(ft);
    }

    double med = median(ph[0], steps), mn = ph[0][0], mean = 0.0;
    for (int s = 0; s < steps; s++) {
        mn = ph[0][s] < mn ? ph[0][s] : mn;
        mean += ph[0][s] / steps;
    }
    double tps = (double)N / med;
    double fpt = sharc_model_flops_per_token(&c, T);
    sharc_mem_stats mem;
    sharc_mem_get(&mem);
    printf("{\"system\": \"sharc\", \"family\": \"%s\", \"params\": %lld, \"layers\": %d, \"dim\": %d, \"heads\": %d, "
           "\"kv_heads\": %d, \"ffn\": %d, \"vocab\": %d, \"batch\": %d, \"seq\": %d, \"ac\": %s, \"steps\": %d, "
           "\"threads\": %d, \"gemm\": \"%s\", \"blas_core\": \"%s\", \"step_ms\": %.1f, \"step_ms_min\": %.1f, "
           "\"step_ms_mean\": %.1f, "
           "\"tokens_per_s\": %.1f, \"flops_per_token\": %.4g, \"gflops_per_s\": %.1f, "
           "\"zero_grad_ms\": %.2f, \"fwd_bwd_ms\": %.1f, \"clip_ms\": %.2f, \"optim_ms\": %.2f",
           sharc_family_name(c.family), (long long)sharc_model_num_params(&c), c.num_layers, c.embed_dim, c.num_heads,
           c.num_kv_heads, c.ff_hidden_dim, c.vocab_size, B, T, ac ? "true" : "false", steps, sharc_threads_get(),
           sharc_blas_get_info()->gemm, sharc_blas_get_info()->corename, med * 1e3, mn * 1e3, mean * 1e3, tps, fpt,
           fpt * tps * 1e-9, median(ph[1], steps) * 1e3, median(ph[2], steps) * 1e3, median(ph[3], steps) * 1e3,
           median(ph[4], steps) * 1e3);
    if (fwd_steps > 0) printf(", \"forward_only_ms\": %.1f", fwd_ms);
    sharc_bf16_mode bm = sharc_bf16_mode_get(NULL);
    printf(", \"bf16\": \"%s\"", !sharc_model_computes_bf16(m, e) ? "fp32"
                                 : bm == SHARC_BF16_ONEDNN        ? "oneDNN"
                                                                  : "emulated");
    sharc_adamw_offload_stats io;
    sharc_adamw_offload_stats_get(opt, &io);
    io.read_bytes -= io0.read_bytes;
    io.write_bytes -= io0.write_bytes;
    io.step_s -= io0.step_s;
    io.read_wait_s -= io0.read_wait_s;
    io.write_wait_s -= io0.write_wait_s;
    /* the optimizer's streaming rate (bytes over the time of its passes) and
     * the time it blocked on the disk: pipelined, the wait is what it did not hide */
    printf(", \"offload\": %s, \"offload_backend\": \"%s\", \"optim_peak_mib\": %.1f, \"offload_file_mib\": %.1f, "
           "\"offload_read_GBps\": %.2f, \"offload_write_GBps\": %.2f, \"offload_step_ms\": %.1f, "
           "\"offload_wait_ms\": %.1f",
           offload_dir[0] ? "true" : "false", io.backend ? io.backend : "",
           (double)mem.peak[SHARC_MEM_OPTIM] / (1 << 20), (double)io.file_bytes / (1 << 20),
           io.step_s > 0 ? (double)io.read_bytes / io.step_s * 1e-9 : 0.0,
           io.step_s > 0 ? (double)io.write_bytes / io.step_s * 1e-9 : 0.0, io.step_s * 1e3 / steps,
           (io.read_wait_s + io.write_wait_s) * 1e3 / steps);
    printf(", \"loss_first\": %.4f, \"loss_last\": %.4f, \"peak_mem_mib\": %.1f, \"max_rss_mib\": %.1f}\n", first_loss,
           last_loss, (double)mem.peak_total / (1 << 20), max_rss_mib());
    free(in);
    free(tg);
    for (int k = 0; k < 5; k++) free(ph[k]);
    sharc_adamw_free(opt);
    sharc_fsdp_free(e);
    sharc_model_free(m);
    return 0;
}
