#!/usr/bin/env bash
# tests/gpu/run.sh [BIN_DIR]: the GPU suite, run in one go on a machine with an
# NVIDIA GPU (not part of the CI suite; CI has no GPU). BIN_DIR (default build)
# holds sharc, gpu_kernels and gpu_model (make builds them when nvcc is found).
# On a machine without a usable GPU it prints "no GPU: <what is missing>" and exits 0.
# Prints one PASS/FAIL line per check (a SKIP line for what this machine cannot
# run), then "N passed, N failed"; exit 1 if any failed.
#   1. every CUDA kernel against the CPU kernel (gpu_kernels; fp32 1e-5, bf16 1e-2, bf16 attention
#      2e-2 and against a host emulation of its bf16 arithmetic)
#   2. whole-model forward + backward, GPU against CPU (gpu_model; 1e-4)
#   3. the 20-step PyTorch fixture trajectories (tests/fixtures/{gpt2,llama}_train.safetensors;
#      SHARC_FIXTURES names another folder) on the GPU in fp32 (gpu_model torch): every loss within
#      1e-4 of PyTorch's; step-0 gradients, norms, lr and final weights within
#      tests/test_torch_parity.c's tolerances
#   4. sharc train --train.device=cuda trains (note [cuda-train]): 3 steps of a tiny GPT-2 and Llama,
#      losses within 1e-4 of the CPU's, with SHARC_PROFILE=1's report timed by CUDA events (note [prof]);
#      fsdp.cpu_offload (note [shard-device]) within 1e-5 of the GPU run without it, and its
#      overlapped optimizer (note [offload-overlap]) = SHARC_OFFLOAD_OVERLAP=0 bit for bit (not under
#      the simulator: tests/cli/cudasim_offload.sh), and optim.offload_dir (the moments in a file) = it
#      bit for bit (likewise)
#   5. 2 and 3 ranks on the one GPU (MPI, staged) = 1 rank within 1e-5 (losses and gradient norms),
#      every strategy: FULL_SHARD (prefetch as default, all on, all off), SHARD_GRAD_OP, NO_SHARD;
#      fsdp.cpu_offload at 2 ranks (MPI, staged), FULL_SHARD and NO_SHARD (not under the simulator:
#      tests/cli/cudasim_offload.sh), within 1e-5 of 1 rank without it;
#      HYBRID_SHARD 2x2 at 4 ranks; NCCL (SHARC_COMM=nccl) at 1 rank = the default run; a
#      checkpoint saved on the GPU at 2 ranks, resumed on the CPU at 3 ranks, continues within 1e-4
#      of an uninterrupted CPU run
#   6. a bf16 run of `make run`'s model (the default config, 400 steps, on generated text) ends
#      within 2% of the fp32 run's loss after the same steps
#   7. with 2 or more GPUs (nvidia-smi -L): 2 ranks over NCCL, a GPU each (the trainer takes GPU
#      local rank % GPUs, note [gpu-of-rank]) = 1 rank within 1e-5, and the compute stream
#      waits for the comm stream once per gather plus once a step (note [comm-stream]); mesh.sp 2
#      (Llama, 1 key/value head) over NCCL = the CPU's mesh.sp 2 within 1e-4 (note [ulysses]),
#      its validation loss too (note [eval-windows]); mesh.tp 2 with Qwen3-MoE's experts split over
#      tp (note [tp-moe]) over NCCL = the CPU's mesh.tp 2 within 1e-4; with 4 GPUs mesh.tp 2 x
#      mesh.sp 2 over NCCL = the CPU's 2x2 within 1e-4 (note [tp-sp])
#   8. compute-sanitizer (on PATH or in /usr/local/cuda/bin): memcheck over gpu_kernels and over a
#      2-step sharc train on cuda; racecheck and synccheck over the kernel groups with shared
#      memory or barriers (elem, norms, qknorm, attention, xent, attn16, vocab)
# Under the CUDA simulator (BIN_DIR's sharc is built on tests/cudasim: tests/cli/cudasim.sh runs
# `run.sh build/sim`) the slow checks run smaller, each saying so: 3 runs 2 steps of each fixture
# (no final weights), 5 2 steps of 2 strategies and shapes (NO_SHARD with all prefetch on at 2
# ranks, FULL_SHARD at 3), 6 a 2-layer stand-in for 6 steps (the same 2% bound); 7 is left to
# tests/cli/cudasim_overlap.sh and cudasim_train.sh (2 ranks over the fake NCCL); 8 is skipped.
# There, for the suite's time, the single-threaded simulated runs go two at a time (kernel groups,
# gpu_model beside its torch fixtures, 6's fp32 and bf16 runs), and 5's 2-rank GPU run that saves
# the checkpoint stops right after that save (SHARC_CKPT_KILL_AT=after-latest).
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
# the CUDA simulator (tests/cudasim) in place of a GPU: its binaries export its symbols
sim=0
nm -D --defined-only "$bin/sharc" 2> /dev/null | grep ' _ZN7cudasim' > /dev/null && sim=1 # (no -q: pipefail)

