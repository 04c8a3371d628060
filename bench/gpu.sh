#!/usr/bin/env bash
# bench/gpu.sh [BIN_DIR]: sharc against PyTorch on one GPU, every system in
# the same run (issue 8's speed table). BIN_DIR (default build) holds sharc;
# on the GPU machine, sharc-gpu/bench-gpu.sh runs this with the packed
# binaries (scripts/gpu_pack.sh). Prints a table; with OUT set writes
# $OUT/gpu_bench.json (every row) and $OUT/gpu_bench.txt (the table).
#
# Configs, bf16 compute with fp32 master weights and AdamW moments, random
# tokens: GPT-2 124M (V=50257, T=1024) at B=16, 32, 64; the 0.85B Llama (L16
# d2048, 32 heads, 8 KV heads, SwiGLU 5632, V=32000, T=2048) at B=16 without
# and with activation checkpointing. Systems: sharc (`sharc train
# --train.device=cuda --fsdp.param_dtype=bf16`, one process; where it
# is refused (note [cuda-train]), its row reads "refused: <its one-line error>" and
# the bench goes on), then bench/torch_gpu.py: PyTorch eager (SDPA, fused
# AdamW), torch.compile, FSDP2 fully_shard per block at world size 1 (its
# docstring says exactly what each does).
# Each row: tokens/s (B*T over the median timed step; sharc: the median of
# its throughput/global(tps) after the warm-up steps), MFU against PEAK_TFLOPS
# (default 989.4: the H100 SXM's dense bf16 peak on NVIDIA's datasheet; the
# card here measured ~716-798 TFLOP/s on an 8192^3 bf16 matmul, so 100% MFU is
# out of reach by design), FLOPs per token as sharc counts them, peak memory
# (torch.cuda.max_memory_allocated; sharc: the largest memory/max_active(GiB)
# of its metrics), and "x fsdp2": tokens/s over the FSDP2 row of the same
# config in this run.
# Then, per model, one short profiled sharc run of its first config
# (SHARC_PROFILE=1, PROF_STEPS steps, default 3, after one left out): time per
# step of each region of the step (by device events on cuda, note [prof] in
# docs/ARCHITECTURE.md), exclusive and inclusive, % of the step, and each
# region's GFLOP, GB, TFLOP/s and GB/s against the ceilings (PEAK_TFLOPS; the
# GPU's DRAM bandwidth from its attributes). Printed before the table and
# written to $OUT/profile_<model>.txt; its timeline (SHARC_PROFILE_TRACE,
# note [trace]: compute and comm streams and the host, steps 2-3) to
# $OUT/trace_<model>.json, for chrome://tracing or ui.perfetto.dev.
# Then (with sharc among SYSTEMS) the largest Llama: the family of the
# bench's Llama scaled by j (embed_dim 512 j, 4 j layers, head dim 64, 4
# query heads per KV head, SwiGLU width 2.75 d rounded up to 256, V=32000;
# j = 4 is the 0.85B), T=2048, B=1, activation checkpointing, bf16: the
# largest j whose device memory as `sharc plan --ranks 1` plans it fits in
# MEM_GIB (default nvidia-smi's total of GPU 0) less 2 GiB, without and with
# fsdp.cpu_offload; each trained LARGEST_STEPS steps (default 4, the first
# LARGEST_WARMUP = 2 left out), tokens/s the median of the rest. Printed
# after the table, and in $OUT/largest_llama.json. TINY=1: toys (embed_dim
# 32 j, j layers, V=512, T=32) against MEM_GIB (default 0.004) on the CPU.
# Before anything runs, `sharc config` checks every sharc command line, so a
# wrong key is found here, not after GPU time is spent.
#
# Budget: about 5-6 minutes on an H100 (torch.compile's compilations are most
# of it), under the device tool's 10-minute limit; rows not started by
# DEADLINE seconds (default 540) are reported as skipped. Environment:
#   QUICK=1   GPT-2 at B=16 only, the Llama with checkpointing only, fewer steps (~2 min)
#   TINY=1    toy models on the CPU, 2 steps (a check of this script and
#             torch_gpu.py without a GPU: tests/cli/bench_gpu.sh); sharc on the CPU
#   PYTHON    the interpreter with torch (default python3)
#   SYSTEMS   which to run (default "sharc eager compile fsdp2")
#   SHARC_DEVICE  sharc's train.device (default cuda; TINY=1: cpu)
#   PEAK_TFLOPS, DEADLINE, STEPS_GPT2 (20), STEPS_LLAMA (10), WARMUP (3)
#   MEM_GIB, LARGEST_STEPS (4), LARGEST_WARMUP (2)   the largest Llama's search and run
set -uo pipefail
bin=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
peak=${PEAK_TFLOPS:-989.4}
deadline=${DEADLINE:-540}
systems=${SYSTEMS:-sharc eager compile fsdp2}
quick=${QUICK:-0} tiny=${TINY:-0}
steps_gpt2=${STEPS_GPT2:-20} steps_llama=${STEPS_LLAMA:-10} warmup=${WARMUP:-3} prof_steps=${PROF_STEPS:-3}
gpt2_batches="16 32 64" llama_ac="both"
device=cuda tinyflag=()
if [ "$quick" = 1 ]; then gpt2_batches="16" llama_ac="on" steps_gpt2=5 steps_llama=4 warmup=2; fi
if [ "$tiny" = 1 ]; then
  gpt2_batches="2 3" llama_ac="both" steps_gpt2=2 steps_llama=2 warmup=1 device=cpu tinyflag=(--tiny) prof_steps=2
