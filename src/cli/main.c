/* main.c: the sharc command. The only place that prints a failure's message
 * and decides the exit status. */
#include "sharc/clock.h"
#include "doctor.h"
#include "sharc/activity.h"
#include "sharc/blas.h"
#include "sharc/ckpt.h"
#include "sharc/comm.h"
#include "sharc/chat.h"
#include "sharc/config.h"
#include "sharc/data.h"
#include "sharc/dataprep.h"
#include "sharc/eval.h"
#include "sharc/fault.h"
#include "sharc/fileio.h"
#include "sharc/flight.h"
#include "sharc/fsdp.h"
#include "sharc/hf.h"
#include "sharc/source.h"
#include "sharc/launch.h"
#include "sharc/liveness.h"
#include "sharc/log.h"
#include "sharc/memplan.h"
#include "sharc/model.h"
#include "sharc/plot.h"
#include "sharc/rng.h"
#include "sharc/tokenizer.h"
#include "sharc/train.h"
#include "sharc/weights.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHARC_VERSION "0.1.0"

static void usage(FILE *f) {
    fprintf(
        f,
        "sharc " SHARC_VERSION ": fully sharded data-parallel training of GPT-2 and Llama models\n"
        "\n"
        "usage:\n"
        "  sharc train [--config FILE.yaml|.json] [--preset NAME] [--section.key=value ...]\n"
        "              [--batch-size N] [--grad-accum N] [--precision P] [--sharding S] [--epochs E]\n"
        "              [--[no-]activation-checkpoint] [--[no-]limit-all-gathers] [--resume] [--ckpt-dir D]\n"
        "              [--overwrite_output_dir]   (start over in an out_dir that holds another run)\n"
        "              [--stage NAME]   (multi-stage files: run only that stage)\n"
        "  sharc launch -n N [--] sharc train ...   run N ranks under mpirun with the right flags\n"
        "  sharc generate --checkpoint DIR|FILE|HF_DIR [--prompt TEXT] [--tokens N]\n"
        "                 [--temperature T] [--top-k K] [--seed S] [--threads K] [--timeout S] [--no-kv-cache]\n"
        "                 [--tokenizer PATH] [--chat]   (default: the run's model.tokenizer; --chat: the prompt\n"
        "                 as one user turn of the chat template)\n"
        "  sharc tokenize [--config FILE] [--section.key=value ...] [--out FILE] [--threads N]\n"
        "                 data.path (text or JSONL) -> tokens with model.tokenizer: llm.c tokens, or a\n"
        "                 sharc SFT file for JSONL with data.output_key / data.apply_chat_template\n"
        "  sharc eval --checkpoint RUN_DIR|FILE|HF_DIR --data.path VAL [--data.format F] [--infer_batch_size N]\n"
        "             [--seq_len T] [--eval_batches N] [--threads K] [--timeout S]   validation loss and perplexity\n"
        "  sharc plot RUN/metrics.jsonl ... --out DIR   loss, throughput and memory curves (PNG)\n"
        "  sharc doctor RUN_DIR   a failed run's flight records: the rank that never arrived, where ranks part\n"
        "  sharc doctor --env     (under the launcher, on the job's hosts) hosts, CPUs, memory, binaries, clocks, "
        "bandwidth\n"
        "  sharc config [--config FILE.yaml] [--section.key=value ...]   print the resolved config\n"
        "  sharc config --keys                                          list every config key\n"
        "  sharc plan [--config FILE] [--section.key=value ...] --ranks N [--ranks-per-node K]\n"
        "             [--memory-per-rank SIZE]   bytes per rank by category before a run (SIZE: 24G, 512M, ...;\n"
        "             with it, the smallest change that fits)\n"
        "  sharc ckpt inspect DIR                                       describe and verify a checkpoint\n"
        "  sharc import --hf HF_DIR --out FILE.safetensors      a Hugging Face model -> sharc weights\n"
        "  sharc export --checkpoint DIR|FILE --out HF_DIR [--dtype fp32|bf16|fp16]\n"
        "               [--max-shard-size BYTES]                sharc weights -> a Hugging Face model\n"
        "  (--checkpoint: a weights file, a run directory, a checkpoint directory or one step-N directory;\n"
        "   --timeout S: the watchdog's seconds without progress, 600 by default, 0 off)\n"
        "  sharc version\n"
        "exit status: 0 done, 2 bad input (nothing written), 1 another failure, 3 the watchdog\n");
}

/* Note [exit-status]. 0: done. 2: bad input, SHARC_ERR_INVALID or
 * SHARC_ERR_FORMAT: an option, key or value, a file named that is missing,
 * malformed or of another model, an out_dir holding another run, ranks that
 * disagree, settings the run cannot train with (train.max_bad_steps
 * non-finite steps in a row); nothing was written. 1: any other failure
 * (I/O while running, a full disk, out of memory, communication). 3: the
 * watchdog (note [watchdog]). Agreed failures (note [agreement]) pass bad
 * input on as is, so every rank of a job exits alike. */
static int exit_status(sharc_status st) {
    return st == SHARC_OK ? 0 : st == SHARC_ERR_INVALID || st == SHARC_ERR_FORMAT ? 2 : 1;
}

static int fail(sharc_status st) {
    sharc_log(SHARC_LOG_ERROR, "%s", sharc_last_error());
    return exit_status(st);
}

/* One checked parser for every numeric option of every command: the whole
 * text is an integer (a number) in [min, max], else bad input naming the
 * command, the option, the value and what was expected. */
static sharc_status parse_int(const char *cmd, const char *opt, const char *text, long long min, long long max,
                              long long *out) {
    char clip[SHARC_CLIP_BUF], *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || errno == ERANGE || v < min || v > max)
        return sharc_error(SHARC_ERR_INVALID, "%s: %s '%s': expected an integer in [%lld, %lld]", cmd, opt,
                           sharc_clip(clip, text), min, max);
    *out = v;
    return SHARC_OK;
}

static sharc_status parse_u64(const char *cmd, const char *opt, const char *text, unsigned long long *out) {
    char clip[SHARC_CLIP_BUF], *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!*text || *end || errno == ERANGE || strchr(text, '-'))
        return sharc_error(SHARC_ERR_INVALID, "%s: %s '%s': expected an integer in [0, %llu]", cmd, opt,
                           sharc_clip(clip, text), ULLONG_MAX);
    *out = v;
    return SHARC_OK;
}

static sharc_status parse_real(const char *cmd, const char *opt, const char *text, double min, double max,
                               double *out) {
    char clip[SHARC_CLIP_BUF], *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno == ERANGE || !(v >= min && v <= max))
        return sharc_error(SHARC_ERR_INVALID, "%s: %s '%s': expected a number in [%g, %g]", cmd, opt,
                           sharc_clip(clip, text), min, max);
    *out = v;
    return SHARC_OK;
}

/* The options of generate, eval, export and import: each takes a value,
 * written "--name value" or "--name=value", except switches (default
 * OPT_SWITCH; a bare "--name" sets the value "1"); each value lands in the
 * slot of its name; anything else is bad input. */
typedef struct {
    const char *name;
    const char *value; /* the default, then what was given */
} option;
static const char OPT_SWITCH[] = "(switch)";

