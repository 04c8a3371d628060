/* doctor.c: `sharc doctor RUN_DIR`, reading a failed run's flight records
 * (note [flight] in src/core/flight.c): RUN_DIR/debug/flight-rank-R.json,
 * one per rank that could write it. It prints one line per rank (why it
 * ended, where it was), then names, per group of ranks, the first
 * collective on which the ranks disagree (kind or bytes differ at the same
 * sequence number) and the collective where some ranks wait that others
 * never reached, and last a verdict line. A rank of the world with no record
 * ended before the others could be told (kill -9, the OOM killer): it is
 * named first, with what the survivors' liveness probes said of it (its
 * host, pid, and whether its process was gone or its host unreachable).
 * Exit status 0 when it read the records, 2 for bad input. */
#include "doctor.h"
#include "sharc/status.h"

#include <dirent.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_RANKS 4096

typedef struct {
    int group, group_size, unit;
    long long seq, bytes, step;
    const char *kind;
    double start, end; /* end < 0: not completed */
} flight_entry;

typedef struct {
    json_object *doc;
    int rank, world;
    const char *host, *reason, *activity;
    double now;
    flight_entry *e;
    int n;
} flight_rank;

static int bad(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "doctor: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 2;
}

static json_object *field(json_object *o, const char *k) {
    json_object *v = NULL;
    return json_object_object_get_ex(o, k, &v) ? v : NULL;
}

/* One rank's record; 0 on success, else the message is printed. */
static int load(const char *path, flight_rank *r) {
    memset(r, 0, sizeof *r);
    r->doc = json_object_from_file(path);
    if (!r->doc || !json_object_is_type(r->doc, json_type_object))
        return bad("%s: not a flight record (expected the JSON object a rank writes)%s", path, "");
    json_object *rk = field(r->doc, "rank"), *ws = field(r->doc, "world_size"), *es = field(r->doc, "entries");
    if (!rk || !ws || !es || !json_object_is_type(es, json_type_array))
        return bad("%s: missing 'rank', 'world_size' or 'entries'%s", path, "");
    r->rank = json_object_get_int(rk);
    r->world = json_object_get_int(ws);
    if (r->rank < 0 || r->world < 1 || r->world > MAX_RANKS || r->rank >= r->world)
        return bad("%s: rank/world_size out of range%s", path, "");
    r->host = field(r->doc, "host") ? json_object_get_string(field(r->doc, "host")) : "?";
    r->reason = field(r->doc, "reason") ? json_object_get_string(field(r->doc, "reason")) : "?";
    r->activity = field(r->doc, "activity") ? json_object_get_string(field(r->doc, "activity")) : "?";
    r->now = field(r->doc, "now") ? json_object_get_double(field(r->doc, "now")) : 0;
    r->n = (int)json_object_array_length(es);
    r->e = calloc((size_t)r->n + 1, sizeof *r->e);
    if (!r->e) return bad("out of memory reading %s%s", path, "");
    for (int i = 0; i < r->n; i++) {
        json_object *o = json_object_array_get_idx(es, (size_t)i);
        json_object *g = field(o, "group"), *s = field(o, "seq"), *k = field(o, "kind"), *st = field(o, "start");
        if (!g || !s || !k || !st) return bad("%s: an entry lacks group, seq, kind or start%s", path, "");
        flight_entry *e = &r->e[i];
        e->group = json_object_get_int(g);
        e->seq = json_object_get_int64(s);
        e->kind = json_object_get_string(k);
        e->bytes = field(o, "bytes") ? json_object_get_int64(field(o, "bytes")) : 0;
        e->group_size = field(o, "group_size") ? json_object_get_int(field(o, "group_size")) : 0;
        e->step = field(o, "step") ? json_object_get_int64(field(o, "step")) : 0;
        e->unit = field(o, "unit") ? json_object_get_int(field(o, "unit")) : -1;
        e->start = json_object_get_double(st);
        json_object *en = field(o, "end");
        e->end = en && !json_object_is_type(en, json_type_null) ? json_object_get_double(en) : -1;
    }
    return 0;
}

/* The entry of rank r with the highest sequence number on group g, or NULL. */
static const flight_entry *last_on(const flight_rank *r, int g) {
    const flight_entry *best = NULL;
    for (int i = 0; i < r->n; i++)
        if (r->e[i].group == g && (!best || r->e[i].seq > best->seq)) best = &r->e[i];
    return best;
}

