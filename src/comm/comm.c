/* comm.c: the collective dispatcher (sharc/comm.h): argument checks,
 * statistics, requests (recycled, so a step allocates none after its first),
 * the shared-memory extension, and the choice of backend for the world from
 * the registry (registry.c); no backend is named here. */
#include "comm_impl.h"
#include "sharc/activity.h"
#include "sharc/clock.h"
#include "sharc/flight.h"
#include "sharc/kernels.h"
#include "sharc/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *sharc_coll_kind_name(sharc_coll_kind k) {
    static const char *n[SHARC_COLL_NKINDS] = {"all_gather", "reduce_scatter", "all_reduce",
                                               "broadcast",  "barrier",        "all_to_all"};
    return (k >= 0 && k < SHARC_COLL_NKINDS) ? n[k] : "?";
}

sharc_comm *sharc_comm_new(const sharc_comm_vtable *vt, int rank, int size, void *impl) {
    sharc_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->vt = vt;
    c->rank = rank;
    c->size = size;
    c->impl = impl;
    c->flight_group = sharc_flight_group_new();
    return c;
}

void sharc_comm_release(sharc_comm *c) {
    while (c->spare) {
        sharc_comm_request *r = c->spare;
        c->spare = r->next;
        free(r);
    }
    free(c);
}

int sharc_comm_rank(const sharc_comm *c) { return c->rank; }
int sharc_comm_size(const sharc_comm *c) { return c->size; }
const char *sharc_comm_backend(const sharc_comm *c) { return c->vt->name; }

sharc_status sharc_comm_takes_device(sharc_comm *c, bool *out) {
    *out = false;
    return c->vt->takes_device ? c->vt->takes_device(c, out) : SHARC_OK;
}

void sharc_comm_free(sharc_comm *c) {
    if (!c) return;
    c->vt->free(c);
}

void sharc_comm_abort(sharc_comm *c, int code) {
    if (c && c->vt->abort) c->vt->abort(c, code);
    exit(code);
}

static sharc_status check_buffers(const char *what, const void *send, const void *recv, size_t count, sharc_dtype dt) {
    if (count > 0 && (!send || !recv))
        return sharc_error(SHARC_ERR_INVALID, "comm: %s of %zu elements with a NULL buffer", what, count);
    if (sharc_dtype_size(dt) == 0) return sharc_error(SHARC_ERR_INVALID, "comm: %s: unknown dtype %d", what, (int)dt);
    return SHARC_OK;
}

static bool overlap(const void *a, size_t an, const void *b, size_t bn) {
    const char *x = a, *y = b;
    return an && bn && x < y + bn && y < x + an;
}

static void account(sharc_comm *c, sharc_coll_kind k, int64_t bytes, double seconds) {
    c->stats.calls[k]++;
    c->stats.bytes[k] += bytes;
    c->stats.seconds[k] += seconds;
}

void sharc_comm_stats_get(const sharc_comm *c, sharc_comm_stats *out) { *out = c->stats; }
void sharc_comm_stats_reset(sharc_comm *c) { memset(&c->stats, 0, sizeof c->stats); }

/* A caller's stream, for a backend that does not order collectives on
 * streams: its work so far must be done before the backend reads the data. */
static sharc_status after_stream(sharc_comm *c, sharc_stream *after) {
    if (!after || c->vt->streams) return SHARC_OK;
    return sharc_device_synchronize(after);
}

/* Note [flight] (src/core/flight.c): collective number ++seq of group c
 * starts; its entry ends when the call returns (blocking) or the request
 * completes. */
static uint64_t flight_begin(sharc_comm *c, const char *kind, int64_t bytes, bool nonblocking) {
    return sharc_flight_begin(c->flight_group, ++c->flight_seq, c->size, c->rank, kind, bytes, nonblocking);
}

/* Finish a backend call, blocking or non-blocking, with accounting; fl is
 * its flight entry (ended here unless a request now carries it). */
