/* main.c: the sharc command. The only place that prints a failure's message
 * and decides the exit status. */
#include "sharc/blas.h"
#include "sharc/comm.h"
#include "sharc/config.h"
#include "sharc/data.h"
#include "sharc/eval.h"
#include "sharc/fsdp.h"
#include "sharc/log.h"
#include "sharc/model.h"
#include "sharc/plot.h"
#include "sharc/rng.h"
#include "sharc/train.h"
#include "sharc/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SHARC_VERSION "0.1.0"

static void usage(FILE *f) {
    fprintf(f,
            "sharc " SHARC_VERSION ": fully sharded data-parallel training of GPT-2 and Llama models\n"
            "\n"
            "usage:\n"
            "  sharc train [--config FILE.yaml] [--section.key=value ...]\n"
            "  sharc generate --checkpoint DIR|FILE [--prompt TEXT] [--tokens N]\n"
            "                 [--temperature T] [--top-k K] [--seed S] [--threads K]\n"
            "  sharc eval --checkpoint RUN_DIR|FILE --data.path VAL [--data.format F] [--infer_batch_size N]\n"
            "             [--seq_len T] [--eval_batches N] [--threads K]   validation loss and perplexity\n"
            "  sharc plot RUN/metrics.jsonl ... --out DIR   loss, throughput and memory curves (PNG)\n"
            "  sharc config [--config FILE.yaml] [--section.key=value ...]   print the resolved config\n"
            "  sharc config --keys                                          list every config key\n"
            "  sharc version\n");
}

static int fail(sharc_status st) {
    sharc_log(SHARC_LOG_ERROR, "%s", sharc_last_error());
    return st == SHARC_ERR_INVALID ? 2 : 1;
}

/* --config FILE and --section.key=value / --section.key value, in order. */
static sharc_status parse_config_args(int argc, char **argv, sharc_config *c) {
    sharc_config_default(c);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return sharc_error(SHARC_ERR_INVALID, "command line: unexpected argument '%s'", a);
        a += 2;
        const char *eq = strchr(a, '=');
        char key[256];
        const char *value;
        if (eq) {
            snprintf(key, sizeof key, "%.*s", (int)(eq - a), a);
            value = eq + 1;
        } else {
            if (i + 1 >= argc)
                return sharc_error(SHARC_ERR_INVALID, "command line: --%s needs a value", a);
            snprintf(key, sizeof key, "%s", a);
            value = argv[++i];
        }
        if (strcmp(key, "config") == 0) {
            SHARC_TRY(sharc_config_load_file(c, value));
        } else {
            char origin[300];
            snprintf(origin, sizeof origin, "command line --%s", key);
            SHARC_TRY(sharc_config_set(c, key, value, origin));
        }
    }
    return sharc_config_validate(c);
}

static int cmd_train(int argc, char **argv, sharc_comm *world) {
    sharc_config c;
    sharc_status st = parse_config_args(argc, argv, &c);
    if (st != SHARC_OK) return fail(st);
    st = sharc_train_run(&c, world);
    return st == SHARC_OK ? 0 : fail(st);
}

static int cmd_config(int argc, char **argv) {
    if (argc == 1 && strcmp(argv[0], "--keys") == 0) {
        sharc_config_print_keys(stdout);
        return 0;
    }
    sharc_config c;
    sharc_status st = parse_config_args(argc, argv, &c);
    if (st != SHARC_OK) return fail(st);
    sharc_config_write_yaml(&c, stdout);
    return 0;
}

static int cmd_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "\n";
    int ntok = 200, top_k = 40, threads = 0;
    float temperature = 0.8f;
    unsigned long long seed = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            sharc_error(SHARC_ERR_INVALID, "generate: %s needs a value", a);
            return fail(SHARC_ERR_INVALID);
        }
        if (!strcmp(a, "--checkpoint")) ckpt = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--tokens")) ntok = atoi(v);
        else if (!strcmp(a, "--temperature")) temperature = (float)atof(v);
        else if (!strcmp(a, "--top-k")) top_k = atoi(v);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else {
            sharc_error(SHARC_ERR_INVALID, "generate: unknown option '%s'", a);
            return fail(SHARC_ERR_INVALID);
        }
        i++;
    }
    if (!ckpt) {
        sharc_error(SHARC_ERR_INVALID, "generate: --checkpoint DIR|FILE is required");
        return fail(SHARC_ERR_INVALID);
    }
    if (ntok < 0 || top_k < 0 || !(temperature >= 0.0f)) {
        sharc_error(SHARC_ERR_INVALID, "generate: --tokens, --top-k and --temperature must be >= 0");
        return fail(SHARC_ERR_INVALID);
    }
    char path[4096];
    struct stat sb;
    if (stat(ckpt, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
    else snprintf(path, sizeof path, "%s", ckpt);

    sharc_config c;
    sharc_config_default(&c);
    sharc_status st = sharc_weights_read_config(path, &c);
    if (st != SHARC_OK) return fail(st);
    if (c.model.vocab_size != 256) {
        sharc_error(SHARC_ERR_UNSUPPORTED, "generate: '%s' has model.vocab_size %d; generate decodes byte-level models (256) only",
                    path, c.model.vocab_size);
        return fail(SHARC_ERR_UNSUPPORTED);
    }
    if ((st = sharc_blas_init(threads)) != SHARC_OK) return fail(st);
    sharc_model *m = NULL;
    sharc_fsdp *e = NULL;
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    int T = c.model.family == SHARC_FAMILY_GPT2 ? c.model.max_seq_len : c.train.seq_len;
    if ((st = sharc_model_init(&m, &c.model)) != SHARC_OK || (st = sharc_model_plan(m, 1, T, false)) != SHARC_OK ||
        (st = sharc_fsdp_init(&e, sharc_model_units(m), sharc_model_num_units(m), &fc, NULL)) != SHARC_OK ||
        (st = sharc_weights_load(e, path)) != SHARC_OK) {
        int rc = fail(st);
        sharc_fsdp_free(e);
        sharc_model_free(m);
        return rc;
    }
    int64_t plen = (int64_t)strlen(prompt);
    int64_t cap = plen + ntok + 1;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)cap);
    float *logits = malloc(sizeof(float) * 256);
    int64_t n = sharc_byte_encode(prompt, plen, tokens);
    if (n == 0) tokens[n++] = '\n';
    fwrite(prompt, 1, (size_t)plen, stdout);
    sharc_rng rng;
    sharc_rng_init(&rng, seed, 0x67656eull);
    for (int i = 0; i < ntok; i++) {
        int64_t start = n > T ? n - T : 0;
        sharc_model_logits_last(m, e, tokens + start, (int)(n - start), logits);
        int next = sharc_sample_logits(logits, 256, temperature, top_k, sharc_rng_next_uniform(&rng));
        tokens[n++] = next;
        char ch = (char)next;
        fwrite(&ch, 1, 1, stdout);
        fflush(stdout);
    }
    printf("\n");
    free(tokens);
    free(logits);
    sharc_fsdp_free(e);
    sharc_model_free(m);
    return 0;
}

