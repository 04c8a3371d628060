/* test_fsdp_states.c: the unit state machine (note [unit-states] in
 * src/fsdp/engine.h) and the shard write bracket: a model driving the
 * engine in a wrong order is stopped at the first wrong call with a message
 * naming the call, the unit, its state and the expected ones. Each misuse
 * runs in a child process (the engine aborts); the test reads its stderr. */
#include "sharc/fsdp.h"
#include "sharc/model.h"
#include "test.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static sharc_model *model;
static sharc_fsdp *engine;

/* An engine for a small GPT-2 (units: 0 embed, 1-2 blocks, 3 head), one process. */
static void setup(bool no_sync) {
    sharc_model_config mc;
    sharc_model_config_default(&mc, SHARC_FAMILY_GPT2);
    mc.num_layers = 2;
    mc.embed_dim = 32;
    mc.num_heads = 2;
    mc.vocab_size = 40;
    mc.max_seq_len = 8;
    ASSERT_OK(sharc_model_init(&model, &mc, NULL));
    sharc_fsdp_config fc;
    sharc_fsdp_config_default(&fc);
    fc.no_sync = no_sync;
    fc.param_dtype = SHARC_DT_BF16; /* gathers take slots at one process too */
    ASSERT_OK(sharc_fsdp_init(&engine, sharc_model_units(model), sharc_model_num_units(model),
                              sharc_model_schedule(model), &fc, NULL, NULL));
    sharc_fsdp_init_params(engine, 1);
}

/* Run fn in a child; it must abort, and its stderr must contain every string of `want`. */
static void expect_abort(void (*fn)(void), const char *const *want) {
    int fd[2];
    ASSERT_TRUE(pipe(fd) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        signal(SIGABRT, SIG_DFL);
        fn();
        _exit(0); /* reached only if nothing stopped it */
    }
    close(fd[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(fd[0]);
    int status;
    ASSERT_TRUE(waitpid(pid, &status, 0) == pid);
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)) TEST_FAIL_AT("no abort; stderr: %s", buf);
    for (int i = 0; want[i]; i++)
        if (!strstr(buf, want[i])) TEST_FAIL_AT("stderr lacks '%s': %s", want[i], buf);
}

static void forward_done_without_gather(void) { sharc_fsdp_forward_done(engine, 1); }
static void backward_done_without_grad(void) {
    sharc_fsdp_gather(engine, 2);
    sharc_fsdp_backward_done(engine, 2);
}
static void grad_without_gather(void) { sharc_fsdp_grad(engine, 1); }
static void release_with_open_gradient(void) {
    sharc_fsdp_gather(engine, 3);
    sharc_fsdp_grad(engine, 3);
    sharc_fsdp_release(engine, 3);
}
static void zero_grad_mid_backward(void) {
    sharc_fsdp_gather(engine, 3);
    sharc_fsdp_grad(engine, 3);
    sharc_fsdp_zero_grad(engine);
}
static void write_outside_bracket(void) { sharc_fsdp_shard_write(engine, 2)[0] = 1.0f; }
static void gather_inside_bracket(void) {
    sharc_fsdp_shard_write_begin(engine);
    sharc_fsdp_gather(engine, 1);
}
static void write_while_gathered(void) {
    sharc_fsdp_gather(engine, 1);
    sharc_fsdp_shard_write_begin(engine);
}
static void finish_with_gathered_unit(void) {
    sharc_fsdp_gather(engine, 2);
    sharc_fsdp_finish_grads(engine);
}
static void no_such_unit(void) { sharc_fsdp_gather(engine, 4); }

TEST(fsdp_states_stop_a_wrong_order) {
    setup(false);
    expect_abort(forward_done_without_gather, (const char *[]){"forward_done(unit 1 'block.0')",
                                                               "parameters are SHARDED", "expected GATHERED", NULL});
    expect_abort(backward_done_without_grad,
                 (const char *[]){"backward_done(unit 2 'block.1')", "gradient is NONE", "expected OPEN", NULL});
    expect_abort(grad_without_gather,
                 (const char *[]){"grad(unit 1 'block.0')", "parameters are SHARDED", "expected GATHERED", NULL});
    expect_abort(release_with_open_gradient,
                 (const char *[]){"release(unit 3 'head')", "gradient is OPEN", "expected NONE or HELD", NULL});
    expect_abort(zero_grad_mid_backward, (const char *[]){"zero_grad(unit 3 'head')", "gradient is OPEN", NULL});
    expect_abort(finish_with_gathered_unit,
                 (const char *[]){"finish_grads(unit 2 'block.1')", "parameters are GATHERED", NULL});
    expect_abort(no_such_unit, (const char *[]){"unit 4 does not exist (the model has 4 units)", NULL});
}

TEST(fsdp_shard_writes_need_the_bracket) {
    setup(false);
    expect_abort(write_outside_bracket,
                 (const char *[]){"shard of unit 2 'block.1' written outside sharc_fsdp_shard_write_begin", NULL});
    expect_abort(gather_inside_bracket,
                 (const char *[]){"gather(unit 1 'block.0') while shards are being written", NULL});
    expect_abort(write_while_gathered,
                 (const char *[]){"shard_write_begin(unit 1 'block.0')", "parameters are GATHERED", NULL});
    /* the right order: a write between begin and end is what the next gather returns (bf16-rounded) */
    sharc_fsdp_shard_write_begin(engine);
    sharc_fsdp_shard_write_begin(engine); /* brackets nest */
    sharc_fsdp_shard_write(engine, 2)[0] = 0.25f;
    sharc_fsdp_shard_write_end(engine);
    sharc_fsdp_shard_write_end(engine);
    ASSERT_TRUE(sharc_fsdp_gather(engine, 2)[0] == 0.25f);
    ASSERT_TRUE(sharc_fsdp_shard_params(engine, 2)[0] == 0.25f);
    sharc_fsdp_release(engine, 2);
}

/* A whole step of two micro-batches in the model's order passes every check
 * (at one process gradients accumulate in the shard; the HELD state of
 * fsdp.no_sync is exercised by the 3-rank run of tests/cli/mpi_parity.sh). */
TEST(fsdp_states_follow_a_step) {
    setup(true);
    ASSERT_OK(sharc_model_plan(model, 1, 8, false));
    int32_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tg[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    sharc_fsdp_zero_grad(engine);
    for (int mb = 0; mb < 2; mb++) {
        sharc_fsdp_begin_microbatch(engine, mb == 1);
        sharc_model_forward_backward(model, engine, in, tg, 1.0f / 16);
    }
    ASSERT_OK(sharc_fsdp_finish_grads(engine));
    sharc_fsdp_zero_grad(engine);
    sharc_fsdp_free(engine);
    sharc_model_free(model);
}
