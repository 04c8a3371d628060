/* internal.h (src/ckpt only): the checkpointer's objects as its files
 * share them, and each file's functions. The files, by concern
 * (docs/ARCHITECTURE.md, "Checkpoints"):
 *
 *   ckpt.c        sharc_ckpt_*: the manager (init, save, wait, resume, tidy)
 *   plan.c        the range plan: which elements this rank's file holds where (note [ckpt-layout])
 *   writer.c      the writer of this rank's file, in the background under ckpt.async (note [ckpt-async])
 *   shard_file.c  the shard files: written with their checksums, read back verified chunk by chunk
 *   manifest.c    the manifest: read and checked, built, the model it names
 *   commit.c      the directory protocol: begin, publish, prune, leftovers (note [ckpt-commit])
 *   inspect.c     a checkpoint with no trainer: inspect, resolve, weights for export/generate/eval
 *
 * Nothing here knows the trainer: the manager is handed sharc_ckpt_state. */
#ifndef SHARC_CKPT_INTERNAL_H
#define SHARC_CKPT_INTERNAL_H

#include "sharc/ckpt.h"
#include "sharc/comm.h"
#include "sharc/fsdp.h"
#include "sharc/mesh.h"
#include "sharc/model.h"
#include "sharc/optim.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#define MANIFEST_NAME "manifest.json"
#define KINDS         3 /* parameter, exp_avg, exp_avg_sq */
#define PATHLEN       (SHARC_CKPT_PATH_MAX + 128)

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

/* Bytes of each of the two pinned host buffers through which a load reaches
 * a device's memory (note [ckpt-pinned] in writer.c). */
#define SHARC_CKPT_PIN_WINDOW ((int64_t)4 << 20)

typedef struct {
    sharc_ckpt_manifest *m;
    unsigned char *buf; /* (chunk_bytes) the last verified chunk */
    int file;
    int64_t chunk;
    /* a device's load: two pinned windows, filled in turn; ev[i] marks the
     * copies out of pin[i] queued so far on dev's stream */
    sharc_device *dev;
    char *pin[2];
    int64_t win; /* their bytes (SHARC_CKPT_PIN_WINDOW) */
    struct sharc_event *ev[2];
    bool used[2]; /* copies from pin[i] were queued (ev[i] recorded when it was left) */
    int cur;
    int64_t fill; /* bytes of pin[cur] taken */
    int waits;    /* host waits for a window to come free */
} sharc_ckpt_reader;

/* ----------------------------------------------------------- plan.c */

/* One range of this rank's file (note [ckpt-layout]). */
typedef struct {
    int64_t gp;         /* global parameter index: units in order, their parameters in order */
    int64_t begin, end; /* the parameter's elements [begin, end) */
    int64_t offset;     /* byte offset in the file of the parameter's elements; both moments follow */
} sharc_ckpt_rec;

/* The range plan: a pure function of the engine's unit specs and this
 * rank's shard segments, the same at every save. */
typedef struct {
    int nglobal;             /* parameters over all units */
    int *gp_unit, *gp_param; /* (nglobal) each global parameter's unit and index in it */
    sharc_ckpt_rec *recs;    /* (nrecs) this rank's ranges, in unit and segment order */
    int nrecs;
    int64_t file_bytes; /* this rank's file: KINDS x 4 bytes per element of its segments */
} sharc_ckpt_plan;

/* ---------------------------------------------------------- writer.c */

