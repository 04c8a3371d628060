/* cuda.h (internal): the CUDA backend's shared pieces: the per-stream state
 * (the cudaStream_t, a grow-only scratch buffer, the cuBLASLt workspace),
 * launch checking, the cuBLASLt GEMM helper, and the sharc_cuda_* kernels
 * that cuda.cu puts in the kernel table (sharc/kernels.h documents each).
 *
 * Note [cuda-errors]: kernel slots return nothing, so a failed launch or
 * cuBLASLt call is a broken invariant: sharc_fatal with the CUDA error and
 * file:line (the CUDA context is unusable after most such errors anyway).
 * Memory, copies, streams and events return a status through the dispatcher. */
#ifndef SHARC_DEVICE_CUDA_H
#define SHARC_DEVICE_CUDA_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "../device_impl.h"
#include "sharc/kernels.h"
#include "sharc/log.h"

/* sharc_stream.impl of a cuda device */
typedef struct {
    cudaStream_t cs;
    void *scratch; /* grow-only, device memory of sharc_device_alloc (counted as OTHER) */
    size_t scratch_bytes;
    void *gemm_ws;           /* the cuBLASLt workspace of this stream */
    unsigned long zero_seen; /* note [cuda-zero-alloc]: the allocations this stream is ordered after */
} sharc_cuda_stream;

/* Note [cuda-zero-alloc] (cuda.cu): allocations so far, each zeroed on its
 * device's default stream; a stream that has not yet waited for the latest
 * zeroing does so (a stream-side event wait, no host wait) before anything
 * more is queued on it. Every queueing goes through sharc_cuda_cs. */
extern unsigned long sharc_cuda_zero_gen;
void sharc_cuda_zero_order(sharc_cuda_stream *cs);
static inline cudaStream_t sharc_cuda_cs(sharc_stream *s) {
    sharc_cuda_stream *cs = (sharc_cuda_stream *)s->impl;
    if (cs->zero_seen != __atomic_load_n(&sharc_cuda_zero_gen, __ATOMIC_ACQUIRE)) sharc_cuda_zero_order(cs);
    return cs->cs;
}


/* note [cuda-errors] */
#define SHARC_CUDA_CHECK(call)                                                                                         \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) sharc_fatal(__FILE__, __LINE__, "cuda: %s: %s", #call, cudaGetErrorString(e_));         \
    } while (0)
#define SHARC_CUDA_LAUNCHED() SHARC_CUDA_CHECK(cudaGetLastError())

/* Grid for n elements with `threads` per block, grid-stride loops beyond it. */
static inline unsigned sharc_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b > 65535 * 16 ? 65535 * 16 : b);
}

