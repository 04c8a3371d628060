/* ckpt_impl.h (internal): the checkpointer's objects as its files share
 * them. The files, by concern (docs/ARCHITECTURE.md, "Checkpoints"):
 *
 *   ckpt.c        sharc_ckpt_*: the manager (init, save, wait, resume, tidy)
 *   manifest.c    the manifest: read and checked, built, the model it names
 *   shard_file.c  the shard files: written with their checksums, read back
 *                 verified chunk by chunk (note [ckpt-layout])
 *   writer.c      what a rank writes and the background writer (note [ckpt-async])
 *   commit.c      the directory protocol: publish, prune, leftovers (note [ckpt-commit])
 *   inspect.c     reading a checkpoint with no trainer: inspect, resolve, weights */
#ifndef SHARC_CKPT_IMPL_H
#define SHARC_CKPT_IMPL_H

#include "sharc/ckpt.h"
#include "sharc/comm.h"
#include "sharc/fsdp.h"
#include "sharc/mesh.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/train.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#define MANIFEST_NAME "manifest.json"
#define KINDS 3 /* parameter, exp_avg, exp_avg_sq */
#define PATHLEN (SHARC_CKPT_PATH_MAX + 128)

static inline bool sharc_ckpt_is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static inline bool sharc_ckpt_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* ------------------------------------------------------- manifest.c */

/* A file of the checkpoint as the manifest lists it. */
typedef struct {
    char name[128];
    int64_t bytes;
    uint32_t crc;
    int64_t nchunks;
    uint32_t *chunk_crc; /* (nchunks) */
    int fd;              /* -1 until opened */
} sharc_ckpt_file;

typedef struct {
    int64_t file, begin, end, offset;
} sharc_ckpt_range;

typedef struct {
    const char *name; /* borrowed from the JSON tree */
    int ndim;
    int64_t shape[4];
    int64_t numel;
    sharc_ckpt_range *r;
    int nr;
} sharc_ckpt_tensor;

typedef struct {
    char dir[PATHLEN];
    char path[PATHLEN + 32]; /* the manifest */
    json_object *root;
    int64_t version, step, adam_step, world_size, dp_shard, dp_replicate, chunk_bytes;
    const char *strategy;
    json_object *model, *train;
    sharc_ckpt_file *files;
    int nfiles;
    sharc_ckpt_tensor *tensors;
    int ntensors;
} sharc_ckpt_manifest;

/* ----------------------------------------------------- shard_file.c */

typedef struct {
    sharc_ckpt_manifest *m;
    unsigned char *buf; /* (chunk_bytes) the last verified chunk */
    int file;
    int64_t chunk;
} sharc_ckpt_reader;

/* ----------------------------------------------------------- ckpt.c */

typedef struct {
    int64_t gp, begin, end, offset; /* global parameter index, elements, byte offset in the file */
} sharc_ckpt_rec;

typedef struct {
    const float *data;
    int64_t n;
} sharc_ckpt_piece;

/* One rank's file: written inline or by the background thread. */
typedef struct {
    char path[PATHLEN + 64];
    sharc_ckpt_piece *pieces; /* (npieces) */
    int npieces;
    int64_t bytes, nchunks;
    uint32_t crc;
    uint32_t *chunk_crc; /* (nchunks) */
    sharc_status st;
    char err[1024];
} sharc_ckpt_job;

struct sharc_ckpt {
    sharc_trainer *t; /* borrowed */
    sharc_comm *world;
    const sharc_mesh *mesh;
    char dir[SHARC_CKPT_PATH_MAX];
    int keep;
    bool async, writer;
    int nglobal;         /* parameters over all units */
    int *gp_unit, *gp_param; /* (nglobal) */
    sharc_ckpt_rec *recs;     /* (nrecs) this rank's layout, note [ckpt-layout] */
    int nrecs;
    int64_t file_bytes;
    /* in flight (note [ckpt-async]) */
    bool pending, thread_running;
    int64_t pending_step, pending_adam_step; /* captured when the save starts */
    double t_start, t_staged;                /* when the save started, when its state was staged */
    pthread_t thread;
    sharc_ckpt_job job;
    float *stage; /* ckpt.async: (file_bytes / 4) the staged copy, kept from one save to the next (SHARC_MEM_OTHER) */
    int64_t done_step; /* last step published or loaded, -1 */
    char last[PATHLEN];
};


/* Note [agreement]: every rank gets the same verdict. */
sharc_status sharc_ckpt_agree(sharc_comm *world, sharc_status local);

