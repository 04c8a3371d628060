/* mpi_nccl.c: the NCCL backend (src/comm/comm_nccl.c) against the MPI
 * backend on the same inputs, in one process that holds both worlds: every
 * collective, 16-bit and fp32, blocking and not, in place and out, on the
 * world and on split groups. Moves must be bit-exact, sums equal to MPI's
 * (and to a double-precision sum of the known inputs) within fp32 or one
 * 16-bit rounding. Run by tests/cli/mpi_nccl.sh with the test double
 * tests/support/fake_nccl.c as libnccl (and the CUDA driver):
 *   mpi_nccl nccl      every rank its own GPU: the collectives go to NCCL
 *   mpi_nccl fallback  ranks sharing a GPU: the world stays on MPI (groups
 *                      of one rank still use NCCL) */
#include "../../src/comm/comm_impl.h"
#include "sharc/dtype.h"
#include "sharc/log.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me, failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", me, __FILE__, __LINE__);                                          \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)
#define OK(call) CHECK((call) == SHARC_OK, "%s: %s", #call, sharc_last_error())

/* the input of world rank r at element i: exact in bf16 and fp16 (a few bits) */
static float input(int r, size_t i) { return (float)((int)((r * 7 + i * 13) % 29) - 14) * 0.375f + (float)r; }

static float get(const void *p, sharc_dtype dt, size_t i) {
    if (dt == SHARC_DT_F32) return ((const float *)p)[i];
    if (dt == SHARC_DT_BF16) return sharc_bf16_to_f32(((const uint16_t *)p)[i]);
    return sharc_f16_to_f32(((const uint16_t *)p)[i]);
}

static void fill(void *p, sharc_dtype dt, size_t n, int r) {
    for (size_t i = 0; i < n; i++) {
        float v = input(r, i);
        if (dt == SHARC_DT_F32) ((float *)p)[i] = v;
        else if (dt == SHARC_DT_BF16) ((uint16_t *)p)[i] = sharc_f32_to_bf16(v);
        else ((uint16_t *)p)[i] = sharc_f32_to_f16(v);
    }
}

/* a (n) from NCCL and b (n) from MPI, sums over the group's world ranks
 * `who` of the inputs at elements first.. : both near the exact sum */
static void check_sum(const char *what, const void *a, const void *b, sharc_dtype dt, size_t n, size_t first,
                      const int *who, int S) {
    double tol = dt == SHARC_DT_F32 ? 4.0 * S / 16777216.0 : 1.0 / 128;
    for (size_t i = 0; i < n; i++) {
        double exact = 0, mag = 0;
        for (int r = 0; r < S; r++) {
            double x = get(&(float){input(who[r], first + i)}, SHARC_DT_F32, 0);
            exact += x, mag += fabs(x);
        }
        float x = get(a, dt, i), y = get(b, dt, i);
        CHECK(fabs((double)x - y) <= tol * mag && fabs((double)x - exact) <= tol * mag,
              "%s %s element %zu: nccl %g, mpi %g, exact %g", what, sharc_dtype_st_name(dt), i, x, y, exact);
    }
}

