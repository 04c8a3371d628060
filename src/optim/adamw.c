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
 * order, its padded shard cut in chunks of C = optim.offload_sub_group_size
 * parameters (DeepSpeed's sub_group_size, rounded up to 1024 so offsets
 * stay page-aligned; the last chunk shorter), each chunk exp_avg then
 * exp_avg_sq of its elements, so a chunk is one contiguous read or write.
 * The file is created by mkstemp, its bytes reserved at once
 * (posix_fallocate: a full disk is an error at start, naming the file, not
 * in the middle of a step), and unlinked while open, so it is scratch that
 * no exit, crash or kill -9 leaves behind; it is never fsynced (a
 * checkpoint is what must be durable, and a resume starts from one).
 * Resident (SHARC_MEM_OPTIM): chunk buffers of 2 x min(C, the largest
 * trainable shard) floats, three with optim.offload_pipeline (default), one
 * without; the plan (src/train/memplan.c) is the same sum.
 *
 * The step streams every chunk of every trainable unit: read, the same
 * kernel calls on the same values as in memory (each segment's part inside
 * the chunk; the kernel is elementwise, so cutting a segment changes no
 * bit), write. Pipelined, chunk k+1 is being read and chunk k-1 written
 * while k is updated: buffer k mod 3, and the read into a buffer waits for
 * its previous write. I/O (aio.c) is io_uring through liburing, or
 * pread/pwrite (SHARC_AIO=pread, and where io_uring is refused): the same
 * transfers in the same order, so results are bitwise those of the
 * in-memory optimizer with either (tests/cli/mpi_offload.sh). Buffered I/O,
 * not O_DIRECT: the page cache may keep the file's pages, but they are the
 * kernel's to drop under pressure, unlike anonymous memory. Each stored
 * chunk's crc32 is kept and checked when it is read back, so a disk that
 * returns other bytes (or a write that failed halfway) is an error naming
 * the file, unit and chunk, never a silently different model.
 *
 * Checkpoints see the moments through sharc_adamw_moment_view: in memory
 * the live arrays; offloaded a one-chunk cache in buffer 0, read on a miss,
 * written back on the next miss or sharc_adamw_flush if marked dirty (a
 * load). A sync save reads the chunks as the writer reaches them, an async
 * save copies them into its staged copy before its thread starts (the
 * thread never touches the optimizer): the files are the same bytes with
 * and without offload, and each kind of run resumes the other's.
 * Telemetry: the step's bytes read and written, the streaming time and the
 * time spent in I/O calls (the part read-ahead did not hide) per step
 * (offload/read_GBps, offload/wait(s)); bench/offload.sh compares pread,
 * uring and uring with read-ahead against the in-memory step. */
#include "sharc/optim.h"
#include "aio.h"
#include "sharc/fault.h"
#include "sharc/clock.h"
#include "sharc/fileio.h"
#include "sharc/kernels.h"
#include "sharc/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
    c->offload_pipeline = true; /* chunk 0: SHARC_OFFLOAD_CHUNK_DEFAULT */
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

int64_t sharc_offload_chunk_numel(const sharc_optim_config *c) {
    int64_t n = c->offload_chunk_numel > 0 ? c->offload_chunk_numel : SHARC_OFFLOAD_CHUNK_DEFAULT;
    if (n > SHARC_OFFLOAD_CHUNK_MAX) n = SHARC_OFFLOAD_CHUNK_MAX;
    return (n + 1023) / 1024 * 1024; /* 4 KiB of each moment: page-aligned file offsets */
}

int sharc_offload_buffers(const sharc_optim_config *c) { return c->offload_pipeline ? 3 : 1; }

