/* trainer.c: sharc_trainer_* and sharc_train_run: the training loop over a
 * world of ranks, its agreement checks, log lines and metrics file.
 *
 * Note [agreement]. Starting is split in two: everything that can fail on
 * one rank alone (config, data file, allocations) runs first without any
 * collective; then all ranks all-reduce their status, so a rank that failed
 * makes every rank stop with a message instead of leaving them blocked in a
 * collective it never reaches. Then a fingerprint of every value that must
 * match (the keys the config table marks `agree`: model shape, sharding,
 * batch, seeds, paths written; and the data files' token counts) is
 * all-gathered and compared; a difference is one message naming the key
 * and two ranks' values.
 *
 * Note [bad-steps]. The loss and the gradient norm are all-reduced values,
 * so every rank sees the same ones: when either is not finite, every rank
 * skips the step alike (no AdamW update, AdamW's step counter not advanced;
 * the data and the learning-rate schedule move on) and counts it. After
 * train.max_bad_steps such steps in a row the run stops with a message and
 * a non-zero exit.
 *
 * sharc_trainer_step draws the step's batch from the sampler, runs it
 * through sharc_train_step_run (src/train/step.c: the loss scale, the
 * norm, AdamW and this rule live there) and adds the telemetry. It has the
 * fault site "step" at its start (a hang, a lone failure, a fatal error);
 * step.c has "grads" (non-finite gradients on one rank, for this note). */
#include "sharc/train.h"
#include "sharc/activity.h"
#include "sharc/flight.h"
#include "sharc/alloc.h"
#include "sharc/blas.h"
#include "sharc/ckpt.h"
#include "sharc/data.h"
#include "sharc/dataprep.h"
#include "sharc/eval.h"
#include "sharc/fault.h"
#include "sharc/fileio.h"
#include "sharc/hf.h"
#include "sharc/kernels.h"
#include "sharc/launch.h"
#include "sharc/log.h"
#include "sharc/memplan.h"
#include "sharc/mesh.h"
#include "sharc/optim.h"
#include "sharc/prof.h"
#include "sharc/telemetry.h"
#include "sharc/weights.h"
#include "sharc/clock.h"
#include "run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sharc_trainer {
    sharc_config cfg;
    sharc_comm *world; /* borrowed, or owned self */
    bool owns_world;
    sharc_mesh mesh;
    bool mesh_ok;
    sharc_model *model;
    sharc_fsdp *engine;
    sharc_adamw *opt;
    sharc_dataset *data;
    sharc_sampler *sampler;
    int32_t *inputs, *targets; /* (grad_accum, B, T / sp): this rank's tokens of the step's micro-batches */
    int32_t *seq_in, *seq_tg;  /* (B, T): one micro-batch's whole sequences, before the sp split */
    int32_t *seq_pos;          /* (A, B, T) data.packing: every micro-batch's token positions (note [packing]) */
    sharc_mesh_dims dims;      /* the mesh's degrees (sharc/mesh.h) */
    int dp_rank, sp_rank;      /* this rank's data stream and place in its sequence-parallel group */
    int64_t *micro_valid;      /* (grad_accum) valid targets per micro-batch of this data stream (whole sequences) */
    int64_t step;
    double flops_per_token;
    sharc_dataset *val;      /* data.val_path when log.eval_every > 0 */
    double peak_flops_world; /* sum over ranks of each rank's peak (telemetry.h) */
    double peak_flops_rank;  /* this rank's: the profile's matmul ceiling (sharc/prof.h) */
    char peak_how[160];      /* where this rank's peak came from, for the banner */
    bool bf16;               /* the model's matrix products run in bf16 (sharc_model_computes_bf16) */
};

/* train.threads = 0: the CPUs this rank may use; when that is the whole node
 * (no binding), the node's CPUs divided by the ranks on it. Collective. */
static int default_threads(sharc_comm *world) {
    if (getenv("OMP_NUM_THREADS")) return 0; /* the user's choice, as sharc_blas_init reads it */
    int local = 1;
    sharc_comm *node = NULL;
    if (sharc_comm_split_node(world, &node) == SHARC_OK && node) {
        local = sharc_comm_size(node);
        sharc_comm_free(node);
    }
    int cpus = sharc_cpus_available();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (local > 1 && online > 0 && cpus >= online) cpus /= local;
    return cpus > 1 ? cpus : 1;
}

/* ---------------------------------------------------------- fingerprint */

/* Both ranks' values of a string item: rank 0's and rank r's, broadcast. */
static sharc_status disagree_text(sharc_comm *world, const sharc_config_agreed *it, int r) {
    int32_t a[SHARC_PATH_MAX / 4 + 1], b[SHARC_PATH_MAX / 4 + 1];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    snprintf((char *)a, SHARC_PATH_MAX, "%s", it->text);
    snprintf((char *)b, SHARC_PATH_MAX, "%s", it->text);
    SHARC_TRY(sharc_comm_broadcast(world, a, SHARC_PATH_MAX / 4, SHARC_DT_I32, 0));
    SHARC_TRY(sharc_comm_broadcast(world, b, SHARC_PATH_MAX / 4, SHARC_DT_I32, r));
    char ca[SHARC_CLIP_BUF], cb[SHARC_CLIP_BUF];
    return sharc_error(SHARC_ERR_INVALID,
                       "train: ranks disagree on %s: rank 0 has '%s', rank %d has '%s'; every rank must run the same "
                       "configuration",
                       it->key, sharc_clip(ca, (const char *)a), r, sharc_clip(cb, (const char *)b));
}

