/* matmul.c: sharc_cpu_matmul_*, the linear layer on top of sharc_sgemm. */
#include "sharc/blas.h"
#include "cpu.h"
#include "../../core/parallel.h"

#include <omp.h>

SHARC_VEC static void add_bias_rows(float *y, const float *b, int64_t r0, int64_t r1, int OC) {
    for (int64_t r = r0; r < r1; r++) {
        float *row = y + r * OC;
        for (int o = 0; o < OC; o++) row[o] += b[o];
    }
}

/* db[o0:o1] += sum over rows of dy[:, o0:o1] */
SHARC_VEC static void colsum_cols(float *db, const float *dy, int64_t N, int OC, int o0, int o1) {
    for (int64_t r = 0; r < N; r++) {
        const float *row = dy + r * OC;
        for (int o = o0; o < o1; o++) db[o] += row[o];
    }
}

void sharc_cpu_matmul_forward(sharc_stream *s, float *y, const float *x, const float *w, const float *b, int64_t N,
                              int IC, int OC) {
    sharc_sgemm(false, true, (int)N, OC, IC, 1.0f, x, IC, w, IC, 0.0f, y, OC);
    if (!b) return;
    int64_t nc = sharc_par_chunks(N, OC, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) add_bias_rows(y, b, c * N / nc, (c + 1) * N / nc, OC);
}

void sharc_cpu_matmul_backward(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                               const float *w, int64_t N, int IC, int OC) {
    if (dx) sharc_sgemm(false, false, (int)N, IC, OC, 1.0f, dy, OC, w, IC, 0.0f, dx, IC);
    if (dw) sharc_sgemm(true, false, OC, IC, (int)N, 1.0f, dy, OC, x, IC, 1.0f, dw, IC);
    if (!db) return;
    /* split the columns: each thread owns a slice of db, no reduction needed */
    int64_t nc = sharc_par_chunks(OC, N, sharc_threads_get());
    if (nc > OC / 16) nc = OC / 16 > 0 ? OC / 16 : 1;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++)
        colsum_cols(db, dy, N, OC, (int)(c * OC / nc), (int)((c + 1) * OC / nc));
}