struct sharc_adamw {
    sharc_optim_config cfg;
    sharc_device *dev; /* the engine's */
    sharc_fsdp *e;     /* borrowed: outlives the optimizer */
    /* note [offload-overlap] (src/fsdp/overlap.c): the step's scalars the
     * engine's host worker reads; written only after its queue ran */
    sharc_adamw_scalars sc;
    float decay_mul;
    int nunits;
    float **m, **v; /* (nunits) each (numel_shard), device memory; NULL entries when offloaded */
    int64_t t;
    /* note [optim-offload]: fd >= 0 */
    int fd;
    char path[SHARC_OPTIM_PATH_MAX + 32]; /* the (unlinked) file's name, for messages */
    int64_t *off;                         /* (nunits) byte offset of the unit's chunk 0; -1: no moments */
    int64_t *numel;                       /* (nunits) numel_shard */
    int64_t *chunk0;                      /* (nunits) the global index of the unit's chunk 0 */
    int64_t nchunks;                      /* chunks of all units */
    int64_t chunk;                        /* elements per chunk (C) */
    uint32_t *crc;                        /* (nchunks) crc32 of the chunk's bytes as last stored */
    bool *stored;                         /* (nchunks) stored at least once (else the file holds zeros) */
    int nbuf;                             /* chunk buffers: 3 pipelined, else 1 */
    float *buf[3];                        /* (2 C) each: exp_avg then exp_avg_sq of one chunk, device (host) memory */
    int cache_u;                          /* the chunk buffer 0 holds between steps (moment_view): unit, -1 none */
    int64_t cache_c;                      /* and chunk */
    bool cache_dirty;
    sharc_aio *io;
    /* the counters: st is the pipeline's own (whoever runs it: the main
     * thread, or the engine's host worker under fsdp.cpu_offload, note
     * [offload-overlap]); pub the copy published after each pass under
     * st_mu, which sharc_adamw_offload_stats_get reads */
    sharc_adamw_offload_stats st, pub;
    pthread_mutex_t st_mu;
    /* note [adamw-multi]: the table of every trainable segment, host and device copies */
    sharc_adamw_seg *segs_h, *segs_d; /* (nseg) */
    int nseg;
    float **tab_p, **tab_g; /* (nunits) the shard and gradient pointers the table was built from */
};

static void stats_publish(sharc_adamw *a);