/* All ranks compare their fingerprints; every rank returns the same verdict. */
static sharc_status check_agreement(sharc_comm *world, const sharc_config *c, int64_t ntokens, int64_t val_tokens) {
    /* the keys the table marks, then what the data files hold (their paths may differ between nodes), and
     * the engine's offload, which optim.offload_dir (a key each rank may set its own way) implies on a device */
    int n = sharc_config_agreed_values(c, NULL, 0) + 3, size = sharc_comm_size(world);
    sharc_config_agreed *it = malloc(sizeof *it * (size_t)n);
    int64_t *mine = malloc(sizeof(int64_t) * (size_t)n), *all = malloc(sizeof(int64_t) * (size_t)n * (size_t)size);
    if (!it || !mine || !all) {
        free(it);
        free(mine);
        free(all);
        return sharc_error(SHARC_ERR_NOMEM, "train: out of memory");
    }
    sharc_config_agreed_values(c, it, n - 3);
    it[n - 3] = (sharc_config_agreed){"data.path (token count)", ntokens, NULL};
    it[n - 2] = (sharc_config_agreed){"data.val_path (token count)", val_tokens, NULL};
    it[n - 1] = (sharc_config_agreed){"fsdp.cpu_offload (or optim.offload_dir, which implies it on a device)",
                                      c->fsdp.engine.cpu_offload, NULL};
    for (int i = 0; i < n; i++) mine[i] = it[i].value;
    sharc_status st = sharc_comm_all_gather(world, mine, all, (size_t)n, SHARC_DT_I64);
    /* every rank sees the same table, so every rank names the same item */
    for (int r = 1; r < size && st == SHARC_OK; r++)
        for (int i = 0; i < n; i++)
            if (all[(size_t)r * n + i] != all[i]) {
                if (it[i].text) st = disagree_text(world, &it[i], r);
                else
                    st = sharc_error(SHARC_ERR_INVALID,
                                     "train: ranks disagree on %s: rank 0 has %lld, rank %d has %lld; every rank must "
                                     "run the same configuration",
                                     it[i].key, (long long)all[i], r, (long long)all[(size_t)r * n + i]);
                break;
            }
    free(it);
    free(mine);
    free(all);
    return st;
}

/* Note [agreement] (trainer.c): every rank gets the same verdict. */
static sharc_status agree(sharc_comm *world, sharc_status local) {
    return sharc_comm_agree(world, local, SHARC_ERR_COMM, "train: rank %d failed to start (see its message)");
}

/* Forget the collectives counted so far on every group (telemetry's own
 * all-gathers and evaluation are not part of a step's traffic). */
static void reset_comm_stats(sharc_trainer *t) {
    sharc_comm *groups[6] = {t->world,
                             t->mesh_ok ? t->mesh.shard : NULL,
                             t->mesh_ok ? t->mesh.replicate : NULL,
                             t->mesh_ok ? t->mesh.sp_group : NULL,
                             t->mesh_ok ? t->mesh.tp_group : NULL,
                             t->engine ? sharc_fsdp_post_forward_comm(t->engine) : NULL};
    for (int g = 0; g < 6; g++)
        if (groups[g]) sharc_comm_stats_reset(groups[g]);
}

/* How long the ranks of a failure that may be one rank's alone get to show
 * they failed too (note [job-end] in src/cli/main.c). */
#define SETTLE_S 10.0

/* ------------------------------------------------------------------ init */

/* train.device: the device the model, the engine and the optimizer run on.
 * Opening "cuda" says what is missing on a machine that cannot run it (not
 * built, no driver, no GPU, no cuBLASLt); this is bad input (exit status 2).
 *
 * Note [cuda-train]: what trains on a device whose memory is not host
 * memory (CUDA). The model, the engine and AdamW get the device: parameter
 * shards, gradients, moments, gathered units and activations live there
 * (with fsdp.cpu_offload the shards, gradients and moments live in host
 * memory and AdamW runs on the CPU: note [shard-device] in
 * src/fsdp/collectives.c), and every element loop is a kernel of its table. Batches are checked and
 * copied in per micro-batch (note [device-batch] in src/model/model.c);
 * the loss sums and the gradient norm's squared sums stay on the device
 * until the step's one read (note [loss-on-device] in src/model/model.c);
 * every host read
 * or write of shard bytes (weights and checkpoint save and load, HF import
 * and export, fault hooks) is an explicit copy (note [shard-host-io] in
 * src/fsdp/param_io.c). Between ranks the engine's collectives stage
 * device buffers through host ones for a group that reads host memory only
 * (sharc_comm_takes_device; note [comm-staging] in src/fsdp/collectives.c).
 * Telemetry reads the device's memory accounts and its peak (note
 * [cuda-peak] in src/device/cuda/cuda.cu). Also run on cuda, each checked
 * against the CPU on the simulator: Qwen3-MoE (model.num_experts, with
 * fsdp.moe_experts and the router's auxiliary loss; moe.c copies the routing
 * indices to the host for the dispatch plan and the plan back, waited for:
 * note [moe]), packed SFT rows (data.packing: each query's first visible key
 * and the positions are copied in by sharc_model_set_positions, note
 * [packing]), the tiled MLP (fsdp.apply_tiled_mlp), frozen parameters, and
 * every sharding strategy with ranks staged through host memory
 * (tests/cli/cudasim_options.sh, cudasim_train.sh), and tensor parallelism
 * (mesh.tp: the vocab_* kernels, its all-reduces on the model's stream or
 * staged, note [tp-device] in src/model/tp.h) and sequence parallelism
 * (mesh.sp: Ulysses' copy_block layout changes, its all-to-all on device
 * memory or staged; tests/cli/cudasim_tp.sh). Refused here with a line
 * naming the key, until it is done on a device: fsdp.param_dtype bf16/fp16 on a device
 * whose table has no bf16 matrix products (bf16_compute false; CUDA's has
 * them). */
static sharc_status train_device(const sharc_config *c, sharc_device **out) {
    *out = NULL;
    const sharc_train_config *tc = &c->train;
    if (tc->device == 0) return SHARC_OK;
    sharc_device *d = NULL;
    /* note [gpu-of-rank] (sharc/launch.h); ranks sharing a GPU: note [nccl]'s fallback */
    int ngpu = sharc_device_count("cuda"), local = sharc_launch_local_rank(), gpu = sharc_launch_device_index("cuda");
    if (sharc_device_open("cuda", gpu, &d) != SHARC_OK) {
        char why[512]; /* sharc_error writes where sharc_last_error points */
        snprintf(why, sizeof why, "%s", sharc_last_error());
        return sharc_error(SHARC_ERR_INVALID, "train.device: %s", why);
    }
    if (ngpu > 1) fprintf(stderr, "cuda: local rank %d uses GPU %d of %d\n", local, gpu, ngpu);
    if (!sharc_device_is_host(d)) {
        const char *key = NULL;
        char val[64] = "";
        if (c->fsdp.engine.param_dtype != SHARC_DT_F32 && !sharc_device_kernels(d)->bf16_compute())
            key = "fsdp.param_dtype", snprintf(val, sizeof val, "%s", sharc_dtype_st_name(c->fsdp.engine.param_dtype));
        if (key)
            return sharc_error(SHARC_ERR_INVALID,
                               "%s: %s is not supported with train.device cuda yet (note [cuda-train]); use "
                               "train.device cpu or drop %s",
                               key, val, key);
        /* note [optim-offload-overlap] in src/optim/adamw.c */
        if (c->optim.offload_dir[0] && !c->fsdp.cpu_offload && sharc_log_rank() == 0)
            sharc_info("optim.offload_dir on train.device cuda implies fsdp.cpu_offload: the fp32 master shards, "
                       "gradient shards and the AdamW update in host memory, the moments in '%s' (as DeepSpeed's "
                       "offload_optimizer nvme_path runs the optimizer on the CPU)",
                       c->optim.offload_dir);
    }
    *out = d;
    return SHARC_OK;
}

