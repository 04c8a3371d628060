#!/usr/bin/env bash
# timeout: 300
# The memory plan (note [memory-plan] in src/train/memplan.c):
#  - at 1-4 ranks, GPT-2 and Llama, FULL_SHARD / SHARD_GRAD_OP / NO_SHARD /
#    HYBRID_SHARD, activation checkpointing off and on, frozen units, bf16
#    parameters (and bf16 activations with the blocks gathered in bf16,
#    emulated), the tiled MLP, prefetch depth, MPI collectives instead of
#    shared memory, tensor parallelism (mesh.tp 2 at 2 and 4 ranks; Qwen3-MoE's
#    experts split over tp, note [tp-moe] in src/model/moe.c), Ulysses
#    sequence parallelism (sp 2 with key/value heads split and replicated,
#    tp 2 x sp 2): every planned category's measured peak equals the plan
#    (mpi_tests memplan);
#  - under mesh.sp `sharc plan` prints the table of a training run's start,
#    and that run's peaks are 1.000 of it;
#  - `sharc plan` prints a 7B and a 70B Llama at 8-1024 ranks in a few MB of
#    memory, params per rank = 4 x parameters / ranks (plus padding), and
#    --memory-per-rank names the smallest change that fits; at mesh.tp=2 the
#    7B's params per rank are 4 x (blocks / 2 + embedding, head and norms)
#    / (ranks / 2);
#  - bad input: one line, exit 2.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
L="model.family=llama model.num_kv_heads=1 model.tie_embeddings=false model.ff_hidden_dim=70"
check() { mpi_check "memplan text.txt" "memory plan at" "" "$@"; }
for n in 1 2 3 4; do check $n; done
check 2 $L
check 3 $L
check 3 model.freeze_module_prefix=wte,wpe,h.0. train.grad_accum=2
check 2 $L fsdp.param_dtype=bf16 fsdp.no_sync=true train.grad_accum=2
SHARC_BF16=emulate check 2 $L fsdp.param_dtype=bf16 fsdp.apply_tiled_mlp=true fsdp.tiled_num_shards=3 # note [bf16-acts]
# note [gathered16]: the blocks' slots in bf16: one process, SHARD_GRAD_OP's own slots, post-forward slices, prefetch
SHARC_BF16=emulate check 1 $L fsdp.param_dtype=bf16
SHARC_BF16=emulate check 2 fsdp.param_dtype=bf16 fsdp.sharding_strategy=SHARD_GRAD_OP fsdp.activation_checkpointing=true
SHARC_BF16=emulate SHARC_COMM_SHM=0 check 4 fsdp.param_dtype=bf16 fsdp.reshard_after_forward=2 fsdp.forward_prefetch=true fsdp.num_to_forward_prefetch=2
check 3 fsdp.forward_prefetch=true fsdp.limit_all_gathers=1
check 2 fsdp.apply_tiled_mlp=true fsdp.tiled_num_shards=3
check 3 $L fsdp.apply_tiled_mlp=true fsdp.tiled_num_shards=5
SHARC_COMM_SHM=0 check 3 model.num_layers=4 fsdp.forward_prefetch=true fsdp.num_to_forward_prefetch=3 fsdp.num_to_backward_prefetch=2
SHARC_COMM_SHM=0 check 4 $L fsdp.reduce_dtype=bf16
SHARC_COMM_SHM=0 check 4 fsdp.reshard_after_forward=2
check 4 mesh.tp=2 model.num_heads=4
SHARC_BF16=emulate check 2 mesh.tp=2 model.num_heads=4 fsdp.param_dtype=bf16 # note [bf16-head]
check 2 $L model.num_kv_heads=2 model.num_heads=4 mesh.tp=2
check 2 $L model.num_kv_heads=2 model.num_heads=4 mesh.tp=2 model.num_experts=4 model.num_experts_per_tok=2 model.moe_intermediate_size=16 model.mlp_only_layers=1
# Ulysses sequence parallelism (note [ulysses]): T / sp tokens per rank, the
# head-sharded q/k/v and output at T, the all-to-all buffers; GQA with the
# key/value heads split (2 over sp 2) and replicated (1 under sp 2, with a
# sliding window), Qwen3-MoE (q/k norms, experts), GPT-2, and tp 2 x sp 2
check 2 $L model.num_kv_heads=2 model.num_heads=4 train.seq_len=12 mesh.sp=2
check 2 $L model.num_heads=4 train.seq_len=12 mesh.sp=2 model.sliding_window=4
check 2 $L model.num_kv_heads=2 model.num_heads=4 train.seq_len=12 mesh.sp=2 model.qk_norm=true model.num_experts=4 model.num_experts_per_tok=2 model.moe_intermediate_size=16 model.mlp_only_layers=1
check 4 model.num_heads=4 train.seq_len=12 mesh.sp=2
check 4 $L model.num_kv_heads=2 model.num_heads=4 train.seq_len=12 mesh.tp=2 mesh.sp=2

S="$SHARC_BIN/sharc"
# sharc plan under mesh.sp prints the table a training run prints at its
# start (sp 2, GQA, sizes that show in GiB), and that run's measured peaks
# equal it in every planned category
A="--data.path=text.txt --train.max_steps=2 --model.family=llama --model.tie_embeddings=false --model.num_layers=2
   --model.embed_dim=256 --model.num_heads=8 --model.num_kv_heads=2 --model.ff_hidden_dim=512 --model.max_seq_len=256
   --train.seq_len=256 --train.batch_size=4 --log.peak_tflops=1 --ckpt.every=0 --train.threads=1 --mesh.sp=2"
