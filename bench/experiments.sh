#!/usr/bin/env bash
# experiments.sh BUILD_DIR [OUT_DIR]: one model and one data set under every
# sharding strategy, with and without activation checkpointing and prefetch,
# in fp32 and bf16, at RANKS processes x 1 thread; a summary table (tokens/s,
# speed-up over the DDP baseline NO_SHARD, MFU, peak memory per rank, bytes
# each rank hands to collectives per step, final training and validation
# loss) and loss / throughput / memory plots (sharc plot).
#
#   bench/experiments.sh build                    # writes bench/results/experiments/
#   DOCS=1 bench/experiments.sh build             # also docs/EXPERIMENTS.md and its PNGs
#   STEPS=16 RANKS=2 L=4 C=384 H=6 T=128 B=2 bench/experiments.sh build   (the defaults)
#
# The model is GPT-2 shaped (learned positions, LayerNorm, GELU, tied
# embeddings, vocabulary 50257) but smaller than 124M so the whole set runs in
# about 10 minutes on 2 shared cores: L=4, C=384, H=6 (26.4M parameters, of
# which 19.3M the embedding), T=128, 2 sequences per rank per step. The data is Debian's King James Bible as
# bytes (token ids < 256 of the 50257-row vocabulary): the loss falls fast, so
# the curves show that every strategy trains the same model.
#
# HYBRID_SHARD: at 2 ranks fsdp_size 2 is one shard group of 2 (plain FSDP,
# no replication: the same traffic as FULL_SHARD); at 4 ranks (RANKS=4) the
# script uses fsdp_size 2, i.e. 2 shard groups x 2 replicas.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${2:-$here/results/experiments}
ranks=${RANKS:-2}
steps=${STEPS:-16}
L=${L:-4}; C=${C:-384}; H=${H:-6}; T=${T:-128}; B=${B:-2}
# MFU's peak per rank (1 thread = 1 core): the fp32 FMA peak of one core
# measured on the project's machine (~265 GFLOP/s), fixed for every run so
# that a busy machine at start-up does not move it
peak=${PEAK_TFLOPS:-0.265}
S="$root/$build/sharc"
[ -x "$S" ] || { echo "experiments.sh: $S not found; run make first" >&2; exit 1; }
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_base_warn_component_unused=0

# data: the KJV text as bytes, the last 200 kB held out for validation
if [ ! -s "$out/train.txt" ]; then
  command -v bible >/dev/null || { echo "experiments.sh: needs Debian's bible-kjv (scripts/deps.sh run)" >&2; exit 1; }
  bible -f 'Gen1:1-Rev22:21' > "$out/kjv.txt"
  head -c -200000 "$out/kjv.txt" > "$out/train.txt"
  tail -c 200000 "$out/kjv.txt" > "$out/val.txt"
  rm -f "$out/kjv.txt"
fi

hybrid=$([ "$ranks" -ge 4 ] && echo 2 || echo "$ranks")
# name | options
runs=(
  "NO_SHARD|--fsdp.sharding_strategy=NO_SHARD"
  "FULL_SHARD|--fsdp.sharding_strategy=FULL_SHARD"
  "SHARD_GRAD_OP|--fsdp.sharding_strategy=SHARD_GRAD_OP"
  "HYBRID_SHARD|--fsdp.sharding_strategy=HYBRID_SHARD --fsdp.fsdp_size=$hybrid"
  "FULL_SHARD+AC|--fsdp.sharding_strategy=FULL_SHARD --fsdp.activation_checkpointing=true"
  "FULL_SHARD-noprefetch|--fsdp.sharding_strategy=FULL_SHARD --fsdp.backward_prefetch=NONE --fsdp.forward_prefetch=false"
  "FULL_SHARD+fwdprefetch|--fsdp.sharding_strategy=FULL_SHARD --fsdp.forward_prefetch=true"
  "FULL_SHARD+limit|--fsdp.sharding_strategy=FULL_SHARD --fsdp.limit_all_gathers=true"
  "NO_SHARD-bf16|--fsdp.sharding_strategy=NO_SHARD --fsdp.param_dtype=bf16 --fsdp.reduce_dtype=bf16"
  "FULL_SHARD-bf16|--fsdp.sharding_strategy=FULL_SHARD --fsdp.param_dtype=bf16 --fsdp.reduce_dtype=bf16"
  "FULL_SHARD-bf16+AC|--fsdp.sharding_strategy=FULL_SHARD --fsdp.param_dtype=bf16 --fsdp.reduce_dtype=bf16 --fsdp.activation_checkpointing=true"
)

