#!/usr/bin/env bash
# timeout: 180
# The run directory keeps what the user had (docs/ARCHITECTURE.md, note
# [run-dir], [jsonl], [stale-tmp], [ckpt-leftovers]):
#  - a new run into an out_dir holding another run (its checkpoints, weights
#    or metrics) is refused with exit 2 and one line naming the directory and
#    the flags that continue it or start over, even a run that would then fail;
#    nothing in the directory changes (names, sizes, contents);
#  - --ckpt.resume=auto continues it (beside metrics alone, a run that crashed
#    before its first checkpoint, it starts again), --train.overwrite_output_dir=true
#    starts over;
#  - metrics.jsonl (and log.debug's files) keep the lines up to the resumed step
#    and get the later steps appended: each step exactly once, a line cut by a
#    crash dropped;
#  - a run that fails its start-up checks leaves out_dir exactly as it was;
#  - every kind of leftover a crash leaves is gone after the next run that
#    writes the directory, even one resumed at train.max_steps, which also
#    prunes to ckpt.keep; a save interrupted between its two renames is restored;
#  - a full disk on the metrics file (a 5 MB tmpfs) stops the run with an
#    error naming the file, and the file still ends with a whole line.
set -uo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.max_steps=6 --train.threads=1 --optim.warmup_steps=2 --ckpt.every=2"
die() { echo "FAIL: $*"; exit 1; }
snap() { (cd "$1" && find . -printf '%p %s\n' | sort && find . -type f | sort | xargs -r md5sum) | md5sum; }
steps() { jq -r 'select(has("loss_metrics/global_avg_loss")) | .step' "$1" | tr '\n' ' '; }
data_md5() { local hl; hl=$(od -An -tu8 -N8 "$1" | tr -d ' '); tail -c +$((hl + 9)) "$1" | md5sum; }
# expect DIR RC WANT ARGS...: exit status RC, one line holding WANT, DIR unchanged
expect() {
  local dir=$1 want_rc=$2 want=$3; shift 3
  local before err rc; before=$(snap "$dir")
  err=$("$S" train $M "$@" 2>&1 >/dev/null); rc=$?
  [ $rc -eq "$want_rc" ] || die "exit $rc, expected $want_rc for $*: $err"
  grep -qF -- "$want" <<< "$err" || die "message for $* was: $err; expected: $want"
  [ "$(grep -c 'error:' <<< "$err")" -eq 1 ] || die "expected one error line: $err"
  [ "$(snap "$dir")" = "$before" ] || die "$dir changed: $*"
}

"$S" train $M --train.out_dir=ref >/dev/null 2>&1 || die "reference run"
[ "$(steps ref/metrics.jsonl)" = "1 2 3 4 5 6 " ] || die "reference metrics: $(steps ref/metrics.jsonl)"

# --- another run's outputs are never replaced without a request
cp -r ref a
expect a 2 "train.out_dir 'a' holds another run and ckpt.resume is none (a new run); nothing was changed. To continue that run: --ckpt.resume=auto; to start over and delete it: --train.overwrite_output_dir=true; or choose another --train.out_dir. It holds: 2 checkpoints up to step 6 in a/checkpoints, a/model.safetensors, a/metrics.jsonl" \
  --train.out_dir=a
# a run that would then fail (non-finite from step 1) is refused before it starts
SHARC_TEST_NAN=0:1,2,3 expect a 2 "holds another run" --train.out_dir=a --model.init_std=0.5
# a run resuming from another directory's checkpoint would replace them too
expect a 2 "holds another run, and this run resumes from a checkpoint outside its ckpt.dir" \
  --train.out_dir=a --ckpt.resume=ref/checkpoints/step-00000004
# auto with nothing to continue from, beside another run's weights and metrics
mkdir c && cp ref/metrics.jsonl ref/model.safetensors c/
expect c 2 "holds another run, and ckpt.resume=auto found no checkpoint of it to continue from; nothing was changed. To start over" \
  --train.out_dir=c --ckpt.resume=auto
# auto beside metrics alone (a run that crashed before its first checkpoint) starts again
mkdir m && cp ref/metrics.jsonl m/ && echo '{"step": 9, "not": "a whole line' >> m/metrics.jsonl
"$S" train $M --train.out_dir=m --ckpt.resume=auto --train.max_steps=2 >/dev/null 2>&1 || die "auto beside metrics alone"
[ "$(steps m/metrics.jsonl)" = "1 2 " ] && [ "$(wc -l < m/metrics.jsonl)" -eq 2 ] || die "auto beside metrics: $(cat m/metrics.jsonl)"
echo "refused: another run's outputs"

