/* memplan.c: sharc_memplan_*, the memory plan of a run per rank and category
 * (sharc/memplan.h): `sharc plan`, the table printed at the start of every
 * run, and the smallest change that makes a configuration fit.
 *
 * Note [memory-plan]. Every byte the engine, the optimizer and the model
 * hold comes from a size computed before it is allocated, and the plan calls
 * those same functions with the run's numbers instead of allocating:
 *
 *   params, grads, gathered, comm  sharc_fsdp_plan_bytes (the engine's plan.c:
 *                                  shards, slots, 16-bit staging, the slices an
 *                                  int reshard_after_forward keeps, note
 *                                  [post-forward]; frozen units have no
 *                                  gradient memory)
 *   optim                          2 moments x 4 bytes x the trainable units' shards;
 *                                  with optim.offload_dir only the chunk buffers,
 *                                  3 (1 unpipelined) x 2 x 4 bytes x the chunk, at
 *                                  most the largest trainable shard (the file's
 *                                  size is printed beside, on disk: note
 *                                  [optim-offload] in src/optim/adamw.c)
 *   activations                    sharc_model_activation_bytes (model.c's plan:
 *                                  B x T, checkpointing on/off, the tiled MLP,
 *                                  attention workspace for the rank's threads
 *                                  or the device's kernels; on train.device
 *                                  cuda the batch's device copy; under mesh.sp
 *                                  at T / sp tokens, with each block set's
 *                                  head-sharded qkv and output at T and the
 *                                  Ulysses buffers: the all-to-all's send and
 *                                  receive, the rank's qkv before the
 *                                  exchange, backward's d qkv and d out at T,
 *                                  note [ulysses]; all activations, as
 *                                  ulysses.c allocates them)
 *   other                          the step's token batch and the engine's scalar
 *
 * With fsdp.cpu_offload on a device (note [shard-device] in
 * src/fsdp/collectives.c) the table is the device's: the shards, the
 * moments, the norm's scalars and the reduced-shard landing buffer are in
 * host_bytes, printed on a line of their own.
 *
 * So for a run on one node the planned bytes are the allocated ones
 * (tests/cli/mpi_memplan.sh: equal for both families, every strategy, AC
 * on and off, frozen units, 1-4 ranks, tensor parallelism). Under mesh.tp
 * the model is planned as tp rank 0's part (note [tp] in src/model/tp.h:
 * the blocks' split parameters are 1/tp, the norms, embedding and head
 * whole; the local heads and MLP width size the activations) and FSDP's
 * groups over the world / tp ranks of each tp rank. Under mesh.sp the
 * model is planned as sp rank 0's slice (every slice has the same sizes:
 * T / sp tokens, NH / sp heads in attention) and FSDP's shard group is
 * dp_shard x sp (note [mesh-fsdp]; NO_SHARD folds sp into the replicate
 * group); checked equal at sp 2 (GQA with key/value heads split and
 * replicated, GPT-2), tp 2 x sp 2, and against a run's own table
 * (mpi_memplan.sh). Not planned: the dataset (tokens and the sampler's
 * permutation depend on the file, "other"; so are the whole sequences a
 * rank reads before its sp slice), transient kernel scratch (norm
 * partials, "other"), and Open MPI's own buffers. Planned:
 * the scratch of collectives that leave the node: a shard group that spans
 * nodes reduce-scatters through the MPI path, whose scratch holds one full
 * unit in reduce_dtype, and a replicate group across nodes all-reduces
 * 16-bit gradients through (2 R + 1) padded pieces of a shard; both are
 * added to comm (and checked, with shared memory turned off).
 *
 * Note [comm-plan]. Which comm path a run takes changes only host memory, so
 * the device's table is the same for every path: on train.device cuda comm
 * is the engine's staging on the device (stage16_shard, stage16_full,
 * stage_shard: allocated at S > 1 or any 16-bit dtype, whether NCCL or MPI
 * carries the collectives). Over NCCL the collectives read those device
 * buffers (NCCL's own buffers are not planned, as Open MPI's are not); a
 * group that stages through MPI (SHARC_COMM=mpi, or ranks sharing one GPU,
 * note [comm-staging] in src/fsdp/collectives.c) adds a pinned host buffer
 * and the MPI path's scratch, both host memory outside the device's table.
 * So the MPI scratch terms above are the CPU's alone: a NCCL world allows
 * no shared memory, the trainer passed 1 rank per node, and the scratch of
 * a shard group "across nodes" planned one full unit in reduce_dtype that
 * the NCCL path never allocates (comm peaked at 0.556 of its plan); on a
 * device the trainer now passes the node's ranks (sharc_comm_split_node),
 * which only name the groups. `sharc plan` needs no assumption about the path for the
 * table; the host staging is not printed (checked: tests/cli/cudasim_train.sh
 * n2 over NCCL, tests/cli/cudasim_overlap.sh bf16 over NCCL and through MPI). */