# shellcheck disable=SC2086 # $A is a list of words
mpi 2 "$S" train $A --train.out_dir="$TMPDIR/sp" > sp.log 2>&1 || { tail -20 sp.log; exit 1; }
# shellcheck disable=SC2086
"$S" plan $A --ranks 2 > sp.plan
sed -n '/^memory plan per rank/,/^  total/p' sp.log | head -n "$(wc -l < sp.plan)" > sp.train
grep -q "^  mesh.sp 2 .* 128 of the 256 tokens" sp.plan && cmp -s sp.plan sp.train ||
  { echo "sharc plan under mesh.sp differs from the run's plan:"; diff sp.plan sp.train; cat sp.plan; exit 1; }
awk '/^  category .*peak\/plan/ { t = 1; next }
     t && $1 == "total" { t = 0 }
     t && $1 != "other" && NF >= 4 { if ($4 != "1.000") { print "sp 2:", $0; bad = 1 } n++ }
     END { exit bad || n != 6 }' sp.log || { sed -n '/^measured peaks/,$p' sp.log; exit 1; }
for cfg in llama-7b llama-70b; do
  for n in 8 64 1024; do
    out=$(/usr/bin/time -f "rss %M" "$S" plan --config "$SHARC_ROOT/configs/$cfg.yaml" --ranks $n --ranks-per-node 8 2>&1)
    rss=$(sed -n 's/^rss //p' <<< "$out")
    [ "$rss" -lt 65536 ] || { echo "$cfg at $n ranks: $rss KB resident"; exit 1; }
    # params per rank: 4 bytes x parameters / ranks, within the padding (16 floats per unit and rank)
    awk -v n=$n -v cfg=$cfg '
      /^memory plan per rank/ { for (i = 1; i <= NF; i++) if ($i == "parameters") p = $(i - 1) + 0 }
      $1 == "params" { got = $2 * 1024 ^ 3; want = 4 * p / n
                       if (got < want * 0.999 || got > want * 1.001 + 200 * 64) { print cfg, n, "params", got, "want", want; exit 1 }
                       ok = 1 }
      END { if (!ok) { print cfg, n, "no params line"; exit 1 } }' <<< "$out"
  done
done
# tensor parallelism: the blocks' split parameters and the embedding and
# head (vocabulary rows, note [tp-vocab]) are 1/tp per rank, the norms
# ((2 L + 1) C of llama-7b) whole
out=$("$S" plan --config "$SHARC_ROOT/configs/llama-7b.yaml" --ranks 16 --mesh.tp=2)
awk -v rep=$((65 * 4096)) '
  /^memory plan per rank/ { for (i = 1; i <= NF; i++) if ($i == "parameters") p = $(i - 1) + 0
                            if ($0 !~ /8 shard x 1 replicate x 2 tp/) { print "mesh:", $0; exit 1 } }
  $1 == "params" { got = $2 * 1024 ^ 3; want = 4 * ((p - rep) / 2 + rep) / 8
                   if (got < want * 0.999 || got > want * 1.001 + 200 * 64) { print "tp=2 params", got, "want", want; exit 1 }
                   ok = 1 }
  END { if (!ok) { print "tp=2: no params line"; exit 1 } }' <<< "$out" || { echo "$out"; exit 1; }
# 7B at 8 ranks in 24 GiB: without activation checkpointing it does not fit; the planner says what does
out=$("$S" plan --config "$SHARC_ROOT/configs/llama-7b.yaml" --ranks 8 --fsdp.activation_checkpointing=false --memory-per-rank 24G)
grep -q "^does not fit" <<< "$out" && grep -q "^smallest change: fsdp.activation_checkpointing: true" <<< "$out" || { echo "$out"; exit 1; }
out=$("$S" plan --config "$SHARC_ROOT/configs/llama-70b.yaml" --ranks 8 --ranks-per-node 8 --memory-per-rank 48GiB)
grep -q "^smallest change: [0-9]* ranks instead of 8" <<< "$out" || { echo "$out"; exit 1; }
# what never shards (activations, gathered units) does not fit 24 GiB at any number of ranks
out=$("$S" plan --config "$SHARC_ROOT/configs/llama-70b.yaml" --ranks 8 --ranks-per-node 8 --memory-per-rank 24GiB)
grep -q "^no single change fits" <<< "$out" || { echo "$out"; exit 1; }
out=$("$S" plan --config "$SHARC_ROOT/configs/llama-7b.yaml" --ranks 64 --memory-per-rank 24G)
grep -q "^fits:" <<< "$out" || { echo "$out"; exit 1; }
# bad input
bad() { # expected-message args...
  local want=$1; shift
  set +e; local out; out=$("$S" plan "$@" 2>&1); local rc=$?; set -e
  [ $rc -eq 2 ] && grep -q -- "$want" <<< "$out" || { echo "sharc plan $*: exit $rc: $out"; exit 1; }
}
bad "--ranks N is required" --config "$SHARC_ROOT/configs/llama-7b.yaml"
bad "--ranks '0': expected a whole number" --ranks 0
bad "--memory-per-rank '24Q'" --ranks 8 --memory-per-rank 24Q
bad "ranks per node, expected a divisor" --ranks 12 --ranks-per-node 8
bad "fsdp_size" --ranks 6 --fsdp.sharding_strategy=HYBRID_SHARD --fsdp.fsdp_size=4
bad "is the prefix of no parameter" --ranks 2 --model.freeze_module_prefix=h.99.
echo "sharc plan: 7B and 70B at 8-1024 ranks, suggestions and bad input"
