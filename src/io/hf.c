/* hf.c: sharc_st_set_* (the safetensors files of a Hugging Face model
 * directory, with its index), sharc_hf_read_config, sharc_hf_check_config,
 * sharc_hf_load and sharc_hf_export, all from one map of each family's
 * config keys and parameter names (note [hf-map]). JSON is read and written
 * with json-c. */
#include "sharc/hf.h"
#include "sharc/activity.h"
#include "sharc/alloc.h"
#include "sharc/device.h"
#include "sharc/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ file sets */

typedef struct {
    const char *name; /* owned by the tensor */
    int file;
    const sharc_st_tensor *t;
} set_entry;

struct sharc_st_set {
    int nfiles;
    sharc_st_file **files;
    int n;
    set_entry *e;
};

void sharc_st_set_close(sharc_st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++) sharc_st_close(s->files[i]);
    free(s->files);
    free(s->e);
    free(s);
}

int sharc_st_set_count(const sharc_st_set *s) { return s->n; }

const sharc_st_tensor *sharc_st_set_tensor_at(const sharc_st_set *s, int i, const sharc_st_file **file) {
    if (i < 0 || i >= s->n) return NULL;
    if (file) *file = s->files[s->e[i].file];
    return s->e[i].t;
}

const sharc_st_tensor *sharc_st_set_find(const sharc_st_set *s, const char *name, const sharc_st_file **file) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->e[i].name, name) == 0) {
            if (file) *file = s->files[s->e[i].file];
            return s->e[i].t;
        }
    return NULL;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Parse a whole JSON file strictly; errors name the file. */
static sharc_status read_json(const char *path, json_object **out) {
    *out = NULL;
    char *text;
    size_t len;
    SHARC_TRY(sharc_read_file(path, &text, &len));
    if (len > (size_t)INT_MAX) {
        free(text);
        return sharc_error(SHARC_ERR_FORMAT, "'%s': too large for a JSON file", path);
    }
    struct json_tokener *tok = json_tokener_new();
    if (!tok) {
        free(text);
        return sharc_error(SHARC_ERR_NOMEM, "out of memory");
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    bool trailing = false;
    for (size_t i = used; root && jerr == json_tokener_success && i < len; i++)
        if (text[i] != ' ' && text[i] != '\n' && text[i] != '\t' && text[i] != '\r') trailing = true;
    free(text);
    if (!root || jerr != json_tokener_success || trailing) {
        json_object_put(root);
        return sharc_error(SHARC_ERR_FORMAT, "'%s' is not valid JSON (%s)", path,
                           trailing                        ? "bytes after the value"
                           : jerr == json_tokener_continue ? "it ends before the JSON value does: a truncated file?"
                                                           : json_tokener_error_desc(jerr));
    }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return sharc_error(SHARC_ERR_FORMAT, "'%s' is not a JSON object", path);
    }
    *out = root;
    return SHARC_OK;
}

static sharc_status set_add_file(sharc_st_set *s, const char *path) {
    sharc_st_file **nf = realloc(s->files, sizeof *nf * (size_t)(s->nfiles + 1));
    if (!nf) return sharc_error(SHARC_ERR_NOMEM, "out of memory");
    s->files = nf;
    SHARC_TRY(sharc_st_open(&s->files[s->nfiles], path));
    s->nfiles++;
    return SHARC_OK;
}

static int set_file_index(const sharc_st_set *s, const char *path) {
    for (int i = 0; i < s->nfiles; i++)
        if (strcmp(sharc_st_path(s->files[i]), path) == 0) return i;
    return -1;
}

