/* sharc/prof.h: wall-clock time per named region, for finding where a step
 * goes. Off unless sharc_prof_enable(true) (the environment variable
 * SHARC_PROFILE=1 turns it on for the sharc command and bench/step). When off,
 * a region costs one branch. Single-threaded use: regions are opened and
 * closed by the thread that drives the step. */
#ifndef SHARC_PROF_H
#define SHARC_PROF_H

#include <stdbool.h>
#include <stdio.h>

#include "sharc/clock.h"

#ifdef __cplusplus
extern "C" {
#endif

void sharc_prof_enable(bool on);
bool sharc_prof_enabled(void);
/* Start / stop a region; ids come from sharc_prof_id(name) (cached by the macro). */
int sharc_prof_id(const char *name);
void sharc_prof_add(int id, double seconds);
/* Print regions sorted by total time and reset. */
void sharc_prof_report(FILE *f, int steps);

/* SHARC_PROF("name", statement); */
#define SHARC_PROF(name, stmt)                                                                                         \
    do {                                                                                                               \
        if (sharc_prof_enabled()) {                                                                                    \
            static int sharc_prof_id_ = -1;                                                                            \
            if (sharc_prof_id_ < 0) sharc_prof_id_ = sharc_prof_id(name);                                              \
            double sharc_prof_t0_ = sharc_clock_now();                                                                 \
            stmt;                                                                                                      \
            sharc_prof_add(sharc_prof_id_, sharc_clock_now() - sharc_prof_t0_);                                        \
        } else {                                                                                                       \
            stmt;                                                                                                      \
        }                                                                                                              \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
