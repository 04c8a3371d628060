/* commit.c: sharc_ckpt_commit_*, the checkpoint directory's protocol:
 * which names are checkpoints, publishing a step, pruning, and what crashed
 * saves and prunes leave behind.
 *
 * Note [ckpt-commit]. save: rank 0 makes DIR/step-N.tmp (removing a stale
 * one); every writer writes its file there under a temporary name, fsyncs it
 * and renames it (sharc_afile); all ranks all-reduce their status and
 * all-gather their ranges and checksums; rank 0 writes manifest.json
 * (temporary name, fsync, rename), renames step-N.tmp to step-N, fsyncs DIR,
 * points DIR/latest at it (temporary name + rename + fsync of DIR), then
 * prunes to ckpt.keep (each victim is first renamed to step-M.deleting, so a
 * half-deleted checkpoint never looks like one). A last all-reduce makes
 * rank 0's verdict everyone's. Only a directory named exactly step-N with a
 * manifest is a checkpoint, and a manifest only ever appears next to
 * complete, fsynced files, so a crash at any moment leaves every previously
 * published checkpoint loadable. `latest` is for people and tools: auto
 * resume scans the step-N directories, because a crash between the rename
 * and `latest` leaves a newer complete checkpoint that `latest` misses. */
#include "internal.h"
#include "sharc/fault.h"
#include "sharc/fileio.h"
#include "sharc/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int64_t sharc_ckpt_commit_parse_step(const char *name) {
    if (strncmp(name, "step-", 5) != 0) return -1;
    const char *p = name + 5;
    if (!*p) return -1;
    int64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return strlen(name + 5) >= 8 ? v : -1;
}

void sharc_ckpt_commit_step_path(char *out, size_t n, const char *dir, int64_t step, const char *suffix) {
    snprintf(out, n, "%s/step-%08lld%s", dir, (long long)step, suffix);
}

sharc_status sharc_ckpt_commit_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? SHARC_OK
                               : sharc_error(SHARC_ERR_IO, "ckpt: cannot open '%s': %s", dir, strerror(errno));
    struct dirent *de;
    char p[PATHLEN + 300];
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) != 0) {
            closedir(d);
            return sharc_error(SHARC_ERR_IO, "ckpt: cannot remove '%s': %s", p, strerror(errno));
        }
    }
    closedir(d);
    if (rmdir(dir) != 0) return sharc_error(SHARC_ERR_IO, "ckpt: cannot remove '%s': %s", dir, strerror(errno));
    return SHARC_OK;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int sharc_ckpt_commit_list(const char *dir, int64_t **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    int64_t *v = NULL;
    struct dirent *de;
    char p[PATHLEN + 300];
    while ((de = readdir(d)) != NULL) {
        int64_t s = sharc_ckpt_commit_parse_step(de->d_name);
        if (s < 0) continue;
        snprintf(p, sizeof p, "%s/%s/" MANIFEST_NAME, dir, de->d_name);
        if (!sharc_ckpt_exists(p)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *nv = realloc(v, sizeof *v * (size_t)cap);
            if (!nv) break;
            v = nv;
        }
        v[n++] = s;
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_desc);
    *out = v;
    return n;
}
/* Note [ckpt-leftovers]. What crashed saves and prunes leave in DIR:
 * step-N.tmp (an unpublished save), step-N.deleting (a prune's victim),
 * step-N.old beside step-N.tmp (a crash between the two renames of a
 * re-save of step N, whose published copy is step-N.old), latest.tmp.PID and,
 * inside the unpublished directories, FILE.tmp.PID. Every save's prune and
 * every run that writes DIR (sharc_ckpt_tidy, at start) removes them;
 * step-N.old is renamed back to step-N when no step-N exists, because it is
 * the published checkpoint (a resume does that before it lists DIR: the one
 * write a run makes before its start-up checks, and it only puts back what
 * was published). */
