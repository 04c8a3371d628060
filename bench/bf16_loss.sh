#!/usr/bin/env bash
# bf16_loss.sh BUILD_DIR: `make run`'s job (the built-in default model and its
# 400 steps on the King James Bible) in fp32 and with fsdp.param_dtype bf16,
# one after the other; prints both losses (the mean of the last 20 steps, and
# the last) and their relative difference, and fails above 2%. The suite's
# shorter version is tests/cli/bf16_train.sh. On a CPU without bf16
# instructions bf16 computes in fp32 unless SHARC_BF16=emulate is set
# (note [bf16-gemm] in docs/ARCHITECTURE.md); the run's log says which.
#
#   bench/bf16_loss.sh build                      # 1 process, all CPUs
#   SHARC_BF16=emulate RANKS=2 bench/bf16_loss.sh build
#   bench/bf16_loss.sh build --train.threads=1    # more options for sharc train
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
ranks=${RANKS:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
bible -f 'Gen1:1-Rev22:21' > kjv.txt
for dt in fp32 bf16; do
  args=(train --data.path=kjv.txt --fsdp.param_dtype=$dt --train.out_dir=run_$dt "${@:2}")
  start=$(date +%s.%N)
  if [ "$ranks" -gt 1 ]; then
    "$build/sharc" launch -n "$ranks" "$build/sharc" "${args[@]}" --train.batch_size=$((16 / ranks)) > $dt.log 2>&1
  else
    "$build/sharc" "${args[@]}" > $dt.log 2>&1
  fi
  echo "$dt: $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }') s; $(grep -m1 -o 'matrix products in bf16[^,]*\|bf16 computes in fp32[^;]*' $dt.log || echo fp32 compute)"
done
mean() { tail -20 "run_$1/metrics.jsonl" | jq -s 'map(."loss_metrics/global_avg_loss") | add / length'; }
last() { tail -1 "run_$1/metrics.jsonl" | jq '."loss_metrics/global_avg_loss"'; }
a=$(mean fp32); b=$(mean bf16)
echo "400 steps: mean loss of the last 20 steps fp32 $a, bf16 $b (last step $(last fp32), $(last bf16))"
awk -v a="$a" -v b="$b" 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; printf "relative difference %.4f (limit 0.02)\n", d; exit !(d < 0.02) }'
