/* prof.c: the region profiler of sharc/prof.h: per-region time (host clock
 * or device events), nesting (inclusive and exclusive time), work counts and
 * the report against the ceilings (note [prof] in docs/ARCHITECTURE.md). */
#include "sharc/prof.h"

#include <stdlib.h>
#include <string.h>

#include "sharc/device.h"
#include "sharc/log.h"

#define MAX_REGIONS 128
#define MAX_DEPTH   64

static bool enabled;
static int nregions;
static const char *names[MAX_REGIONS];
static double incl[MAX_REGIONS], self[MAX_REGIONS], flops[MAX_REGIONS], bytes[MAX_REGIONS];
static long counts[MAX_REGIONS];

/* one opened region of the current step */
typedef struct {
    int id, parent; /* parent: the record it was opened inside, -1 none */
    int ev;         /* device: events ev (begin) and ev + 1 (end) of the pool */
    double t0;      /* host: the clock at begin */
} rec;
static rec *recs;
static int nrecs, caprecs;
static int stack[MAX_DEPTH]; /* open records; -1: a region not counted (outside a step) */
static int depth;

static sharc_device *dev;
static sharc_stream *dstream;
static sharc_event **evs; /* the pool, reused every step */
static int nevs, evused;
static bool dev_failed;

static bool in_step, stepped;
static int step_ev;
static double step_t0, step_total;
static int nsteps;

static double ceil_flops, ceil_bytes;
static char ceil_flops_how[160], ceil_bytes_how[160];

void sharc_prof_enable(bool on) { enabled = on; }
bool sharc_prof_enabled(void) { return enabled; }

void sharc_prof_set_device(sharc_device *d, sharc_stream *s) {
    for (int i = 0; i < nevs; i++) sharc_device_event_free(evs[i]);
    free(evs);
    evs = NULL;
    nevs = evused = 0;
    nrecs = 0;
    dev = d;
    dstream = s;
    dev_failed = false;
}

void sharc_prof_set_ceilings(double flops_per_s, const char *flops_how, double bytes_per_s, const char *bytes_how) {
    ceil_flops = flops_per_s;
    ceil_bytes = bytes_per_s;
    snprintf(ceil_flops_how, sizeof ceil_flops_how, "%s", flops_how ? flops_how : "");
    snprintf(ceil_bytes_how, sizeof ceil_bytes_how, "%s", bytes_how ? bytes_how : "");
}

int sharc_prof_id(const char *name) {
    for (int i = 0; i < nregions; i++)
        if (strcmp(names[i], name) == 0) return i;
    if (nregions == MAX_REGIONS) return MAX_REGIONS - 1;
    names[nregions] = name;
    return nregions++;
}

/* Two events of the pool recorded in order: begin now, end later. -1 when
 * the device cannot give them (the profile then falls back to nothing for
 * that region, with one warning). */
static int event_pair(void) {
    if (evused + 2 > nevs) {
        int want = nevs ? 2 * nevs : 256;
        sharc_event **more = realloc(evs, sizeof *evs * (size_t)want);
        if (!more) return -1;
        evs = more;
        for (; nevs < want; nevs++)
            if (sharc_device_event_new_timed(dev, &evs[nevs]) != SHARC_OK) {
                if (!dev_failed) sharc_warn("profile: no device events: %s", sharc_last_error());
                dev_failed = true;
                return -1;
            }
    }
    evused += 2;
    return evused - 2;
}

static void record(int ev) {
    if (ev >= 0 && sharc_device_event_record(evs[ev], dstream) != SHARC_OK && !dev_failed) {
        sharc_warn("profile: %s", sharc_last_error());
        dev_failed = true;
    }
}

static void credit(const rec *r, double dt) {
    incl[r->id] += dt;
    self[r->id] += dt;
    if (r->parent >= 0) self[recs[r->parent].id] -= dt;
}

void sharc_prof_begin(int id) {
    if (depth == MAX_DEPTH) return;
    if ((stepped && !in_step) || (dev && dev_failed)) {
        stack[depth++] = -1;
        return;
    }
    if (nrecs == caprecs) {
        int want = caprecs ? 2 * caprecs : 1024;
        rec *more = realloc(recs, sizeof *recs * (size_t)want);
        if (!more) {
            stack[depth++] = -1;
            return;
        }
        recs = more;
        caprecs = want;
    }
    rec *r = &recs[nrecs];
    r->id = id;
    r->parent = -1;
    for (int k = depth - 1; k >= 0 && r->parent < 0; k--) r->parent = stack[k];
    r->ev = -1;
    if (dev) {
        r->ev = event_pair();
        record(r->ev);
    } else {
        r->t0 = sharc_clock_now();
    }
    stack[depth++] = nrecs++;
}

void sharc_prof_end(int id, double f, double b) {
    if (depth == 0) return;
    int at = stack[--depth];
    if (at < 0) return;
    rec *r = &recs[at];
    (void)id;
    flops[r->id] += f;
    bytes[r->id] += b;
    counts[r->id]++;
    if (dev) {
        if (r->ev >= 0) record(r->ev + 1);
    } else {
        credit(r, sharc_clock_now() - r->t0);
        if (depth == 0) nrecs = 0; /* host times are credited at once */
    }
}

