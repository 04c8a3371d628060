/* tests/gpu/model.c (build/gpu_model [name]): whole-model forward + backward
 * on the CUDA device against the CPU device, one process (world size 1):
 * GPT-2, Llama, Qwen3 (qk_norm) and Qwen3-MoE in fp32 (TF32 off) within 1e-4,
 * and Llama, Qwen3 and Qwen3-MoE computing in bf16 (fsdp.param_dtype bf16,
 * the CPU under SHARC_BF16=emulate where it lacks bf16 instructions) within
 * 2e-2 (on cuda Llama's attention (head dim 16) then runs the tensor-core
 * kernels, note [cuda-attention-tc]; Qwen3's head dim 10 the fp32 ones): the initial parameters (the same counter-based draws), the loss of
 * forward_backward and of forward_loss, and every parameter's gradient
 * (relative). The GPU model gets its token ids and targets as device arrays
 * (kernels read device memory only). A name (see main) runs one model.
 * `gpu_model torch DIR` instead runs the 20-step PyTorch fixture trajectories
 * (DIR/{gpt2,llama}_train.safetensors, the ones tests/test_torch_parity.c
 * checks on the CPU) on the GPU in fp32: every step's loss within 1e-4 of
 * PyTorch's, the step-0 gradients, gradient norms, learning rates and final
 * weights within that test's tolerances (see torch_parity below);
 * `gpu_model torch DIR STEPS` only the first STEPS (the CUDA simulator's
 * shorter run), the final weights then not compared.
 * Prints PASS/FAIL lines and "N passed, N failed"; exit 77 without a GPU.
 * Run separately from gpu_kernels by tests/gpu/run.sh, so that a crash in the
 * engine on a device (note [cuda-train]) is one failed check, not a lost suite. */
#include "sharc/blas.h"
#include "sharc/device.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/rng.h"
#include "sharc/safetensors.h"
#include "sharc/status.h"
#include "sharc/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
static sharc_device *gpu;

static void result(const char *name, bool ok, const char *detail) {
    if (ok) passed++;
    else failed++;
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
    fflush(stdout);
}

static void compare(const char *name, const float *got, const float *ref, int64_t n, double tol) {
    double dd = 0, rr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            char m[160];
            snprintf(m, sizeof m, "element %lld is %g", (long long)i, (double)got[i]);
            result(name, false, m);
            return;
        }
        double d = (double)got[i] - ref[i];
        dd += d * d;
        rr += (double)ref[i] * ref[i];
    }
    double rel = sqrt(dd) / (rr > 0 ? sqrt(rr) : 1.0);
    char m[160];
    snprintf(m, sizeof m, "rel %.3g (tol %.0e, n %lld)", rel, tol, (long long)n);
    result(name, rel <= tol, m);
}

typedef struct {
    sharc_model *m;
    sharc_fsdp *e;
} side;

/* bf16: fsdp.param_dtype bf16 with the model told before its plan, so it
 * computes in bf16 with bf16 activations (note [bf16-acts]) */
static bool setup(side *x, const sharc_model_config *c, sharc_device *dev, int B, int T, bool ac, bool bf16) {
    if (sharc_model_init(&x->m, c, dev) != SHARC_OK) return false;
    if (bf16) sharc_model_set_param_dtype(x->m, SHARC_DT_BF16);
    if (sharc_model_plan(x->m, B, T, ac) != SHARC_OK) return false;
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    if (bf16) fc.param_dtype = SHARC_DT_BF16;
    if (sharc_fsdp_init(&x->e, sharc_model_units(x->m), sharc_model_num_units(x->m), sharc_model_schedule(x->m), &fc,
                        NULL, sharc_model_device(x->m)) != SHARC_OK)
        return false;
    sharc_fsdp_init_params(x->e, 42);
    return true;
}

/* a unit's shard (parameters or gradients) as host floats */
static float *host_of(sharc_device *dev, const float *p, int64_t n) {
    float *h = malloc((size_t)n * sizeof(float));
    if (sharc_device_copy(dev, h, p, (size_t)n * sizeof(float), SHARC_COPY_DEVICE_TO_HOST, NULL) != SHARC_OK ||
        sharc_device_synchronize(sharc_device_stream(dev)) != SHARC_OK) {
        fprintf(stderr, "gpu_model: copy out: %s\n", sharc_last_error());
        exit(1);
    }
    return h;
}

