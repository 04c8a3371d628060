/* adamw.c: sharc_adamw_*, sharc_lr_at and sharc_clip_coef: the optimizer
 * over this rank's shards only, its moments on the engine's device (or in a
 * file, note [optim-offload]) and its update the device's adamw kernel
 * (sharc/kernels.h). Note [padding-excluded]: the update runs on the
 * shard's parameter segments, so padding is never touched. Note
 * [frozen-params] (src/fsdp/units.c): frozen parameters are skipped, and a
 * unit with nothing trainable has no moments.
 *
 * Note [optim-offload]. With optim.offload_dir (DeepSpeed's
 * offload_optimizer.nvme_path) the moments of this rank's shards live in one
 * file, sharc-moments-XXXXXX in that directory: per trainable unit, in unit
 * order, exp_avg then exp_avg_sq of its whole padded shard (numel_shard
 * floats each). The file is created by mkstemp, its bytes reserved at once
 * (posix_fallocate: a full disk is an error at start, naming the file, not
 * in the middle of a step), and unlinked while open, so it is scratch that
 * no exit, crash or kill -9 leaves behind; it is never fsynced (a
 * checkpoint is what must be durable). Resident: one buffer of the largest
 * unit's two moments (SHARC_MEM_OPTIM). The step loads a unit (one pread),
 * runs the same kernel calls on the same values as in memory, and stores it
 * (one pwrite), so results are bitwise those of the in-memory optimizer.
 * Each stored unit's crc32 is kept and checked when it is read back, so a
 * disk that returns other bytes is an error naming the file and unit, never
 * a silently different model. The page cache may keep the file's pages, but
 * they are the kernel's to drop under pressure, unlike anonymous memory.
 * Synchronous: the optimizer's pass is one read and one write of 8 bytes per
 * parameter per step, a small part of a CPU step (bench/offload.sh); a
 * read-ahead thread would hide it and is not worth its code yet.
 * Checkpoints read and write offloaded moments through unit_load /
 * unit_store (src/ckpt/writer.c, shard_file.c): the files are the same
 * bytes with and without offload. */
#include "sharc/optim.h"
#include "sharc/clock.h"
#include "sharc/fileio.h"
#include "sharc/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

void sharc_optim_config_default(sharc_optim_config *c) {
    memset(c, 0, sizeof *c);
    c->lr = 3e-4f;
    c->min_lr_ratio = 0.1f;
    c->warmup_steps = 0;
    c->decay = SHARC_LR_COSINE;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->max_grad_norm = 1.0f;
}

float sharc_lr_at(const sharc_optim_config *c, int64_t step, int64_t max_steps) {
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (c->decay == SHARC_LR_CONSTANT) return c->lr;
    int64_t span = c->decay_steps > 0 ? c->decay_steps : max_steps - c->warmup_steps;
    double progress = span > 0 ? (double)(step - c->warmup_steps) / (double)span : 1.0;
    if (progress > 1.0) progress = 1.0;
    double floor_lr = (double)c->lr * c->min_lr_ratio;
    double k = c->decay == SHARC_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * progress)) : 1.0 - progress;
    return (float)(floor_lr + ((double)c->lr - floor_lr) * k);
}

