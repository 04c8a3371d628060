#!/usr/bin/env bash
# timeout: 240
# Tensor and sequence parallelism on train.device cuda (note [tp-device] in
# src/model/tp.h), 2 ranks mesh.tp=2 or mesh.sp=2, and 4 ranks of both (last
# below), on the CUDA simulator
# against the CPU's run of the same mesh, losses and gradient norms within
# 1e-4 relative at each of 2 steps (the kernels sum in another order: not
# bit-exact):
#  - GPT-2 (tied embedding and head split by vocabulary rows, V = 256: the
#    vocab_* kernels of note [tp-vocab]) with the ranks sharing the one GPU
#    through MPI: every tp all-reduce staged through host memory (note
#    [comm-staging]); its validation loss after step 2 too (also under sp);
#  - Llama (untied, 2 key/value heads, Qwen3's q/k norms: note
#    [tp-qknorm]'s device copies) over NCCL, each rank its own simulated GPU
#    (build/libfake_nccl.so, as in cudasim_train.sh): the 14 tp all-reduces
#    of a step (embedding 1, 2 blocks x (4 + 1 q/k norm), head 3) carried by
#    NCCL on device memory, counted by the fake;
#  - Qwen3-MoE (one sparse layer, 4 experts, top-2, the auxiliary loss on;
#    note [tp-moe] in src/model/moe.c: each expert split as the dense MLP,
#    the router's dw all-reduced) over MPI, staged;
#  - Ulysses (mesh.sp=2, note [ulysses]: the copy_block layout changes and
#    the all-to-all): GPT-2 over MPI (staged), Llama with 1 key/value head
#    (replicated on both sp ranks, its gradients summed) over NCCL, where
#    the 4 all-to-alls of a block a step (8) are send/receive groups queued
#    on the model's stream, counted by the fake, and a step waits on the
#    host once (the loss read, note [loss-on-device]): a 2-step run minus a
#    1-step run, per rank (17 a step when each exchange synchronized the
#    stream and then waited for a blocking all-to-all); both runs' measured
#    peaks equal the memory plan per category (note [memory-plan]).
# The rest of a run's host waits (CUDASIM_SYNC_STATS=1: ~730 a rank in the
# tp=2 Llama run) are outside the steps: ~570 when the final checkpoint is
# saved (src/ckpt/writer.c stages each parameter segment's shard and
# moments with a synchronous copy apiece) and ~125 at start-up (every
# device allocation is zero-filled and then waited for, src/device/cuda).
set -uo pipefail
source "$SHARC_ROOT/tests/cli/cudasim_lib.inc"
NEAR_TOL=1e-4 NEAR_N=2 # tp and sp against the CPU, 2 steps
command -v mpirun > /dev/null || { echo "no mpirun: skipped"; exit 77; }
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=16
   --train.seq_len=16 --train.batch_size=2 --train.max_steps=2 --train.threads=1 --optim.warmup_steps=2
   --ckpt.every=0"
LLAMA="--model.family=llama --model.num_kv_heads=2 --model.tie_embeddings=false --model.ff_hidden_dim=48
       --model.qk_norm=true"
MPI="timeout 120 env $NOLEAK mpirun --allow-run-as-root --oversubscribe -n 2"
same() {
  for k in loss_metrics/global_avg_loss grad_norm; do near "$(col "$1" 0 $k)" "$(col "$2" 0 $k)" "$3: $k" || exit 1; done
}
# the GPT-2 runs over MPI also validate after step 2 (note [eval-windows]): one micro-batch
for i in $(seq 1 20); do echo "pack my box with five dozen liquor jugs $((i * 7))"; done > val.txt
V="--data.val_path=val.txt --log.eval_every=2 --log.eval_batches=1"
val() { NEAR_N=1 near "$(col "$1" 0 loss_metrics/val_loss)" "$(col "$2" 0 loss_metrics/val_loss)" "$3: val_loss" || exit 1; }

# GPT-2, MPI: staged through host memory
$MPI "$CPU" train $M $V --mesh.tp=2 --train.out_dir=cg > cg.log 2>&1 || { tail -20 cg.log; die "gpt2: cpu tp run"; }
SHARC_COMM=mpi $MPI -x SHARC_COMM -x SHARC_CUBLASLT_LIB "$SIM" train $M $V --mesh.tp=2 --train.out_dir=gg \
  --train.device=cuda > gg.log 2>&1 || { tail -20 gg.log; die "gpt2: cuda tp run over MPI"; }
