/* dataprep.c: sharc_dataprep_*, a run's tokenizer and datasets from its
 * configuration (sharc/dataprep.h, note [tokenize-once]). */
#include "sharc/clock.h"
#include "sharc/dataprep.h"

#include "sharc/activity.h"
#include "sharc/fileio.h"
#include "sharc/hf.h"
#include "sharc/log.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *sharc_dataprep_tokenizer_path(const sharc_config *c, char *buf, size_t n) {
    buf[0] = 0;
    if (c->tokenizer[0]) {
        snprintf(buf, n, "%s", c->tokenizer);
    } else if (c->init_from[0] && sharc_hf_is_dir(c->init_from)) {
        struct stat sb;
        char p[SHARC_PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/tokenizer.json", c->init_from);
        if (stat(p, &sb) == 0) snprintf(buf, n, "%s", c->init_from);
    }
    return buf;
}

sharc_status sharc_dataprep_tokenizer(const sharc_config *c, sharc_tokenizer **out) {
    *out = NULL;
    char path[SHARC_PATH_MAX];
    if (!sharc_dataprep_tokenizer_path(c, path, sizeof path)[0]) return SHARC_OK;
    sharc_status st = sharc_tokenizer_load(out, path);
    if (st != SHARC_OK) {
        char msg[1200];
        snprintf(msg, sizeof msg, "%s", sharc_last_error());
        return sharc_error(st, "model.tokenizer: %s", msg);
    }
    if (sharc_tokenizer_num_ids(*out) > c->model.vocab_size) {
        int ids = sharc_tokenizer_num_ids(*out);
        sharc_tokenizer_free(*out);
        *out = NULL;
        return sharc_error(SHARC_ERR_INVALID,
                           "model.vocab_size: %d is smaller than the %d ids of model.tokenizer '%s'; set "
                           "model.vocab_size >= %d",
                           c->model.vocab_size, ids, path, ids);
    }
    return SHARC_OK;
}

void sharc_dataprep_sft_options(const sharc_config *c, sharc_sft_options *o) {
    *o = (sharc_sft_options){.input_key = c->data.input_key,
                             .output_key = c->data.output_key,
                             .apply_chat_template = c->data.apply_chat_template,
                             .chat_format = (sharc_chat_format)c->data.chat_template,
                             .input_template = c->data.input_template,
                             .max_len = c->data.max_len > 0 ? c->data.max_len : c->train.seq_len + 1,
                             .multiturn = c->data.multiturn,
                             .mask = (sharc_sft_mask)c->data.loss_mask};
}

sharc_status sharc_dataprep_format(const sharc_config *c, const char *path, sharc_token_format *out) {
    *out = c->data.format;
    return *out == SHARC_TOKENS_AUTO ? sharc_dataset_detect(path, out) : SHARC_OK;
}

/* ------------------------------------------------------------ tokenizing */

typedef struct {
    const char *base;
    size_t len;
    void *map;
} mapped;

static sharc_status map_file(const char *path, mapped *m) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sharc_error(sharc_path_status(errno), "data: cannot open '%s': %s; check data.path", path,
                           strerror(errno));
    struct stat sb;
    sharc_status st = SHARC_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        st = sharc_error(SHARC_ERR_INVALID, "data: '%s' is not a regular file; data.path must name a data file", path);
    else if (sb.st_size == 0) st = sharc_error(SHARC_ERR_FORMAT, "data: '%s' is empty", path);
    if (st == SHARC_OK) {
        m->len = (size_t)sb.st_size;
        m->map = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->map == MAP_FAILED) {
            m->map = NULL;
            st = sharc_error(SHARC_ERR_IO, "data: cannot map '%s': %s", path, strerror(errno));
        } else {
            m->base = m->map;
            (void)madvise(m->map, m->len, MADV_SEQUENTIAL);
        }
    }
    close(fd);
    return st;
}

static void unmap_file(mapped *m) {
    if (m->map) munmap(m->map, m->len);
    memset(m, 0, sizeof *m);
}

/* keeps the step watchdog (note [watchdog]) seeing progress while tokenizing */
static sharc_status text_progress(sharc_ids *ids, size_t done, size_t total, void *ctx) {
    (void)ids, (void)done, (void)total, (void)ctx;
    sharc_activity_phase("tokenizing the data", -1, NULL);
    return SHARC_OK;
}

static void sft_progress(size_t done, size_t total, void *ctx) {
    (void)done, (void)total, (void)ctx;
    sharc_activity_phase("tokenizing the SFT records", -1, NULL);
}

