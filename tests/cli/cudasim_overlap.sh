#!/usr/bin/env bash
# timeout: 240
# Note [comm-stream] (src/fsdp/collectives.c) on the CUDA simulator with 2
# ranks over NCCL (build/libfake_nccl.so, as in cudasim_train.sh): 16-bit
# gathers and every reduction are queued on the comm stream and the compute
# stream waits only for a gather it uses, a gradient slot it reuses and, once
# a step, the reductions; the simulator's streams are real queues, so a
# missing order reads stale or NaN-poisoned memory. 2 steps each:
#  - fsdp.param_dtype bf16, reduce_dtype fp32, over 2 ranks = 1 rank (losses
#    and gradient norms within 1e-5);
#  - reduce_dtype bf16 over 2 ranks = the same 2 ranks through MPI (note
#    [comm-staging]: blocking, the path without a comm stream, with the same
#    bf16 roundings of the gradients), within 1e-5;
#  - NO_SHARD's 2 replicas (the replicas' all-reduce on the comm stream, no
#    host wait) = 1 rank within 1e-5, the all-reduces carried by NCCL;
#  - compute-stream waits for the comm stream = gathers + 1 at every step of
#    the bf16 runs (1 rank: just the 1);
#  - the memory plan = the measured peak per category for the 2-rank runs
#    (note [comm-plan]: the same device staging over NCCL and MPI), and the
#    NCCL run's 2 ranks planned on one node.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/cudasim_lib.inc"
NEAR_N=2 # each run is 2 steps
FAKE="$SHARC_BIN/libfake_nccl.so"
command -v mpirun > /dev/null && [ -f "$FAKE" ] || { echo "no mpirun or no $FAKE: skipped"; exit 77; }
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
T="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=16
   --train.seq_len=16 --train.threads=1 --optim.warmup_steps=2 --train.max_steps=2 --ckpt.every=0
   --train.device=cuda --fsdp.param_dtype=bf16"
two() { # two COMM OUT ARGS...: 2 ranks, 2 sequences each
  local comm=$1 out=$2; shift 2
  SHARC_COMM=$comm SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE" FAKE_NCCL_STATS=1 \
    timeout 100 env "$NOLEAK" mpirun --allow-run-as-root --oversubscribe -n 2 -x SHARC_COMM -x SHARC_NCCL_LIB \
    -x SHARC_CUDA_DRIVER_LIB -x FAKE_NCCL_STATS -x SHARC_CUBLASLT_LIB "$SIM" train $T --train.batch_size=2 \
    --train.out_dir=$out "$@" > $out.log 2>&1 || { tail -20 $out.log; die "$out: 2 ranks over $comm"; }
}
"$SIM" train $T --train.batch_size=4 --train.out_dir=one > one.log 2>&1 || { tail -20 one.log; die "1-rank run"; }
two nccl b2
two nccl bb2 --fsdp.reduce_dtype=bf16
two mpi bbm --fsdp.reduce_dtype=bf16
two nccl ns2 --fsdp.sharding_strategy=NO_SHARD
grep -q "^fake_nccl: rank 0: 0 all-gathers, 0 reduce-scatters, 8 all-reduces.*on simulated device memory" ns2.log ||
  die "NO_SHARD: NCCL did not carry the replicas' all-reduces: $(grep '^fake_nccl: rank 0' ns2.log)"
for k in loss_metrics/global_avg_loss grad_norm; do
  near "$(col b2 0 $k)" "$(col one 0 $k)" "bf16 over nccl vs 1 rank: $k" || exit 1
  near "$(col bb2 0 $k)" "$(col bbm 0 $k)" "bf16 reduce over nccl vs through MPI: $k" || exit 1
  near "$(col ns2 0 $k)" "$(col one 0 $k)" "NO_SHARD over nccl vs 1 rank: $k" || exit 1
done
for run in one b2 bb2; do
  jq -r '"\(."fsdp/gathers") \(."fsdp/comm_stream_waits")"' $run/metrics.jsonl | awk -v r=$run '
    { n++; want = r == "one" ? 1 : $1 + 1; if ($2 != want || (r != "one" && $1 < 4)) {
        print "FAIL: " r ": " $1 " gathers, " $2 " comm-stream waits, want " want; bad = 1 } }
    END { if (n != 2) { print "FAIL: " r ": " n " steps"; bad = 1 } exit bad }' || exit 1
done
# note [comm-plan] (src/train/memplan.c): 16-bit gathers at 2 ranks, over
# NCCL and staged through MPI, every planned category peaks at its plan
for run in b2 bb2 bbm ns2; do plan_is_peak $run || exit 1; done
! grep -q '^memory plan per rank: .*groups across nodes' b2.log || die "b2: one node's 2 ranks planned across nodes"
echo "overlap: bf16 over nccl = 1 rank, bf16 reduce = MPI's, NO_SHARD = 1 rank (1e-5); comm-stream waits = gathers + 1;"
echo "  peak = plan per category over nccl and through MPI"
exit 0
