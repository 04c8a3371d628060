/* comm_impl.h (internal): what a communication backend provides. The
 * dispatcher in comm.c validates arguments and keeps statistics; a backend
 * only moves bytes. Entries with `req`: NULL means blocking, otherwise the
 * backend stores its own handle there (or NULL if the operation already
 * completed); `s` is the stream the caller's data was produced on (NULL for
 * host memory that is ready now). Optional entries are marked and may be
 * NULL; the dispatcher falls back or reports SHARC_ERR_UNSUPPORTED. */
#ifndef SHARC_COMM_IMPL_H
#define SHARC_COMM_IMPL_H

#include "sharc/comm.h"

/* (optional extension) Shared memory between the ranks of a node-local
 * group: the windows of note [shm-collectives] and note [shared-params]. */
typedef struct sharc_comm_shm_i {
    /* a window of `bytes` per rank; SHARC_ERR_UNSUPPORTED when the group spans nodes */
    sharc_status (*alloc)(sharc_comm *c, size_t bytes, sharc_comm_shared **out);
    void (*free)(sharc_comm_shared *s);
    /* this rank's stores visible to all, and every rank has arrived (memory barrier + barrier) */
    sharc_status (*sync)(sharc_comm *c, sharc_comm_shared *s);
    void (*use)(sharc_comm *c, bool on);  /* allow or forbid the shared-memory paths */
    bool (*allowed)(const sharc_comm *c); /* whether they are allowed */
} sharc_comm_shm_i;

typedef struct sharc_comm_vtable {
    const char *name;
    sharc_status (*all_gather)(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                               sharc_stream *s, void **req);
    sharc_status (*reduce_scatter)(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                   sharc_reduce_op op, sharc_stream *s, void **req);
    sharc_status (*all_reduce)(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                               sharc_reduce_op op, sharc_stream *s, void **req);
    sharc_status (*all_to_all)(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                               sharc_stream *s, void **req);
    sharc_status (*broadcast)(sharc_comm *c, void *buf, size_t count, sharc_dtype dt, int root);
    sharc_status (*barrier)(sharc_comm *c);
    sharc_status (*split)(sharc_comm *c, int color, int key, sharc_comm **out);
    sharc_status (*split_node)(sharc_comm *c, sharc_comm **out);
    sharc_status (*wait)(sharc_comm *c, void *req);
    sharc_status (*test)(sharc_comm *c, void *req, bool *done);
    /* (optional) order the request before later work on stream s without a
     * host wait; NULL: the dispatcher waits on the host (sharc_comm_wait_on) */
    sharc_status (*wait_on)(sharc_comm *c, void *req, sharc_stream *s);
    /* (optional) whether the backend orders collectives on streams itself;
     * false: the dispatcher synchronizes a caller's stream before posting */
    bool streams;
    /* (optional) sharc_comm_takes_device; NULL: false (host memory only) */
    sharc_status (*takes_device)(sharc_comm *c, bool *out);
    const sharc_comm_shm_i *shm; /* (optional) NULL: no shared memory */
    void (*abort)(sharc_comm *c, int code);
    void (*free)(sharc_comm *c);
} sharc_comm_vtable;

struct sharc_comm {
    const sharc_comm_vtable *vt;
    int rank, size;
    void *impl;
    sharc_comm_stats stats;
    sharc_comm_request *spare; /* completed requests kept for reuse (a list through next) */
    int flight_group;          /* note [flight] (src/core/flight.c): this group's id and */
    uint64_t flight_seq;       /* the number of collectives started on it */
};

/* A request as the dispatcher sees it: the backend's handle plus what to
 * charge the time to. */
struct sharc_comm_request {
    sharc_comm *comm;
    sharc_coll_kind kind;
    void *impl;
    double t_start;
    uint64_t flight;          /* its flight-recorder entry */
    sharc_comm_request *next; /* on the comm's spare list */
};

sharc_comm *sharc_comm_new(const sharc_comm_vtable *vt, int rank, int size, void *impl);
/* Free the dispatcher's part of a group (the spare requests and the struct);
 * a backend's free calls it last. */
void sharc_comm_release(sharc_comm *c);

/* A backend as the world sees it (registry.c): whether this process was
 * started by its launcher, and how to make the world from it. */
typedef struct sharc_comm_backend_i {
    const char *name;
    bool (*probe)(void);
    sharc_status (*world_init)(int *argc, char ***argv, sharc_comm **world);
    void (*finalize)(void); /* (optional) after the world is freed */
} sharc_comm_backend_i;

/* The backends of this build, in the order the world is chosen from (the
 * first whose probe says yes), NULL-terminated (registry.c). */
extern const sharc_comm_backend_i *const sharc_comm_backends[];
extern const sharc_comm_backend_i sharc_comm_backend_self;
extern const sharc_comm_backend_i sharc_comm_backend_mpi;
extern const sharc_comm_backend_i sharc_comm_backend_nccl;

/* The device told by sharc_comm_world_device (NULL: none), for probes. */
const char *sharc_comm_world_device_get(void);

#endif
