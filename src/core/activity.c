/* activity.c: sharc_activity_*, the current-activity record (sharc/activity.h).
 * Process-wide relaxed atomics: written by the training thread, read by the
 * watchdog thread; a torn read can only mix two consecutive descriptions. */
#include "sharc/activity.h"

#include <stdatomic.h>
#include <stdio.h>

static _Atomic uint64_t seq;
static _Atomic int64_t cur_step;
static _Atomic(const char *) cur_phase;
static _Atomic int cur_unit = -1;
static _Atomic(const char *) cur_unit_name;
static _Atomic(const char *) cur_coll;
static _Atomic int cur_coll_ranks;

#define STORE(v, x) atomic_store_explicit(&(v), (x), memory_order_relaxed)
#define LOAD(v)     atomic_load_explicit(&(v), memory_order_relaxed)

static void bump(void) { atomic_fetch_add_explicit(&seq, 1, memory_order_release); }

void sharc_activity_step(int64_t step) {
    STORE(cur_step, step);
    STORE(cur_phase, "step start");
    STORE(cur_unit, -1);
    bump();
}

void sharc_activity_phase(const char *phase, int unit, const char *unit_name) {
    STORE(cur_phase, phase);
    STORE(cur_unit, unit);
    STORE(cur_unit_name, unit_name);
    bump();
}

void sharc_activity_coll_begin(const char *name, int ranks) {
    STORE(cur_coll_ranks, ranks);
    STORE(cur_coll, name);
    bump();
}

void sharc_activity_coll_end(void) {
    STORE(cur_coll, (const char *)NULL);
    bump();
}

void sharc_activity_where(int64_t *step, int *unit) {
    *step = LOAD(cur_step);
    *unit = LOAD(cur_unit);
}

bool sharc_activity_in_collective(void) { return LOAD(cur_coll) != NULL; }

uint64_t sharc_activity_seq(void) { return atomic_load_explicit(&seq, memory_order_acquire); }

void sharc_activity_describe(char *out, size_t n) {
    const char *phase = LOAD(cur_phase), *coll = LOAD(cur_coll), *uname = LOAD(cur_unit_name);
    int unit = LOAD(cur_unit);
    char where[160];
    if (unit >= 0) snprintf(where, sizeof where, "%s, unit %d '%s'", phase ? phase : "?", unit, uname ? uname : "?");
    else snprintf(where, sizeof where, "%s", phase ? phase : "starting");
    if (coll)
        snprintf(out, n, "step %lld: waiting in %s over %d ranks (%s)", (long long)LOAD(cur_step), coll,
                 LOAD(cur_coll_ranks), where);
    else snprintf(out, n, "step %lld: computing (%s)", (long long)LOAD(cur_step), where);
}
