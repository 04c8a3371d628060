/* sharc/ckpt.h: sharded training checkpoints that survive crashes and are
 * resharded on load (docs/ARCHITECTURE.md, "Checkpoints").
 *
 * A checkpoint is a directory DIR/step-NNNNNNNN holding one data file per
 * shard of the mesh (written by every rank of replicate group 0, in
 * parallel) and a manifest.json that maps every parameter's global element
 * ranges to byte ranges of those files: a topology-free index, so any world
 * size and sharding strategy reads back exactly the elements it holds.
 * Each range stores the parameter, AdamW's exp_avg and exp_avg_sq (fp32),
 * back to back. The step, the AdamW step count and the data position (the
 * sampler is a pure function of (data.seed, step), note [sampler-rule]) are
 * the whole training state; there is no other RNG state.
 *
 * The checkpointer is handed the state it saves and restores explicitly
 * (sharc_ckpt_state: the engine's shards, the optimizer's moments, the mesh,
 * the run configuration); the step is an argument of a save and a result of
 * a resume, so the caller owns its step counter. Every call below is
 * collective over the world and agrees on failure (note [agreement] in
 * docs/ARCHITECTURE.md): every rank returns the same verdict, never a hang. */
#ifndef SHARC_CKPT_H
#define SHARC_CKPT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sharc/comm.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_CKPT_PATH_MAX       1024 /* = SHARC_PATH_MAX: the config table writes strings of this size */
#define SHARC_CKPT_FORMAT_VERSION 1
#define SHARC_CKPT_CHUNK_BYTES    (1 << 20) /* each file's crc32 is also kept per chunk of this size */

typedef struct {
    char dir[SHARC_CKPT_PATH_MAX];    /* "" = train.out_dir/checkpoints */
    int every;                        /* steps between saves; 0 = only at the end */
    int keep;                         /* newest checkpoints kept (>= 1) */
    bool async;                       /* write in a background thread from a staged copy */
    char resume[SHARC_CKPT_PATH_MAX]; /* "none", "auto" or a checkpoint path */
} sharc_ckpt_config;

struct sharc_config;
struct sharc_fsdp;
struct sharc_adamw;
struct sharc_mesh;
typedef struct sharc_ckpt sharc_ckpt;

/* What a checkpoint holds and where it comes from, each borrowed from its
 * owner for the checkpointer's whole life. */
typedef struct {
    sharc_comm *world;              /* every call is collective over it */
    const struct sharc_mesh *mesh;  /* which ranks write (replicate group 0), the shard files */
    struct sharc_fsdp *engine;      /* the parameter shards, read at a save, written at a resume */
    struct sharc_adamw *optim;      /* both moments and AdamW's step count, likewise */
    const struct sharc_config *cfg; /* ckpt.*, train.out_dir, the model; recorded in the manifest */
} sharc_ckpt_state;

/* A checkpointer over `state` (copied; what it points to must outlive the
 * checkpointer), the directory resolved from ckpt.dir or train.out_dir.
 * Collective. */
sharc_status sharc_ckpt_init(sharc_ckpt **out, const sharc_ckpt_state *state);
/* Joins a background write if one is running, without publishing it. */
void sharc_ckpt_free(sharc_ckpt *c);

/* "none" (or ""): nothing. "auto": the newest checkpoint in the directory
 * that loads (a newer one that fails its checks is reported and skipped);
 * none there is not an error. Anything else: a step directory, or a
 * checkpoint directory whose newest checkpoint is taken; failure is an
 * error. A load fills the parameter shards, both moments and AdamW's step
 * count; *loaded_step is the step resumed from (the caller's step counter
 * continues from it), or -1 when nothing was loaded. */
sharc_status sharc_ckpt_resume(sharc_ckpt *c, const char *what, int64_t *loaded_step);
/* Save the state as of `step` (optimizer steps done): finishes an in-flight
 * save first; with ckpt.async returns once the state is staged and the
 * files are being written. A step already saved or loaded is not written
 * again. */
sharc_status sharc_ckpt_save(sharc_ckpt *c, int64_t step);
/* Wait for an in-flight save and publish it (call before exit). */
sharc_status sharc_ckpt_wait(sharc_ckpt *c);
/* The path of the last published or loaded checkpoint ("" if none). */
const char *sharc_ckpt_last_path(const sharc_ckpt *c);
/* The checkpoint directory (ckpt.dir, or train.out_dir/checkpoints). */
const char *sharc_ckpt_dir(const sharc_ckpt *c);
/* Before a run writes its checkpoint directory (one rank, no communication):
 * remove what crashed saves and prunes left (note [ckpt-leftovers] in
 * src/ckpt/commit.c) and, when a checkpoint was loaded, the older checkpoints
 * beyond ckpt.keep. Newer ones are left for the first save to replace. */
sharc_status sharc_ckpt_tidy(sharc_ckpt *c);

/* No checkpointer, no communication: the published checkpoints in `dir` (0 when
 * none or no such directory); *newest (may be NULL) the newest step or -1. */
int sharc_ckpt_count(const char *dir, int64_t *newest);
/* Remove every checkpoint in `dir`, `latest` and the leftovers, each
 * checkpoint renamed to step-N.deleting first (train.overwrite_output_dir). */
sharc_status sharc_ckpt_remove_all(const char *dir);

/* Describe a checkpoint (a step directory or a checkpoint directory) and
 * verify every file's checksums. One process, no trainer. */
sharc_status sharc_ckpt_inspect(const char *path, FILE *out);

/* Reading a checkpoint's weights with no trainer (sharc export, generate):
 * one process, no communication. */
/* `path` is a step directory (it has a manifest.json: returned as is; the
 * load checks what it reads) or a checkpoint directory, of which the newest
 * step-N that passes every check (manifest and every checksum, the rule of
 * ckpt.resume=auto: `latest` is not trusted; a failing newer one is warned
 * about and skipped) is taken. Anything else is an error naming the path. */
sharc_status sharc_ckpt_resolve(const char *path, char *step_dir, size_t n);
/* The run configuration stored in a step directory's manifest, on top of
 * the defaults, validated (and its model checked against the manifest's). */
sharc_status sharc_ckpt_read_config(const char *step_dir, struct sharc_config *cfg);
/* Fill this rank's parameter shards (not the moments) from a step
 * directory: every parameter of `e` must be there with its shape and every
 * tensor there must be a parameter of `e`; only the chunks overlapping this
 * rank's segments are read, each checked against its crc32. Marks the
 * parameters updated whatever the outcome. On many ranks the caller agrees
 * on the outcome (note [agreement]). */
sharc_status sharc_ckpt_load_params(struct sharc_fsdp *e, const char *step_dir);

/* Where inference reads weights from, given ARG: a weights file (as is); a
 * run directory's model.safetensors, or without one its checkpoints/; a
 * checkpoint directory or a step directory (sharc_ckpt_resolve). *is_ckpt
 * says whether `path` is a checkpoint step directory (read it with
 * sharc_ckpt_read_config / sharc_ckpt_load_params) or a weights file. */
sharc_status sharc_ckpt_find_weights(const char *arg, char *path, size_t n, bool *is_ckpt);

#ifdef __cplusplus
}
#endif
#endif
