/* attention_tc.cu: causal grouped-query attention on tensor cores for bf16
 * compute, the kernel table's attention_forward_bf16 / attention_backward_bf16
 * on a CUDA device: FlashAttention-2's tiling over the WMMA API (bf16
 * multiplicands, fp32 accumulators), with the contract of attention_forward /
 * attention_backward (sharc/kernels.h: fp32 qkv, out, lse, dqkv; the lo mask
 * of note [attention-mask]).
 *
 * Note [cuda-attention-tc] (docs/ARCHITECTURE.md has the whole note):
 * - Tiles of 64 queries and 64 keys; a block of 4 warps, each warp owning 16
 *   rows of the tile. Q, K, V and dO are rounded to bf16 as a tile enters
 *   shared memory; scores, the softmax statistics (row max and sum, lse),
 *   D = rowsum(dO * O) (from the fp32 dO and O) and every accumulation are
 *   fp32; P and dS are rounded to bf16 as the multiplicand of the next
 *   product (P V, P^T dO, dS K, dS^T Q), as FlashAttention-2 does.
 * - Forward: one block per (b, h, query tile); K and V tiles of the key
 *   range [min lo of the tile's rows, last query] pass through one shared
 *   buffer (tiles wholly above the diagonal or left of every row's window
 *   are never visited); S = Q K^T by WMMA into shared memory, the online
 *   softmax there (two lanes per row), O += P V with O in accumulator
 *   fragments, rescaled per row.
 * - Backward, deterministic (no atomics; each output element has one
 *   owner, each sum a fixed order): one block per (b, kv head, key tile)
 *   owns dK and dV of its 64 keys and loops over the query heads of its
 *   group and the query tiles at or after it (dV += P^T dO, dK += dS^T Q);
 *   a second kernel, one block per (b, h, query tile), owns dQ (dQ += dS K)
 *   over the key tiles before it. P is recomputed from lse, dP = dO V^T,
 *   dS = P (dP - D).
 * - The map from a fragment's elements to matrix positions is unspecified
 *   (CUDA C++ Programming Guide, "Warp Matrix Functions"): it is read once
 *   per kernel by loading a matrix of indices (row * 16 + col) into an
 *   accumulator fragment, so elementwise work on score fragments (the
 *   mask, exp, dS) knows each element's row and column; it holds for every
 *   accumulator fragment of the same type. Scores go through shared memory
 *   where a row-wide reduction is needed (the forward's max and sum).
 * - Shared memory is static (under the 48 KB a static allocation may use),
 *   sized for head dimensions up to 128 (a multiple of 16; others go to the
 *   fp32 kernel, attention.cu, or are refused).
 * Validated only under the CUDA simulator (note [cudasim]) so far. */
#include "cuda.h"

#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>
#include <mma.h>

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

#define TILE  64          /* queries per query tile, keys per key tile */
#define NWARP 4           /* warps per block, 16 rows each */
#define HDMAX 128         /* the largest head dimension (a multiple of 16) */
#define LDH   (HDMAX + 8) /* bf16 tile row stride: a multiple of 16 bytes, rows shifted by 4 banks */
#define LDS   (TILE + 4)  /* fp32 score row stride */
#define LDP   (TILE + 8)  /* bf16 probability row stride */
#define LDW   24          /* a warp's 16 x 16 bf16 tile */
#define LDF   20          /* a warp's 16 x 16 fp32 staging */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_br;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bc;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

#define FULL 0xffffffffu

/* rows 0 .. TILE-1 of one head (hd columns) rounded to bf16; src: row 0,
 * rows ld floats apart; rows at or past `rows` are zero */
__device__ static inline void load_tile(bf16 (*dst)[LDH], const float *src, int64_t ld, int rows, int hd) {
    for (int e = threadIdx.x; e < TILE * hd; e += NWARP * 32) {
        int r = e / hd, d = e % hd;
        dst[r][d] = __float2bfloat16(r < rows ? src[r * ld + d] : 0.0f);
    }
}

