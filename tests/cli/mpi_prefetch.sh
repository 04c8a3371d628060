#!/usr/bin/env bash
# timeout: 240
# Prefetch depth (note [prefetch-depth] in src/fsdp/fsdp.c; MindSpeed-MM's
# num_to_forward_prefetch / num_to_backward_prefetch): at depth 2-4 every
# loss, gradient norm and final parameter equals depth 1 bit for bit, more
# gathered-parameter slots are in use at once than at depth 1 (never more
# than the plan's), and limit_all_gathers still caps them. Parameters must
# travel by all-gather for prefetch to mean anything, so shared memory is
# off (SHARC_COMM_SHM=0) or parameters are 16-bit.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
L="model.family=llama model.num_kv_heads=1 model.tie_embeddings=false model.ff_hidden_dim=70"
check() { # N depth args...
  local n=$1; shift
  local out
  if ! out=$(mpi $n -x SHARC_COMM_SHM "$SHARC_BIN/mpi_tests" prefetch text.txt "$@" 2>&1); then
    echo "FAILED at $n ranks: $*"; echo "$out" | grep -v '^ok' | head -20; exit 1
  fi
  grep '^prefetch depth' <<< "$out" | sed "s|\$| [$*]|"
}
export SHARC_COMM_SHM=0
check 2 2 model.num_layers=4
check 3 3 model.num_layers=4 train.grad_accum=2
check 3 3 $L model.num_layers=4 fsdp.backward_prefetch=BACKWARD_POST fsdp.activation_checkpointing=true
check 4 4 model.num_layers=4 fsdp.limit_all_gathers=2
check 4 2 model.num_layers=3 fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2
export SHARC_COMM_SHM=1
check 2 3 model.num_layers=4 fsdp.param_dtype=bf16
