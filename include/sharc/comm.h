/* sharc/comm.h: backend-neutral collectives over a group of ranks.
 *
 * One dispatcher (src/comm/comm.c) checks arguments once, times every call
 * and counts its bytes, then calls the backend through a small table of
 * function pointers (ggml-backend style). Backends: "self" (one rank),
 * "mpi" (Open MPI or MPICH) and "nccl" (NCCL on GPU memory, launched and
 * bootstrapped by MPI; comm_nccl.c), listed in src/comm/registry.c with how each
 * recognises its launcher; shared memory is an optional extension of a
 * backend's table. No MPI type appears outside src/comm/comm_mpi*.c.
 *
 * Conventions (NCCL's): counts are elements, all-gather, reduce-scatter and
 * all-to-all counts are per rank; collectives are out-of-place (send and
 * recv must not overlap), except all-reduce, which accepts send == recv.
 * Every rank makes the same calls in the same order. Buffers are host memory
 * for "self" and "mpi"; "nccl" takes GPU memory (and passes host memory to
 * MPI). Blocking calls return with the result in place. */
#ifndef SHARC_COMM_H
#define SHARC_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sharc/device.h"
#include "sharc/dtype.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sharc_comm sharc_comm;
typedef struct sharc_comm_request sharc_comm_request;

typedef enum { SHARC_REDUCE_OP_SUM = 0, SHARC_REDUCE_OP_MAX, SHARC_REDUCE_OP_MIN } sharc_reduce_op;

typedef enum {
    SHARC_COLL_ALL_GATHER = 0,
    SHARC_COLL_REDUCE_SCATTER,
    SHARC_COLL_ALL_REDUCE,
    SHARC_COLL_BROADCAST,
    SHARC_COLL_BARRIER,
    SHARC_COLL_ALL_TO_ALL,
    SHARC_COLL_NKINDS
} sharc_coll_kind;

/* Bytes this rank sent into each kind of collective and the seconds it spent
 * inside them (including waits on non-blocking ones). */
typedef struct {
    int64_t calls[SHARC_COLL_NKINDS];
    int64_t bytes[SHARC_COLL_NKINDS];
    double seconds[SHARC_COLL_NKINDS];
} sharc_comm_stats;

const char *sharc_coll_kind_name(sharc_coll_kind k);

/* ---- creating groups ---- */

/* The job's world, from the first backend of src/comm/registry.c whose
 * launcher started this process: under an MPI launcher (mpirun, mpiexec,
 * srun: detected from their environment variables) MPI is initialised
 * (MPI_THREAD_FUNNELED) and the world is MPI_COMM_WORLD; otherwise a one-rank
 * "self" group, without MPI. SHARC_COMM=NAME (nccl, mpi, self) forces the
 * backend. Call once, from the program's main. */
sharc_status sharc_comm_world_init(int *argc, char ***argv, sharc_comm **world);
/* The device the job's tensors live on ("cpu", "cuda": train.device), told
 * before sharc_comm_world_init: under an MPI launcher "cuda" makes the world
 * NCCL's (note [nccl] in docs/ARCHITECTURE.md; MPI's, said once, where NCCL
 * cannot be loaded); SHARC_COMM, when set, decides instead. */
void sharc_comm_world_device(const char *device);
/* Free the world and finalise its backend (MPI) if it was initialised. */
void sharc_comm_world_finalize(sharc_comm *world);
/* A one-rank group. */
sharc_status sharc_comm_self(sharc_comm **out);
/* Ranks with the same colour form a group, ordered by key (MPI_Comm_split). */
sharc_status sharc_comm_split(sharc_comm *c, int color, int key, sharc_comm **out);
/* The ranks of c on this node (MPI_COMM_TYPE_SHARED); self for one rank. */
sharc_status sharc_comm_split_node(sharc_comm *c, sharc_comm **out);
void sharc_comm_free(sharc_comm *c);

int sharc_comm_rank(const sharc_comm *c);
int sharc_comm_size(const sharc_comm *c);
const char *sharc_comm_backend(const sharc_comm *c);
/* Whether c's collectives take the memory of a device that is not host
 * memory (sharc_device_is_host false) directly: MPI and self never (note
 * [comm-staging] stages for them); NCCL when the group has a NCCL
 * communicator, made here if it has none yet, so not when ranks of the group
 * share a GPU (they stay on MPI, note [nccl]). Collective over c: every rank
 * of c calls it at the same point. */
sharc_status sharc_comm_takes_device(sharc_comm *c, bool *out);
/* Note [comm-staging] (src/fsdp/collectives.c): the collective `kind`
 * (all-gather, reduce-scatter or all-reduce with `op`, all-to-all) of device
 * d's buffers send (count elements; size x count for a reduce-scatter or an
 * all-to-all) and recv, for a
 * group that reads host memory only: send is copied into `host` and waited
 * for on s, the collective runs there, the result is copied from `host`
 * into recv and waited for. host: host memory (pinned:
 * sharc_device_host_alloc) of the send plus the receive bytes. Blocking. */
sharc_status sharc_comm_staged(sharc_comm *c, sharc_coll_kind kind, sharc_device *d, sharc_stream *s, void *host,
                               const void *send, void *recv, size_t count, sharc_dtype dt, sharc_reduce_op op);
/* Leave the whole job now (MPI_Abort where there is one), after a fatal error. */
void sharc_comm_abort(sharc_comm *c, int code);

/* ---- blocking collectives ---- */
sharc_status sharc_comm_all_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt);
sharc_status sharc_comm_reduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                       sharc_reduce_op op);
sharc_status sharc_comm_all_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                   sharc_reduce_op op);
/* recv(size, count) slice q = rank q's send slice r (send is (size, count)):
 * every rank sends its q-th slice to rank q (the exchange of sequence
 * parallelism). Out of place. */
