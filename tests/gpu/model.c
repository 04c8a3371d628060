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
 * Prints PASS/FAIL lines and "N passed, N failed"; exit 77 without a GPU.
 * Run separately from gpu_kernels by tests/gpu/run.sh, so that a crash in the
 * engine on a device (note [cuda-train]) is one failed check, not a lost suite. */
#include "sharc/blas.h"
#include "sharc/device.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/rng.h"
#include "sharc/status.h"

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

int main(int argc, char **argv) {
    if (sharc_device_open("cuda", 0, &gpu) != SHARC_OK) {
        printf("no GPU: %s\n", sharc_last_error());
        return 77;
    }
    const char *only = argc > 1 ? argv[1] : "";
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