sharc_status sharc_trainer_init(sharc_trainer **out, const sharc_config *cfg, sharc_comm *world) {
    *out = NULL;
    sharc_trainer *t = calloc(1, sizeof *t);
    if (!t) return sharc_error(SHARC_ERR_NOMEM, "train: out of memory");
    t->cfg = *cfg;
    sharc_status st = SHARC_OK;
    if (world) {
        t->world = world;
    } else {
        st = sharc_comm_self(&t->world);
        t->owns_world = true;
        if (st != SHARC_OK) {
            free(t);
            return st;
        }
    }
    const int R = sharc_comm_size(t->world), rank = sharc_comm_rank(t->world);
    const sharc_train_config *tc = &t->cfg.train;
    /* every rank, before anything can fail alone: a split, no other collective */
    int threads = tc->threads > 0 ? tc->threads : default_threads(t->world);

    /* local part: nothing here may call a collective */
    sharc_device *dev = NULL;
    st = train_device(&t->cfg, &dev); /* first: what a device refuses is named before the mesh's arithmetic */
    if (st == SHARC_OK) st = sharc_mesh_dims_resolve(&t->cfg.fsdp.engine, &t->cfg.mesh, R, &t->dims);
    const int sp = t->dims.sp > 0 ? t->dims.sp : 1, tp = t->dims.tp > 0 ? t->dims.tp : 1;
    const int dp = R / (sp * tp); /* data streams (note [mesh-fsdp]) */
    t->sp_rank = rank / tp % sp;
    t->dp_rank = rank / (sp * tp);
    if (st == SHARC_OK) st = sharc_blas_init(threads);
    if (st == SHARC_OK) st = sharc_model_init(&t->model, &t->cfg.model, dev);
    if (st == SHARC_OK) st = sharc_model_freeze(t->model, t->cfg.freeze_module_prefix, t->cfg.trainable, NULL);
    if (st == SHARC_OK) {
        t->cfg.model = *sharc_model_get_config(t->model); /* with derived defaults */
        st = sharc_mesh_check_model(&t->cfg.mesh, &t->cfg.model, tc->seq_len);
    }
    if (st == SHARC_OK && sp > 1) st = sharc_model_set_sequence_parallel(t->model, sp, t->sp_rank);
    if (st == SHARC_OK && tp > 1) {
        /* note [tp] in src/model/tp.h: this rank's part of every block, before freezing */
        st = sharc_model_set_tensor_parallel(t->model, tp, rank % tp);
        if (st == SHARC_OK) st = sharc_model_freeze(t->model, t->cfg.freeze_module_prefix, t->cfg.trainable, NULL);
    }
    if (st == SHARC_OK && t->cfg.fsdp.apply_tiled_mlp)
        sharc_model_set_tiled_mlp(t->model, t->cfg.fsdp.tiled_num_shards);
    if (st == SHARC_OK) {
        sharc_model_set_param_dtype(t->model, t->cfg.fsdp.engine.param_dtype); /* note [bf16-acts] */
        st = sharc_model_plan(t->model, tc->batch_size, tc->seq_len / sp, t->cfg.fsdp.activation_checkpointing);
    }
    /* model.tokenizer: text and JSONL are tokenized here (note [tokenize-once] in sharc/dataprep.h) */
    sharc_tokenizer *tok = NULL;
    if (st == SHARC_OK) st = sharc_dataprep_tokenizer(&t->cfg, &tok);
    if (st == SHARC_OK)
        st = sharc_dataprep_open(&t->cfg, tok, t->cfg.data.path, sharc_threads_get(), rank == 0, &t->data);
    if (st == SHARC_OK && t->cfg.data.packing) { /* note [packing-rule] */
        int64_t samples = sharc_dataset_num_items(t->data, tc->seq_len);
        st = sharc_dataset_pack(t->data, tc->seq_len);
        if (st == SHARC_OK && rank == 0)
            sharc_info("sharc: data.packing: %lld samples -> %lld rows of %d positions (%.2f samples a row)",
                       (long long)samples, (long long)sharc_dataset_num_items(t->data, tc->seq_len), tc->seq_len,
                       (double)samples / (double)sharc_dataset_num_items(t->data, tc->seq_len));
    }
    if (st == SHARC_OK) {
        sharc_sampler_config sc = {.seq_len = tc->seq_len,
                                   .batch_size = tc->batch_size,
                                   .grad_accum = tc->grad_accum,
                                   .dp_size = dp,
                                   .shuffle = t->cfg.data.shuffle,
                                   .seed = t->cfg.data.seed};
        st = sharc_sampler_init(&t->sampler, t->data, &sc);
    }
    if (st == SHARC_OK && tc->epochs > 0.0f) {
        /* train.epochs: passes over the windows, in whole steps */
        double per_step = (double)tc->batch_size * tc->grad_accum * dp;
        double steps = ceil((double)tc->epochs * (double)sharc_sampler_windows(t->sampler) / per_step);
        t->cfg.train.max_steps = steps > 1.0 ? (int64_t)steps : 1;
    }
    if (st == SHARC_OK && t->cfg.log.eval_every > 0) {
        if (!t->cfg.data.val_path[0])
            st = sharc_error(SHARC_ERR_INVALID, "log.eval_every: %d, but data.val_path is empty; set a validation file",
                             t->cfg.log.eval_every);
        else st = sharc_dataprep_open(&t->cfg, tok, t->cfg.data.val_path, sharc_threads_get(), rank == 0, &t->val);
        if (st == SHARC_OK && sharc_dataset_num_items(t->val, tc->seq_len) < 1)
            st = sharc_error(SHARC_ERR_INVALID, "data.val_path: '%s' has %lld tokens, fewer than one window of %d + 1",
                             t->cfg.data.val_path, (long long)sharc_dataset_num_tokens(t->val), tc->seq_len);
    }
    sharc_tokenizer_free(tok);
    if (st == SHARC_OK) {
        size_t n = (size_t)tc->grad_accum * (size_t)tc->batch_size * (size_t)(tc->seq_len / sp);
        size_t nseq = (size_t)tc->batch_size * (size_t)tc->seq_len;
        t->inputs = sharc_alloc(n * sizeof(int32_t), SHARC_MEM_OTHER);
        t->targets = sharc_alloc(n * sizeof(int32_t), SHARC_MEM_OTHER);
        t->seq_in = sharc_alloc(nseq * sizeof(int32_t), SHARC_MEM_OTHER);
        t->seq_tg = sharc_alloc(nseq * sizeof(int32_t), SHARC_MEM_OTHER);
        t->micro_valid = sharc_alloc((size_t)tc->grad_accum * sizeof(int64_t), SHARC_MEM_OTHER);
        if (t->cfg.data.packing)
            t->seq_pos = sharc_alloc((size_t)tc->grad_accum * nseq * sizeof(int32_t), SHARC_MEM_OTHER);
        if (!t->inputs || !t->targets || !t->seq_in || !t->seq_tg || !t->micro_valid ||
            (t->cfg.data.packing && !t->seq_pos))
            st = sharc_error(SHARC_ERR_NOMEM, "train: cannot allocate the batch");
    }
    /* collective part */
    sharc_status agreed = agree(t->world, st);
    if (agreed != SHARC_OK) {
        sharc_trainer_free(t);
        return agreed;
    }
    /* from here a failure that no agreement reports may be this rank's
     * alone: note [job-end] in src/cli/main.c */
    if ((st = check_agreement(t->world, &t->cfg, sharc_dataset_num_tokens(t->data),
                              t->val ? sharc_dataset_num_tokens(t->val) : 0)) != SHARC_OK)
        goto alone;
    if ((st = sharc_mesh_init_dims(&t->mesh, t->world, &t->dims, t->cfg.fsdp.engine.strategy)) != SHARC_OK) goto alone;
    t->mesh_ok = true;
    if ((st = sharc_model_set_sp_group(t->model, t->mesh.sp_group)) != SHARC_OK) goto alone;
    if ((st = sharc_model_set_tp_group(t->model, t->mesh.tp_group)) != SHARC_OK) goto alone;
    st = sharc_fsdp_init(&t->engine, sharc_model_units(t->model), sharc_model_num_units(t->model),
                         sharc_model_schedule(t->model), &t->cfg.fsdp.engine, &t->mesh, sharc_model_device(t->model));
    if ((st = agree(t->world, st)) != SHARC_OK) goto fail;
    sharc_fsdp_init_params(t->engine, tc->seed);
    /* model.init_from: a sharc weights file, or a Hugging Face directory
     * (config.json + safetensors, sharc/hf.h), over the initialised
     * parameters; each rank reads its shards' ranges; the outcome is agreed */
    if (t->cfg.init_from[0] && sharc_hf_is_dir(t->cfg.init_from)) {
        /* on every rank, whatever the check says (the write bracket of sharc/fsdp.h) */
        sharc_fsdp_shard_write_begin(t->engine);
        st = sharc_hf_check_config(t->cfg.init_from, &t->cfg.model);
        if (st == SHARC_OK) st = sharc_hf_load(t->engine, t->cfg.init_from);
        sharc_fsdp_shard_write_end(t->engine);
    } else {
        st = t->cfg.init_from[0] ? sharc_weights_load(t->engine, t->cfg.init_from) : SHARC_OK;
    }
    if (st != SHARC_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", sharc_last_error());
        st = sharc_error(st, "model.init_from: %s", msg);
    }
    if ((st = agree(t->world, st)) != SHARC_OK) goto fail;
    st = sharc_adamw_init(&t->opt, t->engine, &t->cfg.optim);
    if ((st = agree(t->world, st)) != SHARC_OK) goto fail;
    t->flops_per_token = sharc_model_flops_per_token(&t->cfg.model, tc->seq_len);
    /* MFU's denominator, summed over ranks: log.peak_tflops; on a device
     * with its own memory the device's dense peak for the products' dtype
     * (note [cuda-peak] in src/device/cuda/cuda.cu; ranks sharing one GPU
     * each count all of it); else this rank's cores measured, with bf16
     * compute on oneDNN the bf16 dot-product peak (emulated bf16 runs on
     * sgemm: the fp32 peak) */
    t->bf16 = sharc_model_computes_bf16(t->model, t->engine);
    bool bf16_peak = t->bf16 && sharc_bf16_mode_get(NULL) == SHARC_BF16_ONEDNN;
    sharc_device *mdev = sharc_model_device(t->model);
    if (t->cfg.log.peak_tflops > 0) {
        t->peak_flops_world = 1e12 * (double)t->cfg.log.peak_tflops;
        snprintf(t->peak_how, sizeof t->peak_how, "log.peak_tflops");
    } else if (!sharc_device_is_host(mdev)) {
        t->peak_flops_world =
            sharc_device_peak_flops(mdev, t->bf16 ? SHARC_DT_BF16 : SHARC_DT_F32, t->peak_how, sizeof t->peak_how);
    } else {
        t->peak_flops_world = bf16_peak ? sharc_telemetry_measure_peak_flops_bf16(sharc_threads_get())
                                        : sharc_telemetry_measure_peak_flops(sharc_threads_get());
        snprintf(t->peak_how, sizeof t->peak_how, "%s",
                 bf16_peak ? "measured bf16 dot-product loop" : "measured FMA loop");
    }
    t->peak_flops_rank = t->peak_flops_world;
    if ((st = sharc_comm_all_reduce(t->world, &t->peak_flops_world, &t->peak_flops_world, 1, SHARC_DT_F64,
                                    SHARC_REDUCE_OP_SUM)) != SHARC_OK)
        goto alone;
    reset_comm_stats(t);
    *out = t;
    return SHARC_OK;
alone: /* every rank fails the fingerprint alike; a collective may fail on one */
    if (!sharc_comm_world_settle(SETTLE_S)) return st; /* the peers may still use what t holds */
fail:
    sharc_trainer_free(t);
    return st;
}

