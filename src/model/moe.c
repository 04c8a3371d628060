/* moe.c: the Mixture-of-Experts MLP of Qwen3-MoE layers (moe.h): its
 * parameters in a block unit, the router, the experts, the load-balancing
 * auxiliary loss, forward and backward. The routing kernels are the device
 * table's moe_* slots (sharc/kernels.h); the experts are the table's matmul
 * and SwiGLU kernels on each expert's rows.
 *
 * Note [moe]. A MoE layer replaces the block's SwiGLU MLP by (Hugging Face's
 * Qwen3MoeSparseMoeBlock):
 *
 *   logits = x Wr^T (N, E); p = softmax(logits) in fp32; (w, idx) = top-k(p);
 *   w /= sum(w) when norm_topk_prob;  y_t = sum_j w_tj SwiGLU_{idx_tj}(x_t)
 *
 * each expert a SwiGLU MLP of moe_intermediate_size I. Parameters, in HF's
 * on-disk names, follow the attention's in the block unit: the router
 * "mlp.gate.weight" (E, C), then per expert "mlp.experts.e.gate_proj",
 * "up_proj" (adjacent: one (2I, C) matmul) and "down_proj" (C, I); so every
 * expert of a layer is gathered with its block and the unit's gradient is
 * reduce-scattered once, whatever the routing (a unit holds at most
 * SHARC_MAX_UNIT_PARAMS parameters, which bounds E; config_check says so)
 * unless each expert is its own unit (note [moe-units] in model.c). These
 * are the MOE rows of Llama's table (note [param-table] in params.c).
 * Dense layers (mlp_only_layers, decoder_sparse_step) keep the SwiGLU MLP of
 * intermediate_size.
 *
 * Dispatch: the N K (token, slot) assignments are sorted by expert on the
 * host (a counting sort, stable, so rows stay in token order), each expert
 * runs its matmuls on its contiguous rows (an expert with no rows computes
 * nothing) and the outputs are scatter-added into y weighted by w. Backward
 * mirrors it; w's gradient is dy . (expert output), and flows into the router
 * through the renormalisation and the softmax; the top-k choice itself is
 * piecewise constant and has no gradient.
 *
 * Auxiliary loss (HF's load_balancing_loss_func, pooled over the M MoE
 * layers of the model, N tokens each): f_e = (assignments to e) / (M N),
 * P_e = (sum of p_e) / (M N), aux = E sum_e f_e P_e (= K for a uniform
 * router). With output_router_logits (false by default, as in HF, where
 * Qwen3-MoE training adds it only then) the objective is
 * lm_loss + router_aux_loss_coef * aux: per micro-batch, weighted by its
 * tokens (N * loss_scale, so one micro-batch on one rank is HF's loss
 * exactly), its gradient through P only (f counts, as in HF). forward_backward
 * adds coef * aux * N to its loss sum so the trainer's mean reports it;
 * evaluation (forward_loss) reports the language-model loss alone.
 *
 * Note [tp-moe]. Expert tensor parallelism (torchtitan's "expert tensor
 * parallel", Megatron's plan of note [tp] in tp.h applied to every expert):
 * under tp P, tp rank j holds rows [j I/P, (j+1) I/P) of each expert's
 * gate_proj and up_proj (column-parallel; adjacent in the unit, so one
 * (2 I/P, C) matmul as before) and the matching columns of its down_proj
 * (row-parallel), I = moe_intermediate_size; the router stays replicated.
 * Routing runs on every tp rank alike and gives the same bits there: its
 * input is ln2 of the residual stream, which every earlier all-reduce left
 * identical on the tp ranks (an all-reduce returns one result to all its
 * ranks), the router's weights are replicated and stay equal (their
 * gradient is, below), and the router's matmul, softmax, top-k and the
 * host's counting sort are deterministic functions of those bits; so every
 * tp rank dispatches the same rows to the same experts. Each rank's expert
 * outputs o are partial sums over its I/P columns, so the combined y is a
 * partial sum, all-reduced over tp once by the block (the "g" of the
 * dense MLP). Backward: d(expert out) = w dy needs only the replicated dy;
 * dw = dy . o is partial, so dwts (N K floats) is all-reduced over tp
 * before the router's backward, which then computes the same d logits,
 * router gradient (no reduction of its own, as the norms') and router dx on
 * every tp rank; the experts' dx is partial, so the router's dx is added
 * by tp rank 0 only and the block's "f" all-reduce sums the rest. The
 * auxiliary loss reads counts and router sums, equal on the tp ranks, so
 * every tp rank has the group's value and the trainer counts it once, as
 * the language-model loss (note [loss-normalization]); its gradient enters
 * through the replicated d logits, once. Per MoE block and micro-batch:
 * N C floats forward, N C + N K backward.
 *
 * Note [moe-waits]. A sparse layer's forward makes the host wait once: for
 * its (N, K) routing indices, which the host's counting sort turns into the
 * per-expert row counts that size the expert matmuls (and into count[l] for
 * the aux loss's f). Nothing else in routing or backward waits:
 *  - h_idx is pinned (sharc_device_host_alloc), so its copy queues like a
 *    kernel and the one synchronize after it is the wait;
 *  - the router sums P: the moe_prob_sum slot writes layer l's E sums into
 *    d_psum (device doubles; one thread per expert walks t ascending with a
 *    double accumulator, the loop the host ran on the copied probabilities,
 *    so the sums, the aux loss and its gradient are bit-identical to the
 *    host's). The last MoE layer queues the copy of all L E sums into the
 *    pinned psum just before its indices, so the same wait brings them: no
 *    read of its own, and psum is whole once the forward is done (an
 *    activation-checkpointing recompute rewrites it with the same bits);
 *  - perm and rows are copied in from pageable host arrays (malloc): the
 *    device layer's copy from pageable memory takes the bytes at the call
 *    (CUDA stages them before cudaMemcpyAsync returns; the CPU copies at
 *    once), so rewriting them in the next layer cannot race. Were they
 *    pinned, it still could not: every rewrite follows the next route's
 *    synchronize of the same stream, which drains these copies first;
 *  - backward_begin's daux (E floats) comes from h_daux, pageable too and
 *    written again only at the next micro-batch's backward_begin;
 *  - note [moe-rig]'s test hook is a bias on the router matmul, copied in
 *    once at plan time.
 * The buffers new here (psum, d_psum, h_idx, the rig bias) count under
 * SHARC_MEM_OTHER, outside the activation plan, like the model's loss sums.
 * tests/cli/cudasim_options.sh asserts the count on the simulator. */
