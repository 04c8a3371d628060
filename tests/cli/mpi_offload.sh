#!/usr/bin/env bash
# timeout: 150
# AdamW moments offloaded to a file (optim.offload_dir, note
# [optim-offload] in src/optim/adamw.c), against the same run in memory:
#  - at 1 and 2 ranks, 20 steps with chunks of 3072 parameters (smaller
#    than every unit's shard, not aligned to its parameters), io_uring with
#    read-ahead: every loss equal (metrics), the checkpoints at steps 10
#    and 20 (parameters and both moments) cmp-equal; at 2 ranks the same
#    with SHARC_AIO=pread and no read-ahead;
#  - the measured optim peak is the plan (peak/plan 1.000) and is the three
#    chunk buffers, 3 x 2 x 4 x 3072 bytes, below the moments' bytes;
#  - telemetry: every step reads and writes the whole file once
#    (offload/read_bytes = write_bytes, the same every step, 0 in memory),
#    with offload/read_GBps and offload/wait(s) present;
#  - ckpt.async with offload (the staged copy reads the file): cmp-equal;
#  - resume across the switch (in memory -> offload and back): the step-20
#    checkpoint cmp-equal to the uninterrupted run's;
#  (1-rank runs go without mpirun: the same process, a quicker start)
#  - faults: a byte flipped in the file after a write is an error naming the
#    file, unit and chunk, nothing saved after it, and auto-resume from the
#    last checkpoint ends cmp-equal; a file truncated behind the run's back
#    is an error naming it, unit and chunk; a rank SIGKILLed amid the
#    step's writes, then auto-resume, ends cmp-equal;
#  - the file is gone after every run; a missing directory, a file, a disk
#    without room and a bad SHARC_AIO are refused with the key or the file named.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
S="$SHARC_BIN/sharc"
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.threads=1 --optim.warmup_steps=2 --ckpt.every=10
   --train.max_steps=20 --train.log_every=1 --log.peak_tflops=1"
