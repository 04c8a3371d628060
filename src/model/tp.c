/* tp.c: sharc_tp_*, tensor parallelism's all-reduce (note [tp] in tp.h; the
 * split of the parameters is their rows' in src/model/params.c, note
 * [param-table]) and the vocabulary-parallel embedding and LM head with
 * cross-entropy (note [tp-vocab] in tp.h). */
#include "tp.h"
#include "sharc/log.h"
#include "sharc/prof.h"

#include <math.h>
#include <string.h>

void sharc_tp_all_reduce(sharc_comm *group, float *buf, int64_t n) {
    if (!group) return;
    if (sharc_comm_all_reduce(group, buf, buf, (size_t)n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM) != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "tp: all-reduce of %lld floats over the tensor-parallel group: %s",
                    (long long)n, sharc_last_error());
}

/* ------------------------------------------------ vocabulary parallel */

void sharc_tp_embedding_forward(float *x, const int32_t *tokens, const int32_t *pos, const float *wte, const float *wpe,
                                int64_t N, int T, int C, int v0, int Vl) {
#pragma omp parallel for schedule(static) if (N * C > 65536)
    for (int64_t r = 0; r < N; r++) {
        float *xr = x + r * C;
        int64_t t = (int64_t)tokens[r] - v0;
        if (t < 0 || t >= Vl) { /* another tp rank's row: it contributes the whole row */
            memset(xr, 0, (size_t)C * sizeof(float));
            continue;
        }
        const float *e = wte + t * C;
        if (wpe) {
            const float *p = wpe + (int64_t)(pos ? pos[r] : r % T) * C;
            for (int i = 0; i < C; i++) xr[i] = e[i] + p[i];
        } else {
            memcpy(xr, e, (size_t)C * sizeof(float));
        }
    }
}

void sharc_tp_embedding_backward(float *dwte, const float *dx, const int32_t *tokens, int64_t N, int C, int v0,
                                 int Vl) {
    /* rows in order, as the one-rank kernel adds them: the same sums bit for bit */
    for (int64_t r = 0; r < N; r++) {
        int64_t t = (int64_t)tokens[r] - v0;
        if (t < 0 || t >= Vl) continue;
        float *g = dwte + t * C;
        const float *d = dx + r * C;
        for (int i = 0; i < C; i++) g[i] += d[i];
    }
}

/* Rows [0, m) of a chunk's local logits (m, Vl): red[0 .. m) = the row's
 * maximum, then (after the MAX all-reduce) red[m .. 2m) = the sum of
 * exp(logit - max) and red[2m .. 3m) = the target's logit when this rank
 * holds its column (else 0), both summed over tp next. */
static void vp_row_max(float *red, const float *lg, int64_t m, int Vl) {
#pragma omp parallel for schedule(static) if (m * Vl > 65536)
    for (int64_t r = 0; r < m; r++) {
        const float *row = lg + r * Vl;
        float mx = -INFINITY;
        for (int j = 0; j < Vl; j++) mx = row[j] > mx ? row[j] : mx;
        red[r] = mx;
    }
}

static void vp_row_sums(float *red, const float *lg, const int32_t *targets, int64_t m, int v0, int Vl) {
#pragma omp parallel for schedule(static) if (m * Vl > 65536)
    for (int64_t r = 0; r < m; r++) {
        const float *row = lg + r * Vl;
        const float mx = red[r];
        float sum = 0.0f;
        for (int j = 0; j < Vl; j++) sum += expf(row[j] - mx);
        int64_t t = (int64_t)targets[r] - v0;
        red[m + r] = sum;
        red[2 * m + r] = targets[r] >= 0 && t >= 0 && t < Vl ? row[t] : 0.0f;
    }
}

/* dlogits = (softmax - onehot) * scale on this rank's columns, in place; 0 for masked rows. */
static void vp_row_grads(float *lg, const float *red, const int32_t *targets, int64_t m, int v0, int Vl, float scale) {
#pragma omp parallel for schedule(static) if (m * Vl > 65536)
    for (int64_t r = 0; r < m; r++) {
        float *row = lg + r * Vl;
        if (targets[r] < 0) {
            memset(row, 0, (size_t)Vl * sizeof(float));
            continue;
        }
        const float lse = red[r] + logf(red[m + r]);
        for (int j = 0; j < Vl; j++) row[j] = expf(row[j] - lse) * scale;
        int64_t t = (int64_t)targets[r] - v0;
        if (t >= 0 && t < Vl) row[t] -= scale;
    }
}

static void vp_all_reduce(sharc_comm *group, float *buf, int64_t n, sharc_reduce_op op) {
    if (sharc_comm_all_reduce(group, buf, buf, (size_t)n, SHARC_DT_F32, op) != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "tp: vocabulary-parallel head: all-reduce of %lld floats: %s", (long long)n,
                    sharc_last_error());
}

double sharc_tp_lmhead_xent(const sharc_kernels *k, sharc_stream *s, sharc_comm *group, float *dx, float *dw,
                            const float *x, const float *w, const uint16_t *xh, const uint16_t *wh,
                            const int32_t *targets, float scale, int64_t N, int C, int v0, int Vl, float *ws,
                            float *red, int64_t chunk) {
    double total = 0.0;
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        int64_t m = N - r0 < chunk ? N - r0 : chunk;
        const int32_t *tg = targets + r0;
        const double mf = 2.0 * m * C * Vl; /* note [prof-work] in model.c */
        if (xh)
            SHARC_PROF_WORK("head.logits", mf, 2.0 * ((double)m * C + (double)Vl * C) + 4.0 * m * Vl,
                            k->matmul_forward_b16(s, ws, xh + r0 * C, wh, NULL, m, C, Vl));
        else
            SHARC_PROF_WORK("head.logits", mf, 4.0 * ((double)m * C + (double)Vl * C + (double)m * Vl),
                            k->matmul_forward(s, ws, x + r0 * C, w, NULL, m, C, Vl));
        SHARC_PROF("head.xent", vp_row_max(red, ws, m, Vl));
        SHARC_PROF("head.tp", vp_all_reduce(group, red, m, SHARC_REDUCE_OP_MAX));
        SHARC_PROF("head.xent", vp_row_sums(red, ws, tg, m, v0, Vl));
        SHARC_PROF("head.tp", vp_all_reduce(group, red + m, 2 * m, SHARC_REDUCE_OP_SUM));
        for (int64_t r = 0; r < m; r++) /* the same on every tp rank: the sums are */
            if (tg[r] >= 0) {
                float lse = red[r] + logf(red[m + r]);
                total += lse - red[2 * m + r];
            }
        if (dx) {
            SHARC_PROF("head.xent", vp_row_grads(ws, red, tg, m, v0, Vl, scale));
            const double db = 4.0 * m * Vl + (xh ? 2.0 : 4.0) * ((double)m * C + (double)Vl * C) + 4.0 * m * C +
                              (dw ? 8.0 * Vl * C : 0);
            if (xh)
                SHARC_PROF_WORK("head.dx", mf * (1 + (dw != NULL)), db,
                                k->matmul_backward_b16(s, dx + r0 * C, dw, NULL, ws, xh + r0 * C, wh, m, C, Vl));
            else
                SHARC_PROF_WORK("head.dx", mf * (1 + (dw != NULL)), db,
                                k->matmul_backward(s, dx + r0 * C, dw, NULL, ws, x + r0 * C, w, m, C, Vl));
        }
    }
    /* note [tp-vocab]: each rank's dx is its columns' part of dlogits @ W */
    if (dx) SHARC_PROF("head.tp", sharc_tp_all_reduce(group, dx, N * C));
    return total;
}
