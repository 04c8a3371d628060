/* safetensors.c: sharc_st_*, the validating safetensors reader and the
 * atomic writer. JSON is parsed and produced by json-c. */
#include "sharc/safetensors.h"
#include "sharc/fileio.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct sharc_st_file {
    char *path;
    int fd;
    uint64_t data_start; /* 8 + header length */
    uint64_t data_len;
    int n;
    sharc_st_tensor *t; /* sorted by begin */
    int nmeta;
    char **meta_keys, **meta_values;
};

static sharc_status bad(const char *path, const char *what) {
    return sharc_error(SHARC_ERR_FORMAT, "safetensors '%s': %s", path, what);
}

static int cmp_begin(const void *a, const void *b) {
    const sharc_st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

/* dtypes newer safetensors files may carry that sharc does not read
 * (FORMATS.md): named "unsupported", not "unknown". */
static bool st_newer_dtype(const char *s) {
    static const char *const newer[] = {"F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"};
    for (size_t i = 0; i < sizeof newer / sizeof newer[0]; i++)
        if (strcmp(s, newer[i]) == 0) return true;
    return false;
}

/* Parse and check one tensor entry. */
static sharc_status parse_entry(sharc_st_file *f, const char *name, json_object *v, sharc_st_tensor *t) {
    char msg[512];
    json_object *dt, *shape, *offs;
    if (!json_object_is_type(v, json_type_object) || !json_object_object_get_ex(v, "dtype", &dt) ||
        !json_object_object_get_ex(v, "shape", &shape) || !json_object_object_get_ex(v, "data_offsets", &offs)) {
        snprintf(msg, sizeof msg, "tensor '%.200s' needs dtype, shape and data_offsets", name);
        return bad(f->path, msg);
    }
    if (json_object_object_length(v) != 3) {
        snprintf(msg, sizeof msg, "tensor '%.200s' has keys other than dtype, shape, data_offsets", name);
        return bad(f->path, msg);
    }
    int d = json_object_is_type(dt, json_type_string) ? sharc_dtype_from_st_name(json_object_get_string(dt)) : -1;
    if (d < 0 && json_object_is_type(dt, json_type_string) && st_newer_dtype(json_object_get_string(dt))) {
        snprintf(msg, sizeof msg, "tensor '%.200s' has unsupported dtype %.40s", name, json_object_get_string(dt));
        return bad(f->path, msg);
    }
    if (d < 0) {
        snprintf(msg, sizeof msg, "tensor '%.200s' has unknown dtype %.40s", name, json_object_to_json_string(dt));
        return bad(f->path, msg);
    }
    t->dtype = (sharc_dtype)d;
    if (!json_object_is_type(shape, json_type_array) || json_object_array_length(shape) > SHARC_ST_MAX_DIMS) {
        snprintf(msg, sizeof msg, "tensor '%.200s': shape must be an array of at most %d integers", name,
                 SHARC_ST_MAX_DIMS);
        return bad(f->path, msg);
    }
    t->ndim = (int)json_object_array_length(shape);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_object *s = json_object_array_get_idx(shape, (size_t)i);
        if (!json_object_is_type(s, json_type_int) || json_object_get_int64(s) < 0) {
            snprintf(msg, sizeof msg, "tensor '%.200s': shape entries must be non-negative integers", name);
            return bad(f->path, msg);
        }
        uint64_t dim = (uint64_t)json_object_get_int64(s);
        t->shape[i] = (int64_t)dim;
        if (dim != 0 && numel > (UINT64_MAX >> 1) / dim) {
            snprintf(msg, sizeof msg, "tensor '%.200s': shape overflows", name);
            return bad(f->path, msg);
        }
        numel *= dim;
    }
    t->numel = (int64_t)numel;
    if (!json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2) {
        snprintf(msg, sizeof msg, "tensor '%.200s': data_offsets must be [begin, end]", name);
        return bad(f->path, msg);
    }
    json_object *b = json_object_array_get_idx(offs, 0), *e = json_object_array_get_idx(offs, 1);
    if (!json_object_is_type(b, json_type_int) || !json_object_is_type(e, json_type_int) ||
        json_object_get_int64(b) < 0 || json_object_get_int64(e) < json_object_get_int64(b)) {
        snprintf(msg, sizeof msg, "tensor '%.200s': data_offsets must be integers with 0 <= begin <= end", name);
        return bad(f->path, msg);
    }
    t->begin = (uint64_t)json_object_get_int64(b);
    t->end = (uint64_t)json_object_get_int64(e);
    uint64_t esize = sharc_dtype_size(t->dtype);
    if (numel > UINT64_MAX / esize || numel * esize != t->end - t->begin) {
        snprintf(msg, sizeof msg, "tensor '%.200s': %llu elements of %s need %llu bytes, data_offsets give %llu", name,
                 (unsigned long long)numel, sharc_dtype_st_name(t->dtype), (unsigned long long)(numel * esize),
                 (unsigned long long)(t->end - t->begin));
        return bad(f->path, msg);
    }
    t->name = strdup(name);
    return t->name ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "out of memory");
}

