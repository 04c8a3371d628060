#!/usr/bin/env bash
# timeout: 300
# train.device: cuda trains (note [cuda-train] in src/train/trainer.c), run
# on the CUDA simulator (build/sim/sharc: the real kernel sources, device
# memory in a guarded arena, so any host read of a shard or batch aborts):
#  - a tiny GPT-2 and a tiny Llama, 6 steps with a checkpoint at step 3,
#    give the CPU run's loss and gradient norm at every step within 1e-4
#    relative (the kernels round sums in another order: not bit-exact);
#  - the cuda run's step-3 checkpoint resumes on the CPU, and the CPU run's
#    on cuda: steps 4-6 within 1e-4 of the uninterrupted CPU run;
#  - the cuda run's final model.safetensors evaluates on the CPU (sharc
#    eval) to the CPU run's validation loss within 1e-4;
#  - evaluation during training (log.eval_every) on cuda matches the CPU's;
#  - fsdp.param_dtype bf16 on cuda against the CPU's emulated bf16 (1e-3);
#  - GPT-2's fc + GELU runs in cuBLASLt's GELU epilogues (note [gemm-gelu]):
#    one GELU_AUX_BIAS and one DGELU product per layer and micro-batch, fp32
#    and bf16, and with the tiled MLP and activation checkpointing (cuda =
#    cpu within 1e-4), counted by the simulated cuBLASLt;
#  - (2 ranks sharing the one GPU through MPI, note [comm-staging], against
#    1 rank: tests/gpu/run.sh step 5, which tests/cli/cudasim.sh runs here);
#  - 2 ranks over NCCL, each its own simulated GPU (build/libfake_nccl.so as
#    libnccl and the driver: on the simulator it synchronizes the stream of
#    each collective and exchanges device memory inside the arena's window),
#    3 steps against 1 rank at the same global batch: losses and gradient
#    norms within 1e-5, every parameter all-gather and reduce-scatter carried
#    by NCCL on device memory (the fake's counts), and the final model,
#    gathered to rank 0 through sharc_fsdp_gather_master's host path,
#    evaluating on the CPU to the 1-rank model's loss within 1e-5, and the
#    compute stream waiting for the comm stream once per gather plus once a
#    step, never for a reduce-scatter (note [comm-stream]; more in
#    tests/cli/cudasim_overlap.sh);
#  - 3 micro-batches a step (train.grad_accum): losses and norms = the
#    CPU's within 1e-4, one host wait a step whatever the micro-batch count
#    (note [loss-on-device] in src/model/model.c);
#  - the optimizer step is one kernel launch (note [adamw-multi]: the
#    simulator's launch counts, CUDASIM_LAUNCH_STATS), the gradient norm's
#    sums two (note [sumsq-multi]);
#  - note [ckpt-pinned]: a checkpoint save waits for the device once (it
#    waited 113 times, per segment and moment chunk, into pageable memory),
#    a load once per pinned window beyond the first two plus once (84 times,
#    per chunk), here with 64 KiB windows so the load crosses several, and
#    no allocation waits (note [cuda-zero-alloc]: 131 waits at start-up);
#    counted in the simulator's backtrace of each host wait; an import
#    (model.init_from) on cuda = cpu, waiting once per unit;
#  - what is not supported on cuda yet is one line naming the key, exit 2.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/cudasim_lib.inc"
# field $1 (1 matmuls, 2 heuristic queries, 3 bias epilogues, 4 gelu
# epilogues) of the simulated cuBLASLt's CUDASIM_SYNC_STATS lines in log $2
lt() { sed -n "s/^cudasim cuBLASLt: \([0-9]*\) matmuls, \([0-9]*\) heuristic queries, \([0-9]*\) bias epilogues, \([0-9]*\) gelu epilogues$/\\$1/p" "$2" | sort -n | tr '\n' ' '; }
NEAR_TOL=1e-4 # cuda against the CPU (a 2-rank nccl check below asks 1e-5)
# host waits in CUDASIM_SYNC_TRACE log $1 with a frame of function $2
tw() { awk -v f="($2+" '/^cudasim: host sync [0-9]+$/ { n += hit; hit = 0; next } index($0, f) { hit = 1 } END { print n + hit }' "$1"; }
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
head -40 text.txt > val.txt
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=16
   --train.seq_len=16 --train.batch_size=2 --train.max_steps=6 --train.threads=1 --optim.warmup_steps=2
   --ckpt.every=3 --ckpt.keep=2"
