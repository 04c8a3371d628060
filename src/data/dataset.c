/* dataset.c: sharc_dataset_*, token files memory-mapped read-only and
 * validated once at open, or tokens held in memory (sharc_dataset_from_memory);
 * the format names (sharc_token_format_*), the llm.c writer
 * (sharc_tokens_write_llmc) and the byte-level tokenizer (sharc_byte_*). The
 * formats are specified in sharc/data.h.
 *
 * A dataset owns its file descriptor and its read-only mapping, or the
 * memory it was given; tokens are converted to int32 on the way out
 * (sharc_dataset_read, sharc_dataset_item). The mapping is page cache, not
 * accounted memory; the dataset struct, its path and tokens held in memory
 * are (SHARC_MEM_OTHER; the latter through sharc_mem_account, being malloc'd
 * by the tokenizer that grew them).
 *
 * Note [token-fingerprint]. sharc's writers store the sha256 of the
 * tokenizer.json that made the tokens: an SFT file in its header, an llm.c
 * file in header words 16..24 (word 16 = SHTK_MARK, then the 32 bytes),
 * which llm.c's readers ignore. */
#include "sharc/alloc.h"
#include "sharc/data.h"
#include "sharc/fileio.h"
#include "sharc/sft.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tokens are read straight from the mapping: the files are little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sharc's token reader assumes a little-endian host"
#endif

#define LLMC_HEADER_BYTES 1024 /* 256 x int32 */
#define LLMC_MAGIC_U16    20240520
#define LLMC_VERSION_U16  1
#define LLMC_MAGIC_U32    20240801
#define LLMC_VERSION_U32  7
#define SHTK_MARK         0x4B544853 /* "SHTK" */
#define SFT_HEADER_BYTES  128
#define SFT_VERSION       1

struct sharc_dataset {
    char *path; /* owned copy, for messages */
    int fd;     /* owned, -1 when closed */
    void *map;  /* owned read-only mapping of the whole file, or NULL */
    size_t map_bytes;
    const unsigned char *tokens; /* (ntokens x token_bytes) first token, inside map or mem_tokens */
    int64_t ntokens;
    int token_bytes;           /* 1 (text), 2 (u16) or 4 (u32, sft) */
    sharc_token_format format; /* as resolved: never AUTO */
    const uint64_t *offsets;   /* (nsamples + 1) SFT samples, inside map or mem_offsets; NULL: a stream */
    int64_t nsamples, longest;
    uint8_t sha256[32]; /* note [token-fingerprint] */
    bool has_sha256;
    void *mem_tokens, *mem_offsets; /* owned (malloc'd) by from_memory */
    int64_t mem_bytes;              /* their size, counted as SHARC_MEM_OTHER while held */
    int64_t *rows; /* note [packing-rule]: (nrows + 1) first sample of each packed row; NULL: unpacked */
    int64_t nrows;
    int pack_T;
};

const char *sharc_dataset_path(const sharc_dataset *d) { return d->path; }

/* ---------------- format names ---------------- */

static const char *const format_names[] = {"auto", "u16", "u32", "llmc", "text", "sft", "jsonl"};
#define NFORMATS ((int)(sizeof format_names / sizeof format_names[0]))

int sharc_token_format_parse(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < NFORMATS; i++)
        if (strcasecmp(s, format_names[i]) == 0) return i;
    return -1;
}

const char *sharc_token_format_name(sharc_token_format f) {
    return ((int)f >= 0 && (int)f < NFORMATS) ? format_names[f] : "unknown";
}

/* ---------------- format detection and layout ---------------- */

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static bool starts_with_llmc_magic(const unsigned char *base, size_t bytes) {
    if (bytes < 4) return false;
    int32_t magic = le32(base);
    return magic == LLMC_MAGIC_U16 || magic == LLMC_MAGIC_U32;
}