sharc_status sharc_comm_all_to_all(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt);
sharc_status sharc_comm_broadcast(sharc_comm *c, void *buf, size_t count, sharc_dtype dt, int root);
sharc_status sharc_comm_barrier(sharc_comm *c);

/* ---- non-blocking: a request is completed (and recycled) by wait or wait_on,
 * or by a test that reports done ----
 * `after` (may be NULL) is the stream whose work so far produced `send`: the
 * collective starts after it (backends without streams synchronize it on
 * the host first, a no-op on the CPU device). */
sharc_status sharc_comm_iall_gather(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_stream *after, sharc_comm_request **req);
sharc_status sharc_comm_ireduce_scatter(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                        sharc_reduce_op op, sharc_stream *after, sharc_comm_request **req);
/* send == recv allowed; `after` NULL for host buffers with no stream (small
 * agreements: sharc_comm_world_settle). */
sharc_status sharc_comm_iall_reduce(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_reduce_op op, sharc_stream *after, sharc_comm_request **req);
/* sharc_comm_all_to_all, non-blocking: with NCCL queued on `after` (one
 * ncclSend/ncclRecv pair per peer in a group), so that a wait_on(req, s)
 * orders s behind it without the host; with MPI after `after` is
 * synchronized (MPI_Ialltoall). */
sharc_status sharc_comm_iall_to_all(sharc_comm *c, const void *send, void *recv, size_t count, sharc_dtype dt,
                                    sharc_stream *after, sharc_comm_request **req);
/* The host waits until the request is complete. */
sharc_status sharc_comm_wait(sharc_comm_request *req);
/* Work queued on `s` after this call sees the request's result. A backend
 * that orders collectives on streams makes s wait without the host (an
 * event); the others wait on the host here (MPI). */
sharc_status sharc_comm_wait_on(sharc_comm_request *req, sharc_stream *s);
sharc_status sharc_comm_test(sharc_comm_request *req, bool *done);

/* ---- shared memory (optional: backends without it return SHARC_ERR_UNSUPPORTED) ----
 * Every rank of a node-local group allocates `bytes` of one shared segment;
 * base[r] is rank r's part, readable and writable by every rank of the group.
 * Used for the zero-copy exchanges of note [shm-collectives]. */
typedef struct {
    sharc_comm *comm; /* the group; free the segment before the group */
    int size;
    size_t bytes; /* per rank */
    char **base;  /* (size) */
    void *impl;
    const void **part; /* (size) the dispatcher's scratch for sums over the parts */
} sharc_comm_shared;

sharc_status sharc_comm_shared_alloc(sharc_comm *c, size_t bytes, sharc_comm_shared **out);
void sharc_comm_shared_free(sharc_comm_shared *s);
/* Make this rank's stores to shared memory visible and wait for every rank
 * of the group (memory barrier + barrier). */
sharc_status sharc_comm_shared_sync(sharc_comm *c, sharc_comm_shared *s);
/* A reduce-scatter whose inputs already lie in the window: every rank's
 * (size, count) buffer of fp32 starts at byte `offset` of its own part; after
 * one sync, rank r sums slice r of all of them in rank order (note
 * [rank-order]) and adds it into recv (count floats, `add`) or writes it;
 * a second sync lets every rank reuse its buffer. Counted as a
 * reduce-scatter of count * size floats (and its two syncs as barriers).
 * Collective over the window's group. */
sharc_status sharc_comm_shared_reduce_scatter(sharc_comm_shared *s, size_t offset, float *recv, size_t count, bool add);

/* Allow (default) or forbid the shared-memory paths of note [shm-collectives]
 * for this group's all-gather, reduce-scatter and all-reduce; every rank of
 * the group must make the same choice. SHARC_COMM_SHM=0 forbids them everywhere. */
void sharc_comm_use_shared_memory(sharc_comm *c, bool on);
/* Whether this group may use shared memory (false on backends without it). */
bool sharc_comm_shared_memory_allowed(const sharc_comm *c);

/* ---- a failure the other ranks may not know of (note [job-end] in src/cli/main.c) ----
 * After a failure that may be this rank's alone (a collective or the step
 * failed here): wait at most `seconds` for every rank of the world to call
 * this too (a non-blocking all-reduce on a communicator of its own). True:
 * they all failed at the same point, the world can be freed and finalized.
 * False: some rank is elsewhere (waiting in a collective this one left);
 * the world is broken (sharc_comm_world_broken) and must not be freed or
 * finalized, only ended with sharc_comm_abort. True on one rank and on
 * worlds not made by sharc_comm_world_init. */
bool sharc_comm_world_settle(double seconds);
bool sharc_comm_world_broken(void);

/* ---- agreement (note [agreement] in docs/ARCHITECTURE.md) ----
 * Every rank passes its local status; all learn whether any rank failed
 * (one all-reduce). A failing rank gets its own status back (its message
 * kept); the others get `code` with `fmt_rank` ("...rank %d failed...")
 * naming the first failing rank, or that rank's own status when it is bad
 * input (SHARC_ERR_INVALID, SHARC_ERR_FORMAT), so every rank exits alike.
 * Collective. */
sharc_status sharc_comm_agree(sharc_comm *c, sharc_status local, sharc_status code, const char *fmt_rank);

/* ---- statistics ---- */
void sharc_comm_stats_get(const sharc_comm *c, sharc_comm_stats *out);
void sharc_comm_stats_reset(sharc_comm *c);

#ifdef __cplusplus
}
#endif
#endif
