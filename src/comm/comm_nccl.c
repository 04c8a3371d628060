/* comm_nccl.c: the NCCL backend (note [nccl] in docs/ARCHITECTURE.md) and
 * its registry entry. MPI still launches the job: every NCCL group wraps an
 * MPI group of the same ranks (the "host" group), which bootstraps it (the
 * unique id made on the group's rank 0 and broadcast), carries barriers,
 * splits and collectives on host memory, and carries everything when NCCL
 * cannot (several ranks of the group on one GPU). libnccl.so.2 and the CUDA
 * driver (libcuda.so.1) are loaded with dlopen when the world is made
 * (SHARC_NCCL_LIB and SHARC_CUDA_DRIVER_LIB name other files), so this file
 * needs neither header: the few types and constants below are NCCL's and
 * the driver's documented ABI (nccl.h 2.x, cuda.h). */
#include "comm_impl.h"
#include "sharc/log.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------- NCCL's ABI */

#define NCCL_ID_BYTES 128
typedef struct {
    char internal[NCCL_ID_BYTES];
} nccl_id;
typedef void *nccl_comm_t;
typedef void *cu_stream_t; /* cudaStream_t, CUstream: the same handle */
typedef void *cu_event_t;

enum { NCCL_SUCCESS = 0 };
enum {
    NCCL_INT8 = 0,
    NCCL_UINT8,
    NCCL_INT32,
    NCCL_UINT32,
    NCCL_INT64,
    NCCL_UINT64,
    NCCL_FLOAT16,
    NCCL_FLOAT32,
    NCCL_FLOAT64,
    NCCL_BFLOAT16
};
enum { NCCL_SUM = 0, NCCL_PROD, NCCL_MAX, NCCL_MIN };
/* the first version with ncclBfloat16 (NCCL_VERSION_CODE is major*10000 + minor*100 + patch) */
#define NCCL_MIN_VERSION 21000

enum { CU_SUCCESS = 0, CU_ERROR_NOT_READY = 600 };
enum { CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_UNIFIED = 4 };
enum { CU_EVENT_DISABLE_TIMING = 2 };

typedef struct {
    int (*get_version)(int *);
    int (*get_unique_id)(nccl_id *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_id, int);
    int (*comm_destroy)(nccl_comm_t);
    int (*comm_abort)(nccl_comm_t);
    const char *(*error_string)(int);
    const char *(*last_error)(nccl_comm_t); /* (optional: NCCL 2.13+) */
    int (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, cu_stream_t);
    int (*reduce_scatter)(const void *, void *, size_t, int, int, nccl_comm_t, cu_stream_t);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cu_stream_t);
    int (*broadcast)(const void *, void *, size_t, int, int, nccl_comm_t, cu_stream_t);
    int (*send)(const void *, size_t, int, int, nccl_comm_t, cu_stream_t);
    int (*recv)(void *, size_t, int, int, nccl_comm_t, cu_stream_t);
    int (*group_start)(void);
    int (*group_end)(void);
    /* the CUDA driver */
    int (*cu_init)(unsigned);
    int (*cu_ctx_get_device)(int *);
    int (*cu_device_get)(int *, int);
    int (*cu_device_get_pci_bus_id)(char *, int, int);
    int (*cu_pointer_get_attribute)(void *, int, unsigned long long);
    int (*cu_event_create)(cu_event_t *, unsigned);
    int (*cu_event_destroy)(cu_event_t);
    int (*cu_event_record)(cu_event_t, cu_stream_t);
    int (*cu_event_query)(cu_event_t);
    int (*cu_event_synchronize)(cu_event_t);
    int (*cu_stream_wait_event)(cu_stream_t, cu_event_t, unsigned);
    int (*cu_stream_synchronize)(cu_stream_t);
    int (*cu_get_error_string)(int, const char **);
} nccl_api;

static nccl_api api;
static bool api_loaded;

/* --------------------------------------------------------------- loading */

static sharc_status load_syms(void *lib, const char *file, const char *const *names, void **slots, int n) {
    for (int i = 0; i < n; i++) {
        slots[i] = dlsym(lib, names[i]);
        if (!slots[i])
            return sharc_error(SHARC_ERR_INVALID, "comm: nccl: %s has no %s (not %s?)", file, names[i],
                               names[0][0] == 'n' ? "NCCL 2.10 or newer" : "the CUDA driver");
    }
    return SHARC_OK;
}

