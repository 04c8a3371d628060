/* device.c: sharc_device_*, the dispatcher in front of every device backend
 * (sharc/device.h): opening devices from the registry, argument checks,
 * the per-category memory accounts, streams, events, and the fallbacks for
 * a backend's optional slots (note [kernel-table] in sharc/kernels.h). */
#include "device_impl.h"
#include "sharc/clock.h"
#include "sharc/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES_PER_BACKEND 16

/* Devices live for the whole process: opened once, never freed. */
static sharc_device *opened[8][MAX_DEVICES_PER_BACKEND];
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

static sharc_status new_device(const sharc_device_i *iface, int index, sharc_device **out) {
    sharc_device *d = calloc(1, sizeof *d);
    sharc_stream *s0 = calloc(1, sizeof *s0);
    if (!d || !s0) {
        free(d);
        free(s0);
        return sharc_error(SHARC_ERR_NOMEM, "device: out of memory");
    }
    d->i = iface;
    d->index = index;
    d->kernels = *iface->kernels;
    pthread_mutex_init(&d->lock, NULL);
    s0->dev = d;
    d->stream0 = s0;
    sharc_status st = sharc_device_kernels_complete(iface->name, &d->kernels);
    if (st == SHARC_OK && iface->open) st = iface->open(d, index);
    if (st == SHARC_OK && iface->stream_new) st = iface->stream_new(d, s0);
    if (st != SHARC_OK) {
        free(s0);
        free(d);
        return st;
    }
    *out = d;
    return SHARC_OK;
}

sharc_status sharc_device_open(const char *name, int index, sharc_device **out) {
    *out = NULL;
    char names[256] = "";
    for (int b = 0; sharc_device_backends[b]; b++) {
        const sharc_device_i *iface = sharc_device_backends[b];
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", b ? ", " : "", iface->name);
        if (strcmp(iface->name, name) != 0) continue;
        if (iface->probe) {
            sharc_status st = iface->probe();
            if (st != SHARC_OK) return st;
        }
        int n = iface->count();
        if (index < 0 || index >= n || index >= MAX_DEVICES_PER_BACKEND)
            return sharc_error(SHARC_ERR_INVALID, "device: %s device %d does not exist (this machine has %d)", name,
                               index, n);
        pthread_mutex_lock(&open_lock);
        sharc_status st = SHARC_OK;
        if (!opened[b][index]) st = new_device(iface, index, &opened[b][index]);
        *out = opened[b][index];
        pthread_mutex_unlock(&open_lock);
        return st;
    }
    return sharc_error(SHARC_ERR_UNSUPPORTED, "device: no backend named '%s' in this build (it has: %s)", name, names);
}

int sharc_device_count(const char *name) {
    for (int b = 0; sharc_device_backends[b]; b++) {
        const sharc_device_i *iface = sharc_device_backends[b];
        if (strcmp(iface->name, name) != 0) continue;
        if (iface->probe && iface->probe() != SHARC_OK) return 0;
        return iface->count();
    }
    return 0;
}

sharc_device *sharc_device_cpu(void) {
    sharc_device *d;
    if (sharc_device_open("cpu", 0, &d) != SHARC_OK) sharc_fatal(__FILE__, __LINE__, "%s", sharc_last_error());
    return d;
}

const char *sharc_device_name(const sharc_device *d) { return d->i->name; }
bool sharc_device_is_host(const sharc_device *d) { return d->i->host_memory; }
const sharc_kernels *sharc_device_kernels(const sharc_device *d) { return &d->kernels; }

/* ---------------------------------------------------------------- memory */

/* Count `bytes` under `cat` (negative: returned): the host counters for a
 * host device, the device's own otherwise. Called with d->lock held. */
static void account(sharc_device *d, int cat, int64_t bytes) {
    if (d->i->host_memory) {
        sharc_mem_account((sharc_mem_cat)cat, bytes);
        return;
    }
    sharc_mem_stats *m = &d->mem;
    m->current[cat] += bytes;
    m->current_total += bytes;
    if (m->current[cat] > m->peak[cat]) m->peak[cat] = m->current[cat];
    if (m->current_total > m->peak_total) m->peak_total = m->current_total;
}

