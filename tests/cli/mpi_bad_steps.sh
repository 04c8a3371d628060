#!/usr/bin/env bash
# timeout: 90
# Non-finite steps (note [bad-steps]): a NaN gradient on one rank is skipped
# by every rank, parameters and AdamW's step count unchanged (mpi_tests
# badstep, 1 and 2 ranks); the run goes on; train.max_bad_steps in a row stop
# it with a message on every rank.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
for n in 1 2; do
  out=$(mpi $n "$SHARC_BIN/mpi_tests" badstep text.txt 2>&1) || { echo "$out"; exit 1; }
done
common="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --train.max_steps=4 --train.log_every=1"
export SHARC_TEST_NAN=1:2
out=$(mpi 2 "$SHARC_BIN/sharc" train $common --train.out_dir=one 2>&1) || { echo "$out"; exit 1; }
grep -q "step 2: loss .*, grad norm nan: not finite; step skipped, no update (1 in a row, train.max_bad_steps = 3)" <<< "$out" ||
  { echo "$out"; exit 1; }
grep -q "1 step skipped for a non-finite loss or grad norm" <<< "$out" && test -s one/model.safetensors || { echo "$out"; exit 1; }
# train.threads = 0 on 2 unbound ranks of one node: the node's CPUs / 2 each (at least 1)
if [ -z "${OMP_NUM_THREADS:-}" ]; then
  avail=$(nproc); online=$(getconf _NPROCESSORS_ONLN)
  if [ "$avail" -ge "$online" ]; then want=$(( avail / 2 )); else want=$avail; fi
  [ "$want" -ge 1 ] || want=1
  grep -q "2 ranks (FULL_SHARD: 2 shard x 1 replicate), $want threads each" <<< "$out" || { echo "expected $want threads: $out"; exit 1; }
fi
export SHARC_TEST_NAN=1:2,3
out=$(mpi 2 "$SHARC_BIN/sharc" train $common --train.max_bad_steps=2 --train.out_dir=two 2>&1); rc=$?
unset SHARC_TEST_NAN
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, not $rc"; echo "$out"; exit 1; }
[ "$(grep -c "error: train: 2 non-finite steps in a row (steps 2-3; loss .*, grad norm nan): stopping at train.max_bad_steps = 2" <<< "$out")" -eq 2 ] ||
  { echo "$out"; exit 1; }
test ! -e two/model.safetensors || { echo "weights saved after stopping"; exit 1; }
echo ok
