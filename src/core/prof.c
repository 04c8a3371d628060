/* prof.c: the region profiler of sharc/prof.h: per-region time (host clock
 * or device events), nesting (inclusive and exclusive time), work counts and
 * the report against the ceilings (note [prof] in docs/ARCHITECTURE.md), and
 * the timeline of a window of steps written as a Chrome trace (note [trace]). */
#include "sharc/prof.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sharc/device.h"
#include "sharc/fileio.h"
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

/* note [trace]: one timeline event; ev >= 0: a span on a device stream whose
 * times are events ev (begin) and ev + 1 (end) of the span pool, read when
 * the window closes */
typedef struct {
    char name[96];
    const char *cat;
    int tid, unit, ev;
    double ts, dur; /* seconds since the window's start */
} tev;
static tev *tevs;
static int ntevs, captevs;
static char *trace_path;
static int64_t trace_a = 2, trace_b = 3, cur_step;
static int trace_rank, trace_world = 1;
static bool tracing, trace_done;
static sharc_event *t_start; /* recorded on the model's stream when the window opens */
static double t_host0;       /* the host clock then */
static sharc_event **sevs;   /* the span pool: not reused inside the window */
static int nsevs, sevused;

static tev *trace_add(const char *name, const char *cat, int tid, double ts, double dur);
static void trace_close(void);

void sharc_prof_enable(bool on) { enabled = on; }
bool sharc_prof_enabled(void) { return enabled; }