static sharc_status parse_options(const char *cmd, int argc, char **argv, option *opts, int n) {
    char clip[SHARC_CLIP_BUF];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int k = 0;
        while (k < n && !(strlen(opts[k].name) == len && !strncmp(opts[k].name, a, len))) k++;
        if (k == n) return sharc_error(SHARC_ERR_INVALID, "%s: unknown option '%s'", cmd, sharc_clip(clip, a));
        if (opts[k].value == OPT_SWITCH) {
            if (eq) return sharc_error(SHARC_ERR_INVALID, "%s: %s takes no value", cmd, opts[k].name);
            opts[k].value = "1";
            continue;
        }
        if (!eq && i + 1 >= argc) return sharc_error(SHARC_ERR_INVALID, "%s: %s needs a value", cmd, opts[k].name);
        opts[k].value = eq ? eq + 1 : argv[++i];
    }
    return SHARC_OK;
}

/* The option `name` of a parsed table. */
static const char *opt_value(const option *opts, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(opts[k].name, name)) return opts[k].value;
    return NULL;
}

/* --timeout of the commands without a config: the watchdog's seconds (note
 * [watchdog]; 600 as train.timeout, 0 off). */
#define DEFAULT_TIMEOUT "600"

static sharc_status parse_timeout(const char *cmd, const char *text, int *out) {
    long long v;
    SHARC_TRY(parse_int(cmd, "--timeout", text, 0, INT_MAX, &v));
    *out = (int)v;
    return SHARC_OK;
}

/* The seeds' shorthand flags (README "Shorthand flags"): flag -> key. A
 * NULL value means a switch (no value). */
static const struct {
    const char *flag, *key, *value;
} shorthands[] = {
    {"batch-size", "train.batch_size", NULL},
    {"grad-accum", "train.grad_accum", NULL},
    {"precision", "train.precision", NULL},
    {"sharding", "fsdp.sharding_strategy", NULL},
    {"epochs", "train.epochs", NULL},
    {"max-steps", "train.max_steps", NULL},
    {"lr", "optim.lr", NULL},
    {"out-dir", "train.out_dir", NULL},
    {"resume", "ckpt.resume", NULL},
    {"ckpt-dir", "ckpt.dir", NULL},
    {"auto-wrap", "fsdp.auto_wrap_policy", NULL},
    {"preset", "preset", NULL},
    {"fsdp-config", "preset", NULL},
    {"init-from", "model.init_from", NULL},
    {"activation-checkpoint", "fsdp.activation_checkpointing", "true"},
    {"no-activation-checkpoint", "fsdp.activation_checkpointing", "false"},
    {"limit-all-gathers", "fsdp.limit_all_gathers", "true"},
    {"no-limit-all-gathers", "fsdp.limit_all_gathers", "false"},
    {"use-orig-params", "fsdp.use_orig_params", "true"},
    {"no-use-orig-params", "fsdp.use_orig_params", "false"},
    /* Hugging Face Trainer's name (note [run-dir] in src/train/run_dir.c) */
    {"overwrite_output_dir", "train.overwrite_output_dir", "true"},
    {"overwrite-output-dir", "train.overwrite_output_dir", "true"},
    /* OpenRLHF's FSDP2 flags */
    {"gradient_checkpointing", "fsdp.activation_checkpointing", "true"},
    {"param_dtype", "fsdp.param_dtype", NULL},
    {"micro_train_batch_size", "train.batch_size", NULL},
    {"fsdp_tensor_parallel_size", "mesh.tp", NULL},
    /* OpenRLHF's SFT flags (sharc/sft.h) */
    {"dataset", "data.path", NULL},
    {"input_key", "data.input_key", NULL},
    {"output_key", "data.output_key", NULL},
    {"input_template", "data.input_template", NULL},
    {"max_len", "data.max_len", NULL},
    {"apply_chat_template", "data.apply_chat_template", "true"},
    {"multiturn", "data.multiturn", "true"},
    {"packing_samples", "data.packing_samples", "true"},
    {"pretrain", "model.init_from", NULL},
    {"tokenizer", "model.tokenizer", NULL},
};

/* --config FILE, --section.key=value / --section.key value and the shorthand
 * flags, in order; `stage` selects training_stages.STAGE ("" = none). */
static sharc_status parse_config_args(int argc, char **argv, sharc_config *c, const char *stage) {
    sharc_config_default(c);
    snprintf(c->stage, sizeof c->stage, "%s", stage ? stage : "");
    for (int i = 0; i < argc; i++) /* --stage applies to the whole file, wherever it is written */
        if (!strcmp(argv[i], "--stage") && i + 1 < argc) snprintf(c->stage, sizeof c->stage, "%s", argv[i + 1]);
        else if (!strncmp(argv[i], "--stage=", 8)) snprintf(c->stage, sizeof c->stage, "%s", argv[i] + 8);
    char clip[SHARC_CLIP_BUF];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return sharc_error(SHARC_ERR_INVALID, "command line: unexpected argument '%s'", sharc_clip(clip, a));
        a += 2;
        const char *eq = strchr(a, '=');
        char key[256];
        const char *value = NULL;
        if ((eq ? (size_t)(eq - a) : strlen(a)) >= sizeof key)
            return sharc_error(SHARC_ERR_INVALID, "command line: option '--%s' is too long for a key",
                               sharc_clip(clip, a));
        snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        int sh = -1;
        for (int j = 0; j < (int)(sizeof shorthands / sizeof shorthands[0]); j++)
            if (strcmp(key, shorthands[j].flag) == 0) sh = j;
        if (sh >= 0 && shorthands[sh].value) {
            if (eq) return sharc_error(SHARC_ERR_INVALID, "command line: --%s takes no value", key);
            value = shorthands[sh].value;
        } else if (eq) {
            value = eq + 1;
        } else if (sh >= 0 && !strcmp(key, "resume") && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
            value = "true"; /* a bare --resume */
        } else {
            if (i + 1 >= argc) return sharc_error(SHARC_ERR_INVALID, "command line: --%s needs a value", key);
            value = argv[++i];
        }
        char origin[300];
        snprintf(origin, sizeof origin, "command line --%s", key);
        if (strcmp(key, "config") == 0) {
            SHARC_TRY(sharc_config_load_file(c, value));
        } else if (strcmp(key, "stage") == 0) {
            /* read above */
        } else {
            SHARC_TRY(sharc_config_set(c, sh >= 0 ? shorthands[sh].key : key, value, origin));
        }
    }
    /* model.init_from = a Hugging Face directory: its config.json defines the
     * model (every model.* shape key is taken from it) */
    if (c->init_from[0] && sharc_hf_is_dir(c->init_from)) { SHARC_TRY(sharc_hf_read_config(c->init_from, &c->model)); }
    return sharc_config_validate(c);
}

/* A stage NAME given with --stage must be one the file defines. */
static sharc_status check_stage(const sharc_config *c) {
    if (!c->stage[0]) return SHARC_OK;
    for (int i = 0; i < c->num_stages; i++)
        if (!strcmp(c->stages[i], c->stage)) return SHARC_OK;
    char clip[SHARC_CLIP_BUF];
    return sharc_error(SHARC_ERR_INVALID, "command line --stage: no stage '%s' in training_stages (%d defined)",
                       sharc_clip(clip, c->stage), c->num_stages);
}

/* What sharc train runs: one configuration, or one per stage of a
 * multi-stage file (training_stages.NAME.*), in file order, stage k in
 * out_dir/NAME, each after the first starting from the previous stage's
 * final weights (model.init_from). All are parsed and checked before any
 * runs (and before MPI_Init: note [job-end]). */
typedef struct {
    int n;
    sharc_config *cfg; /* (n) */
} train_plan;

