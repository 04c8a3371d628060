/* tests/gpu/kernels.c (build/gpu_kernels): the CUDA backend against the CPU
 * backend. Every slot of the CUDA kernel table runs on fresh random inputs at
 * odd sizes, with its outputs poisoned (NaN) first so that an element it does
 * not write fails; the result must match the CPU kernel within 1e-5 relative
 * (norm of the difference over norm of the reference) in fp32, 1e-2 for bf16
 * products, 2e-2 for the bf16 (tensor-core) attention, which must also match
 * a host emulation of its bf16 arithmetic closely; 16-bit casts must match
 * bit for bit. Then memory, copies, memset,
 * streams and events. Prints one PASS/FAIL line per check and
 * "N passed, N failed"; exit 0 when all pass, 1 otherwise, 77 when this
 * machine has no usable GPU (the reason is printed). tests/gpu/run.sh runs it. */
#include "sharc/blas.h"
#include "sharc/device.h"
#include "sharc/kernels.h"
#include "sharc/rng.h"
#include "sharc/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* src/device/cuda/cuda.h (C++ header): the cuBLASLt GEMM, for the bf16 path */
void sharc_cuda_gemm(sharc_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *A, int lda,
                     const void *B, int ldb, float beta, float *C, int ldc, sharc_dtype ab);
bool sharc_cuda_gemm_gelu(sharc_stream *s, bool gelu_fwd, bool ta, bool tb, int m, int n, int k, const void *A, int lda,
                          const void *B, int ldb, float *C, int ldc, sharc_dtype ab, const float *bias, float *aux,
                          int ldaux);

static sharc_device *cpu, *gpu;
static const sharc_kernels *kc, *kg;
static sharc_stream *sc, *sg;
static int passed, failed;
static uint64_t seed_next = 1000;

static void die(const char *what) {
    fprintf(stderr, "gpu_kernels: %s: %s\n", what, sharc_last_error());
    exit(1);
}

static float *h_rand(int64_t n, float scale) {
    float *h = malloc((size_t)(n ? n : 1) * sizeof(float));
    uint64_t seed = seed_next++;
    for (int64_t i = 0; i < n; i++) h[i] = scale * sharc_rng_normal(seed, 7, (uint64_t)i);
    return h;
}

static float *h_copy(const float *src, int64_t n) {
    float *h = malloc((size_t)(n ? n : 1) * sizeof(float));
    memcpy(h, src, (size_t)n * sizeof(float));
    return h;
}

static void *d_up(const void *h, size_t bytes) {
    void *d = sharc_device_alloc(gpu, bytes ? bytes : 4, SHARC_MEM_OTHER);
    if (!d) die("alloc");
    if (sharc_device_copy(gpu, d, h, bytes, SHARC_COPY_HOST_TO_DEVICE, sg) != SHARC_OK) die("copy in");
    return d;
}

/* n floats of NaN on the GPU: an output a kernel must write */
static float *d_poison(int64_t n) {
    float *h = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = NAN;
    float *d = d_up(h, (size_t)n * sizeof(float));
    free(h);
    return d;
}

static float *down(const void *d, int64_t n) {
    float *h = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (sharc_device_copy(gpu, h, d, (size_t)n * sizeof(float), SHARC_COPY_DEVICE_TO_HOST, sg) != SHARC_OK ||
        sharc_device_synchronize(sg) != SHARC_OK)
        die("copy out");
    return h;
}

static void result(const char *name, bool ok, const char *detail) {
    if (ok) passed++;
    else failed++;
    printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
    fflush(stdout);
}

/* ||got - ref|| / ||ref||; any non-finite got fails */
static void compare(const char *name, const float *got, const float *ref, int64_t n, double tol) {
    double dd = 0, rr = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && bad < 0) bad = i;
        double d = (double)got[i] - (double)ref[i];
        dd += d * d;
        rr += (double)ref[i] * ref[i];
    }
    char msg[200];
    if (bad >= 0) {
        snprintf(msg, sizeof msg, "element %lld is %g (unwritten or not finite), CPU %g", (long long)bad,
                 (double)got[bad], (double)ref[bad]);
        result(name, false, msg);
        return;
    }
    double rel = sqrt(dd) / (rr > 0 ? sqrt(rr) : 1.0);
    snprintf(msg, sizeof msg, "rel %.3g (tol %.0e, n %lld)", rel, tol, (long long)n);
    result(name, rel <= tol, msg);
}

/* compare a GPU array with a host reference, then free both */
static void check(const char *name, void *d, float *ref, int64_t n, double tol) {
    float *h = down(d, n);
    compare(name, h, ref, n, tol);
    free(h);
    sharc_device_free(gpu, d);
    free(ref);
}

static void check_double(const char *name, double *d, double ref, double tol) {
    double got;
    if (sharc_device_copy(gpu, &got, d, sizeof got, SHARC_COPY_DEVICE_TO_HOST, sg) != SHARC_OK ||
        sharc_device_synchronize(sg) != SHARC_OK)
        die("copy out");
    char msg[200];
    double rel = fabs(got - ref) / (fabs(ref) > 0 ? fabs(ref) : 1.0);
    snprintf(msg, sizeof msg, "%.9g vs CPU %.9g, rel %.3g", got, ref, rel);
    result(name, isfinite(got) && rel <= tol, msg);
    sharc_device_free(gpu, d);
}

#define F32 1e-5

static void test_elem(void) {
    int64_t n = 100003;
    float *a = h_rand(n, 1), *b = h_rand(n, 1), *ref = malloc(n * 4);
    float *da = d_up(a, n * 4), *db = d_up(b, n * 4), *dy = d_poison(n);
    kc->add(sc, ref, a, b, n);
    kg->add(sg, dy, da, db, n);
    check("add", dy, h_copy(ref, n), n, 0);
    kc->accumulate(sc, a, b, n);
    kg->accumulate(sg, da, db, n);
    check("accumulate", da, h_copy(a, n), n, 0);
    /* casts and rounding: bit for bit */
    for (int k = 0; k < 2; k++) {
        sharc_dtype dt = k ? SHARC_DT_F16 : SHARC_DT_BF16;
        uint16_t *h16 = malloc(n * 2), *g16 = malloc(n * 2);
        void *d16 = d_up(h16, n * 2);
        float *d32 = d_up(b, n * 4); /* holds b (poison next) */
        kc->cast(sc, h16, dt, b, SHARC_DT_F32, n);
        kg->cast(sg, d16, dt, d32, SHARC_DT_F32, n);
        sharc_device_copy(gpu, g16, d16, n * 2, SHARC_COPY_DEVICE_TO_HOST, sg);
        sharc_device_synchronize(sg);
        result(k ? "cast f32->f16" : "cast f32->bf16", memcmp(h16, g16, n * 2) == 0, "");
        float *back = malloc(n * 4), *dback = d_poison(n);
        kc->cast(sc, back, SHARC_DT_F32, h16, dt, n);
        kg->cast(sg, dback, SHARC_DT_F32, d16, dt, n);
        check(k ? "cast f16->f32" : "cast bf16->f32", dback, back, n, 0);
        float *r = malloc(n * 4), *dr = d_poison(n);
        kc->round(sc, r, b, dt, n);
        kg->round(sg, dr, d32, dt, n);
        check(k ? "round f16" : "round bf16", dr, r, n, 0);
        sharc_device_free(gpu, d16);
        sharc_device_free(gpu, d32);
        free(h16);
        free(g16);
    }
    /* sum_ranks: 3 sources, fp32 written and added, bf16 */
    {
        int S = 3;
        float *h[3], *d[3];
        for (int r = 0; r < S; r++) {
            h[r] = h_rand(n, 1);
            d[r] = d_up(h[r], n * 4);
        }
        const void *hs[3] = {h[0], h[1], h[2]}, *ds[3] = {d[0], d[1], d[2]};
        float *o = malloc(n * 4), *dout = d_poison(n);
        kc->sum_ranks(sc, o, hs, S, n, SHARC_DT_F32, false);
        kg->sum_ranks(sg, dout, ds, S, n, SHARC_DT_F32, false);
        check("sum_ranks f32", dout, o, n, 0);
        float *o2 = h_rand(n, 1), *dout2 = d_up(o2, n * 4);
        kc->sum_ranks(sc, o2, hs, S, n, SHARC_DT_F32, true);
        kg->sum_ranks(sg, dout2, ds, S, n, SHARC_DT_F32, true);
        check("sum_ranks f32 add", dout2, o2, n, 0);
        uint16_t *h16[3], *g = malloc(n * 2), *o16 = malloc(n * 2);
        void *d16[3];
        for (int r = 0; r < S; r++) {
            h16[r] = malloc(n * 2);
            kc->cast(sc, h16[r], SHARC_DT_BF16, h[r], SHARC_DT_F32, n);
            d16[r] = d_up(h16[r], n * 2);
        }
        const void *hs16[3] = {h16[0], h16[1], h16[2]}, *ds16[3] = {d16[0], d16[1], d16[2]};
        void *dout16 = d_up(o16, n * 2);
        kc->sum_ranks(sc, o16, hs16, S, n, SHARC_DT_BF16, false);
        kg->sum_ranks(sg, dout16, ds16, S, n, SHARC_DT_BF16, false);
        sharc_device_copy(gpu, g, dout16, n * 2, SHARC_COPY_DEVICE_TO_HOST, sg);
        sharc_device_synchronize(sg);
        result("sum_ranks bf16", memcmp(g, o16, n * 2) == 0, "");
        for (int r = 0; r < S; r++) {
            sharc_device_free(gpu, d[r]);
            sharc_device_free(gpu, d16[r]);
            free(h[r]);
            free(h16[r]);
        }
        sharc_device_free(gpu, dout16);
        free(g);
        free(o16);
    }
    /* sumsq into a scalar that already holds a value */
    {
        double acc = 1.5;
        double *dacc = d_up(&acc, sizeof acc);
        kc->sumsq(sc, &acc, b, n);
        kg->sumsq(sg, dacc, db, n);
        check_double("sumsq", dacc, acc, F32);
    }
    /* loss_add (note [loss-on-device]): bit-identical to the CPU's, whose
     * products would round differently if fused; twice, into sums that
     * already hold values, with a weight that is not a power of 2 */
    {
        double sums[2] = {0.25, -1.5}, loss = 3.0 / 7.0, hl = 0;
        double *dsums = d_up(sums, sizeof sums), *dloss = d_up(&loss, sizeof loss);
        for (int r = 0; r < 2; r++) {
            kc->loss_add(sc, sums, &loss, 1.0 / 3.0, 0.1 + r);
            kg->loss_add(sg, dsums, dloss, 1.0 / 3.0, 0.1 + r);
        }
        double got[2];
        if (sharc_device_copy(gpu, got, dsums, sizeof got, SHARC_COPY_DEVICE_TO_HOST, sg) != SHARC_OK ||
            sharc_device_synchronize(sg) != SHARC_OK)
            die("copy out");
        hl = (loss + 1.0 / 3.0) * 0.1 + (loss + 1.0 / 3.0) * 1.1; /* sanity: the sums moved */
        char msg[200];
        snprintf(msg, sizeof msg, "%.17g %.17g vs CPU %.17g %.17g", got[0], got[1], sums[0], sums[1]);
        result("loss_add (bits)", got[0] == sums[0] && got[1] == sums[1] && fabs(sums[0] - 0.25 - hl) < 1e-12, msg);
        sharc_device_free(gpu, dsums);
        sharc_device_free(gpu, dloss);
    }
    /* adamw */
    {
        float *p = h_rand(n, 1), *g = h_rand(n, 0.1f), *m = h_rand(n, 0.01f), *v = h_rand(n, 0.001f);
        for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
        float *dp = d_up(p, n * 4), *dg = d_up(g, n * 4), *dm = d_up(m, n * 4), *dv = d_up(v, n * 4);
        sharc_adamw_scalars k = {.decay_mul = 0.999f,
                                 .beta1 = 0.9f,
                                 .beta2 = 0.95f,
                                 .step_size = 1e-3f,
                                 .sqrt_bc2 = 0.3f,
                                 .eps = 1e-8f,
                                 .grad_scale = 0.7f};
        kc->adamw(sc, p, g, m, v, n, &k);
        kg->adamw(sg, dp, dg, dm, dv, n, &k);
        check("adamw p", dp, p, n, F32);
        check("adamw m", dm, m, n, F32);
        check("adamw v", dv, v, n, F32);
        sharc_device_free(gpu, dg);
        free(g);
    }
    {
        float *f = malloc(n * 4), *df = d_poison(n);
        kc->fill(sc, f, 0.25f, n);
        kg->fill(sg, df, 0.25f, n);
        check("fill", df, f, n, 0);
        float *r = malloc(n * 4), *dr = d_poison(n);
        kc->init_normal(sc, r, n, 0.02f, 42, 0x1234567890ull, 1ull << 33);
        kg->init_normal(sg, dr, n, 0.02f, 42, 0x1234567890ull, 1ull << 33);
        check("init_normal", dr, r, n, 1e-6);
    }
    sharc_device_free(gpu, db);
    free(a);
    free(b);
    free(ref);
}

