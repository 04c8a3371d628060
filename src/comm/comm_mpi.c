/* comm_mpi.c: the MPI backend (Open MPI or MPICH). The only file that
 * includes mpi.h.
 *
 * Reduce-scatter is done as an all-to-all of the slices followed by a local
 * sum in rank order (note [alltoall-reduce-scatter]): it is deterministic,
 * it accumulates 16-bit inputs in fp32 (MPI has no bf16 sum), and with Open
 * MPI on one node it is several times faster than MPI_Reduce_scatter_block,
 * whose reductions allocate (and page-fault) temporary buffers on every call
 * (MEASUREMENTS.md). SHARC_MPI_REDUCE_SCATTER=native selects the MPI call
 * instead, for fp32/fp64/int sums. */
#include "comm_impl.h"
#include "sharc/alloc.h"
#include "sharc/kernels.h"
#include "sharc/log.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

/* Note [shm-collectives]. When every rank of a group shares one node's
 * memory, all-gather, reduce-scatter and all-reduce go through a staging
 * window of MPI shared memory (MPI_Win_allocate_shared) instead of MPI's
 * collectives: each rank copies its piece into its own segment, one barrier,
 * then every rank reads what it needs straight from the others' segments
 * (and sums in rank order, in fp32). Large buffers go in pieces of half a
 * segment; the two halves alternate, so one barrier per piece suffices: a
 * rank can only overwrite a half after every rank has passed the barrier of
 * the piece that followed its last use. Open MPI's own reduce-scatter runs
 * at 1-3 GB/s here, this path at memory speed (MEASUREMENTS.md). It is
 * switched off with SHARC_COMM_SHM=0 or sharc_comm_use_shared_memory. */
#define SHM_SEGMENT_BYTES (16u << 20)

typedef struct {
    MPI_Comm comm;
    bool owns;          /* MPI_Comm_free at the end */
    void *scratch;      /* all-to-all receive buffer, grown on demand (SHARC_MEM_COMM) */
    size_t scratch_bytes;
    const void **slice; /* (size) the received slices of a local sum (note [rank-order]) */
    bool native_rs;
    int node_local;     /* -1 unknown, 0 no, 1 every rank on this node */
    bool shm_on;        /* note [shm-collectives] allowed */
    bool shm_all_gather; /* also for all-gather (off by default: see mpi_all_gather) */
    sharc_comm_shared *stage; /* SHM_SEGMENT_BYTES per rank, allocated at first use */
    uint64_t pieces;    /* pieces exchanged so far: selects the half */
} mpi_impl;

/* A pending operation: the MPI request, and for all-to-all reduce-scatter
 * the local sum still to do when it completes. */
typedef struct {
    MPI_Request req;
    bool sum_pending;
    const void *slices;  /* (size, count) received slices */
    void *recv;
    size_t count;
    sharc_dtype dt;
    sharc_reduce_op op;
    int size;
} mpi_req;

static const sharc_comm_vtable mpi_vtable;

/* note [shm-collectives]; each returns SHARC_ERR_UNSUPPORTED when the group
 * cannot use them, and the caller falls back to MPI */
static sharc_status shm_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt);
static sharc_status shm_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                       sharc_reduce_op op);
static sharc_status shm_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_reduce_op op);

static sharc_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return sharc_error(SHARC_ERR_COMM, "comm: %s failed: %.*s", what, len, msg);
}

#define MPI_TRY(call, what)                                                      \
    do {                                                                         \
        int rc_ = (call);                                                        \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, what);                      \
    } while (0)

static MPI_Comm comm_of(const sharc_comm *c) { return ((const mpi_impl *)c->impl)->comm; }

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

static MPI_Op op_of(sharc_reduce_op op) { return op == SHARC_REDUCE_OP_MAX ? MPI_MAX : op == SHARC_REDUCE_OP_MIN ? MPI_MIN : MPI_SUM; }

static void *scratch(mpi_impl *m, size_t bytes) {
    if (m->scratch_bytes < bytes) {
        sharc_free(m->scratch);
        m->scratch = sharc_alloc(bytes, SHARC_MEM_COMM);
        m->scratch_bytes = m->scratch ? bytes : 0;
    }
    return m->scratch;
}

/* ------------------------------------------------------------ local sums */

/* Float sums over ranks, in rank order (note [rank-order]): the CPU kernel
 * table's sum_ranks, since MPI works on host memory. */
static bool float_sum(sharc_dtype dt, sharc_reduce_op op) {
    return op == SHARC_REDUCE_OP_SUM && (dt == SHARC_DT_F32 || dt == SHARC_DT_BF16 || dt == SHARC_DT_F16);
}

