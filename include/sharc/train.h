/* sharc/train.h: the training loop. A step reads like torchtitan's:
 *
 *   zero grads; for each micro-batch: forward + backward (loss scaled by
 *   1 / valid targets of the global batch); global grad norm; clip factor;
 *   lr from the schedule; AdamW on the shards.
 */
#ifndef SHARC_TRAIN_H
#define SHARC_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/alloc.h"
#include "sharc/ckpt.h"
#include "sharc/comm.h"
#include "sharc/config.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t step; /* steps completed, counting this one */
    double loss;  /* mean over the valid targets of the global batch */
    float lr;
    double grad_norm;     /* before clipping */
    int64_t tokens;       /* input tokens of the global batch */
    int64_t valid_tokens; /* unmasked targets */
    double step_s;
    double tokens_per_s;
    double tflops; /* achieved model TFLOP/s (sharc_model_flops_per_token) */
    double forward_backward_s, optimizer_s;
    double comm_wait_s;    /* time the step waited inside the engine's collectives */
    sharc_comm_stats comm; /* this rank's collectives during the step, all groups */
    sharc_mem_stats mem;   /* this rank's memory: current and peak of the step */
    int64_t gathered_peak;
    int64_t unit_gathers, comm_stream_waits; /* the engine's (sharc_fsdp_stats: gathers, comm_waits) */
    int64_t moe_idle_experts; /* note [moe-units]: (layer, expert) pairs with no token, over the micro-batches */
    int64_t moe_idle_bytes;   /* the parameter bytes gathered for them (fsdp.param_dtype) */
    /* note [optim-offload]: the optimizer's file traffic this step, the time it
     * streamed and the part of it blocked on the disk (0 in memory) */
    int64_t offload_read_bytes, offload_write_bytes;
    double offload_s, offload_wait_s;
    bool skipped; /* non-finite loss or grad norm (agreed): no update (note [bad-steps] in trainer.c) */
    /* this rank alone (sharc/telemetry.h aggregates them over the ranks) */
    double forward_s, backward_s; /* split of forward_backward_s (sharc_model_timing) */
    double local_loss;            /* mean loss over this rank's valid targets (NAN if none) */
    int64_t local_tokens;         /* input tokens this rank processed */
    double cpu_s;                 /* this process's CPU time in the step / its threads: the step
                                     time had the rank had its cores to itself (no preemption) */
} sharc_step_stats;

/* ------------------------------------------------------------- one step
 *
 * The step after its batch is assembled (src/train/step.c): count the valid
 * targets over the ranks, zero the gradients, forward + backward per
 * micro-batch at the loss scale of note [loss-normalization], finish the
 * gradients, the global norm, the lr from the schedule, AdamW with the clip
 * factor unless the step is bad (note [bad-steps]). sharc_trainer_step
 * assembles the batch from its sampler and calls it; the PyTorch parity test
 * and bench/step call it with batches of their own, so they run exactly
 * what the trainer runs. */
typedef struct {
    sharc_model *model;
    sharc_fsdp *engine;
    struct sharc_adamw *opt;
    const sharc_optim_config *optim; /* the lr schedule and the clip norm (the config AdamW was built with) */
    sharc_comm *world;               /* the valid targets are summed over it; NULL: one process */
    int64_t max_steps;               /* the schedule's length (train.max_steps) */
    int loss_normalization;          /* train.loss_normalization: 0 global_tokens, 1 micro_batch */
    int tp;                          /* mesh.tp: its ranks count the same targets (0 means 1) */
    int data_streams;                /* ranks / (sp x tp): micro_batch averages A x this means (0 means 1) */
} sharc_train_step_ctx;

typedef struct {
    int grad_accum;                  /* A micro-batches */
    int64_t micro_tokens;            /* this rank's tokens of one micro-batch: B x T / sp */
    const int32_t *inputs, *targets; /* (A, micro_tokens); a target < 0 is masked */
    const int32_t *positions;        /* data.packing: (A, positions_stride) whole rows' positions; else NULL */
    int64_t positions_stride;        /* B x T */
    const int64_t *micro_valid;      /* micro_batch only: (A) valid targets of each micro-batch of this data stream,
                                         whole sequences before an sp split; NULL: counted from targets (sp = 1) */
} sharc_train_batch;

typedef struct {
    double loss;          /* as sharc_step_stats.loss */
    float lr;             /* the schedule's lr at this step (applied unless skipped) */
    double grad_norm;     /* global, before clipping */
    int64_t valid_tokens; /* unmasked targets of the global batch */
    bool skipped;         /* note [bad-steps]: no AdamW update */
    double local_loss;    /* mean over this rank's valid targets (NAN if none) */
    /* seconds: zero_grad_s, then forward_backward_s (the micro-batches and
     * finishing the gradients), then optimizer_s (the norm, which is clip_s,
     * and AdamW) */
    double zero_grad_s, forward_backward_s, optimizer_s, clip_s;
} sharc_train_step_result;

/* One step over a batch; `step` counts the steps done before it (the lr
 * schedule's index; fault sites see step + 1). Collective over ctx->world
 * and the engine's groups. */
sharc_status sharc_train_step_run(const sharc_train_step_ctx *ctx, const sharc_train_batch *batch, int64_t step,
                                  sharc_train_step_result *out);

typedef struct sharc_trainer sharc_trainer;

/* Build model, engine, optimizer and data from a validated config over the
 * ranks of `world` (NULL: one process); the parameters are initialised from
 * train.seed. Collective; a failure on any rank fails every rank (note
 * [agreement] in trainer.c). */
sharc_status sharc_trainer_init(sharc_trainer **out, const sharc_config *cfg, sharc_comm *world);
void sharc_trainer_free(sharc_trainer *t);
sharc_status sharc_trainer_step(sharc_trainer *t, sharc_step_stats *stats);
sharc_fsdp *sharc_trainer_engine(sharc_trainer *t);
struct sharc_adamw *sharc_trainer_optimizer(sharc_trainer *t);
const sharc_config *sharc_trainer_config(const sharc_trainer *t);
sharc_comm *sharc_trainer_world(sharc_trainer *t);
const struct sharc_mesh *sharc_trainer_mesh(const sharc_trainer *t);
/* Optimizer steps completed (what sharc_ckpt_save is given). */
int64_t sharc_trainer_steps_done(const sharc_trainer *t);
/* What a checkpoint of this trainer saves and restores (sharc/ckpt.h):
 * its world, mesh, engine, optimizer and configuration. */
sharc_ckpt_state sharc_trainer_ckpt_state(sharc_trainer *t);
/* sharc_ckpt_resume(ck, what) and, when a checkpoint was loaded, the
 * trainer's steps continue from its step. *loaded_step (may be NULL): that
 * step, or -1. Collective. */
sharc_status sharc_trainer_resume(sharc_trainer *t, sharc_ckpt *ck, const char *what, int64_t *loaded_step);

/* The whole run: steps with a line every train.log_every steps and a JSON
 * line per step in the metrics file, the resolved config in out_dir, final
 * weights in out_dir/model.safetensors. */
sharc_status sharc_train_run(const sharc_config *cfg, sharc_comm *world);

#ifdef __cplusplus
}
#endif
#endif
