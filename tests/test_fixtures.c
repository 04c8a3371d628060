/* test_fixtures.c: every kernel of sharc/kernels.h against PyTorch
 * (tests/fixtures/kernels.safetensors, made by tools/gen_fixtures.py).
 *
 * The fixture's inputs are float32 values; its outputs and gradients were
 * computed from them in float64 and rounded once to float32, so what is
 * compared here is the rounding error of sharc's fp32 arithmetic alone.
 * Gradients are those of sum(out * dy) for the stored dy; parameter
 * gradients accumulate (+=) in sharc, so their buffers start at zero.
 *
 * Tolerance: |got - ref| <= ATOL * scale + RTOL * |ref| per element, where
 * scale = max |ref| over the tensor (over each row for the norms, whose rows
 * differ in scale by 400x).
 *   RTOL 1e-5 is ~170 fp32 ulps (u = 6e-8). The longest sums here have 150
 *   terms (attention over T = 150 keys); a worst-case fp32 summation error
 *   grows like n*u = 9e-6 relative to the sum of |terms|, a typical one like
 *   sqrt(n)*u ~ 1e-6.
 *   ATOL 1e-6 * scale covers elements that are small because of cancellation
 *   (a gradient summing terms of size ~scale to ~0): their absolute error is
 *   a few ulps of the terms, not of the result.
 * Observed (x86-64, OpenBLAS): the worst element of every tensor uses at most
 * 15% of this tolerance (attention_long.dqkv; most tensors 1-5%). Run one test
 * with --one to print each tensor's worst absolute and relative errors.
 * Wrong conventions fail by far: GELU erf instead of tanh by 49x the
 * tolerance, LayerNorm / RMSNorm eps 1e-6 instead of 1e-5 by 210x / 90x (the
 * fixture's narrow rows, std 0.05, make eps visible), interleaved instead of
 * rotate-half RoPE, or a missing 1/sqrt(hd), by O(1).  */
#include "kernel_table.h"
#include "sharc/safetensors.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

#define RTOL 1e-5
#define ATOL 1e-6

/* ---------------------------------------------------------------- helpers */

/* Buffers of the current test, freed together by done(). */
static void *g_bufs[64];
static int g_nbufs;
static sharc_st_file *g_file;

static void *track(void *p) {
    if (!p) TEST_FAIL_AT("out of memory");
    if (g_nbufs == (int)(sizeof g_bufs / sizeof g_bufs[0])) TEST_FAIL_AT("too many buffers");
    g_bufs[g_nbufs++] = p;
    return p;
}

static float *zeros(int64_t n) { return track(calloc((size_t)n + 1, sizeof(float))); }

static void open_kernels(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/kernels.safetensors", sharc_test_fixture_dir());
    ASSERT_OK(sharc_st_open(&g_file, path));
}

static void done(void) {
    for (int i = 0; i < g_nbufs; i++) free(g_bufs[i]);
    g_nbufs = 0;
    sharc_st_close(g_file);
    g_file = NULL;
}

/* Tensor `name` of exactly n elements, as fp32 (the reader checks the count). */
static float *get(const char *name, int64_t n) {
    float *p = zeros(n);
    ASSERT_OK(sharc_st_load_f32(g_file, name, p, n));
    return p;
}

static int32_t *get_i32(const char *name, int64_t n) {
    int32_t *p = track(calloc((size_t)n + 1, sizeof(int32_t)));
    ASSERT_OK(sharc_st_load_i32(g_file, name, p, n));
    return p;
}

/* Compare got with ref (n elements, in rows of `row`): prints the worst
 * absolute and relative errors and the largest fraction of the tolerance
 * used; scale (for ATOL) is the largest |ref| of each row. */
