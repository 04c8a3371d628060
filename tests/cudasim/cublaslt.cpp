/* cublaslt.cpp: the CUDA simulator's cuBLASLt (note [cudasim]), built as
 * libcudasim_cublaslt.so and loaded by the CUDA backend through
 * SHARC_CUBLASLT_LIB, as the real libcublasLt.so.13 is on a GPU machine.
 * It does what cuBLASLt's documentation says of the calls sharc makes, and
 * refuses what sharc does not use (an attribute it does not know, another
 * compute type, an epilogue other than BIAS, GELU_AUX(_BIAS), DGELU) so that new use is simulated
 * on purpose:
 * D = alpha op(A) op(B) + beta C, column-major, op(A) m x k and op(B) k x n
 * from each layout's stored rows, columns and leading dimension; fp32 or
 * bf16 A and B, fp32 C and D, fp32 accumulation in k order; C is not read
 * when beta is 0; the BIAS epilogue adds bias[i] to row i of D (after
 * alpha op(A) op(B) + beta C, before the store); GELU_AUX(_BIAS) stores that
 * sum (after the bias) in the aux matrix (D's type, fp32; leading dimension
 * AUX_LD) and gelu of it, the tanh form, in D; DGELU stores alpha op(A)
 * op(B) times gelu'(aux) in D (cublasLt.h's descriptions; the formula is
 * sharc's gelu_backward, note [gemm-gelu]). Checks the real library makes or leaves to a crash: the
 * layouts' shapes agree, every matrix lies inside one device allocation, the
 * pointers are as aligned as the preference promised the heuristic, the
 * workspace is at least what the chosen algorithm needs. */
#include <cublasLt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* from cudasim.cpp, resolved in the program that loads this library */
extern "C" int cudasim_device_range(const void *p, size_t n);
extern "C" void cudasim_enqueue(cudaStream_t s, const char *what, void (*fn)(void *), void *arg);

namespace {

struct desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t ta, tb;
    uint32_t epilogue; /* CUBLASLT_EPILOGUE_DEFAULT, _BIAS, _GELU_AUX, _GELU_AUX_BIAS or _DGELU */
    const float *bias; /* with _BIAS: m fp32 values (D's type), one per row of D */
    float *aux;        /* with the GELU epilogues: (m, n) fp32 at leading dimension aux_ld */
    int64_t aux_ld;
};
struct layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct pref {
    uint64_t max_ws;
    uint32_t align[4]; /* A, B, C, D */
};
/* what the heuristic chose, kept in cublasLtMatmulAlgo_t's 64 bytes */
struct algo {
    uint32_t magic;
    uint32_t align[4];
    uint32_t aux_align; /* the aux pointer's at the query (the heuristic reads it, cublasLt.h says) */
};

cublasStatus_t bad(cublasStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t bad(cublasStatus_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudasim cuBLASLt: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return st;
}

/* calls counted for CUDASIM_SYNC_STATS=1 (printed at exit): a product's
 * plan is built once per shape (note [gemm-plans] in src/device/cuda/cuda.cu) */
long n_heuristic, n_matmul, n_bias, n_gelu;

__attribute__((destructor)) void print_stats(void) {
    const char *e = getenv("CUDASIM_SYNC_STATS");
    if (e && e[0] == '1')
        fprintf(stderr,
                "cudasim cuBLASLt: %ld matmuls, %ld heuristic queries, %ld bias epilogues, %ld gelu epilogues\n",
                n_matmul, n_heuristic, n_bias, n_gelu);
}

size_t dt_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 0; }

