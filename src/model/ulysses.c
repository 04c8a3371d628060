/* ulysses.c: sharc_ulysses_*, the all-to-all exchanges of Ulysses sequence
 * parallelism around attention (note [ulysses] in ulysses.h). */
#include "ulysses.h"
#include "sharc/log.h"

#include <string.h>

/* One rank's columns of a row: up to three (offset, length) runs, in floats. */
typedef struct {
    int64_t off[3], len[3];
    int n;
} col_map;

/* The first key/value head rank j takes (note [ulysses]). */
static int kv_first(const sharc_ulysses *u, int j) { return u->NKV >= u->sp ? j * u->NKVl : j * u->NKV / u->sp; }

/* Rank j's query, key and value columns of a qkv row of width QKV. */
static col_map qkv_cols(const sharc_ulysses *u, int j) {
    int64_t hd = u->hd, kv = kv_first(u, j);
    col_map c = {.n = 3};
    c.off[0] = (int64_t)j * u->NHl * hd;
    c.len[0] = (int64_t)u->NHl * hd;
    c.off[1] = (int64_t)u->NH * hd + kv * hd;
    c.off[2] = (int64_t)(u->NH + u->NKV) * hd + kv * hd;
    c.len[1] = c.len[2] = (int64_t)u->NKVl * hd;
    return c;
}

/* Rank j's columns of an attention-output row of width NH hd. */
static col_map att_cols(const sharc_ulysses *u, int j) {
    col_map c = {.n = 1};
    c.off[0] = (int64_t)j * u->NHl * u->hd;
    c.len[0] = (int64_t)u->NHl * u->hd;
    return c;
}

static const sharc_kernels *kern(const sharc_ulysses *u) { return sharc_device_kernels(u->dev); }
static sharc_stream *strm(const sharc_ulysses *u) { return sharc_device_stream(u->dev); }

/* dst (rows, width of map) = the map's columns of src (rows, W). */
static void cols_gather(const sharc_ulysses *u, float *dst, const float *src, int64_t rows, int64_t W,
                        const col_map *c) {
    int64_t w = 0, at = 0;
    for (int k = 0; k < c->n; k++) w += c->len[k];
    for (int k = 0; k < c->n; k++) {
        kern(u)->copy_block(strm(u), dst + at, w, src + c->off[k], W, rows, c->len[k], false);
        at += c->len[k];
    }
}

/* The map's columns of dst (rows, W) (+)= src (rows, width of map). */
static void cols_scatter(const sharc_ulysses *u, float *dst, const float *src, int64_t rows, int64_t W,
                         const col_map *c, bool add) {
    int64_t w = 0, at = 0;
    for (int k = 0; k < c->n; k++) w += c->len[k];
    for (int k = 0; k < c->n; k++) {
        kern(u)->copy_block(strm(u), dst + c->off[k], W, src + at, w, rows, c->len[k], add);
        at += c->len[k];
    }
}

/* Between (sp, B, Tl, W) slices (slice i: tokens of rank i) and (B, Tf, W):
 * for each i, B blocks of Tl W floats. */
static void seq_concat(const sharc_ulysses *u, float *full, const float *slices, int64_t W) {
    const int64_t row = (int64_t)u->Tl * W;
    for (int i = 0; i < u->sp; i++)
        kern(u)->copy_block(strm(u), full + (int64_t)i * row, (int64_t)u->Tf * W, slices + (int64_t)i * u->B * row, row,
                            u->B, row, false);
}

static void seq_split(const sharc_ulysses *u, float *slices, const float *full, int64_t W) {
    const int64_t row = (int64_t)u->Tl * W;
    for (int i = 0; i < u->sp; i++)
        kern(u)->copy_block(strm(u), slices + (int64_t)i * u->B * row, row, full + (int64_t)i * row, (int64_t)u->Tf * W,
                            u->B, row, false);
}

/* note [tp-device] (src/model/tp.h), for sp's group: on device memory the
 * all-to-all is queued after the stream's work and the stream waits for it
 * (no host wait, note [blocking-on-stream]); on the host (MPI, self) the
 * same calls run it at once; staged through host memory otherwise */
static void exchange(sharc_ulysses *u, int64_t count) {
    if (!u->group) sharc_fatal(__FILE__, __LINE__, "ulysses: no sequence-parallel group set");
    sharc_stream *s = strm(u);
    sharc_status st;
    if (!u->link || u->link->direct) {
        sharc_comm_request *req = NULL;
        st = sharc_comm_iall_to_all(u->group, u->send, u->recv, (size_t)count, SHARC_DT_F32, s, &req);
        if (st == SHARC_OK) st = sharc_comm_wait_on(req, s);
    } else {
        st = sharc_tp_link_staged(u->link, s, SHARC_COLL_ALL_TO_ALL, u->send, u->recv, count);
    }
    if (st != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "ulysses: all-to-all over %d ranks failed: %s", u->sp, sharc_last_error());
}

static float *buf(sharc_ulysses *u, int64_t n, bool *ok) {
    float *p = sharc_device_alloc(u->dev, (size_t)n * sizeof(float), SHARC_MEM_ACTIVATIONS);
    if (!p) *ok = false;
    return p;
}

/* The sizes of note [ulysses], no buffers. */
static void set_sizes(sharc_ulysses *u, int sp, int rank, int B, int Tl, int NH, int NKV, int hd) {
    memset(u, 0, sizeof *u);
    u->sp = sp;
    u->rank = rank;
    u->B = B;
    u->Tl = Tl;
    u->Tf = Tl * sp;
    u->NH = NH;
    u->NKV = NKV;
    u->hd = hd;
    u->NHl = NH / sp;
    u->NKVl = NKV >= sp ? NKV / sp : 1;
    u->QKV = (NH + 2 * NKV) * hd;
    u->QKVl = (u->NHl + 2 * u->NKVl) * hd;
}

