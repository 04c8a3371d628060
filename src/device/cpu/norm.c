/* norm.c: sharc_cpu_layernorm_*, sharc_cpu_rmsnorm_*, sharc_cpu_head_rmsnorm_* and
 * sharc_cpu_add_{layer,rms}norm_forward, row-wise normalisation (the last two
 * after a residual add, note [add-norm]).
 * Weight/bias gradients are reduced over rows through per-chunk partial sums
 * (one slice per chunk of rows), then added in a fixed order, so results do
 * not depend on thread timing. */
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "cpu.h"
#include "sharc/status.h"
#include "../../core/parallel.h"

#include <math.h>

SHARC_VEC static void layernorm_rows(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                                     int64_t r0, int64_t r1, int C, float eps) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += xr[i];
        m /= (float)C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float d = xr[i] - m;
            v += d * d;
        }
        v /= (float)C;
        float s = 1.0f / sqrtf(v + eps);
        for (int i = 0; i < C; i++) yr[i] = (xr[i] - m) * s * w[i] + (b ? b[i] : 0.0f);
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = s;
    }
}

void sharc_cpu_layernorm_forward(sharc_stream *s, float *y, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int64_t N, int C, float eps) {
    int64_t nc = sharc_par_chunks(N, C, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) layernorm_rows(y, mean, rstd, x, w, b, c * N / nc, (c + 1) * N / nc, C, eps);
}

/* Note [add-norm]: sum = x + res over rows [r0, r1), a block of rows at a
 * time just before their norm (still in cache); the same float adds as
 * sharc_cpu_add, and the norm of each row is the plain norm's, so the same
 * bits. A block is ADD_NORM_FLOATS floats of sum (at least a row), so the
 * row function (a target_clones dispatch per call) is called once a block,
 * not once a row. */
#define ADD_NORM_FLOATS 8192
SHARC_VEC static void add_rows(float *sum, const float *x, const float *res, int64_t r0, int64_t r1, int C) {
    for (int64_t i = r0 * C; i < r1 * C; i++) sum[i] = x[i] + res[i];
}

static int64_t add_norm_block(int C) { return C >= ADD_NORM_FLOATS ? 1 : ADD_NORM_FLOATS / C; }

void sharc_cpu_add_layernorm_forward(sharc_stream *s, float *sum, float *y, float *mean, float *rstd, const float *x,
                                     const float *r, const float *w, const float *b, int64_t N, int C, float eps) {
    int64_t nc = sharc_par_chunks(N, C, sharc_threads_get()), blk = add_norm_block(C);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r0 = c * N / nc, end = (c + 1) * N / nc; r0 < end; r0 += blk) {
            int64_t r1 = r0 + blk < end ? r0 + blk : end;
            add_rows(sum, x, r, r0, r1, C);
            layernorm_rows(y, mean, rstd, sum, w, b, r0, r1, C, eps);
        }
}

SHARC_VEC static void layernorm_back_rows(float *dx, float *dw, float *db, const float *dy, const float *dres,
                                          const float *x, const float *w, const float *mean, const float *rstd,
                                          int64_t r0, int64_t r1, int C) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C, *dyr = dy + r * C;
        float m = mean[r], s = rstd[r];
        float sum_g = 0.0f, sum_gx = 0.0f;
        for (int i = 0; i < C; i++) {
            float xhat = (xr[i] - m) * s;
            float g = dyr[i] * w[i];
            sum_g += g;
            sum_gx += g * xhat;
            if (dw) dw[i] += dyr[i] * xhat;
            if (db) db[i] += dyr[i];
        }
        sum_g /= (float)C;
        sum_gx /= (float)C;
        float *dxr = dx + r * C;
        const float *dres_r = dres ? dres + r * C : NULL;
        for (int i = 0; i < C; i++) {
            float xhat = (xr[i] - m) * s;
            float v = s * (dyr[i] * w[i] - sum_g - xhat * sum_gx);
            dxr[i] = dres_r ? dres_r[i] + v : v;
        }
    }
}

SHARC_VEC static void add_partials(float *dst, const float *parts, int64_t nparts, int C) {
    for (int64_t p = 0; p < nparts; p++)
        for (int i = 0; i < C; i++) dst[i] += parts[p * C + i];
}

/* Partial weight-gradient slices for nc chunks of rows (2 slices per chunk). */
static float *partials(int64_t nc, int C) {
    float *p = sharc_alloc((size_t)(2 * nc * C) * sizeof(float), SHARC_MEM_OTHER);
    if (!p) sharc_fatal(__FILE__, __LINE__, "%s", sharc_last_error());
    return p;
}

void sharc_cpu_layernorm_backward(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *dres,
                                  const float *x, const float *w, const float *mean, const float *rstd, int64_t N,
                                  int C) {
    int64_t nc = sharc_par_chunks(N, C, sharc_threads_get());
    if (nc == 1) {
        layernorm_back_rows(dx, dw, db, dy, dres, x, w, mean, rstd, 0, N, C);
        return;
    }
    float *p = dw || db ? partials(nc, C) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nc; c++)
        layernorm_back_rows(dx, dw ? p + c * C : NULL, db ? p + (nc + c) * C : NULL, dy, dres, x, w, mean, rstd,
                            c * N / nc, (c + 1) * N / nc, C);
    if (dw) add_partials(dw, p, nc, C);
    if (db) add_partials(db, p + nc * C, nc, C);
    sharc_free(p);
}

