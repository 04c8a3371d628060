/* test_kernels_fd.c: every kernel's backward against central finite
 * differences of its forward, at odd sizes. The loss is sum(out * R) for a
 * fixed random R, so dL/dout = R. */
#include "grad_check.h"
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "kernel_table.h"

#include <string.h>

#define EPS  1e-2f
#define RTOL 2e-2
#define ATOL 2e-3

/* ---------------- matmul ---------------- */
typedef struct {
    float *x, *w, *b, *y, *R;
    int N, IC, OC;
} mm_ctx;

static double mm_loss(void *p) {
    mm_ctx *c = p;
    kt()->matmul_forward(ks(), c->y, c->x, c->w, c->b, c->N, c->IC, c->OC);
    return dot_d(c->y, c->R, (int64_t)c->N * c->OC);
}

TEST(matmul_finite_difference) {
    mm_ctx c = {.N = 13, .IC = 7, .OC = 5};
    c.x = randn(c.N * c.IC, 1, 1.0f);
    c.w = randn(c.OC * c.IC, 2, 0.5f);
    c.b = randn(c.OC, 3, 0.5f);
    c.y = zeros(c.N * c.OC);
    c.R = randn(c.N * c.OC, 4, 1.0f);
    float *dx = zeros(c.N * c.IC), *dw = zeros(c.OC * c.IC), *db = zeros(c.OC);
    kt()->matmul_backward(ks(), dx, dw, db, c.R, c.x, c.w, c.N, c.IC, c.OC);
    fd_check(mm_loss, &c, c.x, dx, c.N * c.IC, EPS, RTOL, ATOL, "x");
    fd_check(mm_loss, &c, c.w, dw, c.OC * c.IC, EPS, RTOL, ATOL, "w");
    fd_check(mm_loss, &c, c.b, db, c.OC, EPS, RTOL, ATOL, "b");
    /* parameter gradients accumulate: a second backward doubles them */
    float *dw2 = malloc(sizeof(float) * (size_t)(c.OC * c.IC));
    memcpy(dw2, dw, sizeof(float) * (size_t)(c.OC * c.IC));
    kt()->matmul_backward(ks(), NULL, dw, db, c.R, c.x, c.w, c.N, c.IC, c.OC);
    for (int i = 0; i < c.OC * c.IC; i++) ASSERT_NEAR(dw[i], 2.0f * dw2[i], 1e-6, 1e-6);
}

/* ---------------- layernorm / rmsnorm ---------------- */
typedef struct {
    float *x, *w, *b, *y, *R, *mean, *rstd;
    int N, C;
    int rms;
} norm_ctx;

