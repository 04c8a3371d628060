#!/usr/bin/env bash
# timeout: 120
# Collectives (MPI backend) against values computed in the test, at 1-4 ranks,
# and the engine's reduction over a 65-rank shard group.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
for n in 1 2 3 4; do
  out=$(mpi $n "$SHARC_BIN/mpi_tests" comm 2>&1) || { echo "$out"; exit 1; }
  [ "$(grep -c '^ok comm' <<< "$out")" -eq $n ] || { echo "$out"; exit 1; }
done
# a shard group of 65 ranks (more than 64: a big node at one rank per core)
# through the engine's shared gradient window
out=$(mpi 65 "$SHARC_BIN/mpi_tests" wide 2>&1) || { echo "$out" | grep -v '^ok' | head; exit 1; }
[ "$(grep -c '^ok wide' <<< "$out")" -eq 65 ] || { echo "$out" | head; exit 1; }
echo ok