static sharc_status parse_header(sharc_st_file *f, const char *json, size_t len) {
    struct json_tokener *tok = json_tokener_new_ex(64);
    if (!tok) return sharc_error(SHARC_ERR_NOMEM, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, json, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    char msg[512];
    if (!root || jerr != json_tokener_success) {
        json_object_put(root);
        snprintf(msg, sizeof msg, "header is not valid JSON (%s)",
                 jerr == json_tokener_continue ? "it ends before the JSON value does: a truncated header?"
                                               : json_tokener_error_desc(jerr));
        return bad(f->path, msg);
    }
    for (size_t i = used; i < len; i++)
        if (json[i] != ' ' && json[i] != '\n' && json[i] != '\t' && json[i] != '\r') {
            json_object_put(root);
            return bad(f->path, "header has bytes after the JSON object");
        }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return bad(f->path, "header is not a JSON object");
    }
    int total = json_object_object_length(root);
    f->t = calloc((size_t)(total > 0 ? total : 1), sizeof(sharc_st_tensor));
    if (!f->t) {
        json_object_put(root);
        return sharc_error(SHARC_ERR_NOMEM, "out of memory");
    }
    sharc_status st = SHARC_OK;
    json_object_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_object_is_type(val, json_type_object)) {
                st = bad(f->path, "__metadata__ must be an object of strings");
                break;
            }
            if (f->meta_keys) {
                st = bad(f->path, "__metadata__ appears twice");
                break;
            }
            int nm = json_object_object_length(val);
            f->meta_keys = calloc((size_t)nm + 1, sizeof(char *));
            f->meta_values = calloc((size_t)nm + 1, sizeof(char *));
            if (!f->meta_keys || !f->meta_values) {
                st = sharc_error(SHARC_ERR_NOMEM, "out of memory");
                break;
            }
            json_object_object_foreach(val, mk, mv) {
                if (!json_object_is_type(mv, json_type_string)) {
                    snprintf(msg, sizeof msg, "__metadata__ value of '%.200s' must be a string", mk);
                    st = bad(f->path, msg);
                    break;
                }
                f->meta_keys[f->nmeta] = strdup(mk);
                f->meta_values[f->nmeta] = strdup(json_object_get_string(mv));
                if (!f->meta_keys[f->nmeta++] || !f->meta_values[f->nmeta - 1]) {
                    st = sharc_error(SHARC_ERR_NOMEM, "out of memory");
                    break;
                }
            }
            if (st != SHARC_OK) break;
            continue;
        }
        st = parse_entry(f, key, val, &f->t[f->n]);
        if (st != SHARC_OK) break;
        f->n++;
    }
    json_object_put(root);
    if (st != SHARC_OK) return st;
    /* ranges must tile [0, data_len) exactly */
    qsort(f->t, (size_t)f->n, sizeof f->t[0], cmp_begin);
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->t[i].begin != pos) {
            snprintf(msg, sizeof msg,
                     "tensor '%.200s' starts at byte %llu, expected %llu (ranges must tile the data without gaps or "
                     "overlap)",
                     f->t[i].name, (unsigned long long)f->t[i].begin, (unsigned long long)pos);
            return bad(f->path, msg);
        }
        pos = f->t[i].end;
    }
    if (pos != f->data_len) {
        snprintf(msg, sizeof msg, "tensors cover %llu data bytes but the file has %llu", (unsigned long long)pos,
                 (unsigned long long)f->data_len);
        return bad(f->path, msg);
    }
    return SHARC_OK;
}

