/* manifest.c: sharc_ckpt_manifest_*, a checkpoint's manifest.json
 * (json-c): read and checked field by field, built from every rank's ranges
 * and checksums, and the model it names (docs/ARCHITECTURE.md, "Checkpoints",
 * **Manifest**). */
#include "internal.h"
#include "sharc/config.h"
#include "sharc/fileio.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void sharc_ckpt_manifest_free(sharc_ckpt_manifest *m) {
    for (int i = 0; i < m->nfiles; i++) {
        free(m->files[i].chunk_crc);
        if (m->files[i].fd >= 0) close(m->files[i].fd);
    }
    free(m->files);
    for (int i = 0; i < m->ntensors; i++) free(m->tensors[i].r);
    free(m->tensors);
    if (m->root) json_object_put(m->root);
    memset(m, 0, sizeof *m);
}

sharc_status sharc_ckpt_manifest_bad(const sharc_ckpt_manifest *m, const char *what) {
    return sharc_error(SHARC_ERR_FORMAT, "ckpt '%s': %s", m->path, what);
}

sharc_status sharc_ckpt_manifest_get_i64(const sharc_ckpt_manifest *m, json_object *o, const char *key, int64_t *v) {
    json_object *x;
    if (!o || !json_object_object_get_ex(o, key, &x) || !json_object_is_type(x, json_type_int)) {
        char w[200];
        snprintf(w, sizeof w, "\"%s\" is missing or not an integer", key);
        return sharc_ckpt_manifest_bad(m, w);
    }
    *v = json_object_get_int64(x);
    return SHARC_OK;
}

sharc_status sharc_ckpt_manifest_get_str(const sharc_ckpt_manifest *m, json_object *o, const char *key,
                                         const char **v) {
    json_object *x;
    if (!o || !json_object_object_get_ex(o, key, &x) || !json_object_is_type(x, json_type_string)) {
        char w[200];
        snprintf(w, sizeof w, "\"%s\" is missing or not a string", key);
        return sharc_ckpt_manifest_bad(m, w);
    }
    *v = json_object_get_string(x);
    return SHARC_OK;
}

sharc_status sharc_ckpt_manifest_get_arr(const sharc_ckpt_manifest *m, json_object *o, const char *key,
                                         json_object **v) {
    if (!o || !json_object_object_get_ex(o, key, v) || !json_object_is_type(*v, json_type_array)) {
        char w[200];
        snprintf(w, sizeof w, "\"%s\" is missing or not a list", key);
        return sharc_ckpt_manifest_bad(m, w);
    }
    return SHARC_OK;
}

