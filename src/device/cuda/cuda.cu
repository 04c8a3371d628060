/* cuda.cu: the CUDA device backend (sharc_cuda_device_i): the probe that says
 * what is missing on a machine that cannot run it, device memory, copies,
 * memsets, streams (each with its scratch and cuBLASLt workspace), events,
 * and the kernel table of this folder's sharc_cuda_* kernels; plus the
 * cuBLASLt loader and GEMM helper.
 *
 * Note [cuda-build] (docs/ARCHITECTURE.md): the CUDA runtime is linked
 * statically (libcudart_static.a), which itself loads the driver
 * (libcuda.so.1) at the first CUDA call, so one sharc binary runs on a
 * machine without a driver; cuBLASLt (~540 MB) is dlopen'ed only when a cuda
 * device is opened. One process drives one GPU (cudaSetDevice at open). */
#include "cuda.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- cuBLASLt */

/* The entry points sharc uses, resolved with dlsym (types from the header). */
static struct {
    bool tried, ok;
    char why[512];
    void *lib;
    cublasLtHandle_t handle;
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
} lt;
static pthread_mutex_t lt_lock = PTHREAD_MUTEX_INITIALIZER;

#define GEMM_WS_BYTES ((size_t)32 << 20)

static bool lt_sym(void **fn, const char *name) {
    *fn = dlsym(lt.lib, name);
    if (!*fn)
        snprintf(lt.why, sizeof lt.why, "cuda: %s has no symbol %s; install CUDA 13's cuBLAS", "libcublasLt", name);
    return *fn != NULL;
}

extern "C" sharc_status sharc_cuda_blas_load(void) {
    pthread_mutex_lock(&lt_lock);
    if (!lt.tried) {
        lt.tried = true;
        const char *env = getenv("SHARC_CUBLASLT_LIB");
        const char *names[] = {env && env[0] ? env : NULL, "libcublasLt.so.13",
                               "/usr/local/cuda/lib64/libcublasLt.so.13", "libcublasLt.so"};
        char err[256] = "";
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !lt.lib; i++) {
            if (!names[i]) continue;
            lt.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            if (!lt.lib && !err[0]) snprintf(err, sizeof err, "%s", dlerror());
            if (env && env[0] && i == 0 && !lt.lib) break; /* a named file is not replaced by a search */
        }
        if (!lt.lib) {
            snprintf(lt.why, sizeof lt.why,
                     "cuda: cannot load cuBLASLt (%s); install CUDA 13's libcublasLt.so.13, put it on LD_LIBRARY_PATH "
                     "or name it in SHARC_CUBLASLT_LIB",
                     err);
        } else if (lt_sym((void **)&lt.create, "cublasLtCreate") &&
                   lt_sym((void **)&lt.desc_create, "cublasLtMatmulDescCreate") &&
                   lt_sym((void **)&lt.desc_destroy, "cublasLtMatmulDescDestroy") &&
                   lt_sym((void **)&lt.desc_set, "cublasLtMatmulDescSetAttribute") &&
                   lt_sym((void **)&lt.layout_create, "cublasLtMatrixLayoutCreate") &&
                   lt_sym((void **)&lt.layout_destroy, "cublasLtMatrixLayoutDestroy") &&
                   lt_sym((void **)&lt.pref_create, "cublasLtMatmulPreferenceCreate") &&
                   lt_sym((void **)&lt.pref_destroy, "cublasLtMatmulPreferenceDestroy") &&
                   lt_sym((void **)&lt.pref_set, "cublasLtMatmulPreferenceSetAttribute") &&
                   lt_sym((void **)&lt.heuristic, "cublasLtMatmulAlgoGetHeuristic") &&
                   lt_sym((void **)&lt.matmul, "cublasLtMatmul")) {
            lt.ok = true;
        }
    }
    bool ok = lt.ok;
    pthread_mutex_unlock(&lt_lock);
    return ok ? SHARC_OK : sharc_error(SHARC_ERR_UNSUPPORTED, "%s", lt.why);
}

