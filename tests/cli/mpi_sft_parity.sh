#!/usr/bin/env bash
# timeout: 400
# SFT at N ranks against one process on the same global batch (mpi_tests
# parity, note [parity-tolerance]): samples of very uneven response lengths
# tokenized at start with the committed small tokenizer, padded to T, loss
# over response tokens only. Both normalisations (note [loss-normalization]
# in src/train/step.c): global_tokens and micro_batch give N ranks x A
# micro-batches == 1 rank x N*A. Then the split of the global batch into
# micro-batches: global_tokens does not depend on it (REF_SPLIT=1: the
# reference takes micro-batches of one sample), micro_batch does (the same
# comparison must fail), which shows each mode is wired. data.packing
# (note [packing-rule]): packed rows at 2 and 3 ranks (and tp 2 x sp 2) equal one process.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
python3 - <<'PY'
import json, random
r = random.Random(11)
words = "and the lord said unto moses behold i will send thee a great light upon the earth".split()
with open("sft.jsonl", "w") as f:
    for i in range(96):
        q = " ".join(r.choice(words) for _ in range(r.randint(1, 4)))
        a = " ".join(r.choice(words) for _ in range(r.choice([1, 1, 2, 6, 14])))
        f.write(json.dumps({"question": q, "response": a}) + "\n")
PY
sft="model.tokenizer=$SHARC_ROOT/tests/fixtures/tokenizer/small model.vocab_size=768 data.input_key=question
     data.output_key=response train.seq_len=24 model.max_seq_len=32"
runs=0
check() { mpi_check "parity sft.jsonl" "parity at" "$sft" "$@"; }
for norm in global_tokens micro_batch; do
  for n in 1 2 3 4; do
    check $n train.loss_normalization=$norm train.grad_accum=2
  done
  check 2 train.loss_normalization=$norm fsdp.sharding_strategy=NO_SHARD
  check 3 train.loss_normalization=$norm fsdp.sharding_strategy=SHARD_GRAD_OP fsdp.activation_checkpointing=true
  check 4 train.loss_normalization=$norm fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2
  check 2 train.loss_normalization=$norm model.family=llama model.num_kv_heads=1 model.tie_embeddings=false data.loss_mask=openrlhf
done
# packed rows of 64 positions hold about three samples each (at seq_len 24
# next-fit rarely fits two, and packing would change nothing)
pk="data.packing=true train.seq_len=64 model.max_seq_len=64"
out=$(mpi 2 "$SHARC_BIN/mpi_tests" parity sft.jsonl $sft $pk 2>&1) || { echo "$out" | tail; exit 1; }
spr=$(grep -m1 -o '([0-9.]* samples a row)' <<< "$out" | tr -d '(' | cut -d' ' -f1)
awk -v s="$spr" 'BEGIN { exit !(s >= 2) }' || { echo "packing put $spr samples in a row, expected >= 2"; exit 1; }
for fam in "model.family=gpt2" "model.family=llama model.num_kv_heads=1"; do
  check 2 $pk train.grad_accum=2 $fam
done
check 3 $pk fsdp.sharding_strategy=SHARD_GRAD_OP
check 2 $pk mesh.sp=2 model.family=llama model.num_heads=2 model.num_kv_heads=1 # Ulysses: every rank holds the whole rows' positions
# tp 2 x sp 2 (note [tp-sp]): GPT-2's vocabulary-parallel embedding with the packed rows' learned positions
check 4 $pk mesh.tp=2 mesh.sp=2 model.family=gpt2 model.num_heads=4
# the global batch split into micro-batches of one sample in the reference
REF_SPLIT=1 check 2 train.loss_normalization=global_tokens
if REF_SPLIT=1 mpi 2 "$SHARC_BIN/mpi_tests" parity sft.jsonl $sft train.loss_normalization=micro_batch > split.log 2>&1; then
  echo "micro_batch normalisation gave the same step with another micro-batch split: not wired?"; exit 1
fi
grep -q "loss .* at 2 ranks vs" split.log || { cat split.log; exit 1; }
echo "$runs SFT parity runs passed; micro_batch differs from global_tokens under another split, as it must"