void sharc_prof_set_device(sharc_device *d, sharc_stream *s) {
    if (tracing) trace_close();
    for (int i = 0; i < nsevs; i++) sharc_device_event_free(sevs[i]);
    free(sevs);
    sevs = NULL;
    nsevs = sevused = 0;
    if (t_start) sharc_device_event_free(t_start);
    t_start = NULL;
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

/* ev -2: the trace window's start event */
static void record(int ev) {
    sharc_event *e = ev == -2 ? t_start : ev >= 0 ? evs[ev] : NULL;
    if (e && sharc_device_event_record(e, dstream) != SHARC_OK && !dev_failed) {
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
        double now = sharc_clock_now();
        credit(r, now - r->t0);
        if (tracing) trace_add(names[r->id], "compute", SHARC_PROF_TRACK_COMPUTE, r->t0 - t_host0, now - r->t0);
        if (depth == 0) nrecs = 0; /* host times are credited at once */
    }
}

void sharc_prof_count(double f, double b) {
    if (depth == 0 || stack[depth - 1] < 0) return;
    int id = recs[stack[depth - 1]].id;
    flops[id] += f;
    bytes[id] += b;
}

/* note [trace]: both ends of a pair of events (b, the one after it in its
 * pool) against the window's start event: elapsed times are rounded (CUDA's
 * are float milliseconds), and rounding each stamp from one base keeps their
 * order, which a begin plus a separately rounded duration would not. */
static sharc_status trace_times(sharc_event *b, sharc_event *e, double *ts, double *dur) {
    double t0 = 0.0, t1 = 0.0;
    SHARC_TRY(sharc_device_event_elapsed(t_start, b, &t0));
    SHARC_TRY(sharc_device_event_elapsed(t_start, e, &t1));
    *ts = t0;
    *dur = t1 > t0 ? t1 - t0 : 0.0;
    return SHARC_OK;
}

static sharc_status trace_pair(const char *name, const char *cat, sharc_event *const *pair) {
    double ts = 0.0, dur = 0.0;
    if (!t_start) return SHARC_OK;
    SHARC_TRY(trace_times(pair[0], pair[1], &ts, &dur));
    trace_add(name, cat, SHARC_PROF_TRACK_COMPUTE, ts, dur);
    return SHARC_OK;
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
            if (st == SHARC_OK && tracing) st = trace_pair(names[recs[i].id], "compute", &evs[recs[i].ev]);
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

void sharc_prof_set_step(int64_t step) { cur_step = step; }

/* note [trace]: the window opens at a step's begin (after the previous
 * step's drain: the model's stream is idle, so its start event and the host
 * clock read together) and closes at the begin of the first step after it. */
static void trace_window(void) {
    if (!trace_path || trace_done) return;
    if (tracing && cur_step > trace_b) trace_close();
    if (tracing || trace_done || cur_step < trace_a || cur_step > trace_b) return;
    if (dev && !dev_failed) {
        if (!t_start && sharc_device_event_new_timed(dev, &t_start) != SHARC_OK) {
            sharc_warn("trace: no device events: %s", sharc_last_error());
            trace_done = true;
            return;
        }
        record(-2);
    }
    t_host0 = sharc_clock_now();
    ntevs = 0;
    tracing = true;
}

void sharc_prof_step_begin(void) {
    if (!enabled) return;
    if (dev) drain();
    trace_window();
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
    char label[48];
    snprintf(label, sizeof label, "step %lld", (long long)cur_step);
    if (!dev) {
        double now = sharc_clock_now();
        step_total += now - step_t0;
        if (tracing) trace_add(label, "step", SHARC_PROF_TRACK_COMPUTE, step_t0 - t_host0, now - step_t0);
        return SHARC_OK;
    }
    if (step_ev >= 0) record(step_ev + 1);
    sharc_status st = drain(); /* waits for the last event: the step's end */
    double dt = 0.0;
    if (st == SHARC_OK && step_ev >= 0 && !dev_failed)
        st = sharc_device_event_elapsed(evs[step_ev], evs[step_ev + 1], &dt);
    step_total += dt;
    if (st == SHARC_OK && tracing && step_ev >= 0 && !dev_failed) st = trace_pair(label, "step", &evs[step_ev]);
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

/* ---- note [trace]: the timeline of a window of steps ---- */

static tev *trace_add(const char *name, const char *cat, int tid, double ts, double dur) {
    if (ntevs == captevs) {
        int want = captevs ? 2 * captevs : 4096;
        tev *more = realloc(tevs, sizeof *tevs * (size_t)want);
        if (!more) return NULL;
        tevs = more;
        captevs = want;
    }
    tev *t = &tevs[ntevs++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->cat = cat;
    t->tid = tid;
    t->unit = -1;
    t->ev = -1;
    t->ts = ts;
    t->dur = dur;
    return t;
}

sharc_status sharc_prof_trace_config(const char *path, const char *steps, int rank, int world) {
    int64_t a = 2, b = 3;
    if (steps && *steps) {
        long long x, y;
        int used = 0;
        if (sscanf(steps, "%lld:%lld%n", &x, &y, &used) != 2 || steps[used] != '\0' || x < 1 || y < x)
            return sharc_error(
                SHARC_ERR_INVALID,
                "SHARC_PROFILE_TRACE_STEPS: '%s' is not a window of steps: expected a:b with 1 <= a <= b "
                "(e.g. 2:3)",
                steps);
        a = x;
        b = y;
    }
    if (!path || !*path) return sharc_error(SHARC_ERR_INVALID, "SHARC_PROFILE_TRACE: empty path");
    char *p = NULL;
    size_t n = strlen(path) + 32;
    if (!(p = malloc(n))) return sharc_error(SHARC_ERR_NOMEM, "trace: out of memory");
    if (world > 1) { /* rank r: PATH with .rank<r> before the extension */
        const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
        size_t stem = dot && (!slash || dot > slash + 1) ? (size_t)(dot - path) : strlen(path);
        snprintf(p, n, "%.*s.rank%d%s", (int)stem, path, rank, path + stem);
    } else {
        snprintf(p, n, "%s", path);
    }
    sharc_afile probe; /* an unwritable place is said now, not after the run */
    if (sharc_afile_open(&probe, p) != SHARC_OK) {
        char msg[4096];
        snprintf(msg, sizeof msg, "%s", sharc_last_error());
        free(p);
        return sharc_error(SHARC_ERR_INVALID, "SHARC_PROFILE_TRACE: cannot write the trace '%s': %s", path, msg);
    }
    sharc_afile_abort(&probe);
    free(trace_path);
    trace_path = p;
    trace_a = a;
    trace_b = b;
    trace_rank = rank;
    trace_world = world;
    trace_done = tracing = false;
    return SHARC_OK;
}

bool sharc_prof_tracing(void) { return tracing; }

int sharc_prof_span_begin(sharc_stream *s) {
    if (!tracing) return -1;
    tev *t = trace_add("", "comm", SHARC_PROF_TRACK_COMM, 0.0, 0.0);
    if (!t) return -1;
    if (dev && s && !dev_failed) {
        if (sevused + 2 > nsevs) {
            int want = nsevs ? 2 * nsevs : 256;
            sharc_event **more = realloc(sevs, sizeof *sevs * (size_t)want);
            if (!more) return -1;
            sevs = more;
            for (; nsevs < want; nsevs++)
                if (sharc_device_event_new_timed(dev, &sevs[nsevs]) != SHARC_OK) {
                    sharc_warn("trace: no device events: %s", sharc_last_error());
                    dev_failed = true;
                    ntevs--;
                    return -1;
                }
        }
        t->ev = sevused;
        sevused += 2;
        if (sharc_device_event_record(sevs[t->ev], s) != SHARC_OK) t->ev = -1;
    }
    if (t->ev < 0) t->ts = sharc_clock_now() - t_host0;
    return ntevs - 1;
}

void sharc_prof_span_end(int h, sharc_stream *s, int tid, int unit, const char *fmt, ...) {
    if (h < 0 || h >= ntevs || !tracing) return;
    tev *t = &tevs[h];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->tid = tid;
    t->unit = unit;
    t->cat = tid == SHARC_PROF_TRACK_COMM ? "comm" : tid == SHARC_PROF_TRACK_HOST ? "host" : "unit";
    if (t->ev >= 0) {
        if (sharc_device_event_record(sevs[t->ev + 1], s) != SHARC_OK) t->ev = -1, t->dur = 0.0;
    } else {
        t->dur = sharc_clock_now() - t_host0 - t->ts;
    }
}

void sharc_prof_host_span(const char *name, double t0) {
    if (tracing) trace_add(name, "host", SHARC_PROF_TRACK_HOST, t0 - t_host0, sharc_clock_now() - t0);
}

typedef struct {
    char *p;
    size_t n, cap;
    bool bad;
} jbuf;

static void jput(jbuf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        int k = b->bad ? 0 : vsnprintf(b->p ? b->p + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (b->bad || k < 0) {
            b->bad = true;
            return;
        }
        if ((size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t want = b->cap ? 2 * b->cap : 1 << 16;
        while (want <= b->n + (size_t)k) want *= 2;
        char *more = realloc(b->p, want);
        if (!more) {
            b->bad = true;
            return;
        }
        b->p = more;
        b->cap = want;
    }
}

/* a JSON string's body: our names, escaped anyway */
static void jstr(jbuf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') jput(b, "\\%c", c);
        else if (c < 0x20) jput(b, "\\u%04x", c);
        else jput(b, "%c", c);
    }
}

static const char *const track_names[] = {"compute stream", "comm stream (collectives)", "host"};

/* Read the spans' device times (each end event waited for: the window is
 * over, so this waits for nothing the step needs) and write the file. */
static void trace_close(void) {
    tracing = false;
    trace_done = true;
    for (int i = 0; i < ntevs; i++) {
        tev *t = &tevs[i];
        if (t->ev < 0) continue;
        double at = 0.0, dt = 0.0;
        if (sharc_device_event_synchronize(sevs[t->ev + 1]) != SHARC_OK ||
            trace_times(sevs[t->ev], sevs[t->ev + 1], &at, &dt) != SHARC_OK) {
            sharc_warn("trace: device times lost: %s", sharc_last_error());
            ntevs = 0;
            break;
        }
        t->ts = at;
        t->dur = dt;
    }
    sevused = 0;
    jbuf b = {0};
    jput(&b, "{\"traceEvents\":[\n");
    jput(&b, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}",
         trace_rank, trace_rank);
    for (int k = 0; k < 3; k++)
        jput(&b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
             trace_rank, k, track_names[k]);
    for (int i = 0; i < ntevs; i++) {
        const tev *t = &tevs[i];
        jput(&b, ",\n{\"name\":\"");
        jstr(&b, t->name);
        jput(&b, "\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{", t->cat,
             t->ts * 1e6, t->dur * 1e6, trace_rank, t->tid);
        if (t->unit >= 0) jput(&b, "\"unit\":%d", t->unit);
        jput(&b, "}}");
    }
    jput(&b, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"steps\":\"%lld:%lld\",\"times\":\"%s\"}}\n",
         (long long)trace_a, (long long)trace_b, dev ? "device events against one start event" : "the host clock");
    ntevs = 0;
    sharc_afile f;
    sharc_status st = b.bad ? sharc_error(SHARC_ERR_NOMEM, "out of memory") : sharc_afile_open(&f, trace_path);
    if (st == SHARC_OK) {
        st = sharc_afile_write(&f, b.p, b.n);
        if (st == SHARC_OK) st = sharc_afile_commit(&f);
        else sharc_afile_abort(&f);
    }
    if (st != SHARC_OK) sharc_warn("trace: '%s' not written: %s", trace_path, sharc_last_error());
    else if (trace_rank == 0)
        sharc_info("sharc: trace of steps %lld-%lld written to %s", (long long)trace_a, (long long)trace_b, trace_path);
    free(b.p);
}

void sharc_prof_trace_finish(void) {
    if (tracing) {
        if (dev) drain();
        trace_close();
    } else if (trace_path && !trace_done) {
        sharc_warn("trace: the run ended before step %lld; no trace written to %s", (long long)trace_a, trace_path);
        trace_done = true;
    }
}