/* data.format = auto: llm.c or SFT magic first, then the extension. */
static sharc_status detect_format(sharc_token_format *out, const char *path, const unsigned char *base, size_t bytes) {
    if (starts_with_llmc_magic(base, bytes)) *out = SHARC_TOKENS_LLMC;
    else if (bytes >= 8 && memcmp(base, "SHARCSFT", 8) == 0) *out = SHARC_TOKENS_SFT;
    else if (ends_with(path, ".txt") || ends_with(path, ".text")) *out = SHARC_TOKENS_TEXT;
    else if (ends_with(path, ".bin") || ends_with(path, ".u16")) *out = SHARC_TOKENS_U16;
    else if (ends_with(path, ".u32")) *out = SHARC_TOKENS_U32;
    else if (ends_with(path, ".jsonl")) *out = SHARC_TOKENS_JSONL;
    else
        return sharc_error(SHARC_ERR_INVALID,
                           "data: '%s': cannot tell the token format from the extension; set "
                           "data.format to u16, u32, llmc, text, sft or jsonl",
                           path);
    return SHARC_OK;
}

sharc_status sharc_dataset_detect(const char *path, sharc_token_format *out) {
    unsigned char head[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return sharc_error(sharc_path_status(errno), "data: cannot open '%s': %s; check data.path", path,
                           strerror(errno));
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return detect_format(out, path, head, n);
}

/* A sharc SFT token file (sharc_sft_write): header, offsets, tokens. */
static sharc_status layout_sft(sharc_dataset *d, const unsigned char *base, size_t bytes) {
    const char *path = d->path;
    if (bytes < SFT_HEADER_BYTES || memcmp(base, "SHARCSFT", 8) != 0)
        return sharc_error(SHARC_ERR_FORMAT,
                           "data: '%s' is not a sharc SFT token file (no SHARCSFT header); check data.format", path);
    uint32_t version;
    uint64_t n, ntok;
    memcpy(&version, base + 8, 4);
    memcpy(&n, base + 16, 8);
    memcpy(&ntok, base + 24, 8);
    if (version != SFT_VERSION)
        return sharc_error(SHARC_ERR_FORMAT, "data: '%s': SFT file version %u; this sharc reads version %d", path,
                           version, SFT_VERSION);
    if (n == 0 || n > (bytes - SFT_HEADER_BYTES) / 8 || ntok > bytes / 4 ||
        (uint64_t)bytes != SFT_HEADER_BYTES + 8 * (n + 1) + 4 * ntok)
        return sharc_error(SHARC_ERR_FORMAT, "data: '%s': %llu samples and %llu tokens do not fit its %zu bytes", path,
                           (unsigned long long)n, (unsigned long long)ntok, bytes);
    d->offsets = (const uint64_t *)(const void *)(base + SFT_HEADER_BYTES);
    d->nsamples = (int64_t)n;
    for (uint64_t k = 0; k < n; k++) {
        if (d->offsets[k] >= d->offsets[k + 1])
            return sharc_error(SHARC_ERR_FORMAT, "data: '%s': sample %llu is empty or out of order", path,
                               (unsigned long long)k);
        int64_t len = (int64_t)(d->offsets[k + 1] - d->offsets[k]);
        if (len > d->longest) d->longest = len;
    }
    if (d->offsets[0] != 0 || d->offsets[n] != ntok)
        return sharc_error(SHARC_ERR_FORMAT, "data: '%s': the samples do not cover its %llu tokens", path,
                           (unsigned long long)ntok);
    memcpy(d->sha256, base + 40, 32);
    d->has_sha256 = true;
    d->token_bytes = 4;
    d->tokens = base + SFT_HEADER_BYTES + 8 * (n + 1);
    d->ntokens = (int64_t)ntok;
    return SHARC_OK;
}

/* Parse the llm.c header and check the size against its token count. */
static sharc_status layout_llmc(sharc_dataset *d, const unsigned char *base, size_t bytes) {
    const char *path = d->path;
    if (bytes < LLMC_HEADER_BYTES)
        return sharc_error(SHARC_ERR_FORMAT,
                           "data: '%s': %zu bytes is shorter than the %d-byte llm.c header; "
                           "check data.format",
                           path, bytes, LLMC_HEADER_BYTES);
    int32_t magic = le32(base), version = le32(base + 4), count = le32(base + 8);
    if (magic == LLMC_MAGIC_U16 && version == LLMC_VERSION_U16) d->token_bytes = 2;
    else if (magic == LLMC_MAGIC_U32 && version == LLMC_VERSION_U32) d->token_bytes = 4;
    else
        return sharc_error(SHARC_ERR_FORMAT,
                           "data: '%s': llm.c header has magic %d version %d; expected magic %d "
                           "version %d (uint16 tokens) or magic %d version %d (uint32 tokens)",
                           path, magic, version, LLMC_MAGIC_U16, LLMC_VERSION_U16, LLMC_MAGIC_U32, LLMC_VERSION_U32);
    if (count < 0)
        return sharc_error(SHARC_ERR_FORMAT, "data: '%s': llm.c header says %d tokens; expected a count >= 0", path,
                           count);
    size_t want = LLMC_HEADER_BYTES + (size_t)count * (size_t)d->token_bytes;
    if (want != bytes)
        return sharc_error(SHARC_ERR_FORMAT,
                           "data: '%s': llm.c header says %d tokens (%zu bytes) but the file has "
                           "%zu bytes",
                           path, count, want, bytes);
    d->tokens = base + LLMC_HEADER_BYTES;
    d->ntokens = count;
    if (le32(base + 4 * 16) == SHTK_MARK) {
        memcpy(d->sha256, base + 4 * 17, 32);
        d->has_sha256 = true;
    }
    return SHARC_OK;
}

/* Resolve the format and point d->tokens at the token array. */
static sharc_status layout(sharc_dataset *d, const unsigned char *base, size_t bytes, sharc_token_format fmt,
                           int vocab_size) {
    const char *path = d->path;
    if (fmt == SHARC_TOKENS_AUTO) SHARC_TRY(detect_format(&fmt, path, base, bytes));
    d->format = fmt;
    switch (fmt) {
    case SHARC_TOKENS_TEXT:
        if (vocab_size < 256)
            return sharc_error(SHARC_ERR_INVALID,
                               "data: '%s' is byte-level text, which needs model.vocab_size >= 256 "
                               "(it is %d)",
                               path, vocab_size);
        d->token_bytes = 1;
        d->tokens = base;
        d->ntokens = (int64_t)bytes;
        break;
    case SHARC_TOKENS_U16:
    case SHARC_TOKENS_U32:
        d->token_bytes = fmt == SHARC_TOKENS_U16 ? 2 : 4;
        if (bytes % (size_t)d->token_bytes != 0)
            return sharc_error(SHARC_ERR_FORMAT,
                               "data: '%s': %zu bytes is not a whole number of %s tokens (%d bytes "
                               "each); check data.format",
                               path, bytes, format_names[fmt], d->token_bytes);
        d->tokens = base;
        d->ntokens = (int64_t)(bytes / (size_t)d->token_bytes);
        break;
    case SHARC_TOKENS_LLMC: SHARC_TRY(layout_llmc(d, base, bytes)); break;
    case SHARC_TOKENS_SFT: SHARC_TRY(layout_sft(d, base, bytes)); break;
    case SHARC_TOKENS_JSONL:
        return sharc_error(SHARC_ERR_INVALID,
                           "data: '%s' is JSONL: set model.tokenizer (sharc train tokenizes it when it starts; sharc "
                           "tokenize writes a token file from it)",
                           path);
    default: return sharc_error(SHARC_ERR_INVALID, "data: '%s': unknown token format %d", path, (int)fmt);
    }
    if (d->ntokens == 0)
        return sharc_error(SHARC_ERR_FORMAT, "data: '%s' holds no tokens; expected at least one", path);
    return SHARC_OK;
}

/* ---------------- vocabulary check ---------------- */

/* The largest token: one vectorisable pass over the mapping. */
static uint32_t max_u16(const uint16_t *t, int64_t n) {
    uint16_t m = 0;
    for (int64_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
    return m;
}

static uint32_t max_u32(const uint32_t *t, int64_t n) {
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
    return m;
}

static uint32_t max_sft(const uint32_t *t, int64_t n) {
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) m = (t[i] & ~SHARC_SFT_TRAINED) > m ? (t[i] & ~SHARC_SFT_TRAINED) : m;
    return m;
}

static uint32_t token_at(const sharc_dataset *d, int64_t i) {
    switch (d->token_bytes) {
    case 1: return d->tokens[i];
    case 2: return ((const uint16_t *)(const void *)d->tokens)[i];
    default: return ((const uint32_t *)(const void *)d->tokens)[i] & (d->offsets ? ~SHARC_SFT_TRAINED : ~0u);
    }
}

/* Every token in [0, vocab_size): the max in one pass; only when it fails, a
 * second pass for the position of the first bad token. */
static sharc_status check_vocab(const sharc_dataset *d, int vocab_size) {
    const uint32_t V = (uint32_t)vocab_size; /* vocab_size >= 1, checked at open */
    uint32_t mx;
    switch (d->token_bytes) {
    case 1: mx = 0; break; /* bytes < 256 <= vocab_size, checked in layout() */
    case 2: mx = V > UINT16_MAX ? 0 : max_u16((const uint16_t *)(const void *)d->tokens, d->ntokens); break;
    default:
        mx = d->offsets ? max_sft((const uint32_t *)(const void *)d->tokens, d->ntokens)
                        : max_u32((const uint32_t *)(const void *)d->tokens, d->ntokens);
        break;
    }
    if (mx < V) return SHARC_OK;
    int64_t i = 0;
    while (token_at(d, i) < V) i++; /* ends: some token is >= V */
    return sharc_error(SHARC_ERR_FORMAT,
                       "data: '%s': token %u at position %lld is outside the vocabulary [0, %d); "
                       "check model.vocab_size and data.format",
                       d->path, (unsigned)token_at(d, i), (long long)i, vocab_size);
}

/* ---------------- open / free / read ---------------- */

sharc_status sharc_dataset_open(sharc_dataset **out, const char *path, sharc_token_format fmt, int vocab_size) {
    *out = NULL;
    if (!path || !*path) return sharc_error(SHARC_ERR_INVALID, "data: no token file given; set data.path");
    if (vocab_size < 1)
        return sharc_error(SHARC_ERR_INVALID, "data: '%s': model.vocab_size is %d; expected at least 1", path,
                           vocab_size);
    if ((int)fmt < 0 || (int)fmt >= NFORMATS)
        return sharc_error(SHARC_ERR_INVALID,
                           "data: '%s': unknown token format %d; set data.format to auto, u16, "
                           "u32, llmc or text",
                           path, (int)fmt);
    sharc_dataset *d = sharc_alloc(sizeof *d, SHARC_MEM_OTHER);
    if (!d) return sharc_error(SHARC_ERR_NOMEM, "data: '%s': out of memory", path);
    d->fd = -1;
    sharc_status st;
    size_t len = strlen(path);
    if (!(d->path = sharc_alloc(len + 1, SHARC_MEM_OTHER))) {
        st = sharc_error(SHARC_ERR_NOMEM, "data: '%s': out of memory", path);
        goto fail;
    }
    memcpy(d->path, path, len + 1);

    d->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (d->fd < 0) {
        st =
            sharc_error(sharc_path_status(errno), "data: cannot open '%s': %s; check data.path", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(d->fd, &sb) != 0) {
        st = sharc_error(SHARC_ERR_IO, "data: cannot stat '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = sharc_error(SHARC_ERR_INVALID,
                         "data: '%s' is not a regular file; data.path must name a "
                         "token file",
                         path);
        goto fail;
    }
    size_t bytes = (size_t)sb.st_size;
    if (bytes == 0) {
        st = sharc_error(SHARC_ERR_FORMAT, "data: '%s' is empty; expected at least one token", path);
        goto fail;
    }
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, d->fd, 0);
    if (map == MAP_FAILED) {
        st = sharc_error(SHARC_ERR_IO, "data: cannot map '%s' (%zu bytes): %s", path, bytes, strerror(errno));
        goto fail;
    }
    d->map = map;
    d->map_bytes = bytes;
    if ((st = layout(d, map, bytes, fmt, vocab_size)) != SHARC_OK) goto fail;
    /* one front-to-back pass now, windows in any order afterwards */
    (void)madvise(map, bytes, MADV_SEQUENTIAL);
    st = check_vocab(d, vocab_size);
    (void)madvise(map, bytes, MADV_NORMAL);
    if (st != SHARC_OK) goto fail;
    *out = d;
    return SHARC_OK;
fail:
    sharc_dataset_free(d);
    return st;
}

void sharc_dataset_free(sharc_dataset *d) {
    if (!d) return;
    if (d->map) munmap(d->map, d->map_bytes);
    if (d->fd >= 0) close(d->fd);
    free(d->mem_tokens);
    free(d->mem_offsets);
    free(d->rows);
    if (d->mem_bytes) sharc_mem_account(SHARC_MEM_OTHER, -d->mem_bytes);
    sharc_free(d->path);
    sharc_free(d);
}

sharc_status sharc_dataset_from_memory(sharc_dataset **out, const char *name, uint32_t *tokens, int64_t ntokens,
                                       uint64_t *offsets, int64_t nsamples, const uint8_t *sha256, int vocab_size) {
    *out = NULL;
    sharc_dataset *d = sharc_alloc(sizeof *d, SHARC_MEM_OTHER);
    size_t len = strlen(name);
    if (d) d->path = sharc_alloc(len + 1, SHARC_MEM_OTHER);
    if (!d || !d->path) {
        sharc_free(d);
        free(tokens);
        free(offsets);
        return sharc_error(SHARC_ERR_NOMEM, "data: '%s': out of memory", name);
    }
    memcpy(d->path, name, len + 1);
    d->fd = -1;
    d->mem_tokens = tokens;
    d->mem_offsets = offsets;
    d->mem_bytes = ntokens * 4 + (offsets ? (nsamples + 1) * 8 : 0);
    sharc_mem_account(SHARC_MEM_OTHER, d->mem_bytes);
    d->tokens = (const unsigned char *)tokens;
    d->ntokens = ntokens;
    d->token_bytes = 4;
    d->format = offsets ? SHARC_TOKENS_SFT : SHARC_TOKENS_U32;
    d->offsets = offsets;
    d->nsamples = offsets ? nsamples : 0;
    for (int64_t k = 0; k < d->nsamples; k++)
        if ((int64_t)(offsets[k + 1] - offsets[k]) > d->longest) d->longest = (int64_t)(offsets[k + 1] - offsets[k]);
    if (sha256) {
        memcpy(d->sha256, sha256, 32);
        d->has_sha256 = true;
    }
    sharc_status st =
        ntokens > 0 ? check_vocab(d, vocab_size) : sharc_error(SHARC_ERR_FORMAT, "data: '%s' holds no tokens", name);
    if (st != SHARC_OK) {
        sharc_dataset_free(d);
        return st;
    }
    *out = d;
    return SHARC_OK;
}

int64_t sharc_dataset_num_samples(const sharc_dataset *d) { return d->nsamples; }
int64_t sharc_dataset_longest_sample(const sharc_dataset *d) { return d->longest; }
const uint8_t *sharc_dataset_tokenizer_sha256(const sharc_dataset *d) { return d->has_sha256 ? d->sha256 : NULL; }

/* note [packing-rule] */
sharc_status sharc_dataset_pack(sharc_dataset *d, int T) {
    if (!d->offsets)
        return sharc_error(SHARC_ERR_INVALID, "data.packing: '%s' is a token stream, not SFT samples", d->path);
    if (T < 1 || d->longest > (int64_t)T + 1)
        return sharc_error(SHARC_ERR_INVALID,
                           "data.packing: '%s' has a sample of %lld tokens, more than train.seq_len + 1 = %lld",
                           d->path, (long long)d->longest, (long long)T + 1);
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)(d->nsamples + 1));
    if (!rows) return sharc_error(SHARC_ERR_NOMEM, "data: out of memory");
    int64_t n = 0, used = T; /* the current row's positions in use (T: none open) */
    for (int64_t k = 0; k < d->nsamples; k++) {
        int64_t len = (int64_t)(d->offsets[k + 1] - d->offsets[k]) - 1;
        if (len < 1) continue;
        if (used + len > T) {
            rows[n++] = k;
            used = 0;
        }
        used += len;
    }
    rows[n] = d->nsamples;
    free(d->rows);
    d->rows = rows;
    d->nrows = n;
    d->pack_T = T;
    return SHARC_OK;
}