static void *open_lib(const char *env, const char *dflt, const char **file) {
    const char *f = getenv(env);
    *file = f && *f ? f : dflt;
    return dlopen(*file, RTLD_NOW | RTLD_LOCAL);
}

/* dlopen NCCL and the CUDA driver once; an error names the file, the
 * variable that names another one, and dlerror's words. */
static sharc_status nccl_load(void) {
    if (api_loaded) return SHARC_OK;
    const char *nf, *cf;
    void *nl = open_lib("SHARC_NCCL_LIB", "libnccl.so.2", &nf);
    if (!nl)
        return sharc_error(SHARC_ERR_INVALID,
                           "comm: nccl: cannot load %s (install NCCL 2.10+ from CUDA, or name the file with "
                           "SHARC_NCCL_LIB): %s",
                           nf, dlerror());
    void *cl = open_lib("SHARC_CUDA_DRIVER_LIB", "libcuda.so.1", &cf);
    if (!cl)
        return sharc_error(SHARC_ERR_INVALID,
                           "comm: nccl: cannot load the CUDA driver %s (NCCL needs an NVIDIA GPU and its driver; "
                           "SHARC_CUDA_DRIVER_LIB names another file): %s",
                           cf, dlerror());
    static const char *const nn[] = {"ncclGetVersion", "ncclGetUniqueId",    "ncclCommInitRank", "ncclCommDestroy",
                                     "ncclCommAbort",  "ncclGetErrorString", "ncclAllGather",    "ncclReduceScatter",
                                     "ncclAllReduce",  "ncclBroadcast",      "ncclSend",         "ncclRecv",
                                     "ncclGroupStart", "ncclGroupEnd"};
    void **ns[] = {(void **)&api.get_version,  (void **)&api.get_unique_id,  (void **)&api.comm_init_rank,
                   (void **)&api.comm_destroy, (void **)&api.comm_abort,     (void **)&api.error_string,
                   (void **)&api.all_gather,   (void **)&api.reduce_scatter, (void **)&api.all_reduce,
                   (void **)&api.broadcast,    (void **)&api.send,           (void **)&api.recv,
                   (void **)&api.group_start,  (void **)&api.group_end};
    static const char *const cn[] = {"cuInit",
                                     "cuCtxGetDevice",
                                     "cuDeviceGet",
                                     "cuDeviceGetPCIBusId",
                                     "cuPointerGetAttribute",
                                     "cuEventCreate",
                                     "cuEventDestroy_v2",
                                     "cuEventRecord",
                                     "cuEventQuery",
                                     "cuEventSynchronize",
                                     "cuStreamWaitEvent",
                                     "cuStreamSynchronize",
                                     "cuGetErrorString"};
    void **cs[] = {(void **)&api.cu_init,
                   (void **)&api.cu_ctx_get_device,
                   (void **)&api.cu_device_get,
                   (void **)&api.cu_device_get_pci_bus_id,
                   (void **)&api.cu_pointer_get_attribute,
                   (void **)&api.cu_event_create,
                   (void **)&api.cu_event_destroy,
                   (void **)&api.cu_event_record,
                   (void **)&api.cu_event_query,
                   (void **)&api.cu_event_synchronize,
                   (void **)&api.cu_stream_wait_event,
                   (void **)&api.cu_stream_synchronize,
                   (void **)&api.cu_get_error_string};
    void *slot[sizeof nn / sizeof *nn];
    SHARC_TRY(load_syms(nl, nf, nn, slot, (int)(sizeof nn / sizeof *nn)));
    for (size_t i = 0; i < sizeof nn / sizeof *nn; i++) memcpy(ns[i], &slot[i], sizeof(void *));
    void *cslot[sizeof cn / sizeof *cn];
    SHARC_TRY(load_syms(cl, cf, cn, cslot, (int)(sizeof cn / sizeof *cn)));
    for (size_t i = 0; i < sizeof cn / sizeof *cn; i++) memcpy(cs[i], &cslot[i], sizeof(void *));
    void *le = dlsym(nl, "ncclGetLastError");
    memcpy(&api.last_error, &le, sizeof le);
    int v = 0;
    if (api.get_version(&v) != NCCL_SUCCESS || v < NCCL_MIN_VERSION)
        return sharc_error(SHARC_ERR_INVALID, "comm: nccl: %s is NCCL version code %d, expected %d or newer (bf16)", nf,
                           v, NCCL_MIN_VERSION);
    int rc = api.cu_init(0);
    if (rc != CU_SUCCESS) {
        const char *why = "unknown error";
        api.cu_get_error_string(rc, &why);
        return sharc_error(SHARC_ERR_INVALID, "comm: nccl: the CUDA driver (%s) found no usable GPU: cuInit: %s", cf,
                           why ? why : "?");
    }
    api_loaded = true;
    return SHARC_OK;
}

