/* sampler.c: sharc_sampler_*, the deterministic batch rule of note
 * [sampler-rule] in sharc/data.h, over windows of a token stream or samples
 * (SFT) alike. The sampler borrows its dataset and owns
 * the permutation of one epoch (SHARC_MEM_OTHER).
 *
 * Note [epoch-permutation]: with shuffling, perm_e of epoch e is drawn as
 *     perm = identity on [0, W); c = 0
 *     for i = W-1 down to 1:
 *         j = sharc_rng_u64(seed, e, c) % (i + 1); c = c + 1
 *         swap perm[i] and perm[j]
 * i.e. draw c of epoch e is Philox counter c of stream e; draw c swaps
 * position W-1-c. (The modulo bias is below (i+1)/2^64: negligible.) Being
 * a pure function of (seed, e, W), the same windows come out whatever the
 * number of ranks, after a restart, and in any order of requests. The
 * permutation of the last epoch asked for is cached, built lazily on the
 * first request for that epoch and rebuilt when another epoch is asked for
 * (O(W) work once per epoch for sequential access). */
#include "sharc/alloc.h"
#include "sharc/data.h"
#include "sharc/rng.h"

struct sharc_sampler {
    sharc_sampler_config cfg;
    const sharc_dataset *data; /* borrowed: outlives the sampler */
    int64_t windows;           /* W */
    int64_t *perm;             /* (W) owned, perm_e of epoch perm_epoch; NULL without shuffle */
    int64_t perm_epoch;        /* -1: none built yet */
};

static sharc_status check_positive(const char *key, int v) {
    if (v >= 1) return SHARC_OK;
    return sharc_error(SHARC_ERR_INVALID, "data: sampler: %s is %d; expected at least 1", key, v);
}

sharc_status sharc_sampler_init(sharc_sampler **out, const sharc_dataset *d, const sharc_sampler_config *c) {
    *out = NULL;
    SHARC_TRY(check_positive("train.seq_len", c->seq_len));
    SHARC_TRY(check_positive("train.batch_size", c->batch_size));
    SHARC_TRY(check_positive("train.grad_accum", c->grad_accum));
    SHARC_TRY(check_positive("the data-parallel size", c->dp_size));
    const int64_t ntokens = sharc_dataset_num_tokens(d);
    const int64_t W = sharc_dataset_num_items(d, c->seq_len);
    if (sharc_dataset_num_samples(d) > 0 && sharc_dataset_longest_sample(d) > (int64_t)c->seq_len + 1)
        return sharc_error(SHARC_ERR_INVALID,
                           "data: '%s' has a sample of %lld tokens, more than train.seq_len + 1 = %lld; "
                           "tokenize with data.max_len <= %lld or raise train.seq_len",
                           sharc_dataset_path(d), (long long)sharc_dataset_longest_sample(d), (long long)c->seq_len + 1,
                           (long long)c->seq_len + 1);
    if (W < 1)
        return sharc_error(SHARC_ERR_INVALID,
                           "data: '%s' holds %lld tokens, fewer than one window of train.seq_len "
                           "+ 1 = %lld tokens; lower train.seq_len or use more data",
                           sharc_dataset_path(d), (long long)ntokens, (long long)c->seq_len + 1);
    sharc_sampler *s = sharc_alloc(sizeof *s, SHARC_MEM_OTHER);
    if (!s) return sharc_error(SHARC_ERR_NOMEM, "data: sampler: out of memory");
    s->cfg = *c;
    s->data = d;
    s->windows = W;
    s->perm_epoch = -1;
    if (c->shuffle) {
        s->perm = sharc_alloc((size_t)W * sizeof(int64_t), SHARC_MEM_OTHER);
        if (!s->perm) {
            sharc_free(s);
            return sharc_error(SHARC_ERR_NOMEM,
                               "data: '%s': cannot allocate the permutation of %lld windows (%lld "
                               "bytes)",
                               sharc_dataset_path(d), (long long)W, (long long)W * (long long)sizeof(int64_t));
        }
    }
    *out = s;
    return SHARC_OK;
}

void sharc_sampler_free(sharc_sampler *s) {
    if (!s) return;
    sharc_free(s->perm);
    sharc_free(s);
}

int64_t sharc_sampler_windows(const sharc_sampler *s) { return s->windows; }

/* Note [epoch-permutation]. */
static void build_perm(sharc_sampler *s, int64_t epoch) {
    const int64_t W = s->windows;
    int64_t *perm = s->perm;
    for (int64_t i = 0; i < W; i++) perm[i] = i;
    uint64_t c = 0;
    for (int64_t i = W - 1; i >= 1; i--) {
        int64_t j = (int64_t)(sharc_rng_u64(s->cfg.seed, (uint64_t)epoch, c++) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    s->perm_epoch = epoch;
}

int64_t sharc_sampler_window_of(sharc_sampler *s, int64_t g) {
    SHARC_CHECK(g >= 0);
    const int64_t epoch = g / s->windows, pos = g % s->windows;
    if (!s->cfg.shuffle) return pos;
    if (s->perm_epoch != epoch) build_perm(s, epoch);
    return s->perm[pos];
}

void sharc_sampler_batch(sharc_sampler *s, int64_t step, int micro, int dp_rank, int32_t *inputs, int32_t *targets) {
    const sharc_sampler_config *c = &s->cfg;
    SHARC_CHECK(step >= 0 && micro >= 0 && micro < c->grad_accum && dp_rank >= 0 && dp_rank < c->dp_size);
    const int64_t T = c->seq_len, B = c->batch_size, R = c->dp_size;
    const int64_t G = B * c->grad_accum * R; /* sequences per step */
    for (int64_t i = 0; i < B; i++) {
        const int64_t j = micro * R * B + dp_rank * B + i;
        const int64_t w = sharc_sampler_window_of(s, step * G + j);
        /* window w = tokens [w T, w T + T + 1), or sample w padded to T */
        sharc_dataset_item(s->data, w, (int)T, inputs + i * T, targets + i * T);
    }
}

void sharc_sampler_positions(sharc_sampler *s, int64_t step, int micro, int dp_rank, int32_t *pos) {
    const sharc_sampler_config *c = &s->cfg;
    SHARC_CHECK(step >= 0 && micro >= 0 && micro < c->grad_accum && dp_rank >= 0 && dp_rank < c->dp_size);
    const int64_t T = c->seq_len, B = c->batch_size, R = c->dp_size;
    const int64_t G = B * c->grad_accum * R;
    for (int64_t i = 0; i < B; i++) {
        const int64_t j = micro * R * B + dp_rank * B + i;
        sharc_dataset_positions(s->data, sharc_sampler_window_of(s, step * G + j), (int)T, pos + i * T);
    }
}
