#!/usr/bin/env bash
# offload.sh BUILD_DIR [DIR]: the AdamW moments in memory against
# optim.offload_dir (note [optim-offload] in src/optim/adamw.c), one process,
# same run A/B (bench/step with and without --offload-dir), for a small
# GPT-2 (1M parameters) and GPT-2 124M. DIR (default a temporary directory
# under /tmp) is where the moments' file goes.
#
#   bench/offload.sh build [/mnt/nvme]
#
# Prints per run: step_ms, optim_ms (the optimizer's share, where the file's
# read and write happen), optim_peak_mib (resident optimizer memory),
# offload_file_mib, read/write GB/s as the step saw them (through the page
# cache), max_rss_mib, and the losses, which must be equal within a pair.
set -euo pipefail
build=${1:-build}
dir=${2:-$(mktemp -d /tmp/sharc-offload.XXXXXX)}
STEP="$build/bench/step"
for shape in "--layers 2 --dim 128 --heads 4 --vocab 4096 --batch 2 --seq 64 --steps 5" "--batch 1 --seq 256 --steps 3"; do
  for off in "" "--offload-dir $dir"; do
    # shellcheck disable=SC2086
    "$STEP" --family gpt2 $shape --threads "${THREADS:-2}" $off |
      python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
keys = ["params", "offload", "step_ms", "optim_ms", "optim_peak_mib", "offload_file_mib", "offload_read_GBps",
        "offload_write_GBps", "max_rss_mib", "loss_first", "loss_last"]
print(" ".join("%s=%s" % (k, r[k]) for k in keys))'
  done
done