/* ---------------------------------------------------------------- errors */

static sharc_status nccl_fail(int rc, nccl_comm_t nc, const char *what) {
    const char *last = nc && api.last_error ? api.last_error(nc) : NULL;
    return sharc_error(SHARC_ERR_COMM, "comm: nccl: %s failed: %s%s%s", what, api.error_string(rc),
                       last && *last ? ": " : "", last && *last ? last : "");
}

static sharc_status cu_fail(int rc, const char *what) {
    const char *why = NULL;
    if (api.cu_get_error_string(rc, &why) != CU_SUCCESS || !why) why = "unknown error";
    return sharc_error(SHARC_ERR_COMM, "comm: nccl: %s failed: %s", what, why);
}

#define NCCL_TRY(call, nc, what)                                                                                       \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_ != NCCL_SUCCESS) return nccl_fail(rc_, nc, what);                                                      \
    } while (0)
#define CU_TRY(call, what)                                                                                             \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_ != CU_SUCCESS) return cu_fail(rc_, what);                                                              \
    } while (0)

/* ---------------------------------------------------------------- groups */

typedef enum { NCCL_LAZY = 0, NCCL_ON, NCCL_HOST } nccl_state;

/* A pending operation: an event recorded on the stream after NCCL's work,
 * or the host group's own request (a collective on host memory). */
typedef struct nccl_req {
    cu_event_t ev;
    void *host_req;
    struct nccl_req *next; /* on the group's spare list (keeping its event) */
} nccl_req;

typedef struct {
    sharc_comm *host; /* the MPI group of the same ranks, in the same order */
    nccl_comm_t nc;   /* made at the first collective on GPU memory */
    nccl_state state;
    nccl_req *spare;
} nccl_impl;

static const sharc_comm_vtable nccl_vtable;

static sharc_status wrap(sharc_comm *host, sharc_comm **out) {
    nccl_impl *n = calloc(1, sizeof *n);
    if (!n) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    n->host = host;
    *out = sharc_comm_new(&nccl_vtable, host->rank, host->size, n);
    if (!*out) {
        free(n);
        return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    }
    return SHARC_OK;
}

/* This rank's GPU as NCCL sees it: the host name and the PCI bus id of the
 * current context's device (device 0 before any context exists, which is
 * the device the CUDA runtime would make current). */
static void gpu_key(char *key, size_t n) {
    char host[64] = "", bus[32] = "none";
    gethostname(host, sizeof host - 1);
    int dev = 0;
    if (api.cu_ctx_get_device(&dev) != CU_SUCCESS && api.cu_device_get(&dev, 0) != CU_SUCCESS) dev = -1;
    if (dev < 0 || api.cu_device_get_pci_bus_id(bus, (int)sizeof bus, dev) != CU_SUCCESS)
        snprintf(bus, sizeof bus, "none");
    snprintf(key, n, "%s|%s", host, bus);
}

/* The group's NCCL communicator, made collectively at its first collective
 * on GPU memory: a fresh unique id from the group's rank 0 over MPI, after
 * checking that no two ranks of the group share a GPU (NCCL refuses that;
 * the group then stays on MPI, said once by its rank 0). */
