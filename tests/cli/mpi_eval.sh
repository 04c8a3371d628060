#!/usr/bin/env bash
# timeout: 120
# Validation: a 2-rank FULL_SHARD run with log.eval_every writes val lines;
# `sharc eval` of its final weights at 1, 2 and 3 ranks (another batch size)
# gives the loss of its last val line (all windows, same weights). The value
# itself equals a one-window-at-a-time forward: tests/test_eval.c.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
make_text text.txt
for i in $(seq 1 40); do echo "a lazy dog sleeps under the brown fox $((i % 5))"; done > val.txt
mpi 2 "$S" train --model.num_layers=2 --model.embed_dim=64 --model.num_heads=4 --model.max_seq_len=32 \
    --data.path=text.txt --data.val_path=val.txt --train.seq_len=32 --train.batch_size=2 --train.max_steps=10 --train.threads=1 \
    --optim.lr=3e-3 --optim.warmup_steps=2 --log.eval_every=5 --train.out_dir=run > train.txt 2>&1 \
  || { cat train.txt; exit 1; }
grep '"loss_metrics/val_loss"' run/metrics.jsonl > val_lines.txt
[ "$(wc -l < val_lines.txt)" -eq 2 ] || { echo "expected 2 val lines (steps 5, 10)"; cat run/metrics.jsonl; exit 1; }
jq -e -s '.[0].step == 5 and .[1].step == 10 and .[1]["loss_metrics/val_loss"] < .[0]["loss_metrics/val_loss"]
          and ((.[1]["loss_metrics/val_perplexity"] - (.[1]["loss_metrics/val_loss"] | exp)) | fabs) < 1e-3 * .[1]["loss_metrics/val_perplexity"]' \
  val_lines.txt > /dev/null
want=$(jq -s '.[1]["loss_metrics/val_loss"]' val_lines.txt)
windows=$(jq -s '.[1]["val/windows"]' val_lines.txt)
for n in 1 2 3; do
  out=$(mpi $n "$S" eval --checkpoint run --data.path val.txt --infer_batch_size 3 --threads 1)
  echo "$n ranks: $out (training's last val loss $want)"
  echo "$out" | jq -e --argjson want "$want" --argjson w "$windows" --argjson n $n \
    '.ranks == $n and .windows == $w and ((.val_loss - $want) | fabs) <= 2e-6 + 1e-5 * $want' > /dev/null
done
# validation between steps leaves training untouched (SHARD_GRAD_OP keeps units gathered
# from forward to backward; evaluation must not leave them so): same losses with and without
for ev in 0 2; do
  mpi 2 "$S" train --model.num_layers=2 --model.embed_dim=64 --model.num_heads=4 --model.max_seq_len=32 \
      --data.path=text.txt --data.val_path=val.txt --train.seq_len=32 --train.batch_size=2 --train.max_steps=5 \
      --train.threads=1 --fsdp.sharding_strategy=SHARD_GRAD_OP --log.eval_every=$ev --train.out_dir=sgo$ev > /dev/null 2>&1
  jq -c 'select(.["loss_metrics/global_avg_loss"]) | .["loss_metrics/global_avg_loss"]' sgo$ev/metrics.jsonl > losses$ev.txt
done
[ "$(grep -c val_loss sgo2/metrics.jsonl)" -eq 2 ]
cmp losses0.txt losses2.txt
# bad input: one line naming the problem, non-zero exit, on every rank
if mpi 2 "$S" eval --checkpoint run --data.path missing.txt > bad.txt 2>&1; then exit 1; fi
grep -q "missing.txt" bad.txt
if "$S" eval --checkpoint run > bad.txt 2>&1; then exit 1; fi
grep -q "data.path VAL are required" bad.txt
echo "eval ok"