static sharc_status set_open_index(sharc_st_set *s, const char *dir, const char *ipath) {
    json_object *root, *map, *meta;
    SHARC_TRY(read_json(ipath, &root));
    sharc_status st = SHARC_OK;
    if (!json_object_object_get_ex(root, "weight_map", &map) || !json_object_is_type(map, json_type_object)) {
        st = sharc_error(SHARC_ERR_FORMAT, "index '%s': needs \"weight_map\": {tensor name: file name}", ipath);
        goto done;
    }
    if (json_object_object_get_ex(root, "metadata", &meta) && !json_object_is_type(meta, json_type_object)) {
        st = sharc_error(SHARC_ERR_FORMAT, "index '%s': \"metadata\" must be an object", ipath);
        goto done;
    }
    int total = json_object_object_length(map);
    s->e = calloc((size_t)(total > 0 ? total : 1), sizeof *s->e);
    if (!s->e) {
        st = sharc_error(SHARC_ERR_NOMEM, "out of memory");
        goto done;
    }
    json_object_object_foreach(map, name, fv) {
        if (!json_object_is_type(fv, json_type_string)) {
            st = sharc_error(SHARC_ERR_FORMAT, "index '%s': weight_map['%s'] must be a file name string", ipath, name);
            break;
        }
        const char *fname = json_object_get_string(fv);
        if (!*fname || strchr(fname, '/') || !strcmp(fname, ".") || !strcmp(fname, "..")) {
            st =
                sharc_error(SHARC_ERR_FORMAT, "index '%s': weight_map['%s'] = '%s' is not a file name in the directory",
                            ipath, name, fname);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        int fi = set_file_index(s, path);
        if (fi < 0) {
            if (!file_exists(path)) {
                st = sharc_error(SHARC_ERR_INVALID, "index '%s': shard '%s' (holding '%s') is missing", ipath, path,
                                 name);
                break;
            }
            if ((st = set_add_file(s, path)) != SHARC_OK) break;
            fi = s->nfiles - 1;
        }
        const sharc_st_tensor *t = sharc_st_find(s->files[fi], name);
        if (!t) {
            st = sharc_error(SHARC_ERR_FORMAT, "index '%s' maps '%s' to '%s', which has no such tensor", ipath, name,
                             path);
            break;
        }
        s->e[s->n++] = (set_entry){.name = t->name, .file = fi, .t = t};
    }
    /* every tensor of a shard is in the map (and mapped to that shard) */
    for (int f = 0; f < s->nfiles && st == SHARC_OK; f++)
        for (int i = 0; i < sharc_st_count(s->files[f]) && st == SHARC_OK; i++) {
            const sharc_st_tensor *t = sharc_st_tensor_at(s->files[f], i);
            const sharc_st_file *where = NULL;
            if (!sharc_st_set_find(s, t->name, &where) || where != s->files[f])
                st = sharc_error(SHARC_ERR_FORMAT, "shard '%s' holds '%s', which index '%s' does not map to it",
                                 sharc_st_path(s->files[f]), t->name, ipath);
        }
done:
    json_object_put(root);
    return st;
}

sharc_status sharc_st_set_open(sharc_st_set **out, const char *dir) {
    *out = NULL;
    sharc_st_set *s = calloc(1, sizeof *s);
    if (!s) return sharc_error(SHARC_ERR_NOMEM, "out of memory");
    char ipath[4096], spath[4096];
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    snprintf(spath, sizeof spath, "%s/model.safetensors", dir);
    sharc_status st;
    if (file_exists(ipath)) {
        st = set_open_index(s, dir, ipath);
    } else if (file_exists(spath)) {
        st = set_add_file(s, spath);
        if (st == SHARC_OK) {
            int n = sharc_st_count(s->files[0]);
            s->e = calloc((size_t)(n > 0 ? n : 1), sizeof *s->e);
            if (!s->e) st = sharc_error(SHARC_ERR_NOMEM, "out of memory");
            for (int i = 0; i < n && s->e; i++) {
                const sharc_st_tensor *t = sharc_st_tensor_at(s->files[0], i);
                s->e[s->n++] = (set_entry){.name = t->name, .file = 0, .t = t};
            }
        }
    } else {
        st = sharc_error(SHARC_ERR_INVALID, "'%s' has neither model.safetensors nor model.safetensors.index.json", dir);
    }
    if (st != SHARC_OK) {
        sharc_st_set_close(s);
        return st;
    }
    *out = s;
    return SHARC_OK;
}

/* ------------------------------------------------- the Hugging Face map */

/* Note [hf-map]. Everything sharc knows about a Hugging Face model family is
 * one row of `hf_families`: its model_type and architecture names, the
 * config.json keys (the `hf_key` rows below: each config key sharc reads,
 * checks against a run or writes, with the model field it maps to, or the
 * one value sharc implements), the prefix of its parameter names and which
 * tensors of its files are buffers, not parameters. The parameters
 * themselves (their names, which HF uses without the prefix, and which
 * matrices HF stores transposed, GPT-2's Conv1D) are the family's rows of
 * note [param-table] in src/model/params.c. Reading config.json, comparing it with
 * a run's model.* keys, importing and exporting all walk these rows; a new
 * family or key is a row here. The rows are in the order export writes them
 * (as save_pretrained would). */

enum {
    HF_READ = 1,      /* read from config.json into the field */
    HF_REQUIRED = 2,  /* ... and an error when absent (else `absent` applies) */
    HF_CHECK = 4,     /* compared with a run's model.* (model.init_from) */
    HF_WRITE = 8,     /* written by export */
    HF_NULL_4C = 16,  /* written as null when the field is 4 x embed_dim (GPT-2's n_inner default) */
    HF_HARMLESS = 32, /* accepted and ignored on read (note [hf-keys]) */
};

typedef enum {
    HF_INT,   /* an int field of sharc_model_config */
    HF_FLOAT, /* a float field */
    HF_BOOL,  /* a bool field */
    HF_FIXED, /* no field: the one value sharc implements (`value`, JSON), refused otherwise */
    HF_CODE,  /* read, checked and written by code (RoPE, the window, bos/eos: note [hf-keys]) */
} hf_kind;

typedef struct {
    const char *key; /* in config.json */
    hf_kind kind;
    size_t off;        /* the field (not HF_FIXED) */
    const char *field; /* its model.* key, for messages */
    unsigned flags;
    double absent; /* HF_READ: the value when the key is absent or null (NAN: sharc's model default stands) */
    int min;       /* HF_INT: the smallest value read */
    const char
        *value; /* HF_FIXED: the JSON value written and, with HF_READ, the only one accepted (null: may be absent) */
    const char *also; /* HF_FIXED string: a second accepted value */
    const char *why;  /* HF_FIXED: why another value is refused */
} hf_key;

#define F(f)       offsetof(sharc_model_config, f), "model." #f
#define FIXED      0, NULL
#define NO_DEFAULT NAN

static const hf_key gpt2_keys[] = {
    {"activation_function", HF_FIXED, FIXED, HF_READ | HF_WRITE, 0, 0, "\"gelu_new\"", "\"gelu_pytorch_tanh\"",
     " (the tanh GELU)"},
    {"n_embd", HF_INT, F(embed_dim), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 1, NULL, NULL, NULL},
    {"n_layer", HF_INT, F(num_layers), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 1, NULL, NULL, NULL},
    {"n_head", HF_INT, F(num_heads), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 1, NULL, NULL, NULL},
    {"n_head", HF_INT, F(num_kv_heads), HF_CHECK, 0, 1, NULL, NULL, NULL}, /* GPT-2 has no grouped KV heads */
    {"n_positions", HF_INT, F(max_seq_len), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 1, NULL, NULL, NULL},
    {"n_ctx", HF_INT, F(max_seq_len), HF_WRITE, 0, 1, NULL, NULL, NULL},
    {"n_inner", HF_INT, F(ff_hidden_dim), HF_READ | HF_CHECK | HF_WRITE | HF_NULL_4C, 0 /* 4C */, 1, NULL, NULL, NULL},
    {"vocab_size", HF_INT, F(vocab_size), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 2, NULL, NULL, NULL},
    {"layer_norm_epsilon", HF_FLOAT, F(norm_eps), HF_READ | HF_CHECK | HF_WRITE, NO_DEFAULT, 0, NULL, NULL, NULL},
    {"attn_pdrop", HF_FIXED, FIXED, HF_WRITE, 0, 0, "0.0", NULL, NULL},
    {"embd_pdrop", HF_FIXED, FIXED, HF_WRITE, 0, 0, "0.0", NULL, NULL},
    {"resid_pdrop", HF_FIXED, FIXED, HF_WRITE, 0, 0, "0.0", NULL, NULL},
    {"scale_attn_weights", HF_FIXED, FIXED, HF_READ | HF_WRITE, 0, 0, "true", NULL,
     "sharc scales attention by 1/sqrt(head dim)"},
    {"scale_attn_by_inverse_layer_idx", HF_FIXED, FIXED, HF_READ, 0, 0, "false", NULL, "not implemented"},
    {"add_cross_attention", HF_FIXED, FIXED, HF_READ, 0, 0, "false", NULL, "decoder-only models"},
    {"tie_word_embeddings", HF_BOOL, F(tie_embeddings), HF_READ | HF_CHECK | HF_WRITE, 1, 0, NULL, NULL, NULL},
    {"initializer_range", HF_FLOAT, F(init_std), HF_READ | HF_WRITE, NO_DEFAULT, 0, NULL, NULL, NULL},
    /* harmless: the double-heads model's classifier, task presets, fp32 upcast only (dropout: above, written 0) */
    {"summary_type", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, NULL},
    {"summary_use_proj", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, NULL},
    {"summary_activation", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, NULL},
    {"summary_proj_to_labels", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, NULL},
    {"summary_first_dropout", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, NULL},
    {"task_specific_params", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, NULL},
    {"reorder_and_upcast_attn", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, NULL},
};

/* The Llama family's rows, shared by its model types; each type adds its own. */
#define LLAMA_SHAPE_KEYS                                                                                               \
    {"hidden_act", HF_FIXED, FIXED, HF_READ | HF_WRITE, 0, 0, "\"silu\"", NULL, ""},                                   \
        {"hidden_size", HF_INT, F(embed_dim), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 1, NULL, NULL, NULL},    \
        {"intermediate_size",                                                                                          \
         HF_INT,                                                                                                       \
         F(ff_hidden_dim),                                                                                             \
         HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE,                                                                  \
         0,                                                                                                            \
         1,                                                                                                            \
         NULL,                                                                                                         \
         NULL,                                                                                                         \
         NULL},                                                                                                        \
        {"num_hidden_layers",                                                                                          \
         HF_INT,                                                                                                       \
         F(num_layers),                                                                                                \
         HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE,                                                                  \
         0,                                                                                                            \
         1,                                                                                                            \
         NULL,                                                                                                         \
         NULL,                                                                                                         \
         NULL},                                                                                                        \
        {"num_attention_heads",                                                                                        \
         HF_INT,                                                                                                       \
         F(num_heads),                                                                                                 \
         HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE,                                                                  \
         0,                                                                                                            \
         1,                                                                                                            \
         NULL,                                                                                                         \
         NULL,                                                                                                         \
         NULL},                                                                                                        \
    {                                                                                                                  \
        "num_key_value_heads", HF_INT, F(num_kv_heads), HF_READ | HF_CHECK | HF_WRITE, 0 /* = heads */, 1, NULL, NULL, \
            NULL                                                                                                       \
    }
#define LLAMA_HEAD_DIM                                                                                                 \
    { "head_dim", HF_INT, F(head_dim), HF_READ | HF_CHECK | HF_WRITE, 0 /* width / heads */, 2, NULL, NULL, NULL }
#define LLAMA_TAIL_KEYS                                                                                                \
    {"vocab_size", HF_INT, F(vocab_size), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 2, NULL, NULL, NULL},        \
        {"max_position_embeddings", HF_INT, F(max_seq_len), HF_READ | HF_WRITE, 2048, 1, NULL, NULL, NULL},            \
        {"rms_norm_eps", HF_FLOAT, F(norm_eps), HF_READ | HF_CHECK | HF_WRITE, 1e-6, 0, NULL, NULL, NULL},             \
        {"rope_theta", HF_CODE, FIXED, HF_WRITE, 0, 0, NULL, NULL, NULL},                                              \
        {"rope_scaling", HF_CODE, FIXED, HF_WRITE, 0, 0, NULL, NULL, NULL}, {                                          \
        "rope_parameters", HF_CODE, FIXED, 0, 0, 0, NULL, NULL, NULL                                                   \
    }
#define LLAMA_BIAS_KEYS                                                                                                \
    {                                                                                                                  \
        "attention_bias", HF_FIXED, FIXED, HF_READ | HF_WRITE, 0, 0, "false", NULL,                                    \
            "a bias on o_proj as well is not implemented"                                                              \
    }
#define LLAMA_END_KEYS                                                                                                 \
    {"tie_word_embeddings", HF_BOOL, F(tie_embeddings), HF_READ | HF_CHECK | HF_WRITE, 0, 0, NULL, NULL, NULL},        \
        {"initializer_range", HF_FLOAT, F(init_std), HF_READ | HF_WRITE, NO_DEFAULT, 0, NULL, NULL, NULL},             \
        {"attention_dropout", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, "sharc applies no dropout"}, {           \
        "pretraining_tp", HF_FIXED, FIXED, HF_HARMLESS, 0, 0, NULL, NULL, "slices the same matmuls"                    \
    }
/* Qwen2/3's window keys: a window only with use_sliding_window, on layers >= max_window_layers */
#define QWEN_WINDOW_KEYS                                                                                               \
    {"use_sliding_window", HF_CODE, FIXED, HF_WRITE, 0, 0, NULL, NULL, NULL},                                          \
        {"sliding_window", HF_CODE, FIXED, HF_WRITE, 0, 0, NULL, NULL, NULL},                                          \
        {"max_window_layers", HF_CODE, FIXED, HF_WRITE, 0, 0, NULL, NULL, NULL}, {                                     \
        "layer_types", HF_CODE, FIXED, 0, 0, 0, NULL, NULL, NULL                                                       \
    }

static const hf_key llama_keys[] = {
    LLAMA_SHAPE_KEYS,
    LLAMA_HEAD_DIM,
    LLAMA_TAIL_KEYS,
    LLAMA_BIAS_KEYS,
    {"mlp_bias", HF_FIXED, FIXED, HF_READ | HF_WRITE, 0, 0, "false", NULL, "MLP biases are not implemented"},
    LLAMA_END_KEYS,
};
/* Qwen2: q/k/v biases are the architecture (no attention_bias key); no head_dim key */
static const hf_key qwen2_keys[] = {LLAMA_SHAPE_KEYS, LLAMA_TAIL_KEYS, QWEN_WINDOW_KEYS, LLAMA_END_KEYS};
/* Qwen3: q/k norms are the architecture */
static const hf_key qwen3_keys[] = {LLAMA_SHAPE_KEYS, LLAMA_HEAD_DIM,   LLAMA_TAIL_KEYS,
                                    LLAMA_BIAS_KEYS,  QWEN_WINDOW_KEYS, LLAMA_END_KEYS};
/* Qwen3-MoE (note [moe] in src/model/moe.c): Qwen3's rows and the experts' */
static const hf_key qwen3_moe_keys[] = {
    LLAMA_SHAPE_KEYS,
    LLAMA_HEAD_DIM,
    LLAMA_TAIL_KEYS,
    LLAMA_BIAS_KEYS,
    QWEN_WINDOW_KEYS,
    {"decoder_sparse_step", HF_INT, F(decoder_sparse_step), HF_READ | HF_CHECK | HF_WRITE, 1, 1, NULL, NULL, NULL},
    {"moe_intermediate_size", HF_INT, F(moe_intermediate_size), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 1, NULL,
     NULL, NULL},
    {"num_experts_per_tok", HF_INT, F(num_experts_per_tok), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 1, NULL,
     NULL, NULL},
    {"num_experts", HF_INT, F(num_experts), HF_READ | HF_REQUIRED | HF_CHECK | HF_WRITE, 0, 1, NULL, NULL, NULL},
    {"norm_topk_prob", HF_BOOL, F(norm_topk_prob), HF_READ | HF_CHECK | HF_WRITE, 0, 0, NULL, NULL, NULL},
    {"output_router_logits", HF_BOOL, F(output_router_logits), HF_READ | HF_CHECK | HF_WRITE, 0, 0, NULL, NULL, NULL},
    {"router_aux_loss_coef", HF_FLOAT, F(router_aux_loss_coef), HF_READ | HF_CHECK | HF_WRITE, 0.001, 0, NULL, NULL,
     NULL},
    {"mlp_only_layers", HF_CODE, FIXED, HF_WRITE, 0, 0, NULL, NULL, NULL},
    LLAMA_END_KEYS,
};
/* Mistral: a window on every layer when sliding_window is set */
static const hf_key mistral_keys[] = {LLAMA_SHAPE_KEYS,
                                      LLAMA_HEAD_DIM,
                                      LLAMA_TAIL_KEYS,
                                      {"sliding_window", HF_CODE, FIXED, HF_WRITE, 0, 0, NULL, NULL, NULL},
                                      LLAMA_END_KEYS};

/* Keys of every family: read by code (bos/eos), or bookkeeping that does not
 * change the model (note [hf-keys]). */
static const char *const keys_common[] = {
    "model_type", "architectures", "bos_token_id",  "eos_token_id",      "transformers_version", "torch_dtype", "dtype",
    "use_cache",  "pad_token_id",  "_name_or_path", "output_attentions", "output_hidden_states", "return_dict", NULL};

#undef F
#undef FIXED

typedef struct {
    sharc_family family;
    const char *model_type;
    const char *arch, *arch_also; /* architectures[0] written, and a second one read */
    const hf_key *keys;
    int nkeys;
    const char *prefix;     /* of every parameter but lm_head.weight in the files sharc writes (read: optional) */
    const char *buffers[4]; /* tensors in its files that are not parameters (names ending so) */
    bool qkv_bias, qk_norm; /* what the model type implies (note [families] in src/model/model.c) */
} hf_family;

static const hf_family hf_families[] = {
    {SHARC_FAMILY_GPT2,
     "gpt2",
     "GPT2LMHeadModel",
     "GPT2Model",
     gpt2_keys,
     (int)(sizeof gpt2_keys / sizeof gpt2_keys[0]),
     "transformer.",
     {".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq", NULL},
     false,
     false},
    {SHARC_FAMILY_LLAMA,
     "llama",
     "LlamaForCausalLM",
     "LlamaModel",
     llama_keys,
     (int)(sizeof llama_keys / sizeof llama_keys[0]),
     "",
     {"rotary_emb.inv_freq", NULL},
     false,
     false},
    {SHARC_FAMILY_LLAMA,
     "qwen2",
     "Qwen2ForCausalLM",
     "Qwen2Model",
     qwen2_keys,
     (int)(sizeof qwen2_keys / sizeof qwen2_keys[0]),
     "",
     {"rotary_emb.inv_freq", NULL},
     true,
     false},
    {SHARC_FAMILY_LLAMA,
     "qwen3",
     "Qwen3ForCausalLM",
     "Qwen3Model",
     qwen3_keys,
     (int)(sizeof qwen3_keys / sizeof qwen3_keys[0]),
     "",
     {"rotary_emb.inv_freq", NULL},
     false,
     true},
    {SHARC_FAMILY_LLAMA,
     "mistral",
     "MistralForCausalLM",
     "MistralModel",
     mistral_keys,
     (int)(sizeof mistral_keys / sizeof mistral_keys[0]),
     "",
     {"rotary_emb.inv_freq", NULL},
     false,
     false},
    {SHARC_FAMILY_LLAMA,
     "qwen3_moe",
     "Qwen3MoeForCausalLM",
     "Qwen3MoeModel",
     qwen3_moe_keys,
     (int)(sizeof qwen3_moe_keys / sizeof qwen3_moe_keys[0]),
     "",
     {"rotary_emb.inv_freq", NULL},
     false,
     true},
};
#define HF_QWEN3_MOE_ROW 5
#define HF_LLAMA_ROW     1
#define HF_QWEN2_ROW     2
#define HF_QWEN3_ROW     3
#define HF_MISTRAL_ROW   4

static const hf_family *hf_family_of(sharc_family f) { return &hf_families[f == SHARC_FAMILY_GPT2 ? 0 : HF_LLAMA_ROW]; }

/* The model type a config exports as: its options decide (note [families]). */
static const hf_family *hf_family_for(const sharc_model_config *c) {
    if (c->family == SHARC_FAMILY_GPT2) return &hf_families[0];
    return &hf_families[c->num_experts > 0  ? HF_QWEN3_MOE_ROW
                        : c->qk_norm        ? HF_QWEN3_ROW
                        : c->qkv_bias       ? HF_QWEN2_ROW
                        : c->sliding_window ? HF_MISTRAL_ROW
                                            : HF_LLAMA_ROW];
}

/* --------------------------------------------------------------- config */

typedef struct {
    const char *path;
    json_object *root;
} jcfg;

/* The key's value, NULL when absent or null. */
static json_object *cfg_get(const jcfg *j, const char *key) {
    json_object *v;
    if (!json_object_object_get_ex(j->root, key, &v) || json_object_is_type(v, json_type_null)) return NULL;
    return v;
}

static sharc_status cfg_read_field(const jcfg *j, const hf_key *k, sharc_model_config *c) {
    char *dst = (char *)c + k->off;
    json_object *v = cfg_get(j, k->key);
    if (!v) {
        if (k->flags & HF_REQUIRED)
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is required", j->path, k->key);
        if (!isnan(k->absent)) {
            if (k->kind == HF_INT) *(int *)dst = (int)k->absent;
            else if (k->kind == HF_FLOAT) *(float *)dst = (float)k->absent;
            else *(bool *)dst = k->absent != 0;
        }
        return SHARC_OK;
    }
    switch (k->kind) {
    case HF_INT: {
        int64_t x = json_object_get_int64(v);
        if (!json_object_is_type(v, json_type_int) || x < k->min || x > (1 << 30))
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected an integer >= %d", j->path,
                               k->key, json_object_to_json_string(v), k->min);
        *(int *)dst = (int)x;
        return SHARC_OK;
    }
    case HF_FLOAT:
        if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected a number", j->path, k->key,
                               json_object_to_json_string(v));
        *(float *)dst = (float)json_object_get_double(v);
        return SHARC_OK;
    case HF_BOOL:
        if (!json_object_is_type(v, json_type_boolean))
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected true or false", j->path,
                               k->key, json_object_to_json_string(v));
        *(bool *)dst = json_object_get_boolean(v);
        return SHARC_OK;
    case HF_FIXED:
    case HF_CODE: break;
    }
    return SHARC_ERR_INTERNAL;
}