#define LT_CHECK(call)                                                                                                 \
    do {                                                                                                               \
        cublasStatus_t e_ = (call);                                                                                    \
        if (e_ != CUBLAS_STATUS_SUCCESS)                                                                               \
            sharc_fatal(__FILE__, __LINE__, "cuda: %s: cuBLAS status %d", #call, (int)e_);                             \
    } while (0)

/* The stream's cuBLASLt workspace, allocated at its first GEMM. */
static void *gemm_ws(sharc_stream *s) {
    sharc_cuda_stream *cs = (sharc_cuda_stream *)s->impl;
    if (!cs->gemm_ws) {
        cs->gemm_ws = sharc_device_alloc(s->dev, GEMM_WS_BYTES, SHARC_MEM_OTHER);
        if (!cs->gemm_ws) sharc_fatal(__FILE__, __LINE__, "%s", sharc_last_error());
    }
    return cs->gemm_ws;
}

/* the largest power of two (at most 256) that divides the address */
static uint32_t ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al /= 2;
    return al;
}

/* Note [gemm-plans]. A product's cuBLASLt descriptors and the algorithm the
 * heuristic chose depend only on its shape, dtype and the alignment of its
 * pointers, and a training step repeats the same few dozen shapes every
 * step: building them and asking the heuristic on every call (tens of
 * microseconds of host time per product) is done once per shape instead.
 * The plan of a key is kept in a small table (round-robin replacement when
 * full: a replaced plan's objects are destroyed; the lock is held through
 * the cublasLtMatmul call that uses one, so no other thread replaces it
 * meanwhile). A product runs with its key's plan only: the pointers of a
 * later call are at least as aligned as the key says, since the alignment is
 * part of the key. */
/* the epilogue a key asks for (notes [gemm-bias], [gemm-gelu]) */
enum { EPI_NONE, EPI_BIAS, EPI_GELU_AUX, EPI_GELU_AUX_BIAS, EPI_DGELU };

typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc;
    sharc_dtype ab;
    uint32_t al[4]; /* A, B, C (= D), the GELU aux: the largest power of two up to 256 dividing each address */
    int epi;        /* EPI_*: what the caller asks for */
    int ldaux;      /* the GELU aux's leading dimension (0 without) */
} gemm_key;

typedef struct {
    bool used;
    bool built; /* desc, layouts and algo exist (false: a GELU epilogue the heuristic refused) */
    int epi;    /* the epilogue in desc: the key's, or EPI_NONE where it was refused */
    gemm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

#define GEMM_PLANS 128
static gemm_plan plans[GEMM_PLANS];
static int plans_next;
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;

static const cublasLtEpilogue_t epi_lt[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                            CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                            CUBLASLT_EPILOGUE_DGELU};

/* aux: the GELU aux pointer of the call that builds the plan (the heuristic
 * reads its alignment from it, cublasLt.h says) */
static bool gemm_plan_try(gemm_plan *p, const gemm_key *q, int epi, const void *aux) {
    cudaDataType_t dt = q->ab == SHARC_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const int m = q->m, n = q->n, k = q->k;
    /* CUBLAS_COMPUTE_32F: no TF32 (the parity mode); bf16 inputs accumulate in fp32 */
    LT_CHECK(lt.desc_create(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = q->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = q->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (epi != EPI_NONE) {
        cublasLtEpilogue_t ep = epi_lt[epi];
        LT_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    }
    if (epi >= EPI_GELU_AUX) {
        int64_t ld = q->ldaux;
        LT_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        LT_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    /* stored shapes: op(A) is m x k, op(B) is k x n */
    LT_CHECK(lt.layout_create(&p->la, dt, q->ta ? k : m, q->ta ? m : k, q->lda));
    LT_CHECK(lt.layout_create(&p->lb, dt, q->tb ? n : k, q->tb ? k : n, q->ldb));
    LT_CHECK(lt.layout_create(&p->lc, CUDA_R_32F, m, n, q->ldc));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(lt.pref_create(&pref));
    size_t wsb = GEMM_WS_BYTES;
    LT_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    /* the heuristic assumes 256-byte aligned matrices unless told: rows of a
     * chunk (lmhead) or a view into a unit's flat buffer may be less aligned */
    LT_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &q->al[0], sizeof q->al[0]));
    LT_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &q->al[1], sizeof q->al[1]));
    LT_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &q->al[2], sizeof q->al[2]));
    LT_CHECK(lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &q->al[2], sizeof q->al[2]));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasStatus_t hs = lt.heuristic(lt.handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &heur, &found);
    lt.pref_destroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS || found < 1) {
        lt.layout_destroy(p->la);
        lt.layout_destroy(p->lb);
        lt.layout_destroy(p->lc);
        lt.desc_destroy(p->desc);
        if (epi != EPI_NONE) return false; /* the caller does the epilogue's work itself */
        sharc_fatal(__FILE__, __LINE__, "cuda gemm: cuBLASLt has no algorithm for m=%d n=%d k=%d %s (status %d)", m, n,
                    k, sharc_dtype_st_name(q->ab), (int)hs);
    }
    p->algo = heur.algo;
    p->key = *q;
    p->epi = epi;
    p->used = p->built = true;
    return true;
}

