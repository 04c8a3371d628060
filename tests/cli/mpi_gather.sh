#!/usr/bin/env bash
# timeout: 120
# Gathered parameters equal the fp32 masters rounded to fsdp.param_dtype, at
# 1-4 ranks and every strategy, and the engine chose the gather and reduce
# strategies src/fsdp/collectives.c says it should.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
# the 9 configurations of a world size in one MPI job (a failure's output
# ends with the "gather:" line of the configuration that failed)
cfgs=()
for dt in fp32 bf16 fp16; do
  for s in FULL_SHARD SHARD_GRAD_OP NO_SHARD; do cfgs+=(-- fsdp.param_dtype=$dt fsdp.sharding_strategy=$s); done
done
for n in 1 2 3 4; do
  out=$(mpi $n "$SHARC_BIN/mpi_tests" gather text.txt "${cfgs[@]:1}" 2>&1) || { echo "$n ranks:"; echo "$out"; exit 1; }
  [ "$(grep -c '^gather: fsdp.param_dtype' <<< "$out")" -eq 9 ] || { echo "$n ranks: not 9 configurations: $out"; exit 1; }
done
# private shards and MPI all-gathers (SHARC_COMM_SHM=0): the fp32 all-gather strategy
for n in 2 3; do
  out=$(SHARC_COMM_SHM=0 mpi $n "$SHARC_BIN/mpi_tests" gather text.txt 2>&1) || { echo "$n ranks, no shm:"; echo "$out"; exit 1; }
done
echo ok
