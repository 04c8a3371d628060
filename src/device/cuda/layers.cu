/* layers.cu: the CUDA kernels of the layers other than attention and the
 * loss: linear (cuBLASLt, sharc_cuda_gemm), LayerNorm, RMSNorm, GELU,
 * SwiGLU, embeddings, RoPE; the bf16 linear layer (note [cuda-bf16]). Each follows its CPU kernel in src/device/cpu/
 * (the same formulas, one warp per row for the norms); parameter gradients
 * summed over rows use per-slice partial sums added in slice order, so
 * results never depend on timing (no atomics). */
#include "cuda.h"

#include <limits.h>

#define THREADS 256
#define SLICES  64
#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__device__ static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static int rows_int(int64_t N, const char *what) {
    if (N > INT_MAX) sharc_fatal(__FILE__, __LINE__, "%s: %lld rows, at most %d on cuda", what, (long long)N, INT_MAX);
    return (int)N;
}

/* ------------------------------------------------------------- linear */

__global__ static void __launch_bounds__(THREADS) k_bias(float *y, const float *b, int64_t N, int OC) {
    GRID_STRIDE(i, N * OC) y[i] += b[i % OC];
}

/* Row-major y(N,OC) = x(N,IC) w(OC,IC)^T is column-major y^T = op(w) x^T with
 * w read transposed: m = OC, n = N, k = IC. */