static void sum_ranks(void *dst, const void *const *src, int S, size_t n, sharc_dtype dt) {
    sharc_device *cpu = sharc_device_cpu();
    sharc_device_kernels(cpu)->sum_ranks(sharc_device_stream(cpu), dst, src, S, (int64_t)n, dt, false);
}

/* recv (count) = op over ranks of slices (size, count), in rank order. */
static sharc_status local_reduce(mpi_impl *m, void *recv, const void *slices, size_t count, sharc_dtype dt,
                                 sharc_reduce_op op, int size) {
    size_t es = sharc_dtype_size(dt);
    if (float_sum(dt, op)) {
        for (int r = 0; r < size; r++) m->slice[r] = (const char *)slices + (size_t)r * count * es;
        sum_ranks(recv, m->slice, size, count, dt);
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

static sharc_status new_req(void **req, mpi_req **out) {
    mpi_req *r = calloc(1, sizeof *r);
    if (!r) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    *out = r;
    *req = r;
    return SHARC_OK;
}

static sharc_status mpi_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  void **req) {
    /* MPI's own all-gather is used even where shared memory is available:
     * Open MPI moves large messages between local ranks with one copy
     * (CMA), the staging path needs two (measured: GPT-2 124M at 2 ranks,
     * 419 MB gathered per step in 0.097 s by MPI, 0.147 s through the
     * window). SHARC_COMM_SHM_ALLGATHER=1 selects the window. */
    if (((mpi_impl *)c->impl)->shm_all_gather) {
        sharc_status shm = shm_all_gather(c, send, recv, count, dt);
        if (shm != SHARC_ERR_UNSUPPORTED) {
            if (req) *req = NULL;
            return shm;
        }
    }
    SHARC_TRY(check_count(count, c->size, "all-gather"));
    if (!req) {
        MPI_TRY(MPI_Allgather(send, (int)count, move_type(dt), recv, (int)count, move_type(dt), comm_of(c)),
                "MPI_Allgather");
        return SHARC_OK;
    }
    mpi_req *r = NULL;
    SHARC_TRY(new_req(req, &r));
    MPI_TRY(MPI_Iallgather(send, (int)count, move_type(dt), recv, (int)count, move_type(dt), comm_of(c), &r->req),
            "MPI_Iallgather");
    return SHARC_OK;
}

static sharc_status mpi_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                       sharc_reduce_op op, void **req) {
    sharc_status shm = shm_reduce_scatter(c, send, recv, count, dt, op);
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
        SHARC_TRY(new_req(req, &r));
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
    SHARC_TRY(new_req(req, &r));
    *r = (mpi_req){.sum_pending = true, .slices = slices, .recv = recv, .count = count, .dt = dt, .op = op,
                   .size = c->size};
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
                                  sharc_reduce_op op, void **req) {
    sharc_status shm = shm_all_reduce(c, send, recv, count, dt, op);
    if (shm != SHARC_ERR_UNSUPPORTED) {
        if (req) *req = NULL;
        return shm;
    }
    SHARC_TRY(check_count(count, 1, "all-reduce"));
    MPI_Datatype t = reduce_type(dt);
    if (t == MPI_DATATYPE_NULL && (dt == SHARC_DT_BF16 || dt == SHARC_DT_F16) && op == SHARC_REDUCE_OP_SUM) {
        if (req) *req = NULL;
        return all_reduce16(c, send, recv, count, dt, op);
    }
    if (t == MPI_DATATYPE_NULL)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "comm: all-reduce of %s supports only sum", sharc_dtype_st_name(dt));
    const void *s = send == recv ? MPI_IN_PLACE : send;
    if (!req) {
        MPI_TRY(MPI_Allreduce(s, recv, (int)count, t, op_of(op), comm_of(c)), "MPI_Allreduce");
        return SHARC_OK;
    }
    mpi_req *r = NULL;
    SHARC_TRY(new_req(req, &r));
    MPI_TRY(MPI_Iallreduce(s, recv, (int)count, t, op_of(op), comm_of(c), &r->req), "MPI_Iallreduce");
    return SHARC_OK;
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
    free(r);
    return st;
}

static sharc_status mpi_wait(sharc_comm *c, void *h) {
    mpi_req *r = h;
    int rc = MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_fail(rc, "MPI_Wait");
    }
    return finish_req(c, r);
}

