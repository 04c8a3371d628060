/* comm_mpi.c: the MPI backend (Open MPI or MPICH): its collectives, groups
 * and registry entry; the shared-memory extension is comm_mpi_shm.c. These
 * two are the only files that include mpi.h.
 *
 * Note [alltoall-reduce-scatter]. Reduce-scatter is done as an all-to-all of
 * the slices followed by a local sum in rank order (note [rank-order]): it
 * is deterministic, it accumulates 16-bit inputs in fp32 (MPI has no bf16
 * sum), and with Open MPI on one node it is several times faster than
 * MPI_Reduce_scatter_block, whose reductions allocate (and page-fault)
 * temporary buffers on every call (docs/ARCHITECTURE.md, "Communication").
 * SHARC_MPI_REDUCE_SCATTER=native selects the MPI call instead, for
 * fp32/fp64/int sums. */
#include "mpi_impl.h"
#include "sharc/alloc.h"
#include "sharc/kernels.h"
#include "sharc/log.h"

#include <stdlib.h>
#include <string.h>

/* A pending operation: the MPI request, and for all-to-all reduce-scatter
 * the local sum still to do when it completes. */
struct mpi_req {
    MPI_Request req;
    bool sum_pending;
    const void *slices; /* (size, count) received slices */
    void *recv;
    size_t count;
    sharc_dtype dt;
    sharc_reduce_op op;
    int size;
    mpi_req *next; /* on the group's spare list */
};

static const sharc_comm_vtable mpi_vtable;

static MPI_Comm comm_of(const sharc_comm *c) { return sharc_comm_mpi_of(c); }

/* The MPI type for moving (not reducing) elements of dt. */
static MPI_Datatype move_type(sharc_dtype dt) {
    switch (sharc_dtype_size(dt)) {
    case 1: return MPI_UINT8_T;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
    }
}

/* The MPI type for reducing dt, or MPI_DATATYPE_NULL (16-bit floats). */
static MPI_Datatype reduce_type(sharc_dtype dt) {
    switch (dt) {
    case SHARC_DT_F32: return MPI_FLOAT;
    case SHARC_DT_F64: return MPI_DOUBLE;
    case SHARC_DT_I32: return MPI_INT32_T;
    case SHARC_DT_I64: return MPI_INT64_T;
    case SHARC_DT_U32: return MPI_UINT32_T;
    case SHARC_DT_U64: return MPI_UINT64_T;
    case SHARC_DT_I8: return MPI_INT8_T;
    case SHARC_DT_U8: return MPI_UINT8_T;
    case SHARC_DT_I16: return MPI_INT16_T;
    case SHARC_DT_U16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op op_of(sharc_reduce_op op) {
    return op == SHARC_REDUCE_OP_MAX ? MPI_MAX : op == SHARC_REDUCE_OP_MIN ? MPI_MIN : MPI_SUM;
}

static void *scratch(mpi_impl *m, size_t bytes) {
    if (m->scratch_bytes < bytes) {
        sharc_free(m->scratch);
        m->scratch = sharc_alloc(bytes, SHARC_MEM_COMM);
        m->scratch_bytes = m->scratch ? bytes : 0;
    }
    return m->scratch;
}

/* ------------------------------------------------------------ local sums */

/* recv (count) = op over ranks of slices (size, count), in rank order. */
static sharc_status local_reduce(mpi_impl *m, void *recv, const void *slices, size_t count, sharc_dtype dt,
                                 sharc_reduce_op op, int size) {
    size_t es = sharc_dtype_size(dt);
    if (sharc_comm_mpi_float_sum(dt, op)) {
        for (int r = 0; r < size; r++) m->slice[r] = (const char *)slices + (size_t)r * count * es;
        sharc_comm_mpi_sum(recv, m->slice, size, count, dt);
        return SHARC_OK;
    }
    MPI_Datatype t = reduce_type(dt);
    if (t == MPI_DATATYPE_NULL)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "comm: reduce of %s supports only sum", sharc_dtype_st_name(dt));
    memcpy(recv, slices, count * es);
    for (int r = 1; r < size; r++)
        MPI_TRY(MPI_Reduce_local((const char *)slices + (size_t)r * count * es, recv, (int)count, t, op_of(op)),
                "MPI_Reduce_local");
    return SHARC_OK;
}

/* ----------------------------------------------------------- collectives */

/* MPI counts are int: refuse what does not fit rather than truncate. */
static sharc_status check_count(size_t count, int size, const char *what) {
    if (count > (size_t)INT32_MAX / (size_t)(size > 0 ? size : 1))
        return sharc_error(SHARC_ERR_UNSUPPORTED, "comm: %s of %zu elements exceeds MPI's int counts", what, count);
    return SHARC_OK;
}

/* A request from the group's spare list (allocated only the first time). */
static sharc_status new_req(mpi_impl *m, void **req, mpi_req **out) {
    mpi_req *r = m->spare;
    if (r) m->spare = r->next;
    else if (!(r = malloc(sizeof *r))) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    memset(r, 0, sizeof *r);
    *out = r;
    *req = r;
    return SHARC_OK;
}

static void recycle_req(mpi_impl *m, mpi_req *r) {
    r->next = m->spare;
    m->spare = r;
}

/* An all-gather or all-to-all (count elements to and from each rank):
 * blocking when req is NULL, else started and its request handed back. */
typedef int (*mpi_same_count_fn)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);
typedef int (*mpi_same_count_ifn)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Request *);
static sharc_status same_count(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt, void **req,
                               mpi_same_count_fn fn, const char *fn_name, mpi_same_count_ifn ifn,
                               const char *ifn_name) {
    if (!req) {
        MPI_TRY(fn(send, (int)count, move_type(dt), recv, (int)count, move_type(dt), comm_of(c)), fn_name);
        return SHARC_OK;
    }
    mpi_req *r = NULL;
    SHARC_TRY(new_req(c->impl, req, &r));
    MPI_TRY(ifn(send, (int)count, move_type(dt), recv, (int)count, move_type(dt), comm_of(c), &r->req), ifn_name);
    return SHARC_OK;
}

