#!/usr/bin/env bash
# timeout: 120
# FULL_SHARD at N ranks holds 1/N of one process's model state (plus padding)
# and at most the documented number of gathered units.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
for n in 2 3 4; do
  mpi $n "$SHARC_BIN/mpi_tests" memory text.txt | grep -E '^model state' || exit 1
done
mpi 4 "$SHARC_BIN/mpi_tests" memory text.txt fsdp.forward_prefetch=true | grep -E '^model state'
mpi 4 "$SHARC_BIN/mpi_tests" memory text.txt model.family=llama model.tie_embeddings=false | grep -E '^model state'
# note [post-forward]: an int reshard_after_forward adds padded / N per block (MPI path)
SHARC_COMM_SHM=0 mpi 4 "$SHARC_BIN/mpi_tests" memory text.txt fsdp.reshard_after_forward=2 fsdp.param_dtype=bf16 | grep -E '^model state'
