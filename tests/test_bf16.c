/* test_bf16.c: the bf16 compute path (docs/ARCHITECTURE.md "Mixed
 * precision"): each bf16 kernel against the fp32 kernel (within 1e-2 of the
 * output's largest value) and against a double-precision product of the
 * bf16-rounded operands (which shows the operands really are rounded);
 * whole-model gradients of both families at odd sizes against fp32 (2e-2).
 * On a CPU without bf16 instructions the kernels run in their emulation
 * (SHARC_BF16=emulate, note [bf16-gemm]); where oneDNN's bf16 GEMM is
 * there, every kernel test runs it too. */
#include "kernel_table.h"
#include "test.h"
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "sharc/comm.h"
#include "../src/device/device_impl.h"
#include "../src/model/tp.h"
#include "sharc/dtype.h"
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "sharc/rng.h"

#include <math.h>
#include <string.h>

static float *randn(int64_t n, uint64_t stream, float std) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = std * sharc_rng_normal(11, stream, (uint64_t)i);
    return p;
}

static float *copy_of(const float *src, int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)n);
    memcpy(p, src, sizeof(float) * (size_t)n);
    return p;
}


/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, int64_t n) {
    double d = 0.0, m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* The modes to test: the emulation always, oneDNN's where it loaded. */
static int modes(sharc_bf16_mode out[2]) {
    int n = 0;
    if (sharc_bf16_mode_get(NULL) == SHARC_BF16_ONEDNN) out[n++] = SHARC_BF16_ONEDNN;
    else fprintf(stderr, "  note: no oneDNN bf16 GEMM on this CPU; testing the emulation only\n");
    out[n++] = SHARC_BF16_EMULATED;
    return n;
}

static void matmul_case(int64_t N, int IC, int OC) {
    const sharc_kernels *k = kt();
    float *x = randn(N * IC, 1, 1.0f), *w = randn((int64_t)OC * IC, 2, 0.1f), *b = randn(OC, 3, 0.1f);
    float *dy = randn(N * OC, 4, 1.0f), *dw0 = randn((int64_t)OC * IC, 5, 0.01f), *db0 = randn(OC, 6, 0.01f);
    /* the engine gathers bf16 weights: w holds bf16 values, as in training */
    sharc_round_f32(w, w, SHARC_DT_BF16, (int64_t)OC * IC);
    float *y32 = malloc(sizeof(float) * (size_t)(N * OC)), *dx32 = malloc(sizeof(float) * (size_t)(N * IC));
    float *dw32 = copy_of(dw0, (int64_t)OC * IC), *db32 = copy_of(db0, OC);
    k->matmul_forward(ks(), y32, x, w, b, N, IC, OC);
    k->matmul_backward(ks(), dx32, dw32, db32, dy, x, w, N, IC, OC);

    /* reference: double sums of bf16-rounded operands, fp32 bias and accumulators */
    float *xb = copy_of(x, N * IC), *dyb = copy_of(dy, N * OC);
    sharc_round_f32(xb, xb, SHARC_DT_BF16, N * IC);
    sharc_round_f32(dyb, dyb, SHARC_DT_BF16, N * OC);
    double *yr = calloc((size_t)(N * OC), sizeof(double)), *dxr = calloc((size_t)(N * IC), sizeof(double));
    double *dwr = calloc((size_t)OC * IC, sizeof(double));
    for (int64_t r = 0; r < N; r++)
        for (int o = 0; o < OC; o++) {
            double acc = b[o];
            for (int i = 0; i < IC; i++) acc += (double)xb[r * IC + i] * w[(int64_t)o * IC + i];
            yr[r * OC + o] = acc;
            double g = dyb[r * OC + o];
            for (int i = 0; i < IC; i++) {
                dxr[r * IC + i] += g * w[(int64_t)o * IC + i];
                dwr[(int64_t)o * IC + i] += g * xb[r * IC + i];
            }
        }

    sharc_bf16_mode ms[2];
    int nm = modes(ms);
    for (int mi = 0; mi < nm; mi++) {
        sharc_bf16_mode_set(ms[mi]);
        float *y = malloc(sizeof(float) * (size_t)(N * OC)), *dx = malloc(sizeof(float) * (size_t)(N * IC));
        float *dw = copy_of(dw0, (int64_t)OC * IC), *db = copy_of(db0, OC);
        k->matmul_forward_bf16(ks(), y, x, w, b, N, IC, OC);
        k->matmul_backward_bf16(ks(), dx, dw, db, dy, x, w, N, IC, OC);
        /* against fp32: within bf16's rounding */
        double ey = rel_err(y, y32, N * OC), edx = rel_err(dx, dx32, N * IC), edw = rel_err(dw, dw32, (int64_t)OC * IC);
        fprintf(stderr, "  mode %d N=%lld IC=%d OC=%d: vs fp32 y %.2e dx %.2e dw %.2e\n", (int)ms[mi], (long long)N, IC,
                OC, ey, edx, edw);
        ASSERT_TRUE(ey < 1e-2 && edx < 1e-2 && edw < 1e-2);
        /* and visibly rounded: x and dy are not bf16 values, so the results differ from fp32 */
        ASSERT_TRUE(ey > 1e-5 && edx > 1e-5 && edw > 1e-5);
        /* against the bf16-operand reference: fp32 accumulation only */
        float *yrf = malloc(sizeof(float) * (size_t)(N * OC)), *dxrf = malloc(sizeof(float) * (size_t)(N * IC));
        float *dwrf = malloc(sizeof(float) * (size_t)OC * IC);
        for (int64_t i = 0; i < N * OC; i++) yrf[i] = (float)yr[i];
        for (int64_t i = 0; i < N * IC; i++) dxrf[i] = (float)dxr[i];
        for (int64_t i = 0; i < (int64_t)OC * IC; i++) dwrf[i] = (float)(dwr[i] + dw0[i]);
        ASSERT_TRUE(rel_err(y, yrf, N * OC) < 1e-5);
        ASSERT_TRUE(rel_err(dx, dxrf, N * IC) < 1e-5);
        ASSERT_TRUE(rel_err(dw, dwrf, (int64_t)OC * IC) < 1e-5);
        /* the bias gradient sums the fp32 dy, as fp32 does */
        ASSERT_ALLCLOSE(db, db32, OC, 1e-6, 1e-7);
        /* note [bf16-acts]: the *_b16 slots on x and w given in bf16 give the
         * same bits as the float slots, which round them per call */
        uint16_t *xh = malloc(sizeof(uint16_t) * (size_t)(N * IC)), *wh = malloc(sizeof(uint16_t) * (size_t)OC * IC);
        sharc_from_f32(xh, x, SHARC_DT_BF16, N * IC);
        sharc_from_f32(wh, w, SHARC_DT_BF16, (int64_t)OC * IC);
        float *y2 = malloc(sizeof(float) * (size_t)(N * OC)), *dx2 = malloc(sizeof(float) * (size_t)(N * IC));
        float *dw2 = copy_of(dw0, (int64_t)OC * IC), *db2 = copy_of(db0, OC);
        k->matmul_forward_b16(ks(), y2, xh, wh, b, N, IC, OC);
        k->matmul_backward_b16(ks(), dx2, dw2, db2, dy, xh, wh, N, IC, OC);
        ASSERT_TRUE(!memcmp(y2, y, sizeof(float) * (size_t)(N * OC)));
        ASSERT_TRUE(!memcmp(dx2, dx, sizeof(float) * (size_t)(N * IC)));
        ASSERT_TRUE(!memcmp(dw2, dw, sizeof(float) * (size_t)OC * IC));
        ASSERT_TRUE(!memcmp(db2, db, sizeof(float) * (size_t)OC));
        free(xh), free(wh), free(y2), free(dx2), free(dw2), free(db2);
        free(y), free(dx), free(dw), free(db), free(yrf), free(dxrf), free(dwrf);
    }
    free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(y32), free(dx32), free(dw32), free(db32);
    free(yr), free(dxr), free(dwr), free(xb), free(dyb);
}

TEST(bf16_matmul_matches_fp32_odd) { matmul_case(37, 53, 29); }
/* large enough for oneDNN's path (M*N*K >= 2^24) and several threads */
TEST(bf16_matmul_matches_fp32_large) { matmul_case(301, 256, 259); }

TEST(bf16_lmhead_matches_fp32) {
    const sharc_kernels *k = kt();
    const int N = 23, C = 19, V = 41;
    const int64_t chunk = 7;
    float *x = randn(N * C, 21, 1.0f), *w = randn((int64_t)V * C, 22, 0.3f);
    sharc_round_f32(w, w, SHARC_DT_BF16, (int64_t)V * C);
    float *xb = copy_of(x, N * C);
    sharc_round_f32(xb, xb, SHARC_DT_BF16, N * C);
    int32_t tg[23];
    for (int i = 0; i < N; i++) tg[i] = (int32_t)(sharc_rng_u64(3, 4, (uint64_t)i) % V);
    tg[5] = -1;
    float *ws = malloc(sizeof(float) * (size_t)(chunk * V));
    float *dx32 = malloc(sizeof(float) * N * C), *dw32 = calloc((size_t)V * C, sizeof(float));
    double l32 = lmhead_sum(dx32, dw32, x, w, tg, 0.05f, N, C, V, ws, chunk);
    sharc_bf16_mode ms[2];
    int nm = modes(ms);
    for (int mi = 0; mi < nm; mi++) {
        sharc_bf16_mode_set(ms[mi]);
        float *dx = malloc(sizeof(float) * N * C), *dw = calloc((size_t)V * C, sizeof(float));
        double l16 = 0.0;
        k->lmhead_xent_bf16(ks(), &l16, dx, dw, x, w, tg, 0.05f, N, C, V, ws, chunk);
        double edx = rel_err(dx, dx32, N * C), edw = rel_err(dw, dw32, (int64_t)V * C);
        fprintf(stderr, "  mode %d: loss %.6f vs %.6f, dx %.2e dw %.2e\n", (int)ms[mi], l16, l32, edx, edw);
        ASSERT_NEAR(l16, l32, 1e-2, 0);
        ASSERT_TRUE(l16 != l32); /* x was rounded */
        ASSERT_TRUE(edx < 1e-2 && edw < 1e-2);
        /* the loss against one computed in double from bf16-rounded x and w */
        double ref = 0.0;
        for (int r = 0; r < N; r++) {
            if (tg[r] < 0) continue;
            double lg[41], mx = -1e300, s = 0.0;
            for (int v = 0; v < V; v++) {
                lg[v] = 0.0;
                for (int c = 0; c < C; c++) lg[v] += (double)xb[r * C + c] * w[(int64_t)v * C + c];
                mx = fmax(mx, lg[v]);
            }
            for (int v = 0; v < V; v++) s += exp(lg[v] - mx);
            ref += mx + log(s) - lg[tg[r]];
        }
        ASSERT_NEAR(l16, ref, 1e-5, 0);
        free(dx), free(dw);
    }
    free(x), free(xb), free(w), free(ws), free(dx32), free(dw32);
}

/* ------------------------------------------------------------ the model */

typedef struct {
    sharc_model *m;
    sharc_fsdp *e;
} engine_ctx;

/* a16: tell the model its param_dtype before the plan (note [bf16-acts]:
 * bf16 activations when computing in bf16); ac, tiles: checkpointing and
 * the tiled MLP; hd: Llama's head_dim (0: C / heads). */
static void model_setup_opts(engine_ctx *x, sharc_family f, sharc_dtype pdt, int B, int T, bool a16, bool ac, int tiles,
                             int hd) {
    sharc_model_config c;
    sharc_model_config_default(&c, f);
    c.num_layers = 2;
    c.embed_dim = 48;
    c.num_heads = 3;
    c.num_kv_heads = f == SHARC_FAMILY_LLAMA ? 1 : 3;
    c.ff_hidden_dim = f == SHARC_FAMILY_LLAMA ? 70 : 0;
    c.vocab_size = 37;
    c.max_seq_len = 16;
    c.init_std = 0.2f;
    c.tie_embeddings = f == SHARC_FAMILY_GPT2;
    if (f == SHARC_FAMILY_LLAMA && hd) c.head_dim = hd;
    ASSERT_OK(sharc_model_init(&x->m, &c, NULL));
    if (a16) sharc_model_set_param_dtype(x->m, pdt);
    sharc_model_set_tiled_mlp(x->m, tiles);
    ASSERT_OK(sharc_model_plan(x->m, B, T, ac));
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    fc.param_dtype = pdt;
    ASSERT_OK(sharc_fsdp_init(&x->e, sharc_model_units(x->m), sharc_model_num_units(x->m), sharc_model_schedule(x->m),
                              &fc, NULL, sharc_model_device(x->m)));
    sharc_fsdp_init_params(x->e, 42);
    sharc_fsdp_zero_grad(x->e);
}

static void model_setup(engine_ctx *x, sharc_family f, sharc_dtype pdt, int B, int T) {
    model_setup_opts(x, f, pdt, B, T, false, false, 1, 0);
}

static void model_free(engine_ctx *x) {
    sharc_fsdp_free(x->e);
    sharc_model_free(x->m);
}

/* Gradients of bf16 compute against fp32 compute on the same (bf16-valued)
 * weights, per parameter: ||g16 - g32|| / ||g32|| < 2e-2, and not equal.
 * (Against fp32 weights too, printed: the weights' own rounding moves the
 * tiny Llama's embedding gradient by ~3e-2 already, compute or not.) */
static void model_grads(sharc_family f) {
    const int B = 2, T = 13;
    int32_t in[26], tg[26];
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)(sharc_rng_u64(5, 1, (uint64_t)i) % 37);
        tg[i] = (int32_t)(sharc_rng_u64(5, 2, (uint64_t)i) % 37);
    }
    tg[3] = -1;
    engine_ctx a, b, c;
    /* a: fp32 compute on bf16 weights (bf16 compute off), b: bf16 compute, c: fp32 weights */
    sharc_bf16_mode_set(SHARC_BF16_NONE);
    model_setup(&a, f, SHARC_DT_BF16, B, T);
    ASSERT_TRUE(!sharc_model_computes_bf16(a.m, a.e));
    double la = sharc_model_forward_backward(a.m, a.e, in, tg, 1.0f / 25);
    sharc_bf16_mode_set(SHARC_BF16_EMULATED);
    model_setup(&b, f, SHARC_DT_BF16, B, T);
    ASSERT_TRUE(sharc_model_computes_bf16(b.m, b.e));
    double lb = sharc_model_forward_backward(b.m, b.e, in, tg, 1.0f / 25);
    model_setup(&c, f, SHARC_DT_F32, B, T);
    ASSERT_TRUE(!sharc_model_computes_bf16(c.m, c.e));
    double lc = sharc_model_forward_backward(c.m, c.e, in, tg, 1.0f / 25);
    fprintf(stderr, "  loss fp32 %.6f, bf16 weights %.6f, bf16 compute %.6f\n", lc, la, lb);
    ASSERT_NEAR(lb, la, 2e-2, 0);
    ASSERT_NEAR(lb, lc, 2e-2, 0);
    ASSERT_TRUE(lb != la);
    double worst = 0.0;
    for (int u = 0; u < sharc_fsdp_num_units(b.e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(b.e, u);
        const float *g16 = sharc_fsdp_shard_grads(b.e, u), *g32 = sharc_fsdp_shard_grads(a.e, u);
        const float *gf = sharc_fsdp_shard_grads(c.e, u);
        for (int i = 0; i < s->nparams; i++) {
            const sharc_param_spec *p = &s->params[i];
            double d = 0.0, n = 0.0, df = 0.0, nf = 0.0;
            for (int64_t k = 0; k < p->numel; k++) {
                double e = (double)g16[p->offset + k] - g32[p->offset + k];
                double ef = (double)g16[p->offset + k] - gf[p->offset + k];
                d += e * e;
                n += (double)g32[p->offset + k] * g32[p->offset + k];
                df += ef * ef;
                nf += (double)gf[p->offset + k] * gf[p->offset + k];
            }
            double r = n > 0 ? sqrt(d / n) : sqrt(d);
            fprintf(stderr, "  %-44s %.2e of fp32 compute, %.2e of fp32 weights\n", p->name, r,
                    nf > 0 ? sqrt(df / nf) : sqrt(df));
            if (r > worst) worst = r;
            if (!(r < 2e-2))
                TEST_FAIL_AT("%s: bf16 gradient %.3e from fp32 (relative norm), expected < 2e-2", p->name, r);
        }
    }
    fprintf(stderr, "  worst parameter gradient: %.3e of its norm\n", worst);
    ASSERT_TRUE(worst > 0.0);
    model_free(&a);
    model_free(&b);
    model_free(&c);
}

