#!/usr/bin/env bash
# timeout: 120
# AdamW moments offloaded to a file (optim.offload_dir, note
# [optim-offload] in src/optim/adamw.c), against the same run in memory:
#  - at 1 and 2 ranks, 4 steps: every loss equal (metrics), and the
#    checkpoints at steps 2 and 4 (parameters and both moments) cmp-equal;
#  - ckpt.async with offload (the staged copy reads the file): cmp-equal;
#  - resume across the switch (in memory -> offload and back): the step-4
#    checkpoint cmp-equal to the uninterrupted run's;
#  - the measured optim peak is the buffer of the largest unit, and drops by
#    the moments' bytes minus it (the end-of-run plan/peak table);
#  - the file is gone after the run; a missing directory, a file and a disk
#    without room are refused with the key or the file named.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
S="$SHARC_BIN/sharc"
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.threads=1 --optim.warmup_steps=2 --ckpt.every=2
   --train.max_steps=4 --train.log_every=1"
mkdir -p spill
losses() { grep -o '"loss_metrics/global_avg_loss": *[-0-9.e+]*' "$1/metrics.jsonl"; }
optim_peak() { grep -o '"memory/optim_peak(GiB)": *[0-9.e+-]*' "$1/metrics.jsonl" | tail -1 | awk '{ print $2 }'; }
same_ckpt() { # A B step
  local n=0
  for f in "$1"/checkpoints/step-0000000$3/*.bin; do
    cmp "$f" "$2/checkpoints/step-0000000$3/$(basename "$f")"; n=$((n + 1))
  done
  [ $n -gt 0 ] || { echo "no shard files in $1 step $3"; exit 1; }
}
for n in 1 2; do
  mpi $n "$S" train $M --train.out_dir=ref$n >ref$n.log 2>&1 || { cat ref$n.log; exit 1; }
  mpi $n "$S" train $M --train.out_dir=off$n --optim.offload_dir=spill >off$n.log 2>&1 || { cat off$n.log; exit 1; }
  [ "$(losses ref$n)" = "$(losses off$n)" ] && [ "$(losses ref$n | wc -l)" -ge 4 ] ||
    { echo "losses differ at $n ranks"; paste <(losses ref$n) <(losses off$n); exit 1; }
  same_ckpt ref$n off$n 2
  same_ckpt ref$n off$n 4
  # the measured optim peak (metrics): with offload the plan's buffer of one
  # unit (peak/plan 1.000 in the end-of-run table), below the moments' bytes
  ro=$(optim_peak ref$n); oo=$(optim_peak off$n)
  awk -v r="$ro" -v o="$oo" 'BEGIN { exit !(o > 0 && o < r) }' &&
    awk '$1 == "optim" && NF == 4 { ok = $4 == "1.000" } END { exit !ok }' off$n.log ||
    { echo "optim peak with offload $oo GiB, without $ro GiB at $n ranks"; cat off$n.log; exit 1; }
  grep -q "optim.offload_dir spill: the AdamW moments on disk" off$n.log || { cat off$n.log; exit 1; }
done
[ -z "$(ls -A spill)" ] || { echo "files left in the offload directory: $(ls spill)"; exit 1; }
echo "offload at 1 and 2 ranks: losses and checkpoints identical; optim peak $oo GiB vs $ro GiB"

mpi 2 "$S" train $M --train.out_dir=async --optim.offload_dir=spill --ckpt.async=true >async.log 2>&1 ||
  { cat async.log; exit 1; }
same_ckpt ref2 async 2
same_ckpt ref2 async 4
# resume across the switch, from the other run's step-2 checkpoint
mpi 2 "$S" train $M --train.out_dir=on_off --ckpt.resume=off2/checkpoints/step-00000002 >r1.log 2>&1 ||
  { cat r1.log; exit 1; }
mpi 2 "$S" train $M --train.out_dir=off_on --optim.offload_dir=spill \
  --ckpt.resume=ref2/checkpoints/step-00000002 >r2.log 2>&1 || { cat r2.log; exit 1; }
same_ckpt ref2 on_off 4
same_ckpt ref2 off_on 4
echo "async save and resume across the switch identical"

refuse() { # want-rc pattern args...
  local want=$1 pat=$2 rc; shift 2
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [ $rc -eq "$want" ] && grep -q "$pat" <<< "$out" || { echo "exit $rc, expected $want and '$pat': $out"; exit 1; }
}
refuse 2 "optim.offload_dir: 'nodir': No such file or directory" "$S" train $M --train.out_dir=bad1 --optim.offload_dir=nodir
refuse 2 "optim.offload_dir: 'text.txt' is not a directory" "$S" train $M --train.out_dir=bad2 --offload.dir=text.txt
# a disk without room for the moments (a file-size limit: fallocate fails
# with EFBIG once SIGXFSZ is ignored): refused at start, the file named
refuse 1 "cannot reserve [0-9]* bytes for the AdamW moments in 'spill/sharc-moments-" \
  bash -c "trap '' XFSZ; ulimit -f 64; exec $S train ${M//$'\n'/ } --train.out_dir=bad3 --optim.offload_dir=spill"
[ -z "$(ls -A spill)" ] || { echo "files left in the offload directory: $(ls spill)"; exit 1; }
echo "bad directories and a full disk refused"
