/* ulysses.h: the exchanges of Ulysses sequence parallelism around attention
 * (src/model/ulysses.c), used by model.c. Internal to src/model/.
 *
 * Note [ulysses]. A sequence of Tf = sp * Tl tokens is split over the sp
 * ranks of a group, rank j holding tokens [j*Tl, (j+1)*Tl). Everything but
 * attention is per token and runs on the rank's Tl tokens (RoPE and learned
 * positions offset by j*Tl). Attention needs whole sequences, so around it
 * (DeepSpeed-Ulysses):
 *   forward  #1 qkv (B, Tl, (NH + 2 NKV) hd) -> (B, Tf, (NHl + 2 NKVl) hd):
 *            rank j keeps query heads [j NHl, (j+1) NHl) and their key/value
 *            heads, for the whole sequence;
 *            attention on (B, Tf) with NHl query and NKVl key/value heads;
 *   forward  #2 out (B, Tf, NHl hd) -> (B, Tl, NH hd): back to tokens;
 *   backward the mirror of #2 for d out, attention backward, the mirror of
 *            #1 for d qkv.
 * Each is one all-to-all over the group (q, k and v travel together, where
 * DeepSpeed sends three), so a block sends B Tl (NH + 2 NKVr) hd + B Tl NH hd
 * floats per rank forward and the same backward, NKVr = NKVl sp being the
 * key/value heads as sent. With NKV >= sp each rank takes NKVl = NKV / sp
 * key/value heads; with sp > NKV (sp a multiple of NKV) each rank takes the
 * one key/value head its query heads use (NKVl = 1: replicated sp / NKV
 * times, DeepSpeed's kv_replication_factor) and backward SUMS the replicas'
 * gradients, in rank order. Head order inside a rank follows the global
 * order, so query head h still uses key/value head h / (NH / NKV). Packing
 * is strided block copies, the kernel table's copy_block on the model's
 * stream (a kernel on a GPU); the all-to-all gets device memory when the
 * group takes it, queued after that stream and waited on by it (no host
 * wait), and is staged through host memory otherwise (note [tp-device] in
 * tp.h, whose link sp's group uses too). */
#ifndef SHARC_MODEL_ULYSSES_H
#define SHARC_MODEL_ULYSSES_H

#include "sharc/comm.h"
#include "tp.h"
#include "sharc/device.h"
#include "sharc/status.h"

#include <stdint.h>

typedef struct {
    int sp, rank;             /* group size, this rank's place in it */
    int B, Tl, Tf;            /* micro-batch, tokens per rank, tokens per sequence */
    int NH, NKV, hd;          /* the model's heads */
    int NHl, NKVl, QKV, QKVl; /* heads per rank; row widths (floats) of qkv before and after #1 */
    sharc_comm *group;        /* borrowed; set before the first exchange */
    sharc_tp_link *link;      /* borrowed: how group reaches dev's memory (note [tp-device]); NULL: directly */
    sharc_device *dev;        /* borrowed */
    float *send, *recv;       /* (sp, B, Tl, max(QKVl, NHl hd)) exchange buffers */
    float *qkv_seq;           /* (B, Tl, QKV) forward: this rank's tokens, before #1 */
    float *dqkv_h;            /* (B, Tf, QKVl) backward: attention's d qkv */
    float *datt_h;            /* (B, Tf, NHl hd) backward: d out after the mirror of #2 */
} sharc_ulysses;

/* Sizes for sp ranks (rank `rank`), B sequences of Tl tokens per rank; the
 * buffers on `dev` (counted as activations). */
sharc_status sharc_ulysses_init(sharc_ulysses *u, sharc_device *dev, int sp, int rank, int B, int Tl, int NH, int NKV,
                                int hd);
void sharc_ulysses_free(sharc_ulysses *u);
/* Floats of the buffers sharc_ulysses_init allocates for these sizes (send,
 * recv, qkv_seq, dqkv_h, datt_h: note [memory-plan] in src/train/memplan.c),
 * and of the head-sharded qkv and out that each saved block set holds
 * (sharc_ulysses_qkv_numel + sharc_ulysses_att_numel); sp >= 2 and the
 * heads already checked. */
int64_t sharc_ulysses_buffers_numel(int sp, int B, int Tl, int NH, int NKV, int hd);
int64_t sharc_ulysses_set_numel(int sp, int B, int Tl, int NH, int NKV, int hd);
/* Floats of the head-sharded tensors a block keeps: qkv (B, Tf, QKVl), out
 * (B, Tf, NHl hd); lse (B, NHl, Tf) has as many floats as (B, NH, Tl). */
int64_t sharc_ulysses_qkv_numel(const sharc_ulysses *u);
int64_t sharc_ulysses_att_numel(const sharc_ulysses *u);
/* The four exchanges of note [ulysses]; collective over u->group. A failed
 * collective is fatal (the job cannot continue with a half exchange). */
void sharc_ulysses_qkv_to_heads(sharc_ulysses *u, float *qkv_h, const float *qkv_seq);
void sharc_ulysses_att_to_tokens(sharc_ulysses *u, float *att, const float *att_h);
void sharc_ulysses_datt_to_heads(sharc_ulysses *u, float *datt_h, const float *datt);
/* dqkv (B, Tl, QKV) is written (=), replicated key/value heads summed. */
void sharc_ulysses_dqkv_to_tokens(sharc_ulysses *u, float *dqkv, const float *dqkv_h);

#endif
