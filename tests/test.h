/* test.h: the test registry and asserts. Every TEST registers itself at load
 * time; the runner (runner.c) runs each one in its own process under a
 * timeout. Asserts print both values and the location, then end the test
 * process with a failure status. */
#ifndef SHARC_TEST_H
#define SHARC_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*sharc_test_fn)(void);
void sharc_test_register(const char *name, sharc_test_fn fn, const char *file);
/* Directory of the committed fixtures (tests/fixtures unless SHARC_FIXTURES). */
const char *sharc_test_fixture_dir(void);
/* Directory of the build (for tests that run the sharc command). */
const char *sharc_test_bin_dir(void);
/* A fresh temporary directory for this test (removed by the runner). */
const char *sharc_test_tmpdir(void);

#define TEST(name)                                                                                                     \
    static void test_##name(void);                                                                                     \
    __attribute__((constructor)) static void register_##name(void) {                                                   \
        sharc_test_register(#name, test_##name, __FILE__);                                                             \
    }                                                                                                                  \
    static void test_##name(void)

#define TEST_FAIL_AT(...)                                                                                              \
    do {                                                                                                               \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                                              \
        fprintf(stderr, __VA_ARGS__);                                                                                  \
        fprintf(stderr, "\n");                                                                                         \
        fflush(stderr);                                                                                                \
        exit(1);                                                                                                       \
    } while (0)

/* Skip: the test cannot get what it needs (a package, a download); the
 * runner reports it as skipped with this message, not as passed or failed. */
#define SHARC_TEST_SKIP_STATUS 77
#define TEST_SKIP(...)                                                                                                 \
    do {                                                                                                               \
        fprintf(stderr, "skipped: ");                                                                                  \
        fprintf(stderr, __VA_ARGS__);                                                                                  \
        fprintf(stderr, "\n");                                                                                         \
        fflush(stderr);                                                                                                \
        exit(SHARC_TEST_SKIP_STATUS);                                                                                  \
    } while (0)

#define ASSERT_TRUE(cond)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) TEST_FAIL_AT("expected %s", #cond);                                                               \
    } while (0)

#define ASSERT_EQ(a, b)                                                                                                \
    do {                                                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                                                            \
        if (a_ != b_) TEST_FAIL_AT("%s == %s: %lld != %lld", #a, #b, a_, b_);                                          \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
#define ASSERT_NEAR(a, b, rtol, atol)                                                                                  \
    do {                                                                                                               \
        double a_ = (double)(a), b_ = (double)(b);                                                                     \
        if (!(fabs(a_ - b_) <= (atol) + (rtol)*fabs(b_)))                                                              \
            TEST_FAIL_AT("%s ~ %s: %.9g vs %.9g (diff %.3g, rtol %g, atol %g)", #a, #b, a_, b_, fabs(a_ - b_),         \
                         (double)(rtol), (double)(atol));                                                              \
    } while (0)

/* Every element: |a[i] - b[i]| <= atol + rtol * |b[i]|; reports the worst one. */
#define ASSERT_ALLCLOSE(a, b, n, rtol, atol)                                                                           \
    do {                                                                                                               \
        long long bad_ = sharc_test_allclose((a), (b), (long long)(n), (rtol), (atol));                                \
        if (bad_ >= 0)                                                                                                 \
            TEST_FAIL_AT("%s ~ %s at [%lld]: %.9g vs %.9g (rtol %g, atol %g)", #a, #b, bad_, (double)(a)[bad_],        \
                         (double)(b)[bad_], (double)(rtol), (double)(atol));                                           \
    } while (0)

#define ASSERT_OK(expr)                                                                                                \
    do {                                                                                                               \
        sharc_status st_ = (expr);                                                                                     \
        if (st_ != SHARC_OK) TEST_FAIL_AT("%s failed: %s: %s", #expr, sharc_status_str(st_), sharc_last_error());      \
    } while (0)

/* Index of the worst element outside tolerance, or -1. */
long long sharc_test_allclose(const float *a, const float *b, long long n, double rtol, double atol);

#endif
