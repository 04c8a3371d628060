#!/usr/bin/env bash
# timeout: 300
# Qwen3-MoE across ranks (note [moe], note [moe-units]): N ranks against one
# process on the same global batch, the auxiliary loss in the objective
# (per micro-batch token-weighted: N ranks equal one process), experts in the
# block unit or each its own unit (fsdp.moe_experts), FULL_SHARD and
# SHARD_GRAD_OP, at 2 and 4 ranks. Then the rigged router (SHARC_TEST_MOE_RIG:
# each rank's tokens go to a disjoint set of experts) with experts as units
# and the watchdog armed: the run ends, every rank issues the same
# collectives each step, and the metrics line counts the idle experts and
# the bytes gathered for them.
# Expert tensor parallelism (mesh.tp; note [tp-moe] in src/model/moe.c) with
# mpi_tp.sh's tolerances and optim.eps (the loss 1e-5 relative, the norm 2e-4,
# the first step's gradients 1e-5 of each tensor's scale, each rank's slices
# against one process's; the router replicated, bit for bit equal on the tp
# ranks): tp 2 at 2 ranks (experts in the block unit; each its own unit with
# SHARD_GRAD_OP and activation checkpointing's recompute), 2x2 dp x tp at 4
# ranks (each expert its own unit, two micro-batches), tp 2 x sp 2 at 4 ranks; a checkpoint written at tp 2
# resumed at one process continues the tp run's steps (loss 1e-5 relative,
# norm 2e-4) and its HF export equals the run's gathered weights; a tp that does not divide moe_intermediate_size is refused.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
moe="model.family=llama model.num_kv_heads=1 model.tie_embeddings=false model.ff_hidden_dim=40 model.qk_norm=true
     model.num_experts=4 model.num_experts_per_tok=2 model.moe_intermediate_size=16 model.norm_topk_prob=true
     model.mlp_only_layers=1 model.output_router_logits=true model.router_aux_loss_coef=0.05"
check() { mpi_check "parity text.txt" "parity at" "$moe" "$@"; }
check 2 fsdp.sharding_strategy=FULL_SHARD
check 4 fsdp.sharding_strategy=FULL_SHARD fsdp.moe_experts=true train.grad_accum=2
check 2 fsdp.sharding_strategy=SHARD_GRAD_OP fsdp.moe_experts=true fsdp.activation_checkpointing=true
check 4 fsdp.sharding_strategy=SHARD_GRAD_OP train.grad_accum=2
check 3 fsdp.sharding_strategy=FULL_SHARD fsdp.moe_experts=true fsdp.forward_prefetch=true fsdp.backward_prefetch_depth=2
tp="model.num_heads=4 model.num_kv_heads=2 tol.grad=1e-5 tol.param=2e-3 optim.eps=1e-6 tol.loss=1e-5 tol.norm=2e-4"
check 2 $tp mesh.tp=2
check 2 $tp mesh.tp=2 fsdp.sharding_strategy=SHARD_GRAD_OP fsdp.moe_experts=true fsdp.activation_checkpointing=true
check 4 $tp mesh.tp=2 fsdp.moe_experts=true train.grad_accum=2
# tp 2 x sp 2 (note [tp-sp]): the auxiliary loss off, it being each rank's slice's under sp (note [moe]'s
# "Auxiliary loss"), and mpi_sp.sh's tol.param
check 4 $tp mesh.tp=2 mesh.sp=2 train.seq_len=12 model.output_router_logits=false tol.param=5e-3 fsdp.moe_experts=true
# tp 2 -> one process: the checkpoint of step 2 continues the tp run's steps 3 and 4
T="--data.path=text.txt --model.family=llama --model.num_layers=2 --model.embed_dim=32 --model.num_heads=4
   --model.num_kv_heads=2 --model.ff_hidden_dim=40 --model.num_experts=4 --model.num_experts_per_tok=2
   --model.moe_intermediate_size=16 --model.output_router_logits=true --model.router_aux_loss_coef=0.05 --model.qk_norm=true
   --train.seq_len=12 --train.batch_size=2 --train.max_steps=4 --train.threads=1 --ckpt.every=2 --optim.eps=1e-6"
mpi 2 "$SHARC_BIN/sharc" train $T --mesh.tp=2 --train.out_dir=tp2 > tp2.log 2>&1 || { echo "tp 2 run failed"; tail -5 tp2.log; exit 1; }
"$SHARC_BIN/sharc" train $T --train.out_dir=tp1 --ckpt.resume=tp2/checkpoints/step-00000002 > tp1.log 2>&1 ||
  { echo "resume at one process failed"; tail -5 tp1.log; exit 1; }
