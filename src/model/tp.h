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
 * row's `tp` in the family's table (note [param-table] in params.c). The all-reduce runs on host memory:
 * tp needs a host device (sharc_device_is_host) for now. */
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
 * backward dx) and 3 N floats of row statistics. Host memory only, as the
 * rest of tp. When tp does not divide V the embedding and head stay
 * replicated (the model logs it once); GPT-2's 50257 is odd. */
/* x (N, C) = wte (Vl, C) row tokens[r] - v0 (+ wpe row pos[r], or r % T
 * when pos is NULL) for tokens in [v0, v0 + Vl), 0 for the others. */
void sharc_tp_embedding_forward(float *x, const int32_t *tokens, const int32_t *pos, const float *wte, const float *wpe,
                                int64_t N, int T, int C, int v0, int Vl);
/* dwte (Vl, C) += the rows of dx (N, C) whose tokens lie in [v0, v0 + Vl). */
void sharc_tp_embedding_backward(float *dwte, const float *dx, const int32_t *tokens, int64_t N, int C, int v0, int Vl);
/* The fused head of note [tp-vocab] with the kernels of k (their bf16 or
 * fp32 matmuls): w (Vl, C) this rank's rows, x (N, C), targets (N, < 0
 * masked); dx (N, C, NULL: loss only) the full input gradient, dw (Vl, C,
 * nullable) += this rank's rows' gradient. ws: chunk Vl floats, red: 3
 * chunk floats. xh, wh: x and w already rounded to bf16 (note
 * [bf16-head] in src/model/model.c), the products then through k's *_b16
 * slots, once-rounded operands instead of w rounded twice per chunk; NULL:
 * k's matmuls on x and w. Returns the loss sum of the unmasked rows (equal
 * on the tp ranks). */
double sharc_tp_lmhead_xent(const sharc_kernels *k, sharc_stream *s, sharc_comm *group, float *dx, float *dw,
                            const float *x, const float *w, const uint16_t *xh, const uint16_t *wh,
                            const int32_t *targets, float scale, int64_t N, int C, int v0, int Vl, float *ws,
                            float *red, int64_t chunk);
/* In-place sum of buf (n floats) over the group; nothing when group is NULL.
 * A failed collective is fatal (the ranks cannot continue with half a sum). */
void sharc_tp_all_reduce(sharc_comm *group, float *buf, int64_t n);

#endif