#include "sharc/memplan.h"
#include "sharc/blas.h"
#include "sharc/fsdp.h"
#include "sharc/launch.h"
#include "sharc/mesh.h"
#include "sharc/model.h"

#include <stdlib.h>
#include <string.h>

sharc_status sharc_memplan_make(sharc_memplan *p, const sharc_config *cfg, int world, int ranks_per_node, int threads) {
    memset(p, 0, sizeof *p);
    if (world < 1) return sharc_error(SHARC_ERR_INVALID, "plan: %d ranks, expected >= 1", world);
    if (ranks_per_node < 1 || (world > ranks_per_node && world % ranks_per_node != 0))
        return sharc_error(SHARC_ERR_INVALID, "plan: %d ranks per node, expected a divisor of the %d ranks",
                           ranks_per_node, world);
    const sharc_fsdp_config *fc = &cfg->fsdp.engine;
    /* the mesh as the trainer makes it (sharc/mesh.h): one set of FSDP
     * groups per tp rank, each sharding that rank's part */
    sharc_mesh_dims d;
    SHARC_TRY(sharc_mesh_dims_resolve(fc, &cfg->mesh, world, &d));
    const int tp = d.tp, sp = d.sp, S = fc->strategy == SHARC_SHARDING_NO_SHARD ? 1 : d.dp_shard * d.sp;
    /* note [ulysses]: each rank holds seq_len / sp tokens of each sequence */
    const int Tl = cfg->train.seq_len / sp;
    /* a shard group is S ranks tp apart, inside S tp consecutive ranks; nodes are consecutive blocks */
    const bool node_local = world <= ranks_per_node || ranks_per_node % (S * tp) == 0;
    p->world = world;
    p->tp = tp;
    p->sp = sp;
    p->dp_shard = S;
    p->dp_replicate = world / tp / S;
    p->threads = threads > 0 ? threads : 1;
    p->node_local = node_local;
    /* the shared windows need host shards (sharc_fsdp_shm_eligible) */
    p->shared = cfg->train.device == 0 && node_local && S > 1 && fc->param_dtype == SHARC_DT_F32 &&
                !(getenv("SHARC_COMM_SHM") && !strcmp(getenv("SHARC_COMM_SHM"), "0"));
    /* the run's device sizes what its kernel table asks for (the attention
     * workspace); `sharc plan` for train.device cuda on a machine without one
     * plans with the CPU's table and adds the batch's device copy */
    sharc_device *dev = NULL;
    if (cfg->train.device != 0 && sharc_device_open("cuda", sharc_launch_device_index("cuda"), &dev) != SHARC_OK)
        dev = NULL;
    sharc_model *m = NULL;
    SHARC_TRY(sharc_model_init(&m, &cfg->model, dev));
    sharc_status st = sharc_mesh_check_model(&cfg->mesh, sharc_model_get_config(m), cfg->train.seq_len);
    /* as the trainer: sp rank 0's slice, then (note [tp]) tp rank 0's part
     * (every rank's slices and parts have the same sizes) */
    if (st == SHARC_OK && sp > 1) st = sharc_model_set_sequence_parallel(m, sp, 0);
    if (st == SHARC_OK && tp > 1) st = sharc_model_set_tensor_parallel(m, tp, 0);
    if (st == SHARC_OK) st = sharc_model_freeze(m, cfg->freeze_module_prefix, cfg->trainable, NULL);
    /* note [bf16-acts]: before the engine's plan too (the blocks' gathered16, note [gathered16]) */
    if (st == SHARC_OK) sharc_model_set_param_dtype(m, fc->param_dtype);
    sharc_fsdp_plan_summary e;
    if (st == SHARC_OK)
        st = sharc_fsdp_plan_bytes(sharc_model_units(m), sharc_model_num_units(m), sharc_model_schedule(m), fc, S,
                                   p->shared, cfg->train.device != 0, &e);
    if (st == SHARC_OK) {
        const sharc_unit_spec *u = sharc_model_units(m);
        for (int i = 0; i < sharc_model_num_units(m); i++)
            for (int k = 0; k < u[i].nparams; k++) {
                p->nparams += u[i].params[k].numel;
                if (!u[i].params[k].frozen) p->ntrainable += u[i].params[k].numel;
            }
        for (int c = 0; c < SHARC_MEM_NCAT; c++) p->bytes[c] = e.bytes[c];
        p->bytes[SHARC_MEM_OPTIM] = 2 * (int64_t)sizeof(float) * e.trainable_shard;
        if (fc->cpu_offload) { /* note [shard-device]: shards, moments and the step in host memory */
            for (int c = 0; c < SHARC_MEM_NCAT; c++) p->host_bytes[c] = e.host_bytes[c];
            p->host_bytes[SHARC_MEM_OPTIM] = p->bytes[SHARC_MEM_OPTIM];
            p->bytes[SHARC_MEM_OPTIM] = 0;
            for (int c = 0; c < SHARC_MEM_NCAT; c++) p->host_total += p->host_bytes[c];
        }
        if (cfg->optim.offload_dir[0]) {
            p->offload_file = p->bytes[SHARC_MEM_OPTIM];
            /* the chunk buffers (note [optim-offload]): a chunk no larger than the largest unit's shard */
            int64_t chunk = sharc_offload_chunk_numel(&cfg->optim);
            if (e.max_trainable_shard < chunk) chunk = e.max_trainable_shard;
            p->bytes[SHARC_MEM_OPTIM] = 2 * (int64_t)sizeof(float) * chunk * sharc_offload_buffers(&cfg->optim);
        }
        int old = sharc_threads_get();
        sharc_threads_set(p->threads);
        if (cfg->fsdp.apply_tiled_mlp) sharc_model_set_tiled_mlp(m, cfg->fsdp.tiled_num_shards);
        p->bytes[SHARC_MEM_ACTIVATIONS] =
            sharc_model_activation_bytes(m, cfg->train.batch_size, Tl, cfg->fsdp.activation_checkpointing);
        if (cfg->train.device != 0 && !dev) /* note [device-batch] */
            p->bytes[SHARC_MEM_ACTIVATIONS] += sharc_model_device_batch_bytes(cfg->train.batch_size, Tl);
        sharc_threads_set(old);
        /* the MPI path's scratch (one per group, grown to its largest call):
         * a shard group across nodes reduce-scatters by all-to-all, one full
         * unit in reduce_dtype; a replicate group across nodes all-reduces
         * 16-bit gradients as padded pieces, (2 R + 1) pieces of a shard.
         * Host memory: in the table on the CPU only (note [comm-plan]) */
        const int64_t es = (int64_t)sharc_dtype_size(fc->reduce_dtype), Rr = world / S;
        const bool host = cfg->train.device == 0;
        if (host && !node_local && S > 1) p->bytes[SHARC_MEM_COMM] += e.max_padded * es;
        if (host && world > ranks_per_node && Rr > 1 && fc->reduce_dtype != SHARC_DT_F32) {
            int64_t piece = (e.max_trainable_shard + Rr - 1) / Rr;
            p->bytes[SHARC_MEM_COMM] += (2 * Rr * piece + piece) * 2;
        }
        int64_t A = cfg->train.grad_accum, N = (int64_t)cfg->train.batch_size * Tl;
        p->bytes[SHARC_MEM_OTHER] += 2 * A * N * (int64_t)sizeof(int32_t) + A * (int64_t)sizeof(int64_t);
        for (int c = 0; c < SHARC_MEM_NCAT; c++) p->total += p->bytes[c];
    }
    sharc_model_free(m);
    return st;
}

