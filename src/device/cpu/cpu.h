/* cpu.h (internal): the CPU backend's kernels, sharc_cpu_*, one per slot of
 * the kernel table (sharc/kernels.h documents each); cpu.c puts them in the
 * table. The stream argument is the CPU device's one implicit stream: work
 * runs when it is called. */
#ifndef SHARC_DEVICE_CPU_H
#define SHARC_DEVICE_CPU_H

#include "sharc/kernels.h"

/* matmul.c */
void sharc_cpu_matmul_forward(sharc_stream *s, float *y, const float *x, const float *w, const float *b, int64_t N,
                              int IC, int OC);
void sharc_cpu_matmul_backward(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                               const float *w, int64_t N, int IC, int OC);
/* bf16 variants (note [bf16-gemm]): the same signatures and results within
 * bf16 rounding; operands rounded to bf16 into sharc_cpu_bf16_operand's
 * scratch (note [bf16-scratch]), products accumulated in fp32. */
enum { SHARC_CPU_BF16_X, SHARC_CPU_BF16_W, SHARC_CPU_BF16_DY, SHARC_CPU_BF16_SLOTS };
const uint16_t *sharc_cpu_bf16_operand(int slot, const float *src, int64_t n);
bool sharc_cpu_bf16_compute(void);
void sharc_cpu_matmul_forward_bf16(sharc_stream *s, float *y, const float *x, const float *w, const float *b, int64_t N,
                                   int IC, int OC);
void sharc_cpu_matmul_backward_bf16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                                    const float *w, int64_t N, int IC, int OC);
void sharc_cpu_matmul_forward_b16(sharc_stream *s, float *y, const uint16_t *x, const uint16_t *w, const float *b,
                                  int64_t N, int IC, int OC);
void sharc_cpu_matmul_backward_b16(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const uint16_t *x,
                                   const uint16_t *w, int64_t N, int IC, int OC);
void sharc_cpu_lmhead_xent_bf16(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x, const float *w,
                                const int32_t *targets, float scale, int64_t N, int C, int V, float *ws, int64_t chunk);
/* norm.c */
void sharc_cpu_layernorm_forward(sharc_stream *s, float *y, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int64_t N, int C, float eps);
void sharc_cpu_layernorm_backward(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *dres,
                                  const float *x, const float *w, const float *mean, const float *rstd, int64_t N,
                                  int C);
void sharc_cpu_rmsnorm_forward(sharc_stream *s, float *y, float *rstd, const float *x, const float *w, int64_t N, int C,
                               float eps);
void sharc_cpu_rmsnorm_backward(sharc_stream *s, float *dx, float *dw, const float *dy, const float *dres,
                                const float *x, const float *w, const float *rstd, int64_t N, int C);
void sharc_cpu_head_rmsnorm_forward(sharc_stream *s, float *y, float *rstd, const float *x, const float *w, int64_t N,
                                    int H, int hd, int64_t ld, float eps);
void sharc_cpu_head_rmsnorm_backward(sharc_stream *s, float *dx, float *dw, const float *dy, const float *x,
                                     const float *w, const float *rstd, int64_t N, int H, int hd, int64_t ld);
/* activation.c */
void sharc_cpu_gelu_forward(sharc_stream *s, float *y, const float *x, int64_t n);
void sharc_cpu_gelu_backward(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t n);
void sharc_cpu_swiglu_forward(sharc_stream *s, float *y, const float *x, int64_t N, int I);
void sharc_cpu_swiglu_backward(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t N, int I);
void sharc_cpu_add(sharc_stream *s, float *y, const float *a, const float *b, int64_t n);
/* embedding.c */
void sharc_cpu_embedding_forward(sharc_stream *s, float *x, const int32_t *tokens, const float *wte, const float *wpe,
                                 int B, int T, int C, int t0);
void sharc_cpu_embedding_backward(sharc_stream *s, float *dwte, float *dwpe, const float *dx, const int32_t *tokens,
                                  int B, int T, int C, int t0);
/* rope.c */
void sharc_cpu_rope_table(sharc_stream *s, float *cos_t, float *sin_t, int T, int hd, float theta, int t0);
void sharc_cpu_rope_table_pos(sharc_stream *s, float *cos_t, float *sin_t, const int32_t *pos, const float *inv_freq,
                              int64_t N, int half);
void sharc_cpu_rope_forward(sharc_stream *s, float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                            int NKV, int hd);
void sharc_cpu_rope_backward(sharc_stream *s, float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                             int NKV, int hd);
/* attention.c */
int64_t sharc_cpu_attention_workspace(int T);
void sharc_cpu_attention_forward(sharc_stream *s, float *out, float *lse, const float *qkv, const int32_t *lo, int B,
                                 int T, int NH, int NKV, int hd, float *ws);