/* Room for one more entry in the block list (d->lock held). */
static bool blocks_room(sharc_device *d) {
    if (d->nblocks < d->cap) return true;
    size_t cap = d->cap ? 2 * d->cap : 64;
    sharc_device_block *b = realloc(d->blocks, cap * sizeof *b);
    if (!b) {
        sharc_error(SHARC_ERR_NOMEM, "device %s: out of memory", d->i->name);
        return false;
    }
    d->blocks = b;
    d->cap = cap;
    return true;
}

void *sharc_device_alloc(sharc_device *d, size_t bytes, sharc_mem_cat cat) {
    if (cat < 0 || cat >= SHARC_MEM_NCAT) {
        sharc_error(SHARC_ERR_INVALID, "device %s: allocation of %zu bytes in unknown category %d", d->i->name, bytes,
                    (int)cat);
        return NULL;
    }
    pthread_mutex_lock(&d->lock);
    if (!blocks_room(d)) {
        pthread_mutex_unlock(&d->lock);
        return NULL;
    }
    void *p = d->i->alloc(d, bytes);
    if (!p) {
        pthread_mutex_unlock(&d->lock);
        sharc_error(SHARC_ERR_NOMEM, "device %s: cannot allocate %zu bytes for %s", d->i->name, bytes,
                    sharc_mem_cat_name(cat));
        return NULL;
    }
    d->blocks[d->nblocks++] = (sharc_device_block){.p = p, .bytes = bytes, .cat = (int)cat};
    account(d, (int)cat, (int64_t)bytes);
    pthread_mutex_unlock(&d->lock);
    return p;
}

/* Take block p (device memory, or host memory when `host`) out of the
 * accounts; a pointer the device did not hand out that way is fatal. */
static void unaccount(sharc_device *d, void *p, bool host) {
    pthread_mutex_lock(&d->lock);
    /* newest first: buffers are mostly freed in reverse order of allocation */
    size_t k = d->nblocks;
    while (k > 0 && d->blocks[k - 1].p != p) k--;
    if (k == 0 || d->blocks[k - 1].host != host)
        sharc_fatal(__FILE__, __LINE__, "device %s: %s of %p, which it did not allocate", d->i->name,
                    host ? "host_free" : "free", p);
    sharc_device_block b = d->blocks[k - 1];
    d->blocks[k - 1] = d->blocks[--d->nblocks];
    if (host) sharc_mem_account((sharc_mem_cat)b.cat, -(int64_t)b.bytes);
    else account(d, b.cat, -(int64_t)b.bytes);
    pthread_mutex_unlock(&d->lock);
}

void sharc_device_free(sharc_device *d, void *p) {
    if (!p) return;
    unaccount(d, p, false);
    d->i->free(d, p);
}

void *sharc_device_host_alloc(sharc_device *d, size_t bytes, sharc_mem_cat cat) {
    if (cat < 0 || cat >= SHARC_MEM_NCAT) {
        sharc_error(SHARC_ERR_INVALID, "device %s: host allocation of %zu bytes in unknown category %d", d->i->name,
                    bytes, (int)cat);
        return NULL;
    }
    if (!d->i->host_alloc) return sharc_alloc(bytes, cat);
    pthread_mutex_lock(&d->lock);
    if (!blocks_room(d)) {
        pthread_mutex_unlock(&d->lock);
        return NULL;
    }
    void *p = d->i->host_alloc(d, bytes);
    if (!p) {
        pthread_mutex_unlock(&d->lock);
        sharc_error(SHARC_ERR_NOMEM, "device %s: cannot allocate %zu bytes of pinned host memory for %s", d->i->name,
                    bytes, sharc_mem_cat_name(cat));
        return NULL;
    }
    d->blocks[d->nblocks++] = (sharc_device_block){.p = p, .bytes = bytes, .cat = (int)cat, .host = true};
    sharc_mem_account(cat, (int64_t)bytes);
    pthread_mutex_unlock(&d->lock);
    return p;
}

void sharc_device_host_free(sharc_device *d, void *p) {
    if (!p) return;
    if (!d->i->host_alloc) {
        sharc_free(p);
        return;
    }
    unaccount(d, p, true);
    d->i->host_free(d, p);
}

void sharc_device_mem_get(const sharc_device *d, sharc_mem_stats *out) {
    if (d->i->host_memory) {
        sharc_mem_get(out);
        return;
    }
    sharc_device *m = (sharc_device *)d;
    pthread_mutex_lock(&m->lock);
    *out = d->mem;
    pthread_mutex_unlock(&m->lock);
}

