/* sharc/kernels.h: the kernel table a device carries (sharc_device_kernels):
 * the transformer's layers forward and backward, and the element work of
 * the engine, the optimizer and the collectives, each a function pointer
 * that takes the stream its work goes on first.
 *
 *   const sharc_kernels *k = sharc_device_kernels(dev);
 *   k->matmul_forward(stream, y, x, w, b, N, IC, OC);
 *
 * Conventions (llm.c's argument order, docs/ARCHITECTURE.md "Kernels"):
 *   - after the stream: outputs first, then const inputs, then dimensions;
 *   - parameter gradients (dw, db) ACCUMULATE (+=), so gradient accumulation
 *     over micro-batches and tied weights come for free; a parameter
 *     gradient pointer may be NULL (a frozen parameter: nothing is computed);
 *   - activation gradients (dx) are WRITTEN (=). Where a residual gradient must
 *     be added, the kernel takes it as `dres` (nullable) and writes dx = dres + ...;
 *   - N is the number of rows (tokens, B*T); matrices are row-major;
 *   - linear weights use nn.Linear's layout, w (out_features, in_features);
 *   - every pointer is device memory of the table's device, scalars that a
 *     kernel produces included (the loss sums: read them with a
 *     device-to-host copy); token ids and targets too;
 *   - `t0` is the position of the first of the T rows of a sequence (0 unless
 *     a sequence is split over ranks).
 * Every kernel is a pure function of its arguments (no hidden state).
 * Results must not depend on the number of threads or their timing: sums
 * run in a fixed order. The CPU table is checked against finite differences
 * and PyTorch fixtures in tests/, the element work against plain loops.
 *
 * Note [kernel-table]. The dispatcher (src/device/device.c) checks a
 * backend's table once, when the device is opened: required slots must be
 * present; optional ones (marked) may be NULL and are filled with a fallback
 * built from other slots, computing the same values. A new kind of kernel
 * (a bf16 matmul, a fused AdamW over several tensors) is a new optional slot
 * whose fallback is the existing path, so only backends that have it change. */
#ifndef SHARC_KERNELS_H
#define SHARC_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/device.h"
#include "sharc/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The per-step scalars of one AdamW update (torch 1.13's order):
 *   g' = g * grad_scale;  p *= decay_mul;  m = beta1 m + (1 - beta1) g';
 *   v = beta2 v + (1 - beta2) g'^2;  p -= step_size * m / (sqrt(v) / sqrt_bc2 + eps)
 * with decay_mul = 1 - lr * weight_decay (1 without decay), step_size = lr / (1 - beta1^t),
 * sqrt_bc2 = sqrt(1 - beta2^t), computed in double by the caller and rounded to float. */
typedef struct {
    float decay_mul, beta1, beta2, step_size, sqrt_bc2, eps, grad_scale;
} sharc_adamw_scalars;

/* One entry of adamw_multi's table (note [adamw-multi] in docs/ARCHITECTURE.md):
 * n elements of a parameter segment, its gradient and moments (device memory),
 * `first` the sum of n over the entries before it (each entry's n > 0), and
 * whether weight decay applies to it. The same layout in host and device memory. */
typedef struct {
    float *p;       /* (n) */
    const float *g; /* (n) */
    float *m, *v;   /* (n) each */
    int64_t n, first;
    int32_t decay, pad_;
} sharc_adamw_seg;

/* One entry of sumsq_multi's table (note [sumsq-multi] in docs/ARCHITECTURE.md):
 * n > 0 floats at x (device memory) whose squares are added into acc[which]
 * (which 0 or 1); `blk` the number of 4096-element blocks of the entries
 * before it, sum of (n + 4095) / 4096. The same layout in host and device memory. */
typedef struct {
    const float *x; /* (n) */
    int64_t n, blk;
    int32_t which, pad_;
} sharc_sumsq_seg;

