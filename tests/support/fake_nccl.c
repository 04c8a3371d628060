/* fake_nccl.c: a test double for libnccl.so.2 and the few CUDA driver calls
 * the NCCL backend (src/comm/comm_nccl.c) makes, built as
 * build/libfake_nccl.so and named by SHARC_NCCL_LIB and SHARC_CUDA_DRIVER_LIB
 * in tests/cli/mpi_nccl.sh. It implements NCCL's documented semantics on
 * host memory over MPI, synchronously: the stream arguments are ignored
 * (every call has finished when it returns, so events are always reached).
 *
 * - ncclGetUniqueId/ncclCommInitRank: the id carries the root's world rank
 *   and a tag; members report to the root, which sends the rank table back,
 *   and the group is an MPI communicator made over just those ranks
 *   (MPI_Comm_create_group), as NCCL's bootstrap needs only the members.
 *   Two members on one GPU (the same PCI bus id) give ncclInvalidUsage.
 * - ncclAllGather: sendcount per rank; in place when
 *   sendbuff == recvbuff + rank * sendcount.
 * - ncclReduceScatter: recvcount per rank; in place when
 *   recvbuff == sendbuff + rank * recvcount.
 * - ncclAllReduce (in place when sendbuff == recvbuff), ncclBroadcast (in
 *   place when sendbuff == recvbuff; sendbuff read on the root only).
 * - reductions in rank order; fp16/bf16 accumulated in fp32 and rounded once
 *   (real NCCL rounds at every step of its ring: the backend's tests allow
 *   for it); ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg.
 * - ncclSend/ncclRecv inside ncclGroupStart/End are posted together at the
 *   outermost ncclGroupEnd; outside a group each blocks until matched.
 * - Errors: ncclInvalidArgument for a NULL comm or buffer, a bad type, op,
 *   peer or root; ncclInvalidUsage for ncclGroupEnd without a start and for
 *   a collective inside a group (said on stderr: real NCCL fuses those, the
 *   fake groups only sends and receives, the all-to-all of comm_nccl.c).
 * The device: cuCtxGetDevice returns FAKE_CUDA_DEVICE, else the launcher's
 * local rank (each rank its own GPU, so its own PCI bus id).
 * FAKE_NCCL_FAIL=NAME makes that NCCL call fail (ncclInternalError).
 * FAKE_NCCL_STATS=1 prints one line per process at exit: its collectives
 * by kind ("fake_nccl: rank R: N all-gathers, ...").
 *
 * Alone (mpi_nccl, build/sharc): all memory is device memory and streams are
 * ignored. Under the CUDA simulator (note [cudasim]: the process exports
 * cudasim_enqueue, as build/sim/sharc does) the fake is a GPU's NCCL:
 * - cuPointerGetAttribute says device iff cudasim_device_range puts the
 *   pointer in a live device allocation (else CUDA_ERROR_INVALID_VALUE, as
 *   the driver answers for pageable host memory); a collective whose buffer
 *   is not wholly inside one allocation is ncclInvalidArgument.
 * - cuEvent*, cuStreamWaitEvent and cuStreamSynchronize are the simulated
 *   runtime's cudaEvent*, cudaStreamWaitEvent and cudaStreamSynchronize
 *   (the handles are interchangeable, as on a GPU).
 * - a collective on stream s first drains s (cudasim_stream_drain: what was
 *   queued before it, on s or behind an event s waits on, has run; not
 *   counted as a host synchronization of the caller's), then runs its MPI
 *   exchange on the host between cudasim_device_begin/_end (the arena
 *   readable), so it has finished when the call returns, as if the GPU ran
 *   it at once. Not enqueued with cudasim_enqueue: a queued MPI exchange
 *   runs when its rank next drains that stream, which may be inside a
 *   host-side MPI call of its own (an event wait in the middle of the
 *   engine's step) while the peer is already blocked in a different MPI
 *   call: a deadlock a GPU would not have. Run at the call, every rank
 *   exchanges in its program order, which is the same on every rank. The
 *   cost: the simulator cannot show a collective overlapping compute, nor a
 *   buffer read by the collective before its producer ran on another stream
 *   that s never waited for (the synchronize covers only s). A NULL stream is
 *   the legacy stream, which does not wait for non-blocking streams. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd, ncclMax, ncclMin, ncclAvg, ncclNumOps } ncclRedOp_t;
typedef enum {
    ncclInt8 = 0,
    ncclUint8,
    ncclInt32,
    ncclUint32,
    ncclInt64,
    ncclUint64,
    ncclFloat16,
    ncclFloat32,
    ncclFloat64,
    ncclBfloat16,
    ncclNumTypes
} ncclDataType_t;
typedef struct {
    char internal[128];
} ncclUniqueId;

typedef struct fake_comm {
    MPI_Comm comm;
    int rank, size;
    char last[256];
} fake_comm;
typedef fake_comm *ncclComm_t;

static long n_collectives, n_stream_waits;
static long n_kind[5]; /* all-gathers, reduce-scatters, all-reduces, broadcasts, send/receive groups */