static sharc_status nccl_up(sharc_comm *c) {
    nccl_impl *n = c->impl;
    if (n->state != NCCL_LAZY) return SHARC_OK;
    enum { K = 128 };
    char *keys = calloc((size_t)c->size, K);
    if (!keys) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    char mine[K] = {0};
    gpu_key(mine, sizeof mine);
    sharc_status st = sharc_comm_all_gather(n->host, mine, keys, K, SHARC_DT_U8);
    int dup_a = -1, dup_b = -1;
    for (int a = 0; st == SHARC_OK && a < c->size && dup_a < 0; a++)
        for (int b = a + 1; b < c->size; b++)
            if (!strncmp(keys + (size_t)a * K, keys + (size_t)b * K, K)) {
                dup_a = a, dup_b = b;
                break;
            }
    if (st == SHARC_OK && dup_a >= 0) {
        static bool said; /* once per process */
        if (c->rank == 0 && !said) {
            said = true;
            char *k = keys + (size_t)dup_a * K, *bar = strchr(k, '|');
            if (bar) *bar = 0;
            sharc_info("comm: nccl: ranks %d and %d of a group of %d share GPU %s on %s, which NCCL refuses: this "
                       "group's collectives go through MPI",
                       dup_a, dup_b, c->size, bar ? bar + 1 : "?", k);
        }
        n->state = NCCL_HOST;
    }
    free(keys);
    SHARC_TRY(st);
    if (n->state == NCCL_HOST) return SHARC_OK;
    nccl_id id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) NCCL_TRY(api.get_unique_id(&id), NULL, "ncclGetUniqueId");
    SHARC_TRY(sharc_comm_broadcast(n->host, &id, sizeof id, SHARC_DT_U8, 0));
    NCCL_TRY(api.comm_init_rank(&n->nc, c->size, id, c->rank), NULL, "ncclCommInitRank");
    n->state = NCCL_ON;
    return SHARC_OK;
}

/* Whether p is memory NCCL can use (the GPU's, or managed). */
static bool on_gpu(const void *p) {
    int type = 0;
    if (!p || api.cu_pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (unsigned long long)(uintptr_t)p) !=
                  CU_SUCCESS)
        return false;
    return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
}

/* NCCL or the host group for a collective over buffers a and b: host
 * memory goes to MPI (the dispatcher's agreements, cards and settling pass
 * host buffers), GPU memory to NCCL unless the group cannot use it. */
static sharc_status route(sharc_comm *c, const char *what, const void *a, const void *b, size_t count, bool *nccl) {
    nccl_impl *n = c->impl;
    *nccl = false;
    if (count == 0 || n->state == NCCL_HOST) return SHARC_OK;
    bool ga = on_gpu(a), gb = on_gpu(b);
    if (ga != gb)
        return sharc_error(SHARC_ERR_INVALID, "comm: nccl: %s with one buffer on the GPU and the other in host memory",
                           what);
    if (!ga) return SHARC_OK;
    SHARC_TRY(nccl_up(c));
    *nccl = n->state == NCCL_ON;
    return SHARC_OK;
}

/* A host-group collective that read data a stream produced: that stream's
 * work so far must be done first (the dispatcher leaves it to backends with
 * streams). */
static sharc_status host_after(sharc_stream *s) { return s ? sharc_device_synchronize(s) : SHARC_OK; }

static sharc_status new_req(nccl_impl *n, nccl_req **out) {
    nccl_req *r = n->spare;
    if (r) n->spare = r->next;
    else if (!(r = calloc(1, sizeof *r))) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    r->host_req = NULL;
    r->next = NULL;
    *out = r;
    return SHARC_OK;
}

static void recycle_req(nccl_impl *n, nccl_req *r) {
    r->next = n->spare;
    n->spare = r;
}

/* After NCCL's work was queued on stream st: blocking, the host waits for
 * the stream; otherwise the request is an event recorded there, which wait,
 * test and wait_on use (wait_on: another stream waits, the host does not). */
static sharc_status nccl_done(nccl_impl *n, cu_stream_t st, void **req) {
    if (!req) {
        CU_TRY(api.cu_stream_synchronize(st), "cuStreamSynchronize");
        return SHARC_OK;
    }
    nccl_req *r = NULL;
    SHARC_TRY(new_req(n, &r));
    int rc = r->ev ? CU_SUCCESS : api.cu_event_create(&r->ev, CU_EVENT_DISABLE_TIMING);
    if (rc == CU_SUCCESS) rc = api.cu_event_record(r->ev, st);
    if (rc != CU_SUCCESS) {
        recycle_req(n, r);
        return cu_fail(rc, "cuEventRecord");
    }
    *req = r;
    return SHARC_OK;
}