#ifdef __cplusplus
extern "C" {
#endif

/* At least `bytes` of scratch for work queued on s (valid until the next
 * call on the same stream; one user at a time). */
void *sharc_cuda_scratch(sharc_stream *s, size_t bytes);

/* cuBLASLt, column-major like BLAS: C(m,n) = alpha op(A) op(B) + beta C, A/B
 * of dtype ab (F32: fp32 compute with TF32 off; BF16: fp32 accumulation),
 * C fp32. Loaded with dlopen on first use (SHARC_CUBLASLT_LIB names another
 * file); an error loading it is returned by sharc_cuda_blas_load. */
sharc_status sharc_cuda_blas_load(void);
void sharc_cuda_gemm(sharc_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *A, int lda,
                     const void *B, int ldb, float beta, float *C, int ldc, sharc_dtype ab);
/* The same, plus bias[i] on row i of C (bias may be NULL) in the product's
 * epilogue where cuBLASLt can (note [gemm-bias]); false: the bias was not
 * added, and the caller adds it. */
bool sharc_cuda_gemm_bias(sharc_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *A, int lda,
                          const void *B, int ldb, float beta, float *C, int ldc, sharc_dtype ab, const float *bias);
/* The product with GELU in its epilogue (note [gemm-gelu]), C = D fp32,
 * beta 0: gelu_fwd, C = gelu(op(A) op(B) + bias) (bias nullable) and aux(m,
 * n; leading dimension ldaux) = the GELU input; otherwise C = (op(A) op(B))
 * * gelu'(aux). false: cuBLASLt cannot here (alignment, no algorithm) and
 * NOTHING was computed: the caller takes the unfused path. */
bool sharc_cuda_gemm_gelu(sharc_stream *s, bool gelu_fwd, bool ta, bool tb, int m, int n, int k, const void *A, int lda,
                          const void *B, int ldb, float *C, int ldc, sharc_dtype ab, const float *bias, float *aux,
                          int ldaux);

/* elem.cu */
void sharc_cuda_add(sharc_stream *s, float *y, const float *a, const float *b, int64_t n);
void sharc_cuda_cast(sharc_stream *s, void *dst, sharc_dtype dst_dt, const void *src, sharc_dtype src_dt, int64_t n);
void sharc_cuda_round(sharc_stream *s, float *dst, const float *src, sharc_dtype dt, int64_t n);
void sharc_cuda_accumulate(sharc_stream *s, float *dst, const float *src, int64_t n);
void sharc_cuda_sum_ranks(sharc_stream *s, void *dst, const void *const *src, int S, int64_t n, sharc_dtype dt,
                          bool add);
void sharc_cuda_sumsq(sharc_stream *s, double *acc, const float *x, int64_t n);
void sharc_cuda_sumsq_multi(sharc_stream *s, double *acc, const sharc_sumsq_seg *segs, const sharc_sumsq_seg *host,
                            int nseg);
void sharc_cuda_loss_add(sharc_stream *s, double *sums, const double *loss, double add, double weight);
void sharc_cuda_adamw(sharc_stream *s, float *p, const float *g, float *m, float *v, int64_t n,
                      const sharc_adamw_scalars *k);
void sharc_cuda_adamw_multi(sharc_stream *s, const sharc_adamw_seg *segs, const sharc_adamw_seg *host, int nseg,
                            const sharc_adamw_scalars *k, float decay_mul);
void sharc_cuda_add_layernorm_forward(sharc_stream *s, float *sum, float *y, float *mean, float *rstd, const float *x,
                                      const float *r, const float *w, const float *b, int64_t N, int C, float eps);
void sharc_cuda_add_rmsnorm_forward(sharc_stream *s, float *sum, float *y, float *rstd, const float *x, const float *r,
                                    const float *w, int64_t N, int C, float eps);
void sharc_cuda_fill(sharc_stream *s, float *dst, float value, int64_t n);
void sharc_cuda_init_normal(sharc_stream *s, float *dst, int64_t n, float std, uint64_t seed, uint64_t stream,
                            uint64_t first);
/* *acc (+)= the sum of nb doubles of device memory, in a fixed order */
void sharc_cuda_sum_doubles(sharc_stream *s, double *acc, const double *part, int64_t nb, bool add);
/* column sums for bias-like gradients: out(C) += sum over rows of x(N, C), fixed order */
void sharc_cuda_colsum_add(sharc_stream *s, float *out, const float *x, int64_t N, int C);

/* layers.cu */
void sharc_cuda_matmul_forward(sharc_stream *s, float *y, const float *x, const float *w, const float *b, int64_t N,
                               int IC, int OC);
void sharc_cuda_matmul_backward(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *w, int64_t N, int IC, int OC);
void sharc_cuda_matmul_forward_bf16(sharc_stream *s, float *y, const float *x, const float *w, const float *b,
                                    int64_t N, int IC, int OC);
void sharc_cuda_matmul_backward_bf16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                                     const float *w, int64_t N, int IC, int OC);
void sharc_cuda_matmul_forward_b16(sharc_stream *s, float *y, const uint16_t *x, const uint16_t *w, const float *b,
                                   int64_t N, int IC, int OC);
void sharc_cuda_matmul_backward_b16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                    const uint16_t *x, const uint16_t *w, int64_t N, int IC, int OC);
void sharc_cuda_layernorm_forward(sharc_stream *s, float *y, float *mean, float *rstd, const float *x, const float *w,
                                  const float *b, int64_t N, int C, float eps);
void sharc_cuda_layernorm_backward(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *dres,
                                   const float *x, const float *w, const float *mean, const float *rstd, int64_t N,
                                   int C);
void sharc_cuda_rmsnorm_forward(sharc_stream *s, float *y, float *rstd, const float *x, const float *w, int64_t N,
                                int C, float eps);
void sharc_cuda_rmsnorm_backward(sharc_stream *s, float *dx, float *dw, const float *dy, const float *dres,
                                 const float *x, const float *w, const float *rstd, int64_t N, int C);
void sharc_cuda_head_rmsnorm_forward(sharc_stream *s, float *y, float *rstd, const float *x, const float *w, int64_t N,
                                     int H, int hd, int64_t ld, float eps);
void sharc_cuda_head_rmsnorm_backward(sharc_stream *s, float *dx, float *dw, const float *dy, const float *x,
                                      const float *w, const float *rstd, int64_t N, int H, int hd, int64_t ld);
void sharc_cuda_matmul_gelu_forward(sharc_stream *s, float *pre, float *y, const float *x, const float *w,
                                    const float *b, int64_t N, int IC, int OC);
void sharc_cuda_matmul_backward_dgelu(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                                      const float *w, const float *pre, int64_t N, int IC, int OC);
void sharc_cuda_matmul_gelu_forward_b16(sharc_stream *s, float *pre, float *y, uint16_t *yh, const uint16_t *x,
                                        const uint16_t *w, const float *b, int64_t N, int IC, int OC);
void sharc_cuda_matmul_backward_dgelu_b16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                          const uint16_t *x, const uint16_t *w, const float *pre, int64_t N, int IC,
                                          int OC);
