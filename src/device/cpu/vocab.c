/* vocab.c: sharc_cpu_vocab_*, the element work of tensor parallelism's
 * vocabulary-parallel embedding and LM head (note [tp-vocab] in
 * src/model/tp.h; sharc/kernels.h documents each slot). */
#include "cpu.h"

#include <math.h>
#include <string.h>

void sharc_cpu_vocab_embedding_forward(sharc_stream *s, float *x, const int32_t *tokens, const int32_t *pos,
                                       const float *wte, const float *wpe, int64_t N, int T, int C, int v0, int Vl) {
    (void)s;
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

void sharc_cpu_vocab_embedding_backward(sharc_stream *s, float *dwte, const float *dx, const int32_t *tokens, int64_t N,
                                        int C, int v0, int Vl) {
    (void)s;
    /* rows in order, as the one-rank kernel adds them: the same sums bit for bit */
    for (int64_t r = 0; r < N; r++) {
        int64_t t = (int64_t)tokens[r] - v0;
        if (t < 0 || t >= Vl) continue;
        float *g = dwte + t * C;
        const float *d = dx + r * C;
        for (int i = 0; i < C; i++) g[i] += d[i];
    }
}

void sharc_cpu_vocab_xent_stats(sharc_stream *s, float *red, const float *lg, const int32_t *targets, int64_t m, int v0,
                                int Vl, bool sums) {
    (void)s;
#pragma omp parallel for schedule(static) if (m * Vl > 65536)
    for (int64_t r = 0; r < m; r++) {
        const float *row = lg + r * Vl;
        if (!sums) {
            float mx = -INFINITY;
            for (int j = 0; j < Vl; j++) mx = row[j] > mx ? row[j] : mx;
            red[r] = mx;
            continue;
        }
        const float mx = red[r];
        float sum = 0.0f;
        for (int j = 0; j < Vl; j++) sum += expf(row[j] - mx);
        int64_t t = (int64_t)targets[r] - v0;
        red[m + r] = sum;
        red[2 * m + r] = targets[r] >= 0 && t >= 0 && t < Vl ? row[t] : 0.0f;
    }
}

void sharc_cpu_vocab_xent_finish(sharc_stream *s, double *loss_sum, bool add, float *lg, const float *red,
                                 const int32_t *targets, int64_t m, int v0, int Vl, float scale) {
    (void)s;
    double total = add ? *loss_sum : 0.0;
    for (int64_t r = 0; r < m; r++)
        if (targets[r] >= 0) {
            float lse = red[r] + logf(red[m + r]);
            total += lse - red[2 * m + r];
        }
    *loss_sum = total;
    if (!lg) return;
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
