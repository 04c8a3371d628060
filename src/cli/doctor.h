/* doctor.h (internal to src/cli): `sharc doctor`: a failed run's flight
 * records read together (doctor.c), and a job's environment checked
 * (doctor_env.c). */
#ifndef SHARC_CLI_DOCTOR_H
#define SHARC_CLI_DOCTOR_H

#include "sharc/comm.h"

#include <stddef.h>

/* argv: the arguments after "doctor". Returns the exit status. */
int sharc_doctor_main(int argc, char **argv);

/* `sharc doctor --env [--dir DIR] [--bytes N] [--timeout S]` (doctor_env.c). */
typedef struct {
    char dir[4096];      /* whose file system's free space is reported (default ".") */
    size_t bytes;        /* all-reduce size of the bandwidth probe */
    int timeout;         /* the watchdog's limit, seconds */
    const char *version; /* this build's version, compared across ranks */
} sharc_doctor_env_plan;

/* Collective over world; rank 0 prints. Returns the exit status on every
 * rank: 0 no problem, 1 a problem found (or a failure). */
int sharc_doctor_env(const sharc_doctor_env_plan *p, sharc_comm *world);

#endif