static char *hex(const uint8_t *d, char out[17]) {
    for (int i = 0; i < 8; i++) sprintf(out + 2 * i, "%02x", d[i]);
    return out;
}

sharc_status sharc_dataprep_open(const sharc_config *c, const sharc_tokenizer *t, const char *path, int threads,
                                 bool report, sharc_dataset **out) {
    *out = NULL;
    if (!path || !*path) return sharc_error(SHARC_ERR_INVALID, "data: no data file given; set data.path");
    sharc_token_format fmt;
    SHARC_TRY(sharc_dataprep_format(c, path, &fmt));
    const int vocab = c->model.vocab_size;
    const double t0 = sharc_clock_now();
    if (fmt == SHARC_TOKENS_JSONL) {
        if (!t)
            return sharc_error(SHARC_ERR_INVALID,
                               "data: '%s' is JSONL (SFT records): set model.tokenizer (or a "
                               "model.init_from directory with a tokenizer.json)",
                               path);
        sharc_sft_options o;
        sharc_dataprep_sft_options(c, &o);
        mapped m;
        SHARC_TRY(map_file(path, &m));
        sharc_sft_data d;
        sharc_status st = sharc_sft_build(t, &o, m.base, m.len, path, threads, sft_progress, NULL, &d);
        unmap_file(&m);
        SHARC_TRY(st);
        if (report)
            sharc_info(
                "sharc: %s: %zu records -> %zu SFT samples, %zu tokens, %zu trained (mask %s); dropped %zu empty, %zu "
                "with a prompt of data.max_len - 2 = %d tokens or more; %zu cut to %d tokens (%.2f s)",
                path, d.records, d.nsamples, d.ntokens, d.trained,
                o.mask == SHARC_SFT_MASK_OPENRLHF ? "openrlhf" : "ranges", d.dropped_empty, d.dropped_long,
                o.max_len - 2, d.truncated, o.max_len, sharc_clock_now() - t0);
        return sharc_dataset_from_memory(out, path, d.tokens, (int64_t)d.ntokens, d.offsets, (int64_t)d.nsamples,
                                         sharc_tokenizer_sha256(t), vocab);
    }
    if (fmt == SHARC_TOKENS_TEXT && t) {
        mapped m;
        SHARC_TRY(map_file(path, &m));
        sharc_ids ids = {0};
        sharc_status st = sharc_tokenizer_encode_text(t, m.base, m.len, threads, text_progress, NULL, &ids);
        unmap_file(&m);
        if (st != SHARC_OK) {
            sharc_ids_free(&ids);
            char msg[1200];
            snprintf(msg, sizeof msg, "%s", sharc_last_error());
            return sharc_error(st, "data: '%s': %s", path, msg);
        }
        if (report)
            sharc_info("sharc: %s: %zu bytes -> %zu tokens with %s (%.2f s)", path, m.len ? m.len : 0, ids.n,
                       sharc_tokenizer_path(t), sharc_clock_now() - t0);
        /* int32 ids >= 0 are their uint32 bits */
        return sharc_dataset_from_memory(out, path, (uint32_t *)ids.ids, (int64_t)ids.n, NULL, 0,
                                         sharc_tokenizer_sha256(t), vocab);
    }
    SHARC_TRY(sharc_dataset_open(out, path, fmt, vocab));
    const uint8_t *made = sharc_dataset_tokenizer_sha256(*out);
    if (t && made && memcmp(made, sharc_tokenizer_sha256(t), 32) != 0) {
        char a[17], b[17];
        sharc_status st =
            sharc_error(SHARC_ERR_INVALID,
                        "data: '%s' was tokenized with another tokenizer (sha256 %s...) than model.tokenizer "
                        "'%s' (%s...); tokenize it again with this one",
                        path, hex(made, a), sharc_tokenizer_path(t), hex(sharc_tokenizer_sha256(t), b));
        sharc_dataset_free(*out);
        *out = NULL;
        return st;
    }
    return SHARC_OK;
}

/* ------------------------------------------------------------ documents */

