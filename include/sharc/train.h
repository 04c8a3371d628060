/* sharc/train.h: the training loop. A step reads like torchtitan's:
 *
 *   zero grads; for each micro-batch: forward + backward (loss scaled by
 *   1 / valid targets of the global batch); global grad norm; clip factor;
 *   lr from the schedule; AdamW on the shards.
 */
#ifndef SHARC_TRAIN_H
#define SHARC_TRAIN_H

#include <stdint.h>

#include "sharc/config.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t step;         /* steps completed, counting this one */
    double loss;          /* mean over the valid targets of the global batch */
    float lr;
    double grad_norm;     /* before clipping */
    int64_t tokens;       /* input tokens of the global batch */
    int64_t valid_tokens; /* unmasked targets */
    double step_s;
    double tokens_per_s;
    double tflops;        /* achieved model TFLOP/s (sharc_model_flops_per_token) */
} sharc_step_stats;

typedef struct sharc_trainer sharc_trainer;

/* Build model, engine, optimizer and data from a validated config; the
 * parameters are initialised from train.seed (or loaded by the caller). */
sharc_status sharc_trainer_init(sharc_trainer **out, const sharc_config *cfg);
void sharc_trainer_free(sharc_trainer *t);
sharc_status sharc_trainer_step(sharc_trainer *t, sharc_step_stats *stats);
sharc_model *sharc_trainer_model(sharc_trainer *t);
sharc_fsdp *sharc_trainer_engine(sharc_trainer *t);
const sharc_config *sharc_trainer_config(const sharc_trainer *t);

/* The whole run: steps with a line every train.log_every steps and a JSON
 * line per step in the metrics file, the resolved config in out_dir, final
 * weights in out_dir/model.safetensors. */
sharc_status sharc_train_run(const sharc_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
