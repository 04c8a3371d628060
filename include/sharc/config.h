/* sharc/config.h: the run configuration, read from YAML (or JSON, which
 * libyaml also reads) with dotted command-line overrides.
 *
 * One table (src/config/config.c, `keys`) lists every key with its type,
 * default, allowed range, whether the ranks of a run must agree on it, and
 * help line; defaults, loading, overriding, printing and the ranks'
 * agreement check (sharc_config_agreed_values) all come from it, so adding a
 * key is a row there, a field here and a line in README.
 * Unknown keys, wrong types and out-of-range values are errors naming the
 * file, line, key, value and what is allowed.
 *
 * Beside it, the alias tables of note [aliases] read the names users paste
 * from FSDP1/FSDP2/Lightning/ROLL configs; `preset: NAME` applies a named
 * set of keys; `training_stages.NAME.*` holds per-stage keys (applied when
 * `stage` selects NAME). Accepted options that are not implemented are
 * listed by sharc_config_warnings, never ignored silently. */
#ifndef SHARC_CONFIG_H
#define SHARC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sharc/ckpt.h"
#include "sharc/data.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_PATH_MAX 1024

typedef struct {
    char path[SHARC_PATH_MAX];
    char val_path[SHARC_PATH_MAX];
    sharc_token_format format;
    bool shuffle;
    uint64_t seed;
    /* JSONL SFT records (sharc/sft.h; OpenRLHF's flag names) */
    char input_key[SHARC_PATH_MAX];      /* the prompt's key: a string, or messages */
    char output_key[SHARC_PATH_MAX];     /* the response's key ("": messages records) */
    char input_template[SHARC_PATH_MAX]; /* without a chat template: one {} for the input ("": the input as is) */
    bool apply_chat_template;
    int chat_template; /* sharc_chat_format: 0 auto (the tokenizer's, recognised) */
    int max_len;       /* tokens per SFT sample (0: train.seq_len + 1) */
    bool multiturn;    /* train every assistant turn */
    int loss_mask;     /* sharc_sft_mask: 0 ranges, 1 openrlhf */
    bool packing;      /* SFT samples packed into rows of train.seq_len (note [packing-rule]) */
} sharc_data_config;

typedef struct {
    int batch_size; /* sequences per micro-batch per data-parallel rank */
    int grad_accum; /* micro-batches per optimizer step */
    int seq_len;    /* T */
    int64_t max_steps;
    uint64_t seed; /* parameter initialisation */
    int log_every;
    int threads; /* 0: the CPUs this process may use */
    char out_dir[SHARC_PATH_MAX];
    char metrics_path[SHARC_PATH_MAX]; /* "" = out_dir/metrics.jsonl */
    bool overwrite_output_dir;         /* a new run may replace another run's outputs in out_dir (note [run-dir]) */
    float epochs;                      /* > 0: max_steps = ceil(epochs * windows / sequences per step) (trainer) */
    int timeout;       /* step watchdog: seconds without progress before every rank reports and exits (0: off) */
    int max_bad_steps; /* stop after this many non-finite steps in a row */
    int loss_normalization; /* 0 global_tokens: / valid targets of the global batch; 1 micro_batch: mean of micro-batch means */
    int device;             /* 0 cpu, 1 cuda (sharc/device.h; the trainer opens it) */
} sharc_train_config;

typedef struct {
    sharc_fsdp_config engine; /* sharding_strategy, fsdp_size, dtypes, prefetch, ... */
    bool activation_checkpointing;
    bool apply_tiled_mlp; /* note [tiled-mlp] in src/model/model.c */
    int tiled_num_shards; /* its chunks per block (may differ between ranks) */
    bool cpu_offload;     /* train.device cuda: engine.cpu_offload (set by validate); cpu: a warning at start */
    bool use_orig_params; /* accepted from FSDP1 configs; no meaning here */
    int wrap_policy;      /* 0 transformer_block (the only one implemented), 1 size, 2 none */
} sharc_fsdp_options;

/* The device mesh's model-parallel degrees (the mesh.* keys; sharc/mesh.h):
 * world = dp_replicate x dp_shard x sp x tp, the data-parallel degrees
 * following from the sharding strategy and the world size. */
typedef struct {
    int sp; /* Ulysses sequence parallelism: ranks sharing each sequence */
    int tp; /* tensor parallelism (note [tp] in src/model/tp.h) */
} sharc_mesh_config;

#define SHARC_MAX_STAGES 16

