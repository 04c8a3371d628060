/* sharc/telemetry.h: per-step metrics aggregated over the ranks, the peak
 * FLOP/s that MFU divides by, the JSON metrics line, per-rank debug lines
 * and the progress display (docs/ARCHITECTURE.md, "Telemetry").
 *
 * Each step every rank packs its sharc_step_stats and its hostname into a
 * fixed vector of doubles and one all-gather over the world gives every rank
 * every vector; sums, maxima and the straggler (note [straggler] in
 * src/train/telemetry.c) are computed from those. */
#ifndef SHARC_TELEMETRY_H
#define SHARC_TELEMETRY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sharc/alloc.h"
#include "sharc/comm.h"
#include "sharc/train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_HOST_MAX 64 /* bytes of a hostname in telemetry, with its NUL */

/* A step's metrics over all ranks. */
typedef struct {
    int world_size;
    double loss_max;                   /* max over ranks of each rank's mean loss */
    double step_s_max, step_s_min;     /* slowest and fastest rank's step time */
    int slowest_rank;                  /* the straggler: the most busy time, step_s - comm_wait_s (lowest such rank) */
    char slowest_host[SHARC_HOST_MAX]; /* its hostname */
    double slowest_busy_s;             /* its busy time */
    double slowest_ratio;              /* its busy time / the median of the other ranks' (1 on one rank) */
    double forward_s, backward_s, optimizer_s, comm_wait_s; /* max over ranks */
    double forward_backward_s; /* max over ranks (forward + backward + finishing the reductions) */
    double tps_global;         /* global batch tokens / step_s_max */
    double cpu_s_max;          /* max over ranks of CPU seconds / threads (sharc_step_stats.cpu_s) */
    double tps_cpu;            /* global batch tokens / cpu_s_max: throughput without preemption */
    double tps_rank_min, tps_rank_max, tps_rank_sum; /* local tokens / local step time */
    double tflops;                                   /* flops_per_token x tps_global / 1e12 */
    double mfu_pct;                                  /* 100 x flops_per_token x tps_global / peak of all ranks */
    int64_t comm_bytes[SHARC_COLL_NKINDS];           /* max over ranks of bytes handed in per kind */
    double comm_s[SHARC_COLL_NKINDS];                /* max over ranks of seconds per kind */
    int64_t comm_bytes_total;                        /* sum over ranks and kinds */
    int64_t mem_current[SHARC_MEM_NCAT], mem_peak[SHARC_MEM_NCAT]; /* max over ranks */
    int64_t mem_peak_total;                                        /* max over ranks of the total peak */
    int mem_peak_rank;                                             /* the rank with mem_peak_total */
    int64_t moe_idle_experts, moe_idle_bytes;        /* note [moe-units]: summed over ranks (sharc_step_stats) */
    int64_t offload_read_bytes, offload_write_bytes; /* summed over ranks */
    double offload_read_GBps, offload_write_GBps;    /* summed over ranks of bytes / offload_s */
    double offload_wait_s;                           /* max over ranks */
} sharc_step_global;

/* Aggregate this rank's stats with every other rank's: one all-gather of a
 * fixed-size vector over `world`. Collective: every rank calls it each step.
 * peak_flops_world is the sum of the ranks' peaks (FLOP/s). */
sharc_status sharc_telemetry_reduce(sharc_comm *world, const sharc_step_stats *local, double flops_per_token,
                                    double peak_flops_world, sharc_step_global *out);

/* The fp32 FLOP/s `threads` threads reach together in a register-only FMA
 * loop (AVX-512 or AVX2+FMA, chosen at run time; best of a few ~20 ms runs).
 * Local, no collective. */
double sharc_telemetry_measure_peak_flops(int threads);
/* The same for bf16 dot products (VDPBF16PS, 64 FLOPs an instruction): the
 * peak MFU divides by when the model computes in bf16 on oneDNN; 0 on a
 * CPU without AVX512_BF16. */
double sharc_telemetry_measure_peak_flops_bf16(int threads);
/* The memory bandwidth (bytes read + written per second) `threads` threads
 * reach copying a 64 MiB buffer each half of it: the profile's memory ceiling
 * on the CPU (sharc/prof.h), about 50 ms. 0 if the buffers cannot be had. */
double sharc_telemetry_measure_bandwidth(int threads);

/* One JSON line of the metrics file: torchtitan's names where they exist. */
void sharc_telemetry_write_json(FILE *f, const sharc_step_stats *s, const sharc_step_global *g);
/* One JSON line of this rank's own stats (the log.debug files). */
void sharc_telemetry_write_rank_json(FILE *f, const sharc_step_stats *s, int rank);

/* A JSON-lines file that only ever holds whole lines (the metrics file and
 * the log.debug files; note [jsonl] in src/train/telemetry.c). */
typedef struct sharc_jsonl sharc_jsonl;
/* keep_step < 0: start the file empty (created or truncated). keep_step >= 0
 * (a run resumed at that step): keep the whole lines whose "step" is at most
 * keep_step, drop the later ones (steps the run will redo, or a timeline it
 * replaces) and an unfinished last line, rewriting the file atomically only
 * if something is dropped; a missing file is created. Then append. */
sharc_status sharc_jsonl_open(sharc_jsonl **out, const char *path, int64_t keep_step);
/* Append `n` bytes of whole lines (ending with '\n'). A failed write (a full
 * disk) cuts the file back to its last whole line and is an error naming it. */
sharc_status sharc_jsonl_append(sharc_jsonl *j, const char *text, size_t n);
/* Close (NULL: nothing); an error if the file could not be closed. */
sharc_status sharc_jsonl_close(sharc_jsonl *j);

/* The console line of a step: with tty a progress bar with ETA rewritten in
 * place ("\r"), else a plain line (the caller decides when to print those). */
void sharc_telemetry_print_step(FILE *f, bool tty, const sharc_step_stats *s, const sharc_step_global *g,
                                int64_t max_steps, double elapsed_s);

#ifdef __cplusplus
}
#endif
#endif
