/* attention.cu: causal grouped-query attention on a CUDA device, forward and
 * backward, in the FlashAttention style: only the output and the per-row
 * log-sum-exp are kept, backward recomputes the probabilities, and no T x T
 * buffer exists at any time (attention_workspace is 0).
 *
 * Note [cuda-attention]: this is the first, simple version, written for
 * correctness against the CPU kernel (src/device/cpu/attention.c): one warp
 * per query row (forward, dQ) or per key row (dK, dV), each lane holding
 * head dimensions lane, lane + 32, ... (hd <= 256), an online softmax over
 * the visible keys, dot products by warp shuffles, fp32 FFMA throughout.
 * dK/dV rows are owned by one warp each (no atomics, results independent of
 * timing); D_i = dO_i . O_i is recomputed where needed instead of stored.
 * It does O(T^2 hd) work with no data reuse through shared memory or tensor
 * cores: the tiled, tensor-core (wgmma) kernel is the next issue's work.
 * The mask of note [attention-mask] (sharc/kernels.h) is the loop bound:
 * query i visits keys lo[i] .. i instead of 0 .. i, and a key row j skips
 * the queries with lo[i] > j. */
#include "cuda.h"

#include <math.h>

#define WARPS 8
#define KMAX  8 /* hd <= 32 * KMAX */

__device__ static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline void load_head(float r[KMAX], const float *p, int lane, int hd) {
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        int d = lane + 32 * k;
        r[k] = d < hd ? p[d] : 0.0f;
    }
}

__device__ static inline float dot_head(const float a[KMAX], const float *p, int lane, int hd) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        int d = lane + 32 * k;
        if (d < hd) s += a[k] * p[d];
    }
    return s;
}

/* One warp's query row against keys jlo .. jhi (rows of stride ld at k, v,
 * this head's columns): writes the normalised output's hd elements to o and
 * returns the row's log-sum-exp. Online softmax, fp32 throughout. */
__device__ static inline float attend_row(float *o, const float q[KMAX], const float *k, const float *v, int64_t ld,
                                          int jlo, int jhi, int lane, int hd, float scale) {
    float acc[KMAX];
#pragma unroll
    for (int c = 0; c < KMAX; c++) acc[c] = 0.0f;
    float mx = -INFINITY, l = 0.0f;
    for (int j = jlo; j <= jhi; j++) {
        const float *kr = k + j * ld, *vr = v + j * ld;
        float sc = warp_sum(dot_head(q, kr, lane, hd)) * scale;
        float nm = fmaxf(mx, sc);
        float corr = expf(mx - nm), p = expf(sc - nm);
        l = l * corr + p;
#pragma unroll
        for (int c = 0; c < KMAX; c++) {
            int d = lane + 32 * c;
            acc[c] = acc[c] * corr + (d < hd ? p * vr[d] : 0.0f);
        }
        mx = nm;
    }
    float inv = 1.0f / l;
#pragma unroll
    for (int c = 0; c < KMAX; c++) {
        int d = lane + 32 * c;
        if (d < hd) o[d] = acc[c] * inv;
    }
    return mx + logf(l);
}

/* The query row (b, h, i) of a warp in a grid of one warp per (b, h, i),
 * its key/value head, the qkv row stride and batch b's base; false for a
 * warp past the last row. */
struct head_row {
    int b, h, i, kvh;
    int64_t S;
    const float *base;
};

__device__ static inline bool head_row_at(head_row *r, const float *qkv, int B, int T, int NH, int NKV, int hd) {
    int64_t row = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= (int64_t)B * NH * T) return false;
    r->i = (int)(row % T);
    r->h = (int)((row / T) % NH);
    r->b = (int)(row / ((int64_t)T * NH));
    r->kvh = r->h / (NH / NKV);
    r->S = (int64_t)(NH + 2 * NKV) * hd;
    r->base = qkv + (int64_t)r->b * T * r->S;
    return true;
}

