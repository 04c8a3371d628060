#!/usr/bin/env bash
# sp.sh BUILD_DIR: Ulysses sequence parallelism (mesh.sp) against plain FSDP
# at the same world size, in one run: a Llama (L layers, C wide, NH heads,
# NKV key/value heads) on sequences of T tokens, one sequence per data
# stream per micro-batch, RANKS ranks (default 4) at sp 1, 2 and 4.
#
#   RANKS=4 T=1024 bench/sp.sh build
#
# Per configuration: rank 0's peak activation memory (the "activations"
# category of the accounted allocator, from log.debug) and its ratio to
# sp = 1, and the all-to-all bytes rank 0 counted in step 2 (comm stats:
# every slice of the send buffer, its own included) next to the formula of
# note [ulysses]: per block and micro-batch, forward and backward each send
# B Tl hd (2 NH + 2 NKVr) floats, NKVr = max(NKV, sp), Tl = T / sp.
# sp = 1 keeps T tokens per rank (RANKS sequences per step), sp = s keeps
# T / s (RANKS / s sequences per step): the long-context trade.
set -euo pipefail
build=${1:-build}
ranks=${RANKS:-4}
T=${T:-1024}
L=4 C=256 NH=8 NKV=4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_base_warn_component_unused=0
for i in $(seq 1 4000); do echo "the quick brown fox jumps over the lazy dog $((i % 97))"; done > "$work/text.txt"
printf "%-4s %14s %8s %16s %16s %6s\n" sp "act peak MiB" "vs sp1" "a2a bytes/step" "formula" "equal"
base=0
for sp in 1 2 4; do
  out="$work/run$sp"
  timeout 600 mpirun --oversubscribe --bind-to none -n "$ranks" "$build/sharc" train --data.path="$work/text.txt" \
    --train.out_dir="$out" --train.max_steps=2 --train.seq_len=$T --train.batch_size=1 --train.threads=1 \
    --model.family=llama --model.num_layers=$L --model.embed_dim=$C --model.num_heads=$NH --model.num_kv_heads=$NKV \
    --model.vocab_size=512 --mesh.sp=$sp --log.debug=true --train.timeout=0 > "$work/log$sp" 2>&1 \
    || { cat "$work/log$sp"; exit 1; }
  base=$(/usr/bin/python3 - "$out/debug/rank-0.log" $sp $T $L $C $NH $NKV $base <<'PY'
import json, sys
path, (sp, T, L, C, NH, NKV), base = sys.argv[1], map(int, sys.argv[2:8]), float(sys.argv[8])
line = [json.loads(l) for l in open(path)][-1]
act = line["memory/activations_peak(GiB)"] * 1024
got = line["comm/all_to_all_bytes"]
hd, Tl = C // NH, T // sp
formula = 0 if sp == 1 else L * 2 * Tl * hd * (2 * NH + 2 * max(NKV, sp)) * 4
base = base if base > 0 else act
print("%-4d %14.1f %8.3f %16d %16d %6s" % (sp, act, act / base, got, formula, "yes" if got == formula else "NO"),
      file=sys.stderr)
print(base)
PY
  )
done 2>&1
