/* sharc/status.h: the status every fallible call returns, the per-thread
 * error message that goes with it, and the check macro for broken invariants.
 *
 * Convention (docs/ARCHITECTURE.md, "Errors"): a function that can fail returns a
 * sharc_status and records a one-line message where it fails:
 *     return sharc_error(SHARC_ERR_IO, "ckpt: cannot open '%s': %s", path, strerror(errno));
 * The caller either handles it or passes the status up unchanged; only the
 * command-line front end prints the message and decides to exit. Library code
 * never calls exit(). */
#ifndef SHARC_STATUS_H
#define SHARC_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SHARC_OK = 0,
    SHARC_ERR_INVALID,     /* a bad argument, config key or value: fix the input */
    SHARC_ERR_IO,          /* a file could not be opened, read or written */
    SHARC_ERR_FORMAT,      /* a file's content is malformed or does not match the model */
    SHARC_ERR_NOMEM,       /* an allocation failed */
    SHARC_ERR_COMM,        /* a collective failed or ranks disagree */
    SHARC_ERR_UNSUPPORTED, /* accepted but not implemented on this build or machine */
    SHARC_ERR_INTERNAL     /* a bug in sharc: please report it */
} sharc_status;

/* Record a formatted message for the calling thread and return `code`. */
sharc_status sharc_error(sharc_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
sharc_status sharc_verror(sharc_status code, const char *fmt, va_list ap);

/* The message recorded by the last sharc_error on this thread ("" if none). */
const char *sharc_last_error(void);

/* User input echoed in a message: `s` itself when it is short, else its
 * first 48 characters, "..." and its length, written to `buf` (of
 * SHARC_CLIP_BUF bytes), so a huge value never pushes "what was expected"
 * out of the message. */
#define SHARC_CLIP_BUF 96
const char *sharc_clip(char *buf, const char *s);

/* A short name for a status ("invalid input", "I/O error", ...). */
const char *sharc_status_str(sharc_status code);

/* Abort the whole job with rank and file:line when an invariant is broken. */
void sharc_fatal(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));

/* Called by sharc_fatal after its message, before abort(): the command
 * installs one that ends the whole job (MPI_Abort, note [job-end] in
 * src/cli/main.c) so that no other rank waits for this one. */
void sharc_set_fatal_hook(void (*hook)(void));

#define SHARC_CHECK(cond)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) sharc_fatal(__FILE__, __LINE__, "check failed: %s", #cond);                                       \
    } while (0)

/* Propagate a failure: evaluate `expr`, return its status if it is not OK. */
#define SHARC_TRY(expr)                                                                                                \
    do {                                                                                                               \
        sharc_status sharc_try_st_ = (expr);                                                                           \
        if (sharc_try_st_ != SHARC_OK) return sharc_try_st_;                                                           \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