# ROUNDS rounds, alternately forward and backward through the list, so that a
# change in the machine's load hits every configuration alike; the table takes
# each configuration's faster round (its load average is in the table)
rounds=${ROUNDS:-2}
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
names=()
for r in "${runs[@]}"; do names+=("${r%%|*}"); done
order=()
for ((k = 1; k <= rounds; k++)); do
  if ((k % 2)); then for ((i = 0; i < ${#runs[@]}; i++)); do order+=("$k:$i"); done
  else for ((i = ${#runs[@]} - 1; i >= 0; i--)); do order+=("$k:$i"); done; fi
done
for ki in "${order[@]}"; do
  k=${ki%%:*}; r=${runs[${ki#*:}]}
  name=${r%%|*}; opts=${r#*|}
  echo "experiments: $name round $k ($ranks ranks, $steps steps)..." >&2
  cut -d' ' -f1 /proc/loadavg > "$out/$name.r$k.load"
  # shellcheck disable=SC2086
  timeout 900 mpirun --oversubscribe --bind-to core -n "$ranks" "$S" train \
    --model.family=gpt2 --model.num_layers="$L" --model.embed_dim="$C" --model.num_heads="$H" \
    --model.vocab_size=50257 --model.max_seq_len="$T" --model.tie_embeddings=true \
    --data.path="$out/train.txt" --data.val_path="$out/val.txt" --data.format=text \
    --train.seq_len="$T" --train.batch_size="$B" --train.grad_accum=1 --train.max_steps="$steps" \
    --train.threads=1 --train.log_every=5 --optim.lr=1e-3 --optim.warmup_steps=3 \
    --log.eval_every="$steps" --log.eval_batches=8 --log.peak_tflops="$peak" \
    --train.overwrite_output_dir=true $opts --train.out_dir="$out/$name.r$k" > "$out/$name.r$k.log" 2>&1 || { cat "$out/$name.r$k.log"; exit 1; }
done
elapsed=$(( $(date +%s) - start ))
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

files=()
for n in "${names[@]}"; do files+=("$out/$n.r1/metrics.jsonl"); done
"$S" plot "${files[@]}" --out "$out/plots" > /dev/null

/usr/bin/python3 - "$out" "$ranks" "$steps" "$elapsed" "$load_start" "$load_end" "$L" "$C" "$H" "$T" "$B" "$peak" "$rounds" "${names[@]}" <<'EOF'
import json, sys, os
out, N, steps, elapsed, load0, load1, L, C, H, T, B, peak, rounds = sys.argv[1:14]
names = sys.argv[14:]
N = int(N)
rows = []
def med(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
for name in names:
    steps_all, loads = [], []
    for k in range(1, int(rounds) + 1):
        ls = [json.loads(l) for l in open(os.path.join(out, f"{name}.r{k}", "metrics.jsonl"))]
        tr = [l for l in ls if "loss_metrics/global_avg_loss" in l]
        steps_all += tr[2:] if len(tr) > 4 else tr  # steps after warm-up, every round
        loads.append(open(os.path.join(out, f"{name}.r{k}.load")).read().strip())
    lines = [json.loads(l) for l in open(os.path.join(out, f"{name}.r1", "metrics.jsonl"))]
    train = [l for l in lines if "loss_metrics/global_avg_loss" in l]
    val = [l for l in lines if "loss_metrics/val_loss" in l]
    md = lambda k: med([r[k] for r in steps_all])
    b = lambda k: md("comm/%s_bytes" % k)
    rows.append({"run": name, "load": "/".join(loads), "tps": md("throughput/global(tps)"),
                 "tps_cpu": md("throughput/cpu(tps)"), "mfu": md("mfu(%)"),
                 "step_s": md("time_metrics/end_to_end(s)"), "cpu_s": md("time_metrics/cpu(s)"),
                 "fwd": md("time_metrics/forward(s)"), "bwd": md("time_metrics/backward(s)"),
                 "opt": md("time_metrics/optimizer(s)"), "wait": md("time_metrics/comm_wait(s)"),
                 "bytes": b("all_gather") + b("reduce_scatter") + b("all_reduce"),
                 "peak": max(r["memory/max_active(GiB)"] for r in train),
                 "state": train[-1]["memory/params(GiB)"] + train[-1]["memory/grads(GiB)"] + train[-1]["memory/optim(GiB)"],
                 "loss": train[-1]["loss_metrics/global_avg_loss"],
                 "val": val[-1]["loss_metrics/val_loss"] if val else float("nan")})
base = next(r for r in rows if r["run"] == "NO_SHARD")
P = None
log0 = open(os.path.join(out, names[0] + ".r1.log")).read()
for w in log0.split(","):
    if "parameters" in w:
        P = int(w.split()[0])
hdr = ("| run | tokens/s (CPU time) | vs NO_SHARD | tokens/s (wall) | MFU % (wall) | step s | CPU s | fwd s | bwd s | "
       "optim s | comm wait s | MB to collectives / rank / step | peak GiB / rank | model state GiB / rank | "
       "final loss | val loss | load |")
lines = [hdr, "|" + "---|" * 17]
for r in rows:
    lines.append(f"| {r['run']} | {r['tps_cpu']:.0f} | {r['tps_cpu'] / base['tps_cpu']:.2f}x | {r['tps']:.0f} | "
                 f"{r['mfu']:.1f} | {r['step_s']:.2f} | {r['cpu_s']:.2f} | "
                 f"{r['fwd']:.2f} | {r['bwd']:.2f} | {r['opt']:.3f} | {r['wait']:.3f} | {r['bytes'] / 1e6:.0f} | "
                 f"{r['peak']:.3f} | {r['state']:.3f} | {r['loss']:.4f} | {r['val']:.4f} | {r['load']} |")
table = "\n".join(lines)
info = (f"GPT-2 shaped model, L={L} C={C} heads={H} vocab 50257 (tied), {P} parameters; T={T}, "
        f"{B} sequences per rank per step, {N} ranks x 1 thread (mpirun --bind-to core), {steps} steps "
        f"with MFU against {peak} TFLOP/s per rank "
        f"(each configuration ran {rounds} times, alternating the order; figures are medians over steps 3-{steps} "
        f"of every round; load = the 1-minute load average when each round's run started); "
        f"{elapsed} s for all runs; load averages (1, 5, 15 min) at start {load0}, at end {load1}.")
open(os.path.join(out, "summary.md"), "w").write(info + "\n\n" + table + "\n")
json.dump({"info": info, "runs": rows}, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(info)
print(table)
EOF

if [ "${DOCS:-0}" = 1 ]; then
  cp "$out/plots/loss.png" "$root/docs/experiments-loss.png"
  {
    cat "$here/experiments.md.in"
    echo
    echo "## Results"
    echo
    cat "$out/summary.md"
    echo
    echo '![loss](experiments-loss.png)'
    echo
    echo "Throughput and memory plots: \`${out#"$root"/}/plots/\` (not committed)."
    # hand-written reading of a recorded run: check it against the new table
    [ -s "$here/experiments-notes.md" ] && { echo; cat "$here/experiments-notes.md"; }
  } > "$root/docs/EXPERIMENTS.md"
  echo "experiments: wrote docs/EXPERIMENTS.md" >&2
fi
