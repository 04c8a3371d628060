#!/usr/bin/env bash
# timeout: 150
# sharc launch -n 2 runs a two-stage config (training_stages): stage 2
# starts from stage 1's final weights (model.init_from), checked exactly:
# stage 2 trains with lr 0, so its final weights are the ones it loaded.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/timeout_lib.inc" # inner timeouts follow --timeout-scale
cd "$TMPDIR"
fail() { echo "$*"; exit 1; }
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
cat > stages.yaml <<'Y'
model: {num_layers: 2, embed_dim: 32, num_heads: 2, max_seq_len: 16}
data: {path: text.txt}
train: {seq_len: 16, batch_size: 2, log_every: 1, out_dir: st}
training_stages:
  stage1:
    train: {max_steps: 3}
    optim: {lr: 0.01, warmup_steps: 0}
  stage2:
    training: {max_steps: 1}
    optim: {lr: 0, weight_decay: 0, warmup_steps: 0}
Y
# no OMPI_ALLOW_RUN_AS_ROOT and friends: launch adds the flags itself
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
export OMPI_MCA_btl_base_warn_component_unused=0
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
out=$(timeout 120 "$SHARC_BIN/sharc" launch -n 2 train --config stages.yaml 2>&1); rc=$?
[ $rc -eq 0 ] || fail "launch exited $rc: $out"
grep -q "^sharc launch: mpirun -n 2 " <<< "$out" || fail "$out"
grep -q "2 ranks (FULL_SHARD: 2 shard x 1 replicate)" <<< "$out" || fail "$out"
grep -q "sharc: stage 1/2 'stage1' in st/stage1$" <<< "$out" || fail "$out"
grep -q "sharc: stage 2/2 'stage2' in st/stage2, from st/stage1/model.safetensors" <<< "$out" || fail "$out"
grep -q "init_from: \"st/stage1/model.safetensors\"" st/stage2/config.yaml || fail "stage 2's config: $(cat st/stage2/config.yaml)"
# the tensors of a safetensors file: everything after its header
data_of() { local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' '); tail -c +$((9 + n)) "$1"; }
cmp -s <(data_of st/stage1/model.safetensors) <(data_of st/stage2/model.safetensors) ||
  fail "stage 2 did not start from stage 1's final weights"
# control: stage 2 alone (no previous stage) starts elsewhere
out=$(timeout 120 "$SHARC_BIN/sharc" launch -n 2 train --config stages.yaml --stage stage2 --train.out_dir=alone 2>&1) ||
  fail "$out"
cmp -s <(data_of st/stage1/model.safetensors) <(data_of alone/model.safetensors) && fail "the control run matched"
echo ok
