#!/usr/bin/env bash
# run.sh BUILD_DIR: sharc against plain PyTorch, same models, batches and
# thread count, in one run on this machine. Prints a table and writes
# bench/results/latest.json.
#
#   THREADS=2 STEPS_GPT2=5 STEPS_LLAMA=20 bench/run.sh build
#
# PyTorch is configured at its best here (MEASUREMENTS.md): the fast
# OpenBLAS kernels (OPENBLAS_CORETYPE=SkylakeX), OMP_WAIT_POLICY=PASSIVE so
# its OpenMP and OpenBLAS pools do not spin against each other, the thread
# counts set before torch is imported, and glibc malloc told to keep freed
# memory (PyTorch frees and reallocates its 200 MB logits and every
# activation each step; without this each step pays the page faults again:
# 135 tok/s instead of ~320 for GPT-2 124M here). It also gets two warm-up
# steps before timing (its allocator settles after the second).
set -euo pipefail
build=${1:-build}
threads=${THREADS:-2}
steps_gpt2=${STEPS_GPT2:-5}
steps_llama=${STEPS_LLAMA:-20}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/results"

gpt2="--family gpt2 --layers 12 --dim 768 --heads 12 --vocab 50257 --max-seq 1024 --batch 4 --seq 256"
llama="--family llama --layers 4 --dim 256 --heads 8 --kv-heads 4 --ffn 688 --vocab 256 --max-seq 256 --batch 8 --seq 256"

torch_run() {
  env OPENBLAS_CORETYPE=SkylakeX OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS="$threads" \
      MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 MALLOC_TOP_PAD_=1073741824 \
      OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" /usr/bin/python3 "$here/torch_step.py" "$@"
}

echo "sgemm ceiling ($threads threads)..." >&2
ceiling=$("$build/bench/step" --sgemm --threads "$threads")
echo "GPT-2 124M: sharc..." >&2
s_gpt2=$("$build/bench/step" $gpt2 --steps "$steps_gpt2" --threads "$threads")
echo "GPT-2 124M: PyTorch..." >&2
t_gpt2=$(torch_run $gpt2 --steps "$steps_gpt2")
echo "small Llama: sharc..." >&2
s_llama=$("$build/bench/step" $llama --steps "$steps_llama" --threads "$threads")
echo "small Llama: PyTorch..." >&2
t_llama=$(torch_run $llama --steps "$steps_llama")

/usr/bin/python3 - "$ceiling" "$s_gpt2" "$t_gpt2" "$s_llama" "$t_llama" "$here/results/latest.json" <<'EOF'
import json, sys
ceil, sg, tg, sl, tl = (json.loads(x) for x in sys.argv[1:6])
rows = []
print(f"sgemm ceiling: {ceil['sgemm_gflops']:.0f} GFLOP/s ({ceil['threads']} threads, OpenBLAS {ceil['blas_core']})")
print(f"{'model':<14}{'sharc tok/s':>12}{'torch tok/s':>12}{'ratio':>8}{'sharc GFLOP/s':>15}{'of ceiling':>12}")
for name, s, t in (("GPT-2 124M", sg, tg), ("small Llama", sl, tl)):
    ratio = s["tokens_per_s"] / t["tokens_per_s"]
    frac = s["gflops_per_s"] / ceil["sgemm_gflops"]
    print(f"{name:<14}{s['tokens_per_s']:>12.1f}{t['tokens_per_s']:>12.1f}{ratio:>7.2f}x{s['gflops_per_s']:>15.1f}{frac:>11.0%}")
    rows.append({"model": name, "sharc": s, "torch": t, "ratio": ratio, "fraction_of_sgemm_ceiling": frac})
json.dump({"sgemm": ceil, "results": rows}, open(sys.argv[6], "w"), indent=1)
EOF
