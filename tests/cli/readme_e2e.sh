#!/usr/bin/env bash
# timeout: 180
# The README's "Fine-tune a Hugging Face model, end to end" block, run as
# written: the block between its e2e markers is extracted, and only the
# model directory, sizes, steps and learning rate are scaled down (each
# replaced string must be present, so an edit of the README that this test
# no longer matches fails here). The model: a 2-layer Qwen3 exported by
# sharc, with the committed small tokenizer (ChatML template) beside it.
# Checked: 200 SFT samples tokenized; 2 ranks FULL_SHARD through sharc
# launch; the loss falls; the exported directory is a qwen3 Hugging Face
# directory with the tokenizer; greedy chat from it equals greedy chat from
# the run's own checkpoint, and so does sharc eval's validation loss;
# exporting it again gives the same safetensors bytes as the first export.
set -euo pipefail
S="$SHARC_BIN/sharc"
TOK="$SHARC_ROOT/tests/fixtures/tokenizer/small"
cd "$TMPDIR"
fail() { echo "FAIL: $*"; exit 1; }
block=$(sed -n '/^<!-- e2e: begin/,/^<!-- e2e: end/p' "$SHARC_ROOT/README.md" | sed '1,2d;$d' | sed '$d')
[ -n "$block" ] || fail "no e2e block in README.md"
sub() { # FROM TO: replace in the block, which must contain FROM
  grep -qF -- "$1" <<< "$block" || fail "README block no longer contains '$1'"
  block=${block//"$1"/"$2"}
}
sub "HF=Qwen3-0.6B" "HF=Tiny-Qwen3"
sub "--max_len 1024" "--max_len 64"
sub "--train.seq_len=1023" "--train.seq_len=63 --train.log_every=1 --train.threads=1"
sub "--max-steps 200" "--max-steps 40"
sub "--lr 1e-5" "--lr 3e-3"
sub "--batch-size 4" "--batch-size 8"
sub '--chat' '--chat --temperature 0 --tokens 6 > chat.txt'

# the model directory a user would download
printf 'In the beginning God created the heaven and the earth.\n%.0s' {1..50} > text.txt
"$S" train --data.path=text.txt --model.family=llama --model.qk_norm=true --model.head_dim=16 \
    --model.tie_embeddings=true --model.vocab_size=768 --model.num_layers=2 --model.embed_dim=64 --model.num_heads=4 \
    --model.num_kv_heads=2 --model.ff_hidden_dim=128 --train.seq_len=64 --model.max_seq_len=256 --train.max_steps=1 \
    --optim.lr=0 --train.out_dir=base --train.threads=1 > base.log 2>&1 || { cat base.log; fail "making the base model"; }
"$S" export --checkpoint base --out Tiny-Qwen3 > /dev/null
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" Tiny-Qwen3/
python3 - <<'PY'
import json, random
r = random.Random(5)
with open("sft.jsonl", "w") as f:
    for i in range(200):
        a, b = r.randint(0, 9), r.randint(0, 9)
        f.write(json.dumps({"question": "What is %d plus %d?" % (a, b), "response": "%d" % (a + b)}) + "\n")
PY

# the README's commands, with `sharc` the binary under test
mkdir -p bin && ln -s "$S" bin/sharc
PATH="$PWD/bin:$PATH" bash -euo pipefail -c "$block" > e2e.log 2>&1 || { tail -30 e2e.log; fail "the README block failed"; }

grep -q "200 SFT samples" e2e.log || fail "tokenize: $(grep 'sharc tokenize' e2e.log)"
grep -q "^sharc launch: mpirun -n 2 " e2e.log || fail "not launched on 2 ranks"
first=$(grep -m1 -o '^step  *1/40 | loss [0-9.]*' e2e.log | awk '{print $NF}')
last=$(grep -o '^step  *40/40 | loss [0-9.]*' e2e.log | awk '{print $NF}')
[ -n "$first" ] && [ -n "$last" ] || fail "no step lines"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.7 * a) }' || fail "the loss did not fall: $first -> $last"
grep -q '"model_type": "qwen3"' Tiny-Qwen3-sft/config.json || fail "exported config.json"
[ -s Tiny-Qwen3-sft/tokenizer.json ] && [ -s Tiny-Qwen3-sft/tokenizer_config.json ] || fail "exported tokenizer files"
"$S" generate --checkpoint runs/sft --prompt "What is 2 plus 3?" --chat --temperature 0 --tokens 6 > chat_run.txt 2>/dev/null
[ -s chat.txt ] && cmp -s chat.txt chat_run.txt || fail "the exported directory generates '$(cat chat.txt)', the run '$(cat chat_run.txt)'"
# the whole model, not only a few greedy tokens: validation loss on the SFT
# samples from the exported directory and from the run's checkpoint
for src in runs/sft Tiny-Qwen3-sft; do
  "$S" eval --checkpoint $src --data.path=sft.sft --seq_len 63 --infer_batch_size 16 2>/dev/null | tail -1 > "eval_${src%%/*}.json"
done
l_run=$(jq -r .val_loss eval_runs.json); l_hf=$(jq -r .val_loss eval_Tiny-Qwen3-sft.json)
[ -n "$l_run" ] && [ "$l_run" = "$l_hf" ] || fail "val_loss from the exported directory $l_hf, from the run $l_run"
"$S" export --checkpoint Tiny-Qwen3-sft --out again > /dev/null
cmp Tiny-Qwen3-sft/model.safetensors again/model.safetensors || fail "re-export of the Hugging Face directory differs"
echo "ok: training loss $first -> $last; val_loss $l_run from both; chat: '$(tail -n +2 chat.txt | tr '\n' ' ')'"
