/* shard_file.c: sharc_ckpt_shard_*, the shard files of a checkpoint:
 * written from a job's pieces with the whole-file and per-chunk crc32, and
 * read back into live shards (any world size, any strategy) chunk by chunk,
 * each chunk verified before a byte of it is used.
 *
 * Note [ckpt-layout]. Every rank of replicate group 0 (replicate_rank 0)
 * writes one file, shard-SSSSS-of-NNNNN.bin, named by its shard rank: for each
 * segment of its shards (sharc_fsdp_shard_segments, padding excluded), in
 * unit and segment order, the parameter's elements [begin, end) as fp32, then
 * exp_avg's, then exp_avg_sq's, back to back. The manifest lists, per
 * parameter, its (file, begin, end, byte offset) ranges; they tile
 * [0, numel) exactly, whatever wrote them. Replicas (NO_SHARD, HYBRID_SHARD)
 * hold the same values and write nothing. Under tensor parallelism (note
 * [tp-params] in sharc/units.h) file s * tp + tp_rank holds shard s of tp
 * rank tp_rank's parts, a split parameter's ranges being the runs of its
 * part in the full tensor; parameters replicated over tp are written by tp
 * rank 0 only (sharc_segment.tp_copy). Reading maps the live segments onto
 * the ranges the same way, so any mesh reads any checkpoint. Files are our own raw format, not
 * safetensors: a safetensors file names whole tensors, while a shard holds
 * pieces of several, three kinds each, and would need the index and the
 * per-chunk checksums in its metadata anyway; with the index in the manifest
 * a shard file is plain data that a reader preads by byte range.
 */
#include "internal.h"
#include "sharc/activity.h"
#include "sharc/device.h"
#include "sharc/fault.h"
#include "sharc/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------ verified reads */

