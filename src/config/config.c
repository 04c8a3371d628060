/* config.c: sharc_config_*, the key table and the YAML reader (libyaml).
 * YAML mappings are flattened to dotted keys ("optim.lr"); each key is looked
 * up in `keys` and its scalar parsed by the key's type. */
#include "sharc/config.h"
#include "sharc/fileio.h"
#include "sharc/mesh.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

typedef enum { K_INT, K_INT64, K_U64, K_FLOAT, K_BOOL, K_STR, K_ENUM, K_FLOAT2, K_DTYPE, K_RESHARD, K_LIMIT } key_type;

/* A row of the key table: everything about one key. */
typedef struct {
    const char *name;
    key_type type;
    size_t off;
    double min, max;            /* numeric range (inclusive) */
    const char *const *choices; /* K_ENUM: NULL-terminated, index = value */
    const char *def;            /* the default, written as in a file (NULL: the row is another key's spelling) */
    bool agree;                 /* every rank of a run must hold the same value (note [agreement]) */
    const char *help;
} key_def;

#define AGREE true  /* compared across ranks at start */
#define LOCAL false /* may differ between ranks (a path on each node, threads, logging) */

static const char *const families[] = {"gpt2", "llama", NULL};
static const char *const lr_decays[] = {"cosine", "linear", "constant", NULL};
static const char *const token_formats[] = {"auto", "u16", "u32", "llmc", "text", "sft", "jsonl", NULL};
static const char *const chat_formats[] = {"auto", "chatml", "qwen3", "llama3", NULL};
static const char *const loss_masks[] = {"ranges", "openrlhf", NULL};
static const char *const loss_norms[] = {"global_tokens", "micro_batch", NULL};
static const char *const devices[] = {"cpu", "cuda", NULL};
static const char *const strategies[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", NULL};
static const char *const prefetches[] = {"NONE", "BACKWARD_PRE", "BACKWARD_POST", NULL};
static const char *const wrap_policies[] = {"transformer_block", "size", "none", NULL};

#define OFF(f) offsetof(sharc_config, f)
_Static_assert(SHARC_MODEL_LIST_MAX == SHARC_PATH_MAX, "a model list key is a config string");
_Static_assert(SHARC_OPTIM_PATH_MAX == SHARC_PATH_MAX, "optim.offload_dir is a config string");
#define BIG 1e18

static const key_def keys[] = {
    {"model.family", K_ENUM, OFF(model.family), 0, 0, families, "gpt2", AGREE, "gpt2 or llama"},
    {"model.num_layers", K_INT, OFF(model.num_layers), 1, 4096, NULL, "4", AGREE, "transformer blocks (L)"},
    {"model.embed_dim", K_INT, OFF(model.embed_dim), 1, 1 << 20, NULL, "256", AGREE, "model width (C)"},
    {"model.num_heads", K_INT, OFF(model.num_heads), 1, 4096, NULL, "4", AGREE, "attention heads; divides embed_dim"},
    {"model.num_kv_heads", K_INT, OFF(model.num_kv_heads), 0, 4096, NULL, "0", AGREE,
     "key/value heads (0: = num_heads); divides num_heads"},
    {"model.ff_hidden_dim", K_INT, OFF(model.ff_hidden_dim), 0, 1 << 22, NULL, "0", AGREE,
     "MLP width (0: gpt2 4C, llama 8C/3 rounded to 16)"},
    {"model.vocab_size", K_INT, OFF(model.vocab_size), 2, 1 << 30, NULL, "256", AGREE,
     "vocabulary (256 for byte-level text)"},
    {"model.max_seq_len", K_INT, OFF(model.max_seq_len), 1, 1 << 24, NULL, "128", AGREE,
     "longest sequence (gpt2: position table rows)"},
    {"model.norm_eps", K_FLOAT, OFF(model.norm_eps), 0, 1, NULL, "1e-5", AGREE, "LayerNorm/RMSNorm epsilon"},
    {"model.rope_theta", K_FLOAT, OFF(model.rope_theta), 0, BIG, NULL, "10000", AGREE, "RoPE base (llama)"},
    {"model.init_std", K_FLOAT, OFF(model.init_std), 0, 10, NULL, "0.02", AGREE,
     "std of normal weight init (residual outputs / sqrt(2L))"},
    {"model.tie_embeddings", K_BOOL, OFF(model.tie_embeddings), 0, 0, NULL, "true", AGREE,
     "LM head shares the token embedding"},
    {"model.head_dim", K_INT, OFF(model.head_dim), 0, 1 << 16, NULL, "0", AGREE,
     "llama family: per-head width (0: embed_dim / num_heads)"},
    {"model.qkv_bias", K_BOOL, OFF(model.qkv_bias), 0, 0, NULL, "false", AGREE,
     "llama family: q/k/v projection biases (Qwen2)"},
    {"model.qk_norm", K_BOOL, OFF(model.qk_norm), 0, 0, NULL, "false", AGREE,
     "llama family: RMSNorm of each query/key head before RoPE (Qwen3)"},
    {"model.sliding_window", K_INT, OFF(model.sliding_window), 0, 1 << 30, NULL, "0", AGREE,
     "llama family: attention window (0: none); train.seq_len must not exceed it"},
    {"model.rope_factor", K_FLOAT, OFF(model.rope_factor), 0, BIG, NULL, "0", AGREE,
     "llama family: Llama-3 RoPE scaling factor (0: no scaling)"},
    {"model.rope_low_freq_factor", K_FLOAT, OFF(model.rope_low_freq_factor), 0, BIG, NULL, "0", AGREE,
     "Llama-3 RoPE scaling: low_freq_factor"},
    {"model.rope_high_freq_factor", K_FLOAT, OFF(model.rope_high_freq_factor), 0, BIG, NULL, "0", AGREE,
     "Llama-3 RoPE scaling: high_freq_factor"},
    {"model.rope_original_max_pos", K_INT, OFF(model.rope_original_max_pos), 0, 1 << 30, NULL, "0", AGREE,
     "Llama-3 RoPE scaling: original_max_position_embeddings"},
    {"model.num_experts", K_INT, OFF(model.num_experts), 0, 1 << 16, NULL, "0", AGREE,
     "llama family: experts per MoE layer (Qwen3-MoE; 0: dense MLPs)"},
    {"model.num_experts_per_tok", K_INT, OFF(model.num_experts_per_tok), 0, 1 << 16, NULL, "0", AGREE,
     "MoE: experts each token is routed to (top-k)"},
    {"model.moe_intermediate_size", K_INT, OFF(model.moe_intermediate_size), 0, 1 << 22, NULL, "0", AGREE,
     "MoE: each expert's SwiGLU width"},
    {"model.norm_topk_prob", K_BOOL, OFF(model.norm_topk_prob), 0, 0, NULL, "false", AGREE,
     "MoE: renormalise the top-k router probabilities to sum to 1"},
    {"model.decoder_sparse_step", K_INT, OFF(model.decoder_sparse_step), 1, 1 << 16, NULL, "1", AGREE,
     "MoE: layer l has experts when (l + 1) % step == 0"},
    {"model.mlp_only_layers", K_STR, OFF(model.mlp_only_layers), 0, 0, NULL, "", AGREE,
     "MoE: layer indices kept dense, a list or comma-separated"},
    {"model.router_aux_loss_coef", K_FLOAT, OFF(model.router_aux_loss_coef), 0, BIG, NULL, "0.001", AGREE,
     "MoE: weight of the load-balancing loss"},
    {"model.output_router_logits", K_BOOL, OFF(model.output_router_logits), 0, 0, NULL, "false", AGREE,
     "MoE: add router_aux_loss_coef * aux to the training loss (Hugging Face adds it only then)"},
    {"model.bos_token_id", K_INT, OFF(model.bos_token_id), -1, 1 << 30, NULL, "-1", AGREE,
     "config.json's bos_token_id, carried to export (-1: none)"},
    {"model.eos_token_id", K_INT, OFF(model.eos_token_id), -1, 1 << 30, NULL, "-1", AGREE,
     "config.json's eos_token_id, carried to export (-1: none)"},
    {"model.init_from", K_STR, OFF(init_from), 0, 0, NULL, "", AGREE,
     "sharc weights file (model.safetensors) loaded after initialisation"},
    {"model.freeze_module_prefix", K_STR, OFF(freeze_module_prefix), 0, 0, NULL, "", AGREE,
     "parameter name prefixes to freeze, a list or comma-separated (ROLL): gathered, no gradient, no AdamW state"},
    {"model.tokenizer", K_STR, OFF(tokenizer), 0, 0, NULL, "", LOCAL,
     "Hugging Face tokenizer.json or its directory (\"\": byte-level, or model.init_from's directory when it holds "
     "one)"},

    {"data.path", K_STR, OFF(data.path), 0, 0, NULL, "data/kjv.txt", LOCAL, "training token file or UTF-8 text"},
    {"data.val_path", K_STR, OFF(data.val_path), 0, 0, NULL, "", LOCAL, "validation token file (optional)"},
    {"data.format", K_ENUM, OFF(data.format), 0, 0, token_formats, "auto", AGREE,
     "auto, u16, u32, llmc, text, sft (sharc tokenize's SFT file) or jsonl (SFT records)"},
    {"data.shuffle", K_BOOL, OFF(data.shuffle), 0, 0, NULL, "true", AGREE, "seeded permutation of windows each epoch"},
    {"data.seed", K_U64, OFF(data.seed), 0, 0, NULL, "1", AGREE, "shuffle seed"},
    {"data.input_key", K_STR, OFF(data.input_key), 0, 0, NULL, "input", LOCAL,
     "JSONL: the prompt's key (a string, or a list of messages)"},
    {"data.output_key", K_STR, OFF(data.output_key), 0, 0, NULL, "", LOCAL,
     "JSONL: the response's key (\"\": records of messages, the last one the response)"},
    {"data.input_template", K_STR, OFF(data.input_template), 0, 0, NULL, "User: {}\nAssistant: ", LOCAL,
     "JSONL without a chat template: the prompt, {} = the input (\"\": the input as is)"},
    {"data.apply_chat_template", K_BOOL, OFF(data.apply_chat_template), 0, 0, NULL, "false", AGREE,
     "JSONL: render records with the chat template"},
    {"data.chat_template", K_ENUM, OFF(data.chat_template), 0, 0, chat_formats, "auto", LOCAL,
     "auto (the tokenizer's, recognised), chatml, qwen3 or llama3"},
    {"data.max_len", K_INT, OFF(data.max_len), 0, 1 << 24, NULL, "0", AGREE,
     "tokens per SFT sample, longer ones cut (0: train.seq_len + 1)"},
    {"data.multiturn", K_BOOL, OFF(data.multiturn), 0, 0, NULL, "false", AGREE,
     "JSONL messages: train every assistant turn, not only the last"},
    {"data.loss_mask", K_ENUM, OFF(data.loss_mask), 0, 0, loss_masks, "ranges", AGREE,
     "ranges (response tokens by their bytes) or openrlhf (OpenRLHF's exact mask)"},
    {"data.packing", K_BOOL, OFF(data.packing), 0, 0, NULL, "false", AGREE,
     "SFT: samples packed in file order into rows of train.seq_len, attention confined to each"},

    {"optim.lr", K_FLOAT, OFF(optim.lr), 0, 10, NULL, "2e-3", AGREE, "peak learning rate"},
    {"optim.min_lr_ratio", K_FLOAT, OFF(optim.min_lr_ratio), 0, 1, NULL, "0.1", AGREE,
     "decay floor as a fraction of lr"},
    {"optim.warmup_steps", K_INT, OFF(optim.warmup_steps), 0, INT_MAX, NULL, "20", AGREE, "linear warmup steps"},
    {"optim.decay_steps", K_INT, OFF(optim.decay_steps), 0, INT_MAX, NULL, "0", AGREE,
     "decay length after warmup (0: to train.max_steps)"},
    {"optim.lr_decay", K_ENUM, OFF(optim.decay), 0, 0, lr_decays, "cosine", AGREE, "cosine, linear or constant"},
    {"optim.betas", K_FLOAT2, OFF(optim.beta1), 0, 1, NULL, NULL, LOCAL, "AdamW [beta1, beta2]"},
    {"optim.beta1", K_FLOAT, OFF(optim.beta1), 0, 1, NULL, "0.9", AGREE, "AdamW beta1"},
    {"optim.beta2", K_FLOAT, OFF(optim.beta2), 0, 1, NULL, "0.95", AGREE, "AdamW beta2"},
    {"optim.eps", K_FLOAT, OFF(optim.eps), 0, 1, NULL, "1e-8", AGREE, "AdamW epsilon"},
    {"optim.weight_decay", K_FLOAT, OFF(optim.weight_decay), 0, 10, NULL, "0.1", AGREE,
     "decoupled weight decay on 2-D+ weights"},
    {"optim.max_grad_norm", K_FLOAT, OFF(optim.max_grad_norm), 0, BIG, NULL, "1", AGREE,
     "clip the global gradient norm (0: off)"},
    {"optim.offload_dir", K_STR, OFF(optim.offload_dir), 0, 0, NULL, "", LOCAL,
     "an existing directory (local NVMe/disk) for each rank's file of AdamW moments, streamed through the step in "
     "chunks (DeepSpeed offload_optimizer nvme_path; \"\": moments in memory); on train.device cuda implies "
     "fsdp.cpu_offload (the update runs on the CPU)"},
    {"optim.offload_sub_group_size", K_INT64, OFF(optim.offload_chunk_numel), 1, BIG, NULL, "8388608", LOCAL,
     "with optim.offload_dir: parameters per chunk streamed through the step (DeepSpeed sub_group_size; rounded up "
     "to 1024, at most 134217728); each chunk buffer holds 8 bytes per parameter"},
    {"optim.offload_pipeline", K_BOOL, OFF(optim.offload_pipeline), 0, 0, NULL, "true", LOCAL,
     "with optim.offload_dir: read chunk k+1 and write k-1 while k is updated (three chunk buffers; false: one)"},

    {"train.batch_size", K_INT, OFF(train.batch_size), 1, 1 << 20, NULL, "16", AGREE,
     "sequences per micro-batch per rank"},
    {"train.grad_accum", K_INT, OFF(train.grad_accum), 1, 1 << 20, NULL, "1", AGREE,
     "micro-batches per optimizer step"},
    {"train.seq_len", K_INT, OFF(train.seq_len), 1, 1 << 24, NULL, "128", AGREE, "tokens per sequence (T)"},
    {"train.max_steps", K_INT64, OFF(train.max_steps), 0, BIG, NULL, "400", AGREE, "optimizer steps"},
    {"train.seed", K_U64, OFF(train.seed), 0, 0, NULL, "1", AGREE, "parameter initialisation seed"},
    {"train.log_every", K_INT, OFF(train.log_every), 1, INT_MAX, NULL, "10", LOCAL, "print a line every N steps"},
    {"train.threads", K_INT, OFF(train.threads), 0, 4096, NULL, "0", LOCAL, "threads per process (0: its CPUs)"},
    {"train.out_dir", K_STR, OFF(train.out_dir), 0, 0, NULL, "runs/kjv", AGREE,
     "run directory: metrics, config, final weights"},
    {"train.metrics_path", K_STR, OFF(train.metrics_path), 0, 0, NULL, "", LOCAL,
     "JSON-lines metrics file (default out_dir/metrics.jsonl)"},
    {"train.overwrite_output_dir", K_BOOL, OFF(train.overwrite_output_dir), 0, 0, NULL, "false", AGREE,
     "start over in an out_dir that holds another run: delete its checkpoints, weights and metrics (without it such a "
     "run is refused)"},
    {"train.epochs", K_FLOAT, OFF(train.epochs), 0, 1e9, NULL, "0", LOCAL,
     "passes over the data (> 0: sets max_steps = ceil(epochs * windows / sequences per step))"},
    {"train.timeout", K_INT, OFF(train.timeout), 0, INT_MAX, NULL, "600", LOCAL,
     "step watchdog: seconds without progress before every rank reports and exits (0: off)"},
    {"train.max_bad_steps", K_INT, OFF(train.max_bad_steps), 1, INT_MAX, NULL, "3", AGREE,
     "stop after this many non-finite (skipped) steps in a row"},
    {"train.trainable", K_STR, OFF(trainable), 0, 0, NULL, "", AGREE,
     "fnmatch globs of the parameters that train, a list or comma-separated (\"\": all); the others are frozen"},
    {"train.loss_normalization", K_ENUM, OFF(train.loss_normalization), 0, 0, loss_norms, "global_tokens", AGREE,
     "global_tokens (loss / valid targets of the whole step) or micro_batch (mean of each micro-batch's mean)"},
    {"train.device", K_ENUM, OFF(train.device), 0, 0, devices, "cpu", AGREE,
     "cpu or cuda: where the model, the engine and the optimizer run (cuda needs a build with nvcc, an NVIDIA driver "
     "and GPU, and cuBLASLt)"},

    {"fsdp.sharding_strategy", K_ENUM, OFF(fsdp.engine.strategy), 0, 0, strategies, "FULL_SHARD", AGREE,
     "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD"},
    {"fsdp.fsdp_size", K_INT, OFF(fsdp.engine.fsdp_size), 0, 1 << 24, NULL, "0", AGREE,
     "HYBRID_SHARD shard-group size (>= world or <= 1: plain FSDP)"},
    {"fsdp.reshard_after_forward", K_RESHARD, OFF(fsdp.engine.reshard_after_forward), 2, 1 << 24, NULL, "auto", AGREE,
     "free gathered parameters after forward: true, false, auto (per strategy) or N, a divisor > 1 of the shard "
     "group: keep units sharded over N ranks until backward (FSDP2's int)"},
    {"fsdp.param_dtype", K_DTYPE, OFF(fsdp.engine.param_dtype), 0, 0, NULL, "fp32", AGREE,
     "gather and compute parameters in fp32, bf16 or fp16"},
    {"fsdp.reduce_dtype", K_DTYPE, OFF(fsdp.engine.reduce_dtype), 0, 0, NULL, "fp32", AGREE,
     "reduce gradients in fp32 or bf16"},
    {"fsdp.forward_prefetch", K_BOOL, OFF(fsdp.engine.forward_prefetch), 0, 0, NULL, "false", AGREE,
     "gather the next unit during forward"},
    {"fsdp.backward_prefetch", K_ENUM, OFF(fsdp.engine.backward_prefetch), 0, 0, prefetches, "BACKWARD_PRE", AGREE,
     "BACKWARD_PRE, BACKWARD_POST or NONE"},
    {"fsdp.forward_prefetch_depth", K_INT, OFF(fsdp.engine.forward_prefetch_depth), 1, 1024, NULL, "1", AGREE,
     "units gathered ahead in forward when forward_prefetch is on (num_to_forward_prefetch)"},
    {"fsdp.backward_prefetch_depth", K_INT, OFF(fsdp.engine.backward_prefetch_depth), 1, 1024, NULL, "1", AGREE,
     "units gathered ahead in backward (num_to_backward_prefetch); limit_all_gathers caps both"},
    {"fsdp.limit_all_gathers", K_LIMIT, OFF(fsdp.engine.limit_all_gathers), 0, 1 << 20, NULL, "false", AGREE,
     "max gathered non-root units (true = 2, false = no limit)"},
    {"fsdp.no_sync", K_BOOL, OFF(fsdp.engine.no_sync), 0, 0, NULL, "false", AGREE,
     "reduce gradients once per step, not every micro-batch"},
    {"mesh.sp", K_INT, OFF(mesh.sp), 1, 1 << 20, NULL, "1", AGREE,
     "Ulysses sequence parallelism: ranks sharing each sequence (divides train.seq_len and model.num_heads)"},
    {"mesh.tp", K_INT, OFF(mesh.tp), 1, 1 << 20, NULL, "1", AGREE,
     "tensor parallelism: Megatron plan over tp consecutive ranks (src/model/tp.h)"},
    {"fsdp.activation_checkpointing", K_BOOL, OFF(fsdp.activation_checkpointing), 0, 0, NULL, "false", AGREE,
     "recompute each block in backward"},
    {"fsdp.apply_tiled_mlp", K_BOOL, OFF(fsdp.apply_tiled_mlp), 0, 0, NULL, "false", AGREE,
     "run each block's MLP over sequence chunks, recomputing them in backward (ROLL; note [tiled-mlp])"},
    {"fsdp.moe_experts", K_BOOL, OFF(model.experts_as_units), 0, 0, NULL, "false", AGREE,
     "each Mixture-of-Experts expert its own FSDP unit (ROLL's wrap_policy.moe_experts; note [moe-units])"},
    {"fsdp.tiled_num_shards", K_INT, OFF(fsdp.tiled_num_shards), 1, 1 << 20, NULL, "4", LOCAL,
     "chunks of the tiled MLP (ROLL's default 4)"},

    {"ckpt.dir", K_STR, OFF(ckpt.dir), 0, 0, NULL, "", AGREE, "checkpoint directory (default out_dir/checkpoints)"},
    {"ckpt.every", K_INT, OFF(ckpt.every), 0, INT_MAX, NULL, "0", AGREE,
     "steps between checkpoints (0: only at the end)"},
    {"ckpt.keep", K_INT, OFF(ckpt.keep), 1, INT_MAX, NULL, "2", AGREE, "newest checkpoints kept"},
    {"ckpt.async", K_BOOL, OFF(ckpt.async), 0, 0, NULL, "false", AGREE,
     "write checkpoints in the background from a copy in memory"},
    {"ckpt.resume", K_STR, OFF(ckpt.resume), 0, 0, NULL, "none", AGREE,
     "none, auto (newest valid checkpoint) or a checkpoint path"},
    {"fsdp.cpu_offload", K_BOOL, OFF(fsdp.cpu_offload), 0, 0, NULL, "false", AGREE,
     "train.device cuda: fp32 master shards, gradient shards, AdamW moments and step in host memory "
     "(FSDP2 CPUOffloadPolicy), any sharding strategy; implied there by optim.offload_dir; train.device cpu: no "
     "effect (warns)"},
    {"fsdp.use_orig_params", K_BOOL, OFF(fsdp.use_orig_params), 0, 0, NULL, "false", LOCAL,
     "accepted for FSDP1 configs; no effect (parameters keep their names and shapes)"},
    {"fsdp.wrap_policy", K_ENUM, OFF(fsdp.wrap_policy), 0, 0, wrap_policies, "transformer_block", LOCAL,
     "transformer_block (one unit per block; others warn)"},
    /* telemetry and validation (src/train/telemetry.c, src/train/eval.c) */
    {"log.peak_tflops", K_FLOAT, OFF(log.peak_tflops), 0, BIG, NULL, "0", LOCAL,
     "peak TFLOP/s of one rank for mfu(%), bf16 when computing in bf16 (0: measured at start)"},
    {"log.debug", K_BOOL, OFF(log.debug), 0, 0, NULL, "false", LOCAL,
     "per-rank JSON lines of each step in out_dir/debug/rank-N.log"},
    {"log.eval_every", K_INT, OFF(log.eval_every), 0, INT_MAX, NULL, "0", AGREE,
     "validation loss on data.val_path every N steps (0: off)"},
    {"log.eval_batches", K_INT, OFF(log.eval_batches), 0, INT_MAX, NULL, "0", AGREE,
     "micro-batches per validation, all ranks together (0: every window)"},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

/* ------------------------------------------------------------- setting */

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

static const key_def *find_key(const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

static const char *closest_alias(const char *name, int *bd);

static sharc_status unknown_key(const char *name, const char *origin) {
    char clip[SHARC_CLIP_BUF];
    const char *best = NULL;
    int bd = 4;
    for (int i = 0; i < NKEYS; i++) {
        int d = edit_distance(name, keys[i].name);
        if (d < bd) {
            bd = d;
            best = keys[i].name;
        }
    }
    const char *alias = closest_alias(name, &bd);
    if (alias) best = alias;
    if (best)
        return sharc_error(SHARC_ERR_INVALID,
                           "%s: unknown key '%s'; did you mean '%s'? (sharc config --keys lists them)", origin,
                           sharc_clip(clip, name), best);
    return sharc_error(SHARC_ERR_INVALID, "%s: unknown key '%s' (sharc config --keys lists them)", origin,
                       sharc_clip(clip, name));
}

static sharc_status bad_value(const key_def *k, const char *value, const char *origin, const char *expected) {
    char clip[SHARC_CLIP_BUF];
    return sharc_error(SHARC_ERR_INVALID, "%s: %s = '%s': expected %s", origin, k->name, sharc_clip(clip, value),
                       expected);
}

static sharc_status parse_number(const key_def *k, const char *value, const char *origin, double *out, bool integer) {
    char *end;
    errno = 0;
    double v = integer ? (double)strtoll(value, &end, 10) : strtod(value, &end);
    while (*end == ' ') end++;
    if (end == value || *end || errno == ERANGE || !isfinite(v)) {
        return bad_value(k, value, origin, integer ? "an integer" : "a number");
    }
    if (k->type != K_U64 && (v < k->min || v > k->max)) {
        char what[160];
        if (k->max >= BIG) snprintf(what, sizeof what, "a value >= %.15g", k->min);
        else snprintf(what, sizeof what, "a value in [%.15g, %.15g]", k->min, k->max);
        return bad_value(k, value, origin, what);
    }
    *out = v;
    return SHARC_OK;
}

static sharc_status set_key(sharc_config *c, const key_def *k, const char *value, const char *origin) {
    char *dst = (char *)c + k->off;
    double v;
    switch (k->type) {
    case K_INT:
        SHARC_TRY(parse_number(k, value, origin, &v, true));
        *(int *)dst = (int)v;
        return SHARC_OK;
    case K_INT64:
        SHARC_TRY(parse_number(k, value, origin, &v, true));
        *(int64_t *)dst = (int64_t)v;
        return SHARC_OK;
    case K_U64: {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(value, &end, 10);
        if (end == value || *end || errno == ERANGE || value[0] == '-')
            return bad_value(k, value, origin, "a non-negative integer");
        *(uint64_t *)dst = u;
        return SHARC_OK;
    }
    case K_FLOAT:
        SHARC_TRY(parse_number(k, value, origin, &v, false));
        *(float *)dst = (float)v;
        return SHARC_OK;
    case K_BOOL:
        if (!strcasecmp(value, "true") || !strcasecmp(value, "yes") || !strcasecmp(value, "on") || !strcmp(value, "1"))
            *(bool *)dst = true;
        else if (!strcasecmp(value, "false") || !strcasecmp(value, "no") || !strcasecmp(value, "off") ||
                 !strcmp(value, "0"))
            *(bool *)dst = false;
        else return bad_value(k, value, origin, "true or false");
        return SHARC_OK;
    case K_STR:
        if (strlen(value) >= SHARC_PATH_MAX) return bad_value(k, value, origin, "at most 1023 bytes");
        snprintf(dst, SHARC_PATH_MAX, "%s", value);
        return SHARC_OK;
    case K_ENUM: {
        char allowed[256] = "one of";
        for (int i = 0; k->choices[i]; i++) {
            if (!strcasecmp(value, k->choices[i])) {
                *(int *)dst = i;
                return SHARC_OK;
            }
            strncat(allowed, i ? ", " : " ", sizeof allowed - strlen(allowed) - 1);
            strncat(allowed, k->choices[i], sizeof allowed - strlen(allowed) - 1);
        }
        return bad_value(k, value, origin, allowed);
    }
    case K_DTYPE: {
        static const struct {
            const char *name;
            sharc_dtype dt;
        } names[] = {{"fp32", SHARC_DT_F32},      {"float32", SHARC_DT_F32}, {"bf16", SHARC_DT_BF16},
                     {"bfloat16", SHARC_DT_BF16}, {"fp16", SHARC_DT_F16},    {"float16", SHARC_DT_F16}};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strcasecmp(value, names[i].name)) {
                *(sharc_dtype *)dst = names[i].dt;
                return SHARC_OK;
            }
        return bad_value(k, value, origin, "fp32, bf16 or fp16");
    }
    case K_RESHARD: /* note [post-forward] in src/fsdp/plan.c; the shard group checks N */
        if (!strcasecmp(value, "auto")) *(int *)dst = -1;
        else if (!strcasecmp(value, "true") || !strcasecmp(value, "yes")) *(int *)dst = 1;
        else if (!strcasecmp(value, "false") || !strcasecmp(value, "no")) *(int *)dst = 0;
        else {
            const char *want = "true, false, auto or a number of ranks N >= 2 that divides the shard group "
                               "(1 would keep whole units: write false)";
            char *end;
            errno = 0;
            long long n = strtoll(value, &end, 10);
            while (*end == ' ') end++;
            if (end == value || *end || errno == ERANGE || n < k->min || n > k->max)
                return bad_value(k, value, origin, want);
            *(int *)dst = (int)n;
        }
        return SHARC_OK;
    case K_LIMIT:
        if (!strcasecmp(value, "true") || !strcasecmp(value, "yes")) *(int *)dst = 2;
        else if (!strcasecmp(value, "false") || !strcasecmp(value, "no")) *(int *)dst = 0;
        else {
            SHARC_TRY(parse_number(k, value, origin, &v, true));
            *(int *)dst = (int)v;
        }
        return SHARC_OK;
    case K_FLOAT2: {
        /* "[a, b]" or "a,b" */
        char buf[128];
        if (strlen(value) >= sizeof buf) return bad_value(k, value, origin, "a list of two numbers, e.g. [0.9, 0.95]");
        snprintf(buf, sizeof buf, "%s", value);
        char *p = buf;
        if (*p == '[') p++;
        char *q = strrchr(p, ']');
        if (q) *q = 0;
        char *comma = strchr(p, ',');
        if (!comma) return bad_value(k, value, origin, "a list of two numbers, e.g. [0.9, 0.95]");
        *comma = 0;
        double a, b;
        SHARC_TRY(parse_number(k, p, origin, &a, false));
        SHARC_TRY(parse_number(k, comma + 1, origin, &b, false));
        ((float *)dst)[0] = (float)a;
        ((float *)dst)[1] = (float)b;
        return SHARC_OK;
    }
    }
    return SHARC_ERR_INTERNAL;
}

/* ------------------------------------------------------------ defaults */

void sharc_config_default(sharc_config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++)
        if (keys[i].def && set_key(c, &keys[i], keys[i].def, "the key table's default") != SHARC_OK)
            sharc_fatal(__FILE__, __LINE__, "config: %s", sharc_last_error()); /* a broken row */
}

/* FNV-1a: a string's fingerprint. */
static int64_t text_hash(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (int64_t)h;
}

int sharc_config_agreed_values(const sharc_config *c, sharc_config_agreed *out, int max) {
    int n = 0;
    for (int i = 0; i < NKEYS; i++) {
        const key_def *k = &keys[i];
        if (!k->agree || n++ >= max) continue;
        const char *src = (const char *)c + k->off;
        sharc_config_agreed *a = &out[n - 1];
        a->key = k->name;
        a->text = NULL;
        switch (k->type) {
        case K_INT:
        case K_ENUM:
        case K_RESHARD:
        case K_LIMIT: a->value = *(const int *)src; break;
        case K_INT64: a->value = *(const int64_t *)src; break;
        case K_U64: a->value = (int64_t) * (const uint64_t *)src; break;
        case K_BOOL: a->value = *(const bool *)src; break;
        case K_DTYPE: a->value = *(const sharc_dtype *)src; break;
        case K_FLOAT:
        case K_FLOAT2: { /* the bits: -0.0 and 0.0, or two NaNs, are different settings */
            int32_t bits;
            memcpy(&bits, src, sizeof bits);
            a->value = bits;
            break;
        }
        case K_STR:
            a->value = text_hash(src);
            a->text = src;
            break;
        }
    }
    return n;
}

/* ------------------------------------------------------------ aliases
 *
 * Note [aliases]. Users paste their FSDP1 / FSDP2 / Lightning / ROLL knobs.
 * A key that is not in `keys` is resolved in two steps:
 *  1. containers: a known wrapper anywhere in the dotted name is replaced by
 *     the sharc section it means, dropping everything before it
 *     ("actor_train.strategy_args.strategy_config.fsdp_size" -> "fsdp.fsdp_size",
 *     "training_stages.stage1.distributed.fsdp.cpu_offload" after the stage
 *     prefix -> "fsdp.cpu_offload");
 *  2. the result is looked up in `keys`, then in `aliases`: a rename, an
 *     inverted bool, a precision name, a wrap-policy name, or a key accepted
 *     without effect (recorded in c->notes with why, and printed as a warning
 *     at start unless its value is the harmless one). */

static const struct {
    const char *from, *to;
} containers[] = {
    /* longest first */
    {"strategy_args.strategy_config", "fsdp"},
    {"distributed.fsdp", "fsdp"},
    {"strategy_config", "fsdp"},
    {"strategy_args", "fsdp"},
    {"fsdp_config", "fsdp"},
    {"training_args", "train"},
    {"training", "train"},
    {"runtime", "train"},
    {"model_args", "model"},
};

typedef enum { A_KEY, A_NOT, A_PRECISION, A_WRAP, A_NOTE, A_COUNT, A_EXPERTS } alias_kind;

typedef struct {
    const char *name; /* after container rewriting */
    alias_kind kind;
    const char *target; /* A_KEY/A_NOT/A_WRAP: the key set */
    const char *quiet;  /* A_NOTE: the value that needs no warning (NULL: any value is quiet; "!": never quiet) */
    const char *why;    /* A_NOTE: the reason printed */
} alias_def;

static const alias_def aliases[] = {
    /* FSDP2 / ROLL strategy_config */
    {"fsdp.offload_policy", A_KEY, "fsdp.cpu_offload", NULL, NULL},
    {"adam_offload", A_KEY, "fsdp.cpu_offload", NULL, NULL}, /* OpenRLHF's --adam_offload */
    /* the moments on disk (note [optim-offload]): the offload.dir,
     * DeepSpeed's zero_optimization.offload_optimizer */
    {"offload.dir", A_KEY, "optim.offload_dir", NULL, NULL},
    {"offload_optimizer.nvme_path", A_KEY, "optim.offload_dir", NULL, NULL},
    {"sub_group_size", A_KEY, "optim.offload_sub_group_size", NULL, NULL},
    {"zero_optimization.sub_group_size", A_KEY, "optim.offload_sub_group_size", NULL, NULL},
    {"zero_optimization.offload_optimizer.nvme_path", A_KEY, "optim.offload_dir", NULL, NULL},
    {"offload_optimizer.device", A_NOTE, NULL, "nvme",
     "sharc keeps the optimizer in host memory unless optim.offload_dir (offload_optimizer.nvme_path) names a "
     "directory for the moments"},
    {"zero_optimization.offload_optimizer.device", A_NOTE, NULL, "nvme",
     "sharc keeps the optimizer in host memory unless optim.offload_dir (offload_optimizer.nvme_path) names a "
     "directory for the moments"},
    {"fsdp.auto_wrap_policy", A_WRAP, "fsdp.wrap_policy", NULL, NULL},
    {"fsdp.mixed_precision", A_PRECISION, NULL, NULL, NULL},
    {"fsdp.precision", A_PRECISION, NULL, NULL, NULL},
    {"fsdp.sharding", A_KEY, "fsdp.sharding_strategy", NULL, NULL},
    {"fsdp.wrap_policy.transformer_layer_cls_to_wrap", A_NOTE, NULL, NULL,
     "sharc always makes one unit per transformer block"},
    {"fsdp.wrap_policy.wrap_embeddings", A_NOTE, NULL, "true",
     "not implemented: sharc always gives the embeddings their own unit"},
    {"fsdp.wrap_policy.wrap_lm_output", A_NOTE, NULL, "true",
     "not implemented: sharc always gives the final norm and LM head their own unit"},
    {"fsdp.wrap_policy.moe_experts", A_EXPERTS, "fsdp.moe_experts", NULL, NULL},
    {"fsdp.apply_expert_patch", A_NOTE, NULL, "false",
     "not needed: every rank gathers every expert from the static unit schedule, whatever the routing"},
    {"fsdp.strategy_name", A_NOTE, NULL, NULL, "sharc always trains with FSDP"},
    /* MindSpeed-MM's fsdp2 config: how many units to prefetch (0 = off) */
    {"fsdp.num_to_forward_prefetch", A_COUNT, "fsdp.forward_prefetch", NULL, NULL},
    {"fsdp.num_to_backward_prefetch", A_COUNT, "fsdp.backward_prefetch", NULL, NULL},
    {"fsdp.sharding_size", A_KEY, "fsdp.fsdp_size", NULL, NULL},
    /* the mesh's model-parallel degrees: ROLL's model_args.ulysses_size,
     * OpenRLHF's fsdp_tensor_parallel_size, torchtitan's degrees */
    {"model.ulysses_size", A_KEY, "mesh.sp", NULL, NULL},
    {"ulysses_size", A_KEY, "mesh.sp", NULL, NULL},
    {"fsdp.ulysses_size", A_KEY, "mesh.sp", NULL, NULL},
    {"train.ulysses_size", A_KEY, "mesh.sp", NULL, NULL},
    {"fsdp_tensor_parallel_size", A_KEY, "mesh.tp", NULL, NULL},
    {"train.fsdp_tensor_parallel_size", A_KEY, "mesh.tp", NULL, NULL},
    {"tensor_parallel_size", A_KEY, "mesh.tp", NULL, NULL},
    {"fsdp.tensor_parallel_size", A_KEY, "mesh.tp", NULL, NULL},
    {"model.tensor_parallel_size", A_KEY, "mesh.tp", NULL, NULL},
    {"parallelism.tensor_parallel_degree", A_KEY, "mesh.tp", NULL, NULL},
    {"fsdp.enabled", A_NOTE, NULL, "true",
     "not implemented: sharc always shards (use fsdp.sharding_strategy: NO_SHARD for DDP)"},
    /* Lightning `distributed:` block: the launcher decides ranks */
    {"distributed.strategy", A_NOTE, NULL, "fsdp",
     "sharc always trains with FSDP; fsdp.sharding_strategy picks the variant"},
    {"distributed.num_nodes", A_NOTE, NULL, "!",
     "no effect: ranks and nodes come from the launcher (sharc launch -n N, mpirun, srun)"},
    {"distributed.devices", A_NOTE, NULL, "!",
     "no effect: ranks and nodes come from the launcher (sharc launch -n N, mpirun, srun)"},
    {"distributed.sync_batchnorm", A_NOTE, NULL, "false", "not implemented: sharc's models have no batch norm"},
    /* trainer arguments (training:, training_args:, runtime:, model_args:) */
    {"train.gradient_accumulation_steps", A_KEY, "train.grad_accum", NULL, NULL},
    {"train.per_device_train_batch_size", A_KEY, "train.batch_size", NULL, NULL},
    {"train.micro_train_batch_size", A_KEY, "train.batch_size", NULL, NULL},
    {"train.num_train_epochs", A_KEY, "train.epochs", NULL, NULL},
    {"train.learning_rate", A_KEY, "optim.lr", NULL, NULL},
    {"train.weight_decay", A_KEY, "optim.weight_decay", NULL, NULL},
    {"train.warmup_steps", A_KEY, "optim.warmup_steps", NULL, NULL},
    {"train.max_grad_norm", A_KEY, "optim.max_grad_norm", NULL, NULL},
    {"train.mixed_precision", A_PRECISION, NULL, NULL, NULL},
    {"train.precision", A_PRECISION, NULL, NULL, NULL},
    {"train.gradient_checkpointing", A_KEY, "fsdp.activation_checkpointing", NULL, NULL},
    {"train.devices", A_NOTE, NULL, "!", "no effect: ranks come from the launcher (sharc launch -n N, mpirun, srun)"},
    {"model.dtype", A_PRECISION, NULL, NULL, NULL},
    {"model.disable_gradient_checkpointing", A_NOT, "fsdp.activation_checkpointing", NULL, NULL},
    {"epochs", A_KEY, "train.epochs", NULL, NULL},
    /* OpenRLHF's SFT options (its newer dotted names; the flags are main.c's shorthands) */
    {"data.dataset", A_KEY, "data.path", NULL, NULL},
    {"data.packing_samples", A_KEY, "data.packing", NULL, NULL},
};
#define NALIASES ((int)(sizeof aliases / sizeof aliases[0]))

static const char *closest_alias(const char *name, int *bd) {
    const char *best = NULL;
    for (int i = 0; i < NALIASES; i++) {
        int d = edit_distance(name, aliases[i].name);
        if (d < *bd) {
            *bd = d;
            best = aliases[i].name;
        }
    }
    return best;
}

/* Step 1 of note [aliases]: the key with its container replaced (or copied). */
static void rewrite_containers(const char *key, char *out, size_t n) {
    for (size_t i = 0; i < sizeof containers / sizeof containers[0]; i++) {
        size_t fl = strlen(containers[i].from);
        for (const char *p = key; (p = strstr(p, containers[i].from)) != NULL; p++) {
            if ((p == key || p[-1] == '.') && p[fl] == '.') {
                snprintf(out, n, "%s%s", containers[i].to, p + fl);
                return;
            }
        }
    }
    snprintf(out, n, "%s", key);
}

static const alias_def *find_alias(const char *name) {
    for (int i = 0; i < NALIASES; i++)
        if (strcmp(aliases[i].name, name) == 0) return &aliases[i];
    return NULL;
}

static bool parse_bool(const char *v, bool *out) {
    if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") || !strcmp(v, "1")) *out = true;
    else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off") || !strcmp(v, "0")) *out = false;
    else return false;
    return true;
}

static void add_note(sharc_config *c, const char *key, const char *value, const char *why) {
    char line[400];
    snprintf(line, sizeof line, "%s = '%.60s': %s\n", key, value, why);
    if (strstr(c->notes, line)) return; /* once per key and value */
    if (strlen(c->notes) + strlen(line) < sizeof c->notes) strcat(c->notes, line);
}

sharc_status sharc_config_set_precision(sharc_config *c, const char *value, const char *origin) {
    static const struct {
        const char *name;
        sharc_dtype param, reduce;
    } names[] = {
        {"fp32", SHARC_DT_F32, SHARC_DT_F32},        {"32", SHARC_DT_F32, SHARC_DT_F32},
        {"32-true", SHARC_DT_F32, SHARC_DT_F32},     {"float32", SHARC_DT_F32, SHARC_DT_F32},
        {"full", SHARC_DT_F32, SHARC_DT_F32},        {"bf16", SHARC_DT_BF16, SHARC_DT_F32},
        {"bfloat16", SHARC_DT_BF16, SHARC_DT_F32},   {"bf16-mixed", SHARC_DT_BF16, SHARC_DT_F32},
        {"bf16-true", SHARC_DT_BF16, SHARC_DT_BF16}, {"fp16", SHARC_DT_F16, SHARC_DT_F32},
        {"16", SHARC_DT_F16, SHARC_DT_F32},          {"16-mixed", SHARC_DT_F16, SHARC_DT_F32},
        {"float16", SHARC_DT_F16, SHARC_DT_F32},     {"fp16-mixed", SHARC_DT_F16, SHARC_DT_F32},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char alt[32]; /* bf16_mixed == bf16-mixed */
        snprintf(alt, sizeof alt, "%s", names[i].name);
        for (char *q = alt; *q; q++)
            if (*q == '-') *q = '_';
        if (!strcasecmp(value, names[i].name) || !strcasecmp(value, alt)) {
            c->fsdp.engine.param_dtype = names[i].param;
            c->fsdp.engine.reduce_dtype = names[i].reduce;
            return SHARC_OK;
        }
    }
    char clip[SHARC_CLIP_BUF];
    return sharc_error(SHARC_ERR_INVALID,
                       "%s: precision '%s': expected fp32, 32-true, bf16, bf16-mixed, bf16-true, fp16, 16-mixed "
                       "(sets fsdp.param_dtype and fsdp.reduce_dtype)",
                       origin, sharc_clip(clip, value));
}

static const struct {
    const char *name, *yaml;
} presets[] = {
    /* From the Lightning FSDP seed's distributed_examples (single_node_fsdp,
     * multi_node_fsdp, large_scale_fsdp), without cpu_offload (parameters
     * already live in host memory here) and the launcher's num_nodes/devices. */
    {"single_node", "fsdp:\n  sharding_strategy: FULL_SHARD\n  activation_checkpointing: true\n"},
    {"multi_node", "fsdp:\n  sharding_strategy: FULL_SHARD\n  activation_checkpointing: true\n"
                   "  backward_prefetch: BACKWARD_PRE\n  limit_all_gathers: true\n"},
    {"large_scale", "fsdp:\n  sharding_strategy: FULL_SHARD\n  activation_checkpointing: true\n"
                    "  backward_prefetch: BACKWARD_PRE\n  forward_prefetch: true\n  limit_all_gathers: true\n"
                    "  use_orig_params: false\n"},
};

sharc_status sharc_config_apply_preset(sharc_config *c, const char *name, const char *origin) {
    char base[64];
    snprintf(base, sizeof base, "%s", name);
    size_t bl = strlen(base);
    if (bl > 5 && strcmp(base + bl - 5, "_fsdp") == 0) base[bl - 5] = 0; /* the seed's single_node_fsdp */
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcasecmp(base, presets[i].name)) {
            char o[400];
            snprintf(o, sizeof o, "preset %s", presets[i].name);
            return sharc_config_load_string(c, presets[i].yaml, o);
        }
    char clip[SHARC_CLIP_BUF];
    return sharc_error(SHARC_ERR_INVALID, "%s: preset = '%s': expected one of single_node, multi_node, large_scale",
                       origin, sharc_clip(clip, name));
}