#include "moe.h"
#include "sharc/fault.h"
#include "sharc/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *probs, *wts, *wsel;  /* (N, E), (N, K), (N K) w sorted by expert */
    float *xs, *h, *a, *o;      /* (N K, C), (N K, 2I), (N K, I), (N K, C): by expert */
    int32_t *idx, *perm, *rows; /* (N, K), (N K) slot of each sorted row, (N K) its token */
    int64_t *offs;              /* host (E + 1): expert e's rows [offs[e], offs[e+1]) */
} moe_set;

struct sharc_moe {
    sharc_model_config cfg;
    sharc_device *dev;
    int L, E, K, I, C, M; /* M: MoE layers; I: this tp rank's columns of each expert (note [tp-moe]) */
    int tp_rank;          /* note [tp-moe] */
    sharc_tp_link *tpl;   /* borrowed: the model's tp link; NULL without tp */
    int l_last;           /* the last MoE layer: its routing reads every layer's psum back */
    int64_t *count;       /* host (L, E): assignments per expert in the last forward */
    double *psum;         /* pinned host (L, E): router probabilities summed over tokens (note [moe-waits]) */
    double *d_psum;       /* device (L, E): the same, written by the moe_prob_sum slot */
    float *h_daux;        /* host (E): the aux loss's dp, the source of an unsynchronized copy */
    int64_t n_last;       /* rows of the last forward */
    float wa;             /* the aux loss's gradient weight this backward (0: none) */
    /* plan */
    int64_t N;
    int nsets;
    moe_set *sets;
    float *logits, *dos, *da, *dh, *dxs, *dwsel, *dwts, *dxr, *daux;
    float *rig;               /* device (E): note [moe-rig]'s router bias; NULL unless the hook is on */
    int32_t *h_idx;           /* pinned host (N K): the routing indices read back */
    int32_t *h_perm, *h_rows; /* host (N K): the dispatch plan, copied in (note [moe-waits]) */
    float **views;            /* (4E) gate_up and down pointers of the two views handed out */
    int nview;
};