/* A key sharc implements with one value: absent, or that value (a string,
 * a bool, or null). */
static sharc_status cfg_read_fixed(const jcfg *j, const hf_key *k) {
    json_object *v;
    if (!json_object_object_get_ex(j->root, k->key, &v)) return SHARC_OK;
    const char *got = json_object_to_json_string_ext(v, JSON_C_TO_STRING_SPACED);
    if (!strcmp(k->value, "null")) {
        if (json_object_is_type(v, json_type_null)) return SHARC_OK;
        return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"%s\": %s is not supported (%s)", j->path, k->key, got,
                           k->why);
    }
    if (!strcmp(k->value, "true") || !strcmp(k->value, "false")) {
        if (json_object_is_type(v, json_type_null)) return SHARC_OK;
        if (!json_object_is_type(v, json_type_boolean))
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected true or false", j->path,
                               k->key, got);
        if (!strcmp(got, k->value)) return SHARC_OK;
        return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"%s\": %s is not supported (%s)", j->path, k->key, got,
                           k->why);
    }
    /* a string: null or another type is refused as well */
    if (!strcmp(got, k->value) || (k->also && !strcmp(got, k->also))) return SHARC_OK;
    char expected[128];
    snprintf(expected, sizeof expected, "%s%s%s", k->value, k->also ? " or " : "", k->also ? k->also : "");
    return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"%s\": %s is not supported; expected %s%s", j->path, k->key,
                       json_object_to_json_string(v), expected, k->why);
}

