/* attention.c: sharc_cpu_attention_*, causal attention with grouped-query heads
 * (optionally narrowed per query: documents, sliding windows)
 * (and the forward of new queries against a key/value cache).
 *
 * Note [attention-tiling]. Work is done one block of BQ query rows at a time:
 * the block's scores against every key it may see (at most BQ x T floats,
 * in the per-thread workspace) are computed with one sgemm, soft-maxed
 * exactly (the whole row is present, so no online rescaling is needed), and
 * multiplied into V with a second sgemm. Only the output and the per-row
 * log-sum-exp are kept. Backward recomputes each block's probabilities from
 * the log-sum-exp (P = exp(S - lse)) and forms dQ, dK, dV with three more
 * sgemms, the FlashAttention-2 algebra:
 *     dP = dO V^T,  D_i = sum_d dO_i O_i,  dS = P * (dP - D),
 *     dQ = scale dS K,  dK += scale dS^T Q,  dV += P^T dO.
 * Stored state is O(B*H*T); scratch is O(threads * BQ * T), so a 2048-token
 * sequence needs 2 x 64 x 2048 floats per thread instead of a T x T matrix.
 * Forward tasks are (batch, head, query block); backward tasks are (batch,
 * key/value head) so the dK/dV of a task are written by that task alone.
 * With the mask of note [attention-mask] (sharc/kernels.h) a block works on
 * keys from its rows' least lo to its last row, and each row's softmax covers
 * its own keys lo .. i, the rest of the row set to 0. */
#include "sharc/blas.h"
#include "cpu.h"
#include "../../core/parallel.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define BQ 64

/* The kernels run on at most sharc_threads_get() threads, each with its own
 * 2 x BQ x T slice. */
int64_t sharc_cpu_attention_workspace(int T) { return (int64_t)sharc_threads_get() * 2 * BQ * (int64_t)T; }

/* The first key of a block: the least lo of its m rows (lor NULL: 0). */
static int block_kbeg(const int32_t *lor, int m) {
    if (!lor) return 0;
    int k = lor[0];
    for (int r = 1; r < m; r++) k = lor[r] < k ? lor[r] : k;
    return k;
}

/* Softmax of rows i0..i0+m-1 (query positions) over keys kbeg..kbeg+kw-1: row
 * r sees keys lor[r] <= j <= i0 + r (lor NULL: 0 <= j); S holds scaled scores
 * with leading dimension kw, column c being key kbeg + c; masked entries are
 * set to 0; lse (nullable) receives each row's log-sum-exp at lse[r]. */
SHARC_VEC static void softmax_block(float *S, float *lse, const int32_t *lor, int i0, int m, int kbeg, int kw) {
    for (int r = 0; r < m; r++) {
        float *row = S + (int64_t)r * kw;
        int a = (lor ? lor[r] : 0) - kbeg, n = i0 + r + 1 - kbeg;
        float mx = -INFINITY;
        for (int j = a; j < n; j++) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = a; j < n; j++) {
            row[j] = expf(row[j] - mx);
            sum += row[j];
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (int j = a; j < n; j++) row[j] *= inv;
        for (int j = 0; j < a; j++) row[j] = 0.0f;
        for (int j = n; j < kw; j++) row[j] = 0.0f;
        if (lse) lse[r] = mx + logf(sum);
    }
}

/* Recompute P from scores and lse, then dS = P * (dP - D) in place in dP
 * (the same rows, keys and mask as softmax_block). */
SHARC_VEC static void softmax_back_block(float *S, float *dP, const float *lse, const int32_t *lor, const float *dO,
                                         const float *O, int ldo, int hd, int i0, int m, int kbeg, int kw) {
    for (int r = 0; r < m; r++) {
        float *p = S + (int64_t)r * kw, *dp = dP + (int64_t)r * kw;
        int a = (lor ? lor[r] : 0) - kbeg, n = i0 + r + 1 - kbeg;
        float l = lse[r];
        const float *dor = dO + (int64_t)r * ldo, *orow = O + (int64_t)r * ldo;
        float D = 0.0f;
        for (int d = 0; d < hd; d++) D += dor[d] * orow[d];
#pragma omp simd
        for (int j = a; j < n; j++) {
            p[j] = expf(p[j] - l);
            dp[j] = p[j] * (dp[j] - D);
        }
        for (int j = 0; j < a; j++) p[j] = dp[j] = 0.0f;
        for (int j = n; j < kw; j++) p[j] = dp[j] = 0.0f;
    }
}

void sharc_cpu_attention_forward(sharc_stream *s, float *out, float *lse, const float *qkv, const int32_t *lo, int B,
                                 int T, int NH, int NKV, int hd, float *ws) {
    const int S = (NH + 2 * NKV) * hd, C = NH * hd, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int nblk = (T + BQ - 1) / BQ;
    const int64_t ntask = (int64_t)B * NH * nblk;
#pragma omp parallel num_threads(sharc_threads_get())
    {
        float *Sb = ws + (int64_t)omp_get_thread_num() * 2 * BQ * T;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            /* largest blocks first: block index runs backwards */
            int blk = nblk - 1 - (int)(task % nblk);
            int h = (int)((task / nblk) % NH), b = (int)(task / ((int64_t)nblk * NH));
            int g = h / group, i0 = blk * BQ, m = T - i0 < BQ ? T - i0 : BQ, kend = i0 + m;
            const int32_t *lor = lo ? lo + (int64_t)b * T + i0 : NULL;
            int kbeg = block_kbeg(lor, m), kw = kend - kbeg;
            const float *base = qkv + (int64_t)b * T * S;
            const float *Q = base + (int64_t)i0 * S + h * hd;
            const float *K = base + (int64_t)kbeg * S + NH * hd + g * hd;
            const float *V = base + (int64_t)kbeg * S + (NH + NKV) * hd + g * hd;
            sharc_sgemm(false, true, m, kw, hd, scale, Q, S, K, S, 0.0f, Sb, kw);
            softmax_block(Sb, lse + ((int64_t)b * NH + h) * T + i0, lor, i0, m, kbeg, kw);
            float *O = out + ((int64_t)b * T + i0) * C + h * hd;
            sharc_sgemm(false, false, m, hd, kw, 1.0f, Sb, kw, V, S, 0.0f, O, C);
        }
    }
}