static const flight_entry *find(const flight_rank *r, int g, long long seq) {
    for (int i = 0; i < r->n; i++)
        if (r->e[i].group == g && r->e[i].seq == seq) return &r->e[i];
    return NULL;
}

static void describe(char *out, size_t n, const flight_entry *e) {
    char unit[32] = "";
    if (e->unit >= 0) snprintf(unit, sizeof unit, ", unit %d", e->unit);
    snprintf(out, n, "#%lld %s of %lld bytes (step %lld%s)%s", e->seq, e->kind, e->bytes, e->step, unit,
             e->end < 0 ? ", not completed" : "");
}

/* What the survivors' liveness probes (note [liveness] in
 * src/core/liveness.c) said of rank q: "rank P's probe: host H, pid N:
 * process gone", or "" when no record names it. */
static void probe_verdict(const flight_rank *ranks, int world, int q, char *out, size_t n) {
    out[0] = 0;
    for (int p = 0; p < world; p++) {
        json_object *live = ranks[p].doc ? field(ranks[p].doc, "liveness") : NULL;
        json_object *lost = live ? field(live, "lost") : NULL;
        if (!lost || !json_object_is_type(lost, json_type_array)) continue;
        for (size_t i = 0; i < json_object_array_length(lost); i++) {
            json_object *o = json_object_array_get_idx(lost, i), *rk = field(o, "rank");
            if (!rk || json_object_get_int(rk) != q) continue;
            const char *host = field(o, "host") ? json_object_get_string(field(o, "host")) : "?";
            const char *what = field(o, "verdict") ? json_object_get_string(field(o, "verdict")) : "?";
            const int pid = field(o, "pid") ? json_object_get_int(field(o, "pid")) : 0;
            snprintf(out, n, "rank %d's liveness probe: host %s, pid %d: %s", p, host, pid, what);
            return;
        }
    }
}