void sharc_trainer_free(sharc_trainer *t) {
    if (!t) return;
    sharc_free(t->inputs);
    sharc_free(t->targets);
    sharc_free(t->seq_in);
    sharc_free(t->seq_tg);
    sharc_free(t->seq_pos);
    sharc_free(t->micro_valid);
    sharc_sampler_free(t->sampler);
    sharc_dataset_free(t->data);
    sharc_dataset_free(t->val);
    sharc_adamw_free(t->opt);
    sharc_fsdp_free(t->engine);
    sharc_model_free(t->model);
    if (t->mesh_ok) sharc_mesh_free(&t->mesh);
    if (t->owns_world) sharc_comm_free(t->world);
    free(t);
}

sharc_fsdp *sharc_trainer_engine(sharc_trainer *t) { return t->engine; }
sharc_adamw *sharc_trainer_optimizer(sharc_trainer *t) { return t->opt; }
const sharc_config *sharc_trainer_config(const sharc_trainer *t) { return &t->cfg; }
sharc_comm *sharc_trainer_world(sharc_trainer *t) { return t->world; }
const sharc_mesh *sharc_trainer_mesh(const sharc_trainer *t) { return &t->mesh; }
int64_t sharc_trainer_steps_done(const sharc_trainer *t) { return t->step; }

