/* sharc/alloc.h: accounted allocation. Every buffer sharc holds goes through
 * sharc_alloc with a category, so current and peak bytes per category (and
 * in total) are known at any moment; this is what the memory telemetry and
 * the FSDP memory tests read. Blocks are 64-byte aligned and zero-filled. */
#ifndef SHARC_ALLOC_H
#define SHARC_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SHARC_MEM_PARAMS = 0,  /* this rank's shard of the fp32 master parameters */
    SHARC_MEM_GRADS,       /* this rank's shard of the gradients */
    SHARC_MEM_OPTIM,       /* optimizer state (AdamW moments) */
    SHARC_MEM_GATHERED,    /* unsharded (gathered) unit parameters and gradients */
    SHARC_MEM_ACTIVATIONS, /* activations kept for backward and their gradients */
    SHARC_MEM_COMM,        /* communication staging buffers */
    SHARC_MEM_OTHER,       /* data batches, scratch, everything else */
    SHARC_MEM_NCAT
} sharc_mem_cat;

typedef struct {
    int64_t current[SHARC_MEM_NCAT];
    int64_t peak[SHARC_MEM_NCAT];
    int64_t current_total;
    int64_t peak_total;
} sharc_mem_stats;

/* Zero-filled, 64-byte aligned; NULL on failure (and an error is recorded). */
void *sharc_alloc(size_t bytes, sharc_mem_cat cat);
void sharc_free(void *ptr);
/* Count memory sharc did not get from sharc_alloc (e.g. this rank's part of
 * an MPI shared-memory window) under `cat`; negative bytes when it goes. */
void sharc_mem_account(sharc_mem_cat cat, int64_t bytes);

void sharc_mem_get(sharc_mem_stats *out);
/* Restart the peaks from the current values (e.g. at the start of a step). */
void sharc_mem_reset_peak(void);
const char *sharc_mem_cat_name(sharc_mem_cat cat);

#ifdef __cplusplus
}
#endif
#endif
