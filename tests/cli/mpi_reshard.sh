#!/usr/bin/env bash
# timeout: 180
# fsdp.reshard_after_forward as an int N (note [post-forward] in
# src/fsdp/plan.c): at 4 ranks with N = 2, both families, against true on
# the same ranks: losses and parameters bit for bit, all-gather bytes per
# step by the formula (forward over the shard group, backward inside groups
# of N), the post-forward slices allocated as planned (mpi_tests reshard);
# MPI all-gathers (SHARC_COMM_SHM=0), 16-bit parameters, and the shared
# window where N changes nothing. Bad values: one line with the arithmetic,
# exit 2, from `sharc plan` and from a 4-rank `sharc train`. Parity with one
# process: mpi_parity.sh; the memory plan: mpi_memplan.sh, mpi_memory.sh.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
L="model.family=llama model.num_kv_heads=1 model.tie_embeddings=false model.ff_hidden_dim=70"
check() { mpi_check "reshard text.txt" "reshard_after_forward" "" "$@"; }
SHARC_COMM_SHM=0 check 4 2 model.num_layers=3
SHARC_COMM_SHM=0 check 4 2 $L train.grad_accum=2 fsdp.activation_checkpointing=true
check 4 2 fsdp.param_dtype=bf16 fsdp.forward_prefetch=true
check 4 2 $L
SHARC_COMM_SHM=0 check 4 4 fsdp.backward_prefetch=BACKWARD_POST

S="$SHARC_BIN/sharc"
bad() { # expected-message args...
  local want=$1; shift
  set +e; local out; out=$("$@" 2>&1); local rc=$?; set -e
  [ $rc -eq 2 ] && grep -qF -- "$want" <<< "$out" || { echo "$*: exit $rc: $out"; exit 1; }
}
bad "3 does not divide the shard group of 4 ranks (4 % 3 = 1" "$S" plan --ranks 4 --fsdp.reshard_after_forward=3
bad "8 ranks is more than the shard group's 4" "$S" plan --ranks 4 --fsdp.reshard_after_forward=8
bad "4 ranks is more than the shard group's 2" "$S" plan --ranks 4 --fsdp.sharding_strategy=HYBRID_SHARD --fsdp.fsdp_size=2 --fsdp.reshard_after_forward=4
bad "4 does not divide the shard group of 6 ranks (6 % 4 = 2, 6 / 4 = 1.50 groups); set it to a divisor of 6 greater than 1 (2, 3, 6)" "$S" plan --ranks 6 --fsdp.reshard_after_forward=4
bad "the shard group has 1 rank" "$S" plan --ranks 4 --fsdp.sharding_strategy=NO_SHARD --fsdp.reshard_after_forward=2
for v in 0 -1 1; do
  bad "reshard_after_forward = '$v': expected true, false, auto or a number of ranks N >= 2" "$S" plan --ranks 4 --fsdp.reshard_after_forward=$v
done
# the plan counts the kept slices in gathered
out=$("$S" plan --ranks 4 --fsdp.reshard_after_forward=2)
grep -q "reshard_after_forward 2: each block keeps 1/2" <<< "$out" || { echo "$out"; exit 1; }
# at run time every rank refuses it before training, exit 2
out=$(set +e; mpi 4 "$S" train --data.path=text.txt --model.num_layers=1 --model.embed_dim=32 --model.num_heads=2 \
      --train.seq_len=16 --model.max_seq_len=16 --train.max_steps=1 --train.out_dir=bad_run --fsdp.reshard_after_forward=3 2>&1; echo "rc=$?")
grep -q "rc=2" <<< "$out" && [ "$(grep -c '3 does not divide the shard group of 4 ranks' <<< "$out")" -ge 1 ] || { echo "$out"; exit 1; }
echo "reshard_after_forward: bad values refused with the arithmetic"