static sharc_status finish(sharc_comm *c, sharc_coll_kind k, int64_t bytes, double t0, sharc_status st, void *handle,
                           sharc_comm_request **req, uint64_t fl) {
    if (st != SHARC_OK || !req) sharc_flight_end(fl);
    if (st != SHARC_OK) return st;
    if (!req) {
        account(c, k, bytes, sharc_clock_now() - t0);
        return SHARC_OK;
    }
    sharc_comm_request *r = c->spare;
    if (r) c->spare = r->next;
    else if (!(r = calloc(1, sizeof *r))) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    *r = (sharc_comm_request){.comm = c, .kind = k, .impl = handle, .t_start = t0, .flight = fl};
    account(c, k, bytes, sharc_clock_now() - t0); /* the time to post it; waits add the rest */
    *req = r;
    return SHARC_OK;
}

static void recycle(sharc_comm_request *r) {
    sharc_comm *c = r->comm;
    r->next = c->spare;
    c->spare = r;
}

static sharc_status do_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_stream *after, sharc_comm_request **req) {
    SHARC_TRY(check_buffers("all-gather", send, recv, count, dt));
    size_t es = sharc_dtype_size(dt);
    if (overlap(send, count * es, recv, count * es * (size_t)c->size))
        return sharc_error(SHARC_ERR_INVALID, "comm: all-gather buffers overlap (collectives are out of place)");
    SHARC_TRY(after_stream(c, after));
    double t0 = sharc_clock_now();
    void *h = NULL;
    uint64_t fl = flight_begin(c, sharc_coll_kind_name(SHARC_COLL_ALL_GATHER), (int64_t)(count * es), req != NULL);
    sharc_activity_coll_begin(sharc_coll_kind_name(SHARC_COLL_ALL_GATHER), c->size);
    sharc_status st = c->vt->all_gather(c, send, recv, count, dt, after, req ? &h : NULL);
    sharc_activity_coll_end();
    return finish(c, SHARC_COLL_ALL_GATHER, (int64_t)(count * es), t0, st, h, req, fl);
}

static sharc_status do_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                      sharc_reduce_op op, sharc_stream *after, sharc_comm_request **req) {
    SHARC_TRY(check_buffers("reduce-scatter", send, recv, count, dt));
    size_t es = sharc_dtype_size(dt);
    if (overlap(send, count * es * (size_t)c->size, recv, count * es))
        return sharc_error(SHARC_ERR_INVALID, "comm: reduce-scatter buffers overlap (collectives are out of place)");
    SHARC_TRY(after_stream(c, after));
    double t0 = sharc_clock_now();
    void *h = NULL;
    uint64_t fl = flight_begin(c, sharc_coll_kind_name(SHARC_COLL_REDUCE_SCATTER),
                               (int64_t)(count * es * (size_t)c->size), req != NULL);
    sharc_activity_coll_begin(sharc_coll_kind_name(SHARC_COLL_REDUCE_SCATTER), c->size);
    sharc_status st = c->vt->reduce_scatter(c, send, recv, count, dt, op, after, req ? &h : NULL);
    sharc_activity_coll_end();
    return finish(c, SHARC_COLL_REDUCE_SCATTER, (int64_t)(count * es * (size_t)c->size), t0, st, h, req, fl);
}

sharc_status sharc_comm_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt) {
    return do_all_gather(c, send, recv, count, dt, NULL, NULL);
}

sharc_status sharc_comm_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                       sharc_reduce_op op) {
    return do_reduce_scatter(c, send, recv, count, dt, op, NULL, NULL);
}

static sharc_status do_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_reduce_op op, sharc_stream *after, sharc_comm_request **req) {
    SHARC_TRY(check_buffers("all-reduce", send, recv, count, dt));
    size_t es = sharc_dtype_size(dt);
    if (send != recv && overlap(send, count * es, recv, count * es))
        return sharc_error(SHARC_ERR_INVALID, "comm: all-reduce buffers partly overlap");
    SHARC_TRY(after_stream(c, after));
    double t0 = sharc_clock_now();
    uint64_t fl = flight_begin(c, sharc_coll_kind_name(SHARC_COLL_ALL_REDUCE), (int64_t)(count * es), req != NULL);
    sharc_activity_coll_begin(sharc_coll_kind_name(SHARC_COLL_ALL_REDUCE), c->size);
    void *h = NULL;
    sharc_status st = c->vt->all_reduce(c, send, recv, count, dt, op, after, req ? &h : NULL);
    sharc_activity_coll_end();
    return finish(c, SHARC_COLL_ALL_REDUCE, (int64_t)(count * es), t0, st, h, req, fl);
}

