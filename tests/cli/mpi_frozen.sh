#!/usr/bin/env bash
# timeout: 300
# Frozen parameters (note [frozen-params] in src/fsdp/units.c), against the
# same run without freezing (mpi_tests frozen): step 1's loss, trainable
# gradients and updates bit for bit, frozen parameters unchanged for 5
# steps, exact gradient and moment bytes saved, exact reduce-scatter and
# all-reduce bytes saved; at 1-4 ranks and every strategy, for
#  - GPT-2, embeddings and block 0 frozen (the backward stops at block 1),
#  - GPT-2 BitFit (train.trainable: only biases; mixed units),
#  - Llama with the embedding, block 0 and half of block 1's fused q/k/v frozen,
#  - the head unit frozen (a unit whose gradient is never opened);
# and a run that freezes resumes only with the same frozen set.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
check() { mpi_check "frozen text.txt" "frozen at" "" "$@"; }
L="model.family=llama model.num_kv_heads=1 model.tie_embeddings=false model.ff_hidden_dim=70"
for n in 1 2 3 4; do
  strategies="FULL_SHARD"; [ $n = 2 ] || [ $n = 3 ] && strategies="FULL_SHARD SHARD_GRAD_OP NO_SHARD"
  for s in $strategies; do
    check $n fsdp.sharding_strategy=$s model.freeze_module_prefix=wte,wpe,h.0.
    check $n fsdp.sharding_strategy=$s train.trainable='*.bias'
  done
  check $n $L model.freeze_module_prefix=model.embed_tokens,model.layers.0.,model.layers.1.self_attn.q_proj
done
check 4 fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 model.freeze_module_prefix=wte,wpe,h.0.
check 4 $L fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 train.trainable='model.layers.1.*'
check 3 train.grad_accum=2 fsdp.no_sync=true fsdp.activation_checkpointing=true model.freeze_module_prefix=h.1.
check 2 train.grad_accum=2 model.freeze_module_prefix=ln_f,h.1.mlp
check 3 $L train.trainable='model.layers.*' fsdp.forward_prefetch=true fsdp.backward_prefetch=BACKWARD_POST
echo "$runs frozen runs passed"

# resume: the same frozen set continues bit for bit (a constant lr, so a 4-step run
# is the first 4 steps of a 6-step one); another set is refused by name (exit 2)
S="$SHARC_BIN/sharc"
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.threads=1 --optim.warmup_steps=2 --ckpt.every=2
   --optim.lr_decay=constant --model.freeze_module_prefix=wte,h.0. --log.peak_tflops=1"
mpi 2 "$S" train $M --train.max_steps=6 --train.out_dir=ref >/dev/null 2>&1
mpi 2 "$S" train $M --train.max_steps=4 --train.out_dir=part >/dev/null 2>&1
mpi 2 "$S" train $M --train.max_steps=6 --train.out_dir=part --ckpt.resume=auto >/dev/null 2>&1
for f in ref/checkpoints/step-00000006/*.bin; do cmp "$f" "part/checkpoints/step-00000006/$(basename $f)"; done
grep -A3 '"frozen"' part/checkpoints/step-00000006/manifest.json | grep -q '"wte.weight"' || { echo "no frozen list"; exit 1; }
set +e
out=$(mpi 2 "$S" train $M --train.max_steps=8 --train.out_dir=part --ckpt.resume=part/checkpoints/step-00000006 \
      --model.freeze_module_prefix=wte 2>&1); rc=$?
set -e
[ $rc -eq 2 ] || { echo "a resume with another frozen set exited $rc: $out"; exit 1; }
grep -q "parameter 'h.0.ln_1.weight' is frozen in the checkpoint but trains in this run" <<< "$out" || { echo "$out"; exit 1; }
echo "resume with the same frozen set bit-exact; another set refused"