bool sharc_dataset_packed(const sharc_dataset *d) { return d->rows != NULL; }

/* Packed row k: each sample's tokens [0, L - 1) as inputs and [1, L) as targets. */
static int64_t packed_item(const sharc_dataset *d, int64_t k, int T, int32_t *inputs, int32_t *targets, int32_t *pos) {
    SHARC_CHECK(k >= 0 && k < d->nrows && T == d->pack_T);
    int64_t t = 0, valid = 0;
    for (int64_t s = d->rows[k]; s < d->rows[k + 1]; s++) {
        const uint32_t *x = (const uint32_t *)(const void *)d->tokens + d->offsets[s];
        const int64_t len = (int64_t)(d->offsets[s + 1] - d->offsets[s]) - 1;
        if (len < 1) continue;
        for (int64_t i = 0; i < len; i++, t++) {
            bool trained = (x[i + 1] & SHARC_SFT_TRAINED) != 0;
            if (inputs) inputs[t] = (int32_t)(x[i] & ~SHARC_SFT_TRAINED);
            if (targets) targets[t] = trained ? (int32_t)(x[i + 1] & ~SHARC_SFT_TRAINED) : -1;
            if (pos) pos[t] = (int32_t)i;
            valid += trained;
        }
    }
    for (int64_t p = 0; t < T; t++, p++) {
        if (inputs) inputs[t] = 0;
        if (targets) targets[t] = -1;
        if (pos) pos[t] = (int32_t)p;
    }
    return valid;
}

