/* ckpt.c: sharc_ckpt_*, sharded checkpoints: the shard-file layout, the
 * manifest (json-c), the commit protocol, the background writer of
 * ckpt.async, the reshard-on-load reader and `sharc ckpt inspect`.
 *
 * Note [ckpt-layout]. Every rank of replicate group 0 (replicate_rank 0)
 * writes one file, shard-SSSSS-of-NNNNN.bin, named by its shard rank: for each
 * segment of its shards (sharc_fsdp_shard_segments, padding excluded), in
 * unit and segment order, the parameter's elements [begin, end) as fp32, then
 * exp_avg's, then exp_avg_sq's, back to back. The manifest lists, per
 * parameter, its (file, begin, end, byte offset) ranges; they tile
 * [0, numel) exactly, whatever wrote them. Replicas (NO_SHARD, HYBRID_SHARD)
 * hold the same values and write nothing. Files are our own raw format, not
 * safetensors: a safetensors file names whole tensors, while a shard holds
 * pieces of several, three kinds each, and would need the index and the
 * per-chunk checksums in its metadata anyway; with the index in the manifest
 * a shard file is plain data that a reader preads by byte range.
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
#include "sharc/ckpt.h"
#include "sharc/activity.h"
#include "sharc/alloc.h"
#include "sharc/comm.h"
#include "sharc/config.h"
#include "sharc/fileio.h"
#include "sharc/fsdp.h"
#include "sharc/log.h"
#include "sharc/mesh.h"
#include "sharc/optim.h"
#include "sharc/train.h"
#include "sharc/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MANIFEST_NAME "manifest.json"
#define KINDS 3 /* parameter, exp_avg, exp_avg_sq */
#define PATHLEN (SHARC_CKPT_PATH_MAX + 128)

/* ------------------------------------------------------------ helpers */

/* Test hook: SHARC_CKPT_KILL_AT=<stage> (and optionally SHARC_CKPT_KILL_STEP=<step>)
 * ends the process at that point of a save, as a crash would. */
static void kill_point(const char *stage, int64_t step) {
    const char *at = getenv("SHARC_CKPT_KILL_AT");
    if (!at || strcmp(at, stage) != 0) return;
    const char *ks = getenv("SHARC_CKPT_KILL_STEP");
    if (ks && strtoll(ks, NULL, 10) != step) return;
    fprintf(stderr, "[rank %d] ckpt: killed at '%s' of step %lld (SHARC_CKPT_KILL_AT)\n", sharc_log_rank(), stage,
            (long long)step);
    _exit(86);
}

/* Note [agreement] (trainer.c): every rank gets the same verdict. */
static sharc_status agree(sharc_comm *world, sharc_status local) {
    return sharc_comm_agree(world, local, SHARC_ERR_IO, "ckpt: rank %d failed (see its message)");
}

