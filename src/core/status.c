/* status.c: owns the per-thread error message, log prefixes and the fatal path. */
#include "sharc/status.h"
#include "sharc/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char error_message[4096];
static _Atomic int log_rank = 0; /* read by the watchdog thread */
static _Atomic int log_world = 1;

sharc_status sharc_verror(sharc_status code, const char *fmt, va_list ap) {
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    return code;
}

sharc_status sharc_error(sharc_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sharc_verror(code, fmt, ap);
    va_end(ap);
    return code;
}

const char *sharc_last_error(void) { return error_message; }

const char *sharc_clip(char *buf, const char *s) {
    size_t n = strlen(s);
    if (n < SHARC_CLIP_BUF - 32) return s;
    snprintf(buf, SHARC_CLIP_BUF, "%.48s... (%zu characters)", s, n);
    return buf;
}

const char *sharc_status_str(sharc_status code) {
    switch (code) {
    case SHARC_OK: return "ok";
    case SHARC_ERR_INVALID: return "invalid input";
    case SHARC_ERR_IO: return "I/O error";
    case SHARC_ERR_FORMAT: return "malformed file";
    case SHARC_ERR_NOMEM: return "out of memory";
    case SHARC_ERR_COMM: return "communication error";
    case SHARC_ERR_UNSUPPORTED: return "not supported";
    case SHARC_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

void sharc_log_set_rank(int rank, int world_size) {
    log_rank = rank;
    log_world = world_size;
}

int sharc_log_rank(void) { return log_rank; }
int sharc_log_world_size(void) { return log_world; }

void sharc_log(sharc_log_level level, const char *fmt, ...) {
    char line[4608];
    int n = 0;
    if (log_world > 1) n = snprintf(line, sizeof line, "[rank %d] ", log_rank);
    if (level == SHARC_LOG_WARN) n += snprintf(line + n, sizeof line - (size_t)n, "warning: ");
    if (level == SHARC_LOG_ERROR) n += snprintf(line + n, sizeof line - (size_t)n, "error: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one write per line so lines from many ranks do not interleave mid-line */
    fprintf(stderr, "%s\n", line);
}

static void (*fatal_hook)(void);

void sharc_set_fatal_hook(void (*hook)(void)) { fatal_hook = hook; }

void sharc_fatal(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[rank %d] sharc: fatal: %s (%s:%d)\n", log_rank, msg, file, line);
    fflush(stderr);
    if (fatal_hook) fatal_hook(); /* e.g. MPI_Abort: the other ranks must not wait for this one */
    abort();
}