sharc_status sharc_st_open(sharc_st_file **out, const char *path) {
    *out = NULL;
    sharc_st_file *f = calloc(1, sizeof *f);
    if (!f) return sharc_error(SHARC_ERR_NOMEM, "out of memory");
    f->fd = -1;
    f->path = strdup(path);
    sharc_status st = SHARC_OK;
    char *header = NULL;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        st = sharc_error(sharc_path_status(errno), "cannot open '%s': %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = sharc_error(SHARC_ERR_INVALID, "'%s' is not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        st = bad(path, "file is shorter than the 8-byte header length");
        goto fail;
    }
    unsigned char lenbuf[8];
    if ((st = sharc_pread_all(f->fd, lenbuf, 8, 0, path)) != SHARC_OK) goto fail;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenbuf[i];
    if (hlen < 2 || hlen > SHARC_ST_HEADER_MAX || hlen > size - 8) {
        char msg[200];
        snprintf(msg, sizeof msg, "header length %llu is below 2 or exceeds the file (%llu bytes) or the %u-byte limit",
                 (unsigned long long)hlen, (unsigned long long)size, SHARC_ST_HEADER_MAX);
        st = bad(path, msg);
        goto fail;
    }
    header = malloc(hlen + 1);
    if (!header) {
        st = sharc_error(SHARC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = sharc_pread_all(f->fd, header, hlen, 8, path)) != SHARC_OK) goto fail;
    header[hlen] = 0;
    if (hlen == 0 || memchr(header, 0, hlen)) {
        st = bad(path, "header is empty or contains a NUL byte");
        goto fail;
    }
    f->data_start = 8 + hlen;
    f->data_len = size - f->data_start;
    if ((st = parse_header(f, header, hlen)) != SHARC_OK) goto fail;
    free(header);
    *out = f;
    return SHARC_OK;
fail:
    free(header);
    sharc_st_close(f);
    return st;
}

void sharc_st_close(sharc_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    free(f->path);
    free(f);
}

const char *sharc_st_path(const sharc_st_file *f) { return f->path; }
int sharc_st_count(const sharc_st_file *f) { return f->n; }
const sharc_st_tensor *sharc_st_tensor_at(const sharc_st_file *f, int i) {
    return (i >= 0 && i < f->n) ? &f->t[i] : NULL;
}