sharc_status sharc_moe_config_check(const sharc_model_config *c, int base, int router, int per_expert) {
    if (c->num_experts < 0)
        return sharc_error(SHARC_ERR_INVALID, "model.num_experts: %d, expected >= 0 (0: dense MLPs)", c->num_experts);
    if (c->decoder_sparse_step < 0)
        return sharc_error(SHARC_ERR_INVALID, "model.decoder_sparse_step: %d, expected >= 1", c->decoder_sparse_step);
    for (const char *p = c->mlp_only_layers; *p;) { /* a list of layer indices */
        if (*p == ',' || *p == ' ' || *p == '[' || *p == ']') {
            p++;
            continue;
        }
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= c->num_layers)
            return sharc_error(SHARC_ERR_INVALID,
                               "model.mlp_only_layers: '%s' is not a list of layer indices in [0, %d) (e.g. [1, 3])",
                               c->mlp_only_layers, c->num_layers);
        p = end;
    }
    if (c->num_experts == 0) return SHARC_OK;
    if (c->family != SHARC_FAMILY_LLAMA)
        return sharc_error(SHARC_ERR_INVALID, "model.num_experts: %d, experts are a llama-family option (Qwen3-MoE)",
                           c->num_experts);
    if (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts)
        return sharc_error(SHARC_ERR_INVALID, "model.num_experts_per_tok: %d, expected 1 .. model.num_experts (%d)",
                           c->num_experts_per_tok, c->num_experts);
    if (c->moe_intermediate_size < 1)
        return sharc_error(SHARC_ERR_INVALID,
                           "model.moe_intermediate_size: %d, expected >= 1 with model.num_experts %d",
                           c->moe_intermediate_size, c->num_experts);
    if (!(c->router_aux_loss_coef >= 0.0f))
        return sharc_error(SHARC_ERR_INVALID, "model.router_aux_loss_coef: %g, expected >= 0",
                           (double)c->router_aux_loss_coef);
    int n = base + router + per_expert * c->num_experts;
    if (c->experts_as_units) return SHARC_OK; /* note [moe-units]: the block holds the router alone */
    if (n > SHARC_MAX_UNIT_PARAMS)
        return sharc_error(
            SHARC_ERR_INVALID,
            "model.num_experts: %d experts make %d parameters in a block unit, at most %d (a layer's "
            "experts live in its block unit); use at most %d experts, or fsdp.wrap_policy.moe_experts: true",
            c->num_experts, n, SHARC_MAX_UNIT_PARAMS, (SHARC_MAX_UNIT_PARAMS - base - router) / per_expert);
    return SHARC_OK;
}

sharc_status sharc_moe_init(sharc_moe **out, const sharc_model_config *c, sharc_device *dev) {
    *out = NULL;
    int M = 0;
    for (int l = 0; l < c->num_layers; l++) M += sharc_model_layer_is_moe(c, l);
    if (M == 0) return SHARC_OK;
    const sharc_kernels *k = sharc_device_kernels(dev);
    if (!k->moe_route_forward || !k->moe_route_backward || !k->moe_gather || !k->moe_scatter_add || !k->moe_row_dot ||
        !k->moe_prob_sum)
        return sharc_error(SHARC_ERR_UNSUPPORTED,
                           "model.num_experts: device %s has no Mixture-of-Experts kernels yet; use train.device cpu",
                           sharc_device_name(dev));
    sharc_moe *moe = calloc(1, sizeof *moe);
    if (!moe) return sharc_error(SHARC_ERR_NOMEM, "model: out of memory");
    moe->cfg = *c;
    moe->dev = dev;
    moe->L = c->num_layers;
    moe->E = c->num_experts;
    moe->K = c->num_experts_per_tok;
    moe->I = c->moe_intermediate_size;
    moe->C = c->embed_dim;
    moe->M = M;
    for (int l = 0; l < c->num_layers; l++)
        if (sharc_model_layer_is_moe(c, l)) moe->l_last = l;
    size_t LE = (size_t)moe->L * moe->E;
    moe->count = calloc(LE, sizeof(int64_t));
    /* not activations (not in the plan), like the model's loss sums */
    moe->psum = sharc_device_host_alloc(dev, LE * sizeof(double), SHARC_MEM_OTHER);
    moe->d_psum = sharc_device_alloc(dev, LE * sizeof(double), SHARC_MEM_OTHER);
    moe->h_daux = malloc(sizeof(float) * (size_t)moe->E);
    moe->views = calloc((size_t)4 * moe->E, sizeof(float *));
    if (moe->psum) memset(moe->psum, 0, LE * sizeof(double));
    if (!moe->count || !moe->psum || !moe->d_psum || !moe->h_daux || !moe->views ||
        sharc_device_memset0(dev, moe->d_psum, LE * sizeof(double), sharc_device_stream(dev)) != SHARC_OK) {
        sharc_moe_free(moe);
        return sharc_error(SHARC_ERR_NOMEM, "model: out of memory");
    }
    *out = moe;
    return SHARC_OK;
}

