#!/usr/bin/env bash
# timeout: 120
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
#  - refused with one line naming the keys, exit 2: offload with NO_SHARD.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/cudasim_lib.inc"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
head -40 text.txt > val.txt
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=16
   --train.seq_len=16 --train.batch_size=4 --train.max_steps=3 --train.threads=1 --optim.warmup_steps=2
   --ckpt.every=2 --ckpt.keep=2 --log.eval_every=2 --data.val_path=val.txt --log.eval_batches=1"
OFF="--fsdp.cpu_offload=true"

# near a b what [tol]: |a - b| <= tol |b| (default 1e-5) for every pair of the two lists
near() {
  paste <(echo "$1") <(echo "$2") | awk -v w="$3" -v t="${4:-1e-5}" '
    { d = $1 - $2; if (d < 0) d = -d; r = $2 < 0 ? -$2 : $2;
      if (NF != 2 || d > t * r) { print "FAIL: " w ": line " NR ": " $1 " vs " $2; bad = 1 } }
    END { if (NR == 0) { print "FAIL: " w ": nothing compared"; bad = 1 } exit bad }'
}
col() { jq -r "select(.step >= $2 and .\"$3\" != null) | .\"$3\"" "$1/metrics.jsonl"; }

"$CPU" train $M --train.out_dir=c > c.log 2>&1 || { cat c.log; die "cpu run"; }
"$SIM" train $M --train.out_dir=g --train.device=cuda > g.log 2>&1 || { tail -20 g.log; die "cuda run"; }
"$SIM" train $M $OFF --train.out_dir=o --train.device=cuda > o.log 2>&1 || { tail -20 o.log; die "offload run"; }
grep -q "fsdp.cpu_offload: params .* in host memory" o.log || die "the offload run's plan does not say so: $(grep -i offload o.log)"
! grep -q "cpu_offload.*no effect" o.log || die "the offload run warns that offload has no effect"
for k in loss_metrics/global_avg_loss grad_norm loss_metrics/val_loss; do
  [ "$(col g 1 $k | wc -l)" -ge 1 ] || die "the cuda run has no $k"
  near "$(col o 1 $k)" "$(col g 1 $k)" "offload vs cuda $k" || exit 1
  near "$(col o 1 $k)" "$(col c 1 $k)" "offload vs cpu $k" || exit 1
done
echo "offload = cuda = cpu within 1e-5 (3 steps: losses, grad norms, validation)"

# host waits per step under offload, 1 rank (3 steps less 1, over 2): one
# per unit's reduced gradient (4 units), the step's one read, and the shard
# write bracket's wait for both streams = 7. The host shards and the landing
# buffer are page-locked (sharc_device_host_alloc), so the copies
# themselves add none; into pageable memory each device -> host copy made
# the host wait once more (11 a step)
for s in 1 3; do
  CUDASIM_SYNC_STATS=1 "$SIM" train $M $OFF --train.max_steps=$s --ckpt.every=0 --log.eval_every=0 \
    --train.out_dir=s$s --train.device=cuda > s$s.log 2>&1 || { tail -20 s$s.log; die "offload run, $s steps"; }
done
h1=$(sed -n 's/^cudasim: host syncs \([0-9]*\)$/\1/p' s1.log) h3=$(sed -n 's/^cudasim: host syncs \([0-9]*\)$/\1/p' s3.log)
[ -n "$h1" ] && [ -n "$h3" ] || die "no cudasim host sync counts ('$h1', '$h3')"
[ $(((h3 - h1) / 2)) -le 7 ] || die "offload: $(((h3 - h1) / 2)) host waits a step, expected at most 7 (pinned shards)"
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
# a safetensors file's tensor bytes (after its 8-byte length and JSON header, which names the run)
data() { tail -c +$((9 + $(od -An -tu8 -N8 "$1"))) "$1"; }
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
      timeout 100 mpirun --allow-run-as-root --oversubscribe -n 2 -x SHARC_COMM -x SHARC_NCCL_LIB \
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

# refused: one line naming the keys, exit status 2
out=$("$SIM" train $M $OFF --fsdp.sharding_strategy=NO_SHARD --train.out_dir=bad --train.device=cuda 2>&1); rc=$?
[ $rc -eq 2 ] || die "offload with NO_SHARD: exit $rc, want 2: $out"
grep -q "^error: fsdp.cpu_offload: .*NO_SHARD" <<< "$out" || die "offload with NO_SHARD: not one line naming the keys: $out"
echo "refusal: offload with NO_SHARD"
exit 0
