/* sharc/rng.h: counter-based random numbers (Philox4x32-10).
 *
 * A value is a pure function of (seed, stream, index): no state is carried
 * between calls, so parameter i of tensor "h.3.attn.c_attn.weight" gets the
 * same initial value whether one process initialises the whole tensor or
 * rank 2 of 3 initialises only its shard. Streams for parameters are the
 * 64-bit FNV-1a hash of the parameter's name (sharc_rng_stream). */
#ifndef SHARC_RNG_H
#define SHARC_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox4x32-10 block: 128 random bits for counter (index, stream), key seed. */
void sharc_philox(uint32_t out[4], uint64_t seed, uint64_t stream, uint64_t index);

/* Standard normal N(0,1) (Box-Muller on one block). */
float sharc_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1) with 24 random bits. */
float sharc_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* 64 random bits. */
uint64_t sharc_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);

/* Stream id for a name (FNV-1a 64). */
uint64_t sharc_rng_stream(const char *name);

/* A sequential generator on top of the counter-based one (for sampling). */
typedef struct {
    uint64_t seed, stream, counter;
} sharc_rng;

void sharc_rng_init(sharc_rng *r, uint64_t seed, uint64_t stream);
float sharc_rng_next_uniform(sharc_rng *r);

#ifdef __cplusplus
}
#endif
#endif
