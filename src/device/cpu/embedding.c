/* embedding.c: sharc_cpu_embedding_*, token and learned-position embeddings. */
#include "sharc/blas.h"
#include "cpu.h"
#include "../../core/parallel.h"

#include <string.h>

SHARC_VEC static void embed_rows(float *x, const int32_t *tokens, const float *wte, const float *wpe, int64_t r0,
                                 int64_t r1, int T, int C, int t0) {
    for (int64_t r = r0; r < r1; r++) {
        const float *e = wte + (int64_t)tokens[r] * C;
        float *xr = x + r * C;
        if (wpe) {
            const float *p = wpe + (t0 + r % T) * C;
            for (int i = 0; i < C; i++) xr[i] = e[i] + p[i];
        } else {
            memcpy(xr, e, (size_t)C * sizeof(float));
        }
    }
}

void sharc_cpu_embedding_forward(sharc_stream *s, float *x, const int32_t *tokens, const float *wte, const float *wpe,
                                 int B, int T, int C, int t0) {
    int64_t N = (int64_t)B * T;
    int64_t nc = sharc_par_chunks(N, C, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) embed_rows(x, tokens, wte, wpe, c * N / nc, (c + 1) * N / nc, T, C, t0);
}

/* Columns [c0, c1) of every row: threads own disjoint column slices, so the
 * scatter-add into rows shared by repeated tokens needs no atomics. */
SHARC_VEC static void embed_back_cols(float *dwte, float *dwpe, const float *dx, const int32_t *tokens, int64_t N,
                                      int T, int C, int t0, int c0, int c1) {
    for (int64_t r = 0; r < N; r++) {
        const float *d = dx + r * C;
        if (dwte) {
            float *e = dwte + (int64_t)tokens[r] * C;
            for (int i = c0; i < c1; i++) e[i] += d[i];
        }
        if (dwpe) {
            float *p = dwpe + (t0 + r % T) * C;
            for (int i = c0; i < c1; i++) p[i] += d[i];
        }
    }
}

void sharc_cpu_embedding_backward(sharc_stream *s, float *dwte, float *dwpe, const float *dx, const int32_t *tokens,
                                  int B, int T, int C, int t0) {
    int64_t N = (int64_t)B * T;
    int64_t nc = sharc_par_chunks(C / 16 > 0 ? C / 16 : 1, N * 16, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++)
        embed_back_cols(dwte, dwpe, dx, tokens, N, T, C, t0, (int)(c * C / nc), (int)((c + 1) * C / nc));
}