/* training_stages.NAME.rest: applied when NAME is the selected stage, else
 * checked on a scratch copy (so a typo in any stage fails at once). */
static sharc_status set_stage_key(sharc_config *c, const char *key, const char *value, const char *origin) {
    char clip[SHARC_CLIP_BUF];
    const char *name = key + strlen("training_stages.");
    const char *dot = strchr(name, '.');
    if (!dot || dot == name || (size_t)(dot - name) >= sizeof c->stage)
        return sharc_error(SHARC_ERR_INVALID, "%s: '%s': expected training_stages.STAGE.section.key", origin,
                           sharc_clip(clip, key));
    char sname[48];
    snprintf(sname, sizeof sname, "%.*s", (int)(dot - name), name);
    bool seen = false;
    for (int i = 0; i < c->num_stages; i++) seen |= strcmp(c->stages[i], sname) == 0;
    if (!seen) {
        if (c->num_stages >= SHARC_MAX_STAGES)
            return sharc_error(SHARC_ERR_INVALID, "%s: more than %d training stages", origin, SHARC_MAX_STAGES);
        snprintf(c->stages[c->num_stages++], sizeof c->stages[0], "%s", sname);
    }
    if (strcmp(c->stage, sname) == 0) {
        if (c->stage_pass == 1) return SHARC_OK; /* applied in pass 2, over the whole file */
        int pass = c->stage_pass;
        c->stage_pass = 0;
        sharc_status st = sharc_config_set(c, dot + 1, value, origin);
        c->stage_pass = pass;
        return st;
    }
    if (c->stage_pass == 2) return SHARC_OK; /* checked in pass 1 */
    sharc_config *scratch = malloc(sizeof *scratch);
    if (!scratch) return sharc_error(SHARC_ERR_NOMEM, "config: out of memory");
    sharc_config_default(scratch);
    sharc_status st = sharc_config_set(scratch, dot + 1, value, origin);
    free(scratch);
    return st;
}