/* The element map of an accumulator fragment (row * 16 + col of element
 * e), read through a 16 x 16 fp32 scratch of this warp (ld floats apart). */
__device__ static inline void element_map(int map[8], float *scratch, int ld) {
    int lane = threadIdx.x % 32;
    for (int e = lane; e < 256; e += 32) scratch[(e / 16) * ld + e % 16] = (float)e;
    __syncwarp();
    frag_c f;
    wmma::load_matrix_sync(f, scratch, ld, wmma::mem_row_major);
    for (int e = 0; e < 8; e++) map[e] = (int)f.x[e];
    __syncwarp();
}

__device__ static inline int warp_min(int v) {
    for (int o = 16; o > 0; o /= 2) {
        int u = __shfl_xor_sync(FULL, v, o);
        v = u < v ? u : v;
    }
    return v;
}

/* Forward: block (query tile, b * NH + h); tiles taken last first (the
 * longest rows start first). Lane pair (2 l, 2 l + 1) of warp w owns the
 * softmax of tile row 16 w + l, each lane 32 of the 64 columns. */
template <int NF>
__global__ static void __launch_bounds__(NWARP * 32, 1)
    k_fa_fwd(float *out, float *lse, const float *qkv, const int32_t *lo, int T, int NH, int NKV, float scale) {
    const int hd = NF * 16;
    __shared__ __align__(32) bf16 kv[TILE][LDH];  /* Q (staging), then each K tile, then each V tile */
    __shared__ __align__(32) float sc[TILE][LDS]; /* scores of the tile; the output's staging */
    __shared__ __align__(32) bf16 pr[TILE][LDP];  /* probabilities, bf16 */
    __shared__ float rowc[TILE];                  /* per row: the rescale factor, at the end 1 / sum */
    __shared__ int wlo[NWARP];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int q0 = (int)(gridDim.x - 1 - blockIdx.x) * TILE;
    int b = (int)blockIdx.y / NH, h = (int)blockIdx.y % NH, kvh = h / (NH / NKV);
    int64_t S = (int64_t)(NH + 2 * NKV) * hd;
    const float *base = qkv + (int64_t)b * T * S;
    int nq = T - q0 < TILE ? T - q0 : TILE;
    int r = w * 16 + lane / 2, half = lane & 1, i = q0 + r;
    bool valid = r < nq;
    int lo_i = valid ? (lo ? lo[(int64_t)b * T + i] : 0) : INT_MAX;
    int m = warp_min(lo_i);
    if (lane == 0) wlo[w] = m;

    int map[8];
    element_map(map, &sc[w * 16][0], LDS);
    load_tile(kv, base + (int64_t)q0 * S + (int64_t)h * hd, S, nq, hd);
    __syncthreads();
    frag_a qf[NF];
    frag_c o[NF];
#pragma unroll
    for (int f = 0; f < NF; f++) {
        wmma::load_matrix_sync(qf[f], &kv[w * 16][f * 16], LDH);
        wmma::fill_fragment(o[f], 0.0f);
    }
    int kfirst = wlo[0];
    for (int k = 1; k < NWARP; k++) kfirst = wlo[k] < kfirst ? wlo[k] : kfirst;
    __syncthreads(); /* Q is in fragments: kv is free */

    float mrow = -INFINITY, lrow = 0.0f;
    for (int k0 = kfirst / TILE * TILE; k0 < q0 + nq; k0 += TILE) {
        int nk = T - k0 < TILE ? T - k0 : TILE;
        load_tile(kv, base + (int64_t)k0 * S + (int64_t)(NH + kvh) * hd, S, nk, hd);
        __syncthreads();
        for (int n = 0; n < TILE / 16; n++) {
            frag_c s;
            wmma::fill_fragment(s, 0.0f);
#pragma unroll
            for (int f = 0; f < NF; f++) {
                frag_bc kb; /* K^T: element (d, key) at kv[key][d] */
                wmma::load_matrix_sync(kb, &kv[n * 16][f * 16], LDH);
                wmma::mma_sync(s, qf[f], kb, s);
            }
            wmma::store_matrix_sync(&sc[w * 16][n * 16], s, LDS, wmma::mem_row_major);
        }
        __syncthreads(); /* every warp is done with K; the scores are in */
        load_tile(kv, base + (int64_t)k0 * S + (int64_t)(NH + NKV + kvh) * hd, S, nk, hd);
        float x[32], mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            int j = k0 + half * 32 + c;
            x[c] = valid && j <= i && j >= lo_i ? sc[r][half * 32 + c] * scale : -INFINITY;
            mx = fmaxf(mx, x[c]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, 1));
        float mnew = fmaxf(mrow, mx), corr = 1.0f, sum = 0.0f;
        if (mnew != -INFINITY) corr = expf(mrow - mnew);
#pragma unroll
        for (int c = 0; c < 32; c++) {
            float p = mnew != -INFINITY ? expf(x[c] - mnew) : 0.0f;
            sum += p;
            pr[r][half * 32 + c] = __float2bfloat16(p);
        }
        sum += __shfl_xor_sync(FULL, sum, 1);
        lrow = lrow * corr + sum;
        mrow = mnew;
        if (half == 0) rowc[r] = corr;
        __syncthreads(); /* V, P and the factors are in */
        frag_a pa[TILE / 16];
#pragma unroll
        for (int kk = 0; kk < TILE / 16; kk++) wmma::load_matrix_sync(pa[kk], &pr[w * 16 + 0][kk * 16], LDP);
#pragma unroll
        for (int f = 0; f < NF; f++) {
            for (int e = 0; e < 8; e++) o[f].x[e] *= rowc[w * 16 + map[e] / 16];
#pragma unroll
            for (int kk = 0; kk < TILE / 16; kk++) {
                frag_br vb; /* V: element (key, d) at kv[key][d] */
                wmma::load_matrix_sync(vb, &kv[kk * 16][f * 16], LDH);
                wmma::mma_sync(o[f], pa[kk], vb, o[f]);
            }
        }
        __syncthreads(); /* kv, pr and rowc may be written again */
    }
    if (half == 0) {
        rowc[r] = valid ? 1.0f / lrow : 0.0f; /* key i is always visible: lrow > 0 */
        if (valid) lse[((int64_t)b * NH + h) * T + i] = mrow + logf(lrow);
    }
    __syncthreads();
    float *orow = out + ((int64_t)b * T + q0) * NH * hd + (int64_t)h * hd;
