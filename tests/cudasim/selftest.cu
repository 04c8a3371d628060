/* selftest.cu: the CUDA simulator's own tests (note [cudasim]), built only
 * by the simulator (build/sim/cudasim_selftest) and run by
 * tests/cli/cudasim.sh. `cudasim_selftest values` checks what kernels
 * compute against values worked out by hand: warp shuffles (xor, down, up,
 * broadcast, 16-lane segments), a shared-memory tree reduction that needs
 * its __syncthreads (and is wrong without them, so the simulator does not
 * hide a missing barrier), a 3-d launch's indices, stream order (a copy on
 * one stream sees another stream's kernel only after an event), and the
 * copy checks; the warp matrix functions (note [cudasim-wmma] in cudasim.h):
 * a 16x16x16 bf16 product in both layouts of each operand, with ldm over 16,
 * against the product worked out on the host, an elementwise scale of an
 * accumulator, and kernels that assume an element-to-lane map (row-major by
 * lane, or one shared by matrix_a and the accumulator) getting it wrong.
 * `cudasim_selftest order`: a race on shared memory (a missing barrier)
 * that forward order hides and CUDASIM_ORDER=reverse/shuffle exposes.
 * `over_launch_bounds`: a launch over a kernel's __launch_bounds__;
 * `misaligned_argument`: a double * argument 4 bytes off its alignment.
 * Every other case is a bug the simulator must stop with its message (a
 * host function, cudaLaunchHostFunc, is host code though the stream's queue
 * runs it between kernels):
 * cudasim.sh runs each and checks that it aborts saying so. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;
static void expect(const char *what, bool ok) {
    printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    failed += !ok;
}

__global__ static void k_shuffles(int *out) {
    int l = threadIdx.x;
    int x = l, d = l, b = l * 3;
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    for (int o = 16; o > 0; o /= 2) d += __shfl_down_sync(0xffffffffu, d, o);
    int up = __shfl_up_sync(0xffffffffu, l, 1);
    int bc = __shfl_sync(0xffffffffu, b, 5);
    int seg = l;
    for (int o = 8; o > 0; o /= 2) seg += __shfl_xor_sync(0xffffffffu, seg, o, 16);
    double dv = __shfl_xor_sync(0xffffffffu, (double)l + 0.5, 1);
    out[l * 6 + 0] = x;
    out[l * 6 + 1] = d;
    out[l * 6 + 2] = up;
    out[l * 6 + 3] = bc;
    out[l * 6 + 4] = seg;
    out[l * 6 + 5] = (int)(dv * 2);
}

/* sum of 0 .. 255 by a tree in shared memory, with or without its barriers */
__global__ static void k_tree(int *out, bool barriers) {
    __shared__ int sh[256];
    int t = threadIdx.x;
    sh[t] = t + 256 * (int)blockIdx.x;
    if (barriers) __syncthreads();
    for (int s = 128; s > 0; s /= 2) {
        if (t < s) sh[t] += sh[t + s];
        if (barriers) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = sh[0];
}

/* each thread reads its shared slots before writing them: every block must
 * see the poison (0xFF bytes), never the previous block's writes */
__global__ static void k_poison(int *out, float *fout) {
    __shared__ int si[64];
    __shared__ float sf[64];
    int t = threadIdx.x, i = blockIdx.x * 64 + t;
    out[i] = si[t];
    fout[i] = sf[t];
    __syncthreads();
    si[t] = (int)blockIdx.x + 1;
    sf[t] = 1.0f;
}

/* each thread writes its slot, then reads its left neighbour's (thread t
 * - 1 of its warp; lane 0 reads nothing): sync 0 no barrier between (a
 * race: right only if t - 1 ran first), 1 __syncwarp, 2 __syncthreads */
__global__ static void k_neighbour(int *out, int sync) {
    __shared__ int sh[64];
    int t = threadIdx.x;
    sh[t] = t + 1;
    if (sync == 1) __syncwarp();
    if (sync == 2) __syncthreads();
    out[t] = t % 32 ? sh[t - 1] : t;
}

/* at most 32 threads a block: a launch of 64 fails on a GPU */
__global__ static void __launch_bounds__(32) k_bounded(int *out) { out[threadIdx.x] = 1; }

__global__ static void k_double(double *out) { out[0] = 1.0; }

__global__ static void k_index(int *out) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y,
        z = blockIdx.z * blockDim.z + threadIdx.z;
    int W = gridDim.x * blockDim.x, H = gridDim.y * blockDim.y;
    out[(z * H + y) * W + x] = x + 100 * y + 10000 * z;
}

