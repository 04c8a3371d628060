/* run_dir.c: sharc_run_dir_*, the run directory of sharc train: the checks
 * that can refuse a run before anything is written, and the writes at start.
 *
 * Note [run-dir]. Nothing the user had is lost:
 *  - A run continues the outputs of its directory (checkpoints in ckpt.dir,
 *    model.safetensors, the metrics file) only when it resumed from a
 *    checkpoint of that ckpt.dir (ckpt.resume=auto, or a path inside it),
 *    or with ckpt.resume=auto beside a metrics file alone (a run that
 *    crashed before its first checkpoint: its lines are for steps this run
 *    does again). Otherwise such outputs belong to another run, and it is refused
 *    with one line naming the directory, what it holds and the flags that
 *    continue it (--ckpt.resume=auto) or start over
 *    (--train.overwrite_output_dir=true, Hugging Face Trainer's name, which
 *    deletes them at start), before anything is written.
 *  - Check everything first, write after: every path the run will write is
 *    checked (a directory that is a file, a file that is a directory, a
 *    parent that cannot be created, a read-only file system) on the ranks
 *    that write it, and the verdict agreed, before rank 0 makes out_dir,
 *    writes config.yaml or opens the metrics file. A run refused at start
 *    leaves out_dir exactly as it was.
 *  - A resumed run keeps the metrics (and log.debug) lines up to its step
 *    and appends (note [jsonl] in telemetry.c).
 *  - What crashes leave (FILE.tmp.PID of every atomic write, note
 *    [stale-tmp]; step-N.tmp, step-N.deleting, step-N.old, note
 *    [ckpt-leftovers]) is removed by the next run that writes the directory,
 *    at its start; a resumed run also prunes to ckpt.keep at start, since a
 *    run resumed at train.max_steps saves nothing. */
#include "run_dir.h"
#include "sharc/fileio.h"
#include "sharc/log.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* `path` is a directory sharc may write in, or one it can create: its
 * nearest existing ancestor is a writable directory. `target`: what is to
 * be written there (for the message). */
static sharc_status check_dir(const char *key, const char *path, const char *target) {
    char clip[SHARC_CLIP_BUF], buf[SHARC_PATH_MAX + 64];
    struct stat sb;
    snprintf(buf, sizeof buf, "%s", path);
    for (;;) {
        if (stat(buf, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode)) {
                if (!strcmp(buf, target))
                    return sharc_error(SHARC_ERR_INVALID, "%s: '%s' is a file; expected a directory", key,
                                       sharc_clip(clip, target));
                return sharc_error(SHARC_ERR_INVALID, "%s: '%s' cannot be created: '%s' is a file, not a directory",
                                   key, sharc_clip(clip, target), buf);
            }
            if (access(buf, W_OK | X_OK) != 0)
                return sharc_error(SHARC_ERR_INVALID, "%s: cannot write in '%s': %s", key, buf, strerror(errno));
            return SHARC_OK;
        }
        if (errno != ENOENT && errno != ENOTDIR) /* not a directory: a file above it is named below */
            return sharc_error(SHARC_ERR_INVALID, "%s: '%s': %s", key, sharc_clip(clip, buf), strerror(errno));
        char *slash = strrchr(buf, '/');
        while (slash && slash > buf && slash[1] == 0) { /* "a/b/" */
            *slash = 0;
            slash = strrchr(buf, '/');
        }
        if (!slash) snprintf(buf, sizeof buf, ".");
        else if (slash == buf) buf[1] = 0;
        else *slash = 0;
    }
}

/* `path` will be (re)written as a file: not a directory, and in a directory
 * check_dir accepts. */
static sharc_status check_file(const char *key, const char *path) {
    char clip[SHARC_CLIP_BUF], dir[SHARC_PATH_MAX + 64];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return sharc_error(SHARC_ERR_INVALID, "%s: '%s' is a directory; expected a file there", key,
                           sharc_clip(clip, path));
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    return check_dir(key, dir, path);
}