#pragma unroll
    for (int f = 0; f < NF; f++) {
        for (int e = 0; e < 8; e++) o[f].x[e] *= rowc[w * 16 + map[e] / 16];
        wmma::store_matrix_sync(&sc[w * 16][0], o[f], LDS, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int rr = w * 16 + e / 16;
            if (rr < nq) orow[(int64_t)rr * NH * hd + f * 16 + e % 16] = sc[rr][e % 16];
        }
        __syncwarp();
    }
}

/* Per-row state of query tile q0 for the backward kernels, by lane pairs
 * (row 16 w + lane / 2): lse, D = dO . O (fp32 inputs, each lane half of
 * the head, the pair's halves added) and lo; rows past T get lo INT_MAX.
 * Returns the warp's smallest lo. */
__device__ static inline int row_state(float *Lr, float *Dr, int *lor, const float *dout, const float *out,
                                       const float *lse, const int32_t *lo, int b, int h, int q0, int nq, int T, int NH,
                                       int hd) {
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = w * 16 + lane / 2, half = lane & 1, i = q0 + r;
    bool valid = r < nq;
    float d = 0.0f;
    if (valid) {
        int64_t o = ((int64_t)b * T + i) * NH * hd + (int64_t)h * hd + half * (hd / 2);
        for (int k = 0; k < hd / 2; k++) d += __bfloat162float(__float2bfloat16(dout[o + k])) * out[o + k];
    }
    d += __shfl_xor_sync(FULL, d, 1);
    int lo_i = valid ? (lo ? lo[(int64_t)b * T + i] : 0) : INT_MAX;
    if (half == 0) {
        Dr[r] = d;
        Lr[r] = valid ? lse[((int64_t)b * NH + h) * T + i] : 0.0f;
        lor[r] = lo_i;
    }
    return warp_min(lo_i);
}