static sharc_status mpi_test(sharc_comm *c, void *h, bool *done) {
    mpi_req *r = h;
    int flag = 0;
    int rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        free(r);
        *done = true;
        return mpi_fail(rc, "MPI_Test");
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
    const char *shm = getenv("SHARC_COMM_SHM");
    m->shm_on = !(shm && strcmp(shm, "0") == 0);
    const char *shm_ag = getenv("SHARC_COMM_SHM_ALLGATHER");
    m->shm_all_gather = shm_ag && strcmp(shm_ag, "1") == 0;
    m->node_local = -1;
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
    MPI_TRY(MPI_Comm_split_type(comm_of(c), MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &nc),
            "MPI_Comm_split_type");
    return wrap(nc, out);
}

/* ---------------------------------------------------------- shared memory */

typedef struct {
    MPI_Win win;
} shared_impl;

static sharc_status mpi_shared_alloc(sharc_comm *c, size_t bytes, sharc_comm_shared **out) {
    /* only for groups whose ranks all share this node's memory */
    MPI_Comm node;
    MPI_TRY(MPI_Comm_split_type(comm_of(c), MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
    int node_size;
    MPI_Comm_size(node, &node_size);
    int local = node_size == c->size, all_local = 0;
    MPI_Comm_free(&node);
    MPI_TRY(MPI_Allreduce(&local, &all_local, 1, MPI_INT, MPI_MIN, comm_of(c)), "MPI_Allreduce");
    if (!all_local) return sharc_error(SHARC_ERR_UNSUPPORTED, "comm: group spans several nodes; no shared memory");
    shared_impl *si = calloc(1, sizeof *si);
    sharc_comm_shared *s = calloc(1, sizeof *s);
    char **base = calloc((size_t)c->size, sizeof(char *));
    if (!si || !s || !base) {
        free(si);
        free(s);
        free(base);
        return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    }
    void *mine;
    /* segments of all ranks lie back to back (the default, contiguous layout) */
    int rc = MPI_Win_allocate_shared((MPI_Aint)(bytes ? bytes : 1), 1, MPI_INFO_NULL, comm_of(c), &mine, &si->win);
    if (rc != MPI_SUCCESS) {
        free(si);
        free(s);
        free(base);
        return mpi_fail(rc, "MPI_Win_allocate_shared");
    }
    for (int r = 0; r < c->size; r++) {
        MPI_Aint sz;
        int disp;
        void *p;
        MPI_Win_shared_query(si->win, r, &sz, &disp, &p);
        base[r] = p;
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, si->win);
    memset(mine, 0, bytes);
    *s = (sharc_comm_shared){.comm = c, .size = c->size, .bytes = bytes, .base = base, .impl = si};
    *out = s;
    return SHARC_OK;
}

static void mpi_shared_free(sharc_comm_shared *s) {
    shared_impl *si = s->impl;
    MPI_Win_unlock_all(si->win);
    MPI_Win_free(&si->win);
    free(si);
    free(s->base);
    free(s);
}

static sharc_status mpi_shared_sync(sharc_comm *c, sharc_comm_shared *s) {
    shared_impl *si = s->impl;
    MPI_Win_sync(si->win);
    MPI_TRY(MPI_Barrier(comm_of(c)), "MPI_Barrier");
    MPI_Win_sync(si->win);
    return SHARC_OK;
}

/* ------------------------------------------------ shared-memory collectives */

/* The staging window, or NULL if this group cannot or may not use one.
 * Collective on first use (every rank makes the same collective calls). */
static sharc_comm_shared *stage_of(sharc_comm *c) {
    mpi_impl *m = c->impl;
    if (!m->shm_on || c->size < 2) return NULL;
    if (m->stage) return m->stage;
    if (m->node_local == 0) return NULL;
    sharc_comm_shared *s = NULL;
    if (mpi_shared_alloc(c, SHM_SEGMENT_BYTES, &s) != SHARC_OK) {
        m->node_local = 0; /* spans nodes (the same answer on every rank) */
        return NULL;
    }
    m->node_local = 1;
    m->stage = s;
    return s;
}

/* Which half of every segment the next piece uses. */
static char *half(sharc_comm_shared *s, int rank, uint64_t piece) {
    return s->base[rank] + (piece % 2) * (SHM_SEGMENT_BYTES / 2);
}

static sharc_status shm_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt) {
    sharc_comm_shared *s = stage_of(c);
    if (!s) return SHARC_ERR_UNSUPPORTED;
    mpi_impl *m = c->impl;
    const size_t es = sharc_dtype_size(dt), total = count * es, P = SHM_SEGMENT_BYTES / 2;
    for (size_t off = 0; off < total; off += P) {
        size_t len = total - off < P ? total - off : P;
        uint64_t piece = m->pieces++;
        memcpy(half(s, c->rank, piece), (const char *)send + off, len);
        SHARC_TRY(mpi_shared_sync(c, s));
        for (int q = 0; q < c->size; q++) memcpy((char *)recv + (size_t)q * total + off, half(s, q, piece), len);
    }
    return SHARC_OK;
}


static sharc_status shm_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                       sharc_reduce_op op) {
    if (!float_sum(dt, op)) return SHARC_ERR_UNSUPPORTED;
    sharc_comm_shared *s = stage_of(c);
    if (!s) return SHARC_ERR_UNSUPPORTED;
    mpi_impl *m = c->impl;
    const int S = c->size;
    const size_t es = sharc_dtype_size(dt), per = (SHM_SEGMENT_BYTES / 2) / ((size_t)S * es); /* elements per slice piece */
    const void *src[64];
    if (S > 64) return SHARC_ERR_UNSUPPORTED;
    for (size_t e0 = 0; e0 < count; e0 += per) {
        size_t len = count - e0 < per ? count - e0 : per;
        uint64_t piece = m->pieces++;
        char *mine = half(s, c->rank, piece);
        /* my contribution to every rank's slice, slice q at q * len */
        for (int q = 0; q < S; q++)
            memcpy(mine + (size_t)q * len * es, (const char *)send + ((size_t)q * count + e0) * es, len * es);
        SHARC_TRY(mpi_shared_sync(c, s));
        for (int q = 0; q < S; q++) src[q] = half(s, q, piece) + (size_t)c->rank * len * es;
        sum_ranks((char *)recv + e0 * es, src, S, len, dt);
    }
    return SHARC_OK;
}