static void compare(const char *label, const float *got, const float *ref, int64_t n, int64_t row) {
    double max_abs = 0.0, max_rel = 0.0, used = 0.0, max_scale = 0.0;
    for (int64_t r0 = 0; r0 < n; r0 += row) {
        int64_t r1 = r0 + row < n ? r0 + row : n;
        double scale = 0.0;
        for (int64_t i = r0; i < r1; i++) scale = fmax(scale, fabs((double)ref[i]));
        if (scale == 0.0) scale = 1.0;
        max_scale = fmax(max_scale, scale);
        double atol = ATOL * scale;
        for (int64_t i = r0; i < r1; i++) {
            double d = fabs((double)got[i] - (double)ref[i]), r = fabs((double)ref[i]);
            if (isnan(d)) TEST_FAIL_AT("%s[%lld]: %g vs %g", label, (long long)i, (double)got[i], (double)ref[i]);
            max_abs = fmax(max_abs, d);
            if (r > atol) max_rel = fmax(max_rel, d / r);
            used = fmax(used, d / (atol + RTOL * r));
            if (!(d <= atol + RTOL * r))
                TEST_FAIL_AT("%s[%lld]: %.9g vs reference %.9g (diff %.3g, rtol %g, atol %.3g)", label, (long long)i,
                             (double)got[i], (double)ref[i], d, RTOL, atol);
        }
    }
    fprintf(stderr, "  %-24s n=%5lld  max abs %.2e  max rel %.2e  (scale %.2g, %3.0f%% of tolerance)\n", label,
            (long long)n, max_abs, max_rel, max_scale, 100.0 * used);
}

/* Compare against the fixture tensor `name` (n elements, rows of `row`). */
static void check_rows(const char *name, const float *got, int64_t n, int64_t row) {
    compare(name, got, get(name, n), n, row);
}

static void check(const char *name, const float *got, int64_t n) { check_rows(name, got, n, n); }

/* ------------------------------------------------------------------ tests */

TEST(fixture_matmul) {
    enum { N = 13, IC = 7, OC = 5 };
    open_kernels();
    float *x = get("matmul.x", N * IC), *w = get("matmul.w", OC * IC), *b = get("matmul.b", OC);
    float *dy = get("matmul.dy", N * OC);
    float *y = zeros(N * OC), *dx = zeros(N * IC), *dw = zeros(OC * IC), *db = zeros(OC);
    kt()->matmul_forward(ks(), y, x, w, b, N, IC, OC);
    check("matmul.y", y, N * OC);
    kt()->matmul_backward(ks(), dx, dw, db, dy, x, w, N, IC, OC);
    check("matmul.dx", dx, N * IC);
    check("matmul.dw", dw, OC * IC);
    check("matmul.db", db, OC);
    done();
}

static void norm_case(bool rms) {
    enum { N = 13, C = 37 };
    const char *k = rms ? "rmsnorm" : "layernorm";
    char name[64];
#define NAME(what) (snprintf(name, sizeof name, "%s.%s", k, what), name)
    open_kernels();
    float *x = get(NAME("x"), N * C), *w = get(NAME("w"), C), *b = rms ? NULL : get(NAME("b"), C);
    float *dy = get(NAME("dy"), N * C), *dres = get(NAME("dres"), N * C);
    float *y = zeros(N * C), *mean = zeros(N), *rstd = zeros(N);
    float *dx = zeros(N * C), *dw = zeros(C), *db = zeros(C);
    if (rms) kt()->rmsnorm_forward(ks(), y, rstd, x, w, N, C, 1e-5f);
    else kt()->layernorm_forward(ks(), y, mean, rstd, x, w, b, N, C, 1e-5f);
    check_rows(NAME("y"), y, N * C, C);
    if (!rms) check(NAME("mean"), mean, N);
    check(NAME("rstd"), rstd, N);
    if (rms) kt()->rmsnorm_backward(ks(), dx, dw, dy, NULL, x, w, rstd, N, C);
    else kt()->layernorm_backward(ks(), dx, dw, db, dy, NULL, x, w, mean, rstd, N, C);
    check_rows(NAME("dx"), dx, N * C, C);
    check(NAME("dw"), dw, C);
    if (!rms) check(NAME("db"), db, C);
    /* with a residual gradient: dx = dres + (the same), written not added */
    float *dx2 = zeros(N * C), *dw2 = zeros(C), *db2 = zeros(C), *want = zeros(N * C);
    const float *dx_ref = get(NAME("dx"), N * C);
    for (int i = 0; i < N * C; i++) {
        want[i] = (float)((double)dres[i] + (double)dx_ref[i]);
        dx2[i] = 1e6f; /* garbage the kernel must overwrite */
    }
    if (rms) kt()->rmsnorm_backward(ks(), dx2, dw2, dy, dres, x, w, rstd, N, C);
    else kt()->layernorm_backward(ks(), dx2, dw2, db2, dy, dres, x, w, mean, rstd, N, C);
    compare(rms ? "rmsnorm.dx + dres" : "layernorm.dx + dres", dx2, want, N * C, C);
#undef NAME
    done();
}

