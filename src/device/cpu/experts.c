/* experts.c: sharc_cpu_moe_*, the Mixture-of-Experts routing kernels of the
 * CPU table (sharc/kernels.h; the math is note [moe] in src/model/moe.c):
 * the router's softmax and top-k and their backward, and the row gather,
 * scatter-add and row dot products that move tokens to experts and back.
 * Sizes are a layer's tokens times its experts, small beside the experts'
 * matmuls, so the loops are plain and run in a fixed order. */
#include "cpu.h"

#include <math.h>
#include <string.h>

void sharc_cpu_moe_route_forward(sharc_stream *s, float *probs, int32_t *idx, float *wts, const float *logits,
                                 int64_t N, int E, int K, bool norm_topk) {
    (void)s;
    for (int64_t t = 0; t < N; t++) {
        const float *l = logits + t * E;
        float *p = probs + t * E;
        float mx = l[0];
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        float sum = 0.0f;
        for (int e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
        for (int e = 0; e < E; e++) p[e] /= sum;
        int32_t *ix = idx + t * K;
        float *w = wts + t * K, wsum = 0.0f;
        for (int j = 0; j < K; j++) { /* the j-th largest: strictly greater wins, so ties keep the lower expert */
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int i = 0; i < j && !taken; i++) taken = ix[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            ix[j] = best;
            w[j] = p[best];
            wsum += w[j];
        }
        if (norm_topk)
            for (int j = 0; j < K; j++) w[j] /= wsum;
    }
}

void sharc_cpu_moe_route_backward(sharc_stream *s, float *dlogits, const float *dwts, const float *probs,
                                  const int32_t *idx, const float *wts, const float *daux, int64_t N, int E, int K,
                                  bool norm_topk) {
    (void)s;
    for (int64_t t = 0; t < N; t++) {
        const float *p = probs + t * E, *dw = dwts + t * K, *w = wts + t * K;
        const int32_t *ix = idx + t * K;
        float *dl = dlogits + t * E; /* d probs first, then the softmax backward in place */
        for (int e = 0; e < E; e++) dl[e] = daux ? daux[e] : 0.0f;
        if (norm_topk) { /* w_j = p_j / S: d p_j = (d w_j - sum_m d w_m w_m) / S */
            float S = 0.0f, dot = 0.0f;
            for (int j = 0; j < K; j++) {
                S += p[ix[j]];
                dot += dw[j] * w[j];
            }
            for (int j = 0; j < K; j++) dl[ix[j]] += (dw[j] - dot) / S;
        } else {
            for (int j = 0; j < K; j++) dl[ix[j]] += dw[j];
        }
        float pd = 0.0f;
        for (int e = 0; e < E; e++) pd += p[e] * dl[e];
        for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - pd);
    }
}

void sharc_cpu_moe_gather(sharc_stream *s, float *y, const float *x, const int32_t *rows, const float *scale, int64_t n,
                          int C) {
    (void)s;
    for (int64_t i = 0; i < n; i++) {
        const float *src = x + (int64_t)rows[i] * C;
        float *dst = y + i * C;
        if (scale)
            for (int c = 0; c < C; c++) dst[c] = scale[i] * src[c];
        else memcpy(dst, src, sizeof(float) * (size_t)C);
    }
}

void sharc_cpu_moe_scatter_add(sharc_stream *s, float *y, const float *x, const int32_t *rows, const float *scale,
                               int64_t n, int C) {
    (void)s;
    for (int64_t i = 0; i < n; i++) {
        float *dst = y + (int64_t)rows[i] * C, a = scale ? scale[i] : 1.0f;
        const float *src = x + i * C;
        for (int c = 0; c < C; c++) dst[c] += a * src[c];
    }
}

void sharc_cpu_moe_row_dot(sharc_stream *s, float *out, const float *a, const int32_t *rows, const float *b, int64_t n,
                           int C) {
    (void)s;
    for (int64_t i = 0; i < n; i++) {
        const float *x = a + (int64_t)rows[i] * C, *y = b + i * C;
        float d = 0.0f;
        for (int c = 0; c < C; c++) d += x[c] * y[c];
        out[i] = d;
    }
}