sharc_status sharc_ckpt_commit_restore(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return SHARC_OK;
    char p[PATHLEN + 300], q[PATHLEN + 300], m[PATHLEN + 340];
    sharc_status st = SHARC_OK;
    struct dirent *de;
    while (st == SHARC_OK && (de = readdir(d)) != NULL) {
        const char *dot = strrchr(de->d_name, '.');
        if (strncmp(de->d_name, "step-", 5) != 0 || !dot || strcmp(dot, ".old") != 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        snprintf(q, sizeof q, "%s/%.*s", dir, (int)(dot - de->d_name), de->d_name);
        snprintf(m, sizeof m, "%s/" MANIFEST_NAME, p);
        if (sharc_ckpt_exists(q) || !sharc_ckpt_exists(m)) continue;
        if (rename(p, q) != 0) st = sharc_error(SHARC_ERR_IO, "ckpt: cannot rename '%s': %s", p, strerror(errno));
        else sharc_warn("ckpt: restored %s from %s (a save of the same step was interrupted)", q, p);
    }
    closedir(d);
    return st;
}

sharc_status sharc_ckpt_commit_clean(const char *dir) {
    SHARC_TRY(sharc_ckpt_commit_restore(dir));
    DIR *d = opendir(dir);
    if (!d) return SHARC_OK;
    char p[PATHLEN + 300];
    sharc_status st = SHARC_OK;
    struct dirent *de;
    while (st == SHARC_OK && (de = readdir(d)) != NULL) {
        const char *dot = strrchr(de->d_name, '.');
        if (strncmp(de->d_name, "step-", 5) != 0 || !dot) continue;
        if (strcmp(dot, ".deleting") && strcmp(dot, ".old") && strcmp(dot, ".tmp")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        st = sharc_ckpt_commit_remove_tree(p);
    }
    closedir(d);
    if (st == SHARC_OK) {
        snprintf(p, sizeof p, "%s/latest", dir);
        st = sharc_remove_stale_tmp(p);
    }
    return st;
}

sharc_status sharc_ckpt_commit_prune(const char *dir, int64_t step, int keep, bool newer) {
    SHARC_TRY(sharc_ckpt_commit_clean(dir)); /* first: a restored step-N counts */
    int64_t *steps;
    int n = sharc_ckpt_commit_list(dir, &steps), kept = 1;
    sharc_status st = SHARC_OK;
    char p[PATHLEN + 300], q[PATHLEN + 16];
    for (int i = 0; i < n && st == SHARC_OK; i++) {
        if (steps[i] == step) continue;
        if (step >= 0 && steps[i] < step && kept < keep) {
            kept++;
            continue;
        }
        if (step >= 0 && steps[i] > step) {
            if (!newer) continue;
            sharc_warn("ckpt: removing %s/step-%08lld, newer than the run's step %lld (another timeline)", dir,
                       (long long)steps[i], (long long)step);
        }
        sharc_ckpt_commit_step_path(p, sizeof p, dir, steps[i], "");
        sharc_ckpt_commit_step_path(q, sizeof q, dir, steps[i], ".deleting");
        if (rename(p, q) != 0) st = sharc_error(SHARC_ERR_IO, "ckpt: cannot rename '%s': %s", p, strerror(errno));
        sharc_fault_at("ckpt:during-prune", step);
        if (st == SHARC_OK) st = sharc_ckpt_commit_remove_tree(q);
    }
    free(steps);
    return st;
}

sharc_status sharc_ckpt_commit_begin(const char *dir, int64_t step) {
    char tmp[PATHLEN];
    sharc_ckpt_commit_step_path(tmp, sizeof tmp, dir, step, ".tmp");
    SHARC_TRY(sharc_mkdirs(dir));
    SHARC_TRY(sharc_ckpt_commit_remove_tree(tmp));
    if (mkdir(tmp, 0755) != 0) return sharc_error(SHARC_ERR_IO, "ckpt: cannot create '%s': %s", tmp, strerror(errno));
    return SHARC_OK;
}

sharc_status sharc_ckpt_commit_publish(const char *dir, int64_t step, int keep, const char *manifest_text) {
    char tmp[PATHLEN], fin[PATHLEN], old[PATHLEN], p[PATHLEN + 64];
    sharc_ckpt_commit_step_path(tmp, sizeof tmp, dir, step, ".tmp");
    sharc_ckpt_commit_step_path(fin, sizeof fin, dir, step, "");
    sharc_ckpt_commit_step_path(old, sizeof old, dir, step, ".old");
    sharc_fault_at("ckpt:before-manifest", step);
    snprintf(p, sizeof p, "%s/" MANIFEST_NAME, tmp);
    SHARC_TRY(sharc_write_text_atomic(p, manifest_text));
    sharc_fault_at("ckpt:after-manifest", step);
    sharc_fault_at("ckpt:before-rename", step);
    bool replaced = false;
    if (sharc_ckpt_exists(fin)) { /* the same step saved before (e.g. after falling back from a corrupt one) */
        SHARC_TRY(sharc_ckpt_commit_remove_tree(old));
        if (rename(fin, old) != 0)
            return sharc_error(SHARC_ERR_IO, "ckpt: cannot rename '%s': %s", fin, strerror(errno));
        replaced = true;
    }
    if (rename(tmp, fin) != 0)
        return sharc_error(SHARC_ERR_IO, "ckpt: cannot rename '%s' to '%s': %s", tmp, fin, strerror(errno));
    SHARC_TRY(sharc_fsync_dir(fin));
    sharc_fault_at("ckpt:after-rename", step);
    if (replaced) SHARC_TRY(sharc_ckpt_commit_remove_tree(old));
    sharc_fault_at("ckpt:before-latest", step);
    snprintf(p, sizeof p, "%s/latest", dir);
    char text[64];
    snprintf(text, sizeof text, "step-%08lld\n", (long long)step);
    SHARC_TRY(sharc_write_text_atomic(p, text));
    sharc_fault_at("ckpt:after-latest", step);
    return sharc_ckpt_commit_prune(dir, step, keep, true);
}
