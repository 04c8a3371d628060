/* xent.cu: sharc_cuda_xent_forward_backward, sharc_cuda_lmhead_xent and sharc_cuda_vocab_xent_*, the
 * softmax cross-entropy with its loss mask and the LM head fused with it,
 * chunked over rows (note [fused-head] in src/device/cpu/xent.c: only `chunk`
 * rows of logits exist at once), in fp32 and in bf16 (lmhead_xent_bf16). One block per row, reading it twice
 * (note [online-softmax] in docs/ARCHITECTURE.md); the rows' losses go to
 * scratch as doubles and are summed in a fixed order into the device scalar. */
#include "cuda.h"

#include <limits.h>
#include <math.h>

#define THREADS 256

static size_t al256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* all threads of the block get the result */
__device__ static float block_reduce(float v, bool is_max) {
    __shared__ float sh[THREADS / 32];
    for (int o = 16; o > 0; o /= 2) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float r = sh[0];
    for (int k = 1; k < THREADS / 32; k++) r = is_max ? fmaxf(r, sh[k]) : r + sh[k];
    return r;
}

/* Note [online-softmax]: the (max, sum of exp(x - max)) pair of a set of
 * logits, folded in one read (Milakov & Gimelshein, "Online normalizer
 * calculation for softmax", 2018): a larger max rescales the sum. Pairs of
 * an empty set are (-inf, 0) and combine to the other pair. */
__device__ static inline void ms_combine(float &m, float &s, float m2, float s2) {
    if (m2 > m) {
        s = s * expf(m - m2) + s2; /* m may be -inf (s 0): expf(-inf) = 0 */
        m = m2;
    } else if (s2 != 0.0f) { /* an empty pair adds 0 (m2 may be -inf with m); a NaN sum still spreads */
        s += s2 * expf(m2 - m);
    }
}

/* every thread's (m, s) combined in a fixed order; all threads get the result */
__device__ static void block_reduce_ms(float &m, float &s) {
    __shared__ float shm[THREADS / 32], shs[THREADS / 32];
    for (int o = 16; o > 0; o /= 2) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_combine(m, s, m2, s2);
    }
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); /* shm, shs may still be read by a previous call */
    if (lane == 0) shm[w] = m, shs[w] = s;
    __syncthreads();
    m = shm[0], s = shs[0];
    for (int k = 1; k < THREADS / 32; k++) ms_combine(m, s, shm[k], shs[k]);
}

/* note [online-softmax]: one read of the row for (max, sum), one for the gradient */
__global__ static void __launch_bounds__(THREADS)
    k_xent(double *row_loss, float *logits, float *losses, const int32_t *targets, int V, float scale, bool want_grad) {
    int64_t r = blockIdx.x;
    float *row = logits + r * V;
    int32_t t = targets[r];
    if (t < 0) {
        if (threadIdx.x == 0) {
            if (losses) losses[r] = 0.0f;
            row_loss[r] = 0.0;
        }
        if (want_grad)
            for (int j = threadIdx.x; j < V; j += THREADS) row[j] = 0.0f;
        return;
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += THREADS) {
        float x = row[j];
        if (x > mx) {
            sum = sum * expf(mx - x) + 1.0f;
            mx = x;
        } else if (x != -INFINITY) { /* -inf adds 0 (and -inf - -inf is NaN); a NaN still spreads */
            sum += expf(x - mx);
        }
    }
    block_reduce_ms(mx, sum);
    float lse = mx + logf(sum);
    float loss = lse - row[t];
    __syncthreads(); /* row[t] is read by every thread before it is overwritten */
    if (threadIdx.x == 0) {
        if (losses) losses[r] = loss;
        row_loss[r] = (double)loss;
    }
    if (want_grad)
        for (int j = threadIdx.x; j < V; j += THREADS) {
            float g = expf(row[j] - lse) * scale;
            row[j] = j == t ? g - scale : g;
        }
}