same gg cg "gpt2 tp=2 cuda (MPI, staged) vs cpu"
val gg cg "gpt2 tp=2 cuda (MPI, staged) vs cpu"
echo "gpt2 tp=2: cuda over MPI (staged) = cpu within 1e-4, validation too"

# Llama, NCCL on device memory
FAKE="$SHARC_BIN/libfake_nccl.so"
[ -f "$FAKE" ] || die "no $FAKE"
$MPI "$CPU" train $M --mesh.tp=2 $LLAMA --train.out_dir=cl > cl.log 2>&1 || { tail -20 cl.log; die "llama: cpu tp run"; }
SHARC_COMM=nccl SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE" FAKE_NCCL_STATS=1 \
  $MPI -x SHARC_COMM -x SHARC_NCCL_LIB -x SHARC_CUDA_DRIVER_LIB -x FAKE_NCCL_STATS -x SHARC_CUBLASLT_LIB \
  "$SIM" train $M --mesh.tp=2 $LLAMA --train.out_dir=gl --train.device=cuda > gl.log 2>&1 ||
  { tail -20 gl.log; die "llama: cuda tp run over nccl"; }
! grep -q 'collectives go through MPI' gl.log || die "nccl fell back to MPI: $(grep MPI gl.log)"
same gl cl "llama tp=2 cuda (NCCL) vs cpu"
for r in 0 1; do
  line=$(grep "^fake_nccl: rank $r:" gl.log | head -1) || die "no fake_nccl line for rank $r"
  ar=$(sed -n 's/.* \([0-9]*\) all-reduces.*/\1/p' <<< "$line")
  [ "${ar:-0}" -eq 28 ] || die "rank $r: expected the 28 tp all-reduces of 2 steps on NCCL: $line"
done
echo "llama tp=2: cuda over NCCL (28 device all-reduces a rank) = cpu within 1e-4"

# Qwen3-MoE experts under tp (note [tp-moe]), MPI: staged through host memory
MOE="--model.family=llama --model.num_kv_heads=2 --model.tie_embeddings=false --model.ff_hidden_dim=48
     --model.num_experts=4 --model.num_experts_per_tok=2 --model.moe_intermediate_size=16
     --model.output_router_logits=true"
$MPI "$CPU" train $M $MOE --model.num_layers=1 --mesh.tp=2 --train.out_dir=cm > cm.log 2>&1 ||
  { tail -20 cm.log; die "moe: cpu tp run"; }
SHARC_COMM=mpi $MPI -x SHARC_COMM -x SHARC_CUBLASLT_LIB "$SIM" train $M $MOE --model.num_layers=1 --mesh.tp=2 \
  --train.out_dir=gm --train.device=cuda > gm.log 2>&1 || { tail -20 gm.log; die "moe: cuda tp run over MPI"; }
same gm cm "qwen3-moe tp=2 cuda (MPI, staged) vs cpu"
echo "qwen3-moe tp=2: cuda over MPI (staged) = cpu within 1e-4"

# sequence parallelism: GPT-2 staged over MPI, Llama (kv heads replicated) over NCCL
$MPI "$CPU" train $M $V --mesh.sp=2 --train.out_dir=cs > cs.log 2>&1 || { tail -20 cs.log; die "gpt2: cpu sp run"; }
SHARC_COMM=mpi $MPI -x SHARC_COMM -x SHARC_CUBLASLT_LIB "$SIM" train $M $V --mesh.sp=2 --train.out_dir=gs \
  --train.device=cuda > gs.log 2>&1 || { tail -20 gs.log; die "gpt2: cuda sp run over MPI"; }
same gs cs "gpt2 sp=2 cuda (MPI, staged) vs cpu"
val gs cs "gpt2 sp=2 cuda (MPI, staged) vs cpu"
L1="--model.family=llama --model.num_kv_heads=1 --model.tie_embeddings=false --model.ff_hidden_dim=48"
$MPI "$CPU" train $M --mesh.sp=2 $L1 --train.out_dir=csl > csl.log 2>&1 || { tail -20 csl.log; die "llama: cpu sp run"; }
for n in 1 2; do # each rank's output to its own file: the exit counts are per process
  SHARC_COMM=nccl SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE" FAKE_NCCL_STATS=1 CUDASIM_SYNC_STATS=1 \
    $MPI -x SHARC_COMM -x SHARC_NCCL_LIB -x SHARC_CUDA_DRIVER_LIB -x FAKE_NCCL_STATS -x CUDASIM_SYNC_STATS \
    -x SHARC_CUBLASLT_LIB bash -c "exec \"\$0\" \"\$@\" > gsl$n.\$OMPI_COMM_WORLD_RANK.log 2>&1" \
    "$SIM" train $M --mesh.sp=2 $L1 --train.out_dir=gsl$n --train.max_steps=$n --train.device=cuda ||
    { tail -20 gsl$n.*.log; die "llama: cuda sp run over nccl ($n steps)"; }