static const char *cfg_str(const jcfg *j, const char *key) {
    json_object *v;
    if (!json_object_object_get_ex(j->root, key, &v) || !json_object_is_type(v, json_type_string)) return NULL;
    return json_object_get_string(v);
}

static sharc_status cfg_family(const jcfg *j, const hf_family **fam) {
    const char *mt = cfg_str(j, "model_type");
    const char *arch = NULL;
    json_object *a;
    if (json_object_object_get_ex(j->root, "architectures", &a) && json_object_is_type(a, json_type_array) &&
        json_object_array_length(a) > 0 && json_object_is_type(json_object_array_get_idx(a, 0), json_type_string))
        arch = json_object_get_string(json_object_array_get_idx(a, 0));
    for (size_t i = 0; i < sizeof hf_families / sizeof hf_families[0]; i++) {
        const hf_family *f = &hf_families[i];
        if (mt ? !strcmp(mt, f->model_type) : (arch && (!strcmp(arch, f->arch) || !strcmp(arch, f->arch_also)))) {
            *fam = f;
            return SHARC_OK;
        }
    }
    return sharc_error(SHARC_ERR_INVALID,
                       "hf config '%s': model_type '%s' (architecture '%s') is not supported; "
                       "expected gpt2, llama, qwen2, qwen3, qwen3_moe or mistral",
                       j->path, mt ? mt : "(none)", arch ? arch : "(none)");
}

/* Integer key: absent -> *out unchanged (error if required). */
static sharc_status cfg_int(const jcfg *j, const char *key, bool required, int lo, int *out) {
    json_object *v;
    if (!json_object_object_get_ex(j->root, key, &v) || json_object_is_type(v, json_type_null)) {
        if (required) return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is required", j->path, key);
        return SHARC_OK;
    }
    int64_t x = json_object_get_int64(v);
    if (!json_object_is_type(v, json_type_int) || x < lo || x > (1 << 30))
        return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected an integer >= %d", j->path, key,
                           json_object_to_json_string(v), lo);
    *out = (int)x;
    return SHARC_OK;
}

static sharc_status cfg_float(const jcfg *j, const char *key, float *out) {
    json_object *v;
    if (!json_object_object_get_ex(j->root, key, &v) || json_object_is_type(v, json_type_null)) return SHARC_OK;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected a number", j->path, key,
                           json_object_to_json_string(v));
    *out = (float)json_object_get_double(v);
    return SHARC_OK;
}

static sharc_status cfg_bool(const jcfg *j, const char *key, bool *out) {
    json_object *v;
    if (!json_object_object_get_ex(j->root, key, &v) || json_object_is_type(v, json_type_null)) return SHARC_OK;
    if (!json_object_is_type(v, json_type_boolean))
        return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected true or false", j->path, key,
                           json_object_to_json_string(v));
    *out = json_object_get_boolean(v);
    return SHARC_OK;
}

/* A number inside an object (rope_scaling / rope_parameters). */
static sharc_status rope_num(const jcfg *j, const char *obj, json_object *o, const char *key, bool required,
                             double *out) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
        if (required)
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" needs \"%s\" for its rope_type", j->path, obj,
                               key);
        return SHARC_OK;
    }
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\".\"%s\" is %s, expected a number", j->path, obj,
                           key, json_object_to_json_string(v));
    *out = json_object_get_double(v);
    return SHARC_OK;
}

/* RoPE from either layout (note [hf-keys]): transformers 4.x's top-level
 * rope_theta + rope_scaling, or 5.x's rope_parameters {rope_type, rope_theta,
 * ...}. rope_type default and llama3 are honoured, any other refused, as is
 * any key inside the object sharc does not know. */
static sharc_status cfg_rope(const jcfg *j, sharc_model_config *c) {
    c->rope_theta = 10000.0f;
    SHARC_TRY(cfg_float(j, "rope_theta", &c->rope_theta));
    json_object *top_theta = NULL;
    json_object_object_get_ex(j->root, "rope_theta", &top_theta);
    const char *objs[2] = {"rope_scaling", "rope_parameters"};
    int seen = 0;
    for (int k = 0; k < 2; k++) {
        json_object *o;
        if (!json_object_object_get_ex(j->root, objs[k], &o) || json_object_is_type(o, json_type_null)) continue;
        if (!json_object_is_type(o, json_type_object))
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected an object", j->path, objs[k],
                               json_object_to_json_string(o));
        if (seen++)
            return sharc_error(SHARC_ERR_INVALID,
                               "hf config '%s': both \"rope_scaling\" and \"rope_parameters\"; "
                               "expected one of the two layouts",
                               j->path);
        const char *type = NULL;
        json_object_object_foreach(o, key, val) {
            if (!strcmp(key, "rope_type") || !strcmp(key, "type")) {
                if (!json_object_is_type(val, json_type_string))
                    return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\".\"%s\" is %s, expected a string",
                                       j->path, objs[k], key, json_object_to_json_string(val));
                type = json_object_get_string(val);
            } else if (strcmp(key, "rope_theta") && strcmp(key, "factor") && strcmp(key, "low_freq_factor") &&
                       strcmp(key, "high_freq_factor") && strcmp(key, "original_max_position_embeddings") &&
                       strcmp(key, "partial_rotary_factor")) {
                return sharc_error(SHARC_ERR_INVALID,
                                   "hf config '%s': \"%s\".\"%s\" is not a key sharc knows; "
                                   "it may change RoPE, so the import stops",
                                   j->path, objs[k], key);
            }
        }
        if (!type) type = "default";
        double theta = -1, partial = 1;
        SHARC_TRY(rope_num(j, objs[k], o, "rope_theta", false, &theta));
        SHARC_TRY(rope_num(j, objs[k], o, "partial_rotary_factor", false, &partial));
        if (partial != 1.0)
            return sharc_error(SHARC_ERR_INVALID,
                               "hf config '%s': \"%s\".\"partial_rotary_factor\": %g is not "
                               "supported (RoPE over the whole head only)",
                               j->path, objs[k], partial);
        if (theta >= 0) {
            if (top_theta && !json_object_is_type(top_theta, json_type_null) && (float)theta != c->rope_theta)
                return sharc_error(SHARC_ERR_INVALID,
                                   "hf config '%s': \"rope_theta\" %g and \"%s\".\"rope_theta\" %g "
                                   "disagree",
                                   j->path, (double)c->rope_theta, objs[k], theta);
            c->rope_theta = (float)theta;
        }
        if (!strcmp(type, "llama3")) {
            double f = 0, lo = 0, hi = 0, orig = 0;
            SHARC_TRY(rope_num(j, objs[k], o, "factor", true, &f));
            SHARC_TRY(rope_num(j, objs[k], o, "low_freq_factor", true, &lo));
            SHARC_TRY(rope_num(j, objs[k], o, "high_freq_factor", true, &hi));
            SHARC_TRY(rope_num(j, objs[k], o, "original_max_position_embeddings", true, &orig));
            if (!(f >= 1) || !(lo > 0) || !(hi > lo) || !(orig >= 1) || orig > (1 << 30) || orig != (int)orig)
                return sharc_error(SHARC_ERR_FORMAT,
                                   "hf config '%s': \"%s\" llama3: factor %g, low_freq_factor %g, "
                                   "high_freq_factor %g, original_max_position_embeddings %g; expected factor >= 1, "
                                   "0 < low < high and an integer >= 1",
                                   j->path, objs[k], f, lo, hi, orig);
            c->rope_factor = (float)f;
            c->rope_low_freq_factor = (float)lo;
            c->rope_high_freq_factor = (float)hi;
            c->rope_original_max_pos = (int)orig;
        } else if (strcmp(type, "default")) {
            return sharc_error(SHARC_ERR_INVALID,
                               "hf config '%s': \"%s\" rope_type \"%s\" is not supported; "
                               "expected \"default\" or \"llama3\"",
                               j->path, objs[k], type);
        } else {
            double f = 1;
            SHARC_TRY(rope_num(j, objs[k], o, "factor", false, &f));
            if (f != 1.0)
                return sharc_error(SHARC_ERR_INVALID,
                                   "hf config '%s': \"%s\" rope_type default with \"factor\" %g "
                                   "is not supported",
                                   j->path, objs[k], f);
        }
    }
    return SHARC_OK;
}