# --- continuing: a finished run re-run with auto keeps its history and weights
out=$("$S" train $M --train.out_dir=a --ckpt.resume=auto 2>&1) || die "auto on a finished run: $out"
[ "$(steps a/metrics.jsonl)" = "1 2 3 4 5 6 " ] || die "auto on a finished run: metrics $(steps a/metrics.jsonl)"
cmp -s a/metrics.jsonl ref/metrics.jsonl || die "auto on a finished run rewrote the metrics"
[ "$(data_md5 a/model.safetensors)" = "$(data_md5 ref/model.safetensors)" ] || die "weights changed"
# --- starting over: the old checkpoints, weights and metrics go, at start
out=$("$S" train $M --train.out_dir=a --overwrite_output_dir --train.max_steps=3 --ckpt.every=0 2>&1) || die "overwrite: $out"
grep -q "warning: train.overwrite_output_dir: deleting the outputs of the run in a" <<< "$out" || die "no warning: $out"
[ "$(ls a/checkpoints)" = "$(printf 'latest\nstep-00000003')" ] || die "overwrite left: $(ls a/checkpoints)"
[ "$(steps a/metrics.jsonl)" = "1 2 3 " ] || die "overwrite: metrics $(steps a/metrics.jsonl)"
echo "continue and start over"

# --- metrics on resume: killed in the save of the last step (checkpoint 4
# published, lines 1-6 written), a line cut short by the crash on top
rm -rf k
SHARC_CKPT_KILL_AT=after-shards SHARC_CKPT_KILL_STEP=6 "$S" train $M --train.out_dir=k --log.debug=true >/dev/null 2>&1
[ $? -eq 86 ] || die "the kill hook did not fire"
[ "$(steps k/metrics.jsonl)" = "1 2 3 4 5 6 " ] || die "before the resume: $(steps k/metrics.jsonl)"
printf '{"step": 7, "loss_metrics/glob' >> k/metrics.jsonl
out=$("$S" train $M --train.out_dir=k --ckpt.resume=auto --log.debug=true 2>&1) || die "resume: $out"
grep -q "resumed from k/checkpoints/step-00000004 at step 4" <<< "$out" || die "resume: $out"
[ "$(steps k/metrics.jsonl)" = "1 2 3 4 5 6 " ] || die "after the resume: $(steps k/metrics.jsonl)"
[ "$(jq -r .step k/debug/rank-0.log | tr '\n' ' ')" = "1 2 3 4 5 6 " ] || die "debug log: $(jq -r .step k/debug/rank-0.log)"
jq -e . k/metrics.jsonl >/dev/null || die "k/metrics.jsonl is not JSON lines"
# the history before the resume point is the original's, byte for byte
cmp -s <(head -4 k/metrics.jsonl | jq -c '."loss_metrics/global_avg_loss"') \
       <(head -4 ref/metrics.jsonl | jq -c '."loss_metrics/global_avg_loss"') || die "lines 1-4 changed"
cmp -s <(jq -c '."loss_metrics/global_avg_loss"' k/metrics.jsonl) \
       <(jq -c '."loss_metrics/global_avg_loss"' ref/metrics.jsonl) || die "losses differ from the uninterrupted run"
echo "metrics: each step once after a crash and a resume"

# --- a run that fails at start leaves out_dir exactly as it was
touch a/debug
expect a 2 "log.debug: 'a/debug/rank-0.log' cannot be created: 'a/debug' is a file, not a directory" \
  --train.out_dir=a --ckpt.resume=auto --log.debug=true
rm a/debug
expect a 2 "train.metrics_path: 'a/config.yaml/m.jsonl' cannot be created: 'a/config.yaml' is a file, not a directory" \
  --train.out_dir=a --ckpt.resume=auto --train.metrics_path=a/config.yaml/m.jsonl
expect a 2 "train.metrics_path: 'a/checkpoints' is a directory; expected a file there" \
  --train.out_dir=a --ckpt.resume=auto --train.metrics_path=a/checkpoints