void sharc_cuda_gelu_forward(sharc_stream *s, float *y, const float *x, int64_t n);
void sharc_cuda_gelu_backward(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t n);
void sharc_cuda_swiglu_forward(sharc_stream *s, float *y, const float *x, int64_t N, int I);
void sharc_cuda_swiglu_backward(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t N, int I);
void sharc_cuda_embedding_forward(sharc_stream *s, float *x, const int32_t *tokens, const float *wte, const float *wpe,
                                  int B, int T, int C, int t0);
void sharc_cuda_embedding_backward(sharc_stream *s, float *dwte, float *dwpe, const float *dx, const int32_t *tokens,
                                   int B, int T, int C, int t0);
void sharc_cuda_rope_table(sharc_stream *s, float *cos_t, float *sin_t, int T, int hd, float theta, int t0);
void sharc_cuda_rope_table_pos(sharc_stream *s, float *cos_t, float *sin_t, const int32_t *pos, const float *inv_freq,
                               int64_t N, int half);
void sharc_cuda_rope_forward(sharc_stream *s, float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                             int NKV, int hd);
void sharc_cuda_rope_backward(sharc_stream *s, float *dqkv, const float *cos_t, const float *sin_t, int B, int T,
                              int NH, int NKV, int hd);

/* attention.cu */
int64_t sharc_cuda_attention_workspace(int T);
void sharc_cuda_attention_forward(sharc_stream *s, float *out, float *lse, const float *qkv, const int32_t *lo, int B,
                                  int T, int NH, int NKV, int hd, float *ws);
void sharc_cuda_attention_backward(sharc_stream *s, float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, const int32_t *lo, int B, int T, int NH, int NKV, int hd,
                                   float *ws);
void sharc_cuda_attention_cached(sharc_stream *s, float *out, const float *q, int64_t ldq, const float *kc,
                                 const float *vc, const int32_t *lo, int n, int t0, int NH, int NKV, int hd, float *ws);

/* attention_tc.cu (note [cuda-attention-tc]) */
void sharc_cuda_attention_forward_bf16(sharc_stream *s, float *out, float *lse, const float *qkv, const int32_t *lo,
                                       int B, int T, int NH, int NKV, int hd, float *ws);
void sharc_cuda_attention_backward_bf16(sharc_stream *s, float *dqkv, const float *dout, const float *qkv,
                                        const float *out, const float *lse, const int32_t *lo, int B, int T, int NH,
                                        int NKV, int hd, float *ws);

/* xent.cu */
void sharc_cuda_xent_forward_backward(sharc_stream *s, double *loss_sum, float *logits, float *losses,
                                      const int32_t *targets, int64_t N, int V, float scale, bool want_grad);
void sharc_cuda_lmhead_xent(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x, const float *w,
                            const int32_t *targets, float scale, int64_t N, int C, int V, float *ws, int64_t chunk);
void sharc_cuda_lmhead_xent_bf16(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x,
                                 const float *w, const int32_t *targets, float scale, int64_t N, int C, int V,
                                 float *ws, int64_t chunk);

/* experts.cu */
void sharc_cuda_moe_route_forward(sharc_stream *s, float *probs, int32_t *idx, float *wts, const float *logits,
                                  int64_t N, int E, int K, bool norm_topk);
void sharc_cuda_moe_route_backward(sharc_stream *s, float *dlogits, const float *dwts, const float *probs,
                                   const int32_t *idx, const float *wts, const float *daux, int64_t N, int E, int K,
                                   bool norm_topk);
void sharc_cuda_moe_gather(sharc_stream *s, float *y, const float *x, const int32_t *rows, const float *scale,
                           int64_t n, int C);
void sharc_cuda_moe_scatter_add(sharc_stream *s, float *y, const float *x, const int32_t *rows, const float *scale,
                                int64_t n, int C);
void sharc_cuda_moe_row_dot(sharc_stream *s, float *out, const float *a, const int32_t *rows, const float *b, int64_t n,
                            int C);
void sharc_cuda_moe_prob_sum(sharc_stream *s, double *psum, const float *probs, int64_t N, int E);

void sharc_cuda_copy_block(sharc_stream *s, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                           int64_t cols, bool add);
/* vocab: layers.cu (the embedding), xent.cu (the head's statistics) */
void sharc_cuda_vocab_embedding_forward(sharc_stream *s, float *x, const int32_t *tokens, const int32_t *pos,
                                        const float *wte, const float *wpe, int64_t N, int T, int C, int v0, int Vl);
void sharc_cuda_vocab_embedding_backward(sharc_stream *s, float *dwte, const float *dx, const int32_t *tokens,
                                         int64_t N, int C, int v0, int Vl);
void sharc_cuda_vocab_xent_stats(sharc_stream *s, float *red, const float *lg, const int32_t *targets, int64_t m,
                                 int v0, int Vl, bool sums);
void sharc_cuda_vocab_xent_finish(sharc_stream *s, double *loss_sum, bool add, float *lg, const float *red,
                                  const int32_t *targets, int64_t m, int v0, int Vl, float scale);

#ifdef __cplusplus
}
#endif
#endif