sharc_ckpt_state sharc_trainer_ckpt_state(sharc_trainer *t) {
    return (sharc_ckpt_state){
        .world = t->world, .mesh = &t->mesh, .engine = t->engine, .optim = t->opt, .cfg = &t->cfg};
}

sharc_status sharc_trainer_resume(sharc_trainer *t, sharc_ckpt *ck, const char *what, int64_t *loaded_step) {
    int64_t step = -1;
    sharc_status st = sharc_ckpt_resume(ck, what, &step);
    if (st == SHARC_OK && step >= 0) t->step = step;
    if (loaded_step) *loaded_step = step;
    return st;
}

/* ------------------------------------------------------------------ step */

static void comm_totals(sharc_trainer *t, sharc_comm_stats *sum) {
    memset(sum, 0, sizeof *sum);
    /* note [post-forward]: backward's all-gathers inside the group of N are the engine's own group */
    sharc_comm *groups[6] = {t->world,          t->mesh.shard,
                             t->mesh.replicate, t->mesh.sp_group,
                             t->mesh.tp_group,  t->engine ? sharc_fsdp_post_forward_comm(t->engine) : NULL};
    for (int g = 0; g < 6; g++) {
        if (!groups[g]) continue;
        sharc_comm_stats s;
        sharc_comm_stats_get(groups[g], &s);
        for (int k = 0; k < SHARC_COLL_NKINDS; k++) {
            sum->calls[k] += s.calls[k];
            sum->bytes[k] += s.bytes[k];
            sum->seconds[k] += s.seconds[k];
        }
        sharc_comm_stats_reset(groups[g]);
    }
}

sharc_status sharc_trainer_step(sharc_trainer *t, sharc_step_stats *s) {
    const sharc_train_config *tc = &t->cfg.train;
    const int A = tc->grad_accum, B = tc->batch_size, T = tc->seq_len, sp = t->dims.sp, Tl = T / sp;
    const int64_t mb = (int64_t)B * Tl; /* this rank's tokens of a micro-batch */
    const int tp = t->dims.tp, R = sharc_comm_size(t->world), dp = R / (sp * tp);
    double t0 = sharc_clock_now(), c0 = sharc_clock_cpu_now();
    sharc_activity_step(t->step + 1);
    if (sharc_fault_at("step", t->step + 1) == SHARC_FAULT_FAIL)
        return sharc_error(SHARC_ERR_COMM, "train: step %lld failed on this rank alone (the test hook SHARC_TEST_FAIL)",
                           (long long)(t->step + 1));
    sharc_adamw_offload_stats io0, io1; /* note [optim-offload]: this step's part of the counters */
    sharc_adamw_offload_stats_get(t->opt, &io0);
    sharc_fsdp_stats_reset(t->engine);
    sharc_model_timing_reset(t->model);
    sharc_device_mem_reset_peak(sharc_model_device(t->model)); /* the host's counters on the CPU */
    /* the whole step's batch first: the loss scale needs the global valid-target count.
     * Under sp each rank of a group reads its stream's sequences and keeps
     * tokens [sp_rank Tl, (sp_rank + 1) Tl) of each: targets are shifted
     * before the split, so a slice's last target is the next slice's first
     * token (note [ulysses] in src/model/ulysses.h) */
    for (int m = 0; m < A; m++) {
        sharc_sampler_batch(t->sampler, t->step, m, t->dp_rank, t->seq_in, t->seq_tg);
        if (t->seq_pos) sharc_sampler_positions(t->sampler, t->step, m, t->dp_rank, t->seq_pos + (int64_t)m * B * T);
        t->micro_valid[m] = 0;
        for (int64_t i = 0; i < (int64_t)B * T; i++) t->micro_valid[m] += t->seq_tg[i] >= 0;
        for (int b = 0; b < B; b++) {
            int64_t from = (int64_t)b * T + (int64_t)t->sp_rank * Tl, to = m * mb + (int64_t)b * Tl;
            memcpy(t->inputs + to, t->seq_in + from, sizeof(int32_t) * (size_t)Tl);
            memcpy(t->targets + to, t->seq_tg + from, sizeof(int32_t) * (size_t)Tl);
        }
    }
    /* the rest of the step (src/train/step.c) */
    const sharc_train_step_ctx ctx = {.model = t->model,
                                      .engine = t->engine,
                                      .opt = t->opt,
                                      .optim = &t->cfg.optim,
                                      .world = t->world,
                                      .max_steps = tc->max_steps,
                                      .loss_normalization = tc->loss_normalization,
                                      .tp = tp,
                                      .data_streams = dp};
    const sharc_train_batch batch = {.grad_accum = A,
                                     .micro_tokens = mb,
                                     .inputs = t->inputs,
                                     .targets = t->targets,
                                     .positions = t->seq_pos,
                                     .positions_stride = (int64_t)B * T,
                                     .micro_valid = t->micro_valid};
    sharc_train_step_result r;
    SHARC_TRY(sharc_train_step_run(&ctx, &batch, t->step, &r));
    t->step++;
    double dt = sharc_clock_now() - t0;
    memset(s, 0, sizeof *s);
    s->step = t->step;
    s->loss = r.loss;
    s->lr = r.lr;
    s->grad_norm = r.grad_norm;
    s->tokens = (int64_t)A * mb * (R / tp);
    s->valid_tokens = r.valid_tokens;
    s->step_s = dt;
    s->tokens_per_s = (double)s->tokens / dt;
    s->tflops = t->flops_per_token * s->tokens_per_s * 1e-12;
    s->forward_backward_s = r.forward_backward_s;
    s->optimizer_s = r.optimizer_s;
    comm_totals(t, &s->comm);
    sharc_fsdp_stats fs;
    sharc_fsdp_stats_get(t->engine, &fs);
    s->comm_wait_s = fs.wait_s;
    s->gathered_peak = fs.gathered_peak;
    s->unit_gathers = fs.gathers;
    s->comm_stream_waits = fs.comm_waits;
    s->skipped = r.skipped;
    /* per-category memory where the tensors live: a device with its own
     * memory reports its accounts (host buffers, e.g. note [comm-staging]'s,
     * are not in them) */
    sharc_device_mem_get(sharc_model_device(t->model), &s->mem);
    sharc_model_timing mt;
    sharc_model_timing_get(t->model, &mt);
    s->forward_s = mt.forward_s;
    s->backward_s = mt.backward_s;
    s->moe_idle_experts = mt.moe_idle_pairs;
    s->moe_idle_bytes = mt.moe_idle_params * (int64_t)sharc_dtype_size(sharc_fsdp_param_dtype(t->engine));
    sharc_adamw_offload_stats_get(t->opt, &io1);
    s->offload_read_bytes = io1.read_bytes - io0.read_bytes;
    s->offload_write_bytes = io1.write_bytes - io0.write_bytes;
    s->offload_s = io1.step_s - io0.step_s;
    s->offload_wait_s = (io1.read_wait_s + io1.write_wait_s) - (io0.read_wait_s + io0.write_wait_s);
    s->local_loss = r.local_loss;
    s->local_tokens = (int64_t)A * mb;
    s->cpu_s = (sharc_clock_cpu_now() - c0) / (double)sharc_threads_get();
    return SHARC_OK;
}