static void gemm_plan_build(gemm_plan *p, const gemm_key *q, const void *aux) {
    if (q->epi != EPI_NONE && gemm_plan_try(p, q, q->epi, aux)) return;
    if (q->epi <= EPI_BIAS) {
        gemm_plan_try(p, q, EPI_NONE, NULL);
        return;
    }
    p->key = *q; /* a refused GELU epilogue: remembered, so the heuristic is asked once */
    p->epi = EPI_NONE;
    p->used = true;
    p->built = false;
}

/* The plan of key q (plan_lock held). */
static const gemm_plan *gemm_plan_for(const gemm_key *q, const void *aux) {
    for (int i = 0; i < GEMM_PLANS; i++)
        if (plans[i].used && memcmp(&plans[i].key, q, sizeof *q) == 0) return &plans[i];
    gemm_plan *p = &plans[plans_next];
    plans_next = (plans_next + 1) % GEMM_PLANS;
    if (p->used && p->built) {
        lt.layout_destroy(p->la);
        lt.layout_destroy(p->lb);
        lt.layout_destroy(p->lc);
        lt.desc_destroy(p->desc);
    }
    p->used = p->built = false;
    gemm_plan_build(p, q, aux);
    return p;
}

/* C = beta C for k = 0 (cuBLASLt rejects it) */
static void gemm_k0(sharc_stream *s, int m, int n, float beta, float *C, int ldc) {
    if (beta == 0.0f) {
        SHARC_CUDA_CHECK(cudaMemset2DAsync(C, (size_t)ldc * sizeof(float), 0, (size_t)m * sizeof(float), (size_t)n,
                                           sharc_cuda_cs(s)));
    } else if (beta != 1.0f) {
        sharc_fatal(__FILE__, __LINE__, "cuda gemm: k = 0 with beta %g", (double)beta);
    }
}

/* One product through its key's plan: the epilogue's pointers set per call.
 * Returns the plan's epilogue, or -1 for a refused GELU one (nothing ran). */