static sharc_status offload_open(sharc_adamw *a, sharc_fsdp *e) {
    const char *dir = a->cfg.offload_dir;
    if (!sharc_device_is_host(a->dev))
        return sharc_error(SHARC_ERR_UNSUPPORTED,
                           "optim.offload_dir: '%s': offloading the moments to disk needs the shards in host memory "
                           "(train.device cpu, or fsdp.cpu_offload on a device)",
                           dir);
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return sharc_error(SHARC_ERR_INVALID, "optim.offload_dir: '%s': %s; expected an existing writable directory",
                           dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return sharc_error(SHARC_ERR_INVALID, "optim.offload_dir: '%s' is not a directory", dir);
    a->chunk = sharc_offload_chunk_numel(&a->cfg);
    a->nbuf = sharc_offload_buffers(&a->cfg);
    a->off = calloc((size_t)a->nunits, sizeof *a->off);
    a->numel = calloc((size_t)a->nunits, sizeof *a->numel);
    a->chunk0 = calloc((size_t)a->nunits, sizeof *a->chunk0);
    if (!a->off || !a->numel || !a->chunk0) return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    int64_t total = 0, max_numel = 0;
    for (int u = 0; u < a->nunits; u++) {
        a->numel[u] = sharc_fsdp_shard_numel(e, u);
        a->off[u] = -1;
        a->chunk0[u] = a->nchunks;
        if (!sharc_unit_trainable(sharc_fsdp_unit_spec(e, u))) continue;
        a->off[u] = total;
        total += 2 * a->numel[u] * (int64_t)sizeof(float);
        a->nchunks += (a->numel[u] + a->chunk - 1) / a->chunk;
        if (a->numel[u] > max_numel) max_numel = a->numel[u];
    }
    a->crc = calloc((size_t)a->nchunks + 1, sizeof *a->crc);
    a->stored = calloc((size_t)a->nchunks + 1, sizeof *a->stored);
    if (!a->crc || !a->stored) return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
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
    SHARC_TRY(sharc_aio_init(&a->io, a->fd, a->nbuf));
    int64_t cn = max_numel < a->chunk ? max_numel : a->chunk; /* a small model needs less than a chunk */
    size_t bytes = (size_t)(2 * cn) * sizeof(float);
    for (int b = 0; b < a->nbuf && bytes > 0; b++) {
        a->buf[b] = sharc_device_alloc(a->dev, bytes, SHARC_MEM_OPTIM);
        if (!a->buf[b])
            return sharc_error(SHARC_ERR_NOMEM, "adamw: cannot allocate the offload buffers (%d x %zu bytes)", a->nbuf,
                               bytes);
    }
    a->st.file_bytes = total;
    a->st.buffer_bytes = (int64_t)bytes * a->nbuf;
    a->st.chunk_numel = a->chunk;
    a->st.backend = sharc_aio_backend(a->io);
    if (sharc_log_rank() == 0)
        sharc_info("optim.offload_dir: chunks of %lld parameters, %d buffer%s, I/O by %s (SHARC_AIO)", (long long)cn,
                   a->nbuf, a->nbuf > 1 ? "s" : "", a->st.backend);
    stats_publish(a);
    return SHARC_OK;
}

bool sharc_adamw_offloaded(const sharc_adamw *a) { return a->fd >= 0; }

bool sharc_adamw_has_moments(const sharc_adamw *a, int u) { return a->fd >= 0 ? a->off[u] >= 0 : a->m[u] != NULL; }

/* chunk c of unit u: its elements [lo, lo + n), its bytes in the file */
static int64_t chunk_len(const sharc_adamw *a, int u, int64_t c) {
    int64_t left = a->numel[u] - c * a->chunk;
    return left < a->chunk ? left : a->chunk;
}
static int64_t chunk_off(const sharc_adamw *a, int u, int64_t c) {
    return a->off[u] + 2 * c * a->chunk * (int64_t)sizeof(float);
}

/* crc32 of n floats: parts of 4 MiB on the threads, joined by
 * crc32_combine (exactly the crc of the whole; zlib's crc32 runs near
 * 1 GB/s, which one thread would make most of an offloaded step) */
static uint32_t crc_of(const float *p, int64_t n) {
    enum { PART = 1 << 22, MAXPARTS = (SHARC_OFFLOAD_CHUNK_MAX * 8) / PART };
    const int64_t bytes = n * (int64_t)sizeof(float), np = (bytes + PART - 1) / PART;
    const Bytef *b = (const Bytef *)p;
    if (np <= 1) return (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), b, (size_t)bytes);
    uLong part[MAXPARTS];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < np; i++) {
        int64_t len = bytes - i * PART < PART ? bytes - i * PART : PART;
        part[i] = crc32_z(crc32_z(0L, Z_NULL, 0), b + i * PART, (size_t)len);
    }
    uLong crc = part[0];
    for (int64_t i = 1; i < np; i++)
        crc = crc32_combine(crc, part[i], (z_off_t)(bytes - i * PART < PART ? bytes - i * PART : PART));
    return (uint32_t)crc;
}

static sharc_status io_failed(const sharc_adamw *a, bool write, int u, int64_t c, int err) {
    if (err == ENODATA)
        return sharc_error(SHARC_ERR_IO,
                           "optim.offload_dir: cannot read the moments of unit %d chunk %lld from '%s': the file ends "
                           "before them (truncated by something else; its %lld bytes were reserved at start)",
                           u, (long long)c, a->path, (long long)a->st.file_bytes);
    return sharc_error(SHARC_ERR_IO, "optim.offload_dir: cannot %s the moments of unit %d chunk %lld %s '%s': %s",
                       write ? "write" : "read", u, (long long)c, write ? "to" : "from", a->path, strerror(err));
}

/* Start reading chunk (u, c) into buffer b. */
static void chunk_read_start(sharc_adamw *a, int b, int u, int64_t c) {
    int64_t n = chunk_len(a, u, c);
    double t0 = sharc_clock_now(); /* pread transfers here, and io_uring may copy a cached page inline */
    sharc_aio_submit(a->io, b, false, a->buf[b], (size_t)(2 * n) * sizeof(float), chunk_off(a, u, c));
    a->st.read_wait_s += sharc_clock_now() - t0;
    a->st.read_bytes += 2 * n * (int64_t)sizeof(float);
}