static double norm_loss(void *p) {
    norm_ctx *c = p;
    if (c->rms) kt()->rmsnorm_forward(ks(), c->y, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
    else kt()->layernorm_forward(ks(), c->y, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, 1e-5f);
    return dot_d(c->y, c->R, (int64_t)c->N * c->C);
}

static void norm_case(int rms, int N, int C) {
    norm_ctx c = {.N = N, .C = C, .rms = rms};
    c.x = randn(N * C, 10, 1.0f);
    for (int i = 0; i < N * C; i++) c.x[i] += 0.3f; /* a non-zero mean */
    c.w = randn(C, 11, 1.0f);
    c.b = randn(C, 12, 1.0f);
    c.y = zeros(N * C);
    c.R = randn(N * C, 13, 1.0f);
    c.mean = zeros(N);
    c.rstd = zeros(N);
    float *dres = randn(N * C, 14, 1.0f);
    float *dx = zeros(N * C), *dw = zeros(C), *db = zeros(C);
    norm_loss(&c);
    if (rms) kt()->rmsnorm_backward(ks(), dx, dw, c.R, NULL, c.x, c.w, c.rstd, N, C);
    else kt()->layernorm_backward(ks(), dx, dw, db, c.R, NULL, c.x, c.w, c.mean, c.rstd, N, C);
    fd_check(norm_loss, &c, c.x, dx, N * C, EPS, RTOL, ATOL, "x");
    fd_check(norm_loss, &c, c.w, dw, C, EPS, RTOL, ATOL, "w");
    if (!rms) fd_check(norm_loss, &c, c.b, db, C, EPS, RTOL, ATOL, "b");
    /* the residual input is added: dx2 = dres + dx */
    float *dx2 = zeros(N * C);
    if (rms) kt()->rmsnorm_backward(ks(), dx2, dw, c.R, dres, c.x, c.w, c.rstd, N, C);
    else kt()->layernorm_backward(ks(), dx2, dw, db, c.R, dres, c.x, c.w, c.mean, c.rstd, N, C);
    for (int i = 0; i < N * C; i++) ASSERT_NEAR(dx2[i], dx[i] + dres[i], 1e-5, 1e-5);
}

TEST(layernorm_finite_difference) { norm_case(0, 13, 37); }
TEST(rmsnorm_finite_difference) { norm_case(1, 13, 37); }
/* large enough to take the multi-threaded path with partial weight gradients */
TEST(layernorm_parallel_matches_fd) { norm_case(0, 301, 96); }
TEST(rmsnorm_parallel_matches_fd) { norm_case(1, 301, 96); }

/* ---------------- gelu / swiglu ---------------- */
typedef struct {
    float *x, *y, *R;
    int64_t n, N;
    int I, swiglu;
} act_ctx;

static double act_loss(void *p) {
    act_ctx *c = p;
    if (c->swiglu) kt()->swiglu_forward(ks(), c->y, c->x, c->N, c->I);
    else kt()->gelu_forward(ks(), c->y, c->x, c->n);
    return dot_d(c->y, c->R, c->swiglu ? c->N * c->I : c->n);
}

TEST(gelu_finite_difference) {
    act_ctx c = {.n = 1001};
    c.x = randn(c.n, 20, 2.0f);
    c.y = zeros(c.n);
    c.R = randn(c.n, 21, 1.0f);
    float *dx = zeros(c.n);
    kt()->gelu_backward(ks(), dx, c.R, c.x, c.n);
    fd_check(act_loss, &c, c.x, dx, c.n, 1e-3f, RTOL, ATOL, "x");
    /* spot values of the tanh form */
    float xs[3] = {-1.0f, 0.5f, 3.0f}, ys[3];
    kt()->gelu_forward(ks(), ys, xs, 3);
    ASSERT_NEAR(ys[0], -0.158808f, 1e-5, 1e-6);
    ASSERT_NEAR(ys[1], 0.345714f, 1e-5, 1e-6);
    ASSERT_NEAR(ys[2], 2.996363f, 1e-5, 1e-6);
}

TEST(gelu_large_parallel_matches_scalar) {
    int64_t n = 200003;
    float *x = randn(n, 22, 3.0f), *y = zeros(n), *dy = randn(n, 23, 1.0f), *dx = zeros(n);
    kt()->gelu_forward(ks(), y, x, n);
    kt()->gelu_backward(ks(), dx, dy, x, n);
    for (int64_t i = 0; i < n; i += 997) {
        double v = x[i];
        double t = tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
        ASSERT_NEAR(y[i], 0.5 * v * (1.0 + t), 1e-5, 1e-6);
    }
    ASSERT_TRUE(isfinite(dx[n - 1]));
}

TEST(swiglu_finite_difference) {
    act_ctx c = {.N = 11, .I = 9, .swiglu = 1};
    c.x = randn(c.N * 2 * c.I, 24, 1.5f);
    c.y = zeros(c.N * c.I);
    c.R = randn(c.N * c.I, 25, 1.0f);
    float *dx = zeros(c.N * 2 * c.I);
    kt()->swiglu_backward(ks(), dx, c.R, c.x, c.N, c.I);
    fd_check(act_loss, &c, c.x, dx, c.N * 2 * c.I, 1e-3f, RTOL, ATOL, "x");
}

/* ---------------- embedding ---------------- */
typedef struct {
    float *wte, *wpe, *x, *R;
    int32_t *tok;
    int B, T, C;
} emb_ctx;

static double emb_loss(void *p) {
    emb_ctx *c = p;
    kt()->embedding_forward(ks(), c->x, c->tok, c->wte, c->wpe, c->B, c->T, c->C, 0);
    return dot_d(c->x, c->R, (int64_t)c->B * c->T * c->C);
}

TEST(embedding_finite_difference) {
    int V = 11;
    emb_ctx c = {.B = 3, .T = 5, .C = 7};
    c.wte = randn(V * c.C, 30, 1.0f);
    c.wpe = randn(c.T * c.C, 31, 1.0f);
    c.x = zeros(c.B * c.T * c.C);
    c.R = randn(c.B * c.T * c.C, 32, 1.0f);
    c.tok = malloc(sizeof(int32_t) * (size_t)(c.B * c.T));
    for (int i = 0; i < c.B * c.T; i++) c.tok[i] = (i * 7) % 5; /* repeated tokens */
    float *dwte = zeros(V * c.C), *dwpe = zeros(c.T * c.C);
    kt()->embedding_backward(ks(), dwte, dwpe, c.R, c.tok, c.B, c.T, c.C, 0);
    fd_check(emb_loss, &c, c.wte, dwte, V * c.C, EPS, RTOL, ATOL, "wte");
    fd_check(emb_loss, &c, c.wpe, dwpe, c.T * c.C, EPS, RTOL, ATOL, "wpe");
    /* without positions (Llama) */
    c.wpe = NULL;
    memset(dwte, 0, sizeof(float) * (size_t)(V * c.C));
    kt()->embedding_backward(ks(), dwte, NULL, c.R, c.tok, c.B, c.T, c.C, 0);
    fd_check(emb_loss, &c, c.wte, dwte, V * c.C, EPS, RTOL, ATOL, "wte (no wpe)");
}

/* ---------------- rope ---------------- */
typedef struct {
    float *in, *qkv, *R, *cs, *sn;
    int B, T, NH, NKV, hd;
} rope_ctx;

static double rope_loss(void *p) {
    rope_ctx *c = p;
    int64_t n = (int64_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->hd;
    memcpy(c->qkv, c->in, sizeof(float) * (size_t)n);
    kt()->rope_forward(ks(), c->qkv, c->cs, c->sn, c->B, c->T, c->NH, c->NKV, c->hd);
    return dot_d(c->qkv, c->R, n);
}

TEST(rope_finite_difference) {
    rope_ctx c = {.B = 2, .T = 7, .NH = 3, .NKV = 1, .hd = 6};
    int64_t n = (int64_t)c.B * c.T * (c.NH + 2 * c.NKV) * c.hd;
    c.in = randn(n, 40, 1.0f);
    c.qkv = zeros(n);
    c.R = randn(n, 41, 1.0f);
    c.cs = zeros(c.T * c.hd / 2);
    c.sn = zeros(c.T * c.hd / 2);
    kt()->rope_table(ks(), c.cs, c.sn, c.T, c.hd, 10000.0f, 0);
    float *d = malloc(sizeof(float) * (size_t)n);
    memcpy(d, c.R, sizeof(float) * (size_t)n);
    kt()->rope_backward(ks(), d, c.cs, c.sn, c.B, c.T, c.NH, c.NKV, c.hd);
    fd_check(rope_loss, &c, c.in, d, n, EPS, RTOL, ATOL, "qkv");
    /* values are not rotated; position 0 is the identity */
    rope_loss(&c);
    int S = (c.NH + 2 * c.NKV) * c.hd;
    for (int i = 0; i < S; i++) ASSERT_NEAR(c.qkv[i], c.in[i], 1e-6, 1e-7);
    for (int i = (c.NH + c.NKV) * c.hd; i < S; i++) ASSERT_NEAR(c.qkv[3 * S + i], c.in[3 * S + i], 0, 0);
}

/* ---------------- attention ---------------- */
typedef struct {
    float *qkv, *out, *lse, *R, *ws;
    int B, T, NH, NKV, hd;
} att_ctx;

static double att_loss(void *p) {
    att_ctx *c = p;
    kt()->attention_forward(ks(), c->out, c->lse, c->qkv, NULL, c->B, c->T, c->NH, c->NKV, c->hd, c->ws);
    return dot_d(c->out, c->R, (int64_t)c->B * c->T * c->NH * c->hd);
}

static void attention_fd_case(int B, int T, int NH, int NKV, int hd) {
    att_ctx c = {.B = B, .T = T, .NH = NH, .NKV = NKV, .hd = hd};
    int64_t nqkv = (int64_t)B * T * (NH + 2 * NKV) * hd, nout = (int64_t)B * T * NH * hd;
    c.qkv = randn(nqkv, 50, 1.0f);
    c.out = zeros(nout);
    c.lse = zeros(B * NH * T);
    c.R = randn(nout, 51, 1.0f);
    c.ws = zeros(kt()->attention_workspace(T));
    float *dqkv = randn(nqkv, 52, 9.0f); /* garbage: backward must overwrite all of it */
    att_loss(&c);
    kt()->attention_backward(ks(), dqkv, c.R, c.qkv, c.out, c.lse, NULL, B, T, NH, NKV, hd, c.ws);
    fd_check(att_loss, &c, c.qkv, dqkv, nqkv, EPS, RTOL, ATOL, "qkv");
}

TEST(attention_finite_difference_mha) { attention_fd_case(2, 13, 3, 3, 4); }
TEST(attention_finite_difference_gqa) { attention_fd_case(2, 13, 4, 2, 6); }
TEST(attention_finite_difference_mqa) { attention_fd_case(1, 13, 3, 1, 4); }
/* more than one query block (BQ = 64) */
TEST(attention_finite_difference_blocks) { attention_fd_case(1, 150, 2, 1, 4); }

/* Note [attention-mask]: a per-query first key (document starts and a
 * sliding window). Reference 1: the masked forward equals attention run on
 * each document separately (window 0); reference 2: a float64 brute-force
 * softmax over exactly the keys max(start, i - W + 1) <= j <= i; the masked
 * backward against finite differences. T = 150 spans three query blocks,
 * with documents crossing block edges. */
typedef struct {
    att_ctx a;
    const int32_t *lo;
} matt_ctx;

static double matt_loss(void *p) {
    matt_ctx *c = p;
    att_ctx *a = &c->a;
    kt()->attention_forward(ks(), a->out, a->lse, a->qkv, c->lo, a->B, a->T, a->NH, a->NKV, a->hd, a->ws);
    return dot_d(a->out, a->R, (int64_t)a->B * a->T * a->NH * a->hd);
}

/* lo of row b: documents starting at starts[] (ascending, first 0), window W (0: none) */
static void doc_lo(int32_t *lo, int T, const int *starts, int nstarts, int W) {
    for (int i = 0, d = 0; i < T; i++) {
        while (d + 1 < nstarts && starts[d + 1] <= i) d++;
        int w = W > 0 ? i - W + 1 : 0;
        lo[i] = starts[d] > w ? starts[d] : w;
    }
}

static void masked_attention_case(int T, int W, const int *starts, int nstarts, bool fd) {
    const int B = 2, NH = 4, NKV = 2, hd = 6, S = (NH + 2 * NKV) * hd, C = NH * hd;
    int64_t nqkv = (int64_t)B * T * S, nout = (int64_t)B * T * C;
    int32_t *lo = malloc(sizeof(int32_t) * (size_t)B * T);
    doc_lo(lo, T, starts, nstarts, W);
    const int one[1] = {0};
    doc_lo(lo + T, T, one, 1, W); /* row 1: one document */
    matt_ctx c = {.a = {.B = B, .T = T, .NH = NH, .NKV = NKV, .hd = hd}, .lo = lo};
    c.a.qkv = randn(nqkv, 90, 1.0f);
    c.a.out = zeros(nout);
    c.a.lse = zeros(B * NH * T);
    c.a.R = randn(nout, 91, 1.0f);
    c.a.ws = zeros(kt()->attention_workspace(T));
    matt_loss(&c);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *base = c.a.qkv + (int64_t)b * T * S, *q = base + (int64_t)i * S + h * hd;
                int g = h / (NH / NKV), j0 = lo[b * T + i];
                double mx = -1e300, z = 0.0, p[256];
                for (int j = j0; j <= i; j++) {
                    double sc = 0.0;
                    for (int d = 0; d < hd; d++) sc += (double)q[d] * base[(int64_t)j * S + NH * hd + g * hd + d];
                    p[j - j0] = sc / sqrt((double)hd);
                    mx = p[j - j0] > mx ? p[j - j0] : mx;
                }
                for (int j = j0; j <= i; j++) z += (p[j - j0] = exp(p[j - j0] - mx));
                ASSERT_NEAR(c.a.lse[((int64_t)b * NH + h) * T + i], mx + log(z), 1e-5, 1e-5);
                for (int d = 0; d < hd; d++) {
                    double o = 0.0;
                    for (int j = j0; j <= i; j++)
                        o += p[j - j0] / z * base[(int64_t)j * S + (NH + NKV) * hd + g * hd + d];
                    ASSERT_NEAR(c.a.out[((int64_t)b * T + i) * C + h * hd + d], o, 1e-4, 1e-5);
                }
            }
    if (W == 0) { /* each document of row 0 alone, as its own sequence */
        for (int d = 0; d < nstarts; d++) {
            int t0 = starts[d], n = (d + 1 < nstarts ? starts[d + 1] : T) - t0;
            float *out = zeros((int64_t)n * C), *lse = zeros(NH * n);
            kt()->attention_forward(ks(), out, lse, c.a.qkv + (int64_t)t0 * S, NULL, 1, n, NH, NKV, hd, c.a.ws);
            for (int i = 0; i < n; i++)
                for (int k = 0; k < C; k++) ASSERT_NEAR(c.a.out[(int64_t)(t0 + i) * C + k], out[i * C + k], 1e-6, 1e-7);
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < n; i++) ASSERT_NEAR(c.a.lse[h * T + t0 + i], lse[h * n + i], 1e-6, 1e-7);
            free(out);
            free(lse);
        }
    }
    if (fd) {
        float *dqkv = randn(nqkv, 92, 9.0f); /* garbage: backward must overwrite all of it */
        kt()->attention_backward(ks(), dqkv, c.a.R, c.a.qkv, c.a.out, c.a.lse, lo, B, T, NH, NKV, hd, c.a.ws);
        fd_check(matt_loss, &c, c.a.qkv, dqkv, nqkv, EPS, RTOL, ATOL, "qkv");
        free(dqkv);
    }
    free(lo);
}

