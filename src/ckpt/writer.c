/* writer.c: sharc_ckpt_writer_*, the writer of this rank's file at a save:
 * the pieces of the file in the order of the range plan (note
 * [ckpt-layout]), on the live shards, or under ckpt.async on a copy staged
 * in memory, written by a background thread while training goes on (note
 * [ckpt-async]). The file itself is shard_file.c's.
 *
 * Note [ckpt-pinned]. On a device whose memory is not the host's, a save
 * always stages, into pinned host memory of that device (the file's bytes,
 * allocated at the first save, kept for the next, freed with the writer at
 * the end of training): each parameter segment and moment chunk is a
 * device-to-host copy queued on the shard device's stream, asynchronous
 * because the destination is pinned, and job_prepare waits once for all of
 * them; the writer (the background thread under ckpt.async) then reads host
 * memory only. A pageable destination would make every copy a host wait
 * (113 for the tiny test model's save). The load side is in shard_file.c
 * (reader_read_device). */
#include "internal.h"
#include "sharc/alloc.h"
#include "sharc/device.h"

#include <stdlib.h>
#include <string.h>

static void writer_stage_free(sharc_ckpt_writer *w) {
    if (w->stage_dev) sharc_device_host_free(w->stage_dev, w->stage);
    else sharc_free(w->stage);
    w->stage = NULL;
    w->stage_dev = NULL;
    w->stage_bytes = 0;
}

static void job_clear(sharc_ckpt_job *j) {
    free(j->pieces);
    free(j->chunk_crc);
    memset(j, 0, sizeof *j);
}

/* Fill the job for this rank's file: pieces on the live shards, or (stage)
 * on a staged copy of them. */
static sharc_status job_prepare(sharc_ckpt_writer *w, const sharc_ckpt_plan *p, sharc_fsdp *e, sharc_adamw *a,
                                const char *path, bool stage) {
    sharc_ckpt_job *j = &w->job;
    snprintf(j->path, sizeof j->path, "%s", path);
    j->bytes = p->file_bytes;
    j->nchunks = (j->bytes + SHARC_CKPT_CHUNK_BYTES - 1) / SHARC_CKPT_CHUNK_BYTES;
    j->pieces = calloc((size_t)p->nrecs * KINDS + 1, sizeof *j->pieces);
    j->chunk_crc = calloc((size_t)j->nchunks + 1, sizeof(uint32_t));
    if (!j->pieces || !j->chunk_crc) return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    float *dst = NULL;
    /* note [ckpt-pinned]: a device's shards and moments reach the file
     * through a staged copy in pinned host memory, every device-to-host copy
     * queued on the shard device's stream and waited for once, below */
    sharc_device *dev = sharc_fsdp_shard_device(e);
    const bool host = sharc_device_is_host(dev);
    if (!host) stage = true;
    if (stage && j->bytes > 0) {
        if (w->stage && w->stage_bytes < j->bytes) writer_stage_free(w);
        if (!w->stage) {
            w->stage = host ? sharc_alloc((size_t)j->bytes, SHARC_MEM_OTHER)
                            : sharc_device_host_alloc(dev, (size_t)j->bytes, SHARC_MEM_OTHER);
            w->stage_dev = w->stage && !host ? dev : NULL;
            w->stage_bytes = w->stage ? j->bytes : 0;
        }
        dst = w->stage;
        if (!dst)
            return sharc_error(SHARC_ERR_NOMEM,
                               host ? "ckpt: cannot stage %lld bytes for ckpt.async (turn it off to save "
                                      "without a copy)"
                                    : "ckpt: cannot pin %lld bytes of host memory to stage the device's shards",
                               (long long)j->bytes);
    }
    int r = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_segment *segs;
        int ns = sharc_fsdp_shard_segments(e, u, &segs);
        /* offloaded moments are read here into the staged copy, chunk by
         * chunk, or else when the file is written (the pieces name them); a
         * frozen unit has no moments: zeros are written in their place (data
         * NULL) */
        const bool moments = sharc_adamw_has_moments(a, u);
        const bool deferred = !dst && sharc_adamw_offloaded(a) && moments;
        for (int k = 0; k < ns; k++)
            for (int kind = 0; kind < KINDS && !segs[k].tp_copy; kind++) {
                const int64_t off = segs[k].shard_off, len = segs[k].len;
                if (kind > 0 && deferred) {
                    j->pieces[r++] = (sharc_ckpt_piece){NULL, len, a, u, kind, off};
                    continue;
                }
                const float *q = kind == 0 ? sharc_fsdp_shard_params(e, u) + off : NULL;
                if (kind > 0 && moments && !dst) { /* in memory: the live array */
                    float *mv;
                    int64_t got;
                    SHARC_TRY(sharc_adamw_moment_view(a, u, kind - 1, off, len, &mv, &got));
                    q = mv;
                }
                if (dst) {
                    if (kind > 0 && moments)
                        for (int64_t done = 0, got; done < len; done += got) { /* chunk by chunk */
                            float *mv;
                            SHARC_TRY(sharc_adamw_moment_view(a, u, kind - 1, off + done, len - done, &mv, &got));
                            if (host) memcpy(dst + done, mv, (size_t)got * sizeof(float));
                            else /* queued into pinned memory: no host wait */
                                SHARC_TRY(sharc_device_copy(dev, dst + done, mv, (size_t)got * sizeof(float),
                                                            SHARC_COPY_DEVICE_TO_HOST, NULL));
                        }
                    else if (q && !host) SHARC_TRY(sharc_fsdp_shard_queue_out(e, u, off, dst, len));
                    else if (q) memcpy(dst, q, (size_t)len * sizeof(float));
                    else memset(dst, 0, (size_t)len * sizeof(float));
                    q = dst;
                    dst += len;
                }
                j->pieces[r++] = (sharc_ckpt_piece){.data = q, .n = len};
            }
    }
    j->npieces = r;
    /* the one host wait of a save on a device: every copy above was queued
     * on this stream (sharc_fsdp_shard_queue_out's, and the moments' NULL) */
    return host ? SHARC_OK : sharc_device_synchronize(sharc_device_stream(dev));
}

void sharc_ckpt_writer_start(sharc_ckpt_writer *w, const sharc_ckpt_plan *p, sharc_fsdp *e, sharc_adamw *a,
                             const char *path, bool async) {
    sharc_ckpt_writer_join(w);
    sharc_ckpt_job *j = &w->job;
    job_clear(j);
    j->st = job_prepare(w, p, e, a, path, async);
    if (j->st != SHARC_OK) {
        snprintf(j->err, sizeof j->err, "%s", sharc_last_error());
    } else if (async) {
        if (pthread_create(&w->thread, NULL, sharc_ckpt_shard_write, j) == 0) w->running = true;
        else sharc_ckpt_shard_write(j);
    } else {
        sharc_ckpt_shard_write(j);
    }
}

void sharc_ckpt_writer_join(sharc_ckpt_writer *w) {
    if (!w->running) return;
    pthread_join(w->thread, NULL);
    w->running = false;
}

void sharc_ckpt_writer_free(sharc_ckpt_writer *w) {
    sharc_ckpt_writer_join(w);
    job_clear(&w->job);
    writer_stage_free(w);
}