/* sharc eval: every option takes a value; runs on every rank of the world. */
static int cmd_eval(int argc, char **argv, sharc_comm *world) {
    sharc_eval_options o = {.format = SHARC_TOKENS_AUTO};
    char opt[128];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq) { /* --key=value */
            snprintf(opt, sizeof opt, "%.*s", (int)(eq - a), a);
            a = opt;
            v = eq + 1;
        } else {
            v = i + 1 < argc ? argv[++i] : NULL;
        }
        if (!v) {
            sharc_error(SHARC_ERR_INVALID, "eval: %s needs a value", a);
            return fail(SHARC_ERR_INVALID);
        }
        char *end = NULL;
        long long n = 0;
        bool numeric = !strcmp(a, "--infer_batch_size") || !strcmp(a, "--seq_len") || !strcmp(a, "--eval_batches") ||
                       !strcmp(a, "--threads");
        if (numeric) {
            n = strtoll(v, &end, 10);
            if (!*v || *end || n < 0 || n > (1ll << 30)) {
                sharc_error(SHARC_ERR_INVALID, "eval: %s '%s', expected an integer >= 0", a, v);
                return fail(SHARC_ERR_INVALID);
            }
        }
        if (!strcmp(a, "--checkpoint")) o.weights = v;
        else if (!strcmp(a, "--data.path")) o.data_path = v;
        else if (!strcmp(a, "--data.format")) {
            int f = sharc_token_format_parse(v);
            if (f < 0) {
                sharc_error(SHARC_ERR_INVALID, "eval: --data.format '%s', expected auto, u16, u32, llmc or text", v);
                return fail(SHARC_ERR_INVALID);
            }
            o.format = (sharc_token_format)f;
        } else if (!strcmp(a, "--infer_batch_size")) o.batch_size = (int)n;
        else if (!strcmp(a, "--seq_len")) o.seq_len = (int)n;
        else if (!strcmp(a, "--eval_batches")) o.max_batches = n;
        else if (!strcmp(a, "--threads")) o.threads = (int)n;
        else {
            sharc_error(SHARC_ERR_INVALID, "eval: unknown option '%s'", a);
            return fail(SHARC_ERR_INVALID);
        }
    }
    if (!o.weights || !o.data_path) {
        sharc_error(SHARC_ERR_INVALID, "eval: --checkpoint RUN_DIR|FILE and --data.path VAL are required");
        return fail(SHARC_ERR_INVALID);
    }
    sharc_eval_result r;
    sharc_status st = sharc_eval_checkpoint(&o, world, &r);
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
            sharc_error(SHARC_ERR_INVALID, "plot: unknown option '%s' (usage: sharc plot RUN.jsonl ... --out DIR)", argv[i]);
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

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) {
        /* the only command that runs on many ranks */
        sharc_comm *world;
        sharc_status st = sharc_comm_world_init(&argc, &argv, &world);
        if (st != SHARC_OK) return fail(st);
        int rc = cmd_train(argc - 2, argv + 2, world);
        sharc_comm_world_finalize(world);
        return rc;
    }
    if (!strcmp(cmd, "eval")) {
        sharc_comm *world;
        sharc_status st = sharc_comm_world_init(&argc, &argv, &world);
        if (st != SHARC_OK) return fail(st);
        int rc = cmd_eval(argc - 2, argv + 2, world);
        sharc_comm_world_finalize(world);
        return rc;
    }
    if (!strcmp(cmd, "plot")) return cmd_plot(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "config")) return cmd_config(argc - 2, argv + 2);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("sharc %s\n", SHARC_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    sharc_error(SHARC_ERR_INVALID, "unknown command '%s' (sharc help lists them)", cmd);
    return fail(SHARC_ERR_INVALID);
}
