#!/usr/bin/env bash
# timeout: 120
# The flight recorder and sharc doctor (note [flight]), and a rank that dies
# (note [rank-death]), on one host at 2 ranks:
#  - rank 1 stops at step 3 (SHARC_TEST_HANG): on the watchdog each rank
#    writes out/debug/flight-rank-R.json; rank 0's last collective on some
#    group is not completed, rank 1's last on that group is the one before
#    (read from the files with jq), and doctor names rank 1 and that number;
#  - rank 1 SIGKILLs itself at step 3 (SHARC_TEST_KILL, as kill -9): the
#    job ends within seconds, mpirun names rank 1, rank 0 names rank 1, this
#    host and its pid as gone (the liveness probe), says it was terminated
#    and writes its record, rank 1 none, and doctor names rank 1.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
common="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --train.max_steps=50 --train.out_dir=out --train.log_every=1"
fail() { echo "$1"; echo "$out"; exit 1; }

# --- a hang
out=$(SHARC_TEST_HANG=1:3 mpi 2 "$SHARC_BIN/sharc" train $common --train.timeout=3 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "expected the watchdog's exit, not $rc"
for r in 0 1; do
  jq -e . out/debug/flight-rank-$r.json > /dev/null || fail "flight-rank-$r.json: not JSON"
  jq -e ".rank == $r and .world_size == 2 and .reason == \"watchdog\"" out/debug/flight-rank-$r.json > /dev/null ||
    fail "flight-rank-$r.json: wrong rank, size or reason"
  grep -q "^\[rank $r\] flight recorder: this rank's last collectives are in out/debug/flight-rank-$r.json" <<< "$out" ||
    fail "rank $r did not say where its record is"
done
# the reference, from the files: the group where rank 0 is inside an
# uncompleted collective, its number there, and rank 1's last number there
g=$(jq '[.entries[] | select(.end == null and .nonblocking == false)] | last | .group' out/debug/flight-rank-0.json)
s=$(jq "[.entries[] | select(.group == $g)] | max_by(.seq) | .seq" out/debug/flight-rank-0.json)
s1=$(jq "[.entries[] | select(.group == $g)] | max_by(.seq) | .seq" out/debug/flight-rank-1.json)
[ "$g" != null ] && [ "$s" -gt 1 ] && [ "$s1" -eq $((s - 1)) ] ||
  fail "expected rank 0 inside collective #s of a group and rank 1 at #s-1 there: group $g, $s, $s1"
jq -e "[.entries[] | select(.group == $g)] | max_by(.seq) | .end != null" out/debug/flight-rank-1.json > /dev/null ||
  fail "rank 1's last collective should be completed"
# entries carry the step: rank 0 waits in step 3, rank 1 finished step 2's collectives
jq -e "[.entries[] | select(.group == $g and .seq == $s)][0].step == 3" out/debug/flight-rank-0.json > /dev/null ||
  fail "rank 0's waiting collective should be in step 3"
doc=$("$SHARC_BIN/sharc" doctor out 2>&1) || { out=$doc; fail "doctor failed"; }
grep -q "^verdict: rank 1 (host $(hostname)) never reached collective #$s (.*) of group $g where the others wait; it was: step 3: computing (stopped by the test hook SHARC_TEST_HANG)" <<< "$doc" ||
  { out=$doc; fail "doctor's verdict should name rank 1 and collective #$s of group $g"; }
grep -q "^group $g (2 ranks): collective #$s .*waiting in it: rank 0 (.*never reached it: 1 (last #$s1 " <<< "$doc" ||
  { out=$doc; fail "doctor's group line"; }

# --- a rank that dies (kill -9)
t0=$(date +%s.%N)
out=$(SHARC_TEST_KILL=1:3 mpi 2 "$SHARC_BIN/sharc" train $common --train.timeout=30 --train.overwrite_output_dir=true 2>&1); rc=$?
t1=$(date +%s.%N)
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "expected a non-zero exit after rank 1 died, not $rc"
grep -q "process rank 1 with PID .* exited on signal 9" <<< "$out" || fail "mpirun should name rank 1"
grep -q "^\[rank 0\] terminated by signal 15 (SIGTERM) at step 3: .* the launcher is ending the job" <<< "$out" ||
  fail "rank 0 should say it was terminated, and where"
# the liveness probe (note [liveness]): rank 0 names rank 1, this host and the pid rank 1 reported
pid1=$(sed -n 's/^\[rank 1\] SHARC_TEST_KILL: SIGKILL to itself (pid \([0-9]*\)).*/\1/p' <<< "$out")
grep -q "^\[rank 0\] rank 1 (host $(hostname), pid $pid1) is gone: its process no longer exists (this rank's host)$" <<< "$out" ||
  fail "rank 0 should name rank 1, host $(hostname) and pid '$pid1' as gone"
[ -f out/debug/flight-rank-0.json ] && [ ! -e out/debug/flight-rank-1.json ] || fail "expected rank 0's record only"
jq -e '.reason == "terminated"' out/debug/flight-rank-0.json > /dev/null || fail "rank 0's record: reason"
doc=$("$SHARC_BIN/sharc" doctor out 2>&1) || { out=$doc; fail "doctor failed"; }
grep -q "^verdict: rank 1 died first (no flight record): rank 0's liveness probe: host $(hostname), pid $pid1: process gone" <<< "$doc" ||
  { out=$doc; fail "doctor should name rank 1 and what rank 0's probe found"; }
tk=$(sed -n 's/^\[rank 1\] SHARC_TEST_KILL: SIGKILL to itself (pid [0-9]*) at \([0-9.]*\)$/\1/p' <<< "$out")
# rank 0's record is written right after its probe's line: its wall-clock time
tr=$(jq '.now + .realtime_minus_now' out/debug/flight-rank-0.json)
[ -n "$tk" ] || fail "rank 1's kill time"
echo "time from rank 1's death to rank 0's line and record: $(echo "$tr - $tk" | bc) s, to the job's exit: $(echo "$t1 - $tk" | bc) s (whole run $(echo "$t1 - $t0" | bc) s)"

# --- bad input: exit 2 with the path
"$SHARC_BIN/sharc" doctor nowhere 2> err.txt; [ $? -eq 2 ] && grep -q "doctor: 'nowhere' is not a directory" err.txt ||
  { out=$(cat err.txt); fail "doctor on a missing directory"; }
echo '{"rank": 0, "world' > out/debug/flight-rank-0.json
"$SHARC_BIN/sharc" doctor out 2> err.txt; [ $? -eq 2 ] && grep -q "flight-rank-0.json: not a flight record" err.txt ||
  { out=$(cat err.txt); fail "doctor on a truncated record"; }
echo ok
