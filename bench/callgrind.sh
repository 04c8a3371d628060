#!/usr/bin/env bash
# callgrind.sh BUILD [BUILD...]: instruction counts of training steps under
# valgrind's callgrind, a speed gate that does not depend on how busy the
# machine is (wall-clock timings on the shared cores vary by 10-30%).
#
#   bench/callgrind.sh build                # one build
#   bench/callgrind.sh /tmp/before build    # two builds: the second's ratio to the first
#
# Each case runs twice, with S1 and S2 steps (after bench/step's one warm-up
# step, or sharc train's max_steps); the difference divided by S2 - S1 is the
# cost of one step with the start-up (library loading, parameter
# initialisation) taken out. Two counts per case:
#   total  every instruction of the process (BLAS and libm included)
#   sharc  instructions in the functions of sharc's own binary (the library
#          is linked statically into it), the part a refactor of sharc changes
# Cases: a small Llama and a small GPT-2 through bench/step (one process, one
# thread), and a tiny GPT-2 trained by `sharc train` on 2 MPI ranks
# (FULL_SHARD, parameters shared in place, the step watchdog off), whose
# count is rank 0's sharc instructions only: time spent polling inside MPI
# varies from run to run, so its total is not printed (and the watchdog
# thread, which polls ten times a second, would make sharc's own count
# depend on the wall time).
# Environment: S1 (1), S2 (3), CASES (llama gpt2 mpi2).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/callgrind.sh BUILD [BUILD...]" >&2; exit 2; }
S1=${S1:-1} S2=${S2:-3}
CASES=${CASES:-"llama gpt2 mpi2"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_base_warn_component_unused=0
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > "$work/text.txt"

# total and sharc-only Ir of one callgrind file; $2 = the binary's path
count() {
  callgrind_annotate --threshold=100 "$1" 2>/dev/null | awk -v obj="[$2]" '
    /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
    index($0, obj) { v = $1; gsub(",", "", v); sharc += v }
    END { printf "%d %d\n", total, sharc }'
}

run_case() { # build case steps -> "total sharc"
  local b=$1 c=$2 s=$3 out="$work/cg.$RANDOM"
  local step=(valgrind --tool=callgrind --callgrind-out-file="$out" "$b/bench/step" --threads 1 --steps "$s")
  case $c in
    llama) "${step[@]}" --family llama --layers 2 --dim 128 --heads 4 --kv-heads 2 --ffn 344 --vocab 256 \
             --max-seq 128 --batch 4 --seq 128 > /dev/null 2>&1
           count "$out" "$b/bench/step" ;;
    gpt2)  "${step[@]}" --family gpt2 --layers 2 --dim 128 --heads 4 --kv-heads 4 --ffn 512 --vocab 512 \
             --max-seq 128 --batch 4 --seq 128 > /dev/null 2>&1
           count "$out" "$b/bench/step" ;;
    mpi2)  (cd "$work" && timeout 1200 mpirun --oversubscribe --bind-to none -n 2 \
             valgrind --tool=callgrind --callgrind-out-file="$out.%q{OMPI_COMM_WORLD_RANK}" "$b/sharc" train \
             --model.num_layers=2 --model.embed_dim=64 --model.num_heads=4 --model.max_seq_len=32 \
             --data.path=text.txt --train.seq_len=32 --train.batch_size=2 --train.max_steps="$s" \
             --train.threads=1 --train.timeout=0 --train.out_dir="run.$RANDOM" > /dev/null 2>&1)
           count "$out.0" "$b/sharc" ;;
  esac
}

printf "%-10s %-6s %16s %16s\n" build case "Ir/step total" "Ir/step sharc"
declare -A first
for arg in "$@"; do
  b=$(cd "$arg" && pwd)
  for c in $CASES; do
    read -r t1 h1 < <(run_case "$b" "$c" "$S1")
    read -r t2 h2 < <(run_case "$b" "$c" "$S2")
    tot=$(( (t2 - t1) / (S2 - S1) )) sh=$(( (h2 - h1) / (S2 - S1) ))
    [ "$c" = mpi2 ] && tot=1 # not comparable: see above
    ratio=""
    if [ -n "${first[$c]:-}" ]; then
      read -r ft fs <<< "${first[$c]}"
      ratio=$(awk -v a="$tot" -v b="$ft" -v c="$sh" -v d="$fs" 'BEGIN { printf "  ratio total %.4f, sharc %.4f", a / b, c / d }')
    else
      first[$c]="$tot $sh"
    fi
    [ "$c" = mpi2 ] && ratio=${ratio/total*, sharc/sharc}
    printf "%-10s %-6s %16s %16d%s\n" "$(basename "$b")" "$c" "$([ "$c" = mpi2 ] && echo - || echo "$tot")" "$sh" "$ratio"
  done
done
