/* aio.h: sharc_aio_*, the reads and writes of the optimizer's offload file
 * (note [optim-offload] in adamw.c): io_uring through liburing, or plain
 * pread/pwrite, chosen at run time by SHARC_AIO (uring|pread; unset: uring
 * where the kernel allows it, else pread). Internal to src/optim. */
#ifndef SHARC_OPTIM_AIO_H
#define SHARC_OPTIM_AIO_H

#include "sharc/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sharc_aio sharc_aio;

/* `slots` operations may be in flight at once, at most one per slot. */
sharc_status sharc_aio_init(sharc_aio **out, int fd, int slots);
void sharc_aio_free(sharc_aio *io);
/* "uring" or "pread" */
const char *sharc_aio_backend(const sharc_aio *io);
/* Start reading (write false) or writing n bytes of buf at byte off of the
 * file in `slot` (idle). The pread backend does the whole transfer here. */
void sharc_aio_submit(sharc_aio *io, int slot, bool write, void *buf, size_t n, int64_t off);
/* Wait until slot's transfer is complete: 0, or an errno (ENODATA: a read
 * met the end of the file; EIO: a write made no progress). The slot is idle
 * after it. */
int sharc_aio_wait(sharc_aio *io, int slot);
/* Wait for every slot, errors ignored (before a buffer is freed or reused
 * after a failure). */
void sharc_aio_drain(sharc_aio *io);

#endif
