#!/usr/bin/env bash
# fsdp.sh BUILD_DIR: sharc's sharding strategies against each other and
# against PyTorch DDP over gloo, GPT-2 124M at 2 processes x 1 thread, on the
# same global batch (2 x 2 sequences of 256 tokens per step), in one run.
#
#   STEPS=6 RANKS=2 bench/fsdp.sh build
#
# For each: tokens/s, bytes each rank moves per step (measured, converted to
# bytes on the wire, and the theory: DDP's ring all-reduce moves
# 2(N-1)/N x P per rank, ZeRO-3 two all-gathers and a reduce-scatter,
# 3(N-1)/N x P = 1.5x DDP), time in collectives, time compute waited, and
# peak memory per rank. Every strategy runs twice: with the node-local
# shared-memory paths (the default) and with MPI collectives only
# (SHARC_COMM_SHM=0, "_mpi"), where the bytes can be checked against theory.
# Every configuration and PyTorch DDP run REPEATS times (default 2), in turn;
# each row is its fastest repeat. Writes bench/results/fsdp.json.
set -euo pipefail
build=${1:-build}
ranks=${RANKS:-2}
steps=${STEPS:-6}
repeats=${REPEATS:-2}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
mkdir -p "$here/results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# random GPT-2 token ids (llm.c shard format), enough windows for every step
/usr/bin/python3 - "$work/tokens.bin" <<'EOF'
import random, struct, sys
random.seed(1)
n = 1 << 20
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
EOF

run_sharc() { # name strategy extra...   (SHM=0 in the environment: MPI collectives only)
  local name=$1 strategy=$2; shift 2
  echo "sharc $name..." >&2
  SHARC_COMM_SHM=${SHM:-1} timeout 900 mpirun --oversubscribe --bind-to core -n "$ranks" "$root/$build/sharc" train \
    --config "$root/configs/gpt2-124m.yaml" --data.path="$work/tokens.bin" --train.batch_size=2 \
    --train.grad_accum=1 --train.seq_len=256 --train.max_steps="$steps" --optim.warmup_steps=1 \
    --train.threads=1 --train.log_every=1000 --fsdp.sharding_strategy="$strategy" "$@" \
    --train.out_dir="$work/$name.$rep" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
  echo "$name $work/$name.$rep/metrics.jsonl"
}

ddp_runs=()
for rep in $(seq 1 "$repeats"); do
{
  run_sharc NO_SHARD NO_SHARD
  run_sharc FULL_SHARD FULL_SHARD
  run_sharc SHARD_GRAD_OP SHARD_GRAD_OP
  run_sharc FULL_SHARD_bf16 FULL_SHARD --fsdp.param_dtype=bf16 --fsdp.reduce_dtype=bf16
  SHM=0 run_sharc NO_SHARD_mpi NO_SHARD
  SHM=0 run_sharc FULL_SHARD_mpi FULL_SHARD
} >> "$work/runs.txt"

echo "PyTorch DDP (gloo)..." >&2
ddp_runs+=("$(env OPENBLAS_CORETYPE=SkylakeX OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
      MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 MALLOC_TOP_PAD_=1073741824 \
      /usr/bin/python3 "$here/torch_ddp.py" --ranks "$ranks" --batch 2 --seq 256 --steps "$((steps - 1))")")