sharc_status sharc_comm_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                   sharc_reduce_op op) {
    return do_all_reduce(c, send, recv, count, dt, op, NULL, NULL);
}

sharc_status sharc_comm_iall_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_reduce_op op, sharc_stream *after, sharc_comm_request **req) {
    *req = NULL;
    return do_all_reduce(c, send, recv, count, dt, op, after, req);
}

static sharc_status do_all_to_all(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_stream *after, sharc_comm_request **req) {
    SHARC_TRY(check_buffers("all-to-all", send, recv, count, dt));
    size_t bytes = count * sharc_dtype_size(dt) * (size_t)c->size;
    if (overlap(send, bytes, recv, bytes))
        return sharc_error(SHARC_ERR_INVALID, "comm: all-to-all buffers overlap (collectives are out of place)");
    SHARC_TRY(after_stream(c, after));
    double t0 = sharc_clock_now();
    void *h = NULL;
    uint64_t fl = flight_begin(c, sharc_coll_kind_name(SHARC_COLL_ALL_TO_ALL), (int64_t)bytes, req != NULL);
    sharc_activity_coll_begin(sharc_coll_kind_name(SHARC_COLL_ALL_TO_ALL), c->size);
    sharc_status st = c->vt->all_to_all(c, send, recv, count, dt, after, req ? &h : NULL);
    sharc_activity_coll_end();
    return finish(c, SHARC_COLL_ALL_TO_ALL, (int64_t)bytes, t0, st, h, req, fl);
}

sharc_status sharc_comm_all_to_all(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt) {
    return do_all_to_all(c, send, recv, count, dt, NULL, NULL);
}

sharc_status sharc_comm_iall_to_all(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_stream *after, sharc_comm_request **req) {
    *req = NULL;
    return do_all_to_all(c, send, recv, count, dt, after, req);
}

sharc_status sharc_comm_iall_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_stream *after, sharc_comm_request **req) {
    *req = NULL;
    return do_all_gather(c, send, recv, count, dt, after, req);
}

sharc_status sharc_comm_ireduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                        sharc_reduce_op op, sharc_stream *after, sharc_comm_request **req) {
    *req = NULL;
    return do_reduce_scatter(c, send, recv, count, dt, op, after, req);
}

sharc_status sharc_comm_broadcast(sharc_comm *c, void *buf, size_t count, sharc_dtype dt, int root) {
    SHARC_TRY(check_buffers("broadcast", buf, buf, count, dt));
    if (root < 0 || root >= c->size)
        return sharc_error(SHARC_ERR_INVALID, "comm: broadcast root %d outside [0, %d)", root, c->size);
    double t0 = sharc_clock_now();
    uint64_t fl = flight_begin(c, "broadcast", (int64_t)(count * sharc_dtype_size(dt)), false);
    sharc_activity_coll_begin("broadcast", c->size);
    sharc_status st = c->vt->broadcast(c, buf, count, dt, root);
    sharc_activity_coll_end();
    sharc_flight_end(fl);
    SHARC_TRY(st);
    account(c, SHARC_COLL_BROADCAST, (int64_t)(count * sharc_dtype_size(dt)), sharc_clock_now() - t0);
    return SHARC_OK;
}

sharc_status sharc_comm_barrier(sharc_comm *c) {
    double t0 = sharc_clock_now();
    uint64_t fl = flight_begin(c, "barrier", 0, false);
    sharc_activity_coll_begin("barrier", c->size);
    sharc_status st = c->vt->barrier(c);
    sharc_activity_coll_end();
    sharc_flight_end(fl);
    SHARC_TRY(st);
    account(c, SHARC_COLL_BARRIER, 0, sharc_clock_now() - t0);
    return SHARC_OK;
}

