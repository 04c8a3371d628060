#!/usr/bin/env bash
# bf16_loss.sh BUILD_DIR [sharc train options]: issue 16's convergence check.
# `make run`'s job (the built-in default model, its 400 steps on the King
# James Bible, the same seed and data) three times: fp32; fsdp.param_dtype
# bf16 computing in bf16 (oneDNN where the CPU has bf16 instructions, else
# SHARC_BF16=emulate: the same bf16 products widened to sgemm, note
# [bf16-gemm] in docs/ARCHITECTURE.md); and bf16 parameters with
# SHARC_BF16=off (fp32 compute on the bf16-rounded gathered weights). Prints
# each run's final loss (the mean of the last 20 steps' train loss), its wall
# time and its relative difference to fp32; exits 1 if bf16 compute is more
# than 2% off fp32. The suite's shorter version is tests/cli/bf16_train.sh.
#
#   bench/bf16_loss.sh build                      # 400 steps, one after the other
#   STEPS=100 bench/bf16_loss.sh build            # fewer steps
#   PARALLEL=1 bench/bf16_loss.sh build           # the three runs at once (1 thread each; wall times then overlap)
#   MODE=emulate bench/bf16_loss.sh build         # force the emulation on a bf16 CPU (default: auto there)
#   RANKS=2 bench/bf16_loss.sh build              # through `sharc launch`, 16 / RANKS sequences per rank
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${STEPS:-400}
ranks=${RANKS:-1}
mode=${MODE:-}
if [ -z "$mode" ]; then
  if grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then mode=auto; else mode=emulate; fi
fi
command -v bible >/dev/null 2>&1 || { echo "bf16_loss.sh: needs the bible-kjv package (scripts/deps.sh test)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
bible -f 'Gen1:1-Rev22:21' > kjv.txt
extra=()
[ "${PARALLEL:-0}" = 1 ] && extra=(--train.threads=1)
run() { # name dtype SHARC_BF16
  local args=(train --data.path=kjv.txt --fsdp.param_dtype=$2 --train.max_steps=$steps --train.out_dir=run_$1
    "${extra[@]}" "${@:4}")
  local start; start=$(date +%s.%N)
  if [ "$ranks" -gt 1 ]; then
    SHARC_BF16=$3 "$build/sharc" launch -n "$ranks" "$build/sharc" "${args[@]}" --train.batch_size=$((16 / ranks)) > $1.log 2>&1
  else
    SHARC_BF16=$3 "$build/sharc" "${args[@]}" > $1.log 2>&1
  fi || { echo "$1: sharc train failed:"; tail -20 $1.log; return 1; }
  awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f\n", e - s }' > $1.wall
}
names=(fp32 bf16 bf16_off)
dtypes=(fp32 bf16 bf16)
modes=(off $mode off)
if [ "${PARALLEL:-0}" = 1 ]; then
  pids=()
  for i in 0 1 2; do run ${names[$i]} ${dtypes[$i]} ${modes[$i]} "${@:2}" & pids+=($!); done
  for p in "${pids[@]}"; do wait $p; done
else
  for i in 0 1 2; do run ${names[$i]} ${dtypes[$i]} ${modes[$i]} "${@:2}"; done
fi
grep -q 'matrix products in bf16' bf16.log || { echo "the bf16 run did not compute in bf16:"; grep -m3 bf16 bf16.log; exit 1; }
mean() { tail -20 "run_$1/metrics.jsonl" | jq -s 'map(."loss_metrics/global_avg_loss") | add / length'; }
a=$(mean fp32)
echo "$steps steps, $ranks rank(s); final loss = mean train loss of the last 20 steps"
for n in "${names[@]}"; do
  awk -v n="$n" -v a="$a" -v b="$(mean $n)" -v w="$(cat $n.wall)" -v m="$(grep -m1 -o 'matrix products in bf16[^,;]*\|bf16 computes in fp32' $n.log || echo 'fp32 compute')" \
    'BEGIN { d = (b - a) / a; printf "%-9s %.6f  rel. diff to fp32 %+.5f  %5d s  (%s)\n", n, b, d, w, m }'
done
awk -v a="$a" -v b="$(mean bf16)" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; printf "bf16 compute vs fp32: %.4f (limit 0.02): %s\n", d, d < 0.02 ? "ok" : "FAIL"; exit !(d < 0.02) }'