/* Every collective on nc (NCCL) and mc (MPI), groups of the same ranks. */
static void compare(sharc_comm *nc, sharc_comm *mc, const int *who, const char *label) {
    const int S = sharc_comm_size(nc), r = sharc_comm_rank(nc);
    CHECK(S == sharc_comm_size(mc) && r == sharc_comm_rank(mc), "%s: groups differ", label);
    static const sharc_dtype dts[] = {SHARC_DT_F32, SHARC_DT_BF16, SHARC_DT_F16};
    static const size_t counts[] = {1, 37};
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 2; k++) {
            const sharc_dtype dt = dts[d];
            const size_t n = counts[k], es = sharc_dtype_size(dt), full = n * (size_t)S;
            char *in = malloc(full * es), *x = malloc(full * es), *y = malloc(full * es);
            fill(in, dt, full, who[r]);
            /* moves: bit-exact */
            memset(x, 0xAB, full * es), memset(y, 0xCD, full * es);
            OK(sharc_comm_all_gather(nc, in, x, n, dt));
            OK(sharc_comm_all_gather(mc, in, y, n, dt));
            CHECK(!memcmp(x, y, full * es), "%s all-gather %s x%zu differs", label, sharc_dtype_st_name(dt), n);
            memset(x, 0xAB, full * es), memset(y, 0xCD, full * es);
            OK(sharc_comm_all_to_all(nc, in, x, n, dt));
            OK(sharc_comm_all_to_all(mc, in, y, n, dt));
            CHECK(!memcmp(x, y, full * es), "%s all-to-all %s x%zu differs", label, sharc_dtype_st_name(dt), n);
            memcpy(x, in, full * es), memcpy(y, in, full * es);
            OK(sharc_comm_broadcast(nc, x, full, dt, S - 1));
            OK(sharc_comm_broadcast(mc, y, full, dt, S - 1));
            CHECK(!memcmp(x, y, full * es), "%s broadcast %s differs", label, sharc_dtype_st_name(dt));
            /* sums: reduce-scatter (count per rank), all-reduce out of place and in place */
            memset(x, 0xAB, full * es), memset(y, 0xCD, full * es);
            OK(sharc_comm_reduce_scatter(nc, in, x, n, dt, SHARC_REDUCE_OP_SUM));
            OK(sharc_comm_reduce_scatter(mc, in, y, n, dt, SHARC_REDUCE_OP_SUM));
            check_sum("reduce-scatter", x, y, dt, n, (size_t)r * n, who, S);
            OK(sharc_comm_all_reduce(nc, in, x, full, dt, SHARC_REDUCE_OP_SUM));
            OK(sharc_comm_all_reduce(mc, in, y, full, dt, SHARC_REDUCE_OP_SUM));
            check_sum("all-reduce", x, y, dt, full, 0, who, S);
            memcpy(x, in, full * es);
            OK(sharc_comm_all_reduce(nc, x, x, full, dt, SHARC_REDUCE_OP_SUM));
            check_sum("in-place all-reduce", x, y, dt, full, 0, who, S);
            /* non-blocking: a wait, a wait_on a stream, a test loop */
            sharc_comm_request *q = NULL;
            memset(x, 0, full * es);
            OK(sharc_comm_iall_gather(nc, in, x, n, dt, NULL, &q));
            OK(sharc_comm_wait(q));
            OK(sharc_comm_all_gather(mc, in, y, n, dt));
            CHECK(!memcmp(x, y, full * es), "%s iall-gather %s differs", label, sharc_dtype_st_name(dt));
            sharc_stream *cpu = sharc_device_stream(sharc_device_cpu());
            OK(sharc_comm_ireduce_scatter(nc, in, x, n, dt, SHARC_REDUCE_OP_SUM, cpu, &q));
            OK(sharc_comm_wait_on(q, cpu));
            OK(sharc_comm_reduce_scatter(mc, in, y, n, dt, SHARC_REDUCE_OP_SUM));
            check_sum("ireduce-scatter", x, y, dt, n, (size_t)r * n, who, S);
            bool done = false;
            OK(sharc_comm_iall_reduce(nc, in, x, full, dt, SHARC_REDUCE_OP_SUM, cpu, &q));
            while (!done) OK(sharc_comm_test(q, &done));
            OK(sharc_comm_all_reduce(mc, in, y, full, dt, SHARC_REDUCE_OP_SUM));
            check_sum("iall-reduce", x, y, dt, full, 0, who, S);
            /* the all-to-all queued on a stream (a group of sends and receives), bit-exact against MPI's */
            memset(x, 0xAB, full * es), memset(y, 0xCD, full * es);
            OK(sharc_comm_iall_to_all(nc, in, x, n, dt, cpu, &q));
            OK(sharc_comm_wait_on(q, cpu));
            OK(sharc_comm_all_to_all(mc, in, y, n, dt));
            CHECK(!memcmp(x, y, full * es), "%s iall-to-all %s x%zu differs", label, sharc_dtype_st_name(dt), n);
            memset(x, 0xAB, full * es), memset(y, 0xCD, full * es);
            OK(sharc_comm_iall_to_all(nc, in, x, n, dt, NULL, &q));
            OK(sharc_comm_wait(q));
            OK(sharc_comm_iall_to_all(mc, in, y, n, dt, NULL, &q));
            for (done = false; !done;) OK(sharc_comm_test(q, &done));
            CHECK(!memcmp(x, y, full * es), "%s iall-to-all (wait, test) %s x%zu differs", label,
                  sharc_dtype_st_name(dt), n);
            free(in), free(x), free(y);
        }
    /* max/min and integers, as the agreements use them */
    float fv = (float)who[r] - 0.5f, fmx[2], fmn[2];
    OK(sharc_comm_all_reduce(nc, &fv, &fmx[0], 1, SHARC_DT_F32, SHARC_REDUCE_OP_MAX));
    OK(sharc_comm_all_reduce(mc, &fv, &fmx[1], 1, SHARC_DT_F32, SHARC_REDUCE_OP_MAX));
    OK(sharc_comm_all_reduce(nc, &fv, &fmn[0], 1, SHARC_DT_F32, SHARC_REDUCE_OP_MIN));
    OK(sharc_comm_all_reduce(mc, &fv, &fmn[1], 1, SHARC_DT_F32, SHARC_REDUCE_OP_MIN));
    CHECK(fmx[0] == fmx[1] && fmn[0] == fmn[1], "%s max/min: nccl %g %g, mpi %g %g", label, fmx[0], fmn[0], fmx[1],
          fmn[1]);
    int32_t iv = 100 - who[r], imn[2];
    OK(sharc_comm_all_reduce(nc, &iv, &imn[0], 1, SHARC_DT_I32, SHARC_REDUCE_OP_MIN));
    OK(sharc_comm_all_reduce(mc, &iv, &imn[1], 1, SHARC_DT_I32, SHARC_REDUCE_OP_MIN));
    CHECK(imn[0] == imn[1], "%s i32 min: nccl %d, mpi %d", label, imn[0], imn[1]);
    OK(sharc_comm_barrier(nc));
    /* zero elements */
    OK(sharc_comm_all_gather(nc, NULL, NULL, 0, SHARC_DT_F32));
    OK(sharc_comm_reduce_scatter(nc, NULL, NULL, 0, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
}

static void fake_stats(long *colls, long *waits) {
    *colls = *waits = -1;
    void *h = dlopen(getenv("SHARC_NCCL_LIB"), RTLD_NOW | RTLD_NOLOAD);
    void *f = h ? dlsym(h, "fake_nccl_stats") : NULL;
    if (f) {
        void (*stats)(long *, long *);
        memcpy(&stats, &f, sizeof f);
        stats(colls, waits);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "nccl") && strcmp(argv[1], "fallback"))) {
        fprintf(stderr, "usage: mpi_nccl nccl|fallback\n");
        return 2;
    }
    const bool expect_nccl = !strcmp(argv[1], "nccl");
    sharc_comm *mw = NULL, *nw = NULL;
    if (sharc_comm_backend_mpi.world_init(&argc, &argv, &mw) != SHARC_OK ||
        sharc_comm_backend_nccl.world_init(&argc, &argv, &nw) != SHARC_OK) {
        fprintf(stderr, "%s\n", sharc_last_error());
        return 1;
    }
    me = sharc_comm_rank(mw);
    sharc_log_set_rank(me, sharc_comm_size(mw));
    CHECK(!strcmp(sharc_comm_backend(nw), "nccl"), "backend %s", sharc_comm_backend(nw));
    const int W = sharc_comm_size(mw);
    int who[64];
    for (int i = 0; i < W; i++) who[i] = i;
    compare(nw, mw, who, "world");
    /* sharc_comm_takes_device: NCCL's groups with a communicator, never MPI's
     * nor a group of ranks sharing a GPU (note [comm-staging]) */
    bool direct = true;
    OK(sharc_comm_takes_device(mw, &direct));
    CHECK(!direct, "the MPI world takes device memory");
    OK(sharc_comm_takes_device(nw, &direct));
    CHECK(direct == expect_nccl, "the NCCL world takes device memory: %d, want %d", direct, expect_nccl);
    long colls, waits;
    fake_stats(&colls, &waits);
    if (expect_nccl)
        CHECK(colls > 0 && waits > 0, "the test double ran %ld collectives, %ld stream waits", colls, waits);
    else CHECK(colls == 0, "the test double ran %ld collectives on a world sharing a GPU", colls);
    /* split: colour by parity, reversed order; the node's ranks */
    sharc_comm *ns = NULL, *ms = NULL;
    OK(sharc_comm_split(nw, me % 2, -me, &ns));
    OK(sharc_comm_split(mw, me % 2, -me, &ms));
    int S = 0;
    for (int i = W - 1; i >= 0; i--)
        if (i % 2 == me % 2) who[S++] = i;
    CHECK(S == sharc_comm_size(ns) && sharc_comm_rank(ns) == sharc_comm_rank(ms), "split sizes");
    compare(ns, ms, who, "split");
    /* a split group of one rank has a GPU to itself */
    OK(sharc_comm_takes_device(ns, &direct));
    CHECK(direct == (expect_nccl || S == 1), "a split group of %d takes device memory: %d", S, direct);
    sharc_comm *nn = NULL, *mn = NULL;
    OK(sharc_comm_split_node(nw, &nn));
    OK(sharc_comm_split_node(mw, &mn));
    for (int i = 0; i < W; i++) who[i] = i;
    compare(nn, mn, who, "node");
    if (expect_nccl) {
        /* errors: a type NCCL lacks, and NCCL's own failure with its words */
        int16_t h = 1, hs = 0;
        CHECK(sharc_comm_all_reduce(nw, &h, &hs, 1, SHARC_DT_I16, SHARC_REDUCE_OP_SUM) == SHARC_ERR_UNSUPPORTED &&
                  strstr(sharc_last_error(), "NCCL has no such type"),
              "i16 all-reduce: %s", sharc_last_error());
        setenv("FAKE_NCCL_FAIL", "ncclAllReduce", 1);
        float v = 1, s = 0;
        CHECK(sharc_comm_all_reduce(nw, &v, &s, 1, SHARC_DT_F32, SHARC_REDUCE_OP_SUM) == SHARC_ERR_COMM &&
                  strstr(sharc_last_error(), "ncclAllReduce failed: internal error: fake: failing"),
              "failing all-reduce: %s", sharc_last_error());
        unsetenv("FAKE_NCCL_FAIL");
    }
    sharc_comm_free(nn), sharc_comm_free(mn);
    sharc_comm_free(ns), sharc_comm_free(ms);
    sharc_comm_free(nw);
    sharc_comm_free(mw);
    sharc_comm_backend_mpi.finalize();
    if (failures) return 1;
    printf("ok nccl %s (rank %d of %d)\n", argv[1], me, W);
    return 0;
}