/* dQ: block (query tile, b * NH + h), over the key tiles of its rows */
template <int NF>
__global__ static void __launch_bounds__(NWARP * 32, 1)
    k_fa_dq(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse, const int32_t *lo,
            int T, int NH, int NKV, float scale) {
    const int hd = NF * 16;
    __shared__ __align__(32) bf16 ks[TILE][LDH];        /* Q (staging), then K tiles */
    __shared__ __align__(32) bf16 vs[TILE][LDH];        /* dO (staging), then V tiles */
    __shared__ __align__(32) bf16 dsw[NWARP][16][LDW];  /* each warp's dS block */
    __shared__ __align__(32) float stg[NWARP][16][LDF]; /* each warp's map and output staging */
    __shared__ float Lr[TILE], Dr[TILE];
    __shared__ int lor[TILE], wlo[NWARP];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int q0 = (int)(gridDim.x - 1 - blockIdx.x) * TILE;
    int b = (int)blockIdx.y / NH, h = (int)blockIdx.y % NH, kvh = h / (NH / NKV);
    int64_t S = (int64_t)(NH + 2 * NKV) * hd;
    const float *base = qkv + (int64_t)b * T * S;
    int nq = T - q0 < TILE ? T - q0 : TILE;
    int m = row_state(Lr, Dr, lor, dout, out, lse, lo, b, h, q0, nq, T, NH, hd);
    if (lane == 0) wlo[w] = m;
    int map[8];
    element_map(map, &stg[w][0][0], LDF);
    load_tile(ks, base + (int64_t)q0 * S + (int64_t)h * hd, S, nq, hd);
    load_tile(vs, dout + ((int64_t)b * T + q0) * NH * hd + (int64_t)h * hd, (int64_t)NH * hd, nq, hd);
    __syncthreads();
    frag_a qf[NF], dof[NF];
    frag_c dq[NF];
#pragma unroll
    for (int f = 0; f < NF; f++) {
        wmma::load_matrix_sync(qf[f], &ks[w * 16][f * 16], LDH);
        wmma::load_matrix_sync(dof[f], &vs[w * 16][f * 16], LDH);
        wmma::fill_fragment(dq[f], 0.0f);
    }
    int kfirst = wlo[0];
    for (int k = 1; k < NWARP; k++) kfirst = wlo[k] < kfirst ? wlo[k] : kfirst;
    __syncthreads();

    for (int k0 = kfirst / TILE * TILE; k0 < q0 + nq; k0 += TILE) {
        int nk = T - k0 < TILE ? T - k0 : TILE;
        load_tile(ks, base + (int64_t)k0 * S + (int64_t)(NH + kvh) * hd, S, nk, hd);
        load_tile(vs, base + (int64_t)k0 * S + (int64_t)(NH + NKV + kvh) * hd, S, nk, hd);
        __syncthreads();
        for (int n = 0; n < TILE / 16; n++) {
            frag_c s, dp;
            wmma::fill_fragment(s, 0.0f);
            wmma::fill_fragment(dp, 0.0f);
#pragma unroll
            for (int f = 0; f < NF; f++) {
                frag_bc kb, vb; /* K^T and V^T */
                wmma::load_matrix_sync(kb, &ks[n * 16][f * 16], LDH);
                wmma::mma_sync(s, qf[f], kb, s);
                wmma::load_matrix_sync(vb, &vs[n * 16][f * 16], LDH);
                wmma::mma_sync(dp, dof[f], vb, dp);
            }
            for (int e = 0; e < 8; e++) {
                int rr = map[e] / 16, cc = map[e] % 16, row = w * 16 + rr;
                int i = q0 + row, j = k0 + n * 16 + cc;
                bool vis = row < nq && j <= i && j >= lor[row];
                float p = vis ? expf(s.x[e] * scale - Lr[row]) : 0.0f;
                dsw[w][rr][cc] = __float2bfloat16(p * (dp.x[e] - Dr[row]));
            }
            __syncwarp();
            frag_a da;
            wmma::load_matrix_sync(da, &dsw[w][0][0], LDW);
#pragma unroll
            for (int f = 0; f < NF; f++) {
                frag_br kb; /* K: element (key, d) */
                wmma::load_matrix_sync(kb, &ks[n * 16][f * 16], LDH);
                wmma::mma_sync(dq[f], da, kb, dq[f]);
            }
            __syncwarp(); /* dsw may be written again */
        }
        __syncthreads();
    }
    float *drow = dqkv + ((int64_t)b * T + q0) * S + (int64_t)h * hd;
#pragma unroll
    for (int f = 0; f < NF; f++) {
        wmma::store_matrix_sync(&stg[w][0][0], dq[f], LDF, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            int rr = w * 16 + e / 16;
            if (rr < nq) drow[(int64_t)rr * S + f * 16 + e % 16] = stg[w][e / 16][e % 16] * scale;
        }
        __syncwarp();
    }
}

