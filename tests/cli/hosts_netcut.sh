#!/usr/bin/env bash
# timeout: 120
# A host whose network is cut (note [rank-death]): 2 hosts x 1 rank; once the
# run is past step 20, node1's link goes down (`ip link set ... down` on its
# bridge port). The job ends by itself, well before the test's timeout: with
# TCP keepalive on Open MPI's out-of-band links (HOSTS_KEEPALIVE in
# scripts/hosts.sh) mpirun notices the lost daemon and ends the job; rank 0
# says which collective it was waiting in and writes its flight record, and
# no sharc process is left on either host. Without keepalive (Open MPI's
# defaults) mpirun waits ~8 minutes before it notices. Prints the time from
# the cut to the job's exit. Rank 0's liveness probe (note [liveness])
# names rank 1 and node1 as unreachable, on stderr and in its record.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
source "$SHARC_ROOT/scripts/hosts.sh"
hosts_check || { echo "SKIP: $HOSTS_WHY"; exit 77; }
cd "$TMPDIR"
make_text text.txt
hosts_up 2
link="sh${HOSTS_ID}n1"
(
  for _ in $(seq 1 300); do
    [ "$(cat run/metrics.jsonl 2>/dev/null | wc -l)" -ge 20 ] && break
    sleep 0.1
  done
  date +%s.%N > cut_at
  ip link set "$link" down
) &
cutter=$!
out=$(HOSTS_TIMEOUT=90 hosts_mpirun 1 -n 2 "$SHARC_BIN/sharc" train \
      --data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --train.max_steps=1000000 \
      --train.threads=1 --train.log_every=1000 --train.timeout=60 --train.out_dir=run 2>&1); rc=$?
t1=$(date +%s.%N)
wait $cutter
fail() { echo "FAIL: $1"; echo "$out" | grep -v '^\[node0:[0-9]*\] \[' | tail -30; exit 1; }
[ -s cut_at ] || fail "the link was never cut (no 20 steps in run/metrics.jsonl)"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "expected mpirun to end the job with an error, not exit $rc (124: it hung)"
grep -q "ORTE has lost communication with a remote daemon" <<< "$out" || fail "mpirun should say it lost node1's daemon"
grep -q "^\[rank 0\] rank 1 (host node1, pid [0-9]*) is lost: host node1 is unreachable (network cut or host down)$" <<< "$out" ||
  fail "rank 0 should name rank 1 and host node1 as unreachable (the liveness probe)"
jq -e '.liveness.lost[0] | .rank == 1 and .host == "node1" and .verdict == "host unreachable"' run/debug/flight-rank-0.json \
  > /dev/null || fail "rank 0's flight record should hold the probe's verdict"
grep -q "^\[rank 0\] terminated by signal 15 (SIGTERM) at step [0-9]*: waiting in " <<< "$out" ||
  fail "rank 0 should say which collective it was waiting in"
[ -s run/debug/flight-rank-0.json ] || fail "rank 0's flight record"
sleep 1
for h in node0 node1; do
  left=$(ip netns pids "sharc$HOSTS_ID-$h" 2>/dev/null | xargs -r ps -o comm= -p 2>/dev/null | grep -c '^sharc$')
  [ "$left" -eq 0 ] || fail "$left sharc process(es) left on $h"
done
echo "time from the cut to the job's exit: $(echo "$t1 - $(cat cut_at)" | bc) s"
