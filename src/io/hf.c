/* hf.c: sharc_st_set_* (the safetensors files of a Hugging Face model
 * directory, with its index), sharc_hf_read_config, sharc_hf_load and
 * sharc_hf_export. JSON is read and written with json-c. */
#include "sharc/hf.h"
#include "sharc/activity.h"
#include "sharc/alloc.h"
#include "sharc/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ file sets */

typedef struct {
    const char *name;        /* owned by the tensor */
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
                           trailing ? "bytes after the value"
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
            st = sharc_error(SHARC_ERR_FORMAT, "index '%s': weight_map['%s'] = '%s' is not a file name in the directory",
                             ipath, name, fname);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        int fi = set_file_index(s, path);
        if (fi < 0) {
            if (!file_exists(path)) {
                st = sharc_error(SHARC_ERR_INVALID, "index '%s': shard '%s' (holding '%s') is missing", ipath, path, name);
                break;
            }
            if ((st = set_add_file(s, path)) != SHARC_OK) break;
            fi = s->nfiles - 1;
        }
        const sharc_st_tensor *t = sharc_st_find(s->files[fi], name);
        if (!t) {
            st = sharc_error(SHARC_ERR_FORMAT, "index '%s' maps '%s' to '%s', which has no such tensor", ipath, name, path);
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

/* --------------------------------------------------------------- config */

typedef struct {
    const char *path;
    json_object *root;
} jcfg;

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

/* A key sharc does not implement unless it has the value `want` (or is absent/null). */
static sharc_status cfg_require_bool(const jcfg *j, const char *key, bool want, const char *why) {
    bool b = want;
    SHARC_TRY(cfg_bool(j, key, &b));
    if (b != want)
        return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"%s\": %s is not supported (%s)", j->path, key,
                           b ? "true" : "false", why);
    return SHARC_OK;
}

static const char *cfg_str(const jcfg *j, const char *key) {
    json_object *v;
    if (!json_object_object_get_ex(j->root, key, &v) || !json_object_is_type(v, json_type_string)) return NULL;
    return json_object_get_string(v);
}

/* Note [hf-keys]. Every key of a config.json is honoured (it sets the
 * model), known harmless (it does not change the math sharc computes:
 * bookkeeping, dropout, which sharc never applies, or a value checked to be
 * the one sharc implements), or refused by name: a key sharc does not know
 * may change the model, so an import never guesses. The lists below are the
 * whole decision; docs/ARCHITECTURE.md "Model families" has the table. */
typedef enum { HF_GPT2, HF_LLAMA, HF_QWEN2, HF_QWEN3, HF_MISTRAL } hf_type;
static const char *const hf_type_names[] = {"gpt2", "llama", "qwen2", "qwen3", "mistral"};
static const char *const hf_arch_names[] = {"GPT2LMHeadModel", "LlamaForCausalLM", "Qwen2ForCausalLM",
                                            "Qwen3ForCausalLM", "MistralForCausalLM"};

static const char *const keys_common[] = {
    /* honoured */
    "model_type", "architectures", "vocab_size", "tie_word_embeddings", "initializer_range", "bos_token_id",
    "eos_token_id",
    /* harmless: bookkeeping and inference-time switches */
    "transformers_version", "torch_dtype", "dtype", "use_cache", "pad_token_id", "_name_or_path",
    "output_attentions", "output_hidden_states", "return_dict", NULL};
static const char *const keys_gpt2[] = {
    "n_embd", "n_layer", "n_head", "n_positions", "n_inner", "layer_norm_epsilon", "activation_function",
    "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention",
    /* harmless: n_ctx = n_positions; dropout; the double-heads model's summary; fp32 upcast only */
    "n_ctx", "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "task_specific_params", "reorder_and_upcast_attn", NULL};
static const char *const keys_llama[] = {
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "hidden_act",
    "head_dim", "attention_bias", "mlp_bias",
    /* harmless: dropout; pretraining_tp only slices the same matmuls */
    "attention_dropout", "pretraining_tp", NULL};
static const char *const keys_qwen[] = { /* qwen2 and qwen3, beside keys_llama */
    "use_sliding_window", "sliding_window", "max_window_layers", "layer_types", NULL};
static const char *const keys_mistral[] = {"sliding_window", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; l && *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

static sharc_status cfg_check_keys(const jcfg *j, hf_type t) {
    json_object_object_foreach(j->root, key, val) {
        (void)val;
        bool known = in_list(keys_common, key) ||
                     (t == HF_GPT2 ? in_list(keys_gpt2, key)
                                   : in_list(keys_llama, key) ||
                                         in_list(t == HF_MISTRAL ? keys_mistral : t == HF_LLAMA ? NULL : keys_qwen, key));
        if (t == HF_QWEN2 && (!strcmp(key, "attention_bias") || !strcmp(key, "head_dim"))) known = false;
        if (!known)
            return sharc_error(SHARC_ERR_INVALID,
                               "hf config '%s': key \"%s\" is not one sharc knows for model_type %s; it may change "
                               "the model, so the import stops (docs/ARCHITECTURE.md lists the keys)",
                               j->path, key, hf_type_names[t]);
    }
    return SHARC_OK;
}

static sharc_status cfg_family(const jcfg *j, hf_type *t) {
    const char *mt = cfg_str(j, "model_type");
    const char *arch = NULL;
    json_object *a;
    if (json_object_object_get_ex(j->root, "architectures", &a) && json_object_is_type(a, json_type_array) &&
        json_object_array_length(a) > 0 && json_object_is_type(json_object_array_get_idx(a, 0), json_type_string))
        arch = json_object_get_string(json_object_array_get_idx(a, 0));
    for (int i = 0; i <= HF_MISTRAL; i++)
        if (mt ? !strcmp(mt, hf_type_names[i]) : arch && !strcmp(arch, hf_arch_names[i])) {
            *t = (hf_type)i;
            return SHARC_OK;
        }
    if (!mt && arch && (!strcmp(arch, "GPT2Model") || !strcmp(arch, "LlamaModel"))) {
        *t = arch[0] == 'G' ? HF_GPT2 : HF_LLAMA;
        return SHARC_OK;
    }
    return sharc_error(SHARC_ERR_INVALID, "hf config '%s': model_type '%s' (architecture '%s') is not supported; "
                       "expected gpt2, llama, qwen2, qwen3 or mistral",
                       j->path, mt ? mt : "(none)", arch ? arch : "(none)");
}

static sharc_status cfg_gpt2(const jcfg *j, sharc_model_config *c) {
    SHARC_TRY(cfg_int(j, "n_embd", true, 1, &c->embed_dim));
    SHARC_TRY(cfg_int(j, "n_layer", true, 1, &c->num_layers));
    SHARC_TRY(cfg_int(j, "n_head", true, 1, &c->num_heads));
    SHARC_TRY(cfg_int(j, "vocab_size", true, 2, &c->vocab_size));
    SHARC_TRY(cfg_int(j, "n_positions", true, 1, &c->max_seq_len));
    c->ff_hidden_dim = 0; /* 4C unless n_inner */
    SHARC_TRY(cfg_int(j, "n_inner", false, 1, &c->ff_hidden_dim));
    SHARC_TRY(cfg_float(j, "layer_norm_epsilon", &c->norm_eps));
    const char *act = cfg_str(j, "activation_function");
    json_object *av;
    if (json_object_object_get_ex(j->root, "activation_function", &av) &&
        (!act || (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))))
        return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"activation_function\": %s is not supported; "
                           "expected \"gelu_new\" or \"gelu_pytorch_tanh\" (the tanh GELU)",
                           j->path, json_object_to_json_string(av));
    SHARC_TRY(cfg_require_bool(j, "scale_attn_weights", true, "sharc scales attention by 1/sqrt(head dim)"));
    SHARC_TRY(cfg_require_bool(j, "scale_attn_by_inverse_layer_idx", false, "not implemented"));
    SHARC_TRY(cfg_require_bool(j, "add_cross_attention", false, "decoder-only models"));
    c->tie_embeddings = true;
    SHARC_TRY(cfg_bool(j, "tie_word_embeddings", &c->tie_embeddings));
    return SHARC_OK;
}

/* A number inside an object (rope_scaling / rope_parameters). */
static sharc_status rope_num(const jcfg *j, const char *obj, json_object *o, const char *key, bool required,
                             double *out) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
        if (required)
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" needs \"%s\" for its rope_type", j->path, obj, key);
        return SHARC_OK;
    }
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\".\"%s\" is %s, expected a number", j->path, obj, key,
                           json_object_to_json_string(v));
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
            return sharc_error(SHARC_ERR_INVALID, "hf config '%s': both \"rope_scaling\" and \"rope_parameters\"; "
                               "expected one of the two layouts", j->path);
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
                return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"%s\".\"%s\" is not a key sharc knows; "
                                   "it may change RoPE, so the import stops", j->path, objs[k], key);
            }
        }
        if (!type) type = "default";
        double theta = -1, partial = 1;
        SHARC_TRY(rope_num(j, objs[k], o, "rope_theta", false, &theta));
        SHARC_TRY(rope_num(j, objs[k], o, "partial_rotary_factor", false, &partial));
        if (partial != 1.0)
            return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"%s\".\"partial_rotary_factor\": %g is not "
                               "supported (RoPE over the whole head only)", j->path, objs[k], partial);
        if (theta >= 0) {
            if (top_theta && !json_object_is_type(top_theta, json_type_null) && (float)theta != c->rope_theta)
                return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"rope_theta\" %g and \"%s\".\"rope_theta\" %g "
                                   "disagree", j->path, (double)c->rope_theta, objs[k], theta);
            c->rope_theta = (float)theta;
        }
        if (!strcmp(type, "llama3")) {
            double f = 0, lo = 0, hi = 0, orig = 0;
            SHARC_TRY(rope_num(j, objs[k], o, "factor", true, &f));
            SHARC_TRY(rope_num(j, objs[k], o, "low_freq_factor", true, &lo));
            SHARC_TRY(rope_num(j, objs[k], o, "high_freq_factor", true, &hi));
            SHARC_TRY(rope_num(j, objs[k], o, "original_max_position_embeddings", true, &orig));
            if (!(f >= 1) || !(lo > 0) || !(hi > lo) || !(orig >= 1) || orig > (1 << 30) || orig != (int)orig)
                return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" llama3: factor %g, low_freq_factor %g, "
                                   "high_freq_factor %g, original_max_position_embeddings %g; expected factor >= 1, "
                                   "0 < low < high and an integer >= 1", j->path, objs[k], f, lo, hi, orig);
            c->rope_factor = (float)f;
            c->rope_low_freq_factor = (float)lo;
            c->rope_high_freq_factor = (float)hi;
            c->rope_original_max_pos = (int)orig;
        } else if (strcmp(type, "default")) {
            return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"%s\" rope_type \"%s\" is not supported; "
                               "expected \"default\" or \"llama3\"", j->path, objs[k], type);
        } else {
            double f = 1;
            SHARC_TRY(rope_num(j, objs[k], o, "factor", false, &f));
            if (f != 1.0)
                return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"%s\" rope_type default with \"factor\" %g "
                                   "is not supported", j->path, objs[k], f);
        }
    }
    return SHARC_OK;
}