void sharc_moe_unplan(sharc_moe *moe) {
    if (!moe) return;
    for (int i = 0; i < moe->nsets; i++) {
        moe_set *st = &moe->sets[i];
        void *b[] = {st->probs, st->wts, st->wsel, st->xs, st->h, st->a, st->o, st->idx, st->perm, st->rows};
        for (size_t j = 0; j < sizeof b / sizeof b[0]; j++) sharc_device_free(moe->dev, b[j]);
        free(st->offs);
    }
    free(moe->sets);
    moe->sets = NULL;
    moe->nsets = 0;
    void *b[] = {moe->logits, moe->dos,  moe->da,  moe->dh,   moe->dxs,
                 moe->dwsel,  moe->dwts, moe->dxr, moe->daux, moe->rig};
    for (size_t j = 0; j < sizeof b / sizeof b[0]; j++) sharc_device_free(moe->dev, b[j]);
    moe->logits = moe->dos = moe->da = moe->dh = moe->dxs = moe->dwsel = moe->dwts = moe->dxr = moe->daux = NULL;
    moe->rig = NULL;
    sharc_device_host_free(moe->dev, moe->h_idx);
    free(moe->h_perm);
    free(moe->h_rows);
    moe->h_idx = moe->h_perm = moe->h_rows = NULL;
    moe->N = 0;
}

void sharc_moe_free(sharc_moe *moe) {
    if (!moe) return;
    sharc_moe_unplan(moe);
    free(moe->count);
    sharc_device_host_free(moe->dev, moe->psum);
    sharc_device_free(moe->dev, moe->d_psum);
    free(moe->h_daux);
    free(moe->views);
    free(moe);
}

/* Floats of one set and of the shared buffers (int32 buffers count as floats). */
static int64_t set_floats(const sharc_moe *m, int64_t N) {
    int64_t NK = N * m->K;
    return N * m->E + N * m->K + NK + NK * m->C + NK * 2 * m->I + NK * m->I + NK * m->C + N * m->K + 2 * NK;
}
static int64_t shared_floats(const sharc_moe *m, int64_t N) {
    int64_t NK = N * m->K;
    return N * m->E + NK * m->C + NK * m->I + NK * 2 * m->I + NK * m->C + 2 * NK + N * m->C + m->E;
}

int64_t sharc_moe_activation_bytes(const sharc_moe *moe, int64_t N, int nsets) {
    if (!moe) return 0;
    return (set_floats(moe, N) * nsets + shared_floats(moe, N)) * (int64_t)sizeof(float);
}

static void *dalloc(sharc_moe *m, int64_t n, bool *ok) {
    void *p = sharc_device_alloc(m->dev, (size_t)n * sizeof(float), SHARC_MEM_ACTIVATIONS);
    if (!p) *ok = false;
    return p;
}

/* Note [moe-rig]: the test hook SHARC_TEST_MOE_RIG=G (sharc/fault.h) adds
 * -1e4 to the logits of every expert e with e % G != rank % G, so each
 * rank's tokens go to a disjoint set of experts. It is the router matmul's
 * bias (E floats copied in once, here): 0 leaves a logit's bits as they
 * are, and exp(-1e4) is 0 in fp32 whichever way the -1e4 was rounded in. The
 * constant has no gradient, so backward is the same code. */
