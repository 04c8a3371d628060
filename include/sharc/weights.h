/* sharc/weights.h: model weights as one safetensors file under sharc's
 * parameter names (sharc/model.h), with the resolved run configuration in
 * the file's metadata ("sharc.config", YAML) so the file describes itself.
 * Loading reads, for each parameter, only the element ranges this rank's
 * shards hold. */
#ifndef SHARC_WEIGHTS_H
#define SHARC_WEIGHTS_H

#include "sharc/comm.h"
#include "sharc/config.h"
#include "sharc/fsdp.h"
#include "sharc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write every parameter (fp32 master values) and `config` to `path`
 * atomically. Collective over `world` (NULL: one process): unit by unit the
 * shards are gathered and rank 0 appends them to the file, so no rank holds
 * more than one unit beyond its shards. Every rank returns the same status. */
sharc_status sharc_weights_save(sharc_fsdp *e, sharc_comm *world, const sharc_config *config, const char *path);
/* Fill this rank's shards from `path`; every parameter must be present with
 * its shape, and every tensor in the file must be a parameter. */
sharc_status sharc_weights_load(sharc_fsdp *e, const char *path);
/* Read the configuration stored in a weights file (on top of the defaults). */
sharc_status sharc_weights_read_config(const char *path, sharc_config *config);

#ifdef __cplusplus
}
#endif
#endif