static int cmp_range(const void *a, const void *b) {
    const sharc_ckpt_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

sharc_status sharc_ckpt_manifest_read(sharc_ckpt_manifest *m, const char *step_dir) {
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "%s", step_dir);
    snprintf(m->path, sizeof m->path, "%s/" MANIFEST_NAME, step_dir);
    char *text;
    size_t len;
    sharc_status st = sharc_read_file(m->path, &text, &len);
    if (st != SHARC_OK) {
        return sharc_error(st, "ckpt '%s': cannot read the manifest: %s", step_dir,
                           sharc_ckpt_is_dir(step_dir)   ? "no manifest.json (an incomplete or foreign directory)"
                           : sharc_ckpt_exists(step_dir) ? "not a directory (a checkpoint is a step-N directory)"
                                                         : "no such checkpoint");
    }
    json_tokener *tok = json_tokener_new();
    m->root = tok ? json_tokener_parse_ex(tok, text, (int)len) : NULL;
    enum json_tokener_error jerr = tok ? json_tokener_get_error(tok) : json_tokener_error_parse_eof;
    if (tok) json_tokener_free(tok);
    free(text);
    if (!m->root || jerr != json_tokener_success) {
        char w[300];
        if (jerr == json_tokener_success) jerr = json_tokener_continue; /* nothing parsed */
        snprintf(w, sizeof w, "not valid JSON (%s)",
                 jerr == json_tokener_continue ? "it ends before the JSON value does: a truncated file?"
                                               : json_tokener_error_desc(jerr));
        if (m->root) json_object_put(m->root);
        m->root = NULL;
        return sharc_ckpt_manifest_bad(m, w);
    }
    const char *format = NULL;
    SHARC_TRY(sharc_ckpt_manifest_get_str(m, m->root, "format", &format));
    if (strcmp(format, "sharc-checkpoint") != 0)
        return sharc_ckpt_manifest_bad(m, "\"format\" is not \"sharc-checkpoint\"");
    SHARC_TRY(sharc_ckpt_manifest_get_i64(m, m->root, "format_version", &m->version));
    if (m->version > SHARC_CKPT_FORMAT_VERSION || m->version < 1) {
        return sharc_error(SHARC_ERR_FORMAT,
                           "ckpt '%s': format_version %lld; this sharc reads version %d (a checkpoint from a newer "
                           "sharc: upgrade sharc to load it)",
                           m->path, (long long)m->version, SHARC_CKPT_FORMAT_VERSION);
    }
    SHARC_TRY(sharc_ckpt_manifest_get_i64(m, m->root, "step", &m->step));
    SHARC_TRY(sharc_ckpt_manifest_get_i64(m, m->root, "world_size", &m->world_size));
    SHARC_TRY(sharc_ckpt_manifest_get_i64(m, m->root, "dp_shard", &m->dp_shard));
    SHARC_TRY(sharc_ckpt_manifest_get_i64(m, m->root, "dp_replicate", &m->dp_replicate));
    SHARC_TRY(sharc_ckpt_manifest_get_str(m, m->root, "strategy", &m->strategy));
    SHARC_TRY(sharc_ckpt_manifest_get_i64(m, m->root, "chunk_bytes", &m->chunk_bytes));
    if (m->chunk_bytes <= 0 || m->chunk_bytes > (1ll << 30))
        return sharc_ckpt_manifest_bad(m, "\"chunk_bytes\" out of range");
    if (!json_object_object_get_ex(m->root, "model", &m->model) || !json_object_is_type(m->model, json_type_object))
        return sharc_ckpt_manifest_bad(m, "\"model\" is missing or not an object");
    if (!json_object_object_get_ex(m->root, "train", &m->train) || !json_object_is_type(m->train, json_type_object))
        return sharc_ckpt_manifest_bad(m, "\"train\" is missing or not an object");
    SHARC_TRY(sharc_ckpt_manifest_get_i64(m, m->train, "adam_step", &m->adam_step));
    json_object *files, *tensors;
    SHARC_TRY(sharc_ckpt_manifest_get_arr(m, m->root, "files", &files));
    SHARC_TRY(sharc_ckpt_manifest_get_arr(m, m->root, "tensors", &tensors));
    int nfiles = (int)json_object_array_length(files);
    m->files = calloc((size_t)nfiles + 1, sizeof *m->files);
    if (!m->files) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    m->nfiles = nfiles;
    for (int i = 0; i < m->nfiles; i++) m->files[i].fd = -1;
    for (int i = 0; i < m->nfiles; i++) {
        sharc_ckpt_file *f = &m->files[i];
        json_object *o = json_object_array_get_idx(files, (size_t)i), *chunks;
        const char *name;
        int64_t crc;
        SHARC_TRY(sharc_ckpt_manifest_get_str(m, o, "name", &name));
        if (strlen(name) >= sizeof f->name || strchr(name, '/'))
            return sharc_ckpt_manifest_bad(m, "a file name is too long or has a '/'");
        snprintf(f->name, sizeof f->name, "%s", name);
        SHARC_TRY(sharc_ckpt_manifest_get_i64(m, o, "bytes", &f->bytes));
        SHARC_TRY(sharc_ckpt_manifest_get_i64(m, o, "crc32", &crc));
        f->crc = (uint32_t)crc;
        SHARC_TRY(sharc_ckpt_manifest_get_arr(m, o, "chunk_crc32", &chunks));
        f->nchunks = (int64_t)json_object_array_length(chunks);
        if (f->bytes < 0 || f->nchunks != (f->bytes + m->chunk_bytes - 1) / m->chunk_bytes)
            return sharc_ckpt_manifest_bad(m, "a file's chunk_crc32 list does not match its size");
        f->chunk_crc = malloc(sizeof(uint32_t) * (size_t)(f->nchunks + 1));
        if (!f->chunk_crc) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
        for (int64_t c = 0; c < f->nchunks; c++)
            f->chunk_crc[c] = (uint32_t)json_object_get_int64(json_object_array_get_idx(chunks, (size_t)c));
    }
    int ntensors = (int)json_object_array_length(tensors);
    m->tensors = calloc((size_t)ntensors + 1, sizeof *m->tensors);
    if (!m->tensors) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    m->ntensors = ntensors;
    for (int i = 0; i < m->ntensors; i++) {
        sharc_ckpt_tensor *t = &m->tensors[i];
        json_object *o = json_object_array_get_idx(tensors, (size_t)i), *shape, *ranges;
        const char *dtype;
        SHARC_TRY(sharc_ckpt_manifest_get_str(m, o, "name", &t->name));
        SHARC_TRY(sharc_ckpt_manifest_get_str(m, o, "dtype", &dtype));
        char w[400];
        if (strcmp(dtype, "F32") != 0) {
            snprintf(w, sizeof w, "tensor '%s' has dtype %s, expected F32", t->name, dtype);
            return sharc_ckpt_manifest_bad(m, w);
        }
        SHARC_TRY(sharc_ckpt_manifest_get_arr(m, o, "shape", &shape));
        SHARC_TRY(sharc_ckpt_manifest_get_arr(m, o, "ranges", &ranges));
        t->ndim = (int)json_object_array_length(shape);
        if (t->ndim < 1 || t->ndim > 4) {
            snprintf(w, sizeof w, "tensor '%s' has %d dimensions", t->name, t->ndim);
            return sharc_ckpt_manifest_bad(m, w);
        }
        t->numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            t->shape[d] = json_object_get_int64(json_object_array_get_idx(shape, (size_t)d));
            if (t->shape[d] <= 0 || t->shape[d] > (1ll << 40)) {
                snprintf(w, sizeof w, "tensor '%s' has a bad shape", t->name);
                return sharc_ckpt_manifest_bad(m, w);
            }
            t->numel *= t->shape[d];
        }
        t->nr = (int)json_object_array_length(ranges);
        t->r = calloc((size_t)t->nr + 1, sizeof *t->r);
        if (!t->r) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
        for (int k = 0; k < t->nr; k++) {
            json_object *r = json_object_array_get_idx(ranges, (size_t)k);
            if (!json_object_is_type(r, json_type_array) || json_object_array_length(r) != 4) {
                snprintf(w, sizeof w, "tensor '%s': a range is not [file, begin, end, offset]", t->name);
                return sharc_ckpt_manifest_bad(m, w);
            }
            sharc_ckpt_range *x = &t->r[k];
            x->file = json_object_get_int64(json_object_array_get_idx(r, 0));
            x->begin = json_object_get_int64(json_object_array_get_idx(r, 1));
            x->end = json_object_get_int64(json_object_array_get_idx(r, 2));
            x->offset = json_object_get_int64(json_object_array_get_idx(r, 3));
            if (x->file < 0 || x->file >= m->nfiles || x->begin < 0 || x->end <= x->begin || x->end > t->numel ||
                x->offset < 0 || x->offset + KINDS * 4 * (x->end - x->begin) > m->files[x->file].bytes) {
                snprintf(w, sizeof w, "tensor '%s': range %d lies outside its tensor or file", t->name, k);
                return sharc_ckpt_manifest_bad(m, w);
            }
        }
        qsort(t->r, (size_t)t->nr, sizeof *t->r, cmp_range);
        int64_t at = 0;
        for (int k = 0; k < t->nr; k++) {
            if (t->r[k].begin != at) break;
            at = t->r[k].end;
        }
        if (at != t->numel) {
            snprintf(w, sizeof w, "tensor '%s': its ranges do not cover elements [0, %lld) exactly once", t->name,
                     (long long)t->numel);
            return sharc_ckpt_manifest_bad(m, w);
        }
    }
    return SHARC_OK;
}

