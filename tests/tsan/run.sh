#!/usr/bin/env bash
# run.sh: sharc's threaded paths under ThreadSanitizer (`make tsan`, note
# [sanitizers] in docs/ARCHITECTURE.md). Not in the suite (a TSan build of
# everything takes minutes): tests/tsan/run.sh BUILD, BUILD built with
# SAN=-fsanitize=thread. One process each (Open MPI's own threads under TSan
# are noise, not sharc's; one 2-rank pair, tests/tsan/suppressions.txt
# naming what Open MPI reports) and train.threads=1 (Debian's libgomp is not built
# for TSan: its barriers are invisible to it, so every parallel region after
# the first reports races that are not there); every run checked against a
# reference run of the same build, and any ThreadSanitizer report fails it:
#  - the unit tests of the threaded code (liveness, device events, prof);
#  - CPU, 6 steps, the watchdog's thread running (train.timeout): ckpt.async
#    (the writer thread) gives the same checkpoint files as a synchronous
#    save, with SHARC_PROFILE_TRACE's timeline written around it, and with
#    the moments offloaded to a file (optim.offload_dir, io_uring); at 2
#    ranks (the liveness tables set while the watchdog's thread watches,
#    note [liveness]) ckpt.async against a synchronous save;
#  - the watchdog firing on a hung step (SHARC_TEST_HANG): exit 3, its line;
#  - the CUDA simulator (when built), fsdp.cpu_offload's optimizer thread
#    (note [offload-overlap], slowed by the test hook so gathers wait for it)
#    with ckpt.async, its moments in memory and in a file (optim.offload_dir,
#    streamed by that thread: note [optim-offload-overlap]): losses and the
#    step-2 checkpoint equal, bit for bit, to the same run with
#    SHARC_OFFLOAD_OVERLAP=0; an update failing on the
#    thread ends the run with its one line, exit 1.
set -uo pipefail
B=$(cd "${1:?usage: tests/tsan/run.sh BUILD_DIR}" && pwd)
S="$B/sharc"
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 1
# exitcode 66 on a report; the simulator's 4 TiB device arena does not fit
# in TSan's address-space layout: 64 GiB of it does (tests/cudasim/cudasim.cpp)
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}halt_on_error=1:exitcode=66:suppressions=$HERE/suppressions.txt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_base_warn_component_unused=0
export CUDASIM_ARENA=$((1 << 36))
die() { echo "FAIL: $*"; exit 1; }
clean() { # LOG: no ThreadSanitizer report in it
  ! grep -q "ThreadSanitizer" "$1" || { sed -n '/WARNING: ThreadSanitizer/,/^SUMMARY/p' "$1" | head -80; die "$1"; }
}
run() { # NAME command...: exit 0, no report
  local name=$1; shift
  "$@" > "$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { tail -30 "$name.log"; die "$name: exit $rc"; }
  clean "$name.log"
}
same_ckpt() { # A B step
  local n=0 d f; d=$(printf 'step-%08d' "$3")
  for f in "$1"/checkpoints/$d/*; do
    cmp -s "$f" "$2/checkpoints/$d/$(basename "$f")" || [ "$(basename "$f")" = manifest.json ] ||
      die "$1 and $2: $d/$(basename "$f") differ"
    n=$((n + 1))
  done
  [ $n -gt 0 ] || die "no checkpoint files in $1 step $3"
}
losses() { grep -o '"loss_metrics/global_avg_loss": *[-0-9.e+]*' "$1/metrics.jsonl"; }

"$B/sharc_tests" --bin "$B" --filter liveness > unit1.log 2>&1 || { cat unit1.log; die "unit tests (liveness)"; }
"$B/sharc_tests" --bin "$B" --filter device_ > unit2.log 2>&1 || { cat unit2.log; die "unit tests (device)"; }
"$B/sharc_tests" --bin "$B" --filter prof_ > unit3.log 2>&1 || { cat unit3.log; die "unit tests (prof)"; }
echo "tsan: unit tests of the threaded code pass"

for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.threads=1 --optim.warmup_steps=2 --ckpt.every=3
   --train.max_steps=6 --train.log_every=1 --train.timeout=60"
# shellcheck disable=SC2086 # $M is a list of flags
{
  run sync "$S" train $M --train.out_dir=sync
  SHARC_PROFILE_TRACE=$W/t.json run async "$S" train $M --train.out_dir=async --ckpt.async=true
  [ -s t.json ] || die "no trace written"
  mkdir -p spill
  run spill "$S" train $M --train.out_dir=spill_async --ckpt.async=true --optim.offload_dir=spill \
    --optim.offload_sub_group_size=3000
}
for d in async spill_async; do
  [ "$(losses sync)" = "$(losses $d)" ] && [ "$(losses sync | wc -l)" -eq 6 ] || die "losses: sync vs $d"
  same_ckpt sync $d 3
  same_ckpt sync $d 6
done
if command -v mpirun > /dev/null; then
  mpi2() { timeout 200 mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 -x TSAN_OPTIONS "$@"; }
  # shellcheck disable=SC2086
  {
    run sync2 mpi2 "$S" train $M --train.out_dir=sync2
    run async2 mpi2 "$S" train $M --train.out_dir=async2 --ckpt.async=true
  }
  [ "$(losses sync2)" = "$(losses async2)" ] && [ "$(losses sync2 | wc -l)" -eq 6 ] || die "losses: 2 ranks"
  same_ckpt sync2 async2 3
  same_ckpt sync2 async2 6
fi
echo "tsan: ckpt.async (in memory, offloaded moments, 2 ranks) = synchronous save; watchdog, trace: no reports"

# shellcheck disable=SC2086
SHARC_TEST_HANG=0:2 timeout 60 "$S" train $M --train.out_dir=hang --train.timeout=2 > hang.log 2>&1
rc=$?
clean hang.log
[ $rc -eq 3 ] && grep -q "watchdog: no progress for 2 s" hang.log || { tail hang.log; die "watchdog: exit $rc"; }
echo "tsan: the watchdog fires (exit 3) with no report"

if [ ! -x "$B/sim/sharc" ]; then
  echo "tsan: no $B/sim/sharc: the simulator's part skipped"
  exit 0
fi
export SHARC_CUBLASLT_LIB="$B/sim/libcudasim_cublaslt.so"
G="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=16
   --train.seq_len=16 --train.batch_size=4 --train.max_steps=3 --train.threads=1 --optim.warmup_steps=2
   --ckpt.every=2 --train.device=cuda --fsdp.cpu_offload=true --train.timeout=60"
# shellcheck disable=SC2086
{
  SHARC_TEST_OFFLOAD_SLOW=20 run ovl "$B/sim/sharc" train $G --train.out_dir=ovl --ckpt.async=true
  SHARC_OFFLOAD_OVERLAP=0 run ovl0 "$B/sim/sharc" train $G --train.out_dir=ovl0
  mkdir -p spillg
  SHARC_TEST_OFFLOAD_SLOW=20 run ovld "$B/sim/sharc" train $G --train.out_dir=ovld --ckpt.async=true \
    --optim.offload_dir=spillg --optim.offload_sub_group_size=1024
  SHARC_TEST_OFFLOAD_UPDATE_FAIL=0:1 "$B/sim/sharc" train $G --train.out_dir=fail --ckpt.every=0 > fail.log 2>&1
}
rc=$?
clean fail.log
[ $rc -eq 1 ] && [ "$(grep -c '^error: fsdp.cpu_offload: the AdamW update of unit' fail.log)" -eq 1 ] ||
  { tail fail.log; die "a failed update on the optimizer's thread: exit $rc"; }
[ "$(losses ovl)" = "$(losses ovl0)" ] && [ "$(losses ovl | wc -l)" -eq 3 ] || die "losses: overlap on vs off"
same_ckpt ovl ovl0 2
[ "$(losses ovld)" = "$(losses ovl0)" ] || die "losses: offload_dir's moments streamed on the thread vs no overlap"
same_ckpt ovld ovl0 2
echo "tsan: cpu_offload's optimizer thread on the simulator (moments in memory, and in a file: note"
echo "  [optim-offload-overlap]) = no overlap, bit for bit; a failed update: its line"
