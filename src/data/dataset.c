/* dataset.c: sharc_dataset_*, token files memory-mapped read-only and
 * validated at open, the format names and the byte-level tokenizer. */
#include "sharc/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLMC_HEADER_INTS 256
#define LLMC_MAGIC_U16 20240520
#define LLMC_MAGIC_U32 20240801

struct sharc_dataset {
    char *path;
    int fd;
    void *map;
    size_t map_len;
    const unsigned char *tokens; /* first token byte */
    int64_t ntokens;
    int token_bytes;             /* 1 (text), 2 or 4 */
    sharc_token_format format;
};

static const char *const format_names[] = {"auto", "u16", "u32", "llmc", "text"};

int sharc_token_format_parse(const char *s) {
    for (int i = 0; i < 5; i++)
        if (strcasecmp(s, format_names[i]) == 0) return i;
    return -1;
}

const char *sharc_token_format_name(sharc_token_format f) {
    return (f >= 0 && f <= SHARC_TOKENS_TEXT) ? format_names[f] : "?";
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

static int32_t read_le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Work out the format and token layout from the mapped bytes. */
static sharc_status layout(sharc_dataset *d, const unsigned char *base, size_t size, sharc_token_format fmt,
                           int vocab_size) {
    const char *path = d->path;
    bool has_magic = size >= 8 && (read_le32(base) == LLMC_MAGIC_U16 || read_le32(base) == LLMC_MAGIC_U32);
    if (fmt == SHARC_TOKENS_AUTO) {
        if (has_magic) fmt = SHARC_TOKENS_LLMC;
        else if (ends_with(path, ".txt") || ends_with(path, ".text")) fmt = SHARC_TOKENS_TEXT;
        else if (ends_with(path, ".bin") || ends_with(path, ".u16")) fmt = SHARC_TOKENS_U16;
        else if (ends_with(path, ".u32")) fmt = SHARC_TOKENS_U32;
        else
            return sharc_error(SHARC_ERR_INVALID,
                               "data: '%s': cannot tell the token format from the extension; set data.format "
                               "to u16, u32, llmc or text", path);
    }
    d->format = fmt;
    switch (fmt) {
    case SHARC_TOKENS_TEXT:
        if (vocab_size < 256)
            return sharc_error(SHARC_ERR_INVALID,
                               "data: '%s' is byte-level text, which needs model.vocab_size >= 256 (it is %d)",
                               path, vocab_size);
        d->token_bytes = 1;
        d->tokens = base;
        d->ntokens = (int64_t)size;
        break;
    case SHARC_TOKENS_U16:
    case SHARC_TOKENS_U32:
        d->token_bytes = fmt == SHARC_TOKENS_U16 ? 2 : 4;
        if (size % (size_t)d->token_bytes != 0)
            return sharc_error(SHARC_ERR_FORMAT, "data: '%s': %zu bytes is not a whole number of %s tokens",
                               path, size, format_names[fmt]);
        d->tokens = base;
        d->ntokens = (int64_t)(size / (size_t)d->token_bytes);
        break;
    case SHARC_TOKENS_LLMC: {
        if (size < LLMC_HEADER_INTS * 4)
            return sharc_error(SHARC_ERR_FORMAT, "data: '%s': %zu bytes, shorter than the llm.c header (1024 bytes)",
                               path, size);
        int32_t magic = read_le32(base), version = read_le32(base + 4), count = read_le32(base + 8);
        if (magic == LLMC_MAGIC_U16 && version == 1) d->token_bytes = 2;
        else if (magic == LLMC_MAGIC_U32 && version == 7) d->token_bytes = 4;
        else
            return sharc_error(SHARC_ERR_FORMAT,
                               "data: '%s': llm.c header magic %d version %d; expected %d/1 (uint16) or %d/7 (uint32)",
                               path, magic, version, LLMC_MAGIC_U16, LLMC_MAGIC_U32);
        if (count < 0)
            return sharc_error(SHARC_ERR_FORMAT, "data: '%s': llm.c header says %d tokens", path, count);
        size_t want = LLMC_HEADER_INTS * 4 + (size_t)count * (size_t)d->token_bytes;
        if (want != size)
            return sharc_error(SHARC_ERR_FORMAT,
                               "data: '%s': llm.c header says %d tokens (%zu bytes) but the file has %zu bytes",
                               path, count, want, size);
        d->tokens = base + LLMC_HEADER_INTS * 4;
        d->ntokens = count;
        break;
    }
    default: return sharc_error(SHARC_ERR_INVALID, "data: unknown format %d", (int)fmt);
    }
    if (d->ntokens == 0) return sharc_error(SHARC_ERR_FORMAT, "data: '%s' holds no tokens", path);
    return SHARC_OK;
}

/* One pass: the first token outside [0, vocab_size), or -1. */
static int64_t first_bad_token(const sharc_dataset *d, int vocab_size) {
    const int64_t n = d->ntokens;
    const int64_t chunk = 1 << 16;
    for (int64_t lo = 0; lo < n; lo += chunk) {
        int64_t hi = lo + chunk < n ? lo + chunk : n;
        uint32_t mx = 0;
        if (d->token_bytes == 1) {
            for (int64_t i = lo; i < hi; i++) mx = d->tokens[i] > mx ? d->tokens[i] : mx;
        } else if (d->token_bytes == 2) {
            const uint16_t *t = (const uint16_t *)(const void *)d->tokens;
            for (int64_t i = lo; i < hi; i++) mx = t[i] > mx ? t[i] : mx;
        } else {
            const uint32_t *t = (const uint32_t *)(const void *)d->tokens;
            for (int64_t i = lo; i < hi; i++) mx = t[i] > mx ? t[i] : mx;
        }
        if (mx >= (uint32_t)vocab_size) {
            int32_t v;
            for (int64_t i = lo; i < hi; i++) {
                sharc_dataset_read(d, i, 1, &v);
                if ((uint32_t)v >= (uint32_t)vocab_size) return i;
            }
        }
    }
    return -1;
}

sharc_status sharc_dataset_open(sharc_dataset **out, const char *path, sharc_token_format fmt, int vocab_size) {
    *out = NULL;
    sharc_dataset *d = calloc(1, sizeof *d);
    if (!d) return sharc_error(SHARC_ERR_NOMEM, "data: out of memory");
    d->fd = -1;
    d->path = strdup(path);
    sharc_status st;
    d->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (d->fd < 0) {
        st = sharc_error(SHARC_ERR_IO, "data: cannot open '%s': %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(d->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = sharc_error(SHARC_ERR_IO, "data: '%s' is not a regular file", path);
        goto fail;
    }
    size_t size = (size_t)sb.st_size;
    if (size == 0) {
        st = sharc_error(SHARC_ERR_FORMAT, "data: '%s' is empty", path);
        goto fail;
    }
    d->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, d->fd, 0);
    if (d->map == MAP_FAILED) {
        d->map = NULL;
        st = sharc_error(SHARC_ERR_IO, "data: cannot map '%s': %s", path, strerror(errno));
        goto fail;
    }
    d->map_len = size;
    if ((st = layout(d, d->map, size, fmt, vocab_size)) != SHARC_OK) goto fail;
    int64_t bad = first_bad_token(d, vocab_size);
    if (bad >= 0) {
        int32_t v;
        sharc_dataset_read(d, bad, 1, &v);
        st = sharc_error(SHARC_ERR_FORMAT,
                         "data: '%s': token %u at position %lld is outside the vocabulary [0, %d) (model.vocab_size)",
                         path, (unsigned)v, (long long)bad, vocab_size);
        goto fail;
    }
    *out = d;
    return SHARC_OK;
fail:
    sharc_dataset_free(d);
    return st;
}

void sharc_dataset_free(sharc_dataset *d) {
    if (!d) return;
    if (d->map) munmap(d->map, d->map_len);
    if (d->fd >= 0) close(d->fd);
    free(d->path);
    free(d);
}

int64_t sharc_dataset_num_tokens(const sharc_dataset *d) { return d->ntokens; }
sharc_token_format sharc_dataset_format(const sharc_dataset *d) { return d->format; }

void sharc_dataset_read(const sharc_dataset *d, int64_t start, int64_t n, int32_t *dst) {
    if (d->token_bytes == 1) {
        for (int64_t i = 0; i < n; i++) dst[i] = d->tokens[start + i];
    } else if (d->token_bytes == 2) {
        const uint16_t *t = (const uint16_t *)(const void *)d->tokens + start;
        for (int64_t i = 0; i < n; i++) dst[i] = t[i];
    } else {
        const uint32_t *t = (const uint32_t *)(const void *)d->tokens + start;
        for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)t[i];
    }
}

int64_t sharc_byte_encode(const char *text, int64_t len, int32_t *tokens) {
    for (int64_t i = 0; i < len; i++) tokens[i] = (unsigned char)text[i];
    return len;
}

int64_t sharc_byte_decode(const int32_t *tokens, int64_t n, char *out) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] >= 0 && tokens[i] < 256) out[k++] = (char)tokens[i];
    return k;
}
