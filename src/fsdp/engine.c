/* engine.c: sharc_fsdp_*, owner of every parameter, gradient and shard.
 * This is the one-process engine: the shard is the whole unit, so gather
 * returns the shard and the gradient buffer is the sharded gradient.
 * The unit life cycle it enforces is the one the multi-process engine keeps:
 * SHARDED -> gather -> GATHERED -> forward_done / backward_done -> SHARDED. */
#include "sharc/alloc.h"
#include "sharc/fsdp.h"
#include "sharc/rng.h"
#include "layout.h"
#include "../core/parallel.h"

#include <stdlib.h>
#include <string.h>

typedef enum { UNIT_SHARDED = 0, UNIT_GATHERED } unit_state;

typedef struct {
    sharc_unit_spec spec;
    int64_t numel_shard;  /* padded shard size */
    int64_t shard_lo;     /* first element of this rank's shard in the flat buffer */
    float *param_shard;   /* (numel_shard) fp32 master parameters, SHARC_MEM_PARAMS */
    float *grad_shard;    /* (numel_shard) gradients, SHARC_MEM_GRADS */
    sharc_segment segs[SHARC_MAX_UNIT_PARAMS];
    int nseg;
    unit_state state;
} unit_t;

struct sharc_fsdp {
    sharc_fsdp_config cfg;
    int nunits;
    unit_t *units;
};

void sharc_fsdp_config_default(sharc_fsdp_config *c) {
    memset(c, 0, sizeof *c);
    c->strategy = SHARC_FULL_SHARD;
    c->reshard_after_forward = -1;
    c->fsdp_size = 0;
}

sharc_status sharc_fsdp_init(sharc_fsdp **out, const sharc_unit_spec *units, int nunits,
                             const sharc_fsdp_config *cfg) {
    *out = NULL;
    sharc_fsdp *e = calloc(1, sizeof *e);
    if (!e) return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    e->cfg = *cfg;
    e->nunits = nunits;
    e->units = calloc((size_t)nunits, sizeof(unit_t));
    if (!e->units) {
        free(e);
        return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    }
    for (int u = 0; u < nunits; u++) {
        unit_t *t = &e->units[u];
        t->spec = units[u];
        t->numel_shard = sharc_layout_numel_shard(t->spec.numel, 1);
        t->shard_lo = 0;
        t->param_shard = sharc_alloc((size_t)t->numel_shard * sizeof(float), SHARC_MEM_PARAMS);
        t->grad_shard = sharc_alloc((size_t)t->numel_shard * sizeof(float), SHARC_MEM_GRADS);
        if (!t->param_shard || !t->grad_shard) {
            sharc_status st = sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate unit '%s' (%lld floats)",
                                          t->spec.name, (long long)t->numel_shard);
            sharc_fsdp_free(e);
            return st;
        }
        t->nseg = sharc_layout_segments(&t->spec, t->shard_lo, t->shard_lo + t->numel_shard, t->segs);
    }
    *out = e;
    return SHARC_OK;
}

void sharc_fsdp_free(sharc_fsdp *e) {
    if (!e) return;
    for (int u = 0; u < e->nunits; u++) {
        sharc_free(e->units[u].param_shard);
        sharc_free(e->units[u].grad_shard);
    }
    free(e->units);
    free(e);
}

static float init_value(const sharc_param_spec *p, uint64_t seed, uint64_t stream, int64_t i) {
    switch (p->init) {
    case SHARC_INIT_ZEROS: return 0.0f;
    case SHARC_INIT_ONES: return 1.0f;
    case SHARC_INIT_NORMAL: return p->std * sharc_rng_normal(seed, stream, (uint64_t)i);
    }
    return 0.0f;
}

void sharc_fsdp_init_params(sharc_fsdp *e, uint64_t seed) {
    for (int u = 0; u < e->nunits; u++) {
        unit_t *t = &e->units[u];
        for (int s = 0; s < t->nseg; s++) {
            const sharc_segment *g = &t->segs[s];
            const sharc_param_spec *p = &t->spec.params[g->param];
            uint64_t stream = sharc_rng_stream(p->name);
            float *dst = t->param_shard + g->shard_off;
#pragma omp parallel for schedule(static) if (g->len > 65536)
            for (int64_t i = 0; i < g->len; i++) dst[i] = init_value(p, seed, stream, g->param_off + i);
        }
    }
}

static unit_t *unit_at(const sharc_fsdp *e, int u) {
    SHARC_CHECK(u >= 0 && u < e->nunits);
    return &e->units[u];
}

const float *sharc_fsdp_gather(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    t->state = UNIT_GATHERED;
    return t->param_shard;
}

