/* sharc/fsdp.h: the engine that owns every parameter, gradient and shard.
 *
 * The model's layer loop is the schedule (no autograd, no hooks; the model
 * declares its order, sharc/units.h):
 *
 *   forward   w = sharc_fsdp_gather(e, u); ...compute...; sharc_fsdp_forward_done(e, u);
 *   backward  w = sharc_fsdp_gather(e, u); g = sharc_fsdp_grad(e, u);
 *             ...compute, g += ...; sharc_fsdp_backward_done(e, u);
 *
 * A unit whose backward needs no parameters (the embedding) skips the
 * backward gather. For forward-only passes (evaluation, generation) units
 * still gathered at the end (the head, root units) end with
 * sharc_fsdp_release. Every verb checks the unit's state and aborts with a
 * message naming the unit, its state and the expected ones when the order
 * is wrong (note [unit-states] in src/fsdp/fsdp_impl.h).
 *
 * gather returns the unit's full fp32 parameters (a flat buffer laid out as
 * the unit spec says) on the engine's device; grad returns a full-size
 * gradient buffer that the model accumulates into (+=). backward_done hands
 * the gradient to the engine, which reduces it into this rank's shard. With
 * a shard group of one rank and fp32 parameters gather returns the shard
 * itself and grad the grad shard (16-bit param_dtype rounds into a slot).
 *
 * The optimizer and checkpoints see only shards: sharc_fsdp_shard_* and the
 * segment list that maps a shard back to parameter names and element ranges.
 * Shards are written only inside sharc_fsdp_shard_write_begin/_end. */
#ifndef SHARC_FSDP_H
#define SHARC_FSDP_H

#include <stdbool.h>
#include <stdint.h>

#include "sharc/device.h"
#include "sharc/dtype.h"
#include "sharc/status.h"
#include "sharc/units.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sharc_fsdp sharc_fsdp;

typedef enum {
    SHARC_SHARDING_FULL_SHARD = 0, /* ZeRO-3: parameters, gradients, optimizer state sharded */
    SHARC_SHARDING_SHARD_GRAD_OP,  /* ZeRO-2: parameters stay gathered from forward to backward */
    SHARC_SHARDING_NO_SHARD,       /* DDP: everything replicated, gradients all-reduced */
    SHARC_SHARDING_HYBRID_SHARD    /* shard inside groups of fsdp_size, replicate across them */
} sharc_sharding;

typedef enum {
    SHARC_BACKWARD_PREFETCH_NONE = 0,
    SHARC_BACKWARD_PREFETCH_PRE,
    SHARC_BACKWARD_PREFETCH_POST
} sharc_backward_prefetch;

typedef struct {
    sharc_sharding strategy;
    /* -1: as the strategy says; 0 (false) keeps units gathered until backward,
     * 1 (true) reshards over the whole shard group, N >= 2 keeps each unit
     * sharded over groups of N contiguous ranks between its forward and its
     * backward (FSDP2's int, note [post-forward] in src/fsdp/plan.c) */
    int reshard_after_forward;
    int fsdp_size;            /* HYBRID_SHARD shard-group size */
    sharc_dtype param_dtype;  /* F32, BF16 or F16: parameters are gathered and computed rounded to it */
    sharc_dtype reduce_dtype; /* F32 or BF16: gradients are reduced in it, accumulated in fp32 */
    bool forward_prefetch;    /* gather the next units while u runs forward */
    sharc_backward_prefetch backward_prefetch;
    int forward_prefetch_depth;  /* units gathered ahead in forward (>= 1; MindSpeed-MM's num_to_forward_prefetch) */
    int backward_prefetch_depth; /* units gathered ahead in backward (>= 1; num_to_backward_prefetch) */
    int limit_all_gathers;       /* at most this many gathered non-root units alive (0: no limit) */
    bool no_sync;                /* keep unsharded gradients across micro-batches, reduce once per step */
    /* FSDP2's CPUOffloadPolicy (fsdp.cpu_offload): on a device whose memory
     * is not host memory, the shards, gradient shards and the optimizer live
     * on the CPU device (note [shard-device] in src/fsdp/collectives.c); on
     * the CPU device nothing changes */
    bool cpu_offload;
} sharc_fsdp_config;

void sharc_fsdp_config_default(sharc_fsdp_config *c);
/* Note [post-forward] (src/fsdp/plan.c): over how many ranks a unit stays
 * sharded between its forward and its backward in a shard group of S ranks:
 * S (true, FULL_SHARD), 1 (false, SHARD_GRAD_OP: the whole unit), or the N
 * of fsdp.reshard_after_forward (1 < N <= S, N divides S; N = S is true).
 * Another N is refused with the arithmetic (SHARC_ERR_INVALID). */