# one process per group of kernels: an abort (note [cuda-errors]) loses one group, not the suite
groups="memory elem matmul norms fused qknorm activations embedding rope attention kvcache xent bf16 gelu_epilogue moe attn16 vocab copy_block"
if [ $sim = 1 ]; then # the simulator: one thread a process, so two groups at a time (read back in order below)
  for group in $groups; do
    [ "$(jobs -rp | wc -l)" -lt 2 ] || wait -n
    (OMP_NUM_THREADS=1 "$bin/gpu_kernels" "$group" > "$tmp/k-$group.log" 2>&1; echo $? > "$tmp/k-$group.rc") &
  done
  wait
fi
first=1
for group in $groups; do
  if [ $sim = 1 ]; then mv "$tmp/k-$group.log" "$tmp/k.log"; rc=$(cat "$tmp/k-$group.rc" 2> /dev/null || echo 1); else
    "$bin/gpu_kernels" "$group" > "$tmp/k.log" 2>&1; rc=$?
  fi
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
fixtures=${SHARC_FIXTURES:-$(cd "$(dirname "$0")/.." && pwd)/fixtures}
if [ -x "$bin/gpu_model" ]; then
  fsteps=""
  [ $sim = 1 ] && fsteps=2 && echo "(the CUDA simulator: 2 steps of each PyTorch fixture, not 20)"
  # the simulator: the fixtures' process beside the next one (one thread each), read back below
  [ $sim = 1 ] && { OMP_NUM_THREADS=1 "$bin/gpu_model" torch "$fixtures" $fsteps > "$tmp/torch.log" 2>&1; echo $? > "$tmp/torch.rc"; } &
  "$bin/gpu_model" > "$tmp/model.log" 2>&1; rc=$?
  grep -v ' passed, .* failed$' "$tmp/model.log"
  count "$tmp/model.log"
  if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/model.log"; then one "gpu_model exit status" 1 "exit $rc"; fi
else
  one "gpu_model built" 1 "$bin/gpu_model missing"
fi