TEST(bf16_model_gpt2_gradients_match_fp32) { model_grads(SHARC_FAMILY_GPT2); }
TEST(bf16_model_llama_gradients_match_fp32) { model_grads(SHARC_FAMILY_LLAMA); }

/* A backend without bf16 kernels: the dispatcher's fallbacks are its fp32
 * slots and bf16_compute says false, so the model computes in fp32. */
TEST(bf16_slots_fall_back_to_fp32) {
    sharc_kernels k = *kt();
    k.bf16_compute = NULL;
    k.matmul_forward_bf16 = NULL;
    k.matmul_backward_bf16 = NULL;
    k.lmhead_xent_bf16 = NULL;
    ASSERT_OK(sharc_device_kernels_complete("test", &k));
    ASSERT_TRUE(!k.bf16_compute());
    ASSERT_TRUE(k.matmul_forward_bf16 == kt()->matmul_forward && k.matmul_backward_bf16 == kt()->matmul_backward &&
                k.lmhead_xent_bf16 == kt()->lmhead_xent);
    /* one bf16 slot missing: none is used (bf16_compute false) */
    k = *kt();
    k.lmhead_xent_bf16 = NULL;
    ASSERT_OK(sharc_device_kernels_complete("test", &k));
    ASSERT_TRUE(!k.bf16_compute());
    /* the CPU's own answer follows the mode */
    sharc_bf16_mode_set(SHARC_BF16_NONE);
    ASSERT_TRUE(!kt()->bf16_compute());
    sharc_bf16_mode_set(SHARC_BF16_EMULATED);
    ASSERT_TRUE(kt()->bf16_compute());
}