/* one warp per (b, h, i) */
__global__ static void __launch_bounds__(32 * WARPS)
    k_attn_fwd(float *out, float *lse, const float *qkv, const int32_t *lo, int B, int T, int NH, int NKV, int hd,
               float scale) {
    head_row r;
    if (!head_row_at(&r, qkv, B, T, NH, NKV, hd)) return;
    const int lane = threadIdx.x % 32, i = r.i, h = r.h, b = r.b, kvh = r.kvh;
    const int64_t S = r.S;
    const float *base = r.base;
    float q[KMAX];
    load_head(q, base + i * S + (int64_t)h * hd, lane, hd);
    float L = attend_row(out + ((int64_t)b * T + i) * NH * hd + (int64_t)h * hd, q, base + (int64_t)(NH + kvh) * hd,
                         base + (int64_t)(NH + NKV + kvh) * hd, S, lo ? lo[(int64_t)b * T + i] : 0, i, lane, hd, scale);
    if (lane == 0) lse[((int64_t)b * NH + h) * T + i] = L;
}

/* dQ: one warp per (b, h, i) */
__global__ static void __launch_bounds__(32 * WARPS)
    k_attn_dq(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse, const int32_t *lo,
              int B, int T, int NH, int NKV, int hd, float scale) {
    head_row r;
    if (!head_row_at(&r, qkv, B, T, NH, NKV, hd)) return;
    const int lane = threadIdx.x % 32, i = r.i, h = r.h, b = r.b, kvh = r.kvh;
    const int64_t S = r.S;
    const float *base = r.base;
    int64_t orow = ((int64_t)b * T + i) * NH * hd + (int64_t)h * hd;
    float q[KMAX], dO[KMAX], dq[KMAX];
    load_head(q, base + i * S + (int64_t)h * hd, lane, hd);
    load_head(dO, dout + orow, lane, hd);
    float Di = warp_sum(dot_head(dO, out + orow, lane, hd));
    float L = lse[((int64_t)b * NH + h) * T + i];
#pragma unroll
    for (int k = 0; k < KMAX; k++) dq[k] = 0.0f;
    for (int j = lo ? lo[(int64_t)b * T + i] : 0; j <= i; j++) {
        const float *kr = base + j * S + (int64_t)(NH + kvh) * hd;
        const float *vr = base + j * S + (int64_t)(NH + NKV + kvh) * hd;
        float sc = warp_sum(dot_head(q, kr, lane, hd)) * scale;
        float dp = warp_sum(dot_head(dO, vr, lane, hd));
        float ds = expf(sc - L) * (dp - Di);
#pragma unroll
        for (int k = 0; k < KMAX; k++) {
            int d = lane + 32 * k;
            if (d < hd) dq[k] += ds * kr[d];
        }
    }
    float *o = dqkv + ((int64_t)b * T + i) * S + (int64_t)h * hd;
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        int d = lane + 32 * k;
        if (d < hd) o[d] = dq[k] * scale;
    }
}

/* dK, dV: one warp per (b, kv head, j), over the query heads of its group */
__global__ static void __launch_bounds__(32 * WARPS)
    k_attn_dkv(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse, const int32_t *lo,
               int B, int T, int NH, int NKV, int hd, float scale) {
    int64_t row = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (int64_t)B * NKV * T) return;
    int j = (int)(row % T);
    int kvh = (int)((row / T) % NKV);
    int b = (int)(row / ((int64_t)T * NKV));
    int G = NH / NKV;
    int64_t S = (int64_t)(NH + 2 * NKV) * hd;
    const float *base = qkv + (int64_t)b * T * S;
    float kj[KMAX], vj[KMAX], dk[KMAX], dv[KMAX];
    load_head(kj, base + j * S + (int64_t)(NH + kvh) * hd, lane, hd);
    load_head(vj, base + j * S + (int64_t)(NH + NKV + kvh) * hd, lane, hd);
#pragma unroll
    for (int k = 0; k < KMAX; k++) dk[k] = dv[k] = 0.0f;
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        for (int i = j; i < T; i++) {
            if (lo && lo[(int64_t)b * T + i] > j) continue;
            const float *qr = base + i * S + (int64_t)h * hd;
            int64_t orow = ((int64_t)b * T + i) * NH * hd + (int64_t)h * hd;
            const float *dor = dout + orow;
            float sc = warp_sum(dot_head(kj, qr, lane, hd)) * scale;
            float dp = warp_sum(dot_head(vj, dor, lane, hd));
            float Di = 0.0f;
#pragma unroll
            for (int k = 0; k < KMAX; k++) {
                int d = lane + 32 * k;
                if (d < hd) Di += dor[d] * out[orow + d];
            }
            Di = warp_sum(Di);
            float p = expf(sc - lse[((int64_t)b * NH + h) * T + i]);
            float ds = p * (dp - Di);
#pragma unroll
            for (int k = 0; k < KMAX; k++) {
                int d = lane + 32 * k;
                if (d < hd) {
                    dv[k] += p * dor[d];
                    dk[k] += ds * qr[d];
                }
            }
        }
    }
    float *ko = dqkv + ((int64_t)b * T + j) * S + (int64_t)(NH + kvh) * hd;
    float *vo = dqkv + ((int64_t)b * T + j) * S + (int64_t)(NH + NKV + kvh) * hd;
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        int d = lane + 32 * k;
        if (d < hd) {
            ko[d] = dk[k] * scale;
            vo[d] = dv[k];
        }
    }
}

