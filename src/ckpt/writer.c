/* writer.c: sharc_ckpt_writer_*, the writer of this rank's file at a save:
 * the pieces of the file in the order of the range plan (note
 * [ckpt-layout]), on the live shards, or under ckpt.async on a copy staged
 * in memory, written by a background thread while training goes on (note
 * [ckpt-async]). The file itself is shard_file.c's. */
#include "internal.h"
#include "sharc/alloc.h"

#include <stdlib.h>
#include <string.h>

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
    if (stage && j->bytes > 0) {
        if (!w->stage) w->stage = sharc_alloc((size_t)j->bytes, SHARC_MEM_OTHER);
        dst = w->stage;
        if (!dst)
            return sharc_error(SHARC_ERR_NOMEM,
                               "ckpt: cannot stage %lld bytes for ckpt.async (turn it off to save "
                               "without a copy)",
                               (long long)j->bytes);
    }
    int r = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_segment *segs;
        int ns = sharc_fsdp_shard_segments(e, u, &segs);
        /* offloaded moments are read here into the staged copy, or else when
         * the file is written (the pieces name them); a frozen unit has no
         * moments: zeros are written in their place (data NULL) */
        const bool deferred = !dst && sharc_adamw_offloaded(a) && sharc_adamw_has_moments(a, u);
        float *m = NULL, *v = NULL;
        if (!deferred) SHARC_TRY(sharc_adamw_unit_load(a, u, &m, &v));
        const float *src[KINDS] = {sharc_fsdp_shard_params(e, u), m, v};
        for (int k = 0; k < ns; k++)
            for (int kind = 0; kind < KINDS && !segs[k].tp_copy; kind++) {
                if (deferred && kind > 0) {
                    j->pieces[r++] = (sharc_ckpt_piece){NULL, segs[k].len, a, u, kind, segs[k].shard_off};
                    continue;
                }
                const float *q = src[kind] ? src[kind] + segs[k].shard_off : NULL;
                if (dst) {
                    if (q) memcpy(dst, q, (size_t)segs[k].len * sizeof(float));
                    else memset(dst, 0, (size_t)segs[k].len * sizeof(float));
                    q = dst;
                    dst += segs[k].len;
                }
                j->pieces[r++] = (sharc_ckpt_piece){.data = q, .n = segs[k].len};
            }
    }
    j->npieces = r;
    return SHARC_OK;
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
    sharc_free(w->stage);
    w->stage = NULL;
}
