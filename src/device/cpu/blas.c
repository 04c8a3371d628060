/* blas.c: owns the loaded BLAS library, its kernel-set choice, the thread
 * count shared by BLAS and sharc's OpenMP kernels, and the bf16 matrix
 * product (oneDNN's, or its emulation). Notes [blas-coretype], [bf16-gemm]. */

#include "sharc/blas.h"
#include "sharc/dtype.h"
#include "sharc/progress.h"
#include "sharc/log.h"

#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SHARC_MULTIARCH
#define SHARC_MULTIARCH "x86_64-linux-gnu"
#endif

/* Products smaller than this (M*N*K) stay on OpenBLAS (attention's blocks,
 * called from inside parallel regions): note [gemm-library]. */
#define SHARC_ONEDNN_MIN_WORK (1ll << 24)

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
typedef void (*set_threads_fn)(int);
typedef char *(*corename_fn)(void);
typedef int (*parallel_fn)(void);
/* oneDNN's row-major sgemm (dnnl_sgemm; dnnl_dim_t is int64_t, status 0 = success) */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                             int64_t, float, float *, int64_t);
/* the same for bf16 operands (raw 16-bit words) and an fp32 C: dnnl_gemm_bf16bf16f32 */
typedef int (*dnnl_bgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *, int64_t, const uint16_t *,
                             int64_t, float, float *, int64_t);

static sgemm_fn cblas_sgemm_ptr;
static dnnl_sgemm_fn dnnl_sgemm_ptr;
static dnnl_bgemm_fn dnnl_bgemm_ptr;
static sharc_bf16_mode bf16_mode = SHARC_BF16_NONE;
static char bf16_why[256];
static set_threads_fn set_threads_ptr;
static sharc_blas_info info;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static sharc_status load_status = SHARC_OK;
static char load_error[1024];

int sharc_cpus_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}

/* The OpenBLAS core name for the best kernels this CPU (and OS) supports. */
static const char *pick_coretype(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq")) {
        return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return "";
}

/* Note [gemm-library]: large products go to oneDNN's sgemm when Debian's
 * libdnnl2 is installed (it picks its kernels from the CPU itself and shares
 * the OpenMP pool); SHARC_GEMM=openblas keeps everything on OpenBLAS. */
static void load_onednn(void) {
    const char *want = getenv("SHARC_GEMM");
    if (want && strcmp(want, "openblas") == 0) return;
    void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        if (want && strcmp(want, "onednn") == 0)
            sharc_log(SHARC_LOG_WARN, "blas: SHARC_GEMM=onednn but libdnnl.so.2 cannot be loaded (%s)", dlerror());
        return;
    }
    dnnl_sgemm_ptr = (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm");
    if (dnnl_sgemm_ptr) snprintf(info.gemm, sizeof info.gemm, "oneDNN");
    dnnl_bgemm_ptr = (dnnl_bgemm_fn)dlsym(h, "dnnl_gemm_bf16bf16f32");
}

/* Note [bf16-gemm]: bf16 products run on oneDNN's dnnl_gemm_bf16bf16f32
 * (bf16 operands, fp32 accumulation and output) only where the CPU has bf16
 * dot-product instructions (AVX512_BF16; every AMX CPU has them too) and a
 * probe product is right: oneDNN would otherwise emulate bf16 more slowly
 * than fp32, or answer "unimplemented" (AVX2 CPUs). SHARC_BF16=emulate
 * widens the bf16 operands and uses sgemm instead: the same products (a
 * product of two bf16 numbers is exact in fp32), another summation order,
 * slower than fp32; it lets the bf16 path be tested on any CPU.
 * SHARC_BF16=off turns bf16 compute off. */
