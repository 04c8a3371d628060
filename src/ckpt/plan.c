/* plan.c: sharc_ckpt_plan_*, the range plan of note [ckpt-layout]: which
 * elements of which parameter this rank's file holds, at which byte
 * offset, from the engine's unit specs and this rank's shard segments
 * (padding excluded). Pure; made once per checkpointer. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

sharc_status sharc_ckpt_plan_init(sharc_ckpt_plan *p, const sharc_fsdp *e) {
    memset(p, 0, sizeof *p);
    const int nu = sharc_fsdp_num_units(e);
    int nrec = 0;
    for (int u = 0; u < nu; u++) {
        const sharc_segment *segs;
        p->nglobal += sharc_fsdp_unit_spec(e, u)->nparams;
        nrec += sharc_fsdp_shard_segments(e, u, &segs);
    }
    p->gp_unit = calloc((size_t)p->nglobal + 1, sizeof(int));
    p->gp_param = calloc((size_t)p->nglobal + 1, sizeof(int));
    p->recs = calloc((size_t)nrec + 1, sizeof *p->recs);
    if (!p->gp_unit || !p->gp_param || !p->recs) {
        sharc_ckpt_plan_free(p);
        return sharc_error(SHARC_ERR_NOMEM, "ckpt: out of memory");
    }
    for (int u = 0, g = 0; u < nu; u++) {
        const int first = g;
        for (int k = 0; k < sharc_fsdp_unit_spec(e, u)->nparams; k++, g++) {
            p->gp_unit[g] = u;
            p->gp_param[g] = k;
        }
        const sharc_segment *segs;
        const int ns = sharc_fsdp_shard_segments(e, u, &segs);
        for (int k = 0; k < ns; k++) {
            if (segs[k].tp_copy) continue; /* note [ckpt-layout]: tp rank 0 saves it */
            p->recs[p->nrecs++] = (sharc_ckpt_rec){first + segs[k].param, segs[k].param_off,
                                                   segs[k].param_off + segs[k].len, p->file_bytes};
            p->file_bytes += (int64_t)KINDS * 4 * segs[k].len;
        }
    }
    return SHARC_OK;
}

void sharc_ckpt_plan_free(sharc_ckpt_plan *p) {
    free(p->gp_unit);
    free(p->gp_param);
    free(p->recs);
    memset(p, 0, sizeof *p);
}
