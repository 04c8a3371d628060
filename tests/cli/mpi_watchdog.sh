#!/usr/bin/env bash
# timeout: 90
# The step watchdog (note [watchdog]): rank 1 stops forever at step 3
# (SHARC_TEST_HANG); within train.timeout every rank says what it waits on or
# computes, and the job exits non-zero instead of hanging.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
common="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --train.max_steps=6 --train.out_dir=out --train.log_every=1"
export SHARC_TEST_HANG=1:3
out=$(mpi 2 "$SHARC_BIN/sharc" train $common --train.timeout=3 2>&1); rc=$?
unset SHARC_TEST_HANG
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected the watchdog's non-zero exit, not $rc"; echo "$out"; exit 1; }
grep -q "^\[rank 0\] watchdog: no progress for 3 s (train.timeout) at step 3: waiting in all_reduce over 2 ranks" <<< "$out" ||
  { echo "$out"; exit 1; }
grep -q "^\[rank 1\] watchdog: no progress for 3 s (train.timeout) at step 3: computing (stopped by the test hook SHARC_TEST_HANG)" <<< "$out" ||
  { echo "$out"; exit 1; }
grep -q "^step     2/6" <<< "$out" || { echo "$out"; exit 1; }
echo ok