sharc_status sharc_fsdp_post_forward_size(const sharc_fsdp_config *cfg, int S, int *post);
const char *sharc_sharding_name(sharc_sharding s);

struct sharc_mesh;

/* The engine for `nunits` units (copied), used in the order `schedule` says
 * (copied; NULL: units in order, each read in backward, one at a time),
 * sharded over mesh->shard and replicated over mesh->replicate (mesh NULL:
 * one process), its memory on `dev` (NULL: the CPU device). Collective:
 * every rank of the mesh calls it. */
sharc_status sharc_fsdp_init(sharc_fsdp **out, const sharc_unit_spec *units, int nunits,
                             const sharc_unit_schedule *schedule, const sharc_fsdp_config *cfg, struct sharc_mesh *mesh,
                             sharc_device *dev);
void sharc_fsdp_free(sharc_fsdp *e);

/* Initialise this rank's shard from (seed, parameter name, element index). */
void sharc_fsdp_init_params(sharc_fsdp *e, uint64_t seed);

/* ---- the schedule ---- */
const float *sharc_fsdp_gather(sharc_fsdp *e, int unit);
/* Note [gathered16] (src/fsdp/collectives.c): for a unit whose spec says
 * gathered16 and a 16-bit param_dtype, its gathered parameters as
 * numel_padded param_dtype values (the buffer sharc_fsdp_gather returned:
 * not floats), valid until the unit is resharded; NULL for any other unit
 * (its gathered buffer is fp32). The unit must be gathered. */
const uint16_t *sharc_fsdp_gather16(const sharc_fsdp *e, int unit);
void sharc_fsdp_forward_done(sharc_fsdp *e, int unit);
/* NULL for a unit whose parameters are all frozen (note [frozen-params] in
 * src/fsdp/units.c): its backward computes no weight gradient, and its
 * backward_done reduces nothing. */
float *sharc_fsdp_grad(sharc_fsdp *e, int unit);
void sharc_fsdp_backward_done(sharc_fsdp *e, int unit);
/* Forward-only use is over (evaluation): drop the gathered copy (nothing if
 * the unit is sharded); the unit must have no open gradient. */
void sharc_fsdp_release(sharc_fsdp *e, int unit);
/* Zero the sharded gradients (start of an optimizer step). */
void sharc_fsdp_zero_grad(sharc_fsdp *e);
/* Before each micro-batch: with fsdp.no_sync only the last one reduces. */
void sharc_fsdp_begin_microbatch(sharc_fsdp *e, bool last);
/* After the last micro-batch: finish the reductions (the replicate
 * all-reduce of HYBRID_SHARD and NO_SHARD). Collective. */
sharc_status sharc_fsdp_finish_grads(sharc_fsdp *e);

/* ---- writing parameter shards ----
 * Every write to this rank's parameter shards (initialisation, loading
 * weights or a checkpoint, the optimizer) happens between begin and end,
 * which every rank of the shard group calls alike, even one whose load
 * failed: end marks the shards updated, so with shared parameters (note
 * [shared-params] in src/fsdp/shm.c) the next gather first waits until every
 * rank has finished writing. begin checks that no unit holds gathered
 * parameters or an open gradient; brackets nest (the outermost one counts).
 * sharc_fsdp_shard_write is the writable shard, only inside a bracket. */
void sharc_fsdp_shard_write_begin(sharc_fsdp *e);
float *sharc_fsdp_shard_write(sharc_fsdp *e, int unit);
/* Note [shard-host-io] (src/fsdp/param_io.c): n host floats into unit u's
 * shard from element shard_off on (inside the write bracket), or n of its
 * parameters from shard_off out to host memory; both return once the copy
 * is done, so the host buffer may be reused at once. On a device whose
 * memory is not host memory these are the only ways shard bytes reach the
 * host (file readers read into a host buffer, then copy it in). */
sharc_status sharc_fsdp_shard_copy_in(sharc_fsdp *e, int u, int64_t shard_off, const float *src, int64_t n);
sharc_status sharc_fsdp_shard_copy_out(const sharc_fsdp *e, int u, int64_t shard_off, float *dst, int64_t n);
/* The same copy out, queued on the shard device's stream
 * (sharc_device_stream(sharc_fsdp_shard_device(e))) and not waited for: dst
 * is pinned host memory of that device (sharc_device_host_alloc) and is read
 * only after synchronizing that stream (note [ckpt-pinned] in
 * src/ckpt/writer.c); on the CPU device a memcpy, done on return. */
sharc_status sharc_fsdp_shard_queue_out(const sharc_fsdp *e, int u, int64_t shard_off, float *dst, int64_t n);
/* The copy in, queued on the same stream and not waited for: src must stay
 * valid and unchanged until that stream is synchronized (importers read a
 * unit's segments into one host buffer and wait once per unit). */
