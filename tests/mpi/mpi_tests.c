/* mpi_tests.c: tests that need several ranks, run under mpirun by
 * tests/cli/mpi_*.sh at 1, 2, 3 and 4 ranks:
 *
 *   mpi_tests comm                      collectives against values computed here
 *   mpi_tests parity KEY=VALUE ...      N ranks against a one-process run (made on
 *                                       every rank, in the same process) of the same
 *                                       global batch: every step's loss and the
 *                                       final parameters
 *   mpi_tests gather DATA KEY=VALUE ... [-- KEY=VALUE ...]...
 *                                       gathered parameters are the masters rounded to
 *                                       param_dtype, for each configuration in turn
 *   mpi_tests memory DATA               FULL_SHARD model state at N ranks vs one process
 *   mpi_tests mismatch DATA             rank 1 has another model: every rank fails fast
 *   mpi_tests ckpt_save DIR REF DATA KEY=VALUE ...
 *                                       3 steps, a checkpoint in DIR, and REF: every
 *                                       parameter and both moments, gathered (safetensors)
 *   mpi_tests ckpt_load DIR REF DATA KEY=VALUE ...
 *                                       resume from DIR at any world size / strategy:
 *                                       exactly REF's values, then 3 more steps against
 *                                       a one-process run of all 6 (note [parity-tolerance])
 *   mpi_tests badstep DATA              the last rank's gradient is NaN at step 2 (SHARC_TEST_NAN):
 *                                       every rank skips it, its shards and AdamW's step
 *                                       count unchanged; step 3 updates again
 *   mpi_tests hf DATA DIR KEY=VALUE...  Hugging Face export at N ranks into DIR (the
 *                                       script compares it with a 1-rank export), then
 *                                       import into another engine: equal masters
 *   mpi_tests nodes K DATA              ranks run K per host (tests/cli/hosts_mpi.sh):
 *                                       MPI's node is the host, a shared window inside
 *                                       it and none across hosts; FULL_SHARD and
 *                                       HYBRID_SHARD (fsdp_size K) take the paths and
 *                                       move the bytes their groups' placement gives
 *   mpi_tests frozen DATA KEY=VALUE ... the run with model.freeze_module_prefix /
 *                                       train.trainable against the same run without
 *                                       (note [frozen-params]): same loss and trainable
 *                                       gradients and updates bit for bit, frozen
 *                                       parameters unchanged, fewer bytes reduced and held
 *   mpi_tests memplan DATA KEY=VALUE ...  every strategy x activation checkpointing on/off:
 *                                       each category's measured peak over 2 steps against
 *                                       the memory plan (sharc/memplan.h)
 *   mpi_tests prefetch DATA D KEY=VALUE ... prefetch depth D (forward and backward)
 *                                       against depth 1 on the same ranks: the same
 *                                       losses and parameters bit for bit, more units
 *                                       in flight, gathered memory as planned
 *   mpi_tests reshard DATA N KEY=VALUE ...  fsdp.reshard_after_forward N against true on
 *                                       the same ranks (note [post-forward]): losses and
 *                                       parameters bit for bit, all-gather bytes per step
 *                                       by the formula (backward inside groups of N),
 *                                       the post-forward slices allocated as planned
 *   mpi_tests wide                      one shard group of all ranks (run at 65): the
 *                                       engine's shared-window reduction sums every rank
 *
 * Every rank prints "ok" on success; any failure exits non-zero. */
#include "sharc/alloc.h"
#include "sharc/ckpt.h"
#include "sharc/comm.h"
#include "sharc/config.h"
#include "sharc/fsdp.h"
#include "sharc/hf.h"
#include "sharc/log.h"
#include "sharc/blas.h"
#include "sharc/memplan.h"
#include "sharc/mesh.h"
#include "sharc/model.h"
#include "sharc/optim.h"
#include "sharc/rng.h"
#include "sharc/safetensors.h"
#include "sharc/train.h"
#include "../test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* test.h's registry is not used here; the runner's helpers are stubs */
void sharc_test_register(const char *name, sharc_test_fn fn, const char *file) {}
const char *sharc_test_fixture_dir(void) { return "tests/fixtures"; }
const char *sharc_test_bin_dir(void) { return "build"; }
const char *sharc_test_tmpdir(void) { return getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"; }
long long sharc_test_allclose(const float *a, const float *b, long long n, double rtol, double atol) {
    for (long long i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= atol + rtol * fabs((double)b[i]))) return i;
    return -1;
}

static sharc_comm *world;

/* ---------------------------------------------------------------- comm */

static float val(int rank, size_t i) { return (float)(rank + 1) * 0.5f + (float)(i % 97) * 0.25f; }

