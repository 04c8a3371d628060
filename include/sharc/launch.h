/* sharc/launch.h: how a job was started. sharc's ranks are MPI processes
 * (mpirun, mpiexec, srun); a torchrun-style environment (WORLD_SIZE, RANK,
 * MASTER_ADDR, MASTER_PORT, LOCAL_RANK) is checked against that here
 * (docs/ARCHITECTURE.md, "Many hosts"). */
#ifndef SHARC_LAUNCH_H
#define SHARC_LAUNCH_H

#include "sharc/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Before the world exists: a torchrun-style environment asking for several
 * processes (WORLD_SIZE > 1) without an MPI launcher is refused with a
 * message saying how to start the job instead. Local, no collective. */
sharc_status sharc_launch_check_env(void);

/* After the world exists: WORLD_SIZE and RANK, where set, must equal MPI's
 * size and this rank (sharc takes both from MPI; LOCAL_RANK is not used).
 * Collective: a mismatch on any rank fails every rank, no hang. */
sharc_status sharc_launch_check_world(sharc_comm *world);

#ifdef __cplusplus
}
#endif
#endif
