/* inspect.c: reading a checkpoint with no trainer and no communication:
 * sharc_ckpt_inspect (`sharc ckpt inspect`), sharc_ckpt_resolve, and the
 * weights of a checkpoint for sharc export, generate and eval
 * (sharc_ckpt_read_config, sharc_ckpt_load_params, sharc_ckpt_find_weights). */
#include "internal.h"
#include "sharc/config.h"
#include "sharc/log.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------- inspect */

sharc_status sharc_ckpt_inspect(const char *path, FILE *out) {
    char dir[PATHLEN], man[PATHLEN + 32];
    snprintf(man, sizeof man, "%s/" MANIFEST_NAME, path);
    snprintf(dir, sizeof dir, "%s", path);
    if (!sharc_ckpt_exists(man)) {
        int64_t *steps;
        int n = sharc_ckpt_commit_list(path, &steps);
        if (n == 0) {
            free(steps);
            return sharc_error(SHARC_ERR_INVALID,
                               "ckpt inspect: '%s' is not a checkpoint (no manifest.json, no step-N "
                               "directory with one)",
                               path);
        }
        sharc_ckpt_commit_step_path(dir, sizeof dir, path, steps[0], "");
        free(steps);
    }
    sharc_ckpt_manifest m;
    sharc_status st = sharc_ckpt_manifest_read(&m, dir);
    if (st != SHARC_OK) {
        sharc_ckpt_manifest_free(&m);
        return st;
    }
    fprintf(out, "checkpoint %s\n", dir);
    fprintf(out, "  format_version %lld, step %lld (AdamW step %lld)\n", (long long)m.version, (long long)m.step,
            (long long)m.adam_step);
    fprintf(out, "  written by %lld ranks, %s (%lld shard x %lld replicate)\n", (long long)m.world_size, m.strategy,
            (long long)m.dp_shard, (long long)m.dp_replicate);
    fprintf(out, "  model %s\n", json_object_to_json_string_ext(m.model, JSON_C_TO_STRING_PLAIN));
    fprintf(out, "  train %s\n", json_object_to_json_string_ext(m.train, JSON_C_TO_STRING_PLAIN));
    int64_t elems = 0, total = 0;
    fprintf(out, "  %d tensors (parameter + exp_avg + exp_avg_sq, F32):\n", m.ntensors);
    for (int i = 0; i < m.ntensors; i++) {
        char shape[128] = "";
        for (int d = 0; d < m.tensors[i].ndim; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
                     (long long)m.tensors[i].shape[d]);
        fprintf(out, "    %-48s [%s] in %d range%s\n", m.tensors[i].name, shape, m.tensors[i].nr,
                m.tensors[i].nr == 1 ? "" : "s");
        elems += m.tensors[i].numel;
    }
    st = sharc_ckpt_shard_verify(&m, out, &total);
    if (st == SHARC_OK)
        fprintf(out, "  %lld parameters, %lld bytes in %d files, every checksum verified\n", (long long)elems,
                (long long)total, m.nfiles);
    sharc_ckpt_manifest_free(&m);
    return st;
}

/* ----------------------------------------------- without a trainer */