void sharc_dataset_positions(const sharc_dataset *d, int64_t k, int T, int32_t *pos) {
    if (d->rows) {
        packed_item(d, k, T, NULL, NULL, pos);
        return;
    }
    for (int t = 0; t < T; t++) pos[t] = t;
}

int64_t sharc_dataset_num_items(const sharc_dataset *d, int T) {
    if (d->rows) return d->nrows;
    if (d->offsets) return d->nsamples;
    return T > 0 && d->ntokens > T ? (d->ntokens - 1) / T : 0;
}

int64_t sharc_dataset_item(const sharc_dataset *d, int64_t k, int T, int32_t *inputs, int32_t *targets) {
    if (!d->offsets) { /* window k: tokens [k T, k T + T + 1) */
        sharc_dataset_read(d, k * T, T, inputs);
        sharc_dataset_read(d, k * T + 1, T, targets);
        return T;
    }
    if (d->rows) return packed_item(d, k, T, inputs, targets, NULL);
    SHARC_CHECK(k >= 0 && k < d->nsamples);
    const uint32_t *t = (const uint32_t *)(const void *)d->tokens + d->offsets[k];
    const int64_t L = (int64_t)(d->offsets[k + 1] - d->offsets[k]);
    int64_t valid = 0;
    for (int64_t i = 0; i < T; i++) {
        inputs[i] = i < L ? (int32_t)(t[i] & ~SHARC_SFT_TRAINED) : 0;
        bool trained = i + 1 < L && (t[i + 1] & SHARC_SFT_TRAINED);
        targets[i] = trained ? (int32_t)(t[i + 1] & ~SHARC_SFT_TRAINED) : -1;
        valid += trained;
    }
    return valid;
}