void sharc_device_mem_reset_peak(sharc_device *d) {
    if (d->i->host_memory) {
        sharc_mem_reset_peak();
        return;
    }
    pthread_mutex_lock(&d->lock);
    for (int c = 0; c < SHARC_MEM_NCAT; c++) d->mem.peak[c] = d->mem.current[c];
    d->mem.peak_total = d->mem.current_total;
    pthread_mutex_unlock(&d->lock);
}

double sharc_device_peak_flops(const sharc_device *d, sharc_dtype dt, char *how, size_t n) {
    if (n > 0) how[0] = 0;
    double f = d->i->peak_flops ? d->i->peak_flops((sharc_device *)d, dt, how, n) : 0.0;
    if (f <= 0.0 && n > 0 && !how[0]) snprintf(how, n, "%s: no peak known", d->i->name);
    return f > 0.0 ? f : 0.0;
}

double sharc_device_peak_bandwidth(const sharc_device *d, char *how, size_t n) {
    if (n > 0) how[0] = 0;
    double b = d->i->peak_bandwidth ? d->i->peak_bandwidth((sharc_device *)d, how, n) : 0.0;
    if (b <= 0.0 && n > 0 && !how[0]) snprintf(how, n, "%s: no memory bandwidth known", d->i->name);
    return b > 0.0 ? b : 0.0;
}

static sharc_stream *stream_of(sharc_device *d, sharc_stream *s) {
    if (!s) return d->stream0;
    if (s->dev != d)
        sharc_fatal(__FILE__, __LINE__, "device %s: a stream of device %s used on it", d->i->name, s->dev->i->name);
    return s;
}

sharc_status sharc_device_copy(sharc_device *d, void *dst, const void *src, size_t bytes, sharc_copy_kind kind,
                               sharc_stream *s) {
    if (kind < 0 || kind >= SHARC_COPY_COUNT)
        return sharc_error(SHARC_ERR_INVALID, "device %s: copy of unknown kind %d", d->i->name, (int)kind);
    if (bytes == 0) return SHARC_OK;
    if (!dst || !src)
        return sharc_error(SHARC_ERR_INVALID, "device %s: copy of %zu bytes with a NULL pointer", d->i->name, bytes);
    const char *a = dst, *b = src;
    if (kind == SHARC_COPY_DEVICE_TO_DEVICE && a < b + bytes && b < a + bytes && a != b)
        return sharc_error(SHARC_ERR_INVALID, "device %s: copy of %zu bytes between overlapping buffers", d->i->name,
                           bytes);
    if (a == b) return SHARC_OK;
    return d->i->copy(d, dst, src, bytes, kind, stream_of(d, s));
}

sharc_status sharc_device_memset0(sharc_device *d, void *p, size_t bytes, sharc_stream *s) {
    if (bytes == 0) return SHARC_OK;
    if (!p) return sharc_error(SHARC_ERR_INVALID, "device %s: memset of %zu bytes at NULL", d->i->name, bytes);
    return d->i->memset0(d, p, bytes, stream_of(d, s));
}

/* ------------------------------------------------------ streams, events */

sharc_stream *sharc_device_stream(sharc_device *d) { return d->stream0; }

void *sharc_device_stream_native(sharc_stream *s) {
    return s && s->dev->i->stream_native ? s->dev->i->stream_native(s) : NULL;
}

sharc_status sharc_device_stream_new(sharc_device *d, sharc_stream **out) {
    *out = d->stream0;
    if (!d->i->stream_new) return SHARC_OK; /* one implicit stream */
    sharc_stream *s = calloc(1, sizeof *s);
    if (!s) return sharc_error(SHARC_ERR_NOMEM, "device %s: out of memory", d->i->name);
    s->dev = d;
    sharc_status st = d->i->stream_new(d, s);
    if (st != SHARC_OK) {
        free(s);
        return st;
    }
    *out = s;
    return SHARC_OK;
}

void sharc_device_stream_free(sharc_stream *s) {
    if (!s || s == s->dev->stream0) return;
    if (s->dev->i->stream_free) s->dev->i->stream_free(s);
    free(s);
}

sharc_status sharc_device_synchronize(sharc_stream *s) { return s->dev->i->synchronize(s); }

static sharc_status event_new(sharc_device *d, bool timed, sharc_event **out) {
    *out = NULL;
    sharc_event *ev = calloc(1, sizeof *ev);
    if (!ev) return sharc_error(SHARC_ERR_NOMEM, "device %s: out of memory", d->i->name);
    ev->dev = d;
    ev->timed = timed;
    if (d->i->event_new) {
        sharc_status st = d->i->event_new(ev);
        if (st != SHARC_OK) {
            free(ev);
            return st;
        }
    }
    *out = ev;
    return SHARC_OK;
}