static int gemm_run(sharc_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *A, int lda,
                    const void *B, int ldb, float beta, float *C, int ldc, sharc_dtype ab, int epi, const float *bias,
                    const float *aux, int ldaux) {
    if (ab != SHARC_DT_F32 && ab != SHARC_DT_BF16)
        sharc_fatal(__FILE__, __LINE__, "cuda gemm: inputs of dtype %s", sharc_dtype_st_name(ab));
    void *ws = gemm_ws(s);
    gemm_key key;
    memset(&key, 0, sizeof key); /* the padding too: keys are compared as bytes */
    key.ta = ta, key.tb = tb, key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
    key.ab = ab, key.al[0] = ptr_align(A), key.al[1] = ptr_align(B), key.al[2] = ptr_align(C);
    key.epi = epi;
    if (epi >= EPI_GELU_AUX) key.al[3] = ptr_align(aux), key.ldaux = ldaux;
    pthread_mutex_lock(&plan_lock);
    const gemm_plan *p = gemm_plan_for(&key, aux);
    if (!p->built) {
        pthread_mutex_unlock(&plan_lock);
        return -1;
    }
    if (p->epi == EPI_BIAS || p->epi == EPI_GELU_AUX_BIAS)
        LT_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (p->epi >= EPI_GELU_AUX)
        LT_CHECK(lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    LT_CHECK(lt.matmul(lt.handle, p->desc, &alpha, A, p->la, B, p->lb, &beta, C, p->lc, C, p->lc, &p->algo, ws,
                       GEMM_WS_BYTES, sharc_cuda_cs(s)));
    int done = p->epi;
    pthread_mutex_unlock(&plan_lock);
    return done;
}

/* Note [gemm-bias]. y = op(A) op(B) (+ bias[i] on row i of the column-major
 * result, GPT-2's linear biases) in one cuBLASLt call with the BIAS
 * epilogue, saving a pass over the output. Used when the bias pointer is
 * 16-byte aligned and the heuristic has an algorithm with the epilogue;
 * otherwise the plain product, and false is returned: the caller adds the
 * bias itself (k_bias in layers.cu). The values are those of a separate
 * add: the fp32 result plus the bias, rounded once. */
extern "C" bool sharc_cuda_gemm_bias(sharc_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *A,
                                     int lda, const void *B, int ldb, float beta, float *C, int ldc, sharc_dtype ab,
                                     const float *bias) {
    if (m <= 0 || n <= 0) return true;
    if (k <= 0) {
        gemm_k0(s, m, n, beta, C, ldc);
        return bias == NULL;
    }
    int epi = bias && ptr_align(bias) >= 16 ? EPI_BIAS : EPI_NONE;
    return gemm_run(s, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, ab, epi, bias, NULL, 0) == EPI_BIAS ||
           !bias;
}

/* Note [gemm-gelu]. GPT-2's MLP: fc = x wfc^T + bfc and fca = gelu(fc) in
 * one cuBLASLt call with the GELU_AUX_BIAS epilogue (GELU_AUX without a
 * bias): D is fca, the aux output fc (backward reads it); and in backward
 * dfc = (dres wproj) * gelu'(fc) in the proj product's dx with the DGELU
 * epilogue, fc as its aux input. The BGRAD variants are not used: they
 * overwrite the bias gradient, sharc accumulates it. Both are fp32 D (the
 * aux takes D's type, cublasLt.h's EPILOGUE_AUX_DATA_TYPE, and the model
 * keeps fc in fp32), so the bf16 copy of fca is a cast after the product.
 * cublasLt.h's rules, checked before asking: the aux's leading dimension a
 * multiple of 8 and at least m; the aux and bias pointers 16-byte aligned
 * (our rule, as for the bias; the heuristic reads the aux pointer's
 * alignment, so it is part of the plan's key). Where they fail or the
 * heuristic has no algorithm, false and nothing computed: the caller runs
 * the unfused kernels (the same formulas). cuBLASLt's GELU is documented as
 * "GELU" only; that it is the tanh form of gelu_forward is checked by
 * tests/gpu/kernels.c against the CPU's on a GPU (not yet run on one), and
 * its speed is unmeasured. */
extern "C" bool sharc_cuda_gemm_gelu(sharc_stream *s, bool gelu_fwd, bool ta, bool tb, int m, int n, int k,
                                     const void *A, int lda, const void *B, int ldb, float *C, int ldc, sharc_dtype ab,
                                     const float *bias, float *aux, int ldaux) {
    if (m <= 0 || n <= 0 || k <= 0) return false;
    if (ldaux % 8 != 0 || ldaux < m || ptr_align(aux) < 16 || (bias && ptr_align(bias) < 16)) return false;
    int epi = !gelu_fwd ? EPI_DGELU : bias ? EPI_GELU_AUX_BIAS : EPI_GELU_AUX;
    return gemm_run(s, ta, tb, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, ab, epi, bias, aux, ldaux) == epi;
}

extern "C" void sharc_cuda_gemm(sharc_stream *s, bool ta, bool tb, int m, int n, int k, float alpha, const void *A,
                                int lda, const void *B, int ldb, float beta, float *C, int ldc, sharc_dtype ab) {
    sharc_cuda_gemm_bias(s, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, ab, NULL);
}

/* --------------------------------------------------------------- backend */

static char probe_why[512];

static sharc_status cuda_probe(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaErrorInitializationError ||
        e == cudaErrorCompatNotSupportedOnDevice) {
        snprintf(probe_why, sizeof probe_why, "%s",
                 e == cudaErrorNoDevice
                     ? "cuda: the NVIDIA driver sees no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                     : "cuda: no usable NVIDIA driver (libcuda.so.1 missing or older than CUDA 13 needs); install the "
                       "driver or use train.device: cpu");
        return sharc_error(SHARC_ERR_UNSUPPORTED, "%s (%s)", probe_why, cudaGetErrorString(e));
    }
    if (e != cudaSuccess)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "cuda: cannot count GPUs: %s; use train.device: cpu",
                           cudaGetErrorString(e));
    if (n < 1) return sharc_error(SHARC_ERR_UNSUPPORTED, "cuda: the NVIDIA driver sees no GPU (check nvidia-smi)");
    return sharc_cuda_blas_load();
}