SHARC_VEC static void rmsnorm_rows(float *y, float *rstd, const float *x, const float *w, int64_t r0, int64_t r1, int C,
                                   float eps) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        float ss = 0.0f;
        for (int i = 0; i < C; i++) ss += xr[i] * xr[i];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
        for (int i = 0; i < C; i++) yr[i] = xr[i] * s * w[i];
        if (rstd) rstd[r] = s;
    }
}

void sharc_cpu_rmsnorm_forward(sharc_stream *s, float *y, float *rstd, const float *x, const float *w, int64_t N, int C,
                               float eps) {
    int64_t nc = sharc_par_chunks(N, C, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) rmsnorm_rows(y, rstd, x, w, c * N / nc, (c + 1) * N / nc, C, eps);
}

void sharc_cpu_add_rmsnorm_forward(sharc_stream *s, float *sum, float *y, float *rstd, const float *x, const float *r,
                                   const float *w, int64_t N, int C, float eps) {
    int64_t nc = sharc_par_chunks(N, C, sharc_threads_get()), blk = add_norm_block(C);
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r0 = c * N / nc, end = (c + 1) * N / nc; r0 < end; r0 += blk) {
            int64_t r1 = r0 + blk < end ? r0 + blk : end;
            add_rows(sum, x, r, r0, r1, C);
            rmsnorm_rows(y, rstd, sum, w, r0, r1, C, eps);
        }
}

SHARC_VEC static void rmsnorm_back_rows(float *dx, float *dw, const float *dy, const float *dres, const float *x,
                                        const float *w, const float *rstd, int64_t r0, int64_t r1, int C) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C, *dyr = dy + r * C;
        float s = rstd[r];
        float dot = 0.0f;
        for (int i = 0; i < C; i++) {
            dot += dyr[i] * w[i] * xr[i];
            if (dw) dw[i] += dyr[i] * xr[i] * s;
        }
        /* y = x s w, s = (mean(x^2)+eps)^-1/2, ds/dx_i = -s^3 x_i / C */
        float k = dot * s * s * s / (float)C;
        float *dxr = dx + r * C;
        const float *dres_r = dres ? dres + r * C : NULL;
        for (int i = 0; i < C; i++) {
            float v = dyr[i] * w[i] * s - k * xr[i];
            dxr[i] = dres_r ? dres_r[i] + v : v;
        }
    }
}

void sharc_cpu_rmsnorm_backward(sharc_stream *s, float *dx, float *dw, const float *dy, const float *dres,
                                const float *x, const float *w, const float *rstd, int64_t N, int C) {
    int64_t nc = sharc_par_chunks(N, C, sharc_threads_get());
    if (nc == 1) {
        rmsnorm_back_rows(dx, dw, dy, dres, x, w, rstd, 0, N, C);
        return;
    }
    float *p = dw ? partials(nc, C) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nc; c++)
        rmsnorm_back_rows(dx, dw ? p + c * C : NULL, dy, dres, x, w, rstd, c * N / nc, (c + 1) * N / nc, C);
    if (dw) add_partials(dw, p, nc, C);
    sharc_free(p);
}

/* Per-head RMSNorm: token n's H rows of hd start at n*ld (the rows of one
 * token are adjacent, so the row functions above do the work). */
void sharc_cpu_head_rmsnorm_forward(sharc_stream *s, float *y, float *rstd, const float *x, const float *w, int64_t N,
                                    int H, int hd, int64_t ld, float eps) {
    int64_t nc = sharc_par_chunks(N, (int64_t)H * hd, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++)
        for (int64_t n = c * N / nc; n < (c + 1) * N / nc; n++)
            rmsnorm_rows(y + n * ld, rstd + n * H, x + n * ld, w, 0, H, hd, eps);
}

/* dx may alias dy: each row's dy is read in full before its dx is written. */
void sharc_cpu_head_rmsnorm_backward(sharc_stream *s, float *dx, float *dw, const float *dy, const float *x,
                                     const float *w, const float *rstd, int64_t N, int H, int hd, int64_t ld) {
    int64_t nc = sharc_par_chunks(N, (int64_t)H * hd, sharc_threads_get());
    float *p = dw && nc > 1 ? partials(nc, hd) : NULL;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) {
        float *dwc = !dw ? NULL : nc > 1 ? p + c * hd : dw;
        for (int64_t n = c * N / nc; n < (c + 1) * N / nc; n++)
            rmsnorm_back_rows(dx + n * ld, dwc, dy + n * ld, NULL, x + n * ld, w, rstd + n * H, 0, H, hd);
    }
    if (p) {
        add_partials(dw, p, nc, hd);
        sharc_free(p);
    }
}
