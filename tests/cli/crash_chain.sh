#!/usr/bin/env bash
# timeout: 300
# Crashes at any moment, then resumes (docs/ARCHITECTURE.md, "Checkpoints",
# note [run-dir]): after every chain of crashes and `--ckpt.resume=auto`
# runs, the run ends bit for bit where an uninterrupted one ends, no
# leftover of any kind survives (only config.yaml, metrics.jsonl,
# model.safetensors, checkpoints/latest and at most ckpt.keep step-N
# directories of manifest.json and shard files), and metrics.jsonl holds
# every step exactly once.
#  - SIGKILL injected by strace at every rename, unlink, rmdir, fsync and
#    mkdir (and every 25th write) of a run resumed from a crash mid-save;
#  - kill -9 at random moments, one process (sync and ckpt.async saves), and
#    2 ranks (a whole job, or one rank of it).
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
make_text text.txt
die() { echo "FAIL: $*"; exit 1; }
data_md5() { local hl; hl=$(od -An -tu8 -N8 "$1" | tr -d ' '); tail -c +$((hl + 9)) "$1" | md5sum; }
steps() { jq -r 'select(has("loss_metrics/global_avg_loss")) | .step' "$1" | tr '\n' ' '; }
# check DIR REF N: the finished run in DIR is REF's, with nothing else in it
check() {
  local dir=$1 ref=$2 n=$3 left f
  left=$(cd "$dir" && find . | sort | grep -vxE '\.|\./(config\.yaml|metrics\.jsonl|model\.safetensors|checkpoints|checkpoints/latest)|\./checkpoints/step-[0-9]{8}(/(manifest\.json|shard-[0-9]{5}-of-[0-9]{5}\.bin))?')
  [ -z "$left" ] || die "$dir: left behind: $left"
  [ "$(ls -d "$dir"/checkpoints/step-* | wc -l)" -le 2 ] || die "$dir: more than ckpt.keep: $(ls "$dir/checkpoints")"
  [ "$(steps "$dir/metrics.jsonl")" = "$(seq -s ' ' 1 "$n") " ] || die "$dir: metrics steps $(steps "$dir/metrics.jsonl")"
  [ "$(data_md5 "$dir/model.safetensors")" = "$(data_md5 "$ref/model.safetensors")" ] || die "$dir: final weights differ"
  for f in "$ref"/checkpoints/step-*/*.bin; do
    cmp -s "$f" "$dir/checkpoints/$(basename "$(dirname "$f")")/$(basename "$f")" || die "$dir: $f differs"
  done
}

# --- strace: SIGKILL at each file-system call of a resumed run
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.max_steps=8 --train.threads=1 --optim.warmup_steps=2
   --ckpt.every=2 --log.peak_tflops=1"
"$S" train $M --train.out_dir=ref >/dev/null 2>&1 || die "reference run"
SHARC_CKPT_KILL_AT=after-shards SHARC_CKPT_KILL_STEP=6 "$S" train $M --train.out_dir=mid >/dev/null 2>&1
[ $? -eq 86 ] || die "mid: the kill hook did not fire"
if command -v strace >/dev/null && strace -f -qq -o /dev/null -e trace=getpid true 2>/dev/null; then
  rm -rf w && cp -a mid w
  strace -f -qq -c -o counts.txt -e trace=rename,unlink,rmdir,fsync,mkdir,write \
    "$S" train $M --train.out_dir=w --ckpt.resume=auto >/dev/null 2>&1 || die "counting calls"
  crash_point() { # SC K: SIGKILL at the K-th SC call of a resume of mid, then resume again
    local w=w-$1-$2 out
    rm -rf "$w" && cp -a mid "$w"
    { strace -f -qq -o /dev/null -e trace=$1 -e inject=$1:signal=KILL:when=$2 \
        "$S" train $M --train.out_dir="$w" --ckpt.resume=auto >/dev/null 2>&1; } 2>/dev/null # no "Killed" line
    out=$("$S" train $M --train.out_dir="$w" --ckpt.resume=auto 2>&1) || die "$1 #$2: the resume failed: $out"
    check "$w" ref 8
    rm -rf "$w"
    : > "ok-$1-$2" # counted below: a point that ended any other way fails the test
  }
  points=0
  for sc in rename unlink rmdir fsync mkdir write; do
    calls=$(awk -v s=$sc '$NF == s { print $4 }' counts.txt); calls=${calls:-0}
    [ "$calls" -gt 0 ] || continue
    stride=1; [ $sc = write ] && stride=25 # writes: the metrics lines, shard and manifest data, console
    for ((k = 1; k <= calls; k += stride)); do
      # two crash points at a time (each run is one thread), each in its own copy
      [ "$(jobs -rp | wc -l)" -lt 2 ] || wait -n || die "a crash point failed"
      crash_point $sc $k &
      points=$((points + 1))
    done
  done
  wait
  [ "$(ls ok-* 2>/dev/null | wc -l)" -eq $points ] || die "$(ls ok-* 2>/dev/null | wc -l) of $points crash points passed"
  [ $points -ge 45 ] || die "only $points crash points: $(cat counts.txt)"
  echo "SIGKILL at $points file-system calls: each resumed to the reference, nothing left behind"
else
  echo "skipped the strace crash points: strace cannot trace here"
fi

# --- kill -9 at random moments (reproducible delays), then resume
B="--data.path=text.txt --model.num_layers=2 --model.embed_dim=96 --model.num_heads=3 --model.max_seq_len=64
   --train.seq_len=64 --train.batch_size=4 --train.max_steps=30 --train.threads=1 --optim.warmup_steps=2
   --ckpt.every=3 --log.peak_tflops=1"
"$S" train $B --train.out_dir=refb >/dev/null 2>&1 || die "reference run (kill -9)"
# the delays, drawn in order from one seed (reproducible): 6 + 6 ms in [0, 1200) for the
# single-process chains, 4 in [800, 3000) for the 2-rank one
RANDOM=9 d1=() d2=()
for i in $(seq 1 12); do d1+=($((RANDOM % 1200))); done
for i in $(seq 1 4); do d2+=($((800 + RANDOM % 2200))); done
ms() { echo "$(($1 / 1000)).$(printf %03d $(($1 % 1000)))"; }
kill_chain() { # sync|async FIRST-DELAY: 6 kills of one process, then the last resume
  local mode=$1 first=$2 dir=kb-$1 i pid out
  for i in $(seq 0 5); do
    "$S" train $B --train.out_dir=$dir --ckpt.resume=auto --ckpt.async=$([ $mode = async ] && echo true || echo false) \
      >/dev/null 2>&1 &
    pid=$!
    sleep "$(ms "${d1[$((first + i))]}")"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
  done
  out=$("$S" train $B --train.out_dir=$dir --ckpt.resume=auto 2>&1) || die "$mode: the last resume failed: $out"
  check $dir refb 30
  echo "kill -9 x 6 ($mode saves): resumed to the reference, nothing left behind"
}
# the two chains at once (one thread each), each one's lines after both end
kill_chain sync 0 > chain-sync.log 2>&1 &
p1=$!
kill_chain async 6 > chain-async.log 2>&1
r2=$?
wait $p1; r1=$?
cat chain-sync.log chain-async.log
[ $r1 = 0 ] && [ $r2 = 0 ] || exit 1

# 2 ranks: kill -9 the whole job or one of its ranks
mpi 2 "$S" train $B --train.out_dir=ref2 >/dev/null 2>&1 || die "2-rank reference run"
rm -rf k2
for i in $(seq 1 4); do
  timeout 60 mpirun --oversubscribe --bind-to none -n 2 "$S" train $B --train.out_dir=k2 --ckpt.resume=auto >/dev/null 2>&1 &
  pid=$!
  sleep "$(ms "${d2[$((i - 1))]}")"
  ranks=$(pgrep -P "$(pgrep -P $pid | head -1)" 2>/dev/null | tr '\n' ' ')
  if [ $((i % 2)) -eq 0 ]; then victims=$ranks; else victims=$(echo $ranks | cut -d' ' -f1); fi
  [ -n "$victims" ] && kill -9 $victims 2>/dev/null
  wait $pid 2>/dev/null
done
out=$(mpi 2 "$S" train $B --train.out_dir=k2 --ckpt.resume=auto 2>&1) || die "2 ranks: the last resume failed: $out"
check k2 ref2 30
echo "2 ranks, kill -9 x 4 (whole job or one rank): resumed to the reference, nothing left behind"
echo ok