/* Whether step directory `step_dir` lies in directory `dir`. */
static bool lies_in(const char *step_dir, const char *dir) {
    char parent[SHARC_PATH_MAX + 64], a[PATH_MAX], b[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", step_dir);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    return realpath(parent, a) && realpath(dir, b) && strcmp(a, b) == 0;
}

/* The steps a resumed run keeps in its metrics and debug files: its own
 * history only when it resumed from its own ckpt.dir (note [run-dir]). */
static int64_t keep_step(const sharc_run_dir *d, sharc_ckpt *ck) {
    return d->resumed >= 0 && lies_in(sharc_ckpt_last_path(ck), sharc_ckpt_dir(ck)) ? d->resumed : -1;
}

/* Rank 0: refuse a directory holding another run's outputs (note [run-dir]). */
static sharc_status check_other_run(sharc_run_dir *d, sharc_ckpt *ck) {
    const sharc_config *c = d->cfg;
    const char *ckdir = sharc_ckpt_dir(ck);
    if (keep_step(d, ck) >= 0) return SHARC_OK; /* continuing this directory's run */
    int64_t newest = -1;
    const int n = sharc_ckpt_count(ckdir, &newest);
    struct stat sb;
    const bool weights = stat(d->weights, &sb) == 0 && S_ISREG(sb.st_mode);
    const bool metrics = stat(d->metrics, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0;
    const bool autom = !strcmp(c->ckpt.resume, "auto");
    /* auto beside metrics alone: a run that crashed before its first
     * checkpoint; its lines are for steps this run does again */
    if (n == 0 && !weights && (!metrics || autom)) return SHARC_OK;
    char what[3 * SHARC_PATH_MAX], clip[SHARC_CLIP_BUF];
    what[0] = 0;
    if (n > 0)
        snprintf(what, sizeof what, "%d checkpoint%s up to step %lld in %s", n, n > 1 ? "s" : "", (long long)newest,
                 ckdir);
    if (weights) snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", what[0] ? ", " : "", d->weights);
    if (metrics) snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", what[0] ? ", " : "", d->metrics);
    if (c->train.overwrite_output_dir) {
        d->start_over = true;
        return SHARC_OK;
    }
    const char *why = d->resumed >= 0 ? ", and this run resumes from a checkpoint outside its ckpt.dir"
                      : autom         ? ", and ckpt.resume=auto found no checkpoint of it to continue from"
                                      : " and ckpt.resume is none (a new run)";
    /* what to do before the list, so that a long path never cuts it off */
    return sharc_error(SHARC_ERR_INVALID,
                       "train.out_dir '%s' holds another run%s; nothing was changed. %s start over and delete "
                       "it: --train.overwrite_output_dir=true; or choose another --train.out_dir. It holds: %s",
                       sharc_clip(clip, c->train.out_dir), why,
                       n > 0 && !autom ? "To continue that run: --ckpt.resume=auto; to" : "To", what);
}

sharc_status sharc_run_dir_check(sharc_run_dir *d, const sharc_config *c, sharc_ckpt *ck, int64_t resumed, int rank) {
    memset(d, 0, sizeof *d);
    d->cfg = c;
    d->resumed = resumed;
    const char *out = c->train.out_dir;
    snprintf(d->config, sizeof d->config, "%s/config.yaml", out);
    snprintf(d->weights, sizeof d->weights, "%s/model.safetensors", out);
    if (c->train.metrics_path[0]) snprintf(d->metrics, sizeof d->metrics, "%s", c->train.metrics_path);
    else snprintf(d->metrics, sizeof d->metrics, "%s/metrics.jsonl", out);
    snprintf(d->debug, sizeof d->debug, "%s/debug/rank-%d.log", out, rank);
    if (c->log.debug) SHARC_TRY(check_file("log.debug", d->debug));
    if (rank != 0) return SHARC_OK;
    SHARC_TRY(check_dir("train.out_dir", out, out));
    SHARC_TRY(check_dir(c->ckpt.dir[0] ? "ckpt.dir" : "train.out_dir", sharc_ckpt_dir(ck), sharc_ckpt_dir(ck)));
    SHARC_TRY(check_file("train.out_dir", d->config));
    SHARC_TRY(check_file("train.out_dir", d->weights));
    SHARC_TRY(check_file(c->train.metrics_path[0] ? "train.metrics_path" : "train.out_dir", d->metrics));
    return check_other_run(d, ck);
}

/* mkdir -p of the directory `path` is in. */
static sharc_status make_parent(const char *path) {
    char dir[SHARC_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return SHARC_OK;
    *slash = 0;
    return sharc_mkdirs(dir);
}

/* Starting over (train.overwrite_output_dir): another run's outputs go. */
static sharc_status remove_other_run(sharc_run_dir *d, sharc_ckpt *ck) {
    sharc_warn("train.overwrite_output_dir: deleting the outputs of the run in %s (checkpoints in %s, %s, %s)",
               d->cfg->train.out_dir, sharc_ckpt_dir(ck), d->weights, d->metrics);
    SHARC_TRY(sharc_ckpt_remove_all(sharc_ckpt_dir(ck)));
    if (unlink(d->weights) != 0 && errno != ENOENT)
        return sharc_error(SHARC_ERR_IO, "train: cannot remove '%s': %s", d->weights, strerror(errno));
    return SHARC_OK; /* the metrics file and the debug logs are started empty */
}

sharc_status sharc_run_dir_prepare(sharc_run_dir *d, sharc_ckpt *ck, int rank, sharc_jsonl **metrics,
                                   sharc_jsonl **debug) {
    *metrics = NULL;
    *debug = NULL;
    const sharc_config *c = d->cfg;
    const int64_t keep = d->start_over ? -1 : keep_step(d, ck);
    if (rank == 0) {
        SHARC_TRY(sharc_mkdirs(c->train.out_dir));
        SHARC_TRY(make_parent(d->metrics));
        if (d->start_over) SHARC_TRY(remove_other_run(d, ck));
        SHARC_TRY(sharc_remove_stale_tmp(d->weights)); /* note [stale-tmp]: up to a whole model's size */
        SHARC_TRY(sharc_remove_stale_tmp(d->metrics));
        SHARC_TRY(sharc_ckpt_tidy(ck));
        char *yaml = sharc_config_to_yaml(c);
        sharc_status st =
            yaml ? sharc_write_text_atomic(d->config, yaml) : sharc_error(SHARC_ERR_NOMEM, "train: out of memory");
        free(yaml);
        SHARC_TRY(st);
        SHARC_TRY(sharc_jsonl_open(metrics, d->metrics, keep));
    }
    if (c->log.debug) {
        sharc_status st = make_parent(d->debug);
        if (st == SHARC_OK) st = sharc_remove_stale_tmp(d->debug);
        if (st == SHARC_OK) st = sharc_jsonl_open(debug, d->debug, keep);
        if (st != SHARC_OK) {
            sharc_jsonl_close(*metrics);
            *metrics = NULL;
            return st;
        }
    }
    return SHARC_OK;
}