LLAMA="--model.family=llama --model.num_kv_heads=1 --model.tie_embeddings=false --model.ff_hidden_dim=48"


fam_check() { # gpt2|llama (a subshell: exits on a failure)
  local fam=$1
  local X=""; [ $fam = llama ] && X="$LLAMA"
  "$CPU" train $M $X --train.out_dir=c$fam > c$fam.log 2>&1 || { cat c$fam.log; die "$fam: cpu run"; }
  CUDASIM_LAUNCH_STATS=1 CUDASIM_SYNC_TRACE=1 "$SIM" train $M $X --train.out_dir=g$fam --train.device=cuda > g$fam.log 2>&1 ||
    { tail -20 g$fam.log; die "$fam: cuda run"; }
  grep -q "device: cuda" g$fam.log || die "$fam: the cuda run's config does not say cuda"
  # note [adamw-multi]: one optimizer launch a step, none per segment
  [ "$(sed -n 's/^cudasim: launches k_adamw_multi //p' g$fam.log)" = 6 ] && ! grep -q '^cudasim: launches k_adamw ' g$fam.log ||
    { grep '^cudasim: launches' g$fam.log; die "$fam: not one k_adamw_multi launch per step"; }
  # note [sumsq-multi]: the gradient norm's sums two launches a step, none per segment
  [ "$(sed -n 's/^cudasim: launches k_sumsq_multi_blocks //p' g$fam.log)" = 6 ] &&
    [ "$(sed -n 's/^cudasim: launches k_sumsq_multi_sum //p' g$fam.log)" = 6 ] &&
    ! grep -q '^cudasim: launches k_sumsq_blocks ' g$fam.log ||
    { grep '^cudasim: launches' g$fam.log; die "$fam: the norm's sums not two launches per step"; }
  for k in loss_metrics/global_avg_loss grad_norm; do
    [ "$(col c$fam 1 $k | wc -l)" -eq 6 ] || die "$fam: the cpu run has not 6 steps of $k"
    near "$(col g$fam 1 $k)" "$(col c$fam 1 $k)" "$fam cuda vs cpu $k" || exit 1
  done
  # a cuda checkpoint resumed on the CPU, a CPU checkpoint resumed on cuda
  "$CPU" train $M $X --train.out_dir=r$fam --ckpt.resume=g$fam/checkpoints/step-00000003 > r$fam.log 2>&1 ||
    { cat r$fam.log; die "$fam: cpu resume of the cuda checkpoint"; }
  SHARC_TEST_CKPT_PIN_WINDOW=65536 CUDASIM_SYNC_TRACE=1 "$SIM" train $M $X --train.out_dir=s$fam --train.device=cuda \
    --ckpt.resume=c$fam/checkpoints/step-00000003 > s$fam.log 2>&1 ||
    { tail -20 s$fam.log; die "$fam: cuda resume of the cpu checkpoint"; }
  # note [ckpt-pinned]: 2 saves (step 3, the last step) wait once each; the
  # load of a B-byte file through 64 KiB windows once per window after the
  # first two plus once at the end; note [cuda-zero-alloc]: no allocation waits
  local b w
  b=$(stat -c %s c$fam/checkpoints/step-00000003/shard-00000-of-00001.bin)
  w=$(((b + 65535) / 65536))
  [ $w -ge 3 ] || die "$fam: a $b-byte checkpoint fills $w 64 KiB windows: the load does not cross windows"
  [ "$(tw g$fam.log sharc_ckpt_save)" = 2 ] && [ "$(tw s$fam.log sharc_ckpt_resume)" = $((w - 1)) ] &&
    [ "$(tw g$fam.log sharc_device_alloc)" = 0 ] && [ "$(tw s$fam.log sharc_device_alloc)" = 0 ] ||
    die "$fam: host waits: $(tw g$fam.log sharc_ckpt_save) in 2 saves (want 2), $(tw s$fam.log sharc_ckpt_resume)" \
      "in a load of $b bytes (want $((w - 1))), $(tw g$fam.log sharc_device_alloc) in allocations (want 0)"
  for run in r$fam s$fam; do
    [ "$(col $run 1 loss_metrics/global_avg_loss | wc -l)" -eq 3 ] || die "$run: not 3 steps after the resume"
    near "$(col $run 4 loss_metrics/global_avg_loss)" "$(col c$fam 4 loss_metrics/global_avg_loss)" "$run resumed" || exit 1
  done
  # the cuda run's weights evaluate on the CPU as the CPU run's do
  ec=$("$CPU" eval --checkpoint c$fam/model.safetensors --data.path val.txt --threads 1 2>&1) || die "$fam eval: $ec"
  eg=$("$CPU" eval --checkpoint g$fam/model.safetensors --data.path val.txt --threads 1 2>&1) || die "$fam eval: $eg"
  near "$(jq -r .val_loss <<< "$eg")" "$(jq -r .val_loss <<< "$ec")" "$fam eval of the final weights" || exit 1
}
# the two families at once (each simulated run one thread), each one's lines after both end
(fam_check gpt2) > fam-gpt2.log 2>&1 &
p=$!
(fam_check llama) > fam-llama.log 2>&1; r2=$?
wait $p; r1=$?
cat fam-gpt2.log fam-llama.log
[ $r1 = 0 ] && [ $r2 = 0 ] || exit 1
echo "gpt2, llama: cuda = cpu within 1e-4 (6 steps, resume across devices both ways, final weights);" \
  "1 host wait a save, 1 per 64 KiB load window, none per allocation"

