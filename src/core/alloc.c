/* alloc.c: owns the accounting of every sharc buffer. Each block carries a
 * 64-byte header (size, category) in front of the user pointer so that
 * sharc_free can credit the right category without a lookup table. */
#include "sharc/alloc.h"
#include "sharc/status.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define HEADER 64

typedef struct {
    size_t bytes;
    int cat;
    unsigned magic;
} block_header;

#define BLOCK_MAGIC 0x5ca1ab1eu

static _Atomic int64_t cur[SHARC_MEM_NCAT];
static _Atomic int64_t peak[SHARC_MEM_NCAT];
static _Atomic int64_t cur_total;
static _Atomic int64_t peak_total;

static void raise_peak(_Atomic int64_t *p, int64_t v) {
    int64_t old = atomic_load(p);
    while (v > old && !atomic_compare_exchange_weak(p, &old, v)) {}
}

void *sharc_alloc(size_t bytes, sharc_mem_cat cat) {
    SHARC_CHECK(cat >= 0 && cat < SHARC_MEM_NCAT);
    size_t total = ((bytes + 63) & ~(size_t)63) + HEADER;
    if (total < bytes) {
        sharc_error(SHARC_ERR_NOMEM, "alloc: size %zu overflows", bytes);
        return NULL;
    }
    char *base = aligned_alloc(64, total);
    if (!base) {
        sharc_error(SHARC_ERR_NOMEM, "alloc: cannot allocate %zu bytes for %s", bytes, sharc_mem_cat_name(cat));
        return NULL;
    }
    memset(base, 0, total);
    block_header *h = (block_header *)base;
    h->bytes = bytes;
    h->cat = (int)cat;
    h->magic = BLOCK_MAGIC;
    int64_t c = atomic_fetch_add(&cur[cat], (int64_t)bytes) + (int64_t)bytes;
    raise_peak(&peak[cat], c);
    int64_t t = atomic_fetch_add(&cur_total, (int64_t)bytes) + (int64_t)bytes;
    raise_peak(&peak_total, t);
    return base + HEADER;
}

void sharc_free(void *ptr) {
    if (!ptr) return;
    block_header *h = (block_header *)((char *)ptr - HEADER);
    SHARC_CHECK(h->magic == BLOCK_MAGIC);
    h->magic = 0;
    atomic_fetch_sub(&cur[h->cat], (int64_t)h->bytes);
    atomic_fetch_sub(&cur_total, (int64_t)h->bytes);
    free(h);
}

void sharc_mem_account(sharc_mem_cat cat, int64_t bytes) {
    int64_t c = atomic_fetch_add(&cur[cat], bytes) + bytes;
    raise_peak(&peak[cat], c);
    int64_t t = atomic_fetch_add(&cur_total, bytes) + bytes;
    raise_peak(&peak_total, t);
}

void sharc_mem_get(sharc_mem_stats *out) {
    for (int i = 0; i < SHARC_MEM_NCAT; i++) {
        out->current[i] = atomic_load(&cur[i]);
        out->peak[i] = atomic_load(&peak[i]);
    }
    out->current_total = atomic_load(&cur_total);
    out->peak_total = atomic_load(&peak_total);
}

void sharc_mem_reset_peak(void) {
    for (int i = 0; i < SHARC_MEM_NCAT; i++) atomic_store(&peak[i], atomic_load(&cur[i]));
    atomic_store(&peak_total, atomic_load(&cur_total));
}

const char *sharc_mem_cat_name(sharc_mem_cat cat) {
    static const char *names[SHARC_MEM_NCAT] = {"params", "grads", "optim", "gathered", "activations", "comm", "other"};
    return (cat >= 0 && cat < SHARC_MEM_NCAT) ? names[cat] : "?";
}
