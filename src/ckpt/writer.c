/* writer.c: sharc_ckpt_job_*, what this rank writes at a save: the pieces
 * of its file in note [ckpt-layout]'s order, on the live shards, or under
 * ckpt.async on a copy staged in memory so training goes on while the
 * background thread writes (note [ckpt-async]). */
#include "ckpt_impl.h"
#include "sharc/alloc.h"

#include <stdlib.h>
#include <string.h>

void sharc_ckpt_job_clear(sharc_ckpt_job *j) {
    free(j->pieces);
    free(j->chunk_crc);
    memset(j, 0, sizeof *j);
}

/* Fill the job for this rank's file: pieces on the live shards, or (async)
 * on a staged copy of them. */
sharc_status sharc_ckpt_job_prepare(sharc_ckpt *c, const char *tmp_dir, bool stage) {
    sharc_ckpt_job *j = &c->job;
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
        const float *src[KINDS] = {sharc_fsdp_shard_params(e, u), sharc_adamw_m(a, u), sharc_adamw_v(a, u)};
        for (int k = 0; k < ns; k++)
            for (int kind = 0; kind < KINDS; kind++) {
                const float *p = src[kind] + segs[k].shard_off;
                if (dst) {
                    memcpy(dst, p, (size_t)segs[k].len * sizeof(float));
                    p = dst;
                    dst += segs[k].len;
                }
                j->pieces[r++] = (sharc_ckpt_piece){p, segs[k].len};
            }
    }
    j->npieces = r;
    return SHARC_OK;
}