float load(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

bool is_gelu(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
bool has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

/* the tanh form, as sharc's gelu_forward / gelu_backward */
const float GK = 0.7978845608028654f, GC = 0.044715f;
float gelu(float v) { return 0.5f * v * (1.0f + tanhf(GK * (v + GC * v * v * v))); }
float dgelu(float v) {
    float t = tanhf(GK * (v + GC * v * v * v));
    return 0.5f * (1.0f + t) + 0.5f * v * (GK * (1.0f + 3.0f * GC * v * v) * (1.0f - t * t));
}

/* op(X)'s shape from a stored layout */
void op_shape(const layout *l, int32_t op, uint64_t *r, uint64_t *c) {
    *r = op == CUBLAS_OP_N ? l->rows : l->cols;
    *c = op == CUBLAS_OP_N ? l->cols : l->rows;
}

cublasStatus_t check(const desc *d, const layout *a, const layout *b, const layout *c, const layout *dd) {
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "compute type %d other than CUBLAS_COMPUTE_32F with fp32 scale",
                   (int)d->compute);
    if (a->type != b->type || (a->type != CUDA_R_32F && a->type != CUDA_R_16BF) || c->type != CUDA_R_32F ||
        dd->type != CUDA_R_32F)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "types A/B %d, C %d: only fp32 or bf16 A and B, fp32 C and D",
                   (int)a->type, (int)c->type);
    const layout *ls[4] = {a, b, c, dd};
    for (int i = 0; i < 4; i++)
        if (ls[i]->ld < (int64_t)ls[i]->rows || ls[i]->rows == 0 || ls[i]->cols == 0)
            return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %c: %lld rows, leading dimension %lld", "ABCD"[i],
                       (long long)ls[i] -> rows, (long long)ls[i] -> ld);
    uint64_t am, ak, bk, bn;
    op_shape(a, d->ta, &am, &ak);
    op_shape(b, d->tb, &bk, &bn);
    if (ak != bk || c->rows != am || c->cols != bn || dd->rows != c->rows || dd->cols != c->cols || dd->ld != c->ld)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "shapes disagree: op(A) %lld x %lld, op(B) %lld x %lld, C %lld x %lld",
                   (long long)am, (long long)ak, (long long)bk, (long long)bn, (long long)c->rows, (long long)c->cols);
    if (is_gelu(d->epilogue) && (!d->aux || d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)dd->rows))
        return bad(
            CUBLAS_STATUS_INVALID_VALUE,
            "GELU epilogue %u: aux pointer %p, AUX_LD %lld (must be set, a multiple of 8, at least D's %llu rows)",
            d->epilogue, (void *)d->aux, (long long)d->aux_ld, (unsigned long long)dd->rows);
    return CUBLAS_STATUS_SUCCESS;
}

size_t extent(const layout *l) { return ((size_t)l->ld * (l->cols - 1) + l->rows) * dt_size(l->type); }

uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al) al /= 2;
    return al;
}

/* a matmul as queued on its stream: everything it reads, copied at the call */
struct job {
    desc d;
    layout a, b, c, dl;
    const void *A, *B, *C;
    void *D;
    float alpha, beta;
};