typedef enum { PLAIN, QWEN3, QWEN3_MOE } variant;

/* One model on both devices: the family's plain form, Qwen3 (qk_norm, a
 * head_dim of its own) or Qwen3-MoE (4 experts, top-2, layer 1 dense, the
 * auxiliary loss on); fp32 within 1e-4, or bf16 compute on both (the CPU's
 * under SHARC_BF16=emulate where it has no bf16 instructions) within 2e-2. */
static void run(sharc_family f, variant v, bool ac, bool bf16) {
    char tag[96], name[192];
    snprintf(tag, sizeof tag, "%s%s%s",
             v == QWEN3       ? "qwen3"
             : v == QWEN3_MOE ? "qwen3_moe"
                              : sharc_family_name(f),
             bf16 ? " bf16" : "", ac ? " (activation checkpointing)" : "");
    double tol = bf16 ? 2e-2 : 1e-4;
    sharc_model_config c;
    sharc_model_config_default(&c, f);
    c.num_layers = 2;
    c.embed_dim = 48;
    c.num_heads = 3;
    c.num_kv_heads = f == SHARC_FAMILY_LLAMA ? 1 : 3;
    c.ff_hidden_dim = f == SHARC_FAMILY_LLAMA ? 70 : 0;
    c.vocab_size = 37;
    c.max_seq_len = 16;
    c.init_std = 0.2f;
    if (v != PLAIN) {
        c.qk_norm = true;
        c.head_dim = 10;
    }
    if (v == QWEN3_MOE) {
        c.num_experts = 4;
        c.num_experts_per_tok = 2;
        c.moe_intermediate_size = 12;
        c.norm_topk_prob = true;
        snprintf(c.mlp_only_layers, sizeof c.mlp_only_layers, "1");
        c.router_aux_loss_coef = 0.05f;
        c.output_router_logits = true;
    }
    if (bf16 && sharc_bf16_mode_get(NULL) == SHARC_BF16_NONE) sharc_bf16_mode_set(SHARC_BF16_EMULATED);
    int B = 2, T = 13, N = B * T;
    side cpu, g;
    if (!setup(&cpu, &c, NULL, B, T, ac, bf16)) {
        snprintf(name, sizeof name, "%s: CPU model", tag);
        result(name, false, sharc_last_error());
        return;
    }
    if (!setup(&g, &c, gpu, B, T, ac, bf16)) {
        snprintf(name, sizeof name, "%s: GPU model and engine", tag);
        result(name, false, sharc_last_error());
        return;
    }
    if (bf16) {
        snprintf(name, sizeof name, "%s: both models compute in bf16", tag);
        result(name, sharc_model_computes_bf16(cpu.m, cpu.e) && sharc_model_computes_bf16(g.m, g.e), "");
    }
    int32_t in[64], tgt[64];
    for (int i = 0; i < N; i++) {
        in[i] = (int32_t)(sharc_rng_u64(5, 1, (uint64_t)i) % 37);
        tgt[i] = i == 3 ? -1 : (int32_t)(sharc_rng_u64(5, 2, (uint64_t)i) % 37);
    }
    int32_t *din = sharc_device_alloc(gpu, sizeof in, SHARC_MEM_OTHER),
            *dtgt = sharc_device_alloc(gpu, sizeof tgt, SHARC_MEM_OTHER);
    sharc_device_copy(gpu, din, in, sizeof in, SHARC_COPY_HOST_TO_DEVICE, NULL);
    sharc_device_copy(gpu, dtgt, tgt, sizeof tgt, SHARC_COPY_HOST_TO_DEVICE, NULL);
    int nu = sharc_fsdp_num_units(cpu.e);
    for (int u = 0; u < nu; u++) {
        int64_t n = sharc_fsdp_unit_spec(cpu.e, u)->numel;
        float *hp = host_of(gpu, sharc_fsdp_shard_params(g.e, u), n);
        snprintf(name, sizeof name, "%s: initial parameters of %s", tag, sharc_fsdp_unit_spec(cpu.e, u)->name);
        compare(name, hp, sharc_fsdp_shard_params(cpu.e, u), n, 1e-6);
        free(hp);
    }
    sharc_fsdp_zero_grad(cpu.e);
    sharc_fsdp_zero_grad(g.e);
    float scale = 1.0f / (float)(N - 1);
    double lc = sharc_model_forward_backward(cpu.m, cpu.e, in, tgt, scale);
    double lg = sharc_model_forward_backward(g.m, g.e, din, dtgt, scale);
    char m[160];
    snprintf(m, sizeof m, "GPU %.9g, CPU %.9g", lg, lc);
    snprintf(name, sizeof name, "%s: forward_backward loss", tag);
    result(name, isfinite(lg) && fabs(lg - lc) <= tol * fabs(lc), m);
    for (int u = 0; u < nu; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(cpu.e, u);
        float *hg = host_of(gpu, sharc_fsdp_shard_grads(g.e, u), s->numel);
        const float *cg = sharc_fsdp_shard_grads(cpu.e, u);
        for (int i = 0; i < s->nparams; i++) {
            snprintf(name, sizeof name, "%s: gradient of %s", tag, s->params[i].name);
            compare(name, hg + s->params[i].offset, cg + s->params[i].offset, s->params[i].numel, tol);
        }
        free(hg);
    }
    lc = sharc_model_forward_loss(cpu.m, cpu.e, in, tgt);
    lg = sharc_model_forward_loss(g.m, g.e, din, dtgt);
    snprintf(m, sizeof m, "GPU %.9g, CPU %.9g", lg, lc);
    snprintf(name, sizeof name, "%s: forward_loss", tag);
    result(name, isfinite(lg) && fabs(lg - lc) <= tol * fabs(lc), m);
    sharc_device_free(gpu, din);
    sharc_device_free(gpu, dtgt);
    sharc_fsdp_free(g.e);
    sharc_model_free(g.m);
    sharc_fsdp_free(cpu.e);
    sharc_model_free(cpu.m);
}

