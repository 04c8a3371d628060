/* test_device.c: the device layer (sharc/device.h) and the element kernels
 * of the kernel table (sharc/kernels.h). References: the byte counters of
 * sharc/alloc.h, plain memcpy/memset, plain loops over the scalar
 * conversions of sharc/dtype.h and the generator of sharc/rng.h, AdamW's
 * formula in double, and the kernels themselves called without the new
 * options (a NULL weight gradient, a position offset) on the equivalent
 * inputs; the fused slots (adamw_multi, sumsq_multi, add_*norm_forward) against the
 * unfused calls they replace, bit for bit. */
#include "../src/device/device_impl.h"
#include "grad_check.h"
#include "kernel_table.h"
#include "sharc/blas.h"
#include "sharc/model.h"
#include "sharc/prof.h"

#include <string.h>
#include <time.h>

static int64_t cur(sharc_mem_cat c) {
    sharc_mem_stats m;
    sharc_mem_get(&m);
    return m.current[c];
}

TEST(device_open_and_errors) {
    sharc_device *d;
    ASSERT_OK(sharc_device_open("cpu", 0, &d));
    ASSERT_TRUE(d == sharc_device_cpu());
    ASSERT_TRUE(sharc_device_is_host(d));
    ASSERT_TRUE(strcmp(sharc_device_name(d), "cpu") == 0);
    ASSERT_TRUE(sharc_device_open("tpu", 0, &d) == SHARC_ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(sharc_last_error(), "'tpu'") && strstr(sharc_last_error(), "cpu"));
    ASSERT_TRUE(sharc_device_open("cpu", 1, &d) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "cpu device 1"));
    /* cuda is always listed; where it cannot run, the probe names what is
     * missing (not built, no driver, no GPU, no cuBLASLt) */
    sharc_status st = sharc_device_open("cuda", 0, &d);
    if (st != SHARC_OK) {
        ASSERT_TRUE(st == SHARC_ERR_UNSUPPORTED);
        const char *e = sharc_last_error();
        ASSERT_TRUE(strstr(e, "cuda: ") &&
                    (strstr(e, "not built") || strstr(e, "driver") || strstr(e, "GPU") || strstr(e, "cuBLASLt")));
    } else {
        ASSERT_TRUE(!sharc_device_is_host(d) && strcmp(sharc_device_name(d), "cuda") == 0);
    }
}

TEST(device_alloc_is_accounted_zeroed_aligned) {
    sharc_device *d = sharc_device_cpu();
    int64_t a0 = cur(SHARC_MEM_ACTIVATIONS), o0 = cur(SHARC_MEM_OPTIM);
    unsigned char *a = sharc_device_alloc(d, 1000, SHARC_MEM_ACTIVATIONS);
    float *b = sharc_device_alloc(d, 4096 * sizeof(float), SHARC_MEM_OPTIM);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(cur(SHARC_MEM_ACTIVATIONS) - a0, 1000);
    ASSERT_EQ(cur(SHARC_MEM_OPTIM) - o0, 4096 * 4);
    ASSERT_EQ((uintptr_t)a % 64, 0);
    ASSERT_EQ((uintptr_t)b % 64, 0);
    for (int i = 0; i < 1000; i++) ASSERT_EQ(a[i], 0);
    for (int i = 0; i < 4096; i++) ASSERT_TRUE(b[i] == 0.0f);
    sharc_mem_stats dm;
    sharc_device_mem_get(d, &dm); /* a host device reports the host counters */
    ASSERT_EQ(dm.current[SHARC_MEM_OPTIM], cur(SHARC_MEM_OPTIM));
    sharc_device_free(d, a); /* out of allocation order */
    ASSERT_EQ(cur(SHARC_MEM_ACTIVATIONS), a0);
    sharc_device_free(d, b);
    ASSERT_EQ(cur(SHARC_MEM_OPTIM), o0);
    sharc_device_free(d, NULL);
    ASSERT_TRUE(sharc_device_alloc(d, 8, (sharc_mem_cat)99) == NULL);
    ASSERT_TRUE(strstr(sharc_last_error(), "category 99"));
}

