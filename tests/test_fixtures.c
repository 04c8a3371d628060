/* test_fixtures.c: every kernel against PyTorch (tests/fixtures/kernels.safetensors,
 * made by tools/gen_fixtures.py in float64 from float32 inputs).
 *
 * Tolerance: the reference is exact to fp64; sharc computes in fp32 with sums
 * of at most a few hundred terms, so errors are a few ulps of the largest
 * partial sums: rtol 1e-5 with atol 1e-5 (values are O(1)) covers them with a
 * margin; a wrong convention (GELU erf vs tanh: 1e-3, RoPE layout: 1e-1) fails. */
#include "sharc/kernels.h"
#include "sharc/safetensors.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

#define RTOL 1e-5
#define ATOL 1e-5

static sharc_st_file *open_kernels(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/kernels.safetensors", sharc_test_fixture_dir());
    sharc_st_file *f;
    ASSERT_OK(sharc_st_open(&f, path));
    return f;
}

/* Load tensor `name` (fp32), allocating it; *n gets its element count. */
static float *load(sharc_st_file *f, const char *name, int64_t *n) {
    const sharc_st_tensor *t = sharc_st_find(f, name);
    if (!t) TEST_FAIL_AT("fixture tensor '%s' missing", name);
    float *p = calloc((size_t)t->numel + 1, sizeof(float));
    ASSERT_OK(sharc_st_read_f32(f, t, 0, t->numel, p));
    if (n) *n = t->numel;
    return p;
}

static float *zeros_like(int64_t n) { return calloc((size_t)n + 1, sizeof(float)); }

TEST(fixture_matmul) {
    sharc_st_file *f = open_kernels();
    int64_t nx, nw, ny;
    float *x = load(f, "matmul.x", &nx), *w = load(f, "matmul.w", &nw), *b = load(f, "matmul.b", NULL);
    float *y_ref = load(f, "matmul.y", &ny), *dy = load(f, "matmul.dy", NULL);
    float *y = zeros_like(ny), *dx = zeros_like(nx), *dw = zeros_like(nw), *db = zeros_like(5);
    sharc_matmul_forward(y, x, w, b, 13, 7, 5);
    ASSERT_ALLCLOSE(y, y_ref, ny, RTOL, ATOL);
    sharc_matmul_backward(dx, dw, db, dy, x, w, 13, 7, 5);
    ASSERT_ALLCLOSE(dx, load(f, "matmul.dx", NULL), nx, RTOL, ATOL);
    ASSERT_ALLCLOSE(dw, load(f, "matmul.dw", NULL), nw, RTOL, ATOL);
    ASSERT_ALLCLOSE(db, load(f, "matmul.db", NULL), 5, RTOL, ATOL);
    sharc_st_close(f);
}

static void norm_case(bool rms) {
    sharc_st_file *f = open_kernels();
    const char *k = rms ? "rmsnorm" : "layernorm";
    char name[64];
#define L(what) (snprintf(name, sizeof name, "%s.%s", k, what), load(f, name, NULL))
    float *x = L("x"), *w = L("w"), *b = rms ? NULL : L("b"), *y_ref = L("y"), *dy = L("dy");
    const int N = 13, C = 37;
    float *y = zeros_like(N * C), *mean = zeros_like(N), *rstd = zeros_like(N);
    float *dx = zeros_like(N * C), *dw = zeros_like(C), *db = zeros_like(C);
    if (rms) sharc_rmsnorm_forward(y, rstd, x, w, N, C, 1e-5f);
    else sharc_layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
    ASSERT_ALLCLOSE(y, y_ref, N * C, RTOL, ATOL);
    if (rms) sharc_rmsnorm_backward(dx, dw, dy, NULL, x, w, rstd, N, C);
    else sharc_layernorm_backward(dx, dw, db, dy, NULL, x, w, mean, rstd, N, C);
    ASSERT_ALLCLOSE(dx, L("dx"), N * C, RTOL, ATOL);
    ASSERT_ALLCLOSE(dw, L("dw"), C, RTOL, ATOL);
    if (!rms) ASSERT_ALLCLOSE(db, L("db"), C, RTOL, ATOL);
#undef L
    sharc_st_close(f);
}

TEST(fixture_layernorm) { norm_case(false); }
TEST(fixture_rmsnorm) { norm_case(true); }

TEST(fixture_gelu) {
    sharc_st_file *f = open_kernels();
    int64_t n;
    float *x = load(f, "gelu.x", &n), *y = zeros_like(n), *dx = zeros_like(n);
    sharc_gelu_forward(y, x, n);
    ASSERT_ALLCLOSE(y, load(f, "gelu.y", NULL), n, RTOL, ATOL);
    sharc_gelu_backward(dx, load(f, "gelu.dy", NULL), x, n);
    ASSERT_ALLCLOSE(dx, load(f, "gelu.dx", NULL), n, RTOL, ATOL);
    sharc_st_close(f);
}