static sharc_status mpi_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                   sharc_stream *s, void **req) {
    /* MPI's own all-gather is used even where shared memory is available:
     * Open MPI moves large messages between local ranks with one copy
     * (CMA), the staging path needs two (measured: GPT-2 124M at 2 ranks,
     * 419 MB gathered per step in 0.097 s by MPI, 0.147 s through the
     * window). SHARC_COMM_SHM_ALLGATHER=1 selects the window. */
    if (((mpi_impl *)c->impl)->shm_all_gather) {
        sharc_status shm = sharc_comm_mpi_shm_all_gather(c, send, recv, count, dt);
        if (shm != SHARC_ERR_UNSUPPORTED) {
            if (req) *req = NULL;
            return shm;
        }
    }
    SHARC_TRY(check_count(count, c->size, "all-gather"));
    return same_count(c, send, recv, count, dt, req, MPI_Allgather, "MPI_Allgather", MPI_Iallgather, "MPI_Iallgather");
}

static sharc_status mpi_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                       sharc_reduce_op op, sharc_stream *s, void **req) {
    sharc_status shm = sharc_comm_mpi_shm_reduce_scatter(c, send, recv, count, dt, op);
    if (shm != SHARC_ERR_UNSUPPORTED) {
        if (req) *req = NULL;
        return shm;
    }
    SHARC_TRY(check_count(count, c->size, "reduce-scatter"));
    mpi_impl *m = c->impl;
    MPI_Datatype rt = reduce_type(dt);
    if (m->native_rs && rt != MPI_DATATYPE_NULL) {
        if (!req) {
            MPI_TRY(MPI_Reduce_scatter_block(send, recv, (int)count, rt, op_of(op), comm_of(c)),
                    "MPI_Reduce_scatter_block");
            return SHARC_OK;
        }
        mpi_req *r = NULL;
        SHARC_TRY(new_req(m, req, &r));
        MPI_TRY(MPI_Ireduce_scatter_block(send, recv, (int)count, rt, op_of(op), comm_of(c), &r->req),
                "MPI_Ireduce_scatter_block");
        return SHARC_OK;
    }
    /* note [alltoall-reduce-scatter] */
    size_t es = sharc_dtype_size(dt);
    void *slices = scratch(m, count * es * (size_t)c->size);
    if (!slices && count) return sharc_error(SHARC_ERR_NOMEM, "comm: cannot allocate reduce-scatter staging");
    if (!req) {
        MPI_TRY(MPI_Alltoall(send, (int)count, move_type(dt), slices, (int)count, move_type(dt), comm_of(c)),
                "MPI_Alltoall");
        return local_reduce(m, recv, slices, count, dt, op, c->size);
    }
    mpi_req *r = NULL;
    SHARC_TRY(new_req(m, req, &r));
    *r = (mpi_req){
        .sum_pending = true, .slices = slices, .recv = recv, .count = count, .dt = dt, .op = op, .size = c->size};
    MPI_TRY(MPI_Ialltoall(send, (int)count, move_type(dt), slices, (int)count, move_type(dt), comm_of(c), &r->req),
            "MPI_Ialltoall");
    return SHARC_OK;
}

