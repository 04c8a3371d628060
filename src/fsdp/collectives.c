/* collectives.c: every byte of parameters and gradients that moves between
 * the ranks of the engine (FSDP2's _fsdp_collectives.py): the strategies a
 * unit's gather and reduction use, chosen once at init from the group size,
 * the dtypes and shared memory, the replicate all-reduce, and the gather
 * of master weights for saving. The shared-window strategy is shm.c. No
 * other file of the engine calls sharc_comm_* with parameter or gradient
 * data.
 *
 *   gather  direct             one process, fp32: the shard is the whole unit
 *           shared window      note [shared-params] (shm.c): read in place
 *           fp32 all-gather    into a slot, non-blocking for prefetch
 *           16-bit all-gather  round the shard to param_dtype, gather, widen
 *                              (one process: round into a slot; on a comm
 *                              stream all three queued there); a unit the
 *                              model reads in 16-bit is gathered straight into
 *                              its half-size slot, never widened (note [gathered16])
 *           post-forward       backward's gather of a unit resharded over N
 *                              ranks: all-gather of the kept slices inside the
 *                              group of N (note [post-forward] in plan.c)
 *   reduce  direct             one process: the model accumulated into the shard
 *           shared window      shm.c: each rank sums its slice of every slot in place
 *           fp32 reduce-scatter, 16-bit reduce-scatter (reduce_dtype), then += into the shard
 *
 * Element work runs through the device's kernel table on the engine's
 * stream; MPI reads host memory, which the CPU device's is.
 *
 * Note [comm-staging]. On a device whose memory is not host memory, when a
 * group of the engine reads host memory only (sharc_comm_takes_device
 * false, asked at init: MPI and self, SHARC_COMM=mpi, and a NCCL group whose
 * ranks share one GPU, which NCCL refuses), every collective below goes through e->hstage, one
 * host buffer sized at init for the largest unit's send plus receive: the
 * send bytes are copied out and waited for, the collective runs on host
 * memory, the result is copied back in and waited for (sharc_comm_staged,
 * src/comm/staged.c, which tensor parallelism uses too). Staged collectives
 * are blocking (a prefetch then gathers at once, in the same order), so
 * the values are those of the CPU's path: the same bytes reach MPI. The
 * buffer is pinned (sharc_device_host_alloc), so the copies out and in are
 * asynchronous: each is followed by an explicit synchronize before MPI or
 * the device reads the bytes. A NCCL group with its communicator takes
 * device memory and needs none. */
#include "engine.h"
#include "sharc/clock.h"
#include "sharc/prof.h"

typedef enum { STAGE_ALL_GATHER, STAGE_REDUCE_SCATTER, STAGE_ALL_REDUCE } stage_kind;

/* The collective `kind` over `c` on device buffers send (count elements;
 * size x count for a reduce-scatter) and recv, through host memory
 * (sharc_comm_staged). */
static sharc_status staged(sharc_fsdp *e, stage_kind kind, sharc_comm *c, const void *send, void *recv, size_t count,
                           sharc_dtype dt) {
    const sharc_coll_kind k = kind == STAGE_ALL_GATHER       ? SHARC_COLL_ALL_GATHER
                              : kind == STAGE_REDUCE_SCATTER ? SHARC_COLL_REDUCE_SCATTER
                                                             : SHARC_COLL_ALL_REDUCE;
    return sharc_comm_staged(c, k, e->dev, e->stream, e->hstage, send, recv, count, dt, SHARC_REDUCE_OP_SUM);
}

