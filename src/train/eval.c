/* eval.c: sharc/eval.h: validation loss over the ranks (note [eval-windows])
 * and the `sharc eval` driver. */
#include "sharc/eval.h"
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "sharc/mesh.h"
#include "sharc/source.h"
#include "sharc/dataprep.h"
#include "sharc/weights.h"
#include "sharc/clock.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

sharc_status sharc_eval_dataset(sharc_model *m, sharc_fsdp *e, sharc_comm *world, const sharc_eval_mesh *mesh,
                                const sharc_dataset *d, int B, int T, int64_t max_batches, sharc_eval_result *out) {
    memset(out, 0, sizeof *out);
    /* note [eval-windows]: the streams are the mesh's data-parallel groups */
    const sharc_eval_mesh own = {sharc_comm_size(world), sharc_comm_rank(world), 1, 0, 1};
    if (!mesh) mesh = &own;
    const int R = mesh->streams, r = mesh->stream, sp = mesh->sp, tp = mesh->tp;
    const int Tl = T / sp; /* this rank's columns of a row */
    const double t0 = sharc_clock_now();
    const int64_t W = sharc_dataset_num_items(d, T); /* windows, or SFT samples */
    int64_t nb = (W + B - 1) / B;
    if (max_batches > 0 && nb > max_batches) nb = max_batches;
    const int64_t nwin = nb * B < W ? nb * B : W;
    const int64_t rounds = (nb + R - 1) / R;
    const int64_t N = (int64_t)B * T, Nl = (int64_t)B * Tl;
    int32_t *in = sharc_alloc(sizeof(int32_t) * (size_t)N, SHARC_MEM_OTHER);
    int32_t *tg = sharc_alloc(sizeof(int32_t) * (size_t)N, SHARC_MEM_OTHER);
    int32_t *lin = sp > 1 ? sharc_alloc(sizeof(int32_t) * (size_t)Nl, SHARC_MEM_OTHER) : in;
    int32_t *ltg = sp > 1 ? sharc_alloc(sizeof(int32_t) * (size_t)Nl, SHARC_MEM_OTHER) : tg;
    /* a local allocation failure must not leave the other ranks in a gather */
    sharc_status st = !in || !tg || !lin || !ltg
                          ? sharc_error(SHARC_ERR_NOMEM, "eval: cannot allocate a batch of %d x %d tokens", B, T)
                          : SHARC_OK;
    st = sharc_comm_agree(world, st, SHARC_ERR_NOMEM, "eval: rank %d cannot allocate its batch (see its message)");
    double sums[2] = {0.0, 0.0}; /* loss sum, targets */
    for (int64_t i = 0; i < rounds && st == SHARC_OK; i++) {
        int64_t b = i * R + r;
        for (int row = 0; row < B; row++) {
            int64_t k = b * B + row;
            int32_t *x = in + (int64_t)row * T, *y = tg + (int64_t)row * T;
            if (b < nb && k < nwin) {
                sharc_dataset_item(d, k, T, x, y);
            } else { /* padding: masked targets, a valid token as input */
                for (int j = 0; j < T; j++) {
                    x[j] = 0;
                    y[j] = -1;
                }
            }
            if (sp > 1) { /* the row's slice, targets shifted before the split (as in training) */
                memcpy(lin + (int64_t)row * Tl, x + (int64_t)mesh->sp_rank * Tl, sizeof(int32_t) * (size_t)Tl);
                memcpy(ltg + (int64_t)row * Tl, y + (int64_t)mesh->sp_rank * Tl, sizeof(int32_t) * (size_t)Tl);
            }
        }
        for (int64_t j = 0; j < Nl; j++) sums[1] += ltg[j] >= 0;
        const int32_t *din, *dtg; /* note [device-batch] */
        if ((st = sharc_model_stage_batch(m, lin, ltg, Nl, &din, &dtg)) != SHARC_OK) break;
        sums[0] += sharc_model_forward_loss(m, e, din, dtg);
    }
    if (sp > 1) {
        sharc_free(lin);
        sharc_free(ltg);
    }
    sharc_free(in);
    sharc_free(tg);
    if (st != SHARC_OK) return st;
    SHARC_TRY(sharc_comm_all_reduce(world, sums, sums, 2, SHARC_DT_F64, SHARC_REDUCE_OP_SUM));
    /* every tp rank of a group returned its group's loss over the same targets */
    out->loss_sum = sums[0] / tp;
    out->targets = (int64_t)(sums[1] / tp);
    out->windows = nwin;
    out->batches = nb;
    out->loss = out->targets > 0 ? out->loss_sum / (double)out->targets : NAN;
    out->perplexity = exp(out->loss);
    out->seconds = sharc_clock_now() - t0;
    return SHARC_OK;
}

