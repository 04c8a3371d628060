#!/usr/bin/env bash
# timeout: 180
# fsdp.cpu_offload on train.device cuda (note [shard-device] in
# src/fsdp/collectives.c: the fp32 master shards, gradient shards, AdamW's
# moments and step in host memory, gathered units and activations on the
# device), on the CUDA simulator (a host read of device memory or a device
# read of host memory aborts):
#  - a tiny GPT-2, 3 steps with a checkpoint at step 2 and validation: the
#    offloaded run's losses, gradient norms and validation loss within 1e-5
#    of the same run without offload, and of the CPU run;
#  - the step-2 checkpoints resume across: offload from the plain cuda
#    run's, plain cuda from the offloaded run's; step 3 within 1e-5 of the
#    uninterrupted runs; and the fp32 masters cross bit for bit: each
#    checkpoint loaded with and without offload and saved at once (0 steps)
#    gives the same tensor bytes (the optimizers' steps differ in the last
#    bit: the CPU's AdamW kernel against the device's);
#  - the final weights evaluate on the CPU (sharc eval) as the plain run's;
#  - 2 ranks over the fake NCCL with offload = 1 rank with offload at the
#    same global batch (losses and grad norms within 1e-5), and
#    without offload = 1 rank without;
#  - device memory (telemetry, the device's accounts): memory/{params,grads,
#    optim}_peak(GiB) are 0 with offload, and at 2 ranks the sum of the
#    device's category peaks is lower than the same 2-rank run's without
#    offload by at least its params + grads + optim peaks (at one process the
#    difference is smaller by the gathered and gradient slots offload needs:
#    without it the shard itself is the gathered unit); the memory plan
#    says where they went;
#  - note [offload-overlap] (src/fsdp/overlap.c): the optimizer's update on
#    the engine's host thread, overlapped with the next forward. The
#    offloaded run (its host thread slowed by 100 ms a unit, so a gather that
#    did not wait for its unit's update would copy the old shard: the
#    simulator runs a queued copy when the stream is drained) gives the
#    losses, grad norms, validation loss, step-2 checkpoint (saved right
#    after the step's queued updates) and final weights of the same run with
#    SHARC_OFFLOAD_OVERLAP=0, bit for bit; resumed from that checkpoint it
#    ends on the same weights bit for bit; an update failing (the test hook
#    SHARC_TEST_OFFLOAD_UPDATE_FAIL) ends the run with its one line, exit 1,
#    no weights saved: at one rank in step 1 (returned by step 2), at 2
#    ranks on rank 1 alone in the last step (agreed: a line on each rank);
#  - optim.offload_dir on cuda (implies cpu_offload; note
#    [optim-offload-overlap] in src/optim/adamw.c): = the offloaded run
#    without it bit for bit, = the CPU's offload_dir run within 1e-5, its
#    save + resume = the uninterrupted run bit for bit;
#  - NO_SHARD and HYBRID_SHARD with offload (note [offload-replicas] in
#    src/fsdp/collectives.c) = the CPU run of the same strategy within 1e-5.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/cudasim_lib.inc"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
head -40 text.txt > val.txt
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=16
   --train.seq_len=16 --train.batch_size=4 --train.max_steps=3 --train.threads=1 --optim.warmup_steps=2
   --ckpt.every=2 --ckpt.keep=2 --log.eval_every=2 --data.val_path=val.txt --log.eval_batches=1"
OFF="--fsdp.cpu_offload=true"


"$CPU" train $M --train.out_dir=c > c.log 2>&1 || { cat c.log; die "cpu run"; }
"$SIM" train $M --train.out_dir=g --train.device=cuda > g.log 2>&1 || { tail -20 g.log; die "cuda run"; }
SHARC_TEST_OFFLOAD_SLOW=100 "$SIM" train $M $OFF --train.out_dir=o --train.device=cuda > o.log 2>&1 ||
  { tail -20 o.log; die "offload run"; }
SHARC_OFFLOAD_OVERLAP=0 "$SIM" train $M $OFF --train.out_dir=o0 --train.device=cuda > o0.log 2>&1 ||
  { tail -20 o0.log; die "offload run without the overlap"; }