fi
[ -x "$bin/sharc" ] || { echo "bench/gpu.sh: $bin/sharc not found (build, or run sharc-gpu/bench-gpu.sh from the tarball)"; exit 1; }
bin=$(cd "$bin" && pwd)
sharc_device=${SHARC_DEVICE:-$device}
if [ "$systems" != sharc ] && ! "$py" -c 'import torch' 2> /dev/null; then
  echo "bench/gpu.sh: $py cannot import torch (set PYTHON)"; exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results.jsonl
: > "$results"
t_start=$SECONDS

# model shapes: name layers dim heads kv ffn vocab seq family tie (TINY: toys, the same as torch_gpu.py's)
if [ "$tiny" = 1 ]; then
  shape_gpt2="2 64 4 4 256 512 32 gpt2 true" shape_llama="2 64 4 2 176 512 32 llama false"
else
  shape_gpt2="12 768 12 12 3072 50257 1024 gpt2 true" shape_llama="16 2048 32 8 5632 32000 2048 llama false"
fi
shape() { if [ "$1" = gpt2 ]; then echo "$shape_gpt2"; else echo "$shape_llama"; fi; }
row() { # a result row that did not run: model batch ac system error
  printf '{"model": "%s", "batch": %s, "ac": %s, "system": "%s", "error": %s}\n' "$1" "$2" "$3" "$4" \
    "$("$py" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$5")" >> "$results"
}
late() { [ $((SECONDS - t_start)) -ge "$deadline" ]; }
sharc_args() { # model batch ac steps: the sharc command line of one config
  local L C H KV F V T fam tie
  read -r L C H KV F V T fam tie <<< "$(shape "$1")"
  echo "--model.family=$fam --model.num_layers=$L --model.embed_dim=$C --model.num_heads=$H" \
    "--model.num_kv_heads=$KV --model.ff_hidden_dim=$F --model.vocab_size=$V --model.max_seq_len=$T" \
    "--model.tie_embeddings=$tie --train.seq_len=$T --train.batch_size=$2 --train.max_steps=$4" \
    "--train.device=$sharc_device --fsdp.param_dtype=bf16 --fsdp.activation_checkpointing=$3" \
    "--log.peak_tflops=$peak --data.format=u16 --data.path=$tmp/$1.u16"
}
tokens() { # model: random u16 tokens below the vocabulary, enough for every config
  local V n
  V=$(shape "$1" | cut -d' ' -f6)
  n=$([ "$tiny" = 1 ] && echo 20000 || echo 2000000)
  "$py" -c 'import random,sys,array; V,n=int(sys.argv[2]),int(sys.argv[3]); r=random.Random(1)
array.array("H",(r.randrange(V) for _ in range(n))).tofile(open(sys.argv[1],"wb"))' "$tmp/$1.u16" "$V" "$n"
}
configs() { # model: "batch ac" lines
  if [ "$1" = gpt2 ]; then for b in $gpt2_batches; do echo "$b false"; done
  else
    case $llama_ac in both) echo "16 false"; echo "16 true" ;; on) echo "16 true" ;; esac |
      if [ "$tiny" = 1 ]; then sed 's/^16/2/'; else cat; fi
  fi
}

