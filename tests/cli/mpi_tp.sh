#!/usr/bin/env bash
# timeout: 300
# Tensor parallelism (mesh.tp; note [tp] in src/model/tp.h) against one
# process on the same global batch: every step's loss (1e-5 relative), the
# gradient norm (2e-4), the first step's gradients element by element (1e-5
# of each tensor's scale: each rank's tp part against the matching slice of
# the full gradient) and the final parameters, and the parameters replicated
# over tp bit for bit equal on the tp ranks of a group (mpi_tests parity).
# The vocabulary-parallel head (note [tp-vocab] in src/model/tp.h) sums the
# softmax denominators and the head's input gradient over tp ranks, so every
# element of dx differs from one process's in the last bits (the step-0
# gradients agree to 5e-7 of their scale). Adam with its default eps 1e-8
# turns that into lr-sized steps on elements whose gradient cancels to ~1e-9
# (observed: h.1.mlp.c_fc.weight[426], 1.5e-9 vs 3.5e-9 at scale 2e-2, moved
# 2.6e-4 by the first step), so these runs use optim.eps 1e-6 (worst
# parameter then 1.9e-4 of the lr sum, tol.param 2e-3: the same global batch
# split into other micro-batches at ONE process already moves this config by
# 5.4e-4, REF_SPLIT, note [parity-tolerance] in tests/mpi/mpi_tests.c), and
# the later steps' loss and norm drift as under sp (mpi_families.sh): loss to
# 1e-5 relative (observed 1.6e-6 at 2x2), norm 2e-4 (observed 1.2e-4 at 2x2).
# tp 2 and 4, 2x2 FSDP x TP (the embedding and head split by vocabulary
# rows, tied in GPT-2 and untied in Llama, and once replicated: V = 257)
# under FULL_SHARD, SHARD_GRAD_OP (with activation checkpointing), NO_SHARD, both families, Qwen2's q/k/v biases, Qwen3's
# q/k norms (their gradients summed over tp, note [tp-qknorm]; 2x2 with two
# micro-batches), a tiled MLP;
# checkpoints both ways (a one-process checkpoint resumed at 2x2 exactly; a
# 2x2 run's checkpoint read at one process equal to its gathered weights);
# validation at tp 2 and 2x2 against one process (val_parity, mpi_lib.inc);
# then bad meshes refused at start with the arithmetic, exit status 2.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
check() { mpi_check "parity text.txt" "parity at" "model.num_heads=4 train.seq_len=12 tol.grad=1e-5 tol.param=2e-3 optim.eps=1e-6 tol.loss=1e-5 tol.norm=2e-4" "$@"; }
llama="model.family=llama model.tie_embeddings=false model.ff_hidden_dim=70 model.num_kv_heads=2"
for m in "model.family=gpt2" "$llama"; do
  check 2 $m mesh.tp=2
  check 4 $m mesh.tp=2 train.grad_accum=2
done
check 4 model.family=gpt2 mesh.tp=2 fsdp.sharding_strategy=SHARD_GRAD_OP fsdp.activation_checkpointing=true
check 4 $llama mesh.tp=2 fsdp.sharding_strategy=NO_SHARD model.qkv_bias=true
check 2 $llama mesh.tp=2 fsdp.apply_tiled_mlp=true fsdp.tiled_num_shards=3
# q/k norms: step-0 gradients to 4e-7 of their scale (5e-1 off without the
# tp sum)
check 4 $llama mesh.tp=2 model.qk_norm=true train.grad_accum=2
# a vocabulary tp does not divide: embedding and head replicated (note [tp-vocab])
check 2 model.family=gpt2 mesh.tp=2 model.vocab_size=257
check 4 $llama model.num_kv_heads=4 model.ff_hidden_dim=72 fsdp_tensor_parallel_size=4

# checkpoints stay topology-free: one process -> 2x2 FSDP x TP (exact values, then parity)
mpi 1 "$SHARC_BIN/mpi_tests" ckpt_save ck ref.st text.txt $llama model.num_heads=4 train.grad_accum=4 > /dev/null
out=$(mpi 4 "$SHARC_BIN/mpi_tests" ckpt_load ck ref.st text.txt $llama model.num_heads=4 mesh.tp=2 \
      train.grad_accum=2 2>&1) || { echo "ckpt_load at 2x2 failed: $out"; exit 1; }
grep -q "saved values exact" <<< "$out" || { echo "$out"; exit 1; }
# 2x2 -> one process: the checkpoint's ranges read at one rank give the weights the run gathered
common="--data.path=text.txt --train.max_steps=2 --model.num_layers=1 --model.embed_dim=48 --model.num_heads=4 --train.seq_len=12 --train.batch_size=1 --log.peak_tflops=1"
mpi 4 "$SHARC_BIN/sharc" train $common --train.out_dir=run --tensor_parallel_size=2 > /dev/null 2>&1
"$SHARC_BIN/sharc" export --checkpoint run/checkpoints --out hf1 > /dev/null
"$SHARC_BIN/sharc" export --checkpoint run/model.safetensors --out hf2 > /dev/null
cmp hf1/model.safetensors hf2/model.safetensors || { echo "checkpoint and gathered weights differ"; exit 1; }

# validation (log.eval_every, note [eval-windows] in sharc/eval.h): tp 2 and
# 2x2 FSDP x TP against one process on the same global batches (2
# micro-batches at one rank and at tp 2, one a stream at 2x2): windows and
# targets exactly, the loss after steps 1 and 2 within the training loss's
# 1e-5 relative (the weights carry the same drift); 3 micro-batches of 2
# windows, so at 2x2 the second stream's second forward is fully masked
make_val val.txt
VAL_ARGS="${common/--train.batch_size=1/--train.batch_size=2} --data.val_path=val.txt --log.eval_every=1 --log.eval_batches=3 --ckpt.every=0 --train.threads=1"
val_mesh tp --mesh.tp=2