void sharc_fsdp_forward_done(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    SHARC_CHECK(t->state == UNIT_GATHERED);
    if (!t->spec.root) t->state = UNIT_SHARDED;
}

float *sharc_fsdp_grad(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    return t->grad_shard;
}

void sharc_fsdp_backward_done(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    t->state = UNIT_SHARDED;
}

void sharc_fsdp_release(sharc_fsdp *e, int u) {
    unit_t *t = unit_at(e, u);
    t->state = UNIT_SHARDED;
}

void sharc_fsdp_zero_grad(sharc_fsdp *e) {
    for (int u = 0; u < e->nunits; u++)
        memset(e->units[u].grad_shard, 0, (size_t)e->units[u].numel_shard * sizeof(float));
}

int sharc_fsdp_num_units(const sharc_fsdp *e) { return e->nunits; }
const sharc_unit_spec *sharc_fsdp_unit_spec(const sharc_fsdp *e, int u) { return &unit_at(e, u)->spec; }
int64_t sharc_fsdp_shard_numel(const sharc_fsdp *e, int u) { return unit_at(e, u)->numel_shard; }
float *sharc_fsdp_shard_params(sharc_fsdp *e, int u) { return unit_at(e, u)->param_shard; }
float *sharc_fsdp_shard_grads(sharc_fsdp *e, int u) { return unit_at(e, u)->grad_shard; }

int sharc_fsdp_shard_segments(const sharc_fsdp *e, int u, const sharc_segment **out) {
    const unit_t *t = unit_at(e, u);
    *out = t->segs;
    return t->nseg;
}

/* Sum of squares of n floats: fp32 sums over blocks of 4096 (vectorised),
 * added in double. Deterministic: the blocking does not depend on threads. */
SHARC_VEC static double sumsq_block(const float *g, int64_t n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += g[i] * g[i];
    return (double)acc;
}

double sharc_fsdp_grad_sumsq_local(const sharc_fsdp *e) {
    double total = 0.0;
    for (int u = 0; u < e->nunits; u++) {
        const unit_t *t = &e->units[u];
        for (int s = 0; s < t->nseg; s++) {
            const float *g = t->grad_shard + t->segs[s].shard_off;
            int64_t n = t->segs[s].len, nb = (n + 4095) / 4096;
            double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (nb > 16)
            for (int64_t b = 0; b < nb; b++) {
                int64_t lo = b * 4096, len = n - lo < 4096 ? n - lo : 4096;
                acc += sumsq_block(g + lo, len);
            }
            total += acc;
        }
    }
    return total;
}

sharc_status sharc_fsdp_find_param(const sharc_fsdp *e, const char *name, int *unit, int *param) {
    for (int u = 0; u < e->nunits; u++) {
        int p = sharc_unit_find_param(&e->units[u].spec, name);
        if (p >= 0) {
            *unit = u;
            *param = p;
            return SHARC_OK;
        }
    }
    return sharc_error(SHARC_ERR_INVALID, "fsdp: no parameter named '%s' in this model", name);
}

sharc_status sharc_fsdp_param_write_local(sharc_fsdp *e, const char *name, const float *src,
                                          int64_t numel) {
    int u, p;
    SHARC_TRY(sharc_fsdp_find_param(e, name, &u, &p));
    unit_t *t = &e->units[u];
    if (numel != t->spec.params[p].numel)
        return sharc_error(SHARC_ERR_INVALID, "fsdp: parameter '%s' has %lld elements, got %lld",
                           name, (long long)t->spec.params[p].numel, (long long)numel);
    for (int s = 0; s < t->nseg; s++)
        if (t->segs[s].param == p)
            memcpy(t->param_shard + t->segs[s].shard_off, src + t->segs[s].param_off,
                   (size_t)t->segs[s].len * sizeof(float));
    return SHARC_OK;
}

sharc_status sharc_fsdp_param_read_local(const sharc_fsdp *e, const char *name, float *dst,
                                         int64_t numel) {
    int u, p;
    SHARC_TRY(sharc_fsdp_find_param(e, name, &u, &p));
    const unit_t *t = &e->units[u];
    if (numel != t->spec.params[p].numel)
        return sharc_error(SHARC_ERR_INVALID, "fsdp: parameter '%s' has %lld elements, got %lld",
                           name, (long long)t->spec.params[p].numel, (long long)numel);
    for (int s = 0; s < t->nseg; s++)
        if (t->segs[s].param == p)
            memcpy(dst + t->segs[s].param_off, t->param_shard + t->segs[s].shard_off,
                   (size_t)t->segs[s].len * sizeof(float));
    return SHARC_OK;
}
