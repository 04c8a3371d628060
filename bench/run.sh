#!/usr/bin/env bash
# run.sh BUILD_DIR: sharc against plain PyTorch on the same models, batches and
# thread count, in one run on this machine. Prints a table and writes
# bench/results/latest.json (bench/results/ is not meant to be committed).
#
#   make BUILD=build build/bench/step && bench/run.sh build
#   THREADS=1 REPEATS=1 STEPS_GPT2=3 bench/run.sh build
#
# Measured, in this order: the sgemm ceiling (bench/step --sgemm: sharc_sgemm on
# the models' big matmul shapes, best GFLOP/s), then for GPT-2 124M (L=12,
# C=768, H=12, V=50257, 1024 positions; B=4, T=256) and a small Llama (L=4,
# d=256, 8 heads, 4 kv heads, SwiGLU 688, V=256; B=8, T=256): sharc
# (bench/step) and PyTorch (bench/torch_step.py), alternated REPEATS times.
# Each system's figure is its best run (the median step of that run); every
# run is kept in the JSON.
#
# PyTorch gets its best configuration on this machine (on GPT-2 124M it runs
# at about 150 tokens/s as installed and about 320 with these settings): the
# AVX-512 OpenBLAS kernels (OPENBLAS_CORETYPE=SkylakeX; the image exports
# Haswell), OMP_WAIT_POLICY=PASSIVE so its OpenMP and OpenBLAS pools do not
# spin against each other, thread counts set before torch is imported, and
# glibc malloc told to keep freed memory (torch frees and reallocates its
# 200 MB logits and every activation each step; without this each step pays
# the page faults again). It also gets two untimed warm-up steps to sharc's one.
#
# The machine is shared: before each run the script waits (at most QUIET_WAIT
# seconds in all) until other processes use less than a quarter of a core,
# and it records how much CPU other processes took during each run
# ("foreign_cpu", in cores); runs with more than 0.15 are marked in the table.
#
# Environment: THREADS (default 2 = all cores here), REPEATS (2), STEPS_GPT2 (5),
# STEPS_LLAMA (20), QUIET_WAIT (90), SGEMM_MIN_TIME (0.4 s per shape and form),
# PYTHON (/usr/bin/python3, the interpreter with torch 1.13), OUT (the JSON file).
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
step="$build/bench/step"
if [[ ! -x "$step" ]]; then
  echo "run.sh: $step not found; build it first: make BUILD=$build $build/bench/step" >&2
  exit 1
fi
export BENCH_STEP="$step" BENCH_HERE="$here"
export BENCH_THREADS=${THREADS:-2} BENCH_REPEATS=${REPEATS:-2}
export BENCH_STEPS_GPT2=${STEPS_GPT2:-5} BENCH_STEPS_LLAMA=${STEPS_LLAMA:-20}
export BENCH_QUIET_WAIT=${QUIET_WAIT:-90} BENCH_SGEMM_MIN_TIME=${SGEMM_MIN_TIME:-0.4}
export BENCH_PYTHON=${PYTHON:-/usr/bin/python3}
export BENCH_OUT=${OUT:-$here/results/latest.json}
mkdir -p "$(dirname "$BENCH_OUT")"

exec "$BENCH_PYTHON" - <<'EOF'
import json, os, platform, resource, statistics, subprocess, sys, time

E = os.environ
step, here, py = E["BENCH_STEP"], E["BENCH_HERE"], E["BENCH_PYTHON"]
threads, repeats = int(E["BENCH_THREADS"]), int(E["BENCH_REPEATS"])
quiet_budget = float(E["BENCH_QUIET_WAIT"])
HZ = os.sysconf("SC_CLK_TCK")

MODELS = [
    ("GPT-2 124M", int(E["BENCH_STEPS_GPT2"]),
     "--family gpt2 --layers 12 --dim 768 --heads 12 --kv-heads 12 --ffn 3072 --vocab 50257 --max-seq 1024 "
     "--batch 4 --seq 256"),
    ("small Llama", int(E["BENCH_STEPS_LLAMA"]),
     "--family llama --layers 4 --dim 256 --heads 8 --kv-heads 4 --ffn 688 --vocab 256 --max-seq 256 "
     "--batch 8 --seq 256"),
]
TORCH_ENV = {
    "OPENBLAS_CORETYPE": "SkylakeX", "OMP_WAIT_POLICY": "PASSIVE",
    "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
    "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "100000000000", "MALLOC_TOP_PAD_": "1073741824",
}


def busy_jiffies():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f[:8]) - f[3] - f[4]  # user..steal minus idle, iowait


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_quiet():
    """Wait until other processes use < 0.25 cores (1 s samples), within the budget."""
    global quiet_budget
    while True:
        b0, t0 = busy_jiffies(), time.monotonic()
        time.sleep(1.0)
        load = (busy_jiffies() - b0) / HZ / (time.monotonic() - t0)
        quiet_budget -= time.monotonic() - t0
        if load < 0.25 or quiet_budget <= 0:
            return load
        print(f"  (machine busy: {load:.2f} cores used by other processes; waiting)", file=sys.stderr)