typedef struct sharc_kernels {
    /* ---- linear: y(N,OC) = x(N,IC) @ w(OC,IC)^T + b(OC); b may be NULL ---- */
    void (*matmul_forward)(sharc_stream *s, float *y, const float *x, const float *w, const float *b, int64_t N, int IC,
                           int OC);
    /* dx(N,IC) = dy @ w; dw(OC,IC) += dy^T @ x; db(OC) += colsum(dy); each skipped if NULL */
    void (*matmul_backward)(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                            const float *w, int64_t N, int IC, int OC);

    /* ---- LayerNorm over the last dim C: y = (x - mean) * rstd * w + b (b nullable);
     * mean, rstd (N) are kept for backward ---- */
    void (*layernorm_forward)(sharc_stream *s, float *y, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int64_t N, int C, float eps);
    void (*layernorm_backward)(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *dres,
                               const float *x, const float *w, const float *mean, const float *rstd, int64_t N, int C);
    /* ---- RMSNorm (Llama): y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ---- */
    void (*rmsnorm_forward)(sharc_stream *s, float *y, float *rstd, const float *x, const float *w, int64_t N, int C,
                            float eps);
    void (*rmsnorm_backward)(sharc_stream *s, float *dx, float *dw, const float *dy, const float *dres, const float *x,
                             const float *w, const float *rstd, int64_t N, int C);
    /* ---- per-head RMSNorm (Qwen3's q_norm / k_norm): for each of N tokens, H
     * rows of hd elements at x + n*ld + h*hd (the heads inside a qkv row of
     * stride ld), y = x * rstd * w with one w (hd) for all heads; rstd (N*H).
     * Backward writes dx (may alias dy) and accumulates dw (nullable). ---- */
    void (*head_rmsnorm_forward)(sharc_stream *s, float *y, float *rstd, const float *x, const float *w, int64_t N,
                                 int H, int hd, int64_t ld, float eps);
    void (*head_rmsnorm_backward)(sharc_stream *s, float *dx, float *dw, const float *dy, const float *x,
                                  const float *w, const float *rstd, int64_t N, int H, int hd, int64_t ld);

    /* ---- GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ---- */
    void (*gelu_forward)(sharc_stream *s, float *y, const float *x, int64_t n);
    void (*gelu_backward)(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t n);
    /* ---- SwiGLU: x(N, 2I) holds [gate | up] per row; y(N, I) = silu(gate) * up ---- */
    void (*swiglu_forward)(sharc_stream *s, float *y, const float *x, int64_t N, int I);
    void (*swiglu_backward)(sharc_stream *s, float *dx, const float *dy, const float *x, int64_t N, int I);
    /* ---- residual: y = a + b (y may alias a or b). (optional: sum_ranks of {a, b}) ---- */
    void (*add)(sharc_stream *s, float *y, const float *a, const float *b, int64_t n);

    /* ---- token (+ learned position) embedding ----
     * x(B,T,C) = wte[tokens] (+ wpe[t0 + t] if wpe); tokens (B*T) in [0, V), checked by the caller.
     * Backward: dwte(V,C) += scatter(dx) (skipped if NULL); dwpe += sum over the batch (skipped if NULL). */
    void (*embedding_forward)(sharc_stream *s, float *x, const int32_t *tokens, const float *wte, const float *wpe,
                              int B, int T, int C, int t0);
    void (*embedding_backward)(sharc_stream *s, float *dwte, float *dwpe, const float *dx, const int32_t *tokens, int B,
                               int T, int C, int t0);

    /* ---- RoPE, Hugging Face rotate-half convention ----
     * Tables cos, sin (T, hd/2): angle(t, i) = (t0 + t) * theta^(-2i/hd).
     * qkv (B, T, (NH + 2*NKV) * hd): the NH query heads then NKV key heads are
     * rotated in place; values untouched. Backward applies the inverse
     * rotation to dqkv in place. */
    void (*rope_table)(sharc_stream *s, float *cos_t, float *sin_t, int T, int hd, float theta, int t0);
    /* Per-token tables (note [packing] in src/model/model.c): cos, sin (N, half)
     * row r, column i = cosf / sinf of (float)pos[r] * inv_freq[i] in fp32, pos
     * (N) and inv_freq (half) in device memory. (optional: the model then
     * computes the rows on the host and copies them in) */
    void (*rope_table_pos)(sharc_stream *s, float *cos_t, float *sin_t, const int32_t *pos, const float *inv_freq,
                           int64_t N, int half);
    void (*rope_forward)(sharc_stream *s, float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                         int NKV, int hd);
    void (*rope_backward)(sharc_stream *s, float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                          int NKV, int hd);

    /* ---- causal multi-head attention with grouped-query heads ----
     * qkv (B, T, (NH + 2*NKV) * hd): per token the NH query heads, then NKV key
     * heads, then NKV value heads. Query head h uses key/value head h / (NH/NKV).
     * out (B, T, NH*hd); lse (B, NH, T) the log-sum-exp of each softmax row, the
     * only per-row state kept for backward (no T x T matrix is stored:
     * backward recomputes the probabilities, FlashAttention-style). ws: a
     * workspace of attention_workspace(T) floats (the count may depend on the
     * thread count at the time of the call: plan after setting it).
     * Note [attention-mask]: lo (B*T, nullable; device memory) narrows the
     * causal mask: query i of row b sees keys lo[b*T + i] <= j <= i, with
     * 0 <= lo[b*T + i] <= i. It carries both document masking of packed
     * sequences (lo = the first token of the query's sample) and a sliding
     * window of W keys (lo = max(that, i - W + 1)); NULL is plain causal. */
    int64_t (*attention_workspace)(int T);
    void (*attention_forward)(sharc_stream *s, float *out, float *lse, const float *qkv, const int32_t *lo, int B,
                              int T, int NH, int NKV, int hd, float *ws);
    /* dqkv is written (=) for every query, key and value element. */
    void (*attention_backward)(sharc_stream *s, float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, const int32_t *lo, int B, int T, int NH, int NKV, int hd, float *ws);
    /* Generation: n new queries at positions t0 .. t0+n-1, rows of q at stride
     * ldq (the query heads of a qkv row), against cached keys and values kc,
     * vc (t0+n, NKV*hd) that already hold the new tokens' own; out (n, NH*hd).
     * lo (n, nullable): query i sees keys lo[i] .. t0 + i (note
     * [attention-mask]). ws: attention_workspace(T) floats for any t0 + n <= T. */
    void (*attention_cached)(sharc_stream *s, float *out, const float *q, int64_t ldq, const float *kc, const float *vc,
                             const int32_t *lo, int n, int t0, int NH, int NKV, int hd, float *ws);

    /* ---- softmax cross-entropy over V classes, rows with target < 0 masked ----
     * losses[r] = logsumexp(logits[r]) - logits[r][target[r]] (0 for masked
     * rows; losses nullable). If want_grad, logits are overwritten in place
     * with dlogits = (softmax - onehot(target)) * scale (0 for masked rows).
     * *loss_sum (one double) = the sum of the unmasked rows' losses. */
    void (*xent_forward_backward)(sharc_stream *s, double *loss_sum, float *logits, float *losses,
                                  const int32_t *targets, int64_t N, int V, float scale, bool want_grad);
    /* ---- fused LM head + cross-entropy, chunked over rows (note [fused-head]) ----
     * For rows of x(N, C) and head weight w(V, C): logits = x @ w^T, then the
     * loss and (if dx != NULL) dx(N, C) = dlogits @ w, dw(V, C) += dlogits^T @ x,
     * with dlogits scaled by `scale` (d total_loss / d row_loss). Only `chunk`
     * rows of logits exist at once, in ws (chunk * V floats). *loss_sum (one
     * double) = the sum of the unmasked rows' losses. */
    void (*lmhead_xent)(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x, const float *w,
                        const int32_t *targets, float scale, int64_t N, int C, int V, float *ws, int64_t chunk);

    /* ---- Mixture-of-Experts routing (note [moe] in src/model/moe.c). (optional
     * as a group: a device without them refuses a model with experts) ----
     * Forward, per row of logits (N, E): probs = softmax in fp32; idx (N, K) the
     * K largest in descending order (ties: the lower expert first); wts (N, K)
     * their probabilities, divided by their sum when norm_topk. */
    void (*moe_route_forward)(sharc_stream *s, float *probs, int32_t *idx, float *wts, const float *logits, int64_t N,
                              int E, int K, bool norm_topk);
    /* dlogits (N, E) = softmax backward of dprobs, where dprobs = daux (E,
     * the same for every row; NULL: 0) plus, at the chosen experts, dwts (N, K)
     * through the renormalisation when norm_topk. */
    void (*moe_route_backward)(sharc_stream *s, float *dlogits, const float *dwts, const float *probs,
                               const int32_t *idx, const float *wts, const float *daux, int64_t N, int E, int K,
                               bool norm_topk);
    /* y(n, C) row i = x row rows[i], times scale[i] when scale != NULL. */
    void (*moe_gather)(sharc_stream *s, float *y, const float *x, const int32_t *rows, const float *scale, int64_t n,
                       int C);
    /* y row rows[i] += x(n, C) row i, times scale[i] when scale != NULL, i in order. */
    void (*moe_scatter_add)(sharc_stream *s, float *y, const float *x, const int32_t *rows, const float *scale,
                            int64_t n, int C);
    /* out[i] = dot(a row rows[i], b(n, C) row i). */
    void (*moe_row_dot)(sharc_stream *s, float *out, const float *a, const int32_t *rows, const float *b, int64_t n,
                        int C);
    /* psum[e] (E doubles) = sum over t = 0 .. N-1, in that order, of probs
     * (N, E)[t, e], accumulated in double: the auxiliary loss's router sums,
     * bit-identical on every device (note [moe-waits] in src/model/moe.c). */
    void (*moe_prob_sum)(sharc_stream *s, double *psum, const float *probs, int64_t N, int E);

    /* ---- the vocabulary-parallel embedding and LM head of tensor
     * parallelism (note [tp-vocab] in src/model/tp.h): this rank holds rows
     * [v0, v0 + Vl) of the vocabulary ----
     * x (N, C) = wte (Vl, C) row tokens[r] - v0 (+ wpe row pos[r], or r % T
     * when pos is NULL) for tokens in [v0, v0 + Vl), 0 for the others. */
    void (*vocab_embedding_forward)(sharc_stream *s, float *x, const int32_t *tokens, const int32_t *pos,
                                    const float *wte, const float *wpe, int64_t N, int T, int C, int v0, int Vl);
    /* dwte (Vl, C) += the rows of dx (N, C) whose tokens lie in [v0, v0 + Vl), in row order. */
    void (*vocab_embedding_backward)(sharc_stream *s, float *dwte, const float *dx, const int32_t *tokens, int64_t N,
                                     int C, int v0, int Vl);
    /* Rows of this rank's logits lg (m, Vl) and their statistics red (3 m):
     * sums false: red[r] = the row's maximum; sums true (red[0, m) the
     * maximum over the tp ranks by then): red[m + r] = the sum of exp(lg -
     * red[r]) and red[2 m + r] = the target's logit when the target lies in
     * [v0, v0 + Vl), else 0. */
    void (*vocab_xent_stats)(sharc_stream *s, float *red, const float *lg, const int32_t *targets, int64_t m, int v0,
                             int Vl, bool sums);
    /* red summed over the tp ranks: *loss_sum = (add: +=) the sum, in row
     * order in double, over the unmasked rows (target >= 0) of the float
     * (red[r] + logf(red[m + r])) - red[2 m + r]; lg (nullable) then holds
     * dlogits = (softmax - onehot) * scale on this rank's columns, 0 for
     * masked rows. */
    void (*vocab_xent_finish)(sharc_stream *s, double *loss_sum, bool add, float *lg, const float *red,
                              const int32_t *targets, int64_t m, int v0, int Vl, float scale);

    /* ---- element work of the engine, the optimizer and the collectives ---- */
    /* dst = src converted, n elements: F32 -> F32/BF16/F16 (round to nearest
     * even) or BF16/F16 -> F32 (exact). */
    void (*cast)(sharc_stream *s, void *dst, sharc_dtype dst_dt, const void *src, sharc_dtype src_dt, int64_t n);
    /* dst = src rounded to dt (BF16, F16) and widened back; a copy for F32 (dst may be src). */
    void (*round)(sharc_stream *s, float *dst, const float *src, sharc_dtype dt, int64_t n);
    /* dst += src. (optional: sum_ranks of {src} added) */
    void (*accumulate)(sharc_stream *s, float *dst, const float *src, int64_t n);
    /* Note [rank-order]: dst[i] (+)= src[0][i] + src[1][i] + ... + src[S-1][i],
     * summed in that order in fp32 starting from src[0][i] itself (not 0 +
     * src[0][i]), so every path that reduces over ranks, and every rank,
     * computes bit-identical sums. dt F32: fp32 in and out, `add` adds the
     * sum to dst; dt BF16/F16: 16-bit in and out, widened exactly, rounded
     * once (add must be false). dst may be one of the sources. */
    void (*sum_ranks)(sharc_stream *s, void *dst, const void *const *src, int S, int64_t n, sharc_dtype dt, bool add);
    /* *acc += sum of x[i]^2: fp32 sums over blocks of 4096, added in double. */
    void (*sumsq)(sharc_stream *s, double *acc, const float *x, int64_t n);
    /* Note [loss-on-device] (src/train/step.c): l = *loss + add, then
     * sums[0] += l * weight and sums[1] += l, in double, each product and
     * sum rounded once (no fused multiply-add), so every backend gives the
     * host's bits. One double of device memory in, two out. */
    void (*loss_add)(sharc_stream *s, double *sums, const double *loss, double add, double weight);
    /* One AdamW update of n elements (sharc_adamw_scalars). */
    void (*adamw)(sharc_stream *s, float *p, const float *g, float *m, float *v, int64_t n,
                  const sharc_adamw_scalars *k);
    /* A strided block copy: dst[r ldd + c] = src[r lds + c] (add: +=) for
     * r < rows, c < cols; dst and src do not overlap (Ulysses' layout
     * changes, note [ulysses] in src/model/ulysses.h). */
    void (*copy_block)(sharc_stream *s, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                       int64_t cols, bool add);
    /* dst[i] = value. */
    void (*fill)(sharc_stream *s, float *dst, float value, int64_t n);
    /* dst[i] = std * N(0,1) drawn at (seed, stream, first + i) (sharc/rng.h): the
     * value of an element does not depend on which rank or chunk computes it. */
    void (*init_normal)(sharc_stream *s, float *dst, int64_t n, float std, uint64_t seed, uint64_t stream,
                        uint64_t first);

    /* ---- fused forms of the calls above, each computing their values bit for
     * bit (notes [adamw-multi] and [add-norm] in docs/ARCHITECTURE.md) ---- */
    /* The adamw update of every entry of a table of nseg segments, in one
     * launch: segs the table in device memory, host the same table in host
     * memory (what a launch is sized from; the CPU may be given one pointer
     * twice); entry i updated with k, its decay_mul replaced by decay_mul
     * when segs[i].decay, else by 1. (optional: adamw per entry) */
    void (*adamw_multi)(sharc_stream *s, const sharc_adamw_seg *segs, const sharc_adamw_seg *host, int nseg,
                        const sharc_adamw_scalars *k, float decay_mul);
    /* sumsq(acc + which, x, n) of every entry of a table of nseg segments, in
     * entry order, in one or two launches (segs in device memory, host its
     * host copy, as adamw_multi's): the doubles sumsq per entry gives, bit
     * for bit. (optional: sumsq per entry) */
    void (*sumsq_multi)(sharc_stream *s, double *acc, const sharc_sumsq_seg *segs, const sharc_sumsq_seg *host,
                        int nseg);
    /* A residual add and the norm of its result: sum(N,C) = x + r (sum may
     * alias x or r), then layernorm_forward / rmsnorm_forward of sum into y,
     * mean, rstd. (optional: add, then the norm) */
    void (*add_layernorm_forward)(sharc_stream *s, float *sum, float *y, float *mean, float *rstd, const float *x,
                                  const float *r, const float *w, const float *b, int64_t N, int C, float eps);
    void (*add_rmsnorm_forward)(sharc_stream *s, float *sum, float *y, float *rstd, const float *x, const float *r,
                                const float *w, int64_t N, int C, float eps);

    /* ---- bf16 compute (docs/ARCHITECTURE.md "Mixed precision") ----
     * Whether the *_bf16 slots below really compute with bf16 operands on
     * this device now (the CPU: bf16 dot-product instructions and oneDNN, or
     * SHARC_BF16=emulate; cuda: unless SHARC_BF16=off). (optional: false) */
    bool (*bf16_compute)(void);
    /* matmul_forward, matmul_backward and lmhead_xent with their matrix
     * operands (x, w, dy, dlogits) rounded to bf16 and products accumulated
     * in fp32; inputs, outputs, biases, the softmax and the loss stay fp32.
     * (optional: the fp32 slot) */
    void (*matmul_forward_bf16)(sharc_stream *s, float *y, const float *x, const float *w, const float *b, int64_t N,
                                int IC, int OC);
    void (*matmul_backward_bf16)(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                                 const float *w, int64_t N, int IC, int OC);
    void (*lmhead_xent_bf16)(sharc_stream *s, double *loss_sum, float *dx, float *dw, const float *x, const float *w,
                             const int32_t *targets, float scale, int64_t N, int C, int V, float *ws, int64_t chunk);
    /* matmul_forward_bf16 and matmul_backward_bf16 with x and w given in
     * bf16 already (raw 16-bit words: the model's bf16 activations and its
     * weights converted once per gather, note [bf16-acts] in
     * src/model/model.c); dy, y, dx, dw, b, db fp32, dy rounded to bf16 for
     * the products. (optional: NULL, the model then keeps fp32 activations) */
    void (*matmul_forward_b16)(sharc_stream *s, float *y, const uint16_t *x, const uint16_t *w, const float *b,
                               int64_t N, int IC, int OC);
    void (*matmul_backward_b16)(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const uint16_t *x,
                                const uint16_t *w, int64_t N, int IC, int OC);
    /* attention_forward and attention_backward (same arguments, mask and
     * workspace) with q, k, v, dO, P and dS rounded to bf16 as products'
     * operands, the softmax statistics, lse and sums fp32, inputs and
     * outputs fp32 (cuda: tensor cores, note [cuda-attention-tc]). The model
     * uses them when it computes in bf16. (optional: the fp32 slot) */
    void (*attention_forward_bf16)(sharc_stream *s, float *out, float *lse, const float *qkv, const int32_t *lo, int B,
                                   int T, int NH, int NKV, int hd, float *ws);
    void (*attention_backward_bf16)(sharc_stream *s, float *dqkv, const float *dout, const float *qkv, const float *out,
                                    const float *lse, const int32_t *lo, int B, int T, int NH, int NKV, int hd,
                                    float *ws);

    /* ---- the linear layer with GELU fused (note [gemm-gelu] in
     * src/device/cuda/cuda.cu), GPT-2's MLP fc ----
     * Forward: pre(N,OC) = x w^T + b (b nullable), kept for backward, and
     * y(N,OC) = gelu(pre) (the tanh form of gelu_forward). Backward: the
     * product that reads y, dx(N,IC) = (dy @ w) * gelu'(pre) with pre (N,IC),
     * dw, db accumulated as matmul_backward (each skipped if NULL). The _b16
     * forms take x and w in bf16 as matmul_forward_b16 / _backward_b16 do, and
     * the forward also writes yh (nullable), y rounded to bf16 (the model's
     * bf16 copy, note [bf16-acts]). (optional: the unfused composition of
     * matmul_forward(_b16), gelu_forward and cast, and of
     * matmul_backward(_b16) and gelu_backward; the _b16 forms NULL without
     * matmul_forward_b16) */
    void (*matmul_gelu_forward)(sharc_stream *s, float *pre, float *y, const float *x, const float *w, const float *b,
                                int64_t N, int IC, int OC);
    void (*matmul_backward_dgelu)(sharc_stream *s, float *dx, float *dw, float *db, const float *dy, const float *x,
                                  const float *w, const float *pre, int64_t N, int IC, int OC);
    void (*matmul_gelu_forward_b16)(sharc_stream *s, float *pre, float *y, uint16_t *yh, const uint16_t *x,
                                    const uint16_t *w, const float *b, int64_t N, int IC, int OC);
    void (*matmul_backward_dgelu_b16)(sharc_stream *s, float *dx, float *dw, float *db, const float *dy,
                                      const uint16_t *x, const uint16_t *w, const float *pre, int64_t N, int IC,
                                      int OC);
} sharc_kernels;

#ifdef __cplusplus
}
#endif
#endif
