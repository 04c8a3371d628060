#!/usr/bin/env bash
# timeout: 120
# Bad input: one-line error naming the key, file or value, a non-zero exit,
# and nothing written.
set -uo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
printf 'hello world, hello world\n%.0s' $(seq 1 50) > t.txt

expect_fail() { # expected-substring command...
  local want="$1"; shift
  local err
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 0 ]; then echo "expected failure: $*"; exit 1; fi
  if ! grep -qF -- "$want" <<< "$err"; then echo "message for '$*' was: $err"; echo "expected: $want"; exit 1; fi
  if [ "$(wc -l <<< "$err")" -ne 1 ]; then echo "expected one line, got: $err"; exit 1; fi
  if grep -q -i 'segmentation\|abort\|core dumped' <<< "$err"; then echo "crashed: $err"; exit 1; fi
}

expect_fail "unknown key 'model.num_layer'; did you mean 'model.num_layers'?" "$S" train --model.num_layer=3
expect_fail "model.family = 'gpt3': expected one of gpt2, llama" "$S" train --model.family=gpt3
expect_fail "cannot open '/nonexistent.yaml'" "$S" train --config /nonexistent.yaml
printf 'model:\n  num_layers: x\n' > bad.yaml
expect_fail "config 'bad.yaml' line 2: model.num_layers = 'x': expected an integer" "$S" train --config bad.yaml
expect_fail "'missing.txt'" "$S" train --data.path=missing.txt --train.out_dir=out1
expect_fail "needs model.vocab_size >= 256 (it is 100)" "$S" train --data.path=t.txt --model.vocab_size=100 --train.out_dir=out2
printf "\x01\x00\xff\x00" > big.bin
expect_fail "'big.bin': token 255 at position 1 is outside the vocabulary [0, 100)" "$S" train --data.path=big.bin --model.vocab_size=100 --train.out_dir=out3
expect_fail "train.seq_len: 4096 exceeds model.max_seq_len 128" "$S" train --train.seq_len=4096
expect_fail "unknown command 'trian'" "$S" trian
expect_fail "safetensors 't.txt'" "$S" generate --checkpoint t.txt
test ! -e out1 && test ! -e out2 && test ! -e out3 || { echo "a failed run left files behind"; exit 1; }
echo ok