/* The PyTorch fixture trajectories (tools/gen_fixtures.py, fp64) on the GPU:
 * the model and hyperparameters from the file's __metadata__, its initial
 * weights, its batches, 20 steps of sharc_train_step_run (the trainer's
 * step). Tolerances are tests/test_torch_parity.c's (reasons there): loss
 * 1e-4 relative at every step; step-0 gradients 1e-4 relative + 1e-5 x
 * max |ref| of the tensor, element by element; gradient norm 1e-5 at step
 * 0, 1e-3 later; lr 1e-6; final weights every element within 1e-3 and 95%
 * of each tensor's (GPT-2's key bias aside) within 2e-5 + 1e-4 |ref|. */
static bool meta_num(const sharc_st_file *f, const char *key, double *x) {
    const char *v = sharc_st_metadata(f, key);
    char *end;
    if (!v) return false;
    *x = strtod(v, &end);
    return end != v && !*end;
}

static float *fixture_f32(const sharc_st_file *f, const char *prefix, const char *name, int64_t n) {
    char full[SHARC_NAME_MAX + 16];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (p && sharc_st_load_f32(f, full, p, n) != SHARC_OK) {
        free(p);
        return NULL;
    }
    return p;
}

/* steps > 0: only the first `steps` (the CUDA simulator's shorter run); the
 * final weights are then not compared (a SKIP line) */
