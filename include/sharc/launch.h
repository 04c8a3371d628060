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

/* This process's rank among those of its node, from the launcher's
 * environment (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, MPICH's
 * MPI_LOCALRANKID, Slurm's SLURM_LOCALID, torchrun's LOCAL_RANK, the first
 * set); 0 when none is (a process started alone). Local, no collective. */
int sharc_launch_local_rank(void);
/* Note [gpu-of-rank]: the device of backend `name` this process uses: its
 * local rank modulo the devices the backend sees (as
 * torch.cuda.set_device(LOCAL_RANK); CUDA_VISIBLE_DEVICES narrows what it
 * sees; more ranks than GPUs share them), 0 when it sees none. */
int sharc_launch_device_index(const char *name);

#ifdef __cplusplus
}
#endif
#endif