/* (sp, B, Tl, max(QKVl, NHl hd)): send and recv each */
static int64_t exchange_numel(const sharc_ulysses *u) {
    return (int64_t)u->sp * u->B * u->Tl * (u->QKVl > u->NHl * u->hd ? u->QKVl : u->NHl * u->hd);
}

int64_t sharc_ulysses_buffers_numel(int sp, int B, int Tl, int NH, int NKV, int hd) {
    sharc_ulysses u;
    set_sizes(&u, sp, 0, B, Tl, NH, NKV, hd);
    return 2 * exchange_numel(&u) + (int64_t)B * Tl * u.QKV + sharc_ulysses_qkv_numel(&u) + sharc_ulysses_att_numel(&u);
}

int64_t sharc_ulysses_set_numel(int sp, int B, int Tl, int NH, int NKV, int hd) {
    sharc_ulysses u;
    set_sizes(&u, sp, 0, B, Tl, NH, NKV, hd);
    return sharc_ulysses_qkv_numel(&u) + sharc_ulysses_att_numel(&u);
}

sharc_status sharc_ulysses_init(sharc_ulysses *u, sharc_device *dev, int sp, int rank, int B, int Tl, int NH, int NKV,
                                int hd) {
    memset(u, 0, sizeof *u);
    if (sp < 2 || NH % sp != 0 || (NKV % sp != 0 && sp % NKV != 0) || rank < 0 || rank >= sp)
        return sharc_error(SHARC_ERR_INVALID, "mesh.sp: %d does not fit %d heads and %d key/value heads", sp, NH, NKV);
    set_sizes(u, sp, rank, B, Tl, NH, NKV, hd);
    u->dev = dev;
    bool ok = true;
    u->send = buf(u, exchange_numel(u), &ok);
    u->recv = buf(u, exchange_numel(u), &ok);
    u->qkv_seq = buf(u, (int64_t)B * Tl * u->QKV, &ok);
    u->dqkv_h = buf(u, sharc_ulysses_qkv_numel(u), &ok);
    u->datt_h = buf(u, sharc_ulysses_att_numel(u), &ok);
    if (!ok) {
        sharc_ulysses_free(u);
        return sharc_error(SHARC_ERR_NOMEM,
                           "model: cannot allocate the sequence-parallel buffers (mesh.sp %d, %d x %d "
                           "tokens per rank)",
                           sp, B, Tl);
    }
    return SHARC_OK;
}

void sharc_ulysses_free(sharc_ulysses *u) {
    if (!u->dev) return;
    float *p[5] = {u->send, u->recv, u->qkv_seq, u->dqkv_h, u->datt_h};
    for (int i = 0; i < 5; i++) sharc_device_free(u->dev, p[i]);
    u->send = u->recv = u->qkv_seq = u->dqkv_h = u->datt_h = NULL;
}

int64_t sharc_ulysses_qkv_numel(const sharc_ulysses *u) { return (int64_t)u->B * u->Tf * u->QKVl; }
int64_t sharc_ulysses_att_numel(const sharc_ulysses *u) { return (int64_t)u->B * u->Tf * u->NHl * u->hd; }

void sharc_ulysses_qkv_to_heads(sharc_ulysses *u, float *qkv_h, const float *qkv_seq) {
    int64_t rows = (int64_t)u->B * u->Tl, slice = rows * u->QKVl;
    for (int j = 0; j < u->sp; j++) {
        col_map c = qkv_cols(u, j);
        cols_gather(u, u->send + j * slice, qkv_seq, rows, u->QKV, &c);
    }
    exchange(u, slice);
    seq_concat(u, qkv_h, u->recv, u->QKVl);
}

void sharc_ulysses_att_to_tokens(sharc_ulysses *u, float *att, const float *att_h) {
    int64_t rows = (int64_t)u->B * u->Tl, W = (int64_t)u->NHl * u->hd, slice = rows * W;
    seq_split(u, u->send, att_h, W);
    exchange(u, slice);
    for (int j = 0; j < u->sp; j++) {
        col_map c = att_cols(u, j);
        cols_scatter(u, att, u->recv + j * slice, rows, (int64_t)u->NH * u->hd, &c, false);
    }
}

void sharc_ulysses_datt_to_heads(sharc_ulysses *u, float *datt_h, const float *datt) {
    int64_t rows = (int64_t)u->B * u->Tl, W = (int64_t)u->NHl * u->hd, slice = rows * W;
    for (int j = 0; j < u->sp; j++) {
        col_map c = att_cols(u, j);
        cols_gather(u, u->send + j * slice, datt, rows, (int64_t)u->NH * u->hd, &c);
    }
    exchange(u, slice);
    seq_concat(u, datt_h, u->recv, W);
}

void sharc_ulysses_dqkv_to_tokens(sharc_ulysses *u, float *dqkv, const float *dqkv_h) {
    int64_t rows = (int64_t)u->B * u->Tl, slice = rows * u->QKVl;
    seq_split(u, u->send, dqkv_h, u->QKVl);
    exchange(u, slice);
    bool replicated = u->NKV < u->sp;
    if (replicated) kern(u)->fill(strm(u), dqkv, 0.0f, rows * u->QKV);
    for (int j = 0; j < u->sp; j++) {
        col_map c = qkv_cols(u, j);
        cols_scatter(u, dqkv, u->recv + j * slice, rows, u->QKV, &c, replicated);
    }
}