/* 16-bit floats: an all-to-all reduce-scatter of padded pieces summed in
 * fp32 in rank order, then an all-gather; blocking. */
static sharc_status all_reduce16(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                 sharc_reduce_op op) {
    mpi_impl *m = c->impl;
    size_t S = (size_t)c->size, piece = (count + S - 1) / S;
    SHARC_TRY(check_count(piece, c->size, "all-reduce"));
    /* scratch: padded input (S x piece) | received slices (S x piece) | my reduced piece */
    uint16_t *buf = scratch(m, (2 * S * piece + piece) * 2);
    if (!buf) return sharc_error(SHARC_ERR_NOMEM, "comm: cannot allocate all-reduce staging");
    uint16_t *in = buf, *slices = buf + S * piece, *mine = buf + 2 * S * piece;
    memcpy(in, send, count * 2);
    memset(in + count, 0, (S * piece - count) * 2);
    MPI_TRY(MPI_Alltoall(in, (int)piece, MPI_UINT16_T, slices, (int)piece, MPI_UINT16_T, comm_of(c)), "MPI_Alltoall");
    SHARC_TRY(local_reduce(m, mine, slices, piece, dt, op, c->size));
    MPI_TRY(MPI_Allgather(mine, (int)piece, MPI_UINT16_T, in, (int)piece, MPI_UINT16_T, comm_of(c)), "MPI_Allgather");
    memcpy(recv, in, count * 2);
    return SHARC_OK;
}

static sharc_status mpi_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                   sharc_reduce_op op, sharc_stream *stream, void **req) {
    if (req) *req = NULL; /* the shared-memory and 16-bit paths complete before they return */
    sharc_status shm = sharc_comm_mpi_shm_all_reduce(c, send, recv, count, dt, op);
    if (shm != SHARC_ERR_UNSUPPORTED) return shm;
    SHARC_TRY(check_count(count, 1, "all-reduce"));
    MPI_Datatype t = reduce_type(dt);
    if (t == MPI_DATATYPE_NULL && (dt == SHARC_DT_BF16 || dt == SHARC_DT_F16) && op == SHARC_REDUCE_OP_SUM)
        return all_reduce16(c, send, recv, count, dt, op);
    if (t == MPI_DATATYPE_NULL)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "comm: all-reduce of %s supports only sum", sharc_dtype_st_name(dt));
    const void *s = send == recv ? MPI_IN_PLACE : send;
    if (!req) {
        MPI_TRY(MPI_Allreduce(s, recv, (int)count, t, op_of(op), comm_of(c)), "MPI_Allreduce");
        return SHARC_OK;
    }
    mpi_req *r = NULL;
    SHARC_TRY(new_req(c->impl, req, &r));
    MPI_TRY(MPI_Iallreduce(s, recv, (int)count, t, op_of(op), comm_of(c), &r->req), "MPI_Iallreduce");
    return SHARC_OK;
}

static sharc_status mpi_all_to_all(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                   sharc_stream *s, void **req) {
    SHARC_TRY(check_count(count, c->size, "all-to-all"));
    return same_count(c, send, recv, count, dt, req, MPI_Alltoall, "MPI_Alltoall", MPI_Ialltoall, "MPI_Ialltoall");
}

static sharc_status mpi_broadcast(sharc_comm *c, void *buf, size_t count, sharc_dtype dt, int root) {
    SHARC_TRY(check_count(count, 1, "broadcast"));
    MPI_TRY(MPI_Bcast(buf, (int)count, move_type(dt), root, comm_of(c)), "MPI_Bcast");
    return SHARC_OK;
}

static sharc_status mpi_barrier(sharc_comm *c) {
    MPI_TRY(MPI_Barrier(comm_of(c)), "MPI_Barrier");
    return SHARC_OK;
}

