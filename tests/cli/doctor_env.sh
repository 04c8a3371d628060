#!/usr/bin/env bash
# timeout: 120
# sharc doctor --env (note [doctor-env]): run under mpirun like a training
# job, rank 0 prints a line per host and a line per problem. Checked against
# what the test itself arranges and knows: the host name and rank range
# (hostname), the CPUs (nproc), a second sharc binary (a copy with one byte
# appended, started through mpirun's MPMD syntax), more threads than CPUs
# (OMP_NUM_THREADS = 2 x nproc per rank), a clock 2.5 s off (the test hook
# SHARC_TEST_CLOCK_SKEW), and across two hosts (scripts/hosts.sh) ranks
# placed round-robin (--map-by node) instead of consecutively. A clean run
# exits 0, a run with a problem 1, bad options 2.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
S="$SHARC_BIN/sharc"
fail() { echo "FAIL: $1"; echo "$out"; exit 1; }
has() { grep -qE -- "$1" <<< "$out" || fail "missing /$1/"; }
h=$(hostname); n=$(nproc)

out=$(OMP_NUM_THREADS=1 mpi 2 -x OMP_NUM_THREADS "$S" doctor --env --bytes 1048576 2>&1); rc=$?
[ $rc -eq 0 ] || fail "a clean 2-rank run: exit $rc"
has "^doctor --env: 2 ranks on 1 host "
has "^$h +0-1 +$n +2 "
has "bus bandwidth: world [0-9.]+ GB/s, inside a host [0-9.]+ GB/s"
grep -q '^problem' <<< "$out" && fail "a clean run reported a problem"
has "^verdict: no problems found$"

cp "$S" sharc2 && printf x >> sharc2
out=$(OMP_NUM_THREADS=1 timeout 60 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS -n 1 "$S" doctor --env \
      --bytes 4096 : -n 1 ./sharc2 doctor --env --bytes 4096 2>&1); rc=$?
[ $rc -ne 0 ] || fail "two binaries: exit 0"
has "^problem: rank 1 on $h runs another sharc binary than rank 0 on $h \(crc32 [0-9a-f]{8}, $(stat -c %s sharc2) bytes vs [0-9a-f]{8}, $(stat -c %s "$S") bytes\)"
has "^verdict: 1 problem$"

out=$(OMP_NUM_THREADS=$((2 * n)) mpi 2 -x OMP_NUM_THREADS "$S" doctor --env --bytes 4096 2>&1); rc=$?
[ $rc -ne 0 ] || fail "oversubscribed: exit 0"
has "^problem: host $h runs $((4 * n)) threads on $n CPUs \(2 ranks\)"

out=$(OMP_NUM_THREADS=1 SHARC_TEST_CLOCK_SKEW=1:2.5 mpi 2 -x OMP_NUM_THREADS -x SHARC_TEST_CLOCK_SKEW "$S" doctor --env \
      --bytes 4096 2>&1); rc=$?
[ $rc -ne 0 ] || fail "a clock 2.5 s off: exit 0"
has "^clocks: largest offset from rank 0 \+2\.5[0-9]{2} s \(rank 1 on $h\)"
has "^problem: the clock of $h is \+2\.5[0-9]{2} s off"

out=$("$S" doctor --env --bytes 2>&1); rc=$?
[ $rc -eq 2 ] || fail "a missing value: exit $rc"
has "doctor --env: unknown or incomplete option '--bytes'"
out=$("$S" doctor --env --bytes 0 2>&1); rc=$?
[ $rc -eq 2 ] || fail "--bytes 0: exit $rc"

source "$SHARC_ROOT/scripts/hosts.sh"
if hosts_check; then
  hosts_up 2
  out=$(OMP_NUM_THREADS=1 HOSTS_TIMEOUT=60 hosts_mpirun 2 -n 4 --map-by node -x OMP_NUM_THREADS "$S" doctor --env \
        --bytes 65536 2>&1); rc=$?
  [ $rc -ne 0 ] || fail "round-robin ranks: exit 0"
  has "^doctor --env: 4 ranks on 2 hosts"
  has "^problem: the ranks of host node[01] are not consecutive"
  out=$(OMP_NUM_THREADS=1 HOSTS_TIMEOUT=60 hosts_mpirun 2 -n 4 -x OMP_NUM_THREADS "$S" doctor --env --bytes 65536 2>&1); rc=$?
  [ $rc -eq 0 ] || fail "2 hosts x 2 consecutive ranks: exit $rc"
  has "^node0 +0-1 "
  has "^node1 +2-3 "
  has "between hosts [0-9.]+ GB/s \(one rank per host\)"
else
  echo "hosts part skipped: $HOSTS_WHY"
fi
echo ok