grep -q "fsdp.cpu_offload: params .* in host memory" o.log || die "the offload run's plan does not say so: $(grep -i offload o.log)"
! grep -q "cpu_offload.*no effect" o.log || die "the offload run warns that offload has no effect"
for k in loss_metrics/global_avg_loss grad_norm loss_metrics/val_loss; do
  [ "$(col g 1 $k | wc -l)" -ge 1 ] || die "the cuda run has no $k"
  near "$(col o 1 $k)" "$(col g 1 $k)" "offload vs cuda $k" || exit 1
  near "$(col o 1 $k)" "$(col c 1 $k)" "offload vs cpu $k" || exit 1
done
echo "offload = cuda = cpu within 1e-5 (3 steps: losses, grad norms, validation)"

# note [offload-overlap]: overlapped = not, bit for bit
for k in loss_metrics/global_avg_loss grad_norm loss_metrics/val_loss; do
  [ "$(col o 1 $k)" = "$(col o0 1 $k)" ] || die "overlap on/off: $k differ: $(col o 1 $k | tr '\n' ' ') / $(col o0 1 $k | tr '\n' ' ')"
done
cmp -s o/checkpoints/step-00000002/shard-00000-of-00001.bin o0/checkpoints/step-00000002/shard-00000-of-00001.bin ||
  die "overlap on/off: the step-2 checkpoints' shards differ"
# a safetensors file's tensor bytes (after its 8-byte length and JSON header, which names the run)
data() { tail -c +$((9 + $(od -An -tu8 -N8 "$1"))) "$1"; }
cmp -s <(data o/model.safetensors) <(data o0/model.safetensors) || die "overlap on/off: the final weights differ"
"$SIM" train $M $OFF --train.out_dir=r2 --train.device=cuda --log.eval_every=0 --ckpt.every=0 \
  --ckpt.resume=o/checkpoints/step-00000002 > r2.log 2>&1 || { tail -20 r2.log; die "offload resuming its own checkpoint"; }
cmp -s <(data o/model.safetensors) <(data r2/model.safetensors) || die "overlap: resumed from step 2, other final weights"
SHARC_TEST_OFFLOAD_UPDATE_FAIL=0:1 "$SIM" train $M $OFF --train.out_dir=f1 --train.device=cuda --log.eval_every=0 \
  --ckpt.every=0 --train.max_steps=2 > f1.log 2>&1; rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '^error: fsdp.cpu_offload: the AdamW update of unit .* failed at step 1' f1.log)" -eq 1 ] ||
  die "a failed update: exit $rc, want 1 and its one line: $(tail -3 f1.log)"
[ ! -e f1/model.safetensors ] || die "a failed update: the weights were saved"
echo "overlap: = SHARC_OFFLOAD_OVERLAP=0 bit for bit (losses, norms, validation, checkpoint, weights); resumed alike; a failed update ends the run"

# host waits per step under offload, 1 rank (3 steps less 1, over 2): the
# wait for the reduced gradients' accumulates (note [offload-reduce]: queued
# as host functions behind their copies, a ring of 4 landing slots for 4
# units, so once a step; one per unit before, 7 a step), the step's one
# read, and the shard write bracket's wait for both streams = 4. The host
# shards and the landing ring are page-locked (sharc_device_host_alloc), so
# the copies themselves add none
for s in 1 3; do
  CUDASIM_SYNC_STATS=1 "$SIM" train $M $OFF --train.max_steps=$s --ckpt.every=0 --log.eval_every=0 \
    --train.out_dir=s$s --train.device=cuda > s$s.log 2>&1 || { tail -20 s$s.log; die "offload run, $s steps"; }
done
h1=$(sed -n 's/^cudasim: host syncs \([0-9]*\)$/\1/p' s1.log) h3=$(sed -n 's/^cudasim: host syncs \([0-9]*\)$/\1/p' s3.log)
[ -n "$h1" ] && [ -n "$h3" ] || die "no cudasim host sync counts ('$h1', '$h3')"
[ $(((h3 - h1) / 2)) -le 4 ] || die "offload: $(((h3 - h1) / 2)) host waits a step, expected at most 4"
echo "offload: $(((h3 - h1) / 2)) host waits a step (4 units)"

