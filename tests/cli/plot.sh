#!/usr/bin/env bash
# timeout: 60
# sharc plot: two runs' metrics (one with validation lines) -> loss,
# throughput and memory PNGs (valid signature, non-trivial size, the data
# columns gnuplot drew); a bad metrics line is a one-line error naming it.
set -euo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > text.txt
head -c 4000 text.txt > val.txt
common=(--model.num_layers=1 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=32 --data.path=text.txt
        --train.seq_len=32 --train.batch_size=2 --train.max_steps=6 --train.threads=1 --log.peak_tflops=0.1)
"$S" train "${common[@]}" --train.out_dir=run_a > /dev/null 2>&1
"$S" train "${common[@]}" --train.out_dir=run_b --data.val_path=val.txt --log.eval_every=3 > /dev/null 2>&1
"$S" plot run_a/metrics.jsonl run_b/metrics.jsonl --out plots
for p in loss throughput memory; do
  f=plots/$p.png
  sig=$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')
  [ "$sig" = 89504e470d0a1a0a ] || { echo "$f: not a PNG ($sig)"; exit 1; }
  size=$(stat -c %s "$f")
  [ "$size" -gt 5000 ] || { echo "$f: only $size bytes"; exit 1; }
  echo "$f: PNG, $size bytes"
done
# what was drawn: every training step of both runs, run_b's two validations
[ "$(wc -l < plots/run-0.dat)" -eq 6 ] && [ "$(wc -l < plots/run-1.dat)" -eq 6 ]
[ "$(wc -l < plots/val-0.dat)" -eq 0 ] && [ "$(wc -l < plots/val-1.dat)" -eq 2 ]
grep -q "title 'run-a'" plots/plot.gp && grep -q "title 'run-b (val)'" plots/plot.gp
# the loss column is the metrics file's loss
want=$(head -1 run_a/metrics.jsonl | jq '.["loss_metrics/global_avg_loss"]')
awk -v w="$want" 'NR == 1 { exit !(($2 - w) ^ 2 < 1e-10) }' plots/run-0.dat
# bad input
echo 'not json' > bad.jsonl
if "$S" plot bad.jsonl --out plots2 > bad.txt 2>&1; then exit 1; fi
grep -q "bad.jsonl' line 1 is not a JSON object" bad.txt
if "$S" plot run_a/metrics.jsonl > bad.txt 2>&1; then exit 1; fi
grep -q "usage: sharc plot" bad.txt
echo "plot ok"