sharc_status sharc_config_set(sharc_config *c, const char *key, const char *value, const char *origin) {
    if (c->stage_pass == 2 && strncmp(key, "training_stages.", 16) != 0) return SHARC_OK;
    char clip[SHARC_CLIP_BUF];
    const key_def *k = find_key(key);
    if (k) return set_key(c, k, value, origin);
    if (!strcmp(key, "preset")) return sharc_config_apply_preset(c, value, origin);
    if (!strncmp(key, "training_stages.", 16)) return set_stage_key(c, key, value, origin);
    char canon[512];
    rewrite_containers(key, canon, sizeof canon);
    if ((k = find_key(canon)) != NULL) return set_key(c, k, value, origin);
    const alias_def *a = find_alias(canon);
    if (!a) {
        if (strcmp(canon, key) != 0) {
            sharc_status st = unknown_key(canon, origin);
            char msg[1024];
            snprintf(msg, sizeof msg, "%s (written '%s')", sharc_last_error(), sharc_clip(clip, key));
            return sharc_error(st, "%s", msg);
        }
        return unknown_key(key, origin);
    }
    switch (a->kind) {
    case A_KEY: return set_key(c, find_key(a->target), value, origin);
    case A_NOT: {
        bool b;
        if (!parse_bool(value, &b))
            return sharc_error(SHARC_ERR_INVALID, "%s: %s = '%s': expected true or false", origin, key,
                               sharc_clip(clip, value));
        return set_key(c, find_key(a->target), b ? "false" : "true", origin);
    }
    case A_PRECISION: return sharc_config_set_precision(c, value, origin);
    case A_COUNT: {
        /* a count of units to prefetch: 0 = none, 1 = sharc's one unit ahead, more warns */
        char *end;
        long n = strtol(value, &end, 10);
        if (end == value || *end || n < 0)
            return sharc_error(SHARC_ERR_INVALID, "%s: %s = '%s': expected a count >= 0", origin, key,
                               sharc_clip(clip, value));
        bool fwd = strcmp(a->target, "fsdp.forward_prefetch") == 0;
        if (n > 0)
            SHARC_TRY(set_key(c, find_key(fwd ? "fsdp.forward_prefetch_depth" : "fsdp.backward_prefetch_depth"), value,
                              origin));
        return set_key(c, find_key(a->target), n == 0 ? (fwd ? "false" : "NONE") : (fwd ? "true" : "BACKWARD_PRE"),
                       origin);
    }
    case A_EXPERTS: { /* ROLL lists the expert classes to wrap (["Qwen3MoeMLP"]): any class, or true, turns it on */
        bool b;
        if (parse_bool(value, &b)) return set_key(c, find_key(a->target), b ? "true" : "false", origin);
        return set_key(c, find_key(a->target), *value ? "true" : "false", origin);
    }
    case A_WRAP: {
        static const struct {
            const char *from, *to;
        } w[] = {{"transformer", "transformer_block"},
                 {"transformer_based_wrap", "transformer_block"},
                 {"transformer_auto_wrap_policy", "transformer_block"},
                 {"size_based_wrap", "size"},
                 {"size_based_auto_wrap_policy", "size"},
                 {"no_wrap", "none"}};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (!strcasecmp(value, w[i].from)) return set_key(c, find_key(a->target), w[i].to, origin);
        return set_key(c, find_key(a->target), value, origin);
    }
    case A_NOTE: {
        bool b, q;
        if (a->quiet && (!strcmp(a->quiet, "true") || !strcmp(a->quiet, "false"))) {
            if (!parse_bool(value, &b))
                return sharc_error(SHARC_ERR_INVALID, "%s: %s = '%s': expected true or false", origin, key,
                                   sharc_clip(clip, value));
            parse_bool(a->quiet, &q);
            if (b == q) return SHARC_OK;
        } else if (!a->quiet || (strcmp(a->quiet, "!") != 0 && !strcasecmp(value, a->quiet))) {
            return SHARC_OK;
        }
        add_note(c, key, value, a->why);
        return SHARC_OK;
    }
    }
    return SHARC_ERR_INTERNAL;
}