# checkpoints across: offload <- plain, plain <- offload
"$SIM" train $M $OFF --train.out_dir=ro --train.device=cuda --ckpt.resume=g/checkpoints/step-00000002 > ro.log 2>&1 ||
  { tail -20 ro.log; die "offload resuming the plain checkpoint"; }
"$SIM" train $M --train.out_dir=rg --train.device=cuda --ckpt.resume=o/checkpoints/step-00000002 > rg.log 2>&1 ||
  { tail -20 rg.log; die "plain cuda resuming the offload checkpoint"; }
for p in "ro g" "rg o"; do
  read -r run ref <<< "$p"
  [ "$(col $run 1 loss_metrics/global_avg_loss | wc -l)" -eq 1 ] || die "$run: not 1 step after the resume"
  near "$(col $run 3 loss_metrics/global_avg_loss)" "$(col $ref 3 loss_metrics/global_avg_loss)" "$run resumed" || exit 1
done
for src in g o; do
  for x in "" "$OFF"; do
    "$SIM" train $M $x --train.max_steps=2 --log.eval_every=0 --train.out_dir=z$src${x:+o} --train.device=cuda \
      --ckpt.resume=$src/checkpoints/step-00000002 > z$src.log 2>&1 || { tail -20 z$src.log; die "0-step resume of $src"; }
  done
  [ "$(data z$src/model.safetensors | wc -c)" -gt 100000 ] || die "z$src/model.safetensors: no tensor bytes"
  cmp -s <(data z$src/model.safetensors) <(data z${src}o/model.safetensors) ||
    die "the $src checkpoint's masters loaded with and without offload differ"
done
ec=$("$CPU" eval --checkpoint g/model.safetensors --data.path val.txt --threads 1 2>&1) || die "eval: $ec"
eo=$("$CPU" eval --checkpoint o/model.safetensors --data.path val.txt --threads 1 2>&1) || die "eval: $eo"
near "$(jq -r .val_loss <<< "$eo")" "$(jq -r .val_loss <<< "$ec")" "eval of the offloaded run's weights" || exit 1
echo "checkpoints: offload <-> cuda resume; masters cross bit for bit; weights evaluate alike"

