/* comm.c: the collective dispatcher (sharc/comm.h): argument checks,
 * statistics, requests, and the choice of backend for the world. */
#include "comm_impl.h"
#include "sharc/activity.h"
#include "sharc/log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *sharc_coll_kind_name(sharc_coll_kind k) {
    static const char *n[SHARC_COLL_NKINDS] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast",
                                               "barrier"};
    return (k >= 0 && k < SHARC_COLL_NKINDS) ? n[k] : "?";
}

sharc_comm *sharc_comm_new(const sharc_comm_vtable *vt, int rank, int size, void *impl) {
    sharc_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->vt = vt;
    c->rank = rank;
    c->size = size;
    c->impl = impl;
    return c;
}

int sharc_comm_rank(const sharc_comm *c) { return c->rank; }
int sharc_comm_size(const sharc_comm *c) { return c->size; }
const char *sharc_comm_backend(const sharc_comm *c) { return c->vt->name; }

void sharc_comm_free(sharc_comm *c) {
    if (!c) return;
    c->vt->free(c);
}

void sharc_comm_abort(sharc_comm *c, int code) {
    if (c && c->vt->abort) c->vt->abort(c, code);
    exit(code);
}

static sharc_status check_buffers(const char *what, const void *send, const void *recv, size_t count,
                                  sharc_dtype dt) {
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

void sharc_comm_stats_add(sharc_comm *c, sharc_coll_kind k, int64_t bytes, double seconds) {
    account(c, k, bytes, seconds);
}

void sharc_comm_stats_get(const sharc_comm *c, sharc_comm_stats *out) { *out = c->stats; }
void sharc_comm_stats_reset(sharc_comm *c) { memset(&c->stats, 0, sizeof c->stats); }

/* Run a backend call blocking or non-blocking, with accounting. */
static sharc_status finish(sharc_comm *c, sharc_coll_kind k, int64_t bytes, double t0, sharc_status st,
                           void *handle, sharc_comm_request **req) {
    if (st != SHARC_OK) return st;
    if (!req) {
        account(c, k, bytes, now() - t0);
        return SHARC_OK;
    }
    sharc_comm_request *r = calloc(1, sizeof *r);
    if (!r) return sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
    r->comm = c;
    r->kind = k;
    r->impl = handle;
    r->t_start = t0;
    c->stats.calls[k]++;
    c->stats.bytes[k] += bytes;
    c->stats.seconds[k] += now() - t0; /* the time to post it; waits add the rest */
    *req = r;
    return SHARC_OK;
}

static sharc_status do_allgather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                 sharc_comm_request **req) {
    SHARC_TRY(check_buffers("all-gather", send, recv, count, dt));
    size_t es = sharc_dtype_size(dt);
    if (overlap(send, count * es, recv, count * es * (size_t)c->size))
        return sharc_error(SHARC_ERR_INVALID, "comm: all-gather buffers overlap (collectives are out of place)");
    double t0 = now();
    void *h = NULL;
    sharc_activity_coll_begin(sharc_coll_kind_name(SHARC_COLL_ALLGATHER), c->size);
    sharc_status st = c->vt->allgather(c, send, recv, count, dt, req ? &h : NULL);
    sharc_activity_coll_end();
    return finish(c, SHARC_COLL_ALLGATHER, (int64_t)(count * es), t0, st, h, req);
}

static sharc_status do_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                      sharc_reduce_op op, sharc_comm_request **req) {
    SHARC_TRY(check_buffers("reduce-scatter", send, recv, count, dt));
    size_t es = sharc_dtype_size(dt);
    if (overlap(send, count * es * (size_t)c->size, recv, count * es))
        return sharc_error(SHARC_ERR_INVALID, "comm: reduce-scatter buffers overlap (collectives are out of place)");
    double t0 = now();
    void *h = NULL;
    sharc_activity_coll_begin(sharc_coll_kind_name(SHARC_COLL_REDUCE_SCATTER), c->size);
    sharc_status st = c->vt->reduce_scatter(c, send, recv, count, dt, op, req ? &h : NULL);
    sharc_activity_coll_end();
    return finish(c, SHARC_COLL_REDUCE_SCATTER, (int64_t)(count * es * (size_t)c->size), t0, st, h, req);
}

