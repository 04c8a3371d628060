#!/usr/bin/env bash
# timeout: 600
# N ranks against one process on the same global batch: every step's loss and
# the final parameters (note [parity-tolerance] in tests/mpi/mpi_tests.c), for
# FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and HYBRID_SHARD 2x2, both model families,
# with and without gradient accumulation and activation checkpointing, and
# with frozen parameters.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
check() { mpi_check "parity text.txt" "parity at" "" "$@"; }
for fam in gpt2 llama; do
  if [ $fam = llama ]; then m="model.family=llama model.num_kv_heads=1 model.tie_embeddings=false model.ff_hidden_dim=70"
  else m="model.family=gpt2"; fi
  # strategy x variant, each pair at one world size: (s + v) mod 4 gives every
  # strategy every world size 1-4 and every variant three of them (all
  # pairs, not the full cube: the cube's 48 runs per family cost a minute)
  si=0
  for s in FULL_SHARD SHARD_GRAD_OP NO_SHARD; do
    vi=0
    for v in "train.grad_accum=1" "train.grad_accum=2" "fsdp.activation_checkpointing=true" \
             "train.grad_accum=2 fsdp.activation_checkpointing=true"; do
      check $(( (si + vi) % 4 + 1 )) $m fsdp.sharding_strategy=$s $v
      vi=$((vi + 1))
    done
    si=$((si + 1))
  done
  for v in "train.grad_accum=1" "train.grad_accum=2" "fsdp.activation_checkpointing=true" \
           "train.grad_accum=2 fsdp.activation_checkpointing=true"; do
    check 4 $m fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 $v
  done
  # engine options that change the schedule, not the result
  check 3 $m fsdp.no_sync=true train.grad_accum=3
  check 3 $m fsdp.forward_prefetch=true fsdp.backward_prefetch=BACKWARD_POST
  check 3 $m fsdp.backward_prefetch=NONE fsdp.limit_all_gathers=1
  check 2 $m fsdp.reshard_after_forward=false
  # FSDP2's int (note [post-forward]): backward gathers inside groups of 2 (MPI path)
  SHARC_COMM_SHM=0 check 4 $m fsdp.reshard_after_forward=2 train.grad_accum=2 fsdp.activation_checkpointing=true
  # private shards and MPI all-gathers instead of parameters shared in place
  # (note [shared-params] in src/fsdp/shm.c; SHARC_COMM_SHM=0 also turns off
  # the shared-memory reduce-scatter)
  SHARC_COMM_SHM=0 check 3 $m fsdp.sharding_strategy=FULL_SHARD train.grad_accum=2
  SHARC_COMM_SHM=0 check 4 $m fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 fsdp.activation_checkpointing=true
  # frozen parameters (note [frozen-params]): N ranks against one process, both frozen
  if [ $fam = llama ]; then f=model.embed_tokens,model.layers.0.; else f=wte,wpe,h.0.; fi
  check 3 $m model.freeze_module_prefix=$f fsdp.activation_checkpointing=true train.grad_accum=2
  check 4 $m model.freeze_module_prefix=$f fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2
  # the tiled MLP (note [tiled-mlp]), one process tiled alike
  check 3 $m fsdp.apply_tiled_mlp=true fsdp.tiled_num_shards=3 fsdp.activation_checkpointing=true
  # bf16 parameters match a one-process run that rounds the same way (fp32
  # compute, also on a CPU with bf16 instructions)
  SHARC_BF16=off check 3 $m fsdp.param_dtype=bf16 tol.loss=1e-4 tol.norm=1e-3 tol.param=2e-3
  SHARC_BF16=off check 4 $m fsdp.param_dtype=bf16 fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 tol.loss=1e-4 tol.norm=1e-3 tol.param=2e-3
  # bf16 compute (note [bf16-compute]; emulated where the CPU has no bf16
  # instructions): note [parity-tolerance] on bf16 compute; bf16 activations
  # (note [bf16-acts]) round the attention output too: 1e-2 of the lr sum
  SHARC_BF16=emulate check 3 $m fsdp.param_dtype=bf16 optim.lr=1e-3 tol.loss=1e-4 tol.norm=1e-3 tol.param=1e-2
  SHARC_BF16=emulate check 4 $m fsdp.param_dtype=bf16 train.grad_accum=2 fsdp.activation_checkpointing=true optim.lr=1e-3 tol.loss=1e-4 tol.norm=1e-3 tol.param=1e-2
  # bf16 reduction rounds what one process never rounds
  check 3 $m fsdp.reduce_dtype=bf16 optim.lr=1e-3 tol.loss=1e-3 tol.norm=1e-2 tol.param=1
  check 4 $m fsdp.reduce_dtype=bf16 fsdp.sharding_strategy=NO_SHARD optim.lr=1e-3 tol.loss=1e-3 tol.norm=1e-2 tol.param=1
done
echo "$runs parity runs passed"