/* The sliding-window keys: Mistral's sliding_window applies to every layer;
 * Qwen2/3's only when use_sliding_window, to layers >= max_window_layers
 * (or where layer_types says "sliding_attention"). sharc has one window
 * for all layers, so a window on some layers only is refused. */
static sharc_status cfg_window(const jcfg *j, hf_type t, sharc_model_config *c) {
    int w = 0;
    SHARC_TRY(cfg_int(j, "sliding_window", false, 1, &w));
    if (t == HF_MISTRAL) {
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
                return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"layer_types\"[%d] is %s, expected "
                                   "\"full_attention\" or \"sliding_attention\"", j->path, i,
                                   json_object_to_json_string(json_object_array_get_idx(lt, i)));
            nsliding += !strcmp(s, "sliding_attention");
        }
        if (nsliding && (!use || !w))
            return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"layer_types\" has sliding layers but "
                               "use_sliding_window / sliding_window do not set a window", j->path);
    } else if (use && w) {
        nsliding = mwl < c->num_layers ? c->num_layers - mwl : 0;
    }
    if (!use || !w || nsliding == 0) return SHARC_OK;
    if (nsliding != c->num_layers)
        return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"max_window_layers\" / \"layer_types\": a sliding "
                           "window on %d of %d layers is not supported (all or none)", j->path, nsliding, c->num_layers);
    c->sliding_window = w;
    return SHARC_OK;
}

