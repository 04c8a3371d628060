/* sharc/eval.h: validation loss and perplexity, forward only, with the
 * parameters sharded (each unit gathered for its forward and released, as in
 * generation), over the ranks of a world.
 *
 * Note [eval-windows]. The validation set is cut into non-overlapping windows
 * as the sampler does (window k: tokens [k*T, k*T + T + 1), W = (ntokens-1)/T),
 * in order, no shuffling. Micro-batch b holds windows [b*B, b*B + B) (the
 * last one padded with masked rows); rank r of R evaluates micro-batches
 * b = i*R + r. Every rank runs the same number of forwards (ranks without a
 * batch in the last round run a fully masked one), so the gathers match; the
 * loss sums and target counts are all-reduced in double. The result is the
 * mean over every target of the windows evaluated, whatever R is (up to the
 * order of the fp32/double sums). An SFT validation set (samples) is read the
 * same way with sample k in place of window k (sharc_dataset_item): only its
 * trained targets count.
 *
 * Under a mesh (note [mesh-fsdp] in docs/ARCHITECTURE.md) the R above is the
 * number of data streams dp and r the rank's stream (dp_rank): the ranks of
 * one tensor-parallel group and of one sequence-parallel group evaluate the
 * same micro-batch, so the collectives inside the forward (tp all-reduces,
 * sp all-to-alls, FSDP gathers) pair up. A sequence rank takes columns
 * [sp_rank T/sp, (sp_rank + 1) T/sp) of every row, as training does (targets
 * shifted before the split), and counts its own slice's targets: the sp
 * ranks' sums add up to the rows'. Every tp rank of a group returns the
 * group's loss and counts the same targets, so both all-reduced sums are
 * divided by tp (note [loss-normalization] in src/train/step.c). The loss is
 * then the one-process loss whatever dp x sp x tp is. */
#ifndef SHARC_EVAL_H
#define SHARC_EVAL_H

#include <stdint.h>

#include "sharc/comm.h"
#include "sharc/config.h"
#include "sharc/data.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double loss_sum;   /* sum of token losses over all ranks */
    int64_t targets;   /* targets evaluated */
    int64_t windows;   /* windows evaluated */
    int64_t batches;   /* micro-batches evaluated (all ranks) */
    double loss;       /* loss_sum / targets */
    double perplexity; /* exp(loss) */
    double seconds;
} sharc_eval_result;

/* Where a rank sits in the mesh, for note [eval-windows]. */
typedef struct {
    int streams, stream; /* data streams (dp) and this rank's (dp_rank) */
    int sp, sp_rank;     /* sequence-parallel degree and this rank's slice of a row */
    int tp;              /* tensor-parallel degree: a group's ranks see the same rows */
} sharc_eval_mesh;

/* Evaluate `d` with model m (planned for B x T/sp) and engine e; T is the
 * whole row's length; max_batches micro-batches at most (0: every window).
 * mesh NULL: every rank of `world` its own stream, no sp or tp. Collective
 * over `world`, which must hold every rank of e's mesh. */
sharc_status sharc_eval_dataset(sharc_model *m, sharc_fsdp *e, sharc_comm *world, const sharc_eval_mesh *mesh,
                                const sharc_dataset *d, int B, int T, int64_t max_batches, sharc_eval_result *out);

typedef struct {
    const char *weights; /* a sharc weights file, or a run directory holding model.safetensors */
    const char *data_path;
    sharc_token_format format;
    int batch_size;      /* 0: the checkpoint's train.batch_size */
    int seq_len;         /* 0: the checkpoint's train.seq_len */
    int64_t max_batches; /* 0: every window */
    int threads;         /* 0: this process's CPUs */
} sharc_eval_options;

/* `sharc eval`: load the weights FULL_SHARD over `world` (each rank reads
 * only its ranges) and evaluate. Collective; every rank returns the same
 * status (note [agreement] in trainer.c). */
sharc_status sharc_eval_checkpoint(const sharc_eval_options *o, sharc_comm *world, sharc_eval_result *out);

#ifdef __cplusplus
}
#endif
#endif
