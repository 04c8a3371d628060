/* param_io.c: writes to this rank's parameter shards and parameters by
 * name: the write bracket (sharc_fsdp_shard_write_*), which alone marks the
 * shards updated (note [shared-params] in shm.c), initialisation from
 * (seed, name, index), and whole parameters copied in and out of the part
 * this rank holds. */
#include "engine.h"
#include "sharc/rng.h"

void sharc_fsdp_shard_write_begin(sharc_fsdp *e) {
    if (e->writing++ > 0) return; /* nested: the outermost bracket checks and marks */
    sharc_fsdp_shard_wait(e);     /* note [offload-overlap] (overlap.c): the last step's queued updates */
    /* note [shard-device] (collectives.c): no queued copy to the compute device still reads a host shard */
    if (sharc_fsdp_offloaded(e) && (sharc_device_synchronize(e->stream) != SHARC_OK ||
                                    (e->cstream && sharc_device_synchronize(e->cstream) != SHARC_OK)))
        SHARC_FSDP_COMM_FATAL();
    for (int u = 0; u < e->nunits; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        sharc_fsdp_unit_expect(t, "shard_write_begin", 1u << SHARC_PARAMS_SHARDED | 1u << SHARC_PARAMS_POST_FORWARD,
                               1u << SHARC_GRAD_NONE);
        /* note [post-forward]: a slice kept by a forward-only pass would be stale */
        sharc_fsdp_unit_reshard(e, t);
    }
}

float *sharc_fsdp_shard_write(sharc_fsdp *e, int u) {
    sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    if (!e->writing)
        sharc_fatal(__FILE__, __LINE__, "fsdp: shard of unit %d '%s' written outside sharc_fsdp_shard_write_begin/_end",
                    u, t->spec.name);
    return t->param_shard;
}

/* Note [shard-host-io]. Copies between host memory and a shard go through
 * the device on the engine's shard stream; _copy_in/_out wait for theirs, so
 * a caller may reuse its host buffer at once, _queue_in/_out do not, so a
 * caller batches a unit's or a file's copies behind one wait (the
 * importers, note [ckpt-pinned]); on the CPU device they are memcpy. */
sharc_status sharc_fsdp_shard_queue_in(sharc_fsdp *e, int u, int64_t shard_off, const float *src, int64_t n) {
    sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    SHARC_CHECK(shard_off >= 0 && n >= 0 && shard_off + n <= t->numel_shard);
    SHARC_TRY(sharc_fsdp_shard_sync(e)); /* note [offload-overlap] (overlap.c) */
    return sharc_device_copy(e->sdev, sharc_fsdp_shard_write(e, u) + shard_off, src, (size_t)n * sizeof(float),
                             SHARC_COPY_HOST_TO_DEVICE, e->sstream);
}

sharc_status sharc_fsdp_shard_copy_in(sharc_fsdp *e, int u, int64_t shard_off, const float *src, int64_t n) {
    SHARC_TRY(sharc_fsdp_shard_queue_in(e, u, shard_off, src, n));
    return sharc_device_synchronize(e->sstream);
}

sharc_status sharc_fsdp_shard_queue_out(const sharc_fsdp *e, int u, int64_t shard_off, float *dst, int64_t n) {
    const sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    SHARC_CHECK(shard_off >= 0 && n >= 0 && shard_off + n <= t->numel_shard);
    SHARC_TRY(sharc_fsdp_shard_sync(e)); /* note [offload-overlap] (overlap.c) */
    return sharc_device_copy(e->sdev, dst, t->param_shard + shard_off, (size_t)n * sizeof(float),
                             SHARC_COPY_DEVICE_TO_HOST, e->sstream);
}

sharc_status sharc_fsdp_shard_copy_out(const sharc_fsdp *e, int u, int64_t shard_off, float *dst, int64_t n) {
    SHARC_TRY(sharc_fsdp_shard_queue_out(e, u, shard_off, dst, n));
    return sharc_device_synchronize(e->sstream);
}