static int cuda_count(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

static sharc_status cuda_open(sharc_device *d, int index) {
    cudaError_t e = cudaSetDevice(index);
    if (e == cudaSuccess) e = cudaFree(0); /* create the context now, not in the first step */
    if (e != cudaSuccess)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "cuda: cannot use GPU %d: %s", index, cudaGetErrorString(e));
    pthread_mutex_lock(&lt_lock);
    cublasStatus_t b = lt.handle ? CUBLAS_STATUS_SUCCESS : lt.create(&lt.handle);
    pthread_mutex_unlock(&lt_lock);
    if (b != CUBLAS_STATUS_SUCCESS)
        return sharc_error(SHARC_ERR_UNSUPPORTED, "cuda: cublasLtCreate failed on GPU %d (status %d)", index, (int)b);
    return SHARC_OK;
}

/* Note [cuda-zero-alloc]. A new device buffer reads as zeros on every
 * stream (the CPU's calloc promise), without a host wait per buffer. All of
 * sharc's streams are cudaStreamNonBlocking (cuda_stream_new), the default
 * one included, so a cudaMemset on the legacy stream would be ordered before
 * none of them: each allocation queues cudaMemsetAsync on the device's
 * default stream instead, records one event there (zero_ev) and bumps
 * sharc_cuda_zero_gen; any other stream, the next time work is queued on it
 * (sharc_cuda_cs, the one way to a cudaStream_t), waits for that event on
 * the device first, once per batch of allocations. cudaFree waits for the
 * device, so a freed block's queued memset cannot outlive it. Not ordered:
 * work on the legacy stream (NCCL given a NULL stream), which sharc queues
 * only after synchronizing the streams that wrote what it reads. One GPU per
 * process (note [gpu-of-rank]), so one event serves. */
unsigned long sharc_cuda_zero_gen;
static cudaEvent_t zero_ev;
static pthread_mutex_t zero_lock = PTHREAD_MUTEX_INITIALIZER;

void sharc_cuda_zero_order(sharc_cuda_stream *cs) {
    pthread_mutex_lock(&zero_lock);
    unsigned long g = sharc_cuda_zero_gen;
    if (cs->zero_seen != g) {
        SHARC_CUDA_CHECK(cudaStreamWaitEvent(cs->cs, zero_ev, 0));
        cs->zero_seen = g;
    }
    pthread_mutex_unlock(&zero_lock);
}

static void *cuda_alloc(sharc_device *d, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        (void)cudaGetLastError(); /* an out-of-memory error is not sticky: clear it */
        return NULL;
    }
    sharc_cuda_stream *c0 = (sharc_cuda_stream *)sharc_device_stream(d)->impl;
    pthread_mutex_lock(&zero_lock);
    cudaError_t e = zero_ev ? cudaSuccess : cudaEventCreateWithFlags(&zero_ev, cudaEventDisableTiming);
    if (e == cudaSuccess && c0->zero_seen != sharc_cuda_zero_gen) e = cudaStreamWaitEvent(c0->cs, zero_ev, 0);
    if (e == cudaSuccess) e = cudaMemsetAsync(p, 0, bytes, c0->cs);
    if (e == cudaSuccess) e = cudaEventRecord(zero_ev, c0->cs);
    if (e == cudaSuccess) c0->zero_seen = __atomic_add_fetch(&sharc_cuda_zero_gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&zero_lock);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free(sharc_device *d, void *p) { cudaFree(p); }

static void *cuda_host_alloc(sharc_device *d, size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    memset(p, 0, bytes); /* page-aligned (cudaHostAlloc), so 64-byte aligned too */
    return p;
}

static void cuda_host_free(sharc_device *d, void *p) { cudaFreeHost(p); }

static sharc_status cuda_status(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return SHARC_OK;
    return sharc_error(SHARC_ERR_INTERNAL, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static sharc_status cuda_memset0(sharc_device *d, void *p, size_t bytes, sharc_stream *s) {
    return cuda_status(cudaMemsetAsync(p, 0, bytes, sharc_cuda_cs(s)), "memset");
}

static sharc_status cuda_copy(sharc_device *d, void *dst, const void *src, size_t bytes, sharc_copy_kind kind,
                              sharc_stream *s) {
    static const cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, kinds[kind], sharc_cuda_cs(s)), "copy");
}

static sharc_status cuda_stream_new(sharc_device *d, sharc_stream *s) {
    sharc_cuda_stream *cs = (sharc_cuda_stream *)calloc(1, sizeof *cs);
    if (!cs) return sharc_error(SHARC_ERR_NOMEM, "cuda: out of memory");
    /* non-blocking: no implicit ordering with the legacy default stream */
    cudaError_t e = cudaStreamCreateWithFlags(&cs->cs, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(cs);
        return cuda_status(e, "stream create");
    }
    s->impl = cs;
    return SHARC_OK;
}