jq -s -e '(.[0:4] | map(select(.step > 2))) as $a | .[4:] as $b | ($a | length) == 2 and ($b | length) == 2 and
  all(range(2); (($a[.]["loss_metrics/global_avg_loss"] - $b[.]["loss_metrics/global_avg_loss"]) | fabs) <= 1e-5 * ($b[.]["loss_metrics/global_avg_loss"] | fabs) and
                 (($a[.].grad_norm - $b[.].grad_norm) | fabs) <= 2e-4)' tp2/metrics.jsonl tp1/metrics.jsonl > /dev/null ||
  { echo "tp 2 checkpoint resumed at one process left the trajectory"; jq -c '[.step, .["loss_metrics/global_avg_loss"], .grad_norm]' tp2/metrics.jsonl tp1/metrics.jsonl; exit 1; }
echo "tp 2 checkpoint resumed at one process: $(jq -c '[.step, .["loss_metrics/global_avg_loss"]]' tp1/metrics.jsonl | tr '\n' ' ')"
# HF export of the tp 2 checkpoint (step 4) = the weights the tp run gathered at its end
"$SHARC_BIN/sharc" export --checkpoint tp2/checkpoints --out hf1 > /dev/null
"$SHARC_BIN/sharc" export --checkpoint tp2/model.safetensors --out hf2 > /dev/null
cmp hf1/model.safetensors hf2/model.safetensors || { echo "tp 2: checkpoint and gathered weights differ"; exit 1; }
set +e
mpi_refused "$T --train.out_dir=bad" "mesh.tp: 2 does not divide model.moe_intermediate_size 15 (15 / 2 = 7.50 per rank)" 2 \
  --mesh.tp=2 --model.moe_intermediate_size=15
set -e

# the rigged router: with E = K x N each rank's tokens go to exactly its K
# experts, so every MoE layer leaves E - K experts idle on each rank
S="$SHARC_BIN/sharc"
for n in 2 4; do
  E=$((2 * n)); I=16; C=32; A=2
  # 4 ranks: MPI all-gathers (SHARC_COMM_SHM=0) instead of shared parameters read in place
  SHARC_COMM_SHM=$((n == 4 ? 0 : 1)) SHARC_TEST_MOE_RIG=$n mpi $n "$S" train --model.family=llama --model.num_layers=2 --model.embed_dim=$C \
    --model.num_heads=2 --model.num_kv_heads=1 --model.ff_hidden_dim=40 --model.max_seq_len=16 \
    --model.num_experts=$E --model.num_experts_per_tok=2 --model.moe_intermediate_size=$I \
    --fsdp.wrap_policy.moe_experts=Qwen3MoeMLP --data.path=text.txt --train.seq_len=16 --train.batch_size=2 \
    --train.grad_accum=$A --train.max_steps=3 --train.threads=1 --train.timeout=30 --log.debug=true \
    --train.out_dir=rig$n > rig$n.out 2> rig$n.err || { echo "rigged run at $n ranks failed"; tail -5 rig$n.err; exit 1; }
  files=(); for r in $(seq 0 $((n - 1))); do files+=(rig$n/debug/rank-$r.log); done
  jq -s -e --argjson n $n '
    group_by(.step) | length == 3 and all(length == $n and
      ([.[] | with_entries(select(.key | endswith("_calls")))] | unique | length == 1) and
      (.[0]["comm/reduce_scatter_calls"] > 0) and ($n == 2 or .[0]["comm/all_gather_calls"] > 0))' "${files[@]}" > /dev/null ||
    { echo "rigged at $n ranks: the ranks issued different collectives"; jq -c '[.step, .rank,
      with_entries(select(.key | endswith("_calls")))]' "${files[@]}"; exit 1; }
  # 2 layers, both MoE: each rank, each micro-batch, 2 (E - 2) idle experts of 3 I C fp32 parameters
  idle=$((n * A * 2 * (E - 2))); bytes=$((idle * 3 * I * C * 4))
  jq -s -e --argjson i $idle --argjson b $bytes 'length == 3 and
      all(.["moe/idle_experts"] == $i and .["moe/idle_gathered_bytes"] == $b)' rig$n/metrics.jsonl > /dev/null ||
    { echo "rigged at $n ranks: expected $idle idle experts, $bytes bytes"; cat rig$n/metrics.jsonl | jq -c \
      '[.step, .["moe/idle_experts"], .["moe/idle_gathered_bytes"]]'; exit 1; }
  echo "rigged router at $n ranks: same collectives on every rank, $idle idle experts ($bytes bytes) a step"
done
