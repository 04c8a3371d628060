/* sharc/fault.h: the one place where the tests inject faults into a run
 * (src/core/fault.c). A fault is asked for through the environment, as a
 * site of the code, a rank and, for sites inside a step, the step; the code
 * names its sites with one call, sharc_fault_at, and in a run that asks for
 * nothing every call returns SHARC_FAULT_NONE. The variables, their sites
 * and what each does: docs/ARCHITECTURE.md, "Environment variables".
 *
 *   SHARC_TEST_HANG=RANK:WHERE         stop forever at site WHERE ("init", "finalize", "eval",
 *                                      "generate", "export"), or at the start of step WHERE (a number)
 *   SHARC_TEST_FAIL=RANK:STEP          the step fails on that rank alone (SHARC_FAULT_FAIL at "step")
 *   SHARC_TEST_FATAL=RANK:STEP         a broken invariant at the start of the step (sharc_fatal)
 *   SHARC_TEST_KILL=RANK:STEP          the rank SIGKILLs itself at the start of the step, as kill -9 would
 *   SHARC_TEST_NAN=RANK:STEP[,STEP..]  the rank's gradients are not finite (SHARC_FAULT_NAN at "grads")
 *   SHARC_TEST_OFFLOAD_CORRUPT=RANK:STEP  every chunk of AdamW moments the step writes to the offload file
 *                                      gets one byte flipped after the write (site "offload:written")
 *   SHARC_TEST_OFFLOAD_TRUNCATE=RANK:STEP  the offload file is cut to half its size after the step's writes
 *                                      (site "offload:truncate")
 *   SHARC_TEST_OFFLOAD_KILL=RANK:STEP  the rank SIGKILLs itself in the middle of the step's writes of the
 *                                      offloaded moments (site "offload:write")
 *   SHARC_TEST_OFFLOAD_UPDATE_FAIL=RANK:STEP  the AdamW update of an offloaded shard (fsdp.cpu_offload on a
 *                                      device) fails at that step (site "offload:update")
 *   SHARC_TEST_OFFLOAD_SLOW=MS         the offloaded optimizer's host thread sleeps MS ms before each unit's
 *                                      update (sharc_fault_offload_delay_ms; note [offload-overlap])
 *   SHARC_TEST_MOE_RIG=G               every rank r routes its tokens to the experts e with e % G == r % G
 *                                      alone (sharc_fault_route_groups; note [moe-rig] in src/model/moe.c)
 *   SHARC_TEST_CKPT_PIN_WINDOW=BYTES   a checkpoint load onto a device goes through pinned windows of BYTES
 *                                      instead of 4 MiB (sharc_fault_ckpt_pin_window; note [ckpt-pinned])
 *   SHARC_CKPT_KILL_AT=STAGE           the process ends (exit 86) at that stage of a checkpoint save,
 *   [SHARC_CKPT_KILL_STEP=STEP]        any rank that reaches it, as a crash would (sites "ckpt:STAGE")
 *
 * RANK is the world rank (sharc_log_rank); steps count from 1. */
#ifndef SHARC_FAULT_H
#define SHARC_FAULT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SHARC_FAULT_NONE = 0,
    SHARC_FAULT_FAIL, /* the caller fails here, on this rank alone, as a collective failing on one rank would */
    SHARC_FAULT_NAN,  /* the caller makes its gradients non-finite */
} sharc_fault;

/* The fault asked for at `site` of step `step` (0 outside the steps) on this
 * rank. A hang, a kill and a fatal error happen in here and do not return. */
sharc_fault sharc_fault_at(const char *site, int64_t step);
/* SHARC_TEST_OFFLOAD_SLOW's MS (0: off). */
int sharc_fault_offload_delay_ms(void);
/* SHARC_TEST_MOE_RIG's G, the groups the experts are split in (0: off). */
int sharc_fault_route_groups(void);
/* SHARC_TEST_CKPT_PIN_WINDOW's BYTES (0: off). */
long long sharc_fault_ckpt_pin_window(void);

#ifdef __cplusplus
}
#endif
#endif
