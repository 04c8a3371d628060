/* blas.c: owns the loaded BLAS library, its kernel-set choice and the thread
 * count shared by BLAS and sharc's OpenMP kernels. Note [blas-coretype]. */

#include "sharc/blas.h"
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

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*set_threads_fn)(int);
typedef char *(*corename_fn)(void);
typedef int (*parallel_fn)(void);
/* oneDNN's row-major sgemm (dnnl_sgemm; dnnl_dim_t is int64_t, status 0 = success) */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                             const float *, int64_t, float, float *, int64_t);

static sgemm_fn cblas_sgemm_ptr;
static dnnl_sgemm_fn dnnl_sgemm_ptr;
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
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
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
}

static void load_library(void) {
    snprintf(info.gemm, sizeof info.gemm, "OpenBLAS");
    const char *forced = getenv("SHARC_BLAS_CORETYPE");
    const char *want = forced ? (strcmp(forced, "auto") == 0 ? "" : forced) : pick_coretype();
    snprintf(info.coretype, sizeof info.coretype, "%s", want);
    const char *env = getenv("OPENBLAS_CORETYPE");
    if (want[0]) {
        if (env && strcasecmp(env, want) != 0)
            snprintf(info.overridden, sizeof info.overridden, "%s", env);
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

void sharc_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (!cblas_sgemm_ptr) {
        if (sharc_blas_init(0) != SHARC_OK) sharc_fatal(__FILE__, __LINE__, "%s", load_error);
    }
    if (M == 0 || N == 0) return;
    if (!(dnnl_sgemm_ptr && (int64_t)M * N * K >= SHARC_ONEDNN_MIN_WORK &&
          dnnl_sgemm_ptr(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0))
        cblas_sgemm_ptr(ROW_MAJOR, trans_a ? TRANS : NO_TRANS, trans_b ? TRANS : NO_TRANS, M, N, K,
                        alpha, A, lda, B, ldb, beta, C, ldc);
    sharc_progress_poll(); /* note [progress] */
}