# 2 ranks over NCCL with offload against 1 rank with offload, global batch 4
FAKE="$SHARC_BIN/libfake_nccl.so"
if command -v mpirun > /dev/null && [ -f "$FAKE" ]; then
  for x in "$OFF" "--fsdp.cpu_offload=false"; do
    out=n2; [ "$x" = "$OFF" ] || out=p2
    SHARC_COMM=nccl SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE" FAKE_NCCL_STATS=1 \
      timeout 100 env "$NOLEAK" mpirun --allow-run-as-root --oversubscribe -n 2 -x SHARC_COMM -x SHARC_NCCL_LIB \
      -x SHARC_CUDA_DRIVER_LIB -x FAKE_NCCL_STATS -x SHARC_CUBLASLT_LIB "$SIM" train $M $x --ckpt.every=0 --log.eval_every=0 \
      --train.batch_size=2 --train.out_dir=$out --train.device=cuda > $out.log 2>&1 ||
      { tail -20 $out.log; die "2 ranks over nccl ($out)"; }
  done
  grep -q 'on simulated device memory' n2.log || die "the fake NCCL did not carry the collectives: $(grep fake n2.log)"
  for k in loss_metrics/global_avg_loss grad_norm; do
    near "$(col n2 1 $k)" "$(col o 1 $k)" "2 ranks vs 1 rank with offload: $k" || exit 1
    near "$(col p2 1 $k)" "$(col g 1 $k)" "2 ranks vs 1 rank without offload: $k" || exit 1
  done
  echo "nccl: 2 ranks = 1 rank within 1e-5, with offload and without"
  # rank 1's update of the last step fails: agreed after the steps, a line on each rank
  SHARC_COMM=nccl SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE" SHARC_TEST_OFFLOAD_UPDATE_FAIL=1:2 \
    timeout 100 env "$NOLEAK" mpirun --allow-run-as-root --oversubscribe -n 2 -x SHARC_COMM -x SHARC_NCCL_LIB -x SHARC_CUDA_DRIVER_LIB \
    -x SHARC_TEST_OFFLOAD_UPDATE_FAIL -x SHARC_CUBLASLT_LIB "$SIM" train $M $OFF --ckpt.every=0 --log.eval_every=0 \
    --train.batch_size=2 --train.max_steps=2 --train.out_dir=f2 --train.device=cuda > f2.log 2>&1; rc=$?
  [ $rc -eq 1 ] && grep -q '^\[rank 1\] error: fsdp.cpu_offload: the AdamW update of unit .* failed at step 2' f2.log &&
    grep -q '^\[rank 0\] error: train: rank 1 failed its last optimizer update' f2.log ||
    die "2 ranks, rank 1's last update failing: exit $rc, want 1 and a line on each rank: $(grep error f2.log)"
  echo "nccl: rank 1's failed last update ends the 2-rank job with a line on each rank"
  # the device's memory: the shards and moments are not on it
  mem() { jq -s -r "map(select(has(\"memory/params_peak(GiB)\"))) | last | $2" "$1/metrics.jsonl"; }
  for k in params grads optim; do
    v=$(mem n2 ".\"memory/${k}_peak(GiB)\"")
    [ "$v" = 0 ] || die "offload: memory/${k}_peak(GiB) is $v on the device, want 0"
  done
  sum='[to_entries[] | select(.key | test("^memory/[a-z]+_peak\\(GiB\\)$")) | .value] | add'
  moved='."memory/params_peak(GiB)" + ."memory/grads_peak(GiB)" + ."memory/optim_peak(GiB)"'
  dg=$(mem p2 "$sum") do=$(mem n2 "$sum") mv=$(mem p2 "$moved")
  awk -v g="$dg" -v o="$do" -v m="$mv" 'BEGIN { exit !(m > 0 && g - o >= m * 0.999) }' ||
    die "device peak: $do GiB with offload, $dg without: not lower by params+grads+optim $mv GiB"
  echo "device memory: peaks sum $do GiB with offload, $dg without (params+grads+optim $mv GiB)"
else
  echo "SKIP (nccl): no mpirun or no $FAKE"
fi

# note [optim-offload-overlap] (src/optim/adamw.c): optim.offload_dir on cuda
# implies fsdp.cpu_offload (one line says so), and the host worker streams
# each unit's moments through the chunk buffers (1024 parameters a chunk:
# several a unit, the pipeline's read-ahead across them). The same update
# code on the same values: the losses, grad norms, validation loss, step-2
# checkpoint and final weights of the offloaded run without the file, bit for
# bit; the CPU's offload_dir run within 1e-5; resumed from its step-2
# checkpoint it ends on the same weights bit for bit (the moments read back
# from the file for the save, written into it by the load)
mkdir -p dsk dskc dskr
OD="--optim.offload_dir=dsk --optim.offload_sub_group_size=1024"
SHARC_TEST_OFFLOAD_SLOW=20 "$SIM" train $M $OD --train.out_dir=d --train.device=cuda > d.log 2>&1 ||
  { tail -20 d.log; die "cuda offload_dir run"; }
"$CPU" train $M --optim.offload_dir=dskc --optim.offload_sub_group_size=1024 --train.out_dir=dc > dc.log 2>&1 ||
  { tail -20 dc.log; die "cpu offload_dir run"; }
[ "$(grep -c 'optim.offload_dir on train.device cuda implies fsdp.cpu_offload' d.log)" -eq 1 ] ||
  die "offload_dir on cuda: no one line saying cpu_offload is implied: $(grep -i offload d.log)"
grep -q "fsdp.cpu_offload: params .* in host memory" d.log || die "offload_dir on cuda: the plan has no host line"
for k in loss_metrics/global_avg_loss grad_norm loss_metrics/val_loss; do
  [ "$(col d 1 $k)" = "$(col o 1 $k)" ] || die "offload_dir vs offload: $k differ: $(col d 1 $k | tr '\n' ' ') / $(col o 1 $k | tr '\n' ' ')"
  near "$(col d 1 $k)" "$(col dc 1 $k)" "cuda offload_dir vs cpu offload_dir $k" || exit 1
