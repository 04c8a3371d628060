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
 * headers so that they keep it. */
#define __shared__ static

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

/* Queue a launch on cfg.stream: body(arg) once per thread of every block
 * (kernel names the kernel in errors), then drop(arg). ptrs/nptr: the
 * kernel's pointer arguments, checked now to lie in device (or pinned host)
 * memory. */
typedef void (*body_fn)(void *arg);
void run(const char *kernel, const launch_cfg &cfg, body_fn body, void *arg, body_fn drop, const void *const *ptrs,
         int nptr);

/* Warp-level exchange: this thread's 8-byte value in, the value of lane src
 * (of this thread's warp) out; every lane named in mask must take part. */
uint64_t warp_exchange(unsigned mask, uint64_t mine, int src_lane);
void sync_block(void);
int lane(void);

/* Pointer arguments: collected by type (a pointer argument, or not). */
template <class T> inline void collect_ptr(const void **out, int *n, const T &v) {
    if constexpr (std::is_pointer<T>::value) out[(*n)++] = (const void *)v;
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
    int n = 0;
    std::apply([&](const auto &...v) { (cudasim::collect_ptr(ptrs, &n, v), ...); }, box->args);
    cudasim::run(name, cfg, cudasim::call_box<P...>, box, cudasim::drop_box<P...>, ptrs, n);
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
static inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }

#endif