sharc_status sharc_tokens_write_llmc(const char *path, const int32_t *ids, int64_t n, int vocab,
                                     const uint8_t *sha256) {
    if (n > INT32_MAX)
        return sharc_error(SHARC_ERR_INVALID, "data: '%s': %lld tokens do not fit an llm.c file (at most %d)", path,
                           (long long)n, INT32_MAX);
    const bool u16 = vocab <= 65536;
    int32_t header[256] = {0};
    header[0] = u16 ? LLMC_MAGIC_U16 : LLMC_MAGIC_U32;
    header[1] = u16 ? LLMC_VERSION_U16 : LLMC_VERSION_U32;
    header[2] = (int32_t)n;
    if (sha256) {
        header[16] = SHTK_MARK;
        memcpy(&header[17], sha256, 32);
    }
    sharc_afile f;
    SHARC_TRY(sharc_afile_open(&f, path));
    sharc_status st = sharc_afile_write(&f, header, sizeof header);
    enum { CHUNK = 1 << 16 };
    uint16_t *buf16 = u16 ? malloc(CHUNK * sizeof(uint16_t)) : NULL;
    if (u16 && !buf16 && st == SHARC_OK) st = sharc_error(SHARC_ERR_NOMEM, "data: out of memory");
    for (int64_t i = 0; i < n && st == SHARC_OK; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        if (u16) {
            for (int64_t j = 0; j < m; j++) buf16[j] = (uint16_t)ids[i + j];
            st = sharc_afile_write(&f, buf16, (size_t)m * 2);
        } else {
            st = sharc_afile_write(&f, ids + i, (size_t)m * 4);
        }
    }
    free(buf16);
    if (st == SHARC_OK) return sharc_afile_commit(&f);
    sharc_afile_abort(&f);
    return st;
}