TEST(device_copy_memset_streams_events) {
    sharc_device *d = sharc_device_cpu();
    float *x = sharc_device_alloc(d, 64 * sizeof(float), SHARC_MEM_OTHER);
    float *y = sharc_device_alloc(d, 64 * sizeof(float), SHARC_MEM_OTHER);
    float host[64], back[64];
    for (int i = 0; i < 64; i++) host[i] = (float)i * 0.5f - 3.0f;
    sharc_stream *s;
    ASSERT_OK(sharc_device_stream_new(d, &s));
    ASSERT_TRUE(s == sharc_device_stream(d)); /* one implicit stream on the CPU */
    ASSERT_OK(sharc_device_copy(d, x, host, sizeof host, SHARC_COPY_HOST_TO_DEVICE, s));
    ASSERT_OK(sharc_device_copy(d, y, x, sizeof host, SHARC_COPY_DEVICE_TO_DEVICE, NULL));
    sharc_event *ev;
    ASSERT_OK(sharc_device_event_new(d, &ev));
    bool done = false;
    ASSERT_OK(sharc_device_event_query(ev, &done)); /* never recorded: reached */
    ASSERT_TRUE(done);
    ASSERT_OK(sharc_device_event_record(ev, s));
    done = false;
    ASSERT_OK(sharc_device_event_query(ev, &done)); /* the CPU's work ran when called */
    ASSERT_TRUE(done);
    ASSERT_OK(sharc_device_event_wait(ev, sharc_device_stream(d)));
    ASSERT_OK(sharc_device_event_synchronize(ev));
    sharc_device_event_free(ev);
    ASSERT_OK(sharc_device_copy(d, back, y, sizeof back, SHARC_COPY_DEVICE_TO_HOST, s));
    ASSERT_OK(sharc_device_synchronize(s));
    ASSERT_TRUE(memcmp(back, host, sizeof host) == 0);
    ASSERT_OK(sharc_device_memset0(d, y + 8, 16 * sizeof(float), s));
    ASSERT_OK(sharc_device_copy(d, back, y, sizeof back, SHARC_COPY_DEVICE_TO_HOST, s));
    for (int i = 0; i < 64; i++) ASSERT_TRUE(back[i] == (i >= 8 && i < 24 ? 0.0f : host[i]));
    /* refused with a message, nothing written */
    ASSERT_TRUE(sharc_device_copy(d, x + 4, x, 16 * sizeof(float), SHARC_COPY_DEVICE_TO_DEVICE, s) ==
                SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "overlapping"));
    ASSERT_TRUE(sharc_device_copy(d, NULL, x, 4, SHARC_COPY_DEVICE_TO_HOST, s) == SHARC_ERR_INVALID);
    ASSERT_TRUE(sharc_device_copy(d, y, x, 4, (sharc_copy_kind)7, s) == SHARC_ERR_INVALID);
    sharc_device_stream_free(s);
    sharc_device_free(d, x);
    sharc_device_free(d, y);
}

static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

TEST(device_timed_events) {
    sharc_device *d = sharc_device_cpu();
    sharc_stream *s = sharc_device_stream(d);
    sharc_event *a, *b, *plain;
    ASSERT_OK(sharc_device_event_new_timed(d, &a));
    ASSERT_OK(sharc_device_event_new_timed(d, &b));
    ASSERT_OK(sharc_device_event_new(d, &plain));
    double dt = -1.0;
    ASSERT_TRUE(sharc_device_event_elapsed(a, b, &dt) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "never recorded"));
    ASSERT_OK(sharc_device_event_record(a, s));
    ASSERT_OK(sharc_device_event_record(plain, s));
    sleep_ms(20);
    ASSERT_OK(sharc_device_event_record(b, s));
    ASSERT_OK(sharc_device_event_synchronize(b));
    ASSERT_OK(sharc_device_event_elapsed(a, b, &dt));
    ASSERT_TRUE(dt >= 0.019 && dt < 5.0); /* the host clock on the CPU: at least the sleep */
    ASSERT_TRUE(sharc_device_event_elapsed(plain, b, &dt) == SHARC_ERR_INVALID);
    ASSERT_TRUE(strstr(sharc_last_error(), "without timing"));
    sharc_device_event_free(a);
    sharc_device_event_free(b);
    sharc_device_event_free(plain);
}

/* one row of the profile report: self and inclusive ms, GFLOP; false if absent */
static bool prof_row(const char *text, const char *name, double *self, double *incl, double *gflop) {
    char key[64];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(text, key);
    char unit[8];
    double calls;
    return p && sscanf(p + strlen(key), "%lf %7s %lf %lf %lf", self, unit, incl, &calls, gflop) == 5;
}

/* note [prof]: nested regions on the host clock and, with the CPU device
 * registered, through its timed events (host stamps); known sleeps are the
 * reference: A (10 ms of its own) holds B (20 ms) */
TEST(prof_nesting_self_inclusive_work) {
    for (int mode = 0; mode < 2; mode++) {
        sharc_device *d = sharc_device_cpu();
        sharc_prof_enable(true);
        sharc_prof_set_device(mode ? d : NULL, mode ? sharc_device_stream(d) : NULL);
        sharc_prof_set_ceilings(1e12, "test", 1e9, "test");
        int ida = sharc_prof_id("test.A"), idb = sharc_prof_id("test.B");
        sharc_prof_begin(ida); /* before the first step: dropped */
        sharc_prof_end(ida, 0, 0);
        sharc_prof_step_begin();
        sharc_prof_begin(ida);
        sleep_ms(10);
        sharc_prof_begin(idb);
        sharc_prof_count(2e9, 3e9);
        sleep_ms(20);
        sharc_prof_end(idb, 1e9, 0);
        sharc_prof_end(ida, 4e9, 0);
        ASSERT_OK(sharc_prof_step_end());
        sharc_prof_begin(idb); /* outside the steps once they are bracketed: not counted */
        sleep_ms(5);
        sharc_prof_end(idb, 1e9, 0);
        char buf[8192] = {0};
        FILE *f = fmemopen(buf, sizeof buf - 1, "w");
        ASSERT_TRUE(f != NULL);
        sharc_prof_report(f, 99);
        fclose(f);
        sharc_prof_enable(false);
        sharc_prof_set_device(NULL, NULL);
        ASSERT_TRUE(strstr(buf, "# sharc profile: 1 step(s)"));
        ASSERT_TRUE(strstr(buf, mode ? "device events" : "host clock"));
        double sa, ia, ga, sb, ib, gb, so, io, go;
        ASSERT_TRUE(prof_row(buf, "test.A", &sa, &ia, &ga));
        ASSERT_TRUE(prof_row(buf, "test.B", &sb, &ib, &gb));
        ASSERT_TRUE(sa >= 9.9 && sb >= 19.9 && ib == sb);
        ASSERT_NEAR(ia, sa + sb, 0, 0.0021); /* inclusive = own + nested, to the printed digits */
        ASSERT_NEAR(ga, 4.0, 1e-6, 0);       /* its own work only */
        ASSERT_NEAR(gb, 3.0, 1e-6, 0);       /* count + end, the region after the steps not counted */
        const char *o = strstr(buf, "(outside regions)");
        ASSERT_TRUE(o && sscanf(o + strlen("(outside regions)"), "%lf", &so) == 1 && so >= -0.0011);
        (void)io, (void)go;
    }
}