# model.init_from on cuda (note [shard-host-io]): the CPU run's final
# weights as the start of a 1-step run, cuda = cpu within 1e-4, the import
# waiting for the device once per unit (GPT-2 at 2 layers: 4 units; it
# waited once per parameter segment, 28 times)
I="$M --model.init_from=cgpt2/model.safetensors --train.max_steps=1 --ckpt.every=0"
"$CPU" train $I --train.out_dir=ic > ic.log 2>&1 || { cat ic.log; die "cpu init_from run"; }
CUDASIM_SYNC_TRACE=1 "$SIM" train $I --train.out_dir=ig --train.device=cuda > ig.log 2>&1 ||
  { tail -20 ig.log; die "cuda init_from run"; }
near "$(col ig 1 loss_metrics/global_avg_loss)" "$(col ic 1 loss_metrics/global_avg_loss)" "init_from on cuda" || exit 1
[ "$(tw ig.log sharc_weights_load)" = 4 ] || die "init_from: $(tw ig.log sharc_weights_load) host waits importing 4 units"
echo "init_from on cuda: = cpu within 1e-4, 1 host wait per unit"

# validation during training on cuda (batches staged in by sharc_eval_dataset)
V="--log.eval_every=2 --data.val_path=val.txt --log.eval_batches=2 --train.max_steps=2 --ckpt.every=0"
"$CPU" train $M $V --train.out_dir=ve > ve.log 2>&1 || { cat ve.log; die "cpu eval run"; }
"$SIM" train $M $V --train.out_dir=vg --train.device=cuda > vg.log 2>&1 || { tail -20 vg.log; die "cuda eval run"; }
near "$(col vg 1 loss_metrics/val_loss)" "$(col ve 1 loss_metrics/val_loss)" "validation loss" || exit 1

