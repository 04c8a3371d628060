/* config.c: sharc_config_*, the key table and the YAML reader (libyaml).
 * YAML mappings are flattened to dotted keys ("optim.lr"); each key is looked
 * up in `keys` and its scalar parsed by the key's type. */
#include "sharc/config.h"
#include "sharc/fileio.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

typedef enum { K_INT, K_INT64, K_U64, K_FLOAT, K_BOOL, K_STR, K_ENUM, K_FLOAT2, K_DTYPE, K_TRI, K_LIMIT } key_type;

typedef struct {
    const char *name;
    key_type type;
    size_t off;
    double min, max;            /* numeric range (inclusive) */
    const char *const *choices; /* K_ENUM: NULL-terminated, index = value */
    const char *help;
} key_def;

static const char *const families[] = {"gpt2", "llama", NULL};
static const char *const lr_decays[] = {"cosine", "linear", "constant", NULL};
static const char *const token_formats[] = {"auto", "u16", "u32", "llmc", "text", NULL};
static const char *const strategies[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", NULL};
static const char *const prefetches[] = {"NONE", "BACKWARD_PRE", "BACKWARD_POST", NULL};

#define OFF(f) offsetof(sharc_config, f)
#define BIG 1e18

static const key_def keys[] = {
    {"model.family", K_ENUM, OFF(model.family), 0, 0, families, "gpt2 or llama"},
    {"model.num_layers", K_INT, OFF(model.num_layers), 1, 4096, NULL, "transformer blocks (L)"},
    {"model.embed_dim", K_INT, OFF(model.embed_dim), 1, 1 << 20, NULL, "model width (C)"},
    {"model.num_heads", K_INT, OFF(model.num_heads), 1, 4096, NULL, "attention heads; divides embed_dim"},
    {"model.num_kv_heads", K_INT, OFF(model.num_kv_heads), 0, 4096, NULL, "key/value heads (0: = num_heads); divides num_heads"},
    {"model.ff_hidden_dim", K_INT, OFF(model.ff_hidden_dim), 0, 1 << 22, NULL, "MLP width (0: gpt2 4C, llama 8C/3 rounded to 16)"},
    {"model.vocab_size", K_INT, OFF(model.vocab_size), 2, 1 << 30, NULL, "vocabulary (256 for byte-level text)"},
    {"model.max_seq_len", K_INT, OFF(model.max_seq_len), 1, 1 << 24, NULL, "longest sequence (gpt2: position table rows)"},
    {"model.norm_eps", K_FLOAT, OFF(model.norm_eps), 0, 1, NULL, "LayerNorm/RMSNorm epsilon"},
    {"model.rope_theta", K_FLOAT, OFF(model.rope_theta), 0, BIG, NULL, "RoPE base (llama)"},
    {"model.init_std", K_FLOAT, OFF(model.init_std), 0, 10, NULL, "std of normal weight init (residual outputs / sqrt(2L))"},
    {"model.tie_embeddings", K_BOOL, OFF(model.tie_embeddings), 0, 0, NULL, "LM head shares the token embedding"},

    {"data.path", K_STR, OFF(data.path), 0, 0, NULL, "training token file or UTF-8 text"},
    {"data.val_path", K_STR, OFF(data.val_path), 0, 0, NULL, "validation token file (optional)"},
    {"data.format", K_ENUM, OFF(data.format), 0, 0, token_formats, "auto, u16, u32, llmc or text"},
    {"data.shuffle", K_BOOL, OFF(data.shuffle), 0, 0, NULL, "seeded permutation of windows each epoch"},
    {"data.seed", K_U64, OFF(data.seed), 0, 0, NULL, "shuffle seed"},

    {"optim.lr", K_FLOAT, OFF(optim.lr), 0, 10, NULL, "peak learning rate"},
    {"optim.min_lr_ratio", K_FLOAT, OFF(optim.min_lr_ratio), 0, 1, NULL, "decay floor as a fraction of lr"},
    {"optim.warmup_steps", K_INT, OFF(optim.warmup_steps), 0, INT_MAX, NULL, "linear warmup steps"},
    {"optim.decay_steps", K_INT, OFF(optim.decay_steps), 0, INT_MAX, NULL, "decay length after warmup (0: to train.max_steps)"},
    {"optim.lr_decay", K_ENUM, OFF(optim.decay), 0, 0, lr_decays, "cosine, linear or constant"},
    {"optim.betas", K_FLOAT2, OFF(optim.beta1), 0, 1, NULL, "AdamW [beta1, beta2]"},
    {"optim.beta1", K_FLOAT, OFF(optim.beta1), 0, 1, NULL, "AdamW beta1"},
    {"optim.beta2", K_FLOAT, OFF(optim.beta2), 0, 1, NULL, "AdamW beta2"},
    {"optim.eps", K_FLOAT, OFF(optim.eps), 0, 1, NULL, "AdamW epsilon"},
    {"optim.weight_decay", K_FLOAT, OFF(optim.weight_decay), 0, 10, NULL, "decoupled weight decay on 2-D+ weights"},
    {"optim.max_grad_norm", K_FLOAT, OFF(optim.max_grad_norm), 0, BIG, NULL, "clip the global gradient norm (0: off)"},

    {"train.batch_size", K_INT, OFF(train.batch_size), 1, 1 << 20, NULL, "sequences per micro-batch per rank"},
    {"train.grad_accum", K_INT, OFF(train.grad_accum), 1, 1 << 20, NULL, "micro-batches per optimizer step"},
    {"train.seq_len", K_INT, OFF(train.seq_len), 1, 1 << 24, NULL, "tokens per sequence (T)"},
    {"train.max_steps", K_INT64, OFF(train.max_steps), 0, BIG, NULL, "optimizer steps"},
    {"train.seed", K_U64, OFF(train.seed), 0, 0, NULL, "parameter initialisation seed"},
    {"train.log_every", K_INT, OFF(train.log_every), 1, INT_MAX, NULL, "print a line every N steps"},
    {"train.threads", K_INT, OFF(train.threads), 0, 4096, NULL, "threads per process (0: its CPUs)"},
    {"train.out_dir", K_STR, OFF(train.out_dir), 0, 0, NULL, "run directory: metrics, config, final weights"},
    {"train.metrics_path", K_STR, OFF(train.metrics_path), 0, 0, NULL, "JSON-lines metrics file (default out_dir/metrics.jsonl)"},

    {"fsdp.sharding_strategy", K_ENUM, OFF(fsdp.engine.strategy), 0, 0, strategies, "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD"},
    {"fsdp.fsdp_size", K_INT, OFF(fsdp.engine.fsdp_size), 0, 1 << 24, NULL, "HYBRID_SHARD shard-group size (>= world or <= 1: plain FSDP)"},
    {"fsdp.reshard_after_forward", K_TRI, OFF(fsdp.engine.reshard_after_forward), 0, 0, NULL, "free gathered parameters after forward (auto: per strategy)"},
    {"fsdp.param_dtype", K_DTYPE, OFF(fsdp.engine.param_dtype), 0, 0, NULL, "gather and compute parameters in fp32, bf16 or fp16"},
    {"fsdp.reduce_dtype", K_DTYPE, OFF(fsdp.engine.reduce_dtype), 0, 0, NULL, "reduce gradients in fp32 or bf16"},
    {"fsdp.forward_prefetch", K_BOOL, OFF(fsdp.engine.forward_prefetch), 0, 0, NULL, "gather the next unit during forward"},
    {"fsdp.backward_prefetch", K_ENUM, OFF(fsdp.engine.backward_prefetch), 0, 0, prefetches, "BACKWARD_PRE, BACKWARD_POST or NONE"},
    {"fsdp.limit_all_gathers", K_LIMIT, OFF(fsdp.engine.limit_all_gathers), 0, 1 << 20, NULL, "max gathered non-root units (true = 2, false = no limit)"},
    {"fsdp.no_sync", K_BOOL, OFF(fsdp.engine.no_sync), 0, 0, NULL, "reduce gradients once per step, not every micro-batch"},
    {"fsdp.activation_checkpointing", K_BOOL, OFF(fsdp.activation_checkpointing), 0, 0, NULL, "recompute each block in backward"},

    /* telemetry and validation (src/train/telemetry.c, src/train/eval.c) */
    {"log.peak_tflops", K_FLOAT, OFF(log.peak_tflops), 0, BIG, NULL, "peak fp32 TFLOP/s of one rank for mfu(%) (0: measured by an FMA loop at start)"},
    {"log.debug", K_BOOL, OFF(log.debug), 0, 0, NULL, "per-rank JSON lines of each step in out_dir/debug/rank-N.log"},
    {"log.eval_every", K_INT, OFF(log.eval_every), 0, INT_MAX, NULL, "validation loss on data.val_path every N steps (0: off)"},
    {"log.eval_batches", K_INT, OFF(log.eval_batches), 0, INT_MAX, NULL, "micro-batches per validation, all ranks together (0: every window)"},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

void sharc_config_default(sharc_config *c) {
    memset(c, 0, sizeof *c);
    /* the built-in job: a small byte-level GPT on the King James Bible */
    sharc_model_config_default(&c->model, SHARC_FAMILY_GPT2);
    c->model.num_layers = 4;
    c->model.embed_dim = 256;
    c->model.num_heads = 4;
    c->model.vocab_size = 256;
    c->model.max_seq_len = 128;
    snprintf(c->data.path, sizeof c->data.path, "data/kjv.txt");
    c->data.format = SHARC_TOKENS_AUTO;
    c->data.shuffle = true;
    c->data.seed = 1;
    sharc_optim_config_default(&c->optim);
    c->optim.lr = 2e-3f;
    c->optim.warmup_steps = 20;
    c->train.batch_size = 16;
    c->train.grad_accum = 1;
    c->train.seq_len = 128;
    c->train.max_steps = 400;
    c->train.seed = 1;
    c->train.log_every = 10;
    snprintf(c->train.out_dir, sizeof c->train.out_dir, "runs/kjv");
    sharc_fsdp_config_default(&c->fsdp.engine);
}

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

static sharc_status unknown_key(const char *name, const char *origin) {
    const char *best = NULL;
    int bd = 4;
    for (int i = 0; i < NKEYS; i++) {
        int d = edit_distance(name, keys[i].name);
        if (d < bd) {
            bd = d;
            best = keys[i].name;
        }
    }
    if (best)
        return sharc_error(SHARC_ERR_INVALID, "%s: unknown key '%s'; did you mean '%s'? (sharc config --keys lists them)",
                           origin, name, best);
    return sharc_error(SHARC_ERR_INVALID, "%s: unknown key '%s' (sharc config --keys lists them)", origin, name);
}

static sharc_status bad_value(const key_def *k, const char *value, const char *origin, const char *expected) {
    return sharc_error(SHARC_ERR_INVALID, "%s: %s = '%s': expected %s", origin, k->name, value, expected);
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
        if (k->max >= BIG) snprintf(what, sizeof what, "a value >= %g", k->min);
        else snprintf(what, sizeof what, "a value in [%g, %g]", k->min, k->max);
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
        if (!strcasecmp(value, "true") || !strcasecmp(value, "yes") || !strcasecmp(value, "on") || !strcmp(value, "1")) *(bool *)dst = true;
        else if (!strcasecmp(value, "false") || !strcasecmp(value, "no") || !strcasecmp(value, "off") || !strcmp(value, "0")) *(bool *)dst = false;
        else return bad_value(k, value, origin, "true or false");
        return SHARC_OK;
    case K_STR:
        if (strlen(value) >= SHARC_PATH_MAX) return bad_value(k, value, origin, "a shorter string");
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
        } names[] = {{"fp32", SHARC_DT_F32}, {"float32", SHARC_DT_F32}, {"bf16", SHARC_DT_BF16},
                     {"bfloat16", SHARC_DT_BF16}, {"fp16", SHARC_DT_F16}, {"float16", SHARC_DT_F16}};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strcasecmp(value, names[i].name)) {
                *(sharc_dtype *)dst = names[i].dt;
                return SHARC_OK;
            }
        return bad_value(k, value, origin, "fp32, bf16 or fp16");
    }
    case K_TRI:
        if (!strcasecmp(value, "auto")) *(int *)dst = -1;
        else if (!strcasecmp(value, "true") || !strcasecmp(value, "yes")) *(int *)dst = 1;
        else if (!strcasecmp(value, "false") || !strcasecmp(value, "no")) *(int *)dst = 0;
        else return bad_value(k, value, origin, "true, false or auto");
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

