/* units.c: building unit specs (sharc/units.h) and marking their frozen
 * parameters from the configuration's patterns (note [frozen-params]). */
#include "sharc/units.h"
#include "sharc/status.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sharc_unit_add_param(sharc_unit_spec *u, const char *name, int ndim, const int64_t *shape, sharc_init_kind init,
                          float std, bool decay) {
    SHARC_CHECK(u->nparams < SHARC_MAX_UNIT_PARAMS && ndim >= 1 && ndim <= 4);
    sharc_param_spec *p = &u->params[u->nparams++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= shape[i];
    }
    p->offset = u->numel;
    p->init = init;
    p->std = std;
    p->decay = decay;
    p->numel_local = p->numel;
    p->tp_dim = -1;
    p->tp_parts = p->tp = 1;
    u->numel += p->numel;
}

/* note [tp-params] */
sharc_status sharc_unit_split_param(sharc_unit_spec *u, int i, int dim, int parts, int tp, int rank) {
    SHARC_CHECK(i >= 0 && i < u->nparams && (dim == 0 || dim == 1) && parts >= 1 && tp >= 1 && rank >= 0 && rank < tp);
    sharc_param_spec *p = &u->params[i];
    if (dim >= p->ndim || p->ndim > 2)
        return sharc_error(SHARC_ERR_INVALID, "tp: parameter '%s' (%d dims) cannot be split along dim %d", p->name,
                           p->ndim, dim);
    int64_t n = dim == 0 ? p->shape[0] : p->shape[1];
    if (dim == 0 && n % parts != 0) n = 0; /* refused below */
    int64_t split = dim == 0 ? n / parts : n;
    if (split < 1 || split % tp != 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "mesh.tp: %d does not divide dim %d of '%s' (%lld in %d block(s)); set mesh.tp to a divisor",
                           tp, dim, p->name, (long long)(dim == 0 ? p->shape[0] : p->shape[1]), dim == 0 ? parts : 1);
    p->tp_dim = tp > 1 ? dim : -1;
    p->tp_parts = dim == 0 ? parts : 1;
    p->tp = tp;
    p->tp_rank = rank;
    p->numel_local = p->numel / tp;
    u->numel = 0;
    for (int k = 0; k < u->nparams; k++) {
        u->params[k].offset = u->numel;
        u->numel += u->params[k].numel_local;
    }
    return SHARC_OK;
}

int64_t sharc_param_tp_run(const sharc_param_spec *p, int64_t local, int64_t *full) {
    if (p->tp_dim < 0 || p->tp <= 1) {
        *full = local;
        return p->numel - local;
    }
    int64_t K = p->ndim == 2 ? p->shape[1] : 1;
    if (p->tp_dim == 1) { /* columns: each full row holds one run of K / tp */
        int64_t kl = K / p->tp, i = local / kl, j = local % kl;
        *full = i * K + (int64_t)p->tp_rank * kl + j;
        return kl - j;
    }
    /* rows: tp_parts blocks of Rb rows, this rank's rl rows of each */
    int64_t Rb = p->shape[0] / p->tp_parts, rl = Rb / p->tp, row = local / K, b = row / rl, ri = row % rl;
    *full = (b * Rb + (int64_t)p->tp_rank * rl + ri) * K + local % K;
    return rl * K - (ri * K + local % K);
}

int sharc_unit_max_segments(const sharc_unit_spec *u) {
    int64_t n = 0;
    for (int i = 0; i < u->nparams; i++) {
        const sharc_param_spec *p = &u->params[i];
        n += p->tp_dim == 1 ? p->shape[0] : p->tp_dim == 0 ? p->tp_parts : 1;
    }
    return (int)n;
}

int sharc_unit_find_param(const sharc_unit_spec *u, const char *name) {
    for (int i = 0; i < u->nparams; i++)
        if (strcmp(u->params[i].name, name) == 0) return i;
    return -1;
}

bool sharc_unit_trainable(const sharc_unit_spec *u) {
    for (int i = 0; i < u->nparams; i++)
        if (!u->params[i].frozen) return true;
    return false;
}

