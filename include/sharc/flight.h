/* sharc/flight.h: the collective flight recorder (note [flight] in
 * src/core/flight.c). The collective dispatcher records every collective
 * this process starts, in a ring of the last SHARC_FLIGHT_N; when the job
 * ends badly (the watchdog fires, the launcher terminates the rank, a fatal
 * error) each rank writes its ring to OUT_DIR/debug/flight-rank-R.json, and
 * `sharc doctor OUT_DIR` reads every rank's to name the collective where
 * the ranks part and the rank that never arrived. */
#ifndef SHARC_FLIGHT_H
#define SHARC_FLIGHT_H

#include <stdint.h>

#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_FLIGHT_N 256 /* collectives kept per process */

/* A new group (communicator): its process-local id. Every rank creates its
 * groups in the same order (creation is collective), so ids match across
 * ranks. */
int sharc_flight_group_new(void);
/* Recording that this process enters collective `seq` (1-based, per group)
 * of `kind` (static) with `bytes` of payload on group `group` (this rank is
 * `group_rank` of `group_size`); the step and unit come from the activity
 * record. Returns a handle for sharc_flight_end. */
uint64_t sharc_flight_begin(int group, uint64_t seq, int group_size, int group_rank, const char *kind, int64_t bytes,
                            int nonblocking);
/* The collective of `handle` completed (nothing if the ring moved past it). */
void sharc_flight_end(uint64_t handle);

/* Where dumps go: DIR/debug/flight-rank-R.json (R: sharc_log_rank). NULL
 * stops dumping. */
void sharc_flight_set_dir(const char *dir);
/* Write this process's ring (once per process; later calls do nothing).
 * `reason` (static: "watchdog", "terminated", "failed") and `what` (the
 * activity description) go into the file. Safe from the watchdog thread:
 * no MPI, no locks, no allocation. Returns the path written, or NULL. */
const char *sharc_flight_dump(const char *reason, const char *what);

#ifdef __cplusplus
}
#endif
#endif
