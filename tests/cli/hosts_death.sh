#!/usr/bin/env bash
# timeout: 150
# A rank that dies across hosts (note [rank-death]): 2 hosts x 2 ranks,
# rank 3 (on node1) SIGKILLs itself at step 3 (SHARC_TEST_KILL, as kill -9
# would). The job ends (no hang, under timeout), mpirun names rank 3 and
# node1, ranks 0-2 name rank 3, node1 and its pid (the liveness probe: its
# host answers, its process is gone), each says it was terminated and writes
# their flight record (a directory every host sees), and sharc doctor names
# rank 3 as the rank that died first. Prints the time from the death to the
# job's exit.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
source "$SHARC_ROOT/scripts/hosts.sh"
hosts_check || { echo "SKIP: $HOSTS_WHY"; exit 77; }
cd "$TMPDIR"
make_text text.txt
hosts_up 2
out=$(SHARC_TEST_KILL=3:3 HOSTS_TIMEOUT=90 hosts_mpirun 2 -n 4 -x SHARC_TEST_KILL "$SHARC_BIN/sharc" train \
      --data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --train.max_steps=50 \
      --train.threads=1 --train.log_every=1 --train.timeout=30 --train.out_dir=run 2>&1); rc=$?
t1=$(date +%s.%N)
fail() { echo "FAIL: $1"; echo "$out" | tail -30; exit 1; }
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "expected a non-zero exit after rank 3 died, not $rc"
grep -q "process rank 3 with PID .* on node node1 exited on signal 9" <<< "$out" || fail "mpirun should name rank 3 on node1"
for r in 0 1 2; do
  grep -q "^\[rank $r\] terminated by signal 15 (SIGTERM) at step 3" <<< "$out" || fail "rank $r should say it was terminated"
done
# the liveness probe (note [liveness]): node0's ranks find node1 answering but rank 3's process gone,
# rank 2 (on node1) finds it gone from the same host
pid3=$(sed -n 's/^\[rank 3\] SHARC_TEST_KILL: SIGKILL to itself (pid \([0-9]*\)).*/\1/p' <<< "$out")
for r in 0 1; do
  grep -q "^\[rank $r\] rank 3 (host node1, pid $pid3) is gone: its host answers but its process does not$" <<< "$out" ||
    fail "rank $r should name rank 3 on node1 (pid '$pid3') as gone, its host answering"
done
grep -q "^\[rank 2\] rank 3 (host node1, pid $pid3) is gone: its process no longer exists (this rank's host)$" <<< "$out" ||
  fail "rank 2 should name rank 3 as gone from its own host"
[ "$(grep -c ' is gone: \| is lost: ' <<< "$out")" -eq 3 ] || fail "only rank 3 should be named lost"
tk=$(sed -n 's/^\[rank 3\] SHARC_TEST_KILL: SIGKILL to itself (pid [0-9]*) at \([0-9.]*\)$/\1/p' <<< "$out")
[ -n "$tk" ] || fail "rank 3's kill time"
[ "$(ls run/debug/flight-rank-*.json | wc -l)" -eq 3 ] && [ ! -e run/debug/flight-rank-3.json ] ||
  { ls run/debug; fail "expected the records of ranks 0-2"; }
doc=$("$SHARC_BIN/sharc" doctor run 2>&1) || { out=$doc; fail "doctor failed"; }
grep -q "^verdict: rank 3 died first (no flight record)" <<< "$doc" || { out=$doc; fail "doctor should name rank 3"; }
grep -q "^rank 2 on node1: terminated at step 3" <<< "$doc" || { out=$doc; fail "doctor: rank 2's line"; }
echo "time from rank 3's death to the job's exit: $(echo "$t1 - $tk" | bc) s"