done
# the moments went through the file: the I/O counted in the steps' windows (step 1's update in step 2's)
[ "$(jq -s '[.[]."offload/write_bytes" // 0] | add' d/metrics.jsonl)" -gt 0 ] 2> /dev/null ||
  die "offload_dir on cuda: no bytes written: $(jq -c '."offload/write_bytes"' d/metrics.jsonl | tr '\n' ' ')"
cmp -s d/checkpoints/step-00000002/shard-00000-of-00001.bin o/checkpoints/step-00000002/shard-00000-of-00001.bin ||
  die "offload_dir vs offload: the step-2 checkpoints' shards differ"
cmp -s <(data d/model.safetensors) <(data o/model.safetensors) || die "offload_dir vs offload: the final weights differ"
"$SIM" train $M $OD --optim.offload_dir=dskr --train.out_dir=dr --train.device=cuda --log.eval_every=0 --ckpt.every=0 \
  --ckpt.resume=d/checkpoints/step-00000002 > dr.log 2>&1 || { tail -20 dr.log; die "offload_dir resuming its checkpoint"; }
cmp -s <(data d/model.safetensors) <(data dr/model.safetensors) || die "offload_dir: resumed from step 2, other final weights"
echo "offload_dir on cuda: = cpu_offload bit for bit (losses, norms, validation, checkpoint, weights), = cpu within 1e-5; resumed alike"

# note [offload-replicas] (src/fsdp/collectives.c): NO_SHARD (2 ranks) and
# HYBRID_SHARD (4 ranks, fsdp_size 2: 2 replicas of 2 shards) with offload,
# the replicas' all-reduce of host gradient shards, against the CPU run of the
# same strategy (losses and grad norms within 1e-5); the ranks stage through
# MPI (several ranks on one simulated GPU), HYBRID_SHARD with bf16 reductions
if command -v mpirun > /dev/null; then
  for v in "2 ns --fsdp.sharding_strategy=NO_SHARD" \
    "4 hy --fsdp.sharding_strategy=HYBRID_SHARD --fsdp.fsdp_size=2 --fsdp.reduce_dtype=bf16"; do
    read -r np out x <<< "$v"
    R="--ckpt.every=0 --log.eval_every=0 --train.max_steps=2 --train.batch_size=$((4 / np))"
    timeout 100 mpirun --allow-run-as-root --oversubscribe -n $np "$CPU" train $M $R $x --train.out_dir=${out}c \
      > ${out}c.log 2>&1 || { tail -20 ${out}c.log; die "cpu $out"; }
    timeout 100 mpirun --allow-run-as-root --oversubscribe -n $np -x SHARC_CUBLASLT_LIB "$SIM" train $M $R $x $OFF \
      --train.out_dir=$out --train.device=cuda > $out.log 2>&1 || { tail -20 $out.log; die "offload $out"; }
    for k in loss_metrics/global_avg_loss grad_norm; do
      NEAR_N=2 near "$(col $out 1 $k)" "$(col ${out}c 1 $k)" "$x with offload vs cpu: $k" || exit 1
    done
  done
  echo "offload with NO_SHARD (fp32 reductions) and HYBRID_SHARD (bf16) = cpu within 1e-5"
  # optim.offload_dir is a key each rank may set its own way: the offload it implies must agree
  out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -x SHARC_CUBLASLT_LIB -n 1 "$SIM" train $M $R $OD \
    --train.out_dir=ag --train.device=cuda : -n 1 "$SIM" train $M $R --train.out_dir=ag --train.device=cuda 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -q '^\[rank 1\] error: train: ranks disagree on fsdp.cpu_offload (or optim.offload_dir' <<< "$out" ||
    die "offload_dir on one rank of two: exit $rc, want 2 and the disagreement named: $(grep error <<< "$out")"
  echo "offload_dir on one rank of two: refused, naming the implied key"
else
  echo "SKIP (replicas): no mpirun"
fi
exit 0