/* The host group's request (NULL: done) as one of ours. */
static sharc_status host_req(nccl_impl *n, sharc_status st, void *h, void **req) {
    if (!req) return st;
    *req = NULL;
    if (st != SHARC_OK || !h) return st;
    nccl_req *r = NULL;
    sharc_status ns = new_req(n, &r);
    if (ns != SHARC_OK) {
        n->host->vt->wait(n->host, h);
        return ns;
    }
    r->host_req = h;
    *req = r;
    return SHARC_OK;
}

/* The NCCL type for reducing dt; -1 where NCCL has none. */
static int reduce_type(sharc_dtype dt) {
    switch (dt) {
    case SHARC_DT_F32: return NCCL_FLOAT32;
    case SHARC_DT_BF16: return NCCL_BFLOAT16;
    case SHARC_DT_F16: return NCCL_FLOAT16;
    case SHARC_DT_F64: return NCCL_FLOAT64;
    case SHARC_DT_I8: return NCCL_INT8;
    case SHARC_DT_U8: return NCCL_UINT8;
    case SHARC_DT_I32: return NCCL_INT32;
    case SHARC_DT_U32: return NCCL_UINT32;
    case SHARC_DT_I64: return NCCL_INT64;
    case SHARC_DT_U64: return NCCL_UINT64;
    default: return -1;
    }
}

static int op_of(sharc_reduce_op op) {
    return op == SHARC_REDUCE_OP_MAX ? NCCL_MAX : op == SHARC_REDUCE_OP_MIN ? NCCL_MIN : NCCL_SUM;
}

static sharc_status check_reduce(sharc_dtype dt, const char *what) {
    if (reduce_type(dt) < 0)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "comm: nccl: %s of %s: NCCL has no such type", what,
                           sharc_dtype_st_name(dt));
    return SHARC_OK;
}

/* ----------------------------------------------------------- collectives */

static sharc_status nc_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_stream *s, void **req) {
    nccl_impl *n = c->impl;
    bool gpu;
    SHARC_TRY(route(c, "all-gather", send, recv, count, &gpu));
    if (!gpu) {
        SHARC_TRY(host_after(s));
        void *h = NULL;
        sharc_status st = n->host->vt->all_gather(n->host, send, recv, count, dt, NULL, req ? &h : NULL);
        return host_req(n, st, h, req);
    }
    /* moved, not reduced: bytes (NCCL has no 16-bit integer type) */
    cu_stream_t st = sharc_device_stream_native(s);
    NCCL_TRY(api.all_gather(send, recv, count * sharc_dtype_size(dt), NCCL_UINT8, n->nc, st), n->nc, "ncclAllGather");
    return nccl_done(n, st, req);
}

static sharc_status nc_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                      sharc_reduce_op op, sharc_stream *s, void **req) {
    nccl_impl *n = c->impl;
    bool gpu;
    SHARC_TRY(route(c, "reduce-scatter", send, recv, count, &gpu));
    if (!gpu) {
        SHARC_TRY(host_after(s));
        void *h = NULL;
        sharc_status st = n->host->vt->reduce_scatter(n->host, send, recv, count, dt, op, NULL, req ? &h : NULL);
        return host_req(n, st, h, req);
    }
    SHARC_TRY(check_reduce(dt, "reduce-scatter"));
    cu_stream_t st = sharc_device_stream_native(s);
    NCCL_TRY(api.reduce_scatter(send, recv, count, reduce_type(dt), op_of(op), n->nc, st), n->nc, "ncclReduceScatter");
    return nccl_done(n, st, req);
}

static sharc_status nc_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_reduce_op op, sharc_stream *s, void **req) {
    nccl_impl *n = c->impl;
    bool gpu;
    SHARC_TRY(route(c, "all-reduce", send, recv, count, &gpu));
    if (!gpu) {
        SHARC_TRY(host_after(s));
        void *h = NULL;
        sharc_status st = n->host->vt->all_reduce(n->host, send, recv, count, dt, op, NULL, req ? &h : NULL);
        return host_req(n, st, h, req);
    }
    SHARC_TRY(check_reduce(dt, "all-reduce"));
    cu_stream_t st = s ? sharc_device_stream_native(s) : NULL;
    NCCL_TRY(api.all_reduce(send, recv, count, reduce_type(dt), op_of(op), n->nc, st), n->nc, "ncclAllReduce");
    return nccl_done(n, st, req);
}

