/* elem.cu: sharc_cuda_{add,cast,round,accumulate,sum_ranks,sumsq,sumsq_multi,loss_add,adamw,adamw_multi,copy_block,
 * fill,init_normal,colsum_add}, the element work of the engine, the optimizer and
 * the collectives on a CUDA device. Each element is computed with the CPU
 * kernel's operations in the same order (src/device/cpu/elem.c, dtype.c);
 * sums over many elements (sumsq, colsum) use a fixed tree order, so results
 * never depend on timing, though they round differently from the CPU's. */
#include "cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define THREADS 256
#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---- 16-bit conversions, bit for bit those of src/core/dtype.c ---- */

__device__ static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
__device__ static inline float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ static inline uint16_t f32_to_f16(float f) {
    uint32_t u = __float_as_uint(f);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) return (uint16_t)(sign | (uint32_t)rintf(__uint_as_float(a) * 16777216.0f));
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
__device__ static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) return __uint_as_float(__float_as_uint((float)mant * (1.0f / 16777216.0f)) | sign);
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
__device__ static inline uint16_t from_f32(float f, int dt) {
    return dt == SHARC_DT_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
}
__device__ static inline float to_f32(uint16_t h, int dt) {
    return dt == SHARC_DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

/* ---- kernels ---- */

__global__ static void __launch_bounds__(THREADS) k_add(float *y, const float *a, const float *b, int64_t n) {
    GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}
__global__ static void __launch_bounds__(THREADS) k_accumulate(float *y, const float *a, int64_t n) {
    GRID_STRIDE(i, n) y[i] += a[i];
}
__global__ static void __launch_bounds__(THREADS) k_to16(uint16_t *dst, const float *src, int dt, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = from_f32(src[i], dt);
}
__global__ static void __launch_bounds__(THREADS) k_from16(float *dst, const uint16_t *src, int dt, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = to_f32(src[i], dt);
}
__global__ static void __launch_bounds__(THREADS) k_round(float *dst, const float *src, int dt, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = to_f32(from_f32(src[i], dt), dt);
}
__global__ static void __launch_bounds__(THREADS) k_fill(float *dst, float v, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = v;
}

extern "C" void sharc_cuda_add(sharc_stream *s, float *y, const float *a, const float *b, int64_t n) {
    if (n <= 0) return;
    k_add<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(y, a, b, n);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_accumulate(sharc_stream *s, float *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    k_accumulate<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(dst, src, n);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_cast(sharc_stream *s, void *dst, sharc_dtype dst_dt, const void *src, sharc_dtype src_dt,
                                int64_t n) {
    if (n <= 0) return;
    cudaStream_t cs = sharc_cuda_cs(s);
    if (src_dt == SHARC_DT_F32 && dst_dt == SHARC_DT_F32) {
        if (dst != src) SHARC_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyDeviceToDevice, cs));
        return;
    }
    if (src_dt == SHARC_DT_F32 && (dst_dt == SHARC_DT_BF16 || dst_dt == SHARC_DT_F16))
        k_to16<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, cs>>>((uint16_t *)dst, (const float *)src, dst_dt, n);
    else if (dst_dt == SHARC_DT_F32 && (src_dt == SHARC_DT_BF16 || src_dt == SHARC_DT_F16))
        k_from16<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, cs>>>((float *)dst, (const uint16_t *)src, src_dt, n);
    else
        sharc_fatal(__FILE__, __LINE__, "cast: %s to %s: one side must be F32 and the other F32, BF16 or F16",
                    sharc_dtype_st_name(src_dt), sharc_dtype_st_name(dst_dt));
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_round(sharc_stream *s, float *dst, const float *src, sharc_dtype dt, int64_t n) {
    if (n <= 0) return;
    if (dt == SHARC_DT_F32) {
        if (dst != src)
            SHARC_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyDeviceToDevice, sharc_cuda_cs(s)));
        return;
    }
    if (dt != SHARC_DT_BF16 && dt != SHARC_DT_F16)
        sharc_fatal(__FILE__, __LINE__, "round: to %s is not supported", sharc_dtype_st_name(dt));
    k_round<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(dst, src, dt, n);
    SHARC_CUDA_LAUNCHED();
}

/* note [rank-order]: the sources' pointers travel by value (sm_70+ takes
 * kernel parameters up to 32 KB, CUDA 12.1+) */
#define MAX_RANKS 1024
struct rank_ptrs {
    const void *p[MAX_RANKS];
};

