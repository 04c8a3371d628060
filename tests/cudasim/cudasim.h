/* cudasim.h: the CUDA simulator's view from a kernel source. The simulator
 * (note [cudasim] in docs/ARCHITECTURE.md) compiles the kernel sources
 * (src/device/cuda, .cu) with the host C++ compiler, after tests/cudasim/rewrite.sh turned each
 * `k<<<grid, block, smem, stream>>>(args)` into
 * `cudasim_launch(k, cudasim_cfg(grid, block, smem, stream), args)`, with this
 * header included first. It gives a kernel what the GPU gives it:
 * threadIdx/blockIdx/blockDim/gridDim, block-wide `__shared__` arrays,
 * __syncthreads and the warp shuffles (every thread of a block is a
 * coroutine, so barriers really wait), and the device intrinsics the kernels
 * use. The runtime (cudasim.cpp) replaces libcudart, queues work per
 * stream and runs it only when something waits for it: device memory lives in
 * an arena the host cannot touch between launches and copies, so a host
 * pointer handed to a kernel, or a device pointer read by host code, fails
 * at once instead of passing on a machine where the two are one memory. */
#ifndef SHARC_CUDASIM_H
#define SHARC_CUDASIM_H

/* Block-wide shared memory: one copy for the block's coroutines (blocks run
 * one after another; launches are serialized). Defined before the CUDA
 * headers so that they keep it. rewrite.sh follows each `__shared__`
 * declaration with cudasim_shared(name) per variable, which fills it with
 * 0xFF bytes (NaN floats, -1 ints) when the first thread of a block reaches
 * it: a read before a write sees poison, not the previous block's values. */
#define __shared__ static

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

namespace cudasim {

struct launch_cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};

/* the calling coroutine's indices (valid inside a kernel) */
extern uint3 cur_thread, cur_block;
extern dim3 cur_block_dim, cur_grid_dim;
/* the running block's serial number: distinct for every block of every
 * launch (never 0), so a shared variable poisoned at serial s is poisoned
 * again by the next block */
extern uint64_t block_serial;

/* Queue a launch on cfg.stream: body(arg) once per thread of every block
 * (kernel names the kernel in errors), then drop(arg). ptrs/nptr: the
 * kernel's pointer arguments, checked now to lie in device (or pinned host)
 * memory and to be aligned to align[i] bytes (their pointee type's: a GPU
 * faults on a misaligned access, x86 does not). */
typedef void (*body_fn)(void *arg);
void run(const char *kernel, const launch_cfg &cfg, body_fn body, void *arg, body_fn drop, const void *const *ptrs,
         const size_t *align, int nptr);

/* Warp-level exchange: this thread's 8-byte value in, the value of lane src
 * (of this thread's warp) out; every lane named in mask must take part. */
uint64_t warp_exchange(unsigned mask, uint64_t mine, int src_lane);
void sync_block(void);
int lane(void);
/* A warp collective (wmma, __syncwarp): returns once all 32 lanes of this
 * thread's warp wait in the same op with the same key (the arguments they
 * must agree on); lanes at different ops, with different keys, or a lane
 * that exited, abort. warp_buf: this warp's exchange area (3 * 256 floats),
 * written before a collective and read after it. */
void warp_collective(const char *op, uint64_t key);
float *warp_buf(void);
/* abort naming the running kernel, block and thread */
[[noreturn]] void kernel_fail(const char *what);

/* Pointer arguments: collected by type (a pointer argument, or not), each
 * with the alignment its pointee type needs (void: 1). */
template <class T> inline void collect_ptr(const void **out, size_t *align, int *n, const T &v) {
    if constexpr (std::is_pointer<T>::value) {
        typedef typename std::remove_cv<typename std::remove_pointer<T>::type>::type U;
        if constexpr (std::is_void<U>::value) align[*n] = 1;
        else align[*n] = alignof(U);
        out[(*n)++] = (const void *)v;
    }
}

template <class... P> struct launch_box {
    void (*k)(P...);
    std::tuple<typename std::decay<P>::type...> args;
};

/* An argument as the parameter takes it; NULL (an integer constant in C++)
 * is a null pointer, as at a real launch. */
template <class P, class A> inline P convert_arg(A &&a) {
    if constexpr (std::is_pointer<P>::value && std::is_integral<typename std::decay<A>::type>::value)
        return (P) nullptr;
    else return static_cast<P>(a);
}

template <class... P> void call_box(void *arg) {
    launch_box<P...> *b = (launch_box<P...> *)arg;
    std::apply(b->k, b->args);
}
template <class... P> void drop_box(void *arg) { delete (launch_box<P...> *)arg; }

} /* namespace cudasim */

/* the kernel-side names */
#define threadIdx (cudasim::cur_thread)
#define blockIdx  (cudasim::cur_block)
#define blockDim  (cudasim::cur_block_dim)
#define gridDim   (cudasim::cur_grid_dim)