/* Wait for buffer b's read of chunk (u, c) and check it. */
static sharc_status chunk_read_end(sharc_adamw *a, int b, int u, int64_t c) {
    double t0 = sharc_clock_now();
    int err = sharc_aio_wait(a->io, b);
    a->st.read_wait_s += sharc_clock_now() - t0;
    if (err) return io_failed(a, false, u, c, err);
    const int64_t g = a->chunk0[u] + c, n = chunk_len(a, u, c);
    if (!a->stored[g]) return SHARC_OK; /* never written: the file's zeros */
    uint32_t crc = crc_of(a->buf[b], 2 * n);
    if (crc != a->crc[g])
        return sharc_error(SHARC_ERR_IO,
                           "optim.offload_dir: '%s': the moments of unit %d chunk %lld (bytes [%lld, %lld)) read back "
                           "with crc32 %08x, written with %08x: the disk returned other bytes",
                           a->path, u, (long long)c, (long long)chunk_off(a, u, c),
                           (long long)(chunk_off(a, u, c) + 2 * n * (int64_t)sizeof(float)), crc, a->crc[g]);
    return SHARC_OK;
}

/* Start writing buffer b as chunk (u, c) (its crc kept for the next read). */
static void chunk_write_start(sharc_adamw *a, int b, int u, int64_t c) {
    const int64_t g = a->chunk0[u] + c, n = chunk_len(a, u, c);
    a->crc[g] = crc_of(a->buf[b], 2 * n);
    a->stored[g] = true;
    double t0 = sharc_clock_now();
    sharc_aio_submit(a->io, b, true, a->buf[b], (size_t)(2 * n) * sizeof(float), chunk_off(a, u, c));
    a->st.write_wait_s += sharc_clock_now() - t0;
    a->st.write_bytes += 2 * n * (int64_t)sizeof(float);
    /* kill -9 in the middle of the spill writes (tests/cli/mpi_offload.sh) */
    if (g == a->nchunks / 2) sharc_fault_at("offload:write", a->t);
}

static sharc_status chunk_write_end(sharc_adamw *a, int b, int u, int64_t c) {
    double t0 = sharc_clock_now();
    int err = sharc_aio_wait(a->io, b);
    a->st.write_wait_s += sharc_clock_now() - t0;
    if (err) return io_failed(a, true, u, c, err); /* the crc is the intended bytes': a part never reads back */
    /* the fault hook of tests/cli/mpi_offload.sh: a disk that returns other bytes */
    if (sharc_fault_at("offload:written", a->t) == SHARC_FAULT_FAIL) {
        char byte;
        off_t at = (off_t)chunk_off(a, u, c);
        if (pread(a->fd, &byte, 1, at) == 1) {
            byte ^= 1;
            if (pwrite(a->fd, &byte, 1, at) != 1) return io_failed(a, true, u, c, errno);
        }
    }
    return SHARC_OK;
}

sharc_status sharc_adamw_flush(sharc_adamw *a) {
    if (a->fd < 0 || !a->cache_dirty) return SHARC_OK;
    SHARC_TRY(sharc_fsdp_shard_sync(a->e)); /* note [offload-overlap]: the buffers are the main thread's */
    a->cache_dirty = false;
    chunk_write_start(a, 0, a->cache_u, a->cache_c);
    sharc_status st = chunk_write_end(a, 0, a->cache_u, a->cache_c);
    stats_publish(a);
    return st;
}

void sharc_adamw_moment_dirty(sharc_adamw *a) {
    if (a->fd >= 0 && a->cache_u >= 0) a->cache_dirty = true;
}