# bf16 compute (fsdp.param_dtype bf16): the CUDA bf16 products against the
# CPU's emulated ones (the same operands rounded to bf16, fp32 sums in
# another order) within 1e-3 at every step; attention (head dim 16) runs in
# bf16 on tensor cores on cuda (note [cuda-attention-tc]), in fp32 on the CPU
B16="$M --fsdp.param_dtype=bf16 --train.max_steps=3 --ckpt.every=0"
SHARC_BF16=emulate "$CPU" train $B16 --train.out_dir=bc > bc.log 2>&1 || { cat bc.log; die "cpu bf16 run"; }
CUDASIM_SYNC_STATS=1 "$SIM" train $B16 --train.out_dir=bg --train.device=cuda > bg.log 2>&1 || { tail -20 bg.log; die "cuda bf16 run"; }
grep -q "matrix products in bf16" bg.log || die "the cuda bf16 run does not compute in bf16: $(grep bf16 bg.log)"
for k in loss_metrics/global_avg_loss grad_norm; do near "$(col bg 1 $k)" "$(col bc 1 $k)" "bf16 $k" 1e-3 || exit 1; done
# note [gemm-gelu]: each layer's fc + GELU is one product with the
# GELU_AUX_BIAS epilogue, its backward one with DGELU: 2 layers x 2 x 3 steps
read -r gb16 _ <<< "$(lt 4 bg.log)"
[ "${gb16:-0}" -eq 12 ] || die "bf16: ${gb16:-no} cuBLASLt GELU epilogues in 3 GPT-2 steps of 2 layers, expected 12"
echo "bf16: cuda = cpu (emulated bf16) within 1e-3; 12 GELU epilogues in 3 steps"

# telemetry on cuda: MFU's peak is the GPU's (note [cuda-peak]: the
# simulator answers as an H100 SXM, 132 SMs at 1980 MHz, sm_90), NVIDIA's
# figures within 1%: 66.9 TFLOP/s fp32 (no TF32), 989.4 TFLOP/s bf16 dense;
# per-category memory is the device's accounts: every planned category's
# peak equals the plan (peak/plan 1.000 in the table at the end) and the
# metrics show the shards, moments and activations (0 if read from the host)
peak() { sed -n 's|^sharc: peak \([0-9.]*\) GFLOP/s over all ranks for mfu(%) (cuda sm_90: .*|\1|p' "$1"; }
near "$(peak ggpt2.log)" 66900 "fp32 peak (GFLOP/s) against 66.9 TFLOP/s" 1e-2 || exit 1
near "$(peak bg.log)" 989400 "bf16 peak (GFLOP/s) against 989.4 TFLOP/s" 1e-2 || exit 1
for run in ggpt2 bg; do
  plan_is_peak $run || exit 1
  for k in params grads optim activations; do
    v=$(tail -1 $run/metrics.jsonl | jq -r ".\"memory/${k}_peak(GiB)\"")
    awk -v v="$v" 'BEGIN { exit !(v > 0) }' || die "$run: memory/${k}_peak(GiB) is $v on cuda"
  done
done
echo "telemetry: the GPU's peak, the device's memory = the plan"

