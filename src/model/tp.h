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
 *                    only tp rank 0 adds them before the all-reduce) and
 *                    GPT-2's position table; the token embedding and the LM
 *                    head are vocabulary-parallel (note [tp-vocab]) when tp
 *                    divides the vocabulary, else replicated too.
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
 * note [tp-params] in sharc/units.h; which parameter splits how is its
 * row's `tp` in the family's table (note [param-table] in params.c). The all-reduces run on the model's
 * device (note [tp-device]). Qwen3-MoE's experts are split as the MLP, the
 * router replicated: note [tp-moe] in moe.c. */
/* Note [tp-sp]. tp with Ulysses sequence parallelism (note [ulysses] in
 * ulysses.h), torchtitan's dp x cp x tp and DeepSpeed-Ulysses with Megatron
 * tp: a rank of mesh coordinates (dp_rank, sp_rank, tp_rank) holds its tp
 * part of every block and the tokens [sp_rank Tl, (sp_rank + 1) Tl) of its
 * stream's sequences. Its qkv product gives its NH/tp query and NKV/tp
 * key/value heads for its Tl tokens; Ulysses then exchanges those LOCAL
 * heads over the sp group (the ranks of equal dp_rank and tp_rank) exactly
 * as without tp, with NH/tp and NKV/tp in place of NH and NKV (so sp divides
 * NH/tp, and NKV/tp and sp divide one or the other: replicated key/value
 * heads as before), and the output comes back to the rank's Tl tokens and
 * its NH/tp heads' columns, where the row-parallel out projection and its
 * all-reduce over the tp group (equal dp_rank and sp_rank) run unchanged;
 * the MLP (or note [tp-moe]'s experts) and the vocabulary-parallel head
 * likewise run on the Tl tokens (GPT-2's learned positions of the slice:
 * the position table from row sp_rank Tl). Nothing in a layer changes: the model's sizes are local
 * (set_dims), the sp exchanges and the tp all-reduces touch different
 * groups at different points of the block. The tp ranks of an sp slice see
 * the same tokens, so the step counts the loss and targets once per tp
 * group and sums the sp slices (note [loss-normalization]); FSDP shards
 * each tp part over dp_shard x sp (note [mesh-fsdp]), whose reduce-scatter
 * sums the sp slices' partial gradients. */
#ifndef SHARC_MODEL_TP_H
#define SHARC_MODEL_TP_H

#include "sharc/comm.h"
#include "sharc/kernels.h"
#include "sharc/model.h"
#include "sharc/status.h"
#include "sharc/units.h"

/* Note [tp-vocab]. Megatron's vocabulary-parallel embedding and head: when
 * tp divides V, tp rank r holds rows [v0, v0 + Vl), v0 = r Vl, Vl = V / tp,
 * of the token embedding and of the LM head (the same tensor when tied).
 * Embedding: a token in the rank's range gives its row (plus GPT-2's
 * position row, the table being replicated), any other token a zero row,
 * and the sum over tp of these (the forward all-reduce of N C floats) is the
 * one-rank embedding exactly (one rank contributes each row, the others
 * zero). Its backward adds the residual gradient, already equal on the tp
 * ranks, into the rank's rows only (in row order, as the one-rank kernel).
 * Head and cross-entropy, chunk by chunk as note [fused-head] (no rank holds
 * more than `chunk` rows of its Vl columns of logits): logits = x W_local^T;
 * the row maximum all-reduced with MAX (chunk floats), then the sum of
 * exp(logit - max) and the target's logit (contributed by the rank holding
 * its column, 0 elsewhere) with SUM (2 chunk floats); loss = max +
 * log(sum) - target logit, the same on every tp rank; dlogits = (softmax -
 * onehot) scale on the rank's columns; dW_local += dlogits^T x; dx =
 * dlogits W_local, and after the last chunk one all-reduce of the N C floats
 * of dx over tp gives every rank the full input gradient. Per micro-batch
 * that is 2 N C floats more than the replicated head (forward embedding,
 * backward dx) and 3 N floats of row statistics. The element work is the
 * kernel table's vocab_* slots (sharc/kernels.h), so it runs on any device. When tp does not divide V the embedding and head stay
 * replicated (the model logs it once); GPT-2's 50257 is odd. */
