/* tp.h: tensor parallelism's plan and its all-reduce (src/model/tp.c), used
 * by model.c. Internal to src/model/.
 *
 * Note [tp]. Megatron's plan (torchtitan's and OpenRLHF's Llama/Qwen plan),
 * over the tp consecutive ranks of a group (sharc/mesh.h):
 *   column-parallel  q, k, v (GPT-2's fused c_attn split per head: rank j
 *                    holds rows of its NH/tp query heads and NKV/tp key/value
 *                    heads of each of q, k and v, their biases likewise) and
 *                    the MLP's input (Llama's gate and up, GPT-2's c_fc and
 *                    its bias): rank j holds its rows, computes its heads'
 *                    attention and its ff_hidden_dim/tp MLP columns;
 *   row-parallel     o_proj / attn.c_proj and down_proj / mlp.c_proj: rank j
 *                    holds the matching columns and produces a partial sum;
 *   replicated       the norms, the row-parallel layers' biases (added once:
 *                    only tp rank 0 adds them before the all-reduce), the
 *                    embedding and the LM head (each tp rank runs them whole).
 * Per block and micro-batch the "g" operator all-reduces the output of each
 * row-parallel layer in forward (2 all-reduces of B T C floats), the "f"
 * operator the input gradient of each column-parallel layer in backward (2
 * more); activation checkpointing's recompute adds the attention one.
 * Everything that a replicated parameter's gradient reads (its input and
 * its output gradient) is the same on every tp rank after these
 * all-reduces, so those gradients are equal on the tp ranks without a
 * reduction of their own, and their updates keep them equal: the run is the
 * 1-rank run up to the order of fp32 sums. The batch is the same on every
 * tp rank of a group, so the loss and token counts are the group's (the
 * trainer counts them once). How the parts map onto the full tensors is
 * note [tp-params] in sharc/units.h. The all-reduce runs on host memory:
 * tp needs a host device (sharc_device_is_host) for now. */
#ifndef SHARC_MODEL_TP_H
#define SHARC_MODEL_TP_H

#include "sharc/comm.h"
#include "sharc/model.h"
#include "sharc/status.h"
#include "sharc/units.h"

/* Split the block units' parameters (units 1..L of a model of `family`) into
 * this rank's part (note [tp]); the embed and head units stay whole. */
sharc_status sharc_tp_split_units(sharc_unit_spec *units, int nunits, sharc_family family, int tp, int rank);
/* In-place sum of buf (n floats) over the group; nothing when group is NULL.
 * A failed collective is fatal (the ranks cannot continue with half a sum). */
void sharc_tp_all_reduce(sharc_comm *group, float *buf, int64_t n);

#endif
