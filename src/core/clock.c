/* clock.c: sharc_clock_*, the monotonic and process-CPU clocks (sharc/clock.h). */
#include "sharc/clock.h"

#include <time.h>

static double seconds(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double sharc_clock_now(void) { return seconds(CLOCK_MONOTONIC); }
double sharc_clock_cpu_now(void) { return seconds(CLOCK_PROCESS_CPUTIME_ID); }