static void pick_bf16(void) {
    const char *want = getenv("SHARC_BF16");
    if (want && strcmp(want, "off") == 0) {
        snprintf(bf16_why, sizeof bf16_why, "SHARC_BF16=off");
        return;
    }
    if (want && strcmp(want, "emulate") == 0) {
        bf16_mode = SHARC_BF16_EMULATED;
        snprintf(bf16_why, sizeof bf16_why, "SHARC_BF16=emulate");
        return;
    }
    bool has_isa = false;
#if defined(__x86_64__)
    __builtin_cpu_init();
    has_isa = __builtin_cpu_supports("avx512bf16");
#endif
    if (!has_isa) {
        snprintf(bf16_why, sizeof bf16_why, "this CPU has no bf16 dot-product instructions (AVX512_BF16 or AMX)");
        return;
    }
    if (!dnnl_bgemm_ptr) {
        snprintf(bf16_why, sizeof bf16_why, "oneDNN (libdnnl.so.2 with dnnl_gemm_bf16bf16f32) is not loaded");
        return;
    }
    /* probe: the three forms the kernels use, with small integers (exact in
     * bf16 and fp32), against plain loops: C = A B^T, C = A B, C += A^T B */
    enum { M = 3, N = 5, K = 7 };
    uint16_t a[M * K], b[N * K];
    float fa[M * K], fb[N * K], c[M * N], ref[M * N];
    for (int i = 0; i < M * K; i++) fa[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < N * K; i++) fb[i] = (float)(i % 7) - 3.0f;
    sharc_from_f32(a, fa, SHARC_DT_BF16, M * K);
    sharc_from_f32(b, fb, SHARC_DT_BF16, N * K);
    int st = 0;
    bool ok = true;
    for (int form = 0; form < 3 && ok; form++) {
        /* form 0: A (M,K), B (N,K), C = A B^T (M,N); form 1: A (M,K), B (K,N)
         * (fb read as K x N), C = A B; form 2: A (K,M), B (K,N), C = 1 + A^T B */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float r = form == 2 ? 1.0f : 0.0f;
                for (int k = 0; k < K; k++) {
                    float x = form == 2 ? fa[k * M + i] : fa[i * K + k];
                    float y = form == 0 ? fb[j * K + k] : fb[k * N + j];
                    r += x * y;
                }
                ref[i * N + j] = r;
                c[i * N + j] = form == 2 ? 1.0f : -99.0f;
            }
        if (form == 0) st = dnnl_bgemm_ptr('N', 'T', M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        else if (form == 1) st = dnnl_bgemm_ptr('N', 'N', M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
        else st = dnnl_bgemm_ptr('T', 'N', M, N, K, 1.0f, a, M, b, N, 1.0f, c, N);
        ok = st == 0 && memcmp(c, ref, sizeof c) == 0;
    }
    if (!ok) {
        snprintf(bf16_why, sizeof bf16_why, "oneDNN's bf16 GEMM failed a probe product (status %d)", st);
        return;
    }
    bf16_mode = SHARC_BF16_ONEDNN;
    snprintf(bf16_why, sizeof bf16_why, "oneDNN bf16 GEMM");
}

static void load_library(void) {
    snprintf(info.gemm, sizeof info.gemm, "OpenBLAS");
    const char *forced = getenv("SHARC_BLAS_CORETYPE");
    const char *want = forced ? (strcmp(forced, "auto") == 0 ? "" : forced) : pick_coretype();
    snprintf(info.coretype, sizeof info.coretype, "%s", want);
    const char *env = getenv("OPENBLAS_CORETYPE");
    if (want[0]) {
        if (env && strcasecmp(env, want) != 0) snprintf(info.overridden, sizeof info.overridden, "%s", env);
        setenv("OPENBLAS_CORETYPE", want, 1);
    } else if (forced) {
        unsetenv("OPENBLAS_CORETYPE");
    }

    const char *candidates[4];
    int nc = 0;
    const char *user_lib = getenv("SHARC_BLAS_LIB");
    if (user_lib && user_lib[0]) candidates[nc++] = user_lib;
    candidates[nc++] = "/usr/lib/" SHARC_MULTIARCH "/openblas-openmp/libopenblas.so.0";
    candidates[nc++] = "libopenblas.so.0";
    void *handle = NULL;
    for (int i = 0; i < nc && !handle; i++) {
        handle = dlopen(candidates[i], RTLD_NOW | RTLD_GLOBAL);
        if (handle) snprintf(info.library, sizeof info.library, "%s", candidates[i]);
    }
    if (!handle) {
        load_status = SHARC_ERR_UNSUPPORTED;
        snprintf(load_error, sizeof load_error,
                 "blas: cannot load OpenBLAS (%s); install Debian's libopenblas0-openmp "
                 "(make deps does) or set SHARC_BLAS_LIB to a libopenblas.so",
                 dlerror());
        return;
    }
    cblas_sgemm_ptr = (sgemm_fn)dlsym(handle, "cblas_sgemm");
    set_threads_ptr = (set_threads_fn)dlsym(handle, "openblas_set_num_threads");
    corename_fn corename = (corename_fn)dlsym(handle, "openblas_get_corename");
    parallel_fn parallel = (parallel_fn)dlsym(handle, "openblas_get_parallel");
    if (!cblas_sgemm_ptr) {
        load_status = SHARC_ERR_UNSUPPORTED;
        snprintf(load_error, sizeof load_error, "blas: '%s' has no cblas_sgemm", info.library);
        return;
    }
    snprintf(info.corename, sizeof info.corename, "%s", corename ? corename() : "unknown");
    info.openmp = parallel && parallel() == 2; /* OpenBLAS: 0 serial, 1 pthreads, 2 OpenMP */
    load_onednn();
    pick_bf16();
    /* default: OMP_NUM_THREADS if the user set it, else every CPU we may use */
    const char *omp = getenv("OMP_NUM_THREADS");
    int n = omp ? atoi(omp) : 0;
    sharc_threads_set(n > 0 ? n : sharc_cpus_available());
}

sharc_status sharc_blas_init(int threads) {
    pthread_once(&load_once, load_library);
    if (load_status != SHARC_OK) return sharc_error(load_status, "%s", load_error);
    if (threads > 0) sharc_threads_set(threads);
    return SHARC_OK;
}

const sharc_blas_info *sharc_blas_get_info(void) {
    pthread_once(&load_once, load_library);
    return &info;
}

void sharc_threads_set(int n) {
    if (n < 1) n = 1;
    info.threads = n;
    omp_set_num_threads(n);
    if (set_threads_ptr) set_threads_ptr(n);
}

int sharc_threads_get(void) {
    /* loading the library sets the default count: answer only after it, so a
     * workspace sized now matches the threads the kernels will use */
    pthread_once(&load_once, load_library);
    return info.threads > 0 ? info.threads : 1;
}

void sharc_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc) {
    if (!cblas_sgemm_ptr) {
        if (sharc_blas_init(0) != SHARC_OK) sharc_fatal(__FILE__, __LINE__, "%s", load_error);
    }
    if (M == 0 || N == 0) return;
    if (!(dnnl_sgemm_ptr && (int64_t)M * N * K >= SHARC_ONEDNN_MIN_WORK &&
          dnnl_sgemm_ptr(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0))
        cblas_sgemm_ptr(ROW_MAJOR, trans_a ? TRANS : NO_TRANS, trans_b ? TRANS : NO_TRANS, M, N, K, alpha, A, lda, B,
                        ldb, beta, C, ldc);
    sharc_progress_poll(); /* note [progress] */
}

sharc_bf16_mode sharc_bf16_mode_get(const char **why) {
    pthread_once(&load_once, load_library);
    if (why) *why = bf16_why;
    return bf16_mode;
}

sharc_bf16_mode sharc_bf16_mode_set(sharc_bf16_mode mode) {
    pthread_once(&load_once, load_library);
    sharc_bf16_mode old = bf16_mode;
    if (mode == SHARC_BF16_ONEDNN && !dnnl_bgemm_ptr) return old;
    bf16_mode = mode;
    return old;
}

/* Emulation scratch: the widened operands (grown, kept; one caller at a time). */
static float *emu_buf[2];
static int64_t emu_cap[2];

static const float *widen(int slot, const uint16_t *src, int64_t n) {
    if (n > emu_cap[slot]) {
        free(emu_buf[slot]);
        emu_buf[slot] = malloc((size_t)n * sizeof(float));
        if (!emu_buf[slot])
            sharc_fatal(__FILE__, __LINE__, "bgemm: out of memory widening %lld bf16 values", (long long)n);
        emu_cap[slot] = n;
    }
    float *d = emu_buf[slot];
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&d[i], &u, 4);
    }
    return d;
}

void sharc_bgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                 const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    if (!cblas_sgemm_ptr) {
        if (sharc_blas_init(0) != SHARC_OK) sharc_fatal(__FILE__, __LINE__, "%s", load_error);
    }
    if (M == 0 || N == 0) return;
    if (bf16_mode == SHARC_BF16_ONEDNN &&
        dnnl_bgemm_ptr(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0) {
        sharc_progress_poll(); /* note [progress] */
        return;
    }
    /* emulation (or a oneDNN failure): the rows of A and B as stored, widened */
    int64_t na = (int64_t)((trans_a ? K : M) - 1) * lda + (trans_a ? M : K);
    int64_t nb = (int64_t)((trans_b ? N : K) - 1) * ldb + (trans_b ? K : N);
    const float *fa = widen(0, A, na), *fb = widen(1, B, nb);
    sharc_sgemm(trans_a, trans_b, M, N, K, alpha, fa, lda, fb, ldb, beta, C, ldc);
}