static sharc_status train_plan_parse(train_plan *p, int argc, char **argv) {
    p->n = 0;
    p->cfg = calloc(SHARC_MAX_STAGES + 1, sizeof *p->cfg);
    if (!p->cfg) return sharc_error(SHARC_ERR_NOMEM, "train: out of memory");
    sharc_config *c = &p->cfg[0];
    SHARC_TRY(parse_config_args(argc, argv, c, NULL));
    SHARC_TRY(check_stage(c));
    if (c->num_stages == 0 || c->stage[0]) {
        p->n = 1;
        return SHARC_OK;
    }
    const int n = c->num_stages;
    char names[SHARC_MAX_STAGES][48];
    memcpy(names, c->stages, sizeof names);
    for (int k = 0; k < n; k++) {
        sharc_config *s = &p->cfg[k];
        SHARC_TRY(parse_config_args(argc, argv, s, names[k]));
        char dir[SHARC_PATH_MAX];
        if (snprintf(dir, sizeof dir, "%s/%s", s->train.out_dir, names[k]) >= (int)sizeof dir - 20)
            return sharc_error(SHARC_ERR_INVALID, "train.out_dir: too long with stage '%s'", names[k]);
        snprintf(s->train.out_dir, sizeof s->train.out_dir, "%s", dir);
        if (k > 0) { /* fits: every out_dir leaves 20 bytes */
            char prev[SHARC_PATH_MAX + 32];
            snprintf(prev, sizeof prev, "%s/model.safetensors", p->cfg[k - 1].train.out_dir);
            memcpy(s->init_from, prev, sizeof s->init_from);
            s->init_from[sizeof s->init_from - 1] = 0;
        }
        p->n = k + 1;
    }
    return SHARC_OK;
}

static int cmd_train(const train_plan *p, sharc_comm *world) {
    for (int k = 0; k < p->n; k++) {
        const sharc_config *s = &p->cfg[k];
        if (p->n > 1 && sharc_comm_rank(world) == 0)
            sharc_info("sharc: stage %d/%d '%s' in %s%s%s", k + 1, p->n, s->stage, s->train.out_dir,
                       s->init_from[0] ? ", from " : "", s->init_from);
        sharc_status st = sharc_train_run(s, world);
        if (st != SHARC_OK) return fail(st);
    }
    return 0;
}

/* sharc launch -n N CMD...: mpirun with the flags this machine needs. */
static int cmd_launch(int argc, char **argv) {
    long long n = 0;
    int i = 0;
    sharc_status st = SHARC_OK;
    for (; i < argc && st == SHARC_OK; i++) {
        if (!strcmp(argv[i], "-n") || !strcmp(argv[i], "-np")) {
            if (i + 1 >= argc) st = sharc_error(SHARC_ERR_INVALID, "launch: %s needs a value", argv[i]);
            else st = parse_int("launch", argv[i], argv[i + 1], 1, 65536, &n), i++;
        } else if (!strncmp(argv[i], "-n=", 3)) {
            st = parse_int("launch", "-n", argv[i] + 3, 1, 65536, &n);
        } else if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else {
            break;
        }
    }
    if (st == SHARC_OK && (n < 1 || i >= argc))
        st = sharc_error(SHARC_ERR_INVALID, "launch: usage: sharc launch -n N [--] COMMAND [ARGS...] (N >= 1)");
    if (st != SHARC_OK) return fail(st);
    int cores = sharc_cpus_available();
    bool openmpi = false;
    FILE *p = popen("mpirun --version 2>&1", "r");
    if (p) {
        char line[256];
        while (fgets(line, sizeof line, p))
            openmpi |= strstr(line, "Open MPI") != NULL || strstr(line, "OpenRTE") != NULL;
        pclose(p);
    }
    char **av = calloc((size_t)(argc + 16), sizeof(char *));
    char nbuf[24], pe[64], self[4096];
    int k = 0;
    av[k++] = "mpirun";
    snprintf(nbuf, sizeof nbuf, "%lld", n);
    av[k++] = "-n";
    av[k++] = nbuf;
    if (openmpi) {
        if (geteuid() == 0) av[k++] = "--allow-run-as-root";
        if (n > cores) {
            av[k++] = "--oversubscribe";
            av[k++] = "--bind-to";
            av[k++] = "none";
        } else {
            /* each rank gets cores/n whole cores; its threads default to them (train.threads = 0) */
            snprintf(pe, sizeof pe, "slot:PE=%lld", cores / n);
            av[k++] = "--map-by";
            av[k++] = pe;
            av[k++] = "--bind-to";
            av[k++] = "core";
        }
        setenv("OMPI_MCA_btl_base_warn_component_unused", "0", 0);
    }
    /* a sharc command word (train, config) or the bare name "sharc" runs this same binary */
    bool word = !strcmp(argv[i], "train") || !strcmp(argv[i], "config");
    if (word || !strcmp(argv[i], "sharc")) {
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len > 0) {
            self[len] = 0;
            av[k++] = self;
            if (!word) i++;
        }
    }
    for (; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    fprintf(stderr, "sharc launch:");
    for (int j = 0; j < k; j++) fprintf(stderr, " %s", av[j]);
    fprintf(stderr, "\n");
    fflush(stderr);
    execvp("mpirun", av);
    sharc_error(SHARC_ERR_UNSUPPORTED, "launch: cannot run mpirun: %s; install Open MPI (make deps does)",
                strerror(errno));
    free(av);
    return fail(SHARC_ERR_UNSUPPORTED);
}

static void print_warning(const char *line, void *ctx) {
    (void)ctx;
    sharc_warn("%s", line);
}

/* "24G", "24GiB", "512M", "1e9": bytes (binary suffixes K, M, G, T). */
static sharc_status parse_size(const char *flag, const char *v, int64_t *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double mul = 1.0;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024.0, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024.0 * 1024.0, end++;
    else if (*end == 'T' || *end == 't') mul = 1024.0 * 1024.0 * 1024.0 * 1024.0, end++;
    if (mul > 1.0 && (!strcmp(end, "iB") || !strcmp(end, "B"))) end += strlen(end);
    if (end == v || *end || errno || !(x > 0) || x * mul > 9e18)
        return sharc_error(SHARC_ERR_INVALID, "plan: %s '%s': expected a size such as 24G, 512M or 1e9", flag, v);
    *out = (int64_t)(x * mul);
    return SHARC_OK;
}

static sharc_status parse_count(const char *flag, const char *v, int *out) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < 1 || n > (1 << 24))
        return sharc_error(SHARC_ERR_INVALID, "plan: %s '%s': expected a whole number >= 1", flag, v);
    *out = (int)n;
    return SHARC_OK;
}

/* sharc plan: note [memory-plan] in src/train/memplan.c. Nothing the size of
 * the model is allocated, so a 70B plan at 1024 ranks prints on a laptop. */
