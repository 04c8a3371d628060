/* step.c: sharc_train_step_run, the training step after its batch is
 * assembled: the one copy of it that the trainer, the PyTorch parity test
 * and bench/step run (sharc/train.h).
 *
 * Note [loss-normalization]. global_tokens: every target weighs 1 / (valid
 * targets of the whole step, all ranks), so any split into ranks and
 * micro-batches gives the same loss and gradient. micro_batch: each
 * micro-batch's own mean, averaged over the A x R micro-batches of the step
 * (R: the data streams; OpenRLHF's older rule; a micro-batch without
 * targets adds 0). The tp ranks of a group see the same tokens, so the
 * all-reduced count is divided by tp (note [tp]); the sp ranks of a group
 * hold disjoint slices of the same sequences, so their counts add up.
 *
 * The loss sums stay on the device across micro-batches and come back
 * with the gradient norm's squared sums in one read at the step's end
 * (note [loss-on-device] in src/model/model.c): one host wait a step.
 *
 * The step has one fault site (sharc/fault.h): "grads" once the gradients
 * are finished (non-finite gradients on one rank, for note [bad-steps] in
 * trainer.c). */
#include "sharc/activity.h"
#include "sharc/device.h"
#include "sharc/clock.h"
#include "sharc/fault.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/prof.h"
#include "sharc/train.h"

#include <math.h>
#include <string.h>

/* The fault SHARC_FAULT_NAN: this rank's first gradient element is NaN, so
 * the all-reduced norm is (note [bad-steps]). */
static sharc_status poison_grads(sharc_fsdp *e) {
    static const float nan = NAN;
    sharc_device *d = sharc_fsdp_shard_device(e);
    for (int u = 0; u < sharc_fsdp_num_units(e); u++)
        if (sharc_fsdp_shard_numel(e, u) > 0 && sharc_fsdp_shard_grads(e, u)) { /* frozen units have none */
            SHARC_TRY(
                sharc_device_copy(d, sharc_fsdp_shard_grads(e, u), &nan, sizeof nan, SHARC_COPY_HOST_TO_DEVICE, NULL));
            return sharc_device_synchronize(sharc_device_stream(d));
        }
    return SHARC_OK;
}

sharc_status sharc_train_step_run(const sharc_train_step_ctx *x, const sharc_train_batch *b, int64_t step,
                                  sharc_train_step_result *out) {
    const int A = b->grad_accum, tp = x->tp > 0 ? x->tp : 1, dp = x->data_streams > 0 ? x->data_streams : 1;
    const int64_t mb = b->micro_tokens;
    const bool per_micro = x->loss_normalization == 1;
    memset(out, 0, sizeof *out);
    int64_t valid = 0;
    for (int64_t i = 0; i < (int64_t)A * mb; i++) valid += b->targets[i] >= 0;
    const int64_t local_valid = valid;
    sharc_activity_phase("counting the batch's targets", -1, NULL);
    if (x->world) SHARC_TRY(sharc_comm_all_reduce(x->world, &valid, &valid, 1, SHARC_DT_I64, SHARC_REDUCE_OP_SUM));
    valid /= tp;
    float scale = valid > 0 ? 1.0f / (float)valid : 0.0f;
    double t0 = sharc_clock_now();
    SHARC_PROF("step.zero_grad", sharc_fsdp_zero_grad(x->engine));
    SHARC_TRY(sharc_model_sums_zero(x->model)); /* note [loss-on-device] */
    double t1 = sharc_clock_now();
    for (int m = 0; m < A; m++) {
        sharc_fsdp_begin_microbatch(x->engine, m == A - 1);
        if (per_micro) {
            int64_t mv = 0;
            if (b->micro_valid) mv = b->micro_valid[m];
            else
                for (int64_t i = 0; i < mb; i++) mv += b->targets[m * mb + i] >= 0;
            scale = mv > 0 ? 1.0f / ((float)mv * (float)A * (float)dp) : 0.0f;
        }
        /* note [packing]: the whole sequences' positions (every sp rank needs them for the mask) */
        if (b->positions) SHARC_TRY(sharc_model_set_positions(x->model, b->positions + m * b->positions_stride));
        /* note [device-batch]: the micro-batch in the model's device memory */
        const int32_t *in, *tg;
        SHARC_TRY(sharc_model_stage_batch(x->model, b->inputs + m * mb, b->targets + m * mb, mb, &in, &tg));
        /* on the device: loss_sum += per_micro ? l * scale : l (l * 1.0 is l), local_loss_sum += l */
        sharc_model_forward_backward_add(x->model, x->engine, in, tg, scale, per_micro ? (double)scale : 1.0);
    }
    if (b->positions) SHARC_TRY(sharc_model_set_positions(x->model, NULL)); /* evaluation: unpacked rows */
    SHARC_TRY(sharc_fsdp_finish_grads(x->engine));
    if (sharc_fault_at("grads", step + 1) == SHARC_FAULT_NAN) SHARC_TRY(poison_grads(x->engine));
    double t2 = sharc_clock_now(), norm;
    sharc_activity_phase("gradient norm", -1, NULL);
    sharc_status st = SHARC_OK;
    /* note [loss-on-device]: the step's one host wait reads the loss sums and the norm's squared sums */
    double sums[SHARC_MODEL_SUMS];
    SHARC_PROF("step.grad_norm", st = sharc_fsdp_grad_sumsq_queue(x->engine, sharc_model_sums(x->model) + 2));
    SHARC_TRY(st);
    SHARC_PROF("step.grad_norm", SHARC_PROF_HOST("loss read", st = sharc_model_sums_read(x->model, sums)));
    SHARC_TRY(st);
    double loss_sum = sums[0], local_loss_sum = sums[1];
    SHARC_PROF("step.grad_norm", SHARC_PROF_HOST("grad norm all-reduce", st = sharc_fsdp_grad_norm_reduce(
                                                                             x->engine, sums + 2, &norm, &loss_sum)));
    SHARC_TRY(st);
    loss_sum /= tp; /* every tp rank of a group returned the group's loss */
    double t3 = sharc_clock_now();
    float lr = sharc_lr_at(x->optim, step, x->max_steps);
    /* note [bad-steps]: norm and loss_sum are all-reduced, so every rank decides alike */
    bool bad = !isfinite(norm) || !isfinite(loss_sum);
    sharc_activity_phase("optimizer", -1, NULL);
    if (!bad) {
        SHARC_PROF("step.adamw", SHARC_PROF_HOST("optimizer", st = sharc_adamw_step(x->opt, x->engine, lr,
                                                                                    sharc_clip_coef(x->optim, norm))));
        SHARC_TRY(st);
    }
    double t4 = sharc_clock_now();
    out->loss = per_micro ? loss_sum : valid > 0 ? loss_sum / (double)valid : 0.0;
    out->lr = lr;
    out->grad_norm = norm;
    out->valid_tokens = valid;
    out->skipped = bad;
    out->local_loss = local_valid > 0 ? local_loss_sum / (double)local_valid : NAN;
    out->zero_grad_s = t1 - t0;
    out->forward_backward_s = t2 - t1;
    out->clip_s = t3 - t2;
    out->optimizer_s = t4 - t2;
    return SHARC_OK;
}