/* ---------------------------------------------------------------- YAML */

typedef struct {
    yaml_parser_t p;
    sharc_config *c;
    const char *name;
    const char *text;
    size_t len;   /* of the text */
    int settings; /* keys applied */
} yaml_ctx;

static sharc_status yaml_error(const yaml_ctx *y, const yaml_mark_t *m, const char *what) {
    /* libyaml puts the end of a text that lacks its last newline on a line after it */
    size_t lines = 0;
    for (size_t i = 0; i < y->len; i++) lines += y->text[i] == '\n';
    if (y->len > 0 && y->text[y->len - 1] != '\n') lines++;
    size_t line = m->line + 1 > lines && lines > 0 ? lines : m->line + 1;
    return sharc_error(SHARC_ERR_INVALID, "config '%s' line %zu: %s", y->name, line, what);
}

static sharc_status next_event(yaml_ctx *y, yaml_event_t *ev) {
    if (yaml_parser_parse(&y->p, ev)) return SHARC_OK;
    char what[300];
    /* an error at the very end: the text stops inside a value (a truncated file) */
    bool at_end = y->p.problem_mark.index >= y->len;
    snprintf(what, sizeof what, "not valid YAML: %s%s", y->p.problem ? y->p.problem : "parse error",
             at_end ? " (the text ends there, inside a value: a truncated file?)" : "");
    return yaml_error(y, &y->p.problem_mark, what);
}

