/* tp.c: sharc_tp_*, tensor parallelism's all-reduce on the model's device
 * (note [tp] in tp.h; the split of the parameters is their rows' in
 * src/model/params.c, note [param-table]) and the vocabulary-parallel LM
 * head with cross-entropy (note [tp-vocab] in tp.h), its element work in
 * the kernel table's vocab_* slots. */
#include "tp.h"
#include "sharc/log.h"
#include "sharc/prof.h"

#include <math.h>
#include <string.h>

sharc_status sharc_tp_link_init(sharc_tp_link *l, sharc_comm *group, sharc_device *dev) {
    sharc_tp_link_free(l);
    l->group = group;
    l->dev = dev;
    l->direct = true;
    if (group && !sharc_device_is_host(dev)) return sharc_comm_takes_device(group, &l->direct);
    return SHARC_OK;
}

void sharc_tp_link_free(sharc_tp_link *l) {
    if (l->stage) sharc_device_host_free(l->dev, l->stage);
    memset(l, 0, sizeof *l);
}

/* note [comm-staging]: through a pinned host buffer (send and receive), grown on demand */
static sharc_status stage_through(sharc_tp_link *l, sharc_stream *s, sharc_coll_kind kind, const float *send,
                                  float *recv, int64_t n, sharc_reduce_op op) {
    const int64_t S = sharc_comm_size(l->group);
    const int64_t need = kind == SHARC_COLL_ALL_TO_ALL ? 2 * S * n : 2 * n;
    if (l->stage_n < need) {
        sharc_device_host_free(l->dev, l->stage);
        l->stage = sharc_device_host_alloc(l->dev, (size_t)need * sizeof(float), SHARC_MEM_COMM);
        l->stage_n = l->stage ? need : 0;
        if (!l->stage)
            return sharc_error(SHARC_ERR_NOMEM, "tp: cannot allocate %lld bytes of host staging memory",
                               (long long)need * (long long)sizeof(float));
    }
    return sharc_comm_staged(l->group, kind, l->dev, s, l->stage, send, recv, (size_t)n, SHARC_DT_F32, op);
}

sharc_status sharc_tp_link_staged(sharc_tp_link *l, sharc_stream *s, sharc_coll_kind kind, const float *send,
                                  float *recv, int64_t n) {
    return stage_through(l, s, kind, send, recv, n, SHARC_REDUCE_OP_SUM);
}

void sharc_tp_all_reduce_op(sharc_tp_link *l, sharc_stream *s, float *buf, int64_t n, sharc_reduce_op op) {
    if (!l || !l->group) return;
    sharc_status st;
    if (sharc_device_is_host(l->dev)) {
        st = sharc_comm_all_reduce(l->group, buf, buf, (size_t)n, SHARC_DT_F32, op);
    } else if (l->direct) { /* note [blocking-on-stream]: on the model's stream, never the legacy one */
        sharc_comm_request *req = NULL;
        st = sharc_comm_iall_reduce(l->group, buf, buf, (size_t)n, SHARC_DT_F32, op, s, &req);
        if (st == SHARC_OK) st = sharc_comm_wait_on(req, s);
    } else { /* note [comm-staging] */
        st = stage_through(l, s, SHARC_COLL_ALL_REDUCE, buf, buf, n, op);
    }
    if (st != SHARC_OK)
        sharc_fatal(__FILE__, __LINE__, "tp: all-reduce of %lld floats over the tensor-parallel group: %s",
                    (long long)n, sharc_last_error());
}

void sharc_tp_all_reduce(sharc_tp_link *l, sharc_stream *s, float *buf, int64_t n) {
    sharc_tp_all_reduce_op(l, s, buf, n, SHARC_REDUCE_OP_SUM);
}

void sharc_tp_lmhead_xent(const sharc_kernels *k, sharc_stream *s, sharc_tp_link *l, double *loss_sum, float *dx,
                          float *dw, const float *x, const float *w, const uint16_t *xh, const uint16_t *wh,
                          const int32_t *targets, float scale, int64_t N, int C, int v0, int Vl, float *ws, float *red,
                          int64_t chunk) {
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        int64_t m = N - r0 < chunk ? N - r0 : chunk;
        const int32_t *tg = targets + r0;
        const double mf = 2.0 * m * C * Vl; /* note [prof-work] in model.c */
        if (xh)
            SHARC_PROF_WORK("head.logits", mf, 2.0 * ((double)m * C + (double)Vl * C) + 4.0 * m * Vl,
                            k->matmul_forward_b16(s, ws, xh + r0 * C, wh, NULL, m, C, Vl));
        else
            SHARC_PROF_WORK("head.logits", mf, 4.0 * ((double)m * C + (double)Vl * C + (double)m * Vl),
                            k->matmul_forward(s, ws, x + r0 * C, w, NULL, m, C, Vl));
        SHARC_PROF("head.xent", k->vocab_xent_stats(s, red, ws, tg, m, v0, Vl, false));
        SHARC_PROF("head.tp", sharc_tp_all_reduce_op(l, s, red, m, SHARC_REDUCE_OP_MAX));
        SHARC_PROF("head.xent", k->vocab_xent_stats(s, red, ws, tg, m, v0, Vl, true));
        SHARC_PROF("head.tp", sharc_tp_all_reduce_op(l, s, red + m, 2 * m, SHARC_REDUCE_OP_SUM));
        /* the loss is the same on every tp rank: the sums are */
        SHARC_PROF("head.xent", k->vocab_xent_finish(s, loss_sum, r0 > 0, dx ? ws : NULL, red, tg, m, v0, Vl, scale));
        if (dx) {
            const double db = 4.0 * m * Vl + (xh ? 2.0 : 4.0) * ((double)m * C + (double)Vl * C) + 4.0 * m * C +
                              (dw ? 8.0 * Vl * C : 0);
            if (xh)
                SHARC_PROF_WORK("head.dx", mf * (1 + (dw != NULL)), db,
                                k->matmul_backward_b16(s, dx + r0 * C, dw, NULL, ws, xh + r0 * C, wh, m, C, Vl));
            else
                SHARC_PROF_WORK("head.dx", mf * (1 + (dw != NULL)), db,
                                k->matmul_backward(s, dx + r0 * C, dw, NULL, ws, x + r0 * C, w, m, C, Vl));
        }
    }
    /* note [tp-vocab]: each rank's dx is its columns' part of dlogits @ W */
    if (N <= 0) k->vocab_xent_finish(s, loss_sum, false, NULL, red, targets, 0, v0, Vl, scale); /* 0 */
    if (dx) SHARC_PROF("head.tp", sharc_tp_all_reduce(l, s, dx, N * C));
}
