#!/usr/bin/env bash
# timeout: 60
# SHARC_PROFILE_TRACE's timeline (note [trace] in docs/ARCHITECTURE.md), a
# tiny GPT-2, 3 steps, the default window (steps 2..3); each rank file is
# checked by tests/cli/trace_check.py against the run's metrics.jsonl: every
# event a complete (X) event with ts, dur >= 0 (or a track name), compute,
# comm and host tracks, a "step N" event per step of the window, one
# all_gather per gather the metrics count (fsdp/gathers), one reduce_scatter
# per unit and step, compute events nested in the ones open around them,
# and each unit's all-gather ending before the compute stream's first use of
# the unit after it:
#  - CPU, 2 ranks through MPI (SHARC_COMM_SHM=0: the collectives, not the
#    shared window): the host clock, PATH.rank0 / PATH.rank1;
#  - CUDA simulator, 2 ranks over the fake NCCL (bf16: gathers and
#    reductions on the comm stream, device events against one start event;
#    the simulator's stamps keep the order, not the durations);
#  - 1 rank: the file at PATH itself, a checkpoint save inside the window on
#    the host track;
#  - a bad window and an unwritable path: exit 2 naming the variable.
set -uo pipefail
CHECK="$SHARC_ROOT/tests/cli/trace_check.py"
cd "$TMPDIR" || exit 1
# under make asan: no leak check of the 2-rank runs (Open MPI leaks at
# finalize, see mpi_lib.inc); the 1-rank runs keep it
NOLEAK="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
die() { echo "FAIL: $*"; exit 1; }
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
T="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=16
   --train.seq_len=16 --train.threads=1 --optim.warmup_steps=2 --train.max_steps=3 --ckpt.every=0"
ASAN_OPTIONS=$NOLEAK SHARC_COMM_SHM=0 SHARC_PROFILE_TRACE=$PWD/cpu.json timeout 60 mpirun --allow-run-as-root --oversubscribe -n 2 \
  -x SHARC_COMM_SHM -x SHARC_PROFILE_TRACE "$SHARC_BIN/sharc" train $T --train.batch_size=2 --train.out_dir=c2 \
  > c2.log 2>&1 || { tail -20 c2.log; die "CPU, 2 ranks"; }
[ ! -e cpu.json ] || die "2 ranks wrote cpu.json (want cpu.rank<r>.json)"
for r in 0 1; do python3 "$CHECK" cpu.rank$r.json c2/metrics.jsonl $r 2 3 1 || exit 1; done
grep -q "trace of steps 2-3 written to .*cpu.rank0.json" c2.log || die "no 'trace written' line"

# 1 rank: PATH itself; a checkpoint after step 2 lands on the host track
SHARC_PROFILE_TRACE=$PWD/one.json timeout 60 "$SHARC_BIN/sharc" train $T --train.batch_size=2 --train.out_dir=o1 \
  --ckpt.every=2 > o1.log 2>&1 || { tail -20 o1.log; die "CPU, 1 rank"; }
python3 - one.json <<'PY' || exit 1
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
saves = [e for e in ev if e.get("tid") == 2 and e["name"] == "checkpoint save"]
steps = [e["name"] for e in ev if e.get("cat") == "step"]
if len(saves) != 1 or steps != ["step 2", "step 3"]:
    sys.exit(f"FAIL: one.json: {len(saves)} checkpoint saves, steps {steps}")
PY

# bad input: exit 2, one line naming the variable
for bad in "SHARC_PROFILE_TRACE_STEPS=3:1" "SHARC_PROFILE_TRACE_STEPS=x" "SHARC_PROFILE_TRACE=/nonexistent/dir/t.json"; do
  env SHARC_PROFILE_TRACE=$PWD/bad.json "$bad" timeout 30 "$SHARC_BIN/sharc" train $T --train.batch_size=2 \
    --train.out_dir=bad > bad.log 2>&1
  rc=$?
  [ $rc = 2 ] && grep -q "${bad%%=*}" bad.log || { cat bad.log; die "$bad: exit $rc, want 2 and a message naming it"; }
done

SIM="$SHARC_BIN/sim/sharc" FAKE="$SHARC_BIN/libfake_nccl.so"
if [ ! -x "$SIM" ] || [ ! -f "$FAKE" ]; then
  echo "trace: CPU checked; no simulator or fake NCCL: the cuda part skipped"
  exit 0
fi
export SHARC_CUBLASLT_LIB="$SHARC_BIN/sim/libcudasim_cublaslt.so"
ASAN_OPTIONS=$NOLEAK SHARC_PROFILE_TRACE=$PWD/sim.json SHARC_COMM=nccl SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE" \
  timeout 100 mpirun --allow-run-as-root --oversubscribe -n 2 -x SHARC_PROFILE_TRACE -x SHARC_COMM -x SHARC_NCCL_LIB \
  -x SHARC_CUDA_DRIVER_LIB -x SHARC_CUBLASLT_LIB "$SIM" train $T --train.device=cuda --fsdp.param_dtype=bf16 \
  --train.batch_size=2 --train.out_dir=s2 > s2.log 2>&1 || { tail -20 s2.log; die "cuda simulator, 2 ranks"; }
for r in 0 1; do python3 "$CHECK" sim.rank$r.json s2/metrics.jsonl $r 2 3 1 || exit 1; done
grep -q '"times":"device events' sim.rank0.json || die "sim trace not timed by device events"
echo "trace: CPU (2 ranks, 1 rank) and the cuda simulator (2 ranks over NCCL) timelines check out"
exit 0