TEST(attention_document_mask_matches_separate_documents) {
    const int starts[] = {0, 5, 6, 13, 60, 70, 131};
    masked_attention_case(150, 0, starts, 7, false);
    const int small[] = {0, 4, 9};
    masked_attention_case(13, 0, small, 3, true);
}

TEST(attention_sliding_window_and_documents_brute_force) {
    const int starts[] = {0, 5, 6, 13, 60, 70, 131};
    masked_attention_case(150, 17, starts, 7, false);
    masked_attention_case(150, 1, starts, 7, false); /* a query sees itself only */
    const int small[] = {0, 9};
    masked_attention_case(13, 3, small, 2, true);
}

/* The cached path (generation) with a window: new queries at t0 .. t0+n-1
 * against the cache give the rows of the full masked forward. */
TEST(attention_cached_window_matches_forward) {
    const int T = 140, W = 20, NH = 2, NKV = 1, hd = 4, S = (NH + 2 * NKV) * hd, C = NH * hd, t0 = 70, n = 70;
    float *qkv = randn((int64_t)T * S, 93, 1.0f), *out = zeros((int64_t)T * C), *lse = zeros(NH * T);
    float *ws = zeros(kt()->attention_workspace(T)), *kc = zeros(T * NKV * hd), *vc = zeros(T * NKV * hd);
    int32_t lo[140];
    const int one[1] = {0};
    doc_lo(lo, T, one, 1, W);
    kt()->attention_forward(ks(), out, lse, qkv, lo, 1, T, NH, NKV, hd, ws);
    for (int t = 0; t < T; t++)
        for (int d = 0; d < NKV * hd; d++) {
            kc[t * NKV * hd + d] = qkv[(int64_t)t * S + NH * hd + d];
            vc[t * NKV * hd + d] = qkv[(int64_t)t * S + (NH + NKV) * hd + d];
        }
    float *got = zeros((int64_t)n * C);
    kt()->attention_cached(ks(), got, qkv + (int64_t)t0 * S, S, kc, vc, lo + t0, n, t0, NH, NKV, hd, ws);
    ASSERT_ALLCLOSE(got, out + (int64_t)t0 * C, n * C, 1e-6, 1e-7);
}