static inline cudasim::launch_cfg cudasim_cfg(dim3 g, dim3 b, size_t smem = 0, cudaStream_t s = 0) {
    cudasim::launch_cfg c;
    c.grid = g;
    c.block = b;
    c.smem = smem;
    c.stream = s;
    return c;
}

/* The launch: arguments converted to the kernel's parameter types (as a real
 * launch copies them), then every thread runs the kernel. */
#define cudasim_launch(k, cfg, ...) cudasim_launch_(#k, k, cfg, ##__VA_ARGS__)
template <class... P, class... A>
static void cudasim_launch_(const char *name, void (*k)(P...), const cudasim::launch_cfg &cfg, A &&...a) {
    static_assert(sizeof...(P) == sizeof...(A), "cudasim: argument count");
    auto *box =
        new cudasim::launch_box<P...>{k, std::tuple<typename std::decay<P>::type...>(cudasim::convert_arg<P>(a)...)};
    const void *ptrs[sizeof...(P) + 1];
    size_t align[sizeof...(P) + 1];
    int n = 0;
    std::apply([&](const auto &...v) { (cudasim::collect_ptr(ptrs, align, &n, v), ...); }, box->args);
    cudasim::run(name, cfg, cudasim::call_box<P...>, box, cudasim::drop_box<P...>, ptrs, align, n);
}

/* Poison a __shared__ variable once per block (a static per declaration
 * remembers the block that last did): only the bytes it declares. */
#define cudasim_shared(v)                                                                                              \
    do {                                                                                                               \
        static uint64_t cudasim_seen_;                                                                                 \
        if (cudasim_seen_ != cudasim::block_serial) {                                                                  \
            memset((void *)&(v), 0xFF, sizeof(v));                                                                     \
            cudasim_seen_ = cudasim::block_serial;                                                                     \
        }                                                                                                              \
    } while (0)

/* A kernel's __launch_bounds__(N) (moved into its body by rewrite.sh): a
 * launch of more threads per block than N fails on a GPU; here it stops,
 * naming the kernel. */
#define cudasim_bounds(...) cudasim_bounds_(__VA_ARGS__)
static inline void cudasim_bounds_(unsigned max_threads, unsigned min_blocks = 0, unsigned max_cluster = 0) {
    if (cudasim::cur_block_dim.x * cudasim::cur_block_dim.y * cudasim::cur_block_dim.z > max_threads)
        cudasim::kernel_fail("more threads per block than the kernel's __launch_bounds__");
}

/* a macro, so that the simulator sees each call site (threads waiting at
 * two different barriers are a bug it reports) */
#define __syncthreads() cudasim::sync_block()

template <class T> static inline T cudasim_shfl(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "cudasim: shuffle of a value over 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = cudasim::warp_exchange(mask, u, src);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
/* width: lanes form segments of `width`; a source outside the caller's
 * segment gives the caller's own value (shfl_up/down) or wraps (shfl, xor) */
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int l = cudasim::lane(), base = l & ~(width - 1);
    int src = l ^ lane_mask;
    if (src < base || src >= base + width) src = l;
    return cudasim_shfl(mask, v, src);
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    int l = cudasim::lane(), base = l & ~(width - 1);
    return cudasim_shfl(mask, v, base + (src_lane & (width - 1)));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int l = cudasim::lane(), base = l & ~(width - 1);
    int src = l + (int)delta;
    return cudasim_shfl(mask, v, src < base + width ? src : l);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int l = cudasim::lane(), base = l & ~(width - 1);
    int src = l - (int)delta;
    return cudasim_shfl(mask, v, src >= base ? src : l);
}

/* device intrinsics: the exact ones bit for bit; the fast-math ones as the
 * host's libm (which rounds differently from the GPU's: tests compare with
 * tolerances, never bits, where a kernel uses them) */
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
/* double arithmetic rounded once per operation (the host's: no FMA here) */
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }

/* Every lane of the warp (mask: the full warp only, the one sharc uses). */
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) cudasim::kernel_fail("__syncwarp with a partial mask is not simulated");
    cudasim::warp_collective("__syncwarp", 0);
}