sharc_status sharc_device_event_new(sharc_device *d, sharc_event **out) { return event_new(d, false, out); }
sharc_status sharc_device_event_new_timed(sharc_device *d, sharc_event **out) { return event_new(d, true, out); }

void sharc_device_event_free(sharc_event *ev) {
    if (!ev) return;
    if (ev->dev->i->event_free) ev->dev->i->event_free(ev);
    free(ev);
}

sharc_status sharc_device_event_record(sharc_event *ev, sharc_stream *s) {
    s = stream_of(ev->dev, s);
    ev->recorded = true;
    if (!ev->dev->i->event_record) { /* fallback: the point is reached now */
        sharc_status st = sharc_device_synchronize(s);
        ev->recorded_s = sharc_clock_now();
        return st;
    }
    return ev->dev->i->event_record(ev, s);
}

sharc_status sharc_device_event_wait(sharc_event *ev, sharc_stream *s) {
    s = stream_of(ev->dev, s);
    if (!ev->dev->i->event_wait) return SHARC_OK; /* fallback: record already waited */
    return ev->dev->i->event_wait(ev, s);
}

sharc_status sharc_device_host_func(sharc_stream *s, void (*fn)(void *), void *arg) {
    if (s->dev->i->host_func) return s->dev->i->host_func(s, fn, arg);
    SHARC_TRY(s->dev->i->synchronize(s));
    fn(arg);
    return SHARC_OK;
}

sharc_status sharc_device_event_synchronize(sharc_event *ev) {
    if (!ev->dev->i->event_synchronize) return SHARC_OK;
    return ev->dev->i->event_synchronize(ev);
}

sharc_status sharc_device_event_query(sharc_event *ev, bool *done) {
    *done = true;
    if (!ev->dev->i->event_record) return SHARC_OK; /* record waited for the point */
    if (!ev->dev->i->event_query) return sharc_device_event_synchronize(ev);
    return ev->dev->i->event_query(ev, done);
}

sharc_status sharc_device_event_elapsed(sharc_event *start, sharc_event *end, double *seconds) {
    *seconds = 0.0;
    const char *name = start->dev->i->name;
    if (start->dev != end->dev)
        return sharc_error(SHARC_ERR_INVALID, "device %s: event elapsed between events of two devices", name);
    if (!start->timed || !end->timed)
        return sharc_error(SHARC_ERR_INVALID,
                           "device %s: event elapsed of an event made without timing "
                           "(use sharc_device_event_new_timed)",
                           name);
    if (!start->recorded || !end->recorded)
        return sharc_error(SHARC_ERR_INVALID, "device %s: event elapsed of an event never recorded", name);
    if (!start->dev->i->event_record) {
        *seconds = end->recorded_s - start->recorded_s;
        return SHARC_OK;
    }
    if (!start->dev->i->event_elapsed)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "device %s: events cannot be timed", name);
    return start->dev->i->event_elapsed(start, end, seconds);
}

/* ------------------------------------------------ kernel-table fallbacks */

static void add_by_sum_ranks(sharc_stream *s, float *y, const float *a, const float *b, int64_t n) {
    const void *src[2] = {a, b};
    s->dev->kernels.sum_ranks(s, y, src, 2, n, SHARC_DT_F32, false);
}

static bool no_bf16_compute(void) { return false; }

static void accumulate_by_sum_ranks(sharc_stream *s, float *dst, const float *src, int64_t n) {
    const void *one[1] = {src};
    s->dev->kernels.sum_ranks(s, dst, one, 1, n, SHARC_DT_F32, true);
}

/* note [adamw-multi]: the table's entries one adamw call each, from its host copy */
static void adamw_multi_by_adamw(sharc_stream *s, const sharc_adamw_seg *segs, const sharc_adamw_seg *host, int nseg,
                                 const sharc_adamw_scalars *k, float decay_mul) {
    sharc_adamw_scalars e = *k;
    for (int i = 0; i < nseg; i++) {
        e.decay_mul = host[i].decay ? decay_mul : 1.0f;
        s->dev->kernels.adamw(s, host[i].p, host[i].g, host[i].m, host[i].v, host[i].n, &e);
    }
}

