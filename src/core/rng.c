/* rng.c: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11) and the derived uniform/normal draws. */
#include "sharc/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void sharc_philox(uint32_t out[4], uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

float sharc_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    sharc_philox(r, seed, stream, index);
    /* u1 in (0, 1], u2 in [0, 1), 53-bit doubles from two words each */
    uint64_t a = ((uint64_t)r[0] << 21) ^ (r[1] >> 11);
    uint64_t b = ((uint64_t)r[2] << 21) ^ (r[3] >> 11);
    double u1 = ((double)(a & ((1ull << 53) - 1)) + 1.0) / 9007199254740992.0;
    double u2 = (double)(b & ((1ull << 53) - 1)) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float sharc_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    sharc_philox(r, seed, stream, index);
    return (float)(r[0] >> 8) * (1.0f / 16777216.0f);
}

uint64_t sharc_rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    sharc_philox(r, seed, stream, index);
    return ((uint64_t)r[0] << 32) | r[1];
}

uint64_t sharc_rng_stream(const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}

void sharc_rng_init(sharc_rng *r, uint64_t seed, uint64_t stream) {
    r->seed = seed;
    r->stream = stream;
    r->counter = 0;
}

float sharc_rng_next_uniform(sharc_rng *r) { return sharc_rng_uniform(r->seed, r->stream, r->counter++); }
