/* sample.c: sharc_sample_logits, temperature and top-k sampling. */
#include "sharc/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int sharc_sample_logits(float *logits, int V, float temperature, int top_k, float u) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0.0f) return best;
    float cutoff = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float *sorted = malloc(sizeof(float) * (size_t)V);
        if (sorted) {
            memcpy(sorted, logits, sizeof(float) * (size_t)V);
            qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
            cutoff = sorted[top_k - 1];
            free(sorted);
        }
    }
    const float top = logits[best];
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        double p = logits[i] >= cutoff ? exp((double)(logits[i] - top) / (double)temperature) : 0.0;
        logits[i] = (float)p;
        sum += p;
    }
    double r = (double)u * sum, acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += logits[i];
        if (r < acc) return i;
    }
    return best;
}