for model in gpt2 llama; do
  steps=$([ "$model" = gpt2 ] && echo "$steps_gpt2" || echo "$steps_llama")
  tokens "$model"
  for sys in $systems; do
    if [ "$sys" = sharc ]; then
      while read -r b ac; do
        if late; then row "$model" "$b" "$ac" sharc "skipped: over the ${deadline} s budget"; continue; fi
        # shellcheck disable=SC2046 # sharc_args is a list of words
        if ! o=$("$bin/sharc" config $(sharc_args "$model" "$b" "$ac" $((warmup + steps))) 2>&1); then
          row "$model" "$b" "$ac" sharc "config refused: $(grep -m1 -v '^\s*$' <<< "$o")"; continue
        fi
        d=$tmp/sharc-$model-$b-$ac
        echo "== sharc $model B=$b ac=$ac" >&2
        # shellcheck disable=SC2046
        o=$(cd "$tmp" && timeout 300 "$bin/sharc" train $(sharc_args "$model" "$b" "$ac" $((warmup + steps))) \
          --train.out_dir="$d" 2>&1); rc=$?
        if [ $rc -ne 0 ]; then
          line=$(grep -m1 -E 'error|refused|train\.device' <<< "$o" || tail -n1 <<< "$o")
          row "$model" "$b" "$ac" sharc "$([ $rc -eq 2 ] && echo refused || echo "exit $rc"): $line"
          continue
        fi
        "$py" - "$d/metrics.jsonl" "$model" "$b" "$ac" "$warmup" "$peak" >> "$results" << 'EOF'
import json, statistics, sys
path, model, b, ac, warm, peak = sys.argv[1:]
m = [json.loads(l) for l in open(path) if l.strip()]
t = [r for r in m if r["step"] > int(warm)] or m
print(json.dumps({"system": "sharc", "model": model, "batch": int(b), "ac": ac == "true", "peak_tflops": float(peak),
                  "tokens_per_s": statistics.median(r["throughput/global(tps)"] for r in t),
                  "mfu": statistics.median(r["mfu(%)"] for r in t) / 100,
                  "peak_gib": max(r.get("memory/max_active(GiB)", 0) for r in m),
                  "loss": m[-1]["loss_metrics/global_avg_loss"], "loss_first": m[0]["loss_metrics/global_avg_loss"],
                  "steps": len(t)}))
EOF
      done < <(configs "$model")
      # one short profiled run of the model's first config: time per region by
      # device events, work and rates against the ceilings (note [prof])
      read -r b ac < <(configs "$model" | head -n1)
      if ! late; then
        echo "== sharc $model B=$b ac=$ac, profiled" >&2
        # shellcheck disable=SC2046
        tdir=$tmp # note [trace]: the timeline of steps 2-3 of this run, into $OUT
        [ -n "${OUT:-}" ] && mkdir -p "$OUT" && tdir=$(cd "$OUT" && pwd)
        (cd "$tmp" && SHARC_PROFILE=1 SHARC_PROFILE_TRACE="$tdir/trace_$model.json" timeout 300 "$bin/sharc" train $(sharc_args "$model" "$b" "$ac" $((1 + prof_steps))) \
          --train.out_dir="$tmp/prof-$model" > /dev/null 2> "$tmp/prof-$model.err")
        { echo "profile: sharc $model B=$b ac=$ac, $prof_steps step(s) after 1 left out"
          sed -n '/^# sharc profile/,$p' "$tmp/prof-$model.err"; } > "$tmp/profile-$model.txt"
        grep -q '^# sharc profile' "$tmp/profile-$model.txt" ||
          echo "no profile: $(grep -v '^\s*$' "$tmp/prof-$model.err" | tail -n1)" >> "$tmp/profile-$model.txt"
      fi
      continue
    fi
    # one torch process per system and model, every config of the model in it
    mapfile -t cfg < <(configs "$model")
    if late; then
      for c in "${cfg[@]}"; do read -r b ac <<< "$c"; row "$model" "$b" "$ac" "$sys" "skipped: over the ${deadline} s budget"; done
      continue
    fi
    args=(--system "$sys" --model "$model" --device "$device" "${tinyflag[@]}" --steps "$steps" --warmup "$warmup"
      --peak-tflops "$peak")
    for b in $(printf '%s\n' "${cfg[@]}" | cut -d' ' -f1 | sort -un); do args+=(--batch "$b"); done
    [ "$model" = llama ] && case $llama_ac in both) args+=(--ac-both) ;; on) args+=(--ac) ;; esac
    left=$((deadline - (SECONDS - t_start) + 60))
    echo "== torch $sys $model (at most ${left} s)" >&2
    PYTHONUNBUFFERED=1 timeout "$left" "$py" "$here/torch_gpu.py" "${args[@]}" > "$tmp/t.log" 2>&1; rc=$?
    grep '^RESULT ' "$tmp/t.log" | cut -c8- >> "$results"
    for c in "${cfg[@]}"; do
      read -r b ac <<< "$c"
      grep '^RESULT ' "$tmp/t.log" | grep -q "\"batch\": $b, \"ac\": $ac" && continue
      row "$model" "$b" "$ac" "$sys" "exit $rc: $(grep -v '^RESULT ' "$tmp/t.log" | grep -v '^\s*$' | tail -n1)"
    done
  done
