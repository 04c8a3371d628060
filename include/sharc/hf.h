/* sharc/hf.h: Hugging Face interoperability: model directories
 * (config.json + model.safetensors, or model-0000i-of-0000n.safetensors
 * shards with model.safetensors.index.json) of GPT2LMHeadModel and
 * LlamaForCausalLM, read into and written from the engine.
 *
 * Names: sharc's parameter names are Hugging Face's (sharc/model.h); GPT-2
 * files may add the "transformer." prefix (save_pretrained does, the original
 * hub file does not) and hold the four Conv1D matrices (c_attn, attn.c_proj,
 * c_fc, mlp.c_proj) as (in, out), the transpose of sharc's (out, in). Llama
 * q/k rows need no permutation: sharc's RoPE is HF's rotate-half convention.
 * Buffers that are not parameters (attn.bias, attn.masked_bias,
 * rotary_emb.inv_freq) and a tied lm_head.weight are ignored on import. */
#ifndef SHARC_HF_H
#define SHARC_HF_H

#include <stdint.h>

#include "sharc/comm.h"
#include "sharc/dtype.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/safetensors.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the safetensors files of a directory ---- */
typedef struct sharc_st_set sharc_st_set;
/* Open dir/model.safetensors.index.json and every shard it names (checked:
 * JSON shape, shard files present and valid, each mapped name present in its
 * file, no tensor of a shard missing from the map), or dir/model.safetensors. */
sharc_status sharc_st_set_open(sharc_st_set **out, const char *dir);
void sharc_st_set_close(sharc_st_set *s);
int sharc_st_set_count(const sharc_st_set *s);
/* The i-th tensor and (if file != NULL) the file holding it. */
const sharc_st_tensor *sharc_st_set_tensor_at(const sharc_st_set *s, int i, const sharc_st_file **file);
/* A tensor by name, or NULL. */
const sharc_st_tensor *sharc_st_set_find(const sharc_st_set *s, const char *name, const sharc_st_file **file);

/* ---- import ---- */
/* True if `path` is a directory holding a config.json (a Hugging Face model). */
bool sharc_hf_is_dir(const char *path);
/* Read dir/config.json into *c (a validated sharc model config). Anything
 * sharc does not implement (rope_scaling, another activation, biases in
 * Llama, ...) is an error naming the file and key. */
sharc_status sharc_hf_read_config(const char *dir, sharc_model_config *c);
/* Check that dir/config.json describes the model `run` configures (every
 * field, norm epsilon and RoPE theta included: shapes alone would not catch
 * them); the error names the HF key, both values and the sharc key. For
 * model.init_from: call before sharc_hf_load. Not collective. */
sharc_status sharc_hf_check_config(const char *dir, const sharc_model_config *run);
/* Fill this rank's shards from the model files in `dir`: every parameter must
 * be present with its shape (transposed for Conv1D) and a float dtype (F32,
 * BF16, F16, converted to fp32), and every tensor must be a parameter or an
 * ignorable buffer. Each rank reads only the element ranges its shards hold
 * (for a transposed source, the columns of the source rows it needs).
 * Not collective: the caller agrees on the returned status across ranks.
 * It writes inside its own shard write bracket (sharc/fsdp.h); a caller that
 * may skip it on some ranks brackets around it. model.init_from, on every
 * rank after the engine exists:
 *     sharc_fsdp_shard_write_begin(engine);
 *     st = sharc_hf_check_config(dir, &cfg.model);
 *     if (st == SHARC_OK) st = sharc_hf_load(engine, dir);
 *     sharc_fsdp_shard_write_end(engine);
 *     then one all-reduce (MAX) of (st != SHARC_OK), as note [agreement]. */
sharc_status sharc_hf_load(sharc_fsdp *e, const char *dir);

/* The name parameter `name` of a `family` model has in Hugging Face files
 * (the family's prefix added; GPT2LMHeadModel's lm_head has none) into out
 * (n bytes); true when HF stores it transposed, (in, out) (GPT-2's Conv1D). */
bool sharc_hf_tensor_name(sharc_family family, const char *name, char *out, size_t n);

/* ---- export ---- */
/* Write `dir` as a Hugging Face model directory: config.json and
 * model.safetensors, or (when max_shard_bytes > 0 and the tensors exceed it)
 * numbered shards of at most max_shard_bytes each (a larger tensor gets a
 * shard to itself) and model.safetensors.index.json. Tensors are written in
 * `dtype` (F32, BF16 or F16) under HF's names (GPT-2 with "transformer." and
 * Conv1D matrices transposed). Collective over `world` (NULL: one process):
 * unit by unit the shards are gathered and rank 0 writes, so no rank holds
 * more than one unit. Everything is written into a temporary sibling
 * directory renamed to `dir` at the end; `dir` must not exist or be empty.
 * Every rank returns the same status. */
sharc_status sharc_hf_export(sharc_fsdp *e, sharc_comm *world, const sharc_model_config *cfg, const char *dir,
                             sharc_dtype dtype, uint64_t max_shard_bytes);

#ifdef __cplusplus
}
#endif
#endif