static void torch_parity(sharc_family family, const char *dir, int steps_wanted) {
    const char *fam = sharc_family_name(family);
    char path[1024], name[256], m[1400];
    snprintf(path, sizeof path, "%s/%s_train.safetensors", dir, fam);
    snprintf(name, sizeof name, "PyTorch fixture %s on the GPU: the fixture and model", fam);
    sharc_st_file *f;
    if (sharc_st_open(&f, path) != SHARC_OK) {
        result(name, false, sharc_last_error());
        return;
    }
    static const char *keys[] = {
        "num_layers",   "embed_dim",    "num_heads", "num_kv_heads", "ff_hidden_dim", "vocab_size",   "max_seq_len",
        "norm_eps",     "rope_theta",   "steps",     "grad_accum",   "batch",         "seq_len",      "lr",
        "warmup_steps", "min_lr_ratio", "beta1",     "beta2",        "adam_eps",      "weight_decay", "max_grad_norm"};
    enum { NKEYS = sizeof keys / sizeof keys[0] };
    double k[NKEYS];
    for (int i = 0; i < NKEYS; i++)
        if (!meta_num(f, keys[i], &k[i])) {
            snprintf(m, sizeof m, "%s: __metadata__ key %s missing or not a number", path, keys[i]);
            result(name, false, m);
            sharc_st_close(f);
            return;
        }
    sharc_model_config c;
    sharc_model_config_default(&c, family);
    c.num_layers = (int)k[0];
    c.embed_dim = (int)k[1];
    c.num_heads = (int)k[2];
    c.num_kv_heads = (int)k[3];
    c.ff_hidden_dim = (int)k[4];
    c.vocab_size = (int)k[5];
    c.max_seq_len = (int)k[6];
    c.norm_eps = (float)k[7];
    c.rope_theta = (float)k[8];
    c.tie_embeddings = family == SHARC_FAMILY_GPT2;
    const int S = (int)k[9], A = (int)k[10], B = (int)k[11], T = (int)k[12];
    const int run_steps = steps_wanted > 0 && steps_wanted < S ? steps_wanted : S;
    const int64_t per_step = (int64_t)A * B * T;
    sharc_optim_config oc;
    sharc_optim_config_default(&oc);
    oc.lr = (float)k[13];
    oc.warmup_steps = (int)k[14];
    oc.min_lr_ratio = (float)k[15];
    oc.decay_steps = 0;
    oc.decay = SHARC_LR_COSINE;
    oc.beta1 = (float)k[16];
    oc.beta2 = (float)k[17];
    oc.eps = (float)k[18];
    oc.weight_decay = (float)k[19];
    oc.max_grad_norm = (float)k[20];

    side g = {0};
    sharc_adamw *opt = NULL;
    bool ok = sharc_model_init(&g.m, &c, gpu) == SHARC_OK && sharc_model_plan(g.m, B, T, false) == SHARC_OK;
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    ok = ok && sharc_fsdp_init(&g.e, sharc_model_units(g.m), sharc_model_num_units(g.m), sharc_model_schedule(g.m), &fc,
                               NULL, sharc_model_device(g.m)) == SHARC_OK;
    int nu = ok ? sharc_fsdp_num_units(g.e) : 0, nparams = 0;
    for (int u = 0; ok && u < nu; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(g.e, u);
        for (int p = 0; ok && p < s->nparams; p++, nparams++) {
            float *w = fixture_f32(f, "", s->params[p].name, s->params[p].numel);
            ok = w && sharc_fsdp_param_write_local(g.e, s->params[p].name, w, s->params[p].numel) == SHARC_OK;
            free(w);
        }
    }
    ok = ok && sharc_st_count(f) == 3 * nparams + 5 && sharc_adamw_init(&opt, g.e, &oc) == SHARC_OK;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(S * per_step));
    int32_t *targets = malloc(sizeof(int32_t) * (size_t)(S * per_step));
    float *ref_loss = fixture_f32(f, "", "losses", S), *ref_norm = fixture_f32(f, "", "grad_norm", S);
    float *ref_lr = fixture_f32(f, "", "lr", S);
    ok = ok && tokens && targets && ref_loss && ref_norm && ref_lr &&
         sharc_st_load_i32(f, "tokens", tokens, S * per_step) == SHARC_OK &&
         sharc_st_load_i32(f, "targets", targets, S * per_step) == SHARC_OK;
    if (!ok) result(name, false, sharc_last_error());

    double loss_rel = 0, norm_rel = 0, lr_rel = 0, grad_used = 0;
    int loss_bad = -1, norm_bad = -1, lr_bad = -1, steps = 0;
    char grad_worst[SHARC_NAME_MAX] = "";
    const sharc_train_step_ctx ctx = {.model = g.m, .engine = g.e, .opt = opt, .optim = &oc, .max_steps = S};
    for (int step = 0; ok && step < run_steps; step++) {
        const sharc_train_batch batch = {.grad_accum = A,
                                         .micro_tokens = (int64_t)B * T,
                                         .inputs = tokens + step * per_step,
                                         .targets = targets + step * per_step};
        sharc_train_step_result r;
        if (sharc_train_step_run(&ctx, &batch, step, &r) != SHARC_OK || r.skipped) {
            snprintf(m, sizeof m, "step %d: %s", step, r.skipped ? "skipped (non-finite)" : sharc_last_error());
            snprintf(name, sizeof name, "PyTorch fixture %s on the GPU: the steps run", fam);
            result(name, false, m);
            ok = false;
            break;
        }
        steps++;
        double rel = fabs(r.loss - ref_loss[step]) / fabs((double)ref_loss[step]);
        if (!(rel <= 1e-4) && loss_bad < 0) loss_bad = step;
        loss_rel = fmax(loss_rel, isnan(rel) ? INFINITY : rel);
        rel = fabs(r.grad_norm - ref_norm[step]) / (double)ref_norm[step];
        if (!(rel <= (step == 0 ? 1e-5 : 1e-3)) && norm_bad < 0) norm_bad = step;
        norm_rel = fmax(norm_rel, isnan(rel) ? INFINITY : rel);
        rel = fabs((double)r.lr - ref_lr[step]) / (double)ref_lr[step];
        if (!(rel <= 1e-6) && lr_bad < 0) lr_bad = step;
        lr_rel = fmax(lr_rel, rel);
        if (step > 0) continue;
        /* step 0's gradients (AdamW leaves the gradient shards as they are) */
        for (int u = 0; u < nu; u++) {
            const sharc_unit_spec *s = sharc_fsdp_unit_spec(g.e, u);
            float *hg = host_of(gpu, sharc_fsdp_shard_grads(g.e, u), s->numel);
            for (int p = 0; p < s->nparams; p++) {
                const sharc_param_spec *ps = &s->params[p];
                float *ref = fixture_f32(f, "grad.", ps->name, ps->numel);
                double scale = 0;
                for (int64_t i = 0; ref && i < ps->numel; i++) scale = fmax(scale, fabs((double)ref[i]));
                double atol = 1e-5 * (scale > 0 ? scale : 1.0);
                for (int64_t i = 0; ref && i < ps->numel; i++) {
                    double d = fabs((double)hg[ps->offset + i] - ref[i]), used = d / (atol + 1e-4 * fabs(ref[i]));
                    if (isnan(used)) used = INFINITY;
                    if (used > grad_used) {
                        grad_used = used;
                        snprintf(grad_worst, sizeof grad_worst, "%s[%lld]", ps->name, (long long)i);
                    }
                }
                if (!ref) grad_used = INFINITY, snprintf(grad_worst, sizeof grad_worst, "grad.%s missing", ps->name);
                free(ref);
            }
            free(hg);
        }
    }
    if (ok) {
        snprintf(name, sizeof name, "PyTorch fixture %s on the GPU: %d losses within 1e-4 of PyTorch", fam, run_steps);
        snprintf(m, sizeof m, "worst rel %.2e (first step beyond: %d)", loss_rel, loss_bad);
        result(name, steps == run_steps && loss_bad < 0, m);
        snprintf(name, sizeof name, "PyTorch fixture %s on the GPU: step-0 gradients within 1e-4 + 1e-5 max|ref|", fam);
        snprintf(m, sizeof m, "worst uses %.0f%% of its tolerance (%s)", 100 * grad_used, grad_worst);
        result(name, grad_used <= 1.0, m);
        snprintf(name, sizeof name, "PyTorch fixture %s on the GPU: grad norms (1e-5 at step 0, 1e-3 later), lr (1e-6)",
                 fam);
        snprintf(m, sizeof m, "worst norm rel %.2e (first beyond: step %d), lr rel %.2e (step %d)", norm_rel, norm_bad,
                 lr_rel, lr_bad);
        result(name, norm_bad < 0 && lr_bad < 0, m);
    }
    if (ok && run_steps < S)
        printf("SKIP PyTorch fixture %s on the GPU: final weights (%d of %d steps run)\n", fam, run_steps, S);
    if (ok && run_steps == S) { /* the final weights */
        double worst = 0, frac_worst = 0;
        char where[SHARC_NAME_MAX + 32] = "";
        for (int u = 0; u < nu; u++) {
            const sharc_unit_spec *s = sharc_fsdp_unit_spec(g.e, u);
            float *hp = host_of(gpu, sharc_fsdp_shard_params(g.e, u), s->numel);
            for (int p = 0; p < s->nparams; p++) {
                const sharc_param_spec *ps = &s->params[p];
                float *ref = fixture_f32(f, "final.", ps->name, ps->numel);
                int64_t counted = 0, outside = 0;
                for (int64_t i = 0; ref && i < ps->numel; i++) {
                    double d = fabs((double)hp[ps->offset + i] - ref[i]);
                    if (isnan(d)) d = INFINITY;
                    if (d > worst) worst = d, snprintf(where, sizeof where, "%s[%lld]", ps->name, (long long)i);
                    bool key_bias = family == SHARC_FAMILY_GPT2 && strstr(ps->name, ".attn.c_attn.bias") &&
                                    i >= c.embed_dim && i < 2 * c.embed_dim;
                    if (key_bias) continue;
                    counted++;
                    outside += d > 2e-5 + 1e-4 * fabs(ref[i]);
                }
                if (!ref) worst = INFINITY, snprintf(where, sizeof where, "final.%s missing", ps->name);
                if (counted) frac_worst = fmax(frac_worst, (double)outside / (double)counted);
                free(ref);
            }
            free(hp);
        }
        snprintf(name, sizeof name,
                 "PyTorch fixture %s on the GPU: final weights within 1e-3, 95%% within 2e-5 + 1e-4 |ref|", fam);
        snprintf(m, sizeof m, "worst %.2e at %s, at most %.2f%% of a tensor beyond the tight bound", worst, where,
                 100 * frac_worst);
        result(name, worst <= 1e-3 && frac_worst <= 0.05, m);
    }
    free(tokens);
    free(targets);
    free(ref_loss);
    free(ref_norm);
    free(ref_lr);
    if (opt) sharc_adamw_free(opt);
    if (g.e) sharc_fsdp_free(g.e);
    if (g.m) sharc_model_free(g.m);
    sharc_st_close(f);
}