sharc_status sharc_config_set(sharc_config *c, const char *key, const char *value, const char *origin) {
    const key_def *k = find_key(key);
    if (!k) return unknown_key(key, origin);
    return set_key(c, k, value, origin);
}

/* ---------------------------------------------------------------- YAML */

typedef struct {
    yaml_parser_t p;
    sharc_config *c;
    const char *name;
} yaml_ctx;

static sharc_status yaml_error(const yaml_ctx *y, const yaml_mark_t *m, const char *what) {
    return sharc_error(SHARC_ERR_INVALID, "config '%s' line %zu: %s", y->name, m->line + 1, what);
}

static sharc_status next_event(yaml_ctx *y, yaml_event_t *ev) {
    if (yaml_parser_parse(&y->p, ev)) return SHARC_OK;
    char what[300];
    snprintf(what, sizeof what, "not valid YAML: %s", y->p.problem ? y->p.problem : "parse error");
    return yaml_error(y, &y->p.problem_mark, what);
}

static sharc_status apply(yaml_ctx *y, const char *key, const yaml_mark_t *m, const char *value) {
    char origin[600];
    snprintf(origin, sizeof origin, "config '%s' line %zu", y->name, m->line + 1);
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

sharc_status sharc_config_load_string(sharc_config *c, const char *text, const char *origin) {
    yaml_ctx y = {.c = c, .name = origin};
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
    return st;
}

sharc_status sharc_config_load_file(sharc_config *c, const char *path) {
    char *text;
    SHARC_TRY(sharc_read_file(path, &text, NULL));
    sharc_status st = sharc_config_load_string(c, text, path);
    free(text);
    return st;
}

/* ------------------------------------------------------------ validate */

sharc_status sharc_config_validate(sharc_config *c) {
    sharc_status st = sharc_model_config_validate(&c->model);
    if (st != SHARC_OK) return st;
    if (c->data.path[0] == 0) return sharc_error(SHARC_ERR_INVALID, "data.path: empty; set it to a token file or a text file");
    if (c->train.out_dir[0] == 0) return sharc_error(SHARC_ERR_INVALID, "train.out_dir: empty; set a run directory");
    if (c->model.family == SHARC_FAMILY_GPT2 && c->train.seq_len > c->model.max_seq_len)
        return sharc_error(SHARC_ERR_INVALID, "train.seq_len: %d exceeds model.max_seq_len %d (gpt2's position table)",
                           c->train.seq_len, c->model.max_seq_len);
    if (c->fsdp.engine.reduce_dtype != SHARC_DT_F32 && c->fsdp.engine.reduce_dtype != SHARC_DT_BF16)
        return sharc_error(SHARC_ERR_INVALID, "fsdp.reduce_dtype: fp16, expected fp32 or bf16");
    if (c->optim.beta1 >= 1.0f || c->optim.beta2 >= 1.0f)
        return sharc_error(SHARC_ERR_INVALID, "optim.betas: [%g, %g], each must be in [0, 1)",
                           (double)c->optim.beta1, (double)c->optim.beta2);
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
    case K_STR: snprintf(out, n, "\"%s\"", src); break;
    case K_ENUM: snprintf(out, n, "%s", k->choices[*(const int *)src]); break;
    case K_FLOAT2: snprintf(out, n, "[%.9g, %.9g]", (double)((const float *)src)[0], (double)((const float *)src)[1]); break;
    case K_DTYPE: {
        sharc_dtype dt = *(const sharc_dtype *)src;
        snprintf(out, n, "%s", dt == SHARC_DT_BF16 ? "bf16" : dt == SHARC_DT_F16 ? "fp16" : "fp32");
        break;
    }
    case K_TRI: {
        int v = *(const int *)src;
        snprintf(out, n, "%s", v < 0 ? "auto" : v ? "true" : "false");
        break;
    }
    case K_LIMIT: snprintf(out, n, "%d", *(const int *)src); break;
    }
}

void sharc_config_write_yaml(const sharc_config *c, FILE *f) {
    char section[64] = "";
    for (int i = 0; i < NKEYS; i++) {
        const key_def *k = &keys[i];
        if (k->type == K_FLOAT2) continue; /* beta1/beta2 are written separately */
        const char *dot = strchr(k->name, '.');
        size_t sl = (size_t)(dot - k->name);
        if (strlen(section) != sl || strncmp(section, k->name, sl) != 0) {
            snprintf(section, sizeof section, "%.*s", (int)sl, k->name);
            fprintf(f, "%s:\n", section);
        }
        char v[SHARC_PATH_MAX + 8];
        format_value(c, k, v, sizeof v);
        fprintf(f, "  %s: %s\n", dot + 1, v);
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
    static const char *type_names[] = {"int", "int", "uint", "float", "bool", "string", "enum", "[float, float]",
                                       "dtype", "bool|auto", "bool|int"};
    for (int i = 0; i < NKEYS; i++)
        fprintf(f, "  %-32s %-8s %s\n", keys[i].name, type_names[keys[i].type], keys[i].help);
}