/* Note [blocking-on-stream]. A collective on device memory (a group that
 * takes it: NCCL) is never handed over without a stream: the backend would
 * queue it on the legacy stream, which does not wait for the engine's
 * non-blocking stream, so it could read a gradient or a cast shard before
 * the kernels writing it ran (found by the fake NCCL on the simulator,
 * tests/cli/cudasim_train.sh). On the CPU device (no queues) the blocking
 * call is kept, so the MPI backend's algorithms and bits are today's.
 *
 * Note [comm-stream]. Such a collective runs on the engine's comm stream
 * (e->cstream, made at init on a device whose groups take device memory;
 * never on the CPU or staged paths, which keep their blocking calls) and
 * the host never waits for it inside forward or backward. One total order
 * per stream, the order the host queues work in; the rules:
 *   1. Before the comm stream reads anything the compute stream wrote, it
 *      waits for e->computed recorded there (comm_after_compute): shards
 *      the optimizer wrote, backward's grad_full, a grad shard the model
 *      accumulated into (one process), a post-forward slice.
 *   2. A unit's gather (fp32, or 16-bit: the cast into stage16_shard, the
 *      all-gather, the widening cast into its slot, all queued there) is
 *      followed by t->ready; the compute stream waits for it before using
 *      the unit (at once when blocking, else sharc_fsdp_unit_wait, which
 *      release passes through before the slot goes back: so a slot is
 *      reused only by work queued after the gather that filled it).
 *   3. A unit's reduction (the 16-bit cast of grad_full, the reduce-scatter,
 *      the widening cast, the accumulate into grad_shard) and the replicas'
 *      all-reduce are queued there and nobody waits at once: the
 *      reduction of unit u runs while the compute stream does the backward
 *      of the units after it. Its grad_full slot goes back to the pool with
 *      an event recorded after the reduction (pool seq/ev); the compute
 *      stream waits for it when the slot is handed out again (grad_open,
 *      before the memset), and the pool hands out, of equal slots, the one
 *      the comm stream used longest ago; the plan gives one gradient slot
 *      more than max_live (overlap_reduce), so that is the reduction of
 *      two units back, already ordered by the gather waited for since.
 *   4. sharc_fsdp_finish_grads records e->reduced after the step's last
 *      reduction and all-reduce and the compute stream waits for it: the
 *      only wait for reductions, before anything on the compute stream
 *      reads or writes a grad shard (norm, clipping, optimizer, zero_grad,
 *      checkpoints all come after it).
 *   5. The staging buffers (stage16_*, stage_shard) are used only by work
 *      on the comm stream there, so its own order protects them.
 * The collectives' requests are retired on the comm stream itself (q_*).
 * Positions: every record on the comm stream gets the next number (cseq);
 * a wait of the compute stream for position p covers everything before p
 * (one queue), so sharc_fsdp_coll_wait skips a wait already covered
 * (cwaited) and counts the others in stats.comm_waits: per step, the
 * gathers waited for plus the one of rule 4 (tests/cli/cudasim_overlap.sh). */
