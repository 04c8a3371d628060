/* kernel_table.h: the kernel tests' way into the CPU device's kernel table
 * (sharc/kernels.h): kt() is the table, ks() its stream, and the two loss
 * kernels, which leave their sum in a scalar, as functions returning it. */
#ifndef SHARC_TEST_KERNEL_TABLE_H
#define SHARC_TEST_KERNEL_TABLE_H

#include "sharc/kernels.h"

static inline const sharc_kernels *kt(void) { return sharc_device_kernels(sharc_device_cpu()); }
static inline sharc_stream *ks(void) { return sharc_device_stream(sharc_device_cpu()); }

static inline double xent_sum(float *logits, float *losses, const int32_t *targets, int64_t N, int V, float scale,
                              bool want_grad) {
    double sum = 0.0;
    kt()->xent_forward_backward(ks(), &sum, logits, losses, targets, N, V, scale, want_grad);
    return sum;
}

static inline double lmhead_sum(float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                                float scale, int64_t N, int C, int V, float *ws, int64_t chunk) {
    double sum = 0.0;
    kt()->lmhead_xent(ks(), &sum, dx, dw, x, w, targets, scale, N, C, V, ws, chunk);
    return sum;
}

#endif