static void test_comm(void) {
    int R = sharc_comm_size(world), r = sharc_comm_rank(world);
    const size_t n = 1003; /* odd */
    float *send = malloc(sizeof(float) * n * R), *recv = malloc(sizeof(float) * n * R);
    for (size_t i = 0; i < n; i++) send[i] = val(r, i);
    ASSERT_OK(sharc_comm_all_gather(world, send, recv, n, SHARC_DT_F32));
    for (int q = 0; q < R; q++)
        for (size_t i = 0; i < n; i++) ASSERT_TRUE(recv[(size_t)q * n + i] == val(q, i));

    /* reduce-scatter: rank q sends val(q, j) at position j of the R x n buffer */
    for (size_t j = 0; j < n * R; j++) send[j] = val(r, j);
    ASSERT_OK(sharc_comm_reduce_scatter(world, send, recv, n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int q = 0; q < R; q++) want += val(q, (size_t)r * n + i);
        ASSERT_NEAR(recv[i], want, 1e-6, 1e-6);
    }
    /* bf16 reduce-scatter: inputs exactly representable, sums accumulated in fp32 then rounded */
    uint16_t *s16 = malloc(2 * n * R), *r16 = malloc(2 * n * R);
    for (size_t j = 0; j < n * R; j++) s16[j] = sharc_f32_to_bf16(val(r, j));
    ASSERT_OK(sharc_comm_reduce_scatter(world, s16, r16, n, SHARC_DT_BF16, SHARC_REDUCE_OP_SUM));
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < R; q++) want += sharc_bf16_to_f32(sharc_f32_to_bf16(val(q, (size_t)r * n + i)));
        ASSERT_TRUE(r16[i] == sharc_f32_to_bf16(want));
    }
    /* all-reduce, in place and out of place, fp32 / f64 / i64 / bf16, max */
    for (size_t i = 0; i < n; i++) send[i] = val(r, i);
    ASSERT_OK(sharc_comm_all_reduce(world, send, recv, n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
    ASSERT_OK(sharc_comm_all_reduce(world, send, send, n, SHARC_DT_F32, SHARC_REDUCE_OP_MAX));
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int q = 0; q < R; q++) want += val(q, i);
        ASSERT_NEAR(recv[i], want, 1e-6, 1e-6);
        ASSERT_TRUE(send[i] == val(R - 1, i));
    }
    for (size_t i = 0; i < n; i++) s16[i] = sharc_f32_to_bf16(val(r, i));
    ASSERT_OK(sharc_comm_all_reduce(world, s16, s16, n, SHARC_DT_BF16, SHARC_REDUCE_OP_SUM));
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < R; q++) want += sharc_bf16_to_f32(sharc_f32_to_bf16(val(q, i)));
        ASSERT_TRUE(s16[i] == sharc_f32_to_bf16(want));
    }
    int64_t big = (int64_t)1 << 40 | r, total;
    ASSERT_OK(sharc_comm_all_reduce(world, &big, &total, 1, SHARC_DT_I64, SHARC_REDUCE_OP_SUM));
    ASSERT_EQ(total, ((int64_t)1 << 40) * R + (int64_t)R * (R - 1) / 2);
    /* broadcast from the last rank */
    double b = r == R - 1 ? 3.25 : -1.0;
    ASSERT_OK(sharc_comm_broadcast(world, &b, 1, SHARC_DT_F64, R - 1));
    ASSERT_TRUE(b == 3.25);
    /* non-blocking, ordered after a stream and before it (wait_on), completed by wait and by test */
    sharc_comm_request *req;
    sharc_stream *stream = sharc_device_stream(sharc_device_cpu());
    for (size_t i = 0; i < n; i++) send[i] = val(r, i);
    ASSERT_OK(sharc_comm_iall_gather(world, send, recv, n, SHARC_DT_F32, stream, &req));
    ASSERT_OK(sharc_comm_wait_on(req, stream));
    for (int q = 0; q < R; q++) ASSERT_TRUE(recv[(size_t)q * n + 5] == val(q, 5));
    ASSERT_OK(sharc_comm_iall_gather(world, send, recv, n, SHARC_DT_F32, NULL, &req));
    ASSERT_OK(sharc_comm_wait(req));
    for (int q = 0; q < R; q++) ASSERT_TRUE(recv[(size_t)q * n + 9] == val(q, 9));
    for (size_t j = 0; j < n * R; j++) send[j] = val(r, j);
    ASSERT_OK(sharc_comm_ireduce_scatter(world, send, recv, n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM, NULL, &req));
    bool done = false;
    while (!done) ASSERT_OK(sharc_comm_test(req, &done));
    double want = 0;
    for (int q = 0; q < R; q++) want += val(q, (size_t)r * n + 7);
    ASSERT_NEAR(recv[7], want, 1e-6, 1e-6);
    /* all-to-all: rank r's slice q (n elements) arrives at rank q as slice r, fp32 and 16-bit */
    for (int q = 0; q < R; q++)
        for (size_t i = 0; i < n; i++) send[(size_t)q * n + i] = val(r, 1000 * (size_t)q + i);
    ASSERT_OK(sharc_comm_all_to_all(world, send, recv, n, SHARC_DT_F32));
    for (int q = 0; q < R; q++)
        for (size_t i = 0; i < n; i++) ASSERT_TRUE(recv[(size_t)q * n + i] == val(q, 1000 * (size_t)r + i));
    for (int q = 0; q < R; q++)
        for (size_t i = 0; i < n; i++) s16[(size_t)q * n + i] = (uint16_t)(r * 4096 + q * 256 + (int)(i % 256));
    ASSERT_OK(sharc_comm_all_to_all(world, s16, r16, n, SHARC_DT_BF16));
    for (int q = 0; q < R; q++)
        for (size_t i = 0; i < n; i++) ASSERT_EQ(r16[(size_t)q * n + i], q * 4096 + r * 256 + (int)(i % 256));
    ASSERT_TRUE(sharc_comm_all_to_all(world, send, send, n, SHARC_DT_F32) == SHARC_ERR_INVALID);
    /* non-blocking all-to-all (MPI_Ialltoall): after a stream and before it, and completed by test */
    for (int q = 0; q < R; q++)
        for (size_t i = 0; i < n; i++) send[(size_t)q * n + i] = val(r, 2000 * (size_t)q + i);
    memset(recv, 0, n * R * sizeof *recv);
    ASSERT_OK(sharc_comm_iall_to_all(world, send, recv, n, SHARC_DT_F32, stream, &req));
    ASSERT_OK(sharc_comm_wait_on(req, stream));
    for (int q = 0; q < R; q++)
        for (size_t i = 0; i < n; i++) ASSERT_TRUE(recv[(size_t)q * n + i] == val(q, 2000 * (size_t)r + i));
    memset(recv, 0, n * R * sizeof *recv);
    ASSERT_OK(sharc_comm_iall_to_all(world, send, recv, n, SHARC_DT_F32, NULL, &req));
    for (done = false; !done;) ASSERT_OK(sharc_comm_test(req, &done));
    for (int q = 0; q < R; q++) ASSERT_TRUE(recv[(size_t)q * n + 3] == val(q, 2000 * (size_t)r + 3));
    req = (sharc_comm_request *)&req; /* set to NULL by a refused call */
    ASSERT_TRUE(sharc_comm_iall_to_all(world, send, send, n, SHARC_DT_F32, NULL, &req) == SHARC_ERR_INVALID);
    ASSERT_TRUE(req == NULL);
    /* sub-groups: evens and odds */
    sharc_comm *half;
    ASSERT_OK(sharc_comm_split(world, r % 2, r, &half));
    ASSERT_EQ(sharc_comm_size(half), (R - r % 2 + 1) / 2);
    ASSERT_EQ(sharc_comm_rank(half), r / 2);
    int32_t one = 1, cnt = 0;
    ASSERT_OK(sharc_comm_all_reduce(half, &one, &cnt, 1, SHARC_DT_I32, SHARC_REDUCE_OP_SUM));
    ASSERT_EQ(cnt, sharc_comm_size(half));
    sharc_comm_free(half);
    /* statistics: bytes are counted per call */
    sharc_comm_stats s;
    sharc_comm_stats_get(world, &s);
    ASSERT_EQ(s.calls[SHARC_COLL_ALL_GATHER], 3);
    ASSERT_EQ(s.bytes[SHARC_COLL_ALL_GATHER], 3 * (int64_t)n * 4);
    ASSERT_EQ(s.calls[SHARC_COLL_ALL_TO_ALL], 4); /* 2 blocking, 2 non-blocking */
    ASSERT_EQ(s.bytes[SHARC_COLL_ALL_TO_ALL], (int64_t)n * R * (4 + 2 + 4 + 4));
    /* shared memory: each rank writes its segment, every rank reads all */
    sharc_comm_shared *sh;
    sharc_status st = sharc_comm_shared_alloc(world, 4096 + sizeof(float) * n * R, &sh);
    if (st == SHARC_OK) {
        memset(sh->base[r], r + 1, 4096);
        ASSERT_OK(sharc_comm_shared_sync(world, sh));
        for (int q = 0; q < R; q++) ASSERT_EQ((unsigned char)sh->base[q][4095], q + 1);
        ASSERT_OK(sharc_comm_shared_sync(world, sh));
        /* a reduce-scatter of buffers already in the window: as reduce-scatter, bit for bit,
         * added to what recv holds, and counted as one */
        float *in_window = (float *)(sh->base[r] + 4096);
        float *got = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
        for (size_t j = 0; j < n * R; j++) in_window[j] = sharc_rng_normal(3, (uint64_t)r, j);
        ASSERT_OK(sharc_comm_reduce_scatter(world, in_window, ref, n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
        for (size_t i = 0; i < n; i++) got[i] = 1.0f;
        sharc_comm_stats_get(world, &s);
        int64_t rs_calls = s.calls[SHARC_COLL_REDUCE_SCATTER];
        ASSERT_OK(sharc_comm_shared_reduce_scatter(sh, 4096, got, n, true));
        sharc_comm_stats_get(world, &s);
        ASSERT_EQ(s.calls[SHARC_COLL_REDUCE_SCATTER], rs_calls + 1);
        for (size_t i = 0; i < n; i++) ASSERT_TRUE(got[i] == 1.0f + ref[i]);
        ASSERT_OK(sharc_comm_shared_reduce_scatter(sh, 4096, got, n, false));
        ASSERT_TRUE(memcmp(got, ref, sizeof(float) * n) == 0);
        ASSERT_TRUE(sharc_comm_shared_reduce_scatter(sh, 4096 + 4, got, n, false) == SHARC_ERR_INVALID);
        free(got);
        free(ref);
        sharc_comm_shared_free(sh);
    } else {
        ASSERT_TRUE(st == SHARC_ERR_UNSUPPORTED);
    }
    /* out-of-place rule */
    ASSERT_TRUE(sharc_comm_all_gather(world, recv, recv, n, SHARC_DT_F32) == SHARC_ERR_INVALID);
    free(send);
    free(recv);
    free(s16);
    free(r16);
}

/* The shared-memory paths (note [shm-collectives]) give bit-identical results
 * to the plain MPI collectives, on buffers larger than one staging piece. */
static void test_comm_shm_vs_mpi(void) {
    int R = sharc_comm_size(world), r = sharc_comm_rank(world);
    sharc_comm *shm, *plain;
    ASSERT_OK(sharc_comm_split(world, 0, r, &shm));
    ASSERT_OK(sharc_comm_split(world, 0, r, &plain));
    sharc_comm_use_shared_memory(plain, false);
    const size_t n = (3u << 20) + 7; /* 12 MB per rank: several pieces */
    float *send = malloc(sizeof(float) * n * R), *a = malloc(sizeof(float) * n * R), *b = malloc(sizeof(float) * n * R);
    for (size_t j = 0; j < n * R; j++) send[j] = sharc_rng_normal(5, (uint64_t)r, j);
    ASSERT_OK(sharc_comm_all_gather(shm, send, a, n, SHARC_DT_F32));
    ASSERT_OK(sharc_comm_all_gather(plain, send, b, n, SHARC_DT_F32));
    ASSERT_TRUE(memcmp(a, b, sizeof(float) * n * R) == 0);
    ASSERT_OK(sharc_comm_reduce_scatter(shm, send, a, n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
    ASSERT_OK(sharc_comm_reduce_scatter(plain, send, b, n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
    ASSERT_TRUE(memcmp(a, b, sizeof(float) * n) == 0);
    ASSERT_OK(sharc_comm_all_reduce(shm, send, a, n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
    ASSERT_OK(sharc_comm_all_reduce(plain, send, b, n, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
    for (size_t i = 0; i < n; i += 4099) { /* MPI's all-reduce sums in its own order */
        double want = 0.0;
        for (int q = 0; q < R; q++) want += sharc_rng_normal(5, (uint64_t)q, i);
        ASSERT_NEAR(a[i], want, 1e-5, 1e-5);
        ASSERT_NEAR(b[i], want, 1e-5, 1e-5);
    }
    uint16_t *s16 = malloc(2 * n * R), *a16 = malloc(2 * n * R), *b16 = malloc(2 * n * R);
    for (size_t j = 0; j < n * R; j++) s16[j] = sharc_f32_to_bf16(send[j]);
    ASSERT_OK(sharc_comm_reduce_scatter(shm, s16, a16, n, SHARC_DT_BF16, SHARC_REDUCE_OP_SUM));
    ASSERT_OK(sharc_comm_reduce_scatter(plain, s16, b16, n, SHARC_DT_BF16, SHARC_REDUCE_OP_SUM));
    ASSERT_TRUE(memcmp(a16, b16, 2 * n) == 0);
    ASSERT_OK(sharc_comm_all_reduce(shm, s16, a16, n, SHARC_DT_BF16, SHARC_REDUCE_OP_SUM));
    ASSERT_OK(sharc_comm_all_reduce(plain, s16, b16, n, SHARC_DT_BF16, SHARC_REDUCE_OP_SUM));
    ASSERT_TRUE(memcmp(a16, b16, 2 * n) == 0);
    /* many small collectives in a row reuse the two halves safely */
    for (int k = 0; k < 50; k++) {
        float x[3] = {(float)(r + k), 1.0f, (float)k}, y[3];
        ASSERT_OK(sharc_comm_all_reduce(shm, x, y, 3, SHARC_DT_F32, SHARC_REDUCE_OP_SUM));
        ASSERT_TRUE(y[0] == (float)(R * (R - 1) / 2 + R * k) && y[1] == (float)R && y[2] == (float)(R * k));
    }
    free(send);
    free(a);
    free(b);
    free(s16);
    free(a16);
    free(b16);
    sharc_comm_free(shm);
    sharc_comm_free(plain);
}

/* -------------------------------------------------------------- parity */

static void base_config(sharc_config *c, const char *data) {
    sharc_config_default(c);
    ASSERT_OK(sharc_config_set(c, "data.path", data, "test"));
    c->model.num_layers = 2;
    c->model.embed_dim = 48;
    c->model.num_heads = 3;
    c->model.max_seq_len = 16;
    c->train.seq_len = 13;
    c->train.batch_size = 2;
    c->train.grad_accum = 1;
    c->train.max_steps = 6;
    c->train.threads = 1;
    c->optim.lr = 1e-2f;
    c->optim.warmup_steps = 2;
    c->data.shuffle = true;
    /* MFU is not tested here: no start-up FLOP/s measurement (note [peak-fma]
     * in src/train/telemetry.c), 0.1 s of one core per trainer */
    c->log.peak_tflops = 1.0f;
}

/* Tolerances (note [parity-tolerance]); "tol.loss=", "tol.norm=", "tol.param=" override;
 * "tol.grad=" (off by default) also compares the first step's gradients. */
static double tol_loss = 1e-6, tol_norm = 1e-5, tol_param = 5e-4, tol_grad = 0.0;

static void apply_args(sharc_config *c, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        char key[128];
        const char *eq = strchr(argv[i], '=');
        ASSERT_TRUE(eq != NULL);
        snprintf(key, sizeof key, "%.*s", (int)(eq - argv[i]), argv[i]);
        if (!strcmp(key, "tol.loss")) tol_loss = atof(eq + 1);
        else if (!strcmp(key, "tol.norm")) tol_norm = atof(eq + 1);
        else if (!strcmp(key, "tol.param")) tol_param = atof(eq + 1);
        else if (!strcmp(key, "tol.grad")) tol_grad = atof(eq + 1);
        else ASSERT_OK(sharc_config_set(c, key, eq + 1, "test arguments"));
    }
    ASSERT_OK(sharc_config_validate(c));
}

/* Note [parity-ref]: the one-process reference of test_parity and
 * test_ckpt_load, computed once. It used to be trained on every rank, in the
 * same process as the run under test, so N ranks did N copies of the work
 * of one global batch (at 4 ranks four fifths of the CPU time). Now rank 0
 * trains it before the run under test, alone (the other ranks sleep, not
 * spin, until it is done), and broadcasts what the comparisons read: every
 * step's loss, gradient norm, valid targets and lr, and each parameter's
 * full gradient after the first step and its final values. With
 * SHARC_PARITY_CACHE (tests/cli/mpi_lib.inc: a directory of the script
 * run's own) rank 0 also keeps it there, in a file named by a hash of the
 * reference's whole configuration (as YAML) and the SHARC_* environment
 * (SHARC_BF16 changes the arithmetic), and a later run whose reference is
 * the same reads it instead of training it again. Only rank 0 touches the
 * file, so ranks on other hosts need no shared directory. The reference is
 * the same deterministic one-process run as before, only trained in another
 * order relative to the run under test. */
typedef struct {
    char name[128];
    int64_t numel;
    float *param; /* final values */
    float *grad;  /* the gradient after the first step */
} parity_ref_tensor;

typedef struct {
    double loss, grad_norm, lr;
    int64_t valid_tokens;
} parity_ref_step;

typedef struct {
    int64_t nsteps, ntensors;
    parity_ref_step *steps;
    parity_ref_tensor *t;
} parity_ref;

static const parity_ref_tensor *parity_ref_find(const parity_ref *r, const char *name, int64_t numel) {
    for (int64_t i = 0; i < r->ntensors; i++)
        if (!strcmp(r->t[i].name, name)) {
            if (r->t[i].numel != numel)
                TEST_FAIL_AT("reference %s has %lld elements, the run %lld", name, (long long)r->t[i].numel,
                             (long long)numel);
            return &r->t[i];
        }
    TEST_FAIL_AT("parameter %s is not in the one-process reference", name);
    return NULL;
}

static void parity_ref_free(parity_ref *r) {
    for (int64_t i = 0; i < r->ntensors; i++) {
        free(r->t[i].param);
        free(r->t[i].grad);
    }
    free(r->t);
    free(r->steps);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* FNV-1a of a string and its terminating zero (a separator) */
static uint64_t fnv1a_str(uint64_t h, const char *s) {
    do h = (h ^ (unsigned char)*s) * 1099511628211ull;
    while (*s++);
    return h;
}

/* FNV-1a over the reference's configuration and the sorted SHARC_* environment */
static uint64_t parity_ref_key(const sharc_config *cref) {
    extern char **environ;
    char *yaml = sharc_config_to_yaml(cref);
    ASSERT_TRUE(yaml != NULL);
    uint64_t h = fnv1a_str(1469598103934665603ull, yaml);
    free(yaml);
    int n = 0;
    for (char **e = environ; *e; e++) n++;
    char **vars = malloc(sizeof(char *) * (size_t)(n + 1));
    int k = 0;
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "SHARC_", 6) && strncmp(*e, "SHARC_PARITY_CACHE=", 19)) vars[k++] = *e;
    qsort(vars, (size_t)k, sizeof *vars, cmp_str);
    for (int i = 0; i < k; i++) h = fnv1a_str(h, vars[i]);
    free(vars);
    return h;
}

#define WRITE(f, p, n) ASSERT_TRUE(fwrite((p), sizeof *(p), (size_t)(n), (f)) == (size_t)(n))
#define READ(f, p, n)  ASSERT_TRUE(fread((p), sizeof *(p), (size_t)(n), (f)) == (size_t)(n))

/* One process's engine `e` into r's tensors (made at the first call): its
 * gradients (grads) or its parameters. One process holds every element. */
static void parity_ref_tensors(sharc_fsdp *e, parity_ref *r, bool grads) {
    if (!r->t) {
        for (int u = 0; u < sharc_fsdp_num_units(e); u++) r->ntensors += sharc_fsdp_unit_spec(e, u)->nparams;
        r->t = calloc((size_t)r->ntensors, sizeof *r->t);
    }
    int64_t i = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *spec = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        const float *g = sharc_fsdp_shard_grads(e, u);
        for (int p = 0; p < spec->nparams; p++, i++) {
            parity_ref_tensor *t = &r->t[i];
            if (!t->param) {
                ASSERT_TRUE(strlen(spec->params[p].name) < sizeof t->name);
                snprintf(t->name, sizeof t->name, "%s", spec->params[p].name);
                t->numel = spec->params[p].numel;
                t->param = calloc((size_t)t->numel, sizeof(float));
                t->grad = calloc((size_t)t->numel, sizeof(float));
            }
            if (!grads) {
                ASSERT_OK(sharc_fsdp_param_read_local(e, t->name, t->param, t->numel));
                continue;
            }
            int64_t held = 0; /* a frozen unit has no gradient: zeros */
            for (int k = 0; k < nseg && g; k++)
                if (segs[k].param == p) {
                    memcpy(t->grad + segs[k].param_off, g + segs[k].shard_off, sizeof(float) * (size_t)segs[k].len);
                    held += segs[k].len;
                }
            ASSERT_TRUE(!g || held == t->numel);
        }
    }
}

/* Trains the one-process reference; returns it serialized (malloc'd, *len bytes). */
static char *parity_ref_train(const sharc_config *cref, size_t *len) {
    sharc_trainer *ref;
    ASSERT_OK(sharc_trainer_init(&ref, cref, NULL));
    sharc_fsdp *e = sharc_trainer_engine(ref);
    parity_ref r = {.nsteps = cref->train.max_steps};
    r.steps = calloc((size_t)r.nsteps, sizeof *r.steps);
    for (int64_t s = 0; s < r.nsteps; s++) {
        sharc_step_stats b;
        ASSERT_OK(sharc_trainer_step(ref, &b));
        r.steps[s] = (parity_ref_step){b.loss, b.grad_norm, b.lr, b.valid_tokens};
        if (s == 0) parity_ref_tensors(e, &r, true);
    }
    parity_ref_tensors(e, &r, false);
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    ASSERT_TRUE(f != NULL);
    WRITE(f, &r.nsteps, 1);
    WRITE(f, r.steps, r.nsteps);
    WRITE(f, &r.ntensors, 1);
    for (int64_t i = 0; i < r.ntensors; i++) {
        WRITE(f, r.t[i].name, sizeof r.t[i].name);
        WRITE(f, &r.t[i].numel, 1);
        WRITE(f, r.t[i].param, r.t[i].numel);
        WRITE(f, r.t[i].grad, r.t[i].numel);
    }
    ASSERT_TRUE(fclose(f) == 0);
    parity_ref_free(&r);
    sharc_trainer_free(ref);
    return buf;
}

static void parity_ref_load(parity_ref *r, char *buf, size_t len) {
    FILE *f = fmemopen(buf, len, "rb");
    ASSERT_TRUE(f != NULL);
    READ(f, &r->nsteps, 1);
    r->steps = calloc((size_t)r->nsteps, sizeof *r->steps);
    READ(f, r->steps, r->nsteps);
    READ(f, &r->ntensors, 1);
    r->t = calloc((size_t)r->ntensors, sizeof *r->t);
    for (int64_t i = 0; i < r->ntensors; i++) {
        parity_ref_tensor *t = &r->t[i];
        READ(f, t->name, sizeof t->name);
        READ(f, &t->numel, 1);
        t->param = malloc(sizeof(float) * (size_t)t->numel);
        t->grad = malloc(sizeof(float) * (size_t)t->numel);
        READ(f, t->param, t->numel);
        READ(f, t->grad, t->numel);
    }
    ASSERT_TRUE(fgetc(f) == EOF);
    fclose(f);
}

/* A barrier whose waiters sleep: the ranks waiting for rank 0's reference
 * would otherwise spin in MPI on the cores it trains on. */
static void barrier_sleeping(void) {
    int one = 1, sum;
    sharc_comm_request *req;
    ASSERT_OK(sharc_comm_iall_reduce(world, &one, &sum, 1, SHARC_DT_I32, SHARC_REDUCE_OP_SUM, NULL, &req));
    for (bool done = false;;) {
        ASSERT_OK(sharc_comm_test(req, &done));
        if (done) break;
        usleep(2000);
    }
}

/* Note [parity-ref]: the reference run of `cref` on every rank, trained by
 * rank 0 unless its cache holds it, and broadcast. Collective over world. */
static void parity_ref_get(const sharc_config *cref, parity_ref *r) {
    const char *cache = getenv("SHARC_PARITY_CACHE");
    char *buf = NULL;
    int64_t len = 0;
    if (sharc_comm_rank(world) == 0) {
        char path[4096], tmp[4200];
        FILE *f = NULL;
        if (cache && *cache) {
            snprintf(path, sizeof path, "%s/%016llx.ref", cache, (unsigned long long)parity_ref_key(cref));
            f = fopen(path, "rb");
        }
        if (f) { /* trained before by this script run */
            ASSERT_TRUE(fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0);
            buf = malloc((size_t)len);
            READ(f, buf, len);
            fclose(f);
        } else {
            size_t n;
            buf = parity_ref_train(cref, &n);
            len = (int64_t)n;
            if (cache && *cache) { /* whole or not at all: written aside, then renamed */
                mkdir(cache, 0755);
                snprintf(tmp, sizeof tmp, "%s.partial", path);
                if (!(f = fopen(tmp, "wb"))) TEST_FAIL_AT("cannot write the parity reference %s", tmp);
                WRITE(f, buf, len);
                ASSERT_TRUE(fclose(f) == 0 && rename(tmp, path) == 0);
            }
        }
    }
    barrier_sleeping();
    ASSERT_OK(sharc_comm_broadcast(world, &len, 1, SHARC_DT_I64, 0));
    if (!buf) buf = malloc((size_t)len);
    ASSERT_OK(sharc_comm_broadcast(world, buf, (size_t)len, SHARC_DT_U8, 0));
    parity_ref_load(r, buf, (size_t)len);
    free(buf);
    ASSERT_EQ(r->nsteps, cref->train.max_steps);
}

/* Note [parity-tolerance]. N ranks add the same per-micro-batch gradients
 * in another order than one process (a reduce-scatter sums ranks, then
 * micro-batches), so gradients differ in their last bits. Losses and the
 * gradient norm are compared at 1e-6 and 1e-5 relative. Parameters are not
 * comparable at 1e-6 relative after a few Adam steps: Adam's update is
 * m / sqrt(v), about +-lr per element whatever the gradient's size, so where
 * a gradient is small (a sum with cancellation) its last-bit differences
 * become differences of a few 1e-5 of the step; with lr = 1e-2 on weights of
 * 0.02 that is about 1e-5 of the weight. The bound used is
 *     |a - b| <= 1e-6 |b| + 5e-4 x (sum of the learning rates applied),
 * i.e. within 0.05% of the distance Adam can move a weight (observed: up to
 * 1.5e-4, with gradient accumulation). That is the size of fp32 reordering
 * itself: ONE process trained on the same global batch split into 9
 * micro-batches of 2 instead of 1 of 18 differs from itself by 4e-4 of the
 * lr sum (REF_SPLIT below). A real error (a lost micro-batch, a wrong scale
 * or shard offset) moves weights by a whole step, ~1 of the lr sum, and the
 * losses, compared at 1e-6, move with it.
 * bf16 parameters: a last-bit difference of a master weight can flip its
 * bf16 rounding (a 2^-8 relative step) and every gradient that weight
 * touches, so the bounds there are 1e-4 on the loss, 1e-3 on the norm and
 * 2e-3 of the lr sum (observed: 1e-5 on the loss); bf16
 * reduction rounds every rank's gradient contribution to 8 bits of
 * mantissa, which one process never does; at lr = 1e-2 this tiny model's
 * training is chaotic enough to turn that into 2% differences of the
 * gradient norm within 5 steps, so it is checked at lr = 1e-3 on the loss
 * (1e-3) and norm (1e-2) only: where a gradient is a small sum of larger
 * per-rank parts, their rounding can flip its sign and Adam then moves that
 * weight a full step the other way, so single weights are not comparable.
 * bf16 compute (note [bf16-compute]) rounds activations too: N ranks and
 * one process multiply row blocks of other heights, so a last-bit
 * difference of an fp32 product (another kernel or blocking for another
 * M) can flip an activation's bf16 rounding, and at lr = 1e-2 the tiny
 * model amplifies that to 2e-4 of the loss within 5 steps. Checked at
 * lr = 1e-3: 1e-4 on the loss, 1e-3 on the norm, 5e-3 of the lr sum
 * (observed: losses equal or within 2e-7, parameters within 3.4e-4). Not
 * bit for bit, as fp32 is not: dW sums over a rank's rows, then ranks.
 * GPT-2's key bias is skipped: its gradient is zero in exact arithmetic
 * (softmax ignores a constant added to a row of scores), so both runs hold
 * rounding noise there, which Adam turns into full steps. Returns the worst
 * |a - b| / allowed (must be <= 1). */
static double compare_params(sharc_fsdp *got, const parity_ref *ref, double lr_sum, int C, double *abs_worst) {
    double worst = 0.0;
    *abs_worst = 0.0;
    for (int u = 0; u < sharc_fsdp_num_units(got); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(got, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(got, u, &segs);
        const float *shard = sharc_fsdp_shard_params(got, u);
        for (int k = 0; k < nseg; k++) {
            const sharc_param_spec *p = &s->params[segs[k].param];
            bool key_bias = strstr(p->name, "attn.c_attn.bias") != NULL;
            const float *full = parity_ref_find(ref, p->name, p->numel)->param;
            for (int64_t i = 0; i < segs[k].len; i++) {
                int64_t j = segs[k].param_off + i;
                if (key_bias && j >= C && j < 2 * C) continue;
                double a = shard[segs[k].shard_off + i], b = full[j];
                double d = fabs(a - b), allowed = 1e-6 * fabs(b) + tol_param * lr_sum;
                if (d / allowed > worst && getenv("SHARC_PARITY_DEBUG"))
                    fprintf(stderr, "  %s[%lld]: %.9g vs %.9g\n", p->name, (long long)j, a, b);
                worst = d / allowed > worst ? d / allowed : worst;
                *abs_worst = d > *abs_worst ? d : *abs_worst;
            }
        }
    }
    return worst;
}

/* This rank's gradient shards against the one-process run's full gradients:
 * |g - ref| <= tol (|ref| + max |ref| of the parameter), i.e. within tol of
 * the tensor's scale (GPT-2's key bias skipped, note [parity-tolerance]).
 * Returns the worst |g - ref| / (|ref| + max |ref|). */
static double compare_grads(sharc_fsdp *got, const parity_ref *ref, int C, double tol, int64_t step) {
    double worst = 0.0;
    for (int u = 0; u < sharc_fsdp_num_units(got); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(got, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(got, u, &segs);
        const float *g = sharc_fsdp_shard_grads(got, u);
        for (int k = 0; k < nseg; k++) {
            const sharc_param_spec *p = &s->params[segs[k].param];
            bool key_bias = strstr(p->name, "attn.c_attn.bias") != NULL;
            const float *rg = parity_ref_find(ref, p->name, p->numel)->grad;
            double scale = 0.0;
            for (int64_t j = 0; j < p->numel; j++) scale = fabs((double)rg[j]) > scale ? fabs((double)rg[j]) : scale;
            for (int64_t i = 0; i < segs[k].len; i++) {
                int64_t j = segs[k].param_off + i;
                if (key_bias && j >= C && j < 2 * C) continue;
                double b = rg[j], a = g[segs[k].shard_off + i];
                double rel = fabs(a - b) / (fabs(b) + scale + 1e-30);
                if (rel > tol)
                    TEST_FAIL_AT("step %lld: gradient of %s[%lld] %.9g vs %.9g at one process (%.2e of its scale)",
                                 (long long)step, p->name, (long long)j, a, b, rel);
                worst = rel > worst ? rel : worst;
            }
        }
    }
    return worst;
}

static void test_parity(int argc, char **argv) {
    ASSERT_TRUE(argc >= 1);
    int R = sharc_comm_size(world);
    sharc_config c, cref;
    base_config(&c, argv[0]);
    apply_args(&c, argc - 1, argv + 1);
    /* the reference: one process, the same global batch (grad_accum x data
     * streams micro-batches; mesh.sp and mesh.tp ranks share a stream) */
    cref = c;
    if (cref.fsdp.engine.reshard_after_forward > 1) cref.fsdp.engine.reshard_after_forward = 1; /* one process */
    cref.train.grad_accum = c.train.grad_accum * R / (c.mesh.sp * c.mesh.tp);
    cref.mesh.sp = 1;
    cref.mesh.tp = 1;
    /* REF_SPLIT=B: the reference takes the same global batch as micro-batches of
     * B sequences (to measure how much the order of sums alone moves results) */
    if (getenv("REF_SPLIT")) {
        int b = atoi(getenv("REF_SPLIT"));
        int global = c.train.batch_size * c.train.grad_accum * R / (c.mesh.sp * c.mesh.tp);
        cref.train.batch_size = b;
        cref.train.grad_accum = global / b;
        ASSERT_EQ(cref.train.grad_accum * b, global);
    }
    /* note [parity-ref]: rank 0 trains the reference (unless this script's
     * cache holds it), every rank reads it */
    parity_ref refd;
    parity_ref_get(&cref, &refd);
    sharc_trainer *t;
    ASSERT_OK(sharc_trainer_init(&t, &c, world));
    double worst_loss = 0.0, lr_sum = 0.0, worst_grad = 0.0;
    for (int64_t s = 0; s < c.train.max_steps; s++) {
        sharc_step_stats a;
        parity_ref_step b = refd.steps[s];
        ASSERT_OK(sharc_trainer_step(t, &a));
        lr_sum += b.lr;
        double rel = fabs(a.loss - b.loss) / fabs(b.loss);
        worst_loss = rel > worst_loss ? rel : worst_loss;
        if (rel > tol_loss)
            TEST_FAIL_AT("step %lld: loss %.9f at %d ranks vs %.9f at one (rel %.2e)", (long long)s, a.loss, R, b.loss,
                         rel);
        ASSERT_NEAR(a.grad_norm, b.grad_norm, tol_norm, 0);
        ASSERT_EQ(a.valid_tokens, b.valid_tokens);
        /* gradients at the first step only: both runs start from the same
         * parameters there, later Adam turns last-bit differences into
         * parameter differences (note [parity-tolerance]) */
        if (tol_grad > 0 && s == 0) {
            double w = compare_grads(sharc_trainer_engine(t), &refd, c.model.embed_dim, tol_grad, s);
            worst_grad = w > worst_grad ? w : worst_grad;
        }
    }
    double abs_worst;
    double worst_param = compare_params(sharc_trainer_engine(t), &refd, lr_sum, c.model.embed_dim, &abs_worst);
    if (worst_param > 1.0)
        TEST_FAIL_AT("final parameters differ by %.3g, %.2f x the bound of note [parity-tolerance]", abs_worst,
                     worst_param);
    /* note [tp] in src/model/tp.h: the parameters replicated over tp (norms,
     * row-parallel biases, GPT-2's wpe; the embedding and head when tp does
     * not divide the vocabulary) are bit for bit the same on every tp rank
     * of a group, so their gradients were too */
    const sharc_mesh *mesh = sharc_trainer_mesh(t);
    if (mesh->tp_group) {
        sharc_fsdp *e = sharc_trainer_engine(t);
        int64_t h[2] = {(int64_t)1469598103934665603ull, 0};
        for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
            const sharc_segment *segs;
            int nseg = sharc_fsdp_shard_segments(e, u, &segs);
            for (int k = 0; k < nseg; k++) {
                if (sharc_fsdp_unit_spec(e, u)->params[segs[k].param].tp_dim >= 0) continue;
                const unsigned char *b = (const unsigned char *)(sharc_fsdp_shard_params(e, u) + segs[k].shard_off);
                for (int64_t i = 0; i < segs[k].len * (int64_t)sizeof(float); i++)
                    h[0] = (int64_t)(((uint64_t)h[0] ^ b[i]) * 1099511628211ull);
                h[1] += segs[k].len;
            }
        }
        int64_t lo[2], hi[2];
        ASSERT_OK(sharc_comm_all_reduce(mesh->tp_group, h, lo, 2, SHARC_DT_I64, SHARC_REDUCE_OP_MIN));
        ASSERT_OK(sharc_comm_all_reduce(mesh->tp_group, h, hi, 2, SHARC_DT_I64, SHARC_REDUCE_OP_MAX));
        /* not vacuous: some rank holds replicated elements (with the vocabulary
         * split, note [tp-vocab], only the norms and biases are, and a rank's
         * FSDP shard may hold none of them) */
        int64_t held;
        ASSERT_OK(sharc_comm_all_reduce(world, &h[1], &held, 1, SHARC_DT_I64, SHARC_REDUCE_OP_SUM));
        ASSERT_TRUE(held > 0);
        if (lo[0] != hi[0] || lo[1] != hi[1])
            TEST_FAIL_AT("the parameters replicated over tp differ between the tp ranks of a group");
    }
    double all[3] = {worst_loss, abs_worst, worst_grad};
    ASSERT_OK(sharc_comm_all_reduce(world, all, all, 3, SHARC_DT_F64, SHARC_REDUCE_OP_MAX));
    if (sharc_comm_rank(world) == 0) {
        printf("parity at %d ranks: worst loss %.2e relative, worst parameter %.2e absolute (%.1e of the lr sum)", R,
               all[0], all[1], all[1] / lr_sum);
        if (tol_grad > 0) printf(", worst gradient %.2e of its scale", all[2]);
        printf("\n");
    }
    sharc_trainer_free(t);
    parity_ref_free(&refd);
}

/* --------------------------------------------------------------- nodes */

typedef char hostname_t[64];

/* Every rank's hostname over c, in c's rank order. */
static hostname_t *hostnames(sharc_comm *c) {
    hostname_t me = {0};
    ASSERT_TRUE(gethostname(me, sizeof me - 1) == 0);
    hostname_t *all = calloc((size_t)sharc_comm_size(c), sizeof *all);
    ASSERT_OK(sharc_comm_all_gather(c, me, all, sizeof me, SHARC_DT_U8));
    return all;
}

static int count_host(hostname_t *all, int n, const char *h) {
    int k = 0;
    for (int q = 0; q < n; q++) k += strcmp(all[q], h) == 0;
    return k;
}

/* One step of `strategy` over the world; returns the step's collective bytes
 * per kind (this rank) and whether parameters were shared in place. */
static bool step_bytes(const char *data, const char *strategy, int fsdp_size, int64_t bytes[SHARC_COLL_NKINDS],
                       hostname_t **shard_hosts, hostname_t **rep_hosts, int *S, int *Rr) {
    sharc_config c;
    base_config(&c, data);
    ASSERT_OK(sharc_config_set(&c, "fsdp.sharding_strategy", strategy, "test"));
    c.fsdp.engine.fsdp_size = fsdp_size;
    c.train.max_steps = 1;
    ASSERT_OK(sharc_config_validate(&c));
    sharc_trainer *t;
    ASSERT_OK(sharc_trainer_init(&t, &c, world));
    const sharc_mesh *m = sharc_trainer_mesh(t);
    *S = m->dp_shard;
    *Rr = m->dp_replicate;
    *shard_hosts = hostnames(m->shard);
    *rep_hosts = hostnames(m->replicate);
    /* only the step's own traffic (start-up agreement and the lines above excluded) */
    sharc_comm_stats_reset(world);
    sharc_comm_stats_reset(m->shard);
    sharc_comm_stats_reset(m->replicate);
    sharc_step_stats st;
    ASSERT_OK(sharc_trainer_step(t, &st));
    for (int k = 0; k < SHARC_COLL_NKINDS; k++) bytes[k] = st.comm.bytes[k];
    bool shared = sharc_fsdp_params_shared(sharc_trainer_engine(t));
    sharc_trainer_free(t);
    return shared;
}

static void test_nodes(int argc, char **argv) {
    ASSERT_TRUE(argc >= 2);
    const int K = atoi(argv[0]), R = sharc_comm_size(world), r = sharc_comm_rank(world);
    ASSERT_TRUE(K >= 1 && R % K == 0);
    const int H = R / K;
    const char *shm_env = getenv("SHARC_COMM_SHM");
    const bool shm = !(shm_env && strcmp(shm_env, "0") == 0); /* SHARC_COMM_SHM=0: private shards */
    /* the launcher placed K consecutive ranks on each host */
    hostname_t *all = hostnames(world);
    for (int q = 0; q < R; q++) {
        if (strcmp(all[q], all[q / K * K]) != 0)
            TEST_FAIL_AT("rank %d runs on %s, rank %d on %s: expected %d consecutive ranks per host", q, all[q],
                         q / K * K, all[q / K * K], K);
        if (q % K == 0 && count_host(all, R, all[q]) != K)
            TEST_FAIL_AT("host %s has %d ranks, expected %d", all[q], count_host(all, R, all[q]), K);
    }
    /* MPI's node (MPI_COMM_TYPE_SHARED) is exactly the host */
    sharc_comm *node;
    ASSERT_OK(sharc_comm_split_node(world, &node));
    const int nr = sharc_comm_rank(node);
    ASSERT_EQ(sharc_comm_size(node), K);
    hostname_t *nodes = hostnames(node);
    ASSERT_EQ(count_host(nodes, K, all[r]), K);
    /* a shared window inside the host: each rank writes its part, the others read it */
    int32_t *wr = calloc((size_t)K, sizeof *wr);
    int32_t me32 = r;
    ASSERT_OK(sharc_comm_all_gather(node, &me32, wr, 1, SHARC_DT_I32));
    sharc_comm_shared *sh;
    ASSERT_OK(sharc_comm_shared_alloc(node, 4096, &sh));
    memset(sh->base[nr], 0x20 + r, 4096);
    ASSERT_OK(sharc_comm_shared_sync(node, sh));
    for (int q = 0; q < K; q++) {
        ASSERT_EQ((unsigned char)sh->base[q][0], 0x20 + wr[q]);
        ASSERT_EQ((unsigned char)sh->base[q][4095], 0x20 + wr[q]);
    }
    ASSERT_OK(sharc_comm_shared_sync(node, sh));
    sharc_comm_shared_free(sh);
    /* none across hosts */
    sharc_status st = sharc_comm_shared_alloc(world, 4096, &sh);
    if (H > 1) {
        ASSERT_TRUE(st == SHARC_ERR_UNSUPPORTED);
    } else {
        ASSERT_OK(st);
        sharc_comm_shared_free(sh);
    }
    /* FULL_SHARD over every rank: with several hosts the shard group spans them,
     * so parameters move by MPI all-gathers (no window) */
    int64_t b[SHARC_COLL_NKINDS];
    hostname_t *sh_hosts, *rep_hosts;
    int S, Rr;
    bool shared = step_bytes(argv[1], "FULL_SHARD", 0, b, &sh_hosts, &rep_hosts, &S, &Rr);
    ASSERT_EQ(S, R);
    ASSERT_TRUE(shared == (H == 1 && R > 1 && shm));
    ASSERT_TRUE((b[SHARC_COLL_ALL_GATHER] > 0) == (R > 1 && !shared));
    free(sh_hosts);
    free(rep_hosts);
    /* HYBRID_SHARD with fsdp_size = ranks per host: each shard group is one
     * host (parameters shared in place, no all-gather bytes), each replicate
     * group has one rank per host, and the gradients' all-reduce crosses hosts.
     * (fsdp_size 1 means plain FSDP, as in ROLL: nothing to check at K = 1.) */
    if (K > 1) {
        shared = step_bytes(argv[1], "HYBRID_SHARD", K, b, &sh_hosts, &rep_hosts, &S, &Rr);
        ASSERT_EQ(S, K);
        ASSERT_EQ(Rr, H);
        ASSERT_EQ(count_host(sh_hosts, S, all[r]), K);
        for (int q = 0; q < Rr; q++) ASSERT_EQ(count_host(rep_hosts, Rr, rep_hosts[q]), 1);
        ASSERT_TRUE(shared == shm);
        ASSERT_TRUE((b[SHARC_COLL_ALL_GATHER] == 0) == shm);
        /* 24 bytes are the two scalars every strategy all-reduces; more is the gradients */
        ASSERT_TRUE((b[SHARC_COLL_ALL_REDUCE] > 24) == (H > 1));
        free(sh_hosts);
        free(rep_hosts);
    }
    if (r == 0)
        printf("nodes: %d ranks on %d hosts (%d per host): MPI's node is the host%s\n", R, H, K,
               K > 1 && H > 1 ? "; HYBRID_SHARD shards inside hosts, replicates across" : "");
    free(nodes);
    free(wr);
    free(all);
    sharc_comm_free(node);
}

/* -------------------------------------------------------------- memory */

static int64_t model_state(void) {
    sharc_mem_stats m;
    sharc_mem_get(&m);
    return m.current[SHARC_MEM_PARAMS] + m.current[SHARC_MEM_GRADS] + m.current[SHARC_MEM_OPTIM];
}

static void test_memory(int argc, char **argv) {
    ASSERT_TRUE(argc >= 1);
    int R = sharc_comm_size(world);
    sharc_config c;
    base_config(&c, argv[0]);
    c.model.num_layers = 4;
    c.model.embed_dim = 96;
    apply_args(&c, argc - 1, argv + 1);
    int64_t before = model_state();
    sharc_trainer *one;
    sharc_config c1 = c;
    if (c1.fsdp.engine.reshard_after_forward > 1) c1.fsdp.engine.reshard_after_forward = 1; /* one process */
    ASSERT_OK(sharc_trainer_init(&one, &c1, NULL));
    int64_t one_bytes = model_state() - before;
    sharc_trainer_free(one);
    before = model_state();
    sharc_mem_stats m0;
    sharc_mem_get(&m0);
    sharc_trainer *t;
    ASSERT_OK(sharc_trainer_init(&t, &c, world));
    int64_t mine = model_state() - before;
    sharc_step_stats s;
    ASSERT_OK(sharc_trainer_step(t, &s));
    /* Note [memory-bound]: model state (params + grads + both moments) per rank
     * is 1/N of one process's plus padding to 16 floats per unit and rank;
     * gathered memory is at most limit x the largest padded unit. */
    sharc_fsdp *e = sharc_trainer_engine(t);
    int64_t padding = (int64_t)sharc_fsdp_num_units(e) * 16 * 4 * 4;
    if (mine > one_bytes / R + padding)
        TEST_FAIL_AT("model state %lld bytes at %d ranks, one process %lld (bound %lld)", (long long)mine, R,
                     (long long)one_bytes, (long long)(one_bytes / R + padding));
    int64_t gathered_bound = sharc_fsdp_gathered_capacity_bytes(e);
    int64_t gathered_peak = s.mem.peak[SHARC_MEM_GATHERED];
    /* the documented formula, evaluated from the unit sizes */
    int64_t max_plain = 0, roots = 0, units = sharc_fsdp_num_units(e);
    for (int u = 0; u < units; u++) {
        int64_t padded = sharc_fsdp_shard_numel(e, u) * R * 4;
        if (sharc_fsdp_unit_spec(e, u)->root) roots += padded;
        else max_plain = padded > max_plain ? padded : max_plain;
    }
    int prefetch = c.fsdp.engine.forward_prefetch || c.fsdp.engine.backward_prefetch != SHARC_BACKWARD_PREFETCH_NONE;
    /* note [shared-params]: a node-local fp32 group reads the parameters in place, no slots */
    int64_t param_slots = sharc_fsdp_params_shared(e) ? 0 : (1 + prefetch) * max_plain + roots;
    /* note [post-forward]: with reshard_after_forward N every block (not the
     * embedding, not the head) keeps padded / N in param_dtype */
    int N = c.fsdp.engine.reshard_after_forward;
    if (N > 1 && N < R && !sharc_fsdp_params_shared(e))
        for (int u = 1; u < units - 1; u++)
            param_slots += sharc_fsdp_shard_numel(e, u) * R / N * (int64_t)sharc_dtype_size(c.fsdp.engine.param_dtype);
    int64_t formula = R > 1 ? param_slots + max_plain + roots : 0;
    if (gathered_bound != formula)
        TEST_FAIL_AT("gathered capacity %lld bytes, formula %lld", (long long)gathered_bound, (long long)formula);
    if (gathered_peak > gathered_bound)
        TEST_FAIL_AT("gathered peak %lld above bound %lld", (long long)gathered_peak, (long long)gathered_bound);
    if (s.gathered_peak > sharc_fsdp_gathered_limit(e))
        TEST_FAIL_AT("%lld gathered units alive, limit %d", (long long)s.gathered_peak, sharc_fsdp_gathered_limit(e));
    /* the engine allocated what its plan (src/fsdp/plan.c) says, shared windows included */
    sharc_mem_stats m1;
    sharc_mem_get(&m1);
    const sharc_mem_cat engine_only[] = {SHARC_MEM_PARAMS, SHARC_MEM_GRADS, SHARC_MEM_GATHERED};
    for (int k = 0; k < 3; k++) {
        sharc_mem_cat cat = engine_only[k];
        if (m1.current[cat] - m0.current[cat] != sharc_fsdp_planned_bytes(e, cat))
            TEST_FAIL_AT("%s: %lld bytes allocated, %lld planned", sharc_mem_cat_name(cat),
                         (long long)(m1.current[cat] - m0.current[cat]), (long long)sharc_fsdp_planned_bytes(e, cat));
    }
    if (sharc_comm_rank(world) == 0)
        printf("model state per rank: %lld bytes at %d ranks, %lld at one (ratio %.3f); gathered peak %lld "
               "(limit %d units of %lld bytes)%s\n",
               (long long)mine, R, (long long)one_bytes, (double)mine / (double)one_bytes, (long long)gathered_peak,
               sharc_fsdp_gathered_limit(e), (long long)sharc_fsdp_gathered_unit_bytes(e),
               sharc_fsdp_params_shared(e) ? "; parameters shared in place" : "");
    sharc_trainer_free(t);
}

/* ---------------------------------------------------------------- frozen */

/* Note [frozen-params] against the same run without freezing, same ranks,
 * same strategy, clipping off (so an update depends only on its own
 * gradient): after step 1 the loss, every trainable gradient and every
 * trainable parameter are bit-identical, and for 4 more steps the frozen
 * parameters never change. A frozen unit holds no gradient shard and no
 * moments (exact bytes), and its reduce-scatter / all-reduce bytes are gone
 * (exact bytes). */
static void test_frozen(int argc, char **argv) {
    ASSERT_TRUE(argc >= 1);
    sharc_config c, cref;
    base_config(&c, argv[0]);
    c.optim.max_grad_norm = 0.0f;
    apply_args(&c, argc - 1, argv + 1);
    ASSERT_TRUE(c.freeze_module_prefix[0] || c.trainable[0]);
    cref = c;
    cref.freeze_module_prefix[0] = cref.trainable[0] = 0;
    sharc_mem_stats m0, m1, m2;
    sharc_mem_get(&m0);
    sharc_trainer *ref, *t;
    ASSERT_OK(sharc_trainer_init(&ref, &cref, world));
    sharc_mem_get(&m1);
    ASSERT_OK(sharc_trainer_init(&t, &c, world));
    sharc_mem_get(&m2);
    sharc_fsdp *e = sharc_trainer_engine(t), *er = sharc_trainer_engine(ref);
    const int U = sharc_fsdp_num_units(e), S = sharc_trainer_mesh(t)->dp_shard, R = sharc_comm_size(world);
    /* frozen parameters before training; trainable shard sizes */
    int64_t trainable_shard = 0, frozen_shard = 0, frozen_padded = 0, nfrozen = 0;
    float **init = calloc((size_t)U, sizeof *init);
    for (int u = 0; u < U; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        int64_t ns = sharc_fsdp_shard_numel(e, u);
        for (int p = 0; p < s->nparams; p++) nfrozen += s->params[p].frozen;
        if (sharc_unit_trainable(s)) {
            trainable_shard += ns;
            ASSERT_TRUE(sharc_fsdp_shard_grads(e, u) != NULL && sharc_adamw_m(sharc_trainer_optimizer(t), u) != NULL);
        } else {
            frozen_shard += ns;
            frozen_padded += ns * S;
            ASSERT_TRUE(sharc_fsdp_shard_grads(e, u) == NULL && sharc_adamw_m(sharc_trainer_optimizer(t), u) == NULL);
        }
        init[u] = malloc(sizeof(float) * (size_t)(ns > 0 ? ns : 1));
        memcpy(init[u], sharc_fsdp_shard_params(e, u), sizeof(float) * (size_t)ns);
    }
    ASSERT_TRUE(nfrozen > 0);
    /* held: no gradient shard and no moments for frozen units */
    int64_t g_ref = m1.current[SHARC_MEM_GRADS] - m0.current[SHARC_MEM_GRADS];
    int64_t g_t = m2.current[SHARC_MEM_GRADS] - m1.current[SHARC_MEM_GRADS];
    int64_t o_ref = m1.current[SHARC_MEM_OPTIM] - m0.current[SHARC_MEM_OPTIM];
    int64_t o_t = m2.current[SHARC_MEM_OPTIM] - m1.current[SHARC_MEM_OPTIM];
    ASSERT_EQ(g_t, 4 * trainable_shard);
    ASSERT_EQ(g_t, sharc_fsdp_planned_bytes(e, SHARC_MEM_GRADS));
    ASSERT_EQ(o_t, 8 * trainable_shard);
    ASSERT_EQ(g_ref - g_t, 4 * frozen_shard);
    ASSERT_EQ(o_ref - o_t, 8 * frozen_shard);
    ASSERT_TRUE(sharc_fsdp_planned_bytes(e, SHARC_MEM_GATHERED) <= sharc_fsdp_planned_bytes(er, SHARC_MEM_GATHERED));

    sharc_step_stats a, b;
    ASSERT_OK(sharc_trainer_step(ref, &b));
    ASSERT_OK(sharc_trainer_step(t, &a));
    if (memcmp(&a.loss, &b.loss, sizeof a.loss) != 0)
        TEST_FAIL_AT("step 1 loss %.17g frozen vs %.17g without", a.loss, b.loss);
    int64_t compared = 0;
    for (int u = 0; u < U; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        const float *g = sharc_fsdp_shard_grads(e, u), *gr = sharc_fsdp_shard_grads(er, u);
        const float *p = sharc_fsdp_shard_params(e, u), *pr = sharc_fsdp_shard_params(er, u);
        for (int k = 0; k < nseg; k++) {
            const sharc_param_spec *ps = &s->params[segs[k].param];
            for (int64_t i = segs[k].shard_off; i < segs[k].shard_off + segs[k].len; i++) {
                if (ps->frozen) {
                    if (memcmp(&p[i], &init[u][i], 4) != 0)
                        TEST_FAIL_AT("frozen %s changed at step 1: %.9g -> %.9g", ps->name, init[u][i], p[i]);
                    continue;
                }
                if (memcmp(&g[i], &gr[i], 4) != 0)
                    TEST_FAIL_AT("%s: gradient %.9g frozen vs %.9g without (shard element %lld)", ps->name, g[i], gr[i],
                                 (long long)i);
                if (memcmp(&p[i], &pr[i], 4) != 0)
                    TEST_FAIL_AT("%s: after step 1 %.9g frozen vs %.9g without", ps->name, p[i], pr[i]);
                compared++;
            }
        }
    }
    /* reduced: no reduce-scatter (full unit, per micro-batch) or replicate
     * all-reduce (shard, per step) of the frozen units' gradients */
    if (c.fsdp.engine.reduce_dtype == SHARC_DT_F32) {
        int A = c.train.grad_accum, R_rep = R / S;
        int64_t rs = b.comm.bytes[SHARC_COLL_REDUCE_SCATTER] - a.comm.bytes[SHARC_COLL_REDUCE_SCATTER];
        int64_t ar = b.comm.bytes[SHARC_COLL_ALL_REDUCE] - a.comm.bytes[SHARC_COLL_ALL_REDUCE];
        int64_t want_rs = S > 1 ? (int64_t)(c.fsdp.engine.no_sync ? 1 : A) * 4 * frozen_padded : 0;
        int64_t want_ar = R_rep > 1 ? 4 * frozen_shard : 0;
        if (rs != want_rs || ar != want_ar)
            TEST_FAIL_AT("bytes saved: reduce-scatter %lld (expected %lld), all-reduce %lld (expected %lld)",
                         (long long)rs, (long long)want_rs, (long long)ar, (long long)want_ar);
    }
    for (int s = 1; s < 5; s++) {
        ASSERT_OK(sharc_trainer_step(t, &a));
        ASSERT_TRUE(isfinite(a.loss) && !a.skipped);
    }
    for (int u = 0; u < U; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int nseg = sharc_fsdp_shard_segments(e, u, &segs);
        const float *p = sharc_fsdp_shard_params(e, u);
        for (int k = 0; k < nseg; k++)
            if (s->params[segs[k].param].frozen &&
                memcmp(p + segs[k].shard_off, init[u] + segs[k].shard_off, 4 * (size_t)segs[k].len) != 0)
                TEST_FAIL_AT("frozen %s changed within 5 steps", s->params[segs[k].param].name);
        free(init[u]);
    }
    free(init);
    if (sharc_comm_rank(world) == 0)
        printf("frozen at %d ranks: %lld parameters frozen; grads %lld -> %lld bytes, moments %lld -> %lld bytes per "
               "rank; reduce-scatter %lld -> %lld, all-reduce %lld -> %lld bytes in step 1; %lld trainable elements "
               "bit-identical\n",
               R, (long long)nfrozen, (long long)g_ref, (long long)g_t, (long long)o_ref, (long long)o_t,
               (long long)b.comm.bytes[SHARC_COLL_REDUCE_SCATTER], (long long)a.comm.bytes[SHARC_COLL_REDUCE_SCATTER],
               (long long)b.comm.bytes[SHARC_COLL_ALL_REDUCE], (long long)a.comm.bytes[SHARC_COLL_ALL_REDUCE],
               (long long)compared);
    sharc_trainer_free(t);
    sharc_trainer_free(ref);
}

/* --------------------------------------------------------------- memplan */

/* Note [memory-plan]: for FULL_SHARD, SHARD_GRAD_OP, NO_SHARD (and
 * HYBRID_SHARD 2 x N/2 at an even world), each with activation
 * checkpointing off and on, the peak of every planned category over two
 * steps on this rank equals the plan (sharc_memplan_make, with the rank
 * placement the trainer sees): params, grads, optim, gathered, activations
 * and comm exactly; "other" holds the dataset, which the plan leaves out, so
 * only plan <= peak is asserted there. */
static void test_memplan(int argc, char **argv) {
    ASSERT_TRUE(argc >= 1);
    const int R = sharc_comm_size(world);
    const char *strategies[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"};
    double worst = 0.0;
    int runs = 0;
    for (int si = 0; si < 4; si++)
        for (int ac = 0; ac < 2; ac++) {
            if (si == 3 && (R < 4 || R % 2)) continue;
            sharc_config c;
            /* an int reshard_after_forward needs a shard group (note [post-forward]) */
            bool int_reshard = false;
            for (int i = 1; i < argc; i++) int_reshard |= !strncmp(argv[i], "fsdp.reshard_after_forward=", 27);
            if (si == 2 && int_reshard) continue;
            base_config(&c, argv[0]);
            c.train.max_steps = 2;
            ASSERT_OK(sharc_config_set(&c, "fsdp.sharding_strategy", strategies[si], "test"));
            if (si == 3) c.fsdp.engine.fsdp_size = 2;
            c.fsdp.activation_checkpointing = ac;
            apply_args(&c, argc - 1, argv + 1);
            sharc_trainer *t;
            ASSERT_OK(sharc_trainer_init(&t, &c, world));
            const sharc_mesh *mesh = sharc_trainer_mesh(t);
            /* as the trainer places ranks for its plan (sharc_train_run) */
            int rpn = sharc_comm_shared_memory_allowed(world)                               ? R
                      : mesh->dp_shard > 1 && sharc_comm_shared_memory_allowed(mesh->shard) ? mesh->dp_shard
                                                                                            : 1;
            sharc_memplan p;
            ASSERT_OK(sharc_memplan_make(&p, sharc_trainer_config(t), R, rpn, sharc_threads_get()));
            int64_t peak[SHARC_MEM_NCAT] = {0};
            for (int s = 0; s < 2; s++) {
                sharc_step_stats st;
                ASSERT_OK(sharc_trainer_step(t, &st));
                for (int k = 0; k < SHARC_MEM_NCAT; k++) peak[k] = st.mem.peak[k] > peak[k] ? st.mem.peak[k] : peak[k];
            }
            for (int k = 0; k < SHARC_MEM_NCAT; k++) {
                bool exact = k != SHARC_MEM_OTHER;
                if (exact ? peak[k] != p.bytes[k] : peak[k] < p.bytes[k])
                    TEST_FAIL_AT("%s, activation checkpointing %d, %s: measured peak %lld bytes, planned %lld",
                                 strategies[si], ac, sharc_mem_cat_name((sharc_mem_cat)k), (long long)peak[k],
                                 (long long)p.bytes[k]);
                if (exact && p.bytes[k] > 0) {
                    double r = fabs((double)peak[k] / (double)p.bytes[k] - 1.0);
                    worst = r > worst ? r : worst;
                }
            }
            runs++;
            sharc_trainer_free(t);
        }
    if (sharc_comm_rank(world) == 0)
        printf("memory plan at %d ranks: %d configurations, every planned category's peak equal to the plan "
               "(worst relative difference %.2g)\n",
               R, runs, worst);
}

/* -------------------------------------------------------------- prefetch */

/* Note [prefetch-depth]: only when units are gathered changes with the
 * depth, never what is computed, so 4 steps at depth D equal depth 1 bit for
 * bit; at D > 1 (without a limit below it) more slots are lent at once than
 * at depth 1, never more than the plan's. */
static void test_prefetch(int argc, char **argv) {
    ASSERT_TRUE(argc >= 2);
    int depth = atoi(argv[1]);
    ASSERT_TRUE(depth >= 1);
    sharc_config c1, cd;
    base_config(&c1, argv[0]);
    c1.train.max_steps = 4;
    c1.fsdp.engine.forward_prefetch = true;
    apply_args(&c1, argc - 2, argv + 2);
    cd = c1;
    char d[16];
    snprintf(d, sizeof d, "%d", depth);
    ASSERT_OK(sharc_config_set(&cd, "fsdp.num_to_forward_prefetch", d, "test"));
    ASSERT_OK(sharc_config_set(&cd, "fsdp.num_to_backward_prefetch", d, "test"));
    cd.fsdp.engine.backward_prefetch = c1.fsdp.engine.backward_prefetch; /* keep PRE or POST */
    ASSERT_EQ(cd.fsdp.engine.forward_prefetch_depth, depth);
    sharc_trainer *a, *b;
    ASSERT_OK(sharc_trainer_init(&a, &c1, world));
    ASSERT_OK(sharc_trainer_init(&b, &cd, world));
    int64_t peak1 = 0, peakd = 0;
    for (int s = 0; s < 4; s++) {
        sharc_step_stats x, y;
        ASSERT_OK(sharc_trainer_step(a, &x));
        ASSERT_OK(sharc_trainer_step(b, &y));
        if (memcmp(&x.loss, &y.loss, sizeof x.loss) != 0 || memcmp(&x.grad_norm, &y.grad_norm, sizeof x.grad_norm))
            TEST_FAIL_AT("step %d: loss %.17g / norm %.17g at depth %d, %.17g / %.17g at depth 1", s + 1, y.loss,
                         y.grad_norm, depth, x.loss, x.grad_norm);
        peak1 = x.gathered_peak > peak1 ? x.gathered_peak : peak1;
        peakd = y.gathered_peak > peakd ? y.gathered_peak : peakd;
        /* both engines live in this process: its gathered bytes are both plans, allocated at init */
        int64_t planned = sharc_fsdp_planned_bytes(sharc_trainer_engine(a), SHARC_MEM_GATHERED) +
                          sharc_fsdp_planned_bytes(sharc_trainer_engine(b), SHARC_MEM_GATHERED);
        if (y.mem.peak[SHARC_MEM_GATHERED] != planned)
            TEST_FAIL_AT("gathered peak %lld, the two plans %lld", (long long)y.mem.peak[SHARC_MEM_GATHERED],
                         (long long)planned);
    }
    sharc_fsdp *ea = sharc_trainer_engine(a), *eb = sharc_trainer_engine(b);
    for (int u = 0; u < sharc_fsdp_num_units(ea); u++)
        if (memcmp(sharc_fsdp_shard_params(ea, u), sharc_fsdp_shard_params(eb, u),
                   sizeof(float) * (size_t)sharc_fsdp_shard_numel(ea, u)) != 0)
            TEST_FAIL_AT("unit %d's parameters differ after 4 steps at depth %d", u, depth);
    ASSERT_TRUE(peakd <= sharc_fsdp_gathered_limit(eb));
    const char *gather = sharc_fsdp_strategy_names(eb, NULL);
    bool slots = strcmp(gather, "direct") && strcmp(gather, "shared window");
    int limit = c1.fsdp.engine.limit_all_gathers;
    if (slots && depth > 1 && (limit == 0 || limit > 2) && sharc_fsdp_num_units(eb) > 3 && peakd <= peak1)
        TEST_FAIL_AT("depth %d lent at most %lld slots at once, depth 1 %lld: no deeper prefetch", depth,
                     (long long)peakd, (long long)peak1);
    if (sharc_comm_rank(world) == 0)
        printf("prefetch depth %d at %d ranks (%s): losses and parameters bit-identical to depth 1; at most %lld "
               "slots lent at once (depth 1: %lld, limit %d)\n",
               depth, sharc_comm_size(world), gather, (long long)peakd, (long long)peak1,
               sharc_fsdp_gathered_limit(eb));
    sharc_trainer_free(a);
    sharc_trainer_free(b);
}

/* --------------------------------------------------------------- reshard */

/* Note [post-forward] (src/fsdp/plan.c): reshard_after_forward N against true
 * on the same ranks. Backward's gather rebuilds each block from the slices
 * kept after forward, which are the gathered parameters, so 4 steps give the
 * same losses, norms and parameters bit for bit. Per step and rank the
 * all-gathers hand in (src/comm/comm.c counts the send buffer), with es the
 * bytes of param_dtype and shard_u a unit's padded shard:
 *     forward    sum over every unit of shard_u x es          (shard group of S)
 *     backward   sum over the blocks of shard_u x S / N x es  (group of N; true: shard_u x es)
 * per micro-batch; with parameters in a shared window nothing is gathered and
 * N changes nothing. The post-forward slices are allocated at init, exactly
 * padded / N x es per block on top of true's plan. */
static void test_reshard(int argc, char **argv) {
    ASSERT_TRUE(argc >= 2);
    const int N = atoi(argv[1]), R = sharc_comm_size(world);
    sharc_config ct, cn;
    base_config(&ct, argv[0]);
    ct.train.max_steps = 4;
    apply_args(&ct, argc - 2, argv + 2);
    ct.fsdp.engine.reshard_after_forward = 1;
    cn = ct;
    ASSERT_OK(sharc_config_set(&cn, "fsdp.reshard_after_forward", argv[1], "test"));
    ASSERT_EQ(cn.fsdp.engine.reshard_after_forward, N);
    sharc_trainer *a, *b;
    ASSERT_OK(sharc_trainer_init(&a, &ct, world));
    sharc_mem_stats m0, m1;
    sharc_mem_get(&m0);
    ASSERT_OK(sharc_trainer_init(&b, &cn, world));
    sharc_mem_get(&m1);
    sharc_fsdp *ea = sharc_trainer_engine(a), *eb = sharc_trainer_engine(b);
    const int S = sharc_trainer_mesh(b)->dp_shard, units = sharc_fsdp_num_units(eb);
    const bool shared = sharc_fsdp_params_shared(eb);
    const int64_t es = (int64_t)sharc_dtype_size(cn.fsdp.engine.param_dtype);
    /* the formula */
    int64_t fwd = 0, bwd_true = 0, bwd_n = 0, post = 0;
    for (int u = 0; u < units; u++) {
        int64_t shard = sharc_fsdp_shard_numel(eb, u);
        fwd += shard * es;
        if (u == 0 || u == units - 1) continue; /* the embedding (root or no backward gather) and the head */
        bwd_true += shard * es;
        bwd_n += shard * S / N * es;
        post += shard * S / N * es;
    }
    const int64_t micro = cn.train.grad_accum;
    int64_t want_true = shared ? 0 : micro * (fwd + bwd_true), want_n = shared ? 0 : micro * (fwd + bwd_n);
    if (shared || N == S) post = 0; /* N = S is true */
    int64_t extra = sharc_fsdp_planned_bytes(eb, SHARC_MEM_GATHERED) - sharc_fsdp_planned_bytes(ea, SHARC_MEM_GATHERED);
    if (extra != post || m1.current[SHARC_MEM_GATHERED] - m0.current[SHARC_MEM_GATHERED] !=
                             sharc_fsdp_planned_bytes(eb, SHARC_MEM_GATHERED))
        TEST_FAIL_AT("post-forward slices: plan adds %lld bytes, formula %lld; allocated %lld, planned %lld",
                     (long long)extra, (long long)post,
                     (long long)(m1.current[SHARC_MEM_GATHERED] - m0.current[SHARC_MEM_GATHERED]),
                     (long long)sharc_fsdp_planned_bytes(eb, SHARC_MEM_GATHERED));
    sharc_comm *pc = sharc_fsdp_post_forward_comm(eb);
    ASSERT_TRUE(shared || N == S ? pc == NULL : pc != NULL && sharc_comm_size(pc) == N);
    for (int s = 0; s < 4; s++) {
        sharc_step_stats x, y;
        ASSERT_OK(sharc_trainer_step(a, &x));
        ASSERT_OK(sharc_trainer_step(b, &y));
        if (memcmp(&x.loss, &y.loss, sizeof x.loss) != 0 || memcmp(&x.grad_norm, &y.grad_norm, sizeof x.grad_norm))
            TEST_FAIL_AT("step %d: loss %.17g / norm %.17g with reshard_after_forward %d, %.17g / %.17g with true",
                         s + 1, y.loss, y.grad_norm, N, x.loss, x.grad_norm);
        int64_t got_t = x.comm.bytes[SHARC_COLL_ALL_GATHER], got_n = y.comm.bytes[SHARC_COLL_ALL_GATHER];
        if (got_t != want_true || got_n != want_n)
            TEST_FAIL_AT("step %d: all-gather bytes %lld (true) and %lld (N = %d), formula %lld and %lld", s + 1,
                         (long long)got_t, (long long)got_n, N, (long long)want_true, (long long)want_n);
        ASSERT_EQ(x.comm.bytes[SHARC_COLL_REDUCE_SCATTER], y.comm.bytes[SHARC_COLL_REDUCE_SCATTER]);
    }
    for (int u = 0; u < units; u++)
        if (memcmp(sharc_fsdp_shard_params(ea, u), sharc_fsdp_shard_params(eb, u),
                   sizeof(float) * (size_t)sharc_fsdp_shard_numel(ea, u)) != 0)
            TEST_FAIL_AT("unit %d's parameters differ after 4 steps with reshard_after_forward %d", u, N);
    if (sharc_comm_rank(world) == 0)
        printf("reshard_after_forward %d at %d ranks (%s): losses and parameters bit-identical to true; all-gather "
               "%lld bytes per step and rank (true: %lld), backward's inside groups of %d; +%lld bytes of post-forward "
               "slices\n",
               N, R, sharc_fsdp_strategy_names(eb, NULL), (long long)want_n, (long long)want_true, N, (long long)post);
    sharc_trainer_free(a);
    sharc_trainer_free(b);
}

/* ---------------------------------------------------------------- gather */

/* Every unit's gathered parameters equal the fp32 master values rounded to
 * param_dtype, whatever the number of ranks; for each configuration of
 * `KEY=VALUE ... [-- KEY=VALUE ...]...` in turn (one MPI job for many). */
static void gather_one(const char *data, int argc, char **argv) {
    sharc_config c;
    base_config(&c, data);
    apply_args(&c, argc, argv);
    if (sharc_comm_rank(world) == 0) { /* names the configuration a failure below belongs to */
        printf("gather:");
        for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
        printf("\n");
        fflush(stdout);
    }
    sharc_trainer *t;
    ASSERT_OK(sharc_trainer_init(&t, &c, world));
    sharc_fsdp *e = sharc_trainer_engine(t);
    /* the strategies collectives.c chooses (note [shared-params] for the shared window) */
    int S = sharc_trainer_mesh(t)->dp_shard;
    bool f32 = c.fsdp.engine.param_dtype == SHARC_DT_F32,
         shm = !(getenv("SHARC_COMM_SHM") && !strcmp(getenv("SHARC_COMM_SHM"), "0"));
    const char *reduce, *gather = sharc_fsdp_strategy_names(e, &reduce);
    const char *want_gather = S == 1 && f32         ? "direct"
                              : S > 1 && f32 && shm ? "shared window"
                              : f32                 ? "fp32 all-gather"
                                                    : "16-bit all-gather";
    const char *want_reduce = S == 1 ? "direct" : S > 1 && f32 && shm ? "shared window" : "fp32 reduce-scatter";
    if (strcmp(gather, want_gather) || strcmp(reduce, want_reduce))
        TEST_FAIL_AT("strategies %s / %s, expected %s / %s at %d ranks per shard group", gather, reduce, want_gather,
                     want_reduce, S);
    ASSERT_EQ(sharc_fsdp_params_shared(e), !strcmp(want_gather, "shared window"));
    float *master = malloc((size_t)sharc_fsdp_gathered_unit_bytes(e)),
          *want = malloc((size_t)sharc_fsdp_gathered_unit_bytes(e));
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        ASSERT_OK(sharc_fsdp_gather_master(e, u, master));
        sharc_round_f32(want, master, c.fsdp.engine.param_dtype, s->numel);
        const float *got = sharc_fsdp_gather(e, u);
        for (int64_t i = 0; i < s->numel; i++)
            if (memcmp(&got[i], &want[i], 4) != 0)
                TEST_FAIL_AT("unit %d element %lld: gathered %.9g, master %.9g rounds to %.9g", u, (long long)i, got[i],
                             master[i], want[i]);
        sharc_fsdp_release(e, u);
    }
    free(master);
    free(want);
    sharc_trainer_free(t);
}

static void test_gather(int argc, char **argv) {
    ASSERT_TRUE(argc >= 1);
    for (int i = 1, start = 1; i <= argc; i++)
        if (i == argc || !strcmp(argv[i], "--")) {
            gather_one(argv[0], i - start, argv + start);
            start = i + 1;
        }
}

/* ------------------------------------------------------------ mismatch */

static void test_mismatch(int argc, char **argv) {
    ASSERT_TRUE(argc >= 1);
    sharc_config c;
    base_config(&c, argv[0]);
    if (sharc_comm_rank(world) == 1) c.model.num_layers = 3;
    sharc_trainer *t = NULL;
    sharc_status st = sharc_trainer_init(&t, &c, world);
    if (st == SHARC_OK) TEST_FAIL_AT("ranks with different models started");
    sharc_log(SHARC_LOG_ERROR, "%s", sharc_last_error());
    if (!strstr(sharc_last_error(), "model.num_layers")) TEST_FAIL_AT("message does not name the key");
    ASSERT_TRUE(t == NULL);
}

/* ---------------------------------------------------------- checkpoints */

static void test_ckpt_save(int argc, char **argv) {
    ASSERT_TRUE(argc >= 3);
    sharc_config c;
    base_config(&c, argv[2]);
    apply_args(&c, argc - 3, argv + 3);
    snprintf(c.ckpt.dir, sizeof c.ckpt.dir, "%s", argv[0]);
    sharc_trainer *t;
    sharc_ckpt *ck;
    ASSERT_OK(sharc_trainer_init(&t, &c, world));
    const sharc_ckpt_state cs = sharc_trainer_ckpt_state(t);
    ASSERT_OK(sharc_ckpt_init(&ck, &cs));
    for (int s = 0; s < 3; s++) {
        sharc_step_stats st;
        ASSERT_OK(sharc_trainer_step(t, &st));
    }
    ASSERT_OK(sharc_ckpt_save(ck, sharc_trainer_steps_done(t)));
    ASSERT_OK(sharc_ckpt_wait(ck));
    /* the reference: full tensors gathered through the engine and the shard group */
    sharc_fsdp *e = sharc_trainer_engine(t);
    const sharc_mesh *mesh = sharc_trainer_mesh(t);
    int nu = sharc_fsdp_num_units(e), n = 0;
    for (int u = 0; u < nu; u++) n += 3 * sharc_fsdp_unit_spec(e, u)->nparams;
    sharc_st_entry *ent = calloc((size_t)n, sizeof *ent);
    char(*names)[SHARC_NAME_MAX + 4] = calloc((size_t)n, sizeof *names);
    float **bufs = calloc((size_t)nu * 3, sizeof *bufs);
    n = 0;
    for (int u = 0; u < nu; u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        int64_t ns = sharc_fsdp_shard_numel(e, u);
        for (int k = 0; k < 3; k++) bufs[3 * u + k] = calloc((size_t)(ns * mesh->dp_shard), sizeof(float));
        ASSERT_OK(sharc_fsdp_gather_master(e, u, bufs[3 * u]));
        /* a frozen unit has no moments (note [frozen-params]): the checkpoint holds zeros */
        if (sharc_adamw_m(sharc_trainer_optimizer(t), u)) {
            ASSERT_OK(sharc_comm_all_gather(mesh->shard, sharc_adamw_m(sharc_trainer_optimizer(t), u), bufs[3 * u + 1],
                                            (size_t)ns, SHARC_DT_F32));
            ASSERT_OK(sharc_comm_all_gather(mesh->shard, sharc_adamw_v(sharc_trainer_optimizer(t), u), bufs[3 * u + 2],
                                            (size_t)ns, SHARC_DT_F32));
        }
        for (int p = 0; p < s->nparams; p++)
            for (int k = 0; k < 3; k++) {
                snprintf(names[n], sizeof names[n], "%c.%s", "pmv"[k], s -> params[p].name);
                ent[n] = (sharc_st_entry){names[n], SHARC_DT_F32, s->params[p].ndim, s->params[p].shape,
                                          bufs[3 * u + k] + s->params[p].offset};
                n++;
            }
    }
    if (sharc_comm_rank(world) == 0) ASSERT_OK(sharc_st_write(argv[1], ent, n, NULL, NULL, 0));
    ASSERT_OK(sharc_comm_barrier(world));
    for (int i = 0; i < nu * 3; i++) free(bufs[i]);
    free(bufs);
    free(names);
    free(ent);
    sharc_ckpt_free(ck);
    sharc_trainer_free(t);
}

static void test_ckpt_load(int argc, char **argv) {
    ASSERT_TRUE(argc >= 3);
    int R = sharc_comm_size(world);
    sharc_config c;
    base_config(&c, argv[2]);
    apply_args(&c, argc - 3, argv + 3);
    sharc_trainer *t;
    sharc_ckpt *ck;
    ASSERT_OK(sharc_trainer_init(&t, &c, world));
    const sharc_ckpt_state cs = sharc_trainer_ckpt_state(t);
    ASSERT_OK(sharc_ckpt_init(&ck, &cs));
    int64_t from = -1;
    ASSERT_OK(sharc_trainer_resume(t, ck, argv[0], &from));
    ASSERT_EQ(from, 3);
    ASSERT_EQ(sharc_trainer_steps_done(t), 3);
    ASSERT_EQ(sharc_adamw_steps(sharc_trainer_optimizer(t)), 3);
    /* loading moves values without arithmetic: exactly the saved ones */
    sharc_st_file *ref;
    ASSERT_OK(sharc_st_open(&ref, argv[1]));
    sharc_fsdp *e = sharc_trainer_engine(t);
    int64_t checked = 0;
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(e, u);
        const sharc_segment *segs;
        int ns = sharc_fsdp_shard_segments(e, u, &segs);
        const float *have[3] = {sharc_fsdp_shard_params(e, u), sharc_adamw_m(sharc_trainer_optimizer(t), u),
                                sharc_adamw_v(sharc_trainer_optimizer(t), u)};
        for (int k = 0; k < ns; k++)
            for (int kind = 0; kind < 3; kind++) {
                char name[SHARC_NAME_MAX + 4];
                snprintf(name, sizeof name, "%c.%s", "pmv"[kind], s -> params[segs[k].param].name);
                const sharc_st_tensor *rt = sharc_st_find(ref, name);
                ASSERT_TRUE(rt != NULL);
                float *want = malloc(sizeof(float) * (size_t)segs[k].len);
                ASSERT_OK(sharc_st_read_f32(ref, rt, segs[k].param_off, segs[k].len, want));
                if (!have[kind]) { /* a frozen unit's moments: not loaded, saved as zeros */
                    for (int64_t i = 0; i < segs[k].len; i++)
                        if (want[i] != 0.0f) TEST_FAIL_AT("%s: a frozen unit's saved moment is %g", name, want[i]);
                    free(want);
                    continue;
                }
                if (memcmp(want, have[kind] + segs[k].shard_off, sizeof(float) * (size_t)segs[k].len) != 0)
                    TEST_FAIL_AT("%s [%lld, %lld) differs from the saved values", name, (long long)segs[k].param_off,
                                 (long long)(segs[k].param_off + segs[k].len));
                checked += segs[k].len;
                free(want);
            }
    }
    sharc_st_close(ref);
    /* 3 more steps against one process that ran all 6 on the same global batch */
    sharc_config cref = c;
    cref.train.grad_accum = c.train.grad_accum * R / (c.mesh.sp * c.mesh.tp); /* data streams */
    cref.mesh.sp = cref.mesh.tp = 1;
    cref.ckpt.resume[0] = 0;
    ASSERT_EQ(cref.train.max_steps, 6);
    parity_ref one; /* note [parity-ref] */
    parity_ref_get(&cref, &one);
    double lr_sum = 0.0, worst_loss = 0.0;
    for (int s = 0; s < 6; s++) {
        sharc_step_stats a;
        parity_ref_step b = one.steps[s];
        lr_sum += b.lr;
        if (s < 3) continue;
        ASSERT_OK(sharc_trainer_step(t, &a));
        double rel = fabs(a.loss - b.loss) / fabs(b.loss);
        worst_loss = rel > worst_loss ? rel : worst_loss;
        if (rel > tol_loss)
            TEST_FAIL_AT("step %d: loss %.9f resumed at %d ranks vs %.9f straight (rel %.2e)", s + 1, a.loss, R, b.loss,
                         rel);
    }
    double abs_worst, worst = compare_params(e, &one, lr_sum, c.model.embed_dim, &abs_worst);
    parity_ref_free(&one);
    if (worst > 1.0)
        TEST_FAIL_AT("resumed parameters differ by %.3g, %.2f x the bound of note [parity-tolerance]", abs_worst,
                     worst);
    double all[3] = {worst_loss, abs_worst, (double)checked};
    ASSERT_OK(sharc_comm_all_reduce(world, all, all, 3, SHARC_DT_F64, SHARC_REDUCE_OP_MAX));
    if (sharc_comm_rank(world) == 0)
        printf("resumed at %d ranks %s: saved values exact; then worst loss %.2e relative, worst parameter %.2e\n", R,
               sharc_sharding_name(c.fsdp.engine.strategy), all[0], all[1]);
    sharc_ckpt_free(ck);
    sharc_trainer_free(t);
}

/* ------------------------------------------------------------- badstep */

static void snapshot(sharc_fsdp *e, float **out) {
    for (int u = 0; u < sharc_fsdp_num_units(e); u++) {
        size_t n = (size_t)sharc_fsdp_shard_numel(e, u);
        out[u] = malloc(sizeof(float) * (n ? n : 1));
        memcpy(out[u], sharc_fsdp_shard_params(e, u), sizeof(float) * n);
    }
}

static bool same_as(sharc_fsdp *e, float **ref) {
    for (int u = 0; u < sharc_fsdp_num_units(e); u++)
        if (memcmp(ref[u], sharc_fsdp_shard_params(e, u), sizeof(float) * (size_t)sharc_fsdp_shard_numel(e, u)))
            return false;
    return true;
}

static void test_badstep(int argc, char **argv) {
    ASSERT_TRUE(argc >= 1);
    const int R = sharc_comm_size(world);
    char hook[32];
    snprintf(hook, sizeof hook, "%d:2", R - 1); /* the last rank's gradient, step 2 only */
    setenv("SHARC_TEST_NAN", hook, 1);
    sharc_config c;
    base_config(&c, argv[0]);
    sharc_trainer *t = NULL;
    ASSERT_OK(sharc_trainer_init(&t, &c, world));
    sharc_fsdp *e = sharc_trainer_engine(t);
    int nu = sharc_fsdp_num_units(e);
    float **before = calloc((size_t)nu, sizeof(float *));
    sharc_step_stats s;
    ASSERT_OK(sharc_trainer_step(t, &s));
    ASSERT_TRUE(!s.skipped && isfinite(s.grad_norm));
    ASSERT_EQ(sharc_adamw_steps(sharc_trainer_optimizer(t)), 1);
    snapshot(e, before);
    ASSERT_OK(sharc_trainer_step(t, &s)); /* poisoned on one rank: skipped on all */
    ASSERT_TRUE(s.skipped && !isfinite(s.grad_norm));
    ASSERT_EQ(s.step, 2);
    ASSERT_EQ(sharc_adamw_steps(sharc_trainer_optimizer(t)), 1);
    if (!same_as(e, before)) TEST_FAIL_AT("a skipped step changed this rank's parameters");
    ASSERT_OK(sharc_trainer_step(t, &s));
    ASSERT_TRUE(!s.skipped && isfinite(s.grad_norm));
    ASSERT_EQ(sharc_adamw_steps(sharc_trainer_optimizer(t)), 2);
    /* the shards that hold elements move again (a rank may hold only padding) */
    int64_t held = 0;
    for (int u = 0; u < nu; u++) held += sharc_fsdp_shard_numel(e, u);
    if (held > 0 && same_as(e, before)) TEST_FAIL_AT("the step after a skipped one changed nothing");
    for (int u = 0; u < nu; u++) free(before[u]);
    free(before);
    sharc_trainer_free(t);
    unsetenv("SHARC_TEST_NAN");
}

/* ------------------------------------------------------------------ hf */

/* Export the seeded model at N ranks (sharded files, a 20 kB limit), import
 * it into an engine initialised from another seed: every unit's gathered
 * master parameters are bit-identical. */
static void test_hf(int argc, char **argv) {
    ASSERT_TRUE(argc >= 2);
    sharc_config c;
    base_config(&c, argv[0]);
    apply_args(&c, argc - 2, argv + 2);
    sharc_trainer *a, *b;
    ASSERT_OK(sharc_trainer_init(&a, &c, world));
    c.train.seed += 1;
    ASSERT_OK(sharc_trainer_init(&b, &c, world));
    sharc_fsdp *ea = sharc_trainer_engine(a), *eb = sharc_trainer_engine(b);
    ASSERT_OK(sharc_hf_export(ea, world, &c.model, argv[1], SHARC_DT_F32, 20000));
    /* a second export into the now non-empty directory fails on every rank, no hang */
    if (sharc_hf_export(ea, world, &c.model, argv[1], SHARC_DT_F32, 0) == SHARC_OK)
        TEST_FAIL_AT("exported into a non-empty directory");
    if (!strstr(sharc_last_error(), sharc_comm_rank(world) == 0 ? "is not empty" : "failed on rank 0"))
        TEST_FAIL_AT("unexpected message: %s", sharc_last_error());
    sharc_status st = sharc_hf_load(eb, argv[1]);
    int32_t bad = st != SHARC_OK, any = 0;
    ASSERT_OK(sharc_comm_all_reduce(world, &bad, &any, 1, SHARC_DT_I32, SHARC_REDUCE_OP_MAX));
    if (any) TEST_FAIL_AT("hf load failed on a rank: %s", sharc_last_error());
    float *x = malloc((size_t)sharc_fsdp_gathered_unit_bytes(ea)),
          *y = malloc((size_t)sharc_fsdp_gathered_unit_bytes(ea));
    for (int u = 0; u < sharc_fsdp_num_units(ea); u++) {
        ASSERT_OK(sharc_fsdp_gather_master(ea, u, x));
        ASSERT_OK(sharc_fsdp_gather_master(eb, u, y));
        const sharc_unit_spec *s = sharc_fsdp_unit_spec(ea, u);
        if (memcmp(x, y, sizeof(float) * (size_t)s->numel) != 0)
            TEST_FAIL_AT("unit %d differs after export + import", u);
    }
    free(x);
    free(y);
    sharc_trainer_free(a);
    sharc_trainer_free(b);
}

/* ---------------------------------------------------------------- wide */

/* A shard group wider than 64 ranks (a 96- or 128-core node at one rank per
 * core) through the engine's shared gradient window: every rank adds a
 * known gradient to every unit; each rank's grad shard must hold the sum
 * over ranks of its slice, in rank order (note [rank-order]). The same at
 * any width; the old engine aborted above 64. */
static void test_wide(void) {
    int R = sharc_comm_size(world), r = sharc_comm_rank(world);
    sharc_model_config mc;
    sharc_model_config_default(&mc, SHARC_FAMILY_GPT2);
    mc.num_layers = 1;
    mc.embed_dim = 16;
    mc.num_heads = 2;
    mc.vocab_size = 29;
    mc.max_seq_len = 8;
    sharc_model *m;
    ASSERT_OK(sharc_model_init(&m, &mc, NULL));
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    sharc_mesh mesh;
    ASSERT_OK(sharc_mesh_init(&mesh, world, R));
    sharc_fsdp *e;
    ASSERT_OK(
        sharc_fsdp_init(&e, sharc_model_units(m), sharc_model_num_units(m), sharc_model_schedule(m), &fc, &mesh, NULL));
    const char *reduce;
    sharc_fsdp_strategy_names(e, &reduce);
    if (R > 1 && strcmp(reduce, "shared window"))
        TEST_FAIL_AT("reduce strategy %s, expected the shared window", reduce);
    sharc_fsdp_zero_grad(e);
    sharc_fsdp_begin_microbatch(e, true);
    int U = sharc_fsdp_num_units(e);
    for (int u = 0; u < U; u++) {
        sharc_fsdp_gather(e, u);
        sharc_fsdp_forward_done(e, u);
    }
    for (int u = U - 1; u >= 0; u--) {
        if (u > 0) sharc_fsdp_gather(e, u);
        float *g = sharc_fsdp_grad(e, u);
        int64_t n = sharc_fsdp_shard_numel(e, u) * R;
        for (int64_t i = 0; i < n; i++) g[i] += (float)(r + 1) * 0.5f + (float)(i % 7);
        sharc_fsdp_backward_done(e, u);
    }
    ASSERT_OK(sharc_fsdp_finish_grads(e));
    for (int u = 0; u < U; u++) {
        int64_t ns = sharc_fsdp_shard_numel(e, u);
        const float *g = sharc_fsdp_shard_grads(e, u);
        for (int64_t i = 0; i < ns; i++) {
            int64_t j = (int64_t)r * ns + i;
            float want = 0.5f + (float)(j % 7);
            for (int q = 1; q < R; q++) want += (float)(q + 1) * 0.5f + (float)(j % 7);
            if (g[i] != want) TEST_FAIL_AT("unit %d element %lld: %.9g, expected %.9g", u, (long long)j, g[i], want);
        }
    }
    sharc_fsdp_free(e);
    sharc_mesh_free(&mesh);
    sharc_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mpi_tests comm|parity|memory|mismatch ...\n");
        return 2;
    }
    ASSERT_OK(sharc_comm_world_init(&argc, &argv, &world));
    const char *what = argv[1];
    if (!strcmp(what, "comm")) {
        test_comm();
        test_comm_shm_vs_mpi();
    } else if (!strcmp(what, "parity")) test_parity(argc - 2, argv + 2);
    else if (!strcmp(what, "reshard")) test_reshard(argc - 2, argv + 2);
    else if (!strcmp(what, "memory")) test_memory(argc - 2, argv + 2);
    else if (!strcmp(what, "gather")) test_gather(argc - 2, argv + 2);
    else if (!strcmp(what, "mismatch")) test_mismatch(argc - 2, argv + 2);
    else if (!strcmp(what, "ckpt_save")) test_ckpt_save(argc - 2, argv + 2);
    else if (!strcmp(what, "ckpt_load")) test_ckpt_load(argc - 2, argv + 2);
    else if (!strcmp(what, "badstep")) test_badstep(argc - 2, argv + 2);
    else if (!strcmp(what, "hf")) test_hf(argc - 2, argv + 2);
    else if (!strcmp(what, "nodes")) test_nodes(argc - 2, argv + 2);
    else if (!strcmp(what, "wide")) test_wide();
    else if (!strcmp(what, "frozen")) test_frozen(argc - 2, argv + 2);
    else if (!strcmp(what, "memplan")) test_memplan(argc - 2, argv + 2);
    else if (!strcmp(what, "prefetch")) test_prefetch(argc - 2, argv + 2);
    else {
        fprintf(stderr, "unknown test %s\n", what);
        return 2;
    }
    printf("ok %s (rank %d of %d)\n", what, sharc_comm_rank(world), sharc_comm_size(world));
    sharc_comm_world_finalize(world);
    return 0;
}