sharc_status sharc_fsdp_shard_queue_in(sharc_fsdp *e, int u, int64_t shard_off, const float *src, int64_t n);
void sharc_fsdp_shard_write_end(sharc_fsdp *e);
/* True when the shard group reads each other's parameter shards in place
 * from one shared-memory window, so gathers copy nothing (note [shared-params]). */
bool sharc_fsdp_params_shared(const sharc_fsdp *e);
/* The group of N ranks backward gathers over (note [post-forward]), or NULL
 * when backward gathers over the shard group or not at all; owned by the
 * engine (its collectives count in its own statistics). */
struct sharc_comm *sharc_fsdp_post_forward_comm(const sharc_fsdp *e);
/* The strategies chosen at init for gathering parameters and (in *reduce,
 * may be NULL) reducing gradients, by name ("direct", "shared window",
 * "fp32 all-gather", "16-bit all-gather", ... : src/fsdp/collectives.c). */
const char *sharc_fsdp_strategy_names(const sharc_fsdp *e, const char **reduce);

/* ---- shards ---- */
typedef struct {
    int param;         /* index in the unit spec */
    int64_t shard_off; /* first element in the shard */
    int64_t param_off; /* first element in the parameter (the full tensor's, note [tp-params] in sharc/units.h) */
    int64_t len;
    bool tp_copy; /* a copy, on tp rank > 0, of a parameter replicated over tp: checkpoints skip it */
} sharc_segment;

int sharc_fsdp_num_units(const sharc_fsdp *e);
/* The compute device: gathered parameters and full gradients live there (the
 * model that runs with the engine uses the same). */
sharc_device *sharc_fsdp_device(const sharc_fsdp *e);
/* The device the shards (fp32 masters, gradient shards) live on, and with
 * them the optimizer's moments and step: the compute device, or the CPU
 * device under fsdp.cpu_offload (note [shard-device] in src/fsdp/collectives.c).
 * Shard pointers (sharc_fsdp_shard_*) are memory of this device. */
sharc_device *sharc_fsdp_shard_device(const sharc_fsdp *e);
/* The dtype parameters are gathered in (fsdp.param_dtype). */
sharc_dtype sharc_fsdp_param_dtype(const sharc_fsdp *e);
const sharc_unit_spec *sharc_fsdp_unit_spec(const sharc_fsdp *e, int unit);
int64_t sharc_fsdp_shard_numel(const sharc_fsdp *e, int unit); /* padded */
/* This rank's fp32 parameter shard (numel_shard floats, read-only: see
 * sharc_fsdp_shard_write) and gradient shard (NULL for a unit whose
 * parameters are all frozen, note [frozen-params] in src/fsdp/units.c). */
const float *sharc_fsdp_shard_params(const sharc_fsdp *e, int unit);
float *sharc_fsdp_shard_grads(sharc_fsdp *e, int unit);
/* The pieces of parameters this rank's shard of `unit` holds (padding excluded). */
int sharc_fsdp_shard_segments(const sharc_fsdp *e, int unit, const sharc_segment **out);

/* Note [offload-overlap] (src/fsdp/overlap.c). A task updates unit u's
 * shard: params and grads are its shards (the shard device's memory). */
typedef sharc_status (*sharc_fsdp_shard_task)(void *ctx, int unit, float *params, float *grads);
/* Run fn(ctx, u, ...) for every unit in forward order. Under fsdp.cpu_offload
 * on a device (and SHARC_OFFLOAD_OVERLAP not 0) the calls are queued to the
 * engine's host thread and this returns at once: the next gather of unit u
 * waits for u's, every other access to shards waits for all; fn must make no
 * device call and ctx must live until sharc_fsdp_shard_sync. Otherwise the
 * calls run here. Call it inside the write bracket. Returns the failure of a
 * previous queue not yet returned, or this one's when run here. */
sharc_status sharc_fsdp_shard_update(sharc_fsdp *e, sharc_fsdp_shard_task fn, void *ctx);
/* Wait for every queued update; their first failure, once. */
sharc_status sharc_fsdp_shard_sync(const sharc_fsdp *e);
/* The same wait for a caller that returns no status: a failure stays kept
 * for the next sharc_fsdp_shard_sync. */
void sharc_fsdp_shard_wait(const sharc_fsdp *e);

/* Sum of squares of this rank's shard gradients (padding excluded). */
double sharc_fsdp_grad_sumsq_local(const sharc_fsdp *e);
/* The global gradient norm over every shard, padding excluded: one
 * all-reduce over the world of [sumsq / dp_replicate, extra] (replicas hold
 * the same shard); `extra` (may be NULL) is summed over the world in the same
 * call (the trainer passes its loss sum). Collective. */