__global__ static void k_write(float *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) p[i] = 1.0f; /* i == n: one past the end */
}

__global__ static void k_split_sync(int *out) {
    if (threadIdx.x < 16) {
        __syncthreads();
        out[0] = 1;
    } else {
        __syncthreads();
        out[1] = 2;
    }
}

__global__ static void k_shfl_exited(int *out) {
    if (threadIdx.x == 7) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

using namespace nvcuda;

/* wmma: a (16 x 16) and b (16 x 16) bf16, each stored twice (row-major,
 * then column-major) at ldm 24; c float at ldm 20, row-major. out: 4
 * products of 16 x 16 at ldm 16: (a row, b row) stored row-major, (a col,
 * b col) stored column-major, (a row, b col) with c loaded column-major
 * from its transpose ct, and (a col, b row) with the accumulator doubled
 * elementwise. */
__global__ static void k_wmma(float *out, const __nv_bfloat16 *a, const __nv_bfloat16 *b, const float *c,
                              const float *ct) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> ar;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> ac;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> br;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bc;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(ar, a, 24);
    wmma::load_matrix_sync(ac, a + 16 * 24, 24);
    wmma::load_matrix_sync(br, b, 24);
    wmma::load_matrix_sync(bc, b + 16 * 24, 24);
    wmma::load_matrix_sync(acc, c, 20, wmma::mem_row_major);
    wmma::mma_sync(acc, ar, br, acc);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
    wmma::load_matrix_sync(acc, c, 20, wmma::mem_row_major);
    wmma::mma_sync(acc, ac, bc, acc);
    wmma::store_matrix_sync(out + 256, acc, 16, wmma::mem_col_major);
    wmma::load_matrix_sync(acc, ct, 20, wmma::mem_col_major);
    wmma::mma_sync(acc, ar, bc, acc);
    wmma::store_matrix_sync(out + 512, acc, 16, wmma::mem_row_major);
    wmma::fill_fragment(acc, 0.0f);
    wmma::mma_sync(acc, ac, br, acc);
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= 2.0f;
    wmma::store_matrix_sync(out + 768, acc, 16, wmma::mem_row_major);
}

/* wrong on purpose: out[lane * 8 + i] = element i of the lane's accumulator
 * fragment of c (a row-major-by-lane map assumed), and c's elements moved
 * through a matrix_a fragment's slots into an accumulator (a shared map
 * assumed), stored at out + 256 */
__global__ static void k_wmma_assume_map(float *out, const float *c, const __nv_bfloat16 *cb) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    for (int i = 0; i < acc.num_elements; i++) out[threadIdx.x * 8 + i] = acc.x[i];
    wmma::load_matrix_sync(fa, cb, 16);
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] = __bfloat162float(fa.x[i]);
    wmma::store_matrix_sync(out + 256, acc, 16, wmma::mem_row_major);
}

/* planted bugs: half the warp loads another matrix; a misaligned pointer */
__global__ static void k_wmma_divergent(float *p) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, p + (threadIdx.x < 16 ? 0 : 16), 16, wmma::mem_row_major);
    wmma::store_matrix_sync(p, acc, 16, wmma::mem_row_major);
}
__global__ static void k_wmma_misaligned(float *p) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, p + 4, 16, wmma::mem_row_major);
    wmma::store_matrix_sync(p, acc, 16, wmma::mem_row_major);
}

