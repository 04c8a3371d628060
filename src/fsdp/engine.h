/* engine.h (internal): the engine's objects as its files share them:
 * the engine, its units and their states (unit.c), the slot pools (pool.c),
 * and the strategy tables of the collectives (collectives.c, shm.c). The
 * files, FSDP2's split (docs/ARCHITECTURE.md, "The engine's files"):
 *
 *   fsdp.c         sharc_fsdp_*: init/free, the public verbs, prefetch by the schedule, accessors
 *   plan.c         the memory plan (pure)          layout.c  the shard arithmetic (pure)
 *   unit.c         the unit state machine          pool.c    the gathered-memory slots
 *   collectives.c  every byte of parameters and gradients that moves between ranks
 *   shm.c          the shared-window strategy (note [shared-params])
 *   param_io.c     writes to shards (the write bracket), parameters by name, initialisation */
#ifndef SHARC_FSDP_ENGINE_H
#define SHARC_FSDP_ENGINE_H

#include "sharc/comm.h"
#include "sharc/fsdp.h"
#include "sharc/kernels.h"
#include "sharc/status.h"
#include "layout.h"
#include "plan.h"

/* Note [unit-states]. A unit's parameters and its gradient each have a
 * state; every verb checks both and names the unit, the state and the ones
 * it expected when they are wrong (FSDP2's _assert_in_states).
 *
 *   parameters  SHARDED --gather/prefetch--> GATHERING --wait--> GATHERED --reshard--> SHARDED
 *               (a gather that completes at once goes SHARDED -> GATHERED)
 *               GATHERED --forward_done, int reshard_after_forward--> POST_FORWARD
 *               POST_FORWARD --gather/prefetch (inside the group of N)--> GATHERING or GATHERED
 *               POST_FORWARD --release / shard_write_begin--> SHARDED   (note [post-forward], plan.c)
 *   gradient    NONE --grad--> OPEN --backward_done--> REDUCING --> NONE
 *                              OPEN --backward_done, no_sync--> HELD --grad--> OPEN
 *                                                               HELD --finish_grads--> REDUCING --> NONE */
typedef enum {
    SHARC_PARAMS_SHARDED = 0,
    SHARC_PARAMS_GATHERING,
    SHARC_PARAMS_GATHERED,
    SHARC_PARAMS_POST_FORWARD /* sharded over the group of N, its slice in post_shard */
} sharc_params_state;
typedef enum { SHARC_GRAD_NONE = 0, SHARC_GRAD_OPEN, SHARC_GRAD_REDUCING, SHARC_GRAD_HELD } sharc_grad_state;

typedef struct {
    sharc_unit_spec spec;
    int index;
    int64_t numel_shard;  /* padded shard size */
    int64_t numel_padded; /* numel_shard x shard group size */
    int64_t shard_lo;     /* first element of this rank's shard in the flat buffer */
    int64_t global_off;   /* first element of the unit in the shared parameter window */
    float *param_shard;   /* (numel_shard) fp32 master parameters, SHARC_MEM_PARAMS, on the shard device */
    float *grad_shard;    /* (numel_shard) gradients, SHARC_MEM_GRADS, on the shard device; NULL when frozen */
    bool trainable;       /* a parameter is not frozen (note [frozen-params]): else no gradient path at all */
    sharc_segment *segs;  /* (sharc_unit_max_segments) owned */
    int nseg;
    sharc_params_state params;
    sharc_grad_state grad;
    float *param_full;           /* (numel_padded) while GATHERING/GATHERED: a slot, the shard, or the shared window;
                                    with g16 numel_padded 16-bit elements in a slot (note [gathered16]) */
    bool g16;                    /* note [gathered16]: the slot holds the gathered unit in param_dtype */
    int64_t slot_numel;          /* floats its gathered slot needs (the plan's) */
    float *grad_full;            /* (numel_padded) while OPEN/HELD: a slot, or the grad shard */
    sharc_comm_request *pending; /* the gather in flight while GATHERING */
    sharc_event *ready;          /* note [comm-stream]: recorded on the comm stream after its gather */
    int64_t ready_seq;           /* that record's position on the comm stream, 0: none */
    void *post_shard;            /* (numel_post) in param_dtype: slice shard_rank % N kept after forward, or NULL */
    int64_t numel_post;          /* numel_padded / N (note [post-forward]), 0: the unit keeps none */
} sharc_fsdp_unit;

