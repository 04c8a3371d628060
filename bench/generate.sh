#!/usr/bin/env bash
# generate.sh BUILD_DIR: the per-token cost of `sharc generate` with the
# key/value cache against recomputing the prefix (--no-kv-cache), at two
# prompt lengths, in the same run. Prints a table.
#
#   bench/generate.sh build            REPEATS=3 TOKENS=64 bench/generate.sh build
#
# Model: a byte-level Llama (L=4, d=256, 8 heads, 4 kv heads, T=1024 planned
# positions) after one training step; one thread. A token's cost is
# (time of TOKENS tokens - time of 1 token) / (TOKENS - 1), each the best of
# REPEATS alternating runs, so loading and the prompt's prefill cancel out.
# With the cache the cost should hardly depend on the prompt length (one
# token's forward plus attention over the cached positions); without it, it
# grows with the prefix (a forward over every position).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
S="$build/sharc"
REPEATS=${REPEATS:-2} TOKENS=${TOKENS:-64}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > text.txt
"$S" train --model.family=llama --model.num_layers=4 --model.embed_dim=256 --model.num_heads=8 --model.num_kv_heads=4 \
    --model.max_seq_len=1024 --data.path=text.txt --train.seq_len=1024 --train.batch_size=1 --train.max_steps=1 \
    --train.threads=1 --train.log_every=1000 --ckpt.every=0 --train.out_dir=run > train.log 2>&1
prompt() { head -c "$1" text.txt | tr '\n' ' '; }
run_time() { # prompt-bytes tokens extra...: seconds
  local p=$1 n=$2; shift 2
  local t0; t0=$(date +%s.%N)
  "$S" generate --checkpoint run --prompt "$(prompt "$p")" --tokens "$n" --temperature 0 --threads 1 "$@" > /dev/null
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }'
}
declare -A best
for r in $(seq 1 "$REPEATS"); do
  for p in 32 512; do
    for kind in cache nocache; do
      extra=$([ $kind = nocache ] && echo --no-kv-cache || true)
      for n in 1 "$TOKENS"; do
        t=$(run_time "$p" "$n" $extra)
        k="$kind/$p/$n"
        best[$k]=$(awk -v a="${best[$k]:-1e9}" -v b="$t" 'BEGIN { print (b < a) ? b : a }')
      done
    done
  done
done
per_token() { awk -v a="${best[$1/$2/$TOKENS]}" -v b="${best[$1/$2/1]}" -v n="$TOKENS" 'BEGIN { printf "%.2f", (a - b) / (n - 1) * 1000 }'; }
printf "%-14s %16s %16s %10s\n" "prompt bytes" "cached ms/tok" "uncached ms/tok" "speed-up"
for p in 32 512; do
  c=$(per_token cache $p) u=$(per_token nocache $p)
  printf "%-14s %16s %16s %9sx\n" "$p" "$c" "$u" "$(awk -v a="$u" -v b="$c" 'BEGIN { printf "%.1f", a / b }')"
done