typedef struct {
    const float *data; /* NULL with opt NULL: zeros (a frozen unit's moments) */
    int64_t n;
    /* offloaded moments, written without a staged copy: read when written,
     * kind (1 exp_avg, 2 exp_avg_sq) of unit's, from element off (note
     * [optim-offload] in src/optim/adamw.c) */
    sharc_adamw *opt;
    int unit, kind;
    int64_t off;
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

/* The writer of this rank's file (note [ckpt-async]). */
typedef struct {
    sharc_ckpt_job job;
    bool running; /* the background thread holds `job` */
    pthread_t thread;
    float *stage; /* ckpt.async: (file_bytes / 4) the staged copy, kept from one save to the next (SHARC_MEM_OTHER) */
    int64_t stage_bytes;     /* its size */
    sharc_device *stage_dev; /* a device's pinned host memory (note [ckpt-pinned]); NULL: sharc_alloc */
} sharc_ckpt_writer;

/* --------------------------------------------------------- manifest.c */

/* Every rank's part of a save, all-gathered for the manifest (ckpt.c). */
typedef struct {
    int R;               /* ranks in the world */
    const int64_t *hdr;  /* (R, 6) writer, shard_rank, nrecs, nchunks, bytes, crc */
    const int64_t *recs; /* (R, maxrec, 4) gp, begin, end, offset */
    int64_t maxrec;
    const int64_t *chunks; /* (R, maxchunk) chunk crcs */
    int64_t maxchunk;
} sharc_ckpt_written;

/* ----------------------------------------------------------- ckpt.c */

struct sharc_ckpt {
    sharc_ckpt_state s; /* borrowed */
    char dir[SHARC_CKPT_PATH_MAX];
    int keep;
    bool async, writes; /* ckpt.async; this rank writes a file (replicate group 0) */
    sharc_ckpt_plan plan;
    sharc_ckpt_writer w;
    /* in flight (note [ckpt-async]) */
    bool pending;
    int64_t pending_step, pending_adam_step; /* captured when the save starts */
    double t_start, t_staged;                /* when the save started, when its state was staged */
    int64_t done_step;                       /* last step published or loaded, -1 */
    char last[PATHLEN];
    /* note [ckpt-node-local] (ckpt.c) */
    sharc_comm *node;      /* this rank's host (MPI's node), owned */
    int host_index, hosts; /* the host's place among the hosts (by lowest rank), their number */
    bool local_dir;        /* this rank leads a host whose ckpt.dir is not rank 0's (this save) */
    bool any_local;        /* some host's is not (this save) */
};

/* manifest.c */
void sharc_ckpt_manifest_free(sharc_ckpt_manifest *m);
/* A SHARC_ERR_FORMAT naming the manifest and `what`. */
sharc_status sharc_ckpt_manifest_bad(const sharc_ckpt_manifest *m, const char *what);
/* The manifest's "frozen" list against the parameters this engine freezes
 * (note [frozen-params]): SHARC_ERR_INVALID naming the first that differs. */
sharc_status sharc_ckpt_manifest_check_frozen(const sharc_ckpt_manifest *m, sharc_fsdp *e);
sharc_status sharc_ckpt_manifest_get_i64(const sharc_ckpt_manifest *m, json_object *o, const char *key, int64_t *v);
sharc_status sharc_ckpt_manifest_get_str(const sharc_ckpt_manifest *m, json_object *o, const char *key, const char **v);
sharc_status sharc_ckpt_manifest_get_arr(const sharc_ckpt_manifest *m, json_object *o, const char *key,
                                         json_object **v);
/* Read and check a step directory's manifest: every field typed, every range
 * inside its file, every tensor's ranges tiling [0, numel). */
sharc_status sharc_ckpt_manifest_read(sharc_ckpt_manifest *m, const char *step_dir);
const sharc_ckpt_tensor *sharc_ckpt_manifest_find(const sharc_ckpt_manifest *m, const char *name);
/* The manifest text (rank 0) of the save of `step` (AdamW's `adam_step`)
 * of state `s` laid out by plan `p`, from what every rank wrote. */
char *sharc_ckpt_manifest_build(const sharc_ckpt_state *s, const sharc_ckpt_plan *p, int64_t step, int64_t adam_step,
                                const sharc_ckpt_written *w);
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

/* plan.c */
sharc_status sharc_ckpt_plan_init(sharc_ckpt_plan *p, const struct sharc_fsdp *e);
void sharc_ckpt_plan_free(sharc_ckpt_plan *p);

/* writer.c */
/* Write this rank's file `path` (plan `p`, shards of `e`, moments of `a`):
 * at once, or with `async` from a copy staged in memory by a background
 * thread. A failure is kept in the job (st, err) for sharc_ckpt_writer_join. */
void sharc_ckpt_writer_start(sharc_ckpt_writer *w, const sharc_ckpt_plan *p, struct sharc_fsdp *e,
                             struct sharc_adamw *a, const char *path, bool async);
/* Wait for the write; the job holds its outcome until the next start. */
void sharc_ckpt_writer_join(sharc_ckpt_writer *w);
void sharc_ckpt_writer_free(sharc_ckpt_writer *w);

/* commit.c */
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
/* Rank 0, before the writers: DIR and an empty DIR/step-N.tmp (a stale one removed). */
sharc_status sharc_ckpt_commit_begin(const char *dir, int64_t step);
/* Rank 0, after every writer: manifest, rename, latest, prune to `keep`
 * (note [ckpt-commit]). */
sharc_status sharc_ckpt_commit_publish(const char *dir, int64_t step, int keep, const char *manifest_text);

#endif