static sharc_status reader_open_file(sharc_ckpt_reader *r, int fi) {
    sharc_ckpt_file *f = &r->m->files[fi];
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
static sharc_status reader_chunk(sharc_ckpt_reader *r, int fi, int64_t c) {
    if (r->file == fi && r->chunk == c) return SHARC_OK;
    SHARC_TRY(reader_open_file(r, fi));
    sharc_ckpt_file *f = &r->m->files[fi];
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
static sharc_status reader_read(sharc_ckpt_reader *r, int fi, int64_t pos, int64_t n, void *dst) {
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

/* Note [ckpt-pinned], the load side: a device's bytes go from the verified
 * chunk into one of two pinned windows (SHARC_CKPT_PIN_WINDOW each), and
 * from there by a copy queued on the device's stream without a wait; when a
 * window is full the reader moves to the other one, waiting (event
 * synchronize) only for the copies still reading it, so the host fills one
 * window while the device copies the other, and a load waits once per
 * window filled beyond the first two plus once at the end (reader_finish). */
static sharc_status reader_pin(sharc_ckpt_reader *r, sharc_device *dev) {
    r->dev = dev; /* what reader_finish frees, whatever was allocated */
    r->cur = 0;
    r->fill = 0;
    r->win = sharc_fault_ckpt_pin_window() ? sharc_fault_ckpt_pin_window() : SHARC_CKPT_PIN_WINDOW;
    for (int i = 0; i < 2; i++) {
        r->pin[i] = sharc_device_host_alloc(dev, (size_t)r->win, SHARC_MEM_OTHER);
        if (!r->pin[i])
            return sharc_error(SHARC_ERR_NOMEM, "ckpt: cannot pin %lld bytes of host memory for a load",
                               (long long)r->win);
        SHARC_TRY(sharc_device_event_new(dev, &r->ev[i]));
    }
    return SHARC_OK;
}

/* Wait for the device's copies out of the pinned windows (status of the
 * wait), then free them; st: the load's status so far. */
static sharc_status reader_finish(sharc_ckpt_reader *r, sharc_status st) {
    sharc_device *dev = r->dev;
    if (!dev) return st;
    sharc_status w = sharc_device_synchronize(sharc_device_stream(dev));
    if (st == SHARC_OK) st = w;
    for (int i = 0; i < 2; i++) {
        if (r->ev[i]) sharc_device_event_free(r->ev[i]);
        if (r->pin[i]) sharc_device_host_free(dev, r->pin[i]);
        r->ev[i] = NULL;
        r->pin[i] = NULL;
    }
    r->dev = NULL;
    return st;
}

/* Bytes [pos, pos + n) of file fi into dst, device memory of dev (note
 * [shard-host-io]), through the pinned windows: done once reader_finish
 * returns. */
static sharc_status reader_read_device(sharc_ckpt_reader *r, sharc_device *dev, int fi, int64_t pos, int64_t n,
                                       void *dst) {
    if (sharc_device_is_host(dev)) return reader_read(r, fi, pos, n, dst);
    if (!r->dev) SHARC_TRY(reader_pin(r, dev)); /* freed by reader_finish, even on failure */
    sharc_stream *s = sharc_device_stream(dev);
    const int64_t cb = r->m->chunk_bytes;
    char *out = dst;
    while (n > 0) {
        if (r->fill == r->win) { /* this window is full: record it, move to the other */
            SHARC_TRY(sharc_device_event_record(r->ev[r->cur], s));
            r->used[r->cur] = true;
            r->cur ^= 1;
            r->fill = 0;
            if (r->used[r->cur]) {
                SHARC_TRY(sharc_device_event_synchronize(r->ev[r->cur]));
                r->waits++;
            }
        }
        int64_t c = pos / cb, in = pos - c * cb, take = cb - in < n ? cb - in : n;
        if (take > r->win - r->fill) take = r->win - r->fill;
        SHARC_TRY(reader_chunk(r, fi, c));
        char *w = r->pin[r->cur] + r->fill;
        memcpy(w, r->buf + in, (size_t)take);
        SHARC_TRY(sharc_device_copy(dev, out, w, (size_t)take, SHARC_COPY_HOST_TO_DEVICE, s));
        r->fill += take;
        out += take;
        pos += take;
        n -= take;
    }
    return SHARC_OK;
}

/* ------------------------------------------------------------- writing */

void *sharc_ckpt_shard_write(void *arg) {
    sharc_ckpt_job *j = arg;
    sharc_afile af;
    j->st = sharc_afile_open(&af, j->path);
    const bool opened = j->st == SHARC_OK;
    uLong crc = crc32(0L, Z_NULL, 0), ccrc = crc;
    int64_t fill = 0, k = 0;
    static const float zeros[4096]; /* the moments of frozen units (note [frozen-params]) */
    for (int i = 0; i < j->npieces && j->st == SHARC_OK; i++) {
        const sharc_ckpt_piece *pc = &j->pieces[i];
        for (int64_t done = 0, got; done < pc->n && j->st == SHARC_OK; done += got) {
            const char *p = (const char *)pc->data;
            got = pc->n - done;
            if (pc->opt) { /* offloaded moments: read now, chunk by chunk (writes are inline then) */
                float *mv;
                j->st = sharc_adamw_moment_view(pc->opt, pc->unit, pc->kind - 1, pc->off + done, got, &mv, &got);
                if (j->st != SHARC_OK) break;
                p = (const char *)mv;
            } else if (p) p += done * 4;
            const bool zero = p == NULL;
            int64_t left = got * 4;
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

static sharc_status check_tensors(const sharc_ckpt_manifest *m, sharc_fsdp *e) {
    int n = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams; p++, n++) {
            const sharc_param_spec *ps = &s->params[p];
            const sharc_ckpt_tensor *t = sharc_ckpt_manifest_find(m, ps->name);
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
    if (m->ntensors != n) return sharc_ckpt_manifest_bad(m, "a tensor is listed twice");
    return SHARC_OK;
}

sharc_status sharc_ckpt_shard_read(sharc_ckpt_manifest *m, sharc_fsdp *e, sharc_adamw *a /* NULL: parameters only */) {
    SHARC_TRY(check_tensors(m, e));
    sharc_ckpt_reader rd = {.m = m, .file = -1, .chunk = -1, .buf = malloc((size_t)m->chunk_bytes)};
    if (!rd.buf) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    sharc_status st = SHARC_OK;
    sharc_device *dev = sharc_fsdp_shard_device(e); /* the shards' and in-memory moments' */
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        sharc_activity_phase("loading a checkpoint", u, s->name); /* progress for the watchdog */
        const sharc_segment *segs;
        int ns = sharc_fsdp_shard_segments(e, u, &segs);
        float *shard = sharc_fsdp_shard_write(e, u);
        /* moments in memory, or offloaded chunk by chunk through the
         * optimizer's cache (marked dirty, written back when it moves on) */
        const int kinds = a && sharc_adamw_has_moments(a, u) ? KINDS : 1;
        for (int k = 0; k < ns && st == SHARC_OK; k++) {
            const sharc_ckpt_tensor *t = sharc_ckpt_manifest_find(m, s->params[segs[k].param].name);
            int64_t lo0 = segs[k].param_off, hi0 = lo0 + segs[k].len;
            for (int q = 0; q < t->nr && st == SHARC_OK; q++) {
                const sharc_ckpt_range *r = &t->r[q];
                int64_t lo = r->begin > lo0 ? r->begin : lo0, hi = r->end < hi0 ? r->end : hi0;
                if (lo >= hi) continue;
                const int64_t at = segs[k].shard_off + (lo - lo0);
                for (int kind = 0; kind < kinds && st == SHARC_OK; kind++) {
                    const int64_t from = r->offset + ((int64_t)kind * (r->end - r->begin) + lo - r->begin) * 4;
                    if (kind == 0) {
                        st = reader_read_device(&rd, dev, (int)r->file, from, (hi - lo) * 4, shard + at);
                        continue;
                    }
                    for (int64_t done = 0, got; done < hi - lo && st == SHARC_OK; done += got) {
                        float *mv;
                        if ((st = sharc_adamw_moment_view(a, u, kind - 1, at + done, hi - lo - done, &mv, &got)) !=
                            SHARC_OK)
                            break;
                        sharc_adamw_moment_dirty(a);
                        st = reader_read_device(&rd, dev, (int)r->file, from + done * 4, got * 4, mv);
                    }
                }
            }
        }
    }
    st = reader_finish(&rd, st); /* the load's one wait for the device's copies */
    if (a && st == SHARC_OK) st = sharc_adamw_flush(a);
    free(rd.buf);
    return st;
}

/* This rank's part of a checkpoint, read into the live shards. */

sharc_status sharc_ckpt_shard_verify(sharc_ckpt_manifest *m, FILE *out, int64_t *total) {
    sharc_ckpt_reader rd = {.m = m, .file = -1, .chunk = -1, .buf = malloc((size_t)m->chunk_bytes)};
    sharc_status st = rd.buf ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    for (int f = 0; f < m->nfiles && st == SHARC_OK; f++) {
        uLong crc = crc32(0L, Z_NULL, 0);
        for (int64_t k = 0; k < m->files[f].nchunks && st == SHARC_OK; k++) {
            st = reader_chunk(&rd, f, k);
            int64_t lo = k * m->chunk_bytes,
                    n = m->files[f].bytes - lo < m->chunk_bytes ? m->files[f].bytes - lo : m->chunk_bytes;
            if (st == SHARC_OK) crc = crc32(crc, rd.buf, (uInt)n);
        }
        if (st == SHARC_OK && m->files[f].nchunks == 0) st = reader_open_file(&rd, f);
        if (st == SHARC_OK && (uint32_t)crc != m->files[f].crc)
            st = sharc_error(SHARC_ERR_FORMAT, "ckpt '%s/%s': whole-file crc32 %08x, the manifest says %08x", m->dir,
                             m->files[f].name, (unsigned)crc, m->files[f].crc);
        if (st == SHARC_OK && out)
            fprintf(out, "  %s: %lld bytes, crc32 %08x ok\n", m->files[f].name, (long long)m->files[f].bytes,
                    m->files[f].crc);
        if (total) *total += m->files[f].bytes;
    }
    free(rd.buf);
    return st;
}
