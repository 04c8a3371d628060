/* sharc/optim.h: AdamW on parameter shards, its moments in memory or
 * offloaded to a file (note [optim-offload] in src/optim/adamw.c), the
 * learning-rate schedule and global-norm gradient clipping. */
#ifndef SHARC_OPTIM_H
#define SHARC_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/fsdp.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_OPTIM_PATH_MAX 1024 /* = SHARC_PATH_MAX of sharc/config.h */

typedef enum { SHARC_LR_COSINE = 0, SHARC_LR_LINEAR, SHARC_LR_CONSTANT } sharc_lr_decay;

typedef struct {
    float lr;           /* peak learning rate */
    float min_lr_ratio; /* decay floor as a fraction of lr */
    int warmup_steps;   /* linear warmup from lr/warmup to lr */
    int decay_steps;    /* steps from the end of warmup to the floor (0: to max_steps) */
    sharc_lr_decay decay;
    float beta1, beta2, eps;
    float weight_decay;  /* decoupled, on parameters with spec.decay (2-D+) */
    float max_grad_norm; /* clip the global norm to this; 0 disables */
    /* optim.offload_dir: a directory for this rank's file of AdamW moments
     * ("" = moments in memory; note [optim-offload]) */
    char offload_dir[SHARC_OPTIM_PATH_MAX];
    /* optim.offload_sub_group_size: elements per chunk streamed through the
     * step (DeepSpeed's sub_group_size; rounded up to 1024); 0: the default */
    int64_t offload_chunk_numel;
    /* optim.offload_pipeline: read chunk k+1 and write k-1 while k is
     * updated (three chunk buffers), else one buffer, synchronous */
    bool offload_pipeline;
} sharc_optim_config;

#define SHARC_OFFLOAD_CHUNK_DEFAULT (8 << 20) /* elements: 64 MiB of both moments */
#define SHARC_OFFLOAD_CHUNK_MAX     (1 << 27) /* elements: 1 GiB of both moments */
/* The elements per chunk for c (rounded and bounded as the optimizer does)
 * and the chunk buffers it holds, for the memory plan. */
int64_t sharc_offload_chunk_numel(const sharc_optim_config *c);
int sharc_offload_buffers(const sharc_optim_config *c);

void sharc_optim_config_default(sharc_optim_config *c);

/* Learning rate at 0-based step `step` of `max_steps`. */
float sharc_lr_at(const sharc_optim_config *c, int64_t step, int64_t max_steps);

/* Clip factor for a global gradient norm (torch.nn.utils.clip_grad_norm_):
 * min(1, max_norm / (norm + 1e-6)), or 1 when clipping is off. */
float sharc_clip_coef(const sharc_optim_config *c, double grad_norm);

typedef struct sharc_adamw sharc_adamw;

/* Moments for every shard of the engine (SHARC_MEM_OPTIM), or with
 * c->offload_dir set one file in that directory (created, reserved and
 * unlinked here, so it never outlives the process) and the chunk buffers
 * (sharc_offload_buffers of both moments of one chunk, SHARC_MEM_OPTIM). A missing or unwritable
 * directory is SHARC_ERR_INVALID, a disk without room SHARC_ERR_IO. */
sharc_status sharc_adamw_init(sharc_adamw **out, sharc_fsdp *e, const sharc_optim_config *c);
void sharc_adamw_free(sharc_adamw *a);
/* One step on every shard with gradients multiplied by grad_scale first
 * (the clip factor), in torch 1.13's AdamW order:
 *   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). */
sharc_status sharc_adamw_step(sharc_adamw *a, sharc_fsdp *e, float lr, float grad_scale);
int64_t sharc_adamw_steps(const sharc_adamw *a);
void sharc_adamw_set_steps(sharc_adamw *a, int64_t t);
/* First and second moments of a unit's shard (numel_shard floats each);
 * NULL for a unit whose parameters are all frozen, and for every unit when
 * the moments are offloaded (then use sharc_adamw_moment_view). */
float *sharc_adamw_m(sharc_adamw *a, int unit);
float *sharc_adamw_v(sharc_adamw *a, int unit);

/* Whether the moments live in a file (optim.offload_dir). */
bool sharc_adamw_offloaded(const sharc_adamw *a);
/* Whether unit u has moments (false: all its parameters are frozen). */
bool sharc_adamw_has_moments(const sharc_adamw *a, int unit);
/* Elements [off, off + *n) of moment `kind` (0: exp_avg, 1: exp_avg_sq)
 * of unit u's shard, in memory, at *p: *n is at most `want`, and less where
 * an offloaded chunk ends (call again for the rest). In memory the live
 * array; offloaded the cache buffer, which holds one chunk (both moments),
 * read from the file (its crc32 checked) unless it holds that chunk
 * already, after the chunk it held is written back if marked dirty. Valid
 * until the next view of another chunk or the next step. */
sharc_status sharc_adamw_moment_view(sharc_adamw *a, int u, int kind, int64_t off, int64_t want, float **p, int64_t *n);
/* The chunk of the last view was changed through its pointer. */
void sharc_adamw_moment_dirty(sharc_adamw *a);
/* Write a dirty chunk back (offloaded; in memory nothing to do). */
sharc_status sharc_adamw_flush(sharc_adamw *a);

typedef struct {
    int64_t read_bytes, write_bytes;  /* moved between the file and the buffers */
    double read_wait_s, write_wait_s; /* time in the calls that start and wait for reads / writes */
    double step_s;                    /* time in the optimizer's streaming passes (sharc_adamw_step) */
    int64_t file_bytes;               /* the file's size: both moments of every trainable unit */
    int64_t buffer_bytes;             /* the resident chunk buffers */
    int64_t chunk_numel;              /* elements per chunk */
    const char *backend;              /* "uring" or "pread" (NULL in memory) */
} sharc_adamw_offload_stats;
/* Offload counters since init (all 0 in memory). */
void sharc_adamw_offload_stats_get(const sharc_adamw *a, sharc_adamw_offload_stats *s);

#ifdef __cplusplus
}
#endif
#endif