static void test_matmul(void) {
    int64_t N = 37;
    int IC = 67, OC = 45;
    float *x = h_rand(N * IC, 1), *w = h_rand((int64_t)OC * IC, 0.2f), *b = h_rand(OC + 1, 1);
    float *dx_ = d_up(x, N * IC * 4), *dw_ = d_up(w, OC * IC * 4), *db_ = d_up(b, (OC + 1) * 4);
    /* bias 1: an aligned bias, added in cuBLASLt's epilogue; 2: a bias 4
     * bytes past an aligned address, added by a kernel (note [gemm-bias]) */
    const char *name[] = {"matmul_forward", "matmul_forward bias", "matmul_forward bias (unaligned)"};
    for (int bias = 0; bias < 3; bias++) {
        float *y = malloc(N * OC * 4), *dy = d_poison(N * OC);
        kc->matmul_forward(sc, y, x, w, bias ? b + bias - 1 : NULL, N, IC, OC);
        kg->matmul_forward(sg, dy, dx_, dw_, bias ? db_ + bias - 1 : NULL, N, IC, OC);
        check(name[bias], dy, y, N * OC, F32);
    }
    float *g = h_rand(N * OC, 1), *dg = d_up(g, N * OC * 4);
    float *gx = malloc(N * IC * 4), *gw = h_rand((int64_t)OC * IC, 1), *gb = h_rand(OC, 1);
    float *dgx = d_poison(N * IC), *dgw = d_up(gw, OC * IC * 4), *dgb = d_up(gb, OC * 4);
    kc->matmul_backward(sc, gx, gw, gb, g, x, w, N, IC, OC);
    kg->matmul_backward(sg, dgx, dgw, dgb, dg, dx_, dw_, N, IC, OC);
    check("matmul_backward dx", dgx, gx, N * IC, F32);
    check("matmul_backward dw (+=)", dgw, gw, (int64_t)OC * IC, F32);
    check("matmul_backward db (+=)", dgb, gb, OC, F32);
    /* bf16 inputs, fp32 accumulation, against the CPU's fp32 product */
    {
        uint16_t *xb = malloc(N * IC * 2), *wb = malloc(OC * IC * 2);
        kc->cast(sc, xb, SHARC_DT_BF16, x, SHARC_DT_F32, N * IC);
        kc->cast(sc, wb, SHARC_DT_BF16, w, SHARC_DT_F32, (int64_t)OC * IC);
        void *dxb = d_up(xb, N * IC * 2), *dwb = d_up(wb, OC * IC * 2);
        float *y = malloc(N * OC * 4), *dy = d_poison(N * OC);
        kc->matmul_forward(sc, y, x, w, NULL, N, IC, OC);
        sharc_cuda_gemm(sg, true, false, OC, (int)N, IC, 1.0f, dwb, IC, dxb, IC, 0.0f, dy, OC, SHARC_DT_BF16);
        check("gemm bf16 (fp32 accumulation)", dy, y, N * OC, 1e-2);
        sharc_device_free(gpu, dxb);
        sharc_device_free(gpu, dwb);
        free(xb);
        free(wb);
    }
    sharc_device_free(gpu, dx_);
    sharc_device_free(gpu, dw_);
    sharc_device_free(gpu, db_);
    sharc_device_free(gpu, dg);
    free(x);
    free(w);
    free(b);
    free(g);
}

static void test_norms(void) {
    int64_t N = 29;
    int C = 75;
    float *x = h_rand(N * C, 2), *w = h_rand(C, 1), *b = h_rand(C, 1), *g = h_rand(N * C, 1), *res = h_rand(N * C, 1);
    float *dxx = d_up(x, N * C * 4), *dw = d_up(w, C * 4), *db = d_up(b, C * 4), *dg = d_up(g, N * C * 4),
          *dres = d_up(res, N * C * 4);
    float *y = malloc(N * C * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    float *gy = d_poison(N * C), *gmean = d_poison(N), *grstd = d_poison(N);
    kc->layernorm_forward(sc, y, mean, rstd, x, w, b, N, C, 1e-5f);
    kg->layernorm_forward(sg, gy, gmean, grstd, dxx, dw, db, N, C, 1e-5f);
    check("layernorm_forward y", gy, h_copy(y, N * C), N * C, F32);
    float *hm = down(gmean, N), *hr = down(grstd, N);
    compare("layernorm_forward mean", hm, mean, N, F32);
    compare("layernorm_forward rstd", hr, rstd, N, F32);
    free(hm);
    free(hr);
    {
        float *dx = malloc(N * C * 4), *dwg = h_rand(C, 1), *dbg = h_rand(C, 1);
        float *gdx = d_poison(N * C), *gdw = d_up(dwg, C * 4), *gdb = d_up(dbg, C * 4);
        kc->layernorm_backward(sc, dx, dwg, dbg, g, res, x, w, mean, rstd, N, C);
        kg->layernorm_backward(sg, gdx, gdw, gdb, dg, dres, dxx, dw, gmean, grstd, N, C);
        check("layernorm_backward dx (+dres)", gdx, dx, N * C, F32);
        check("layernorm_backward dw", gdw, dwg, C, F32);
        check("layernorm_backward db", gdb, dbg, C, F32);
    }
    kc->rmsnorm_forward(sc, y, rstd, x, w, N, C, 1e-6f);
    float *gy2 = d_poison(N * C);
    kg->rmsnorm_forward(sg, gy2, grstd, dxx, dw, N, C, 1e-6f);
    check("rmsnorm_forward y", gy2, h_copy(y, N * C), N * C, F32);
    {
        float *dx = malloc(N * C * 4), *dwg = h_rand(C, 1), *gdx = d_poison(N * C), *gdw = d_up(dwg, C * 4);
        kc->rmsnorm_backward(sc, dx, dwg, g, NULL, x, w, rstd, N, C);
        kg->rmsnorm_backward(sg, gdx, gdw, dg, NULL, dxx, dw, grstd, N, C);
        check("rmsnorm_backward dx", gdx, dx, N * C, F32);
        check("rmsnorm_backward dw", gdw, dwg, C, F32);
    }
    sharc_device_free(gpu, gmean);
    sharc_device_free(gpu, grstd);
    sharc_device_free(gpu, dxx);
    sharc_device_free(gpu, dw);
    sharc_device_free(gpu, db);
    sharc_device_free(gpu, dg);
    sharc_device_free(gpu, dres);
    free(x), free(w), free(b), free(g), free(res), free(y), free(mean), free(rstd);
}

/* GPU arrays compared for identical bits */
static void check_bits(const char *name, const void *d, const void *dref, int64_t n) {
    float *h = down(d, n), *r = down(dref, n);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (memcmp(&h[i], &r[i], sizeof(float)) != 0) bad = i;
    char msg[160] = "";
    if (bad >= 0) snprintf(msg, sizeof msg, "element %lld: %.9g, unfused %.9g", (long long)bad, h[bad], r[bad]);
    result(name, bad < 0, msg);
    free(h);
    free(r);
}

/* The fused slots (notes [adamw-multi], [add-norm]): adamw_multi over a
 * table of odd-length segments of two tensors, one region in no entry (a
 * frozen parameter, padding), decay on some, bit for bit the cuda adamw
 * per segment and within 1e-5 of the CPU's; add_layernorm_forward (bias,
 * none) and add_rmsnorm_forward into poisoned outputs, bit for bit the
 * cuda add then norm and within 1e-5 of the CPU's. */
static void test_fused(void) {
    const int64_t n = 2477; /* per tensor */
    const int64_t lay[][4] = {{0, 0, 1, 1},   {0, 1, 1000, 0}, {0, 1001, 3, 1},        {0, 1004, 517, 1},
                              {1, 7, 999, 0}, {1, 1006, 5, 1}, {1, 1011, n - 1011, 1}, {0, 1521, 700, 0}};
    /* tensor 0's [2221, n) and tensor 1's [0, 7) are in no entry: the bits of adamw per segment say untouched */
    const int nseg = (int)(sizeof lay / sizeof lay[0]);
    sharc_adamw_scalars k = {.decay_mul = 0.5f,
                             .beta1 = 0.9f,
                             .beta2 = 0.95f,
                             .step_size = 1e-3f,
                             .sqrt_bc2 = 0.3f,
                             .eps = 1e-8f,
                             .grad_scale = 0.7f};
    const float decay_mul = 0.999f;
    float *h[4][2];    /* p, g, m, v of each tensor on the host (the CPU's run) */
    float *d[4][2];    /* the same on the GPU, updated by adamw_multi */
    float *dref[4][2]; /* and by adamw per segment */
    for (int t = 0; t < 2; t++) {
        for (int a = 0; a < 4; a++) {
            h[a][t] = h_rand(n, a == 0 ? 1.0f : a == 1 ? 0.1f : a == 2 ? 0.01f : 0.001f);
            if (a == 3)
                for (int64_t i = 0; i < n; i++) h[a][t][i] = fabsf(h[a][t][i]);
            d[a][t] = d_up(h[a][t], n * 4);
            dref[a][t] = d_up(h[a][t], n * 4);
        }
    }
    sharc_adamw_seg ht[8], hc[8]; /* the GPU's table (host copy), the CPU's */
    int64_t first = 0;
    for (int i = 0; i < nseg; i++) {
        const int t = (int)lay[i][0];
        const int64_t o = lay[i][1], len = lay[i][2];
        ht[i] = (sharc_adamw_seg){.p = d[0][t] + o,
                                  .g = d[1][t] + o,
                                  .m = d[2][t] + o,
                                  .v = d[3][t] + o,
                                  .n = len,
                                  .first = first,
                                  .decay = (int32_t)lay[i][3]};
        hc[i] = (sharc_adamw_seg){.p = h[0][t] + o,
                                  .g = h[1][t] + o,
                                  .m = h[2][t] + o,
                                  .v = h[3][t] + o,
                                  .n = len,
                                  .first = first,
                                  .decay = (int32_t)lay[i][3]};
        first += len;
        sharc_adamw_scalars e = k;
        e.decay_mul = lay[i][3] ? decay_mul : 1.0f;
        kg->adamw(sg, dref[0][t] + o, dref[1][t] + o, dref[2][t] + o, dref[3][t] + o, len, &e);
    }
    sharc_adamw_seg *dt = d_up(ht, sizeof ht);
    kg->adamw_multi(sg, dt, ht, nseg, &k, decay_mul);
    kc->adamw_multi(sc, hc, hc, nseg, &k, decay_mul);
    const char *what[] = {"p", "g", "m", "v"};
    for (int t = 0; t < 2; t++)
        for (int a = 0; a < 4; a++) {
            char name[64];
            snprintf(name, sizeof name, "adamw_multi %s[%d] (bits of adamw per segment)", what[a], t);
            check_bits(name, d[a][t], dref[a][t], n);
            snprintf(name, sizeof name, "adamw_multi %s[%d]", what[a], t);
            check(name, d[a][t], h[a][t], n, F32); /* frees both */
            sharc_device_free(gpu, dref[a][t]);
        }
    sharc_device_free(gpu, dt);

    const int64_t N = 29;
    const int C = 75;
    float *x = h_rand(N * C, 2), *r = h_rand(N * C, 1), *w = h_rand(C, 1), *b = h_rand(C, 1);
    float *dx = d_up(x, N * C * 4), *dr = d_up(r, N * C * 4), *dw = d_up(w, C * 4), *db = d_up(b, C * 4);
    for (int fam = 0; fam < 3; fam++) { /* layernorm with a bias, without, rmsnorm */
        const char *nm = fam == 0   ? "add_layernorm_forward"
                         : fam == 1 ? "add_layernorm_forward (no bias)"
                                    : "add_rmsnorm_forward";
        const float *bias = fam == 0 ? b : NULL, *dbias = fam == 0 ? db : NULL;
        float *sum = malloc(N * C * 4), *y = malloc(N * C * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
        float *gs = d_poison(N * C), *gy = d_poison(N * C), *gm = d_poison(N), *gr = d_poison(N);
        float *us = d_poison(N * C), *uy = d_poison(N * C), *um = d_poison(N), *ur = d_poison(N);
        if (fam < 2) {
            kc->add_layernorm_forward(sc, sum, y, mean, rstd, x, r, w, bias, N, C, 1e-5f);
            kg->add_layernorm_forward(sg, gs, gy, gm, gr, dx, dr, dw, dbias, N, C, 1e-5f);
            kg->add(sg, us, dx, dr, N * C);
            kg->layernorm_forward(sg, uy, um, ur, us, dw, dbias, N, C, 1e-5f);
        } else {
            kc->add_rmsnorm_forward(sc, sum, y, rstd, x, r, w, N, C, 1e-6f);
            kg->add_rmsnorm_forward(sg, gs, gy, gr, dx, dr, dw, N, C, 1e-6f);
            kg->add(sg, us, dx, dr, N * C);
            kg->rmsnorm_forward(sg, uy, ur, us, dw, N, C, 1e-6f);
        }
        char name[96];
        snprintf(name, sizeof name, "%s sum (bits of add)", nm);
        check_bits(name, gs, us, N * C);
        snprintf(name, sizeof name, "%s y (bits of add, then the norm)", nm);
        check_bits(name, gy, uy, N * C);
        snprintf(name, sizeof name, "%s rstd (bits)", nm);
        check_bits(name, gr, ur, N);
        if (fam < 2) {
            snprintf(name, sizeof name, "%s mean (bits)", nm);
            check_bits(name, gm, um, N);
            snprintf(name, sizeof name, "%s mean", nm);
            check(name, gm, mean, N, F32);
        } else {
            sharc_device_free(gpu, gm);
            free(mean);
        }
        snprintf(name, sizeof name, "%s sum", nm);
        check(name, gs, sum, N * C, F32);
        snprintf(name, sizeof name, "%s y", nm);
        check(name, gy, y, N * C, F32);
        snprintf(name, sizeof name, "%s rstd", nm);
        check(name, gr, rstd, N, F32);
        sharc_device_free(gpu, us), sharc_device_free(gpu, uy), sharc_device_free(gpu, um), sharc_device_free(gpu, ur);
    }
    sharc_device_free(gpu, dx), sharc_device_free(gpu, dr), sharc_device_free(gpu, dw), sharc_device_free(gpu, db);
    free(x), free(r), free(w), free(b);
}

static void test_activations(void) {
    int64_t N = 31;
    int I = 53;
    int64_t n = N * 2 * I;
    float *x = h_rand(n, 2), *g = h_rand(n, 1);
    float *dxx = d_up(x, n * 4), *dg = d_up(g, n * 4);
    float *y = malloc(n * 4), *gy = d_poison(n);
    kc->gelu_forward(sc, y, x, n);
    kg->gelu_forward(sg, gy, dxx, n);
    check("gelu_forward", gy, y, n, F32);
    float *dx = malloc(n * 4), *gdx = d_poison(n);
    kc->gelu_backward(sc, dx, g, x, n);
    kg->gelu_backward(sg, gdx, dg, dxx, n);
    check("gelu_backward", gdx, dx, n, F32);
    float *sy = malloc(N * I * 4), *gsy = d_poison(N * I);
    kc->swiglu_forward(sc, sy, x, N, I);
    kg->swiglu_forward(sg, gsy, dxx, N, I);
    check("swiglu_forward", gsy, sy, N * I, F32);
    float *sdx = malloc(n * 4), *gsdx = d_poison(n);
    kc->swiglu_backward(sc, sdx, g, x, N, I);
    kg->swiglu_backward(sg, gsdx, dg, dxx, N, I);
    check("swiglu_backward", gsdx, sdx, n, F32);
    sharc_device_free(gpu, dxx);
    sharc_device_free(gpu, dg);
    free(x);
    free(g);
}

static void test_embedding(void) {
    int B = 3, T = 13, C = 41, V = 17, t0 = 3;
    int64_t N = (int64_t)B * T;
    int32_t *tok = malloc(N * 4);
    for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)(sharc_rng_u64(5, 5, (uint64_t)i) % (uint64_t)V); /* repeats */
    float *wte = h_rand((int64_t)V * C, 1), *wpe = h_rand((int64_t)(T + t0) * C, 1);
    int32_t *dtok = d_up(tok, N * 4);
    float *dwte = d_up(wte, V * C * 4), *dwpe = d_up(wpe, (T + t0) * C * 4);
    for (int pos = 0; pos < 2; pos++) {
        float *x = malloc(N * C * 4), *gx = d_poison(N * C);
        kc->embedding_forward(sc, x, tok, wte, pos ? wpe : NULL, B, T, C, pos ? t0 : 0);
        kg->embedding_forward(sg, gx, dtok, dwte, pos ? dwpe : NULL, B, T, C, pos ? t0 : 0);
        check(pos ? "embedding_forward wte+wpe" : "embedding_forward wte", gx, x, N * C, 0);
    }
    float *dx = h_rand(N * C, 1), *gdx = d_up(dx, N * C * 4);
    float *gte = h_rand((int64_t)V * C, 1), *gpe = h_rand((int64_t)(T + t0) * C, 1);
    float *dgte = d_up(gte, V * C * 4), *dgpe = d_up(gpe, (T + t0) * C * 4);
    kc->embedding_backward(sc, gte, gpe, dx, tok, B, T, C, t0);
    kg->embedding_backward(sg, dgte, dgpe, gdx, dtok, B, T, C, t0);
    /* the same additions in the same order as the CPU: bit for bit */
    check("embedding_backward dwte (repeated tokens)", dgte, gte, (int64_t)V * C, 0);
    check("embedding_backward dwpe", dgpe, gpe, (int64_t)(T + t0) * C, 0);
    sharc_device_free(gpu, dtok);
    sharc_device_free(gpu, dwte);
    sharc_device_free(gpu, dwpe);
    sharc_device_free(gpu, gdx);
    free(tok), free(wte), free(wpe), free(dx);
}

static void test_rope(void) {
    int B = 2, T = 19, NH = 6, NKV = 2, hd = 14, t0 = 5;
    int half = hd / 2;
    float *cs = malloc(T * half * 4), *sn = malloc(T * half * 4);
    float *gcs = d_poison(T * half), *gsn = d_poison(T * half);
    kc->rope_table(sc, cs, sn, T, hd, 10000.0f, t0);
    kg->rope_table(sg, gcs, gsn, T, hd, 10000.0f, t0);
    float *hc = down(gcs, T * half), *hs = down(gsn, T * half);
    compare("rope_table cos", hc, cs, T * half, F32);
    compare("rope_table sin", hs, sn, T * half, F32);
    free(hc);
    free(hs);
    /* note [packing]: per-token rows at packed positions; CUDA's cosf / sinf
     * are not glibc's to the last bit, hence the tolerance */
    int32_t pos[2 * 19];
    for (int r = 0; r < 2 * T; r++) pos[r] = r < 7 ? r : r < 20 ? r - 7 : r - 20 + t0;
    float inv[7];
    for (int i = 0; i < half; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)hd);
    float *pc = malloc(2 * T * half * 4), *ps = malloc(2 * T * half * 4);
    int32_t *dpos = d_up(pos, sizeof pos);
    float *dinv = d_up(inv, sizeof inv), *gpc = d_poison(2 * T * half), *gps = d_poison(2 * T * half);
    kc->rope_table_pos(sc, pc, ps, pos, inv, 2 * T, half);
    kg->rope_table_pos(sg, gpc, gps, dpos, dinv, 2 * T, half);
    check("rope_table_pos cos", gpc, pc, 2 * T * half, F32);
    check("rope_table_pos sin", gps, ps, 2 * T * half, F32);
    sharc_device_free(gpu, dpos);
    sharc_device_free(gpu, dinv);
    int64_t n = (int64_t)B * T * (NH + 2 * NKV) * hd;
    float *q = h_rand(n, 1), *dq = d_up(q, n * 4), *dcs = d_up(cs, T * half * 4), *dsn = d_up(sn, T * half * 4);
    kc->rope_forward(sc, q, cs, sn, B, T, NH, NKV, hd);
    kg->rope_forward(sg, dq, dcs, dsn, B, T, NH, NKV, hd);
    float *hq = down(dq, n);
    compare("rope_forward", hq, q, n, F32);
    free(hq);
    kc->rope_backward(sc, q, cs, sn, B, T, NH, NKV, hd);
    kg->rope_backward(sg, dq, dcs, dsn, B, T, NH, NKV, hd);
    check("rope_backward", dq, q, n, F32);
    sharc_device_free(gpu, gcs);
    sharc_device_free(gpu, gsn);
    sharc_device_free(gpu, dcs);
    sharc_device_free(gpu, dsn);
    free(cs), free(sn);
}