# 2 ranks over NCCL (note [nccl]), a GPU each, against 1 rank with the same
# global batch (2 x 2 sequences = 4)
FAKE="$SHARC_BIN/libfake_nccl.so"
if command -v mpirun > /dev/null && [ -f "$FAKE" ]; then
  N="$M --train.max_steps=3 --ckpt.every=0"
  "$SIM" train $N --train.batch_size=4 --train.out_dir=n1 --train.device=cuda > n1.log 2>&1 ||
    { tail -20 n1.log; die "nccl reference: 1-rank cuda run"; }
  for s in 1 3; do # n2s1: 1 step, for the host waits per step below
    out=n2; [ $s = 1 ] && out=n2s1
    SHARC_COMM=nccl SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE" FAKE_NCCL_STATS=1 CUDASIM_SYNC_STATS=1 \
      timeout 120 env "$NOLEAK" mpirun --allow-run-as-root --oversubscribe -n 2 -x SHARC_COMM -x SHARC_NCCL_LIB \
      -x SHARC_CUDA_DRIVER_LIB -x FAKE_NCCL_STATS -x CUDASIM_SYNC_STATS -x SHARC_CUBLASLT_LIB "$SIM" train $N \
      --train.max_steps=$s --train.batch_size=2 --train.out_dir=$out --train.device=cuda > $out.log 2>&1 ||
      { tail -20 $out.log; die "2 ranks over nccl on cuda ($s steps)"; }
  done
  ! grep -q 'collectives go through MPI' n2.log || die "nccl fell back to MPI: $(grep MPI n2.log)"
  # the plan of a shard group on a device: private shards (the shared
  # windows of note [shm] need host shards), so the gathered units are planned;
  # comm is the device staging only (note [comm-plan]: no MPI scratch)
  plan_is_peak n2 || exit 1
  for k in loss_metrics/global_avg_loss grad_norm; do
    [ "$(col n1 1 $k | wc -l)" -eq 3 ] || die "nccl reference: not 3 steps of $k"
    near "$(col n2 1 $k)" "$(col n1 1 $k)" "2 ranks over nccl vs 1 rank: $k" 1e-5 || exit 1
  done
  # gpt2 at 2 layers: 4 units, each gathered at least once a step (18 on
  # today's schedule: a unit still gathered at the turn to backward is not
  # gathered again) and reduced once: at least 12 all-gathers, exactly 12
  # reduce-scatters over 3 steps (0 of each if the MPI fallback carried them)
  stats=$(grep '^fake_nccl: rank' n2.log)
  for r in 0 1; do
    line=$(grep "^fake_nccl: rank $r:" <<< "$stats") || die "no fake_nccl line for rank $r: $stats"
    ag=$(sed -n 's/.*: \([0-9]*\) all-gathers.*/\1/p' <<< "$line")
    rs=$(sed -n 's/.* \([0-9]*\) reduce-scatters.*/\1/p' <<< "$line")
    grep -q 'on simulated device memory' <<< "$line" || die "the fake did not see the simulator: $line"
    [ "${ag:-0}" -ge 12 ] && [ "${rs:-0}" -eq 12 ] || die "rank $r: NCCL did not carry the gathers: $line"
  done
  # note [comm-stream]: no host waits for the collectives; note
  # [loss-on-device]: the loss stays on the device. Host synchronizations
  # per step and rank (the simulator's count, 3 steps less 1 step, over 2):
  # 1 = the step's one read of the loss and norm sums (an async copy into
  # pinned memory + a synchronize); 4 when the loss of each micro-batch and
  # the norm's sums were read apiece, each a copy into pageable memory (a
  # host wait) + a synchronize; 15 when every blocking all-gather and
  # reduce-scatter and the optimizer's shard writes waited too
  syncs() { sed -n 's/^cudasim: host syncs \([0-9]*\)$/\1/p' "$1" | sort -n | tr '\n' ' '; }
  read -r a0 a1 <<< "$(syncs n2s1.log)"
  read -r b0 b1 <<< "$(syncs n2.log)"
  [ -n "${a1:-}" ] && [ -n "${b1:-}" ] || die "no cudasim host sync counts: $(syncs n2s1.log) / $(syncs n2.log)"
  per=$(((b0 - a0) / 2)) per1=$(((b1 - a1) / 2))
  [ $((b0 - a0)) -le 2 ] && [ $((b1 - a1)) -le 2 ] ||
    die "host synchronizations over 2 steps: $((b0 - a0)) and $((b1 - a1)), expected at most 2 (1 a step)"
  # note [gemm-plans]: a product's cuBLASLt plan is built once per shape, so
  # the heuristic is asked only in the first step (3 steps ask as often as
  # 1), while the products run every step
  read -r q1 _ <<< "$(lt 2 n2s1.log)"
  read -r q3 _ <<< "$(lt 2 n2.log)"
  read -r m1 _ <<< "$(lt 1 n2s1.log)"
  read -r m3 _ <<< "$(lt 1 n2.log)"
  read -r be _ <<< "$(lt 3 n2s1.log)"
  [ -n "${q1:-}" ] && [ -n "${q3:-}" ] || die "no cudasim cuBLASLt counts in n2s1.log / n2.log"
  [ "$q3" -eq "$q1" ] && [ "$m3" -gt "$m1" ] ||
    die "cuBLASLt heuristic queries: $q1 in 1 step, $q3 in 3 (matmuls $m1, $m3): plans are not reused"
  # note [gemm-bias]: GPT-2's aligned biases are added in the products' epilogue
  [ "${be:-0}" -gt 0 ] || die "no cuBLASLt bias epilogue in a GPT-2 step (${be:-none})"
  # note [comm-stream]: a unit's reduction is queued on the comm stream and
  # nobody waits for it; the compute stream waits for the comm stream once
  # per gather (blocking here: no forward prefetch) plus once at the end of
  # the step's gradients; a wait per reduce-scatter would make it 6 + 4 + 1
  jq -r '"\(.step) \(."fsdp/gathers") \(."fsdp/comm_stream_waits")"' n2/metrics.jsonl | awk '
    { n++; if ($2 < 4 || $3 != $2 + 1) { print "FAIL: step " $1 ": " $2 " gathers, " $3 " comm-stream waits, want gathers + 1"; bad = 1 } }
    END { if (n != 3) { print "FAIL: " n " steps of fsdp/comm_stream_waits"; bad = 1 } exit bad }' || exit 1
  ep=$("$CPU" eval --checkpoint n2/model.safetensors --data.path val.txt --threads 1 2>&1) || die "nccl eval: $ep"
  e1=$("$CPU" eval --checkpoint n1/model.safetensors --data.path val.txt --threads 1 2>&1) || die "nccl eval: $e1"
  near "$(jq -r .val_loss <<< "$ep")" "$(jq -r .val_loss <<< "$e1")" "eval of the 2-rank nccl model" 1e-5 || exit 1
  echo "nccl: 2 ranks = 1 rank within 1e-5 (losses, grad norms, final weights), $per/$per1 host syncs a step;" \
    "$q3 cuBLASLt heuristic queries in 3 steps as in 1 ($m1 -> $m3 products, $be with the bias epilogue in 1 step); $(tr '\n' ' ' <<< "$stats")"
