#!/usr/bin/env bash
# timeout: 120
# A rank killed by the out-of-memory killer (note [rank-death]): 2 ranks on
# one host, rank 1 alone in a memory cgroup (v1 memory.limit_in_bytes, or
# v2 memory.max) of 120 MiB while the run's activations need ~200 MiB: the
# kernel kills it with SIGKILL during start-up, where sharc allocates (and
# zeroes) the planned activations, while rank 0 waits in the start-up
# agreement. The job ends (no hang, under timeout), mpirun names rank 1 and
# signal 9, rank 0 names rank 1 and this host as gone (note [liveness]) and
# says it was terminated while waiting at start-up, and the
# cgroup records the OOM kill. (A kill in mid-training takes the same path:
# mpi_flight.sh and hosts_death.sh, with SHARC_TEST_KILL.)
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a memory cgroup)"; exit 77; }
cg=
if [ -f /sys/fs/cgroup/memory/cgroup.procs ]; then
  cg=/sys/fs/cgroup/memory/sharc-oom-$$
  mkdir "$cg" && echo $((120 << 20)) > "$cg/memory.limit_in_bytes" || cg=
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  cg=/sys/fs/cgroup/sharc-oom-$$
  mkdir "$cg" && echo $((120 << 20)) > "$cg/memory.max" || cg=
fi
[ -n "$cg" ] || { echo "SKIP: no writable memory cgroup"; exit 77; }
trap 'for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -9 $p 2>/dev/null; done; rmdir "$cg" 2>/dev/null' EXIT
make_text text.txt
cat > rank.sh <<EOS
#!/bin/sh
[ "\$OMPI_COMM_WORLD_RANK" = 1 ] && echo \$\$ > "$cg/cgroup.procs"
exec "\$@"
EOS
chmod +x rank.sh
out=$(mpi 2 ./rank.sh "$SHARC_BIN/sharc" train --data.path=text.txt --model.num_layers=2 --model.embed_dim=128 \
      --model.num_heads=2 --train.seq_len=128 --train.batch_size=64 --train.max_steps=20 --train.threads=1 \
      --train.log_every=1 --train.timeout=60 --log.peak_tflops=1 --train.out_dir=run 2>&1); rc=$?
fail() { echo "FAIL: $1"; echo "$out" | tail -30; exit 1; }
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "expected a non-zero exit after rank 1 was killed, not $rc"
grep -q "process rank 1 with PID .* exited on signal 9" <<< "$out" || fail "mpirun should name rank 1 and signal 9"
grep -q "^\[rank 0\] terminated by signal 15 (SIGTERM) at step 0: waiting in all_reduce over 2 ranks (start-up)" <<< "$out" ||
  fail "rank 0 should say it was terminated while waiting at start-up"
grep -q "^\[rank 0\] rank 1 (host $(hostname), pid [0-9]*) is gone: its process no longer exists (this rank's host)$" <<< "$out" ||
  fail "rank 0 should name rank 1 and this host as gone (the liveness probe)"
if [ -f "$cg/memory.oom_control" ]; then
  grep -q '^oom_kill [1-9]' "$cg/memory.oom_control" || fail "the cgroup records no OOM kill: $(cat "$cg/memory.oom_control")"
elif [ -f "$cg/memory.events" ]; then
  grep -q '^oom_kill [1-9]' "$cg/memory.events" || fail "the cgroup records no OOM kill"
fi
echo "ok: rank 1 OOM-killed, the job ended with exit $rc"