static sharc_status cfg_llama(const jcfg *j, hf_type t, sharc_model_config *c) {
    SHARC_TRY(cfg_int(j, "hidden_size", true, 1, &c->embed_dim));
    SHARC_TRY(cfg_int(j, "intermediate_size", true, 1, &c->ff_hidden_dim));
    SHARC_TRY(cfg_int(j, "num_hidden_layers", true, 1, &c->num_layers));
    SHARC_TRY(cfg_int(j, "num_attention_heads", true, 1, &c->num_heads));
    c->num_kv_heads = c->num_heads;
    SHARC_TRY(cfg_int(j, "num_key_value_heads", false, 1, &c->num_kv_heads));
    SHARC_TRY(cfg_int(j, "vocab_size", true, 2, &c->vocab_size));
    c->max_seq_len = 2048;
    SHARC_TRY(cfg_int(j, "max_position_embeddings", false, 1, &c->max_seq_len));
    c->norm_eps = 1e-6f;
    SHARC_TRY(cfg_float(j, "rms_norm_eps", &c->norm_eps));
    SHARC_TRY(cfg_rope(j, c));
    c->tie_embeddings = false;
    SHARC_TRY(cfg_bool(j, "tie_word_embeddings", &c->tie_embeddings));
    json_object *v;
    const char *act = cfg_str(j, "hidden_act");
    if (json_object_object_get_ex(j->root, "hidden_act", &v) && (!act || strcmp(act, "silu")))
        return sharc_error(SHARC_ERR_INVALID, "hf config '%s': \"hidden_act\": %s is not supported; expected \"silu\"",
                           j->path, json_object_to_json_string(v));
    SHARC_TRY(cfg_require_bool(j, "attention_bias", false, "a bias on o_proj as well is not implemented"));
    SHARC_TRY(cfg_require_bool(j, "mlp_bias", false, "MLP biases are not implemented"));
    int pretraining_tp = 1;
    SHARC_TRY(cfg_int(j, "pretraining_tp", false, 1, &pretraining_tp));
    c->head_dim = 0;
    SHARC_TRY(cfg_int(j, "head_dim", false, 2, &c->head_dim));
    c->qkv_bias = t == HF_QWEN2; /* Qwen2's q/k/v biases are part of the architecture */
    c->qk_norm = t == HF_QWEN3;
    if (t != HF_LLAMA) SHARC_TRY(cfg_window(j, t, c));
    return SHARC_OK;
}