sharc_status sharc_fsdp_grad_norm(sharc_fsdp *e, double *norm, double *extra);
/* sharc_fsdp_grad_norm in two halves, for a caller that reads the sums
 * back with its own (note [loss-on-device] in src/train/step.c): queue sets
 * sq[0..1] (device memory) to this rank's squared sums on the device's
 * default stream, not read; reduce takes them read back and does the rest
 * (collective). */
sharc_status sharc_fsdp_grad_sumsq_queue(const sharc_fsdp *e, double *sq);
sharc_status sharc_fsdp_grad_norm_reduce(sharc_fsdp *e, const double sq[2], double *norm, double *extra);

/* Engine telemetry: time the compute thread waited on communication. */
typedef struct {
    double wait_s;            /* inside gathers and reductions the model waited for */
    int64_t gathers, reduces; /* unit-level operations */
    int64_t gathered_peak;    /* most gathered units alive at once */
    int64_t comm_waits;       /* the compute stream's waits for the comm stream (a device with one, note
                                 [comm-stream]): gathers waited for, plus one at the end of the gradients */
} sharc_fsdp_stats;
void sharc_fsdp_stats_get(const sharc_fsdp *e, sharc_fsdp_stats *out);
void sharc_fsdp_stats_reset(sharc_fsdp *e);
/* Bytes of one gathered unit buffer (the largest unit, padded, fp32) and how
 * many may be alive at once: the documented bound on gathered memory. */
int64_t sharc_fsdp_gathered_unit_bytes(const sharc_fsdp *e);
int sharc_fsdp_gathered_limit(const sharc_fsdp *e);
/* Bytes of every gathered-parameter and full-gradient buffer the engine
 * holds, post-forward slices included (note [post-forward]): the bound of
 * note [gathered-bound] in src/fsdp/plan.c. */
int64_t sharc_fsdp_gathered_capacity_bytes(const sharc_fsdp *e);
/* What the engine's memory plan gives this rank in a category (params,
 * grads, gathered, comm, other; shared windows included), which is what it
 * allocated at init. */
int64_t sharc_fsdp_planned_bytes(const sharc_fsdp *e, sharc_mem_cat cat);
/* The same plan without an engine (a pure function, nothing allocated but
 * the plan's own arrays; cfg->cpu_offload set means the run's device is not
 * host memory, the caller clears it for the CPU device), for one rank of a shard group of S ranks; `shared`
 * when the group would hold its parameters in one shared-memory window
 * (note [shared-params]: S > 1, fp32 parameters, the group on one node,
 * shared memory allowed); `device` when the engine's memory is a device's
 * (not host memory: one more gradient slot, note [comm-stream] in
 * src/fsdp/collectives.c). schedule NULL: as for init. */
typedef struct {
    int64_t bytes[SHARC_MEM_NCAT];      /* what sharc_fsdp_init allocates on the rank (its compute device) */
    int64_t host_bytes[SHARC_MEM_NCAT]; /* cfg->cpu_offload: what it allocates on the shard device, host memory */
    int64_t trainable_shard;            /* padded shard elements of the units that train (the moments' size) */
    int64_t max_padded;                 /* elements of the largest gathered unit */
    int64_t max_trainable_shard;        /* elements of the largest shard of a unit that trains */
} sharc_fsdp_plan_summary;
sharc_status sharc_fsdp_plan_bytes(const sharc_unit_spec *units, int nunits, const sharc_unit_schedule *schedule,
                                   const sharc_fsdp_config *cfg, int S, bool shared, bool device,
                                   sharc_fsdp_plan_summary *out);

/* Copy a whole parameter (numel floats, by global name) into / out of the
 * part this rank holds. read_local fills only the elements this rank holds. */
sharc_status sharc_fsdp_param_write_local(sharc_fsdp *e, const char *name, const float *src, int64_t numel);
sharc_status sharc_fsdp_param_read_local(const sharc_fsdp *e, const char *name, float *dst, int64_t numel);
/* All-gather unit `unit`'s fp32 master parameters (not rounded to
 * param_dtype) into dst (numel_padded floats, at most
 * sharc_fsdp_gathered_unit_bytes). Collective over the shard group. */
sharc_status sharc_fsdp_gather_master(sharc_fsdp *e, int unit, float *dst);
/* The mesh's tensor-parallel group (note [tp-params] in sharc/units.h), NULL when tp = 1. */
struct sharc_comm *sharc_fsdp_tp_group(const sharc_fsdp *e);
/* Locate a parameter by name: unit and index, or an error naming it. */
sharc_status sharc_fsdp_find_param(const sharc_fsdp *e, const char *name, int *unit, int *param);

#ifdef __cplusplus
}
#endif
#endif
