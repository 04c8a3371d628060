#!/usr/bin/env bash
# tests/gpu/run.sh [BIN_DIR]: the GPU suite, run in one go on a machine with an
# NVIDIA GPU (not part of the CI suite; CI has no GPU). BIN_DIR (default build)
# holds sharc and gpu_kernels (make builds it when nvcc is found). On a machine
# without a usable GPU it prints "no GPU: <what is missing>" and exits 0.
# Prints one PASS/FAIL line per check, then "N passed, N failed"; exit 1 if any failed.
#   1. every CUDA kernel against the CPU kernel (gpu_kernels; fp32 1e-5, bf16 1e-2)
#   2. the same under compute-sanitizer memcheck, when it is installed
#   3. sharc train --train.device=cuda fails cleanly, exit 2 (note [cuda-gate])
set -uo pipefail
bin=${1:-build}
[ -x "$bin/gpu_kernels" ] || { echo "tests/gpu/run.sh: $bin/gpu_kernels is missing: build with nvcc present (make)"; exit 1; }
pass=0 fail=0
count() { # the PASS/FAIL lines of a log
  pass=$((pass + $(grep -c '^PASS ' "$1"))); fail=$((fail + $(grep -c '^FAIL ' "$1")))
}
one() { # name ok(0/1) [detail]
  if [ "$2" -eq 0 ]; then echo "PASS $1"; pass=$((pass + 1)); else echo "FAIL $1${3:+: $3}"; fail=$((fail + 1)); fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"$bin/gpu_kernels" > "$tmp/k.log" 2>&1; rc=$?
if [ $rc -eq 77 ]; then
  grep -m1 '^no GPU' "$tmp/k.log" || echo "no GPU"
  exit 0
fi
cat "$tmp/k.log"
count "$tmp/k.log"
# a crash or an abort after some PASS lines must not read as a pass
if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/k.log"; then one "gpu_kernels exit status" 1 "exit $rc"; fi

if command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/gpu_kernels" > "$tmp/m.log" 2>&1; rc=$?
  one "compute-sanitizer memcheck clean on gpu_kernels" $rc "$(grep -m3 -E 'ERROR|FAIL|Invalid' "$tmp/m.log" | tr '\n' ' ')"
else
  echo "SKIP compute-sanitizer not installed"
fi

if [ -x "$bin/sharc" ]; then
  printf 'In the beginning God created the heaven and the earth.\n%.0s' {1..200} > "$tmp/t.txt"
  out=$("$bin/sharc" train --data.path="$tmp/t.txt" --train.out_dir="$tmp/run" --train.max_steps=1 \
        --train.device=cuda 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -qF 'train.device: cuda: ' <<< "$out"; one "sharc train --train.device=cuda: one-line error, exit 2" $? "exit $rc: $out"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
