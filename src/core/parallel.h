/* parallel.h (internal): how sharc's own kernels use the cores.
 *
 * SHARC_VEC marks a function that GCC compiles three times (AVX-512, AVX2,
 * baseline x86-64) and picks at load time, so one binary runs anywhere and
 * uses the widest vectors the CPU has. OpenMP outlines the body of a
 * parallel region into a separate function that does not inherit the clones,
 * so the pattern is: a plain function opens the parallel loop over chunks of
 * rows and calls a SHARC_VEC function on each chunk. Under ThreadSanitizer
 * (make tsan) the clones are off: GCC instruments the clones' resolver, an
 * ifunc the dynamic loader runs before TSan's runtime has started, and the
 * program dies at load. */
#ifndef SHARC_PARALLEL_H
#define SHARC_PARALLEL_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SHARC_NO_CLONES) &&                    \
    !defined(__SANITIZE_THREAD__)
#define SHARC_VEC __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SHARC_VEC
#endif

/* glibc's vector math library (libmvec) has AVX-512/AVX2/SSE versions of
 * expf, logf and tanhf, but math.h announces them to the vectoriser only
 * under -ffast-math, which sharc does not use (it must keep inf/NaN
 * semantics and the order of its sums). Declaring them here with GCC's simd
 * attribute lets loops that call them vectorise under plain -O3. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__FAST_MATH__)
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) float logf(float);
__attribute__((simd("notinbranch"))) float tanhf(float);
#endif

/* Below this many elements of work a kernel runs on the calling thread. */
#define SHARC_PAR_MIN 16384

/* Number of row chunks for N rows of `width` elements: enough chunks to
 * balance the threads, none smaller than a row. */
static inline int64_t sharc_par_chunks(int64_t N, int64_t width, int threads) {
    if (N <= 0) return 0;
    if (N * width < SHARC_PAR_MIN || threads <= 1) return 1;
    int64_t c = (int64_t)threads * 4;
    return c < N ? c : N;
}

/* Start of element chunk c of nc over n elements, on a 16-float (cache line)
 * boundary; chunk nc starts at n. */
static inline int64_t sharc_chunk_lo(int64_t c, int64_t nc, int64_t n) {
    return c >= nc ? n : (c * n / nc) & ~(int64_t)15;
}

#endif
