/* fuzz_safetensors.c: libFuzzer entry point for the safetensors reader.
 * Each input is a whole file (held in a memfd, opened by its /proc path so
 * the real open/fstat/pread path runs); a file the reader accepts is then
 * read back: every tensor's metadata, float tensors converted to fp32 and
 * integer tensors as bytes, plus reads just outside each tensor, which must
 * be refused. Built and run by `make fuzz` (FUZZ_SECONDS) and
 * tests/cli/fuzz_safetensors.sh, with AddressSanitizer and UBSan. */
#include "sharc/dtype.h"
#include "sharc/safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz.safetensors", 0);
    if (fd < 0) abort();
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    sharc_st_file *f = NULL;
    if (sharc_st_open(&f, path) != SHARC_OK) {
        if (f) abort(); /* a failed open returns no file */
        return 0;
    }
    (void)sharc_st_metadata(f, "format");
    uint64_t covered = 0;
    for (int i = 0; i < sharc_st_count(f); i++) {
        const sharc_st_tensor *t = sharc_st_tensor_at(f, i);
        /* invariants the reader promises */
        if (t->end < t->begin || t->numel < 0 || t->ndim < 0 || t->ndim > SHARC_ST_MAX_DIMS) abort();
        if ((uint64_t)t->numel * sharc_dtype_size(t->dtype) != t->end - t->begin) abort();
        if (sharc_st_find(f, t->name) == NULL) abort();
        covered += t->end - t->begin;
        if (t->numel <= 4096) {
            float *buf = malloc((size_t)(t->end - t->begin) + sizeof(float) * (size_t)(t->numel + 1));
            if (t->dtype == SHARC_DT_F32 || t->dtype == SHARC_DT_BF16 || t->dtype == SHARC_DT_F16) {
                if (sharc_st_read_f32(f, t, 0, t->numel, buf) != SHARC_OK) abort();
                if (sharc_st_read_f32(f, t, 1, t->numel, buf) == SHARC_OK) abort(); /* past the end */
            } else if (sharc_st_read_f32(f, t, 0, t->numel, buf) == SHARC_OK) {
                abort(); /* not a float type */
            }
            if (sharc_st_read_bytes(f, t, 0, t->end - t->begin, buf) != SHARC_OK && t->end > t->begin) abort();
            if (sharc_st_read_bytes(f, t, 1, t->end - t->begin, buf) == SHARC_OK) abort();
            free(buf);
        }
    }
    if (8 + covered > size) abort(); /* the data fit inside the file */
    sharc_st_close(f);
    return 0;
}
