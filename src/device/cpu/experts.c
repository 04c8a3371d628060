/* experts.c: sharc_cpu_moe_*, the Mixture-of-Experts routing kernels of the
 * CPU table (sharc/kernels.h; the math is note [moe] in src/model/moe.c):
 * the router's softmax and top-k and their backward, and the row gather,
 * scatter-add and row dot products that move tokens to experts and back.
 * Sizes are a layer's tokens times its experts, small beside the experts'
 * matmuls, so the loops are plain and run in a fixed order. */
#include "cpu.h"
#include "../moe_route.h"

#include <math.h>
#include <string.h>

void sharc_cpu_moe_route_forward(sharc_stream *s, float *probs, int32_t *idx, float *wts, const float *logits,
                                 int64_t N, int E, int K, bool norm_topk) {
    (void)s;
    for (int64_t t = 0; t < N; t++)
        sharc_moe_route_token(probs + t * E, idx + t * K, wts + t * K, logits + t * E, E, K, norm_topk);
}

void sharc_cpu_moe_route_backward(sharc_stream *s, float *dlogits, const float *dwts, const float *probs,
                                  const int32_t *idx, const float *wts, const float *daux, int64_t N, int E, int K,
                                  bool norm_topk) {
    (void)s;
    for (int64_t t = 0; t < N; t++)
        sharc_moe_route_token_backward(dlogits + t * E, dwts + t * K, probs + t * E, idx + t * K, wts + t * K, daux, E,
                                       K, norm_topk);
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

void sharc_cpu_moe_prob_sum(sharc_stream *s, double *psum, const float *probs, int64_t N, int E) {
    (void)s;
    for (int e = 0; e < E; e++) psum[e] = 0.0;
    for (int64_t t = 0; t < N; t++)
        for (int e = 0; e < E; e++) psum[e] += probs[t * E + e];
}
