/* comm_self.c: the one-rank backend, and its registry entry (the world of a
 * process started without a launcher). Every collective is a copy (or
 * nothing); shared memory is plain memory (a window of one part), and the
 * shared-memory collectives are never chosen. */
#include "comm_impl.h"
#include "sharc/alloc.h"

#include <stdlib.h>
#include <string.h>

static sharc_status self_copy(const void *send, void *recv, size_t count, sharc_dtype dt) {
    if (send != recv) memcpy(recv, send, count * sharc_dtype_size(dt));
    return SHARC_OK;
}

static sharc_status self_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_stream *s, void **req) {
    if (req) *req = NULL;
    return self_copy(send, recv, count, dt);
}

static sharc_status self_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                        sharc_reduce_op op, sharc_stream *s, void **req) {
    if (req) *req = NULL;
    return self_copy(send, recv, count, dt);
}

static sharc_status self_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_reduce_op op, sharc_stream *s, void **req) {
    if (req) *req = NULL;
    return self_copy(send, recv, count, dt);
}

static sharc_status self_all_to_all(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_stream *s, void **req) {
    if (req) *req = NULL;
    return self_copy(send, recv, count, dt);
}

static sharc_status self_broadcast(sharc_comm *c, void *buf, size_t count, sharc_dtype dt, int root) {
    return SHARC_OK;
}

static sharc_status self_barrier(sharc_comm *c) { return SHARC_OK; }

static sharc_status self_split(sharc_comm *c, int color, int key, sharc_comm **out) { return sharc_comm_self(out); }
static sharc_status self_split_node(sharc_comm *c, sharc_comm **out) { return sharc_comm_self(out); }
static sharc_status self_wait(sharc_comm *c, void *req) { return SHARC_OK; }

static sharc_status self_test(sharc_comm *c, void *req, bool *done) {
    *done = true;
    return SHARC_OK;
}

static sharc_status self_shared_alloc(sharc_comm *c, size_t bytes, sharc_comm_shared **out) {
    sharc_comm_shared *s = calloc(1, sizeof *s);
    char **base = calloc(1, sizeof(char *));
    char *mem = sharc_alloc(bytes ? bytes : 1, SHARC_MEM_COMM);
    if (!s || !base || !mem) {
        free(s);
        free(base);
        sharc_free(mem);
        return sharc_error(SHARC_ERR_NOMEM, "comm: cannot allocate %zu bytes of shared memory", bytes);
    }
    base[0] = mem;
    *s = (sharc_comm_shared){.comm = c, .size = 1, .bytes = bytes, .base = base, .impl = mem};
    *out = s;
    return SHARC_OK;
}

static void self_shared_free(sharc_comm_shared *s) {
    sharc_free(s->impl);
    free(s->base);
    free(s);
}

static sharc_status self_shared_sync(sharc_comm *c, sharc_comm_shared *s) { return SHARC_OK; }
static void self_use(sharc_comm *c, bool on) {}
static bool self_allowed(const sharc_comm *c) { return false; }
static void self_abort(sharc_comm *c, int code) {}

static const sharc_comm_shm_i self_shm = {
    .alloc = self_shared_alloc,
    .free = self_shared_free,
    .sync = self_shared_sync,
    .use = self_use,
    .allowed = self_allowed,
};

static const sharc_comm_vtable self_vtable = {
    .name = "self",
    .all_gather = self_all_gather,
    .reduce_scatter = self_reduce_scatter,
    .all_reduce = self_all_reduce,
    .all_to_all = self_all_to_all,
    .broadcast = self_broadcast,
    .barrier = self_barrier,
    .split = self_split,
    .split_node = self_split_node,
    .wait = self_wait,
    .test = self_test,
    .shm = &self_shm,
    .abort = self_abort,
    .free = sharc_comm_release,
};

sharc_status sharc_comm_self(sharc_comm **out) {
    *out = sharc_comm_new(&self_vtable, 0, 1, NULL);
    return *out ? SHARC_OK : sharc_error(SHARC_ERR_NOMEM, "comm: out of memory");
}

static bool self_probe(void) { return true; }
static sharc_status self_world_init(int *argc, char ***argv, sharc_comm **world) { return sharc_comm_self(world); }

const sharc_comm_backend_i sharc_comm_backend_self = {
    .name = "self",
    .probe = self_probe,
    .world_init = self_world_init,
};