int main(int argc, char **argv) {
    if (sharc_device_open("cuda", 0, &gpu) != SHARC_OK) {
        printf("no GPU: %s\n", sharc_last_error());
        return 77;
    }
    const char *only = argc > 1 ? argv[1] : "";
    if (strcmp(only, "torch") == 0) { /* gpu_model torch FIXTURE_DIR [STEPS] */
        const char *dir = argc > 2 ? argv[2] : "tests/fixtures";
        int steps = argc > 3 ? atoi(argv[3]) : 0;
        torch_parity(SHARC_FAMILY_GPT2, dir, steps);
        torch_parity(SHARC_FAMILY_LLAMA, dir, steps);
        printf("%d passed, %d failed\n", passed, failed);
        return failed ? 1 : 0;
    }
#define RUN(name, call)                                                                                                \
    if (!only[0] || strcmp(name, only) == 0) call
    RUN("gpt2", run(SHARC_FAMILY_GPT2, PLAIN, false, false));
    RUN("llama", run(SHARC_FAMILY_LLAMA, PLAIN, false, false));
    RUN("gpt2_ac", run(SHARC_FAMILY_GPT2, PLAIN, true, false));
    RUN("qwen3", run(SHARC_FAMILY_LLAMA, QWEN3, false, false));
    RUN("qwen3_moe", run(SHARC_FAMILY_LLAMA, QWEN3_MOE, false, false));
    RUN("llama_bf16", run(SHARC_FAMILY_LLAMA, PLAIN, false, true));
    RUN("qwen3_bf16", run(SHARC_FAMILY_LLAMA, QWEN3, false, true));
    RUN("qwen3_moe_bf16", run(SHARC_FAMILY_LLAMA, QWEN3_MOE, false, true));
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
