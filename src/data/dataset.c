/* dataset.c: sharc_dataset_*, token files memory-mapped read-only and
 * validated once at open; the format names (sharc_token_format_*) and the
 * byte-level tokenizer (sharc_byte_*). The formats are specified in
 * sharc/data.h.
 *
 * A dataset owns its file descriptor and its read-only mapping; tokens are
 * never copied into memory we allocate, only converted to int32 on the way
 * out (sharc_dataset_read). The mapping is page cache, not accounted memory;
 * the dataset struct and its path are (SHARC_MEM_OTHER). */
#include "sharc/alloc.h"
#include "sharc/data.h"
#include "sharc/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
#define LLMC_MAGIC_U16 20240520
#define LLMC_VERSION_U16 1
#define LLMC_MAGIC_U32 20240801
#define LLMC_VERSION_U32 7

struct sharc_dataset {
    char *path;                  /* owned copy, for messages */
    int fd;                      /* owned, -1 when closed */
    void *map;                   /* owned read-only mapping of the whole file, or NULL */
    size_t map_bytes;
    const unsigned char *tokens; /* (ntokens x token_bytes) first token, inside map */
    int64_t ntokens;
    int token_bytes;             /* 1 (text), 2 (u16) or 4 (u32) */
    sharc_token_format format;   /* as resolved: never AUTO */
};

const char *sharc_dataset_path(const sharc_dataset *d) { return d->path; }

/* ---------------- format names ---------------- */

static const char *const format_names[] = {"auto", "u16", "u32", "llmc", "text"};
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
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static bool starts_with_llmc_magic(const unsigned char *base, size_t bytes) {
    if (bytes < 4) return false;
    int32_t magic = le32(base);
    return magic == LLMC_MAGIC_U16 || magic == LLMC_MAGIC_U32;
}

/* data.format = auto: llm.c magic first, then the extension. */
static sharc_status detect_format(sharc_token_format *out, const char *path,
                                  const unsigned char *base, size_t bytes) {
    if (starts_with_llmc_magic(base, bytes)) *out = SHARC_TOKENS_LLMC;
    else if (ends_with(path, ".txt") || ends_with(path, ".text")) *out = SHARC_TOKENS_TEXT;
    else if (ends_with(path, ".bin") || ends_with(path, ".u16")) *out = SHARC_TOKENS_U16;
    else if (ends_with(path, ".u32")) *out = SHARC_TOKENS_U32;
    else
        return sharc_error(SHARC_ERR_INVALID,
                           "data: '%s': cannot tell the token format from the extension; set "
                           "data.format to u16, u32, llmc or text",
                           path);
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
                           path, magic, version, LLMC_MAGIC_U16, LLMC_VERSION_U16, LLMC_MAGIC_U32,
                           LLMC_VERSION_U32);
    if (count < 0)
        return sharc_error(SHARC_ERR_FORMAT,
                           "data: '%s': llm.c header says %d tokens; expected a count >= 0", path,
                           count);
    size_t want = LLMC_HEADER_BYTES + (size_t)count * (size_t)d->token_bytes;
    if (want != bytes)
        return sharc_error(SHARC_ERR_FORMAT,
                           "data: '%s': llm.c header says %d tokens (%zu bytes) but the file has "
                           "%zu bytes",
                           path, count, want, bytes);
    d->tokens = base + LLMC_HEADER_BYTES;
    d->ntokens = count;
    return SHARC_OK;
}

/* Resolve the format and point d->tokens at the token array. */
static sharc_status layout(sharc_dataset *d, const unsigned char *base, size_t bytes,
                           sharc_token_format fmt, int vocab_size) {
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
    default:
        return sharc_error(SHARC_ERR_INVALID, "data: '%s': unknown token format %d", path,
                           (int)fmt);
    }
    if (d->ntokens == 0)
        return sharc_error(SHARC_ERR_FORMAT, "data: '%s' holds no tokens; expected at least one",
                           path);
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

static uint32_t token_at(const sharc_dataset *d, int64_t i) {
    switch (d->token_bytes) {
    case 1: return d->tokens[i];
    case 2: return ((const uint16_t *)(const void *)d->tokens)[i];
    default: return ((const uint32_t *)(const void *)d->tokens)[i];
    }
}

/* Every token in [0, vocab_size): the max in one pass; only when it fails, a
 * second pass for the position of the first bad token. */
static sharc_status check_vocab(const sharc_dataset *d, int vocab_size) {
    const uint32_t V = (uint32_t)vocab_size; /* vocab_size >= 1, checked at open */
    uint32_t mx;
    switch (d->token_bytes) {
    case 1: mx = 0; break; /* bytes < 256 <= vocab_size, checked in layout() */
    case 2:
        mx = V > UINT16_MAX ? 0 : max_u16((const uint16_t *)(const void *)d->tokens, d->ntokens);
        break;
    default: mx = max_u32((const uint32_t *)(const void *)d->tokens, d->ntokens); break;
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

sharc_status sharc_dataset_open(sharc_dataset **out, const char *path, sharc_token_format fmt,
                                int vocab_size) {
    *out = NULL;
    if (!path || !*path)
        return sharc_error(SHARC_ERR_INVALID, "data: no token file given; set data.path");
    if (vocab_size < 1)
        return sharc_error(SHARC_ERR_INVALID,
                           "data: '%s': model.vocab_size is %d; expected at least 1", path,
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
        st = sharc_error(sharc_path_status(errno), "data: cannot open '%s': %s; check data.path", path,
                         strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(d->fd, &sb) != 0) {
        st = sharc_error(SHARC_ERR_IO, "data: cannot stat '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = sharc_error(SHARC_ERR_INVALID, "data: '%s' is not a regular file; data.path must name a "
                                       "token file", path);
        goto fail;
    }
    size_t bytes = (size_t)sb.st_size;
    if (bytes == 0) {
        st = sharc_error(SHARC_ERR_FORMAT, "data: '%s' is empty; expected at least one token",
                         path);
        goto fail;
    }
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, d->fd, 0);
    if (map == MAP_FAILED) {
        st = sharc_error(SHARC_ERR_IO, "data: cannot map '%s' (%zu bytes): %s", path, bytes,
                         strerror(errno));
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
    sharc_free(d->path);
    sharc_free(d);
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