static void test_attention(int B, int T, int NH, int NKV, int hd) {
    char name[128];
    int64_t nq = (int64_t)B * T * (NH + 2 * NKV) * hd, no = (int64_t)B * T * NH * hd, nl = (int64_t)B * NH * T;
    float *qkv = h_rand(nq, 1), *dout = h_rand(no, 1);
    float *gqkv = d_up(qkv, nq * 4), *gdout = d_up(dout, no * 4);
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *gout = d_poison(no), *glse = d_poison(nl);
    int64_t wc = kc->attention_workspace(T), wg = kg->attention_workspace(T);
    float *ws = malloc((size_t)(wc > 0 ? wc : 1) * 4);
    float *gws = sharc_device_alloc(gpu, (size_t)(wg > 0 ? wg : 1) * 4, SHARC_MEM_OTHER);
    kc->attention_forward(sc, out, lse, qkv, NULL, B, T, NH, NKV, hd, ws);
    kg->attention_forward(sg, gout, glse, gqkv, NULL, B, T, NH, NKV, hd, gws);
    float *ho = down(gout, no), *hl = down(glse, nl);
    snprintf(name, sizeof name, "attention_forward out B%d T%d NH%d NKV%d hd%d", B, T, NH, NKV, hd);
    compare(name, ho, out, no, F32);
    snprintf(name, sizeof name, "attention_forward lse B%d T%d NH%d NKV%d hd%d", B, T, NH, NKV, hd);
    compare(name, hl, lse, nl, F32);
    free(ho);
    free(hl);
    float *dqkv = malloc(nq * 4), *gdqkv = d_poison(nq);
    kc->attention_backward(sc, dqkv, dout, qkv, out, lse, NULL, B, T, NH, NKV, hd, ws);
    kg->attention_backward(sg, gdqkv, gdout, gqkv, gout, glse, NULL, B, T, NH, NKV, hd, gws);
    snprintf(name, sizeof name, "attention_backward dqkv B%d T%d NH%d NKV%d hd%d", B, T, NH, NKV, hd);
    check(name, gdqkv, dqkv, nq, F32);
    sharc_device_free(gpu, gqkv);
    sharc_device_free(gpu, gdout);
    sharc_device_free(gpu, gout);
    sharc_device_free(gpu, glse);
    sharc_device_free(gpu, gws);
    free(qkv), free(dout), free(out), free(lse), free(ws);
}