static void *cuda_stream_native(sharc_stream *s) { return (void *)sharc_cuda_cs(s); }

static void cuda_stream_free(sharc_stream *s) {
    sharc_cuda_stream *cs = (sharc_cuda_stream *)s->impl;
    if (!cs) return;
    cudaStreamSynchronize(cs->cs);
    sharc_device_free(s->dev, cs->scratch);
    sharc_device_free(s->dev, cs->gemm_ws);
    cudaStreamDestroy(cs->cs);
    free(cs);
    s->impl = NULL;
}

static sharc_status cuda_synchronize(sharc_stream *s) {
    return cuda_status(cudaStreamSynchronize(sharc_cuda_cs(s)), "stream synchronize");
}

static sharc_status cuda_event_new(sharc_event *ev) {
    cudaEvent_t e;
    sharc_status st = cuda_status(cudaEventCreateWithFlags(&e, ev->timed ? cudaEventDefault : cudaEventDisableTiming),
                                  "event create");
    if (st == SHARC_OK) ev->impl = (void *)e;
    return st;
}

static void cuda_event_free(sharc_event *ev) { cudaEventDestroy((cudaEvent_t)ev->impl); }

static sharc_status cuda_event_record(sharc_event *ev, sharc_stream *s) {
    return cuda_status(cudaEventRecord((cudaEvent_t)ev->impl, sharc_cuda_cs(s)), "event record");
}

static sharc_status cuda_event_wait(sharc_event *ev, sharc_stream *s) {
    return cuda_status(cudaStreamWaitEvent(sharc_cuda_cs(s), (cudaEvent_t)ev->impl, 0), "stream wait event");
}

static sharc_status cuda_event_synchronize(sharc_event *ev) {
    return cuda_status(cudaEventSynchronize((cudaEvent_t)ev->impl), "event synchronize");
}

/* cudaErrorNotReady: not reached yet (and not an error: cleared by the
 * query, nothing sticky); any other error is one */
static sharc_status cuda_event_query(sharc_event *ev, bool *done) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev->impl);
    *done = e != cudaErrorNotReady;
    if (!*done) (void)cudaGetLastError(); /* the runtime keeps not-ready as the last error: clear it */
    return *done ? cuda_status(e, "event query") : SHARC_OK;
}

static sharc_status cuda_host_func(sharc_stream *s, void (*fn)(void *), void *arg) {
    return cuda_status(cudaLaunchHostFunc(sharc_cuda_cs(s), fn, arg), "launch host function");
}

static sharc_status cuda_event_elapsed(sharc_event *start, sharc_event *end, double *seconds) {
    float ms = 0.0f;
    sharc_status st =
        cuda_status(cudaEventElapsedTime(&ms, (cudaEvent_t)start->impl, (cudaEvent_t)end->impl), "event elapsed time");
    *seconds = 1e-3 * (double)ms;
    return st;
}

extern "C" void *sharc_cuda_scratch(sharc_stream *s, size_t bytes) {
    sharc_cuda_stream *cs = (sharc_cuda_stream *)s->impl;
    if (cs->scratch_bytes < bytes) {
        /* the old block may still be read by queued work: wait for it */
        SHARC_CUDA_CHECK(cudaStreamSynchronize(cs->cs));
        sharc_device_free(s->dev, cs->scratch);
        size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
        cs->scratch = sharc_device_alloc(s->dev, want, SHARC_MEM_OTHER);
        if (!cs->scratch) sharc_fatal(__FILE__, __LINE__, "%s", sharc_last_error());
        cs->scratch_bytes = want;
    }
    return cs->scratch;
}

/* Note [cuda-peak]: the dense peak MFU divides by (sharc_device_peak_flops),
 * SMs x clock x FLOPs per clock per SM, from cudaDeviceGetAttribute (CUDA
 * 13 dropped clockRate from cudaDeviceProp; the attribute is the highest
 * boost clock, in kHz). Per SM and clock, from NVIDIA's architecture
 * whitepapers: bf16 operands with fp32 accumulation on the tensor cores
 * 2048 (sm_80), 1024 (sm_86, sm_89: the workstation and data-center parts;
 * GeForce cards run fp32 accumulation at half that), 4096 (sm_90); fp32
 * (CUBLAS_COMPUTE_32F, no TF32: the FFMA units) 128 (sm_80), 256 (sm_86,
 * sm_89, sm_90). Hopper's tensor cores are rated at a lower boost clock than
 * the one reported (H100 SXM5: 1830 of 1980 MHz, PCIe: 1620 of 1755), so on
 * sm_90 the bf16 figure takes 1830/1980 of it: 989.4 TFLOP/s on an H100 SXM.
 * Other architectures: unknown (0; log.peak_tflops gives it). */