static sharc_status do_allreduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                 sharc_reduce_op op, sharc_comm_request **req) {
    SHARC_TRY(check_buffers("all-reduce", send, recv, count, dt));
    size_t es = sharc_dtype_size(dt);
    if (send != recv && overlap(send, count * es, recv, count * es))
        return sharc_error(SHARC_ERR_INVALID, "comm: all-reduce buffers partly overlap");
    double t0 = now();
    void *h = NULL;
    sharc_activity_coll_begin(sharc_coll_kind_name(SHARC_COLL_ALLREDUCE), c->size);
    sharc_status st = c->vt->allreduce(c, send, recv, count, dt, op, req ? &h : NULL);
    sharc_activity_coll_end();
    return finish(c, SHARC_COLL_ALLREDUCE, (int64_t)(count * es), t0, st, h, req);
}

sharc_status sharc_comm_allgather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt) {
    return do_allgather(c, send, recv, count, dt, NULL);
}
sharc_status sharc_comm_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                       sharc_reduce_op op) {
    return do_reduce_scatter(c, send, recv, count, dt, op, NULL);
}
sharc_status sharc_comm_allreduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                  sharc_reduce_op op) {
    return do_allreduce(c, send, recv, count, dt, op, NULL);
}
sharc_status sharc_comm_iallgather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                   sharc_comm_request **req) {
    *req = NULL;
    return do_allgather(c, send, recv, count, dt, req);
}
sharc_status sharc_comm_ireduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count,
                                        sharc_dtype dt, sharc_reduce_op op, sharc_comm_request **req) {
    *req = NULL;
    return do_reduce_scatter(c, send, recv, count, dt, op, req);
}
sharc_status sharc_comm_iallreduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                   sharc_reduce_op op, sharc_comm_request **req) {
    *req = NULL;
    return do_allreduce(c, send, recv, count, dt, op, req);
}

sharc_status sharc_comm_broadcast(sharc_comm *c, void *buf, size_t count, sharc_dtype dt, int root) {
    SHARC_TRY(check_buffers("broadcast", buf, buf, count, dt));
    if (root < 0 || root >= c->size)
        return sharc_error(SHARC_ERR_INVALID, "comm: broadcast root %d outside [0, %d)", root, c->size);
    double t0 = now();
    sharc_activity_coll_begin("broadcast", c->size);
    sharc_status st = c->vt->broadcast(c, buf, count, dt, root);
    sharc_activity_coll_end();
    SHARC_TRY(st);
    account(c, SHARC_COLL_BROADCAST, (int64_t)(count * sharc_dtype_size(dt)), now() - t0);
    return SHARC_OK;
}

sharc_status sharc_comm_barrier(sharc_comm *c) {
    double t0 = now();
    sharc_activity_coll_begin("barrier", c->size);
    sharc_status st = c->vt->barrier(c);
    sharc_activity_coll_end();
    SHARC_TRY(st);
    account(c, SHARC_COLL_BARRIER, 0, now() - t0);
    return SHARC_OK;
}

sharc_status sharc_comm_wait(sharc_comm_request *r) {
    if (!r) return SHARC_OK;
    double t0 = now();
    sharc_activity_coll_begin(sharc_coll_kind_name(r->kind), r->comm->size);
    sharc_status st = r->impl ? r->comm->vt->wait(r->comm, r->impl) : SHARC_OK;
    sharc_activity_coll_end();
    r->comm->stats.seconds[r->kind] += now() - t0;
    free(r);
    return st;
}

sharc_status sharc_comm_test(sharc_comm_request *r, bool *done) {
    *done = true;
    if (!r) return SHARC_OK;
    sharc_status st = SHARC_OK;
    if (r->impl) {
        double t0 = now();
        st = r->comm->vt->test(r->comm, r->impl, done);
        r->comm->stats.seconds[r->kind] += now() - t0;
    }
    if (*done || st != SHARC_OK) free(r);
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

sharc_status sharc_comm_shared_alloc(sharc_comm *c, size_t bytes, sharc_comm_shared **out) {
    *out = NULL;
    if (!c->vt->shared_alloc)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "comm: the %s backend has no shared memory", c->vt->name);
    return c->vt->shared_alloc(c, bytes, out);
}

