/* moe.h: the Mixture-of-Experts MLP of a Qwen3-MoE layer (src/model/moe.c),
 * used by model.c. Internal to src/model/. The math, the unit layout and the
 * auxiliary loss are note [moe] in moe.c. */
#ifndef SHARC_MODEL_MOE_H
#define SHARC_MODEL_MOE_H

#include "sharc/device.h"
#include "sharc/kernels.h"
#include "sharc/model.h"
#include "sharc/status.h"
#include "sharc/units.h"
#include "params.h"
#include "tp.h"

#include <stdint.h>

typedef struct sharc_moe sharc_moe;

/* The check of the MoE keys; errors name the key. A block unit of an MoE
 * layer holds `base` parameters, the router's `router` and `per_expert` for
 * each expert (note [param-table] in params.c; the experts not under note
 * [moe-units]). */
sharc_status sharc_moe_config_check(const sharc_model_config *c, int base, int router, int per_expert);

/* NULL (and SHARC_OK) when the config has no MoE layer. */
sharc_status sharc_moe_init(sharc_moe **out, const sharc_model_config *c, sharc_device *dev);
void sharc_moe_free(sharc_moe *moe);
/* Note [tp-moe] in moe.c: this rank's part `rank` of tp (each expert's
 * moe_intermediate_size / tp columns) and the tp group's link (borrowed,
 * the model's; its group may be set later). Before sharc_moe_plan. */
void sharc_moe_set_tp(sharc_moe *moe, int tp, int rank, sharc_tp_link *link);
/* Activations for nsets sets of N tokens (the block's sets); bytes without allocating. */
int64_t sharc_moe_activation_bytes(const sharc_moe *moe, int64_t N, int nsets);
sharc_status sharc_moe_plan(sharc_moe *moe, int64_t N, int nsets);
void sharc_moe_unplan(sharc_moe *moe);

/* One MoE layer's weights (or gradients: NULL where frozen or absent),
 * inside block unit spec u's buffer base, found by the unit's roles (expert
 * e's rows follow expert 0's, e times the expert's row count further). */
typedef struct {
    float *router;   /* (E, C) */
    float **gate_up; /* (E) each (2I, C): gate then up */
    float **down;    /* (E) each (C, I) */
} sharc_moe_view;
sharc_moe_view sharc_moe_view_of(sharc_moe *moe, const sharc_unit_spec *u, const sharc_unit_roles *r, float *base,
                                 bool grads);

/* Forward of layer l over N rows of x (N, C) into y (N, C) (=), keeping set
 * `set` for backward; the router's statistics of layer l are recorded for the
 * auxiliary loss. */
void sharc_moe_forward(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int l, const sharc_moe_view *w,
                       float *y, const float *x, int64_t N);
/* The phases of sharc_moe_forward, for a model that gathers each expert's
 * own unit between them (note [moe-units]): route (the router's logits,
 * top-k, the dispatch plan; the statistics of layer l), each expert e's
 * rows (expert_rows of them, maybe 0: then nothing is computed), combine
 * into y (N, C). Backward: dispatch (from dy), each expert's backward (the
 * gradients accumulated, NULL where frozen), then router: dx (=) and the
 * router's gradient. */
void sharc_moe_route(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int l, const float *router,
                     const float *x, int64_t N);
int64_t sharc_moe_expert_rows(const sharc_moe *moe, int set, int e);
void sharc_moe_expert_forward(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int e,
                              const float *gate_up, const float *down);
void sharc_moe_combine(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, float *y, int64_t N);
void sharc_moe_backward_dispatch(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, const float *dy);
void sharc_moe_expert_backward(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int e,
                               const float *gate_up, const float *down, float *g_gate_up, float *g_down);
void sharc_moe_backward_router(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, const float *router,
                               float *g_router, float *dx, const float *x);
/* After a forward over all layers: the auxiliary loss of this micro-batch,
 * and the term forward_backward adds to its loss sum (note [moe]). */
double sharc_moe_aux_loss(const sharc_moe *moe);
double sharc_moe_loss_term(const sharc_moe *moe);
/* Before the blocks' backward: the auxiliary loss's gradient weight (loss_scale, note [moe]). */
void sharc_moe_backward_begin(sharc_moe *moe, sharc_stream *s, float loss_scale);
/* Backward of layer l: dx (N, C) = d loss / d x (=) from dy (N, C), the
 * weight gradients accumulated (+=) into g. Uses set `set` of the last forward. */
void sharc_moe_backward(sharc_moe *moe, const sharc_kernels *k, sharc_stream *s, int set, int l,
                        const sharc_moe_view *w, const sharc_moe_view *g, float *dx, const float *dy, const float *x);
/* Experts of the last forward that received no token, over all MoE layers. */
int sharc_moe_idle_experts(const sharc_moe *moe);
/* Expert e of layer l received no token in the last forward. */
bool sharc_moe_expert_idle(const sharc_moe *moe, int l, int e);

#endif
