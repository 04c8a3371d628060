/* step.c: time full sharc training steps (forward, backward, clip, AdamW) on
 * random tokens, or measure this machine's sgemm ceiling.
 *
 *   step --family gpt2|llama [--layers L --dim C --heads H --kv-heads K --ffn F
 *        --vocab V --max-seq M] --batch B --seq T [--steps N] [--threads K] [--ac]
 *   step --sgemm [--threads K]
 *
 * Prints one JSON line. Used by bench/run.sh. */
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/prof.h"
#include "sharc/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The best rate over the big matmul shapes of GPT-2 124M at 1024 tokens, in
 * the three forms forward and backward use (NT: y = x w^T, NN: dx = dy w,
 * TN: dw += dy^T x). */
static int sgemm_ceiling(void) {
    static const int shapes[][3] = {{1024, 2304, 768}, {1024, 3072, 768}, {1024, 768, 3072}, {1024, 768, 768}};
    double best = 0.0;
    printf("{\"sgemm\": [");
    for (int s = 0; s < 4; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *A = malloc(sizeof(float) * (size_t)M * K), *Bm = malloc(sizeof(float) * (size_t)N * K),
              *C = malloc(sizeof(float) * (size_t)M * N);
        for (long i = 0; i < (long)M * K; i++) A[i] = 0.001f * (float)(i % 13);
        for (long i = 0; i < (long)N * K; i++) Bm[i] = 0.001f * (float)(i % 7);
        for (int form = 0; form < 3; form++) {
            double t0 = now(), dt;
            int reps = 0;
            do {
                if (form == 0) sharc_sgemm(false, true, M, N, K, 1.0f, A, K, Bm, K, 0.0f, C, N);
                else if (form == 1) sharc_sgemm(false, false, M, K, N, 1.0f, C, N, Bm, K, 0.0f, A, K);
                else sharc_sgemm(true, false, N, K, M, 1.0f, C, N, A, K, 1.0f, Bm, K);
                reps++;
                dt = now() - t0;
            } while (dt < 0.5);
            double gf = 2.0 * M * N * K * reps / dt * 1e-9;
            best = gf > best ? gf : best;
            printf("%s{\"m\": %d, \"n\": %d, \"k\": %d, \"form\": \"%s\", \"gflops\": %.1f}", s + form ? ", " : "", M, N,
                   K, form == 0 ? "NT" : form == 1 ? "NN" : "TN", gf);
        }
        free(A);
        free(Bm);
        free(C);
    }
    printf("], \"sgemm_gflops\": %.1f, \"threads\": %d, \"blas_core\": \"%s\"}\n", best, sharc_threads_get(),
           sharc_blas_get_info()->corename);
    return 0;
}