void sharc_comm_shared_free(sharc_comm_shared *s) {
    if (!s) return;
    s->comm->vt->shared_free(s);
}

bool sharc_comm_shared_memory_allowed(const sharc_comm *c) {
    return c->vt->shared_memory_allowed && c->vt->shared_memory_allowed(c);
}

void sharc_comm_use_shared_memory(sharc_comm *c, bool on) {
    if (c->vt->use_shared_memory) c->vt->use_shared_memory(c, on);
}

sharc_status sharc_comm_shared_sync(sharc_comm *c, sharc_comm_shared *s) {
    double t0 = now();
    sharc_activity_coll_begin("shared-memory barrier", c->size);
    sharc_status st = c->vt->shared_sync(c, s);
    sharc_activity_coll_end();
    SHARC_TRY(st);
    account(c, SHARC_COLL_BARRIER, 0, now() - t0);
    return SHARC_OK;
}

/* ------------------------------------------------------------- the world */

static bool mpi_world;
/* note [job-end] (src/cli/main.c): a duplicate of the world used only by
 * sharc_comm_world_settle, so its all-reduce can never meet a collective a
 * stuck rank is waiting in; and whether this rank left the world's sequence
 * of collectives */
static sharc_comm *verdict;
static bool world_broken;

sharc_status sharc_comm_world_init(int *argc, char ***argv, sharc_comm **world) {
    *world = NULL;
    const char *force = getenv("SHARC_COMM");
    bool want_mpi = force ? strcmp(force, "mpi") == 0 : sharc_comm_mpi_launched();
    if (force && strcmp(force, "mpi") != 0 && strcmp(force, "self") != 0)
        return sharc_error(SHARC_ERR_INVALID, "SHARC_COMM='%s': expected mpi or self", force);
    if (!want_mpi) return sharc_comm_self(world);
    SHARC_TRY(sharc_comm_mpi_world_init(argc, argv, world));
    mpi_world = true;
    sharc_log_set_rank((*world)->rank, (*world)->size);
    return sharc_comm_split(*world, 0, (*world)->rank, &verdict);
}

void sharc_comm_world_finalize(sharc_comm *world) {
    sharc_comm_free(verdict);
    verdict = NULL;
    sharc_comm_free(world);
    if (mpi_world) sharc_comm_mpi_finalize();
    mpi_world = false;
}

bool sharc_comm_world_settle(double seconds) {
    if (world_broken) return false;
    if (!verdict || verdict->size == 1) return true;
    static int32_t one = 1, sum; /* static: a request left pending must not point into a dead frame */
    sharc_comm_request *r = NULL;
    bool done = false;
    sharc_status st = sharc_comm_iallreduce(verdict, &one, &sum, 1, SHARC_DT_I32, SHARC_OP_SUM, &r);
    for (double t0 = now(); st == SHARC_OK; usleep(10000)) {
        st = sharc_comm_test(r, &done);
        if (done || now() - t0 > seconds) break;
    }
    world_broken = st != SHARC_OK || !done;
    return !world_broken;
}

bool sharc_comm_world_broken(void) { return world_broken; }

/* Note [agreement] (src/train/trainer.c). One all-reduce (min) of
 * rank * 8 + status: the first failing rank and its status, so that bad
 * input on one rank is bad input on all (one exit status for the job). */
sharc_status sharc_comm_agree(sharc_comm *c, sharc_status local, sharc_status code, const char *fmt_rank) {
    int32_t v = local != SHARC_OK ? sharc_comm_rank(c) * 8 + (int32_t)local : INT32_MAX, first = INT32_MAX;
    sharc_status st = sharc_comm_allreduce(c, &v, &first, 1, SHARC_DT_I32, SHARC_OP_MIN);
    if (st != SHARC_OK) return st;
    if (first == INT32_MAX) return SHARC_OK;
    if (local != SHARC_OK) return local; /* keep this rank's own message */
    const sharc_status theirs = (sharc_status)(first % 8);
    return sharc_error(theirs == SHARC_ERR_INVALID || theirs == SHARC_ERR_FORMAT ? theirs : code, fmt_rank, (int)(first / 8));
}