int64_t sharc_dataset_num_tokens(const sharc_dataset *d) { return d->ntokens; }
sharc_token_format sharc_dataset_format(const sharc_dataset *d) { return d->format; }

void sharc_dataset_read(const sharc_dataset *d, int64_t start, int64_t n, int32_t *dst) {
    SHARC_CHECK(start >= 0 && n >= 0 && start <= d->ntokens - n);
    switch (d->token_bytes) {
    case 1: {
        const unsigned char *t = d->tokens + start;
        for (int64_t i = 0; i < n; i++) dst[i] = t[i];
        break;
    }
    case 2: {
        const uint16_t *t = (const uint16_t *)(const void *)d->tokens + start;
        for (int64_t i = 0; i < n; i++) dst[i] = t[i];
        break;
    }
    default: {
        /* < vocab_size <= INT32_MAX, checked at open */
        const uint32_t *t = (const uint32_t *)(const void *)d->tokens + start;
        for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)t[i];
        break;
    }
    }
}

/* ---------------- byte-level tokenizer ---------------- */

int64_t sharc_byte_encode(const char *text, int64_t len, int32_t *tokens) {
    for (int64_t i = 0; i < len; i++) tokens[i] = (unsigned char)text[i];
    return len;
}

/* Tokens outside [0, 256) have no byte and are skipped. */
int64_t sharc_byte_decode(const int32_t *tokens, int64_t n, char *out) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] >= 0 && tokens[i] < 256) out[k++] = (char)(unsigned char)tokens[i];
    return k;
}