static void test_xent(void) {
    int64_t N = 23;
    int V = 1001;
    int32_t *t = malloc(N * 4);
    for (int64_t i = 0; i < N; i++) t[i] = i % 5 == 3 ? -1 : (int32_t)(sharc_rng_u64(9, 9, (uint64_t)i) % V);
    int32_t *dt = d_up(t, N * 4);
    for (int grad = 0; grad < 2; grad++) {
        float *lg = h_rand(N * V, 3), *dlg = d_up(lg, N * V * 4);
        float *loss = malloc(N * 4), *dloss = d_poison(N);
        double sum = 0, *dsum = d_up(&sum, 8);
        kc->xent_forward_backward(sc, &sum, lg, loss, t, N, V, 0.037f, grad);
        kg->xent_forward_backward(sg, dsum, dlg, dloss, dt, N, V, 0.037f, grad);
        check(grad ? "xent losses (with grad)" : "xent losses", dloss, loss, N, F32);
        check_double(grad ? "xent loss_sum (with grad)" : "xent loss_sum", dsum, sum, F32);
        check(grad ? "xent dlogits" : "xent logits untouched", dlg, lg, N * V, F32);
    }
    sharc_device_free(gpu, dt);
    free(t);
    { /* note [online-softmax] in xent.cu: rows where each thread's max grows at every element (ascending), never
       * (descending), masked -inf logits, equal logits, and a late spike that rescales the sum by ~e^-80 */
        const int64_t R = 5;
        const int W = 700; /* not a multiple of the 256 threads: threads fold 2 or 3 elements */
        float *lg = malloc(R * W * 4);
        int32_t tr[5] = {W - 1, 3, 2, 650, 17};
        for (int j = 0; j < W; j++) {
            lg[0 * W + j] = 0.05f * (float)j;
            lg[1 * W + j] = -0.05f * (float)j;
            lg[2 * W + j] = j % 2 ? -INFINITY : 0.01f * (float)(j % 37);
            lg[3 * W + j] = 1.5f;
            lg[4 * W + j] = j == W - 3 ? 80.0f : 0.001f * (float)(j % 101);
        }
        float *dlg = d_up(lg, R * W * 4), *loss = malloc(R * 4), *dloss = d_poison(R);
        int32_t *dtr = d_up(tr, sizeof tr);
        double sum = 0, *dsum = d_up(&sum, 8);
        kc->xent_forward_backward(sc, &sum, lg, loss, tr, R, W, 0.5f, true);
        kg->xent_forward_backward(sg, dsum, dlg, dloss, dtr, R, W, 0.5f, true);
        check("xent losses (online-softmax rows)", dloss, loss, R, F32);
        check_double("xent loss_sum (online-softmax rows)", dsum, sum, F32);
        check("xent dlogits (online-softmax rows)", dlg, lg, R * W, F32);
        sharc_device_free(gpu, dtr);
    }
    /* fused head, chunk 7 of 23 rows */
    int C = 33;
    V = 517;
    int64_t chunk = 7;
    int32_t *t2 = malloc(N * 4);
    for (int64_t i = 0; i < N; i++) t2[i] = i % 4 == 1 ? -1 : (int32_t)(sharc_rng_u64(11, 9, (uint64_t)i) % V);
    float *x = h_rand(N * C, 1), *w = h_rand((int64_t)V * C, 0.3f), *dw = h_rand((int64_t)V * C, 1);
    int32_t *gt = d_up(t2, N * 4);
    float *gx = d_up(x, N * C * 4), *gw = d_up(w, V * C * 4), *gdw = d_up(dw, V * C * 4);
    float *dx = malloc(N * C * 4), *gdx = d_poison(N * C);
    float *ws = malloc(chunk * V * 4), *gws = d_poison(chunk * V);
    double sum = 0, *gsum = d_up(&sum, 8);
    kc->lmhead_xent(sc, &sum, dx, dw, x, w, t2, 0.05f, N, C, V, ws, chunk);
    kg->lmhead_xent(sg, gsum, gdx, gdw, gx, gw, gt, 0.05f, N, C, V, gws, chunk);
    check_double("lmhead_xent loss_sum", gsum, sum, F32);
    check("lmhead_xent dx", gdx, dx, N * C, F32);
    check("lmhead_xent dw (+=)", gdw, dw, (int64_t)V * C, F32);
    double s2 = 0, *gs2 = d_up(&s2, 8);
    kc->lmhead_xent(sc, &s2, NULL, NULL, x, w, t2, 1.0f, N, C, V, ws, chunk);
    kg->lmhead_xent(sg, gs2, NULL, NULL, gx, gw, gt, 1.0f, N, C, V, gws, chunk);
    check_double("lmhead_xent loss_sum (forward only)", gs2, s2, F32);
    sharc_device_free(gpu, gt);
    sharc_device_free(gpu, gx);
    sharc_device_free(gpu, gw);
    sharc_device_free(gpu, gws);
    free(t2), free(x), free(w), free(ws);
}

/* Ulysses' strided block copies (note [ulysses]): a column block out of
 * wider rows, written and added */
static void test_copy_block(void) {
    const int64_t rows = 37, lds = 53, ldd = 29, cols = 23;
    float *src = h_rand(rows * lds, 1), *gsrc = d_up(src, rows * lds * 4);
    for (int add = 0; add < 2; add++) {
        float *dst = h_rand(rows * ldd, 1), *gdst = d_up(dst, rows * ldd * 4);
        kc->copy_block(sc, dst + 3, ldd, src + 5, lds, rows, cols, add);
        kg->copy_block(sg, gdst + 3, ldd, gsrc + 5, lds, rows, cols, add);
        check(add ? "copy_block (+=)" : "copy_block", gdst, dst, rows * ldd, 0); /* untouched columns too */
    }
    sharc_device_free(gpu, gsrc);
    free(src);
}

/* note [tp-vocab]: rank 1 of 3 (rows [v0, v0 + Vl) of V = 3 Vl) of the
 * vocabulary-parallel embedding and head statistics, against the CPU's */
static void test_vocab(void) {
    const int T = 7, C = 19, Vl = 301, v0 = Vl;
    const int64_t N = 3 * T, m = N;
    int32_t *tok = malloc(N * 4), *pos = malloc(N * 4), *tg = malloc(N * 4);
    for (int64_t i = 0; i < N; i++) {
        tok[i] = (int32_t)(sharc_rng_u64(13, 5, (uint64_t)i) % (uint64_t)(3 * Vl)); /* some in range, some not */
        if (i % 4 == 0) tok[i] = v0 + (int32_t)(i % 3);                             /* repeats in range */
        pos[i] = (int32_t)((i * 5) % T);
        tg[i] = i % 6 == 5 ? -1 : i % 3 == 0 ? v0 + (int32_t)(i % Vl) : tok[i];
    }
    int32_t *dtok = d_up(tok, N * 4), *dpos = d_up(pos, N * 4), *dtg = d_up(tg, N * 4);
    float *wte = h_rand((int64_t)Vl * C, 1), *wpe = h_rand((int64_t)T * C, 1);
    float *gwte = d_up(wte, Vl * C * 4), *gwpe = d_up(wpe, T * C * 4);
    for (int v = 0; v < 3; v++) { /* no positions, r % T, given positions */
        float *x = malloc(N * C * 4), *gx = d_poison(N * C);
        kc->vocab_embedding_forward(sc, x, tok, v == 2 ? pos : NULL, wte, v ? wpe : NULL, N, T, C, v0, Vl);
        kg->vocab_embedding_forward(sg, gx, dtok, v == 2 ? dpos : NULL, gwte, v ? gwpe : NULL, N, T, C, v0, Vl);
        check(v == 0   ? "vocab_embedding_forward"
              : v == 1 ? "vocab_embedding_forward wpe"
                       : "vocab_embedding_forward pos",
              gx, x, N * C, 0);
    }
    float *dx = h_rand(N * C, 1), *gdx = d_up(dx, N * C * 4);
    float *dw = h_rand((int64_t)Vl * C, 1), *gdw = d_up(dw, Vl * C * 4);
    kc->vocab_embedding_backward(sc, dw, dx, tok, N, C, v0, Vl);
    kg->vocab_embedding_backward(sg, gdw, gdx, dtok, N, C, v0, Vl);
    check("vocab_embedding_backward (+=, rows in order)", gdw, dw, (int64_t)Vl * C, 0); /* the CPU's order: exact */
    /* the head's statistics on one rank's logits, then the loss and dlogits */
    float *lg = h_rand(m * Vl, 3), *glg = d_up(lg, m * Vl * 4);
    float *red = malloc(3 * m * 4), *gred = d_poison(3 * m);
    kc->vocab_xent_stats(sc, red, lg, tg, m, v0, Vl, false);
    kg->vocab_xent_stats(sg, gred, glg, dtg, m, v0, Vl, false);
    float *hred = down(gred, m);
    compare("vocab_xent_stats max", hred, red, m, 0);
    free(hred);
    for (int64_t r = 0; r < m; r++) red[r] += 0.25f; /* as if another rank's maximum were larger */
    sharc_device_copy(gpu, gred, red, m * 4, SHARC_COPY_HOST_TO_DEVICE, sg);
    kc->vocab_xent_stats(sc, red, lg, tg, m, v0, Vl, true);
    kg->vocab_xent_stats(sg, gred, glg, dtg, m, v0, Vl, true);
    hred = down(gred, 3 * m);
    compare("vocab_xent_stats sums and target logits", hred, red, 3 * m, F32);
    free(hred);
    for (int grad = 0; grad < 2; grad++)
        for (int add = 0; add < 2; add++) {
            double sum = add ? 1.5 : 0, *gsum = d_up(&sum, 8);
            float *l2 = h_copy(lg, m * Vl), *gl2 = d_up(lg, m * Vl * 4);
            sharc_device_copy(gpu, gred, red, 3 * m * 4, SHARC_COPY_HOST_TO_DEVICE, sg);
            kc->vocab_xent_finish(sc, &sum, add, grad ? l2 : NULL, red, tg, m, v0, Vl, 0.03f);
            kg->vocab_xent_finish(sg, gsum, add, grad ? gl2 : NULL, gred, dtg, m, v0, Vl, 0.03f);
            check_double(add ? "vocab_xent_finish loss_sum (+=)" : "vocab_xent_finish loss_sum", gsum, sum, F32);
            check(grad ? "vocab_xent_finish dlogits" : "vocab_xent_finish logits untouched", gl2, l2, m * Vl, F32);
        }
    sharc_device_free(gpu, dtok);
    sharc_device_free(gpu, dpos);
    sharc_device_free(gpu, dtg);
    sharc_device_free(gpu, gwte);
    sharc_device_free(gpu, gwpe);
    sharc_device_free(gpu, gdx);
    sharc_device_free(gpu, glg);
    sharc_device_free(gpu, gred);
    free(tok), free(pos), free(tg), free(wte), free(wpe), free(dx), free(lg), free(red);
}

/* the H heads of hd elements inside each of N rows of stride ld, packed (N, H*hd) */
static float *heads_of(const float *p, int64_t N, int H, int hd, int64_t ld) {
    float *h = malloc((size_t)(N * H * hd) * sizeof(float));
    for (int64_t n = 0; n < N; n++) memcpy(h + n * H * hd, p + n * ld, (size_t)H * hd * sizeof(float));
    return h;
}

/* per-head RMSNorm (Qwen3's q_norm / k_norm) over the query heads inside rows of a wider stride */
static void test_qknorm(void) {
    int64_t N = 11;
    int H = 5, hd = 40;
    int64_t ld = (int64_t)(H + 4) * hd + 3, n = N * ld, nh = N * H * hd;
    float *x = h_rand(n, 2), *w = h_rand(hd, 1), *dyv = h_rand(n, 1);
    float *gx = d_up(x, n * 4), *gw = d_up(w, hd * 4);
    /* forward out of place: only the heads are written (the rest of y stays poisoned) */
    float *y = malloc(n * 4), *rstd = malloc(N * H * 4), *gy = d_poison(n), *grstd = d_poison(N * H);
    kc->head_rmsnorm_forward(sc, y, rstd, x, w, N, H, hd, ld, 1e-6f);
    kg->head_rmsnorm_forward(sg, gy, grstd, gx, gw, N, H, hd, ld, 1e-6f);
    float *hy = down(gy, n), *yh = heads_of(y, N, H, hd, ld), *hyh = heads_of(hy, N, H, hd, ld);
    compare("head_rmsnorm_forward y (heads of rows of stride ld)", hyh, yh, nh, F32);
    float *hr = down(grstd, N * H);
    compare("head_rmsnorm_forward rstd", hr, rstd, N * H, F32);
    free(hy), free(yh), free(hyh), free(hr);
    sharc_device_free(gpu, gy);
    /* in place, as the model calls it: the heads normalised, the rest of the row untouched */
    float *yi = h_copy(x, n), *gyi = d_up(x, n * 4);
    kc->head_rmsnorm_forward(sc, yi, rstd, yi, w, N, H, hd, ld, 1e-6f);
    kg->head_rmsnorm_forward(sg, gyi, grstd, gyi, gw, N, H, hd, ld, 1e-6f);
    check("head_rmsnorm_forward in place (whole rows)", gyi, yi, n, F32);
    /* backward with dx aliasing dy and dw accumulated */
    float *dx = h_copy(dyv, n), *dw = h_rand(hd, 1), *gdx = d_up(dyv, n * 4), *gdw = d_up(dw, hd * 4);
    kc->head_rmsnorm_backward(sc, dx, dw, dx, x, w, rstd, N, H, hd, ld);
    kg->head_rmsnorm_backward(sg, gdx, gdw, gdx, gx, gw, grstd, N, H, hd, ld);
    check("head_rmsnorm_backward dx aliasing dy (whole rows)", gdx, dx, n, F32);
    check("head_rmsnorm_backward dw (+=)", gdw, dw, hd, F32);
    /* backward out of place, dw NULL (a frozen norm) */
    float *dx2 = malloc(n * 4), *gdy = d_up(dyv, n * 4), *gdx2 = d_poison(n);
    kc->head_rmsnorm_backward(sc, dx2, NULL, dyv, x, w, rstd, N, H, hd, ld);
    kg->head_rmsnorm_backward(sg, gdx2, NULL, gdy, gx, gw, grstd, N, H, hd, ld);
    float *hdx = down(gdx2, n), *dxh = heads_of(dx2, N, H, hd, ld), *hdxh = heads_of(hdx, N, H, hd, ld);
    compare("head_rmsnorm_backward dx out of place, dw NULL", hdxh, dxh, nh, F32);
    free(hdx), free(dxh), free(hdxh), free(dx2);
    sharc_device_free(gpu, gdx2);
    sharc_device_free(gpu, gdy);
    sharc_device_free(gpu, grstd);
    sharc_device_free(gpu, gx);
    sharc_device_free(gpu, gw);
    free(x), free(w), free(dyv), free(y), free(rstd);
}

