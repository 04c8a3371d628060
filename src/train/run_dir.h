/* run_dir.h (internal to src/train): the run directory of sharc train, what
 * a run may find there and what it writes at start (note [run-dir] in
 * run_dir.c). */
#ifndef SHARC_RUN_DIR_H
#define SHARC_RUN_DIR_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/ckpt.h"
#include "sharc/config.h"
#include "sharc/telemetry.h"

typedef struct {
    const sharc_config *cfg;           /* borrowed */
    char config[SHARC_PATH_MAX + 64];  /* out_dir/config.yaml */
    char weights[SHARC_PATH_MAX + 64]; /* out_dir/model.safetensors */
    char metrics[SHARC_PATH_MAX + 64]; /* train.metrics_path or out_dir/metrics.jsonl */
    char debug[SHARC_PATH_MAX + 64];   /* out_dir/debug/rank-N.log (log.debug) */
    int64_t resumed;                   /* the step loaded, -1: a new run */
    bool start_over;                   /* rank 0: another run's outputs go first (train.overwrite_output_dir) */
} sharc_run_dir;

/* Everything that can refuse the run, writing nothing: rank 0 checks the
 * directories and files it will write and whether they hold another run;
 * every rank with log.debug checks its own log. `resumed` is the step the
 * run resumed from (-1: none; the checkpoint is sharc_ckpt_last_path).
 * Local: the caller agrees on the outcome. */
sharc_status sharc_run_dir_check(sharc_run_dir *d, const sharc_config *c, sharc_ckpt *ck, int64_t resumed, int rank);

/* The writes at start, after every rank's check passed: rank 0 makes
 * out_dir, removes another run's outputs when starting over, removes what
 * crashes left (note [stale-tmp], [ckpt-leftovers]), prunes, writes
 * config.yaml and opens the metrics file (*metrics); every rank with
 * log.debug opens its log (*debug). Local: the caller agrees. */
sharc_status sharc_run_dir_prepare(sharc_run_dir *d, sharc_ckpt *ck, int rank, sharc_jsonl **metrics,
                                   sharc_jsonl **debug);

#endif
