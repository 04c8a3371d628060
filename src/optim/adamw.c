/* adamw.c: sharc_adamw_*, sharc_lr_at and sharc_clip_coef: the optimizer
 * over this rank's shards only, its moments on the engine's device and its
 * update the device's adamw kernel (sharc/kernels.h). Note
 * [padding-excluded]: the update runs on the shard's parameter segments, so
 * padding is never touched. Note [frozen-params] (src/fsdp/units.c): frozen
 * parameters are skipped, and a unit with nothing trainable has no moments. */
#include "sharc/optim.h"
#include "sharc/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sharc_optim_config_default(sharc_optim_config *c) {
    memset(c, 0, sizeof *c);
    c->lr = 3e-4f;
    c->min_lr_ratio = 0.1f;
    c->warmup_steps = 0;
    c->decay = SHARC_LR_COSINE;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->max_grad_norm = 1.0f;
}

float sharc_lr_at(const sharc_optim_config *c, int64_t step, int64_t max_steps) {
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (c->decay == SHARC_LR_CONSTANT) return c->lr;
    int64_t span = c->decay_steps > 0 ? c->decay_steps : max_steps - c->warmup_steps;
    double progress = span > 0 ? (double)(step - c->warmup_steps) / (double)span : 1.0;
    if (progress > 1.0) progress = 1.0;
    double floor_lr = (double)c->lr * c->min_lr_ratio;
    double k = c->decay == SHARC_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * progress)) : 1.0 - progress;
    return (float)(floor_lr + ((double)c->lr - floor_lr) * k);
}

float sharc_clip_coef(const sharc_optim_config *c, double grad_norm) {
    if (c->max_grad_norm <= 0.0f) return 1.0f;
    double coef = (double)c->max_grad_norm / (grad_norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

struct sharc_adamw {
    sharc_optim_config cfg;
    sharc_device *dev; /* the engine's */
    int nunits;
    float **m, **v; /* (nunits) each (numel_shard), device memory */
    int64_t t;
};

sharc_status sharc_adamw_init(sharc_adamw **out, sharc_fsdp *e, const sharc_optim_config *c) {
    *out = NULL;
    sharc_adamw *a = calloc(1, sizeof *a);
    if (!a) return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    a->cfg = *c;
    a->dev = sharc_fsdp_device(e);
    a->nunits = sharc_fsdp_num_units(e);
    a->m = calloc((size_t)a->nunits, sizeof(float *));
    a->v = calloc((size_t)a->nunits, sizeof(float *));
    if (!a->m || !a->v) {
        sharc_adamw_free(a);
        return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    }
    for (int u = 0; u < a->nunits; u++) {
        if (!sharc_unit_trainable(sharc_fsdp_unit_spec(e, u))) continue; /* no moments */
        size_t bytes = (size_t)sharc_fsdp_shard_numel(e, u) * sizeof(float);
        a->m[u] = sharc_device_alloc(a->dev, bytes, SHARC_MEM_OPTIM);
        a->v[u] = sharc_device_alloc(a->dev, bytes, SHARC_MEM_OPTIM);
        if (!a->m[u] || !a->v[u]) {
            sharc_adamw_free(a);
            return sharc_error(SHARC_ERR_NOMEM, "adamw: cannot allocate moments (%zu bytes)", bytes);
        }
    }
    *out = a;
    return SHARC_OK;
}

void sharc_adamw_free(sharc_adamw *a) {
    if (!a) return;
    for (int u = 0; u < a->nunits; u++) {
        if (a->m) sharc_device_free(a->dev, a->m[u]);
        if (a->v) sharc_device_free(a->dev, a->v[u]);
    }
    free(a->m);
    free(a->v);
    free(a);
}

void sharc_adamw_step(sharc_adamw *a, sharc_fsdp *e, float lr, float grad_scale) {
    a->t++;
    const sharc_optim_config *c = &a->cfg;
    /* scalars in double, as PyTorch computes them in Python */
    double bc1 = 1.0 - pow((double)c->beta1, (double)a->t);
    double bc2 = 1.0 - pow((double)c->beta2, (double)a->t);
    const sharc_kernels *k = sharc_device_kernels(a->dev);
    sharc_stream *stream = sharc_device_stream(a->dev);
    sharc_adamw_scalars sc = {.beta1 = c->beta1,
                              .beta2 = c->beta2,
                              .step_size = (float)((double)lr / bc1),
                              .sqrt_bc2 = (float)sqrt(bc2),
                              .eps = c->eps,
                              .grad_scale = grad_scale};
    float decay_mul = (float)(1.0 - (double)lr * c->weight_decay);
    sharc_fsdp_shard_write_begin(e);
    for (int u = 0; u < a->nunits; u++) {
        if (!a->m[u]) continue; /* frozen */
        float *p = sharc_fsdp_shard_write(e, u), *g = sharc_fsdp_shard_grads(e, u);
        const sharc_unit_spec *spec = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        for (int s = 0; s < nseg; s++) {
            if (spec->params[segs[s].param].frozen) continue;
            int64_t off = segs[s].shard_off;
            sc.decay_mul = spec->params[segs[s].param].decay ? decay_mul : 1.0f;
            k->adamw(stream, p + off, g + off, a->m[u] + off, a->v[u] + off, segs[s].len, &sc);
        }
    }
    sharc_fsdp_shard_write_end(e);
}

int64_t sharc_adamw_steps(const sharc_adamw *a) { return a->t; }
void sharc_adamw_set_steps(sharc_adamw *a, int64_t t) { a->t = t; }
float *sharc_adamw_m(sharc_adamw *a, int u) { return a->m[u]; }
float *sharc_adamw_v(sharc_adamw *a, int u) { return a->v[u]; }