/* generation: n new queries at t0 against a key/value cache, grouped-query heads */
static void test_kvcache(int n, int t0, int NH, int NKV, int hd, bool with_lo) {
    char name[160];
    int Tk = t0 + n;
    int64_t ldq = (int64_t)(NH + 2 * NKV) * hd, KV = (int64_t)NKV * hd, no = (int64_t)n * NH * hd;
    float *q = h_rand(n * ldq, 1), *k = h_rand(Tk * KV, 1), *v = h_rand(Tk * KV, 1);
    int32_t *lo = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) lo[i] = (int32_t)((7 * i + 3) % (t0 + i + 1)); /* 0 <= lo[i] <= t0 + i */
    float *gq = d_up(q, n * ldq * 4), *gk = d_up(k, Tk * KV * 4), *gv = d_up(v, Tk * KV * 4);
    int32_t *glo = d_up(lo, (size_t)n * 4);
    int64_t wc = kc->attention_workspace(Tk), wg = kg->attention_workspace(Tk);
    float *ws = malloc((size_t)(wc > 0 ? wc : 1) * 4);
    float *gws = sharc_device_alloc(gpu, (size_t)(wg > 0 ? wg : 1) * 4, SHARC_MEM_OTHER);
    float *out = malloc(no * 4), *gout = d_poison(no);
    kc->attention_cached(sc, out, q, ldq, k, v, with_lo ? lo : NULL, n, t0, NH, NKV, hd, ws);
    kg->attention_cached(sg, gout, gq, ldq, gk, gv, with_lo ? glo : NULL, n, t0, NH, NKV, hd, gws);
    snprintf(name, sizeof name, "attention_cached n%d t0 %d NH%d NKV%d hd%d%s", n, t0, NH, NKV, hd,
             with_lo ? " lo" : "");
    check(name, gout, out, no, F32);
    sharc_device_free(gpu, gq);
    sharc_device_free(gpu, gk);
    sharc_device_free(gpu, gv);
    sharc_device_free(gpu, glo);
    sharc_device_free(gpu, gws);
    free(q), free(k), free(v), free(lo), free(ws);
}

/* rel ||got - ref|| / ||ref|| (compare's measure, no verdict) */
static double rel_of(const float *got, const float *ref, int64_t n) {
    double dd = 0, rr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        dd += d * d;
        rr += (double)ref[i] * ref[i];
    }
    return sqrt(dd) / (rr > 0 ? sqrt(rr) : 1.0);
}

/* x rounded to the nearest bf16, ties to even (finite x), widened back */
static float bf_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* The bf16 attention's arithmetic on the host (note [cuda-attention-tc]):
 * q, k, v (qkv16, already rounded) and dO (dout16) as bf16; scores, the
 * softmax and every sum in double from those; forward as the kernel runs it,
 * an online softmax over key tiles of 64 aligned at multiples of 64, each
 * tile's P rounded to bf16 (relative to the running max) before P V, the
 * row sum of the unrounded P; backward P from lse, D from the fp32 dO and O,
 * P and dS rounded to bf16 as the operands of dV, dK and dQ. */
static void attn16_ref_forward(float *out, float *lse, const float *qkv16, const int32_t *lo, int B, int T, int NH,
                               int NKV, int hd) {
    int64_t S = (int64_t)(NH + 2 * NKV) * hd;
    double scale = 1.0 / sqrt((double)hd), *acc = malloc((size_t)hd * sizeof(double));
    float *p = malloc(64 * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                int kvh = h / (NH / NKV), l0 = lo ? lo[b * T + i] : 0;
                const float *q = qkv16 + ((int64_t)b * T + i) * S + (int64_t)h * hd;
                double m = -INFINITY, l = 0;
                for (int d = 0; d < hd; d++) acc[d] = 0;
                for (int k0 = 0; k0 <= i; k0 += 64) {
                    float sco[64], mx = -INFINITY;
                    for (int c = 0; c < 64; c++) {
                        int j = k0 + c;
                        sco[c] = -INFINITY;
                        if (j > i || j < l0) continue;
                        const float *k = qkv16 + ((int64_t)b * T + j) * S + (int64_t)(NH + kvh) * hd;
                        double dot = 0;
                        for (int d = 0; d < hd; d++) dot += (double)q[d] * k[d];
                        sco[c] = (float)((float)dot * (float)scale);
                        mx = fmaxf(mx, sco[c]);
                    }
                    double mn = fmax(m, mx), corr = 1, sum = 0;
                    if (mn == -INFINITY) continue; /* nothing visible yet: p = 0, corr = 1 */
                    corr = exp(m - mn);
                    for (int c = 0; c < 64; c++) {
                        float e = sco[c] == -INFINITY ? 0.0f : (float)exp((double)sco[c] - mn);
                        sum += e;
                        p[c] = bf_round(e);
                    }
                    for (int d = 0; d < hd; d++) acc[d] *= corr;
                    for (int c = 0; c < 64 && k0 + c <= i; c++) {
                        if (p[c] == 0) continue;
                        const float *v = qkv16 + ((int64_t)b * T + k0 + c) * S + (int64_t)(NH + NKV + kvh) * hd;
                        for (int d = 0; d < hd; d++) acc[d] += (double)p[c] * v[d];
                    }
                    l = l * corr + sum;
                    m = mn;
                }
                float *o = out + ((int64_t)b * T + i) * NH * hd + (int64_t)h * hd;
                for (int d = 0; d < hd; d++) o[d] = (float)(acc[d] / l);
                lse[((int64_t)b * NH + h) * T + i] = (float)(m + log(l));
            }
    free(acc), free(p);
}

static void attn16_ref_backward(float *dqkv, const float *dout, const float *dout16, const float *qkv16,
                                const float *out, const float *lse, const int32_t *lo, int B, int T, int NH, int NKV,
                                int hd) {
    int64_t S = (int64_t)(NH + 2 * NKV) * hd, n = (int64_t)B * T * S;
    double scale = 1.0 / sqrt((double)hd), *acc = calloc((size_t)n, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                int kvh = h / (NH / NKV), l0 = lo ? lo[b * T + i] : 0;
                int64_t qr = ((int64_t)b * T + i) * S, orow = ((int64_t)b * T + i) * NH * hd + (int64_t)h * hd;
                const float *q = qkv16 + qr + (int64_t)h * hd, *dO = dout16 + orow;
                double D = 0;
                for (int d = 0; d < hd; d++) D += (double)dO[d] * out[orow + d];
                float L = lse[((int64_t)b * NH + h) * T + i];
                for (int j = l0; j <= i; j++) {
                    int64_t kr = ((int64_t)b * T + j) * S;
                    const float *k = qkv16 + kr + (int64_t)(NH + kvh) * hd;
                    const float *v = qkv16 + kr + (int64_t)(NH + NKV + kvh) * hd;
                    double s = 0, dp = 0;
                    for (int d = 0; d < hd; d++) s += (double)q[d] * k[d], dp += (double)dO[d] * v[d];
                    float p = (float)exp((double)((float)s * (float)scale) - L);
                    float p16 = bf_round(p), ds16 = bf_round((float)(p * ((float)dp - (float)D)));
                    for (int d = 0; d < hd; d++) {
                        acc[qr + (int64_t)h * hd + d] += (double)ds16 * k[d];
                        acc[kr + (int64_t)(NH + kvh) * hd + d] += (double)ds16 * q[d];
                        acc[kr + (int64_t)(NH + NKV + kvh) * hd + d] += (double)p16 * dO[d];
                    }
                }
            }
    for (int64_t e = 0; e < n; e++) {
        int64_t c = e % S;
        dqkv[e] = (float)(c < (int64_t)(NH + NKV) * hd ? acc[e] * scale : acc[e]);
    }
    free(acc);
}

/* A bf16 attention result: within 2e-2 of the CPU's fp32 attention, within
 * tol of the host's emulation of its bf16 arithmetic, and at least 10 times
 * closer to that than to fp32 (so unrounded operands fail) */
static void check_attn16(const char *name, const float *got, const float *ref16, const float *ref32, int64_t n,
                         double tol) {
    char nm[220], msg[160];
    snprintf(nm, sizeof nm, "%s against the CPU fp32 attention", name);
    compare(nm, got, ref32, n, 2e-2);
    snprintf(nm, sizeof nm, "%s against the host's bf16 emulation", name);
    compare(nm, got, ref16, n, tol);
    double r16 = rel_of(got, ref16, n), r32 = rel_of(got, ref32, n);
    snprintf(nm, sizeof nm, "%s: bf16 operands (10x closer to the bf16 emulation than to fp32)", name);
    snprintf(msg, sizeof msg, "rel to bf16 %.3g, to fp32 %.3g", r16, r32);
    result(nm, r16 * 10 <= r32, msg);
}

/* attention_forward_bf16 / attention_backward_bf16 (note [cuda-attention-tc])
 * against the CPU's fp32 attention and the host's bf16 emulation; window W
 * > 0: lo = max(first token of the query's document, i - W + 1), documents
 * starting at every 37th token; W < 0: documents only; 0: no lo. The
 * backward takes the CPU forward's out and lse on every side. */
static void test_attn16(int B, int T, int NH, int NKV, int hd, int W) {
    char name[160];
    int64_t S = (int64_t)(NH + 2 * NKV) * hd, nq = (int64_t)B * T * S, no = (int64_t)B * T * NH * hd,
            nl = (int64_t)B * NH * T;
    float *qkv = h_rand(nq, 1), *dout = h_rand(no, 1);
    int32_t *lo = malloc((size_t)B * T * 4), *glo = NULL;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            int doc = (i + 11 * b) / 37 * 37 - 11 * b, l = doc > 0 ? doc : 0;
            if (W > 0 && i - W + 1 > l) l = i - W + 1;
            lo[b * T + i] = l;
        }
    const int32_t *hlo = W ? lo : NULL;
    if (W) glo = d_up(lo, (size_t)B * T * 4);
    float *qkv16 = malloc(nq * 4), *dout16 = malloc(no * 4);
    for (int64_t e = 0; e < nq; e++) qkv16[e] = bf_round(qkv[e]);
    for (int64_t e = 0; e < no; e++) dout16[e] = bf_round(dout[e]);
    float *gqkv = d_up(qkv, nq * 4), *gdout = d_up(dout, no * 4);
    int64_t wc = kc->attention_workspace(T), wg = kg->attention_workspace(T);
    float *ws = malloc((size_t)(wc > 0 ? wc : 1) * 4);
    float *gws = sharc_device_alloc(gpu, (size_t)(wg > 0 ? wg : 1) * 4, SHARC_MEM_OTHER);
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *out16 = malloc(no * 4), *lse16 = malloc(nl * 4);
    float *gout = d_poison(no), *glse = d_poison(nl);
    kc->attention_forward(sc, out, lse, qkv, hlo, B, T, NH, NKV, hd, ws);
    attn16_ref_forward(out16, lse16, qkv16, hlo, B, T, NH, NKV, hd);
    kg->attention_forward_bf16(sg, gout, glse, gqkv, glo, B, T, NH, NKV, hd, gws);
    char tag[100];
    snprintf(tag, sizeof tag, "B%d T%d NH%d NKV%d hd%d%s", B, T, NH, NKV, hd,
             W > 0   ? " window"
             : W < 0 ? " documents"
                     : "");
    bool tc = hd % 16 == 0; /* else the fp32 kernel: its own tolerance */
    float *ho = down(gout, no), *hl = down(glse, nl);
    snprintf(name, sizeof name, "attention_forward_bf16 out %s", tag);
    if (tc) check_attn16(name, ho, out16, out, no, 5e-4);
    else compare(name, ho, out, no, F32);
    snprintf(name, sizeof name, "attention_forward_bf16 lse %s", tag);
    if (tc) check_attn16(name, hl, lse16, lse, nl, 1e-5);
    else compare(name, hl, lse, nl, F32);
    free(ho), free(hl);

    float *dqkv = malloc(nq * 4), *dqkv16 = malloc(nq * 4), *gdqkv = d_poison(nq);
    float *gout_c = d_up(out, no * 4), *glse_c = d_up(lse, nl * 4);
    kc->attention_backward(sc, dqkv, dout, qkv, out, lse, hlo, B, T, NH, NKV, hd, ws);
    attn16_ref_backward(dqkv16, dout, dout16, qkv16, out, lse, hlo, B, T, NH, NKV, hd);
    kg->attention_backward_bf16(sg, gdqkv, gdout, gqkv, gout_c, glse_c, glo, B, T, NH, NKV, hd, gws);
    float *hd_ = down(gdqkv, nq);
    snprintf(name, sizeof name, "attention_backward_bf16 dqkv %s", tag);
    if (tc) check_attn16(name, hd_, dqkv16, dqkv, nq, 5e-4);
    else compare(name, hd_, dqkv, nq, F32);
    /* deterministic: a second run gives the same bits (no atomics, fixed orders) */
    kg->attention_backward_bf16(sg, gdqkv, gdout, gqkv, gout_c, glse_c, glo, B, T, NH, NKV, hd, gws);
    float *again = down(gdqkv, nq);
    snprintf(name, sizeof name, "attention_backward_bf16 %s: a second run repeats bit for bit", tag);
    result(name, memcmp(again, hd_, (size_t)nq * 4) == 0, "");
    free(again);
    free(hd_);
    sharc_device_free(gpu, gqkv);
    sharc_device_free(gpu, gdout);
    sharc_device_free(gpu, gout);
    sharc_device_free(gpu, glse);
    sharc_device_free(gpu, gout_c);
    sharc_device_free(gpu, glse_c);
    sharc_device_free(gpu, gdqkv);
    sharc_device_free(gpu, gws);
    if (glo) sharc_device_free(gpu, glo);
    free(qkv), free(dout), free(lo), free(qkv16), free(dout16), free(ws), free(out), free(lse), free(out16);
    free(lse16), free(dqkv), free(dqkv16);
}