def run(label, cmd, env=None):
    before = wait_quiet()
    print(f"{label} ...", file=sys.stderr, flush=True)
    b0, c0, t0 = busy_jiffies(), children_cpu(), time.monotonic()
    p = subprocess.run(cmd, env=dict(E, **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    foreign = max(0.0, ((busy_jiffies() - b0) / HZ - (children_cpu() - c0)) / wall)
    if p.returncode != 0:
        sys.exit(f"run.sh: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out.update(wall_s=round(wall, 1), foreign_cpu=round(foreign, 2), load_before=round(before, 2))
    print(f"  {out.get('tokens_per_s', out.get('sgemm_gflops'))} "
          f"({'tok/s' if 'tokens_per_s' in out else 'GFLOP/s'}; other processes used {foreign:.2f} cores)",
          file=sys.stderr, flush=True)
    return out


started = time.time()
ceiling = run(f"sgemm ceiling ({threads} threads)",
              [step, "--sgemm", "--threads", str(threads), "--min-time", E["BENCH_SGEMM_MIN_TIME"]])
rows = []
for name, steps, args in MODELS:
    a = args.split() + ["--steps", str(steps)]
    runs = {"sharc": [], "pytorch": []}
    for r in range(repeats):
        runs["sharc"].append(run(f"{name}: sharc (run {r + 1}/{repeats})", [step, *a, "--threads", str(threads)]))
        runs["pytorch"].append(run(f"{name}: PyTorch (run {r + 1}/{repeats})",
                                   [py, os.path.join(here, "torch_step.py"), *a, "--threads", str(threads)],
                                   TORCH_ENV))
    best = {k: max(v, key=lambda x: x["tokens_per_s"]) for k, v in runs.items()}
    s, t = best["sharc"], best["pytorch"]
    rows.append({
        "model": name, "batch": s["batch"], "seq": s["seq"], "params": s["params"],
        "sharc_tokens_per_s": s["tokens_per_s"], "pytorch_tokens_per_s": t["tokens_per_s"],
        "ratio": round(s["tokens_per_s"] / t["tokens_per_s"], 3),
        "median_ratio": round(statistics.median(x["tokens_per_s"] for x in runs["sharc"])
                              / statistics.median(x["tokens_per_s"] for x in runs["pytorch"]), 3),
        "sharc_step_ms": s["step_ms"], "pytorch_step_ms": t["step_ms"],
        "sharc_gflops_per_s": s["gflops_per_s"], "pytorch_gflops_per_s": t["gflops_per_s"],
        "sharc_fraction_of_sgemm_ceiling": round(s["gflops_per_s"] / ceiling["sgemm_gflops"], 3),
        "sharc_peak_mem_mib": s["peak_mem_mib"], "sharc_max_rss_mib": s["max_rss_mib"],
        "pytorch_max_rss_mib": t["max_rss_mib"],
        "contended": any(x["foreign_cpu"] > 0.15 for x in (s, t)),
        "runs": runs,
    })

result = {
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
    "host": platform.node(), "cpus": os.cpu_count(), "threads": threads, "repeats": repeats,
    "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), ""),
    "sgemm_ceiling_gflops": ceiling["sgemm_gflops"], "sgemm": ceiling,
    "pytorch_env": TORCH_ENV, "results": rows, "wall_s": round(time.time() - started, 1),
}
with open(E["BENCH_OUT"], "w") as f:
    json.dump(result, f, indent=1)
    f.write("\n")

cmark = "  *" if ceiling["foreign_cpu"] > 0.15 else ""
print(f"sgemm ceiling: {ceiling['sgemm_gflops']:.0f} GFLOP/s ({ceiling['best_shape']}; {threads} threads, "
      f"OpenBLAS {ceiling['blas_core']}){cmark}. Best of {repeats} run(s) per system; median step of each run;"
      f" 'median runs': the ratio of the systems' median runs.")
hdr = f"{'model':<13}{'B x T':>9}{'sharc tok/s':>13}{'torch tok/s':>13}{'sharc/torch':>13}{'median runs':>13}" \
      f"{'sharc GFLOP/s':>15}{'of ceiling':>12}{'torch GFLOP/s':>15}"
print(hdr)
print("-" * len(hdr))
for r in rows:
    mark = "  *" if r["contended"] else ""
    print(f"{r['model']:<13}{str(r['batch']) + ' x ' + str(r['seq']):>9}{r['sharc_tokens_per_s']:>13.1f}"
          f"{r['pytorch_tokens_per_s']:>13.1f}{r['ratio']:>12.2f}x{r['median_ratio']:>12.2f}x{r['sharc_gflops_per_s']:>15.1f}"
          f"{r['sharc_fraction_of_sgemm_ceiling']:>12.0%}{r['pytorch_gflops_per_s']:>15.1f}{mark}")
if cmark or any(r["contended"] for r in rows):
    print("* other processes used > 0.15 cores during a run counted here; see foreign_cpu in the JSON")
print(f"({result['wall_s']:.0f} s; written to {E['BENCH_OUT']})")
EOF