/* ------------------------------------------------------------------- run */

/* Validation over every rank (note [eval-windows] in sharc/eval.h).
 * Collective; *line (rank 0, malloc'd) is its metrics line. */
static sharc_status run_eval(sharc_trainer *t, int64_t step, char **line) {
    const sharc_config *c = &t->cfg;
    sharc_eval_result r;
    *line = NULL;
    /* note [eval-windows]: the data streams are the mesh's (note [mesh-fsdp]) */
    const int sp = t->dims.sp > 0 ? t->dims.sp : 1, tp = t->dims.tp > 0 ? t->dims.tp : 1;
    const sharc_eval_mesh mesh = {.streams = sharc_comm_size(t->world) / (sp * tp),
                                  .stream = t->dp_rank,
                                  .sp = sp,
                                  .sp_rank = t->sp_rank,
                                  .tp = tp};
    SHARC_TRY(sharc_eval_dataset(t->model, t->engine, t->world, &mesh, t->val, c->train.batch_size, c->train.seq_len,
                                 c->log.eval_batches, &r));
    if (sharc_comm_rank(t->world) == 0) {
        if (asprintf(line,
                     "{\"step\": %lld, \"loss_metrics/val_loss\": %.6f, \"loss_metrics/val_perplexity\": %.6f, "
                     "\"val/targets\": %lld, \"val/windows\": %lld, \"time_metrics/eval(s)\": %.4f}\n",
                     (long long)step, r.loss, r.perplexity, (long long)r.targets, (long long)r.windows, r.seconds) < 0)
            *line = NULL;
        sharc_info("sharc: step %lld validation loss %.4f, perplexity %.3f (%lld windows, %.2f s)", (long long)step,
                   r.loss, r.perplexity, (long long)r.windows, r.seconds);
    }
    return SHARC_OK;
}

/* A line written by `write` (a telemetry writer) into `j` (note [jsonl]). */
static sharc_status append_line(sharc_jsonl *j, const char *line) {
    return line ? sharc_jsonl_append(j, line, strlen(line)) : sharc_error(SHARC_ERR_NOMEM, "train: out of memory");
}