/* Note [tp-device]. How the tp group reaches the model's buffers, decided
 * once by sharc_tp_link_init (collective over the group, as
 * sharc_comm_takes_device): on the CPU the blocking all-reduce on host
 * memory; on a device whose group takes its memory (NCCL, one GPU per rank)
 * a non-blocking all-reduce queued after the model's stream and waited on
 * by that stream (note [blocking-on-stream] in src/fsdp/collectives.c: no
 * host wait); otherwise (MPI, ranks sharing a GPU) through a pinned host
 * buffer, grown to the largest all-reduce on first use, with
 * sharc_comm_staged (note [comm-staging]): the same bytes reach MPI as on
 * the CPU, at two host waits per all-reduce. Sequence parallelism's group
 * (ulysses.c) goes through a link of its own the same way: on device
 * memory sharc_comm_iall_to_all after the stream, waited on by it. */
typedef struct {
    sharc_comm *group; /* NULL: no tensor parallelism */
    sharc_device *dev; /* the model's */
    bool direct;       /* the group takes dev's memory (always on the host) */
    float *stage;      /* staged: host memory of stage_n floats (send then receive); NULL until used */
    int64_t stage_n;
} sharc_tp_link;
/* l (zeroed or initialised before) for group (NULL: none) on dev. Collective over group. */
sharc_status sharc_tp_link_init(sharc_tp_link *l, sharc_comm *group, sharc_device *dev);
void sharc_tp_link_free(sharc_tp_link *l);
/* `kind` (all-reduce sums, all-to-all: n floats per rank) of l's group on
 * device buffers through l's host buffer (sharc_comm_staged); blocking. Used
 * by sequence parallelism's exchanges (ulysses.c) as well. */
sharc_status sharc_tp_link_staged(sharc_tp_link *l, sharc_stream *s, sharc_coll_kind kind, const float *send,
                                  float *recv, int64_t n);

/* The fused head of note [tp-vocab] with the kernels of k (their bf16 or
 * fp32 matmuls): w (Vl, C) this rank's rows, x (N, C), targets (N, < 0
 * masked); dx (N, C, NULL: loss only) the full input gradient, dw (Vl, C,
 * nullable) += this rank's rows' gradient. ws: chunk Vl floats, red: 3
 * chunk floats. xh, wh: x and w already rounded to bf16 (note
 * [bf16-head] in src/model/model.c), the products then through k's *_b16
 * slots, once-rounded operands instead of w rounded twice per chunk; NULL:
 * k's matmuls on x and w. *loss_sum (one double of the device's memory) =
 * the loss sum of the unmasked rows (equal on the tp ranks). */
void sharc_tp_lmhead_xent(const sharc_kernels *k, sharc_stream *s, sharc_tp_link *l, double *loss_sum, float *dx,
                          float *dw, const float *x, const float *w, const uint16_t *xh, const uint16_t *wh,
                          const int32_t *targets, float scale, int64_t N, int C, int v0, int Vl, float *ws, float *red,
                          int64_t chunk);
/* In-place sum (or `op`) of buf (n floats of l's device memory, written by
 * work on s) over l's group, seen by the work queued on s next; nothing
 * when l has no group. A failed collective is fatal (the ranks cannot
 * continue with half a sum). */
void sharc_tp_all_reduce(sharc_tp_link *l, sharc_stream *s, float *buf, int64_t n);
void sharc_tp_all_reduce_op(sharc_tp_link *l, sharc_stream *s, float *buf, int64_t n, sharc_reduce_op op);

#endif
