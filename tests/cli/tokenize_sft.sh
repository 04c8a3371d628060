#!/usr/bin/env bash
# timeout: 300
# sharc tokenize and SFT training end to end with the committed small BPE
# tokenizer (tests/fixtures/tokenizer/small):
#  - the KJV text tokenized by the command gives the ids of Hugging Face's JS
#    tokenizers (their digest in tests/fixtures/tokenizer/small.ref), on 1
#    and 2 threads;
#  - JSONL documents -> llm.c tokens, each document followed by EOS;
#  - SFT JSONL -> a sharc SFT file; training from it and from the JSONL
#    (tokenized when training starts) gives the same losses (note
#    [tokenize-once] in sharc/dataprep.h); the loss falls; generate decodes
#    with the run's tokenizer; chat records train with the recognised ChatML
#    template;
#  - bad input: one line naming the key, the file or the value.
set -euo pipefail
S="$SHARC_BIN/sharc"
TOK="$SHARC_ROOT/tests/fixtures/tokenizer/small"
cd "$TMPDIR"
u16_digest() { # FILE: count and sha256 of its uint16 llm.c tokens as little-endian uint32
  tail -c +1025 "$1" | python3 -c 'import sys, struct, hashlib
b = sys.stdin.buffer.read(); n = len(b) // 2; ids = struct.unpack("<%dH" % n, b)
print(n, hashlib.sha256(struct.pack("<%dI" % n, *ids)).hexdigest())'
}

# --- KJV against the reference
if command -v bible >/dev/null 2>&1; then
  bible -f 'Gen1:1-Rev22:21' > kjv.txt
  read -r text_sha want_n want_sha < <(awk '/^corpus kjv/ {print $7, $9, $11}' "$SHARC_ROOT/tests/fixtures/tokenizer/small.ref")
  if [ "$(sha256sum < kjv.txt | cut -d' ' -f1)" = "$text_sha" ]; then
    for th in 1 2; do
      "$S" tokenize --tokenizer "$TOK" --data.path=kjv.txt --out kjv$th.bin --threads $th 2> tok$th.log
      grep -q "tokens (llm.c, uint16)" tok$th.log
      got=$(u16_digest kjv$th.bin)
      [ "$got" = "$want_n $want_sha" ] || { echo "KJV on $th threads: $got, the reference: $want_n $want_sha"; exit 1; }
    done
    echo "KJV: $want_n ids as the reference on 1 and 2 threads; $(grep -o '[0-9.]* MB/s' tok2.log)"
  else
    echo "this bible-kjv prints another text than the reference's; KJV check skipped"
  fi
fi