static char *metrics_line(const sharc_step_stats *s, const sharc_step_global *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    sharc_telemetry_write_json(f, s, g);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static char *debug_line(const sharc_step_stats *s, int rank) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    sharc_telemetry_write_rank_json(f, s, rank);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void warn_line(const char *line, void *ctx) {
    (void)ctx;
    sharc_warn("%s", line);
}

static void print_banner(const sharc_trainer *t) {
    const sharc_config *c = &t->cfg;
    const int R = sharc_comm_size(t->world);
    /* the resolved configuration, then every accepted-but-ignored option, loudly */
    printf("--- resolved config (saved as %s/config.yaml) ---\n", c->train.out_dir);
    sharc_config_write_yaml(c, stdout);
    printf("---\n");
    fflush(stdout);
    sharc_config_warnings(c, warn_line, NULL);
    const sharc_blas_info *bi = sharc_blas_get_info();
    const sharc_mesh *m = &t->mesh;
    char spx[64] = "";
    if (m->sp > 1 || m->tp > 1)
        snprintf(spx, sizeof spx, "; mesh dp_replicate %d x dp_shard %d x sp %d x tp %d", m->dims.dp_replicate,
                 m->dims.dp_shard, m->sp, m->tp);
    sharc_info(
        "sharc: %s, %lld parameters, %d rank%s (%s: %d shard x %d replicate%s), %d threads each, GEMM %s, BLAS %s%s%s",
        sharc_family_name(c->model.family), (long long)sharc_model_num_params(&c->model), R, R > 1 ? "s" : "",
        sharc_sharding_name(c->fsdp.engine.strategy), m->dp_shard, m->dp_replicate, spx, sharc_threads_get(), bi->gemm,
        bi->corename, bi->overridden[0] ? ", OPENBLAS_CORETYPE overridden from " : "", bi->overridden);
    sharc_info("sharc: data %s: %lld tokens, %lld windows of %d; %d sequences per step", c->data.path,
               (long long)sharc_dataset_num_tokens(t->data), (long long)sharc_sampler_windows(t->sampler),
               c->train.seq_len + 1, c->train.batch_size * c->train.grad_accum * (R / (m->sp * m->tp)));
    const char *why;
    (void)sharc_bf16_mode_get(&why);
    const sharc_device *dev = sharc_model_device(t->model);
    if (!sharc_device_is_host(dev)) /* note [cuda-train]: the device's bf16, not the CPU's */
        why = "on the cuda device: cuBLASLt with fp32 accumulation";
    if (c->fsdp.engine.param_dtype == SHARC_DT_BF16) {
        if (t->bf16)
            sharc_info("sharc: fsdp.param_dtype bf16: matrix products in bf16 (%s), norms, softmax, loss and "
                       "reductions in fp32",
                       why);
        else
            sharc_warn("fsdp.param_dtype: bf16 computes in fp32 on this machine (%s); parameters are still gathered "
                       "and rounded in bf16",
                       why);
    }
    if (t->peak_flops_world > 0)
        sharc_info("sharc: peak %.1f GFLOP/s over all ranks for mfu(%%) (%s)", t->peak_flops_world * 1e-9, t->peak_how);
    else sharc_warn("log.peak_tflops: 0 and no peak known for this device (%s); mfu(%%) is reported as 0", t->peak_how);
}

/* Note [flight] (src/core/flight.c): dumps go to out_dir/debug; a previous
 * run's records go first (rank 0 removes every rank's, each rank its own:
 * node-local directories), so `sharc doctor` never mixes two runs. */
static void start_flight(const char *out_dir, int rank) {
    char d[SHARC_PATH_MAX + 16], f[SHARC_PATH_MAX + 300];
    snprintf(d, sizeof d, "%s/debug", out_dir);
    DIR *dir = rank == 0 ? opendir(d) : NULL;
    for (struct dirent *e; dir && (e = readdir(dir));)
        if (!strncmp(e->d_name, "flight-rank-", 12)) {
            snprintf(f, sizeof f, "%s/%s", d, e->d_name);
            unlink(f);
        }
    if (dir) closedir(dir);
    snprintf(f, sizeof f, "%s/flight-rank-%d.json", d, rank);
    unlink(f);
    if (rank == 0) rmdir(d); /* made for the records alone: nothing left behind (log.debug's logs keep it) */
    sharc_flight_set_dir(out_dir);
}

sharc_status sharc_train_run(const sharc_config *cfg, sharc_comm *world) {
    sharc_trainer *t;
    /* note [watchdog]: from here to the end, start-up collectives included */
    sharc_status st = sharc_watchdog_start(cfg->train.timeout, "train.timeout");
    if (world) st = agree(world, st);
    if (st != SHARC_OK) {
        sharc_watchdog_stop();
        return st;
    }
    sharc_activity_step(0);
    sharc_activity_phase("start-up", -1, NULL);
    sharc_status ist = sharc_trainer_init(&t, cfg, world);
    if (ist != SHARC_OK) {
        sharc_watchdog_stop();
        return ist;
    }
    /* checkpoints (sharc/ckpt.h): resume before anything is written */
    sharc_ckpt *ck = NULL;
    int64_t resumed = -1;
    const sharc_ckpt_state cs = sharc_trainer_ckpt_state(t);
    st = sharc_ckpt_init(&ck, &cs);
    if (st == SHARC_OK) st = sharc_trainer_resume(t, ck, t->cfg.ckpt.resume, &resumed);
    const sharc_config *c = &t->cfg;
    const int rank = sharc_comm_rank(t->world);
    const bool lead = rank == 0;
    /* note [run-dir]: every check first, agreed; then the writes, agreed */
    sharc_run_dir rd;
    sharc_jsonl *metrics = NULL, *debug = NULL;
    if (st == SHARC_OK) st = agree(t->world, sharc_run_dir_check(&rd, c, ck, resumed, rank));
    if (st == SHARC_OK) st = agree(t->world, sharc_run_dir_prepare(&rd, ck, rank, &metrics, &debug));
    if (st == SHARC_OK) start_flight(c->train.out_dir, rank);
    if (st != SHARC_OK) {
        sharc_jsonl_close(metrics);
        sharc_jsonl_close(debug);
        sharc_ckpt_free(ck);
        sharc_trainer_free(t);
        sharc_watchdog_stop();
        return st;
    }
    /* note [memory-plan]: the plan, and at the end the measured peaks beside it */
    sharc_memplan plan;
    bool planned = false;
    int64_t run_peak[SHARC_MEM_NCAT] = {0};
    {
        /* where shared memory is allowed the collectives stay on the node */
        int R = sharc_comm_size(t->world), S = t->mesh.dp_shard;
        int rpn = sharc_comm_shared_memory_allowed(t->world)                 ? R
                  : S > 1 && sharc_comm_shared_memory_allowed(t->mesh.shard) ? S
                                                                             : 1;
        /* note [comm-plan] (memplan.c): on a device the MPI path's scratch is
         * host memory, not the table's, and a NCCL world allows no shared
         * memory: the nodes only name the groups (collective) */
        sharc_comm *node = NULL;
        if (!sharc_device_is_host(sharc_model_device(t->model)) && sharc_comm_split_node(t->world, &node) == SHARC_OK &&
            node) {
            rpn = sharc_comm_size(node);
            sharc_comm_free(node);
        }
        planned = sharc_memplan_make(&plan, c, sharc_comm_size(t->world), rpn, sharc_threads_get()) == SHARC_OK;
    }
    if (lead) print_banner(t);
    if (lead && planned) {
        sharc_memplan_print(stdout, &plan, c, NULL);
        fflush(stdout);
    }
    const char *trace = getenv("SHARC_PROFILE_TRACE"); /* note [trace]: implies the profile */
    const bool profile = getenv("SHARC_PROFILE") != NULL || (trace && *trace);
    const int64_t first = t->step;
    if (st == SHARC_OK && trace && *trace)
        st = agree(t->world, sharc_prof_trace_config(trace, getenv("SHARC_PROFILE_TRACE_STEPS"), rank,
                                                     sharc_comm_size(t->world)));
    if (profile) { /* note [prof] in docs/ARCHITECTURE.md */
        sharc_device *pd = sharc_model_device(t->model);
        char how[160];
        double bw;
        if (sharc_device_is_host(pd)) {
            sharc_prof_set_device(NULL, NULL);
            bw = sharc_telemetry_measure_bandwidth(sharc_threads_get());
            snprintf(how, sizeof how, "measured %d-thread copy", sharc_threads_get());
        } else {
            sharc_prof_set_device(pd, sharc_device_stream(pd));
            bw = sharc_device_peak_bandwidth(pd, how, sizeof how);
        }
        sharc_prof_set_ceilings(t->peak_flops_rank, t->peak_how, bw, how);
    }
    reset_comm_stats(t); /* the start-up agreement is not step 1's traffic */
    /* a progress bar only on a terminal; under mpirun Open MPI gives rank 0 a
     * pseudo-terminal even when mpirun's output goes to a file, so not there */
    const bool tty = lead && isatty(fileno(stdout)) && strcmp(sharc_comm_backend(t->world), "self") == 0;
    double tok_sum = 0.0, time_sum = 0.0, start = sharc_clock_now();
    int bad_run = 0, bad_total = 0;
    bool alone = false; /* a failure the other ranks may not share (note [job-end]) */
    for (int64_t i = t->step; i < c->train.max_steps && st == SHARC_OK; i++) {
        sharc_step_stats s;
        sharc_step_global g;
        /* the first step (allocations, library warm-up) is left out of the profile unless it is the only one */
        sharc_prof_enable(profile && (i > first || c->train.max_steps - first == 1));
        sharc_prof_set_step(i + 1);
        sharc_prof_step_begin();
        st = sharc_trainer_step(t, &s);
        sharc_prof_step_end();
        /* every rank: one all-gather of each rank's stats (sharc/telemetry.h) */
        if (st == SHARC_OK) st = sharc_telemetry_reduce(t->world, &s, t->flops_per_token, t->peak_flops_world, &g);
        if (st != SHARC_OK) {
            alone = true;
            break;
        }
        /* note [bad-steps]: the same verdict on every rank */
        bad_run = s.skipped ? bad_run + 1 : 0;
        bad_total += s.skipped;
        if (s.skipped && lead)
            sharc_warn("step %lld: loss %g, grad norm %g: not finite; step skipped, no update (%d in a row, "
                       "train.max_bad_steps = %d)",
                       (long long)s.step, s.loss, s.grad_norm, bad_run, c->train.max_bad_steps);
        if (bad_run >= c->train.max_bad_steps) {
            st = sharc_error(SHARC_ERR_INVALID,
                             "train: %d non-finite steps in a row (steps %lld-%lld; loss %g, grad norm %g): stopping "
                             "at train.max_bad_steps = %d, final weights not saved; lower optim.lr, raise "
                             "optim.warmup_steps or use fsdp.param_dtype fp32",
                             bad_run, (long long)(s.step - bad_run + 1), (long long)s.step, s.loss, s.grad_norm,
                             c->train.max_bad_steps);
            break;
        }
        tok_sum += (double)s.tokens;
        time_sum += g.step_s_max;
        for (int k = 0; k < SHARC_MEM_NCAT; k++)
            run_peak[k] = g.mem_peak[k] > run_peak[k] ? g.mem_peak[k] : run_peak[k];
        /* the step's lines (note [jsonl]); a write that fails (a full disk) stops every rank */
        sharc_status out = SHARC_OK;
        if (debug) {
            char *line = debug_line(&s, rank);
            out = append_line(debug, line);
            free(line);
        }
        if (lead) {
            char *line = metrics_line(&s, &g);
            if (out == SHARC_OK) out = append_line(metrics, line);
            free(line);
            if (tty || s.step % c->train.log_every == 0 || s.step == 1 || s.step == c->train.max_steps)
                sharc_telemetry_print_step(stdout, tty, &s, &g, c->train.max_steps, sharc_clock_now() - start);
            fflush(stdout);
        }
        if (t->val && s.step % c->log.eval_every == 0) {
            char *line = NULL;
            if ((st = run_eval(t, s.step, &line)) != SHARC_OK) {
                alone = true;
                break;
            }
            if (lead && out == SHARC_OK) out = append_line(metrics, line);
            free(line);
        }
        if (out != SHARC_OK) {
            char msg[4096];
            snprintf(msg, sizeof msg, "%s", sharc_last_error());
            out = sharc_error(out, "train: %s; stopping at step %lld", msg, (long long)s.step);
        }
        st = sharc_comm_agree(t->world, out, SHARC_ERR_IO, "train: rank %d cannot write its metrics (see its message)");
        if (st == SHARC_OK && c->ckpt.every > 0 && s.step % c->ckpt.every == 0 && s.step < c->train.max_steps)
            SHARC_PROF_HOST("checkpoint save", st = sharc_ckpt_save(ck, t->step));
        reset_comm_stats(t);
    }
    /* note [job-end]: a rank that failed alone must not free what its peers
     * still wait on (shared-memory windows are freed collectively) */
    if (alone && !sharc_comm_world_settle(SETTLE_S)) {
        sharc_jsonl_close(metrics);
        sharc_jsonl_close(debug);
        sharc_watchdog_stop();
        return st;
    }
    /* note [offload-overlap] (src/fsdp/overlap.c): the last step's queued updates, their failure agreed */
    if (st == SHARC_OK)
        st = sharc_comm_agree(t->world, sharc_fsdp_shard_sync(t->engine), SHARC_ERR_INTERNAL,
                              "train: rank %d failed its last optimizer update (see its message)");
    sharc_status cst = sharc_jsonl_close(metrics);
    sharc_status dst = sharc_jsonl_close(debug);
    if (st == SHARC_OK) st = agree(t->world, cst != SHARC_OK ? cst : dst);
    sharc_prof_trace_finish();
    if (profile && lead) sharc_prof_report(stderr, (int)(c->train.max_steps > 0 ? c->train.max_steps : 1));
    sharc_prof_set_device(NULL, NULL);                     /* its events, before the device goes */
    if (st == SHARC_OK) st = sharc_ckpt_save(ck, t->step); /* the last step; waits for an async one */
    if (st == SHARC_OK) st = sharc_ckpt_wait(ck);
    sharc_ckpt_free(ck);
    if (st == SHARC_OK) {
        st = sharc_weights_save(t->engine, t->world, c, rd.weights);
        if (st == SHARC_OK && lead)
            sharc_info("sharc: %.0f tok/s over the run; weights saved to %s", time_sum > 0 ? tok_sum / time_sum : 0.0,
                       rd.weights);
        if (st == SHARC_OK && lead && planned && time_sum > 0) {
            printf("measured peaks (the largest rank, every step) beside the plan:\n");
            sharc_memplan_print(stdout, &plan, c, run_peak);
        }
        if (st == SHARC_OK && lead && bad_total)
            sharc_warn("%d step%s skipped for a non-finite loss or grad norm", bad_total, bad_total > 1 ? "s" : "");
    }
    sharc_trainer_free(t);
    sharc_watchdog_stop();
    return st;
}
