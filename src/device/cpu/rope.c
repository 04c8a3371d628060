/* rope.c: sharc_cpu_rope_*, rotary position embeddings in Hugging Face's
 * rotate-half convention: element i of a head is paired with element i + hd/2
 * and rotated by angle t * theta^(-2i/hd) at position t. (Meta's original
 * checkpoints pair neighbours 2i, 2i+1 instead; the two differ by a row
 * permutation of the q/k projection weights. sharc reads Hugging Face files,
 * which are already in rotate-half order: docs/ARCHITECTURE.md, "Names and
 * layouts".) */
#include "sharc/blas.h"
#include "cpu.h"
#include "../../core/parallel.h"

#include <math.h>

void sharc_cpu_rope_table(sharc_stream *s, float *cos_t, float *sin_t, int T, int hd, float theta, int t0) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        /* computed as PyTorch/HF do: inv_freq in fp32, angle = t * inv_freq in fp32 */
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
        for (int t = 0; t < T; t++) {
            float a = (float)(t0 + t) * inv_freq;
            cos_t[t * half + i] = cosf(a);
            sin_t[t * half + i] = sinf(a);
        }
    }
}

/* note [packing]: the model's host formula before this slot existed, so the CPU's bits did not change */
void sharc_cpu_rope_table_pos(sharc_stream *s, float *cos_t, float *sin_t, const int32_t *pos, const float *inv_freq,
                              int64_t N, int half) {
    for (int64_t r = 0; r < N; r++)
        for (int i = 0; i < half; i++) {
            float a = (float)pos[r] * inv_freq[i];
            cos_t[r * half + i] = cosf(a);
            sin_t[r * half + i] = sinf(a);
        }
}

/* sign = +1 rotates forward, -1 applies the inverse (transpose) rotation. */
SHARC_VEC static void rope_rows(float *qkv, const float *cos_t, const float *sin_t, int64_t r0, int64_t r1, int T,
                                int nheads, int stride, int hd, float sign) {
    int half = hd / 2;
    for (int64_t r = r0; r < r1; r++) {
        const float *c = cos_t + (r % T) * half, *s = sin_t + (r % T) * half;
        float *row = qkv + r * stride;
        for (int h = 0; h < nheads; h++) {
            float *x = row + h * hd;
            for (int i = 0; i < half; i++) {
                float a = x[i], b = x[i + half];
                float si = sign * s[i];
                x[i] = a * c[i] - b * si;
                x[i + half] = b * c[i] + a * si;
            }
        }
    }
}

static void rope_apply(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH, int NKV, int hd,
                       float sign) {
    int64_t N = (int64_t)B * T;
    int stride = (NH + 2 * NKV) * hd;
    int64_t nc = sharc_par_chunks(N, (NH + NKV) * hd, sharc_threads_get());
#pragma omp parallel for schedule(static) if (nc > 1)
    for (int64_t c = 0; c < nc; c++)
        rope_rows(qkv, cos_t, sin_t, c * N / nc, (c + 1) * N / nc, T, NH + NKV, stride, hd, sign);
}

void sharc_cpu_rope_forward(sharc_stream *s, float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                            int NKV, int hd) {
    rope_apply(qkv, cos_t, sin_t, B, T, NH, NKV, hd, 1.0f);
}

void sharc_cpu_rope_backward(sharc_stream *s, float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                             int NKV, int hd) {
    rope_apply(dqkv, cos_t, sin_t, B, T, NH, NKV, hd, -1.0f);
}
