#!/usr/bin/env bash
# timeout: 180
# sharc export / sharc import: a trained model goes to a Hugging Face
# directory and back; the round trip is exact (the re-exported directory is
# byte-identical and generate samples the same text); bad directories and
# targets give one-line errors, a non-zero exit, and nothing overwritten.
set -euo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
for i in $(seq 1 100); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > text.txt

expect_fail() { # expected-substring command...
  local want="$1"; shift
  local err rc
  set +e; err=$("$@" 2>&1 >/dev/null); rc=$?; set -e
  if [ $rc -eq 0 ]; then echo "expected failure: $*"; exit 1; fi
  if ! grep -qF -- "$want" <<< "$err"; then echo "message for '$*' was: $err"; echo "expected: $want"; exit 1; fi
  if [ "$(wc -l <<< "$err")" -ne 1 ]; then echo "expected one line, got: $err"; exit 1; fi
}

for fam in gpt2 llama qwen3; do
  extra=""  # qwen3: the Llama block with q/k norms and head_dim 20 != 48/3 (model_type qwen3 on export)
  [ $fam = qwen3 ] && extra="--model.qk_norm=true --model.head_dim=20 --model.tie_embeddings=true"
  "$S" train --model.family=$([ $fam = gpt2 ] && echo gpt2 || echo llama) --model.num_layers=2 --model.embed_dim=48 \
      --model.num_heads=3 --model.num_kv_heads=$([ $fam = gpt2 ] && echo 3 || echo 1) --model.max_seq_len=32 $extra \
      --data.path=text.txt --train.seq_len=32 --train.batch_size=4 --train.max_steps=3 \
      --train.log_every=10 --train.out_dir=run_$fam > log_$fam.txt
  shard=$([ $fam = llama ] && echo 60000 || echo 0)
  "$S" export --checkpoint run_$fam --out hf_$fam --max-shard-size $shard
  test -s hf_$fam/config.json
  if [ $fam = qwen3 ]; then grep -q '"model_type": "qwen3"' hf_$fam/config.json; grep -q '"head_dim": 20' hf_$fam/config.json; fi
  if [ $fam = llama ]; then test -s hf_$fam/model.safetensors.index.json; ls hf_$fam/model-00001-of-*.safetensors; fi
  "$S" import --hf hf_$fam --out imported_$fam.safetensors
  "$S" export --checkpoint imported_$fam.safetensors --out hf2_$fam --max-shard-size $shard
  diff -r hf_$fam hf2_$fam
  a=$("$S" generate --checkpoint run_$fam --prompt "the quick" --tokens 30 --temperature 0)
  b=$("$S" generate --checkpoint imported_$fam.safetensors --prompt "the quick" --tokens 30 --temperature 0)
  [ "$a" = "$b" ] || { echo "generate differs after import: '$a' vs '$b'"; exit 1; }
  "$S" export --checkpoint run_$fam --out bf16_$fam/ --dtype bf16
  grep -q '"torch_dtype": "bfloat16"' bf16_$fam/config.json
  # --model.init_from=HF_DIR: the model comes from config.json (no model.* keys
  # given), the weights from the files; lr 0 leaves them as loaded, so the
  # re-export is byte-identical
  "$S" train --model.init_from=hf_$fam --data.path=text.txt --train.seq_len=32 --train.batch_size=4 \
      --train.max_steps=1 --optim.lr=0 --train.out_dir=init_$fam > log_init_$fam.txt
  "$S" export --checkpoint init_$fam --out hf3_$fam --max-shard-size $shard
  diff -r hf_$fam hf3_$fam
  mkdir empty_$fam && "$S" export --checkpoint run_$fam --out empty_$fam > /dev/null  # an empty target is fine
  if [ $fam = gpt2 ]; then cmp empty_$fam/model.safetensors hf_$fam/model.safetensors; else test -s empty_$fam/model.safetensors; fi
done

# bad input: nothing is overwritten
cp imported_gpt2.safetensors keep.safetensors
expect_fail "is not empty; refusing" "$S" export --checkpoint run_gpt2 --out hf_llama
diff -r hf_llama hf2_llama
expect_fail "cannot open '$PWD/none/config.json'" "$S" import --hf "$PWD/none" --out imported_gpt2.safetensors
cp -r hf_gpt2 badcfg && printf '{"model_type": "gpt2", ' > badcfg/config.json
expect_fail "config.json' is not valid JSON" "$S" import --hf badcfg --out imported_gpt2.safetensors
cp -r hf_gpt2 other && cp hf_llama/config.json other/config.json
expect_fail "parameter 'model.embed_tokens.weight' is missing" "$S" import --hf other --out imported_gpt2.safetensors
cp -r hf_gpt2 trunc && head -c 5000 hf_gpt2/model.safetensors > trunc/model.safetensors
expect_fail "trunc/model.safetensors': tensors cover" "$S" import --hf trunc --out imported_gpt2.safetensors
cp -r hf_llama noshard && rm noshard/model-00002-of-*.safetensors
expect_fail "is missing" "$S" import --hf noshard --out imported_gpt2.safetensors
# a config.json key sharc does not know may change the math: refused by name, exit status 2
cp -r hf_llama unknown && sed -i 's/"rms_norm_eps"/"attn_logit_softcapping": 30.0, "rms_norm_eps"/' unknown/config.json
expect_fail "key \"attn_logit_softcapping\" is not one sharc knows" "$S" import --hf unknown --out imported_gpt2.safetensors
set +e; "$S" import --hf unknown --out imported_gpt2.safetensors 2>/dev/null; rc=$?; set -e
[ $rc -eq 2 ] || { echo "unknown key: exit status $rc, expected 2"; exit 1; }
cmp keep.safetensors imported_gpt2.safetensors
expect_fail "--dtype 'int8': expected fp32, bf16 or fp16" "$S" export --checkpoint run_gpt2 --out x --dtype int8
expect_fail "not a sharc weights file" "$S" export --checkpoint hf_gpt2/model.safetensors --out x
test ! -e x
ls -d *.sharc-tmp-* 2>/dev/null && { echo "temporary directories left behind"; exit 1; }
echo ok
