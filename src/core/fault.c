/* fault.c: sharc_fault_at, the fault-injection point of sharc/fault.h.
 * Every test hook of the library and the command is read here, from the
 * environment, at the call (tests set and unset them between runs in one
 * process); a run that sets none pays one getenv per hook and call. */
#include "sharc/fault.h"
#include "sharc/activity.h"
#include "sharc/log.h"
#include "sharc/status.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

/* "RANK:REST" for this rank: REST, else NULL. */
static const char *for_this_rank(const char *env) {
    const char *v = getenv(env);
    if (!v || !*v) return NULL;
    char *end;
    long rank = strtol(v, &end, 10);
    return end != v && *end == ':' && rank == sharc_log_rank() ? end + 1 : NULL;
}

/* REST is a step list "S[,S...]" that holds `step`. */
static bool lists_step(const char *rest, int64_t step) {
    for (const char *p = rest; p && *p;) {
        char *end;
        long long s = strtoll(p, &end, 10);
        if (end == p) return false;
        if (s == step) return true;
        p = *end == ',' ? end + 1 : NULL;
    }
    return false;
}

static void hang(void) {
    sharc_activity_phase("stopped by the test hook SHARC_TEST_HANG", -1, NULL);
    for (;;) pause();
}

sharc_fault sharc_fault_at(const char *site, int64_t step) {
    const char *rest;
    if (!strncmp(site, "ckpt:", 5)) {
        const char *at = getenv("SHARC_CKPT_KILL_AT"), *ks = getenv("SHARC_CKPT_KILL_STEP");
        if (!at || strcmp(at, site + 5) != 0 || (ks && strtoll(ks, NULL, 10) != step)) return SHARC_FAULT_NONE;
        fprintf(stderr, "[rank %d] ckpt: killed at '%s' of step %lld (SHARC_CKPT_KILL_AT)\n", sharc_log_rank(),
                site + 5, (long long)step);
        _exit(86);
    }
    if (!strcmp(site, "step")) {
        if ((rest = for_this_rank("SHARC_TEST_HANG")) && lists_step(rest, step)) hang();
        if ((rest = for_this_rank("SHARC_TEST_FATAL")) && lists_step(rest, step))
            sharc_fatal(__FILE__, __LINE__, "step %lld: a broken invariant (the test hook SHARC_TEST_FATAL)",
                        (long long)step);
        if ((rest = for_this_rank("SHARC_TEST_KILL")) && lists_step(rest, step)) { /* note [rank-death] */
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now); /* the wall clock: the test measures the time to the job's end */
            fprintf(stderr, "[rank %d] SHARC_TEST_KILL: SIGKILL to itself (pid %d) at %lld.%09ld\n", sharc_log_rank(),
                    (int)getpid(), (long long)now.tv_sec, now.tv_nsec);
            fflush(stderr);
            raise(SIGKILL);
        }
        if ((rest = for_this_rank("SHARC_TEST_FAIL")) && lists_step(rest, step)) return SHARC_FAULT_FAIL;
        return SHARC_FAULT_NONE;
    }
    if (!strcmp(site, "offload:written")) /* note [optim-offload]: a byte of the chunk just written flipped */
        return (rest = for_this_rank("SHARC_TEST_OFFLOAD_CORRUPT")) && lists_step(rest, step) ? SHARC_FAULT_FAIL
                                                                                              : SHARC_FAULT_NONE;
    if (!strcmp(site, "offload:truncate")) /* the offload file cut to half its size after the step's writes */
        return (rest = for_this_rank("SHARC_TEST_OFFLOAD_TRUNCATE")) && lists_step(rest, step) ? SHARC_FAULT_FAIL
                                                                                               : SHARC_FAULT_NONE;
    if (!strcmp(site, "offload:write") && (rest = for_this_rank("SHARC_TEST_OFFLOAD_KILL")) && lists_step(rest, step)) {
        fprintf(stderr, "[rank %d] SHARC_TEST_OFFLOAD_KILL: SIGKILL to itself amid the moments' writes of step %lld\n",
                sharc_log_rank(), (long long)step);
        fflush(stderr);
        raise(SIGKILL);
    }
    if (!strcmp(site, "offload:update")) /* note [offload-overlap]: the update of a unit's offloaded shard fails */
        return (rest = for_this_rank("SHARC_TEST_OFFLOAD_UPDATE_FAIL")) && lists_step(rest, step) ? SHARC_FAULT_FAIL
                                                                                                  : SHARC_FAULT_NONE;
    if (!strcmp(site, "grads"))
        return (rest = for_this_rank("SHARC_TEST_NAN")) && lists_step(rest, step) ? SHARC_FAULT_NAN : SHARC_FAULT_NONE;
    /* a named place outside the steps: init, finalize, eval, generate, export */
    if ((rest = for_this_rank("SHARC_TEST_HANG")) && !strcmp(rest, site)) hang();
    return SHARC_FAULT_NONE;
}

int sharc_fault_offload_delay_ms(void) {
    const char *v = getenv("SHARC_TEST_OFFLOAD_SLOW");
    return v && *v ? atoi(v) : 0;
}

long long sharc_fault_ckpt_pin_window(void) {
    const char *v = getenv("SHARC_TEST_CKPT_PIN_WINDOW");
    long long b = v && *v ? atoll(v) : 0;
    return b > 0 ? b : 0;
}

int sharc_fault_route_groups(void) {
    const char *v = getenv("SHARC_TEST_MOE_RIG");
    return v && *v ? atoi(v) : 0;
}