TEST(fixture_layernorm) { norm_case(false); }
TEST(fixture_rmsnorm) { norm_case(true); }

TEST(fixture_gelu) {
    enum { n = 101 };
    open_kernels();
    float *x = get("gelu.x", n), *dy = get("gelu.dy", n), *y = zeros(n), *dx = zeros(n);
    kt()->gelu_forward(ks(), y, x, n);
    check("gelu.y", y, n);
    kt()->gelu_backward(ks(), dx, dy, x, n);
    check("gelu.dx", dx, n);
    done();
}

TEST(fixture_swiglu) {
    enum { N = 11, I = 9 };
    open_kernels();
    float *x = get("swiglu.x", N * 2 * I), *dy = get("swiglu.dy", N * I);
    float *y = zeros(N * I), *dx = zeros(N * 2 * I);
    kt()->swiglu_forward(ks(), y, x, N, I);
    check("swiglu.y", y, N * I);
    kt()->swiglu_backward(ks(), dx, dy, x, N, I);
    check("swiglu.dx", dx, N * 2 * I);
    done();
}

TEST(fixture_add) {
    enum { n = 101 };
    open_kernels();
    float *a = get("add.a", n), *b = get("add.b", n), *y = zeros(n);
    kt()->add(ks(), y, a, b, n);
    check("add.y", y, n);
    kt()->add(ks(), a, a, b, n); /* in place */
    check("add.y", a, n);
    done();
}

TEST(fixture_embedding) {
    enum { B = 3, T = 5, V = 11, C = 7 };
    open_kernels();
    const int32_t *tok = get_i32("embedding.tokens", B * T);
    float *wte = get("embedding.wte", V * C), *wpe = get("embedding.wpe", T * C);
    float *dy = get("embedding.dy", B * T * C);
    float *x = zeros(B * T * C), *dwte = zeros(V * C), *dwpe = zeros(T * C);
    kt()->embedding_forward(ks(), x, tok, wte, wpe, B, T, C, 0);
    check("embedding.y", x, B * T * C);
    kt()->embedding_backward(ks(), dwte, dwpe, dy, tok, B, T, C, 0);
    check("embedding.dwte", dwte, V * C); /* repeated ids summed, unused rows 0 */
    check("embedding.dwpe", dwpe, T * C);
    /* Llama: no position table */
    kt()->embedding_forward(ks(), x, tok, wte, NULL, B, T, C, 0);
    check("embedding.y_nopos", x, B * T * C);
    memset(dwte, 0, sizeof(float) * V * C);
    kt()->embedding_backward(ks(), dwte, NULL, dy, tok, B, T, C, 0);
    check("embedding.dwte", dwte, V * C);
    done();
}

TEST(fixture_rope) {
    enum { B = 2, T = 7, NH = 3, NKV = 1, hd = 6, n = B * T * (NH + 2 * NKV) * hd };
    open_kernels();
    float *cs = zeros(T * hd / 2), *sn = zeros(T * hd / 2);
    /* sharc's fp32 table (HF: angle t * inv_freq in fp32) vs the exact one:
     * angles up to 6 rad carry a rounding error of ~5e-7 */
    kt()->rope_table(ks(), cs, sn, T, hd, 10000.0f, 0);
    check("rope.cos", cs, T * hd / 2);
    check("rope.sin", sn, T * hd / 2);
    float *qkv = get("rope.qkv", n);
    kt()->rope_forward(ks(), qkv, cs, sn, B, T, NH, NKV, hd);
    check("rope.y", qkv, n); /* q and k heads rotated, v untouched */
    float *d = get("rope.dy", n);
    kt()->rope_backward(ks(), d, cs, sn, B, T, NH, NKV, hd);
    check("rope.dqkv", d, n);
    done();
}

