/* units.c: building unit specs (sharc/units.h). */
#include "sharc/units.h"
#include "sharc/status.h"

#include <stdio.h>
#include <string.h>

void sharc_unit_add_param(sharc_unit_spec *u, const char *name, int ndim, const int64_t *shape,
                          sharc_init_kind init, float std, bool decay) {
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
    u->numel += p->numel;
}

int sharc_unit_find_param(const sharc_unit_spec *u, const char *name) {
    for (int i = 0; i < u->nparams; i++)
        if (strcmp(u->params[i].name, name) == 0) return i;
    return -1;
}