# --- JSONL documents: each followed by EOS (<|im_end|>)
eos=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print([a["id"] for a in t["added_tokens"] if a["content"]=="<|im_end|>"][0])' "$TOK/tokenizer.json")
printf '{"text": "In the beginning"}\n\n{"text": "God created"}\n' > docs.jsonl
printf 'In the beginning' > one.txt
"$S" tokenize --tokenizer "$TOK" --data.path=docs.jsonl --data.input_key=text --out docs.bin 2>/dev/null
"$S" tokenize --tokenizer "$TOK" --data.path=one.txt 2>/dev/null   # -> one.bin
python3 - "$eos" <<'PY'
import struct, sys
eos = int(sys.argv[1])
def ids(p):
    b = open(p, "rb").read()[1024:]
    return list(struct.unpack("<%dH" % (len(b) // 2), b))
d, one = ids("docs.bin"), ids("one.bin")
assert d.count(eos) == 2 and d[-1] == eos, d
assert d[:len(one)] == one and d[len(one)] == eos, (d, one)
PY

# --- SFT records
python3 - <<'PY'
import json, random
r = random.Random(5)
with open("sft.jsonl", "w") as f:
    for i in range(64):
        a, b = r.randint(0, 30), r.randint(0, 30)
        f.write(json.dumps({"question": "What is %d plus %d?" % (a, b), "response": "It is %d." % (a + b)}) + "\n")
with open("chat.jsonl", "w") as f:
    for i in range(32):
        a = r.randint(0, 9)
        f.write(json.dumps({"messages": [{"role": "user", "content": "Double %d" % a},
                                         {"role": "assistant", "content": str(2 * a)}]}) + "\n")
PY
"$S" tokenize --tokenizer "$TOK" --data.path=sft.jsonl --input_key question --output_key response --max_len 33 \
    --out sft.sft 2> sft.log
grep -q "64 records) -> sft.sft: 64 SFT samples" sft.log || { cat sft.log; exit 1; }
common="--model.tokenizer=$TOK --model.vocab_size=768 --train.seq_len=32 --model.max_seq_len=32 --model.num_layers=2
        --model.embed_dim=64 --model.num_heads=2 --train.batch_size=8 --train.max_steps=40 --optim.lr=3e-3
        --optim.warmup_steps=5 --train.log_every=20 --train.threads=1"
"$S" train $common --data.path=sft.sft --train.out_dir=run_file > log_file 2>&1
"$S" train $common --data.path=sft.jsonl --input_key question --output_key response --train.out_dir=run_jsonl > log_jsonl 2>&1
grep -q "sft.jsonl: 64 records -> 64 SFT samples" log_jsonl || { cat log_jsonl; exit 1; }
loss() { grep -o '"loss_metrics/global_avg_loss": [0-9.e+-]*' "$1/metrics.jsonl" | cut -d' ' -f2; }
cmp <(loss run_file) <(loss run_jsonl) || { echo "training from the SFT file and from the JSONL differ"; exit 1; }
first=$(loss run_jsonl | head -1); last=$(loss run_jsonl | tail -1)
echo "SFT loss $first -> $last"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 2) }'
out=$("$S" generate --checkpoint run_jsonl --prompt $'User: What is 3 plus 4?\nAssistant:' --tokens 12 --temperature 0)
echo "$out"
grep -q "^Assistant: It is" <<< "$out"
# export carries the tokenizer files; import records them as model.tokenizer: the same text comes back
"$S" export --checkpoint run_jsonl --out hf > /dev/null
cmp hf/tokenizer.json "$TOK/tokenizer.json" && cmp hf/tokenizer_config.json "$TOK/tokenizer_config.json"
"$S" import --hf hf --out imported.safetensors > /dev/null
out2=$(cd / && "$S" generate --checkpoint "$TMPDIR/imported.safetensors" --prompt $'User: What is 3 plus 4?\nAssistant:' \
       --tokens 12 --temperature 0)
[ "$out2" = "$out" ] || { echo "generate from the imported model: '$out2', from the run: '$out'"; exit 1; }
# chat records: ChatML recognised from the tokenizer's template, every record kept
"$S" train $common --data.path=chat.jsonl --data.input_key=messages --apply_chat_template --train.max_steps=3 \
    --train.out_dir=run_chat > log_chat 2>&1 || { cat log_chat; exit 1; }
grep -q "chat.jsonl: 32 records -> 32 SFT samples" log_chat
# OpenRLHF's packing flag is data.packing (note [packing-rule] in sharc/data.h)
cfg=$("$S" config --packing_samples 2>&1)
grep -q "^  packing: true" <<< "$cfg" || { echo "--packing_samples: $cfg"; exit 1; }

# --- bad input: one line, naming the key, file or value; nothing written
expect_fail() { # expected-substring command...
  local want="$1"; shift
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ]; then echo "expected failure: $*"; exit 1; fi
  if ! grep -qF -- "$want" <<< "$err"; then echo "message for '$*' was: $err"; echo "expected: $want"; exit 1; fi
  if [ "$(grep -c . <<< "$err")" -ne 1 ]; then echo "expected one line, got: $err"; exit 1; fi
}
set +e
small="--model.vocab_size=768 --train.seq_len=32 --model.max_seq_len=32"
expect_fail "is JSONL (SFT records): set model.tokenizer" "$S" train $small --data.path=sft.jsonl --train.out_dir=bad1
expect_fail "model.vocab_size: 256 is smaller than the 759 ids of model.tokenizer" "$S" train --model.tokenizer="$TOK" \
    --data.path=sft.jsonl --output_key response --train.out_dir=bad2
expect_fail "'sft.sft' has a sample of 31 tokens, more than train.seq_len + 1 = 9" "$S" train --model.tokenizer="$TOK" \
    --model.vocab_size=768 --train.seq_len=8 --data.path=sft.sft --train.out_dir=bad3
mkdir -p other && sed 's/"version": "1.0"/"version": "1.0" /' "$TOK/tokenizer.json" > other/tokenizer.json
expect_fail "'sft.sft' was tokenized with another tokenizer" "$S" train $small --model.tokenizer=other --data.path=sft.sft \
    --train.out_dir=bad4
mkdir -p tmpl && cp "$TOK/tokenizer.json" tmpl/ && echo '{"eos_token": "<|im_end|>", "chat_template": "{{ messages }}"}' > tmpl/tokenizer_config.json
expect_fail "its chat_template (14 bytes" "$S" train $small --model.tokenizer=tmpl --data.path=chat.jsonl \
    --data.input_key=messages --apply_chat_template --train.out_dir=bad5
expect_fail "sft.jsonl line 1: no key 'answer'" "$S" train $small --model.tokenizer="$TOK" --data.path=sft.jsonl \
    --input_key question --output_key answer --train.out_dir=bad6
expect_fail "tokenize: set model.tokenizer" "$S" tokenize --data.path=sft.jsonl
expect_fail "'docs.bin' is llmc tokens already" "$S" tokenize --tokenizer "$TOK" --data.path=docs.bin
expect_fail "no model.tokenizer; give --tokenizer" "$S" generate --checkpoint run_file/model.safetensors --tokenizer ""
set -e
for d in bad1 bad2 bad3 bad4 bad5 bad6; do test ! -e $d || { echo "a failed run left $d behind"; exit 1; }; done
echo ok