CH="--optim.offload_dir=spill --optim.offload_sub_group_size=3000"
mkdir -p spill
losses() { grep -o '"loss_metrics/global_avg_loss": *[-0-9.e+]*' "$1/metrics.jsonl"; }
optim_peak() { grep -o '"memory/optim_peak(GiB)": *[0-9.e+-]*' "$1/metrics.jsonl" | tail -1 | awk '{ print $2 }'; }
field() { jq -r ".\"$2\"" "$1/metrics.jsonl"; } # one line per step
same_ckpt() { # A B step
  local n=0 d; d=$(printf 'step-%08d' "$3")
  for f in "$1"/checkpoints/$d/*.bin; do
    cmp "$f" "$2/checkpoints/$d/$(basename "$f")"; n=$((n + 1))
  done
  [ $n -gt 0 ] || { echo "no shard files in $1 step $3"; exit 1; }
}
same_run() { # REF RUN n
  [ "$(losses "$1")" = "$(losses "$2")" ] && [ "$(losses "$1" | wc -l)" -eq 20 ] ||
    { echo "losses differ: $1 $2 at $3 ranks"; paste <(losses "$1") <(losses "$2"); exit 1; }
  same_ckpt "$1" "$2" 10
  same_ckpt "$1" "$2" 20
}
run() { if [ "$1" = 1 ]; then shift; "$@"; else mpi "$@"; fi; } # N command...
for n in 1 2; do
  run $n "$S" train $M --train.out_dir=ref$n >ref$n.log 2>&1 || { cat ref$n.log; exit 1; }
  SHARC_AIO=uring run $n "$S" train $M --train.out_dir=off$n $CH >off$n.log 2>&1 || { cat off$n.log; exit 1; }
  grep -q "chunks of 3072 parameters, 3 buffers, I/O by uring" off$n.log || { cat off$n.log; exit 1; }
  same_run ref$n off$n $n
  # the measured optim peak (metrics, GiB to 6 places: +-537 bytes): the
  # plan's three chunk buffers (peak/plan 1.000 in the end-of-run table),
  # below the moments' bytes
  ro=$(optim_peak ref$n); oo=$(optim_peak off$n)
  awk -v r="$ro" -v o="$oo" 'BEGIN { d = o * 2^30 - 73728; exit !(d < 600 && d > -600 && o < r) }' &&
    awk '$1 == "optim" && NF == 4 { ok = $4 == "1.000" } END { exit !ok }' off$n.log ||
    { echo "optim peak with offload $oo GiB (expected 73728 bytes), without $ro GiB at $n ranks"; cat off$n.log; exit 1; }
  grep -q "optim.offload_dir spill: the AdamW moments on disk" off$n.log || { cat off$n.log; exit 1; }
  # telemetry: the whole file read and written once per step
  rb=$(field off$n offload/read_bytes | sort -u); wb=$(field off$n offload/write_bytes | sort -u)
  [ "$(wc -l <<< "$rb")" -eq 1 ] && [ "$rb" = "$wb" ] && [ "$rb" -gt 0 ] &&
    [ "$(field ref$n offload/read_bytes | sort -u)" = 0 ] &&
    field off$n offload/read_GBps | awk '$1 > 0 { k++ } END { exit k != 20 }' &&
    field off$n 'offload/wait(s)' | awk '$1 >= 0 { k++ } END { exit k != 20 }' ||
    { echo "offload telemetry at $n ranks: read $rb write $wb"; head -2 off$n/metrics.jsonl; exit 1; }
done
[ -z "$(ls -A spill)" ] || { echo "files left in the offload directory: $(ls spill)"; exit 1; }
# pread without read-ahead, and ckpt.async (its staged copy read from the file)
SHARC_AIO=pread mpi 2 "$S" train $M --train.out_dir=pread $CH --optim.offload_pipeline=false --ckpt.async=true \
  >pread.log 2>&1 || { cat pread.log; exit 1; }
grep -q "chunks of 3072 parameters, 1 buffer, I/O by pread" pread.log || { cat pread.log; exit 1; }
same_run ref2 pread 2
echo "offload at 1 and 2 ranks (uring, read-ahead; pread, none, async save): losses and checkpoints identical;" \
  "optim peak $oo GiB vs $ro GiB; $rb bytes read and written per step"
# resume in memory -> offload, from the other run's step-10 checkpoint
# (offload -> in memory: the resume after the corrupted chunk below)
mpi 2 "$S" train $M --train.out_dir=off_on $CH --ckpt.resume=ref2/checkpoints/step-00000010 >r2.log 2>&1 ||
  { cat r2.log; exit 1; }
same_ckpt ref2 off_on 20

# a disk that returns other bytes: rank 1's file gets a byte flipped after
# each write of step 13; step 14 reads it back and stops the job with the
# file, unit and chunk named; no checkpoint after step 10, and auto-resume
# from it, in memory, ends as the uninterrupted run did
set +e
SHARC_TEST_OFFLOAD_CORRUPT=1:13 mpi 2 "$S" train $M --train.out_dir=bad $CH >bad.log 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "optim.offload_dir: 'spill/sharc-moments-[A-Za-z0-9]*': the moments of unit [0-9]* chunk 0 .* read back with crc32 [0-9a-f]*, written with" bad.log ||
  { echo "corrupted chunk: exit $rc"; cat bad.log; exit 1; }
[ "$(cat bad/checkpoints/latest)" = step-00000010 ] && [ "$(ls bad/checkpoints | grep -c step-)" -eq 1 ] ||
  { echo "corrupted chunk: checkpoints $(ls bad/checkpoints)"; exit 1; }
mpi 2 "$S" train $M --train.out_dir=bad --ckpt.resume=auto >bad2.log 2>&1 || { cat bad2.log; exit 1; }
grep -q "resumed from bad/checkpoints/step-00000010 at step 10" bad2.log || { cat bad2.log; exit 1; }
same_ckpt ref2 bad 20
# the file truncated behind the run's back (1 rank): the next read names it
set +e
out=$(SHARC_TEST_OFFLOAD_TRUNCATE=0:3 "$S" train ${M//$'\n'/ } --train.max_steps=5 --train.out_dir=trunc $CH 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "cannot read the moments of unit [0-9]* chunk [0-9]* from 'spill/sharc-moments-[A-Za-z0-9]*': the file ends before them" <<< "$out" ||
  { echo "truncated file: exit $rc: $out"; exit 1; }
# kill -9 in the middle of the moments' writes (rank 1, step 13), then auto-resume
set +e
SHARC_TEST_OFFLOAD_KILL=1:13 mpi 2 "$S" train $M --train.out_dir=kill $CH >kill.log 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "SHARC_TEST_OFFLOAD_KILL: SIGKILL to itself amid the moments' writes of step 13" kill.log &&
  [ "$(cat kill/checkpoints/latest)" = step-00000010 ] || { echo "kill: exit $rc"; cat kill.log; exit 1; }
mpi 2 "$S" train $M --train.out_dir=kill $CH --ckpt.resume=auto >kill2.log 2>&1 || { cat kill2.log; exit 1; }
grep -q "resumed from kill/checkpoints/step-00000010 at step 10" kill2.log || { cat kill2.log; exit 1; }
same_ckpt ref2 kill 20
[ -z "$(ls -A spill)" ] || { echo "files left in the offload directory: $(ls spill)"; exit 1; }
echo "corrupted chunk and kill -9 amid the writes: named, nothing saved after, auto-resume identical;" \
  "resume across the switch identical"

refuse() { # want-rc pattern args...
  local want=$1 pat=$2 rc; shift 2
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [ $rc -eq "$want" ] && grep -q "$pat" <<< "$out" || { echo "exit $rc, expected $want and '$pat': $out"; exit 1; }
}
Q="${M//$'\n'/ } --train.max_steps=2"
refuse 2 "optim.offload_dir: 'nodir': No such file or directory" "$S" train $Q --train.out_dir=bad1 --optim.offload_dir=nodir
refuse 2 "optim.offload_dir: 'text.txt' is not a directory" "$S" train $Q --train.out_dir=bad2 --offload.dir=text.txt
refuse 2 "SHARC_AIO: 'libaio': expected uring or pread" env SHARC_AIO=libaio "$S" train $Q --train.out_dir=bad4 \
  --optim.offload_dir=spill
refuse 2 "optim.offload_sub_group_size.*0" "$S" train $Q --train.out_dir=bad5 --optim.offload_dir=spill \
  --zero_optimization.sub_group_size=0
# a disk without room for the moments (a file-size limit: fallocate fails
# with EFBIG once SIGXFSZ is ignored): refused at start, the file named
refuse 1 "cannot reserve [0-9]* bytes for the AdamW moments in 'spill/sharc-moments-" \
  bash -c "trap '' XFSZ; ulimit -f 64; exec $S train $Q --train.out_dir=bad3 --optim.offload_dir=spill"
[ -z "$(ls -A spill)" ] || { echo "files left in the offload directory: $(ls spill)"; exit 1; }
echo "bad directories, a bad SHARC_AIO, a bad sub_group_size and a full disk refused"
