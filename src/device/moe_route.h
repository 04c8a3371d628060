/* moe_route.h (internal): one token's router math, shared by the CPU's and
 * the CUDA backend's MoE kernels (src/device/cpu/experts.c,
 * src/device/cuda/experts.cu) so both run the same operations in the same
 * order (note [moe] in src/model/moe.c, note [cuda-moe]): the softmax over
 * E experts and the top K (strictly greater wins, so ties keep the lower
 * expert), and their backward. Valid C11 and CUDA C++; SHARC_HD marks the
 * functions for host and device when nvcc compiles them. */
#ifndef SHARC_DEVICE_MOE_ROUTE_H
#define SHARC_DEVICE_MOE_ROUTE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SHARC_HD __host__ __device__
#else
#define SHARC_HD
#endif

/* p (E) = softmax(l); ix, w (K) = the K largest and their weights
 * (renormalised to sum 1 with norm_topk) */
SHARC_HD static inline void sharc_moe_route_token(float *p, int32_t *ix, float *w, const float *l, int E, int K,
                                                  bool norm_topk) {
    float mx = l[0];
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    float sum = 0.0f;
    for (int e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
    for (int e = 0; e < E; e++) p[e] /= sum;
    float wsum = 0.0f;
    for (int j = 0; j < K; j++) { /* the j-th largest */
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++) taken = ix[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        ix[j] = best;
        w[j] = p[best];
        wsum += w[j];
    }
    if (norm_topk)
        for (int j = 0; j < K; j++) w[j] /= wsum;
}

/* dl (E) = d logits from dw (K), the weights' gradient, plus daux (E,
 * nullable), the auxiliary loss's gradient of the probabilities */
SHARC_HD static inline void sharc_moe_route_token_backward(float *dl, const float *dw, const float *p,
                                                           const int32_t *ix, const float *w, const float *daux, int E,
                                                           int K, bool norm_topk) {
    for (int e = 0; e < E; e++) dl[e] = daux ? daux[e] : 0.0f; /* d probs first, then the softmax backward */
    if (norm_topk) { /* w_j = p_j / S: d p_j = (d w_j - sum_m d w_m w_m) / S */
        float S = 0.0f, dot = 0.0f;
        for (int j = 0; j < K; j++) {
            S += p[ix[j]];
            dot += dw[j] * w[j];
        }
        for (int j = 0; j < K; j++) dl[ix[j]] += (dw[j] - dot) / S;
    } else {
        for (int j = 0; j < K; j++) dl[ix[j]] += dw[j];
    }
    float pd = 0.0f;
    for (int e = 0; e < E; e++) pd += p[e] * dl[e];
    for (int e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - pd);
}

#endif