sharc_status sharc_adamw_moment_view(sharc_adamw *a, int u, int kind, int64_t off, int64_t want, float **p,
                                     int64_t *n) {
    SHARC_CHECK(kind == 0 || kind == 1);
    SHARC_CHECK(off >= 0 && want >= 0);
    *p = NULL;
    *n = 0;
    SHARC_TRY(sharc_fsdp_shard_sync(a->e)); /* note [offload-overlap] */
    if (a->fd < 0) {
        if (!a->m[u]) return SHARC_OK;
        *p = (kind ? a->v[u] : a->m[u]) + off;
        *n = want;
        return SHARC_OK;
    }
    if (a->off[u] < 0) return SHARC_OK;
    SHARC_CHECK(off + want <= a->numel[u]);
    const int64_t c = off / a->chunk, lo = c * a->chunk, len = chunk_len(a, u, c);
    if (a->cache_u != u || a->cache_c != c) {
        SHARC_TRY(sharc_adamw_flush(a));
        a->cache_u = -1;
        chunk_read_start(a, 0, u, c);
        sharc_status st = chunk_read_end(a, 0, u, c);
        stats_publish(a);
        SHARC_TRY(st);
        a->cache_u = u;
        a->cache_c = c;
    }
    *p = a->buf[0] + (kind ? len : 0) + (off - lo);
    *n = lo + len - off < want ? lo + len - off : want;
    return SHARC_OK;
}

static void stats_publish(sharc_adamw *a) {
    pthread_mutex_lock(&a->st_mu);
    a->pub = a->st;
    pthread_mutex_unlock(&a->st_mu);
}

void sharc_adamw_offload_stats_get(const sharc_adamw *a, sharc_adamw_offload_stats *s) {
    pthread_mutex_t *mu = (pthread_mutex_t *)&a->st_mu; /* a lock is no change to the optimizer */
    pthread_mutex_lock(mu);
    *s = a->pub;
    pthread_mutex_unlock(mu);
}

sharc_status sharc_adamw_init(sharc_adamw **out, sharc_fsdp *e, const sharc_optim_config *c) {
    *out = NULL;
    sharc_adamw *a = calloc(1, sizeof *a);
    if (!a) return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    a->cfg = *c;
    a->dev = sharc_fsdp_shard_device(e);
    a->e = e;
    a->nunits = sharc_fsdp_num_units(e);
    a->fd = -1;
    a->cache_u = -1;
    pthread_mutex_init(&a->st_mu, NULL);
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
    if (a->e) sharc_fsdp_shard_wait(a->e); /* note [offload-overlap]: no queued update reads the moments */
    for (int u = 0; u < a->nunits; u++) {
        if (a->m) sharc_device_free(a->dev, a->m[u]);
        if (a->v) sharc_device_free(a->dev, a->v[u]);
    }
    free(a->m);
    free(a->v);
    sharc_aio_free(a->io);        /* waits for what is in flight */
    if (a->fd >= 0) close(a->fd); /* unlinked at init: this frees its blocks */
    for (int b = 0; b < 3; b++) sharc_device_free(a->dev, a->buf[b]);
    sharc_device_free(a->dev, a->segs_d);
    free(a->segs_h);
    free(a->tab_p);
    free(a->tab_g);
    free(a->off);
    free(a->numel);
    free(a->chunk0);
    free(a->crc);
    free(a->stored);
    pthread_mutex_destroy(&a->st_mu);
    free(a);
}

/* The update of elements [lo, lo + n) of unit u's shard, m and v those
 * elements' moments: the kernel on each trainable segment's part of them. */
static void update_segments(sharc_adamw *a, sharc_fsdp *e, int u, float *p, const float *g, int64_t lo, int64_t n,
                            float *m, float *v, sharc_adamw_scalars *sc, float decay_mul) {
    const sharc_kernels *k = sharc_device_kernels(a->dev);
    sharc_stream *stream = sharc_device_stream(a->dev);
    const sharc_unit_spec *spec = sharc_fsdp_unit_spec(e, u);
    const sharc_segment *segs;
    int nseg = sharc_fsdp_shard_segments(e, u, &segs);
    for (int s = 0; s < nseg; s++) {
        if (spec->params[segs[s].param].frozen) continue;
        int64_t b = segs[s].shard_off > lo ? segs[s].shard_off : lo;
        int64_t end = segs[s].shard_off + segs[s].len < lo + n ? segs[s].shard_off + segs[s].len : lo + n;
        if (b >= end) continue;
        sc->decay_mul = spec->params[segs[s].param].decay ? decay_mul : 1.0f;
        k->adamw(stream, p + b, g + b, m + (b - lo), v + (b - lo), end - b, sc);
    }
}