void sharc_fsdp_shard_write_end(sharc_fsdp *e) {
    SHARC_CHECK(e->writing > 0);
    if (--e->writing > 0) return;
    /* the device's writes are done before anyone reads them; with shared
     * parameters the next gather synchronises the group. Note [comm-stream]
     * (collectives.c): there every reader is ordered after them without the
     * host (a gather behind the compute stream's event, a copy out waited for
     * itself) */
    if (!e->cstream && sharc_device_synchronize(e->sstream) != SHARC_OK) SHARC_FSDP_COMM_FATAL();
    e->params_dirty = true;
}

bool sharc_fsdp_params_shared(const sharc_fsdp *e) { return e->pglobal != NULL; }

void sharc_fsdp_init_params(sharc_fsdp *e, uint64_t seed) {
    sharc_fsdp_shard_write_begin(e);
    for (int u = 0; u < e->nunits; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        float *shard = sharc_fsdp_shard_write(e, u);
        for (int s = 0; s < t->nseg; s++) {
            const sharc_segment *g = &t->segs[s];
            const sharc_param_spec *p = &t->spec.params[g->param];
            float *dst = shard + g->shard_off;
            if (p->init == SHARC_INIT_NORMAL)
                e->sk->init_normal(e->sstream, dst, g->len, p->std, seed, sharc_rng_stream(p->name),
                                   (uint64_t)g->param_off);
            else e->sk->fill(e->sstream, dst, p->init == SHARC_INIT_ONES ? 1.0f : 0.0f, g->len);
        }
    }
    sharc_fsdp_shard_write_end(e);
}

sharc_status sharc_fsdp_find_param(const sharc_fsdp *e, const char *name, int *unit, int *param) {
    for (int u = 0; u < e->nunits; u++) {
        int p = sharc_unit_find_param(&e->units[u].spec, name);
        if (p >= 0) {
            *unit = u;
            *param = p;
            return SHARC_OK;
        }
    }
    return sharc_error(SHARC_ERR_INVALID, "fsdp: no parameter named '%s' in this model", name);
}

/* The unit and index of parameter `name`, whose size must be numel. */
static sharc_status find_sized(const sharc_fsdp *e, const char *name, int64_t numel, int *u, int *p) {
    SHARC_TRY(sharc_fsdp_find_param(e, name, u, p));
    const sharc_param_spec *ps = &e->units[*u].spec.params[*p];
    if (numel != ps->numel)
        return sharc_error(SHARC_ERR_INVALID, "fsdp: parameter '%s' has %lld elements, got %lld", name,
                           (long long)ps->numel, (long long)numel);
    return SHARC_OK;
}

sharc_status sharc_fsdp_param_write_local(sharc_fsdp *e, const char *name, const float *src, int64_t numel) {
    int u, p;
    sharc_status st = find_sized(e, name, numel, &u, &p);
    sharc_fsdp_shard_write_begin(e); /* whatever the outcome: every rank of the group calls it alike */
    const sharc_fsdp_unit *t = st == SHARC_OK ? &e->units[u] : NULL;
    for (int s = 0; t && st == SHARC_OK && s < t->nseg; s++)
        if (t->segs[s].param == p)
            st = sharc_device_copy(e->sdev, sharc_fsdp_shard_write(e, u) + t->segs[s].shard_off,
                                   src + t->segs[s].param_off, (size_t)t->segs[s].len * sizeof(float),
                                   SHARC_COPY_HOST_TO_DEVICE, e->sstream);
    sharc_fsdp_shard_write_end(e);
    return st;
}

sharc_status sharc_fsdp_param_read_local(const sharc_fsdp *e, const char *name, float *dst, int64_t numel) {
    int u, p;
    SHARC_TRY(find_sized(e, name, numel, &u, &p));
    SHARC_TRY(sharc_fsdp_shard_sync(e)); /* note [offload-overlap] (overlap.c) */
    const sharc_fsdp_unit *t = &e->units[u];
    for (int s = 0; s < t->nseg; s++)
        if (t->segs[s].param == p)
            SHARC_TRY(sharc_device_copy(e->sdev, dst + t->segs[s].param_off, t->param_shard + t->segs[s].shard_off,
                                        (size_t)t->segs[s].len * sizeof(float), SHARC_COPY_DEVICE_TO_HOST, e->sstream));
    return sharc_device_synchronize(e->sstream);
}