sharc_status sharc_ckpt_resolve(const char *path, char *step_dir, size_t n) {
    char man[PATHLEN + 32];
    if (strlen(path) >= SHARC_CKPT_PATH_MAX)
        return sharc_error(SHARC_ERR_INVALID, "ckpt: path '%.64s...' is too long (%d bytes at most)", path,
                           SHARC_CKPT_PATH_MAX - 1);
    snprintf(man, sizeof man, "%s/" MANIFEST_NAME, path);
    if (sharc_ckpt_exists(man)) { /* a step directory: load checks what it reads */
        if (strlen(path) >= n) return sharc_error(SHARC_ERR_INVALID, "ckpt: path '%s' is too long", path);
        snprintf(step_dir, n, "%s", path);
        return SHARC_OK;
    }
    if (!sharc_ckpt_is_dir(path))
        return sharc_error(SHARC_ERR_INVALID, "ckpt '%s': %s", path,
                           sharc_ckpt_exists(path)
                               ? "not a directory (a checkpoint is a step-N directory or a directory of them)"
                               : "no such file or directory");
    const char *base = strrchr(path, '/');
    base = base && base[1] ? base + 1 : path;
    int64_t *steps;
    int ns = sharc_ckpt_commit_list(path, &steps);
    if (ns == 0) {
        free(steps);
        if (sharc_ckpt_commit_parse_step(base) >= 0)
            return sharc_error(SHARC_ERR_FORMAT,
                               "ckpt '%s': no manifest.json (an incomplete save, or its manifest was "
                               "removed)",
                               path);
        return sharc_error(SHARC_ERR_INVALID,
                           "ckpt '%s': not a checkpoint (no manifest.json, no step-N directory "
                           "with one)",
                           path);
    }
    /* the newest that passes every check, as auto resume does: `latest` is
     * not trusted, a newer checkpoint that fails is reported and skipped */
    char p[PATHLEN];
    sharc_status st = SHARC_ERR_FORMAT;
    for (int i = 0; i < ns; i++) {
        sharc_ckpt_commit_step_path(p, sizeof p, path, steps[i], "");
        sharc_ckpt_manifest m;
        st = sharc_ckpt_manifest_read(&m, p);
        if (st == SHARC_OK) st = sharc_ckpt_shard_verify(&m, NULL, NULL);
        sharc_ckpt_manifest_free(&m);
        if (st == SHARC_OK) break;
        sharc_warn("%s", sharc_last_error());
        sharc_warn("ckpt: %s cannot be used; %s", p,
                   i + 1 < ns ? "falling back to the previous checkpoint" : "no older checkpoint left");
    }
    free(steps);
    if (st != SHARC_OK)
        return sharc_error(st, "ckpt '%s': none of its %d checkpoints passes its checks (the reasons are above)", path,
                           ns);
    if (strlen(p) >= n) return sharc_error(SHARC_ERR_INVALID, "ckpt: path '%s' is too long", p);
    snprintf(step_dir, n, "%s", p);
    return SHARC_OK;
}

sharc_status sharc_ckpt_read_config(const char *step_dir, sharc_config *cfg) {
    sharc_ckpt_manifest m;
    const char *yaml = NULL;
    sharc_status st = sharc_ckpt_manifest_read(&m, step_dir);
    if (st == SHARC_OK) st = sharc_ckpt_manifest_get_str(&m, m.root, "config", &yaml);
    if (st == SHARC_OK && !yaml[0])
        st = sharc_ckpt_manifest_bad(&m, "\"config\" is empty: the checkpoint holds no run configuration");
    if (st == SHARC_OK) {
        char origin[PATHLEN + 64];
        snprintf(origin, sizeof origin, "%s (its \"config\")", m.path);
        sharc_config_default(cfg);
        st = sharc_config_load_string(cfg, yaml, origin);
        if (st == SHARC_OK) st = sharc_config_validate(cfg);
        if (st == SHARC_OK) st = sharc_ckpt_manifest_check_model(&m, &cfg->model, true);
    }
    sharc_ckpt_manifest_free(&m);
    return st;
}

sharc_status sharc_ckpt_load_params(sharc_fsdp *e, const char *step_dir) {
    /* whatever happens: the shards may be written (the write bracket of sharc/fsdp.h) */
    sharc_fsdp_shard_write_begin(e);
    sharc_ckpt_manifest m;
    sharc_status st = sharc_ckpt_manifest_read(&m, step_dir);
    if (st == SHARC_OK) st = sharc_ckpt_shard_read(&m, e, NULL);
    sharc_ckpt_manifest_free(&m);
    sharc_fsdp_shard_write_end(e);
    return st;
}

/* Note [inference-source] (sharc/source.h). */
sharc_status sharc_ckpt_find_weights(const char *arg, char *path, size_t n, bool *is_ckpt) {
    struct stat sb;
    *is_ckpt = false;
    if (stat(arg, &sb) != 0 || !S_ISDIR(sb.st_mode)) { /* a file, or nothing: the reader names it */
        snprintf(path, n, "%s", arg);
        return SHARC_OK;
    }
    char p[SHARC_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/model.safetensors", arg);
    if (stat(p, &sb) == 0) {
        snprintf(path, n, "%s", p);
        return SHARC_OK;
    }
    snprintf(p, sizeof p, "%s/checkpoints", arg);
    *is_ckpt = true;
    return sharc_ckpt_resolve(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode) ? p : arg, path, n);
}