# tp 2 x sp 2 (note [tp-sp] in src/model/tp.h): Ulysses over each tp rank's
# heads, against one process as above; tol.param is mpi_sp.sh's 5e-3 (sp
# splits each weight gradient's token sum: observed 1.4e-3 of the lr sum,
# the loss to 1.3e-7 relative). Local key/value heads replicated over sp
# (Llama 2 kv heads: 1 a tp rank) and split (4: 2 a tp rank), GPT-2's
# vocabulary-parallel embedding with the slice's learned positions, q/k norms
# under NO_SHARD with activation checkpointing
check_sp() { mpi_check "parity text.txt" "parity at" "model.num_heads=4 train.seq_len=12 tol.grad=1e-5 tol.param=5e-3 optim.eps=1e-6 tol.loss=1e-5 tol.norm=2e-4 mesh.tp=2 mesh.sp=2" "$@"; }
check_sp 4 $llama
check_sp 4 $llama model.num_kv_heads=4 train.grad_accum=2
check_sp 4 model.family=gpt2
check_sp 4 $llama model.qk_norm=true fsdp.sharding_strategy=NO_SHARD fsdp.activation_checkpointing=true
# its validation against the one-process run above (one data stream of 2 micro-batches)
val_run 4 vtpsp --train.grad_accum=2 --mesh.tp=2 --mesh.sp=2
val_parity v1 vtpsp 1e-5
# a tp 2 x sp 2 checkpoint resumed at one process continues the trajectory:
# steps 3 and 4 from the step-2 checkpoint equal the 4-rank run's and a
# one-process run's (loss and gradient norm to 1e-5 relative; observed 5e-7)
R="--data.path=text.txt --train.max_steps=4 --model.num_layers=1 --model.embed_dim=48 --model.num_heads=4 --train.seq_len=12 --train.batch_size=2 --log.peak_tflops=1 --ckpt.every=2 --train.threads=1"
R="$R --model.family=llama --model.tie_embeddings=false --model.ff_hidden_dim=70 --model.num_kv_heads=2"
mpi 4 "$SHARC_BIN/sharc" train $R --train.out_dir=ts4 --mesh.tp=2 --mesh.sp=2 > ts4.log 2>&1 || { tail ts4.log; exit 1; }
"$SHARC_BIN/sharc" train $R --train.out_dir=ts1 > ts1.log 2>&1 || { tail ts1.log; exit 1; }
"$SHARC_BIN/sharc" train $R --train.out_dir=tsr --ckpt.resume=ts4/checkpoints/step-00000002 > tsr.log 2>&1 ||
  { tail tsr.log; exit 1; }
steps() { jq -c '[.step, .["loss_metrics/global_avg_loss"], .grad_norm]' "$1/metrics.jsonl"; }
# shellcheck disable=SC2016 # jq's variables
jq -e -n --slurpfile a <(steps ts1) --slurpfile b <(steps ts4) --slurpfile c <(steps tsr) '
  def abs: if . < 0 then -. else . end;
  def near($x; $y): (($x - $y) | abs) <= 1e-5 * ($x | abs);
  ($a | length) == 4 and ($b | length) == 4 and ($c | length) == 2 and
  all(range(4) as $i | $a[$i] as $x | $b[$i] as $y | $x[0] == $y[0] and near($x[1]; $y[1]) and near($x[2]; $y[2]); .) and
  all(range(2) as $i | $a[$i + 2] as $x | $c[$i] as $y | $x[0] == $y[0] and near($x[1]; $y[1]) and near($x[2]; $y[2]); .)
  ' > /dev/null || { echo "tp 2 x sp 2 resume differs:"; for d in ts1 ts4 tsr; do steps $d | tr '\n' ' '; echo; done; exit 1; }
grep -q "resumed from ts4/checkpoints/step-00000002 at step 2 (written by 4 ranks" tsr.log || { tail tsr.log; exit 1; }

# bad meshes: refused at start with the arithmetic, exit 2, on every rank
common="$common --train.out_dir=$TMPDIR/bad"
bad() { mpi_refused "$common" "$@"; }
set +e
bad "mesh: world_size 3 is not a multiple of mesh.sp 1 x mesh.tp 2 (3 / 2 = 1.50 data-parallel ranks)" 3 --mesh.tp=2
bad "mesh.tp: 3 does not divide model.num_heads 4 (4 / 3 = 1.33 per rank)" 3 --fsdp_tensor_parallel_size=3
bad "mesh.tp: 4 does not divide model.num_kv_heads 2 (2 / 4 = 0.50 per rank)" 4 --mesh.tp=4 --model.family=llama --model.num_kv_heads=2
bad "mesh.tp: 2 does not divide model.ff_hidden_dim 65 (65 / 2 = 32.50 per rank)" 2 --mesh.tp=2 --model.family=llama --model.ff_hidden_dim=65
bad "mesh.sp: 2 does not divide the query heads of a tp rank (model.num_heads 6 / mesh.tp 2 = 3; 3 / 2 = 1.50 heads per rank)" 4 --mesh.tp=2 --mesh.sp=2 --model.num_heads=6
bad "mesh.sp: 2 and the key/value heads of a tp rank (model.num_kv_heads 6 / mesh.tp 2 = 3): neither divides the other" 4 --mesh.tp=2 --mesh.sp=2 --model.family=llama --model.num_heads=12 --model.num_kv_heads=6
set -e
echo "$runs tensor-parallel parity runs, 3 checkpoint round trips and 3 validations passed, 6 bad meshes refused"
