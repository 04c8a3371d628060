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
} sharc_optim_config;

void sharc_optim_config_default(sharc_optim_config *c);

/* Learning rate at 0-based step `step` of `max_steps`. */
float sharc_lr_at(const sharc_optim_config *c, int64_t step, int64_t max_steps);

/* Clip factor for a global gradient norm (torch.nn.utils.clip_grad_norm_):
 * min(1, max_norm / (norm + 1e-6)), or 1 when clipping is off. */
float sharc_clip_coef(const sharc_optim_config *c, double grad_norm);

typedef struct sharc_adamw sharc_adamw;

/* Moments for every shard of the engine (SHARC_MEM_OPTIM), or with
 * c->offload_dir set one file in that directory (created, reserved and
 * unlinked here, so it never outlives the process) and a buffer for the
 * largest unit's two moments (SHARC_MEM_OPTIM). A missing or unwritable
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
 * the moments are offloaded (then use sharc_adamw_unit_load). */
float *sharc_adamw_m(sharc_adamw *a, int unit);
float *sharc_adamw_v(sharc_adamw *a, int unit);

/* Whether the moments live in a file (optim.offload_dir). */
bool sharc_adamw_offloaded(const sharc_adamw *a);
/* Whether unit u has moments (false: all its parameters are frozen). */
bool sharc_adamw_has_moments(const sharc_adamw *a, int unit);
/* Unit u's moments in memory, for reading or changing: the live arrays, or
 * when offloaded the buffer, filled from the file (its crc32 checked) unless
 * it holds u already. Valid until the next load of another unit or step.
 * NULL pointers for a unit without moments. */
sharc_status sharc_adamw_unit_load(sharc_adamw *a, int unit, float **m, float **v);
/* Write back what was changed through unit_load's pointers (offloaded:
 * pwrite to the file; in memory: nothing to do). */
sharc_status sharc_adamw_unit_store(sharc_adamw *a, int unit);

typedef struct {
    int64_t read_bytes, write_bytes; /* moved between the file and the buffer */
    double read_s, write_s;          /* wall time in pread / pwrite (and their checksums) */
    int64_t file_bytes;              /* the file's size: both moments of every trainable unit */
    int64_t buffer_bytes;            /* the resident buffer */
} sharc_adamw_offload_stats;
/* Offload counters since init (all 0 in memory). */
void sharc_adamw_offload_stats_get(const sharc_adamw *a, sharc_adamw_offload_stats *s);

#ifdef __cplusplus
}
#endif
#endif