/* A bf16 result: within 1e-2 of the CPU's bf16 path, and at least 10 times
 * closer to it than to the CPU's fp32 result (the operands were rounded:
 * the products are exact in fp32, so only the summation order differs from
 * the CPU's bf16 path, while fp32 operands differ by ~2^-9 relative). */
static void check16(const char *name, void *d, float *ref16, const float *ref32, int64_t n) {
    float *h = down(d, n);
    compare(name, h, ref16, n, 1e-2);
    double r16 = rel_of(h, ref16, n), r32 = rel_of(h, ref32, n);
    char nm[200], msg[160];
    snprintf(nm, sizeof nm, "%s: bf16 operands (closer to the CPU's bf16 than fp32 result)", name);
    snprintf(msg, sizeof msg, "rel to bf16 %.3g, to fp32 %.3g", r16, r32);
    result(nm, r16 * 10 <= r32, msg);
    free(h);
    sharc_device_free(gpu, d);
    free(ref16);
}

static uint16_t *h_bf16(const float *x, int64_t n) {
    uint16_t *h = malloc((size_t)(n ? n : 1) * 2);
    kc->cast(sc, h, SHARC_DT_BF16, x, SHARC_DT_F32, n);
    return h;
}

/* bf16 compute (note [bf16-compute]) against the CPU's bf16 path
 * (SHARC_BF16=emulate where the CPU has no bf16 instructions) */
static void test_bf16(void) {
    if (!kc->bf16_compute()) sharc_bf16_mode_set(SHARC_BF16_EMULATED);
    result("bf16_compute on cuda", kg->bf16_compute(), "");
    result("CPU reference computes in bf16", kc->bf16_compute(), "");
    int64_t N = 37;
    int IC = 67, OC = 45;
    float *x = h_rand(N * IC, 1), *w = h_rand((int64_t)OC * IC, 0.2f), *b = h_rand(OC, 1);
    uint16_t *xh = h_bf16(x, N * IC), *wh = h_bf16(w, (int64_t)OC * IC);
    float *gx = d_up(x, N * IC * 4), *gw = d_up(w, OC * IC * 4), *gb = d_up(b, OC * 4);
    uint16_t *gxh = d_up(xh, N * IC * 2), *gwh = d_up(wh, OC * IC * 2);
    float *y32 = malloc(N * OC * 4);
    kc->matmul_forward(sc, y32, x, w, b, N, IC, OC);
    for (int form = 0; form < 2; form++) {
        float *y = malloc(N * OC * 4), *gy = d_poison(N * OC);
        if (form == 0) {
            kc->matmul_forward_bf16(sc, y, x, w, b, N, IC, OC);
            kg->matmul_forward_bf16(sg, gy, gx, gw, gb, N, IC, OC);
        } else {
            kc->matmul_forward_b16(sc, y, xh, wh, b, N, IC, OC);
            kg->matmul_forward_b16(sg, gy, gxh, gwh, gb, N, IC, OC);
        }
        check16(form ? "matmul_forward_b16 bias" : "matmul_forward_bf16 bias", gy, y, y32, N * OC);
    }
    {
        float *y = malloc(N * OC * 4), *gy = d_poison(N * OC), *r = malloc(N * OC * 4);
        kc->matmul_forward(sc, r, x, w, NULL, N, IC, OC);
        kc->matmul_forward_bf16(sc, y, x, w, NULL, N, IC, OC);
        kg->matmul_forward_bf16(sg, gy, gx, gw, NULL, N, IC, OC);
        check16("matmul_forward_bf16", gy, y, r, N * OC);
        free(r);
    }
    float *g = h_rand(N * OC, 1), *dg = d_up(g, N * OC * 4);
    float *dw0 = h_rand((int64_t)OC * IC, 1), *db0 = h_rand(OC, 1);
    float *rx = malloc(N * IC * 4), *rw = h_copy(dw0, (int64_t)OC * IC), *rb = h_copy(db0, OC);
    kc->matmul_backward(sc, rx, rw, rb, g, x, w, N, IC, OC);
    for (int form = 0; form < 2; form++) {
        float *dx = malloc(N * IC * 4), *dw = h_copy(dw0, (int64_t)OC * IC), *db = h_copy(db0, OC);
        float *gdx = d_poison(N * IC), *gdw = d_up(dw0, OC * IC * 4), *gdb = d_up(db0, OC * 4);
        if (form == 0) {
            kc->matmul_backward_bf16(sc, dx, dw, db, g, x, w, N, IC, OC);
            kg->matmul_backward_bf16(sg, gdx, gdw, gdb, dg, gx, gw, N, IC, OC);
        } else {
            kc->matmul_backward_b16(sc, dx, dw, db, g, xh, wh, N, IC, OC);
            kg->matmul_backward_b16(sg, gdx, gdw, gdb, dg, gxh, gwh, N, IC, OC);
        }
        check16(form ? "matmul_backward_b16 dx" : "matmul_backward_bf16 dx", gdx, dx, rx, N * IC);
        /* dw accumulates onto a random start: compare the increments' effect on the whole */
        check(form ? "matmul_backward_b16 dw (+=)" : "matmul_backward_bf16 dw (+=)", gdw, dw, (int64_t)OC * IC, 1e-2);
        /* the bias gradient sums the fp32 dy: the fp32 result */
        check(form ? "matmul_backward_b16 db (+=, fp32)" : "matmul_backward_bf16 db (+=, fp32)", gdb, db, OC, F32);
    }
    /* dw alone, from zero (so the bf16 rounding is visible), dx and db NULL */
    {
        float *dw = calloc((size_t)OC * IC, 4), *r = calloc((size_t)OC * IC, 4), *z = calloc((size_t)OC * IC, 4);
        float *gdw = d_up(z, OC * IC * 4);
        kc->matmul_backward(sc, NULL, r, NULL, g, x, w, N, IC, OC);
        kc->matmul_backward_bf16(sc, NULL, dw, NULL, g, x, w, N, IC, OC);
        kg->matmul_backward_bf16(sg, NULL, gdw, NULL, dg, gx, gw, N, IC, OC);
        check16("matmul_backward_bf16 dw only", gdw, dw, r, (int64_t)OC * IC);
        free(r), free(z);
    }
    /* the fused head in bf16, chunk 7 of 23 rows */
    {
        int64_t M = 23, chunk = 7;
        int C = 33, V = 517;
        int32_t *t = malloc(M * 4);
        for (int64_t i = 0; i < M; i++) t[i] = i % 4 == 1 ? -1 : (int32_t)(sharc_rng_u64(11, 9, (uint64_t)i) % V);
        float *hx = h_rand(M * C, 1), *hw = h_rand((int64_t)V * C, 0.3f), *dw = calloc((size_t)V * C, 4);
        float *dw32 = calloc((size_t)V * C, 4), *dx = malloc(M * C * 4), *dx32 = malloc(M * C * 4);
        float *ws = malloc(chunk * V * 4);
        int32_t *gt = d_up(t, M * 4);
        float *ghx = d_up(hx, M * C * 4), *ghw = d_up(hw, V * C * 4), *gdw = d_up(dw, V * C * 4);
        float *gdx = d_poison(M * C), *gws = d_poison(chunk * V);
        double s32 = 0, s16 = 0, *gs = d_up(&s16, 8);
        kc->lmhead_xent(sc, &s32, dx32, dw32, hx, hw, t, 0.05f, M, C, V, ws, chunk);
        kc->lmhead_xent_bf16(sc, &s16, dx, dw, hx, hw, t, 0.05f, M, C, V, ws, chunk);
        kg->lmhead_xent_bf16(sg, gs, gdx, gdw, ghx, ghw, gt, 0.05f, M, C, V, gws, chunk);
        check_double("lmhead_xent_bf16 loss_sum", gs, s16, 1e-2);
        check16("lmhead_xent_bf16 dx", gdx, dx, dx32, M * C);
        check16("lmhead_xent_bf16 dw (+=)", gdw, dw, dw32, (int64_t)V * C);
        double f = 0, *gf = d_up(&f, 8);
        kc->lmhead_xent_bf16(sc, &f, NULL, NULL, hx, hw, t, 1.0f, M, C, V, ws, chunk);
        kg->lmhead_xent_bf16(sg, gf, NULL, NULL, ghx, ghw, gt, 1.0f, M, C, V, gws, chunk);
        check_double("lmhead_xent_bf16 loss_sum (forward only)", gf, f, 1e-2);
        sharc_device_free(gpu, gt);
        sharc_device_free(gpu, ghx);
        sharc_device_free(gpu, ghw);
        sharc_device_free(gpu, gws);
        free(t), free(hx), free(hw), free(dw32), free(dx32), free(ws);
    }
    sharc_device_free(gpu, gx);
    sharc_device_free(gpu, gw);
    sharc_device_free(gpu, gb);
    sharc_device_free(gpu, gxh);
    sharc_device_free(gpu, gwh);
    sharc_device_free(gpu, dg);
    free(x), free(w), free(b), free(xh), free(wh), free(y32), free(g), free(dw0), free(db0), free(rx), free(rw),
        free(rb);
}