/* ---------------- cross-entropy ---------------- */
typedef struct {
    float *logits, *work;
    int32_t *tgt;
    int N, V;
} xe_ctx;

static double xe_loss(void *p) {
    xe_ctx *c = p;
    memcpy(c->work, c->logits, sizeof(float) * (size_t)(c->N * c->V));
    return xent_sum(c->work, NULL, c->tgt, c->N, c->V, 1.0f, false);
}

TEST(xent_finite_difference_with_mask) {
    xe_ctx c = {.N = 13, .V = 37};
    c.logits = randn(c.N * c.V, 60, 2.0f);
    c.work = zeros(c.N * c.V);
    c.tgt = malloc(sizeof(int32_t) * (size_t)c.N);
    for (int i = 0; i < c.N; i++) c.tgt[i] = (i * 11) % c.V;
    c.tgt[4] = -1; /* masked */
    float *g = malloc(sizeof(float) * (size_t)(c.N * c.V));
    memcpy(g, c.logits, sizeof(float) * (size_t)(c.N * c.V));
    float losses[13];
    double total = xent_sum(g, losses, c.tgt, c.N, c.V, 1.0f, true);
    ASSERT_EQ(losses[4], 0);
    for (int j = 0; j < c.V; j++) ASSERT_EQ(g[4 * c.V + j], 0);
    double s = 0;
    for (int i = 0; i < c.N; i++) s += losses[i];
    ASSERT_NEAR(total, s, 1e-6, 1e-6);
    fd_check(xe_loss, &c, c.logits, g, c.N * c.V, 1e-2f, RTOL, ATOL, "logits");
}