static int cmd_plan(int argc, char **argv) {
    int world = 0, rpn = 0;
    int64_t limit = 0;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    sharc_status st = rest ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "plan: out of memory");
    for (int i = 0; i < argc && st == SHARC_OK; i++) {
        const char *flags[] = {"--ranks", "--ranks-per-node", "--memory-per-rank"};
        int which = -1;
        const char *v = NULL;
        for (int k = 0; k < 3; k++) {
            size_t n = strlen(flags[k]);
            if (!strcmp(argv[i], flags[k])) {
                which = k;
                if (i + 1 >= argc) st = sharc_error(SHARC_ERR_INVALID, "plan: %s needs a value", flags[k]);
                else v = argv[++i];
            } else if (!strncmp(argv[i], flags[k], n) && argv[i][n] == '=') {
                which = k;
                v = argv[i] + n + 1;
            }
        }
        if (st != SHARC_OK) break;
        if (which < 0) rest[nrest++] = argv[i];
        else if (which == 0) st = parse_count("--ranks", v, &world);
        else if (which == 1) st = parse_count("--ranks-per-node", v, &rpn);
        else st = parse_size("--memory-per-rank", v, &limit);
    }
    if (st == SHARC_OK && world == 0) st = sharc_error(SHARC_ERR_INVALID, "plan: --ranks N is required");
    sharc_config c;
    if (st == SHARC_OK) st = parse_config_args(nrest, rest, &c, NULL);
    free(rest);
    if (st == SHARC_OK) st = check_stage(&c);
    if (st == SHARC_OK) st = sharc_config_validate(&c);
    if (st != SHARC_OK) return fail(st);
    if (rpn == 0) rpn = world; /* one node */
    int on_node = rpn < world ? rpn : world;
    int threads = c.train.threads > 0 ? c.train.threads : sharc_cpus_available() / on_node;
    if (threads < 1) threads = 1;
    sharc_memplan p;
    if ((st = sharc_memplan_make(&p, &c, world, rpn, threads)) != SHARC_OK) return fail(st);
    sharc_memplan_print(stdout, &p, &c, NULL);
    if (limit > 0) sharc_memplan_suggest(stdout, &c, world, rpn, threads, limit);
    return 0;
}

static int cmd_config(int argc, char **argv) {
    if (argc == 1 && strcmp(argv[0], "--keys") == 0) {
        sharc_config_print_keys(stdout);
        return 0;
    }
    sharc_config c;
    sharc_status st = parse_config_args(argc, argv, &c, NULL);
    if (st == SHARC_OK) st = check_stage(&c);
    if (st != SHARC_OK) return fail(st);
    sharc_config_write_yaml(&c, stdout);
    if (c.num_stages > 0) {
        printf("# training_stages:");
        for (int i = 0; i < c.num_stages; i++)
            printf(" %s%s", c.stages[i], strcmp(c.stages[i], c.stage) ? "" : " (shown)");
        printf("%s\n", c.stage[0] ? "" : " (sharc config --stage NAME shows one)");
    }
    sharc_config_warnings(&c, print_warning, NULL);
    return 0;
}

/* What `--checkpoint ARG` of export, generate and eval reads: sharc/source.h
 * (note [inference-source]). */
/* One process holding the whole model of `c` with the source's weights;
 * plan_B > 0 plans activations for plan_B sequences of the model's context
 * (max_seq_len for GPT-2, train.seq_len for Llama). On failure *m and *e
 * are NULL. */
static sharc_status inference_load(const sharc_source *src, const sharc_config *c, int plan_B, sharc_model **m,
                                   sharc_fsdp **e) {
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    *m = NULL;
    *e = NULL;
    const int T = c->model.family == SHARC_FAMILY_GPT2 ? c->model.max_seq_len : c->train.seq_len;
    sharc_status st = sharc_model_init(m, &c->model, NULL);
    if (st == SHARC_OK && plan_B > 0) st = sharc_model_plan(*m, plan_B, T, false);
    if (st == SHARC_OK)
        st = sharc_fsdp_init(e, sharc_model_units(*m), sharc_model_num_units(*m), sharc_model_schedule(*m), &fc, NULL,
                             sharc_model_device(*m));
    if (st == SHARC_OK) st = sharc_source_load(src, *e);
    if (st != SHARC_OK) {
        sharc_fsdp_free(*e);
        sharc_model_free(*m);
        *e = NULL;
        *m = NULL;
    }
    return st;
}

/* Both steps: what sharc export, generate and eval call. */
static sharc_status load_for_inference(const char *arg, int plan_B, sharc_config *c, sharc_model **m, sharc_fsdp **e,
                                       sharc_source *src) {
    *m = NULL;
    *e = NULL;
    SHARC_TRY(sharc_source_resolve(arg, src, c));
    return inference_load(src, c, plan_B, m, e);
}

/* The prompt's ids: bytes for a byte-level model; with a tokenizer the
 * post-processor's ids (BOS, if it adds one) and the text, or with --chat the
 * chat format's rendering of one user turn and the generation prompt. */
static sharc_status generate_prompt(const sharc_config *c, const sharc_tokenizer *t, const char *prompt, bool chat,
                                    sharc_ids *ids, int32_t *turn_end) {
    *turn_end = -1;
    if (!t) {
        SHARC_TRY(sharc_ids_reserve(ids, strlen(prompt) + 1));
        ids->n = (size_t)sharc_byte_encode(prompt, (int64_t)strlen(prompt), ids->ids);
        return SHARC_OK;
    }
    sharc_encoder *e;
    SHARC_TRY(sharc_encoder_init(&e, t));
    sharc_status st = SHARC_OK;
    if (chat) {
        sharc_chat_format f = (sharc_chat_format)c->data.chat_template;
        if (f == SHARC_CHAT_AUTO)
            st = sharc_chat_identify(sharc_tokenizer_chat_template(t), "generate --chat: the tokenizer", &f);
        sharc_chat_msg m = {SHARC_ROLE_USER, prompt, strlen(prompt), NULL, 0};
        sharc_chat_options o = {.add_generation_prompt = true, .bos = sharc_tokenizer_bos_text(t)};
        sharc_chat_text text = {0};
        if (st == SHARC_OK) st = sharc_chat_render(f, &m, 1, &o, &text);
        if (st == SHARC_OK) st = sharc_encoder_encode(e, text.text, text.len, ids);
        if (f == SHARC_CHAT_LLAMA3) *turn_end = sharc_tokenizer_token_id(t, "<|eot_id|>", 10);
        else *turn_end = sharc_tokenizer_token_id(t, "<|im_end|>", 10);
        sharc_chat_text_free(&text);
    } else {
        const int32_t *pre;
        size_t np = sharc_tokenizer_prefix_ids(t, &pre);
        for (size_t i = 0; i < np && st == SHARC_OK; i++) st = sharc_ids_push(ids, pre[i]);
        if (st == SHARC_OK) st = sharc_encoder_encode(e, prompt, strlen(prompt), ids);
    }
    sharc_encoder_free(e);
    return st;
}

