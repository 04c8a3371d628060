#!/usr/bin/env bash
# timeout: 60
# The command line: the seeds' shorthand flags, presets, JSON files, the
# warnings for accepted-but-unimplemented options, train.epochs, and one-line
# errors for bad flags and values.
set -uo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
fail() { echo "$*"; exit 1; }
has() { grep -qF -- "$1" <<< "$2" || fail "missing '$1' in: $2"; }

out=$("$S" config --batch-size 3 --grad-accum=2 --precision bf16-mixed --sharding SHARD_GRAD_OP \
      --no-activation-checkpoint --limit-all-gathers --epochs 2.5 --use-orig-params 2>&1) || fail "$out"
for want in "batch_size: 3" "grad_accum: 2" "param_dtype: bf16" "reduce_dtype: fp32" "sharding_strategy: SHARD_GRAD_OP" \
            "activation_checkpointing: false" "limit_all_gathers: 2" "epochs: 2.5" "use_orig_params: true"; do
  has "$want" "$out"
done
out=$("$S" config --activation-checkpoint --no-limit-all-gathers --precision 16-mixed 2>&1) || fail "$out"
has "activation_checkpointing: true" "$out"; has "limit_all_gathers: 0" "$out"; has "param_dtype: fp16" "$out"
# OpenRLHF's flags and MindSpeed-MM's fsdp2 prefetch counts
out=$("$S" config --gradient_checkpointing --param_dtype bf16 --micro_train_batch_size 2 \
      --fsdp_config.num_to_forward_prefetch=2 --fsdp_config.num_to_backward_prefetch=0 --fsdp_config.sharding_size=4 2>&1) || fail "$out"
for want in "activation_checkpointing: true" "param_dtype: bf16" "batch_size: 2" "forward_prefetch: true" \
            "backward_prefetch: NONE" "fsdp_size: 4" "forward_prefetch_depth: 2"; do
  has "$want" "$out"
done
# a prefetch count is honoured now (note [prefetch-depth]): no warning
! grep -q "warning: fsdp_config.num_to_forward_prefetch" <<< "$out" || fail "$out"
# OpenRLHF's SFT flags (train_sft.py's names) and the OpenRLHF-style YAML key data.dataset
out=$("$S" config --pretrain hf_dir --dataset d.jsonl --input_key question --output_key response \
      --input_template $'Q: {}\nA: ' --apply_chat_template --multiturn --max_len 64 --tokenizer tok.json \
      --train.seq_len=63 --packing_samples 2>&1) || fail "$out"
for want in 'init_from: "hf_dir"' 'path: "d.jsonl"' 'input_key: "question"' 'output_key: "response"' \
            'input_template: "Q: {}\nA: "' "apply_chat_template: true" "multiturn: true" "max_len: 64" \
            'tokenizer: "tok.json"' "packing: true"; do
  has "$want" "$out"
done
out=$(printf 'data:\n  dataset: x.jsonl\n  loss_mask: openrlhf\ntrain:\n  loss_normalization: micro_batch\n' > o.yaml &&
      "$S" config --config o.yaml 2>&1) || fail "$out"
has 'path: "x.jsonl"' "$out"; has "loss_mask: openrlhf" "$out"; has "loss_normalization: micro_batch" "$out"
# presets: on the command line and in a file, keys after them win
out=$("$S" config --preset large_scale --fsdp.forward_prefetch=false 2>&1) || fail "$out"
has "backward_prefetch: BACKWARD_PRE" "$out"; has "forward_prefetch: false" "$out"; has "activation_checkpointing: true" "$out"
out=$("$S" config --fsdp-config multi_node_fsdp 2>&1) || fail "$out"
has "limit_all_gathers: 2" "$out"
# JSON file
cat > c.json <<'J'
{"model": {"num_layers": 3, "embed_dim": 64, "num_heads": 4},
 "distributed": {"fsdp": {"sharding_strategy": "NO_SHARD", "cpu_offload": true}},
 "training": {"gradient_accumulation_steps": 4}}
J
out=$("$S" config --config c.json 2>&1) || fail "$out"
has "num_layers: 3" "$out"; has "sharding_strategy: NO_SHARD" "$out"; has "grad_accum: 4" "$out"
has "warning: fsdp.cpu_offload (or offload_policy) = true has no effect on train.device cpu" "$out"

# train.epochs: max_steps = ceil(epochs x windows / sequences per step)
printf 'hello world, hello world\n%.0s' $(seq 1 200) > t.txt
tiny="--data.path=t.txt --model.num_layers=1 --model.embed_dim=16 --model.num_heads=2 --model.max_seq_len=16 --train.seq_len=16 --train.log_every=1000"
out=$("$S" train $tiny --batch-size 4 --epochs 0.5 --train.out_dir=ep 2>&1) || fail "$out"
windows=$(sed -n 's/.*tokens, \([0-9]*\) windows of.*/\1/p' <<< "$out")
[ -n "$windows" ] || fail "no window count in: $out"
want=$(( (windows + 7) / 8 ))   # ceil(0.5 * windows / 4 sequences per step)
grep -qE "^step +$want/$want \|" <<< "$out" || fail "expected $want steps: $out"
has "max_steps: $want" "$(cat ep/config.yaml)"
# a cpu_offload run says so once, at start
out=$("$S" train $tiny --fsdp.cpu_offload=true --train.max_steps=1 --train.out_dir=off 2>&1) || fail "$out"
[ "$(grep -c 'fsdp.cpu_offload (or offload_policy) = true has no effect on train.device cpu' <<< "$out")" -eq 1 ] || fail "$out"

expect_fail() { # expected-substring command...
  local want="$1"; shift
  local err
  err=$("$@" 2>&1 >/dev/null); rc=$?
  [ $rc -ne 0 ] || fail "expected failure: $*"
  grep -qF -- "$want" <<< "$err" || fail "message for '$*' was: $err; expected: $want"
  [ "$(wc -l <<< "$err")" -eq 1 ] || fail "expected one line, got: $err"
}
expect_fail "command line --precision: precision 'fp8': expected fp32" "$S" config --precision fp8
expect_fail "command line: --activation-checkpoint takes no value" "$S" config --activation-checkpoint=yes
expect_fail "command line --batch-size: train.batch_size = '0': expected a value in [1, 1048576]" "$S" config --batch-size 0
expect_fail "preset = 'tiny': expected one of single_node, multi_node, large_scale" "$S" config --preset tiny
expect_fail "command line --sharding: fsdp.sharding_strategy = 'ZERO3'" "$S" config --sharding ZERO3
expect_fail "fsdp_config.num_to_backward_prefetch = 'x': expected a count >= 0" "$S" config --fsdp_config.num_to_backward_prefetch=x
expect_fail "command line --stage: no stage 'stage9' in training_stages (0 defined)" "$S" config --stage stage9
expect_fail "model.init_from" "$S" train $tiny --model.init_from=missing.safetensors --train.out_dir=nope
test ! -e nope || fail "a failed run left files behind"
echo ok
