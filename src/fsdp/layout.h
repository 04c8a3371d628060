/* layout.h (internal): the pure shard arithmetic of the engine; tested on its own.
 *
 * Note [flat-layout]. A unit's parameters lie back to back in one flat
 * buffer of numel elements, padded to numel_padded = group * numel_shard,
 * with numel_shard = ceil(numel / group) rounded up to 16 floats so every
 * shard starts on a 64-byte boundary. Rank r of the shard group holds
 * elements [r * numel_shard, (r + 1) * numel_shard) of the padded buffer:
 * all-gather and reduce-scatter then move contiguous, equal-sized pieces
 * with no copy-in or copy-out. Padding elements are zero, are never read by
 * the model, and are excluded from norms, weight decay and checkpoints. */
#ifndef SHARC_FSDP_LAYOUT_H
#define SHARC_FSDP_LAYOUT_H

#include "sharc/fsdp.h"

#define SHARC_SHARD_ALIGN 16

int64_t sharc_layout_numel_shard(int64_t numel, int group);
/* Segments of the unit's parameters inside elements [lo, hi) of the flat
 * buffer, with shard_off relative to lo and param_off in the full tensor
 * (note [tp-params] in sharc/units.h: a tensor-parallel part is one segment
 * per run). `out` must hold sharc_unit_max_segments(u) entries.
 * Returns the number of segments. */
int sharc_layout_segments(const sharc_unit_spec *u, int64_t lo, int64_t hi, sharc_segment *out);

#endif