static sharc_status apply(yaml_ctx *y, const char *key, const yaml_mark_t *m, const char *value) {
    char origin[600];
    snprintf(origin, sizeof origin, "config '%s' line %zu", y->name, m->line + 1);
    y->settings++;
    return sharc_config_set(y->c, key, value, origin);
}

/* A list value: plain scalars joined with commas ("[0.9, 0.95]" -> "0.9,0.95"). */
static sharc_status parse_list(yaml_ctx *y, const char *key, const yaml_mark_t *at) {
    char joined[512] = "";
    for (;;) {
        yaml_event_t ev;
        SHARC_TRY(next_event(y, &ev));
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return apply(y, key, at, joined);
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            sharc_status st = yaml_error(y, &ev.start_mark, "a list may hold only plain values");
            yaml_event_delete(&ev);
            return st;
        }
        size_t have = strlen(joined), add = strlen((const char *)ev.data.scalar.value) + (have ? 1 : 0);
        if (have + add >= sizeof joined) { /* never a silently shorter list */
            /* room for the whole key (parse_mapping's, at most 511 bytes) */
            char what[640];
            snprintf(what, sizeof what, "the list for '%s' is longer than %zu bytes", key, sizeof joined - 1);
            sharc_status st = yaml_error(y, &ev.start_mark, what);
            yaml_event_delete(&ev);
            return st;
        }
        if (joined[0]) strncat(joined, ",", sizeof joined - strlen(joined) - 1);
        strncat(joined, (const char *)ev.data.scalar.value, sizeof joined - strlen(joined) - 1);
        yaml_event_delete(&ev);
    }
}