/* Note [cudasim-wmma]: the warp matrix functions (nvcuda::wmma, mma.h; CUDA
 * C++ Programming Guide, "Warp Matrix Functions"), shape 16x16x16, bf16 or
 * half multiplicands and fp32 accumulators. A fragment holds 8 of the 256
 * elements in each lane; which ones is unspecified on a GPU, so here each
 * kind of fragment (matrix_a, matrix_b, accumulator) has its own scrambled
 * map (element e = 8 lane + i is matrix position (e * mul + add) mod 256),
 * neither row-major by lane nor shared between kinds: code that assumes a
 * layout computes wrong values. Every op is a warp collective: all 32
 * lanes at the same call with the same pointer, ldm, layout (fill: value),
 * else an abort. Loads and stores check the guide's rules: the pointer
 * 256-bit aligned, ldm a multiple of 16 bytes. mma_sync sums the exact
 * products in fp32, k in order, onto c. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "cudasim: wmma simulates the 16x16x16 shape only");
    static_assert(std::is_same<Use, accumulator>::value
                      ? std::is_same<T, float>::value
                      : std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value,
                  "cudasim: wmma simulates bf16/half multiplicands and float accumulators");
    enum { num_elements = 8 };
    T x[8];
};

namespace detail {
template <class U> constexpr int kind() {
    return std::is_same<U, matrix_a>::value ? 0 : std::is_same<U, matrix_b>::value ? 1 : 2;
}
/* matrix position (row * 16 + col) of element i of this lane's fragment */
static inline int pos(int kind, int lane, int i) {
    static const int mul[3] = {37, 101, 59}, add[3] = {11, 77, 200};
    return ((lane * 8 + i) * mul[kind] + add[kind]) & 255;
}
static inline float widen(float v) { return v; }
static inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float widen(__half v) { return __half2float(v); }
static inline uint64_t key(const void *p, unsigned ldm, int layout) {
    return (uint64_t)(uintptr_t)p * 1000003u ^ ((uint64_t)ldm << 2 | (uint64_t)layout);
}
template <class T> static inline void check(const char *op, const void *p, unsigned ldm) {
    if ((uintptr_t)p % 32) cudasim::kernel_fail("wmma: the matrix pointer is not 256-bit aligned");
    if (ldm < 16 || ldm * sizeof(T) % 16) cudasim::kernel_fail("wmma: ldm is not a multiple of 16 bytes (or under 16)");
}
/* element (r, c) of a matrix at p */
static inline size_t at(int r, int c, unsigned ldm, bool row) {
    return row ? (size_t)r * ldm + c : r + (size_t)c * ldm;
}
} // namespace detail

template <class U, class T, class L, class V>
static inline void fill_fragment(fragment<U, 16, 16, 16, T, L> &f, const V &v) {
    T t = (T)v;
    cudasim::warp_collective("wmma::fill_fragment", (uint64_t)__float_as_uint(detail::widen(t)));
    for (int i = 0; i < 8; i++) f.x[i] = t;
}

template <class U, class T, class L>
static inline void load_matrix_sync(fragment<U, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    static_assert(!std::is_same<U, accumulator>::value, "wmma: an accumulator load takes a layout_t");
    detail::check<T>("load_matrix_sync", p, ldm);
    bool row = std::is_same<L, row_major>::value;
    cudasim::warp_collective("wmma::load_matrix_sync", detail::key(p, ldm, row));
    int l = cudasim::lane();
    for (int i = 0; i < 8; i++) {
        int q = detail::pos(detail::kind<U>(), l, i);
        f.x[i] = p[detail::at(q / 16, q % 16, ldm, row)];
    }
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                                    layout_t layout) {
    detail::check<float>("load_matrix_sync", p, ldm);
    cudasim::warp_collective("wmma::load_matrix_sync", detail::key(p, ldm, layout));
    int l = cudasim::lane();
    for (int i = 0; i < 8; i++) {
        int q = detail::pos(2, l, i);
        f.x[i] = p[detail::at(q / 16, q % 16, ldm, layout == mem_row_major)];
    }
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                                     layout_t layout) {
    detail::check<float>("store_matrix_sync", p, ldm);
    cudasim::warp_collective("wmma::store_matrix_sync", detail::key(p, ldm, layout));
    int l = cudasim::lane();
    for (int i = 0; i < 8; i++) {
        int q = detail::pos(2, l, i);
        p[detail::at(q / 16, q % 16, ldm, layout == mem_row_major)] = f.x[i];
    }
}
/* d = a b + c: each lane publishes its elements, then computes its own of d */
template <class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c, bool satf = false) {
    float *buf = cudasim::warp_buf();
    int l = cudasim::lane();
    for (int i = 0; i < 8; i++) {
        buf[detail::pos(0, l, i)] = detail::widen(a.x[i]);
        buf[256 + detail::pos(1, l, i)] = detail::widen(b.x[i]);
        buf[512 + detail::pos(2, l, i)] = c.x[i];
    }
    cudasim::warp_collective("wmma::mma_sync", 0);
    for (int i = 0; i < 8; i++) {
        int q = detail::pos(2, l, i), r = q / 16, col = q % 16;
        float acc = buf[512 + q];
        for (int k = 0; k < 16; k++) acc += buf[r * 16 + k] * buf[256 + k * 16 + col];
        d.x[i] = acc;
    }
    cudasim::warp_collective("wmma::mma_sync (read)", 0); /* every lane has read: buf may be written again */
}
} // namespace wmma
} // namespace nvcuda

#endif