/* ---------------------------------------------------------- the simulator */

typedef struct {
    int (*range)(const void *, size_t);
    void (*begin)(const char *);
    void (*end)(void);
    void (*drain)(void *);
    int (*stream_sync)(void *);
    int (*event_create)(void **, unsigned);
    int (*event_destroy)(void *);
    int (*event_record)(void *, void *);
    int (*event_query)(void *);
    int (*event_sync)(void *);
    int (*stream_wait)(void *, void *, unsigned);
} sim_api;

/* The simulator's entry points when this process runs on it, else NULL. */
static const sim_api *sim(void) {
    static int probed;
    static sim_api s;
    static const sim_api *have;
    if (probed) return have;
    probed = 1;
    if (!dlsym(RTLD_DEFAULT, "cudasim_enqueue")) return NULL;
    const char *names[] = {"cudasim_device_range", "cudasim_device_begin",  "cudasim_device_end",
                           "cudasim_stream_drain", "cudaStreamSynchronize", "cudaEventCreateWithFlags",
                           "cudaEventDestroy",     "cudaEventRecord",       "cudasim_event_poll",
                           "cudaEventSynchronize", "cudaStreamWaitEvent"};
    void **slots[] = {(void **)&s.range,         (void **)&s.begin,        (void **)&s.end,
                      (void **)&s.drain,         (void **)&s.stream_sync,  (void **)&s.event_create,
                      (void **)&s.event_destroy, (void **)&s.event_record, (void **)&s.event_query,
                      (void **)&s.event_sync,    (void **)&s.stream_wait};
    for (int i = 0; i < 11; i++)
        if (!(*slots[i] = dlsym(RTLD_DEFAULT, names[i]))) {
            fprintf(stderr, "fake_nccl: the simulator has no %s\n", names[i]);
            abort();
        }
    have = &s;
    return have;
}

/* Whether the bytes [p, p + n) are device memory (always, off the simulator). */
static int on_device(const void *p, size_t n) {
    const sim_api *s = sim();
    return !s || !n || s->range(p, n);
}

/* Before a collective on stream st: its stream's earlier work has run, and
 * the arena is readable until sim_leave. */
static void sim_enter(void *st, const char *what) {
    const sim_api *s = sim();
    if (!s) return;
    s->drain(st); /* NCCL's work queued on st (not a host wait of the caller's) */
    s->begin(what);
}

static void sim_leave(void) {
    const sim_api *s = sim();
    if (s) s->end();
}

__attribute__((destructor)) static void print_stats(void) {
    const char *e = getenv("FAKE_NCCL_STATS");
    if (!e || strcmp(e, "1")) return;
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    fprintf(
        stderr,
        "fake_nccl: rank %s: %ld all-gathers, %ld reduce-scatters, %ld all-reduces, %ld broadcasts, %ld send/receive "
        "groups on %s\n",
        r ? r : "0", n_kind[0], n_kind[1], n_kind[2], n_kind[3], n_kind[4],
        sim() ? "simulated device memory" : "host memory");
}