typedef struct {
    int n;
    bool borrowed;  /* the slots are carved from a shared window, not allocated on the device */
    int64_t *numel; /* (n) capacity of each slot */
    int *reserved;  /* (n) the only unit that may use the slot, or -1 */
    float **buf;
    int *owner;       /* unit holding the slot, -1 if free */
    int alive, peak;  /* slots lent now, most lent at once since the last reset */
    sharc_event **ev; /* (n) note [comm-stream]: recorded on the comm stream after the slot's last use, or NULL */
    int64_t *seq;     /* (n) that record's position on the comm stream, 0: none */
} sharc_fsdp_pool;

/* How a unit's parameters become whole (collectives.c; shm.c): chosen once at init. */
typedef struct {
    const char *name;
    bool slot; /* the gathered parameters need a slot of the pool */
    /* make t->param_full hold the unit's parameters (a slot it holds, if
     * `slot`): done before returning, or posted and left in t->pending
     * (only when !blocking) */
    void (*start)(sharc_fsdp *e, sharc_fsdp_unit *t, bool blocking);
} sharc_fsdp_gather_i;

/* How a unit's full gradient reaches the shards: grad_shard += the sum over
 * the shard group of its slice of every rank's grad_full. */
typedef struct {
    const char *name;
    bool slot; /* grad_full is a slot (false: it is the grad shard itself, nothing to reduce) */
    void (*reduce)(sharc_fsdp *e, sharc_fsdp_unit *t);
} sharc_fsdp_reduce_i;

/* Note [offload-reduce] (collectives.c): one slot of the landing ring. */
typedef struct {
    float *buf;              /* (max numel_shard) page-locked host memory, a part of hreduced */
    float *dst;              /* the unit's gradient shard its accumulate adds into */
    int64_t n;               /* its numel_shard */
    const sharc_kernels *sk; /* the shard device's (the CPU's) */
    sharc_stream *ss;        /* and its stream */
    sharc_event *ev;         /* recorded after the accumulate, on the reduction's stream (never recorded: free) */
} sharc_fsdp_hslot;

/* note [sumsq-multi] (fsdp.c): the gradient norm's segment table */
struct sharc_fsdp_sumsq_tab {
    sharc_sumsq_seg *segs_h, *segs_d; /* (nseg) host table, its device copy */
    int nseg;
    const float **grad; /* (nunits) the grad shards the table was built from */
    bool built;
};

struct sharc_fsdp {
    sharc_fsdp_config cfg;
    sharc_device *dev;       /* the compute device: slots, staging, the model's activations */
    sharc_stream *stream;    /* the device's default stream: the model's kernels and ours */
    sharc_device *sdev;      /* note [shard-device] (collectives.c): shards, grad shards, the optimizer */
    sharc_stream *sstream;   /* sdev's default stream (stream itself when sdev is dev) */
    const sharc_kernels *sk; /* sdev's kernel table */
    float *hreduced;         /* note [offload-reduce]: (hslots x max numel_shard) reduced shards on sdev, or NULL */
    sharc_fsdp_hslot *hslot; /* (hslots) the landing ring */
    int hslots, hnext;       /* its size, and the slot the next reduction lands in */
    sharc_stream *cstream;   /* note [comm-stream] (collectives.c): a device group's collectives, or NULL */
    sharc_event *computed;   /* recorded on stream before each collective queued on cstream */
    sharc_event *reduced;    /* recorded on cstream at the end of a step's gradients */
    int64_t cseq;            /* records made on cstream so far (their positions: 1, 2, ...) */
    int64_t cwaited;         /* the compute stream has waited for cstream up to this position */
    const sharc_kernels *k;
    int nunits;
    sharc_fsdp_unit *units;
    int *order, *pos; /* note [unit-schedule]: units in forward order, and each unit's place in it */
    bool *bwd_params; /* (nunits) the unit's backward reads its parameters */
    int bwd_from;     /* note [frozen-params]: backward runs for units at forward positions >= this */
    int max_live;
    sharc_comm *shard, *replicate, *world; /* NULL on one process */
    int S, R;                              /* shard and replicate group sizes */
    int tp;                                /* tensor-parallel degree (note [tp-params]) */
    sharc_comm *tp_group;                  /* borrowed from the mesh; NULL when tp = 1 */
    int shard_rank;
    bool reshard_after_forward;
    int post;                          /* note [post-forward]: ranks a unit stays sharded over after forward */
    sharc_comm *post_comm;             /* the group of N contiguous shard ranks (owned), or NULL */
    void *post_arena;                  /* every unit's post_shard, SHARC_MEM_GATHERED */
    const sharc_fsdp_gather_i *gather; /* the strategies, chosen at init */
    const sharc_fsdp_reduce_i *reduce;
    sharc_fsdp_plan plan;
    /* note [shared-params] (shm.c) */
    sharc_comm_shared *pshm; /* every unit's padded parameters, or NULL */
    float *pglobal;          /* (plan.total_padded) the window's base, borrowed from pshm */
    bool params_dirty;       /* shards written since the group last synchronised */
    sharc_comm_shared *gshm; /* this group's gradient slots, each rank's in its own part, or NULL */
    bool reduce_now;         /* this micro-batch reduces (false under no_sync before the last) */
    bool in_backward;        /* for the activity record (note [watchdog]) */
    int writing;             /* depth of sharc_fsdp_shard_write_begin/_end brackets */
    sharc_fsdp_pool gathered, grads;
    int npending; /* prefetches in flight (note [progress], unit.c) */
    /* communication staging (SHARC_MEM_COMM) */
    uint16_t *stage16_shard;         /* (max numel_shard) 16-bit send/recv */
    uint16_t *stage16_full;          /* (max numel_padded) 16-bit full unit */
    float *stage_shard;              /* (max numel_shard) fp32 reduce-scatter result */
    double *scalar;                  /* (2) device scalars: the local sums of squares (not split, split over tp) */
    struct sharc_fsdp_sumsq_tab *sq; /* note [sumsq-multi] (fsdp.c): the norm's segment table */
    char *hstage; /* note [comm-staging]: host bytes for a collective's send and receive; NULL: none */
    struct sharc_fsdp_overlap
        *ovl; /* note [offload-overlap] (overlap.c): the host worker, or NULL before the first queue */
    sharc_fsdp_stats stats;
};