TEST(lmhead_fused_matches_unfused) {
    int N = 29, C = 11, V = 37;
    float *x = randn(N * C, 70, 1.0f), *w = randn(V * C, 71, 0.5f);
    int32_t tgt[29];
    for (int i = 0; i < N; i++) tgt[i] = (i * 5) % V;
    tgt[3] = -1;
    float scale = 1.0f / 28.0f;
    /* unfused reference: full logits, xent, two matmul backwards */
    float *logits = zeros(N * V), *dx_ref = zeros(N * C), *dw_ref = zeros(V * C);
    kt()->matmul_forward(ks(), logits, x, w, NULL, N, C, V);
    double ref = xent_sum(logits, NULL, tgt, N, V, scale, true);
    kt()->matmul_backward(ks(), dx_ref, dw_ref, NULL, logits, x, w, N, C, V);
    /* fused with a chunk that does not divide N */
    float *ws = zeros(8 * V), *dx = zeros(N * C), *dw = zeros(V * C);
    double got = lmhead_sum(dx, dw, x, w, tgt, scale, N, C, V, ws, 8);
    ASSERT_NEAR(got, ref, 1e-6, 1e-6);
    ASSERT_ALLCLOSE(dx, dx_ref, N * C, 1e-5, 1e-7);
    ASSERT_ALLCLOSE(dw, dw_ref, V * C, 1e-5, 1e-7);
    /* loss only */
    double only = lmhead_sum(NULL, NULL, x, w, tgt, scale, N, C, V, ws, 8);
    ASSERT_NEAR(only, ref, 1e-6, 1e-6);
}

