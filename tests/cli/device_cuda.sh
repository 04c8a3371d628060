#!/usr/bin/env bash
# timeout: 60
# train.device: the key is checked (cpu|cuda), and asking for cuda never
# crashes: without a build with nvcc, a driver, a GPU or cuBLASLt the error
# names what is missing; on a GPU machine it says training there is not
# (tests/cli/cudasim_train.sh trains on the simulator). Exit status 2 either way.
set -uo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
fail() { echo "$*"; exit 1; }
has() { grep -qF -- "$1" <<< "$2" || fail "missing '$1' in: $2"; }

out=$("$S" config --train.device=cuda 2>&1) || fail "$out"
has "device: cuda" "$out"
out=$("$S" config --train.device=tpu 2>&1); rc=$?
[ $rc -eq 2 ] || fail "train.device=tpu: exit $rc, want 2: $out"
has "train.device" "$out"; has "cuda" "$out"
printf 'In the beginning God created the heaven and the earth.\n%.0s' {1..200} > t.txt
out=$("$S" train --data.path=t.txt --train.out_dir=run --train.max_steps=1 --train.device=cuda 2>&1); rc=$?
[ $rc -eq 2 ] || fail "train.device=cuda: exit $rc, want 2: $out"
has "train.device: cuda: " "$out"
[ "$(grep -c 'train.device' <<< "$out")" -ge 1 ] || fail "$out"
grep -qiE 'not built|driver|GPU|cuBLASLt' <<< "$out" || fail "the error does not say what is missing: $out"
# the same config on the CPU trains
out=$("$S" train --data.path=t.txt --train.out_dir=run2 --train.max_steps=1 --train.device=cpu \
      --model.num_layers=1 --model.embed_dim=32 --model.num_heads=2 --model.num_kv_heads=2 --model.ff_hidden_dim=64 --train.seq_len=16 --train.batch_size=2 2>&1) || fail "$out"
exit 0
