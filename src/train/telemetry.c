/* telemetry.c: sharc/telemetry.h: the per-step aggregation over ranks, the
 * calibrated FMA peak that MFU divides by, the JSON metrics and debug lines,
 * the JSON-lines files they go to, and the console progress display. */
#include "sharc/telemetry.h"
#include "sharc/clock.h"
#include "sharc/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SHARC_X86 1
#endif

/* --------------------------------------------------------- aggregation */

enum {
    V_STEP = 0,
    V_FWD,
    V_BWD,
    V_OPT,
    V_FB,
    V_CPU,
    V_WAIT,
    V_LOSS,
    V_TOKENS,
    V_COMM_BYTES,
    V_COMM_S = V_COMM_BYTES + SHARC_COLL_NKINDS,
    V_MEM_CUR = V_COMM_S + SHARC_COLL_NKINDS,
    V_MEM_PEAK = V_MEM_CUR + SHARC_MEM_NCAT,
    V_MEM_TOTAL = V_MEM_PEAK + SHARC_MEM_NCAT,
    V_MOE_IDLE,
    V_MOE_BYTES,
    V_OFF_READ,
    V_OFF_WRITE,
    V_OFF_S,
    V_OFF_WAIT,
    V_HOST, /* the rank's hostname: SHARC_HOST_MAX bytes carried in the doubles that follow */
    SHARC_TEL_NVEC = V_HOST + SHARC_HOST_MAX / sizeof(double)
};

/* This process's hostname (gethostname: under a UTS namespace, its name). */
static void host_name(char out[SHARC_HOST_MAX]) {
    memset(out, 0, SHARC_HOST_MAX);
    if (gethostname(out, SHARC_HOST_MAX - 1) != 0) snprintf(out, SHARC_HOST_MAX, "?");
    out[SHARC_HOST_MAX - 1] = 0;
}