static sharc_status shm_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_reduce_op op) {
    if (!float_sum(dt, op)) return SHARC_ERR_UNSUPPORTED;
    sharc_comm_shared *s = stage_of(c);
    if (!s) return SHARC_ERR_UNSUPPORTED;
    mpi_impl *m = c->impl;
    const int S = c->size;
    const size_t es = sharc_dtype_size(dt), per = (SHM_SEGMENT_BYTES / 2) / es;
    const void *src[64];
    if (S > 64) return SHARC_ERR_UNSUPPORTED;
    /* every rank sums the whole piece in rank order: identical results everywhere */
    for (size_t e0 = 0; e0 < count; e0 += per) {
        size_t len = count - e0 < per ? count - e0 : per;
        uint64_t piece = m->pieces++;
        memcpy(half(s, c->rank, piece), (const char *)send + e0 * es, len * es);
        SHARC_TRY(mpi_shared_sync(c, s));
        for (int q = 0; q < S; q++) src[q] = half(s, q, piece);
        sum_ranks((char *)recv + e0 * es, src, S, len, dt);
    }
    return SHARC_OK;
}

static void mpi_use_shared_memory(sharc_comm *c, bool on) {
    mpi_impl *m = c->impl;
    m->shm_on = on && !(getenv("SHARC_COMM_SHM") && strcmp(getenv("SHARC_COMM_SHM"), "0") == 0);
}

static bool mpi_shared_memory_allowed(const sharc_comm *c) { return ((const mpi_impl *)c->impl)->shm_on; }

static void mpi_abort(sharc_comm *c, int code) { MPI_Abort(comm_of(c), code); }

static void mpi_free(sharc_comm *c) {
    mpi_impl *m = c->impl;
    if (m->stage) mpi_shared_free(m->stage);
    if (m->owns && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    sharc_free(m->scratch);
    free(m->slice);
    free(m);
    free(c);
}

static const sharc_comm_vtable mpi_vtable = {
    .name = "mpi",
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .split = mpi_split,
    .split_node = mpi_split_node,
    .wait = mpi_wait,
    .test = mpi_test,
    .shared_alloc = mpi_shared_alloc,
    .shared_free = mpi_shared_free,
    .shared_sync = mpi_shared_sync,
    .use_shared_memory = mpi_use_shared_memory,
    .shared_memory_allowed = mpi_shared_memory_allowed,
    .abort = mpi_abort,
    .free = mpi_free,
};

/* ----------------------------------------------------------------- world */

int sharc_comm_mpi_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
                                 "SLURM_STEP_ID", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

sharc_status sharc_comm_mpi_world_init(int *argc, char ***argv, sharc_comm **world) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return sharc_error(SHARC_ERR_COMM, "comm: MPI_Init_thread failed (%d)", rc);
    }
    MPI_Comm dup;
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    return wrap(dup, world);
}

void sharc_comm_mpi_finalize(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}