/* Calls f(entry, len) for each non-empty, space-trimmed comma-separated
 * entry of list; stops at the first failure. */
typedef sharc_status (*entry_fn)(const char *entry, void *ctx);

static sharc_status each_entry(const char *list, entry_fn f, void *ctx) {
    if (!list) return SHARC_OK;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) p++, len--;
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
        char entry[SHARC_NAME_MAX * 2];
        if (len >= sizeof entry)
            return sharc_error(SHARC_ERR_INVALID, "'%.40s...': an entry longer than %zu bytes", p, sizeof entry - 1);
        memcpy(entry, p, len);
        entry[len] = 0;
        if (len > 0) SHARC_TRY(f(entry, ctx));
        p = e ? e + 1 : p + strlen(p);
    }
    return SHARC_OK;
}

typedef struct {
    sharc_unit_spec *units;
    int nunits;
    bool *keep; /* (parameters, in unit order) matched by a train.trainable glob */
} freeze_ctx;

static const char *first_name(const freeze_ctx *c) {
    return c->nunits > 1 && c->units[1].nparams > 0 ? c->units[1].params[0].name : c->units[0].params[0].name;
}

static sharc_status freeze_prefix(const char *prefix, void *arg) {
    freeze_ctx *c = arg;
    int hits = 0;
    for (int u = 0; u < c->nunits; u++)
        for (int i = 0; i < c->units[u].nparams; i++)
            if (strncmp(c->units[u].params[i].name, prefix, strlen(prefix)) == 0) {
                c->units[u].params[i].frozen = true;
                hits++;
            }
    if (hits == 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "model.freeze_module_prefix: '%s' is the prefix of no parameter (names look like '%s'; "
                           "sharc ckpt inspect or the model's safetensors list them)",
                           prefix, first_name(c));
    return SHARC_OK;
}

static sharc_status keep_glob(const char *glob, void *arg) {
    freeze_ctx *c = arg;
    int hits = 0, k = 0;
    for (int u = 0; u < c->nunits; u++)
        for (int i = 0; i < c->units[u].nparams; i++, k++)
            if (fnmatch(glob, c->units[u].params[i].name, 0) == 0) {
                c->keep[k] = true;
                hits++;
            }
    if (hits == 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "train.trainable: '%s' matches no parameter (a glob such as '*.bias' or 'h.1[01].*'; "
                           "names look like '%s')",
                           glob, first_name(c));
    return SHARC_OK;
}

sharc_status sharc_units_freeze(sharc_unit_spec *units, int nunits, const char *prefixes, const char *trainable,
                                int *nfrozen) {
    int total = 0;
    for (int u = 0; u < nunits; u++) total += units[u].nparams;
    if (nfrozen) *nfrozen = 0;
    if (total == 0) return SHARC_OK;
    freeze_ctx c = {.units = units, .nunits = nunits, .keep = calloc((size_t)total, sizeof(bool))};
    if (!c.keep) return sharc_error(SHARC_ERR_NOMEM, "model: out of memory");
    sharc_status st = each_entry(prefixes, freeze_prefix, &c);
    bool globs = false;
    for (const char *p = trainable; p && *p; p++) globs |= *p != ',' && *p != ' ' && *p != '\t';
    if (st == SHARC_OK && globs) {
        st = each_entry(trainable, keep_glob, &c);
        int k = 0;
        for (int u = 0; u < nunits && st == SHARC_OK; u++)
            for (int i = 0; i < units[u].nparams; i++, k++)
                if (!c.keep[k]) units[u].params[i].frozen = true;
    }
    free(c.keep);
    if (st != SHARC_OK) return st;
    int n = 0;
    for (int u = 0; u < nunits; u++)
        for (int i = 0; i < units[u].nparams; i++) n += units[u].params[i].frozen;
    if (n == total)
        return sharc_error(SHARC_ERR_INVALID,
                           "model.freeze_module_prefix '%s' and train.trainable '%s' freeze all %d parameters: "
                           "nothing would train",
                           prefixes ? prefixes : "", trainable ? trainable : "", total);
    if (nfrozen) *nfrozen = n;
    return SHARC_OK;
}