/* The body of a mapping whose start event was consumed; keys get `prefix.` */
static sharc_status parse_mapping(yaml_ctx *y, const char *prefix, int depth) {
    if (depth > 8) return sharc_error(SHARC_ERR_INVALID, "config '%s': nested too deeply", y->name);
    for (;;) {
        yaml_event_t kev;
        SHARC_TRY(next_event(y, &kev));
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return SHARC_OK;
        }
        if (kev.type != YAML_SCALAR_EVENT) {
            sharc_status st = yaml_error(y, &kev.start_mark, "expected a plain key");
            yaml_event_delete(&kev);
            return st;
        }
        char key[512];
        const char *leaf = (const char *)kev.data.scalar.value;
        if (strlen(prefix) + strlen(leaf) + 2 > sizeof key) {
            sharc_status st = yaml_error(y, &kev.start_mark, "key too long");
            yaml_event_delete(&kev);
            return st;
        }
        size_t pl = strlen(prefix);
        memcpy(key, prefix, pl);
        if (pl) key[pl++] = '.';
        memcpy(key + pl, leaf, strlen(leaf) + 1);
        yaml_mark_t at = kev.start_mark;
        yaml_event_delete(&kev);
        yaml_event_t vev;
        SHARC_TRY(next_event(y, &vev));
        sharc_status st = SHARC_OK;
        switch (vev.type) {
        case YAML_SCALAR_EVENT: st = apply(y, key, &vev.start_mark, (const char *)vev.data.scalar.value); break;
        case YAML_MAPPING_START_EVENT: st = parse_mapping(y, key, depth + 1); break;
        case YAML_SEQUENCE_START_EVENT: st = parse_list(y, key, &at); break;
        default: st = yaml_error(y, &vev.start_mark, "aliases and anchors are not supported"); break;
        }
        yaml_event_delete(&vev);
        if (st != SHARC_OK) return st;
    }
}

