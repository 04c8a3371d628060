/* elem.c: sharc_cpu_{cast,round,accumulate,sum_ranks,sumsq,loss_add,adamw,adamw_multi,copy_block,fill,
 * init_normal},
 * the element work of the engine, the optimizer and the MPI backend on the
 * CPU. Large arrays are split into chunks over the OpenMP threads; each
 * element's value never depends on the split, only sumsq's double sum
 * follows OpenMP's reduction. */
#include "cpu.h"
#include "sharc/rng.h"
#include "../../core/parallel.h"

#include <math.h>
#include <string.h>

/* Below this many elements the loops run on the calling thread. */
#define ELEM_PAR 65536

void sharc_cpu_cast(sharc_stream *s, void *dst, sharc_dtype dst_dt, const void *src, sharc_dtype src_dt, int64_t n) {
    if (src_dt == SHARC_DT_F32) {
        sharc_from_f32(dst, src, dst_dt, n);
    } else if (dst_dt == SHARC_DT_F32) {
        sharc_to_f32(dst, src, src_dt, n);
    } else {
        sharc_fatal(__FILE__, __LINE__, "cast: %s to %s: one side must be F32", sharc_dtype_st_name(src_dt),
                    sharc_dtype_st_name(dst_dt));
    }
}

void sharc_cpu_round(sharc_stream *s, float *dst, const float *src, sharc_dtype dt, int64_t n) {
    sharc_round_f32(dst, src, dt, n);
}

void sharc_cpu_accumulate(sharc_stream *s, float *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n > ELEM_PAR)
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

/* note [rank-order], fp32: elements [lo, hi) */
SHARC_VEC static void sum_f32(float *dst, const float *const *src, int S, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) {
        float acc = src[0][i];
        for (int r = 1; r < S; r++) acc += src[r][i];
        dst[i] = acc;
    }
}

SHARC_VEC static void sum_f32_add(float *dst, const float *const *src, int S, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) {
        float acc = src[0][i];
        for (int r = 1; r < S; r++) acc += src[r][i];
        dst[i] += acc;
    }
}

/* note [rank-order], 16-bit: blocks of 1024 widened to fp32 (exact), summed
 * in rank order, rounded once by the same conversion as sharc_from_f32. */
static void sum_16(uint16_t *dst, const uint16_t *const *src, int S, int64_t lo, int64_t hi, sharc_dtype dt) {
    float acc[1024], part[1024];
    for (int64_t b = lo; b < hi; b += 1024) {
        int64_t len = hi - b < 1024 ? hi - b : 1024;
        sharc_to_f32(acc, src[0] + b, dt, len);
        for (int r = 1; r < S; r++) {
            sharc_to_f32(part, src[r] + b, dt, len);
            for (int64_t i = 0; i < len; i++) acc[i] += part[i];
        }
        sharc_from_f32(dst + b, acc, dt, len);
    }
}

void sharc_cpu_sum_ranks(sharc_stream *s, void *dst, const void *const *src, int S, int64_t n, sharc_dtype dt,
                         bool add) {
    if (S < 1 || n <= 0) return;
    bool f32 = dt == SHARC_DT_F32;
    if (!f32 && (add || (dt != SHARC_DT_BF16 && dt != SHARC_DT_F16)))
        sharc_fatal(__FILE__, __LINE__, "sum_ranks: %s%s is not supported", sharc_dtype_st_name(dt),
                    add ? " added to its destination" : "");
    int64_t nc = (n + 32767) / 32768;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t k = 0; k < nc; k++) {
        int64_t lo = sharc_chunk_lo(k, nc, n), hi = sharc_chunk_lo(k + 1, nc, n);
        if (f32 && add) sum_f32_add(dst, (const float *const *)src, S, lo, hi);
        else if (f32) sum_f32(dst, (const float *const *)src, S, lo, hi);
        else sum_16(dst, (const uint16_t *const *)src, S, lo, hi, dt);
    }
}

/* fp32 sum of squares of one block, vectorised. */
SHARC_VEC static double sumsq_block(const float *g, int64_t n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += g[i] * g[i];
    return (double)acc;
}