static sharc_status rig_plan(sharc_moe *moe) {
    int G = sharc_fault_route_groups(), r = sharc_log_rank();
    if (G <= 1) return SHARC_OK;
    float *h = malloc(sizeof(float) * (size_t)moe->E);
    moe->rig = sharc_device_alloc(moe->dev, sizeof(float) * (size_t)moe->E, SHARC_MEM_OTHER);
    sharc_status st = h && moe->rig ? SHARC_OK : SHARC_ERR_NOMEM;
    if (st == SHARC_OK) {
        for (int e = 0; e < moe->E; e++) h[e] = e % G != r % G ? -1e4f : 0.0f;
        st = sharc_device_copy(moe->dev, moe->rig, h, sizeof(float) * (size_t)moe->E, SHARC_COPY_HOST_TO_DEVICE,
                               sharc_device_stream(moe->dev));
        if (st == SHARC_OK) st = sharc_device_synchronize(sharc_device_stream(moe->dev));
    }
    free(h);
    return st;
}

void sharc_moe_set_tp(sharc_moe *moe, int tp, int rank, sharc_tp_link *link) {
    if (!moe) return;
    SHARC_CHECK(tp >= 1 && moe->cfg.moe_intermediate_size % tp == 0 && !moe->sets);
    moe->I = moe->cfg.moe_intermediate_size / tp;
    moe->tp_rank = rank;
    moe->tpl = tp > 1 ? link : NULL;
}

sharc_status sharc_moe_plan(sharc_moe *moe, int64_t N, int nsets) {
    if (!moe) return SHARC_OK;
    sharc_moe_unplan(moe);
    int64_t NK = N * moe->K, E = moe->E, C = moe->C, I = moe->I;
    bool ok = true;
    moe->sets = calloc((size_t)nsets, sizeof(moe_set));
    if (!moe->sets) return sharc_error(SHARC_ERR_NOMEM, "model: out of memory");
    moe->nsets = nsets;
    moe->N = N;
    for (int i = 0; i < nsets; i++) {
        moe_set *st = &moe->sets[i];
        st->probs = dalloc(moe, N * E, &ok);
        st->wts = dalloc(moe, N * moe->K, &ok);
        st->wsel = dalloc(moe, NK, &ok);
        st->xs = dalloc(moe, NK * C, &ok);
        st->h = dalloc(moe, NK * 2 * I, &ok);
        st->a = dalloc(moe, NK * I, &ok);
        st->o = dalloc(moe, NK * C, &ok);
        st->idx = dalloc(moe, N * moe->K, &ok);
        st->perm = dalloc(moe, NK, &ok);
        st->rows = dalloc(moe, NK, &ok);
        st->offs = calloc((size_t)E + 1, sizeof(int64_t));
        if (!st->offs) ok = false;
    }
    moe->logits = dalloc(moe, N * E, &ok);
    moe->dos = dalloc(moe, NK * C, &ok);
    moe->da = dalloc(moe, NK * I, &ok);
    moe->dh = dalloc(moe, NK * 2 * I, &ok);
    moe->dxs = dalloc(moe, NK * C, &ok);
    moe->dwsel = dalloc(moe, NK, &ok);
    moe->dwts = dalloc(moe, NK, &ok);
    moe->dxr = dalloc(moe, N * C, &ok);
    moe->daux = dalloc(moe, E, &ok);
    moe->h_idx = sharc_device_host_alloc(moe->dev, sizeof(int32_t) * (size_t)NK, SHARC_MEM_OTHER);
    moe->h_perm = malloc(sizeof(int32_t) * (size_t)NK);
    moe->h_rows = malloc(sizeof(int32_t) * (size_t)NK);
    if (ok && !moe->h_idx) ok = false;
    if (ok && rig_plan(moe) != SHARC_OK) ok = false;
    if (!ok || !moe->h_perm || !moe->h_rows) {
        sharc_moe_unplan(moe);
        return sharc_error(SHARC_ERR_NOMEM, "model: cannot allocate the experts' activations for %lld tokens",
                           (long long)N);
    }
    return SHARC_OK;
}

