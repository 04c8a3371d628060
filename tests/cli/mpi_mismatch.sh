#!/usr/bin/env bash
# timeout: 120
# Ranks that disagree (another model or config on one rank, another out_dir,
# ckpt.dir or ckpt.resume) all report it and exit non-zero within seconds,
# through the library and through sharc train, before writing anything.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
out=$(mpi 3 "$SHARC_BIN/mpi_tests" mismatch text.txt 2>&1); rc=$?
[ $rc -eq 0 ] || { echo "$out"; exit 1; }
[ "$(grep -c 'ranks disagree on model.num_layers' <<< "$out")" -eq 3 ] || { echo "$out"; exit 1; }

common="--data.path=text.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --train.max_steps=2 --train.out_dir=out"
start=$(date +%s)
out=$(timeout 60 mpirun --oversubscribe -n 1 "$SHARC_BIN/sharc" train $common : \
      -n 1 "$SHARC_BIN/sharc" train $common --model.num_layers=3 2>&1); rc=$?
took=$(( $(date +%s) - start ))
echo "$out" | grep 'error:' || true
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, not $rc"; echo "$out"; exit 1; }
[ "$(grep -c 'ranks disagree on model.num_layers: rank 0 has 2, rank 1 has 3' <<< "$out")" -eq 2 ] || { echo "$out"; exit 1; }
[ $took -lt 20 ] || { echo "took ${took}s"; exit 1; }
# a rank that cannot open its data stops every rank
out=$(timeout 60 mpirun --oversubscribe -n 1 "$SHARC_BIN/sharc" train $common : \
      -n 1 "$SHARC_BIN/sharc" train $common --data.path=missing.txt 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a non-zero exit, not $rc"; echo "$out"; exit 1; }
grep -q "\[rank 1\] error: data: cannot open 'missing.txt'" <<< "$out" || { echo "$out"; exit 1; }
grep -q "\[rank 0\] error: train: rank 1 failed to start" <<< "$out" || { echo "$out"; exit 1; }
# where the run writes differs on one rank: refused before anything is written
for k in train.out_dir ckpt.dir; do
  out=$(timeout 60 mpirun --oversubscribe -n 1 "$SHARC_BIN/sharc" train $common --$k=w0 : \
        -n 1 "$SHARC_BIN/sharc" train $common --$k=w1 2>&1); rc=$?
  [ $rc -eq 2 ] || { echo "$k: expected exit 2, not $rc"; echo "$out"; exit 1; }
  [ "$(grep -c "ranks disagree on $k: rank 0 has 'w0', rank 1 has 'w1'; every rank must run the same configuration" <<< "$out")" -eq 2 ] ||
    { echo "$out"; exit 1; }
  [ ! -e w0 ] && [ ! -e w1 ] && [ ! -e out ] || { echo "$k: a refused run wrote files"; ls; exit 1; }
done
out=$(timeout 60 mpirun --oversubscribe -n 1 "$SHARC_BIN/sharc" train $common --ckpt.resume=auto : \
      -n 1 "$SHARC_BIN/sharc" train $common 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "ranks disagree on ckpt.resume: rank 0 has 'auto', rank 1 has 'none'" <<< "$out" || { echo "$out"; exit 1; }
# an impossible mesh: the arithmetic in the message
out=$(mpi 3 "$SHARC_BIN/sharc" train $common --fsdp.sharding_strategy=HYBRID_SHARD --fsdp.fsdp_size=2 2>&1); rc=$?
[ $rc -ne 0 ] || { echo "$out"; exit 1; }
grep -q "world_size 3 is not a multiple of fsdp.fsdp_size 2 (3 / 2 = 1.50 replicas); set fsdp.fsdp_size to a divisor of 3 (1, 3)" <<< "$out" || { echo "$out"; exit 1; }
echo ok