float sharc_clip_coef(const sharc_optim_config *c, double grad_norm) {
    if (c->max_grad_norm <= 0.0f) return 1.0f;
    double coef = (double)c->max_grad_norm / (grad_norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

struct sharc_adamw {
    sharc_optim_config cfg;
    sharc_device *dev; /* the engine's */
    int nunits;
    float **m, **v; /* (nunits) each (numel_shard), device memory; NULL entries when offloaded */
    int64_t t;
    /* note [optim-offload]: fd >= 0 */
    int fd;
    char path[SHARC_OPTIM_PATH_MAX + 32]; /* the (unlinked) file's name, for messages */
    int64_t *off;                         /* (nunits) byte offset of the unit's exp_avg; -1: no moments */
    int64_t *numel;                       /* (nunits) numel_shard */
    uint32_t *crc;                        /* (nunits) crc32 of the unit's bytes as last stored */
    bool *stored;                         /* (nunits) stored at least once (else the file holds zeros) */
    float *buf;                           /* (2, max numel_shard): exp_avg then exp_avg_sq, device (host) memory */
    int loaded;                           /* the unit the buffer holds, -1 none */
    sharc_adamw_offload_stats io;
};

static sharc_status offload_open(sharc_adamw *a, sharc_fsdp *e) {
    const char *dir = a->cfg.offload_dir;
    if (!sharc_device_is_host(a->dev))
        return sharc_error(SHARC_ERR_UNSUPPORTED,
                           "optim.offload_dir: '%s': offloading the moments to disk needs train.device cpu", dir);
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return sharc_error(SHARC_ERR_INVALID, "optim.offload_dir: '%s': %s; expected an existing writable directory",
                           dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return sharc_error(SHARC_ERR_INVALID, "optim.offload_dir: '%s' is not a directory", dir);
    a->off = calloc((size_t)a->nunits, sizeof *a->off);
    a->numel = calloc((size_t)a->nunits, sizeof *a->numel);
    a->crc = calloc((size_t)a->nunits, sizeof *a->crc);
    a->stored = calloc((size_t)a->nunits, sizeof *a->stored);
    if (!a->off || !a->numel || !a->crc || !a->stored) return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    int64_t total = 0, max_numel = 0;
    for (int u = 0; u < a->nunits; u++) {
        a->numel[u] = sharc_fsdp_shard_numel(e, u);
        a->off[u] = -1;
        if (!sharc_unit_trainable(sharc_fsdp_unit_spec(e, u))) continue;
        a->off[u] = total;
        total += 2 * a->numel[u] * (int64_t)sizeof(float);
        if (a->numel[u] > max_numel) max_numel = a->numel[u];
    }
    snprintf(a->path, sizeof a->path, "%s/sharc-moments-XXXXXX", dir);
    a->fd = mkostemp(a->path, O_CLOEXEC);
    if (a->fd < 0)
        return sharc_error(sharc_path_status(errno), "optim.offload_dir: cannot create a file in '%s': %s", dir,
                           strerror(errno));
    unlink(a->path); /* scratch: gone when the process is, however it ends */
    int err = total > 0 ? posix_fallocate(a->fd, 0, (off_t)total) : 0;
    if (err)
        return sharc_error(err == ENOSPC || err == EFBIG || err == EDQUOT ? SHARC_ERR_IO : sharc_path_status(err),
                           "optim.offload_dir: cannot reserve %lld bytes for the AdamW moments in '%s': %s",
                           (long long)total, a->path, strerror(err));
    size_t bytes = (size_t)(2 * max_numel) * sizeof(float);
    if (bytes > 0) {
        a->buf = sharc_device_alloc(a->dev, bytes, SHARC_MEM_OPTIM);
        if (!a->buf)
            return sharc_error(SHARC_ERR_NOMEM, "adamw: cannot allocate the offload buffer (%zu bytes)", bytes);
    }
    a->io.file_bytes = total;
    a->io.buffer_bytes = (int64_t)bytes;
    return SHARC_OK;
}

bool sharc_adamw_offloaded(const sharc_adamw *a) { return a->fd >= 0; }

bool sharc_adamw_has_moments(const sharc_adamw *a, int u) { return a->fd >= 0 ? a->off[u] >= 0 : a->m[u] != NULL; }

sharc_status sharc_adamw_unit_load(sharc_adamw *a, int u, float **m, float **v) {
    *m = *v = NULL;
    if (a->fd < 0) {
        *m = a->m[u];
        *v = a->v[u];
        return SHARC_OK;
    }
    if (a->off[u] < 0) return SHARC_OK;
    const size_t n = (size_t)a->numel[u] * sizeof(float);
    if (a->loaded != u) {
        a->loaded = -1;
        double t0 = sharc_clock_now();
        SHARC_TRY(sharc_pread_all(a->fd, a->buf, 2 * n, (uint64_t)a->off[u], a->path));
        if (a->stored[u]) {
            uint32_t crc = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef *)a->buf, 2 * n);
            if (crc != a->crc[u])
                return sharc_error(SHARC_ERR_IO,
                                   "optim.offload_dir: '%s': the moments of unit %d (bytes [%lld, %lld)) read back "
                                   "with crc32 %08x, written with %08x: the disk returned other bytes",
                                   a->path, u, (long long)a->off[u], (long long)(a->off[u] + 2 * (int64_t)n), crc,
                                   a->crc[u]);
        }
        a->io.read_bytes += 2 * (int64_t)n;
        a->io.read_s += sharc_clock_now() - t0;
        a->loaded = u;
    }
    *m = a->buf;
    *v = a->buf + a->numel[u];
    return SHARC_OK;
}

sharc_status sharc_adamw_unit_store(sharc_adamw *a, int u) {
    if (a->fd < 0 || a->off[u] < 0) return SHARC_OK;
    SHARC_CHECK(a->loaded == u);
    const size_t n = 2 * (size_t)a->numel[u] * sizeof(float);
    double t0 = sharc_clock_now();
    a->crc[u] = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef *)a->buf, n);
    const char *p = (const char *)a->buf;
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(a->fd, p + done, n - done, (off_t)(a->off[u] + (int64_t)done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            a->loaded = -1; /* the file may now hold part of it */
            return sharc_error(SHARC_ERR_IO, "optim.offload_dir: cannot write the moments of unit %d to '%s': %s", u,
                               a->path, w < 0 ? strerror(errno) : "no progress");
        }
        done += (size_t)w;
    }
    a->stored[u] = true;
    a->io.write_bytes += (int64_t)n;
    a->io.write_s += sharc_clock_now() - t0;
    return SHARC_OK;
}

