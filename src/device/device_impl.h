/* device_impl.h (internal): what a device backend provides, and the objects
 * the dispatcher (device.c) hands out. A backend moves bytes and runs
 * kernels; the dispatcher checks arguments, keeps the memory accounts and
 * fills the optional slots (note [kernel-table] in sharc/kernels.h).
 * Optional slots are marked; a NULL there gets the fallback named beside it. */
#ifndef SHARC_DEVICE_IMPL_H
#define SHARC_DEVICE_IMPL_H

#include <pthread.h>

#include "sharc/device.h"
#include "sharc/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sharc_device_i {
    const char *name; /* "cpu", "cuda" */
    bool host_memory; /* its memory is host memory (sharc_device_is_host) */
    /* (optional) can this machine run the backend at all (built in, driver,
     * libraries, a device)? An error says what is missing. NULL: yes */
    sharc_status (*probe)(void);
    int (*count)(void); /* how many devices of this kind this machine has */
    /* (optional) per-device state, e.g. a driver context; NULL: none */
    sharc_status (*open)(sharc_device *d, int index);
    /* zero-filled, 64-byte aligned; NULL on failure (the dispatcher reports it) */
    void *(*alloc)(sharc_device *d, size_t bytes);
    void (*free)(sharc_device *d, void *p);
    /* (optional) zero-filled host memory the device copies to and from
     * directly (page-locked); NULL on failure. NULL slots: sharc_alloc and
     * sharc_free (ordinary host memory) */
    void *(*host_alloc)(sharc_device *d, size_t bytes);
    void (*host_free)(sharc_device *d, void *p);
    sharc_status (*memset0)(sharc_device *d, void *p, size_t bytes, sharc_stream *s);
    sharc_status (*copy)(sharc_device *d, void *dst, const void *src, size_t bytes, sharc_copy_kind kind,
                         sharc_stream *s);
    /* (optional) a new queue; NULL: one implicit stream, every stream is the default one */
    sharc_status (*stream_new)(sharc_device *d, sharc_stream *s);
    void (*stream_free)(sharc_stream *s); /* with stream_new */
    /* (optional) the driver's own handle of a stream (a cudaStream_t), for
     * libraries that take one (NCCL, note [nccl]); NULL: none */
    void *(*stream_native)(sharc_stream *s);
    sharc_status (*synchronize)(sharc_stream *s);
    /* (optional) events; NULL: record synchronizes the stream (the host
     * waits there), after which wait has nothing left to wait for */
    sharc_status (*event_new)(sharc_event *ev);
    void (*event_free)(sharc_event *ev);
    sharc_status (*event_record)(sharc_event *ev, sharc_stream *s);
    sharc_status (*event_wait)(sharc_event *ev, sharc_stream *s);
    sharc_status (*event_synchronize)(sharc_event *ev);
    /* (optional, with event_record) whether the record is reached, no wait
     * (cudaEventQuery); NULL: event_synchronize, then done */
    sharc_status (*event_query)(sharc_event *ev, bool *done);
    /* (optional, with event_record) device seconds between two reached
     * records of timed events (ev->timed, set before event_new) */
    sharc_status (*event_elapsed)(sharc_event *start, sharc_event *end, double *seconds);
    /* (optional) queue fn(arg) on stream s, run on the host when the stream
     * reaches it (cudaLaunchHostFunc); fn makes no device call. NULL: the
     * host waits for s, then calls fn at once */
    sharc_status (*host_func)(sharc_stream *s, void (*fn)(void *), void *arg);
    /* (optional) memory bandwidth in bytes/s (sharc_device_peak_bandwidth); NULL: unknown (0) */
    double (*peak_bandwidth)(sharc_device *d, char *how, size_t n);
    /* (optional) dense peak FLOP/s for products of dt operands and how it
     * was found (sharc_device_peak_flops); NULL: unknown (0) */
    double (*peak_flops)(sharc_device *d, sharc_dtype dt, char *how, size_t n);
    const sharc_kernels *kernels; /* optional slots may be NULL: the dispatcher fills them */
} sharc_device_i;

/* One block of device memory, for the accounts. */
typedef struct {
    void *p;
    size_t bytes;
    int cat;   /* sharc_mem_cat; -1: a free entry */
    bool host; /* from sharc_device_host_alloc: counted in the host counters */
} sharc_device_block;

struct sharc_device {
    const sharc_device_i *i;
    int index;
    void *impl;                 /* the backend's, from open */
    sharc_kernels kernels;      /* the backend's table, optional slots filled */
    sharc_stream *stream0;      /* the default stream */
    pthread_mutex_t lock;       /* the accounts below */
    sharc_device_block *blocks; /* open-addressed by pointer: which category a block is counted under */
    size_t nblocks, cap;
    sharc_mem_stats mem; /* for a device that is not host memory */
};

struct sharc_stream {
    sharc_device *dev;
    void *impl;
};

struct sharc_event {
    sharc_device *dev;
    void *impl;
    bool timed;        /* sharc_device_event_new_timed */
    bool recorded;     /* recorded at least once */
    double recorded_s; /* a device without event_record: the host clock at the record */
};

/* The backends of this build (registry.c), NULL-terminated. */
extern const sharc_device_i *const sharc_device_backends[];
extern const sharc_device_i sharc_cpu_device_i;
/* src/device/cuda/cuda.cu, or absent.c in a build without nvcc */
extern const sharc_device_i sharc_cuda_device_i;

/* Fill the optional slots of a backend's table with their fallbacks and
 * check the required ones; an error names the backend and the slot. */
sharc_status sharc_device_kernels_complete(const char *backend, sharc_kernels *k);

#ifdef __cplusplus
}
#endif
#endif