/* Note [agreement] (trainer.c): every rank gets the same verdict. */
static sharc_status agree(sharc_comm *world, sharc_status local) {
    return sharc_comm_agree(world, local, SHARC_ERR_COMM, "eval: rank %d failed (see its message)");
}

sharc_status sharc_eval_checkpoint(const sharc_eval_options *o, sharc_comm *world, sharc_eval_result *out) {
    sharc_source src;
    const int R = sharc_comm_size(world);
    sharc_config c;
    sharc_config_default(&c);
    sharc_model *m = NULL;
    sharc_fsdp *e = NULL;
    sharc_dataset *d = NULL;
    sharc_mesh mesh;
    bool mesh_ok = false;
    /* local part: nothing here calls a collective */
    /* a Hugging Face directory, a weights file, a run directory, or a checkpoint (sharc/source.h) */
    sharc_status st = sharc_source_resolve(o->weights, &src, &c);
    int B = o->batch_size > 0 ? o->batch_size : c.train.batch_size;
    int T = o->seq_len > 0 ? o->seq_len : c.train.seq_len;
    if (st == SHARC_OK && c.model.family == SHARC_FAMILY_GPT2 && T > c.model.max_seq_len)
        st = sharc_error(SHARC_ERR_INVALID, "eval: --seq_len %d exceeds the model's max_seq_len %d", T,
                         c.model.max_seq_len);
    if (st == SHARC_OK) st = sharc_blas_init(o->threads);
    if (st == SHARC_OK) st = sharc_model_init(&m, &c.model, NULL);
    if (st == SHARC_OK) st = sharc_model_plan(m, B, T, false);
    /* the run's tokenizer and data keys (sharc/dataprep.h): text and JSONL are tokenized as training did */
    sharc_tokenizer *tok = NULL;
    if (st == SHARC_OK) st = sharc_dataprep_tokenizer(&c, &tok);
    if (st == SHARC_OK) {
        c.data.format = o->format;
        if (c.data.max_len > T + 1) c.data.max_len = T + 1;
        c.train.seq_len = T;
        st = sharc_dataprep_open(&c, tok, o->data_path, sharc_threads_get(), false, &d);
    }
    sharc_tokenizer_free(tok);
    if (st == SHARC_OK && sharc_dataset_num_items(d, T) < 1)
        st = sharc_error(SHARC_ERR_INVALID, "eval: '%s' has %lld tokens, fewer than one window of %d + 1", o->data_path,
                         (long long)sharc_dataset_num_tokens(d), T);
    if (st == SHARC_OK && sharc_dataset_longest_sample(d) > T + 1)
        st = sharc_error(SHARC_ERR_INVALID, "eval: '%s' has a sample of %lld tokens, more than --seq_len + 1 = %d",
                         o->data_path, (long long)sharc_dataset_longest_sample(d), T + 1);
    /* collective part */
    bool agreed = true; /* a failure every rank returns (else note [job-end] in src/cli/main.c) */
    if ((st = agree(world, st)) != SHARC_OK) goto done;
    agreed = false;
    if ((st = sharc_mesh_init(&mesh, world, R)) != SHARC_OK) goto done;
    mesh_ok = true;
    agreed = true;
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    fc.strategy = SHARC_SHARDING_FULL_SHARD;
    st = sharc_fsdp_init(&e, sharc_model_units(m), sharc_model_num_units(m), sharc_model_schedule(m), &fc, &mesh,
                         sharc_model_device(m));
    if ((st = agree(world, st)) != SHARC_OK) goto done;
    st = sharc_source_load(&src, e);
    if ((st = agree(world, st)) != SHARC_OK) goto done;
    st = sharc_eval_dataset(m, e, world, NULL, d, B, T, o->max_batches, out); /* no mesh: every rank a stream */
    agreed = st == SHARC_OK;
done:
    /* a rank that failed alone must not free what its peers still wait on */
    if (!agreed && !sharc_comm_world_settle(10.0)) return st;
    sharc_fsdp_free(e);
    if (mesh_ok) sharc_mesh_free(&mesh);
    sharc_dataset_free(d);
    sharc_model_free(m);
    return st;
}