int sharc_doctor_main(int argc, char **argv) {
    if (argc != 1 || argv[0][0] == '-') {
        fprintf(stderr, "usage: sharc doctor RUN_DIR   (reads RUN_DIR/debug/flight-rank-*.json of a failed run)\n");
        return 2;
    }
    struct stat sb;
    if (stat(argv[0], &sb) != 0 || !S_ISDIR(sb.st_mode))
        return bad("'%s' is not a directory (expected a run's train.out_dir)%s", argv[0], "");
    char dpath[4200], path[4600];
    snprintf(dpath, sizeof dpath, "%s/debug", argv[0]);
    DIR *d = opendir(dpath);
    flight_rank *ranks = calloc(MAX_RANKS, sizeof *ranks);
    int nfiles = 0, world = 0, rc = 0;
    for (struct dirent *de; d && ranks && (de = readdir(d));) {
        size_t L = strlen(de->d_name);
        if (strncmp(de->d_name, "flight-rank-", 12) != 0 || L < 5 || strcmp(de->d_name + L - 5, ".json") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dpath, de->d_name);
        flight_rank r;
        if ((rc = load(path, &r)) != 0) break;
        if (ranks[r.rank].doc) {
            rc = bad("%s: a second record for rank %s", path, "");
            break;
        }
        ranks[r.rank] = r;
        world = r.world > world ? r.world : world;
        nfiles++;
    }
    if (d) closedir(d);
    if (!ranks) return bad("out of memory%s%s", "", "");
    if (rc == 0 && nfiles == 0) {
        printf("doctor: no flight records in %s (a rank writes flight-rank-R.json only when the run fails: "
               "watchdog timeout, terminated by the launcher, fatal error)\n",
               dpath);
    } else if (rc == 0) {
        char verdict[1024] = "", buf[256], buf2[256];
        for (int q = 0; q < world; q++) {
            const flight_rank *r = &ranks[q];
            if (r->doc)
                printf("rank %d on %s: %s at %s (%d collectives recorded)\n", q, r->host, r->reason, r->activity, r->n);
            else {
                char seen[320] = "";
                probe_verdict(ranks, world, q, seen, sizeof seen);
                printf("rank %d: no flight record: it ended before the others could be told (killed: kill -9, the "
                       "OOM killer, a lost host); %s\n",
                       q, seen[0] ? seen : "the launcher's message names its host");
                if (!verdict[0])
                    snprintf(verdict, sizeof verdict,
                             "rank %d died first (no flight record)%s%s; the others were ended after it", q,
                             seen[0] ? ": " : "", seen);
            }
        }
        /* groups present in any record, in id order */
        int maxg = -1;
        for (int q = 0; q < world; q++)
            for (int i = 0; i < ranks[q].n; i++) maxg = ranks[q].e[i].group > maxg ? ranks[q].e[i].group : maxg;
        for (int g = 0; g <= maxg; g++) {
            /* disagreement: the same collective number, another kind or size */
            long long worst = -1;
            int a = -1, b = -1;
            for (int q = 0; q < world; q++)
                for (int i = 0; ranks[q].doc && i < ranks[q].n; i++) {
                    const flight_entry *e = &ranks[q].e[i];
                    if (e->group != g) continue;
                    for (int p = q + 1; p < world; p++) {
                        const flight_entry *f = ranks[p].doc ? find(&ranks[p], g, e->seq) : NULL;
                        if (f && f->group_size == e->group_size &&
                            (strcmp(f->kind, e->kind) != 0 || f->bytes != e->bytes) && (worst < 0 || e->seq < worst)) {
                            worst = e->seq, a = q, b = p;
                        }
                    }
                }
            if (worst >= 0) {
                describe(buf, sizeof buf, find(&ranks[a], g, worst));
                describe(buf2, sizeof buf2, find(&ranks[b], g, worst));
                printf("group %d: ranks disagree at collective #%lld: rank %d called %s, rank %d %s\n", g, worst, a,
                       buf, b, buf2);
                if (!verdict[0])
                    snprintf(verdict, sizeof verdict,
                             "ranks %d and %d called different collectives as #%lld of "
                             "group %d (a schedule that differs between ranks)",
                             a, b, worst, g);
            }
            /* waiting: the highest collective some rank is inside, and who never got there */
            long long top = -1;
            for (int q = 0; q < world; q++) {
                const flight_entry *e = ranks[q].doc ? last_on(&ranks[q], g) : NULL;
                if (e && e->end < 0 && e->seq > top) top = e->seq;
            }
            if (top < 0) continue;
            char waiting[512] = "", behind[512] = "";
            int first_behind = -1;
            for (int q = 0; q < world; q++) {
                const flight_entry *e = ranks[q].doc ? last_on(&ranks[q], g) : NULL;
                if (!e) continue; /* not in this group */
                if (e->seq == top && e->end < 0)
                    snprintf(waiting + strlen(waiting), sizeof waiting - strlen(waiting), "%s%d (%.1f s)",
                             waiting[0] ? ", " : "", q, ranks[q].now - e->start);
                else if (e->seq < top) {
                    snprintf(behind + strlen(behind), sizeof behind - strlen(behind), "%s%d (last #%lld %s%s)",
                             behind[0] ? ", " : "", q, e->seq, e->kind, e->end < 0 ? ", in it" : ", done");
                    if (first_behind < 0) first_behind = q;
                }
            }
            const flight_entry *w = NULL;
            for (int q = 0; q < world && !w; q++)
                if (ranks[q].doc) w = find(&ranks[q], g, top);
            describe(buf, sizeof buf, w);
            printf("group %d (%d ranks): collective %s: waiting in it: rank%s %s; never reached it: %s\n", g,
                   w->group_size, buf, strchr(waiting, ',') ? "s" : "", waiting, behind[0] ? behind : "none seen");
            if (first_behind >= 0 && !verdict[0])
                snprintf(verdict, sizeof verdict,
                         "rank %d (host %s) never reached collective #%lld (%s) of group %d "
                         "where the others wait; it was: %s",
                         first_behind, ranks[first_behind].host, top, w->kind, g, ranks[first_behind].activity);
        }
        printf("verdict: %s\n", verdict[0] ? verdict
                                           : "every rank reached the same collectives (no disagreement "
                                             "in the records)");
    }
    for (int q = 0; q < MAX_RANKS; q++) {
        if (ranks[q].doc) json_object_put(ranks[q].doc);
        free(ranks[q].e);
    }
    free(ranks);
    return rc;
}
