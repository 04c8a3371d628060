/* sampler.c: sharc_sampler_*, note [sampler-rule] in sharc/data.h.
 *
 * Shuffling: the permutation of epoch e starts as the identity on [0, W);
 * for i = W-1 down to 1, draw number c = W-1-i (the c-th draw of the epoch)
 * u = sharc_rng_u64(seed, e, c) and swap entries i and u % (i + 1). The
 * permutation of the current epoch is cached. */
#include "sharc/alloc.h"
#include "sharc/data.h"
#include "sharc/rng.h"

#include <stdlib.h>

struct sharc_sampler {
    sharc_sampler_config cfg;
    const sharc_dataset *data;
    int64_t windows;
    int64_t *perm;     /* (windows) permutation of perm_epoch, or NULL */
    int64_t perm_epoch;
};

sharc_status sharc_sampler_init(sharc_sampler **out, const sharc_dataset *d, const sharc_sampler_config *c) {
    *out = NULL;
    if (c->seq_len < 1 || c->batch_size < 1 || c->grad_accum < 1 || c->dp_size < 1)
        return sharc_error(SHARC_ERR_INVALID, "data: sampler needs seq_len, batch_size, grad_accum, dp_size >= 1");
    int64_t W = (sharc_dataset_num_tokens(d) - 1) / c->seq_len;
    if (W < 1)
        return sharc_error(SHARC_ERR_INVALID,
                           "data: %lld tokens hold no window of train.seq_len + 1 = %d tokens; use a shorter "
                           "train.seq_len or more data",
                           (long long)sharc_dataset_num_tokens(d), c->seq_len + 1);
    sharc_sampler *s = calloc(1, sizeof *s);
    if (!s) return sharc_error(SHARC_ERR_NOMEM, "data: out of memory");
    s->cfg = *c;
    s->data = d;
    s->windows = W;
    s->perm_epoch = -1;
    if (c->shuffle) {
        s->perm = sharc_alloc((size_t)W * sizeof(int64_t), SHARC_MEM_OTHER);
        if (!s->perm) {
            free(s);
            return sharc_error(SHARC_ERR_NOMEM, "data: cannot allocate the permutation of %lld windows", (long long)W);
        }
    }
    *out = s;
    return SHARC_OK;
}

void sharc_sampler_free(sharc_sampler *s) {
    if (!s) return;
    sharc_free(s->perm);
    free(s);
}

int64_t sharc_sampler_windows(const sharc_sampler *s) { return s->windows; }

static void build_perm(sharc_sampler *s, int64_t epoch) {
    const int64_t W = s->windows;
    for (int64_t i = 0; i < W; i++) s->perm[i] = i;
    uint64_t draw = 0;
    for (int64_t i = W - 1; i >= 1; i--) {
        uint64_t j = sharc_rng_u64(s->cfg.seed, (uint64_t)epoch, draw++) % (uint64_t)(i + 1);
        int64_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
    s->perm_epoch = epoch;
}

int64_t sharc_sampler_window_of(sharc_sampler *s, int64_t g) {
    int64_t epoch = g / s->windows, pos = g % s->windows;
    if (!s->cfg.shuffle) return pos;
    if (s->perm_epoch != epoch) build_perm(s, epoch);
    return s->perm[pos];
}

void sharc_sampler_batch(sharc_sampler *s, int64_t step, int micro, int dp_rank, int32_t *inputs,
                         int32_t *targets) {
    const sharc_sampler_config *c = &s->cfg;
    const int T = c->seq_len, B = c->batch_size;
    const int64_t G = (int64_t)B * c->grad_accum * c->dp_size;
    for (int i = 0; i < B; i++) {
        int64_t j = (int64_t)micro * c->dp_size * B + (int64_t)dp_rank * B + i;
        int64_t w = sharc_sampler_window_of(s, step * G + j);
        sharc_dataset_read(s->data, w * T, T, inputs + (int64_t)i * T);
        sharc_dataset_read(s->data, w * T + 1, T, targets + (int64_t)i * T);
    }
}