/* A comm error inside the step: the job cannot go on (status.c aborts with
 * rank and file:line). */
#define SHARC_FSDP_COMM_FATAL() sharc_fatal(__FILE__, __LINE__, "fsdp: %s", sharc_last_error())

/* pool.c */
sharc_status sharc_fsdp_pool_init(sharc_device *dev, sharc_fsdp_pool *p, int n, const int64_t *numel,
                                  const int *reserved, float *arena);
void sharc_fsdp_pool_free(sharc_device *dev, sharc_fsdp_pool *p);
/* The unit's reserved slot, else the smallest free unreserved slot that
 * holds `numel` floats; NULL if none (must: a schedule bug, fatal). */
float *sharc_fsdp_pool_get(sharc_fsdp_pool *p, int unit, int64_t numel, bool must);
void sharc_fsdp_pool_put(sharc_fsdp_pool *p, const float *buf);
/* The index of the pool's slot buf. */
int sharc_fsdp_pool_slot(const sharc_fsdp_pool *p, const float *buf);
/* Note [comm-stream]: one event per slot (created here). */
sharc_status sharc_fsdp_pool_events(sharc_device *dev, sharc_fsdp_pool *p);

/* Unit u, checked: every file of the engine reaches units through it. */
static inline sharc_fsdp_unit *sharc_fsdp_unit_at(const sharc_fsdp *e, int u) {
    if (u < 0 || u >= e->nunits)
        sharc_fatal(__FILE__, __LINE__, "fsdp: unit %d does not exist (the model has %d units)", u, e->nunits);
    return &e->units[u];
}

/* unit.c: the verbs of note [unit-states]; fsdp.c decides when. */
/* Abort unless the unit's states are among the allowed (bit masks of 1 << state). */
void sharc_fsdp_unit_expect(const sharc_fsdp_unit *t, const char *verb, unsigned params_ok, unsigned grad_ok);
/* SHARDED -> GATHERING or GATHERED. ahead (a prefetch): only if a slot is
 * free (returns false if not), and the gather may be left in flight. */
