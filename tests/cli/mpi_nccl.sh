#!/usr/bin/env bash
# timeout: 90
# The NCCL backend (note [nccl]) with the test double build/libfake_nccl.so
# as libnccl and the CUDA driver: every collective against the MPI backend
# at 1-3 ranks; ranks sharing a GPU fall back to MPI with one info line; a
# missing library is one error line per rank and exit 2; and 2-rank
# training through it ends with the same weights, bit for bit, as through MPI.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
fail() { echo "$*"; exit 1; }
FAKE="$SHARC_BIN/libfake_nccl.so"
[ -f "$FAKE" ] || fail "no $FAKE"
export SHARC_NCCL_LIB="$FAKE" SHARC_CUDA_DRIVER_LIB="$FAKE"
for n in 1 2 3; do
  out=$(SHARC_COMM=nccl mpi $n "$SHARC_BIN/mpi_nccl" nccl 2>&1) || fail "$n ranks: $out"
  [ "$(grep -c '^ok nccl nccl' <<< "$out")" -eq $n ] || fail "$out"
  ! grep -q 'share GPU' <<< "$out" || fail "fell back with a GPU per rank: $out"
done
for n in 2 3; do
  out=$(SHARC_COMM=nccl mpi $n -x FAKE_CUDA_DEVICE=0 "$SHARC_BIN/mpi_nccl" fallback 2>&1) || fail "$n ranks on one GPU: $out"
  [ "$(grep -c '^ok nccl fallback' <<< "$out")" -eq $n ] || fail "$out"
  [ "$(grep -c "ranks 0 and 1 of a group of $n share GPU 0000:00:00.0" <<< "$out")" -eq 1 ] || fail "want one info line: $out"
done
make_text t.txt
A="--data.path=../t.txt --train.out_dir=run --train.max_steps=3 --train.log_every=1 --model.num_layers=2
   --model.embed_dim=32 --model.num_heads=2 --model.num_kv_heads=2 --model.ff_hidden_dim=64 --train.seq_len=16
   --train.batch_size=2"
# a missing library: one line naming it, exit 2, nothing written
mkdir -p miss && cd miss
# shellcheck disable=SC2086 # $A is a list of words
out=$(SHARC_COMM=nccl SHARC_NCCL_LIB=/nonexistent/libnccl.so.2 mpi 2 "$SHARC_BIN/sharc" train $A 2>&1); rc=$?
[ $rc -eq 2 ] || fail "missing libnccl: exit $rc, want 2: $out"
[ "$(grep -c 'error: comm: nccl: cannot load /nonexistent/libnccl.so.2' <<< "$out")" -eq 2 ] || fail "$out"
[ ! -e run ] || fail "missing libnccl: run/ written"
cd ..
# training: the same weights through the double as through MPI
mkdir -p m n
# shellcheck disable=SC2086
(cd m && SHARC_COMM=mpi mpi 2 "$SHARC_BIN/sharc" train $A > log 2>&1) || fail "mpi: $(cat m/log)"
# shellcheck disable=SC2086
(cd n && SHARC_COMM=nccl mpi 2 "$SHARC_BIN/sharc" train $A > log 2>&1) || fail "nccl: $(cat n/log)"
lm=$(grep -o 'loss [0-9.]* | lr [^|]*| grad norm [0-9.]*' m/log)
ln=$(grep -o 'loss [0-9.]* | lr [^|]*| grad norm [0-9.]*' n/log)
[ "$(wc -l <<< "$lm")" -eq 3 ] && [ "$lm" = "$ln" ] || fail "losses differ: mpi $lm, nccl $ln"
cmp m/run/model.safetensors n/run/model.safetensors || fail "weights differ after 3 steps"
echo ok
