#!/usr/bin/env bash
# timeout: 120
# Bad input: one-line error naming the key, option, file or value and what
# was expected (a 10,000-character value does not push that out), exit
# status 2 for every kind (note [exit-status]), and nothing written.
set -uo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
printf 'hello world, hello world\n%.0s' $(seq 1 50) > t.txt

expect_fail() { # expected-substring command...
  local want="$1"; shift
  local err
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 2 ]; then echo "expected exit status 2 (bad input), got $rc: $*: $err"; exit 1; fi
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

# every numeric option of every command through one checked parser naming it
expect_fail "launch: -n '99999999999': expected an integer in [1, 65536]" "$S" launch -n 99999999999 echo x
expect_fail "launch: -n '2x': expected an integer in [1, 65536]" "$S" launch -n 2x echo x
expect_fail "launch: -n '0': expected an integer in [1, 65536]" "$S" launch -n=0 echo x
expect_fail "launch: -np needs a value" "$S" launch -np
expect_fail "generate: --tokens 'abc': expected an integer in [0, 16777216]" "$S" generate --checkpoint x --tokens abc
expect_fail "generate: --tokens '-1': expected an integer in [0, 16777216]" "$S" generate --checkpoint x --tokens -1
expect_fail "generate: --temperature 'hot': expected a number in [0, 1e+06]" "$S" generate --checkpoint x --temperature hot
expect_fail "generate: --top-k 'many': expected an integer in [0, 1073741824]" "$S" generate --checkpoint x --top-k many
expect_fail "generate: --seed 'xyz': expected an integer in [0, 18446744073709551615]" "$S" generate --checkpoint x --seed xyz
expect_fail "generate: --threads 'lots': expected an integer in [0, 4096]" "$S" generate --checkpoint x --threads=lots
expect_fail "generate: --timeout '-5': expected an integer in [0, 2147483647]" "$S" generate --checkpoint x --timeout -5
expect_fail "generate: unknown option '--token'" "$S" generate --checkpoint x --token 5
expect_fail "eval: --infer_batch_size 'x': expected an integer in [0, 1048576]" "$S" eval --checkpoint x --data.path t.txt --infer_batch_size x
expect_fail "eval: --seq_len '-3': expected an integer in [0, 16777216]" "$S" eval --checkpoint x --data.path t.txt --seq_len -3
expect_fail "eval: --eval_batches '1e3': expected an integer in [0, 1099511627776]" "$S" eval --checkpoint x --data.path t.txt --eval_batches 1e3
expect_fail "eval: --threads '9999': expected an integer in [0, 4096]" "$S" eval --checkpoint x --data.path t.txt --threads 9999
expect_fail "export: --max-shard-size '12MB': expected an integer in [0, 18446744073709551615]" "$S" export --checkpoint x --out y --max-shard-size 12MB
expect_fail "export: --max-shard-size '-5': expected an integer" "$S" export --checkpoint x --out y --max-shard-size -5
expect_fail "import: --timeout 'soon': expected an integer in [0, 2147483647]" "$S" import --hf x --out y --timeout soon

# config files: empty, only comments, no key; truncated YAML and JSON
: > empty.yaml
expect_fail "config 'empty.yaml': the file is empty (0 bytes); expected a mapping of sections (model:, data:" "$S" train --config empty.yaml
printf '# nothing here\n\n' > comments.yaml
expect_fail "config 'comments.yaml': the file sets no key; expected a mapping" "$S" config --config comments.yaml
printf '{"model": {"num_layers": 2, ' > trunc.json
expect_fail "config 'trunc.json' line 1: not valid YAML: did not find expected node content (the text ends there, inside a value: a truncated file?)" "$S" train --config trunc.json
mkdir -p hfcut && printf '{"model_type": "gpt2", "n_embd": 4' > hfcut/config.json
expect_fail "'hfcut/config.json' is not valid JSON (it ends before the JSON value does: a truncated file?)" "$S" import --hf hfcut --out x.safetensors

mkdir -p hfnoweights && printf '{"model_type": "gpt2", "n_embd": 48, "n_layer": 2, "n_head": 3, "vocab_size": 256, "n_positions": 16}' > hfnoweights/config.json
expect_fail "'hfnoweights' has neither model.safetensors nor model.safetensors.index.json" "$S" import --hf hfnoweights --out x.safetensors

# a 10,000-character value: the message still ends with what was expected
long=$(head -c 10000 /dev/zero | tr '\0' a)
digits=$(head -c 10000 /dev/zero | tr '\0' 9)
expect_fail "train.out_dir = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... (10000 characters)': expected at most 1023 bytes" "$S" train --train.out_dir=$long
expect_fail "model.num_layers = '999999999999999999999999999999999999999999999999... (10000 characters)': expected an integer" "$S" train --model.num_layers=$digits
expect_fail "generate: --tokens '999999999999999999999999999999999999999999999999... (10000 characters)': expected an integer in [0, 16777216]" "$S" generate --checkpoint x --tokens $digits
expect_fail "command line: option '--aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... (10004 characters)' is too long for a key" "$S" train --$long.x=1
expect_fail "unknown command 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... (10000 characters)'" "$S" $long
printf 'model:\n  family: %s\n' "$long" > longval.yaml
expect_fail "model.family = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... (10000 characters)': expected one of gpt2, llama" "$S" config --config longval.yaml

# the saved config.yaml: every section once (a YAML reader keeps one of a repeated key)
"$S" config --train.out_dir=o > resolved.yaml || { echo "sharc config failed"; exit 1; }
[ -z "$(grep -E '^[a-z_]+:' resolved.yaml | sort | uniq -d)" ] || { echo "repeated sections: $(grep -E '^[a-z_]+:' resolved.yaml | sort | uniq -d)"; exit 1; }
[ "$(grep -cE '^[a-z_]+:' resolved.yaml)" -eq 8 ] || { echo "sections: $(grep -E '^[a-z_]+:' resolved.yaml)"; exit 1; }
echo ok