/* generation: one warp per (i, h) of n new queries against the cache */
__global__ static void __launch_bounds__(32 * WARPS)
    k_attn_cached(float *out, const float *q, int64_t ldq, const float *kc, const float *vc, const int32_t *lo, int n,
                  int t0, int NH, int NKV, int hd, float scale) {
    int64_t row = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (int64_t)n * NH) return;
    int i = (int)(row / NH), h = (int)(row % NH);
    int kvh = h / (NH / NKV);
    int64_t KV = (int64_t)NKV * hd;
    float qr[KMAX];
    load_head(qr, q + i * ldq + (int64_t)h * hd, lane, hd);
    attend_row(out + (int64_t)i * NH * hd + (int64_t)h * hd, qr, kc + (int64_t)kvh * hd, vc + (int64_t)kvh * hd, KV,
               lo ? lo[i] : 0, t0 + i, lane, hd, scale);
}

static void check_shape(int NH, int NKV, int hd, const char *what) {
    if (hd > 32 * KMAX || hd < 1 || NKV < 1 || NH % NKV != 0)
        sharc_fatal(__FILE__, __LINE__, "%s on cuda: head dim %d (at most %d), %d heads over %d kv heads", what, hd,
                    32 * KMAX, NH, NKV);
}

static unsigned warps_grid(int64_t rows) {
    int64_t g = (rows + WARPS - 1) / WARPS;
    if (g > 0x7fffffff) sharc_fatal(__FILE__, __LINE__, "attention on cuda: %lld rows", (long long)rows);
    return (unsigned)g;
}

extern "C" int64_t sharc_cuda_attention_workspace(int T) { return 0; }

extern "C" void sharc_cuda_attention_forward(sharc_stream *s, float *out, float *lse, const float *qkv,
                                             const int32_t *lo, int B, int T, int NH, int NKV, int hd, float *ws) {
    if ((int64_t)B * T <= 0) return;
    check_shape(NH, NKV, hd, "attention_forward");
    float scale = 1.0f / sqrtf((float)hd);
    k_attn_fwd<<<warps_grid((int64_t)B * NH * T), 32 * WARPS, 0, sharc_cuda_cs(s)>>>(out, lse, qkv, lo, B, T, NH, NKV,
                                                                                     hd, scale);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_attention_backward(sharc_stream *s, float *dqkv, const float *dout, const float *qkv,
                                              const float *out, const float *lse, const int32_t *lo, int B, int T,
                                              int NH, int NKV, int hd, float *ws) {
    if ((int64_t)B * T <= 0) return;
    check_shape(NH, NKV, hd, "attention_backward");
    float scale = 1.0f / sqrtf((float)hd);
    cudaStream_t cs = sharc_cuda_cs(s);
    k_attn_dq<<<warps_grid((int64_t)B * NH * T), 32 * WARPS, 0, cs>>>(dqkv, dout, qkv, out, lse, lo, B, T, NH, NKV, hd,
                                                                      scale);
    SHARC_CUDA_LAUNCHED();
    k_attn_dkv<<<warps_grid((int64_t)B * NKV * T), 32 * WARPS, 0, cs>>>(dqkv, dout, qkv, out, lse, lo, B, T, NH, NKV,
                                                                        hd, scale);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_attention_cached(sharc_stream *s, float *out, const float *q, int64_t ldq, const float *kc,
                                            const float *vc, const int32_t *lo, int n, int t0, int NH, int NKV, int hd,
                                            float *ws) {
    if (n <= 0) return;
    check_shape(NH, NKV, hd, "attention_cached");
    k_attn_cached<<<warps_grid((int64_t)n * NH), 32 * WARPS, 0, sharc_cuda_cs(s)>>>(out, q, ldq, kc, vc, lo, n, t0, NH,
                                                                                    NKV, hd, 1.0f / sqrtf((float)hd));
    SHARC_CUDA_LAUNCHED();
}
