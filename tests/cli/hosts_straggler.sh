#!/usr/bin/env bash
# timeout: 180
# A straggler host is named in telemetry (note [straggler] in
# src/train/telemetry.c): 2 hosts x 1 rank, one host held to 10% of a CPU by
# its cgroup (scripts/hosts.sh hosts_throttle); the metrics lines name that
# host as time_metrics/slowest_host with slowest_ratio > 1.5 (it computes
# about 3-10x longer than the other), and so does the console line; then the
# same with the other host throttled (the name follows the throttle, not
# the rank). Timing-based, so judged over steps 2-7 by majority.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
source "$SHARC_ROOT/scripts/hosts.sh"
hosts_check || { echo "SKIP: $HOSTS_WHY"; exit 77; }
cd "$TMPDIR"
make_text text.txt
hosts_up 2
args=(--data.path=text.txt --model.num_layers=2 --model.embed_dim=192 --model.num_heads=4 --model.max_seq_len=64
      --train.seq_len=64 --train.batch_size=8 --train.max_steps=7 --train.log_every=1 --train.threads=1)
for slow in node1 node0; do
  fast=node1; [ $slow = node1 ] && fast=node0
  hosts_throttle $fast off
  hosts_throttle $slow 10 || { echo "SKIP: $HOSTS_WHY"; exit 77; }
  HOSTS_TIMEOUT=120 hosts_mpirun 1 -n 2 "$SHARC_BIN/sharc" train "${args[@]}" --train.out_dir=run_$slow > out_$slow.txt 2> err_$slow.txt ||
    { echo "training failed"; cat err_$slow.txt | tail -20; exit 1; }
  jq -c '[.step, .["time_metrics/slowest_host"], .["time_metrics/slowest_ratio"], .["time_metrics/slowest_busy(s)"], .["time_metrics/end_to_end(s)"]]' run_$slow/metrics.jsonl
  jq -s -e --arg h $slow '[.[1:][] | select(.["time_metrics/slowest_host"] == $h and .["time_metrics/slowest_ratio"] > 1.5)]
        | length >= 4' run_$slow/metrics.jsonl > /dev/null ||
    { echo "FAIL: $slow (10% of a CPU) is not named the straggler in at least 4 of steps 2-7"; exit 1; }
  named=$(grep -c "straggler rank [01] on $slow" out_$slow.txt || true)
  [ "$named" -ge 4 ] || { echo "FAIL: the console names $slow in $named of 7 lines"; cat out_$slow.txt; exit 1; }
  echo "$slow throttled: named in $(jq -s --arg h $slow '[.[1:][] | select(.["time_metrics/slowest_host"] == $h)] | length' run_$slow/metrics.jsonl) of steps 2-7"
done