void sharc_prof_count(double f, double b) {
    if (depth == 0 || stack[depth - 1] < 0) return;
    int id = recs[stack[depth - 1]].id;
    flops[id] += f;
    bytes[id] += b;
}

/* Device: wait for the stream, credit every closed record. */
static sharc_status drain(void) {
    sharc_status st = SHARC_OK;
    if (dev && evused > 0 && !dev_failed) {
        st = sharc_device_synchronize(dstream);
        for (int i = 0; i < nrecs && st == SHARC_OK; i++) {
            double dt = 0.0;
            if (recs[i].ev < 0) continue;
            st = sharc_device_event_elapsed(evs[recs[i].ev], evs[recs[i].ev + 1], &dt);
            if (st == SHARC_OK) credit(&recs[i], dt);
        }
    }
    nrecs = 0;
    evused = 0;
    return st;
}

static void reset(void) {
    for (int i = 0; i < nregions; i++) incl[i] = self[i] = flops[i] = bytes[i] = 0.0, counts[i] = 0;
    step_total = 0.0;
    nsteps = 0;
}

void sharc_prof_step_begin(void) {
    if (!enabled) return;
    if (dev) drain();
    if (!stepped) reset(); /* what ran before the first bracketed step is not a step's */
    stepped = in_step = true;
    if (dev) {
        step_ev = dev_failed ? -1 : event_pair();
        record(step_ev);
    }
    step_t0 = sharc_clock_now();
}

sharc_status sharc_prof_step_end(void) {
    if (!enabled || !in_step) return SHARC_OK;
    in_step = false;
    nsteps++;
    if (!dev) {
        step_total += sharc_clock_now() - step_t0;
        return SHARC_OK;
    }
    if (step_ev >= 0) record(step_ev + 1);
    sharc_status st = drain(); /* waits for the last event: the step's end */
    double dt = 0.0;
    if (st == SHARC_OK && step_ev >= 0 && !dev_failed)
        st = sharc_device_event_elapsed(evs[step_ev], evs[step_ev + 1], &dt);
    step_total += dt;
    step_ev = -1;
    if (st != SHARC_OK) {
        sharc_warn("profile: device times lost: %s", sharc_last_error());
        dev_failed = true;
    }
    return SHARC_OK; /* the profile never fails a step */
}

static void rate(FILE *f, double work, double secs, double ceiling, double unit) {
    if (work <= 0.0 || secs <= 0.0) {
        fprintf(f, " %10s %7s", "-", "-");
        return;
    }
    double r = work / secs;
    fprintf(f, " %10.4g", r / unit);
    if (ceiling > 0.0) fprintf(f, " %6.1f%%", 100.0 * r / ceiling);
    else fprintf(f, " %7s", "-");
}

void sharc_prof_report(FILE *f, int steps) {
    if (dev) drain();
    if (nsteps > 0) steps = nsteps;
    if (steps < 1) steps = 1;
    int order[MAX_REGIONS];
    double sum = 0.0;
    for (int i = 0; i < nregions; i++) {
        order[i] = i;
        sum += self[i];
    }
    for (int i = 0; i < nregions; i++)
        for (int j = i + 1; j < nregions; j++)
            if (self[order[j]] > self[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    const double step = nsteps > 0 ? step_total : sum; /* whole step when bracketed, else the regions' sum */
    fprintf(f,
            "# sharc profile: %d step(s), times from %s; self = exclusive (less nested regions), incl = "
            "inclusive; rates = the region's own work / its inclusive time\n",
            steps, dev ? "device events on the model's stream" : "the host clock");
    fprintf(f, "# ceilings: matmul %.4g TFLOP/s (%s); memory %.4g GB/s (%s)\n", ceil_flops * 1e-12,
            ceil_flops > 0 ? ceil_flops_how : "unknown", ceil_bytes * 1e-9,
            ceil_bytes > 0 ? ceil_bytes_how : "unknown");
    fprintf(f, "%-26s %10s %7s %10s %8s %12s %10s %7s %12s %10s %7s\n", "region", "self_ms", "step%", "incl_ms",
            "calls", "GFLOP", "TFLOP/s", "peak%", "GB", "GB/s", "bw%");
    for (int k = 0; k < nregions; k++) {
        int i = order[k];
        fprintf(f, "%-26s %10.3f %6.1f%% %10.3f %8.4g %12.6g", names[i], self[i] * 1e3 / steps,
                step > 0 ? 100.0 * self[i] / step : 0.0, incl[i] * 1e3 / steps, (double)counts[i] / steps,
                flops[i] * 1e-9 / steps);
        rate(f, flops[i], incl[i], ceil_flops, 1e12);
        fprintf(f, " %12.6g", bytes[i] * 1e-9 / steps);
        rate(f, bytes[i], incl[i], ceil_bytes, 1e9);
        fprintf(f, "\n");
    }
    if (nsteps > 0) {
        fprintf(f, "%-26s %10.3f %6.1f%%\n", "(outside regions)", (step - sum) * 1e3 / steps,
                step > 0 ? 100.0 * (step - sum) / step : 0.0);
        fprintf(f, "%-26s %10.3f %6.1f%%\n", "(step)", step * 1e3 / steps, 100.0);
    }
    reset();
    stepped = false;
}
