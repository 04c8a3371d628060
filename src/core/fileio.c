/* fileio.c: sharc_write_all / pread_all / afile_*: I/O that names the file
 * in every error and publishes files atomically, and removes what a crashed
 * atomic write left behind. */
#include "sharc/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

sharc_status sharc_write_all(int fd, const void *buf, size_t n, const char *path) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return sharc_error(SHARC_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return SHARC_OK;
}

sharc_status sharc_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return sharc_error(SHARC_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        }
        if (r == 0)
            return sharc_error(SHARC_ERR_FORMAT, "'%s': unexpected end of file at byte %llu", path,
                               (unsigned long long)off);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return SHARC_OK;
}

sharc_status sharc_fsync_dir(const char *path_in_dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path_in_dir);
    const char *dir = dirname(buf);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return sharc_error(SHARC_ERR_IO, "cannot open directory '%s': %s", dir, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0 && errno != EINVAL)
        return sharc_error(SHARC_ERR_IO, "cannot fsync directory '%s': %s", dir, strerror(errno));
    return SHARC_OK;
}

sharc_status sharc_path_status(int err) {
    switch (err) {
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case ENAMETOOLONG:
    case ELOOP:
    case EACCES:
    case EPERM: return SHARC_ERR_INVALID;
    default: return SHARC_ERR_IO;
    }
}

sharc_status sharc_read_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return sharc_error(sharc_path_status(errno), "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return sharc_error(SHARC_ERR_NOMEM, "out of memory reading '%s'", path);
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
        if (n + 1 == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return sharc_error(SHARC_ERR_IO, "cannot read '%s'", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return SHARC_OK;
}

sharc_status sharc_mkdirs(const char *dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return sharc_error(SHARC_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return sharc_error(SHARC_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
    return SHARC_OK;
}

/* Note [stale-tmp]. An atomic write that crashed (kill -9, a power cut)
 * leaves FINAL.tmp.PID, possibly as large as the file. Nothing else creates
 * that name, so the next write of FINAL, or a run that is about to write it
 * (sharc_remove_stale_tmp), removes every FINAL.tmp.<digits> but its own. */
sharc_status sharc_remove_stale_tmp(const char *final_path) {
    char dir[4096];
    const char *slash = strrchr(final_path, '/');
    const char *base = slash ? slash + 1 : final_path;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - final_path) + (slash == final_path), final_path);
    else snprintf(dir, sizeof dir, ".");
    DIR *d = opendir(dir);
    if (!d) return SHARC_OK; /* no directory: nothing was left there */
    const size_t bl = strlen(base);
    char own[32], p[8300];
    snprintf(own, sizeof own, "%d", (int)getpid());
    sharc_status st = SHARC_OK;
    struct dirent *de;
    while (st == SHARC_OK && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp.", 5) != 0) continue;
        const char *digits = n + bl + 5;
        if (!*digits || strspn(digits, "0123456789") != strlen(digits) || !strcmp(digits, own)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, n);
        if (unlink(p) != 0 && errno != ENOENT)
            st = sharc_error(SHARC_ERR_IO, "cannot remove the leftover '%s': %s", p, strerror(errno));
    }
    closedir(d);
    return st;
}

sharc_status sharc_afile_open(sharc_afile *a, const char *final_path) {
    SHARC_TRY(sharc_remove_stale_tmp(final_path)); /* note [stale-tmp] */
    snprintf(a->final_path, sizeof a->final_path, "%s", final_path);
    snprintf(a->tmp_path, sizeof a->tmp_path, "%s.tmp.%d", final_path, (int)getpid());
    a->fd = open(a->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) return sharc_error(SHARC_ERR_IO, "cannot create '%s': %s", a->tmp_path, strerror(errno));
    return SHARC_OK;
}

sharc_status sharc_afile_write(sharc_afile *a, const void *buf, size_t n) {
    return sharc_write_all(a->fd, buf, n, a->tmp_path);
}

sharc_status sharc_afile_commit(sharc_afile *a) {
    if (fsync(a->fd) != 0) {
        sharc_status st = sharc_error(SHARC_ERR_IO, "cannot fsync '%s': %s", a->tmp_path, strerror(errno));
        sharc_afile_abort(a);
        return st;
    }
    if (close(a->fd) != 0) {
        a->fd = -1;
        sharc_status st = sharc_error(SHARC_ERR_IO, "cannot close '%s': %s", a->tmp_path, strerror(errno));
        unlink(a->tmp_path);
        return st;
    }
    a->fd = -1;
    if (rename(a->tmp_path, a->final_path) != 0) {
        sharc_status st =
            sharc_error(SHARC_ERR_IO, "cannot rename '%s' to '%s': %s", a->tmp_path, a->final_path, strerror(errno));
        unlink(a->tmp_path);
        return st;
    }
    return sharc_fsync_dir(a->final_path);
}

void sharc_afile_abort(sharc_afile *a) {
    if (a->fd >= 0) close(a->fd);
    a->fd = -1;
    unlink(a->tmp_path);
}

sharc_status sharc_write_text_atomic(const char *path, const char *text) {
    sharc_afile af;
    SHARC_TRY(sharc_afile_open(&af, path));
    size_t n = strlen(text);
    sharc_status st = sharc_afile_write(&af, text, n);
    if (st == SHARC_OK && (n == 0 || text[n - 1] != '\n')) st = sharc_afile_write(&af, "\n", 1);
    if (st != SHARC_OK) {
        sharc_afile_abort(&af);
        return st;
    }
    return sharc_afile_commit(&af);
}
