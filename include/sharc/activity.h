/* sharc/activity.h: what this process is doing right now, and the step
 * watchdog that reads it (note [watchdog] in src/core/watchdog.c).
 *
 * The record is one set of relaxed atomics updated by the trainer (step,
 * phase), the engine (which unit it gathers, computes or reduces) and the
 * collective dispatcher (which collective it is inside, over how many ranks).
 * Every update bumps a sequence number; the watchdog thread only reads. An
 * update is a handful of stores: cheap enough for every collective. */
#ifndef SHARC_ACTIVITY_H
#define SHARC_ACTIVITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The optimizer step being run (1-based; 0 before the first). */
void sharc_activity_step(int64_t step);
/* Computing: `phase` and `unit_name` are static or outlive the record
 * (unit names live in the engine); unit -1 = no unit. */
void sharc_activity_phase(const char *phase, int unit, const char *unit_name);
/* Entering / leaving a collective (`name` static) over `ranks` ranks. */
void sharc_activity_coll_begin(const char *name, int ranks);
void sharc_activity_coll_end(void);
/* The step and unit (-1: none) of the record now. */
void sharc_activity_where(int64_t *step, int *unit);
/* Whether the record is inside a collective now (waiting on other ranks). */
bool sharc_activity_in_collective(void);
/* Bumped by every update above. */
uint64_t sharc_activity_seq(void);
/* One line: "step 3: waiting in all_gather over 2 ranks (forward, unit 1 'block.0')". */
void sharc_activity_describe(char *out, size_t n);

/* Start a thread that, when sharc_activity_seq() has not changed for
 * `timeout_s` seconds, prints "[rank r] watchdog: no progress for N s
 * (SETTING) at ..." with the description to stderr and ends the process
 * with exit status 3 (_exit: it must not call MPI, which was initialised
 * MPI_THREAD_FUNNELED). `setting` (static) names the option that sets the
 * timeout; r is sharc_log_rank(). Starts nest: a start while running sets
 * the timeout (timeout_s <= 0: off until the next start), and the thread
 * ends at the stop that matches the first start. */
sharc_status sharc_watchdog_start(int timeout_s, const char *setting);
/* Undo one start; the last one stops and joins the thread. */
void sharc_watchdog_stop(void);
/* From now on a SIGTERM (the launcher ending the job after another rank
 * died) makes the watchdog thread write one line and the flight record
 * and exit with 128 + 15 (note [rank-death] in src/core/watchdog.c); with
 * no watchdog running, SIGTERM ends the process as by default. */
void sharc_watchdog_catch_term(void);

#ifdef __cplusplus
}
#endif
#endif