static sharc_status load_pass(sharc_config *c, const char *text, const char *origin, int *settings);

/* With a stage selected the text is read twice: the stage's keys override
 * the rest of the file wherever they are written. *settings: keys set. */
static sharc_status load_text(sharc_config *c, const char *text, const char *origin, int *settings) {
    if (!c->stage[0] || c->stage_pass != 0) return load_pass(c, text, origin, settings);
    c->stage_pass = 1;
    sharc_status st = load_pass(c, text, origin, settings);
    c->stage_pass = 2;
    int again;
    if (st == SHARC_OK) st = load_pass(c, text, origin, &again);
    c->stage_pass = 0;
    return st;
}

sharc_status sharc_config_load_string(sharc_config *c, const char *text, const char *origin) {
    int settings;
    return load_text(c, text, origin, &settings);
}

static sharc_status load_pass(sharc_config *c, const char *text, const char *origin, int *settings) {
    yaml_ctx y = {.c = c, .name = origin, .text = text, .len = strlen(text)};
    *settings = 0;
    if (!yaml_parser_initialize(&y.p)) return sharc_error(SHARC_ERR_NOMEM, "config: out of memory");
    yaml_parser_set_input_string(&y.p, (const unsigned char *)text, strlen(text));
    sharc_status st = SHARC_OK;
    int documents = 0;
    for (bool done = false; !done && st == SHARC_OK;) {
        yaml_event_t ev;
        if ((st = next_event(&y, &ev)) != SHARC_OK) break;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = true; break;
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1) st = yaml_error(&y, &ev.start_mark, "only one YAML document is allowed");
            break;
        case YAML_MAPPING_START_EVENT: st = parse_mapping(&y, "", 0); break;
        case YAML_SCALAR_EVENT:
            /* an empty document is a null scalar: nothing to set */
            if (ev.data.scalar.length != 0)
                st = yaml_error(&y, &ev.start_mark, "expected a mapping of sections (model:, data:, ...)");
            break;
        case YAML_SEQUENCE_START_EVENT:
            st = yaml_error(&y, &ev.start_mark, "expected a mapping of sections (model:, data:, ...)");
            break;
        default: break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&y.p);
    *settings = y.settings;
    return st;
}

sharc_status sharc_config_load_file(sharc_config *c, const char *path) {
    char *text;
    size_t len;
    SHARC_TRY(sharc_read_file(path, &text, &len));
    int settings = 0;
    sharc_status st = load_text(c, text, path, &settings);
    /* a file that sets nothing (0 bytes, only comments, {}) is a mistake: a
     * truncated copy or the wrong file, never silently the defaults */
    if (st == SHARC_OK && settings == 0)
        st = sharc_error(SHARC_ERR_INVALID,
                         "config '%s': %s; expected a mapping of sections (model:, data:, optim:, "
                         "train:, fsdp:, ...)",
                         path, len == 0 ? "the file is empty (0 bytes)" : "the file sets no key");
    free(text);
    return st;
}

/* ------------------------------------------------------------ validate */