/* Note [adamw-multi]. In memory on the engine's device (not
 * optim.offload_dir, not fsdp.cpu_offload, whose shards live on another
 * device than the compute), a step is one adamw_multi call over a table of
 * every trainable segment of every unit (unit order, then segment order,
 * padding and frozen parameters left out, as update_segments does). The table
 * is built at the first step, inside the shard write bracket that hands out
 * the shard pointers, and uploaded to the device once; each step checks
 * the units' shard and gradient pointers against those it was built from
 * (a host comparison per unit) and rebuilds it if one moved. Shards,
 * gradients and moments are allocated at init and never reallocated, and
 * which parameters are frozen is fixed when the units are made, so that is
 * a guard, not a path taken. The table (48 bytes an entry: a few KiB for
 * GPT-2's ~150 segments) is counted under SHARC_MEM_OTHER, which the
 * memory plan leaves unplanned, so the plan's optim bytes stay the moments. */
static sharc_status multi_table(sharc_adamw *a, sharc_fsdp *e) {
    bool same = a->segs_h != NULL;
    for (int u = 0; u < a->nunits && same; u++)
        if (a->m[u]) same = a->tab_p[u] == sharc_fsdp_shard_write(e, u) && a->tab_g[u] == sharc_fsdp_shard_grads(e, u);
    if (same) return SHARC_OK;
    sharc_device_free(a->dev, a->segs_d);
    free(a->segs_h);
    a->segs_d = a->segs_h = NULL;
    a->nseg = 0;
    int cap = 0;
    for (int u = 0; u < a->nunits; u++) {
        const sharc_segment *segs;
        if (a->m[u]) cap += sharc_fsdp_shard_segments(e, u, &segs);
    }
    if (!a->tab_p) a->tab_p = calloc((size_t)a->nunits, sizeof *a->tab_p);
    if (!a->tab_g) a->tab_g = calloc((size_t)a->nunits, sizeof *a->tab_g);
    a->segs_h = calloc(cap > 0 ? (size_t)cap : 1, sizeof *a->segs_h);
    if (!a->tab_p || !a->tab_g || !a->segs_h) return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    int64_t first = 0;
    for (int u = 0; u < a->nunits; u++) {
        if (!a->m[u]) continue;
        float *p = sharc_fsdp_shard_write(e, u), *g = sharc_fsdp_shard_grads(e, u);
        a->tab_p[u] = p;
        a->tab_g[u] = g;
        const sharc_unit_spec *spec = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int ns = sharc_fsdp_shard_segments(e, u, &segs);
        for (int i = 0; i < ns; i++) {
            const sharc_segment *sg = &segs[i];
            if (spec->params[sg->param].frozen || sg->len <= 0) continue;
            a->segs_h[a->nseg++] = (sharc_adamw_seg){.p = p + sg->shard_off,
                                                     .g = g + sg->shard_off,
                                                     .m = a->m[u] + sg->shard_off,
                                                     .v = a->v[u] + sg->shard_off,
                                                     .n = sg->len,
                                                     .first = first,
                                                     .decay = spec->params[sg->param].decay};
            first += sg->len;
        }
    }
    if (a->nseg == 0) return SHARC_OK;
    size_t bytes = (size_t)a->nseg * sizeof *a->segs_h;
    a->segs_d = sharc_device_alloc(a->dev, bytes, SHARC_MEM_OTHER); /* metadata, unplanned like the batch */
    if (!a->segs_d) return sharc_error(SHARC_ERR_NOMEM, "adamw: cannot allocate the segment table (%zu bytes)", bytes);
    sharc_stream *stream = sharc_device_stream(a->dev);
    SHARC_TRY(sharc_device_copy(a->dev, a->segs_d, a->segs_h, bytes, SHARC_COPY_HOST_TO_DEVICE, stream));
    return sharc_device_synchronize(stream); /* segs_h may be freed by a rebuild before the copy ran */
}

static sharc_status stream_chunks(sharc_adamw *a, sharc_fsdp *e, int only, float *p, float *g,
                                  const sharc_adamw_scalars *sc, float decay_mul);