int main(int argc, char **argv) {
    sharc_model_config c;
    sharc_model_config_default(&c, SHARC_FAMILY_GPT2);
    int B = 4, T = 256, steps = 5, threads = 0, ac = 0, sgemm = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--sgemm")) { sgemm = 1; continue; }
        if (!strcmp(a, "--ac")) { ac = 1; continue; }
        if (!strcmp(a, "--family")) {
            int L = c.num_layers, C = c.embed_dim, H = c.num_heads, V = c.vocab_size;
            sharc_model_config_default(&c, !strcmp(v, "llama") ? SHARC_FAMILY_LLAMA : SHARC_FAMILY_GPT2);
            c.num_layers = L, c.embed_dim = C, c.num_heads = H, c.vocab_size = V;
        } else if (!strcmp(a, "--layers")) c.num_layers = atoi(v);
        else if (!strcmp(a, "--dim")) c.embed_dim = atoi(v);
        else if (!strcmp(a, "--heads")) c.num_heads = atoi(v);
        else if (!strcmp(a, "--kv-heads")) c.num_kv_heads = atoi(v);
        else if (!strcmp(a, "--ffn")) c.ff_hidden_dim = atoi(v);
        else if (!strcmp(a, "--vocab")) c.vocab_size = atoi(v);
        else if (!strcmp(a, "--max-seq")) c.max_seq_len = atoi(v);
        else if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--seq")) T = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else {
            fprintf(stderr, "step: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (sharc_blas_init(threads) != SHARC_OK) {
        fprintf(stderr, "%s\n", sharc_last_error());
        return 1;
    }
    if (sgemm) return sgemm_ceiling();
    sharc_model *m;
    sharc_fsdp *e;
    sharc_adamw *opt;
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    sharc_optim_config oc;
    sharc_optim_config_default(&oc);
    if (sharc_model_init(&m, &c) != SHARC_OK || sharc_model_plan(m, B, T, ac) != SHARC_OK ||
        sharc_fsdp_init(&e, sharc_model_units(m), sharc_model_num_units(m), &fc) != SHARC_OK ||
        sharc_adamw_init(&opt, e, &oc) != SHARC_OK) {
        fprintf(stderr, "%s\n", sharc_last_error());
        return 1;
    }
    c = *sharc_model_get_config(m);
    sharc_fsdp_init_params(e, 1);
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(B * T)), *tg = malloc(sizeof(int32_t) * (size_t)(B * T));
    double *times = calloc((size_t)steps + 1, sizeof(double));
    double phase[3] = {0, 0, 0};
    for (int s = 0; s <= steps; s++) {
        for (int i = 0; i < B * T; i++) {
            in[i] = (int32_t)(sharc_rng_u64(7, (uint64_t)s, (uint64_t)i) % (uint64_t)c.vocab_size);
            tg[i] = (int32_t)(sharc_rng_u64(8, (uint64_t)s, (uint64_t)i) % (uint64_t)c.vocab_size);
        }
        if (s == 1 && getenv("SHARC_PROFILE")) sharc_prof_enable(true); /* after the warm-up step */
        double t0 = now();
        SHARC_PROF("zero_grad", sharc_fsdp_zero_grad(e));
        double t1 = now();
        sharc_model_forward_backward(m, e, in, tg, 1.0f / (float)(B * T));
        double t2 = now();
        double norm;
        SHARC_PROF("grad_norm", norm = sqrt(sharc_fsdp_grad_sumsq_local(e)));
        SHARC_PROF("adamw", sharc_adamw_step(opt, e, 1e-4f, sharc_clip_coef(&oc, norm)));
        double t3 = now();
        times[s] = t3 - t0;
        if (s > 0) {
            phase[0] += t1 - t0;
            phase[1] += t2 - t1;
            phase[2] += t3 - t2;
        }
    }
    if (sharc_prof_enabled()) sharc_prof_report(stderr, steps);
    qsort(times + 1, (size_t)steps, sizeof(double), cmp_double);
    double med = times[1 + steps / 2];
    double tps = (double)B * T / med;
    sharc_mem_stats mem;
    sharc_mem_get(&mem);
    printf("{\"family\": \"%s\", \"params\": %lld, \"batch\": %d, \"seq\": %d, \"threads\": %d, \"blas_core\": \"%s\", "
           "\"step_ms\": %.1f, \"tokens_per_s\": %.1f, \"gflops_per_s\": %.1f, \"zero_grad_ms\": %.1f, "
           "\"fwd_bwd_ms\": %.1f, \"optim_ms\": %.1f, \"peak_mem_mib\": %.1f}\n",
           sharc_family_name(c.family), (long long)sharc_model_num_params(&c), B, T, sharc_threads_get(),
           sharc_blas_get_info()->corename, med * 1e3, tps, sharc_model_flops_per_token(&c, T) * tps * 1e-9,
           phase[0] / steps * 1e3, phase[1] / steps * 1e3, phase[2] / steps * 1e3,
           (double)mem.peak_total / (1 << 20));
    free(in);
    free(tg);
    free(times);
    sharc_adamw_free(opt);
    sharc_fsdp_free(e);
    sharc_model_free(m);
    return 0;
}