/* T = 2048: attention keeps O(B*H*T) state and O(threads*64*T) scratch, never
 * T x T; rows checked against a direct float64 computation, and the backward
 * pass checked on random directions (dL/dqkv . v against finite differences). */
TEST(attention_long_sequence_without_t_squared_memory) {
    const int B = 1, T = 2048, NH = 2, NKV = 1, hd = 16, S = (NH + 2 * NKV) * hd;
    int64_t nqkv = (int64_t)B * T * S, nout = (int64_t)B * T * NH * hd;
    float *qkv = randn(nqkv, 80, 1.0f), *out = zeros(nout), *lse = zeros(B * NH * T);
    int64_t ws_floats = kt()->attention_workspace(T);
    /* scratch: 2 x 64 x T floats per thread, a sixteenth of one T x T matrix */
    ASSERT_EQ(ws_floats, (int64_t)sharc_threads_get() * 2 * 64 * T);
    ASSERT_TRUE(ws_floats / sharc_threads_get() * 16 <= (int64_t)T * T);
    float *ws = zeros(ws_floats);
    kt()->attention_forward(ks(), out, lse, qkv, NULL, B, T, NH, NKV, hd, ws);
    const int rows[4] = {0, 63, 1000, 2047};
    double *p = malloc(sizeof(double) * T);
    for (int h = 0; h < NH; h++)
        for (int r = 0; r < 4; r++) {
            int i = rows[r];
            const float *q = qkv + (int64_t)i * S + h * hd;
            double mx = -1e300, z = 0.0;
            for (int j = 0; j <= i; j++) {
                const float *k = qkv + (int64_t)j * S + NH * hd;
                double s = 0.0;
                for (int d = 0; d < hd; d++) s += (double)q[d] * k[d];
                p[j] = s / sqrt((double)hd);
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int j = 0; j <= i; j++) z += (p[j] = exp(p[j] - mx));
            ASSERT_NEAR(lse[h * T + i], mx + log(z), 1e-5, 1e-5);
            for (int d = 0; d < hd; d++) {
                double o = 0.0;
                for (int j = 0; j <= i; j++) o += p[j] / z * qkv[(int64_t)j * S + (NH + NKV) * hd + d];
                ASSERT_NEAR(out[(int64_t)i * NH * hd + h * hd + d], o, 1e-4, 1e-5);
            }
        }
    /* backward: directional derivative along a random v versus central differences */
    float *dout = randn(nout, 81, 1.0f), *dqkv = zeros(nqkv), *v = randn(nqkv, 82, 1.0f);
    kt()->attention_backward(ks(), dqkv, dout, qkv, out, lse, NULL, B, T, NH, NKV, hd, ws);
    double analytic = dot_d(dqkv, v, nqkv);
    const float eps = 1e-3f;
    float *shifted = zeros(nqkv);
    double l[2];
    for (int sgn = 0; sgn < 2; sgn++) {
        for (int64_t i = 0; i < nqkv; i++) shifted[i] = qkv[i] + (sgn ? -eps : eps) * v[i];
        kt()->attention_forward(ks(), out, lse, shifted, NULL, B, T, NH, NKV, hd, ws);
        l[sgn] = dot_d(out, dout, nout);
    }
    ASSERT_NEAR(analytic, (l[0] - l[1]) / (2.0 * eps), 2e-3, 1e-2);
}