static void wmma_values(void) {
    /* small integers: every product and sum exact in bf16 and fp32 */
    float A[16][16], Bm[16][16], C[16][16], R[16][16];
    __nv_bfloat16 ha[2 * 16 * 24], hb[2 * 16 * 24];
    float hc[16 * 20], hct[16 * 20], cb32[256];
    __nv_bfloat16 cb[256];
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) {
            A[r][k] = (float)((r * 3 + k) % 7 - 3);
            Bm[r][k] = (float)((r * 5 + k * 2) % 9 - 4);
            C[r][k] = (float)(r - 2 * k);
        }
    for (int i = 0; i < 2 * 16 * 24; i++) ha[i] = hb[i] = __float2bfloat16(99.0f); /* padding */
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) {
            ha[r * 24 + k] = __float2bfloat16(A[r][k]);
            ha[16 * 24 + k * 24 + r] = __float2bfloat16(A[r][k]);
            hb[r * 24 + k] = __float2bfloat16(Bm[r][k]);
            hb[16 * 24 + k * 24 + r] = __float2bfloat16(Bm[r][k]);
            hc[r * 20 + k] = C[r][k];
            hct[k * 20 + r] = C[r][k];
        }
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float s = 0;
            for (int k = 0; k < 16; k++) s += A[r][k] * Bm[k][c];
            R[r][c] = s;
            cb32[r * 16 + c] = (float)(r * 16 + c);
            cb[r * 16 + c] = __float2bfloat16((float)(r * 16 + c));
        }
    __nv_bfloat16 *da, *db, *dcb;
    float *dc, *dct, *dout, *dc32, h[1024];
    cudaMalloc((void **)&da, sizeof ha);
    cudaMalloc((void **)&db, sizeof hb);
    cudaMalloc((void **)&dcb, sizeof cb);
    cudaMalloc((void **)&dc, sizeof hc);
    cudaMalloc((void **)&dct, sizeof hct);
    cudaMalloc((void **)&dc32, sizeof cb32);
    cudaMalloc((void **)&dout, sizeof h);
    cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
    cudaMemcpy(dcb, cb, sizeof cb, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, hc, sizeof hc, cudaMemcpyHostToDevice);
    cudaMemcpy(dct, hct, sizeof hct, cudaMemcpyHostToDevice);
    cudaMemcpy(dc32, cb32, sizeof cb32, cudaMemcpyHostToDevice);
    k_wmma<<<1, 32>>>(dout, da, db, dc, dct);
    cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost);
    bool rr = true, cc = true, rc = true, dbl = true;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            rr &= h[r * 16 + c] == R[r][c] + C[r][c];
            cc &= h[256 + c * 16 + r] == R[r][c] + C[r][c];
            rc &= h[512 + r * 16 + c] == R[r][c] + C[r][c];
            dbl &= h[768 + r * 16 + c] == 2 * R[r][c];
        }
    expect("wmma bf16 16x16x16: row-major a and b, ldm 24, c at ldm 20, stored row-major", rr);
    expect("wmma: column-major a and b, stored column-major", cc);
    expect("wmma: row-major a, column-major b, c loaded column-major", rc);
    expect("wmma: fill_fragment, then every accumulator element doubled", dbl);
    k_wmma_assume_map<<<1, 32>>>(dout, dc32, dcb);
    cudaMemcpy(h, dout, 512 * sizeof(float), cudaMemcpyDeviceToHost);
    int same_lane = 0, same_kind = 0;
    for (int i = 0; i < 256; i++) {
        same_lane += h[i] == cb32[i];
        same_kind += h[256 + i] == cb32[i];
    }
    expect("wmma: a kernel assuming a row-major-by-lane fragment map reads the wrong elements", same_lane < 32);
    expect("wmma: a kernel assuming matrix_a and accumulator share a map gets the wrong matrix", same_kind < 32);
    cudaFree(da), cudaFree(db), cudaFree(dcb), cudaFree(dc), cudaFree(dct), cudaFree(dc32), cudaFree(dout);
}

static int *dev_ints(int n) {
    int *p;
    if (cudaMalloc((void **)&p, n * sizeof(int)) != cudaSuccess) abort();
    return p;
}