/* bos/eos ids (an integer, a list whose first entry is kept, or null);
 * ids outside the vocabulary are dropped (they name no token). */
static sharc_status cfg_token_id(const jcfg *j, const char *key, int V, int *out) {
    json_object *v;
    *out = -1;
    if (!json_object_object_get_ex(j->root, key, &v) || json_object_is_type(v, json_type_null)) return SHARC_OK;
    if (json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0)
        v = json_object_array_get_idx(v, 0);
    if (!json_object_is_type(v, json_type_int))
        return sharc_error(SHARC_ERR_FORMAT, "hf config '%s': \"%s\" is %s, expected a token id", j->path, key,
                           json_object_to_json_string(v));
    int64_t id = json_object_get_int64(v);
    if (id >= 0 && id < V) *out = (int)id;
    return SHARC_OK;
}

sharc_status sharc_hf_read_config(const char *dir, sharc_model_config *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    jcfg j = {.path = path};
    SHARC_TRY(read_json(path, &j.root));
    hf_type t = HF_GPT2;
    sharc_status st = cfg_family(&j, &t);
    if (st == SHARC_OK) st = cfg_check_keys(&j, t);
    if (st == SHARC_OK) {
        sharc_model_config_default(c, t == HF_GPT2 ? SHARC_FAMILY_GPT2 : SHARC_FAMILY_LLAMA);
        st = t == HF_GPT2 ? cfg_gpt2(&j, c) : cfg_llama(&j, t, c);
    }
    if (st == SHARC_OK) st = cfg_float(&j, "initializer_range", &c->init_std);
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
    bool g = hf.family == SHARC_FAMILY_GPT2;
    const char *where = dir;
    if (hf.family != r.family)
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json' is a %s model, model.family is %s", where,
                           sharc_family_name(hf.family), sharc_family_name(r.family));