else
  echo "SKIP (nccl): no mpirun or no $FAKE"
fi

# gradient accumulation (3 micro-batches a step, train.loss_normalization
# micro_batch: each micro-batch's loss weighted on the device) on 1 rank:
# losses and norms = the CPU's within 1e-4, and still 1 host wait per step
# (3 steps less 1 step, over 2): the micro-batch count does not add any (it
# added 2 per micro-batch when each loss was read back)
GA="$M --train.grad_accum=3 --train.loss_normalization=micro_batch --train.batch_size=1 --ckpt.every=0"
"$CPU" train $GA --train.max_steps=3 --train.out_dir=ac > ac.log 2>&1 || { cat ac.log; die "cpu grad_accum run"; }
for s in 1 3; do
  CUDASIM_SYNC_STATS=1 "$SIM" train $GA --train.max_steps=$s --train.out_dir=ag$s --train.device=cuda > ag$s.log 2>&1 ||
    { tail -20 ag$s.log; die "cuda grad_accum run ($s steps)"; }
done
for k in loss_metrics/global_avg_loss grad_norm; do
  [ "$(col ac 1 $k | wc -l)" -eq 3 ] || die "grad_accum: the cpu run has not 3 steps of $k"
  near "$(col ag3 1 $k)" "$(col ac 1 $k)" "grad_accum 3 cuda vs cpu $k" || exit 1