extern "C" void sharc_cuda_matmul_forward(sharc_stream *s, float *y, const float *x, const float *w, const float *b,
                                          int64_t N, int IC, int OC) {
    int n = rows_int(N, "matmul_forward");
    if (!sharc_cuda_gemm_bias(s, true, false, OC, n, IC, 1.0f, w, IC, x, IC, 0.0f, y, OC, SHARC_DT_F32, b)) {
        k_bias<<<sharc_cuda_blocks(N * OC, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(y, b, N, OC);
        SHARC_CUDA_LAUNCHED();
    }
}

extern "C" void sharc_cuda_matmul_backward(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                           const float *x, const float *w, int64_t N, int IC, int OC) {
    int n = rows_int(N, "matmul_backward");
    /* dx^T(IC,N) = w^T(IC,OC) dy^T(OC,N) */
    if (dx) sharc_cuda_gemm(s, false, false, IC, n, OC, 1.0f, w, IC, dy, OC, 0.0f, dx, IC, SHARC_DT_F32);
    /* dw^T(IC,OC) += x^T(IC,N) dy(N,OC) */
    if (dw) sharc_cuda_gemm(s, false, true, IC, OC, n, 1.0f, x, IC, dy, OC, 1.0f, dw, IC, SHARC_DT_F32);
    if (db) sharc_cuda_colsum_add(s, db, dy, N, OC);
}

/* Note [cuda-bf16]: the bf16 linear layer (and lmhead_xent_bf16 in xent.cu)
 * rounds its fp32 matrix operands into the stream's scratch with the cast
 * kernel (round to nearest even, the bits of the CPU's sharc_from_f32) and
 * multiplies them through cuBLASLt with bf16 inputs, fp32 accumulation
 * (CUBLAS_COMPUTE_32F) and an fp32 output: the operands of the CPU's bf16
 * path (note [bf16-gemm]), another summation order. Biases and their
 * gradients stay fp32; the bias gradient is summed first, because it uses
 * the scratch the operands are then rounded into. */
static size_t al256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

static uint16_t *round16(sharc_stream *s, uint16_t *dst, const float *src, int64_t n) {
    sharc_cuda_cast(s, dst, SHARC_DT_BF16, src, SHARC_DT_F32, n);
    return dst;
}

extern "C" void sharc_cuda_matmul_forward_b16(sharc_stream *s, float *y, const uint16_t *x, const uint16_t *w,
                                              const float *b, int64_t N, int IC, int OC) {
    int n = rows_int(N, "matmul_forward_b16");
    if (!sharc_cuda_gemm_bias(s, true, false, OC, n, IC, 1.0f, w, IC, x, IC, 0.0f, y, OC, SHARC_DT_BF16, b)) {
        k_bias<<<sharc_cuda_blocks(N * OC, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(y, b, N, OC);
        SHARC_CUDA_LAUNCHED();
    }
}

extern "C" void sharc_cuda_matmul_forward_bf16(sharc_stream *s, float *y, const float *x, const float *w,
                                               const float *b, int64_t N, int IC, int OC) {
    size_t bx = al256((size_t)N * IC * 2);
    char *sc = (char *)sharc_cuda_scratch(s, bx + (size_t)OC * IC * 2);
    const uint16_t *xh = round16(s, (uint16_t *)sc, x, N * IC);
    const uint16_t *wh = round16(s, (uint16_t *)(sc + bx), w, (int64_t)OC * IC);
    sharc_cuda_matmul_forward_b16(s, y, xh, wh, b, N, IC, OC);
}

/* dx = dy w, dw += dy^T x from bf16 operands (either NULL: skipped) */
static void backward_products16(sharc_stream *s, float *dx, float *dw, const uint16_t *dy, const uint16_t *x,
                                const uint16_t *w, int n, int IC, int OC) {
    if (dx) sharc_cuda_gemm(s, false, false, IC, n, OC, 1.0f, w, IC, dy, OC, 0.0f, dx, IC, SHARC_DT_BF16);
    if (dw) sharc_cuda_gemm(s, false, true, IC, OC, n, 1.0f, x, IC, dy, OC, 1.0f, dw, IC, SHARC_DT_BF16);
}

extern "C" void sharc_cuda_matmul_backward_b16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                               const uint16_t *x, const uint16_t *w, int64_t N, int IC, int OC) {
    int n = rows_int(N, "matmul_backward_b16");
    if (db) sharc_cuda_colsum_add(s, db, dy, N, OC); /* the fp32 dy, as in fp32 */
    if (!dx && !dw) return;
    uint16_t *dyh = round16(s, (uint16_t *)sharc_cuda_scratch(s, (size_t)N * OC * 2), dy, N * OC);
    backward_products16(s, dx, dw, dyh, x, w, n, IC, OC);
}

extern "C" void sharc_cuda_matmul_backward_bf16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                                const float *x, const float *w, int64_t N, int IC, int OC) {
    int n = rows_int(N, "matmul_backward_bf16");
    if (db) sharc_cuda_colsum_add(s, db, dy, N, OC);
    if (!dx && !dw) return;
    size_t bdy = al256((size_t)N * OC * 2), bx = dw ? al256((size_t)N * IC * 2) : 0;
    char *sc = (char *)sharc_cuda_scratch(s, bdy + bx + (dx ? (size_t)OC * IC * 2 : 0));
    const uint16_t *dyh = round16(s, (uint16_t *)sc, dy, N * OC);
    const uint16_t *xh = dw ? round16(s, (uint16_t *)(sc + bdy), x, N * IC) : NULL;
    const uint16_t *wh = dx ? round16(s, (uint16_t *)(sc + bdy + bx), w, (int64_t)OC * IC) : NULL;
    backward_products16(s, dx, dw, dyh, xh, wh, n, IC, OC);
}

/* note [gemm-gelu]: the linear layer with GELU in cuBLASLt's epilogue
 * where it can, else the unfused kernels */
extern "C" void sharc_cuda_matmul_gelu_forward(sharc_stream *s, float *pre, float *y, const float *x, const float *w,
                                               const float *b, int64_t N, int IC, int OC) {
    int n = rows_int(N, "matmul_gelu_forward");
    if (sharc_cuda_gemm_gelu(s, true, true, false, OC, n, IC, w, IC, x, IC, y, OC, SHARC_DT_F32, b, pre, OC)) return;
    sharc_cuda_matmul_forward(s, pre, x, w, b, N, IC, OC);
    sharc_cuda_gelu_forward(s, y, pre, N * OC);
}

extern "C" void sharc_cuda_matmul_gelu_forward_b16(sharc_stream *s, float *pre, float *y, uint16_t *yh,
                                                   const uint16_t *x, const uint16_t *w, const float *b, int64_t N,
                                                   int IC, int OC) {
    int n = rows_int(N, "matmul_gelu_forward_b16");
    if (!sharc_cuda_gemm_gelu(s, true, true, false, OC, n, IC, w, IC, x, IC, y, OC, SHARC_DT_BF16, b, pre, OC)) {
        sharc_cuda_matmul_forward_b16(s, pre, x, w, b, N, IC, OC);
        sharc_cuda_gelu_forward(s, y, pre, N * OC);
    }
    if (yh) round16(s, yh, y, N * OC);
}

