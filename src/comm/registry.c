/* registry.c: the communication backends this build has, in the order the
 * world is chosen from: the first whose launcher started this process
 * (sharc_comm_world_init; SHARC_COMM=NAME forces one). NCCL goes first: its
 * probe says yes only for a job on GPUs (sharc_comm_world_device) that the
 * MPI launcher started (note [nccl]). */
#include "comm_impl.h"

const sharc_comm_backend_i *const sharc_comm_backends[] = {&sharc_comm_backend_nccl, &sharc_comm_backend_mpi,
                                                           &sharc_comm_backend_self, NULL};