# the PyTorch fixture trajectories on the GPU (gpu_model torch: see tests/gpu/model.c)
if [ -x "$bin/gpu_model" ]; then
  if [ $sim = 1 ]; then wait; rc=$(cat "$tmp/torch.rc" 2> /dev/null || echo 1); else "$bin/gpu_model" torch "$fixtures" $fsteps > "$tmp/torch.log" 2>&1; rc=$?; fi
  grep -v ' passed, .* failed$' "$tmp/torch.log"
  count "$tmp/torch.log"
  if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/torch.log"; then one "gpu_model torch exit status" 1 "exit $rc"; fi
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
  # note [offload-overlap]: the optimizer on its host thread = at the step's end, bit for bit (the
  # tensor bytes); under the simulator tests/cli/cudasim_offload.sh checks it
  if [ $sim = 0 ]; then
    out=$(SHARC_OFFLOAD_OVERLAP=0 "$bin/sharc" train $M --fsdp.cpu_offload=true --train.out_dir="$tmp/o0" \
      --train.device=cuda 2>&1); rc=$?
    tb() { tail -c +$((9 + $(od -An -tu8 -N8 "$1"))) "$1"; }
    [ $rc -eq 0 ] && cmp -s <(tb "$tmp/o1/model.safetensors") <(tb "$tmp/o0/model.safetensors")
    one "fsdp.cpu_offload: the overlapped optimizer = SHARC_OFFLOAD_OVERLAP=0, final weights bit for bit" $? \
      "exit $rc: $(tail -3 <<< "$out")"
    # note [optim-offload-overlap] (src/optim/adamw.c): the moments in a file, streamed by the host thread
    mkdir -p "$tmp/od"
    out=$("$bin/sharc" train $M --optim.offload_dir="$tmp/od" --optim.offload_sub_group_size=1024 \
      --train.out_dir="$tmp/o3" --train.device=cuda 2>&1); rc=$?
    [ $rc -eq 0 ] && cmp -s <(tb "$tmp/o1/model.safetensors") <(tb "$tmp/o3/model.safetensors")
    one "optim.offload_dir on cuda (implies cpu_offload) = fsdp.cpu_offload, final weights bit for bit" $? \
      "exit $rc: $(tail -3 <<< "$out")"
  fi
  # the loss and gradient norm of STEPS steps from FIRST on (default 1) of a run against a reference's
  same() { # run ref tol steps [first]
    local f=${5:-1}
    local q="select(.step >= $f and .step < $f + $4 and .grad_norm != null) | \"\(.\"loss_metrics/global_avg_loss\") \(.grad_norm)\""
    paste <(jq -r "$q" "$1/metrics.jsonl" 2> /dev/null) <(jq -r "$q" "$2/metrics.jsonl" 2> /dev/null) |
      awk -v t="$3" -v n="$4" '
        { for (i = 1; i <= 2; i++) { d = $i - $(i + 2); if (d < 0) d = -d; r = $(i + 2) < 0 ? -$(i + 2) : $(i + 2)
            if (NF != 4 || !(d <= t * r)) bad = 1; if (r > 0 && d / r > w) w = d / r } }
        END { printf "worst rel %.2g over %d steps", w, NR; exit NR != n || bad }'
  }
  ns=3 SS="" # steps of the multi-rank checks (the simulator: 2)
  [ $sim = 1 ] && ns=2 SS="--train.max_steps=2"
  mpi() { # ranks out args...: sharc train over mpirun (SHARC_COMM mpi: ranks on one GPU, staged)
    local n=$1 out=$2; shift 2
    SHARC_COMM=${COMM:-mpi} timeout 300 mpirun --allow-run-as-root --oversubscribe -n "$n" -x SHARC_COMM \
      ${MPIX:-} "$bin/sharc" train "$@" --train.out_dir="$tmp/$out" > "$tmp/$out.log" 2>&1
  }
  # NCCL on a GPU: SHARC_NCCL_LIB, else the loader's, else CUDA's or PyTorch's wheel (not packed: scripts/gpu_pack.sh)
  if [ $sim = 0 ] && [ -z "${SHARC_NCCL_LIB:-}" ]; then
    found=""
    for d in ${LD_LIBRARY_PATH//:/ } /usr/local/cuda/lib64 \
      "$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0] + "/lib")' 2> /dev/null)"; do
      [ -n "$d" ] && [ -e "$d/libnccl.so.2" ] && found="$d/libnccl.so.2" && break
    done
    [ -z "$found" ] && ldconfig -p 2> /dev/null | grep -q 'libnccl\.so\.2 ' && found=libnccl.so.2
    [ -n "$found" ] && export SHARC_NCCL_LIB="$found"
    echo "(NCCL: ${found:-none found})"
  fi
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
    # note [offload-replicas] (src/fsdp/collectives.c): the replicas' all-reduce of host gradient shards
    # (under the simulator tests/cli/cudasim_offload.sh checks it, against the CPU)
    if [ $sim = 0 ]; then
      out=$(SHARC_COMM=mpi timeout 300 mpirun --allow-run-as-root --oversubscribe -n 2 "$bin/sharc" train $M \
            --fsdp.cpu_offload=true --fsdp.sharding_strategy=NO_SHARD --train.batch_size=2 --train.out_dir="$tmp/o4" \
            --train.device=cuda 2>&1); rc=$?
      [ $rc -eq 0 ] && near "$tmp/o4" "$tmp/p1" 1e-5
      one "2 ranks NO_SHARD with fsdp.cpu_offload (MPI, staged) = 1 rank without within 1e-5" $? \
        "exit $rc: $(tail -3 <<< "$out")"
    fi
    # every strategy at 2 and 3 ranks (global batch 4 and 6), HYBRID_SHARD 2x2 at 4 ranks (global 4)
    STRATS="2:FULL_SHARD:--fsdp.forward_prefetch=true:--fsdp.backward_prefetch=BACKWARD_POST
      2:FULL_SHARD:--fsdp.backward_prefetch=NONE:--fsdp.reshard_after_forward=false 2:SHARD_GRAD_OP 2:NO_SHARD
      3:FULL_SHARD 3:NO_SHARD 3:SHARD_GRAD_OP 3:FULL_SHARD:--fsdp.forward_prefetch=true 4:HYBRID_SHARD:--fsdp.fsdp_size=2"
    if [ $sim = 1 ]; then
      echo "(the CUDA simulator: 2 steps of 2 strategies and shapes, not 3 steps of 9)"
      STRATS="2:NO_SHARD:--fsdp.forward_prefetch=true:--fsdp.backward_prefetch=BACKWARD_POST 3:FULL_SHARD"
    fi
    "$bin/sharc" train $M $SS --train.batch_size=6 --train.out_dir="$tmp/q6" --train.device=cuda > "$tmp/q6.log" 2>&1
    k=0
    for c in $STRATS; do
      IFS=: read -r n strat extra <<< "$c"
      b=$((4 / n)) ref=p1
      [ "$n" = 3 ] && b=2 ref=q6
      k=$((k + 1))
      mpi "$n" s$k $M $SS --train.batch_size=$b --train.device=cuda --fsdp.sharding_strategy=$strat ${extra//:/ }
      rc=$?
      why=$(same "$tmp/s$k" "$tmp/$ref" 1e-5 $ns); ok=$?
      [ $rc -eq 0 ] || ok=1
      one "$n ranks on one GPU, $strat${extra:+ ${extra//:/ }} = 1 rank within 1e-5 (losses, grad norms)" $ok \
        "exit $rc, $why: $(tail -2 "$tmp/s$k.log" | tr '\n' ' ')"
    done
    # NCCL at 1 rank (the simulator: its fake, build/libfake_nccl.so) = the default run
    NC=()
    [ $sim = 1 ] && NC=(SHARC_NCCL_LIB="$bin/../libfake_nccl.so" SHARC_CUDA_DRIVER_LIB="$bin/../libfake_nccl.so")
    env SHARC_COMM=nccl "${NC[@]}" timeout 300 "$bin/sharc" train $M --train.batch_size=4 --train.device=cuda \
      --train.out_dir="$tmp/nc1" > "$tmp/nc1.log" 2>&1; rc=$?
    why=$(same "$tmp/nc1" "$tmp/p1" 1e-5 3); ok=$?
    [ $rc -eq 0 ] && ! grep -q 'go through MPI' "$tmp/nc1.log" || ok=1
    one "NCCL (SHARC_COMM=nccl) at 1 rank = the default run within 1e-5" $ok \
      "exit $rc, $why: $(tail -2 "$tmp/nc1.log" | tr '\n' ' ')"
    # a checkpoint saved on the GPU at 2 ranks, resumed on the CPU at 3 ranks (global batch 6),
    # against an uninterrupted 1-rank CPU run: steps 3-4 within 1e-4 (GPU and CPU kernels sum in
    # other orders, as in tests/cli/cudasim_train.sh's resumes across devices)
    C="$M --train.max_steps=4 --ckpt.every=2 --ckpt.keep=2"
    "$bin/sharc" train $C --train.batch_size=6 --train.out_dir="$tmp/cc1" > "$tmp/cc1.log" 2>&1
    if [ $sim = 1 ]; then # the simulator: cg2 stops at the checkpoint resumed below (exit 86, SHARC_CKPT_KILL_AT)
      SHARC_CKPT_KILL_AT=after-latest SHARC_CKPT_KILL_STEP=2 MPIX="-x SHARC_CKPT_KILL_AT -x SHARC_CKPT_KILL_STEP" \
        mpi 2 cg2 $C --train.batch_size=3 --train.device=cuda; rc=$?
      [ $rc -eq 86 ] && grep -q "killed at 'after-latest' of step 2" "$tmp/cg2.log" && rc=0
    else
      mpi 2 cg2 $C --train.batch_size=3 --train.device=cuda; rc=$?
    fi
    mpi 3 cr3 $C --train.batch_size=2 --ckpt.resume="$tmp/cg2/checkpoints/step-00000002"; rc2=$?
    why=$(same "$tmp/cr3" "$tmp/cc1" 1e-4 2 3); ok=$?
    [ $rc -eq 0 ] && [ $rc2 -eq 0 ] || ok=1
    one "a checkpoint saved on the GPU at 2 ranks, resumed on the CPU at 3 ranks = an uninterrupted CPU run within 1e-4" \
      $ok "exit $rc/$rc2, $why: $(tail -2 "$tmp/cr3.log" | tr '\n' ' ')"
  else
    echo "SKIP 2, 3 and 4 ranks on one GPU, NCCL at 1 rank, checkpoints across ranks and devices: no mpirun on PATH"
  fi

  # a bf16 run of `make run`'s model against the fp32 run: the last step's loss within 2%
  text() { # N lines of pseudo-random words from a skewed vocabulary (a loss that stays well above 0)
    awk -v n="$1" 'BEGIN { srand(7)
      nw = split("the of and to in a is that for it as was with be by on not he this are or his from at which " \
                 "but have an they you were her she there their one all we can has more will said unto", w, " ")
      for (i = 0; i < n; i++) { l = ""; k = 4 + int(rand() * 9)
        for (j = 0; j < k; j++) l = l w[1 + int(rand() * rand() * nw)] " "
        print l "." } }'
  }
  if [ $sim = 1 ]; then
    echo "(the CUDA simulator: a 2-layer stand-in for make run's model, 6 steps)"
    text 400 > "$tmp/w.txt"
    R="--data.path=$tmp/w.txt --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --train.seq_len=16
       --train.batch_size=4 --train.max_steps=6 --train.threads=1 --optim.warmup_steps=2 --optim.lr=1e-2"
    what="a 2-layer stand-in for make run's model, 6 steps"
  else
    text 40000 > "$tmp/w.txt"
    R="--data.path=$tmp/w.txt"
    what="make run's model (the default config)"
  fi
  for dt in fp32 bf16; do
    if [ $sim = 1 ]; then # the simulator: one thread a run, so both at once
      (timeout 600 "$bin/sharc" train $R --train.device=cuda --fsdp.param_dtype=$dt --train.out_dir="$tmp/r$dt" \
        > "$tmp/r$dt.log" 2>&1; echo $? > "$tmp/r$dt.rc") &
      continue
    fi
    timeout 600 "$bin/sharc" train $R --train.device=cuda --fsdp.param_dtype=$dt --train.out_dir="$tmp/r$dt" \
      > "$tmp/r$dt.log" 2>&1; rc=$?
    [ $rc -eq 0 ] || break
  done
  [ $sim = 1 ] && wait && rc=$(( $(cat "$tmp/rfp32.rc" 2> /dev/null || echo 1) | $(cat "$tmp/rbf16.rc" 2> /dev/null || echo 1) ))
  loss() { jq -r '."loss_metrics/global_avg_loss" // empty' "$1" 2> /dev/null; }
  lf=$(loss "$tmp/rfp32/metrics.jsonl" | tail -1) lb=$(loss "$tmp/rbf16/metrics.jsonl" | tail -1)
  l0=$(loss "$tmp/rfp32/metrics.jsonl" | head -1)
  [ $rc -eq 0 ] && grep -q "matrix products in bf16" "$tmp/rbf16.log" &&
    awk -v a="$lb" -v b="$lf" -v z="$l0" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.02 * b && b < 0.9 * z) }'
  one "bf16 on cuda, $what: the last loss within 2% of the fp32 run's (which fell below 0.9 x its first)" $? \
    "exit $rc: bf16 $lb, fp32 $lf (first step $l0): $(tail -2 "$tmp/rbf16.log" | tr '\n' ' ')"

  # 2 GPUs over real NCCL
  ngpu=0
  command -v nvidia-smi > /dev/null && ngpu=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
  if [ $sim = 1 ]; then # the same checks as cudasim_overlap.sh and cudasim_train.sh's nccl part
    echo "(the CUDA simulator: 2 ranks over NCCL are checked by tests/cli/cudasim_overlap.sh and cudasim_train.sh)"
  elif command -v mpirun > /dev/null && [ "$ngpu" -ge 2 ]; then
    where="2 of the $ngpu GPUs"
    MPIX=""
    for v in SHARC_CUBLASLT_LIB SHARC_NCCL_LIB SHARC_CUDA_DRIVER_LIB; do [ -n "${!v:-}" ] && MPIX="$MPIX -x $v"; done
    # a GPU per rank: the trainer takes GPU (local rank % GPUs), note [gpu-of-rank]
    SHARC_COMM=nccl timeout 300 mpirun --allow-run-as-root --oversubscribe -n 2 -x SHARC_COMM $MPIX \
      "$bin/sharc" train $M $SS --train.batch_size=2 --train.device=cuda \
      --train.out_dir="$tmp/ng2" > "$tmp/ng2.log" 2>&1; rc=$?
    why=$(same "$tmp/ng2" "$tmp/p1" 1e-5 $ns); ok=$?
    [ $rc -eq 0 ] && ! grep -q 'go through MPI' "$tmp/ng2.log" || ok=1
    one "NCCL over $where: 2 ranks = 1 rank within 1e-5" $ok \
      "exit $rc, $why: $(grep -m2 'MPI\|error' "$tmp/ng2.log" | tr '\n' ' ')"
    jq -r '"\(."fsdp/gathers") \(."fsdp/comm_stream_waits")"' "$tmp/ng2/metrics.jsonl" 2> /dev/null |
      awk -v ns=$ns '{ n++; if ($1 < 4 || $2 != $1 + 1) bad = 1 } END { exit n != ns || bad }'
    one "NCCL over $where: comm-stream waits = gathers + 1 at every step" $? \
      "$(jq -c '[."fsdp/gathers", ."fsdp/comm_stream_waits"]' "$tmp/ng2/metrics.jsonl" 2> /dev/null | tr '\n' ' ')"
    # Ulysses (note [ulysses]): its all-to-alls queued on the model's stream over NCCL, against the CPU's sp 2
    L1="--model.family=llama --model.num_kv_heads=1 --model.tie_embeddings=false --model.ff_hidden_dim=48"
    VV="--data.val_path=$tmp/t.txt --log.eval_every=$ns --log.eval_batches=2" # note [eval-windows]
    mpi 2 sc2 $M $SS $L1 --mesh.sp=2 $VV; rc=$?
    COMM=nccl mpi 2 sg2 $M $SS $L1 --mesh.sp=2 --train.device=cuda $VV; rc2=$?
    why=$(same "$tmp/sg2" "$tmp/sc2" 1e-4 $ns); ok=$?
    [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && ! grep -q 'go through MPI' "$tmp/sg2.log" || ok=1
    one "NCCL over $where: mesh.sp 2 (all-to-alls on the stream) = the CPU's mesh.sp 2 within 1e-4" $ok \
      "exit $rc/$rc2, $why: $(grep -m2 'MPI\|error' "$tmp/sg2.log" | tr '\n' ' ')"
    vq='select(."loss_metrics/val_loss" != null) | ."loss_metrics/val_loss"'
    paste <(jq -r "$vq" "$tmp/sg2/metrics.jsonl" 2> /dev/null) <(jq -r "$vq" "$tmp/sc2/metrics.jsonl" 2> /dev/null) |
      awk '{ d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || !(d <= 1e-4 * $2)) bad = 1; n++ } END { exit n != 1 || bad }'
    one "NCCL over $where: mesh.sp 2 validation loss = the CPU's mesh.sp 2 within 1e-4" $? \
      "$(grep -h val_loss "$tmp/sg2/metrics.jsonl" "$tmp/sc2/metrics.jsonl" 2> /dev/null | tr '\n' ' ')"
    # Qwen3-MoE's experts under tp (note [tp-moe]): the tp all-reduces on the stream over NCCL, against the CPU's tp 2
    MOE="--model.family=llama --model.num_kv_heads=2 --model.tie_embeddings=false --model.ff_hidden_dim=48
         --model.num_experts=4 --model.num_experts_per_tok=2 --model.moe_intermediate_size=16
         --model.output_router_logits=true"
    mpi 2 mc2 $M $SS $MOE --mesh.tp=2; rc=$?
    COMM=nccl mpi 2 mg2 $M $SS $MOE --mesh.tp=2 --train.device=cuda; rc2=$?
    why=$(same "$tmp/mg2" "$tmp/mc2" 1e-4 $ns); ok=$?
    [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && ! grep -q 'go through MPI' "$tmp/mg2.log" || ok=1
    one "NCCL over $where: mesh.tp 2 with Qwen3-MoE experts = the CPU's mesh.tp 2 within 1e-4" $ok \
      "exit $rc/$rc2, $why: $(grep -m2 'MPI\|error' "$tmp/mg2.log" | tr '\n' ' ')"
    # tp 2 x sp 2 (note [tp-sp] in src/model/tp.h): 4 GPUs, both groups over NCCL, against the CPU's 2x2
    if [ "$ngpu" -ge 4 ]; then
      TS="--mesh.tp=2 --mesh.sp=2 --model.num_heads=4 --model.num_kv_heads=2"
      mpi 4 tc4 $M $SS $L1 $TS; rc=$?
      COMM=nccl mpi 4 tg4 $M $SS $L1 $TS --train.device=cuda; rc2=$?
      why=$(same "$tmp/tg4" "$tmp/tc4" 1e-4 $ns); ok=$?
      [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && ! grep -q 'go through MPI' "$tmp/tg4.log" || ok=1
      one "NCCL over 4 of the $ngpu GPUs: mesh.tp 2 x mesh.sp 2 = the CPU's 2x2 within 1e-4" $ok \
        "exit $rc/$rc2, $why: $(grep -m2 'MPI\|error' "$tmp/tg4.log" | tr '\n' ' ')"
    else
      echo "SKIP mesh.tp 2 x mesh.sp 2 over NCCL: $ngpu GPU(s) here, 4 wanted"
    fi
  else
    echo "SKIP 2 ranks over NCCL on 2 GPUs: $ngpu GPU(s) here$(command -v mpirun > /dev/null || echo ', no mpirun')"
  fi
fi

# compute-sanitizer: memcheck, racecheck (shared memory), synccheck (barriers)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
if [ $sim = 1 ]; then
  echo "SKIP compute-sanitizer: the CUDA simulator (its own checks stand in: tests/cli/cudasim.sh)"
elif [ -z "$cs" ]; then
  echo "SKIP compute-sanitizer: not on PATH nor in /usr/local/cuda/bin"
else
  sanitize() { # name tool cmd...
    local name=$1 tool=$2
    shift 2
    timeout 600 "$cs" --tool "$tool" --target-processes all --error-exitcode 3 "$@" > "$tmp/cs.log" 2>&1
    one "compute-sanitizer $tool clean on $name" $? "$(grep -m3 -E 'ERROR|FAIL|Invalid|hazard' "$tmp/cs.log" | tr '\n' ' ')"
  }
  sanitize gpu_kernels memcheck "$bin/gpu_kernels"
  if [ -x "$bin/sharc" ]; then
    sanitize "a 2-step sharc train on cuda" memcheck "$bin/sharc" train $M --train.max_steps=2 --train.device=cuda \
      --train.out_dir="$tmp/cs"
  fi
  for group in elem norms fused qknorm attention xent attn16 vocab; do
    sanitize "gpu_kernels $group" racecheck "$bin/gpu_kernels" $group
    sanitize "gpu_kernels $group" synccheck "$bin/gpu_kernels" $group
  done
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