/* dx^T(IC,N) = (w^T dy^T) * gelu'(pre^T): the DGELU epilogue, else the plain
 * product and gelu_backward in place */
static void dx_dgelu(sharc_stream *s, float *dx, const void *dy, const void *w, const float *pre, int n, int IC, int OC,
                     sharc_dtype ab) {
    if (sharc_cuda_gemm_gelu(s, false, false, false, IC, n, OC, w, IC, dy, OC, dx, IC, ab, NULL, (float *)pre, IC))
        return;
    sharc_cuda_gemm(s, false, false, IC, n, OC, 1.0f, w, IC, dy, OC, 0.0f, dx, IC, ab);
    sharc_cuda_gelu_backward(s, dx, dx, pre, (int64_t)n * IC);
}

extern "C" void sharc_cuda_matmul_backward_dgelu(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                                 const float *x, const float *w, const float *pre, int64_t N, int IC,
                                                 int OC) {
    int n = rows_int(N, "matmul_backward_dgelu");
    if (dx) dx_dgelu(s, dx, dy, w, pre, n, IC, OC, SHARC_DT_F32);
    if (dw) sharc_cuda_gemm(s, false, true, IC, OC, n, 1.0f, x, IC, dy, OC, 1.0f, dw, IC, SHARC_DT_F32);
    if (db) sharc_cuda_colsum_add(s, db, dy, N, OC);
}

extern "C" void sharc_cuda_matmul_backward_dgelu_b16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                                     const uint16_t *x, const uint16_t *w, const float *pre, int64_t N,
                                                     int IC, int OC) {
    int n = rows_int(N, "matmul_backward_dgelu_b16");
    if (db) sharc_cuda_colsum_add(s, db, dy, N, OC); /* the fp32 dy, as in fp32 */
    if (!dx && !dw) return;
    uint16_t *dyh = round16(s, (uint16_t *)sharc_cuda_scratch(s, (size_t)N * OC * 2), dy, N * OC);
    if (dx) dx_dgelu(s, dx, dyh, w, pre, n, IC, OC, SHARC_DT_BF16);
    if (dw) sharc_cuda_gemm(s, false, true, IC, OC, n, 1.0f, x, IC, dyh, OC, 1.0f, dw, IC, SHARC_DT_BF16);
}

/* ----------------------------------------------------- LayerNorm, RMSNorm */

/* one warp per row, 8 rows per block */
#define ROW_BLOCK 8

/* Note [add-norm] on cuda: with res, the row normalised is x + res, written
 * to xsum first by the lane that then reads it (each lane keeps its own
 * elements i = lane (mod 32) in every loop, so no other lane's write is
 * read); the sums run in the order of the plain norm, so the bits are
 * those of add then the norm. */
__global__ static void __launch_bounds__(32 * ROW_BLOCK)
    k_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b, int64_t N, int C,
                float eps, const float *res, float *xsum) {
    int64_t r = (int64_t)blockIdx.x * ROW_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= N) return;
    if (res) {
        for (int i = lane; i < C; i += 32) xsum[r * C + i] = x[r * C + i] + res[r * C + i];
        x = xsum;
    }
    const float *xr = x + r * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += xr[i];
    float m = warp_sum(sum) / (float)C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = xr[i] - m;
        v += d * d;
    }
    float sc = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
    float *yr = y + r * C;
    for (int i = lane; i < C; i += 32) yr[i] = (xr[i] - m) * sc * w[i] + (b ? b[i] : 0.0f);
    if (lane == 0) {
        if (mean) mean[r] = m;
        if (rstd) rstd[r] = sc;
    }
}