sharc_moe_view sharc_moe_view_of(sharc_moe *moe, const sharc_unit_spec *u, const sharc_unit_roles *r, float *base,
                                 bool grads) {
    int E = moe->E;
    float **v = moe->views + (size_t)(moe->nview++ % 2) * 2 * E; /* two views (weights, grads) live at once */
    sharc_moe_view w = {.gate_up = v, .down = v + E};
    w.router = sharc_params_at(u, r, SHARC_ROLE_ROUTER, base, grads);
    if (moe->cfg.experts_as_units) return w; /* note [moe-units]: experts in their own units */
    /* expert e's rows: expert 0's, e strides further (the stride: gate to the next expert's gate) */
    int g0 = r->at[SHARC_ROLE_EXPERT_GATE], stride = (u->nparams - g0) / E;
    SHARC_CHECK(g0 >= 0 && r->at[SHARC_ROLE_EXPERT_DOWN] > g0 && g0 + stride * E == u->nparams);
    sharc_unit_roles one = *r;
    for (int e = 0; e < E; e++) {
        w.gate_up[e] = sharc_params_at(u, &one, SHARC_ROLE_EXPERT_GATE, base, grads);
        w.down[e] = sharc_params_at(u, &one, SHARC_ROLE_EXPERT_DOWN, base, grads);
        one.at[SHARC_ROLE_EXPERT_GATE] = (int8_t)(one.at[SHARC_ROLE_EXPERT_GATE] + stride);
        one.at[SHARC_ROLE_EXPERT_DOWN] = (int8_t)(one.at[SHARC_ROLE_EXPERT_DOWN] + stride);
    }
    return w;
}

/* A copy on the step's stream that does not wait (note [moe-waits]). */
static void copy_or_die(sharc_moe *m, void *dst, const void *src, size_t bytes, sharc_copy_kind kind, sharc_stream *s) {
    if (sharc_device_copy(m->dev, dst, src, bytes, kind, s) != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "model: experts' routing copy: %s", sharc_last_error());
}

void sharc_moe_route(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int l, const float *router,
                     const float *x, int64_t N) {
    SHARC_CHECK(set >= 0 && set < moe->nsets && N <= moe->N);
    moe_set *st = &moe->sets[set];
    const int E = moe->E, K = moe->K, C = moe->C;
    const int64_t NK = N * K;
    k->matmul_forward(s, moe->logits, x, router, moe->rig, N, C, E); /* rig: NULL unless note [moe-rig] */
    k->moe_route_forward(s, st->probs, st->idx, st->wts, moe->logits, N, E, K, moe->cfg.norm_topk_prob);
    /* the router's statistics for the auxiliary loss, on the device; the
     * last MoE layer reads every layer's back with its indices */
    k->moe_prob_sum(s, moe->d_psum + (int64_t)l * E, st->probs, N, E);
    if (l == moe->l_last)
        copy_or_die(moe, moe->psum, moe->d_psum, sizeof(double) * (size_t)moe->L * (size_t)E, SHARC_COPY_DEVICE_TO_HOST,
                    s);
    /* the dispatch plan, on the host: a stable counting sort of the slots by
     * expert. The layer's one host wait (note [moe-waits]). */
    copy_or_die(moe, moe->h_idx, st->idx, sizeof(int32_t) * (size_t)NK, SHARC_COPY_DEVICE_TO_HOST, s);
    if (sharc_device_synchronize(s) != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "model: experts' routing indices: %s", sharc_last_error());
    int64_t *offs = st->offs;
    memset(offs, 0, sizeof(int64_t) * (size_t)(E + 1));
    for (int64_t i = 0; i < NK; i++) {
        SHARC_CHECK(moe->h_idx[i] >= 0 && moe->h_idx[i] < E);
        offs[moe->h_idx[i] + 1]++;
    }
    for (int e = 0; e < E; e++) {
        moe->count[(int64_t)l * E + e] = offs[e + 1];
        offs[e + 1] += offs[e];
    }
    int64_t *next = calloc((size_t)E, sizeof(int64_t));
    SHARC_CHECK(next != NULL);
    for (int64_t i = 0; i < NK; i++) {
        int e = moe->h_idx[i];
        int64_t at = offs[e] + next[e]++;
        moe->h_perm[at] = (int32_t)i;
        moe->h_rows[at] = (int32_t)(i / K);
    }
    free(next);
    /* from pageable memory: the bytes are taken at the call (note [moe-waits]) */
    copy_or_die(moe, st->perm, moe->h_perm, sizeof(int32_t) * (size_t)NK, SHARC_COPY_HOST_TO_DEVICE, s);
    copy_or_die(moe, st->rows, moe->h_rows, sizeof(int32_t) * (size_t)NK, SHARC_COPY_HOST_TO_DEVICE, s);
    k->moe_gather(s, st->wsel, st->wts, st->perm, NULL, NK, 1);
    k->moe_gather(s, st->xs, x, st->rows, NULL, NK, C);
    moe->n_last = N;
}