/* dK, dV: block (key tile, b * NKV + kv head), over the query heads of the
 * group and the query tiles at or after the key tile; warp w owns keys
 * 16 w .. 16 w + 15 of the tile */
template <int NF>
__global__ static void __launch_bounds__(NWARP * 32, 1)
    k_fa_dkv(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse, const int32_t *lo,
             int T, int NH, int NKV, float scale) {
    const int hd = NF * 16;
    __shared__ __align__(32) bf16 qs[TILE][LDH];       /* K (staging), then Q tiles */
    __shared__ __align__(32) bf16 dos[TILE][LDH];      /* V (staging), then dO tiles */
    __shared__ __align__(32) bf16 pw[NWARP][16][LDW];  /* each warp's P^T block */
    __shared__ __align__(32) bf16 dsw[NWARP][16][LDW]; /* each warp's dS^T block */
    __shared__ __align__(32) float stg[NWARP][16][LDF];
    __shared__ float Lr[TILE], Dr[TILE];
    __shared__ int lor[TILE], wlo[NWARP];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int k0 = (int)blockIdx.x * TILE;
    int b = (int)blockIdx.y / NKV, kvh = (int)blockIdx.y % NKV, G = NH / NKV;
    int64_t S = (int64_t)(NH + 2 * NKV) * hd;
    const float *base = qkv + (int64_t)b * T * S;
    int nk = T - k0 < TILE ? T - k0 : TILE;
    int map[8];
    element_map(map, &stg[w][0][0], LDF);
    load_tile(qs, base + (int64_t)k0 * S + (int64_t)(NH + kvh) * hd, S, nk, hd);
    load_tile(dos, base + (int64_t)k0 * S + (int64_t)(NH + NKV + kvh) * hd, S, nk, hd);
    __syncthreads();
    frag_a kf[NF], vf[NF];
    frag_c dk[NF], dv[NF];
#pragma unroll
    for (int f = 0; f < NF; f++) {
        wmma::load_matrix_sync(kf[f], &qs[w * 16][f * 16], LDH);
        wmma::load_matrix_sync(vf[f], &dos[w * 16][f * 16], LDH);
        wmma::fill_fragment(dk[f], 0.0f);
        wmma::fill_fragment(dv[f], 0.0f);
    }
    __syncthreads();

    for (int h = kvh * G; h < (kvh + 1) * G; h++)
        for (int q0 = k0; q0 < T; q0 += TILE) {
            int nq = T - q0 < TILE ? T - q0 : TILE;
            int m = row_state(Lr, Dr, lor, dout, out, lse, lo, b, h, q0, nq, T, NH, hd);
            if (lane == 0) wlo[w] = m;
            __syncthreads();
            int qlo = wlo[0];
            for (int k = 1; k < NWARP; k++) qlo = wlo[k] < qlo ? wlo[k] : qlo;
            if (qlo < k0 + nk) { /* else every row's window starts after this key tile */
                load_tile(qs, base + (int64_t)q0 * S + (int64_t)h * hd, S, nq, hd);
                load_tile(dos, dout + ((int64_t)b * T + q0) * NH * hd + (int64_t)h * hd, (int64_t)NH * hd, nq, hd);
                __syncthreads();
                for (int n = 0; n < TILE / 16; n++) {
                    frag_c s, dp; /* S^T and dP^T: keys by queries */
                    wmma::fill_fragment(s, 0.0f);
                    wmma::fill_fragment(dp, 0.0f);
#pragma unroll
                    for (int f = 0; f < NF; f++) {
                        frag_bc qb, db; /* Q^T and dO^T */
                        wmma::load_matrix_sync(qb, &qs[n * 16][f * 16], LDH);
                        wmma::mma_sync(s, kf[f], qb, s);
                        wmma::load_matrix_sync(db, &dos[n * 16][f * 16], LDH);
                        wmma::mma_sync(dp, vf[f], db, dp);
                    }
                    for (int e = 0; e < 8; e++) {
                        int rr = map[e] / 16, cc = map[e] % 16, col = n * 16 + cc;
                        int j = k0 + w * 16 + rr, i = q0 + col;
                        bool vis = col < nq && w * 16 + rr < nk && j <= i && j >= lor[col];
                        float p = vis ? expf(s.x[e] * scale - Lr[col]) : 0.0f;
                        pw[w][rr][cc] = __float2bfloat16(p);
                        dsw[w][rr][cc] = __float2bfloat16(p * (dp.x[e] - Dr[col]));
                    }
                    __syncwarp();
                    frag_a pa, da;
                    wmma::load_matrix_sync(pa, &pw[w][0][0], LDW);
                    wmma::load_matrix_sync(da, &dsw[w][0][0], LDW);
#pragma unroll
                    for (int f = 0; f < NF; f++) {
                        frag_br ob, qb; /* dO and Q: element (query, d) */
                        wmma::load_matrix_sync(ob, &dos[n * 16][f * 16], LDH);
                        wmma::mma_sync(dv[f], pa, ob, dv[f]);
                        wmma::load_matrix_sync(qb, &qs[n * 16][f * 16], LDH);
                        wmma::mma_sync(dk[f], da, qb, dk[f]);
                    }
                    __syncwarp(); /* pw and dsw may be written again */
                }
            }
            __syncthreads(); /* the tiles and row state may be written again */
        }
    float *krow = dqkv + ((int64_t)b * T + k0) * S + (int64_t)(NH + kvh) * hd;
    float *vrow = dqkv + ((int64_t)b * T + k0) * S + (int64_t)(NH + NKV + kvh) * hd;
#pragma unroll
    for (int f = 0; f < NF; f++)
        for (int which = 0; which < 2; which++) {
            wmma::store_matrix_sync(&stg[w][0][0], which ? dv[f] : dk[f], LDF, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                int rr = w * 16 + e / 16;
                if (rr < nk) {
                    float v = stg[w][e / 16][e % 16];
                    if (which) vrow[(int64_t)rr * S + f * 16 + e % 16] = v;
                    else krow[(int64_t)rr * S + f * 16 + e % 16] = v * scale;
                }
            }
            __syncwarp();
        }
}