void sharc_adamw_offload_stats_get(const sharc_adamw *a, sharc_adamw_offload_stats *s) { *s = a->io; }

sharc_status sharc_adamw_init(sharc_adamw **out, sharc_fsdp *e, const sharc_optim_config *c) {
    *out = NULL;
    sharc_adamw *a = calloc(1, sizeof *a);
    if (!a) return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    a->cfg = *c;
    a->dev = sharc_fsdp_device(e);
    a->nunits = sharc_fsdp_num_units(e);
    a->fd = -1;
    a->loaded = -1;
    a->m = calloc((size_t)a->nunits, sizeof(float *));
    a->v = calloc((size_t)a->nunits, sizeof(float *));
    if (!a->m || !a->v) {
        sharc_adamw_free(a);
        return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    }
    if (c->offload_dir[0]) {
        sharc_status st = offload_open(a, e);
        if (st != SHARC_OK) sharc_adamw_free(a);
        else *out = a;
        return st;
    }
    for (int u = 0; u < a->nunits; u++) {
        if (!sharc_unit_trainable(sharc_fsdp_unit_spec(e, u))) continue; /* no moments */
        size_t bytes = (size_t)sharc_fsdp_shard_numel(e, u) * sizeof(float);
        a->m[u] = sharc_device_alloc(a->dev, bytes, SHARC_MEM_OPTIM);
        a->v[u] = sharc_device_alloc(a->dev, bytes, SHARC_MEM_OPTIM);
        if (!a->m[u] || !a->v[u]) {
            sharc_adamw_free(a);
            return sharc_error(SHARC_ERR_NOMEM, "adamw: cannot allocate moments (%zu bytes)", bytes);
        }
    }
    *out = a;
    return SHARC_OK;
}

void sharc_adamw_free(sharc_adamw *a) {
    if (!a) return;
    for (int u = 0; u < a->nunits; u++) {
        if (a->m) sharc_device_free(a->dev, a->m[u]);
        if (a->v) sharc_device_free(a->dev, a->v[u]);
    }
    free(a->m);
    free(a->v);
    if (a->fd >= 0) close(a->fd); /* unlinked at init: this frees its blocks */
    sharc_device_free(a->dev, a->buf);
    free(a->off);
    free(a->numel);
    free(a->crc);
    free(a->stored);
    free(a);
}

sharc_status sharc_adamw_step(sharc_adamw *a, sharc_fsdp *e, float lr, float grad_scale) {
    a->t++;
    const sharc_optim_config *c = &a->cfg;
    /* scalars in double, as PyTorch computes them in Python */
    double bc1 = 1.0 - pow((double)c->beta1, (double)a->t);
    double bc2 = 1.0 - pow((double)c->beta2, (double)a->t);
    const sharc_kernels *k = sharc_device_kernels(a->dev);
    sharc_stream *stream = sharc_device_stream(a->dev);
    sharc_adamw_scalars sc = {.beta1 = c->beta1,
                              .beta2 = c->beta2,
                              .step_size = (float)((double)lr / bc1),
                              .sqrt_bc2 = (float)sqrt(bc2),
                              .eps = c->eps,
                              .grad_scale = grad_scale};
    float decay_mul = (float)(1.0 - (double)lr * c->weight_decay);
    sharc_status st = SHARC_OK;
    sharc_fsdp_shard_write_begin(e);
    for (int u = 0; u < a->nunits && st == SHARC_OK; u++) {
        if (!sharc_adamw_has_moments(a, u)) continue; /* frozen */
        float *m, *v;
        if ((st = sharc_adamw_unit_load(a, u, &m, &v)) != SHARC_OK) break;
        float *p = sharc_fsdp_shard_write(e, u), *g = sharc_fsdp_shard_grads(e, u);
        const sharc_unit_spec *spec = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        for (int s = 0; s < nseg; s++) {
            if (spec->params[segs[s].param].frozen) continue;
            int64_t off = segs[s].shard_off;
            sc.decay_mul = spec->params[segs[s].param].decay ? decay_mul : 1.0f;
            k->adamw(stream, p + off, g + off, m + off, v + off, segs[s].len, &sc);
        }
        st = sharc_adamw_unit_store(a, u); /* a host device: the kernel has run */
    }
    sharc_fsdp_shard_write_end(e);
    return st;
}

int64_t sharc_adamw_steps(const sharc_adamw *a) { return a->t; }
void sharc_adamw_set_steps(sharc_adamw *a, int64_t t) { a->t = t; }
float *sharc_adamw_m(sharc_adamw *a, int u) { return a->m[u]; }
float *sharc_adamw_v(sharc_adamw *a, int u) { return a->v[u]; }
