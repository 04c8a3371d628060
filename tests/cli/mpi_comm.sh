#!/usr/bin/env bash
# timeout: 120
# Collectives (MPI backend) against values computed in the test, at 1-4 ranks.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
for n in 1 2 3 4; do
  out=$(mpi $n "$SHARC_BIN/mpi_tests" comm 2>&1) || { echo "$out"; exit 1; }
  [ "$(grep -c '^ok comm' <<< "$out")" -eq $n ] || { echo "$out"; exit 1; }
done
echo ok