/* "step-%08lld" exactly -> step, else -1. */
static int64_t parse_step_name(const char *name) {
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

static void step_path(char *out, size_t n, const char *dir, int64_t step, const char *suffix) {
    snprintf(out, n, "%s/step-%08lld%s", dir, (long long)step, suffix);
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Remove a directory of plain files (a checkpoint); missing is fine. */
static sharc_status remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? SHARC_OK : sharc_error(SHARC_ERR_IO, "ckpt: cannot open '%s': %s", dir, strerror(errno));
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

/* Published checkpoints (step-N directories with a manifest), newest first. */
static int list_steps(const char *dir, int64_t **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    int64_t *v = NULL;
    struct dirent *de;
    char p[PATHLEN + 300];
    while ((de = readdir(d)) != NULL) {
        int64_t s = parse_step_name(de->d_name);
        if (s < 0) continue;
        snprintf(p, sizeof p, "%s/%s/" MANIFEST_NAME, dir, de->d_name);
        if (!exists(p)) continue;
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

/* ----------------------------------------------------------- manifest */

typedef struct {
    char name[128];
    int64_t bytes;
    uint32_t crc;
    int64_t nchunks;
    uint32_t *chunk_crc; /* (nchunks) */
    int fd;              /* -1 until opened */
} mf_file;

typedef struct {
    int64_t file, begin, end, offset;
} mf_range;

typedef struct {
    const char *name; /* borrowed from the JSON tree */
    int ndim;
    int64_t shape[4];
    int64_t numel;
    mf_range *r;
    int nr;
} mf_tensor;

typedef struct {
    char dir[PATHLEN];
    char path[PATHLEN + 32]; /* the manifest */
    json_object *root;
    int64_t version, step, adam_step, world_size, dp_shard, dp_replicate, chunk_bytes;
    const char *strategy;
    json_object *model, *train;
    mf_file *files;
    int nfiles;
    mf_tensor *tensors;
    int ntensors;
} manifest;

static void manifest_free(manifest *m) {
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

static sharc_status bad(const manifest *m, const char *what) {
    return sharc_error(SHARC_ERR_FORMAT, "ckpt '%s': %s", m->path, what);
}

static sharc_status get_i64(const manifest *m, json_object *o, const char *key, int64_t *v) {
    json_object *x;
    if (!o || !json_object_object_get_ex(o, key, &x) || !json_object_is_type(x, json_type_int)) {
        char w[200];
        snprintf(w, sizeof w, "\"%s\" is missing or not an integer", key);
        return bad(m, w);
    }
    *v = json_object_get_int64(x);
    return SHARC_OK;
}

static sharc_status get_str(const manifest *m, json_object *o, const char *key, const char **v) {
    json_object *x;
    if (!o || !json_object_object_get_ex(o, key, &x) || !json_object_is_type(x, json_type_string)) {
        char w[200];
        snprintf(w, sizeof w, "\"%s\" is missing or not a string", key);
        return bad(m, w);
    }
    *v = json_object_get_string(x);
    return SHARC_OK;
}

static sharc_status get_arr(const manifest *m, json_object *o, const char *key, json_object **v) {
    if (!o || !json_object_object_get_ex(o, key, v) || !json_object_is_type(*v, json_type_array)) {
        char w[200];
        snprintf(w, sizeof w, "\"%s\" is missing or not a list", key);
        return bad(m, w);
    }
    return SHARC_OK;
}

static int cmp_range(const void *a, const void *b) {
    const mf_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Read and check a step directory's manifest: every field typed, every range
 * inside its file, every tensor's ranges tiling [0, numel). */
static sharc_status manifest_read(manifest *m, const char *step_dir) {
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "%s", step_dir);
    snprintf(m->path, sizeof m->path, "%s/" MANIFEST_NAME, step_dir);
    char *text;
    size_t len;
    sharc_status st = sharc_read_file(m->path, &text, &len);
    if (st != SHARC_OK) {
        return sharc_error(st, "ckpt '%s': cannot read the manifest: %s", step_dir,
                           is_dir(step_dir) ? "no manifest.json (an incomplete or foreign directory)"
                           : exists(step_dir) ? "not a directory (a checkpoint is a step-N directory)"
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
        return bad(m, w);
    }
    const char *format = NULL;
    SHARC_TRY(get_str(m, m->root, "format", &format));
    if (strcmp(format, "sharc-checkpoint") != 0) return bad(m, "\"format\" is not \"sharc-checkpoint\"");
    SHARC_TRY(get_i64(m, m->root, "format_version", &m->version));
    if (m->version > SHARC_CKPT_FORMAT_VERSION || m->version < 1) {
        return sharc_error(SHARC_ERR_FORMAT,
                           "ckpt '%s': format_version %lld; this sharc reads version %d (a checkpoint from a newer "
                           "sharc: upgrade sharc to load it)",
                           m->path, (long long)m->version, SHARC_CKPT_FORMAT_VERSION);
    }
    SHARC_TRY(get_i64(m, m->root, "step", &m->step));
    SHARC_TRY(get_i64(m, m->root, "world_size", &m->world_size));
    SHARC_TRY(get_i64(m, m->root, "dp_shard", &m->dp_shard));
    SHARC_TRY(get_i64(m, m->root, "dp_replicate", &m->dp_replicate));
    SHARC_TRY(get_str(m, m->root, "strategy", &m->strategy));
    SHARC_TRY(get_i64(m, m->root, "chunk_bytes", &m->chunk_bytes));
    if (m->chunk_bytes <= 0 || m->chunk_bytes > (1ll << 30)) return bad(m, "\"chunk_bytes\" out of range");
    if (!json_object_object_get_ex(m->root, "model", &m->model) || !json_object_is_type(m->model, json_type_object))
        return bad(m, "\"model\" is missing or not an object");
    if (!json_object_object_get_ex(m->root, "train", &m->train) || !json_object_is_type(m->train, json_type_object))
        return bad(m, "\"train\" is missing or not an object");
    SHARC_TRY(get_i64(m, m->train, "adam_step", &m->adam_step));
    json_object *files, *tensors;
    SHARC_TRY(get_arr(m, m->root, "files", &files));
    SHARC_TRY(get_arr(m, m->root, "tensors", &tensors));
    int nfiles = (int)json_object_array_length(files);
    m->files = calloc((size_t)nfiles + 1, sizeof *m->files);
    if (!m->files) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    m->nfiles = nfiles;
    for (int i = 0; i < m->nfiles; i++) m->files[i].fd = -1;
    for (int i = 0; i < m->nfiles; i++) {
        mf_file *f = &m->files[i];
        json_object *o = json_object_array_get_idx(files, (size_t)i), *chunks;
        const char *name;
        int64_t crc;
        SHARC_TRY(get_str(m, o, "name", &name));
        if (strlen(name) >= sizeof f->name || strchr(name, '/')) return bad(m, "a file name is too long or has a '/'");
        snprintf(f->name, sizeof f->name, "%s", name);
        SHARC_TRY(get_i64(m, o, "bytes", &f->bytes));
        SHARC_TRY(get_i64(m, o, "crc32", &crc));
        f->crc = (uint32_t)crc;
        SHARC_TRY(get_arr(m, o, "chunk_crc32", &chunks));
        f->nchunks = (int64_t)json_object_array_length(chunks);
        if (f->bytes < 0 || f->nchunks != (f->bytes + m->chunk_bytes - 1) / m->chunk_bytes)
            return bad(m, "a file's chunk_crc32 list does not match its size");
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
        mf_tensor *t = &m->tensors[i];
        json_object *o = json_object_array_get_idx(tensors, (size_t)i), *shape, *ranges;
        const char *dtype;
        SHARC_TRY(get_str(m, o, "name", &t->name));
        SHARC_TRY(get_str(m, o, "dtype", &dtype));
        char w[400];
        if (strcmp(dtype, "F32") != 0) {
            snprintf(w, sizeof w, "tensor '%s' has dtype %s, expected F32", t->name, dtype);
            return bad(m, w);
        }
        SHARC_TRY(get_arr(m, o, "shape", &shape));
        SHARC_TRY(get_arr(m, o, "ranges", &ranges));
        t->ndim = (int)json_object_array_length(shape);
        if (t->ndim < 1 || t->ndim > 4) {
            snprintf(w, sizeof w, "tensor '%s' has %d dimensions", t->name, t->ndim);
            return bad(m, w);
        }
        t->numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            t->shape[d] = json_object_get_int64(json_object_array_get_idx(shape, (size_t)d));
            if (t->shape[d] <= 0 || t->shape[d] > (1ll << 40)) {
                snprintf(w, sizeof w, "tensor '%s' has a bad shape", t->name);
                return bad(m, w);
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
                return bad(m, w);
            }
            mf_range *x = &t->r[k];
            x->file = json_object_get_int64(json_object_array_get_idx(r, 0));
            x->begin = json_object_get_int64(json_object_array_get_idx(r, 1));
            x->end = json_object_get_int64(json_object_array_get_idx(r, 2));
            x->offset = json_object_get_int64(json_object_array_get_idx(r, 3));
            if (x->file < 0 || x->file >= m->nfiles || x->begin < 0 || x->end <= x->begin || x->end > t->numel ||
                x->offset < 0 || x->offset + KINDS * 4 * (x->end - x->begin) > m->files[x->file].bytes) {
                snprintf(w, sizeof w, "tensor '%s': range %d lies outside its tensor or file", t->name, k);
                return bad(m, w);
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
            return bad(m, w);
        }
    }
    return SHARC_OK;
}

static const mf_tensor *manifest_find(const manifest *m, const char *name) {
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

/* ------------------------------------------------------ verified reads */

typedef struct {
    manifest *m;
    unsigned char *buf; /* (chunk_bytes) the last verified chunk */
    int file;
    int64_t chunk;
} reader;

static sharc_status reader_open_file(reader *r, int fi) {
    mf_file *f = &r->m->files[fi];
    if (f->fd >= 0) return SHARC_OK;
    char p[2 * PATHLEN + 400];
    snprintf(p, sizeof p, "%s/%s", r->m->dir, f->name);
    f->fd = open(p, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return sharc_error(sharc_path_status(errno), "ckpt '%s': cannot open shard file: %s", p, strerror(errno));
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) return sharc_error(SHARC_ERR_IO, "ckpt '%s': cannot stat: %s", p, strerror(errno));
    if ((int64_t)sb.st_size != f->bytes)
        return sharc_error(SHARC_ERR_FORMAT, "ckpt '%s': %lld bytes, the manifest says %lld (truncated or replaced)", p,
                           (long long)sb.st_size, (long long)f->bytes);
    return SHARC_OK;
}

/* Load chunk c of file fi into the cache and check its crc32. */
static sharc_status reader_chunk(reader *r, int fi, int64_t c) {
    if (r->file == fi && r->chunk == c) return SHARC_OK;
    SHARC_TRY(reader_open_file(r, fi));
    mf_file *f = &r->m->files[fi];
    int64_t lo = c * r->m->chunk_bytes, n = f->bytes - lo < r->m->chunk_bytes ? f->bytes - lo : r->m->chunk_bytes;
    char p[2 * PATHLEN + 400];
    snprintf(p, sizeof p, "%s/%s", r->m->dir, f->name);
    r->file = -1;
    SHARC_TRY(sharc_pread_all(f->fd, r->buf, (size_t)n, (uint64_t)lo, p));
    uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), r->buf, (uInt)n);
    if (crc != f->chunk_crc[c])
        return sharc_error(SHARC_ERR_FORMAT,
                           "ckpt '%s': checksum mismatch in bytes [%lld, %lld) (crc32 %08x, the manifest says %08x): "
                           "the file is corrupt",
                           p, (long long)lo, (long long)(lo + n), crc, f->chunk_crc[c]);
    r->file = fi;
    r->chunk = c;
    return SHARC_OK;
}

/* Bytes [pos, pos + n) of file fi, every chunk they touch verified. */
static sharc_status reader_read(reader *r, int fi, int64_t pos, int64_t n, void *dst) {
    const int64_t cb = r->m->chunk_bytes;
    char *out = dst;
    while (n > 0) {
        int64_t c = pos / cb, in = pos - c * cb, take = cb - in < n ? cb - in : n;
        SHARC_TRY(reader_chunk(r, fi, c));
        memcpy(out, r->buf + in, (size_t)take);
        out += take;
        pos += take;
        n -= take;
    }
    return SHARC_OK;
}

/* ---------------------------------------------------------- the object */

typedef struct {
    int64_t gp, begin, end, offset; /* global parameter index, elements, byte offset in the file */
} range_rec;

typedef struct {
    const float *data;
    int64_t n;
} piece;

/* One rank's file: written inline or by the background thread. */
typedef struct {
    char path[PATHLEN + 64];
    piece *pieces; /* (npieces) */
    int npieces;
    int64_t bytes, nchunks;
    uint32_t crc;
    uint32_t *chunk_crc; /* (nchunks) */
    sharc_status st;
    char err[1024];
} shard_job;

struct sharc_ckpt {
    sharc_trainer *t; /* borrowed */
    sharc_comm *world;
    const sharc_mesh *mesh;
    char dir[SHARC_CKPT_PATH_MAX];
    int keep;
    bool async, writer;
    int nglobal;         /* parameters over all units */
    int *gp_unit, *gp_param; /* (nglobal) */
    range_rec *recs;     /* (nrecs) this rank's layout, note [ckpt-layout] */
    int nrecs;
    int64_t file_bytes;
    /* in flight (note [ckpt-async]) */
    bool pending, thread_running;
    int64_t pending_step, pending_adam_step; /* captured when the save starts */
    double t_start, t_staged;                /* when the save started, when its state was staged */
    pthread_t thread;
    shard_job job;
    float *stage; /* ckpt.async: (file_bytes / 4) the staged copy, kept from one save to the next (SHARC_MEM_OTHER) */
    int64_t done_step; /* last step published or loaded, -1 */
    char last[PATHLEN];
};

sharc_status sharc_ckpt_init(sharc_ckpt **out, sharc_trainer *t) {
    *out = NULL;
    sharc_ckpt *c = calloc(1, sizeof *c);
    sharc_status st = c ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    sharc_comm *world = sharc_trainer_world(t);
    if (st == SHARC_OK) {
        const sharc_config *cfg = sharc_trainer_config(t);
        c->t = t;
        c->world = world;
        c->mesh = sharc_trainer_mesh(t);
        c->keep = cfg->ckpt.keep < 1 ? 1 : cfg->ckpt.keep;
        c->async = cfg->ckpt.async;
        c->done_step = -1;
        if (cfg->ckpt.dir[0]) snprintf(c->dir, sizeof c->dir, "%s", cfg->ckpt.dir);
        else snprintf(c->dir, sizeof c->dir, "%.1000s/checkpoints", cfg->train.out_dir);
        c->writer = c->mesh->replicate_rank == 0;
        sharc_fsdp *e = sharc_trainer_engine(t);
        int nu = sharc_fsdp_num_units(e), nrec = 0;
        for (int u = 0; u < nu; u++) {
            const sharc_segment *segs;
            c->nglobal += sharc_fsdp_unit_spec(e, u)->nparams;
            nrec += sharc_fsdp_shard_segments(e, u, &segs);
        }
        c->gp_unit = calloc((size_t)c->nglobal + 1, sizeof(int));
        c->gp_param = calloc((size_t)c->nglobal + 1, sizeof(int));
        c->recs = calloc((size_t)nrec + 1, sizeof *c->recs);
        if (!c->gp_unit || !c->gp_param || !c->recs) st = sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
        for (int u = 0, g = 0; u < nu && st == SHARC_OK; u++) {
            int first = g;
            for (int p = 0; p < sharc_fsdp_unit_spec(e, u)->nparams; p++, g++) {
                c->gp_unit[g] = u;
                c->gp_param[g] = p;
            }
            const sharc_segment *segs;
            int ns = sharc_fsdp_shard_segments(e, u, &segs);
            for (int k = 0; k < ns; k++) {
                c->recs[c->nrecs++] = (range_rec){first + segs[k].param, segs[k].param_off,
                                                  segs[k].param_off + segs[k].len, c->file_bytes};
                c->file_bytes += (int64_t)KINDS * 4 * segs[k].len;
            }
        }
    }
    st = agree(world, st);
    if (st != SHARC_OK) {
        sharc_ckpt_free(c);
        return st;
    }
    *out = c;
    return SHARC_OK;
}

static void job_clear(shard_job *j) {
    free(j->pieces);
    free(j->chunk_crc);
    memset(j, 0, sizeof *j);
}

void sharc_ckpt_free(sharc_ckpt *c) {
    if (!c) return;
    if (c->thread_running) pthread_join(c->thread, NULL);
    job_clear(&c->job);
    sharc_free(c->stage);
    free(c->gp_unit);
    free(c->gp_param);
    free(c->recs);
    free(c);
}

const char *sharc_ckpt_last_path(const sharc_ckpt *c) { return c->last; }
const char *sharc_ckpt_dir(const sharc_ckpt *c) { return c->dir; }

int sharc_ckpt_count(const char *dir, int64_t *newest) {
    int64_t *steps;
    int n = list_steps(dir, &steps);
    if (newest) *newest = n > 0 ? steps[0] : -1;
    free(steps);
    return n;
}

static sharc_status prune_dir(const char *dir, int64_t step, int keep, bool newer);
static sharc_status clean_leftovers(const char *dir);

sharc_status sharc_ckpt_tidy(sharc_ckpt *c) {
    if (c->done_step < 0) return clean_leftovers(c->dir);
    /* a run resumed at train.max_steps saves nothing, so no save would
     * prune what an earlier ckpt.keep left (note [ckpt-leftovers]) */
    return prune_dir(c->dir, c->done_step, c->keep, false);
}

sharc_status sharc_ckpt_remove_all(const char *dir) {
    SHARC_TRY(prune_dir(dir, -1, 0, false));
    char p[PATHLEN + 16];
    snprintf(p, sizeof p, "%s/latest", dir);
    if (unlink(p) != 0 && errno != ENOENT)
        return sharc_error(SHARC_ERR_IO, "ckpt: cannot remove '%s': %s", p, strerror(errno));
    return SHARC_OK;
}

/* ------------------------------------------------------------- writing */

/* Write the job's pieces to its file (temporary name, fsync, rename),
 * computing the whole-file and per-chunk crc32 on the way. No MPI here: this
 * runs on the background thread under ckpt.async. */
static void *job_run(void *arg) {
    shard_job *j = arg;
    sharc_afile af;
    j->st = sharc_afile_open(&af, j->path);
    const bool opened = j->st == SHARC_OK;
    uLong crc = crc32(0L, Z_NULL, 0), ccrc = crc;
    int64_t fill = 0, k = 0;
    static const float zeros[4096]; /* the moments of frozen parameters (note [frozen-params]) */
    for (int i = 0; i < j->npieces && j->st == SHARC_OK; i++) {
        const char *p = (const char *)j->pieces[i].data;
        const bool zero = p == NULL;
        int64_t left = j->pieces[i].n * 4;
        while (left > 0 && j->st == SHARC_OK) {
            int64_t take = SHARC_CKPT_CHUNK_BYTES - fill < left ? SHARC_CKPT_CHUNK_BYTES - fill : left;
            if (zero) {
                p = (const char *)zeros;
                if (take > (int64_t)sizeof zeros) take = (int64_t)sizeof zeros;
            }
            crc = crc32(crc, (const Bytef *)p, (uInt)take);
            ccrc = crc32(ccrc, (const Bytef *)p, (uInt)take);
            j->st = sharc_afile_write(&af, p, (size_t)take);
            fill += take;
            p += take;
            left -= take;
            if (fill == SHARC_CKPT_CHUNK_BYTES) {
                j->chunk_crc[k++] = (uint32_t)ccrc;
                ccrc = crc32(0L, Z_NULL, 0);
                fill = 0;
            }
        }
    }
    if (j->st == SHARC_OK) {
        if (fill > 0) j->chunk_crc[k++] = (uint32_t)ccrc;
        j->crc = (uint32_t)crc;
        SHARC_CHECK(k == j->nchunks);
        j->st = sharc_afile_commit(&af);
    } else if (opened) {
        sharc_afile_abort(&af);
    }
    if (j->st != SHARC_OK) snprintf(j->err, sizeof j->err, "%s", sharc_last_error());
    return NULL;
}

/* Fill the job for this rank's file: pieces on the live shards, or (async)
 * on a staged copy of them. */
static sharc_status job_prepare(sharc_ckpt *c, const char *tmp_dir, bool stage) {
    shard_job *j = &c->job;
    sharc_fsdp *e = sharc_trainer_engine(c->t);
    sharc_adamw *a = sharc_trainer_optimizer(c->t);
    snprintf(j->path, sizeof j->path, "%s/shard-%05d-of-%05d.bin", tmp_dir, c->mesh->shard_rank, c->mesh->dp_shard);
    j->bytes = c->file_bytes;
    j->nchunks = (j->bytes + SHARC_CKPT_CHUNK_BYTES - 1) / SHARC_CKPT_CHUNK_BYTES;
    j->pieces = calloc((size_t)c->nrecs * KINDS + 1, sizeof *j->pieces);
    j->chunk_crc = calloc((size_t)j->nchunks + 1, sizeof(uint32_t));
    if (!j->pieces || !j->chunk_crc) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    float *dst = NULL;
    if (stage && j->bytes > 0) {
        if (!c->stage) c->stage = sharc_alloc((size_t)j->bytes, SHARC_MEM_OTHER);
        dst = c->stage;
        if (!dst)
            return sharc_error(SHARC_ERR_NOMEM, "ckpt: cannot stage %lld bytes for ckpt.async (turn it off to save "
                               "without a copy)", (long long)j->bytes);
    }
    int r = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_segment *segs;
        int ns = sharc_fsdp_shard_segments(e, u, &segs);
        /* a frozen unit has no moments: zeros are written in their place (data NULL) */
        const float *src[KINDS] = {sharc_fsdp_shard_params(e, u), sharc_adamw_m(a, u), sharc_adamw_v(a, u)};
        for (int k = 0; k < ns; k++)
            for (int kind = 0; kind < KINDS; kind++) {
                const float *p = src[kind] ? src[kind] + segs[k].shard_off : NULL;
                if (dst) {
                    if (p) memcpy(dst, p, (size_t)segs[k].len * sizeof(float));
                    else memset(dst, 0, (size_t)segs[k].len * sizeof(float));
                    p = dst;
                    dst += segs[k].len;
                }
                j->pieces[r++] = (piece){p, segs[k].len};
            }
    }
    j->npieces = r;
    return SHARC_OK;
}

static void json_add_i64(json_object *o, const char *k, int64_t v) { json_object_object_add(o, k, json_object_new_int64(v)); }

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

/* The manifest text (rank 0), from every rank's header
 *   hdr[6 r .. 6 r + 5] = writer, shard_rank, nrecs, nchunks, bytes, crc
 * and its padded records (4 int64 each) and chunk crcs. */
static char *manifest_build(sharc_ckpt *c, int64_t step, const int64_t *hdr, const int64_t *recs, int64_t maxrec,
                            const int64_t *chunks, int64_t maxchunk) {
    const sharc_config *cfg = sharc_trainer_config(c->t);
    sharc_fsdp *e = sharc_trainer_engine(c->t);
    const int R = sharc_comm_size(c->world), S = c->mesh->dp_shard;
    json_object *root = json_object_new_object();
    json_object_object_add(root, "format", json_object_new_string("sharc-checkpoint"));
    json_add_i64(root, "format_version", SHARC_CKPT_FORMAT_VERSION);
    json_add_i64(root, "step", step);
    json_add_i64(root, "world_size", R);
    json_object_object_add(root, "strategy", json_object_new_string(sharc_sharding_name(cfg->fsdp.engine.strategy)));
    json_add_i64(root, "dp_shard", S);
    json_add_i64(root, "dp_replicate", c->mesh->dp_replicate);
    json_object_object_add(root, "model", model_json(&cfg->model));
    json_object *tr = json_object_new_object();
    int64_t G = (int64_t)cfg->train.batch_size * cfg->train.grad_accum * R;
    json_add_i64(tr, "step", step);
    json_add_i64(tr, "adam_step", c->pending_adam_step);
    json_object_object_add(tr, "next_lr", json_object_new_double((double)sharc_lr_at(&cfg->optim, step, cfg->train.max_steps)));
    json_add_i64(tr, "max_steps", cfg->train.max_steps);
    json_add_i64(tr, "sequences_per_step", G);
    json_add_i64(tr, "samples_consumed", step * G);
    json_add_i64(tr, "data_seed", (int64_t)cfg->data.seed);
    json_object_object_add(tr, "data_shuffle", json_object_new_boolean(cfg->data.shuffle));
    json_add_i64(tr, "train_seed", (int64_t)cfg->train.seed);
    json_object_object_add(tr, "rng", json_object_new_string(
        "none besides data_seed and step: the sampler is a pure function of (data.seed, step) and dropout does not exist"));
    json_object_object_add(root, "train", tr);
    char *yaml = sharc_config_to_yaml(cfg);
    json_object_object_add(root, "config", json_object_new_string(yaml ? yaml : ""));
    free(yaml);
    json_add_i64(root, "chunk_bytes", SHARC_CKPT_CHUNK_BYTES);
    json_object_object_add(root, "layout", json_object_new_string(
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
    for (int g = 0; g < c->nglobal; g++) {
        const sharc_param_spec *p = &sharc_fsdp_unit_spec(e, c->gp_unit[g])->params[c->gp_param[g]];
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
    /* note [frozen-params]: the names frozen in this run; their moments are stored as zeros */
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
/* step-N.old with a manifest and no step-N: rename it back (the first
 * half of note [ckpt-leftovers]; before a resume lists DIR, too). */
static sharc_status restore_interrupted(const char *dir) {
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
        if (exists(q) || !exists(m)) continue;
        if (rename(p, q) != 0) st = sharc_error(SHARC_ERR_IO, "ckpt: cannot rename '%s': %s", p, strerror(errno));
        else sharc_warn("ckpt: restored %s from %s (a save of the same step was interrupted)", q, p);
    }
    closedir(d);
    return st;
}

static sharc_status clean_leftovers(const char *dir) {
    SHARC_TRY(restore_interrupted(dir));
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
        st = remove_tree(p);
    }
    closedir(d);
    if (st == SHARC_OK) {
        snprintf(p, sizeof p, "%s/latest", dir);
        st = sharc_remove_stale_tmp(p);
    }
    return st;
}

/* The leftovers first; then keep checkpoint `step` of DIR and the keep - 1
 * newest older ones; with `newer`, checkpoints newer than `step` go too
 * (they belong to a timeline this run replaced). step < 0: every
 * checkpoint goes. */
static sharc_status prune_dir(const char *dir, int64_t step, int keep, bool newer) {
    SHARC_TRY(clean_leftovers(dir)); /* first: a restored step-N counts */
    int64_t *steps;
    int n = list_steps(dir, &steps), kept = 1;
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
        step_path(p, sizeof p, dir, steps[i], "");
        step_path(q, sizeof q, dir, steps[i], ".deleting");
        if (rename(p, q) != 0) st = sharc_error(SHARC_ERR_IO, "ckpt: cannot rename '%s': %s", p, strerror(errno));
        kill_point("during-prune", step);
        if (st == SHARC_OK) st = remove_tree(q);
    }
    free(steps);
    return st;
}

static sharc_status prune(sharc_ckpt *c, int64_t step) { return prune_dir(c->dir, step, c->keep, true); }

/* Rank 0: manifest, rename, latest, prune (note [ckpt-commit]). */
static sharc_status publish(sharc_ckpt *c, int64_t step, const char *manifest_text) {
    char tmp[PATHLEN], fin[PATHLEN], old[PATHLEN], p[PATHLEN + 64];
    step_path(tmp, sizeof tmp, c->dir, step, ".tmp");
    step_path(fin, sizeof fin, c->dir, step, "");
    step_path(old, sizeof old, c->dir, step, ".old");
    kill_point("before-manifest", step);
    snprintf(p, sizeof p, "%s/" MANIFEST_NAME, tmp);
    SHARC_TRY(sharc_write_text_atomic(p, manifest_text));
    kill_point("after-manifest", step);
    kill_point("before-rename", step);
    bool replaced = false;
    if (exists(fin)) { /* the same step saved before (e.g. after falling back from a corrupt one) */
        SHARC_TRY(remove_tree(old));
        if (rename(fin, old) != 0)
            return sharc_error(SHARC_ERR_IO, "ckpt: cannot rename '%s': %s", fin, strerror(errno));
        replaced = true;
    }
    if (rename(tmp, fin) != 0) return sharc_error(SHARC_ERR_IO, "ckpt: cannot rename '%s' to '%s': %s", tmp, fin, strerror(errno));
    SHARC_TRY(sharc_fsync_dir(fin));
    kill_point("after-rename", step);
    if (replaced) SHARC_TRY(remove_tree(old));
    kill_point("before-latest", step);
    snprintf(p, sizeof p, "%s/latest", c->dir);
    char text[64];
    snprintf(text, sizeof text, "step-%08lld\n", (long long)step);
    SHARC_TRY(sharc_write_text_atomic(p, text));
    kill_point("after-latest", step);
    return prune(c, step);
}

/* Note [ckpt-async]: the second half of a save, on the main thread: wait for
 * the file, agree, exchange ranges and checksums, rank 0 publishes. */
static sharc_status finish(sharc_ckpt *c) {
    if (!c->pending) return SHARC_OK;
    shard_job *j = &c->job;
    if (c->thread_running) {
        pthread_join(c->thread, NULL);
        c->thread_running = false;
    }
    const int64_t step = c->pending_step;
    c->pending = false;
    kill_point("after-shards", step);
    sharc_status st = j->st;
    if (st != SHARC_OK) sharc_error(st, "%s", j->err);
    st = agree(c->world, st);
    const int R = sharc_comm_size(c->world), rank = sharc_comm_rank(c->world);
    char tmp[PATHLEN];
    step_path(tmp, sizeof tmp, c->dir, step, ".tmp");
    if (st != SHARC_OK) {
        if (rank == 0) remove_tree(tmp);
        job_clear(j);
        return st;
    }
    int64_t mine[6] = {c->writer, c->mesh->shard_rank, c->writer ? c->nrecs : 0, c->writer ? j->nchunks : 0,
                       c->writer ? j->bytes : 0, c->writer ? j->crc : 0};
    int64_t *hdr = malloc(sizeof(int64_t) * 6 * (size_t)R);
    int64_t maxrec = 1, maxchunk = 1;
    st = hdr ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    st = agree(c->world, st);
    if (st == SHARC_OK) st = sharc_comm_all_gather(c->world, mine, hdr, 6, SHARC_DT_I64);
    for (int r = 0; r < R && st == SHARC_OK; r++) {
        maxrec = hdr[6 * r + 2] > maxrec ? hdr[6 * r + 2] : maxrec;
        maxchunk = hdr[6 * r + 3] > maxchunk ? hdr[6 * r + 3] : maxchunk;
    }
    int64_t *myrec = NULL, *allrec = NULL, *mychunk = NULL, *allchunk = NULL;
    if (st == SHARC_OK) {
        myrec = calloc((size_t)maxrec * 4, sizeof(int64_t));
        allrec = calloc((size_t)maxrec * 4 * (size_t)R, sizeof(int64_t));
        mychunk = calloc((size_t)maxchunk, sizeof(int64_t));
        allchunk = calloc((size_t)maxchunk * (size_t)R, sizeof(int64_t));
        st = myrec && allrec && mychunk && allchunk ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
        for (int k = 0; k < mine[2] && st == SHARC_OK; k++) {
            myrec[4 * k] = c->recs[k].gp;
            myrec[4 * k + 1] = c->recs[k].begin;
            myrec[4 * k + 2] = c->recs[k].end;
            myrec[4 * k + 3] = c->recs[k].offset;
        }
        for (int64_t k = 0; k < mine[3] && st == SHARC_OK; k++) mychunk[k] = j->chunk_crc[k];
        st = agree(c->world, st);
        if (st == SHARC_OK) st = sharc_comm_all_gather(c->world, myrec, allrec, (size_t)maxrec * 4, SHARC_DT_I64);
        if (st == SHARC_OK) st = sharc_comm_all_gather(c->world, mychunk, allchunk, (size_t)maxchunk, SHARC_DT_I64);
    }
    sharc_status pub = SHARC_OK;
    int64_t total = 0;
    for (int r = 0; r < R && st == SHARC_OK; r++) total += hdr[6 * r + 4];
    if (st == SHARC_OK && rank == 0) {
        char *text = manifest_build(c, step, hdr, allrec, maxrec, allchunk, maxchunk);
        pub = text ? publish(c, step, text) : sharc_error(SHARC_ERR_NOMEM, "ckpt: cannot build the manifest");
        free(text);
        if (pub != SHARC_OK) remove_tree(tmp);
    }
    free(hdr);
    free(myrec);
    free(allrec);
    free(mychunk);
    free(allchunk);
    job_clear(j);
    if (st != SHARC_OK) return st;
    st = agree(c->world, pub);
    if (st == SHARC_OK) {
        c->done_step = step;
        step_path(c->last, sizeof c->last, c->dir, step, "");
        if (rank == 0) {
            if (c->async)
                sharc_info("ckpt: saved step %lld to %s (%.1f MB; training paused %.3f s to stage it, published %.3f s "
                           "after the start)", (long long)step, c->last, (double)total / 1e6, c->t_staged - c->t_start,
                           sharc_clock_now() - c->t_start);
            else
                sharc_info("ckpt: saved step %lld to %s (%.1f MB in %.3f s)", (long long)step, c->last,
                           (double)total / 1e6, sharc_clock_now() - c->t_start);
        }
    }
    return st;
}

sharc_status sharc_ckpt_wait(sharc_ckpt *c) { return finish(c); }

sharc_status sharc_ckpt_save(sharc_ckpt *c) {
    SHARC_TRY(finish(c));
    const int64_t step = sharc_trainer_steps_done(c->t);
    if (step == c->done_step) return SHARC_OK;
    char tmp[PATHLEN];
    step_path(tmp, sizeof tmp, c->dir, step, ".tmp");
    sharc_status st = SHARC_OK;
    c->t_start = sharc_clock_now();
    if (sharc_comm_rank(c->world) == 0) {
        st = sharc_mkdirs(c->dir);
        if (st == SHARC_OK) st = remove_tree(tmp);
        if (st == SHARC_OK && mkdir(tmp, 0755) != 0)
            st = sharc_error(SHARC_ERR_IO, "ckpt: cannot create '%s': %s", tmp, strerror(errno));
    }
    SHARC_TRY(agree(c->world, st));
    shard_job *j = &c->job;
    job_clear(j);
    c->pending = true;
    c->pending_step = step;
    c->pending_adam_step = sharc_adamw_steps(sharc_trainer_optimizer(c->t));
    if (c->writer) {
        j->st = job_prepare(c, tmp, c->async);
        if (j->st != SHARC_OK) {
            snprintf(j->err, sizeof j->err, "%s", sharc_last_error());
        } else if (c->async) {
            if (pthread_create(&c->thread, NULL, job_run, j) == 0) c->thread_running = true;
            else job_run(j);
        } else {
            job_run(j);
        }
    }
    c->t_staged = sharc_clock_now();
    return c->async ? SHARC_OK : finish(c);
}

/* ------------------------------------------------------------- loading */

/* `own`: mc is the checkpoint's own "config" (it must agree with "model"),
 * else this run's model. */
static sharc_status check_model(const manifest *m, const sharc_model_config *mc, bool own) {
    json_object *want = model_json(mc);
    sharc_status st = SHARC_OK;
    json_object_object_foreach(want, key, val) {
        json_object *got;
        const char *a = json_object_to_json_string(val);
        const char *b = json_object_object_get_ex(m->model, key, &got) ? json_object_to_json_string(got) : "(missing)";
        if (strcmp(a, b) != 0 && own) {
            st = sharc_error(SHARC_ERR_FORMAT, "ckpt '%s': model.%s is %s in \"model\" but %s in \"config\": the "
                             "manifest contradicts itself", m->path, key, b, a);
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

static sharc_status check_tensors(const manifest *m, sharc_fsdp *e) {
    int n = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams; p++, n++) {
            const sharc_param_spec *ps = &s->params[p];
            const mf_tensor *t = manifest_find(m, ps->name);
            if (!t)
                return sharc_error(SHARC_ERR_FORMAT, "ckpt '%s': parameter '%s' of this model is not in the checkpoint",
                                   m->path, ps->name);
            bool same = t->ndim == ps->ndim;
            for (int d = 0; d < ps->ndim && same; d++) same = t->shape[d] == ps->shape[d];
            if (!same)
                return sharc_error(SHARC_ERR_FORMAT, "ckpt '%s': parameter '%s' has another shape in the checkpoint",
                                   m->path, ps->name);
        }
    }
    if (m->ntensors != n)
        for (int i = 0; i < m->ntensors; i++) {
            int u, p;
            if (sharc_fsdp_find_param(e, m->tensors[i].name, &u, &p) != SHARC_OK)
                return sharc_error(SHARC_ERR_FORMAT, "ckpt '%s': tensor '%s' is not a parameter of this model", m->path,
                                   m->tensors[i].name);
        }
    if (m->ntensors != n) return bad(m, "a tensor is listed twice");
    return SHARC_OK;
}

/* This rank's elements of every parameter (and, with an optimizer, of both
 * moments) from a read manifest into the live shards: the names and shapes
 * are checked first, then only the chunks overlapping this rank's segments
 * are read, each verified against its crc32. No communication. */
static sharc_status read_shards(manifest *m, sharc_fsdp *e, sharc_adamw *a /* NULL: parameters only */) {
    SHARC_TRY(check_tensors(m, e));
    reader rd = {.m = m, .file = -1, .chunk = -1, .buf = malloc((size_t)m->chunk_bytes)};
    if (!rd.buf) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    const int kinds = a ? KINDS : 1;
    sharc_status st = SHARC_OK;
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        sharc_activity_phase("loading a checkpoint", u, s->name); /* progress for the watchdog */
        const sharc_segment *segs;
        int ns = sharc_fsdp_shard_segments(e, u, &segs);
        float *dst[KINDS] = {sharc_fsdp_shard_write(e, u), a ? sharc_adamw_m(a, u) : NULL, a ? sharc_adamw_v(a, u) : NULL};
        for (int k = 0; k < ns && st == SHARC_OK; k++) {
            const mf_tensor *t = manifest_find(m, s->params[segs[k].param].name);
            int64_t lo0 = segs[k].param_off, hi0 = lo0 + segs[k].len;
            for (int q = 0; q < t->nr && st == SHARC_OK; q++) {
                const mf_range *r = &t->r[q];
                int64_t lo = r->begin > lo0 ? r->begin : lo0, hi = r->end < hi0 ? r->end : hi0;
                if (lo >= hi) continue;
                for (int kind = 0; kind < kinds && st == SHARC_OK; kind++)
                    if (dst[kind]) /* a frozen unit has no moments to read */
                        st = reader_read(&rd, (int)r->file, r->offset + ((int64_t)kind * (r->end - r->begin) + lo - r->begin) * 4,
                                     (hi - lo) * 4, dst[kind] + segs[k].shard_off + (lo - lo0));
            }
        }
    }
    free(rd.buf);
    return st;
}

/* Note [frozen-params]: a resumed run trains the parameters its checkpoint
 * trained. The manifest's "frozen" list (absent in older checkpoints: none)
 * must name exactly the parameters this run freezes; the first one that
 * differs is named. (Moments of parameters frozen there are zeros, so
 * unfreezing on resume would silently restart their Adam state.) */
static sharc_status check_frozen(const manifest *m, sharc_fsdp *e) {
    json_object *list = NULL;
    if (json_object_object_get_ex(m->root, "frozen", &list) && !json_object_is_type(list, json_type_array))
        return bad(m, "\"frozen\" is not a list");
    size_t n = list ? json_object_array_length(list) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *x = json_object_array_get_idx(list, i);
        int u, p;
        if (!json_object_is_type(x, json_type_string) ||
            sharc_fsdp_find_param(e, json_object_get_string(x), &u, &p) != SHARC_OK)
            return bad(m, "\"frozen\" holds an entry that is not a parameter name of this model");
        if (!sharc_fsdp_unit_spec(e, u)->params[p].frozen)
            return sharc_error(SHARC_ERR_INVALID,
                               "ckpt '%s': parameter '%s' is frozen in the checkpoint but trains in this run "
                               "(model.freeze_module_prefix, train.trainable): resume with the checkpoint's frozen "
                               "set, or export its weights (sharc export) and start a new run from them "
                               "(model.init_from)", m->path, json_object_get_string(x));
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
                                   "ckpt '%s': parameter '%s' is frozen in this run but trained in the checkpoint "
                                   "(model.freeze_module_prefix, train.trainable): resume with the checkpoint's "
                                   "frozen set, or export its weights (sharc export) and start a new run from them "
                                   "(model.init_from)", m->path, s->params[p].name);
        }
    }
    return SHARC_OK;
}

/* This rank's part of a checkpoint, read into the live shards. */
static sharc_status load_local(sharc_ckpt *c, const char *step_dir, manifest *m) {
    SHARC_TRY(manifest_read(m, step_dir));
    SHARC_TRY(check_model(m, &sharc_trainer_config(c->t)->model, false));
    SHARC_TRY(check_frozen(m, sharc_trainer_engine(c->t)));
    return read_shards(m, sharc_trainer_engine(c->t), sharc_trainer_optimizer(c->t));
}

/* Load and agree; on success set the step. `warn`: report this rank's
 * failure as a warning (auto resume falls back). */
static sharc_status load_dir(sharc_ckpt *c, const char *step_dir, bool warn) {
    manifest m;
    double t0 = sharc_clock_now();
    /* on every rank, whatever happens: the shards may be written (the write bracket of sharc/fsdp.h) */
    sharc_fsdp_shard_write_begin(sharc_trainer_engine(c->t));
    sharc_status st = load_local(c, step_dir, &m);
    sharc_fsdp_shard_write_end(sharc_trainer_engine(c->t));
    if (st != SHARC_OK && warn) sharc_warn("%s", sharc_last_error());
    sharc_status agreed = agree(c->world, st);
    if (agreed == SHARC_OK) {
        sharc_trainer_set_steps_done(c->t, m.step);
        sharc_adamw_set_steps(sharc_trainer_optimizer(c->t), m.adam_step);
        c->done_step = m.step;
        snprintf(c->last, sizeof c->last, "%s", step_dir);
        const sharc_config *cfg = sharc_trainer_config(c->t);
        int64_t G = (int64_t)cfg->train.batch_size * cfg->train.grad_accum * sharc_comm_size(c->world), v = 0;
        if (sharc_comm_rank(c->world) == 0) {
            sharc_info("ckpt: resumed from %s at step %lld (written by %lld ranks, %s; loaded in %.3f s)", step_dir,
                       (long long)m.step, (long long)m.world_size, m.strategy, sharc_clock_now() - t0);
            if (get_i64(&m, m.train, "sequences_per_step", &v) == SHARC_OK && v != G)
                sharc_warn("ckpt: the checkpoint ran %lld sequences per step, this run %lld: the data order differs "
                           "from an uninterrupted run", (long long)v, (long long)G);
            if (get_i64(&m, m.train, "data_seed", &v) == SHARC_OK && (uint64_t)v != cfg->data.seed)
                sharc_warn("ckpt: data.seed %lld in the checkpoint, %llu in this run", (long long)v,
                           (unsigned long long)cfg->data.seed);
        }
    }
    manifest_free(&m);
    return agreed;
}

sharc_status sharc_ckpt_load(sharc_ckpt *c, const char *step_dir) {
    SHARC_TRY(finish(c));
    return load_dir(c, step_dir, false);
}

/* Rank 0 decides, everyone hears: a path broadcast as int32 words. */
static sharc_status bcast_path(sharc_comm *w, char *path /* (PATHLEN) */) {
    int32_t words[PATHLEN / 4];
    memcpy(words, path, sizeof words);
    SHARC_TRY(sharc_comm_broadcast(w, words, PATHLEN / 4, SHARC_DT_I32, 0));
    memcpy(path, words, sizeof words);
    path[PATHLEN - 1] = 0;
    return SHARC_OK;
}

sharc_status sharc_ckpt_resume(sharc_ckpt *c, const char *what, int64_t *loaded_step) {
    if (loaded_step) *loaded_step = -1;
    if (!what || !what[0] || !strcmp(what, "none")) return SHARC_OK;
    const bool lead = sharc_comm_rank(c->world) == 0, autom = !strcmp(what, "auto");
    const char *dir = autom ? c->dir : what;
    char man[PATHLEN + 32];
    snprintf(man, sizeof man, "%s/" MANIFEST_NAME, what);
    if (!autom && (exists(man) || !is_dir(what))) { /* a step directory (or a bad path: load names it) */
        SHARC_TRY(sharc_ckpt_load(c, what));
        if (loaded_step) *loaded_step = c->done_step;
        return SHARC_OK;
    }
    /* candidates, newest first, as rank 0 sees them (a checkpoint whose
     * re-save was interrupted put back first: note [ckpt-leftovers]) */
    if (lead && restore_interrupted(dir) != SHARC_OK) sharc_warn("%s", sharc_last_error());
    int64_t *steps = NULL;
    int64_t n = lead ? list_steps(dir, &steps) : 0;
    SHARC_TRY(sharc_comm_broadcast(c->world, &n, 1, SHARC_DT_I64, 0));
    if (!lead && n > 0) steps = calloc((size_t)n, sizeof *steps);
    sharc_status st = agree(c->world, n > 0 && !steps ? sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory") : SHARC_OK);
    if (st == SHARC_OK && n > 0) st = sharc_comm_broadcast(c->world, steps, (size_t)n, SHARC_DT_I64, 0);
    if (st != SHARC_OK) {
        free(steps);
        return st;
    }
    if (n == 0) {
        free(steps);
        if (autom) {
            if (lead) sharc_info("ckpt: no checkpoint in %s to resume from (ckpt.resume=auto)", dir);
            return SHARC_OK;
        }
        return sharc_error(SHARC_ERR_INVALID, "ckpt.resume: '%s' holds no checkpoint (no manifest.json, no step-N "
                           "directory with one)", what);
    }
    char p[PATHLEN];
    st = SHARC_ERR_IO;
    for (int64_t i = 0; i < n; i++) {
        step_path(p, sizeof p, dir, steps[i], "");
        SHARC_TRY(bcast_path(c->world, p));
        st = load_dir(c, p, autom);
        if (st == SHARC_OK || !autom) break;
        if (lead)
            sharc_warn("ckpt: %s cannot be loaded (see above); %s", p,
                       i + 1 < n ? "falling back to the previous checkpoint" : "no older checkpoint left");
    }
    free(steps);
    if (st != SHARC_OK && autom)
        st = sharc_error(st, "ckpt: no checkpoint in '%s' could be loaded (the reasons are above); remove the "
                         "directory or set ckpt.resume=none to start over", dir);
    if (st == SHARC_OK && loaded_step) *loaded_step = c->done_step;
    return st;
}

/* Every chunk of every file and each file's whole crc32; `out` (may be NULL)
 * gets a line per file, *total (may be NULL) their bytes. */
static sharc_status verify_files(manifest *m, FILE *out, int64_t *total) {
    reader rd = {.m = m, .file = -1, .chunk = -1, .buf = malloc((size_t)m->chunk_bytes)};
    sharc_status st = rd.buf ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    for (int f = 0; f < m->nfiles && st == SHARC_OK; f++) {
        uLong crc = crc32(0L, Z_NULL, 0);
        for (int64_t k = 0; k < m->files[f].nchunks && st == SHARC_OK; k++) {
            st = reader_chunk(&rd, f, k);
            int64_t lo = k * m->chunk_bytes, n = m->files[f].bytes - lo < m->chunk_bytes ? m->files[f].bytes - lo : m->chunk_bytes;
            if (st == SHARC_OK) crc = crc32(crc, rd.buf, (uInt)n);
        }
        if (st == SHARC_OK && m->files[f].nchunks == 0) st = reader_open_file(&rd, f);
        if (st == SHARC_OK && (uint32_t)crc != m->files[f].crc)
            st = sharc_error(SHARC_ERR_FORMAT, "ckpt '%s/%s': whole-file crc32 %08x, the manifest says %08x", m->dir,
                             m->files[f].name, (unsigned)crc, m->files[f].crc);
        if (st == SHARC_OK && out)
            fprintf(out, "  %s: %lld bytes, crc32 %08x ok\n", m->files[f].name, (long long)m->files[f].bytes, m->files[f].crc);
        if (total) *total += m->files[f].bytes;
    }
    free(rd.buf);
    return st;
}

/* ------------------------------------------------------------- inspect */

sharc_status sharc_ckpt_inspect(const char *path, FILE *out) {
    char dir[PATHLEN], man[PATHLEN + 32];
    snprintf(man, sizeof man, "%s/" MANIFEST_NAME, path);
    snprintf(dir, sizeof dir, "%s", path);
    if (!exists(man)) {
        int64_t *steps;
        int n = list_steps(path, &steps);
        if (n == 0) {
            free(steps);
            return sharc_error(SHARC_ERR_INVALID, "ckpt inspect: '%s' is not a checkpoint (no manifest.json, no step-N "
                               "directory with one)", path);
        }
        step_path(dir, sizeof dir, path, steps[0], "");
        free(steps);
    }
    manifest m;
    sharc_status st = manifest_read(&m, dir);
    if (st != SHARC_OK) {
        manifest_free(&m);
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
    st = verify_files(&m, out, &total);
    if (st == SHARC_OK)
        fprintf(out, "  %lld parameters, %lld bytes in %d files, every checksum verified\n", (long long)elems,
                (long long)total, m.nfiles);
    manifest_free(&m);
    return st;
}

/* ----------------------------------------------- without a trainer */

sharc_status sharc_ckpt_resolve(const char *path, char *step_dir, size_t n) {
    char man[PATHLEN + 32];
    if (strlen(path) >= SHARC_CKPT_PATH_MAX)
        return sharc_error(SHARC_ERR_INVALID, "ckpt: path '%.64s...' is too long (%d bytes at most)", path,
                           SHARC_CKPT_PATH_MAX - 1);
    snprintf(man, sizeof man, "%s/" MANIFEST_NAME, path);
    if (exists(man)) { /* a step directory: load checks what it reads */
        if (strlen(path) >= n) return sharc_error(SHARC_ERR_INVALID, "ckpt: path '%s' is too long", path);
        snprintf(step_dir, n, "%s", path);
        return SHARC_OK;
    }
    if (!is_dir(path))
        return sharc_error(SHARC_ERR_INVALID, "ckpt '%s': %s", path,
                           exists(path) ? "not a directory (a checkpoint is a step-N directory or a directory of them)"
                                        : "no such file or directory");
    const char *base = strrchr(path, '/');
    base = base && base[1] ? base + 1 : path;
    int64_t *steps;
    int ns = list_steps(path, &steps);
    if (ns == 0) {
        free(steps);
        if (parse_step_name(base) >= 0)
            return sharc_error(SHARC_ERR_FORMAT, "ckpt '%s': no manifest.json (an incomplete save, or its manifest was "
                               "removed)", path);
        return sharc_error(SHARC_ERR_INVALID, "ckpt '%s': not a checkpoint (no manifest.json, no step-N directory "
                           "with one)", path);
    }
    /* the newest that passes every check, as auto resume does: `latest` is
     * not trusted, a newer checkpoint that fails is reported and skipped */
    char p[PATHLEN];
    sharc_status st = SHARC_ERR_FORMAT;
    for (int i = 0; i < ns; i++) {
        step_path(p, sizeof p, path, steps[i], "");
        manifest m;
        st = manifest_read(&m, p);
        if (st == SHARC_OK) st = verify_files(&m, NULL, NULL);
        manifest_free(&m);
        if (st == SHARC_OK) break;
        sharc_warn("%s", sharc_last_error());
        sharc_warn("ckpt: %s cannot be used; %s", p, i + 1 < ns ? "falling back to the previous checkpoint"
                                                               : "no older checkpoint left");
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
    manifest m;
    const char *yaml = NULL;
    sharc_status st = manifest_read(&m, step_dir);
    if (st == SHARC_OK) st = get_str(&m, m.root, "config", &yaml);
    if (st == SHARC_OK && !yaml[0]) st = bad(&m, "\"config\" is empty: the checkpoint holds no run configuration");
    if (st == SHARC_OK) {
        char origin[PATHLEN + 64];
        snprintf(origin, sizeof origin, "%s (its \"config\")", m.path);
        sharc_config_default(cfg);
        st = sharc_config_load_string(cfg, yaml, origin);
        if (st == SHARC_OK) st = sharc_config_validate(cfg);
        if (st == SHARC_OK) st = check_model(&m, &cfg->model, true);
    }
    manifest_free(&m);
    return st;
}

sharc_status sharc_ckpt_load_params(sharc_fsdp *e, const char *step_dir) {
    /* whatever happens: the shards may be written (the write bracket of sharc/fsdp.h) */
    sharc_fsdp_shard_write_begin(e);
    manifest m;
    sharc_status st = manifest_read(&m, step_dir);
    if (st == SHARC_OK) st = read_shards(&m, e, NULL);
    manifest_free(&m);
    sharc_fsdp_shard_write_end(e);
    return st;
}

/* Note [inference-source] (src/cli/main.c). */
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