const sharc_ckpt_tensor *sharc_ckpt_manifest_find(const sharc_ckpt_manifest *m, const char *name) {
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

static void json_add_i64(json_object *o, const char *k, int64_t v) {
    json_object_object_add(o, k, json_object_new_int64(v));
}

static json_object *model_json(const sharc_model_config *m) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "family", json_object_new_string(sharc_family_name(m->family)));
    json_add_i64(o, "num_layers", m->num_layers);
    json_add_i64(o, "embed_dim", m->embed_dim);
    json_add_i64(o, "num_heads", m->num_heads);
    json_add_i64(o, "num_kv_heads", m->num_kv_heads);
    json_add_i64(o, "ff_hidden_dim", m->ff_hidden_dim);
    json_add_i64(o, "vocab_size", m->vocab_size);
    json_add_i64(o, "max_seq_len", m->max_seq_len);
    json_object_object_add(o, "tie_embeddings", json_object_new_boolean(m->tie_embeddings));
    return o;
}

char *sharc_ckpt_manifest_build(const sharc_ckpt_state *st, const sharc_ckpt_plan *plan, int64_t step,
                                int64_t adam_step, const sharc_ckpt_written *w) {
    const sharc_config *cfg = st->cfg;
    const sharc_fsdp *e = st->engine;
    const int R = w->R, S = st->mesh->dp_shard * st->mesh->tp; /* files: note [ckpt-layout] */
    const int64_t *hdr = w->hdr, *recs = w->recs, *chunks = w->chunks, maxrec = w->maxrec, maxchunk = w->maxchunk;
    json_object *root = json_object_new_object();
    json_object_object_add(root, "format", json_object_new_string("sharc-checkpoint"));
    json_add_i64(root, "format_version", SHARC_CKPT_FORMAT_VERSION);
    json_add_i64(root, "step", step);
    json_add_i64(root, "world_size", R);
    json_object_object_add(root, "strategy", json_object_new_string(sharc_sharding_name(cfg->fsdp.engine.strategy)));
    json_add_i64(root, "dp_shard", st->mesh->dp_shard);
    json_add_i64(root, "tp", st->mesh->tp);
    json_add_i64(root, "dp_replicate", st->mesh->dp_replicate);
    json_object_object_add(root, "model", model_json(&cfg->model));
    json_object *tr = json_object_new_object();
    int64_t G = (int64_t)cfg->train.batch_size * cfg->train.grad_accum * st->mesh->dp; /* data streams */
    json_add_i64(tr, "step", step);
    json_add_i64(tr, "adam_step", adam_step);
    json_object_object_add(tr, "next_lr",
                           json_object_new_double((double)sharc_lr_at(&cfg->optim, step, cfg->train.max_steps)));
    json_add_i64(tr, "max_steps", cfg->train.max_steps);
    json_add_i64(tr, "sequences_per_step", G);
    json_add_i64(tr, "samples_consumed", step * G);
    json_add_i64(tr, "data_seed", (int64_t)cfg->data.seed);
    json_object_object_add(tr, "data_shuffle", json_object_new_boolean(cfg->data.shuffle));
    json_add_i64(tr, "train_seed", (int64_t)cfg->train.seed);
    json_object_object_add(tr, "rng",
                           json_object_new_string("none besides data_seed and step: the sampler is a pure function of "
                                                  "(data.seed, step) and dropout does not exist"));
    json_object_object_add(root, "train", tr);
    char *yaml = sharc_config_to_yaml(cfg);
    json_object_object_add(root, "config", json_object_new_string(yaml ? yaml : ""));
    free(yaml);
    json_add_i64(root, "chunk_bytes", SHARC_CKPT_CHUNK_BYTES);
    json_object_object_add(
        root, "layout",
        json_object_new_string(
            "each range [file, begin, end, offset]: the parameter's elements [begin, end), then exp_avg's, then "
            "exp_avg_sq's, float32 little-endian, back to back from byte offset"));
    /* files in shard order; writer rank of shard s */
    int *who = malloc(sizeof(int) * (size_t)S);
    for (int r = 0; r < R; r++)
        if (hdr[6 * r]) who[hdr[6 * r + 1]] = r;
    json_object *files = json_object_new_array();
    for (int s = 0; s < S; s++) {
        int r = who[s];
        json_object *f = json_object_new_object();
        char name[96];
        snprintf(name, sizeof name, "shard-%05d-of-%05d.bin", s, S);
        json_object_object_add(f, "name", json_object_new_string(name));
        json_add_i64(f, "bytes", hdr[6 * r + 4]);
        json_add_i64(f, "crc32", hdr[6 * r + 5]);
        json_object *cc = json_object_new_array();
        for (int64_t k = 0; k < hdr[6 * r + 3]; k++)
            json_object_array_add(cc, json_object_new_int64(chunks[(int64_t)r * maxchunk + k]));
        json_object_object_add(f, "chunk_crc32", cc);
        json_object_array_add(files, f);
    }
    json_object_object_add(root, "files", files);
    json_object *tensors = json_object_new_array();
    for (int g = 0; g < plan->nglobal; g++) {
        const sharc_param_spec *p = &sharc_fsdp_unit_spec(e, plan->gp_unit[g])->params[plan->gp_param[g]];
        json_object *t = json_object_new_object(), *shape = json_object_new_array(), *ranges = json_object_new_array();
        json_object_object_add(t, "name", json_object_new_string(p->name));
        json_object_object_add(t, "dtype", json_object_new_string("F32"));
        for (int d = 0; d < p->ndim; d++) json_object_array_add(shape, json_object_new_int64(p->shape[d]));
        json_object_object_add(t, "shape", shape);
        for (int s = 0; s < S; s++) {
            int r = who[s];
            for (int64_t k = 0; k < hdr[6 * r + 2]; k++) {
                const int64_t *x = recs + ((int64_t)r * maxrec + k) * 4;
                if (x[0] != g) continue;
                json_object *rg = json_object_new_array();
                json_object_array_add(rg, json_object_new_int64(s));
                json_object_array_add(rg, json_object_new_int64(x[1]));
                json_object_array_add(rg, json_object_new_int64(x[2]));
                json_object_array_add(rg, json_object_new_int64(x[3]));
                json_object_array_add(ranges, rg);
            }
        }
        json_object_object_add(t, "ranges", ranges);
        json_object_array_add(tensors, t);
    }
    json_object_object_add(root, "tensors", tensors);
    /* note [frozen-params]: the names frozen in this run; their units' moments are stored as zeros */
    json_object *frozen = json_object_new_array();
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams; p++)
            if (s->params[p].frozen) json_object_array_add(frozen, json_object_new_string(s->params[p].name));
    }
    json_object_object_add(root, "frozen", frozen);
    free(who);
    const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *text = s ? strdup(s) : NULL;
    json_object_put(root);
    return text;
}

