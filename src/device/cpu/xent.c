/* xent.c: sharc_cpu_xent_forward_backward and sharc_cpu_lmhead_xent, the softmax
 * cross-entropy and the LM head fused with it.
 *
 * Note [fused-head]. The logits of GPT-2 at B*T = 1024 are 1024 x 50257 floats
 * (206 MB). The fused head never holds more than `chunk` rows of them: for
 * each chunk it computes logits = x w^T, turns them in place into
 * dlogits = (softmax - onehot) * scale, and immediately forms dx = dlogits w
 * and dw += dlogits^T x. The loss scale (1 / valid tokens of the global
 * batch) is known before the forward pass, which is what makes fusing the
 * head's backward into its forward possible. The bf16 variant rounds x and
 * w to bf16 once per call and each chunk's dlogits before its two products;
 * the logits, the softmax and the loss stay fp32. */
#include "sharc/blas.h"
#include "cpu.h"
#include "sharc/prof.h"
#include "../../core/parallel.h"

#include <math.h>
#include <stddef.h>

/* Rows [r0, r1): loss per row, gradient in place; returns the loss sum. */
SHARC_VEC static double xent_rows(float *logits, float *losses, const int32_t *targets, int64_t r0, int64_t r1, int V,
                                  float scale, bool want_grad) {
    double total = 0.0;
    for (int64_t r = r0; r < r1; r++) {
        float *row = logits + r * V;
        int32_t t = targets[r];
        if (t < 0) {
            if (losses) losses[r] = 0.0f;
            if (want_grad)
                for (int j = 0; j < V; j++) row[j] = 0.0f;
            continue;
        }
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) sum += expf(row[j] - mx);
        float lse = mx + logf(sum);
        float loss = lse - row[t];
        if (losses) losses[r] = loss;
        total += loss;
        if (want_grad) {
#pragma omp simd
            for (int j = 0; j < V; j++) row[j] = expf(row[j] - lse) * scale;
            row[t] -= scale;
        }
    }
    return total;
}

/* The loss sum of rows [0, N): per-chunk sums added in chunk order, so the
 * result does not depend on timing. */
static double xent_sum(float *logits, float *losses, const int32_t *targets, int64_t N, int V, float scale,
                       bool want_grad) {
    int64_t nc = sharc_par_chunks(N, V, sharc_threads_get());
    double total = 0.0;
    double part[256];
    if (nc > 256) nc = 256;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++)
        part[c] = xent_rows(logits, losses, targets, c * N / nc, (c + 1) * N / nc, V, scale, want_grad);
    for (int64_t c = 0; c < nc; c++) total += part[c];
    return total;
}

void sharc_cpu_xent_forward_backward(sharc_stream *s, double *loss_sum, float *logits, float *losses,
                                     const int32_t *targets, int64_t N, int V, float scale, bool want_grad) {
    *loss_sum = xent_sum(logits, losses, targets, N, V, scale, want_grad);
}

void sharc_cpu_lmhead_xent(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x, const float *w,
                           const int32_t *targets, float scale, int64_t N, int C, int V, float *ws, int64_t chunk) {
    double total = 0.0;
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        int64_t m = N - r0 < chunk ? N - r0 : chunk;
        SHARC_PROF("head.logits", sharc_sgemm(false, true, (int)m, V, C, 1.0f, x + r0 * C, C, w, C, 0.0f, ws, V));
        SHARC_PROF("head.xent", total += xent_sum(ws, NULL, targets + r0, m, V, scale, dx != NULL));
        if (dx) {
            SHARC_PROF("head.dx", sharc_sgemm(false, false, (int)m, C, V, 1.0f, ws, V, w, C, 0.0f, dx + r0 * C, C));
            if (dw)
                SHARC_PROF("head.dw", sharc_sgemm(true, false, V, C, (int)m, 1.0f, ws, V, x + r0 * C, C, 1.0f, dw, C));
        }
    }
    *loss_sum = total;
}

void sharc_cpu_lmhead_xent_bf16(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x, const float *w,
                                const int32_t *targets, float scale, int64_t N, int C, int V, float *ws,
                                int64_t chunk) {
    const uint16_t *xb, *wb;
    SHARC_PROF("head.bf16_operands", (xb = sharc_cpu_bf16_operand(SHARC_CPU_BF16_X, x, N * C),
                                      wb = sharc_cpu_bf16_operand(SHARC_CPU_BF16_W, w, (int64_t)V * C)));
    double total = 0.0;
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        int64_t m = N - r0 < chunk ? N - r0 : chunk;
        SHARC_PROF("head.logits", sharc_bgemm(false, true, (int)m, V, C, 1.0f, xb + r0 * C, C, wb, C, 0.0f, ws, V));
        SHARC_PROF("head.xent", total += xent_sum(ws, NULL, targets + r0, m, V, scale, dx != NULL));
        if (dx) {
            const uint16_t *gb;
            SHARC_PROF("head.bf16_operands", gb = sharc_cpu_bf16_operand(SHARC_CPU_BF16_DY, ws, m * V));
            SHARC_PROF("head.dx", sharc_bgemm(false, false, (int)m, C, V, 1.0f, gb, V, wb, C, 0.0f, dx + r0 * C, C));
            if (dw)
                SHARC_PROF("head.dw", sharc_bgemm(true, false, V, C, (int)m, 1.0f, gb, V, xb + r0 * C, C, 1.0f, dw, C));
        }
    }
    *loss_sum = total;
}