bool sharc_fsdp_unit_unshard(sharc_fsdp *e, sharc_fsdp_unit *t, bool ahead);
/* GATHERING -> GATHERED: the compute stream waits for the gather. */
void sharc_fsdp_unit_wait(sharc_fsdp *e, sharc_fsdp_unit *t);
/* GATHERING/GATHERED -> SHARDED: the slot goes back. */
void sharc_fsdp_unit_reshard(sharc_fsdp *e, sharc_fsdp_unit *t);
/* NONE/HELD -> OPEN (a zeroed slot, or the grad shard); OPEN stays OPEN. */
float *sharc_fsdp_unit_grad_open(sharc_fsdp *e, sharc_fsdp_unit *t);
/* OPEN/HELD -> REDUCING -> NONE: reduced into the shard, the slot goes back. */
void sharc_fsdp_unit_reduce(sharc_fsdp *e, sharc_fsdp_unit *t);
/* OPEN -> HELD: kept unreduced for the next micro-batch (fsdp.no_sync). */
void sharc_fsdp_unit_hold(sharc_fsdp_unit *t);

/* GATHERED -> POST_FORWARD (note [post-forward]): keep this rank's slice, the slot goes back. */
void sharc_fsdp_unit_reshard_post_forward(sharc_fsdp *e, sharc_fsdp_unit *t);

/* collectives.c */
/* Note [shard-device]: the engine's shards live on another device than its compute (fsdp.cpu_offload). */
static inline bool sharc_fsdp_offloaded(const sharc_fsdp *e) { return e->sdev != e->dev; }
/* Host bytes note [comm-staging] needs: the largest unit's padded plus shard numel, fp32. */
int64_t sharc_fsdp_coll_stage_bytes(const sharc_fsdp *e);
void sharc_fsdp_coll_choose(sharc_fsdp *e);
/* note [post-forward]: copy this rank's slice of the gathered unit into its
 * post-forward shard (no communication), and the gather from those slices
 * inside the group of N. */
void sharc_fsdp_coll_keep_post_forward(sharc_fsdp *e, sharc_fsdp_unit *t);
extern const sharc_fsdp_gather_i sharc_fsdp_gather_post_forward;
/* Note [comm-stream]: record ev on the comm stream after all queued there
 * (returns its position), and make the compute stream wait for a position
 * (nothing when it already waited for a later one; counted in stats). */
int64_t sharc_fsdp_coll_mark(sharc_fsdp *e, sharc_event *ev);
void sharc_fsdp_coll_wait(sharc_fsdp *e, sharc_event *ev, int64_t seq);
/* Note [offload-reduce]: every queued accumulate of a reduced shard has run (the host waits). */
void sharc_fsdp_coll_reduced_wait(const sharc_fsdp *e);
/* Note [offload-reduce]: the host waits for one slot's accumulate, if its event is not reached yet. */
sharc_status sharc_fsdp_hslot_wait(sharc_fsdp_hslot *h);
/* The replicate group's all-reduce of every grad shard (HYBRID_SHARD, NO_SHARD). */
sharc_status sharc_fsdp_coll_all_reduce_replicas(sharc_fsdp *e);

/* overlap.c: note [offload-overlap] */
typedef struct sharc_fsdp_overlap sharc_fsdp_overlap;
/* Offloaded, and SHARC_OFFLOAD_OVERLAP is not 0. */
bool sharc_fsdp_overlap_on(const sharc_fsdp *e);
/* Unit u's queued update done. */
void sharc_fsdp_shard_wait_unit(const sharc_fsdp *e, int u);
/* Unit u's queued update is done (no wait). */
bool sharc_fsdp_shard_unit_done(const sharc_fsdp *e, int u);
/* True (and the worker zeroes unit u's gradient shard after its update) if
 * the update is still queued; false: the caller zeroes it. */
bool sharc_fsdp_shard_zero_later(sharc_fsdp *e, int u);
/* Join the worker (after its queue ran). */
void sharc_fsdp_overlap_free(sharc_fsdp *e);

/* shm.c: note [shared-params] */
bool sharc_fsdp_shm_eligible(const sharc_fsdp *e);
/* Collective over the shard group: the parameter window, then (fp32
 * reduction) the gradient window; either may end up NULL (nodes, layout). */
sharc_status sharc_fsdp_shm_init(sharc_fsdp *e, const sharc_fsdp_plan *plan);
void sharc_fsdp_shm_free(sharc_fsdp *e);
/* Every rank finished writing its shards before anyone reads them. */
void sharc_fsdp_shm_sync_params(sharc_fsdp *e);
extern const sharc_fsdp_gather_i sharc_fsdp_gather_shared;
extern const sharc_fsdp_reduce_i sharc_fsdp_reduce_shared;

#endif