/* Note [frozen-params]: a resumed run trains the parameters its checkpoint
 * trained. The manifest's "frozen" list (absent in older checkpoints: none)
 * must name exactly the parameters this run freezes; the first one that
 * differs is named. (Moments of frozen units are zeros, so unfreezing on
 * resume would silently restart their Adam state.) */
sharc_status sharc_ckpt_manifest_check_frozen(const sharc_ckpt_manifest *m, sharc_fsdp *e) {
    static const char *const why = "(model.freeze_module_prefix, train.trainable): resume with the checkpoint's "
                                   "frozen set, or export its weights (sharc export) and start a new run from them "
                                   "(model.init_from)";
    json_object *list = NULL;
    if (json_object_object_get_ex(m->root, "frozen", &list) && !json_object_is_type(list, json_type_array))
        return sharc_ckpt_manifest_bad(m, "\"frozen\" is not a list");
    size_t n = list ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *x = json_object_array_get_idx(list, i);
        int u, p;
        if (!json_object_is_type(x, json_type_string) ||
            sharc_fsdp_find_param(e, json_object_get_string(x), &u, &p) != SHARC_OK)
            return sharc_ckpt_manifest_bad(m, "\"frozen\" holds an entry that is not a parameter name of this model");
        if (!sharc_fsdp_unit_spec(e, u)->params[p].frozen)
            return sharc_error(SHARC_ERR_INVALID,
                               "ckpt '%s': parameter '%s' is frozen in the checkpoint but trains "
                               "in this run %s",
                               m->path, json_object_get_string(x), why);
    }
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams; p++) {
            if (!s->params[p].frozen) continue;
            bool there = false;
            for (size_t i = 0; i < n && !there; i++)
                there = strcmp(json_object_get_string(json_object_array_get_idx(list, i)), s->params[p].name) == 0;
            if (!there)
                return sharc_error(SHARC_ERR_INVALID,
                                   "ckpt '%s': parameter '%s' is frozen in this run but trained "
                                   "in the checkpoint %s",
                                   m->path, s->params[p].name, why);
        }
    }
    return SHARC_OK;
}

sharc_status sharc_ckpt_manifest_check_model(const sharc_ckpt_manifest *m, const sharc_model_config *mc, bool own) {
    json_object *want = model_json(mc);
    sharc_status st = SHARC_OK;
    json_object_object_foreach(want, key, val) {
        json_object *got;
        const char *a = json_object_to_json_string(val);
        const char *b = json_object_object_get_ex(m->model, key, &got) ? json_object_to_json_string(got) : "(missing)";
        if (strcmp(a, b) != 0 && own) {
            st = sharc_error(SHARC_ERR_FORMAT,
                             "ckpt '%s': model.%s is %s in \"model\" but %s in \"config\": the "
                             "manifest contradicts itself",
                             m->path, key, b, a);
            break;
        }
        if (strcmp(a, b) != 0) {
            st = sharc_error(SHARC_ERR_FORMAT,
                             "ckpt '%s': model.%s is %s in the checkpoint, %s in this run: a checkpoint of another "
                             "model cannot be loaded",
                             m->path, key, b, a);
            break;
        }
    }
    json_object_put(want);
    return st;
}
