/* experts.cu: sharc_cuda_moe_*, the Mixture-of-Experts routing kernels on a
 * CUDA device (sharc/kernels.h; the math is note [moe] in src/model/moe.c,
 * the CPU reference src/device/cpu/experts.c): the router's softmax and
 * top-k and their backward, and the row gather, scatter-add and row dot
 * products that move tokens to experts and back.
 *
 * Note [cuda-moe]: every result is computed in a fixed order, with no
 * atomics. The router kernels give one thread a whole row of E experts and
 * run the CPU's code for it (src/device/moe_route.h: the same operations in
 * the same order; E and K are small). The scatter-add has one owner per
 * output element: thread (c, p)
 * owns column c of the output rows r with r % MOE_PARTS == p and walks the
 * n source rows in order, adding those that land on its rows, so each
 * element receives its additions in source order, as on the CPU, even
 * though a token's row appears K times (once per expert it is routed to).
 * Every thread reads every index (a broadcast load per warp): O(n) per
 * thread, the price of determinism without a sort. The row dot products
 * take a warp per row; the router's per-expert probability sums a thread
 * per expert walking the tokens in order (note [moe-waits] in moe.c). */
#include "cuda.h"
#include "../moe_route.h"

#include <limits.h>

#define THREADS   256
#define ROW_BLOCK 8  /* warps per block of the row dot products */
#define MOE_PARTS 64 /* owners per output column of the scatter-add */
#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__global__ static void __launch_bounds__(128)
    k_route_fwd(float *probs, int32_t *idx, float *wts, const float *logits, int64_t N, int E, int K, bool norm_topk) {
    GRID_STRIDE(t, N) sharc_moe_route_token(probs + t * E, idx + t * K, wts + t * K, logits + t * E, E, K, norm_topk);
}

__global__ static void __launch_bounds__(128)
    k_route_bwd(float *dlogits, const float *dwts, const float *probs, const int32_t *idx, const float *wts,
                const float *daux, int64_t N, int E, int K, bool norm_topk) {
    GRID_STRIDE(t, N)
    sharc_moe_route_token_backward(dlogits + t * E, dwts + t * K, probs + t * E, idx + t * K, wts + t * K, daux, E, K,
                                   norm_topk);
}

__global__ static void __launch_bounds__(THREADS)
    k_gather(float *y, const float *x, const int32_t *rows, const float *scale, int64_t n, int C) {
    GRID_STRIDE(j, n * C) {
        int64_t i = j / C;
        int c = (int)(j % C);
        float v = x[(int64_t)rows[i] * C + c];
        y[j] = scale ? scale[i] * v : v;
    }
}

/* note [cuda-moe]: thread (c, blockIdx.y) owns column c of the rows r % MOE_PARTS == blockIdx.y */
__global__ static void __launch_bounds__(128)
    k_scatter_add(float *y, const float *x, const int32_t *rows, const float *scale, int64_t n, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, part = blockIdx.y;
    if (c >= C) return;
    for (int64_t i = 0; i < n; i++) {
        int32_t r = rows[i];
        if (r % MOE_PARTS != part) continue;
        float a = scale ? scale[i] : 1.0f;
        y[(int64_t)r * C + c] += a * x[i * C + c];
    }
}

__global__ static void __launch_bounds__(32 * ROW_BLOCK)
    k_row_dot(float *out, const float *a, const int32_t *rows, const float *b, int64_t n, int C) {
    int64_t i = (int64_t)blockIdx.x * ROW_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= n) return;
    const float *x = a + (int64_t)rows[i] * C, *y = b + i * C;
    float d = 0.0f;
    for (int c = lane; c < C; c += 32) d += x[c] * y[c];
    for (int o = 16; o > 0; o /= 2) d += __shfl_xor_sync(0xffffffffu, d, o);
    if (lane == 0) out[i] = d;
}

/* One thread per expert walks the tokens in order, accumulating in double:
 * the CPU's additions in the CPU's order, so the sums are bit-identical
 * (note [moe-waits] in src/model/moe.c). N E is a layer's router output:
 * small, and read once. */
__global__ static void __launch_bounds__(64) k_prob_sum(double *psum, const float *probs, int64_t N, int E) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    double a = 0.0;
    for (int64_t t = 0; t < N; t++) a += probs[t * E + e];
    psum[e] = a;
}

extern "C" void sharc_cuda_moe_route_forward(sharc_stream *s, float *probs, int32_t *idx, float *wts,
                                             const float *logits, int64_t N, int E, int K, bool norm_topk) {
    if (N <= 0) return;
    if (E < 1 || K < 1 || K > E) sharc_fatal(__FILE__, __LINE__, "moe_route_forward: top-%d of %d experts", K, E);
    k_route_fwd<<<sharc_cuda_blocks(N, 128), 128, 0, sharc_cuda_cs(s)>>>(probs, idx, wts, logits, N, E, K, norm_topk);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_moe_route_backward(sharc_stream *s, float *dlogits, const float *dwts, const float *probs,
                                              const int32_t *idx, const float *wts, const float *daux, int64_t N, int E,
                                              int K, bool norm_topk) {
    if (N <= 0) return;
    k_route_bwd<<<sharc_cuda_blocks(N, 128), 128, 0, sharc_cuda_cs(s)>>>(dlogits, dwts, probs, idx, wts, daux, N, E, K,
                                                                         norm_topk);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_moe_gather(sharc_stream *s, float *y, const float *x, const int32_t *rows,
                                      const float *scale, int64_t n, int C) {
    if (n <= 0 || C <= 0) return;
    k_gather<<<sharc_cuda_blocks(n * C, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(y, x, rows, scale, n, C);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_moe_scatter_add(sharc_stream *s, float *y, const float *x, const int32_t *rows,
                                           const float *scale, int64_t n, int C) {
    if (n <= 0 || C <= 0) return;
    int threads = C < 128 ? 32 * ((C + 31) / 32) : 128;
    k_scatter_add<<<dim3((unsigned)((C + threads - 1) / threads), MOE_PARTS), threads, 0, sharc_cuda_cs(s)>>>(
        y, x, rows, scale, n, C);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_moe_row_dot(sharc_stream *s, float *out, const float *a, const int32_t *rows, const float *b,
                                       int64_t n, int C) {
    if (n <= 0) return;
    int64_t g = (n + ROW_BLOCK - 1) / ROW_BLOCK;
    if (g > INT_MAX) sharc_fatal(__FILE__, __LINE__, "moe_row_dot on cuda: %lld rows", (long long)n);
    k_row_dot<<<(unsigned)g, 32 * ROW_BLOCK, 0, sharc_cuda_cs(s)>>>(out, a, rows, b, n, C);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_moe_prob_sum(sharc_stream *s, double *psum, const float *probs, int64_t N, int E) {
    if (E <= 0) return;
    k_prob_sum<<<(unsigned)((E + 63) / 64), 64, 0, sharc_cuda_cs(s)>>>(psum, probs, N, E);
    SHARC_CUDA_LAUNCHED();
}