extern "C" void sharc_cuda_layernorm_forward(sharc_stream *s, float *y, float *mean, float *rstd, const float *x,
                                             const float *w, const float *b, int64_t N, int C, float eps) {
    if (N <= 0) return;
    k_layernorm<<<(unsigned)((N + ROW_BLOCK - 1) / ROW_BLOCK), 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(
        y, mean, rstd, x, w, b, N, C, eps, NULL, NULL);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_add_layernorm_forward(sharc_stream *s, float *sum, float *y, float *mean, float *rstd,
                                                 const float *x, const float *r, const float *w, const float *b,
                                                 int64_t N, int C, float eps) {
    if (N <= 0) return;
    k_layernorm<<<(unsigned)((N + ROW_BLOCK - 1) / ROW_BLOCK), 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(
        y, mean, rstd, x, w, b, N, C, eps, r, sum);
    SHARC_CUDA_LAUNCHED();
}

__global__ static void __launch_bounds__(32 * ROW_BLOCK)
    k_layernorm_dx(float *dx, const float *dy, const float *dres, const float *x, const float *w, const float *mean,
                   const float *rstd, int64_t N, int C) {
    int64_t r = (int64_t)blockIdx.x * ROW_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= N) return;
    const float *xr = x + r * C, *dyr = dy + r * C;
    float m = mean[r], sc = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float g = dyr[i] * w[i];
        sg += g;
        sgx += g * (xr[i] - m) * sc;
    }
    sg = warp_sum(sg) / (float)C;
    sgx = warp_sum(sgx) / (float)C;
    for (int i = lane; i < C; i += 32) {
        float xhat = (xr[i] - m) * sc;
        float v = sc * (dyr[i] * w[i] - sg - xhat * sgx);
        dx[r * C + i] = dres ? dres[r * C + i] + v : v;
    }
}

/* Where row r of C elements starts: rows are contiguous (H = 1, ld = C), or
 * H heads of C elements inside rows of stride ld (per-head RMSNorm). */
__device__ static inline int64_t row_at(int64_t r, int H, int C, int64_t ld) {
    return H == 1 ? r * ld : (r / H) * ld + (r % H) * (int64_t)C;
}

/* partial dw, db (and RMSNorm's dw: mean == NULL, xhat = x * rstd) per slice of rows */
__global__ static void __launch_bounds__(THREADS)
    k_norm_dw_part(float *pdw, float *pdb, const float *dy, const float *x, const float *mean, const float *rstd,
                   int64_t N, int C, int H, int64_t ld, int slices) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, sl = blockIdx.y;
    if (c >= C) return;
    int64_t r0 = N * sl / slices, r1 = N * (sl + 1) / slices;
    float aw = 0.0f, ab = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        int64_t o = row_at(r, H, C, ld) + c;
        float d = dy[o];
        float xhat = mean ? (x[o] - mean[r]) * rstd[r] : x[o] * rstd[r];
        aw += d * xhat;
        ab += d;
    }
    if (pdw) pdw[(int64_t)sl * C + c] = aw;
    if (pdb) pdb[(int64_t)sl * C + c] = ab;
}

__global__ static void __launch_bounds__(THREADS) k_parts_add(float *out, const float *part, int C, int slices) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float a = 0.0f;
    for (int sl = 0; sl < slices; sl++) a += part[(int64_t)sl * C + c];
    out[c] += a;
}

