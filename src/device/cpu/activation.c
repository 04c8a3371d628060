/* activation.c: sharc_cpu_gelu_*, sharc_cpu_swiglu_* and sharc_cpu_add, the element-wise
 * kernels. Loops are written so GCC vectorises them with glibc's vector
 * math (libmvec) for tanhf/expf: see SHARC_VEC in core/parallel.h. */
#include "sharc/blas.h"
#include "cpu.h"
#include "../../core/parallel.h"

#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

SHARC_VEC static void gelu_range(float *y, const float *x, int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}

SHARC_VEC static void gelu_back_range(float *dx, const float *dy, const float *x, int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float dt = GELU_K * (1.0f + 3.0f * GELU_C * v * v) * (1.0f - t * t);
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
    }
}

SHARC_VEC static void add_range(float *y, const float *a, const float *b, int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) y[i] = a[i] + b[i];
}

/* Element-wise kernels split n elements into chunks of whole cache lines. */
static int64_t elem_chunks(int64_t n) { return sharc_par_chunks((n + 1023) / 1024, 1024, sharc_threads_get()); }

void sharc_cpu_gelu_forward(sharc_stream *s, float *y, const float *x, int64_t n) {
    int64_t nc = elem_chunks(n);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) gelu_range(y, x, sharc_chunk_lo(c, nc, n), sharc_chunk_lo(c + 1, nc, n));
}

void sharc_cpu_gelu_backward(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t n) {
    int64_t nc = elem_chunks(n);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) gelu_back_range(dx, dy, x, sharc_chunk_lo(c, nc, n), sharc_chunk_lo(c + 1, nc, n));
}

void sharc_cpu_add(sharc_stream *s, float *y, const float *a, const float *b, int64_t n) {
    int64_t nc = elem_chunks(n);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) add_range(y, a, b, sharc_chunk_lo(c, nc, n), sharc_chunk_lo(c + 1, nc, n));
}

SHARC_VEC static void swiglu_rows(float *y, const float *x, int64_t r0, int64_t r1, int I) {
    for (int64_t r = r0; r < r1; r++) {
        const float *g = x + r * 2 * I, *u = g + I;
        float *yr = y + r * I;
#pragma omp simd
        for (int i = 0; i < I; i++) yr[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

SHARC_VEC static void swiglu_back_rows(float *dx, const float *dy, const float *x, int64_t r0, int64_t r1, int I) {
    for (int64_t r = r0; r < r1; r++) {
        const float *g = x + r * 2 * I, *u = g + I, *dyr = dy + r * I;
        float *dg = dx + r * 2 * I, *du = dg + I;
#pragma omp simd
        for (int i = 0; i < I; i++) {
            float sig = 1.0f / (1.0f + expf(-g[i]));
            float silu = g[i] * sig;
            du[i] = dyr[i] * silu;
            dg[i] = dyr[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        }
    }
}

void sharc_cpu_swiglu_forward(sharc_stream *s, float *y, const float *x, int64_t N, int I) {
    int64_t nc = sharc_par_chunks(N, I, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) swiglu_rows(y, x, c * N / nc, (c + 1) * N / nc, I);
}

void sharc_cpu_swiglu_backward(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t N, int I) {
    int64_t nc = sharc_par_chunks(N, I, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) swiglu_back_rows(dx, dy, x, c * N / nc, (c + 1) * N / nc, I);
}