/* NF = hd / 16 as a template argument (the fragments are register arrays) */
#define SHARC_FA_DISPATCH(NFV, CALL)                                                                                   \
    switch (NFV) {                                                                                                     \
    case 1: CALL(1); break;                                                                                            \
    case 2: CALL(2); break;                                                                                            \
    case 3: CALL(3); break;                                                                                            \
    case 4: CALL(4); break;                                                                                            \
    case 5: CALL(5); break;                                                                                            \
    case 6: CALL(6); break;                                                                                            \
    case 7: CALL(7); break;                                                                                            \
    default: CALL(8); break;                                                                                           \
    }

/* whether the tensor-core kernels take this shape; false: the fp32 kernel
 * (hd not a multiple of 16); hd over HDMAX is refused */
static bool tc_shape(int B, int T, int NH, int NKV, int hd, int heads, const char *what) {
    if (hd % 16) return false;
    if (hd > HDMAX || hd < 16 || NKV < 1 || NH % NKV != 0)
        sharc_fatal(__FILE__, __LINE__,
                    "%s on cuda: head dim %d (the tensor-core kernel takes multiples of 16 up to %d), %d heads over "
                    "%d kv heads",
                    what, hd, HDMAX, NH, NKV);
    if ((int64_t)B * heads > 65535)
        sharc_fatal(__FILE__, __LINE__, "%s on cuda: %lld (batch, head) pairs, at most 65535", what,
                    (long long)B * heads);
    return true;
}