static void norm_param_grads(sharc_stream *s, float *dw, float *db, const float *dy, const float *x, const float *mean,
                             const float *rstd, int64_t N, int C, int H, int64_t ld) {
    if (!dw && !db) return;
    int slices = N < SLICES ? (int)N : SLICES;
    float *part = (float *)sharc_cuda_scratch(s, (size_t)2 * slices * C * sizeof(float));
    float *pdw = dw ? part : NULL, *pdb = db ? part + (size_t)slices * C : NULL;
    cudaStream_t cs = sharc_cuda_cs(s);
    dim3 grid((C + THREADS - 1) / THREADS, slices);
    k_norm_dw_part<<<grid, THREADS, 0, cs>>>(pdw, pdb, dy, x, mean, rstd, N, C, H, ld, slices);
    SHARC_CUDA_LAUNCHED();
    unsigned cb = (C + THREADS - 1) / THREADS;
    if (dw) k_parts_add<<<cb, THREADS, 0, cs>>>(dw, pdw, C, slices);
    if (db) k_parts_add<<<cb, THREADS, 0, cs>>>(db, pdb, C, slices);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_layernorm_backward(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                              const float *dres, const float *x, const float *w, const float *mean,
                                              const float *rstd, int64_t N, int C) {
    if (N <= 0) return;
    /* the parameter gradients first: dx may alias dres, never dy or x */
    norm_param_grads(s, dw, db, dy, x, mean, rstd, N, C, 1, C);
    k_layernorm_dx<<<(unsigned)((N + ROW_BLOCK - 1) / ROW_BLOCK), 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(
        dx, dy, dres, x, w, mean, rstd, N, C);
    SHARC_CUDA_LAUNCHED();
}

/* N rows of C (row_at); the per-head form has N = tokens x H. With res
 * (H 1), x + res is normalised (note [add-norm], k_layernorm). */
__global__ static void __launch_bounds__(32 * ROW_BLOCK)
    k_rmsnorm(float *y, float *rstd, const float *x, const float *w, int64_t N, int C, int H, int64_t ld, float eps,
              const float *res, float *xsum) {
    int64_t r = (int64_t)blockIdx.x * ROW_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= N) return;
    int64_t o = row_at(r, H, C, ld);
    if (res) {
        for (int i = lane; i < C; i += 32) xsum[o + i] = x[o + i] + res[o + i];
        x = xsum;
    }
    const float *xr = x + o;
    float ss = 0.0f;
    for (int i = lane; i < C; i += 32) ss += xr[i] * xr[i];
    float sc = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
    for (int i = lane; i < C; i += 32) y[o + i] = xr[i] * sc * w[i];
    if (lane == 0 && rstd) rstd[r] = sc;
}

extern "C" void sharc_cuda_rmsnorm_forward(sharc_stream *s, float *y, float *rstd, const float *x, const float *w,
                                           int64_t N, int C, float eps) {
    if (N <= 0) return;
    k_rmsnorm<<<(unsigned)((N + ROW_BLOCK - 1) / ROW_BLOCK), 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(
        y, rstd, x, w, N, C, 1, C, eps, NULL, NULL);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_add_rmsnorm_forward(sharc_stream *s, float *sum, float *y, float *rstd, const float *x,
                                               const float *r, const float *w, int64_t N, int C, float eps) {
    if (N <= 0) return;
    k_rmsnorm<<<(unsigned)((N + ROW_BLOCK - 1) / ROW_BLOCK), 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(y, rstd, x, w, N, C,
                                                                                                    1, C, eps, r, sum);
    SHARC_CUDA_LAUNCHED();
}

/* dx may alias dy: a lane reads its elements of the row (and the warp's
 * sum is complete) before it writes them */
__global__ static void __launch_bounds__(32 * ROW_BLOCK)
    k_rmsnorm_dx(float *dx, const float *dy, const float *dres, const float *x, const float *w, const float *rstd,
                 int64_t N, int C, int H, int64_t ld) {
    int64_t r = (int64_t)blockIdx.x * ROW_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= N) return;
    int64_t o = row_at(r, H, C, ld);
    const float *xr = x + o, *dyr = dy + o;
    float sc = rstd[r];
    float dot = 0.0f;
    for (int i = lane; i < C; i += 32) dot += dyr[i] * w[i] * xr[i];
    float k = warp_sum(dot) * sc * sc * sc / (float)C;
    for (int i = lane; i < C; i += 32) {
        float v = dyr[i] * w[i] * sc - k * xr[i];
        dx[o + i] = dres ? dres[o + i] + v : v;
    }
}

extern "C" void sharc_cuda_rmsnorm_backward(sharc_stream *s, float *dx, float *dw, const float *dy, const float *dres,
                                            const float *x, const float *w, const float *rstd, int64_t N, int C) {
    if (N <= 0) return;
    norm_param_grads(s, dw, NULL, dy, x, NULL, rstd, N, C, 1, C);
    k_rmsnorm_dx<<<(unsigned)((N + ROW_BLOCK - 1) / ROW_BLOCK), 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(
        dx, dy, dres, x, w, rstd, N, C, 1, C);
    SHARC_CUDA_LAUNCHED();
}