/* a forward slot that must never be called (the one-of-a-pair case below) */
static void attention_forward_unused(sharc_stream *s, float *out, float *lse, const float *qkv, const int32_t *lo,
                                     int B, int T, int NH, int NKV, int hd, float *ws) {
    abort();
}

/* Note [kernel-table]: a backend without the optional slots gets fallbacks
 * that compute the same values; one without a required slot is refused. */
TEST(kernel_table_fallbacks_and_required_slots) {
    sharc_kernels k = *kt();
    k.add = NULL;
    k.accumulate = NULL;
    ASSERT_OK(sharc_device_kernels_complete("test", &k));
    ASSERT_TRUE(k.add != NULL && k.accumulate != NULL && k.add != kt()->add);
    const int64_t n = 70001;
    float *a = randn(n, 1, 1.0f), *b = randn(n, 2, 1.0f), *y = zeros(n), *ref = zeros(n);
    k.add(ks(), y, a, b, n);
    kt()->add(ks(), ref, a, b, n);
    ASSERT_TRUE(memcmp(y, ref, sizeof(float) * (size_t)n) == 0);
    for (int64_t i = 0; i < n; i++) ASSERT_TRUE(y[i] == a[i] + b[i]);
    k.accumulate(ks(), y, a, n);
    for (int64_t i = 0; i < n; i++) ASSERT_TRUE(y[i] == ref[i] + a[i]);
    /* the bf16 attention pair: the CPU has none (its fp32 slots stand in);
     * a backend giving only one of the two gets neither */
    ASSERT_TRUE(kt()->attention_forward_bf16 == kt()->attention_forward &&
                kt()->attention_backward_bf16 == kt()->attention_backward);
    sharc_kernels half = *kt();
    half.attention_forward_bf16 = attention_forward_unused;
    half.attention_backward_bf16 = NULL;
    ASSERT_OK(sharc_device_kernels_complete("test", &half));
    ASSERT_TRUE(half.attention_forward_bf16 == half.attention_forward &&
                half.attention_backward_bf16 == half.attention_backward);
    sharc_kernels bad = *kt();
    bad.sumsq = NULL;
    ASSERT_TRUE(sharc_device_kernels_complete("test", &bad) == SHARC_ERR_UNSUPPORTED);
    ASSERT_TRUE(strstr(sharc_last_error(), "not implemented on test: sumsq"));
    free(a);
    free(b);
    free(y);
    free(ref);
}

/* note [rank-order]: sum_ranks against the plain loop, bit for bit, fp32
 * (written and added) and 16-bit, at sizes that split into several chunks */
/* note [gemm-gelu]: the CPU's fused linear + GELU slots are the dispatcher's
 * fallbacks, bit for bit the unfused kernels (the model's old path), with
 * the backward's gelu' applied in place; a backend giving one of the fp32
 * pair gets both fallbacks. */
