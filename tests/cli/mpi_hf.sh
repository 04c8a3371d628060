#!/usr/bin/env bash
# timeout: 120
# Hugging Face export at 2-4 ranks is byte-identical to the 1-rank export
# (shards, index, config), and importing it at N ranks restores every master
# parameter exactly; both families, FULL_SHARD and HYBRID_SHARD.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
for fam in gpt2 llama; do
  kv=$([ $fam = llama ] && echo 1 || echo 3)
  args="model.family=$fam model.num_kv_heads=$kv"
  mpi 1 "$SHARC_BIN/mpi_tests" hf text.txt ${fam}_1 $args > /dev/null
  ls ${fam}_1/model.safetensors.index.json > /dev/null
  for n in 2 3 4; do
    out=$(mpi $n "$SHARC_BIN/mpi_tests" hf text.txt ${fam}_$n $args 2>&1) || { echo "$fam, $n ranks:"; echo "$out"; exit 1; }
    diff -r ${fam}_1 ${fam}_$n
  done
  out=$(mpi 4 "$SHARC_BIN/mpi_tests" hf text.txt ${fam}_h $args fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 2>&1) \
    || { echo "$fam, hybrid:"; echo "$out"; exit 1; }
  diff -r ${fam}_1 ${fam}_h
done
echo ok