/* The sliding-window keys: Mistral's sliding_window applies to every layer;
 * Qwen2/3's only when use_sliding_window, to layers >= max_window_layers
 * (or where layer_types says "sliding_attention"). sharc has one window
 * for all layers, so a window on some layers only is refused. */
static sharc_status cfg_window(const jcfg *j, const hf_family *fam, sharc_model_config *c) {
    int w = 0;
    SHARC_TRY(cfg_int(j, "sliding_window", false, 1, &w));
    if (fam == &hf_families[HF_MISTRAL_ROW]) {
        c->sliding_window = w;
        return SHARC_OK;
    }
    bool use = false;
    SHARC_TRY(cfg_bool(j, "use_sliding_window", &use));
    int mwl = c->num_layers, nsliding = 0;
    SHARC_TRY(cfg_int(j, "max_window_layers", false, 0, &mwl));
    json_object *lt;
    if (json_object_object_get_ex(j->root, "layer_types", &lt) && !json_object_is_type(lt, json_type_null)) {
        if (!json_object_is_type(lt, json_type_array) || (int)json_object_array_length(lt) != c->num_layers)
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"layer_types\" is not a list of %d layer types",
                               j->path, c->num_layers);
        for (int i = 0; i < c->num_layers; i++) {
            const char *s = json_object_get_string(json_object_array_get_idx(lt, i));
            if (!s || (strcmp(s, "full_attention") && strcmp(s, "sliding_attention")))
                return sharc_error(SHARC_ERR_FORMAT,
                                   "hf config '%s': \"layer_types\"[%d] is %s, expected "
                                   "\"full_attention\" or \"sliding_attention\"",
                                   j->path, i, json_object_to_json_string(json_object_array_get_idx(lt, i)));
            nsliding += !strcmp(s, "sliding_attention");
        }
        if (nsliding && (!use || !w))
            return sharc_error(SHARC_ERR_FORMAT,
                               "hf config '%s': \"layer_types\" has sliding layers but "
                               "use_sliding_window / sliding_window do not set a window",
                               j->path);
    } else if (use && w) {
        nsliding = mwl < c->num_layers ? c->num_layers - mwl : 0;
    }
    if (!use || !w || nsliding == 0) return SHARC_OK;
    if (nsliding != c->num_layers)
        return sharc_error(SHARC_ERR_INVALID,
                           "hf config '%s': \"max_window_layers\" / \"layer_types\": a sliding "
                           "window on %d of %d layers is not supported (all or none)",
                           j->path, nsliding, c->num_layers);
    c->sliding_window = w;
    return SHARC_OK;
}

/* Qwen3-MoE's mlp_only_layers: a list of layer indices (absent or null:
 * none), kept as model.mlp_only_layers' comma-separated string. */
static sharc_status cfg_layer_list(const jcfg *j, const char *key, sharc_model_config *c) {
    json_object *v;
    c->mlp_only_layers[0] = 0;
    if (!json_object_object_get_ex(j->root, key, &v) || json_object_is_type(v, json_type_null)) return SHARC_OK;
    size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
    for (size_t i = 0; i < n || !json_object_is_type(v, json_type_array); i++) {
        json_object *x = json_object_is_type(v, json_type_array) ? json_object_array_get_idx(v, i) : v;
        int64_t l = json_object_get_int64(x);
        size_t at = strlen(c->mlp_only_layers);
        if (!json_object_is_type(v, json_type_array) || !json_object_is_type(x, json_type_int) || l < 0 ||
            l >= c->num_layers || at + 16 >= sizeof c->mlp_only_layers)
            return sharc_error(SHARC_ERR_FORMAT,
                               "hf config '%s': \"%s\" is %s, expected a list of layer indices in [0, %d)", j->path,
                               key, json_object_to_json_string(v), c->num_layers);
        snprintf(c->mlp_only_layers + at, sizeof c->mlp_only_layers - at, "%s%lld", at ? "," : "", (long long)l);
    }
    return SHARC_OK;
}

/* bos/eos ids (an integer, a list whose first entry is kept, or null);
 * ids outside the vocabulary are dropped (they name no token). */
static sharc_status cfg_token_id(const jcfg *j, const char *key, int V, int *out) {
    json_object *v;
    *out = -1;
    if (!json_object_object_get_ex(j->root, key, &v) || json_object_is_type(v, json_type_null)) return SHARC_OK;
    if (json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0) v = json_object_array_get_idx(v, 0);
    if (!json_object_is_type(v, json_type_int))
        return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected a token id", j->path, key,
                           json_object_to_json_string(v));
    int64_t id = json_object_get_int64(v);
    if (id >= 0 && id < V) *out = (int)id;
    return SHARC_OK;
}

/* Note [hf-keys]. Every key of a config.json is honoured (a row of its
 * family that sets the model), known harmless (keys_common, or a row marked
 * HF_HARMLESS: bookkeeping, dropout, which sharc never applies, ...), or
 * refused by name: a key sharc does not know may change the model, so an
 * import never guesses. docs/ARCHITECTURE.md has the table. */
static sharc_status cfg_check_keys(const jcfg *j, const hf_family *fam) {
    json_object_object_foreach(j->root, key, val) {
        (void)val;
        bool known = false;
        for (int i = 0; keys_common[i] && !known; i++) known = !strcmp(keys_common[i], key);
        for (int i = 0; i < fam->nkeys && !known; i++) known = !strcmp(fam->keys[i].key, key);
        if (!known)
            return sharc_error(SHARC_ERR_INVALID,
                               "hf config '%s': key \"%s\" is not one sharc knows for model_type %s; it may change "
                               "the model, so the import stops (docs/ARCHITECTURE.md lists the keys)",
                               j->path, key, fam->model_type);
    }
    return SHARC_OK;
}

sharc_status sharc_hf_read_config(const char *dir, sharc_model_config *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    jcfg j = {.path = path};
    SHARC_TRY(read_json(path, &j.root));
    const hf_family *fam = NULL;
    sharc_status st = cfg_family(&j, &fam);
    if (st == SHARC_OK) st = cfg_check_keys(&j, fam);
    if (st == SHARC_OK) sharc_model_config_default(c, fam->family);
    for (int i = 0; st == SHARC_OK && i < fam->nkeys; i++) {
        const hf_key *k = &fam->keys[i];
        if (k->flags & HF_READ) st = k->kind == HF_FIXED ? cfg_read_fixed(&j, k) : cfg_read_field(&j, k, c);
    }
    if (st == SHARC_OK && fam->family == SHARC_FAMILY_LLAMA) {
        c->qkv_bias = fam->qkv_bias;
        c->qk_norm = fam->qk_norm;
        st = cfg_rope(&j, c);
        if (st == SHARC_OK && fam != &hf_families[HF_LLAMA_ROW]) st = cfg_window(&j, fam, c);
        if (st == SHARC_OK && fam == &hf_families[HF_QWEN3_MOE_ROW]) st = cfg_layer_list(&j, "mlp_only_layers", c);
    }
    if (st == SHARC_OK) st = cfg_token_id(&j, "bos_token_id", c->vocab_size, &c->bos_token_id);
    if (st == SHARC_OK) st = cfg_token_id(&j, "eos_token_id", c->vocab_size, &c->eos_token_id);
    json_object_put(j.root);
    if (st != SHARC_OK) return st;
    st = sharc_model_config_validate(c);
    if (st != SHARC_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", sharc_last_error());
        return sharc_error(st, "hf config '%s': %s", path, msg);
    }
    return SHARC_OK;
}