#define SAME_INT(field, hfkey, key)                                                                        \
    if (hf.field != r.field)                                                                               \
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': %s is %d, model." key " is %d", where, \
                           hfkey, hf.field, r.field);
    SAME_INT(num_layers, g ? "n_layer" : "num_hidden_layers", "num_layers")
    SAME_INT(embed_dim, g ? "n_embd" : "hidden_size", "embed_dim")
    SAME_INT(num_heads, g ? "n_head" : "num_attention_heads", "num_heads")
    SAME_INT(num_kv_heads, g ? "n_head" : "num_key_value_heads", "num_kv_heads")
    SAME_INT(ff_hidden_dim, g ? "n_inner" : "intermediate_size", "ff_hidden_dim")
    SAME_INT(vocab_size, "vocab_size", "vocab_size")
    if (g) SAME_INT(max_seq_len, "n_positions", "max_seq_len")
    if (hf.norm_eps != r.norm_eps)
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': %s is %g, model.norm_eps is %g", where,
                           g ? "layer_norm_epsilon" : "rms_norm_eps", (double)hf.norm_eps, (double)r.norm_eps);
    if (!g && hf.rope_theta != r.rope_theta)
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': rope_theta is %g, model.rope_theta is %g", where,
                           (double)hf.rope_theta, (double)r.rope_theta);
    SAME_INT(head_dim, "head_dim", "head_dim")
    SAME_INT(qkv_bias, "model_type (q/k/v biases)", "qkv_bias")
    SAME_INT(qk_norm, "model_type (q/k norms)", "qk_norm")
    SAME_INT(sliding_window, "sliding_window", "sliding_window")
    SAME_INT(rope_original_max_pos, "rope_scaling original_max_position_embeddings", "rope_original_max_pos")
    if (hf.rope_factor != r.rope_factor || hf.rope_low_freq_factor != r.rope_low_freq_factor ||
        hf.rope_high_freq_factor != r.rope_high_freq_factor)
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': rope scaling factor %g (low %g, high %g), "
                           "model.rope_factor %g (low %g, high %g)", where, (double)hf.rope_factor,
                           (double)hf.rope_low_freq_factor, (double)hf.rope_high_freq_factor, (double)r.rope_factor,
                           (double)r.rope_low_freq_factor, (double)r.rope_high_freq_factor);
#undef SAME_INT
    if (hf.tie_embeddings != r.tie_embeddings)
        return sharc_error(SHARC_ERR_INVALID, "hf '%s/config.json': tie_word_embeddings is %s, model.tie_embeddings is %s",
                           where, hf.tie_embeddings ? "true" : "false", r.tie_embeddings ? "true" : "false");
    return SHARC_OK;
}

/* ---------------------------------------------------------------- names */

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static bool engine_is_gpt2(const sharc_fsdp *e) {
    int u, p;
    return sharc_fsdp_find_param(e, "wte.weight", &u, &p) == SHARC_OK;
}

