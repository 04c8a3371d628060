/* weights.c: sharc_weights_*, a model's parameters as one safetensors file. */
#include "sharc/weights.h"
#include "sharc/activity.h"
#include "sharc/alloc.h"
#include "sharc/device.h"
#include "sharc/safetensors.h"

#include <stdlib.h>
#include <string.h>

sharc_status sharc_weights_save(sharc_fsdp *e, sharc_comm *world, const sharc_config *config, const char *path) {
    bool writer = !world || sharc_comm_rank(world) == 0;
    int total = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) total += sharc_fsdp_unit_spec(e, u)->nparams;
    sharc_st_entry *entries = calloc((size_t)total, sizeof *entries);
    float *full = sharc_alloc((size_t)sharc_fsdp_gathered_unit_bytes(e), SHARC_MEM_OTHER);
    /* note [tp-params]: under tensor parallelism the tp ranks' units are
     * gathered too (parts) and each split parameter assembled (whole) */
    sharc_comm *tpg = sharc_fsdp_tp_group(e);
    const int tp = tpg ? sharc_comm_size(tpg) : 1;
    int64_t unit_max = 0, param_max = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        unit_max = s->numel > unit_max ? s->numel : unit_max;
        for (int p = 0; p < s->nparams; p++)
            param_max = s->params[p].numel > param_max ? s->params[p].numel : param_max;
    }
    float *parts = tpg ? sharc_alloc((size_t)(unit_max * tp) * sizeof(float), SHARC_MEM_OTHER) : NULL;
    float *whole = tpg ? sharc_alloc((size_t)param_max * sizeof(float), SHARC_MEM_OTHER) : NULL;
    sharc_status st = (!entries || !full || (tpg && (!parts || !whole)))
                          ? sharc_error(SHARC_ERR_NOMEM, "weights: out of memory")
                          : SHARC_OK;
    int n = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e) && entries; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams; p++)
            entries[n++] = (sharc_st_entry){.name = s->params[p].name,
                                            .dtype = SHARC_DT_F32,
                                            .ndim = s->params[p].ndim,
                                            .shape = s->params[p].shape};
    }
    sharc_st_stream *out = NULL;
    if (writer && st == SHARC_OK) {
        char *yaml = sharc_config_to_yaml(config);
        const char *mk[2] = {"sharc.config", "sharc.version"};
        const char *mv[2] = {yaml ? yaml : "", "1"};
        st = sharc_st_stream_open(&out, path, entries, n, mk, mv, 2);
        free(yaml);
    }
    /* every rank takes part in every gather, whatever happened on rank 0:
     * a failure is agreed at the end, never a hang */
    bool ok = st == SHARC_OK;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        sharc_activity_phase("saving weights", u, s->name); /* progress for the watchdog */
        sharc_status g = full ? sharc_fsdp_gather_master(e, u, full) : SHARC_ERR_NOMEM;
        if (g == SHARC_OK && tpg) /* every tp rank's unit has s->numel elements (even splits) */
            g = parts ? sharc_comm_all_gather(tpg, full, parts, (size_t)s->numel, SHARC_DT_F32) : SHARC_ERR_NOMEM;
        if (g != SHARC_OK && ok) {
            st = g;
            ok = false;
        }
        for (int p = 0; p < s->nparams && writer && ok; p++) {
            const sharc_param_spec *ps = &s->params[p];
            const float *src = full + ps->offset;
            if (tpg && ps->tp_dim >= 0) {
                for (int j = 0; j < tp; j++) {
                    sharc_param_spec q = *ps;
                    q.tp_rank = j;
                    for (int64_t l = 0, f, run; l < q.numel_local; l += run) {
                        run = sharc_param_tp_run(&q, l, &f);
                        memcpy(whole + f, parts + (int64_t)j * s->numel + ps->offset + l, (size_t)run * sizeof(float));
                    }
                }
                src = whole;
            }
            st = sharc_st_stream_append(out, src, (size_t)ps->numel * sizeof(float));
            ok = st == SHARC_OK;
        }
    }
    if (out) {
        if (ok) st = sharc_st_stream_close(out);
        else sharc_st_stream_abort(out);
    }
    sharc_free(full);
    sharc_free(parts);
    sharc_free(whole);
    free(entries);
    /* every rank returns the same verdict (note [agreement]) */
    if (world) st = sharc_comm_agree(world, st, SHARC_ERR_IO, "weights: saving failed on rank %d (see its message)");
    return st;
}