static void pack(const sharc_step_stats *s, double *v) {
    memset(v, 0, sizeof(double) * SHARC_TEL_NVEC);
    v[V_STEP] = s->step_s;
    v[V_FWD] = s->forward_s;
    v[V_BWD] = s->backward_s;
    v[V_OPT] = s->optimizer_s;
    v[V_FB] = s->forward_backward_s;
    v[V_CPU] = s->cpu_s;
    v[V_WAIT] = s->comm_wait_s;
    v[V_LOSS] = s->local_loss;
    v[V_TOKENS] = (double)s->local_tokens;
    for (int k = 0; k < SHARC_COLL_NKINDS; k++) {
        v[V_COMM_BYTES + k] = (double)s->comm.bytes[k];
        v[V_COMM_S + k] = s->comm.seconds[k];
    }
    for (int c = 0; c < SHARC_MEM_NCAT; c++) {
        v[V_MEM_CUR + c] = (double)s->mem.current[c];
        v[V_MEM_PEAK + c] = (double)s->mem.peak[c];
    }
    v[V_MEM_TOTAL] = (double)s->mem.peak_total;
    v[V_MOE_IDLE] = (double)s->moe_idle_experts;
    v[V_MOE_BYTES] = (double)s->moe_idle_bytes;
    v[V_OFF_READ] = (double)s->offload_read_bytes;
    v[V_OFF_WRITE] = (double)s->offload_write_bytes;
    v[V_OFF_S] = s->offload_s;
    v[V_OFF_WAIT] = s->offload_wait_s;
    char host[SHARC_HOST_MAX];
    host_name(host);
    memcpy(&v[V_HOST], host, SHARC_HOST_MAX); /* bytes, moved untouched by the all-gather */
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Note [straggler]. Collectives make every rank's step take as long as the
 * slowest one's, so step times cannot tell who is slow: the others spend the
 * difference waiting. A rank's busy time, its step time minus the time it
 * waited inside the engine's collectives (comm_wait_s), is what it would
 * take alone; the straggler is the rank with the most, and "how much slower"
 * is its busy time over the median of the other ranks'. */
static void find_straggler(const double *all, int R, sharc_step_global *g) {
    double *others = malloc(sizeof(double) * (size_t)(R > 1 ? R - 1 : 1));
    int worst = 0;
    for (int r = 1; r < R; r++) {
        const double *v = all + (size_t)r * SHARC_TEL_NVEC, *w = all + (size_t)worst * SHARC_TEL_NVEC;
        if (v[V_STEP] - v[V_WAIT] > w[V_STEP] - w[V_WAIT]) worst = r;
    }
    const double *w = all + (size_t)worst * SHARC_TEL_NVEC;
    g->slowest_rank = worst;
    g->slowest_busy_s = w[V_STEP] - w[V_WAIT];
    memcpy(g->slowest_host, &w[V_HOST], SHARC_HOST_MAX);
    g->slowest_host[SHARC_HOST_MAX - 1] = 0;
    g->slowest_ratio = 1.0;
    if (R > 1 && others) {
        int n = 0;
        for (int r = 0; r < R; r++) {
            const double *v = all + (size_t)r * SHARC_TEL_NVEC;
            if (r != worst) others[n++] = v[V_STEP] - v[V_WAIT];
        }
        qsort(others, (size_t)n, sizeof(double), cmp_double);
        double med = n % 2 ? others[n / 2] : 0.5 * (others[n / 2 - 1] + others[n / 2]);
        g->slowest_ratio = med > 0 ? g->slowest_busy_s / med : 1.0;
    }
    free(others);
}

sharc_status sharc_telemetry_reduce(sharc_comm *world, const sharc_step_stats *local, double flops_per_token,
                                    double peak_flops_world, sharc_step_global *g) {
    const int R = sharc_comm_size(world);
    double mine[SHARC_TEL_NVEC];
    pack(local, mine);
    double *all = malloc(sizeof(double) * SHARC_TEL_NVEC * (size_t)R);
    if (!all) return sharc_error(SHARC_ERR_NOMEM, "telemetry: out of memory");
    sharc_status st = sharc_comm_all_gather(world, mine, all, SHARC_TEL_NVEC, SHARC_DT_F64);
    if (st != SHARC_OK) {
        free(all);
        return st;
    }
    memset(g, 0, sizeof *g);
    g->world_size = R;
    g->loss_max = NAN;
    g->step_s_min = INFINITY;
    g->tps_rank_min = INFINITY;
    find_straggler(all, R, g);
    for (int r = 0; r < R; r++) {
        const double *v = all + (size_t)r * SHARC_TEL_NVEC;
        if (v[V_STEP] > g->step_s_max) g->step_s_max = v[V_STEP];
        if (v[V_STEP] < g->step_s_min) g->step_s_min = v[V_STEP];
        g->forward_s = fmax(g->forward_s, v[V_FWD]);
        g->backward_s = fmax(g->backward_s, v[V_BWD]);
        g->optimizer_s = fmax(g->optimizer_s, v[V_OPT]);
        g->forward_backward_s = fmax(g->forward_backward_s, v[V_FB]);
        g->cpu_s_max = fmax(g->cpu_s_max, v[V_CPU]);
        g->comm_wait_s = fmax(g->comm_wait_s, v[V_WAIT]);
        if (!isnan(v[V_LOSS]) && (isnan(g->loss_max) || v[V_LOSS] > g->loss_max)) g->loss_max = v[V_LOSS];
        double tps = v[V_STEP] > 0 ? v[V_TOKENS] / v[V_STEP] : 0.0;
        g->tps_rank_sum += tps;
        g->tps_rank_min = fmin(g->tps_rank_min, tps);
        g->tps_rank_max = fmax(g->tps_rank_max, tps);
        for (int k = 0; k < SHARC_COLL_NKINDS; k++) {
            int64_t b = (int64_t)v[V_COMM_BYTES + k];
            if (b > g->comm_bytes[k]) g->comm_bytes[k] = b;
            g->comm_bytes_total += b;
            g->comm_s[k] = fmax(g->comm_s[k], v[V_COMM_S + k]);
        }
        for (int c = 0; c < SHARC_MEM_NCAT; c++) {
            if ((int64_t)v[V_MEM_CUR + c] > g->mem_current[c]) g->mem_current[c] = (int64_t)v[V_MEM_CUR + c];
            if ((int64_t)v[V_MEM_PEAK + c] > g->mem_peak[c]) g->mem_peak[c] = (int64_t)v[V_MEM_PEAK + c];
        }
        g->moe_idle_experts += (int64_t)v[V_MOE_IDLE];
        g->moe_idle_bytes += (int64_t)v[V_MOE_BYTES];
        g->offload_read_bytes += (int64_t)v[V_OFF_READ];
        g->offload_write_bytes += (int64_t)v[V_OFF_WRITE];
        if (v[V_OFF_S] > 0) {
            g->offload_read_GBps += v[V_OFF_READ] / v[V_OFF_S] * 1e-9;
            g->offload_write_GBps += v[V_OFF_WRITE] / v[V_OFF_S] * 1e-9;
        }
        g->offload_wait_s = fmax(g->offload_wait_s, v[V_OFF_WAIT]);
        if ((int64_t)v[V_MEM_TOTAL] > g->mem_peak_total) {
            g->mem_peak_total = (int64_t)v[V_MEM_TOTAL];
            g->mem_peak_rank = r;
        }
    }
    free(all);
    g->tps_global = g->step_s_max > 0 ? (double)local->tokens / g->step_s_max : 0.0;
    g->tps_cpu = g->cpu_s_max > 0 ? (double)local->tokens / g->cpu_s_max : 0.0;
    g->tflops = flops_per_token * g->tps_global * 1e-12;
    g->mfu_pct = peak_flops_world > 0 ? 100.0 * flops_per_token * g->tps_global / peak_flops_world : 0.0;
    return SHARC_OK;
}

/* ---------------------------------------------------------------- peak */

/* where each loop leaves its result, so the compiler keeps the loop; one a
 * thread: the loops run on every OpenMP thread at once (a shared sink is a
 * data race, which make tsan reports) */
static _Thread_local volatile float fma_sink;

/* Note [peak-fma]: 12 independent accumulators hide the FMA latency
 * (4 cycles x 2 pipes on current cores need 8); each iteration is 12 FMAs
 * of `lanes` floats = 24 x lanes FLOPs. The operands converge to a fixed
 * point, so nothing overflows or goes subnormal. Returns FLOPs done. */
#ifdef SHARC_X86
__attribute__((target("avx512f"))) static double fma_loop_avx512(int64_t iters) {
    __m512 a[12], x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
    for (int k = 0; k < 12; k++) a[k] = _mm512_set1_ps(1.0f + (float)k * 1e-3f);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm512_fmadd_ps(a[k], x, y);
    __m512 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm512_add_ps(s, a[k]);
    fma_sink = _mm512_reduce_add_ps(s);
    return (double)iters * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_loop_avx2(int64_t iters) {
    __m256 a[12], x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
    for (int k = 0; k < 12; k++) a[k] = _mm256_set1_ps(1.0f + (float)k * 1e-3f);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm256_fmadd_ps(a[k], x, y);
    float out[8];
    __m256 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm256_add_ps(s, a[k]);
    _mm256_storeu_ps(out, s);
    fma_sink = out[0] + out[7];
    return (double)iters * 12 * 8 * 2;
}
#endif

static double fma_loop_scalar(int64_t iters) {
    float a[12];
    for (int k = 0; k < 12; k++) a[k] = 1.0f + (float)k * 1e-3f;
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = a[k] * 0.999999f + 1e-6f;
    fma_sink = a[0] + a[11];
    return (double)iters * 12 * 2;
}

static double fma_loop(int64_t iters) {
#ifdef SHARC_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return fma_loop_avx512(iters);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return fma_loop_avx2(iters);
#endif
    return fma_loop_scalar(iters);
}

/* Note [peak-fma] for bf16: VDPBF16PS adds the products of 16 x 2 bf16
 * pairs into 16 fp32 lanes, 64 FLOPs an instruction; 12 accumulators as
 * above. The accumulators grow by 2^-19 an instruction: no overflow. */
#ifdef SHARC_X86
__attribute__((target("avx512f,avx512bf16"))) static double bf16_loop(int64_t iters) {
    __m512 a[12];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3580); /* 1, 2^-20 */
    for (int k = 0; k < 12; k++) a[k] = _mm512_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm512_dpbf16_ps(a[k], x, y);
    __m512 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm512_add_ps(s, a[k]);
    fma_sink = _mm512_reduce_add_ps(s);
    return (double)iters * 12 * 64;
}
#endif

static bool has_bf16_dot(void) {
#ifdef SHARC_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

static double peak_loop(bool bf16, int64_t iters) {
#ifdef SHARC_X86
    if (bf16) return bf16_loop(iters);
#endif
    return fma_loop(iters);
}

/* One thread's FLOP/s: best of 4 runs of about 20 ms each. */
static double thread_peak_of(bool bf16) {
    int64_t iters = 1 << 14;
    double t0 = sharc_clock_now();
    peak_loop(bf16, iters);
    double dt = sharc_clock_now() - t0;
    if (dt > 0) iters = (int64_t)((double)iters * 0.02 / dt);
    if (iters < 1024) iters = 1024;
    double best = 0.0;
    for (int rep = 0; rep < 4; rep++) {
        t0 = sharc_clock_now();
        double flops = peak_loop(bf16, iters);
        dt = sharc_clock_now() - t0;
        if (dt > 0 && flops / dt > best) best = flops / dt;
    }
    return best;
}

double sharc_telemetry_measure_peak_flops_bf16(int threads) {
    if (!has_bf16_dot()) return 0.0;
    if (threads < 1) threads = 1;
    double sum = 0.0;
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static, 1)
    for (int i = 0; i < threads; i++) sum += thread_peak_of(true);
    return sum;
}

double sharc_telemetry_measure_peak_flops(int threads) {
    if (threads < 1) threads = 1;
    double sum = 0.0;
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static, 1)
    for (int i = 0; i < threads; i++) sum += thread_peak_of(false);
    return sum;
}