done
ddp=$(printf '%s\n' "${ddp_runs[@]}" | /usr/bin/python3 -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
best = dict(max(runs, key=lambda r: r["tokens_per_s"]))
best["all_tokens_per_s"] = [r["tokens_per_s"] for r in runs]
print(json.dumps(best))')

/usr/bin/python3 - "$work/runs.txt" "$ddp" "$ranks" "$here/results/fsdp.json" <<'EOF'
import json, sys
runs = [l.split() for l in open(sys.argv[1])]
ddp = json.loads(sys.argv[2])
N = int(sys.argv[3])
P = 124439808 * 4  # fp32 parameter bytes of GPT-2 124M
gib = 1 << 30
rows = []
best_path = {}
for name, path in runs:  # each configuration's fastest repeat
    m = [json.loads(l) for l in open(path)][2:]
    tps = sum(r["throughput/global(tps)"] for r in m) / len(m)
    if name not in best_path or tps > best_path[name][1]:
        best_path[name] = (path, tps)
for name, (path, _) in best_path.items():
    m = [json.loads(l) for l in open(path)][2:]  # steps after warm-up
    avg = lambda k: sum(r[k] for r in m) / len(m)
    # the dispatcher counts the buffer each rank hands in; on the wire a
    # ring/direct algorithm moves (N-1) x that for all-gather, (N-1)/N x for
    # reduce-scatter, 2 (N-1)/N x for all-reduce
    wire = ((N - 1) * avg("comm/all_gather_bytes") + (N - 1) / N * avg("comm/reduce_scatter_bytes")
            + 2 * (N - 1) / N * avg("comm/all_reduce_bytes"))
    rows.append({"run": name, "tokens_per_s": avg("throughput/global(tps)"), "wire_bytes": wire,
                 "comm_s": avg("comm/all_gather(s)") + avg("comm/reduce_scatter(s)") + avg("comm/all_reduce(s)")
                 + avg("comm/barrier(s)"),
                 "wait_s": avg("time_metrics/comm_wait(s)"), "step_s": avg("time_metrics/end_to_end(s)"),
                 "peak_gib": max(r["memory/max_active(GiB)"] for r in m),
                 "state_gib": (m[-1]["memory/params(GiB)"] + m[-1]["memory/grads(GiB)"] + m[-1]["memory/optim(GiB)"])})
base = next(r for r in rows if r["run"] == "NO_SHARD")
theory = {"NO_SHARD": 2 * (N - 1) / N * P, "FULL_SHARD": 3 * (N - 1) / N * P,
          "NO_SHARD_mpi": 2 * (N - 1) / N * P, "FULL_SHARD_mpi": 3 * (N - 1) / N * P,
          "SHARD_GRAD_OP": 2 * (N - 1) / N * P, "FULL_SHARD_bf16": 2 * (N - 1) / N * P / 2 + (N - 1) / N * P / 2}
print(f"GPT-2 124M, {N} ranks x 1 thread, 4 x 256 tokens per step")
print(f"{'run':<18}{'tok/s':>8}{'vs NO_SHARD':>12}{'wire MB/step':>14}{'theory MB':>11}{'comm s':>8}{'wait s':>8}"
      f"{'state GiB':>10}{'peak GiB':>10}")
for r in rows:
    print(f"{r['run']:<18}{r['tokens_per_s']:>8.1f}{r['tokens_per_s'] / base['tokens_per_s']:>11.2f}x"
          f"{r['wire_bytes'] / 1e6:>14.0f}{theory[r['run']] / 1e6:>11.0f}{r['comm_s']:>8.3f}{r['wait_s']:>8.3f}"
          f"{r['state_gib']:>10.3f}{r['peak_gib']:>10.3f}")
print(f"{'PyTorch DDP gloo':<18}{ddp['tokens_per_s']:>8.1f}{ddp['tokens_per_s'] / base['tokens_per_s']:>11.2f}x"
      f"{'':>14}{2 * (N - 1) / N * P / 1e6:>11.0f}{'':>8}{'':>8}{'':>10}{ddp['peak_rss_mib_per_rank'] / 1024:>10.3f} (RSS)")
print(f"(fastest of {len(ddp['all_tokens_per_s'])} repeats each; PyTorch DDP runs: {ddp['all_tokens_per_s']} tok/s)")
fs = next(r for r in rows if r["run"] == "FULL_SHARD")
fm = next(r for r in rows if r["run"] == "FULL_SHARD_mpi")
bm = next(r for r in rows if r["run"] == "NO_SHARD_mpi")
print("Runs without _mpi read parameters in place and reduce gradients in shared memory (note [shared-params]):")
print("their all-gathers move no bytes. _mpi runs use MPI collectives only (SHARC_COMM_SHM=0).")
print(f"FULL_SHARD / NO_SHARD = {fs['tokens_per_s'] / base['tokens_per_s']:.2f}, "
      f"FULL_SHARD / PyTorch DDP = {fs['tokens_per_s'] / ddp['tokens_per_s']:.2f}, "
      f"MPI path: FULL_SHARD / NO_SHARD = {fm['tokens_per_s'] / bm['tokens_per_s']:.2f}, "
      f"FULL_SHARD / PyTorch DDP = {fm['tokens_per_s'] / ddp['tokens_per_s']:.2f}, "
      f"bytes FULL_SHARD / NO_SHARD = {fm['wire_bytes'] / bm['wire_bytes']:.2f} (theory 1.5)")
json.dump({"ranks": N, "runs": rows, "pytorch_ddp": ddp}, open(sys.argv[4], "w"), indent=1)
EOF