done

# the largest Llama that plans within the GPU's memory, without and with offload
largest() { # j offload: the sharc arguments of the family's member j
  local j=$1 d L H
  if [ "$tiny" = 1 ]; then d=$((32 * j)) L=$j; else d=$((512 * j)) L=$((4 * j)); fi
  H=$((d / 64 > 0 ? d / 64 : 1))
  [ "$tiny" = 1 ] && H=$((d / 16))
  echo "--model.family=llama --model.num_layers=$L --model.embed_dim=$d --model.num_heads=$H" \
    "--model.num_kv_heads=$((H / 4 > 0 ? H / 4 : 1)) --model.ff_hidden_dim=$(((d * 11 / 4 + 255) / 256 * 256))" \
    "--model.vocab_size=$([ "$tiny" = 1 ] && echo 512 || echo 32000) --model.max_seq_len=$T_large" \
    "--model.tie_embeddings=false --train.seq_len=$T_large --train.batch_size=1 --fsdp.param_dtype=bf16" \
    "--fsdp.activation_checkpointing=true --fsdp.cpu_offload=$2"
}
if [[ " $systems " == *" sharc "* ]] && ! late; then
  T_large=$([ "$tiny" = 1 ] && echo 32 || echo 2048)
  mem=${MEM_GIB:-}
  [ -z "$mem" ] && [ "$tiny" = 1 ] && mem=0.004
  [ -z "$mem" ] && mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2> /dev/null |
    awk '{ printf "%.2f", $1 / 1024 }')
  lsteps=${LARGEST_STEPS:-4} lwarm=${LARGEST_WARMUP:-2} reserve=2
  [ "$tiny" = 1 ] && lsteps=2 lwarm=1 reserve=0
  : > "$tmp/largest.jsonl"
  for off in false true; do
    if [ -z "$mem" ]; then
      echo "{\"offload\": $off, \"error\": \"no GPU memory figure (nvidia-smi failed; set MEM_GIB)\"}" >> "$tmp/largest.jsonl"
      continue
    fi
    best=0 best_gib="" best_params=""
    for j in $(seq 1 64); do
      # shellcheck disable=SC2046
      p=$("$bin/sharc" plan --ranks 1 --train.device=cuda $(largest "$j" "$off") 2>&1) || break
      gib=$(awk '$1 == "total" { print $2 }' <<< "$p")
      awk -v g="$gib" -v m="$mem" -v r="$reserve" 'BEGIN { exit !(g != "" && g <= m - r) }' || break
      best=$j best_gib=$gib best_params=$(sed -n '1s/.*llama, \([0-9.e+]*\) parameters.*/\1/p' <<< "$p")
    done
    if [ "$best" = 0 ]; then
      echo "{\"offload\": $off, \"mem_gib\": $mem, \"error\": \"not even j = 1 plans within the memory\"}" >> "$tmp/largest.jsonl"
      continue
    fi
    d=$tmp/largest-$off
    echo "== sharc largest llama, offload $off: j=$best, $best_params parameters, planned $best_gib GiB of $mem" >&2
    # shellcheck disable=SC2046
    o=$(cd "$tmp" && timeout 300 "$bin/sharc" train $(largest "$best" "$off") --train.device="$sharc_device" \
      --train.max_steps="$lsteps" --log.peak_tflops="$peak" --data.format=u16 --data.path="$tmp/llama.u16" \
      --train.out_dir="$d" 2>&1 < /dev/null); rc=$?
    err=""
    [ $rc -ne 0 ] && err="$([ $rc -eq 2 ] && echo refused || echo "exit $rc"): $(grep -m1 -E 'error|refused' <<< "$o" || tail -n1 <<< "$o")"
    "$py" - "$d/metrics.jsonl" "$off" "$best" "$best_params" "$best_gib" "$mem" "$lwarm" "$err" \
      >> "$tmp/largest.jsonl" << 'PY'