/* manifest.c */
void sharc_ckpt_manifest_free(sharc_ckpt_manifest *m);
/* A SHARC_ERR_FORMAT naming the manifest and `what`. */
sharc_status sharc_ckpt_manifest_bad(const sharc_ckpt_manifest *m, const char *what);
sharc_status sharc_ckpt_manifest_get_i64(const sharc_ckpt_manifest *m, json_object *o, const char *key, int64_t *v);
sharc_status sharc_ckpt_manifest_get_str(const sharc_ckpt_manifest *m, json_object *o, const char *key, const char **v);
sharc_status sharc_ckpt_manifest_get_arr(const sharc_ckpt_manifest *m, json_object *o, const char *key, json_object **v);
/* Read and check a step directory's manifest: every field typed, every range
 * inside its file, every tensor's ranges tiling [0, numel). */
sharc_status sharc_ckpt_manifest_read(sharc_ckpt_manifest *m, const char *step_dir);
const sharc_ckpt_tensor *sharc_ckpt_manifest_find(const sharc_ckpt_manifest *m, const char *name);
/* The manifest text (rank 0), from every rank's header
 *   hdr[6 r .. 6 r + 5] = writer, shard_rank, nrecs, nchunks, bytes, crc
 * and its padded records (4 int64 each) and chunk crcs. */
char *sharc_ckpt_manifest_build(sharc_ckpt *c, int64_t step, const int64_t *hdr, const int64_t *recs, int64_t maxrec,
                                const int64_t *chunks, int64_t maxchunk);
/* `own`: mc is the checkpoint's own "config" (it must agree with "model"),
 * else this run's model. */
sharc_status sharc_ckpt_manifest_check_model(const sharc_ckpt_manifest *m, const sharc_model_config *mc, bool own);

/* shard_file.c */
/* Write the job's pieces to its file (temporary name, fsync, rename),
 * computing the whole-file and per-chunk crc32 on the way. No MPI here: this
 * runs on the background thread under ckpt.async. */
void *sharc_ckpt_shard_write(void *arg);
/* This rank's elements of every parameter (and, with an optimizer, of both
 * moments) from a read manifest into the live shards: the names and shapes
 * are checked first, then only the chunks overlapping this rank's segments
 * are read, each verified against its crc32. No communication. */
sharc_status sharc_ckpt_shard_read(sharc_ckpt_manifest *m, sharc_fsdp *e, sharc_adamw *a /* NULL: parameters only */);
/* Every chunk of every file and each file's whole crc32; `out` (may be NULL)
 * gets a line per file, *total (may be NULL) their bytes. */
sharc_status sharc_ckpt_shard_verify(sharc_ckpt_manifest *m, FILE *out, int64_t *total);

/* writer.c */
/* Fill the job for this rank's file: pieces on the live shards, or (async)
 * on a staged copy of them. */
sharc_status sharc_ckpt_job_prepare(sharc_ckpt *c, const char *tmp_dir, bool stage);
void sharc_ckpt_job_clear(sharc_ckpt_job *j);

/* commit.c */
/* Test hook: SHARC_CKPT_KILL_AT=<stage> (and optionally SHARC_CKPT_KILL_STEP=<step>)
 * ends the process at that point of a save, as a crash would. */
void sharc_ckpt_commit_kill_point(const char *stage, int64_t step);
/* "step-%08lld" exactly -> step, else -1. */
int64_t sharc_ckpt_commit_parse_step(const char *name);
void sharc_ckpt_commit_step_path(char *out, size_t n, const char *dir, int64_t step, const char *suffix);
/* Remove a directory of plain files (a checkpoint); missing is fine. */
sharc_status sharc_ckpt_commit_remove_tree(const char *dir);
/* Published checkpoints (step-N directories with a manifest), newest first. */
int sharc_ckpt_commit_list(const char *dir, int64_t **out);
/* step-N.old with a manifest and no step-N: rename it back (the first
 * half of note [ckpt-leftovers]; before a resume lists DIR, too). */
sharc_status sharc_ckpt_commit_restore(const char *dir);
sharc_status sharc_ckpt_commit_clean(const char *dir);
/* The leftovers first; then keep checkpoint `step` of DIR and the keep - 1
 * newest older ones; with `newer`, checkpoints newer than `step` go too
 * (they belong to a timeline this run replaced). step < 0: every
 * checkpoint goes. */
sharc_status sharc_ckpt_commit_prune(const char *dir, int64_t step, int keep, bool newer);
/* Rank 0: manifest, rename, latest, prune (note [ckpt-commit]). */
sharc_status sharc_ckpt_commit_publish(sharc_ckpt *c, int64_t step, const char *manifest_text);

#endif
