/* staged.c: sharc_comm_staged, one collective on a device's buffers through
 * host memory for a group that reads host memory only (note
 * [comm-staging] in src/fsdp/collectives.c), shared by the engine and
 * tensor parallelism (src/model/tp.c). */
#include "sharc/comm.h"
#include "sharc/log.h"

sharc_status sharc_comm_staged(sharc_comm *c, sharc_coll_kind kind, sharc_device *d, sharc_stream *s, void *host,
                               const void *send, void *recv, size_t count, sharc_dtype dt, sharc_reduce_op op) {
    const size_t es = sharc_dtype_size(dt), S = (size_t)sharc_comm_size(c);
    if (kind != SHARC_COLL_ALL_GATHER && kind != SHARC_COLL_REDUCE_SCATTER && kind != SHARC_COLL_ALL_REDUCE &&
        kind != SHARC_COLL_ALL_TO_ALL)
        return sharc_error(SHARC_ERR_INVALID,
                           "comm: staged %s: not staged (all-gather, reduce-scatter, all-reduce, all-to-all)",
                           sharc_coll_kind_name(kind));
    const bool a2a = kind == SHARC_COLL_ALL_TO_ALL;
    const size_t nsend = kind == SHARC_COLL_REDUCE_SCATTER || a2a ? S * count : count;
    const size_t nrecv = kind == SHARC_COLL_ALL_GATHER || a2a ? S * count : count;
    char *hs = host, *hr = hs + nsend * es;
    SHARC_TRY(sharc_device_copy(d, hs, send, nsend * es, SHARC_COPY_DEVICE_TO_HOST, s));
    SHARC_TRY(sharc_device_synchronize(s));
    sharc_status st = a2a                                 ? sharc_comm_all_to_all(c, hs, hr, count, dt)
                      : kind == SHARC_COLL_ALL_GATHER     ? sharc_comm_all_gather(c, hs, hr, count, dt)
                      : kind == SHARC_COLL_REDUCE_SCATTER ? sharc_comm_reduce_scatter(c, hs, hr, count, dt, op)
                                                          : sharc_comm_all_reduce(c, hs, hr, count, dt, op);
    SHARC_TRY(st);
    SHARC_TRY(sharc_device_copy(d, recv, hr, nrecv * es, SHARC_COPY_HOST_TO_DEVICE, s));
    return sharc_device_synchronize(s);
}