/* Mixture-of-Experts routing and token movement (note [cuda-moe]) */
static void test_moe(void) {
    int64_t N = 37;
    int E = 11, K = 3, C = 29;
    float *logits = h_rand(N * E, 2);
    logits[0 * E + 5] = logits[0 * E + 2] = 4.0f; /* a tie at the top: the lower expert first */
    logits[1 * E + 7] = logits[1 * E + 9] = 3.5f;
    float *gl = d_up(logits, N * E * 4);
    for (int nt = 0; nt < 2; nt++) {
        char nm[128];
        float *probs = malloc(N * E * 4), *wts = malloc(N * K * 4);
        int32_t *idx = malloc(N * K * 4);
        float *gp = d_poison(N * E), *gwts = d_poison(N * K);
        int32_t *gidx = sharc_device_alloc(gpu, N * K * 4, SHARC_MEM_OTHER);
        kc->moe_route_forward(sc, probs, idx, wts, logits, N, E, K, nt);
        kg->moe_route_forward(sg, gp, gidx, gwts, gl, N, E, K, nt);
        int32_t *hidx = malloc(N * K * 4);
        sharc_device_copy(gpu, hidx, gidx, N * K * 4, SHARC_COPY_DEVICE_TO_HOST, sg);
        sharc_device_synchronize(sg);
        snprintf(nm, sizeof nm, "moe_route_forward%s idx (ties: lower expert first)", nt ? " norm_topk" : "");
        result(nm, memcmp(hidx, idx, N * K * 4) == 0 && idx[0] == 2 && idx[1] == 5, "");
        snprintf(nm, sizeof nm, "moe_route_forward%s probs", nt ? " norm_topk" : "");
        float *hp = down(gp, N * E);
        compare(nm, hp, probs, N * E, F32);
        free(hp);
        snprintf(nm, sizeof nm, "moe_route_forward%s wts", nt ? " norm_topk" : "");
        float *hw = down(gwts, N * K);
        compare(nm, hw, wts, N * K, F32);
        free(hw);
        /* backward from the CPU's forward state, with and without the auxiliary gradient */
        float *dwts = h_rand(N * K, 1), *daux = h_rand(E, 0.1f);
        float *gdwts = d_up(dwts, N * K * 4), *gdaux = d_up(daux, E * 4), *gpc = d_up(probs, N * E * 4),
              *gwc = d_up(wts, N * K * 4);
        int32_t *gic = d_up(idx, N * K * 4);
        for (int aux = 0; aux < 2; aux++) {
            float *dl = malloc(N * E * 4), *gdl = d_poison(N * E);
            kc->moe_route_backward(sc, dl, dwts, probs, idx, wts, aux ? daux : NULL, N, E, K, nt);
            kg->moe_route_backward(sg, gdl, gdwts, gpc, gic, gwc, aux ? gdaux : NULL, N, E, K, nt);
            snprintf(nm, sizeof nm, "moe_route_backward%s%s", nt ? " norm_topk" : "", aux ? " daux" : "");
            check(nm, gdl, dl, N * E, F32);
        }
        sharc_device_free(gpu, gp);
        sharc_device_free(gpu, gwts);
        sharc_device_free(gpu, gidx);
        sharc_device_free(gpu, gdwts);
        sharc_device_free(gpu, gdaux);
        sharc_device_free(gpu, gpc);
        sharc_device_free(gpu, gwc);
        sharc_device_free(gpu, gic);
        free(probs), free(wts), free(idx), free(hidx), free(dwts), free(daux);
    }
    /* the router's per-expert sums (note [moe-waits]): bit for bit, over
     * 1 and 2 blocks of experts and no tokens, into poisoned doubles */
    const int64_t pn[] = {N, 5, 0};
    const int pe[] = {E, 67, 3};
    for (int i = 0; i < 3; i++) {
        char nm[96];
        float *p = h_rand(pn[i] * pe[i], 1);
        float *gp = d_up(p, (size_t)(pn[i] * pe[i]) * 4);
        double *ps = malloc(sizeof(double) * (size_t)pe[i]), *hs = malloc(sizeof(double) * (size_t)pe[i]);
        double *gs = (double *)d_poison(2 * pe[i]); /* NaN float pairs: NaN doubles */
        kc->moe_prob_sum(sc, ps, p, pn[i], pe[i]);
        kg->moe_prob_sum(sg, gs, gp, pn[i], pe[i]);
        if (sharc_device_copy(gpu, hs, gs, sizeof(double) * (size_t)pe[i], SHARC_COPY_DEVICE_TO_HOST, sg) != SHARC_OK ||
            sharc_device_synchronize(sg) != SHARC_OK)
            die("copy out");
        snprintf(nm, sizeof nm, "moe_prob_sum N %lld E %d (bit-identical)", (long long)pn[i], pe[i]);
        result(nm, memcmp(hs, ps, sizeof(double) * (size_t)pe[i]) == 0 && (pn[i] > 0 || ps[0] == 0.0), "");
        sharc_device_free(gpu, gp);
        sharc_device_free(gpu, gs);
        free(p), free(ps), free(hs);
    }
    /* tokens to expert rows and back: each of N rows appears K times, sorted by a pseudo-expert */
    int64_t n = N * K;
    int32_t *rows = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) rows[i] = (int32_t)((i * 17 + i / 5) % N);
    float *x = h_rand(N * C, 1), *xs = h_rand(n * C, 1), *sc_ = h_rand(n, 1);
    int32_t *grows = d_up(rows, n * 4);
    float *gx = d_up(x, N * C * 4), *gxs = d_up(xs, n * C * 4), *gsc = d_up(sc_, n * 4);
    for (int scaled = 0; scaled < 2; scaled++) {
        float *y = malloc(n * C * 4), *gy = d_poison(n * C);
        kc->moe_gather(sc, y, x, rows, scaled ? sc_ : NULL, n, C);
        kg->moe_gather(sg, gy, gx, grows, scaled ? gsc : NULL, n, C);
        check(scaled ? "moe_gather scaled" : "moe_gather", gy, y, n * C, 0);
        float *acc = h_rand(N * C, 1), *gacc = d_up(acc, N * C * 4);
        kc->moe_scatter_add(sc, acc, xs, rows, scaled ? sc_ : NULL, n, C);
        kg->moe_scatter_add(sg, gacc, gxs, grows, scaled ? gsc : NULL, n, C);
        check(scaled ? "moe_scatter_add scaled (repeated rows, +=)" : "moe_scatter_add (repeated rows, +=)", gacc, acc,
              N * C, F32);
    }
    {
        float *acc = h_rand(N, 1), *gacc = d_up(acc, N * 4);
        kc->moe_scatter_add(sc, acc, sc_, rows, NULL, n, 1);
        kg->moe_scatter_add(sg, gacc, gsc, grows, NULL, n, 1);
        check("moe_scatter_add C 1", gacc, acc, N, F32);
        float *o = malloc(n * 4), *go = d_poison(n);
        kc->moe_row_dot(sc, o, x, rows, xs, n, C);
        kg->moe_row_dot(sg, go, gx, grows, gxs, n, C);
        check("moe_row_dot", go, o, n, F32);
    }
    sharc_device_free(gpu, gl);
    sharc_device_free(gpu, grows);
    sharc_device_free(gpu, gx);
    sharc_device_free(gpu, gxs);
    sharc_device_free(gpu, gsc);
    free(logits), free(rows), free(x), free(xs), free(sc_);
}

static void test_memory_streams(void) {
    sharc_mem_stats m0, m1;
    sharc_device_mem_get(gpu, &m0);
    size_t bytes = 3 * 1000003;
    char *p = sharc_device_alloc(gpu, bytes, SHARC_MEM_ACTIVATIONS);
    sharc_device_mem_get(gpu, &m1);
    char msg[160];
    snprintf(msg, sizeof msg, "activations %lld -> %lld", (long long)m0.current[SHARC_MEM_ACTIVATIONS],
             (long long)m1.current[SHARC_MEM_ACTIVATIONS]);
    result("alloc accounted per category",
           p && m1.current[SHARC_MEM_ACTIVATIONS] - m0.current[SHARC_MEM_ACTIVATIONS] == (int64_t)bytes, msg);
    /* zero-filled, then memset0 of a poisoned range, then a D2D copy */
    unsigned char *h = malloc(bytes);
    sharc_device_copy(gpu, h, p, bytes, SHARC_COPY_DEVICE_TO_HOST, sg);
    sharc_device_synchronize(sg);
    bool zero = true;
    for (size_t i = 0; i < bytes; i++) zero &= h[i] == 0;
    result("alloc zero-filled", zero, "");
    memset(h, 0xab, bytes);
    sharc_device_copy(gpu, p, h, bytes, SHARC_COPY_HOST_TO_DEVICE, sg);
    sharc_device_memset0(gpu, p + 17, 1000, sg);
    sharc_device_copy(gpu, h, p, bytes, SHARC_COPY_DEVICE_TO_HOST, sg);
    sharc_device_synchronize(sg);
    bool ok = true;
    for (size_t i = 0; i < bytes; i++) ok &= h[i] == (i >= 17 && i < 1017 ? 0 : 0xab);
    result("memset0", ok, "");
    /* a second stream waits on an event recorded after a fill on the first */
    int64_t n = 1 << 24;
    float *a = sharc_device_alloc(gpu, n * 4, SHARC_MEM_OTHER), *b = sharc_device_alloc(gpu, n * 4, SHARC_MEM_OTHER);
    sharc_stream *s2;
    sharc_event *ev;
    if (sharc_device_stream_new(gpu, &s2) != SHARC_OK || sharc_device_event_new(gpu, &ev) != SHARC_OK)
        die("stream/event");
    result("stream_new gives a new stream", s2 != sg, "");
    kg->fill(sg, a, 3.0f, n);
    kg->init_normal(sg, a, n, 1.0f, 1, 1, 0); /* slow work before the value that counts */
    kg->fill(sg, a, 5.0f, n);
    bool qdone = false;
    ok = sharc_device_event_query(ev, &qdone) == SHARC_OK && qdone;
    result("event_query: an event never recorded is reached", ok, "");
    sharc_device_event_record(ev, sg);
    /* a poll, no wait: on a GPU done or not (the 16M-element work before it
     * is likely still running), on the simulator not done (nothing drained);
     * a not-ready answer must not be left as the runtime's last error for
     * the next launch's check (kernels below would fail) */
    ok = sharc_device_event_query(ev, &qdone) == SHARC_OK;
    result("event_query before the wait: no error", ok, qdone ? "done" : "not done");
    sharc_device_event_wait(ev, s2);
    sharc_device_copy(gpu, b, a, n * 4, SHARC_COPY_DEVICE_TO_DEVICE, s2);
    float *hb = malloc(n * 4);
    sharc_device_copy(gpu, hb, b, n * 4, SHARC_COPY_DEVICE_TO_HOST, s2);
    sharc_device_synchronize(s2);
    ok = true;
    for (int64_t i = 0; i < n; i++) ok &= hb[i] == 5.0f;
    result("event: stream 2 waits for stream 1 (D2D copy sees the fill)", ok, "");
    ok = sharc_device_event_synchronize(ev) == SHARC_OK;
    result("event_synchronize", ok, "");
    ok = sharc_device_event_query(ev, &qdone) == SHARC_OK && qdone;
    result("event_query after event_synchronize: done", ok, "");
    sharc_device_event_free(ev);
    sharc_device_stream_free(s2);
    sharc_device_free(gpu, a);
    sharc_device_free(gpu, b);
    sharc_device_free(gpu, p);
    sharc_mem_stats m2;
    sharc_device_mem_get(gpu, &m2);
    result("free returns the bytes", m2.current[SHARC_MEM_ACTIVATIONS] == m0.current[SHARC_MEM_ACTIVATIONS], "");
    free(h);
    free(hb);
}

/* bf16 words widened to fp32 (exact) */
static float *h_widen(const uint16_t *h, int64_t n) {
    float *f = malloc((size_t)(n ? n : 1) * 4);
    kc->cast(sc, f, SHARC_DT_F32, h, SHARC_DT_BF16, n);
    return f;
}

/* The fused linear + GELU slots (note [gemm-gelu]) against the unfused
 * composition of the CPU's slots: case 0 with IC, OC multiples of 8 (cuBLASLt's
 * GELU epilogues: the aux leading dimension), case 1 odd IC, OC and case 2
 * the aux (pre) 4 bytes past an aligned address (both the unfused
 * fallback); fp32 and the bf16 forms (check16's rule). */