static void comm_after_compute(sharc_fsdp *e) {
    if (sharc_device_event_record(e->computed, e->stream) != SHARC_OK ||
        sharc_device_event_wait(e->computed, e->cstream) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
}

int64_t sharc_fsdp_coll_mark(sharc_fsdp *e, sharc_event *ev) {
    if (sharc_device_event_record(ev, e->cstream) != SHARC_OK) SHARC_FSDP_COMM_FATAL();
    return ++e->cseq;
}

void sharc_fsdp_coll_wait(sharc_fsdp *e, sharc_event *ev, int64_t seq) {
    if (seq <= e->cwaited) return; /* the comm stream runs in order */
    if (sharc_device_event_wait(ev, e->stream) != SHARC_OK) SHARC_FSDP_COMM_FATAL();
    e->cwaited = seq;
    e->stats.comm_waits++;
}

/* The collectives queued on the comm stream (note [comm-stream]): the
 * request is retired there at once (the stream waits for its own event,
 * which orders nothing new), so what follows on the comm stream and the
 * caller's later record are what order the result. */
static void q_all_gather(sharc_fsdp *e, sharc_comm *c, const void *send, void *recv, size_t n, sharc_dtype dt) {
    sharc_comm_request *req = NULL;
    if (sharc_comm_iall_gather(c, send, recv, n, dt, e->cstream, &req) != SHARC_OK ||
        sharc_comm_wait_on(req, e->cstream) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
}

static void q_reduce_scatter(sharc_fsdp *e, sharc_comm *c, const void *send, void *recv, size_t n, sharc_dtype dt) {
    sharc_comm_request *req = NULL;
    if (sharc_comm_ireduce_scatter(c, send, recv, n, dt, SHARC_REDUCE_OP_SUM, e->cstream, &req) != SHARC_OK ||
        sharc_comm_wait_on(req, e->cstream) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
}

static void q_all_reduce(sharc_fsdp *e, sharc_comm *c, void *buf, size_t n, sharc_dtype dt) {
    sharc_comm_request *req = NULL;
    if (sharc_comm_iall_reduce(c, buf, buf, n, dt, SHARC_REDUCE_OP_SUM, e->cstream, &req) != SHARC_OK ||
        sharc_comm_wait_on(req, e->cstream) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
}

/* A unit's gather is queued on the comm stream: its ready event after it;
 * blocking: the compute stream waits for it now, else sharc_fsdp_unit_wait. */
static void gathered_on_comm(sharc_fsdp *e, sharc_fsdp_unit *t, bool blocking) {
    t->ready_seq = sharc_fsdp_coll_mark(e, t->ready);
    if (blocking) sharc_fsdp_coll_wait(e, t->ready, t->ready_seq);
}

/* Note [trace] (src/core/prof.c): while a timeline is traced, each unit's
 * gather, reduction and all-reduce is a span on the comm track, recorded on
 * the comm stream after its wait for the compute stream (else the host clock
 * around the calls); off: one branch. */
static void traced(sharc_fsdp *e, int h, const char *what, const sharc_fsdp_unit *t) {
    if (h >= 0)
        sharc_prof_span_end(h, e->cstream, SHARC_PROF_TRACK_COMM, t->index, "%s unit %d (%s)", what, t->index,
                            t->spec.name);
}

/* The CPU's and note [comm-staging]'s collectives (no comm stream). */
static sharc_status all_gather(sharc_fsdp *e, sharc_comm *c, const void *send, void *recv, size_t n, sharc_dtype dt) {
    if (e->hstage) return staged(e, STAGE_ALL_GATHER, c, send, recv, n, dt);
    return sharc_comm_all_gather(c, send, recv, n, dt);
}

/* A prefetch: the request is left for sharc_fsdp_unit_wait. */
static sharc_status iall_gather(sharc_fsdp *e, sharc_comm *c, const void *send, void *recv, size_t n, sharc_dtype dt,
                                sharc_comm_request **req) {
    return sharc_comm_iall_gather(c, send, recv, n, dt, e->stream, req);
}

static sharc_status reduce_scatter(sharc_fsdp *e, sharc_comm *c, const void *send, void *recv, size_t n,
                                   sharc_dtype dt) {
    if (e->hstage) return staged(e, STAGE_REDUCE_SCATTER, c, send, recv, n, dt);
    return sharc_comm_reduce_scatter(c, send, recv, n, dt, SHARC_REDUCE_OP_SUM);
}

static sharc_status all_reduce(sharc_fsdp *e, sharc_comm *c, void *buf, size_t n, sharc_dtype dt) {
    if (e->hstage) return staged(e, STAGE_ALL_REDUCE, c, buf, buf, n, dt);
    return sharc_comm_all_reduce(c, buf, buf, n, dt, SHARC_REDUCE_OP_SUM);
}

int64_t sharc_fsdp_coll_stage_bytes(const sharc_fsdp *e) {
    int64_t mx = 0;
    for (int u = 0; u < e->nunits; u++) {
        const sharc_fsdp_unit *t = &e->units[u];
        int64_t b = (t->numel_padded + t->numel_shard) * (int64_t)sizeof(float);
        mx = b > mx ? b : mx;
    }
    return mx;
}

/* Note [shard-device]. The engine has two devices: the compute device
 * (e->dev: gathered slots, grad_full slots, staging, the model's
 * activations) and the shard device (e->sdev: the fp32 master shards, the
 * gradient shards, and so the optimizer's moments and its step, the
 * gradient norm's sums, zero_grad, checkpoint and weight IO; the device
 * sharc_fsdp_shard_device returns). They are the same device unless
 * fsdp.cpu_offload is set on a device whose memory is not host memory: then
 * the shard device is the CPU device (FSDP2's CPUOffloadPolicy, DeepSpeed's
 * offload_optimizer + offload_param), and the bytes cross between the two in
 * two places only, the two functions below:
 *   shard to compute device   a gather first copies the unit's shard
 *                             host -> device into e->stage_shard (sized for
 *                             the largest shard), or straight into its slot
 *                             at one process; the gather then reads that;
 *   reduced shard to shard    a reduction's result (e->stage_shard after
 *   device                    the reduce-scatter, or the slot at one process)
 *                             is copied device -> host into a slot of
 *                             e->hreduced, and the CPU's kernel adds it into
 *                             the gradient shard as a host function queued
 *                             behind the copy (note [offload-reduce]).
 * So every unit needs a slot for its gathered parameters and its gradient
 * (the plan's in-place cases are off), and a gather under offload is
 * blocking (the staging buffer serves every unit; a prefetch then gathers at
 * once). The host shards and the landing buffer are page-locked host memory
 * of the compute device (sharc_device_host_alloc, fsdp.c shard_alloc), so
 * the copies run without the driver's staging and a copy back does not make
 * the host wait by itself.
 * Each copy runs on the stream of the collective next to it: with a comm
 * stream (note [comm-stream]) the copy to the compute device, the gather and
 * the reduce-scatter and its copy back are all queued there, so e->stage_shard
 * is used by that one stream in order (a copy queued on the compute stream
 * instead raced the comm stream's reductions into the same buffer).
 * A shard write bracket (param_io.c) first waits for both streams, so no
 * queued host -> device copy reads a shard the optimizer is writing. */
static const float *shard_to_compute(sharc_fsdp *e, sharc_fsdp_unit *t, float *dst, sharc_stream *s) {
    if (!sharc_fsdp_offloaded(e)) return t->param_shard;
    sharc_fsdp_shard_wait_unit(e, t->index); /* note [offload-overlap] (overlap.c): the optimizer's update of t */
    if (sharc_device_copy(e->dev, dst, t->param_shard, (size_t)t->numel_shard * sizeof(float),
                          SHARC_COPY_HOST_TO_DEVICE, s) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
    return dst;
}

/* Note [offload-reduce]. Under offload a reduced shard reaches its host
 * gradient shard without the host waiting: the device -> host copy into a
 * slot of the landing ring (e->hslot, SHARC_FSDP_HREDUCED_SLOTS slots at
 * most, each the largest shard, page-locked) is queued on the reduction's
 * stream, the CPU's accumulate behind it as a host function
 * (sharc_device_host_func: cudaLaunchHostFunc; on the simulator it runs when
 * the stream is drained to it), and an event behind that. A slot is reused
 * only once its accumulate ran: its event polled (sharc_device_event_query),
 * and waited for only when not reached (on a GPU the copy and the addition
 * are long done by then; a ring of 4 makes the simulator's 1-rank, 4-unit
 * step wait once). Everything that reads gradient shards on the host waits for the
 * ring first (sharc_fsdp_coll_reduced_wait): finish_grads, once a step,
 * and the shard accessors. The host function makes no device call and
 * writes only the unit's gradient shard, which nothing else touches until
 * that wait; the optimizer's update of the unit (note [offload-overlap])
 * is done before: the unit's gather in this step's forward waited for it,
 * and a reduction that finds it not done is a broken invariant. */
static void hslot_run(void *arg) {
    sharc_fsdp_hslot *h = arg;
    h->sk->accumulate(h->ss, h->dst, h->buf, h->n);
}

sharc_status sharc_fsdp_hslot_wait(sharc_fsdp_hslot *h) {
    bool done = true;
    SHARC_TRY(sharc_device_event_query(h->ev, &done));
    return done ? SHARC_OK : sharc_device_event_synchronize(h->ev);
}

void sharc_fsdp_coll_reduced_wait(const sharc_fsdp *e) {
    for (int k = 1; k <= e->hslots; k++) { /* the newest first: its wait drains the older on its stream */
        sharc_fsdp_hslot *h = &e->hslot[(e->hnext - k + e->hslots) % e->hslots];
        if (sharc_fsdp_hslot_wait(h) != SHARC_OK) SHARC_FSDP_COMM_FATAL();
    }
}

/* On stream s, where the reduction that wrote `reduced` was queued. */
static void reduced_to_shard(sharc_fsdp *e, sharc_fsdp_unit *t, const float *reduced, sharc_stream *s) {
    if (!sharc_fsdp_offloaded(e)) {
        e->k->accumulate(s, t->grad_shard, reduced, t->numel_shard);
        return;
    }
    if (!sharc_fsdp_shard_unit_done(e, t->index))
        sharc_fatal(__FILE__, __LINE__,
                    "fsdp: unit %d '%s' reduced before the optimizer's queued update of it finished (its gather did "
                    "not wait: note [offload-overlap])",
                    t->index, t->spec.name);
    sharc_fsdp_hslot *h = &e->hslot[e->hnext];
    e->hnext = (e->hnext + 1) % e->hslots;
    if (sharc_fsdp_hslot_wait(h) != SHARC_OK) SHARC_FSDP_COMM_FATAL();
    h->dst = t->grad_shard;
    h->n = t->numel_shard;
    if (sharc_device_copy(e->dev, h->buf, reduced, (size_t)t->numel_shard * sizeof(float), SHARC_COPY_DEVICE_TO_HOST,
                          s) != SHARC_OK ||
        sharc_device_host_func(s, hslot_run, h) != SHARC_OK || sharc_device_event_record(h->ev, s) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
}

static void gather_direct(sharc_fsdp *e, sharc_fsdp_unit *t, bool blocking) { t->param_full = t->param_shard; }

/* Note [shard-device], one process in fp32: the shard is the whole unit, copied into its slot. */
static void gather_copy(sharc_fsdp *e, sharc_fsdp_unit *t, bool blocking) {
    e->stats.gathers++;
    shard_to_compute(e, t, t->param_full, e->stream);
}

static void gather_f32(sharc_fsdp *e, sharc_fsdp_unit *t, bool blocking) {
    e->stats.gathers++;
    size_t n = (size_t)t->numel_shard;
    if (e->cstream) {
        comm_after_compute(e);
        int h = sharc_prof_span_begin(e->cstream);
        const float *src = shard_to_compute(e, t, e->stage_shard, e->cstream);
        q_all_gather(e, e->shard, src, t->param_full, n, SHARC_DT_F32);
        traced(e, h, "all_gather", t);
        gathered_on_comm(e, t, blocking);
        return;
    }
    int h = sharc_prof_span_begin(NULL);
    const float *src = shard_to_compute(e, t, e->stage_shard, e->stream);
    sharc_status st = blocking || e->hstage || sharc_fsdp_offloaded(e)
                          ? all_gather(e, e->shard, src, t->param_full, n, SHARC_DT_F32)
                          : iall_gather(e, e->shard, src, t->param_full, n, SHARC_DT_F32, &t->pending);
    if (st != SHARC_OK) SHARC_FSDP_COMM_FATAL();
    traced(e, h, "all_gather", t);
}

/* Note [gathered16]. A unit whose spec says gathered16 (the model's blocks
 * under bf16 activations, note [bf16-acts] in src/model/model.c) is read by
 * the model as 16-bit values: the products take its matrices in bf16, and
 * the model widens only its norms and biases. Where the gather is 16-bit
 * (param_dtype bf16 or fp16, a slot: never the shared window, which holds
 * fp32 masters) the engine keeps the unit in param_dtype: its slot holds
 * numel_padded 16-bit elements (half the floats, plan.c), the all-gather
 * writes straight into it (one process: the shard is rounded into it), the
 * post-forward slice is a copy of its bytes and backward's gather of the
 * slices lands in it too. sharc_fsdp_gather16 gives the model the view,
 * valid while the unit is gathered, and sharc_fsdp_gather the same address.
 * The values are those of the fp32 path bit for bit: widening a 16-bit value
 * and rounding it back is the identity. */
static uint16_t *full16(const sharc_fsdp_unit *t) { return (uint16_t *)(void *)t->param_full; }

/* 16-bit: the shard is rounded, gathered as 16-bit, widened at once (the
 * staging buffers serve every unit, so off a comm stream even a prefetch
 * completes here);
 * note [gathered16]: or gathered into the slot and left 16-bit. Note
 * [comm-stream]: all three on the comm stream, which alone uses the staging
 * buffers there, so a prefetch overlaps too. */
static void gather_16(sharc_fsdp *e, sharc_fsdp_unit *t, bool blocking) {
    e->stats.gathers++;
    sharc_dtype dt = e->cfg.param_dtype;
    if (e->S == 1) {
        const float *src = shard_to_compute(e, t, e->stage_shard, e->stream);
        if (t->g16) e->k->cast(e->stream, full16(t), dt, src, SHARC_DT_F32, t->numel_shard);
        else e->k->round(e->stream, t->param_full, src, dt, t->numel_shard);
        return;
    }
    if (e->cstream) {
        comm_after_compute(e);
        int h = sharc_prof_span_begin(e->cstream);
        const float *src = shard_to_compute(e, t, e->stage_shard, e->cstream);
        e->k->cast(e->cstream, e->stage16_shard, dt, src, SHARC_DT_F32, t->numel_shard);
        q_all_gather(e, e->shard, e->stage16_shard, t->g16 ? full16(t) : e->stage16_full, (size_t)t->numel_shard, dt);
        if (!t->g16) e->k->cast(e->cstream, t->param_full, SHARC_DT_F32, e->stage16_full, dt, t->numel_padded);
        traced(e, h, "all_gather", t);
        gathered_on_comm(e, t, blocking);
        return;
    }
    int h = sharc_prof_span_begin(NULL);
    const float *src = shard_to_compute(e, t, e->stage_shard, e->stream);
    e->k->cast(e->stream, e->stage16_shard, dt, src, SHARC_DT_F32, t->numel_shard);
    if (all_gather(e, e->shard, e->stage16_shard, t->g16 ? full16(t) : e->stage16_full, (size_t)t->numel_shard, dt) !=
        SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
    if (!t->g16) e->k->cast(e->stream, t->param_full, SHARC_DT_F32, e->stage16_full, dt, t->numel_padded);
    traced(e, h, "all_gather", t);
}

static const sharc_fsdp_gather_i gather_direct_i = {.name = "direct", .slot = false, .start = gather_direct};
static const sharc_fsdp_gather_i gather_f32_i = {.name = "fp32 all-gather", .slot = true, .start = gather_f32};
static const sharc_fsdp_gather_i gather_16_i = {.name = "16-bit all-gather", .slot = true, .start = gather_16};
static const sharc_fsdp_gather_i gather_copy_i = {.name = "copy to device", .slot = true, .start = gather_copy};

/* Note [comm-stream]: the whole reduction on the comm stream, nobody waits
 * (the slot's event, recorded by sharc_fsdp_unit_reduce, and the end of the
 * step's gradients do). */
static void reduce_f32(sharc_fsdp *e, sharc_fsdp_unit *t) {
    if (e->cstream) {
        comm_after_compute(e);
        int h = sharc_prof_span_begin(e->cstream);
        q_reduce_scatter(e, e->shard, t->grad_full, e->stage_shard, (size_t)t->numel_shard, SHARC_DT_F32);
        reduced_to_shard(e, t, e->stage_shard, e->cstream);
        traced(e, h, "reduce_scatter", t);
        return;
    }
    int h = sharc_prof_span_begin(NULL);
    if (reduce_scatter(e, e->shard, t->grad_full, e->stage_shard, (size_t)t->numel_shard, SHARC_DT_F32) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
    reduced_to_shard(e, t, e->stage_shard, e->stream);
    traced(e, h, "reduce_scatter", t);
}

static void reduce_16(sharc_fsdp *e, sharc_fsdp_unit *t) {
    sharc_dtype dt = e->cfg.reduce_dtype;
    if (e->cstream) {
        comm_after_compute(e);
        int h = sharc_prof_span_begin(e->cstream);
        e->k->cast(e->cstream, e->stage16_full, dt, t->grad_full, SHARC_DT_F32, t->numel_padded);
        q_reduce_scatter(e, e->shard, e->stage16_full, e->stage16_shard, (size_t)t->numel_shard, dt);
        e->k->cast(e->cstream, e->stage_shard, SHARC_DT_F32, e->stage16_shard, dt, t->numel_shard);
        reduced_to_shard(e, t, e->stage_shard, e->cstream);
        traced(e, h, "reduce_scatter", t);
        return;
    }
    int h = sharc_prof_span_begin(NULL);
    e->k->cast(e->stream, e->stage16_full, dt, t->grad_full, SHARC_DT_F32, t->numel_padded);
    if (reduce_scatter(e, e->shard, e->stage16_full, e->stage16_shard, (size_t)t->numel_shard, dt) != SHARC_OK)
        SHARC_FSDP_COMM_FATAL();
    e->k->cast(e->stream, e->stage_shard, SHARC_DT_F32, e->stage16_shard, dt, t->numel_shard);
    reduced_to_shard(e, t, e->stage_shard, e->stream);
    traced(e, h, "reduce_scatter", t);
}

/* Note [shard-device], one process: the model accumulated into the slot, which is the whole unit. */
static void reduce_copy(sharc_fsdp *e, sharc_fsdp_unit *t) { reduced_to_shard(e, t, t->grad_full, e->stream); }

/* Note [post-forward] (plan.c): slice shard_rank % N of the gathered unit,
 * in param_dtype (the slot holds values already rounded to it, so the cast
 * is exact; note [gathered16]: the slot's 16-bit slice, copied). */
void sharc_fsdp_coll_keep_post_forward(sharc_fsdp *e, sharc_fsdp_unit *t) {
    const int64_t off = (int64_t)(e->shard_rank % e->post) * t->numel_post;
    const float *src = t->param_full + off;
    if (t->g16) {
        if (sharc_device_copy(e->dev, t->post_shard, full16(t) + off, (size_t)t->numel_post * sizeof(uint16_t),
                              SHARC_COPY_DEVICE_TO_DEVICE, e->stream) != SHARC_OK)
            SHARC_FSDP_COMM_FATAL();
    } else if (e->cfg.param_dtype == SHARC_DT_F32) {
        if (sharc_device_copy(e->dev, t->post_shard, src, (size_t)t->numel_post * sizeof(float),
                              SHARC_COPY_DEVICE_TO_DEVICE, e->stream) != SHARC_OK)
            SHARC_FSDP_COMM_FATAL();
    } else {
        e->k->cast(e->stream, t->post_shard, e->cfg.param_dtype, src, SHARC_DT_F32, t->numel_post);
    }
}

/* The group of N holds the whole unit, rank j of it slice j: an all-gather
 * inside it rebuilds the padded unit (on a comm stream all of it queued
 * there, note [comm-stream]; else fp32: non-blocking for prefetch;
 * 16-bit: through the staging buffer, widened at once as gather_16 does, or
 * straight into a 16-bit slot: note [gathered16]). */
static void gather_post_forward(sharc_fsdp *e, sharc_fsdp_unit *t, bool blocking) {
    e->stats.gathers++;
    size_t n = (size_t)t->numel_post;
    sharc_dtype dt = e->cfg.param_dtype;
    sharc_status st;
    if (e->cstream) { /* note [comm-stream] */
        comm_after_compute(e);
        int h = sharc_prof_span_begin(e->cstream);
        void *dst = dt == SHARC_DT_F32 ? (void *)t->param_full : t->g16 ? (void *)full16(t) : (void *)e->stage16_full;
        q_all_gather(e, e->post_comm, t->post_shard, dst, n, dt);
        if (dt != SHARC_DT_F32 && !t->g16)
            e->k->cast(e->cstream, t->param_full, SHARC_DT_F32, e->stage16_full, dt, t->numel_padded);
        traced(e, h, "all_gather", t);
        gathered_on_comm(e, t, blocking);
        return;
    }
    int h = sharc_prof_span_begin(NULL);
    if (dt == SHARC_DT_F32) {
        st = blocking || e->hstage ? all_gather(e, e->post_comm, t->post_shard, t->param_full, n, dt)
                                   : iall_gather(e, e->post_comm, t->post_shard, t->param_full, n, dt, &t->pending);
    } else if (t->g16) {
        st = all_gather(e, e->post_comm, t->post_shard, full16(t), n, dt);
    } else {
        st = all_gather(e, e->post_comm, t->post_shard, e->stage16_full, n, dt);
        if (st == SHARC_OK) e->k->cast(e->stream, t->param_full, SHARC_DT_F32, e->stage16_full, dt, t->numel_padded);
    }
    if (st != SHARC_OK) SHARC_FSDP_COMM_FATAL();
    traced(e, h, "all_gather", t);
}

const sharc_fsdp_gather_i sharc_fsdp_gather_post_forward = {
    .name = "post-forward all-gather", .slot = true, .start = gather_post_forward};

static const sharc_fsdp_reduce_i reduce_direct_i = {.name = "direct", .slot = false, .reduce = NULL};
static const sharc_fsdp_reduce_i reduce_f32_i = {.name = "fp32 reduce-scatter", .slot = true, .reduce = reduce_f32};
static const sharc_fsdp_reduce_i reduce_16_i = {.name = "16-bit reduce-scatter", .slot = true, .reduce = reduce_16};
static const sharc_fsdp_reduce_i reduce_copy_i = {.name = "copy to shard device", .slot = true, .reduce = reduce_copy};

void sharc_fsdp_coll_choose(sharc_fsdp *e) {
    if (e->pglobal) e->gather = &sharc_fsdp_gather_shared;
    else if (e->S == 1 && e->cfg.param_dtype == SHARC_DT_F32)
        e->gather = sharc_fsdp_offloaded(e) ? &gather_copy_i : &gather_direct_i;
    else if (e->cfg.param_dtype == SHARC_DT_F32) e->gather = &gather_f32_i;
    else e->gather = &gather_16_i;
    if (e->S == 1) e->reduce = sharc_fsdp_offloaded(e) ? &reduce_copy_i : &reduce_direct_i;
    else if (e->gshm) e->reduce = &sharc_fsdp_reduce_shared;
    else if (e->cfg.reduce_dtype == SHARC_DT_F32) e->reduce = &reduce_f32_i;
    else e->reduce = &reduce_16_i;
}

/* Note [offload-replicas]. Under offload (note [shard-device]) with
 * replicas (NO_SHARD, HYBRID_SHARD) the gradient shards the replicas
 * all-reduce are host memory: after the landing ring's accumulates
 * (sharc_fsdp_coll_reduced_wait, which finish_grads would do next anyway),
 * each trainable unit's shard is all-reduced over the replicate group on
 * the host, blocking, as the CPU device does: fp32 in place, or cast to
 * reduce_dtype by the CPU's kernel into the landing ring's first slot (every
 * slot is idle after that wait, and a slot holds the largest shard in fp32,
 * twice the 16-bit bytes), summed by the backend and widened back. A group
 * that takes device memory (NCCL) runs a collective on host buffers on its
 * host group (MPI), so no byte is staged through the device: the same
 * algorithm and bits as the CPU run of the strategy on the same gradients.
 * The host waits here once a step; on a GPU the all-reduce then does not
 * overlap the backward (it did not under the CPU's blocking calls either). */
static sharc_status all_reduce_replicas_host(sharc_fsdp *e) {
    const sharc_dtype dt = e->cfg.reduce_dtype;
    sharc_fsdp_coll_reduced_wait(e);
    for (int u = 0; u < e->nunits; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        const int64_t n = t->numel_shard;
        if (!t->trainable) continue; /* note [frozen-params] */
        int h = sharc_prof_span_begin(NULL);
        if (dt == SHARC_DT_F32) {
            SHARC_TRY(
                sharc_comm_all_reduce(e->replicate, t->grad_shard, t->grad_shard, (size_t)n, dt, SHARC_REDUCE_OP_SUM));
        } else {
            void *w = e->hreduced;
            SHARC_CHECK(w != NULL);
            e->sk->cast(e->sstream, w, dt, t->grad_shard, SHARC_DT_F32, n);
            SHARC_TRY(sharc_comm_all_reduce(e->replicate, w, w, (size_t)n, dt, SHARC_REDUCE_OP_SUM));
            e->sk->cast(e->sstream, t->grad_shard, SHARC_DT_F32, w, dt, n);
        }
        if (h >= 0)
            sharc_prof_span_end(h, NULL, SHARC_PROF_TRACK_COMM, t->index, "all_reduce unit %d (%s, host)", t->index,
                                t->spec.name);
    }
    return SHARC_OK;
}

sharc_status sharc_fsdp_coll_all_reduce_replicas(sharc_fsdp *e) {
    double t0 = sharc_clock_now();
    sharc_dtype dt = e->cfg.reduce_dtype;
    if (sharc_fsdp_offloaded(e)) { /* note [offload-replicas] */
        sharc_status st = all_reduce_replicas_host(e);
        e->stats.wait_s += sharc_clock_now() - t0;
        return st;
    }
    if (e->cstream) comm_after_compute(e); /* S = 1: the model wrote the grad shards */
    for (int u = 0; u < e->nunits; u++) {
        sharc_fsdp_unit *t = &e->units[u];
        int64_t n = t->numel_shard;
        if (!t->trainable) continue; /* note [frozen-params] */
        int h = sharc_prof_span_begin(e->cstream);
        if (e->cstream) { /* note [comm-stream]: finish_grads waits once, after all of them */
            if (dt != SHARC_DT_F32) e->k->cast(e->cstream, e->stage16_shard, dt, t->grad_shard, SHARC_DT_F32, n);
            q_all_reduce(e, e->replicate, dt == SHARC_DT_F32 ? (void *)t->grad_shard : e->stage16_shard, (size_t)n, dt);
            if (dt != SHARC_DT_F32) e->k->cast(e->cstream, t->grad_shard, SHARC_DT_F32, e->stage16_shard, dt, n);
            traced(e, h, "all_reduce", t);
            continue;
        }
        if (dt == SHARC_DT_F32) {
            SHARC_TRY(all_reduce(e, e->replicate, t->grad_shard, (size_t)n, SHARC_DT_F32));
        } else {
            /* 16-bit on the wire, summed in fp32 by the backend */
            e->k->cast(e->stream, e->stage16_shard, dt, t->grad_shard, SHARC_DT_F32, n);
            SHARC_TRY(all_reduce(e, e->replicate, e->stage16_shard, (size_t)n, dt));
            e->k->cast(e->stream, t->grad_shard, SHARC_DT_F32, e->stage16_shard, dt, n);
        }
        traced(e, h, "all_reduce", t);
    }
    e->stats.wait_s += sharc_clock_now() - t0;
    return SHARC_OK;
}

sharc_status sharc_fsdp_gather_master(sharc_fsdp *e, int u, float *dst) {
    sharc_fsdp_unit *t = sharc_fsdp_unit_at(e, u);
    SHARC_TRY(sharc_fsdp_shard_sync(e)); /* note [offload-overlap] (overlap.c) */
    if (e->S == 1 || e->pglobal) {
        sharc_fsdp_shm_sync_params(e);
        SHARC_TRY(sharc_device_copy(e->sdev, dst, e->pglobal ? e->pglobal + t->global_off : t->param_shard,
                                    (size_t)t->numel_padded * sizeof(float), SHARC_COPY_DEVICE_TO_HOST, e->sstream));
        return sharc_device_synchronize(e->sstream);
    }
    /* host shards (the CPU device, note [shard-device]): MPI's path, and NCCL's host path */
    if (sharc_device_is_host(e->sdev))
        return sharc_comm_all_gather(e->shard, t->param_shard, dst, (size_t)t->numel_shard, SHARC_DT_F32);
    if (!e->hstage) {
        /* a group that takes device memory (NCCL) is given host buffers on
         * both sides (its host path): dst is host memory, and a collective
         * may not mix the two */
        size_t bytes = (size_t)t->numel_shard * sizeof(float);
        float *h = sharc_alloc(bytes ? bytes : 1, SHARC_MEM_COMM);
        if (!h) return sharc_error(SHARC_ERR_NOMEM, "gather for saving: %zu bytes of host memory", bytes);
        sharc_status st = sharc_device_copy(e->dev, h, t->param_shard, bytes, SHARC_COPY_DEVICE_TO_HOST, e->stream);
        if (st == SHARC_OK) st = sharc_device_synchronize(e->stream);
        if (st == SHARC_OK) st = sharc_comm_all_gather(e->shard, h, dst, (size_t)t->numel_shard, SHARC_DT_F32);
        sharc_free(h);
        return st;
    }
    /* note [comm-staging]: dst is host memory already */
    SHARC_TRY(sharc_device_copy(e->dev, e->hstage, t->param_shard, (size_t)t->numel_shard * sizeof(float),
                                SHARC_COPY_DEVICE_TO_HOST, e->stream));
    SHARC_TRY(sharc_device_synchronize(e->stream));
    return sharc_comm_all_gather(e->shard, e->hstage, dst, (size_t)t->numel_shard, SHARC_DT_F32);
}
