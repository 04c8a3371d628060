/* grad_check.h: helpers shared by the kernel and model tests: random
 * tensors and a central finite-difference check of an analytic gradient. */
#ifndef SHARC_GRAD_CHECK_H
#define SHARC_GRAD_CHECK_H

#include "sharc/rng.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

/* n floats, N(0, scale^2), reproducible from `stream`. Caller frees with free(). */
static inline float *randn(int64_t n, uint64_t stream, float scale) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = scale * sharc_rng_normal(1234, stream, (uint64_t)i);
    return p;
}

static inline float *zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* sum(a * r) in double */
static inline double dot_d(const float *a, const float *r, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * (double)r[i];
    return s;
}

typedef double (*sharc_loss_fn)(void *ctx);

/* Check g = dL/dx at up to `max_points` elements of x (all if n is small) by
 * central differences with step eps. The loss is evaluated in double, so the
 * error is the O(eps^2) truncation plus fp32 rounding of the forward. */
static inline void fd_check(sharc_loss_fn loss, void *ctx, float *x, const float *g, int64_t n, float eps, double rtol,
                            double atol, const char *what) {
    int64_t step = n > 97 ? n / 97 : 1;
    for (int64_t i = 0; i < n; i += step) {
        float saved = x[i];
        x[i] = saved + eps;
        double lp = loss(ctx);
        x[i] = saved - eps;
        double lm = loss(ctx);
        x[i] = saved;
        double num = (lp - lm) / (2.0 * (double)eps);
        if (!(fabs(num - (double)g[i]) <= atol + rtol * fabs(num))) {
            fprintf(stderr, "  gradient of %s at [%lld]: analytic %.8g vs numeric %.8g\n", what, (long long)i,
                    (double)g[i], num);
            exit(1);
        }
    }
}

#endif