static void attention_case(const char *k, int B, int T, int NH, int NKV, int hd) {
    char name[64];
#define NAME(what) (snprintf(name, sizeof name, "%s.%s", k, what), name)
    int64_t nqkv = (int64_t)B * T * (NH + 2 * NKV) * hd, nout = (int64_t)B * T * NH * hd;
    open_kernels();
    float *qkv = get(NAME("qkv"), nqkv), *dy = get(NAME("dy"), nout);
    float *out = zeros(nout), *lse = zeros((int64_t)B * NH * T), *dqkv = zeros(nqkv);
    float *ws = zeros(kt()->attention_workspace(T));
    kt()->attention_forward(ks(), out, lse, qkv, NULL, B, T, NH, NKV, hd, ws);
    check(NAME("y"), out, nout);
    check(NAME("lse"), lse, (int64_t)B * NH * T);
    for (int64_t i = 0; i < nqkv; i++) dqkv[i] = -7.0f; /* written (=), not added */
    kt()->attention_backward(ks(), dqkv, dy, qkv, out, lse, NULL, B, T, NH, NKV, hd, ws);
    check(NAME("dqkv"), dqkv, nqkv);
#undef NAME
    done();
}

TEST(fixture_attention_gqa) { attention_case("attention", 2, 13, 4, 2, 6); }
/* T = 150 > 64: several query blocks, the last one partial */
TEST(fixture_attention_long) { attention_case("attention_long", 1, 150, 2, 1, 8); }

TEST(fixture_xent) {
    enum { N = 13, V = 37 };
    open_kernels();
    const int32_t *tgt = get_i32("xent.targets", N);
    int masked = 0;
    for (int i = 0; i < N; i++) masked += tgt[i] < 0;
    ASSERT_EQ(masked, 1);
    float *logits = get("xent.logits", N * V), *losses = zeros(N);
    const float *sum_ref = get("xent.loss_sum", 1);
    /* loss only: logits untouched */
    float *copy = zeros(N * V);
    memcpy(copy, logits, sizeof(float) * N * V);
    double s0 = xent_sum(copy, losses, tgt, N, V, 1.0f / 12.0f, false);
    ASSERT_TRUE(memcmp(copy, logits, sizeof(float) * N * V) == 0);
    double total = xent_sum(logits, losses, tgt, N, V, 1.0f / 12.0f, true);
    check("xent.losses", losses, N);
    check("xent.dlogits", logits, N * V);
    fprintf(stderr, "  xent sum %.9g vs %.9g\n", total, (double)sum_ref[0]);
    ASSERT_NEAR(total, sum_ref[0], RTOL, 0);
    ASSERT_TRUE(s0 == total);
    done();
}

TEST(fixture_lmhead_xent) {
    enum { N = 29, C = 11, V = 37 };
    open_kernels();
    float *x = get("lmhead.x", N * C), *w = get("lmhead.w", V * C);
    const int32_t *tgt = get_i32("lmhead.targets", N);
    const float *sum_ref = get("lmhead.loss_sum", 1);
    float *dx = zeros(N * C), *dw = zeros(V * C), *ws = zeros(8 * V);
    /* a chunk of 8 rows that does not divide N */
    double total = lmhead_sum(dx, dw, x, w, tgt, 1.0f / 28.0f, N, C, V, ws, 8);
    fprintf(stderr, "  lmhead sum %.9g vs %.9g\n", total, (double)sum_ref[0]);
    ASSERT_NEAR(total, sum_ref[0], RTOL, 0);
    check("lmhead.dx", dx, N * C);
    check("lmhead.dw", dw, V * C);
    double only = lmhead_sum(NULL, NULL, x, w, tgt, 1.0f, N, C, V, ws, 8);
    ASSERT_NEAR(only, sum_ref[0], RTOL, 0);
    done();
}