/* Note [bf16-head] (src/model/model.c): the vocabulary-parallel head of tp
 * with x and its rows of w rounded once (the *_b16 slots) gives the bits of
 * the per-chunk path (the *_bf16 slots rounding them in every chunk's two
 * products), within 1e-2 of fp32 and not equal to it; odd sizes, rows [11,
 * 34) of a 53-word vocabulary, 4 chunks, a 1-rank group. */
TEST(bf16_tp_head_once_matches_per_chunk) {
    const int N = 37, C = 29, v0 = 11, Vl = 23;
    const int64_t chunk = 10;
    sharc_comm *self;
    ASSERT_OK(sharc_comm_self(&self));
    sharc_tp_link link = {0};
    ASSERT_OK(sharc_tp_link_init(&link, self, sharc_device_cpu()));
    float *x = randn(N * C, 31, 1.0f), *w = randn((int64_t)Vl * C, 32, 0.3f);
    sharc_round_f32(w, w, SHARC_DT_BF16, (int64_t)Vl * C); /* gathered bf16 weights */
    int32_t tg[37];
    for (int i = 0; i < N; i++) tg[i] = (int32_t)(sharc_rng_u64(3, 7, (uint64_t)i) % 53);
    tg[4] = -1;
    float *ws = malloc(sizeof(float) * (size_t)(chunk * Vl)), *red = malloc(sizeof(float) * (size_t)(3 * chunk));
    uint16_t *xh = malloc(sizeof(uint16_t) * (size_t)(N * C)), *wh = malloc(sizeof(uint16_t) * (size_t)(Vl * C));
    float *dx[3], *dw[3];
    double l[3];
    sharc_bf16_mode ms[2];
    int nm = modes(ms);
    for (int mi = 0; mi < nm; mi++) {
        sharc_bf16_mode_set(ms[mi]);
        sharc_kernels k32 = *kt(), k16 = *kt(); /* k16: the model's bf16 table (note [bf16-compute]) */
        k16.matmul_forward = k16.matmul_forward_bf16;
        k16.matmul_backward = k16.matmul_backward_bf16;
        for (int p = 0; p < 3; p++) {
            dx[p] = malloc(sizeof(float) * (size_t)(N * C));
            dw[p] = randn((int64_t)Vl * C, 33, 0.01f); /* dw accumulates */
        }
        sharc_tp_lmhead_xent(&k32, ks(), &link, &l[0], dx[0], dw[0], x, w, NULL, NULL, tg, 0.05f, N, C, v0, Vl, ws, red,
                             chunk);
        sharc_tp_lmhead_xent(&k16, ks(), &link, &l[1], dx[1], dw[1], x, w, NULL, NULL, tg, 0.05f, N, C, v0, Vl, ws, red,
                             chunk);
        k16.cast(ks(), xh, SHARC_DT_BF16, x, SHARC_DT_F32, N * C);
        k16.cast(ks(), wh, SHARC_DT_BF16, w, SHARC_DT_F32, (int64_t)Vl * C);
        sharc_tp_lmhead_xent(&k16, ks(), &link, &l[2], dx[2], dw[2], x, w, xh, wh, tg, 0.05f, N, C, v0, Vl, ws, red,
                             chunk);
        double edx = rel_err(dx[2], dx[0], N * C), edw = rel_err(dw[2], dw[0], (int64_t)Vl * C);
        fprintf(stderr, "  mode %d: loss %a per chunk %a fp32 %.6f; vs fp32 dx %.2e dw %.2e\n", (int)ms[mi], l[2], l[1],
                l[0], edx, edw);
        ASSERT_TRUE(l[2] == l[1]);
        ASSERT_TRUE(memcmp(dx[2], dx[1], sizeof(float) * (size_t)(N * C)) == 0);
        ASSERT_TRUE(memcmp(dw[2], dw[1], sizeof(float) * (size_t)(Vl * C)) == 0);
        ASSERT_NEAR(l[2], l[0], 1e-2, 0);
        ASSERT_TRUE(l[2] != l[0]); /* x was rounded */
        ASSERT_TRUE(edx < 1e-2 && edw < 1e-2 && edx > 0);
        for (int p = 0; p < 3; p++) free(dx[p]), free(dw[p]);
    }
    sharc_bf16_mode_set(SHARC_BF16_EMULATED);
    free(x), free(w), free(ws), free(red), free(xh), free(wh);
    sharc_tp_link_free(&link);
    sharc_comm_free(self);
}

