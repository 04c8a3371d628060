#!/usr/bin/env bash
# timeout: 300
# Checkpoints across ranks (docs/ARCHITECTURE.md, "Checkpoints"):
#  - saved at 4 ranks FULL_SHARD (sync and ckpt.async: the same files; also
#    HYBRID_SHARD 2x2 and 2-rank NO_SHARD, where only replicate group 0 writes), loaded
#    at 1, 2, 3 and 4 ranks under FULL_SHARD, NO_SHARD, SHARD_GRAD_OP and
#    HYBRID_SHARD 2x2: every parameter and moment exactly as saved (against
#    a gather made by the saving run), then 3 more steps against a one-process
#    run of all 6 (note [parity-tolerance]); GPT-2 and Llama;
#  - sharc train at 2 ranks killed during a save resumes bit for bit, with no
#    leftover and every step once in metrics.jsonl; its checkpoint exports
#    (one process) the same weights as the run's file;
#  - a missing shard fails every rank with a message, no hang.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
cd "$TMPDIR"
make_text text.txt
T="$SHARC_BIN/mpi_tests"
run() { # N args...
  local n=$1; shift
  local out
  if ! out=$(mpi $n "$T" "$@" 2>&1); then echo "FAILED at $n ranks: $*"; echo "$out" | grep -v '^ok' | head -20; exit 1; fi
  grep '^resumed at' <<< "$out" | sed "s|\$| [$*]|" || true
}
for fam in gpt2 llama; do
  if [ $fam = llama ]; then m="model.family=llama model.num_kv_heads=1 model.tie_embeddings=false model.ff_hidden_dim=70"
  else m="model.family=gpt2"; fi
  rm -rf s4 a4
  run 4 ckpt_save s4 ref.st text.txt $m train.batch_size=1 train.grad_accum=3
  run 4 ckpt_save a4 ref_async.st text.txt $m train.batch_size=1 train.grad_accum=3 ckpt.async=true
  for f in s4/step-00000003/*.bin; do cmp "$f" "a4/step-00000003/$(basename $f)"; done
  diff <(grep -v '"config"' s4/step-00000003/manifest.json) <(grep -v '"config"' a4/step-00000003/manifest.json)
  cmp ref.st ref_async.st
  run 1 ckpt_load s4 ref.st text.txt $m train.batch_size=1 train.grad_accum=12
  run 2 ckpt_load s4 ref.st text.txt $m train.batch_size=1 train.grad_accum=6 fsdp.sharding_strategy=NO_SHARD
  run 3 ckpt_load s4 ref.st text.txt $m train.batch_size=1 train.grad_accum=4
  run 3 ckpt_load s4 ref.st text.txt $m train.batch_size=1 train.grad_accum=4 fsdp.sharding_strategy=NO_SHARD
  run 4 ckpt_load s4 ref.st text.txt $m train.batch_size=1 train.grad_accum=3 fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2
done
run 2 ckpt_load s4 ref.st text.txt $m train.batch_size=1 train.grad_accum=6 fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2
run 4 ckpt_load s4 ref.st text.txt $m train.batch_size=1 train.grad_accum=3 fsdp.sharding_strategy=SHARD_GRAD_OP
# saved by replicated strategies (only replicate group 0 writes)
rm -rf h4 n2
run 4 ckpt_save h4 ref_h.st text.txt train.batch_size=1 train.grad_accum=3 fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2
run 3 ckpt_load h4 ref_h.st text.txt train.batch_size=1 train.grad_accum=4
run 2 ckpt_save n2 ref_n.st text.txt train.batch_size=1 train.grad_accum=6 fsdp.sharding_strategy=NO_SHARD
run 3 ckpt_load n2 ref_n.st text.txt train.batch_size=1 train.grad_accum=4 fsdp.sharding_strategy=FULL_SHARD
ls h4/step-00000003/shard-00001-of-00002.bin n2/step-00000003/shard-00000-of-00001.bin >/dev/null
# frozen parameters (note [frozen-params]): saved at 4 ranks, resumed at 3 (FULL_SHARD) and 2 (NO_SHARD);
# a frozen unit's moments are zeros in the file and are not loaded
rm -rf f4
F="model.freeze_module_prefix=wte,wpe,h.0."
run 4 ckpt_save f4 ref_f.st text.txt $F train.batch_size=1 train.grad_accum=3
run 3 ckpt_load f4 ref_f.st text.txt $F train.batch_size=1 train.grad_accum=4
run 2 ckpt_load f4 ref_f.st text.txt $F train.batch_size=1 train.grad_accum=6 fsdp.sharding_strategy=NO_SHARD

# sharc train at 2 ranks: killed in the save of step 4, resumed: the same step-6 files
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.max_steps=6 --train.threads=1 --ckpt.every=2 --log.peak_tflops=1"
mpi 2 "$SHARC_BIN/sharc" train $M --train.out_dir=ref >/dev/null 2>&1
set +e
SHARC_CKPT_KILL_AT=after-shards SHARC_CKPT_KILL_STEP=4 mpi 2 -x SHARC_CKPT_KILL_AT -x SHARC_CKPT_KILL_STEP \
  "$SHARC_BIN/sharc" train $M --train.out_dir=k >/dev/null 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "the killed run exited $rc"; exit 1; }
[ -d k/checkpoints/step-00000004.tmp ] && [ -d k/checkpoints/step-00000002 ] || { ls k/checkpoints; exit 1; }
out=$(mpi 2 "$SHARC_BIN/sharc" train $M --train.out_dir=k --ckpt.resume=auto 2>&1)
grep -q "resumed from k/checkpoints/step-00000002 at step 2 (written by 2 ranks, FULL_SHARD;" <<< "$out" || { echo "$out"; exit 1; }
for f in ref/checkpoints/step-00000006/*.bin; do cmp "$f" "k/checkpoints/step-00000006/$(basename $f)"; done
# no leftover of any kind, every step once in the metrics
[ "$(cd k && find . -not -path './checkpoints/step-0000000[46]/*' | sort | tr '\n' ' ')" = \
  ". ./checkpoints ./checkpoints/latest ./checkpoints/step-00000004 ./checkpoints/step-00000006 ./config.yaml ./metrics.jsonl ./model.safetensors " ] ||
  { echo "leftovers: $(cd k && find . | sort | tr '\n' ' ')"; exit 1; }
[ "$(jq -r .step k/metrics.jsonl | tr '\n' ' ')" = "1 2 3 4 5 6 " ] || { echo "metrics: $(jq -r .step k/metrics.jsonl)"; exit 1; }
echo "2 ranks: killed and resumed bit-exact"
# one process exports the 2-rank checkpoint (resharded on load) as the final weights
"$SHARC_BIN/sharc" export --checkpoint ref/checkpoints --out e_ck >/dev/null
"$SHARC_BIN/sharc" export --checkpoint ref --out e_w >/dev/null
cmp e_ck/model.safetensors e_w/model.safetensors

# a missing shard: every rank stops with a message
rm k/checkpoints/step-00000006/shard-00001-of-00002.bin
set +e
out=$(mpi 2 "$SHARC_BIN/sharc" train $M --train.out_dir=k2 --ckpt.resume=k/checkpoints/step-00000006 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "expected a failure, got $rc: $out"; exit 1; }
grep -q "shard-00001-of-00002.bin': cannot open shard file" <<< "$out" || { echo "$out"; exit 1; }
[ "$(grep -c 'error:' <<< "$out")" -eq 2 ] || { echo "$out"; exit 1; }
[ ! -e k2 ] || { echo "a failed resume wrote k2"; exit 1; }
echo ok