import json, os, statistics, sys
path, off, j, params, gib, mem, warm, err = sys.argv[1:]
r = {"offload": off == "true", "j": int(j), "params": float(params), "planned_gib": float(gib), "mem_gib": float(mem)}
m = [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
m = [x for x in m if "throughput/global(tps)" in x]
if m and not err:
    t = [x for x in m if x["step"] > int(warm)] or m
    r["tokens_per_s"] = statistics.median(x["throughput/global(tps)"] for x in t)
    r["peak_gib"] = max(x.get("memory/max_active(GiB)", 0) for x in m)
else:
    r["error"] = err or "no metrics"
print(json.dumps(r))
PY
  done
fi

"$py" - "$results" "${OUT:-}" "$((SECONDS - t_start))" "$peak" "$tmp" << 'EOF'
import glob, json, os, sys
path, out, secs, peak, tmp = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.strip()]
order = {"sharc": 0, "eager": 1, "compile": 2, "fsdp2": 3}
rows.sort(key=lambda r: (r["model"] != "gpt2", r["batch"], r["ac"], order.get(r["system"], 9)))
base = {(r["model"], r["batch"], r["ac"]): r["tokens_per_s"] for r in rows if r["system"] == "fsdp2" and "tokens_per_s" in r}
lines = ["%-6s %4s %-3s %-8s %11s %6s %8s %7s  %s" % ("model", "B", "AC", "system", "tokens/s", "MFU%", "peak GiB", "x fsdp2", "note")]
for r in rows:
    ac = "on" if r["ac"] else "off"
    if "tokens_per_s" in r:
        b = base.get((r["model"], r["batch"], r["ac"]))
        r["x_fsdp2"] = r["tokens_per_s"] / b if b else None
        lines.append("%-6s %4d %-3s %-8s %11.0f %6.1f %8.1f %7s  %s" % (
            r["model"], r["batch"], ac, r["system"], r["tokens_per_s"], 100 * r["mfu"], r["peak_gib"],
            "%.2f" % r["x_fsdp2"] if b else "-", "loss %.3f" % r["loss"]))
    else:
        lines.append("%-6s %4d %-3s %-8s %11s %6s %8s %7s  %s" % (r["model"], r["batch"], ac, r["system"], "-", "-", "-", "-", r["error"][:160]))
lines.append(f"MFU against {peak} TFLOP/s (bf16 dense peak); {secs} s in all")
profiles = {}
for f in sorted(glob.glob(os.path.join(tmp, "profile-*.txt"))):
    profiles[os.path.basename(f)[8:-4]] = open(f).read().rstrip("\n")
large = []
lp = os.path.join(tmp, "largest.jsonl")
if os.path.exists(lp):
    large = [json.loads(l) for l in open(lp) if l.strip()]
ll = []
for r in large:
    head = "largest llama, offload %-3s: " % ("on" if r["offload"] else "off")
    if "j" not in r:
        ll.append(head + r["error"])
        continue
    head += "j=%d, %.3g parameters, device memory planned %.3g GiB of %.3g" % (r["j"], r["params"], r["planned_gib"], r["mem_gib"])
    ll.append(head + (": %.0f tokens/s, peak %.2f GiB" % (r["tokens_per_s"], r["peak_gib"]) if "tokens_per_s" in r
                      else ": " + r["error"][:160]))
text = "\n\n".join(list(profiles.values()) + ["\n".join(lines)] + (["\n".join(ll)] if ll else []))
print(text)
if out:
    os.makedirs(out, exist_ok=True)
    json.dump(rows, open(os.path.join(out, "gpu_bench.json"), "w"), indent=1)
    if large:
        json.dump(large, open(os.path.join(out, "largest_llama.json"), "w"), indent=1)
    open(os.path.join(out, "gpu_bench.txt"), "w").write(text + "\n")
    for m, p in profiles.items():
        open(os.path.join(out, f"profile_{m}.txt"), "w").write(p + "\n")
EOF