done
hs() { sed -n 's/^cudasim: host syncs \([0-9]*\)$/\1/p' "$1"; }
a=$(hs ag1.log) b=$(hs ag3.log)
[ -n "$a" ] && [ -n "$b" ] || die "grad_accum: no cudasim host sync counts ('$a', '$b')"
[ $((b - a)) -le 2 ] || die "grad_accum 3: $((b - a)) host synchronizations over 2 steps, expected at most 2 (1 a step)"
# note [gemm-gelu]: fp32 GPT-2, 2 layers x 3 micro-batches x (forward GELU_AUX_BIAS + backward DGELU) a step
ga=$(lt 4 ag1.log) gb=$(lt 4 ag3.log)
[ -n "$ga" ] && [ $(((gb - ga) / 2)) -eq 12 ] ||
  die "grad_accum 3: $(((${gb:-0} - ${ga:-0}) / 2)) cuBLASLt GELU epilogues a step ('$ga', '$gb'), expected 12"
echo "grad_accum 3: cuda = cpu within 1e-4, $(((b - a) / 2)) host sync a step, 12 GELU epilogues a step"

# note [gemm-gelu] with GPT-2's tiled MLP (3 chunks) and activation
# checkpointing: cuda = cpu within 1e-4 over 2 steps, and a step's GELU
# epilogues are 2 layers x 3 chunks x (forward, backward's chunk recompute,
# DGELU) = 18 (the checkpointed block's recompute stops before the MLP)
TL="$M --fsdp.apply_tiled_mlp=true --fsdp.tiled_num_shards=3 --fsdp.activation_checkpointing=true --ckpt.every=0"
"$CPU" train $TL --train.max_steps=2 --train.out_dir=tc > tc.log 2>&1 || { cat tc.log; die "cpu tiled run"; }
for s in 1 2; do
  CUDASIM_SYNC_STATS=1 "$SIM" train $TL --train.max_steps=$s --train.out_dir=tg$s --train.device=cuda > tg$s.log 2>&1 ||
    { tail -20 tg$s.log; die "cuda tiled run ($s steps)"; }
done
for k in loss_metrics/global_avg_loss grad_norm; do near "$(col tg2 1 $k)" "$(col tc 1 $k)" "tiled MLP $k" || exit 1; done
ta=$(lt 4 tg1.log) tb=$(lt 4 tg2.log)
[ -n "$ta" ] && [ $((tb - ta)) -eq 18 ] ||
  die "tiled MLP: $((${tb:-0} - ${ta:-0})) cuBLASLt GELU epilogues a step ('$ta', '$tb'), expected 18"
echo "tiled MLP + activation checkpointing: cuda = cpu within 1e-4, 18 GELU epilogues a step"

# note [gpu-of-rank] (sharc/launch.h): local rank 3 of a node with 2 GPUs
# (CUDASIM_DEVICES) trains on GPU 1, as torch.cuda.set_device(LOCAL_RANK % 2)
out=$(CUDASIM_DEVICES=2 LOCAL_RANK=3 "$SIM" train $M --train.max_steps=1 --ckpt.every=0 --train.out_dir=lr3 \
  --train.device=cuda 2>&1) || die "local rank 3 on 2 GPUs: $(tail -3 <<< "$out")"
grep -q '^cuda: local rank 3 uses GPU 1 of 2$' <<< "$out" || die "local rank 3 on 2 GPUs: $(grep -m2 cuda: <<< "$out")"
echo "local rank 3 of a node with 2 GPUs: GPU 1"

exit 0