/* ------------------------------------------------- bf16 activations */

/* The largest per-parameter ||ga - gb|| / ||gb|| over the model's gradients. */
static double worst_grad_err(const engine_ctx *a, const engine_ctx *b) {
    double worst = 0.0;
    for (int u = 0; u < sharc_fsdp_num_units(a->e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(a->e, u);
        const float *ga = sharc_fsdp_shard_grads(a->e, u), *gb = sharc_fsdp_shard_grads(b->e, u);
        for (int i = 0; i < s->nparams; i++) {
            const sharc_param_spec *p = &s->params[i];
            double d = 0.0, n = 0.0;
            for (int64_t k = 0; k < p->numel; k++) {
                double e = (double)ga[p->offset + k] - gb[p->offset + k];
                d += e * e;
                n += (double)gb[p->offset + k] * gb[p->offset + k];
            }
            double r = n > 0 ? sqrt(d / n) : sqrt(d);
            if (r > worst) worst = r;
        }
    }
    return worst;
}

/* One bf16-activation model (note [bf16-acts]) set up and run, its planned
 * activation bytes checked against what its plan allocated. */
static double run_acts16(engine_ctx *x, sharc_family f, bool ac, int tiles, int hd, const int32_t *in,
                         const int32_t *tg) {
    sharc_mem_stats s0, s1;
    sharc_mem_get(&s0);
    model_setup_opts(x, f, SHARC_DT_BF16, 2, 13, true, ac, tiles, hd);
    sharc_mem_get(&s1);
    int64_t got = s1.current[SHARC_MEM_ACTIVATIONS] - s0.current[SHARC_MEM_ACTIVATIONS];
    if (got != sharc_model_activation_bytes(x->m, 2, 13, ac))
        TEST_FAIL_AT("family %d ac %d tiles %d hd %d: %lld bytes of activations allocated, %lld planned", (int)f, ac,
                     tiles, hd, (long long)got, (long long)sharc_model_activation_bytes(x->m, 2, 13, ac));
    return sharc_model_forward_backward(x->m, x->e, in, tg, 1.0f / 25);
}

/* Note [bf16-acts] under SHARC_BF16=emulate, on odd sizes: the forward reads
 * exactly the bf16 values the per-call rounding gave (the loss equal to the
 * bit to bf16 compute on fp32 activations); gradients within 2e-2 of fp32
 * compute; checkpointing recomputes the same bits; the tiled MLP within fp32
 * summation order; fewer activation bytes, planned = allocated. hd: Llama's
 * head_dim, making the attention output wider than C (the widened copy in
 * dfca, or in its own buffer). */
static void acts16_case(sharc_family f, int hd) {
    int32_t in[26], tg[26];
    for (int i = 0; i < 26; i++) {
        in[i] = (int32_t)(sharc_rng_u64(5, 1, (uint64_t)i) % 37);
        tg[i] = (int32_t)(sharc_rng_u64(5, 2, (uint64_t)i) % 37);
    }
    tg[3] = -1;
    engine_ctx a, b, d, dac, dt;
    sharc_bf16_mode_set(SHARC_BF16_NONE); /* a: fp32 compute on bf16 weights */
    model_setup_opts(&a, f, SHARC_DT_BF16, 2, 13, false, false, 1, hd);
    double la = sharc_model_forward_backward(a.m, a.e, in, tg, 1.0f / 25);
    sharc_bf16_mode_set(SHARC_BF16_EMULATED); /* b: bf16 compute on fp32 activations */
    model_setup_opts(&b, f, SHARC_DT_BF16, 2, 13, false, false, 1, hd);
    double lb = sharc_model_forward_backward(b.m, b.e, in, tg, 1.0f / 25);
    double ld = run_acts16(&d, f, false, 1, hd, in, tg);
    double lac = run_acts16(&dac, f, true, 1, hd, in, tg);
    double lt = run_acts16(&dt, f, false, 3, hd, in, tg);
    int64_t bytes_b = sharc_model_activation_bytes(b.m, 2, 13, false),
            bytes_d = sharc_model_activation_bytes(d.m, 2, 13, false);
    double e_fp32 = worst_grad_err(&d, &a), e_b = worst_grad_err(&d, &b), e_ac = worst_grad_err(&dac, &d);
    double e_tiles = worst_grad_err(&dt, &d);
    fprintf(stderr,
            "  family %d hd %d: loss fp32 %a, bf16 %a, bf16 acts %a; gradients vs fp32 %.2e, vs fp32 acts %.2e, "
            "checkpointed %.2e, tiled %.2e; activations %lld -> %lld bytes\n",
            (int)f, hd, la, lb, ld, e_fp32, e_b, e_ac, e_tiles, (long long)bytes_b, (long long)bytes_d);
    ASSERT_TRUE(ld == lb);
    ASSERT_TRUE(lac == ld);
    ASSERT_NEAR(lt, ld, 1e-5, 1e-6);
    ASSERT_TRUE(e_fp32 < 2e-2 && e_fp32 > 0);
    ASSERT_TRUE(e_b < 2e-2 && e_b > 0); /* attention's backward now reads the bf16 output */
    ASSERT_TRUE(e_ac == 0.0);
    ASSERT_TRUE(e_tiles < 1e-4);
    /* the bytes saved, exactly: ln1, att, ln2 and fca of the 2 blocks at 2
     * bytes instead of 4, less one block's norms and biases in fp32 (wsm)
     * and the widened attention output when neither tmp nor dfca holds it,
     * and GPT-2's dfca, which fp32 activations do without (note [gemm-gelu]) */
    const int64_t N = 26, C = 48, H = f == SHARC_FAMILY_LLAMA ? (hd ? hd : 16) : 16;
    const int64_t AD = 3 * H, QKV = f == SHARC_FAMILY_LLAMA ? 5 * H : 3 * C;
    const int64_t Fa = f == SHARC_FAMILY_LLAMA ? 70 : 4 * C, F = f == SHARC_FAMILY_LLAMA ? 140 : 4 * C;
    const int64_t small = f == SHARC_FAMILY_LLAMA ? 2 * C : 4 * C + QKV + C + F + C; /* norms (and GPT-2's biases) */
    int64_t want = 2 * (2 * N * C + N * AD + N * Fa) * 2 - small * 4;
    if (AD > C && Fa < AD) want -= N * AD * 4;
    if (f == SHARC_FAMILY_GPT2) want -= N * Fa * 4; /* dfca: planned for GPT-2 only to hold fca in fp32 (bf16 acts) */
    ASSERT_EQ(bytes_b - bytes_d, want);
    /* note [gathered16]: d's blocks are gathered in bf16, b's in fp32: every
     * non-root slot (the blocks are the largest non-root units here: Llama's
     * embedding and head, GPT-2's tied embedding are roots or smaller) at
     * half the floats; the engine allocated what it planned */
    const int64_t blk = sharc_model_units(d.m)[1].numel; /* one process: no padding */
    const int64_t mats = QKV * C + C * AD + F * C + C * Fa;
    ASSERT_EQ(blk - mats, small);
    int64_t gb = sharc_fsdp_planned_bytes(b.e, SHARC_MEM_GATHERED),
            gd = sharc_fsdp_planned_bytes(d.e, SHARC_MEM_GATHERED);
    fprintf(stderr, "  gathered: %lld -> %lld bytes (blocks of %lld elements)\n", (long long)gb, (long long)gd,
            (long long)blk);
    /* two block slots (the one the model holds, one prefetched: note
     * [gathered-bound]) of blk floats before, blk / 2 after */
    ASSERT_EQ(gb - gd, 2 * 4 * (blk - (blk + 1) / 2));
    model_free(&a), model_free(&b), model_free(&d), model_free(&dac), model_free(&dt);
}

TEST(bf16_acts_gpt2_match_fp32) { acts16_case(SHARC_FAMILY_GPT2, 0); }
TEST(bf16_acts_llama_match_fp32) {
    acts16_case(SHARC_FAMILY_LLAMA, 0);
    acts16_case(SHARC_FAMILY_LLAMA, 20); /* attention 60 wide > C 48: widened into dfca (70 wide) */
    acts16_case(SHARC_FAMILY_LLAMA, 32); /* 96 wide: its own buffer */
}

/* Without bf16 compute (the mode NONE: a CPU without bf16 instructions) the
 * plan keeps fp32 activations: the same bytes as an fp32 plan. */
TEST(bf16_acts_off_without_bf16_compute) {
    engine_ctx a, b;
    sharc_bf16_mode_set(SHARC_BF16_NONE);
    model_setup_opts(&a, SHARC_FAMILY_GPT2, SHARC_DT_BF16, 2, 13, true, false, 1, 0);
    model_setup_opts(&b, SHARC_FAMILY_GPT2, SHARC_DT_F32, 2, 13, false, false, 1, 0);
    ASSERT_EQ(sharc_model_activation_bytes(a.m, 2, 13, false), sharc_model_activation_bytes(b.m, 2, 13, false));
    sharc_bf16_mode_set(SHARC_BF16_EMULATED);
    model_free(&a), model_free(&b);
}