static sharc_status load_shards(sharc_fsdp *e, const char *path) {
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
                st = sharc_error(SHARC_ERR_FORMAT,
                                 "weights '%s': parameter '%s' is missing (is this a checkpoint of another model?)",
                                 path, ps->name);
                break;
            }
            bool same = t->ndim == ps->ndim;
            for (int d = 0; same && d < ps->ndim; d++) same = t->shape[d] == ps->shape[d];
            if (!same) {
                char want[96] = "", got[96] = "";
                for (int d = 0; d < ps->ndim; d++)
                    snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                             (long long)ps->shape[d]);
                for (int d = 0; d < t->ndim; d++)
                    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                             (long long)t->shape[d]);
                st = sharc_error(SHARC_ERR_FORMAT, "weights '%s': '%s' has shape [%s], this model needs [%s]", path,
                                 ps->name, got, want);
                break;
            }
        }
    }
    if (st == SHARC_OK && sharc_st_count(f) != expected) {
        for (int i = 0; i < sharc_st_count(f); i++) {
            int u, p;
            if (sharc_fsdp_find_param(e, sharc_st_tensor_at(f, i)->name, &u, &p) != SHARC_OK) {
                st = sharc_error(SHARC_ERR_FORMAT, "weights '%s': tensor '%s' is not a parameter of this model", path,
                                 sharc_st_tensor_at(f, i)->name);
                break;
            }
        }
    }
    /* everything checked: now read this rank's segments */
    const bool host = sharc_device_is_host(sharc_fsdp_shard_device(e));
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        sharc_activity_phase("loading weights", u, s->name); /* progress for the watchdog */
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        float *shard = sharc_fsdp_shard_write(e, u);
        /* note [shard-host-io]: a device's shard is read into one host
         * buffer per unit, copied in by queued copies, waited for once */
        int64_t need = 1;
        for (int k = 0; k < nseg; k++)
            if (segs[k].shard_off + segs[k].len > need) need = segs[k].shard_off + segs[k].len;
        float *tmp = host ? NULL : malloc((size_t)need * sizeof(float));
        if (!host && !tmp)
            st = sharc_error(SHARC_ERR_NOMEM, "weights '%s': out of memory for a unit of %lld floats", path,
                             (long long)need);
        for (int k = 0; k < nseg && st == SHARC_OK; k++) {
            const sharc_st_tensor *t = sharc_st_find(f, s->params[segs[k].param].name);
            st = sharc_st_read_f32(f, t, segs[k].param_off, segs[k].len, (tmp ? tmp : shard) + segs[k].shard_off);
            if (st == SHARC_OK && tmp)
                st = sharc_fsdp_shard_queue_in(e, u, segs[k].shard_off, tmp + segs[k].shard_off, segs[k].len);
        }
        if (tmp) { /* the unit's one wait, also after a failure: queued copies read tmp */
            sharc_status w = sharc_device_synchronize(sharc_device_stream(sharc_fsdp_shard_device(e)));
            if (st == SHARC_OK) st = w;
            free(tmp);
        }
    }
    sharc_st_close(f);
    return st;
}

sharc_status sharc_weights_load(sharc_fsdp *e, const char *path) {
    /* on every rank whatever happens inside: the shards may be written (the
     * write bracket of sharc/fsdp.h) */
    sharc_fsdp_shard_write_begin(e);
    sharc_status st = load_shards(e, path);
    sharc_fsdp_shard_write_end(e);
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