done
same gsl2 csl "llama sp=2 (1 kv head) cuda (NCCL) vs cpu"
# the memory plan under sp on the device (note [memory-plan]): every planned
# category's measured peak at 1.000 of the plan, staged over MPI and over NCCL
for f in gs.log gsl2.0.log; do
  awk '/^  category .*peak\/plan/ { t = 1; next }
       t && $1 == "total" { t = 0 }
       t && $1 != "other" && NF >= 4 { if ($4 != "1.000") bad = 1; n++ }
       END { exit bad || n != 6 }' "$f" || { sed -n '/^measured peaks/,$p' "$f"; die "sp=2 cuda: peak != plan in $f"; }
done
hs() { sed -n 's/^cudasim: host syncs \([0-9]*\)$/\1/p' "$1"; }
for r in 0 1; do
  line=$(grep "^fake_nccl: rank $r:" gsl2.$r.log) || die "no fake_nccl line in gsl2.$r.log"
  g=$(sed -n 's/.* \([0-9]*\) send\/receive groups.*/\1/p' <<< "$line")
  [ "${g:-0}" -eq 16 ] || die "rank $r: expected the 16 sp all-to-alls of 2 steps as NCCL send/receive groups: $line"
  a=$(hs gsl1.$r.log) b=$(hs gsl2.$r.log)
  [ -n "$a" ] && [ -n "$b" ] || die "rank $r: no cudasim host sync counts ('$a', '$b')"
  [ $((b - a)) -le 1 ] || die "sp=2 over nccl, rank $r: $((b - a)) host waits in the second step, expected at most 1"
done
echo "sp=2: cuda = cpu within 1e-4 (gpt2 over MPI staged, llama with a replicated kv head over NCCL: 16" \
  "all-to-alls queued on the stream in 2 steps, 1 host wait a step)"

# tp 2 x sp 2 (note [tp-sp] in src/model/tp.h), 4 ranks over NCCL: the
# Llama above with 4 heads (a tp rank's 2 query and 1 key/value heads split
# and replicated over sp), against the CPU's 2x2; each rank's tp group and
# sp group both on device memory: tp alone's 28 all-reduces and sp alone's
# 16 all-to-alls in 2 steps
MPI4="timeout 120 env $NOLEAK mpirun --allow-run-as-root --oversubscribe -n 4"
TS="--mesh.tp=2 --mesh.sp=2 --model.num_heads=4"
$MPI4 "$CPU" train $M $LLAMA $TS --train.out_dir=cts > cts.log 2>&1 || { tail -20 cts.log; die "llama: cpu tp x sp run"; }
SHARC_COMM=nccl SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE" FAKE_NCCL_STATS=1 \
  $MPI4 -x SHARC_COMM -x SHARC_NCCL_LIB -x SHARC_CUDA_DRIVER_LIB -x FAKE_NCCL_STATS -x SHARC_CUBLASLT_LIB \
  "$SIM" train $M $LLAMA $TS --train.out_dir=gts --train.device=cuda > gts.log 2>&1 ||
  { tail -20 gts.log; die "llama: cuda tp x sp run over nccl"; }
same gts cts "llama tp=2 x sp=2 cuda (NCCL) vs cpu"
for r in 0 1 2 3; do
  line=$(grep "^fake_nccl: rank $r:" gts.log | head -1) || die "no fake_nccl line for rank $r"
  ar=$(sed -n 's/.* \([0-9]*\) all-reduces.*/\1/p' <<< "$line")
  g=$(sed -n 's/.* \([0-9]*\) send\/receive groups.*/\1/p' <<< "$line")
  [ "${ar:-0}" -eq 28 ] && [ "${g:-0}" -eq 16 ] ||
    die "rank $r: expected 28 tp all-reduces and 16 sp all-to-alls on NCCL in 2 steps: $line"
done
echo "tp=2 x sp=2: cuda over NCCL (28 all-reduces and 16 all-to-alls a rank on device memory) = cpu within 1e-4"
exit 0
