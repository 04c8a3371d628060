/* comm_mpi_shm.c: the MPI backend's shared-memory extension: windows of MPI
 * shared memory over a node-local group (the engine's note
 * [shared-params]), and the collectives that go through a staging window
 * instead of MPI's (note [shm-collectives]).
 *
 * Note [shm-collectives]. When every rank of a group shares one node's
 * memory, reduce-scatter and all-reduce (and all-gather on request) go
 * through a staging window of MPI shared memory (MPI_Win_allocate_shared)
 * instead of MPI's collectives: each rank copies its piece into its own
 * segment, one barrier, then every rank reads what it needs straight from
 * the others' segments and sums in rank order, in fp32 (note [rank-order]).
 * Large buffers go in pieces of half a segment; the two halves alternate, so
 * one barrier per piece suffices: a rank can only overwrite a half after
 * every rank has passed the barrier of the piece that followed its last use.
 * Open MPI's own reduce-scatter runs at 1-3 GB/s on the project's machine,
 * this path at memory speed (docs/ARCHITECTURE.md, "Communication"). It is
 * switched off with SHARC_COMM_SHM=0 or sharc_comm_use_shared_memory. */
#include "mpi_impl.h"

#include <stdlib.h>
#include <string.h>

#define SHM_SEGMENT_BYTES (16u << 20)

void sharc_comm_mpi_shm_init(mpi_impl *m) {
    const char *shm = getenv("SHARC_COMM_SHM");
    m->shm_on = !(shm && strcmp(shm, "0") == 0);
    const char *shm_ag = getenv("SHARC_COMM_SHM_ALLGATHER");
    m->shm_all_gather = shm_ag && strcmp(shm_ag, "1") == 0;
    m->node_local = -1;
}

/* ---------------------------------------------------------------- windows */

typedef struct {
    MPI_Win win;
} shared_impl;

static sharc_status mpi_shared_alloc(sharc_comm *c, size_t bytes, sharc_comm_shared **out) {
    /* only for groups whose ranks all share this node's memory */
    MPI_Comm node;
    MPI_TRY(MPI_Comm_split_type(sharc_comm_mpi_of(c), MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
    int node_size;
    MPI_Comm_size(node, &node_size);
    int local = node_size == c->size, all_local = 0;
    MPI_Comm_free(&node);
    MPI_TRY(MPI_Allreduce(&local, &all_local, 1, MPI_INT, MPI_MIN, sharc_comm_mpi_of(c)), "MPI_Allreduce");
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
    int rc =
        MPI_Win_allocate_shared((MPI_Aint)(bytes ? bytes : 1), 1, MPI_INFO_NULL, sharc_comm_mpi_of(c), &mine, &si->win);
    if (rc != MPI_SUCCESS) {
        free(si);
        free(s);
        free(base);
        return sharc_comm_mpi_fail(rc, "MPI_Win_allocate_shared");
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
    MPI_TRY(MPI_Barrier(sharc_comm_mpi_of(c)), "MPI_Barrier");
    MPI_Win_sync(si->win);
    return SHARC_OK;
}

static void mpi_use_shared_memory(sharc_comm *c, bool on) {
    mpi_impl *m = c->impl;
    m->shm_on = on && !(getenv("SHARC_COMM_SHM") && strcmp(getenv("SHARC_COMM_SHM"), "0") == 0);
}

static bool mpi_shared_memory_allowed(const sharc_comm *c) { return ((const mpi_impl *)c->impl)->shm_on; }

const sharc_comm_shm_i sharc_comm_mpi_shm = {
    .alloc = mpi_shared_alloc,
    .free = mpi_shared_free,
    .sync = mpi_shared_sync,
    .use = mpi_use_shared_memory,
    .allowed = mpi_shared_memory_allowed,
};

/* ------------------------------------------------ shared-memory collectives */

/* The staging window, or NULL if this group cannot or may not use one.
 * Collective on first use (every rank makes the same collective calls). */
static sharc_comm_shared *stage_of(sharc_comm *c) {
    mpi_impl *m = c->impl;
    if (!m->shm_on || c->size < 2) return NULL;
    if (m->stage) return m->stage;
    if (m->node_local == 0) return NULL;
    sharc_comm_shared *s = NULL;
    if (sharc_comm_shared_alloc(c, SHM_SEGMENT_BYTES, &s) != SHARC_OK) {
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

sharc_status sharc_comm_mpi_shm_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt) {
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

sharc_status sharc_comm_mpi_shm_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count,
                                               sharc_dtype dt, sharc_reduce_op op) {
    if (!sharc_comm_mpi_float_sum(dt, op)) return SHARC_ERR_UNSUPPORTED;
    sharc_comm_shared *s = stage_of(c);
    if (!s) return SHARC_ERR_UNSUPPORTED;
    mpi_impl *m = c->impl;
    const int S = c->size;
    const size_t es = sharc_dtype_size(dt),
                 per = (SHM_SEGMENT_BYTES / 2) / ((size_t)S * es); /* elements per slice piece */
    for (size_t e0 = 0; e0 < count; e0 += per) {
        size_t len = count - e0 < per ? count - e0 : per;
        uint64_t piece = m->pieces++;
        char *mine = half(s, c->rank, piece);
        /* my contribution to every rank's slice, slice q at q * len */
        for (int q = 0; q < S; q++)
            memcpy(mine + (size_t)q * len * es, (const char *)send + ((size_t)q * count + e0) * es, len * es);
        SHARC_TRY(mpi_shared_sync(c, s));
        for (int q = 0; q < S; q++) s->part[q] = half(s, q, piece) + (size_t)c->rank * len * es;
        sharc_comm_mpi_sum((char *)recv + e0 * es, s->part, S, len, dt);
    }
    return SHARC_OK;
}

sharc_status sharc_comm_mpi_shm_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                           sharc_reduce_op op) {
    if (!sharc_comm_mpi_float_sum(dt, op)) return SHARC_ERR_UNSUPPORTED;
    sharc_comm_shared *s = stage_of(c);
    if (!s) return SHARC_ERR_UNSUPPORTED;
    mpi_impl *m = c->impl;
    const int S = c->size;
    const size_t es = sharc_dtype_size(dt), per = (SHM_SEGMENT_BYTES / 2) / es;
    /* every rank sums the whole piece in rank order: identical results everywhere */
    for (size_t e0 = 0; e0 < count; e0 += per) {
        size_t len = count - e0 < per ? count - e0 : per;
        uint64_t piece = m->pieces++;
        memcpy(half(s, c->rank, piece), (const char *)send + e0 * es, len * es);
        SHARC_TRY(mpi_shared_sync(c, s));
        for (int q = 0; q < S; q++) s->part[q] = half(s, q, piece);
        sharc_comm_mpi_sum((char *)recv + e0 * es, s->part, S, len, dt);
    }
    return SHARC_OK;
}