void run_job(void *arg) {
    job *j = (job *)arg;
    uint64_t m, k, n, kk;
    op_shape(&j->a, j->d.ta, &m, &k);
    op_shape(&j->b, j->d.tb, &kk, &n);
    float *out = (float *)j->D;
    const float *cin = (const float *)j->C;
    for (uint64_t col = 0; col < n; col++)
        for (uint64_t i = 0; i < m; i++) {
            float acc = 0.0f;
            for (uint64_t p = 0; p < k; p++) {
                size_t ia = j->d.ta == CUBLAS_OP_N ? i + p * (size_t)j->a.ld : p + i * (size_t)j->a.ld;
                size_t ib = j->d.tb == CUBLAS_OP_N ? p + col * (size_t)j->b.ld : col + p * (size_t)j->b.ld;
                acc += load(j->A, j->a.type, ia) * load(j->B, j->b.type, ib);
            }
            float v = j->alpha * acc;
            if (j->beta != 0.0f) v += j->beta * cin[i + col * (size_t)j->c.ld];
            if (has_bias(j->d.epilogue)) v += j->d.bias[i];
            float *aux = j->d.aux ? j->d.aux + i + col * (size_t)j->d.aux_ld : NULL;
            if (j->d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX || j->d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                *aux = v;
                v = gelu(v);
            } else if (j->d.epilogue == CUBLASLT_EPILOGUE_DGELU) {
                v *= dgelu(*aux);
            }
            out[i + col * (size_t)j->dl.ld] = v;
        }
    delete j;
}

} /* namespace */

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = (cublasLtHandle_t)calloc(1, 64);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute, cudaDataType_t scale) {
    desc *d = (desc *)calloc(1, sizeof *d);
    d->compute = compute;
    d->scale = scale;
    d->ta = d->tb = CUBLAS_OP_N;
    *out = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t dp, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    desc *d = (desc *)dp;
    if ((attr == CUBLASLT_MATMUL_DESC_TRANSA || attr == CUBLASLT_MATMUL_DESC_TRANSB) && size == sizeof(int32_t)) {
        int32_t op;
        memcpy(&op, buf, 4);
        if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return bad(CUBLAS_STATUS_INVALID_VALUE, "transpose op %d", (int)op);
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = op;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE && size == sizeof(uint32_t)) {
        uint32_t e;
        memcpy(&e, buf, 4);
        if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && !is_gelu(e))
            return bad(CUBLAS_STATUS_NOT_SUPPORTED,
                       "epilogue %u is not simulated (DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS and DGELU are)", e);
        d->epilogue = e;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER && size == sizeof(void *)) {
        memcpy(&d->aux, buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD && size == sizeof(int64_t)) {
        memcpy(&d->aux_ld, buf, sizeof(int64_t));
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER && size == sizeof(void *)) {
        memcpy(&d->bias, buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    }
    return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute %d (size %lld) is not simulated", (int)attr,
               (long long)size);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (!dt_size(type)) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "layout of data type %d", (int)type);
    layout *l = (layout *)calloc(1, sizeof *l);
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    *out = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
    pref *p = (pref *)calloc(1, sizeof *p);
    for (int i = 0; i < 4; i++) p->align[i] = 256; /* the documented default */
    *out = (cublasLtMatmulPreference_t)p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pp,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size) {
    pref *p = (pref *)pp;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == 8) {
        memcpy(&p->max_ws, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    }
    int k = attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? 0
            : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? 1
            : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? 2
            : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES ? 3
                                                                 : -1;
    if (k >= 0 && size == 4) {
        memcpy(&p->align[k], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    }
    return bad(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d (size %lld) is not simulated", (int)attr,
               (long long)size);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t pp, int want,
                                              cublasLtMatmulHeuristicResult_t *res, int *found) {
    *found = 0;
    n_heuristic++;
    if (want < 1) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = check((desc *)d, (layout *)a, (layout *)b, (layout *)c, (layout *)dd);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    memset(&res[0], 0, sizeof res[0]);
    algo al;
    memset(&al, 0, sizeof al);
    al.magic = 0xa190;
    memcpy(al.align, ((pref *)pp)->align, sizeof al.align);
    al.aux_align = is_gelu(((desc *)d)->epilogue) ? align_of(((desc *)d)->aux) : 0;
    memcpy(&res[0].algo, &al, sizeof al);
    res[0].workspaceSize = 0;
    res[0].state = CUBLAS_STATUS_SUCCESS;
    res[0].wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dp, const void *alpha_p, const void *A,
                              cublasLtMatrixLayout_t ap, const void *B, cublasLtMatrixLayout_t bp, const void *beta_p,
                              const void *C, cublasLtMatrixLayout_t cp, void *D, cublasLtMatrixLayout_t dlp,
                              const cublasLtMatmulAlgo_t *algo_p, void *ws, size_t ws_bytes, cudaStream_t stream) {
    const desc *d = (const desc *)dp;
    const layout *a = (const layout *)ap, *b = (const layout *)bp, *c = (const layout *)cp, *dl = (const layout *)dlp;
    cublasStatus_t st = check(d, a, b, c, dl);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    algo al;
    if (!algo_p) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "no algorithm given");
    memcpy(&al, algo_p, sizeof al);
    if (al.magic != 0xa190) return bad(CUBLAS_STATUS_INVALID_VALUE, "the algorithm is not one the heuristic gave");
    const void *ptr[4] = {A, B, C, D};
    const layout *ls[4] = {a, b, c, dl};
    float alpha, beta;
    memcpy(&alpha, alpha_p, 4);
    memcpy(&beta, beta_p, 4);
    for (int i = 0; i < 4; i++) {
        if (i == 2 && beta == 0.0f && C == D) continue;
        if (align_of(ptr[i]) < al.align[i])
            return bad(CUBLAS_STATUS_INVALID_VALUE,
                       "matrix %c is %u-byte aligned, but the heuristic was promised %u (MIN_ALIGNMENT)", "ABCD"[i],
                       align_of(ptr[i]), al.align[i]);
        if (!cudasim_device_range(ptr[i], extent(ls[i])))
            return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %c (%lld bytes) is not inside one device allocation",
                       "ABCD"[i], (long long)extent(ls[i]));
    }
    if (is_gelu(d->epilogue)) {
        if (align_of(d->aux) < al.aux_align)
            return bad(
                CUBLAS_STATUS_INVALID_VALUE,
                "the GELU aux is %u-byte aligned, but was %u-byte aligned when the heuristic chose the algorithm",
                align_of(d->aux), al.aux_align);
        layout ax = {CUDA_R_32F, dl->rows, dl->cols, d->aux_ld};
        if (!cudasim_device_range(d->aux, extent(&ax)))
            return bad(CUBLAS_STATUS_INVALID_VALUE, "the GELU aux (%lld bytes) is not inside one device allocation",
                       (long long)extent(&ax));
    }
    if (has_bias(d->epilogue)) {
        uint64_t m, k;
        op_shape(a, d->ta, &m, &k);
        if (!d->bias) return bad(CUBLAS_STATUS_INVALID_VALUE, "the BIAS epilogue without a bias pointer");
        if (!cudasim_device_range(d->bias, m * sizeof(float)))
            return bad(CUBLAS_STATUS_INVALID_VALUE, "the bias (%llu floats) is not inside one device allocation",
                       (unsigned long long)m);
    }
    n_matmul++;
    n_bias += d->epilogue == CUBLASLT_EPILOGUE_BIAS;
    n_gelu += is_gelu(d->epilogue);
    job *jb = new job{*d, *a, *b, *c, *dl, A, B, C, D, alpha, beta};
    cudasim_enqueue(stream, "cublasLtMatmul", run_job, jb);
    return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