/* per-head RMSNorm (Qwen3's q_norm, k_norm): N tokens x H rows of hd */
extern "C" void sharc_cuda_head_rmsnorm_forward(sharc_stream *s, float *y, float *rstd, const float *x, const float *w,
                                                int64_t N, int H, int hd, int64_t ld, float eps) {
    int64_t R = N * H;
    if (R <= 0) return;
    k_rmsnorm<<<(unsigned)((R + ROW_BLOCK - 1) / ROW_BLOCK), 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(
        y, rstd, x, w, R, hd, H, ld, eps, NULL, NULL);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_head_rmsnorm_backward(sharc_stream *s, float *dx, float *dw, const float *dy, const float *x,
                                                 const float *w, const float *rstd, int64_t N, int H, int hd,
                                                 int64_t ld) {
    int64_t R = N * H;
    if (R <= 0) return;
    /* dw first: dx may alias dy */
    norm_param_grads(s, dw, NULL, dy, x, NULL, rstd, R, hd, H, ld);
    k_rmsnorm_dx<<<(unsigned)((R + ROW_BLOCK - 1) / ROW_BLOCK), 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(
        dx, dy, NULL, x, w, rstd, R, hd, H, ld);
    SHARC_CUDA_LAUNCHED();
}

/* --------------------------------------------------------- GELU, SwiGLU */

#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

__global__ static void __launch_bounds__(THREADS) k_gelu(float *y, const float *x, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}
__global__ static void __launch_bounds__(THREADS) k_gelu_back(float *dx, const float *dy, const float *x, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        float t = tanhf(GELU_K * (v + GELU_C * v * v * v));
        float dt = GELU_K * (1.0f + 3.0f * GELU_C * v * v) * (1.0f - t * t);
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
    }
}

extern "C" void sharc_cuda_gelu_forward(sharc_stream *s, float *y, const float *x, int64_t n) {
    if (n <= 0) return;
    k_gelu<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(y, x, n);
    SHARC_CUDA_LAUNCHED();
}
extern "C" void sharc_cuda_gelu_backward(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t n) {
    if (n <= 0) return;
    k_gelu_back<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(dx, dy, x, n);
    SHARC_CUDA_LAUNCHED();
}

__global__ static void __launch_bounds__(THREADS) k_swiglu(float *y, const float *x, int64_t N, int I) {
    GRID_STRIDE(j, N * I) {
        int64_t r = j / I;
        int i = (int)(j % I);
        float g = x[r * 2 * I + i], u = x[r * 2 * I + I + i];
        y[j] = g / (1.0f + expf(-g)) * u;
    }
}
__global__ static void __launch_bounds__(THREADS)
    k_swiglu_back(float *dx, const float *dy, const float *x, int64_t N, int I) {
    GRID_STRIDE(j, N * I) {
        int64_t r = j / I;
        int i = (int)(j % I);
        float g = x[r * 2 * I + i], u = x[r * 2 * I + I + i];
        float sig = 1.0f / (1.0f + expf(-g));
        dx[r * 2 * I + I + i] = dy[j] * g * sig;
        dx[r * 2 * I + i] = dy[j] * u * sig * (1.0f + g * (1.0f - sig));
    }
}

