/* sharc/fileio.h: whole-buffer reads and writes that report the path, and
 * atomic publication of a file (temporary name, fsync, rename, fsync of the
 * directory) so a crash never leaves a half-written file under its name. */
#ifndef SHARC_FILEIO_H
#define SHARC_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

sharc_status sharc_write_all(int fd, const void *buf, size_t n, const char *path);
/* The status for an errno from opening a path the user named: SHARC_ERR_INVALID
 * when the path itself is wrong (missing, not a directory, a directory,
 * permission), else SHARC_ERR_IO. */
sharc_status sharc_path_status(int err);
sharc_status sharc_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path);
sharc_status sharc_fsync_dir(const char *path_in_dir);
/* Read a whole (small) file into a NUL-terminated malloc'd buffer. */
sharc_status sharc_read_file(const char *path, char **out, size_t *len);
/* mkdir -p */
sharc_status sharc_mkdirs(const char *dir);

typedef struct {
    int fd;
    char final_path[4096];
    char tmp_path[4200];
} sharc_afile;

/* Opens final_path.tmp.PID, after removing what crashed writes of final_path
 * left (sharc_remove_stale_tmp). */
sharc_status sharc_afile_open(sharc_afile *a, const char *final_path);
sharc_status sharc_afile_write(sharc_afile *a, const void *buf, size_t n);
/* fsync, close, rename to the final name, fsync the directory. */
sharc_status sharc_afile_commit(sharc_afile *a);
/* Close and remove the temporary file (after an error). */
void sharc_afile_abort(sharc_afile *a);
/* Remove every final_path.tmp.<digits> (another process's unfinished atomic
 * write of final_path) but this process's own (note [stale-tmp]). */
sharc_status sharc_remove_stale_tmp(const char *final_path);
/* A whole small text file (config, manifest, pointer), published atomically,
 * ending with a newline (one is added if `text` lacks it). */
sharc_status sharc_write_text_atomic(const char *path, const char *text);

#ifdef __cplusplus
}
#endif
#endif