static double gib(int64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

void sharc_memplan_print(FILE *f, const sharc_memplan *p, const sharc_config *cfg, const int64_t *measured) {
    char tp_note[32] = "";
    if (p->tp > 1) snprintf(tp_note, sizeof tp_note, " x %d tp", p->tp);
    fprintf(f,
            "memory plan per rank: %s, %.3g parameters (%.3g trainable), %d rank%s (%s: %d shard x %d replicate%s%s), "
            "micro-batch %d x %d, activation checkpointing %s, %d thread%s\n",
            sharc_family_name(cfg->model.family), (double)p->nparams, (double)p->ntrainable, p->world,
            p->world > 1 ? "s" : "", sharc_sharding_name(cfg->fsdp.engine.strategy), p->dp_shard, p->dp_replicate,
            tp_note,
            p->shared       ? ", parameters shared per node"
            : p->node_local ? ""
                            : ", groups across nodes",
            cfg->train.batch_size, cfg->train.seq_len, cfg->fsdp.activation_checkpointing ? "on" : "off", p->threads,
            p->threads > 1 ? "s" : "");
    if (p->sp > 1) /* note [ulysses] */
        fprintf(f,
                "  mesh.sp %d (its ranks inside FSDP's groups): each rank holds %d of the %d tokens of a sequence; "
                "activations hold attention's head-sharded q/k/v and output at %d tokens and the all-to-all "
                "buffers\n",
                p->sp, cfg->train.seq_len / p->sp, cfg->train.seq_len, cfg->train.seq_len);
    /* note [post-forward] in src/fsdp/plan.c: the kept slices are gathered memory */
    int post = 1;
    if (sharc_fsdp_post_forward_size(&cfg->fsdp.engine, p->dp_shard, &post) == SHARC_OK && post > 1 &&
        post < p->dp_shard)
        fprintf(f, "  reshard_after_forward %d: each block keeps 1/%d of its parameters from forward to backward%s\n",
                post, post, p->shared ? " (none: the node's shared copy is read in place)" : " (in gathered)");
    if (p->offload_file > 0)
        fprintf(f,
                "  optim.offload_dir %s: the AdamW moments on disk, %.4f GiB per rank; optim is %d chunk buffer%s of "
                "%lld parameters (optim.offload_sub_group_size)\n",
                cfg->optim.offload_dir, gib(p->offload_file), sharc_offload_buffers(&cfg->optim),
                sharc_offload_buffers(&cfg->optim) > 1 ? "s" : "",
                (long long)(p->bytes[SHARC_MEM_OPTIM] / (8 * sharc_offload_buffers(&cfg->optim))));
    if (p->host_total > 0)
        fprintf(f,
                "  fsdp.cpu_offload: params %.4f, grads %.4f, optim %.4f GiB per rank (%.4f in all) in host memory, "
                "not in the table (the device's)\n",
                gib(p->host_bytes[SHARC_MEM_PARAMS]), gib(p->host_bytes[SHARC_MEM_GRADS]),
                gib(p->host_bytes[SHARC_MEM_OPTIM]), gib(p->host_total));
    if (measured) fprintf(f, "  %-12s %12s %12s %8s\n", "category", "plan GiB", "peak GiB", "peak/plan");
    else fprintf(f, "  %-12s %12s\n", "category", "plan GiB");
    int64_t mt = 0;
    for (int c = 0; c < SHARC_MEM_NCAT; c++) {
        const char *note = c == SHARC_MEM_OTHER ? "  (batch; the dataset is not planned)" : "";
        if (measured) {
            mt += measured[c];
            fprintf(f, "  %-12s %12.4f %12.4f %8.3f%s\n", sharc_mem_cat_name((sharc_mem_cat)c), gib(p->bytes[c]),
                    gib(measured[c]), p->bytes[c] > 0 ? (double)measured[c] / (double)p->bytes[c] : 0.0, note);
        } else {
            fprintf(f, "  %-12s %12.4f%s\n", sharc_mem_cat_name((sharc_mem_cat)c), gib(p->bytes[c]), note);
        }
    }
    if (measured) fprintf(f, "  %-12s %12.4f %12.4f\n", "total", gib(p->total), gib(mt));
    else fprintf(f, "  %-12s %12.4f\n", "total", gib(p->total));
}

/* The plan's total for `c` at `world` ranks, or -1 if it cannot be made. */
static int64_t total_of(const sharc_config *c, int world, int rpn, int threads) {
    sharc_memplan p;
    if (sharc_memplan_make(&p, c, world, rpn, threads) != SHARC_OK) return -1;
    return p.total;
}

bool sharc_memplan_suggest(FILE *f, const sharc_config *cfg, int world, int rpn, int threads, int64_t limit) {
    int64_t now = total_of(cfg, world, rpn, threads);
    if (now < 0) return false;
    if (now <= limit) {
        fprintf(f, "fits: %.2f GiB planned per rank, %.2f GiB available\n", gib(now), gib(limit));
        return true;
    }
    fprintf(f, "does not fit: %.2f GiB planned per rank, %.2f GiB available\n", gib(now), gib(limit));
    /* single changes, least intrusive first: none changes the model or its results but the last */
    sharc_config c = *cfg;
    if (!cfg->fsdp.activation_checkpointing) {
        c.fsdp.activation_checkpointing = true;
        int64_t t = total_of(&c, world, rpn, threads);
        if (t >= 0 && t <= limit) {
            fprintf(f, "smallest change: fsdp.activation_checkpointing: true (%.2f GiB)\n", gib(t));
            return true;
        }
        c = *cfg;
    }
    if (cfg->fsdp.engine.strategy != SHARC_SHARDING_FULL_SHARD || cfg->fsdp.engine.reshard_after_forward == 0) {
        c.fsdp.engine.strategy = SHARC_SHARDING_FULL_SHARD;
        c.fsdp.engine.reshard_after_forward = -1;
        int64_t t = total_of(&c, world, rpn, threads);
        if (t >= 0 && t <= limit) {
            fprintf(f, "smallest change: fsdp.sharding_strategy: FULL_SHARD (%.2f GiB)\n", gib(t));
            return true;
        }
        c = *cfg;
    }
    /* the same global batch in smaller micro-batches */
    for (int b = cfg->train.batch_size - 1; b >= 1; b--) {
        if (cfg->train.batch_size % b) continue;
        c.train.batch_size = b;
        c.train.grad_accum = cfg->train.grad_accum * (cfg->train.batch_size / b);
        int64_t t = total_of(&c, world, rpn, threads);
        if (t >= 0 && t <= limit) {
            fprintf(f,
                    "smallest change: train.batch_size: %d with train.grad_accum: %d (the same global batch; "
                    "%.2f GiB)\n",
                    b, c.train.grad_accum, gib(t));
            return true;
        }
    }
    c = *cfg;
    /* the moments on a local disk (note [optim-offload]): no change to results */
    if (!cfg->optim.offload_dir[0]) {
        snprintf(c.optim.offload_dir, sizeof c.optim.offload_dir, "DIR");
        sharc_memplan q;
        if (sharc_memplan_make(&q, &c, world, rpn, threads) == SHARC_OK && q.total <= limit) {
            fprintf(f,
                    "smallest change: optim.offload_dir: DIR, a directory on a local disk with %.2f GiB free per "
                    "rank (the AdamW moments; %.2f GiB)\n",
                    gib(q.offload_file), gib(q.total));
            return true;
        }
        c = *cfg;
    }
    /* more ranks, whole nodes (the global batch grows with them): double
     * until one fits (or the per-rank total stops shrinking: what does not
     * shard, activations and gathered units, stays), then the fewest
     * between the last two */
    int step = world >= rpn ? rpn : 1, lo = world, hi = 0;
    int64_t prev = now;
    for (int w = 2 * world; w <= (1 << 24); w *= 2) {
        int64_t t = total_of(&c, w, rpn, threads);
        if (t >= 0 && t <= limit) {
            hi = w;
            break;
        }
        if (t >= 0 && (double)t > 0.995 * (double)prev) break;
        if (t >= 0) prev = t;
        lo = w;
    }
    for (int w = lo + step; hi && w <= hi; w += step) {
        if (w > rpn && w % rpn) continue;
        int64_t t = total_of(&c, w, rpn, threads);
        if (t >= 0 && t <= limit) {
            fprintf(f,
                    "smallest change: %d ranks instead of %d (%.2f GiB per rank; the global batch grows with "
                    "them)\n",
                    w, world, gib(t));
            return true;
        }
    }
    fprintf(f, "no single change fits: try activation checkpointing together with a smaller micro-batch, or a "
               "smaller model\n");
    return false;
}
