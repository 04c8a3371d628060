/* weights.c: sharc_weights_*, a model's parameters as one safetensors file. */
#include "sharc/weights.h"
#include "sharc/safetensors.h"

#include <stdlib.h>
#include <string.h>

sharc_status sharc_weights_save(sharc_fsdp *e, const sharc_config *config, const char *path) {
    int total = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) total += sharc_fsdp_unit_spec(e, u)->nparams;
    sharc_st_entry *entries = calloc((size_t)total, sizeof *entries);
    if (!entries) return sharc_error(SHARC_ERR_NOMEM, "weights: out of memory");
    int n = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        const float *shard = sharc_fsdp_shard_params(e, u);
        for (int p = 0; p < s->nparams; p++) {
            /* one process: each parameter is a single segment of the shard */
            const sharc_segment *g = NULL;
            for (int k = 0; k < nseg; k++)
                if (segs[k].param == p) g = &segs[k];
            if (!g || g->len != s->params[p].numel) {
                free(entries);
                return sharc_error(SHARC_ERR_UNSUPPORTED,
                                   "weights: '%s' is not held whole by this process; save a sharded checkpoint instead",
                                   s->params[p].name);
            }
            entries[n++] = (sharc_st_entry){.name = s->params[p].name, .dtype = SHARC_DT_F32,
                                            .ndim = s->params[p].ndim, .shape = s->params[p].shape,
                                            .data = shard + g->shard_off};
        }
    }
    char *yaml = sharc_config_to_yaml(config);
    const char *mk[2] = {"sharc.config", "sharc.version"};
    const char *mv[2] = {yaml ? yaml : "", "1"};
    sharc_status st = sharc_st_write(path, entries, n, mk, mv, 2);
    free(yaml);
    free(entries);
    return st;
}

sharc_status sharc_weights_load(sharc_fsdp *e, const char *path) {
    sharc_st_file *f;
    SHARC_TRY(sharc_st_open(&f, path));
    sharc_status st = SHARC_OK;
    int expected = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        expected += s->nparams;
        for (int p = 0; p < s->nparams && st == SHARC_OK; p++) {
            const sharc_param_spec *ps = &s->params[p];
            const sharc_st_tensor *t = sharc_st_find(f, ps->name);
            if (!t) {
                st = sharc_error(SHARC_ERR_FORMAT, "weights '%s': parameter '%s' is missing (is this a checkpoint of another model?)",
                                 path, ps->name);
                break;
            }
            bool same = t->ndim == ps->ndim;
            for (int d = 0; same && d < ps->ndim; d++) same = t->shape[d] == ps->shape[d];
            if (!same) {
                char want[96] = "", got[96] = "";
                for (int d = 0; d < ps->ndim; d++)
                    snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)ps->shape[d]);
                for (int d = 0; d < t->ndim; d++)
                    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
                st = sharc_error(SHARC_ERR_FORMAT, "weights '%s': '%s' has shape [%s], this model needs [%s]",
                                 path, ps->name, got, want);
                break;
            }
        }
    }
    if (st == SHARC_OK && sharc_st_count(f) != expected) {
        for (int i = 0; i < sharc_st_count(f); i++) {
            int u, p;
            if (sharc_fsdp_find_param(e, sharc_st_tensor_at(f, i)->name, &u, &p) != SHARC_OK) {
                st = sharc_error(SHARC_ERR_FORMAT, "weights '%s': tensor '%s' is not a parameter of this model",
                                 path, sharc_st_tensor_at(f, i)->name);
                break;
            }
        }
    }
    /* everything checked: now read this rank's segments */
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        float *shard = sharc_fsdp_shard_params(e, u);
        for (int k = 0; k < nseg && st == SHARC_OK; k++) {
            const sharc_st_tensor *t = sharc_st_find(f, s->params[segs[k].param].name);
            st = sharc_st_read_f32(f, t, segs[k].param_off, segs[k].len, shard + segs[k].shard_off);
        }
    }
    sharc_st_close(f);
    return st;
}

sharc_status sharc_weights_read_config(const char *path, sharc_config *config) {
    sharc_st_file *f;
    SHARC_TRY(sharc_st_open(&f, path));
    const char *yaml = sharc_st_metadata(f, "sharc.config");
    sharc_status st;
    if (!yaml) {
        st = sharc_error(SHARC_ERR_FORMAT, "weights '%s': no sharc.config metadata; not a sharc weights file", path);
    } else {
        char origin[1100];
        snprintf(origin, sizeof origin, "%s (sharc.config metadata)", path);
        st = sharc_config_load_string(config, yaml, origin);
    }
    sharc_st_close(f);
    return st;
}
