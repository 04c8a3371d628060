/* sharc/model.h: GPT-2 and Llama decoder models built as lists of units.
 *
 * Units: 0 "embed" (token [+ position] embedding), 1..L "block.i", L+1 "head"
 * (final norm [+ LM head weight unless tied]). The model owns activations
 * only; parameters live in the engine (sharc/fsdp.h) and are reached through
 * sharc_fsdp_gather / sharc_fsdp_grad during forward and backward.
 *
 * Parameter names follow Hugging Face without the "transformer." prefix for
 * GPT-2 ("wte.weight", "h.0.attn.c_attn.weight", ...) and with "model." for
 * Llama ("model.layers.0.self_attn.q_proj.weight", ...). All linear weights
 * are stored (out_features, in_features) as nn.Linear does; GPT-2's Conv1D
 * files hold the transpose and are converted at import. */
#ifndef SHARC_MODEL_H
#define SHARC_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/comm.h"
#include "sharc/device.h"
#include "sharc/fsdp.h"
#include "sharc/status.h"
#include "sharc/units.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SHARC_FAMILY_GPT2 = 0, SHARC_FAMILY_LLAMA } sharc_family;

#define SHARC_MODEL_LIST_MAX 1024 /* bytes of a list-valued model key (= SHARC_PATH_MAX, a config string) */

typedef struct {
    sharc_family family;
    int num_layers;
    int embed_dim;     /* C */
    int num_heads;     /* NH */
    int num_kv_heads;  /* NKV, divides NH (GPT-2: = NH) */
    int ff_hidden_dim; /* MLP width: GPT-2 4C; Llama the SwiGLU intermediate size */
    int vocab_size;
    int max_seq_len; /* GPT-2: rows of the position table */
    float norm_eps;
    float rope_theta;
    float init_std;
    bool tie_embeddings;
    /* Llama-family variants (note [families] in src/model/model.c; all 0 for
     * a plain Llama, and for GPT-2): */
    int head_dim;       /* per-head width (0: embed_dim / num_heads); Qwen3 sets it apart */
    bool qkv_bias;      /* biases on q, k and v projections (Qwen2) */
    bool qk_norm;       /* RMSNorm over each query and key head before RoPE (Qwen3) */
    int sliding_window; /* attend to the last W positions only (0: all); Mistral */
    /* Llama-3 RoPE scaling (rope_type llama3) when rope_factor > 0 */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    /* config.json's bos/eos ids, carried from import to export (-1: none) */
    int bos_token_id, eos_token_id;
    /* Mixture-of-Experts, Qwen3-MoE (note [moe] in src/model/moe.c); num_experts 0: every MLP is dense.
     * Layer l is MoE iff num_experts > 0, (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers */
    int num_experts;                            /* E */
    int num_experts_per_tok;                    /* K, top-k */
    int moe_intermediate_size;                  /* each expert's SwiGLU width */
    bool norm_topk_prob;                        /* divide the top-k probabilities by their sum */
    int decoder_sparse_step;                    /* 0: 1 */
    char mlp_only_layers[SHARC_MODEL_LIST_MAX]; /* comma-separated layer indices kept dense ("" none) */
    float router_aux_loss_coef;                 /* the load-balancing loss's weight */
    bool output_router_logits;                  /* add coef * aux to the training loss (as HF trains) */
    bool experts_as_units; /* fsdp.wrap_policy.moe_experts: each expert its own unit (note [moe-units]) */
} sharc_model_config;

/* Note [moe]: layer l (0-based) has a Mixture-of-Experts MLP. */
bool sharc_model_layer_is_moe(const sharc_model_config *c, int l);

/* RoPE inverse frequencies (head_dim/2 floats) of a llama-family config:
 * theta^(-2i/hd), with Llama-3 scaling applied when rope_factor > 0. */
void sharc_model_rope_inv_freq(const sharc_model_config *c, float *inv_freq);

/* Family defaults (GPT-2 124M shape, or a Llama of the same width). */
void sharc_model_config_default(sharc_model_config *c, sharc_family family);
/* Fill derived defaults (0 fields) and check the arithmetic; errors name the key. */
sharc_status sharc_model_config_validate(sharc_model_config *c);
const char *sharc_family_name(sharc_family f);
/* Parameters, and the matmul parameters that MFU counts (PaLM's N). */
int64_t sharc_model_num_params(const sharc_model_config *c);
/* Hugging Face stores parameter `name` of a `family` model transposed, (in,
 * out): GPT-2's Conv1D weights (note [param-table] in src/model/params.c). */
bool sharc_model_param_hf_transposed(sharc_family family, const char *name);
/* Training FLOPs per token: 6 * N_matmul + 12 * L * (num_heads * head_dim) * T (PaLM, appendix B). */
double sharc_model_flops_per_token(const sharc_model_config *c, int T);

typedef struct sharc_model sharc_model;