sharc_status sharc_config_validate(sharc_config *c) {
    sharc_status st = sharc_model_config_validate(&c->model);
    if (st != SHARC_OK) return st;
    if (c->data.path[0] == 0)
        return sharc_error(SHARC_ERR_INVALID, "data.path: empty; set it to a token file or a text file");
    if (c->train.out_dir[0] == 0) return sharc_error(SHARC_ERR_INVALID, "train.out_dir: empty; set a run directory");
    st = sharc_mesh_check_model(&c->mesh, &c->model, c->train.seq_len);
    if (st != SHARC_OK) return st;
    if (c->model.family == SHARC_FAMILY_GPT2 && c->train.seq_len > c->model.max_seq_len)
        return sharc_error(SHARC_ERR_INVALID, "train.seq_len: %d exceeds model.max_seq_len %d (gpt2's position table)",
                           c->train.seq_len, c->model.max_seq_len);
    if (c->fsdp.engine.reduce_dtype != SHARC_DT_F32 && c->fsdp.engine.reduce_dtype != SHARC_DT_BF16)
        return sharc_error(SHARC_ERR_INVALID, "fsdp.reduce_dtype: fp16, expected fp32 or bf16");
    if (c->optim.beta1 >= 1.0f || c->optim.beta2 >= 1.0f)
        return sharc_error(SHARC_ERR_INVALID, "optim.betas: [%g, %g], each must be in [0, 1)", (double)c->optim.beta1,
                           (double)c->optim.beta2);
    /* note [shard-device] in src/fsdp/collectives.c: only a device whose
     * memory is not the host's offloads; the moments on disk imply it there
     * (note [optim-offload-overlap] in src/optim/adamw.c: DeepSpeed's
     * offload_optimizer.nvme_path likewise runs the optimizer on the CPU
     * over fp32 masters in host memory) */
    c->fsdp.engine.cpu_offload = (c->fsdp.cpu_offload || c->optim.offload_dir[0]) && c->train.device != 0;
    return SHARC_OK;
}

/* -------------------------------------------------------------- output */

static void format_value(const sharc_config *c, const key_def *k, char *out, size_t n) {
    const char *src = (const char *)c + k->off;
    switch (k->type) {
    case K_INT: snprintf(out, n, "%d", *(const int *)src); break;
    case K_INT64: snprintf(out, n, "%lld", (long long)*(const int64_t *)src); break;
    case K_U64: snprintf(out, n, "%llu", (unsigned long long)*(const uint64_t *)src); break;
    case K_FLOAT: snprintf(out, n, "%.9g", (double)*(const float *)src); break;
    case K_BOOL: snprintf(out, n, "%s", *(const bool *)src ? "true" : "false"); break;
    case K_STR: { /* a YAML double-quoted string: what needs it escaped */
        size_t w = 0;
        if (n < 8) break;
        out[w++] = '"';
        for (const unsigned char *p = (const unsigned char *)src; *p && w + 6 < n; p++) {
            if (*p == '"' || *p == '\\') out[w++] = '\\', out[w++] = (char)*p;
            else if (*p == '\n') out[w++] = '\\', out[w++] = 'n';
            else if (*p == '\t') out[w++] = '\\', out[w++] = 't';
            else if (*p < 32 || *p == 127) w += (size_t)snprintf(out + w, n - w, "\\x%02x", *p);
            else out[w++] = (char)*p;
        }
        out[w++] = '"';
        out[w] = 0;
        break;
    }
    case K_ENUM: snprintf(out, n, "%s", k->choices[*(const int *)src]); break;
    case K_FLOAT2:
        snprintf(out, n, "[%.9g, %.9g]", (double)((const float *)src)[0], (double)((const float *)src)[1]);
        break;
    case K_DTYPE: {
        sharc_dtype dt = *(const sharc_dtype *)src;
        snprintf(out, n, "%s", dt == SHARC_DT_BF16 ? "bf16" : dt == SHARC_DT_F16 ? "fp16" : "fp32");
        break;
    }
    case K_RESHARD: {
        int v = *(const int *)src;
        if (v > 1) snprintf(out, n, "%d", v);
        else snprintf(out, n, "%s", v < 0 ? "auto" : v ? "true" : "false");
        break;
    }
    case K_LIMIT: snprintf(out, n, "%d", *(const int *)src); break;
    }
}

/* Each section once (a YAML mapping with a repeated key keeps only one of
 * them in most readers), sections in the order they first appear in `keys`. */
void sharc_config_write_yaml(const sharc_config *c, FILE *f) {
    for (int i = 0; i < NKEYS; i++) {
        const char *dot = strchr(keys[i].name, '.');
        const int sl = (int)(dot - keys[i].name);
        bool first = true;
        for (int j = 0; j < i && first; j++) first = !(strncmp(keys[j].name, keys[i].name, (size_t)sl + 1) == 0);
        if (!first) continue;
        fprintf(f, "%.*s:\n", sl, keys[i].name);
        for (int j = i; j < NKEYS; j++) {
            const key_def *k = &keys[j];
            if (k->type == K_FLOAT2 || strncmp(k->name, keys[i].name, (size_t)sl + 1) != 0)
                continue; /* betas: beta1/beta2 */
            char v[SHARC_PATH_MAX + 8];
            format_value(c, k, v, sizeof v);
            fprintf(f, "  %s: %s\n", k->name + sl + 1, v);
        }
    }
}

char *sharc_config_to_yaml(const sharc_config *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    sharc_config_write_yaml(c, f);
    fclose(f);
    return buf;
}

void sharc_config_print_keys(FILE *f) {
    static const char *type_names[] = {
        "int", "int", "uint", "float", "bool", "string", "enum", "[float, float]", "dtype", "bool|auto", "bool|int"};
    static sharc_config d; /* the defaults, for strings as they are written in YAML */
    sharc_config_default(&d);
    fprintf(f, "Keys (type, default; * = every rank of a run must hold the same value):\n");
    for (int i = 0; i < NKEYS; i++) {
        char def[SHARC_PATH_MAX + 8] = "";
        if (keys[i].type == K_STR) format_value(&d, &keys[i], def, sizeof def);
        else if (keys[i].def) snprintf(def, sizeof def, "%s", keys[i].def);
        fprintf(f, "  %-32s %-8s %-14s %s %s\n", keys[i].name, type_names[keys[i].type], def, keys[i].agree ? "*" : " ",
                keys[i].help);
    }
    fprintf(f, "\nAliases (note [aliases] in src/config/config.c); these wrappers are read as a section:\n ");
    for (size_t i = 0; i < sizeof containers / sizeof containers[0]; i++)
        fprintf(f, " %s. -> %s.", containers[i].from, containers[i].to);
    fprintf(f, "\n");
    for (int i = 0; i < NALIASES; i++) {
        const alias_def *a = &aliases[i];
        if (a->kind == A_NOTE) fprintf(f, "  %-40s accepted: %s\n", a->name, a->why);
        else if (a->kind == A_PRECISION)
            fprintf(f, "  %-40s -> fsdp.param_dtype + fsdp.reduce_dtype (a precision name)\n", a->name);
        else if (a->kind == A_COUNT)
            fprintf(f, "  %-40s -> %s (0: off) and %s_depth (units ahead)\n", a->name, a->target, a->target);
        else fprintf(f, "  %-40s -> %s%s\n", a->name, a->target, a->kind == A_NOT ? " (inverted)" : "");
    }
    fprintf(f, "\nPresets (preset: NAME or --preset NAME):\n");
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        fprintf(f, "  %s:\n", presets[i].name);
        for (const char *p = presets[i].yaml; *p;) {
            const char *e = strchr(p, '\n');
            fprintf(f, "    %.*s\n", (int)(e - p), p);
            p = e + 1;
        }
    }
}

int sharc_config_warnings(const sharc_config *c, void (*emit)(const char *line, void *ctx), void *ctx) {
    int n = 0;
    char line[512];
    if (c->fsdp.cpu_offload && !c->optim.offload_dir[0] && c->train.device == 0) {
        emit("fsdp.cpu_offload (or offload_policy) = true has no effect on train.device cpu: parameters, "
             "gradients and optimizer state already live in host memory; set optim.offload_dir to spill the "
             "AdamW moments to disk",
             ctx);
        n++;
    }
    if (c->fsdp.wrap_policy != 0) {
        snprintf(line, sizeof line,
                 "fsdp.wrap_policy = %s is accepted but not implemented: sharc always makes one unit per transformer "
                 "block (plus the embedding and head units)",
                 wrap_policies[c->fsdp.wrap_policy]);
        emit(line, ctx);
        n++;
    }
    for (const char *p = c->notes; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        emit(line, ctx);
        n++;
        p += len + (e ? 1 : 0);
    }
    return n;
}
