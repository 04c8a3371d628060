/* sharc/clock.h: the clocks sharc measures time with, one definition for the
 * whole library (step timing, collective statistics, the watchdog, profiling). */
#ifndef SHARC_CLOCK_H
#define SHARC_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for durations only. */
double sharc_clock_now(void);
/* CPU seconds this process has used, all its threads (CLOCK_PROCESS_CPUTIME_ID). */
double sharc_clock_cpu_now(void);

#ifdef __cplusplus
}
#endif
#endif
