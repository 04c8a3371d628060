/* matmul.c: sharc_cpu_matmul_*, the linear layer on top of sharc_sgemm, its
 * bf16 variants on top of sharc_bgemm (note [bf16-gemm]), and the scratch
 * that holds their bf16 operands. */
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "sharc/log.h"
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
    for (int64_t c = 0; c < nc; c++) colsum_cols(db, dy, N, OC, (int)(c * OC / nc), (int)((c + 1) * OC / nc));
}

/* ------------------------------------------------------------------ bf16 */

/* Note [bf16-scratch]: the bf16 kernels round their fp32 operands into these
 * buffers (round to nearest even; the gathered weights are bf16 values
 * already, so theirs is exact). One buffer per operand role, grown to the
 * largest size asked and kept (counted as SHARC_MEM_OTHER); the kernels
 * run one at a time on the host thread, never inside a parallel region. */
static uint16_t *scratch[SHARC_CPU_BF16_SLOTS];
static int64_t scratch_cap[SHARC_CPU_BF16_SLOTS];

const uint16_t *sharc_cpu_bf16_operand(int slot, const float *src, int64_t n) {
    if (n > scratch_cap[slot]) {
        sharc_free(scratch[slot]);
        scratch[slot] = sharc_alloc((size_t)n * sizeof(uint16_t), SHARC_MEM_OTHER);
        if (!scratch[slot])
            sharc_fatal(__FILE__, __LINE__, "bf16 kernels: out of memory for %lld bf16 operands", (long long)n);
        scratch_cap[slot] = n;
    }
    sharc_from_f32(scratch[slot], src, SHARC_DT_BF16, n);
    return scratch[slot];
}

bool sharc_cpu_bf16_compute(void) { return sharc_bf16_mode_get(NULL) != SHARC_BF16_NONE; }

/* Note [bf16-acts] (src/model/model.c): x and w arrive in bf16, so only dy
 * is rounded here; the float variants below round x and w into the scratch
 * and call these. */
void sharc_cpu_matmul_forward_b16(sharc_stream *s, float *y, const uint16_t *x, const uint16_t *w, const float *b,
                                  int64_t N, int IC, int OC) {
    sharc_bgemm(false, true, (int)N, OC, IC, 1.0f, x, IC, w, IC, 0.0f, y, OC);
    if (!b) return;
    int64_t nc = sharc_par_chunks(N, OC, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) add_bias_rows(y, b, c * N / nc, (c + 1) * N / nc, OC);
}

void sharc_cpu_matmul_backward_b16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const uint16_t *x,
                                   const uint16_t *w, int64_t N, int IC, int OC) {
    if (dx || dw) {
        const uint16_t *dyb = sharc_cpu_bf16_operand(SHARC_CPU_BF16_DY, dy, N * OC);
        if (dx) sharc_bgemm(false, false, (int)N, IC, OC, 1.0f, dyb, OC, w, IC, 0.0f, dx, IC);
        if (dw) sharc_bgemm(true, false, OC, IC, (int)N, 1.0f, dyb, OC, x, IC, 1.0f, dw, IC);
    }
    if (!db) return;
    /* the bias gradient sums the fp32 dy, as in fp32 */
    int64_t nc = sharc_par_chunks(OC, N, sharc_threads_get());
    if (nc > OC / 16) nc = OC / 16 > 0 ? OC / 16 : 1;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) colsum_cols(db, dy, N, OC, (int)(c * OC / nc), (int)((c + 1) * OC / nc));
}

void sharc_cpu_matmul_forward_bf16(sharc_stream *s, float *y, const float *x, const float *w, const float *b, int64_t N,
                                   int IC, int OC) {
    const uint16_t *xb = sharc_cpu_bf16_operand(SHARC_CPU_BF16_X, x, N * IC);
    const uint16_t *wb = sharc_cpu_bf16_operand(SHARC_CPU_BF16_W, w, (int64_t)OC * IC);
    sharc_cpu_matmul_forward_b16(s, y, xb, wb, b, N, IC, OC);
}

void sharc_cpu_matmul_backward_bf16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                                    const float *w, int64_t N, int IC, int OC) {
    const uint16_t *xb = dw ? sharc_cpu_bf16_operand(SHARC_CPU_BF16_X, x, N * IC) : NULL;
    const uint16_t *wb = dx ? sharc_cpu_bf16_operand(SHARC_CPU_BF16_W, w, (int64_t)OC * IC) : NULL;
    sharc_cpu_matmul_backward_b16(s, dx, dw, db, dy, xb, wb, N, IC, OC);
}