/* recv slice q = rank q's slice r: NCCL has no all-to-all of its own, so
 * one ncclSend and one ncclRecv of `count` elements per peer (itself
 * included) in one ncclGroupStart/End, NCCL's documented recipe, queued on
 * the caller's stream like the other collectives (NULL: the legacy one). */
static sharc_status nc_all_to_all(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_stream *s, void **req) {
    nccl_impl *n = c->impl;
    bool gpu;
    SHARC_TRY(route(c, "all-to-all", send, recv, count, &gpu));
    if (!gpu) {
        SHARC_TRY(host_after(s));
        void *h = NULL;
        sharc_status st = n->host->vt->all_to_all(n->host, send, recv, count, dt, NULL, req ? &h : NULL);
        return host_req(n, st, h, req);
    }
    size_t b = count * sharc_dtype_size(dt);
    cu_stream_t st = s ? sharc_device_stream_native(s) : NULL;
    NCCL_TRY(api.group_start(), n->nc, "ncclGroupStart");
    int rc = NCCL_SUCCESS;
    for (int q = 0; q < c->size && rc == NCCL_SUCCESS; q++) {
        rc = api.send((const char *)send + (size_t)q * b, b, NCCL_UINT8, q, n->nc, st);
        if (rc == NCCL_SUCCESS) rc = api.recv((char *)recv + (size_t)q * b, b, NCCL_UINT8, q, n->nc, st);
    }
    int end = api.group_end(); /* always closes the group */
    if (rc != NCCL_SUCCESS) return nccl_fail(rc, n->nc, "ncclSend/ncclRecv");
    if (end != NCCL_SUCCESS) return nccl_fail(end, n->nc, "ncclGroupEnd");
    return nccl_done(n, st, req);
}

static sharc_status nc_broadcast(sharc_comm *c, void *buf, size_t count, sharc_dtype dt, int root) {
    nccl_impl *n = c->impl;
    bool gpu;
    SHARC_TRY(route(c, "broadcast", buf, buf, count, &gpu));
    if (!gpu) return n->host->vt->broadcast(n->host, buf, count, dt, root);
    NCCL_TRY(api.broadcast(buf, buf, count * sharc_dtype_size(dt), NCCL_UINT8, root, n->nc, NULL), n->nc,
             "ncclBroadcast");
    return nccl_done(n, NULL, NULL);
}

static sharc_status nc_barrier(sharc_comm *c) {
    nccl_impl *n = c->impl;
    return n->host->vt->barrier(n->host);
}

static sharc_status nc_wait(sharc_comm *c, void *h) {
    nccl_impl *n = c->impl;
    nccl_req *r = h;
    sharc_status st = SHARC_OK;
    if (r->host_req) st = n->host->vt->wait(n->host, r->host_req);
    else {
        int rc = api.cu_event_synchronize(r->ev);
        if (rc != CU_SUCCESS) st = cu_fail(rc, "cuEventSynchronize");
    }
    recycle_req(n, r);
    return st;
}

static sharc_status nc_test(sharc_comm *c, void *h, bool *done) {
    nccl_impl *n = c->impl;
    nccl_req *r = h;
    sharc_status st = SHARC_OK;
    if (r->host_req) st = n->host->vt->test(n->host, r->host_req, done);
    else {
        int rc = api.cu_event_query(r->ev);
        *done = rc != CU_ERROR_NOT_READY;
        if (*done && rc != CU_SUCCESS) st = cu_fail(rc, "cuEventQuery");
    }
    if (*done || st != SHARC_OK) recycle_req(n, r);
    return st;
}

/* Stream s waits for the collective's event, the host does not; a request
 * of the host group is waited for on the host. */
static sharc_status nc_wait_on(sharc_comm *c, void *h, sharc_stream *s) {
    nccl_impl *n = c->impl;
    nccl_req *r = h;
    if (r->host_req) return nc_wait(c, h);
    int rc = api.cu_stream_wait_event(sharc_device_stream_native(s), r->ev, 0);
    recycle_req(n, r);
    return rc == CU_SUCCESS ? SHARC_OK : cu_fail(rc, "cuStreamWaitEvent");
}

/* sharc_comm_takes_device: the group's communicator is made now if it has
 * none (collective, as at a first collective on GPU memory); a group whose
 * ranks share a GPU stays on MPI, which reads host memory. */
