/* source.c: one argument to a model and its weights for inference
 * (sharc/source.h): the dispatch between Hugging Face directories, sharc
 * weights files and checkpoints, shared by generate, eval and export. */
#include "sharc/source.h"
#include "sharc/ckpt.h"
#include "sharc/fsdp.h"
#include "sharc/hf.h"
#include "sharc/weights.h"

#include <stdio.h>
#include <string.h>

sharc_status sharc_source_resolve(const char *arg, sharc_source *src, sharc_config *c) {
    memset(src, 0, sizeof *src);
    sharc_config_default(c);
    if (sharc_hf_is_dir(arg)) {
        if (strlen(arg) >= sizeof c->init_from || strlen(arg) >= sizeof src->path)
            return sharc_error(SHARC_ERR_INVALID, "the path '%.64s...' is too long (at most %zu bytes)", arg,
                               sizeof c->init_from - 1);
        src->kind = SHARC_SOURCE_HF;
        snprintf(src->path, sizeof src->path, "%s", arg);
        SHARC_TRY(sharc_hf_read_config(arg, &c->model));
        snprintf(c->init_from, sizeof c->init_from, "%s", arg); /* its tokenizer (sharc/dataprep.h) */
        c->train.seq_len = c->model.max_seq_len < SHARC_SOURCE_HF_T ? c->model.max_seq_len : SHARC_SOURCE_HF_T;
        return SHARC_OK;
    }
    bool ckpt = false;
    SHARC_TRY(sharc_ckpt_find_weights(arg, src->path, sizeof src->path, &ckpt));
    src->kind = ckpt ? SHARC_SOURCE_CKPT : SHARC_SOURCE_WEIGHTS;
    return ckpt ? sharc_ckpt_read_config(src->path, c) : sharc_weights_read_config(src->path, c);
}

sharc_status sharc_source_load(const sharc_source *src, struct sharc_fsdp *e) {
    switch (src->kind) {
    case SHARC_SOURCE_HF: {
        sharc_fsdp_shard_write_begin(e);
        sharc_status st = sharc_hf_load(e, src->path);
        sharc_fsdp_shard_write_end(e);
        return st;
    }
    case SHARC_SOURCE_CKPT: return sharc_ckpt_load_params(e, src->path);
    default: return sharc_weights_load(e, src->path);
    }
}