const sharc_st_tensor *sharc_st_find(const sharc_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

const char *sharc_st_metadata(const sharc_st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

sharc_status sharc_st_read_bytes(const sharc_st_file *f, const sharc_st_tensor *t, uint64_t off, uint64_t nbytes,
                                 void *dst) {
    if (off > t->end - t->begin || nbytes > t->end - t->begin - off)
        return sharc_error(SHARC_ERR_INVALID, "safetensors '%s': read of bytes [%llu, +%llu) outside tensor '%s'",
                           f->path, (unsigned long long)off, (unsigned long long)nbytes, t->name);
    return sharc_pread_all(f->fd, dst, nbytes, f->data_start + t->begin + off, f->path);
}

sharc_status sharc_st_read_f32(const sharc_st_file *f, const sharc_st_tensor *t, int64_t first, int64_t n, float *dst) {
    if (t->dtype != SHARC_DT_F32 && t->dtype != SHARC_DT_BF16 && t->dtype != SHARC_DT_F16)
        return sharc_error(SHARC_ERR_FORMAT, "safetensors '%s': tensor '%s' is %s, expected a float type", f->path,
                           t->name, sharc_dtype_st_name(t->dtype));
    if (first < 0 || n < 0 || first + n > t->numel)
        return sharc_error(SHARC_ERR_INVALID, "safetensors '%s': elements [%lld, %lld) outside tensor '%s' (%lld)",
                           f->path, (long long)first, (long long)(first + n), t->name, (long long)t->numel);
    size_t es = sharc_dtype_size(t->dtype);
    if (t->dtype == SHARC_DT_F32) return sharc_st_read_bytes(f, t, (uint64_t)first * es, (uint64_t)n * es, dst);
    /* 16-bit: read into the second half of dst, then widen front to back */
    uint16_t *tmp = (uint16_t *)(dst + n) - n;
    SHARC_TRY(sharc_st_read_bytes(f, t, (uint64_t)first * es, (uint64_t)n * es, tmp));
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = tmp[i];
        dst[i] = t->dtype == SHARC_DT_BF16 ? sharc_bf16_to_f32(h) : sharc_f16_to_f32(h);
    }
    return SHARC_OK;
}

sharc_status sharc_st_load_f32(const sharc_st_file *f, const char *name, float *dst, int64_t numel) {
    const sharc_st_tensor *t = sharc_st_find(f, name);
    if (!t) return sharc_error(SHARC_ERR_FORMAT, "safetensors '%s': no tensor '%s'", f->path, name);
    if (t->numel != numel)
        return sharc_error(SHARC_ERR_FORMAT, "safetensors '%s': tensor '%s' has %lld elements, expected %lld", f->path,
                           name, (long long)t->numel, (long long)numel);
    return sharc_st_read_f32(f, t, 0, numel, dst);
}

sharc_status sharc_st_load_i32(const sharc_st_file *f, const char *name, int32_t *dst, int64_t numel) {
    const sharc_st_tensor *t = sharc_st_find(f, name);
    if (!t) return sharc_error(SHARC_ERR_FORMAT, "safetensors '%s': no tensor '%s'", f->path, name);
    if (t->dtype != SHARC_DT_I32 || t->numel != numel)
        return sharc_error(SHARC_ERR_FORMAT, "safetensors '%s': tensor '%s' is %s x %lld, expected I32 x %lld", f->path,
                           name, sharc_dtype_st_name(t->dtype), (long long)t->numel, (long long)numel);
    return sharc_st_read_bytes(f, t, 0, (uint64_t)numel * 4, dst);
}

/* ------------------------------------------------------------------ write */

struct sharc_st_stream {
    sharc_afile af;
    int n;
    int *order; /* tensors in file order */
    uint64_t total, written;
};

static int cmp_entry_size(const void *a, const void *b, void *arg) {
    const sharc_st_entry *base = arg;
    int x = *(const int *)a, y = *(const int *)b;
    size_t sx = sharc_dtype_size(base[x].dtype), sy = sharc_dtype_size(base[y].dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return x < y ? -1 : 1; /* stable: keep the caller's order */
}

sharc_status sharc_st_stream_open(sharc_st_stream **out, const char *path, const sharc_st_entry *entries, int n,
                                  const char *const *meta_keys, const char *const *meta_values, int nmeta) {
    *out = NULL;
    sharc_st_stream *s = calloc(1, sizeof *s);
    int *order = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!s || !order) {
        free(s);
        free(order);
        return sharc_error(SHARC_ERR_NOMEM, "out of memory");
    }
    /* larger element types first: every tensor starts at a multiple of its element size */
    for (int i = 0; i < n; i++) order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, cmp_entry_size, (void *)entries);
    s->order = order;
    s->n = n;

    json_object *root = json_object_new_object();
    json_object *meta = json_object_new_object();
    json_object_object_add(meta, "format", json_object_new_string("pt"));
    for (int i = 0; i < nmeta; i++) json_object_object_add(meta, meta_keys[i], json_object_new_string(meta_values[i]));
    json_object_object_add(root, "__metadata__", meta);
    uint64_t pos = 0;
    for (int k = 0; k < n; k++) {
        const sharc_st_entry *e = &entries[order[k]];
        uint64_t numel = 1;
        json_object *shape = json_object_new_array();
        for (int d = 0; d < e->ndim; d++) {
            numel *= (uint64_t)e->shape[d];
            json_object_array_add(shape, json_object_new_int64(e->shape[d]));
        }
        uint64_t bytes = numel * sharc_dtype_size(e->dtype);
        json_object *t = json_object_new_object();
        json_object_object_add(t, "dtype", json_object_new_string(sharc_dtype_st_name(e->dtype)));
        json_object_object_add(t, "shape", shape);
        json_object *offs = json_object_new_array();
        json_object_array_add(offs, json_object_new_int64((int64_t)pos));
        json_object_array_add(offs, json_object_new_int64((int64_t)(pos + bytes)));
        json_object_object_add(t, "data_offsets", offs);
        json_object_object_add(root, e->name, t);
        pos += bytes;
    }
    s->total = pos;
    const char *js = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
    size_t jlen = strlen(js), padded = (jlen + 7) / 8 * 8;
    char *header = malloc(8 + padded);
    sharc_status st = SHARC_OK;
    if (!header) {
        st = sharc_error(SHARC_ERR_NOMEM, "out of memory");
    } else {
        for (int i = 0; i < 8; i++) header[i] = (char)((padded >> (8 * i)) & 0xff);
        memcpy(header + 8, js, jlen);
        memset(header + 8 + jlen, ' ', padded - jlen);
        st = sharc_afile_open(&s->af, path);
        if (st == SHARC_OK) {
            st = sharc_afile_write(&s->af, header, 8 + padded);
            if (st != SHARC_OK) sharc_afile_abort(&s->af);
        }
    }
    free(header);
    json_object_put(root);
    if (st != SHARC_OK) {
        free(s->order);
        free(s);
        return st;
    }
    *out = s;
    return SHARC_OK;
}