/* Note [offload-overlap] (src/fsdp/overlap.c): unit u's whole update, on
 * the engine's host worker (shards in host memory, the CPU's kernel) or at
 * the call (SHARC_OFFLOAD_OVERLAP=0); p and g its shards. With
 * optim.offload_dir its moments stream through the chunk buffers (note
 * [optim-offload-overlap] below). */
static sharc_status update_unit(void *ctx, int u, float *p, float *g) {
    sharc_adamw *a = ctx;
    if (!sharc_adamw_has_moments(a, u)) return SHARC_OK;
    if (sharc_fault_at("offload:update", a->t) == SHARC_FAULT_FAIL)
        return sharc_error(SHARC_ERR_INTERNAL,
                           "fsdp.cpu_offload: the AdamW update of unit %d failed at step %lld (the test hook "
                           "SHARC_TEST_OFFLOAD_UPDATE_FAIL)",
                           u, (long long)a->t);
    if (a->fd >= 0) return stream_chunks(a, a->e, u, p, g, &a->sc, a->decay_mul);
    sharc_adamw_scalars sc = a->sc;
    update_segments(a, a->e, u, p, g, 0, sharc_fsdp_shard_numel(a->e, u), a->m[u], a->v[u], &sc, a->decay_mul);
    return SHARC_OK;
}

/* The offloaded pass: every chunk of every trainable unit (only < 0), or of
 * unit `only` alone with its shards p and g (the engine's host worker),
 * read, updated and written, with nbuf == 3 chunk k+1 read and k-1 written
 * while k updates. The caller has flushed the view's cache (the buffers are
 * the pipeline's).
 *
 * Note [optim-offload-overlap]. optim.offload_dir on a device implies
 * fsdp.cpu_offload (sharc_config_validate): the moments' file, the chunk
 * buffers, the aio ring, the crcs and the counters are then used by the
 * engine's host worker, one unit's chunks per queued update, in the order
 * the next forward gathers the units. Nothing in them is shared with the
 * main thread while a batch is queued: every main-thread user (the moment
 * views and flush of checkpoints, set_steps, the next step, free) waits for
 * the whole queue first (sharc_fsdp_shard_sync), the step flushes the view
 * and drops its cache before queueing, and the only reader that does not
 * wait, the telemetry's counters, reads the copy published under st_mu
 * after each pass. The chunks are those of the in-memory order cut per
 * unit (a unit's chunks start at its first element in either pass), and
 * the kernel is elementwise: the same bits as the run without the file. */
static sharc_status stream_chunks(sharc_adamw *a, sharc_fsdp *e, int only, float *p, float *g,
                                  const sharc_adamw_scalars *sc0, float decay_mul) {
    double t0 = sharc_clock_now();
    sharc_status st = SHARC_OK;
    int nu = 0;
    int *cu = malloc((size_t)(a->nchunks + 1) * sizeof *cu);
    int64_t *cc = malloc((size_t)(a->nchunks + 1) * sizeof *cc);
    if (!cu || !cc) st = sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    for (int u = only < 0 ? 0 : only; u < (only < 0 ? a->nunits : only + 1) && st == SHARC_OK; u++)
        for (int64_t c = 0; a->off[u] >= 0 && c * a->chunk < a->numel[u]; c++, nu++) cu[nu] = u, cc[nu] = c;
    const int64_t n = st == SHARC_OK ? nu : 0;
    if (n > 0) chunk_read_start(a, 0, cu[0], cc[0]);
    for (int64_t i = 0; i < n && st == SHARC_OK; i++) {
        const int b = (int)(i % a->nbuf);
        if (a->nbuf > 1 && i + 1 < n) { /* read ahead into the buffer whose write (chunk i-2) must end first */
            const int nb = (int)((i + 1) % a->nbuf);
            if (i >= 2 && (st = chunk_write_end(a, nb, cu[i - 2], cc[i - 2])) != SHARC_OK) break;
            chunk_read_start(a, nb, cu[i + 1], cc[i + 1]);
        }
        if ((st = chunk_read_end(a, b, cu[i], cc[i])) != SHARC_OK) break;
        const int64_t len = chunk_len(a, cu[i], cc[i]);
        sharc_adamw_scalars sc = *sc0;
        update_segments(a, e, cu[i], only < 0 ? sharc_fsdp_shard_write(e, cu[i]) : p,
                        only < 0 ? sharc_fsdp_shard_grads(e, cu[i]) : g, cc[i] * a->chunk, len, a->buf[b],
                        a->buf[b] + len, &sc, decay_mul);
        chunk_write_start(a, b, cu[i], cc[i]); /* a host device: the kernel has run */
        if (a->nbuf == 1 && i + 1 < n) {
            if ((st = chunk_write_end(a, b, cu[i], cc[i])) != SHARC_OK) break;
            chunk_read_start(a, b, cu[i + 1], cc[i + 1]);
        }
    }
    /* the last writes (all of them after a failure, their errors after the first dropped) */
    for (int64_t i = n - a->nbuf > 0 ? n - a->nbuf : 0; i < n && st == SHARC_OK; i++)
        st = chunk_write_end(a, (int)(i % a->nbuf), cu[i], cc[i]);
    sharc_aio_drain(a->io);
    /* the fault hook of tests/cli/mpi_offload.sh: the file cut to half */
    if (st == SHARC_OK && sharc_fault_at("offload:truncate", a->t) == SHARC_FAULT_FAIL &&
        ftruncate(a->fd, (off_t)(a->st.file_bytes / 2)) != 0)
        st = sharc_error(SHARC_ERR_IO, "optim.offload_dir: '%s': %s", a->path, strerror(errno));
    free(cu);
    free(cc);
    a->st.step_s += sharc_clock_now() - t0;
    stats_publish(a);
    return st;
}