static double cuda_peak_flops(sharc_device *d, sharc_dtype dt, char *how, size_t n) {
    int sms = 0, khz = 0, major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d->index) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, d->index) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d->index) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d->index) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(how, n, "cuda: cannot read GPU %d's SM count, clock and compute capability", d->index);
        return 0.0;
    }
    const int cc = 10 * major + minor;
    const bool b16 = dt == SHARC_DT_BF16;
    double per_clock = 0.0, clock_scale = 1.0;
    if (cc == 80) per_clock = b16 ? 2048 : 128;
    else if (cc == 86 || cc == 89) per_clock = b16 ? 1024 : 256;
    else if (cc == 90) per_clock = b16 ? 4096 : 256, clock_scale = b16 ? 1830.0 / 1980.0 : 1.0;
    const double mhz = khz * 1e-3 * clock_scale;
    if (per_clock == 0.0 || sms <= 0 || khz <= 0) {
        snprintf(how, n, "cuda sm_%d: no %s peak known for this architecture (set log.peak_tflops)", cc,
                 b16 ? "bf16" : "fp32");
        return 0.0;
    }
    snprintf(how, n, "cuda sm_%d: %d SMs x %.0f MHz x %.0f %s FLOP/clock", cc, sms, mhz, per_clock,
             b16 ? "bf16 tensor-core" : "fp32 FFMA");
    return (double)sms * mhz * 1e6 * per_clock;
}

/* The memory ceiling of the profile (sharc/prof.h): the DRAM's theoretical
 * peak, bus width x memory clock x 2 (double data rate), from
 * cudaDeviceGetAttribute; an H100 SXM5 answers 5120 bits x 2619 MHz: 3.35
 * TB/s. A measured copy reaches ~90% of it. */
static double cuda_peak_bandwidth(sharc_device *d, char *how, size_t n) {
    int khz = 0, bits = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, d->index) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, d->index) != cudaSuccess || khz <= 0 ||
        bits <= 0) {
        (void)cudaGetLastError();
        snprintf(how, n, "cuda: cannot read GPU %d's memory clock and bus width", d->index);
        return 0.0;
    }
    snprintf(how, n, "cuda: %d-bit bus x %.0f MHz x 2 (DDR)", bits, khz * 1e-3);
    return (double)bits / 8.0 * (double)khz * 1e3 * 2.0;
}

/* bf16 compute (note [cuda-bf16] in layers.cu): cuBLASLt multiplies bf16
 * operands on every GPU this backend targets; SHARC_BF16=off turns it off,
 * as on the CPU (the model then computes in fp32). */
static bool cuda_bf16_compute(void) {
    const char *want = getenv("SHARC_BF16");
    return !(want && strcmp(want, "off") == 0);
}

/* Every slot is filled: a slot left NULL here would make opening the device
 * fail with "kernel not implemented on cuda: NAME" (note [kernel-table]). */