/* For the tests: how many NCCL collectives ran here, how many stream waits. */
void fake_nccl_stats(long *collectives, long *stream_waits) {
    *collectives = n_collectives;
    *stream_waits = n_stream_waits;
}

static int failing(const char *name) {
    const char *f = getenv("FAKE_NCCL_FAIL");
    return f && !strcmp(f, name);
}

ncclResult_t ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = 21800; /* 2.18.0 */
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c) { return c ? c->last : ""; }

static ncclResult_t fail(ncclComm_t c, ncclResult_t r, const char *what) {
    if (c) snprintf(c->last, sizeof c->last, "fake: %s", what);
    return r;
}

/* ---------------------------------------------------------------- ids */

typedef struct {
    char magic[8];
    int root, tag;
} fake_id;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int next;
    if (!id) return ncclInvalidArgument;
    fake_id f = {.magic = "fakencl", .tag = 1000 + (next++ % 20000)};
    MPI_Comm_rank(MPI_COMM_WORLD, &f.root);
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &f, sizeof f);
    return ncclSuccess;
}

static int device_ordinal(void) {
    const char *d = getenv("FAKE_CUDA_DEVICE");
    if (!d) d = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    return d ? atoi(d) : 0;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId commId, int rank) {
    if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    *out = NULL;
    fake_id f;
    memcpy(&f, commId.internal, sizeof f);
    if (memcmp(f.magic, "fakencl", 8) != 0) return ncclInvalidArgument;
    if (failing("ncclCommInitRank")) return ncclInternalError;
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int *table = calloc((size_t)nranks, sizeof *table);
    if (!table) return ncclSystemError;
    if (rank == 0) {
        table[0] = me;
        for (int i = 1; i < nranks; i++) {
            int rw[2];
            MPI_Recv(rw, 2, MPI_INT, MPI_ANY_SOURCE, f.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (rw[0] > 0 && rw[0] < nranks) table[rw[0]] = rw[1];
        }
        for (int i = 1; i < nranks; i++) MPI_Send(table, nranks, MPI_INT, table[i], f.tag, MPI_COMM_WORLD);
    } else {
        int rw[2] = {rank, me};
        MPI_Send(rw, 2, MPI_INT, f.root, f.tag, MPI_COMM_WORLD);
        MPI_Recv(table, nranks, MPI_INT, f.root, f.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Group wg, g;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, nranks, table, &g);
    fake_comm *c = calloc(1, sizeof *c);
    int rc = c ? MPI_Comm_create_group(MPI_COMM_WORLD, g, f.tag, &c->comm) : MPI_ERR_NO_MEM;
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    free(table);
    if (rc != MPI_SUCCESS) {
        free(c);
        return ncclSystemError;
    }
    c->rank = rank;
    c->size = nranks;
    /* NCCL refuses two ranks of one communicator on one GPU */
    int dev = device_ordinal(), *devs = calloc((size_t)nranks, sizeof *devs);
    if (!devs) return ncclSystemError;
    MPI_Allgather(&dev, 1, MPI_INT, devs, 1, MPI_INT, c->comm);
    int dup = 0;
    for (int i = 0; i < nranks; i++)
        for (int j = i + 1; j < nranks; j++) dup |= devs[i] == devs[j];
    free(devs);
    if (dup) {
        MPI_Comm_free(&c->comm);
        free(c);
        return ncclInvalidUsage;
    }
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    MPI_Comm_free(&c->comm);
    free(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }

/* --------------------------------------------------------- elements */

static size_t type_size(int t) {
    static const size_t s[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return t >= 0 && t < ncclNumTypes ? s[t] : 0;
}

static float bf16_to_f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1);                                           /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* element i of buffer p of type t as a double (floats) or int64 (integers) */
static double get_f(const void *p, int t, size_t i) {
    switch (t) {
    case ncclFloat16: return (double)((const _Float16 *)p)[i];
    case ncclBfloat16: return bf16_to_f(((const uint16_t *)p)[i]);
    case ncclFloat32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static int64_t get_i(const void *p, int t, size_t i) {
    switch (t) {
    case ncclInt8: return ((const int8_t *)p)[i];
    case ncclUint8: return ((const uint8_t *)p)[i];
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclUint32: return ((const uint32_t *)p)[i];
    case ncclInt64: return ((const int64_t *)p)[i];
    default: return (int64_t)((const uint64_t *)p)[i];
    }
}

static void put_i(void *p, int t, size_t i, int64_t v) {
    switch (t) {
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t *)p)[i] = v; break;
    default: ((uint64_t *)p)[i] = (uint64_t)v; break;
    }
}

static int is_float(int t) { return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16; }

/* dst (n) = op over the S slices of src (S, n), in rank order. fp32 adds in
 * fp32; fp16/bf16 in fp32, rounded once; fp64 in fp64. */
static void reduce(void *dst, const char *src, int S, size_t n, int t, int op) {
    size_t es = type_size(t);
    for (size_t i = 0; i < n; i++) {
        if (is_float(t)) {
            float a32 = (float)get_f(src, t, i);
            double a64 = get_f(src, t, i);
            for (int r = 1; r < S; r++) {
                double x = get_f(src + (size_t)r * n * es, t, i);
                float x32 = (float)x;
                switch (op) {
                case ncclSum:
                case ncclAvg: a32 += x32, a64 += x; break;
                case ncclProd: a32 *= x32, a64 *= x; break;
                case ncclMax: a32 = x32 > a32 ? x32 : a32, a64 = x > a64 ? x : a64; break;
                default: a32 = x32 < a32 ? x32 : a32, a64 = x < a64 ? x : a64; break;
                }
            }
            if (op == ncclAvg) a32 /= (float)S, a64 /= S;
            if (t == ncclFloat64) ((double *)dst)[i] = a64;
            else if (t == ncclFloat32) ((float *)dst)[i] = a32;
            else if (t == ncclBfloat16) ((uint16_t *)dst)[i] = f_to_bf16(a32);
            else ((_Float16 *)dst)[i] = (_Float16)a32;
        } else {
            int64_t a = get_i(src, t, i);
            for (int r = 1; r < S; r++) {
                int64_t x = get_i(src + (size_t)r * n * es, t, i);
                a = op == ncclSum || op == ncclAvg ? a + x
                    : op == ncclProd               ? a * x
                    : op == ncclMax                ? (x > a ? x : a)
                                                   : (x < a ? x : a);
            }
            if (op == ncclAvg) a /= S;
            put_i(dst, t, i, a);
        }
    }
}

/* ------------------------------------------------------- collectives */

static int group_depth; /* ncclGroupStart calls not yet ended */

/* The arguments of a collective whose buffers a (na bytes) and b (nb bytes)
 * are its send and receive buffers; counts it under kind. */
static ncclResult_t check(ncclComm_t c, const void *a, size_t na, const void *b, size_t nb, size_t n, int t,
                          const char *name, int kind) {
    if (!c) return ncclInvalidArgument;
    if (!type_size(t)) return fail(c, ncclInvalidArgument, "invalid data type");
    if (n && (!a || !b)) return fail(c, ncclInvalidArgument, "NULL buffer");
    if (n * type_size(t) > (size_t)INT32_MAX / (size_t)c->size) return fail(c, ncclInvalidArgument, "too large");
    if (n && (!on_device(a, na) || !on_device(b, nb))) /* as NCCL checks with cudaPointerGetAttributes */
        return fail(c, ncclInvalidArgument, "a buffer is not (wholly) device memory");
    if (failing(name)) return fail(c, ncclInternalError, "failing as FAKE_NCCL_FAIL asks");
    if (group_depth && kind != 4) { /* NCCL would fuse it into the group: this fake runs only sends/receives there */
        fprintf(stderr, "fake_nccl: %s inside ncclGroupStart/End: only ncclSend/ncclRecv are grouped here\n", name);
        return fail(c, ncclInvalidUsage, "a collective inside a group (the fake groups only ncclSend/ncclRecv)");
    }
    n_collectives++;
    n_kind[kind]++;
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t t, ncclComm_t c,
                           void *stream) {
    size_t b = sendcount * type_size(t);
    ncclResult_t r = check(c, sendbuff, b, recvbuff, c ? b * (size_t)c->size : 0, sendcount, t, "ncclAllGather", 0);
    if (r != ncclSuccess) return r;
    const void *s = sendbuff == (char *)recvbuff + (size_t)c->rank * b ? MPI_IN_PLACE : sendbuff;
    sim_enter(stream, "ncclAllGather");
    MPI_Allgather(s, (int)b, MPI_BYTE, recvbuff, (int)b, MPI_BYTE, c->comm);
    sim_leave();
    return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, void *stream) {
    size_t b = recvcount * type_size(t);
    ncclResult_t r = check(c, sendbuff, c ? b * (size_t)c->size : 0, recvbuff, b, recvcount, t, "ncclReduceScatter", 1);
    if (r != ncclSuccess) return r;
    if ((int)op < 0 || op >= ncclNumOps) return fail(c, ncclInvalidArgument, "invalid reduction operation");
    char *tmp = malloc(b * (size_t)c->size + 1);
    if (!tmp) return ncclSystemError;
    /* the slices for this rank arrive before recvbuff is written: in place is safe */
    sim_enter(stream, "ncclReduceScatter");
    MPI_Alltoall(sendbuff, (int)b, MPI_BYTE, tmp, (int)b, MPI_BYTE, c->comm);
    reduce(recvbuff, tmp, c->size, recvcount, t, op);
    sim_leave();
    free(tmp);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, void *stream) {
    size_t b = count * type_size(t);
    ncclResult_t r = check(c, sendbuff, b, recvbuff, b, count, t, "ncclAllReduce", 2);
    if (r != ncclSuccess) return r;
    if ((int)op < 0 || op >= ncclNumOps) return fail(c, ncclInvalidArgument, "invalid reduction operation");
    char *tmp = malloc(b * (size_t)c->size + 1);
    if (!tmp) return ncclSystemError;
    sim_enter(stream, "ncclAllReduce");
    MPI_Allgather(sendbuff, (int)b, MPI_BYTE, tmp, (int)b, MPI_BYTE, c->comm);
    reduce(recvbuff, tmp, c->size, count, t, op);
    sim_leave();
    free(tmp);
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           void *stream) {
    size_t b = count * type_size(t);
    const void *in = c && c->rank == root ? sendbuff : recvbuff;
    ncclResult_t r = check(c, in, b, recvbuff, b, count, t, "ncclBroadcast", 3);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= c->size) return fail(c, ncclInvalidArgument, "invalid root");
    sim_enter(stream, "ncclBroadcast");
    if (c->rank == root && sendbuff != recvbuff) memmove(recvbuff, sendbuff, b);
    MPI_Bcast(recvbuff, (int)b, MPI_BYTE, root, c->comm);
    sim_leave();
    return ncclSuccess;
}

/* ------------------------------------------------ point to point, groups */

typedef struct {
    int send; /* 1 send, 0 receive */
    void *buf;
    size_t bytes;
    int peer;
    ncclComm_t comm;
    void *stream;
} p2p_op;

static p2p_op *queued;
static int nqueued, capqueued;

static ncclResult_t post(p2p_op *ops, int n) {
    MPI_Request *rq = calloc((size_t)n + 1, sizeof *rq);
    if (!rq) return ncclSystemError;
    /* every op's stream has run what was queued before it (a group on one
     * stream drains it once: a drained stream is empty) */
    const sim_api *s = sim();
    for (int i = 0; s && i < n; i++) s->drain(ops[i].stream);
    if (s) s->begin("ncclSend/ncclRecv");
    for (int i = 0; i < n; i++) /* receives first, so that sends to self match */
        if (!ops[i].send) MPI_Irecv(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, 7, ops[i].comm->comm, &rq[i]);
    for (int i = 0; i < n; i++)
        if (ops[i].send) MPI_Isend(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, 7, ops[i].comm->comm, &rq[i]);
    MPI_Waitall(n, rq, MPI_STATUSES_IGNORE);
    sim_leave();
    free(rq);
    return ncclSuccess;
}

static ncclResult_t p2p(int send, const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                        void *stream) {
    size_t b = count * type_size(t);
    ncclResult_t r = check(c, buf, b, buf, b, count, t, send ? "ncclSend" : "ncclRecv", 4);
    if (r != ncclSuccess) return r;
    n_collectives--; /* one exchange, not one collective per message */
    n_kind[4]--;
    if (peer < 0 || peer >= c->size) return fail(c, ncclInvalidArgument, "invalid peer");
    p2p_op op = {.send = send, .buf = (void *)buf, .bytes = b, .peer = peer, .comm = c, .stream = stream};
    if (!group_depth) {
        n_kind[4]++;
        return post(&op, 1);
    }
    if (nqueued == capqueued) {
        int cap = capqueued ? 2 * capqueued : 16;
        p2p_op *q = realloc(queued, (size_t)cap * sizeof *q);
        if (!q) return ncclSystemError;
        queued = q, capqueued = cap;
    }
    queued[nqueued++] = op;
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, void *stream) {
    return p2p(1, buf, count, t, peer, c, stream);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, void *stream) {
    return p2p(0, buf, count, t, peer, c, stream);
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth > 0) return ncclSuccess;
    if (nqueued) n_collectives++, n_kind[4]++;
    ncclResult_t r = nqueued ? post(queued, nqueued) : ncclSuccess;
    nqueued = 0;
    return r;
}

/* ------------------------------------------------------- CUDA driver */

int cuInit(unsigned flags) { return getenv("FAKE_CUDA_NO_GPU") ? 100 /* CUDA_ERROR_NO_DEVICE */ : 0; }

int cuCtxGetDevice(int *dev) {
    *dev = device_ordinal();
    return 0;
}

int cuDeviceGet(int *dev, int ordinal) {
    *dev = ordinal;
    return 0;
}

int cuDeviceGetPCIBusId(char *bus, int len, int dev) {
    snprintf(bus, (size_t)len, "0000:%02x:00.0", dev & 0xff);
    return 0;
}

int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) {
    if (attribute != 2) return 1; /* CUDA_ERROR_INVALID_VALUE */
    const sim_api *s = sim();
    if (s && !s->range((const void *)(uintptr_t)ptr, 1)) return 1; /* host memory the driver does not know */
    *(int *)data = 2; /* CU_MEMORYTYPE_DEVICE (off the simulator every buffer is the GPU's) */
    return 0;
}