expect a 2 "ckpt.dir: 'a/metrics.jsonl' is a file; expected a directory" \
  --train.out_dir=a --ckpt.dir=a/metrics.jsonl
expect a 2 "train.out_dir: 'a/config.yaml/run' cannot be created: 'a/config.yaml' is a file, not a directory" \
  --train.out_dir=a/config.yaml/run
echo "failed starts changed nothing"

# --- leftovers of every kind go at the next run that writes the directory
"$S" train $M --train.out_dir=l --ckpt.keep=4 --ckpt.every=1 >/dev/null 2>&1 || die "keep 4"
[ "$(ls l/checkpoints | wc -l)" -eq 5 ] || die "keep=4: $(ls l/checkpoints)"
head -c 300000 /dev/zero > l/model.safetensors.tmp.4242
touch l/config.yaml.tmp.4242 l/metrics.jsonl.tmp.17 l/checkpoints/latest.tmp.99
mkdir l/checkpoints/step-00000008.tmp l/checkpoints/step-00000001.deleting
touch l/checkpoints/step-00000008.tmp/shard-00000-of-00001.bin.tmp.99 l/checkpoints/step-00000001.deleting/x
cp -r l/checkpoints/step-00000005 l/checkpoints/step-00000005.old # an interrupted re-save beside its original
out=$("$S" train $M --train.out_dir=l --ckpt.resume=auto --ckpt.keep=1 2>&1) || die "resume at max_steps: $out"
grep -q "resumed from l/checkpoints/step-00000006 at step 6" <<< "$out" || die "$out"
[ "$(cd l && find . | sort | tr '\n' ' ')" = ". ./checkpoints ./checkpoints/latest ./checkpoints/step-00000006 ./checkpoints/step-00000006/manifest.json ./checkpoints/step-00000006/shard-00000-of-00001.bin ./config.yaml ./metrics.jsonl ./model.safetensors " ] ||
  die "left behind: $(cd l && find . | sort | tr '\n' ' ')"
[ "$(steps l/metrics.jsonl)" = "1 2 3 4 5 6 " ] || die "metrics: $(steps l/metrics.jsonl)"
# a crash between the two renames of a re-save: step-N.old is the published copy
mv l/checkpoints/step-00000006 l/checkpoints/step-00000006.old
mkdir l/checkpoints/step-00000006.tmp
out=$("$S" train $M --train.out_dir=l --ckpt.resume=auto 2>&1) || die "restore: $out"
grep -q "ckpt: restored l/checkpoints/step-00000006 from l/checkpoints/step-00000006.old" <<< "$out" || die "$out"
grep -q "resumed from l/checkpoints/step-00000006 at step 6" <<< "$out" || die "$out"
[ "$(ls l/checkpoints | tr '\n' ' ')" = "latest step-00000006 " ] || die "restore left: $(ls l/checkpoints)"
echo "leftovers removed, pruned to ckpt.keep at a resume at max_steps"

# --- a full disk on the metrics file: an error naming it, whole lines only
mkdir -p full
if mount -t tmpfs -o size=5m tmpfs full 2>/dev/null; then
  trap 'umount full 2>/dev/null' EXIT
  avail=$(df -B1 --output=avail full | tail -1)
  head -c $((avail - 8192)) /dev/zero > full/filler 2>/dev/null
  err=$("$S" train $M --train.out_dir=f --train.metrics_path=full/m.jsonl --ckpt.every=0 2>&1 >/dev/null); rc=$?
  [ $rc -eq 1 ] || die "full disk: exit $rc: $err"
  grep -q "error: train: cannot write 'full/m.jsonl': No space left on device (the file ends with the line before this one); stopping at step [0-9]" <<< "$err" ||
    die "full disk: $err"
  [ -s full/m.jsonl ] && [ "$(tail -c 1 full/m.jsonl | od -An -c | tr -d ' ')" = '\n' ] || die "full disk: the file ends inside a line"
  n=$(wc -l < full/m.jsonl)
  [ "$n" -ge 1 ] && [ "$(steps full/m.jsonl)" = "$(seq -s ' ' 1 "$n") " ] || die "full disk: lines $(steps full/m.jsonl)"
  [ ! -e f/model.safetensors ] || die "full disk: the run saved weights"
  umount full; trap - EXIT
  echo "full disk: stopped with whole lines ($n)"
else
  echo "skipped the full-disk case: cannot mount a tmpfs here"
fi
echo ok