TEST(kernel_gelu_fusion_fallbacks_are_the_unfused_path) {
    const int64_t N = 13;
    const int IC = 19, OC = 11;
    float *x = randn(N * IC, 3, 1.0f), *w = randn((int64_t)OC * IC, 4, 0.3f), *b = randn(OC, 5, 1.0f);
    float *pre = zeros(N * OC), *y = zeros(N * OC), *rpre = zeros(N * OC), *ry = zeros(N * OC);
    kt()->matmul_gelu_forward(ks(), pre, y, x, w, b, N, IC, OC);
    kt()->matmul_forward(ks(), rpre, x, w, b, N, IC, OC);
    kt()->gelu_forward(ks(), ry, rpre, N * OC);
    ASSERT_TRUE(memcmp(pre, rpre, sizeof(float) * (size_t)(N * OC)) == 0);
    ASSERT_TRUE(memcmp(y, ry, sizeof(float) * (size_t)(N * OC)) == 0);
    float *dy = randn(N * OC, 6, 1.0f), *p = randn(N * IC, 7, 1.5f);
    float *dx = zeros(N * IC), *dw = zeros((int64_t)OC * IC), *db = zeros(OC);
    float *t = zeros(N * IC), *rdx = zeros(N * IC), *rdw = zeros((int64_t)OC * IC), *rdb = zeros(OC);
    kt()->matmul_backward_dgelu(ks(), dx, dw, db, dy, x, w, p, N, IC, OC);
    kt()->matmul_backward(ks(), t, rdw, rdb, dy, x, w, N, IC, OC);
    kt()->gelu_backward(ks(), rdx, t, p, N * IC);
    ASSERT_TRUE(memcmp(dx, rdx, sizeof(float) * (size_t)(N * IC)) == 0);
    ASSERT_TRUE(memcmp(dw, rdw, sizeof(float) * (size_t)OC * IC) == 0);
    ASSERT_TRUE(memcmp(db, rdb, sizeof(float) * (size_t)OC) == 0);
    sharc_kernels half = *kt();
    half.matmul_gelu_forward = NULL;
    ASSERT_OK(sharc_device_kernels_complete("test", &half));
    ASSERT_TRUE(half.matmul_gelu_forward == kt()->matmul_gelu_forward &&
                half.matmul_backward_dgelu == kt()->matmul_backward_dgelu);
    sharc_kernels no16 = *kt();
    no16.matmul_forward_b16 = NULL;
    ASSERT_OK(sharc_device_kernels_complete("test", &no16));
    ASSERT_TRUE(no16.matmul_gelu_forward_b16 == NULL && no16.matmul_backward_dgelu_b16 == NULL);
    float *all[] = {x, w, b, pre, y, rpre, ry, dy, p, dx, dw, db, t, rdx, rdw, rdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

TEST(kernel_sum_ranks_is_the_rank_ordered_loop) {
    sharc_threads_set(2);
    const int64_t n = 3 * 32768 + 77;
    for (int S = 1; S <= 5; S++) {
        float *src[5];
        uint16_t *b16[5], *h16[5];
        for (int r = 0; r < S; r++) {
            src[r] = randn(n, 10 + (uint64_t)r, 1.0f);
            b16[r] = malloc(2 * (size_t)n);
            h16[r] = malloc(2 * (size_t)n);
            for (int64_t i = 0; i < n; i++) {
                b16[r][i] = sharc_f32_to_bf16(src[r][i]);
                h16[r][i] = sharc_f32_to_f16(src[r][i]);
            }
        }
        float *dst = zeros(n), *acc = randn(n, 99, 1.0f), *acc0 = malloc(sizeof(float) * (size_t)n);
        memcpy(acc0, acc, sizeof(float) * (size_t)n);
        uint16_t *d16 = malloc(2 * (size_t)n), *e16 = malloc(2 * (size_t)n);
        kt()->sum_ranks(ks(), dst, (const void *const *)src, S, n, SHARC_DT_F32, false);
        kt()->sum_ranks(ks(), acc, (const void *const *)src, S, n, SHARC_DT_F32, true);
        kt()->sum_ranks(ks(), d16, (const void *const *)b16, S, n, SHARC_DT_BF16, false);
        kt()->sum_ranks(ks(), e16, (const void *const *)h16, S, n, SHARC_DT_F16, false);
        for (int64_t i = 0; i < n; i++) {
            float s = src[0][i], sb = sharc_bf16_to_f32(b16[0][i]), sh = sharc_f16_to_f32(h16[0][i]);
            for (int r = 1; r < S; r++) {
                s += src[r][i];
                sb += sharc_bf16_to_f32(b16[r][i]);
                sh += sharc_f16_to_f32(h16[r][i]);
            }
            if (!(dst[i] == s && acc[i] == acc0[i] + s && d16[i] == sharc_f32_to_bf16(sb) &&
                  e16[i] == sharc_f32_to_f16(sh)))
                TEST_FAIL_AT("S=%d at %lld: %.9g vs %.9g, %.9g vs %.9g, bf16 %u vs %u, f16 %u vs %u", S, (long long)i,
                             dst[i], s, acc[i], acc0[i] + s, d16[i], sharc_f32_to_bf16(sb), e16[i],
                             sharc_f32_to_f16(sh));
        }
        for (int r = 0; r < S; r++) {
            free(src[r]);
            free(b16[r]);
            free(h16[r]);
        }
        free(dst);
        free(acc);
        free(acc0);
        free(d16);
        free(e16);
    }
}

TEST(kernel_cast_round_fill_init) {
    const int64_t n = 70003;
    float *x = randn(n, 3, 10.0f), *y = zeros(n);
    uint16_t *h = malloc(2 * (size_t)n);
    kt()->cast(ks(), h, SHARC_DT_BF16, x, SHARC_DT_F32, n);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(h[i], sharc_f32_to_bf16(x[i]));
    kt()->cast(ks(), y, SHARC_DT_F32, h, SHARC_DT_BF16, n);
    for (int64_t i = 0; i < n; i++) ASSERT_TRUE(y[i] == sharc_bf16_to_f32(h[i]));
    kt()->cast(ks(), h, SHARC_DT_F16, x, SHARC_DT_F32, n);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(h[i], sharc_f32_to_f16(x[i]));
    kt()->round(ks(), y, x, SHARC_DT_F16, n);
    for (int64_t i = 0; i < n; i++) ASSERT_TRUE(y[i] == sharc_f16_to_f32(sharc_f32_to_f16(x[i])));
    kt()->round(ks(), y, x, SHARC_DT_F32, n);
    ASSERT_TRUE(memcmp(y, x, sizeof(float) * (size_t)n) == 0);
    kt()->fill(ks(), y, 1.5f, n);
    for (int64_t i = 0; i < n; i++) ASSERT_TRUE(y[i] == 1.5f);
    kt()->init_normal(ks(), y, n, 0.02f, 42, 7, 1000);
    for (int64_t i = 0; i < n; i++) ASSERT_TRUE(y[i] == 0.02f * sharc_rng_normal(42, 7, 1000 + (uint64_t)i));
    free(x);
    free(y);
    free(h);
}

/* sharc_device_host_alloc on the CPU: ordinary accounted host memory */
TEST(device_host_alloc_is_accounted_zeroed_aligned) {
    sharc_device *d = sharc_device_cpu();
    int64_t c0 = cur(SHARC_MEM_COMM);
    unsigned char *h = sharc_device_host_alloc(d, 777, SHARC_MEM_COMM);
    ASSERT_TRUE(h != NULL);
    ASSERT_EQ(cur(SHARC_MEM_COMM) - c0, 777);
    ASSERT_EQ((uintptr_t)h % 64, 0);
    for (int i = 0; i < 777; i++) ASSERT_EQ(h[i], 0);
    sharc_device_host_free(d, h);
    ASSERT_EQ(cur(SHARC_MEM_COMM), c0);
    sharc_device_host_free(d, NULL);
    ASSERT_TRUE(sharc_device_host_alloc(d, 8, (sharc_mem_cat)99) == NULL);
    ASSERT_TRUE(strstr(sharc_last_error(), "category 99"));
}

/* loss_add (note [loss-on-device]): the step's host arithmetic, bit for bit */
TEST(kernel_loss_add_is_the_step_arithmetic) {
    double loss = 2.0 / 3.0, sums[2] = {0.0, 0.0}, ref_w = 0.0, ref = 0.0;
    const double add[3] = {0.0, 1e-3, 0.125}, weight[3] = {1.0, 1.0 / 7.0, 0.3};
    for (int r = 0; r < 3; r++) {
        loss *= 1.37;
        kt()->loss_add(ks(), sums, &loss, add[r], weight[r]);
        double l = loss + add[r];
        ref_w += l * weight[r];
        ref += l;
    }
    ASSERT_TRUE(sums[0] == ref_w && sums[1] == ref);
}

TEST(kernel_sumsq_and_adamw) {
    sharc_threads_set(1);
    const int64_t n = 20 * 4096 + 5;
    float *g = randn(n, 4, 0.3f);
    double acc = 1.0, ref = 0.0;
    kt()->sumsq(ks(), &acc, g, n);
    for (int64_t i = 0; i < n; i++) ref += (double)g[i] * g[i];
    ASSERT_NEAR(acc, 1.0 + ref, 1e-6, 0); /* accumulates into *acc */
    float *p = randn(n, 5, 0.02f), *m = randn(n, 6, 0.01f), *v = zeros(n);
    for (int64_t i = 0; i < n; i++) v[i] = 1e-4f * (float)(i % 13);
    float *p0 = malloc(sizeof(float) * (size_t)n), *m0 = malloc(sizeof(float) * (size_t)n),
          *v0 = malloc(sizeof(float) * (size_t)n);
    memcpy(p0, p, sizeof(float) * (size_t)n);
    memcpy(m0, m, sizeof(float) * (size_t)n);
    memcpy(v0, v, sizeof(float) * (size_t)n);
    const double lr = 1e-3, wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8, scale = 0.5;
    const int t = 3;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    sharc_adamw_scalars k = {.decay_mul = (float)(1.0 - lr * wd),
                             .beta1 = (float)b1,
                             .beta2 = (float)b2,
                             .step_size = (float)(lr / bc1),
                             .sqrt_bc2 = (float)sqrt(bc2),
                             .eps = (float)eps,
                             .grad_scale = (float)scale};
    kt()->adamw(ks(), p, g, m, v, n, &k);
    for (int64_t i = 0; i < n; i++) { /* torch 1.13's AdamW, in double */
        double gi = (double)g[i] * scale, mi = b1 * m0[i] + (1 - b1) * gi, vi = b2 * v0[i] + (1 - b2) * gi * gi;
        double pi = (double)p0[i] * (1 - lr * wd) - lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + eps);
        /* fp32 against double: a few roundings of terms up to 0.04 (m), 2e-3 (v), 0.1 (p) */
        ASSERT_NEAR(m[i], mi, 1e-5, 1e-8);
        ASSERT_NEAR(v[i], vi, 1e-5, 1e-10);
        ASSERT_NEAR(p[i], pi, 1e-6, 1e-8);
    }
    free(g);
    free(p);
    free(m);
    free(v);
    free(p0);
    free(m0);
    free(v0);
}

static float *dup(const float *x, int64_t n) {
    float *y = malloc(sizeof(float) * (size_t)n);
    memcpy(y, x, sizeof(float) * (size_t)n);
    return y;
}

/* Note [adamw-multi]: one adamw_multi call over a table of segments of odd
 * lengths in two tensors (one segment left out, as a frozen one is; decay
 * on some), bit for bit the adamw calls per segment; the CPU's kernel, the
 * dispatcher's fallback, at 1 and 2 threads (the table split across
 * chunks that cut segments). */
TEST(kernel_adamw_multi_is_adamw_per_segment) {
    const int64_t n = 3 * 65536 + 77; /* two tensors of n: several chunks */
    /* (tensor, offset, length, decay); tensor 0's last 5000 elements (a frozen segment) and tensor 1's first 7
     * (padding) are in no entry */
    const int64_t lay[][4] = {
        {0, 0, 1, 1},     {0, 1, 130001, 0}, {0, 130002, 3, 1},          {0, 130005, 50000, 1},
        {1, 7, 99999, 0}, {1, 100006, 5, 1}, {1, 100011, n - 100011, 1}, {0, 180005, n - 5000 - 180005, 0}};
    const int nseg = (int)(sizeof lay / sizeof lay[0]);
    float *p[2], *g[2], *m[2], *v[2];
    for (int t = 0; t < 2; t++) {
        p[t] = randn(n, 10 + t, 0.02f);
        g[t] = randn(n, 20 + t, 0.1f);
        m[t] = randn(n, 30 + t, 0.01f);
        v[t] = randn(n, 40 + t, 0.001f);
        for (int64_t i = 0; i < n; i++) v[t][i] = fabsf(v[t][i]);
    }
    const sharc_adamw_scalars k = {.decay_mul = 0.77f,
                                   .beta1 = 0.9f,
                                   .beta2 = 0.95f,
                                   .step_size = 1e-3f,
                                   .sqrt_bc2 = 0.3f,
                                   .eps = 1e-8f,
                                   .grad_scale = 0.6f};
    const float decay_mul = 0.999f;
    float *rp[2], *rm[2], *rv[2];
    for (int t = 0; t < 2; t++) rp[t] = dup(p[t], n), rm[t] = dup(m[t], n), rv[t] = dup(v[t], n);
    sharc_adamw_seg segs[8];
    int64_t first = 0;
    for (int i = 0; i < nseg; i++) {
        const int t = (int)lay[i][0];
        const int64_t o = lay[i][1], len = lay[i][2];
        sharc_adamw_scalars e = k;
        e.decay_mul = lay[i][3] ? decay_mul : 1.0f;
        kt()->adamw(ks(), rp[t] + o, g[t] + o, rm[t] + o, rv[t] + o, len, &e);
        segs[i] = (sharc_adamw_seg){.p = p[t] + o,
                                    .g = g[t] + o,
                                    .m = m[t] + o,
                                    .v = v[t] + o,
                                    .n = len,
                                    .first = first,
                                    .decay = (int32_t)lay[i][3]};
        first += len;
    }
    sharc_kernels fb = *kt();
    fb.adamw_multi = NULL;
    ASSERT_OK(sharc_device_kernels_complete("test", &fb));
    ASSERT_TRUE(fb.adamw_multi != NULL && fb.adamw_multi != kt()->adamw_multi);
    const size_t bytes = sizeof(float) * (size_t)n;
    for (int run = 0; run < 3; run++) { /* the CPU kernel at 1 and 2 threads, then the fallback */
        float *q[2], *qm[2], *qv[2];
        for (int t = 0; t < 2; t++) q[t] = dup(p[t], n), qm[t] = dup(m[t], n), qv[t] = dup(v[t], n);
        sharc_adamw_seg tab[8];
        memcpy(tab, segs, sizeof tab);
        for (int i = 0; i < nseg; i++) {
            const int t = (int)lay[i][0];
            const int64_t o = lay[i][1];
            tab[i].p = q[t] + o, tab[i].m = qm[t] + o, tab[i].v = qv[t] + o;
        }
        sharc_threads_set(run == 1 ? 2 : 1);
        (run == 2 ? fb.adamw_multi : kt()->adamw_multi)(ks(), tab, tab, nseg, &k, decay_mul);
        for (int t = 0; t < 2; t++) {
            ASSERT_TRUE(memcmp(q[t], rp[t], bytes) == 0);
            ASSERT_TRUE(memcmp(qm[t], rm[t], bytes) == 0);
            ASSERT_TRUE(memcmp(qv[t], rv[t], bytes) == 0);
            free(q[t]), free(qm[t]), free(qv[t]);
        }
    }
    sharc_threads_set(1);
    /* the skipped segment and the gap before tensor 1's first are untouched */
    ASSERT_TRUE(memcmp(rp[0] + n - 5000, p[0] + n - 5000, sizeof(float) * 5000) == 0);
    ASSERT_TRUE(rp[1][3] == p[1][3] && rm[1][3] == m[1][3]);
    ASSERT_TRUE(rp[0][5] != p[0][5]); /* and the reference did update */
    for (int t = 0; t < 2; t++) free(p[t]), free(g[t]), free(m[t]), free(v[t]), free(rp[t]), free(rm[t]), free(rv[t]);
}

/* Note [sumsq-multi]: the CPU's sumsq_multi (the dispatcher's fallback: the
 * CPU has no kernel of its own) over odd-length entries into two sums that
 * already hold values, bit for bit sumsq per entry, at 1 and 2 threads;
 * a region in no entry is NaN (read, it would show). */
TEST(kernel_sumsq_multi_is_sumsq_per_entry) {
    const int64_t n = 20 * 4096 + 40;
    float *g = randn(n, 7, 0.5f);
    const int64_t lay[][3] = {{0, 1, 0}, {1, 4096, 1}, {4097, 17 * 4096 + 3, 0}, {4097 + 17 * 4096 + 3, 9, 1}};
    const int nseg = (int)(sizeof lay / sizeof lay[0]);
    for (int64_t i = lay[3][0] + lay[3][1]; i < n; i++) g[i] = NAN;
    sharc_sumsq_seg tab[4];
    int64_t blk = 0;
    for (int i = 0; i < nseg; i++) {
        tab[i] = (sharc_sumsq_seg){.x = g + lay[i][0], .n = lay[i][1], .blk = blk, .which = (int32_t)lay[i][2]};
        blk += (lay[i][1] + 4095) / 4096;
    }
    ASSERT_TRUE(kt()->sumsq_multi != NULL);
    for (int run = 0; run < 2; run++) {
        sharc_threads_set(run + 1);
        double acc[2] = {0.5, 2.0}, ref[2] = {0.5, 2.0};
        for (int i = 0; i < nseg; i++) kt()->sumsq(ks(), ref + lay[i][2], g + lay[i][0], lay[i][1]);
        kt()->sumsq_multi(ks(), acc, tab, tab, nseg);
        ASSERT_TRUE(memcmp(acc, ref, sizeof acc) == 0 && isfinite(acc[0]) && isfinite(acc[1]));
    }
    sharc_threads_set(1);
    free(g);
}

/* Note [add-norm]: add_layernorm_forward (with and without a bias) and
 * add_rmsnorm_forward, the CPU's and the fallback, bit for bit add then
 * the norm, at odd sizes over several chunks of rows (2 threads), the sum
 * written over x itself too (the alias the kernel allows). */
static void add_norm_case(int64_t N, int C) {
    const int64_t nc = N * C;
    float *x = randn(nc, 1, 1.5f), *r = randn(nc, 2, 1.0f), *w = randn(C, 3, 1.0f), *b = randn(C, 4, 1.0f);
    sharc_kernels fb = *kt();
    fb.add_layernorm_forward = NULL;
    fb.add_rmsnorm_forward = NULL;
    ASSERT_OK(sharc_device_kernels_complete("test", &fb));
    const size_t bytes = sizeof(float) * (size_t)nc;
    sharc_threads_set(2);
    for (int fam = 0; fam < 3; fam++) { /* layernorm with bias, without, rmsnorm */
        float *sum = zeros(nc), *y = zeros(nc), *mean = zeros(N), *rstd = zeros(N);
        kt()->add(ks(), sum, x, r, nc);
        if (fam < 2) kt()->layernorm_forward(ks(), y, mean, rstd, sum, w, fam ? NULL : b, N, C, 1e-5f);
        else kt()->rmsnorm_forward(ks(), y, rstd, sum, w, N, C, 1e-6f);
        for (int run = 0; run < 3; run++) { /* the CPU's, the fallback, the CPU's into x's own memory */
            const sharc_kernels *kk = run == 1 ? &fb : kt();
            float *xs = dup(x, nc), *s2 = run == 2 ? xs : zeros(nc), *y2 = randn(nc, 9, 1.0f), *m2 = randn(N, 8, 1.0f),
                  *r2 = randn(N, 7, 1.0f);
            if (fam < 2) kk->add_layernorm_forward(ks(), s2, y2, m2, r2, xs, r, w, fam ? NULL : b, N, C, 1e-5f);
            else kk->add_rmsnorm_forward(ks(), s2, y2, r2, xs, r, w, N, C, 1e-6f);
            ASSERT_TRUE(memcmp(s2, sum, bytes) == 0);
            ASSERT_TRUE(memcmp(y2, y, bytes) == 0);
            ASSERT_TRUE(memcmp(r2, rstd, sizeof(float) * (size_t)N) == 0);
            if (fam < 2) ASSERT_TRUE(memcmp(m2, mean, sizeof(float) * (size_t)N) == 0);
            if (s2 != xs) free(s2);
            free(xs), free(y2), free(m2), free(r2);
        }
        free(sum), free(y), free(mean), free(rstd);
    }
    sharc_threads_set(1);
    free(x), free(r), free(w), free(b);
}

/* the CPU adds a block of rows (8192 floats) before its norm: one block a
 * chunk, several with a short last one (301 rows of 83), one row a block (C 9001) */
TEST(kernel_add_norm_is_add_then_norm) {
    add_norm_case(37, 83);
    add_norm_case(301, 83);
    add_norm_case(5, 9001);
}

/* A NULL weight gradient (a frozen parameter) computes nothing for it and
 * the same input gradient. */
TEST(kernel_null_weight_gradient_is_frozen) {
    const int N = 37, IC = 19, OC = 23;
    float *x = randn(N * IC, 1, 1.0f), *w = randn(OC * IC, 2, 0.5f), *dy = randn(N * OC, 3, 1.0f);
    float *dx1 = zeros(N * IC), *dx2 = zeros(N * IC), *dw = zeros(OC * IC), *db1 = zeros(OC), *db2 = zeros(OC);
    kt()->matmul_backward(ks(), dx1, dw, db1, dy, x, w, N, IC, OC);
    kt()->matmul_backward(ks(), dx2, NULL, db2, dy, x, w, N, IC, OC);
    ASSERT_TRUE(memcmp(dx1, dx2, sizeof(float) * N * IC) == 0);
    ASSERT_TRUE(memcmp(db1, db2, sizeof(float) * OC) == 0);
    /* norms: at a size that splits into per-thread partial sums too */
    sharc_threads_set(2);
    const int R = 600, C = 64;
    float *xr = randn(R * C, 4, 1.0f), *g = randn(C, 5, 1.0f), *bb = randn(C, 6, 1.0f), *d = randn(R * C, 7, 1.0f);
    float *y = zeros(R * C), *mean = zeros(R), *rstd = zeros(R), *gx1 = zeros(R * C), *gx2 = zeros(R * C);
    float *gw = zeros(C), *gb1 = zeros(C), *gb2 = zeros(C);
    kt()->layernorm_forward(ks(), y, mean, rstd, xr, g, bb, R, C, 1e-5f);
    kt()->layernorm_backward(ks(), gx1, gw, gb1, d, NULL, xr, g, mean, rstd, R, C);
    kt()->layernorm_backward(ks(), gx2, NULL, gb2, d, NULL, xr, g, mean, rstd, R, C);
    ASSERT_TRUE(memcmp(gx1, gx2, sizeof(float) * R * C) == 0);
    ASSERT_TRUE(memcmp(gb1, gb2, sizeof(float) * C) == 0);
    kt()->rmsnorm_forward(ks(), y, rstd, xr, g, R, C, 1e-5f);
    kt()->rmsnorm_backward(ks(), gx1, gw, d, NULL, xr, g, rstd, R, C);
    kt()->rmsnorm_backward(ks(), gx2, NULL, d, NULL, xr, g, rstd, R, C);
    ASSERT_TRUE(memcmp(gx1, gx2, sizeof(float) * R * C) == 0);
    /* embedding: only the position table's gradient */
    int32_t tok[6] = {1, 0, 2, 2, 1, 0};
    float *dpe1 = zeros(3 * 4), *dpe2 = zeros(3 * 4), *dte = zeros(3 * 4), *de = randn(6 * 4, 8, 1.0f);
    kt()->embedding_backward(ks(), dte, dpe1, de, tok, 2, 3, 4, 0);
    kt()->embedding_backward(ks(), NULL, dpe2, de, tok, 2, 3, 4, 0);
    ASSERT_TRUE(memcmp(dpe1, dpe2, sizeof(float) * 12) == 0);
}

/* Note [packing]: the per-token RoPE rows at packed positions (restarting
 * at 0 where a sample starts) are, bit for bit, the rows of rope_table at
 * those positions, given the frequencies sharc_model_rope_inv_freq computes. */
TEST(kernel_rope_table_pos) {
    const int T = 9, hd = 8, half = hd / 2, N = 2 * T;
    const int32_t pos[2 * 9] = {0, 1, 2, 3, 0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8};
    sharc_model_config cfg;
    sharc_model_config_default(&cfg, SHARC_FAMILY_LLAMA);
    cfg.embed_dim = 16, cfg.num_heads = 2;
    float inv[4];
    sharc_model_rope_inv_freq(&cfg, inv);
    float *ct = zeros(T * half), *st = zeros(T * half), *cp = zeros(N * half), *sp = zeros(N * half);
    kt()->rope_table(ks(), ct, st, T, hd, cfg.rope_theta, 0);
    ASSERT_TRUE(kt()->rope_table_pos != NULL);
    kt()->rope_table_pos(ks(), cp, sp, pos, inv, N, half);
    for (int r = 0; r < N; r++) {
        ASSERT_TRUE(memcmp(cp + r * half, ct + pos[r] * half, sizeof(float) * half) == 0);
        ASSERT_TRUE(memcmp(sp + r * half, st + pos[r] * half, sizeof(float) * half) == 0);
    }
    ASSERT_TRUE(cp[4 * half + 1] == 1.0f && sp[4 * half + 1] == 0.0f); /* a sample's first token: angle 0 */
    free(ct), free(st), free(cp), free(sp);
}

/* Position offsets (a sequence split over ranks): positions t0.. of the
 * tables are the rows a whole-sequence call uses from t0 on. */
TEST(kernel_position_offsets) {
    const int T = 9, t0 = 5, hd = 8, C = 6, V = 4, B = 2;
    float *c1 = zeros((T + t0) * hd / 2), *s1 = zeros((T + t0) * hd / 2), *c2 = zeros(T * hd / 2),
          *s2 = zeros(T * hd / 2);
    kt()->rope_table(ks(), c1, s1, T + t0, hd, 10000.0f, 0);
    kt()->rope_table(ks(), c2, s2, T, hd, 10000.0f, t0);
    ASSERT_TRUE(memcmp(c1 + t0 * hd / 2, c2, sizeof(float) * T * hd / 2) == 0);
    ASSERT_TRUE(memcmp(s1 + t0 * hd / 2, s2, sizeof(float) * T * hd / 2) == 0);
    float *wte = randn(V * C, 1, 1.0f), *wpe = randn((T + t0) * C, 2, 1.0f);
    int32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % V;
    float *x1 = zeros(B * T * C), *x2 = zeros(B * T * C);
    kt()->embedding_forward(ks(), x1, tok, wte, wpe, B, T, C, t0);
    kt()->embedding_forward(ks(), x2, tok, wte, wpe + t0 * C, B, T, C, 0);
    ASSERT_TRUE(memcmp(x1, x2, sizeof(float) * B * T * C) == 0);
    float *d1 = zeros((T + t0) * C), *d2 = zeros((T + t0) * C), *dx = randn(B * T * C, 3, 1.0f);
    kt()->embedding_backward(ks(), NULL, d1, dx, tok, B, T, C, t0);
    kt()->embedding_backward(ks(), NULL, d2 + t0 * C, dx, tok, B, T, C, 0);
    ASSERT_TRUE(memcmp(d1, d2, sizeof(float) * (T + t0) * C) == 0);
    for (int i = 0; i < t0 * C; i++) ASSERT_TRUE(d1[i] == 0.0f);
}
