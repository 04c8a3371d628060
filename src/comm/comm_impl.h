/* comm_impl.h (internal): what a backend provides. The dispatcher in
 * comm.c validates arguments and keeps statistics; a backend only moves bytes.
 * Entries with `req`: NULL means blocking, otherwise the backend stores its
 * own handle there (or NULL if the operation already completed). Optional entries
 * may be NULL; the dispatcher falls back or reports SHARC_ERR_UNSUPPORTED. */
#ifndef SHARC_COMM_IMPL_H
#define SHARC_COMM_IMPL_H

#include "sharc/comm.h"

typedef struct sharc_comm_vtable {
    const char *name;
    sharc_status (*all_gather)(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                              void **req);
    sharc_status (*reduce_scatter)(sharc_comm *c, const void *send, void *recv, size_t count,
                                   sharc_dtype dt, sharc_reduce_op op, void **req);
    sharc_status (*all_reduce)(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                              sharc_reduce_op op, void **req);
    sharc_status (*broadcast)(sharc_comm *c, void *buf, size_t count, sharc_dtype dt, int root);
    sharc_status (*barrier)(sharc_comm *c);
    sharc_status (*split)(sharc_comm *c, int color, int key, sharc_comm **out);
    sharc_status (*split_node)(sharc_comm *c, sharc_comm **out);
    sharc_status (*wait)(sharc_comm *c, void *req);
    sharc_status (*test)(sharc_comm *c, void *req, bool *done);
    sharc_status (*shared_alloc)(sharc_comm *c, size_t bytes, sharc_comm_shared **out); /* optional */
    void (*shared_free)(sharc_comm_shared *s);
    sharc_status (*shared_sync)(sharc_comm *c, sharc_comm_shared *s);
    void (*use_shared_memory)(sharc_comm *c, bool on); /* optional */
    bool (*shared_memory_allowed)(const sharc_comm *c); /* optional: false if absent */
    void (*abort)(sharc_comm *c, int code);
    void (*free)(sharc_comm *c);
} sharc_comm_vtable;

struct sharc_comm {
    const sharc_comm_vtable *vt;
    int rank, size;
    void *impl;
    sharc_comm_stats stats;
};

/* A request as the dispatcher sees it: the backend's handle plus what to
 * charge the time to. */
struct sharc_comm_request {
    sharc_comm *comm;
    sharc_coll_kind kind;
    void *impl;
    double t_start;
};

sharc_comm *sharc_comm_new(const sharc_comm_vtable *vt, int rank, int size, void *impl);
extern const sharc_comm_vtable sharc_comm_self_vtable;

/* The MPI backend (comm_mpi.c); absent in builds without MPI. */
sharc_status sharc_comm_mpi_world_init(int *argc, char ***argv, sharc_comm **world);
void sharc_comm_mpi_finalize(void);
int sharc_comm_mpi_launched(void);

#endif