/* Note [peak-bandwidth]: a copy, each thread its own slice of a 64 MiB
 * source and destination (far past the caches), best of 4 after a first
 * touch; counted as bytes read + written, as the profile counts kernels'
 * bytes (a write-allocate's extra read is not counted on either side). */
double sharc_telemetry_measure_bandwidth(int threads) {
    if (threads < 1) threads = 1;
    const size_t n = (size_t)64 << 20;
    char *src = malloc(n), *dst = malloc(n);
    if (!src || !dst) {
        free(src);
        free(dst);
        return 0.0;
    }
    memset(src, 1, n);
    memset(dst, 0, n);
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = sharc_clock_now();
#pragma omp parallel for num_threads(threads) schedule(static, 1)
        for (int i = 0; i < threads; i++) {
            size_t lo = n / (size_t)threads * (size_t)i,
                   hi = i == threads - 1 ? n : n / (size_t)threads * (size_t)(i + 1);
            memcpy(dst + lo, src + lo, hi - lo);
        }
        double dt = sharc_clock_now() - t0;
        if (rep > 0 && dt > 0 && 2.0 * (double)n / dt > best) best = 2.0 * (double)n / dt;
    }
    free(src);
    free(dst);
    return best;
}

/* ---------------------------------------------------------------- JSON */