extern "C" void sharc_cuda_attention_forward_bf16(sharc_stream *s, float *out, float *lse, const float *qkv,
                                                  const int32_t *lo, int B, int T, int NH, int NKV, int hd, float *ws) {
    if ((int64_t)B * T <= 0) return;
    if (!tc_shape(B, T, NH, NKV, hd, NH, "attention_forward_bf16")) {
        sharc_cuda_attention_forward(s, out, lse, qkv, lo, B, T, NH, NKV, hd, ws);
        return;
    }
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)hd);
    cudaStream_t cs = sharc_cuda_cs(s);
#define FWD(N) k_fa_fwd<N><<<grid, NWARP * 32, 0, cs>>>(out, lse, qkv, lo, T, NH, NKV, scale)
    SHARC_FA_DISPATCH(hd / 16, FWD)
#undef FWD
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_attention_backward_bf16(sharc_stream *s, float *dqkv, const float *dout, const float *qkv,
                                                   const float *out, const float *lse, const int32_t *lo, int B, int T,
                                                   int NH, int NKV, int hd, float *ws) {
    if ((int64_t)B * T <= 0) return;
    if (!tc_shape(B, T, NH, NKV, hd, NH, "attention_backward_bf16")) {
        sharc_cuda_attention_backward(s, dqkv, dout, qkv, out, lse, lo, B, T, NH, NKV, hd, ws);
        return;
    }
    unsigned tiles = (unsigned)((T + TILE - 1) / TILE);
    float scale = 1.0f / sqrtf((float)hd);
    cudaStream_t cs = sharc_cuda_cs(s);
    dim3 gq(tiles, (unsigned)(B * NH)), gkv(tiles, (unsigned)(B * NKV));
#define DQ(N) k_fa_dq<N><<<gq, NWARP * 32, 0, cs>>>(dqkv, dout, qkv, out, lse, lo, T, NH, NKV, scale)
    SHARC_FA_DISPATCH(hd / 16, DQ)
#undef DQ
    SHARC_CUDA_LAUNCHED();
#define DKV(N) k_fa_dkv<N><<<gkv, NWARP * 32, 0, cs>>>(dqkv, dout, qkv, out, lse, lo, T, NH, NKV, scale)
    SHARC_FA_DISPATCH(hd / 16, DKV)
#undef DKV
    SHARC_CUDA_LAUNCHED();
}