sharc_status sharc_comm_wait(sharc_comm_request *r) {
    if (!r) return SHARC_OK;
    double t0 = sharc_clock_now();
    sharc_activity_coll_begin(sharc_coll_kind_name(r->kind), r->comm->size);
    sharc_status st = r->impl ? r->comm->vt->wait(r->comm, r->impl) : SHARC_OK;
    sharc_activity_coll_end();
    sharc_flight_end(r->flight);
    r->comm->stats.seconds[r->kind] += sharc_clock_now() - t0;
    recycle(r);
    return st;
}

sharc_status sharc_comm_wait_on(sharc_comm_request *r, sharc_stream *s) {
    if (!r) return SHARC_OK;
    if (!r->impl || !r->comm->vt->wait_on || !s) return sharc_comm_wait(r);
    sharc_status st = r->comm->vt->wait_on(r->comm, r->impl, s);
    sharc_flight_end(r->flight);
    recycle(r);
    return st;
}

sharc_status sharc_comm_test(sharc_comm_request *r, bool *done) {
    *done = true;
    if (!r) return SHARC_OK;
    sharc_status st = SHARC_OK;
    if (r->impl) {
        double t0 = sharc_clock_now();
        st = r->comm->vt->test(r->comm, r->impl, done);
        r->comm->stats.seconds[r->kind] += sharc_clock_now() - t0;
    }
    if (*done) sharc_flight_end(r->flight);
    if (*done || st != SHARC_OK) recycle(r);
    return st;
}

sharc_status sharc_comm_split(sharc_comm *c, int color, int key, sharc_comm **out) {
    *out = NULL;
    if (color < 0) return sharc_error(SHARC_ERR_INVALID, "comm: split colour %d must be >= 0", color);
    return c->vt->split(c, color, key, out);
}

sharc_status sharc_comm_split_node(sharc_comm *c, sharc_comm **out) {
    *out = NULL;
    return c->vt->split_node(c, out);
}

/* --------------------------------------------------------- shared memory */

sharc_status sharc_comm_shared_alloc(sharc_comm *c, size_t bytes, sharc_comm_shared **out) {
    *out = NULL;
    if (!c->vt->shm)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "comm: the %s backend has no shared memory", c->vt->name);
    const void **part = calloc((size_t)c->size, sizeof *part);
    if (!part) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    sharc_status st = c->vt->shm->alloc(c, bytes, out);
    if (st != SHARC_OK) {
        free(part);
        return st;
    }
    (*out)->part = part;
    return SHARC_OK;
}

void sharc_comm_shared_free(sharc_comm_shared *s) {
    if (!s) return;
    free(s->part);
    s->comm->vt->shm->free(s);
}

bool sharc_comm_shared_memory_allowed(const sharc_comm *c) { return c->vt->shm && c->vt->shm->allowed(c); }

void sharc_comm_use_shared_memory(sharc_comm *c, bool on) {
    if (c->vt->shm) c->vt->shm->use(c, on);
}

sharc_status sharc_comm_shared_sync(sharc_comm *c, sharc_comm_shared *s) {
    double t0 = sharc_clock_now();
    uint64_t fl = flight_begin(c, "shared-memory barrier", 0, false);
    sharc_activity_coll_begin("shared-memory barrier", c->size);
    sharc_status st = c->vt->shm->sync(c, s);
    sharc_activity_coll_end();
    sharc_flight_end(fl);
    SHARC_TRY(st);
    account(c, SHARC_COLL_BARRIER, 0, sharc_clock_now() - t0);
    return SHARC_OK;
}

sharc_status sharc_comm_shared_reduce_scatter(sharc_comm_shared *s, size_t offset, float *recv, size_t count,
                                              bool add) {
    sharc_comm *c = s->comm;
    size_t full = count * sizeof(float) * (size_t)c->size;
    if (offset > s->bytes || full > s->bytes - offset)
        return sharc_error(SHARC_ERR_INVALID, "comm: shared reduce-scatter of %zu bytes at %zu outside a window of %zu",
                           full, offset, s->bytes);
    double t0 = sharc_clock_now();
    SHARC_TRY(sharc_comm_shared_sync(c, s)); /* every rank's buffer is complete */
    size_t mine = offset + (size_t)c->rank * count * sizeof(float);
    for (int r = 0; r < c->size; r++) s->part[r] = s->base[r] + mine;
    sharc_device *cpu = sharc_device_cpu(); /* the window is host memory */
    sharc_device_kernels(cpu)->sum_ranks(sharc_device_stream(cpu), recv, s->part, c->size, (int64_t)count, SHARC_DT_F32,
                                         add);
    SHARC_TRY(sharc_comm_shared_sync(c, s)); /* nobody reuses a buffer a peer still reads */
    account(c, SHARC_COLL_REDUCE_SCATTER, (int64_t)full, sharc_clock_now() - t0);
    return SHARC_OK;
}