/* The runtime's cudaError_t and the driver's CUresult agree on the codes the
 * backend reads (0 success, 600 not ready). */
int cuEventCreate(void **ev, unsigned flags) {
    if (sim()) return sim()->event_create(ev, flags); /* CU_EVENT_DISABLE_TIMING = cudaEventDisableTiming */
    *ev = malloc(1);
    return *ev ? 0 : 2; /* CUDA_ERROR_OUT_OF_MEMORY */
}

int cuEventDestroy_v2(void *ev) {
    if (sim()) return sim()->event_destroy(ev);
    free(ev);
    return 0;
}

int cuEventRecord(void *ev, void *stream) { return sim() ? sim()->event_record(ev, stream) : 0; }
int cuEventQuery(void *ev) { return sim() ? sim()->event_query(ev) : 0; }
int cuEventSynchronize(void *ev) { return sim() ? sim()->event_sync(ev) : 0; }
int cuStreamSynchronize(void *stream) { return sim() ? sim()->stream_sync(stream) : 0; }

int cuStreamWaitEvent(void *stream, void *ev, unsigned flags) {
    n_stream_waits++;
    return sim() ? sim()->stream_wait(stream, ev, flags) : 0;
}

int cuGetErrorString(int e, const char **s) {
    *s = e == 100 ? "no CUDA-capable device is detected" : "fake CUDA error";
    return 0;
}
