#!/usr/bin/env bash
# sft.sh BUILD_DIR: an SFT step against a pretraining step of the same shape
# (same model, batch and sequence length; one process), and the tokenizer's
# throughput. Prints a table.
#
#   bench/sft.sh build              REPEATS=3 STEPS=20 bench/sft.sh build
#
# Model: a small Llama (L=4, d=256, 8 heads, 4 kv heads) with the committed
# small tokenizer (tests/fixtures/tokenizer/small, 759 ids; vocab 768),
# B=8, T=256, THREADS threads (default 2). Pretraining trains on windows of
# the KJV text tokenized by `sharc tokenize`; SFT on JSONL records (KJV
# verses as prompt and response, 60-250 tokens a sample, padded to T, loss on
# the response only) from the SFT file `sharc tokenize` wrote, and straight
# from the JSONL (tokenized at start). Each run's figures are the medians of
# steps 3..STEPS (metrics.jsonl) of the end-to-end step time and of the
# step's CPU time per thread (less sensitive to other processes on a shared
# machine); runs alternate REPEATS times and the best run of each kind is
# compared. Tokenizer
# throughput: `sharc tokenize` on the KJV text with each tokenizer present
# (the small one, and GPT-2 / Llama-3 / Qwen3 from scripts/fetch_tokenizers.sh).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
S="$build/sharc"
root=$(cd "$(dirname "$0")/.." && pwd)
TOK="$root/tests/fixtures/tokenizer/small"
REPEATS=${REPEATS:-2} STEPS=${STEPS:-20} THREADS=${THREADS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
bible -f 'Gen1:1-Rev22:21' > kjv.txt
python3 - <<'PY'
import json
lines = [l.split(" ", 1)[1] for l in open("kjv.txt", encoding="utf-8").read().split("\n") if " " in l]
with open("sft.jsonl", "w") as f:
    for i in range(0, len(lines) - 12, 6):
        f.write(json.dumps({"question": " ".join(lines[i:i + 2]), "response": " ".join(lines[i + 2:i + 6])}) + "\n")
PY
"$S" tokenize --tokenizer "$TOK" --data.path=kjv.txt --out kjv.bin 2> tok.log
"$S" tokenize --tokenizer "$TOK" --data.path=sft.jsonl --input_key question --output_key response --max_len 257 \
    --out sft.sft 2> sft.log
cat sft.log
model="--model.family=llama --model.num_layers=4 --model.embed_dim=256 --model.num_heads=8 --model.num_kv_heads=4
       --model.vocab_size=768 --model.tokenizer=$TOK --train.seq_len=256 --train.batch_size=8 --train.threads=$THREADS
       --train.max_steps=$STEPS --train.log_every=1000 --ckpt.every=0 --log.peak_tflops=0.265"
median_of() { # run dir, metric: median of steps 3.. (seconds)
  grep -o "\"time_metrics/$2\": [0-9.e+-]*" "$1/metrics.jsonl" | tail -n +3 | cut -d' ' -f2 | sort -g |
    awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'
}
declare -A best bestcpu
for r in $(seq 1 "$REPEATS"); do
  for kind in pretrain sft_file sft_jsonl; do
    case $kind in
      pretrain)  data="--data.path=kjv.bin" ;;
      sft_file)  data="--data.path=sft.sft" ;;
      sft_jsonl) data="--data.path=sft.jsonl --input_key question --output_key response" ;;
    esac
    start=$(date +%s.%N)
    "$S" train $model $data --train.out_dir=run_${kind}_$r > log_${kind}_$r 2>&1
    wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
    m=$(median_of run_${kind}_$r 'end_to_end(s)')
    c=$(median_of run_${kind}_$r 'cpu(s)')
    printf "run %d %-10s median step %.4f s, CPU %.4f s per thread (whole run %.1f s)\n" "$r" "$kind" "$m" "$c" "$wall"
    if [ -z "${best[$kind]:-}" ] || awk -v a="$m" -v b="${best[$kind]}" 'BEGIN { exit !(a < b) }'; then best[$kind]=$m; fi
    if [ -z "${bestcpu[$kind]:-}" ] || awk -v a="$c" -v b="${bestcpu[$kind]}" 'BEGIN { exit !(a < b) }'; then bestcpu[$kind]=$c; fi
  done
done
echo
printf "%-12s %12s %8s %14s %8s\n" "best run" "median step" "ratio" "CPU per thread" "ratio"
for kind in pretrain sft_file sft_jsonl; do
  printf "%-12s %10.4f s %8.3f %12.4f s %8.3f\n" "$kind" "${best[$kind]}" \
    "$(awk -v a="${best[$kind]}" -v b="${best[pretrain]}" 'BEGIN { print a / b }')" "${bestcpu[$kind]}" \
    "$(awk -v a="${bestcpu[$kind]}" -v b="${bestcpu[pretrain]}" 'BEGIN { print a / b }')"
done
grep -h "SFT samples" log_sft_jsonl_1 | sed 's/^/sft_jsonl start: /'
echo
echo "tokenizer throughput (sharc tokenize, KJV $(stat -c %s kjv.txt) bytes, $THREADS threads):"
cache=${SHARC_TOKENIZERS:-${XDG_CACHE_HOME:-$HOME/.cache}/sharc/tokenizers}
for t in "$TOK" "$cache/gpt2" "$cache/llama3" "$cache/qwen3"; do
  [ -f "$t/tokenizer.json" ] || continue
  for r in $(seq 1 "$REPEATS"); do
    "$S" tokenize --tokenizer "$t" --data.path=kjv.txt --out k.bin --threads "$THREADS" 2>&1 | grep -o '[0-9.]* MB/s ([0-9.]* s)' |
      sed "s|^|  $(basename "$t") run $r: |"
  done
done