sharc_status sharc_hf_check_config(const char *dir, const sharc_model_config *run) {
    sharc_model_config hf, r = *run;
    SHARC_TRY(sharc_hf_read_config(dir, &hf));
    SHARC_TRY(sharc_model_config_validate(&r));
    if (hf.family != r.family)
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json' is a %s model, model.family is %s", dir,
                           sharc_family_name(hf.family), sharc_family_name(r.family));
    /* the checked keys, in the order of the model's fields */
    const hf_family *fam = hf_family_for(&hf);
    for (size_t at = 0; at < sizeof hf; at++)
        for (int i = 0; i < fam->nkeys; i++) {
            const hf_key *k = &fam->keys[i];
            if (!(k->flags & HF_CHECK) || k->off != at) continue;
            const char *a = (const char *)&hf + at, *b = (const char *)&r + at;
            if (k->kind == HF_INT && *(const int *)a != *(const int *)b)
                return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': %s is %d, %s is %d", dir, k->key,
                                   *(const int *)a, k->field, *(const int *)b);
            if (k->kind == HF_FLOAT && *(const float *)a != *(const float *)b)
                return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': %s is %g, %s is %g", dir, k->key,
                                   (double)*(const float *)a, k->field, (double)*(const float *)b);
            if (k->kind == HF_BOOL && *(const bool *)a != *(const bool *)b)
                return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': %s is %s, %s is %s", dir, k->key,
                                   *(const bool *)a ? "true" : "false", k->field, *(const bool *)b ? "true" : "false");
        }
    if (hf.family == SHARC_FAMILY_GPT2) return SHARC_OK;
    /* the keys read by code (note [hf-keys]) */
    if (hf.rope_theta != r.rope_theta)
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': rope_theta is %g, model.rope_theta is %g", dir,
                           (double)hf.rope_theta, (double)r.rope_theta);
    if (hf.qkv_bias != r.qkv_bias || hf.qk_norm != r.qk_norm)
        return sharc_error(SHARC_ERR_INVALID,
                           "hf '%s/config.json': model_type %s (q/k/v biases %s, q/k norms %s), "
                           "model.qkv_bias is %s, model.qk_norm is %s",
                           dir, fam->model_type, hf.qkv_bias ? "yes" : "no", hf.qk_norm ? "yes" : "no",
                           r.qkv_bias ? "true" : "false", r.qk_norm ? "true" : "false");
    for (int l = 0; l < hf.num_layers; l++)
        if (sharc_model_layer_is_moe(&hf, l) != sharc_model_layer_is_moe(&r, l))
            return sharc_error(SHARC_ERR_INVALID,
                               "hf '%s/config.json': layer %d is %s there (mlp_only_layers [%s]), %s here "
                               "(model.mlp_only_layers '%s')",
                               dir, l, sharc_model_layer_is_moe(&hf, l) ? "MoE" : "dense", hf.mlp_only_layers,
                               sharc_model_layer_is_moe(&r, l) ? "MoE" : "dense", r.mlp_only_layers);
    if (hf.sliding_window != r.sliding_window)
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': sliding_window is %d, model.sliding_window is %d",
                           dir, hf.sliding_window, r.sliding_window);
    if (hf.rope_factor != r.rope_factor || hf.rope_low_freq_factor != r.rope_low_freq_factor ||
        hf.rope_high_freq_factor != r.rope_high_freq_factor || hf.rope_original_max_pos != r.rope_original_max_pos)
        return sharc_error(SHARC_ERR_INVALID,
                           "hf '%s/config.json': rope scaling factor %g (low %g, high %g, original "
                           "%d), model.rope_factor %g (low %g, high %g, original %d)",
                           dir, (double)hf.rope_factor, (double)hf.rope_low_freq_factor,
                           (double)hf.rope_high_freq_factor, hf.rope_original_max_pos, (double)r.rope_factor,
                           (double)r.rope_low_freq_factor, (double)r.rope_high_freq_factor, r.rope_original_max_pos);
    return SHARC_OK;
}

/* ---------------------------------------------------------------- names */

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static bool ends_with_any(const char *s, const char *const *suffixes) {
    for (int i = 0; suffixes[i]; i++)
        if (ends_with(s, suffixes[i])) return true;
    return false;
}

/* The family whose parameter names the engine holds. */
static const hf_family *engine_family(const sharc_fsdp *e) {
    int u, p;
    return hf_family_of(sharc_fsdp_find_param(e, "wte.weight", &u, &p) == SHARC_OK ? SHARC_FAMILY_GPT2
                                                                                   : SHARC_FAMILY_LLAMA);
}

/* A parameter's name in HF files with `prefix` (GPT2LMHeadModel's lm_head has none). */
static void hf_name(char *out, size_t n, const char *prefix, const char *name) {
    snprintf(out, n, "%s%s", strcmp(name, "lm_head.weight") ? prefix : "", name);
}

/* Stored (in, out) in HF files: GPT-2's Conv1D weights. */
static bool is_transposed(const hf_family *f, const char *name) {
    return sharc_model_param_hf_transposed(f->family, name); /* note [param-table] in src/model/params.c */
}

bool sharc_hf_tensor_name(sharc_family family, const char *name, char *out, size_t n) {
    const hf_family *f = hf_family_of(family);
    hf_name(out, n, f->prefix, name);
    return is_transposed(f, name);
}

/* Tensors of HF files that are not parameters and are skipped on import. */
static bool ignorable(const hf_family *f, bool has_lm_head, const char *name) {
    if (ends_with_any(name, f->buffers)) return true;
    return !has_lm_head && !strcmp(name, "lm_head.weight"); /* tied: a copy of the embedding */
}

static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    buf[0] = 0;
    for (int d = 0; d < ndim; d++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* ----------------------------------------------------------------- load */

/* Elements [p0, p0 + len) of an (R, K) parameter from its (K, R) transpose. */
static sharc_status read_transposed(const sharc_st_file *f, const sharc_st_tensor *t, int64_t R, int64_t K, int64_t p0,
                                    int64_t len, float *dst) {
    if (len == 0) return SHARC_OK;
    int64_t o_lo = p0 / K, o_hi = (p0 + len - 1) / K, span = o_hi - o_lo + 1;
    float *tmp = malloc(sizeof(float) * (size_t)(span * K));
    if (!tmp) return sharc_error(SHARC_ERR_NOMEM, "hf: out of memory");
    sharc_status st = SHARC_OK;
    for (int64_t i = 0; i < K && st == SHARC_OK; i++) st = sharc_st_read_f32(f, t, i * R + o_lo, span, tmp + i * span);
    for (int64_t k = 0; k < len && st == SHARC_OK; k++) {
        int64_t o = (p0 + k) / K, i = (p0 + k) % K;
        dst[k] = tmp[i * span + (o - o_lo)];
    }
    free(tmp);
    return st;
}

static sharc_status load_shards(sharc_fsdp *e, const char *dir) {
    sharc_st_set *set;
    SHARC_TRY(sharc_st_set_open(&set, dir));
    const hf_family *fam = engine_family(e);
    /* the prefix is optional on import: detected from the first parameter (the token embedding) */
    char probe[SHARC_NAME_MAX + 16];
    hf_name(probe, sizeof probe, fam->prefix, sharc_fsdp_unit_spec(e, 0)->params[0].name);
    const char *prefix = *fam->prefix && sharc_st_set_find(set, probe, NULL) ? fam->prefix : "";
    int u_, p_;
    bool has_lm_head = sharc_fsdp_find_param(e, "lm_head.weight", &u_, &p_) == SHARC_OK;
    sharc_status st = SHARC_OK;
    char hname[SHARC_NAME_MAX + 16];
    /* every parameter present with its shape and a float dtype */
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams && st == SHARC_OK; p++) {
            const sharc_param_spec *ps = &s->params[p];
            hf_name(hname, sizeof hname, prefix, ps->name);
            const sharc_st_file *f;
            const sharc_st_tensor *t = sharc_st_set_find(set, hname, &f);
            if (!t) {
                st = sharc_error(SHARC_ERR_FORMAT,
                                 "hf '%s': parameter '%s' is missing (is this a checkpoint of another model?)", dir,
                                 hname);
                break;
            }
            int64_t want[4];
            for (int d = 0; d < ps->ndim; d++) want[d] = ps->shape[d];
            if (is_transposed(fam, ps->name)) {
                want[0] = ps->shape[1];
                want[1] = ps->shape[0];
            }
            bool same = t->ndim == ps->ndim;
            for (int d = 0; same && d < ps->ndim; d++) same = t->shape[d] == want[d];
            if (!same) {
                char w[96], g[96];
                shape_str(w, sizeof w, want, ps->ndim);
                shape_str(g, sizeof g, t->shape, t->ndim);
                st = sharc_error(SHARC_ERR_FORMAT, "hf '%s': '%s' has shape [%s], this model needs [%s]",
                                 sharc_st_path(f), hname, g, w);
                break;
            }
            if (t->dtype != SHARC_DT_F32 && t->dtype != SHARC_DT_BF16 && t->dtype != SHARC_DT_F16)
                st = sharc_error(SHARC_ERR_FORMAT, "hf '%s': '%s' is %s; expected F32, BF16 or F16", sharc_st_path(f),
                                 hname, sharc_dtype_st_name(t->dtype));
        }
    }
    /* every tensor a parameter or a known buffer */
    for (int i = 0; i < sharc_st_set_count(set) && st == SHARC_OK; i++) {
        const sharc_st_file *f;
        const sharc_st_tensor *t = sharc_st_set_tensor_at(set, i, &f);
        const char *n = t->name;
        if (*prefix && !strncmp(n, prefix, strlen(prefix))) n += strlen(prefix);
        if (sharc_fsdp_find_param(e, n, &u_, &p_) == SHARC_OK || ignorable(fam, has_lm_head, n)) continue;
        st = sharc_error(SHARC_ERR_FORMAT, "hf '%s': tensor '%s' is not a parameter of this %s model", sharc_st_path(f),
                         t->name, fam->model_type);
    }
    /* everything checked: read this rank's segments */
    const bool host = sharc_device_is_host(sharc_fsdp_shard_device(e));
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        sharc_activity_phase("importing", u, s->name); /* progress for the watchdog */
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        float *shard = sharc_fsdp_shard_write(e, u);
        /* note [shard-host-io]: a device's shard is read into one host
         * buffer per unit, copied in by queued copies, waited for once */
        int64_t need = 1;
        for (int k = 0; k < nseg; k++)
            if (segs[k].shard_off + segs[k].len > need) need = segs[k].shard_off + segs[k].len;
        float *tmp = host ? NULL : malloc((size_t)need * sizeof(float));
        if (!host && !tmp)
            st = sharc_error(SHARC_ERR_NOMEM, "hf '%s': out of memory for a unit of %lld floats", dir, (long long)need);
        for (int k = 0; k < nseg && st == SHARC_OK; k++) {
            const sharc_param_spec *ps = &s->params[segs[k].param];
            hf_name(hname, sizeof hname, prefix, ps->name);
            const sharc_st_file *f;
            const sharc_st_tensor *t = sharc_st_set_find(set, hname, &f);
            float *dst = (tmp ? tmp : shard) + segs[k].shard_off;
            if (is_transposed(fam, ps->name))
                st = read_transposed(f, t, ps->shape[0], ps->shape[1], segs[k].param_off, segs[k].len, dst);
            else st = sharc_st_read_f32(f, t, segs[k].param_off, segs[k].len, dst);
            if (st == SHARC_OK && tmp) st = sharc_fsdp_shard_queue_in(e, u, segs[k].shard_off, dst, segs[k].len);
        }
        if (tmp) { /* the unit's one wait, also after a failure: queued copies read tmp */
            sharc_status w = sharc_device_synchronize(sharc_device_stream(sharc_fsdp_shard_device(e)));
            if (st == SHARC_OK) st = w;
            free(tmp);
        }
    }
    sharc_st_set_close(set);
    return st;
}