static int cmd_generate(int argc, char **argv) {
    option o[] = {
        {"--checkpoint", NULL}, {"--prompt", "\n"},     {"--tokens", "200"},          {"--temperature", "0.8"},
        {"--top-k", "40"},      {"--seed", "1"},        {"--threads", "0"},           {"--timeout", DEFAULT_TIMEOUT},
        {"--tokenizer", NULL},  {"--chat", OPT_SWITCH}, {"--no-kv-cache", OPT_SWITCH}};
    const int no = (int)(sizeof o / sizeof o[0]);
    long long ntok = 0, top_k = 0, threads = 0;
    unsigned long long seed = 1;
    double temperature = 0;
    int timeout = 0;
    sharc_status st = parse_options("generate", argc, argv, o, no);
    if (st == SHARC_OK) st = parse_int("generate", "--tokens", opt_value(o, no, "--tokens"), 0, 1 << 24, &ntok);
    if (st == SHARC_OK)
        st = parse_real("generate", "--temperature", opt_value(o, no, "--temperature"), 0, 1e6, &temperature);
    if (st == SHARC_OK) st = parse_int("generate", "--top-k", opt_value(o, no, "--top-k"), 0, 1 << 30, &top_k);
    if (st == SHARC_OK) st = parse_u64("generate", "--seed", opt_value(o, no, "--seed"), &seed);
    if (st == SHARC_OK) st = parse_int("generate", "--threads", opt_value(o, no, "--threads"), 0, 4096, &threads);
    if (st == SHARC_OK) st = parse_timeout("generate", opt_value(o, no, "--timeout"), &timeout);
    const char *ckpt = opt_value(o, no, "--checkpoint"), *prompt = opt_value(o, no, "--prompt");
    const char *tok_path = opt_value(o, no, "--tokenizer");
    bool chat = opt_value(o, no, "--chat") != OPT_SWITCH;
    bool cache = opt_value(o, no, "--no-kv-cache") == OPT_SWITCH;
    if (st == SHARC_OK && !ckpt) st = sharc_error(SHARC_ERR_INVALID, "generate: --checkpoint DIR|FILE is required");
    if (st != SHARC_OK) return fail(st);
    sharc_config c;
    sharc_source src;
    if ((st = sharc_source_resolve(ckpt, &src, &c)) != SHARC_OK) return fail(st);
    /* the run's tokenizer (model.tokenizer, or model.init_from's), --tokenizer instead */
    if (tok_path) snprintf(c.tokenizer, sizeof c.tokenizer, "%s", tok_path);
    sharc_tokenizer *tok = NULL;
    if ((st = sharc_dataprep_tokenizer(&c, &tok)) != SHARC_OK) return fail(st);
    if (!tok && c.model.vocab_size != 256) {
        sharc_error(SHARC_ERR_INVALID,
                    "generate: '%s' has model.vocab_size %d and no model.tokenizer; give --tokenizer "
                    "PATH (its tokenizer.json or directory)",
                    src.path, c.model.vocab_size);
        return fail(SHARC_ERR_INVALID);
    }
    if (chat && !tok) {
        sharc_tokenizer_free(tok);
        sharc_error(SHARC_ERR_INVALID, "generate --chat needs a tokenizer with a chat template (--tokenizer PATH)");
        return fail(SHARC_ERR_INVALID);
    }
    if ((st = sharc_watchdog_start(timeout, "--timeout")) != SHARC_OK ||
        (st = sharc_blas_init((int)threads)) != SHARC_OK) {
        sharc_tokenizer_free(tok);
        return fail(st);
    }
    const int V = c.model.vocab_size;
    sharc_ids ids = {0};
    int32_t turn_end = -1, eos = tok ? sharc_tokenizer_eos(tok) : -1;
    if ((st = generate_prompt(&c, tok, prompt, chat, &ids, &turn_end)) == SHARC_OK && ids.n == 0)
        st = sharc_ids_push(&ids, tok ? (sharc_tokenizer_bos(tok) >= 0 ? sharc_tokenizer_bos(tok)
                                         : eos >= 0                    ? eos
                                                                       : 0)
                                      : '\n');
    if (st == SHARC_OK) st = sharc_ids_reserve(&ids, ids.n + (size_t)ntok + 1);
    sharc_model *m = NULL;
    sharc_fsdp *e = NULL;
    int T = c.model.family == SHARC_FAMILY_GPT2 ? c.model.max_seq_len : c.train.seq_len;
    if (st == SHARC_OK) st = inference_load(&src, &c, 1, &m, &e);
    if (st == SHARC_OK && cache) st = sharc_model_kv_enable(m);
    float *logits = malloc(sizeof(float) * (size_t)V);
    if (st == SHARC_OK && !logits) st = sharc_error(SHARC_ERR_NOMEM, "generate: out of memory");
    if (st != SHARC_OK) {
        sharc_tokenizer_free(tok);
        sharc_ids_free(&ids);
        free(logits);
        sharc_fsdp_free(e);
        sharc_model_free(m);
        return fail(st);
    }
    fputs(prompt, stdout);
    if (chat) fputc('\n', stdout);
    sharc_rng rng;
    sharc_rng_init(&rng, seed, 0x67656eull);
    sharc_fault_at("generate", 0);
    for (long long i = 0; i < ntok; i++) {
        sharc_activity_step(i + 1); /* note [watchdog]: each token is progress */
        /* note [kv-cache]: within the T planned positions each token is
         * appended to the cache; past them (or with --no-kv-cache) the last
         * T tokens are recomputed from position 0, as without a cache */
        if (cache && ids.n <= (size_t)T) {
            int have = sharc_model_kv_len(m);
            if ((st = sharc_model_kv_append(m, e, ids.ids + have, (int)ids.n - have, logits)) != SHARC_OK) break;
        } else {
            size_t start = ids.n > (size_t)T ? ids.n - (size_t)T : 0;
            sharc_model_logits_last(m, e, ids.ids + start, (int)(ids.n - start), logits);
        }
        int next = sharc_sample_logits(logits, V, (float)temperature, (int)top_k, sharc_rng_next_uniform(&rng));
        if (tok && (next == eos || next == turn_end)) break; /* the model ended its text */
        ids.ids[ids.n++] = next;
        size_t len = 1;
        char ch = (char)next;
        const char *bytes = tok ? sharc_tokenizer_token_bytes(tok, next, &len) : &ch;
        if (len) fwrite(bytes, 1, len, stdout);
        fflush(stdout);
    }
    printf("\n");
    sharc_watchdog_stop();
    sharc_ids_free(&ids);
    free(logits);
    sharc_tokenizer_free(tok);
    sharc_fsdp_free(e);
    sharc_model_free(m);
    return st == SHARC_OK ? 0 : fail(st);
}

/* A progress line on stderr when it is a terminal. */
static void tokenize_progress(size_t done, size_t total, const char *unit, void *ctx) {
    const double *t0 = ctx;
    double dt = sharc_clock_now() - *t0, frac = total ? (double)done / (double)total : 1.0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\rtokenizing [%s] %5.1f%% %zu/%zu %s, %.0f s left  ", bar, 100 * frac, done, total, unit,
            frac > 0 ? dt * (1 - frac) / frac : 0.0);
    if (done == total) fprintf(stderr, "\n");
    fflush(stderr);
}

/* sharc tokenize: the keys and flags of train, plus --out FILE, --threads N. */
static int cmd_tokenize(int argc, char **argv) {
    const char *out = "";
    int threads = 0;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    sharc_status st = rest ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "tokenize: out of memory");
    for (int i = 0; i < argc && st == SHARC_OK; i++) {
        bool out_opt = !strcmp(argv[i], "--out"), thr_opt = !strcmp(argv[i], "--threads");
        if ((out_opt || thr_opt) && i + 1 >= argc)
            st = sharc_error(SHARC_ERR_INVALID, "tokenize: %s needs a value", argv[i]);
        else if (out_opt) out = argv[++i];
        else if (!strncmp(argv[i], "--out=", 6)) out = argv[i] + 6;
        else if (thr_opt || !strncmp(argv[i], "--threads=", 10)) {
            long long n = 0;
            st = parse_int("tokenize", "--threads", thr_opt ? argv[++i] : argv[i] + 10, 0, 4096, &n);
            threads = (int)n;
        } else rest[nrest++] = argv[i];
    }
    sharc_config c;
    if (st == SHARC_OK) st = parse_config_args(nrest, rest, &c, NULL);
    free(rest);
    char tpath[SHARC_PATH_MAX];
    if (st == SHARC_OK && !sharc_dataprep_tokenizer_path(&c, tpath, sizeof tpath)[0])
        st = sharc_error(SHARC_ERR_INVALID, "tokenize: set model.tokenizer (or --tokenizer) to a Hugging Face "
                                            "tokenizer.json or its directory");
    sharc_tokenizer *t = NULL;
    if (st == SHARC_OK) st = sharc_tokenizer_load(&t, tpath);
    if (st == SHARC_OK) st = sharc_blas_init(threads); /* sets OpenMP's threads (0: this process's CPUs) */
    char written[SHARC_PATH_MAX + 8] = "";
    double t0 = sharc_clock_now();
    if (st == SHARC_OK)
        st = sharc_dataprep_tokenize(&c, t, out, sharc_threads_get(), isatty(2) ? tokenize_progress : NULL, &t0,
                                     written, sizeof written);
    sharc_tokenizer_free(t);
    return st == SHARC_OK ? 0 : fail(st);
}

