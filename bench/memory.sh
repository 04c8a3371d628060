#!/usr/bin/env bash
# memory.sh BUILD_DIR: peak memory per rank of GPT-2 124M (configs/gpt2-124m.yaml,
# one micro-batch of 1 x SEQ tokens, one step) at 1, 2 and 4 ranks under each
# memory feature, planned (sharc plan's table, printed at the start of the
# run) against measured (the largest rank's peak per category, printed at the
# end), in one run on this machine. Features: the baseline (FULL_SHARD),
# activation checkpointing, the embeddings and blocks 0-5 frozen, the tiled
# MLP (4 chunks), prefetch depth 3 (shared memory off, so parameters travel
# by all-gather), SHARD_GRAD_OP for scale, and at 4 ranks
# reshard_after_forward 2 (shared memory off: the post-forward slices),
# and fsdp.param_dtype bf16 computing in fp32 (bf16, SHARC_BF16=off) against
# bf16 compute with its bf16 activations (bf16_acts, SHARC_BF16=emulate:
# note [bf16-acts], the memory a CPU with AVX512_BF16 uses).
#
#   bench/memory.sh build            SEQ=1024 bench/memory.sh build
#   RANKS=1 FEATURES="bf16 bf16_acts" bench/memory.sh build
#
# Prints one line per run: ranks, feature, planned and measured GiB per
# category and in total (measured "other" holds the dataset, not planned).
set -euo pipefail
build=${1:-build}
S="$(cd "$build" && pwd)/sharc"
SEQ=${SEQ:-256}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
for i in $(seq 1 4000); do echo "the quick brown fox jumps over the lazy dog $((i % 97))"; done > text.txt
base="--config $root/configs/gpt2-124m.yaml --data.path=text.txt --data.format=text --train.batch_size=1
      --train.grad_accum=1 --train.seq_len=$SEQ --train.max_steps=1 --train.threads=1 --log.peak_tflops=1
      --ckpt.every=0 --train.overwrite_output_dir=true"
declare -A feat=(
  [baseline]=""
  [ac]="--fsdp.activation_checkpointing=true"
  [frozen]="--model.freeze_module_prefix=wte,wpe,h.0.,h.1.,h.2.,h.3.,h.4.,h.5."
  [tiled4]="--fsdp.apply_tiled_mlp=true --fsdp.tiled_num_shards=4"
  [prefetch3]="--fsdp.forward_prefetch=true --fsdp.num_to_forward_prefetch=3 --fsdp.num_to_backward_prefetch=3"
  [shard_grad_op]="--fsdp.sharding_strategy=SHARD_GRAD_OP"
  [reshard2]="--fsdp.reshard_after_forward=2"
  [bf16]="--fsdp.param_dtype=bf16"
  [bf16_acts]="--fsdp.param_dtype=bf16"
)
printf "%-5s %-14s %s\n" ranks feature "category: plan / measured GiB"
for n in ${RANKS:-1 2 4}; do
  for f in ${FEATURES:-baseline ac frozen tiled4 prefetch3 shard_grad_op reshard2 bf16 bf16_acts}; do
    [ $f = reshard2 ] && [ $n -lt 4 ] && continue # an int below the shard group: 4 ranks only
    shm=1; [ $f = prefetch3 ] || [ $f = reshard2 ] && shm=0
    bf=off; [ $f = bf16_acts ] && bf=emulate
    out=$(SHARC_COMM_SHM=$shm SHARC_BF16=$bf OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
          timeout 1200 mpirun --oversubscribe --bind-to none -x SHARC_COMM_SHM -x SHARC_BF16 -n $n \
          "$S" train $base ${feat[$f]} --train.out_dir=run 2>&1) || { echo "$n $f failed:"; echo "$out" | tail -5; exit 1; }
    line=$(awk '/^measured peaks/ { m = 1; next }
                m && $1 ~ /^(params|grads|optim|gathered|activations|comm|other|total)$/ {
                  printf "%s %s/%s  ", $1, $2, $3 }' <<< "$out")
    printf "%-5s %-14s %s\n" $n $f "$line"
  done
done