/* note [sumsq-multi]: the table's entries one sumsq call each, from its host copy */
static void sumsq_multi_by_sumsq(sharc_stream *s, double *acc, const sharc_sumsq_seg *segs, const sharc_sumsq_seg *host,
                                 int nseg) {
    for (int i = 0; i < nseg; i++) s->dev->kernels.sumsq(s, acc + host[i].which, host[i].x, host[i].n);
}

/* note [add-norm]: the add, then the norm of its result */
static void add_layernorm_by_add(sharc_stream *s, float *sum, float *y, float *mean, float *rstd, const float *x,
                                 const float *r, const float *w, const float *b, int64_t N, int C, float eps) {
    s->dev->kernels.add(s, sum, x, r, N * C);
    s->dev->kernels.layernorm_forward(s, y, mean, rstd, sum, w, b, N, C, eps);
}
static void add_rmsnorm_by_add(sharc_stream *s, float *sum, float *y, float *rstd, const float *x, const float *r,
                               const float *w, int64_t N, int C, float eps) {
    s->dev->kernels.add(s, sum, x, r, N * C);
    s->dev->kernels.rmsnorm_forward(s, y, rstd, sum, w, N, C, eps);
}

/* note [gemm-gelu]: the fused linear + GELU slots' fallbacks, the model's
 * unfused path (gelu_backward runs in place: it is element-wise) */
static void matmul_gelu_forward_unfused(sharc_stream *s, float *pre, float *y, const float *x, const float *w,
                                        const float *b, int64_t N, int IC, int OC) {
    const sharc_kernels *k = &s->dev->kernels;
    k->matmul_forward(s, pre, x, w, b, N, IC, OC);
    k->gelu_forward(s, y, pre, N * OC);
}

static void matmul_backward_dgelu_unfused(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                          const float *x, const float *w, const float *pre, int64_t N, int IC, int OC) {
    const sharc_kernels *k = &s->dev->kernels;
    k->matmul_backward(s, dx, dw, db, dy, x, w, N, IC, OC);
    if (dx) k->gelu_backward(s, dx, dx, pre, N * IC);
}

static void matmul_gelu_forward_b16_unfused(sharc_stream *s, float *pre, float *y, uint16_t *yh, const uint16_t *x,
                                            const uint16_t *w, const float *b, int64_t N, int IC, int OC) {
    const sharc_kernels *k = &s->dev->kernels;
    k->matmul_forward_b16(s, pre, x, w, b, N, IC, OC);
    k->gelu_forward(s, y, pre, N * OC);
    if (yh) k->cast(s, yh, SHARC_DT_BF16, y, SHARC_DT_F32, N * OC);
}

static void matmul_backward_dgelu_b16_unfused(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                              const uint16_t *x, const uint16_t *w, const float *pre, int64_t N, int IC,
                                              int OC) {
    const sharc_kernels *k = &s->dev->kernels;
    k->matmul_backward_b16(s, dx, dw, db, dy, x, w, N, IC, OC);
    if (dx) k->gelu_backward(s, dx, dx, pre, N * IC);
}

/* Every slot: whether a backend must provide it. Kept in the order of the
 * struct; the static assertion below catches a slot added to sharc_kernels
 * and not here. */