void sharc_cpu_attention_backward(sharc_stream *s, float *dqkv, const float *dout, const float *qkv, const float *out,
                                  const float *lse, const int32_t *lo, int B, int T, int NH, int NKV, int hd,
                                  float *ws);
void sharc_cpu_attention_cached(sharc_stream *s, float *out, const float *q, int64_t ldq, const float *kc,
                                const float *vc, const int32_t *lo, int n, int t0, int NH, int NKV, int hd, float *ws);
/* xent.c */
void sharc_cpu_xent_forward_backward(sharc_stream *s, double *loss_sum, float *logits, float *losses,
                                     const int32_t *targets, int64_t N, int V, float scale, bool want_grad);
void sharc_cpu_lmhead_xent(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x, const float *w,
                           const int32_t *targets, float scale, int64_t N, int C, int V, float *ws, int64_t chunk);
/* elem.c */
void sharc_cpu_cast(sharc_stream *s, void *dst, sharc_dtype dst_dt, const void *src, sharc_dtype src_dt, int64_t n);
void sharc_cpu_round(sharc_stream *s, float *dst, const float *src, sharc_dtype dt, int64_t n);
void sharc_cpu_accumulate(sharc_stream *s, float *dst, const float *src, int64_t n);
void sharc_cpu_sum_ranks(sharc_stream *s, void *dst, const void *const *src, int S, int64_t n, sharc_dtype dt,
                         bool add);
void sharc_cpu_sumsq(sharc_stream *s, double *acc, const float *x, int64_t n);
void sharc_cpu_loss_add(sharc_stream *s, double *sums, const double *loss, double add, double weight);
void sharc_cpu_adamw(sharc_stream *s, float *p, const float *g, float *m, float *v, int64_t n,
                     const sharc_adamw_scalars *k);
void sharc_cpu_adamw_multi(sharc_stream *s, const sharc_adamw_seg *segs, const sharc_adamw_seg *host, int nseg,
                           const sharc_adamw_scalars *k, float decay_mul);
void sharc_cpu_add_layernorm_forward(sharc_stream *s, float *sum, float *y, float *mean, float *rstd, const float *x,
                                     const float *r, const float *w, const float *b, int64_t N, int C, float eps);
void sharc_cpu_add_rmsnorm_forward(sharc_stream *s, float *sum, float *y, float *rstd, const float *x, const float *r,
                                   const float *w, int64_t N, int C, float eps);
void sharc_cpu_fill(sharc_stream *s, float *dst, float value, int64_t n);
void sharc_cpu_init_normal(sharc_stream *s, float *dst, int64_t n, float std, uint64_t seed, uint64_t stream,
                           uint64_t first);

/* experts.c */
void sharc_cpu_moe_route_forward(sharc_stream *s, float *probs, int32_t *idx, float *wts, const float *logits,
                                 int64_t N, int E, int K, bool norm_topk);
void sharc_cpu_moe_route_backward(sharc_stream *s, float *dlogits, const float *dwts, const float *probs,
                                  const int32_t *idx, const float *wts, const float *daux, int64_t N, int E, int K,
                                  bool norm_topk);
void sharc_cpu_moe_gather(sharc_stream *s, float *y, const float *x, const int32_t *rows, const float *scale, int64_t n,
                          int C);
void sharc_cpu_moe_scatter_add(sharc_stream *s, float *y, const float *x, const int32_t *rows, const float *scale,
                               int64_t n, int C);
void sharc_cpu_moe_row_dot(sharc_stream *s, float *out, const float *a, const int32_t *rows, const float *b, int64_t n,
                           int C);
void sharc_cpu_moe_prob_sum(sharc_stream *s, double *psum, const float *probs, int64_t N, int E);

void sharc_cpu_copy_block(sharc_stream *s, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                          int64_t cols, bool add);
/* vocab.c */
void sharc_cpu_vocab_embedding_forward(sharc_stream *s, float *x, const int32_t *tokens, const int32_t *pos,
                                       const float *wte, const float *wpe, int64_t N, int T, int C, int v0, int Vl);
void sharc_cpu_vocab_embedding_backward(sharc_stream *s, float *dwte, const float *dx, const int32_t *tokens, int64_t N,
                                        int C, int v0, int Vl);
void sharc_cpu_vocab_xent_stats(sharc_stream *s, float *red, const float *lg, const int32_t *targets, int64_t m, int v0,
                                int Vl, bool sums);
void sharc_cpu_vocab_xent_finish(sharc_stream *s, double *loss_sum, bool add, float *lg, const float *red,
                                 const int32_t *targets, int64_t m, int v0, int Vl, float scale);

#endif