/* ------------------------------------------------------------- the world */

static const sharc_comm_backend_i *world_backend;
static char world_device[16];

void sharc_comm_world_device(const char *device) {
    snprintf(world_device, sizeof world_device, "%s", device ? device : "");
}

const char *sharc_comm_world_device_get(void) { return world_device[0] ? world_device : NULL; }
/* note [job-end] (src/cli/main.c): a duplicate of the world used only by
 * sharc_comm_world_settle, so its all-reduce can never meet a collective a
 * stuck rank is waiting in; and whether this rank left the world's sequence
 * of collectives */
static sharc_comm *verdict;
static bool world_broken;

sharc_status sharc_comm_world_init(int *argc, char ***argv, sharc_comm **world) {
    *world = NULL;
    const char *force = getenv("SHARC_COMM");
    const sharc_comm_backend_i *b = NULL;
    char names[128] = "";
    for (int i = 0; sharc_comm_backends[i] && !b; i++) {
        const sharc_comm_backend_i *cand = sharc_comm_backends[i];
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? " or " : "", cand->name);
        if (force ? strcmp(force, cand->name) == 0 : cand->probe()) b = cand;
    }
    if (!b) return sharc_error(SHARC_ERR_INVALID, "SHARC_COMM='%s': expected %s", force ? force : "", names);
    SHARC_TRY(b->world_init(argc, argv, world));
    world_backend = b;
    sharc_log_set_rank((*world)->rank, (*world)->size);
    return sharc_comm_split(*world, 0, (*world)->rank, &verdict);
}

void sharc_comm_world_finalize(sharc_comm *world) {
    sharc_comm_free(verdict);
    verdict = NULL;
    sharc_comm_free(world);
    if (world_backend && world_backend->finalize) world_backend->finalize();
    world_backend = NULL;
}

bool sharc_comm_world_settle(double seconds) {
    if (world_broken) return false;
    if (!verdict || verdict->size == 1) return true;
    static int32_t one = 1, sum; /* static: a request left pending must not point into a dead frame */
    sharc_comm_request *r = NULL;
    bool done = false;
    sharc_status st = sharc_comm_iall_reduce(verdict, &one, &sum, 1, SHARC_DT_I32, SHARC_REDUCE_OP_SUM, NULL, &r);
    for (double t0 = sharc_clock_now(); st == SHARC_OK; usleep(10000)) {
        st = sharc_comm_test(r, &done);
        if (done || sharc_clock_now() - t0 > seconds) break;
    }
    world_broken = st != SHARC_OK || !done;
    return !world_broken;
}

bool sharc_comm_world_broken(void) { return world_broken; }

/* Note [agreement] (docs/ARCHITECTURE.md). One all-reduce (min) of
 * rank * 8 + status: the first failing rank and its status, so that bad
 * input on one rank is bad input on all (one exit status for the job). */
sharc_status sharc_comm_agree(sharc_comm *c, sharc_status local, sharc_status code, const char *fmt_rank) {
    int32_t v = local != SHARC_OK ? sharc_comm_rank(c) * 8 + (int32_t)local : INT32_MAX, first = INT32_MAX;
    sharc_status st = sharc_comm_all_reduce(c, &v, &first, 1, SHARC_DT_I32, SHARC_REDUCE_OP_MIN);
    if (st != SHARC_OK) return st;
    if (first == INT32_MAX) return SHARC_OK;
    if (local != SHARC_OK) return local; /* keep this rank's own message */
    const sharc_status theirs = (sharc_status)(first % 8);
    return sharc_error(theirs == SHARC_ERR_INVALID || theirs == SHARC_ERR_FORMAT ? theirs : code, fmt_rank,
                       (int)(first / 8));
}