static int cmd_ckpt(int argc, char **argv) {
    if (argc != 2 || strcmp(argv[0], "inspect") != 0) {
        sharc_error(SHARC_ERR_INVALID, "ckpt: usage: sharc ckpt inspect DIR");
        return fail(SHARC_ERR_INVALID);
    }
    sharc_status st = sharc_ckpt_inspect(argv[1], stdout);
    return st == SHARC_OK ? 0 : fail(st);
}

/* One process holding the whole model: the engine for `mc` with no mesh. */
static sharc_status single_engine(const sharc_model_config *mc, sharc_model **m, sharc_fsdp **e) {
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    SHARC_TRY(sharc_model_init(m, mc, NULL));
    return sharc_fsdp_init(e, sharc_model_units(*m), sharc_model_num_units(*m), sharc_model_schedule(*m), &fc, NULL,
                           sharc_model_device(*m));
}

/* The tokenizer files beside a run's model.tokenizer, copied into an exported
 * Hugging Face directory (each atomically). */
static sharc_status copy_tokenizer(const sharc_config *c, const char *dir) {
    char src[SHARC_PATH_MAX];
    if (!sharc_dataprep_tokenizer_path(c, src, sizeof src)[0]) return SHARC_OK;
    struct stat sb;
    char from_dir[SHARC_PATH_MAX];
    snprintf(from_dir, sizeof from_dir, "%s", src);
    if (stat(src, &sb) == 0 && !S_ISDIR(sb.st_mode)) { /* a tokenizer.json file: its directory */
        char *slash = strrchr(from_dir, '/');
        if (slash) *slash = 0;
        else snprintf(from_dir, sizeof from_dir, ".");
    }
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"};
    for (int i = 0; i < 3; i++) {
        char from[SHARC_PATH_MAX + 32], to[SHARC_PATH_MAX + 32];
        snprintf(from, sizeof from, "%s/%s", from_dir, files[i]);
        if (i == 0 && stat(src, &sb) == 0 && !S_ISDIR(sb.st_mode)) snprintf(from, sizeof from, "%s", src);
        if (stat(from, &sb) != 0) continue;
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        char *text;
        size_t len;
        SHARC_TRY(sharc_read_file(from, &text, &len));
        sharc_afile f;
        sharc_status st = sharc_afile_open(&f, to);
        if (st == SHARC_OK) {
            if ((st = sharc_afile_write(&f, text, len)) == SHARC_OK) st = sharc_afile_commit(&f);
            else sharc_afile_abort(&f);
        }
        free(text);
        SHARC_TRY(st);
    }
    return SHARC_OK;
}

static int cmd_import(int argc, char **argv) {
    option o[] = {{"--hf", NULL}, {"--out", NULL}, {"--timeout", DEFAULT_TIMEOUT}};
    int timeout = 0;
    sharc_status st = parse_options("import", argc, argv, o, 3);
    if (st == SHARC_OK && (!o[0].value || !o[1].value))
        st = sharc_error(SHARC_ERR_INVALID, "import: --hf HF_DIR and --out FILE.safetensors are required");
    if (st == SHARC_OK) st = parse_timeout("import", o[2].value, &timeout);
    if (st != SHARC_OK) return fail(st);
    sharc_config c;
    sharc_config_default(&c);
    if ((st = sharc_hf_read_config(o[0].value, &c.model)) != SHARC_OK) return fail(st);
    if (c.train.seq_len > c.model.max_seq_len) c.train.seq_len = c.model.max_seq_len;
    /* the directory's tokenizer, when sharc reads it, becomes the weights' model.tokenizer */
    sharc_config probe = c;
    snprintf(probe.init_from, sizeof probe.init_from, "%s", o[0].value);
    sharc_tokenizer *tok = NULL;
    char tpath[SHARC_PATH_MAX];
    if (sharc_dataprep_tokenizer_path(&probe, tpath, sizeof tpath)[0]) {
        char abs[PATH_MAX];
        const char *keep = realpath(tpath, abs) && strlen(abs) < sizeof c.tokenizer ? abs : tpath;
        if (sharc_dataprep_tokenizer(&probe, &tok) == SHARC_OK)
            snprintf(c.tokenizer, sizeof c.tokenizer, "%.1023s", keep);
        else
            sharc_warn("import: %s; the weights get no model.tokenizer (give generate --tokenizer)",
                       sharc_last_error());
        sharc_tokenizer_free(tok);
    }
    if ((st = sharc_config_validate(&c)) != SHARC_OK) return fail(st);
    if ((st = sharc_watchdog_start(timeout, "--timeout")) != SHARC_OK) return fail(st);
    sharc_model *m = NULL;
    sharc_fsdp *e = NULL;
    if ((st = single_engine(&c.model, &m, &e)) == SHARC_OK && (st = sharc_hf_load(e, o[0].value)) == SHARC_OK)
        st = sharc_weights_save(e, NULL, &c, o[1].value);
    sharc_watchdog_stop();
    sharc_fsdp_free(e);
    sharc_model_free(m);
    if (st != SHARC_OK) return fail(st);
    printf("imported %s (%s, %lld parameters) -> %s\n", o[0].value, sharc_family_name(c.model.family),
           (long long)sharc_model_num_params(&c.model), o[1].value);
    return 0;
}

static int cmd_export(int argc, char **argv) {
    option o[] = {{"--checkpoint", NULL},
                  {"--out", NULL},
                  {"--dtype", "fp32"},
                  {"--max-shard-size", "0"},
                  {"--timeout", DEFAULT_TIMEOUT}};
    unsigned long long shard = 0;
    int timeout = 0;
    sharc_status st = parse_options("export", argc, argv, o, 5);
    if (st == SHARC_OK && (!o[0].value || !o[1].value))
        st = sharc_error(SHARC_ERR_INVALID, "export: --checkpoint DIR|FILE and --out HF_DIR are required");
    sharc_dtype dt = SHARC_DT_F32;
    if (st == SHARC_OK) {
        char clip[SHARC_CLIP_BUF];
        if (!strcmp(o[2].value, "fp32")) dt = SHARC_DT_F32;
        else if (!strcmp(o[2].value, "bf16")) dt = SHARC_DT_BF16;
        else if (!strcmp(o[2].value, "fp16")) dt = SHARC_DT_F16;
        else
            st = sharc_error(SHARC_ERR_INVALID, "export: --dtype '%s': expected fp32, bf16 or fp16",
                             sharc_clip(clip, o[2].value));
    }
    if (st == SHARC_OK) st = parse_u64("export", "--max-shard-size", o[3].value, &shard); /* bytes; 0: one file */
    if (st == SHARC_OK) st = parse_timeout("export", o[4].value, &timeout);
    if (st != SHARC_OK) return fail(st);
    if ((st = sharc_watchdog_start(timeout, "--timeout")) != SHARC_OK) return fail(st);
    sharc_config c;
    sharc_source src;
    sharc_model *m = NULL;
    sharc_fsdp *e = NULL;
    if ((st = load_for_inference(o[0].value, 0, &c, &m, &e, &src)) == SHARC_OK) {
        sharc_fault_at("export", 0);
        st = sharc_hf_export(e, NULL, &c.model, o[1].value, dt, (uint64_t)shard);
    }
    if (st == SHARC_OK) st = copy_tokenizer(&c, o[1].value);
    sharc_watchdog_stop();
    sharc_fsdp_free(e);
    sharc_model_free(m);
    if (st != SHARC_OK) return fail(st);
    printf("exported %s -> %s (%s)\n", src.path, o[1].value, o[2].value);
    return 0;
}