void sharc_cpu_attention_backward(sharc_stream *s, float *dqkv, const float *dout, const float *qkv, const float *out,
                                  const float *lse, const int32_t *lo, int B, int T, int NH, int NKV, int hd,
                                  float *ws) {
    const int S = (NH + 2 * NKV) * hd, C = NH * hd, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int nblk = (T + BQ - 1) / BQ;
    const int64_t ntask = (int64_t)B * NKV;
#pragma omp parallel num_threads(sharc_threads_get())
    {
        float *Sb = ws + (int64_t)omp_get_thread_num() * 2 * BQ * T;
        float *dPb = Sb + (int64_t)BQ * T;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            int g = (int)(task % NKV), b = (int)(task / NKV);
            const float *base = qkv + (int64_t)b * T * S;
            float *dbase = dqkv + (int64_t)b * T * S;
            float *dK = dbase + NH * hd + g * hd;
            float *dV = dbase + (NH + NKV) * hd + g * hd;
            for (int t = 0; t < T; t++) {
                memset(dK + (int64_t)t * S, 0, (size_t)hd * sizeof(float));
                memset(dV + (int64_t)t * S, 0, (size_t)hd * sizeof(float));
            }
            for (int h = g * group; h < (g + 1) * group; h++) {
                const float *lse_h = lse + ((int64_t)b * NH + h) * T;
                for (int blk = 0; blk < nblk; blk++) {
                    int i0 = blk * BQ, m = T - i0 < BQ ? T - i0 : BQ, kend = i0 + m;
                    const int32_t *lor = lo ? lo + (int64_t)b * T + i0 : NULL;
                    int kbeg = block_kbeg(lor, m), kw = kend - kbeg;
                    const float *K = base + (int64_t)kbeg * S + NH * hd + g * hd;
                    const float *V = base + (int64_t)kbeg * S + (NH + NKV) * hd + g * hd;
                    const float *Q = base + (int64_t)i0 * S + h * hd;
                    float *dQ = dbase + (int64_t)i0 * S + h * hd;
                    const float *O = out + ((int64_t)b * T + i0) * C + h * hd;
                    const float *dO = dout + ((int64_t)b * T + i0) * C + h * hd;
                    sharc_sgemm(false, true, m, kw, hd, scale, Q, S, K, S, 0.0f, Sb, kw);
                    sharc_sgemm(false, true, m, kw, hd, 1.0f, dO, C, V, S, 0.0f, dPb, kw);
                    softmax_back_block(Sb, dPb, lse_h + i0, lor, dO, O, C, hd, i0, m, kbeg, kw);
                    sharc_sgemm(false, false, m, hd, kw, scale, dPb, kw, K, S, 0.0f, dQ, S);
                    sharc_sgemm(true, false, kw, hd, m, scale, dPb, kw, Q, S, 1.0f, dK + (int64_t)kbeg * S, S);
                    sharc_sgemm(true, false, kw, hd, m, 1.0f, Sb, kw, dO, C, 1.0f, dV + (int64_t)kbeg * S, S);
                }
            }
        }
    }
}

/* New queries against a key/value cache (generation): the same blocks,
 * with query row i at position t0 + i seeing keys lo[i] .. t0 + i (lo NULL:
 * from 0). */
void sharc_cpu_attention_cached(sharc_stream *s, float *out, const float *q, int64_t ldq, const float *kc,
                                const float *vc, const int32_t *lo, int n, int t0, int NH, int NKV, int hd, float *ws) {
    const int C = NH * hd, KV = NKV * hd, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int nblk = (n + BQ - 1) / BQ, Tk = t0 + n;
    const int64_t ntask = (int64_t)NH * nblk;
#pragma omp parallel num_threads(sharc_threads_get()) if (ntask > 1)
    {
        float *Sb = ws + (int64_t)omp_get_thread_num() * 2 * BQ * Tk;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            int blk = nblk - 1 - (int)(task % nblk), h = (int)(task / nblk);
            int g = h / group, i0 = blk * BQ, m = n - i0 < BQ ? n - i0 : BQ, kend = t0 + i0 + m;
            const int32_t *lor = lo ? lo + i0 : NULL;
            int kbeg = block_kbeg(lor, m), kw = kend - kbeg;
            sharc_sgemm(false, true, m, kw, hd, scale, q + (int64_t)i0 * ldq + h * hd, (int)ldq,
                        kc + (int64_t)kbeg * KV + g * hd, KV, 0.0f, Sb, kw);
            softmax_block(Sb, NULL, lor, t0 + i0, m, kbeg, kw);
            sharc_sgemm(false, false, m, hd, kw, 1.0f, Sb, kw, vc + (int64_t)kbeg * KV + g * hd, KV, 0.0f,
                        out + (int64_t)i0 * C + h * hd, C);
        }
    }
}