sharc_status sharc_hf_load(sharc_fsdp *e, const char *dir) {
    /* on every rank whatever happens inside: the shards may be written (the
     * write bracket of sharc/fsdp.h) */
    sharc_fsdp_shard_write_begin(e);
    sharc_status st = load_shards(e, dir);
    sharc_fsdp_shard_write_end(e);
    return st;
}

/* --------------------------------------------------------------- export */

/* The shortest decimal that reads back as the same float. */
static json_object *json_float(float v) {
    char buf[40];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    return json_object_new_double_s((double)v, buf);
}

/* The value export writes for a key read by code (note [hf-keys]). */
static json_object *config_code_value(const sharc_model_config *c, const hf_family *fam, const char *key) {
    bool mistral = fam == &hf_families[HF_MISTRAL_ROW];
    if (!strcmp(key, "rope_theta")) return json_float(c->rope_theta);
    if (!strcmp(key, "rope_scaling")) {
        if (c->rope_factor == 0.0f) return NULL;
        json_object *rs = json_object_new_object();
        json_object_object_add(rs, "rope_type", json_object_new_string("llama3"));
        json_object_object_add(rs, "factor", json_float(c->rope_factor));
        json_object_object_add(rs, "low_freq_factor", json_float(c->rope_low_freq_factor));
        json_object_object_add(rs, "high_freq_factor", json_float(c->rope_high_freq_factor));
        json_object_object_add(rs, "original_max_position_embeddings", json_object_new_int(c->rope_original_max_pos));
        return rs;
    }
    if (!strcmp(key, "sliding_window"))
        return c->sliding_window || mistral ? json_object_new_int(c->sliding_window) : NULL;
    if (!strcmp(key, "use_sliding_window")) return json_object_new_boolean(c->sliding_window > 0);
    if (!strcmp(key, "max_window_layers")) return json_object_new_int(c->sliding_window ? 0 : c->num_layers);
    if (!strcmp(key, "mlp_only_layers")) { /* the dense layers of an MoE model, in order */
        json_object *a = json_object_new_array();
        int step = c->decoder_sparse_step > 0 ? c->decoder_sparse_step : 1;
        for (int l = 0; l < c->num_layers; l++)
            if ((l + 1) % step == 0 && !sharc_model_layer_is_moe(c, l))
                json_object_array_add(a, json_object_new_int(l));
        return a;
    }
    return NULL;
}

/* config.json of a model: the rows of its family marked HF_WRITE, in order
 * (note [hf-map]), the model type chosen by its options. */