/* sharc eval's options (every rank parses them before MPI_Init). */
typedef struct {
    sharc_eval_options o;
    int timeout;
} eval_plan;

static sharc_status eval_plan_parse(eval_plan *p, int argc, char **argv) {
    option o[] = {
        {"--checkpoint", NULL}, {"--data.path", NULL},   {"--data.format", "auto"}, {"--infer_batch_size", "0"},
        {"--seq_len", "0"},     {"--eval_batches", "0"}, {"--threads", "0"},        {"--timeout", DEFAULT_TIMEOUT}};
    memset(p, 0, sizeof *p);
    long long b = 0, t = 0, nb = 0, th = 0;
    SHARC_TRY(parse_options("eval", argc, argv, o, 8));
    int f = sharc_token_format_parse(o[2].value);
    char clip[SHARC_CLIP_BUF];
    if (f < 0)
        return sharc_error(SHARC_ERR_INVALID,
                           "eval: --data.format '%s': expected auto, u16, u32, llmc, text, sft or jsonl",
                           sharc_clip(clip, o[2].value));
    SHARC_TRY(parse_int("eval", "--infer_batch_size", o[3].value, 0, 1 << 20, &b));
    SHARC_TRY(parse_int("eval", "--seq_len", o[4].value, 0, 1 << 24, &t));
    SHARC_TRY(parse_int("eval", "--eval_batches", o[5].value, 0, 1ll << 40, &nb));
    SHARC_TRY(parse_int("eval", "--threads", o[6].value, 0, 4096, &th));
    SHARC_TRY(parse_timeout("eval", o[7].value, &p->timeout));
    if (!o[0].value || !o[1].value)
        return sharc_error(SHARC_ERR_INVALID, "eval: --checkpoint RUN_DIR|FILE and --data.path VAL are required");
    p->o = (sharc_eval_options){.weights = o[0].value,
                                .data_path = o[1].value,
                                .format = (sharc_token_format)f,
                                .batch_size = (int)b,
                                .seq_len = (int)t,
                                .max_batches = nb,
                                .threads = (int)th};
    return SHARC_OK;
}

/* sharc eval: runs on every rank of the world. */
static int cmd_eval(const eval_plan *p, sharc_comm *world) {
    sharc_eval_result r;
    sharc_fault_at("eval", 0);
    sharc_status st = sharc_eval_checkpoint(&p->o, world, &r);
    if (st != SHARC_OK) return fail(st);
    if (sharc_comm_rank(world) == 0)
        printf("{\"val_loss\": %.6f, \"val_perplexity\": %.6f, \"targets\": %lld, \"windows\": %lld, "
               "\"batches\": %lld, \"ranks\": %d, \"seconds\": %.3f}\n",
               r.loss, r.perplexity, (long long)r.targets, (long long)r.windows, (long long)r.batches,
               sharc_comm_size(world), r.seconds);
    return 0;
}

static int cmd_plot(int argc, char **argv) {
    const char *out = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof(char *));
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strncmp(argv[i], "--out=", 6)) out = argv[i] + 6;
        else if (!strncmp(argv[i], "--", 2)) {
            free(files);
            char clip[SHARC_CLIP_BUF];
            sharc_error(SHARC_ERR_INVALID, "plot: unknown option '%s' (usage: sharc plot RUN.jsonl ... --out DIR)",
                        sharc_clip(clip, argv[i]));
            return fail(SHARC_ERR_INVALID);
        } else files[n++] = argv[i];
    }
    if (!out || n == 0) {
        free(files);
        sharc_error(SHARC_ERR_INVALID, "plot: usage: sharc plot RUN.jsonl ... --out DIR");
        return fail(SHARC_ERR_INVALID);
    }
    sharc_status st = sharc_plot_runs(files, n, out);
    free(files);
    if (st != SHARC_OK) return fail(st);
    printf("%s/loss.png %s/throughput.png %s/memory.png\n", out, out, out);
    return 0;
}

/* Note [job-end]. How a job of many ranks ends, whatever happens.
 *  - Before MPI_Init every rank parses and checks its command line (and the
 *    files it names); after MPI_Init the outcome is agreed with one
 *    all-reduce, so a bad flag or a missing --config file on one rank stops
 *    every rank within moments, each with a line, all with one exit status.
 *  - A failure the library agrees on (start-up, checkpoint saves, the run's
 *    files, bad steps; note [agreement]) returns on every rank: each prints
 *    its line, calls MPI_Finalize and exits (note [exit-status]).
 *  - A failure one rank cannot share (a collective, or the step, failed on
 *    it alone) would leave the others waiting in a collective: the library
 *    gives them 10 s to fail too (sharc_comm_world_settle); when they do
 *    not, the world is broken and this command ends the whole job with
 *    MPI_Abort (sharc_comm_abort) after the rank's message, with its exit
 *    status. A broken invariant (sharc_fatal) does the same (the fatal hook).
 *  - A stall anywhere, MPI_Init and MPI_Finalize included: the watchdog runs
 *    from before MPI_Init to after MPI_Finalize (note [watchdog]); every
 *    rank prints where it waits and exits with 3. */

static sharc_comm *job_world; /* for the fatal hook */

/* Note [flight] (src/core/flight.c): this rank's record, and where it went. */
static void flight_dump(const char *reason, const char *what) {
    const char *path = sharc_flight_dump(reason, what);
    if (path) sharc_log(SHARC_LOG_ERROR, "flight recorder: this rank's last collectives are in %s", path);
}

static void abort_job(void) {
    if (job_world && sharc_comm_size(job_world) > 1) {
        char what[400];
        sharc_activity_describe(what, sizeof what);
        flight_dump("failed", what); /* note [flight] */
        sharc_comm_abort(job_world, 134);
    }
}

/* Before MPI_Init, the rank and size the launcher gives this process, so
 * that messages and the watchdog's lines name the rank (0 and 1 when not
 * launched). */
