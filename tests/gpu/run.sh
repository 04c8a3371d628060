#!/usr/bin/env bash
# tests/gpu/run.sh [BIN_DIR]: the GPU suite, run in one go on a machine with an
# NVIDIA GPU (not part of the CI suite; CI has no GPU). BIN_DIR (default build)
# holds sharc and gpu_kernels (make builds it when nvcc is found). On a machine
# without a usable GPU it prints "no GPU: <what is missing>" and exits 0.
# Prints one PASS/FAIL line per check, then "N passed, N failed"; exit 1 if any failed.
#   1. every CUDA kernel against the CPU kernel (gpu_kernels; fp32 1e-5, bf16 1e-2, bf16 attention
#      2e-2 and against a host emulation of its bf16 arithmetic)
#   2. whole-model forward + backward, GPU against CPU (gpu_model; 1e-4)
#   3. gpu_kernels under compute-sanitizer memcheck, when it is installed
#   4. sharc train --train.device=cuda trains (note [cuda-train]): 3 steps of a tiny GPT-2 and Llama,
#      losses within 1e-4 of the CPU's, with SHARC_PROFILE=1's report timed by CUDA events (note [prof]);
#      2 ranks on the one GPU (MPI, staged) within 1e-5 of 1 rank; fsdp.cpu_offload (note
#      [shard-device]) within 1e-5 of the GPU run without it, and with 2 ranks (MPI, staged) within
#      1e-5 of 1 rank without it
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

# one process per group of kernels: an abort (note [cuda-errors]) loses one group, not the suite
first=1
for group in memory elem matmul norms qknorm activations embedding rope attention kvcache xent bf16 moe attn16; do
  "$bin/gpu_kernels" "$group" > "$tmp/k.log" 2>&1; rc=$?
  if [ $first = 1 ] && [ $rc -eq 77 ]; then
    grep -m1 '^no GPU' "$tmp/k.log" || echo "no GPU"
    exit 0
  fi
  first=0
  grep -v ' passed, .* failed$' "$tmp/k.log"
  count "$tmp/k.log"
  if ! grep -q '^PASS ' "$tmp/k.log" && ! grep -q '^FAIL ' "$tmp/k.log"; then one "gpu_kernels $group ran" 1 "exit $rc, no checks"
  elif [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/k.log"; then one "gpu_kernels $group exit status" 1 "exit $rc"; fi
done

# whole model, both families, GPU against CPU (its own process: see tests/gpu/model.c)
if [ -x "$bin/gpu_model" ]; then
  "$bin/gpu_model" > "$tmp/model.log" 2>&1; rc=$?
  grep -v ' passed, .* failed$' "$tmp/model.log"
  count "$tmp/model.log"
  if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/model.log"; then one "gpu_model exit status" 1 "exit $rc"; fi
else
  one "gpu_model built" 1 "$bin/gpu_model missing"
fi

if command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$bin/gpu_kernels" > "$tmp/m.log" 2>&1; rc=$?
  one "compute-sanitizer memcheck clean on gpu_kernels" $rc "$(grep -m3 -E 'ERROR|FAIL|Invalid' "$tmp/m.log" | tr '\n' ' ')"
else
  echo "SKIP compute-sanitizer not installed"
fi

if [ -x "$bin/sharc" ]; then
  printf 'In the beginning God created the heaven and the earth.\n%.0s' {1..200} > "$tmp/t.txt"
  # small enough for the CUDA simulator too (tests/cli/cudasim.sh runs this script there)
  M="--data.path=$tmp/t.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --train.seq_len=16
     --train.batch_size=2 --train.max_steps=3 --train.threads=1 --optim.warmup_steps=2"
  near() { # cuda-run cpu-run tol: every step's loss within tol relative
    paste <(jq -r '."loss_metrics/global_avg_loss"' "$1/metrics.jsonl") <(jq -r '."loss_metrics/global_avg_loss"' "$2/metrics.jsonl") |
      awk -v t="$3" '{ d = $1 - $2; if (d < 0) d = -d; r = $2 < 0 ? -$2 : $2; if (NF != 2 || d > t * r) bad = 1 }
                     END { exit NR != 3 || bad }'
  }
  for fam in gpt2 llama; do
    X=""; [ $fam = llama ] && X="--model.family=llama --model.num_kv_heads=1 --model.ff_hidden_dim=48"
    "$bin/sharc" train $M $X --train.out_dir="$tmp/c$fam" > "$tmp/c$fam.log" 2>&1
    out=$(SHARC_PROFILE=1 "$bin/sharc" train $M $X --train.out_dir="$tmp/g$fam" --train.device=cuda 2>&1); rc=$?
    [ $rc -eq 0 ] && near "$tmp/g$fam" "$tmp/c$fam" 1e-4
    one "sharc train --train.device=cuda ($fam): 3 steps, losses within 1e-4 of the CPU" $? "exit $rc: $(tail -3 <<< "$out")"
    awk '/^# sharc profile: 2 step\(s\), times from device events/ { h = 1 }
         h && /^(fwd|bwd)\.matmul\.fc / && $2 >= 0 && $4 >= 0 { m++ }
         h && /^\(outside/ && $3 >= -0.01 { o = 1 }  h && /^\(step\)/ && $2 > 0 { s = 1 }
         / -[0-9.]+ / && h && !/^\(/ { bad = 1 }
         END { exit !(h && m == 2 && o && s && !bad) }' <<< "$out"
    one "SHARC_PROFILE=1 on cuda ($fam): a step profile timed by device events, times >= 0 within the step" $? \
      "$(grep -A4 '^# sharc profile' <<< "$out")"
  done
  out=$("$bin/sharc" train $M --fsdp.cpu_offload=true --train.out_dir="$tmp/o1" --train.device=cuda 2>&1); rc=$?
  [ $rc -eq 0 ] && near "$tmp/o1" "$tmp/ggpt2" 1e-5
  one "fsdp.cpu_offload on cuda (gpt2): losses within 1e-5 of cuda without it" $? "exit $rc: $(tail -3 <<< "$out")"
  if command -v mpirun > /dev/null; then
    "$bin/sharc" train $M --train.batch_size=4 --train.out_dir="$tmp/p1" --train.device=cuda > "$tmp/p1.log" 2>&1
    out=$(SHARC_COMM=mpi timeout 300 mpirun --allow-run-as-root --oversubscribe -n 2 "$bin/sharc" train $M \
          --train.batch_size=2 --train.out_dir="$tmp/p2" --train.device=cuda 2>&1); rc=$?
    [ $rc -eq 0 ] && near "$tmp/p2" "$tmp/p1" 1e-5
    one "2 ranks on one GPU (MPI, staged) = 1 rank within 1e-5" $? "exit $rc: $(tail -3 <<< "$out")"
    out=$(SHARC_COMM=mpi timeout 300 mpirun --allow-run-as-root --oversubscribe -n 2 "$bin/sharc" train $M \
          --fsdp.cpu_offload=true --train.batch_size=2 --train.out_dir="$tmp/o2" --train.device=cuda 2>&1); rc=$?
    [ $rc -eq 0 ] && near "$tmp/o2" "$tmp/p1" 1e-5
    one "2 ranks on one GPU with fsdp.cpu_offload (MPI, staged) = 1 rank without within 1e-5" $? "exit $rc: $(tail -3 <<< "$out")"
  else
    echo "SKIP 2 ranks on one GPU: no mpirun on PATH"
  fi
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