sharc_status sharc_adamw_step(sharc_adamw *a, sharc_fsdp *e, float lr, float grad_scale) {
    SHARC_TRY(sharc_fsdp_shard_sync(e)); /* note [offload-overlap]: the last step's updates read a->sc and a->t */
    a->t++;
    const sharc_optim_config *c = &a->cfg;
    /* scalars in double, as PyTorch computes them in Python */
    double bc1 = 1.0 - pow((double)c->beta1, (double)a->t);
    double bc2 = 1.0 - pow((double)c->beta2, (double)a->t);
    sharc_adamw_scalars sc = {.beta1 = c->beta1,
                              .beta2 = c->beta2,
                              .step_size = (float)((double)lr / bc1),
                              .sqrt_bc2 = (float)sqrt(bc2),
                              .eps = c->eps,
                              .grad_scale = grad_scale};
    float decay_mul = (float)(1.0 - (double)lr * c->weight_decay);
    sharc_status st = SHARC_OK;
    if (a->fd >= 0) { /* note [optim-offload]: the buffers are the pipeline's now */
        st = sharc_adamw_flush(a);
        a->cache_u = -1;
        if (st != SHARC_OK) return st;
    }
    sharc_fsdp_shard_write_begin(e);
    if (sharc_fsdp_shard_device(e) != sharc_fsdp_device(e)) { /* fsdp.cpu_offload: note [offload-overlap] */
        a->sc = sc;
        a->decay_mul = decay_mul;
        st = sharc_fsdp_shard_update(e, update_unit, a);
    } else if (a->fd >= 0) {
        st = stream_chunks(a, e, -1, NULL, NULL, &sc, decay_mul);
    } else {
        st = multi_table(a, e); /* note [adamw-multi] */
        if (st == SHARC_OK && a->nseg > 0)
            sharc_device_kernels(a->dev)->adamw_multi(sharc_device_stream(a->dev), a->segs_d, a->segs_h, a->nseg, &sc,
                                                      decay_mul);
    }
    sharc_fsdp_shard_write_end(e);
    return st;
}

int64_t sharc_adamw_steps(const sharc_adamw *a) { return a->t; }
void sharc_adamw_set_steps(sharc_adamw *a, int64_t t) {
    sharc_fsdp_shard_wait(a->e); /* note [offload-overlap]: a queued update reads a->t */
    a->t = t;
}
float *sharc_adamw_m(sharc_adamw *a, int u) {
    sharc_fsdp_shard_wait(a->e);
    return a->m[u];
}
float *sharc_adamw_v(sharc_adamw *a, int u) {
    sharc_fsdp_shard_wait(a->e);
    return a->v[u];
}
