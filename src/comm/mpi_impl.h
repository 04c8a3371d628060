/* mpi_impl.h (internal): what the two files of the MPI backend share: a
 * group's state, the error helper, and the shared-memory extension
 * (comm_mpi_shm.c) that comm_mpi.c's collectives use on one node. Only
 * comm_mpi.c and comm_mpi_shm.c include it, and so mpi.h. */
#ifndef SHARC_COMM_MPI_IMPL_H
#define SHARC_COMM_MPI_IMPL_H

#include <mpi.h>

#include "comm_impl.h"
#include "sharc/kernels.h"

typedef struct mpi_req mpi_req;

typedef struct {
    MPI_Comm comm;
    bool owns;     /* MPI_Comm_free at the end */
    void *scratch; /* all-to-all receive buffer, grown on demand (SHARC_MEM_COMM) */
    size_t scratch_bytes;
    const void **slice; /* (size) the received slices of a local sum (note [rank-order]) */
    mpi_req *spare;     /* completed requests kept for reuse */
    bool native_rs;
    int node_local;           /* -1 unknown, 0 no, 1 every rank on this node */
    bool shm_on;              /* note [shm-collectives] allowed */
    bool shm_all_gather;      /* also for all-gather (off by default: see mpi_all_gather) */
    sharc_comm_shared *stage; /* the staging window, allocated at first use */
    uint64_t pieces;          /* pieces exchanged so far: selects the half */
} mpi_impl;

/* An MPI error as a status, with MPI's own words. */
static inline sharc_status sharc_comm_mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return sharc_error(SHARC_ERR_COMM, "comm: %s failed: %.*s", what, len, msg);
}

#define MPI_TRY(call, what)                                                                                            \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_ != MPI_SUCCESS) return sharc_comm_mpi_fail(rc_, what);                                                 \
    } while (0)

static inline MPI_Comm sharc_comm_mpi_of(const sharc_comm *c) { return ((const mpi_impl *)c->impl)->comm; }

/* Float sums over ranks are the CPU kernel table's sum_ranks (note
 * [rank-order]): MPI works on host memory. */
static inline bool sharc_comm_mpi_float_sum(sharc_dtype dt, sharc_reduce_op op) {
    return op == SHARC_REDUCE_OP_SUM && (dt == SHARC_DT_F32 || dt == SHARC_DT_BF16 || dt == SHARC_DT_F16);
}
static inline void sharc_comm_mpi_sum(void *dst, const void *const *src, int S, size_t n, sharc_dtype dt) {
    sharc_device *cpu = sharc_device_cpu();
    sharc_device_kernels(cpu)->sum_ranks(sharc_device_stream(cpu), dst, src, S, (int64_t)n, dt, false);
}

/* comm_mpi_shm.c: the windows, and the collectives of note
 * [shm-collectives]; each collective returns SHARC_ERR_UNSUPPORTED when the
 * group cannot use them, and the caller falls back to MPI. */
extern const sharc_comm_shm_i sharc_comm_mpi_shm;
void sharc_comm_mpi_shm_init(mpi_impl *m); /* the environment's choices */
sharc_status sharc_comm_mpi_shm_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt);
sharc_status sharc_comm_mpi_shm_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count,
                                               sharc_dtype dt, sharc_reduce_op op);
sharc_status sharc_comm_mpi_shm_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                           sharc_reduce_op op);

#endif