static sharc_kernels make_kernels(void) {
    sharc_kernels k;
    memset(&k, 0, sizeof k);
    k.matmul_forward = sharc_cuda_matmul_forward;
    k.matmul_backward = sharc_cuda_matmul_backward;
    k.layernorm_forward = sharc_cuda_layernorm_forward;
    k.layernorm_backward = sharc_cuda_layernorm_backward;
    k.rmsnorm_forward = sharc_cuda_rmsnorm_forward;
    k.rmsnorm_backward = sharc_cuda_rmsnorm_backward;
    k.head_rmsnorm_forward = sharc_cuda_head_rmsnorm_forward;
    k.head_rmsnorm_backward = sharc_cuda_head_rmsnorm_backward;
    k.gelu_forward = sharc_cuda_gelu_forward;
    k.gelu_backward = sharc_cuda_gelu_backward;
    k.swiglu_forward = sharc_cuda_swiglu_forward;
    k.swiglu_backward = sharc_cuda_swiglu_backward;
    k.add = sharc_cuda_add;
    k.embedding_forward = sharc_cuda_embedding_forward;
    k.embedding_backward = sharc_cuda_embedding_backward;
    k.rope_table = sharc_cuda_rope_table;
    k.rope_table_pos = sharc_cuda_rope_table_pos;
    k.rope_forward = sharc_cuda_rope_forward;
    k.rope_backward = sharc_cuda_rope_backward;
    k.attention_workspace = sharc_cuda_attention_workspace;
    k.attention_forward = sharc_cuda_attention_forward;
    k.attention_backward = sharc_cuda_attention_backward;
    k.attention_cached = sharc_cuda_attention_cached;
    k.xent_forward_backward = sharc_cuda_xent_forward_backward;
    k.lmhead_xent = sharc_cuda_lmhead_xent;
    k.cast = sharc_cuda_cast;
    k.round = sharc_cuda_round;
    k.accumulate = sharc_cuda_accumulate;
    k.sum_ranks = sharc_cuda_sum_ranks;
    k.sumsq = sharc_cuda_sumsq;
    k.sumsq_multi = sharc_cuda_sumsq_multi;
    k.loss_add = sharc_cuda_loss_add;
    k.adamw = sharc_cuda_adamw;
    k.copy_block = sharc_cuda_copy_block;
    k.fill = sharc_cuda_fill;
    k.init_normal = sharc_cuda_init_normal;
    k.adamw_multi = sharc_cuda_adamw_multi;
    k.add_layernorm_forward = sharc_cuda_add_layernorm_forward;
    k.add_rmsnorm_forward = sharc_cuda_add_rmsnorm_forward;
    k.moe_route_forward = sharc_cuda_moe_route_forward;
    k.moe_route_backward = sharc_cuda_moe_route_backward;
    k.moe_gather = sharc_cuda_moe_gather;
    k.moe_scatter_add = sharc_cuda_moe_scatter_add;
    k.moe_row_dot = sharc_cuda_moe_row_dot;
    k.moe_prob_sum = sharc_cuda_moe_prob_sum;
    k.vocab_embedding_forward = sharc_cuda_vocab_embedding_forward;
    k.vocab_embedding_backward = sharc_cuda_vocab_embedding_backward;
    k.vocab_xent_stats = sharc_cuda_vocab_xent_stats;
    k.vocab_xent_finish = sharc_cuda_vocab_xent_finish;
    k.bf16_compute = cuda_bf16_compute;
    k.matmul_forward_bf16 = sharc_cuda_matmul_forward_bf16;
    k.matmul_backward_bf16 = sharc_cuda_matmul_backward_bf16;
    k.lmhead_xent_bf16 = sharc_cuda_lmhead_xent_bf16;
    k.attention_forward_bf16 = sharc_cuda_attention_forward_bf16;
    k.attention_backward_bf16 = sharc_cuda_attention_backward_bf16;
    k.matmul_forward_b16 = sharc_cuda_matmul_forward_b16;
    k.matmul_backward_b16 = sharc_cuda_matmul_backward_b16;
    k.matmul_gelu_forward = sharc_cuda_matmul_gelu_forward;
    k.matmul_backward_dgelu = sharc_cuda_matmul_backward_dgelu;
    k.matmul_gelu_forward_b16 = sharc_cuda_matmul_gelu_forward_b16;
    k.matmul_backward_dgelu_b16 = sharc_cuda_matmul_backward_dgelu_b16;
    return k;
}

static const sharc_kernels cuda_kernels = make_kernels();

static sharc_device_i make_iface(void) {
    sharc_device_i i;
    memset(&i, 0, sizeof i);
    i.name = "cuda";
    i.host_memory = false;
    i.probe = cuda_probe;
    i.count = cuda_count;
    i.open = cuda_open;
    i.alloc = cuda_alloc;
    i.free = cuda_free;
    i.host_alloc = cuda_host_alloc;
    i.host_free = cuda_host_free;
    i.memset0 = cuda_memset0;
    i.copy = cuda_copy;
    i.stream_new = cuda_stream_new;
    i.stream_free = cuda_stream_free;
    i.stream_native = cuda_stream_native;
    i.synchronize = cuda_synchronize;
    i.event_new = cuda_event_new;
    i.event_free = cuda_event_free;
    i.event_record = cuda_event_record;
    i.event_wait = cuda_event_wait;
    i.event_synchronize = cuda_event_synchronize;
    i.event_query = cuda_event_query;
    i.host_func = cuda_host_func;
    i.event_elapsed = cuda_event_elapsed;
    i.peak_flops = cuda_peak_flops;
    i.peak_bandwidth = cuda_peak_bandwidth;
    i.kernels = &cuda_kernels;
    return i;
}

extern "C" const sharc_device_i sharc_cuda_device_i = make_iface();