__global__ static void __launch_bounds__(THREADS)
    k_sum_f32(float *dst, const rank_ptrs src, int S, int64_t n, bool add) {
    GRID_STRIDE(i, n) {
        float acc = ((const float *)src.p[0])[i];
        for (int r = 1; r < S; r++) acc += ((const float *)src.p[r])[i];
        dst[i] = add ? dst[i] + acc : acc;
    }
}
__global__ static void __launch_bounds__(THREADS)
    k_sum_16(uint16_t *dst, const rank_ptrs src, int S, int64_t n, int dt) {
    GRID_STRIDE(i, n) {
        float acc = to_f32(((const uint16_t *)src.p[0])[i], dt);
        for (int r = 1; r < S; r++) acc += to_f32(((const uint16_t *)src.p[r])[i], dt);
        dst[i] = from_f32(acc, dt);
    }
}

extern "C" void sharc_cuda_sum_ranks(sharc_stream *s, void *dst, const void *const *src, int S, int64_t n,
                                     sharc_dtype dt, bool add) {
    if (S < 1 || n <= 0) return;
    bool f32 = dt == SHARC_DT_F32;
    if (!f32 && (add || (dt != SHARC_DT_BF16 && dt != SHARC_DT_F16)))
        sharc_fatal(__FILE__, __LINE__, "sum_ranks: %s%s is not supported", sharc_dtype_st_name(dt),
                    add ? " added to its destination" : "");
    if (S > MAX_RANKS) sharc_fatal(__FILE__, __LINE__, "sum_ranks: %d sources, at most %d on cuda", S, MAX_RANKS);
    rank_ptrs p;
    for (int r = 0; r < S; r++) p.p[r] = src[r];
    cudaStream_t cs = sharc_cuda_cs(s);
    if (f32) k_sum_f32<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, cs>>>((float *)dst, p, S, n, add);
    else k_sum_16<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, cs>>>((uint16_t *)dst, p, S, n, dt);
    SHARC_CUDA_LAUNCHED();
}

/* sumsq: one block of 256 threads per 4096-element block (fp32, a fixed tree),
 * then one block adds the blocks' sums in double, in a fixed tree, to *acc.
 * The block's sum and the tree over the blocks are functions shared with
 * sumsq_multi (note [sumsq-multi]), so both give the same bits. */
__device__ static double block_sumsq(float *sh, const float *x, int64_t lo, int64_t n) {
    float a = 0.0f;
    for (int64_t i = lo + threadIdx.x; i < lo + 4096 && i < n; i += THREADS) a += x[i] * x[i];
    sh[threadIdx.x] = a;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return (double)sh[0];
}
/* the sum of nb doubles by a block of blockDim.x threads, valid in thread 0 */
__device__ static double block_sum_doubles(double *sh, const double *part, int64_t nb) {
    double a = 0.0;
    for (int64_t i = threadIdx.x; i < nb; i += blockDim.x) a += part[i];
    sh[threadIdx.x] = a;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return sh[0];
}
__global__ static void __launch_bounds__(THREADS) k_sumsq_blocks(double *part, const float *x, int64_t n) {
    __shared__ float sh[THREADS];
    double v = block_sumsq(sh, x, (int64_t)blockIdx.x * 4096, n);
    if (threadIdx.x == 0) part[blockIdx.x] = v;
}
__global__ static void __launch_bounds__(1024) k_sum_doubles(double *acc, const double *part, int64_t nb, bool add) {
    __shared__ double sh[1024];
    double v = block_sum_doubles(sh, part, nb);
    if (threadIdx.x == 0) *acc = add ? *acc + v : v;
}

/* *acc (+)= sum of nb doubles of device memory, fixed order (also used by xent.cu) */
extern "C" void sharc_cuda_sum_doubles(sharc_stream *s, double *acc, const double *part, int64_t nb, bool add) {
    k_sum_doubles<<<1, 1024, 0, sharc_cuda_cs(s)>>>(acc, part, nb, add);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_sumsq(sharc_stream *s, double *acc, const float *x, int64_t n) {
    if (n <= 0) return;
    int64_t nb = (n + 4095) / 4096;
    if (nb > 0x7fffffff) sharc_fatal(__FILE__, __LINE__, "sumsq: %lld elements", (long long)n);
    double *part = (double *)sharc_cuda_scratch(s, (size_t)nb * sizeof(double));
    k_sumsq_blocks<<<(unsigned)nb, THREADS, 0, sharc_cuda_cs(s)>>>(part, x, n);
    SHARC_CUDA_LAUNCHED();
    sharc_cuda_sum_doubles(s, acc, part, nb, true);
}

/* Note [sumsq-multi]: every 4096-element block of every entry is one block
 * of the first launch (its entry found by a binary search over the blocks
 * before each), writing its partial where the blocks of all entries lie end
 * to end; the second launch is ONE block of 1024 threads that goes through
 * the entries in order, summing each entry's partials with sumsq's tree and
 * adding the result to acc[which] as sumsq's second kernel does. */
__global__ static void __launch_bounds__(THREADS)
    k_sumsq_multi_blocks(double *part, const sharc_sumsq_seg *segs, int nseg) {
    __shared__ float sh[THREADS];
    int64_t b = blockIdx.x;
    int lo = 0, hi = nseg - 1; /* the last entry whose blk <= b */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (segs[mid].blk <= b) lo = mid;
        else hi = mid - 1;
    }
    const sharc_sumsq_seg &e = segs[lo];
    double v = block_sumsq(sh, e.x, (b - e.blk) * 4096, e.n);
    if (threadIdx.x == 0) part[b] = v;
}
__global__ static void __launch_bounds__(1024)
    k_sumsq_multi_sum(double *acc, const double *part, const sharc_sumsq_seg *segs, int nseg) {
    __shared__ double sh[1024];
    for (int i = 0; i < nseg; i++) {
        const sharc_sumsq_seg &e = segs[i];
        double v = block_sum_doubles(sh, part + e.blk, (e.n + 4095) / 4096);
        if (threadIdx.x == 0) acc[e.which] = acc[e.which] + v;
        __syncthreads(); /* sh[0] read before the next entry writes sh */
    }
}