/* GPT-2's Conv1D weights: stored (in, out) in HF files. */
static bool is_conv1d(bool gpt2, const char *name) {
    return gpt2 && (ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
                    ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight"));
}

/* Tensors of HF files that are not parameters and are skipped on import. */
static bool ignorable(bool gpt2, bool has_lm_head, const char *name) {
    if (gpt2 && (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias"))) return true;
    if (ends_with(name, "rotary_emb.inv_freq")) return true;
    return !has_lm_head && !strcmp(name, "lm_head.weight"); /* tied: a copy of the embedding */
}

static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    buf[0] = 0;
    for (int d = 0; d < ndim; d++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* ----------------------------------------------------------------- load */

/* Elements [p0, p0 + len) of an (R, K) parameter from its (K, R) transpose. */
static sharc_status read_transposed(const sharc_st_file *f, const sharc_st_tensor *t, int64_t R, int64_t K,
                                    int64_t p0, int64_t len, float *dst) {
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
    bool gpt2 = engine_is_gpt2(e);
    const char *prefix = gpt2 && sharc_st_set_find(set, "transformer.wte.weight", NULL) ? "transformer." : "";
    int u_, p_;
    bool has_lm_head = sharc_fsdp_find_param(e, "lm_head.weight", &u_, &p_) == SHARC_OK;
    sharc_status st = SHARC_OK;
    char hname[SHARC_NAME_MAX + 16];
    /* every parameter present with its shape and a float dtype */
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        for (int p = 0; p < s->nparams && st == SHARC_OK; p++) {
            const sharc_param_spec *ps = &s->params[p];
            bool lm = !strcmp(ps->name, "lm_head.weight"); /* GPT2LMHeadModel's lm_head has no prefix */
            snprintf(hname, sizeof hname, "%s%s", lm ? "" : prefix, ps->name);
            const sharc_st_file *f;
            const sharc_st_tensor *t = sharc_st_set_find(set, hname, &f);
            if (!t) {
                st = sharc_error(SHARC_ERR_FORMAT, "hf '%s': parameter '%s' is missing (is this a checkpoint of another model?)",
                                 dir, hname);
                break;
            }
            int64_t want[4];
            for (int d = 0; d < ps->ndim; d++) want[d] = ps->shape[d];
            if (is_conv1d(gpt2, ps->name)) {
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
                st = sharc_error(SHARC_ERR_FORMAT, "hf '%s': '%s' is %s; expected F32, BF16 or F16",
                                 sharc_st_path(f), hname, sharc_dtype_st_name(t->dtype));
        }
    }
    /* every tensor a parameter or a known buffer */
    for (int i = 0; i < sharc_st_set_count(set) && st == SHARC_OK; i++) {
        const sharc_st_file *f;
        const sharc_st_tensor *t = sharc_st_set_tensor_at(set, i, &f);
        const char *n = t->name;
        if (*prefix && !strncmp(n, prefix, strlen(prefix))) n += strlen(prefix);
        if (sharc_fsdp_find_param(e, n, &u_, &p_) == SHARC_OK || ignorable(gpt2, has_lm_head, n)) continue;
        st = sharc_error(SHARC_ERR_FORMAT, "hf '%s': tensor '%s' is not a parameter of this %s model",
                         sharc_st_path(f), t->name, gpt2 ? "gpt2" : "llama");
    }
    /* everything checked: read this rank's segments */
    for (int u = 0; u < sharc_fsdp_num_units(e) && st == SHARC_OK; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        sharc_activity_phase("importing", u, s->name); /* progress for the watchdog */
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        float *shard = sharc_fsdp_shard_write(e, u);
        for (int k = 0; k < nseg && st == SHARC_OK; k++) {
            const sharc_param_spec *ps = &s->params[segs[k].param];
            bool lm = !strcmp(ps->name, "lm_head.weight");
            snprintf(hname, sizeof hname, "%s%s", lm ? "" : prefix, ps->name);
            const sharc_st_file *f;
            const sharc_st_tensor *t = sharc_st_set_find(set, hname, &f);
            if (is_conv1d(gpt2, ps->name))
                st = read_transposed(f, t, ps->shape[0], ps->shape[1], segs[k].param_off, segs[k].len,
                                     shard + segs[k].shard_off);
            else
                st = sharc_st_read_f32(f, t, segs[k].param_off, segs[k].len, shard + segs[k].shard_off);
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

static char *config_json(const sharc_model_config *cfg, sharc_dtype dtype) {
    sharc_model_config full = *cfg, *c = &full;
    (void)sharc_model_config_validate(c); /* head_dim and the other derived values */
    json_object *r = json_object_new_object();
    const char *td = dtype == SHARC_DT_BF16 ? "bfloat16" : dtype == SHARC_DT_F16 ? "float16" : "float32";
    json_object *arch = json_object_new_array();
    if (c->family == SHARC_FAMILY_GPT2) {
        json_object_array_add(arch, json_object_new_string("GPT2LMHeadModel"));
        json_object_object_add(r, "architectures", arch);
        json_object_object_add(r, "model_type", json_object_new_string("gpt2"));
        json_object_object_add(r, "activation_function", json_object_new_string("gelu_new"));
        json_object_object_add(r, "n_embd", json_object_new_int(c->embed_dim));
        json_object_object_add(r, "n_layer", json_object_new_int(c->num_layers));
        json_object_object_add(r, "n_head", json_object_new_int(c->num_heads));
        json_object_object_add(r, "n_positions", json_object_new_int(c->max_seq_len));
        json_object_object_add(r, "n_ctx", json_object_new_int(c->max_seq_len));
        json_object_object_add(r, "n_inner", c->ff_hidden_dim == 4 * c->embed_dim ? NULL : json_object_new_int(c->ff_hidden_dim));
        json_object_object_add(r, "vocab_size", json_object_new_int(c->vocab_size));
        json_object_object_add(r, "layer_norm_epsilon", json_float(c->norm_eps));
        json_object_object_add(r, "attn_pdrop", json_object_new_double(0.0));
        json_object_object_add(r, "embd_pdrop", json_object_new_double(0.0));
        json_object_object_add(r, "resid_pdrop", json_object_new_double(0.0));
        json_object_object_add(r, "scale_attn_weights", json_object_new_boolean(1));
    } else {
        /* the model_type of the variant (note [families] in src/model/model.c) */
        hf_type t = c->qk_norm ? HF_QWEN3 : c->qkv_bias ? HF_QWEN2 : c->sliding_window ? HF_MISTRAL : HF_LLAMA;
        json_object_array_add(arch, json_object_new_string(hf_arch_names[t]));
        json_object_object_add(r, "architectures", arch);
        json_object_object_add(r, "model_type", json_object_new_string(hf_type_names[t]));
        json_object_object_add(r, "hidden_act", json_object_new_string("silu"));
        json_object_object_add(r, "hidden_size", json_object_new_int(c->embed_dim));
        json_object_object_add(r, "intermediate_size", json_object_new_int(c->ff_hidden_dim));
        json_object_object_add(r, "num_hidden_layers", json_object_new_int(c->num_layers));
        json_object_object_add(r, "num_attention_heads", json_object_new_int(c->num_heads));
        json_object_object_add(r, "num_key_value_heads", json_object_new_int(c->num_kv_heads));
        if (t != HF_QWEN2) json_object_object_add(r, "head_dim", json_object_new_int(c->head_dim));
        else if (c->head_dim * c->num_heads != c->embed_dim) { /* refused by the caller */
            json_object_put(r);
            return NULL;
        }
        json_object_object_add(r, "vocab_size", json_object_new_int(c->vocab_size));
        json_object_object_add(r, "max_position_embeddings", json_object_new_int(c->max_seq_len));
        json_object_object_add(r, "rms_norm_eps", json_float(c->norm_eps));
        json_object_object_add(r, "rope_theta", json_float(c->rope_theta));
        json_object *rs = NULL;
        if (c->rope_factor != 0.0f) {
            rs = json_object_new_object();
            json_object_object_add(rs, "rope_type", json_object_new_string("llama3"));
            json_object_object_add(rs, "factor", json_float(c->rope_factor));
            json_object_object_add(rs, "low_freq_factor", json_float(c->rope_low_freq_factor));
            json_object_object_add(rs, "high_freq_factor", json_float(c->rope_high_freq_factor));
            json_object_object_add(rs, "original_max_position_embeddings", json_object_new_int(c->rope_original_max_pos));
        }
        json_object_object_add(r, "rope_scaling", rs);
        if (t != HF_QWEN2) json_object_object_add(r, "attention_bias", json_object_new_boolean(0));
        if (t == HF_LLAMA) json_object_object_add(r, "mlp_bias", json_object_new_boolean(0));
        if (t == HF_MISTRAL)
            json_object_object_add(r, "sliding_window", json_object_new_int(c->sliding_window));
        if (t == HF_QWEN2 || t == HF_QWEN3) {
            json_object_object_add(r, "use_sliding_window", json_object_new_boolean(c->sliding_window > 0));
            json_object_object_add(r, "sliding_window", c->sliding_window ? json_object_new_int(c->sliding_window) : NULL);
            json_object_object_add(r, "max_window_layers", json_object_new_int(c->sliding_window ? 0 : c->num_layers));
        }
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
    json_object_object_add(r, "tie_word_embeddings", json_object_new_boolean(c->tie_embeddings));
    json_object_object_add(r, "initializer_range", json_float(c->init_std));
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
    snprintf(parent, sizeof parent, "%s", dir);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s.sharc-tmp-", base);
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
    if (!S_ISDIR(sb.st_mode)) return sharc_error(SHARC_ERR_INVALID, "hf export: '%s' exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) return sharc_error(SHARC_ERR_IO, "hf export: cannot read '%s': %s", dir, strerror(errno));
    struct dirent *de;
    bool empty = true;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = false;
    closedir(d);
    if (!empty)
        return sharc_error(SHARC_ERR_INVALID, "hf export: '%s' is not empty; refusing to mix files into it (choose a new directory)", dir);
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
    bool gpt2 = cfg->family == SHARC_FAMILY_GPT2;
    sharc_status st = SHARC_OK;
    if (dtype != SHARC_DT_F32 && dtype != SHARC_DT_BF16 && dtype != SHARC_DT_F16)
        st = sharc_error(SHARC_ERR_INVALID, "hf export: dtype %s, expected F32, BF16 or F16", sharc_dtype_st_name(dtype));
    if (gpt2 != engine_is_gpt2(e))
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
            bool lm = !strcmp(ps->name, "lm_head.weight");
            snprintf(it->hname, sizeof it->hname, "%s%s", gpt2 && !lm ? "transformer." : "", ps->name);
            it->ndim = ps->ndim;
            for (int d = 0; d < ps->ndim; d++) it->shape[d] = ps->shape[d];
            it->conv1d = is_conv1d(gpt2, ps->name);
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
        if (mkdir(tmp, 0755) != 0) st = sharc_error(SHARC_ERR_IO, "hf export: cannot create '%s': %s", tmp, strerror(errno));
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
                : sharc_error(SHARC_ERR_UNSUPPORTED, "hf export: a Qwen2 model (q/k/v biases) with head_dim %d != "
                              "embed_dim / num_heads has no Hugging Face config; set model.head_dim to 0",
                              cfg->head_dim);
        free(js);
    }
    /* agree on the set-up (buffers everywhere, the target and temporary
     * directory on rank 0) before the first gather: if it failed anywhere,
     * no rank gathers at all */
    bool ok = st == SHARC_OK, setup_ok = ok;
    if (world) {
        int32_t bad = !ok, any = 0;
        sharc_status c = sharc_comm_all_reduce(world, &bad, &any, 1, SHARC_DT_I32, SHARC_REDUCE_OP_MAX);
        if (c != SHARC_OK && ok) st = c;
        setup_ok = c == SHARC_OK && !any;
        ok = ok && setup_ok;
    }
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
        st = sharc_write_text_atomic(path, json_object_to_json_string_ext(r, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
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