static sharc_status finish_req(sharc_comm *c, mpi_req *r) {
    sharc_status st = SHARC_OK;
    if (r->sum_pending) st = local_reduce(c->impl, r->recv, r->slices, r->count, r->dt, r->op, r->size);
    recycle_req(c->impl, r);
    return st;
}

static sharc_status mpi_wait(sharc_comm *c, void *h) {
    mpi_req *r = h;
    int rc = MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        recycle_req(c->impl, r);
        return sharc_comm_mpi_fail(rc, "MPI_Wait");
    }
    return finish_req(c, r);
}

static sharc_status mpi_test(sharc_comm *c, void *h, bool *done) {
    mpi_req *r = h;
    int flag = 0;
    int rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        recycle_req(c->impl, r);
        *done = true;
        return sharc_comm_mpi_fail(rc, "MPI_Test");
    }
    *done = flag != 0;
    return flag ? finish_req(c, r) : SHARC_OK;
}

/* ---------------------------------------------------------------- groups */

static sharc_status wrap(MPI_Comm comm, sharc_comm **out) {
    mpi_impl *m = calloc(1, sizeof *m);
    if (!m) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    m->comm = comm;
    m->owns = true;
    const char *rs = getenv("SHARC_MPI_REDUCE_SCATTER");
    m->native_rs = rs && strcmp(rs, "native") == 0;
    sharc_comm_mpi_shm_init(m);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    m->slice = calloc((size_t)size, sizeof *m->slice);
    if (!m->slice) {
        free(m);
        return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    }
    *out = sharc_comm_new(&mpi_vtable, rank, size, m);
    if (!*out) {
        free(m->slice);
        free(m);
        return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    }
    return SHARC_OK;
}

static sharc_status mpi_split(sharc_comm *c, int color, int key, sharc_comm **out) {
    MPI_Comm nc;
    MPI_TRY(MPI_Comm_split(comm_of(c), color, key, &nc), "MPI_Comm_split");
    return wrap(nc, out);
}

static sharc_status mpi_split_node(sharc_comm *c, sharc_comm **out) {
    MPI_Comm nc;
    MPI_TRY(MPI_Comm_split_type(comm_of(c), MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &nc), "MPI_Comm_split_type");
    return wrap(nc, out);
}

static void mpi_abort(sharc_comm *c, int code) { MPI_Abort(comm_of(c), code); }

static void mpi_free(sharc_comm *c) {
    mpi_impl *m = c->impl;
    if (m->stage) sharc_comm_shared_free(m->stage);
    if (m->owns && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    sharc_free(m->scratch);
    free(m->slice);
    while (m->spare) {
        mpi_req *r = m->spare;
        m->spare = r->next;
        free(r);
    }
    free(m);
    sharc_comm_release(c);
}

static const sharc_comm_vtable mpi_vtable = {
    .name = "mpi",
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .all_reduce = mpi_all_reduce,
    .all_to_all = mpi_all_to_all,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .split = mpi_split,
    .split_node = mpi_split_node,
    .wait = mpi_wait,
    .test = mpi_test,
    .shm = &sharc_comm_mpi_shm,
    .abort = mpi_abort,
    .free = mpi_free,
};

/* ----------------------------------------------------------------- world */

static bool sharc_comm_mpi_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",      "PMIX_RANK",
                                 "MPI_LOCALNRANKS",      "SLURM_STEP_ID", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

static sharc_status sharc_comm_mpi_world_init(int *argc, char ***argv, sharc_comm **world) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* note [progress] (src/device/progress.c): outside blocking calls Open MPI
         * polls the event loop that moves TCP traffic only every so often; on
         * a job spanning hosts every MPI_Test must poll it for a prefetch to
         * move during compute (a user's own setting wins) */
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), *ws = getenv("OMPI_COMM_WORLD_SIZE");
        if (ls && ws && atoi(ls) < atoi(ws)) setenv("OMPI_MCA_mpi_event_tick_rate", "1", 0);
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return sharc_error(SHARC_ERR_COMM, "comm: MPI_Init_thread failed (%d)", rc);
    }
    MPI_Comm dup;
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    return wrap(dup, world);
}

static void sharc_comm_mpi_finalize(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

const sharc_comm_backend_i sharc_comm_backend_mpi = {
    .name = "mpi",
    .probe = sharc_comm_mpi_launched,
    .world_init = sharc_comm_mpi_world_init,
    .finalize = sharc_comm_mpi_finalize,
};