/* Build the unit list for a config (no activations yet); activations will
 * live on `dev` and its kernels run the model (NULL: the CPU device). The
 * engine the model runs with must be on the same device. */
sharc_status sharc_model_init(sharc_model **out, const sharc_model_config *cfg, sharc_device *dev);
void sharc_model_free(sharc_model *m);
const sharc_model_config *sharc_model_get_config(const sharc_model *m);
int sharc_model_num_units(const sharc_model *m);
const sharc_unit_spec *sharc_model_units(const sharc_model *m);
/* Freeze parameters by model.freeze_module_prefix / train.trainable (note
 * [frozen-params] in src/fsdp/units.c, sharc_units_freeze); before the
 * engine is made from sharc_model_units. *nfrozen (may be NULL): how many. */
sharc_status sharc_model_freeze(sharc_model *m, const char *prefixes, const char *trainable, int *nfrozen);
/* The order the layer loops use the units in (note [unit-schedule] in
 * src/model/model.c): what the engine prefetches by. */
const sharc_unit_schedule *sharc_model_schedule(const sharc_model *m);
sharc_device *sharc_model_device(const sharc_model *m);

/* Ulysses sequence parallelism (note [ulysses] in src/model/ulysses.h), set
 * before sharc_model_plan: sequences of sp * T tokens (T the planned length)
 * are split over sp ranks, this one (rank) holding tokens [rank T, (rank+1) T)
 * of each; attention exchanges heads for tokens over the group given to
 * sharc_model_set_sp_group (sp ranks, this one at `rank`) before the first
 * forward. Forward and backward then take the rank's T tokens of inputs
 * and targets (targets shifted before the split, so the last token of a
 * slice predicts the first of the next) and return this rank's loss sum;
 * the caller sums them over the group. sp = 1 (the default): whole
 * sequences. sharc_model_logits_last needs sp = 1. */
sharc_status sharc_model_set_sequence_parallel(sharc_model *m, int sp, int rank);
/* Collective over group (note [tp-device] in src/model/tp.h: whether it
 * takes the device's memory). */
sharc_status sharc_model_set_sp_group(sharc_model *m, sharc_comm *group);

/* Tensor parallelism (note [tp] in src/model/tp.h), set after
 * sharc_model_init and before sharc_model_freeze and sharc_model_plan: the
 * units become this rank's part `rank` of `tp` of each block (the unit specs'
 * shapes stay the full tensors', note [tp-params] in sharc/units.h), and
 * forward and backward all-reduce over the group given to
 * sharc_model_set_tp_group (tp ranks, this one at `rank`) before the first
 * forward. Every tp rank of a group runs the same tokens and returns the
 * same loss. Not with sp > 1. */
sharc_status sharc_model_set_tensor_parallel(sharc_model *m, int tp, int rank);
/* Collective over group (note [tp-device] in src/model/tp.h: whether it
 * takes the device's memory). */
sharc_status sharc_model_set_tp_group(sharc_model *m, sharc_comm *group);

/* Plan activation memory for micro-batches of B sequences of T tokens.
 * With activation_checkpointing only each block's input is kept and the
 * block is recomputed in backward. */
sharc_status sharc_model_plan(sharc_model *m, int B, int T, bool activation_checkpointing);
/* Note [tiled-mlp] (src/model/model.c; fsdp.apply_tiled_mlp, fsdp.tiled_num_shards):
 * run each block's MLP over `tiles` chunks of rows (<= 1: untiled), keeping
 * no (B*T, F) intermediates; takes effect at the next sharc_model_plan. */
void sharc_model_set_tiled_mlp(sharc_model *m, int tiles);
/* Note [bf16-acts] (src/model/model.c): the param_dtype of the engine the
 * model will run with (F32 until said). With bf16 on a device that computes
 * in bf16, the next sharc_model_plan keeps the blocks' matrix-product inputs
 * in bf16, and the model must then run with such an engine. */
void sharc_model_set_param_dtype(sharc_model *m, sharc_dtype dt);
/* The bytes sharc_model_plan(m, B, T, ac) allocates, without allocating
 * (the attention workspace at the current sharc_threads_get()); under
 * sequence parallelism T is the rank's tokens, and the Ulysses buffers are
 * included (note [ulysses] in src/model/ulysses.h). */
int64_t sharc_model_activation_bytes(const sharc_model *m, int B, int T, bool activation_checkpointing);
/* The part of it that a model on a device with its own memory adds: the
 * micro-batch's token ids and targets copied in (note [device-batch]). */
int64_t sharc_model_device_batch_bytes(int B, int T);

/* Note [packing] (src/model/model.c): the position of every token of the
 * next micro-batches inside its sample, pos (B, sp*T) host memory (whole
 * sequences under sequence parallelism): 0 where a sample starts, else the
 * previous token's + 1. Attention is then confined to each sample and RoPE /
 * learned positions restart with it. NULL: each row one sequence (the state
 * after sharc_model_plan). Errors on positions breaking that rule. */
