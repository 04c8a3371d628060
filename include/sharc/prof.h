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
