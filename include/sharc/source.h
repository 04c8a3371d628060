/* sharc/source.h: where inference (generate, eval, export) reads a trained
 * model from, given one argument (note [inference-source]):
 *   - a Hugging Face directory (config.json + safetensors, as `sharc export`
 *     writes or the Hub ships): the model keys from config.json
 *     (sharc_hf_read_config), the tokenizer beside it when there is one
 *     (model.init_from is set to the directory), train.seq_len = the
 *     model's context capped at SHARC_SOURCE_HF_T;
 *   - a sharc weights file (as is); a run directory's model.safetensors, or
 *     without one its checkpoints/; a checkpoint directory (its newest step
 *     that passes every check) or a step directory (sharc_ckpt_find_weights):
 *     the run's configuration saved with them.
 * A checkpoint gives its parameters, not the AdamW moments. */
#ifndef SHARC_SOURCE_H
#define SHARC_SOURCE_H

#include "sharc/config.h"
#include "sharc/status.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sharc_fsdp;

/* The context planned for a Hugging Face model whose config.json allows more
 * (Qwen3's max_position_embeddings is 40960); generate recomputes the last
 * SHARC_SOURCE_HF_T tokens past it, eval takes --seq_len. */
#define SHARC_SOURCE_HF_T 2048

typedef enum { SHARC_SOURCE_WEIGHTS, SHARC_SOURCE_CKPT, SHARC_SOURCE_HF } sharc_source_kind;

typedef struct {
    char path[SHARC_PATH_MAX + 64]; /* the weights file, step directory or Hugging Face directory */
    sharc_source_kind kind;
} sharc_source;

/* Resolves ARG and fills *c (from defaults) with its configuration. Local:
 * no collective. */
sharc_status sharc_source_resolve(const char *arg, sharc_source *src, sharc_config *c);

/* Loads the source's parameters into `e` (built for the model of the
 * configuration sharc_source_resolve gave); each rank reads only its
 * shards. Marks the parameters updated. On many ranks the caller agrees on
 * the outcome. */
sharc_status sharc_source_load(const sharc_source *src, struct sharc_fsdp *e);

#ifdef __cplusplus
}
#endif
#endif
