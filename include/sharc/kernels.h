/* sharc/kernels.h: the CPU fp32 transformer kernels, forward and backward.
 *
 * Conventions (GUIDE house rule 6, llm.c argument order):
 *   - arguments are outputs first, then const inputs, then dimensions;
 *   - parameter gradients (dw, db) ACCUMULATE (+=), so gradient accumulation
 *     over micro-batches and tied weights come for free;
 *   - activation gradients (dx) are WRITTEN (=). Where a residual gradient must
 *     be added, the kernel takes it as `dres` (nullable) and writes dx = dres + ...;
 *   - N is the number of rows (tokens, B*T); matrices are row-major;
 *   - linear weights use nn.Linear's layout, w (out_features, in_features).
 * Every kernel is a pure function of its arguments (no hidden state) and is
 * checked against finite differences and PyTorch fixtures in tests/. */
#ifndef SHARC_KERNELS_H
#define SHARC_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- linear: y(N,OC) = x(N,IC) @ w(OC,IC)^T + b(OC); b may be NULL ---- */
void sharc_matmul_forward(float *y, const float *x, const float *w, const float *b, int64_t N,
                          int IC, int OC);
/* dx(N,IC) = dy @ w (skipped if dx is NULL); dw(OC,IC) += dy^T @ x; db(OC) += colsum(dy)
 * (db skipped if NULL). */
void sharc_matmul_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, int64_t N, int IC, int OC);

/* ---- LayerNorm over the last dim C: y = (x - mean) * rstd * w + b ---- */
void sharc_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                             const float *b, int64_t N, int C, float eps);
void sharc_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *dres,
                              const float *x, const float *w, const float *mean,
                              const float *rstd, int64_t N, int C);

/* ---- RMSNorm (Llama): y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ---- */
void sharc_rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int64_t N, int C,
                           float eps);
void sharc_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *dres,
                            const float *x, const float *w, const float *rstd, int64_t N, int C);

/* ---- GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ---- */
void sharc_gelu_forward(float *y, const float *x, int64_t n);
void sharc_gelu_backward(float *dx, const float *dy, const float *x, int64_t n);

/* ---- SwiGLU: x(N, 2I) holds [gate | up] per row; y(N, I) = silu(gate) * up ---- */
void sharc_swiglu_forward(float *y, const float *x, int64_t N, int I);
void sharc_swiglu_backward(float *dx, const float *dy, const float *x, int64_t N, int I);

/* ---- residual: y = a + b (y may alias a or b) ---- */
void sharc_add(float *y, const float *a, const float *b, int64_t n);

/* ---- token (+ learned position) embedding ----
 * x(B,T,C) = wte[tokens] (+ wpe[t] if wpe); tokens in [0, V) (checked by the caller). */
void sharc_embedding_forward(float *x, const int32_t *tokens, const float *wte, const float *wpe,
                             int B, int T, int C);
/* dwte(V,C) += scatter(dx); dwpe(T,C) += sum over batch (skipped if NULL). */
void sharc_embedding_backward(float *dwte, float *dwpe, const float *dx, const int32_t *tokens,
                              int B, int T, int C);

/* ---- RoPE, Hugging Face rotate-half convention ----
 * Tables cos, sin (T, hd/2): angle(t, i) = t * theta^(-2i/hd).
 * qkv (B, T, (NH + 2*NKV) * hd): the NH query heads then NKV key heads are
 * rotated in place; values untouched. Backward applies the inverse rotation
 * to dqkv in place. */
void sharc_rope_table(float *cos_t, float *sin_t, int T, int hd, float theta);
void sharc_rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                        int NKV, int hd);
void sharc_rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                         int NKV, int hd);

/* ---- causal multi-head attention with grouped-query heads ----
 * qkv (B, T, (NH + 2*NKV) * hd): per token the NH query heads, then NKV key
 * heads, then NKV value heads. Query head h uses key/value head h / (NH/NKV).
 * out (B, T, NH*hd); lse (B, NH, T) the log-sum-exp of each softmax row, the
 * only per-row state kept for backward (no T x T matrix is stored: backward
 * recomputes the probabilities, FlashAttention-style, one block of query
 * rows at a time). ws: workspace of sharc_attention_workspace(T) floats. */
int64_t sharc_attention_workspace(int T);
void sharc_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH,
                             int NKV, int hd, float *ws);
/* dqkv is written (=) for every query, key and value element. */
void sharc_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int NH, int NKV, int hd, float *ws);

/* ---- softmax cross-entropy over V classes, rows with target < 0 are masked ----
 * losses[r] = logsumexp(logits[r]) - logits[r][target[r]] (0 for masked rows).
 * If want_grad, logits are overwritten in place with
 * dlogits = (softmax - onehot(target)) * scale (0 for masked rows).
 * Returns the sum of the losses of unmasked rows. */
double sharc_xent_forward_backward(float *logits, float *losses, const int32_t *targets,
                                   int64_t N, int V, float scale, bool want_grad);

/* ---- fused LM head + cross-entropy, chunked over rows ----
 * For rows of x(N, C) and head weight w(V, C): logits = x @ w^T, then the loss
 * and (if dx != NULL) dx(N, C) = dlogits @ w, dw(V, C) += dlogits^T @ x, with
 * dlogits scaled by `scale` (d total_loss / d row_loss). Only `chunk` rows of
 * logits exist at once, in ws (chunk * V floats): never a full N x V buffer.
 * Returns the sum of the unmasked rows' losses. */
double sharc_lmhead_xent(float *dx, float *dw, const float *x, const float *w,
                         const int32_t *targets, float scale, int64_t N, int C, int V, float *ws,
                         int64_t chunk);

#ifdef __cplusplus
}
#endif
#endif