static void xent_rows(sharc_stream *s, double *row_loss, float *logits, float *losses, const int32_t *targets,
                      int64_t N, int V, float scale, bool want_grad) {
    if (N > INT_MAX) sharc_fatal(__FILE__, __LINE__, "xent: %lld rows, at most %d on cuda", (long long)N, INT_MAX);
    k_xent<<<(unsigned)N, THREADS, 0, sharc_cuda_cs(s)>>>(row_loss, logits, losses, targets, V, scale, want_grad);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_xent_forward_backward(sharc_stream *s, double *loss_sum, float *logits, float *losses,
                                                 const int32_t *targets, int64_t N, int V, float scale,
                                                 bool want_grad) {
    if (N <= 0) {
        SHARC_CUDA_CHECK(cudaMemsetAsync(loss_sum, 0, sizeof(double), sharc_cuda_cs(s)));
        return;
    }
    double *row_loss = (double *)sharc_cuda_scratch(s, (size_t)N * sizeof(double));
    xent_rows(s, row_loss, logits, losses, targets, N, V, scale, want_grad);
    sharc_cuda_sum_doubles(s, loss_sum, row_loss, N, false);
}

/* bf16: x and w rounded once per call, each chunk's dlogits before its two
 * products (note [cuda-bf16] in layers.cu; the CPU's lmhead_xent_bf16) */
static void lmhead_xent(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x, const float *w,
                        const int32_t *targets, float scale, int64_t N, int C, int V, float *ws, int64_t chunk,
                        bool bf16) {
    if (N <= 0) {
        SHARC_CUDA_CHECK(cudaMemsetAsync(loss_sum, 0, sizeof(double), sharc_cuda_cs(s)));
        return;
    }
    if (chunk < 1 || chunk > INT_MAX) sharc_fatal(__FILE__, __LINE__, "lmhead_xent: chunk %lld", (long long)chunk);
    /* scratch: the rows' losses, then (bf16) x, w and one chunk of dlogits in bf16 */
    size_t bl = al256((size_t)N * sizeof(double)), bx = al256((size_t)N * C * 2), bw = al256((size_t)V * C * 2);
    size_t bg = dx ? (size_t)(N < chunk ? N : chunk) * V * 2 : 0;
    char *sc = (char *)sharc_cuda_scratch(s, bl + (bf16 ? bx + bw + bg : 0));
    double *row_loss = (double *)sc;
    uint16_t *xh = (uint16_t *)(sc + bl), *wh = (uint16_t *)(sc + bl + bx), *gh = (uint16_t *)(sc + bl + bx + bw);
    if (bf16) {
        sharc_cuda_cast(s, xh, SHARC_DT_BF16, x, SHARC_DT_F32, N * C);
        sharc_cuda_cast(s, wh, SHARC_DT_BF16, w, SHARC_DT_F32, (int64_t)V * C);
    }
    sharc_dtype dt = bf16 ? SHARC_DT_BF16 : SHARC_DT_F32;
    const void *wm = bf16 ? (const void *)wh : (const void *)w;
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        int m = (int)(N - r0 < chunk ? N - r0 : chunk);
        const void *xc = bf16 ? (const void *)(xh + r0 * C) : (const void *)(x + r0 * C);
        /* logits(m,V) = x(m,C) w(V,C)^T */
        sharc_cuda_gemm(s, true, false, V, m, C, 1.0f, wm, C, xc, C, 0.0f, ws, V, dt);
        xent_rows(s, row_loss + r0, ws, NULL, targets + r0, m, V, scale, dx != NULL);
        if (dx) {
            const void *g = ws;
            if (bf16) {
                sharc_cuda_cast(s, gh, SHARC_DT_BF16, ws, SHARC_DT_F32, (int64_t)m * V);
                g = gh;
            }
            /* dx(m,C) = dlogits(m,V) w(V,C); dw(V,C) += dlogits^T x */
            sharc_cuda_gemm(s, false, false, C, m, V, 1.0f, wm, C, g, V, 0.0f, dx + r0 * C, C, dt);
            if (dw) sharc_cuda_gemm(s, false, true, C, V, m, 1.0f, xc, C, g, V, 1.0f, dw, C, dt);
        }
    }
    sharc_cuda_sum_doubles(s, loss_sum, row_loss, N, false);
}

extern "C" void sharc_cuda_lmhead_xent(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x,
                                       const float *w, const int32_t *targets, float scale, int64_t N, int C, int V,
                                       float *ws, int64_t chunk) {
    lmhead_xent(s, loss_sum, dx, dw, x, w, targets, scale, N, C, V, ws, chunk, false);
}

