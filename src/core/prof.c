/* prof.c: the region timers of sharc/prof.h. */
#include "sharc/prof.h"

#include <stdlib.h>
#include <string.h>

#define MAX_REGIONS 128

static bool enabled;
static int nregions;
static const char *names[MAX_REGIONS];
static double totals[MAX_REGIONS];
static long counts[MAX_REGIONS];

void sharc_prof_enable(bool on) { enabled = on; }
bool sharc_prof_enabled(void) { return enabled; }

int sharc_prof_id(const char *name) {
    for (int i = 0; i < nregions; i++)
        if (strcmp(names[i], name) == 0) return i;
    if (nregions == MAX_REGIONS) return MAX_REGIONS - 1;
    names[nregions] = name;
    return nregions++;
}

void sharc_prof_add(int id, double seconds) {
    totals[id] += seconds;
    counts[id]++;
}

void sharc_prof_report(FILE *f, int steps) {
    int order[MAX_REGIONS];
    double sum = 0.0;
    for (int i = 0; i < nregions; i++) {
        order[i] = i;
        sum += totals[i];
    }
    for (int i = 0; i < nregions; i++)
        for (int j = i + 1; j < nregions; j++)
            if (totals[order[j]] > totals[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    if (steps < 1) steps = 1;
    fprintf(f, "%-28s %10s %8s %8s\n", "region", "ms/step", "share", "calls");
    for (int k = 0; k < nregions; k++) {
        int i = order[k];
        fprintf(f, "%-28s %10.2f %7.1f%% %8ld\n", names[i], totals[i] * 1e3 / steps,
                sum > 0 ? 100.0 * totals[i] / sum : 0.0, counts[i] / steps);
        totals[i] = 0.0;
        counts[i] = 0;
    }
}