int64_t sharc_moe_expert_rows(const sharc_moe *moe, int set, int e) {
    const int64_t *offs = moe->sets[set].offs;
    return offs[e + 1] - offs[e];
}

void sharc_moe_expert_forward(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int e,
                              const float *gate_up, const float *down) {
    moe_set *st = &moe->sets[set];
    const int C = moe->C, I = moe->I;
    int64_t o0 = st->offs[e], n = st->offs[e + 1] - o0;
    if (n == 0) return; /* an idle expert computes nothing; its parameters were gathered all the same */
    k->matmul_forward(s, st->h + o0 * 2 * I, st->xs + o0 * C, gate_up, NULL, n, C, 2 * I);
    k->swiglu_forward(s, st->a + o0 * I, st->h + o0 * 2 * I, n, I);
    k->matmul_forward(s, st->o + o0 * C, st->a + o0 * I, down, NULL, n, I, C);
}

void sharc_moe_combine(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, float *y, int64_t N) {
    moe_set *st = &moe->sets[set];
    k->fill(s, y, 0.0f, N * moe->C);
    k->moe_scatter_add(s, y, st->o, st->rows, st->wsel, N * moe->K, moe->C);
}

void sharc_moe_forward(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int l, const sharc_moe_view *w,
                       float *y, const float *x, int64_t N) {
    sharc_moe_route(moe, k, s, set, l, w->router, x, N);
    for (int e = 0; e < moe->E; e++) sharc_moe_expert_forward(moe, k, s, set, e, w->gate_up[e], w->down[e]);
    sharc_moe_combine(moe, k, s, set, y, N);
}

/* f_e and P_e pooled over the MoE layers (note [moe]). */
static void pooled(const sharc_moe *moe, int e, double *f, double *P) {
    double c = 0.0, p = 0.0, tokens = (double)moe->M * (double)moe->n_last;
    for (int l = 0; l < moe->L; l++)
        if (sharc_model_layer_is_moe(&moe->cfg, l)) {
            c += (double)moe->count[(int64_t)l * moe->E + e];
            p += moe->psum[(int64_t)l * moe->E + e];
        }
    *f = tokens > 0 ? c / tokens : 0.0;
    *P = tokens > 0 ? p / tokens : 0.0;
}

double sharc_moe_aux_loss(const sharc_moe *moe) {
    if (!moe) return 0.0;
    double aux = 0.0;
    for (int e = 0; e < moe->E; e++) {
        double f, P;
        pooled(moe, e, &f, &P);
        aux += f * P;
    }
    return aux * moe->E;
}

double sharc_moe_loss_term(const sharc_moe *moe) {
    if (!moe || !moe->cfg.output_router_logits) return 0.0;
    return (double)moe->cfg.router_aux_loss_coef * sharc_moe_aux_loss(moe) * (double)moe->n_last;
}

int sharc_moe_idle_experts(const sharc_moe *moe) {
    int n = 0;
    if (!moe) return 0;
    for (int l = 0; l < moe->L; l++)
        if (sharc_model_layer_is_moe(&moe->cfg, l))
            for (int e = 0; e < moe->E; e++) n += moe->count[(int64_t)l * moe->E + e] == 0;
    return n;
}