static void values(void) {
    int *d = dev_ints(32 * 6), h[32 * 6];
    k_shuffles<<<1, 32>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    bool xr = true, dn = true, up = true, bc = true, sg = true, db = true;
    for (int l = 0; l < 32; l++) {
        xr &= h[l * 6] == 496;
        up &= h[l * 6 + 2] == (l == 0 ? 0 : l - 1);
        bc &= h[l * 6 + 3] == 15;
        sg &= h[l * 6 + 4] == (l < 16 ? 120 : 376);
        db &= h[l * 6 + 5] == 2 * (l ^ 1) + 1;
    }
    dn = h[1] == 496; /* lane 0 of a down-reduction holds the sum */
    expect("shuffle xor: every lane holds 0 + .. + 31", xr);
    expect("shuffle down: lane 0 holds the sum", dn);
    expect("shuffle up by 1: lane 0 keeps its own value", up);
    expect("shuffle from lane 5", bc);
    expect("shuffle xor in 16-lane segments", sg);
    expect("shuffle of a double", db);
    cudaFree(d);

    int *t = dev_ints(3), ht[3];
    k_tree<<<3, 256>>>(t, true);
    cudaMemcpy(ht, t, sizeof ht, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int b = 0; b < 3; b++) ok &= ht[b] == 32640 + 256 * 256 * b;
    expect("shared-memory tree reduction with __syncthreads", ok);
    k_tree<<<3, 256>>>(t, false);
    cudaMemcpy(ht, t, sizeof ht, cudaMemcpyDeviceToHost);
    expect("the same reduction without its barriers is wrong", ht[0] != 32640);

    float *pf, hf[3 * 64];
    int hp[3 * 64];
    int *pi = dev_ints(3 * 64);
    if (cudaMalloc((void **)&pf, sizeof hf) != cudaSuccess) abort();
    k_poison<<<3, 64>>>(pi, pf);
    cudaMemcpy(hp, pi, sizeof hp, cudaMemcpyDeviceToHost);
    cudaMemcpy(hf, pf, sizeof hf, cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < 3 * 64; i++) ok &= hp[i] == -1 && isnan(hf[i]);
    expect("shared memory read before written holds poison in every block (-1 ints, NaN floats)", ok);
    k_tree<<<3, 256>>>(t, true);
    cudaMemcpy(ht, t, sizeof ht, cudaMemcpyDeviceToHost);
    ok = true;
    for (int b = 0; b < 3; b++) ok &= ht[b] == 32640 + 256 * 256 * b;
    expect("a kernel that writes shared memory first is unaffected by the poison", ok);
    cudaFree(pi);
    cudaFree(pf);
    cudaFree(t);

    int W = 2 * 4, H = 3 * 2, D = 2 * 2, n = W * H * D;
    int *ix = dev_ints(n), *hx = (int *)malloc(n * sizeof(int));
    k_index<<<dim3(2, 3, 2), dim3(4, 2, 2)>>>(ix);
    cudaMemcpy(hx, ix, n * sizeof(int), cudaMemcpyDeviceToHost);
    ok = true;
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) ok &= hx[(z * H + y) * W + x] == x + 100 * y + 10000 * z;
    expect("3-d grid and block indices", ok);
    cudaFree(ix);
    free(hx);

    /* streams: a copy on stream 2 of what stream 1 writes sees it only
     * after an event; without one it reads what was there before */
    cudaStream_t s1, s2;
    cudaEvent_t ev;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    int *src = dev_ints(64), *dst = dev_ints(64), hs[64];
    cudaMemset(src, 0, 64 * sizeof(int));
    for (int pass = 0; pass < 2; pass++) {
        cudaMemsetAsync(dst, 0, 64 * sizeof(int), s2);
        k_index<<<1, 64, 0, s1>>>(src);
        if (pass == 1) {
            cudaEventRecord(ev, s1);
            cudaStreamWaitEvent(s2, ev, 0);
        }
        cudaMemcpyAsync(dst, src, 64 * sizeof(int), cudaMemcpyDeviceToDevice, s2);
        cudaStreamSynchronize(s2);
        cudaMemcpy(hs, dst, sizeof hs, cudaMemcpyDeviceToHost);
        if (pass == 0) expect("without an event, stream 2 does not see stream 1's kernel", hs[5] == 0);
        else expect("after an event, stream 2 sees stream 1's kernel", hs[5] == 5 && hs[63] == 63);
        cudaDeviceSynchronize();
        cudaMemset(src, 0, 64 * sizeof(int));
    }
    /* cudaEventQuery polls: reached iff the record ran, nothing drained; a
     * not-ready answer is left as the last error, as the runtime does */
    expect("an event's query after its record ran: reached", cudaEventQuery(ev) == cudaSuccess);
    (void)cudaGetLastError();
    k_index<<<1, 64, 0, s1>>>(src);
    cudaEventRecord(ev, s1);
    bool notready = cudaEventQuery(ev) == cudaErrorNotReady;
    notready &= cudaGetLastError() == cudaErrorNotReady && cudaEventQuery(ev) == cudaErrorNotReady;
    expect("an event's query before its stream ran: not ready (and the last error), nothing drained", notready);
    cudaEventSynchronize(ev);
    expect("an event's query after its synchronize: reached", cudaEventQuery(ev) == cudaSuccess);
    (void)cudaGetLastError();
    cudaFree(src);
    cudaFree(dst);
    cudaEventDestroy(ev);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);

    int host[4] = {0};
    int *dd = dev_ints(4);
    expect("a host-to-device copy into host memory is refused",
           cudaMemcpy(host, host + 2, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    expect("a copy past the end of an allocation is refused",
           cudaMemcpy(dd, host, 5 * sizeof(int), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    cudaFree(dd);
}

/* `cudasim_selftest order`: the neighbour kernel with each barrier (always
 * right: PASS lines) and without one (its result printed, "right" or
 * "wrong": tests/cli/cudasim.sh wants right in forward order and wrong in
 * reverse and shuffle order, CUDASIM_ORDER, so the order knob is proven to
 * expose a missing barrier) */
static int order_case(void) {
    int *d = dev_ints(64), h[64];
    bool right[3];
    for (int sync = 0; sync < 3; sync++) {
        cudaMemset(d, 0, sizeof h);
        k_neighbour<<<1, 64>>>(d, sync);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        right[sync] = true;
        for (int t = 0; t < 64; t++) right[sync] &= h[t] == t;
    }
    expect("a lane reads its neighbour's shared write after __syncwarp", right[1]);
    expect("a thread reads its neighbour's shared write after __syncthreads", right[2]);
    printf("without a barrier: %s\n", right[0] ? "right" : "wrong");
    cudaFree(d);
    return failed ? 1 : 0;
}

static void host_reads(void *p) { printf("%d\n", ((int *)p)[3]); }

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "values";
    if (!strcmp(c, "values")) {
        values();
        wmma_values();
        printf("%d failed\n", failed);
        return failed ? 1 : 0;
    }
    if (!strcmp(c, "order")) return order_case();
    int *d = dev_ints(64);
    if (!strcmp(c, "host_reads_device")) printf("%d\n", d[3]);
    if (!strcmp(c, "host_pointer_argument")) {
        int *h = (int *)malloc(64);
        k_split_sync<<<1, 32>>>(h);
    }
    if (!strcmp(c, "out_of_bounds")) k_write<<<1, 128>>>((float *)d, 64);
    if (!strcmp(c, "over_launch_bounds")) {
        k_bounded<<<1, 32>>>(d); /* within its bound: runs */
        cudaDeviceSynchronize();
        k_bounded<<<1, 64>>>(d);
    }
    if (!strcmp(c, "misaligned_argument")) {
        k_double<<<1, 1>>>((double *)(d + 2)); /* 8 bytes in: aligned, runs */
        cudaDeviceSynchronize();
        k_double<<<1, 1>>>((double *)(d + 1)); /* 4 bytes in */
    }
    if (!strcmp(c, "split_barrier")) k_split_sync<<<1, 32>>>(d);
    if (!strcmp(c, "shuffle_with_exited_lane")) k_shfl_exited<<<1, 32>>>(d);
    if (!strcmp(c, "wmma_divergent")) k_wmma_divergent<<<1, 32>>>((float *)dev_ints(512));
    if (!strcmp(c, "wmma_misaligned")) k_wmma_misaligned<<<1, 32>>>((float *)dev_ints(512));
    if (!strcmp(c, "host_func_reads_device")) { /* runs while the queue drains, kernels before and after it */
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        k_write<<<1, 1, 0, s>>>((float *)d, 4);
        cudaLaunchHostFunc(s, host_reads, d);
        k_write<<<1, 1, 0, s>>>((float *)d, 4);
        cudaStreamSynchronize(s);
    }
    if (!strcmp(c, "double_free")) {
        cudaFree(d);
        cudaFree(d);
    }
    if (!strcmp(c, "use_after_free")) {
        cudaFree(d);
        k_write<<<1, 1>>>((float *)d, 4);
    }
    cudaDeviceSynchronize(); /* queued work runs */
    printf("case %s: not stopped\n", c);
    return 0;
}