extern "C" void sharc_cuda_sumsq_multi(sharc_stream *s, double *acc, const sharc_sumsq_seg *segs,
                                       const sharc_sumsq_seg *host, int nseg) {
    if (nseg <= 0) return;
    int64_t nb = host[nseg - 1].blk + (host[nseg - 1].n + 4095) / 4096;
    if (nb > 0x7fffffff) sharc_fatal(__FILE__, __LINE__, "sumsq_multi: %lld blocks", (long long)nb);
    double *part = (double *)sharc_cuda_scratch(s, (size_t)nb * sizeof(double));
    cudaStream_t cs = sharc_cuda_cs(s);
    k_sumsq_multi_blocks<<<(unsigned)nb, THREADS, 0, cs>>>(part, segs, nseg);
    SHARC_CUDA_LAUNCHED();
    k_sumsq_multi_sum<<<1, 1024, 0, cs>>>(acc, part, segs, nseg);
    SHARC_CUDA_LAUNCHED();
}

/* note [loss-on-device]: one thread; __dadd_rn / __dmul_rn are never fused */
__global__ static void __launch_bounds__(1) k_loss_add(double *sums, const double *loss, double add, double weight) {
    double l = __dadd_rn(*loss, add);
    sums[0] = __dadd_rn(sums[0], __dmul_rn(l, weight));
    sums[1] = __dadd_rn(sums[1], l);
}

extern "C" void sharc_cuda_loss_add(sharc_stream *s, double *sums, const double *loss, double add, double weight) {
    k_loss_add<<<1, 1, 0, sharc_cuda_cs(s)>>>(sums, loss, add, weight);
    SHARC_CUDA_LAUNCHED();
}