static char *config_json(const sharc_model_config *cfg, sharc_dtype dtype) {
    sharc_model_config full = *cfg, *c = &full;
    (void)sharc_model_config_validate(c); /* head_dim and the other derived values */
    const hf_family *fam = hf_family_for(c);
    if (fam == &hf_families[HF_QWEN2_ROW] && c->head_dim * c->num_heads != c->embed_dim) return NULL;
    if (fam == &hf_families[HF_QWEN3_MOE_ROW] && (!c->qk_norm || c->qkv_bias)) return NULL;
    json_object *r = json_object_new_object();
    const char *td = dtype == SHARC_DT_BF16 ? "bfloat16" : dtype == SHARC_DT_F16 ? "float16" : "float32";
    json_object *arch = json_object_new_array();
    json_object_array_add(arch, json_object_new_string(fam->arch));
    json_object_object_add(r, "architectures", arch);
    json_object_object_add(r, "model_type", json_object_new_string(fam->model_type));
    for (int i = 0; i < fam->nkeys; i++) {
        const hf_key *k = &fam->keys[i];
        if (!(k->flags & HF_WRITE)) continue;
        const char *src = (const char *)c + k->off;
        json_object *v = NULL;
        switch (k->kind) {
        case HF_INT:
            if (!(k->flags & HF_NULL_4C) || *(const int *)src != 4 * c->embed_dim)
                v = json_object_new_int(*(const int *)src);
            break;
        case HF_FLOAT: v = json_float(*(const float *)src); break;
        case HF_BOOL: v = json_object_new_boolean(*(const bool *)src); break;
        case HF_FIXED: v = json_tokener_parse(k->value); break; /* "null" is NULL: a null value */
        case HF_CODE: v = config_code_value(c, fam, k->key); break;
        }
        json_object_object_add(r, k->key, v);
    }
    /* ids inside the vocabulary only: GPT-2's 50256 where it exists, else
     * what the import carried, else null (HF's class defaults would name
     * tokens a small vocabulary does not have) */
    for (int k = 0; k < 2; k++) {
        int id = k ? c->eos_token_id : c->bos_token_id;
        if (id < 0 && c->family == SHARC_FAMILY_GPT2) id = 50256;
        json_object_object_add(r, k ? "eos_token_id" : "bos_token_id",
                               id >= 0 && id < c->vocab_size ? json_object_new_int(id) : NULL);
    }
    json_object_object_add(r, "torch_dtype", json_object_new_string(td));
    char *out = strdup(json_object_to_json_string_ext(r, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
    json_object_put(r);
    return out;
}

/* Remove a temporary directory this export created, with its files. */
static void remove_tmp_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        char p[4600];
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

/* What an export that crashed left beside `dir`: DIR.sharc-tmp-PID (note
 * [stale-tmp] in src/core/fileio.c), removed by the next export to DIR. */
static void remove_stale_tmp_dirs(const char *dir) {
    char parent[4200], p[4600];
    if ((size_t)snprintf(parent, sizeof parent, "%s", dir) >= sizeof parent) return; /* longer than PATH_MAX */
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    char prefix[512];
    /* a shortened prefix would match other names: a base this long (over
     * NAME_MAX) has no siblings of that name anyway */
    if ((size_t)snprintf(prefix, sizeof prefix, "%s.sharc-tmp-", base) >= sizeof prefix) return;
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    DIR *d = opendir(parent);
    if (!d) return;
    struct dirent *de;
    const size_t pl = strlen(prefix);
    char own[32];
    snprintf(own, sizeof own, "%ld", (long)getpid());
    while ((de = readdir(d))) {
        const char *digits = de->d_name + pl;
        if (strncmp(de->d_name, prefix, pl) || !*digits || strspn(digits, "0123456789") != strlen(digits) ||
            !strcmp(digits, own))
            continue;
        snprintf(p, sizeof p, "%s/%s", parent, de->d_name);
        remove_tmp_dir(p);
    }
    closedir(d);
}

/* The target must not exist, or be an empty directory. */
static sharc_status check_target(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0) return SHARC_OK;
    if (!S_ISDIR(sb.st_mode))
        return sharc_error(SHARC_ERR_INVALID, "hf export: '%s' exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) return sharc_error(SHARC_ERR_IO, "hf export: cannot read '%s': %s", dir, strerror(errno));
    struct dirent *de;
    bool empty = true;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = false;
    closedir(d);
    if (!empty)
        return sharc_error(SHARC_ERR_INVALID,
                           "hf export: '%s' is not empty; refusing to mix files into it (choose a new directory)", dir);
    return SHARC_OK;
}

typedef struct {
    char hname[SHARC_NAME_MAX + 16];
    int64_t shape[4];
    int ndim;
    uint64_t bytes;
    int file;
    bool conv1d;
} export_item;

sharc_status sharc_hf_export(sharc_fsdp *e, sharc_comm *world, const sharc_model_config *cfg, const char *dir_in,
                             sharc_dtype dtype, uint64_t max_shard_bytes) {
    /* "out/" names the directory "out": the temporary one is its sibling */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", dir_in);
    for (size_t l = strlen(dir); l > 1 && dir[l - 1] == '/'; l--) dir[l - 1] = 0;
    bool writer = !world || sharc_comm_rank(world) == 0;
    const hf_family *fam = hf_family_of(cfg->family);
    sharc_status st = SHARC_OK;
    if (dtype != SHARC_DT_F32 && dtype != SHARC_DT_BF16 && dtype != SHARC_DT_F16)
        st = sharc_error(SHARC_ERR_INVALID, "hf export: dtype %s, expected F32, BF16 or F16",
                         sharc_dtype_st_name(dtype));
    if (fam != engine_family(e))
        st = sharc_error(SHARC_ERR_INVALID, "hf export: the config's family does not match the engine's parameters");
    int total = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) total += sharc_fsdp_unit_spec(e, u)->nparams;
    export_item *items = calloc((size_t)total, sizeof *items);
    sharc_st_entry *entries = calloc((size_t)total, sizeof *entries);
    float *full = sharc_alloc((size_t)sharc_fsdp_gathered_unit_bytes(e), SHARC_MEM_OTHER);
    if (!items || !entries || !full) st = sharc_error(SHARC_ERR_NOMEM, "hf export: out of memory");
    /* the plan: names, shapes, shard assignment (the same on every rank) */
    int n = 0, nfiles = 1;
    int64_t max_numel = 1;
    uint64_t total_bytes = 0, cur = 0;
    size_t esize = sharc_dtype_size(dtype == SHARC_DT_F16 || dtype == SHARC_DT_BF16 ? dtype : SHARC_DT_F32);
    for (int u = 0; u < sharc_fsdp_num_units(e) && items; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams; p++, n++) {
            const sharc_param_spec *ps = &s->params[p];
            export_item *it = &items[n];
            hf_name(it->hname, sizeof it->hname, fam->prefix, ps->name);
            it->ndim = ps->ndim;
            for (int d = 0; d < ps->ndim; d++) it->shape[d] = ps->shape[d];
            it->conv1d = is_transposed(fam, ps->name);
            if (it->conv1d) {
                it->shape[0] = ps->shape[1];
                it->shape[1] = ps->shape[0];
            }
            it->bytes = (uint64_t)ps->numel * esize;
            if (max_shard_bytes > 0 && cur > 0 && cur + it->bytes > max_shard_bytes) {
                nfiles++;
                cur = 0;
            }
            it->file = nfiles - 1;
            cur += it->bytes;
            total_bytes += it->bytes;
            if (ps->numel > max_numel) max_numel = ps->numel;
            entries[n] = (sharc_st_entry){.name = it->hname, .dtype = dtype, .ndim = it->ndim, .shape = it->shape};
        }
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.sharc-tmp-%ld", dir, (long)getpid());
    bool made_tmp = false;
    float *tbuf = NULL;
    uint16_t *hbuf = NULL;
    if (writer && st == SHARC_OK) st = check_target(dir);
    if (writer && st == SHARC_OK) {
        remove_stale_tmp_dirs(dir);
        if (mkdir(tmp, 0755) != 0)
            st = sharc_error(SHARC_ERR_IO, "hf export: cannot create '%s': %s", tmp, strerror(errno));
        else made_tmp = true;
    }
    if (writer && st == SHARC_OK) {
        tbuf = malloc(sizeof(float) * (size_t)max_numel);
        hbuf = malloc(sizeof(uint16_t) * (size_t)max_numel);
        if (!tbuf || !hbuf) st = sharc_error(SHARC_ERR_NOMEM, "hf export: out of memory");
    }
    if (writer && st == SHARC_OK) {
        char *js = config_json(cfg, dtype), path[4400];
        snprintf(path, sizeof path, "%s/config.json", tmp);
        st = js ? sharc_write_text_atomic(path, js)
             : cfg->num_experts > 0
                 ? sharc_error(SHARC_ERR_INVALID,
                               "hf export: a model with experts (model.num_experts %d) exports as qwen3_moe, which "
                               "has q/k norms and no q/k/v biases; set model.qk_norm true and model.qkv_bias false",
                               cfg->num_experts)
                 : sharc_error(SHARC_ERR_INVALID,
                               "hf export: a Qwen2 model (q/k/v biases) with head_dim %d != "
                               "embed_dim / num_heads has no Hugging Face config; set model.head_dim to 0",
                               cfg->head_dim);
        free(js);
    }
    /* agree on the set-up (buffers everywhere, the target and temporary
     * directory on rank 0) before the first gather: if it failed anywhere,
     * no rank gathers at all */
    if (world)
        st = sharc_comm_agree(world, st, SHARC_ERR_IO, "hf export: setting up failed on rank %d (see its message)");
    const bool setup_ok = st == SHARC_OK;
    bool ok = setup_ok;
    /* every rank takes part in every gather, even after a later local
     * failure; rank 0 streams the files */
    sharc_st_stream *out = NULL;
    int k = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e) && setup_ok; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        sharc_activity_phase("exporting", u, s->name); /* progress for the watchdog */
        sharc_status g = sharc_fsdp_gather_master(e, u, full);
        if (g != SHARC_OK && ok) {
            st = g;
            ok = false;
        }
        for (int p = 0; p < s->nparams; p++, k++) {
            if (!writer || !ok) continue;
            const sharc_param_spec *ps = &s->params[p];
            export_item *it = &items[k];
            if (!out) { /* first tensor of a file */
                int last = k;
                while (last + 1 < n && items[last + 1].file == it->file) last++;
                char path[4400];
                if (nfiles == 1) snprintf(path, sizeof path, "%s/model.safetensors", tmp);
                else snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", tmp, it->file + 1, nfiles);
                st = sharc_st_stream_open(&out, path, entries + k, last - k + 1, NULL, NULL, 0);
                if (st != SHARC_OK) {
                    ok = false;
                    continue;
                }
                for (int q = 0; q <= last - k; q++)
                    if (sharc_st_stream_order(out, q) != q) {
                        st = sharc_error(SHARC_ERR_INTERNAL, "hf export: stream reordered tensors");
                        ok = false;
                    }
            }
            if (!ok) continue;
            const float *src = full + ps->offset;
            if (it->conv1d) { /* (out, in) -> (in, out) */
                int64_t R = ps->shape[0], K = ps->shape[1];
                for (int64_t o = 0; o < R; o++)
                    for (int64_t i = 0; i < K; i++) tbuf[i * R + o] = src[o * K + i];
                src = tbuf;
            }
            if (dtype == SHARC_DT_F32) {
                st = sharc_st_stream_append(out, src, (size_t)ps->numel * sizeof(float));
            } else {
                for (int64_t i = 0; i < ps->numel; i++)
                    hbuf[i] = dtype == SHARC_DT_BF16 ? sharc_f32_to_bf16(src[i]) : sharc_f32_to_f16(src[i]);
                st = sharc_st_stream_append(out, hbuf, (size_t)ps->numel * sizeof(uint16_t));
            }
            ok = st == SHARC_OK;
            if (ok && (k + 1 == n || items[k + 1].file != it->file)) {
                st = sharc_st_stream_close(out);
                out = NULL;
                ok = st == SHARC_OK;
            }
        }
    }
    if (out) sharc_st_stream_abort(out);
    if (writer && ok && nfiles > 1) {
        json_object *r = json_object_new_object(), *meta = json_object_new_object(), *map = json_object_new_object();
        json_object_object_add(meta, "total_size", json_object_new_int64((int64_t)total_bytes));
        json_object_object_add(r, "metadata", meta);
        char fname[64];
        for (int i = 0; i < n; i++) {
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", items[i].file + 1, nfiles);
            json_object_object_add(map, items[i].hname, json_object_new_string(fname));
        }
        json_object_object_add(r, "weight_map", map);
        char path[4400];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", tmp);
        st = sharc_write_text_atomic(
            path, json_object_to_json_string_ext(r, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
        json_object_put(r);
        ok = st == SHARC_OK;
    }
    if (writer && ok) {
        /* publish: an empty target directory is replaced, a missing one created */
        if (rename(tmp, dir) != 0) {
            st = sharc_error(SHARC_ERR_IO, "hf export: cannot rename '%s' to '%s': %s", tmp, dir, strerror(errno));
            ok = false;
        } else {
            made_tmp = false;
            sharc_fsync_dir(dir);
        }
    }
    if (made_tmp) remove_tmp_dir(tmp);
    free(tbuf);
    free(hbuf);
    sharc_free(full);
    free(entries);
    free(items);
    /* every rank returns the same verdict (note [agreement]) */
    if (world) st = sharc_comm_agree(world, st, SHARC_ERR_IO, "hf export: writing failed on rank %d (see its message)");
    return st;
}

bool sharc_hf_is_dir(const char *path) {
    struct stat sb;
    char cfg[4200];
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return false;
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    return stat(cfg, &sb) == 0 && S_ISREG(sb.st_mode);
}
