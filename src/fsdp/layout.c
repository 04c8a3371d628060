/* layout.c: the shard arithmetic, note [flat-layout] in layout.h. */
#include "layout.h"

int64_t sharc_layout_numel_shard(int64_t numel, int group) {
    int64_t s = (numel + group - 1) / group;
    return (s + SHARC_SHARD_ALIGN - 1) / SHARC_SHARD_ALIGN * SHARC_SHARD_ALIGN;
}

int sharc_layout_segments(const sharc_unit_spec *u, int64_t lo, int64_t hi, sharc_segment *out) {
    int n = 0;
    for (int p = 0; p < u->nparams; p++) {
        int64_t a = u->params[p].offset, b = a + u->params[p].numel_local;
        int64_t s = a > lo ? a : lo, t = b < hi ? b : hi;
        while (s < t) { /* note [tp-params]: one segment per run of the full tensor */
            int64_t full, run = sharc_param_tp_run(&u->params[p], s - a, &full);
            if (run > t - s) run = t - s;
            const sharc_param_spec *ps = &u->params[p];
            out[n++] = (sharc_segment){.param = p,
                                       .shard_off = s - lo,
                                       .param_off = full,
                                       .len = run,
                                       .tp_copy = ps->tp_dim < 0 && ps->tp_rank > 0};
            s += run;
        }
    }
    return n;
}
