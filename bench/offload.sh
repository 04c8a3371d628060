#!/usr/bin/env bash
# offload.sh BUILD_DIR [DIR]: the AdamW moments in memory against
# optim.offload_dir (note [optim-offload] in src/optim/adamw.c), one process,
# same run, for a small GPT-2 (1M parameters) and GPT-2 124M. DIR (default
# a temporary directory under /tmp) is where the moments' file goes.
#
#   bench/offload.sh build [/mnt/nvme]        ROUNDS=2 THREADS=2
#
# Chunks (optim.offload_sub_group_size): 65536 parameters for the small
# model (16 chunks, so there is something to pipeline), the default
# 8388608 for 124M. Four variants per shape, alternated ROUNDS times (so drift on a shared
# machine hits them alike): in memory; SHARC_AIO=pread without read-ahead;
# SHARC_AIO=uring without read-ahead; uring with read-ahead (the default).
# Prints per run: step_ms, optim_ms (the optimizer's share), offload_step_ms
# (the optimizer's streaming pass), offload_wait_ms (the time it blocked on
# the disk), read/write GB/s (bytes over the pass; buffered I/O, so through
# the page cache), optim_peak_mib (the chunk buffers), max_rss_mib, losses
# (equal within a shape). Then per shape, medians over the rounds:
# optim_ms of each variant over in-memory, and "hidden": the share of the
# synchronous (pread) wait that read-ahead removes, 1 - wait(uring,
# read-ahead) / wait(pread).
set -euo pipefail
build=${1:-build}
mine=
[ -n "${2:-}" ] || mine=$(mktemp -d /tmp/sharc-offload.XXXXXX)
dir=${2:-$mine}
STEP="$build/bench/step"
rounds=${ROUNDS:-2}
out=$(mktemp /tmp/sharc-offload-runs.XXXXXX)
trap 'rm -f "$out"; [ -z "$mine" ] || rmdir "$mine"' EXIT
for shape in "--layers 2 --dim 128 --heads 4 --vocab 4096 --batch 2 --seq 64 --steps 5 --chunk 65536" \
  "--batch 1 --seq 256 --steps 3 --chunk 8388608"; do
  chunk=${shape##*--chunk }
  shape=${shape% --chunk *}
  for r in $(seq 1 "$rounds"); do
    for v in memory pread uring uring+ra; do
      case $v in
        memory) env=(); off=() ;;
        pread) env=(SHARC_AIO=pread); off=(--offload-dir "$dir" --offload-chunk "$chunk" --offload-pipeline 0) ;;
        uring) env=(SHARC_AIO=uring); off=(--offload-dir "$dir" --offload-chunk "$chunk" --offload-pipeline 0) ;;
        uring+ra) env=(SHARC_AIO=uring); off=(--offload-dir "$dir" --offload-chunk "$chunk" --offload-pipeline 1) ;;
      esac
      # shellcheck disable=SC2086
      env "${env[@]}" "$STEP" --family gpt2 $shape --threads "${THREADS:-2}" "${off[@]}" |
        python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
keys = ["params", "offload_backend", "step_ms", "optim_ms", "offload_step_ms", "offload_wait_ms", "offload_read_GBps",
        "offload_write_GBps", "optim_peak_mib", "offload_file_mib", "max_rss_mib", "loss_first", "loss_last"]
print(sys.argv[1], " ".join("%s=%s" % (k, r[k]) for k in keys))' "$v" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    v, *kv = line.split()
    r = dict(x.split("=", 1) for x in kv)
    runs.setdefault((r["params"], v), []).append(r)
for params in sorted({p for p, _ in runs}, key=int):
    med = lambda v, k: statistics.median(float(r[k]) for r in runs[(params, v)])
    base = med("memory", "optim_ms")
    ratios = " ".join("%s=%.2fx" % (v, med(v, "optim_ms") / base) for v in ("pread", "uring", "uring+ra"))
    wp = med("pread", "offload_wait_ms")
    hidden = 1 - med("uring+ra", "offload_wait_ms") / wp if wp > 0 else 0.0
    print("params=%s optim_ms over in-memory: %s; wait pread %.1f ms, uring %.1f ms, uring+ra %.1f ms; hidden %.0f%%"
          % (params, ratios, wp, med("uring", "offload_wait_ms"), med("uring+ra", "offload_wait_ms"), 100 * hidden))
EOF
