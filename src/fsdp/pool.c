/* pool.c: sharc_fsdp_pool_*, the gathered-memory slots of note
 * [gathered-bound] (plan.c): a fixed list of buffers, each lent to one unit
 * at a time, some reserved for one unit (root units, SHARD_GRAD_OP). */
#include "engine.h"
#include "sharc/log.h"

#include <stdlib.h>
#include <string.h>

/* n slots with the given capacities (floats), reserved[i] >= 0 dedicates slot
 * i to one unit; carved back to back from `arena` if it is not NULL. */
sharc_status sharc_fsdp_pool_init(sharc_device *dev, sharc_fsdp_pool *p, int n, const int64_t *numel,
                                  const int *reserved, float *arena) {
    memset(p, 0, sizeof *p);
    p->borrowed = arena != NULL;
    p->n = n;
    p->numel = calloc((size_t)(n > 0 ? n : 1), sizeof(int64_t));
    p->reserved = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    p->buf = calloc((size_t)(n > 0 ? n : 1), sizeof(float *));
    p->owner = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    if (!p->buf || !p->owner || !p->numel || !p->reserved) return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    for (int i = 0; i < n; i++) {
        p->owner[i] = -1;
        p->numel[i] = numel[i];
        p->reserved[i] = reserved[i];
        p->buf[i] = arena ? arena : sharc_device_alloc(dev, (size_t)numel[i] * sizeof(float), SHARC_MEM_GATHERED);
        if (arena) arena += numel[i];
        if (!p->buf[i])
            return sharc_error(SHARC_ERR_NOMEM, "fsdp: cannot allocate a gathered buffer of %lld floats",
                               (long long)numel[i]);
    }
    return SHARC_OK;
}

sharc_status sharc_fsdp_pool_events(sharc_device *dev, sharc_fsdp_pool *p) {
    p->ev = calloc((size_t)(p->n > 0 ? p->n : 1), sizeof(sharc_event *));
    p->seq = calloc((size_t)(p->n > 0 ? p->n : 1), sizeof(int64_t));
    if (!p->ev || !p->seq) return sharc_error(SHARC_ERR_NOMEM, "fsdp: out of memory");
    for (int i = 0; i < p->n; i++) SHARC_TRY(sharc_device_event_new(dev, &p->ev[i]));
    return SHARC_OK;
}

void sharc_fsdp_pool_free(sharc_device *dev, sharc_fsdp_pool *p) {
    for (int i = 0; i < p->n && p->ev; i++)
        if (p->ev[i]) sharc_device_event_free(p->ev[i]);
    free(p->ev);
    free(p->seq);
    for (int i = 0; i < p->n && p->buf && !p->borrowed; i++) sharc_device_free(dev, p->buf[i]);
    free(p->buf);
    free(p->owner);
    free(p->numel);
    free(p->reserved);
    memset(p, 0, sizeof *p);
}

float *sharc_fsdp_pool_get(sharc_fsdp_pool *p, int unit, int64_t numel, bool must) {
    int best = -1;
    for (int i = 0; i < p->n && best < 0; i++)
        if (p->reserved[i] == unit && p->owner[i] < 0) best = i;
    if (best < 0)
        for (int i = 0; i < p->n; i++)
            if (p->owner[i] < 0 && p->reserved[i] < 0 && p->numel[i] >= numel &&
                (best < 0 || p->numel[i] < p->numel[best] ||
                 (p->seq && p->numel[i] == p->numel[best] && p->seq[i] < p->seq[best])))
                best = i; /* note [comm-stream]: of equal slots, the one the comm stream used longest ago */
    if (best >= 0) {
        p->owner[best] = unit;
        p->alive++;
        p->peak = p->alive > p->peak ? p->alive : p->peak;
        return p->buf[best];
    }
    if (must) {
        for (int i = 0; i < p->n; i++)
            sharc_log(SHARC_LOG_ERROR, "fsdp: buffer %d: %lld floats, held by unit %d", i, (long long)p->numel[i],
                      p->owner[i]);
        sharc_fatal(__FILE__, __LINE__, "fsdp: no free buffer of %lld floats when unit %d needs one (a schedule bug)",
                    (long long)numel, unit);
    }
    return NULL;
}

int sharc_fsdp_pool_slot(const sharc_fsdp_pool *p, const float *buf) {
    for (int i = 0; i < p->n; i++)
        if (p->buf[i] == buf) return i;
    SHARC_CHECK(!"pool_slot: not a pool buffer");
    return -1;
}

void sharc_fsdp_pool_put(sharc_fsdp_pool *p, const float *buf) {
    for (int i = 0; i < p->n; i++)
        if (p->buf[i] == buf) {
            SHARC_CHECK(p->owner[i] >= 0);
            p->owner[i] = -1;
            p->alive--;
            return;
        }
    SHARC_CHECK(!"pool_put: not a pool buffer");
}