static int log_rank_from_launcher(void) {
    static const char *ranks[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
    static const char *sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
    const char *force = getenv("SHARC_COMM");
    int rank = 0, size = 1;
    if (force && strcmp(force, "mpi") != 0 && strcmp(force, "nccl") != 0) return 1;
    for (int i = 0; ranks[i]; i++)
        if (getenv(ranks[i])) {
            rank = atoi(getenv(ranks[i]));
            break;
        }
    for (int i = 0; sizes[i]; i++)
        if (getenv(sizes[i])) {
            size = atoi(getenv(sizes[i]));
            break;
        }
    if (rank < 0 || size < 1 || rank >= size) rank = 0, size = 1;
    sharc_log_set_rank(rank, size);
    return size;
}

/* Note [liveness] (src/core/liveness.c): every rank's card, with one
 * all-gather, so that a survivor can name a rank that dies. A failure here
 * is a broken world: it joins the start-up agreement. */
static sharc_status liveness_share(sharc_comm *world) {
    const int R = sharc_comm_size(world);
    if (R < 2) return SHARC_OK;
    sharc_liveness_card mine, *all = calloc((size_t)R, sizeof *all);
    if (!all) return sharc_error(SHARC_ERR_NOMEM, "liveness: %d cards", R);
    sharc_liveness_card_make(&mine);
    sharc_status st = sharc_comm_all_gather(world, &mine, all, sizeof mine, SHARC_DT_U8);
    if (st == SHARC_OK) st = sharc_liveness_set_peers(all, R, sharc_comm_rank(world));
    free(all);
    return st;
}

typedef int (*world_command)(const void *plan, sharc_comm *world);

/* A command on every rank of the world (train, eval), note [job-end]:
 * `parsed` is this rank's verdict on its command line, `timeout` the
 * watchdog's seconds (from the command line, 600 if it did not parse). */
static int run_on_world(int *argc, char ***argv, sharc_status parsed, int timeout, const char *setting,
                        world_command cmd, const void *plan) {
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", sharc_last_error());
    const int launched = log_rank_from_launcher();
    sharc_status lst = sharc_launch_check_env(); /* note [torchrun-env] in src/comm/launch.c */
    if (lst != SHARC_OK) return fail(lst);
    sharc_status st = sharc_watchdog_start(timeout, setting);
    sharc_activity_step(0);
    sharc_activity_phase("start-up", -1, NULL);
    sharc_fault_at("init", 0);
    sharc_activity_coll_begin("MPI_Init", launched);
    sharc_comm *world = NULL;
    sharc_status wst = sharc_comm_world_init(argc, argv, &world);
    sharc_activity_coll_end();
    if (wst != SHARC_OK) { /* no world to tell: the launcher sees this rank end before MPI_Finalize */
        int rc = fail(wst);
        sharc_watchdog_stop();
        return rc;
    }
    sharc_log_set_rank(sharc_comm_rank(world), sharc_comm_size(world));
    job_world = world;
    sharc_set_fatal_hook(abort_job);
    sharc_watchdog_catch_term();           /* note [rank-death] in src/core/watchdog.c */
    lst = sharc_launch_check_world(world); /* collective: every rank calls it */
    if (lst == SHARC_OK) lst = liveness_share(world);
    if (parsed != SHARC_OK) st = sharc_error(parsed, "%s", msg);
    else if (st == SHARC_OK && lst != SHARC_OK) st = lst;
    st = sharc_comm_agree(world, st, SHARC_ERR_COMM, "rank %d failed to start (see its message)");
    int rc = st != SHARC_OK ? fail(st) : cmd(plan, world);
    if (sharc_comm_world_broken()) {
        sharc_log(SHARC_LOG_ERROR,
                  "ending the whole job with exit status %d (MPI_Abort): the other ranks did not stop "
                  "with this one",
                  rc ? rc : 1);
        char what[400];
        sharc_activity_describe(what, sizeof what);
        flight_dump("failed", what);
        sharc_comm_abort(world, rc ? rc : 1);
    }
    sharc_activity_phase("finishing", -1, NULL);
    sharc_fault_at("finalize", 0);
    sharc_activity_coll_begin("MPI_Finalize", sharc_comm_size(world));
    sharc_set_fatal_hook(NULL);
    job_world = NULL;
    sharc_comm_world_finalize(world);
    sharc_activity_coll_end();
    sharc_watchdog_stop();
    sharc_liveness_close();
    return rc;
}

static int train_on_world(const void *plan, sharc_comm *world) { return cmd_train(plan, world); }
static int doctor_env_on_world(const void *plan, sharc_comm *world) { return sharc_doctor_env(plan, world); }

/* sharc doctor --env [--dir DIR] [--bytes N] [--timeout S] */
static sharc_status doctor_env_parse(sharc_doctor_env_plan *p, int argc, char **argv) {
    memset(p, 0, sizeof *p);
    snprintf(p->dir, sizeof p->dir, ".");
    p->bytes = 16u << 20;
    p->timeout = atoi(DEFAULT_TIMEOUT);
    p->version = SHARC_VERSION;
    char clip[SHARC_CLIP_BUF];
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (i + 1 >= argc || (strcmp(o, "--dir") && strcmp(o, "--bytes") && strcmp(o, "--timeout")))
            return sharc_error(SHARC_ERR_INVALID,
                               "doctor --env: unknown or incomplete option '%s' (usage: sharc doctor --env "
                               "[--dir DIR] [--bytes N] [--timeout SECONDS])",
                               sharc_clip(clip, o));
        long long v;
        const char *a = argv[++i];
        if (!strcmp(o, "--dir")) {
            if (strlen(a) >= sizeof p->dir)
                return sharc_error(SHARC_ERR_INVALID, "doctor --env: --dir '%s' is too long", sharc_clip(clip, a));
            snprintf(p->dir, sizeof p->dir, "%s", a);
        } else if (!strcmp(o, "--bytes")) {
            SHARC_TRY(parse_int("doctor --env", o, a, 4, 1LL << 32, &v));
            p->bytes = (size_t)v;
        } else {
            SHARC_TRY(parse_int("doctor --env", o, a, 0, INT_MAX, &v));
            p->timeout = (int)v;
        }
    }
    return SHARC_OK;
}
static int eval_on_world(const void *plan, sharc_comm *world) { return cmd_eval(plan, world); }

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) {
        train_plan p = {0};
        sharc_status st = train_plan_parse(&p, argc - 2, argv + 2);
        int timeout = st == SHARC_OK ? p.cfg[0].train.timeout : atoi(DEFAULT_TIMEOUT);
        if (st == SHARC_OK) sharc_comm_world_device(p.cfg[0].train.device ? "cuda" : "cpu"); /* note [nccl] */
        int rc = run_on_world(&argc, &argv, st, timeout, "train.timeout", train_on_world, &p);
        free(p.cfg);
        return rc;
    }
    if (!strcmp(cmd, "eval")) {
        eval_plan p;
        sharc_status st = eval_plan_parse(&p, argc - 2, argv + 2);
        return run_on_world(&argc, &argv, st, st == SHARC_OK ? p.timeout : atoi(DEFAULT_TIMEOUT), "--timeout",
                            eval_on_world, &p);
    }
    if (!strcmp(cmd, "launch")) return cmd_launch(argc - 2, argv + 2);
    if (!strcmp(cmd, "plot")) return cmd_plot(argc - 2, argv + 2);
    if (!strcmp(cmd, "doctor") && argc >= 3 && !strcmp(argv[2], "--env")) {
        sharc_doctor_env_plan p;
        sharc_status st = doctor_env_parse(&p, argc - 3, argv + 3);
        return run_on_world(&argc, &argv, st, st == SHARC_OK ? p.timeout : atoi(DEFAULT_TIMEOUT), "--timeout",
                            doctor_env_on_world, &p);
    }
    if (!strcmp(cmd, "doctor")) return sharc_doctor_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "config")) return cmd_config(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "ckpt")) return cmd_ckpt(argc - 2, argv + 2);
    if (!strcmp(cmd, "import")) return cmd_import(argc - 2, argv + 2);
    if (!strcmp(cmd, "export")) return cmd_export(argc - 2, argv + 2);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("sharc %s\n", SHARC_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    char clip[SHARC_CLIP_BUF];
    sharc_error(SHARC_ERR_INVALID, "unknown command '%s' (sharc help lists them)", sharc_clip(clip, cmd));
    return fail(SHARC_ERR_INVALID);
}