static const double GIB = (double)(1ll << 30);

/* A number, or JSON's null when it is not finite (a rank without valid targets). */
static const char *num_or_null(char *buf, size_t n, double x) {
    if (isfinite(x)) snprintf(buf, n, "%.6f", x);
    else snprintf(buf, n, "null");
    return buf;
}

/* A hostname as a JSON string's contents: anything but [A-Za-z0-9._-] becomes '?'. */
static void json_safe(char *out, const char *in) {
    int i = 0;
    for (; in[i] && i < SHARC_HOST_MAX - 1; i++) {
        char ch = in[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                  ch == '_' || ch == '-';
        out[i] = ok ? ch : '?';
    }
    out[i] = 0;
}

void sharc_telemetry_write_json(FILE *f, const sharc_step_stats *s, const sharc_step_global *g) {
    const int R = g->world_size;
    char lm[32], json_host[SHARC_HOST_MAX];
    json_safe(json_host, g->slowest_host);
    fprintf(f,
            "{\"step\": %lld, \"loss_metrics/global_avg_loss\": %.6f, \"loss_metrics/global_max_loss\": %s, "
            "\"lr\": %.6g, \"grad_norm\": %.6f, "
            "\"throughput(tps)\": %.1f, \"throughput/global(tps)\": %.1f, \"throughput/rank_min(tps)\": %.1f, "
            "\"throughput/rank_max(tps)\": %.1f, \"throughput/rank_sum(tps)\": %.1f, \"throughput/cpu(tps)\": %.1f, "
            "\"tflops\": %.6g, \"mfu(%%)\": %.6g, "
            "\"time_metrics/end_to_end(s)\": %.6f, \"time_metrics/end_to_end_min(s)\": %.6f, "
            "\"time_metrics/slowest_rank\": %d, \"time_metrics/slowest_host\": \"%s\", "
            "\"time_metrics/slowest_busy(s)\": %.6f, \"time_metrics/slowest_ratio\": %.4f, "
            "\"time_metrics/forward_backward(s)\": %.6f, "
            "\"time_metrics/forward(s)\": %.6f, \"time_metrics/backward(s)\": %.6f, "
            "\"time_metrics/optimizer(s)\": %.6f, \"time_metrics/comm_wait(s)\": %.6f, \"time_metrics/cpu(s)\": %.6f, "
            "\"tokens\": %lld, \"world_size\": %d",
            (long long)s->step, s->loss, num_or_null(lm, sizeof lm, g->loss_max), (double)s->lr, s->grad_norm,
            g->tps_global / R, g->tps_global, g->tps_rank_min, g->tps_rank_max, g->tps_rank_sum, g->tps_cpu, g->tflops,
            g->mfu_pct, g->step_s_max, g->step_s_min, g->slowest_rank, json_host, g->slowest_busy_s, g->slowest_ratio,
            g->forward_backward_s, g->forward_s, g->backward_s, g->optimizer_s, g->comm_wait_s, g->cpu_s_max,
            (long long)s->tokens, R);
    for (int k = 0; k < SHARC_COLL_NKINDS; k++) {
        if (k == SHARC_COLL_BROADCAST) continue;
        fprintf(f, ", \"comm/%s_bytes\": %lld, \"comm/%s(s)\": %.6f", sharc_coll_kind_name(k),
                (long long)g->comm_bytes[k], sharc_coll_kind_name(k), g->comm_s[k]);
    }
    fprintf(f, ", \"comm/total_bytes\": %lld", (long long)g->comm_bytes_total);
    fprintf(f, ", \"moe/idle_experts\": %lld, \"moe/idle_gathered_bytes\": %lld", (long long)g->moe_idle_experts,
            (long long)g->moe_idle_bytes);
    fprintf(f,
            ", \"offload/read_bytes\": %lld, \"offload/write_bytes\": %lld, \"offload/read_GBps\": %.4f, "
            "\"offload/write_GBps\": %.4f, \"offload/wait(s)\": %.6f",
            (long long)g->offload_read_bytes, (long long)g->offload_write_bytes, g->offload_read_GBps,
            g->offload_write_GBps, g->offload_wait_s);
    for (int c = 0; c < SHARC_MEM_NCAT; c++)
        fprintf(f, ", \"memory/%s(GiB)\": %.6f, \"memory/%s_peak(GiB)\": %.6f", sharc_mem_cat_name(c),
                (double)g->mem_current[c] / GIB, sharc_mem_cat_name(c), (double)g->mem_peak[c] / GIB);
    fprintf(f,
            ", \"memory/max_active(GiB)\": %.6f, \"memory/max_active_rank\": %d, \"fsdp/gathered_units_peak\": %lld, "
            "\"fsdp/gathers\": %lld, \"fsdp/comm_stream_waits\": %lld}\n",
            (double)g->mem_peak_total / GIB, g->mem_peak_rank, (long long)s->gathered_peak, (long long)s->unit_gathers,
            (long long)s->comm_stream_waits);
}

void sharc_telemetry_write_rank_json(FILE *f, const sharc_step_stats *s, int rank) {
    char lm[32], host[SHARC_HOST_MAX], json_host[SHARC_HOST_MAX];
    host_name(host);
    json_safe(json_host, host);
    fprintf(
        f,
        "{\"step\": %lld, \"rank\": %d, \"host\": \"%s\", \"loss\": %s, \"tokens\": %lld, \"throughput(tps)\": %.1f, "
        "\"time_metrics/end_to_end(s)\": %.6f, \"time_metrics/forward_backward(s)\": %.6f, "
        "\"time_metrics/forward(s)\": %.6f, \"time_metrics/backward(s)\": %.6f, "
        "\"time_metrics/optimizer(s)\": %.6f, \"time_metrics/comm_wait(s)\": %.6f, \"time_metrics/cpu(s)\": %.6f",
        (long long)s->step, rank, json_host, num_or_null(lm, sizeof lm, s->local_loss), (long long)s->local_tokens,
        s->step_s > 0 ? (double)s->local_tokens / s->step_s : 0.0, s->step_s, s->forward_backward_s, s->forward_s,
        s->backward_s, s->optimizer_s, s->comm_wait_s, s->cpu_s);
    for (int k = 0; k < SHARC_COLL_NKINDS; k++)
        fprintf(f, ", \"comm/%s_calls\": %lld, \"comm/%s_bytes\": %lld, \"comm/%s(s)\": %.6f", sharc_coll_kind_name(k),
                (long long)s->comm.calls[k], sharc_coll_kind_name(k), (long long)s->comm.bytes[k],
                sharc_coll_kind_name(k), s->comm.seconds[k]);
    for (int c = 0; c < SHARC_MEM_NCAT; c++)
        fprintf(f, ", \"memory/%s_peak(GiB)\": %.6f", sharc_mem_cat_name(c), (double)s->mem.peak[c] / GIB);
    fprintf(f, ", \"moe/idle_experts\": %lld, \"moe/idle_gathered_bytes\": %lld", (long long)s->moe_idle_experts,
            (long long)s->moe_idle_bytes);
    fprintf(f,
            ", \"offload/read_bytes\": %lld, \"offload/write_bytes\": %lld, \"offload(s)\": %.6f, \"offload/wait(s)\": "
            "%.6f",
            (long long)s->offload_read_bytes, (long long)s->offload_write_bytes, s->offload_s, s->offload_wait_s);
    fprintf(f, ", \"memory/max_active(GiB)\": %.6f}\n", (double)s->mem.peak_total / GIB);
}

/* ------------------------------------------------------ JSON-lines files
 *
 * Note [jsonl]. The metrics file is the run's history: a resumed run keeps
 * every line up to the step it resumed from and appends after them, so
 * after any chain of crashes and resumes each step's line is there exactly
 * once (a crash after a step's line but before its checkpoint makes the
 * resumed run redo that step; its old line is dropped at the resume, as is
 * a line a crash cut short). A line is written with one write(2) of whole
 * lines; if that fails (ENOSPC), the file is cut back to where the line
 * began, so it never ends inside a line, and the run stops with the error. */

struct sharc_jsonl {
    int fd;
    char path[4096];
};

/* The "step" a sharc line starts with ({"step": N, ...}); -1 if none. */
static int64_t line_step(const char *line) {
    long long v;
    return sscanf(line, "{\"step\": %lld", &v) == 1 ? (int64_t)v : -1;
}

/* Keep the whole lines of `path` up to keep_step (note [jsonl]); rewritten
 * atomically only when a line goes. */
static sharc_status jsonl_trim(const char *path, int64_t keep_step) {
    FILE *in = fopen(path, "r");
    if (!in)
        return errno == ENOENT ? SHARC_OK : sharc_error(SHARC_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t dropped = 0;
    while ((len = getline(&line, &cap, in)) > 0) {
        int64_t s = line_step(line);
        dropped += line[len - 1] != '\n' || s > keep_step;
    }
    sharc_status st = ferror(in) ? sharc_error(SHARC_ERR_IO, "cannot read '%s'", path) : SHARC_OK;
    if (st == SHARC_OK && dropped > 0) {
        sharc_afile af = {.fd = -1};
        rewind(in);
        st = sharc_afile_open(&af, path);
        while (st == SHARC_OK && (len = getline(&line, &cap, in)) > 0)
            if (line[len - 1] == '\n' && line_step(line) <= keep_step) st = sharc_afile_write(&af, line, (size_t)len);
        if (st == SHARC_OK && ferror(in)) st = sharc_error(SHARC_ERR_IO, "cannot read '%s'", path);
        if (st == SHARC_OK) st = sharc_afile_commit(&af);
        else if (af.fd >= 0) sharc_afile_abort(&af);
    }
    free(line);
    fclose(in);
    return st;
}

sharc_status sharc_jsonl_open(sharc_jsonl **out, const char *path, int64_t keep_step) {
    *out = NULL;
    sharc_jsonl *j = calloc(1, sizeof *j);
    if (!j) return sharc_error(SHARC_ERR_NOMEM, "out of memory");
    snprintf(j->path, sizeof j->path, "%s", path);
    sharc_status st = keep_step >= 0 ? jsonl_trim(path, keep_step) : SHARC_OK;
    if (st == SHARC_OK) {
        j->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (keep_step < 0 ? O_TRUNC : 0), 0644);
        if (j->fd < 0) st = sharc_error(SHARC_ERR_IO, "cannot open '%s' for writing: %s", path, strerror(errno));
    }
    if (st != SHARC_OK) {
        free(j);
        return st;
    }
    *out = j;
    return SHARC_OK;
}

sharc_status sharc_jsonl_append(sharc_jsonl *j, const char *text, size_t n) {
    const off_t start = lseek(j->fd, 0, SEEK_END);
    for (const char *p = text; n > 0;) {
        ssize_t w = write(j->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const int err = w < 0 ? errno : ENOSPC;
            const bool cut = start >= 0 && ftruncate(j->fd, start) == 0;
            return sharc_error(SHARC_ERR_IO, "cannot write '%s': %s (%s)", j->path, strerror(err),
                               cut ? "the file ends with the line before this one" : "its last line may be cut short");
        }
        p += w;
        n -= (size_t)w;
    }
    return SHARC_OK;
}

sharc_status sharc_jsonl_close(sharc_jsonl *j) {
    if (!j) return SHARC_OK;
    sharc_status st =
        close(j->fd) == 0 ? SHARC_OK : sharc_error(SHARC_ERR_IO, "cannot close '%s': %s", j->path, strerror(errno));
    free(j);
    return st;
}

/* ------------------------------------------------------------ console */

static void fmt_duration(char *out, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(out, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, n, "%lds", t);
}

void sharc_telemetry_print_step(FILE *f, bool tty, const sharc_step_stats *s, const sharc_step_global *g,
                                int64_t max_steps, double elapsed_s) {
    if (!tty) {
        fprintf(f, "step %5lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %.0f tok/s | mfu %.1f%% | mem %.2f GiB",
                (long long)s->step, (long long)max_steps, s->loss, (double)s->lr, s->grad_norm, g->tps_global,
                g->mfu_pct, (double)g->mem_peak_total / GIB);
        /* note [straggler]: named when it computes 1.5x the median rank's time
         * and that costs the job a tenth of the step or more */
        if (g->world_size > 1 && g->slowest_ratio >= 1.5 &&
            g->slowest_busy_s * (1.0 - 1.0 / g->slowest_ratio) >= 0.1 * g->step_s_max)
            fprintf(f, " | straggler rank %d on %s, %.1fx", g->slowest_rank, g->slowest_host, g->slowest_ratio);
        fputc('\n', f);
        return;
    }
    enum { WIDTH = 24 };
    double frac = max_steps > 0 ? (double)s->step / (double)max_steps : 1.0;
    int fill = (int)(frac * WIDTH + 0.5);
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = 0;
    char eta[32], el[32];
    fmt_duration(el, sizeof el, elapsed_s);
    fmt_duration(eta, sizeof eta, s->step > 0 ? elapsed_s / (double)s->step * (double)(max_steps - s->step) : 0.0);
    fprintf(f, "\r[%s] %lld/%lld | loss %.4f | %.0f tok/s | mfu %.1f%% | %s elapsed, ETA %s\033[K", bar,
            (long long)s->step, (long long)max_steps, s->loss, g->tps_global, g->mfu_pct, el, eta);
    if (s->step >= max_steps) fputc('\n', f);
}