static void test_gelu_epilogue(int kase) {
    int64_t N = 37;
    int IC = kase == 1 ? 67 : 72, OC = kase == 1 ? 45 : 48, off = kase == 2 ? 1 : 0;
    if (!kc->bf16_compute()) sharc_bf16_mode_set(SHARC_BF16_EMULATED);
    char tag[40], nm[160];
    snprintf(tag, sizeof tag, kase == 0 ? "(epilogue)" : kase == 1 ? "(odd sizes: unfused)" : "(misaligned: unfused)");
    float *x = h_rand(N * IC, 1), *w = h_rand((int64_t)OC * IC, 0.2f), *b = h_rand(OC, 1);
    uint16_t *xh = h_bf16(x, N * IC), *wh = h_bf16(w, (int64_t)OC * IC);
    float *gx = d_up(x, N * IC * 4), *gw = d_up(w, OC * IC * 4), *gb = d_up(b, OC * 4);
    uint16_t *gxh = d_up(xh, N * IC * 2), *gwh = d_up(wh, OC * IC * 2);
    /* forward: pre and y, fp32 then bf16 (with the bf16 copy of y) */
    float *pre32 = malloc(N * OC * 4), *y32 = malloc(N * OC * 4);
    kc->matmul_forward(sc, pre32, x, w, b, N, IC, OC);
    kc->gelu_forward(sc, y32, pre32, N * OC);
    for (int form = 0; form < 2; form++) {
        float *pre = malloc(N * OC * 4), *y = malloc(N * OC * 4);
        float *gpre = d_poison(N * OC + off), *gy = d_poison(N * OC);
        uint16_t *gyh = NULL;
        if (form == 0) {
            memcpy(pre, pre32, N * OC * 4), memcpy(y, y32, N * OC * 4);
            kg->matmul_gelu_forward(sg, gpre + off, gy, gx, gw, gb, N, IC, OC);
        } else {
            kc->matmul_forward_b16(sc, pre, xh, wh, b, N, IC, OC);
            kc->gelu_forward(sc, y, pre, N * OC);
            uint16_t *nan16 = malloc(N * OC * 2);
            for (int64_t i = 0; i < N * OC; i++) nan16[i] = 0x7fc0; /* bf16 NaN */
            gyh = d_up(nan16, N * OC * 2);
            free(nan16);
            kg->matmul_gelu_forward_b16(sg, gpre + off, gy, gyh, gxh, gwh, gb, N, IC, OC);
        }
        float *hpre = down(gpre, N * OC + off);
        snprintf(nm, sizeof nm, "matmul_gelu_forward%s pre %s", form ? "_b16" : "", tag);
        if (form == 0) compare(nm, hpre + off, pre, N * OC, F32);
        else {
            float *g = d_up(hpre + off, N * OC * 4);
            check16(nm, g, h_copy(pre, N * OC), pre32, N * OC);
        }
        snprintf(nm, sizeof nm, "matmul_gelu_forward%s y %s", form ? "_b16" : "", tag);
        if (form == 0) check(nm, gy, h_copy(y, N * OC), N * OC, F32);
        else {
            float *hy = down(gy, N * OC);
            uint16_t *hyh = malloc(N * OC * 2);
            if (sharc_device_copy(gpu, hyh, gyh, N * OC * 2, SHARC_COPY_DEVICE_TO_HOST, sg) != SHARC_OK ||
                sharc_device_synchronize(sg) != SHARC_OK)
                die("copy out");
            uint16_t *ryh = h_bf16(hy, N * OC);
            float *wy = h_widen(hyh, N * OC), *ry = h_widen(ryh, N * OC);
            free(ryh);
            check16(nm, gy, h_copy(y, N * OC), y32, N * OC);
            snprintf(nm, sizeof nm, "matmul_gelu_forward_b16 yh is y rounded to bf16 %s", tag);
            compare(nm, wy, ry, N * OC, 0);
            free(hy), free(hyh), free(wy), free(ry);
            sharc_device_free(gpu, gyh);
        }
        free(hpre), free(pre), free(y);
        sharc_device_free(gpu, gpre);
    }
    /* backward: the layer (IC -> OC) whose input x was gelu(pre), pre (N, IC) */
    float *pre = h_rand(N * IC, 1.5f), *dy = h_rand(N * OC, 1), *dw0 = h_rand((int64_t)OC * IC, 1);
    float *db0 = h_rand(OC, 1);
    float *gpre = d_poison(N * IC + off), *gdy = d_up(dy, N * OC * 4);
    if (sharc_device_copy(gpu, gpre + off, pre, N * IC * 4, SHARC_COPY_HOST_TO_DEVICE, sg) != SHARC_OK) die("copy");
    float *rx32 = malloc(N * IC * 4), *rw32 = h_copy(dw0, (int64_t)OC * IC), *rb32 = h_copy(db0, OC);
    kc->matmul_backward(sc, rx32, rw32, rb32, dy, x, w, N, IC, OC);
    kc->gelu_backward(sc, rx32, rx32, pre, N * IC);
    for (int form = 0; form < 2; form++) {
        float *rx = malloc(N * IC * 4), *rw = h_copy(dw0, (int64_t)OC * IC), *rb = h_copy(db0, OC);
        float *gdx = d_poison(N * IC), *gdw = d_up(dw0, OC * IC * 4), *gdb = d_up(db0, OC * 4);
        if (form == 0) {
            memcpy(rx, rx32, N * IC * 4), memcpy(rw, rw32, (size_t)OC * IC * 4), memcpy(rb, rb32, OC * 4);
            kg->matmul_backward_dgelu(sg, gdx, gdw, gdb, gdy, gx, gw, gpre + off, N, IC, OC);
        } else {
            kc->matmul_backward_b16(sc, rx, rw, rb, dy, xh, wh, N, IC, OC);
            kc->gelu_backward(sc, rx, rx, pre, N * IC);
            kg->matmul_backward_dgelu_b16(sg, gdx, gdw, gdb, gdy, gxh, gwh, gpre + off, N, IC, OC);
        }
        const char *f = form ? "matmul_backward_dgelu_b16" : "matmul_backward_dgelu";
        snprintf(nm, sizeof nm, "%s dx %s", f, tag);
        if (form == 0) check(nm, gdx, rx, N * IC, F32);
        else check16(nm, gdx, rx, rx32, N * IC);
        snprintf(nm, sizeof nm, "%s dw (+=) %s", f, tag);
        check(nm, gdw, rw, (int64_t)OC * IC, form ? 1e-2 : F32);
        snprintf(nm, sizeof nm, "%s db (+=, fp32) %s", f, tag);
        check(nm, gdb, rb, OC, F32);
    }
    /* whether cuBLASLt's epilogue ran: asked directly, aligned shapes only */
    if (kase == 0) {
        float *gy = d_poison(N * OC), *gp = d_poison(N * OC);
        bool fwd = sharc_cuda_gemm_gelu(sg, true, true, false, OC, (int)N, IC, gw, IC, gx, IC, gy, OC, SHARC_DT_F32, gb,
                                        gp, OC);
        bool misal = sharc_cuda_gemm_gelu(sg, true, true, false, OC, (int)N, IC, gw, IC, gx, IC, gy, OC, SHARC_DT_F32,
                                          gb, gp + 1, OC);
        result("cuBLASLt's GELU_AUX_BIAS epilogue is used for aligned operands, refused for a misaligned aux",
               fwd && !misal, "");
        check("sharc_cuda_gemm_gelu y", gy, h_copy(y32, N * OC), N * OC, F32);
        check("sharc_cuda_gemm_gelu aux (pre)", gp, h_copy(pre32, N * OC), N * OC, F32);
    }
    sharc_device_free(gpu, gpre), sharc_device_free(gpu, gdy);
    sharc_device_free(gpu, gx), sharc_device_free(gpu, gw), sharc_device_free(gpu, gb);
    sharc_device_free(gpu, gxh), sharc_device_free(gpu, gwh);
    free(x), free(w), free(b), free(xh), free(wh), free(pre32), free(y32), free(pre), free(dy), free(dw0), free(db0);
    free(rx32), free(rw32), free(rb32);
}

/* Note [sumsq-multi]: sumsq_multi over a table of odd-length segments (one
 * element, under, at and over a 4096-element block, several blocks) of one
 * tensor whose regions in no entry are NaN (a read outside an entry shows),
 * into two sums that already hold values: bit for bit cuda's sumsq per
 * entry, and within 1e-5 of the CPU's sumsq_multi (as sumsq: each 4096-element
 * block is summed in fp32, the CPU's lanes in another order than cuda's tree,
 * so the two differ near fp32's rounding, ~1e-8, not double's). */
static void test_sumsq_multi(void) {
    const int64_t lay[][3] = {{0, 1, 0},       {3, 4095, 1},     {4100, 4096, 0},
                              {8200, 4097, 0}, {12300, 9001, 1}, {21302, 12289, 0}};
    const int nseg = (int)(sizeof lay / sizeof lay[0]);
    const int64_t n = 21302 + 12289 + 5;
    float *h = h_rand(n, 1);
    for (int64_t i = 0, s = 0; i < n; i++) { /* NaN where no entry reads */
        while (s < nseg && i >= lay[s][0] + lay[s][1]) s++;
        if (s == nseg || i < lay[s][0]) h[i] = NAN;
    }
    float *d = d_up(h, n * 4);
    sharc_sumsq_seg ht[6], hc[6];
    int64_t blk = 0;
    double ref[2] = {1.5, 0.25}, cpu_acc[2] = {1.5, 0.25};
    double *dacc = d_up(ref, sizeof ref), *dref = d_up(ref, sizeof ref);
    for (int i = 0; i < nseg; i++) {
        const int64_t o = lay[i][0], len = lay[i][1];
        ht[i] = (sharc_sumsq_seg){.x = d + o, .n = len, .blk = blk, .which = (int32_t)lay[i][2]};
        hc[i] = ht[i];
        hc[i].x = h + o;
        blk += (len + 4095) / 4096;
        kg->sumsq(sg, dref + lay[i][2], d + o, len);
    }
    sharc_sumsq_seg *dt = d_up(ht, sizeof ht);
    kg->sumsq_multi(sg, dacc, dt, ht, nseg);
    kc->sumsq_multi(sc, cpu_acc, hc, hc, nseg);
    double got[2], want[2];
    if (sharc_device_copy(gpu, got, dacc, sizeof got, SHARC_COPY_DEVICE_TO_HOST, sg) != SHARC_OK ||
        sharc_device_copy(gpu, want, dref, sizeof want, SHARC_COPY_DEVICE_TO_HOST, sg) != SHARC_OK ||
        sharc_device_synchronize(sg) != SHARC_OK)
        die("copy out");
    for (int k = 0; k < 2; k++) {
        char name[80], msg[160];
        snprintf(name, sizeof name, "sumsq_multi acc[%d] (bits of sumsq per entry)", k);
        snprintf(msg, sizeof msg, "%.17g vs %.17g", got[k], want[k]);
        result(name, memcmp(&got[k], &want[k], sizeof got[k]) == 0 && isfinite(got[k]), msg);
        double rel = fabs(got[k] - cpu_acc[k]) / fabs(cpu_acc[k]);
        snprintf(name, sizeof name, "sumsq_multi acc[%d]", k);
        snprintf(msg, sizeof msg, "%.17g vs CPU %.17g, rel %.3g", got[k], cpu_acc[k], rel);
        result(name, isfinite(got[k]) && rel <= F32, msg);
    }
    sharc_device_free(gpu, dt);
    sharc_device_free(gpu, dacc);
    sharc_device_free(gpu, dref);
    sharc_device_free(gpu, d);
    free(h);
}

int main(int argc, char **argv) {
    cpu = sharc_device_cpu();
    if (sharc_device_open("cuda", 0, &gpu) != SHARC_OK) {
        printf("no GPU: %s\n", sharc_last_error());
        return 77;
    }
    kc = sharc_device_kernels(cpu);
    kg = sharc_device_kernels(gpu);
    sc = sharc_device_stream(cpu);
    sg = sharc_device_stream(gpu);
    const char *only = argc > 1 ? argv[1] : "";
#define RUN(name, call)                                                                                                \
    if (!only[0] || strstr(name, only)) call
    RUN("memory", test_memory_streams());
    RUN("elem", test_elem());
    RUN("matmul", test_matmul());
    RUN("norms", test_norms());
    RUN("fused", test_fused());
    RUN("fused", test_sumsq_multi());
    RUN("activations", test_activations());
    RUN("embedding", test_embedding());
    RUN("rope", test_rope());
    RUN("attention", test_attention(2, 37, 6, 2, 24));
    RUN("attention", test_attention(1, 64, 4, 4, 64));
    RUN("attention", test_attention(2, 29, 8, 1, 128));
    RUN("xent", test_xent());
    RUN("vocab", test_vocab());
    RUN("copy_block", test_copy_block());
    RUN("qknorm", test_qknorm());
    RUN("kvcache", test_kvcache(5, 11, 6, 2, 24, false));
    RUN("kvcache", test_kvcache(5, 11, 6, 2, 24, true));
    RUN("kvcache", test_kvcache(1, 20, 4, 4, 64, false));
    RUN("kvcache", test_kvcache(9, 0, 8, 1, 40, true));
    RUN("bf16", test_bf16());
    RUN("gelu_epilogue", test_gelu_epilogue(0));
    RUN("gelu_epilogue", test_gelu_epilogue(1));
    RUN("gelu_epilogue", test_gelu_epilogue(2));
    RUN("moe", test_moe());
    RUN("attn16", test_attn16(2, 100, 4, 2, 32, 0));
    RUN("attn16", test_attn16(1, 150, 4, 2, 32, 20));
    RUN("attn16", test_attn16(1, 77, 6, 1, 64, -1));
    RUN("attn16", test_attn16(2, 70, 2, 2, 128, 9));
    RUN("attn16", test_attn16(1, 45, 3, 1, 48, 0));
    RUN("attn16", test_attn16(2, 29, 4, 2, 24, 5));
    /* head dimensions 80, 96, 112: the instances ptxas spills in (note [cuda-resources]) */
    RUN("attn16", test_attn16(1, 70, 2, 1, 96, 0));
    RUN("attn16", test_attn16(1, 20, 2, 2, 80, 0));
    RUN("attn16", test_attn16(1, 20, 2, 2, 112, 0));
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