/* one element of AdamW: k_adamw and k_adamw_multi share it, so their bits agree */
__device__ static inline void adamw_at(float *p, const float *g, float *m, float *v, int64_t i, float decay_mul,
                                       const sharc_adamw_scalars &k) {
    float gi = g[i] * k.grad_scale;
    float pi = p[i] * decay_mul;
    float mi = k.beta1 * m[i] + (1.0f - k.beta1) * gi;
    float vi = k.beta2 * v[i] + (1.0f - k.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - k.step_size * mi / (sqrtf(vi) / k.sqrt_bc2 + k.eps);
}

__global__ static void __launch_bounds__(THREADS)
    k_adamw(float *p, const float *g, float *m, float *v, int64_t n, sharc_adamw_scalars k) {
    GRID_STRIDE(i, n) adamw_at(p, g, m, v, i, k.decay_mul, k);
}

/* Note [adamw-multi] on cuda: a grid-stride loop over the table's elements
 * end to end (`total`); a thread finds the entry of its element by binary
 * search over `first` the first time and whenever its next element lies
 * past the entry it holds (a stride spans many small entries), then the
 * element is that entry's. */
__global__ static void __launch_bounds__(THREADS)
    k_adamw_multi(const sharc_adamw_seg *segs, int nseg, int64_t total, sharc_adamw_scalars k, float decay_mul) {
    int cur = -1;
    int64_t lo = 0, hi = 0;
    GRID_STRIDE(i, total) {
        if (i >= hi) {
            int a = cur + 1, b = nseg - 1; /* the last entry with first <= i */
            while (a < b) {
                int mid = (a + b + 1) / 2;
                if (segs[mid].first <= i) a = mid;
                else b = mid - 1;
            }
            cur = a;
            lo = segs[a].first;
            hi = lo + segs[a].n;
        }
        const sharc_adamw_seg &e = segs[cur];
        adamw_at(e.p, e.g, e.m, e.v, i - lo, e.decay ? decay_mul : 1.0f, k);
    }
}

extern "C" void sharc_cuda_adamw(sharc_stream *s, float *p, const float *g, float *m, float *v, int64_t n,
                                 const sharc_adamw_scalars *k) {
    if (n <= 0) return;
    k_adamw<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(p, g, m, v, n, *k);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_adamw_multi(sharc_stream *s, const sharc_adamw_seg *segs, const sharc_adamw_seg *host,
                                       int nseg, const sharc_adamw_scalars *k, float decay_mul) {
    if (nseg <= 0) return;
    const int64_t total = host[nseg - 1].first + host[nseg - 1].n;
    k_adamw_multi<<<sharc_cuda_blocks(total, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(segs, nseg, total, *k,
                                                                                       decay_mul);
    SHARC_CUDA_LAUNCHED();
}

__global__ static void __launch_bounds__(THREADS)
    k_copy_block(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t cols, int64_t n, bool add) {
    GRID_STRIDE(i, n) {
        int64_t r = i / cols, c = i % cols;
        if (add) dst[r * ldd + c] += src[r * lds + c];
        else dst[r * ldd + c] = src[r * lds + c];
    }
}

extern "C" void sharc_cuda_copy_block(sharc_stream *s, float *dst, int64_t ldd, const float *src, int64_t lds,
                                      int64_t rows, int64_t cols, bool add) {
    if (rows <= 0 || cols <= 0) return;
    k_copy_block<<<sharc_cuda_blocks(rows * cols, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(dst, ldd, src, lds, cols,
                                                                                            rows * cols, add);
    SHARC_CUDA_LAUNCHED();
}

extern "C" void sharc_cuda_fill(sharc_stream *s, float *dst, float value, int64_t n) {
    if (n <= 0) return;
    k_fill<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(dst, value, n);
    SHARC_CUDA_LAUNCHED();
}

/* Philox4x32-10 and the Box-Muller draw of src/core/rng.c, same operations */
__device__ static float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    uint64_t a = ((uint64_t)c0 << 21) ^ (c1 >> 11);
    uint64_t b = ((uint64_t)c2 << 21) ^ (c3 >> 11);
    double u1 = ((double)(a & ((1ull << 53) - 1)) + 1.0) / 9007199254740992.0;
    double u2 = (double)(b & ((1ull << 53) - 1)) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

__global__ static void __launch_bounds__(THREADS)
    k_init_normal(float *dst, int64_t n, float std, uint64_t seed, uint64_t stream, uint64_t first) {
    GRID_STRIDE(i, n) dst[i] = std * rng_normal(seed, stream, first + (uint64_t)i);
}

extern "C" void sharc_cuda_init_normal(sharc_stream *s, float *dst, int64_t n, float std, uint64_t seed,
                                       uint64_t stream, uint64_t first) {
    if (n <= 0) return;
    k_init_normal<<<sharc_cuda_blocks(n, THREADS), THREADS, 0, sharc_cuda_cs(s)>>>(dst, n, std, seed, stream, first);
    SHARC_CUDA_LAUNCHED();
}

/* colsum: rows split into up to 64 slices; a thread per (column, slice) sums
 * its slice in row order into scratch, then a thread per column adds the
 * slices in slice order to out. */
#define COL_SLICES 64
__global__ static void __launch_bounds__(THREADS)
    k_colsum_part(float *part, const float *x, int64_t N, int C, int slices) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, sl = blockIdx.y;
    if (c >= C) return;
    int64_t r0 = N * sl / slices, r1 = N * (sl + 1) / slices;
    float a = 0.0f;
    for (int64_t r = r0; r < r1; r++) a += x[r * C + c];
    part[(int64_t)sl * C + c] = a;
}
__global__ static void __launch_bounds__(THREADS) k_colsum_add(float *out, const float *part, int C, int slices) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float a = 0.0f;
    for (int sl = 0; sl < slices; sl++) a += part[(int64_t)sl * C + c];
    out[c] += a;
}

extern "C" void sharc_cuda_colsum_add(sharc_stream *s, float *out, const float *x, int64_t N, int C) {
    if (N <= 0 || C <= 0) return;
    int slices = N < COL_SLICES ? (int)N : COL_SLICES;
    float *part = (float *)sharc_cuda_scratch(s, (size_t)slices * C * sizeof(float));
    dim3 grid((C + THREADS - 1) / THREADS, slices);
    k_colsum_part<<<grid, THREADS, 0, sharc_cuda_cs(s)>>>(part, x, N, C, slices);
    SHARC_CUDA_LAUNCHED();
    k_colsum_add<<<(C + THREADS - 1) / THREADS, THREADS, 0, sharc_cuda_cs(s)>>>(out, part, C, slices);
    SHARC_CUDA_LAUNCHED();
}