extern "C" void sharc_cuda_swiglu_forward(sharc_stream *s, float *y, const float *x, int64_t N, int I) {
    if (N <= 0 || I <= 0) return;
    k_swiglu<<<sharc_cuda_blocks(N * I, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(y, x, N, I);
    SHARC_CUDA_LAUNCHED();
}
extern "C" void sharc_cuda_swiglu_backward(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t N,
                                           int I) {
    if (N <= 0 || I <= 0) return;
    k_swiglu_back<<<sharc_cuda_blocks(N * I, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(dx, dy, x, N, I);
    SHARC_CUDA_LAUNCHED();
}

/* ----------------------------------------------------------- embeddings */

__global__ static void __launch_bounds__(THREADS)
    k_embed(float *x, const int32_t *tokens, const float *wte, const float *wpe, int64_t N, int T, int C, int t0) {
    GRID_STRIDE(j, N * C) {
        int64_t r = j / C;
        int c = (int)(j % C);
        float v = wte[(int64_t)tokens[r] * C + c];
        if (wpe) v += wpe[(int64_t)(t0 + r % T) * C + c];
        x[j] = v;
    }
}

/* dwte: thread (c, p) owns column c of the vocabulary rows v with v % P == p
 * and walks the rows in order, so each element of dwte gets its additions in
 * row order, as on the CPU, with no atomics (every thread of a warp reads the
 * same token: one broadcast load) */
#define EMB_PARTS 64
__global__ static void __launch_bounds__(128)
    k_embed_back_wte(float *dwte, const float *dx, const int32_t *tokens, int64_t N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, part = blockIdx.y;
    if (c >= C) return;
    for (int64_t r = 0; r < N; r++) {
        int32_t v = tokens[r];
        if (v % EMB_PARTS == part) dwte[(int64_t)v * C + c] += dx[r * C + c];
    }
}
/* dwpe(t0 + t, c) += dx of each sequence, in batch order */
__global__ static void __launch_bounds__(THREADS)
    k_embed_back_wpe(float *dwpe, const float *dx, int B, int T, int C, int t0) {
    GRID_STRIDE(j, (int64_t)T * C) {
        int64_t t = j / C;
        int c = (int)(j % C);
        float a = dwpe[(t0 + t) * C + c]; /* added to in batch order, as on the CPU */
        for (int b = 0; b < B; b++) a += dx[((int64_t)b * T + t) * C + c];
        dwpe[(t0 + t) * C + c] = a;
    }
}

extern "C" void sharc_cuda_embedding_forward(sharc_stream *s, float *x, const int32_t *tokens, const float *wte,
                                             const float *wpe, int B, int T, int C, int t0) {
    int64_t N = (int64_t)B * T;
    if (N <= 0) return;
    k_embed<<<sharc_cuda_blocks(N * C, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(x, tokens, wte, wpe, N, T, C, t0);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_embedding_backward(sharc_stream *s, float *dwte, float *dwpe, const float *dx,
                                              const int32_t *tokens, int B, int T, int C, int t0) {
    int64_t N = (int64_t)B * T;
    if (N <= 0) return;
    cudaStream_t cs = sharc_cuda_cs(s);
    if (dwte) k_embed_back_wte<<<dim3((C + 127) / 128, EMB_PARTS), 128, 0, cs>>>(dwte, dx, tokens, N, C);
    if (dwpe) k_embed_back_wpe<<<sharc_cuda_blocks((int64_t)T * C, THREADS), THREADS, 0, cs>>>(dwpe, dx, B, T, C, t0);
    SHARC_CUDA_LAUNCHED();
}

/* Note [tp-vocab] (src/model/tp.h): this tp rank's rows [v0, v0 + Vl) of
 * the vocabulary. Forward: one thread per element; backward as
 * k_embed_back_wte, the rows walked in order by each column's thread. */
__global__ static void __launch_bounds__(THREADS)
    k_vocab_embed(float *x, const int32_t *tokens, const int32_t *pos, const float *wte, const float *wpe, int64_t N,
                  int T, int C, int v0, int Vl) {
    GRID_STRIDE(j, N * C) {
        int64_t r = j / C, c = j % C, t = (int64_t)tokens[r] - v0;
        if (t < 0 || t >= Vl) {
            x[j] = 0.0f;
            continue;
        }
        float v = wte[t * C + c];
        if (wpe) v += wpe[(int64_t)(pos ? pos[r] : r % T) * C + c];
        x[j] = v;
    }
}
__global__ static void __launch_bounds__(128)
    k_vocab_embed_back(float *dwte, const float *dx, const int32_t *tokens, int64_t N, int C, int v0, int Vl) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, part = blockIdx.y;
    if (c >= C) return;
    for (int64_t r = 0; r < N; r++) {
        int64_t t = (int64_t)tokens[r] - v0;
        if (t >= 0 && t < Vl && t % EMB_PARTS == part) dwte[t * C + c] += dx[r * C + c];
    }
}

extern "C" void sharc_cuda_vocab_embedding_forward(sharc_stream *s, float *x, const int32_t *tokens, const int32_t *pos,
                                                   const float *wte, const float *wpe, int64_t N, int T, int C, int v0,
                                                   int Vl) {
    if (N <= 0) return;
    k_vocab_embed<<<sharc_cuda_blocks(N * C, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(x, tokens, pos, wte, wpe, N, T,
                                                                                       C, v0, Vl);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_vocab_embedding_backward(sharc_stream *s, float *dwte, const float *dx,
                                                    const int32_t *tokens, int64_t N, int C, int v0, int Vl) {
    if (N <= 0) return;
    k_vocab_embed_back<<<dim3((C + 127) / 128, EMB_PARTS), 128, 0, sharc_cuda_cs(s)>>>(dwte, dx, tokens, N, C, v0, Vl);
    SHARC_CUDA_LAUNCHED();
}

/* ------------------------------------------------------------------ RoPE */

__global__ static void __launch_bounds__(THREADS)
    k_rope_table(float *cos_t, float *sin_t, int T, int hd, float theta, int t0) {
    int half = hd / 2;
    GRID_STRIDE(j, (int64_t)T * half) {
        int t = (int)(j / half), i = (int)(j % half);
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
        float a = (float)(t0 + t) * inv_freq;
        cos_t[j] = cosf(a);
        sin_t[j] = sinf(a);
    }
}

__global__ static void __launch_bounds__(THREADS) k_rope(float *qkv, const float *cos_t, const float *sin_t, int64_t N,
                                                         int T, int nheads, int stride, int hd, float sign) {
    int half = hd / 2;
    GRID_STRIDE(j, N * nheads * half) {
        int i = (int)(j % half);
        int64_t rh = j / half;
        int h = (int)(rh % nheads);
        int64_t r = rh / nheads;
        const float c = cos_t[(r % T) * half + i], si = sign * sin_t[(r % T) * half + i];
        float *x = qkv + r * stride + (int64_t)h * hd;
        float a = x[i], b = x[i + half];
        x[i] = a * c - b * si;
        x[i + half] = b * c + a * si;
    }
}

extern "C" void sharc_cuda_rope_table(sharc_stream *s, float *cos_t, float *sin_t, int T, int hd, float theta, int t0) {
    if (T <= 0 || hd < 2) return;
    k_rope_table<<<sharc_cuda_blocks((int64_t)T * (hd / 2), THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(cos_t, sin_t, T,
                                                                                                      hd, theta, t0);
    SHARC_CUDA_LAUNCHED();
}

/* note [packing]: cosf / sinf here are CUDA's (within 2 ulp of glibc's, not bit-equal) */
__global__ static void __launch_bounds__(THREADS)
    k_rope_table_pos(float *cos_t, float *sin_t, const int32_t *pos, const float *inv_freq, int64_t N, int half) {
    GRID_STRIDE(j, N * half) {
        float a = (float)pos[j / half] * inv_freq[j % half];
        cos_t[j] = cosf(a);
        sin_t[j] = sinf(a);
    }
}

extern "C" void sharc_cuda_rope_table_pos(sharc_stream *s, float *cos_t, float *sin_t, const int32_t *pos,
                                          const float *inv_freq, int64_t N, int half) {
    if (N <= 0 || half < 1) return;
    k_rope_table_pos<<<sharc_cuda_blocks(N * half, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(cos_t, sin_t, pos,
                                                                                             inv_freq, N, half);
    SHARC_CUDA_LAUNCHED();
}

static void rope_apply(sharc_stream *s, float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                       int NKV, int hd, float sign) {
    int64_t N = (int64_t)B * T;
    if (N <= 0 || hd < 2) return;
    int64_t n = N * (NH + NKV) * (hd / 2);
    k_rope<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(qkv, cos_t, sin_t, N, T, NH + NKV,
                                                                            (NH + 2 * NKV) * hd, hd, sign);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_rope_forward(sharc_stream *s, float *qkv, const float *cos_t, const float *sin_t, int B,
                                        int T, int NH, int NKV, int hd) {
    rope_apply(s, qkv, cos_t, sin_t, B, T, NH, NKV, hd, 1.0f);
}
extern "C" void sharc_cuda_rope_backward(sharc_stream *s, float *dqkv, const float *cos_t, const float *sin_t, int B,
                                         int T, int NH, int NKV, int hd) {
    rope_apply(s, dqkv, cos_t, sin_t, B, T, NH, NKV, hd, -1.0f);
}