// clang-format off
#define SHARC_KERNEL_SLOTS(X) \
    X(matmul_forward, 1) \
    X(matmul_backward, 1) \
    X(layernorm_forward, 1) \
    X(layernorm_backward, 1) \
    X(rmsnorm_forward, 1) \
    X(rmsnorm_backward, 1) \
    X(head_rmsnorm_forward, 1) \
    X(head_rmsnorm_backward, 1) \
    X(gelu_forward, 1) \
    X(gelu_backward, 1) \
    X(swiglu_forward, 1) \
    X(swiglu_backward, 1) \
    X(add, 0) \
    X(embedding_forward, 1) \
    X(embedding_backward, 1) \
    X(rope_table, 1) \
    X(rope_table_pos, 0) \
    X(rope_forward, 1) \
    X(rope_backward, 1) \
    X(attention_workspace, 1) \
    X(attention_forward, 1) \
    X(attention_backward, 1) \
    X(attention_cached, 1) \
    X(xent_forward_backward, 1) \
    X(lmhead_xent, 1) \
    X(moe_route_forward, 0) \
    X(moe_route_backward, 0) \
    X(moe_gather, 0) \
    X(moe_scatter_add, 0) \
    X(moe_row_dot, 0) \
    X(moe_prob_sum, 0) \
    X(vocab_embedding_forward, 1) \
    X(vocab_embedding_backward, 1) \
    X(vocab_xent_stats, 1) \
    X(vocab_xent_finish, 1) \
    X(cast, 1) \
    X(round, 1) \
    X(accumulate, 0) \
    X(sum_ranks, 1) \
    X(sumsq, 1) \
    X(loss_add, 1) \
    X(adamw, 1) \
    X(copy_block, 1) \
    X(fill, 1) \
    X(init_normal, 1) \
    X(adamw_multi, 0) \
    X(sumsq_multi, 0) \
    X(add_layernorm_forward, 0) \
    X(add_rmsnorm_forward, 0) \
    X(bf16_compute, 0) \
    X(matmul_forward_bf16, 0) \
    X(matmul_backward_bf16, 0) \
    X(lmhead_xent_bf16, 0) \
    X(matmul_forward_b16, 0) \
    X(matmul_backward_b16, 0) \
    X(attention_forward_bf16, 0) \
    X(attention_backward_bf16, 0) \
    X(matmul_gelu_forward, 0) \
    X(matmul_backward_dgelu, 0) \
    X(matmul_gelu_forward_b16, 0) \
    X(matmul_backward_dgelu_b16, 0)
// clang-format on

#define COUNT_SLOT(name, required) +1
_Static_assert(sizeof(sharc_kernels) == (0 SHARC_KERNEL_SLOTS(COUNT_SLOT)) * sizeof(void (*)(void)),
               "every slot of sharc_kernels is listed in SHARC_KERNEL_SLOTS");

sharc_status sharc_device_kernels_complete(const char *backend, sharc_kernels *k) {
#define CHECK_SLOT(name, required)                                                                                     \
    if ((required) && !k->name)                                                                                        \
        return sharc_error(SHARC_ERR_UNSUPPORTED, "device %s: kernel not implemented on %s: %s", backend, backend,     \
                           #name);
    SHARC_KERNEL_SLOTS(CHECK_SLOT)
#undef CHECK_SLOT
    if (!k->add) k->add = add_by_sum_ranks;
    if (!k->accumulate) k->accumulate = accumulate_by_sum_ranks;
    if (!k->adamw_multi) k->adamw_multi = adamw_multi_by_adamw;
    if (!k->sumsq_multi) k->sumsq_multi = sumsq_multi_by_sumsq;
    if (!k->add_layernorm_forward) k->add_layernorm_forward = add_layernorm_by_add;
    if (!k->add_rmsnorm_forward) k->add_rmsnorm_forward = add_rmsnorm_by_add;
    /* without bf16 kernels a device computes in fp32 (and says so: bf16_compute false) */
    if (!k->matmul_forward_bf16 || !k->matmul_backward_bf16 || !k->lmhead_xent_bf16) k->bf16_compute = NULL;
    if (!k->bf16_compute || !k->matmul_forward_b16 || !k->matmul_backward_b16)
        k->matmul_forward_b16 = NULL, k->matmul_backward_b16 = NULL; /* both or neither */
    if (!k->bf16_compute) k->bf16_compute = no_bf16_compute;
    if (!k->matmul_forward_bf16) k->matmul_forward_bf16 = k->matmul_forward;
    if (!k->matmul_backward_bf16) k->matmul_backward_bf16 = k->matmul_backward;
    if (!k->lmhead_xent_bf16) k->lmhead_xent_bf16 = k->lmhead_xent;
    if (!k->attention_forward_bf16 || !k->attention_backward_bf16) /* both or neither */
        k->attention_forward_bf16 = k->attention_forward, k->attention_backward_bf16 = k->attention_backward;
    if (!k->matmul_gelu_forward || !k->matmul_backward_dgelu) /* both or neither */
        k->matmul_gelu_forward = matmul_gelu_forward_unfused, k->matmul_backward_dgelu = matmul_backward_dgelu_unfused;
    if (!k->matmul_forward_b16) {
        k->matmul_gelu_forward_b16 = NULL, k->matmul_backward_dgelu_b16 = NULL;
    } else if (!k->matmul_gelu_forward_b16 || !k->matmul_backward_dgelu_b16) {
        k->matmul_gelu_forward_b16 = matmul_gelu_forward_b16_unfused;
        k->matmul_backward_dgelu_b16 = matmul_backward_dgelu_b16_unfused;
    }
    return SHARC_OK;
}
