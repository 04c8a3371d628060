/* aio.c: sharc_aio_*, see aio.h. The uring backend keeps one submission per
 * busy slot (its user_data is the slot) and resubmits the rest of a short
 * transfer; the pread backend transfers at submit and remembers the result
 * for the wait, so callers have one code path and the two backends move
 * the same bytes. */
#include "aio.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    bool busy, write;
    char *buf; /* borrowed */
    size_t n, done;
    int64_t off;
    int err; /* the result, for the wait */
} aio_slot;

struct sharc_aio {
    int fd; /* borrowed */
    bool uring;
    struct io_uring ring;
    int nslots;
    aio_slot *s; /* (nslots) */
};

sharc_status sharc_aio_init(sharc_aio **out, int fd, int slots) {
    *out = NULL;
    const char *want = getenv("SHARC_AIO");
    if (want && *want && strcmp(want, "uring") != 0 && strcmp(want, "pread") != 0)
        return sharc_error(SHARC_ERR_INVALID, "SHARC_AIO: '%s': expected uring or pread", want);
    sharc_aio *io = calloc(1, sizeof *io);
    if (!io || !(io->s = calloc((size_t)slots, sizeof *io->s))) {
        free(io);
        return sharc_error(SHARC_ERR_NOMEM, "adamw: out of memory");
    }
    io->fd = fd;
    io->nslots = slots;
    if (!want || !*want || !strcmp(want, "uring")) {
        int r = io_uring_queue_init((unsigned)(2 * slots), &io->ring, 0);
        if (r == 0) io->uring = true;
        else if (want && *want) {
            free(io->s);
            free(io);
            return sharc_error(SHARC_ERR_UNSUPPORTED,
                               "SHARC_AIO=uring: io_uring is not available here (%s); unset SHARC_AIO or set "
                               "SHARC_AIO=pread",
                               strerror(-r));
        }
    }
    *out = io;
    return SHARC_OK;
}

void sharc_aio_free(sharc_aio *io) {
    if (!io) return;
    sharc_aio_drain(io);
    if (io->uring) io_uring_queue_exit(&io->ring);
    free(io->s);
    free(io);
}

const char *sharc_aio_backend(const sharc_aio *io) { return io->uring ? "uring" : "pread"; }

/* the rest of slot k's transfer into the ring: 0 or an errno */
static int queue(sharc_aio *io, int k) {
    aio_slot *t = &io->s[k];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    if (!sqe) {
        io_uring_submit(&io->ring);
        if (!(sqe = io_uring_get_sqe(&io->ring))) return EAGAIN;
    }
    size_t left = t->n - t->done;
    unsigned len = left > (1u << 30) ? 1u << 30 : (unsigned)left;
    if (t->write) io_uring_prep_write(sqe, io->fd, t->buf + t->done, len, (uint64_t)(t->off + (int64_t)t->done));
    else io_uring_prep_read(sqe, io->fd, t->buf + t->done, len, (uint64_t)(t->off + (int64_t)t->done));
    io_uring_sqe_set_data64(sqe, (uint64_t)k);
    /* to a kernel worker: a buffered transfer from cached pages would
     * otherwise run inline in the submit, on this thread, hiding nothing */
    io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
    int r = io_uring_submit(&io->ring);
    return r < 0 ? -r : 0;
}

static void finish(aio_slot *t, int err) {
    t->busy = false;
    t->err = err;
}

void sharc_aio_submit(sharc_aio *io, int slot, bool write, void *buf, size_t n, int64_t off) {
    aio_slot *t = &io->s[slot];
    *t = (aio_slot){.busy = true, .write = write, .buf = buf, .n = n, .off = off};
    if (n == 0) {
        finish(t, 0);
        return;
    }
    if (io->uring) {
        int err = queue(io, slot);
        if (err) finish(t, err);
        return;
    }
    while (t->done < n) {
        ssize_t r = write ? pwrite(io->fd, t->buf + t->done, n - t->done, (off_t)(off + (int64_t)t->done))
                          : pread(io->fd, t->buf + t->done, n - t->done, (off_t)(off + (int64_t)t->done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            finish(t, r < 0 ? errno : write ? EIO : ENODATA);
            return;
        }
        t->done += (size_t)r;
    }
    finish(t, 0);
}

int sharc_aio_wait(sharc_aio *io, int slot) {
    aio_slot *t = &io->s[slot];
    while (t->busy) { /* io->uring: only the ring's slots are busy here */
        struct io_uring_cqe *cqe;
        int r = io_uring_wait_cqe(&io->ring, &cqe);
        if (r == -EINTR) continue;
        if (r < 0) { /* the ring itself failed: every busy slot with it */
            for (int k = 0; k < io->nslots; k++)
                if (io->s[k].busy) finish(&io->s[k], -r);
            break;
        }
        int k = (int)io_uring_cqe_get_data64(cqe), res = cqe->res;
        io_uring_cqe_seen(&io->ring, cqe);
        aio_slot *c = &io->s[k];
        if (res == -EINTR || res == -EAGAIN) res = 0; /* retried below */
        else if (res < 0) {
            finish(c, -res);
            continue;
        } else if (res == 0) {
            finish(c, c->write ? EIO : ENODATA); /* no progress, or the end of the file */
            continue;
        }
        c->done += (size_t)res;
        if (c->done == c->n) finish(c, 0);
        else if ((r = queue(io, k)) != 0) finish(c, r);
    }
    return t->err;
}

void sharc_aio_drain(sharc_aio *io) {
    for (int k = 0; k < io->nslots; k++) sharc_aio_wait(io, k);
}