extern "C" void sharc_cuda_lmhead_xent_bf16(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x,
                                            const float *w, const int32_t *targets, float scale, int64_t N, int C,
                                            int V, float *ws, int64_t chunk) {
    lmhead_xent(s, loss_sum, dx, dw, x, w, targets, scale, N, C, V, ws, chunk, true);
}

/* ---------------------------------------- note [tp-vocab]'s statistics */

/* one block per row of this rank's logits (m, Vl) */
__global__ static void __launch_bounds__(THREADS)
    k_vocab_stats(float *red, const float *lg, const int32_t *targets, int64_t m, int v0, int Vl, bool sums) {
    int64_t r = blockIdx.x;
    const float *row = lg + r * Vl;
    if (!sums) {
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < Vl; j += THREADS) mx = fmaxf(mx, row[j]);
        mx = block_reduce(mx, true);
        if (threadIdx.x == 0) red[r] = mx;
        return;
    }
    const float mx = red[r];
    float sum = 0.0f;
    for (int j = threadIdx.x; j < Vl; j += THREADS) sum += expf(row[j] - mx);
    sum = block_reduce(sum, false);
    if (threadIdx.x == 0) {
        int64_t t = (int64_t)targets[r] - v0;
        red[m + r] = sum;
        red[2 * m + r] = targets[r] >= 0 && t >= 0 && t < Vl ? row[t] : 0.0f;
    }
}

/* the loss in row order by one thread (m is one chunk's rows), in double as on the CPU */
__global__ static void __launch_bounds__(1)
    k_vocab_loss(double *loss_sum, bool add, const float *red, const int32_t *targets, int64_t m) {
    double total = add ? *loss_sum : 0.0;
    for (int64_t r = 0; r < m; r++)
        if (targets[r] >= 0) {
            float lse = red[r] + logf(red[m + r]);
            total += (double)(lse - red[2 * m + r]);
        }
    *loss_sum = total;
}

__global__ static void __launch_bounds__(THREADS)
    k_vocab_grads(float *lg, const float *red, const int32_t *targets, int64_t m, int v0, int Vl, float scale) {
    int64_t r = blockIdx.x;
    float *row = lg + r * Vl;
    if (targets[r] < 0) {
        for (int j = threadIdx.x; j < Vl; j += THREADS) row[j] = 0.0f;
        return;
    }
    const float lse = red[r] + logf(red[m + r]);
    const int64_t t = (int64_t)targets[r] - v0;
    for (int j = threadIdx.x; j < Vl; j += THREADS) {
        float g = expf(row[j] - lse) * scale;
        row[j] = j == t ? g - scale : g;
    }
}

extern "C" void sharc_cuda_vocab_xent_stats(sharc_stream *s, float *red, const float *lg, const int32_t *targets,
                                            int64_t m, int v0, int Vl, bool sums) {
    if (m <= 0) return;
    if (m > INT_MAX)
        sharc_fatal(__FILE__, __LINE__, "vocab_xent_stats: %lld rows, at most %d on cuda", (long long)m, INT_MAX);
    k_vocab_stats<<<(unsigned)m, THREADS, 0, sharc_cuda_cs(s)>>>(red, lg, targets, m, v0, Vl, sums);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_vocab_xent_finish(sharc_stream *s, double *loss_sum, bool add, float *lg, const float *red,
                                             const int32_t *targets, int64_t m, int v0, int Vl, float scale) {
    if (m > INT_MAX)
        sharc_fatal(__FILE__, __LINE__, "vocab_xent_finish: %lld rows, at most %d on cuda", (long long)m, INT_MAX);
    cudaStream_t cs = sharc_cuda_cs(s);
    k_vocab_loss<<<1, 1, 0, cs>>>(loss_sum, add, red, targets, m);
    SHARC_CUDA_LAUNCHED();
    if (lg && m > 0) {
        k_vocab_grads<<<(unsigned)m, THREADS, 0, cs>>>(lg, red, targets, m, v0, Vl, scale);
        SHARC_CUDA_LAUNCHED();
    }
}
