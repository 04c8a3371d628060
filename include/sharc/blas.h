/* sharc/blas.h: the matrix multiply every kernel uses, and the thread count.
 *
 * sharc loads OpenBLAS (the OpenMP build, Debian's libopenblas0-openmp) at
 * run time with dlopen, after choosing the kernel set from this CPU's
 * features, so the fast path does not depend on what the environment says;
 * see "BLAS" in README.md and note [blas-coretype] in docs/ARCHITECTURE.md.
 * Environment: SHARC_BLAS_CORETYPE forces an OpenBLAS core name (or "auto"
 * to let OpenBLAS detect), SHARC_BLAS_LIB names the library file to load. */
#ifndef SHARC_BLAS_H
#define SHARC_BLAS_H

#include <stdbool.h>
#include <stdint.h>
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char library[512];   /* the file that was loaded */
    char coretype[32];   /* what sharc asked for ("" = left to OpenBLAS) */
    char corename[32];   /* what OpenBLAS reports it runs */
    char overridden[32]; /* a different OPENBLAS_CORETYPE found in the environment, if any */
    char gemm[16];       /* the library large products run on: "oneDNN" or "OpenBLAS" */
    int threads;
    bool openmp; /* OpenBLAS shares the OpenMP thread pool with sharc's kernels */
} sharc_blas_info;

/* Load the library (once) and set the thread count; threads <= 0 keeps the
 * current count (default: OMP_NUM_THREADS if set, else the CPUs this process
 * may run on). */
sharc_status sharc_blas_init(int threads);
const sharc_blas_info *sharc_blas_get_info(void);

/* Threads used by BLAS and by sharc's own OpenMP kernels. Workspaces are
 * sized for the count at the time they are planned (sharc_model_plan): set
 * it before planning, never raise it after. */
void sharc_threads_set(int n);
int sharc_threads_get(void);
/* CPUs this process may run on (sched_getaffinity). */
int sharc_cpus_available(void);

/* Row-major C(M,N) = alpha * op(A)(M,K) @ op(B)(K,N) + beta * C. Safe to call
 * from inside an OpenMP parallel region (it then runs on the calling thread). */
void sharc_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc);

/* bf16 compute (note [bf16-gemm] in src/device/cpu/blas.c): how sharc_bgemm
 * computes. NONE: this CPU or library cannot (sharc_bgemm still works, by
 * emulation, but the model computes in fp32); EMULATED: widened to fp32 and
 * sgemm (SHARC_BF16=emulate, for tests); ONEDNN: oneDNN's bf16 GEMM. */
typedef enum { SHARC_BF16_NONE, SHARC_BF16_EMULATED, SHARC_BF16_ONEDNN } sharc_bf16_mode;
/* The mode chosen at load (SHARC_BF16=auto|emulate|off); *why (nullable) says why. */
sharc_bf16_mode sharc_bf16_mode_get(const char **why);
/* Tests: force a mode (ONEDNN only if oneDNN's bf16 GEMM was loaded); returns the previous one. */
sharc_bf16_mode sharc_bf16_mode_set(sharc_bf16_mode mode);
/* Row-major C(M,N) = alpha * op(A) @ op(B) + beta * C with bf16 A and B (raw
 * 16-bit words) and fp32 accumulation and C. Not for parallel regions. */
void sharc_bgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                 const uint16_t *B, int ldb, float beta, float *C, int ldc);

#ifdef __cplusplus
}
#endif
#endif