static sharc_status nc_takes_device(sharc_comm *c, bool *out) {
    nccl_impl *n = c->impl;
    *out = false;
    SHARC_TRY(nccl_up(c));
    *out = n->state == NCCL_ON;
    return SHARC_OK;
}

/* A sub-group: MPI splits the host group; the new group makes its own NCCL
 * communicator from a fresh id at its first collective (note [nccl]). */
static sharc_status nc_split(sharc_comm *c, int color, int key, sharc_comm **out) {
    nccl_impl *n = c->impl;
    sharc_comm *h = NULL;
    SHARC_TRY(sharc_comm_split(n->host, color, key, &h));
    sharc_status st = wrap(h, out);
    if (st != SHARC_OK) sharc_comm_free(h);
    return st;
}

static sharc_status nc_split_node(sharc_comm *c, sharc_comm **out) {
    nccl_impl *n = c->impl;
    sharc_comm *h = NULL;
    SHARC_TRY(sharc_comm_split_node(n->host, &h));
    sharc_status st = wrap(h, out);
    if (st != SHARC_OK) sharc_comm_free(h);
    return st;
}

static void nc_abort(sharc_comm *c, int code) {
    nccl_impl *n = c->impl;
    if (n->nc) api.comm_abort(n->nc);
    n->nc = NULL;
    if (n->host->vt->abort) n->host->vt->abort(n->host, code);
}

static void nc_free(sharc_comm *c) {
    nccl_impl *n = c->impl;
    if (n->nc) api.comm_destroy(n->nc);
    while (n->spare) {
        nccl_req *r = n->spare;
        n->spare = r->next;
        if (r->ev) api.cu_event_destroy(r->ev);
        free(r);
    }
    sharc_comm_free(n->host);
    free(n);
    sharc_comm_release(c);
}

static const sharc_comm_vtable nccl_vtable = {
    .name = "nccl",
    .all_gather = nc_all_gather,
    .reduce_scatter = nc_reduce_scatter,
    .all_reduce = nc_all_reduce,
    .all_to_all = nc_all_to_all,
    .broadcast = nc_broadcast,
    .barrier = nc_barrier,
    .split = nc_split,
    .split_node = nc_split_node,
    .wait = nc_wait,
    .test = nc_test,
    .wait_on = nc_wait_on,
    .streams = true,
    .takes_device = nc_takes_device,
    .abort = nc_abort,
    .free = nc_free,
};

/* ----------------------------------------------------------------- world */

/* Chosen without SHARC_COMM only for a job on GPUs (sharc_comm_world_device)
 * that an MPI launcher started. */
static bool nccl_probe(void) {
    const char *dev = sharc_comm_world_device_get();
    return dev && !strcmp(dev, "cuda") && sharc_comm_backend_mpi.probe();
}

/* MPI's world, then NCCL loaded. Asked for by SHARC_COMM=nccl, a library
 * that cannot be loaded is an error (every rank fails alike, after
 * finalizing MPI); chosen for a GPU job, the world stays MPI's, said once. */
static sharc_status nccl_world_init(int *argc, char ***argv, sharc_comm **world) {
    const char *force = getenv("SHARC_COMM");
    sharc_comm *host = NULL;
    SHARC_TRY(sharc_comm_backend_mpi.world_init(argc, argv, &host));
    sharc_status st = nccl_load();
    if (st == SHARC_OK) st = wrap(host, world);
    if (st == SHARC_OK) return SHARC_OK;
    if (!(force && !strcmp(force, "nccl")) && st != SHARC_ERR_NOMEM) {
        if (host->rank == 0) sharc_info("%s; collectives go through MPI", sharc_last_error());
        *world = host;
        return SHARC_OK;
    }
    sharc_comm_free(host);
    if (sharc_comm_backend_mpi.finalize) sharc_comm_backend_mpi.finalize();
    return st;
}

static void nccl_finalize(void) {
    if (sharc_comm_backend_mpi.finalize) sharc_comm_backend_mpi.finalize();
}

const sharc_comm_backend_i sharc_comm_backend_nccl = {
    .name = "nccl",
    .probe = nccl_probe,
    .world_init = nccl_world_init,
    .finalize = nccl_finalize,
};
