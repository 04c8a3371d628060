#!/usr/bin/env bash
# timeout: 240
# Ranks on several hosts (scripts/hosts.sh: network namespaces on a bridge,
# Open MPI over TCP between them, shared memory inside each):
#  - MPI's node is the host: a shared window inside a host, none across;
#    FULL_SHARD across hosts all-gathers over the network, HYBRID_SHARD with
#    fsdp_size = ranks per host shards inside hosts (parameters shared in
#    place) and all-reduces across them (mpi_tests nodes, 2 x 2 and 2 x 1);
#  - collectives across hosts against values computed in the test (mpi_tests comm);
#  - every strategy at 2 hosts x 2 ranks, and 3 hosts x 1, equals the
#    one-process run of the same global batch (mpi_tests parity, note
#    [parity-tolerance]); an environment variable reaches other hosts only
#    through mpirun -x (SHARC_COMM_SHM=0: private shards, MPI all-gathers).
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
source "$SHARC_ROOT/scripts/hosts.sh"
hosts_check || { echo "SKIP: $HOSTS_WHY"; exit 77; }
cd "$TMPDIR"
make_text text.txt
T="$SHARC_BIN/mpi_tests"
hosts_up 3
# the harness itself: one hostname per host, ranks placed by slots, and the
# caller's environment reaching other hosts only through -x (as over ssh)
got=$(PROBE=yes HOSTS_TIMEOUT=60 hosts_mpirun 2 -n 6 bash -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname) ${PROBE:-unset}"' | sort -n | tr '\n' ' ')
[ "$got" = "0 node0 yes 1 node0 yes 2 node1 unset 3 node1 unset 4 node2 unset 5 node2 unset " ] || { echo "placement/env: $got"; exit 1; }
got=$(PROBE=yes HOSTS_TIMEOUT=60 hosts_mpirun 1 -n 3 -x PROBE bash -c 'echo "$(hostname) $PROBE"' | sort | tr '\n' ' ')
[ "$got" = "node0 yes node1 yes node2 yes " ] || { echo "mpirun -x: $got"; exit 1; }
run() { # SLOTS N args...: N ranks, SLOTS per host
  local slots=$1 n=$2; shift 2
  local out
  if ! out=$(HOSTS_TIMEOUT=100 hosts_mpirun $slots -n $n "$@" 2>&1); then
    echo "FAILED at $n ranks, $slots per host: $*"; echo "$out" | grep -v '^ok' | head -30; exit 1
  fi
  grep -E '^(parity at|nodes:)' <<< "$out" | sed "s|\$| [$n ranks, $slots per host: ${*//$T/mpi_tests}]|" || true
}
run 2 4 "$T" nodes 2 text.txt
run 1 2 "$T" nodes 1 text.txt
run 1 3 "$T" nodes 1 text.txt
run 2 4 "$T" comm
llama="model.family=llama model.num_kv_heads=1 model.tie_embeddings=false model.ff_hidden_dim=70"
for s in FULL_SHARD SHARD_GRAD_OP NO_SHARD "HYBRID_SHARD fsdp.fsdp_size=2"; do
  run 2 4 "$T" parity text.txt fsdp.sharding_strategy=$s
done
run 2 4 "$T" parity text.txt $llama fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 train.grad_accum=2 \
    fsdp.activation_checkpointing=true
run 2 4 "$T" parity text.txt $llama fsdp.sharding_strategy=FULL_SHARD fsdp.forward_prefetch=true
run 2 4 "$T" parity text.txt fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 fsdp.param_dtype=bf16 \
    tol.loss=1e-4 tol.norm=1e-3 tol.param=2e-3
run 1 3 "$T" parity text.txt fsdp.sharding_strategy=FULL_SHARD train.grad_accum=2
run 1 3 "$T" parity text.txt $llama fsdp.sharding_strategy=NO_SHARD
# the variable reaches node1's ranks only through -x (hosts-rsh gives them a
# fresh login environment, as sshd does)
SHARC_COMM_SHM=0 run 2 4 -x SHARC_COMM_SHM "$T" nodes 2 text.txt
SHARC_COMM_SHM=0 run 2 4 -x SHARC_COMM_SHM "$T" parity text.txt fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2
echo "hosts: all runs passed"