void sharc_cpu_sumsq(sharc_stream *s, double *out, const float *x, int64_t n) {
    int64_t nb = (n + 4095) / 4096;
    double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (nb > 16)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * 4096, len = n - lo < 4096 ? n - lo : 4096;
        acc += sumsq_block(x + lo, len);
    }
    *out += acc;
}

void sharc_cpu_loss_add(sharc_stream *s, double *sums, const double *loss, double add, double weight) {
    double l = *loss + add;
    double w = l * weight; /* its own statement: rounded before the sum (ISO C: no contraction across statements) */
    sums[0] += w;
    sums[1] += l;
}

SHARC_VEC static void adamw_range(float *p, const float *g, float *m, float *v, int64_t n, float decay_mul, float b1,
                                  float b2, float step_size, float sqrt_bc2, float eps, float gscale) {
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float pi = p[i] * decay_mul;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * mi / (sqrtf(vi) / sqrt_bc2 + eps);
    }
}

void sharc_cpu_adamw(sharc_stream *s, float *p, const float *g, float *m, float *v, int64_t n,
                     const sharc_adamw_scalars *k) {
    int64_t nc = (n + ELEM_PAR - 1) / ELEM_PAR;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) {
        int64_t lo = sharc_chunk_lo(c, nc, n), hi = sharc_chunk_lo(c + 1, nc, n);
        adamw_range(p + lo, g + lo, m + lo, v + lo, hi - lo, k->decay_mul, k->beta1, k->beta2, k->step_size,
                    k->sqrt_bc2, k->eps, k->grad_scale);
    }
}

/* Note [adamw-multi] on the CPU: the table's elements, all segments end to
 * end, split into chunks over the threads in one parallel region; a chunk
 * runs adamw_range on its part of each segment it meets (the element
 * formula does not depend on where a range starts, so the bits are those
 * of sharc_cpu_adamw per segment). */
void sharc_cpu_adamw_multi(sharc_stream *s, const sharc_adamw_seg *segs, const sharc_adamw_seg *host, int nseg,
                           const sharc_adamw_scalars *k, float decay_mul) {
    if (nseg <= 0) return;
    const int64_t total = host[nseg - 1].first + host[nseg - 1].n;
    int64_t nc = (total + ELEM_PAR - 1) / ELEM_PAR;
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) {
        int64_t lo = sharc_chunk_lo(c, nc, total), hi = sharc_chunk_lo(c + 1, nc, total);
        int a = 0, b = nseg - 1; /* the last entry with first <= lo */
        while (a < b) {
            int mid = (a + b + 1) / 2;
            if (host[mid].first <= lo) a = mid;
            else b = mid - 1;
        }
        for (int i = a; i < nseg && host[i].first < hi; i++) {
            const sharc_adamw_seg *e = &host[i];
            int64_t b0 = lo > e->first ? lo - e->first : 0;
            int64_t b1 = hi < e->first + e->n ? hi - e->first : e->n;
            if (b0 >= b1) continue;
            adamw_range(e->p + b0, e->g + b0, e->m + b0, e->v + b0, b1 - b0, e->decay ? decay_mul : 1.0f, k->beta1,
                        k->beta2, k->step_size, k->sqrt_bc2, k->eps, k->grad_scale);
        }
    }
}

void sharc_cpu_copy_block(sharc_stream *s, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                          int64_t cols, bool add) {
    (void)s;
    for (int64_t r = 0; r < rows; r++) {
        float *d = dst + r * ldd;
        const float *x = src + r * lds;
        if (add)
            for (int64_t c = 0; c < cols; c++) d[c] += x[c];
        else memcpy(d, x, (size_t)cols * sizeof(float));
    }
}

void sharc_cpu_fill(sharc_stream *s, float *dst, float value, int64_t n) {
#pragma omp parallel for schedule(static) if (n > ELEM_PAR)
    for (int64_t i = 0; i < n; i++) dst[i] = value;
}

void sharc_cpu_init_normal(sharc_stream *s, float *dst, int64_t n, float std, uint64_t seed, uint64_t stream,
                           uint64_t first) {
#pragma omp parallel for schedule(static) if (n > ELEM_PAR)
    for (int64_t i = 0; i < n; i++) dst[i] = std * sharc_rng_normal(seed, stream, first + (uint64_t)i);
}