TEST(fixture_swiglu) {
    sharc_st_file *f = open_kernels();
    int64_t n;
    float *x = load(f, "swiglu.x", &n), *y = zeros_like(11 * 9), *dx = zeros_like(n);
    sharc_swiglu_forward(y, x, 11, 9);
    ASSERT_ALLCLOSE(y, load(f, "swiglu.y", NULL), 11 * 9, RTOL, ATOL);
    sharc_swiglu_backward(dx, load(f, "swiglu.dy", NULL), x, 11, 9);
    ASSERT_ALLCLOSE(dx, load(f, "swiglu.dx", NULL), n, RTOL, ATOL);
    sharc_st_close(f);
}

TEST(fixture_embedding) {
    sharc_st_file *f = open_kernels();
    const int B = 3, T = 5, V = 11, C = 7;
    int32_t tok[15];
    ASSERT_OK(sharc_st_load_i32(f, "embedding.tokens", tok, 15));
    float *wte = load(f, "embedding.wte", NULL), *wpe = load(f, "embedding.wpe", NULL);
    float *x = zeros_like(B * T * C), *dwte = zeros_like(V * C), *dwpe = zeros_like(T * C);
    sharc_embedding_forward(x, tok, wte, wpe, B, T, C);
    ASSERT_ALLCLOSE(x, load(f, "embedding.y", NULL), B * T * C, RTOL, ATOL);
    sharc_embedding_backward(dwte, dwpe, load(f, "embedding.dy", NULL), tok, B, T, C);
    ASSERT_ALLCLOSE(dwte, load(f, "embedding.dwte", NULL), V * C, RTOL, ATOL);
    ASSERT_ALLCLOSE(dwpe, load(f, "embedding.dwpe", NULL), T * C, RTOL, ATOL);
    sharc_st_close(f);
}

TEST(fixture_rope) {
    sharc_st_file *f = open_kernels();
    const int B = 2, T = 7, NH = 3, NKV = 1, hd = 6;
    int64_t n;
    float *qkv = load(f, "rope.qkv", &n), *cs = zeros_like(T * hd / 2), *sn = zeros_like(T * hd / 2);
    sharc_rope_table(cs, sn, T, hd, 10000.0f);
    sharc_rope_forward(qkv, cs, sn, B, T, NH, NKV, hd);
    ASSERT_ALLCLOSE(qkv, load(f, "rope.y", NULL), n, RTOL, ATOL);
    float *d = load(f, "rope.dy", NULL);
    sharc_rope_backward(d, cs, sn, B, T, NH, NKV, hd);
    ASSERT_ALLCLOSE(d, load(f, "rope.dqkv", NULL), n, RTOL, ATOL);
    sharc_st_close(f);
}

static void attention_case(const char *k, int B, int T, int NH, int NKV, int hd) {
    sharc_st_file *f = open_kernels();
    char name[64];
#define L(what, n) (snprintf(name, sizeof name, "%s.%s", k, what), load(f, name, n))
    int64_t nqkv, nout;
    float *qkv = L("qkv", &nqkv), *y_ref = L("y", &nout), *dy = L("dy", NULL);
    float *out = zeros_like(nout), *lse = zeros_like((int64_t)B * NH * T), *dqkv = zeros_like(nqkv);
    float *ws = zeros_like(sharc_attention_workspace(T));
    sharc_attention_forward(out, lse, qkv, B, T, NH, NKV, hd, ws);
    ASSERT_ALLCLOSE(out, y_ref, nout, RTOL, ATOL);
    sharc_attention_backward(dqkv, dy, qkv, out, lse, B, T, NH, NKV, hd, ws);
    ASSERT_ALLCLOSE(dqkv, L("dqkv", NULL), nqkv, RTOL, ATOL);
#undef L
    sharc_st_close(f);
}

TEST(fixture_attention_gqa) { attention_case("attention", 2, 13, 4, 2, 6); }
TEST(fixture_attention_long) { attention_case("attention_long", 1, 150, 2, 1, 8); }

TEST(fixture_xent) {
    sharc_st_file *f = open_kernels();
    const int N = 13, V = 37;
    int32_t tgt[13];
    ASSERT_OK(sharc_st_load_i32(f, "xent.targets", tgt, N));
    float *logits = load(f, "xent.logits", NULL), losses[13];
    double total = sharc_xent_forward_backward(logits, losses, tgt, N, V, 1.0f / 12.0f, true);
    float *ref = load(f, "xent.losses", NULL);
    ASSERT_ALLCLOSE(losses, ref, N, RTOL, ATOL);
    double s = 0;
    for (int i = 0; i < N; i++) s += ref[i];
    ASSERT_NEAR(total, s, 1e-6, 1e-6);
    ASSERT_ALLCLOSE(logits, load(f, "xent.dlogits", NULL), N * V, RTOL, 1e-7);
    sharc_st_close(f);
}