void sharc_moe_backward_begin(sharc_moe *moe, sharc_stream *s, float loss_scale) {
    if (!moe) return;
    moe->wa = moe->cfg.output_router_logits ? moe->cfg.router_aux_loss_coef * (float)moe->n_last * loss_scale : 0.0f;
    if (moe->wa == 0.0f) return;
    /* d (wa aux) / d p_{l,t,e} = wa E f_e / (M N); h lives with moe (note [moe-waits]) */
    float *h = moe->h_daux;
    for (int e = 0; e < moe->E; e++) {
        double f, P;
        pooled(moe, e, &f, &P);
        h[e] = (float)((double)moe->wa * moe->E * f / ((double)moe->M * (double)moe->n_last));
    }
    copy_or_die(moe, moe->daux, h, sizeof(float) * (size_t)moe->E, SHARC_COPY_HOST_TO_DEVICE, s);
}

void sharc_moe_backward_dispatch(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, const float *dy) {
    moe_set *st = &moe->sets[set];
    const int64_t NK = moe->n_last * moe->K;
    k->moe_gather(s, moe->dos, dy, st->rows, st->wsel, NK, moe->C); /* d(expert output) = w dy */
    k->moe_row_dot(s, moe->dwsel, dy, st->rows, st->o, NK, moe->C); /* d w = dy . expert output */
}

void sharc_moe_expert_backward(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int e,
                               const float *gate_up, const float *down, float *g_gate_up, float *g_down) {
    moe_set *st = &moe->sets[set];
    const int C = moe->C, I = moe->I;
    int64_t o0 = st->offs[e], n = st->offs[e + 1] - o0;
    if (n == 0) return; /* no rows: a zero gradient, reduce-scattered all the same */
    k->matmul_backward(s, moe->da + o0 * I, g_down, NULL, moe->dos + o0 * C, st->a + o0 * I, down, n, I, C);
    k->swiglu_backward(s, moe->dh + o0 * 2 * I, moe->da + o0 * I, st->h + o0 * 2 * I, n, I);
    k->matmul_backward(s, moe->dxs + o0 * C, g_gate_up, NULL, moe->dh + o0 * 2 * I, st->xs + o0 * C, gate_up, n, C,
                       2 * I);
}

void sharc_moe_backward_router(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, const float *router,
                               float *g_router, float *dx, const float *x) {
    moe_set *st = &moe->sets[set];
    const int E = moe->E, K = moe->K, C = moe->C;
    const int64_t N = moe->n_last, NK = N * K;
    k->fill(s, dx, 0.0f, N * C);
    k->moe_scatter_add(s, dx, moe->dxs, st->rows, NULL, NK, C);
    k->fill(s, moe->dwts, 0.0f, NK);
    k->moe_scatter_add(s, moe->dwts, moe->dwsel, st->perm, NULL, NK, 1);
    if (moe->tpl) sharc_tp_all_reduce(moe->tpl, s, moe->dwts, NK); /* note [tp-moe]: dw from partial outputs */
    k->moe_route_backward(s, moe->logits, moe->dwts, st->probs, st->idx, st->wts, moe->wa != 0.0f ? moe->daux : NULL, N,
                          E, K, moe->cfg.norm_topk_prob);
    k->matmul_backward(s, moe->dxr, g_router, NULL, moe->logits, x, router, N, C, E);
    if (moe->tp_rank == 0) k->add(s, dx, dx, moe->dxr, N * C); /* note [tp-moe]: once, before the f all-reduce */
}

void sharc_moe_backward(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int l,
                        const sharc_moe_view *w, const sharc_moe_view *g, float *dx, const float *dy, const float *x) {
    (void)l;
    sharc_moe_backward_dispatch(moe, k, s, set, dy);
    for (int e = 0; e < moe->E; e++)
        sharc_moe_expert_backward(moe, k, s, set, e, w->gate_up[e], w->down[e], g->gate_up[e], g->down[e]);
    sharc_moe_backward_router(moe, k, s, set, w->router, g->router, dx, x);
}

bool sharc_moe_expert_idle(const sharc_moe *moe, int l, int e) {
    return moe && sharc_model_layer_is_moe(&moe->cfg, l) && moe->count[(int64_t)l * moe->E + e] == 0;
}