sharc_status sharc_model_set_positions(sharc_model *m, const int32_t *pos);

/* Note [device-batch] (src/model/model.c): inputs and targets (n <= B*T
 * each, host memory; targets may be NULL) as the model's device reads them:
 * the arrays themselves on a host device, else copies in planned device
 * buffers, valid until the next call, after the token ids are checked
 * against the vocabulary (an error naming the first bad one). */
sharc_status sharc_model_stage_batch(sharc_model *m, const int32_t *inputs, const int32_t *targets, int64_t n,
                                     const int32_t **dinputs, const int32_t **dtargets);

/* One micro-batch forward + backward: inputs, targets (B*T; target < 0 is
 * masked). Gradients are accumulated (+=) through the engine with each
 * token's loss weighted by loss_scale (1 / valid tokens of the global batch).
 * Returns the sum of the unmasked tokens' losses. */
double sharc_model_forward_backward(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, const int32_t *targets,
                                    float loss_scale);
/* Note [loss-on-device] (src/model/model.c): a training step's sums kept
 * in device memory, SHARC_MODEL_SUMS doubles: [0] the loss sums weighted,
 * [1] the loss sums, [2..3] the caller's (the gradient norm's squared sums,
 * sharc_fsdp_grad_sumsq_queue). sums_zero sets all to 0; forward_backward_add
 * is sharc_model_forward_backward whose loss sum l is not read but added on
 * the device: [0] += l * weight, [1] += l; sums_read is the step's one host
 * wait: the four copied into pinned host memory. Work on the device's
 * default stream. */
#define SHARC_MODEL_SUMS 4
sharc_status sharc_model_sums_zero(sharc_model *m);
void sharc_model_forward_backward_add(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, const int32_t *targets,
                                      float loss_scale, double weight);
double *sharc_model_sums(sharc_model *m);
sharc_status sharc_model_sums_read(sharc_model *m, double out[SHARC_MODEL_SUMS]);
/* Forward only, for evaluation: the loss sum over unmasked targets. */
double sharc_model_forward_loss(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, const int32_t *targets);
/* Forward only, logits (V floats of host memory) of the last position of
 * sequence 0 of a plan of B = 1 and T = len: inputs has len tokens (len <=
 * the planned T). */
void sharc_model_logits_last(sharc_model *m, sharc_fsdp *e, const int32_t *inputs, int len, float *logits);

/* Whether the model's matrix products run in bf16 with engine e: its
 * param_dtype is bf16 and the device's kernels can (note [bf16-compute] in
 * src/model/model.c); otherwise they run in fp32. */
bool sharc_model_computes_bf16(const sharc_model *m, const sharc_fsdp *e);
/* Generation with a key/value cache (note [kv-cache] in src/model/model.c),
 * on a plan of B = 1 and T positions. kv_enable allocates the caches (once)
 * and empties them; kv_append runs n tokens at the next positions, caching
 * their keys and values, and writes the logits (V floats of host memory) of
 * the last; the cached positions plus n must not exceed T. Each token costs
 * O(cached positions), not a forward over the whole prefix. */
sharc_status sharc_model_kv_enable(sharc_model *m);
sharc_status sharc_model_kv_append(sharc_model *m, sharc_fsdp *e, const int32_t *tokens, int n, float *logits);
int sharc_model_kv_len(const sharc_model *m);

/* Note [moe] (src/model/moe.c): after a forward, the auxiliary
 * load-balancing loss of its micro-batch (0 without MoE layers) and how many
 * (layer, expert) pairs received no token. */
void sharc_model_moe_stats(const sharc_model *m, double *aux_loss, int *idle_experts);

/* Seconds spent in forward and backward since the last reset, measured by
 * the model around its layer loops (gather waits included). Forward:
 * embedding, blocks, final norm (and the forward-only head of
 * sharc_model_forward_loss); backward: the fused LM head + loss + its
 * backward, the blocks' backward (with their recomputation under activation
 * checkpointing) and the embedding's backward. */
typedef struct {
    double forward_s, backward_s;
    /* Note [moe-units]: over the training forwards since the reset, the
     * (layer, expert) pairs that received no token (each gathered all the
     * same) and the parameters those experts hold: the cost of unused experts */
    int64_t moe_idle_pairs, moe_idle_params;
} sharc_model_timing;
void sharc_model_timing_get(const sharc_model *m, sharc_model_timing *out);
void sharc_model_timing_reset(sharc_model *m);

/* Pick a token from logits (V, modified in place): greedy if temperature is 0,
 * else softmax(logits / temperature) restricted to the top_k largest (0 = all),
 * inverted at the uniform draw u in [0, 1). */
int sharc_sample_logits(float *logits, int V, float temperature, int top_k, float u);

#ifdef __cplusplus
}
#endif
#endif