sharc_status sharc_dataprep_documents(const sharc_tokenizer *t, const char *key, bool eos, const char *jsonl,
                                      size_t len, const char *name, int threads,
                                      void (*progress)(size_t done, size_t total, void *ctx), void *ctx,
                                      sharc_ids *out) {
    if (eos && sharc_tokenizer_eos(t) < 0)
        return sharc_error(SHARC_ERR_INVALID, "tokenizer '%s' has no eos_token to end each document with",
                           sharc_tokenizer_path(t));
    size_t nlines = 0, cap = 1024;
    struct line {
        const char *s;
        size_t n, no;
    } *lines = malloc(cap * sizeof *lines);
    if (!lines) return sharc_error(SHARC_ERR_NOMEM, "tokenize: out of memory");
    size_t no = 0;
    for (size_t p = 0; p < len;) {
        const char *nl = memchr(jsonl + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - jsonl) : len, q = e;
        no++;
        while (q > p && (jsonl[q - 1] == ' ' || jsonl[q - 1] == '\t' || jsonl[q - 1] == '\r')) q--;
        if (q > p) {
            if (nlines == cap) {
                struct line *r = realloc(lines, (cap *= 2) * sizeof *lines);
                if (!r) {
                    free(lines);
                    return sharc_error(SHARC_ERR_NOMEM, "tokenize: out of memory");
                }
                lines = r;
            }
            lines[nlines++] = (struct line){jsonl + p, q - p, no};
        }
        p = e + 1;
    }
    if (threads <= 0) threads = omp_get_max_threads();
    const size_t batch = 4096;
    sharc_ids *part = calloc(batch, sizeof *part);
    sharc_status *pst = calloc(batch, sizeof *pst);
    char(*msg)[512] = calloc(batch, sizeof *msg);
    sharc_status st = part && pst && msg ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "tokenize: out of memory");
    for (size_t b0 = 0; b0 < nlines && st == SHARC_OK; b0 += batch) {
        size_t nb = nlines - b0 < batch ? nlines - b0 : batch;
#pragma omp parallel num_threads(threads)
        {
            sharc_encoder *e = NULL;
            sharc_status est = sharc_encoder_init(&e, t);
            struct json_tokener *jt = json_tokener_new_ex(64);
            if (jt) json_tokener_set_flags(jt, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
            else if (est == SHARC_OK) est = sharc_error(SHARC_ERR_NOMEM, "tokenize: out of memory");
#pragma omp for schedule(dynamic, 16)
            for (size_t k = 0; k < nb; k++) {
                const struct line *l = &lines[b0 + k];
                sharc_status r = est;
                part[k].n = 0;
                json_object *o = NULL, *v = NULL;
                if (r == SHARC_OK) {
                    json_tokener_reset(jt);
                    o = json_tokener_parse_ex(jt, l->s, (int)l->n);
                    if (!o || json_tokener_get_error(jt) != json_tokener_success ||
                        json_tokener_get_parse_end(jt) != l->n || !json_object_is_type(o, json_type_object))
                        r = sharc_error(SHARC_ERR_FORMAT, "%s line %zu: not one JSON object", name, l->no);
                    else if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                        r = sharc_error(SHARC_ERR_FORMAT, "%s line %zu: no string '%s' (data.input_key)", name, l->no,
                                        key);
                    else
                        r = sharc_encoder_encode(e, json_object_get_string(v), (size_t)json_object_get_string_len(v),
                                                 &part[k]);
                    if (r == SHARC_OK && eos) r = sharc_ids_push(&part[k], sharc_tokenizer_eos(t));
                }
                json_object_put(o);
                pst[k] = r;
                if (r != SHARC_OK) snprintf(msg[k], sizeof msg[k], "%s", sharc_last_error());
            }
            sharc_encoder_free(e);
            if (jt) json_tokener_free(jt);
        }
        for (size_t k = 0; k < nb && st == SHARC_OK; k++) {
            if (pst[k] != SHARC_OK) st = sharc_error(pst[k], "%s", msg[k]);
            else if ((st = sharc_ids_reserve(out, out->n + part[k].n)) == SHARC_OK) {
                memcpy(out->ids + out->n, part[k].ids, part[k].n * sizeof(int32_t));
                out->n += part[k].n;
            }
        }
        if (progress && st == SHARC_OK) progress(b0 + nb, nlines, ctx);
    }
    for (size_t k = 0; part && k < batch; k++) sharc_ids_free(&part[k]);
    free(part);
    free(pst);
    free(msg);
    free(lines);
    if (st == SHARC_OK && out->n == 0) st = sharc_error(SHARC_ERR_INVALID, "%s: no documents", name);
    return st;
}

/* ------------------------------------------------------------ sharc tokenize */

typedef struct {
    void (*progress)(size_t done, size_t total, const char *unit, void *ctx);
    void *ctx;
    const char *unit;
} progress_fwd;

