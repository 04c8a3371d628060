/* doctor.h (internal to src/cli): `sharc doctor`, a failed run's flight
 * records read together (doctor.c). */
#ifndef SHARC_CLI_DOCTOR_H
#define SHARC_CLI_DOCTOR_H

/* argv: the arguments after "doctor". Returns the exit status. */
int sharc_doctor_main(int argc, char **argv);

#endif
