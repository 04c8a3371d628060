/* sharc/safetensors.h: read and write safetensors files.
 *
 * The reader validates everything before trusting it (FORMATS.md): header
 * length within bounds and the file, well-formed UTF-8 JSON, known dtypes,
 * numel x dtype size equal to each byte range (overflow-checked), ranges that
 * tile the data buffer exactly. Tensor data is read on demand with pread, so
 * a rank reads only the byte ranges it needs.
 * The writer pads the header with spaces to a multiple of 8, lays tensors
 * out in order (each starting on an 8-byte boundary when sizes allow), writes
 * "__metadata__": {"format": "pt", ...}, and publishes the file atomically
 * (temporary name, fsync, rename). */
#ifndef SHARC_SAFETENSORS_H
#define SHARC_SAFETENSORS_H

#include <stdint.h>

#include "sharc/dtype.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_ST_MAX_DIMS   8
#define SHARC_ST_HEADER_MAX (100u << 20)

typedef struct {
    char *name;
    sharc_dtype dtype;
    int ndim;
    int64_t shape[SHARC_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte range relative to the start of the data buffer */
} sharc_st_tensor;

typedef struct sharc_st_file sharc_st_file;

sharc_status sharc_st_open(sharc_st_file **out, const char *path);
void sharc_st_close(sharc_st_file *f);
const char *sharc_st_path(const sharc_st_file *f);
int sharc_st_count(const sharc_st_file *f);
const sharc_st_tensor *sharc_st_tensor_at(const sharc_st_file *f, int i);
const sharc_st_tensor *sharc_st_find(const sharc_st_file *f, const char *name);
/* A __metadata__ value, or NULL. */
const char *sharc_st_metadata(const sharc_st_file *f, const char *key);
/* Read nbytes at byte offset `off` within tensor t's range. */
sharc_status sharc_st_read_bytes(const sharc_st_file *f, const sharc_st_tensor *t, uint64_t off, uint64_t nbytes,
                                 void *dst);
/* Read elements [first, first + n) of a float tensor (F32, BF16 or F16) as fp32. */
sharc_status sharc_st_read_f32(const sharc_st_file *f, const sharc_st_tensor *t, int64_t first, int64_t n, float *dst);
/* Find `name`, check its element count, read it all as fp32 (or I32 as int32). */
sharc_status sharc_st_load_f32(const sharc_st_file *f, const char *name, float *dst, int64_t numel);
sharc_status sharc_st_load_i32(const sharc_st_file *f, const char *name, int32_t *dst, int64_t numel);

/* ---- writing ---- */
typedef struct {
    const char *name;
    sharc_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data; /* numel x dtype size bytes */
} sharc_st_entry;

/* Write `n` tensors and metadata pairs (keys[i], values[i]); "format": "pt" is
 * always included. The file appears under `path` only when complete. */
sharc_status sharc_st_write(const char *path, const sharc_st_entry *entries, int n, const char *const *meta_keys,
                            const char *const *meta_values, int nmeta);

/* Streaming: the header is written from the entries' names, dtypes and
 * shapes (data ignored); then each tensor's bytes are appended in the
 * order sharc_st_stream_order gives (larger element types first, otherwise
 * the caller's order), so no tensor needs to be in memory with another. */
typedef struct sharc_st_stream sharc_st_stream;
sharc_status sharc_st_stream_open(sharc_st_stream **out, const char *path, const sharc_st_entry *entries, int n,
                                  const char *const *meta_keys, const char *const *meta_values, int nmeta);
/* Index (into entries) of the k-th tensor to append. */
int sharc_st_stream_order(const sharc_st_stream *s, int k);
/* Append bytes of the current tensor (may be called several times per tensor). */
sharc_status sharc_st_stream_append(sharc_st_stream *s, const void *data, size_t bytes);
/* Check every byte arrived, fsync and publish. */
sharc_status sharc_st_stream_close(sharc_st_stream *s);
/* Remove the temporary file (after an error). */
void sharc_st_stream_abort(sharc_st_stream *s);

#ifdef __cplusplus
}
#endif
#endif