int sharc_st_stream_order(const sharc_st_stream *s, int k) { return s->order[k]; }

sharc_status sharc_st_stream_append(sharc_st_stream *s, const void *data, size_t bytes) {
    if (s->written + bytes > s->total)
        return sharc_error(SHARC_ERR_INTERNAL, "safetensors '%s': more data than the header announces",
                           s->af.final_path);
    SHARC_TRY(sharc_afile_write(&s->af, data, bytes));
    s->written += bytes;
    return SHARC_OK;
}

sharc_status sharc_st_stream_close(sharc_st_stream *s) {
    sharc_status st;
    if (s->written != s->total) {
        st = sharc_error(SHARC_ERR_INTERNAL, "safetensors '%s': %llu of %llu data bytes written", s->af.final_path,
                         (unsigned long long)s->written, (unsigned long long)s->total);
        sharc_afile_abort(&s->af);
    } else {
        st = sharc_afile_commit(&s->af);
    }
    free(s->order);
    free(s);
    return st;
}

void sharc_st_stream_abort(sharc_st_stream *s) {
    if (!s) return;
    sharc_afile_abort(&s->af);
    free(s->order);
    free(s);
}

sharc_status sharc_st_write(const char *path, const sharc_st_entry *entries, int n, const char *const *meta_keys,
                            const char *const *meta_values, int nmeta) {
    sharc_st_stream *s;
    SHARC_TRY(sharc_st_stream_open(&s, path, entries, n, meta_keys, meta_values, nmeta));
    for (int k = 0; k < n; k++) {
        const sharc_st_entry *e = &entries[sharc_st_stream_order(s, k)];
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) numel *= (uint64_t)e->shape[d];
        sharc_status st = sharc_st_stream_append(s, e->data, numel * sharc_dtype_size(e->dtype));
        if (st != SHARC_OK) {
            sharc_st_stream_abort(s);
            return st;
        }
    }
    return sharc_st_stream_close(s);
}