/* Telemetry and validation (the log.* keys; src/train/telemetry.c, eval.c). */
typedef struct {
    float peak_tflops; /* peak fp32 TFLOP/s of one rank's cores for MFU (0: measured at start) */
    bool debug;        /* per-rank JSON lines in out_dir/debug/rank-N.log */
    int eval_every;    /* validation loss on data.val_path every N steps (0: off) */
    int eval_batches;  /* micro-batches of train.batch_size per validation, over all ranks (0: every window) */
} sharc_log_config;

typedef struct sharc_config { /* tagged: sharc/ckpt.h declares it ahead */
    sharc_model_config model;
    sharc_data_config data;
    sharc_optim_config optim;
    sharc_train_config train;
    sharc_fsdp_options fsdp;
    sharc_ckpt_config ckpt;
    sharc_log_config log;
    sharc_mesh_config mesh;
    char init_from[SHARC_PATH_MAX]; /* model.init_from: sharc weights loaded after initialisation ("" = none) */
    char tokenizer
        [SHARC_PATH_MAX]; /* model.tokenizer: a tokenizer.json or its directory ("" = byte-level, or init_from's) */
    /* note [frozen-params] (src/fsdp/units.c): comma-separated lists ("" = none) */
    char freeze_module_prefix[SHARC_PATH_MAX]; /* model.freeze_module_prefix: name prefixes frozen (ROLL) */
    char trainable[SHARC_PATH_MAX];            /* train.trainable: fnmatch globs; when set, the rest is frozen */
    /* Loader state (not keys). Multi-stage files (training_stages.NAME.*):
     * `stage` selects the stage whose keys are applied ("" = none: they are
     * only checked); every stage name seen is listed in file order. */
    char stage[48];
    int stage_pass; /* loader: 0 all keys; 1 all but the selected stage's; 2 only the selected stage's */
    int num_stages;
    char stages[SHARC_MAX_STAGES][48];
    /* Accepted keys that have no effect here, one "key = value: why" per line
     * (printed by sharc_config_warnings). */
    char notes[2048];
} sharc_config;

/* The built-in defaults (the job `make run` trains): each key's default
 * from the key table. */
void sharc_config_default(sharc_config *c);
/* Apply a YAML/JSON file on top of *c. */
sharc_status sharc_config_load_file(sharc_config *c, const char *path);
/* Apply YAML text (origin names it in errors). */
sharc_status sharc_config_load_string(sharc_config *c, const char *text, const char *origin);
/* Apply one "section.key" = "value" (from the command line). */
sharc_status sharc_config_set(sharc_config *c, const char *key, const char *value, const char *origin);
/* Cross-key checks and derived defaults (model arithmetic, ...). */
sharc_status sharc_config_validate(sharc_config *c);
/* The resolved configuration as YAML (every key). */
void sharc_config_write_yaml(const sharc_config *c, FILE *f);
/* Same, into a malloc'd string. */
char *sharc_config_to_yaml(const sharc_config *c);
/* Print every key with its type and help line (and the aliases and presets). */
void sharc_config_print_keys(FILE *f);

/* Every accepted option that is not implemented or has no effect (cpu_offload
 * on the CPU device, a wrap policy other than one unit per block, launcher keys,
 * ...), one line each naming the key, through `emit`; returns the count. The
 * trainer prints them once on rank 0 at start. */
int sharc_config_warnings(const sharc_config *c, void (*emit)(const char *line, void *ctx), void *ctx);
/* One value the ranks of a run must share (note [agreement] in
 * docs/ARCHITECTURE.md): a key the table marks so. */
typedef struct {
    const char *key;  /* the key's name, static */
    int64_t value;    /* integers, enums and bools as they are, floats by their bits, strings by their FNV-1a hash */
    const char *text; /* a string key: its value (borrowed from the config); else NULL */
} sharc_config_agreed;

/* Every value of `c` the ranks must agree on, in table order, the first
 * `max` into `out` (may be NULL with max 0); returns how many there are.
 * The trainer all-gathers them at start. */
int sharc_config_agreed_values(const sharc_config *c, sharc_config_agreed *out, int max);

/* Map a precision name (fp32, bf16, bf16-mixed, bf16-true, 16-mixed, fp16,
 * ...) to fsdp.param_dtype / fsdp.reduce_dtype. */
sharc_status sharc_config_set_precision(sharc_config *c, const char *value, const char *origin);
/* Apply a named preset (single_node, multi_node, large_scale). */
sharc_status sharc_config_apply_preset(sharc_config *c, const char *name, const char *origin);

#ifdef __cplusplus
}
#endif
#endif