static void fwd(size_t done, size_t total, void *ctx) {
    progress_fwd *f = ctx;
    if (f->progress) f->progress(done, total, f->unit, f->ctx);
}

static sharc_status text_fwd(sharc_ids *ids, size_t done, size_t total, void *ctx) {
    (void)ids;
    fwd(done, total, ctx);
    return SHARC_OK;
}

static void default_out(const char *path, const char *ext, char *out, size_t n) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - path) : strlen(path);
    snprintf(out, n, "%.*s%s", (int)stem, path, ext);
}

sharc_status sharc_dataprep_tokenize(const sharc_config *c, const sharc_tokenizer *t, const char *out, int threads,
                                     void (*progress)(size_t done, size_t total, const char *unit, void *ctx),
                                     void *ctx, char *written, size_t written_len) {
    const char *path = c->data.path;
    sharc_token_format fmt;
    SHARC_TRY(sharc_dataprep_format(c, path, &fmt));
    if (fmt != SHARC_TOKENS_TEXT && fmt != SHARC_TOKENS_JSONL)
        return sharc_error(SHARC_ERR_INVALID,
                           "tokenize: data.path '%s' is %s tokens already; sharc tokenize reads UTF-8 "
                           "text or JSONL",
                           path, sharc_token_format_name(fmt));
    const bool sft = fmt == SHARC_TOKENS_JSONL && (c->data.output_key[0] || c->data.apply_chat_template);
    char target[SHARC_PATH_MAX + 8];
    if (out && *out) snprintf(target, sizeof target, "%s", out);
    else default_out(path, sft ? ".sft" : ".bin", target, sizeof target);
    if (!strcmp(target, path)) return sharc_error(SHARC_ERR_INVALID, "tokenize: --out '%s' is the input file", target);
    snprintf(written, written_len, "%s", target);
    mapped m;
    SHARC_TRY(map_file(path, &m));
    const double t0 = sharc_clock_now();
    progress_fwd pf = {progress, ctx, fmt == SHARC_TOKENS_TEXT ? "bytes" : "records"};
    sharc_status st;
    if (sft) {
        sharc_sft_options o;
        sharc_dataprep_sft_options(c, &o);
        sharc_sft_data d;
        st = sharc_sft_build(t, &o, m.base, m.len, path, threads, fwd, &pf, &d);
        if (st == SHARC_OK) {
            st = sharc_sft_write(target, &d, t, o.max_len);
            if (st == SHARC_OK)
                sharc_info(
                    "sharc tokenize: %s (%.1f MB, %zu records) -> %s: %zu SFT samples, %zu tokens, %zu trained "
                    "(mask %s); dropped %zu empty, %zu with a prompt of max_len - 2 = %d tokens or more; %zu cut to "
                    "%d tokens; %.1f MB/s (%.2f s)",
                    path, (double)m.len / 1e6, d.records, target, d.nsamples, d.ntokens, d.trained,
                    o.mask == SHARC_SFT_MASK_OPENRLHF ? "openrlhf" : "ranges", d.dropped_empty, d.dropped_long,
                    o.max_len - 2, d.truncated, o.max_len, (double)m.len / 1e6 / (sharc_clock_now() - t0),
                    sharc_clock_now() - t0);
            sharc_sft_free(&d);
        }
    } else {
        sharc_ids ids = {0};
        if (fmt == SHARC_TOKENS_TEXT) st = sharc_tokenizer_encode_text(t, m.base, m.len, threads, text_fwd, &pf, &ids);
        else st = sharc_dataprep_documents(t, c->data.input_key, true, m.base, m.len, path, threads, fwd, &pf, &ids);
        if (st == SHARC_OK) {
            st = sharc_tokens_write_llmc(target, ids.ids, (int64_t)ids.n, sharc_tokenizer_num_ids(t),
                                         sharc_tokenizer_sha256(t));
            if (st == SHARC_OK)
                sharc_info("sharc tokenize: %s (%.1f MB) -> %s: %zu tokens (llm.c, %s)%s; %.1f MB/s (%.2f s)", path,
                           (double)m.len / 1e6, target, ids.n,
                           sharc_tokenizer_num_ids(t) <= 65536 ? "uint16" : "uint32",
                           fmt == SHARC_TOKENS_JSONL ? ", each document followed by EOS" : "",
                           (double)m.len / 1e6 / (sharc_clock_now() - t0), sharc_clock_now() - t0);
        }
        sharc_ids_free(&ids);
    }
    unmap_file(&m);
    return st;
}
