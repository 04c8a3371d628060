/* sharc/prof.h: time, FLOPs and bytes per named region of a step, for
 * finding where a step goes (note [prof] in docs/ARCHITECTURE.md). Off unless
 * sharc_prof_enable(true) (the environment variable SHARC_PROFILE=1 turns it
 * on for the sharc command and bench/step). When off, a region costs one
 * branch. Single-threaded use: regions are opened and closed by the thread
 * that drives the step.
 *
 * Time: the host's wall clock, or, once a device stream is registered
 * (sharc_prof_set_device), the device's own time between two timed events
 * recorded on that stream around the region (a pool reused every step, read
 * at sharc_prof_step_end). Regions nest: each region's time is reported both
 * inclusive (all of it) and exclusive ("self": less the regions opened inside
 * it), and the exclusive times plus "(outside regions)" add up to the step. */
#ifndef SHARC_PROF_H
#define SHARC_PROF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sharc/clock.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sharc_device sharc_device;
typedef struct sharc_stream sharc_stream;

void sharc_prof_enable(bool on);
bool sharc_prof_enabled(void);
/* Time regions on device d's stream s with timed events (d NULL: the host's
 * clock, the default). Call between steps. */
void sharc_prof_set_device(sharc_device *d, sharc_stream *s);
/* The ceilings the report compares against: dense matmul FLOP/s and memory
 * bytes/s of one rank, and where each came from (copied; 0: unknown). */
void sharc_prof_set_ceilings(double flops_per_s, const char *flops_how, double bytes_per_s, const char *bytes_how);
/* Bracket one training step. Once steps are bracketed, regions outside a
 * step (evaluation) are not counted, and what was counted before the first
 * one is dropped. step_end waits for the stream (the step
 * has already read its loss back, so nothing new is waited for) and adds the
 * device times of the step's regions. */
void sharc_prof_step_begin(void);
sharc_status sharc_prof_step_end(void);
/* The id of a region name (a string that outlives the profiler); cached by the macros. */
int sharc_prof_id(const char *name);
void sharc_prof_begin(int id);
/* Close region id, crediting it with `flops` and `bytes` (read + written) of work. */
void sharc_prof_end(int id, double flops, double bytes);
/* Credit the innermost open region with `flops` and `bytes` of work (for
 * helpers that know the shapes, e.g. a matmul wrapper inside a region);
 * nothing outside a region. Call only when sharc_prof_enabled(). */
void sharc_prof_count(double flops, double bytes);
/* Print the regions sorted by exclusive time, per step over `steps` (the
 * bracketed steps if any were), and reset. */
void sharc_prof_report(FILE *f, int steps);

/* ---- The timeline (note [trace]): SHARC_PROFILE_TRACE writes the events of
 * a window of profiled steps as a Chrome trace-event file (chrome://tracing,
 * Perfetto), one track (tid) per stream and one for the host. ---- */
enum { SHARC_PROF_TRACK_COMPUTE = 0, SHARC_PROF_TRACK_COMM = 1, SHARC_PROF_TRACK_HOST = 2 };
/* Trace profiled steps a..b of `steps` ("a:b", NULL: 2:3) into `path` (rank
 * r of a world of more than one: .rank<r> before the extension). Checks the
 * window and that the file can be written: SHARC_ERR_INVALID / _IO naming it. */
sharc_status sharc_prof_trace_config(const char *path, const char *steps, int rank, int world);
/* The number of the step the next sharc_prof_step_begin brackets. */
void sharc_prof_set_step(int64_t step);
/* Inside the window (spans are recorded). */
bool sharc_prof_tracing(void);
/* A span on track `tid`: begin returns a handle (-1 when not tracing); on a
 * device stream s its times are timed events recorded on s (read when the
 * window closes), else (s NULL, or no device) the host clock. end names it
 * (printf) and records its end on the same stream; unit: an FSDP unit, -1 none. */
int sharc_prof_span_begin(sharc_stream *s);
void sharc_prof_span_end(int h, sharc_stream *s, int tid, int unit, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A host-track span from t0 (sharc_clock_now) to now. */
void sharc_prof_host_span(const char *name, double t0);
/* Close an open window now (the end of the run) and write the file. */
void sharc_prof_trace_finish(void);

/* SHARC_PROF_HOST("name", statement): a span on the host track while tracing */
#define SHARC_PROF_HOST(name, stmt)                                                                                    \
    do {                                                                                                               \
        if (sharc_prof_tracing()) {                                                                                    \
            double sharc_prof_t0_ = sharc_clock_now();                                                                 \
            stmt;                                                                                                      \
            sharc_prof_host_span(name, sharc_prof_t0_);                                                                \
        } else {                                                                                                       \
            stmt;                                                                                                      \
        }                                                                                                              \
    } while (0)

/* SHARC_PROF_WORK("name", flops, bytes, statement); the counts are evaluated
 * only when profiling is on. */
#define SHARC_PROF_WORK(name, flops, bytes, stmt)                                                                      \
    do {                                                                                                               \
        if (sharc_prof_enabled()) {                                                                                    \
            static int sharc_prof_id_ = -1;                                                                            \
            if (sharc_prof_id_ < 0) sharc_prof_id_ = sharc_prof_id(name);                                              \
            sharc_prof_begin(sharc_prof_id_);                                                                          \
            stmt;                                                                                                      \
            sharc_prof_end(sharc_prof_id_, (double)(flops), (double)(bytes));                                          \
        } else {                                                                                                       \
            stmt;                                                                                                      \
        }                                                                                                              \
    } while (0)

/* SHARC_PROF("name", statement); a region without counted work */
#define SHARC_PROF(name, stmt) SHARC_PROF_WORK(name, 0, 0, stmt)

#ifdef __cplusplus
}
#endif
#endif
